package main

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

func reloadDaemon(t *testing.T, status int, body any) string {
	t.Helper()
	return localclienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != apitype.PathReload || r.Host != apitype.Host {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, status, body)
	}))
}

func TestReload(t *testing.T) {
	sock := reloadDaemon(t, http.StatusOK, []apitype.Warning{})
	r := meshctl(t, "--socket", sock, "reload")
	if r.exit != 0 || r.stdout != "config reloaded\n" || r.stderr != "" {
		t.Fatalf("reload: %+v", r)
	}

	sock = reloadDaemon(t, http.StatusOK, []apitype.Warning{{Code: codes.RestartNeeded, Detail: "changed, not applied until restart: ports.gossip"}})
	r = meshctl(t, "--socket", sock, "reload")
	if r.exit != 0 || !strings.HasPrefix(r.stderr, "warning "+string(codes.RestartNeeded)) || !strings.Contains(r.stderr, "ports.gossip") {
		t.Fatalf("reload with a restart-needed change: %+v", r)
	}
	r = meshctl(t, "--socket", sock, "reload", "-o", "json")
	if r.exit != 0 || !strings.Contains(r.stdout, `"code": "`+string(codes.RestartNeeded)+`"`) {
		t.Fatalf("reload -o json: %+v", r)
	}

	sock = reloadDaemon(t, codes.ConfigInvalid.Status(), apitype.NewError(codes.ConfigInvalid, errors.New(`config field log_level="loud": bad`)))
	r = meshctl(t, "--socket", sock, "reload")
	checkFailure(t, r, exitFailure, codes.ConfigInvalid)
	if !strings.Contains(r.stderr, "log_level") {
		t.Fatalf("the refused field is not named:\n%s", r.stderr)
	}

	checkFailure(t, meshctl(t, "--socket", nowhere(t), "reload"), exitUnreachable, codes.DaemonUnreachable)
}

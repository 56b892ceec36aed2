package main

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// TestAdmitNebulaOnly: `admit NAME --nebula-only` asks meshd for a stock
// Nebula member's token (role nebula), --renew and --cert-lifetime go
// with it, and the output says what the token admits and what to run on
// the device. Goldens: testdata/admit-nebula_*.golden.
func TestAdmitNebulaOnly(t *testing.T) {
	const token = "mesh1_0123456789abcdef-nebula-checksum"
	exp := time.Date(2031, 1, 1, 0, 15, 0, 0, time.UTC)
	base := apitype.AdmitResponse{Token: token, ID: "0123456789ab", Name: "phone1", Role: "nebula", Expires: exp,
		Command: "meshctl nebula-bundle --token-file phone1.token --generate --out phone1", NebulaOnly: true}
	withGroups := base
	withGroups.Groups, withGroups.CertLifetime = []string{"mobile"}, 720*time.Hour
	renewal := base
	renewal.Renew, renewal.Command = true, "meshctl nebula-bundle --token-file phone1.token --renew --pubkey host.pub --out phone1"
	tests := []struct {
		name    string
		args    []string
		wantReq apitype.AdmitRequest
		resp    apitype.AdmitResponse
	}{
		{"admit-nebula/table", []string{"admit", "phone1", "--nebula-only"},
			apitype.AdmitRequest{Name: "phone1", Role: "nebula", TTL: 15 * time.Minute, NebulaOnly: true}, base},
		{"admit-nebula/groups-lifetime", []string{"admit", "phone1", "--nebula-only", "--group", "mobile", "--cert-lifetime", "720h", "--addr", "192.0.2.9"},
			apitype.AdmitRequest{Name: "phone1", Role: "nebula", TTL: 15 * time.Minute, Addr: "192.0.2.9", Groups: []string{"mobile"},
				NebulaOnly: true, CertLifetime: 720 * time.Hour}, withGroups},
		{"admit-nebula/renew", []string{"admit", "phone1", "--nebula-only", "--renew", "--ttl", "30m"},
			apitype.AdmitRequest{Name: "phone1", Role: "nebula", TTL: 30 * time.Minute, NebulaOnly: true, Renew: true}, renewal},
		{"admit-nebula/json", []string{"admit", "phone1", "--nebula-only", "--group", "mobile", "--cert-lifetime", "720h", "-o", "json"},
			apitype.AdmitRequest{Name: "phone1", Role: "nebula", TTL: 15 * time.Minute, Groups: []string{"mobile"},
				NebulaOnly: true, CertLifetime: 720 * time.Hour}, withGroups},
		{"admit-nebula/renew-json", []string{"admit", "phone1", "--nebula-only", "--renew", "-o", "json"},
			apitype.AdmitRequest{Name: "phone1", Role: "nebula", TTL: 15 * time.Minute, NebulaOnly: true, Renew: true}, renewal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := make(chan apitype.AdmitRequest, 1)
			sock := localclienttest.Serve(t, &fakeMeshd{admit: func(w http.ResponseWriter, r *http.Request) {
				var req apitype.AdmitRequest
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
					writeJSON(w, http.StatusBadRequest, apitype.NewError(codes.BadRequest, err))
					return
				}
				reqs <- req
				writeJSON(w, http.StatusOK, tt.resp)
			}})
			r := meshctl(t, append([]string{"--socket", sock}, tt.args...)...)
			if r.exit != exitOK {
				t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
			}
			select {
			case got := <-reqs:
				if !reflect.DeepEqual(got, tt.wantReq) {
					t.Errorf("meshd got %+v, want %+v", got, tt.wantReq)
				}
			default:
				t.Fatal("meshd saw no admit request")
			}
			if strings.HasSuffix(tt.name, "json") {
				var m map[string]any
				if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
					t.Fatalf("stdout is not a JSON object (%v):\n%s", err, r.stdout)
				}
				if m["nebula_only"] != true || m["token"] != token || m["name"] != "phone1" || m["role"] != "nebula" {
					t.Errorf("json %v: want nebula_only true, the token, name phone1 and role nebula", m)
				}
				if _, ok := m["renew"]; ok != tt.resp.Renew {
					t.Errorf("json renew present %v, want %v", ok, tt.resp.Renew)
				}
				if lt, ok := m["cert_lifetime"]; tt.resp.CertLifetime > 0 && lt != "720h0m0s" || tt.resp.CertLifetime == 0 && ok {
					t.Errorf("json cert_lifetime %v, want %q or absent for the cluster's default", lt, tt.resp.CertLifetime)
				}
			} else if l := lines(r.stdout); len(l) == 0 || l[len(l)-1] != token {
				t.Fatalf("last stdout line is not the token alone:\n%s", r.stdout)
			}
			// The table shows local time, the JSON UTC.
			checkGolden(t, tt.name, r, exp.Local().Format(time.RFC3339), "EXPIRES", exp.Format(time.RFC3339), "EXPIRES")
		})
	}
}

// TestAdmitNebulaFlagsFit: flags that do not fit a stock Nebula member's
// token, or that need --nebula-only, are refused BadRequest before meshd
// is asked.
func TestAdmitNebulaFlagsFit(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in the detail
	}{
		{"renew-without-nebula-only", []string{"admit", "w1", "--renew"}, "--renew is for a stock Nebula member's token: add --nebula-only"},
		{"cert-lifetime-without-nebula-only", []string{"admit", "w1", "--cert-lifetime", "24h"}, "--cert-lifetime is for a stock Nebula member's token"},
		{"reusable", []string{"admit", "phone1", "--nebula-only", "--reusable", "--uses", "3"}, "--reusable does not go with --nebula-only"},
		{"uses", []string{"admit", "phone1", "--nebula-only", "--uses", "3"}, "--uses does not go with --nebula-only"},
		{"role", []string{"admit", "phone1", "--nebula-only", "--role", "worker"}, "--role does not go with --nebula-only: a stock Nebula member's role is nebula"},
		{"approve", []string{"admit", "phone1", "--nebula-only", "--approve"}, "--approve does not go with --nebula-only"},
		{"ephemeral", []string{"admit", "phone1", "--nebula-only", "--ephemeral"}, "--ephemeral does not go with --nebula-only"},
		{"renew-with-group", []string{"admit", "phone1", "--nebula-only", "--renew", "--group", "db"}, "--group does not go with --renew"},
		{"zero-cert-lifetime", []string{"admit", "phone1", "--nebula-only", "--cert-lifetime", "0s"}, "--cert-lifetime 0s: want a positive duration"},
		{"negative-cert-lifetime", []string{"admit", "phone1", "--nebula-only", "--cert-lifetime", "-1h"}, "want a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := localclienttest.Serve(t, &fakeMeshd{admit: func(w http.ResponseWriter, _ *http.Request) {
				t.Error("meshd was asked")
			}})
			r := meshctl(t, append([]string{"--socket", sock}, tc.args...)...)
			checkFailure(t, r, exitFailure, codes.BadRequest)
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
	// Without a NAME, --nebula-only is a usage error even with --reusable.
	if r := meshctl(t, "--socket", nowhere(t), "admit", "--nebula-only", "--reusable", "--uses", "3"); r.exit != exitUsage {
		t.Fatalf("admit --nebula-only --reusable without NAME: exit %d, want %d\n%s", r.exit, exitUsage, r.stderr)
	}
}

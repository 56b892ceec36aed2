package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// TestUIAddrRefused: `meshctl ui` refuses an --addr that is not loopback
// with ConsoleAddr (exit 1), before binding anything.
func TestUIAddrRefused(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":8080", "192.0.2.1:8080", "[::]:0", "example.com:80"} {
		r := meshctl(t, "--socket", nowhere(t), "ui", "--addr", addr)
		checkFailure(t, r, exitFailure, codes.ConsoleAddr)
		if strings.Contains(r.stdout, "token=") {
			t.Errorf("--addr %s: a URL was printed", addr)
		}
	}
}

// TestUIServesUntilStopped: `meshctl ui` prints a loopback URL with the
// secret, serves the console through meshd's socket, and returns 0 when its
// context ends (SIGINT and SIGTERM end it in main).
func TestUIServesUntilStopped(t *testing.T) {
	fake := &fakeMeshd{
		status: func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, apitype.Status{State: "running", Cluster: "prod", Node: "cp1", Role: "control"})
		},
		nodes: func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, []apitype.Node{{Name: "cp1", Role: "control", State: "active", Gossip: "alive", Self: true}})
		},
	}
	sock := localclienttest.Serve(t, fake)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	outR, outW := io.Pipe()
	var stderr strings.Builder
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"--socket", sock, "ui"}, strings.NewReader(""), outW, &stderr)
		_ = outW.Close()
	}()
	sc := bufio.NewScanner(outR)
	var url string
	for url == "" && sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "http://127.0.0.1:") && strings.Contains(l, "/?token=") {
			url = l
		}
	}
	if url == "" {
		t.Fatalf("no URL printed; stderr:\n%s", stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	base, _, _ := strings.Cut(url, "?")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Refresh") != "0; url=/" {
		t.Fatalf("opening the URL: %d, Refresh %q", resp.StatusCode, resp.Header.Get("Refresh"))
	}
	// What the browser does next: the page without the secret, with the cookie.
	resp, err = client.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `<a href="/node/cp1">cp1</a>`) {
		t.Fatalf("the console after the secret: %d\n%s", resp.StatusCode, body)
	}
	cancel()
	select {
	case code := <-exit:
		if code != exitOK {
			t.Fatalf("exit %d after the context ended; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("meshctl ui did not stop within 5 s of its context ending")
	}
	if _, err := client.Get(base); err == nil {
		t.Error("the console still answers after meshctl ui returned")
	}
	if stderr.String() != "" {
		t.Errorf("stderr with meshd answering:\n%s", stderr.String())
	}
}

// TestUIWarnsWhenDaemonDown: with meshd unreachable, `meshctl ui` still
// serves (meshd may be starting) and says so on stderr with the code.
func TestUIWarnsWhenDaemonDown(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"--socket", nowhere(t), "ui"}, strings.NewReader(""), outW, errW)
		_ = outW.Close()
		_ = errW.Close()
	}()
	var base string
	out := bufio.NewScanner(outR)
	for base == "" && out.Scan() {
		if l := strings.TrimSpace(out.Text()); strings.HasPrefix(l, "http://127.0.0.1:") {
			base, _, _ = strings.Cut(l, "?")
		}
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errR)
		sc.Scan()
		first <- sc.Text()
		_, _ = io.Copy(io.Discard, errR)
	}()
	select {
	case l := <-first:
		if !strings.HasPrefix(l, "warning "+string(codes.DaemonUnreachable)+": ") {
			t.Fatalf("stderr first line %q, want the DaemonUnreachable warning", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no warning on stderr within 5 s")
	}
	// It serves after the warning: a request without the secret gets the
	// console's refusal.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(base)
	if err != nil {
		t.Fatalf("the console does not answer after the warning: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET %s: %d, want 403", base, resp.StatusCode)
	}
	cancel()
	select {
	case code := <-exit:
		if code != exitOK {
			t.Errorf("exit %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("meshctl ui did not stop")
	}
}

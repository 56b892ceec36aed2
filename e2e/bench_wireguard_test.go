//go:build e2e

package e2e

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The wireguard-go path of BenchmarkOverlayThroughput (issue 53 item 5):
// upstream's userspace WireGuard between the two namespaces the raw veth
// path uses, over a TUN device each, configured with Debian's `wg` tool
// (wireguard-tools) through wireguard-go's UAPI socket. The kernel here has
// no WireGuard module, so this is what WireGuard costs on this box.
//
// The binary is built by the benchmark from the module proxy, the way
// package stocknebula builds upstream Nebula: a temporary module outside
// the repo requiring wgModule at wgVersion with no replace, `go build` of
// its main package with the parent's GOPROXY and GOFLAGS (plus -mod=mod),
// once per machine under os.TempDir() behind a lock file; each use checks
// the binary's build information. Nothing of it is committed.

const (
	wgModule = "golang.zx2c4.com/wireguard"
	// wgVersion is master of 2026-05-22, the module proxy's @latest (it
	// serves no tagged release newer, and refuses @master by name);
	// `wireguard-go --version` calls it 0.0.20250522.
	wgVersion = "v0.0.0-20260522210424-ecfc5a8d5446"
	wgNet     = "10.43.0" // the wireguard-go overlay, a /24
	wgPort    = "51820"
)

// wireguardGoBinary returns the path of wireguard-go at wgVersion, building
// it on first use on this machine (seconds once the modules are cached).
func wireguardGoBinary(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("meshd-wireguard-go-%s-%s-%s", wgVersion, runtime.GOOS, runtime.GOARCH))
	bin := filepath.Join(dir, "wireguard-go")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("wireguard-go: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Fatalf("wireguard-go: %v", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		tb.Fatalf("wireguard-go: lock %s: %v", lock.Name(), err)
	}
	if err := checkWireguardGo(bin); err == nil {
		return bin
	} else if !errors.Is(err, os.ErrNotExist) {
		tb.Logf("wireguard-go: rebuilding: %v", err)
	}
	if err := buildWireguardGo(dir, bin); err != nil {
		tb.Fatalf("wireguard-go: %v", err)
	}
	if err := checkWireguardGo(bin); err != nil {
		tb.Fatalf("wireguard-go: the binary just built: %v", err)
	}
	return bin
}

// checkWireguardGo reports whether bin is wgModule's main package at
// wgVersion, not replaced.
func checkWireguardGo(bin string) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return err
	}
	if m := info.Main; info.Path != wgModule || m.Path != wgModule || m.Version != wgVersion || m.Replace != nil {
		return fmt.Errorf("%s is %s of %s %s (replaced: %v), want %s %s unreplaced", bin, info.Path, m.Path, m.Version, m.Replace != nil, wgModule, wgVersion)
	}
	return nil
}

// buildWireguardGo makes bin in a fresh module under os.TempDir(), then
// moves it into place by rename, so a reader never sees half a binary.
func buildWireguardGo(dir, bin string) error {
	mod, err := os.MkdirTemp("", "wireguard-go-mod-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(mod)
	gomod := fmt.Sprintf("module meshd.test/wireguardgo\n\ngo 1.23.1\n\nrequire %s %s\n", wgModule, wgVersion)
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	// The parent's go settings made explicit (a go.env or GOENV file counts
	// too), -mod=mod in place of any -mod flag (the module has no go.sum
	// yet), workspaces off: as stocknebula does.
	out, err := exec.Command("go", "env", "GOPROXY", "GOFLAGS").Output()
	if err != nil {
		return fmt.Errorf("go env: %w", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != 2 {
		return fmt.Errorf("go env GOPROXY GOFLAGS: %q", out)
	}
	flags := []string{"-mod=mod"}
	for _, f := range strings.Fields(lines[1]) {
		if !strings.HasPrefix(f, "-mod=") && !strings.HasPrefix(f, "--mod=") {
			flags = append(flags, f)
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf("wireguard-go.tmp-%d", os.Getpid()))
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, wgModule)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOPROXY="+lines[0], "GOFLAGS="+strings.Join(flags, " "), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("go build %s@%s: %v\n%s", wgModule, wgVersion, err, out)
	}
	return os.Rename(tmp, bin)
}

// wgEnd is one wireguard-go process and its TUN device.
type wgEnd struct {
	host *Host
	dev  string
	addr string // overlay address
	cmd  *exec.Cmd
	done chan struct{}
}

// startWireguardGo runs wireguard-go in a and b, each with a TUN device
// (wireguard-go's default MTU, 1420: what wg-quick sets on a 1500-byte
// underlay), keys from `wg genkey` and `wg pubkey`, each the other's only
// peer with its underlay endpoint, configured by `wg set` over the UAPI
// socket. It waits until a pings b across the tunnel and returns the path
// from a to b's overlay address; iperf3 serves there if it serves on b.
func startWireguardGo(tb testing.TB, a, b *Host) overlayPath {
	tb.Helper()
	if _, err := exec.LookPath("wg"); err != nil {
		tb.Fatal("wg not found (wireguard-tools): run scripts/install-deps.sh")
	}
	bin := wireguardGoBinary(tb)
	dir := tb.TempDir()
	ends := []*wgEnd{
		{host: a, dev: a.Net.prefix + "wg1", addr: wgNet + ".1"},
		{host: b, dev: b.Net.prefix + "wg2", addr: wgNet + ".2"},
	}
	keys, pubs := make([]string, 2), make([]string, 2)
	for i, e := range ends {
		keys[i], pubs[i] = wgKeyPair(tb, dir, e.dev)
		e.start(tb, bin, dir)
	}
	for i, e := range ends {
		peer := ends[1-i]
		run(tb, "ip", "netns", "exec", e.host.Name, "wg", "set", e.dev, "listen-port", wgPort, "private-key", keys[i],
			"peer", pubs[1-i], "allowed-ips", peer.addr+"/32", "endpoint", peer.host.IP+":"+wgPort)
		run(tb, "ip", "-n", e.host.Name, "addr", "add", e.addr+"/24", "dev", e.dev)
		run(tb, "ip", "-n", e.host.Name, "link", "set", e.dev, "up")
	}
	Eventually(tb, 10*time.Second, "wireguard-go: "+a.Name+" pings "+ends[1].addr, func() error {
		return a.Ping(tb.Context(), ends[1].addr)
	})
	link, err := exec.Command("ip", "-d", "-n", a.Name, "link", "show", ends[0].dev).CombinedOutput()
	if err != nil {
		tb.Fatalf("ip link show %s: %v: %s", ends[0].dev, err, link)
	}
	if !strings.Contains(string(link), "vnet_hdr on") { // its offloads ride the virtio-net header
		tb.Fatalf("wireguard-go's TUN %s has no vnet_hdr, so no offloads:\n%s", ends[0].dev, link)
	}
	tb.Logf("wireguard-go %s: %s to %s over TUN with vnet_hdr (offloads)", wgVersion, ends[0].dev, ends[1].dev)
	return overlayPath{"wireguard-go", a, ends[1].addr, []int{ends[0].cmd.Process.Pid, ends[1].cmd.Process.Pid}}
}

// wgKeyPair writes a private key from `wg genkey` to a 0600 file in dir
// and returns the file's path and the public key. The private key goes
// to the file and to wg's stdin, never to an argument or a log.
func wgKeyPair(tb testing.TB, dir, name string) (keyFile, pub string) {
	tb.Helper()
	key, err := exec.Command("wg", "genkey").Output()
	if err != nil {
		tb.Fatalf("wg genkey: %v", err)
	}
	keyFile = filepath.Join(dir, name+".key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("wg", "pubkey")
	cmd.Stdin = strings.NewReader(string(key))
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("wg pubkey: %v", err)
	}
	return keyFile, strings.TrimSpace(string(out))
}

// start runs wireguard-go in the foreground in e's namespace (`ip netns
// exec` execs it, so the process is wireguard-go itself: its CPU is what
// /proc/PID/stat says) and waits until `wg show` reaches it through its
// UAPI socket. It is stopped with SIGTERM when the test ends.
func (e *wgEnd) start(tb testing.TB, bin, dir string) {
	tb.Helper()
	logPath := filepath.Join(dir, e.dev+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	e.cmd = exec.Command("ip", "netns", "exec", e.host.Name, bin, "-f", e.dev)
	e.cmd.Env = append(os.Environ(), "LOG_LEVEL=error")
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	if err := e.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	_ = logf.Close()
	e.done = make(chan struct{})
	go func() { _ = e.cmd.Wait(); close(e.done) }()
	tb.Cleanup(func() {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			tb.Errorf("wireguard-go %s ignored SIGTERM for 10 s", e.dev)
			_ = e.cmd.Process.Kill()
			<-e.done
		}
		if tb.Failed() {
			b, _ := os.ReadFile(logPath)
			tb.Logf("log of wireguard-go %s:\n%s", e.dev, b)
		}
	})
	Eventually(tb, 10*time.Second, "wireguard-go "+e.dev+" answers wg show", func() error {
		select {
		case <-e.done:
			tb.Fatalf("wireguard-go %s exited: %v", e.dev, e.cmd.ProcessState)
		default:
		}
		if out, err := e.host.Exec(tb.Context(), "wg", "show", e.dev).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	})
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", e.cmd.Process.Pid)); err != nil || strings.TrimSpace(string(comm)) != "wireguard-go" {
		tb.Fatalf("pid %d is %q (%v), not wireguard-go: its CPU would be another's", e.cmd.Process.Pid, comm, err)
	}
}

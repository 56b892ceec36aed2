package hostroute

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// needRoot skips t unless it runs as root: the root tests build network
// namespaces, and nothing they do reaches the host's own network.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces")
	}
}

// run runs a command and returns its standard output, failing t if it
// fails.
func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, msg)
	}
	return string(out)
}

// newNS makes a network namespace for t, named after role and this
// process, with lo up and IPv4 forwarding off for every interface made in
// it (a host with forwarding on would otherwise pass its value on). It is
// deleted at t's cleanup, with every interface in it.
func newNS(t *testing.T, role string) string {
	t.Helper()
	name := fmt.Sprintf("hr-%s-%d", role, os.Getpid())
	_ = exec.Command("ip", "netns", "del", name).Run() // left by a killed run
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("delete namespace %s: %v: %s", name, err, out)
		}
	})
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	run(t, "ip", "netns", "exec", name, "sh", "-c",
		"echo 0 > /proc/sys/net/ipv4/conf/all/forwarding && echo 0 > /proc/sys/net/ipv4/conf/default/forwarding")
	return name
}

// in runs f on this goroutine's OS thread moved into namespace ns, and
// moves the thread back after (also when f calls t.Fatal). A thread that
// cannot be moved back stays locked, so it ends with the goroutine.
func in(t *testing.T, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("enter namespace %s: %v", ns, err)
	}
	defer func() {
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Errorf("leave namespace %s: %v", ns, err)
			return
		}
		runtime.UnlockOSThread()
	}()
	f()
}

// procForwarding reads /proc/sys/net/ipv4/conf/IF/forwarding in ns: the
// kernel's value as sysctl shows it, read independently of this package.
func procForwarding(t *testing.T, ns, ifname string) string {
	t.Helper()
	return strings.TrimSpace(run(t, "ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv4/conf/"+ifname+"/forwarding"))
}

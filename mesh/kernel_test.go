package mesh

import (
	"context"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kernelChildEnv names the test a child process of inNetns runs, in its
// own network namespace.
const kernelChildEnv = "MESHD_MESH_KERNEL_CHILD"

// inNetns reports whether this process is the child that runs the calling
// test in a fresh network namespace. Otherwise it re-runs this test binary
// for the test with CLONE_NEWNET, so nothing touches the host's network,
// waits for it and fails with it; it skips without root or TUN support.
// The caller returns unless inNetns returned true.
func inNetns(t *testing.T) bool {
	t.Helper()
	skipUnderRace(t)
	if os.Getenv(kernelChildEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: a TUN device in a fresh network namespace")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN support: %v", err)
	}
	args := []string{"-test.run=^" + t.Name() + "$", "-test.v", "-test.count=1"}
	if *meshLogs {
		args = append(args, "-meshlogs")
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), kernelChildEnv+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	t.Logf("child in a new network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	return false
}

// TestKernelTUN starts a kernel-TUN lighthouse in a fresh network
// namespace, checks the device, reloads its MTU live, stops it, and starts
// it again on the same device name and port: Stop must release both
// (Nebula v1.10.3 alone did not; v1.11.0 and v1.12.0 do). It needs root (see inNetns).
func TestKernelTUN(t *testing.T) {
	if !inNetns(t) {
		return
	}

	c := kernelConfig(t, "192.0.2.2:4242")

	for round := 1; round <= 3; round++ {
		start := time.Now()
		m, err := Start(c, testLogger("kernel"))
		if err != nil {
			t.Fatalf("round %d: start: %v", round, err)
		}
		took := time.Since(start)

		ifc, err := net.InterfaceByName(c.TunDev)
		if err != nil {
			t.Fatalf("round %d: no TUN device: %v", round, err)
		}
		if ifc.MTU != c.MTU {
			t.Errorf("round %d: MTU %d, want %d", round, ifc.MTU, c.MTU)
		}
		if addrs, _ := ifc.Addrs(); !slices.ContainsFunc(addrs, func(a net.Addr) bool { return a.String() == overlayIP(1).String() }) {
			t.Errorf("round %d: %s has addresses %v, want %s", round, c.TunDev, addrs, overlayIP(1))
		}
		if err := m.Verify(c); err != nil {
			t.Errorf("round %d: verify: %v", round, err)
		}
		if _, err := m.DialContext(context.Background(), "tcp", "10.42.0.2:7000"); err == nil {
			t.Errorf("round %d: DialContext works in kernel mode", round)
		}
		if _, err := m.Listen("tcp", ":7000"); err == nil {
			t.Errorf("round %d: Listen works in kernel mode", round)
		}

		mtu := c
		mtu.MTU = 1280
		if err := m.Reload(mtu); err != nil {
			t.Errorf("round %d: reload MTU: %v", round, err)
		}
		if ifc, err := net.InterfaceByName(c.TunDev); err != nil || ifc.MTU != 1280 {
			t.Errorf("round %d: MTU after reload: %v %v", round, ifc, err)
		}

		stop := time.Now()
		m.Stop()
		stopped := time.Since(stop)
		m.Stop() // a second Stop does nothing
		if _, err := net.InterfaceByName(c.TunDev); err == nil {
			t.Errorf("round %d: %s still exists after Stop", round, c.TunDev)
		}
		if pc, err := net.ListenPacket("udp4", "0.0.0.0:4242"); err != nil {
			t.Errorf("round %d: UDP 4242 still held after Stop: %v", round, err)
		} else {
			_ = pc.Close()
		}
		if got := m.Tunnels(); got != nil {
			t.Errorf("round %d: a stopped instance lists tunnels %v", round, got)
		}
		if err := m.Reload(c); err == nil {
			t.Errorf("round %d: Reload of a stopped instance succeeded", round)
		}
		t.Logf("round %d: Start %s, Stop (with release) %s", round, took, stopped)
	}
}

// loopbackUp sets lo up in this process's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

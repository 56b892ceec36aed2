package preflight

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// The host checks of a join, which its plan lists and the join itself
// makes before it spends its token: ports free, the TUN device
// creatable (mesh.CheckTUN), state dir writable with room.

// hostCheck is one host check: its name in a plan, and the check, which
// says what it found or fails with a code.
type hostCheck struct {
	name string
	run  func() (string, error)
}

// hostChecks are the host checks of a join with a token of role: every
// port that role listens on free on bind_addr, the TUN device creatable
// (kernel mode), the state dir writable with room. ownRuntime says this
// meshd runs a member now, whose ports and TUN device a join with --force
// frees first: those are not bound again.
func (a Env) hostChecks(role pki.Role, ownRuntime bool) []hostCheck {
	var out []hostCheck
	for _, pt := range a.listenPorts(role) {
		out = append(out, hostCheck{name: "port " + pt.name, run: func() (string, error) {
			switch {
			case ownRuntime:
				return fmt.Sprintf("%s held by this meshd's running node, which a join with --force stops first", pt), nil
			case pt.name == "nebula" && a.OverlayParked:
				return fmt.Sprintf("%s held by this meshd's userspace overlay of its earlier membership, which the join takes over", pt), nil
			}
			if err := pt.free(a.Config.BindAddr); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s free on %s", pt, a.Config.BindAddr), nil
		}})
	}
	out = append(out, hostCheck{name: "tun", run: func() (string, error) {
		switch {
		case a.Config.OverlayMode == config.OverlayUserspace:
			return "overlay_mode is userspace: no TUN device needed", nil
		case ownRuntime:
			return fmt.Sprintf("%s held by this meshd's running node, which a join with --force stops first", a.Config.TunDevice), nil
		}
		if err := mesh.CheckTUN(a.Config.TunDevice); err != nil {
			return "", err
		}
		return fmt.Sprintf("TUN device %s can be created (and was removed again)", a.Config.TunDevice), nil
	}})
	out = append(out, hostCheck{name: "state-dir", run: func() (string, error) {
		free, err := checkStateDir(a.Config.StateDir, minFree(role))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s is writable, %d MiB free", a.Config.StateDir, free>>20), nil
	}})
	return out
}

// CheckHost is a join's host checks (hostChecks), made again by the join
// itself before it spends its token: a taken port, a TUN device this
// process cannot create or a full state dir stops the join with the
// check's code, nothing sent. It returns what each check found, each as
// "name: detail".
func (a Env) CheckHost(role pki.Role, ownRuntime bool) ([]string, error) {
	var found []string
	for _, c := range a.hostChecks(role, ownRuntime) {
		detail, err := c.run()
		if err != nil {
			return found, fmt.Errorf("%s: %w", c.name, err)
		}
		found = append(found, c.name+": "+detail)
	}
	return found, nil
}

// listenPort is one port meshd listens on, and on which protocols.
type listenPort struct {
	name     string // gossip, nebula, control, raft
	port     int
	tcp, udp bool
}

func (p listenPort) String() string {
	switch {
	case p.tcp && p.udp:
		return fmt.Sprintf("%d/tcp+udp", p.port)
	case p.tcp:
		return fmt.Sprintf("%d/tcp", p.port)
	}
	return fmt.Sprintf("%d/udp", p.port)
}

// listenPorts are the ports a node of role listens on (DESIGN §3): a
// worker out of the gossip pool (gossip_pool: false, its default) runs no
// memberlist, so its gossip port is not checked.
func (a Env) listenPorts(role pki.Role) []listenPort {
	var ps []listenPort
	if a.Config.GossipPool || role == pki.RoleControl { // member.inPool
		ps = append(ps, listenPort{name: "gossip", port: a.Config.Ports.Gossip, tcp: true, udp: true})
	}
	ps = append(ps, listenPort{name: "nebula", port: a.Config.Ports.Nebula, udp: true})
	if role == pki.RoleControl {
		ps = append(ps, listenPort{name: "control", port: a.Config.Ports.Control, tcp: true},
			listenPort{name: "raft", port: a.Config.Ports.Raft, tcp: true})
	}
	return ps
}

// free binds the port on bind, as meshd will, and lets it go at once. A
// port taken by another process is codes.PortInUse.
func (p listenPort) free(bind string) error {
	addr := net.JoinHostPort(bind, strconv.Itoa(p.port))
	inUse := func(proto string, err error) error {
		if errors.Is(err, syscall.EADDRINUSE) {
			return codes.Wrap(codes.PortInUse, fmt.Errorf("%s/%s on %s is taken by another process (%s listens there)", strconv.Itoa(p.port), proto, bind, p.name))
		}
		return codes.Wrap(codes.PortInUse, fmt.Errorf("%s/%s on %s cannot be bound: %w", strconv.Itoa(p.port), proto, bind, err))
	}
	if p.tcp {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return inUse("tcp", err)
		}
		_ = ln.Close()
	}
	if p.udp {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return inUse("udp", err)
		}
		_ = pc.Close()
	}
	return nil
}

// Free space a join needs in the state dir: a worker keeps its identity
// and a few small files; a control node also keeps raft's log and
// snapshots.
const (
	minFreeWorker  = 16 << 20
	minFreeControl = 256 << 20
)

func minFree(role pki.Role) uint64 {
	if role == pki.RoleControl {
		return minFreeControl
	}
	return minFreeWorker
}

// checkStateDir writes, syncs and removes a file in dir, and checks that
// it has need bytes free for an unprivileged writer. It returns the free
// bytes; a failure is codes.StateDir.
func checkStateDir(dir string, need uint64) (uint64, error) {
	f, err := os.CreateTemp(dir, ".plan-*")
	if err != nil {
		return 0, codes.Wrap(codes.StateDir, fmt.Errorf("state dir %s does not take a file: %w", dir, err))
	}
	name := f.Name()
	defer os.Remove(name)
	_, err = f.Write(make([]byte, 4096))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, codes.Wrap(codes.StateDir, fmt.Errorf("state dir %s: writing a file failed: %w", dir, err))
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, codes.Wrap(codes.StateDir, fmt.Errorf("state dir %s: %w", dir, err))
	}
	free := st.Bavail * uint64(st.Bsize)
	if free < need {
		return free, codes.Wrap(codes.StateDir, fmt.Errorf("state dir %s has %d MiB free, a join needs %d MiB", dir, free>>20, need>>20))
	}
	return free, nil
}

package preflight

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// The host checks of a join's plan: ports free, state dir writable with
// room. (The TUN check is mesh.CheckTUN.)

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

// listenPorts are the ports a node of role listens on (DESIGN §3).
func (a Env) listenPorts(role pki.Role) []listenPort {
	ps := []listenPort{
		{name: "gossip", port: a.Config.Ports.Gossip, tcp: true, udp: true},
		{name: "nebula", port: a.Config.Ports.Nebula, udp: true},
	}
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

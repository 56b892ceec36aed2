package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// startControlPlane opens raft (bootstrapping it with boot on init), loads
// the CA on the CA holder, and builds the control plane over them.
func (rt *Runtime) startControlPlane(ctx context.Context, boot *state.Bootstrap) error {
	serverTLS, err := pki.LiveServerTLSConfig(rt.live, pki.RoleControl)
	if err != nil {
		return err
	}
	clientTLS, err := pki.LiveClientTLSConfig(rt.live, pki.RoleControl)
	if err != nil {
		return err
	}
	advertise := &net.TCPAddr{IP: rt.facts.Underlay.AsSlice(), Port: rt.cfg.Ports.Raft}
	bind := net.JoinHostPort(rt.cfg.BindAddr, strconv.Itoa(rt.cfg.Ports.Raft))
	stream, err := raftnode.NewTLSStreamLayer(bind, advertise, serverTLS, clientTLS)
	if err != nil {
		return fmt.Errorf("listen raft %s: %w", bind, err)
	}
	dir := filepath.Join(rt.cfg.StateDir, statedir.RaftDir)
	if boot != nil && raftnode.HasState(dir) {
		_ = stream.Close()
		return codes.Wrap(codes.AlreadyInitialised, errors.New("raft state exists; refusing to bootstrap over it"))
	}
	ca, nextCA, err := rt.loadCA()
	if err != nil {
		_ = stream.Close()
		return err
	}
	node, err := raftnode.Open(raftnode.Options{Dir: dir, NodeID: rt.facts.NodeID, Stream: stream,
		Timing: rt.cfg.RaftNodeTiming(), Log: rt.log,
		ObserveApply: rt.met.ObserveRaftApply})
	if err != nil {
		return err
	}
	rt.ctl = control.New(rt.cfg.ControlConfig(rt.facts.NodeID, rt.facts.Name, filepath.Join(rt.cfg.StateDir, statedir.CADir)), node, ca, rt.client, control.Deps{Log: rt.log, Now: rt.now, Hooks: rt.controlHooks()})
	if nextCA != nil {
		rt.ctl.AddCA(nextCA) // a rotation's next CA (carotation.go)
	}
	if boot == nil {
		return nil
	}
	if err := node.Bootstrap(advertise); err != nil {
		return fmt.Errorf("bootstrap raft: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := node.WaitLeader(wctx); err != nil {
		return err
	}
	return node.Apply(wctx, boot)
}

// controlHooks connect the control plane to this node's overlay and
// gossip.
func (rt *Runtime) controlHooks() control.Hooks {
	return control.Hooks{
		Poke:          rt.wake,
		NotifyRevoked: func() error { return rt.gossip.Notify(notifyRevoked) },
		ForceLeave:    func(name string) error { return rt.gossip.ForceLeave(name) },
		Gossip:        rt.members.gossipMembers,
		Pooled:        rt.members.pooled, // outofpool.go
		Versions:      rt.members.gossipVersions,
		LastSeen:      rt.gossip.LastSeen, // shown only for a node not alive: display, never a decision
		NotifyKeys:    func() error { return rt.gossip.Notify(notifyKeys) },
		NotifyCA:      func() error { return rt.gossip.Notify(notifyCA) },
		KeyReports:    rt.members.keyReports,
		AskMembers:    rt.gossip.Ask,
		Reach:         rt.node.reachOverlay,
		Tunnels:       rt.ov.tunnels,
		Clock:         rt.clockHook,
		DiskFailing:   rt.fit.disk.Err,
		Unreachable:   rt.pairs.unreachable,
	}
}

func (rt *Runtime) startControl() error {
	tlsConf, err := pki.LiveServerTLSConfig(rt.live)
	if err != nil {
		return err
	}
	bind := net.JoinHostPort(rt.cfg.BindAddr, strconv.Itoa(rt.cfg.Ports.Control))
	limits := rt.cfg.PortLimits()
	ln, err := control.Listen(bind, tlsConf, limits, rt.log.With("component", "control"))
	if err != nil {
		return fmt.Errorf("listen control %s: %w", bind, err)
	}
	deps := enroll.Deps{Log: rt.log, Now: rt.now, Observe: rt.met.ObserveJoin, Unfit: rt.unfit, Nebula: rt.ctl.Ledger()}
	if rt.ids = newIdentities(rt.cfg.JWT.Issuers, rt.now); rt.ids != nil {
		if rt.ids.err != nil {
			rt.log.Error("the JWT issuers' keys could not be loaded: joins by JWT are refused until `meshctl reload` loads them",
				"code", codes.ConfigInvalid, "err", rt.ids.err)
		}
		deps.Identities = rt.ids
	}
	es := enroll.NewServer(rt.cfg.EnrollConfig(), rt.ctl.Ledger(), rt.ctl.Signer(), deps)
	rt.control = control.NewServer(rt.ctl.Handler(es), limits, rt.log.With("component", "control"))
	rt.control.ConnState = rt.ctl.TrackConn // non-members' open connections are closed
	rt.controlLn = ln
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := rt.control.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			rt.log.Error("control listener stopped", "err", err)
		}
	}()
	return nil
}

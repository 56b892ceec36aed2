package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// Backup seals the CA keys and the cluster identity with passphrase (on
// the CA holder) and records the backup time in raft.
func (p *Plane) Backup(ctx context.Context, passphrase []byte, actor string) ([]byte, time.Time, error) {
	if err := pki.CheckPassphrase(passphrase); err != nil {
		return nil, time.Time{}, err
	}
	if err := p.SyncRead(ctx); err != nil {
		return nil, time.Time{}, err
	}
	c, ok := p.raft.FSM().Cluster()
	if !ok {
		return nil, time.Time{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	if p.heldCA() == nil {
		return nil, time.Time{}, codes.Wrap(codes.NotCAHolder, fmt.Errorf("%s holds the CA, not %s; run this there", p.nameOf(c.CAHolder), p.cfg.Name))
	}
	// The keys of the record read under the custody lock: no rotation
	// begins or finishes meanwhile on this node.
	p.custody.Lock()
	c, _ = p.raft.FSM().Cluster()
	cur, next, err := p.keysOnRecord(c)
	p.custody.Unlock()
	if err != nil {
		return nil, time.Time{}, err
	}
	bundle, err := cur.Bundle()
	if err != nil {
		return nil, time.Time{}, err
	}
	now := p.now()
	b := pki.CABackup{ClusterID: c.ID, ClusterName: c.Name, CAFingerprint: c.CAFingerprint, Created: now, CA: bundle}
	if next != nil { // a rotation in progress: its next CA is sealed too
		nb, err := next.Bundle()
		if err != nil {
			return nil, time.Time{}, err
		}
		b.NextCAFingerprint, b.Next = next.Fingerprint().String(), &nb
	}
	sealed, err := pki.SealCABackup(b, passphrase, p.cfg.BackupWorkFactor)
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := p.Write(ctx, &state.RecordCABackup{NodeID: p.cfg.NodeID, At: now, Actor: actor}); err != nil {
		return nil, time.Time{}, err
	}
	p.log.Info("sealed CA backup taken", "code", codes.EventCABackedUp)
	return sealed, now, nil
}

// Restore makes this node the CA holder from a sealed backup (`meshctl
// ca restore`): the file must open with passphrase and be this cluster's,
// this node an active control voter, and the holder on record lost: not
// alive in gossip (alive or suspect) and not answering over the internal
// API. The keys are written and loaded first, then SetCAHolder records
// the move. On the holder on record whose keys are gone, it only puts
// them back.
func (p *Plane) Restore(ctx context.Context, sealed, passphrase []byte, actor string) (Handoff, error) {
	start := time.Now()
	b, ca, err := pki.OpenCABackup(sealed, passphrase)
	if err != nil {
		return Handoff{}, err
	}
	if err := p.SyncRead(ctx); err != nil {
		return Handoff{}, err
	}
	c, ok := p.raft.FSM().Cluster()
	if !ok {
		return Handoff{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	if b.ClusterID != c.ID {
		return Handoff{}, codes.Wrap(codes.CAOtherCluster, fmt.Errorf("the backup is of cluster %q (%s), this is %q (%s)",
			b.ClusterName, b.ClusterID, c.Name, c.ID))
	}
	ca, next, err := restoreKeys(c, b, ca)
	if err != nil {
		return Handoff{}, err
	}
	self, ok := p.raft.FSM().Node(p.cfg.NodeID)
	if !ok {
		return Handoff{}, codes.Wrap(codes.CustodyTarget, errors.New("this node has no record"))
	}
	if err := p.custodyTarget(self); err != nil {
		return Handoff{}, err
	}
	out := Handoff{From: p.nameOf(c.CAHolder), To: p.cfg.Name}
	p.custody.Lock()
	defer p.custody.Unlock()
	if c.CAHolder != p.cfg.NodeID {
		if err := p.holderLost(ctx, c.CAHolder); err != nil {
			return Handoff{}, err
		}
	}
	if err := pki.SaveCAKeys(p.cfg.CADir, ca, next, c.CAHolder); err != nil {
		return Handoff{}, codes.Wrap(codes.StateDir, err)
	}
	loaded, loadedNext, err := pki.LoadCAKeys(p.cfg.CADir)
	if err == nil && (loaded.Fingerprint() != ca.Fingerprint() || (next != nil) != (loadedNext != nil)) {
		err = errors.New("the keys read back are not those written")
	}
	if err != nil {
		return Handoff{}, codes.Wrap(codes.StateDir, fmt.Errorf("the restored CA keys do not load: %w", err))
	}
	p.setCAs(loaded, loadedNext)
	if c.CAHolder != p.cfg.NodeID {
		if err := p.Write(ctx, &state.SetCAHolder{From: c.CAHolder, To: p.cfg.NodeID, CAFingerprint: c.CAFingerprint,
			Restore: true, At: p.now(), Actor: actor}); err != nil {
			return Handoff{}, err
		}
	}
	if _, err := p.followCustody(ctx); err != nil {
		p.log.Warn("CA restored; marker not cleared", "err", err)
	}
	p.log.Info("CA custody restored from a sealed backup", "code", codes.EventCARestored, "previous", out.From)
	out.Took = time.Since(start)
	return out, nil
}

// holderLost refuses (codes.CAHolderAlive) while the holder on record
// answers a direct probe of its overlay address (Nebula authenticates the
// answer with the holder's certificate) or answers over the internal
// API. Gossip's view is not asked: a member that was taken can make
// gossip show a stopped holder alive (issue 27), and the record, not the
// keys, says who signs, so a holder that comes back after a restore
// stops signing.
func (p *Plane) holderLost(ctx context.Context, id string) error {
	n, ok := p.raft.FSM().Node(id)
	if !ok {
		return nil
	}
	if n.OverlayIP.IsValid() {
		rctx, cancel := context.WithTimeout(ctx, reachBound)
		err := p.hooks.Reach(rctx, n.OverlayIP)
		cancel()
		if err == nil {
			return codes.Wrap(codes.CAHolderAlive, fmt.Errorf("%s answers at its overlay address %s", n.Name, n.OverlayIP))
		}
	}
	if n.EnrollAddr != "" {
		cctx, cancel := context.WithTimeout(ctx, reachTimeout)
		defer cancel()
		var st RaftStats
		if err := p.client.Call(cctx, n.EnrollAddr, PathRaftStats, true, nil, &st); err == nil {
			return codes.Wrap(codes.CAHolderAlive, fmt.Errorf("%s answers over the internal API", n.Name))
		}
	}
	return nil
}

// restoreKeys picks from a backup b (whose current CA is ca) the key pairs
// the record c needs: its current CA and, during a rotation, the next
// one. A backup taken during a rotation that has finished since holds the
// now current CA as its next: that one is restored alone. A backup taken
// before a rotation began lacks the next CA's keys: refused
// (CABackupNoNext), as the holder could neither sign in phase reissue nor
// finish; take a backup during the rotation, or restore after it.
func restoreKeys(c state.Cluster, b pki.CABackup, ca *pki.CA) (cur, next *pki.CA, err error) {
	bnext, err := b.NextCA()
	if err != nil {
		return nil, nil, codes.Wrap(codes.BackupCorrupt, err)
	}
	switch {
	case b.CAFingerprint == c.CAFingerprint:
		cur = ca
	case bnext != nil && b.NextCAFingerprint == c.CAFingerprint:
		cur = bnext // the rotation the backup was taken in finished since
		bnext = nil
	default:
		return nil, nil, codes.Wrap(codes.CAOtherCluster, fmt.Errorf("the backup holds CA %s, the cluster's CA is %s (a backup from before a finished CA rotation)",
			pki.ShortID(b.CAFingerprint), pki.ShortID(c.CAFingerprint)))
	}
	cb, err := cur.Bundle()
	if err != nil {
		return nil, nil, err
	}
	if cur, err = checkClusterCA(c, cb); err != nil {
		return nil, nil, err
	}
	if r := c.Rotation; r != nil {
		if bnext == nil || b.NextCAFingerprint != r.NextCAFingerprint {
			return nil, nil, codes.Wrap(codes.CABackupNoNext, fmt.Errorf("a CA rotation to %s is in progress and the backup does not hold its keys", pki.ShortID(r.NextCAFingerprint)))
		}
		nb, err := bnext.Bundle()
		if err != nil {
			return nil, nil, err
		}
		if next, err = checkNextCA(c, nb); err != nil {
			return nil, nil, err
		}
	}
	return cur, next, nil
}

package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
)

// GossipKeySize is the length of every gossip key meshd generates
// (AES-256).
const GossipKeySize = 32

// KeyStep is one step of a gossip key rotation.
type KeyStep string

// The three steps of a rotation, in order: install the new key next to
// the old primary, make the new key primary, drop the old one.
const (
	KeyInstall KeyStep = "install"
	KeyUse     KeyStep = "use"
	KeyDrop    KeyStep = "drop"
)

// SetGossipKeys records one step of a gossip key rotation:
// cluster.GossipKeys becomes Keys (primary first). Expect is KeyringID of
// the keys the step replaces, a compare-and-set, so two rotations started
// on two control nodes cannot interleave; and each step may only make the
// change its name says:
//
//	install: [old]      or [old, x] -> [old, new]  (new is fresh)
//	use:     [old, new]             -> [new, old]
//	drop:    [new, old]             -> [new]
type SetGossipKeys struct {
	Keys   [][]byte  `json:"keys"`
	Step   KeyStep   `json:"step"`
	Expect string    `json:"expect"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor,omitempty"`
}

func (SetGossipKeys) commandType() cmdType { return typeSetGossipKeys }

// KeyID is a key's short id: the first 8 hex characters of its SHA-256.
// It names a key in status, logs and audit events; the key itself never
// appears there.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

// KeyringID names a whole keyring, order included (primary first): the
// first 16 hex characters of the SHA-256 over the length-prefixed keys.
// Members report it so a rotation can tell who has caught up.
func KeyringID(keys [][]byte) string {
	h := sha256.New()
	for _, k := range keys {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(k)))
		h.Write(n[:])
		h.Write(k)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

func (c SetGossipKeys) applyTo(s *Snapshot) error {
	if s.Cluster == nil {
		return codes.Wrap(codes.NotInCluster, errors.New("set gossip keys: no cluster yet"))
	}
	cur := s.Cluster.GossipKeys
	if c.Expect != KeyringID(cur) {
		return codes.Wrap(codes.Busy, fmt.Errorf("gossip keys changed since this rotation step was prepared (another rotation?)"))
	}
	for i, k := range c.Keys {
		if len(k) != GossipKeySize {
			return codes.Wrap(codes.BadRequest, fmt.Errorf("gossip key %d: %d bytes, want %d", i, len(k), GossipKeySize))
		}
	}
	if err := checkKeyStep(c.Step, cur, c.Keys); err != nil {
		return err
	}
	keys := make([][]byte, len(c.Keys))
	for i, k := range c.Keys {
		keys[i] = bytes.Clone(k)
	}
	s.Cluster.GossipKeys = keys
	switch c.Step {
	case KeyInstall:
		s.Cluster.payKeys()
	case KeyDrop:
		s.Cluster.GossipKeysRotated = c.At
		s.Cluster.KeysPaying = nil
	}
	s.audit(AuditEvent{Code: codes.EventKeysRotated, At: c.At, Actor: c.Actor, Subject: string(c.Step),
		Detail: fmt.Sprintf("gossip keyring %s: %d keys, primary %s", c.Step, len(keys), KeyID(keys[0]))})
	return nil
}

// checkKeyStep refuses a keyring change that is not what step says.
func checkKeyStep(step KeyStep, cur, next [][]byte) error {
	bad := func(why string) error {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("gossip key step %s: %s", step, why))
	}
	if len(cur) == 0 {
		return bad("the cluster has no gossip key")
	}
	switch step {
	case KeyInstall:
		if len(next) != 2 || !bytes.Equal(next[0], cur[0]) {
			return bad("want the current primary followed by the new key")
		}
		for _, k := range cur {
			if bytes.Equal(k, next[1]) {
				return bad("the new key is already installed")
			}
		}
	case KeyUse:
		if len(cur) != 2 || len(next) != 2 || !bytes.Equal(next[0], cur[1]) || !bytes.Equal(next[1], cur[0]) {
			return bad("want the installed key made primary, the old one kept")
		}
	case KeyDrop:
		if len(cur) != 2 || len(next) != 1 || !bytes.Equal(next[0], cur[0]) {
			return bad("want the primary alone")
		}
	default:
		return bad("unknown step")
	}
	return nil
}

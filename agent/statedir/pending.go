package statedir

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// pendingFile holds the keys of a join whose outcome is not known yet
// (0600: private keys). A join that could not tell whether the cluster
// recorded it (the connection or the leader died after the request went
// out) keeps them, so that running the same `meshctl join` again proves
// possession of the same keys and gets the recorded certificates back
// (enroll.Resumer). A join that got an answer removes the file.
const pendingFile = "pending-join.json"

type pendingJoin struct {
	Token string   `json:"token"` // hash of the token secret the keys were made for
	Keys  pki.Keys `json:"keys"`
}

// PendingKeys returns the keys saved for this token, or makes and saves new
// ones.
func PendingKeys(stateDir string, tok enroll.Token) (*pki.Keys, bool, error) {
	path := filepath.Join(stateDir, pendingFile)
	raw, err := pki.ReadKeyFile(path)
	switch {
	case err == nil:
		var p pendingJoin
		if json.Unmarshal(raw, &p) == nil && p.Token == tok.PendingID() && len(p.Keys.CSR) > 0 {
			return &p.Keys, true, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, err
	}
	keys, err := pki.NewKeys(tok.Name)
	if err != nil {
		return nil, false, err
	}
	b, err := json.Marshal(pendingJoin{Token: tok.PendingID(), Keys: *keys})
	if err != nil {
		return nil, false, err
	}
	if err := pki.WriteFileAtomic(path, b, 0o600); err != nil {
		return nil, false, WriteErr(err)
	}
	return keys, false, nil
}

// UnconfirmedJoin reports whether the join that made this node's identity
// has not been confirmed yet: its pending keys are still saved and are the
// identity's own (a crash between node.json and step 10's end). token is
// the hash of the token that join used.
func UnconfirmedJoin(stateDir string) (token string, ok bool) {
	raw, err := pki.ReadKeyFile(filepath.Join(stateDir, pendingFile))
	if err != nil {
		return "", false
	}
	var p pendingJoin
	if json.Unmarshal(raw, &p) != nil || len(p.Keys.TLSKeyPEM) == 0 {
		return "", false
	}
	id, err := pki.LoadIdentity(filepath.Join(stateDir, IdentityDir))
	if err != nil || !bytes.Equal(id.Key, p.Keys.TLSKeyPEM) {
		return "", false
	}
	return p.Token, true
}

// SettlePending removes the saved keys once the join's outcome is known: it
// failed with an answer (nothing recorded, or recorded for other keys), or
// it succeeded and the keys now live in the identity.
func SettlePending(stateDir string) {
	_ = os.Remove(filepath.Join(stateDir, pendingFile))
}

// OutcomeUnknown: no seed answered (the request may have reached one that
// then died), the caller went away mid-call, or the answer does not say
// that nothing was recorded for these keys: a seed without a raft leader
// or not yet caught up could not read the record to resume it, and a used
// token may have been used by this very join, admitted through a control
// node that died before answering. The keys are kept for the same token
// only (PendingKeys), so keeping them costs nothing.
func OutcomeUnknown(err error) bool {
	switch codes.Of(err) {
	case "", codes.SeedsUnreachable, codes.NoLeader, codes.NotInCluster, codes.TokenConsumed:
		return true
	}
	return false
}

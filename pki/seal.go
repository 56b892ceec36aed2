package pki

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"filippo.io/age"

	"github.com/meshd/meshd/codes"
)

// backupFormat names the sealed payload of `meshctl ca backup`.
const backupFormat = "meshd-ca-backup-v1"

// MinPassphrase is the shortest passphrase a CA backup is sealed with.
const MinPassphrase = 12

// maxBackup bounds what OpenCABackup reads (a real one is about 2 KiB).
const maxBackup = 1 << 20

// DefaultScryptWorkFactor is age's scrypt work factor (log2 N) a backup
// is sealed with unless the caller names another: age's default, about a
// second and 256 MiB per seal or open.
const DefaultScryptWorkFactor = 18

// maxScryptWorkFactor is the costliest work factor SealCABackup uses and
// OpenCABackup accepts.
const maxScryptWorkFactor = 18

// CABackup is what a sealed CA backup holds: both CA keys and
// certificates, and the identity of the cluster they belong to.
type CABackup struct {
	Format        string    `json:"format"`
	ClusterID     string    `json:"cluster_id"`
	ClusterName   string    `json:"cluster_name"`
	CAFingerprint string    `json:"ca_fingerprint"`
	Created       time.Time `json:"created"`
	CA            CABundle  `json:"ca"`
	// The next CA of a rotation in progress when the backup was taken
	// (pki.CANextDir); absent outside a rotation.
	NextCAFingerprint string    `json:"next_ca_fingerprint,omitempty"`
	Next              *CABundle `json:"next,omitempty"`
}

// NextCA is the backup's next CA (nil if it has none), checked against
// its recorded fingerprint.
func (b CABackup) NextCA() (*CA, error) {
	if b.Next == nil {
		return nil, nil
	}
	ca, err := ParseCA(*b.Next)
	if err != nil {
		return nil, fmt.Errorf("the backup's next CA: %w", err)
	}
	if ca.Fingerprint().String() != b.NextCAFingerprint {
		return nil, errors.New("the backup's next CA certificate does not match its recorded fingerprint")
	}
	return ca, nil
}

// String names the cluster and never a key.
func (b CABackup) String() string {
	return fmt.Sprintf("pki.CABackup{cluster %s (%s) sha256:%s}", b.ClusterName, b.ClusterID, b.CAFingerprint)
}

// CheckPassphrase refuses a passphrase shorter than MinPassphrase
// (codes.CAPassphrase).
func CheckPassphrase(p []byte) error {
	if len(bytes.TrimSpace(p)) < MinPassphrase {
		return codes.Wrap(codes.CAPassphrase, fmt.Errorf("the passphrase has %d characters, want at least %d", len(bytes.TrimSpace(p)), MinPassphrase))
	}
	return nil
}

// SealCABackup encrypts b with passphrase (age, scrypt recipient) at
// scrypt work factor workFactor (0: DefaultScryptWorkFactor; tests pass a
// cheaper one, since a factor of 18 starves a test's fast raft timers).
// The result is the whole file; it holds nothing readable without the
// passphrase. Opening reads the factor from the file.
func SealCABackup(b CABackup, passphrase []byte, workFactor int) ([]byte, error) {
	if err := CheckPassphrase(passphrase); err != nil {
		return nil, err
	}
	if workFactor == 0 {
		workFactor = DefaultScryptWorkFactor
	}
	if workFactor < 1 || workFactor > maxScryptWorkFactor {
		return nil, fmt.Errorf("seal CA backup: scrypt work factor %d outside 1..%d", workFactor, maxScryptWorkFactor)
	}
	if _, err := ParseCA(b.CA); err != nil {
		return nil, fmt.Errorf("seal CA backup: %w", err)
	}
	if _, err := b.NextCA(); err != nil {
		return nil, fmt.Errorf("seal CA backup: %w", err)
	}
	b.Format = backupFormat
	plain, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("seal CA backup: %w", err)
	}
	r, err := age.NewScryptRecipient(string(passphrase))
	if err != nil {
		return nil, fmt.Errorf("seal CA backup: %w", err)
	}
	r.SetWorkFactor(workFactor)
	var out bytes.Buffer
	w, err := age.Encrypt(&out, r)
	if err != nil {
		return nil, fmt.Errorf("seal CA backup: %w", err)
	}
	if _, err := w.Write(plain); err != nil {
		return nil, fmt.Errorf("seal CA backup: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("seal CA backup: %w", err)
	}
	clear(plain)
	return out.Bytes(), nil
}

// OpenCABackup decrypts a file SealCABackup wrote and checks that its
// keys match its certificates and its fingerprint. A wrong passphrase is
// codes.BackupPassphrase; a truncated, altered or foreign file
// codes.BackupCorrupt. The errors never carry the passphrase or a key.
func OpenCABackup(sealed, passphrase []byte) (CABackup, *CA, error) {
	id, err := age.NewScryptIdentity(string(passphrase))
	if err != nil {
		return CABackup{}, nil, codes.Wrap(codes.CAPassphrase, errors.New("the passphrase is empty"))
	}
	// A file names its own work factor; age accepts up to 22 (4 GiB of
	// memory). meshd seals with 18 and opens nothing costlier, so a
	// crafted file cannot make it allocate more than 256 MiB.
	id.SetMaxWorkFactor(maxScryptWorkFactor)
	r, err := age.Decrypt(bytes.NewReader(sealed), id)
	if err != nil {
		if errors.Is(err, age.ErrIncorrectIdentity) {
			return CABackup{}, nil, codes.Wrap(codes.BackupPassphrase, errors.New("the passphrase does not open this backup"))
		}
		return CABackup{}, nil, codes.Wrap(codes.BackupCorrupt, fmt.Errorf("not a sealed meshd CA backup, or truncated: %w", err))
	}
	plain, err := io.ReadAll(io.LimitReader(r, maxBackup))
	if err != nil {
		// age authenticates every chunk: a cut or altered body fails here.
		return CABackup{}, nil, codes.Wrap(codes.BackupCorrupt, fmt.Errorf("the backup is truncated or altered: %w", err))
	}
	defer clear(plain)
	var b CABackup
	if err := json.Unmarshal(plain, &b); err != nil || b.Format != backupFormat {
		return CABackup{}, nil, codes.Wrap(codes.BackupCorrupt, errors.New("the sealed content is not a meshd CA backup"))
	}
	ca, err := ParseCA(b.CA)
	if err != nil {
		return CABackup{}, nil, codes.Wrap(codes.BackupCorrupt, fmt.Errorf("the backup's CA: %w", err))
	}
	if ca.Fingerprint().String() != b.CAFingerprint {
		return CABackup{}, nil, codes.Wrap(codes.BackupCorrupt, errors.New("the backup's CA certificate does not match its recorded fingerprint"))
	}
	if _, err := b.NextCA(); err != nil {
		return CABackup{}, nil, codes.Wrap(codes.BackupCorrupt, err)
	}
	return b, ca, nil
}

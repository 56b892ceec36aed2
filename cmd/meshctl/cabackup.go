package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/codes"
)

// maxPassphraseFile and maxBackupFile bound what meshctl reads.
const (
	maxPassphraseFile = 4 << 10
	maxBackupFile     = 32 << 10
)

func (a *app) addBackupCommands(ca *cobra.Command) {
	ca.AddCommand(a.caBackupCommand(), a.caRestoreCommand())
}

func (a *app) caBackupCommand() *cobra.Command {
	var out, passFile string
	c := &cobra.Command{
		Use:   "backup --out FILE --passphrase-file F",
		Short: "Write a sealed copy of the CA keys and the cluster identity (on the CA holder)",
		Long: "backup seals both CA keys and certificates and the cluster identity with the passphrase in F " +
			"(at least 12 characters; age, scrypt) and writes FILE with mode 0600. Keep FILE and the passphrase " +
			"apart and off the cluster. raft records when the backup was taken; `meshctl status` on the holder shows it.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if out == "" || passFile == "" {
				return usageError{errors.New("give --out FILE and --passphrase-file F")}
			}
			pass, err := readPassphrase(passFile)
			if err != nil {
				return err
			}
			// The file is created before meshd records a backup, so an
			// unwritable --out costs nothing.
			f, err := createPrivateFile(out)
			if err != nil {
				return err
			}
			defer f.abort()
			r, err := a.client().CABackup(cmd.Context(), pass)
			if err != nil {
				return err
			}
			if err := f.commit(r.Sealed); err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(struct {
					File      string    `json:"file"`
					At        time.Time `json:"at"`
					Cluster   string    `json:"cluster"`
					ClusterID string    `json:"cluster_id"`
				}{out, r.At, r.Cluster, r.ClusterID})
			}
			a.out.Printf("sealed CA backup of cluster %s (%s) written to %s (0600)\n", r.Cluster, r.ClusterID, out)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "the file to write (mode 0600)")
	c.Flags().StringVar(&passFile, "passphrase-file", "", "a file holding the passphrase")
	a.addOutput(c)
	return c
}

func (a *app) caRestoreCommand() *cobra.Command {
	var passFile string
	c := &cobra.Command{
		Use:   "restore FILE --passphrase-file F",
		Short: "Make this control node the CA holder from a sealed backup (when the holder is lost)",
		Long: "restore opens FILE with the passphrase in F, checks it is this cluster's CA, writes the keys on " +
			"this node (an active control voter) and records it as the CA holder through raft. It is refused while " +
			"the recorded holder is alive in gossip or answers over the internal API: move custody with `meshctl ca " +
			"handoff` then.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if passFile == "" {
				return usageError{errors.New("give --passphrase-file F")}
			}
			sealed, err := readLimited(argv[0], maxBackupFile)
			if err != nil {
				return usageError{fmt.Errorf("backup file: %w", err)}
			}
			pass, err := readPassphrase(passFile)
			if err != nil {
				return err
			}
			r, err := a.client().CARestore(cmd.Context(), sealed, pass)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(r)
			}
			a.out.Printf("CA custody restored on %s (the record named %s) in %s\n", r.To, r.From, r.Took.Round(time.Millisecond))
			return nil
		},
	}
	c.Flags().StringVar(&passFile, "passphrase-file", "", "a file holding the passphrase")
	a.addOutput(c)
	return c
}

// readPassphrase reads a passphrase file: its first line, without the
// line end. An unreadable file is codes.CAPassphrase; the error never
// holds the file's content.
func readPassphrase(path string) (string, error) {
	b, err := readLimited(path, maxPassphraseFile)
	if err != nil {
		return "", codes.Wrap(codes.CAPassphrase, fmt.Errorf("--passphrase-file: %w", err))
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimRight(line, "\r"), nil
}

func readLimited(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes", path, max)
	}
	return b, nil
}

// privateFile is a file written atomically with mode 0600: a temp file
// in the target's directory, renamed over it by commit.
type privateFile struct {
	f    *os.File
	path string
	done bool
}

func createPrivateFile(path string) (*privateFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("--out: %w", err))
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("--out: %w", err))
	}
	return &privateFile{f: f, path: path}, nil
}

// commit writes data, fsyncs it and renames the file over its path.
func (p *privateFile) commit(data []byte) error {
	if _, err := p.f.Write(data); err != nil {
		return codes.Wrap(codes.StateDir, fmt.Errorf("--out: %w", err))
	}
	if err := p.f.Sync(); err != nil {
		return codes.Wrap(codes.StateDir, fmt.Errorf("--out: %w", err))
	}
	if err := p.f.Close(); err != nil {
		return codes.Wrap(codes.StateDir, fmt.Errorf("--out: %w", err))
	}
	if err := os.Rename(p.f.Name(), p.path); err != nil {
		return codes.Wrap(codes.StateDir, fmt.Errorf("--out: %w", err))
	}
	p.done = true
	return nil
}

// abort removes the temp file unless commit renamed it.
func (p *privateFile) abort() {
	if !p.done {
		_ = p.f.Close()
		_ = os.Remove(p.f.Name())
	}
}

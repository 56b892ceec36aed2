package main

import (
	"crypto/ecdh"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/nebulabundle"
)

// `meshctl nebula-bundle` (issue 35) spends a --nebula-only token for a
// device that runs stock Nebula: it talks to the token's seeds itself,
// over the join's pinned TLS (enroll.NebulaBundle), and writes the
// device's bundle directory (package nebulabundle). It needs no meshd and
// never opens the local socket, so it runs on any machine that has
// meshctl, for a phone or a router that cannot run it.

// maxKeyFile bounds what --pubkey reads: a Nebula key in PEM is about a
// hundred bytes.
const maxKeyFile = 16 << 10

// QRFile is what --qr writes beside the bundle: the host certificate as a
// QR code, for Mobile Nebula's "scan a certificate".
const QRFile = "host.crt.png"

// Nebula's PEM banners of an X25519 key pair (Nebula v1.11.0 and v1.12.0 cert/pem.go),
// as nebulabundle.GenerateKey and `nebula-cert keygen` write them.
const (
	x25519PublicBanner  = "NEBULA X25519 PUBLIC KEY"
	x25519PrivateBanner = "NEBULA X25519 PRIVATE KEY"
)

type nebulaBundleFlags struct {
	tokenFile, pubkeyFile, out, pkiDir string
	generate, renew, qr                bool
}

func (a *app) nebulaBundleCommand() *cobra.Command {
	var f nebulaBundleFlags
	cmd := &cobra.Command{
		Use:   "nebula-bundle --token-file PATH (--pubkey FILE | --generate) --out DIR",
		Short: "Spend a --nebula-only token: write the certificate, CA and config.yml of a device that runs stock Nebula",
		Long: "nebula-bundle spends a token minted with `meshctl admit NAME --nebula-only` for a device that runs the stock " +
			"nebula binary instead of meshd, and writes what that device needs into DIR: ca.crt, host.crt, host.key " +
			"(0600, only with --generate) and config.yml (the cluster's lighthouses and relays; the inbound firewall " +
			"takes ICMP from anyone and everything from the member's own node groups, outbound is open). It talks to " +
			"the token's seeds itself, over the same pinned TLS as a join, and needs no meshd on this machine.\n\n" +
			"The device's key: --pubkey FILE sends the public key the device made (`nebula-cert keygen -out-pub " +
			"host.pub -out-key host.key`), and the private key never leaves the device; given a Nebula private key " +
			"instead, meshctl derives its public half and sends only that. --generate makes a new key pair here and " +
			"writes the private key only into DIR/host.key. Only the public key is ever sent.\n\n" +
			"--renew spends a renewal token (`meshctl admit NAME --nebula-only --renew`) for a new certificate of the key " +
			"the member holds: give that key with --pubkey. The token is read from --token-file (- for standard " +
			"input; keep the file mode 0600) and never printed. Everything that can be checked here (the token, the " +
			"key, DIR) is checked before the token is spent.\n\n" +
			"Run stock nebula from DIR (`cd DIR && nebula -config config.yml`: the config names the files by bare " +
			"name, which nebula resolves against its working directory), or give --pki-dir with the directory the " +
			"files will live in on the device (such as /etc/nebula) and copy them there.",
		Example: "  meshctl nebula-bundle --token-file phone1.token --generate --out phone1 --qr\n" +
			"  meshctl nebula-bundle --token-file r1.token --pubkey r1-host.pub --out r1 --pki-dir /etc/nebula\n" +
			"  meshctl nebula-bundle --token-file r1-renew.token --renew --pubkey r1-host.pub --out r1 --pki-dir /etc/nebula",
		Args:              args(cobra.NoArgs),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			return a.nebulaBundle(cmd, f, asJSON)
		},
	}
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "read the --nebula-only token from `PATH` (- for standard input); required")
	cmd.Flags().StringVar(&f.pubkeyFile, "pubkey", "", "the device's Nebula public key in PEM (`FILE`, as nebula-cert keygen writes it); a private key is read only to derive its public half")
	cmd.Flags().BoolVar(&f.generate, "generate", false, "make a new key pair here; the private key goes only into DIR/host.key (0600)")
	cmd.Flags().StringVar(&f.out, "out", "", "write the bundle into `DIR` (made 0700 when missing); required")
	cmd.Flags().BoolVar(&f.renew, "renew", false, "spend a renewal token: a new certificate for the key the member holds (give it with --pubkey)")
	cmd.Flags().StringVar(&f.pkiDir, "pki-dir", "", "config.yml names ca.crt, host.crt and host.key in `DIR` on the device, an absolute path such as /etc/nebula (default: bare names, run nebula from the bundle directory)")
	cmd.Flags().BoolVar(&f.qr, "qr", false, "also write DIR/"+QRFile+", the host certificate as a QR code for Mobile Nebula")
	a.addOutput(cmd)
	return cmd
}

// nebulaBundle checks everything it can, spends the token, then writes.
// No error it returns holds the token, a private key or PEM text.
func (a *app) nebulaBundle(cmd *cobra.Command, f nebulaBundleFlags, asJSON bool) error {
	changed := cmd.Flags().Changed
	switch {
	case !changed("token-file") || f.tokenFile == "":
		return usageError{errors.New("nebula-bundle needs the token: --token-file PATH (or - for standard input)")}
	case f.out == "":
		return usageError{errors.New("nebula-bundle needs --out DIR, the directory to write the bundle into")}
	case changed("pubkey") == f.generate:
		return codes.Wrap(codes.BadRequest, errors.New("give exactly one of --pubkey FILE (the device made its key) and --generate (make one here)"))
	case f.renew && f.generate:
		return codes.Wrap(codes.BadRequest, errors.New("--renew certifies the key the member holds: give its public key with --pubkey, not --generate"))
	case f.pkiDir != "" && !path.IsAbs(f.pkiDir):
		return codes.Wrap(codes.BadRequest, fmt.Errorf("--pki-dir %q: want an absolute path on the device, such as /etc/nebula (nebula resolves a relative one against its working directory)", f.pkiDir))
	}
	if f.pkiDir != "" {
		f.pkiDir = path.Clean(f.pkiDir)
	}
	raw, err := a.readSecretFile("--token-file", f.tokenFile, maxTokenFile, "token")
	if err != nil {
		return err
	}
	tok, err := enroll.ParseToken(raw)
	if err != nil {
		return err
	}
	if err := tok.CheckExpiry(time.Now()); err != nil {
		return err
	}
	var pub, priv []byte
	if f.generate {
		if pub, priv, err = nebulabundle.GenerateKey(); err != nil {
			return err
		}
	} else if pub, err = readNebulaPublicKey(f.pubkeyFile); err != nil {
		return err
	}
	if err := checkOutDir(f.out, f.generate); err != nil {
		return err
	}

	step := func(msg string) {
		if !asJSON {
			a.out.Printf("• %s\n", msg)
		}
	}
	resp, err := enroll.NebulaBundle(cmd.Context(), tok, enroll.NebulaRequest{PublicKey: pub, Renew: f.renew}, enroll.ClientDeps{
		Step: step,
		Warn: func(c codes.Code, detail string) { a.errOut.Printf("warning %s: %s (%s)\n", c, c.Cause(), detail) },
	})
	if err != nil {
		return err
	}

	// The token is spent: from here a failure says so, since running the
	// command again needs a new token.
	spent := func(err error) error {
		return codes.Wrap(codes.OrInternal(err), fmt.Errorf("the token is spent and %s is certified, but %w; mint a new token to try again", resp.Name, err))
	}
	b, skipped, err := bundleOf(resp, priv, f.pkiDir)
	if err != nil {
		return spent(err)
	}
	for _, s := range skipped {
		a.errOut.Printf("warning: lighthouse %s: underlay %s is not an IP address and port; left out of config.yml\n", s.lighthouse, s.underlay)
	}
	if err := b.WriteDir(f.out); err != nil {
		if errors.Is(err, nebulabundle.ErrKeyExists) {
			return spent(codes.Wrap(codes.BadRequest, err))
		}
		return spent(codes.Wrap(codes.StateDir, err))
	}
	files := []string{nebulabundle.CAFile, nebulabundle.CertFile}
	if priv != nil {
		files = append(files, nebulabundle.KeyFile)
	}
	files = append(files, nebulabundle.ConfigFile)
	if f.qr {
		png, err := b.CertQR()
		if err != nil {
			return spent(err)
		}
		if err := writeFileAtomic(f.out, QRFile, png, 0o644); err != nil {
			return spent(codes.Wrap(codes.StateDir, err))
		}
		files = append(files, QRFile)
	}
	run := "cd " + shellQuote(f.out) + " && nebula -config " + nebulabundle.ConfigFile
	if f.pkiDir != "" {
		run = "nebula -config " + path.Join(f.pkiDir, nebulabundle.ConfigFile)
	}
	if asJSON {
		return a.printJSON(nebulaBundleJSON(resp, f, files, run))
	}
	a.printNebulaBundle(resp, f, files, run)
	return nil
}

// readNebulaPublicKey reads --pubkey: a Nebula X25519 public key in PEM,
// returned as it is; or a Nebula X25519 private key, whose public half is
// returned (the private key goes no further). Anything else is refused
// with codes.NebulaKeyCurve, before anything is sent; errors name the PEM
// block type, never its content.
func readNebulaPublicKey(file string) ([]byte, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, usageError{fmt.Errorf("--pubkey: %w", err)}
	}
	defer fh.Close()
	raw, err := io.ReadAll(io.LimitReader(fh, maxKeyFile+1))
	if err != nil {
		return nil, usageError{fmt.Errorf("--pubkey %s: %w", file, err)}
	}
	if len(raw) > maxKeyFile {
		return nil, codes.Wrap(codes.NebulaKeyCurve, fmt.Errorf("--pubkey %s: more than %d bytes, not a Nebula key", file, maxKeyFile))
	}
	blk, rest := pem.Decode(raw)
	switch {
	case blk == nil:
		return nil, codes.Wrap(codes.NebulaKeyCurve, fmt.Errorf("--pubkey %s: no PEM block; want a %s", file, x25519PublicBanner))
	case len(strings.TrimSpace(string(rest))) > 0:
		return nil, codes.Wrap(codes.NebulaKeyCurve, fmt.Errorf("--pubkey %s: more than one PEM block; want one %s", file, x25519PublicBanner))
	}
	switch blk.Type {
	case x25519PublicBanner:
		if len(blk.Bytes) != 32 {
			return nil, codes.Wrap(codes.NebulaKeyCurve, fmt.Errorf("--pubkey %s: a %s of %d bytes, want 32", file, blk.Type, len(blk.Bytes)))
		}
		return pem.EncodeToMemory(&pem.Block{Type: x25519PublicBanner, Bytes: blk.Bytes}), nil
	case x25519PrivateBanner:
		k, err := ecdh.X25519().NewPrivateKey(blk.Bytes)
		if err != nil {
			return nil, codes.Wrap(codes.NebulaKeyCurve, fmt.Errorf("--pubkey %s: a %s of %d bytes, want 32", file, blk.Type, len(blk.Bytes)))
		}
		return pem.EncodeToMemory(&pem.Block{Type: x25519PublicBanner, Bytes: k.PublicKey().Bytes()}), nil
	}
	return nil, codes.Wrap(codes.NebulaKeyCurve, fmt.Errorf("--pubkey %s: a %s; want a %s (nebula-cert keygen, default curve 25519)", file, safe(blk.Type), x25519PublicBanner))
}

// checkOutDir checks, before the token is spent and without writing
// anything, that the bundle can be written into dir: dir is a directory
// (or can be made under its nearest existing parent) that this user may
// write, and, for a generated key, holds no host.key (WriteDir would not
// replace it: nebulabundle.ErrKeyExists).
func checkOutDir(dir string, newKey bool) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return codes.Wrap(codes.BadRequest, fmt.Errorf("--out %s is not a directory", dir))
	case err == nil:
		if newKey {
			if _, err := os.Lstat(filepath.Join(dir, nebulabundle.KeyFile)); err == nil {
				return codes.Wrap(codes.BadRequest, fmt.Errorf("--out %s holds a %s already, and --generate makes a new key: "+
					"give that key's public half with --pubkey, or write into another directory", dir, nebulabundle.KeyFile))
			}
		}
		return probeWritable(dir)
	case !errors.Is(err, fs.ErrNotExist):
		return codes.Wrap(codes.StateDir, fmt.Errorf("--out %s: %w", dir, err))
	}
	parent := filepath.Dir(filepath.Clean(dir))
	for {
		fi, err := os.Stat(parent)
		if err == nil {
			if !fi.IsDir() {
				return codes.Wrap(codes.BadRequest, fmt.Errorf("--out %s: %s is not a directory", dir, parent))
			}
			return probeWritable(parent)
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(parent) == parent {
			return codes.Wrap(codes.StateDir, fmt.Errorf("--out %s: %w", dir, err))
		}
		parent = filepath.Dir(parent)
	}
}

// probeWritable makes and removes a temp file in dir.
func probeWritable(dir string) error {
	tmp, err := os.CreateTemp(dir, ".meshctl-probe-*")
	if err != nil {
		return codes.Wrap(codes.StateDir, fmt.Errorf("--out: cannot write in %s: %w", dir, err))
	}
	name := tmp.Name()
	_ = tmp.Close()
	return os.Remove(name)
}

// skippedUnderlay is a lighthouse endpoint a bundle cannot name: not an
// IP address and port (nebulabundle.Host takes addresses only).
type skippedUnderlay struct{ lighthouse, underlay string }

// bundleOf makes the device's bundle from the cluster's answer: the CA
// bundle, the certificate, the key when it was made here, the lighthouses
// (endpoints that are not an IP and port are skipped and returned), the
// relays, and the inbound firewall: ICMP from any host, and anything from
// the member's own groups. Outbound is left nil: any.
func bundleOf(resp *enroll.NebulaResponse, key []byte, pkiDir string) (nebulabundle.Bundle, []skippedUnderlay, error) {
	b := nebulabundle.Bundle{
		CACerts: resp.NebulaCACert,
		Cert:    resp.NebulaCert,
		Key:     key,
		PKIDir:  pkiDir,
		Relays:  resp.Relays,
		Inbound: []nebulabundle.Rule{{Port: "any", Proto: "icmp", Host: "any"}},
	}
	for _, g := range resp.Groups {
		b.Inbound = append(b.Inbound, nebulabundle.Rule{Port: "any", Proto: "any", Group: g})
	}
	var skipped []skippedUnderlay
	for _, lh := range resp.Lighthouses {
		h := nebulabundle.Host{Overlay: lh.Overlay, Overlay6: lh.Overlay6}
		for _, u := range lh.Underlay {
			ap, err := netip.ParseAddrPort(u)
			if err != nil {
				skipped = append(skipped, skippedUnderlay{lh.Name, u})
				continue
			}
			h.Underlay = append(h.Underlay, ap)
		}
		if len(h.Underlay) > 0 {
			b.Lighthouses = append(b.Lighthouses, h)
		}
	}
	if len(b.Lighthouses) == 0 {
		return b, skipped, codes.Wrap(codes.EnrollRejected, errors.New("the cluster named no lighthouse with an IP address and port a config.yml can hold"))
	}
	if err := b.Validate(); err != nil {
		return b, skipped, codes.Wrap(codes.EnrollRejected, err)
	}
	return b, skipped, nil
}

// writeFileAtomic replaces dir/name with data at mode: temp file, fsync,
// rename.
func writeFileAtomic(dir, name string, data []byte, mode fs.FileMode) (err error) {
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	for _, step := range []func() error{
		func() error { _, err := tmp.Write(data); return err },
		func() error { return tmp.Chmod(mode) },
		tmp.Sync,
		tmp.Close,
		func() error { return os.Rename(tmp.Name(), filepath.Join(dir, name)) },
	} {
		if err = step(); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
		}
	}
	return nil
}

// overlays is the member's overlay addresses, IPv4 first.
func overlays(resp *enroll.NebulaResponse) string {
	s := resp.OverlayIP.String()
	if resp.OverlayIP6.IsValid() {
		s += " " + resp.OverlayIP6.String()
	}
	return s
}

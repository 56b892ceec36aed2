package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

// maxTokenFile bounds what --token-file reads. A join token is about a
// hundred bytes; anything past this is the wrong file, and is not read on.
const maxTokenFile = 4 << 10

func (a *app) joinCommand() *cobra.Command {
	var (
		req       apitype.JoinRequest
		tokenFile string
		jwtFile   string
		plan      bool
	)
	cmd := &cobra.Command{
		Use:   "join (TOKEN | --token-file PATH | --jwt-file PATH --seed HOST:PORT --ca-sha256 SHA256)",
		Short: "Join the cluster that minted a token",
		Long: "join enrols this node with the cluster that minted the token (meshctl admit on a control node) and " +
			"exits 0 only once the node is confirmed in the cluster.\n\n" +
			"Prefer --token-file: a TOKEN argument is visible to every user of this machine in ps and /proc for " +
			"as long as the join runs, and stays in the shell's history. --token-file PATH reads the token from a " +
			"file (keep it mode 0600; meshctl warns when it is readable by group or others), --token-file - from " +
			"standard input. Surrounding whitespace is ignored. meshctl never prints the token.\n\n" +
			"--plan runs every check a join makes before it spends the token, prints each with ok or its code, " +
			"and exits 0 only if a real join would pass them all: the token (format, version, expiry), this " +
			"machine's identity, the underlay address and why it was chosen, the ports, the TUN device, the state " +
			"dir, each seed (reachable, pinned to the token's CA), the clock against a seed, and whether the token " +
			"is still unused and the name free (asked of a seed, which consumes and records nothing). " +
			"Nothing is written and the token can still be used.\n\n" +
			"A token minted with `meshctl admit NAME --approve` makes the join wait after it has verified the cluster: " +
			"it prints a 6-digit code and goes on once an operator runs `meshctl approve NAME CODE` on a control node " +
			"with that code, or fails when the token expires. With -o json each line of the join is a JSON object " +
			"as it happens (step, warning, approval with the code), and the last one is the result, or on a failure " +
			"error (code, cause, remedy, detail; stderr and the exit code as without -o json).",
		Example: "  meshctl join --plan --token-file /root/w1.token   # every preflight check; the token stays unused\n" +
			"  meshctl join --token-file /root/w1.token\n" +
			"  meshctl join --token-file - < /root/w1.token\n" +
			"  ssh root@origin meshctl admit w1 | tail -n 1 | meshctl join --token-file -",
		Args:              args(cobra.MaximumNArgs(1)),
		ValidArgsFunction: cobra.NoFileCompletions, // the token is pasted, not a file
		RunE: func(cmd *cobra.Command, argv []string) error {
			if cmd.Flags().Changed("jwt-file") {
				if len(argv) > 0 || cmd.Flags().Changed("token-file") || plan {
					return usageError{fmt.Errorf("--jwt-file joins without a token: no TOKEN, --token-file or --plan with it")}
				}
				jwt, err := a.readSecretFile("--jwt-file", jwtFile, maxJWTFile, "JWT")
				if err != nil {
					return err
				}
				req.JWT = jwt
			} else {
				tok, err := a.joinToken(argv, tokenFile, cmd.Flags().Changed("token-file"))
				if err != nil {
					return err
				}
				req.Token = tok
			}
			if plan {
				return a.runPlan(cmd, req)
			}
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			res, err := a.client().Join(cmd.Context(), req, func(l apitype.JoinLine) { a.printJoinLine(l, asJSON) })
			if err != nil {
				return a.joinFailed(err, asJSON) // joinjson.go
			}
			if asJSON {
				a.printJoinLine(apitype.JoinLine{Result: res}, true)
				return nil
			}
			a.out.Printf("joined cluster %q as %s (%s), overlay %s\n", res.Cluster, res.Node, res.Role, res.OverlayIP)
			return nil
		},
	}
	cmd.Flags().StringVar(&jwtFile, "jwt-file", "", "join by identity: read a short-lived JWT from `PATH` (- for standard input; a CI job's OIDC token, a projected service-account token) that an issuer the control nodes trust signed; needs --seed and --ca-sha256")
	cmd.Flags().StringVar(&req.Seed, "seed", "", "with --jwt-file: the control node to ask, `HOST:PORT` of its enroll API (7300)")
	cmd.Flags().StringVar(&req.CASHA256, "ca-sha256", "", "with --jwt-file: the full SHA-256 of the cluster CA (`meshctl status` on a control node shows it); the join trusts no other")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "read the token from `PATH` (- for standard input) instead of the command line, where ps shows it")
	cmd.Flags().StringVar(&req.AdvertiseAddr, "advertise-addr", "", "underlay IP, IPv4 or IPv6, other nodes reach this one on (default: the source address of the route to the token's first seed; refused when no seed has its family)")
	cmd.Flags().StringVar(&req.AdvertiseIface, "advertise-iface", "", "advertise the address of interface `NAME` (refused when it has none or is down)")
	cmd.Flags().BoolVar(&req.Force, "force", false, "replace this node's existing cluster identity; a member leaves its cluster first, as `meshctl leave` does (refused on the CA holder: CAHolderStays)")
	cmd.Flags().BoolVar(&req.Ephemeral, "ephemeral", false, "join as an ephemeral worker: the cluster removes it once it has been down for ephemeral_after (its name and IP are freed)")
	cmd.Flags().BoolVar(&plan, "plan", false, "run every preflight check and exit 0 only if a join would pass them; nothing is written, the token stays unused")
	a.addOutput(cmd)
	return cmd
}

// joinToken takes the token from exactly one of the TOKEN argument and
// --token-file. No error it returns holds the token or the file's content.
func (a *app) joinToken(argv []string, tokenFile string, fromFile bool) (string, error) {
	switch {
	case len(argv) == 1 && fromFile:
		return "", usageError{fmt.Errorf("join takes the token as an argument or with --token-file, not both")}
	case len(argv) == 1:
		return strings.TrimSpace(argv[0]), nil
	case !fromFile:
		return "", usageError{fmt.Errorf("join needs the token: --token-file PATH (or - for standard input), or a TOKEN argument")}
	case tokenFile == "":
		return "", usageError{fmt.Errorf("--token-file needs a path, or - for standard input")}
	}
	return a.readSecretFile("--token-file", tokenFile, maxTokenFile, "join token")
}

// maxJWTFile bounds what --jwt-file reads: a JWT of more is refused by
// every seed (enroll.MaxJWT).
const maxJWTFile = 16 << 10

// readSecretFile reads what flag names (a join token, a JWT) from path,
// or from standard input for "-": at most max bytes, trimmed of
// surrounding whitespace. It warns (without failing) when a regular file
// is readable by group or others.
func (a *app) readSecretFile(flag, path string, max int, what string) (string, error) {
	var (
		r    io.Reader = a.stdin
		name           = "standard input"
	)
	if path != "-" {
		name = path
		f, err := os.Open(path)
		if err != nil {
			return "", usageError{fmt.Errorf("%s: %w", flag, err)}
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o044 != 0 {
			a.errOut.Printf("warning: %s file %s is readable by group or others (mode %04o); chmod 600 it\n", what, path, fi.Mode().Perm())
		}
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return "", usageError{fmt.Errorf("%s %s: %w", flag, name, err)}
	}
	if len(b) > max {
		return "", usageError{fmt.Errorf("%s %s: more than %d bytes, not a %s", flag, name, max, what)}
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", usageError{fmt.Errorf("%s %s: empty, no %s in it", flag, name, what)}
	}
	return tok, nil
}

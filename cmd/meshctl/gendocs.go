package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/meshd/meshd/codes"
)

// genDocsCommand is the hidden `meshctl gen-docs`, run at package build
// time: man pages for meshctl (section 1) and meshd (section 8), and shell
// completion for meshctl. The output depends only on the code, the version
// and $SOURCE_DATE_EPOCH, so package builds stay reproducible.
func (a *app) genDocsCommand() *cobra.Command {
	var manDir, complDir, configDoc string
	cmd := &cobra.Command{
		Use:    "gen-docs --man DIR --completion DIR",
		Short:  "Write man pages and shell completion files (for packaging)",
		Hidden: true,
		Args:   args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if manDir == "" && complDir == "" {
				return usageError{fmt.Errorf("give --man DIR, --completion DIR or both")}
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			if manDir != "" {
				if err := genMan(root, manDir); err != nil {
					return err
				}
				if err := genConfigMan(manDir, configDoc); err != nil { // configman.go
					return err
				}
			}
			if complDir != "" {
				if err := genCompletion(root, complDir); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&manDir, "man", "", "directory for meshctl*.1 and meshd.8")
	cmd.Flags().StringVar(&complDir, "completion", "", "directory for meshctl.bash, _meshctl (zsh) and meshctl.fish")
	cmd.Flags().StringVar(&configDoc, "config-doc", "", "the commented config file (packaging/config/meshd.yaml) to render as meshd.yaml.5 in the --man directory")
	return cmd
}

// docDate is $SOURCE_DATE_EPOCH in UTC, or now.
func docDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Now().UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, usageError{fmt.Errorf("SOURCE_DATE_EPOCH=%q: %v", s, err)}
	}
	return time.Unix(n, 0).UTC(), nil
}

func genMan(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	date, err := docDate()
	if err != nil {
		return err
	}
	src := "meshd " + version
	if err := doc.GenManTree(root, &doc.GenManHeader{Section: "1", Date: &date, Source: src, Manual: "meshd manual"}, dir); err != nil {
		return fmt.Errorf("meshctl man pages: %w", err)
	}
	var b bytes.Buffer
	if err := doc.GenMan(meshdCommand(), &doc.GenManHeader{Section: "8", Date: &date, Source: src, Manual: "meshd manual"}, &b); err != nil {
		return fmt.Errorf("meshd man page: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "meshd.8"), b.Bytes(), 0o644)
}

func genCompletion(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range []struct {
		file string
		gen  func(*bytes.Buffer) error
	}{
		{"meshctl.bash", func(b *bytes.Buffer) error { return root.GenBashCompletionV2(b, true) }},
		{"_meshctl", func(b *bytes.Buffer) error { return root.GenZshCompletion(b) }},
		{"meshctl.fish", func(b *bytes.Buffer) error { return root.GenFishCompletion(b, true) }},
	} {
		var b bytes.Buffer
		if err := c.gen(&b); err != nil {
			return fmt.Errorf("%s: %w", c.file, err)
		}
		if err := os.WriteFile(filepath.Join(dir, c.file), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// meshdCommand describes meshd's command line for its man page only; meshd
// itself parses its flags with the standard flag package (cmd/meshd).
func meshdCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "meshd [--config FILE] [--state-dir DIR] [--socket PATH]",
		Short: "peer-to-peer mesh network agent (daemon)",
		Long: fmt.Sprintf(`meshd is the mesh agent daemon. It is normally started by systemd as meshd.service
and driven with **meshctl**(1) through its local API socket. A freshly installed meshd is
running but unjoined: **meshctl init --cluster NAME** creates a cluster on this machine,
**meshctl join TOKEN** joins one.

The config file is read and validated before anything starts: unknown keys and bad values
stop meshd with the code %[1]s and every problem listed (line, key, value, what is allowed),
and the state directory is not touched. A key file that is readable by group or others is
refused (%[2]s).

# COMMANDS

**meshd check-config** [**--config** FILE]: checks the config file as a start would, lists
every problem at once, and exits 0 when it is valid, 1 (%[1]s) when not. Touches nothing else.

**meshd version** (or **--version**): prints the version, commit and Go version and exits 0.

**meshd help** (or **-h**, **--help**): prints the usage and exits 0.

# SIGNALS

**SIGHUP** re-reads the config file (as **systemctl reload meshd** and **meshctl reload** do).
A config that does not validate is refused (%[4]s) and meshd keeps running with the config it had. log_level applies at
once; other changed fields are logged with the code %[3]s and apply after a restart.

**SIGTERM**, **SIGINT** stop meshd without leaving the cluster; a second signal forces the exit.

# SYSTEMD

meshd.service is Type=notify: meshd sends READY=1 once its socket and state are up,
RELOADING=1 and READY=1 around a reload, STOPPING=1 on shutdown, and watchdog pings only
while its loops answer a health probe.

# LOGGING

meshd logs to standard error in log_format (text or json) at log_level. The lines of raft,
serf, memberlist and Nebula are records of the same stream, filtered by the same level, with
lib naming the library. Under systemd each line carries its journald priority, so
**journalctl -u meshd -p warning** shows only warnings and errors; what meshd prints before
its logger exists (a refused start) is logged at priority err.

# FILES

*/etc/meshd/meshd.yaml*: the config file, a conffile: upgrades keep the administrator's edits.

*/var/lib/meshd*: state (node identity, keys 0600, raft data), mode 0700, owned by the meshd user.

*/run/meshd/meshd.sock*: the local API socket, mode 0660, group meshd: root and members of
group meshd may use meshctl.

# EXIT STATUS

0 after a clean stop, 1 on a coded failure (the code, cause and remedy are printed on
standard error and appear in the journal), 2 on a command-line mistake.

# SEE ALSO

**meshctl**(1), **systemctl**(1), **journalctl**(1)`, codes.ConfigInvalid, codes.KeyPermissions, codes.RestartNeeded, codes.ReloadRefused),
		Example: "systemctl status meshd\njournalctl -u meshd\nmeshd check-config --config /etc/meshd/meshd.yaml\nmeshd --config /etc/meshd/meshd.yaml",
		Run:     func(*cobra.Command, []string) {},
	}
	c.Flags().String("config", "/etc/meshd/meshd.yaml", "config file (a missing default file means defaults)")
	c.Flags().String("state-dir", "", "state directory (overrides state_dir)")
	c.Flags().String("socket", "", "local API socket (overrides socket)")
	c.Flags().Bool("version", false, "print the version and exit")
	c.DisableAutoGenTag = true
	c.DisableFlagsInUseLine = true
	return c
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
)

// The commands of meshd besides the daemon. None of them touches a path
// but the config file check-config reads: `meshd version` used to start a
// daemon on the default paths (flag parsing ignored the argument).

const usageText = `usage:
  meshd [flags]                  run the daemon
  meshd [flags] check-config     check the config file (every problem at once) and exit
  meshd version                  print the version, commit and Go version and exit (also --version)
  meshd help                     print this help and exit (also -h, --help)

Exit codes: 0 success, 1 a coded failure (an invalid config: X400402BADCFG), 2 a usage mistake.

flags:
`

// flags are the daemon's flags; check-config reads the same ones.
type flags struct {
	config, stateDir, socket *string
	showVersion              *bool
	explicitConfig           *bool // --config was given: a missing file is an error
}

func daemonFlags(stderr io.Writer) (*flag.FlagSet, *flags) {
	fs := flag.NewFlagSet("meshd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // dispatch prints the usage, to stdout when asked for
	fl := &flags{
		config:         fs.String("config", "/etc/meshd/meshd.yaml", "config file (a missing default file means defaults)"),
		stateDir:       fs.String("state-dir", "", "state directory (overrides state_dir)"),
		socket:         fs.String("socket", "", "local API socket (overrides socket)"),
		showVersion:    fs.Bool("version", false, "print the version and exit"),
		explicitConfig: new(bool),
	}
	return fs, fl
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usageText)
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// dispatch parses args and runs a command that is not the daemon; done is
// false when the daemon is to run.
func dispatch(fs *flag.FlagSet, fl *flags, args []string, stdout, stderr io.Writer) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return 0, true
		}
		usage(stderr, fs) // flag printed the mistake
		return 2, true
	}
	fs.Visit(func(f *flag.Flag) { *fl.explicitConfig = *fl.explicitConfig || f.Name == "config" })
	if *fl.showVersion {
		return printVersion(stdout), true
	}
	cmd, rest := fs.Arg(0), fs.Args()
	if len(rest) > 0 {
		rest = rest[1:]
	}
	switch cmd {
	case "":
		return 0, false
	case "version", "help":
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "meshd %s: unexpected argument %q\n", cmd, rest[0])
			return 2, true
		}
		if cmd == "help" {
			usage(stdout, fs)
			return 0, true
		}
		return printVersion(stdout), true
	case "check-config":
		return checkConfig(fs, fl, rest, stdout, stderr), true
	}
	fmt.Fprintf(stderr, "meshd: unknown command %q\n", cmd)
	usage(stderr, fs)
	return 2, true
}

func printVersion(stdout io.Writer) int {
	fmt.Fprintf(stdout, "meshd %s\n", apitype.NewBuild(version, commit))
	return 0
}

// readConfig reads the config file with the flags' overrides through the
// checker: at start, on every reload and for check-config alike.
func (fl *flags) readConfig() (config.File, error) {
	return config.Check(*fl.config, *fl.explicitConfig, func(c *config.File) {
		if *fl.stateDir != "" {
			c.StateDir = *fl.stateDir
		}
		if *fl.socket != "" {
			c.Socket = *fl.socket
		}
	})
}

// checkConfig is `meshd check-config [--config F]`: the daemon's flags may
// come before or after the command. It prints "F: valid" and exits 0, or
// every problem and exits 1 with ConfigInvalid, as a refused start would.
func checkConfig(fs *flag.FlagSet, fl *flags, args []string, stdout, stderr io.Writer) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return 0
		}
		usage(stderr, fs)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "meshd check-config: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fs.Visit(func(f *flag.Flag) { *fl.explicitConfig = *fl.explicitConfig || f.Name == "config" })
	cfg, err := fl.readConfig()
	if err != nil {
		return fail(stderr, err)
	}
	if !*fl.explicitConfig && !fileExists(*fl.config) {
		fmt.Fprintf(stdout, "%s: no such file; meshd runs on the defaults, which are valid\n", *fl.config)
	} else {
		fmt.Fprintf(stdout, "%s: valid\n", *fl.config)
	}
	fmt.Fprintln(stdout, cfg.OffloadsLine()) // agent/config/offloads.go
	return 0
}

// fail prints a failure as every meshd failure is printed: code and cause,
// remedy, detail; for an invalid config, every problem on a line of its
// own ("FILE:LINE: field = value: what is allowed").
func fail(stderr io.Writer, err error) int {
	c := codes.OrInternal(err)
	fmt.Fprintf(stderr, "%s: %s\nremedy: %s\n", c, c.Cause(), c.Remedy())
	ce, ok := errors.AsType[*config.Errors](err)
	if !ok {
		fmt.Fprintf(stderr, "detail: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "%s: %s\n", ce.Path, ce.Count())
	for _, p := range ce.Problems {
		fmt.Fprintf(stderr, "  %v\n", p)
	}
	return 1
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Command meshctl drives a local meshd through its unix socket: create a
// cluster, admit and join nodes, and show what the cluster looks like.
//
// Exit codes: 0 confirmed success, 1 coded failure, 2 usage, 3 daemon unreachable.
package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/codes"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitUnreachable = 3
)

// usageError marks a command-line mistake (exit 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one meshctl invocation and returns its exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := &app{stdin: stdin, stdout: stdout, out: printer{stdout}, errOut: printer{stderr}}
	root := app.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	help := root.CommandPath()
	if cmd != nil {
		help = cmd.CommandPath() // a usage error points at the subcommand's help
	}
	return reportFor(stderr, err, help)
}

// report prints err the way every meshctl failure is printed: the code and
// cause first, then the remedy, then any detail; it returns the exit code.
// The code, cause, remedy and detail may all come from meshd (or a node
// behind it) and are cleaned like every other printed value.
func report(stderr io.Writer, err error) int { return reportFor(stderr, err, "meshctl") }

// reportFor is report for a failure of the command at path (e.g. "meshctl
// remove"), whose help a usage error points at.
func reportFor(stderr io.Writer, err error, path string) int {
	p := printer{stderr}
	var u usageError
	if errors.As(err, &u) {
		p.Printf("usage: %v\nrun '%s --help' for usage\n", u.err, path)
		return exitUsage
	}
	c := codes.OrInternal(err)
	cause, remedy := c.Cause(), c.Remedy()
	var apiErr *apitype.Error
	if errors.As(err, &apiErr) && apiErr.Cause != "" {
		// meshd's words: a newer meshd may send a code this meshctl does not know.
		cause, remedy = apiErr.Cause, apiErr.Remedy
	}
	p.Printf("%s: %s\n", c, cause)
	p.Printf("remedy: %s\n", remedy)
	switch d := detail(err, c); {
	case apiErr != nil && len(apiErr.Details) > 0: // one problem a line (a refused config)
		p.Println("detail:")
		for _, l := range apiErr.Details {
			p.Printf("  %s\n", l)
		}
	case d != "":
		p.Printf("detail: %s\n", d)
	}
	if c == codes.DaemonUnreachable {
		p.Println("hint: systemctl status meshd")
		return exitUnreachable
	}
	return exitFailure
}

func detail(err error, c codes.Code) string {
	var e *apitype.Error
	if errors.As(err, &e) {
		return e.Detail
	}
	if s := err.Error(); s != c.Cause() {
		return s
	}
	return ""
}

type app struct {
	stdin io.Reader
	// stdout takes -o json documents only (printJSON); human output goes
	// through out and errOut, which clean every value they print.
	stdout      io.Writer
	out, errOut printer
	socket      string
	output      string
}

func (a *app) client() *localclient.Client {
	return &localclient.Client{Socket: a.socket, Version: version}
}

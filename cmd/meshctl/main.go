// Command meshctl drives a local meshd through its unix socket: create a
// cluster, admit and join nodes, and show what the cluster looks like.
//
// Exit codes: 0 confirmed success, 1 coded failure, 2 usage, 3 daemon unreachable.
package main

import (
	"context"
	"errors"
	"fmt"
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
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one meshctl invocation and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &app{stdout: stdout, stderr: stderr}
	root := app.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	return report(stderr, err)
}

// report prints err the way every meshctl failure is printed: the code and
// cause first, then the remedy, then any detail; it returns the exit code.
func report(stderr io.Writer, err error) int {
	var u usageError
	if errors.As(err, &u) {
		fmt.Fprintf(stderr, "usage: %v\nrun 'meshctl --help' for usage\n", u.err)
		return exitUsage
	}
	c := codes.OrInternal(err)
	cause, remedy := c.Cause(), c.Remedy()
	var apiErr *apitype.Error
	if errors.As(err, &apiErr) && apiErr.Cause != "" {
		// meshd's words: a newer meshd may send a code this meshctl does not know.
		cause, remedy = apiErr.Cause, apiErr.Remedy
	}
	fmt.Fprintf(stderr, "%s: %s\n", c, cause)
	fmt.Fprintf(stderr, "remedy: %s\n", remedy)
	if d := detail(err, c); d != "" {
		fmt.Fprintf(stderr, "detail: %s\n", d)
	}
	if c == codes.DaemonUnreachable {
		fmt.Fprintln(stderr, "hint: systemctl status meshd")
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
	stdout, stderr io.Writer
	socket         string
	output         string
}

func (a *app) client() *localclient.Client {
	return &localclient.Client{Socket: a.socket, Version: version}
}

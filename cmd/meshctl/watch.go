package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// watchFlags are `meshctl nodes -w/--watch [--interval D]`.
type watchFlags struct {
	watch    bool
	interval time.Duration
}

func (w *watchFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&w.watch, "watch", "w", false, "redraw whenever the list changes, until interrupted (Ctrl-C)")
	cmd.Flags().DurationVar(&w.interval, "interval", 2*time.Second, "with --watch: how often to ask meshd (at least 100ms)")
}

// minWatchInterval keeps a forgotten watch from busying meshd.
const minWatchInterval = 100 * time.Millisecond

// clearScreen moves a terminal's cursor home and clears it.
const clearScreen = "\x1b[H\x1b[2J"

// watchNodes asks meshd for the node list every interval and draws it
// again whenever it differs from the last one drawn, until ctx ends
// (Ctrl-C: exit 0). On a terminal each drawing replaces the last; written
// to a pipe or file, drawings follow one another, each after a line with
// its time (with -o json: one compact JSON array per line). A first
// failure is the command's failure; a later one (meshd restarting) is
// reported on stderr once per change and the watch goes on.
func (a *app) watchNodes(ctx context.Context, interval time.Duration, asJSON, wide, all bool) error {
	if interval < minWatchInterval {
		return usageError{errors.New("--interval: want at least 100ms")}
	}
	tty := isTerminal(a.stdout)
	var last, lastErr string
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		nodes, err := a.client().NodeList(ctx, all)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && first:
			return err
		case err != nil:
			if msg := codes.OrInternal(err).String() + ": " + err.Error(); msg != lastErr {
				a.errOut.Printf("%s (watching on)\n", msg)
				lastErr = msg
			}
		default:
			lastErr = ""
			var b bytes.Buffer
			if err := renderNodes(&b, nodes, asJSON, wide); err != nil {
				return err
			}
			if now := b.String(); now != last {
				last = now
				switch {
				case asJSON:
				case tty:
					a.out.Printf("%s", clearScreen)
					a.out.Printf("every %s, %s; Ctrl-C to stop\n", interval, time.Now().Format(time.TimeOnly))
				default:
					a.out.Printf("-- %s\n", time.Now().Format(time.RFC3339))
				}
				if _, err := a.stdout.Write(b.Bytes()); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// renderNodes is one drawing: the table, or a compact JSON array and a
// newline, escaped as printJSON escapes.
func renderNodes(b *bytes.Buffer, nodes []apitype.Node, asJSON, wide bool) error {
	if !asJSON {
		return printNodes(b, nodes, time.Now(), wide)
	}
	if nodes == nil {
		nodes = []apitype.Node{}
	}
	j, err := json.Marshal(nodes)
	if err != nil {
		return err
	}
	b.Write(escapeJSON(append(j, '\n')))
	return nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// Dynamic shell completion. Node names and token ids come from the daemon
// over the socket (meshctl's own --socket, or $MESHD_SOCKET), asked with a
// short deadline; when meshd is down, or refuses, the completion offers
// nothing and prints nothing: a shell must never show an error in the
// middle of a command line. Codes, roles and output formats are static.

// completeTimeout bounds one question to the daemon during a completion.
const completeTimeout = 2 * time.Second

// noComp is the directive of every dynamic completion: no file names.
const noComp = cobra.ShellCompDirectiveNoFileComp

// completionCtx is cmd's context (nil while cobra completes) with the deadline.
func completionCtx(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, completeTimeout)
}

// candidate is one completion: the value (from a closed alphabet, so a
// hostile daemon cannot inject shell text) and a cleaned description.
func candidate(value, desc string) cobra.Completion {
	desc = strings.Join(strings.Fields(safe(desc)), " ")
	if desc == "" {
		return value
	}
	return cobra.CompletionWithDesc(value, desc)
}

// completable reports whether s is a node name or token id fit to offer:
// lower-case letters, digits and '-' only (both are validated by meshd).
func completable(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

// firstArgOnly wraps a completion of a command's first positional argument:
// later positions complete nothing.
func firstArgOnly(f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, argv []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(argv) > 0 {
			return nil, noComp
		}
		return f(cmd, argv, toComplete)
	}
}

// completeNodes offers the names of the cluster's nodes that keep decides,
// other than the node asked, as `meshctl nodes` lists them.
func (a *app) completeNodes(keep func(apitype.Node) bool) cobra.CompletionFunc {
	return firstArgOnly(func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := completionCtx(cmd)
		defer cancel()
		nodes, err := a.client().Nodes(ctx)
		if err != nil {
			return nil, noComp
		}
		var out []cobra.Completion
		for _, n := range nodes {
			if n.Self || !completable(n.Name) || !strings.HasPrefix(n.Name, toComplete) || (keep != nil && !keep(n)) {
				continue
			}
			out = append(out, candidate(n.Name, n.Role+", "+n.State))
		}
		return out, noComp
	})
}

// notRemoved keeps the nodes a removal can still concern.
func notRemoved(n apitype.Node) bool { return n.State != "removed" }

// former keeps the nodes `meshctl forget` takes: left, removed or failed.
func former(n apitype.Node) bool {
	return n.State == "left" || n.State == "removed" || n.State == "failed"
}

// completeTokens offers the token ids (or, with byName, the admitted
// names) of the tokens keep decides.
func (a *app) completeTokens(keep func(apitype.Token) bool, byName bool) cobra.CompletionFunc {
	return firstArgOnly(func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := completionCtx(cmd)
		defer cancel()
		toks, err := a.client().Tokens(ctx)
		if err != nil {
			return nil, noComp
		}
		var out []cobra.Completion
		seen := map[string]bool{}
		for _, t := range toks {
			v, desc := t.ID, fmt.Sprintf("%s, %s, expires %s", t.Name, t.Role, t.Expires.Local().Format(time.RFC3339))
			if byName {
				v, desc = t.Name, "token "+t.ID
			}
			if !keep(t) || !completable(v) || seen[v] || !strings.HasPrefix(v, strings.ToLower(toComplete)) {
				continue
			}
			seen[v] = true
			out = append(out, candidate(v, desc))
		}
		return out, noComp
	})
}

// unusedToken keeps the tokens a revoke can still concern.
func unusedToken(t apitype.Token) bool { return t.State == "unused" }

// waitingApproval keeps the tokens whose join waits for `meshctl approve`.
func waitingApproval(t apitype.Token) bool {
	return t.Approval != nil && t.Approval.State == apitype.ApprovalStateWaiting
}

// completeCodes offers the codes whose text starts with what is typed
// (the whole code, or its number or mnemonic as explain takes them), each
// with its cause. It works offline.
func completeCodes(_ *cobra.Command, argv []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(argv) > 0 {
		return nil, noComp
	}
	s := strings.ToUpper(toComplete)
	var out []cobra.Completion
	for _, c := range codes.All() {
		if strings.HasPrefix(string(c), s) || strings.HasPrefix(string(c[7:]), s) {
			out = append(out, candidate(string(c), c.Cause()))
		}
	}
	return out, noComp
}

// fixedValues completes a flag from a fixed list.
func fixedValues(values ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(values, noComp)
}

// unknownCommand is the usage error of a command group given a word that
// is none of its subcommands, with cobra's "did you mean" suggestions.
func unknownCommand(cmd *cobra.Command, word string) error {
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	msg := fmt.Sprintf("unknown command %q for %q", word, cmd.CommandPath())
	if s := cmd.SuggestionsFor(word); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{fmt.Errorf("%s", msg)}
}

// subcommandsOnly is the Args check of a command group (ca, keys, tokens):
// no positional arguments, and a word that is not a subcommand gets the
// suggestions.
func subcommandsOnly(cmd *cobra.Command, argv []string) error {
	if len(argv) > 0 {
		return unknownCommand(cmd, argv[0])
	}
	return nil
}

// wireCompletion sets, over the whole command tree, the dynamic completion
// of each command's arguments, the fixed values of --output and --role, and
// the "did you mean" check of every command group. It runs once the tree is
// built, so a command added later with -o gets its completion too.
func (a *app) wireCompletion(root *cobra.Command) {
	activeControl := func(n apitype.Node) bool { return n.Role == "control" && n.State == "active" }
	argsOf := map[string]cobra.CompletionFunc{
		"meshctl remove":        a.completeNodes(notRemoved),
		"meshctl forget":        a.completeNodes(former),
		"meshctl ping":          a.completeNodes(notRemoved),
		"meshctl ca handoff":    a.completeNodes(activeControl),
		"meshctl approve":       a.completeTokens(waitingApproval, true),
		"meshctl tokens revoke": a.completeTokens(unusedToken, false),
		"meshctl explain":       completeCodes,
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if f, ok := argsOf[c.CommandPath()]; ok {
			c.ValidArgsFunction = f
		}
		if c.HasSubCommands() {
			c.Args = subcommandsOnly
		}
		for flag, values := range map[string][]string{"output": outputFormats(c), "role": {"worker", "control"}} {
			if c.Flags().Lookup(flag) != nil {
				_ = c.RegisterFlagCompletionFunc(flag, fixedValues(values...))
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// outputFormats are the -o values a command takes: `nodes` also wide.
func outputFormats(c *cobra.Command) []string {
	if c.Name() == "nodes" {
		return []string{"table", "wide", "json"}
	}
	return []string{"table", "json"}
}

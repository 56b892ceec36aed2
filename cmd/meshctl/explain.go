package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/codes"
)

// installedErrorsDoc is where the packages install docs/errors.md.
const installedErrorsDoc = "/usr/share/doc/meshd/errors.md"

// explainEntry is one code as `explain -o json` and `explain --list -o json` print it.
type explainEntry struct {
	Code   codes.Code `json:"code"`
	Status int        `json:"status"`
	Cause  string     `json:"cause"`
	Remedy string     `json:"remedy"`
}

func entry(c codes.Code) explainEntry {
	i, _ := c.Info()
	return explainEntry{Code: c, Status: i.Status, Cause: i.Cause, Remedy: i.Remedy}
}

func (a *app) explainCommand() *cobra.Command {
	var list bool
	cmd := &cobra.Command{
		Use:   "explain (CODE | --list)",
		Short: "Explain an error or event code, or list them all (works offline)",
		Long: "explain prints a code's status, cause and remedy. CODE may be the whole code (X401004TKNCNS), " +
			"the code without its mnemonic (X401004 or 401004) or the mnemonic alone (TKNCNS), in any case; " +
			"text that names several codes is refused with " + string(codes.AmbiguousCode) + " and the matches, " +
			"text that names none with " + string(codes.UnknownCode) + ". --list prints every code. " +
			"The same table is installed as " + installedErrorsDoc + ".",
		Example: "  meshctl explain TKNCNS\n  meshctl explain x401004\n  meshctl explain --list -o json",
		Args: args(func(cmd *cobra.Command, argv []string) error {
			if list {
				return cobra.NoArgs(cmd, argv)
			}
			if len(argv) == 0 {
				return fmt.Errorf("explain needs a CODE (or --list for all of them)")
			}
			return cobra.ExactArgs(1)(cmd, argv)
		}),
		RunE: func(_ *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if list {
				return a.printCodeList(asJSON)
			}
			found := codes.Find(argv[0])
			switch {
			case len(found) == 0:
				return codes.Errorf(codes.UnknownCode, "%q is not a meshd code", argv[0])
			case len(found) > 1:
				return codes.Errorf(codes.AmbiguousCode, "%q matches %s", argv[0], matches(found))
			}
			e := entry(found[0])
			if asJSON {
				return a.printJSON(e)
			}
			a.out.Printf("%s (status %d)\ncause:  %s\nremedy: %s\n", e.Code, e.Status, e.Cause, e.Remedy)
			return nil
		},
	}
	cmd.Flags().BoolVar(&list, "list", false, "print every code with its status and cause")
	a.addOutput(cmd)
	return cmd
}

// matches names the codes an ambiguous text matched: the first ten and how many more.
func matches(cs []codes.Code) string {
	const shown = 10
	var names []string
	for i, c := range cs {
		if i == shown {
			names = append(names, fmt.Sprintf("and %d more", len(cs)-shown))
			break
		}
		names = append(names, string(c))
	}
	return strings.Join(names, ", ")
}

func (a *app) printCodeList(asJSON bool) error {
	all := codes.All()
	if asJSON {
		out := make([]explainEntry, 0, len(all))
		for _, c := range all {
			out = append(out, entry(c))
		}
		return a.printJSON(out)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	p := printer{tw}
	p.Printf("CODE\tSTATUS\tCAUSE\n")
	for _, c := range all {
		e := entry(c)
		p.Printf("%s\t%d\t%s\n", e.Code, e.Status, e.Cause)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	a.out.Printf("%d codes; `meshctl explain CODE` gives the remedy (also in %s)\n", len(all), installedErrorsDoc)
	return nil
}

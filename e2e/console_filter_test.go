//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// tableNodes is the names in the Mesh page's node table, in order.
func tableNodes(ctx context.Context) ([]string, error) {
	out, err := evalErr[[]string](ctx, `[...document.querySelectorAll("#nodes tbody tr td:first-child a")].map(a => a.getAttribute("href").replace("/node/", ""))`)
	if out == nil && err == nil {
		out = []string{}
	}
	return out, err
}

// checkNodeFilter types into the filter of the Mesh page open in ctx
// (issue 28 item 6) and waits for the node table to keep only the rows
// that match: by name, by role in another case, by overlay IP; after each,
// deleting what was typed brings every row back. The picture keeps every
// node meanwhile, the page's address carries the filter, and the page is
// never reloaded (console.js passes the text on to the live refresh).
// all are the table's rows before, ips the nodes' overlay IPs.
func checkNodeFilter(t *testing.T, ctx context.Context, all []string, ips map[string]string) {
	t.Helper()
	if got, err := tableNodes(ctx); err != nil || !slices.Equal(got, all) {
		t.Fatalf("the node table before filtering: %q (%v), want %q", got, err, all)
	}
	eval[string](t, ctx, `window.e2eFilterNoReload = "still this page"`)
	waitRows := func(what string, want []string) {
		t.Helper()
		Eventually(t, 10*time.Second, "the node table "+what+": "+strings.Join(want, ", "), func() error {
			got, err := tableNodes(ctx)
			if err == nil && !slices.Equal(got, want) {
				err = fmt.Errorf("rows %q", got)
			}
			return err
		})
	}
	for _, tc := range []struct{ typed, want string }{
		{"w1", "w1"},
		{"CONTROL", "origin"},
		{ips["w2"], "w2"},
	} {
		do(t, ctx, "type "+tc.typed+" into the node filter", chromedp.SendKeys(chromedp.CSS("#node-filter"), tc.typed))
		waitRows("filtered for "+tc.typed, []string{tc.want})
		if n := eval[int](t, ctx, `document.querySelectorAll("#live a.node").length`); n != len(all) {
			t.Errorf("filtered for %s the picture shows %d nodes, want all %d", tc.typed, n, len(all))
		}
		if q := eval[string](t, ctx, `new URL(location.href).searchParams.get("q") || ""`); q != tc.typed {
			t.Errorf("filtered for %s the page's address has q=%q", tc.typed, q)
		}
		do(t, ctx, "delete the filter", chromedp.SendKeys(chromedp.CSS("#node-filter"), strings.Repeat(kb.Backspace, len(tc.typed))))
		waitRows("with the filter deleted", all)
	}
	if eval[string](t, ctx, `window.e2eFilterNoReload || "reloaded"`) != "still this page" {
		t.Error("the Mesh page was reloaded to filter; console.js should have filtered it in place")
	}
}

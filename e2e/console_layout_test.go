//go:build e2e

package e2e

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
)

// auditWidth is the window width the Audit page must fit (issue 28 item
// 6: at 1400 px it overflowed, the code column cut and each time wrapped
// over four lines).
const auditWidth = 1280

// fitScan runs in the page: the widths of the document and of the main
// table's container, the cells whose content is wider than the cell, and
// the time and code cells whose text takes more than one line (a text
// node gives one client rect per line it is laid out on).
const fitScan = `(() => {
	const de = document.documentElement, table = document.querySelector("main table"), box = table.parentElement;
	const key = c => c.textContent.replace(/\s+/g, " ").trim().slice(0, 60);
	const texts = c => { const w = document.createTreeWalker(c, NodeFilter.SHOW_TEXT), out = [];
		for (let n = w.nextNode(); n; n = w.nextNode()) if (n.textContent.trim()) out.push(n); return out; };
	const lines = n => { const r = document.createRange(); r.selectNodeContents(n); return r.getClientRects().length; };
	const rows = [...table.querySelectorAll("tbody tr")].filter(r => r.cells.length > 1);
	return {
		docScroll: de.scrollWidth, docClient: de.clientWidth,
		box: box.tagName.toLowerCase() + (box.className ? "." + box.className : ""), boxScroll: box.scrollWidth, boxClient: box.clientWidth,
		rows: rows.length,
		cut: [...table.querySelectorAll("td")].filter(c => c.scrollWidth > c.clientWidth).map(key),
		wrapped: rows.flatMap(r => [r.cells[0], r.cells[r.cells.length - 1]]).filter(c => texts(c).some(n => lines(n) > 1)).map(key),
	};
})()`

// checkAuditFits opens the Audit page in ctx at auditWidth px and fails
// the test when anything on it is wider than the window: the document or
// the table's container scrolls sideways, a cell's content is wider than
// the cell, or a time or a code takes more than one line. The window is
// reset when it returns.
func checkAuditFits(t *testing.T, ctx context.Context, base, dir string) {
	t.Helper()
	do(t, ctx, "audit page at 1280 px", chromedp.EmulateViewport(auditWidth, 900),
		chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(chromedp.CSS("main table tbody")))
	defer do(t, ctx, "window size back", chromedp.EmulateReset())
	shot(t, ctx, dir, "audit-1280")
	fit := eval[struct {
		DocScroll int      `json:"docScroll"`
		DocClient int      `json:"docClient"`
		Box       string   `json:"box"`
		BoxScroll int      `json:"boxScroll"`
		BoxClient int      `json:"boxClient"`
		Rows      int      `json:"rows"`
		Cut       []string `json:"cut"`
		Wrapped   []string `json:"wrapped"`
	}](t, ctx, fitScan)
	t.Logf("audit page at %d px: document %d/%d, %s %d/%d, %d rows", auditWidth, fit.DocScroll, fit.DocClient, fit.Box, fit.BoxScroll, fit.BoxClient, fit.Rows)
	if fit.Rows < 10 {
		t.Errorf("the audit page shows %d events; want the cluster's trail (init, admits, joins, revokes: 10 at least)", fit.Rows)
	}
	if fit.DocScroll > fit.DocClient {
		t.Errorf("the audit page at %d px scrolls sideways: document %d px wide in %d", auditWidth, fit.DocScroll, fit.DocClient)
	}
	if fit.BoxScroll > fit.BoxClient {
		t.Errorf("the audit table's container (%s) at %d px scrolls sideways: %d px wide in %d", fit.Box, auditWidth, fit.BoxScroll, fit.BoxClient)
	}
	if len(fit.Cut) > 0 {
		t.Errorf("audit cells wider than their column at %d px: %q", auditWidth, fit.Cut)
	}
	if len(fit.Wrapped) > 0 {
		t.Errorf("audit times or codes over more than one line at %d px: %q", auditWidth, fit.Wrapped)
	}
}

package console

import (
	"net/url"
	"strings"
)

// The Mesh page's node filter (issue 28 item 6): GET /?q=TEXT keeps the
// table's rows whose name, role, state (raft's or gossip's), overlay IP or
// one of whose node groups contains TEXT, in any case; the picture and the counts keep every
// node. The same q on /live/mesh filters the refreshed table, so the form
// works without the script (a GET), and console.js only passes what is
// typed on to the live URL: the matching is done here alone.

// filterQuery is the filter of request query v, trimmed.
func filterQuery(v url.Values) string { return strings.TrimSpace(v.Get("q")) }

// filterNodes is the rows that match q; all of them when q is empty.
func filterNodes(rows []nodeRow, q string) []nodeRow {
	if q == "" {
		return rows
	}
	lq := strings.ToLower(q)
	out := []nodeRow{}
	for _, n := range rows {
		if nodeMatches(n, lq) {
			out = append(out, n)
		}
	}
	return out
}

// nodeMatches reports whether lq (lower case) is part of n's name, role,
// state or gossip state (both are columns of the table: "failed" finds a
// node failed in either), overlay IP (IPv4 or IPv6) or one of its node
// groups.
func nodeMatches(n nodeRow, lq string) bool {
	for _, s := range append([]string{n.Name, n.Role, n.State, n.Gossip, n.OverlayIP, n.OverlayIP6}, n.Groups...) {
		if strings.Contains(strings.ToLower(s), lq) {
			return true
		}
	}
	return false
}

// liveURL is the Mesh page's live fragment for filter q.
func liveURL(q string) string {
	if q == "" {
		return "/live/mesh"
	}
	return "/live/mesh?" + url.Values{"q": {q}}.Encode()
}

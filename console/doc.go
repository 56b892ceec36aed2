// Package console is the operator's web console that `meshctl ui` serves: a
// local HTTP server, bound to loopback only, that renders the cluster as
// meshd's local API reports it (nodes, tokens, approvals, the audit trail)
// and turns its forms into the same local API calls meshctl makes. It holds
// no rights of its own: it talks to meshd through agent/localclient over the
// unix socket, as the user who started it.
//
// Every request passes one guard (guard.go): the Host header must name the
// bound address, the browser must hold the session cookie (set once, in
// exchange for the one-time secret of the printed URL), and a POST must carry
// the session's CSRF token and come from the console's own origin.
//
// Import rule (deps_test.go): may import agent/apitype, agent/localclient
// and codes; nothing else of meshd. Every asset is embedded (assets/),
// nothing is fetched at run time.
package console

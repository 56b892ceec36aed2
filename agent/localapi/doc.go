// Package localapi is the local API's machinery on the unix socket
// (STYLE §6): the socket itself (0660, the socket group, a stale socket
// replaced only when nothing answers), the caller's credentials as the
// kernel recorded them at connect (SO_PEERCRED, SO_PEERGROUPS: Actor),
// who may write (MayWrite), and the route table's serving: Route rows
// behind one guard (no browser: Origin, Referer or a foreign Host are
// refused; meshd's version on every answer), writes checked, bodies
// decoded, failures logged with their code and answered with it (Do,
// With). The doors themselves, and what each does, are the agent's
// table (agent/routes.go).
//
// Import rule (deps_test.go): may import agent/apitype and codes; nothing
// else of meshd. Only agent imports it.
package localapi

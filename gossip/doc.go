// Package gossip runs meshd's cluster membership: serf over memberlist,
// always encrypted with the cluster gossip key, with member changes delivered
// as typed events.
//
// # What it provides
//
// New validates a Config, binds exactly the address and port it names and
// starts serf. The returned *Gossip then offers:
//
//   - Events: a buffered channel of typed member events (join, leave, failed,
//     update, reap). The channel never blocks serf: when the consumer falls
//     behind, the oldest event is dropped and counted (Dropped). Events are
//     hints; a consumer that must be exact rescans Members periodically.
//   - Join and Leave, both bounded by a context, and Members, LocalMember and
//     SetTags.
//   - SetKeys and Keys: this node's own keyring, changed in place and
//     locally only (install, switch the primary, remove). meshd hands keys
//     out over mTLS; serf's KeyManager is not used, because its gossip
//     queries reach every holder of the current key, a removed node too.
//   - Ask and Queries (query.go): a serf query to every member, this node
//     included, with the answers collected by member name within a bound
//     (or until a done function is satisfied); Queries delivers the questions
//     others ask, each answered with Respond before its deadline, or dropped
//     (counted as no answer) when 64 are already waiting. Answers are
//     reports, not proof: any holder of the gossip key can answer as any name.
//   - KeyErrors: how many received messages no installed key could decrypt,
//     so the agent can show codes.GossipKey in its status.
//   - Shutdown: stop without leaving. A restart is not a departure; peers see
//     the node fail and, when it comes back (with its snapshot it rejoins on
//     its own), join again.
//
// # Choices that matter
//
//   - Gossip is never plaintext: Config.Keys needs at least one 16, 24 or
//     32-byte AES key, the first being the primary (the one that encrypts).
//     Incoming and outgoing verification are always on.
//   - The memberlist timers are DefaultLANConfig in production, but for a
//     gossip tick of 500 ms to 8 members (lanGossipInterval,
//     lanGossipNodes; memberlist's is 200 ms to 3: it woke an idle node
//     five times a second to find nothing to send).
//     Config.Fast selects test timers (probe 200ms/100ms, suspicion
//     multiplier 2, gossip 100ms, push/pull 5s) that detect a failure in
//     about a second.
//     DefaultLocalConfig is never used: its retransmit multiplier of 2 lost
//     broadcasts in small clusters.
//   - A dead node's name can be reclaimed after DeadNodeReclaimTime (30s, or
//     100ms with Fast), so a node restarted under the same name at the same
//     or a different address is accepted. Serf's name-conflict resolution is
//     off: with it, the minority side of a conflict shuts itself down.
//   - serf and memberlist log through Config.Log (component=gossip). Keys are
//     never logged.
//   - There is no global state, and every goroutine this package starts has
//     exited when Shutdown returns. The package installs no signal handlers
//     (serf's LeaveOnTerm belongs to serf's own agent; leaving is always an
//     explicit Leave call).
//
// Error codes: key problems carry codes.GossipKey, a join that reached no
// peer carries codes.GossipJoin; check them with codes.Of.
//
// Import rule (deps_test.go): may import codes; nothing else of meshd.
// Besides codes it uses serf and memberlist (and what they import). Only
// agent imports gossip.
package gossip

// Package member is a member node's runtime: what runs once a node has
// joined (or made) a cluster, started from its state dir by Start and
// stopped in reverse order by Stop. Nebula first (its config rendered
// from the facts), then gossip, then on a control node raft, the control
// plane and the control listener (enroll and internal API), then the
// loops that keep it all in line with the cluster:
//
//   - the overlay loop reconciles Nebula at once on every gossip event,
//     from the facts the node holds now: a membership change as the
//     change itself (Mesh.Apply, overlaydelta.go), anything else as a
//     whole config (Mesh.Reload);
//   - the follow loop brings the facts in, a named step at a time, each
//     within its budget: where they come from is clusterFacts, a control
//     node's raft or a worker's copies (agent/fetched), chosen once;
//   - gossip keyring and CA bundle following, certificate renewal,
//     rejoining lost peers, the answers to revocation and keyring
//     queries, and a worker's tunnel reports;
//   - moving relayed tunnels onto direct paths (agent/pathup), with the
//     NAT this node learns from its own path check and tells the others
//     in gossip, so a pair that can have no direct path is left relayed
//     (natpath.go).
//
// The agent owns the lifecycle around it (init, join, leave, the local
// API) and asks the runtime for its status, a ping, a confirmation or a
// departure.
//
// Import rule (deps_test.go): may import agent/apitype, agent/config,
// agent/control, agent/desired, agent/fetched, agent/fitness,
// agent/metrics, agent/pathup, agent/raftnode, agent/state,
// agent/statedir, codes, crash, enroll, gossip, hostroute, idtoken, mesh, names,
// names/resolved, netcheck and pki; nothing else of meshd. Only agent imports it.
package member

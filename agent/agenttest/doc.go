// Package agenttest runs meshd agents for tests: in-process agents, each on
// its own 127.x loopback address, state dir and socket, driven through
// localclient exactly as meshctl drives meshd, plus helpers to build and run
// the real binaries as subprocesses.
//
// Import rule (deps_test.go): may import agent, agent/apitype, agent/config,
// agent/localclient, agent/state, codes, enroll, loopbacktest and pki;
// nothing else of meshd.
package agenttest

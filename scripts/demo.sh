#!/usr/bin/env bash
# The loopback demo (make demo without root): three meshd processes on
# their own loopback addresses: the origin creates the cluster, admits two
# workers, both join over CA-pinned TLS, and the origin lists the cluster.
# Everything lives in a temp dir that is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build}
work=$(mktemp -d /tmp/meshd-demo.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

start_node() { # name ip
	local name=$1 ip=$2 dir=$work/$1
	mkdir -p "$dir" && chmod 700 "$dir"
	cat >"$dir/meshd.yaml" <<YAML
state_dir: $dir/state
socket: $dir/meshd.sock
bind_addr: $ip
advertise_addr: $ip
node_name: $name
raft: {heartbeat_timeout: 300ms, election_timeout: 300ms, leader_lease: 150ms}
# no root here: the overlay runs in userspace inside each meshd
overlay_mode: userspace
timers: fast
YAML
	"$BIN/meshd" --config "$dir/meshd.yaml" 2>"$dir/meshd.log" &
	pids+=($!)
	for _ in $(seq 100); do
		"$BIN/meshctl" --socket "$dir/meshd.sock" status >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "demo: meshd $name did not start; its log:" >&2; cat "$dir/meshd.log" >&2; exit 1
}
ctl() { local n=$1; shift; "$BIN/meshctl" --socket "$work/$n/meshd.sock" "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

start_node origin 127.88.0.1
start_node w1 127.88.0.2
start_node w2 127.88.0.3

say "origin: meshctl init --cluster demo"
ctl origin init --cluster demo
for w in w1 w2; do
	say "origin: meshctl admit $w"
	token=$(ctl origin admit "$w" | tail -n1)
	echo "token minted (${#token} characters, shown only to the operator)"
	say "$w: meshctl join <token>"
	ctl "$w" join "$token"
done
say "origin: meshctl nodes"
ctl origin nodes
say "w1: meshctl nodes (asked of a control node over mTLS)"
ctl w1 nodes
say "origin: meshctl tokens"
ctl origin tokens
say "w2: meshctl status"
ctl w2 status
say "a replayed token is refused with its code"
ctl w2 join "$token" --force || echo "(exit $?)"
echo
echo "demo: done; tearing down"

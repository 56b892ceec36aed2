#!/usr/bin/env bash
# Writes the golden files of a release's on-disk formats with that
# release's own code (docs/testing.md, "Upgrades from the previous
# release"): git archive COMMIT into a temporary tree, drop the generator
# tests of scripts/prevgolden/ into it, run them, and copy what they wrote
# to agent/testdata/state-SHORT, agent/state/testdata/raftlog-SHORT.hex and
# agent/raftnode/testdata/raft-SHORT. Run it once per release, for the
# commit e2e/testdata/previous-release names, then add tests like
# agent/prevrelease_test.go for the new set; never rewrite an existing set.
# The generators use that release's internals (nodeFacts, fullHistory,
# raftnode.Node's fields): adapt them if those changed.
set -euo pipefail
commit=${1:?usage: scripts/prevgolden.sh COMMIT}
root=$(git rev-parse --show-toplevel)
# The Go toolchain this tree's go.mod names (DESIGN §12; Makefile), also
# for the older tree: the toolchain line is newer than any release before it.
export GOTOOLCHAIN=$(sed -n 's/^toolchain //p' "$root/go.mod")
short=$(git -C "$root" rev-parse --short=7 "$commit")
for d in "$root/agent/testdata/state-$short" "$root/agent/state/testdata/raftlog-$short.hex" "$root/agent/raftnode/testdata/raft-$short"; do
	if [ -e "$d" ]; then echo "prevgolden: $d exists; golden sets are never rewritten" >&2; exit 1; fi
done
tree=$(mktemp -d)
out=$(mktemp -d)
trap 'rm -rf "$tree" "$out"' EXIT
git -C "$root" archive "$commit" | tar -x -C "$tree"
gen=$root/scripts/prevgolden
cp "$gen/agent_gen_test.go.in" "$tree/agent/zz_gen_test.go"
cp "$gen/agent_nodes_gen_test.go.in" "$tree/agent/zz_gen2_test.go"
cp "$gen/state_gen_test.go.in" "$tree/agent/state/zz_gen_test.go"
cp "$gen/raftnode_gen_test.go.in" "$tree/agent/raftnode/zz_gen_test.go"
(cd "$tree" && GEN_OUT=$out go test -count=1 -run '^(TestGenPrevState|TestGenPrevNodes)$' ./agent/ &&
	GEN_OUT=$out go test -count=1 -run '^TestGenPrevLog$' ./agent/state/ &&
	GEN_OUT=$out go test -count=1 -run '^TestGenPrevRaft$' ./agent/raftnode/)
cp -r "$out/state" "$root/agent/testdata/state-$short"
cp "$out/raft-log.hex" "$root/agent/state/testdata/raftlog-$short.hex"
cp -r "$out/raft" "$root/agent/raftnode/testdata/raft-$short"
echo "prevgolden: wrote the $short set"

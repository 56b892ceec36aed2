#!/usr/bin/env bash
# The flake hunt (issue 25): runs the namespace e2e suite N times in a row,
# each with a busy core beside it (stress-ng, one CPU worker, nice 0), and
# prints each test's pass count and its slowest run (bench/flaky). Root.
#
#   make flaky N=3 [RUN=regexp]    or    scripts/flaky.sh 3 [regexp]
#
# Every run's `go test -json` stream is kept in build/flaky/run-K.json, and
# the report is build/flaky/report.txt. Exits non-zero when any test failed
# in any run. On a shared machine: flock /tmp/meshd-e2e.lock make flaky.
set -euo pipefail
cd "$(dirname "$0")/.."
# The Go toolchain go.mod's toolchain line names (DESIGN §12), fetched by
# the go on the PATH on first use whatever its go.env says (Makefile).
export GOTOOLCHAIN=$(sed -n 's/^toolchain //p' go.mod)
n=${1:-3}
run=${2:-.}
[ "$(id -u)" = 0 ] || { echo "flaky: needs root (the e2e suite makes namespaces and TUN devices)" >&2; exit 2; }
command -v stress-ng >/dev/null || { echo "flaky: stress-ng not found; run scripts/install-deps.sh" >&2; exit 2; }
out=build/flaky
rm -rf "$out" && mkdir -p "$out"
go test -tags e2e -c -o "$out/e2e.test" ./e2e
stress=
cleanup() { [ -n "$stress" ] && kill "$stress" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
for k in $(seq 1 "$n"); do
	stress-ng --cpu 1 --cpu-method matrixprod --quiet --timeout 0 &
	stress=$!
	echo "flaky: run $k of $n with a busy core (stress-ng pid $stress), $(date -u +%H:%M:%S) UTC"
	# The test binary runs in e2e/, as `go test` would run it.
	(cd e2e && ../"$out"/e2e.test -test.v=test2json -test.count=1 -test.timeout 45m -test.run "$run" 2>&1) |
		go tool test2json -t -p e2e >"$out/run-$k.json" || true
	kill "$stress" 2>/dev/null || true
	wait "$stress" 2>/dev/null || true
	stress=
done
go run ./bench/flaky "$out"/run-*.json | tee "$out/report.txt"

#!/usr/bin/env bash
# Mutation testing of the trust code (make mutate): gremlins, pinned, changes
# the code one operator at a time and runs the package's tests against each
# change. A mutant the tests do not notice ("lived") is a line whose breakage
# no test would catch. Prints efficacy and mutator coverage per package and
# fails when a package is under the thresholds.
#
#   MUTATE_PKGS   packages to mutate (default: the trust code)
#   MUTATE_WORKERS, EFFICACY, MCOVER   gremlins workers and the thresholds
#
# Equivalent mutants (no behaviour can tell them apart) are listed with
# their reasons in docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# The Go toolchain go.mod's toolchain line names (DESIGN §12), fetched by
# the go on the PATH on first use whatever its go.env says (Makefile).
export GOTOOLCHAIN=$(sed -n 's/^toolchain //p' go.mod)
root=$(pwd)

GREMLINS_VERSION=v0.6.0
pkgs=${MUTATE_PKGS:-"pki enroll agent/state"}
workers=${MUTATE_WORKERS:-2}
efficacy=${EFFICACY:-95}
mcover=${MCOVER:-90}
out=${MUTATE_OUT:-build/mutate}
mkdir -p "$out"

bin=$(go env GOPATH)/bin/gremlins-$GREMLINS_VERSION
if [ ! -x "$bin" ]; then
	tmp=$(mktemp -d)
	GOBIN=$tmp go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION"
	mkdir -p "$(dirname "$bin")" && mv "$tmp/gremlins" "$bin" && rmdir "$tmp"
fi
[ -x "$bin" ] || { echo "mutate: could not install gremlins $GREMLINS_VERSION" >&2; exit 1; }

fail=0
rows=()
for p in $pkgs; do
	log="$out/$(echo "$p" | tr / _).txt"
	echo "mutate: $p (log in $log)"
	status=0
	# gremlins wants the package's absolute path and its own working directory.
	# GOFLAGS=-count=1: gremlins times each mutant against its first (coverage)
	# run, which a cached test result would make look instant.
	(cd "$root/$p" && GOFLAGS=-count=1 "$bin" unleash --workers "$workers" --timeout-coefficient 10 -S lt \
		--threshold-efficacy "$efficacy" --threshold-mcover "$mcover" "$root/$p") >"$log" 2>&1 || status=$?
	grep -E '^ +(LIVED|TIMED OUT)' "$log" || true
	e=$(sed -n 's/^Test efficacy: \([0-9.]*\)%.*/\1/p' "$log")
	c=$(sed -n 's/^Mutator coverage: \([0-9.]*\)%.*/\1/p' "$log")
	k=$(sed -n 's/^Killed: \([0-9]*\), Lived: \([0-9]*\), Not covered: \([0-9]*\).*/\1 killed, \2 lived, \3 not covered/p' "$log")
	to=$(sed -n 's/^Timed out: \([0-9]*\),.*/\1/p' "$log")
	k="$k, ${to:-?} timed out"
	if [ -z "$e" ] || [ -z "$c" ]; then
		echo "mutate: $p: gremlins printed no result (exit $status); see $log" >&2
		fail=1
		rows+=("$(printf '%-14s %9s %9s   %s' "$p" "-" "-" "no result")")
		continue
	fi
	verdict=ok
	if awk -v e="$e" -v c="$c" -v te="$efficacy" -v tc="$mcover" 'BEGIN { exit !(e < te || c < tc) }'; then
		verdict=UNDER
		fail=1
	fi
	rows+=("$(printf '%-14s %8s%% %8s%%   %s  %s' "$p" "$e" "$c" "$verdict" "$k")")
done

echo
printf '%-14s %9s %9s   %s\n' package efficacy coverage "(thresholds: efficacy >= $efficacy%, coverage >= $mcover%)"
printf '%s\n' "${rows[@]}"
exit $fail

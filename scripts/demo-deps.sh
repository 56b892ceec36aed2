#!/usr/bin/env bash
# `make demo` runs this first: it checks the tools the demo needs and, when
# one is missing, runs scripts/install-deps.sh (what CI runs, .ci/run) and
# says so, then checks again. Usage: demo-deps.sh root|loopback
#   root      the namespace demo (e2e TestDemo): go, ip, ping
#   loopback  the demo without root (scripts/demo.sh): go
# A test (TestDemoDepsAgree, demodeps_test.go) keeps these lists, the e2e
# suite's own check (e2e/main_test.go) and install-deps.sh in agreement.
# For TestDemoDepsInstalls only: $MESHD_INSTALL_DEPS replaces the installer
# and $MESHD_DEMO_TOOLS the list.
set -euo pipefail
cd "$(dirname "$0")/.."

DEMO_TOOLS_ROOT="go ip ping"
DEMO_TOOLS_LOOPBACK="go"

case "${1:-}" in
root) tools=$DEMO_TOOLS_ROOT ;;
loopback) tools=$DEMO_TOOLS_LOOPBACK ;;
*)
	echo "usage: $0 root|loopback" >&2
	exit 2
	;;
esac
tools=${MESHD_DEMO_TOOLS:-$tools}
installer=${MESHD_INSTALL_DEPS:-scripts/install-deps.sh}

missing() {
	local m=() t
	for t in $tools; do command -v "$t" >/dev/null || m+=("$t"); done
	echo "${m[*]:-}"
}

need=$(missing)
[ -z "$need" ] && exit 0
echo "make demo: $need not found; running $installer (what CI runs) to install what the demo needs"
"$installer"
hash -r
need=$(missing)
if [ -n "$need" ]; then
	echo "make demo: $need still not found after $installer; install it and run make demo again" >&2
	exit 1
fi
echo "make demo: dependencies installed"

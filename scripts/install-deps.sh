#!/usr/bin/env bash
# Installs what `make test`, `make demo` and `make bench` need on a fresh
# machine: the Go modules pinned in go.mod/go.sum, and as root the Debian
# packages the namespace e2e suite and the package test use. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
# The Go toolchain go.mod's toolchain line names (DESIGN §12), fetched by
# the go on the PATH on first use whatever its go.env says (Makefile).
export GOTOOLCHAIN=$(sed -n 's/^toolchain //p' go.mod)
command -v go >/dev/null || { echo "install-deps: a go command is required (go not found): any Go release since 1.21 fetches $GOTOOLCHAIN itself" >&2; exit 1; }
go version # fetches the toolchain from the module proxy on first use
go mod download

if [ "$(id -u)" = 0 ]; then
	need=()
	command -v ip >/dev/null || need+=(iproute2)
	command -v ping >/dev/null || need+=(iputils-ping)
	command -v iperf3 >/dev/null || need+=(iperf3) # BenchmarkOverlayThroughput (make bench)
	command -v wg >/dev/null || need+=(wireguard-tools) # BenchmarkOverlayThroughput: wg configures its wireguard-go path
	command -v curl >/dev/null || need+=(curl)     # e2e TestMetricsScrape scrapes from inside a namespace
	command -v nft >/dev/null || need+=(nftables)  # e2e TestPairHealthOneWayCut: a one-way cut inside a namespace
	command -v dig >/dev/null || need+=(bind9-dnsutils) # e2e TestNames: dig asks each node's meshd for PTR, REFUSED, NXDOMAIN
	command -v tcpdump >/dev/null || need+=(tcpdump) # e2e TestExitNode: the leak capture on a member's underlay
	command -v stress-ng >/dev/null || need+=(stress-ng) # make flaky: a busy core beside the e2e suite
	command -v chromium >/dev/null || need+=(chromium) # e2e TestConsoleBrowser: the web console in a real browser
	[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core) # its screenshots' text
	if [ ${#need[@]} -gt 0 ]; then
		echo "install-deps: apt-get install ${need[*]}"
		apt-get -o DPkg::Lock::Timeout=300 update -qq
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	fi
	if [ -x scripts/install-deps-packaging.sh ]; then
		scripts/install-deps-packaging.sh
	fi
fi

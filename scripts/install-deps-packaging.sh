#!/usr/bin/env bash
# Installs the Debian packages that `make package`, `make package-lint` and
# `make package-test` need: debootstrap and systemd-nspawn for the booted
# package test, lintian and rpmlint for the lint, rpm for rpm -q and the
# in-container rpm test, zstd for the rootfs cache. Idempotent, and quiet
# when everything is already there. nfpm itself is not installed here: the
# Makefile runs it pinned with `go run ...@v2.45.2` (cached in GOPATH).
set -euo pipefail

# systemd: systemd-analyze; util-linux: nsenter, findmnt, runuser; procps: pgrep.
pkgs=(debootstrap systemd-container lintian rpm rpmlint zstd systemd util-linux procps)

missing=()
for p in "${pkgs[@]}"; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[[ $st == installed ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
	echo "install-deps-packaging: missing ${missing[*]}; run this script as root" >&2
	exit 1
fi
echo "install-deps-packaging: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

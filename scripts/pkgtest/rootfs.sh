#!/usr/bin/env bash
# Prints the path of a cached minimal Debian bookworm rootfs (tar.zst) for the
# package test, building it with debootstrap on the first run. The cache key
# covers the suite and the package list, so changing either builds a new one.
# Concurrent runs wait on a lock instead of building twice.
set -euo pipefail

CACHE_DIR=${MESHD_PKGTEST_CACHE:-/var/cache/meshd-pkgtest}
SUITE=${MESHD_PKGTEST_SUITE:-bookworm}
MIRROR=${MESHD_PKGTEST_MIRROR:-http://deb.debian.org/debian}
# systemd as PID 1 and dbus for systemctl; rpm for the rpm install test;
# iproute2 for a veth pair inside the container (an underlay address for init);
# systemd-resolved for split DNS on the overlay (issue 30; it also makes the
# container's /etc/resolv.conf point at resolved's stub, as on most hosts).
INCLUDE=systemd,systemd-sysv,dbus,rpm,iproute2,systemd-resolved

key=$(printf '%s\n' "$SUITE" "$MIRROR" "$INCLUDE" minbase v1 | sha256sum | cut -c1-12)
out=$CACHE_DIR/$SUITE-minbase-$key.tar.zst

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.lock"
flock 9
if [[ ! -s $out ]]; then
	work=$(mktemp -d "$CACHE_DIR/build.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	echo "rootfs: debootstrap $SUITE (one-time, about a minute) -> $out" >&2
	debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$work/root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
		tail -20 "$work/debootstrap.log" >&2
		exit 1
	}
	# Keep the image small: no apt lists or package cache.
	rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
	tar -C "$work/root" --numeric-owner --xattrs -I 'zstd -T0 -3 -q' -cf "$work/rootfs.tar.zst" .
	mv "$work/rootfs.tar.zst" "$out"
	# Older caches with other keys are no longer used.
	find "$CACHE_DIR" -maxdepth 1 -name "$SUITE-minbase-*.tar.zst" ! -path "$out" -delete
fi
echo "$out"

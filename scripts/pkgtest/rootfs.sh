#!/usr/bin/env bash
# Prints the path of a cached minimal Debian bookworm rootfs (tar.zst) for the
# package test, building it with debootstrap on the first run. The cache key
# covers the suite, the mirror and both package lists, so changing any of them
# builds a new one. Concurrent runs wait on a lock instead of building twice.
set -euo pipefail

CACHE_DIR=${MESHD_PKGTEST_CACHE:-/var/cache/meshd-pkgtest}
SUITE=${MESHD_PKGTEST_SUITE:-bookworm}
MIRROR=${MESHD_PKGTEST_MIRROR:-http://deb.debian.org/debian}
# systemd as PID 1 and dbus for systemctl; rpm for the rpm install test;
# iproute2 for a veth pair inside the container (an underlay address for init);
# systemd-resolved for split DNS on the overlay (issue 30; it also makes the
# container's /etc/resolv.conf point at resolved's stub, as on most hosts).
INCLUDE=systemd,systemd-sysv,dbus,rpm,iproute2,systemd-resolved
# Installed by apt in a second stage, after debootstrap: polkitd, so that
# user meshd may configure resolved's link with the packaged polkit rule.
# Named in debootstrap's --include, it fails the build ("Failure while
# configuring base packages ... polkitd").
EXTRA=(polkitd)

key=$(printf '%s\n' "$SUITE" "$MIRROR" "$INCLUDE" "${EXTRA[*]}" minbase v3 | sha256sum | cut -c1-12)
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
	# Second stage, in a chroot: no service may start (policy-rc.d says
	# so to invoke-rc.d and deb-systemd-invoke), and apt resolves the
	# mirror with the host's resolv.conf (the rootfs's points at resolved's
	# stub, which does not run in a chroot). Both are undone
	# afterwards.
	echo "rootfs: apt-get install ${EXTRA[*]}" >&2
	printf '#!/bin/sh\n# pkgtest rootfs build: start no services\nexit 101\n' >"$work/root/usr/sbin/policy-rc.d"
	chmod 0755 "$work/root/usr/sbin/policy-rc.d"
	mv "$work/root/etc/resolv.conf" "$work/resolv.conf.rootfs"
	cp /etc/resolv.conf "$work/root/etc/resolv.conf"
	{
		chroot "$work/root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
			apt-get -q update &&
			chroot "$work/root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
				apt-get -q install -y --no-install-recommends "${EXTRA[@]}"
	} >"$work/apt.log" 2>&1 || {
		tail -20 "$work/apt.log" >&2
		exit 1
	}
	rm "$work/root/usr/sbin/policy-rc.d" "$work/root/etc/resolv.conf"
	mv "$work/resolv.conf.rootfs" "$work/root/etc/resolv.conf"
	# Keep the image small: no apt lists or package caches.
	rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/cache/apt/"*.bin "$work/root/var/lib/apt/lists/"*
	tar -C "$work/root" --numeric-owner --xattrs -I 'zstd -T0 -3 -q' -cf "$work/rootfs.tar.zst" .
	mv "$work/rootfs.tar.zst" "$out"
	# Older caches with other keys are no longer used.
	find "$CACHE_DIR" -maxdepth 1 -name "$SUITE-minbase-*.tar.zst" ! -path "$out" -delete
fi
echo "$out"

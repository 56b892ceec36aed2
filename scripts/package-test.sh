#!/usr/bin/env bash
# The package test (`make package-test`, root only; part of `make test` as
# root). It boots a minimal Debian bookworm with systemd-nspawn (systemd as
# the container's PID 1), installs the .deb built by `make package` and
# checks, under the real systemd: the service is enabled, active and sent
# READY; meshctl works through the socket; `meshctl init` works; the
# cluster's names resolve through systemd-resolved, which user meshd
# configures by the packaged polkit rule (and is refused without it); an upgrade
# keeps an edited conffile and restarts the service; reload (systemctl
# reload and SIGHUP) applies log_level and sends RELOADING/READY; the
# watchdog restarts a meshd whose health probe fails; journald priorities
# (journalctl -p warning shows meshd's warnings, not its info lines); bad
# config or key permissions stop meshd with the code and the field in the
# journal (at priority err) and the state dir untouched; the documents
# (/usr/share/doc/meshd, the errors.md `meshctl explain` names) and
# meshd.yaml(5) are installed; purge leaves nothing behind. Then rpm -i/-U/-e in the
# same container. It also rebuilds the packages to check they are
# reproducible. Every check is printed with its time, and a summary of the
# steps at the end.
#
# Inputs (set by packaging.mk): PKG_DEB, PKG_RPM (the packages under test),
# PKG_VERSION, VERSION. The rootfs is built once and cached as a tar.zst
# under /var/cache/meshd-pkgtest (scripts/pkgtest/rootfs.sh); everything
# else lives in a temp dir that is removed, with the container, its mounts
# and processes, on every exit, failed or not.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
	echo "package-test: must run as root (systemd-nspawn)" >&2
	exit 1
fi
: "${PKG_DEB:?}" "${PKG_RPM:?}" "${PKG_VERSION:?}" "${VERSION:?}"
./scripts/install-deps-packaging.sh

now() { date +%s%N; }
ms() { echo $((($(now) - $1) / 1000000)); }
T_ALL=$(now)
STEP=""
T_STEP=0
SUMMARY=()
step() {
	end_step
	STEP=$1
	T_STEP=$(now)
	printf '== %s\n' "$STEP"
}
end_step() {
	if [[ -n $STEP ]]; then
		SUMMARY+=("$(printf '  %-52s %7d ms' "$STEP" "$(ms "$T_STEP")")")
		STEP=""
	fi
}
# check DESCRIPTION CMD...: run CMD, print ok with its time, or FAIL with its
# output and stop the test.
check() {
	local desc=$1 t out
	shift
	t=$(now)
	if out=$("$@" 2>&1); then
		printf '   ok   %-64s %6d ms\n' "$desc" "$(ms "$t")"
	else
		printf '   FAIL %s\n' "$desc"
		printf '%s\n' "$out" | tail -40 | sed 's/^/        | /'
		exit 1
	fi
}
note() { printf '   ..   %s\n' "$*"; }

TMP=$(mktemp -d /var/tmp/meshd-pkgtest.XXXXXX)
ROOT=$TMP/root
MACHINE=meshd-pkgtest-$$
NSPID=""
LEADER=""

# C CMD...: run CMD inside the container (all its namespaces), with a clean
# environment and a time limit.
C() {
	timeout 90 nsenter -t "$LEADER" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
		DEBIAN_FRONTEND=noninteractive SYSTEMD_PAGER= SYSTEMD_COLORS=0 "$@"
}

cleanup() {
	local rc=$?
	set +e
	end_step
	if [[ $rc -ne 0 && -n $LEADER ]] && kill -0 "$LEADER" 2>/dev/null; then
		echo "== diagnostics (test failed)"
		C systemctl status --no-pager -l -n 0 meshd.service 2>&1 | sed 's/^/   | /' | head -12
		# the last lines of meshd and of systemd about meshd, without the
		# sandbox set-up chatter that PID 1 logs at debug level
		C journalctl --no-pager -n 400 -u meshd.service 2>&1 | grep -v ' (meshd)\[' | tail -40 | cut -c1-300 | sed 's/^/   | /'
	fi
	if [[ -n $NSPID ]] && kill -0 "$NSPID" 2>/dev/null; then
		# Ask the container's systemd to power off; then insist.
		[[ -n $LEADER ]] && kill -RTMIN+4 "$LEADER" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$NSPID" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$NSPID" 2>/dev/null; then
			echo "package-test: container did not power off; killing it" >&2
			[[ -n $LEADER ]] && kill -KILL "$LEADER" 2>/dev/null
			kill -KILL "$NSPID" 2>/dev/null
		fi
		wait "$NSPID" 2>/dev/null
	fi
	# Mounts nspawn may have left under the temp dir, deepest first.
	findmnt -rn -o TARGET | grep -F "$TMP/" | sort -r | while read -r m; do umount -l "$m"; done
	rm -rf "/run/systemd/nspawn/propagate/$MACHINE" "/run/systemd/nspawn/unix-export/$MACHINE"
	rmdir /run/systemd/nspawn/propagate /run/systemd/nspawn/unix-export /run/systemd/nspawn/locks /run/systemd/nspawn 2>/dev/null
	rm -rf "$TMP"
	if [[ ${#SUMMARY[@]} -gt 0 ]]; then
		echo "== steps"
		printf '%s\n' "${SUMMARY[@]}"
	fi
	if [[ $rc -eq 0 ]]; then
		printf 'package-test: PASS in %d ms\n' "$(ms "$T_ALL")"
	else
		printf 'package-test: FAIL (exit %d) after %d ms\n' "$rc" "$(ms "$T_ALL")"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------
step "packages: upgrade build and reproducibility"
V1=$VERSION
V2=$PKG_VERSION.1 # sorts after PKG_VERSION for dpkg and rpm
mkdir -p "$TMP/pkgs"
cp "$PKG_DEB" "$TMP/pkgs/v1.deb"
cp "$PKG_RPM" "$TMP/pkgs/v1.rpm"
build() { # build VERSION BIN DIST: make package into private dirs
	env -u PKG_VERSION -u PKG_DEB -u PKG_RPM \
		make -s --no-print-directory package VERSION="$1" BIN="$2" DIST="$3" >"$TMP/build.log" 2>&1 ||
		{ tail -30 "$TMP/build.log"; return 1; }
}
check "build $V2 for the upgrade" build "$V2" "$TMP/build2" "$TMP/dist2"
cp "$TMP"/dist2/*.deb "$TMP/pkgs/v2.deb"
cp "$TMP"/dist2/*.rpm "$TMP/pkgs/v2.rpm"
# Reproducibility: two builds of $VERSION from scratch, in different dirs,
# back to back (in a tree others edit, dist/ may predate the last edit).
if [[ -n ${MESHD_PKGTEST_SKIP_REPRO:-} ]]; then
	note "MESHD_PKGTEST_SKIP_REPRO set: reproducibility not checked"
else
	check "build $PKG_VERSION (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)" build "$V1" "$TMP/build-r1" "$TMP/dist-r1"
	check "build $PKG_VERSION again in another dir" build "$V1" "$TMP/build-r2" "$TMP/dist-r2"
	same() { [[ $(sha256sum <"$1") == $(sha256sum <"$2") ]] || { sha256sum "$1" "$2"; return 1; }; }
	for f in "$TMP"/dist-r1/*; do
		check "byte-identical: $(basename "$f") $(sha256sum <"$f" | cut -c1-16)" same "$f" "$TMP/dist-r2/$(basename "$f")"
	done
fi
rm -rf "$TMP"/build* "$TMP"/dist*

# ---------------------------------------------------------------------------
step "rootfs (cached tar.zst)"
t=$(now)
CACHE=$(./scripts/pkgtest/rootfs.sh)
note "rootfs $CACHE ($(du -m "$CACHE" | cut -f1) MB), ready in $(ms "$t") ms"
mkdir "$ROOT"
check "unpack the rootfs" tar -C "$ROOT" --numeric-owner --xattrs -I zstd -xf "$CACHE"
# Test-only: no udev in the container, so give /dev/net/tun the mode udev
# gives it on real systems (50-udev-default.rules: 0666).
echo 'z /dev/net/tun 0666 root root -' >"$ROOT/etc/tmpfiles.d/pkgtest-tun.conf"
echo pkgtest >"$ROOT/etc/hostname"

# ---------------------------------------------------------------------------
step "boot systemd in the container"
systemd-nspawn -q -D "$ROOT" -M "$MACHINE" --boot --private-network --register=no --keep-unit \
	--console=passive --bind-ro="$TMP/pkgs:/pkgs" >"$TMP/nspawn.log" 2>&1 &
NSPID=$!
# nspawn's first child is an intermediate process; the container's PID 1 is
# the child that answers on /run/systemd/private.
up=""
for _ in $(seq 600); do
	kill -0 "$NSPID" 2>/dev/null || break
	LEADER=$(pgrep -P "$NSPID" | head -1 || true)
	if [[ -n $LEADER ]] && C test -S /run/systemd/private 2>/dev/null; then
		up=1
		break
	fi
	sleep 0.05
done
[[ -n $up ]] || cat "$TMP/nspawn.log"
check "systemd is up in the container (its PID 1 is $LEADER here)" test -n "$up"
state=$(C systemctl is-system-running --wait || true)
[[ $state == running ]] || note "system state $state; failed units: $(C systemctl list-units --failed --plain --no-legend | cut -d' ' -f1 | xargs)"
check "system state is running or degraded ($state)" test "$state" = running -o "$state" = degraded
# systemd logs every sd_notify message it gets at debug level: that is how
# the checks below see READY, RELOADING and WATCHDOG.
check "PID 1 logs at debug level" C systemd-analyze log-level debug
# An underlay address for `meshctl init`: a veth pair inside the container's
# own network namespace (nothing on the host side).
check "container underlay 10.213.0.1 on a veth pair" C sh -c \
	'ip link add pt0 type veth peer name pt1 && ip addr add 10.213.0.1/24 dev pt0 && ip link set pt0 up && ip link set pt1 up'

CURSOR=""
# mark/since: the meshd.service journal (meshd's lines and PID 1's about it)
# after a point. The cursor must be taken with the same filter: journalctl
# --after-cursor skips the first match after the cursor, which is not the
# cursor's own entry when that entry does not match the filter.
mark() { CURSOR=$({ C journalctl -u meshd.service -n0 --show-cursor --no-pager || true; } | sed -n 's/^-- cursor: //p'); }
since() { C journalctl -u meshd.service --no-pager -o cat ${CURSOR:+--after-cursor="$CURSOR"}; }
mainpid() { C systemctl show -P MainPID meshd.service; }
# notified PID WHAT: systemd received WHAT (e.g. "READY=1") from PID since
# the last mark; waits up to 10 s.
notified() {
	local i
	for i in $(seq 100); do
		since | grep -qF "Got notification message from PID $1 ($2" && return 0
		sleep 0.1
	done
	echo "no '$2' from PID $1 in the journal"
	return 1
}
logged() { # logged PATTERN: the meshd journal since the mark matches PATTERN (ERE); waits up to 10 s
	local i
	for i in $(seq 100); do
		since | grep -qE "$1" && return 0
		sleep 0.1
	done
	echo "no /$1/ in the meshd journal:"
	since | tail -20
	return 1
}
is() { # is WANT CMD...: CMD prints exactly WANT
	local want=$1 got
	shift
	got=$("$@" 2>&1) || true
	[[ $got == "$want" ]] || { echo "want '$want', got '$got'"; return 1; }
}
has() { # has PATTERN CMD...: CMD succeeds and its output matches PATTERN (ERE)
	local pat=$1 out
	shift
	out=$("$@" 2>&1) || { echo "$out"; return 1; }
	grep -qE "$pat" <<<"$out" || { echo "no /$pat/ in:"; echo "$out"; return 1; }
}
hasF() { # hasF TEXT CMD...: CMD succeeds and its output contains TEXT
	local text=$1 out
	shift
	out=$("$@" 2>&1) || { echo "$out"; return 1; }
	grep -qF -- "$text" <<<"$out" || { echo "no '$text' in:"; echo "$out"; return 1; }
}
# warned PATTERN: `journalctl -p warning -u meshd` shows a line matching
# PATTERN (ERE); waits up to 10 s.
warned() {
	local i
	for i in $(seq 100); do
		C journalctl -u meshd.service -p warning --no-pager -o cat | grep -qE "$1" && return 0
		sleep 0.1
	done
	echo "no /$1/ in journalctl -p warning -u meshd:"
	C journalctl -u meshd.service -p warning --no-pager -o cat | tail -20
	return 1
}
# prio_of PATTERN: the PRIORITY of the meshd journal entries whose JSON
# export matches PATTERN (ERE), e.g. "PRIORITY=4", one line per value.
prio_of() {
	C journalctl -u meshd.service -o json --no-pager | grep -E -- "$1" |
		grep -oE '"PRIORITY" ?: ?"[0-9]"' | tr -d '" ' | tr : = | sort -u
}
fails_with() { # fails_with PATTERN CMD...: CMD fails and its output matches PATTERN
	local pat=$1 out
	shift
	if out=$("$@" 2>&1); then echo "succeeded, want a failure: $out"; return 1; fi
	grep -qE "$pat" <<<"$out" || { echo "no /$pat/ in:"; echo "$out"; return 1; }
}
active_pid() { # waits until meshd is active with a MainPID other than $1
	local i p
	for i in $(seq 150); do
		p=$(mainpid)
		if [[ $p != 0 && $p != "$1" ]] && [[ $(C systemctl is-active meshd.service) == active ]]; then
			return 0
		fi
		sleep 0.1
	done
	echo "meshd not active with a new MainPID (was $1, now $p, $(C systemctl is-active meshd.service))"
	return 1
}
status_json() { C meshctl status -o json; }
# configman: `man 5 meshd.yaml` renders (or, without man in the container,
# the installed page is roff with the right header), and names every key of
# the installed /etc/meshd/meshd.yaml.
configman() {
	local page k
	if C sh -c 'command -v man >/dev/null'; then
		page=$(C env MANWIDTH=100 man 5 meshd.yaml 2>&1) || { echo "$page"; return 1; }
		grep -qE '^MESHD\.YAML\(5\)' <<<"$page" || { echo "man 5 meshd.yaml: no MESHD.YAML(5) header:"; head -5 <<<"$page"; return 1; }
	else
		page=$(C zcat /usr/share/man/man5/meshd.yaml.5.gz) || return 1
		head -1 <<<"$page" | grep -qE '^\.TH "MESHD\.YAML" "5" ' || { echo "not a section 5 page:"; head -3 <<<"$page"; return 1; }
		grep -qF '\fBports.gossip\fR (default: \fB7946\fR)' <<<"$page" || { echo "no ports.gossip entry"; return 1; }
	fi
	for k in $(C sed -n 's/^#\([a-z_]*\):.*/\1/p' /etc/meshd/meshd.yaml); do
		grep -q "$k" <<<"$page" || { echo "meshd.yaml(5) does not document $k"; return 1; }
	done
}

# ---------------------------------------------------------------------------
step "deb: install $PKG_VERSION"
mark
check "dpkg -i meshd_${PKG_VERSION}_amd64.deb" C dpkg -i /pkgs/v1.deb
check "dpkg: meshd $PKG_VERSION-1 installed" is "$PKG_VERSION-1" C dpkg-query -W -f='${Version}' meshd
check "meshd.service is enabled" is enabled C systemctl is-enabled meshd.service
check "meshd.service is active (running)" is active C systemctl is-active meshd.service
PID=$(mainpid)
check "meshd sent READY=1 (PID $PID)" notified "$PID" "READY=1"
check "meshd logged 'meshd ready' with its version" logged "meshd ready.*version=\"?$(sed 's/[.+~]/[&]/g' <<<"$V1")"
check "systemd-analyze verify meshd.service" C systemd-analyze verify --man=no meshd.service
check "runs as user meshd, NoNewPrivs, seccomp" has "^meshd 1 2$" C sh -c \
	"echo \$(stat -c %U /proc/$PID) \$(sed -n 's/^NoNewPrivs:\t//p' /proc/$PID/status) \$(sed -n 's/^Seccomp:\t//p' /proc/$PID/status)"
check "no core dumps (LimitCORE=0: a core would hold the CA and node keys)" has "^Max core file size +0 +0 " C grep "^Max core file size" /proc/"$PID"/limits
check "capabilities: CAP_NET_ADMIN, CAP_NET_BIND_SERVICE only" has "^CapEff:.*0000000000001400$" C grep CapEff /proc/"$PID"/status
check "state dir /var/lib/meshd 700 meshd:meshd" is "700 meshd:meshd" C stat -c '%a %U:%G' /var/lib/meshd
check "socket /run/meshd/meshd.sock 660 meshd:meshd" is "660 meshd:meshd" C stat -c '%a %U:%G' /run/meshd/meshd.sock
check "conffile /etc/meshd/meshd.yaml registered" has "/etc/meshd/meshd.yaml [0-9a-f]{32}" C dpkg-query -W -f='${Conffiles}' meshd
check "man pages and bash completion installed" C test -s /usr/share/man/man8/meshd.8.gz -a -s /usr/share/man/man1/meshctl.1.gz -a -s /usr/share/bash-completion/completions/meshctl
check "docs in /usr/share/doc/meshd: README, errors, operations" C test -s /usr/share/doc/meshd/README.md -a -s /usr/share/doc/meshd/errors.md -a -s /usr/share/doc/meshd/operations.md
check "explain's remedy names the installed errors.md" fails_with "/usr/share/doc/meshd/errors\.md" C meshctl explain NOPENO
check "the installed errors.md has explain's remedy for TKNCNS" C sh -c \
	'r=$(meshctl explain TKNCNS | sed -n "s/^remedy: //p") && [ -n "$r" ] && grep -qF -- "$r" /usr/share/doc/meshd/errors.md'
check "meshd.yaml(5) installed; names every key of /etc/meshd/meshd.yaml" configman
check "the unit's Documentation= names meshd.yaml(5) and operations.md" has '"man:meshd\.yaml\(5\)" file:/usr/share/doc/meshd/operations\.md' \
	C systemctl show -P Documentation meshd.service
SCORE=$(C systemd-analyze security meshd.service | tail -1)
note "systemd-analyze security (in the container): ${SCORE#→ }"

# ---------------------------------------------------------------------------
step "meshctl through the socket"
check "meshctl status: running, unjoined" has "is running and has not joined a cluster" C meshctl status
check "meshctl status -o json: state unjoined, version $V1" has "\"state\": \"unjoined\"" C meshctl status -o json
check "a member of group meshd may use meshctl" C sh -c 'useradd -M -G meshd alice && runuser -u alice -- meshctl status -o json'
check "anyone else is refused with PermissionDenied (exit 1), not 'meshd is not running'" C sh -c 'useradd -M bob && out=$(runuser -u bob -- meshctl status 2>&1); rc=$?; [ $rc -eq 1 ] && echo "$out" | grep -q "^X403304PRMDNY:"'
check "meshctl version: meshctl and meshd both $V1" hasF "daemon: meshd $V1 (commit" C meshctl version
check "meshctl version: no X200320VERMIS warning" C sh -c '! meshctl version 2>&1 | grep -q X200320VERMIS'
check "meshd check-config: the packaged config is valid" has ": valid$" C meshd check-config

# ---------------------------------------------------------------------------
step "meshctl init inside the container"
check "meshctl init --cluster t" has "cluster \"t\" created" C meshctl init --cluster t
check "status: running, control, CA holder" has '"state": "running"' status_json
check "status: cluster t, underlay 10.213.0.1" has '"underlay_addr": "10.213.0.1"' status_json
check "no key file is group/world accessible" is "" C find /var/lib/meshd -name '*.key' -perm /077
check "state files belong to meshd" is "" C find /var/lib/meshd ! -user meshd

# ---------------------------------------------------------------------------
# Names on the overlay (issue 30): meshd points systemd-resolved at its DNS
# for ~CLUSTER.mesh on the overlay link (names/resolved) and takes it back
# when it stops. As user meshd it may only through polkit: the rootfs has
# polkitd, the package ships the rule (packaging/polkit/50-meshd.rules).
step "names: split DNS through systemd-resolved (polkit rule)"
# within SECONDS CMD...: CMD succeeds within SECONDS (meshd applies
# the settings in its reconcile loop, every 30 s at most).
within() {
	local n=$(($1 * 10)) out
	shift
	for _ in $(seq "$n"); do
		out=$("$@" 2>&1) && return 0
		sleep 0.1
	done
	echo "$out"
	return 1
}
jsonfield() { status_json | sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" | head -1; }
OIP=$(jsonfield overlay_ip)
DEV=$(jsonfield device)
note "overlay $OIP on $DEV"
RULE=/usr/share/polkit-1/rules.d/50-meshd.rules
check "polkitd installed (rootfs); the package recommends it" has "^polkitd$" C dpkg-query -W -f='${Package}\n' polkitd
check "the package's polkit rule: $RULE 644 root:root" is "644 root:root" C stat -c '%a %U:%G' "$RULE"
note "rules.d after the install: $(C stat -c '%a %U:%G' "$(dirname "$RULE")")"
check "systemd-resolved is active" is active C systemctl is-active systemd-resolved.service
check "resolvectl domain: ~t.mesh on $DEV (within 40 s)" within 40 has "\($DEV\): .*~t\.mesh" C resolvectl domain "$DEV"
check "resolvectl dns: $OIP on $DEV" has "\($DEV\): $OIP\$" C resolvectl dns "$DEV"
check "$DEV: DefaultRoute, LLMNR, mDNS and DNSSEC off" has "Protocols: .*-DefaultRoute -LLMNR -mDNS .*DNSSEC=no" C resolvectl status "$DEV"
# The answer lists the A and the AAAA record (a dual-stack cluster by default) in
# either order: the name heads the first line, later lines are indented.
check "resolvectl query pkgtest.t.mesh: $OIP via $DEV" has "^(pkgtest\.t\.mesh: | +)${OIP//./\\.} .*link: $DEV" \
	C resolvectl query --cache=no pkgtest.t.mesh
check "resolvectl query pkgtest.t.mesh: an IPv6 overlay address (fd..) via $DEV" has "^(pkgtest\.t\.mesh: | +)fd[0-9a-f]*:[0-9a-f:]+ .*link: $DEV" \
	C resolvectl query --cache=no pkgtest.t.mesh
check "resolvectl query localhost still answers" has "^localhost: (127\.0\.0\.1|::1)" C resolvectl query localhost
check "status: dns.resolved configured, dns.link $DEV" has "\"resolved\": \"configured\",\s*\"link\": \"$DEV\"" \
	C sh -c 'meshctl status -o json | tr -d "\n"'
check "status: no X200551RSLVNU warning" C sh -c '! meshctl status -o json | grep -q X200551RSLVNU'
check "systemctl stop meshd" C systemctl stop meshd.service
gone() {
	local out
	out=$(C resolvectl domain) || return 1
	! grep -F '~t.mesh' <<<"$out"
}
check "no link has ~t.mesh after meshd stopped (within 10 s)" within 10 gone
# Without the rule, resolved refuses user meshd: status says so and warns.
# (meshd is stopped, so nothing is left configured that a check would
# find unchanged; polkitd is restarted so that it surely reads rules.d anew.)
check "move the rule away; restart polkit" C sh -c "mv $RULE /root/ && systemctl restart polkit.service"
check "start meshd" C systemctl start meshd.service
refused_status() { has '"resolved": "refused: ' status_json; }
check "status: dns.resolved \"refused: ...\" (within 20 s)" within 20 refused_status
note "$(jsonfield resolved)"
check "status warns X200551RSLVNU" hasF '"code": "X200551RSLVNU"' status_json
check "status: the hint points a resolver at 127.0.77.53" has '"hint": "[^"]*127\.0\.77\.53' status_json
check "journalctl -p warning shows it with the code" warned 'systemd-resolved does not route.*X200551RSLVNU'
check "no link has ~t.mesh" gone
check "put the rule back; restart polkit and meshd" C sh -c "mv /root/$(basename "$RULE") $RULE && systemctl restart polkit.service && systemctl restart meshd.service"
check "~t.mesh is back on $DEV (within 40 s)" within 40 has "\($DEV\): .*~t\.mesh" C resolvectl domain "$DEV"
check "status: dns.resolved configured again" within 10 has '"resolved": "configured"' status_json

# ---------------------------------------------------------------------------
step "deb: upgrade to $V2 keeps the edited config"
check "edit the config (log_format: text, a marker)" C sed -i 's/^#log_format: text$/log_format: text # edited by pkgtest/' /etc/meshd/meshd.yaml
OLD=$(mainpid)
mark
check "dpkg -i meshd_${V2}_amd64.deb" C dpkg -i /pkgs/v2.deb
check "dpkg: meshd $V2-1 installed" is "$V2-1" C dpkg-query -W -f='${Version}' meshd
check "the edited config is kept" C grep -q '^log_format: text # edited by pkgtest$' /etc/meshd/meshd.yaml
check "no .dpkg-dist/.dpkg-new left" is "" C sh -c 'ls /etc/meshd | grep -v "^meshd.yaml$"'
check "restarted: new MainPID (was $OLD)" active_pid "$OLD"
PID=$(mainpid)
check "the new meshd sent READY=1 (PID $PID)" notified "$PID" "READY=1"
check "still enabled" is enabled C systemctl is-enabled meshd.service
check "status: version $V2" hasF "\"version\": \"$V2\"" status_json
check "status: the cluster survived the restart" has '"cluster": "t"' status_json

# ---------------------------------------------------------------------------
step "reload: systemctl reload and SIGHUP"
check "set log_level: debug" C sed -i 's/^#log_level: info$/log_level: debug/' /etc/meshd/meshd.yaml
mark
check "systemctl reload meshd" C systemctl reload meshd.service
check "same MainPID $PID" is "$PID" mainpid
check "meshd sent RELOADING=1 with MONOTONIC_USEC" notified "$PID" "RELOADING=1, MONOTONIC_USEC="
check "then READY=1" notified "$PID" "READY=1"
check "meshd logged the applied log_level" logged 'config reloaded.*applied=log_level.*log_level=debug'
check "set log_level: warn" C sed -i 's/^log_level: debug$/log_level: warn/' /etc/meshd/meshd.yaml
mark
check "SIGHUP (systemctl kill -s HUP)" C systemctl kill -s HUP --kill-who=main meshd.service
check "meshd sent RELOADING=1, MONOTONIC_USEC= after SIGHUP" notified "$PID" "RELOADING=1, MONOTONIC_USEC="
check "then READY=1" notified "$PID" "READY=1"
check "set log_level: info" C sed -i 's/^log_level: warn$/log_level: info/' /etc/meshd/meshd.yaml
mark
check "meshctl reload applies it" has "config reloaded" C meshctl reload
check "meshd logged log_level=info" logged 'config reloaded.*applied=log_level.*log_level=info'
check "a non-reloadable change: node_name" C sh -c 'echo "node_name: other" >>/etc/meshd/meshd.yaml'
check "meshctl reload warns X200404RSTREQ naming node_name" has "X200404RSTREQ.*node_name" C meshctl reload
# journald priorities: meshd prefixes each line with its priority (<4> for
# a warning), journald strips it; the reload above logged a warning and an
# info line.
check "journalctl -p warning -u meshd shows that warning" warned 'config reloaded; some changes need a restart.*X200404RSTREQ'
check "... and none of meshd's info or debug lines" is "" C sh -c \
	'journalctl -u meshd.service -p warning --no-pager -o cat | grep -E "level=(INFO|DEBUG)" || true'
check "the warning is PRIORITY=4" is "PRIORITY=4" prio_of 'some changes need a restart'
check "the info line of the same reload is PRIORITY=6" is "PRIORITY=6" prio_of 'msg=\\"config reloaded\\" applied=[^ ]* log_level=info'
check "journald stripped every <N> prefix" is "" C sh -c 'journalctl -u meshd.service --no-pager -o cat | grep -E "^<[0-7]>" || true'
check "drop node_name again" C sed -i '/^node_name: other$/d' /etc/meshd/meshd.yaml
check "an unknown key" C sh -c 'echo "bogus_key: 1" >>/etc/meshd/meshd.yaml'
mark
check "systemctl reload fails (X400410RLDBAD)" fails_with "" C systemctl reload meshd.service
check "the journal names the code and bogus_key" logged 'X400410RLDBAD.*bogus_key|bogus_key.*X400410RLDBAD'
check "meshd keeps running: same MainPID $PID" is "$PID" mainpid
check "drop bogus_key" C sed -i '/^bogus_key: 1$/d' /etc/meshd/meshd.yaml
check "reload is clean again" C systemctl reload meshd.service

# ---------------------------------------------------------------------------
step "watchdog: pings only while healthy"
check "drop-in WatchdogSec=6s (test only)" C sh -c 'mkdir -p /run/systemd/system/meshd.service.d &&
	printf "[Service]\nWatchdogSec=6s\n" >/run/systemd/system/meshd.service.d/pkgtest.conf && systemctl daemon-reload'
C systemctl reset-failed meshd.service
mark
check "restart" C systemctl restart meshd.service
PID=$(mainpid)
check "meshd pings WATCHDOG=1 (PID $PID)" notified "$PID" "WATCHDOG=1"
RESTARTS=$(C systemctl show -P NRestarts meshd.service)
mark
check "remove the socket: the health probe fails" C rm /run/meshd/meshd.sock
check "meshd logs it withholds pings" logged 'health probe failed'
check "systemd restarts meshd on the watchdog timeout" active_pid "$PID"
check "NRestarts grew (was $RESTARTS)" test "$(C systemctl show -P NRestarts meshd.service)" -gt "$RESTARTS"
check "the journal shows the watchdog timeout" has "[Ww]atchdog timeout" since
check "drop the drop-in, restart" C sh -c 'rm -r /run/systemd/system/meshd.service.d && systemctl daemon-reload && systemctl restart meshd.service'
check "meshctl status works again" has '"state": "running"' status_json

# ---------------------------------------------------------------------------
step "bad input: meshd refuses to start, state untouched"
# meshd.pid is the state dir's lock (flock, the PID of the last meshd that
# started; agent/statelock.go), rewritten by every start, refused or not:
# not state, so not compared.
statelist() { C find /var/lib/meshd -path /var/lib/meshd/meshd.pid -prune -o -printf '%p %m %U %s %T@\n' | sort | sha256sum; }
cp_cfg() { C cp /etc/meshd/meshd.yaml /root/meshd.yaml.good; }
restore_cfg() { C cp /root/meshd.yaml.good /etc/meshd/meshd.yaml; }
refused() { # refused CODE FIELD (after a mark): restart fails, the journal has both, the state is as before
	local before after
	C systemctl reset-failed meshd.service
	before=$(statelist)
	if C systemctl restart meshd.service; then echo "meshd started"; return 1; fi
	C systemctl stop meshd.service
	logged "$1" || return 1
	logged "$2" || return 1
	after=$(statelist)
	[[ $before == "$after" ]] || { echo "state dir changed"; return 1; }
}
restart_ok() { C systemctl reset-failed meshd.service; C systemctl restart meshd.service && C systemctl is-active meshd.service; }
cp_cfg
C sh -c 'echo "bogus_key: 1" >>/etc/meshd/meshd.yaml'
# shown PATTERN: what the admin sees in the journal (first lines matching).
shown() { { since | grep -E "$1" | head -"${2:-3}" | cut -c1-240 | sed 's/^/          journal: /'; } || true; }
mark
check "unknown key: X400402BADCFG and bogus_key in the journal" refused X400402BADCFG bogus_key
shown 'X400402BADCFG|bogus_key'
check "the startup failure is PRIORITY=3 (SyslogLevel=err)" is "PRIORITY=3" prio_of '"MESSAGE" ?: ?"remedy: '
restore_cfg
C sed -i 's/^log_level: info$/log_level: loud/' /etc/meshd/meshd.yaml
mark
check "bad value: X400402BADCFG and log_level in the journal" refused X400402BADCFG 'log_level = "loud"'
shown 'X400402BADCFG|problem|log_level'
restore_cfg
KEY=$(C find /var/lib/meshd/identity -type f -name '*.key' | head -1)
C chmod 0640 "$KEY"
mark
check "key file 0640: X400401KEYPRM and the file in the journal" refused X400401KEYPRM "$(basename "$KEY")"
shown "^X400401KEYPRM|^detail.*$(basename "$KEY")"
C chmod 0600 "$KEY"
check "fixed again: meshd starts" restart_ok

# ---------------------------------------------------------------------------
step "deb: purge"
FILES=$(dpkg-deb -c "$TMP/pkgs/v2.deb" | awk '$1 !~ /^d/ {sub(/^\./, "", $6); print $6}')
check "dpkg --purge meshd" C dpkg --purge meshd
check "not installed" fails_with "" C dpkg-query -W -f='${db:Status-Status}\n' meshd
check "no meshd process" is "" C sh -c 'grep -lx meshd /proc/[0-9]*/comm 2>/dev/null || true'
check "no unit: systemctl cat fails" fails_with "" C systemctl cat meshd.service
check "no enablement or mask symlinks" is "" C find /etc/systemd -name 'meshd*'
check "no /etc/meshd, /var/lib/meshd, /run/meshd" is "" C sh -c 'ls -d /etc/meshd /var/lib/meshd /var/lib/private/meshd /run/meshd 2>/dev/null || true'
check "none of the package's files left" is "" C sh -c "for f in $(echo $FILES); do [ -e \"\$f\" ] && echo \"\$f\"; done; true"
check "no file owned by user or group meshd" is "" C find / -xdev \( -user meshd -o -group meshd \) -print

# ---------------------------------------------------------------------------
step "rpm: install, upgrade, erase"
C rpm --initdb 2>/dev/null || true
mark
check "rpm -i --nodeps meshd-${PKG_VERSION}.x86_64.rpm" C rpm -i --nodeps /pkgs/v1.rpm
check "enabled (preset) and active" is "enabled active" C sh -c 'echo $(systemctl is-enabled meshd.service) $(systemctl is-active meshd.service)'
PID=$(mainpid)
check "READY=1 (PID $PID)" notified "$PID" "READY=1"
check "meshctl status: unjoined, version $V1" hasF "\"version\": \"$V1\"" status_json
check "the polkit rule: 644 root:root, owned by meshd's rpm" is "644 root:root meshd" C sh -c \
	'echo $(stat -c "%a %U:%G" /usr/share/polkit-1/rules.d/50-meshd.rules) $(rpm -qf --qf "%{NAME}" /usr/share/polkit-1/rules.d/50-meshd.rules)'
check "%config(noreplace): rpm -qc lists meshd.yaml" has "^/etc/meshd/meshd.yaml$" C rpm -qc meshd
check "rpm -qd: errors.md and meshd.yaml.5 are %doc" has "^/usr/share/doc/meshd/errors.md$" C sh -c \
	'rpm -qd meshd | grep -x /usr/share/man/man5/meshd.yaml.5.gz >/dev/null && rpm -qd meshd'
check "edit the config" C sed -i 's/^#log_format: text$/log_format: text # edited by pkgtest/' /etc/meshd/meshd.yaml
mark
check "rpm -U --nodeps meshd-${V2}.x86_64.rpm" C rpm -U --nodeps /pkgs/v2.rpm
check "rpm: meshd-$V2-1 installed" is "meshd-$V2-1.x86_64" C rpm -q meshd
check "the edited config is kept" C grep -q '^log_format: text # edited by pkgtest$' /etc/meshd/meshd.yaml
check "restarted: new MainPID (was $PID)" active_pid "$PID"
check "status: version $V2" hasF "\"version\": \"$V2\"" status_json
check "rpm -e meshd" C rpm -e --nodeps meshd
check "stopped and gone: no unit, no binary" is "inactive" C sh -c 'systemctl is-active meshd.service; systemctl cat meshd.service >/dev/null 2>&1 && echo unit; [ -e /usr/bin/meshd ] && echo binary; true'
check "no enablement symlinks" is "" C find /etc/systemd -name 'meshd*'
check "the edited config is saved as meshd.yaml.rpmsave" C test -f /etc/meshd/meshd.yaml.rpmsave
note "rpm -e keeps /var/lib/meshd by design (no purge in rpm; it may hold the only CA key)"

# ---------------------------------------------------------------------------
step "power off"
check "systemctl poweroff" C systemctl poweroff
stopped() { for _ in $(seq 200); do kill -0 "$NSPID" 2>/dev/null || return 0; sleep 0.05; done; return 1; }
check "the container is gone" stopped
wait "$NSPID" || true
NSPID=""
LEADER=""
end_step

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Per-turn checkpoint benchmark on a real tree: after a turn changed one
# file, then 1% of the files, how long does the checkpoint take?
# airlock with a layered workspace (an overlay over a restored checkpoint)
# and with a plain directory (stat cache warm), against a shadow git
# repository (`git add -A -f && git write-tree`, separate GIT_DIR, the
# index kept from the previous snapshot) and a full `tar --zstd` of the
# same tree, interleaved round by round; then forks (`checkpoint adopt`) of
# checkpoints of 10 MB, 100 MB and 1 GiB. See bench/README.md.
#
# Usage: bench/turn.sh [AIRLOCK_BINARY]   (or $AIRLOCK; default build/src/cli/airlock)
# Environment (defaults in brackets):
#   BENCH_TURN_TREE    the real tree [/var/tmp/airlock-bench-tree-real]; built once
#                      (Debian's boost1.81 and qemu sources with `apt-get source`, and
#                      bench/turn/package*.json installed with `npm ci`), reused while
#                      TREE.stamp matches this script's recipe
#   BENCH_TURN_ROUNDS  timed rounds [5]
#   BENCH_TURN_FORKS   forks per size [20]
#   BENCH_TURN_VERIFY  1: restore the last checkpoints and compare them with the tree [1]
#   BENCH_BEFORE       another build of airlock, measured in the same rounds as airlock-before
#   BENCH_TAG          write turn-<date>-TAG.json
#   BENCH_TURN_OUT     the JSON file [bench/results/turn-<date>[-TAG].json]
# Needs root (overlay mounts). Works in /var/tmp, beside the tree. Exits
# non-zero when a step fails or a checkpoint is wrong; never on speed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
airlock=${1:-${AIRLOCK:-$root/build/src/cli/airlock}}
case $airlock in /*) ;; *) airlock=$PWD/$airlock ;; esac
tree=${BENCH_TURN_TREE:-/var/tmp/airlock-bench-tree-real}
tag=${BENCH_TAG:+-$BENCH_TAG}
out_json=${BENCH_TURN_OUT:-$root/bench/results/turn-$(date +%Y-%m-%d)$tag.json}
py=/usr/bin/python3
turn=$root/bench/turn/turn.py
budget=1800 # seconds for the whole run, tree included; each step gets what is left
start=$SECONDS

die() {
	echo "bench-turn: error: $*" >&2
	exit 1
}
note() { echo "bench-turn: $*" >&2; }

[ "$(id -u)" -eq 0 ] || die "needs root (overlay mounts)"
[ -x "$airlock" ] || die "no airlock binary at $airlock (build it, or pass its path as \$1)"
[ -x "$py" ] || die "/usr/bin/python3 is missing"
for t in git tar zstd npm dpkg-source apt-get findmnt; do
	command -v $t >/dev/null || die "$t is missing (scripts/deps.sh --bench installs it)"
done
if [ -n "${BENCH_BEFORE:-}" ]; then
	case $BENCH_BEFORE in /*) ;; *) BENCH_BEFORE=$PWD/$BENCH_BEFORE ;; esac
	[ -x "$BENCH_BEFORE" ] || die "BENCH_BEFORE=$BENCH_BEFORE is not a program"
fi
left() { echo $((budget - (SECONDS - start))); }
bounded() {
	local cap=$1 l
	shift
	l=$(left)
	[ "$l" -gt 3 ] || die "out of time budget ($budget s) before: $*"
	[ "$cap" -le "$l" ] || cap=$l
	timeout --kill-after=5 "$cap" "$@"
}

# ------------------------------------------------------------ the tree
# What the tree is made of; a change here (or in bench/turn/package*.json)
# builds it again.
recipe() {
	echo "airlock per-turn bench tree 1"
	echo "debian sources: boost1.81 -> boost, qemu -> qemu (apt-get source, patches applied)"
	echo "npm ci --ignore-scripts: app (bench/turn/package.json, package-lock.json $(sha256sum "$root/bench/turn/package-lock.json" | cut -c1-16))"
}

build_tree() {
	local src=$tree.src new=$tree.new
	rm -rf "$new" "$src"
	mkdir -p "$src/apt/lists/partial" "$src/apt/cache/archives/partial" "$src/dl" "$new"
	# A private apt configuration with the deb-src line of the machine's own
	# mirror: the system's sources are left as they are.
	"$py" "$turn" sources "$src/apt/sources.list"
	local a=(-o "Dir::Etc::SourceList=$src/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o "Dir::State::Lists=$src/apt/lists" -o "Dir::Cache=$src/apt/cache")
	note "building the tree in $tree (once; a few minutes): apt-get source boost1.81 qemu"
	bounded 300 apt-get -q "${a[@]}" update >"$src/apt.log" 2>&1 || die "apt-get update (see $src/apt.log)"
	(cd "$src/dl" && bounded 600 apt-get -q "${a[@]}" source --download-only boost1.81 qemu) >>"$src/apt.log" 2>&1 ||
		die "apt-get source (see $src/apt.log)"
	local p d
	for p in boost1.81:boost qemu:qemu; do
		d=$(find "$src/dl" -maxdepth 1 -name "${p%%:*}_*.dsc" | head -n 1)
		note "unpacking $(basename "$d")"
		bounded 600 dpkg-source -x "$d" "$new/${p#*:}" >>"$src/dpkg-source.log" 2>&1 ||
			die "dpkg-source -x $d (see $src/dpkg-source.log)"
		basename "$d" >>"$src/versions"
	done
	note "npm ci in app/"
	mkdir "$new/app"
	cp "$root/bench/turn/package.json" "$root/bench/turn/package-lock.json" "$new/app/"
	(cd "$new/app" && bounded 900 npm ci --ignore-scripts --no-audit --no-fund) >"$src/npm.log" 2>&1 ||
		die "npm ci (see $src/npm.log)"
	rm -rf "$tree"
	mv "$new" "$tree"
	{
		recipe
		cat "$src/versions"
		echo "npm $(npm --version), node $(node --version)"
	} >"$tree.stamp"
}

journal= # set once the work directory exists
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	if [ -n "$journal" ] && [ -f "$journal" ]; then
		"$py" "$turn" revert "$tree" "$journal" ||
			{
				echo "bench-turn: WARNING: could not undo the changes to $tree; it will be built again" >&2
				rm -f "$tree.stamp"
			}
	fi
	if [ -n "${work:-}" ] && [ -f "$work/mounts" ]; then
		while read -r m; do
			! mountpoint -q "$m" || umount "$m" || echo "bench-turn: WARNING: could not unmount $m" >&2
		done <"$work/mounts"
	fi
	if [ -n "${work:-}" ] && [ -d "$work" ]; then
		note "removing $work"
		rm -rf "$work"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'note interrupted; exit 130' INT TERM HUP

# An interrupted run left changes: undo them first.
for j in /var/tmp/airlock-turn-bench.*/journal; do
	[ -f "$j" ] || continue
	# another run still going (its own tree) is left alone
	p=$(cat "$(dirname "$j")/pid" 2>/dev/null || echo)
	[ -z "$p" ] || ! kill -0 "$p" 2>/dev/null || continue
	[ "$(cat "$(dirname "$j")/tree" 2>/dev/null)" = "$tree" ] || continue
	note "undoing the changes an interrupted run left ($j)"
	"$py" "$turn" revert "$tree" "$j"
	if [ -f "$(dirname "$j")/mounts" ]; then
		while read -r m; do ! mountpoint -q "$m" || umount "$m"; done <"$(dirname "$j")/mounts"
	fi
	rm -rf "$(dirname "$j")"
done
if [ -d "$tree" ] && [ -f "$tree.stamp" ] && [ "$(recipe)" = "$(head -n 3 "$tree.stamp")" ]; then
	note "reusing the tree in $tree"
else
	build_tree
fi

work=$(mktemp -d /var/tmp/airlock-turn-bench.XXXXXX)
journal=$work/journal
echo $$ >"$work/pid"
echo "$tree" >"$work/tree"
[ "$(stat -c %d "$work")" = "$(stat -c %d "$tree")" ] || note "WARNING: $work and $tree are on different filesystems"
head -c 32 /dev/urandom >"$work/checkpoint.key"
chmod 600 "$work/checkpoint.key"
AIRLOCK=$airlock BENCH_TURN_TREE=$tree BENCH_TURN_OUT=$out_json BENCH_BEFORE=${BENCH_BEFORE:-} \
	bounded "$(left)" "$py" "$turn" run "$work"
# the tree back as it was
"$py" "$turn" revert "$tree" "$journal"
note "done in $((SECONDS - start)) s"

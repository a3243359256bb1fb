#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Checkpoint benchmark: `airlock checkpoint create / restore / diff` against
# `tar --zstd` and `mksquashfs -comp zstd` / `unsquashfs` on the same
# generated tree (~1 GiB in ~50,000 files), interleaved round by round.
# See bench/checkpoint/README.md.
#
# Usage: bench/checkpoint.sh [AIRLOCK_BINARY]   (or $AIRLOCK; default build/src/cli/airlock)
# Environment (defaults in brackets):
#   BENCH_CK_TREE     the tree [/var/tmp/airlock-bench-tree]; generated when absent or
#                     when its stamp does not match bench/checkpoint/tree.py
#   BENCH_CK_ROUNDS   timed rounds [3]
#   BENCH_CK_SQUASH   which mksquashfs builds to time: "first" (round 1's first
#                     build only; it takes 1-2 minutes on 2 cores), "all", or "0" [first]
#   BENCH_CK_OUT      the JSON file [bench/results/checkpoint-<date>.json]
# Needs root (restores keep owners). Works in /var/tmp (the tree's filesystem).
# Exits non-zero when a step fails (including a restore that differs from the
# source); never on speed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
airlock=${1:-${AIRLOCK:-$root/build/src/cli/airlock}}
case $airlock in /*) ;; *) airlock=$PWD/$airlock ;; esac
tree=${BENCH_CK_TREE:-/var/tmp/airlock-bench-tree}
rounds=${BENCH_CK_ROUNDS:-3}
squash=${BENCH_CK_SQUASH:-first}
out_json=${BENCH_CK_OUT:-$root/bench/results/checkpoint-$(date +%Y-%m-%d).json}
gen=$root/bench/checkpoint/tree.py
budget=900 # seconds for the whole script; each step gets what is left
start=$SECONDS

die() {
	echo "bench-ck: error: $*" >&2
	exit 1
}
note() { echo "bench-ck: $*" >&2; }

case $rounds in '' | *[!0-9]* | 0) die "BENCH_CK_ROUNDS wants a positive number" ;; esac
case $squash in first | all | 0) ;; *) die "BENCH_CK_SQUASH is first, all or 0" ;; esac
[ "$(id -u)" -eq 0 ] || die "needs root"
[ -x "$airlock" ] || die "no airlock binary at $airlock (build it, or pass its path as \$1)"
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || die "python3 is missing"
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"
for t in tar zstd mksquashfs unsquashfs; do
	command -v $t >/dev/null || die "$t is missing (scripts/deps.sh --bench installs it)"
done
tar --version | head -n 1 | grep -q 'GNU tar' || die "tar is not GNU tar"

journal=$tree.journal # how to undo this benchmark's changes to the tree
work=
mounted= # the overlay of the layered phases, while mounted
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	if [ -f "$journal" ]; then
		"$py" "$gen" revert "$tree" "$journal" || echo "bench-ck: WARNING: could not undo the changes to $tree; it will be regenerated next time" >&2
		[ ! -f "$journal" ] || rm -f "$tree/.bench-stamp"
	fi
	if [ -n "$mounted" ] && mountpoint -q "$mounted"; then
		umount "$mounted" || echo "bench-ck: WARNING: could not unmount $mounted" >&2
	fi
	if [ -n "$work" ] && [ -d "$work" ]; then
		note "removing $work"
		rm -rf "$work"
		touch "$tree.cleaned" # when ~450,000 inodes were freed (see the next run's warning)
	fi
	exit $rc
}
trap cleanup EXIT
trap 'note interrupted; exit 130' INT TERM HUP

left() { echo $((budget - (SECONDS - start))); }
# Runs a command under timeout (at most $1 s, at most what is left of the budget).
bounded() {
	local cap=$1 l
	shift
	l=$(left)
	[ "$l" -gt 3 ] || die "out of time budget ($budget s) before: $*"
	[ "$cap" -le "$l" ] || cap=$l
	timeout --kill-after=5 "$cap" "$@"
}

# ------------------------------------------------------------ the tree
# An interrupted run left changes: undo them first.
[ ! -f "$journal" ] || "$py" "$gen" revert "$tree" "$journal"
if [ -d "$tree" ] && [ "$(cat "$tree/.bench-stamp" 2>/dev/null)" = "$("$py" "$gen" stamp)" ]; then
	note "reusing the tree in $tree"
else
	if [ -e "$tree" ]; then
		note "$tree does not match bench/checkpoint/tree.py; generating it again"
		rm -rf "$tree"
	fi
	note "generating the tree in $tree (once; ~1 minute)"
	bounded 600 "$py" "$gen" gen "$tree" || die "generating the tree"
fi

# ext4 without a journal avoids inodes freed in the last 60-300 s: restores
# right after the previous run's clean-up spend half their time looking for
# inodes (__ext4_new_inode -> find_inode_bit -> recently_deleted).
since_cleanup=
if [ -f "$tree.cleaned" ]; then
	since_cleanup=$(($(date +%s) - $(stat -c %Y "$tree.cleaned")))
	[ "$since_cleanup" -ge 300 ] ||
		note "WARNING: the last run's clean-up freed its inodes ${since_cleanup} s ago; restores will be slower (wait 5 minutes between runs)"
fi

work=$(mktemp -d /var/tmp/airlock-ck-bench.XXXXXX)
[ "$(stat -c %d "$work")" = "$(stat -c %d "$tree")" ] || note "WARNING: $work and $tree are on different filesystems"
res=$work/results.tsv
: >"$res"
meta=$work/meta.txt
: >"$meta"
m() { echo "$1=$2" >>"$meta"; }

note "listing the tree (with a SHA-256 of every file)"
bounded 300 "$py" "$gen" listing "$tree" ns >"$work/source.list" || die "listing $tree"
n_files=$(grep -c '^f ' "$work/source.list")
n_pct=$(((n_files + 99) / 100))
m tree "$tree"
m tree_generated "$([ "$(cat "$tree/.bench-stamp" 2>/dev/null)" = "$("$py" "$gen" stamp)" ] && echo "bench/checkpoint/tree.py (seed $(sed -n 's/^seed //p' "$tree/.bench-stamp"))" || echo "not by tree.py")"
m tree_files "$n_files"
m tree_dirs "$(grep -c '^d ' "$work/source.list")"
m tree_symlinks "$(grep -c '^l ' "$work/source.list")"
m tree_bytes "$(awk '$1 == "f" { s += $(NF - 2) } END { print s + 0 }' "$work/source.list")"
m pct_files "$n_pct"
m rounds "$rounds"
m seconds_since_last_cleanup "$since_cleanup"
m squash "$squash"
m fs "$(findmnt -no FSTYPE,OPTIONS -T "$work" | head -n 1)"
m loadavg_before "$(cut -d' ' -f1-3 /proc/loadavg)"
m kernel "$(uname -r)"
m cpu "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
m nproc "$(nproc)"
m mem_kib "$(awk '/^MemTotal/ { print $2 }' /proc/meminfo)"
m v_tar "$(tar --version | head -n 1)"
m v_zstd "$(zstd --version)"
m v_mksquashfs "$(mksquashfs -version 2>&1 | head -n 1)"
m v_airlock "$("$airlock" --version 2>/dev/null | head -n 1 || echo '?')"
m airlock "$airlock"
m git "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"

# ------------------------------------------------------------ timing
key=$work/checkpoint.key
# timed ROUND PHASE TOOL CMD...: syncs (untimed), runs CMD under /usr/bin/time,
# then times a `sync` of its own: what CMD left unwritten (tar and squashfs do
# not fsync; airlock does).
timed() {
	local r=$1 ph=$2 tool=$3 t0 t1
	shift 3
	sync
	bounded 400 /usr/bin/time -f '%e %U %S' -o "$work/time.out" "$@" || die "$tool ($ph, round $r) failed: $*"
	t0=$EPOCHREALTIME
	sync
	t1=$EPOCHREALTIME
	read -r wall usr sys <"$work/time.out"
	local syncs
	syncs=$(printf '%.4f' "$(echo "$t1 - $t0" | bc -l)")
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$ph" "$tool" "$wall" "$usr" "$sys" "$syncs" >>"$res"
	printf '  round %s %-8s %-9s %7.2f s  (cpu %6.2f s, sync after %.2f s)\n' "$r" "$ph" "$tool" "$wall" \
		"$(echo "$usr + $sys" | bc -l)" "$syncs" >&2
}
command -v bc >/dev/null || die "bc is missing"

ck() { "$airlock" checkpoint "$@" --store "$store" --key "$key"; }
# create ROUND PHASE: times one checkpoint of the tree into $store; sets $ck_id
create() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	timed "$1" "$2" airlock bash -c '"$1" checkpoint create --workspace "$2" --store "$3" --key "$4" >"$5" 2>"$6"' \
		_ "$airlock" "$tree" "$store" "$key" "$work/id.out" "$work/create-$1-$2.err"
	ck_id=$(cat "$work/id.out")
	[ -n "$ck_id" ] || die "airlock checkpoint create printed no id"
	m "airlock_summary_$1_$2" "$(tail -n 1 "$work/create-$1-$2.err")"
	m "airlock_store_bytes_$1_$2" "$(du -sb "$store" | cut -f1)"
}
tar_c() { timed "$1" "$2" tar tar -C "$tree" --zstd -cf "$3" .; }
sq_c() { timed "$1" "$2" squashfs mksquashfs "$tree" "$3" -comp zstd -noappend -quiet -no-progress; }
squash_now() { # ROUND PHASE: is this mksquashfs build timed?
	[ "$squash" = all ] || { [ "$squash" = first ] && [ "$1" = 1 ] && [ "$2" = first ]; }
}

# Warm-up, untimed: the tree into the page cache, each tool once.
note "warm-up (untimed)"
store=$work/warm-store
bounded 300 tar -C "$tree" --zstd -cf "$work/warm.tar.zst" . || die "tar (warm-up)"
bounded 300 "$airlock" checkpoint create --workspace "$tree" --store "$store" --key "$key" >/dev/null 2>&1 ||
	die "airlock checkpoint create (warm-up)"
m tar_zst_bytes "$(stat -c %s "$work/warm.tar.zst")"
m airlock_store_bytes_warm "$(du -sb "$store" | cut -f1)"
rm -rf "$store" "$work/warm.tar.zst"
# mksquashfs is not warmed up: one build takes 1-2 minutes; the tree is
# already in the page cache.

tools=(airlock tar squashfs)
sq_img=
declare -A ids=()
for r in $(seq "$rounds"); do
	note "round $r/$rounds ($(left) s of budget left)"
	d=$work/r$r
	mkdir -p "$d"
	store=$d/store
	order=()
	for i in 0 1 2; do order+=("${tools[$(((i + r - 1) % 3))]}"); done
	for ph in first one pct; do
		case $ph in
		one) bounded 60 "$py" "$gen" change "$tree" "r$r-one" 1 "$journal" ;;
		pct) bounded 60 "$py" "$gen" change "$tree" "r$r-pct" "$n_pct" "$journal" ;;
		esac
		for t in "${order[@]}"; do
			case $t in
			airlock)
				create "$r" "$ph"
				ids[$ph]=$ck_id
				;;
			tar)
				tar_c "$r" "$ph" "$d/$ph.tar.zst"
				[ "$ph" = first ] || rm -f "$d/$ph.tar.zst"
				;;
			squashfs)
				if squash_now "$r" "$ph"; then
					sq_c "$r" "$ph" "$d/$ph.sqfs"
					if [ "$ph" = first ]; then
						m squashfs_bytes "$(stat -c %s "$d/$ph.sqfs")"
						sq_img=$d/$ph.sqfs
					else
						rm -f "$d/$ph.sqfs"
					fi
				fi
				;;
			esac
		done
	done
	# diff between the first and the 1%-changed checkpoint
	# shellcheck disable=SC2016 # expanded by the inner bash
	timed "$r" diff airlock bash -c '"$1" checkpoint diff "$2" "$3" --store "$4" --key "$5" >"$6"' \
		_ "$airlock" "${ids[first]}" "${ids[pct]}" "$store" "$key" "$work/diff.out"
	m "airlock_diff_bytes_$r" "$(stat -c %s "$work/diff.out")"
	ck diff "${ids[first]}" "${ids[pct]}" --names-only >"$work/names.out" || die "airlock checkpoint diff --names-only"
	# every changed file, and nothing else, is in the diff
	cut -d' ' -f4- "$journal" | sort -u >"$work/changed.list"
	sed -E 's/^[AMD] //' "$work/names.out" | sort -u >"$work/diffnames.list"
	if ! cmp -s "$work/changed.list" "$work/diffnames.list"; then
		note "diff --names-only (first lines):"
		head -n 5 "$work/names.out" >&2
		die "round $r: diff --names-only lists $(wc -l <"$work/diffnames.list") paths; $(wc -l <"$work/changed.list") files were changed"
	fi
	m "diff_names_$r" "$(wc -l <"$work/names.out")"
	# the tree back to its first state; the restores below restore that state
	bounded 60 "$py" "$gen" revert "$tree" "$journal"
	for t in "${order[@]}"; do
		case $t in
		airlock) timed "$r" restore airlock "$airlock" checkpoint restore "${ids[first]}" --to "$d/restore-airlock" \
			--store "$store" --key "$key" ;;
		tar)
			mkdir "$d/restore-tar"
			timed "$r" restore tar tar -C "$d/restore-tar" -xf "$d/first.tar.zst"
			;;
		squashfs)
			[ -n "$sq_img" ] || continue
			timed "$r" restore squashfs unsquashfs -q -n -d "$d/restore-squashfs" "$sq_img" >/dev/null
			;;
		esac
	done
	# restores equal the source (every round for airlock, round 1 for the others)
	for t in "${order[@]}"; do
		[ -d "$d/restore-$t" ] || continue
		[ "$t" = airlock ] || [ "$r" = 1 ] || continue
		resol=ns
		[ "$t" = airlock ] || resol=s # GNU tar's default format and squashfs keep whole seconds
		bounded 300 "$py" "$gen" listing "$d/restore-$t" ns >"$work/restored.list" || die "listing $d/restore-$t"
		if ! "$py" "$gen" compare "$work/source.list" "$work/restored.list" "$resol"; then
			die "round $r: the $t restore differs from the source"
		fi
		note "round $r: the $t restore equals the source (paths, modes, sizes, mtimes to the ${resol}, SHA-256 of every file)"
		m "verified_$t" "${resol}"
	done
	# Layered (docs/checkpoints.md): the verified restore of the first
	# checkpoint is the lower layer of an overlay, as a session's sandbox
	# has it; the same changes go through the overlay, and each checkpoint
	# reads only the upper layer.
	lay=$d/layer
	mkdir -p "$lay/upper" "$lay/work" "$lay/merged"
	mount -t overlay overlay -o "lowerdir=$d/restore-airlock,upperdir=$lay/upper,workdir=$lay/work,redirect_dir=off,metacopy=off,index=off" \
		"$lay/merged" || die "cannot mount the overlay for the layered phases"
	mounted=$lay/merged
	declare -A lids=()
	for ph in one pct; do
		n=1
		[ "$ph" = one ] || n=$n_pct
		bounded 60 "$py" "$gen" change "$lay/merged" "r$r-$ph" "$n" "$lay/journal"
		# shellcheck disable=SC2016 # expanded by the inner bash
		timed "$r" "l$ph" airlock bash -c '"$1" checkpoint create --upper "$2" --lower "$3" --store "$4" --key "$5" >"$6" 2>"$7"' \
			_ "$airlock" "$lay/upper" "${ids[first]}" "$store" "$key" "$work/id.out" "$work/lcreate-$r-$ph.err"
		lids[$ph]=$(cat "$work/id.out")
		[ -n "${lids[$ph]}" ] || die "airlock checkpoint create --upper printed no id"
		m "airlock_summary_${r}_l$ph" "$(tail -n 1 "$work/lcreate-$r-$ph.err")"
	done
	# the layered checkpoint differs from the first by exactly the changed files
	ck diff "${ids[first]}" "${lids[pct]}" --names-only >"$work/lnames.out" || die "airlock checkpoint diff (layered)"
	cut -d' ' -f4- "$lay/journal" | sort -u >"$work/lchanged.list"
	sed -E 's/^[AMD] //' "$work/lnames.out" | sort -u >"$work/ldiffnames.list"
	cmp -s "$work/lchanged.list" "$work/ldiffnames.list" ||
		die "round $r: the layered checkpoint's diff lists $(wc -l <"$work/ldiffnames.list") paths; $(wc -l <"$work/lchanged.list") files were changed"
	grep -qv '^M ' "$work/lnames.out" && die "round $r: the layered diff has more than changed files"
	umount "$lay/merged" || die "cannot unmount $lay/merged"
	mounted=
	rm -f "$d/first.tar.zst"
done

# The tree is back as it was: check.
bounded 300 "$py" "$gen" listing "$tree" ns >"$work/after.list" || die "listing $tree"
"$py" "$gen" compare "$work/source.list" "$work/after.list" ns || die "the tree was not put back as it was"

m loadavg_after "$(cut -d' ' -f1-3 /proc/loadavg)"
m seconds "$((SECONDS - start))"
mkdir -p "$(dirname "$out_json")"
"$py" "$root/bench/checkpoint/report.py" "$res" "$meta" "$out_json" || die "report.py failed"
note "wrote $out_json ($((SECONDS - start)) s before clean-up)"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Sandbox start-up benchmark: airlock against bubblewrap, crun and a bare
# exec, interleaved run by run. See bench/README.md.
#
# Usage: bench/run.sh [AIRLOCK_BINARY]     (or $AIRLOCK; default build/src/cli/airlock)
# Environment: BENCH_RUNS (default 200), BENCH_RCU_RUNS (default 100),
#              BENCH_COUNT_RUNS (default 5: starts counted under strace -f),
#              BENCH_CRUN=0 to leave crun out,
#              BENCH_BEFORE=AIRLOCK_BINARY: another build (its helpers beside it or
#              installed with it) measured in the same runs, as airlock-before*,
#              BENCH_TAG=T: write sandbox-<date>-T.json (another run the same day).
# Needs root. Writes bench/results/sandbox-<date>.json. Exits non-zero when a
# step fails; never on speed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
airlock=${1:-${AIRLOCK:-$root/build/src/cli/airlock}}
runs=${BENCH_RUNS:-200}
rcu_runs=${BENCH_RCU_RUNS:-100}
want_crun=${BENCH_CRUN:-1}
before=${BENCH_BEFORE:-}
budget=570 # seconds for the whole script; each step gets what is left
crun_uid_base=100000000
start=$SECONDS

die() {
	echo "bench: error: $*" >&2
	exit 1
}
note() { echo "bench: $*" >&2; }

case $runs$rcu_runs${BENCH_COUNT_RUNS:-5} in *[!0-9]*) die "BENCH_RUNS, BENCH_RCU_RUNS and BENCH_COUNT_RUNS want numbers" ;; esac
case ${BENCH_TAG:-} in *[!A-Za-z0-9_-]*) die "BENCH_TAG wants letters, digits, - and _" ;; esac
[ "$(id -u)" -eq 0 ] || die "needs root (sandboxes, cgroups, /sys/kernel/rcu_expedited)"
case $airlock in /*) ;; *) airlock=$PWD/$airlock ;; esac
[ -x "$airlock" ] || die "no airlock binary at $airlock (build it, or pass its path as \$1)"
if [ -n "$before" ]; then
	case $before in /*) ;; *) before=$PWD/$before ;; esac
	[ -x "$before" ] || die "BENCH_BEFORE: no airlock binary at $before"
fi
py=/usr/bin/python3
[ -x $py ] || py=$(command -v python3) || die "python3 is missing"
for t in bwrap cc; do
	command -v $t >/dev/null || die "$t is missing (scripts/deps.sh --bench installs it)"
done

work=$(mktemp -d /tmp/airlock-bench.XXXXXX)
export AIRLOCK_STATE_DIR=$work/state
# Our own cgroup parent: everything below it is ours to clean up, and
# `airlock sandbox gc` never looks at other users' sandboxes' cgroups.
export AIRLOCK_CGROUP_PARENT=airlock-bench-$$
shm_state=
warm_id=
warm_before_id=
rcu_saved=
crun_root=$work/crun-root
crun_prefix=airlock-bench-$$-

step_pid=
# When `airlock sandbox destroy` fails: SIGKILL the sandbox's keeper (the
# host-side process `sandbox create` left, named in the state file, checked to
# be our airlock binary) and every process in its cgroup (below our own
# cgroup parent, so ours); `sandbox gc` then removes the rest.
kill_sandbox() {
	local sd=$1 id=$2 keeper exe
	echo "bench: WARNING: airlock sandbox destroy $id failed; killing its processes" >&2
	keeper=$(sed -n 's/^keeper=\([0-9]*\)$/\1/p' "$sd/$id/state" 2>/dev/null)
	if [ -n "$keeper" ]; then
		exe=$(readlink "/proc/$keeper/exe" 2>/dev/null || true)
		if [ "$exe" = "$(readlink -f "$airlock")" ] ||
			{ [ -n "$before" ] && [ "$exe" = "$(readlink -f "$before")" ]; }; then
			kill -KILL "$keeper" 2>/dev/null || true
		fi
	fi
	kill_cgroup_tasks "$id"
}
# SIGKILLs the processes in our sandboxes' cgroups (all of them, or one id's).
kill_cgroup_tasks() {
	local f pid
	for f in /sys/fs/cgroup/pids/"$AIRLOCK_CGROUP_PARENT"/${1:-*}/cgroup.procs \
		/sys/fs/cgroup/unified/"$AIRLOCK_CGROUP_PARENT"/${1:-*}/cgroup.procs \
		/sys/fs/cgroup/"$AIRLOCK_CGROUP_PARENT"/${1:-*}/cgroup.procs; do
		[ -f "$f" ] || continue
		for pid in $(cat "$f" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
	done
	sleep 0.2
}
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	# An interrupted step: let it finish its current run and reap it.
	if [ -n "$step_pid" ]; then
		kill -TERM "$step_pid" 2>/dev/null || true
		wait "$step_pid" 2>/dev/null || true
	fi
	if [ -n "$rcu_saved" ]; then
		echo "$rcu_saved" >/sys/kernel/rcu_expedited 2>/dev/null ||
			echo "bench: WARNING: could not restore /sys/kernel/rcu_expedited to $rcu_saved" >&2
	fi
	# Anything a failed step left: airlock sandboxes, crun containers, cgroups.
	local sd id
	for sd in "$AIRLOCK_STATE_DIR" "$shm_state"; do
		[ -n "$sd" ] && [ -d "$sd" ] || continue
		for id in $(AIRLOCK_STATE_DIR=$sd timeout 10 "$airlock" sandbox list 2>/dev/null |
			awk 'NR > 1 { print $1 }'); do
			AIRLOCK_STATE_DIR=$sd timeout 15 "$airlock" sandbox destroy "$id" >/dev/null 2>&1 ||
				kill_sandbox "$sd" "$id"
		done
		AIRLOCK_STATE_DIR=$sd timeout 20 "$airlock" sandbox gc >/dev/null 2>&1 || true
	done
	kill_cgroup_tasks
	for d in /sys/fs/cgroup/*/"$AIRLOCK_CGROUP_PARENT"/* /sys/fs/cgroup/*/"$AIRLOCK_CGROUP_PARENT"; do
		[ ! -d "$d" ] || rmdir "$d" 2>/dev/null || true
	done
	if [ -n "$shm_state" ] && ! grep -q " $shm_state" /proc/self/mountinfo; then
		rm -rf "$shm_state"
	fi
	if [ -d "$crun_root" ] && command -v crun >/dev/null; then
		local c
		for c in $(crun --root "$crun_root" list -q 2>/dev/null); do
			crun --root "$crun_root" delete -f "$c" >/dev/null 2>&1 || true
		done
	fi
	local d
	for d in /sys/fs/cgroup/*/"$crun_prefix"*; do
		[ ! -d "$d" ] || rmdir "$d" 2>/dev/null || true
	done
	if grep -q " $work" /proc/self/mountinfo; then
		echo "bench: WARNING: mounts left under $work; not removing it" >&2
	else
		rm -rf "$work"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'echo "bench: interrupted" >&2; exit 130' INT TERM HUP

# Runs a step under `timeout` with what is left of the budget (at most $1 s).
# In the background, so that a signal runs the cleanup trap at once (bash
# runs traps only once a foreground command ends; `wait` is interrupted).
step() {
	local cap=$1
	shift
	local left=$((budget - (SECONDS - start)))
	[ "$left" -gt 5 ] || die "out of time budget ($budget s) before: $*"
	[ "$cap" -le "$left" ] || cap=$left
	local rc=0
	timeout --kill-after=5 "$cap" "$@" &
	step_pid=$!
	wait "$step_pid" || rc=$?
	step_pid=
	return $rc
}

errors=()

# ------------------------------------------------------------ the machine
cgroup_mode() {
	case $(stat -fc %T /sys/fs/cgroup 2>/dev/null) in
	cgroup2fs) echo "v2 (unified)" ;;
	tmpfs)
		if [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
			echo "v1 hybrid (cgroup2 at /sys/fs/cgroup/unified)"
		else
			echo "v1 (legacy)"
		fi
		;;
	*) echo unknown ;;
	esac
}
cg_mode=$(cgroup_mode)
# The filesystem under the state directory, with its mount options (discard!).
state_fs=$(findmnt -n -o FSTYPE,OPTIONS --target "$work" 2>/dev/null | tr -s ' ' || echo "?")
loadavg_before=$(cut -d' ' -f1-4 /proc/loadavg)
note "$("$airlock" version 2>/dev/null || echo 'airlock ?') at $airlock; $(nproc) CPUs, kernel $(uname -r), cgroup $cg_mode, load $loadavg_before"

cc -O2 -Wall -D_GNU_SOURCE -I"$root/src" -o "$work/sbxbench" "$root/bench/sbxbench.c" \
	"$root/src/common/parse.c" "$root/src/common/error.c" || die "cannot compile bench/sbxbench.c"
sbx=$work/sbxbench

# ------------------------------------------------------------ the contenders
mkdir -p "$work/bwrap-ws" "$work/crun-ws" "$AIRLOCK_STATE_DIR"
bwrap_cmd=(bwrap --unshare-all --die-with-parent)
for d in usr etc opt var/lib/dpkg var/lib/apt; do
	if [ -d "/$d" ] && [ ! -L "/$d" ]; then
		bwrap_cmd+=(--ro-bind "/$d" "/$d")
	fi
done
for d in bin sbin lib lib32 lib64 libx32; do
	if [ -L "/$d" ]; then
		bwrap_cmd+=(--symlink "$(readlink "/$d")" "/$d")
	elif [ -d "/$d" ]; then
		bwrap_cmd+=(--ro-bind "/$d" "/$d")
	fi
done
bwrap_cmd+=(--tmpfs /tmp --proc /proc --dev /dev --bind "$work/bwrap-ws" /workspace --chdir /workspace)
bwrap_cmd+=(/bin/true)

airlock_cmd=("$airlock" sandbox run -- /bin/true)
# With a network: the gateway process started, handed its options, attached.
# (No traffic: what its start costs. bwrap has no counterpart.)
net_cmd=("$airlock" sandbox run --allow example.test -- /bin/true)
tools=(--tool bare /bin/true --tool airlock "${airlock_cmd[@]}" --tool bwrap "${bwrap_cmd[@]}"
	--tool airlock-net "${net_cmd[@]}")
before_cmd=()
before_net_cmd=()
if [ -n "$before" ]; then
	before_cmd=("$before" sandbox run -- /bin/true)
	before_net_cmd=("$before" sandbox run --allow example.test -- /bin/true)
	tools+=(--tool airlock-before "${before_cmd[@]}" --tool airlock-before-net "${before_net_cmd[@]}")
fi
# airlock again with its state (overlay upper/work dirs, the root skeleton,
# the fresh workspace) on tmpfs, as bwrap's root is: shows what the state
# directory's filesystem costs (see README: ext4 mounted with discard).
if [ "$(stat -fc %T /dev/shm 2>/dev/null)" = tmpfs ]; then
	shm_state=$(mktemp -d /dev/shm/airlock-bench.XXXXXX)
	tools+=(--tool airlock-tmpfs "AIRLOCK_STATE_DIR=$shm_state" "${airlock_cmd[@]}")
fi

crun_status="not run"
crun_cmd=()
if [ "$want_crun" = 0 ]; then
	crun_status="left out (BENCH_CRUN=0)"
elif ! command -v crun >/dev/null; then
	crun_status="crun is not installed"
else
	$py "$root/bench/report.py" bundle "$work/bundle" "$crun_uid_base" "$work/crun-ws" ||
		die "cannot write the crun bundle"
	crun_cmd=(crun --root "$crun_root" run --bundle "$work/bundle" "${crun_prefix}{n}")
	# One untimed try; on a hybrid host the driver hides /sys/fs/cgroup/unified.
	if out=$(step 30 "$sbx" run -n 1 -w 0 -o /dev/null -e /dev/stderr \
		--tool-hidecg2 crun "${crun_cmd[@]}" 2>&1); then
		crun_status="ok"
		tools+=(--tool-hidecg2 crun "${crun_cmd[@]}")
	else
		crun_status="crun failed here: $(echo "$out" | tail -n 3 | tr '\n' ' ')"
		errors+=("crun left out: $crun_status")
		note "$crun_status"
	fi
fi

# Every contender once, untimed, so a broken one fails with its own message.
out=$(step 60 "$sbx" run -n 1 -w 0 -o /dev/null -e /dev/stderr "${tools[@]}" 2>&1) ||
	die "a contender does not run: $out"

# ------------------------------------------------------------ 1. cold start
note "cold start: $runs interleaved rounds of bare, airlock, bwrap, airlock with a network$([ -z "$before" ] || echo ', the build before (both)')$([ -z "$shm_state" ] || echo ', airlock (state on tmpfs)')$([ ${#crun_cmd[@]} -eq 0 ] || echo ', crun')"
step 300 "$sbx" run -n "$runs" -w 5 -t 30 -o "$work/cold.tsv" -e "$work/cold.err" "${tools[@]}" ||
	die "cold-start run failed: $(tail -n 5 "$work/cold.err" 2>/dev/null | tr '\n' ' ')"

# ------------------------------------------------------------ 2. warm exec
note "warm: $runs x airlock sandbox exec in one sandbox$([ -z "$before" ] || echo ' (and the build before in one of its own)')"
warm_tools=()
if [ -n "$before" ]; then
	if warm_before_id=$(step 30 "$before" sandbox create 2>"$work/warm.err") && [ -n "$warm_before_id" ]; then
		warm_tools=(--tool airlock-before-exec "$before" sandbox exec "$warm_before_id" -- /bin/true)
	else
		warm_before_id=
		errors+=("warm: the build before: sandbox create failed: $(tail -n 2 "$work/warm.err" | tr '\n' ' ')")
	fi
fi
if warm_id=$(step 30 "$airlock" sandbox create 2>"$work/warm.err") && [ -n "$warm_id" ]; then
	if ! step 180 "$sbx" run -n "$runs" -w 5 -t 30 -o "$work/warm.tsv" -e "$work/warm.err" \
		--tool bare /bin/true --tool airlock-exec "$airlock" sandbox exec "$warm_id" -- /bin/true \
		"${warm_tools[@]}"; then
		errors+=("warm: airlock sandbox exec failed: $(tail -n 2 "$work/warm.err" | tr '\n' ' ')")
		rm -f "$work/warm.tsv"
	fi
	if step 15 "$airlock" sandbox destroy "$warm_id" >/dev/null 2>>"$work/warm.err"; then
		warm_id=
	else
		errors+=("warm: airlock sandbox destroy $warm_id failed or hung (15 s); killed it instead")
		kill_sandbox "$AIRLOCK_STATE_DIR" "$warm_id"
		warm_id=
		step 20 "$airlock" sandbox gc >/dev/null 2>&1 || true
	fi
else
	warm_id=
	errors+=("warm: airlock sandbox create failed: $(tail -n 2 "$work/warm.err" | tr '\n' ' ')")
fi
if [ -n "$warm_before_id" ]; then
	step 15 "$before" sandbox destroy "$warm_before_id" >/dev/null 2>>"$work/warm.err" ||
		{ errors+=("warm: destroy $warm_before_id (the build before) failed"); kill_sandbox "$AIRLOCK_STATE_DIR" "$warm_before_id"; }
	warm_before_id=
fi

# ------------------------------------------------------------ 3. system calls and processes
# Machine-independent cost: every system call and every process (task) of one
# start, counted with strace -f. For `exec` the keeper's side (the helpers it
# forks) is counted too: strace attaches to the keeper for the exec's length.
# crun runs in a private mount namespace where an empty tmpfs covers a hybrid
# host's cgroup2 mount, as in the timed runs (the unshare itself is not counted).
count_runs=${BENCH_COUNT_RUNS:-5}
if command -v strace >/dev/null; then
	note "system calls and processes per start: $count_runs runs of each under strace -f"
	for i in $(seq 1 "$count_runs"); do
		step 30 strace -f -qq -o "$work/sc.airlock.$i" "${airlock_cmd[@]}" ||
			errors+=("strace -f of airlock sandbox run failed (run $i)")
		step 30 strace -f -qq -o "$work/sc.airlock-net.$i" "${net_cmd[@]}" ||
			errors+=("strace -f of airlock sandbox run --allow failed (run $i)")
		if [ -n "$before" ]; then
			step 30 strace -f -qq -o "$work/sc.airlock-before.$i" "${before_cmd[@]}" ||
				errors+=("strace -f of the build before's sandbox run failed (run $i)")
			step 30 strace -f -qq -o "$work/sc.airlock-before-net.$i" "${before_net_cmd[@]}" ||
				errors+=("strace -f of the build before's sandbox run --allow failed (run $i)")
		fi
		step 30 strace -f -qq -o "$work/sc.bwrap.$i" "${bwrap_cmd[@]}" ||
			errors+=("strace -f of bwrap failed (run $i)")
		if [ ${#crun_cmd[@]} -gt 0 ]; then
			crun_one=("${crun_cmd[@]}")
			crun_one[${#crun_one[@]}-1]=${crun_prefix}count-$i
			step 30 unshare --mount --propagation private -- sh -c \
				'if [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
					mount -t tmpfs -o size=64m,mode=755 sbxbench-hide-cgroup2 /sys/fs/cgroup/unified || exit 1
				fi
				exec strace -f -qq -o "$0" "$@"' "$work/sc.crun.$i" "${crun_one[@]}" >/dev/null ||
				errors+=("strace -f of crun failed (run $i)")
		fi
	done
	# count_exec BINARY LABEL: a sandbox made by BINARY, then exec's counted
	# with its keeper's side as sc.LABEL.N and sc.LABEL-keeper.N.
	count_exec() {
		local bin=$1 label=$2 count_id keeper tracer i
		if count_id=$(step 30 "$bin" sandbox create 2>"$work/count.err") && [ -n "$count_id" ]; then
			keeper=$(sed -n 's/^keeper=\([0-9]*\)$/\1/p' "$AIRLOCK_STATE_DIR/$count_id/state")
			"$bin" sandbox exec "$count_id" -- /bin/true || errors+=("exec for the count failed ($label)")
			for i in $(seq 1 "$count_runs"); do
				strace -f -qq -o "$work/sc.$label-keeper.$i" -p "$keeper" &
				tracer=$!
				# Until strace is attached (bounded), then the exec itself.
				for _ in $(seq 1 500); do
					[ "$(awk '/^TracerPid:/ { print $2 }' "/proc/$keeper/status" 2>/dev/null)" = 0 ] || break
					sleep 0.01
				done
				step 30 strace -f -qq -o "$work/sc.$label.$i" "$bin" sandbox exec "$count_id" -- /bin/true ||
					errors+=("strace -f of sandbox exec failed ($label, run $i)")
				# The helpers are gone once the client has its status; then detach.
				kill -INT "$tracer" 2>/dev/null || true
				wait "$tracer" 2>/dev/null || true
			done
			step 15 "$bin" sandbox destroy "$count_id" >/dev/null 2>>"$work/count.err" ||
				{ errors+=("count: destroy $count_id failed ($label)"); kill_sandbox "$AIRLOCK_STATE_DIR" "$count_id"; }
		else
			errors+=("count: sandbox create failed ($label): $(tail -n 2 "$work/count.err" | tr '\n' ' ')")
		fi
	}
	count_exec "$airlock" airlock-exec
	[ -z "$before" ] || count_exec "$before" airlock-before-exec
else
	errors+=("strace is not installed: no system call or process counts")
fi

# ------------------------------------------------------------ 4. cgroup v1 attach
cg_v1_memory=
if [ "$(stat -fc %T /sys/fs/cgroup/memory 2>/dev/null)" = cgroupfs ]; then
	cg_v1_memory=/sys/fs/cgroup/memory
fi
if command -v strace >/dev/null; then
	note "cgroup attach: airlock under strace -f -T -y -e trace=write, 5 runs"
	for i in 1 2 3 4 5; do
		sleep 0.3 # idle, as between two sandboxes in real use
		step 30 strace -f -T -y -e trace=write -o "$work/strace-cg.$i" "${airlock_cmd[@]}" ||
			errors+=("strace run $i of airlock failed")
	done
else
	errors+=("strace is not installed: no per-syscall cgroup attach figure")
fi
if [ -n "$cg_v1_memory" ]; then
	note "cgroup attach: direct timing of writes to a v1 memory cgroup's cgroup.procs"
	step 30 "$sbx" cgattach -n 20 -i 200 "$cg_v1_memory" >"$work/cgattach.txt" ||
		errors+=("direct cgroup attach timing failed")
fi

# ------------------------------------------------------------ 5. rcu_expedited
rcu_note=
if [ -w /sys/kernel/rcu_expedited ] && [ "$cg_v1_memory" ]; then
	rcu_saved=$(cat /sys/kernel/rcu_expedited)
	if echo 1 >/sys/kernel/rcu_expedited 2>/dev/null; then
		note "rcu_expedited=1 (was $rcu_saved): $rcu_runs interleaved cold runs"
		step 150 "$sbx" run -n "$rcu_runs" -w 5 -t 30 -o "$work/cold-rcu.tsv" -e "$work/cold-rcu.err" \
			"${tools[@]}" || errors+=("cold run with rcu_expedited=1 failed")
		step 30 "$sbx" cgattach -n 20 -i 200 "$cg_v1_memory" >"$work/cgattach-rcu.txt" ||
			errors+=("direct cgroup attach timing with rcu_expedited=1 failed")
	else
		rcu_note="cannot write /sys/kernel/rcu_expedited"
	fi
	echo "$rcu_saved" >/sys/kernel/rcu_expedited || die "could not restore /sys/kernel/rcu_expedited to $rcu_saved"
	rcu_previous=$rcu_saved
	rcu_saved=
else
	rcu_previous=$(cat /sys/kernel/rcu_expedited 2>/dev/null || echo "?")
	rcu_note="skipped: /sys/kernel/rcu_expedited not writable or no cgroup v1"
fi

# ------------------------------------------------------------ report
loadavg_after=$(cut -d' ' -f1-4 /proc/loadavg)
date_iso=$(date -u +%Y-%m-%dT%H:%M:%SZ)
results=$root/bench/results
mkdir -p "$results"
out_json=$results/sandbox-$(date -u +%Y-%m-%d)${BENCH_TAG:+-$BENCH_TAG}.json
printf '%s\n' "${errors[@]}" >"$work/errors.txt"
export date_iso cg_mode state_fs loadavg_before loadavg_after crun_status rcu_previous rcu_note runs rcu_runs
export airlock_path=$airlock before_path=$before
airlock_version=$("$airlock" version 2>/dev/null || echo "?")
git_rev=$(git -C "$root" describe --always --dirty 2>/dev/null || echo "?")
bwrap_version=$(bwrap --version 2>/dev/null || echo "?")
crun_version=$(crun --version 2>/dev/null | head -n 1 || echo "?")
cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //' || echo "?")
export airlock_version git_rev bwrap_version crun_version cpu_model
# The exact command lines, NUL-separated, one file per tool.
printf '%s\0' "${airlock_cmd[@]}" >"$work/cmd.airlock"
printf '%s\0' "${net_cmd[@]}" >"$work/cmd.airlock-net"
[ ${#before_cmd[@]} -eq 0 ] || printf '%s\0' "${before_cmd[@]}" >"$work/cmd.airlock-before"
[ ${#before_net_cmd[@]} -eq 0 ] || printf '%s\0' "${before_net_cmd[@]}" >"$work/cmd.airlock-before-net"
printf '%s\0' "${bwrap_cmd[@]}" >"$work/cmd.bwrap"
[ ${#crun_cmd[@]} -eq 0 ] || printf '%s\0' "${crun_cmd[@]}" >"$work/cmd.crun"
[ ! -f "$work/bundle/config.json" ] || cp "$work/bundle/config.json" "$work/crun-config.json"
$py - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
e = os.environ
cmds = {}
for t in ("airlock", "airlock-net", "airlock-before", "airlock-before-net", "bwrap", "crun"):
    p = os.path.join(work, "cmd." + t)
    if os.path.exists(p):
        cmds[t] = [a for a in open(p).read().split("\0") if a]
cmds["bare"] = ["/bin/true"]
if "airlock" in cmds:
    cmds["airlock-tmpfs"] = ["AIRLOCK_STATE_DIR=/dev/shm/airlock-bench.XXXXXX"] + cmds["airlock"]
cmds["airlock-exec"] = [e["airlock_path"], "sandbox", "exec", "ID", "--", "/bin/true"]
if e.get("before_path"):
    cmds["airlock-before-exec"] = [e["before_path"], "sandbox", "exec", "ID", "--", "/bin/true"]
crun_cfg = None
p = os.path.join(work, "crun-config.json")
if os.path.exists(p):
    crun_cfg = json.load(open(p))
meta = {
    "benchmark": "sandbox start-up, /bin/true",
    "date": e["date_iso"],
    "machine": {
        "nproc": os.cpu_count(),
        "cpu": e["cpu_model"],
        "kernel": os.uname().release,
        "cgroup_mode": e["cg_mode"],
        "state_dir_fs": e["state_fs"],
        "loadavg_before": e["loadavg_before"],
        "loadavg_after": e["loadavg_after"],
    },
    "versions": {"airlock": e["airlock_version"], "git": e["git_rev"],
                 "bwrap": e["bwrap_version"], "crun": e["crun_version"]},
    "method": ("sbxbench (bench/sbxbench.c): fork+exec per run, wall time from before fork() "
               "until every process the run left has been reaped (child subreaper); tools "
               "interleaved round by round with a rotating first tool; 5 untimed warm-up "
               "rounds; percentiles are nearest-rank"),
    "runs": int(e["runs"]),
    "rcu_runs": int(e["rcu_runs"]),
    "commands": cmds,
    "crun": {"status": e["crun_status"],
             "note": "run inside a private mount namespace where an empty tmpfs covers "
                     "/sys/fs/cgroup/unified (crun refuses cgroup v1 hybrid hosts)",
             "config": crun_cfg},
    "rcu_expedited": {"previous": e["rcu_previous"], "note": e["rcu_note"]},
}
json.dump(meta, open(os.path.join(work, "meta.json"), "w"), indent=1)
EOF
$py "$root/bench/report.py" report "$work" "$out_json" || die "cannot write the report"
note "done in $((SECONDS - start)) s; load before $loadavg_before, after $loadavg_after"
if [ ${#errors[@]} -gt 0 ] && [ -n "${errors[0]}" ]; then
	for e in "${errors[@]}"; do
		case $e in "crun left out:"*) ;; *) die "some steps failed (see NOTE lines above); partial results in $out_json" ;; esac
	done
fi
exit 0

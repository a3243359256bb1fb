#!/usr/bin/env bash
# bench/overhead.sh [AIRLOCK]: what airlock adds around an agent's turn.
#
# A minimal agent (a shell script speaking Claude Code's stream-json, which
# stamps the time it starts and the time it prints its last line) runs one
# turn at a time through `airlock turn`, in a session whose workspace is a
# real source tree (this repository's, copied; BENCH_TREE=DIR for another).
# Per turn:
#   start: from `airlock turn` being started to the agent's first line
#          (the agent's own start, a fork and exec of /bin/sh, included)
#   end:   from the agent's last line to `airlock turn` exiting with the
#          turn's checkpoint committed
# for a warm turn (the session's sandbox kept) and a turn after a restore
# (the sandbox discarded first, so the turn restores the last checkpoint
# and starts a sandbox). Goal: each < 100 ms warm. Prints a table and
# writes bench/results/overhead-<date>.json. A measurement, never a test.
set -euo pipefail
AIRLOCK=${1:-${AIRLOCK:-build/src/cli/airlock}}
AIRLOCK=$(readlink -f "$AIRLOCK")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${BENCH_OVERHEAD_RUNS:-30}
[ "$(id -u)" -eq 0 ] || { echo "overhead: needs root" >&2; exit 1; }

work=$(mktemp -d /var/tmp/airlock-bench-overhead-XXXXXX)
export AIRLOCK_STATE_DIR=$work/sandboxes
cleanup() {
	for s in $("$AIRLOCK" session --config "$work/airlock.yaml" list 2>/dev/null | cut -d' ' -f1); do
		"$AIRLOCK" session --config "$work/airlock.yaml" rm "$s" >/dev/null 2>&1 || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
[ -n "${BENCH_KEEP:-}" ] && trap - EXIT

tree=${BENCH_TREE:-}
if [ -z "$tree" ]; then
	tree=$work/tree
	git -C "$ROOT" archive --format=tar HEAD | (mkdir -p "$tree" && tar -x -C "$tree")
fi
chown -R 1000:1000 "$tree"
files=$(find "$tree" -type f | wc -l)
bytes=$(du -sb "$tree" | cut -f1)

cat >"$work/airlock.yaml" <<YAML
state_dir: $work/state
agents:
  stamp:
    title: a minimal agent
    parser: claude
    session: choose
    first: [stamp-agent, "{session}", "{prompt}"]
    resume: [stamp-agent, "{session}", "{prompt}"]
    model_hosts: [{host: api.anthropic.com, secret: anthropic, header: x-api-key}]
presets:
  stamp:
    agent: stamp
    network: none
    limits: {memory: 512M}
    setup:
      commands:
        - |
          mkdir -p /opt/airlock/bin
          cat > /opt/airlock/bin/stamp-agent <<'EOF'
          #!/bin/sh
          printf '{"type":"assistant","session_id":"%s","message":{"content":[{"type":"text","text":"start %s"}]}}\n' "\$1" "\$(date +%s%N)"
          mkdir -p "\$HOME/.stamp" && echo "\$2" >> "\$HOME/.stamp/\$1"
          echo "\$2" >> /workspace/BENCH.txt
          printf '{"type":"assistant","session_id":"%s","message":{"content":[{"type":"text","text":"end %s"}]}}\n{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"%s","usage":{"input_tokens":1,"output_tokens":1}}\n' "\$1" "\$(date +%s%N)" "\$1"
          EOF
          chmod 755 /opt/airlock/bin/stamp-agent
YAML
al() { "$AIRLOCK" "$1" --config "$work/airlock.yaml" "${@:2}"; }

sid=$(al run --preset stamp --repo "$tree" --json "first" 2>/dev/null | sed -n 's/^{"session":"\(.*\)"}$/\1/p')
[ -n "$sid" ] || { echo "overhead: the first turn failed" >&2; exit 1; }

out=$work/samples.tsv
: >"$out"
one() { # KIND: one turn, its two overheads appended to $out
	local kind=$1 t0 t1
	t0=$(date +%s%N)
	al turn --json "$sid" "turn $kind" >"$work/turn.json" 2>/dev/null
	t1=$(date +%s%N)
	python3 - "$work/turn.json" "$t0" "$t1" "$kind" >>"$out" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
t0, t1, kind = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
texts = [l["data"]["text"] for l in lines if l.get("kind") == "text"]
res = [l["result"] for l in lines if "result" in l][-1]
assert res["state"] == "succeeded", res
start = int([t for t in texts if t.startswith("start ")][-1].split()[1])
end = int([t for t in texts if t.startswith("end ")][-1].split()[1])
print(f"{kind}\t{(start - t0) / 1e6:.2f}\t{(t1 - end) / 1e6:.2f}")
PY
}
for i in $(seq "$RUNS"); do
	one warm
	# Discard the sandbox: the next turn restores the last checkpoint.
	sbx=$(al session show --json "$sid" | head -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["sandbox"])')
	"$AIRLOCK" sandbox destroy "$sbx" >/dev/null
	one restored
done

python3 - "$out" "$files" "$bytes" "$ROOT/bench/results" <<'PY'
import json, statistics, sys, time, os
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
files, size, outdir = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
res = {"tree_files": files, "tree_bytes": size, "method": "bench/overhead.sh"}
print(f"turn overhead, workspace of {files} files / {size / 1e6:.0f} MB (ms; p50, p95, n)")
print(f"{'':10} {'start (to first byte)':>24} {'end (last byte to commit)':>28}")
for kind in ("warm", "restored"):
    s = sorted(float(r[1]) for r in rows if r[0] == kind)
    e = sorted(float(r[2]) for r in rows if r[0] == kind)
    p = lambda v, q: v[min(len(v) - 1, int(q * len(v)))]
    res[kind] = {"start_p50": statistics.median(s), "start_p95": p(s, .95),
                 "end_p50": statistics.median(e), "end_p95": p(e, .95), "n": len(s)}
    print(f"{kind:10} {statistics.median(s):12.1f} {p(s, .95):8.1f} {len(s):3} "
          f"{statistics.median(e):16.1f} {p(e, .95):8.1f} {len(e):3}")
os.makedirs(outdir, exist_ok=True)
path = os.path.join(outdir, f"overhead-{time.strftime('%Y-%m-%d')}.json")
json.dump(res, open(path, "w"), indent=1)
print(f"written: {path}")
PY

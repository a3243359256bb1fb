# SPDX-License-Identifier: Apache-2.0
"""Helpers of bench/run.sh (standard library only).

  report.py bundle DIR UID_BASE WORKSPACE
      Writes an OCI bundle (DIR/config.json, DIR/rootfs) for crun that matches
      what `airlock sandbox run` builds: the same host directories read-only
      (idmapped), /tmp tmpfs, /proc, a minimal /dev, /workspace bound to
      WORKSPACE, namespaces pid/net/ipc/uts/mount/user/cgroup, memory and pids
      limits equal to airlock's defaults; the process is /bin/true.

  report.py cgwrites STRACE_FILE...
      Prints, as JSON, the durations (ms) of the writes to cgroup.procs found
      in `strace -f -T -y` output, one list per file, in call order.

  report.py count STRACE_FILE...
      Prints, as JSON, the system calls and tasks in `strace -f` output.

  report.py report WORKDIR OUT_JSON
      Reads what run.sh left in WORKDIR (raw timings, meta.json, ...),
      prints the table and writes OUT_JSON.
"""
import json
import math
import os
import re
import sys

# What airlock puts in its root (src/sandbox/rootfs.c host_layers): system
# directories, and the merged-/usr symlinks as they are on the host.
HOST_DIRS = ["usr", "etc", "opt", "var/lib/dpkg", "var/lib/apt"]
HOST_LINKS = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"]
AIRLOCK_DEFAULT_MEMORY = 4 << 30
AIRLOCK_DEFAULT_PIDS = 4096


def die(msg):
    print(f"report.py: {msg}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------- bundle


def make_bundle(bundle, uid_base, workspace):
    uid_base = int(uid_base)
    rootfs = os.path.join(bundle, "rootfs")
    os.makedirs(rootfs, exist_ok=True)
    idmap = [{"containerID": 0, "hostID": uid_base, "size": 65536}]
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
    ]
    made = []
    for d in HOST_DIRS:
        host = "/" + d
        if os.path.isdir(host) and not os.path.islink(host):
            os.makedirs(os.path.join(rootfs, d), exist_ok=True)
            mounts.append({"destination": host, "type": "bind", "source": host,
                           "options": ["rbind", "ro", "nosuid", "nodev", "idmap"],
                           "uidMappings": idmap, "gidMappings": idmap})
    for d in HOST_LINKS:
        host = "/" + d
        if os.path.islink(host):
            link = os.path.join(rootfs, d)
            if not os.path.lexists(link):
                os.symlink(os.readlink(host), link)
            made.append(link)
    for d in ["tmp", "proc", "dev", "workspace", "var", "var/lib"]:
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
    mounts.append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                   "options": ["nosuid", "nodev", "mode=1777"]})
    mounts.append({"destination": "/workspace", "type": "bind", "source": workspace,
                   "options": ["rbind", "rw", "nosuid", "nodev"]})
    # The sandbox's root owns its "/" and its workspace, as with airlock.
    for dirpath, dirnames, filenames in os.walk(rootfs):
        os.lchown(dirpath, uid_base, uid_base)
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), uid_base, uid_base)
    os.lchown(workspace, uid_base, uid_base)
    caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
    config = {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/true"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/workspace",
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {
            "uidMappings": idmap,
            "gidMappings": idmap,
            "namespaces": [{"type": t} for t in
                           ("pid", "network", "ipc", "uts", "mount", "user", "cgroup")],
            "resources": {
                "devices": [{"allow": False, "access": "rwm"}],
                "memory": {"limit": AIRLOCK_DEFAULT_MEMORY},
                "pids": {"limit": AIRLOCK_DEFAULT_PIDS},
            },
            "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                            "/proc/timer_list", "/proc/sched_debug", "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                              "/proc/sysrq-trigger"],
        },
    }
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


# ---------------------------------------------------------------- strace

_CALL = re.compile(r"^(\d+)\s+(?:[\d:.]+\s+)?write\((\d+)<([^>]*)>,.*?(<unfinished \.\.\.>|= -?\d+.*<([\d.]+)>)\s*$")
_RESUMED = re.compile(r"^(\d+)\s+(?:[\d:.]+\s+)?<\.\.\. write resumed>.*<([\d.]+)>\s*$")


def cgroup_writes(path):
    """Durations (ms) of write(2)s to cgroup.procs in one strace -f -T -y log."""
    pending = {}
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = _CALL.match(line)
            if m:
                pid, _, target, tail, dur = m.groups()
                if not target.endswith("/cgroup.procs"):
                    continue
                if tail.startswith("<unfinished"):
                    pending[pid] = target
                else:
                    out.append({"file": target, "ms": float(dur) * 1e3})
                continue
            m = _RESUMED.match(line)
            if m and m.group(1) in pending:
                out.append({"file": pending.pop(m.group(1)), "ms": float(m.group(2)) * 1e3})
    return out


_LINE = re.compile(r"^(\d+)\s+(.*)$")


def count_trace(path, skip_first_pid=False):
    """System calls and tasks in one `strace -f -qq` log: each call once (the
    "<... resumed>" half of a split call is not counted again; signals and
    exits are not calls). skip_first_pid: the trace was attached to a
    process that existed before (a keeper): it is not a process of the start.
    Returns (calls, tasks, calls per task in order of appearance)."""
    per = {}
    order = []
    with open(path, errors="replace") as f:
        for line in f:
            m = _LINE.match(line)
            if not m:
                continue
            pid, rest = m.groups()
            if rest.startswith(("+++", "---", "<...")):
                if pid not in per:
                    per[pid] = 0
                    order.append(pid)
                continue
            if pid not in per:
                per[pid] = 0
                order.append(pid)
            per[pid] += 1
    tasks = len(order) - (1 if skip_first_pid and order else 0)
    return sum(per.values()), tasks, [per[p] for p in order]


def counts(work):
    """tool -> median system calls and tasks per start, from run.sh's
    sc.<tool>.<run> files (airlock-exec adds its keeper's side)."""
    runs = {}
    if not os.path.isdir(work):
        return {}
    for name in sorted(os.listdir(work)):
        m = re.match(r"^sc\.(.+)\.(\d+)$", name)
        if not m or m.group(1).endswith("-keeper"):
            continue
        tool, i = m.groups()
        calls, tasks, per = count_trace(os.path.join(work, name))
        keeper = os.path.join(work, f"sc.{tool}-keeper.{i}")
        if os.path.exists(keeper):
            kc, kt, kper = count_trace(keeper, skip_first_pid=True)
            calls, tasks, per = calls + kc, tasks + kt, per + kper
        runs.setdefault(tool, []).append({"syscalls": calls, "processes": tasks,
                                          "syscalls_per_process": per})
    out = {}
    for tool, rs in runs.items():
        out[tool] = {"runs": rs, "syscalls_p50": median([r["syscalls"] for r in rs]),
                     "processes_p50": median([r["processes"] for r in rs])}
    return out


# ---------------------------------------------------------------- report


def read_raw(path):
    """tool -> (wall ns list, cpu ns list, page fault list), from a sbxbench
    TSV (tool, round, wall ns, cpu ns, status[, page faults])."""
    data = {}
    order = []
    if not os.path.exists(path):
        return data, order
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) not in (5, 6):
                continue
            tool, _, ns, cpu, _ = parts[:5]
            if tool not in data:
                data[tool] = ([], [], [])
                order.append(tool)
            data[tool][0].append(int(ns))
            data[tool][1].append(int(cpu))
            if len(parts) == 6:
                data[tool][2].append(int(parts[5]))
    return data, order


def pct(sorted_vals, p):
    """Nearest-rank percentile."""
    k = max(1, math.ceil(p / 100.0 * len(sorted_vals)))
    return sorted_vals[k - 1]


def stats_ms(ns_list, cpu_list, fault_list=()):
    v = sorted(x / 1e6 for x in ns_list)
    c = sorted(x / 1e6 for x in cpu_list)
    return {
        "page_faults_p50": pct(sorted(fault_list), 50) if fault_list else None,
        "cpu_p50_ms": round(pct(c, 50), 3),
        "cpu_mean_ms": round(sum(c) / len(c), 3),
        "n": len(v),
        "p50_ms": round(pct(v, 50), 3),
        "p95_ms": round(pct(v, 95), 3),
        "mean_ms": round(sum(v) / len(v), 3),
        "min_ms": round(v[0], 3),
        "max_ms": round(v[-1], 3),
    }


def summarize(raw_path, ref="bwrap"):
    data, order = read_raw(raw_path)
    res = {t: stats_ms(*data[t]) for t in order}
    ref_p50 = res.get(ref, {}).get("p50_ms")
    for t in res:
        res[t]["ratio_to_bwrap_p50"] = round(res[t]["p50_ms"] / ref_p50, 2) if ref_p50 else None
    return res, order


def load_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None


def cgattach_stats(path):
    """sbxbench cgattach output (first back again, ns) -> p50/max in ms."""
    rows = []
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 3:
                rows.append([int(x) / 1e6 for x in p])
    if not rows:
        return None
    out = {"n": len(rows)}
    for i, name in enumerate(["first_after_idle", "move_back_to_parent", "again_at_once"]):
        col = sorted(r[i] for r in rows)
        out[name] = {"p50_ms": round(pct(col, 50), 3), "max_ms": round(col[-1], 3),
                     "min_ms": round(col[0], 3)}
    return out


def report(work, out_json):
    meta = load_json(os.path.join(work, "meta.json"), {})
    result = dict(meta)
    errors = list(meta.get("errors", []))
    for f in ("errors.txt",):
        p = os.path.join(work, f)
        if os.path.exists(p):
            with open(p) as fh:
                errors += [l.strip() for l in fh if l.strip()]
    result["errors"] = errors

    cold, cold_order = summarize(os.path.join(work, "cold.tsv"))
    result["cold"] = cold
    warm, warm_order = summarize(os.path.join(work, "warm.tsv"))
    result["warm"] = warm
    rcu, rcu_order = summarize(os.path.join(work, "cold-rcu.tsv"))
    result.setdefault("rcu_expedited", {})["cold"] = rcu

    straces = sorted(p for p in os.listdir(work) if p.startswith("strace-cg.")) \
        if os.path.isdir(work) else []
    writes = [cgroup_writes(os.path.join(work, p)) for p in straces]
    if writes:
        firsts = [w[0]["ms"] for w in writes if w]
        rest = [x["ms"] for w in writes for x in w[1:]]
        result["cgroup_attach"] = {
            "strace_runs": [[{"file": x["file"].split("/sys/fs/cgroup/")[-1], "ms": round(x["ms"], 3)}
                             for x in w] for w in writes],
            "strace_first_write_p50_ms": round(median(firsts), 3) if firsts else None,
            "strace_other_writes_p50_ms": round(median(rest), 3) if rest else None,
            "strace_sum_per_run_p50_ms": round(median([sum(x["ms"] for x in w) for w in writes]), 3),
        }
    ca = cgattach_stats(os.path.join(work, "cgattach.txt"))
    if ca:
        result.setdefault("cgroup_attach", {})["direct"] = ca
    result["counts"] = counts(work)
    ca = cgattach_stats(os.path.join(work, "cgattach-rcu.txt"))
    if ca:
        result.setdefault("rcu_expedited", {})["cgattach_direct"] = ca

    labels = {
        "bare": "bare /bin/true",
        "airlock": "airlock sandbox run",
        "airlock-tmpfs": "airlock run, state on tmpfs",
        "bwrap": "bwrap",
        "crun": "crun run",
        "airlock-exec": "airlock sandbox exec (warm)",
        "airlock-net": "airlock run --allow (gateway)",
        "airlock-before": "BEFORE: airlock sandbox run",
        "airlock-before-net": "BEFORE: airlock run --allow",
        "airlock-before-exec": "BEFORE: airlock sandbox exec",
    }
    rows = []

    preferred = ["bare", "bwrap", "airlock", "airlock-before", "airlock-tmpfs", "crun",
                 "airlock-net", "airlock-before-net", "airlock-exec", "airlock-before-exec"]

    def add(section, res, order, suffix=""):
        order = sorted(order, key=lambda t: preferred.index(t) if t in preferred else 99)
        for t in order:
            s = res[t]
            rows.append((section, labels.get(t, t) + suffix, s))

    add("cold", cold, cold_order)
    add("warm", warm, [t for t in warm_order if t != "bare"])
    add("rcu_expedited=1", rcu, rcu_order)
    print()
    print(f"{'section':<16} {'tool':<30} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8} "
          f"{'x bwrap p50':>12} {'CPU p50 ms':>11} {'faults p50':>11}")
    print("-" * 111)
    for section, name, s in rows:
        ratio = s.get("ratio_to_bwrap_p50")
        if section == "warm" and cold.get("bwrap"):
            ratio = round(s["p50_ms"] / cold["bwrap"]["p50_ms"], 2)
            s["ratio_to_bwrap_p50"] = ratio
        r = f"{ratio:.2f}" if ratio is not None else "-"
        pf = s.get("page_faults_p50")
        pf = str(pf) if pf is not None else "-"
        print(f"{section:<16} {name:<30} {s['p50_ms']:>8.2f} {s['p95_ms']:>8.2f} {s['mean_ms']:>8.2f} "
              f"{r:>12} {s['cpu_p50_ms']:>11.2f} {pf:>11}")
    print(f"(n = {cold.get('airlock', {}).get('n', '?')} interleaved runs per tool; "
          "warm ratios are against the cold run's bwrap p50; CPU = user+sys and faults =\n"
          " minor+major page faults of all the run's processes; for warm exec they leave out\n"
          " the sandbox's own keeper and what it forks)")
    cn = result.get("counts", {})
    if cn:
        print()
        ref = cn.get("bwrap", {}).get("syscalls_p50")
        print(f"{'per start (strace -f, p50)':<40} {'system calls':>12} {'x bwrap':>8} {'processes':>10}")
        for t in sorted(cn, key=lambda t: preferred.index(t) if t in preferred else 99):
            c = cn[t]
            r = f"{c['syscalls_p50'] / ref:.2f}" if ref else "-"
            print(f"{labels.get(t, t):<40} {c['syscalls_p50']:>12} {r:>8} {c['processes_p50']:>10}")
        print("(exec: the client and the keeper's side together; the keeper itself is not counted)")
    ca = result.get("cgroup_attach", {})
    if ca:
        print()
        if "strace_first_write_p50_ms" in ca:
            print(f"cgroup v1 attach (strace -T, airlock run, {len(writes)} runs): first write to "
                  f"cgroup.procs p50 {ca['strace_first_write_p50_ms']} ms, the others p50 "
                  f"{ca['strace_other_writes_p50_ms']} ms, all writes of a run p50 "
                  f"{ca['strace_sum_per_run_p50_ms']} ms")
        d = ca.get("direct")
        if d:
            print(f"cgroup v1 attach (direct, memory controller, after 200 ms idle, n={d['n']}): "
                  f"first p50 {d['first_after_idle']['p50_ms']} ms (max {d['first_after_idle']['max_ms']}), "
                  f"back-to-back p50 {d['again_at_once']['p50_ms']} ms")
    rd = result.get("rcu_expedited", {}).get("cgattach_direct")
    if rd:
        print(f"  with rcu_expedited=1: first p50 {rd['first_after_idle']['p50_ms']} ms, "
              f"back-to-back p50 {rd['again_at_once']['p50_ms']} ms")
    for e in errors:
        print(f"NOTE: {e}")

    tmp = out_json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(tmp, out_json)
    print(f"\nwrote {out_json}")


def main(argv):
    if len(argv) < 2:
        die(__doc__)
    cmd = argv[1]
    if cmd == "bundle" and len(argv) == 5:
        make_bundle(argv[2], argv[3], argv[4])
    elif cmd == "cgwrites" and len(argv) >= 3:
        print(json.dumps([cgroup_writes(p) for p in argv[2:]], indent=1))
    elif cmd == "count" and len(argv) >= 3:
        print(json.dumps({p: count_trace(p)[:2] for p in argv[2:]}, indent=1))
    elif cmd == "report" and len(argv) == 4:
        report(argv[2], argv[3])
    else:
        die(__doc__)


if __name__ == "__main__":
    main(sys.argv)

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-turn checkpoints of a real tree: the timer and the report (bench/turn.sh runs it).

  turn.py run WORK          the benchmark (settings in the environment, see turn.sh)
  turn.py revert TREE JOURNAL
                            undo the changes a run made to TREE (size and mtime back)
  turn.py sources OUT       a deb-src line for this machine's Debian mirror (read from
                            its apt configuration) into OUT

Each timed command runs as a child: wall time from just before the fork to
its reaping (time.perf_counter), CPU from RUSAGE_CHILDREN, then a `sync` of
its own timed apart (tar and git do not fsync; airlock does inside its time).
Only the standard library is used.
"""
import glob
import hashlib
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time

# ------------------------------------------------------------ helpers


def env(name, default=None):
    v = os.environ.get(name, "")
    return v if v else default


def note(msg):
    print(f"bench-turn: {msg}", file=sys.stderr, flush=True)


def die(msg):
    note(f"error: {msg}")
    sys.exit(1)


def run(cmd, **kw):
    """An untimed step that must succeed; its output."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if r.returncode != 0:
        die(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}")
    return r.stdout.decode(errors="replace")


def timed(cmd, envx=None):
    """Runs cmd; (wall s, cpu s, sync s after, stdout, stderr)."""
    subprocess.run(["sync"])
    e = None
    if envx:
        e = dict(os.environ)
        e.update(envx)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["sync"])
    t2 = time.perf_counter()
    if p.returncode != 0:
        die(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode(errors='replace')[-2000:]}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return t1 - t0, cpu, t2 - t1, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def regular_files(top):
    out = []
    for dp, dn, fn in os.walk(top):
        for n in fn:
            p = os.path.join(dp, n)
            if not os.path.islink(p):
                out.append(os.path.relpath(p, top))
    out.sort()
    return out


def tree_stats(top):
    files = dirs = links = size = 0
    for dp, dn, fn in os.walk(top):
        for n in dn:
            if os.path.islink(os.path.join(dp, n)):
                links += 1
            else:
                dirs += 1
        for n in fn:
            st = os.lstat(os.path.join(dp, n))
            if os.path.islink(os.path.join(dp, n)):
                links += 1
            else:
                files += 1
                size += st.st_size
    return {"files": files, "dirs": dirs, "symlinks": links, "bytes": size}


def change(tops, paths, tag, journal):
    """Appends a line to each path, in the tree and in every merged view;
    the tree's old size and mtime go to the journal first (fsynced)."""
    tree = tops[0]
    with open(journal, "a") as j:
        for p in paths:
            st = os.stat(os.path.join(tree, p))
            j.write(f"{st.st_size} {st.st_atime_ns} {st.st_mtime_ns} {p}\n")
        j.flush()
        os.fsync(j.fileno())
    for top in tops:
        for i, p in enumerate(paths):
            with open(os.path.join(top, p), "ab") as f:
                f.write(f"/* bench turn {tag} {i} */\n".encode())


def revert(top, journal):
    if not os.path.exists(journal):
        return
    with open(journal) as j:
        lines = j.read().splitlines()
    for line in reversed(lines):  # a file changed twice gets its oldest state back last
        size, at, mt, p = line.split(" ", 3)
        full = os.path.join(top, p)
        os.truncate(full, int(size))
        os.utime(full, ns=(int(at), int(mt)), follow_symlinks=False)
    os.unlink(journal)


def listing(top):
    """Sorted listing: types, modes, sizes, mtimes (ns), SHA-256 of files, link targets."""
    lines = []
    for dp, dn, fn in os.walk(top):
        for n in dn + fn:
            full = os.path.join(dp, n)
            rel = os.path.relpath(full, top)
            st = os.lstat(full)
            if os.path.islink(full):
                lines.append(f"l {rel} {os.readlink(full)}")
            elif os.path.isdir(full):
                lines.append(f"d {rel} {oct(st.st_mode & 0o777)} {st.st_mtime_ns}")
            else:
                h = hashlib.sha256()
                with open(full, "rb") as f:
                    for b in iter(lambda: f.read(1 << 20), b""):
                        h.update(b)
                lines.append(f"f {rel} {oct(st.st_mode & 0o777)} {st.st_size} {st.st_mtime_ns} "
                             f"{h.hexdigest()}")
    lines.sort()
    return lines


def compare(a, b, what):
    if a == b:
        return
    sa, sb = set(a), set(b)
    for x in sorted(sa - sb)[:5]:
        note(f"  - {x}")
    for x in sorted(sb - sa)[:5]:
        note(f"  + {x}")
    die(f"{what}: the listings differ ({len(sa - sb)} and {len(sb - sa)} lines)")


def sources(out):
    """deb-src for the Debian archive this machine installs from: its URI
    and keyring as its apt configuration names them (deb822 or one-line)."""
    codename = ""
    for line in open("/etc/os-release"):
        if line.startswith("VERSION_CODENAME="):
            codename = line.split("=", 1)[1].strip().strip('"')
    found = None
    for f in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in open(f).read().split("\n\n"):
            kv = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith("#"):
                    k, v = line.split(":", 1)
                    kv[k.strip().lower()] = v.strip()
            if "deb" in kv.get("types", "").split() and codename in kv.get("suites", "").split() \
                    and "main" in kv.get("components", "").split() and not found:
                found = (kv["uris"].split()[0], kv.get("signed-by", ""))
    if not found and os.path.exists("/etc/apt/sources.list"):
        for line in open("/etc/apt/sources.list"):
            m = re.match(r"^deb\s+(\[[^]]*\]\s+)?(\S+)\s+" + re.escape(codename) + r"\s+.*\bmain\b",
                         line)
            if m and not found:
                opts = m.group(1) or ""
                sb = re.search(r"signed-by=(\S+?)[\] ]", opts)
                found = (m.group(2), sb.group(1) if sb else "")
    if not found or not codename:
        die("no Debian archive for this release in /etc/apt (needed for apt-get source)")
    uri, key = found
    if not key or not key.startswith("/"):
        key = "/usr/share/keyrings/debian-archive-keyring.gpg"
    with open(out, "w") as f:
        f.write(f"deb-src [signed-by={key}] {uri} {codename} main\n")


# ------------------------------------------------------------ the benchmark


class Airlock:
    """One build of airlock with its own store, plain session, and overlay."""

    def __init__(self, name, binary, work, key):
        self.name, self.bin, self.key = name, binary, key
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir)
        self.store = os.path.join(self.dir, "store")
        self.lower = os.path.join(self.dir, "lower")
        self.upper = os.path.join(self.dir, "upper")
        self.ovwork = os.path.join(self.dir, "work")
        self.merged = os.path.join(self.dir, "merged")
        self.base = None
        # a session's sandbox: a new upper layer per turn over the ones before
        self.smerged = os.path.join(self.dir, "smerged")
        self.suppers = []  # upper directories, oldest first
        self.slast = None  # the checkpoint the layers under the newest hold

    def stack_mount(self, mounts):
        """A new, empty upper layer over the ones so far (as airlock does
        after a turn in a kept sandbox); returns the seconds it took."""
        t0 = time.monotonic()
        if os.path.ismount(self.smerged):
            run(["umount", self.smerged])
        k = len(self.suppers)
        up, wk = os.path.join(self.dir, f"s{k}-upper"), os.path.join(self.dir, f"s{k}-work")
        os.makedirs(up)
        os.makedirs(wk)
        lowers = ":".join(list(reversed(self.suppers)) + [self.lower])
        run(["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={lowers},upperdir={up},workdir={wk},"
             "redirect_dir=off,metacopy=off,index=off", self.smerged])
        self.suppers.append(up)
        return time.monotonic() - t0

    def ck(self, *args):
        return [self.bin, "checkpoint", *args, "--store", self.store, "--key", self.key]


def main_run(work):
    tree = env("BENCH_TURN_TREE")
    rounds = int(env("BENCH_TURN_ROUNDS", "5"))
    forks = int(env("BENCH_TURN_FORKS", "20"))
    out_json = env("BENCH_TURN_OUT")
    verify = env("BENCH_TURN_VERIFY", "1") == "1"
    fork_trees = [("10 MB", env("BENCH_TURN_FORK_SMALL", "boost/libs/multiprecision")),
                  ("100 MB", env("BENCH_TURN_FORK_MEDIUM", "qemu/roms")),
                  ("1 GiB", "")]
    journal = os.path.join(work, "journal")
    mounts = os.path.join(work, "mounts")
    key = os.path.join(work, "checkpoint.key")
    meta = {"tree": tree, "rounds": rounds, "forks_per_size": forks,
            "loadavg_before": open("/proc/loadavg").read().split()[:3],
            "kernel": os.uname().release, "nproc": os.cpu_count(),
            "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                         if l.startswith("model name")), "?"),
            "fs": run(["findmnt", "-no", "FSTYPE,OPTIONS", "-T", work]).splitlines()[0],
            "git": run(["git", "--version"]).strip(),
            "tar": run(["tar", "--version"]).splitlines()[0],
            "zstd": run(["zstd", "--version"]).strip(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    try:
        meta["tree_recipe"] = open(tree + ".stamp").read()
    except OSError:
        meta["tree_recipe"] = "?"
    note("counting the tree")
    meta["tree_stats"] = tree_stats(tree)
    files = regular_files(tree)
    n_pct = (len(files) + 99) // 100
    meta["pct_files"] = n_pct
    note(f"{meta['tree_stats']['files']} files, {meta['tree_stats']['dirs']} directories, "
         f"{meta['tree_stats']['bytes']} bytes; 1% = {n_pct} files")

    builds = [Airlock("airlock", env("AIRLOCK"), work, key)]
    if env("BENCH_BEFORE"):
        builds.append(Airlock("airlock-before", env("BENCH_BEFORE"), work, key))
    meta["builds"] = {b.name: b.bin for b in builds}
    rows = []  # dicts: round, phase, tool, wall, cpu, sync

    def rec(r, phase, tool, res, extra=None):
        wall, cpu, sync = res[:3]
        row = {"round": r, "phase": phase, "tool": tool, "wall_s": round(wall, 5),
               "cpu_s": round(cpu, 5), "sync_after_s": round(sync, 5)}
        if extra:
            row.update(extra)
        rows.append(row)
        note(f"  round {r} {phase:7} {tool:24} {wall:8.3f} s  (cpu {cpu:6.3f} s, sync after "
             f"{sync:.3f} s)")

    def summary(stderr):
        lines = [l for l in stderr.splitlines() if l.startswith("airlock: ")]
        return lines[-1] if lines else ""

    # ---- set-up: a first checkpoint, its restore under an overlay, git, tar
    for b in builds:
        note(f"{b.name}: first checkpoint of the tree")
        res = timed(b.ck("create", "--workspace", tree, "--session", "plain"))
        b.base = res[3].strip()
        rec(0, "first", f"{b.name}", res, {"summary": summary(res[4])})
        # the stat cache settles: one more, untimed, before the rounds
        run(b.ck("create", "--workspace", tree, "--session", "plain"))
        note(f"{b.name}: restoring the first checkpoint as the overlay's lower layer")
        res = timed(b.ck("restore", b.base, "--to", b.lower))
        rec(0, "restore", b.name, res)
        for d in (b.upper, b.ovwork, b.merged, b.smerged):
            os.makedirs(d)
        run(["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={b.lower},upperdir={b.upper},workdir={b.ovwork},"
             "redirect_dir=off,metacopy=off,index=off", b.merged])
        with open(mounts, "a") as f:
            f.write(b.merged + "\n" + b.smerged + "\n")
        b.stack_mount(mounts)
        # the layered sessions start from the first checkpoint, as a fork would
        run(b.ck("adopt", b.base, "--session", "layer"))
        run(b.ck("adopt", b.base, "--session", "stack"))
        b.slast = b.base
    gitdir = os.path.join(work, "shadow.git")
    genv = {"GIT_DIR": gitdir, "GIT_WORK_TREE": tree}
    run(["git", "init", "-q"], env={**os.environ, "GIT_DIR": gitdir})
    git_cmd = ["sh", "-c", "git add -A -f && git write-tree"]
    note("git: the first snapshot (index made)")
    rec(0, "first", "git", timed(git_cmd, genv))
    tar_out = os.path.join(work, "tree.tar.zst")
    tar_cmd = ["tar", "-C", tree, "--zstd", "-cf", tar_out, "."]
    note("tar: warm-up")
    rec(0, "first", "tar", timed(tar_cmd))
    meta["tar_zst_bytes"] = os.path.getsize(tar_out)
    os.unlink(tar_out)

    # ---- the rounds: a turn changes 1 file, then 1% of the files
    tools = []
    for b in builds:
        tools += [(b, "plain"), (b, "layered"), (b, "per-turn layer")]
    tools += [(None, "git"), (None, "tar")]
    changed = []
    ids = {}
    for r in range(1, rounds + 1):
        note(f"round {r}/{rounds}")
        order = tools[(r - 1) % len(tools):] + tools[:(r - 1) % len(tools)]
        for phase, n in (("one", 1), ("pct", n_pct)):
            pick = random.Random(f"turn-{r}-{phase}").sample(files, n)
            changed += pick
            for b in builds:
                if r > 1 or phase != "one":
                    rows.append({"round": r, "phase": phase, "tool": f"{b.name} new layer",
                                 "wall_s": round(b.stack_mount(mounts), 5), "cpu_s": 0,
                                 "sync_after_s": 0})
            change([tree] + [b.merged for b in builds] + [b.smerged for b in builds], pick,
                   f"{r}-{phase}", journal)
            for b, t in order:
                if t == "plain":
                    res = timed(b.ck("create", "--workspace", tree, "--session", "plain"))
                    rec(r, phase, f"{b.name} plain", res, {"summary": summary(res[4])})
                    ids[(b.name, "plain")] = res[3].strip()
                elif t == "layered":
                    res = timed(b.ck("create", "--upper", b.upper, "--lower", b.base,
                                     "--session", "layer"))
                    rec(r, phase, f"{b.name} layered", res, {"summary": summary(res[4])})
                    ids[(b.name, "layered")] = res[3].strip()
                elif t == "per-turn layer":
                    res = timed(b.ck("create", "--upper", b.suppers[-1], "--lower", b.slast,
                                     "--session", "stack"))
                    rec(r, phase, f"{b.name} per-turn layer", res, {"summary": summary(res[4])})
                    b.slast = ids[(b.name, "per-turn layer")] = res[3].strip()
                elif t == "git":
                    rec(r, phase, "git", timed(git_cmd, genv))
                else:
                    rec(r, phase, "tar", timed(tar_cmd))
                    os.unlink(tar_out)

    # ---- checks: each checkpoint differs from the first by the changed files
    want = sorted(set(changed))
    for b in builds:
        for t in ("plain", "layered", "per-turn layer"):
            d = run(b.ck("diff", b.base, ids[(b.name, t)], "--names-only"))
            got = sorted(l[2:] for l in d.splitlines())
            bad = [l for l in d.splitlines() if not l.startswith("M ")]
            if got != want or bad:
                die(f"{b.name} {t}: the diff from the first checkpoint lists {len(got)} paths "
                    f"({len(bad)} not M); {len(want)} files were changed")
            note(f"{b.name} {t}: the last checkpoint differs from the first by exactly the "
                 f"{len(want)} changed files")
    if verify:
        b = builds[0]
        note(f"{b.name}: restoring the last checkpoints and comparing them with the tree")
        src = listing(tree)
        for t in ("plain", "layered", "per-turn layer"):
            to = os.path.join(b.dir, f"verify-{t.replace(' ', '-')}")
            run(b.ck("restore", ids[(b.name, t)], "--to", to))
            seen = {"plain": tree, "layered": b.merged}.get(t, b.smerged)
            compare(src if t == "plain" else listing(seen), listing(to),
                    f"{b.name} {t} restore")
            run(["rm", "-rf", to])
            note(f"{b.name} {t}: the restore equals the tree (paths, modes, sizes, mtimes, "
                 "SHA-256 of every file)")
        meta["verified"] = True

    # ---- forks: a new session adopting a checkpoint
    note("forks")
    fork_ids = {}
    for b in builds:
        for label, sub in fork_trees:
            if sub:
                res = timed(b.ck("create", "--workspace", os.path.join(tree, sub),
                                 "--session", "src-" + label.replace(" ", "").lower()))
                fork_ids[(b.name, label)] = res[3].strip()
                meta.setdefault("fork_trees", {})[label] = {"path": sub,
                                                            **tree_stats(os.path.join(tree, sub))}
            else:
                fork_ids[(b.name, label)] = b.base
        fork_ids[(b.name, "1 GiB, layered")] = ids[(b.name, "layered")]
    meta.setdefault("fork_trees", {})["1 GiB"] = {"path": ".", **meta["tree_stats"]}
    labels = [l for l, _ in fork_trees] + ["1 GiB, layered"]
    for i in range(1, forks + 1):
        bs = builds[(i - 1) % len(builds):] + builds[:(i - 1) % len(builds)]
        for label in labels:
            for b in bs:
                s = f"fork-{i}-{label.replace(' ', '').replace(',', '-').lower()}"
                res = timed(b.ck("adopt", fork_ids[(b.name, label)], "--session", s))
                rows.append({"round": i, "phase": "fork " + label, "tool": b.name,
                             "wall_s": round(res[0], 5), "cpu_s": round(res[1], 5),
                             "sync_after_s": round(res[2], 5)})
        if i == 1 or i % 5 == 0:
            note(f"  forks: {i}/{forks}")

    # ---- sizes
    for b in builds:
        m = os.path.join(b.store, "tenants", "default", "manifests")
        meta[f"{b.name}_manifest_bytes_first"] = os.path.getsize(os.path.join(m, b.base))
        for t in ("plain", "layered"):
            meta[f"{b.name}_manifest_bytes_last_{t}"] = os.path.getsize(
                os.path.join(m, ids[(b.name, t)]))
    meta["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    report(rows, meta, builds, out_json)


# ------------------------------------------------------------ the report


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(-(-p * len(xs) // 100)) - 1))]


def report(rows, meta, builds, out_json):
    def sel(phase, tool):
        return [x for x in rows if x["phase"] == phase and x["tool"] == tool]

    stats = {}
    for x in rows:
        k = (x["phase"], x["tool"])
        if k in stats:
            continue
        s = sel(*k)
        w = [y["wall_s"] for y in s]
        stats[k] = {"n": len(w), "p50_s": round(statistics.median(w), 5),
                    "min_s": min(w), "max_s": max(w), "p95_s": pct(w, 95),
                    "cpu_p50_s": round(statistics.median([y["cpu_s"] for y in s]), 5),
                    "sync_after_p50_s": round(statistics.median([y["sync_after_s"] for y in s]), 5)}

    def p50(phase, tool):
        v = stats.get((phase, tool))
        return v["p50_s"] if v else None

    out = {"meta": meta, "rows": rows,
           "summary": [{"phase": k[0], "tool": k[1], **v} for k, v in stats.items()],
           "ratios": {}}
    print()
    print(f"Per-turn checkpoints of {meta['tree']}: {meta['tree_stats']['files']} files, "
          f"{meta['tree_stats']['bytes'] / 1e9:.2f} GB; medians of {meta['rounds']} interleaved "
          "rounds (min-max), seconds")
    print()
    hdr = f"{'':28}{'1 file changed':>26}{'1% changed':>26}"
    print(hdr)
    tools = []
    for b in builds:
        tools += [f"{b.name} per-turn layer", f"{b.name} new layer", f"{b.name} layered",
                  f"{b.name} plain"]
    tools += ["git", "tar"]
    for t in tools:
        cells = []
        for ph in ("one", "pct"):
            v = stats.get((ph, t))
            cells.append(f"{v['p50_s']:.3f} ({v['min_s']:.3f}-{v['max_s']:.3f})" if v else "-")
        print(f"{t:28}{cells[0]:>26}{cells[1]:>26}")
    print()
    for b in builds:
        for t in ("per-turn layer", "layered", "plain"):
            for ph in ("one", "pct"):
                a, g, z = p50(ph, f"{b.name} {t}"), p50(ph, "git"), p50(ph, "tar")
                if a and g and z:
                    key = f"{b.name} {t} {ph}"
                    out["ratios"][key] = {"git_over_airlock": round(g / a, 2),
                                          "airlock_over_tar": round(a / z, 4)}
                    print(f"{key:32} {g / a:6.1f}x faster than git, {100 * a / z:6.2f}% of tar")
    print()
    print("Fork (checkpoint adopt): p50 (p95) ms")
    labels = [l for l in ("10 MB", "100 MB", "1 GiB", "1 GiB, layered")]
    print(f"{'':20}" + "".join(f"{l:>18}" for l in labels))
    for b in builds:
        cells = []
        for l in labels:
            v = stats.get(("fork " + l, b.name))
            cells.append(f"{1000 * v['p50_s']:.1f} ({1000 * v['p95_s']:.1f})" if v else "-")
        print(f"{b.name:20}" + "".join(f"{c:>18}" for c in cells))
    print()
    for k in ("first", "restore"):
        line = ", ".join(f"{t} {v['p50_s']:.2f} s" for (ph, t), v in stats.items() if ph == k)
        print(f"set-up, {k}: {line}")
    if out_json:
        os.makedirs(os.path.dirname(out_json), exist_ok=True)
        with open(out_json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        note(f"wrote {out_json}")


def main():
    a = sys.argv[1:]
    if a[:1] == ["run"] and len(a) == 2:
        main_run(a[1])
    elif a[:1] == ["revert"] and len(a) == 3:
        revert(a[1], a[2])
    elif a[:1] == ["sources"] and len(a) == 2:
        sources(a[1])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()

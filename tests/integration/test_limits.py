# SPDX-License-Identifier: Apache-2.0
"""Limits: each test attacks one and checks the host is fine afterwards."""
import os
import subprocess
import time

import pytest

from conftest import uid_range_processes


def sh(airlock, script, *opts, **kw):
    return airlock.run(*opts, "--", "/bin/sh", "-c", script, **kw)


FORK_COUNT = r'''
import os, sys, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print("fork-failed-after", n, e.errno, flush=True)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
    if n > 5000:
        print("no-limit", flush=True)
        break
'''


def test_pids_limit_stops_fork_bomb(airlock):
    p = airlock.run("--pids", "64", "--timeout", "30", "--", "python3", "-c", FORK_COUNT)
    out = p.stdout.decode()
    assert "fork-failed-after" in out, (out, p.stderr)
    n = int(out.split()[1])
    assert 5 < n < 64, out
    # A classic shell bomb hits the wall and burns out (or is stopped by the
    # timeout); the host can still fork.
    t0 = time.monotonic()
    p = sh(airlock, "b() { b | b & }; b; sleep 3", "--pids", "64", "--timeout", "10")
    # 0: the bomb burnt out before `sleep`; 2: sh itself could not fork
    # `sleep` while the bomb still held the limit; 124: the timeout.
    assert p.returncode in (0, 2, 124), p.returncode
    assert b"fork" in p.stderr.lower()
    assert time.monotonic() - t0 < 20
    assert subprocess.run(["true"]).returncode == 0
    assert uid_range_processes() == []


def memory_bomb_can_be_checked():
    """A memory limit without swap accounting lets a bomb swap instead of
    dying: the kill cannot be checked on such a host."""
    mode, roots = cgroup_layout()
    if mode is None:
        return roots
    if not swap_on():
        return None
    if mode == "v2":
        # A non-root cgroup has memory.swap.max when swap is accounted.
        for e in os.scandir(roots["memory"]):
            if e.is_dir() and os.path.exists(os.path.join(e.path, "memory.max")):
                if os.path.exists(os.path.join(e.path, "memory.swap.max")):
                    return None
                return "swap is on and cgroup v2 does not account for it here"
        return None
    if not os.path.exists(os.path.join(roots["memory"], "memory.memsw.limit_in_bytes")):
        return "swap is on and cgroup v1 does not account for it here (no memory.memsw.*)"
    return None


def test_memory_bomb_killed_137(airlock):
    why = memory_bomb_can_be_checked()
    if why:
        pytest.skip(f"{why}: a process over the memory limit is swapped out, not killed")
    p = airlock.run("--memory", "64M", "--", "python3", "-c",
                    "b = [b'x' * (1 << 20) for _ in range(1024)]; print('survived')")
    assert p.returncode == 137, (p.returncode, p.stderr)
    assert b"survived" not in p.stdout
    assert b"memory limit" in p.stderr
    # The limit is per sandbox: a modest allocation works.
    p = airlock.run("--memory", "256M", "--", "python3", "-c",
                    "b = b'x' * (64 << 20); print('ok')", check=True)
    assert p.stdout.strip() == b"ok"


BOMB = "python3 -c 'b = [b\"x\" * (1 << 20) for _ in range(1024)]'"


def test_oom_kill_of_a_child_is_reported(airlock):
    """A process of the sandbox killed by the memory limit is reported even
    when the command then exits on its own, with the command's status."""
    why = memory_bomb_can_be_checked()
    if why:
        pytest.skip(f"{why}: a process over the memory limit is swapped out, not killed")
    p = sh(airlock, f"{BOMB}; echo child=$?; exit 1", "--memory", "64M")
    assert p.returncode == 1, p.stderr
    assert b"child=137" in p.stdout
    assert (b"1 process was killed by the sandbox's memory limit (OOM); the command exited "
            b"with status 1") in p.stderr, p.stderr
    # Without a kill, nothing is said.
    p = sh(airlock, "exit 1", "--memory", "64M")
    assert p.returncode == 1 and p.stderr == b""
    # A persistent sandbox: each exec reports its own kills; `list` the total.
    sid = airlock.sandbox("create", "--memory", "64M", check=True).stdout.decode().strip()
    try:
        p = airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                            f"{BOMB}; {BOMB}; echo children=$?; exit 3")
        assert p.returncode == 3, p.stderr
        assert (b"2 processes were killed by the sandbox's memory limit (OOM); the command "
                b"exited with status 3") in p.stderr, p.stderr
        p = airlock.sandbox("exec", sid, "--", "python3", "-c",
                            "b = [b'x' * (1 << 20) for _ in range(1024)]")
        assert p.returncode == 137
        assert b"memory limit (OOM; 1 process killed)" in p.stderr, p.stderr
        listing = airlock.sandbox("list", check=True).stdout.decode().splitlines()
        header, row = listing[0].split(), [l for l in listing if l.startswith(sid)][0].split()
        assert row[header.index("OOM")] == "3", listing
    finally:
        airlock.sandbox("destroy", sid, check=True)


def test_timeout_kills_grandchildren(airlock, workspace):
    t0 = time.monotonic()
    p = sh(airlock, "(sleep 3; echo alive > /workspace/marker) & "
                    "(setsid sh -c 'sleep 3; echo alive > /workspace/marker2' &) ; sleep 100",
           "--workspace", str(workspace), "--timeout", "1")
    elapsed = time.monotonic() - t0
    assert p.returncode == 124, (p.returncode, p.stderr)
    assert elapsed < 3, elapsed
    assert b"timed out" in p.stderr
    time.sleep(3.5)
    assert not (workspace / "marker").exists()
    assert not (workspace / "marker2").exists()
    assert uid_range_processes() == []


def test_output_flood_capped(airlock):
    p = sh(airlock, "head -c 10000000 /dev/zero | tr '\\0' x; echo tail-marker; exit 3",
           "--output-limit", "1K")
    assert p.returncode == 3  # the command's own status is kept
    assert len(p.stdout) == 1024
    assert b"tail-marker" not in p.stdout
    assert b"output truncated at 1024 bytes" in p.stderr


def test_output_streams_and_stdin(airlock):
    p = airlock.run("--", "/bin/sh", "-c", "tr a-z A-Z; echo err >&2; exit 7",
                    input=b"hello from stdin\n")
    assert p.returncode == 7
    assert p.stdout == b"HELLO FROM STDIN\n"
    assert p.stderr == b"err\n"


def test_output_streams_while_running(airlock):
    proc = subprocess.Popen([airlock.bin, "sandbox", "run", "--", "/bin/sh", "-c",
                             "echo first; sleep 5; echo second"],
                            stdout=subprocess.PIPE, env=airlock.env)
    try:
        t0 = time.monotonic()
        line = proc.stdout.readline()
        assert line == b"first\n"
        assert time.monotonic() - t0 < 4  # streamed, not buffered until exit
    finally:
        proc.kill()
        proc.wait()
        # The sandbox dies with its supervisor (parent-death signal), a
        # moment later; then gc removes what is left on disk.
        deadline = time.monotonic() + 10
        while uid_range_processes():
            assert time.monotonic() < deadline, uid_range_processes()
            time.sleep(0.02)
        airlock.sandbox("gc", check=True)


def test_exit_status_and_signals(airlock):
    assert sh(airlock, "exit 42").returncode == 42
    assert sh(airlock, "kill -TERM $$").returncode == 128 + 15
    p = airlock.run("--", "/nonexistent-command")
    assert p.returncode == 127 and b"nonexistent-command" in p.stderr


def test_cpu_limit_applied(airlock):
    p = sh(airlock, "python3 -c 'import time\nt=time.process_time()\nw=time.time()\n"
                    "while time.time()-w < 1.5: pass\nprint(time.process_time()-t)'",
           "--cpus", "0.2", check=True)
    used = float(p.stdout)
    assert used < 0.75, f"{used}s of CPU in 1.5s with --cpus 0.2"


def cgroup_layout():
    """Where this host's cgroup controllers are, as airlock chooses: the
    unified hierarchy when it has memory, pids and cpu, else the v1
    hierarchies of each (a hybrid host with its controllers on v1 uses v1).
    Returns ("v2", {ctl: root}) or ("v1", {ctl: root}), or (None, reason)."""
    v2_roots, v1 = [], {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, post = line.split(" - ", 1)
            mnt = pre.split()[4]
            fstype, _, opts = post.split()[:3]
            if fstype == "cgroup2":
                v2_roots.append(mnt)
            elif fstype == "cgroup":
                for ctl in ("memory", "pids", "cpu"):
                    if ctl in opts.split(","):
                        v1[ctl] = mnt
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if root not in v2_roots:
            continue
        try:
            with open(os.path.join(root, "cgroup.controllers")) as f:
                have = f.read().split()
        except OSError:
            continue
        if all(c in have for c in ("memory", "pids", "cpu")):
            return "v2", {c: root for c in ("memory", "pids", "cpu")}
    if all(c in v1 for c in ("memory", "pids", "cpu")):
        return "v1", v1
    return None, (f"no usable cgroups: cgroup2 at {v2_roots or 'nowhere'} without all of "
                  f"memory, pids and cpu, and v1 hierarchies only for {sorted(v1) or 'none'}")


def read(path):
    with open(path) as f:
        return f.read().strip()


def swap_on():
    with open("/proc/swaps") as f:
        return len(f.read().strip().splitlines()) > 1


def test_cgroup_limits_in_place(airlock):
    """The limits are written to the sandbox's own cgroups on whichever
    hierarchy this host has (v2, v1 or hybrid), its processes are in them,
    and inside it sees only its own cgroup."""
    mode, roots = cgroup_layout()
    if mode is None:
        pytest.skip(roots)
    sid = airlock.sandbox("create", "--memory", "64M", "--pids", "50", "--cpus", "0.5",
                          check=True).stdout.decode().strip()
    try:
        with open(os.path.join(airlock.state_dir, sid, "state")) as f:
            state = dict(l.strip().split("=", 1) for l in f)
        parent = airlock.env["AIRLOCK_CGROUP_PARENT"]
        dirs = {c: os.path.join(roots[c], parent, sid) for c in roots}
        for c, d in dirs.items():
            assert os.path.isdir(d), f"no {c} cgroup at {d}"
            procs = read(os.path.join(d, "cgroup.procs")).split()
            assert state["pid"] in procs, (c, procs)
            assert state["keeper"] in procs, (c, procs)
        if mode == "v2":
            assert state["cgroup_v2"] == "1"
            assert read(os.path.join(dirs["memory"], "memory.max")) == str(64 << 20)
            assert read(os.path.join(dirs["pids"], "pids.max")) == "50"
            assert read(os.path.join(dirs["cpu"], "cpu.max")) == "50000 100000"
        else:
            assert state["cgroup_v2"] == "0"
            assert read(os.path.join(dirs["memory"], "memory.limit_in_bytes")) == str(64 << 20)
            assert read(os.path.join(dirs["pids"], "pids.max")) == "50"
            assert read(os.path.join(dirs["cpu"], "cpu.cfs_period_us")) == "100000"
            assert read(os.path.join(dirs["cpu"], "cpu.cfs_quota_us")) == "50000"
        # A command's processes are in the same cgroups (forked from there).
        p = airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                            "cat /proc/self/cgroup; echo pid $$; sleep 0.5", check=True)
        lines = p.stdout.decode().splitlines()
        # Inside: a cgroup namespace rooted at the sandbox's own cgroup.
        for line in lines[:-1]:
            assert line.split(":", 2)[2] == "/", lines  # never a host path
        assert any(l.startswith("0::/") or ":memory:/" in l for l in lines), lines
    finally:
        airlock.sandbox("destroy", sid, check=True)
    for d in dirs.values():
        assert not os.path.exists(d)


def test_swap_is_limited_too(airlock):
    """No swap beyond the memory limit, where the host accounts for swap."""
    mode, roots = cgroup_layout()
    if mode is None:
        pytest.skip(roots)
    knob = "memory.swap.max" if mode == "v2" else "memory.memsw.limit_in_bytes"
    probe_dir = os.path.join(roots["memory"], airlock.env["AIRLOCK_CGROUP_PARENT"])
    sid = airlock.sandbox("create", "--memory", "64M", check=True).stdout.decode().strip()
    try:
        path = os.path.join(probe_dir, sid, knob)
        if not os.path.exists(path):
            pytest.skip(f"this host does not account for swap in cgroups ({knob} is absent): "
                        f"the memory limit bounds RAM only"
                        f"{' and swap is on' if swap_on() else ' (and there is no swap)'}")
        want = "0" if mode == "v2" else str(64 << 20)
        assert read(path) == want
    finally:
        airlock.sandbox("destroy", sid, check=True)


def test_timeout_holds_when_our_stderr_is_blocked(airlock):
    """A caller that never reads stderr must not stop the timeout."""
    r, w = os.pipe()
    try:
        t0 = time.monotonic()
        proc = subprocess.Popen([airlock.bin, "sandbox", "run", "--timeout", "2",
                                 "--output-limit", "100000", "--", "/bin/sh", "-c",
                                 "head -c 300000 /dev/zero >&2; yes"],
                                env=airlock.env, stdout=subprocess.DEVNULL, stderr=w)
        os.close(w)
        w = -1
        rc = proc.wait(timeout=20)  # nobody reads r: the pipe stays full
        assert rc == 124
        assert time.monotonic() - t0 < 10
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)

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


def test_memory_bomb_killed_137(airlock):
    p = airlock.run("--memory", "64M", "--", "python3", "-c",
                    "b = [b'x' * (1 << 20) for _ in range(1024)]; print('survived')")
    assert p.returncode == 137, (p.returncode, p.stderr)
    assert b"survived" not in p.stdout
    assert b"memory limit" in p.stderr
    # The limit is per sandbox: a modest allocation works.
    p = airlock.run("--memory", "256M", "--", "python3", "-c",
                    "b = b'x' * (64 << 20); print('ok')", check=True)
    assert p.stdout.strip() == b"ok"


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


def cgroup_v2_usable():
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        try:
            with open(os.path.join(root, "cgroup.controllers")) as f:
                have = f.read().split()
        except OSError:
            continue
        if all(c in have for c in ("memory", "pids", "cpu")):
            return True
    return False


@pytest.mark.skipif(not cgroup_v2_usable(),
                    reason="cgroup v2 has no memory/pids/cpu controllers on this host "
                           "(they are bound to v1); the v1 path is tested instead")
def test_cgroup_v2_limits(airlock):
    p = sh(airlock, "cat /proc/self/cgroup", "--memory", "64M", check=True)
    assert p.stdout.startswith(b"0::/")
    p = airlock.run("--memory", "64M", "--", "python3", "-c", "b = b'x' * (512 << 20)")
    assert p.returncode == 137


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

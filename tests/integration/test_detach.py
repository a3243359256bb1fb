"""`sandbox exec --detach` and `sandbox logs`: commands that outlive their exec."""
import json
import os
import signal
import subprocess

from conftest import deadline_poll
from test_tty import sandbox_commands


def supervisors(sid):
    """Host processes supervising a detached command of sandbox sid."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if (b"--detach" in argv or b"-d" in argv) and sid.encode() in argv:
            found.append(int(pid))
    return found


def detached(airlock, sid):
    p = airlock.sandbox("inspect", sid, "--json", check=True)
    return json.loads(p.stdout)["detached"]


def create(airlock):
    return airlock.sandbox("create", check=True).stdout.decode().strip()


def test_detach_runs_on_and_logs_keep_its_output(airlock):
    sid = create(airlock)
    try:
        # The exec returns while the command runs (capture_output: had
        # anything kept our pipes open, this would hang to its timeout).
        p = airlock.sandbox("exec", "--detach", sid, "--", "sh", "-c",
                            "echo out; echo err >&2; while [ ! -e /tmp/go ]; do sleep 0.05; done;"
                            " echo done; exit 4", timeout=30)
        assert p.returncode == 0 and p.stdout == b"1\n" and p.stderr == b"", p
        d = detached(airlock, sid)
        assert d == [{"n": 1, "state": "running", "status": None,
                      "command": "sh -c 'echo out; echo err >&2; while [ ! -e /tmp/go ]; do sleep "
                                 "0.05; done; echo done; exit 4'"}]
        # -f follows: what is there, then what comes, until the end.
        f = subprocess.Popen([airlock.bin, "sandbox", "logs", "-f", sid], env=airlock.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert f.stdout.readline() == b"out\n"
        assert f.stdout.readline() == b"err\n"
        airlock.sandbox("exec", sid, "--", "touch", "/tmp/go", check=True)
        out, err = f.communicate(timeout=30)
        assert (f.returncode, out, err) == (0, b"done\n", b"")
        d = deadline_poll(lambda: [x for x in detached(airlock, sid) if x["state"] == "ended"],
                          10, "the status")
        assert d[0]["status"] == "exited 4"
        p = airlock.sandbox("logs", sid, "1", check=True)
        assert p.stdout == b"out\nerr\ndone\n"
        text = airlock.sandbox("inspect", sid, check=True).stdout.decode()
        assert "detached:   1   exited 4               sh -c 'echo out;" in text, text
        # A second one: the latest is the default.
        p = airlock.sandbox("exec", "-d", sid, "--", "echo", "second", check=True)
        assert p.stdout == b"2\n"
        deadline_poll(lambda: detached(airlock, sid)[1]["state"] == "ended", 10, "the second")
        assert airlock.sandbox("logs", sid, check=True).stdout == b"second\n"
        assert supervisors(sid) == []
    finally:
        airlock.sandbox("destroy", sid)


def test_detached_limits_hold(airlock):
    sid = create(airlock)
    try:
        # An endless flood: capped, and then ended, not read forever.
        p = airlock.sandbox("exec", "-d", "--output-limit", "1000", sid, "--", "yes",
                            check=True)
        assert p.stdout == b"1\n"
        p = airlock.sandbox("exec", "-d", "--timeout", "1", sid, "--", "sleep", "100",
                            check=True)
        assert p.stdout == b"2\n"
        d = deadline_poll(lambda: (lambda d: d if all(x["state"] == "ended" for x in d) else
                                   None)(detached(airlock, sid)), 20, "both to end")
        # At its output limit a detached command's output is closed: its
        # next write gets EPIPE (SIGPIPE), as under `| head`.
        assert [x["status"] for x in d] == ["killed by signal 13", "timed out"]
        log = airlock.sandbox("logs", sid, "1", check=True).stdout
        assert log == b"y\n" * 500 + b"\n[airlock: output truncated at 1000 bytes]\n"
    finally:
        airlock.sandbox("destroy", sid)


def test_destroy_ends_detached_commands_and_their_supervisors(airlock):
    sid = create(airlock)
    p = airlock.sandbox("exec", "-d", sid, "--", "sleep", "1000", check=True)
    assert p.stdout == b"1\n"
    assert len(supervisors(sid)) == 1
    f = subprocess.Popen([airlock.bin, "sandbox", "logs", "--follow", sid], env=airlock.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    airlock.sandbox("destroy", sid, check=True)
    # The follower sees the end; the supervisor is gone. (The fixture
    # checks that nothing else is left.)
    out, err = f.communicate(timeout=30)
    assert (f.returncode, out, err) == (0, b"", b"")
    deadline_poll(lambda: supervisors(sid) == [], 10, "the supervisor to end")


def test_a_killed_supervisor_takes_its_command_along(airlock):
    sid = create(airlock)
    try:
        airlock.sandbox("exec", "-d", sid, "--", "sleep", "1000", check=True)
        [pid] = supervisors(sid)
        os.kill(pid, signal.SIGKILL)
        deadline_poll(lambda: detached(airlock, sid)[0]["state"] == "lost", 10, "lost")
        # Nothing of an exec outlives its supervisor: the sleep is gone, as
        # the host sees it (every pid namespace of the sandbox's).
        # (Killed at once, before the command's init became root inside:
        # it goes all the same.)
        deadline_poll(lambda: "sleep" not in sandbox_commands(airlock, sid), 10,
                      "the sleep to end")
        text = airlock.sandbox("inspect", sid, check=True).stdout.decode()
        assert "detached:   1   lost (its supervisor was killed) sleep 1000\n" in text, text
        p = airlock.sandbox("logs", "-f", sid, timeout=30)
        assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    finally:
        airlock.sandbox("destroy", sid)


def test_detach_and_logs_errors(airlock):
    sid = create(airlock)
    try:
        p = airlock.sandbox("logs", sid)
        assert p.returncode == 125
        assert p.stderr == (f"airlock: sandbox {sid} has no detached commands "
                            f"(`sandbox exec --detach`)\n").encode()
        airlock.sandbox("exec", "-d", sid, "--", "true", check=True)
        p = airlock.sandbox("logs", sid, "7")
        assert p.returncode == 125
        assert p.stderr == f"airlock: sandbox {sid} has no detached command 7\n".encode()
        p = airlock.sandbox("logs", sid, "0")
        assert p.returncode == 125
        assert p.stderr == (b"airlock: a detached command's number is 1 or more (as "
                            b"`sandbox exec --detach` printed it), not '0'\n")
        p = airlock.sandbox("logs", sid, "--tail")
        assert p.returncode == 125
        assert p.stderr == (b"airlock: unknown option --tail (usage: airlock sandbox logs ID "
                            b"[N] [-f|--follow])\n")
        p = airlock.sandbox("logs")
        assert p.stderr == b"airlock: usage: airlock sandbox logs ID [N] [-f|--follow]\n"
        p = airlock.sandbox("exec", "-d", "-t", sid, "--", "true")
        assert p.returncode == 125
        assert p.stderr == (b"airlock: --detach and --tty do not go together: a detached "
                            b"command has no terminal (its output is in `sandbox logs`)\n")
        p = airlock.sandbox("run", "--detach", "--", "true")
        assert p.returncode == 125
        assert p.stderr == (b"airlock: option --detach does not apply here "
                            b"(see `airlock sandbox --help`)\n")
        p = airlock.sandbox("logs", "--help")
        assert p.returncode == 0 and b"airlock sandbox logs ID [N] [-f|--follow]" in p.stdout
    finally:
        airlock.sandbox("destroy", sid)
    p = airlock.sandbox("exec", "-d", sid, "--", "true")
    assert p.returncode == 125 and p.stdout == b""

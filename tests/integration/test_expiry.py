# SPDX-License-Identifier: Apache-2.0
"""Expiry of persistent sandboxes: `create --ttl` and `--idle`, enforced by
`sandbox gc`, shown by `list` and `inspect`. Every message is checked word
for word."""
import json
import os
import re
import socket
import struct
import subprocess
import time

from conftest import deadline_poll


def err(p):
    return p.stderr.decode()


def out(p):
    return p.stdout.decode()


def gc_until_destroyed(airlock, sid, seconds, as_json=False):
    """Runs gc until it destroys sid; returns (its output, when)."""
    def once():
        if as_json:
            p = airlock.sandbox("gc", "--json")
            assert p.returncode == 0, p
            said = json.loads(out(p))
            if said["destroyed"]:
                return said, time.monotonic()
            assert said == {"destroyed": [], "removed": 0}, said
            return None
        p = airlock.sandbox("gc")
        assert p.returncode == 0, p
        if sid in out(p):
            return out(p), time.monotonic()
        assert out(p) == "removed 0 leftovers\n", out(p)
        return None
    return deadline_poll(once, seconds, f"gc destroying {sid}")


def listed(airlock):
    return {r["id"]: r for r in json.loads(out(airlock.sandbox("list", "--json", check=True)))}


def expires_column(airlock, sid):
    lines = out(airlock.sandbox("list", check=True)).splitlines()
    head = lines[0]
    row = [l for l in lines if l.startswith(sid)][0]
    at = head.index("EXPIRES")
    return row[at:head.index("WORKSPACE")].strip()


def test_bad_values_refused(airlock):
    rng = "wants a duration from 1s to 365d (30s, 5m, 2h, 7d)"
    cases = [
        (["create", "--ttl", "0"], f"airlock: --ttl {rng}, not '0'\n"),
        (["create", "--idle", "0s"], f"airlock: --idle {rng}, not '0s'\n"),
        (["create", "--ttl", "500ms"], f"airlock: --ttl {rng}, not '500ms'\n"),
        (["create", "--ttl", "366d"], f"airlock: --ttl {rng}, not '366d'\n"),
        (["create", "--idle=99999999999999999999"],
         f"airlock: --idle {rng}, not '99999999999999999999'\n"),
        (["create", "--idle", "5x"], f"airlock: --idle {rng}, not '5x'\n"),
        (["create", "--ttl", "-5s"], f"airlock: --ttl {rng}, not '-5s'\n"),
        (["create", "--ttl"], "airlock: option --ttl needs a value\n"),
        (["run", "--ttl", "5s", "--", "true"],
         "airlock: --ttl is for `sandbox create`: a `sandbox run` ends with its command\n"),
        (["run", "--idle=1m", "--", "true"],
         "airlock: --idle is for `sandbox create`: a `sandbox run` ends with its command\n"),
        (["exec", "--ttl", "5s", "abcd", "--", "true"],
         "airlock: option --ttl does not apply here (see `airlock sandbox --help`)\n"),
    ]
    for args, want in cases:
        p = airlock.sandbox(*args)
        assert (p.returncode, out(p), err(p)) == (125, "", want), args
    assert listed(airlock) == {}


def test_ttl_destroys_after_its_time_and_not_before(airlock):
    t0 = time.monotonic()
    info = json.loads(out(airlock.sandbox("create", "--ttl", "3s", "--json", check=True)))
    sid = info["id"]
    assert (info["ttl_ms"], info["idle_ms"], info["expiry_error"]) == (3000, None, None)
    assert 0 < info["expires_in_ms"] <= 3000
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", info["expires_at"])
    # The state file is what an earlier airlock reads: nothing new in it.
    state = open(os.path.join(airlock.state_dir, sid, "state")).read()
    assert "ttl" not in state and "idle" not in state
    expiry = open(os.path.join(airlock.state_dir, sid, "expiry")).read()
    assert re.fullmatch(r"ttl_ms=3000\nidle_ms=0\ncreated_ms=\d+\nboot_ms=\d+\n", expiry)
    assert expires_column(airlock, sid) in ("in 3s", "in 2s", "in 1s")
    text = out(airlock.sandbox("inspect", sid, check=True))
    assert "\nttl:        3s\nidle:       none\nexpires:    in " in text
    assert text.endswith("; by `airlock sandbox gc`)\n"), text
    # Before its time, gc leaves it (the check is meaningful only while
    # the ttl has not passed: this machine must be that quick).
    assert time.monotonic() - t0 < 2.5
    p = airlock.sandbox("gc")
    assert (p.returncode, out(p), err(p)) == (0, "removed 0 leftovers\n", "")
    assert listed(airlock)[sid]["state"] == "running"
    said, when = gc_until_destroyed(airlock, sid, 30)
    assert said == f"destroyed sandbox {sid} (ttl 3s passed)\nremoved 0 leftovers\n"
    assert when - t0 >= 3.0
    assert listed(airlock) == {}
    assert airlock.leftovers() == []


def test_ttl_is_a_hard_limit(airlock):
    sid = out(airlock.sandbox("create", "--ttl", "1s", check=True)).strip()
    ex = subprocess.Popen([airlock.bin, "sandbox", "exec", sid, "--", "sleep", "60"],
                          env=airlock.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline_poll(lambda: expires_column(airlock, sid) in ("now", "in 1s"), 10, "the list")
        said, _ = gc_until_destroyed(airlock, sid, 30, as_json=True)
        assert said == {"destroyed": [{"id": sid, "reason": "ttl 1s passed"}], "removed": 0}
        o, e = ex.communicate(timeout=30)
        assert (ex.returncode, o, e.decode()) == (
            125, b"", "airlock: the sandbox ended without reporting a status (destroyed, or "
                      "killed from outside)\n")
    finally:
        if ex.poll() is None:
            ex.kill()
            ex.wait()
    assert airlock.leftovers() == []


def test_idle_waits_for_the_running_command(airlock):
    t0 = time.monotonic()
    sid = out(airlock.sandbox("create", "--idle", "2s", check=True)).strip()
    launched = time.monotonic()  # the command starts after this, and runs 5 s
    ex = subprocess.Popen([airlock.bin, "sandbox", "exec", sid, "--", "sleep", "5"],
                          env=airlock.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Seen running by the sandbox's keeper: no time of expiry then.
        def busy():
            r = listed(airlock)[sid]
            return r["expires_at"] is None and r
        row = deadline_poll(busy, 10, "the command to run")
        assert (row["ttl_ms"], row["idle_ms"], row["expires_in_ms"], row["expiry_error"]) == (
            None, 2000, None, None)
        assert expires_column(airlock, sid) == "when idle"
        text = out(airlock.sandbox("inspect", sid, check=True))
        assert text.endswith("ttl:        none\nidle:       2s\n"
                             "expires:    once idle for 2s (a command runs)\n"), text
        # Longer than --idle since the creation, the command still running:
        # every gc leaves it.
        while ex.poll() is None:
            p = airlock.sandbox("gc")
            assert (p.returncode, out(p), err(p)) == (0, "removed 0 leftovers\n", ""), p
            time.sleep(0.2)
        assert time.monotonic() - t0 >= 3.0  # more than --idle since the creation
        o, e = ex.communicate()
        assert (ex.returncode, o, e) == (0, b"", b"")
    finally:
        if ex.poll() is None:
            ex.kill()
            ex.wait()
    # Idle from the command's end, not from the creation.
    row = listed(airlock)[sid]
    assert 0 < row["expires_in_ms"] <= 2000 and row["expiry_error"] is None, row
    said, when = gc_until_destroyed(airlock, sid, 30)
    assert said == f"destroyed sandbox {sid} (idle 2s passed)\nremoved 0 leftovers\n"
    assert when - launched >= 5.0 + 2.0
    assert airlock.leftovers() == []


def test_idle_without_any_command(airlock):
    t0 = time.monotonic()
    sid = out(airlock.sandbox("create", "--idle", "1s", "--ttl", "1h", check=True)).strip()
    said, when = gc_until_destroyed(airlock, sid, 30)
    assert said == f"destroyed sandbox {sid} (idle 1s passed)\nremoved 0 leftovers\n"
    assert when - t0 >= 1.0
    assert airlock.leftovers() == []


def test_damaged_expiry_file_is_reported_and_left_alone(airlock):
    sid = out(airlock.sandbox("create", "--ttl", "1s", check=True)).strip()
    path = os.path.join(airlock.state_dir, sid, "expiry")
    with open(path, "w") as f:
        f.write("ttl_ms=1\n")
    want = (f"airlock: sandbox {sid} has a damaged expiry file: left alone (`airlock sandbox "
            f"destroy {sid}` removes it)\n")
    for _ in range(2):
        p = airlock.sandbox("gc")
        assert (p.returncode, out(p), err(p)) == (125, "removed 0 leftovers\n", want)
    row = listed(airlock)[sid]
    assert (row["state"], row["ttl_ms"], row["idle_ms"], row["expires_at"],
            row["expiry_error"]) == ("running", None, None, None, "damaged expiry file")
    assert expires_column(airlock, sid) == "?"
    text = out(airlock.sandbox("inspect", sid, check=True))
    assert text.endswith("ttl:        none\nidle:       none\n"
                         "expires:    cannot tell: damaged expiry file\n"), text
    airlock.sandbox("destroy", sid, check=True)
    p = airlock.sandbox("gc")
    assert (p.returncode, out(p), err(p)) == (0, "removed 0 leftovers\n", "")
    assert airlock.leftovers() == []


def test_no_expiry_shown_as_none(airlock):
    sid = out(airlock.sandbox("create", check=True)).strip()
    try:
        row = listed(airlock)[sid]
        assert (row["ttl_ms"], row["idle_ms"], row["expires_at"], row["expires_in_ms"],
                row["expiry_error"]) == (None, None, None, None, None)
        assert expires_column(airlock, sid) == "-"
        assert out(airlock.sandbox("inspect", sid, check=True)).endswith(
            "ttl:        none\nidle:       none\nexpires:    never\n")
        assert not os.path.exists(os.path.join(airlock.state_dir, sid, "expiry"))
    finally:
        airlock.sandbox("destroy", sid, check=True)


KEEPER_ERR, KEEPER_ACTIVITY, KEEPER_IDLE = 3, 6, 7  # proc.h


def ask_keeper(airlock, sid, payload):
    """One raw request to the sandbox's keeper: (type, payload) of its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(os.path.join(airlock.state_dir, sid, "control"))
        s.sendall(struct.pack("=II", KEEPER_ACTIVITY, len(payload)) + payload)
        head = b""
        while len(head) < 8:
            head += s.recv(8 - len(head))
        kind, n = struct.unpack("=II", head)
        body = b""
        while len(body) < n:
            body += s.recv(n - len(body))
        return kind, body


def test_keeper_closes_once_idle_and_checks_its_requests(airlock):
    sid = out(airlock.sandbox("create", "--idle", "1h", check=True)).strip()
    # Asking only changes nothing.
    kind, body = ask_keeper(airlock, sid, struct.pack("=Q", 0))
    assert kind == KEEPER_IDLE and len(body) == 24
    idle_ms, closed_after, busy, closed = struct.unpack("=QQII", body)
    assert (closed_after, busy, closed) == (0, 0, 0) and idle_ms < 3600000
    # Malformed requests are refused, and the keeper still serves.
    for bad in (struct.pack("=I", 1), struct.pack("=Q", 365 * 86400000 + 1)):
        assert ask_keeper(airlock, sid, bad) == (KEEPER_ERR, b"malformed activity request\0")
    airlock.sandbox("exec", sid, "--", "true", check=True)
    # Idle for 1s (after that exec): closed, and every command refused from then on.
    def closes():
        k, b = ask_keeper(airlock, sid, struct.pack("=Q", 1000))
        assert k == KEEPER_IDLE
        idle_ms, closed_after, busy, closed = struct.unpack("=QQII", b)
        assert busy == 0
        return closed == 1 and closed_after == 1000 and idle_ms >= 1000
    deadline_poll(closes, 30, "the keeper to close")
    p = airlock.sandbox("exec", sid, "--", "true")
    assert (p.returncode, out(p), err(p)) == (
        125, "", "airlock: the sandbox refused the command: it has been idle for 1s (--idle) "
                 "and is being destroyed\n")
    # Its own --idle (1h) has not passed, but a closed keeper is destroyed,
    # and gc says by which limit.
    p = airlock.sandbox("gc")
    assert (p.returncode, out(p), err(p)) == (
        0, f"destroyed sandbox {sid} (idle 1s passed)\nremoved 0 leftovers\n", "")
    assert airlock.leftovers() == []

# SPDX-License-Identifier: Apache-2.0
"""The command line as people use it: options and their errors, --help
everywhere, values written in hex, the log level. Every message is checked
word for word: they are what a user reads."""
import os
import re
import select
import signal
import socket
import subprocess
import time

import pytest

from conftest import UID_BASE


def err(p):
    return p.stderr.decode()


def test_unknown_options_are_named(airlock):
    cases = [
        (["sandbox", "run", "-w", "/tmp", "--", "true"],
         "airlock: unknown option -w (see `airlock sandbox --help`)\n"),
        # a cluster of short options: the first unknown one, not the word before
        (["sandbox", "run", "-it", "/tmp"],
         "airlock: unknown option -i (see `airlock sandbox --help`)\n"),
        (["sandbox", "run", "--nope", "--", "true"],
         "airlock: unknown option --nope (see `airlock sandbox --help`)\n"),
        (["sandbox", "run", "--memory"], "airlock: option --memory needs a value\n"),
        (["sandbox", "run", "--help=x"], "airlock: option --help takes no value\n"),
        (["checkpoint", "ls", "-q"],
         "airlock: unknown option -q (see `airlock checkpoint --help`)\n"),
        (["checkpoint", "export", "0" * 64, "-o"],
         "airlock: option -o (--output) needs a value\n"),
        (["checkpoint", "ls", "0" * 64, "--keep-last", "1"],
         "airlock: --keep-last, --keep-days, --max-unused and --dry-run are options of "
         "`checkpoint gc` only\n"),
    ]
    for args, want in cases:
        p = airlock(*args)
        assert (p.returncode, err(p)) == (125, want), args


def test_values_may_follow_an_equals_sign(airlock, tmp_path):
    store, key = tmp_path / "store", tmp_path / "key"
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_text("x")
    p = airlock("checkpoint", "create", f"--workspace={ws}", f"--store={store}", f"--key={key}",
                "--session=s1", check=True)
    cid = p.stdout.decode().strip()
    p = airlock("checkpoint", "gc", "--keep-last=1", "--dry-run", f"--store={store}",
                f"--key={key}", check=True)
    assert p.stdout.startswith(b"gc (dry run, nothing deleted): 0 checkpoints deleted, 1 kept")
    out = tmp_path / "x.tar"
    airlock("checkpoint", "export", cid, f"--output={out}", f"--store={store}", f"--key={key}",
            check=True)
    assert out.stat().st_size > 0
    p = airlock("sandbox", "run", "--memory=64M", "--pids=64", "--", "true")
    assert p.returncode == 0, err(p)


def test_every_command_has_help(airlock):
    commands = [
        ["sandbox"], ["sandbox", "run"], ["sandbox", "create"], ["sandbox", "exec"],
        ["sandbox", "list"], ["sandbox", "destroy"], ["sandbox", "audit"], ["sandbox", "policy"],
        ["sandbox", "budget"], ["sandbox", "gc"], ["gateway"], ["checkpoint"],
        ["checkpoint", "create"], ["checkpoint", "restore"], ["checkpoint", "gc"],
        ["checkpoint", "export"], ["run"], ["turn"], ["session"], ["events"], ["diff"],
        ["fork"], ["cancel"], ["vault"], ["doctor"], ["version"], ["help"],
    ]
    for c in commands:
        p = airlock(*c, "--help")
        assert p.returncode == 0 and p.stdout.startswith(b"usage:") and p.stderr == b"", (c, p)
    # The top level lists every command it has.
    top = airlock("--help", check=True).stdout.decode()
    for name in ("run", "turn", "session", "events", "diff", "fork", "cancel", "vault",
                 "sandbox", "gateway", "checkpoint", "doctor", "version", "help"):
        assert re.search(rf"^  {name}( |$)", top, re.M), name


def test_options_after_the_sandbox_id_get_a_hint(airlock):
    p = airlock("sandbox", "create", check=True)
    sid = p.stdout.decode().strip()
    try:
        p = airlock("sandbox", "exec", sid, "--env", "A=1", "--", "true")
        assert (p.returncode, err(p)) == (
            125, f"airlock: options go before the sandbox id: airlock sandbox exec [OPTIONS] "
                 f"{sid} -- CMD (found '--env' after the id)\n")
        # where they belong, they work
        p = airlock("sandbox", "exec", "--env", "A=1", sid, "--", "sh", "-c", "echo $A")
        assert (p.returncode, p.stdout) == (0, b"1\n"), p
    finally:
        airlock("sandbox", "destroy", sid, check=True)


def test_destroy_takes_several(airlock):
    ids = [airlock("sandbox", "create", check=True).stdout.decode().strip() for _ in range(2)]
    p = airlock("sandbox", "destroy", *ids, "0123456789abcdef")
    assert p.returncode == 125
    assert err(p) == "airlock: no sandbox with id 0123456789abcdef\n"
    assert airlock("sandbox", "list", check=True).stdout.decode().count("running") == 0
    p = airlock("sandbox", "destroy", "not-an-id")
    assert (p.returncode, err(p)) == (
        125, "airlock: 'not-an-id' is not a sandbox id (nothing was destroyed)\n")


def test_a_rule_with_a_url_scheme_says_so(airlock, tmp_path):
    p = airlock("sandbox", "run", "--allow", "https://example.com/x", "--", "true")
    assert (p.returncode, err(p)) == (
        125, "airlock: --allow https://example.com/x: a rule takes no URL scheme "
             "(HOST[:PORT][/PATH], e.g. --allow example.com/x)\n")
    pol = tmp_path / "policy.yaml"
    pol.write_text("rules:\n  - host: https://example.com\n")
    p = airlock("sandbox", "run", "--policy", str(pol), "--", "true")
    assert p.returncode == 125
    assert "a host takes no URL scheme" in err(p) and "policy.yaml" in err(p), err(p)


def test_uid_base_in_hex(airlock):
    p = airlock("sandbox", "run", "--", "true", env={"AIRLOCK_UID_BASE": hex(UID_BASE)})
    assert p.returncode == 0, err(p)
    p = airlock("sandbox", "run", "--", "true", env={"AIRLOCK_UID_BASE": "0x1z"})
    assert (p.returncode, err(p)) == (
        125, "airlock: AIRLOCK_UID_BASE must be a uid (decimal, or hex as 0x60000000) from "
             "65536 leaving room for 4096 ranges of 65536 below 2^31, not '0x1z'\n")


def test_log_level(airlock):
    p = airlock("sandbox", "run", "--", "true", env={"AIRLOCK_LOG_LEVEL": "debug"})
    assert p.returncode == 0, err(p)
    lines = err(p).splitlines()
    assert any(re.fullmatch(r"airlock: sandbox [0-9a-f]{16}: state .*, uids 0x[0-9a-f]+-0x[0-9a-f]+ "
                            r"\(slot \d+\), image host, workspace \(fresh\), network none", l)
               for l in lines), lines
    assert any(re.search(r": cgroup \S+ \(v[12]\), memory 4294967296, pids 4096", l)
               for l in lines), lines
    assert "airlock: command ended: outcome 0, status 0, 0 OOM kills" in lines
    # the default says nothing when all is well
    p = airlock("sandbox", "run", "--", "true")
    assert (p.returncode, p.stderr) == (0, b"")
    for var, val, want in (
            ("AIRLOCK_LOG_LEVEL", "verbose",
             "airlock: AIRLOCK_LOG_LEVEL wants error, warning, info or debug, not 'verbose'\n"),
            ("AIRLOCK_LOG_FORMAT", "xml",
             "airlock: AIRLOCK_LOG_FORMAT wants human or json, not 'xml'\n")):
        p = airlock("version", env={var: val})
        assert (p.returncode, err(p), p.stdout) == (125, want, b""), var


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_gateway_says_where_it_listens(airlock):
    port = free_port()
    p = subprocess.Popen([airlock.bin, "gateway", "--listen", f"127.0.0.1:{port}", "--allow",
                          "example.com"], env=airlock.env, stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL)
    try:
        ready, _, _ = select.select([p.stderr], [], [], 30)
        assert ready, "the gateway said nothing in 30 s"
        line = p.stderr.readline().decode()
        assert line == (f"airlock gateway: listening on 127.0.0.1:{port} (HTTP proxy; clients "
                        f"trust the CA it made)\n")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)

# SPDX-License-Identifier: Apache-2.0
"""The command line as people use it: options and their errors, --help
everywhere, values written in hex, the log level. Every message is checked
word for word: they are what a user reads."""
import json
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
        (["checkpoint", "restore", "--ke", "1"],
         "airlock: option --ke is ambiguous: --key, --keep-last, --keep-days\n"),
        (["sandbox", "create", "-\u00e9"],
         "airlock: unknown option -\\xc3 (see `airlock sandbox --help`)\n"),
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
        125, "airlock: 'not-an-id' is not a sandbox id (16 hex digits, or at least the first 4 "
             "of them) (nothing was destroyed)\n")


def test_a_rule_with_a_url_scheme_says_so(airlock, tmp_path):
    p = airlock("sandbox", "run", "--allow", "https://example.com/x", "--", "true")
    assert (p.returncode, err(p)) == (
        125, "airlock: --allow https://example.com/x: a rule takes no URL scheme "
             "(HOST[:PORT][/PATH], e.g. --allow example.com/x)\n")
    # "://" further on is part of a path, not a scheme
    p = airlock("sandbox", "run", "--allow", "web.archive.org/web/2020/https://example.com/",
                "--", "true")
    assert p.returncode == 125 and "URL scheme" not in err(p), err(p)
    pol = tmp_path / "policy.yaml"
    pol.write_text("rules:\n  - host: https://example.com\n")
    p = airlock("sandbox", "run", "--policy", str(pol), "--", "true")
    assert p.returncode == 125
    assert "a host takes no URL scheme" in err(p) and "policy.yaml" in err(p), err(p)


def test_uid_base_in_hex(airlock):
    p = airlock("sandbox", "run", "--", "true", env={"AIRLOCK_UID_BASE": hex(UID_BASE)})
    assert p.returncode == 0, err(p)
    p = airlock("sandbox", "run", "--", "true", env={"AIRLOCK_UID_BASE": "0xfffffffffc000000"})
    assert p.returncode == 125 and "AIRLOCK_UID_BASE must be a uid" in err(p), err(p)
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


def test_sandbox_list_and_inspect(airlock, workspace):
    p = airlock("sandbox", "list", check=True)
    assert p.stdout.decode() == f"no sandboxes in {airlock.state_dir}\n"
    assert airlock("sandbox", "list", "--json", check=True).stdout == b"[]\n"
    made = json.loads(airlock("sandbox", "create", "--json", "--workspace", str(workspace),
                              check=True).stdout)
    sid = made["id"]
    # a `run` in progress is listed too
    run = subprocess.Popen([airlock.bin, "sandbox", "run", "--allow", "example.com", "--",
                            "sleep", "30"], env=airlock.env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            rows = json.loads(airlock("sandbox", "list", "--json", check=True).stdout)
            if len(rows) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        kinds = {r["id"]: r for r in rows}
        assert len(kinds) == 2, rows
        mine, other = kinds.pop(sid), list(kinds.values())[0]
        assert (mine["kind"], mine["state"], mine["network"], mine["workspace"]) == (
            "create", "running", "none", str(workspace))
        assert (other["kind"], other["state"], other["network"]) == ("run", "running",
                                                                      "restricted")
        text = airlock("sandbox", "list", check=True).stdout.decode().splitlines()
        assert text[0].split() == ["ID", "KIND", "STATE", "CREATED", "NETWORK", "IMAGE", "OOM",
                                   "EXPIRES", "WORKSPACE"]
        row = [l for l in text if l.startswith(sid)][0]
        assert row.endswith("  " + str(workspace)) and " create " in row, row
    finally:
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=30)
    try:
        # inspect, by a unique prefix
        p = airlock("sandbox", "inspect", sid[:6], check=True)
        assert f"id:         {sid}\n" in p.stdout.decode()
        assert f"workspace:  {workspace}\n" in p.stdout.decode()
        info = json.loads(airlock("sandbox", "inspect", sid, "--json", check=True).stdout)
        # inspect: what list says, and its detached commands (none here).
        assert info == mine | {"oom_kills": info["oom_kills"], "detached": []}
        assert info["uids"][1] - info["uids"][0] == 65535
        p = airlock("sandbox", "exec", sid[:5], "--", "true")
        assert p.returncode == 0, p
        p = airlock("sandbox", "inspect", "zz")
        assert (p.returncode, err(p)) == (
            125, "airlock: 'zz' is not a sandbox id (16 hex digits, or at least the first 4 of "
                 "them)\n")
        p = airlock("sandbox", "inspect", "0000000000000000")
        assert (p.returncode, err(p)) == (125, "airlock: no sandbox with id 0000000000000000\n")
    finally:
        airlock("sandbox", "destroy", sid[:4], check=True)


def test_checkpoint_ids_log_and_restore_in_place(airlock, tmp_path):
    store, key = tmp_path / "store", tmp_path / "key"
    ck = lambda *a, **kw: airlock("checkpoint", *a, "--store", str(store), "--key", str(key),
                                  **kw)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a").write_text("one\n")
    c1 = ck("create", "--workspace", str(ws), check=True).stdout.decode().strip()
    (ws / "b").write_text("two\n")
    c2 = ck("create", "--workspace", str(ws), check=True).stdout.decode().strip()
    # the log, newest first; as JSON too
    lines = ck("log", check=True).stdout.decode().splitlines()
    assert [l.split()[0] for l in lines] == [c2, c1]
    assert [e["id"] for e in json.loads(ck("log", "--json", check=True).stdout)] == [c2, c1]
    p = ck("log", "--session", "nobody", check=True)
    assert (p.stdout, err(p)) == (b"", "airlock: warning: session nobody has no checkpoints\n")
    # unique prefixes
    assert ck("diff", c1[:6], c2[:7], check=True).stdout == b"A b\n"
    p = ck("ls", "00zz")
    assert (p.returncode, err(p)) == (
        125, "airlock: '00zz' is not a checkpoint id (64 hex digits, or at least the first 4 "
             "of them)\n")
    # restore in place: refused without --force; with it, one rename, the
    # directory's mode and owner kept
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o751)
    os.chown(out, 1000, 1000)
    (out / "old").write_text("old\n")
    p = ck("restore", c1[:8], "--to", str(out))
    assert (p.returncode, err(p)) == (
        125, f"airlock: {out} is not empty (--force: replace what it holds, as one rename once "
             f"the restore is whole)\n")
    # what a restore stopped by a signal left beside it (root's, 0700, not
    # locked) goes with the next --force; anything else there stays
    stale = tmp_path / ".out.restore-0123456789abcdef"
    stale.mkdir(mode=0o700)
    (stale / "junk").write_text("x")
    users = tmp_path / ".out.restore-fedcba9876543210"
    users.mkdir(mode=0o700)
    os.chown(users, 1000, 1000)
    ck("restore", c1[:8], "--to", str(out), "--force", check=True)
    assert not stale.exists() and users.exists()
    users.rmdir()
    assert sorted(os.listdir(out)) == ["a"]
    st = os.stat(out)
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o751, 1000, 1000)
    assert sorted(os.listdir(tmp_path)) == ["key", "out", "store", "ws"]
    # a restore that fails leaves the old tree as it was, and nothing beside it
    p = ck("restore", "0" * 64, "--to", str(out), "--force")
    assert p.returncode == 125 and f"({out} is as it was)" in err(p), err(p)
    assert sorted(os.listdir(out)) == ["a"]
    assert sorted(os.listdir(tmp_path)) == ["key", "out", "store", "ws"]
    ck("restore", c2, "--to", str(out), "--force", "--owner", "1000:1000", check=True)
    assert sorted(os.listdir(out)) == ["a", "b"]
    assert os.stat(out / "b").st_uid == 1000


def test_denials_are_summed_up_where_users_look(airlock):
    """A refused request says why and what would allow it: in the 403 body,
    and in a summary at the end of `sandbox run` and of each exec."""
    script = ("curl -s http://10.1.2.3/; "
              "for i in 1 2 3; do curl -s -o /dev/null https://deb.debian.org/; done; "
              "curl -s http://deb.debian.org:8080/x")
    p = airlock("sandbox", "run", "--allow", "10.1.2.3", "--", "sh", "-c", script, timeout=120)
    assert p.returncode == 0, p
    assert p.stdout.decode() == (
        "airlock: 10.1.2.3 is a refused address: private (rule allow-1)\n"
        "airlock: to allow it: --allow-cidr 10.1.2.3/32, or allow_cidrs: [10.1.2.3/32] in a "
        "--policy file\n"
        "airlock: no rule allows this request\n"
        "airlock: to allow it: --allow deb.debian.org:8080\n")
    assert err(p) == (
        "airlock: warning: the gateway refused 5 requests (--audit FILE keeps each):\n"
        "airlock: warning:   10.1.2.3:80  1x  10.1.2.3 is a refused address: private  "
        "(to allow it: --allow-cidr 10.1.2.3/32, or allow_cidrs: [10.1.2.3/32] in a --policy "
        "file)\n"
        "airlock: warning:   deb.debian.org:443  3x  no rule allows this host  "
        "(to allow it: --allow deb.debian.org:443)\n"
        "airlock: warning:   deb.debian.org:8080  1x  no rule allows this request  "
        "(to allow it: --allow deb.debian.org:8080)\n"), err(p)
    # nothing refused, nothing said
    p = airlock("sandbox", "run", "--allow", "example.com", "--", "true")
    assert (p.returncode, p.stderr) == (0, b"")
    # a persistent sandbox: after each exec, what that exec was refused
    sid = airlock("sandbox", "create", "--allow", "example.com", check=True).stdout.decode().strip()
    try:
        p = airlock("sandbox", "exec", sid, "--", "curl", "-s", "-o", "/dev/null",
                    "https://deb.debian.org/")
        assert err(p) == (
            "airlock: warning: the gateway refused requests (the audit log has each):\n"
            "airlock: warning:   deb.debian.org:443  no rule allows this host  "
            "(to allow it: --allow deb.debian.org:443)\n"), err(p)
        p = airlock("sandbox", "exec", sid, "--", "true")
        assert (p.returncode, p.stderr) == (0, b"")
    finally:
        airlock("sandbox", "destroy", sid, check=True)


def test_a_runs_sandbox_is_destroyed_with_its_command(airlock):
    run = subprocess.Popen([airlock.bin, "sandbox", "run", "--", "sleep", "60"], env=airlock.env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        rows = []
        while not rows and time.monotonic() < deadline:
            rows = json.loads(airlock("sandbox", "list", "--json", check=True).stdout)
            time.sleep(0.05)
        assert rows and rows[0]["kind"] == "run", rows
        t0 = time.monotonic()
        airlock("sandbox", "destroy", rows[0]["id"][:6], check=True)
        assert time.monotonic() - t0 < 15
        assert run.wait(timeout=30) == 125
        assert run.stderr.read().decode() == (
            "airlock: the sandbox ended without reporting a status (destroyed, or killed "
            "from outside)\n")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_listing_paths_that_are_not_utf8_and_sandboxes_of_an_earlier_version(airlock, tmp_path):
    ws = os.fsencode(tmp_path) + b"/w\xe9"
    os.mkdir(ws)
    os.chown(ws, 1000, 1000)
    p = airlock("sandbox", "create", "--json", "--workspace", ws, check=True)
    info = json.loads(p.stdout)
    sid = info["id"]
    try:
        assert info["workspace"] is None
        assert bytes.fromhex(info["workspace_hex"]) == ws
        # the state file is what an earlier version reads: the network mode
        # is beside it; a sandbox without it (an earlier version's) lists
        state = open(os.path.join(airlock.state_dir, sid, "state"), "rb").read()
        assert b"network" not in state
        os.unlink(os.path.join(airlock.state_dir, sid, "network"))
        row = json.loads(airlock("sandbox", "inspect", sid, "--json", check=True).stdout)
        assert row["network"] is None
        assert b" ? " in airlock("sandbox", "list", check=True).stdout
    finally:
        airlock("sandbox", "destroy", sid, check=True)


def test_a_root_owned_workspace_gets_the_one_line_that_fixes_it(airlock, tmp_path):
    ws = tmp_path / "project"
    ws.mkdir()
    (ws / "README").write_text("x\n")
    p = airlock("sandbox", "run", "--workspace", str(ws), "--", "true")
    assert (p.returncode, err(p)) == (
        125, f"airlock: workspace {ws} is owned by root and not empty, so files made inside "
             f"would be root's on the host; give it to an unprivileged user and group: chown "
             f"-R USER:GROUP {ws}\n")
    # the advice half followed (the user, not the group): the next line says the rest
    subprocess.run(["chown", "-R", "1000", str(ws)], check=True)
    p = airlock("sandbox", "run", "--workspace", str(ws), "--", "true")
    assert (p.returncode, err(p)) == (
        125, f"airlock: workspace {ws} belongs to group root, so files made inside would be "
             f"root's on the host; give it its owner's group: chown -R 1000:GROUP {ws}\n")
    subprocess.run(["chown", "-R", "1000:1000", str(ws)], check=True)
    p = airlock("sandbox", "run", "--workspace", str(ws), "--", "cat", "/workspace/README")
    assert (p.returncode, p.stdout) == (0, b"x\n"), p


def test_network_learn_prints_the_rules_a_command_needed(airlock):
    """--network learn lets a command out as open does and prints the
    --allow rules a restricted sandbox would have needed; what the open
    network refuses anyway (the address vetting) is summed up as usual."""
    script = ("curl -s -o /dev/null http://example.test/a; curl -s -o /dev/null "
              "http://example.test/b; curl -s -o /dev/null http://other.test:8080/; "
              "curl -s -o /dev/null http://10.1.2.3/")
    # the upstreams are a closed port: what is learned is what was asked
    ups = ["--upstream", "example.test:80=127.0.0.1:1", "--upstream", "other.test:8080=127.0.0.1:1"]
    p = airlock("sandbox", "run", "--network", "learn", *ups, "--", "sh", "-c", script,
                timeout=120)
    assert p.returncode == 0, p
    assert err(p) == (
        "airlock: warning: --network learn: the rules this command needed:\n"
        "airlock: warning:   --allow example.test:80\n"
        "airlock: warning:   --allow other.test:8080\n"
        "airlock: warning: the gateway refused 1 request (--audit FILE keeps each):\n"
        "airlock: warning:   10.1.2.3:80  1x  10.1.2.3 is a refused address: private  "
        "(to allow it: --allow-cidr 10.1.2.3/32, or allow_cidrs: [10.1.2.3/32] in a --policy "
        "file)\n"), err(p)
    sid = airlock("sandbox", "create", "--network", "learn", *ups, check=True).stdout.decode().strip()
    try:
        assert json.loads(airlock("sandbox", "inspect", sid, "--json",
                                  check=True).stdout)["network"] == "learn"
        p = airlock("sandbox", "exec", sid, "--", "curl", "-s", "-o", "/dev/null",
                    "http://other.test:8080/")
        assert err(p) == ("airlock: warning: --network learn: the rules this command needed:\n"
                          "airlock: warning:   --allow other.test:8080\n"), err(p)
    finally:
        airlock("sandbox", "destroy", sid, check=True)
    p = airlock("sandbox", "run", "--network", "lern", "--", "true")
    assert (p.returncode, err(p)) == (
        125, "airlock: --network wants none, restricted, open or learn, not 'lern'\n")


def test_audit_file_is_a_regular_file_named_as_is(airlock, tmp_path):
    """--audit FILE is appended to as root: not through a link (one planted
    in a directory someone else can write), never a FIFO or a device."""
    real = tmp_path / "audit.jsonl"
    link = tmp_path / "link.jsonl"
    os.symlink(real, link)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, why in [
        (link, f"{link} is a symbolic link: an audit log is opened without following one "
               f"(give the file it names)"),
        (fifo, f"{fifo} is not a regular file (an audit log must be one)"),
        ("/dev/null", "/dev/null is not a regular file (an audit log must be one)"),
    ]:
        p = airlock.run("--audit", str(path), "--", "true", timeout=30)
        assert (p.returncode, err(p)) == (125, f"airlock: {why}\n"), p
        p = airlock("gateway", "--listen", "127.0.0.1:0", "--mode", "open", "--audit", str(path),
                    timeout=30)
        assert (p.returncode, err(p)) == (125, f"airlock: {why}\n"), p
    assert not real.exists()
    p = airlock.run("--audit", str(real), "--", "true", timeout=30)
    assert p.returncode == 0, p
    assert real.is_file()

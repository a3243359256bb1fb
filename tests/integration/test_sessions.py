# SPDX-License-Identifier: Apache-2.0
"""Sessions and turns (`airlock run`, `turn`, `session`, `events`, `diff`,
`fork`, `cancel`) with a stand-in agent (fake_agent.py, speaking Claude
Code's stream-json): the whole lifecycle, restore semantics, cancel,
queueing, forks, envelopes that lie, floods, secrets, bad input, kill -9.
The real agent CLIs are in test_agents.py."""
import json
import os
import pathlib
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import REPO, TEST_UID, UID_BASE, UID_END

FAKE = (pathlib.Path(__file__).parent / "fake_agent.py").read_text()


def config_text(state, extra_preset="", network="none"):
    """Two stand-in agents (with and without "--" before the message) and
    their presets, each setup installing fake_agent.py; extra_preset: more
    keys for the preset `fake`."""
    script = textwrap.indent(FAKE, " " * 10)
    setup = f"""    setup:
      commands:
        - |
          mkdir -p /opt/airlock/bin
          cat > /opt/airlock/bin/fake-agent <<'AIRLOCK_EOF'
{script}
          AIRLOCK_EOF
          chmod 755 /opt/airlock/bin/fake-agent
"""
    agents = ""
    for name, dashes, home in (("fake", "--, ", "/root"), ("fake-nodash", "", "/root"),
                               ("fake-homedir", "--, ", "/home/agent")):
        agents += f"""  {name}:
    title: Fake agent
    parser: claude
    home: {home}
    session: choose
    first: [fake-agent, -p, --session-id, "{{session}}", {dashes}"{{prompt}}"]
    resume: [fake-agent, -p, --resume, "{{session}}", {dashes}"{{prompt}}"]
    model_hosts:
      - {{host: api.anthropic.com, secret: anthropic, header: x-api-key}}
"""
    presets = ""
    for name, agent, limits, extra in (
            ("fake", "fake", "turn_time: 60s, output: 4M", extra_preset),
            ("fake-nodash", "fake-nodash", "turn_time: 60s", "    github: [a/*]\n"),
            ("fake-short", "fake", "turn_time: 2s, output: 4M", ""),
            ("fake-homedir", "fake-homedir", "turn_time: 60s, output: 4M", ""),
            ("fake-disk", "fake", "turn_time: 60s, output: 4M, disk: 32M", "")):
        presets += f"""  {name}:
    agent: {agent}
    network: {network}
    limits: {{memory: 512M, {limits}}}
{setup}{extra}
"""
    return f"state_dir: {state}\nagents:\n{agents}presets:\n{presets}"


class Ctl:
    """airlock's session commands against one test's config and state."""

    def __init__(self, airlock, tmp_path, **kw):
        self.a = airlock
        self.state = tmp_path / "state"
        self.conf = tmp_path / "airlock.yaml"
        self.conf.write_text(config_text(self.state, **kw))

    def __call__(self, *args, timeout=120, **kw):
        return self.a(args[0], "--config", str(self.conf), *args[1:], timeout=timeout, **kw)

    def run(self, prompt, *opts, **kw):
        return self("run", "--preset", "fake", "--json", *opts, prompt, **kw)

    def turn(self, session, prompt, **kw):
        return self("turn", "--json", session, prompt, **kw)

    @staticmethod
    def lines(p):
        return [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]

    def result(self, p):
        r = [l["result"] for l in self.lines(p) if "result" in l]
        assert r, f"no result: {p.stdout!r} {p.stderr!r}"
        return r[-1]

    def session_of(self, p):
        s = [l["session"] for l in self.lines(p) if "session" in l and len(l) == 1]
        assert s, f"no session id: {p.stdout!r} {p.stderr!r}"
        return s[0]

    @staticmethod
    def session_of_human(p):
        s = [l for l in p.stderr.decode().splitlines() if l.startswith("airlock: session ")]
        assert s, p.stderr
        return s[0].split()[-1]

    def show(self, sid):
        p = self("session", "show", "--json", sid, check=True)
        lines = self.lines(p)
        return lines[0], [l["result"] for l in lines[1:]]

    def events(self, sid):
        return self.lines(self("events", "--json", sid, check=True))

    def stop_all(self):
        """Deletes every session: their sandboxes go with them."""
        p = self("session", "list", "--json")
        for s in self.lines(p):
            self("session", "rm", s["id"])


@pytest.fixture
def ctl(airlock, tmp_path):
    c = Ctl(airlock, tmp_path)
    yield c
    c.stop_all()


def texts(events):
    return [e["data"].get("text", "") for e in events if e["kind"] == "text"]


def our_processes(name="fake-agent"):
    """Processes of the tests' sandbox ranges whose command line holds name."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if UID_BASE <= uid < UID_END and name.encode() in cmd:
            out.append(pid)
    return out


# ---- the lifecycle ----

def test_run_turns_checkpoint_diff_resume(ctl, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("hello\n")
    os.chown(repo, TEST_UID, TEST_UID)
    p = ctl.run("write notes.txt first words", "--repo", str(repo))
    assert p.returncode == 0, p.stderr
    sid = ctl.session_of(p)
    r = ctl.result(p)
    assert r["state"] == "succeeded" and r["turn"] == 1 and len(r["checkpoint"]) == 64
    assert r["usage"]["input_tokens"] > 0 and r["usage"]["output_tokens"] == 7
    assert abs(r["usage"]["cost_usd"] - 0.0012) < 1e-9
    # The events, normalized: the tool call, its result, the text.
    kinds = [e["kind"] for e in ctl.events(sid)]
    assert "tool_call" in kinds and "tool_result" in kinds and "text" in kinds
    # The diff of turn 1: the new file, the copied one unchanged.
    d = ctl("diff", sid, check=True).stdout.decode()
    assert "A notes.txt" in d and "README" not in d
    # Turn 2 resumes the agent's session: it remembers turn 1.
    p2 = ctl.turn(sid, "recall")
    assert p2.returncode == 0, p2.stderr
    assert any("write notes.txt first words" in t for t in texts(ctl.events(sid)))
    s, turns = ctl.show(sid)
    assert s["turns"] == 2 and [t["state"] for t in turns] == ["succeeded", "succeeded"]
    assert s["last_checkpoint"] == turns[1]["checkpoint"]


def test_human_output(ctl):
    p = ctl("run", "--preset", "fake", "write a.txt hi")
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert "-> Write" in out and "turn 1 succeeded" in out
    assert "A a.txt" in out
    assert b"session " in p.stderr


# ---- promise 9: the sandbox between turns ----

def last_text(ctl, sid):
    t = texts(ctl.events(sid))
    return t[-1] if t else ""


def test_state_outside_workspace_kept_between_turns_gone_after_failure(ctl):
    p = ctl.run("outside")
    assert p.returncode == 0, p.stderr
    sid = ctl.session_of(p)
    # The live sandbox holds the last checkpoint: what the agent left
    # outside /workspace is still there.
    assert ctl.turn(sid, "checkoutside").returncode == 0
    assert last_text(ctl, sid) == "outside: present"
    # A failed turn discards the sandbox; the next starts from the last
    # checkpoint, which holds /workspace and the agent's home only.
    assert ctl.turn(sid, "crash").returncode == 1
    assert ctl.turn(sid, "checkoutside").returncode == 0
    assert last_text(ctl, sid) == "outside: absent"
    # ... and the agent still remembers (its history is in the checkpoint).
    assert ctl.turn(sid, "recall").returncode == 0
    assert "outside | checkoutside" in last_text(ctl, sid)
    s, turns = ctl.show(sid)
    assert [t["state"] for t in turns] == ["succeeded", "succeeded", "failed", "succeeded",
                                          "succeeded"]


def test_lost_sandbox_restored_from_checkpoint(ctl):
    p = ctl.run("write kept.txt data")
    sid = ctl.session_of(p)
    s, _ = ctl.show(sid)
    assert s["sandbox"]
    # The sandbox dies (killed, crashed, host rebooted): destroyed behind
    # airlock's back.
    ctl.a.sandbox("destroy", s["sandbox"], check=True)
    assert ctl.turn(sid, "recall").returncode == 0
    s2, _ = ctl.show(sid)
    assert s2["sandbox"] and s2["sandbox"] != s["sandbox"]
    d = ctl("diff", sid, "1", check=True).stdout.decode()
    assert "A kept.txt" in d


def test_setup_once_tools_read_only(ctl):
    # Setup ran once for the preset's version; a second session reuses it.
    p1 = ctl("run", "--preset", "fake", "writetools")
    assert p1.returncode == 0, p1.stderr
    assert b"setting up preset fake" in p1.stderr
    sid = [l for l in p1.stderr.decode().splitlines() if l.startswith("airlock: session ")]
    sid = sid[0].split()[-1]
    assert last_text(ctl, sid) == "tools: Read-only file system"
    p2 = ctl("run", "--preset", "fake", "recall")
    assert p2.returncode == 0 and b"setting up" not in p2.stderr
    tools = list((ctl.state / "tools").iterdir())
    assert [t.name for t in tools if not t.name.endswith(".lock")] and \
        not [t for t in tools if t.name.endswith((".tmp", ".scratch"))]


# ---- outcomes come from the envelope only ----

@pytest.mark.parametrize("verb,why", [
    ("crash", "killed by signal 9"),
    ("noenvelope", "no result"),
    ("truncated", ""),
    ("lie", "no result"),
    ("apierror", "401"),
    ("exit1", ""),
])
def test_failed_turns(ctl, verb, why):
    p = ctl.run(verb)
    assert p.returncode == 1, (p.stdout, p.stderr)
    r = ctl.result(p)
    assert r["state"] == "failed" and r["checkpoint"] == ""
    assert r["reason"]
    assert why in r["reason"], r["reason"]
    # No checkpoint of a failed turn, and its sandbox went.
    s, _ = ctl.show(ctl.session_of(p))
    assert s["sandbox"] == ""
    assert len(s["last_checkpoint"]) == 64  # the starting point only


def test_flood_bounded(ctl):
    # 4M output limit: about 4,000 lines of 1,000 bytes; 20,000 passes it.
    p = ctl.run("flood 20000", timeout=300)
    assert p.returncode == 1
    assert "limit" in ctl.result(p)["reason"]


def test_events_batched_and_capped_per_turn(ctl):
    # Small events in their tens of thousands (well inside the output
    # limit): stored in order, in batches, up to the per-turn cap; the rest
    # counted in one last status event.
    t0 = time.monotonic()
    p = ctl.run("many 25000", timeout=300)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    ev = ctl.events(ctl.session_of(p))
    assert [e["seq"] for e in ev] == list(range(1, len(ev) + 1))
    got = [e["data"]["text"] for e in ev if e["kind"] == "text"]
    assert got[:3] == ["e0", "e1", "e2"] and len(got) < 20000
    assert got == [f"e{i}" for i in range(len(got))]
    assert len(ev) == 20001, len(ev)
    last = ev[-1]
    assert last["kind"] == "status" and "were not stored (at most 20000 per turn)" in \
        last["data"]["message"], last
    more = int(last["data"]["message"].split()[0])
    assert more + 20000 > 25000
    print(f"25,000 events in {took:.1f} s")


def test_secrets_redacted_in_events(ctl):
    key = "sk-ant-api03-" + "Q" * 80 + "-AAAAAA"
    p = ctl.run("secret " + key)
    sid = ctl.session_of(p)
    all_out = ctl("events", "--json", sid).stdout
    assert key.encode() not in all_out and key.encode() not in p.stdout
    assert b"[REDACTED]" in all_out


# ---- cancel, queueing ----

def wait_for(cond, timeout=60, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def start_turn(ctl, sid, prompt):
    return subprocess.Popen([ctl.a.bin, "turn", "--config", str(ctl.conf), "--json", sid,
                             prompt], env=ctl.a.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def turn_states(ctl, sid):
    return [t["state"] for t in ctl.show(sid)[1]]


def test_cancel_kills_agent_and_everything_it_started(ctl):
    sid = ctl.session_of(ctl.run("recall"))
    proc = start_turn(ctl, sid, "sleep 300")
    wait_for(lambda: turn_states(ctl, sid)[-1] == "running" and
             "sleeping" in texts(ctl.events(sid)), what="the turn to run")
    assert our_processes()
    p = ctl("cancel", sid)
    assert p.returncode == 0, p.stderr
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    # Terminal: cancelled, whatever the runner saw afterwards.
    assert turn_states(ctl, sid) == ["succeeded", "cancelled"]
    # The agent, and the child it left behind, are gone.
    wait_for(lambda: not our_processes(), timeout=20, what="the agent's processes to go")
    # Nothing to cancel now.
    assert ctl("cancel", sid).returncode == 125
    # The next turn starts from the last checkpoint.
    assert ctl.turn(sid, "recall").returncode == 0


def test_turns_queue(ctl):
    sid = ctl.session_of(ctl.run("recall"))
    first = start_turn(ctl, sid, "sleep 3")
    wait_for(lambda: turn_states(ctl, sid)[-1] == "running", what="the first turn")
    second = start_turn(ctl, sid, "write after.txt x")
    wait_for(lambda: len(turn_states(ctl, sid)) == 3, what="the second turn to queue")
    assert turn_states(ctl, sid) == ["succeeded", "running", "queued"]
    assert first.wait(timeout=60) == 0
    assert second.wait(timeout=60) == 0
    assert turn_states(ctl, sid) == ["succeeded"] * 3


# ---- fork ----

def test_fork_isolated(ctl):
    sid = ctl.session_of(ctl.run("write base.txt b"))
    fa = ctl("fork", sid, check=True).stdout.decode().strip()
    fb = ctl("fork", sid, check=True).stdout.decode().strip()
    assert fa != fb and len(fa) == 16
    assert ctl.turn(fa, "write only-a.txt a").returncode == 0
    assert ctl.turn(fb, "write only-b.txt b").returncode == 0
    assert ctl.turn(fb, "recall").returncode == 0
    # The fork remembers the parent's conversation, not its sibling's.
    assert "write base.txt b | write only-b.txt b" in last_text(ctl, fb)
    da = ctl("diff", fa, "1", check=True).stdout.decode()
    db = ctl("diff", fb, "1", check=True).stdout.decode()
    assert "only-a.txt" in da and "only-b.txt" not in da
    assert "only-b.txt" in db and "only-a.txt" not in db


def test_fork_of_a_checkpoint_and_delete_keeps_forks(ctl):
    p = ctl.run("write one.txt 1")
    sid = ctl.session_of(p)
    first = ctl.result(p)["checkpoint"]
    assert ctl.turn(sid, "write two.txt 2").returncode == 0
    f = ctl("fork", first[:12], check=True).stdout.decode().strip()
    # The parent goes; the fork's starting point stays.
    assert ctl("session", "rm", sid).returncode == 0
    assert ctl("session", "show", sid).returncode == 125
    assert ctl.turn(f, "write three.txt 3").returncode == 0
    d = ctl("diff", f, check=True).stdout.decode()
    assert "A three.txt" in d and "two.txt" not in d


def test_delete_really_deletes(ctl):
    sid = ctl.session_of(ctl.run("write gone.txt " + "unique-content-" * 50))
    s, _ = ctl.show(sid)
    store = ctl.state / "store"
    def manifests():
        return sorted(p.name for p in store.rglob("manifests/*"))
    before = manifests()
    assert before
    assert ctl("session", "rm", sid).returncode == 0
    assert manifests() == []
    assert not (ctl.state / "sessions" / "local" / sid).exists()
    assert ctl.a.sandbox("list").stdout.decode().find(s["sandbox"]) < 0
    assert ctl("session", "show", sid).returncode == 125


# ---- layered workspaces ----

def tree_of(ctl, sid):
    sdir = ctl.state / "sessions" / "local" / sid
    return sdir / (sdir / "current").read_text()


def files_under(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if not p.is_dir())


def digest(d):
    """Every entry under d: path, type, mode, owner, size, bytes."""
    out = []
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
        out.append((str(p.relative_to(d)), st.st_mode, st.st_uid, st.st_gid, data))
    return out


def test_layered_workspace_lower_shared_never_written_upper_holds_the_turn(ctl, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for i in range(300):
        (repo / f"f{i:03}").write_text(f"file {i}\n")
    for p in [repo, *repo.iterdir()]:
        os.chown(p, TEST_UID, TEST_UID)
    p = ctl.run("run echo more >> /workspace/f007", "--repo", str(repo))
    assert p.returncode == 0, p.stderr
    sid = ctl.session_of(p)
    tree = tree_of(ctl, sid)
    base = (tree / "base").read_text()
    lower = ctl.state / "lowers" / "local" / base
    # The starting point became the lower directory, whole; the turn's
    # change is in the first layer's upper directory alone, and that is
    # what its checkpoint read; then that layer was closed: the sandbox
    # writes in a new one over it.
    assert len(files_under(lower / "workspace")) == 300
    assert (lower / "workspace" / "f007").read_text() == "file 7\n"
    assert files_under(tree / "layer" / "upper" / "workspace") == ["f007"]
    boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    assert (tree / "top").read_text() == f"1 {ctl.result(p)['checkpoint']} {boot}"
    d = ctl("diff", sid, check=True).stdout.decode().splitlines()
    assert [l for l in d if "f0" in l or "f1" in l or "f2" in l] == ["M f007"], d

    # The agent goes at every file it can see; the lower stays exactly as
    # it was (other sessions may share it), the upper takes it all.
    before = digest(lower)
    attack = ("rm -rf /workspace/f1*; chmod 000 /workspace/f2*; "
              "for f in /workspace/f0*; do echo x > $f; done; "
              "mv /workspace/f299 /workspace/moved; ln -sf /etc/shadow /workspace/f298; "
              "echo h >> ~/.claude-history 2>/dev/null; true")
    p2 = ctl.turn(sid, "run " + attack)
    assert p2.returncode == 0
    assert digest(lower) == before
    # The turn in the kept sandbox wrote in the second layer (the first
    # still holds turn 1's change alone): its checkpoint read that.
    assert (tree / "top").read_text() == f"2 {ctl.result(p2)['checkpoint']} {boot}"
    assert files_under(tree / "layer" / "upper" / "workspace") == ["f007"]
    up = tree / "layer-1" / "upper" / "workspace"
    assert os.stat(up / "f150", follow_symlinks=False).st_rdev == 0 and \
        (up / "f150").is_char_device()  # a whiteout
    d = ctl("diff", sid, check=True).stdout.decode().splitlines()
    assert "D f150" in d and "M f050" in d and "A moved" in d and "M f007" in d
    assert ctl.turn(sid, "write one.txt 1").returncode == 0
    assert files_under(tree / "layer-2" / "upper" / "workspace") == ["one.txt"]
    assert files_under(tree / "layer-3" / "upper") == []
    d = ctl("diff", sid, check=True).stdout.decode().splitlines()
    assert [l for l in d if not l.startswith(" ")][:1] == ["A one.txt"], d
    # What the checkpoint holds is what the agent sees: a fresh sandbox
    # restored from it sees the same tree.
    look = "run cd /workspace && ls -lA --time-style=full-iso && stat -c '%y %a %s' ."
    assert ctl.turn(sid, look).returncode == 0
    seen = last_text(ctl, sid)
    s, _ = ctl.show(sid)
    ctl.a.sandbox("destroy", s["sandbox"], check=True)
    assert ctl.turn(sid, look).returncode == 0
    assert last_text(ctl, sid) == seen

    # Forks of one checkpoint share its lower, restored once; a change in
    # one is not seen by the other.
    fa = ctl("fork", sid, check=True).stdout.decode().strip()
    fb = ctl("fork", sid, check=True).stdout.decode().strip()
    pa = ctl("turn", fa, "run echo a > /workspace/f000")
    pb = ctl("turn", fb, "run cat /workspace/f000")
    assert pa.returncode == 0 and pb.returncode == 0, (pa.stderr, pb.stderr)
    restores = (pa.stderr + pb.stderr).count(b"restoring checkpoint")
    assert restores == 1, (pa.stderr, pb.stderr)
    assert (tree_of(ctl, fa) / "base").read_text() == (tree_of(ctl, fb) / "base").read_text()
    assert last_text(ctl, fb) == "exit 0\nx\n"

    # Nothing names a lower any more: it goes.
    ctl.stop_all()
    assert [p.name for p in (ctl.state / "lowers" / "local").iterdir()
            if not p.name.startswith(".")] == []


def test_fresh_sandbox_after_a_failure_or_a_loss_restores_nothing(ctl):
    p = ctl.run("write keep.txt 1")
    sid = ctl.session_of(p)
    tree = tree_of(ctl, sid)
    # A failed turn wrote into its layer; its sandbox goes, and the next
    # turn's sandbox is made over the same closed layers (no restore), with
    # that layer emptied: what the failed turn did is gone.
    assert ctl.turn(sid, "writefail junk.txt").returncode == 1
    p3 = ctl("turn", sid, "run ls /workspace")
    assert p3.returncode == 0, p3.stderr
    assert b"restoring" not in p3.stderr, p3.stderr
    assert last_text(ctl, sid) == "exit 0\nkeep.txt\n"
    assert tree_of(ctl, sid) == tree and (tree / "top").read_text().startswith("2 ")
    # A lost sandbox: the same.
    s, _ = ctl.show(sid)
    ctl.a.sandbox("destroy", s["sandbox"], check=True)
    p4 = ctl("turn", sid, "write two.txt 2")
    assert p4.returncode == 0 and b"restoring" not in p4.stderr, p4.stderr
    d = ctl("diff", sid, check=True).stdout.decode()
    assert "A two.txt" in d and "junk" not in d
    # Closed layers another boot wrote (never synced) are not trusted: a
    # host that crashed in between gets the checkpoint restored.
    top = tree / "top"
    k, ck, _ = top.read_text().split()
    top.write_text(f"{k} {ck} 00000000-0000-0000-0000-000000000000")
    s, _ = ctl.show(sid)
    ctl.a.sandbox("destroy", s["sandbox"], check=True)
    p5 = ctl("turn", sid, "run ls /workspace")
    assert p5.returncode == 0 and b"restoring checkpoint" in p5.stderr, p5.stderr
    assert last_text(ctl, sid) == "exit 0\nkeep.txt\ntwo.txt\n"
    # A fork has no tree of its own: it restores its checkpoint, once.
    f = ctl("fork", sid, check=True).stdout.decode().strip()
    pf = ctl("turn", f, "run ls /workspace")
    assert pf.returncode == 0
    assert last_text(ctl, f) == "exit 0\nkeep.txt\ntwo.txt\n"


def test_an_agent_that_moves_its_home_gets_a_failed_turn_not_a_lost_workspace(ctl):
    # With the home at /home/agent, the sandbox's root can rename /home and
    # put a plain directory where the home was: the new layer finds no
    # mount there and changes nothing; the turn fails (its checkpoint could
    # not be made) and the next starts afresh from the last checkpoint.
    p = ctl("run", "--preset", "fake-homedir", "--json", "write a.txt 1")
    assert p.returncode == 0, p.stderr
    sid = ctl.session_of(p)
    p2 = ctl.turn(sid, "run mv /home /h2 && mkdir -p /home/agent && echo moved")
    assert p2.returncode == 1, p2.stderr
    assert "not where it was" in ctl.result(p2)["reason"], ctl.result(p2)
    # Nothing of the failed turn was committed, its history included.
    assert ctl.turn(sid, "recall").returncode == 0
    assert last_text(ctl, sid) == "I remember: write a.txt 1"
    assert ctl.turn(sid, "run ls /workspace /home").returncode == 0
    assert last_text(ctl, sid) == "exit 0\n/home:\nagent\n\n/workspace:\na.txt\n"


def loops_backed_under(path):
    out = []
    for dev in os.listdir("/sys/block"):
        try:
            back = open(f"/sys/block/{dev}/loop/backing_file").read().strip()
        except OSError:
            continue
        if back.startswith(str(path)):
            out.append((dev, back))
    return out


def test_disk_limit_holds_across_turns_and_leaves_no_mount_behind(ctl):
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("no loop devices here (/dev/loop-control): a disk limit cannot be held")
    fill = "run dd if=/dev/zero of=/workspace/{} bs=1M count=64 2>&1 | grep -o 'No space left'"
    p = ctl("run", "--preset", "fake-disk", "--json", fill.format("big"))
    assert p.returncode == 0, ctl.result(p)
    sid = ctl.session_of(p)
    assert last_text(ctl, sid) == "exit 0\nNo space left\n"
    tree = tree_of(ctl, sid)
    assert (tree / "disk.img").is_file() and os.path.ismount(tree / "disk")
    assert loops_backed_under(ctl.state)
    # Nine tenths full: the closed layers keep what they hold, so the next
    # turn starts from a new tree (the checkpoint restored, outside the
    # limit) and the room is back; what was written is in the checkpoints.
    more = "run dd if=/dev/zero of=/workspace/more bs=1M count=8 2>&1 | grep -c 'No space'; ls /workspace"
    assert ctl.turn(sid, more).returncode == 0
    assert last_text(ctl, sid) == "exit 0\n0\nbig\nmore\n", last_text(ctl, sid)
    assert tree_of(ctl, sid) != tree and not tree.exists()
    assert len(loops_backed_under(ctl.state)) == 1
    d = ctl("diff", sid, "1", check=True).stdout.decode()
    assert "A big" in d
    # A failed turn's writes go with its layer.
    assert ctl.turn(sid, "writefail x").returncode == 1
    assert ctl.turn(sid, "run ls /workspace").returncode == 0
    assert last_text(ctl, sid) == "exit 0\nbig\nmore\n"
    # Deleting the session unmounts and frees it all.
    assert ctl("session", "rm", sid).returncode == 0
    assert str(ctl.state) not in open("/proc/self/mountinfo").read()
    assert loops_backed_under(ctl.state) == []


def test_new_layer_waits_for_nothing_and_a_busy_sandbox_keeps_its_layer(ctl):
    p = ctl.run("write a.txt 1")
    sid = ctl.session_of(p)
    s, _ = ctl.show(sid)
    tree = tree_of(ctl, sid)
    # Someone else's command still runs in the sandbox when the turn ends:
    # no new layer under it (what it writes after the checkpoint stays
    # where the next checkpoint reads it); the next turn writes on in the
    # same layer.
    # It runs until told to go on (a file in the sandbox's /tmp), whatever
    # the machine's speed; it says it started on its stdout.
    bg = subprocess.Popen([ctl.a.bin, "sandbox", "exec", s["sandbox"], "--", "sh", "-c",
                           "echo bg > /workspace/bg.txt; echo started; "
                           "while [ ! -e /tmp/go ]; do sleep 0.05; done; "
                           "echo late >> /workspace/bg.txt"],
                          env=ctl.a.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert bg.stdout.readline() == b"started\n", bg.stderr.read()
        top = (tree / "top").read_text()
        assert top.startswith("1 ")
        assert ctl.turn(sid, "write b.txt 2").returncode == 0
        assert (tree / "top").read_text() == top and not (tree / "layer-2").exists()
    finally:
        ctl.a.sandbox("exec", s["sandbox"], "--", "touch", "/tmp/go", check=True)
        assert bg.wait(timeout=30) == 0, bg.stderr.read()
    assert files_under(tree / "layer-1" / "upper" / "workspace") == ["b.txt", "bg.txt"]
    # Idle again: this turn's layer is closed after it, its checkpoint
    # holding everything, the late line included.
    assert ctl.turn(sid, "run cat /workspace/bg.txt").returncode == 0
    assert last_text(ctl, sid) == "exit 0\nbg\nlate\n"
    assert (tree / "top").read_text().startswith("2 ")
    d = ctl("diff", sid, "3", check=True).stdout.decode()
    assert "M bg.txt" in d, d


# ---- tenants ----

def test_other_tenants_ids_look_missing(ctl):
    sid = ctl.session_of(ctl.run("recall"))
    theirs = ctl("session", "show", "--tenant", "other", sid)
    missing = ctl("session", "show", "--tenant", "other", "0123456789abcdef")
    assert theirs.returncode == missing.returncode == 125
    assert theirs.stderr.replace(sid.encode(), b"ID") == \
        missing.stderr.replace(b"0123456789abcdef", b"ID")
    for cmd in (["turn", sid, "recall"], ["fork", sid], ["cancel", sid], ["diff", sid],
                ["events", sid], ["session", "rm", sid]):
        p = ctl(cmd[0], "--tenant", "other", *cmd[1:])
        assert p.returncode == 125, cmd
    # Untouched.
    assert ctl.show(sid)[0]["turns"] == 1


# ---- bad input ----

@pytest.mark.parametrize("url", [
    "http://github.com/a/b", "https://gitlab.com/a/b", "https://github.com:444/a/b",
    "https://user:pw@github.com/a/b", "https://github.com/a/b@evil", "ext::sh -c id",
    "file:///etc", "https://github.com/-u/b", "https://github.com/a/--upload-pack=x",
    "https://github.com/a/b/c", "https://github.com/a/b?x=1", "https://github.com/a/b#x",
    "https://github.com/../b", "git@github.com:a/b.git",
])
def test_bad_repo_urls_refused(ctl, url):
    # The preset allows a/*: what refuses these is the URL's check.
    p = ctl("run", "--preset", "fake-nodash", "--repo", url, "recall")
    assert p.returncode == 125, (url, p.stderr)
    assert b"github.com/OWNER/REPO" in p.stderr, p.stderr
    assert ctl("session", "list").stdout == b""


def test_bad_config_changes_nothing(airlock, tmp_path):
    conf = tmp_path / "bad.yaml"
    conf.write_text(f"state_dir: {tmp_path}/state\npresets:\n  p:\n    agent: fake\n")
    p = airlock("run", "--config", str(conf), "hello")
    assert p.returncode == 125
    assert f"{conf}:4".encode() in p.stderr
    assert not (tmp_path / "state").exists()


def test_missing_preset(ctl):
    p = ctl("run", "--preset", "nope", "hello")
    assert p.returncode == 125 and b"no preset named nope" in p.stderr


# ---- kill -9 ----

def test_kill9_mid_turn_leaves_no_running_turn(ctl):
    sid = ctl.session_of(ctl.run("write first.txt 1"))
    proc = start_turn(ctl, sid, "sleep 300")
    wait_for(lambda: turn_states(ctl, sid)[-1] == "running", what="the turn to run")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    s, turns = ctl.show(sid)
    assert turns[-1]["state"] == "failed" and "interrupted" in turns[-1]["reason"]
    # The next turn starts afresh from the last checkpoint, and works.
    assert ctl.turn(sid, "recall").returncode == 0
    assert "write first.txt 1" in last_text(ctl, sid)
    wait_for(lambda: not our_processes(), timeout=20, what="the killed turn's agent to go")


@pytest.mark.parametrize("step", [1, 2, 3, 4, 5])
def test_kill9_mid_checkpoint_loses_nothing_committed(ctl, step):
    """airlock dies (_exit, as a kill -9 would leave it) at each write step of
    the turn's checkpoint: the last committed checkpoint stays whole, the
    turn is failed as interrupted, and the next turn starts from there."""
    p = ctl.run("write one.txt 1")
    sid = ctl.session_of(p)
    committed = ctl.result(p)["checkpoint"]
    p = ctl("turn", "--json", sid, "write two.txt 2", env={"AIRLOCK_FAULT_STEP": str(step)})
    assert p.returncode == 99, (step, p.returncode, p.stderr)
    s, turns = ctl.show(sid)
    assert turns[-1]["state"] == "failed" and "interrupted" in turns[-1]["reason"]
    assert s["last_checkpoint"] == committed
    assert ctl.turn(sid, "recall").returncode == 0
    # The agent resumed from the committed history: the interrupted turn's
    # message is not in it.
    assert last_text(ctl, sid) == "I remember: write one.txt 1"
    d = ctl("diff", sid, "1", check=True).stdout.decode()
    assert "A one.txt" in d
    # The interrupted turn's files are not in the session: two.txt is gone
    # with its sandbox.
    s, turns = ctl.show(sid)
    assert "two.txt" not in ctl("diff", "--all", sid, check=True).stdout.decode()


def test_retention_deletes_idle_sessions_only(ctl):
    old = ctl.session_of(ctl.run("write old.txt 1"))
    with open(ctl.conf, "a") as f:
        f.write("retention:\n  sessions: 2s\n")
    s, _ = ctl.show(old)
    # Until the session has been idle for the retention, gc keeps it.
    p = ctl("session", "gc", "--json", check=True)
    assert json.loads(p.stdout)["deleted"] == 0
    wait_for(lambda: time.time() * 1000 > s["updated"] + 2500, what="two seconds of idleness")
    fresh = ctl.session_of(ctl.run("write new.txt 2"))
    p = ctl("session", "gc", "--json", check=True)
    assert json.loads(p.stdout)["deleted"] == 1
    assert ctl("session", "show", old).returncode == 125
    assert ctl.show(fresh)[0]["turns"] == 1
    assert s["sandbox"] not in ctl.a.sandbox("list").stdout.decode()


def test_timeout_is_124_and_kills_the_agent(ctl):
    p = ctl("run", "--preset", "fake-short", "--json", "sleep 60", timeout=60)
    assert p.returncode == 124, (p.stdout, p.stderr)
    r = ctl.result(p)
    assert r["state"] == "failed" and "timed out" in r["reason"]
    wait_for(lambda: not our_processes(), timeout=20, what="the agent to go")


def test_events_follow_until_the_turn_ends(ctl):
    sid = ctl.session_of(ctl.run("recall"))
    proc = start_turn(ctl, sid, "sleep 2")
    wait_for(lambda: turn_states(ctl, sid)[-1] == "running", what="the turn to run")
    p = ctl("events", "--follow", "--json", sid, timeout=60)
    assert p.returncode == 0
    got = [e["data"].get("text") for e in ctl.lines(p) if e["kind"] == "text"]
    # Everything up to the end of the running turn, in order, once each.
    assert got[-1] == "slept" and got.count("sleeping") == 1
    seqs = [e["seq"] for e in ctl.lines(p)]
    assert seqs == sorted(set(seqs))
    assert proc.wait(timeout=60) == 0


# ---- what the review found ----

def test_cancel_then_next_turn_never_reuses_the_cancelled_sandbox(ctl):
    sid = ctl.session_of(ctl.run("recall"))
    proc = start_turn(ctl, sid, "outsidesleep 300")
    wait_for(lambda: "sleeping" in texts(ctl.events(sid)), what="the turn to run")
    assert ctl("cancel", sid).returncode == 0
    proc.wait(timeout=60)
    # The cancelled sandbox (which left a file outside /workspace) is gone
    # and forgotten in the same step: the next turn starts afresh.
    assert ctl.show(sid)[0]["sandbox"] == ""
    assert ctl.turn(sid, "checkoutside").returncode == 0
    assert last_text(ctl, sid) == "outside: absent"


def test_cancel_takes_the_running_turn_not_the_queued_one(ctl):
    sid = ctl.session_of(ctl.run("recall"))
    first = start_turn(ctl, sid, "sleep 300")
    wait_for(lambda: turn_states(ctl, sid)[-1] == "running", what="the first turn")
    second = start_turn(ctl, sid, "write queued.txt q")
    wait_for(lambda: len(turn_states(ctl, sid)) == 3, what="the second turn to queue")
    p = ctl("cancel", sid)
    assert p.returncode == 0 and b"cancelled turn 2" in p.stdout, p.stdout
    assert first.wait(timeout=60) == 1
    assert second.wait(timeout=60) == 0
    assert turn_states(ctl, sid) == ["succeeded", "cancelled", "succeeded"]


def test_three_queued_turns_run_in_order(ctl):
    sid = ctl.session_of(ctl.run("recall"))
    procs = [start_turn(ctl, sid, "sleep 2")]
    wait_for(lambda: turn_states(ctl, sid)[-1] == "running", what="the first turn")
    for i in range(2):
        procs.append(start_turn(ctl, sid, f"write q{i}.txt {i}"))
        wait_for(lambda: len(turn_states(ctl, sid)) == 3 + i, what="a turn to queue")
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    assert turn_states(ctl, sid) == ["succeeded"] * 4


def test_deep_tree_does_not_stop_delete(ctl):
    import resource
    sid = ctl.session_of(ctl.run("deep 3000"))
    def few_fds():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))  # Debian's default
    p = subprocess.run([ctl.a.bin, "session", "--config", str(ctl.conf), "rm", sid],
                       env=ctl.a.env, capture_output=True, preexec_fn=few_fds, timeout=300)
    assert p.returncode == 0, p.stderr
    assert not (ctl.state / "sessions" / "local" / sid).exists()


def test_links_in_the_tree_are_never_followed_and_names_cannot_forge_lines(ctl, tmp_path):
    victim = tmp_path / "host-files"
    victim.mkdir()
    (victim / "keep").write_text("host data")
    sid = ctl.session_of(ctl.run(f"links {victim}"))
    d = ctl("diff", "--all", sid, check=True).stdout.decode()
    # One line per path; the newline in the name is shown quoted.
    assert "A forged.txt" not in d.replace('"workspace/bad\\nA forged.txt"', "")
    assert '\\n' in d
    assert ctl("session", "rm", sid).returncode == 0
    assert (victim / "keep").read_text() == "host data"


def test_terminal_sequences_from_the_agent_never_reach_the_terminal(ctl):
    p = ctl("run", "--preset", "fake", "escape")
    assert p.returncode == 0
    for out in (p.stdout, ctl("diff", ctl.session_of_human(p), check=True).stdout):
        assert b"\x1b" not in out and b"\x07" not in out
        assert b"\x9b" not in out, out  # neither alone nor as UTF-8's c2 9b
    assert b"text" in p.stdout and b"c1-" in p.stdout


def test_options_cannot_be_smuggled_in_a_message_or_a_session_id(ctl):
    # An agent whose arguments have no "--": a message that looks like an
    # option stays a message.
    p = ctl("run", "--preset", "fake-nodash", "--json", "--", "--resume x")
    assert p.returncode == 0, p.stderr
    sid = ctl.session_of(p)
    assert ctl("turn", "--json", sid, "recall").returncode == 0
    assert last_text(ctl, sid) == "I remember:  --resume x"
    # A session id from the agent's output that looks like an option never
    # becomes an argument: the turn fails.
    p = ctl.run("badsid")
    assert p.returncode == 1
    assert "session id" in ctl.result(p)["reason"]


def test_fork_by_full_checkpoint_id(ctl):
    p = ctl.run("write one.txt 1")
    full = ctl.result(p)["checkpoint"]
    assert len(full) == 64
    f = ctl("fork", full)
    assert f.returncode == 0, f.stderr


def test_vault_refuses_what_the_gateway_would_not_load_and_loses_no_update(ctl):
    ctl.state.mkdir(mode=0o700, exist_ok=True)
    assert ctl("vault", "set", "good", input=b"sk-good-0123456789\n").returncode == 0
    bad = ctl("vault", "set", "bad", input=b"\xff\xfe-not-utf8-0123\n")
    assert bad.returncode == 125
    assert ctl("vault", "list").stdout == b"good\n"
    procs = [subprocess.Popen([ctl.a.bin, "vault", "--config", str(ctl.conf), "set", f"k{i}"],
                              env=ctl.a.env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for i in range(12)]
    for i, pr in enumerate(procs):
        pr.communicate(f"value-number-{i:04d}\n".encode(), timeout=60)
        assert pr.returncode == 0
    names = ctl("vault", "list").stdout.decode().split()
    assert sorted(names) == sorted(["good"] + [f"k{i}" for i in range(12)])


def test_vault_set_on_a_terminal_hides_the_value_and_ctrl_c_gives_echo_back(ctl):
    import pty
    import termios
    ctl.state.mkdir(mode=0o700, exist_ok=True)
    master, slave = pty.openpty()
    try:
        pr = subprocess.Popen([ctl.a.bin, "vault", "--config", str(ctl.conf), "set", "typed"],
                              env=ctl.a.env, stdin=slave, stdout=slave, stderr=slave,
                              start_new_session=True)
        # The prompt, then echo off while the value is typed.
        seen = b""
        deadline = time.monotonic() + 30
        while b"then Enter" not in seen and time.monotonic() < deadline:
            seen += os.read(master, 4096)
        assert b"then Enter" in seen, seen
        assert not termios.tcgetattr(slave)[3] & termios.ECHO
        os.write(master, b"half-typ")
        os.killpg(pr.pid, signal.SIGINT)
        assert pr.wait(timeout=30) == -signal.SIGINT
        # The terminal has its echo back; nothing was stored.
        assert termios.tcgetattr(slave)[3] & termios.ECHO
        assert ctl("vault", "list").stdout == b""
    finally:
        os.close(master)
        os.close(slave)

# SPDX-License-Identifier: Apache-2.0
"""`checkpoint restore --owner`: a restored tree whose every entry, its top
directory included, belongs to an unprivileged owner (as a session's tree
must, to be a sandbox's workspace and home again), with the checkpoint's
modes and times, and no chown ever reaching anything but what the restore
made."""
import grp
import os
import pwd
import stat
import subprocess
import sys
import time

import pytest

from conftest import TEST_UID
from test_checkpoint import Store, make_workspace, tree
from test_checkpoint_paths import Host

OWNER = (TEST_UID, TEST_UID + 7)  # a group other than the user's own


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


@pytest.fixture
def host():
    h = Host()
    yield h
    h.close()


def owners(root):
    """{relpath: (uid, gid)} of root and everything below, links not followed."""
    out = {".": (os.lstat(root).st_uid, os.lstat(root).st_gid)}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            st = os.lstat(os.path.join(d, n))
            out[os.path.relpath(os.path.join(d, n), root)] = (st.st_uid, st.st_gid)
    return out


def times(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = os.lstat(p).st_mtime_ns
    return out


def varied_workspace(ws, victims):
    """make_workspace's tree, with modes of every kind and links to files
    and a directory of root's that a chown through a link would reach."""
    make_workspace(ws)
    (ws / "ro-dir").mkdir()
    (ws / "ro-dir" / "inner").write_bytes(b"in a read-only directory\n")
    os.chmod(ws / "ro-dir", 0o500)
    (ws / "none").write_bytes(b"no permissions at all\n")
    os.chmod(ws / "none", 0o000)
    (ws / "group-rw").write_bytes(b"g\n")
    os.chmod(ws / "group-rw", 0o660)
    os.symlink(str(victims / "file"), ws / "to-root-file")
    os.symlink(str(victims / "dir"), ws / "to-root-dir")
    os.symlink(".", ws / "to-self")
    os.symlink("..", ws / "to-parent")
    os.utime(ws / "ro-dir", ns=(1_000_000_007, 1_000_000_007))


@pytest.fixture
def victims(tmp_path):
    v = tmp_path / "victims"
    v.mkdir()
    (v / "file").write_bytes(b"root's\n")
    os.chmod(v / "file", 0o644)
    (v / "dir").mkdir(mode=0o755)
    return v


def stat_of(p):
    st = os.lstat(p)
    return (st.st_uid, st.st_gid, st.st_mode, st.st_ctime_ns)


def test_every_entry_belongs_to_the_owner(store, tmp_path, victims):
    ws = tmp_path / "ws"
    varied_workspace(ws, victims)
    cid, _ = store.create(ws)
    before = {p: stat_of(p) for p in (victims, victims / "file", victims / "dir", "/etc/shadow",
                                      "/etc")}
    out = tmp_path / "out"
    store("restore", cid, "--to", str(out), "--owner", f"{OWNER[0]}:{OWNER[1]}", check=True)
    got = owners(out)
    assert len(got) == len(tree(ws)) + 1
    wrong = {p: o for p, o in got.items() if o != OWNER}
    assert wrong == {}, wrong
    # The checkpoint's modes, contents, link targets and times, as without
    # an owner (a chown clears mode bits: they were set after it).
    os.chmod(ws / "none", 0o400)
    os.chmod(out / "none", 0o400)
    want = tree(ws)
    want["none"] = ("f", 0o400, want["none"][2])
    assert tree(out) == want
    assert stat.S_IMODE(os.lstat(out / "ro-dir").st_mode) == 0o500
    assert stat.S_IMODE(os.lstat(out).st_mode) == 0o700  # made by the restore, as before
    t_ws, t_out = times(ws), times(out)
    for rel in ("bin.dat", "ro-dir", "emptydir", "rel-link", "d0/d1"):
        assert t_out[rel] == t_ws[rel], rel
    # Nothing a link in the tree names was touched, not even its ctime.
    for p, st in before.items():
        assert stat_of(p) == st, p


def test_owner_by_name_and_primary_group(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_bytes(b"x\n")
    os.symlink("f", ws / "l")
    cid, _ = store.create(ws)
    nobody = pwd.getpwnam("nobody")
    group = grp.getgrgid(1).gr_name  # "daemon" on Debian: any name will do
    cases = [("nobody", (nobody.pw_uid, nobody.pw_gid)),
             (str(nobody.pw_uid), (nobody.pw_uid, nobody.pw_gid)),
             (f"nobody:{group}", (nobody.pw_uid, 1)),
             (f"4242:{group}", (4242, 1)),
             ("4242:4243", (4242, 4243)),
             ("0:0", (0, 0))]
    for i, (spec, want) in enumerate(cases):
        out = tmp_path / f"out{i}"
        store("restore", cid, "--to", str(out), "--owner", spec, check=True)
        assert set(owners(out).values()) == {want}, spec


def test_existing_target_is_given_too(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_bytes(b"x\n")
    cid, _ = store.create(ws)
    out = tmp_path / "out"
    out.mkdir(mode=0o751)
    os.chmod(out, 0o751)
    store("restore", cid, "--to", str(out), "--owner", f"{OWNER[0]}:{OWNER[1]}", check=True)
    st = os.lstat(out)
    assert (st.st_uid, st.st_gid) == OWNER and stat.S_IMODE(st.st_mode) == 0o751


def test_failed_restore_leaves_the_target_empty_and_as_it_was(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "d").mkdir()
    (ws / "d" / "a").write_bytes(b"a\n")
    os.symlink("d", ws / "l")
    (ws / "z").write_bytes(os.urandom(200_000))
    cid, _ = store.create(ws)
    packs = list((store.dir / "tenants" / "default" / "packs").iterdir())
    raw = bytearray(packs[0].read_bytes())
    raw[len(raw) // 2] ^= 0x40
    packs[0].write_bytes(bytes(raw))
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    p = store("restore", cid, "--to", str(out), "--owner", f"{OWNER[0]}:{OWNER[1]}")
    assert p.returncode == 125, p
    assert list(out.iterdir()) == []
    st = os.lstat(out)
    assert (st.st_uid, st.st_gid) == (0, 0)


@pytest.mark.parametrize("spec,message", [
    ("", b"USER[:GROUP]"), (":", b"USER[:GROUP]"), ("1000:", b"USER[:GROUP]"),
    (":1000", b"USER[:GROUP]"), ("1000:1000:1000", b"USER[:GROUP]"),
    ("no-such-user-airlock", b"no user"), ("1000:no-such-group-airlock", b"no group"),
    ("4294967295:0", b"no user"), ("0:4294967295", b"no group"), ("-1", b"no user"),
    ("99999999999:0", b"no user"), ("4242", b"no entry"),
])
def test_bad_owner_is_refused(store, tmp_path, spec, message):
    ws = tmp_path / "ws"
    ws.mkdir()
    cid, _ = store.create(ws)
    out = tmp_path / "out"
    p = store("restore", cid, "--to", str(out), "--owner", spec)
    assert p.returncode == 125 and message in p.stderr, p
    assert len(p.stderr.splitlines()) == 1
    assert not out.exists()


def test_owner_only_for_restore(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    p = store("create", "--workspace", str(ws), "--owner", "0:0")
    assert p.returncode == 125 and b"--owner" in p.stderr, p
    assert store("latest").returncode != 0


def test_restored_tree_is_a_sandbox_workspace_and_home(store, tmp_path, airlock):
    """A session's tree after a turn, checkpointed and restored for the next
    sandbox: with its owner it is that sandbox's workspace and home again;
    as root's (no --owner) the sandbox refuses it."""
    t = tmp_path / "tree"
    for d in ("workspace", "home"):
        (t / d).mkdir(parents=True)
    (t / "workspace" / "main.c").write_text("int main(void) { return 0; }\n")
    (t / "home" / ".gitconfig").write_text("[user]\n\tname = agent\n")
    os.symlink(".gitconfig", t / "home" / "link")
    cid, _ = store.create(t)

    plain = tmp_path / "plain"
    store("restore", cid, "--to", str(plain), check=True)
    p = airlock.run("--workspace", str(plain / "workspace"), "--", "true")
    assert p.returncode == 125 and b"owned by root" in p.stderr, p

    new = tmp_path / "new"
    store("restore", cid, "--to", str(new), "--owner", f"{TEST_UID}:{TEST_UID}", check=True)
    p = airlock.run("--workspace", str(new / "workspace"), "--home", str(new / "home"), "--",
                    "/bin/sh", "-c", "cat /workspace/main.c ~/link; echo out > /workspace/out; "
                                     "echo h > ~/.history; chown 1234 ~/.gitconfig; echo $?",
                    check=True)
    assert p.stdout == (b"int main(void) { return 0; }\n[user]\n\tname = agent\n1\n"), p
    assert set(owners(new).values()) == {(TEST_UID, TEST_UID)}


# Runs as the user who will own the tree, in a target directory it owns:
# replaces each symlink the restore makes with a hard link to a file of
# root's, hoping a chown by name lands on that file.
SWAPPER = r"""
import os, sys
target, victim, stage, stop, ready = sys.argv[1:6]
open(ready, "w").close()
swapped = 0
while not os.path.exists(stop):
    try:
        names = os.listdir(target)
    except OSError:
        continue
    for n in names:
        p = os.path.join(target, n)
        try:
            if not os.path.islink(p):
                continue
            if not os.path.exists(stage):
                os.link(victim, stage)
            os.rename(stage, p)
            swapped += 1
        except OSError:
            pass
print(swapped)
"""


def test_swapping_links_for_hard_links_never_gives_away_roots_file(store, host, tmp_path):
    """A target directory the owner may write in (the control plane's own
    tree, say): while the restore runs, the owner swaps each new symlink for
    a hard link to a file of root's that it may link (protected_hardlinks
    allows a file it can read and write). A chown by name between the two
    would give root's file away; the restore must fail or leave it alone."""
    victim = os.path.join(host.base, "roots-file")
    with open(victim, "wb") as f:
        f.write(b"root's\n")
    os.chmod(victim, 0o666)
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(2000):
        os.symlink("x", ws / f"l{i:04}")
    cid, _ = store.create(ws)
    stage = os.path.join(host.user_dir("stage"), "h")
    stop = os.path.join(host.base, "stop")
    ready = os.path.join(host.home, "ready")
    outcomes = {"ok": 0, "failed": 0}
    swapped = 0
    deadline = time.monotonic() + 20
    i = 0
    while time.monotonic() < deadline and (swapped < 50 or outcomes["failed"] < 3):
        target = host.user_dir(f"t{i}")
        i += 1
        racer = subprocess.Popen([sys.executable, "-c", SWAPPER, target, victim, stage, stop,
                                  ready], user=TEST_UID, group=TEST_UID, extra_groups=[],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            while not os.path.exists(ready):
                assert racer.poll() is None, racer.stderr.read()
                time.sleep(0.005)
            p = store("restore", cid, "--to", target, "--owner", f"{TEST_UID}:{TEST_UID}")
        finally:
            open(stop, "w").close()
            out, err = racer.communicate(timeout=30)
            os.unlink(stop)
            os.unlink(ready)
        assert racer.returncode == 0, err
        swapped += int(out)
        outcomes["ok" if p.returncode == 0 else "failed"] += 1
        st = os.lstat(victim)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o666), (p, st)
    # The attack really ran: links were swapped under restores in flight.
    assert swapped > 0, (swapped, outcomes)
    if outcomes["failed"] == 0:
        # Root's file stayed root's after every restore (checked above), but
        # no swap was seen to land inside a restore's window on this machine
        # at this speed (a slower build, ASan say): that part is unproven here.
        pytest.skip(f"{swapped} swaps, none inside a restore's window in 20 s on this "
                    f"machine ({outcomes['ok']} restores): root's file was never given "
                    "away, but the race itself was not exercised")

# SPDX-License-Identifier: Apache-2.0
"""Layered checkpoints: a workspace that is an overlayfs mount whose lower
directory was restored from a checkpoint. A snapshot reads only the upper
directory and stores a delta manifest over the lower checkpoint's base.

The ground truth is always the merged view: a layered checkpoint must hold
exactly what a plain snapshot of the mounted workspace holds."""
import os
import random
import re
import shutil
import subprocess
import time

import pytest

from test_checkpoint import Store, make_workspace, tree


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


class Layers:
    """Lower (restored from a checkpoint), upper, work, merged; mounted."""

    def __init__(self, store, base_dir, lower_id, name):
        self.lower_id = lower_id
        self.root = base_dir / name
        self.lower, self.upper, self.work, self.merged = (
            self.root / n for n in ("lower", "upper", "work", "merged"))
        for d in (self.upper, self.work, self.merged):
            d.mkdir(parents=True)
        store("restore", lower_id, "--to", str(self.lower), check=True)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={self.lower},upperdir={self.upper},workdir={self.work},"
                        "redirect_dir=off,metacopy=off,index=off", str(self.merged)],
                       check=True, capture_output=True)
        self.mounted = True

    def umount(self):
        if self.mounted:
            subprocess.run(["umount", str(self.merged)], check=True)
            self.mounted = False


@pytest.fixture
def layers(store, tmp_path):
    made = []

    def make(lower_id, name="l0"):
        lay = Layers(store, tmp_path, lower_id, name)
        made.append(lay)
        return lay
    yield make
    for lay in made:
        lay.umount()


def layered(store, lay, session="work"):
    p = store("create", "--upper", str(lay.upper), "--lower", lay.lower_id, "--session", session)
    assert p.returncode == 0, p.stderr
    cid = p.stdout.decode().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", cid)
    return cid, p.stderr.decode()


def listing(store, cid):
    return store("ls", cid, check=True).stdout


def assert_same_as_merged(store, tmp_path, lay, cid, tag):
    """The layered checkpoint restores to what the merged view shows, and
    lists exactly as a plain snapshot of the merged view does."""
    plain, _ = store.create(lay.merged, session="plain-" + tag)
    assert listing(store, cid) == listing(store, plain)
    out = tmp_path / ("out-" + tag)
    store("restore", cid, "--to", str(out), check=True)
    # fifos, sockets and devices are never in a checkpoint
    assert tree(out) == {k: v for k, v in tree(lay.merged).items() if v[0] != "special"}
    shutil.rmtree(out)


def test_layered_equals_plain_snapshot_of_the_merged_view(store, layers, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    (ws / "dir" / "sub").mkdir(parents=True)
    (ws / "dir" / "sub" / "f").write_bytes(b"f\n")
    (ws / "dir" / "g").write_bytes(b"g\n")
    (ws / "file-to-dir").write_bytes(b"soon a directory\n")
    (ws / "dir-to-file").mkdir()
    (ws / "dir-to-file" / "inner").write_bytes(b"inner\n")
    base, _ = store.create(ws, session="base")
    lay = layers(base)
    m = lay.merged
    (m / "plain.txt").write_bytes(b"changed\n")            # modified (copy-up)
    os.remove(m / "bin.dat")                                # whiteout
    shutil.rmtree(m / "dir")                                # a directory removed...
    (m / "dir").mkdir()                                     # ...and made anew: opaque
    (m / "dir" / "new").write_bytes(b"new\n")
    os.remove(m / "file-to-dir")
    (m / "file-to-dir").mkdir()
    (m / "file-to-dir" / "x").write_bytes(b"x\n")
    shutil.rmtree(m / "dir-to-file")
    (m / "dir-to-file").write_bytes(b"now a file\n")
    os.chmod(m / "exec.sh", 0o700)                          # metadata only
    os.symlink("plain.txt", m / "new-link")
    os.remove(m / "rel-link")
    (m / "d0" / "d1" / "added").write_bytes(b"deep add\n")  # below an unchanged dir
    # Past the racy window of the stat cache's rule (docs/checkpoints.md):
    # the next snapshot may then reuse what this one reads.
    time.sleep(1.1)
    cid, err = layered(store, lay)
    text = store.manifest(cid).decode()
    assert re.search(f"\nbase {base} \\d+\n", text)
    assert "\no 0755 " in text and "\nx bin.dat\n" in text, text
    # Only the upper layer was read: a handful of files, not the tree.
    files_read = int(re.search(r"\((\d+) read", err).group(1))
    assert files_read <= 6, err
    assert_same_as_merged(store, tmp_path, lay, cid, "g0")

    # The next turn over the same layers: unchanged upper files are not
    # read again, and the delta grows by what changed.
    cid_same, err = layered(store, lay)
    assert "(0 read" in err, err
    assert listing(store, cid_same) == listing(store, cid)
    (m / "dir" / "new").write_bytes(b"newer\n")
    (m / "emptydir" / "one").write_bytes(b"1\n")
    cid2, err = layered(store, lay)
    assert re.search(r"\(1 read|\(2 read", err), err
    assert_same_as_merged(store, tmp_path, lay, cid2, "g1")


def random_turn(rng, root, step):
    """A few random changes through the merged view."""
    for _ in range(12):
        entries = []
        for dirpath, dirnames, filenames in os.walk(root):
            for n in dirnames + filenames:
                entries.append(os.path.join(dirpath, n))
        op = rng.choice(["add", "add", "modify", "remove", "mkdir", "rmtree", "replace",
                         "link", "chmod"])
        target = rng.choice(entries) if entries else None
        dirs = [root] + [e for e in entries if os.path.isdir(e) and not os.path.islink(e)]
        where = rng.choice(dirs)
        name = f"n{step}-{rng.randrange(1000)}"
        path = os.path.join(where, name)
        if os.path.lexists(path):
            continue
        if op == "add":
            with open(path, "wb") as f:
                f.write(rng.randbytes(rng.choice([0, 10, 5000])))
        elif op == "mkdir":
            os.mkdir(path)
            with open(os.path.join(path, "in"), "wb") as f:
                f.write(b"in\n")
        elif op == "link":
            os.symlink(rng.choice(["../x", "/etc/passwd", name]), path)
        elif target is None:
            continue
        elif op == "modify" and os.path.isfile(target) and not os.path.islink(target):
            with open(target, "ab") as f:
                f.write(b"more\n")
        elif op == "remove" and not os.path.isdir(target) or os.path.islink(target):
            os.remove(target)
        elif op == "rmtree" and os.path.isdir(target):
            shutil.rmtree(target)
        elif op == "replace":
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
                with open(target, "wb") as f:
                    f.write(b"was a directory\n")
            else:
                os.remove(target)
                os.mkdir(target)
                with open(os.path.join(target, "was-file"), "wb") as f:
                    f.write(b"was a file\n")
        elif op == "chmod" and not os.path.islink(target):
            os.chmod(target, rng.choice([0o700, 0o755, 0o644, 0o600]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_layers_restored_from_deltas_compose(store, layers, tmp_path, seed):
    """Generations: each restores the last layered checkpoint (a delta) as
    its lower layer, changes things at random, and snapshots the upper
    layer: a delta over that lower checkpoint (a chain of deltas down to
    the first base)."""
    rng = random.Random(seed)
    ws = tmp_path / "ws"
    make_workspace(ws)
    base, _ = store.create(ws, session="base")
    last = base
    for gen in range(4):
        lay = layers(last, f"gen{gen}")
        for turn in range(2):
            random_turn(rng, str(lay.merged), gen * 10 + turn)
            last, _ = layered(store, lay)
            assert re.search(f"\nbase {lay.lower_id} \\d+\n", store.manifest(last).decode())
            assert_same_as_merged(store, tmp_path, lay, last, f"s{gen}-{turn}")
        lay.umount()
    # diff and export see the whole tree of a delta.
    d = store("diff", base, last, "--names-only", check=True).stdout
    assert d.strip()
    out = tmp_path / "exported.tar"
    store("export", last, "-o", str(out), check=True)
    assert out.stat().st_size > 0


def set_ovl_xattr(path, name, value):
    os.setxattr(path, f"trusted.overlay.{name}", value, follow_symlinks=False)


@pytest.mark.parametrize("what", ["metacopy", "redirect"])
def test_unreadable_overlay_features_are_refused(store, tmp_path, what):
    ws = tmp_path / "ws"
    make_workspace(ws)
    base, _ = store.create(ws, session="work")
    upper = tmp_path / "upper"
    (upper / "dir").mkdir(parents=True)
    (upper / "plain.txt").write_bytes(b"")
    if what == "metacopy":
        set_ovl_xattr(upper / "plain.txt", "metacopy", b"")
    else:
        set_ovl_xattr(upper / "dir", "redirect", b"/emptydir")
    p = store("create", "--upper", str(upper), "--lower", base, "--session", "work")
    assert p.returncode == 125, p
    assert (b"metacopy=off" if what == "metacopy" else b"redirect_dir=off") in p.stderr
    assert store("latest", "--session", "work", check=True).stdout.decode().strip() == base


def test_bad_layer_options(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    base, _ = store.create(ws)
    upper = tmp_path / "upper"
    upper.mkdir()
    for args in (["--upper", str(upper)], ["--lower", base],
                 ["--upper", str(upper), "--lower", base, "--workspace", str(ws)]):
        p = store("create", *args)
        assert p.returncode == 125 and b"usage" in p.stderr, p
    p = store("create", "--upper", str(upper), "--lower", "0" * 64)
    assert p.returncode == 125 and b"no checkpoint" in p.stderr, p
    p = store("create", "--upper", str(tmp_path / "absent"), "--lower", base)
    assert p.returncode == 125 and b"upper layer" in p.stderr, p


def base_entries(store, base):
    m = re.search(rb"^entries (\d+)$", store.manifest(base), re.M) if \
        store.manifest_path(base).exists() else None
    return int(m.group(1)) if m else 0


def delta_text(store, base, entries, session="evil"):
    body = (f"airlock-manifest 1\ntenant default\nsession {session}\nparent -\n"
            f"base {base} {base_entries(store, base)}\n"
            f"created 1\nentries {len(entries)}\n" + "".join(e + "\n" for e in entries))
    return store.sign(body.encode())


def test_crafted_deltas_are_refused_whole(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    base, _ = store.create(ws)
    cases = {
        # a file below what the base has as a file
        "below a file": [f"f 0644 0 0 plain.txt/x -"],
        # below a symlink of the base
        "below a symlink": ["f 0644 0 0 rel-link/x -"],
        # a parent that exists nowhere
        "parent directory not listed": ["f 0644 0 0 nowhere/x -"],
        # traversal and absolute paths are refused by the grammar itself
        "'.' or '..' segment": ["f 0644 0 0 ../escape -"],
        "absolute path": ["x /etc"],
        # a removed path with something below it in the same delta
        "below a removed path": ["x emptydir", "f 0644 0 0 emptydir/x -"],
    }
    for why, entries in cases.items():
        cid = store.plant(delta_text(store, base, entries))
        out = tmp_path / "out"
        p = store("restore", cid, "--to", str(out))
        assert p.returncode == 125 and why.encode() in p.stderr, (why, p.stderr)
        assert not out.exists() or not os.listdir(out)
    # A delta over a delta is a chain: the base's entry count is what its
    # manifest lists, checked at every step; at most 16 deltas.
    d1 = store.plant(delta_text(store, base, ["x plain.txt"]))
    d2 = store.plant(delta_text(store, d1, ["x empty"]))
    store("restore", d2, "--to", str(tmp_path / "o2"), check=True)
    assert not (tmp_path / "o2" / "plain.txt").exists()
    assert not (tmp_path / "o2" / "empty").exists()
    assert (tmp_path / "o2" / "bin.dat").exists()
    wrong = store.plant(store.sign(delta_text(store, d1, ["x empty"]).rsplit(b"hmac ", 1)[0]
                                   .replace(f"base {d1} 1\n".encode(), f"base {d1} 2\n".encode())))
    p = store("restore", wrong, "--to", str(tmp_path / "o2w"))
    assert p.returncode == 125 and b"made over a base of 2 entries" in p.stderr, p
    p = store("checkpoint" if False else "adopt", wrong, "--session", "w")
    assert p.returncode == 125 and b"made over a base of 2 entries" in p.stderr, p
    chain = [base]
    for i in range(17):
        chain.append(store.plant(delta_text(store, chain[-1], [f"f 0644 0 0 c{i} -"])))
    store("restore", chain[16], "--to", str(tmp_path / "o16"), check=True)
    assert sorted(n for n in os.listdir(tmp_path / "o16") if n.startswith("c")) == \
        sorted(f"c{i}" for i in range(16))
    for args in (["restore", chain[17], "--to", str(tmp_path / "o17")],
                 ["adopt", chain[17], "--session", "deep"]):
        p = store(*args)
        assert p.returncode == 125 and b"a chain of more than 16 deltas" in p.stderr, p
    # A base that is not there, or is another tenant's.
    other = Store(tmp_path, tenant="other")
    oid, _ = other.create(ws)
    for b in ("0" * 64, oid):
        cid = store.plant(delta_text(store, b, ["x plain.txt"]))
        p = store("restore", cid, "--to", str(tmp_path / "o3"))
        assert p.returncode == 125 and b"no checkpoint" in p.stderr, p
    # "o" and "x" only in a delta.
    body = (b"airlock-manifest 1\ntenant default\nsession s\nparent -\ncreated 1\n"
            b"entries 1\nx plain.txt\n")
    cid = store.plant(store.sign(body))
    p = store("ls", cid)
    assert p.returncode == 125 and b"unknown entry type" in p.stderr, p


class Stack:
    """A session's sandbox: a new upper layer after every turn, the old
    ones read-only below it (lowerdir=upper2:upper1:lower)."""

    def __init__(self, store, root, lower_id):
        self.root, self.lower_id = root, lower_id
        self.lower, self.merged = root / "lower", root / "merged"
        self.merged.mkdir(parents=True)
        store("restore", lower_id, "--to", str(self.lower), check=True)
        self.uppers = []
        self.next_layer()

    def next_layer(self):
        if self.uppers:
            subprocess.run(["umount", str(self.merged)], check=True)
        k = len(self.uppers)
        up, wk = self.root / f"up{k}", self.root / f"wk{k}"
        up.mkdir()
        wk.mkdir()
        lowers = ":".join([str(u) for u in reversed(self.uppers)] + [str(self.lower)])
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={lowers},upperdir={up},workdir={wk},"
                        "redirect_dir=off,metacopy=off,index=off", str(self.merged)],
                       check=True, capture_output=True)
        self.uppers.append(up)

    def umount(self):
        subprocess.run(["umount", str(self.merged)], check=True)


def test_a_layer_per_turn_makes_a_chain_composed_at_its_depth(store, tmp_path):
    """Each turn's checkpoint is a delta over the one before (its lower):
    a chain, until it is 16 deltas deep; the next composes the chain into
    one delta over the full base. Every checkpoint is the merged view, and
    GC keeps a chain whole under a checkpoint that stays."""
    ws = tmp_path / "ws"
    make_workspace(ws)
    base, _ = store.create(ws, session="base")
    st = Stack(store, tmp_path / "stack", base)
    rng = random.Random(7)
    lower, ids = base, []
    try:
        for turn in range(20):
            if turn:
                st.next_layer()
            random_turn(rng, str(st.merged), 100 + turn)
            p = store("create", "--upper", str(st.uppers[-1]), "--lower", lower,
                      "--session", "stack")
            assert p.returncode == 0, p.stderr
            cid = p.stdout.decode().strip()
            text = store.manifest(cid).decode()
            m = re.search(r"\nbase ([0-9a-f]{64}) \d+\n", text)
            # 16 deltas deep at the 16th turn; the 17th starts over on base
            assert m and m.group(1) == (base if turn in (0, 16) else lower), (turn, text[:300])
            assert f"\nlower {lower}\n" in text
            if turn in (1, 15, 16, 19):
                assert_same_as_merged(store, tmp_path, st, cid, f"t{turn}")
            ids.append(cid)
            lower = cid
        # One turn's change costs one turn's entries, not the chain's.
        assert store.manifest(ids[15]).count(b"\n") < store.manifest(ids[16]).count(b"\n")
        # Retention keeps the last; its chain (turns 16..19 over base) and
        # the lower it names stay, what nothing needs goes.
        store("gc", "--keep-last", "1", check=True)
        for cid in ids[16:] + [base]:
            assert store.manifest_path(cid).exists()
        assert not store.manifest_path(ids[3]).exists()
        out = tmp_path / "after-gc"
        store("restore", ids[19], "--to", str(out), check=True)
        assert tree(out) == {k: v for k, v in tree(st.merged).items() if v[0] != "special"}
    finally:
        st.umount()


def test_gc_keeps_the_base_of_a_delta_that_stays(store, layers, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    base, _ = store.create(ws, session="base")
    lay = layers(base)
    (lay.merged / "plain.txt").write_bytes(b"changed\n")
    cid, _ = layered(store, lay)
    # The base's session moves on; retention drops its first checkpoint.
    (ws / "plain.txt").write_bytes(b"base moved on\n")
    os.remove(ws / "bin.dat")
    store.create(ws, session="base", full=True)
    p = store("gc", "--keep-last", "1", check=True)
    assert b"error" not in p.stderr
    assert store.manifest_path(base).exists()
    out = tmp_path / "out"
    store("restore", cid, "--to", str(out), check=True)
    assert tree(out) == tree(lay.merged)
    # The dropped base is still whole (its chunks were kept with it).
    store("restore", base, "--to", str(tmp_path / "out-base"), check=True)
    # Once no delta needs it, the base goes at the next GC (nothing names it).
    store.create(ws, session="work")
    store("gc", "--keep-last", "1", check=True)
    assert not store.manifest_path(base).exists()
    assert not store.manifest_path(cid).exists()


def test_a_delta_grown_large_is_stored_whole(store, layers, tmp_path):
    """More than 4096 changes and more than a quarter of the base: the
    checkpoint is a full manifest (no base), with the same tree."""
    ws = tmp_path / "ws"
    make_workspace(ws)
    base, _ = store.create(ws, session="base")
    lay = layers(base)
    many = lay.merged / "many"
    many.mkdir()
    for i in range(4200):
        (many / f"f{i}").write_bytes(b"%d\n" % i)
    cid, _ = layered(store, lay)
    text = store.manifest(cid).decode()
    assert "\nbase " not in text
    assert_same_as_merged(store, tmp_path, lay, cid, "flat")
    # And again over the same layers: still whole, still the merged view.
    time.sleep(1.1)
    (lay.merged / "plain.txt").write_bytes(b"after the flattening\n")
    cid2, err = layered(store, lay)
    assert "\nbase " not in store.manifest(cid2).decode()
    assert_same_as_merged(store, tmp_path, lay, cid2, "flat2")


def test_kill_at_every_write_step_of_a_layered_snapshot(store, layers, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    base, _ = store.create(ws, session="work")
    lay = layers(base)
    (lay.merged / "plain.txt").write_bytes(b"changed\n")
    os.remove(lay.merged / "bin.dat")
    want = tree(lay.merged)
    step = 1
    while True:
        p = store("create", "--upper", str(lay.upper), "--lower", base, "--session", "work",
                  env={"AIRLOCK_FAULT_STEP": str(step)})
        if p.returncode == 0:
            break
        assert p.returncode == 99, p  # died at the step
        # The session's latest is the base, whole, or the new delta, whole.
        latest = store("latest", "--session", "work", check=True).stdout.decode().strip()
        out = tmp_path / f"r{step}"
        store("restore", latest, "--to", str(out), check=True)
        assert tree(out) == (tree(ws) if latest == base else want), step
        step += 1
        assert step < 20
    assert step > 3, "fewer write steps than expected"
    out = tmp_path / "final"
    store("restore", p.stdout.decode().strip(), "--to", str(out), check=True)
    assert tree(out) == want


def test_special_files_in_the_upper_layer_hide_what_they_replaced(store, layers, tmp_path):
    """A fifo made where a file or directory was: the merged view shows
    neither, so neither does the checkpoint (a plain snapshot skips fifos)."""
    ws = tmp_path / "ws"
    make_workspace(ws)
    (ws / "dir").mkdir()
    (ws / "dir" / "x").write_bytes(b"old secret\n")
    base, _ = store.create(ws, session="work")
    lay = layers(base)
    os.remove(lay.merged / "plain.txt")
    os.mkfifo(lay.merged / "plain.txt")
    shutil.rmtree(lay.merged / "dir")
    os.mkfifo(lay.merged / "dir")
    cid, err = layered(store, lay)
    assert "fifo skipped" in err
    assert_same_as_merged(store, tmp_path, lay, cid, "fifo")
    paths = [ln.split(b" -> ")[0].split()[-1] for ln in listing(store, cid).splitlines()]
    assert b"plain.txt" not in paths and b"dir" not in paths and b"dir/x" not in paths


def test_attributes_the_workspace_sets_are_not_the_overlay_s(store, layers, tmp_path):
    """On a mount without userxattr, "user.overlay.*" is an ordinary
    attribute anyone may set through the merged view: it must neither hide
    files nor stop the snapshot."""
    ws = tmp_path / "ws"
    make_workspace(ws)
    (ws / "dir").mkdir()
    (ws / "dir" / "x").write_bytes(b"x\n")
    base, _ = store.create(ws, session="work")
    lay = layers(base)
    m = lay.merged
    os.setxattr(m / "dir", "user.overlay.opaque", b"y")
    os.setxattr(m / "plain.txt", "user.overlay.whiteout", b"y")
    os.setxattr(m / "emptydir", "user.overlay.redirect", b"/elsewhere")
    os.setxattr(m / "empty", "user.overlay.metacopy", b"")
    cid, _ = layered(store, lay)
    assert_same_as_merged(store, tmp_path, lay, cid, "xattr")
    assert b"dir/x" in listing(store, cid)


def test_gc_keeps_the_lower_layer_of_a_kept_checkpoint(store, layers, tmp_path):
    """B, then C1 (a delta); C1 restored as a new lower layer; C2 over it.
    Retention to the last one must keep C1: the live workspace is over it."""
    ws = tmp_path / "ws"
    make_workspace(ws)
    b, _ = store.create(ws, session="work")
    lay = layers(b, "g0")
    (lay.merged / "plain.txt").write_bytes(b"one\n")
    c1, _ = layered(store, lay)
    lay.umount()
    lay2 = layers(c1, "g1")
    (lay2.merged / "empty").write_bytes(b"two\n")
    c2, _ = layered(store, lay2)
    assert f"\nlower {c1}\n" in store.manifest(c2).decode()
    store("gc", "--keep-last", "1", check=True)
    assert store.manifest_path(c1).exists()
    (lay2.merged / "new").write_bytes(b"three\n")
    c3, _ = layered(store, lay2)
    assert_same_as_merged(store, tmp_path, lay2, c3, "after-gc")
    # The lower's own lower is not kept: one step only.
    store("gc", "--keep-last", "1", check=True)
    assert store.manifest_path(c1).exists() and store.manifest_path(b).exists()

# SPDX-License-Identifier: Apache-2.0
"""Checkpoint retention and garbage collection: what is kept restores whole,
what no checkpoint references goes, and nothing a snapshot in flight stored
is collected."""
import os
import re
import secrets
import shutil
import subprocess
import time

import pytest

from test_checkpoint import Store, make_workspace, tree

SUMMARY = re.compile(
    rb"gc(?P<dry> \(dry run, nothing deleted\))?: (?P<cdel>\d+) checkpoints deleted, "
    rb"(?P<ckept>\d+) kept; (?P<mdel>\d+) manifests deleted; (?P<pdel>\d+) packs deleted, "
    rb"(?P<porphan>\d+) without an index deleted, (?P<pkept>\d+) kept "
    rb"\((?P<ppart>\d+) partly used\), (?P<prep>\d+) rewritten; (?P<tmp>\d+) temp files deleted; "
    rb"(?P<bytes>\d+) bytes freed\n$")


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def gc(store, *args, now=None, check=True):
    env = {"AIRLOCK_GC_NOW": str(int(now))} if now is not None else None
    p = store("gc", *args, env=env, check=check)
    if not check:
        return p
    m = SUMMARY.fullmatch(p.stdout)
    assert m, p
    return {k: (int(v) if v and v.isdigit() else v) for k, v in m.groupdict().items()}


def tenant_dir(store):
    return store.dir / "tenants" / store.tenant


def objects(store):
    """Every file under the store with its bytes (the lock file aside)."""
    out = {}
    for dirpath, _, files in os.walk(store.dir):
        for n in files:
            full = os.path.join(dirpath, n)
            if full != str(store.dir / ".lock"):
                with open(full, "rb") as f:
                    out[os.path.relpath(full, store.dir)] = f.read()
    return out


def names(store, kind):
    d = tenant_dir(store) / kind
    return sorted(os.listdir(d)) if d.exists() else []


def restores(store, tmp_path, cid, want, tag):
    out = tmp_path / f"restore-{tag}"
    store("restore", cid, "--to", str(out), check=True)
    assert tree(out) == want, tag


def restore_fails(store, tmp_path, cid, tag):
    p = store("restore", cid, "--to", str(tmp_path / f"gone-{tag}"))
    assert p.returncode == 125 and b"no checkpoint " + cid.encode() in p.stderr, p


def series(store, ws, n, session="default"):
    """n checkpoints of ws, each with a changed file: [(id, tree)]. Each is
    a full manifest (a delta would keep the checkpoint before it as its
    base: test_retention_keeps_the_base_of_plain_deltas)."""
    out = []
    for i in range(n):
        (ws / "changing").write_bytes(secrets.token_bytes(100_000))
        cid, _ = store.create(ws, session=session, full=True)
        out.append((cid, tree(ws)))
    return out


def test_retention_by_count_keeps_last_and_restores(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    a = series(store, ws, 4, session="a")
    b = series(store, ws, 2, session="b")
    dry = gc(store, "--keep-last", "2", "--dry-run")
    assert dry["dry"] and dry["cdel"] == 2 and dry["mdel"] == 2, dry
    before = objects(store)
    gc(store, "--keep-last", "2", "--dry-run")
    assert objects(store) == before, "a dry run deleted something"
    r = gc(store, "--keep-last", "2")
    assert (r["cdel"], r["ckept"], r["mdel"]) == (2, 4, 2), r
    # The changed file's chunks of the two deleted checkpoints went with
    # their packs (one pack each: the first also holds what all share).
    assert r["pdel"] == 1 and r["bytes"] > 100_000, r
    for cid, _ in a[:2]:
        restore_fails(store, tmp_path, cid, cid[:8])
    for i, (cid, want) in enumerate(a[2:] + b):
        restores(store, tmp_path, cid, want, f"kept{i}")
    assert len(os.listdir(tenant_dir(store) / "sessions" / "a" / "log")) == 2
    # Nothing more to do the second time.
    r = gc(store, "--keep-last", "2")
    assert r["cdel"] == r["pdel"] == r["bytes"] == 0, r


def test_retention_by_age_never_deletes_latest(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    cps = series(store, ws, 3)
    now = time.time()
    # Make the first checkpoint 30 days old: its log entry carries its time.
    log = tenant_dir(store) / "sessions" / "default" / "log"
    first = [n for n in os.listdir(log) if n.endswith(cps[0][0])]
    assert len(first) == 1
    old_ns = int((now - 30 * 86400) * 1e9)
    os.rename(log / first[0], log / f"{old_ns:020d}-{cps[0][0]}")
    r = gc(store, "--keep-days", "7", now=now)
    assert (r["cdel"], r["ckept"], r["mdel"]) == (1, 2, 1), r
    restore_fails(store, tmp_path, cps[0][0], "old")
    # Ten days on everything is old, but the latest stays.
    r = gc(store, "--keep-days", "7", now=now + 10 * 86400)
    assert (r["cdel"], r["ckept"]) == (1, 1), r
    restore_fails(store, tmp_path, cps[1][0], "mid")
    restores(store, tmp_path, cps[2][0], cps[2][1], "latest")
    assert store("latest", check=True).stdout.decode().strip() == cps[2][0]
    # And with every limit at its tightest.
    r = gc(store, "--keep-days", "1", "--keep-last", "1", now=now + 1000 * 86400)
    assert (r["cdel"], r["ckept"]) == (0, 1), r
    restores(store, tmp_path, cps[2][0], cps[2][1], "latest2")


def test_shared_chunk_survives(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "shared").write_bytes(secrets.token_bytes(400_000))
    (ws / "own").write_bytes(secrets.token_bytes(100_000))
    old, _ = store.create(ws)
    (ws / "own").write_bytes(secrets.token_bytes(100_000))
    new, _ = store.create(ws, full=True)
    want = tree(ws)
    # The old checkpoint's pack holds the shared chunks; with a fifth of it
    # unused, it is kept as it is under --max-unused 30 ...
    r = gc(store, "--keep-last", "1", "--max-unused", "30")
    assert (r["cdel"], r["pdel"], r["pkept"], r["ppart"], r["prep"]) == (1, 0, 2, 1, 0), r
    restore_fails(store, tmp_path, old, "old")
    restores(store, tmp_path, new, want, "new")
    # ... and rewritten by default (10%): the shared chunks move to a new
    # pack, the unreferenced one is gone from every index.
    before = sum(os.path.getsize(tenant_dir(store) / "packs" / k) for k in names(store, "packs"))
    dry = gc(store, "--dry-run")
    assert (dry["prep"], dry["ppart"]) == (1, 0), dry
    r = gc(store)
    assert (r["pdel"], r["pkept"], r["ppart"], r["prep"]) == (0, 1, 0, 1), r
    after = sum(os.path.getsize(tenant_dir(store) / "packs" / k) for k in names(store, "packs"))
    assert before - after >= 100_000 and r["bytes"] >= 100_000, (before, after, r)
    assert abs(dry["bytes"] - r["bytes"]) <= r["bytes"] // 100, (dry, r)
    restores(store, tmp_path, new, want, "new-after-rewrite")
    # The rewritten pack is whole: nothing more to do.
    r = gc(store)
    assert (r["pkept"], r["ppart"], r["prep"], r["pdel"]) == (2, 0, 0, 0), r


def test_unreferenced_pack_removed_and_bytes_counted(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big").write_bytes(secrets.token_bytes(1_000_000))
    old, _ = store.create(ws)
    packs = names(store, "packs")
    assert len(packs) == 1
    size = sum(os.path.getsize(tenant_dir(store) / k / packs[0]) for k in ("packs", "index"))
    (ws / "big").unlink()
    (ws / "small").write_bytes(b"small\n")
    new, _ = store.create(ws, full=True)
    want = tree(ws)
    r = gc(store, "--keep-last", "1")
    assert (r["cdel"], r["pdel"], r["bytes"]) == (1, 1, size), r
    assert packs[0] not in names(store, "packs") and packs[0] not in names(store, "index")
    assert names(store, "manifests") == [new]
    restores(store, tmp_path, new, want, "new")


def test_crash_leftovers_collected(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    first, _ = store.create(ws)
    want = tree(ws)
    leftovers = []
    for i in range(2):
        (ws / "new-file").write_bytes(secrets.token_bytes(100_000))
        before = set(names(store, "packs"))
        # Step 1 is the pack seal, step 2 the manifest: dying there leaves
        # a sealed pack (with its index) that no manifest references.
        p = store("create", "--workspace", str(ws), env={"AIRLOCK_FAULT_STEP": "2"})
        assert p.returncode == 99, p
        new = set(names(store, "packs")) - before
        assert len(new) == 1
        leftovers.append(new.pop())
    # A crash between a pack's two writes leaves it without its index.
    (tenant_dir(store) / "index" / leftovers[1]).unlink()
    # And a put that died before its rename leaves a temp file.
    tmp = tenant_dir(store) / "packs" / ".tmp#0123456789abcdef"
    tmp.write_bytes(b"x" * 1000)
    os.utime(tmp, (time.time() - 7200,) * 2)
    fresh = tenant_dir(store) / "packs" / ".tmp#fedcba9876543210"
    fresh.write_bytes(b"y")  # a put in flight, maybe: left alone
    r = gc(store)
    assert (r["cdel"], r["pdel"], r["porphan"], r["tmp"]) == (0, 1, 1, 1), r
    assert not set(leftovers) & set(names(store, "packs"))
    assert not tmp.exists() and fresh.exists()
    (ws / "new-file").unlink()
    restores(store, tmp_path, first, want, "first")
    # The store is whole: a snapshot after GC stores and restores.
    (ws / "after").write_bytes(secrets.token_bytes(50_000))
    cid, _ = store.create(ws)
    restores(store, tmp_path, cid, tree(ws), "after")


def test_corrupt_manifest_stops_gc_before_deleting(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    cps = series(store, ws, 3)
    (ws / "changing").write_bytes(secrets.token_bytes(100_000))
    p = store("create", "--workspace", str(ws), env={"AIRLOCK_FAULT_STEP": "2"})
    assert p.returncode == 99, p  # an unreferenced pack to sweep
    path = store.manifest_path(cps[1][0])
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    before = objects(store)
    p = gc(store, "--keep-last", "2", check=False)
    assert p.returncode == 125 and b"nothing deleted" in p.stderr, p
    assert cps[1][0].encode() in p.stderr, p
    assert objects(store) == before, "gc deleted something after a failed mark"


def test_gc_waits_for_snapshot_in_flight(store, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    (small / "f").write_bytes(b"small\n")
    old, _ = store.create(small)
    ws = tmp_path / "big"
    ws.mkdir()
    for i in range(8):  # 200 MB of incompressible data: several packs
        (ws / f"f{i}").write_bytes(os.urandom(25 << 20))
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "AIRLOCK_STORE_DIR": str(store.dir),
           "AIRLOCK_CHECKPOINT_KEY": str(store.key)}
    env.pop("AIRLOCK_FAULT_STEP", None)
    snap = subprocess.Popen([store.bin, "checkpoint", "create", "--workspace", str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    # Once its first pack is sealed the snapshot is surely holding the lock;
    # a GC now would see that pack referenced by no manifest.
    deadline = time.time() + 120
    packs_before = set(names(store, "packs"))
    while set(names(store, "packs")) == packs_before:
        assert snap.poll() is None, "the snapshot ended before sealing a pack"
        assert time.time() < deadline
        time.sleep(0.01)
    gcp = subprocess.Popen([store.bin, "checkpoint", "gc", "--keep-last", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    # GC may finish only once the snapshot is committed (it releases the
    # lock then, a moment before its process exits).
    while snap.poll() is None:
        if gcp.poll() is not None:
            latest = store("latest", check=True).stdout.decode().strip()
            assert latest != old, "gc finished while a snapshot was in flight"
            break
        time.sleep(0.02)
    out, err = snap.communicate()
    assert snap.returncode == 0, err
    gout, gerr = gcp.communicate(timeout=120)
    assert gcp.returncode == 0, gerr
    m = SUMMARY.fullmatch(gout)
    assert m and int(m["cdel"]) == 1 and int(m["pdel"]) == 1, gout
    new = out.decode().strip()
    assert store("latest", check=True).stdout.decode().strip() == new
    restore_fails(store, tmp_path, old, "old")
    restores(store, tmp_path, new, tree(ws), "new")


@pytest.mark.parametrize("with_lock_file", [True, False])
def test_restore_from_a_read_only_store(store, tmp_path, with_lock_file):
    """Readers take the store's lock shared (GC may rewrite packs); a store
    mounted read-only still restores, with its lock file or without."""
    ws = tmp_path / "ws"
    make_workspace(ws)
    cid, _ = store.create(ws)
    if not with_lock_file:
        os.remove(store.dir / ".lock")
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(store.dir), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        out = tmp_path / "out"
        p = store("restore", cid, "--to", str(out), "--store", str(ro))
        assert p.returncode == 0, p
        assert tree(out) == tree(ws)
        p = store("export", cid, "-o", str(tmp_path / "x.tar"), "--store", str(ro))
        assert p.returncode == 0, p
        # GC cannot run there, and says why.
        p = store("gc", "--store", str(ro))
        assert p.returncode == 125 and b"lock" in p.stderr, p
    finally:
        subprocess.run(["umount", str(ro)], check=True)


@pytest.mark.parametrize("killed", ["before-index", "after-seal"])
def test_gc_killed_while_rewriting_a_pack(store, tmp_path, killed):
    """A GC killed while rewriting a pack leaves the new pack (the same
    bytes, so the same name, the next GC will write) without its index, or
    sealed beside the old one. The next GC must keep every referenced chunk."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep").write_bytes(secrets.token_bytes(300_000))
    (ws / "changing").write_bytes(secrets.token_bytes(300_000))
    store.create(ws)
    (ws / "changing").write_bytes(secrets.token_bytes(300_000))
    kept, _ = store.create(ws, full=True)
    want = tree(ws)
    # What GC writes, learnt on a copy of the store.
    copy = Store(tmp_path / "copy")
    copy.dir.parent.mkdir()
    shutil.copytree(store.dir, copy.dir)
    copy.key.write_bytes(store.key.read_bytes())
    os.chmod(copy.key, 0o600)
    gc(copy, "--keep-last", "1")
    new = sorted(set(names(copy, "packs")) - set(names(store, "packs")))
    assert len(new) == 1, new
    # The state a kill leaves.
    shutil.copy(tenant_dir(copy) / "packs" / new[0], tenant_dir(store) / "packs" / new[0])
    if killed == "after-seal":
        shutil.copy(tenant_dir(copy) / "index" / new[0], tenant_dir(store) / "index" / new[0])
    restores(store, tmp_path, kept, want, "crashed")
    gc(store, "--keep-last", "1")
    restores(store, tmp_path, kept, want, "after")
    r = gc(store)
    assert (r["pdel"], r["porphan"], r["prep"], r["ppart"]) == (0, 0, 0, 0), r
    restores(store, tmp_path, kept, want, "again")
    assert sorted(names(store, "packs")) == sorted(names(store, "index"))


def test_retention_keeps_the_base_of_plain_deltas(store, tmp_path):
    """A plain directory's next checkpoints are deltas over the first (the
    stat cache says what changed): retention drops their log entries, but
    the base stays as long as a delta that stays needs it, whole; a full
    checkpoint (--full) lets it go."""
    ws = tmp_path / "ws"
    make_workspace(ws)
    time.sleep(1.1)  # past the racy second: the next ones read only what changed
    first, _ = store.create(ws)
    cps = []
    for i in range(3):
        (ws / "changing").write_bytes(secrets.token_bytes(100_000))
        cid, err = store.create(ws)
        assert "(1 read," in err, err
        assert b"\nbase " + first.encode() in store.manifest(cid)
        cps.append((cid, tree(ws)))
    r = gc(store, "--keep-last", "1")
    assert (r["cdel"], r["ckept"]) == (3, 1), r
    assert store.manifest_path(first).exists()
    for cid, _ in cps[:2]:
        restore_fails(store, tmp_path, cid, cid[:8])
    restores(store, tmp_path, cps[2][0], cps[2][1], "latest")
    store.create(ws, full=True)
    gc(store, "--keep-last", "1")
    assert not store.manifest_path(first).exists()
    assert not (tenant_dir(store) / "heads" / first).exists()


def test_the_merged_chunk_index_never_outlives_a_collected_pack(store, tmp_path):
    """Once the store has enough packs, opening it reads one merged chunk
    index instead of every pack's. After GC collects packs it names, it is
    not believed: content whose chunks went is stored again, never taken
    as present."""
    ws = tmp_path / "ws"
    make_workspace(ws)
    kept = series(store, ws, 10)
    midx = tenant_dir(store) / "midx" / "chunks"
    assert midx.exists()
    gone = kept[0]
    old_bytes = (ws / "changing").read_bytes()
    first_bytes = None
    # The first checkpoint's own content, kept aside.
    out = tmp_path / "first"
    store("restore", gone[0], "--to", str(out), check=True)
    first_bytes = (out / "changing").read_bytes()
    assert first_bytes != old_bytes
    r = gc(store, "--keep-last", "2")
    assert r["pdel"] >= 1, r
    restore_fails(store, tmp_path, gone[0], "first")
    # The collected content comes back: it is stored anew, and restores.
    (ws / "changing").write_bytes(first_bytes)
    cid, err = store.create(ws, full=True)
    m = re.search(r"(\d+) new chunks", err)
    assert m and int(m.group(1)) >= 1, err
    restores(store, tmp_path, cid, tree(ws), "again")
    for c, want in kept[-2:]:
        restores(store, tmp_path, c, want, c[:8])

# SPDX-License-Identifier: Apache-2.0
"""Sparse files and the caps of a snapshot: a workspace can hold a file of
15 TiB that costs it nothing (truncate). A snapshot reads runs of data and
stores holes as holes, so it finishes in the time its data takes; a restore
leaves the holes unallocated; export and import keep them (pax sparse). The
byte cap counts a file's size, holes and all, and is held before anything
is read, as are the entry and depth caps: past them nothing is committed."""
import hashlib
import os
import random
import tarfile
import time

import pytest

from test_checkpoint import Store

TIB = 1 << 40
GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def sparse_file(path, size):
    """A file of size bytes with no data (as `truncate -s` makes), or None
    when this filesystem cannot hold one that size."""
    try:
        with open(path, "wb") as f:
            f.truncate(size)
    except OSError:
        os.unlink(path)
        return None
    return path


def huge_sparse_file(path):
    """The largest of 15 TiB, 1 TiB, 64 GiB this filesystem takes, as a
    hole; skips the test where it keeps none (no holes here)."""
    for size in (15 * TIB, TIB, 64 * GIB):
        if sparse_file(path, size):
            st = os.stat(path)
            if st.st_blocks * 512 >= MIB:
                pytest.skip(f"{path}'s filesystem does not keep holes")
            return size
    pytest.skip(f"{path}'s filesystem takes no file of 64 GiB")


def timed(store, *args, limit=60, **kw):
    """Runs a command that must finish quickly whatever the files' sizes:
    reading 64 GiB of zeros alone would take minutes."""
    start = time.monotonic()
    p = store(*args, timeout=limit, **kw)
    return p, time.monotonic() - start


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        # A file's holes are read as zeros: fine for the sizes used here.
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


def test_huge_sparse_file_is_snapshot_and_restored_as_holes(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    size = huge_sparse_file(ws / "huge")
    (ws / "small").write_bytes(b"small\n")
    p, took = timed(store, "create", "--workspace", str(ws))
    assert p.returncode == 0, p
    assert took < 30, took
    cid = p.stdout.decode().strip()
    assert f"{size + 6} bytes".encode() in p.stderr, p.stderr
    # The manifest says hole, not 15 TiB of chunks.
    text = store.manifest(cid)
    assert text.startswith(b"airlock-manifest 2\n")
    assert f" {size} huge h{size}\n".encode() in text, text
    assert len(text) < 4096

    out = tmp_path / "out"
    p, took = timed(store, "restore", cid, "--to", str(out))
    assert p.returncode == 0 and took < 30, (p, took)
    st = os.stat(out / "huge")
    assert st.st_size == size
    assert st.st_blocks <= os.stat(ws / "huge").st_blocks + 8, st  # unallocated
    assert (out / "small").read_bytes() == b"small\n"

    # Export: a pax sparse entry, small; import reads it back as holes.
    tar = tmp_path / "x.tar"
    p, took = timed(store, "export", cid, "-o", str(tar))
    assert p.returncode == 0 and took < 30, (p, took)
    assert tar.stat().st_size < MIB
    with tarfile.open(tar) as t:
        m = t.getmember("huge")
        assert m.size == size and m.sparse is not None, m.sparse
    p, took = timed(store, "import", str(tar), "--session", "imported")
    assert p.returncode == 0 and took < 30, (p, took)
    back = p.stdout.decode().strip()
    assert store("ls", back, check=True).stdout == store("ls", cid, check=True).stdout
    out2 = tmp_path / "out2"
    p, took = timed(store, "restore", back, "--to", str(out2))
    assert p.returncode == 0 and took < 30, (p, took)
    assert os.stat(out2 / "huge").st_size == size
    assert os.stat(out2 / "huge").st_blocks <= os.stat(ws / "huge").st_blocks + 8


def test_byte_cap_counts_holes_and_refuses_before_reading(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    size = huge_sparse_file(ws / "huge")
    (ws / "small").write_bytes(b"x")
    # Refused on its size, at once: not read, nothing committed.
    p, took = timed(store, "create", "--workspace", str(ws), "--max-bytes", "1G")
    assert p.returncode == 125 and took < 30, (p, took)
    assert b"huge" in p.stderr and b"--max-bytes" in p.stderr and b"holes count" in p.stderr
    assert store("latest").returncode != 0
    assert not (store.dir / "tenants" / "default" / "manifests").exists() or \
        not os.listdir(store.dir / "tenants" / "default" / "manifests")
    # Within a cap that counts it, it goes in; restores and imports hold
    # their caps to the same sizes.
    cap = str(size + 1)
    p, _ = timed(store, "create", "--workspace", str(ws), "--max-bytes", cap)
    assert p.returncode == 0, p
    cid = p.stdout.decode().strip()
    p, took = timed(store, "restore", cid, "--to", str(tmp_path / "out"), "--max-bytes", "1G")
    assert p.returncode == 125 and b"byte limit" in p.stderr and took < 30, p
    assert not (tmp_path / "out").exists()
    tar = tmp_path / "x.tar"
    store("export", cid, "-o", str(tar), check=True, timeout=60)
    p, took = timed(store, "import", str(tar), "--session", "i", "--max-bytes", "1G")
    assert p.returncode == 125 and b"--max-bytes" in p.stderr and took < 30, p
    assert store("latest", "--session", "i").returncode != 0


def write_layout(path, pieces):
    """pieces: ("data", n) random bytes or ("hole", n); a file with them in
    order (a hole at the end sets the size)."""
    rng = random.Random(str(path))
    pos = 0
    with open(path, "wb") as f:
        for kind, n in pieces:
            if kind == "data":
                f.seek(pos)
                f.write(rng.randbytes(n))
            pos += n
        f.truncate(pos)


LAYOUTS = {
    # hole first, data across chunk sizes (64 KiB - 1 MiB), tiny data, hole last
    "mixed": [("hole", MIB), ("data", 3 * MIB + 123), ("hole", 5 * MIB), ("data", 10),
              ("hole", 64 * 1024), ("data", 2 * MIB), ("hole", 7 * MIB)],
    "head": [("data", 300 * 1024), ("hole", 40 * MIB)],
    "tail": [("hole", 40 * MIB), ("data", 4096)],
    "comb": [p for _ in range(64) for p in (("data", 4096), ("hole", 60 * 1024))] +
            [("data", 1)],
    "dense": [("data", 3 * MIB + 7)],
    "empty": [],
}


def test_data_and_holes_interleaved_round_trip(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for name, pieces in LAYOUTS.items():
        write_layout(ws / name, pieces)
    if os.stat(ws / "tail").st_blocks * 512 >= 40 * MIB:
        pytest.skip(f"{ws}'s filesystem does not keep holes")
    want = {n: (os.stat(ws / n).st_size, sha(ws / n)) for n in LAYOUTS}
    one = store("create", "--workspace", str(ws), "--session", "one",
                env={"AIRLOCK_STORE_THREADS": "1"}, check=True).stdout.decode().strip()
    four = store("create", "--workspace", str(ws), "--session", "four",
                 env={"AIRLOCK_STORE_THREADS": "4"}, check=True).stdout.decode().strip()
    # The same pieces whatever the threads.
    assert store("ls", one, check=True).stdout == store("ls", four, check=True).stdout
    body = lambda cid: [l for l in store.manifest(cid).split(b"\n") if l.startswith(b"f ")]
    assert body(one) == body(four)
    assert any(b",h" in l or b" h" in l for l in body(one))

    def same(d, tag):
        for n, (size, digest) in want.items():
            st = os.stat(d / n)
            assert (st.st_size, sha(d / n)) == (size, digest), (tag, n)
            # As sparse as the source (give or take a filesystem's own blocks).
            assert st.st_blocks <= os.stat(ws / n).st_blocks + 64, (tag, n, st.st_blocks)

    out = tmp_path / "out"
    store("restore", one, "--to", str(out), check=True)
    same(out, "restore")
    # Through a tar and back.
    tar = tmp_path / "x.tar"
    store("export", one, "-o", str(tar), check=True)
    ex = tmp_path / "extracted"
    with tarfile.open(tar) as t:
        assert t.getmember("tail").sparse
        t.extractall(ex)
    for n, (size, digest) in want.items():
        assert (os.stat(ex / n).st_size, sha(ex / n)) == (size, digest), ("tar", n)
    back = store("import", str(tar), "--session", "back", check=True).stdout.decode().strip()
    assert body(back) == body(one)
    out2 = tmp_path / "out2"
    store("restore", back, "--to", str(out2), check=True)
    same(out2, "import")
    # Unchanged files are taken from the checkpoint unread, holes and all.
    old = 1_600_000_000
    for n in LAYOUTS:
        os.utime(ws / n, (old, old))
    newest = max(os.stat(ws / n).st_ctime_ns for n in LAYOUTS)
    while time.time_ns() < newest + 1_100_000_000:
        time.sleep(0.05)
    store("create", "--workspace", str(ws), "--session", "inc", check=True)
    # (--full: the whole tree, so that its pieces show; by default the
    # unchanged files are left out of a delta.)
    p = store("create", "--workspace", str(ws), "--session", "inc", "--full", check=True)
    assert f"(0 read, {len(LAYOUTS)} unchanged)".encode() in p.stderr, p.stderr
    inc = p.stdout.decode().strip()
    # The same pieces as read the first time (only the mtimes differ).
    pieces = lambda cid: [l.split(b" ")[3:] for l in body(cid)]
    assert pieces(inc) == pieces(one)
    out3 = tmp_path / "out3"
    store("restore", inc, "--to", str(out3), check=True)
    same(out3, "incremental")


def test_entry_and_depth_caps_refused(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(50):
        (ws / f"f{i:02}").write_bytes(b"x")
    p = store("create", "--workspace", str(ws), "--max-files", "20")
    assert p.returncode == 125 and b"more than 20 entries" in p.stderr, p
    assert b"--max-files" in p.stderr
    assert store("latest").returncode != 0
    store("create", "--workspace", str(ws), "--max-files", "50", check=True)

    deep = tmp_path / "deep"
    d = deep
    for i in range(10):
        d = d / f"d{i}"
    d.mkdir(parents=True)
    (d / "leaf").write_bytes(b"x")
    p = store("create", "--workspace", str(deep), "--max-depth", "5", "--session", "deep")
    assert p.returncode == 125 and b"--max-depth" in p.stderr, p
    assert store("latest", "--session", "deep").returncode != 0
    store("create", "--workspace", str(deep), "--max-depth", "11", "--session", "deep",
          check=True)


def test_layered_byte_cap_counts_the_whole_tree(store, tmp_path):
    """The upper layer alone is within the cap; with the base's files the
    tree is not."""
    base = tmp_path / "base"
    base.mkdir()
    if not sparse_file(base / "big", 3 * GIB):
        pytest.skip("no file of 3 GiB on this filesystem")
    (base / "keep").write_bytes(b"k")
    lower, _ = store.create(base, session="base")
    upper = tmp_path / "upper"
    upper.mkdir()
    sparse_file(upper / "other", 3 * GIB)
    p = store("create", "--upper", str(upper), "--lower", lower, "--session", "layer",
              "--max-bytes", "4G")
    assert p.returncode == 125 and b"layered workspace" in p.stderr, p
    assert b"--max-bytes" in p.stderr
    assert store("latest", "--session", "layer").returncode != 0
    # Replacing the base's big file keeps the tree within it.
    sparse_file(upper / "big", 1)
    p = store("create", "--upper", str(upper), "--lower", lower, "--session", "layer",
              "--max-bytes", "4G", check=True)
    cid = p.stdout.decode().strip()
    ls = store("ls", cid, check=True).stdout
    assert b" big\n" in ls and b" other\n" in ls and b" keep\n" in ls

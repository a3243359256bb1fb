# SPDX-License-Identifier: Apache-2.0
"""Checkpoints as tar archives: export (read back by GNU tar), import (the
same rules as a restore, with nothing written to any filesystem, and a
refused archive leaving no checkpoint behind)."""
import gzip
import io
import lzma
import os
import shutil
import stat
import subprocess
import tarfile
import time

import pytest

from test_checkpoint import Store, make_workspace, tree


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def files_under(d):
    """Every path under d with its size: what a refused import must not change."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(d):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            out[p] = os.lstat(p).st_size
    return out


def import_ok(store, path, *args, session="default"):
    p = store("import", str(path), "--session", session, *args)
    assert p.returncode == 0, p
    cid = p.stdout.decode().strip()
    assert len(cid) == 64, p
    return cid


def restored(store, cid, to):
    store("restore", cid, "--to", str(to), check=True)
    return tree(to)


def workspace_with_specials(tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    os.mkfifo(ws / "fifo")
    (ws / "suid").write_bytes(b"x")
    os.chmod(ws / "suid", 0o4755)
    want = tree(ws)
    want.pop("fifo")
    want["suid"] = ("f", 0o755, b"x")
    return ws, want


def test_export_is_read_by_tar(store, tmp_path):
    ws, want = workspace_with_specials(tmp_path)
    cid, _ = store.create(ws)
    out = tmp_path / "exp" / "cp.tar"
    out.parent.mkdir()
    store("export", cid, "-o", str(out), check=True)
    assert os.listdir(out.parent) == ["cp.tar"]  # no temporary file left
    listing = subprocess.run(["tar", "-tvf", str(out)], capture_output=True, check=True)
    lines = listing.stdout.splitlines()
    assert len(lines) == len(want)
    assert all(b" 0/0 " in line for line in lines)
    x = tmp_path / "x"
    x.mkdir()
    subprocess.run(["tar", "-xf", str(out), "-C", str(x)], capture_output=True, check=True)
    assert tree(x) == want
    # mtimes to the nanosecond (pax records)
    for name in ("bin.dat", "plain.txt"):
        assert os.lstat(x / name).st_mtime_ns == os.lstat(ws / name).st_mtime_ns
    assert os.readlink(x / "abs-link") == "/etc/shadow"
    # -o - writes the same archive to standard output
    p = store("export", cid, "-o", "-", check=True)
    assert p.stdout == out.read_bytes()


def test_export_import_round_trip(store, tmp_path):
    ws, want = workspace_with_specials(tmp_path)
    cid, _ = store.create(ws)
    t = tmp_path / "cp.tar"
    store("export", cid, "-o", str(t), check=True)
    cid2 = import_ok(store, t, session="imported")
    assert store("latest", "--session", "imported", check=True).stdout.decode().strip() == cid2
    assert restored(store, cid2, tmp_path / "out") == want
    # the same tree: nothing differs between the two checkpoints
    assert store("diff", cid, cid2, check=True).stdout == b""
    # compressed archives too
    raw = t.read_bytes()
    for name, data in (("cp.tar.gz", gzip.compress(raw)), ("cp.tar.xz", lzma.compress(raw))):
        (tmp_path / name).write_bytes(data)
        c = import_ok(store, tmp_path / name, session="compressed")
        assert store("diff", cid, c, check=True).stdout == b"", name
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-q", str(t), "-o", str(tmp_path / "cp.tar.zst")], check=True)
        c = import_ok(store, tmp_path / "cp.tar.zst", session="compressed")
        assert store("diff", cid, c, check=True).stdout == b""


def test_import_gnu_tar_and_implied_parents(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    t = tmp_path / "gnu.tar"
    # "./", "./a", ...: the root entry is the workspace itself
    subprocess.run(["tar", "--format=gnu", "-C", str(ws), "-cf", str(t), "."], check=True)
    cid = import_ok(store, t)
    assert restored(store, cid, tmp_path / "out") == tree(ws)
    # a file whose parents are not listed: they are made, mode 0755
    t2 = tmp_path / "implied.tar"
    with tarfile.open(t2, "w", format=tarfile.PAX_FORMAT) as tf:
        ti = tarfile.TarInfo("a/b/c.txt")
        ti.size, ti.mode, ti.mtime = 3, 0o600, 1_000_000_000
        tf.addfile(ti, io.BytesIO(b"abc"))
        d = tarfile.TarInfo("a/b")  # listed after what is in it: its own mode
        d.type, d.mode = tarfile.DIRTYPE, 0o700
        tf.addfile(d)
    cid = import_ok(store, t2)
    got = restored(store, cid, tmp_path / "out2")
    assert got == {"a": ("d", 0o755, None), "a/b": ("d", 0o700, None),
                   "a/b/c.txt": ("f", 0o600, b"abc")}


def tar_of(path, members, fmt=tarfile.PAX_FORMAT):
    """members: (TarInfo, bytes or None)."""
    with tarfile.open(path, "w", format=fmt) as tf:
        for ti, data in members:
            if data is not None:
                ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)


def reg(name, data=b"x", mode=0o644):
    ti = tarfile.TarInfo(name)
    ti.mode = mode
    return ti, data


def special(name, kind, **kw):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti, None


HOSTILE = {
    "dotdot": [reg("../evil")],
    "absolute": [reg("/abs")],
    "dotdot-inside": [reg("a/../../x")],
    "dot-segment": [reg("a/./x")],
    "empty-segment": [reg("a//x")],
    "through-symlink": [special("l", tarfile.SYMTYPE, linkname="/etc"), reg("l/passwd")],
    "below-file": [reg("f"), reg("f/x")],
    "symlink-after-implied-dir": [reg("l/x"), special("l", tarfile.SYMTYPE, linkname="/etc")],
    "hardlink": [reg("a"), special("b", tarfile.LNKTYPE, linkname="a")],
    "chardev": [special("null", tarfile.CHRTYPE, devmajor=1, devminor=3)],
    "blockdev": [special("sda", tarfile.BLKTYPE, devmajor=8, devminor=0)],
    "fifo": [special("fifo", tarfile.FIFOTYPE)],
    "setuid": [reg("suid", mode=0o4755)],
    "setgid-dir": [special("d", tarfile.DIRTYPE, mode=0o2755)],
    "sticky": [special("t", tarfile.DIRTYPE, mode=0o1777)],
    "duplicate": [reg("a"), reg("a", b"y")],
    "duplicate-dir": [special("d", tarfile.DIRTYPE), special("d/", tarfile.DIRTYPE)],
    "long-path": [reg("/".join(["x" * 200] * 21))],
}


OUTSIDE = ["/abs", "/etc/evil", "/etc/passwd/x", "/tmp/evil", "/x", "/evil"]


def snapshot_state(store, tmp_path):
    """The session's latest checkpoint and everything under the test's
    directory (the store included): a refused import changes neither."""
    return (store("latest", check=True).stdout, files_under(tmp_path),
            [p for p in OUTSIDE if os.path.lexists(p)], os.lstat("/etc/passwd").st_mtime_ns)


@pytest.fixture
def seeded(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep").write_bytes(b"keep")
    store.create(ws)
    return store


def refused(store, tmp_path, t, *args, why=None, timeout=120):
    before = snapshot_state(store, tmp_path)
    t0 = time.monotonic()
    p = store("import", str(t), *args, timeout=timeout)
    took = time.monotonic() - t0
    assert p.returncode == 125, p
    assert len(p.stderr.splitlines()) == 1, p
    if why:
        assert why in p.stderr, p
    assert snapshot_state(store, tmp_path) == before
    return p, took


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_tar_refused(seeded, tmp_path, case):
    t = tmp_path / "hostile.tar"
    tar_of(t, HOSTILE[case])
    p, _ = refused(seeded, tmp_path, t)
    if case.startswith(("setuid", "setgid", "sticky")):
        assert b"setuid, setgid or sticky" in p.stderr
    assert not os.path.exists("/etc/evil") and not os.path.exists("/abs")


def test_hostile_gnu_and_ustar_headers_refused(seeded, tmp_path):
    for fmt in (tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT):
        t = tmp_path / "h.tar"
        tar_of(t, [reg("../evil")], fmt=fmt)
        refused(seeded, tmp_path, t, why=b"..")


def test_entry_bomb_refused(seeded, tmp_path):
    t = tmp_path / "many.tar"
    with tarfile.open(t, "w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(100_000):
            tf.addfile(tarfile.TarInfo(f"f{i}"), io.BytesIO(b""))
    _, took = refused(seeded, tmp_path, t, "--max-files", "1000", why=b"--max-files")
    assert took < 10


def test_depth_refused(seeded, tmp_path):
    t = tmp_path / "deep.tar"
    tar_of(t, [reg("/".join(["d"] * 20) + "/f")])
    refused(seeded, tmp_path, t, "--max-depth", "10", why=b"--max-depth")


def claim(t, size, data):
    """A header that claims size bytes, followed by only data."""
    ti = tarfile.TarInfo("huge")
    ti.size = size
    with open(t, "wb") as f:
        f.write(ti.tobuf(format=tarfile.PAX_FORMAT))
        f.write(data)


def test_byte_claims_refused(seeded, tmp_path):
    t = tmp_path / "claim.tar"
    claim(t, 1 << 30, b"z" * 4096)
    # over the limit: refused on the claim, before any byte is read
    refused(seeded, tmp_path, t, "--max-bytes", "1M", why=b"--max-bytes")
    # within the limit: refused as truncated, never allocated
    refused(seeded, tmp_path, t, why=b"truncated")


def test_gzip_bomb_refused_quickly(seeded, tmp_path):
    t = tmp_path / "bomb.tar.gz"
    zeros = bytes(1 << 20)

    class Zeros(io.RawIOBase):
        left = 200 << 20

        def readinto(self, b):
            n = min(len(b), self.left, len(zeros))
            b[:n] = zeros[:n]
            self.left -= n
            return n

    with tarfile.open(t, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        ti = tarfile.TarInfo("zeros")
        ti.size = 200 << 20
        tf.addfile(ti, Zeros())
        for i in range(20):  # and the same in pieces, under the per-file claim
            ti = tarfile.TarInfo(f"z{i}")
            ti.size = 1 << 20
            tf.addfile(ti, io.BytesIO(zeros))
    assert t.stat().st_size < 2 << 20
    _, took = refused(seeded, tmp_path, t, "--max-bytes", "10M", why=b"--max-bytes")
    assert took < 5


def test_bytes_over_limit_across_files(seeded, tmp_path):
    t = tmp_path / "pieces.tar"
    tar_of(t, [reg(f"p{i}", b"q" * 300_000) for i in range(10)])
    refused(seeded, tmp_path, t, "--max-bytes", "1M", why=b"--max-bytes")


def test_truncated_and_garbage_refused(seeded, tmp_path):
    ws = tmp_path / "ws2"
    ws.mkdir()
    (ws / "big").write_bytes(os.urandom(2_000_000))
    (ws / "small").write_bytes(b"s")
    cid, _ = seeded.create(ws, session="other")
    full = tmp_path / "full.tar"
    seeded("export", cid, "-o", str(full), check=True)
    data = full.read_bytes()
    for cut in (len(data) // 2, 700, 100):
        t = tmp_path / "cut.tar"
        t.write_bytes(data[:cut])
        refused(seeded, tmp_path, t)
    t = tmp_path / "garbage.tar"
    t.write_bytes(os.urandom(10_000))
    refused(seeded, tmp_path, t)
    t.write_bytes(b"")
    refused(seeded, tmp_path, t)
    # a zip is not a tar
    import zipfile
    with zipfile.ZipFile(t, "w") as z:
        z.writestr("a", "b")
    refused(seeded, tmp_path, t)


def test_export_of_corrupt_store_fails(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_bytes(os.urandom(100_000))
    cid, _ = store.create(ws)
    pack = next((store.dir / "tenants" / "default" / "packs").iterdir())
    b = bytearray(pack.read_bytes())
    b[len(b) // 2] ^= 0xFF
    pack.write_bytes(bytes(b))
    out = tmp_path / "o" / "cp.tar"
    out.parent.mkdir()
    p = store("export", cid, "-o", str(out))
    assert p.returncode == 125 and len(p.stderr.splitlines()) == 1, p
    assert os.listdir(out.parent) == []  # neither the file nor a temporary one
    p = store("export", cid, "-o", "-")
    assert p.returncode == 125, p
    # what did reach stdout is not a complete archive
    r = subprocess.run(["tar", "-tf", "-"], input=p.stdout, capture_output=True)
    assert r.returncode != 0 or not p.stdout
    assert stat.S_ISREG(os.lstat(ws / "f").st_mode)

# SPDX-License-Identifier: Apache-2.0
"""Checkpoints: round trips, incremental snapshots, and restores that never
write outside their target whatever the store holds.

Hostile manifests are crafted here with the test's own key (what an attacker
who can write to the store but not forge the HMAC cannot do is tested
separately: a manifest with a wrong HMAC, or moved to another tenant)."""
import hashlib
import hmac
import os
import re
import secrets
import stat
import subprocess
import time

import pytest

from conftest import airlock_path

NAMES = ["plain.txt", "with space", "new\nline", "tab\tname", "ünïcödé-名前", "%percent,comma",
         "-dash", ".hidden", "x" * 200, "back\\slash", "q\"uote'", "\x7fdel"]


class Store:
    def __init__(self, tmp_path, tenant="default"):
        self.dir = tmp_path / "store"
        self.key = tmp_path / "key"
        self.tenant = tenant
        self.bin = airlock_path()

    def __call__(self, *args, env=None, check=False, tenant=None, timeout=120):
        e = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "AIRLOCK_STORE_DIR": str(self.dir),
             "AIRLOCK_CHECKPOINT_KEY": str(self.key)}
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if k in os.environ:
                e[k] = os.environ[k]
        if env:
            e.update(env)
        p = subprocess.run([self.bin, "checkpoint", args[0], "--tenant", tenant or self.tenant,
                            *args[1:]], capture_output=True, timeout=timeout, env=e)
        if check and p.returncode != 0:
            raise AssertionError(f"checkpoint {args} exited {p.returncode}: {p.stderr!r}")
        return p

    def create(self, ws, session="default", full=False, **kw):
        more = ["--full"] if full else []
        p = self("create", "--workspace", str(ws), "--session", session, *more, check=True, **kw)
        cid = p.stdout.decode().strip()
        assert re.fullmatch(r"[0-9a-f]{64}", cid), p
        return cid, p.stderr.decode()

    def manifest_path(self, cid, tenant=None):
        return self.dir / "tenants" / (tenant or self.tenant) / "manifests" / cid

    def manifest(self, cid):
        return self.manifest_path(cid).read_bytes()

    def sign(self, body):
        mac = hmac.new(self.key.read_bytes(), body, hashlib.sha256).hexdigest()
        return body + b"hmac " + mac.encode() + b"\n"

    def plant(self, text, tenant=None):
        """Stores manifest text under its id, as a writer of the store could."""
        cid = hashlib.sha256(text).hexdigest()
        p = self.manifest_path(cid, tenant)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text)
        return cid


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def tree(root):
    """Everything under root: {relpath: (kind, mode, content-or-target)}."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", 0, os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode), None)
            elif not stat.S_ISREG(st.st_mode):
                out[rel] = ("special", 0, None)
            else:
                with open(full, "rb") as f:
                    out[rel] = ("f", stat.S_IMODE(st.st_mode), f.read())
    return out


def make_workspace(ws):
    ws.mkdir()
    for i, n in enumerate(NAMES):
        (ws / n).write_bytes(f"content {i}\n".encode() * (i + 1))
    deep = ws
    for i in range(30):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    (deep / "leaf").write_bytes(b"deep\n")
    (ws / "bin.dat").write_bytes(secrets.token_bytes(300_000))
    (ws / "empty").write_bytes(b"")
    (ws / "emptydir").mkdir()
    os.chmod(ws / "emptydir", 0o700)
    (ws / "exec.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(ws / "exec.sh", 0o755)
    os.symlink("plain.txt", ws / "rel-link")
    os.symlink("/etc/shadow", ws / "abs-link")
    os.symlink("../../outside", ws / "up-link")
    os.symlink("dangling/none", ws / "dangling")


def test_round_trip(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    os.mkfifo(ws / "fifo")
    suid = ws / "suid"
    suid.write_bytes(b"x")
    os.chmod(suid, 0o4755)
    cid, err = store.create(ws)
    assert "fifo skipped" in err and "suid" in err, err
    out = tmp_path / "out"
    store("restore", cid, "--to", str(out), check=True)
    want = tree(ws)
    assert want.pop("fifo") == ("special", 0, None)
    want["suid"] = ("f", 0o755, b"x")  # the setuid bit is not kept
    got = tree(out)
    assert got == want
    # Symlinks are restored as symlinks, never followed.
    assert os.readlink(out / "abs-link") == "/etc/shadow"
    assert not (tmp_path / "outside").exists()
    # mtimes come back (to the nanosecond where the filesystem keeps them).
    assert os.lstat(out / "bin.dat").st_mtime_ns == os.lstat(ws / "bin.dat").st_mtime_ns
    # ls lists every entry once.
    p = store("ls", cid, check=True)
    assert len(p.stdout.splitlines()) == len(want)


def test_incremental_reads_only_changes(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    # Files older than the racy window are trusted by size, mtime, inode, ctime.
    old = 1_600_000_000
    for dirpath, dirnames, filenames in os.walk(ws):
        for n in filenames:
            os.utime(os.path.join(dirpath, n), (old, old), follow_symlinks=False)
    # Changed (ctime) just now: read, and read again by the next snapshot,
    # which starts within the racy second after them.
    a, err = store.create(ws)
    assert re.search(r"\(16 read, 0 unchanged\)", err), err
    # Once a snapshot has started more than a second after the last change,
    # the one after it reads nothing.
    newest = max(os.lstat(os.path.join(d, n)).st_ctime_ns
                 for d, _, files in os.walk(ws) for n in files)
    while time.time_ns() < newest + 1_100_000_000:
        time.sleep(0.05)
    store.create(ws)
    b, err = store.create(ws)
    assert re.search(r"\(0 read, 16 unchanged\)", err), err
    # Another checkpoint (its own parent and time) of the same tree.
    assert a != b
    assert store("ls", a, check=True).stdout == store("ls", b, check=True).stdout
    (ws / "plain.txt").write_bytes(b"changed\n")
    c, err = store.create(ws)
    assert "(1 read," in err, err
    p = store("diff", a, c, check=True)
    text = p.stdout.decode()
    assert "M plain.txt" in text and "-content 0" in text and "+changed" in text, text
    assert store("latest", check=True).stdout.decode().strip() == c


def test_large_file_edit_stores_little(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    data = bytearray(secrets.token_bytes(24 << 20))
    (ws / "big").write_bytes(data)
    store.create(ws)
    data[12 << 20: (12 << 20) + 100] = b"E" * 100
    (ws / "big").write_bytes(data)
    _, err = store.create(ws)
    m = re.search(r"(\d+) new chunks \((\d+) bytes\)", err)
    assert m and int(m.group(1)) <= 3, err
    assert int(m.group(2)) < 4 << 20, err


def test_flipped_byte_is_detected(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_bytes(secrets.token_bytes(200_000))
    cid, _ = store.create(ws)
    packs = list((store.dir / "tenants" / "default" / "packs").iterdir())
    assert len(packs) == 1
    raw = bytearray(packs[0].read_bytes())
    raw[len(raw) // 2] ^= 0x40
    packs[0].write_bytes(bytes(raw))
    out = tmp_path / "out"
    p = store("restore", cid, "--to", str(out))
    assert p.returncode == 125 and len(p.stderr.splitlines()) == 1, p
    assert list(out.iterdir()) == [], "a partial restore was left"


def test_manifest_moved_to_another_tenant_is_refused(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_bytes(b"hello\n")
    cid, _ = store.create(ws)
    text = store.manifest(cid)
    store.plant(text, tenant="other")
    p = store("restore", cid, "--to", str(tmp_path / "out"), tenant="other")
    assert p.returncode == 125 and b"tenant" in p.stderr, p
    # An edited manifest (no valid HMAC) is not believed at all.
    forged = text.replace(b"f 0644", b"f 0666", 1)
    fid = store.plant(forged)
    p = store("restore", fid, "--to", str(tmp_path / "out2"))
    assert p.returncode == 125 and b"authentic" in p.stderr, p


def header(store, n):
    return (b"airlock-manifest 1\ntenant default\nsession default\nparent -\ncreated 1\n"
            b"entries %d\n" % n)


@pytest.mark.parametrize("entries", [
    [b"f 0644 0 0 ../evil -"],
    [b"f 0644 0 0 /etc/evil -"],
    [b"d 0755 0 a", b"f 0644 0 0 a/../../evil -"],
    [b"f 0644 0 0 a%2Fb -"],
    [b"f 0644 0 0 a%00b -"],
    [b"l 0 link /tmp", b"f 0644 0 0 link/evil -"],
    [b"f 0644 0 0 x -", b"f 0644 0 0 x -"],
    [b"f 4755 0 0 suid -"],
    [b"c 0644 0 0 dev -"],
    [b"f 0644 0 0 ./x -"],
    [b"f 0644 0 0 a//b -"],
])
def test_hostile_manifest_refused(store, tmp_path, entries):
    ws = tmp_path / "ws"
    ws.mkdir()
    store.create(ws)  # makes the key and the tenant
    body = header(store, len(entries)) + b"".join(e + b"\n" for e in entries)
    cid = store.plant(store.sign(body))
    out = tmp_path / "target" / "out"
    out.parent.mkdir()
    before = set(os.listdir(tmp_path))
    p = store("restore", cid, "--to", str(out))
    assert p.returncode == 125 and len(p.stderr.splitlines()) == 1, p
    assert set(os.listdir(tmp_path)) == before
    assert not out.exists() or list(out.iterdir()) == []
    assert not os.path.exists("/etc/evil") and not os.path.exists("/tmp/evil")


def test_bombs_refused(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(50):
        (ws / f"f{i}").write_bytes(b"y" * 10_000)
    cid, _ = store.create(ws)
    for args in (["--max-files", "10"], ["--max-bytes", "100k"]):
        out = tmp_path / ("out" + args[0])
        p = store("restore", cid, "--to", str(out), *args)
        assert p.returncode == 125, (args, p)
        assert not out.exists() or list(out.iterdir()) == [], args
    deep = ws
    for i in range(20):
        deep = deep / "d"
    deep.mkdir(parents=True)
    cid, _ = store.create(ws)
    p = store("restore", cid, "--to", str(tmp_path / "outdeep"), "--max-depth", "10")
    assert p.returncode == 125, p


def test_restore_target_must_be_empty(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_bytes(b"1")
    cid, _ = store.create(ws)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_bytes(b"mine")
    p = store("restore", cid, "--to", str(out))
    assert p.returncode == 125 and b"not empty" in p.stderr
    assert (out / "keep").read_bytes() == b"mine"


def test_crash_at_every_step_leaves_store_consistent(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    first, _ = store.create(ws)
    (ws / "new-file").write_bytes(secrets.token_bytes(100_000))
    step = 1
    while True:
        p = store("create", "--workspace", str(ws), env={"AIRLOCK_FAULT_STEP": str(step)})
        if p.returncode == 0:
            break
        assert p.returncode == 99, p  # died at the step
        # The previous checkpoint is whole; the session's latest is it, or
        # a new checkpoint that is whole too (it died after writing that).
        out = tmp_path / f"r{step}"
        store("restore", first, "--to", str(out), check=True)
        latest = store("latest", check=True).stdout.decode().strip()
        if latest != first:
            out = tmp_path / f"n{step}"
            store("restore", latest, "--to", str(out), check=True)
            assert tree(out) == tree(ws), step
        step += 1
        assert step < 20
    assert step > 3, "fewer write steps than expected"
    second = p.stdout.decode().strip()
    out = tmp_path / "final"
    store("restore", second, "--to", str(out), check=True)
    assert tree(out) == {k: v for k, v in tree(ws).items()}


def same_but_created(store_a, cid_a, store_b, cid_b):
    """Whether checkpoint b is checkpoint a but for its creation time: b's
    manifest with a's time, signed again, must hash to a's id."""
    body_a = store_a.manifest(cid_a).rsplit(b"hmac ", 1)[0]
    body_b = store_b.manifest(cid_b).rsplit(b"hmac ", 1)[0]
    created = re.search(rb"^created \d+$", body_a, re.M).group(0)
    body_b = re.sub(rb"^created \d+$", created, body_b, count=1, flags=re.M)
    return hashlib.sha256(store_a.sign(body_b)).hexdigest() == cid_a


def test_thread_count_does_not_change_the_checkpoint(store, tmp_path):
    ws = tmp_path / "ws"
    make_workspace(ws)
    # Many files sharing content (workers race to store the same new chunk),
    # multi-chunk files, and more than one 32 MiB pack (sealed by workers).
    shared = secrets.token_bytes(70_000)
    for i in range(300):
        d = ws / "many" / f"d{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}").write_bytes(shared if i % 3 == 0 else secrets.token_bytes(i * 37))
    for i in range(10):
        (ws / f"big{i}").write_bytes(os.urandom(4_500_000))
    (ws / "big-copy").write_bytes((ws / "big3").read_bytes())
    other = Store(tmp_path / "other")
    other.dir.parent.mkdir()
    one, err1 = store.create(ws, env={"AIRLOCK_STORE_THREADS": "1"})
    other.key.write_bytes(store.key.read_bytes())
    os.chmod(other.key, 0o600)
    four, err4 = other.create(ws, env={"AIRLOCK_STORE_THREADS": "4"})
    # Same counts (new chunks and bytes are exact whoever stored them) ...
    assert err1 == err4, (err1, err4)
    # ... and the same checkpoint, but for the time in it.
    assert same_but_created(store, one, other, four)
    assert len(list((other.dir / "tenants" / "default" / "packs").iterdir())) >= 2
    # Restores on one thread and on several give the same tree.
    want = tree(ws)
    for threads in ("1", "3"):
        out = tmp_path / f"out-{threads}"
        other("restore", four, "--to", str(out), check=True,
              env={"AIRLOCK_STORE_THREADS": threads})
        assert tree(out) == want, threads
    for bad in ("0", "x", "257"):
        p = store("create", "--workspace", str(ws), env={"AIRLOCK_STORE_THREADS": bad})
        assert p.returncode == 125 and b"AIRLOCK_STORE_THREADS" in p.stderr, p
        p = store("restore", one, "--to", str(tmp_path / "never"),
                  env={"AIRLOCK_STORE_THREADS": bad})
        assert p.returncode == 125 and b"AIRLOCK_STORE_THREADS" in p.stderr, p
        assert not (tmp_path / "never").exists()


def test_worker_read_error_stops_the_snapshot(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "d").mkdir()
    for i in range(200):
        (ws / "d" / f"f{i:03}").write_bytes(secrets.token_bytes(20_000))
    first, _ = store.create(ws)
    manifests = set(os.listdir(store.dir / "tenants" / "default" / "manifests"))
    # A regular file (to stat and open) whose reads fail: the process's own
    # /proc/PID/mem bound over it (in a mount namespace of its own), read
    # from address 0, fails with EIO in whichever worker gets it.
    bad = ws / "d" / "f100-bad"
    bad.write_bytes(b"")
    for threads in ("4", "1"):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "AIRLOCK_STORE_DIR": str(store.dir),
               "AIRLOCK_CHECKPOINT_KEY": str(store.key), "AIRLOCK_STORE_THREADS": threads}
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"):
            if k in os.environ:
                env[k] = os.environ[k]
        p = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             'mount --bind "/proc/$$/mem" "$1" && exec "$2" checkpoint create --workspace "$3"',
             "sh", str(bad), store.bin, str(ws)],
            capture_output=True, timeout=120, env=env)
        assert p.returncode == 125, p
        assert p.stderr.decode().strip() == \
            "airlock: cannot read d/f100-bad: Input/output error", p
        assert store("latest", check=True).stdout.decode().strip() == first
        assert set(os.listdir(store.dir / "tenants" / "default" / "manifests")) == manifests


def test_worker_pack_write_error_stops_the_snapshot(store, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "small").write_bytes(b"1")
    first, _ = store.create(ws)
    # More than a pack's worth (32 MiB) of new data: a worker seals a pack
    # mid-walk, and the store refuses it (a symlink in the key's path).
    for i in range(9):
        (ws / f"big{i}").write_bytes(os.urandom(4_500_000))
    tenant = store.dir / "tenants" / "default"
    (tenant / "packs").rename(tenant / "packs.real")
    os.symlink("packs.real", tenant / "packs")
    for threads in ("4", "1"):
        p = store("create", "--workspace", str(ws), env={"AIRLOCK_STORE_THREADS": threads})
        assert p.returncode == 125, p
        assert len(p.stderr.splitlines()) == 1 and b"symlink" in p.stderr, p
        assert store("latest", check=True).stdout.decode().strip() == first

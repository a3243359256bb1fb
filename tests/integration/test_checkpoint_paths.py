# SPDX-License-Identifier: Apache-2.0
"""Paths handed to `airlock checkpoint` (run as root) in trees an ordinary
user owns: a user who owns a directory on the way must not be able to send
root elsewhere by swapping a component for a symbolic link (before the
call, or raced during it by a process of that user), nor by a trailing
slash after a link. Every command that takes a path is attacked; each must
refuse with a clear message, and nothing may be read from or written to the
root-only directory the links point at."""
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import pytest

from conftest import TEST_UID
from test_checkpoint import Store

SECRET = b"ROOT-ONLY-SECRET\n"

# Runs as the user: swaps two names (a directory and a link) atomically,
# as fast as it can, until the stop file appears.
RACER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b, stop = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3]
ready = sys.argv[4]
open(ready, "w").close()
while not os.path.exists(stop):
    for _ in range(64):
        if libc.renameat2(-100, a, -100, b, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
            sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
"""


class Host:
    """base/ (0755, root): home/ (the user's, 0755) and rootonly/ (root,
    0700) with what root keeps there: a directory ws/ holding a secret, a
    tar of it, and an empty directory."""

    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="airlock-paths-", dir="/var/tmp")
        os.chmod(self.base, 0o755)
        self.home = os.path.join(self.base, "home")
        self.root = os.path.join(self.base, "rootonly")
        os.mkdir(self.home)
        os.chown(self.home, TEST_UID, TEST_UID)
        os.mkdir(self.root, 0o700)
        ws = os.path.join(self.root, "ws")
        os.mkdir(ws)
        with open(os.path.join(ws, "id_secret"), "wb") as f:
            f.write(SECRET)
        os.mkdir(os.path.join(self.root, "empty"))
        with tarfile.open(os.path.join(self.root, "x.tar"), "w") as t:
            t.add(os.path.join(ws, "id_secret"), arcname="id_secret")
        os.chmod(os.path.join(self.root, "x.tar"), 0o600)
        self.before = self.listing()

    def user_dir(self, *parts):
        """A directory of the user's below home."""
        p = os.path.join(self.home, *parts)
        os.makedirs(p, exist_ok=True)
        d = self.home
        for part in parts:
            d = os.path.join(d, part)
            os.chown(d, TEST_UID, TEST_UID)
        return p

    def user_link(self, name, target):
        p = os.path.join(self.home, name)
        os.symlink(target, p)
        os.lchown(p, TEST_UID, TEST_UID)
        return p

    def listing(self):
        """Everything in rootonly/: names, sizes, mtimes, contents."""
        out = {}
        for d, dirs, files in os.walk(self.root):
            for n in dirs + files:
                p = os.path.join(d, n)
                st = os.lstat(p)
                data = open(p, "rb").read() if os.path.isfile(p) else None
                out[os.path.relpath(p, self.root)] = (st.st_mode, st.st_size, st.st_mtime_ns,
                                                      data)
        return out

    def untouched(self):
        assert self.listing() == self.before, "the root-only directory changed"

    def close(self):
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def host():
    h = Host()
    yield h
    h.close()


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def refused(p):
    """Refused, saying a link in the path is not followed."""
    assert p.returncode != 0, p
    assert b"symbolic link in the path is not followed" in p.stderr, p.stderr
    return p


def no_secret(store, p):
    """A checkpoint the command made (if any) holds nothing of root's."""
    if p.returncode != 0:
        return
    cid = p.stdout.decode().split()[0]
    ls = store("ls", cid, check=True).stdout
    assert b"id_secret" not in ls, ls


class Race:
    """The user swapping home/NAME (their directory) and home/NAME.alt (a
    link to the root-only directory) while root runs commands."""

    def __init__(self, host, name):
        self.a = os.path.join(host.home, name)
        self.b = os.path.join(host.home, name + ".alt")
        self.stop = os.path.join(host.base, "stop-" + name)
        ready = os.path.join(host.home, ".ready-" + name)
        self.p = subprocess.Popen([sys.executable, "-c", RACER, self.a, self.b, self.stop, ready],
                                  user=TEST_UID, group=TEST_UID, extra_groups=[],
                                  stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):
            assert self.p.poll() is None, self.p.stderr.read()
            assert time.monotonic() < deadline, "the racer did not start"
            time.sleep(0.01)

    def end(self):
        open(self.stop, "w").close()
        try:
            self.p.wait(timeout=30)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
        assert self.p.returncode == 0, self.p.stderr.read()


def raced(host, name, attempt, check):
    """Runs attempt(i) while the user races home/NAME against a link into
    rootonly/, until both outcomes were seen a few times (or 60 s): a
    refusal (the link was there) and a success (the user's own directory
    was). check(p) after each: nothing of root's read or written."""
    host.user_dir(name)
    host.user_link(name + ".alt", host.root)
    race = Race(host, name)
    seen = {"refused": 0, "ok": 0, "other": 0}
    try:
        deadline = time.monotonic() + 60
        i = 0
        while time.monotonic() < deadline and min(seen["refused"], seen["ok"]) < 5:
            p = attempt(i)
            i += 1
            check(p)
            host.untouched()
            if p.returncode == 0:
                seen["ok"] += 1
            elif b"symbolic link in the path is not followed" in p.stderr:
                seen["refused"] += 1
            else:
                seen["other"] += 1  # e.g. a directory that was not there at that instant
    finally:
        race.end()
    host.untouched()
    # Both states were hit: the race really exercised the link.
    assert seen["refused"] > 0 and seen["ok"] > 0, seen


def seed(store, host):
    """A checkpoint to restore and export."""
    ws = host.user_dir("seedws")
    with open(os.path.join(ws, "hello"), "wb") as f:
        f.write(b"hello\n")
    cid, _ = store.create(ws, session="seed")
    return cid


# ---- create --workspace / --upper ----

def test_create_through_a_swapped_parent_is_refused(store, host):
    ws = host.user_dir("p", "ws")
    with open(os.path.join(ws, "mine"), "wb") as f:
        f.write(b"the user's\n")
    # The user swaps home/p for a link to rootonly/ (which has ws/ too).
    os.rename(os.path.join(host.home, "p"), os.path.join(host.home, "p.real"))
    host.user_link("p", host.root)
    p = refused(store("create", "--workspace", os.path.join(host.home, "p", "ws")))
    assert store("latest").returncode != 0  # nothing committed
    host.untouched()


def test_create_of_a_link_with_a_trailing_slash_is_refused(store, host):
    host.user_link("ws", os.path.join(host.root, "ws"))
    for form in ("ws/", "ws//", "ws/."):
        refused(store("create", "--workspace", os.path.join(host.home, form)))
    assert store("latest").returncode != 0
    host.untouched()


def test_create_raced(store, host):
    ws = host.user_dir("r", "ws")  # rootonly/ has a ws/ too: the secret
    with open(os.path.join(ws, "mine"), "wb") as f:
        f.write(b"the user's\n")
    raced(host, "r",
          lambda i: store("create", "--workspace", ws + ("/" if i % 2 else ""),
                          "--session", f"s{i}"),
          lambda p: no_secret(store, p))


def test_create_upper_through_a_swapped_parent_is_refused(store, host):
    lower = seed(store, host)
    host.user_link("q", host.root)
    refused(store("create", "--upper", os.path.join(host.home, "q", "ws"), "--lower", lower,
                  "--session", "layer"))
    refused(store("create", "--upper", os.path.join(host.home, "q") + "/", "--lower", lower,
                  "--session", "layer"))
    assert store("latest", "--session", "layer").returncode != 0
    host.untouched()


# ---- restore --to ----

def test_restore_through_a_swapped_parent_is_refused(store, host):
    cid = seed(store, host)
    host.user_link("p", host.root)
    refused(store("restore", cid, "--to", os.path.join(host.home, "p", "out")))
    # --force: replacing a tree of root's through the link is refused too.
    for target in ("empty", "out"):
        refused(store("restore", cid, "--to", os.path.join(host.home, "p", target), "--force"))
    # A link as the target itself, with and without a trailing slash.
    host.user_link("t", os.path.join(host.root, "empty"))
    for form in ("t", "t/", "t//"):
        refused(store("restore", cid, "--to", os.path.join(host.home, form)))
    host.untouched()
    # The user's own directory works.
    out = os.path.join(host.user_dir("mine"), "out")
    store("restore", cid, "--to", out, check=True)
    assert open(os.path.join(out, "hello"), "rb").read() == b"hello\n"


def test_restore_raced(store, host):
    cid = seed(store, host)
    raced(host, "r",
          lambda i: store("restore", cid, "--to", os.path.join(host.home, "r", f"out{i}")),
          lambda p: None)


# ---- export -o ----

def test_export_through_a_swapped_parent_is_refused(store, host):
    cid = seed(store, host)
    host.user_link("p", host.root)
    refused(store("export", cid, "-o", os.path.join(host.home, "p", "out.tar")))
    # The output file itself may be a link: it is replaced, never written through.
    target = host.user_link("o.tar", os.path.join(host.root, "x.tar"))
    store("export", cid, "-o", target, check=True)
    assert not os.path.islink(target) and os.path.getsize(target) > 0
    host.untouched()


def test_export_raced(store, host):
    cid = seed(store, host)
    raced(host, "r",
          lambda i: store("export", cid, "-o", os.path.join(host.home, "r", f"out{i}.tar")),
          lambda p: None)


# ---- import FILE ----

def test_import_through_a_swapped_parent_is_refused(store, host):
    host.user_link("p", host.root)
    refused(store("import", os.path.join(host.home, "p", "x.tar")))
    host.user_link("x.tar", os.path.join(host.root, "x.tar"))
    refused(store("import", os.path.join(host.home, "x.tar")))
    assert store("latest").returncode != 0
    host.untouched()


def test_import_raced(store, host):
    d = host.user_dir("r")  # rootonly/ has an x.tar too: the secret
    with tarfile.open(os.path.join(d, "x.tar"), "w") as t:
        t.addfile(tarfile.TarInfo("harmless"))
    raced(host, "r",
          lambda i: store("import", os.path.join(d, "x.tar"), "--session", f"s{i}"),
          lambda p: no_secret(store, p))


# ---- --store and --key ----

def test_store_and_key_through_a_swapped_parent_are_refused(store, host, tmp_path):
    ws = host.user_dir("ws")
    host.user_link("p", host.root)
    p = store("create", "--workspace", ws, "--store", os.path.join(host.home, "p", "store"))
    refused(p)
    p = store("create", "--workspace", ws, "--key", os.path.join(host.home, "p", "key"))
    refused(p)
    # A link as the key itself, or as the store itself with a trailing slash.
    host.user_link("k", os.path.join(host.root, "ws", "id_secret"))
    refused(store("create", "--workspace", ws, "--key", os.path.join(host.home, "k")))
    host.user_link("s", os.path.join(host.root, "empty"))
    refused(store("create", "--workspace", ws, "--store", os.path.join(host.home, "s") + "/"))
    host.untouched()


def test_store_raced(store, host):
    ws = host.user_dir("ws")
    raced(host, "r",
          lambda i: store("create", "--workspace", ws,
                          "--store", os.path.join(host.home, "r", f"store{i}")),
          lambda p: None)

# SPDX-License-Identifier: Apache-2.0
"""--user: commands run as a user of the sandbox's, not root. The workspace
(and the home, the layered tree, the fresh workspace) is that user's inside
and its owner's on the host; root inside may read and change what is there
but make nothing. Every message is checked word for word."""
import ctypes
import json
import os
import shutil
import stat
import subprocess

import pytest

from conftest import TEST_UID, UID_BASE, UID_END, deadline_poll
from test_lifecycle import elf_interpreter


def sh(airlock, script, *opts, **kw):
    return airlock.run(*opts, "--", "/bin/sh", "-c", script, **kw)


def owners(d):
    """{relative path: (uid, gid)} of everything below d."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            out[os.path.relpath(p, d)] = (st.st_uid, st.st_gid)
    return out


def caps(status_text):
    return {l.split(":")[0]: l.split()[1] for l in status_text.splitlines()
            if l.startswith("Cap")}


def test_run_as_user_files_are_the_owners(airlock, workspace):
    """The command is user 2000:3000 with no capability left; what it makes
    in the workspace belongs to the workspace's owner on the host."""
    p = sh(airlock, "id -u; id -g; id -G; grep ^Cap /proc/self/status; "
                    "mkdir /workspace/d && echo x > /workspace/d/f && ln -s d /workspace/l && "
                    "stat -c '%u:%g' /workspace /workspace/d/f",
           "--workspace", str(workspace), "--user", "2000:3000", check=True)
    lines = p.stdout.decode().splitlines()
    assert lines[:3] == ["2000", "3000", "3000"], lines
    c = caps("\n".join(lines[3:8]))
    assert c["CapEff"] == c["CapPrm"] == c["CapAmb"] == c["CapInh"] == "0000000000000000", c
    assert lines[8:] == ["2000:3000", "2000:3000"]
    assert owners(workspace) == {"d": (TEST_UID, TEST_UID), "d/f": (TEST_UID, TEST_UID),
                                 "l": (TEST_UID, TEST_UID)}


def test_user_is_not_root(airlock, workspace):
    p = sh(airlock, "touch /workspace/f /etc/x /usr/x /tmp/f; chown 0 /tmp/f; "
                    "chown 0 /workspace/f; echo done",
           "--workspace", str(workspace), "--user", "1000")
    assert p.returncode == 0
    # (In the workspace root has no id at all.)
    assert p.stderr.decode() == (
        "touch: cannot touch '/etc/x': Permission denied\n"
        "touch: cannot touch '/usr/x': Permission denied\n"
        "chown: changing ownership of '/tmp/f': Operation not permitted\n"
        "chown: changing ownership of '/workspace/f': Value too large for defined data "
        "type\n")
    assert p.stdout == b"done\n"


def test_names_from_the_sandboxs_passwd(airlock):
    """A name is looked up in the passwd the sandbox sees (here the view of
    the host's /etc); one it does not have is refused before anything
    runs."""
    with open("/etc/passwd") as f:
        nobody = [l.split(":") for l in f if l.startswith("nobody:")]
    if not nobody:
        pytest.skip("no nobody in this host's /etc/passwd")
    p = sh(airlock, "id -u; id -g", "--user", "nobody", check=True)
    assert p.stdout.decode() == f"{nobody[0][2]}\n{nobody[0][3]}\n"
    p = airlock.run("--user", "no-such-user", "--", "true")
    assert (p.returncode, p.stderr.decode()) == (
        125, "airlock: no user 'no-such-user' in the sandbox's /etc/passwd\n")
    p = airlock.run("--user", "nobody:no-such-group", "--", "true")
    assert (p.returncode, p.stderr.decode()) == (
        125, "airlock: no group 'no-such-group' in the sandbox's /etc/group\n")
    p = airlock.sandbox("create", "--user", "no-such-user")
    assert (p.returncode, p.stderr.decode()) == (
        125, "airlock: no user 'no-such-user' in the sandbox's /etc/passwd\n")


def busybox_image(tmp_path):
    busybox = shutil.which("busybox")
    if not busybox:
        pytest.skip("no busybox on this host to build a small image from")
    if elf_interpreter(busybox):
        pytest.skip(f"{busybox} is dynamically linked: it cannot be an image on its own")
    img = tmp_path / "img"
    (img / "bin").mkdir(parents=True)
    shutil.copy(busybox, img / "bin" / "busybox")
    for tool in ("sh", "id", "touch", "stat", "echo"):
        os.symlink("busybox", img / "bin" / tool)
    (img / "etc").mkdir()
    return img


def test_names_from_an_image(airlock, tmp_path, workspace):
    """--image DIR: its own etc/passwd and etc/group, however hostile the
    lines around the one asked for; never the host's."""
    img = busybox_image(tmp_path)
    (img / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\n"
        "broken:x:notanumber\n"
        + "long:" + "x" * 10000 + "\n"
        + "agent:x:4242:4343::/home/agent:/bin/sh\n"
        "huge:x:70000:1::/:/bin/sh\n"
        "bad:x:1:1\n")
    (img / "etc" / "group").write_text("devs:x:5151:agent\n")
    p = sh(airlock, "id -u; id -g", "--image", str(img), "--user", "agent", check=True)
    assert p.stdout == b"4242\n4343\n"
    p = sh(airlock, "id -u; id -g; touch /workspace/f", "--image", str(img), "--user",
           "agent:devs", "--workspace", str(workspace), check=True)
    assert p.stdout == b"4242\n5151\n"
    assert owners(workspace) == {"f": (TEST_UID, TEST_UID)}
    for user, msg in [
        ("huge", "user 'huge' of the sandbox's /etc/passwd has an id above 65535, which no "
                 "sandbox has"),
        ("bad", "the sandbox's /etc/passwd has a malformed line for user 'bad'"),
        ("broken", "the sandbox's /etc/passwd has a malformed line for user 'broken'"),
        ("long", "the sandbox's /etc/passwd has a malformed line for user 'long'"),
        ("nobody", "no user 'nobody' in the sandbox's /etc/passwd"),  # the host has one
        ("agent:wheel", "no group 'wheel' in the sandbox's /etc/group"),
    ]:
        p = airlock.run("--image", str(img), "--user", user, "--", "true")
        assert (p.returncode, p.stderr.decode()) == (125, f"airlock: {msg}\n"), user
    # A link is resolved inside the image, never on the host.
    os.unlink(img / "etc" / "passwd")
    os.symlink("/etc/../../etc/shadow-not-here", img / "etc" / "passwd")
    p = airlock.run("--image", str(img), "--user", "root", "--", "true")
    assert (p.returncode, p.stderr.decode()) == (
        125, "airlock: no user 'root': the sandbox has no /etc/passwd\n")
    os.unlink(img / "etc" / "passwd")
    os.symlink("/etc/group", img / "etc" / "passwd")  # the image's group file
    p = airlock.run("--image", str(img), "--user", "root", "--", "true")
    assert (p.returncode, p.stderr.decode()) == (
        125, "airlock: no user 'root' in the sandbox's /etc/passwd\n")



def inotify_opens(path):
    """An inotify descriptor that sees each open of path (IN_OPEN)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0
    assert libc.inotify_add_watch(fd, os.fsencode(path), 0x20) >= 0  # IN_OPEN
    return fd


def test_hostile_etc_files_are_never_opened(airlock, tmp_path):
    """An image's etc/passwd that is a device is looked at, never opened
    (host root opening a device can arm a watchdog, rewind a tape); one
    that links to /proc or /sys inside a sandbox is never read for it."""
    img = busybox_image(tmp_path)
    os.mknod(img / "etc" / "passwd", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    watch = inotify_opens(img / "etc" / "passwd")
    try:
        p = airlock.run("--image", str(img), "--user", "agent", "--", "true")
        assert (p.returncode, p.stderr.decode()) == (
            125, "airlock: the sandbox's /etc/passwd is not a regular file\n")
        try:
            events = os.read(watch, 4096)
        except BlockingIOError:
            events = b""
        assert events == b"", "the device was opened"
    finally:
        os.close(watch)
    os.unlink(img / "etc" / "passwd")
    (img / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    sid = airlock.sandbox("create", "--image", str(img), check=True).stdout.decode().strip()
    try:
        # Root inside points its passwd at a file of its /proc: a regular
        # file, readable, but not one host root reads on its behalf.
        airlock.sandbox("exec", sid, "--", "sh", "-c",
                        "rm /etc/passwd && ln -s /proc/version /etc/passwd", check=True)
        p = airlock.sandbox("exec", "--user", "root", sid, "--", "true")
        assert (p.returncode, p.stderr.decode()) == (
            125, "airlock: the sandbox's /etc/passwd is not a regular file\n")
    finally:
        airlock.sandbox("destroy", sid)


@pytest.mark.parametrize("value", ["70000", "65536", "-1", "1000:", ":1000", "1:2:3", "a b",
                                   "", "0x10", "9lives", "1000:65536"])
def test_bad_values_refused(airlock, value):
    want = ("airlock: --user wants NAME, UID or UID:GID (UID and GID from 0 to 65535), "
            f"not '{value}'\n")
    for args in (["run", "--user", value, "--", "true"], ["create", "--user", value],
                 ["exec", "--user", value, "0123456789abcdef", "--", "true"]):
        p = airlock.sandbox(*args)
        assert (p.returncode, p.stderr.decode()) == (125, want), args
    p = airlock.run("--user", "bo\nb", "--", "true")
    assert (p.returncode, p.stderr.decode()) == (
        125, "airlock: --user wants NAME, UID or UID:GID (UID and GID from 0 to 65535)\n")


def test_persistent_sandbox_and_root_in_its_workspace(airlock, workspace):
    """Every exec of a sandbox created with --user is that user; exec
    --user 0 is root, which reads and changes what is in the workspace but
    cannot make anything there (no id of its has a name on that mount)."""
    p = airlock.sandbox("create", "--workspace", str(workspace), "--user", "1000", check=True)
    sid = p.stdout.decode().strip()
    try:
        p = airlock.sandbox("exec", sid, "--", "sh", "-c",
                            "id -u; echo one > /workspace/f; mkdir /workspace/d", check=True)
        assert p.stdout == b"1000\n"
        for root in ("0", "root"):
            p = airlock.sandbox("exec", "--user", root, sid, "--", "sh", "-c",
                                "id -u; cat /workspace/f; echo two >> /workspace/f; "
                                "touch /workspace/new; mkdir /workspace/d/sub; "
                                "grep ^CapEff /proc/self/status")
            assert p.returncode == 0, p
            out = p.stdout.decode().splitlines()
            assert out[:2] == ["0", "one"] and out[2] != "CapEff:\t0000000000000000", out
            assert p.stderr.decode() == (
                "touch: cannot touch '/workspace/new': Value too large for defined data type\n"
                "mkdir: cannot create directory '/workspace/d/sub': Value too large for "
                "defined data type\n")
        # The sandbox is fine, and its user still its own.
        p = airlock.sandbox("exec", sid, "--", "sh", "-c", "id -u; cat /workspace/f; "
                            "touch /workspace/g", check=True)
        assert p.stdout == b"1000\none\ntwo\ntwo\n"
        p = airlock.sandbox("exec", "--user", "nobody", sid, "--", "id", "-un", check=True)
        assert p.stdout == b"nobody\n"
        # Detached commands too.
        n = airlock.sandbox("exec", "-d", "--user", "nobody", sid, "--", "id", "-un",
                            check=True).stdout.decode().strip()
        m = airlock.sandbox("exec", "-d", sid, "--", "id", "-u", check=True).stdout.decode().strip()
        deadline_poll(lambda: airlock.sandbox("logs", sid, n).stdout == b"nobody\n", 10,
                      "the detached command's output")
        deadline_poll(lambda: airlock.sandbox("logs", sid, m).stdout == b"1000\n", 10,
                      "the detached command's output")
        p = airlock.sandbox("exec", "--user", "no-such-user", sid, "--", "true")
        assert (p.returncode, p.stderr.decode()) == (
            125, "airlock: no user 'no-such-user' in the sandbox's /etc/passwd\n")
        # A user the sandbox itself added is found: its passwd is the one read.
        p = airlock.sandbox("exec", "--user", "0", sid, "--", "sh", "-c",
                            "echo 'made:x:3333:4444::/:/bin/sh' >> /etc/passwd", check=True)
        p = airlock.sandbox("exec", "--user", "made", sid, "--", "id", "-u", check=True)
        assert p.stdout == b"3333\n"
        # inspect and list say who.
        p = airlock.sandbox("inspect", sid, check=True)
        assert "\nuser:       1000:1000\n" in p.stdout.decode()
        info = json.loads(airlock.sandbox("inspect", sid, "--json", check=True).stdout)
        assert info["user"] == {"uid": 1000, "gid": 1000}
        listed = json.loads(airlock.sandbox("list", "--json", check=True).stdout)
        assert [s["user"] for s in listed] == [{"uid": 1000, "gid": 1000}]
    finally:
        airlock.sandbox("destroy", sid, check=True)
    assert owners(workspace) == {"f": (TEST_UID, TEST_UID), "d": (TEST_UID, TEST_UID),
                                 "g": (TEST_UID, TEST_UID)}
    # A sandbox without --user: root.
    p = airlock.sandbox("create", check=True)
    sid = p.stdout.decode().strip()
    try:
        p = airlock.sandbox("inspect", sid, check=True)
        assert "\nuser:       root\n" in p.stdout.decode()
        info = json.loads(airlock.sandbox("inspect", sid, "--json", check=True).stdout)
        assert info["user"] == {"uid": 0, "gid": 0}
        # Its fresh workspace is root's: another user may not write there.
        p = airlock.sandbox("exec", "--user", "1000:1000", sid, "--", "sh", "-c",
                            "id -u; touch /workspace/x")
        assert (p.returncode, p.stdout, p.stderr.decode()) == (
            1, b"1000\n", "touch: cannot touch '/workspace/x': Permission denied\n")
    finally:
        airlock.sandbox("destroy", sid, check=True)


def test_fresh_workspace_is_the_users(airlock, tmp_path):
    p = sh(airlock, "id -u; stat -c '%u:%g' /workspace; touch /workspace/f && echo made",
           "--user", "1000:1000", check=True)
    assert p.stdout == b"1000\n1000:1000\nmade\n"
    # An empty workspace of the host's root is handed to the user's ids of
    # the sandbox's range, not its root's.
    ws = tmp_path / "rootws"
    ws.mkdir()
    p = sh(airlock, "stat -c '%u:%g' /workspace; touch /workspace/f && echo made",
           "--workspace", str(ws), "--user", "1000:2000", check=True)
    assert p.stdout == b"1000:2000\nmade\n"
    for st in (os.stat(ws), os.stat(ws / "f")):
        assert UID_BASE <= st.st_uid < UID_END and st.st_uid % 65536 == 1000, st
        assert st.st_gid == st.st_uid + 1000, st


def test_owner_removes_everything(airlock, workspace, tmp_path):
    """Whatever the user and root inside leave, the owner removes it all."""
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, TEST_UID, TEST_UID)
    sh(airlock, "mkdir -p /workspace/a/b && echo x > /workspace/a/b/f && chmod 000 /workspace/a/b "
                "&& chmod 000 /workspace/a && mkfifo /workspace/p && ln -s /etc /workspace/l && "
                "echo h > ~/.rc && stat -c '%u:%g' ~ ~/.rc && echo $HOME",
       "--workspace", str(workspace), "--home", str(home), "--home-path", "/home/agent",
       "--user", "1000", check=True)
    for d in (workspace, home):
        assert set(owners(d).values()) == {(TEST_UID, TEST_UID)}, owners(d)
        r = subprocess.run(["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}",
                            "--clear-groups", "sh", "-c",
                            "chmod -R u+rwX . && find . -mindepth 1 -delete && ls -A"],
                           cwd=d, capture_output=True)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b""), r
        assert os.listdir(d) == []


def test_home_is_the_users(airlock, workspace, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, TEST_UID, TEST_UID)
    p = sh(airlock, "echo $HOME; stat -c '%u:%g' ~; touch ~/made && echo made",
           "--workspace", str(workspace), "--home", str(home), "--user", "1000:1000",
           check=True)
    assert p.stdout == b"/root\n1000:1000\nmade\n"
    assert owners(home) == {"made": (TEST_UID, TEST_UID)}


def test_layered_workspace(airlock, tmp_path):
    """--lower/--layer: the overlay works as the user; its layer stays the
    owner's, and root inside makes nothing there either."""
    lower, layer = tmp_path / "lower", tmp_path / "layer"
    (lower / "workspace").mkdir(parents=True)
    (lower / "workspace" / "old").write_text("old\n")
    layer.mkdir()
    for d in (lower, lower / "workspace", lower / "workspace" / "old", layer):
        os.chown(d, TEST_UID, TEST_UID)
    p = sh(airlock, "id -u; cat /workspace/old; echo new > /workspace/new; rm /workspace/old; "
                    "ls /workspace",
           "--lower", str(lower), "--layer", str(layer), "--user", "1000", check=True)
    assert p.stdout == b"1000\nold\nnew\n"
    assert set(owners(layer).values()) == {(TEST_UID, TEST_UID)}
    assert (layer / "upper" / "workspace" / "new").read_text() == "new\n"
    # (A layer serves one overlay: each sandbox here has its own.)
    layer2 = tmp_path / "layer2"
    layer2.mkdir()
    os.chown(layer2, TEST_UID, TEST_UID)
    p = airlock.sandbox("create", "--lower", str(lower), "--layer", str(layer2), "--user",
                        "1000", check=True)
    sid = p.stdout.decode().strip()
    try:
        p = airlock.sandbox("exec", "--user", "0", sid, "--", "touch", "/workspace/root")
        assert (p.returncode, p.stderr.decode()) == (
            1, "touch: cannot touch '/workspace/root': Value too large for defined data type\n")
    finally:
        airlock.sandbox("destroy", sid, check=True)
    assert set(owners(layer2).values()) == {(TEST_UID, TEST_UID)}


def test_tty_as_user(airlock, workspace):
    """-t: the terminal is the user's, as a login's is."""
    p = sh(airlock, "id -u; test -w \"$(tty)\" && stat -c '%u' \"$(tty)\"", "-t",
           "--workspace", str(workspace), "--user", "1000", check=True)
    assert p.stdout.replace(b"\r", b"") == b"1000\n1000\n"
    p = airlock.sandbox("create", "--user", "1000", check=True)
    sid = p.stdout.decode().strip()
    try:
        for user, want in ((None, b"1000\n"), ("0", b"0\n"), ("nobody", None)):
            opts = ["--user", user] if user else []
            p = airlock.sandbox("exec", "-t", *opts, sid, "--", "id", "-u", check=True)
            if want:
                assert p.stdout.replace(b"\r", b"") == want
    finally:
        airlock.sandbox("destroy", sid, check=True)

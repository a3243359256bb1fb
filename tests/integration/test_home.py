# SPDX-License-Identifier: Apache-2.0
"""The agent's home (--home, --home-path): a host directory of the
workspace's owner, attached like the workspace, whose files never belong to
anyone else."""
import os
import shutil
import subprocess

import pytest

from conftest import TEST_UID, UID_BASE, UID_END
from test_isolation import MESS
from test_lifecycle import elf_interpreter


@pytest.fixture
def home(tmp_path):
    """A home owned by the workspace fixture's owner, as the control plane
    makes one beside the workspace."""
    h = tmp_path / "home"
    h.mkdir()
    os.chown(h, TEST_UID, TEST_UID)
    return h


def sh(airlock, script, *opts, **kw):
    return airlock.run(*opts, "--", "/bin/sh", "-c", script, **kw)


def entries(d):
    """(path, lstat) of everything below d."""
    out = []
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            out.append((p, os.lstat(p)))
    return out


def mount_line(mountinfo, point):
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[4] == point:
            return fields
    return None


@pytest.mark.parametrize("home_path", [None, "/home/agent"])
def test_home_files_belong_to_its_owner(airlock, workspace, home, home_path):
    opts = ["--workspace", str(workspace), "--home", str(home)]
    if home_path:
        opts += ["--home-path", home_path]
    where = home_path or "/root"
    p = sh(airlock, "echo \"HOME=$HOME\"; pwd; echo dot > ~/.profile-like; "
                    "mkdir -p ~/.cache/tool && echo c > ~/.cache/tool/f; ln -s .cache ~/link; "
                    "stat -c '%u:%g' ~/.profile-like; cat /proc/self/mountinfo",
           *opts, check=True)
    out = p.stdout.decode()
    assert f"HOME={where}\n/workspace\n" in out, out
    # Inside, the home is root's (the owner is root there, as in the workspace).
    assert "0:0\n" in out, out
    # A read-write, idmapped mount that can hold no setuid program or device.
    fields = mount_line(out, where)
    assert fields, out
    opts_ = fields[5].split(",")
    assert {"rw", "nosuid", "nodev", "idmapped"} <= set(opts_), fields
    # On the host: the home's owner, never root, never the sandbox's range.
    found = entries(home)
    assert {os.path.relpath(p, home) for p, _ in found} == {
        ".profile-like", ".cache", ".cache/tool", ".cache/tool/f", "link"}
    for p, st in found:
        assert (st.st_uid, st.st_gid) == (TEST_UID, TEST_UID), (p, st)
        assert not UID_BASE <= st.st_uid < UID_END
    assert (home / ".cache" / "tool" / "f").read_text() == "c\n"
    # And the next sandbox finds it there.
    p = sh(airlock, "cat ~/.profile-like", *opts, check=True)
    assert p.stdout == b"dot\n"


def test_home_persists_across_execs(airlock, workspace, home):
    sid = airlock.sandbox("create", "--workspace", str(workspace), "--home", str(home),
                          "--home-path", "/home/dev", check=True).stdout.decode().strip()
    try:
        airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                        "echo \"$HOME\" > ~/first; mkdir ~/d; echo one > ~/d/f", check=True)
        p = airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                            "cat ~/first ~/d/f; echo two >> ~/d/f", check=True)
        assert p.stdout == b"/home/dev\none\n"
        # --env may still set HOME for one command; the home stays where it is.
        p = airlock.sandbox("exec", "--env", "HOME=/tmp", sid, "--", "/bin/sh", "-c",
                            "echo $HOME; cat /home/dev/d/f", check=True)
        assert p.stdout == b"/tmp\none\ntwo\n"
        listing = airlock.sandbox("list", check=True).stdout.decode()
        assert f"(home {home})" in listing, listing
    finally:
        airlock.sandbox("destroy", sid, check=True)
    # The files outlive the sandbox, the owner's.
    assert (home / "d" / "f").read_text() == "one\ntwo\n"
    for p, st in entries(home):
        assert (st.st_uid, st.st_gid) == (TEST_UID, TEST_UID), (p, st)


@pytest.mark.parametrize("owner", [(TEST_UID + 1, TEST_UID), (TEST_UID, TEST_UID + 1),
                                   (0, 0), (0, TEST_UID), (TEST_UID, 0)])
def test_home_of_another_owner_is_refused(airlock, workspace, home, owner):
    """A home must have the workspace's owner and group: any other id has no
    name in the workspace's idmap, and its files would not be the owner's."""
    os.chown(home, *owner)
    (home / "private").write_text("SECRET-OTHER-OWNER\n")
    p = sh(airlock, "cat ~/private; touch ~/planted", "--workspace", str(workspace),
           "--home", str(home))
    assert p.returncode == 125, p
    assert b"owner and group" in p.stderr and str(home).encode() in p.stderr, p.stderr
    assert b"SECRET" not in p.stdout
    assert not (home / "planted").exists()


def test_home_through_a_symlink_is_refused(airlock, workspace, tmp_path):
    """A link (as a sandbox could leave one in its workspace) is never
    followed, even to a directory of the right owner."""
    victim = tmp_path / "victim"
    victim.mkdir()
    os.chown(victim, TEST_UID, TEST_UID)
    (victim / "secret").write_text("SECRET-OTHER-SESSION\n")
    os.symlink(str(victim), workspace / "link")
    # The link itself, and a link on the way.
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "h").mkdir()
    os.chown(tmp_path / "real" / "h", TEST_UID, TEST_UID)
    os.symlink(str(tmp_path / "real"), tmp_path / "via")
    for path in (workspace / "link", tmp_path / "via" / "h", str(workspace / "link") + "/"):
        p = sh(airlock, "cat ~/secret; touch ~/planted", "--workspace", str(workspace),
               "--home", str(path))
        assert p.returncode == 125 and b"symbolic link" in p.stderr, p
        assert b"SECRET" not in p.stdout
    assert os.listdir(victim) == ["secret"]
    assert os.listdir(tmp_path / "real" / "h") == []


def test_home_not_a_directory_is_refused(airlock, workspace, home):
    f = home / "file"
    f.write_text("x")
    os.chown(f, TEST_UID, TEST_UID)
    p = airlock.run("--workspace", str(workspace), "--home", str(f), "--", "true")
    assert p.returncode == 125 and b"not a directory" in p.stderr, p


@pytest.mark.parametrize("path", ["/etc", "/", "/home", "/home/", "/root/", "/root/x",
                                  "/home/a/b", "/home/..", "/home/../etc", "/home/.ssh",
                                  "/home/Agent", "/home/a b", "home/a", "/workspace",
                                  "/proc/self/root", "/home/a\nb", "/home/" + "a" * 33, ""])
def test_bad_home_path_is_refused(airlock, workspace, home, path):
    p = airlock.run("--workspace", str(workspace), "--home", str(home), "--home-path", path,
                    "--", "touch", "/tmp/ran")
    assert p.returncode == 125, p
    assert b"--home-path" in p.stderr
    assert len(p.stderr.decode().strip().splitlines()) == 1
    assert os.listdir(home) == []


def test_home_needs_a_workspace_of_an_unprivileged_owner(airlock, home, tmp_path):
    # No workspace: there is no owner to give the home's files.
    p = airlock.run("--home", str(home), "--", "true")
    assert p.returncode == 125 and b"needs a workspace" in p.stderr, p
    p = airlock.sandbox("create", "--home", str(home))
    assert p.returncode == 125 and b"needs a workspace" in p.stderr, p
    # A home path alone is a mistake, not a default.
    p = airlock.run("--home-path", "/root", "--", "true")
    assert p.returncode == 125 and b"needs a home" in p.stderr, p
    # An empty workspace of root's is handed to the sandbox's root, an id no
    # home can have: refused, and the workspace is not handed over.
    ws = tmp_path / "rootws"
    ws.mkdir(mode=0o755)
    os.chown(home, 0, 0)
    p = airlock.run("--workspace", str(ws), "--home", str(home), "--", "true")
    assert p.returncode == 125 and b"owned by root" in p.stderr, p
    st = os.stat(ws)
    assert (st.st_uid, st.st_gid) == (0, 0)


def test_home_owner_keeps_everything(airlock, workspace, home):
    """What root (or any other user) inside does in the home, its owner on
    the host can read and remove afterwards: no chown to another id, no file
    of another user, no setuid or setgid bit."""
    p = sh(airlock, MESS.replace("/workspace", "/home/agent"), "--workspace", str(workspace),
           "--home", str(home), "--home-path", "/home/agent")
    out = p.stdout.decode()
    assert out.rstrip().endswith("done"), (out, p.stderr)
    assert "allowed" not in out and "created" not in out, out
    found = entries(home)
    assert len(found) > 5
    for path, st in found:
        assert (st.st_uid, st.st_gid) == (TEST_UID, TEST_UID), (path, st)
        assert not st.st_mode & 0o6000, (path, oct(st.st_mode))
    script = ("chmod -R u+rwX . && find . -type f -exec cat {} + >/dev/null && "
              "find . -mindepth 1 -delete && ls -A")
    r = subprocess.run(["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}",
                        "--clear-groups", "sh", "-c", script], cwd=home, capture_output=True)
    assert r.returncode == 0, r
    assert os.listdir(home) == []


def test_image_home_link_is_not_followed(airlock, workspace, home, tmp_path):
    """With --image DIR, /home and /root are the image's. A link there would
    resolve against the host's root while the sandbox is set up: refused."""
    busybox = shutil.which("busybox")
    if not busybox:
        pytest.skip("no busybox on this host to build a small image from")
    if elf_interpreter(busybox):
        pytest.skip(f"{busybox} is dynamically linked: it cannot be an image on its own")
    img = tmp_path / "img"
    (img / "bin").mkdir(parents=True)
    shutil.copy(busybox, img / "bin" / "busybox")
    for tool in ("sh", "cat", "touch"):
        os.symlink("busybox", img / "bin" / tool)
    # Neither /root nor /home: both made in the sandbox's own layer.
    p = sh(airlock, "echo $HOME; touch ~/made", "--image", str(img), "--workspace",
           str(workspace), "--home", str(home), "--home-path", "/home/agent", check=True)
    assert p.stdout == b"/home/agent\n" and (home / "made").exists()
    assert not (img / "home").exists()
    target = tmp_path / "elsewhere"
    target.mkdir()
    for link, path in (("home", "/home/agent"), ("root", "/root")):
        os.symlink(str(target), img / link)
        p = sh(airlock, "touch ~/planted", "--image", str(img), "--workspace", str(workspace),
               "--home", str(home), "--home-path", path)
        assert p.returncode == 125 and b"symbolic link" in p.stderr, p
        os.unlink(img / link)
    assert os.listdir(target) == []
    assert not (home / "planted").exists()

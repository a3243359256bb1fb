# SPDX-License-Identifier: Apache-2.0
"""Persistent sandboxes, destroy, gc, images and the CLI's errors."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import uid_range_processes


def wait_gone(cond, seconds=10):
    """Waits (bounded) for a condition the kernel makes true asynchronously."""
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def process_gone_or_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:  # gone (ENOENT), or going (ESRCH while it is reaped)
        return True


def test_persistent_sandbox_keeps_state_between_execs(airlock, workspace):
    host_etc = set(os.listdir("/etc"))
    sid = airlock.sandbox("create", "--workspace", str(workspace), "--env", "FROM_CREATE=1",
                          check=True).stdout.decode().strip()
    try:
        assert len(sid) == 16
        airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                        "echo persisted > /etc/airlock-made; mkdir -p /usr/local/bin && "
                        "printf '#!/bin/sh\\necho tool-ran\\n' > /usr/local/bin/mytool && "
                        "chmod 755 /usr/local/bin/mytool; echo w > /workspace/w; "
                        "echo $FROM_CREATE > /root/env", check=True)
        p = airlock.sandbox("exec", "--env", "EXTRA=2", "--cwd", "/tmp", sid, "--", "/bin/sh",
                            "-c", "cat /etc/airlock-made; mytool; cat /root/env; echo $EXTRA; pwd",
                            check=True)
        assert p.stdout.decode().split() == ["persisted", "tool-ran", "1", "2", "/tmp"]
        # The host's directories are untouched.
        assert set(os.listdir("/etc")) == host_etc
        assert not os.path.exists("/usr/local/bin/mytool")
        assert (workspace / "w").read_text() == "w\n"
        listing = airlock.sandbox("list", check=True).stdout.decode()
        assert sid in listing and "running" in listing
        # An exec's timeout kills its own processes and leaves the sandbox.
        p = airlock.sandbox("exec", "--timeout", "1", sid, "--", "/bin/sh", "-c",
                            "(sleep 3; touch /workspace/late) & sleep 60")
        assert p.returncode == 124
        time.sleep(3.5)
        assert not (workspace / "late").exists()
        assert airlock.sandbox("exec", sid, "--", "true").returncode == 0
        # Each command's pids and /proc agree (tools like ps rely on it).
        p = airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                            "readlink /proc/$$/exe; ps -e -o comm=", check=True)
        # (/bin/sh is whatever the host's is: the image is the host's.)
        assert p.stdout.decode().split() == [os.path.realpath("/bin/sh"), "airlock-init", "sh",
                                             "ps"]
    finally:
        airlock.sandbox("destroy", sid, check=True)
    assert airlock.leftovers() == []
    assert uid_range_processes() == []
    p = airlock.sandbox("exec", sid, "--", "true")
    assert p.returncode == 125 and b"no sandbox" in p.stderr


def test_destroy_removes_every_trace(airlock):
    sid = airlock.sandbox("create", check=True).stdout.decode().strip()
    airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                    "mkdir -p /opt/deep && cd /opt/deep && for i in $(seq 200); do mkdir d; cd d; done; "
                    "dd if=/dev/zero of=/var/big bs=1M count=4 2>/dev/null; sleep 1000 &", check=True)
    assert airlock.leftovers() != []
    airlock.sandbox("destroy", sid, check=True)
    assert airlock.leftovers() == []
    assert uid_range_processes() == []


def test_gc_cleans_after_a_crash(airlock):
    # A supervisor killed with SIGKILL mid-run leaves its directory and cgroups.
    proc = subprocess.Popen([airlock.bin, "sandbox", "run", "--", "sleep", "100"],
                            env=airlock.env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not any(l.startswith("cgroup") for l in airlock.leftovers()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_gone(lambda: uid_range_processes() == [])
    # A persistent sandbox whose init died (as after a host crash).
    sid = airlock.sandbox("create", check=True).stdout.decode().strip()
    with open(os.path.join(airlock.state_dir, sid, "state")) as f:
        pid = int(dict(l.strip().split("=", 1) for l in f)["pid"])
    os.kill(pid, signal.SIGKILL)
    wait_gone(lambda: process_gone_or_zombie(pid))
    assert airlock.leftovers() != []
    p = airlock.sandbox("gc", check=True)
    assert b"removed" in p.stdout
    assert airlock.leftovers() == []
    assert uid_range_processes() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_tears_down(airlock, sig):
    proc = subprocess.Popen([airlock.bin, "sandbox", "run", "--", "/bin/sh", "-c",
                             "echo started; sleep 100"], env=airlock.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"started\n"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + sig
    assert b"interrupted" in err
    assert airlock.leftovers() == []
    assert uid_range_processes() == []


def elf_interpreter(path):
    """Whether an ELF executable asks for a dynamic loader (PT_INTERP)."""
    import struct
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return True  # not a 64-bit ELF: do not rely on it
        end = "<" if head[5] == 1 else ">"
        phoff, = struct.unpack(end + "Q", head[32:40])
        phentsize, phnum = struct.unpack(end + "HH", head[54:58])
        f.seek(phoff)
        for _ in range(phnum):
            ptype, = struct.unpack(end + "I", f.read(phentsize)[:4])
            if ptype == 3:
                return True
    return False


def test_image_directory(airlock, tmp_path):
    busybox = shutil.which("busybox")
    if not busybox:
        pytest.skip("no busybox on this host to build a small image from")
    if elf_interpreter(busybox):
        pytest.skip(f"{busybox} is dynamically linked: it cannot be an image on its own")
    img = tmp_path / "img"
    (img / "bin").mkdir(parents=True)
    shutil.copy(busybox, img / "bin" / "busybox")
    for tool in ("sh", "ls", "cat", "id", "echo", "touch"):
        os.symlink("busybox", img / "bin" / tool)
    (img / "etc").mkdir()
    (img / "etc" / "image-marker").write_text("from-the-image\n")
    p = airlock.run("--image", str(img), "--", "/bin/sh", "-c",
                    "cat /etc/image-marker; ls /usr 2>&1; id -u; echo new > /etc/written; "
                    "cat /etc/written", check=True)
    out = p.stdout.decode()
    assert "from-the-image" in out and "new" in out
    assert "No such file" in out  # nothing of the host's /usr
    # The image itself is never written.
    assert not (img / "etc" / "written").exists()


@pytest.mark.parametrize("args,message", [
    (["--memory", "lots"], b"--memory"),
    (["--pids", "-1"], b"--pids"),
    (["--cpus", "nan"], b"--cpus"),
    (["--timeout", "soon"], b"--timeout"),
    (["--network", "everything"], b"--network"),
    (["--image", "/nonexistent-image"], b"/nonexistent-image"),
    (["--workspace", "/nonexistent-ws"], b"/nonexistent-ws"),
    (["--env", "NOEQUALS"], b"--env"),
    (["--hostname", "bad name!"], b"hostname"),
    (["--bogus-option"], b"--bogus-option"),
    ([], b"needs a command"),
])
def test_bad_options_exit_125(airlock, args, message):
    cmd = ["true"] if args else []
    p = airlock.run(*args, *(["--", *cmd] if cmd else []))
    assert p.returncode == 125, (p.returncode, p.stderr)
    assert message in p.stderr
    assert len(p.stderr.decode().strip().splitlines()) == 1  # one line, no noise
    assert p.stderr.startswith(b"airlock: ")


def test_missing_image_and_unknown_sandbox(airlock, tmp_path):
    (tmp_path / "empty-image").mkdir()
    p = airlock.run("--image", str(tmp_path / "empty-image"), "--", "true")
    assert p.returncode == 125 and b"not a root filesystem" in p.stderr
    for sub in (["exec", "0123456789abcdef", "--", "true"], ["destroy", "0123456789abcdef"],
                ["exec", "../../etc", "--", "true"]):
        p = airlock.sandbox(*sub)
        assert p.returncode == 125, p
        assert p.stderr.startswith(b"airlock: ")


def test_root_owned_workspace(airlock, tmp_path):
    ws = tmp_path / "rootws"
    ws.mkdir()
    (ws / "existing").write_text("x")
    p = airlock.run("--workspace", str(ws), "--", "true")
    assert p.returncode == 125 and b"owned by root" in p.stderr
    shared = tmp_path / "rootws-shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp or /dev/shm
    p = airlock.run("--workspace", str(shared), "--", "true")
    assert p.returncode == 125 and b"shared directory" in p.stderr
    assert os.stat(shared).st_uid == 0
    empty = tmp_path / "rootws-empty"
    empty.mkdir()
    airlock.run("--workspace", str(empty), "--", "touch", "/workspace/f", check=True)
    assert os.stat(empty / "f").st_uid != 0


def test_doctor(airlock):
    p = airlock("doctor")
    assert p.returncode == 0, p.stdout
    assert b"user namespaces" in p.stdout and b"cgroups" in p.stdout


def test_installed_package_persists_and_never_reaches_the_host(airlock, workspace, tmp_path):
    if not (shutil.which("dpkg-deb") and shutil.which("dpkg-query")):
        pytest.skip("not a Debian-style host: no dpkg to install a package with")
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "usr" / "bin").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: airlock-test-pkg\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: airlock <test@airlock.invalid>\nDescription: test package\n")
    tool = pkg / "usr" / "bin" / "airlock-test-pkg"
    tool.write_text("#!/bin/sh\necho test-package-ran\n")
    tool.chmod(0o755)
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(workspace / "t.deb")], check=True,
                   capture_output=True)
    os.chown(workspace / "t.deb", 1000, 1000)
    sid = airlock.sandbox("create", "--workspace", str(workspace), check=True).stdout.decode().strip()
    try:
        airlock.sandbox("exec", sid, "--", "dpkg", "-i", "/workspace/t.deb", check=True)
        p = airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                            "airlock-test-pkg; dpkg-query -W -f='${Status}' airlock-test-pkg",
                            check=True)
        assert p.stdout.decode().split("\n")[0] == "test-package-ran"
        assert b"install ok installed" in p.stdout
    finally:
        airlock.sandbox("destroy", sid, check=True)
    assert not os.path.exists("/usr/bin/airlock-test-pkg")
    r = subprocess.run(["dpkg-query", "-W", "airlock-test-pkg"], capture_output=True)
    assert r.returncode != 0


HOLDER = r'''
import array, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0airlock-test-holder")
print("ready", flush=True)
msg, anc, flags, addr = s.recvmsg(16, socket.CMSG_SPACE(64))
time.sleep(20)
'''

SENDER = r'''
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(memoryview(__import__("array").array("i", [1, 2]))))], 0, "\0airlock-test-holder")
print("handed over", flush=True)
'''


def test_exec_returns_although_another_process_holds_its_output(airlock):
    """A command can hand its stdout to a process outside its own pid
    namespace (another exec); its client still returns promptly."""
    sid = airlock.sandbox("create", check=True).stdout.decode().strip()
    holder = subprocess.Popen([airlock.bin, "sandbox", "exec", sid, "--", "python3", "-c", HOLDER],
                              env=airlock.env, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"ready\n"
        t0 = time.monotonic()
        p = airlock.sandbox("exec", "--timeout", "10", sid, "--", "python3", "-c", SENDER)
        assert p.returncode == 0, p.stderr
        assert time.monotonic() - t0 < 5
    finally:
        holder.kill()
        holder.wait()
        airlock.sandbox("destroy", sid, check=True)


def test_exec_command_dies_with_its_client(airlock, workspace):
    sid = airlock.sandbox("create", "--workspace", str(workspace), check=True).stdout.decode().strip()
    try:
        client = subprocess.Popen([airlock.bin, "sandbox", "exec", sid, "--", "/bin/sh", "-c",
                                   "echo started; sleep 3.123; echo alive > /workspace/late"],
                                  env=airlock.env, stdout=subprocess.PIPE)
        assert client.stdout.readline() == b"started\n"
        client.kill()
        client.wait()

        def sleeper_gone():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if b"3.123" in f.read():
                            return False
                except OSError:
                    pass
            return True
        wait_gone(sleeper_gone)
        time.sleep(3.5)
        assert not (workspace / "late").exists()
    finally:
        airlock.sandbox("destroy", sid, check=True)


def test_workspace_through_a_symlink_is_refused(airlock, workspace, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    os.chown(victim, 1001, 1001)
    os.chmod(victim, 0o700)
    (victim / "secret").write_text("SECRET-OTHER-USER\n")
    os.symlink(str(victim), workspace / "link")  # as a sandbox could leave it
    p = airlock.run("--workspace", str(workspace / "link"), "--", "cat", "/workspace/secret")
    assert p.returncode == 125 and b"symbolic link" in p.stderr
    assert b"SECRET" not in p.stdout


def test_control_characters_in_paths_refused(airlock, tmp_path):
    evil = tmp_path / "ws\npid=1"
    evil.mkdir()
    os.chown(evil, 1000, 1000)
    p = airlock.sandbox("create", "--workspace", str(evil))
    assert p.returncode == 125 and b"control character" in p.stderr


def test_workspace_group_root_is_refused(airlock, workspace):
    """Files made inside would belong to the host's root group."""
    os.chown(workspace, 1000, 0)
    p = airlock.run("--workspace", str(workspace), "--", "touch", "/workspace/f")
    assert p.returncode == 125 and b"group root" in p.stderr
    assert not (workspace / "f").exists()


def test_destroys_racing_each_other_leave_nothing(airlock):
    """Several destroys of one sandbox at once (a cancel and the turn's own
    clean-up do this): one removes it, the others find nothing, and no
    state directory is left half-removed."""
    for _ in range(10):
        sid = airlock.sandbox("create", check=True).stdout.decode().strip()
        procs = [subprocess.Popen([airlock.bin, "sandbox", "destroy", sid], env=airlock.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(4)]
        results = [(p.wait(timeout=60), p.stderr.read().decode()) for p in procs]
        assert sum(rc == 0 for rc, _ in results) >= 1, results
        for rc, e in results:
            assert rc == 0 or (rc == 125 and ("no sandbox" in e or "No such file" in e)), results
        assert airlock.leftovers() == [], airlock.leftovers()

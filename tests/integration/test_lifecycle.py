# SPDX-License-Identifier: Apache-2.0
"""Persistent sandboxes, destroy, gc, images and the CLI's errors."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import uid_range_processes


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
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # A persistent sandbox whose init died (as after a host crash).
    sid = airlock.sandbox("create", check=True).stdout.decode().strip()
    with open(os.path.join(airlock.state_dir, sid, "state")) as f:
        pid = int(dict(l.strip().split("=", 1) for l in f)["pid"])
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
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


def test_image_directory(airlock, tmp_path):
    img = tmp_path / "img"
    (img / "bin").mkdir(parents=True)
    shutil.copy("/usr/bin/busybox", img / "bin" / "busybox")
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
    empty = tmp_path / "rootws-empty"
    empty.mkdir()
    airlock.run("--workspace", str(empty), "--", "touch", "/workspace/f", check=True)
    assert os.stat(empty / "f").st_uid != 0


def test_doctor(airlock):
    p = airlock("doctor")
    assert p.returncode == 0, p.stdout
    assert b"user namespaces" in p.stdout and b"cgroups" in p.stdout


def test_installed_package_persists_and_never_reaches_the_host(airlock, workspace, tmp_path):
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

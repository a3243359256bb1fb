# SPDX-License-Identifier: Apache-2.0
"""What a sandbox must not see or reach: each test performs the attack."""
import os
import shutil
import socket
import subprocess
import threading

import pytest

from conftest import TEST_UID, put


def sh(airlock, script, *opts, **kw):
    return airlock.run(*opts, "--", "/bin/sh", "-c", script, **kw)


def test_host_processes_invisible(airlock):
    marker = subprocess.Popen(["sleep", "300"])
    try:
        p = sh(airlock, "ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '; "
                        "echo; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '", check=True)
        out = p.stdout.decode()
        pids = [int(x) for x in out.splitlines()[0].split()]
        assert max(pids) < 50, out  # only the sandbox's own few processes
        assert str(marker.pid) not in out.splitlines()[0].split()
        assert "sleep 300" not in out
        # Nor can it signal one: kill by host pid fails.
        p = sh(airlock, f"kill -0 {marker.pid}; echo rc=$?")
        assert b"rc=0" not in p.stdout
        assert marker.poll() is None
    finally:
        marker.kill()
        marker.wait()


def test_host_loopback_unreachable(airlock, workspace, probe):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    accepted = []
    srv.settimeout(0.2)

    def accept():
        try:
            c, _ = srv.accept()
            accepted.append(c)
        except OSError:
            pass

    shutil.copy(probe, workspace / "probe")
    p = airlock.run("--workspace", str(workspace), "--", "/workspace/probe", "connect",
                    str(port), check=True)
    accept()
    srv.close()
    assert p.stdout.decode().startswith("connect -1 ECONNREFUSED"), p.stdout
    assert accepted == []
    # The sandbox's own loopback works.
    p = sh(airlock, "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 80)); "
                    "s.listen(); c=socket.create_connection((\"127.0.0.1\", 80)); print(\"own-lo-ok\")'")
    assert b"own-lo-ok" in p.stdout, p.stderr


def test_no_network_interfaces_but_loopback(airlock):
    p = sh(airlock, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", check=True)
    assert p.stdout.decode().split() == ["lo"]


@pytest.fixture
def host_secrets():
    """Secrets planted on the host, removed afterwards."""
    made = []
    def plant(path, content, mode):
        d = os.path.dirname(path)
        if not os.path.isdir(d):
            os.makedirs(d)
            made.append(d)
        with open(path, "w") as f:
            f.write(content)
        os.chmod(path, mode)
        made.append(path)
    plant("/etc/airlock-test-private.conf", "SECRET-ETC-0600\n", 0o600)
    plant("/etc/ssh/ssh_host_airlocktest_key", "SECRET-SSH-HOSTKEY\n", 0o644)
    plant("/etc/airlock/vault.yaml", "SECRET-AIRLOCK-CONFIG\n", 0o644)
    plant("/root/airlock-test-secret", "SECRET-ROOT-HOME\n", 0o644)
    plant("/var/airlock-test-secret", "SECRET-VAR\n", 0o644)
    plant("/srv/airlock-test-secret", "SECRET-SRV\n", 0o644)
    plant("/run/airlock-test-secret", "SECRET-RUN\n", 0o644)
    os.makedirs("/home/airlock-test", exist_ok=True)
    made.append("/home/airlock-test")
    plant("/home/airlock-test/secret", "SECRET-HOME\n", 0o644)
    yield
    for p in reversed(made):
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.exists(p):
            os.unlink(p)


def test_masked_paths_unreadable(airlock, host_secrets):
    paths = ["/etc/shadow", "/etc/gshadow", "/etc/airlock-test-private.conf",
             "/etc/ssh/ssh_host_airlocktest_key", "/etc/airlock/vault.yaml",
             "/root/airlock-test-secret", "/var/airlock-test-secret", "/srv/airlock-test-secret",
             "/run/airlock-test-secret", "/home/airlock-test/secret",
             airlock.state_dir]
    script = "; ".join(f"cat {p} 2>/dev/null; ls -a {p} 2>/dev/null" for p in paths)
    p = sh(airlock, script + "; grep -rs SECRET- /etc /root /var /srv /run /home /opt; true",
           check=True)
    assert b"SECRET-" not in p.stdout, p.stdout
    assert b"SECRET-" not in p.stderr
    # Root inside owns /etc (through the idmap) yet the secrets do not exist there.
    p = sh(airlock, "test -e /etc/shadow || echo no-shadow; test -e /etc/passwd && echo passwd",
           check=True)
    assert p.stdout.split() == [b"no-shadow", b"passwd"]


def test_refused_syscalls(airlock, workspace, probe):
    shutil.copy(probe, workspace / "probe")
    p = airlock.run("--workspace", str(workspace), "--", "/workspace/probe", "syscalls",
                    check=True)
    results = {}
    for line in p.stdout.decode().splitlines():
        name, rc, err = line.split()
        results[name] = (int(rc), err)
    expected_errno = {"clone3": "ENOSYS", "openat2": "ENOSYS", "socket_vsock": "EAFNOSUPPORT",
                      "socket_netlink_uevent": "EAFNOSUPPORT"}
    refused = [n for n in results if not n.startswith("allowed_")]
    assert len(refused) >= 40, results
    for name in refused:
        rc, err = results[name]
        assert rc == -1, f"{name} was not refused: {results[name]}"
        assert err == expected_errno.get(name, "EPERM"), f"{name}: {err}"
    for name in ("allowed_socket_inet", "allowed_socket_unix", "allowed_chmod",
                 "allowed_socket_netlink_route", "allowed_open_tmpfile"):
        assert results[name][0] >= 0, f"{name} should work: {results[name]}"


def test_non_native_abi_killed(airlock, workspace, probe):
    shutil.copy(probe, workspace / "probe")
    p = airlock.run("--workspace", str(workspace), "--", "/workspace/probe", "x86_32")
    assert p.returncode == 128 + 31, (p.returncode, p.stdout)  # SIGSYS
    assert b"int80 returned" not in p.stdout


def test_root_inside_is_unprivileged_outside(airlock, workspace):
    p = sh(airlock, "id -u; cat /proc/self/uid_map; echo data > /workspace/made-inside; "
                    "mkdir /workspace/dir; chown 1234:1234 /workspace/dir; "
                    "touch /workspace/as-1000; chown 1000:1000 /workspace/as-1000; echo c1000=$?; "
                    "touch /tmp/t && chown 0:0 /tmp/t && echo chown-ok",
           "--workspace", str(workspace), check=True)
    lines = p.stdout.decode().split("\n")
    assert lines[0] == "0"
    inside, outside, count = (int(x) for x in lines[1].split())
    assert inside == 0 and outside >= 65536 and count == 65536
    assert b"chown-ok" in p.stdout
    # On the host: the workspace owner, never root.
    st = os.stat(workspace / "made-inside")
    assert st.st_uid == TEST_UID and st.st_gid == TEST_UID
    st = os.stat(workspace / "dir")
    assert st.st_uid == outside + 1234 and st.st_gid == outside + 1234
    # Inside uid 1000 is the sandbox's own uid, not the host's user 1000.
    assert os.stat(workspace / "as-1000").st_uid == outside + 1000
    for root, dirs, files in os.walk(workspace):
        for n in dirs + files:
            assert os.lstat(os.path.join(root, n)).st_uid != 0
    # A fresh workspace: files belong to the sandbox's own range.
    p = sh(airlock, "touch /workspace/f; stat -c %u /workspace/f; cat /proc/self/uid_map",
           check=True)
    assert p.stdout.split()[0] == b"0"


def test_setuid_does_not_escalate(airlock, workspace, probe):
    # A setuid-root program planted from the host side into the workspace
    # (on disk owned by the workspace owner = root inside, mode 4755).
    shutil.copy(probe, workspace / "probe")
    os.chown(workspace / "probe", TEST_UID, TEST_UID)
    os.chmod(workspace / "probe", 0o4755)
    p = sh(airlock, "ls -ln /workspace/probe; setpriv --reuid=1000 --regid=1000 --clear-groups "
                    "/workspace/probe ids; setpriv --reuid=1000 --regid=1000 --clear-groups "
                    "su -c id root </dev/null; echo su=$?",
           "--workspace", str(workspace))
    out = p.stdout.decode()
    assert "uid 1000 euid 1000" in out, (out, p.stderr)
    assert "uid=0" not in out
    assert "su=0" not in out
    # Inside, setuid bits cannot be set at all.
    p = sh(airlock, "cp /bin/true /tmp/x; chmod u+s /tmp/x; echo rc=$?; "
                    "python3 -c 'import os; os.chmod(\"/workspace/probe\", 0o6755)'; echo py=$?",
           "--workspace", str(workspace))
    assert b"rc=1" in p.stdout and b"py=1" in p.stdout, p.stdout
    # And nothing setuid was written to the host.
    for root, dirs, files in os.walk(workspace):
        for f in files:
            mode = os.lstat(os.path.join(root, f)).st_mode
            if f != "probe":
                assert not mode & 0o6000


def test_environment_is_clean(airlock):
    p = airlock.run("--env", "GIVEN=1", "--", "/usr/bin/env",
                    env={"HOST_SECRET_TOKEN": "SECRET-ENV", "TERM": "xterm"}, check=True)
    names = sorted(l.split("=", 1)[0] for l in p.stdout.decode().splitlines())
    assert names == ["GIVEN", "HOME", "PATH", "TERM"], names
    assert b"SECRET-ENV" not in p.stdout


def test_inherited_fds_closed(airlock):
    r, w = os.pipe()
    try:
        p = airlock.run("--", "/bin/sh", "-c", "ls /proc/self/fd | tr '\\n' ' '",
                        pass_fds=(r, w), check=True)
        fds = sorted(int(x) for x in p.stdout.split())
        assert fds == [0, 1, 2, 3], fds  # 3: ls's own directory handle
    finally:
        os.close(r)
        os.close(w)


def test_mounts_are_nosuid_and_private(airlock):
    p = sh(airlock, "cat /proc/self/mountinfo", check=True)
    for line in p.stdout.decode().splitlines():
        fields = line.split()
        mnt, opts = fields[4], fields[5]
        if mnt in ("/", "/usr", "/etc", "/workspace", "/tmp", "/dev/shm"):
            assert "nosuid" in opts, line
        assert "shared:" not in line, line


def test_no_new_privileges_and_caps(airlock):
    p = sh(airlock, "grep -E '^(NoNewPrivs|Seccomp|CapBnd|CapEff):' /proc/self/status",
           check=True)
    fields = dict(l.split(":\t") for l in p.stdout.decode().splitlines())
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2"
    bnd = int(fields["CapBnd"], 16)
    assert not bnd & (1 << 21), "CAP_SYS_ADMIN must be dropped"
    assert not bnd & (1 << 16), "CAP_SYS_MODULE must be dropped"
    assert bnd & (1 << 0), "CAP_CHOWN is kept for root inside"


def test_etc_secrets_written_later_stay_out(airlock):
    """A sandbox sees a filtered copy of /etc: a secret written into the
    host's /etc while it runs does not appear in it, nor in new sandboxes."""
    sid = airlock.sandbox("create", check=True).stdout.decode().strip()
    try:
        old_umask = os.umask(0o077)
        try:
            with open("/etc/airlock-test-later-secret", "w") as f:
                f.write("SECRET-WRITTEN-LATER\n")
        finally:
            os.umask(old_umask)
        with open("/etc/airlock-test-later-public", "w") as f:
            f.write("public-written-later\n")
        os.chmod("/etc/airlock-test-later-public", 0o644)
        p = airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                            "cat /etc/airlock-test-later-secret /etc/airlock-test-later-public; true")
        assert b"SECRET" not in p.stdout
        # A new sandbox gets the new public file (the view follows /etc) but
        # never the secret.
        p = airlock.run("--", "/bin/sh", "-c", "cat /etc/airlock-test-later-*; true")
        assert b"public-written-later" in p.stdout
        assert b"SECRET" not in p.stdout
    finally:
        for f in ("/etc/airlock-test-later-secret", "/etc/airlock-test-later-public"):
            if os.path.exists(f):
                os.unlink(f)
        airlock.sandbox("destroy", sid, check=True)
    # Old views of /etc no sandbox uses are collected.
    airlock.sandbox("gc", check=True)
    gens = [g for g in os.listdir(os.path.join(airlock.state_dir, ".etc"))
            if len(g) == 16]
    assert len(gens) == 1, gens

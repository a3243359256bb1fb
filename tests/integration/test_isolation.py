# SPDX-License-Identifier: Apache-2.0
"""What a sandbox must not see or reach: each test performs the attack."""
import os
import pathlib
import platform
import shutil
import socket
import subprocess
import tempfile

import pytest

from conftest import TEST_UID, UID_BASE, Airlock, put


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
    assert p.stdout.decode().startswith("connect connect -1 ECONNREFUSED"), p.stdout
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


# What the filter answers for each probe attempt (docs/sandbox.md's list).
# The probe names the system call each attempt exercises.
FILTER_ERRNO = {name: "EPERM" for name in (
    "keyctl add_key request_key bpf perf_event_open lookup_dcookie userfaultfd kexec_load "
    "kexec_file_load init_module finit_module delete_module create_module reboot swapon "
    "swapoff acct syslog iopl ioperm uselib nfsservctl vhangup quotactl quotactl_fd mount "
    "umount2 pivot_root move_mount open_tree fsopen fsmount fsconfig fspick mount_setattr "
    "setns io_uring_setup io_uring_enter io_uring_register open_by_handle_at "
    "name_to_handle_at settimeofday clock_settime clock_adjtime adjtimex move_pages "
    "migrate_pages kcmp ioctl_tiocsti ioctl_tiocsti_highbits ioctl_tioclinux unshare_user "
    "unshare_user_highbits clone_user chmod_setuid chmod_setgid fchmod_setuid "
    "fchmodat_setgid fchmodat2_setuid creat_setuid open_creat_setuid openat_creat_setgid "
    "mknod_setuid mknodat_setgid open_tmpfile_setuid").split()}
FILTER_ERRNO.update({"clone3": "ENOSYS", "openat2": "ENOSYS", "socket_vsock": "EAFNOSUPPORT",
                     "socket_netlink_uevent": "EAFNOSUPPORT",
                     "socketpair_inet": "EAFNOSUPPORT"})
# Every name of the deny list and every call with an argument rule
# (docs/sandbox.md); x86_64 has no umount or stime.
DENY_LIST = set("""
    keyctl add_key request_key bpf perf_event_open lookup_dcookie userfaultfd kexec_load
    kexec_file_load init_module finit_module delete_module create_module reboot swapon swapoff
    acct syslog iopl ioperm uselib nfsservctl vhangup quotactl quotactl_fd mount umount umount2
    pivot_root move_mount open_tree fsopen fsmount fsconfig fspick mount_setattr setns
    io_uring_setup io_uring_enter io_uring_register open_by_handle_at name_to_handle_at
    settimeofday clock_settime clock_adjtime adjtimex stime move_pages migrate_pages kcmp
    clone3 openat2 ioctl unshare clone chmod fchmod fchmodat fchmodat2 mknod mknodat creat open
    openat socket socketpair""".split())
NOT_ON_X86_64 = {"umount", "stime"}
UNIT_PROOF = "tests/unit/sandbox/test_seccomp.c evaluates the exported filter for it"
# The control: the same calls as root of a user namespace that owns none of
# the other namespaces (as in a sandbox), from a uid of the tests' ranges that
# no sandbox uses as its root, without any seccomp filter.
CONTROL_UID = UID_BASE + 4095 * 65536 + 4242


def parse_probe(out):
    results = {}
    for line in out.decode().splitlines():
        label, call, rc, err = line.split()
        results[label] = (call, int(rc), err)
    return results


@pytest.fixture(scope="module")
def probe_runs(state_root, probe, tmp_path_factory):
    """The probe's system call list in a sandbox, and in the control."""
    d = tempfile.mkdtemp(prefix="s-", dir=state_root)
    a = Airlock(d, f"airlock-test/{os.getpid()}-{os.path.basename(d)}")
    ws = tmp_path_factory.mktemp("probe-ws")
    os.chown(ws, TEST_UID, TEST_UID)
    shutil.copy(probe, ws / "probe")
    os.chown(ws / "probe", TEST_UID, TEST_UID)
    p = a.run("--workspace", str(ws), "--", "/workspace/probe", "syscalls", "/tmp", check=True)
    sandboxed = parse_probe(p.stdout)
    assert a.leftovers() == []
    a.sandbox("gc")

    # The control's files must be reachable by its uid: not under pytest's
    # private directories.
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="airlock-probe-control-", dir="/var/tmp"))
    try:
        shutil.copy(probe, scratch / "probe")
        os.chmod(scratch, 0o755)
        os.chown(scratch, CONTROL_UID, CONTROL_UID)
        enter = ["unshare", "--mount", "--net", "--uts", "--ipc", "--pid", "--fork",
                 "--kill-child", "--", "setpriv", f"--reuid={CONTROL_UID}",
                 f"--regid={CONTROL_UID}", "--clear-groups", "--", "unshare", "--user",
                 "--map-root-user", "--"]
        can = subprocess.run(enter + ["/bin/true"], capture_output=True, timeout=60)
        if can.returncode != 0:
            yield sandboxed, None, ("no control run is possible on this host (an unprivileged "
                                    "user namespace was refused: "
                                    f"{can.stderr.decode().strip()[-200:]})")
            return
        vsock = "try-vsock" if os.path.exists("/sys/module/vsock") else "no-vsock"
        c = subprocess.run(enter + [str(scratch / "probe"), "syscalls", str(scratch), vsock],
                           capture_output=True, timeout=60)
        assert c.returncode == 0, c
        control = parse_probe(c.stdout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert control.keys() == sandboxed.keys()
    yield sandboxed, control, None


@pytest.mark.parametrize("label", sorted(FILTER_ERRNO))
def test_refused_syscall(probe_runs, label):
    """Each entry of the filter, attempted in a sandbox and compared with a
    control run without the filter: refused by the filter, not by the kernel."""
    sandboxed, control, why_no_control = probe_runs
    call, rc, err = sandboxed[label]
    assert (rc, err) == (-1, FILTER_ERRNO[label]), f"{label} ({call}): {rc} {err} in the sandbox"
    if why_no_control:
        pytest.skip(f"{call} is refused with {err}; {why_no_control}, so whether the filter or "
                    f"the kernel refused it cannot be told live ({UNIT_PROOF})")
    _, crc, cerr = control[label]
    if cerr == "NOTTRIED":
        pytest.skip(f"{call}: not attempted without the filter here (it could load a kernel "
                    f"module); {UNIT_PROOF}")
    if (crc, cerr) == (rc, err):
        pytest.skip(f"this kernel refuses {call} by itself ({cerr} without the filter too), so "
                    f"the filter's part cannot be seen live here; {UNIT_PROOF}")


def test_every_deny_entry_attempted(probe_runs):
    sandboxed, _, _ = probe_runs
    attempted = {call for call, _, _ in sandboxed.values()}
    missing = DENY_LIST - attempted - NOT_ON_X86_64
    assert not missing, f"deny-list entries the probe never attempts: {sorted(missing)}"


def test_allowed_syscalls_work(probe_runs):
    sandboxed, control, _ = probe_runs
    for label, (call, rc, err) in sandboxed.items():
        if label.startswith("allowed_"):
            assert rc >= 0, f"{label} should work in a sandbox: {rc} {err}"
    # Refused by the kernel itself (no device nodes in a user namespace).
    assert sandboxed["kernel_mknod_device"][1:] == (-1, "EPERM")


def ia32_reason():
    """Why this kernel may refuse i386 system calls itself."""
    try:
        with open("/proc/cmdline") as f:
            for word in f.read().split():
                if word.startswith("ia32_emulation="):
                    return f"booted with {word}"
    except OSError:
        pass
    try:
        with open(f"/boot/config-{os.uname().release}") as f:
            if "CONFIG_IA32_EMULATION=y" not in f.read():
                return "built without CONFIG_IA32_EMULATION"
    except OSError:
        pass
    return "i386 emulation is off"


def test_non_native_abi_killed(airlock, workspace, probe):
    if platform.machine() != "x86_64":
        pytest.skip(f"no i386 ABI to try on {platform.machine()}")
    # The control: without any filter, does this kernel run int 0x80 at all?
    c = subprocess.run([str(probe), "x86_32"], capture_output=True, timeout=30)
    if b"int80 returned" not in c.stdout:
        pytest.skip(f"this kernel refuses int 0x80 itself ({ia32_reason()}: without a filter "
                    f"the probe ends with status {c.returncode}), so the filter's part cannot "
                    f"be seen live; {UNIT_PROOF.replace('for it', 'for i386 calls')}")
    shutil.copy(probe, workspace / "probe")
    p = airlock.run("--workspace", str(workspace), "--", "/workspace/probe", "x86_32")
    assert p.returncode == 128 + 31, (p.returncode, p.stdout)  # SIGSYS
    assert b"int80 returned" not in p.stdout


def test_x32_abi_killed(airlock, workspace, probe):
    if platform.machine() != "x86_64":
        pytest.skip(f"no x32 ABI on {platform.machine()}")
    # Without a filter the kernel answers (ENOSYS where x32 is off) and the
    # process lives on; the filter kills it before the kernel looks.
    c = subprocess.run([str(probe), "x32"], capture_output=True, timeout=30)
    assert c.returncode == 0 and b"x32 returned" in c.stdout, c
    shutil.copy(probe, workspace / "probe")
    p = airlock.run("--workspace", str(workspace), "--", "/workspace/probe", "x32")
    assert p.returncode == 128 + 31, (p.returncode, p.stdout)  # SIGSYS
    assert b"x32 returned" not in p.stdout


def test_root_inside_is_unprivileged_outside(airlock, workspace):
    p = sh(airlock, "id -u; cat /proc/self/uid_map; echo data > /workspace/made-inside; "
                    "mkdir /workspace/dir; chown 1234:1234 /workspace/dir; echo c1234=$?; "
                    "touch /workspace/as-1000; chown 1000:1000 /workspace/as-1000; echo c1000=$?; "
                    "touch /tmp/t && chown 1234:1234 /tmp/t && stat -c %u /tmp/t",
           "--workspace", str(workspace), check=True)
    lines = p.stdout.decode().split("\n")
    assert lines[0] == "0"
    inside, outside, count = (int(x) for x in lines[1].split())
    assert inside == 0 and outside >= 65536 and count == 65536
    # Outside the workspace root inside owns its range: chown works there.
    assert lines[4] == "1234", lines
    # In the workspace, only the owner's ids exist: no chown to others.
    assert lines[2:4] == ["c1234=1", "c1000=1"], lines
    # On the host: the workspace owner, never root, never the range.
    for n in ("made-inside", "dir", "as-1000"):
        st = os.stat(workspace / n)
        assert (st.st_uid, st.st_gid) == (TEST_UID, TEST_UID), n
    for root, dirs, files in os.walk(workspace):
        for n in dirs + files:
            assert os.lstat(os.path.join(root, n)).st_uid != 0
    # A fresh workspace: files belong to the sandbox's own range.
    p = sh(airlock, "touch /workspace/f; stat -c %u /workspace/f; cat /proc/self/uid_map",
           check=True)
    assert p.stdout.split()[0] == b"0"


MESS = r"""
cd /workspace
echo a > f1; mkdir -p d/sub; echo b > d/sub/f2; ln -s /etc/passwd d/link; mkfifo d/fifo
for id in 1 100 1000 1234 65534 65535; do
  chown $id f1 && echo "chown $id: allowed"; chown -h $id d/link && echo "chown -h $id: allowed"
  chgrp $id d && echo "chgrp $id: allowed"; chown -R $id:$id d && echo "chown -R $id: allowed"
done
python3 -c 'import os; os.chown("f1", 4321, -1)' 2>/dev/null && echo "python chown: allowed"
mkdir open; chmod 1777 open
for u in 1 1000 65534; do
  setpriv --reuid=$u --regid=$u --clear-groups sh -c "echo x > /workspace/open/by-$u" 2>/dev/null     && echo "user $u: created a file"
  setpriv --reuid=$u --regid=$u --clear-groups mkdir /workspace/open/dir-$u 2>/dev/null     && echo "user $u: created a directory"
done
mkdir locked; echo c > locked/inner; mkdir locked/deeper; echo d > locked/deeper/f3
chmod 000 locked/deeper locked; chmod 000 f1
chmod g+s d 2>/dev/null && echo "setgid dir: allowed"
mkdir -m 2775 sg 2>/dev/null; mkdir -m 4775 su 2>/dev/null
touch x; chmod u+s x 2>/dev/null && echo "setuid file: allowed"
python3 -c 'import os; fd = os.open("y", os.O_CREAT | os.O_WRONLY, 0o6755)' 2>/dev/null   && echo "setuid create: allowed"
echo done
"""


def test_workspace_owner_can_always_remove_everything(airlock, workspace):
    """Whatever root (or any other user) inside does in the workspace, its
    owner on the host can read and remove all of it afterwards, and nothing
    there belongs to the sandbox's uid range (which another sandbox gets
    later)."""
    p = sh(airlock, MESS, "--workspace", str(workspace))
    out = p.stdout.decode()
    assert out.rstrip().endswith("done"), (out, p.stderr)
    assert "allowed" not in out and "created" not in out, out
    # Every entry is the owner's, with no setuid or setgid bit.
    for root, dirs, files in os.walk(workspace):
        for n in dirs + files:
            st = os.lstat(os.path.join(root, n))
            assert (st.st_uid, st.st_gid) == (TEST_UID, TEST_UID), (root, n, st)
            assert not st.st_mode & 0o6000, (root, n, oct(st.st_mode))
    # As the owner: make everything accessible (an owner may always chmod
    # what it owns), read it all, remove it all.
    script = ("chmod -R u+rwX . && find . -type f -exec cat {} + >/dev/null && "
              "find . -mindepth 1 -delete && ls -A")
    r = subprocess.run(["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}",
                        "--clear-groups", "sh", "-c", script], cwd=workspace,
                       capture_output=True)
    assert r.returncode == 0, r
    assert r.stdout == b"" and os.listdir(workspace) == []


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


# What a process inside can read that could name the host: every process's
# command line, and pid 1's environment, links and maps (normally refused:
# it is not dumpable), and the mount tables.
READ_EVERYTHING = r"""
for d in /proc/[0-9]*; do
  echo "== $d/cmdline"; tr '\0' ' ' < $d/cmdline 2>&1; echo
done
for f in environ maps mountinfo mounts mountstats cgroup status; do
  echo "== /proc/1/$f"; tr '\0' '\n' < /proc/1/$f 2>&1
done
for l in exe cwd root; do echo "== /proc/1/$l $(readlink /proc/1/$l 2>&1)"; done
for f in mountinfo mounts mountstats cgroup; do echo "== /proc/self/$f"; cat /proc/self/$f; done
echo "== /proc/self/mountinfo ends"
"""


def host_strings_in(out, host_strings, workspace=None):
    """The host strings found in out. The one exception: the root of the
    /workspace mount in mountinfo is the workspace's path within its
    filesystem (the kernel shows a bind mount that way: docs/sandbox.md)."""
    kept = []
    for line in out.splitlines():
        fields = line.split()
        if workspace and len(fields) > 5 and fields[4] == "/workspace" and " - " in line:
            fields[3] = "(workspace root)"
            line = " ".join(fields)
        kept.append(line)
    text = "\n".join(kept)
    return [s for s in host_strings if s in text]


@pytest.fixture
def gateway_files(tmp_path):
    d = tmp_path / "gw-files-HOSTPATH"
    d.mkdir(mode=0o700)
    policy = d / "policy-HOSTPATH.yaml"
    policy.write_text("rules:\n  - id: api\n    host: api.example.test\n")
    vault = d / "vault-HOSTPATH.yaml"
    fd = os.open(vault, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("secrets:\n  example-key: \"sk-not-used-0123456789\"\n")
    return {"policy": str(policy), "vault": str(vault)}


def test_nothing_of_the_host_visible(airlock, tmp_path, gateway_files):
    """Nothing a sandboxed process can read names the host: not the
    supervisor's command line (binary, --env values, vault and policy paths,
    upstreams), nor its environment, nor the state directory, nor the
    workspace's host path (but for the kernel's root of the bind)."""
    ws = tmp_path / "workspace-HOSTPATH-a1b2"
    ws.mkdir()
    os.chown(ws, TEST_UID, TEST_UID)
    upstream = "127.0.0.1:40999"
    env_value = "ENVVALUE-HOSTPATH-77"
    opts = ["--workspace", str(ws), "--env", f"GIVEN={env_value}",
            "--policy", gateway_files["policy"], "--vault", gateway_files["vault"],
            "--upstream", f"api.example.test:443={upstream}"]
    host_strings = [airlock.state_dir, os.path.realpath(airlock.bin), airlock.bin,
                    gateway_files["policy"], gateway_files["vault"], upstream, str(ws),
                    str(tmp_path), "AIRLOCK_STATE_DIR", "AIRLOCK_CGROUP_PARENT", env_value]
    script = READ_EVERYTHING.replace("/proc/self/mountinfo ends",
                                     "own environment: skipped (it holds --env by design)")
    p = airlock.run(*opts, "--", "/bin/sh", "-c", script,
                    env={"HOST_ONLY_VAR": "HOSTENV-HOSTPATH"})
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert "== /proc/1/cmdline\nairlock-init" in out, out[:2000]
    assert "lowerdir=" in out  # the mount tables were read
    # The command's own command line is the script, which names none of them.
    leaks = host_strings_in(out, host_strings + ["HOSTENV-HOSTPATH"], workspace=str(ws))
    assert leaks == [], (leaks, out)

    # A persistent sandbox: the exec helpers run forked from its keeper,
    # whose memory is `sandbox create`'s.
    sid = airlock.sandbox("create", *opts, check=True).stdout.decode().strip()
    try:
        p = airlock.sandbox("exec", "--env", "EXEC_GIVEN=EXEC-HOSTPATH", sid, "--",
                            "/bin/sh", "-c", script)
        assert p.returncode == 0, p.stderr
        out = p.stdout.decode()
        assert "== /proc/1/cmdline\nairlock-init" in out, out[:2000]
        leaks = host_strings_in(out, host_strings + ["EXEC-HOSTPATH"], workspace=str(ws))
        assert leaks == [], (leaks, out)
    finally:
        airlock.sandbox("destroy", sid, check=True)


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


def check_privileges(out):
    fields = dict(l.split(":\t") for l in out.decode().splitlines())
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2"
    for which in ("CapBnd", "CapEff"):
        caps = int(fields[which], 16)
        assert not caps & (1 << 21), f"CAP_SYS_ADMIN must be dropped ({which})"
        assert not caps & (1 << 16), f"CAP_SYS_MODULE must be dropped ({which})"
        assert caps & (1 << 0), f"CAP_CHOWN is kept for root inside ({which})"


def test_no_new_privileges_and_caps(airlock):
    script = "grep -E '^(NoNewPrivs|Seccomp|CapBnd|CapEff):' /proc/self/status"
    check_privileges(sh(airlock, script, check=True).stdout)
    # The same for a command of a persistent sandbox (other helpers start it).
    sid = airlock.sandbox("create", check=True).stdout.decode().strip()
    try:
        check_privileges(airlock.sandbox("exec", sid, "--", "/bin/sh", "-c", script,
                                         check=True).stdout)
    finally:
        airlock.sandbox("destroy", sid, check=True)


def test_etc_view_rebuilt_from_changes_only(airlock):
    """A new view of /etc links what did not change from the previous one:
    a file rewritten in place (same size, its mtime put back) or made
    private must not come from the old copy."""
    files = {n: f"/etc/airlock-test-view-{n}" for n in ("same", "edited", "private", "poke")}
    sid = None
    try:
        for n in ("same", "edited", "private"):
            with open(files[n], "w") as f:
                f.write(f"{n}-v1\n")
            os.chmod(files[n], 0o644)
        # A persistent sandbox keeps the first view in use (and on disk).
        sid = airlock.sandbox("create", check=True).stdout.decode().strip()
        p = airlock.sandbox("exec", sid, "--", "/bin/sh", "-c", "cat /etc/airlock-test-view-*",
                            check=True)
        assert p.stdout.split() == [b"edited-v1", b"private-v1", b"same-v1"]
        st = os.stat(files["edited"])
        with open(files["edited"], "r+") as f:  # in place: same inode, same size
            f.write("edited-v2\n")
        os.utime(files["edited"], ns=(st.st_atime_ns, st.st_mtime_ns))
        os.chmod(files["private"], 0o600)
        with open(files["private"], "w") as f:
            f.write("SECRET-v2\n")
        with open(files["poke"], "w") as f:  # a new entry: /etc's view is rebuilt now
            f.write("poke\n")
        os.chmod(files["poke"], 0o644)
        p = airlock.run("--", "/bin/sh", "-c", "cat /etc/airlock-test-view-*; true", check=True)
        assert p.stdout.split() == [b"edited-v2", b"poke", b"same-v1"], p.stdout
        assert b"SECRET" not in p.stdout
        # The unchanged file came from the previous copy (one inode, two
        # names); the edited one was copied anew.
        cur = os.readlink(os.path.join(airlock.state_dir, ".etc", "current"))
        copy = os.path.join(airlock.state_dir, ".etc", cur, "etc", "airlock-test-view-")
        assert os.stat(copy + "same").st_nlink == 2
        assert os.stat(copy + "edited").st_nlink == 1
        assert not os.path.exists(copy + "private")
    finally:
        if sid:
            airlock.sandbox("destroy", sid, check=True)
        for f in files.values():
            if os.path.exists(f):
                os.unlink(f)


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

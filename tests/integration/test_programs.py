# SPDX-License-Identifier: Apache-2.0
"""airlock's programs: `airlock` runs the sandbox commands without loading the
gateway's or the store's libraries, and runs its helpers (airlock-gateway,
airlock-checkpoint) from where they are installed beside it; the gateway
process gets its options through a size-checked handover and refuses a
malformed one; a gateway uid inside the sandboxes' uid ranges is refused.
"""
import os
import pathlib
import shutil
import socket
import stat
import struct
import subprocess
import time

import pytest

from conftest import GATEWAY_UID, UID_BASE, UID_END, children, deadline_poll

# What the sandbox commands must not load (the gateway's and the store's
# libraries and what they pull in).
HEAVY = ("libssl", "libcrypto", "libevent", "libjansson", "libarchive", "libz.so",
         "libbrotli", "libzstd", "libxml2", "libicu", "liblzma", "libyaml", "libnettle")

# gateway/internal.h and gateway/handover.h
IPC_READY, IPC_ERROR, IPC_ATTACH, IPC_HANDOVER = 1, 2, 3, 7
GW_MODE_RESTRICTED = 1


def helper(airlock, name):
    """The helper the front would run: installed beside it, or in a build tree."""
    d = pathlib.Path(airlock.bin).resolve().parent
    for p in (d / ".." / "libexec" / "airlock" / name, d / name):
        if p.exists():
            return p.resolve()
    raise AssertionError(f"{name} is neither in {d}/../libexec/airlock nor beside {d}/airlock")


def heavy_in(text):
    return sorted({h for h in HEAVY for line in text.splitlines() if h in line})


def mapped(pid):
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


# ---------------------------------------------------------------------------
# The sandbox commands load libc and libseccomp, not the gateway's libraries.

def test_airlock_links_no_gateway_or_store_library(airlock):
    if not shutil.which("readelf"):
        pytest.skip("readelf (binutils) is not installed: cannot read the binary's libraries")
    out = subprocess.run(["readelf", "-d", airlock.bin], capture_output=True, check=True,
                         text=True).stdout
    needed = [l for l in out.splitlines() if "(NEEDED)" in l]
    assert needed, out
    assert heavy_in("\n".join(needed)) == [], needed
    # The helpers do link them (the check above can see a library).
    out = subprocess.run(["readelf", "-d", str(helper(airlock, "airlock-gateway"))],
                         capture_output=True, check=True, text=True).stdout
    assert "libssl" in out and "libevent" in out, out


def test_sandbox_processes_map_no_gateway_library(airlock):
    """The run's supervisor, a persistent sandbox's keeper and an exec's
    client, alive: none has the gateway's or the store's libraries mapped."""
    run = subprocess.Popen([airlock.bin, "sandbox", "run", "--", "/bin/sh", "-c", "read x; true"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=airlock.env)
    try:
        # The supervisor is the airlock process itself; once its command
        # runs, the sandbox is set up (the gateway's code would be in by then).
        deadline_poll(lambda: _has_child_sh(run.pid), 20, "the sandbox's command")
        maps = mapped(run.pid)
        assert "libc.so" in maps, maps[:500]  # the check can see a library
        assert heavy_in(maps) == [], heavy_in(maps)
    finally:
        run.stdin.close()
        assert run.wait(timeout=30) == 0, run.stderr.read()
    sid = airlock.sandbox("create", check=True).stdout.decode().strip()
    try:
        with open(os.path.join(airlock.state_dir, sid, "state")) as f:
            keeper = int([l for l in f.read().splitlines() if l.startswith("keeper=")][0][7:])
        assert heavy_in(mapped(keeper)) == []
        ex = subprocess.Popen([airlock.bin, "sandbox", "exec", sid, "--", "/bin/sh", "-c",
                               "read x; true"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=airlock.env)
        try:
            deadline_poll(lambda: _has_child_sh(keeper), 20, "the exec's command")
            assert heavy_in(mapped(ex.pid)) == []
        finally:
            ex.stdin.close()
            assert ex.wait(timeout=30) == 0, ex.stderr.read()
    finally:
        airlock.sandbox("destroy", sid, check=True)


def _has_child_sh(pid):
    """Is a /bin/sh running below pid (its children, or their descendants)?"""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            ppid = int(st.rsplit(")", 1)[1].split()[1])
            comm = st[st.index("(") + 1:st.rindex(")")]
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append((int(d), comm))
    todo = [pid]
    while todo:
        p = todo.pop()
        for c, comm in kids.get(p, []):
            if comm == "sh":
                return True
            todo.append(c)
    return False


# ---------------------------------------------------------------------------
# Helpers: found beside airlock, refused when unsafe, missing said plainly.

def copy_front(airlock, dest, with_helpers):
    dest.mkdir(parents=True)
    os.chmod(dest, 0o755)
    shutil.copy2(airlock.bin, dest / "airlock")
    if with_helpers:
        for name in ("airlock-gateway", "airlock-checkpoint"):
            shutil.copy2(helper(airlock, name), dest / name)
    return dest / "airlock"


def test_missing_helpers(airlock, tmp_path):
    os.chmod(tmp_path, 0o755)
    airlock.bin = str(copy_front(airlock, tmp_path / "a" / "bin", with_helpers=False))
    for args in (["gateway", "--help"], ["checkpoint", "ls", "x"],
                 ["sandbox", "run", "--allow", "example.test", "--", "true"]):
        p = airlock(*args)
        assert p.returncode == 125, (args, p)
        err = p.stderr.decode().strip()
        assert len(err.splitlines()) == 1 and "is missing" in err, (args, err)
        assert str(tmp_path / "a" / "bin") in err, err
    # The sandbox itself needs no helper.
    p = airlock("sandbox", "run", "--", "/bin/sh", "-c", "echo ok")
    assert p.returncode == 0 and p.stdout == b"ok\n", p
    assert airlock.leftovers() == []


def test_unsafe_helper_refused(airlock, tmp_path):
    os.chmod(tmp_path, 0o755)
    front = copy_front(airlock, tmp_path / "bin", with_helpers=True)
    airlock.bin = str(front)
    # As copied: it works from there.
    p = airlock("gateway", "--help")
    assert p.returncode == 0 and b"--listen" in p.stdout, p
    gw = tmp_path / "bin" / "airlock-gateway"
    os.chmod(gw, 0o775)  # writable by its group
    for args in (["gateway", "--help"], ["sandbox", "run", "--allow", "example.test", "--", "true"]):
        p = airlock(*args)
        assert p.returncode == 125, (args, p)
        assert b"others may write" in p.stderr, p.stderr
    os.chmod(gw, 0o755)
    os.chown(gw, 12345, 12345)  # not the owner of airlock
    p = airlock("gateway", "--help")
    assert p.returncode == 125 and b"not owned" in p.stderr, p
    assert airlock.leftovers() == []


def test_installed_layout(airlock, tmp_path):
    """`meson install` puts the helpers in <libexecdir>/airlock; the installed
    airlock finds them there, wherever the tree was installed to."""
    build = pathlib.Path(airlock.bin).resolve().parents[2]
    if not (build / "meson-private").is_dir():
        pytest.skip(f"{airlock.bin} is not in a meson build tree: no install to try")
    if not shutil.which("meson"):
        pytest.skip("meson is not installed")
    dest = tmp_path / "dest"
    subprocess.run(["meson", "install", "-C", str(build), "--no-rebuild", "--destdir", str(dest)],
                   check=True, capture_output=True, timeout=120)
    os.chmod(tmp_path, 0o755)
    # The programs (the manual pages and the completion are test_install.py's).
    found = {p.name: p for p in dest.rglob("airlock*") if p.is_file() and p.stat().st_mode & 0o111}
    assert set(found) == {"airlock", "airlock-gateway", "airlock-checkpoint",
                          "airlock-control"}, found
    front = found["airlock"]
    # In <libexecdir>/airlock, not beside the binary.
    assert found["airlock-gateway"].parent != front.parent
    assert found["airlock-gateway"].parent.name == "airlock"
    # The installed tree may move: the path is relative to the binary.
    moved = tmp_path / "moved"
    dest.rename(moved)
    airlock.bin = str(moved / front.relative_to(dest))
    p = airlock("gateway", "--help")
    assert p.returncode == 0 and b"--listen" in p.stdout, p
    p = airlock("checkpoint", "--help")
    assert p.returncode == 0 and b"checkpoint create" in p.stdout, p
    p = airlock("session", "--help")
    assert p.returncode == 0 and b"airlock session" in p.stdout, p
    p = airlock("sandbox", "run", "--allow", "example.test", "--", "/bin/sh", "-c",
                "echo $HTTPS_PROXY; test -s /etc/airlock/ca.crt && echo ca")
    assert p.returncode == 0, p
    assert p.stdout.decode().split() == ["http://127.0.0.1:3128", "ca"], p.stdout
    assert airlock.leftovers() == []


# ---------------------------------------------------------------------------
# The gateway process: exec'd, with nothing of the caller's but its options.

def test_gateway_process_gets_nothing_of_the_caller(airlock, tmp_path):
    secret_file = tmp_path / "held-open"
    secret_file.write_text("caller's file")
    fd = os.open(secret_file, os.O_RDONLY)  # inheritable: handed to airlock
    os.set_inheritable(fd, True)
    env = dict(airlock.env, AIRLOCK_TEST_CALLER_SECRET="caller-env-" + os.urandom(8).hex())
    p = subprocess.Popen([airlock.bin, "sandbox", "run", "--allow", "example.test", "--",
                          "/bin/sh", "-c", "read x; true"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         pass_fds=(fd,))
    os.close(fd)
    try:
        (gw,) = deadline_poll(lambda: children(p.pid, "airlock-gw"), 20, "the gateway process")
        deadline_poll(lambda: _has_child_sh(p.pid), 20, "the sandbox's command")
        exe = os.readlink(f"/proc/{gw}/exe")
        assert exe == str(helper(airlock, "airlock-gateway")), exe
        with open(f"/proc/{gw}/environ", "rb") as f:
            names = sorted(v.split(b"=", 1)[0].decode() for v in f.read().split(b"\0") if v)
        allowed = {"AIRLOCK_LOG_LEVEL", "AIRLOCK_LOG_FORMAT", "ASAN_OPTIONS", "UBSAN_OPTIONS",
                   "LSAN_OPTIONS", "TSAN_OPTIONS"}
        assert set(names) <= allowed, names
        fds = [os.readlink(f"/proc/{gw}/fd/{n}") for n in os.listdir(f"/proc/{gw}/fd")]
        assert str(secret_file) not in fds, fds
        with open(f"/proc/{gw}/status") as f:
            st = dict(l.split(":", 1) for l in f if ":" in l)
        assert int(st["Uid"].split()[0]) == GATEWAY_UID, st["Uid"]
        assert st["NoNewPrivs"].strip() == "1" and st["Seccomp"].strip() == "2"
    finally:
        p.stdin.close()
        assert p.wait(timeout=30) == 0, p.stderr.read()
    assert airlock.leftovers() == []


def frame(t, payload=b""):
    return struct.pack("=II", t, len(payload)) + payload


def rec(tag, b):
    return struct.pack("=BI", tag, len(b)) + b


def s(x):
    return x.encode() + b"\0"


def u32(v):
    return struct.pack("=I", v)


def handover(policy, parent, uid=GATEWAY_UID, uids=(UID_BASE, UID_END)):
    return b"".join([
        rec(1, u32(GW_MODE_RESTRICTED)), rec(2, s("sandbox")), rec(3, s(str(policy))),
        rec(10, b"\0"), rec(11, u32(uid)), rec(12, u32(uids[0]) + u32(uids[1])),
        rec(13, b"\0"), rec(14, u32(parent)),
        rec(15, s("/etc/ssl/certs/ca-certificates.crt")), rec(16, s("/etc/airlock/ca.crt")),
    ])


def run_gateway_process(airlock, send, fds=()):
    """Starts the gateway's program as gw_start does (its socket at 3), sends
    bytes, and returns (first answer frame or None, exit status, stderr)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = {k: v for k, v in airlock.env.items() if k.endswith("_OPTIONS")}

    def at_three():
        os.dup2(theirs.fileno(), 3)

    # close_fds=False: what the child dup2()s to 3 must stay (every other
    # descriptor of ours is close-on-exec).
    p = subprocess.Popen([str(helper(airlock, "airlock-gateway")), "--handover"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env, preexec_fn=at_three, close_fds=False)
    theirs.close()
    ours.settimeout(20)
    try:
        if fds:
            ours.sendmsg([send[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                       struct.pack(f"{len(fds)}i", *fds))])
            ours.sendall(send[1:])
        else:
            ours.sendall(send)
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = None
    try:
        head = b""
        while len(head) < 8:
            k = ours.recv(8 - len(head))
            if not k:
                break
            head += k
        if len(head) == 8:
            t, n = struct.unpack("=II", head)
            body = b""
            while len(body) < n:
                k = ours.recv(n - len(body))
                if not k:
                    break
                body += k
            answer = (t, body)
    except (ConnectionResetError, socket.timeout):
        pass
    return ours, p, answer


def test_malformed_handover_refused(airlock, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - host: api.example.test\n")
    good = handover(policy, os.getpid())
    r, w = os.pipe()
    cases = {
        "another frame type": frame(IPC_ATTACH, good),
        "a length over the maximum": struct.pack("=II", IPC_HANDOVER, 0xFFFFFFF0),
        "garbage": frame(IPC_HANDOVER, os.urandom(64)),
        "an unknown record": frame(IPC_HANDOVER, good + rec(99, s("x"))),
        "a truncated record": frame(IPC_HANDOVER, good[:-3]),
        "a uid given twice": frame(IPC_HANDOVER, good + rec(11, u32(1234))),
        "a string without its NUL": frame(IPC_HANDOVER, good + rec(5, b"api.example.test")),
        "descriptors": frame(IPC_HANDOVER, good),
    }
    try:
        for what, data in cases.items():
            sock, p, answer = run_gateway_process(airlock, data,
                                                  fds=(r, w) if what == "descriptors" else ())
            try:
                assert p.wait(timeout=20) == 1, what
            finally:
                sock.close()
            assert answer is not None and answer[0] == IPC_ERROR, (what, answer)
            msg = answer[1].decode()
            assert "refused" in msg or "malformed" in msg, (what, msg)
            # Nothing on its stderr: the reason is the caller's to print.
            assert p.stderr.read() == b"", what
    finally:
        os.close(r)
        os.close(w)
    # The gateway checks the uid against the ranges it is given, too.
    sock, p, answer = run_gateway_process(
        airlock, frame(IPC_HANDOVER, handover(policy, os.getpid(), uids=(GATEWAY_UID - 5,
                                                                          GATEWAY_UID + 1))))
    assert p.wait(timeout=20) == 1
    sock.close()
    assert answer and answer[0] == IPC_ERROR and "AIRLOCK_GATEWAY_UID" in answer[1].decode()
    # A bad option: the configuration's own reason.
    bad = handover(tmp_path / "missing.yaml", os.getpid())
    sock, p, answer = run_gateway_process(airlock, frame(IPC_HANDOVER, bad))
    assert p.wait(timeout=20) == 1
    sock.close()
    assert answer and answer[0] == IPC_ERROR and "missing.yaml" in answer[1].decode(), answer


def test_good_handover_serves(airlock, tmp_path):
    """The same encoding, well formed: the gateway answers READY with its CA
    and the sandbox's environment, runs unprivileged, and leaves when its
    caller closes the socket without attaching a sandbox."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  - host: api.example.test\n")
    sock, p, answer = run_gateway_process(airlock,
                                          frame(IPC_HANDOVER, handover(policy, os.getpid())))
    try:
        assert answer and answer[0] == IPC_READY, (answer, p.stderr)
        body, pos, pem, env = answer[1], 0, None, []
        while pos < len(body):
            tag, n = struct.unpack("=BI", body[pos:pos + 5])
            v = body[pos + 5:pos + 5 + n]
            pos += 5 + n
            if tag == 1:
                pem = v
            else:
                env.append(v.rstrip(b"\0").decode())
        assert pem.startswith(b"-----BEGIN CERTIFICATE-----"), pem[:40]
        assert "HTTPS_PROXY=http://127.0.0.1:3128" in env, env
        assert "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" in env, env
        with open(f"/proc/{p.pid}/status") as f:
            st = dict(l.split(":", 1) for l in f if ":" in l)
        assert int(st["Uid"].split()[0]) == GATEWAY_UID and st["NoNewPrivs"].strip() == "1"
    finally:
        sock.close()
    assert p.wait(timeout=20) in (0, 1)


def test_not_started_by_airlock(airlock, tmp_path):
    gw = str(helper(airlock, "airlock-gateway"))
    # No socket at 3 (a file instead): refused with a message, nothing served.
    f = open(tmp_path / "x", "w")
    try:
        p = subprocess.run([gw, "--handover"], capture_output=True, timeout=20,
                           preexec_fn=lambda: os.dup2(f.fileno(), 3), close_fds=False)
    finally:
        f.close()
    assert p.returncode == 125 and b"airlock starts itself" in p.stderr, p
    p = subprocess.run([gw, "frobnicate"], capture_output=True, timeout=20)
    assert p.returncode == 125 and b"airlock gateway" in p.stderr, p


# ---------------------------------------------------------------------------
# The gateway's uid may not be one of the sandboxes' uids.

def test_gateway_uid_inside_sandbox_ranges_refused(airlock, tmp_path):
    # The default, whatever this run's (conftest passes AIRLOCK_GATEWAY_UID on).
    airlock.env.pop("AIRLOCK_GATEWAY_UID", None)
    inside = [
        # The default gateway uid 0x5fffffff is the last uid of this base's ranges.
        {"AIRLOCK_UID_BASE": str(0x50000000)},
        {"AIRLOCK_GATEWAY_UID": str(UID_BASE + 5 * 65536 + 7)},
        {"AIRLOCK_GATEWAY_UID": str(UID_BASE)},
        {"AIRLOCK_GATEWAY_UID": str(UID_END - 1)},
    ]
    policy = tmp_path / "p.yaml"
    policy.write_text("rules: []\n")
    for env in inside:
        for args in (["sandbox", "run", "--", "true"],
                     ["sandbox", "run", "--allow", "example.test", "--", "true"],
                     ["sandbox", "create"],
                     ["gateway", "--listen", "127.0.0.1:0", "--policy", str(policy)]):
            p = airlock(*args, env=env)
            assert p.returncode == 125, (env, args, p)
            err = p.stderr.decode().strip()
            assert len(err.splitlines()) == 1, err
            assert "is inside the sandboxes' uids" in err and "AIRLOCK_GATEWAY_UID" in err, err
            assert airlock.leftovers() == []
    # Not a uid at all.
    for bad in ("0", "-1", "4294967295", "x"):
        p = airlock("sandbox", "run", "--", "true", env={"AIRLOCK_GATEWAY_UID": bad})
        assert p.returncode == 125 and b"AIRLOCK_GATEWAY_UID" in p.stderr, (bad, p)
    # Existing sandboxes stay manageable under a refused configuration.
    p = airlock("sandbox", "list", env=inside[0])
    assert p.returncode == 0, p

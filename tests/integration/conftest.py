# SPDX-License-Identifier: Apache-2.0
"""Fixtures for airlock's integration tests.

Every test runs the real `airlock` binary (AIRLOCK=path) as root against a
private state directory, and checks what the host sees afterwards.
"""
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TEST_UID = 1000  # owner of test workspaces: an unprivileged host user
# The tests' sandboxes take their uid ranges from here, apart from any other
# airlock on this host, so that "no process left in our ranges" means ours.
# Two test runs on one host (two checkouts) each set their own base: a uid
# from 65536 with room for 4096 ranges of 65536 below 2^31 whose ranges do
# not hold the gateway's uid (airlock refuses those): 0x10000000, 0x20000000,
# 0x30000000, 0x40000000 (its last uid 0x4fffffff), then from 0x60000000 up
# to 0x6fff0000; not 0x4fff0001 to 0x5fffffff, whose ranges reach 0x5fffffff.
UID_BASE = int(os.environ.get("AIRLOCK_TEST_UID_BASE", "0x20000000"), 0)
UID_END = UID_BASE + 4096 * 65536
# The egress gateway's own uid (gateway.h's GW_DEFAULT_UID unless set): any
# airlock's gateway, another checkout's included, runs as it. airlock refuses
# to start a sandbox or gateway while it is inside the sandboxes' ranges.
GATEWAY_UID = int(os.environ.get("AIRLOCK_GATEWAY_UID", "0x5fffffff"), 0)


def airlock_path():
    p = os.environ.get("AIRLOCK") or str(REPO / "build" / "src" / "cli" / "airlock")
    if not os.access(p, os.X_OK):
        pytest.exit(f"airlock binary not found at {p} (set AIRLOCK or run `make build`)", 2)
    return p


@pytest.fixture(scope="session", autouse=True)
def need_root():
    if os.geteuid() != 0:
        pytest.exit("the integration tests create sandboxes and need root", 2)


@pytest.fixture(scope="session")
def state_root():
    d = tempfile.mkdtemp(prefix="airlock-it-", dir="/var/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Airlock:
    def __init__(self, state_dir, cgroup_parent):
        self.bin = airlock_path()
        self.state_dir = state_dir
        self.env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "AIRLOCK_STATE_DIR": state_dir,
            "AIRLOCK_CGROUP_PARENT": cgroup_parent,
            "AIRLOCK_UID_BASE": str(UID_BASE),
        }
        # AIRLOCK_GATEWAY_UID: as GATEWAY_UID above (a UID_BASE whose ranges
        # hold the default needs another).
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "AIRLOCK_GATEWAY_UID"):
            if k in os.environ:
                self.env[k] = os.environ[k]

    def __call__(self, *args, input=None, timeout=60, env=None, check=False, **kw):
        e = dict(self.env)
        if env:
            e.update(env)
        p = subprocess.run([self.bin, *args], input=input, capture_output=True,
                           timeout=timeout, env=e, **kw)
        if check and p.returncode != 0:
            raise AssertionError(
                f"airlock {' '.join(args)} exited {p.returncode}\n"
                f"stdout: {p.stdout[-2000:]!r}\nstderr: {p.stderr[-2000:]!r}")
        return p

    def sandbox(self, *args, **kw):
        return self("sandbox", *args, **kw)

    def run(self, *args, **kw):
        """airlock sandbox run ARGS (ARGS include '--' and the command)."""
        return self("sandbox", "run", *args, **kw)

    def leftovers(self):
        """Everything a sandbox may leave on the host, as a list of strings."""
        out = []
        for entry in sorted(os.listdir(self.state_dir)) if os.path.isdir(self.state_dir) else []:
            if entry == "slots":
                out += [f"slot {s}" for s in os.listdir(os.path.join(self.state_dir, "slots"))]
            elif entry == ".etc":
                continue  # the shared view of /etc: a cache, not a sandbox's
            else:
                out.append(f"state {entry}")
        parent = self.env["AIRLOCK_CGROUP_PARENT"]
        for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu",
                     "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
            d = os.path.join(root, parent)
            if os.path.isdir(d):
                out += [f"cgroup {d}/{c}" for c in os.listdir(d)
                        if os.path.isdir(os.path.join(d, c))]
        with open("/proc/self/mountinfo") as f:
            out += [f"mount {l.split()[4]}" for l in f if self.state_dir in l]
        return out


@pytest.fixture
def airlock(state_root, request):
    name = request.node.name.replace("[", "-").replace("]", "")[:40]
    d = tempfile.mkdtemp(prefix="s-", dir=state_root)
    a = Airlock(d, f"airlock-test/{os.getpid()}-{os.path.basename(d)}")
    yield a
    # Nothing may survive a test: a leftover is a bug in airlock. (Tests
    # that leave debris on purpose clean it with `gc` themselves.)
    left = a.leftovers()
    a.sandbox("gc")
    parent = a.env["AIRLOCK_CGROUP_PARENT"]
    for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu",
                 "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        for d in (os.path.join(root, parent), os.path.join(root, os.path.dirname(parent))):
            try:
                os.rmdir(d)
            except OSError:
                pass
    assert left == [], f"sandbox debris left on the host: {left}"


@pytest.fixture
def workspace(tmp_path):
    """A workspace owned by an unprivileged host user, as a caller's would be."""
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, TEST_UID, TEST_UID)
    return ws


@pytest.fixture(scope="session")
def probe(tmp_path_factory):
    """The syscall probe, compiled once; copied into workspaces by tests."""
    out = tmp_path_factory.mktemp("probe") / "probe"
    src = REPO / "tests" / "integration" / "helpers" / "probe.c"
    common = REPO / "src" / "common"
    subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-D_GNU_SOURCE", f"-I{REPO / 'src'}", "-o", str(out),
                    str(src), str(common / "parse.c")], check=True)
    return out


def put(ws, name, data, mode=0o644):
    p = pathlib.Path(ws) / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    os.chmod(p, mode)
    os.chown(p, TEST_UID, TEST_UID)
    return p


def uid_range_processes(base=UID_BASE, end=UID_END):
    """Host processes whose uid is in the tests' ranges.

    Zombies count (an unreaped child is our bug), except orphans already
    handed to the host's init: reaping those is init's job, and a supervisor
    killed with SIGKILL leaves its sandbox's init there. (Some minimal
    container inits never reap.)"""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(l.split(":", 1) for l in f if ":" in l)
            if fields["State"].split()[0] == "Z" and int(fields["PPid"]) == 1:
                continue
            if int(fields["Uid"].split()[0]) == GATEWAY_UID:
                # A gateway, maybe another test run's or a standalone
                # `airlock gateway` (named "airlock" then): not a sandbox's.
                continue
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        uid = int(line.split()[1])
                        if base <= uid < end:
                            found.append((int(pid), uid))
                        break
        except OSError:
            pass
    return found


def deadline_poll(cond, seconds, what):
    """cond()'s first true value, polled until seconds have passed."""
    end = time.monotonic() + seconds
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def children(pid, comm=None):
    """The processes whose parent is pid (named comm, when given)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
                name = st[st.index("(") + 1:st.rindex(")")]
                if int(st.rsplit(")", 1)[1].split()[1]) == pid and comm in (None, name):
                    out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def gateway_rss_kib(pid):
    """Resident KiB of the one gateway process pid (a sandbox's supervisor) started."""
    gws = children(pid, "airlock-gw")
    assert len(gws) == 1, gws
    with open(f"/proc/{gws[0]}/status") as f:
        return int([l for l in f if l.startswith("VmRSS:")][0].split()[1])

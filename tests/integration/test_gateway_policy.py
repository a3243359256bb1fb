# SPDX-License-Identifier: Apache-2.0
"""Policy changes of a running sandbox: a new generation replaces the old one
whole, a bad one changes nothing, and only root reaches the control socket.

No upstream is needed: an allowed request goes on to an upstream override
pointing at a closed port (502 from the gateway), a denied one gets 403
before any connection, so the status tells the decision apart.
"""
import json
import os
import socket
import subprocess

import pytest

CLOSED = "127.0.0.1:9"  # discard port, nothing listens on the host's loopback


def status(airlock, sid, host):
    p = airlock.sandbox("exec", sid, "--", "curl", "-s", "-o", "/dev/null", "-w",
                        "%{http_code}", "--proxy-header", "X-Probe: 1",
                        f"http://{host}/probe")
    return p.stdout.decode()


def audit(airlock, sid):
    p = airlock.sandbox("audit", sid, check=True)
    return [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]


def test_policy_generations(airlock, tmp_path):
    sid = airlock.sandbox("create", "--allow", "a.example.test",
                          "--upstream", f"a.example.test:80={CLOSED}",
                          "--upstream", f"b.example.test:80={CLOSED}",
                          check=True).stdout.decode().strip()
    try:
        assert status(airlock, sid, "a.example.test") == "502"
        assert status(airlock, sid, "b.example.test") == "403"

        new = tmp_path / "new.yaml"
        new.write_text("rules:\n  - id: only-b\n    host: b.example.test\n")
        p = airlock.sandbox("policy", sid, str(new), check=True)
        assert p.stdout.decode().strip() == "policy generation 2"
        # Replaced whole: the --allow rule of generation 1 is gone.
        assert status(airlock, sid, "a.example.test") == "403"
        assert status(airlock, sid, "b.example.test") == "502"
        # The DNS stub follows the new generation too.
        p = airlock.sandbox("exec", sid, "--", "getent", "hosts", "a.example.test")
        assert p.returncode != 0, p.stdout

        # Bad files change nothing: a YAML error, an unknown key, a bad rule.
        for i, bad in enumerate(["rules:\n  - host: [b\n",
                                 "rules:\n  - host: a.example.test\n    colour: red\n",
                                 "rules:\n  - host: a.example.test\n    port: 70000\n",
                                 "rules:\n  - id: x\n    host: a.example.test\n"
                                 "  - id: x\n    host: c.example.test\n"]):
            f = tmp_path / f"bad{i}.yaml"
            f.write_text(bad)
            p = airlock.sandbox("policy", sid, str(f))
            assert p.returncode == 125, p
            # one line, naming the file given
            assert p.stderr.startswith(f"airlock: {f}:".encode()) and \
                len(p.stderr.splitlines()) == 1, p.stderr
            assert status(airlock, sid, "a.example.test") == "403"
            assert status(airlock, sid, "b.example.test") == "502"

        # (For scripts, as JSON.)
        p = airlock.sandbox("policy", sid, str(new), "--json", check=True)
        assert json.loads(p.stdout) == {"generation": 3}

        lines = audit(airlock, sid)
        probes = [(l["host"], l["generation"], l["decision"], l["rule"]) for l in lines
                  if l["path"] == "/probe"]
        assert probes[0] == ("a.example.test", 1, "allow", "allow-1"), probes
        assert probes[1] == ("b.example.test", 1, "deny", None), probes
        assert probes[2] == ("a.example.test", 2, "deny", None), probes
        assert probes[3] == ("b.example.test", 2, "allow", "only-b"), probes
        assert all(g == 2 for _, g, _, _ in probes[2:]), probes
    finally:
        airlock.sandbox("destroy", sid, check=True)


def test_policy_control_socket_is_roots(airlock, tmp_path):
    sid = airlock.sandbox("create", "--allow", "a.example.test",
                          check=True).stdout.decode().strip()
    try:
        sock = os.path.join(airlock.state_dir, sid, "gateway.sock")
        st = os.stat(sock)
        assert st.st_uid == 0 and st.st_mode & 0o077 == 0, oct(st.st_mode)
        # Another user cannot even connect.
        code = ("import socket,sys\n"
                "s=socket.socket(socket.AF_UNIX)\n"
                "try:\n s.connect(sys.argv[1]); print('connected')\n"
                "except OSError as e: print(type(e).__name__)\n")
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            "/usr/bin/python3", "-c", code, sock], capture_output=True,
                           timeout=30)
        assert p.stdout.decode().strip() == "PermissionError", p
        # Nor can the sandbox: its root is not the host's, and the socket
        # is not in its mount namespace.
        p = airlock.sandbox("exec", sid, "--", "/usr/bin/python3", "-c", code, sock)
        assert p.stdout.decode().strip() in ("FileNotFoundError", "PermissionError"), p
        # Junk on the socket is refused and the policy stays.
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        s.sendall(b"\xff" * 64)
        s.settimeout(10)
        s.recv(4096)
        s.close()
        assert status(airlock, sid, "a.example.test") == "502"
    finally:
        airlock.sandbox("destroy", sid, check=True)


def test_policy_of_unknown_sandbox(airlock, tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("rules: []\n")
    p = airlock.sandbox("policy", "0123456789abcdef", str(f))
    assert p.returncode == 125 and b"no gateway" in p.stderr, p
    p = airlock.sandbox("policy", "../etc", str(f))
    assert p.returncode == 125, p


# ---------------------------------------------------------------------------
# A whole policy file for a running sandbox, and --allow-cidr: a peer at an
# address the vetting refuses (documentation, 192.0.2.0/24) that an
# operator may open. The sandbox and its gateway run in a network namespace
# of their own ("the host"), the peer in a second one joined to it by a
# veth pair: the peer is not an address of the gateway's host, and the
# machine's own network is left alone.

PEER = "192.0.2.10"
PEER_SERVER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive: the gateway pools the connection
    def do_GET(self):
        body = b"peer says hi\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer((sys.argv[1], 8080), H)
print("ready", flush=True)
s.serve_forever()
"""


class Peer:
    def __init__(self, airlock, host_ns):
        self.airlock = airlock
        self.host_ns = host_ns

    def __call__(self, *args, check=False, timeout=120):
        """airlock ARGS, run in the gateway's host namespace."""
        p = subprocess.run(["nsenter", f"--net=/run/netns/{self.host_ns}", self.airlock.bin,
                            *args], env=self.airlock.env, capture_output=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"airlock {' '.join(args)} exited {p.returncode}\n"
                                 f"stdout: {p.stdout[-2000:]!r}\nstderr: {p.stderr[-2000:]!r}")
        return p

    def curl(self, sid):
        """What the sandbox gets from the peer: status and body."""
        p = self("sandbox", "exec", sid, "--", "curl", "-s", "-m", "20", "-w", "%{http_code}",
                 f"http://{PEER}:8080/x")
        assert p.returncode == 0, p
        out = p.stdout.decode()
        return out[-3:], out[:-3]


@pytest.fixture
def peer(airlock, tmp_path):
    tag = f"{os.getpid()}-{os.path.basename(str(tmp_path))[-6:]}"
    host_ns, peer_ns = f"al-gwh-{tag}", f"al-gwp-{tag}"
    if subprocess.run(["ip", "netns", "add", host_ns], capture_output=True).returncode != 0:
        pytest.skip("cannot make a network namespace here (ip netns add failed)")
    server = None
    try:
        subprocess.run(["ip", "netns", "add", peer_ns], check=True, capture_output=True)
        ip = lambda ns, *a: subprocess.run(["ip", "-n", ns, *a], check=True,
                                           capture_output=True)
        for ns in (host_ns, peer_ns):
            ip(ns, "link", "set", "lo", "up")
        ip(host_ns, "link", "add", "vh", "type", "veth", "peer", "name", "vp", "netns", peer_ns)
        ip(host_ns, "addr", "add", "192.0.2.1/24", "dev", "vh")
        ip(peer_ns, "addr", "add", f"{PEER}/24", "dev", "vp")
        ip(host_ns, "link", "set", "vh", "up")
        ip(peer_ns, "link", "set", "vp", "up")
        srv = tmp_path / "peer.py"
        srv.write_text(PEER_SERVER)
        server = subprocess.Popen(["nsenter", f"--net=/run/netns/{peer_ns}", "python3",
                                   str(srv), PEER], stdout=subprocess.PIPE)
        assert server.stdout.readline().startswith(b"ready")
        yield Peer(airlock, host_ns)
    finally:
        if server:
            server.kill()
            server.wait()
        for ns in (host_ns, peer_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


REFUSED = (f"airlock: {PEER} is a refused address: documentation (rule peer)\n"
           f"airlock: to allow it: --allow-cidr {PEER}/32, or allow_cidrs: [{PEER}/32] in a "
           f"--policy file\n")


def test_policy_file_opens_an_address_for_a_running_sandbox(airlock, peer, tmp_path):
    rules = f"rules:\n  - id: peer\n    host: {PEER}\n    port: 8080\n"
    first = tmp_path / "first.yaml"
    first.write_text(rules + "limits:\n  connections: 64\n")
    sid = peer("sandbox", "create", "--policy", str(first),
               check=True).stdout.decode().strip()
    try:
        # Allowed by a rule, refused by the address vetting: the 403 says
        # what would open it.
        assert peer.curl(sid) == ("403", REFUSED)

        # Files refused whole, each naming the file, the line and the key;
        # the running generation stays.
        cases = [
            (rules + "allow_cidrs: [192.0.2.0/24, 127.0.0.0/8]\n",
             "5: allow_cidrs[1]: 127.0.0.0/8 overlaps loopback, a range that is never opened"),
            (rules + "allow_cidrs: [169.254.169.254]\n",
             "5: allow_cidrs[0]: 169.254.169.254 overlaps link-local (cloud metadata), a "
             "range that is never opened"),
            (rules + "allow_cidrs: [192.0.2.1/24]\n",
             "5: allow_cidrs[0]: expected an address or ADDR/PREFIX"),
            (rules + "allow_cidrs: [192.0.2.0/24]\nlimits:\n  connections: 100\n",
             "7: limits.connections: differs from the running sandbox's, and cannot change: "
             "limits are fixed when its gateway starts (leave them out, or as they were)"),
            (rules + "upstreams:\n  - {host: x.test, port: 80, to: '192.0.2.10:8080'}\n",
             "6: upstreams: differ from the running sandbox's, and cannot change: operator "
             "overrides are fixed when its gateway starts (leave them out, or as they were)"),
            (rules + "allow_cidr: [192.0.2.0/24]\n",
             "5: (top level).allow_cidr: unknown key (expected one of rules, credentials, "
             "upstreams, hosts, allow_cidrs, limits)"),
        ]
        for i, (text, msg) in enumerate(cases):
            f = tmp_path / f"bad{i}.yaml"
            f.write_text(text)
            p = peer("sandbox", "policy", sid, str(f))
            assert (p.returncode, p.stdout, p.stderr.decode()) == (
                125, b"", f"airlock: {f}:{msg}\n"), p
            assert peer.curl(sid) == ("403", REFUSED)

        # The same file as at start, with allow_cidrs and one more rule:
        # the next generation lets the request through.
        opened = tmp_path / "opened.yaml"
        opened.write_text(rules + "  - id: other\n    host: other.test\n"
                          "allow_cidrs: [192.0.2.0/24]\nlimits:\n  connections: 64\n")
        p = peer("sandbox", "policy", sid, str(opened), check=True)
        assert p.stdout == b"policy generation 2\n"
        assert peer.curl(sid) == ("200", "peer says hi\n")

        # A file without allow_cidrs replaces them too: refused again, also
        # on the upstream connection the last request left open.
        p = peer("sandbox", "policy", sid, str(first), check=True)
        assert p.stdout == b"policy generation 3\n"
        assert peer.curl(sid) == ("403", REFUSED)

        # (Repeated identical denials are counted, not written again.)
        lines = [(l["generation"], l["decision"], l.get("status"), l["reason"])
                 for l in audit(airlock, sid) if l.get("host") == PEER]
        assert lines == [
            (1, "deny", 403, f"{PEER} is a refused address: documentation"),
            (2, "allow", 200, "allowed by rule"),
        ], lines
    finally:
        airlock.sandbox("destroy", sid, check=True)


def test_allow_cidr_option(airlock, peer, tmp_path):
    script = f"curl -s -m 20 -w ' %{{http_code}}' http://{PEER}:8080/x"
    p = peer("sandbox", "run", "--allow", f"{PEER}:8080", "--allow-cidr", "192.0.2.0/28",
             "--", "sh", "-c", script)
    assert (p.returncode, p.stdout, p.stderr) == (0, b"peer says hi\n 200", b""), p
    # Without it: refused, with the hint naming the option.
    p = peer("sandbox", "run", "--allow", f"{PEER}:8080", "--", "sh", "-c", script)
    assert p.returncode == 0 and p.stdout.decode() == (
        f"airlock: {PEER} is a refused address: documentation (rule allow-1)\n"
        f"airlock: to allow it: --allow-cidr {PEER}/32, or allow_cidrs: [{PEER}/32] in a "
        f"--policy file\n 403"), p
    # Another range opens nothing here.
    p = peer("sandbox", "run", "--allow", f"{PEER}:8080", "--allow-cidr", "192.0.2.16/28",
             "--", "sh", "-c", script)
    assert p.returncode == 0 and p.stdout.decode().endswith(" 403"), p


def test_allow_cidr_bad_values(airlock, tmp_path):
    cases = [
        ("10.0.0.1/8", "--allow-cidr 10.0.0.1/8: expected an address or ADDR/PREFIX"),
        ("example.test", "--allow-cidr example.test: expected an address or ADDR/PREFIX"),
        ("127.0.0.0/8",
         "--allow-cidr 127.0.0.0/8: overlaps loopback, a range that is never opened"),
        ("169.254.169.254", "--allow-cidr 169.254.169.254: overlaps link-local (cloud "
                            "metadata), a range that is never opened"),
        ("0.0.0.0/0", "--allow-cidr 0.0.0.0/0: overlaps this network, a range that is never "
                      "opened"),
    ]
    for value, msg in cases:
        p = airlock.run("--allow", "a.test", "--allow-cidr", value, "--", "true")
        assert (p.returncode, p.stdout, p.stderr.decode()) == (125, b"", f"airlock: {msg}\n")
    p = airlock.run("--allow-cidr", "", "--", "true")
    assert (p.returncode, p.stderr) == (125, b"airlock: --allow-cidr wants a value\n")
    p = airlock.run("--network", "none", "--allow-cidr", "10.0.0.1", "--", "true")
    assert (p.returncode, p.stderr.decode()) == (
        125, "airlock: --network none leaves nothing for the gateway's options (--allow, "
             "--allow-cidr, --policy, --grant, --upstream, --upstream-ca, --vault, --audit) "
             "to do\n")
    # The standalone gateway: the same check, before it listens.
    p = airlock("gateway", "--listen", "127.0.0.1:9", "--allow", "a.test", "--allow-cidr",
                "::1")
    assert (p.returncode, p.stderr.decode()) == (
        125, "airlock: --allow-cidr ::1: overlaps loopback, a range that is never opened\n")
    # And a policy file's entries at start, as in a running sandbox's.
    f = tmp_path / "p.yaml"
    f.write_text("rules: []\nallow_cidrs: [fe80::/10]\n")
    p = airlock.run("--policy", str(f), "--", "true")
    assert (p.returncode, p.stderr.decode()) == (
        125, f"airlock: {f}:2: allow_cidrs[0]: fe80::/10 overlaps link-local, a range that is "
             f"never opened\n")

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

        p = airlock.sandbox("policy", sid, str(new), check=True)
        assert p.stdout.decode().strip() == "policy generation 3"

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

# SPDX-License-Identifier: Apache-2.0
"""The gateway's limits against a sandbox that holds connections open:
a head that never ends gets 408 and the connection goes, an idle connection
is closed, and neither takes the gateway down for the next client.
Timeouts are short through the policy file's limits: section."""
import json

SLOW = r'''
import socket, sys, time, json
out = {}
# A head that never ends (slowloris): one byte now and then.
s = socket.create_connection(("127.0.0.1", 3128))
t0 = time.monotonic()
s.sendall(b"GET http://a.example.test/ HTTP/1.1\r\n")
s.settimeout(0.2)
data = b""
while time.monotonic() - t0 < 20:
    try:
        chunk = s.recv(4096)
    except socket.timeout:
        try:
            s.sendall(b"X")
        except OSError:
            break
        continue
    if not chunk:
        break
    data += chunk
out["slow_status"] = data.split(b"\r\n", 1)[0].decode(errors="replace")
out["slow_seconds"] = round(time.monotonic() - t0, 1)
# An idle connection: never a byte.
s = socket.create_connection(("127.0.0.1", 3128))
t0 = time.monotonic()
s.settimeout(20)
out["idle_eof"] = s.recv(4096) == b""
out["idle_seconds"] = round(time.monotonic() - t0, 1)
# The gateway still serves.
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET http://b.example.test/ HTTP/1.1\r\nHost: b.example.test\r\nConnection: close\r\n\r\n")
s.settimeout(20)
out["after"] = s.recv(4096).split(b"\r\n", 1)[0].decode()
print(json.dumps(out))
'''


def test_head_deadline_and_idle_timeout(airlock, tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - host: a.example.test\n"
                      "limits:\n  head_timeout: 1s\n  idle_timeout: 2s\n")
    p = airlock.run("--policy", str(policy), "--", "/usr/bin/python3", "-c", SLOW, timeout=60)
    assert p.returncode == 0, p
    out = json.loads(p.stdout.decode().splitlines()[-1])
    assert out["slow_status"] == "HTTP/1.1 408 Request Timeout", out
    assert 0.9 <= out["slow_seconds"] < 5, out
    assert out["idle_eof"] and 1.9 <= out["idle_seconds"] < 6, out
    assert out["after"] == "HTTP/1.1 403 Forbidden", out


def test_limits_are_checked(airlock, tmp_path):
    for bad in ("limits:\n  head_timeout: 1ms\n", "limits:\n  head_timeout: forever\n",
                "limits:\n  colour: red\n", "limits: 5\n"):
        policy = tmp_path / "p.yaml"
        policy.write_text("rules: []\n" + bad)
        p = airlock.run("--policy", str(policy), "--", "true")
        assert p.returncode == 125 and b"limits" in p.stderr, (bad, p)
        assert len(p.stderr.splitlines()) == 1, p.stderr

# SPDX-License-Identifier: Apache-2.0
"""The egress budget (`airlock sandbox budget ID --requests N --bytes SIZE`):
a sandbox's client tries to pass it, with more requests, a large download
and large uploads, plain and inside an intercepted TLS tunnel and a
WebSocket, and the gateway refuses or cuts it, counts exactly, audits, and
lets requests through again once root sets a new budget.

The plain upstream here counts every byte it receives and sends, so the
counts the gateway reports (what the previous budget spent) are checked
against the upstream's own.
"""
import json
import re
import socket
import threading

import pytest

from upstream import Upstreams

HOST = "budget.example.test"

# The sandbox's client: one request per connection through the proxy; prints
# one JSON line per request (status, body bytes received, the reason).
CLIENT = r"""
import json, socket, sys
def one(method, path, body_len=0, chunked=False):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    head = f"{method} http://HOST{path} HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n"
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    elif body_len:
        head += f"Content-Length: {body_len}\r\n"
    s.sendall((head + "\r\n").encode())
    sent = 0
    try:
        while sent < body_len:
            n = min(8192, body_len - sent)
            s.sendall((b"%x\r\n" % n + b"u" * n + b"\r\n") if chunked else b"u" * n)
            sent += n
        if chunked:
            s.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except OSError:
        pass
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
    reason = [l.split(b": ", 1)[1].decode() for l in head.split(b"\r\n")
              if l.lower().startswith(b"x-airlock-reason: ")]
    print(json.dumps({"status": status, "body": len(body), "text": body[:200].decode("latin-1"),
                      "reason": reason[0] if reason else None}), flush=True)
for spec in sys.argv[1:]:
    method, path, n, chunked = spec.split(",")
    one(method, path, int(n), chunked == "c")
""".replace("HOST", HOST)


class Counting:
    """A plain HTTP/1.1 upstream on the host's loopback that counts the
    bytes it receives and sends. GET /small: "ok"; GET /big?n=N: N bytes;
    POST /upload: reads the body (Content-Length or chunked)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rx = self.tx = 0
        self.requests = 0
        self.head_tx = []  # the response heads sent, in order
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _recv(self, c):
        b = c.recv(65536)
        with self.lock:
            self.rx += len(b)
        return b

    def _send(self, c, data):
        n = 0
        try:
            while n < len(data):
                k = c.send(data[n:n + 65536])
                with self.lock:
                    self.tx += k
                n += k
        except OSError:
            return False
        return True

    def _serve(self, c):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    b = self._recv(c)
                    if not b:
                        return
                    buf += b
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, target, _ = lines[0].split(" ")
                fields = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip()
                          for l in lines[1:]}
                with self.lock:
                    self.requests += 1
                got = 0
                if "content-length" in fields:
                    want = int(fields["content-length"])
                    while len(buf) < want:
                        b = self._recv(c)
                        if not b:
                            return
                        buf += b
                    got, buf = want, buf[want:]
                elif fields.get("transfer-encoding") == "chunked":
                    while not buf.endswith(b"0\r\n\r\n"):
                        b = self._recv(c)
                        if not b:
                            return
                        buf += b
                    got, buf = len(buf), b""
                if target.startswith("/big"):
                    body = b"d" * int(target.split("n=")[1])
                elif target.startswith("/upload"):
                    body = b"got %d" % got
                else:
                    body = b"ok"
                h = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
                with self.lock:
                    self.head_tx.append(len(h))
                if not self._send(c, h + body):
                    return
        except OSError:
            return
        finally:
            c.close()

    def counts(self):
        with self.lock:
            return self.requests, self.rx, self.tx

    def close(self):
        # shutdown wakes the thread in accept(); a close alone would not,
        # and it would then accept on whatever socket reuses the number.
        self.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def counting():
    u = Counting()
    yield u
    u.close()


@pytest.fixture
def sandbox(airlock, counting):
    sid = airlock.sandbox("create", "--allow", HOST,
                          "--upstream", f"{HOST}:80=127.0.0.1:{counting.port}",
                          check=True).stdout.decode().strip()
    yield sid
    airlock.sandbox("destroy", sid, check=True)


def budget(airlock, sid, *args, as_json=False):
    """Sets a budget; returns what the previous one spent (requests, bytes)."""
    if as_json:
        p = airlock.sandbox("budget", sid, *args, "--json", check=True)
        prev = json.loads(p.stdout)["previous"]
        return prev["requests"], prev["bytes"]
    p = airlock.sandbox("budget", sid, *args, check=True)
    m = re.fullmatch(r"budget set; the previous one spent (\d+) requests, (\d+) bytes",
                     p.stdout.decode().strip())
    assert m, p.stdout
    return int(m.group(1)), int(m.group(2))


def client(airlock, sid, *specs):
    p = airlock.sandbox("exec", sid, "--", "/usr/bin/python3", "-c", CLIENT, *specs,
                        timeout=120)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    return [json.loads(l) for l in p.stdout.decode().splitlines()]


def audit(airlock, sid):
    p = airlock.sandbox("audit", sid, check=True)
    return [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]


def test_budget_requests(airlock, sandbox, counting):
    sid = sandbox
    assert budget(airlock, sid, "--requests", "3") == (0, 0)
    out = client(airlock, sid, *["GET,/small,0,"] * 5)
    assert [o["status"] for o in out] == [200, 200, 200, 403, 403], out
    spent = "the turn's egress budget of 3 requests is spent"
    assert out[3]["reason"] == spent and spent in out[3]["text"], out
    # Exactly three went out, and the bytes reported are the upstream's own.
    reqs, rx, tx = counting.counts()
    assert reqs == 3
    assert budget(airlock, sid, "--requests", "2") == (3, rx + tx)

    # A new budget lets requests through again, to its own limit.
    out = client(airlock, sid, *["GET,/small,0,"] * 3)
    assert [o["status"] for o in out] == [200, 200, 403], out
    assert counting.counts()[0] == 5
    r2, rx2, tx2 = counting.counts()
    assert budget(airlock, sid, as_json=True) == (2, rx2 + tx2 - rx - tx)
    # Unlimited now.
    out = client(airlock, sid, *["GET,/small,0,"] * 4)
    assert [o["status"] for o in out] == [200] * 4, out

    lines = [l for l in audit(airlock, sid) if l["kind"] == "budget"]
    # The first refusal of each budget is written; the same again is counted.
    assert [(l["decision"], l["status"], l["reason"], l["path"]) for l in lines
            if "repeated" not in l] == [
        ("deny", 403, spent, "/small"),
        ("deny", 403, "the turn's egress budget of 2 requests is spent", "/small")], lines
    allowed = [l for l in audit(airlock, sid) if l["kind"] == "http" and l["status"] == 200]
    assert len(allowed) == 9


def test_budget_bytes_download(airlock, sandbox, counting):
    sid = sandbox
    budget(airlock, sid, "--bytes", "100000")
    out = client(airlock, sid, "GET,/big?n=1000000,0,", "GET,/small,0,")
    # The download is cut: the head and what fits in the budget, then the end.
    assert out[0]["status"] == 200 and out[0]["body"] < 1000000, out
    assert out[1]["status"] == 403, out
    assert out[1]["reason"] == "the turn's egress budget of 100000 bytes is spent", out
    reqs, rx, tx = counting.counts()
    assert reqs == 1 and tx > 100000
    # The budget is spent to the byte: the request's head as the upstream
    # got it, the response head as it sent it, and the body the client got.
    assert budget(airlock, sid, "--bytes", "0") == (1, 100000)
    assert out[0]["body"] == 100000 - rx - counting.head_tx[0]

    out = client(airlock, sid, "GET,/small,0,")
    assert out[0]["status"] == 200, out
    lines = [l for l in audit(airlock, sid) if l["kind"] == "budget"]
    assert [(l["decision"], l["status"], l["path"], l["reason"]) for l in lines] == [
        ("deny", 200, "/big",
         "the turn's egress budget of 100000 bytes is spent: cut mid-transfer"),
        ("deny", 403, "/small", "the turn's egress budget of 100000 bytes is spent")], lines


def test_budget_bytes_upload(airlock, sandbox, counting):
    sid = sandbox
    budget(airlock, sid, "--bytes", "50000")
    out = client(airlock, sid, "POST,/upload,1000000,", "POST,/upload,10,")
    # Cut before any response came: no 200, and the upstream never got it all.
    assert out[0]["status"] in (0, 403), out
    assert out[1]["status"] == 403, out
    reqs, rx, _ = counting.counts()
    assert reqs == 1 and rx <= 50000
    assert budget(airlock, sid, "--bytes", "40000") == (1, 50000)

    # Chunked: the gateway frames it again, and stops within 32 bytes of
    # the budget (it never passes it).
    out = client(airlock, sid, "POST,/upload,1000000,c")
    assert out[0]["status"] in (0, 403), out
    n, used = budget(airlock, sid, "--bytes", "0")
    assert n == 1 and 40000 - 32 <= used <= 40000, used
    assert counting.counts()[1] - rx <= 40000

    # Small uploads go again.
    out = client(airlock, sid, "POST,/upload,10,", "POST,/upload,100000,c")
    assert [o["status"] for o in out] == [200, 200], out
    assert out[0]["text"] == "got 10"
    lines = [l for l in audit(airlock, sid) if l["kind"] == "budget" and "repeated" not in l]
    assert [(l["status"], l["method"], l["reason"]) for l in lines] == [
        (403, "POST", "the turn's egress budget of 50000 bytes is spent"),
        (403, "POST", "the turn's egress budget of 40000 bytes is spent")], lines


# ---- inside an intercepted TLS tunnel, and a WebSocket ----

TLS_CLIENT = r"""
import socket, ssl, sys
sys.path.insert(0, "/workspace")
from wsframe import ws_frame, read_ws_frame
def tunnel():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(1)
    assert buf.startswith(b"HTTP/1.1 200"), buf
    s = ssl.create_default_context().wrap_socket(s, server_hostname="api.example.test")
    return s, s.makefile("rb")
def head(f):
    status = f.readline().decode().split(" ")[1]
    n = 0
    while True:
        l = f.readline()
        if l in (b"\r\n", b""):
            return status, n
        if l.lower().startswith(b"content-length:"):
            n = int(l.split(b":")[1])
mode = sys.argv[1]
s, f = tunnel()
if mode == "requests":
    # Three requests on one kept-alive tunnel.
    for i in range(3):
        s.sendall(b"GET /echo HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
        status, n = head(f)
        f.read(n)
        print("STATUS", status, flush=True)
else:
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              b"Sec-WebSocket-Version: 13\r\n\r\n")
    print("STATUS", head(f)[0], flush=True)
    s.sendall(ws_frame(1, b"hello"))
    print("FRAME", read_ws_frame(f), flush=True)
    try:
        s.sendall(ws_frame(2, b"x" * 200000))
        print("FRAME", read_ws_frame(f), flush=True)
    except (OSError, ssl.SSLError) as e:
        print("CUT", type(e).__name__, flush=True)
"""


@pytest.fixture(scope="module")
def ups(tmp_path_factory):
    u = Upstreams(tmp_path_factory.mktemp("upstreams"), "ghp_budgettoken0123456789")
    yield u
    u.close()


def test_budget_tls_tunnel_and_websocket(airlock, ups, workspace):
    import os
    from conftest import put
    put(workspace, "wsframe.py", open(os.path.join(os.path.dirname(__file__),
                                                   "upstream.py")).read())
    put(workspace, "tls.py", TLS_CLIENT, 0o755)
    sid = airlock.sandbox("create", "--allow", "api.example.test", "--workspace", str(workspace),
                          *ups.args(("api.example.test",)), check=True).stdout.decode().strip()
    try:
        def run(mode):
            p = airlock.sandbox("exec", sid, "--", "/usr/bin/python3", "/workspace/tls.py",
                                mode, timeout=60)
            return p.stdout.decode()

        # Each request inside the tunnel counts (the CONNECT itself is
        # answered by the gateway and does not).
        budget(airlock, sid, "--requests", "2")
        out = run("requests")
        assert out.split("\n")[:3] == ["STATUS 200", "STATUS 200", "STATUS 403"], out
        n, _ = budget(airlock, sid, "--requests", "1")
        assert n == 2

        # A WebSocket's upgrade is one request; its frames count as bytes.
        out = run("ws")
        assert "STATUS 101" in out and "FRAME (1, b'echo:hello')" in out, out
        n, used = budget(airlock, sid, "--bytes", "1000")
        assert n == 1 and used > 200000, used

        # With 1000 bytes the upgrade goes, and the large frame is cut.
        out = run("ws")
        assert "STATUS 101" in out, out
        assert "FRAME (2," not in out, out
        n, used = budget(airlock, sid)
        assert n == 1 and used == 1000, used
        lines = [l for l in audit(airlock, sid) if l["kind"] == "budget"]
        assert [(l["status"], l["path"]) for l in lines if "repeated" not in l] == [
            (403, "/echo"), (101, "/ws")], lines
        assert lines[-1]["reason"].endswith("1000 bytes is spent: cut mid-transfer")
    finally:
        airlock.sandbox("destroy", sid, check=True)

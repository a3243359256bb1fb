# SPDX-License-Identifier: Apache-2.0
"""Attacks on the gateway from inside a real sandbox against real upstreams
(Node's http server among them): desynchronising a kept-alive upstream
connection, flooding the gateway's memory, hiding the secret where the
redactor might not look, undecided protocols after an upgrade, GitHub work
that is administration by another name, and cloud host addresses. Each test
performs the attack and asserts what must hold: nothing undecided goes out
with a credential, nothing of a secret comes back, the gateway stays within
its bounds.
"""
import base64
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest

from conftest import gateway_rss_kib, put
from upstream import make_certs

SECRET = "sk-attack-" + secrets.token_hex(16)


def no_secret(data, where):
    if isinstance(data, bytes):
        data = data.decode("latin-1")
    assert SECRET not in data, f"the secret appeared in {where}"
    assert base64.b64encode(SECRET.encode()).decode() not in data, f"base64 secret in {where}"


def sanitizer_clean(err):
    """No report of AddressSanitizer or UBSan from airlock or its gateway."""
    err = err.decode(errors="replace") if isinstance(err, bytes) else err
    for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Assertion"):
        assert bad not in err, err[-3000:]


def write_vault(d):
    vault = d / "vault.yaml"
    fd = os.open(vault, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f'secrets:\n  key: "{SECRET}"\n')
    return vault


# ---------------------------------------------------------------------------
# An upstream written with Node's own http module (the server most APIs and
# echo services in the wild run on): it answers a request it refuses at once,
# before its body came (an auth middleware's 401), keeps the connection alive
# and discards the body when it comes, as Node does for any unread body.

NODE_SERVER = r"""
const https = require('https'), fs = require('fs');
const [cert, key, log] = process.argv.slice(2);
const s = https.createServer({cert: fs.readFileSync(cert), key: fs.readFileSync(key)},
  (req, res) => {
    fs.appendFileSync(log, JSON.stringify({method: req.method, url: req.url,
                                          headers: req.headers}) + '\n');
    if (req.url.startsWith('/early')) {
      res.writeHead(401, {'content-type': 'text/plain'});
      res.end('unauthorized\n');
      return;
    }
    let body = '';
    req.on('data', d => body += d);
    req.on('end', () => {
      res.writeHead(200, {'content-type': 'application/json'});
      res.end(JSON.stringify({method: req.method, url: req.url, headers: req.headers,
                              body}) + '\n');
    });
  });
s.keepAliveTimeout = 20000;
s.listen(0, '127.0.0.1', () => console.log(s.address().port));
"""


@pytest.fixture(scope="module")
def node_upstream(tmp_path_factory):
    if not shutil.which("node"):
        pytest.skip("node is not installed on this machine")
    d = tmp_path_factory.mktemp("nodeup")
    ca, cert, key = make_certs(d / "certs")
    (d / "srv.js").write_text(NODE_SERVER)
    log = d / "requests.jsonl"
    log.write_text("")
    p = subprocess.Popen(["node", str(d / "srv.js"), cert, key, str(log)],
                         stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline())
    yield {"ca": ca, "port": port, "log": log}
    p.terminate()
    p.wait(timeout=10)


def node_requests(up):
    return [json.loads(l) for l in up["log"].read_text().splitlines() if l.strip()]


# What the sandbox-side scripts share: a CONNECT tunnel to the test host
# through the gateway's proxy, verified TLS inside it, and reading to the end.
CLIENT_PRELUDE = r"""
import socket, ssl, sys, time
HOST = "api.example.test"

def tunnel():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
    s.sendall(f"CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(1)
    assert buf.startswith(b"HTTP/1.1 200"), buf
    return ssl.create_default_context().wrap_socket(s, server_hostname=HOST)

def read_all(s, until=None):
    out = b""
    try:
        while until is None or until not in out:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError:
        pass
    return out
"""


SMUGGLE_CLIENT = CLIENT_PRELUDE + r"""
# What the gateway will write upstream for the second request, up to the
# value of X-Pad: it writes the head itself, in a fixed order.
prefix = f"GET /v1/echo HTTP/1.1\r\nHost: {HOST}\r\nX-Pad: ".encode()
smuggled = sys.argv[1]  # e.g. "GET /admin/delete HTTP/1.0"

# 1. A request whose response comes before its body: the gateway ends the
#    client connection, and the upstream connection goes to the pool although
#    the upstream still waits for len(prefix) bytes of body.
a = tunnel()
a.sendall(f"POST /early HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {len(prefix)}\r\n\r\n".encode())
print("A", read_all(a).split(b"\r\n", 1)[0].decode())

# 2. A credentialed request on another connection takes the pooled upstream
#    connection: its head's first len(prefix) bytes are eaten as the earlier
#    body, and the rest, the credential included, is read as a request the
#    gateway never decided on.
b = tunnel()
b.sendall(f"GET /v1/echo HTTP/1.1\r\nHost: {HOST}\r\nX-Pad: {smuggled}\r\n"
          f"x-api-key: dummy\r\nConnection: close\r\n\r\n".encode())
print("B", read_all(b).decode(errors="replace"))
"""


def test_early_response_does_not_pool_a_connection_owed_a_body(airlock, workspace, tmp_path,
                                                                 node_upstream):
    """An upstream (Node here) that answers before a request's body came
    and keeps the connection alive still waits for that body. Were the
    connection pooled, the next request of the sandbox to that host,
    decided and credentialed by the gateway, would have the start of its
    head eaten as that body and the rest read as a request of the
    sandbox's choosing carrying the credential. It must not be: no request
    a deny rule names reaches the upstream, the credential goes only with
    requests under its paths, and nothing of it reaches the sandbox."""
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "rules:\n"
        "  - id: api\n    host: api.example.test\n"
        "  - id: no-admin\n    action: deny\n    host: api.example.test\n    paths: [/admin]\n"
        "credentials:\n"
        "  - secret: key\n    host: api.example.test\n    paths: [/v1/]\n"
        "    header: x-api-key\n    env: API_KEY\n")
    vault = write_vault(tmp_path)
    audit = tmp_path / "audit.jsonl"
    put(workspace, "smuggle.py", SMUGGLE_CLIENT, 0o755)
    p = airlock.run("--policy", str(policy), "--vault", str(vault), "--audit", str(audit),
                    "--upstream", f"api.example.test:443=127.0.0.1:{node_upstream['port']}",
                    "--upstream-ca", node_upstream["ca"], "--workspace", str(workspace),
                    "--", "/usr/bin/python3", "/workspace/smuggle.py",
                    "GET /admin/delete HTTP/1.0", timeout=60)
    sanitizer_clean(p.stderr)
    out = p.stdout.decode(errors="replace")
    no_secret(p.stdout, "the sandbox's output")
    no_secret(audit.read_bytes(), "the audit log")
    print(out)
    seen = node_requests(node_upstream)
    admin = [r for r in seen if r["url"].startswith("/admin")]
    # What must hold: no request the policy denies reaches the upstream, and
    # the credential goes only with requests under its paths.
    assert admin == [], f"the upstream got a request the policy denies: {admin}"
    for r in seen:
        if r["headers"].get("x-api-key") == SECRET:
            assert r["url"].startswith("/v1/"), f"the credential went with {r['url']}"


LEAK_CLIENT = CLIENT_PRELUDE + r"""
# Raw requests the upstream will read out of B's body: the gateway passes a
# body on as bytes, so these are whatever the sandbox writes.
q = (f"GET /q1 HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
     f"GET /q2 HTTP/1.1\r\nHost: {HOST}\r\n\r\n").encode()
# B's head as the gateway writes it upstream (its own Host and Content-Length).
b_head = f"POST /b HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {len(q)}\r\n\r\n".encode()

# 1. A: answered before its body; its upstream connection goes to the pool
#    while the upstream still waits for len(b_head) bytes of body.
a = tunnel()
a.sendall(f"POST /early HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {len(b_head)}\r\n\r\n".encode())
print("A", read_all(a).split(b"\r\n", 1)[0].decode())

# 2. On one connection, pipelined: B (its head eaten as A's body, its body
#    read as two requests), C with the credential, D without one. The
#    upstream answers q1, q2, C, D; the gateway gives q1 to B, q2 to C, and
#    C's answer, the echo of its credential, to D, which is not redacted.
b = tunnel()
b.sendall(f"POST /b HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {len(q)}\r\n\r\n".encode() + q +
          f"GET /v1/echo HTTP/1.1\r\nHost: {HOST}\r\nx-api-key: dummy\r\n\r\n".encode() +
          f"GET /public HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
print("BCD", read_all(b).decode(errors="replace"))
"""


def test_out_of_step_upstream_never_answers_an_uncredentialed_request(
        airlock, workspace, tmp_path, node_upstream):
    """The same attack with pipelined requests on one connection: had the
    upstream connection got out of step (it answers one request more than
    the gateway sent), the echo of a credentialed request would be read as
    the response to the next, uncredentialed one, which is not redacted.
    A connection that carried a credential serves only credentialed
    requests, and bytes no request asked for end it: the secret never
    reaches the sandbox."""
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "rules:\n"
        "  - id: api\n    host: api.example.test\n"
        "credentials:\n"
        "  - secret: key\n    host: api.example.test\n    paths: [/v1/]\n"
        "    header: x-api-key\n    env: API_KEY\n")
    vault = write_vault(tmp_path)
    put(workspace, "leak.py", LEAK_CLIENT, 0o755)
    p = airlock.run("--policy", str(policy), "--vault", str(vault),
                    "--upstream", f"api.example.test:443=127.0.0.1:{node_upstream['port']}",
                    "--upstream-ca", node_upstream["ca"], "--workspace", str(workspace),
                    "--", "/usr/bin/python3", "/workspace/leak.py", timeout=60)
    sanitizer_clean(p.stderr)
    print(p.stdout.decode(errors="replace"))
    no_secret(p.stdout, "the sandbox's output")


def run_with_key_upstream(airlock, workspace, tmp_path, serve, script, *args, paths=""):
    """Runs script (python, in the sandbox) against a hostile TLS upstream,
    api.example.test, whose requests carry the key as x-api-key."""
    up = TLSRawUpstream(serve, tmp_path / "certs")
    try:
        policy = tmp_path / "p.yaml"
        policy.write_text("rules:\n  - host: api.example.test\n"
                          "credentials:\n  - secret: key\n    host: api.example.test\n"
                          f"{paths}    header: x-api-key\n")
        vault = write_vault(tmp_path)
        put(workspace, "client.py", script, 0o755)
        p = airlock.run("--policy", str(policy), "--vault", str(vault),
                        "--upstream", f"api.example.test:443=127.0.0.1:{up.port}",
                        "--upstream-ca", up.ca, "--workspace", str(workspace),
                        "--", "/usr/bin/python3", "/workspace/client.py", *args, timeout=60)
        sanitizer_clean(p.stderr)
    finally:
        up.close()
    return p


def run_with_plain_upstream(airlock, workspace, tmp_path, up, host, policy_text, script):
    """Runs script (python, in the sandbox) with host:80 routed to the plain
    upstream up under policy_text; closes up."""
    try:
        policy = tmp_path / "p.yaml"
        policy.write_text(policy_text)
        put(workspace, "client.py", script, 0o755)
        p = airlock.run("--policy", str(policy),
                        "--upstream", f"{host}:80=127.0.0.1:{up.port}",
                        "--workspace", str(workspace),
                        "--", "/usr/bin/python3", "/workspace/client.py", timeout=60)
        sanitizer_clean(p.stderr)
    finally:
        up.close()
    return p


def answer_late_twice(up, c):
    """A hostile upstream: it answers a credentialed request, keeps the
    connection, and once the next request on it has come answers that one
    with the echo of the earlier credential (the gateway cannot tell an
    upstream out of step from one that answers what was asked)."""
    key = b""
    while True:
        try:
            head = read_head(c)
        except OSError:
            return
        this = key_of(head).encode()
        if key:
            body = b"echo of the last request's key: " + key
        else:
            body = b"ok"
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        key = this or key


LATE_CLIENT = r"""
import http.client, ssl
c = http.client.HTTPSConnection("127.0.0.1", 3128, context=ssl.create_default_context(), timeout=10)
c.set_tunnel("api.example.test", 443)
for path, hdrs in (("/v1/one", {"x-api-key": "dummy"}), ("/public", {}), ("/public", {})):
    c.request("GET", path, headers=hdrs)
    r = c.getresponse()
    print(r.status, r.read().decode(errors="replace"))
"""


def test_credentialed_connection_never_serves_an_uncredentialed_request(airlock, workspace,
                                                                       tmp_path):
    """An upstream that answers each request with the echo of the key the
    previous request on that connection carried: had the connection that
    carried the credential gone on to serve an uncredentialed request (whose
    response is not redacted), the key would reach the sandbox. It serves
    only credentialed requests; the next ones get a connection of their
    own."""
    p = run_with_key_upstream(airlock, workspace, tmp_path, answer_late_twice, LATE_CLIENT, paths="    paths: [/v1/]\n")
    out = p.stdout.decode(errors="replace")
    print(out)
    assert out.count("200 ") == 3, (out, p.stderr.decode()[-2000:])
    no_secret(p.stdout, "the sandbox's output")


# ---------------------------------------------------------------------------
# What a sandbox makes the gateway hold.

class RawUpstream:
    """A plain TCP upstream on the host's loopback whose answer to each
    connection is `serve(sock)`, run in a thread per connection.

    close() stops every thread before it closes a socket. When it closed
    them first, a later test's git clone through the gateway hung about one
    run in five on a busy machine: a thread dump at the hang showed this
    upstream's handler (of an earlier test) reading git's TLS ClientHello
    from the later test's upstream connection, whose own server never saw
    it: a thread of this class had gone on with a descriptor number that
    the other server's socket had taken meanwhile."""

    def __init__(self, serve):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.serve = serve
        self.sent = 0
        self.lock = threading.Lock()
        self.stop = False
        self.conns = {}  # thread -> the socket it serves (kept open until close)
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._one, args=(c,), daemon=True)
            with self.lock:
                if self.stop:
                    c.close()
                    return
                self.conns[t] = c
            t.start()

    def keep(self, c):
        """Makes c (a socket wrapping the accepted one) the one close() stops."""
        with self.lock:
            if self.stop:
                raise OSError("the test upstream is closing")
            self.conns[threading.current_thread()] = c

    def _one(self, c):
        try:
            self.serve(self, c)
        except OSError:
            pass

    def close(self):
        self.stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        self.acceptor.join(10)
        assert not self.acceptor.is_alive(), "a test upstream's accept thread did not stop"
        with self.lock:
            conns = dict(self.conns)
        for c in conns.values():
            try:
                c.shutdown(socket.SHUT_RDWR)  # wakes recv() and send()
            except OSError:
                pass
        for t in conns:
            t.join(10)
            assert not t.is_alive(), "a test upstream's connection thread did not stop"
        self.sock.close()
        with self.lock:  # as they are now: keep() may have replaced some
            for c in self.conns.values():
                c.close()


def read_head(c):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = c.recv(4096)
        if not d:
            raise OSError("closed")
        buf += d
    return buf


def asan_build(airlock):
    return b"__asan_init" in open(airlock.bin, "rb").read()


HOLD_UNREAD = r"""
import os, socket, sys, time
n, extra = int(sys.argv[1]), int(sys.argv[2])
held = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"GET http://flood.example.test/ HTTP/1.1\r\nHost: flood.example.test\r\n\r\n")
    s.setblocking(False)
    sent = 0
    # Bytes of a "next request": the gateway reads them while it waits.
    t0 = time.monotonic()
    while sent < extra and time.monotonic() - t0 < 2:
        try:
            sent += s.send(b"X" * min(65536, extra - sent))
        except BlockingIOError:
            time.sleep(0.01)
    held.append(s)
open("/workspace/holding.tmp", "w").write(str(len(held)))
os.rename("/workspace/holding.tmp", "/workspace/holding")
while not os.path.exists("/workspace/release"):
    time.sleep(0.05)
"""


def hold_and_measure(airlock, workspace, tmp_path, up, n, extra, settle):
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - host: flood.example.test\n")
    put(workspace, "hold.py", HOLD_UNREAD, 0o755)
    args = [airlock.bin, "sandbox", "run", "--policy", str(policy),
            "--upstream", f"flood.example.test:80=127.0.0.1:{up.port}",
            "--memory", "64M", "--workspace", str(workspace), "--",
            "/usr/bin/python3", "/workspace/hold.py", str(n), str(extra)]
    p = subprocess.Popen(args, env=airlock.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        holding = workspace / "holding"
        deadline = time.monotonic() + 120
        while not holding.exists():
            assert p.poll() is None, p.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the sandbox never held its connections"
            time.sleep(0.1)
        rss = settle(p.pid)
    finally:
        (workspace / "release").touch()
        _, err = p.communicate(timeout=60)
    sanitizer_clean(err)
    return rss


def test_interim_responses_are_bounded(airlock, workspace, tmp_path):
    """An upstream (any public host under --network open, or an allowed
    one) that sends "100 Continue" heads without end to a client that does
    not read: each head queued for the client counts against the budget,
    and past a few the request is answered with 502, so one connection
    cannot make the gateway hold what the upstream sends."""
    if asan_build(airlock):
        pytest.skip("built with AddressSanitizer: the gateway's memory is not measured")
    limit = 512 << 20

    def flood(up, c):
        read_head(c)
        chunk = b"HTTP/1.1 100 Continue\r\n\r\n" * 2600  # ~64 KiB
        c.settimeout(5)
        while up.sent < limit:
            try:
                c.sendall(chunk)
            except socket.timeout:
                return  # the gateway stopped reading: backpressure works
            with up.lock:
                up.sent += len(chunk)

    up = RawUpstream(flood)
    try:
        def settle(pid):
            # Until the upstream is blocked or has sent all; then measure.
            last, t_last = -1, time.monotonic()
            while time.monotonic() - t_last < 6 and up.sent < limit:
                if up.sent != last:
                    last, t_last = up.sent, time.monotonic()
                time.sleep(0.2)
            return gateway_rss_kib(pid)
        rss = hold_and_measure(airlock, workspace, tmp_path, up, 1, 0, settle)
    finally:
        up.close()
    print(f"upstream sent {up.sent >> 20} MiB of interim heads; gateway RSS {rss >> 10} MiB")
    assert rss < 64 * 1024, f"the gateway holds {rss >> 10} MiB for one connection of a 64 MiB sandbox"


def test_pipelined_bytes_are_bounded(airlock, workspace, tmp_path):
    """500 connections of a 64 MiB sandbox, each with a request waiting for
    its response and 300 KiB of "next request" behind it: the gateway reads
    ahead only a little while a request waits, and what its input buffers
    hold counts against the sandbox's budget (limits.buffers) like its
    output buffers."""
    if asan_build(airlock):
        pytest.skip("built with AddressSanitizer: the gateway's memory is not measured")

    def hang(up, c):
        read_head(c)
        while not up.stop:  # never answers
            time.sleep(0.5)

    up = RawUpstream(hang)
    try:
        def settle(pid):
            prev = 0
            for _ in range(50):  # until it stops growing
                time.sleep(0.2)
                cur = gateway_rss_kib(pid)
                if prev and cur - prev < 1024:
                    break
                prev = cur
            return gateway_rss_kib(pid)
        rss = hold_and_measure(airlock, workspace, tmp_path, up, 500, 300 * 1024, settle)
    finally:
        up.close()
    print(f"gateway RSS with 500 connections holding pipelined bytes: {rss >> 10} MiB")
    assert rss < 64 * 1024, f"the gateway holds {rss >> 10} MiB for a 64 MiB sandbox"


# ---------------------------------------------------------------------------
# A plain GitHub grant ("work") and what only github-admin: reaches
# (deletion, merging, approving, secrets).

from test_gateway import OWNER as GH_OWNER, REPO as GH_REPO, SECRET_GH, gw, gwfiles, header, ups  # noqa: E402,F401
from test_gateway_forms import gh_calls  # noqa: E402

GH_GAPS = [
    # Merging by another name: the base branch moved to the pull request's head.
    ("PATCH", f"/repos/{GH_OWNER}/{GH_REPO}/git/refs/heads/main"),
    # Deleting the default branch.
    ("DELETE", f"/repos/{GH_OWNER}/{GH_REPO}/git/refs/heads/main"),
    # Approving a pull request (what branch protection's required reviews count)
    # and dismissing a blocking review.
    ("POST", f"/repos/{GH_OWNER}/{GH_REPO}/pulls/1/reviews"),
    ("PUT", f"/repos/{GH_OWNER}/{GH_REPO}/pulls/1/reviews/1/dismissals"),
    # The merge endpoint in another case: the table compares case-sensitively,
    # the policy's deny rules do not (an upstream may not tell them apart).
    ("PUT", f"/repos/{GH_OWNER}/{GH_REPO}/pulls/1/MERGE"),
    # The organization's Actions variables (their values) and secrets (names).
    ("GET", f"/repos/{GH_OWNER}/{GH_REPO}/actions/organization-variables"),
    ("GET", f"/repos/{GH_OWNER}/{GH_REPO}/actions/organization-secrets"),
]


@pytest.mark.parametrize("method,path", GH_GAPS, ids=[f"{m} {p.split('/', 4)[-1]}" for m, p in GH_GAPS])
def test_github_plain_grant_stops_at_administration(gw, ups, method, path):
    """Each of these merges, moves or deletes a branch, approves, or reads
    secrets-adjacent configuration: under a plain github: grant the gateway
    answers 403 and sends nothing, in any case of the path. (Whether GitHub
    itself routes an upper-case spelling is not checked here: this host has
    no route to GitHub.)"""
    ((status, r),) = gh_calls(gw, [(method, path)])
    recs = ups.records.with_rid(r)
    went = [rec for rec in recs if header(rec, "authorization") == [f"Bearer {SECRET_GH}"]]
    assert status == "403" and went == [], f"{method} {path}: {status}, sent with the token"


PUSH_SCRIPT = r"""
set -u
export GIT_TERMINAL_PROMPT=0 HOME=/tmp GIT_TRACE_CURL=/workspace/trace-{tag}.log GIT_TRACE_CURL_NO_DATA=1
git config --global user.email t@t && git config --global user.name t
cd /tmp && timeout 60 git clone -q https://github.com/{owner}/{repo}.git w && cd w || {{ echo "CLONE FAILED $?"; exit 9; }}
echo {tag} > pushed-{tag}.txt && git add pushed-{tag}.txt && git commit -qm "push {tag}"
try() {{ if git "$@" >/tmp/out 2>&1; then echo "OK $*"; else echo "NO $*"; sed 's/^/  /' /tmp/out; fi; }}
try push origin HEAD:refs/heads/airlock/{tag}
try -c http.postBuffer=1024 push origin HEAD:refs/heads/airlock/{tag}-chunked
try push origin HEAD:main
try push origin HEAD:refs/heads/release-{tag}
try tag v-{tag} && try push origin v-{tag}
try push origin HEAD:refs/heads/airlock/{tag}-2 HEAD:main
try push origin :refs/heads/airlock/{tag}
git ls-remote origin | sed 's/^/REMOTE /'
"""


def test_github_push_only_to_the_runs_branches(gw, ups):
    """A real git push through the gateway under a plain github: grant:
    branches under airlock/ are created, updated and deleted (with a
    Content-Length body and a chunked one); the default branch, any other
    branch, a tag, or a push that mixes one of those with an allowed
    branch get 403 before anything reaches the upstream. github-admin:
    pushes anywhere."""
    bare = f"{ups.git_root}/{GH_OWNER}/{GH_REPO}.git"

    def main_head():
        return subprocess.run(["git", "--git-dir", bare, "rev-parse", "refs/heads/main"],
                              capture_output=True, text=True, check=True).stdout.strip()
    def cloned(p, tag):
        out = p.stdout.decode()
        if "CLONE FAILED" in out:
            trace = gw.ws / f"trace-{tag}.log"
            raise AssertionError(f"{out}\n--- git's trace\n"
                                 f"{trace.read_text()[-8000:] if trace.exists() else '(none)'}"
                                 f"\n--- airlock's stderr\n{p.stderr.decode()[-4000:]}"
                                 f"\n--- audit\n{gw.audit_path.read_text()[-3000:] if gw.audit_path.exists() else ''}"
                                 f"\n--- upstream: {ups.tls.recorder.connections} connections, "
                                 f"TLS errors {ups.tls.tls_errors[-5:]}, last requests "
                                 f"{[(r['method'], r['path'], r['time']) for r in ups.records.snapshot()[-5:]]}")
        return out

    before = main_head()
    tag = secrets.token_hex(4)
    p = gw.sh(PUSH_SCRIPT.format(owner=GH_OWNER, repo=GH_REPO, tag=tag), timeout=120)
    out = cloned(p, tag)
    print(out, p.stderr.decode())
    ok = {l[3:] for l in out.splitlines() if l.startswith("OK ")}
    no = {l[3:] for l in out.splitlines() if l.startswith("NO ")}
    assert f"push origin HEAD:refs/heads/airlock/{tag}" in ok, out
    assert f"-c http.postBuffer=1024 push origin HEAD:refs/heads/airlock/{tag}-chunked" in ok, out
    assert f"push origin :refs/heads/airlock/{tag}" in ok, out
    for refused in ("push origin HEAD:main", f"push origin HEAD:refs/heads/release-{tag}",
                    f"push origin v-{tag}", f"push origin HEAD:refs/heads/airlock/{tag}-2 HEAD:main"):
        assert refused in no, (refused, out)
    assert "403" in out, out
    remote = [l.split()[-1] for l in out.splitlines() if l.startswith("REMOTE ")]
    assert f"refs/heads/airlock/{tag}-chunked" in remote, remote
    for absent in (f"refs/heads/airlock/{tag}", f"refs/heads/airlock/{tag}-2",
                   f"refs/heads/release-{tag}", f"refs/tags/v-{tag}"):
        assert absent not in remote, (absent, remote)
    assert main_head() == before, "the default branch moved under a plain grant"
    # Refused with the reason, no credential; identical refusals are counted.
    refused = [l for l in gw.audit() if l["host"] == "github.com" and l["status"] == 403]
    assert sum(l.get("repeated", 1) for l in refused) == 4, refused
    assert all(l.get("credential") is None and "github-admin:" in l["reason"]
               and (l["path"] or "/git-receive-pack").endswith("/git-receive-pack")
               for l in refused), refused

    # The administration's grant pushes to the default branch too.
    tag2 = secrets.token_hex(4)
    p = gw.sh(PUSH_SCRIPT.format(owner=GH_OWNER, repo=GH_REPO, tag=tag2), "--grant",
              f"github-admin:{GH_OWNER}/{GH_REPO}", grant=False, timeout=120)
    out = cloned(p, tag2)
    assert "OK push origin HEAD:main" in out, (p.returncode, out, p.stderr.decode())
    assert main_head() != before


# ---------------------------------------------------------------------------
# Response heads of an upstream that echoes the credential where the
# gateway does not redact.

class TLSRawUpstream(RawUpstream):
    def __init__(self, serve, certdir):
        ca, cert, key = make_certs(certdir)
        self.ca = ca
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        super().__init__(serve)

    def _one(self, c):
        try:
            t = self.ctx.wrap_socket(c, server_side=True, do_handshake_on_connect=False)
            try:
                self.keep(t)
            except OSError:
                t.close()  # closing already: close() will not see this one
                raise
            t.do_handshake()
            self.serve(self, t)
        except Exception:  # noqa: BLE001 (an SSL socket shut down by close() mid-call)
            pass


def key_of(head):
    for line in head.decode("latin-1").split("\r\n"):
        k, _, v = line.partition(":")
        if k.lower() == "x-api-key":
            return v.strip()
    return ""


def hostile_head(up, c):
    head = read_head(c)
    key = key_of(head)
    path = head.split(b" ", 2)[1]
    if path.startswith(b"/v1/upgrade"):
        # Two Upgrade fields: the check looks for "websocket" in any, the
        # head passed on copies the first, unredacted.
        c.sendall(f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x{key}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\n\r\n".encode())
        time.sleep(0.5)
    elif path.startswith(b"/v1/name"):
        # The key as a field name (names are not redacted).
        c.sendall(f"HTTP/1.1 200 OK\r\nX-{key}: 1\r\nContent-Length: 0\r\n\r\n".encode())


HEAD_CLIENT = CLIENT_PRELUDE + r"""
s = tunnel()
up = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" \
     "Sec-WebSocket-Version: 13\r\n" if sys.argv[1] == "upgrade" else ""
s.sendall(f"GET /v1/{sys.argv[1]} HTTP/1.1\r\nHost: {HOST}\r\n{up}x-api-key: dummy\r\n\r\n".encode())
print(read_all(s, until=b"\r\n\r\n").decode(errors="replace"))
"""


@pytest.mark.parametrize("what", ["upgrade", "name"])
def test_secret_in_upgrade_field_or_field_name_never_reaches_the_sandbox(airlock, workspace, tmp_path, what):
    """A 101 with two Upgrade fields, the first carrying the key (the second
    says websocket), and a field whose name is the key: the first is
    refused (a 101 must switch to WebSocket and nothing else, and the
    gateway writes its Upgrade field itself), the field is dropped."""
    p = run_with_key_upstream(airlock, workspace, tmp_path, hostile_head, HEAD_CLIENT, what)
    print(p.stdout.decode(errors="replace"))
    assert b"HTTP/1.1 " in p.stdout, p.stderr.decode()[-2000:]
    no_secret(p.stdout, "the sandbox's output")


def ws_close_with_key(up, c):
    head = read_head(c)
    key = key_of(head)
    import hashlib
    wskey = ""
    for line in head.decode("latin-1").split("\r\n"):
        k, _, v = line.partition(":")
        if k.lower() == "sec-websocket-key":
            wskey = v.strip()
    accept = base64.b64encode(hashlib.sha1(
        wskey.encode() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()).decode()
    c.sendall(f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Accept: {accept}\r\n\r\n".encode())
    # A close frame whose status code is the key's first two bytes (code
    # 4979, "\x13s", puts the key one byte in: the same).
    payload = key.encode()[:100]
    c.sendall(bytes([0x88, len(payload)]) + payload)
    time.sleep(0.5)


WS_CLIENT = CLIENT_PRELUDE + r"""
s = tunnel()
s.sendall(f"GET /v1/ws HTTP/1.1\r\nHost: {HOST}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
          f"x-api-key: dummy\r\n\r\n".encode())
print(read_all(s))
"""


def test_websocket_close_frame_redacted_whole(airlock, workspace, tmp_path):
    """A close frame whose status code bytes start the key: the payload is
    redacted as one stream, the code bytes included, so the key is seen
    whole and never reaches the sandbox."""
    p = run_with_key_upstream(airlock, workspace, tmp_path, ws_close_with_key, WS_CLIENT)
    print(p.stdout.decode(errors="replace"))
    assert b"101 Switching" in p.stdout, p.stderr.decode()[-2000:]
    no_secret(p.stdout, "the sandbox's output")


# ---------------------------------------------------------------------------
# Upgrades other than WebSocket, without a credential: after the 101 the
# connection is a tunnel, and HTTP/2 (h2c) inside it is never decided.

def h2c_server(up, c):
    import h2.config
    import h2.connection
    import h2.events
    head = read_head(c)
    lines = head.decode("latin-1").split("\r\n")
    fields = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip()
              for l in lines[1:] if ":" in l}
    up.seen.append(("HTTP/1.1",) + tuple(lines[0].split(" ")[:2]))
    if fields.get("upgrade", "").lower() != "h2c" or "http2-settings" not in fields:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
        return
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False))
    conn.initiate_upgrade_connection(fields["http2-settings"])
    c.sendall(conn.data_to_send())
    c.settimeout(10)
    while True:
        data = c.recv(65536)
        if not data:
            return
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                h = dict((k.decode() if isinstance(k, bytes) else k,
                          v.decode() if isinstance(v, bytes) else v) for k, v in ev.headers)
                up.seen.append(("h2", h[":method"], h[":path"]))
                body = f"{h[':method']} {h[':path']} done\n".encode()
                conn.send_headers(ev.stream_id, [(":status", "200"),
                                                 ("content-length", str(len(body)))])
                conn.send_data(ev.stream_id, body, end_stream=True)
        c.sendall(conn.data_to_send())


H2C_CLIENT = r"""
import socket, h2.connection, h2.events
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
conn = h2.connection.H2Connection()
settings = conn.initiate_upgrade_connection()
s.sendall(b"GET http://h2c.example.test/public HTTP/1.1\r\nHost: h2c.example.test\r\n"
          b"Connection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: " + settings + b"\r\n\r\n")
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(1)
print("HEAD", buf.split(b"\r\n")[0].decode())
rest = buf.split(b"\r\n\r\n", 1)[1]
s.sendall(conn.data_to_send())
conn.send_headers(3, [(":method", "DELETE"), (":path", "/admin/everything"),
                      (":authority", "h2c.example.test"), (":scheme", "http")], end_stream=True)
s.sendall(conn.data_to_send())
done = 0
while done < 2:
    data = rest or s.recv(65536)
    rest = b""
    if not data:
        break
    for ev in conn.receive_data(data):
        if isinstance(ev, h2.events.DataReceived):
            print("DATA", ev.stream_id, ev.data.decode().strip())
        if isinstance(ev, h2.events.StreamEnded):
            done += 1
    s.sendall(conn.data_to_send())
"""


def test_h2c_upgrade_is_not_passed_on(airlock, workspace, tmp_path):
    """Policy: GET /public only on h2c.example.test. After an upgrade to h2c
    the connection would carry HTTP/2 requests the gateway never decides
    (DELETE /admin/everything here). Only WebSocket upgrades go on; the
    request goes upstream as the plain request it also is, and the upstream
    never sees an HTTP/2 request."""
    try:
        import h2  # noqa: F401
    except ImportError:
        pytest.skip("python3-h2 is not installed here (an h2c upstream and client need it)")
    up = RawUpstream(h2c_server)
    up.seen = []
    p = run_with_plain_upstream(airlock, workspace, tmp_path, up, "h2c.example.test",
                                "rules:\n  - host: h2c.example.test\n    methods: [GET]\n"
                                "    paths: [/public]\n", H2C_CLIENT)
    print(p.stdout.decode(errors="replace"), up.seen)
    assert b"HEAD HTTP/1.1" in p.stdout, p.stderr.decode()[-2000:]
    undecided = [s for s in up.seen if s[0] == "h2" and s[2] != "/public"]
    assert undecided == [], f"the upstream acted on requests the gateway never decided: {undecided}"


# ---------------------------------------------------------------------------
# Addresses that are a cloud host's own services although they are public.

def test_open_network_refuses_cloud_host_services(airlock, workspace, tmp_path):
    """--network open refuses link-local (169.254.169.254) and CGNAT
    (Alibaba's 100.100.100.200) metadata, and Azure's WireServer,
    168.63.129.16 (the VM agent's host channel: goal state, extension
    settings, certificates), a public address reachable only from the VM
    itself: decision deny, the range named, nothing connected."""
    audit = tmp_path / "audit.jsonl"
    p = airlock.run("--network", "open", "--audit", str(audit), "--workspace", str(workspace),
                    "--", "/bin/sh", "-c",
                    "curl -s -m 15 -o /dev/null -w '%{http_code}\\n' "
                    "http://168.63.129.16/machine/?comp=goalstate; "
                    "curl -s -m 15 -o /dev/null -w '%{http_code}\\n' http://169.254.169.254/",
                    timeout=60)
    sanitizer_clean(p.stderr)
    lines = [json.loads(l) for l in audit.read_text().splitlines() if l.strip()]
    by_host = {l["host"]: l for l in lines if l.get("kind") == "http"}
    print(p.stdout.decode(), [(h, l["status"], l["reason"]) for h, l in by_host.items()])
    for host in ("169.254.169.254", "168.63.129.16"):
        l = by_host[host]
        assert l["decision"] == "deny" and "refused address" in l["reason"], l


def test_open_network_keeps_the_policys_deny_rules(airlock, workspace, tmp_path):
    """--network open with --policy: every public host is allowed, but the
    policy's deny rules still deny, with their rule named."""
    policy = tmp_path / "p.yaml"
    policy.write_text("rules:\n  - id: no-evil\n    action: deny\n    host: evil.example.com\n")
    audit = tmp_path / "audit.jsonl"
    p = airlock.run("--network", "open", "--policy", str(policy), "--audit", str(audit),
                    "--workspace", str(workspace), "--", "/bin/sh", "-c",
                    "curl -s -m 10 -o /dev/null http://evil.example.com/", timeout=60)
    sanitizer_clean(p.stderr)
    (l,) = [json.loads(x) for x in audit.read_text().splitlines() if '"http"' in x]
    assert l["decision"] == "deny" and l["rule"] == "no-evil", l


# ---------------------------------------------------------------------------
# Smaller ways around a decision.

OVERRIDE_CLIENT = r"""
import socket, sys
def ask(head):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(head.encode())
    out = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
    return out.split(b"\r\n", 1)[0].decode()
H = "Host: ro.example.test\r\nConnection: close\r\n"
print("plain-get", ask(f"GET http://ro.example.test/a HTTP/1.1\r\n{H}\r\n"))
print("override-get", ask(f"GET http://ro.example.test/a HTTP/1.1\r\n{H}X-HTTP-Method-Override: get\r\n\r\n"))
for name in ("X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"):
    print("override-" + name, ask(f"POST http://ro.example.test/a HTTP/1.1\r\n{H}{name}: DELETE\r\n"
                                  f"Content-Length: 0\r\n\r\n"))
print("override-bad", ask(f"GET http://ro.example.test/a HTTP/1.1\r\n{H}X-HTTP-Method-Override: \r\n\r\n"))
"""


def test_method_override_is_decided_like_its_method(airlock, workspace, tmp_path):
    """A policy that allows only GET on a host: a request whose
    X-HTTP-Method-Override (or X-HTTP-Method, X-Method-Override) names
    DELETE would be acted on as a DELETE by servers that honour it, so it
    is refused (403) and never reaches the upstream; an override naming an
    allowed method passes."""
    seen = []

    def serve(up, c):
        head = read_head(c)
        seen.append(head.split(b"\r\n", 1)[0].decode())
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    up = RawUpstream(serve)
    p = run_with_plain_upstream(airlock, workspace, tmp_path, up, "ro.example.test",
                                "rules:\n  - host: ro.example.test\n    methods: [GET, POST]\n"
                                "  - action: deny\n    host: ro.example.test\n"
                                "    methods: [DELETE]\n", OVERRIDE_CLIENT)
    out = dict(l.split(" ", 1) for l in p.stdout.decode().splitlines() if " " in l)
    print(out, seen)
    assert out["plain-get"].startswith("HTTP/1.1 200"), out
    assert out["override-get"].startswith("HTTP/1.1 200"), out
    for name in ("X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"):
        assert out["override-" + name].startswith("HTTP/1.1 403"), out
    assert out["override-bad"].startswith("HTTP/1.1 403"), out
    assert seen == ["GET /a HTTP/1.1", "GET /a HTTP/1.1"], seen


INTERIM_CLIENT = r"""
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"GET http://one.example.test/ HTTP/1.0\r\nHost: one.example.test\r\n\r\n")
out = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    out += d
print(out.decode(errors="replace"))
"""


def test_interim_responses_never_reach_an_http10_client(airlock, workspace, tmp_path):
    """An HTTP/1.0 client does not know 1xx responses (RFC 9110 15.2): the
    gateway drops an upstream's 100 Continue and 103 Early Hints for it and
    passes the final response on."""
    def serve(up, c):
        read_head(c)
        c.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                  b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal")

    up = RawUpstream(serve)
    p = run_with_plain_upstream(airlock, workspace, tmp_path, up, "one.example.test",
                                "rules:\n  - host: one.example.test\n", INTERIM_CLIENT)
    out = p.stdout.decode()
    assert out.startswith("HTTP/1.1 200"), out
    assert " 100 " not in out and " 103 " not in out and out.rstrip().endswith("final"), out

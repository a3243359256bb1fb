# SPDX-License-Identifier: Apache-2.0
"""Credentials that come back in another form, real clients' framing, and
the framing the gateway writes itself.

Each test performs the attack against the gateway in front of a real
sandbox (the fixtures of test_gateway.py) and checks that nothing leaked:
GW.sh asserts that no secret (raw, base64, the Basic pair, percent-encoded)
reaches the sandbox's output or airlock's stderr, and GW.audit the same of
the audit log.
"""
import json
import os
import pathlib
import shutil
import subprocess
import time

import pytest

from conftest import gateway_rss_kib, put
from test_gateway import (GRANT, OWNER, REPO, SECRET_API, SECRET_GH, SECRET_ODD, gw, gwfiles,  # noqa: F401
                          header, rid, seen, ups)


# ---------------------------------------------------------------------------
# Forms of a secret the gateway writes itself.

def test_basic_pair_and_percent_encoded_echoes_are_redacted(gw, ups):
    """An allowed upstream that echoes the request: the GitHub token went
    out as base64("x-access-token:TOKEN") in Basic, a query credential
    percent-encoded; both come back in that form and are redacted."""
    r1, r2 = rid(), rid()
    p = gw.sh(f'curl -sS "https://github.com/{OWNER}/{REPO}.git/info/refs?service=git-upload-pack'
              f'&echo=1&rid={r1}"; echo; '
              f'curl -sS "https://gen.example.test/odd/echo?rid={r2}"')
    out = p.stdout.decode()
    (rec,) = seen(ups, r1)
    assert header(rec, "authorization")[0].startswith("Basic "), rec["headers"]
    echo = json.loads(out.splitlines()[0])
    assert dict(echo["headers"])["authorization"] == "Basic [redacted]", echo
    (rec,) = seen(ups, r2)
    assert rec["query_params"]["key"] == [SECRET_ODD]
    echo = json.loads(out.splitlines()[-1])
    assert echo["query"].endswith("&key=[redacted]"), echo


# ---------------------------------------------------------------------------
# Compressed responses to credentialed requests.

@pytest.mark.parametrize("enc", ["gzip", "deflate", "deflate-raw", "br", "zstd"])
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_compressed_echo_is_decoded_and_redacted(gw, ups, enc, framing):
    """The gateway asks for an identity body; an upstream that compresses
    anyway gets its body decoded, redacted and passed on decoded (no
    Content-Encoding), never passed on unread."""
    r = rid()
    extra = "&chunked=1" if framing == "chunked" else ""
    p = gw.sh(f'curl -sS -D /tmp/h -H "x-api-key: $EXAMPLE_API_KEY" -H "Accept-Encoding: {enc}" '
              f'"https://api.example.test/v1/enc?enc={enc}{extra}&rid={r}"; echo; '
              f'echo HEADERS; cat /tmp/h')
    out = p.stdout.decode()
    body, _, head = out.partition("HEADERS")
    echo = json.loads(body.strip())
    assert dict(echo["headers"])["x-api-key"] == "[redacted]", echo
    assert "content-encoding" not in head.lower(), head
    (rec,) = seen(ups, r)
    assert header(rec, "x-api-key") == [SECRET_API]
    assert header(rec, "accept-encoding") == ["identity"], rec["headers"]


def test_compressed_without_credential_passes_as_is(gw, ups):
    r = rid()
    p = gw.sh(f'curl -sS -D - -o /tmp/b "https://other.example.test/x/enc?enc=gzip&rid={r}"; '
              f'gzip -dc < /tmp/b', "--allow", "other.example.test")
    out = p.stdout.decode()
    assert "content-encoding: gzip" in out.lower(), out
    assert '"path": "/x/enc"' in out, out


def test_undecodable_or_cut_encodings_never_pass(gw, ups):
    """A coding the gateway cannot decode is refused with 502; a compressed
    body cut short is cut off for the client too (no complete-looking
    response), and neither carries the key."""
    r1, r2, r3 = rid(), rid(), rid()
    p = gw.sh(f'curl -sS -o /dev/null -w "%{{http_code}}\\n" -H "x-api-key: $EXAMPLE_API_KEY" '
              f'"https://api.example.test/v1/enc?enc=compress&rid={r1}"; '
              f'curl -sS -H "x-api-key: $EXAMPLE_API_KEY" '
              f'"https://api.example.test/v1/enc?enc=gzip&cut=1&chunked=1&rid={r2}"; rc=$?; echo; '
              f'echo "rc=$rc"; curl -sS -H "x-api-key: $EXAMPLE_API_KEY" '
              f'"https://api.example.test/v1/enc?enc=br&cut=1&rid={r3}"; rc=$?; echo; echo "rc=$rc"')
    lines = p.stdout.decode().splitlines()
    assert lines[0] == "502", lines
    rcs = [l for l in lines if l.startswith("rc=")]
    assert len(rcs) == 2 and "rc=0" not in rcs, lines
    audit = [l for l in gw.audit() if l["path"] == "/v1/enc"]
    assert any(l["status"] == 502 and "cannot decode" in l["reason"] for l in audit), audit
    assert sum("cut short" in l["reason"] for l in audit) == 2, audit


# ---------------------------------------------------------------------------
# WebSocket frames after a credentialed upgrade.

WS_KEY_CLIENT = r"""
import base64, os, socket, ssl, sys
sys.path.insert(0, "/workspace")
from wsframe import ws_frame, read_ws_frame
rid, ext = sys.argv[1], sys.argv[2]
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(1)
s = ssl.create_default_context().wrap_socket(s, server_hostname="api.example.test")
key = base64.b64encode(os.urandom(16)).decode()
q = "&deflate=1" if ext == "agree" else ""
s.sendall((f"GET /v1/ws-key?rid={rid}{q} HTTP/1.1\r\nHost: api.example.test\r\n"
           f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
           f"Sec-WebSocket-Version: 13\r\n"
           f"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
           f"x-api-key: {os.environ['EXAMPLE_API_KEY']}\r\n\r\n").encode())
f = s.makefile("rb")
print("STATUS", f.readline().decode().strip())
while True:
    l = f.readline()
    if l in (b"\r\n", b""):
        break
    print("HEADER", l.decode().strip())
msg = b""
while True:
    fr = read_ws_frame(f)
    if fr is None:
        break
    op, payload = fr
    print("FRAME", op, payload)
    if op == 8:
        s.sendall(ws_frame(8, b"\x03\xe8"))
        break
"""


def test_websocket_frames_are_redacted(gw, ups):
    """Codex talks to its model over a WebSocket with the key on the
    upgrade: an upstream that echoes the key inside frames (split across
    fragments, in a ping, in the close reason) must not carry it in; no
    permessage-deflate is offered upstream, and a server that agrees to
    one anyway is refused."""
    src = (pathlib.Path(__file__).parent / "upstream.py").read_text()
    put(gw.ws, "wsframe.py", src)
    c = gw.script("wskey.py", WS_KEY_CLIENT)
    r1, r2 = rid(), rid()
    p = gw.sh(f"python3 {c} {r1} none; python3 {c} {r2} agree")
    out = p.stdout.decode()
    first, _, second = out.partition("STATUS HTTP/1.1 502")
    assert "STATUS HTTP/1.1 101" in first, out
    assert "HEADER Sec-WebSocket-Extensions" not in first, out
    frames = [l for l in first.splitlines() if l.startswith("FRAME")]
    text = b"".join(eval(l.split(" ", 2)[2]) for l in frames if l.split()[1] in ("1", "0"))
    assert text == b"key=[redacted];", frames
    assert any(l.startswith("FRAME 9 b'p:[redacted]'") for l in frames), frames
    assert any(l.startswith("FRAME 8 b'\\x03\\xe8bye [redacted]'") for l in frames), frames
    assert _ == "STATUS HTTP/1.1 502", out
    for r in (r1, r2):
        (rec,) = seen(ups, r)
        assert header(rec, "x-api-key") == [SECRET_API]
        assert header(rec, "sec-websocket-extensions") == [], rec["headers"]


# ---------------------------------------------------------------------------
# Node's proxy agent (undici), as Gemini CLI, pi and most Node tools use it.

UNDICI = "6.21.3"


@pytest.fixture(scope="session")
def undici(tmp_path_factory):
    """undici from the npm registry, installed once per host and kept."""
    cache = pathlib.Path("/var/cache/airlock-tests/undici-" + UNDICI)
    mod = cache / "node_modules" / "undici"
    if not (mod / "package.json").exists():
        if not shutil.which("npm"):
            pytest.skip("npm is not installed: undici's ProxyAgent cannot be tested here")
        tmp = cache.with_name(cache.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(tmp),
                            f"undici@{UNDICI}"], capture_output=True, timeout=300)
        if p.returncode != 0:
            pytest.skip("the npm registry is not reachable from this host, so undici's "
                        f"ProxyAgent could not be installed: {p.stderr.decode()[-300:]}")
        shutil.rmtree(cache, ignore_errors=True)
        tmp.rename(cache)
    return mod


UNDICI_CLIENT = r"""
const { ProxyAgent, fetch } = require("/workspace/undici");
const agent = new ProxyAgent(process.env.HTTPS_PROXY);
(async () => {
  for (const url of process.argv.slice(2)) {
    try {
      const r = await fetch(url, { dispatcher: agent,
                                   headers: { "x-api-key": process.env.EXAMPLE_API_KEY } });
      console.log("STATUS", r.status, await r.text());
    } catch (e) {
      console.log("ERROR", String(e), String(e.cause));
    }
  }
})();
"""


def test_undici_proxy_agent(gw, ups, undici):
    """undici's ProxyAgent sends "CONNECT h:443" with "Host: h": accepted,
    and every request inside the tunnel decided as usual."""
    shutil.copytree(undici, gw.ws / "undici", symlinks=True)
    subprocess.run(["chown", "-R", "1000:1000", str(gw.ws / "undici")], check=True)
    c = gw.script("proxyagent.js", UNDICI_CLIENT)
    r1, r2 = rid(), rid()
    p = gw.sh(f"node {c} https://api.example.test/v1/echo?rid={r1} "
              f"https://other.example.test/v1/echo?rid={r2}", timeout=120)
    out = p.stdout.decode()
    assert "STATUS 200" in out, (out, p.stderr.decode()[-2000:])
    (rec,) = seen(ups, r1)
    assert header(rec, "x-api-key") == [SECRET_API]
    assert seen(ups, r2) == []
    assert "ERROR" in out.splitlines()[-1] or "STATUS 403" in out, out


CONNECT_NO_PORT = r"""
import socket, ssl, sys
def head(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(1)
        if not c:
            break
        buf += c
    return buf.split(b"\r\n", 1)[0].decode()
for target, host in (("api.example.test:443", "api.example.test"),
                     ("api.example.test:443", "other.example.test"),
                     ("api.example.test:443", "api.example.test:8443")):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    print(target, host, head(s))
"""


def test_connect_host_without_default_port(gw, ups):
    c = gw.script("cnp.py", CONNECT_NO_PORT)
    out = gw.sh(f"python3 {c}").stdout.decode().splitlines()
    assert out[0] == "api.example.test:443 api.example.test HTTP/1.1 200 Connection established", out
    assert out[1].endswith("400 Bad Request"), out
    assert out[2].endswith("400 Bad Request"), out


# ---------------------------------------------------------------------------
# Framing written by the gateway, methods, retries, refused heads.

RAW_TLS = r"""
import socket, ssl, sys, json
def tunnel():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(1)
    return ssl.create_default_context().wrap_socket(s, server_hostname="api.example.test")
out = {}
for name, data in json.loads(open(sys.argv[1]).read()):
    s = tunnel()
    s.sendall(data.encode("latin-1"))
    buf = b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
    except Exception:
        pass
    out[name] = buf.decode("latin-1")
print(json.dumps(out))
"""


def test_request_chunks_reencoded_methods_and_refused_heads(gw, ups):
    """Chunk sizes, extensions and trailers are written by the gateway, not
    copied; methods are case-sensitive ("head" is refused, not framed as a
    method with a body); a refused head's audit line names what it was."""
    r1, r2, r3, r4 = rid(), rid(), rid(), rid()
    cases = [
        ("chunked", f"POST /v1/echo?rid={r1} HTTP/1.1\r\nHost: api.example.test\r\n"
                    "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                    "5;ext=a\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: evil\r\n\r\n"),
        ("lower-head", f"head /v1/echo?rid={r2} HTTP/1.1\r\nHost: api.example.test\r\n\r\n"),
        ("trace", f"TRACE /v1/echo?rid={r3} HTTP/1.1\r\nHost: api.example.test\r\n\r\n"),
        ("two-cl", f"POST /v1/secret/path?rid={r4} HTTP/1.1\r\nHost: api.example.test\r\n"
                   "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx"),
    ]
    put(gw.ws, "cases.json", json.dumps(cases))
    c = gw.script("rawtls.py", RAW_TLS)
    res = json.loads(gw.sh(f"python3 {c} /workspace/cases.json").stdout.decode().splitlines()[-1])
    assert res["chunked"].startswith("HTTP/1.1 200"), res
    (rec,) = seen(ups, r1)
    assert rec["body"] == "hello world"
    assert rec["raw_chunked"] == ["5\r\n", "6\r\n", "0\r\n", "\r\n"], rec["raw_chunked"]
    assert res["lower-head"].startswith("HTTP/1.1 501"), res
    assert res["trace"].startswith("HTTP/1.1 501"), res
    assert res["two-cl"].startswith("HTTP/1.1 400"), res
    assert seen(ups, r2) == [] and seen(ups, r3) == [] and seen(ups, r4) == []
    audit = gw.audit()
    lower = [l for l in audit if l["method"] == "head"]
    assert len(lower) == 1 and lower[0]["status"] == 501, audit
    assert lower[0]["host"] == "api.example.test" and lower[0]["path"] == "/v1/echo", lower
    two = [l for l in audit if l["status"] == 400]
    assert two and two[0]["method"] == "POST" and two[0]["path"] == "/v1/secret/path", two
    assert two[0]["host"] == "api.example.test", two


def test_response_chunks_reencoded(gw, ups):
    """A chunked response reaches the client framed by the gateway:
    no extension, no trailer."""
    r = rid()
    out = gw.sh(f'curl -sS --raw "https://other.example.test/x/chunkext?rid={r}"',
                "--allow", "other.example.test").stdout.decode("latin-1")
    assert out == "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", repr(out)


def test_only_idempotent_requests_are_resent(gw, ups):
    """A kept-alive upstream connection the server drops when the next
    request arrives: a GET goes again on a fresh connection (and succeeds),
    a POST does not (the server may have acted on it): 502."""
    g1, g2, p1, p2 = rid(), rid(), rid(), rid()
    out = gw.sh(
        f'curl -sS -w "%{{http_code}}\\n" -o /dev/null '
        f'"https://api.example.test/v1/stale?rid={g1}" '
        f'-o /dev/null "https://api.example.test/v1/stale?rid={g2}"; '
        f'curl -sS -o /dev/null -w "%{{http_code}}\\n" '
        f'"https://api.example.test/v1/stale?rid={p1}" '
        f'--next -sS -o /dev/null -w "%{{http_code}}\\n" '
        f'-X POST -d "" "https://api.example.test/v1/stale?rid={p2}"').stdout.decode().split()
    assert out == ["200", "200", "200", "502"], (out, [len(seen(ups, x)) for x in (g1, g2, p1, p2)])
    assert len(seen(ups, g2)) == 2  # dropped once, then answered
    assert len(seen(ups, p2)) == 1  # never sent twice


# ---------------------------------------------------------------------------
# A GitHub grant is work on the repository, not its administration.

GH_ADMIN = [("DELETE", f"/repos/{OWNER}/{REPO}"), ("PATCH", f"/repos/{OWNER}/{REPO}"),
            ("POST", f"/repos/{OWNER}/{REPO}/forks"), ("POST", f"/repos/{OWNER}/{REPO}/generate"),
            ("POST", f"/repos/{OWNER}/{REPO}/transfer"), ("POST", f"/repos/{OWNER}/{REPO}/hooks"),
            ("POST", f"/repos/{OWNER}/{REPO}/keys"),
            ("PUT", f"/repos/{OWNER}/{REPO}/collaborators/mallory"),
            ("GET", f"/repos/{OWNER}/{REPO}/actions/secrets"),
            ("PUT", f"/repos/{OWNER}/{REPO}/actions/secrets/X"),
            ("PUT", f"/repos/{OWNER}/{REPO}/pulls/1/merge"),
            ("POST", f"/repos/{OWNER}/{REPO}/git/refs")]
GH_WORK = [("GET", f"/repos/{OWNER}/{REPO}"), ("POST", f"/repos/{OWNER}/{REPO}/pulls"),
           ("POST", f"/repos/{OWNER}/{REPO}/issues/1/comments"),
           ("POST", f"/repos/{OWNER}/{REPO}/git/blobs")]


def gh_calls(gw, calls, *extra, **kw):
    cmds, rids = [], []
    for method, path in calls:
        r = rid()
        rids.append(r)
        cmds.append(f"curl -sS -o /dev/null -w '%{{http_code}}\\n' -X {method} "
                    f"'https://api.github.com{path}?rid={r}'")
    out = gw.sh("; ".join(cmds), *extra, **kw).stdout.decode().split()
    return list(zip(out, rids))


def test_github_grant_is_work_not_administration(gw, ups):
    res = gh_calls(gw, GH_ADMIN + GH_WORK)
    for (status, r), (method, path) in zip(res, GH_ADMIN):
        assert status == "403" and seen(ups, r) == [], (method, path, status)
    for (status, r), (method, path) in zip(res[len(GH_ADMIN):], GH_WORK):
        (rec,) = seen(ups, r)
        assert status == "200" and header(rec, "authorization") == [f"Bearer {SECRET_GH}"], \
            (method, path)
    refused = [l for l in gw.audit() if l["status"] == 403 and l["host"] == "api.github.com"]
    # Identical refusals are counted, not repeated: every request accounted for.
    assert sum(l.get("repeated", 1) for l in refused) == len(GH_ADMIN), refused
    assert all("github-admin:" in l["reason"] for l in refused), refused
    # A grant that names the administration reaches it.
    res = gh_calls(gw, GH_ADMIN, "--grant", f"github-admin:{OWNER}/{REPO}", grant=False)
    for (status, r), (method, path) in zip(res, GH_ADMIN):
        (rec,) = seen(ups, r)
        assert header(rec, "authorization") == [f"Bearer {SECRET_GH}"], (method, path, status)


# ---------------------------------------------------------------------------
# The audit log: everything a sandbox tried, and never more than its limit.

def test_audit_shows_refused_names_and_failed_handshakes(gw, ups):
    """NXDOMAIN answers, a handshake the gateway refused (transparent 443
    with a name no rule allows), and one the client abandoned (it pins its
    CA) each leave a line, so an operator sees what was tried."""
    with open(ups.ca) as f:
        put(gw.ws, "pinned.pem", f.read())
    gw.sh("getent hosts never-allowed.example.test; "
          "curl -sS --max-time 10 --noproxy '*' --resolve other.example.test:443:127.0.0.2 "
          "https://other.example.test/; "
          "curl -sS --max-time 10 --cacert /workspace/pinned.pem https://api.example.test/v1/x; "
          "true")
    audit = gw.audit()
    dns = [l for l in audit if l["kind"] == "dns"]
    assert {(l["host"], l["decision"]) for l in dns} == {("never-allowed.example.test", "deny")}, dns
    tls = {l["host"]: l for l in audit if l["kind"] == "tls"}
    assert tls["other.example.test"]["decision"] == "deny", tls
    assert tls["other.example.test"]["reason"] == "no rule allows this host", tls
    assert tls["api.example.test"]["decision"] == "error", tls
    assert "trust the sandbox's CA" in tls["api.example.test"]["reason"], tls


AUDIT_FLOOD = r"""
import socket, sys
n, kind = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
f = s.makefile("rb")
long = "x" * 4000
counts = {}
for i in range(n):
    if kind == "paths":
        s.sendall(f"GET http://denied.example.test/{long}/{i} HTTP/1.1\r\nHost: denied.example.test\r\n\r\n".encode())
    else:
        s.sendall(f"GET http://h{i}.denied.example.test/{long} HTTP/1.1\r\nHost: h{i}.denied.example.test\r\n\r\n".encode())
    line = f.readline()
    status = line.split()[1].decode()
    counts[status] = counts.get(status, 0) + 1
    if status != "403":
        break
    length = 0
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        if h.lower().startswith(b"content-length:"):
            length = int(h.split(b":")[1])
    f.read(length)
print("done", n, sorted(counts.items()))
"""


def test_audit_log_is_bounded(gw, ups, tmp_path):
    """A sandbox that floods denials: identical ones (any path) are counted
    in one summary line; distinct ones are written until the limit, then a
    marker, nothing more, and requests are refused from then on (no
    egress unaudited)."""
    policy = tmp_path / "p.yaml"
    policy.write_text(open(gw.files["policy"]).read() + "limits:\n  audit_max: 256K\n")
    flood = gw.script("flood.py", AUDIT_FLOOD)
    p = gw.sh(f"python3 {flood} 3000 paths", "--policy", str(policy), policy=False, timeout=120)
    assert "done 3000 [('403', 3000)]" in p.stdout.decode(), p.stderr.decode()[-2000:]
    size = gw.audit_path.stat().st_size
    audit = gw.audit()
    denied = [l for l in audit if l["host"] == "denied.example.test"]
    assert sum(l.get("repeated", 1) for l in denied) == 3000, denied
    assert size < 16 * 1024, size
    gw.audit_path.unlink()
    r = rid()
    p = gw.sh(f"python3 {flood} 600 hosts; "
              f"curl -sS -o /dev/null -w 'after %{{http_connect}}\\n' -H \"x-api-key: $EXAMPLE_API_KEY\" "
              f"https://api.example.test/v1/echo?rid={r}",
              "--policy", str(policy), policy=False, timeout=120)
    out = p.stdout.decode()
    # Some 50 distinct 4 KiB lines fit; then 503, for this sandbox alone.
    assert "('503', 1)" in out and "after 503" in out, (out, p.stderr.decode()[-2000:])
    assert seen(ups, r) == []
    size = gw.audit_path.stat().st_size
    assert 200 * 1024 < size <= 256 * 1024 + 512, size
    audit = gw.audit()
    assert audit[-1]["kind"] == "audit" and "audit_max" in audit[-1]["reason"], audit[-1]
    assert all(len(l.get("path") or "") <= 1024 for l in audit)
    assert any(l.get("path_truncated") for l in audit), audit[0]


# ---------------------------------------------------------------------------
# The host itself is never an upstream, under --network open too.

HOST_SERVER = r"""
import socket, sys, threading
log = open(sys.argv[1], "a", buffering=1)
def serve(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((addr, 8099))
    s.listen(16)
    while True:
        c, a = s.accept()
        log.write(f"connection from {a[0]}\n")
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhost secret")
        c.close()
threading.Thread(target=serve, args=(socket.AF_INET, "0.0.0.0"), daemon=True).start()
try:
    threading.Thread(target=serve, args=(socket.AF_INET6, "::"), daemon=True).start()
except OSError:
    pass
print("ready", flush=True)
threading.Event().wait()
"""


def test_open_network_never_reaches_the_host(airlock, workspace, tmp_path):
    """On a host with public addresses (here: a network namespace whose
    interface has 44.10.0.1 and 2a01:4f8::1), a sandbox with --network open
    asks the gateway for those addresses, and for one the host gains while
    the sandbox lives: refused, and the host's service bound to the wildcard
    address never sees a connection."""
    ns = f"al-own-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode != 0:
        pytest.skip("cannot make a network namespace here (ip netns add failed)")
    server = None
    sid = None
    run_ns = lambda *a, **kw: subprocess.run(["nsenter", f"--net=/run/netns/{ns}", *a], **kw)
    try:
        ip = lambda *a: subprocess.run(["ip", "-n", ns, *a], check=True, capture_output=True)
        ip("link", "set", "lo", "up")
        ip("link", "add", "v0", "type", "veth", "peer", "name", "v1")
        ip("addr", "add", "44.10.0.1/24", "dev", "v0")
        v6 = subprocess.run(["ip", "-n", ns, "-6", "addr", "add", "2a01:4f8::1/64", "dev", "v0",
                             "nodad"], capture_output=True).returncode == 0
        ip("link", "set", "v0", "up")
        ip("link", "set", "v1", "up")
        log = tmp_path / "conns.log"
        log.touch()
        srv = tmp_path / "srv.py"
        srv.write_text(HOST_SERVER)
        server = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "python3", str(srv),
                                   str(log)], stdout=subprocess.PIPE)
        assert server.stdout.readline().startswith(b"ready")
        p = run_ns(airlock.bin, "sandbox", "create", "--network", "open", "--workspace",
                   str(workspace), env=airlock.env, capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr.decode()
        sid = p.stdout.decode().strip()
        # An address the host gains after the gateway started.
        ip("addr", "add", "44.20.0.7/32", "dev", "v0")
        urls = ["http://44.10.0.1:8099/", "http://44.20.0.7:8099/"]
        urls += ["http://[2a01:4f8::1]:8099/"] if v6 else []
        cmd = "; ".join(f"curl -sS -m 10 -w ' %{{http_code}}\\n' {u}" for u in urls)
        p = run_ns(airlock.bin, "sandbox", "exec", sid, "--", "/bin/sh", "-c", cmd,
                   env=airlock.env, capture_output=True, timeout=60)
        out = p.stdout.decode()
        assert p.returncode == 0, (out, p.stderr.decode()[-2000:])
        assert out.count("an address of this host") == len(urls), out
        assert [l for l in out.splitlines() if l.startswith(" ")] == [" 403"] * len(urls), out
        assert "host secret" not in out
        assert log.read_text() == "", log.read_text()
        if not v6:
            print("IPv6 addresses cannot be added here: only IPv4 was checked")
    finally:
        if sid:
            run_ns(airlock.bin, "sandbox", "destroy", sid, env=airlock.env, capture_output=True)
        if server:
            server.kill()
            server.wait()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


# ---------------------------------------------------------------------------
# The gateway outlives anything a sandbox does to it.

UNFINISHED_HEADS = r"""
import os, socket, ssl, sys
ctx = ssl.create_default_context()
held = []
for i in range(int(sys.argv[1])):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(1)
        if not c:
            sys.exit(f"connection {i} closed by the gateway")
        buf += c
    s = ctx.wrap_socket(s, server_hostname="api.example.test")
    s.sendall(b"GET /v1/unfinished HTTP/1.1\r\nHost: api.example.test\r\nX-A: ")
    held.append(s)
print("held", len(held), flush=True)
os._exit(0)  # every connection drops at once, the sandbox with them
"""


def test_unfinished_heads_then_sandbox_exit(gw, ups, tmp_path):
    """Intercepted connections with unfinished heads time out (408) while
    more arrive, then all drop as the sandbox ends: the gateway used to
    free a connection that a deferred buffer callback still named (heap
    corruption, a libevent assertion). It must shut down in order: the
    last audit line is the summary it writes when the sandbox goes."""
    policy = tmp_path / "p.yaml"
    policy.write_text(open(gw.files["policy"]).read() +
                      "limits:\n  head_timeout: 1s\n  connections: 1024\n")
    c = gw.script("heads.py", UNFINISHED_HEADS)
    for _ in range(3):
        gw.audit_path.unlink(missing_ok=True)
        # glibc's malloc checks (the ASan build of the suite sees the use
        # after free itself).
        p = gw.sh(f"python3 {c} 1000", "--policy", str(policy), policy=False, timeout=120,
                  env={"MALLOC_CHECK_": "3"})
        err = p.stderr.decode()
        assert "held 1000" in p.stdout.decode(), err[-2000:]
        for bad in ("Assertion", "corrupted", "double free", "Segmentation", "AddressSanitizer"):
            assert bad not in err, err[-2000:]
        audit = gw.audit()
        timeouts = [l for l in audit if l["status"] == 408]
        assert timeouts and "repeated" in audit[-1], audit[-3:]


HOLD = r"""
import os, socket, ssl, sys, time
ctx = ssl.create_default_context()
held, refused = [], 0
for i in range(int(sys.argv[1])):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            c = s.recv(1)
            if not c:
                raise ConnectionError("closed")
            buf += c
        s = ctx.wrap_socket(s, server_hostname="api.example.test")
        s.sendall(b"GET /v1/x HTTP/1.1\r\nHost: api.example.test\r\nX-A: ")
        held.append(s)
    except (ConnectionError, OSError, ssl.SSLError):
        refused += 1
open("/workspace/holding.tmp", "w").write(f"{len(held)} {refused}")
os.rename("/workspace/holding.tmp", "/workspace/holding")
while not os.path.exists("/workspace/release"):
    time.sleep(0.05)
"""


def test_a_sandbox_bounds_what_the_gateway_holds_for_it(gw, ups):
    """A sandbox limited to 64 MiB opens 1500 intercepted connections and
    holds them: the gateway serves the first 512 (limits: connections),
    refuses the rest, audits that once, and holds less memory for the
    sandbox than the sandbox itself may use (it used to hold some 290 MiB
    for 4,090 such connections, counted by no limit)."""
    c = gw.script("hold.py", HOLD)
    args = [gw.airlock.bin, "sandbox", "run", *gw.base(), "--memory", "64M", "--",
            "python3", c, "1500"]
    p = subprocess.Popen(args, env=gw.airlock.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        holding = gw.ws / "holding"
        deadline = time.monotonic() + 120
        while not holding.exists():
            assert p.poll() is None, p.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the sandbox never held its connections"
            time.sleep(0.1)
        held, refused = map(int, holding.read_text().split())
        rss_kib = gateway_rss_kib(p.pid)
    finally:
        (gw.ws / "release").touch()
        out, err = p.communicate(timeout=60)
    assert (held, refused) == (512, 988), (held, refused)
    if b"__asan_init" in open(gw.airlock.bin, "rb").read():
        # ASan keeps freed memory in quarantine and maps shadow memory: the
        # process's size says nothing of what the gateway holds.
        print("built with AddressSanitizer: the gateway's memory is not measured")
    else:
        assert rss_kib < 64 * 1024, f"the gateway holds {rss_kib} KiB for a 64 MiB sandbox"
        print(f"gateway RSS with 512 held TLS connections: {rss_kib} KiB")
    tcp = [l for l in gw.audit() if l["kind"] == "tcp"]
    assert sum(l.get("repeated", 1) for l in tcp) == 988, tcp
    assert all("limits: connections" in l["reason"] for l in tcp), tcp


# ---------------------------------------------------------------------------
# A real npm install of a scoped package through the gateway.

def registry_addresses():
    import socket
    try:
        return sorted({ai[4][0] for ai in socket.getaddrinfo("registry.npmjs.org", 443,
                                                            type=socket.SOCK_STREAM)})
    except OSError:
        return []


def test_npm_installs_a_scoped_package(airlock, workspace, tmp_path):
    """npm names scoped packages "@scope%2fname": an encoded '/'. Refused
    where a path decides something; a host-only rule has nothing to fool,
    so the request goes on (the encoding kept), and npm installs."""
    if not shutil.which("npm"):
        pytest.skip("npm is not installed here")
    addrs = registry_addresses()
    if not addrs:
        pytest.skip("registry.npmjs.org does not resolve from this host")
    # The registry may resolve to addresses the vetting refuses on test
    # machines; production hosts see public ones. Either way: listed.
    cidrs = ", ".join(f"'{a}/{32 if ':' not in a else 128}'" for a in addrs)
    policy = tmp_path / "npm.yaml"
    policy.write_text(f"rules:\n  - id: npm\n    host: registry.npmjs.org\nallow_cidrs: [{cidrs}]\n")
    audit = tmp_path / "audit.jsonl"
    p = airlock.run("--policy", str(policy), "--audit", str(audit), "--workspace", str(workspace),
                    "--", "/bin/sh", "-c",
                    "cd /workspace && npm install --no-audit --no-fund --no-update-notifier "
                    "--cache /tmp/npm-cache @types/ms && cat node_modules/@types/ms/package.json",
                    timeout=300)
    out, err = p.stdout.decode(), p.stderr.decode()
    if p.returncode != 0 and ("ECONNREFUSED" in err or "ETIMEDOUT" in err or "EAI_AGAIN" in err):
        lines = [json.loads(l) for l in audit.read_text().splitlines()] if audit.exists() else []
        if not any(l.get("status") == 200 for l in lines):
            pytest.skip(f"the npm registry is not reachable from this host: {err[-300:]}")
    assert p.returncode == 0, (out[-1000:], err[-2000:])
    assert '"name": "@types/ms"' in out, out[-1000:]
    lines = [json.loads(l) for l in audit.read_text().splitlines()]
    scoped = [l for l in lines if l.get("path", "") and "%2F" in l["path"]]
    assert scoped and all(l["status"] == 200 for l in scoped), scoped


# ---------------------------------------------------------------------------
# `airlock gateway`: the gateway alone, in front of any client on the host.

def test_standalone_gateway(airlock, ups, gwfiles, tmp_path):
    """The standalone gateway: drops root before serving, decides and
    audits every request like a sandbox's, injects credentials, and stops
    cleanly on SIGTERM."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ca = tmp_path / "ca.pem"
    audit = tmp_path / "audit.jsonl"
    args = [airlock.bin, "gateway", "--listen", f"127.0.0.1:{port}", "--policy", gwfiles["policy"],
            "--vault", gwfiles["vault"], "--ca-out", str(ca), "--audit", str(audit),
            *ups.args(("api.example.test", "other.example.test"))]
    p = subprocess.Popen(args, env=airlock.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # It says so once it listens with nothing of root's left.
        line = p.stderr.readline().decode()
        assert line == f"airlock gateway: listening on 127.0.0.1:{port} (HTTP proxy; clients " \
                       f"trust {ca})\n", line
        assert ca.stat().st_size > 0
        # Serving: root is gone (its own uid, no capabilities).
        with open(f"/proc/{p.pid}/status") as f:
            st = dict(l.split(":", 1) for l in f if ":" in l)
        assert st["Uid"].split()[0] != "0" and int(st["CapEff"].strip(), 16) == 0, st
        r1, r2, r3 = rid(), rid(), rid()
        base = ["curl", "-sS", "--max-time", "10", "-x", f"http://127.0.0.1:{port}", "--cacert",
                str(ca), "-o", "/dev/null", "-w", "%{http_code} %{http_connect}\n"]
        out = [subprocess.run(base + [u], capture_output=True, timeout=30).stdout.decode().strip()
               for u in (f"https://api.example.test/v1/echo?rid={r1}",
                         f"https://other.example.test/v1/echo?rid={r2}",
                         f"https://api.example.test/admin?rid={r3}")]
        assert out == ["200 200", "000 403", "403 200"], out
        (rec,) = seen(ups, r1)
        assert header(rec, "x-api-key") == [SECRET_API]
        assert seen(ups, r2) == [] and seen(ups, r3) == []
    finally:
        p.terminate()
        rc = p.wait(timeout=10)
    assert rc == 0, p.stderr.read().decode()
    lines = [json.loads(l) for l in audit.read_text().splitlines()]
    assert [(l["host"], l["status"]) for l in lines if l["kind"] == "http"] == [
        ("api.example.test", 200), ("other.example.test", 403), ("api.example.test", 403)], lines
    assert SECRET_API not in audit.read_text()

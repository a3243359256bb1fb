# SPDX-License-Identifier: Apache-2.0
"""Test upstream servers for the gateway's integration tests.

Everything listens on the host's loopback; the gateway (in the host's network
namespace) reaches it through `--upstream HOST:PORT=127.0.0.1:PORT` overrides.
Certificates come from a test CA made with the openssl CLI at run time, in a
temporary directory (no key is ever committed).

One TLS server answers for every test name (the routing is by Host header):

* `/echo...` and anything else: the request as JSON (method, path, query,
  headers as a list of [name, value] pairs, body);
* `/redirect?to=URL`: 302 to URL;
* `/ws` with `Upgrade: websocket`: a WebSocket handshake, then every frame is
  echoed back prefixed with "echo:" (hand-written, RFC 6455);
* Host github.com, `/OWNER/REPO[.git]/(info/refs|git-upload-pack|...)`: git
  smart HTTP through `git http-backend` (CGI), only with Basic auth
  `x-access-token:TOKEN`, else 401. The repositories are OWNER/REPO and
  OWNER/OTHER unless `Upstreams(..., repos=[(owner, name), ...])` names others.

A plain HTTP server serves the same handler, and a "sentinel" listener only
counts connections (a service on the host's loopback nothing may reach).
Every request any server sees is recorded (`Upstreams.records`).
"""
import base64
import hashlib
import http.server
import json
import os
import pathlib
import socket
import socketserver
import ssl
import subprocess
import threading
import time
import urllib.parse

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# Names the upstream certificate is valid for.
CERT_NAMES = ["api.example.test", "other.example.test", "gen.example.test",
              "metadata.example.test", "github.com", "api.github.com", "*.example.test"]

OWNER = "AcmeOrg"
REPO = "Widget"
OTHER = "Other"


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d, names=CERT_NAMES):
    """A test CA and one leaf for `names` in directory d; returns (ca, cert, key) paths."""
    d = pathlib.Path(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / "ca.cnf").write_text(
        "[req]\ndistinguished_name=dn\nprompt=no\nx509_extensions=v3\n"
        "[dn]\nCN=airlock test upstream CA\n"
        "[v3]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
        "subjectKeyIdentifier=hash\n")
    _openssl("req", "-x509", "-config", "ca.cnf", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "2", cwd=d)
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", f"/CN={names[0]}", cwd=d)
    san = ",".join(f"DNS:{n}" for n in names)
    (d / "leaf.ext").write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n")
    _openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "leaf.crt", "-days", "2", "-extfile", "leaf.ext", cwd=d)
    os.chmod(d / "ca.key", 0o600)
    os.chmod(d / "leaf.key", 0o600)
    return str(d / "ca.crt"), str(d / "leaf.crt"), str(d / "leaf.key")


DEFAULT_REPOS = ((OWNER, REPO), (OWNER, OTHER))


def make_git_repos(root, repos=DEFAULT_REPOS):
    """Bare repositories OWNER/NAME.git (README: "content of OWNER/NAME"), one
    commit each, for each (OWNER, NAME) of repos."""
    root = pathlib.Path(root)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", HOME=str(root))
    for owner, name in repos:
        work = root / "work" / owner / name
        work.mkdir(parents=True)
        (work / "README").write_text(f"content of {owner}/{name}\n")
        for cmd in (["init", "-q", "-b", "main"], ["add", "README"],
                    ["commit", "-q", "-m", f"first commit of {name}"]):
            subprocess.run(["git", *cmd], cwd=work, env=env, check=True, capture_output=True)
        bare = root / owner / f"{name}.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], env=env,
                       check=True, capture_output=True)
    return str(root)


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.items = []
        self.connections = 0
        self.sni = []

    def add(self, rec):
        with self.lock:
            self.items.append(rec)

    def snapshot(self):
        with self.lock:
            return list(self.items)

    def with_rid(self, rid):
        return [r for r in self.snapshot() if rid in r["query_params"].get("rid", [])]

    def text(self):
        """Everything seen, as one string (to look for secrets)."""
        return json.dumps(self.snapshot())


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "airlock-test-upstream"
    sys_version = ""

    def log_message(self, *a):
        pass

    def _body(self):
        te = self.headers.get("Transfer-Encoding", "")
        self.raw_chunked = []  # the chunk-size and trailer lines as they came
        if te.lower() == "chunked":
            out = b""
            while True:
                line = self.rfile.readline(1024)
                self.raw_chunked.append(line.decode("latin-1"))
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:
                        t = self.rfile.readline(1024)
                        self.raw_chunked.append(t.decode("latin-1"))
                        if t in (b"\r\n", b"\n", b""):
                            break
                    return out
                out += self.rfile.read(size)
                self.rfile.readline(8)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self):
        srv = self.server
        target = self.path
        parts = urllib.parse.urlsplit(target)
        path = parts.path if not target.startswith("/") else target.split("?", 1)[0]
        query = parts.query
        body = self._body()
        host = (self.headers.get("Host") or "").lower()
        hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host
        rec = {
            "server": srv.name,
            "method": self.command,
            "target": target,
            "path": path,
            "query": query,
            "query_params": urllib.parse.parse_qs(query, keep_blank_values=True),
            "host": host,
            "headers": [[k.lower(), v] for k, v in self.headers.items()],
            "body": body[:65536].decode("latin-1"),
            "raw_chunked": self.raw_chunked,
            "time": time.time(),
        }
        srv.recorder.add(rec)
        params = rec["query_params"]
        self.requests_here = getattr(self, "requests_here", 0) + 1
        upgrade = (self.headers.get("Upgrade") or "").lower()
        if upgrade == "websocket" and path.rstrip("/").endswith("/ws"):
            return self._websocket()
        if upgrade == "websocket" and path.endswith("/ws-key"):
            return self._websocket_key(params)
        if hostname == "github.com" and srv.git_root and "echo" not in params:
            return self._git(path, query, body)
        if path.endswith("/stale") and self.requests_here > 1:
            # A kept-alive connection the server drops when the next
            # request arrives, without answering it.
            self.close_connection = True
            return
        if path.endswith("/enc"):
            # The echo, compressed in the coding asked for, whatever the
            # request accepts (as some servers do).
            enc = params.get("enc", ["gzip"])[0]
            out = {k: rec[k] for k in ("method", "path", "query", "host", "headers")}
            data = compress(json.dumps(out).encode() + b"\n", enc)
            enc = "deflate" if enc == "deflate-raw" else enc
            if "cut" in params:
                data = data[:len(data) // 2]
            if "chunked" in params:
                self.send_response(200)
                self.send_header("Content-Encoding", enc)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(data), 7):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data[i:i + 7]), data[i:i + 7]))
                self.wfile.write(b"0\r\n\r\n")
                return
            return self._send(200, data, [("Content-Encoding", enc)])
        if path.endswith("/chunkext"):
            # Chunk extensions and a trailer, which a proxy must not pass on.
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"5;evil=1\r\nhello\r\n6 ; x=\"y\"\r\n world\r\n"
                             b"0\r\nX-Smuggled: 1\r\n\r\n")
            return
        if path.startswith("/redirect"):
            to = rec["query_params"].get("to", ["/"])[0]
            return self._send(302, b"redirecting\n", [("Location", to)])
        key = self.headers.get("x-api-key", "")
        if path.endswith("/hdr"):
            # The credential echoed in a response header.
            return self._send(200, b"see headers\n", [("X-Echo-Key", key),
                                                       ("Set-Cookie", f"k={key}; Path=/")])
        if path.endswith("/split"):
            # The credential echoed in a chunked body, split across chunks and writes.
            pad = int(rec["query_params"].get("pad", ["1000"])[0])
            data = b"A" * pad + key.encode() + b"Z\n"
            cut = pad + max(1, len(key) // 2)
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (data[:cut], data[cut:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
            return
        if path.endswith("/blob"):
            n = int(rec["query_params"].get("n", ["0"])[0])
            return self._send(200, blob(n), [("Content-Type", "application/octet-stream")])
        if path.endswith("/sink"):
            out = {"len": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                   "x-api-key": key}
            return self._send(200, json.dumps(out).encode() + b"\n")
        if path.startswith("/simple/") and srv.wheel:
            name, data = srv.wheel
            digest = hashlib.sha256(data).hexdigest()
            html = (f'<!DOCTYPE html><html><body><a href="/packages/{name}#sha256={digest}">'
                    f'{name}</a></body></html>\n')
            return self._send(200, html.encode(), [("Content-Type", "text/html")])
        if path.startswith("/packages/") and srv.wheel:
            return self._send(200, srv.wheel[1], [("Content-Type", "application/octet-stream")])
        if path.startswith("/status/"):
            return self._send(int(path.split("/")[2]), b"status\n")
        out = {k: rec[k] for k in ("method", "path", "query", "host", "headers", "body")}
        self._send(200, json.dumps(out).encode() + b"\n", [("Content-Type", "application/json")])

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _handle

    # --- git smart HTTP ---------------------------------------------------
    def _git(self, path, query, body):
        srv = self.server
        segs = path.strip("/").split("/")
        if len(segs) < 3:
            return self._send(404, b"not found\n")
        owner, repo = segs[0], segs[1]
        if repo.endswith(".git"):
            repo = repo[:-4]
        want = "Basic " + base64.b64encode(f"x-access-token:{srv.git_token}".encode()).decode()
        if self.headers.get("Authorization") != want:
            return self._send(401, b"authentication required\n",
                              [("WWW-Authenticate", 'Basic realm="GitHub"')])
        # GitHub compares owner and repository case-insensitively.
        match = [(o, r) for o, r in srv.repos if owner.lower() == o.lower() and
                 r.lower() == repo.lower()]
        if not match:
            return self._send(404, b"Repository not found.\n")
        rest = "/".join(segs[2:])
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": srv.git_root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": f"/{match[0][0]}/{match[0][1]}.git/{rest}",
            "REQUEST_METHOD": self.command,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",
        }
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        p = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True,
                           timeout=30)
        head, _, out = p.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, out = p.stdout.partition(b"\n\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self._send(status, out, headers)

    # --- WebSocket --------------------------------------------------------
    def _websocket_key(self, params):
        """Sends the request's x-api-key back inside frames: a text message
        cut in three fragments through the key, a ping around one, and a
        close frame's reason; agrees to any extension when told to."""
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1(key.encode() + WS_GUID).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        if "deflate" in params:
            self.send_header("Sec-WebSocket-Extensions", "permessage-deflate")
        self.end_headers()
        api = self.headers.get("x-api-key", "").encode()
        msg = b"key=" + api + b";"
        a, b = 6, 6 + len(api) // 2
        self.wfile.write(ws_frame(1, msg[:a], mask=False, fin=False))
        self.wfile.write(ws_frame(9, b"p:" + api, mask=False))
        self.wfile.write(ws_frame(0, msg[a:b], mask=False, fin=False))
        self.wfile.flush()
        time.sleep(0.05)
        self.wfile.write(ws_frame(0, msg[b:], mask=False))
        self.wfile.write(ws_frame(8, b"\x03\xe8bye " + api, mask=False))
        self.wfile.flush()
        read_ws_frame(self.rfile)
        self.close_connection = True

    def _websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1(key.encode() + WS_GUID).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        while True:
            frame = read_ws_frame(self.rfile)
            if frame is None:
                break
            opcode, payload = frame
            if opcode == 8:
                self.wfile.write(ws_frame(8, payload[:2], mask=False))
                break
            self.wfile.write(ws_frame(opcode, b"echo:" + payload, mask=False))
            self.wfile.flush()
        self.close_connection = True


def make_wheel():
    """(file name, bytes) of a minimal pure-Python wheel: airlock-probe 1.0."""
    import io
    import zipfile
    files = {
        "airlock_probe/__init__.py": b"VALUE = 42\n",
        "airlock_probe-1.0.dist-info/METADATA":
            b"Metadata-Version: 2.1\nName: airlock-probe\nVersion: 1.0\n",
        "airlock_probe-1.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: airlock-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={h},{len(data)}\n"
    files["airlock_probe-1.0.dist-info/RECORD"] = (
        record + "airlock_probe-1.0.dist-info/RECORD,,\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return "airlock_probe-1.0-py3-none-any.whl", buf.getvalue()


def blob(n):
    """n deterministic bytes."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d" % i).digest()
        i += 1
    return bytes(out[:n])


def compress(data, enc):
    """data in the HTTP content coding enc (or junk for an unknown one)."""
    import gzip
    import zlib
    if enc in ("gzip", "x-gzip"):
        return gzip.compress(data)
    if enc == "deflate":
        return zlib.compress(data)
    if enc == "deflate-raw":
        c = zlib.compressobj(wbits=-15)
        return c.compress(data) + c.flush()
    if enc == "br":
        import brotli
        return brotli.compress(data)
    if enc == "zstd":
        import zstandard
        return zstandard.ZstdCompressor().compress(data)
    return b"\x1f\x9d" + data  # "compress" and the like: not decodable here


def ws_frame(opcode, payload, mask=True, fin=True):
    """One WebSocket frame (clients mask, servers do not)."""
    b = bytearray([(0x80 if fin else 0) | opcode])
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        b.append(m | n)
    elif n < 65536:
        b.append(m | 126)
        b += n.to_bytes(2, "big")
    else:
        b.append(m | 127)
        b += n.to_bytes(8, "big")
    if mask:
        k = os.urandom(4)
        b += k
        payload = bytes(c ^ k[i % 4] for i, c in enumerate(payload))
    return bytes(b) + payload


def read_ws_frame(f):
    """(opcode, payload) of one frame read from file f, or None at EOF."""
    h = f.read(2)
    if len(h) < 2:
        return None
    opcode = h[0] & 0x0F
    masked = h[1] & 0x80
    n = h[1] & 0x7F
    if n == 126:
        n = int.from_bytes(f.read(2), "big")
    elif n == 127:
        n = int.from_bytes(f.read(8), "big")
    key = f.read(4) if masked else None
    payload = f.read(n)
    if key:
        payload = bytes(c ^ key[i % 4] for i, c in enumerate(payload))
    return opcode, payload


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, name, recorder, ctx=None, git_root=None, git_token=None,
                 repos=DEFAULT_REPOS):
        self.name = name
        self.recorder = recorder
        self.ctx = ctx
        self.git_root = git_root
        self.git_token = git_token
        self.repos = repos
        self.wheel = make_wheel()
        self.tls_errors = []
        super().__init__(("127.0.0.1", 0), Handler)

    def finish_request(self, request, client_address):
        # The TLS handshake happens in the connection's own thread.
        with self.recorder.lock:
            self.recorder.connections += 1
        if self.ctx is not None:
            request.settimeout(20)
            try:
                request = self.ctx.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                self.tls_errors.append(repr(e))
                return
        self.RequestHandlerClass(request, client_address, self)


class Sentinel:
    """A listener on the host's loopback that only counts connections."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = []
        self.markers = set()
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                c, addr = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted.append(addr)
            c.close()

    def others(self, seconds=5):
        """Every connection accepted so far but our own markers.

        Connects a marker and waits until it is accepted: connections queue in
        order, so every earlier one has been accepted by then (no sleeping)."""
        m = socket.create_connection(("127.0.0.1", self.port))
        mark = m.getsockname()
        self.markers.add(mark)
        end = time.monotonic() + seconds
        while mark not in self.accepted:
            assert time.monotonic() < end, "sentinel did not accept its marker"
            time.sleep(0.01)
        m.close()
        return [a for a in self.accepted if a not in self.markers]

    def close(self):
        self._stop = True
        self.thread.join()
        self.sock.close()


class Upstreams:
    """All test upstreams, started once; call close() when done."""

    def __init__(self, tmpdir, git_token, repos=DEFAULT_REPOS):
        tmpdir = pathlib.Path(tmpdir)
        self.ca, cert, key = make_certs(tmpdir / "certs")
        self.git_root = make_git_repos(tmpdir / "git", repos)
        self.git_token = git_token
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.set_alpn_protocols(["http/1.1"])
        self.records = Recorder()

        def sni(sslobj, name, _ctx):
            with self.records.lock:
                self.records.sni.append(name)
        ctx.sni_callback = sni
        self.tls = Server("tls", self.records, ctx, self.git_root, git_token, repos)
        self.plain = Server("plain", self.records, None, self.git_root, git_token, repos)
        self.sentinel = Sentinel()
        self.tls_port = self.tls.server_address[1]
        self.plain_port = self.plain.server_address[1]
        self.threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05},
                                         daemon=True) for s in (self.tls, self.plain)]
        for t in self.threads:
            t.start()

    def args(self, names=("api.example.test", "other.example.test", "gen.example.test",
                          "github.com", "api.github.com")):
        """--upstream overrides for every test name (443 over TLS, 80 plain) and --upstream-ca."""
        out = []
        for n in names:
            out += ["--upstream", f"{n}:443=127.0.0.1:{self.tls_port}",
                    "--upstream", f"{n}:80=127.0.0.1:{self.plain_port}"]
        return out + ["--upstream-ca", self.ca]

    def close(self):
        for s in (self.tls, self.plain):
            s.shutdown()
            s.server_close()
        self.sentinel.close()


if __name__ == "__main__":
    # Standalone check: python3 upstream.py DIR, then curl against the ports.
    import sys
    u = Upstreams(sys.argv[1], "ghp_standalonetoken0123456789")
    print(json.dumps({"ca": u.ca, "tls": u.tls_port, "plain": u.plain_port,
                      "sentinel": u.sentinel.port}), flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        u.close()

# SPDX-License-Identifier: Apache-2.0
"""The egress gateway: each test performs the attack (or the real client's
use) against the gateway in front of a real sandbox, and checks what the
upstreams saw, what the sandbox saw, and what the audit log says.

The upstreams (tests/integration/upstream.py) listen on the host's loopback
with certificates from a test CA made at run time; the gateway reaches them
through --upstream overrides and trusts them through --upstream-ca.
"""
import base64
import json
import os
import secrets
import shutil
import socket
import time
import urllib.parse
import uuid

import pytest

from conftest import deadline_poll, put
from upstream import OTHER, OWNER, REPO, Upstreams

SECRET_API = "sk-real-" + secrets.token_hex(16)
SECRET_GEN = "AIzaReal" + secrets.token_hex(16)
SECRET_GH = "ghp_" + secrets.token_hex(18)
# A query credential whose value percent-encoding changes.
SECRET_ODD = "odd+/=&key " + secrets.token_hex(12)
ALL_SECRETS = (SECRET_API, SECRET_GEN, SECRET_GH, SECRET_ODD)

AUDIT_KEYS = {"time", "sandbox", "kind", "generation", "rule", "decision", "method", "host",
              "port", "path", "status", "bytes_up", "bytes_down", "duration_ms", "credential",
              "reason"}
# Repeated identical denials are counted: one summary line per window.
SUMMARY_KEYS = {"time", "sandbox", "kind", "generation", "rule", "decision", "method", "host",
                "port", "path", "status", "reason", "repeated", "since"}
MARKER_KEYS = {"time", "sandbox", "kind", "decision", "reason"}

POLICY = """\
rules:
  - id: api
    host: api.example.test
  - id: no-admin
    action: deny
    host: api.example.test
    paths: [/admin]
  - id: gen
    host: gen.example.test
  - id: github
    host: github.com
  - id: github-api
    host: api.github.com
  - id: ro
    host: ro.example.test
    port: 443
    methods: [get]
    paths: [/v1/, /docs]
credentials:
  - secret: example-key
    host: api.example.test
    paths: [/v1/]
    header: x-api-key
    env: EXAMPLE_API_KEY
  - secret: odd-key
    host: gen.example.test
    paths: [/odd/]
    query: key
  - secret: google-key
    host: gen.example.test
    query: key
  - secret: github-token
    host: github.com
    basic: x-access-token
    github: true
  - secret: github-token
    host: api.github.com
    header: authorization
    prefix: "Bearer "
    github: true
"""

GRANT = f"github:{OWNER}/{REPO}"
UPSTREAM_NAMES = ("api.example.test", "other.example.test", "gen.example.test", "ro.example.test",
                  "github.com", "api.github.com")


def rid():
    return uuid.uuid4().hex


@pytest.fixture(scope="module")
def ups(tmp_path_factory):
    u = Upstreams(tmp_path_factory.mktemp("upstreams"), SECRET_GH)
    yield u
    u.close()


@pytest.fixture(scope="module")
def gwfiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("gwfiles")
    os.chmod(d, 0o700)
    policy = d / "policy.yaml"
    policy.write_text(POLICY)
    vault = d / "vault.yaml"
    fd = os.open(vault, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("secrets:\n"
                f"  example-key: \"{SECRET_API}\"\n"
                f"  google-key: \"{SECRET_GEN}\"\n"
                f"  github-token: \"{SECRET_GH}\"\n"
                f"  odd-key: \"{SECRET_ODD}\"\n")
    os.chmod(vault, 0o600)
    return {"dir": d, "policy": str(policy), "vault": str(vault)}


class GW:
    """Runs sandboxes behind the gateway with the test policy, vault and upstreams."""

    def __init__(self, airlock, ups, files, workspace, tmp_path):
        self.airlock = airlock
        self.ups = ups
        self.files = files
        self.ws = workspace
        self.audit_path = tmp_path / "audit.jsonl"
        self.last = None

    def base(self, policy=True, vault=True, grant=True, upstreams=True, audit=True):
        a = []
        if upstreams:
            a += self.ups.args(UPSTREAM_NAMES)
        if policy:
            a += ["--policy", self.files["policy"]]
        if vault:
            a += ["--vault", self.files["vault"]]
        if grant:
            a += ["--grant", GRANT]
        if audit:
            a += ["--audit", str(self.audit_path)]
        return a + ["--workspace", str(self.ws)]

    def sh(self, script, *extra, timeout=60, env=None, **base_kw):
        p = self.airlock.run(*self.base(**base_kw), *extra, "--", "/bin/sh", "-c", script,
                             timeout=timeout, env=env)
        self.last = p
        assert p.returncode != 125, f"airlock refused the run: {p.stderr.decode()}"
        no_secret(p.stdout, "the sandbox's output")
        no_secret(p.stderr, "airlock's stderr (gateway log included)")
        return p

    def script(self, name, text):
        put(self.ws, name, text, 0o755)
        return f"/workspace/{name}"

    def audit(self):
        if not self.audit_path.exists():
            return []
        raw = self.audit_path.read_bytes()
        no_secret(raw, "the audit log")
        lines = [json.loads(l) for l in raw.decode().splitlines() if l.strip()]
        for l in lines:
            check_audit_line(l)
        return lines


def check_audit_line(l):
    if "repeated" in l:
        assert set(l) == SUMMARY_KEYS and l["repeated"] >= 1, l
    elif l.get("kind") == "audit":
        assert set(l) == MARKER_KEYS, l
    else:
        assert AUDIT_KEYS <= set(l) <= AUDIT_KEYS | {"path_truncated"}, f"audit keys: {sorted(l)}"
    assert l["kind"] in ("http", "dns", "tls", "tcp", "audit", "budget"), l
    assert l["decision"] in ("allow", "deny", "error"), l


def no_secret(data, where):
    if isinstance(data, bytes):
        data = data.decode("latin-1")
    for s in ALL_SECRETS:
        assert s not in data, f"a vault secret appeared in {where}"
        assert base64.b64encode(s.encode()).decode() not in data, f"base64 secret in {where}"
        for q in (urllib.parse.quote(s, safe="-._~"), urllib.parse.quote_plus(s)):
            assert q not in data and q.lower() not in data, f"a percent-encoded secret in {where}"
    basic = base64.b64encode(f"x-access-token:{SECRET_GH}".encode()).decode()
    assert basic not in data, f"the GitHub Basic credential appeared in {where}"


@pytest.fixture
def gw(airlock, ups, gwfiles, workspace, tmp_path):
    return GW(airlock, ups, gwfiles, workspace, tmp_path)


def header(rec, name):
    return [v for k, v in rec["headers"] if k == name.lower()]


def seen(ups, r):
    return ups.records.with_rid(r)


def echo_of(out, r):
    """The echo JSON of request rid r in the sandbox's output (one JSON per line)."""
    for line in out.decode().splitlines():
        line = line.strip()
        if line.startswith("{") and r in line:
            return json.loads(line)
    raise AssertionError(f"no echo for {r} in output: {out[-3000:]!r}")


# ---------------------------------------------------------------------------
# 1. Real clients.

CLIENTS = {
    "curl": 'curl -sS --max-time 20 -H "x-api-key: $EXAMPLE_API_KEY" "$URL"',
    # Offers h2 in ALPN: the gateway must settle on HTTP/1.1 (or speak h2 correctly).
    "curl-http2": 'curl -sS --http2 --max-time 20 -H "x-api-key: $EXAMPLE_API_KEY" "$URL"',
    "python-urllib": (
        "python3 -c 'import os, urllib.request; "
        "r = urllib.request.Request(os.environ[\"URL\"], headers={\"x-api-key\": os.environ[\"EXAMPLE_API_KEY\"]}); "
        "print(urllib.request.urlopen(r, timeout=20).read().decode())'"),
    "node-fetch": (
        "node -e 'fetch(process.env.URL, {headers: {\"x-api-key\": process.env.EXAMPLE_API_KEY}})"
        ".then(r => r.text()).then(t => console.log(t))"
        ".catch(e => { console.error(String(e), e.cause); process.exit(3); })'"),
    # pip (Debian 12: pip 23 on Python 3.11) installs a wheel from a simple index.
    "pip": ('python3 -m pip install -q --no-deps --no-cache-dir --disable-pip-version-check '
            '--target /tmp/t --root-user-action=ignore --index-url https://api.example.test/simple/ '
            'airlock-probe && PYTHONPATH=/tmp/t python3 -c "import airlock_probe; '
            'print(\'PIP-OK\', airlock_probe.VALUE)"'),
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_real_clients_reach_allowed_https_host(gw, ups, client):
    if client == "node-fetch" and not shutil.which("node"):
        pytest.skip("node is not installed on this machine")
    r = rid()
    p = gw.sh(f"export URL='https://api.example.test/v1/echo?rid={r}'; {CLIENTS[client]}")
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    if client == "pip":
        assert b"PIP-OK 42" in p.stdout, p.stdout
        assert any(l["path"].startswith("/packages/") and l["decision"] == "allow"
                   for l in gw.audit()), gw.audit()
        return
    echo = echo_of(p.stdout, r)
    recs = seen(ups, r)
    assert len(recs) == 1, recs
    assert recs[0]["server"] == "tls"
    # The upstream got the real key in place of the sandbox's dummy ...
    assert header(recs[0], "x-api-key") == [SECRET_API]
    # ... and its echo came back redacted.
    assert ["x-api-key", "[redacted]"] in echo["headers"], echo
    lines = [l for l in gw.audit() if l["path"] == "/v1/echo"]
    assert len(lines) == 1, gw.audit()
    l = lines[0]
    assert (l["decision"], l["rule"], l["host"], l["port"], l["method"], l["status"],
            l["credential"]) == ("allow", "api", "api.example.test", 443, "GET", 200,
                                 "example-key"), l
    assert l["bytes_down"] > 0 and l["duration_ms"] >= 0


def test_git_clone_with_grant(gw, ups):
    p = gw.sh(f"export GIT_TERMINAL_PROMPT=0; cd /tmp && "
              f"git clone -q https://github.com/{OWNER}/{REPO}.git a && cat a/README && "
              f"git clone -q https://github.com/{OWNER.lower()}/{REPO.lower()} b && cat b/README; "
              f"echo clone-rc=$?; "
              f"git clone -q https://github.com/{OWNER}/{OTHER}.git c 2>&1; "
              f"echo other-rc=$?; test -e c/README && echo OTHER-CLONED")
    out = p.stdout.decode()
    assert out.count(f"content of {OWNER}/{REPO}") == 2, (out, p.stderr.decode()[-2000:])
    assert "clone-rc=0" in out
    assert "OTHER-CLONED" not in out and "other-rc=0" not in out, out
    assert "403" in out, f"clone of an ungranted repository should get 403: {out}"
    gh = [x for x in ups.records.snapshot() if x["host"].startswith("github.com")]
    granted = [x for x in gh if f"/{REPO.lower()}" in x["path"].lower()]
    assert granted and all(header(x, "authorization") for x in granted
                           if x["path"].endswith(("/info/refs", "/git-upload-pack")))
    other = [x for x in gh if f"/{OTHER.lower()}" in x["path"].lower()]
    for x in other:
        assert header(x, "authorization") == [], f"credential sent for {x['path']}"
    lines = gw.audit()
    assert any(l["host"] == "github.com" and l["credential"] == "github-token"
               and l["decision"] == "allow" for l in lines), lines
    assert not any(OTHER in (l["path"] or "") and l["credential"] for l in lines), lines


# ---------------------------------------------------------------------------
# 2. Secrets stay in the gateway.

def test_secrets_never_reach_the_sandbox(gw, ups, gwfiles):
    r1, r2, r3, r4 = rid(), rid(), rid(), rid()
    pats = " ".join(f"-e \"$(echo {base64.b64encode(s.encode()).decode()} | base64 -d)\""
                    for s in ALL_SECRETS)
    p = gw.sh(
        f'echo "DUMMY=$EXAMPLE_API_KEY"; '
        f'curl -sS -H "x-api-key: $EXAMPLE_API_KEY" "https://api.example.test/v1/echo?rid={r1}"; '
        f'curl -sS "https://gen.example.test/v1/x?rid={r2}&key=client-value"; '
        f'curl -sS -H "x-api-key: $EXAMPLE_API_KEY" "http://api.example.test/v1/echo?rid={r3}"; '
        f'curl -sS -H "x-api-key: $EXAMPLE_API_KEY" "https://api.example.test/other?rid={r4}"; '
        f"grep -rslF {pats} /etc /workspace /tmp /root /run /var /home /opt /srv "
        f"/proc/self/environ /proc/1/environ 2>/dev/null | sed 's/^/FOUND:/'; "
        f"cat {gwfiles['vault']} {gwfiles['dir']}/* 2>/dev/null | sed 's/^/VAULT:/'; "
        "env | sed 's/^/ENV:/'; echo done")
    out = p.stdout.decode()
    assert out.rstrip().endswith("done"), out
    assert "FOUND:" not in out, out
    assert "VAULT:" not in out, out
    dummy = [l[6:] for l in out.splitlines() if l.startswith("DUMMY=")][0]
    assert dummy and dummy not in ALL_SECRETS and "sk-real" not in dummy, dummy
    # TLS, in scope: the real key replaces the dummy; the echo is redacted.
    (rec,) = seen(ups, r1)
    assert header(rec, "x-api-key") == [SECRET_API]
    assert ["x-api-key", "[redacted]"] in echo_of(p.stdout, r1)["headers"]
    # Query credential: replaced, not appended.
    (rec,) = seen(ups, r2)
    assert rec["query_params"]["key"] == [SECRET_GEN], rec["query"]
    assert "[redacted]" in echo_of(p.stdout, r2)["query"]
    # Plain HTTP: never a credential.
    (rec,) = seen(ups, r3)
    assert header(rec, "x-api-key") == [dummy]
    # Out of the credential's paths: the dummy passes as sent.
    (rec,) = seen(ups, r4)
    assert header(rec, "x-api-key") == [dummy]
    lines = {(l["path"], l["port"]): l for l in gw.audit()}
    assert lines[("/v1/echo", 443)]["credential"] == "example-key"
    assert lines[("/v1/x", 443)]["credential"] == "google-key"
    assert lines[("/v1/echo", 80)]["credential"] is None
    assert lines[("/other", 443)]["credential"] is None
    for l in lines.values():
        assert "?" not in l["path"]


# ---------------------------------------------------------------------------
# 3. Denials and DNS.

DNS_QUERY = r"""
import os, socket, struct, sys
def q(name, qtype=1):
    tid = os.urandom(2)
    pkt = tid + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    pkt += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\x00"
    pkt += struct.pack(">HH", qtype, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(pkt, ("127.0.0.1", 53))
    r = s.recv(4096)
    assert r[:2] == tid
    an = struct.unpack(">H", r[6:8])[0]
    return r[3] & 0xF, an, r
for name in sys.argv[1:]:
    try:
        rc, an, r = q(name)
        print("DNS", name, rc, an, socket.inet_ntoa(r[-4:]) if an else "-")
    except Exception as e:
        print("DNS", name, "error", type(e).__name__)
"""


def labeled_curls(gw, reqs, *extra, **kw):
    """Runs `curl -sS [opts] URL` for each (label, opts, url); {label: (http_code,
    http_connect, body)} with the body on one line."""
    cmds = []
    for label, opts, url in reqs:
        cmds.append(f"curl -sS {opts} -o /tmp/body-{label} "
                    f"-w 'RES {label} %{{http_code}} %{{http_connect}}\\n' '{url}'; "
                    f"printf 'BODY {label} '; tr '\\n' ' ' < /tmp/body-{label} 2>/dev/null; echo")
    p = gw.sh("; ".join(cmds), *extra, **kw)
    res, bodies = {}, {}
    for line in p.stdout.decode().splitlines():
        parts = line.split(" ", 2)
        if parts[0] == "RES":
            code, connect = parts[2].split()
            res[parts[1]] = (code, connect)
        elif parts[0] == "BODY" and len(parts) >= 2:
            bodies[parts[1]] = parts[2] if len(parts) > 2 else ""
    return {l: res.get(l, ("missing", "missing")) + (bodies.get(l, ""),) for l, _, _ in reqs}


def test_denied_hosts_and_paths(gw, ups):
    r = {k: rid() for k in ("https-other", "http-other", "admin", "ADMIN", "unknown", "api-ok")}
    res = labeled_curls(gw, [
        ("https-other", "", f"https://other.example.test/v1/echo?rid={r['https-other']}"),
        ("http-other", "", f"http://other.example.test/v1/echo?rid={r['http-other']}"),
        ("admin", "", f"https://api.example.test/admin?rid={r['admin']}"),
        ("ADMIN", "", f"https://api.example.test/ADMIN/x?rid={r['ADMIN']}"),
        ("unknown", "", f"https://denied.example.net/?rid={r['unknown']}"),
        ("api-ok", "", f"https://api.example.test/v1/echo?rid={r['api-ok']}"),
    ])
    # CONNECT to a host no rule allows: 403 on the CONNECT (or on the request).
    assert "403" in res["https-other"][:2], res
    assert "403" in res["unknown"][:2], res
    assert res["http-other"][0] == "403", res  # plain HTTP: the request itself
    assert res["http-other"][2], "a denial must state its reason"
    assert res["admin"][0] == "403" and res["admin"][2], res  # deny rule
    assert res["ADMIN"][0] == "403", res  # deny rules match in any case
    assert res["api-ok"][0] == "200", res
    for k, v in r.items():
        if k != "api-ok":
            assert seen(ups, v) == [], f"the upstream saw a denied request: {seen(ups, v)}"
    lines = gw.audit()
    deny = [l for l in lines if l["decision"] == "deny"]
    assert any(l["host"] == "other.example.test" and l["rule"] is None and l["status"] == 403
               for l in deny), lines
    assert any(l["host"] == "api.example.test" and l["rule"] == "no-admin" for l in deny), lines
    assert any(l["host"] == "denied.example.net" for l in deny), lines
    assert all(l["reason"] for l in deny), deny


def test_dns_stub(gw):
    q = gw.script("dnsq.py", DNS_QUERY)
    rand = f"x{secrets.token_hex(8)}.example.org"
    p = gw.sh("getent hosts api.example.test; echo rc=$?; getent hosts API.Example.Test.; "
              "getent hosts other.example.test; echo rc=$?; "
              "getent hosts deb.debian.org; echo rc=$?; "
              f"python3 {q} {rand} api.example.test deb.debian.org; cat /etc/resolv.conf")
    out = p.stdout.decode()
    lines = out.splitlines()
    assert lines[0].split()[0] == "127.0.0.2" and lines[1] == "rc=0", out
    assert lines[2].split()[0] == "127.0.0.2", out
    assert lines[3] == "rc=2", out
    assert lines[4] == "rc=2", out
    assert f"DNS {rand} 3 0 -" in out, out  # NXDOMAIN, nothing forwarded
    assert "DNS api.example.test 0 1 127.0.0.2" in out, out
    assert "DNS deb.debian.org 3 0 -" in out, out
    ns = [l.split() for l in lines if l.startswith("nameserver")]
    assert ns == [["nameserver", "127.0.0.1"]], out
    # DNS is answered by the stub alone; what was refused is audited (kind
    # dns), once per name however often it was asked.
    refused = [l for l in gw.audit() if l["host"] in (rand, "deb.debian.org")]
    assert {(l["kind"], l["decision"], l["host"]) for l in refused} == \
        {("dns", "deny", rand), ("dns", "deny", "deb.debian.org")}, refused
    assert all(l["reason"] == "no rule allows this host" for l in refused), refused


# ---------------------------------------------------------------------------
# 4. Clients that ignore the proxy.

CONNECTS = r"""
import socket, sys
for spec in sys.argv[1:]:
    host, port = spec.rsplit(":", 1)
    v6 = host.startswith("[")
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET)
    s.settimeout(3)
    try:
        s.connect((host.strip("[]"), int(port)))
        print("CONNECTED", spec)
    except OSError as e:
        print("FAILED", spec, type(e).__name__)
    s.close()
"""


def test_transparent_path_and_no_route(gw, ups):
    r1, r2, r3 = rid(), rid(), rid()
    c = gw.script("conn.py", CONNECTS)
    p = gw.sh(
        f'curl -sS --noproxy "*" -H "x-api-key: $EXAMPLE_API_KEY" '
        f'"https://api.example.test/v1/echo?rid={r1}"; '
        f'curl -sS --noproxy "*" "http://api.example.test/v1/echo?rid={r2}"; '
        f'curl -sS --noproxy "*" --connect-timeout 3 "https://1.1.1.1/?rid={r3}"; echo rc=$?; '
        f"python3 {c} 93.184.216.34:443 1.1.1.1:80 127.0.0.1:{ups.sentinel.port} "
        f"127.0.0.1:{ups.tls_port} 127.0.0.2:22 [::1]:{ups.sentinel.port}")
    out = p.stdout.decode()
    (rec,) = seen(ups, r1)
    assert header(rec, "x-api-key") == [SECRET_API]
    assert ["x-api-key", "[redacted]"] in echo_of(p.stdout, r1)["headers"]
    (rec,) = seen(ups, r2)
    assert rec["server"] == "plain"
    echo_of(p.stdout, r2)
    rc = [l for l in out.splitlines() if l.startswith("rc=")]
    assert rc and rc[0] != "rc=0", out
    assert seen(ups, r3) == []
    assert "CONNECTED" not in out, out
    assert out.count("FAILED") == 6, out
    assert ups.sentinel.others() == []


# ---------------------------------------------------------------------------
# 5. GitHub repository scoping.

def gh_requests(gw, paths, **kw):
    """curl each api.github.com path (as is); {path: (rid, status)}."""
    cmds, rids = [], {}
    for path in paths:
        r = rid()
        rids[path] = r
        sep = "&" if "?" in path else "?"
        cmds.append(f"curl -sS --path-as-is -o /dev/null -w '{r} %{{http_code}}\\n' "
                    f"-H 'Authorization: Bearer sandbox-own' "
                    f"'https://api.github.com{path}{sep}rid={r}'")
    p = gw.sh("; ".join(cmds), **kw)
    status = {}
    for line in p.stdout.decode().splitlines():
        parts = line.split()
        if len(parts) == 2:
            status[parts[0]] = int(parts[1])
    return {path: (r, status.get(r)) for path, r in rids.items()}


GH_GRANTED = [f"/repos/{OWNER}/{REPO}", f"/repos/{OWNER}/{REPO}/issues",
              f"/repos/{OWNER.lower()}/{REPO.lower()}", f"/repos/{OWNER.upper()}/{REPO.upper()}/pulls"]
GH_OTHER = [f"/repos/{OWNER}/{REPO}-evil", f"/repos/{OWNER}/{REPO}x", f"/repos/{OWNER}-x/{REPO}",
            f"/repos/{OWNER}/{OTHER}", f"/repos/{OWNER}", "/user", f"/{OWNER}/{REPO}",
            f"/repos/x/{OWNER}/{REPO}"]
GH_AMBIGUOUS = [f"/repos/{OWNER}%2F{REPO}", f"/repos/{OWNER}/{REPO}/../{OTHER}",
                f"/repos/{OWNER}/{REPO}/%2e%2e/{OTHER}", f"/repos/{OWNER}/{REPO}/%2E%2e/{OTHER}",
                f"/repos/{OWNER}/{REPO}%2F..%2F{OTHER}", f"/repos/{OWNER}/{REPO}/..%2f{OTHER}",
                f"/repos/{OWNER}/{OTHER}/..%2F..%2F{OWNER}/{REPO}",
                f"/repos/{OWNER}/{REPO}%00", f"/repos/{OWNER}/{REPO}%", f"/repos/{OWNER}/{REPO}%zz",
                f"/repos/{OWNER}/{REPO}/%252e%252e/{OTHER}", f"/repos/{OWNER}/{REPO}\\..\\{OTHER}",
                f"/repos/{OWNER}/{REPO}%5C..%5C{OTHER}", f"/repos/{OWNER}/{REPO}/./",
                f"/repos/{OWNER}/{REPO};x/../{OTHER}"]


def test_github_scoping(gw, ups):
    res = gh_requests(gw, GH_GRANTED + GH_OTHER + GH_AMBIGUOUS)
    for path in GH_GRANTED:
        r, status = res[path]
        assert status == 200, (path, status)
        (rec,) = seen(ups, r)
        assert header(rec, "authorization") == [f"Bearer {SECRET_GH}"], path
    for path in GH_OTHER:
        r, status = res[path]
        for rec in seen(ups, r):
            assert SECRET_GH not in json.dumps(rec), f"token sent for {path}"
    for path in GH_AMBIGUOUS:
        r, status = res[path]
        assert status == 400, (path, status)
        assert seen(ups, r) == [], f"upstream saw ambiguous {path}: {seen(ups, r)}"
    # The audit names the credential only where it was attached.
    lines = [l for l in gw.audit() if l["host"] == "api.github.com"]
    granted_paths = {l["path"] for l in lines if l.get("credential") == "github-token"}
    assert granted_paths and all(p.lower().startswith(f"/repos/{OWNER}/{REPO}".lower())
                                 for p in granted_paths), granted_paths
    assert all(not p.lower().startswith(f"/repos/{OWNER}/{REPO}-".lower()) for p in granted_paths)


def test_github_no_grant_no_credential(gw, ups):
    res = gh_requests(gw, GH_GRANTED[:2], grant=False)
    for path, (r, status) in res.items():
        for rec in seen(ups, r):
            assert SECRET_GH not in json.dumps(rec), f"token sent without a grant: {path}"
    assert all(l["credential"] is None for l in gw.audit()), gw.audit()


# ---------------------------------------------------------------------------
# 6. Redirects to a host the policy does not allow.

def test_redirect_to_denied_host(gw, ups):
    r1, r2, r3, r4 = rid(), rid(), rid(), rid()
    w = "-o /dev/null -w '%{http_code} %{http_connect} %{num_redirects}\\n'"
    p = gw.sh(
        f"curl -sS -L {w} 'https://api.example.test/redirect?rid={r1}&"
        f"to=https://other.example.test/landing%3Frid%3D{r2}'; echo rc=$?; "
        f"curl -sS -L {w} 'https://api.example.test/redirect?rid={r3}&"
        f"to=http://other.example.test/landing%3Frid%3D{r4}'; echo rc=$?")
    out = p.stdout.decode().splitlines()
    assert len(seen(ups, r1)) == 1 and len(seen(ups, r3)) == 1
    assert seen(ups, r2) == [] and seen(ups, r4) == []
    assert "403" in out[0].split()[:2], out
    assert out[2].split()[0] == "403", out
    deny = [l for l in gw.audit() if l["decision"] == "deny" and l["host"] == "other.example.test"]
    assert len(deny) >= 2, gw.audit()


# ---------------------------------------------------------------------------
# 7. Authority, SNI and Host must agree.

MISDIRECT = r"""
import socket, ssl, sys, json
def read_head(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(4096)
        if not c:
            break
        buf += c
    return buf
def status(buf):
    line = buf.split(b"\r\n", 1)[0].decode("latin-1")
    return line.split()[1] if line.startswith("HTTP/") else "none:" + line[:40]
def tunnel(authority):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    return s, status(read_head(s))
def tls(s, sni):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx.wrap_socket(s, server_hostname=sni)
def req(s, host, rid):
    s.sendall(f"GET /v1/echo?rid={rid} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    return status(read_head(s))
out = {}
for name, mode, sni, host, rid in json.loads(sys.argv[1]):
    try:
        if mode == "proxy":
            s, st = tunnel("api.example.test:443")
            if st != "200":
                out[name] = "connect-" + st
                continue
        else:
            s = socket.create_connection(("127.0.0.2", 443), timeout=10)
        out[name] = req(tls(s, sni), host, rid)
    except Exception as e:
        out[name] = "error:" + type(e).__name__ + ":" + str(e)[:80]
print(json.dumps(out))
"""


def test_misdirected_requests_421(gw, ups):
    m = gw.script("misdirect.py", MISDIRECT)
    cases = [
        ("ok-proxy", "proxy", "api.example.test", "api.example.test", rid()),
        ("ok-transparent", "transparent", "api.example.test", "api.example.test", rid()),
        ("sni-differs", "proxy", "other.example.test", "api.example.test", rid()),
        ("host-differs", "proxy", "api.example.test", "other.example.test", rid()),
        ("host-differs-transparent", "transparent", "api.example.test", "other.example.test", rid()),
        ("sni-and-host-differ", "proxy", "other.example.test", "other.example.test", rid()),
    ]
    s_rid = rid()
    p = gw.sh(f"python3 {m} '{json.dumps(cases)}'; "
              f"printf 'GET /v1/echo?rid={s_rid} HTTP/1.1\\r\\nHost: api.example.test\\r\\n"
              f"Connection: close\\r\\n\\r\\n' | timeout 10 openssl s_client -quiet -ign_eof "
              f"-proxy 127.0.0.1:3128 -connect api.example.test:443 -servername other.example.test "
              f"2>/dev/null | head -1 | sed 's/^/S_CLIENT:/'")
    out = p.stdout.decode()
    res = json.loads(out.splitlines()[0])
    assert res["ok-proxy"] == "200" and res["ok-transparent"] == "200", res
    for name, *_ in cases[2:]:
        assert res[name] == "421", (name, res)
    # openssl s_client sends "CONNECT host:443 HTTP/1.0" without a Host header.
    assert "S_CLIENT:HTTP/1.1 421" in out, f"openssl s_client -proxy with another SNI: {out}"
    for c in cases[2:]:
        assert seen(ups, c[4]) == [], c
    assert seen(ups, s_rid) == []
    assert any(l["status"] == 421 and l["decision"] == "deny" for l in gw.audit()), gw.audit()


# ---------------------------------------------------------------------------
# 8. Request smuggling.

RAW = r"""
import socket, ssl, sys, json
def status(buf):
    line = buf.split(b"\r\n", 1)[0].decode("latin-1")
    return line.split()[1] if line.startswith("HTTP/") else "none:" + repr(buf[:40])
out = {}
for name, where, data in json.loads(open(sys.argv[1]).read()):
    try:
        if where == "proxy":
            s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
        elif where == "transparent":
            s = socket.create_connection(("127.0.0.2", 80), timeout=5)
        else:
            s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
            s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += s.recv(1)
            s = ssl.create_default_context().wrap_socket(s, server_hostname="api.example.test")
        s.sendall(data.encode("latin-1"))
        buf = b""
        while b"\r\n" not in buf:
            c = s.recv(4096)
            if not c:
                break
            buf += c
        out[name] = status(buf)
    except Exception as e:
        out[name] = "error:" + type(e).__name__
print(json.dumps(out))
"""


def smuggling_cases(url, host):
    """(name, head) pairs; every request carries rid; a body may hide a second request."""
    def post(rid, headers, body=""):
        return f"POST {url}?rid={rid} HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n{body}"
    inner = lambda r: f"GET {url}?rid={r} HTTP/1.1\r\nHost: {host}\r\n\r\n"
    cases = []
    def add(name, fn):
        r, r2 = rid(), rid()
        cases.append((name, fn(r, r2), r, r2))
    add("cl-and-te", lambda r, r2: post(r, "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                                        "0\r\n\r\n" + inner(r2)))
    add("te-and-cl", lambda r, r2: post(r, "Transfer-Encoding: chunked\r\nContent-Length: 40\r\n",
                                        "0\r\n\r\n" + inner(r2)))
    add("two-cl-equal", lambda r, r2: post(r, "Content-Length: 5\r\nContent-Length: 5\r\n", "hello"))
    add("two-cl-differ", lambda r, r2: post(r, "Content-Length: 0\r\nContent-Length: 60\r\n",
                                            inner(r2)))
    add("cl-list", lambda r, r2: post(r, "Content-Length: 5, 5\r\n", "hello"))
    add("cl-sign", lambda r, r2: post(r, "Content-Length: +5\r\n", "hello"))
    add("te-gzip", lambda r, r2: post(r, "Transfer-Encoding: gzip\r\n", "hello"))
    add("te-gzip-chunked", lambda r, r2: post(r, "Transfer-Encoding: gzip, chunked\r\n",
                                              "0\r\n\r\n"))
    add("te-twice", lambda r, r2: post(r, "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                                       "0\r\n\r\n"))
    add("te-xchunked", lambda r, r2: post(r, "Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"))
    add("te-space-colon", lambda r, r2: post(r, "Transfer-Encoding : chunked\r\n", "0\r\n\r\n"))
    add("cl-space-colon", lambda r, r2: post(r, "Content-Length : 0\r\n", inner(r2)))
    add("obs-fold", lambda r, r2: post(r, "X-A: a\r\n b\r\nContent-Length: 0\r\n"))
    add("obs-fold-te", lambda r, r2: post(r, "Transfer-Encoding:\r\n chunked\r\n", "0\r\n\r\n"))
    add("bare-lf", lambda r, r2: f"GET {url}?rid={r} HTTP/1.1\nHost: {host}\n\n")
    add("bare-lf-header", lambda r, r2: post(r, "X-A: a\nContent-Length: 0\r\n"))
    add("bare-cr", lambda r, r2: post(r, "X-A: a\rContent-Length: 0\r\n"))
    add("two-hosts", lambda r, r2: f"GET {url}?rid={r} HTTP/1.1\r\nHost: {host}\r\nHost: {host}\r\n\r\n")
    add("nul-in-header", lambda r, r2: post(r, "X-A: a\x00b\r\nContent-Length: 0\r\n"))
    # Framing or routing fields declared hop-by-hop: a proxy that dropped
    # Content-Length would pass the body on as the next request.
    for tok in ("content-length", "Content-Length", "close, content-length", "transfer-encoding",
                "host"):
        add(f"connection-{tok}", lambda r, r2, tok=tok: post(
            r, f"Connection: {tok}\r\nContent-Length: {len(inner(r2))}\r\n", inner(r2)))
    return cases


def test_smuggling_refused(gw, ups):
    ok_proxy, ok_tls = rid(), rid()
    cases = []
    for where, url, host in (("proxy", "http://api.example.test/v1/echo", "api.example.test"),
                             ("transparent", "/v1/echo", "api.example.test"),
                             ("tls", "/v1/echo", "api.example.test")):
        for name, data, r, r2 in smuggling_cases(url, host):
            cases.append((f"{where}:{name}", where, data, r, r2))
    runs = [("proxy:ok", "proxy", f"GET http://api.example.test/v1/echo?rid={ok_proxy} HTTP/1.1\r\n"
             "Host: api.example.test\r\nConnection: close\r\n\r\n"),
            ("tls:ok", "tls", f"GET /v1/echo?rid={ok_tls} HTTP/1.1\r\n"
             "Host: api.example.test\r\nConnection: close\r\n\r\n")]
    # Origin-form without Host (HTTP/1.0): nothing names the host on the plain path.
    r10 = rid()
    cases.append(("transparent:http10-no-host", "transparent",
                  f"GET /v1/echo?rid={r10} HTTP/1.0\r\n\r\n", r10, r10))
    runs += [(n, w, d) for n, w, d, _, _ in cases]
    put(gw.ws, "cases.json", json.dumps(runs))
    s = gw.script("raw.py", RAW)
    p = gw.sh(f"python3 {s} /workspace/cases.json")
    res = json.loads(p.stdout.decode().splitlines()[-1])
    assert res["proxy:ok"] == "200" and res["tls:ok"] == "200", res
    assert len(seen(ups, ok_proxy)) == 1 and len(seen(ups, ok_tls)) == 1
    bad = {n: res[n] for n, *_ in cases if res[n] != "400"}
    leaked = [n for n, w, d, r, r2 in cases if seen(ups, r) or seen(ups, r2)]
    assert bad == {} and leaked == [], f"not refused with 400: {bad}; reached upstream: {leaked}"


# ---------------------------------------------------------------------------
# 9. Address vetting.

def test_address_vetting(gw, ups, tmp_path):
    policy = tmp_path / "vet.yaml"
    policy.write_text(
        "rules:\n"
        "  - id: meta\n    host: metadata.example.test\n"
        "  - id: lo-name\n    host: localhost\n"
        "  - id: lo-ip\n    host: 127.0.0.1\n"
        "  - id: private\n    host: private.example.test\n"
        "hosts:\n"
        "  metadata.example.test: 169.254.169.254\n"
        "  private.example.test: 10.1.2.3\n")
    port = ups.sentinel.port
    x = "-x http://127.0.0.1:3128 --noproxy '' --max-time 10"
    res = labeled_curls(gw, [
        ("localhost", x, f"http://localhost:{port}/"),
        ("loopback-ip", x, f"http://127.0.0.1:{port}/"),
        ("metadata", x, "http://metadata.example.test/latest/meta-data/"),
        ("private", x, "http://private.example.test/"),
        ("metadata-tls", x, "https://metadata.example.test/"),
    ], "--policy", str(policy), "--allow", f"localhost:{port}",
        policy=False, vault=False, grant=False, upstreams=False)
    for k in ("localhost", "loopback-ip", "metadata", "private"):
        assert res[k][0] in ("403", "502"), res
    assert res["metadata-tls"][0] in ("403", "502") or res["metadata-tls"][1] in ("403", "502"), res
    assert "loopback" in res["localhost"][2].lower(), res
    assert "loopback" in res["loopback-ip"][2].lower(), res
    assert "link-local" in res["metadata"][2].lower(), res
    assert "private" in res["private"][2].lower(), res
    assert ups.sentinel.others() == [], "the gateway connected to the host's loopback"
    lines = gw.audit()
    assert len([l for l in lines if l["decision"] == "deny"]) >= 4, lines
    assert all(l["decision"] == "deny" for l in lines), lines


# ---------------------------------------------------------------------------
# 10. --network none.

def test_network_none(airlock, ups, workspace):
    put(workspace, "conn.py", CONNECTS)
    put(workspace, "dnsq.py", DNS_QUERY)
    p = airlock.run("--network", "none", "--workspace", str(workspace), "--", "/bin/sh", "-c",
                    "curl -sS --max-time 3 https://api.example.test/; echo rc=$?; "
                    "curl -sS --max-time 3 -x http://127.0.0.1:3128 http://api.example.test/; echo rc=$?; "
                    "python3 /workspace/conn.py 127.0.0.1:3128 127.0.0.2:443 127.0.0.2:80 "
                    f"93.184.216.34:443 127.0.0.1:{ups.sentinel.port}; "
                    "python3 /workspace/dnsq.py api.example.test; "
                    "grep -c nameserver /etc/resolv.conf; env | grep -ic proxy; "
                    "awk 'NR>1 && $4==\"0A\"' /proc/net/tcp /proc/net/tcp6 | wc -l")
    out = p.stdout.decode()
    lines = out.splitlines()
    assert "rc=0" not in out, out
    assert "CONNECTED" not in out and out.count("FAILED") == 5, out
    assert "DNS api.example.test error" in out, out
    assert lines[-3:] == ["0", "0", "0"], out
    assert ups.sentinel.others() == []


# ---------------------------------------------------------------------------
# 11. WebSocket.

WS_CLIENT = r"""
import base64, os, socket, ssl, sys
sys.path.insert(0, "/workspace")
from wsframe import ws_frame, read_ws_frame
rid, mode = sys.argv[1], sys.argv[2]
if mode == "proxy":
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(1)
    assert buf.startswith(b"HTTP/1.1 200"), buf
else:
    s = socket.create_connection((socket.gethostbyname("api.example.test"), 443), timeout=10)
s = ssl.create_default_context().wrap_socket(s, server_hostname="api.example.test")
key = base64.b64encode(os.urandom(16)).decode()
s.sendall((f"GET /v1/ws?rid={rid} HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\n"
           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
           f"x-api-key: {os.environ['EXAMPLE_API_KEY']}\r\n\r\n").encode())
f = s.makefile("rb")
print("STATUS", f.readline().decode().strip())
while f.readline() not in (b"\r\n", b""):
    pass
s.sendall(ws_frame(1, b"hello " + mode.encode()))
print("FRAME", read_ws_frame(f))
s.sendall(ws_frame(8, b"\x03\xe8"))
"""


@pytest.mark.parametrize("mode", ["proxy", "transparent"])
def test_websocket_passes_with_credential(gw, ups, mode):
    src = open(os.path.join(os.path.dirname(__file__), "upstream.py")).read()
    put(gw.ws, "wsframe.py", src)
    c = gw.script("ws.py", WS_CLIENT)
    r = rid()
    p = gw.sh(f"python3 {c} {r} {mode}")
    out = p.stdout.decode()
    assert "STATUS HTTP/1.1 101" in out, (out, p.stderr.decode()[-2000:])
    assert f"FRAME (1, b'echo:hello {mode}')" in out, out
    (rec,) = seen(ups, r)
    assert header(rec, "x-api-key") == [SECRET_API]
    assert header(rec, "upgrade") == ["websocket"]
    l = [l for l in gw.audit() if l["path"] == "/v1/ws"]
    assert len(l) == 1 and l[0]["status"] == 101 and l[0]["credential"] == "example-key", l


# ---------------------------------------------------------------------------
# 12. Persistent sandboxes.

def gw_pids():
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    st = f.read()
                # comm, and the state after it; zombies (exited, for init to reap) do not count
                comm = st[st.index("(") + 1:st.rindex(")")]
                if comm == "airlock-gw" and st[st.rindex(")") + 2] != "Z":
                    out.add(int(pid))
            except (OSError, ValueError, IndexError):
                pass
    return out


def uid_of(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return int([l for l in f if l.startswith("Uid:")][0].split()[1])
    except OSError:
        return None


def secrets_in_tree(root):
    """Files under root (small ones) holding a vault value."""
    found = []
    for d, _, files in os.walk(root):
        for name in files:
            path = os.path.join(d, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > 4 << 20:
                    continue
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if any(s.encode() in data for s in ALL_SECRETS):
                found.append(path)
    return found


def test_persistent_sandbox_gateway(airlock, ups, gwfiles):
    before = gw_pids()
    sid = airlock.sandbox("create", "--allow", "api.example.test", "--policy", gwfiles["policy"],
                          "--vault", gwfiles["vault"], *ups.args(UPSTREAM_NAMES),
                          check=True).stdout.decode().strip()
    mine = gw_pids() - before
    try:
        assert mine, "no airlock-gw process for the sandbox"
        # A helper of the detaching fork may still be on its way out: wait
        # (bounded) until only the serving gateway remains.
        def settled():
            alive = gw_pids() & mine
            return alive if all(uid_of(p) != 0 for p in alive) else None
        mine = deadline_poll(settled, 2, "only unprivileged airlock-gw processes")
        for pid in mine:
            with open(f"/proc/{pid}/status") as f:
                st = dict(l.split(":", 1) for l in f if ":" in l)
            assert st["Uid"].split()[0] != "0" and st["Gid"].split()[0] != "0", st["Uid"]
            assert st["NoNewPrivs"].strip() == "1", st["NoNewPrivs"]
            assert st["Seccomp"].strip() == "2", st["Seccomp"]
            assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0, st["CapEff"]
            assert os.listdir(f"/proc/{pid}/root") == [], "the gateway's root is not empty"
            fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            assert not [f for f in fds if f.startswith("/") and not f.startswith("/dev/null")
                        and not f.endswith("audit.jsonl")], fds
        r1, r2 = rid(), rid()
        for r in (r1, r2):
            p = airlock.sandbox("exec", sid, "--", "/bin/sh", "-c",
                                'curl -sS -o /dev/null -w "%{http_code}" -H "x-api-key: '
                                f'$EXAMPLE_API_KEY" https://api.example.test/v1/echo?rid={r}')
            assert p.stdout == b"200", (p.stdout, p.stderr)
            (rec,) = seen(ups, r)
            assert header(rec, "x-api-key") == [SECRET_API]
            no_secret(p.stderr, "exec's stderr")
        assert secrets_in_tree(airlock.state_dir) == [], "a vault value on disk in the state dir"
        p = airlock.sandbox("audit", sid, check=True)
        no_secret(p.stdout, "the audit log")
        lines = [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]
        ok = [l for l in lines if l["path"] == "/v1/echo" and l["decision"] == "allow"]
        assert len(ok) == 2, lines
        assert all(l["credential"] == "example-key" for l in ok), lines
        assert all(l["sandbox"] == sid for l in ok), lines
        assert all(set(l) == AUDIT_KEYS for l in lines)
    finally:
        airlock.sandbox("destroy", sid, check=True)
    deadline_poll(lambda: not (gw_pids() & mine), 2, "the gateway to exit after destroy")


# ---------------------------------------------------------------------------
# 13. Upstream TLS is verified.

def test_upstream_certificate_verified(gw, ups):
    r1, r2 = rid(), rid()
    w = "-o /dev/null -w '%{http_code}\\n'"
    # The test CA not trusted: the upstream's certificate must be refused.
    p = gw.airlock.run("--allow", "api.example.test", "--upstream",
                       f"api.example.test:443=127.0.0.1:{ups.tls_port}", "--", "/bin/sh", "-c",
                       f"curl -sS {w} https://api.example.test/v1/echo?rid={r1}")
    assert p.returncode != 125, p.stderr
    assert p.stdout.decode().strip() in ("502", "503", "000"), p.stdout
    # A name the upstream's certificate does not cover.
    p = gw.airlock.run("--allow", "evil.example.net", "--upstream",
                       f"evil.example.net:443=127.0.0.1:{ups.tls_port}", "--upstream-ca", ups.ca,
                       "--", "/bin/sh", "-c",
                       f"curl -sS {w} https://evil.example.net/v1/echo?rid={r2}")
    assert p.returncode != 125, p.stderr
    assert p.stdout.decode().strip() in ("502", "503", "000"), p.stdout
    assert seen(ups, r1) == [] and seen(ups, r2) == []


# ---------------------------------------------------------------------------
# 14. The CLI refuses bad gateway options (125, one line).

def test_bad_gateway_options(airlock, gwfiles, tmp_path):
    loose = tmp_path / "loose-vault.yaml"
    loose.write_text("secrets:\n  example-key: \"sk-loose-0123456789\"\n")
    os.chmod(loose, 0o644)
    bad_policy = tmp_path / "bad.yaml"
    bad_policy.write_text("rules:\n  - host: api.example.test\n    bogus: 1\n")
    lacking = tmp_path / "lacking-vault.yaml"
    lacking.write_text("secrets:\n  unrelated: sk-loose-unrelated-0000\n")
    lacking.chmod(0o600)
    not_a_vault = tmp_path / "list-vault.yaml"
    not_a_vault.write_text("secrets: [sk-loose-aaaaaaaa, sk-loose-bbbbbbbb]\n")
    not_a_vault.chmod(0o600)
    for args in (["--allow", "bad host"], ["--allow", "*"], ["--allow", "1.2.3"],
                 ["--vault", str(loose), "--policy", gwfiles["policy"]],
                 ["--policy", str(bad_policy)], ["--network", "wide"],
                 ["--upstream", "api.example.test:443"], ["--grant", "gitlab:x/y"],
                 ["--upstream-ca", str(tmp_path / "missing.pem")],
                 # Read by the gateway process alone; its start fails.
                 ["--vault", str(lacking), "--policy", gwfiles["policy"]],
                 ["--vault", str(not_a_vault), "--policy", gwfiles["policy"]]):
        p = airlock.run(*args, "--", "true")
        assert p.returncode == 125, (args, p.returncode, p.stderr)
        assert len(p.stderr.decode().strip().splitlines()) == 1, (args, p.stderr)
        assert b"sk-loose" not in p.stderr


# ---------------------------------------------------------------------------
# More attacks and real-use checks.

def test_http10_connect_without_host(gw):
    """Python 3.11's http.client (urllib, pip's urllib3) and openssl s_client
    send `CONNECT host:443 HTTP/1.0` with no Host header: valid HTTP/1.0."""
    put(gw.ws, "cases.json", json.dumps([
        ("http10", "proxy", "CONNECT api.example.test:443 HTTP/1.0\r\n\r\n"),
        ("http10-proxy-connection", "proxy",
         "CONNECT api.example.test:443 HTTP/1.0\r\nProxy-Connection: Keep-Alive\r\n\r\n"),
        ("http11-no-host", "proxy", "CONNECT api.example.test:443 HTTP/1.1\r\n\r\n"),
        ("http10-denied", "proxy", "CONNECT other.example.test:443 HTTP/1.0\r\n\r\n")]))
    s = gw.script("raw.py", RAW)
    res = json.loads(gw.sh(f"python3 {s} /workspace/cases.json").stdout.decode().splitlines()[-1])
    assert res["http10"] == "200" and res["http10-proxy-connection"] == "200", res
    assert res["http11-no-host"] == "400", res
    assert res["http10-denied"] == "403", res


def test_secret_echoed_in_headers_and_split_bodies_is_redacted(gw, ups):
    pads = [0, 1, 7, 4095, 4096, 8191, 16383, 16384, 65535]
    rids = {pad: rid() for pad in pads}
    rh = rid()
    cmds = [f'curl -sS -D - -H "x-api-key: $EXAMPLE_API_KEY" '
            f'"https://api.example.test/v1/hdr?rid={rh}"']
    cmds += [f'printf "SPLIT {pad} "; curl -sS -H "x-api-key: $EXAMPLE_API_KEY" '
             f'"https://api.example.test/v1/split?rid={rids[pad]}&pad={pad}" | tr -d A'
             for pad in pads]
    p = gw.sh("; ".join(cmds))  # gw.sh asserts no secret in the output
    out = p.stdout.decode()
    hdr = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip()
           for l in out.splitlines() if ":" in l and not l.startswith("SPLIT")}
    assert hdr.get("x-echo-key") == "[redacted]", out
    assert "[redacted]" in hdr.get("set-cookie", ""), out
    for pad in pads:
        assert f"SPLIT {pad} [redacted]Z" in out, (pad, out)
    for r in [rh, *rids.values()]:
        (rec,) = seen(ups, r)
        assert header(rec, "x-api-key") == [SECRET_API]


def test_client_credential_headers_are_replaced(gw, ups):
    r1, r2 = rid(), rid()
    p = gw.sh(f'curl -sS -H "X-Api-Key: one" -H "x-api-key: two" -H "X-API-KEY: three" '
              f'"https://api.example.test/v1/echo?rid={r1}"; '
              f'curl -sS -H "x-api-key;" "https://api.example.test/v1/echo?rid={r2}"')
    (rec,) = seen(ups, r1)
    assert header(rec, "x-api-key") == [SECRET_API], rec["headers"]
    (rec,) = seen(ups, r2)
    assert header(rec, "x-api-key") == [SECRET_API], rec["headers"]


def test_policy_methods_paths_ports(gw, ups):
    base = "https://ro.example.test"
    r = {k: rid() for k in ("get", "post", "v1x", "V1", "v2", "docs", "docs-sub", "docsx", "head",
                            "http")}
    res = labeled_curls(gw, [
        ("get", "", f"{base}/v1/x?rid={r['get']}"),
        ("post", "-d x", f"{base}/v1/x?rid={r['post']}"),
        ("v1x", "", f"{base}/v1x?rid={r['v1x']}"),
        ("V1", "", f"{base}/V1/x?rid={r['V1']}"),
        ("v2", "", f"{base}/v2/x?rid={r['v2']}"),
        ("docs", "", f"{base}/docs?rid={r['docs']}"),
        ("docs-sub", "", f"{base}/docs/a/b?rid={r['docs-sub']}"),
        ("docsx", "", f"{base}/docsx?rid={r['docsx']}"),
        ("head", "-X DELETE", f"{base}/v1/x?rid={r['head']}"),
        ("http", "", f"http://ro.example.test/v1/x?rid={r['http']}"),  # port 80: no rule
    ])
    allowed = {"get", "docs", "docs-sub"}
    for k, v in r.items():
        if k in allowed:
            assert res[k][0] == "200", (k, res[k])
            assert len(seen(ups, v)) == 1
        else:
            assert "403" in res[k][:2], (k, res[k])
            assert seen(ups, v) == [], k


def test_allow_spec_port_and_path(gw, ups):
    r = {k: rid() for k in ("v1", "v2", "http", "other")}
    res = labeled_curls(gw, [
        ("v1", "", f"https://api.example.test/v1/echo?rid={r['v1']}"),
        ("v2", "", f"https://api.example.test/v2/echo?rid={r['v2']}"),
        ("http", "", f"http://api.example.test/v1/echo?rid={r['http']}"),
        ("other", "", f"https://gen.example.test/v1/echo?rid={r['other']}"),
    ], "--allow", "api.example.test:443/v1/", policy=False, vault=False, grant=False)
    assert res["v1"][0] == "200", res
    assert len(seen(ups, r["v1"])) == 1
    for k in ("v2", "http", "other"):
        assert "403" in res[k][:2], (k, res)
        assert seen(ups, r[k]) == [], k
    lines = gw.audit()
    assert any(l["decision"] == "allow" and l["path"] == "/v1/echo" for l in lines), lines
    assert sum(l["decision"] == "deny" for l in lines) >= 3, lines


PIPELINE = r"""
import socket, ssl, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(1)
s = ssl.create_default_context().wrap_socket(s, server_hostname="api.example.test")
reqs = b"".join(f"GET {p} HTTP/1.1\r\nHost: api.example.test\r\n\r\n".encode()
                for p in sys.argv[1:-1])
reqs += f"GET {sys.argv[-1]} HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n".encode()
s.sendall(reqs)  # all in one write: pipelined
data = b""
while True:
    try:
        c = s.recv(65536)
    except (OSError, ssl.SSLError):
        break
    if not c:
        break
    data += c
for line in data.split(b"\r\n"):
    if line.startswith(b"HTTP/1.1 "):
        print("STATUS", line.split()[1].decode())
"""


def test_per_request_decisions_in_one_connection(gw, ups):
    r1, r2, r3, r4, r5, r6 = (rid() for _ in range(6))
    w = "-w 'RES %{http_code} %{num_connects}\\n' -o /dev/null"
    pl = gw.script("pipeline.py", PIPELINE)
    p = gw.sh(f'curl -sS -H "x-api-key: $EXAMPLE_API_KEY" '
              f'{w} "https://api.example.test/v1/echo?rid={r1}" '
              f'{w} "https://api.example.test/admin?rid={r2}" '
              f'{w} "https://api.example.test/other?rid={r3}"; '
              f"python3 {pl} '/v1/echo?rid={r4}' '/admin/x?rid={r5}' '/v1/echo?rid={r6}'")
    out = p.stdout.decode().splitlines()
    res = [l.split()[1:] for l in out if l.startswith("RES")]
    assert [c for c, _ in res] == ["200", "403", "200"], out
    assert res[1][1] == "0" or res[2][1] == "0", f"curl did not reuse the connection: {out}"
    (rec,) = seen(ups, r1)
    assert header(rec, "x-api-key") == [SECRET_API]
    assert seen(ups, r2) == []
    (rec,) = seen(ups, r3)
    assert SECRET_API not in json.dumps(rec)
    statuses = [l.split()[1] for l in out if l.startswith("STATUS")]
    assert statuses[:2] == ["200", "403"], out
    assert len(seen(ups, r4)) == 1 and seen(ups, r5) == []
    assert len(seen(ups, r6)) <= 1


def test_large_bodies_stream_both_ways(gw, ups):
    n = 8_000_000
    r1, r2 = rid(), rid()
    want = __import__("hashlib").sha256(__import__("upstream").blob(n)).hexdigest()
    p = gw.sh(f'head -c {n} /dev/urandom > /tmp/up; sha256sum /tmp/up | cut -c1-64; '
              f'curl -sS --data-binary @/tmp/up -H "x-api-key: $EXAMPLE_API_KEY" '
              f'"https://api.example.test/v1/sink?rid={r1}"; '
              f'curl -sS "https://api.example.test/v1/blob?rid={r2}&n={n}" | sha256sum | cut -c1-64',
              timeout=120)
    out = p.stdout.decode().splitlines()
    assert len(out) == 3, out
    sink = json.loads(out[1])
    assert sink["len"] == n and sink["sha256"] == out[0], out
    assert sink["x-api-key"] == "[redacted]", out
    assert out[2] == want, out
    lines = {l["path"]: l for l in gw.audit()}
    assert lines["/v1/sink"]["bytes_up"] >= n, lines["/v1/sink"]
    assert lines["/v1/blob"]["bytes_down"] >= n, lines["/v1/blob"]


def test_network_open_still_vets_addresses(gw, ups):
    r1 = rid()
    port = ups.sentinel.port
    x = "-x http://127.0.0.1:3128 --noproxy '' --max-time 10"
    res = labeled_curls(gw, [
        ("api", "", f"https://api.example.test/v1/echo?rid={r1}"),
        ("localhost", x, f"http://localhost:{port}/"),
        ("loopback-ip", x, f"http://127.0.0.1:{port}/"),
        ("metadata", x, "http://169.254.169.254/latest/meta-data/"),
        ("mapped", x, f"http://[::ffff:127.0.0.1]:{port}/"),
        ("v6-loopback", x, f"http://[::1]:{port}/"),
        ("decimal", x, f"http://2130706433:{port}/"),
        ("hex", x, f"http://0x7f000001:{port}/"),
        ("octal", x, f"http://0177.0.0.1:{port}/"),
        ("short", x, f"http://127.1:{port}/"),
        ("zero", x, f"http://0.0.0.0:{port}/"),
        ("tls-localhost", x, f"https://localhost:{port}/"),
        ("tls-loopback-ip", x, f"https://127.0.0.1:{port}/"),
    ], "--network", "open", policy=False, vault=False, grant=False)
    assert res["api"][0] == "200", res
    for k in res:
        if k != "api":
            assert {"400", "403", "502"} & set(res[k][:2]), (k, res)
    assert ups.sentinel.others() == [], "the gateway connected to the host's loopback"


def test_sandbox_environment_and_ca(gw, ups):
    script = ("env | grep -iE '_proxy=|CA_|CERT|SSL' | sort; cat /etc/resolv.conf; "
              "openssl x509 -in /etc/airlock/ca.crt -noout -fingerprint -sha256; "
              "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt; "
              "grep -rlsI 'PRIVATE KEY' /etc /workspace /tmp /root /run | sed 's/^/KEY:/'; "
              "echo end")
    only_allow = dict(policy=False, vault=False, grant=False, upstreams=False, audit=False)
    p1 = gw.sh(script, "--allow", "api.example.test", **only_allow)
    p2 = gw.sh(script, "--allow", "api.example.test", **only_allow)
    out = p1.stdout.decode()
    env = dict(l.split("=", 1) for l in out.splitlines() if "=" in l and "SHA256" not in l)
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        assert env.get(k) == "http://127.0.0.1:3128", (k, env)
    for k in ("NO_PROXY", "no_proxy"):
        assert set(env.get(k, "").split(",")) == {"localhost", "127.0.0.1", "::1"}, env
    for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"):
        assert env.get(k) == "/etc/ssl/certs/ca-certificates.crt", (k, env)
    assert env.get("NODE_EXTRA_CA_CERTS") == "/etc/airlock/ca.crt", env
    assert "nameserver 127.0.0.1" in out
    assert "KEY:" not in out, out
    host_count = open("/etc/ssl/certs/ca-certificates.crt").read().count("BEGIN CERTIFICATE")
    counts = [int(l) for l in out.splitlines() if l.isdigit()]
    assert counts == [host_count + 1], (counts, host_count)
    fp1 = [l for l in out.splitlines() if "Fingerprint" in l]
    fp2 = [l for l in p2.stdout.decode().splitlines() if "Fingerprint" in l]
    assert fp1 and fp2 and fp1 != fp2, "two sandboxes share a CA"


def test_exit_status_passes_through(gw):
    p = gw.airlock.run("--allow", "api.example.test", "--", "/bin/sh", "-c", "exit 7")
    assert p.returncode == 7, p.stderr
    p = gw.airlock.run("--allow", "api.example.test", "--env", "HTTPS_PROXY=http://1.2.3.4:1",
                       "--", "true")
    assert p.returncode == 125 and len(p.stderr.decode().strip().splitlines()) == 1, p.stderr


def test_query_credential_duplicates_and_h2c(gw, ups):
    r1, r2, r3 = rid(), rid(), rid()
    p = gw.sh(f'curl -sS "https://gen.example.test/v1/x?key=a&rid={r1}&key=b"; '
              f'curl -sS "https://gen.example.test/v1/x?rid={r2}"; '
              f'curl -sS -o /dev/null -w "H2C %{{http_code}}\\n" --noproxy "*" --http2-prior-knowledge '
              f'"http://api.example.test/v1/echo?rid={r3}"; echo rc=$?')
    (rec,) = seen(ups, r1)
    assert rec["query_params"]["key"] == [SECRET_GEN], rec["query"]
    (rec,) = seen(ups, r2)
    assert rec["query_params"]["key"] == [SECRET_GEN], rec["query"]
    # HTTP/2 with prior knowledge on the plain path: "PRI * HTTP/2.0" is refused.
    assert seen(ups, r3) == []


def test_pinned_client_fails(gw, ups):
    """A client that trusts only the real upstream's CA (a pinned one) gets a
    certificate error instead of a way around the policy: there is no blind
    tunnel, so it never talks to the upstream at all."""
    with open(ups.ca) as f:
        put(gw.ws, "pinned.pem", f.read())
    r1, r2 = rid(), rid()
    p = gw.sh(
        f'curl -sS --cacert /workspace/pinned.pem "https://api.example.test/v1/echo?rid={r1}"; '
        'echo "curl=$?"; '
        'python3 -c "import ssl, urllib.request as u, sys\n'
        'ctx = ssl.create_default_context(cafile=\'/workspace/pinned.pem\')\n'
        'try:\n'
        f'    u.urlopen(\'https://api.example.test/v1/echo?rid={r2}\', context=ctx, timeout=10)\n'
        '    print(\'python=reached\')\n'
        'except Exception as e:\n'
        '    print(\'python=\' + type(getattr(e, \'reason\', e)).__name__)"')
    out = p.stdout.decode()
    assert "curl=60" in out, out  # CURLE_PEER_FAILED_VERIFICATION
    assert "python=SSLCertVerificationError" in out, out
    assert seen(ups, r1) == [] and seen(ups, r2) == [], "a pinned client reached the upstream"

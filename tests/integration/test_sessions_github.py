# SPDX-License-Identifier: Apache-2.0
"""Sessions on a GitHub repository, end to end through `airlock run --repo
https://github.com/OWNER/REPO`: the workspace is cloned inside the sandbox
through the gateway with the session's github:OWNER/REPO grant, the real
token from the vault goes upstream only, and nothing of the session holds it.

github.com and api.github.com are a local TLS server (upstream.py: git smart
HTTP through `git http-backend`, only with Basic x-access-token:TOKEN; an
echo of the request with `?echo`) that the preset's policy reaches through
its `upstreams:` overrides and trusts through `upstream_ca:`. It holds
acme/widgets, which the session is granted, and acme/widgets-evil and
other/thing, which it is not: were the credential ever put on their
requests, their clones would work.

What each test proves: the clone carries the real token upstream while no
file, checkpoint, event or output of the session holds it, and an echoing
upstream gives the sandbox only "[redacted]"; from inside, the siblings
(and api.github.com for them) get 403 and no credential, with the audit's
reason, while the granted repository works; a repository outside the
preset's github: list is refused before anything starts; a clone that fails
says why and leaves nothing; a fork keeps the grant; a github: list
narrowed by the operator takes the grant back from existing sessions.
"""
import base64
import json
import os
import pathlib
import secrets
import struct
import subprocess

import pytest

from test_sessions import Ctl
from upstream import Upstreams

TOKEN = "ghp_" + secrets.token_hex(18)
MODEL_KEY = "sk-ant-api03-" + secrets.token_hex(20)
REPOS = (("acme", "widgets"), ("acme", "widgets-evil"), ("other", "thing"))
URL = "https://github.com/acme/widgets"
BASIC = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
# Every form in which the token could be written down.
TOKEN_FORMS = [TOKEN.encode(), base64.b64encode(TOKEN.encode()),
               base64.b64encode(f"x-access-token:{TOKEN}".encode())]


@pytest.fixture(scope="module")
def ups(tmp_path_factory):
    u = Upstreams(tmp_path_factory.mktemp("gh-upstreams"), TOKEN, repos=REPOS)
    yield u
    u.close()


def preset_keys(ups, github):
    """The preset's GitHub part, indented as keys of test_sessions' preset."""
    return f"""\
    github: {github}
    upstream_ca: ["{ups.ca}"]
    policy:
      rules:
        - {{id: github, host: github.com}}
        - {{id: github-api, host: api.github.com}}
      credentials:
        - {{secret: github, host: github.com, basic: x-access-token, github: true}}
        - secret: github
          host: api.github.com
          header: authorization
          prefix: "Bearer "
          github: true
      upstreams:
        - {{host: github.com, port: 443, to: "127.0.0.1:{ups.tls_port}"}}
        - {{host: api.github.com, port: 443, to: "127.0.0.1:{ups.tls_port}"}}
"""


@pytest.fixture
def gh(airlock, tmp_path, ups):
    c = Ctl(airlock, tmp_path, network="restricted", extra_preset=preset_keys(ups, "[acme/*]"))
    for name, value in (("github", TOKEN), ("anthropic", MODEL_KEY)):
        c("vault", "set", name, input=(value + "\n").encode(), check=True)
    yield c
    c.stop_all()


def since(ups, mark):
    """What the upstreams saw after mark (a length of their record)."""
    return ups.records.snapshot()[mark:]


def git_requests(recs, owner, repo):
    """The git smart HTTP requests recs hold for owner/repo."""
    return [r for r in recs if r["host"].startswith("github.com")
            and r["path"].lower().startswith(f"/{owner}/{repo}".lower())
            and r["path"].lower()[len(owner) + len(repo) + 2:] in
            ("/info/refs", ".git/info/refs", "/git-upload-pack", ".git/git-upload-pack")]


def authorization(rec):
    return [v for k, v in rec["headers"] if k == "authorization"]


def answer(ctl, p):
    """The agent's final text of the turn p ran ("exit N\\n" + output for `run`)."""
    assert p.returncode == 0, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    t = [l["data"]["text"] for l in ctl.lines(p) if l.get("kind") == "text"]
    assert t, p.stdout
    return t[-1]


def audit(ctl, sid):
    path = ctl.state / "sessions" / "local" / sid / "audit.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def files_holding_token(*roots, skip=()):
    """Regular files under roots whose bytes hold the token in any form."""
    found = []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for n in names:
                f = os.path.join(dirpath, n)
                if f in skip or not os.path.isfile(f) or os.path.islink(f):
                    continue
                data = open(f, "rb").read()
                if any(t in data for t in TOKEN_FORMS):
                    found.append(f)
    return found


def store_plaintext(store):
    """Every chunk of the checkpoint store, decompressed, in pack order (a
    pack: "airlock-pack-1\\n", then [32-byte id][u32 ulen][u32 clen][a zstd
    frame of clen bytes]...; src/store/cas.c), as one byte string."""
    frames = []
    for f in sorted(pathlib.Path(store).rglob("*")):
        data = f.read_bytes() if f.is_file() and not f.is_symlink() else b""
        if not data.startswith(b"airlock-pack-1\n"):
            continue
        off = 15
        while off + 40 <= len(data):
            clen = struct.unpack_from("<I", data, off + 36)[0]
            frames.append(data[off + 40:off + 40 + clen])
            off += 40 + clen
    # zstd decompresses concatenated frames as one stream.
    return subprocess.run(["zstd", "-d", "-c", "-q"], input=b"".join(frames),
                          capture_output=True, check=True).stdout


def workspace_file(ctl, sid, name):
    """A file of the session's workspace as its sandbox sees it: in the
    upper directory when a turn changed it, else in the lower one."""
    sdir = ctl.state / "sessions" / "local" / sid
    tree = sdir / (sdir / "current").read_text()
    up = tree / "layer" / "upper" / "workspace" / name
    if up.exists():
        return up
    return ctl.state / "lowers" / "local" / (tree / "base").read_text() / "workspace" / name


def test_clone_uses_real_token_upstream_and_nothing_of_the_session_holds_it(gh, ups):
    mark = len(ups.records.snapshot())
    # The agent tries to read the credential back: an upstream that echoes
    # the request (Authorization included) on the granted repository's path
    # and API, the reply kept in the workspace (which the control plane's
    # event redaction never touches).
    p = gh.run("run cat README && git log --format=%s && git remote get-url origin && "
               "git config --list --show-origin | grep -vi user && "
               "curl -sS 'https://github.com/acme/widgets/info/refs?echo=1' > echo-git.json && "
               "curl -sS 'https://api.github.com/repos/acme/widgets?echo=1' > echo-api.json && "
               "env > env.txt && ls -a",
               "--repo", URL)
    sid = gh.session_of(p)
    text = answer(gh, p)
    assert text.startswith("exit 0\n"), text
    assert "content of acme/widgets\n" in text and "first commit of widgets" in text, text
    assert f"\n{URL}\n" in text and "\n.git\n" in text, text
    assert gh.result(p)["state"] == "succeeded"

    # The session: its source, its starting point holds the clone.
    s, turns = gh.show(sid)
    assert s["source"] == URL and len(turns) == 1
    assert workspace_file(gh, sid, "README").read_text() == "content of acme/widgets\n"
    assert workspace_file(gh, sid, ".git/HEAD").is_file()
    assert "echo-git.json" in gh("diff", sid, check=True).stdout.decode()

    # The upstream saw the real token on every request of the clone.
    recs = since(ups, mark)
    clone = git_requests(recs, "acme", "widgets")
    assert {r["path"] for r in clone} >= {"/acme/widgets/info/refs",
                                         "/acme/widgets/git-upload-pack"}, recs
    assert all(authorization(r) == [BASIC] for r in clone), clone
    # The echoes went out with the credential...
    echoed = [r for r in recs if "echo" in r["query_params"]]
    assert sorted(authorization(r)[0] for r in echoed) == sorted([BASIC, "Bearer " + TOKEN])
    # ...and came back to the sandbox redacted by the gateway.
    for name in ("echo-git.json", "echo-api.json"):
        body = workspace_file(gh, sid, name).read_bytes()
        assert b"[redacted]" in body and b"authorization" in body.lower(), body

    # No file of the session (its trees, audit log, the checkpoint store,
    # the database), no event, no output holds the token in any form, nor
    # did the sandbox's environment.
    vault = str(gh.state / "vault.yaml")
    assert files_holding_token(gh.state) == [vault]  # the scan finds what is there
    assert files_holding_token(gh.state, gh.a.state_dir, skip=(vault,)) == []
    plain = store_plaintext(gh.state / "store")
    assert b"content of acme/widgets\n" in plain and b"[redacted]" in plain
    assert not any(t in plain for t in TOKEN_FORMS)
    assert TOKEN not in workspace_file(gh, sid, "env.txt").read_text()
    out = p.stdout + p.stderr + gh("events", "--json", sid, check=True).stdout
    assert not any(t in out for t in TOKEN_FORMS)

    lines = audit(gh, sid)
    granted = [l for l in lines if l["host"] == "github.com" and l["credential"] == "github"]
    assert granted and all(l["decision"] == "allow" for l in granted), lines
    assert {l["path"] for l in granted} >= {"/acme/widgets/info/refs",
                                            "/acme/widgets/git-upload-pack"}


CLONE = ("cd /tmp && for r in {repos}; do "
         "GIT_TERMINAL_PROMPT=0 git clone -q https://github.com/$r c-${{r%/*}}-${{r#*/}} "
         ">/tmp/err 2>&1; echo \"$r rc=$?\"; sed 's/^/  /' /tmp/err; "
         "cat c-${{r%/*}}-${{r#*/}}/README 2>/dev/null; done")
OTHERS = ["acme/widgets-evil", "other/thing", "ACME/Widgets-Evil", "acme/widgets-evil.git"]


def check_refused(gh, ups, sid, text, mark, repos):
    """The clones of repos (in this order) in text failed with the gateway's
    403; the upstream never saw a credential for them; the audit says why
    (for the first: later identical denials are only counted)."""
    for r in repos:
        rc, *err = text.split(f"\n{r} rc=", 1)[1].split("\n")[:3]
        assert rc == "128", text
        assert "airlock: repository not granted to this run" in err[0], text
        assert f"'https://github.com/{r}/': The requested URL returned error: 403" in err[1], text
    assert "content of acme/widgets-evil" not in text and "content of other/thing" not in text
    # Refused before anything reached the upstream, with or without a credential.
    assert [r for r in since(ups, mark) if "widgets-evil" in r["path"].lower()
            or "/thing" in r["path"].lower()] == []
    lines = audit(gh, sid)
    refused = [l for l in lines if l["host"] == "github.com" and l["path"]
               and ("widgets-evil" in l["path"].lower() or "/thing" in l["path"].lower())]
    assert refused and refused[0]["path"].lower().startswith(f"/{repos[0].lower()}"), lines
    assert all((l["decision"], l["status"], l["credential"], l["reason"]) ==
               ("deny", 403, None, "repository not granted to this run") for l in refused), refused


def test_other_repositories_get_no_credential_from_inside(gh, ups):
    sid = gh.session_of(gh.run("recall", "--repo", URL))
    mark = len(ups.records.snapshot())
    # The siblings first, then the granted one, which still works.
    repos = " ".join(OTHERS + ["acme/widgets"])
    text = answer(gh, gh.turn(sid, "run " + CLONE.format(repos=repos)))
    assert "acme/widgets rc=0" in text and "content of acme/widgets\n" in text, text
    check_refused(gh, ups, sid, text, mark, OTHERS)
    # The API the same way: the granted repository with the bearer token,
    # a sibling refused before the upstream sees it.
    mark = len(ups.records.snapshot())
    text = answer(gh, gh.turn(sid, "run curl -sS -o /dev/null -w '%{http_code}\\n' "
                                   "https://api.github.com/repos/acme/widgets-evil?echo=1; "
                                   "curl -sS -o /dev/null -w '%{http_code}\\n' "
                                   "https://api.github.com/repos/acme/widgets?echo=1"))
    assert text.split("\n")[1:3] == ["403", "200"], text
    recs = since(ups, mark)
    assert [(r["path"], authorization(r)) for r in recs] == [
        ("/repos/acme/widgets", ["Bearer " + TOKEN])], recs


@pytest.mark.parametrize("url", ["https://github.com/other/thing",
                                 "https://github.com/acme-x/widgets",
                                 "https://github.com/acmex/widgets"])
def test_repository_outside_the_presets_list_refused_before_anything_starts(gh, ups, url):
    mark = len(ups.records.snapshot())
    p = gh.run("recall", "--repo", url)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert b"may not be granted" in p.stderr and b"github: list" in p.stderr, p.stderr
    assert gh("session", "list").stdout == b""
    # Nothing started: no session directory, no setup, no sandbox, no request.
    assert list(gh.state.glob("sessions/*/*")) == []
    assert not (gh.state / "tools").exists()
    assert gh.a.sandbox("list", "--json").stdout == b"[]\n"
    assert since(ups, mark) == []


def test_failed_clone_says_why_and_leaves_nothing(gh, ups):
    """A repository the list allows but the server does not have: the clone
    fails, the message says what git said (the session's directory, its
    audit log included, goes), and nothing of the session is left."""
    mark = len(ups.records.snapshot())
    p = gh.run("recall", "--repo", "https://github.com/acme/nothere")
    assert p.returncode == 125, (p.stdout, p.stderr)
    err = p.stderr.decode()
    assert "cannot clone https://github.com/acme/nothere (exit status 128): " in err, err
    assert "fatal: repository 'https://github.com/acme/nothere/' not found" in err, err
    assert gh("session", "list").stdout == b""
    assert list(gh.state.glob("sessions/*/*")) == []
    assert gh.a.sandbox("list", "--json").stdout == b"[]\n"
    # It was asked for with the grant's credential, and answered 404.
    asked = git_requests(since(ups, mark), "acme", "nothere")
    assert asked and all(authorization(r) == [BASIC] for r in asked), asked


def test_fork_keeps_the_grant(gh, ups):
    sid = gh.session_of(gh.run("recall", "--repo", URL))
    fork = gh("fork", sid, check=True).stdout.decode().strip()
    mark = len(ups.records.snapshot())
    # other/thing first: its refusal is the fork's sandbox's first audit line.
    others = ["other/thing"] + [r for r in OTHERS if r != "other/thing"]
    text = answer(gh, gh.turn(fork, "run git fetch -q origin && git ls-remote origin main && "
                                   "echo FETCHED; " + CLONE.format(repos=" ".join(others))))
    assert "\trefs/heads/main\nFETCHED\n" in text, text
    fetched = git_requests(since(ups, mark), "acme", "widgets")
    assert fetched and all(authorization(r) == [BASIC] for r in fetched), fetched
    check_refused(gh, ups, fork, text, mark, others)


def test_a_narrowed_github_list_takes_the_grant_back(gh, ups):
    """The operator takes acme/* out of the preset's github: list: the
    session made under it, and its fork, get no turn and no fork with the
    old grant (nothing reaches the upstream); with the list back, they do."""
    sid = gh.session_of(gh.run("recall", "--repo", URL))
    fork = gh("fork", sid, check=True).stdout.decode().strip()
    wide = gh.conf.read_text()
    assert "    github: [acme/*]\n" in wide
    gh.conf.write_text(wide.replace("    github: [acme/*]\n", "    github: [other/*]\n"))
    mark = len(ups.records.snapshot())
    for cmd in (("turn", sid, "run git fetch origin"), ("turn", fork, "run git fetch origin"),
                ("fork", sid)):
        p = gh(*cmd)
        assert p.returncode == 125, (cmd, p.stdout, p.stderr)
        assert b"is granted acme/widgets, which preset fake no longer allows (its github: list)" \
            in p.stderr, p.stderr
    assert since(ups, mark) == []
    assert [len(gh.show(x)[1]) for x in (sid, fork)] == [1, 0]
    assert len(gh.lines(gh("session", "list", "--json", check=True))) == 2
    gh.conf.write_text(wide)
    text = answer(gh, gh.turn(fork, "run git fetch -q origin && echo FETCHED"))
    assert text == "exit 0\nFETCHED\n", text


def test_each_turn_gets_its_own_egress_budget(airlock, tmp_path, ups):
    c = Ctl(airlock, tmp_path, network="restricted", extra_preset=preset_keys(ups, "[acme/*]"))
    text = c.conf.read_text()
    limits = "limits: {memory: 512M, turn_time: 60s, output: 4M}"
    assert limits in text
    c.conf.write_text(text.replace(limits, "limits: {memory: 512M, turn_time: 60s, output: 4M, "
                                   "egress_requests: 2}", 1))
    for name, value in (("github", TOKEN), ("anthropic", MODEL_KEY)):
        c("vault", "set", name, input=(value + "\n").encode(), check=True)
    try:
        probe = ("run for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' "
                 "https://api.github.com/repos/acme/widgets; done")
        p = c.run(probe)
        assert answer(c, p) == "exit 0\n200 200 403 "
        sid = c.session_of(p)
        # The next turn starts from zero again.
        p2 = c("turn", "--json", sid, probe)
        assert answer(c, p2) == "exit 0\n200 200 403 "
        said = [e["data"]["message"] for e in c.events(sid) if e["kind"] == "status" and
                e["data"].get("message", "").startswith("egress:")]
        assert len(said) == 2 and all(m.startswith("egress: 2 requests,") for m in said), said
        # (identical refusals are written once, then counted)
        refused = [a for a in audit(c, sid) if a["kind"] == "budget"]
        assert refused and all(a["decision"] == "deny" for a in refused), refused
        assert "budget" in refused[0]["reason"], refused
    finally:
        c.stop_all()

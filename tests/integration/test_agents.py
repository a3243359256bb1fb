# SPDX-License-Identifier: Apache-2.0
"""The main job with the real agent CLIs: `airlock run` and `airlock turn`
with the shipped agent definitions, each CLI installed from the npm
registry by its preset's setup (through the gateway), its model traffic
through the gateway to the scripted model server (tests/fixtures/
modelserver.py) under the real host name, the real key put in by the
gateway and only a dummy in the sandbox.

What setup installed is kept between runs (the tools directory below is
not removed), so a warm `make test` does not pay for npm again. Without a
reachable npm registry the tests are skipped, saying so.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from conftest import REPO, TEST_UID

sys.path.insert(0, str(REPO / "tests" / "fixtures"))
import modelserver  # noqa: E402

# Kept between runs (and shared by runs at the same time: a version's setup
# is made once, under its lock): the presets' setup results.
TOOLS = pathlib.Path(os.environ.get("AIRLOCK_TEST_AGENT_TOOLS", "/var/tmp/airlock-test-agents"))
STATE = None  # this run's, made by the agents fixture

REAL = {
    "anthropic": "sk-ant-api03-REAL-7e1d2c3b4a59687706f1e2d3c4b5a697",
    "openai": "sk-proj-REAL-1c7b6a5948372615a4b3c2d1e0f9a8b7",
    "google": "AIzaSyREAL-9a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8",
}
HOSTS = {"anthropic": "api.anthropic.com", "openai": "api.openai.com",
         "google": "generativelanguage.googleapis.com"}
HEADER = {"anthropic": "x-api-key", "openai": "authorization", "google": "x-goog-api-key"}
PROVIDER = {"claude": "anthropic", "codex": "openai", "gemini": "google", "pi": "anthropic",
            "opencode": "anthropic"}

SCRIPT = {"turns": [
    [{"tool": "write_file", "path": "hello.txt", "content": "hello from the model\n"},
     {"tool": "run", "command": "echo command-ran > ran.txt"},
     {"text": "Done: wrote hello.txt and ran the command."}],
    [{"text": "Second turn: I remember the first."}],
]}
PROMPT1 = "write hello.txt and run a command"
PROMPT2 = "second turn please"


def registry_cidrs():
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo("registry.npmjs.org", 443,
                                                      proto=socket.IPPROTO_TCP)}
    except OSError as e:
        pytest.skip(f"registry.npmjs.org does not resolve here ({e}): the agents cannot be "
                    "installed")
    return sorted(f"{a}/32" if ":" not in a else f"{a}/128" for a in addrs)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return modelserver.make_certs(tmp_path_factory.mktemp("model-tls"))


@pytest.fixture(scope="module")
def model(certs, tmp_path_factory):
    ca, cert, key = certs
    log = tmp_path_factory.mktemp("model-log") / "requests.jsonl"
    srv = modelserver.ModelServer(SCRIPT, log=str(log), certfile=cert, keyfile=key).start()
    yield srv, log
    srv.stop()


def config(state, port, ca, cidrs):
    presets = []
    for agent, prov in PROVIDER.items():
        presets.append(f"""
  {agent}:
    agent: {agent}
    limits: {{memory: 1536M, turn_time: 240s}}
    upstream_ca: [{ca}]
    policy:
      upstreams: [{{host: {HOSTS[prov]}, port: 443, to: "127.0.0.1:{port}"}}]
    setup:
      commands: []
      policy:
        rules: [{{host: registry.npmjs.org, methods: [GET, HEAD]}}]
        allow_cidrs: {json.dumps(cidrs)}""")
    return f"state_dir: {state}\ntools_dir: {TOOLS}\npresets:{''.join(presets)}\n"


class Agents:
    def __init__(self, airlock, conf):
        self.a = airlock
        self.conf = conf

    def __call__(self, *args, timeout=900, **kw):
        return self.a(args[0], "--config", str(self.conf), *args[1:], timeout=timeout, **kw)


@pytest.fixture(scope="module")
def agents(model, certs, tmp_path_factory):
    from conftest import Airlock
    srv, _ = model
    ca = certs[0]
    conf = tmp_path_factory.mktemp("agents-conf") / "airlock.yaml"
    global STATE
    STATE = tmp_path_factory.mktemp("agents-state")
    conf.write_text(config(STATE, srv.port, ca, registry_cidrs()))
    TOOLS.mkdir(mode=0o700, exist_ok=True)
    d = tmp_path_factory.mktemp("agents-sbx", numbered=True)
    a = Airlock(str(d), f"airlock-test/{os.getpid()}-agents")
    ag = Agents(a, conf)
    for name, key in REAL.items():
        p = ag("vault", "set", name, input=(key + "\n").encode())
        assert p.returncode == 0, p.stderr
    yield ag
    # Sessions go; the presets' setup results stay for the next run.
    for s in ag("session", "list", "--json").stdout.decode().splitlines():
        ag("session", "rm", json.loads(s)["id"])
    a.sandbox("gc")


def requests_since(log, n0):
    with open(log) as f:
        return [json.loads(l) for l in f.readlines()[n0:]]


def log_len(log):
    try:
        with open(log) as f:
            return len(f.readlines())
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini", "pi", "opencode"])
def test_agent_two_turns(agents, model, agent):
    srv, log = model
    prov = PROVIDER[agent]
    n0 = log_len(log)
    p = agents("run", "--preset", agent, "--json", PROMPT1)
    if p.returncode == 125 and b"setup step 0 failed" in p.stderr:
        pytest.fail(f"npm install through the gateway failed: {p.stderr.decode()[-3000:]}")
    assert p.returncode == 0, (p.stdout.decode()[-3000:], p.stderr.decode()[-3000:])
    out = [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]
    sid = out[0]["session"]
    res = out[-1]["result"]
    assert res["state"] == "succeeded" and res["usage"]["input_tokens"] > 0
    # The agent's own tools wrote the file and ran the command in the sandbox.
    d = agents("diff", sid).stdout.decode()
    assert "A hello.txt" in d and "A ran.txt" in d, d
    # Turn 2 resumes the agent's session: its request carries turn 1.
    n1 = log_len(log)
    p2 = agents("turn", "--json", sid, PROMPT2)
    assert p2.returncode == 0, (p2.stdout.decode()[-3000:], p2.stderr.decode()[-3000:])
    second = [r for r in requests_since(log, n1) if r.get("answer") == "main"]
    assert second and PROMPT1 in json.dumps(second[-1]["body"])
    # The upstream got the real key on every model call; nothing else did.
    reqs = [r for r in requests_since(log, n0) if r.get("answer") == "main"]
    assert reqs
    for r in reqs:
        assert REAL[prov] in r["headers"].get(HEADER[prov], ""), r["headers"]
    # The sandbox held only the dummy: not in the session's files (its
    # workspace and the agent's home), not in any event.
    tree = STATE / "sessions" / "local" / sid
    for f in tree.rglob("*"):
        if f.is_file() and not f.is_symlink():
            assert REAL[prov].encode() not in f.read_bytes(), f
    ev = agents("events", "--json", sid).stdout
    assert REAL[prov].encode() not in ev and ev
    # What the agent tried besides its model calls was refused and audited.
    audit = [json.loads(l) for l in (tree / "audit.jsonl").read_text().splitlines()]
    assert audit
    if agent == "claude":
        # Its settings call to the model host (which carries the key
        # header) is refused: the credential is the model calls' alone.
        assert any(a.get("decision") == "deny" and a.get("host") == HOSTS[prov] and
                   a.get("path", "").startswith("/api/claude_code/") for a in audit), audit
    for a in audit:
        if a.get("decision") == "allow" and a.get("host") == HOSTS[prov]:
            assert any(a.get("path", "").startswith(pfx) for pfx in
                       ("/v1/messages", "/v1/responses", "/v1beta/models/")), a

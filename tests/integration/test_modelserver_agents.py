# SPDX-License-Identifier: Apache-2.0
"""The real agent CLIs, installed from npm, in a sandbox behind the gateway,
against the scripted model server (tests/fixtures/modelserver.py).

Each CLI keeps its real model host name: the gateway's `--upstream
HOST:443=127.0.0.1:PORT` override sends the requests to the model server,
which holds a certificate for that name from a test CA (`--upstream-ca`).
The sandbox gets a dummy key in the CLI's variable; the gateway puts the
real one in the provider's header, only on the model paths the policy
allows. Per CLI, turn 1 writes a file and runs a command through the CLI's
own tools, then answers; turn 2 resumes the session from the same home.

The CLIs are installed once per version into a cache directory under /opt
(the sandboxes show the host's /usr and /opt read-only, not /var/cache):
`AIRLOCK_TEST_AGENTS_DIR` (default /opt/airlock-test/agents), one directory
per `package@version`. A missing one is installed with npm; without a
reachable registry the test is skipped, saying why. docs/agents.md says
what each CLI needs and why.
"""
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import sys
import uuid

import pytest

from conftest import TEST_UID, REPO

sys.path.insert(0, str(REPO / "tests" / "fixtures"))
import modelserver  # noqa: E402

AGENTS_DIR = pathlib.Path(os.environ.get("AIRLOCK_TEST_AGENTS_DIR", "/opt/airlock-test/agents"))
HOME = "/workspace/.home"

REAL = {
    "anthropic": "sk-ant-api03-REAL-4f1d2c3b4a59687706f1e2d3c4b5a697",
    "openai": "sk-proj-REAL-8c7b6a5948372615a4b3c2d1e0f9a8b7",
    "google": "AIzaSyREAL-1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8",
}
PROVIDERS = {
    # host, model paths (rule and credential scope), header, prefix, dummy variable
    "anthropic": ("api.anthropic.com", ["/v1/messages"], "x-api-key", None, "ANTHROPIC_API_KEY"),
    "openai": ("api.openai.com", ["/v1/responses"], "authorization", "Bearer ", "OPENAI_API_KEY"),
    "google": ("generativelanguage.googleapis.com", ["/v1beta/models"], "x-goog-api-key", None,
               "GEMINI_API_KEY"),
}
DUMMY = "airlock-dummy-model-key"

SCRIPT = {"turns": [
    [{"tool": "write_file", "path": "hello.txt", "content": "hello from the model\n"},
     {"tool": "run", "command": "echo command-ran > ran.txt"},
     {"text": "Done: wrote hello.txt and ran the command."}],
    [{"text": "Second turn: I remember the first."}],
]}
PROMPT1 = "write hello.txt and run a command"
PROMPT2 = "second turn please"

CODEX_CONFIG = """\
# HTTPS only: no Responses WebSocket (a provider of our own; the built-in
# `openai` provider cannot be changed), no analytics, no plugins.
model_provider = "airlock-openai"

[analytics]
enabled = false

[features]
plugins = false

[model_providers.airlock-openai]
name = "OpenAI"
base_url = "https://api.openai.com/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
supports_websockets = false
"""
GEMINI_SETTINGS = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "advanced": {"autoConfigureMemory": False},
}


def lines(out):
    return [json.loads(l) for l in out.splitlines() if l.strip().startswith("{")]


# ---- per CLI: how to run it, and what success looks like in its output

def claude_ok(out):
    res = [e for e in lines(out) if e.get("type") == "result"]
    assert res and res[-1]["is_error"] is False and res[-1]["subtype"] == "success", out[-2000:]
    return res[-1]["result"]


def codex_ok(out):
    ev = lines(out)
    assert any(e["type"] == "turn.completed" for e in ev), out[-2000:]
    assert not any(e["type"] in ("turn.failed", "error") for e in ev), out[-2000:]
    msgs = [e["item"]["text"] for e in ev if e["type"] == "item.completed"
            and e["item"]["type"] == "agent_message"]
    return msgs[-1]


def gemini_ok(out):
    ev = lines(out)
    assert ev[-1]["type"] == "result" and ev[-1]["status"] == "success", out[-2000:]
    return "".join(e["content"] for e in ev if e["type"] == "message" and e["role"] == "assistant")


def pi_ok(out):
    ends = [e for e in lines(out) if e["type"] == "agent_end"]
    last = [m for m in ends[-1]["messages"] if m["role"] == "assistant"][-1]
    assert last["stopReason"] == "stop", out[-2000:]
    return "".join(c["text"] for c in last["content"] if c["type"] == "text")


def opencode_ok(out):
    ev = lines(out)
    assert not any(e["type"] == "error" for e in ev), out[-2000:]
    fin = [e for e in ev if e["type"] == "step_finish"]
    assert fin and fin[-1]["part"]["reason"] == "stop", out[-2000:]
    return [e["part"]["text"] for e in ev if e["type"] == "text"][-1]


AGENTS = {
    "claude": dict(
        package="@anthropic-ai/claude-code", version="2.1.332", bin="claude", provider="anthropic",
        env=[f"CLAUDE_CONFIG_DIR={HOME}/.claude", "IS_SANDBOX=1",
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
             "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1"],
        first=lambda b, p, s: [b, "-p", "--output-format", "stream-json", "--verbose",
                               "--dangerously-skip-permissions", "--session-id", s, "--", p],
        next=lambda b, p, s: [b, "-p", "--output-format", "stream-json", "--verbose",
                              "--dangerously-skip-permissions", "--resume", s, "--", p],
        session=lambda out, chosen: chosen, ok=claude_ok,
        # 401 is retried (10 times, minutes of backoff) unless told otherwise.
        fail_env=["CLAUDE_CODE_MAX_RETRIES=0"], exit_401=1,
        # Left with CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: two GETs under
        # /api/claude_code/ on the model host (refused: not a model path).
        denied=set()),
    "codex": dict(
        package="@openai/codex", version="0.171.0", bin="codex", provider="openai",
        env=[f"CODEX_HOME={HOME}/.codex"], files={".codex/config.toml": CODEX_CONFIG},
        first=lambda b, p, s: [b, "exec", "--json", "--skip-git-repo-check",
                               "--dangerously-bypass-approvals-and-sandbox", "--", p],
        next=lambda b, p, s: [b, "exec", "resume", "--json", "--skip-git-repo-check",
                              "--dangerously-bypass-approvals-and-sandbox", "--", s, p],
        session=lambda out, chosen: lines(out)[0]["thread_id"], ok=codex_ok, denied=set(),
        # 401 is retried 5 times unless told otherwise.
        fail_args=["-c", "model_providers.airlock-openai.request_max_retries=0",
                   "-c", "model_providers.airlock-openai.stream_max_retries=0"], exit_401=1),
    "gemini": dict(
        package="@google/gemini-cli", version="0.61.0", bin="gemini", provider="google",
        env=["GEMINI_CLI_TRUST_WORKSPACE=true", "GEMINI_CLI_NO_RELAUNCH=true"],
        files={".gemini/settings.json": json.dumps(GEMINI_SETTINGS, indent=1)},
        # `--prompt=P`: with `-p P` a prompt starting with "-" would be read as an option.
        first=lambda b, p, s: [b, "-o", "stream-json", "--yolo", "--session-id", s,
                               f"--prompt={p}"],
        next=lambda b, p, s: [b, "-o", "stream-json", "--yolo", "--resume", s, f"--prompt={p}"],
        session=lambda out, chosen: chosen, ok=gemini_ok, denied=set(),
        exit_401=401 % 256),  # the HTTP status, modulo 256
    "pi": dict(
        package="@mariozechner/pi-coding-agent", version="0.73.1", bin="pi",
        provider="anthropic", env=[f"PI_CODING_AGENT_DIR={HOME}/.pi/agent", "PI_OFFLINE=1"],
        # pi has no `--`: a prompt starting with "-" is refused as an unknown option
        # (give that one on stdin instead: `-p` with no message reads it).
        first=lambda b, p, s: [b, "--provider", "anthropic", "--model", "claude-sonnet-4-5",
                               "--mode", "json", "-p", p],
        next=lambda b, p, s: [b, "--provider", "anthropic", "--model", "claude-sonnet-4-5",
                              "--mode", "json", "--session", s, "-p", p],
        session=lambda out, chosen: lines(out)[0]["id"], ok=pi_ok, denied=set(),
        exit_401=0),  # JSON mode exits 0 after an error: the stream says so
    "opencode": dict(
        package="opencode-ai", version="1.18.33", bin="opencode", provider="anthropic",
        env=["OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1",
             "OPENCODE_DISABLE_DEFAULT_PLUGINS=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1",
             "OPENCODE_DISABLE_SHARE=1"],
        first=lambda b, p, s: [b, "run", "--format", "json", "-m", "anthropic/claude-sonnet-4-5",
                               "--auto", "--", p],
        next=lambda b, p, s: [b, "run", "--format", "json", "-m", "anthropic/claude-sonnet-4-5",
                              "--auto", "-s", s, "--", p],
        session=lambda out, chosen: lines(out)[0]["sessionID"], ok=opencode_ok, exit_401=1,
        # Its background install of @opencode-ai/plugin into the config directory.
        denied={"registry.npmjs.org"}),
}


# ---- installation (cached per version)

def install_dir(agent):
    a = AGENTS[agent]
    return AGENTS_DIR / f"{a['package'].replace('/', '+')}@{a['version']}"


def installed_bin(agent):
    """The CLI's bin path, installing package@version into the cache if needed."""
    a = AGENTS[agent]
    d = install_dir(agent)
    b = d / "node_modules" / ".bin" / a["bin"]
    if b.exists():
        return b
    if not shutil.which("npm"):
        pytest.skip("npm is not installed")
    AGENTS_DIR.mkdir(parents=True, exist_ok=True)
    with open(AGENTS_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if b.exists():
            return b
        spec = f"{a['package']}@{a['version']}"
        try:
            p = subprocess.run(["npm", "view", spec, "version", "--fetch-retries=0",
                                "--fetch-timeout=15000"], capture_output=True, text=True,
                               timeout=60)
        except subprocess.TimeoutExpired:
            p = None
        if p is None or p.returncode != 0 or p.stdout.strip() != a["version"]:
            why = " / ".join(p.stderr.strip().splitlines()[:2]) if p else "timed out"
            pytest.skip(f"{spec} is not installed in {AGENTS_DIR} and the npm registry does not "
                        f"answer for it: {why}")
        tmp = d.with_name(d.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        p = subprocess.run(["npm", "install", "--no-fund", "--no-audit", "--prefix", str(tmp),
                            spec], capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"npm install {spec}: {p.stderr[-2000:]}"
        os.rename(tmp, d)
    return b


# ---- the run

@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return modelserver.make_certs(tmp_path_factory.mktemp("model-tls"))


class Run:
    """One persistent sandbox behind the gateway, its model server and its files."""

    def __init__(self, airlock, workspace, tmp_path, certs, agent):
        self.airlock, self.ws, self.agent = airlock, workspace, AGENTS[agent]
        self.bin = str(installed_bin(agent))
        self.provider = self.agent["provider"]
        host, paths, header, prefix, var = PROVIDERS[self.provider]
        self.host, self.paths, self.header, self.prefix, self.var = host, paths, header, prefix, var
        ca, cert, key = certs
        self.srv = modelserver.ModelServer(SCRIPT, log=str(tmp_path / "requests.jsonl"),
                                           certfile=cert, keyfile=key).start()
        d = tmp_path / "gw"
        d.mkdir(mode=0o700)
        vault = d / "vault.yaml"
        fd = os.open(vault, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"secrets:\n  model-key: \"{REAL[self.provider]}\"\n")
        cred = {"secret": "model-key", "host": host, "paths": paths, "header": header,
                "env": var, "dummy": DUMMY}
        if prefix:
            cred["prefix"] = prefix
        policy = d / "policy.yaml"
        policy.write_text(json.dumps({  # JSON is YAML
            "rules": [{"id": "model", "host": host, "port": 443, "methods": ["POST"],
                       "paths": paths}],
            "credentials": [cred]}))
        for rel, text in self.agent.get("files", {}).items():
            self.put(f".home/{rel}", text)
        env = [f"HOME={HOME}", *self.agent["env"]]
        args = ["create", "--network", "restricted", "--policy", str(policy), "--vault",
                str(vault), "--upstream", f"{host}:443=127.0.0.1:{self.srv.port}",
                "--upstream-ca", ca, "--workspace", str(workspace)]
        for e in env:
            args += ["--env", e]
        p = airlock.sandbox(*args, check=True)
        self.sid = p.stdout.decode().strip()

    def put(self, rel, text):
        p = self.ws / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        q = p
        while q != self.ws:
            os.chown(q, TEST_UID, TEST_UID)
            q = q.parent

    def exec(self, *argv, env=(), timeout=180):
        e = [x for v in env for x in ("--env", v)]
        p = self.airlock.sandbox("exec", *e, "--timeout", str(timeout - 10), self.sid, "--", *argv,
                                 timeout=timeout, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")

    def audit(self):
        p = self.airlock.sandbox("audit", self.sid, check=True)
        return [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]

    def close(self):
        self.airlock.sandbox("destroy", self.sid)
        self.srv.stop()


@pytest.mark.parametrize("agent", list(AGENTS))
def test_agent_two_turns_behind_gateway(airlock, workspace, tmp_path, certs, agent):
    run = Run(airlock, workspace, tmp_path, certs, agent)
    a = run.agent
    try:
        chosen = str(uuid.uuid4())
        rc, out, err = run.exec(*a["first"](run.bin, PROMPT1, chosen))
        assert rc == 0, f"turn 1 exited {rc}\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
        assert "Done: wrote hello.txt" in a["ok"](out)
        # The CLI's own tools did the work, as the sandbox's root in the workspace.
        assert (workspace / "hello.txt").read_text() == "hello from the model\n"
        assert (workspace / "ran.txt").read_text() == "command-ran\n"
        assert (workspace / "hello.txt").stat().st_uid == TEST_UID
        session = a["session"](out, chosen)

        first_turn = len(run.srv.records)
        rc, out, err = run.exec(*a["next"](run.bin, PROMPT2, session))
        assert rc == 0, f"turn 2 exited {rc}\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
        assert "Second turn" in a["ok"](out)

        main = [r for r in run.srv.records if r.get("answer") == "main"]
        assert [(r["turn"], r["step"]) for r in main] == [(0, 0), (0, 1), (0, 2), (1, 0)], \
            [(r["path"], r.get("turn"), r.get("step")) for r in run.srv.records]
        # Turn 2's request carries turn 1: its prompt, the tool results, the answer.
        resumed = json.dumps(main[-1]["body"])
        assert PROMPT1 in resumed and PROMPT2 in resumed
        assert "Done: wrote hello.txt and ran the command." in resumed
        assert run.srv.records.index(main[-1]) >= first_turn

        # Upstream, every request had the real key in the provider's header, and only
        # model paths were asked for (anything else was refused by the gateway).
        want = (run.prefix or "") + REAL[run.provider]
        for r in run.srv.records:
            assert any(r["path"].startswith(p) for p in run.paths), r["path"]
            assert r["headers"].get(run.header) == want, (r["path"], r["headers"])
        assert DUMMY not in json.dumps(run.srv.records)

        # Inside, only the dummy: in the environment, and nowhere in what the CLI wrote.
        secret = REAL[run.provider]
        rc, out, err = run.exec("sh", "-c", f"echo ${run.var}; env | grep -cF -- '{secret}'; "
                                "grep -rlF -- \"$0\" /workspace /root /tmp /etc /home /run /var "
                                "2>/dev/null; true", secret)
        assert out.split("\n")[:2] == [DUMMY, "0"], out
        assert out.split("\n")[2:] == [""], f"the real key inside the sandbox: {out}"

        # What else it tried is in the audit log, refused: nothing of the model's.
        audit = run.audit()
        print(agent, "refused:", sorted({(l["host"], l.get("path")) for l in audit
                                         if l["decision"] == "deny"}, key=str))
        denied = {l["host"] for l in audit if l["decision"] == "deny"}
        assert denied <= a["denied"] | {run.host}, audit
        assert not any(l["decision"] == "deny" and l["host"] == run.host
                       and any(l.get("path", "").startswith(p) for p in run.paths)
                       for l in audit), audit
    finally:
        run.close()


@pytest.mark.parametrize("agent", list(AGENTS))
def test_agent_api_error_is_a_failure(airlock, workspace, tmp_path, certs, agent):
    """A 401 from the model is reported as a failure, in each CLI's own way."""
    run = Run(airlock, workspace, tmp_path, certs, agent)
    a = run.agent
    run.srv.set_script({"turns": [[{"fail": {"status": 401, "message": "scripted bad key"}}]]})
    try:
        argv = a["first"](run.bin, PROMPT1, str(uuid.uuid4()))
        argv[1:1] = a.get("fail_args", [])
        rc, out, err = run.exec(*argv, env=a.get("fail_env", []))
        assert rc == a["exit_401"], f"exit {rc}\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
        with pytest.raises(AssertionError):
            a["ok"](out)
        assert "scripted bad key" in out + err
        assert not (workspace / "hello.txt").exists()
        assert {r.get("status") for r in run.srv.records if r.get("answer") == "main"} == {401}
    finally:
        run.close()


# ---- the model server itself, without a CLI

def _post(port, path, body, headers=()):
    """(status, parsed SSE events or JSON, complete?) of one plain-HTTP request."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **dict(headers)})
    r = c.getresponse()
    try:
        data, complete = r.read(), True
    except http.client.IncompleteRead as e:
        data, complete = e.partial, False
    c.close()
    if not r.getheader("Content-Type", "").startswith("text/event-stream"):
        return r.status, json.loads(data) if complete else data, complete
    events = []
    for block in data.decode().split("\n\n"):
        d = [l[6:] for l in block.strip().replace("\r", "").split("\n") if l.startswith("data: ")]
        if d and d[0] != "[DONE]":
            events.append(json.loads(d[0]))
    return r.status, events, complete


def test_modelserver_speaks_each_api(tmp_path):
    srv = modelserver.ModelServer(SCRIPT, log=str(tmp_path / "log.jsonl")).start()
    try:
        # Anthropic: the Write tool with an absolute path from the prompt's working directory.
        claude = {"model": "m", "stream": True, "system": " - Primary working directory: /w\n",
                  "tools": [{"name": "Write", "input_schema": {"properties": {
                      "file_path": {}, "content": {}}}}, {"name": "Bash", "input_schema": {
                          "properties": {"command": {"type": "string"}}}}],
                  "messages": [{"role": "user", "content": PROMPT1}]}
        st, ev, ok = _post(srv.port, "/v1/messages", claude)
        assert st == 200 and ok
        assert [e["type"] for e in ev][:2] == ["message_start", "ping"]
        assert ev[-2]["delta"]["stop_reason"] == "tool_use" and ev[-1]["type"] == "message_stop"
        args = "".join(e["delta"]["partial_json"] for e in ev if e["type"] == "content_block_delta")
        assert json.loads(args) == {"file_path": "/w/hello.txt",
                                    "content": "hello from the model\n"}
        # The next step comes from the history: one tool call answered, so the command.
        claude["messages"] += [{"role": "assistant", "content": [{"type": "tool_use"}]},
                               {"role": "user", "content": [{"type": "tool_result"}]}]
        st, ev, ok = _post(srv.port, "/v1/messages", claude)
        assert ev[1]["type"] == "ping" and ev[2]["content_block"]["name"] == "Bash"
        # A finished turn in the history: the second turn's answer, here without streaming.
        claude["messages"] += [{"role": "assistant", "content": [{"type": "text", "text": "x"}]},
                               {"role": "user", "content": PROMPT2}]
        st, msg, ok = _post(srv.port, "/v1/messages", dict(claude, stream=False))
        assert msg["content"] == [{"type": "text", "text": "Second turn: I remember the first."}]

        # OpenAI Responses, Codex's code mode: JavaScript calling the nested tools.
        codex = {"model": "m", "stream": True, "input": [
            {"type": "additional_tools", "tools": [{"type": "namespace", "name": "functions",
             "tools": [{"type": "custom", "name": "exec", "description": "await tools.x()"}]}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "<cwd>/w</cwd>"}]}]}
        st, ev, ok = _post(srv.port, "/v1/responses", codex)
        done = [e["item"] for e in ev if e["type"] == "response.output_item.done"]
        assert done[0]["type"] == "custom_tool_call" and done[0]["name"] == "exec"
        assert "tools.apply_patch" in done[0]["input"]
        assert "+hello from the model" in done[0]["input"]
        assert ev[-1]["type"] == "response.completed"
        assert ev[-1]["response"]["usage"]["total_tokens"]

        # Chat Completions with a bash function.
        chat = {"model": "m", "stream": True, "stream_options": {"include_usage": True},
                "tools": [{"type": "function", "function": {"name": "bash", "parameters": {
                    "properties": {"command": {"type": "string"}}}}}],
                "messages": [{"role": "user", "content": PROMPT1},
                             {"role": "assistant", "tool_calls": [{}]}, {"role": "tool"}]}
        st, ev, ok = _post(srv.port, "/v1/chat/completions", chat)
        calls = [e["choices"][0]["delta"]["tool_calls"][0] for e in ev
                 if e["choices"] and "tool_calls" in e["choices"][0]["delta"]]
        assert calls[0]["function"]["name"] == "bash"
        assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {
            "command": "echo command-ran > ran.txt"}
        assert ev[-1]["usage"]["prompt_tokens"] > 0

        # Gemini: a functionCall; a JSON side request gets an object fitting its schema.
        gem = {"tools": [{"functionDeclarations": [{"name": "write_file", "parametersJsonSchema": {
            "properties": {"file_path": {}, "content": {}}}}]}],
               "contents": [{"role": "user", "parts": [{"text": PROMPT1}]}]}
        st, ev, ok = _post(srv.port, "/v1beta/models/g:streamGenerateContent?alt=sse", gem)
        part = ev[-1]["candidates"][0]["content"]["parts"][0]
        assert part["functionCall"]["name"] == "write_file"
        side = {"contents": [{"role": "user", "parts": [{"text": "route"}]}], "generationConfig": {
            "responseJsonSchema": {"type": "OBJECT", "properties": {
                "complexity_score": {"type": "INTEGER"},
                "next_speaker": {"enum": ["model", "user"]}}}}}
        st, msg, ok = _post(srv.port, "/v1beta/models/g:generateContent", side)
        assert json.loads(msg["candidates"][0]["content"]["parts"][0]["text"]) == {
            "complexity_score": 1, "next_speaker": "user"}

        # Every request was recorded, with its headers, and logged.
        assert len(srv.records) == 7
        assert srv.records[0]["headers"]["content-type"] == "application/json"
        first = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[0])
        assert first["path"] == "/v1/messages" and first["answer"] == "main"
    finally:
        srv.stop()


def test_modelserver_failures():
    srv = modelserver.ModelServer().start()
    claude = {"stream": True, "tools": [{"name": "Bash"}],
              "messages": [{"role": "user", "content": "x"}]}
    try:
        srv.set_script({"turns": [[{"fail": {"status": 429, "message": "slow down"}}]]})
        st, body, ok = _post(srv.port, "/v1/messages", claude)
        assert st == 429 and body["error"] == {"type": "rate_limit_error", "message": "slow down"}
        st, body, ok = _post(srv.port, "/v1/responses", {"input": [], "tools": [
            {"type": "function", "name": "shell"}]})
        assert st == 429 and body["error"]["code"] == "rate_limit_exceeded"

        srv.set_script({"turns": [[{"fail": {"stream_error": "Overloaded",
                                             "after_text": "part"}}]]})
        st, ev, ok = _post(srv.port, "/v1/messages", claude)
        assert st == 200 and ok and ev[-1]["type"] == "error"
        assert not any(e["type"] == "message_stop" for e in ev)

        srv.set_script({"turns": [[{"fail": {"truncate": True, "after_text": "part"}}]]})
        st, ev, ok = _post(srv.port, "/v1/messages", claude)
        assert st == 200 and not ok  # no last chunk: the connection was closed mid-stream

        # `times`: the first request fails, the retry gets the next step.
        srv.set_script({"turns": [[{"fail": {"status": 500, "times": 1}}, {"text": "fine"}]]})
        assert _post(srv.port, "/v1/messages", dict(claude, stream=False))[0] == 500
        st, msg, ok = _post(srv.port, "/v1/messages", dict(claude, stream=False))
        assert st == 200 and msg["content"][0]["text"] == "fine"

        # Anything else: 404, logged.
        assert _post(srv.port, "/v1/unknown", {})[0] == 404
        assert srv.records[-1]["answer"] == "other" and srv.records[-1]["path"] == "/v1/unknown"
    finally:
        srv.stop()

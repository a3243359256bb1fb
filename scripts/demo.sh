#!/usr/bin/env bash
# `make demo`: airlock's main job end to end on this machine — a real agent
# CLI (Claude Code, installed from the npm registry by its preset's setup)
# works on a small repository inside a sandbox holding only a dummy key,
# with a checkpoint after every turn, a second turn that remembers the
# first, and a fork — then the sandbox, the gateway and the checkpoint
# store step by step. No model provider is reachable here: a scripted model
# server (tests/fixtures/modelserver.py) answers under the provider's real
# host name, through the gateway, which puts the real key in.
set -uo pipefail
AIRLOCK=${1:-build/src/cli/airlock}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
	echo "demo: airlock's sandbox needs root; run: sudo make demo" >&2
	exit 1
fi
bold=$(tput bold 2>/dev/null || true); off=$(tput sgr0 2>/dev/null || true)
step() { printf '\n%s==> %s%s\n' "$bold" "$*" "$off"; }
show() { printf '$ %s\n' "$*"; "$@"; printf '(exit status %s)\n' "$?"; }
fail() { echo "demo: $*" >&2; exit 1; }

ws=$(mktemp -d /tmp/airlock-demo-XXXXXX)
chown nobody: "$ws"
server=""
api=""
ck=""
model=""
# What the preset's setup installed is kept here between demos.
DEMO_STATE=/var/tmp/airlock-demo
cleanup() {
	[ -n "$server" ] && kill "$server" 2>/dev/null
	[ -n "$api" ] && kill "$api" 2>/dev/null
	[ -n "$model" ] && kill "$model" 2>/dev/null
	rm -rf "$ws"
	[ -n "$ck" ] && rm -rf "$ck"
}
trap cleanup EXIT

# ---- the main job ----

d=$ws/.demo
mkdir -p "$d" && chmod 700 "$d"
cat >"$d/script.json" <<'JSON'
{"turns": [
  [{"tool": "write_file", "path": "greeting.py",
    "content": "def greet(name):\n    return f\"Hello, {name}!\"\n\nprint(greet(\"airlock\"))\n"},
   {"tool": "run", "command": "python3 greeting.py > greeting.out && cat greeting.out"},
   {"text": "I added greeting.py, ran it, and saved its output in greeting.out."}],
  [{"text": "Earlier you asked me to add a greeting: greeting.py prints Hello, airlock!"}],
  [{"tool": "write_file", "path": "FORKED.md", "content": "This line exists only in the fork.\n"},
   {"text": "Added FORKED.md in the fork."}]
]}
JSON
python3 "$ROOT/tests/fixtures/modelserver.py" --script "$d/script.json" --log "$d/model.jsonl" \
	--tls "$d/tls" >"$d/model.out" 2>&1 &
model=$!
for _ in $(seq 100); do grep -q '^port ' "$d/model.out" 2>/dev/null && break; sleep 0.1; done
mport=$(sed -n 's/^port //p' "$d/model.out")
[ -n "$mport" ] || fail "the model server did not start: $(cat "$d/model.out")"
cidrs=$(getent ahosts registry.npmjs.org | awk '{print $1}' | sort -u |
	sed 's,$,/32,; s,\(:.*\)/32,\1/128,' | paste -sd, -)
[ -n "$cidrs" ] || fail "registry.npmjs.org does not resolve: the agent cannot be installed"
mkdir -p "$DEMO_STATE" && chmod 700 "$DEMO_STATE"
cat >"$d/airlock.yaml" <<YAML
# The operator's config: one preset, Claude Code, restricted to its model
# host (here routed to the scripted model server by an upstream override).
state_dir: $DEMO_STATE
presets:
  claude:
    agent: claude
    limits: {memory: 2G, turn_time: 5m}
    upstream_ca: [$d/tls/ca.crt]
    policy:
      upstreams: [{host: api.anthropic.com, port: 443, to: "127.0.0.1:$mport"}]
    setup:
      commands: []
      policy:
        rules: [{host: registry.npmjs.org, methods: [GET, HEAD]}]
        # On this machine the registry's addresses are in ranges the
        # gateway refuses by default; in production they are public.
        allow_cidrs: [$cidrs]
YAML
al() { "$AIRLOCK" "$1" --config "$d/airlock.yaml" "${@:2}"; }
REAL_KEY=sk-ant-api03-DEMO-real-key-0123456789abcdef0123456789abcdef
repo=$ws/project
mkdir -p "$repo"
printf '# project\n\nA small repository for the demo.\n' >"$repo/README.md"
chown -R nobody: "$repo"

step "The real key goes into the vault, which only the gateway reads"
printf '$ airlock vault set anthropic   (the key on standard input)\n'
echo "$REAL_KEY" | al vault set anthropic || fail "vault set failed"
al vault list

step "airlock run: Claude Code works on the repository in a sandbox (setup installs it once)"
printf '$ airlock run --preset claude --repo %s "add a greeting and run it"\n' "$repo"
al run --preset claude --repo "$repo" "add a greeting and run it" 2> >(tee "$d/run.err" >&2)
rc=$?
wait $! 2>/dev/null # the tee
echo "(exit status $rc)"
[ "$rc" -eq 0 ] || fail "the first turn failed"
sid=$(sed -n 's/^airlock: session //p' "$d/run.err")

step "The events, as stored (bounded, redacted)"
show al events "$sid"

step "The checkpoint after the turn, and what the turn changed"
show al session show "$sid"
show al diff --text "$sid"

step "A second turn resumes the agent's own session: it remembers the first"
show al turn "$sid" "what did I ask you to do before?"
python3 - "$d/model.jsonl" <<'PY'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1]) if '"answer": "main"' in l or '"answer":"main"' in l]
last = json.dumps(reqs[-1]["body"])
print("the model's last request carries turn 1's message:", "add a greeting and run it" in last)
PY

step "A fork from that checkpoint: a new session, its own sandbox, the same history"
fork=$(al fork "$sid")
echo "fork: $fork"
show al turn "$fork" "add a note that exists only in the fork"
show al diff "$fork"
echo "in the original session's last checkpoint, FORKED.md: $(al diff --all "$sid" 1 | grep -c FORKED.md) times"

step "The real key reached the model server; the sandbox only ever held the dummy"
python3 - "$d/model.jsonl" "$REAL_KEY" <<'PY'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
keys = {r["headers"].get("x-api-key") for r in reqs if r.get("path", "").startswith("/v1/messages")}
print("x-api-key values the upstream received on model calls:",
      ", ".join(sorted(k[:14] + "..." for k in keys if k)), "(the real key:", sys.argv[2][:14] + "...)")
PY
hits=$(grep -rlF "$REAL_KEY" "$DEMO_STATE/sessions" 2>/dev/null | wc -l)
ev=$(al events --json "$sid" | grep -cF "$REAL_KEY")
echo "files of the sessions (workspaces, agent homes) holding the real key: $hits; events: $ev"
audit=$DEMO_STATE/sessions/local/$sid/audit.jsonl
echo "the gateway's decisions for the session's sandboxes ($(wc -l <"$audit") lines), e.g.:"
grep '"decision":"deny"' "$audit" | head -2
grep '"decision":"allow"' "$audit" | head -1
al session rm "$fork"
al session rm "$sid"

# ---- the parts, one by one ----

step "What this kernel offers"
"$AIRLOCK" doctor

step "Root inside is an unprivileged range outside; the host's secrets are not there"
show "$AIRLOCK" sandbox run --workspace "$ws" -- /bin/sh -c \
	'id; echo "uid map: $(cat /proc/self/uid_map)"; hostname;
	 ls -l /etc/shadow 2>&1; ls /root /home 2>&1; ps -e -o pid,user,comm'

step "Files made inside belong to the workspace's owner on the host, never to root"
show "$AIRLOCK" sandbox run --workspace "$ws" -- /bin/sh -c 'echo hello > /workspace/made-inside'
ls -ln "$ws"

step "The host's loopback services are out of reach (a server listens on 127.0.0.1:8765)"
python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &
server=$!
sleep 0.5
echo "from the host: HTTP $(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8765/").status)')"
show "$AIRLOCK" sandbox run -- python3 -c \
	'import urllib.request
try:
    urllib.request.urlopen("http://127.0.0.1:8765/", timeout=2); print("REACHED THE HOST")
except OSError as e:
    print("from the sandbox:", e)'

step "The kernel's dangerous interfaces are refused (seccomp)"
show "$AIRLOCK" sandbox run -- python3 -c \
	'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)
for name, nr in (("keyctl", 250), ("bpf", 321), ("unshare(CLONE_NEWUSER)", 272), ("mount", 165)):
    args = (0x10000000,) if nr == 272 else (0, 0, 0)
    r = libc.syscall(nr, *args); print(f"{name}: {r} {os.strerror(ctypes.get_errno())}")'

step "Limits: a memory bomb is stopped at --memory 64M (exit 137)"
show "$AIRLOCK" sandbox run --memory 64M -- python3 -c 'x = [b"x" * (1 << 20) for _ in range(1000)]'

step "A timeout kills the command and everything it started (exit 124)"
show "$AIRLOCK" sandbox run --timeout 1 -- /bin/sh -c 'sleep 60 & sleep 60'

step "A flood of output is capped (--output-limit 64)"
show "$AIRLOCK" sandbox run --output-limit 64 -- /bin/sh -c 'yes airlock | head -n 100000'

step "A persistent sandbox keeps what was installed outside /workspace between commands"
id=$("$AIRLOCK" sandbox create --workspace "$ws")
echo "created $id"
show "$AIRLOCK" sandbox exec "$id" -- /bin/sh -c \
	'printf "#!/bin/sh\necho tool installed in an earlier command\n" > /usr/local/bin/mytool;
	 chmod +x /usr/local/bin/mytool; echo "set earlier" > /etc/motd'
show "$AIRLOCK" sandbox exec "$id" -- /bin/sh -c 'mytool; cat /etc/motd'
echo "on the host: $(ls /usr/local/bin/mytool 2>&1)"
"$AIRLOCK" sandbox list
show "$AIRLOCK" sandbox destroy "$id"
"$AIRLOCK" sandbox list


step "The egress gateway: a local HTTPS API that prints the key it receives"
gw=$ws/.gw
mkdir -p "$gw" && chmod 700 "$gw"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=demo-upstream-ca \
	-keyout "$gw/ca.key" -out "$gw/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=api.example.test \
	-keyout "$gw/srv.key" -out "$gw/srv.csr" 2>/dev/null
printf 'subjectAltName=DNS:api.example.test\n' >"$gw/ext"
openssl x509 -req -in "$gw/srv.csr" -CA "$gw/ca.pem" -CAkey "$gw/ca.key" -CAcreateserial \
	-days 1 -extfile "$gw/ext" -out "$gw/srv.pem" 2>/dev/null
cat >"$gw/api.py" <<'PY'
import http.server, ssl, sys
class API(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        print(f"  [api.example.test] {self.command} {self.path} x-api-key: {self.headers.get('x-api-key')}", flush=True)
        body = b"hello from the API\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), API)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
open(sys.argv[3], "w").write(str(srv.server_address[1]))
srv.serve_forever()
PY
python3 "$gw/api.py" "$gw/srv.pem" "$gw/srv.key" "$gw/port" &
api=$!
for _ in $(seq 50); do [ -s "$gw/port" ] && break; sleep 0.1; done
port=$(cat "$gw/port")
printf 'secrets:\n  example-key: sk-real-0123456789abcdef\n' >"$gw/vault.yaml"
chmod 600 "$gw/vault.yaml"
cat >"$gw/policy.yaml" <<'YAML'
rules:
  - id: example-api
    host: api.example.test
    paths: [/v1/]
credentials:
  - secret: example-key
    host: api.example.test
    header: x-api-key
    env: EXAMPLE_API_KEY
YAML
echo "policy: $(tr '\n' ' ' <"$gw/policy.yaml")"
echo "(the API is really on 127.0.0.1:$port; --upstream routes api.example.test:443 there)"
show "$AIRLOCK" sandbox run --policy "$gw/policy.yaml" --vault "$gw/vault.yaml" \
	--upstream "api.example.test:443=127.0.0.1:$port" --upstream-ca "$gw/ca.pem" --audit "$gw/audit.jsonl" \
	-- /bin/sh -c 'echo "inside: EXAMPLE_API_KEY=$EXAMPLE_API_KEY";
	  curl -sS -H "x-api-key: $EXAMPLE_API_KEY" https://api.example.test/v1/hello;
	  echo "inside: a host off the list:"; curl -sS https://example.org/ -o /dev/null -w "%{http_code}\n" 2>&1;
	  echo "inside: a path off the list:"; curl -sS https://api.example.test/admin;
	  echo "inside: DNS for a name off the list: $(getent hosts example.org || echo NXDOMAIN)"'
echo "audit lines:"
cat "$gw/audit.jsonl"
echo "the real key in the audit log: $(grep -c sk-real "$gw/audit.jsonl") times"

step "Checkpoints: the workspace after each change, content-addressed, diffed, restored"
ck=$(mktemp -d /tmp/airlock-demo-ck-XXXXXX)
ckd() { "$AIRLOCK" checkpoint "$@" --store "$ck/store" --key "$ck/key"; }
printf 'def main():\n    print("hello")\n' >"$ws/app.py"
chown nobody: "$ws/app.py"
first=$(ckd create --workspace "$ws")
echo "first checkpoint: $first"
show "$AIRLOCK" sandbox run --workspace "$ws" -- /bin/sh -c \
	'sed -i "s/hello/hello, checkpoints/" /workspace/app.py; rm /workspace/made-inside; echo notes > /workspace/NOTES'
second=$(ckd create --workspace "$ws")
echo "second checkpoint: $second"
printf '$ airlock checkpoint diff FIRST SECOND\n'
ckd diff "$first" "$second"
ckd restore "$first" --to "$ck/restored"
echo "the first checkpoint restored: $(ls "$ck/restored" | tr '\n' ' ')"
for pack in "$ck"/store/tenants/default/packs/*; do
	b=$(dd if="$pack" bs=1 skip=60 count=1 status=none | od -An -tu1)
	printf "\\x$(printf %02x $((255 - b)))" | dd of="$pack" bs=1 seek=60 conv=notrunc status=none
done
echo "one byte of each pack changed on disk; a restore refuses, and leaves nothing:"
ckd restore "$first" --to "$ck/tampered"
echo "(exit status $?) files left: $(ls -A "$ck/tampered" 2>/dev/null | wc -l)"
rm -rf "$ck"

step "Done. Everything above ran in sandboxes that are gone without a trace."

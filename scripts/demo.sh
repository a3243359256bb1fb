#!/usr/bin/env bash
# `make demo`: airlock's sandbox doing its job, step by step, on this machine.
set -uo pipefail
AIRLOCK=${1:-build/src/cli/airlock}
if [ "$(id -u)" -ne 0 ]; then
	echo "demo: airlock's sandbox needs root; run: sudo make demo" >&2
	exit 1
fi
bold=$(tput bold 2>/dev/null || true); off=$(tput sgr0 2>/dev/null || true)
step() { printf '\n%s==> %s%s\n' "$bold" "$*" "$off"; }
show() { printf '$ %s\n' "$*"; "$@"; printf '(exit status %s)\n' "$?"; }

ws=$(mktemp -d /tmp/airlock-demo-XXXXXX)
chown nobody: "$ws"
server=""
api=""
ck=""
cleanup() {
	[ -n "$server" ] && kill "$server" 2>/dev/null
	[ -n "$api" ] && kill "$api" 2>/dev/null
	rm -rf "$ws"
	[ -n "$ck" ] && rm -rf "$ck"
}
trap cleanup EXIT

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

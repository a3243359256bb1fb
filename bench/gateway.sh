#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Intercepted-HTTPS benchmark: airlock's gateway against squid (ssl-bump) and
# mitmproxy (mitmdump), plus the origin directly (the no-proxy baseline), in
# one run, interleaved round by round, same load client, same local origin.
# See bench/gateway/README.md.
#
# Usage: bench/gateway.sh [AIRLOCK_BINARY]   (or $AIRLOCK; default build/src/cli/airlock)
# Environment (defaults in brackets):
#   BENCH_GW_PROXIES   which proxies ["airlock squid mitmproxy"]
#   BENCH_GW_ROUNDS    interleaved rounds [5]
#   BENCH_GW_SECONDS   measured seconds per throughput run [4]
#   BENCH_GW_LAT_SECONDS  measured seconds per single-connection run [2]
#   BENCH_GW_CONC      keep-alive connections [16]
#   BENCH_GW_NEW_CONC  concurrent new connections [8]
#   BENCH_GW_IDLE      idle intercepted connections [1000]
#   BENCH_GW_IDLE_ROUNDS  idle-memory measurements per proxy [2]
#   BENCH_GW_OUT       the JSON file [bench/results/gateway-<date>.json]
#   BENCH_BEFORE       another build of airlock (a change's before): its
#                      gateway runs as "airlock-before" in the same rounds
# Needs root. Runs in a private network and mount namespace. Writes
# bench/results/gateway-<date>.json. Exits non-zero when a step fails; never
# on speed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
airlock=${1:-${AIRLOCK:-$root/build/src/cli/airlock}}
case $airlock in /*) ;; *) airlock=$PWD/$airlock ;; esac

die() {
	echo "bench-gw: error: $*" >&2
	exit 1
}
note() { echo "bench-gw: $*" >&2; }

[ "$(id -u)" -eq 0 ] || die "needs root (a private network namespace; airlock gateway)"

# Everything runs in a private network namespace (its own loopback: the
# origin can listen on 127.0.0.1:443, which CONNECT bench.test:443 reaches
# through every proxy, and nothing else on the machine shares the ports or
# the TIME_WAIT table) and a private mount namespace (a hosts file that maps
# bench.test to 127.0.0.1 is bound over /etc/hosts for squid and mitmproxy).
if [ "${_AIRLOCK_GW_BENCH_NS:-}" != 1 ]; then
	command -v unshare >/dev/null || die "unshare (util-linux) is missing"
	exec unshare --net --mount --propagation private -- \
		env _AIRLOCK_GW_BENCH_NS=1 bash "${BASH_SOURCE[0]}" "$airlock"
fi

proxies=${BENCH_GW_PROXIES:-airlock squid mitmproxy}
before_bin=${BENCH_BEFORE:-}
if [ -n "$before_bin" ]; then
	case $before_bin in /*) ;; *) before_bin=$PWD/$before_bin ;; esac
	proxies="$proxies airlock-before"
fi
rounds=${BENCH_GW_ROUNDS:-5}
secs=${BENCH_GW_SECONDS:-4}
lat_secs=${BENCH_GW_LAT_SECONDS:-2}
ka_conc=${BENCH_GW_CONC:-16}
new_conc=${BENCH_GW_NEW_CONC:-8}
idle_n=${BENCH_GW_IDLE:-1000}
idle_rounds=${BENCH_GW_IDLE_ROUNDS:-2}
idle_conc=50   # idle connections being opened at a time
warm=0.5       # seconds of each run not counted
budget=480     # seconds for the whole script
start=$SECONDS
py=/usr/bin/python3
[ -x $py ] || py=$(command -v python3) || die "python3 is missing"

case $rounds$secs$lat_secs$ka_conc$new_conc$idle_n$idle_rounds in
*[!0-9]*) die "BENCH_GW_* want whole numbers" ;;
esac
for p in $proxies; do
	case $p in
	airlock) [ -x "$airlock" ] || die "no airlock binary at $airlock (build it, pass its path as \$1, or set BENCH_GW_PROXIES)" ;;
	airlock-before) [ -x "$before_bin" ] || die "BENCH_BEFORE: no airlock binary at $before_bin" ;;
	squid)
		if [ ! -x /usr/sbin/squid ] || [ ! -x /usr/lib/squid/security_file_certgen ]; then
			die "squid-openssl is missing (apt-get install squid-openssl; scripts/deps.sh --bench)"
		fi
		;;
	mitmproxy) command -v mitmdump >/dev/null || die "mitmdump is missing (apt-get install mitmproxy)" ;;
	*) die "unknown proxy '$p' in BENCH_GW_PROXIES" ;;
	esac
done
for t in cc pkg-config openssl ip ss timeout; do
	command -v $t >/dev/null || die "$t is missing"
done
pkg-config --exists openssl || die "OpenSSL headers are missing (libssl-dev)"

work=$(mktemp -d /tmp/airlock-gw-bench.XXXXXX)
chmod 755 "$work" # squid's helpers run as the proxy user
bin=$work/bin
mkdir -p "$bin"
declare -A pid=() port=() cafile=()
port[direct]=443
port[airlock]=8001
port[squid]=8002
port[mitmproxy]=8003
port[airlock-before]=8004
up_pid=

stop_pid() { # PID: SIGTERM, then SIGKILL after 5 s; reaps it
	local p=$1 i
	[ -n "$p" ] || return 0
	kill -TERM "$p" 2>/dev/null || return 0
	for i in $(seq 50); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
}
cleanup() {
	local rc=$? p
	trap - EXIT INT TERM HUP
	for p in "${!pid[@]}"; do
		stop_pid "${pid[$p]}"
	done
	stop_pid "$up_pid"
	if [ "$rc" -ne 0 ] && [ -d "$work" ]; then
		note "logs of the failed run (last lines):"
		for f in "$work"/*/*.log "$work"/*.out "$work"/*.err; do
			[ -s "$f" ] || continue
			echo "--- $f" >&2
			tail -n 15 "$f" >&2
		done
	fi
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT
trap 'note interrupted; exit 130' INT TERM HUP

left() { echo $((budget - (SECONDS - start))); }
# Runs a command under timeout (at most $1 s, at most what is left of the budget).
bounded() {
	local cap=$1
	shift
	local l
	l=$(left)
	[ "$l" -gt 3 ] || die "out of time budget ($budget s) before: $*"
	[ "$cap" -le "$l" ] || cap=$l
	timeout --kill-after=3 "$cap" "$@"
}

# ------------------------------------------------------------ the namespace
ip link set lo up
sysctl -qw net.ipv4.tcp_tw_reuse=1 2>/dev/null || true # this namespace's; loopback only anyway
printf '127.0.0.1 localhost\n127.0.0.1 bench.test\n::1 localhost ip6-localhost\n' >"$work/hosts"
chmod 644 "$work/hosts"
mount --bind "$work/hosts" /etc/hosts
ulimit -n 65536 2>/dev/null || ulimit -n 16384

# ------------------------------------------------------------ build
cflags=$(pkg-config --cflags openssl)
libs=$(pkg-config --libs openssl)
# shellcheck disable=SC2086
# The programs share airlock's strict number parsing and error strings.
common=("-D_GNU_SOURCE" "-I$root/src" "$root/src/common/parse.c" "$root/src/common/error.c")
cc -O2 -Wall -o "$bin/upstream" "$root/bench/gateway/upstream.c" "${common[@]}" $cflags $libs -lpthread ||
	die "compiling upstream.c"
# shellcheck disable=SC2086
cc -O2 -Wall -o "$bin/loadgen" "$root/bench/gateway/loadgen.c" "${common[@]}" $cflags $libs ||
	die "compiling loadgen.c"

# ------------------------------------------------------------ certificates
# ECDSA P-256 everywhere: the origin's CA and leaf, and one interception CA
# per peer (airlock makes its own, also P-256). squid and mitmproxy sign their
# leaves with their CA's key, so every peer hands out P-256 leaves.
ec_ca() { # DIR NAME: DIR/ca.pem, DIR/ca.key
	openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$1/ca.key" -out "$1/ca.pem" -days 2 -subj "/CN=$2" \
		-addext basicConstraints=critical,CA:TRUE \
		-addext keyUsage=critical,keyCertSign,cRLSign >/dev/null 2>&1 || die "making the CA $2"
}
mkdir -p "$work/origin"
ec_ca "$work/origin" "airlock bench origin CA"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/origin/leaf.key" \
	-out "$work/origin/leaf.csr" -subj "/CN=bench.test" >/dev/null 2>&1 || die "origin key"
printf 'subjectAltName=DNS:bench.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' \
	>"$work/origin/ext.cnf"
openssl x509 -req -in "$work/origin/leaf.csr" -CA "$work/origin/ca.pem" -CAkey "$work/origin/ca.key" \
	-CAcreateserial -out "$work/origin/leaf.pem" -days 2 -extfile "$work/origin/ext.cnf" >/dev/null 2>&1 ||
	die "signing the origin's certificate"
upca=$work/origin/ca.pem
chmod 644 "$upca"
cafile[direct]=$upca

# ------------------------------------------------------------ the origin
"$bin/upstream" 127.0.0.1 443 "$work/origin/leaf.pem" "$work/origin/leaf.key" \
	>"$work/upstream.out" 2>"$work/upstream.err" &
up_pid=$!
for _ in $(seq 50); do
	grep -q ready "$work/upstream.out" 2>/dev/null && break
	kill -0 $up_pid 2>/dev/null || die "the origin server did not start"
	sleep 0.1
done
grep -q ready "$work/upstream.out" || die "the origin server did not start"

# Total requests the origin has answered (asks it with SIGUSR1).
origin_count() { origin_stats 2; }
# The origin's totals, field $1: 2 requests, 4 connections, 6 TLS handshakes.
origin_stats() {
	local before n
	before=$(grep -c '^requests' "$work/upstream.out" || true)
	kill -USR1 $up_pid
	for _ in $(seq 50); do
		n=$(grep -c '^requests' "$work/upstream.out" || true)
		[ "$n" -gt "$before" ] && break
		sleep 0.05
	done
	[ "$n" -gt "$before" ] || die "the origin did not answer SIGUSR1"
	awk -v f="$1" '/^requests/ { n = $f } END { print n }' "$work/upstream.out"
}

# ------------------------------------------------------------ the proxies
wait_listen() { # NAME PORT PID [FILE that must exist]
	local i
	for i in $(seq 150); do
		kill -0 "$3" 2>/dev/null || die "$1 exited during start-up"
		if ss -Hltn "sport = :$2" | grep -q . && { [ -z "${4:-}" ] || [ -s "$4" ]; }; then
			return 0
		fi
		sleep 0.1
	done
	die "$1 is not listening on port $2 after 15 s"
}

declare -A cmdline=()
start_gateway() { # NAME BINARY
	local n=$1 d=$work/$1
	mkdir -p "$d"
	rm -f "$d/ca.pem"
	cmdline[$n]="$2 gateway --listen 127.0.0.1:${port[$n]} --allow 127.0.0.1 --allow bench.test --upstream bench.test:443=127.0.0.1:443 --upstream-ca $upca --ca-out $d/ca.pem --audit $d/audit.log"
	# shellcheck disable=SC2086
	${cmdline[$n]} >>"$d/stdout.log" 2>>"$d/stderr.log" &
	pid[$n]=$!
	wait_listen "$n" "${port[$n]}" "${pid[$n]}" "$d/ca.pem"
	cafile[$n]=$d/ca.pem
}
start_airlock() { start_gateway airlock "$airlock"; }
start_airlock-before() { start_gateway airlock-before "$before_bin"; }

start_squid() {
	local d=$work/squid
	if [ ! -d "$d" ]; then
		mkdir -p "$d/log" "$d/run"
		ec_ca "$d" "squid bench interception CA"
		/usr/lib/squid/security_file_certgen -c -s "$d/ssl_db" -M 4MB >/dev/null || die "squid ssl_db"
		cat >"$d/squid.conf" <<EOF
http_port 127.0.0.1:${port[squid]} ssl-bump tls-cert=$d/ca.pem tls-key=$d/ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=4MB
sslcrtd_program /usr/lib/squid/security_file_certgen -s $d/ssl_db -M 4MB
sslcrtd_children 5 startup=1 idle=1
ssl_bump bump all
tls_outgoing_options cafile=$upca
sslproxy_cert_error deny all
http_access allow localhost
http_access deny all
cache deny all
cache_mem 0 MB
access_log stdio:$d/log/access.log
cache_log $d/log/cache.log
cache_store_log none
logfile_rotate 0
pid_filename $d/run/squid.pid
coredump_dir $d/run
hosts_file $work/hosts
dns_nameservers 127.0.0.1
shutdown_lifetime 0 seconds
max_filedescriptors 16384
workers 1
cache_effective_user proxy
visible_hostname airlock-bench
icp_port 0
htcp_port 0
pinger_enable off
EOF
		chown -R proxy:proxy "$d"
		chmod 600 "$d/ca.key"
	fi
	cmdline[squid]="squid -N -f $d/squid.conf"
	squid -N -f "$d/squid.conf" >>"$d/stdout.log" 2>>"$d/stderr.log" &
	pid[squid]=$!
	wait_listen squid "${port[squid]}" "${pid[squid]}"
	cafile[squid]=$d/ca.pem
}

start_mitmproxy() {
	local d=$work/mitmproxy
	if [ ! -d "$d" ]; then
		mkdir -p "$d/conf"
		ec_ca "$d" "mitmproxy bench interception CA"
		# mitmproxy's CA file is key + certificate; it then skips making its own (RSA) CA.
		cat "$d/ca.key" "$d/ca.pem" >"$d/conf/mitmproxy-ca.pem"
		chmod 600 "$d/conf/mitmproxy-ca.pem"
	fi
	cmdline[mitmproxy]="mitmdump -q --listen-host 127.0.0.1 --listen-port ${port[mitmproxy]} --set confdir=$d/conf --set flow_detail=0 --set ssl_verify_upstream_trusted_ca=$upca"
	# shellcheck disable=SC2086
	${cmdline[mitmproxy]} >>"$d/stdout.log" 2>>"$d/stderr.log" &
	pid[mitmproxy]=$!
	wait_listen mitmproxy "${port[mitmproxy]}" "${pid[mitmproxy]}"
	cafile[mitmproxy]=$d/ca.pem
}

start_proxy() { "start_$1"; }
stop_proxy() {
	stop_pid "${pid[$1]}"
	unset "pid[$1]"
}

results=$work/results.jsonl
: >"$results"
# run TARGET KIND ROUND: one load-client run, appended to $results.
run() {
	local t=$1 kind=$2 r=$3 out rc=0
	local -a a=(-a "127.0.0.1:${port[$t]}" -C "${cafile[$t]}" -u "$up_pid" -l "$t" -w "$warm")
	if [ "$t" = direct ]; then a+=(-D); else a+=(-p "${pid[$t]}"); fi
	case $kind in
	ka) a+=(-m ka -c "$ka_conc" -t "$secs") ;;
	lat) a+=(-m ka -c 1 -t "$lat_secs") ;;
	new) a+=(-m new -c "$new_conc" -t "$secs") ;;
	check) a+=(-m ka -c 1 -w 0 -t 0.5) ;;
	idle) a=(-a "127.0.0.1:${port[$t]}" -C "${cafile[$t]}" -l "$t" -p "${pid[$t]}" -m idle -n "$idle_n" -c "$idle_conc") ;;
	esac
	# In "new", how many TLS handshakes the origin did per client connection
	# (squid pools origin connections across clients; others may not).
	local hs0=0 hs1=0
	[ "$kind" != new ] || hs0=$(origin_stats 6)
	out=$(bounded $((secs + 60)) "$bin/loadgen" "${a[@]}" 2>>"$work/loadgen.err") || rc=$?
	[ "$kind" != new ] || hs1=$(origin_stats 6)
	[ -n "$out" ] && echo "{\"round\": \"$r\", \"target\": \"$t\", \"kind\": \"$kind\", \"origin_handshakes\": $((hs1 - hs0)), \"result\": $out}" >>"$results"
	[ "$rc" -eq 0 ] || die "load client failed ($t, $kind, round $r; exit $rc): $(tail -n 3 "$work/loadgen.err" | tr '\n' ' ')"
	printf '%s' "$out"
}
field() { # JSON FIELD
	$py -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

# ------------------------------------------------------------ the machine
loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)
versions=$work/versions.txt
{
	echo "openssl: $(openssl version)"
	echo "kernel: $(uname -r)"
	echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
	echo "nproc: $(nproc)"
	for p in $proxies; do
		case $p in
		squid) echo "squid: $(squid -v | head -n 1)" ;;
		mitmproxy) echo "mitmproxy: $(mitmdump --version 2>/dev/null | tr '\n' ' ')" ;;
		airlock) echo "airlock: $("$airlock" --version 2>/dev/null | head -n 1 || echo '?')" ;;
		airlock-before) echo "airlock-before: $before_bin: $("$before_bin" --version 2>/dev/null | head -n 1 || echo '?')" ;;
		esac
	done
	echo "git: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"
} >"$versions"

# ------------------------------------------------------------ start + check
for p in $proxies; do
	note "starting $p"
	start_proxy "$p"
done

# Every proxy must intercept: the client verifies the leaf against that
# proxy's CA only (loadgen fails otherwise), and every request it got an
# answer to must have reached the origin.
for t in direct $proxies; do
	before=$(origin_count)
	out=$(run "$t" check 0)
	after=$(origin_count)
	done_n=$(field "$out" completed_total)
	issuer=$(field "$out" leaf_issuer_cn)
	note "check $t: $done_n requests, origin saw $((after - before)); leaf issued by '$issuer'"
	[ $((after - before)) -ge "$done_n" ] || die "$t: the origin saw $((after - before)) requests, the client got $done_n answers"
	[ "$done_n" -gt 0 ] || die "$t: no request answered"
done

# ------------------------------------------------------------ interleaved rounds
read -r -a targets <<<"direct $proxies"
nt=${#targets[@]}
for r in $(seq "$rounds"); do
	note "round $r/$rounds ($(left) s of budget left)"
	for kind in ka lat new; do
		for i in $(seq 0 $((nt - 1))); do
			t=${targets[$(((i + r - 1) % nt))]}
			out=$(run "$t" "$kind" "$r")
			printf '  %-9s %-3s %9.0f/s  p50 %7.3f ms  errors %s\n' "$t" "$kind" \
				"$(field "$out" rps)" "$(field "$out" req_p50_ms)" "$(field "$out" errors)" >&2
		done
	done
done

# ------------------------------------------------------------ idle memory
# A fresh proxy each time (no high-water marks left by the load rounds),
# warmed with one short run (leaf certificate made, helpers started).
for r in $(seq "$idle_rounds"); do
	for p in $proxies; do
		stop_proxy "$p"
		start_proxy "$p"
		run "$p" check "idle$r" >/dev/null
		out=$(run "$p" idle "$r")
		note "idle $p: $(field "$out" opened) connections, RSS +$(field "$out" rss_per_conn_kib) KiB/conn, alive after: $(field "$out" second_request_ok)"
	done
done

# ------------------------------------------------------------ logs
origin_total=$(origin_count)
for p in $proxies; do
	stop_proxy "$p"
done
loadavg_after=$(cut -d' ' -f1-3 /proc/loadavg)
for p in $proxies; do
	case $p in
	squid) logf=$work/squid/log/access.log ;;
	airlock | airlock-before) logf=$work/$p/audit.log ;;
	*) continue ;;
	esac
	[ -s "$logf" ] || die "$p wrote no log ($logf)"
	cp "$logf" "$work/$p-log.txt"
done

mkdir -p "$root/bench/results"
out_json=${BENCH_GW_OUT:-$root/bench/results/gateway-$(date +%Y-%m-%d).json}
{
	echo "proxies=$proxies"
	echo "rounds=$rounds"
	echo "seconds=$secs"
	echo "lat_seconds=$lat_secs"
	echo "warmup_seconds=$warm"
	echo "ka_concurrency=$ka_conc"
	echo "new_concurrency=$new_conc"
	echo "idle_connections=$idle_n"
	echo "idle_rounds=$idle_rounds"
	echo "idle_open_concurrency=$idle_conc"
	echo "origin_total=$origin_total"
	echo "loadavg_before=$loadavg_before"
	echo "loadavg_after=$loadavg_after"
	for p in $proxies; do echo "cmd_$p=${cmdline[$p]}"; done
	[ ! -f "$work/squid/squid.conf" ] || sed 's/^/squid_conf=/' "$work/squid/squid.conf"
	sed 's/^/version=/' "$versions"
} >"$work/meta.txt"
$py "$root/bench/gateway/report.py" "$work" "$out_json" || die "report.py failed"
note "wrote $out_json ($((SECONDS - start)) s)"

#!/usr/bin/env bash
# Installs the Debian packages airlock builds, tests and benchmarks with,
# when they are missing. Idempotent and quiet: prints only what it installs.
set -euo pipefail

build=(meson ninja-build pkg-config gcc clang libseccomp-dev libyaml-dev libcmocka-dev
       libjansson-dev libsqlite3-dev libssl-dev libevent-dev libzstd-dev libarchive-dev zlib1g-dev
       libbrotli-dev)
test=(python3 python3-pytest python3-brotli python3-zstandard busybox-static util-linux iproute2
      procps curl git openssl nodejs clang-format e2fsprogs groff-base man-db zsh)
bench=(bubblewrap crun hyperfine squid-openssl mitmproxy squashfs-tools zstd)

want=("${build[@]}" "${test[@]}")
if [ "${1:-}" = "--bench" ]; then
	want+=("${bench[@]}")
fi

missing=()
for p in "${want[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing Debian packages: ${missing[*]}" >&2
	echo "deps: run as root (or: sudo apt-get install ${missing[*]})" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
	>"$log" 2>&1; then
	cat "$log" >&2
	echo "deps: installing ${missing[*]} failed" >&2
	exit 1
fi

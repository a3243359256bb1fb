#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# `make test`: every stage runs, whatever the ones before it did, and the
# last line adds them all up:
#   unit, lint and fuzz corpora (meson test), integration (pytest, as root),
#   then the same again built with clang's AddressSanitizer and UBSan.
# Exit status: 0 when every stage ran and nothing failed, 1 otherwise.
#
# Usage: scripts/test.sh BUILD_DIR ASAN_BUILD_DIR
set -u

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-build}
asan=${2:-build-asan}
pytest=${PYTEST:-/usr/bin/python3 -m pytest}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

passed=0 failed=0 skipped=0
stages=()
broken=()

# A stage's counts from its output: meson's "Ok:/Fail:/Skipped:/Timeout:"
# summary, or pytest's last line ("3 failed, 160 passed, 1 skipped ...").
count() { # KIND FILE RC NAME
	local kind=$1 file=$2 rc=$3 name=$4 p=0 f=0 s=0
	if [ "$kind" = meson ]; then
		p=$(awk '/^Ok:/ {print $2}' "$file" | tail -n 1)
		f=$(awk '/^(Fail|Timeout|Unexpected Pass):/ {n += $2} END {print n + 0}' "$file")
		s=$(awk '/^Skipped:/ {print $2}' "$file" | tail -n 1)
	else
		local line
		line=$(grep -E '[0-9]+ (passed|failed|error)' "$file" | tail -n 1)
		p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || true)
		f=$(($(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || echo 0) +
			$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '[0-9]+' || echo 0)))
		s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || true)
	fi
	p=${p:-0} f=${f:-0} s=${s:-0}
	# A stage that failed without a count (it did not start, or crashed)
	# counts as one failure.
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
	fi
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	stages+=("$name: $p passed, $f failed, $s skipped")
	[ "$f" -eq 0 ] || broken+=("$name")
}

stage() { # KIND NAME COMMAND...
	local kind=$1 name=$2
	shift 2
	echo "==> $name"
	"$@" 2>&1 | tee "$log/$name"
	count "$kind" "$log/$name" "${PIPESTATUS[0]}" "$name"
}

cd "$root" || exit 1
stage meson unit meson test -C "$build" --print-errorlogs
AIRLOCK=$root/$build/src/cli/airlock stage pytest integration $pytest -q -rs tests/integration

echo "==> asan build"
if CC=clang meson setup "$asan" . -Db_sanitize=address,undefined -Db_lundef=false \
	-Dbuildtype=debug >/dev/null 2>&1 || [ -f "$asan/build.ninja" ]; then
	if ninja -C "$asan" >"$log/asan-build" 2>&1; then
		export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
		export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
		stage meson asan-unit meson test -C "$asan" --print-errorlogs
		AIRLOCK=$root/$asan/src/cli/airlock stage pytest asan-integration \
			$pytest -q -rs tests/integration
	else
		tail -n 30 "$log/asan-build"
		count meson "$log/asan-build" 1 asan-build
	fi
else
	count meson /dev/null 1 asan-setup
fi

echo
for s in "${stages[@]}"; do
	echo "  $s"
done
echo "make test: $passed passed, $failed failed, $skipped skipped${broken:+ (failing: ${broken[*]})}"
[ "$failed" -eq 0 ]

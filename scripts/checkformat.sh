#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Fails (exit 1, naming each file) when a C source under src/, tests/unit/,
# tests/integration/helpers/, fuzz/ or bench/ is not formatted as
# .clang-format says. Formatting differs between clang-format releases, so
# the check runs with the release the style is written for (14, Debian 12's)
# and is skipped (exit 77, saying why) with any other or none.
#
# Usage: scripts/checkformat.sh [repository root]   (default: this script's ..)
#        scripts/checkformat.sh --fix [root]        reformat the files in place
set -u

fix=0
if [ "${1:-}" = --fix ]; then
	fix=1
	shift
fi
root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cd "$root" || exit 2
want=14

cf=
for c in clang-format-$want clang-format; do
	if command -v "$c" >/dev/null 2>&1; then
		cf=$c
		break
	fi
done
if [ -z "$cf" ]; then
	echo "checkformat: skipped: no clang-format here (scripts/deps.sh installs it)"
	exit 77
fi
version=$("$cf" --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+')
if [ "$version" != "$want" ]; then
	echo "checkformat: skipped: $cf is release $version; the style is checked with $want"
	exit 77
fi

dirs=()
for d in src tests/unit tests/integration/helpers fuzz bench; do
	[ -d "$d" ] && dirs+=("$d")
done
mapfile -t sources < <(find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' \) | sort)
if [ "$fix" -eq 1 ]; then
	"$cf" -i --style=file "${sources[@]}"
	exit $?
fi
bad=0
for f in "${sources[@]}"; do
	if ! "$cf" --dry-run --Werror --style=file "$f" >/dev/null 2>&1; then
		echo "$f: not formatted (scripts/checkformat.sh --fix)"
		bad=$((bad + 1))
	fi
done
if [ "$bad" -ne 0 ]; then
	echo "checkformat: FAILED: $bad of ${#sources[@]} files" >&2
	exit 1
fi
echo "checkformat: ${#sources[@]} files formatted as .clang-format says"

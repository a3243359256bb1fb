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
list=$(find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' \)) || {
	echo "checkformat: FAILED: cannot list the sources" >&2
	exit 1
}
mapfile -t sources < <(sort <<<"$list" | sed '/^$/d')
if [ ${#sources[@]} -eq 0 ]; then
	echo "checkformat: FAILED: no C sources found under $root" >&2
	exit 1
fi
if [ "$fix" -eq 1 ]; then
	"$cf" -i --style=file "${sources[@]}"
	exit $?
fi
# One process for every file; each file not formatted is named in its
# warnings ("FILE:LINE:COL: error: code should be clang-formatted").
if out=$("$cf" --dry-run --Werror --style=file "${sources[@]}" 2>&1); then
	echo "checkformat: ${#sources[@]} files formatted as .clang-format says"
	exit 0
fi
mapfile -t bad < <(grep -oE '^[^:]+:[0-9]+:[0-9]+: (error|warning)' <<<"$out" | cut -d: -f1 |
	sort -u | grep -Fxf <(printf '%s\n' "${sources[@]}"))
if [ ${#bad[@]} -eq 0 ]; then
	# Failed without naming a file: a broken style file, say.
	printf '%s\n' "$out" | tail -n 20 >&2
	echo "checkformat: FAILED: $cf failed" >&2
	exit 1
fi
for f in "${bad[@]}"; do
	echo "$f: not formatted (scripts/checkformat.sh --fix)"
done
echo "checkformat: FAILED: ${#bad[@]} of ${#sources[@]} files" >&2
exit 1

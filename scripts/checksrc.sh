#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Fails (exit 1, printing file:line) when C sources under src/, tests/unit/,
# tests/integration/helpers/, fuzz/ or bench/ call a banned function, or
# when a .c file under src/ has no SPDX line. Banned everywhere: functions
# with no bound on what they write (sprintf, strcpy, ...), ones that hide
# errors (atoi, sscanf), ones with hidden state (strtok, gmtime, localtime:
# use the _r forms) and strerror (locale-dependent, may allocate, not safe
# after fork: use al_strerror). The strto* family is allowed only in the
# parsing helpers (src/common/parse.c): everywhere else a number is read
# with parse_u64, parse_int_range, parse_u64_prefix and friends, which
# refuse what strto* silently accepts (signs, spaces, junk, overflow).
# Only calls are matched: the name as a whole word followed by '(';
# snprintf or my_strcpy do not match. Comments are not exempt: say
# "sprintf" without the parenthesis when writing about it.
#
# Usage: scripts/checksrc.sh [repository root]   (default: this script's ..)
set -u

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cd "$root" || exit 2

banned='sprintf|vsprintf|strcpy|strcat|strncpy|strncat|strtok|atoi|atol|atoll|atof|gets|sscanf|fscanf|scanf|vsscanf|strerror|gmtime|localtime'
strto='strto(l|ll|ul|ull|d|f|ld|imax|umax|q|uq)(_l)?'
parsers='src/common/parse.c'
dirs=()
for d in src tests/unit tests/integration/helpers fuzz bench; do
	[ -d "$d" ] && dirs+=("$d")
done

failed=0
files=0
if [ ${#dirs[@]} -gt 0 ]; then
	mapfile -t sources < <(find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' \) | sort)
	files=${#sources[@]}
	if [ "$files" -gt 0 ]; then
		# (^|[^[:alnum:]_]) keeps snprintf, my_strcpy and foo.strcpy_x out.
		if grep -nHE "(^|[^[:alnum:]_])($banned)[[:space:]]*\(" "${sources[@]}" |
			sed -E 's/^([^:]+:[0-9]+):[[:space:]]*/\1: banned call: /' | grep .; then
			failed=1
		fi
		others=()
		for f in "${sources[@]}"; do
			[ "$f" = "$parsers" ] || others+=("$f")
		done
		if [ ${#others[@]} -gt 0 ] &&
			grep -nHE "(^|[^[:alnum:]_])($strto)[[:space:]]*\(" "${others[@]}" |
			sed -E 's/^([^:]+:[0-9]+):[[:space:]]*/\1: strto* outside the parsing helpers: /' | grep .; then
			failed=1
		fi
		for f in "${sources[@]}"; do
			case $f in
			src/*.c)
				if ! head -n 5 "$f" | grep -q 'SPDX-License-Identifier:'; then
					echo "$f:1: no SPDX-License-Identifier line"
					failed=1
				fi
				;;
			esac
		done
	fi
fi

if [ "$failed" -ne 0 ]; then
	echo "checksrc: FAILED" >&2
	exit 1
fi
echo "checksrc: $files files clean (banned calls, strto* only in $parsers, SPDX lines)"

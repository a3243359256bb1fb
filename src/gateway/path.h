/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request targets in one canonical form, so that the policy and the
 * credential scoping compare exactly what the upstream will act on. A target
 * that could be read two ways is refused (400), never guessed.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define GW_PATH_MAX 8192

/*
 * Canonicalizes an origin-form request target (target, len bytes; may hold
 * anything, NUL included). On success writes the canonical path (no query)
 * NUL-terminated to out and the offset of the query in target ('?' included;
 * len when none) to *ret_query; on failure neither is written. Canonical
 * means: starts with '/'; percent-encodings of unreserved characters
 * (ALPHA DIGIT - . _ ~, RFC 3986) decoded, every other percent-encoding
 * kept with upper-case hex; everything else as it came. The result is a
 * fixed point: canonicalizing it again gives it back.
 *
 * Refused with -EINVAL (the caller answers 400), in the path: not starting
 * with '/'; a "." or ".." segment, raw or encoded in any mix (%2e, %2E), or
 * one followed by an encoded ';' (".%3B", "..%3Bx"); an encoded '/' (%2F)
 * or '\' (%5C) or a raw '\'; an encoded or raw NUL; '%' not followed by two
 * hex digits; an empty segment ("//", also at the start); a raw ';' (a path
 * parameter: "/a;x" is "/a" to servlet containers); any other raw character
 * that RFC 3986 does not allow in a segment (space, controls, DEL, bytes >=
 * 0x80, " # < > [ ] ^ ` { | }); "%25" followed by the hex of NUL, '.', '/'
 * or '\' ("%252e", also when spelled "%25%32%65": a server that decodes
 * twice would see a dot or a separator); overlong UTF-8 escapes (%C0, %C1,
 * %E0%80-%9F, %F0%80-%8F). In the query, which is not canonicalized and is
 * forwarded as it came: controls, space, DEL, bytes >= 0x80 and '#'.
 * -ENAMETOOLONG when len > GW_PATH_MAX or the result does not fit out_size
 * (GW_PATH_MAX + 1 always suffices: the result is never longer than len).
 */
int gw_path_canonical(const char *target, size_t len, char *out, size_t out_size,
		      size_t *ret_query);

/* The same, where GW_PATH_ENCODED_SLASH lets an encoded '/' (%2F, either
 * case) stand inside a segment, kept as "%2F": for requests whose decision
 * does not depend on the path (gw_decision_uses_path). Everything else
 * ambiguous is still refused, "%252F" included. */
#define GW_PATH_ENCODED_SLASH 1u
int gw_path_canonical_opts(const char *target, size_t len, char *out, size_t out_size,
			   size_t *ret_query, unsigned flags);

/*
 * True when path (canonical) equals prefix or continues it at a segment
 * boundary: "/a/b" matches prefixes "/", "/a", "/a/" and "/a/b", never
 * "/a/bc". prefix must itself be canonical. Case-sensitive, byte for byte
 * (both sides being canonical, encodings compare equal). False when either
 * is NULL or prefix does not start with '/'.
 */
bool gw_path_has_prefix(const char *path, const char *prefix);
/* The same with ASCII case folded: for deny rules, which must also stop
 * /ADMIN on an upstream that does not tell cases apart. */
bool gw_path_has_prefix_nocase(const char *path, const char *prefix);

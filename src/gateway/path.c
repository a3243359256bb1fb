/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request-target canonicalization. The rule throughout: the gateway decides
 * on the canonical form and forwards that same form, so a path is accepted
 * only when every upstream we can think of reads it the same way - as the
 * same sequence of segments, none of them a dot segment. Anything where
 * common servers disagree (encoded separators, path parameters, double
 * decoding, overlong UTF-8) is refused rather than normalized, because a
 * normalization we pick may not be the one the upstream picks.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "common/encode.h"
#include "gateway/path.h"

/* The value of the two hex digits at p (either case), or -1. p must have
 * a terminator or at least two readable bytes. */
static int hex_pair(const char *p)
{
	int hi = enc_hex_value(p[0]);
	if (hi < 0)
		return -1;
	int lo = enc_hex_value(p[1]);
	if (lo < 0)
		return -1;
	return hi * 16 + lo;
}

/* RFC 3986 unreserved: ALPHA DIGIT - . _ ~ */
static bool is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

/*
 * What may stand raw in a path segment: RFC 3986 pchar without its
 * pct-encoded part and without ';'. ';' starts a path parameter that
 * servlet containers and some frameworks strip before routing ("/a;x" is
 * "/a" to them, "a;x" to everyone else; "..;" is "..").
 */
static bool is_raw_segment_char(unsigned char c)
{
	if (is_unreserved(c))
		return true;
	switch (c) {
	case '!':
	case '$':
	case '&':
	case '\'':
	case '(':
	case ')':
	case '*':
	case '+':
	case ',':
	case '=':
	case ':':
	case '@':
		return true;
	default:
		return false;
	}
}

/* The query is forwarded as it came, so only what could break the request
 * line or hide a fragment is refused there. */
static bool is_query_char(unsigned char c)
{
	return c > 0x20 && c < 0x7f && c != '#';
}

/*
 * A finished canonical segment (s, n bytes): "." and "..", and either of
 * them followed by an encoded ';' (a server that decodes before stripping
 * path parameters sees a dot segment). Raw ';' never gets this far.
 */
static bool is_dot_segment(const char *s, size_t n)
{
	size_t dots = 0;
	while (dots < n && dots < 3 && s[dots] == '.')
		dots++;
	if (dots == 0 || dots > 2)
		return false;
	if (n == dots)
		return true;
	return n - dots >= 3 && memcmp(s + dots, "%3B", 3) == 0;
}

/*
 * Escapes that some decoder on the way may turn into something we refused
 * (s is canonical and NUL-terminated, at a '%'):
 *  - "%25" followed by two hex digits naming NUL, '.', '/' or '\': a server
 *    that decodes twice sees the separator or dot this form hides;
 *  - overlong UTF-8 (%C0, %C1, %E0%80-%9F, %F0%80-%8F), which lenient
 *    decoders have mapped to '.', '/' and '\'.
 */
static bool is_ambiguous_escape(const char *s)
{
	int v = hex_pair(s + 1);
	switch (v) {
	case 0x25: {
		int w = hex_pair(s + 3);
		return w == 0x00 || w == '.' || w == '/' || w == '\\';
	}
	case 0xC0:
	case 0xC1:
		return true;
	case 0xE0:
		return s[3] == '%' && (s[4] == '8' || s[4] == '9');
	case 0xF0:
		return s[3] == '%' && s[4] == '8';
	default:
		return false;
	}
}

int gw_path_canonical(const char *target, size_t len, char *out, size_t out_size, size_t *ret_query)
{
	return gw_path_canonical_opts(target, len, out, out_size, ret_query, 0);
}

int gw_path_canonical_opts(const char *target, size_t len, char *out, size_t out_size,
			   size_t *ret_query, unsigned flags)
{
	/* Decoding only shrinks, so the result always fits this. */
	char canon[GW_PATH_MAX + 1];
	size_t n = 0, seg = 1, query = len;

	if (len > GW_PATH_MAX)
		return -ENAMETOOLONG;
	if (!target || len == 0 || target[0] != '/')
		return -EINVAL;

	const char *q = memchr(target, '?', len);
	if (q)
		query = (size_t)(q - target);
	for (size_t i = query + 1; i < len; i++)
		if (!is_query_char((unsigned char)target[i]))
			return -EINVAL;

	canon[n++] = '/';
	for (size_t i = 1; i < query; i++) {
		unsigned char c = (unsigned char)target[i];
		if (c == '/') {
			/* An empty segment is refused, so is "//" at the start:
			 * some clients and servers read that as an authority. */
			if (n == seg || is_dot_segment(canon + seg, n - seg))
				return -EINVAL;
			canon[n++] = '/';
			seg = n;
		} else if (c == '%') {
			int v = query - i > 2 ? hex_pair(target + i + 1) : -1;
			if (v < 0 || v == 0 || v == '\\' ||
			    (v == '/' && !(flags & GW_PATH_ENCODED_SLASH)))
				return -EINVAL;
			i += 2;
			if (is_unreserved((unsigned char)v)) {
				canon[n++] = (char)v;
			} else {
				canon[n++] = '%';
				canon[n++] = enc_hex_upper[v >> 4];
				canon[n++] = enc_hex_upper[v & 0xf];
			}
		} else if (is_raw_segment_char(c)) {
			canon[n++] = (char)c;
		} else {
			return -EINVAL;
		}
	}
	/* The last segment may be empty (a trailing '/'), never a dot. */
	if (n > seg && is_dot_segment(canon + seg, n - seg))
		return -EINVAL;
	canon[n] = '\0';

	for (size_t i = 0; i < n; i++) {
		if (canon[i] != '%')
			continue;
		if (is_ambiguous_escape(canon + i))
			return -EINVAL;
		i += 2;
	}

	if (n >= out_size)
		return -ENAMETOOLONG;
	memcpy(out, canon, n + 1);
	if (ret_query)
		*ret_query = query;
	return 0;
}

static bool has_prefix(const char *path, const char *prefix, bool fold_case)
{
	if (!path || !prefix || prefix[0] != '/')
		return false;
	size_t n = strlen(prefix);
	if ((fold_case ? strncasecmp(path, prefix, n) : strncmp(path, prefix, n)) != 0)
		return false;
	return prefix[n - 1] == '/' || path[n] == '\0' || path[n] == '/';
}

bool gw_path_has_prefix(const char *path, const char *prefix)
{
	return has_prefix(path, prefix, false);
}

bool gw_path_has_prefix_nocase(const char *path, const char *prefix)
{
	return has_prefix(path, prefix, true);
}

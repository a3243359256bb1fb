/* SPDX-License-Identifier: Apache-2.0 */
/*
 * String views: a pointer and a length into someone else's memory, for
 * looking at input from the outside without copying or trusting a NUL.
 * A view never owns its bytes. Case-insensitive comparison is ASCII only,
 * on purpose: protocol tokens are ASCII and the locale must not matter.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

struct sv {
	const char *p;
	size_t len;
};

/* A view of a string literal, without strlen(). */
#define SV_LIT(s) ((struct sv){ .p = "" s, .len = sizeof(s) - 1 })

static inline struct sv sv_make(const char *p, size_t len)
{
	return (struct sv){ .p = p, .len = len };
}

/* NULL gives the empty view. */
static inline struct sv sv_from_cstr(const char *s)
{
	return (struct sv){ .p = s ? s : "", .len = s ? strlen(s) : 0 };
}

static inline bool sv_is_empty(struct sv s)
{
	return s.len == 0;
}

static inline bool sv_equal(struct sv a, struct sv b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static inline bool sv_equal_cstr(struct sv a, const char *s)
{
	return sv_equal(a, sv_from_cstr(s));
}

static inline char sv_ascii_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static inline bool sv_equal_ci(struct sv a, struct sv b)
{
	if (a.len != b.len)
		return false;
	for (size_t i = 0; i < a.len; i++)
		if (sv_ascii_lower(a.p[i]) != sv_ascii_lower(b.p[i]))
			return false;
	return true;
}

/* NULL never equals. */
static inline bool sv_equal_ci_cstr(struct sv a, const char *s)
{
	return s && sv_equal_ci(a, sv_from_cstr(s));
}

static inline bool sv_starts_with(struct sv s, struct sv prefix)
{
	return s.len >= prefix.len && sv_equal(sv_make(s.p, prefix.len), prefix);
}

static inline bool sv_ends_with(struct sv s, struct sv suffix)
{
	if (suffix.len == 0)
		return true;
	return s.len >= suffix.len &&
	       sv_equal(sv_make(s.p + s.len - suffix.len, suffix.len), suffix);
}

/* Index of the first c in s, or false when there is none. */
static inline bool sv_find_char(struct sv s, char c, size_t *ret_index)
{
	const char *q = s.len ? memchr(s.p, c, s.len) : NULL;
	if (!q)
		return false;
	if (ret_index)
		*ret_index = (size_t)(q - s.p);
	return true;
}

/* Views of the first n bytes / everything after them (n is clamped). */
static inline struct sv sv_head(struct sv s, size_t n)
{
	return sv_make(s.p, n < s.len ? n : s.len);
}

static inline struct sv sv_skip(struct sv s, size_t n)
{
	n = n < s.len ? n : s.len;
	if (n == 0)
		return s; /* s.p may be NULL: no arithmetic on it */
	return sv_make(s.p + n, s.len - n);
}

/*
 * Returns the part of *s before the first c and moves *s past that c;
 * without a c, returns all of *s and leaves it empty. Repeated calls walk
 * a separated list: "a,b,,c" gives "a", "b", "", "c".
 */
static inline struct sv sv_chop(struct sv *s, char c)
{
	size_t i;
	if (!sv_find_char(*s, c, &i)) {
		struct sv all = *s;
		*s = sv_skip(*s, s->len);
		return all;
	}
	struct sv head = sv_head(*s, i);
	*s = sv_skip(*s, i + 1);
	return head;
}

static inline bool sv_is_ascii_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static inline struct sv sv_trim_left(struct sv s)
{
	while (s.len > 0 && sv_is_ascii_space(s.p[0])) {
		s.p++;
		s.len--;
	}
	return s;
}

static inline struct sv sv_trim_right(struct sv s)
{
	while (s.len > 0 && sv_is_ascii_space(s.p[s.len - 1]))
		s.len--;
	return s;
}

static inline struct sv sv_trim(struct sv s)
{
	return sv_trim_right(sv_trim_left(s));
}

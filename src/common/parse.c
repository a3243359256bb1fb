/* SPDX-License-Identifier: Apache-2.0 */
#include "parse.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "strview.h"

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Splits s into its leading digits and the rest; at least one digit. */
static int split_digits(const char *s, struct sv *ret_digits, const char **ret_rest)
{
	if (!s)
		return -EINVAL;
	size_t n = 0;
	while (is_digit(s[n]))
		n++;
	if (n == 0)
		return -EINVAL;
	*ret_digits = sv_make(s, n);
	*ret_rest = s + n;
	return 0;
}

static int digits_to_u64(struct sv d, uint64_t *ret)
{
	uint64_t v = 0;
	for (size_t i = 0; i < d.len; i++) {
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(d.p[i] - '0'), &v))
			return -ERANGE;
	}
	*ret = v;
	return 0;
}

int parse_u64(const char *s, uint64_t *ret)
{
	struct sv digits;
	const char *rest;
	int r = split_digits(s, &digits, &rest);
	if (r < 0)
		return r;
	if (*rest != '\0')
		return -EINVAL;
	return digits_to_u64(digits, ret);
}

int parse_u64_dec_hex(const char *s, uint64_t *ret)
{
	if (!s || !(s[0] == '0' && (s[1] == 'x' || s[1] == 'X')))
		return parse_u64(s, ret);
	const char *p = s + 2;
	uint64_t v = 0;
	size_t n = 0;
	for (; p[n]; n++) {
		char c = p[n];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return -EINVAL;
		if (v >> 60)
			return -ERANGE;
		v = v << 4 | d;
	}
	if (n == 0)
		return -EINVAL;
	*ret = v;
	return 0;
}

int parse_u64_prefix(const char *s, uint64_t *ret, const char **ret_end)
{
	struct sv digits;
	const char *rest;
	int r = split_digits(s, &digits, &rest);
	if (r < 0)
		return r;
	uint64_t v;
	r = digits_to_u64(digits, &v);
	if (r < 0)
		return r;
	*ret = v;
	*ret_end = rest;
	return 0;
}

int parse_i64_prefix(const char *s, int64_t *ret, const char **ret_end)
{
	if (!s)
		return -EINVAL;
	bool neg = s[0] == '-';
	uint64_t v;
	const char *end;
	int r = parse_u64_prefix(neg ? s + 1 : s, &v, &end);
	if (r < 0)
		return r;
	if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0))
		return -ERANGE;
	*ret = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
	*ret_end = end;
	return 0;
}

int parse_int_range(const char *s, int min, int max, int *ret)
{
	if (!s || min > max)
		return -EINVAL;
	bool neg = s[0] == '-';
	uint64_t v;
	int r = parse_u64(neg ? s + 1 : s, &v);
	if (r < 0)
		return r;

	int64_t x;
	if (neg) {
		if (v > (uint64_t)INT64_MAX + 1)
			return -ERANGE;
		x = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
	} else {
		if (v > (uint64_t)INT64_MAX)
			return -ERANGE;
		x = (int64_t)v;
	}
	if (x < min || x > max)
		return -ERANGE;
	*ret = (int)x;
	return 0;
}

struct unit {
	const char *name;
	uint64_t factor;
};

static int apply_unit(struct sv digits, const char *suffix, const struct unit *units,
		      size_t n_units, bool ci, uint64_t *ret)
{
	struct sv sfx = sv_from_cstr(suffix);
	for (size_t i = 0; i < n_units; i++) {
		struct sv name = sv_from_cstr(units[i].name);
		if (ci ? !sv_equal_ci(sfx, name) : !sv_equal(sfx, name))
			continue;
		uint64_t v;
		int r = digits_to_u64(digits, &v);
		if (r < 0)
			return r;
		if (__builtin_mul_overflow(v, units[i].factor, &v))
			return -ERANGE;
		*ret = v;
		return 0;
	}
	return -EINVAL;
}

#define KIB UINT64_C(1024)

int parse_size(const char *s, uint64_t *ret)
{
	static const struct unit units[] = {
		{ "", 1 },
		{ "B", 1 },
		{ "K", KIB },
		{ "KB", KIB },
		{ "KiB", KIB },
		{ "M", KIB * KIB },
		{ "MB", KIB * KIB },
		{ "MiB", KIB * KIB },
		{ "G", KIB * KIB * KIB },
		{ "GB", KIB * KIB * KIB },
		{ "GiB", KIB * KIB * KIB },
		{ "T", KIB * KIB * KIB * KIB },
		{ "TB", KIB * KIB * KIB * KIB },
		{ "TiB", KIB * KIB * KIB * KIB },
	};
	struct sv digits;
	const char *rest;
	int r = split_digits(s, &digits, &rest);
	if (r < 0)
		return r;
	return apply_unit(digits, rest, units, sizeof(units) / sizeof(units[0]), true, ret);
}

int parse_duration(const char *s, uint64_t *ret_msec)
{
	static const struct unit units[] = {
		{ "", 1000 },
		{ "ms", 1 },
		{ "s", 1000 },
		{ "m", 60 * 1000 },
		{ "h", 60 * 60 * 1000 },
		{ "d", 24 * 60 * 60 * 1000 },
	};
	struct sv digits;
	const char *rest;
	int r = split_digits(s, &digits, &rest);
	if (r < 0)
		return r;
	return apply_unit(digits, rest, units, sizeof(units) / sizeof(units[0]), false, ret_msec);
}

int parse_double_range(const char *s, double min, double max, double *ret)
{
	if (!s || !(min <= max))
		return -EINVAL;

	/* Check the shape ourselves: strtod() would also take whitespace, a
	 * '+', hex, exponents, "inf", "nan" and the locale's decimal point. */
	size_t i = 0;
	if (s[i] == '-')
		i++;
	size_t start = i;
	while (is_digit(s[i]))
		i++;
	if (i == start)
		return -EINVAL;
	if (s[i] == '.') {
		i++;
		start = i;
		while (is_digit(s[i]))
			i++;
		if (i == start)
			return -EINVAL;
	}
	if (s[i] != '\0')
		return -EINVAL;

	locale_t c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
	if (c_locale == (locale_t)0)
		return -ENOMEM;
	char *end;
	errno = 0;
	double v = strtod_l(s, &end, c_locale);
	int saved = errno;
	freelocale(c_locale);

	if (end != s + i)
		return -EINVAL;
	if (saved == ERANGE || !isfinite(v))
		return -ERANGE;
	if (v == 0)
		v = 0; /* no "-0" */
	if (v < min || v > max)
		return -ERANGE;
	*ret = v;
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <string.h>

#include "common/parse.h"

#define SENTINEL UINT64_C(0xdeadbeefcafe)

struct u64_case {
	const char *in;
	int r;
	uint64_t v;
};

static void check_u64(int (*fn)(const char *, uint64_t *), const struct u64_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t v = SENTINEL;
		int r = fn(cases[i].in, &v);
		if (r != cases[i].r)
			fail_msg("\"%s\": returned %d, expected %d", cases[i].in, r, cases[i].r);
		/* Written only on success. */
		uint64_t want = cases[i].r == 0 ? cases[i].v : SENTINEL;
		if (v != want)
			fail_msg("\"%s\": got %llu, expected %llu", cases[i].in,
				 (unsigned long long)v, (unsigned long long)want);
	}
}

static void test_u64(void **state)
{
	static const struct u64_case cases[] = {
		{ "0", 0, 0 },
		{ "42", 0, 42 },
		{ "007", 0, 7 },
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "18446744073709551616", -ERANGE, 0 },
		{ "99999999999999999999999", -ERANGE, 0 },
		{ "", -EINVAL, 0 },
		{ "-1", -EINVAL, 0 },
		{ "+1", -EINVAL, 0 },
		{ " 1", -EINVAL, 0 },
		{ "1 ", -EINVAL, 0 },
		{ "1\n", -EINVAL, 0 },
		{ "0x10", -EINVAL, 0 },
		{ "1e3", -EINVAL, 0 },
		{ "1.0", -EINVAL, 0 },
		{ "12a", -EINVAL, 0 },
		/* Junk wins over overflow: it is not a number at all. */
		{ "99999999999999999999999x", -EINVAL, 0 },
	};
	check_u64(parse_u64, cases, sizeof(cases) / sizeof(cases[0]));
	uint64_t v = SENTINEL;
	assert_int_equal(parse_u64(NULL, &v), -EINVAL);
	assert_true(v == SENTINEL);
}

static void test_u64_dec_hex(void **state)
{
	static const struct u64_case cases[] = {
		{ "0", 0, 0 },
		{ "268435456", 0, 268435456 },
		{ "0x10000000", 0, 0x10000000 },
		{ "0X6000ABCD", 0, 0x6000abcd },
		{ "0xffffffffffffffff", 0, UINT64_MAX },
		{ "0x10000000000000000", -ERANGE, 0 },
		{ "0x", -EINVAL, 0 },
		{ "0xg", -EINVAL, 0 },
		{ "0x10 ", -EINVAL, 0 },
		{ "-0x1", -EINVAL, 0 },
		{ "x10", -EINVAL, 0 },
		{ "", -EINVAL, 0 },
		{ "010", 0, 10 },
	};
	check_u64(parse_u64_dec_hex, cases, sizeof(cases) / sizeof(cases[0]));
	uint64_t v = SENTINEL;
	assert_int_equal(parse_u64_dec_hex(NULL, &v), -EINVAL);
	assert_true(v == SENTINEL);
}

static void test_prefix(void **state)
{
	static const struct {
		const char *in;
		int r;
		int64_t v;
		size_t used;
	} cases[] = {
		{ "42 rest", 0, 42, 2 },
		{ "0", 0, 0, 1 },
		{ "-17x", 0, -17, 3 },
		{ "9223372036854775807)", 0, INT64_MAX, 19 },
		{ "-9223372036854775808", 0, INT64_MIN, 20 },
		{ "9223372036854775808", -ERANGE, 0, 0 },
		{ "-9223372036854775809", -ERANGE, 0, 0 },
		{ "", -EINVAL, 0, 0 },
		{ "-", -EINVAL, 0, 0 },
		{ " 1", -EINVAL, 0, 0 },
		{ "+1", -EINVAL, 0, 0 },
		{ "x1", -EINVAL, 0, 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t v = 12345;
		const char *end = NULL;
		int r = parse_i64_prefix(cases[i].in, &v, &end);
		if (r != cases[i].r)
			fail_msg("\"%s\": returned %d, expected %d", cases[i].in, r, cases[i].r);
		if (r == 0) {
			assert_true(v == cases[i].v);
			assert_ptr_equal(end, cases[i].in + cases[i].used);
		} else {
			assert_true(v == 12345); /* written only on success */
			assert_null(end);
		}
	}
	uint64_t u = 0;
	const char *end = NULL;
	assert_int_equal(parse_u64_prefix("18446744073709551615 1", &u, &end), 0);
	assert_true(u == UINT64_MAX);
	assert_string_equal(end, " 1");
	assert_int_equal(parse_u64_prefix("18446744073709551616", &u, &end), -ERANGE);
	assert_int_equal(parse_u64_prefix("-1", &u, &end), -EINVAL);
	assert_int_equal(parse_u64_prefix(NULL, &u, &end), -EINVAL);
}

static void test_size(void **state)
{
	static const struct u64_case cases[] = {
		{ "1048576", 0, 1048576 },
		{ "0", 0, 0 },
		{ "100B", 0, 100 },
		{ "100b", 0, 100 },
		{ "1K", 0, 1024 },
		{ "4kb", 0, 4096 },
		{ "2KiB", 0, 2048 },
		{ "512M", 0, UINT64_C(512) << 20 },
		{ "512MiB", 0, UINT64_C(512) << 20 },
		{ "512mib", 0, UINT64_C(512) << 20 },
		{ "2G", 0, UINT64_C(2) << 30 },
		{ "2gB", 0, UINT64_C(2) << 30 },
		{ "3T", 0, UINT64_C(3) << 40 },
		{ "3TiB", 0, UINT64_C(3) << 40 },
		{ "16777215T", 0, UINT64_C(16777215) << 40 },
		{ "16777216T", -ERANGE, 0 },
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "18446744073709551615K", -ERANGE, 0 },
		{ "", -EINVAL, 0 },
		{ "-1", -EINVAL, 0 },
		{ "1.5G", -EINVAL, 0 },
		{ "12X", -EINVAL, 0 },
		{ "1 G", -EINVAL, 0 },
		{ "G", -EINVAL, 0 },
		{ "1GG", -EINVAL, 0 },
		{ "1iB", -EINVAL, 0 },
		{ "1Gi", -EINVAL, 0 },
		{ "1P", -EINVAL, 0 },
		{ "1G ", -EINVAL, 0 },
	};
	check_u64(parse_size, cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_duration(void **state)
{
	static const struct u64_case cases[] = {
		{ "30", 0, 30000 },
		{ "30s", 0, 30000 },
		{ "500ms", 0, 500 },
		{ "0", 0, 0 },
		{ "5m", 0, 300000 },
		{ "2h", 0, 7200000 },
		{ "1d", 0, 86400000 },
		{ "18446744073709551615ms", 0, UINT64_MAX },
		{ "18446744073709551615", -ERANGE, 0 },
		{ "18446744073709551s", 0, UINT64_C(18446744073709551000) },
		{ "18446744073709552s", -ERANGE, 0 },
		{ "", -EINVAL, 0 },
		{ "s", -EINVAL, 0 },
		{ "-5s", -EINVAL, 0 },
		{ "1.5s", -EINVAL, 0 },
		{ "5M", -EINVAL, 0 },
		{ "5S", -EINVAL, 0 },
		{ "5 s", -EINVAL, 0 },
		{ "1h30m", -EINVAL, 0 },
		{ "5min", -EINVAL, 0 },
	};
	check_u64(parse_duration, cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_int_range(void **state)
{
	int v = 12345;
	assert_int_equal(parse_int_range("5", 0, 10, &v), 0);
	assert_int_equal(v, 5);
	assert_int_equal(parse_int_range("-5", -10, 10, &v), 0);
	assert_int_equal(v, -5);
	assert_int_equal(parse_int_range("-0", -10, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(parse_int_range("2147483647", INT_MIN, INT_MAX, &v), 0);
	assert_int_equal(v, INT_MAX);
	assert_int_equal(parse_int_range("-2147483648", INT_MIN, INT_MAX, &v), 0);
	assert_int_equal(v, INT_MIN);

	v = 777;
	assert_int_equal(parse_int_range("2147483648", INT_MIN, INT_MAX, &v), -ERANGE);
	assert_int_equal(parse_int_range("-2147483649", INT_MIN, INT_MAX, &v), -ERANGE);
	assert_int_equal(parse_int_range("-9223372036854775808", INT_MIN, INT_MAX, &v), -ERANGE);
	assert_int_equal(parse_int_range("-9223372036854775809", INT_MIN, INT_MAX, &v), -ERANGE);
	assert_int_equal(parse_int_range("99999999999999999999999", 0, 10, &v), -ERANGE);
	assert_int_equal(parse_int_range("11", 0, 10, &v), -ERANGE);
	assert_int_equal(parse_int_range("-1", 0, 10, &v), -ERANGE);
	assert_int_equal(parse_int_range("", 0, 10, &v), -EINVAL);
	assert_int_equal(parse_int_range("-", 0, 10, &v), -EINVAL);
	assert_int_equal(parse_int_range("--1", -10, 10, &v), -EINVAL);
	assert_int_equal(parse_int_range("+1", 0, 10, &v), -EINVAL);
	assert_int_equal(parse_int_range(" 1", 0, 10, &v), -EINVAL);
	assert_int_equal(parse_int_range("1", 10, 0, &v), -EINVAL);
	assert_int_equal(parse_int_range(NULL, 0, 10, &v), -EINVAL);
	assert_int_equal(v, 777);
}

static void test_double(void **state)
{
	double d = -42;
	assert_int_equal(parse_double_range("1.5", 0, 64, &d), 0);
	assert_true(d == 1.5);
	assert_int_equal(parse_double_range("0.25", 0, 64, &d), 0);
	assert_true(d == 0.25);
	assert_int_equal(parse_double_range("64", 0, 64, &d), 0);
	assert_true(d == 64);
	assert_int_equal(parse_double_range("0", 0, 64, &d), 0);
	assert_true(d == 0);
	assert_int_equal(parse_double_range("-0", 0, 64, &d), 0);
	assert_true(d == 0 && !signbit(d));
	assert_int_equal(parse_double_range("-2.5", -10, 10, &d), 0);
	assert_true(d == -2.5);

	d = -42;
	const char *bad[] = { "",	  ".5", "1.", "1.5.2", "1e3", "0x10", "inf", "nan",  "NaN",
			      "infinity", " 1", "1 ", "+1",    "1,5", "--1",  "-",   "1.5x", "٣" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (parse_double_range(bad[i], -100, 100, &d) != -EINVAL)
			fail_msg("\"%s\" was not refused", bad[i]);
	}
	assert_int_equal(parse_double_range("64.0001", 0, 64, &d), -ERANGE);
	assert_int_equal(parse_double_range("-1", 0, 64, &d), -ERANGE);
	/* Too large for a double: not "inf". */
	char huge[400];
	memset(huge, '9', sizeof(huge) - 1);
	huge[sizeof(huge) - 1] = '\0';
	assert_int_equal(parse_double_range(huge, 0, INFINITY, &d), -ERANGE);
	assert_int_equal(parse_double_range("1", 2, 1, &d), -EINVAL);
	assert_int_equal(parse_double_range("1", NAN, 1, &d), -EINVAL);
	assert_int_equal(parse_double_range(NULL, 0, 1, &d), -EINVAL);
	assert_true(d == -42);
}

static void test_double_ignores_locale(void **state)
{
	/* Where a locale with a decimal comma exists, "1.5" must still mean
	 * 1.5 and "1,5" must still be refused. */
	const char *names[] = { "de_DE.UTF-8", "fr_FR.UTF-8", "de_DE", "C.UTF-8" };
	const char *set = NULL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !set; i++)
		set = setlocale(LC_NUMERIC, names[i]);
	double d = 0;
	assert_int_equal(parse_double_range("1.5", 0, 2, &d), 0);
	assert_true(d == 1.5);
	assert_int_equal(parse_double_range("1,5", 0, 2, &d), -EINVAL);
	setlocale(LC_NUMERIC, "C");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_u64),	 cmocka_unit_test(test_u64_dec_hex),
		cmocka_unit_test(test_prefix),	 cmocka_unit_test(test_size),
		cmocka_unit_test(test_duration), cmocka_unit_test(test_int_range),
		cmocka_unit_test(test_double),	 cmocka_unit_test(test_double_ignores_locale),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/encode.h"
#include "common/redact.h"

#define MARK REDACT_MARK

/* The redaction of s as a string the caller frees. */
static char *red(const struct redactor *r, const char *s)
{
	struct buf out = BUF_INIT(16 * 1024 * 1024);
	assert_int_equal(redact(r, s, strlen(s), &out), 0);
	char *ret = NULL;
	size_t len;
	assert_int_equal(buf_steal(&out, &ret, &len), 0);
	return ret;
}

static void expect(const struct redactor *r, const char *in, const char *want)
{
	char *got = red(r, in);
	if (strcmp(got, want) != 0)
		fail_msg("redact(\"%s\")\n  got  \"%s\"\n  want \"%s\"", in, got, want);
	free(got);
}

static struct redactor *with(const char *const *values)
{
	struct redactor *r = NULL;
	assert_int_equal(redactor_new(&r), 0);
	for (size_t i = 0; values && values[i]; i++)
		assert_int_equal(redactor_add(r, values[i], strlen(values[i])), 0);
	return r;
}

static void test_add_refusals(void **state)
{
	struct redactor *r = with(NULL);
	assert_int_equal(redactor_add(r, "short", 5), -EINVAL);
	assert_int_equal(redactor_add(r, "1234567", 7), -EINVAL);
	assert_int_equal(redactor_add(NULL, "12345678", 8), -EINVAL);
	/* Values that could show through a marker. */
	assert_int_equal(redactor_add(r, "xx[REDACTED]yy", 14), -EINVAL);
	assert_int_equal(redactor_add(r, "REDACTED", 8), -EINVAL);
	assert_int_equal(redactor_add(r, "CTED]abcdef", 11), -EINVAL);
	assert_int_equal(redactor_add(r, "abcdef[RED", 10), -EINVAL);
	/* Nothing was kept by the refusals: text passes unchanged. */
	expect(r, "short 1234567 abcdef[RED", "short 1234567 abcdef[RED");
	/* The same value twice is fine. */
	assert_int_equal(redactor_add(r, "12345678", 8), 0);
	assert_int_equal(redactor_add(r, "12345678", 8), 0);
	expect(r, "a12345678b", "a" MARK "b");
	redactor_free(r);
	redactor_free(NULL);
}

static void test_values(void **state)
{
	static const char *const v[] = { "hunter2hunter2", "s3cr3t-v@lue", "abcdefgh", "efghijkl",
					 NULL };
	struct redactor *r = with(v);
	expect(r, "", "");
	expect(r, "nothing here", "nothing here");
	expect(r, "pw=hunter2hunter2;", "pw=" MARK ";");
	expect(r, "hunter2hunter2hunter2hunter2", MARK);
	expect(r, "x s3cr3t-v@lue y s3cr3t-v@lue", "x " MARK " y " MARK);
	/* Overlapping values are covered together, once. */
	expect(r, "[abcdefghijkl]", "[" MARK "]");
	expect(r, "abcdefgh efghijkl", MARK " " MARK);
	/* Near misses stay. */
	expect(r, "hunter2hunter s3cr3t-v@lu abcdefg", "hunter2hunter s3cr3t-v@lu abcdefg");
	/* A value inside a longer word still goes. */
	expect(r, "xxhunter2hunter2xx", "xx" MARK "xx");
	redactor_free(r);
}

static void test_prefix_values(void **state)
{
	static const char *const v[] = { "aaaaaaaa", "aaaaaaaab", "aaaaaaaaaaaac", NULL };
	struct redactor *r = with(v);
	expect(r, "aaaaaaa", "aaaaaaa");
	expect(r, "aaaaaaaa", MARK);
	expect(r, "aaaaaaaaaaaaaaaaaaaaaaab", MARK);
	expect(r, "baaaaaaaaaaaacd", "b" MARK "d");
	redactor_free(r);
}

static void test_encoded_forms(void **state)
{
	static const char *const v[] = { "p@ss w0rd/secret", NULL };
	struct redactor *r = with(v);
	const char *value = v[0];
	size_t len = strlen(value);
	char b64[64], pct[64];
	/* Standard base64 of the value itself. */
	enc_base64(value, len, b64);
	char *in = NULL;
	assert_true(asprintf(&in, "token %s end", b64) > 0);
	expect(r, in, "token " MARK " end");
	free(in);
	/* Percent-encoded, both cases. */
	for (int lower = 0; lower < 2; lower++) {
		enc_percent(value, len, lower, pct);
		assert_true(asprintf(&in, "?key=%s&x=1", pct) > 0);
		expect(r, in, "?key=" MARK "&x=1");
		free(in);
	}
	/* As JSON text escapes it. */
	{
		struct redactor *q = with(NULL);
		const char *jv = "a\"b\\c\nd\x01"
				 "efgh";
		assert_int_equal(redactor_add(q, jv, strlen(jv)), 0);
		expect(q, "{\"k\":\"a\\\"b\\\\c\\nd\\u0001efgh\"}", "{\"k\":\"" MARK "\"}");
		expect(q, jv, MARK);
		redactor_free(q);
	}
	/* A Basic pair with any user: the value at each alignment. */
	static const char *const users[] = { "u", "us", "usr", "someone", "x1" };
	for (size_t i = 0; i < sizeof(users) / sizeof(users[0]); i++) {
		char pair[128];
		int pl = snprintf(pair, sizeof(pair), "%s:%s", users[i], value);
		enc_base64(pair, (size_t)pl, b64);
		assert_true(asprintf(&in, "Basic-ish %s", b64) > 0);
		char *got = red(r, in);
		/* The encoding's middle, which only the value makes, is gone. */
		assert_non_null(strstr(got, MARK));
		size_t keep = strlen(got) - strlen(MARK);
		assert_true(keep <= strlen("Basic-ish ") + 4 + 4 + 4);
		free(got);
		free(in);
	}
	redactor_free(r);
}

static void test_shapes(void **state)
{
	struct redactor *r = with(NULL);
	/* clang-format off */
	static const char *const cases[][2] = {
		{ "key sk-ant-api03-AbCdEf0123456789_-xyzXYZ done", "key " MARK " done" },
		{ "ANTHROPIC_API_KEY=sk-ant-test1234", "ANTHROPIC_API_KEY=" MARK },
		{ "sk-proj-abcdefghijklmnopqrstuvwxyz0123_-AB", MARK },
		{ "sk-0123456789abcdefghijABCDEFGHIJ0123456789abcdef.", MARK "." },
		{ "AIzaSyA1234567890abcdefghijklmnopqrstuv", MARK },
		{ "ghp_0123456789abcdefghijABCDEFGHIJ012345!", MARK "!" },
		{ "gho_0123456789abcdefghijABCDEFGHIJ012345", MARK },
		{ "ghu_0123456789abcdefghijABCDEFGHIJ012345", MARK },
		{ "ghs_0123456789abcdefghijABCDEFGHIJ012345", MARK },
		{ "ghr_0123456789abcdefghijABCDEFGHIJ012345", MARK },
		{ "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", MARK },
		{ "aws AKIAIOSFODNN7EXAMPLE key", "aws " MARK " key" },
		{ "ASIAIOSFODNN7EXAMPLE", MARK },
		{ "xoxb-123456789012-abcdefghij", MARK },
		{ "xoxp-1234567890-x", MARK },
		{ "Authorization: Bearer abc.def-ghi_jkl", "Authorization: " MARK },
		{ "authorization:Basic dXNlcjpwYXNz\r\nHost: x", "authorization:" MARK "\r\nHost: x" },
		{ "{\"Authorization\": \"token abc\", \"a\": 1}", "{\"Authorization\": \"" MARK "\", \"a\": 1}" },
		{ "curl -H 'Authorization: Bearer x1' url", "curl -H 'Authorization: " MARK "' url" },
		{ "-H \"x-api-key: sk-foo\" -H \"x-goog-api-key: zzz\"", "-H \"x-api-key: " MARK "\" -H \"x-goog-api-key: " MARK "\"" },
		{ "AUTHORIZATION=abc def", "AUTHORIZATION=" MARK },
		{ "use Bearer eyJhbGciOiJIUzI1NiJ9.e30.x now", "use Bearer " MARK " now" },
		{ "bearer 0123456789abcdef", "bearer " MARK },
		{ "Bearer ABCDEFGHIJKLMNOPQRSTUVWX", "Bearer " MARK },
	};
	static const char *const same[] = {
		"task-management-system-overview-document",
		"sk-learn and sk-short",
		"the Bearer authentication scheme",
		"Bearer token",
		"ghp_short",
		"AKIA1234",
		"xoxb-123",
		"AIzaShort",
		"Authorization:",
		"authorization required",
		"MASK-ant-api03-aaaaaaaaaaaaaaa",
		"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
		"Authorization: " MARK,
		"Bearer " MARK,
	};
	/* clang-format on */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect(r, cases[i][0], cases[i][1]);
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		expect(r, same[i], same[i]);
		expect(NULL, same[i], same[i]);
	}
	/* Distinctive prefixes glued to a word still match. */
	expect(r, "xsk-ant-api03-aaaaaaaa ghp_0123456789abcdefghijABCDEFGHIJ012345",
	       "x" MARK " " MARK);
	expect(r, "keyAKIAIOSFODNN7EXAMPLE", "key" MARK);
	/* Without a redactor: the shapes alone. */
	expect(NULL, "k=sk-ant-api03-xxxxxxxxxxxx", "k=" MARK);
	redactor_free(r);
}

static void test_pem(void **state)
{
	expect(NULL,
	       "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n"
	       "-----END RSA PRIVATE KEY-----\nafter",
	       "key:\n" MARK "\nafter");
	expect(NULL, "-----BEGIN PRIVATE KEY-----\nMII...\n-----END PRIVATE KEY-----", MARK);
	expect(NULL,
	       "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNz\n-----END OPENSSH PRIVATE KEY-----",
	       MARK);
	expect(NULL,
	       "x -----BEGIN ENCRYPTED PRIVATE KEY-----abc-----END ENCRYPTED PRIVATE KEY----- y",
	       "x " MARK " y");
	expect(NULL,
	       "-----BEGIN PGP PRIVATE KEY BLOCK-----\nx\n-----END PGP PRIVATE KEY BLOCK-----",
	       MARK);
	/* Cut before its end: everything after BEGIN goes. */
	expect(NULL, "a -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI", "a " MARK);
	/* Two blocks. */
	expect(NULL,
	       "-----BEGIN PRIVATE KEY-----\na\n-----END PRIVATE KEY-----\n--\n"
	       "-----BEGIN PRIVATE KEY-----\nb\n-----END PRIVATE KEY-----",
	       MARK "\n--\n" MARK);
}

static void test_values_and_shapes_merge(void **state)
{
	static const char *const v[] = { "zzzzzzzz0123", NULL };
	struct redactor *r = with(v);
	/* A value right after a shape, and one inside a PEM block. */
	expect(r, "sk-ant-aaaaaaaaaaaa zzzzzzzz0123", MARK " " MARK);
	expect(r, "sk-ant-aaaaaaaaaaaazzzzzzzz0123", MARK);
	expect(r, "zzzzzzzz0123sk-ant-aaaaaaaaaaaa", MARK);
	expect(r, "-----BEGIN PRIVATE KEY-----zzzzzzzz0123-----END PRIVATE KEY-----", MARK);
	redactor_free(r);
}

static void test_buf_limit_leaves_out_unchanged(void **state)
{
	struct buf out = BUF_INIT(20);
	assert_int_equal(buf_append_str(&out, "head:"), 0);
	const char *t = "sk-ant-aaaaaaaaaaaaaaaaa and more text that does not fit";
	assert_int_equal(redact(NULL, t, strlen(t), &out), -ENOBUFS);
	assert_string_equal(out.data, "head:");
	assert_int_equal(out.len, 5);
	buf_free(&out);
}

static void test_inplace(void **state)
{
	static const char *const v[] = { "abcdefgh", NULL };
	struct redactor *r = with(v);
	char s[64];
	snprintf(s, sizeof(s), "x abcdefgh y");
	redact_inplace(r, s, sizeof(s));
	assert_string_equal(s, "x " MARK " y");
	/* Growth past the buffer is cut, never spills. */
	char small[12];
	memcpy(small, "abcdefgh!!!", 12);
	redact_inplace(r, small, sizeof(small));
	assert_string_equal(small, "[REDACTED]!");
	/* A cut inside a UTF-8 character backs off to its start. */
	char u[16];
	memcpy(u, "abcdefgh\xc3\xa9\xc3\xa9", 13);
	redact_inplace(r, u, 13);
	assert_string_equal(u, "[REDACTED]\xc3\xa9");
	/* An unterminated buffer ends at its last byte. */
	char raw[9];
	memcpy(raw, "abcdefgh!", 9);
	redact_inplace(r, raw, sizeof(raw));
	assert_int_equal(strlen(raw), 8);
	assert_null(strstr(raw, "abcdefgh"));
	redact_inplace(r, NULL, 4);
	redactor_free(r);
}

/* The union of every occurrence, naively. */
static char *reference(const char *const *v, size_t nv, const char *t, size_t n)
{
	unsigned char *cov = calloc(n + 1, 1);
	assert_non_null(cov);
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < nv; k++) {
			size_t l = strlen(v[k]);
			if (l <= n - i && memcmp(t + i, v[k], l) == 0)
				memset(cov + i, 1, l);
		}
	struct buf out = BUF_INIT(SIZE_MAX / 2);
	for (size_t i = 0; i < n;) {
		if (!cov[i]) {
			assert_int_equal(buf_append(&out, t + i, 1), 0);
			i++;
			continue;
		}
		assert_int_equal(buf_append_str(&out, MARK), 0);
		while (i < n && cov[i])
			i++;
	}
	free(cov);
	char *ret;
	size_t len;
	assert_int_equal(buf_steal(&out, &ret, &len), 0);
	return ret;
}

static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* Against the naive reference on random text from an alphabet that can
 * make no shape, with values that overlap and extend each other. */
static void test_matches_reference(void **state)
{
	static const char alphabet[] = "acdf01";
	uint32_t seed = 12345;
	for (int round = 0; round < 300; round++) {
		char vals[6][24];
		const char *v[7] = { 0 };
		size_t nv = 1 + rnd(&seed) % 6;
		struct redactor *r = with(NULL);
		for (size_t k = 0; k < nv; k++) {
			size_t l = 8 + rnd(&seed) % 8;
			for (size_t m = 0; m < l; m++)
				vals[k][m] = alphabet[rnd(&seed) % 3];
			if (k > 0 && rnd(&seed) % 2) /* extend another */
				memcpy(vals[k], vals[k - 1], 8);
			vals[k][l] = '\0';
			v[k] = vals[k];
			/* An encoded form can only add coverage; keep the check
			 * exact by giving values with nothing to percent-encode
			 * and reading base64 forms out of the reference. */
			assert_int_equal(redactor_add(r, v[k], l), 0);
		}
		char text[400];
		size_t n = rnd(&seed) % sizeof(text);
		for (size_t i = 0; i < n; i++)
			text[i] = alphabet[rnd(&seed) % 3];
		/* The base64 forms of the values are letters and digits outside
		 * the alphabet's three letters mostly; add them to the reference
		 * all the same. */
		const char *all[7 * 5] = { 0 };
		char forms[6][4][48];
		size_t na = 0;
		for (size_t k = 0; k < nv; k++) {
			all[na++] = v[k];
			size_t l = strlen(v[k]);
			for (size_t s = 0; s < 4; s++) {
				size_t from = s == 3 ? 0 : s, cnt = s == 3 ? l : (l - from) / 3 * 3;
				enc_base64(v[k] + from, cnt, forms[k][s]);
				if (strlen(forms[k][s]) >= REDACT_MIN_VALUE)
					all[na++] = forms[k][s];
			}
		}
		char *want = reference(all, na, text, n);
		struct buf out = BUF_INIT(1 << 20);
		assert_int_equal(redact(r, text, n, &out), 0);
		if (strcmp(out.data, want) != 0)
			fail_msg("round %d: got \"%s\" want \"%s\"", round, out.data, want);
		for (size_t k = 0; k < nv; k++)
			assert_null(strstr(out.data, v[k]));
		buf_free(&out);
		free(want);
		redactor_free(r);
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double time_redact(const struct redactor *r, const char *t, size_t n)
{
	struct buf out = BUF_INIT(4 * n + 1024);
	double t0 = now_s();
	assert_int_equal(redact(r, t, n, &out), 0);
	double dt = now_s() - t0;
	buf_free(&out);
	return dt;
}

/*
 * Linear on hostile text: doubling the text at most about doubles the
 * time (checked with a wide margin against noise), for the shapes'
 * near misses and for a thousand values sharing a long prefix.
 */
static void test_linear_time(void **state)
{
	static const char *const units[] = {
		"sk-aaaaaaaaaaaaaaaaaa!", /* one short of a key, again and again */
		"AIzaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
		"ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
		"-----BEGIN AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"Bearer                abcdefghijklmnop ",
		"authorization                \"x\"",
		"-----BEGIN PRIVATE KEY-----", /* no END: once to the end */
		"prefixprefixprefix-00",
	};
	struct redactor *r = with(NULL);
	char v[64];
	for (int k = 0; k < 1000; k++) {
		snprintf(v, sizeof(v), "prefixprefixprefix-%04d", k);
		assert_int_equal(redactor_add(r, v, strlen(v)), 0);
	}
	for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
		size_t ul = strlen(units[u]);
		double dt[2];
		for (int s = 0; s < 2; s++) {
			size_t n = (size_t)(1u << 20) << s;
			char *t = malloc(n);
			assert_non_null(t);
			for (size_t i = 0; i < n; i++)
				t[i] = units[u][i % ul];
			dt[s] = time_redact(r, t, n);
			free(t);
		}
		/* 2 MiB in well under a second even sanitized, and no
		 * quadratic growth. */
		if (dt[1] > 2.0 || dt[1] > 4 * dt[0] + 0.05)
			fail_msg("unit %zu: 1 MiB %.3f s, 2 MiB %.3f s", u, dt[0], dt[1]);
	}
	redactor_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_refusals),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_prefix_values),
		cmocka_unit_test(test_encoded_forms),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_pem),
		cmocka_unit_test(test_values_and_shapes_merge),
		cmocka_unit_test(test_buf_limit_leaves_out_unchanged),
		cmocka_unit_test(test_inplace),
		cmocka_unit_test(test_matches_reference),
		cmocka_unit_test(test_linear_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

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

#include "common/cleanup.h"
#include "gateway/path.h"

/* Canonicalizes s (len bytes) and checks the outcome; on success also that
 * the result is a fixed point and that nothing is written past it. */
static void check_len(const char *s, size_t len, int want_r, const char *want, size_t want_query)
{
	char out[GW_PATH_MAX + 2];
	size_t query = 12345;
	memset(out, 'X', sizeof(out));
	/* An exact-size copy with no terminator: a sanitized build catches a
	 * read past the end. */
	_cleanup_free_ char *exact = malloc(len ? len : 1);
	assert_non_null(exact);
	if (len > 0)
		memcpy(exact, s, len);
	int r = gw_path_canonical(exact, len, out, sizeof(out), &query);
	if (r != want_r)
		print_error("input \"%.*s\": got %d, want %d\n", (int)len, s, r, want_r);
	assert_int_equal(r, want_r);
	if (r < 0) {
		/* Out-parameters are left alone on failure. */
		assert_int_equal(query, 12345);
		assert_int_equal(out[0], 'X');
		return;
	}
	assert_string_equal(out, want);
	assert_int_equal(query, want_query);
	assert_int_equal(out[strlen(out) + 1], 'X');

	char again[GW_PATH_MAX + 1];
	size_t q2;
	assert_int_equal(gw_path_canonical(out, strlen(out), again, sizeof(again), &q2), 0);
	assert_string_equal(again, out);
	assert_int_equal(q2, strlen(out));
}

static void ok(const char *s, const char *want)
{
	const char *q = strchr(s, '?');
	check_len(s, strlen(s), 0, want, q ? (size_t)(q - s) : strlen(s));
}

static void bad(const char *s)
{
	check_len(s, strlen(s), -EINVAL, NULL, 0);
}

static void test_plain(void **state)
{
	ok("/", "/");
	ok("/a", "/a");
	ok("/a/b/c", "/a/b/c");
	/* A trailing slash is kept: to many servers "/a/" is not "/a". */
	ok("/a/b/", "/a/b/");
	ok("/repos/octo/hello-world/issues", "/repos/octo/hello-world/issues");
	/* Case is kept: paths are case-sensitive. */
	ok("/Repos/OCTO", "/Repos/OCTO");
	/* Everything RFC 3986 allows raw in a segment, but ';'. */
	ok("/AZaz09-._~!$&'()*+,=:@", "/AZaz09-._~!$&'()*+,=:@");
	ok("/v2/library/ubuntu/manifests/sha256:abc", "/v2/library/ubuntu/manifests/sha256:abc");
	ok("/github.com/!user/mod/@v/list", "/github.com/!user/mod/@v/list");
}

static void test_query(void **state)
{
	ok("/?", "/");
	ok("/a?b=1", "/a");
	ok("/a/?b=1&c=%zz", "/a/");
	ok("/a?b?c", "/a");
	ok("/a?", "/a");
	/* What follows the '?' is not canonicalized: dots, slashes, odd
	 * escapes and raw specials are the upstream's business... */
	ok("/info/refs?service=git-upload-pack", "/info/refs");
	ok("/a?x=/../..&y=%2F%00&z={|}\\;", "/a");
	/* ...but nothing that breaks the request line or is a fragment. */
	bad("/a?b c");
	bad("/a?b\r\nHost: evil");
	bad("/a?b\x7f");
	bad("/a?\x80");
	bad("/a?b#c");
	check_len("/a?b\0c", 6, -EINVAL, NULL, 0);
	/* A '?' inside an escape is not a query. */
	bad("/a%?x");
	bad("/a%4?x");
	ok("/a%3F?x", "/a%3F");
}

static void test_decode_unreserved(void **state)
{
	ok("/%41%5a%61%7a%30%39", "/AZaz09");
	ok("/%2d%2D%5f%5F%7e%7E", "/--__~~");
	/* '.' is unreserved: decoded, then checked as a dot like any other. */
	ok("/a%2eb", "/a.b");
	ok("/x%2E%2E%2Ey", "/x...y");
	ok("/repos/%6Fcto/hello%2Dworld", "/repos/octo/hello-world");
	/* Decoding shrinks: the query offset is in the input. */
	ok("/%41?%41", "/A");
}

static void test_keep_reserved(void **state)
{
	/* Kept, hex upper-cased. */
	ok("/a%3a", "/a%3A");
	ok("/a%3A", "/a%3A");
	ok("/%7b%7C%7d", "/%7B%7C%7D");
	ok("/%20", "/%20");
	ok("/%3f%23", "/%3F%23");
	ok("/%3b", "/%3B");
	ok("/a%3bb/c", "/a%3Bb/c");
	ok("/%c3%a4", "/%C3%A4");
	ok("/%ff%FE", "/%FF%FE");
	ok("/%01%1f%7f", "/%01%1F%7F");
	ok("/%40%21%2b", "/%40%21%2B");
	/* An encoded '%' is data: the two characters after it are literal
	 * and keep their case. */
	ok("/%25", "/%25");
	ok("/%2541", "/%2541");
	ok("/%25zz", "/%25zz");
	ok("/%252", "/%252");
	ok("/%25ab", "/%25ab");
	ok("/%25%41b", "/%25Ab");
	ok("/%2525", "/%2525");
}

static void test_dot_segments(void **state)
{
	static const char *const refused[] = {
		"/.",
		"/..",
		"/./",
		"/../",
		"/./a",
		"/../a",
		"/a/.",
		"/a/..",
		"/a/./b",
		"/a/../b",
		"/a/b/..",
		"/a/b/../",
		"/%2e",
		"/%2E",
		"/%2e%2e",
		"/%2E%2E",
		"/.%2e",
		"/%2e.",
		"/%2E%2e/",
		"/a/%2e/b",
		"/a/%2e%2E/b",
		"/a/..?x=1",
		"/a/.?",
		"/repos/o/r/../../other/x",
		"/repos/o/r/%2e%2e/%2e%2e/other/x",
		/* Path parameters: "..;" is ".." to servlet containers. */
		"/a/..;/b",
		"/a/.;/b",
		"/a/..;",
		"/..;x",
		"/a/..%3b/b",
		"/a/..%3B",
		"/a/.%3Bx/b",
		"/a/%2e%2e%3b/b",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i]);

	/* Dots inside names, and more than two, are names. */
	ok("/.a", "/.a");
	ok("/a.", "/a.");
	ok("/..a", "/..a");
	ok("/a..", "/a..");
	ok("/a..b", "/a..b");
	ok("/...", "/...");
	ok("/.../x", "/.../x");
	ok("/%2e%2e%2e", "/...");
	ok("/.well-known/acme", "/.well-known/acme");
	ok("/repos/o/.github", "/repos/o/.github");
	ok("/a/...%3B", "/a/...%3B");
	ok("/a/.x%3B", "/a/.x%3B");
	ok("/a%3B..", "/a%3B..");
}

static void test_separators(void **state)
{
	static const char *const refused[] = {
		"/a%2Fb",
		"/a%2fb",
		"/%2F",
		"/repos/o/r%2F..%2Fx",
		"/repos/o/r%2f%2e%2e%2fx",
		"/a%5Cb",
		"/a%5cb",
		"/a\\b",
		"/\\",
		"/..\\",
		"/a%00",
		"/%00/a",
		/* Empty segments, anywhere; "//" at the start could read as an
		 * authority. */
		"//",
		"//a",
		"/a//b",
		"/a//",
		"///",
		"/a/b//c?x",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i]);
	check_len("/a\0b", 4, -EINVAL, NULL, 0);
	check_len("/\0", 2, -EINVAL, NULL, 0);
	/* The length is what counts, not a NUL. */
	check_len("/ab\0", 3, 0, "/ab", 3);
}

static void test_bad_escapes(void **state)
{
	static const char *const refused[] = {
		"/%",	   "/a%",   "/%4",  "/%4g", "/%g4", "/%%41",
		"/%u002e", "/% 41", "/%-1", "/%+1", "/a%2", "/%0x41",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i]);
}

static void test_raw_characters(void **state)
{
	static const char refused[] = " \"#<>[\\]^`{|};\t\r\n\x01\x1f\x7f";
	for (size_t i = 0; i < sizeof(refused) - 1; i++) {
		char s[8];
		snprintf(s, sizeof(s), "/a%cb", refused[i]);
		bad(s);
	}
	for (unsigned c = 0x80; c <= 0xff; c++) {
		char s[8];
		snprintf(s, sizeof(s), "/a%cb", (char)c);
		bad(s);
	}
	bad("/a#");
	bad("/#");
	bad("/a;jsessionid=1");
	bad("/admin;x");
	bad("/r\xc3\xa4");
}

static void test_not_origin_form(void **state)
{
	static const char *const refused[] = {
		"", "a", "*", "?a", " /a", "http://example.com/a", "a/b", ".", "..", "%2F", "\\a",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i]);
	char out[8];
	size_t q;
	assert_int_equal(gw_path_canonical(NULL, 0, out, sizeof(out), &q), -EINVAL);
	assert_int_equal(gw_path_canonical(NULL, 5, out, sizeof(out), &q), -EINVAL);
}

static void test_double_encoding(void **state)
{
	/* "%25" then the hex of a dot, a separator or NUL: one decode gives
	 * "%2e", a second '.'; refused however the pair is spelled. */
	static const char *const refused[] = {
		"/%252e",      "/%252E",
		"/%252e%252e", "/a/%252e%252e/b",
		"/%252f",      "/%252F",
		"/%255c",      "/%255C",
		"/%2500",      "/%25%32%65",
		"/%25%32%45",  "/%25%32%66",
		"/%25%35%63",  "/%25%30%30",
		"/%25%32e",    "/%25%32%65%25%32%65",
		"/x%252fy",    "/repos/o/r%252F..%252Fother",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i]);
	/* Other double encodings are plain data. */
	ok("/%2541", "/%2541");
	ok("/%2520", "/%2520");
	ok("/%252", "/%252");
	ok("/%252g", "/%252g");
	/* "%25%25%32%65" is "%25%252e": the second pair still hides a dot. */
	bad("/%25%25%32%65");
	ok("/%25%25", "/%25%25");
}

static void test_overlong_utf8(void **state)
{
	static const char *const refused[] = {
		"/%c0%ae", "/%C0%AE",	 "/%c0%af",    "/%c1%9c",	"/%C1%81",
		"/%c0",	   "/%e0%80%ae", "/%E0%9F%BF", "/%f0%80%80%ae", "/%F0%8F%BF%BF",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i]);
	ok("/%e0%a0%80", "/%E0%A0%80");
	ok("/%f0%90%80%80", "/%F0%90%80%80");
	ok("/%c2%a0", "/%C2%A0");
	ok("/%e0", "/%E0");
	ok("/%e0x", "/%E0x");
}

static void test_lengths(void **state)
{
	_cleanup_free_ char *s = malloc(GW_PATH_MAX + 2);
	_cleanup_free_ char *out = malloc(GW_PATH_MAX + 1);
	assert_non_null(s);
	assert_non_null(out);
	size_t q = 7;

	/* Exactly GW_PATH_MAX is fine... */
	s[0] = '/';
	memset(s + 1, 'a', GW_PATH_MAX);
	s[GW_PATH_MAX + 1] = '\0';
	assert_int_equal(gw_path_canonical(s, GW_PATH_MAX, out, GW_PATH_MAX + 1, &q), 0);
	assert_int_equal(strlen(out), GW_PATH_MAX);
	assert_int_equal(q, GW_PATH_MAX);
	/* ...one more byte is not, and is refused before looking at it. */
	q = 7;
	assert_int_equal(gw_path_canonical(s, GW_PATH_MAX + 1, out, GW_PATH_MAX + 1, &q),
			 -ENAMETOOLONG);
	assert_int_equal(q, 7);
	s[GW_PATH_MAX] = '?';
	assert_int_equal(gw_path_canonical(s, GW_PATH_MAX + 1, out, GW_PATH_MAX + 1, &q),
			 -ENAMETOOLONG);

	/* The output must fit, terminator included; nothing is written
	 * when it does not. */
	char small[4];
	memset(small, 'X', sizeof(small));
	assert_int_equal(gw_path_canonical("/abc", 4, small, 4, &q), -ENAMETOOLONG);
	assert_int_equal(small[0], 'X');
	assert_int_equal(q, 7);
	assert_int_equal(gw_path_canonical("/ab", 3, small, 4, &q), 0);
	assert_string_equal(small, "/ab");
	assert_int_equal(gw_path_canonical("/ab", 3, NULL, 0, &q), -ENAMETOOLONG);
	/* Size is judged on the result: decoding makes room. */
	assert_int_equal(gw_path_canonical("/%41%42", 7, small, 4, &q), 0);
	assert_string_equal(small, "/AB");
	assert_int_equal(q, 7);
	/* A query costs nothing in out. */
	assert_int_equal(gw_path_canonical("/ab?cdefgh", 10, small, 4, &q), 0);
	assert_int_equal(q, 3);
	/* An invalid target is -EINVAL even when it would not fit either. */
	assert_int_equal(gw_path_canonical("/a/../b", 7, small, 2, &q), -EINVAL);
	/* ret_query may be NULL. */
	assert_int_equal(gw_path_canonical("/x", 2, small, 4, NULL), 0);

	/* A long path of escapes kept as they are. */
	for (size_t i = 0; i + 3 <= GW_PATH_MAX; i += 3)
		memcpy(s + 1 + i, "%7c", 3);
	size_t len = 1 + (GW_PATH_MAX / 3) * 3;
	assert_int_equal(gw_path_canonical(s, len, out, GW_PATH_MAX + 1, &q), 0);
	assert_int_equal(strlen(out), len);
	assert_memory_equal(out, "/%7C%7C", 7);
}

static void test_has_prefix(void **state)
{
	/* The contract's examples. */
	assert_true(gw_path_has_prefix("/a/b", "/"));
	assert_true(gw_path_has_prefix("/a/b", "/a"));
	assert_true(gw_path_has_prefix("/a/b", "/a/"));
	assert_true(gw_path_has_prefix("/a/b", "/a/b"));
	assert_false(gw_path_has_prefix("/a/bc", "/a/b"));

	assert_true(gw_path_has_prefix("/", "/"));
	assert_true(gw_path_has_prefix("/a/b/", "/a/b"));
	assert_true(gw_path_has_prefix("/a/b/", "/a/b/"));
	assert_true(gw_path_has_prefix("/a/b/c", "/a/b/"));
	assert_false(gw_path_has_prefix("/a/b", "/a/b/"));
	assert_false(gw_path_has_prefix("/a", "/a/b"));
	assert_false(gw_path_has_prefix("/ab", "/a"));
	assert_false(gw_path_has_prefix("/a-evil", "/a"));
	assert_false(gw_path_has_prefix("/a.git", "/a"));
	assert_false(gw_path_has_prefix("/a%2Fb", "/a"));
	assert_false(gw_path_has_prefix("/b", "/a"));
	/* Case-sensitive, encodings compared as they are. */
	assert_false(gw_path_has_prefix("/A/b", "/a"));
	assert_false(gw_path_has_prefix("/a%3Ab", "/a:b"));
	assert_true(gw_path_has_prefix("/repos/o/r/pulls", "/repos/o/r"));
	assert_false(gw_path_has_prefix("/repos/o/rx", "/repos/o/r"));
	/* Not a prefix at all. */
	assert_false(gw_path_has_prefix("/a", ""));
	assert_false(gw_path_has_prefix("/a", "a"));
	assert_false(gw_path_has_prefix("", "/"));
	assert_false(gw_path_has_prefix(NULL, "/"));
	assert_false(gw_path_has_prefix("/a", NULL));
}

/* A policy prefix and a request decided through canonical forms: the
 * encodings that mean the same thing end up the same. */
static void test_prefix_through_canonical(void **state)
{
	static const struct {
		const char *target;
		bool under; /* below "/repos/o/r" */
	} cases[] = {
		{ "/repos/o/r", true },
		{ "/repos/o/r/", true },
		{ "/repos/o/r/issues?state=open", true },
		{ "/repos/%6f/%72/issues", true },
		{ "/%72epos/o/r%2Dx", false },
		{ "/repos/o/r-evil", false },
		{ "/repos/o/rx", false },
		{ "/repos/o/R", false },
		{ "/repos/o/r.git", false },
		{ "/repos/o", false },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char out[GW_PATH_MAX + 1];
		size_t q;
		assert_int_equal(gw_path_canonical(cases[i].target, strlen(cases[i].target), out,
						   sizeof(out), &q),
				 0);
		assert_int_equal(gw_path_has_prefix(out, "/repos/o/r"), cases[i].under);
	}
}

/* An encoded '/' is allowed only where asked for (a decision that does
 * not depend on the path), kept encoded; every other ambiguity stays
 * refused. */
static void test_encoded_slash_opt_in(void **state)
{
	char out[GW_PATH_MAX + 1];
	size_t q;
	const char *npm = "/@types%2fnode/-/node-20.1.0.tgz?x=1";
	assert_int_equal(gw_path_canonical(npm, strlen(npm), out, sizeof(out), &q), -EINVAL);
	assert_int_equal(gw_path_canonical_opts(npm, strlen(npm), out, sizeof(out), &q,
						GW_PATH_ENCODED_SLASH),
			 0);
	assert_string_equal(out, "/@types%2Fnode/-/node-20.1.0.tgz");
	assert_int_equal(q, strlen("/@types%2fnode/-/node-20.1.0.tgz"));
	/* A fixed point in its mode too. */
	char again[GW_PATH_MAX + 1];
	assert_int_equal(gw_path_canonical_opts(out, strlen(out), again, sizeof(again), &q,
						GW_PATH_ENCODED_SLASH),
			 0);
	assert_string_equal(again, out);
	static const char *const still_refused[] = {
		"/a%252Fb", "/a%5Cb", "/a%5cb", "/a/../b", "/a/%2e%2e/b",
		"/a//b",    "/a;x",   "/a%00b", "/a%2",	   "/a%C0%AFb",
	};
	for (size_t i = 0; i < sizeof(still_refused) / sizeof(still_refused[0]); i++)
		if (gw_path_canonical_opts(still_refused[i], strlen(still_refused[i]), out,
					   sizeof(out), &q, GW_PATH_ENCODED_SLASH) != -EINVAL)
			fail_msg("%s accepted with encoded slashes allowed", still_refused[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain),
		cmocka_unit_test(test_query),
		cmocka_unit_test(test_decode_unreserved),
		cmocka_unit_test(test_keep_reserved),
		cmocka_unit_test(test_dot_segments),
		cmocka_unit_test(test_separators),
		cmocka_unit_test(test_bad_escapes),
		cmocka_unit_test(test_raw_characters),
		cmocka_unit_test(test_not_origin_form),
		cmocka_unit_test(test_double_encoding),
		cmocka_unit_test(test_overlong_utf8),
		cmocka_unit_test(test_lengths),
		cmocka_unit_test(test_has_prefix),
		cmocka_unit_test(test_prefix_through_canonical),
		cmocka_unit_test(test_encoded_slash_opt_in),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

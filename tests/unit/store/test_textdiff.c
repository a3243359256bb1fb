/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/parse.h"
#include "store/textdiff.h"

#define OUT_MAX (64u << 20)

static char tmpdir[64];

static int setup(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_textdiff.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	const char *names[] = { "a", "b", "p", "o", "o.rej", "o.orig" };
	char path[128];
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
		unlink(path);
	}
	rmdir(tmpdir);
	return 0;
}

static void write_file(const char *name, const char *p, size_t n)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "we");
	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* Runs a shell command, returns its standard output and exit status. */
static char *run(const char *cmd, size_t *ret_len, int *ret_status)
{
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	struct buf b = BUF_INIT(OUT_MAX);
	char chunk[65536];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		assert_int_equal(buf_append(&b, chunk, n), 0);
	int st = pclose(f);
	*ret_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	char *s = NULL;
	assert_int_equal(buf_steal(&b, &s, ret_len), 0);
	return s;
}

/* GNU diff -u of the two files, with "a/f" and "b/f" as the header names
 * (--label replaces the timestamps that the headers otherwise carry). */
static char *gnu_diff(const char *extra, size_t *ret_len)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "/usr/bin/diff -u %s --label a/f --label b/f %s/a %s/b", extra,
		 tmpdir, tmpdir);
	int st;
	char *s = run(cmd, ret_len, &st);
	assert_true(st == 0 || st == 1);
	return s;
}

static int ours(const char *a, size_t alen, const char *b, size_t blen, struct buf *out)
{
	buf_init(out, OUT_MAX);
	return st_textdiff(a, alen, b, blen, "f", out);
}

/* Counts the '-' and '+' lines of a unified diff, after its two header lines. */
static void count_changes(const char *d, size_t n, size_t *minus, size_t *plus)
{
	*minus = *plus = 0;
	for (size_t i = 0, line = 0; i < n; line++) {
		const char *nl = memchr(d + i, '\n', n - i);
		size_t l = nl ? (size_t)(nl - (d + i)) + 1 : n - i;
		if (line >= 2 && d[i] == '-')
			(*minus)++;
		else if (line >= 2 && d[i] == '+')
			(*plus)++;
		i += l;
	}
}

/* Checks each hunk header's counts against the lines that follow it. */
static void check_hunk_counts(const char *d, size_t n)
{
	const char *p = d, *end = d + n;
	/* skip the two header lines */
	for (int k = 0; k < 2; k++) {
		p = memchr(p, '\n', (size_t)(end - p));
		assert_non_null(p);
		p++;
	}
	while (p < end) {
		assert_true(p[0] == '@');
		/* "@@ -a[,al] +b[,bl] @@" */
		const char *e;
		uint64_t start, al = 1, bl = 1;
		assert_int_equal(parse_u64_prefix(p + 4, &start, &e), 0);
		if (*e == ',')
			assert_int_equal(parse_u64_prefix(e + 1, &al, &e), 0);
		assert_true(e[0] == ' ' && e[1] == '+');
		assert_int_equal(parse_u64_prefix(e + 2, &start, &e), 0);
		if (*e == ',')
			assert_int_equal(parse_u64_prefix(e + 1, &bl, &e), 0);
		p = (const char *)memchr(p, '\n', (size_t)(end - p)) + 1;
		while (p < end && (al || bl || p[0] == '\\')) {
			if (p[0] == ' ') {
				assert_true(al && bl);
				al--;
				bl--;
			} else if (p[0] == '-') {
				assert_true(al);
				al--;
			} else if (p[0] == '+') {
				assert_true(bl);
				bl--;
			} else
				assert_true(p[0] == '\\');
			p = memchr(p, '\n', (size_t)(end - p));
			assert_non_null(p);
			p++;
		}
		assert_int_equal(al, 0);
		assert_int_equal(bl, 0);
	}
}

/* Our diff must apply with patch(1) and give b. */
static void check_applies(const char *diff, size_t dlen, const char *b, size_t blen)
{
	write_file("p", diff, dlen);
	char cmd[512];
	snprintf(cmd, sizeof(cmd),
		 "/usr/bin/patch -s -f -o %s/o %s/a < %s/p >/dev/null 2>&1 && cat %s/o", tmpdir,
		 tmpdir, tmpdir, tmpdir);
	int st;
	size_t olen;
	char *o = run(cmd, &olen, &st);
	assert_int_equal(st, 0);
	assert_int_equal(olen, blen);
	assert_memory_equal(o, b, blen);
	free(o);
}

/*
 * Diffs a and b both ways. strict: our output must be GNU's byte for byte.
 * Otherwise (GNU may pick another script of the same length) it must apply
 * with patch, have consistent hunk headers and change as many lines as
 * `diff --minimal`.
 */
static void compare_n(const char *a, size_t alen, const char *b, size_t blen, bool strict)
{
	write_file("a", a, alen);
	write_file("b", b, blen);
	struct buf out;
	int r = ours(a, alen, b, blen, &out);
	assert_int_equal(r, 0);
	size_t glen;
	char *g = gnu_diff("", &glen);
	bool same = glen == out.len && (glen == 0 || memcmp(g, out.data, glen) == 0);
	if (strict && !same)
		fail_msg("differs from diff -u:\n--- ours ---\n%.*s--- gnu ---\n%s", (int)out.len,
			 out.data ? out.data : "", g);
	if (!same) {
		size_t gm, gp, om, op;
		free(g);
		g = gnu_diff("--minimal", &glen);
		count_changes(g, glen, &gm, &gp);
		count_changes(out.data, out.len, &om, &op);
		assert_int_equal(om, gm);
		assert_int_equal(op, gp);
	}
	if (out.len) {
		check_hunk_counts(out.data, out.len);
		check_applies(out.data, out.len, b, blen);
	} else
		assert_true(alen == blen && !memcmp(a, b, alen));
	free(g);
	buf_free(&out);
}

static void compare(const char *a, const char *b)
{
	compare_n(a, strlen(a), b, strlen(b), true);
	compare_n(b, strlen(b), a, strlen(a), true);
}

static void test_is_text(void **state)
{
	assert_true(st_is_text("", 0));
	assert_true(st_is_text("hello\n", 6));
	assert_true(st_is_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n", 14));
	assert_false(st_is_text("a\0b", 3));
	assert_false(st_is_text("\xff", 1));
	assert_false(st_is_text("\xc3", 1));		 /* truncated */
	assert_false(st_is_text("\xc0\xaf", 2));	 /* overlong */
	assert_false(st_is_text("\xe0\x80\xaf", 3));	 /* overlong */
	assert_false(st_is_text("\xed\xa0\x80", 3));	 /* surrogate */
	assert_false(st_is_text("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	assert_false(st_is_text("\x80", 1));
	/* Only the first 8 KiB count; a sequence cut there is fine. */
	char big[9000];
	memset(big, 'x', sizeof(big));
	big[8191] = '\xc3';
	big[8192] = '\xa9';
	assert_true(st_is_text(big, sizeof(big)));
	big[8191] = 'x';
	big[8500] = '\0';
	assert_true(st_is_text(big, sizeof(big)));
	big[100] = '\0';
	assert_false(st_is_text(big, sizeof(big)));
}

static void test_equal_and_refusals(void **state)
{
	struct buf out;
	assert_int_equal(ours("a\nb\n", 4, "a\nb\n", 4, &out), 0);
	assert_int_equal(out.len, 0);
	assert_int_equal(ours("", 0, "", 0, &out), 0);
	assert_int_equal(out.len, 0);
	/* Equal binary content is no difference either. */
	assert_int_equal(ours("\0", 1, "\0", 1, &out), 0);
	assert_int_equal(out.len, 0);

	assert_int_equal(ours("a\0", 2, "a\n", 2, &out), 1);
	assert_string_equal(out.data, "Binary files a/f and b/f differ\n");
	buf_free(&out);
	assert_int_equal(ours("a\n", 2, "\xfe\n", 2, &out), 1);
	assert_string_equal(out.data, "Binary files a/f and b/f differ\n");
	buf_free(&out);

	size_t big = 17u << 20;
	char *p = malloc(big);
	assert_non_null(p);
	memset(p, 'x', big);
	assert_int_equal(ours(p, big, "x\n", 2, &out), 1);
	assert_string_equal(out.data, "Files a/f and b/f are too large to diff\n");
	buf_free(&out);
	/* Exactly the limit is diffed. */
	for (size_t i = 63; i < ST_DIFF_MAX_INPUT; i += 64)
		p[i] = '\n';
	char *q = malloc(ST_DIFF_MAX_INPUT);
	assert_non_null(q);
	memcpy(q, p, ST_DIFF_MAX_INPUT);
	q[ST_DIFF_MAX_INPUT / 2] = 'y';
	assert_int_equal(ours(p, ST_DIFF_MAX_INPUT, q, ST_DIFF_MAX_INPUT, &out), 0);
	assert_non_null(strstr(out.data, "\n@@ -131070,7 +131070,7 @@\n"));
	buf_free(&out);
	free(q);
	free(p);

	/* out's own limit: -ENOBUFS, and out is left as it was. */
	struct buf small = BUF_INIT(10);
	assert_int_equal(buf_append_str(&small, "keep"), 0);
	assert_int_equal(st_textdiff("a\n", 2, "b\n", 2, "f", &small), -ENOBUFS);
	assert_string_equal(small.data, "keep");
	buf_free(&small);
}

static char *lines(size_t n, unsigned seed, size_t *ret_len)
{
	struct buf b = BUF_INIT(OUT_MAX);
	for (size_t i = 0; i < n; i++)
		assert_true(buf_appendf(&b, "line %u-%zu\n", seed, i) >= 0);
	char *s = NULL;
	assert_int_equal(buf_steal(&b, &s, ret_len), 0);
	return s;
}

static void test_too_different_is_fast(void **state)
{
	size_t alen, blen;
	char *a = lines(100000, 1, &alen), *b = lines(100000, 2, &blen);
	struct buf out;
	clock_t t0 = clock();
	assert_int_equal(ours(a, alen, b, blen, &out), 1);
	assert_string_equal(out.data, "Files a/f and b/f are too different to diff\n");
	double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
	if (secs >= 1.0)
		fail_msg("unrelated files took %.2f s", secs);
	buf_free(&out);
	/*
	 * Same lines, different order: the cheap lower bound does not see it and
	 * the search runs up to its limit, O(ST_DIFF_MAX_EDITS^2) steps (about
	 * 0.7 s optimized; sanitizers are slower).
	 */
	t0 = clock();
	for (size_t i = 0, j = 0; i < 100000; i++) {
		int n = snprintf(b + j, blen - j + 1, "line 1-%zu\n", (i * 7919) % 100000);
		j += (size_t)n;
	}
	assert_int_equal(ours(a, alen, b, alen, &out), 1);
	assert_string_equal(out.data, "Files a/f and b/f are too different to diff\n");
	secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
	if (secs >= 10.0)
		fail_msg("shuffled files took %.2f s", secs);
	buf_free(&out);
	free(a);
	free(b);
}

static void test_basic_edits(void **state)
{
	compare("a\nb\nc\n", "a\nb\nc\nd\n");	       /* append */
	compare("a\nb\nc\n", "x\na\nb\nc\n");	       /* prepend */
	compare("a\nb\nc\nd\ne\n", "a\nb\nX\nd\ne\n"); /* change middle */
	compare("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "X\n2\n3\n4\n5\n6\n7\n8\n9\n");
	compare("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\n5\n6\n7\n8\nX\n");
	compare("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\n6\n7\n8\n9\n");
	compare("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nX\nY\n5\n6\n7\n8\n9\n");
	compare("", "a\n");
	compare("", "a\nb\n");
	compare("", "a");
	compare("a\n", "b\n");
	compare("a\nb\nc\n", "d\ne\n");
}

static void test_no_newline_at_end(void **state)
{
	compare("a\nb", "a\nb\n");
	compare("a\nb", "a\nc");
	compare("a\nb", "a\nb\nc");
	compare("x\ny\nz", "w\ny\nz");
	compare("1\n2\n3\n4\n5\n6\n7\n8\nend", "1\nX\n3\n4\n5\n6\n7\n8\nend");
	compare("1\n2\n3\n4\n5\n6\n7\nend", "1\nX\n3\n4\n5\n6\n7\nend");
	compare("a", "b");
	compare("\n", "");
	compare("\n\n", "\n");
}

static void test_crlf(void **state)
{
	compare("a\r\nb\r\nc\r\n", "a\r\nB\r\nc\r\n");
	compare("a\r\nb\r\nc\r\n", "a\nb\nc\n");
	compare("a\r\nb\r\nc", "a\r\nb\r\nc\r\n");
	compare("a\rb\rc\n", "a\rb\rd\n");
}

static void test_repeated_lines(void **state)
{
	compare("a\na\na\n", "a\na\n");
	compare("a\na\na\n", "a\na\na\na\na\n");
	compare("a\nb\na\nb\n", "a\nb\na\nb\na\nb\n");
	compare("x\na\nb\na\nb\ny\n", "x\na\nb\ny\n");
	compare("}\n}\n}\n", "}\nx\n}\n}\n");
	compare("a\nb\nc\na\nb\nc\n", "a\nb\nc\n");
	compare("{\n  a;\n}\n\n{\n  b;\n}\n", "{\n  a;\n}\n\n{\n  c;\n}\n\n{\n  b;\n}\n");
	compare("\n\n\n\nx\n\n\n", "\n\nx\n\n\n\n\n");
}

static void seq(char *out, size_t cap, int n, int x1, int x2)
{
	size_t j = 0;
	for (int i = 1; i <= n; i++) {
		int m = i == x1 || i == x2 ? snprintf(out + j, cap - j, "X%d\n", i) :
					     snprintf(out + j, cap - j, "%d\n", i);
		assert_true(m > 0 && (size_t)m < cap - j);
		j += (size_t)m;
	}
}

static void test_hunk_merging(void **state)
{
	char a[512], b[512];
	seq(a, sizeof(a), 30, 0, 0);
	/* Gaps of 5, 6 (merged: contexts touch) and 7, 8 (two hunks) unchanged lines. */
	for (int gap = 0; gap <= 9; gap++) {
		seq(b, sizeof(b), 30, 10, 11 + gap);
		compare(a, b);
	}
	/* Near both ends, where the context is cut short. */
	for (int x = 1; x <= 30; x++) {
		seq(b, sizeof(b), 30, x, 0);
		compare(a, b);
		seq(b, sizeof(b), 30, 1, x);
		compare(a, b);
		seq(b, sizeof(b), 30, x, 30);
		compare(a, b);
	}
	/* Deletions and insertions near each other. */
	seq(a, sizeof(a), 20, 0, 0);
	compare(a, "1\n2\n3\n4\n5\n6\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n");
	compare(a, "1\n2\n3\n4\n5\n6\n8\n9\n10\n11\n12\n13\n15\n16\n17\n18\n19\n20\n");
	compare(a, "1\n2\n3\n4\n5\n6\n8\n9\n10\n11\n12\n13\n14\n16\n17\n18\n19\n20\n");
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A file of n lines drawn from a small alphabet of lines (so many repeat). */
static char *random_text(uint64_t *rng, size_t n, unsigned alphabet, bool last_nl, size_t *ret)
{
	struct buf b = BUF_INIT(OUT_MAX);
	for (size_t i = 0; i < n; i++)
		assert_true(buf_appendf(&b, "%c%s", 'a' + (int)(rng_next(rng) % alphabet),
					i + 1 < n || last_nl ? "\n" : "") >= 0);
	char *s = NULL;
	assert_int_equal(buf_steal(&b, &s, ret), 0);
	return s;
}

/* Small random pairs with many repeated lines: minimal and correct. */
static void test_small_random(void **state)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	for (int round = 0; round < 300; round++) {
		size_t alen, blen;
		char *a = random_text(&rng, rng_next(&rng) % 12, 2 + (unsigned)(round % 4),
				      rng_next(&rng) % 4, &alen);
		char *b = random_text(&rng, rng_next(&rng) % 12, 2 + (unsigned)(round % 4),
				      rng_next(&rng) % 4, &blen);
		compare_n(a, alen, b, blen, getenv("TEXTDIFF_STRICT") != NULL);
		free(a);
		free(b);
	}
}

/* 10k lines, 50 random edits. */
static void test_large_random(void **state)
{
	uint64_t rng = 12345;
	for (int round = 0; round < 4; round++) {
		size_t alen;
		char *a = lines(10000, 7, &alen);
		struct buf b = BUF_INIT(OUT_MAX);
		size_t cut = 0;
		unsigned edits[50];
		for (int k = 0; k < 50; k++)
			edits[k] = (unsigned)(rng_next(&rng) % 10000);
		for (size_t i = 0; i < 10000; i++) {
			const char *l = a + cut;
			size_t ll = strcspn(l, "\n") + 1; /* a is NUL-terminated */
			cut += ll;
			int what = -1;
			for (int k = 0; k < 50; k++)
				if (edits[k] == i)
					what = k % 3;
			if (what == 0)
				continue; /* delete */
			if (what == 1)
				assert_true(buf_appendf(&b, "changed %zu\n", i) >= 0);
			else
				assert_int_equal(buf_append(&b, l, ll), 0);
			if (what == 2 || (round == 3 && i % 1000 == 0))
				assert_true(buf_appendf(&b, "inserted %zu\n", i) >= 0);
		}
		compare_n(a, alen, b.data, b.len, round < 2);
		compare_n(b.data, b.len, a, alen, round < 2);
		buf_free(&b);
		free(a);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_is_text),
		cmocka_unit_test(test_equal_and_refusals),
		cmocka_unit_test(test_too_different_is_fast),
		cmocka_unit_test(test_basic_edits),
		cmocka_unit_test(test_no_newline_at_end),
		cmocka_unit_test(test_crlf),
		cmocka_unit_test(test_repeated_lines),
		cmocka_unit_test(test_hunk_merging),
		cmocka_unit_test(test_small_random),
		cmocka_unit_test(test_large_random),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

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
#include <unistd.h>

#include "gateway/vault.h"

static struct gw_vault *parse_ok(const char *yaml)
{
	struct gw_vault *v = NULL;
	struct al_error err = { 0 };
	if (gw_vault_parse("vault.yaml", yaml, strlen(yaml), &v, &err) < 0)
		fail_msg("parse failed: %s", al_error_message(&err));
	return v;
}

static void parse_fails(const char *yaml, const char *line, const char *key)
{
	struct gw_vault *v = NULL;
	struct al_error err = { 0 };
	assert_int_equal(gw_vault_parse("vault.yaml", yaml, strlen(yaml), &v, &err), -EINVAL);
	assert_null(v);
	if (!strstr(err.msg, line) || !strstr(err.msg, key))
		fail_msg("error '%s' does not mention '%s' and '%s'", err.msg, line, key);
}

static void test_parse_good(void **state)
{
	struct gw_vault *v = parse_ok("# creds\n"
				      "secrets:\n"
				      "  anthropic: sk-ant-0123456789\n"
				      "  github.token_2-x: 'ghp_abc def\xc3\xa9'\n");
	assert_int_equal(gw_vault_count(v), 2);
	size_t len = 0;
	const char *s = gw_vault_get(v, "anthropic", &len);
	assert_non_null(s);
	assert_string_equal(s, "sk-ant-0123456789");
	assert_int_equal(len, 17);
	s = gw_vault_get(v, "github.token_2-x", &len);
	assert_string_equal(s, "ghp_abc def\xc3\xa9");
	assert_int_equal(len, 13);
	len = 99;
	assert_null(gw_vault_get(v, "missing", &len));
	assert_int_equal(len, 99); /* untouched on failure */
	assert_null(gw_vault_get(v, "Anthropic", &len));
	assert_null(gw_vault_get(NULL, "anthropic", &len));
	assert_int_equal(gw_vault_count(NULL), 0);
	gw_vault_free(v);
	gw_vault_free(NULL);

	v = parse_ok("secrets: {}\n");
	assert_int_equal(gw_vault_count(v), 0);
	gw_vault_free(v);
}

static void test_refusals_name_file_line_key(void **state)
{
	parse_fails("secrets:\n  ok: abcdefgh1\n  'bad name': abcdefgh2\n", "vault.yaml:3",
		    "bad name");
	parse_fails("secrets:\n  '': abcdefgh2\n", "vault.yaml:2", "secrets");
	char longname[200];
	int n = snprintf(longname, sizeof(longname), "secrets:\n  %065d: abcdefgh\n", 0);
	assert_true(n > 0 && (size_t)n < sizeof(longname));
	parse_fails(longname, "vault.yaml:2", "secrets.0000");
	/* Duplicate names: refused by the config layer or by the vault. */
	{
		struct gw_vault *v = NULL;
		struct al_error err = { 0 };
		const char *y = "secrets:\n  a: abcdefgh1\n  a: abcdefgh2\n";
		assert_true(gw_vault_parse("vault.yaml", y, strlen(y), &v, &err) < 0);
		assert_null(v);
		assert_non_null(strstr(err.msg, "vault.yaml:3"));
	}
	parse_fails("secrets:\n  a: [x, y]\n", "vault.yaml:2", "secrets.a");
	parse_fails("secrets:\n  a: {x: abcdefgh}\n", "vault.yaml:2", "secrets.a");
	parse_fails("secrets:\n  a:\n", "vault.yaml:2", "secrets.a");
	parse_fails("secrets:\n  short: abcdefg\n", "vault.yaml:2", "secrets.short");
	parse_fails("secrets:\n  tab: \"abcd\\tefgh\"\n", "vault.yaml:2", "secrets.tab");
	parse_fails("secrets:\n  crlf: \"abcdefgh\\r\\nX-Evil: 1\"\n", "vault.yaml:2",
		    "secrets.crlf");
	parse_fails("secrets:\n  del: \"abcdefgh\\x7f\"\n", "vault.yaml:2", "secrets.del");
	parse_fails("secrets:\n  m: 'x[redacted]y'\n", "vault.yaml:2", "secrets.m");
	parse_fails("secrets:\n  m: redacted\n", "vault.yaml:2", "secrets.m");
	parse_fails("secrets:\n  m: 'ed]abcdefgh'\n", "vault.yaml:2", "secrets.m");
	parse_fails("secrets:\n  m: 'abcdefgh[r'\n", "vault.yaml:2", "secrets.m");
	parse_fails("secrets:\n  ok: abcdefgh\ncredentials: {}\n", "vault.yaml:3", "credentials");
	parse_fails("secrets: [abcdefgh]\n", "vault.yaml:1", "secrets");
	parse_fails("- abcdefgh\n", "vault.yaml:1", "top level");
	parse_fails("", "vault.yaml", "secrets");

	/* Too long: GW_SECRET_MAX + 1. */
	size_t big = 32 + GW_SECRET_MAX + 1;
	char *y = malloc(big + 1);
	assert_non_null(y);
	memcpy(y, "secrets:\n  big: ", 16);
	memset(y + 16, 'a', GW_SECRET_MAX + 1);
	y[16 + GW_SECRET_MAX + 1] = '\n';
	y[16 + GW_SECRET_MAX + 2] = '\0';
	parse_fails(y, "vault.yaml:2", "secrets.big");
	/* Exactly GW_SECRET_MAX is fine. */
	y[16 + GW_SECRET_MAX] = '\n';
	y[16 + GW_SECRET_MAX + 1] = '\0';
	struct gw_vault *v = parse_ok(y);
	size_t len;
	assert_non_null(gw_vault_get(v, "big", &len));
	assert_int_equal(len, GW_SECRET_MAX);
	gw_vault_free(v);
	free(y);

	/* Too many: GW_VAULT_MAX_SECRETS + 1 entries. */
	size_t cap = 64 + (GW_VAULT_MAX_SECRETS + 1) * 32;
	char *many = malloc(cap);
	assert_non_null(many);
	size_t off = (size_t)snprintf(many, cap, "secrets:\n");
	for (int i = 0; i <= GW_VAULT_MAX_SECRETS; i++)
		off += (size_t)snprintf(many + off, cap - off, "  s%d: value-%08d\n", i, i);
	parse_fails(many, "vault.yaml:2", "at most 256 secrets");
	free(many);
}

/* ---- files ---- */

static char tmpdir[64];

static int make_tmpdir(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_vault.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
	static const char *const names[] = { "v600", "v400", "v640", "v604", "v660",
					     "v700", "link", "dir",  "fifo", "big" };
	char p[128];
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", tmpdir, names[i]);
		if (strcmp(names[i], "dir") == 0)
			rmdir(p);
		else
			unlink(p);
	}
	return rmdir(tmpdir);
}

static const char good_vault[] = "secrets:\n  anthropic: sk-ant-0123456789\n";

static void write_file(const char *name, mode_t mode, const char *text, size_t len, char *path,
		       size_t size)
{
	snprintf(path, size, "%s/%s", tmpdir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	/* fchmod: the umask does not get a say. */
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static int load(const char *path, struct gw_vault **v, struct al_error *err)
{
	*v = NULL;
	al_error_clear(err);
	return gw_vault_load(path, v, err);
}

static void test_load_permissions(void **state)
{
	char path[128];
	struct gw_vault *v;
	struct al_error err = { 0 };

	write_file("v600", 0600, good_vault, strlen(good_vault), path, sizeof(path));
	assert_int_equal(load(path, &v, &err), 0);
	assert_int_equal(gw_vault_count(v), 1);
	gw_vault_free(v);
	write_file("v400", 0400, good_vault, strlen(good_vault), path, sizeof(path));
	assert_int_equal(load(path, &v, &err), 0);
	gw_vault_free(v);

	static const struct {
		const char *name;
		mode_t mode;
	} bad[] = { { "v640", 0640 }, { "v604", 0604 }, { "v660", 0660 }, { "v700", 0602 } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(bad[i].name, bad[i].mode, good_vault, strlen(good_vault), path,
			   sizeof(path));
		assert_int_equal(load(path, &v, &err), -EPERM);
		assert_null(v);
		if (!strstr(err.msg, path) || !strstr(err.msg, "chmod 600"))
			fail_msg("error '%s' does not name the file and the fix", err.msg);
	}

	/* A symlink to a good file is refused. */
	char target[128], link[128];
	snprintf(target, sizeof(target), "%s/v600", tmpdir);
	snprintf(link, sizeof(link), "%s/link", tmpdir);
	assert_int_equal(symlink(target, link), 0);
	assert_int_equal(load(link, &v, &err), -EPERM);
	assert_null(v);
	assert_non_null(strstr(err.msg, "symlink"));

	/* Not regular files: a directory, a FIFO (without hanging). */
	snprintf(path, sizeof(path), "%s/dir", tmpdir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(load(path, &v, &err), -EPERM);
	assert_null(v);
	snprintf(path, sizeof(path), "%s/fifo", tmpdir);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(load(path, &v, &err), -EPERM);
	assert_null(v);
	assert_non_null(strstr(err.msg, "regular"));

	/* Missing file. */
	snprintf(path, sizeof(path), "%s/absent", tmpdir);
	assert_int_equal(load(path, &v, &err), -ENOENT);
	assert_null(v);

	/* Over 1 MiB. */
	size_t big = 1024 * 1024 + 1;
	char *text = malloc(big);
	assert_non_null(text);
	memset(text, '#', big);
	write_file("big", 0600, text, big, path, sizeof(path));
	free(text);
	assert_int_equal(load(path, &v, &err), -EFBIG);
	assert_null(v);

	/* Content errors name the file path and line. */
	unlink(target);
	static const char bad_vault[] = "secrets:\n  a: short\n";
	write_file("v600", 0600, bad_vault, strlen(bad_vault), path, sizeof(path));
	assert_int_equal(load(path, &v, &err), -EINVAL);
	char want[160];
	snprintf(want, sizeof(want), "%s:2: secrets.a", path);
	if (!strstr(err.msg, want))
		fail_msg("error '%s' does not mention '%s'", err.msg, want);
}

/* ---- redaction ---- */

struct sink {
	char data[8192];
	size_t len;
	int calls;
	int fail_after; /* fail on this call (1-based); 0: never */
};

static int sink_emit(const char *p, size_t n, void *ud)
{
	struct sink *s = ud;
	s->calls++;
	if (s->fail_after && s->calls >= s->fail_after)
		return -EPIPE;
	assert_true(n > 0);
	assert_true(s->len + n <= sizeof(s->data));
	memcpy(s->data + s->len, p, n);
	s->len += n;
	return 0;
}

struct bigsink {
	char *data;
	size_t len;
};

static int bigsink_emit(const char *p, size_t n, void *ud)
{
	struct bigsink *s = ud;
	assert_true(s->len + n <= 30000);
	memcpy(s->data + s->len, p, n);
	s->len += n;
	return 0;
}

static const char test_vault[] = "secrets:\n"
				 "  a: abcdefghXYZ\n"
				 "  b: XYZ12345\n"
				 "  c: sk-0123456789\n"
				 "  d: sk-0123456789-long\n"
				 "  e: zzzzzzzz\n";

/* Feeds input cut at the given points (sorted, in 0..len) and checks the
 * concatenated output. */
static void redact_cuts(const struct gw_vault *v, const char *in, size_t len, const size_t *cuts,
			size_t n_cuts, const char *want)
{
	struct gw_redactor *r = NULL;
	assert_int_equal(gw_redactor_new(v, &r), 0);
	struct sink s = { 0 };
	size_t prev = 0;
	for (size_t i = 0; i <= n_cuts; i++) {
		size_t end = i < n_cuts ? cuts[i] : len;
		assert_int_equal(gw_redact(r, in + prev, end - prev, sink_emit, &s), 0);
		prev = end;
	}
	assert_int_equal(gw_redact_finish(r, sink_emit, &s), 0);
	gw_redactor_free(r);
	if (s.len != strlen(want) || memcmp(s.data, want, s.len) != 0)
		fail_msg("input '%s': got '%.*s', want '%s'", in, (int)s.len, s.data, want);
}

static void redact_all_ways(const struct gw_vault *v, const char *in, const char *want)
{
	size_t len = strlen(in);
	redact_cuts(v, in, len, NULL, 0, want);
	/* Every single split point. */
	for (size_t i = 0; i <= len; i++) {
		size_t cut = i;
		redact_cuts(v, in, len, &cut, 1, want);
	}
	/* Every pair of split points. */
	for (size_t i = 0; i <= len; i++)
		for (size_t j = i; j <= len; j++) {
			size_t cuts[2] = { i, j };
			redact_cuts(v, in, len, cuts, 2, want);
		}
	/* One byte at a time. */
	size_t *ones = calloc(len + 1, sizeof(*ones));
	assert_non_null(ones);
	for (size_t i = 0; i < len; i++)
		ones[i] = i;
	redact_cuts(v, in, len, ones, len, want);
	free(ones);
}

static void test_redact(void **state)
{
	struct gw_vault *v = parse_ok(test_vault);
	/* Inside, at the very start and end, repeated. */
	redact_all_ways(v, "key=zzzzzzzz;", "key=[redacted];");
	redact_all_ways(v, "zzzzzzzz", "[redacted]");
	redact_all_ways(v, "zzzzzzzzzzzzzzzz", "[redacted][redacted]");
	redact_all_ways(v, "zzzzzzzzz", "[redacted]z"); /* leftmost, then after it */
	redact_all_ways(v, "xzzzzzzzzzzzzzzzzy", "x[redacted][redacted]y");
	redact_all_ways(v, "zzzzzzzz and zzzzzzzz", "[redacted] and [redacted]");
	/* Overlapping secrets: the leftmost wins, the rest of the other passes. */
	redact_all_ways(v, "abcdefghXYZ12345", "[redacted]12345");
	redact_all_ways(v, "abcdefgXYZ12345", "abcdefg[redacted]");
	redact_all_ways(v, "..abcdefghXYZ..XYZ12345", "..[redacted]..[redacted]");
	/* A secret that is a prefix of another: the longest at a position. */
	redact_all_ways(v, "sk-0123456789-long", "[redacted]");
	redact_all_ways(v, "sk-0123456789-lon", "[redacted]-lon");
	redact_all_ways(v, "sk-0123456789-longer", "[redacted]er");
	redact_all_ways(v, "sk-0123456789", "[redacted]");
	/* Near misses pass through unchanged and in order. */
	redact_all_ways(v, "sk-012345678", "sk-012345678");
	redact_all_ways(v, "sk-01234567 sk-0123456789", "sk-01234567 [redacted]");
	redact_all_ways(v, "abcdefghXY", "abcdefghXY");
	redact_all_ways(v, "abcdefghXYabcdefghXYZ", "abcdefghXY[redacted]");
	redact_all_ways(v, "zzzzzzzXYZ1234zzzzzzz", "zzzzzzzXYZ1234zzzzzzz");
	redact_all_ways(v, "", "");
	/* What response field names are checked with. */
	assert_true(gw_vault_contains(v, "X-zzzzzzzz", 10));
	assert_true(gw_vault_contains(v, "zzzzzzzz", 8));
	assert_false(gw_vault_contains(v, "zzzzzzzz", 7));
	assert_false(gw_vault_contains(v, "X-zzzzzzz-", 10));
	assert_false(gw_vault_contains(v, "", 0));
	assert_false(gw_vault_contains(NULL, "zzzzzzzz", 8));
	gw_vault_free(v);
}

static void test_redact_binary_and_long(void **state)
{
	/* A redactor over an empty vault passes everything through at once. */
	struct gw_vault *v = parse_ok("secrets: {}\n");
	struct gw_redactor *r = NULL;
	assert_int_equal(gw_redactor_new(v, &r), 0);
	struct sink s = { 0 };
	assert_int_equal(gw_redact(r, "a\0b", 3, sink_emit, &s), 0);
	assert_int_equal(s.len, 3);
	assert_memory_equal(s.data, "a\0b", 3);
	gw_redactor_free(r);
	gw_vault_free(v);

	/* Held-back bytes: at most the longest secret - 1, and finish flushes them. */
	v = parse_ok(test_vault);
	assert_int_equal(gw_redactor_new(v, &r), 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(gw_redact(r, "hello sk-0123456789-lo", 22, sink_emit, &s), 0);
	assert_int_equal(s.len, 6); /* "hello " is out; the rest could still match */
	assert_memory_equal(s.data, "hello ", 6);
	assert_int_equal(gw_redact_finish(r, sink_emit, &s), 0);
	assert_int_equal(s.len, 6 + 10 + 3);
	assert_memory_equal(s.data, "hello [redacted]-lo", 19);
	/* No possible match: nothing is held back. */
	memset(&s, 0, sizeof(s));
	assert_int_equal(gw_redact(r, "plain text", 10, sink_emit, &s), 0);
	assert_int_equal(s.len, 10);
	gw_redactor_free(r);

	/* Much more input than the internal block, with secrets across it. */
	size_t len = 20000;
	char *in = malloc(len);
	assert_non_null(in);
	memset(in, '.', len);
	for (size_t at = 3; at + 8 < len; at += 997)
		memcpy(in + at, "zzzzzzzz", 8);
	size_t count = 0;
	for (size_t at = 3; at + 8 < len; at += 997)
		count++;
	struct bigsink out = { .data = malloc(30000), .len = 0 };
	assert_non_null(out.data);
	assert_int_equal(gw_redactor_new(v, &r), 0);
	assert_int_equal(gw_redact(r, in, len, bigsink_emit, &out), 0);
	assert_int_equal(gw_redact_finish(r, bigsink_emit, &out), 0);
	assert_int_equal(out.len, len + count * 2);
	size_t j = 0;
	for (size_t i = 0; i < len; j++) {
		if (i >= 3 && (i - 3) % 997 == 0 && i + 8 < len) {
			assert_memory_equal(out.data + j, GW_REDACTED, 10);
			j += 9;
			i += 8;
		} else {
			assert_int_equal(out.data[j], in[i]);
			i++;
		}
	}
	assert_int_equal(j, out.len);
	gw_redactor_free(r);
	free(out.data);
	free(in);
	gw_vault_free(v);
}

static void test_emit_error_propagates(void **state)
{
	struct gw_vault *v = parse_ok(test_vault);
	struct gw_redactor *r = NULL;
	assert_int_equal(gw_redactor_new(v, &r), 0);
	struct sink s = { .fail_after = 2 };
	/* Call 1: "x", call 2: the marker, which fails. */
	assert_int_equal(gw_redact(r, "xzzzzzzzzy", 10, sink_emit, &s), -EPIPE);
	/* The error sticks: nothing more goes out. */
	int calls = s.calls;
	assert_int_equal(gw_redact(r, "more", 4, sink_emit, &s), -EPIPE);
	assert_int_equal(gw_redact_finish(r, sink_emit, &s), -EPIPE);
	assert_int_equal(s.calls, calls);
	gw_redactor_free(r);

	assert_int_equal(gw_redactor_new(v, &r), 0);
	memset(&s, 0, sizeof(s));
	s.fail_after = 1;
	assert_int_equal(gw_redact(r, "ab sk-01", 8, sink_emit, &s), -EPIPE);
	gw_redactor_free(r);
	/* In finish too. */
	assert_int_equal(gw_redactor_new(v, &r), 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(gw_redact(r, "sk-01", 5, sink_emit, &s), 0);
	assert_int_equal(s.calls, 0);
	s.fail_after = 1;
	assert_int_equal(gw_redact_finish(r, sink_emit, &s), -EPIPE);
	gw_redactor_free(r);
	gw_redactor_free(NULL);
	gw_vault_free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_good),
		cmocka_unit_test(test_refusals_name_file_line_key),
		cmocka_unit_test_setup_teardown(test_load_permissions, make_tmpdir, remove_tmpdir),
		cmocka_unit_test(test_redact),
		cmocka_unit_test(test_redact_binary_and_long),
		cmocka_unit_test(test_emit_error_propagates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

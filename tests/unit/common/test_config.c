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
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/config.h"
#include "helpers.h"

static struct config_doc *load_ok(const char *text)
{
	struct config_doc *doc = NULL;
	struct al_error err = { 0 };
	int r = config_load_string("policy.yaml", text, strlen(text), &doc, &err);
	if (r < 0)
		fail_msg("load failed (%d): %s", r, al_error_message(&err));
	return doc;
}

/* Loads text expecting failure r, and a message containing want. */
static void load_fails(const char *text, size_t len, int r, const char *want)
{
	struct config_doc *doc = (struct config_doc *)0x1;
	struct al_error err = { 0 };
	int got = config_load_string("bad.yaml", text, len, &doc, &err);
	if (got != r)
		fail_msg("returned %d, expected %d (%s)", got, r, al_error_message(&err));
	assert_true(doc == (struct config_doc *)0x1); /* untouched */
	assert_int_equal(err.code, r);
	if (!strstr(err.msg, want))
		fail_msg("message \"%s\" lacks \"%s\"", err.msg, want);
}

#define LOAD_FAILS(text, r, want) load_fails(text, strlen(text), r, want)

static const char policy[] = "# a policy\n"
			     "network:\n"
			     "  mode: restricted\n"
			     "  allow:\n"
			     "    - host: api.github.com\n"
			     "      port: 443\n"
			     "    - host: \"pypi.org\"\n"
			     "limits:\n"
			     "  memory: 512M\n"
			     "  timeout: 30s\n"
			     "  pids: 100\n"
			     "  debug: false\n"
			     "  note: ''\n"
			     "  nothing:\n";

static void test_tree(void **state)
{
	_cleanup_config_doc_ struct config_doc *doc = load_ok(policy);
	const struct config_node *root = config_root(doc);
	assert_string_equal(config_doc_name(doc), "policy.yaml");
	assert_int_equal(config_node_kind(root), CONFIG_MAP);
	assert_int_equal(config_node_count(root), 2);
	assert_string_equal(config_map_key(root, 0), "network");
	assert_string_equal(config_map_key(root, 1), "limits");
	assert_null(config_map_key(root, 2));

	const struct config_node *net = config_map_get(root, "network");
	assert_non_null(net);
	assert_int_equal(config_node_line(net), 3);
	const struct config_node *mode = config_map_get(net, "mode");
	assert_string_equal(config_node_scalar(mode), "restricted");
	assert_int_equal(config_node_line(mode), 3);
	assert_int_equal(config_node_column(mode), 9);

	const struct config_node *allow = config_map_get(net, "allow");
	assert_int_equal(config_node_kind(allow), CONFIG_SEQ);
	assert_int_equal(config_node_count(allow), 2);
	const struct config_node *second = config_seq_item(allow, 1);
	assert_int_equal(config_node_kind(second), CONFIG_MAP);
	assert_null(config_seq_item(allow, 2));
	const struct config_node *host = config_map_get(second, "host");
	assert_string_equal(config_node_scalar(host), "pypi.org");
	assert_int_equal(config_node_line(host), 7);

	char path[128];
	assert_string_equal(config_node_path(host, path, sizeof(path)), "network.allow[1].host");
	assert_string_equal(config_node_path(root, path, sizeof(path)), "");
	assert_string_equal(config_node_path(config_map_key_node(net, 1), path, sizeof(path)),
			    "network.allow");
	/* A short buffer is cut, not overrun. */
	assert_string_equal(config_node_path(host, path, 8), "network");

	assert_null(config_map_get(root, "missing"));
	assert_null(config_map_get(mode, "x"));
	assert_null(config_node_scalar(net));
	assert_int_equal(config_node_count(mode), 0);
}

static void test_getters(void **state)
{
	_cleanup_config_doc_ struct config_doc *doc = load_ok(policy);
	const struct config_node *limits = config_map_get(config_root(doc), "limits");
	struct al_error err = { 0 };
	uint64_t u = 0;
	bool b = true;
	const char *s = NULL;

	assert_int_equal(config_get_size(config_map_get(limits, "memory"), NULL, &u, &err), 0);
	assert_true(u == UINT64_C(512) << 20);
	assert_int_equal(config_get_duration(config_map_get(limits, "timeout"), NULL, &u, &err), 0);
	assert_true(u == 30000);
	assert_int_equal(config_get_u64(config_map_get(limits, "pids"), NULL, &u, &err), 0);
	assert_true(u == 100);
	assert_int_equal(config_get_bool(config_map_get(limits, "debug"), NULL, &b, &err), 0);
	assert_false(b);
	/* A quoted empty string is a string; a bare empty value is not. */
	assert_int_equal(config_get_str(config_map_get(limits, "note"), NULL, &s, &err), 0);
	assert_string_equal(s, "");
	assert_true(config_node_is_null(config_map_get(limits, "nothing")));
	assert_false(config_node_is_null(config_map_get(limits, "note")));
	s = "unchanged";
	assert_int_equal(config_get_str(config_map_get(limits, "nothing"), NULL, &s, &err),
			 -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:14: limits.nothing: expected a string, not an "
				     "empty value");
	assert_string_equal(s, "unchanged");
	assert_int_equal(err.code, 0 - EINVAL);
}

static void test_error_messages(void **state)
{
	_cleanup_config_doc_ struct config_doc *doc = load_ok("name: demo\n"
							      "network:\n"
							      "  mode: opne\n"
							      "  enabled: yes\n"
							      "  colour: blue\n"
							      "  size: 1.5G\n"
							      "  count: 18446744073709551616\n"
							      "  list: [1, 2]\n");
	const struct config_node *net = config_map_get(config_root(doc), "network");
	static const char *const modes[] = { "none", "restricted", "open", NULL };
	struct al_error err = { 0 };
	int e = 12345;

	assert_int_equal(config_get_enum(config_map_get(net, "mode"), "network.mode", modes, &e,
					 &err),
			 -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:3: network.mode: expected one of none, "
				     "restricted, open");
	assert_int_equal(e, 12345);
	/* The computed path is the same. */
	al_error_clear(&err);
	assert_int_equal(config_get_enum(config_map_get(net, "mode"), NULL, modes, &e, &err),
			 -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:3: network.mode: expected one of none, "
				     "restricted, open");
	/* And the message does not echo the value. */
	assert_null(strstr(err.msg, "opne"));

	al_error_clear(&err);
	bool b = true;
	assert_int_equal(config_get_bool(config_map_get(net, "enabled"), NULL, &b, &err), -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:4: network.enabled: expected true or false");
	assert_true(b);

	al_error_clear(&err);
	static const char *const keys[] = { "mode", "enabled", NULL };
	assert_int_equal(config_map_check_keys(net, "network", keys, &err), -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:5: network.colour: unknown key (expected one "
				     "of mode, enabled)");
	al_error_clear(&err);
	assert_int_equal(config_map_check_keys(net, NULL, keys, &err), -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:5: network.colour: unknown key (expected one "
				     "of mode, enabled)");
	static const char *const all[] = { "mode",  "enabled", "colour", "size",
					   "count", "list",    NULL };
	assert_int_equal(config_map_check_keys(net, NULL, all, NULL), 0);

	al_error_clear(&err);
	uint64_t u = 7;
	assert_int_equal(config_get_size(config_map_get(net, "size"), NULL, &u, &err), -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:6: network.size: expected a size such as 512M "
				     "or 2G");
	al_error_clear(&err);
	assert_int_equal(config_get_u64(config_map_get(net, "count"), NULL, &u, &err), -ERANGE);
	assert_string_equal(err.msg, "policy.yaml:7: network.count: number too large");
	assert_true(u == 7);

	al_error_clear(&err);
	const char *s;
	assert_int_equal(config_get_str(config_map_get(net, "list"), NULL, &s, &err), -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:8: network.list: expected a string, not a list");
	al_error_clear(&err);
	assert_int_equal(config_get_str(net, NULL, &s, &err), -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:3: network: expected a string, not a map");

	al_error_clear(&err);
	const struct config_node *n = NULL;
	assert_int_equal(config_map_require(net, NULL, "port", &n, &err), -ENOENT);
	assert_string_equal(err.msg, "policy.yaml:3: network: missing required key \"port\"");
	assert_null(n);
	assert_int_equal(config_map_require(net, NULL, "mode", &n, NULL), 0);
	assert_non_null(n);

	al_error_clear(&err);
	assert_int_equal(config_expect_kind(config_map_get(net, "list"), NULL, CONFIG_MAP, &err),
			 -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:8: network.list: expected a map");
	al_error_clear(&err);
	assert_int_equal(config_get_str(NULL, "network.proxy", &s, &err), -ENOENT);
	assert_string_equal(err.msg, "network.proxy: missing");

	al_error_clear(&err);
	assert_int_equal(config_error(config_map_get(net, "list"), NULL, &err, "too %s", "short"),
			 -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:8: network.list: too short");
	al_error_clear(&err);
	assert_int_equal(config_expect_kind(config_root(doc), NULL, CONFIG_SEQ, &err), -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:1: expected a list");
}

static void test_aliases_refused(void **state)
{
	LOAD_FAILS("a: &x 1\nb: *x\n", -EINVAL,
		   "bad.yaml:1: anchors and aliases are not supported");
	/* An anchor even without an alias. */
	LOAD_FAILS("a: 1\nb: &y [1, 2]\n", -EINVAL, "bad.yaml:2: anchors and aliases");
	LOAD_FAILS("a: 1\nb:\n  c: &z\n    d: 1\n", -EINVAL, "bad.yaml:3: anchors");
	/* The classic expansion bomb fails on its first line. */
	LOAD_FAILS("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
		   "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
		   "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
		   "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
		   -EINVAL, "bad.yaml:1: anchors and aliases are not supported");
	/* A merge key is only useful with an alias. */
	LOAD_FAILS("base: {a: 1}\nderived:\n  <<: *base\n", -EINVAL, "bad.yaml:3: anchors");
}

static void test_duplicate_keys(void **state)
{
	LOAD_FAILS("a: 1\nb: 2\na: 3\n", -EINVAL, "bad.yaml:3: a: duplicate key");
	LOAD_FAILS("net:\n  x: 1\n  y: 2\n  x: 2\n", -EINVAL, "bad.yaml:4: net.x: duplicate key");
	LOAD_FAILS("{a: 1, b: 2, 'a': 3}", -EINVAL, "bad.yaml:1: a: duplicate key");
	/* The first duplicate in the document is the one named. */
	LOAD_FAILS("z: 1\na: 1\nz: 2\na: 2\n", -EINVAL, "bad.yaml:3: z: duplicate key");
	/* The same key in different maps is fine. */
	_cleanup_config_doc_ struct config_doc *doc = load_ok("a: {x: 1}\nb: {x: 2}\n");
	assert_non_null(doc);
}

static void test_non_scalar_keys(void **state)
{
	LOAD_FAILS("? [a, b]\n: 1\n", -EINVAL, "bad.yaml:1: a map key must be a plain value");
	LOAD_FAILS("x:\n  ? {a: 1}\n  : 1\n", -EINVAL, "bad.yaml:2: a map key must be");
	LOAD_FAILS("{[a]: 1}", -EINVAL, "a map key must be");
}

static void test_tags_refused(void **state)
{
	LOAD_FAILS("a: !!str 1\n", -EINVAL, "bad.yaml:1: tags are not supported");
	LOAD_FAILS("a: !custom x\n", -EINVAL, "tags are not supported");
	LOAD_FAILS("a: !!map {b: 1}\n", -EINVAL, "tags are not supported");
	LOAD_FAILS("a: ! x\n", -EINVAL, "tags are not supported");
	LOAD_FAILS("%TAG !e! tag:example.com,2000:\n---\na: 1\n", -EINVAL,
		   "tags are not supported");
	LOAD_FAILS("!!python/object:os.system [x]\n", -EINVAL, "tags are not supported");
}

static void test_documents(void **state)
{
	LOAD_FAILS("a: 1\n---\nb: 2\n", -EINVAL, "bad.yaml:2: more than one document");
	LOAD_FAILS("---\na: 1\n...\n---\nb: 2\n", -EINVAL, "bad.yaml:4: more than one document");
	/* One explicit document is fine. */
	_cleanup_config_doc_ struct config_doc *doc = load_ok("%YAML 1.1\n---\na: 1\n...\n");
	assert_string_equal(config_node_scalar(config_map_get(config_root(doc), "a")), "1");

	/* Nothing at all: an empty map. */
	_cleanup_config_doc_ struct config_doc *empty = load_ok("");
	assert_int_equal(config_node_kind(config_root(empty)), CONFIG_MAP);
	assert_int_equal(config_node_count(config_root(empty)), 0);
	_cleanup_config_doc_ struct config_doc *comments = load_ok("# just\n# comments\n");
	assert_int_equal(config_node_kind(config_root(comments)), CONFIG_MAP);
	static const char *const none[] = { NULL };
	assert_int_equal(config_map_check_keys(config_root(comments), NULL, none, NULL), 0);
}

static void test_syntax_errors(void **state)
{
	LOAD_FAILS("a: [1, 2\n", -EINVAL, "bad.yaml:2: ");
	LOAD_FAILS("a: 1\n b: 2\n", -EINVAL, "bad.yaml:2: ");
	LOAD_FAILS("a: \"unterminated\n", -EINVAL, "bad.yaml:");
	LOAD_FAILS("a:\tb\n\t- c\n", -EINVAL, "bad.yaml:");
	/* Escapes can smuggle a NUL into a value. */
	LOAD_FAILS("a: \"x\\0y\"\n", -EINVAL, "bad.yaml:1: NUL byte in a value");
	LOAD_FAILS("\"k\\0\": 1\n", -EINVAL, "NUL byte");
	/* A raw NUL or invalid UTF-8 is refused by the reader. */
	load_fails("a: 1\0b: 2\n", 10, -EINVAL, "bad.yaml:");
	LOAD_FAILS("a: \xff\xfe\n", -EINVAL, "bad.yaml:");
}

static char *repeat(const char *unit, size_t n, const char *tail)
{
	struct buf b = BUF_INIT(SIZE_MAX);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(buf_append_str(&b, unit), 0);
	assert_int_equal(buf_append_str(&b, tail), 0);
	char *s;
	assert_int_equal(buf_steal(&b, &s, NULL), 0);
	return s;
}

static void test_depth_limit(void **state)
{
	/* 64 levels load; 65 do not. */
	_cleanup_free_ char *open64 = repeat("[", CONFIG_MAX_DEPTH, "");
	_cleanup_free_ char *close64 = repeat("]", CONFIG_MAX_DEPTH, "");
	_cleanup_free_ char *ok = NULL;
	assert_true(asprintf(&ok, "%s%s", open64, close64) > 0);
	_cleanup_config_doc_ struct config_doc *doc = load_ok(ok);
	assert_non_null(doc);

	_cleanup_free_ char *deep = NULL;
	assert_true(asprintf(&deep, "[%s%s]", open64, close64) > 0);
	LOAD_FAILS(deep, -E2BIG, "bad.yaml:1: nested too deeply");

	/* Block maps count the same. */
	struct buf b = BUF_INIT(SIZE_MAX);
	for (int i = 0; i < CONFIG_MAX_DEPTH + 1; i++) {
		for (int j = 0; j < i; j++)
			assert_int_equal(buf_append_char(&b, ' '), 0);
		assert_int_equal(buf_append_str(&b, "k:\n"), 0);
	}
	for (int j = 0; j < CONFIG_MAX_DEPTH + 1; j++)
		assert_int_equal(buf_append_char(&b, ' '), 0);
	assert_int_equal(buf_append_str(&b, "v: 1\n"), 0);
	LOAD_FAILS(b.data, -E2BIG, "bad.yaml:65: nested too deeply");
	buf_free(&b);

	/* Very deep input is refused early, not parsed to the end. */
	_cleanup_free_ char *bomb = repeat("[", 1000000, "");
	LOAD_FAILS(bomb, -E2BIG, "nested too deeply");
}

static void test_node_limit(void **state)
{
	/* A list of N scalars is N + 1 nodes. */
	_cleanup_free_ char *at_limit = repeat("1,", CONFIG_MAX_NODES - 2, "1]");
	_cleanup_free_ char *ok = NULL;
	assert_true(asprintf(&ok, "[%s", at_limit) > 0);
	_cleanup_config_doc_ struct config_doc *doc = load_ok(ok);
	assert_int_equal(config_node_count(config_root(doc)), CONFIG_MAX_NODES - 1);

	_cleanup_free_ char *over = NULL;
	assert_true(asprintf(&over, "[1,%s", at_limit) > 0);
	LOAD_FAILS(over, -E2BIG, "too many nodes");
}

static void test_many_keys_fast(void **state)
{
	/* Duplicate detection must not be quadratic: 45,000 keys take about
	 * ten times what 4,500 take, not a hundred (a ratio in one run, so the
	 * machine's speed and load do not decide). */
	struct buf small = BUF_INIT(SIZE_MAX);
	for (int i = 0; i < 4500; i++)
		assert_int_equal(buf_appendf(&small, "key%d: %d\n", i, i), 0);
	struct buf b = BUF_INIT(SIZE_MAX);
	for (int i = 0; i < 45000; i++)
		assert_int_equal(buf_appendf(&b, "key%d: %d\n", i, i), 0);
	double t_small = 1e9, t_big = 1e9;
	for (int round = 0; round < 3; round++) { /* the best of three each */
		struct timespec t0, t1, t2;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		_cleanup_config_doc_ struct config_doc *d1 = load_ok(small.data);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		_cleanup_config_doc_ struct config_doc *d2 = load_ok(b.data);
		clock_gettime(CLOCK_MONOTONIC, &t2);
		assert_non_null(d1);
		assert_non_null(d2);
		double a1 =
			(double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		double a2 =
			(double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_nsec - t1.tv_nsec) / 1e9;
		t_small = a1 < t_small ? a1 : t_small;
		t_big = a2 < t_big ? a2 : t_big;
	}
	buf_free(&small);
	_cleanup_config_doc_ struct config_doc *doc = load_ok(b.data);
	assert_int_equal(config_node_count(config_root(doc)), 45000);
	if (t_big > 40 * t_small && t_big > 0.05)
		fail_msg("10x the keys took %.0fx the time (%.3fs, %.3fs): quadratic?",
			 t_big / t_small, t_small, t_big);
	/* And one duplicate at the very end is still found. */
	assert_int_equal(buf_append_str(&b, "key17: again\n"), 0);
	load_fails(b.data, b.len, -EINVAL, "bad.yaml:45001: key17: duplicate key");
	buf_free(&b);
}

static void test_size_limit(void **state)
{
	size_t len = CONFIG_MAX_FILE_SIZE + 1;
	_cleanup_free_ char *big = malloc(len);
	assert_non_null(big);
	memset(big, '#', len);
	load_fails(big, len, -EFBIG, "bad.yaml: larger than the limit");
}

static void test_control_chars_in_messages(void **state)
{
	_cleanup_config_doc_ struct config_doc *doc = load_ok("\"a\\nb\\e\": 1\n");
	static const char *const none[] = { "x", NULL };
	struct al_error err = { 0 };
	assert_int_equal(config_map_check_keys(config_root(doc), NULL, none, &err), -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:1: a?b?: unknown key (expected one of x)");
}

static void test_load_file(void **state)
{
	_cleanup_free_ char *dir = make_temp_dir();
	assert_non_null(dir);
	_cleanup_free_ char *path = NULL;
	assert_true(asprintf(&path, "%s/policy.yaml", dir) > 0);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("network:\n  mode: closed\n", f);
	fclose(f);

	struct config_doc *doc = NULL;
	struct al_error err = { 0 };
	assert_int_equal(config_load_file(path, &doc, &err), 0);
	static const char *const modes[] = { "none", "open", NULL };
	int m;
	const struct config_node *mode =
		config_map_get(config_map_get(config_root(doc), "network"), "mode");
	assert_int_equal(config_get_enum(mode, NULL, modes, &m, &err), -EINVAL);
	_cleanup_free_ char *want = NULL;
	assert_true(asprintf(&want, "%s:2: network.mode: expected one of none, open", path) > 0);
	assert_string_equal(err.msg, want);
	config_doc_free(doc);
	config_doc_free(NULL);

	/* Missing file. */
	_cleanup_free_ char *missing = NULL;
	assert_true(asprintf(&missing, "%s/nope.yaml", dir) > 0);
	al_error_clear(&err);
	doc = NULL;
	assert_int_equal(config_load_file(missing, &doc, &err), -ENOENT);
	assert_null(doc);
	assert_non_null(strstr(err.msg, "nope.yaml: cannot read: "));

	/* Too big, refused without reading it all. */
	_cleanup_free_ char *big = NULL;
	assert_true(asprintf(&big, "%s/big.yaml", dir) > 0);
	int fd = open(big, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, CONFIG_MAX_FILE_SIZE + 1), 0);
	close(fd);
	al_error_clear(&err);
	assert_int_equal(config_load_file(big, &doc, &err), -EFBIG);
	assert_non_null(strstr(err.msg, "big.yaml: larger than the limit"));

	/* A directory is not a config file. */
	al_error_clear(&err);
	assert_int_equal(config_load_file(dir, &doc, &err), -EISDIR);
	assert_null(doc);
	remove_tree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tree),
		cmocka_unit_test(test_getters),
		cmocka_unit_test(test_error_messages),
		cmocka_unit_test(test_aliases_refused),
		cmocka_unit_test(test_duplicate_keys),
		cmocka_unit_test(test_non_scalar_keys),
		cmocka_unit_test(test_tags_refused),
		cmocka_unit_test(test_documents),
		cmocka_unit_test(test_syntax_errors),
		cmocka_unit_test(test_depth_limit),
		cmocka_unit_test(test_node_limit),
		cmocka_unit_test(test_many_keys_fast),
		cmocka_unit_test(test_size_limit),
		cmocka_unit_test(test_control_chars_in_messages),
		cmocka_unit_test(test_load_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

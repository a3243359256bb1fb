/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/fdutil.h"
#include "common/quote.h"

static void check_one(const char *in, const char *want)
{
	_cleanup_buf_ struct buf b = BUF_INIT(1024);
	assert_int_equal(quote_append_str(&b, in), 0);
	if (strcmp(b.data, want) != 0)
		fail_msg("quote(\"%s\") = %s, expected %s", in, b.data, want);
}

static void test_words(void **state)
{
	check_one("ls", "ls");
	check_one("/usr/bin/env", "/usr/bin/env");
	check_one("--color=auto", "'--color=auto'");
	check_one("a-b_c.d,e:f+g@h", "a-b_c.d,e:f+g@h");
	check_one("", "''");
	check_one("it's", "'it'\\''s'");
	check_one("'", "''\\'''");
	check_one("''", "''\\'''\\'''");
	check_one("a b", "'a b'");
	check_one("$HOME", "'$HOME'");
	check_one("`id`", "'`id`'");
	check_one("$(id)", "'$(id)'");
	check_one("a;b", "'a;b'");
	check_one("*", "'*'");
	check_one("~", "'~'");
	check_one("#x", "'#x'");
	check_one("FOO=bar", "'FOO=bar'");
	check_one("line\nbreak", "'line\nbreak'");
	check_one("back\\slash", "'back\\slash'");
	check_one("caf\xc3\xa9", "'caf\xc3\xa9'");
	/* Reserved words would be syntax in the first position. */
	check_one("if", "'if'");
	check_one("done", "'done'");
	check_one("iffy", "iffy");
}

static void test_nul_refused(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(64);
	assert_int_equal(buf_append_str(&b, "x "), 0);
	assert_int_equal(quote_append(&b, "a\0b", 3), -EINVAL);
	assert_string_equal(b.data, "x ");
	assert_int_equal(quote_append(&b, "ab", 2), 0);
	assert_string_equal(b.data, "x ab");
	assert_int_equal(quote_append(&b, NULL, 0), 0);
	assert_string_equal(b.data, "x ab''");
}

static void test_argv(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(1024);
	const char *argv[] = { "git", "commit", "-m", "it's done", NULL };
	assert_int_equal(quote_argv(&b, argv), 0);
	assert_string_equal(b.data, "git commit -m 'it'\\''s done'");
	buf_reset(&b);
	const char *none[] = { NULL };
	assert_int_equal(quote_argv(&b, none), 0);
	assert_int_equal(b.len, 0);
}

static void test_bound_leaves_buffer_alone(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(12);
	assert_int_equal(buf_append_str(&b, "pre:"), 0);
	const char *argv[] = { "echo", "it's long", NULL };
	assert_int_equal(quote_argv(&b, argv), -ENOBUFS);
	assert_string_equal(b.data, "pre:");
	assert_int_equal(quote_append_str(&b, "a'b'c"), -ENOBUFS);
	assert_string_equal(b.data, "pre:");
	assert_int_equal(quote_append_str(&b, "12345678"), 0);
	assert_string_equal(b.data, "pre:12345678");
}

/* The real test: sh must see exactly the words we quoted. */
static void test_shell_roundtrip(void **state)
{
	const char *words[] = { "plain",  "",	      "it's",	  "''",	  " lead", "trail ",
				"a\nb",	  "$HOME",    "$(id)",	  "`id`", "\\",	   "\\'",
				"\"",	  "!",	      "*",	  "?",	  "[a]",   "{a,b}",
				"~",	  "~root",    "#c",	  "a=b",  "&",	   "|",
				";",	  "<",	      ">",	  "(",	  ")",	   "\t",
				"if",	  "then",     "\xc3\xa9", "%1",	  "-n",	   "--",
				"a b  c", "\x01\x7f", NULL };
	_cleanup_buf_ struct buf cmd = BUF_INIT(65536);
	assert_int_equal(buf_append_str(&cmd, "printf '%s\\0' "), 0);
	assert_int_equal(quote_argv(&cmd, words), 0);

	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execl("/bin/sh", "sh", "-c", cmd.data, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char out[4096];
	ssize_t n = read_full(p[0], out, sizeof(out));
	close(p[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(n > 0);

	size_t off = 0;
	for (size_t i = 0; words[i]; i++) {
		size_t len = strlen(words[i]);
		if (off + len + 1 > (size_t)n || memcmp(out + off, words[i], len) != 0 ||
		    out[off + len] != '\0')
			fail_msg("word %zu (\"%s\") did not survive: %s", i, words[i], cmd.data);
		off += len + 1;
	}
	assert_int_equal(off, (size_t)n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_words),
		cmocka_unit_test(test_nul_refused),
		cmocka_unit_test(test_argv),
		cmocka_unit_test(test_bound_leaves_buffer_alone),
		cmocka_unit_test(test_shell_roundtrip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

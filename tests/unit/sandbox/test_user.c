/* SPDX-License-Identifier: Apache-2.0 */
/* --user: its syntax, the passwd and group parsers (hostile lines
 * included), the lookup below a root directory, and the <id>/user file. */
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

#include "common/fdutil.h"
#include "sandbox/proc.h"

static void test_syntax(void **state)
{
	static const char *const good[] = {
		"0",	     "1000",	"65535",     "1000:1000",
		"0:0",	     "nobody",	"_apt",	     "Bob",
		"bob:staff", "bob:100", "100:staff", "www-data",
		"a.b",	     "m$",	"0000",	     "x23456789012345678901234567890ab",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(sbx_user_syntax_valid(good[i]));
	static const char *const bad[] = {
		"",	      "65536",	  "70000",
		"-1",	      "+5",	  "1000:",
		":1000",      ":",	  "1:2:3",
		"123456",     "1 000",	  "bob smith",
		"9bob",	      "bob:9x y", "b$b",
		"bob/../etc", "0x10",	  "1000:65536",
		"bo\nb",      "\xc3\xa9", "x234567890123456789012345678901234",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(sbx_user_syntax_valid(bad[i]));
	assert_false(sbx_user_syntax_valid(NULL));
}

static int pw(const char *text, const char *name, struct sbx_user *u)
{
	return sbx_passwd_lookup(text, strlen(text), name, u);
}

static void test_passwd(void **state)
{
	static const char text[] = "root:x:0:0:root:/root:/bin/bash\n"
				   "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
				   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
				   "bob:x:1000:1001::/home/bob:/bin/sh";
	struct sbx_user u = { 7, 7 };
	assert_int_equal(pw(text, "nobody", &u), 0);
	assert_true(u.uid == 65534 && u.gid == 65534);
	assert_int_equal(pw(text, "bob", &u), 0); /* the last line needs no newline */
	assert_true(u.uid == 1000 && u.gid == 1001);
	assert_int_equal(pw(text, "root", &u), 0);
	assert_true(u.uid == 0 && u.gid == 0);
	assert_int_equal(pw(text, "alice", &u), -ENOENT);
	/* A prefix of a name is not the name. */
	assert_int_equal(pw(text, "bo", &u), -ENOENT);
	assert_int_equal(pw(text, "nob", &u), -ENOENT);
	assert_int_equal(pw("", "bob", &u), -ENOENT);
	assert_int_equal(pw("\n\n", "bob", &u), -ENOENT);
}

static void test_passwd_hostile(void **state)
{
	struct sbx_user u = { 7, 7 };
	/* The name's own line, broken: refused, never half-read. */
	static const char *const broken[] = {
		"bob:x:1000:1000::/home/bob\n",		      /* 6 fields */
		"bob:x:1000:1000::/home/bob:/bin/sh:extra\n", /* 8 */
		"bob:x:1000\n",
		"bob:x::1000::/:/bin/sh\n",	/* empty uid */
		"bob:x:10a0:1000::/:/bin/sh\n", /* not a number */
		"bob:x:-1:1000::/:/bin/sh\n",
		"bob:x:+1:1000::/:/bin/sh\n",
		"bob:x: 1:1000::/:/bin/sh\n",
		"bob:x:1000:0x10::/:/bin/sh\n",
		"bob:x:99999999999999999999:1::/:/bin/sh\n", /* past any integer */
		"bob:x:4294967296:1::/:/bin/sh\n",
		"bob:x:1000:1000::/:/bin/sh\0tail\n",
	};
	for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
		size_t len = strlen(broken[i]);
		if (i == sizeof(broken) / sizeof(broken[0]) - 1)
			len = sizeof("bob:x:1000:1000::/:/bin/sh\0tail\n") - 1;
		assert_int_equal(sbx_passwd_lookup(broken[i], len, "bob", &u), -EBADMSG);
	}
	/* Ids a sandbox does not have. */
	assert_int_equal(pw("bob:x:65536:1000::/:/bin/sh\n", "bob", &u), -ERANGE);
	assert_int_equal(pw("bob:x:1000:70000::/:/bin/sh\n", "bob", &u), -ERANGE);
	assert_int_equal(pw("bob:x:4294967295:1::/:/bin/sh\n", "bob", &u), -ERANGE);
	assert_true(u.uid == 7 && u.gid == 7); /* untouched on failure */
	/* Broken lines of other names do not matter; the first line of the
	 * name is the one. */
	static const char mixed[] = "alice:x:zzz\n"
				    ":x:5:5::/:/bin/sh\n"
				    "bobby:x:1:1\n"
				    "bob:x:1000:1000::/:/bin/sh\n"
				    "bob:x:0:0::/:/bin/sh\n";
	assert_int_equal(pw(mixed, "bob", &u), 0);
	assert_true(u.uid == 1000 && u.gid == 1000);
	/* An overlong line: the name's own is refused, another's skipped. */
	size_t big = SBX_PASSWD_LINE_MAX + 100;
	char *text = malloc(2 * big);
	assert_non_null(text);
	snprintf(text, 2 * big, "bob:x:1000:1000:");
	size_t n = strlen(text);
	memset(text + n, 'g', big);
	snprintf(text + n + big, 2 * big - n - big, ":/:/bin/sh\n");
	assert_int_equal(pw(text, "bob", &u), -EBADMSG);
	text[0] = 'r'; /* "rob": now another's */
	size_t len = strlen(text);
	snprintf(text + len, 2 * big - len, "bob:x:3:4::/:/bin/sh\n");
	assert_int_equal(pw(text, "bob", &u), 0);
	assert_true(u.uid == 3 && u.gid == 4);
	free(text);
}

static void test_group(void **state)
{
	static const char text[] = "root:x:0:\n"
				   "staff:x:50:bob,alice\n"
				   "big:x:70000:\n"
				   "bad:x:1x:\n"
				   "short:x:5\n";
	uint32_t g = 7;
	assert_int_equal(sbx_group_lookup(text, strlen(text), "staff", &g), 0);
	assert_int_equal(g, 50);
	assert_int_equal(sbx_group_lookup(text, strlen(text), "root", &g), 0);
	assert_int_equal(g, 0);
	assert_int_equal(sbx_group_lookup(text, strlen(text), "big", &g), -ERANGE);
	assert_int_equal(sbx_group_lookup(text, strlen(text), "bad", &g), -EBADMSG);
	assert_int_equal(sbx_group_lookup(text, strlen(text), "short", &g), -EBADMSG);
	assert_int_equal(sbx_group_lookup(text, strlen(text), "wheel", &g), -ENOENT);
	assert_int_equal(g, 0);
}

/* sbx_user_resolve with a fresh error each time (the first reason set is
 * the one an error keeps). */
static int resolve(int fd, const char *text, struct sbx_user *u, struct al_error *err)
{
	*err = (struct al_error){ 0 };
	return sbx_user_resolve(fd, text, u, err);
}

static void write_at(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* sbx_user_resolve below a root directory: names in its etc/, links
 * resolved inside it, the messages a user reads. */
static void test_resolve(void **state)
{
	char root[] = "/tmp/airlock-user-XXXXXX";
	assert_non_null(mkdtemp(root));
	char etc[600], outside[600];
	snprintf(etc, sizeof(etc), "%s/etc", root);
	snprintf(outside, sizeof(outside), "%s/outside", root);
	assert_int_equal(mkdir(etc, 0755), 0);
	int fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	struct sbx_user u;
	struct al_error err = { 0 };
	/* Numbers need no file. */
	assert_int_equal(resolve(fd, "1000", &u, &err), 0);
	assert_true(u.uid == 1000 && u.gid == 1000);
	assert_int_equal(resolve(fd, "5:6", &u, &err), 0);
	assert_true(u.uid == 5 && u.gid == 6);
	assert_int_equal(resolve(fd, "x y", &u, &err), -EINVAL);
	assert_string_equal(al_error_message(&err), "--user wants NAME, UID or UID:GID (UID and "
						    "GID from 0 to 65535), not 'x y'");
	assert_int_equal(resolve(fd, "bob", &u, &err), -ENOENT);
	assert_string_equal(al_error_message(&err),
			    "no user 'bob': the sandbox has no /etc/passwd");
	write_at(etc, "passwd", "bob:x:1000:1001::/home/bob:/bin/sh\nbig:x:1:99999::/:/bin/sh\n");
	assert_int_equal(resolve(fd, "bob", &u, &err), 0);
	assert_true(u.uid == 1000 && u.gid == 1001);
	assert_int_equal(resolve(fd, "alice", &u, &err), -ENOENT);
	assert_string_equal(al_error_message(&err), "no user 'alice' in the sandbox's /etc/passwd");
	assert_int_equal(resolve(fd, "big", &u, &err), -ERANGE);
	assert_string_equal(al_error_message(&err),
			    "user 'big' of the sandbox's /etc/passwd has an id above 65535, "
			    "which no sandbox has");
	assert_int_equal(resolve(fd, "bob:staff", &u, &err), -ENOENT);
	assert_string_equal(al_error_message(&err),
			    "no group 'staff': the sandbox has no /etc/group");
	write_at(etc, "group", "staff:x:50:\n");
	assert_int_equal(resolve(fd, "bob:staff", &u, &err), 0);
	assert_true(u.uid == 1000 && u.gid == 50);
	assert_int_equal(resolve(fd, "7:staff", &u, &err), 0);
	assert_true(u.uid == 7 && u.gid == 50);
	assert_int_equal(resolve(fd, "bob:wheel", &u, &err), -ENOENT);
	assert_string_equal(al_error_message(&err), "no group 'wheel' in the sandbox's /etc/group");
	/* An absolute link resolves inside the root, never on the host: the
	 * host's /etc/passwd (which has root) is not what is read. */
	char path[700];
	snprintf(path, sizeof(path), "%s/passwd", etc);
	unlink(path);
	assert_int_equal(symlink("/outside/pw", path), 0);
	assert_int_equal(mkdir(outside, 0755), 0);
	write_at(outside, "pw", "carol:x:42:43::/:/bin/sh\n");
	assert_int_equal(resolve(fd, "carol", &u, &err), 0);
	assert_true(u.uid == 42 && u.gid == 43);
	assert_int_equal(resolve(fd, "root", &u, &err), -ENOENT);
	unlink(path);
	assert_int_equal(symlink("../../../../../../../../etc/hosts", path), 0);
	assert_int_equal(resolve(fd, "root", &u, &err), -ENOENT);
	assert_string_equal(al_error_message(&err),
			    "no user 'root': the sandbox has no /etc/passwd");
	/* Not a regular file (a FIFO would never end). */
	unlink(path);
	assert_int_equal(mkfifo(path, 0644), 0);
	assert_int_equal(resolve(fd, "bob", &u, &err), -EINVAL);
	assert_string_equal(al_error_message(&err),
			    "the sandbox's /etc/passwd is not a regular file");
	/* Too large. */
	unlink(path);
	int big = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(big >= 0);
	assert_int_equal(ftruncate(big, SBX_PASSWD_MAX + 1), 0);
	close(big);
	assert_int_equal(resolve(fd, "bob", &u, &err), -EFBIG);
	assert_string_equal(al_error_message(&err),
			    "the sandbox's /etc/passwd is larger than 4096 KiB");
	close(fd);
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
}

static void test_user_file(void **state)
{
	char buf[SBX_USER_FILE_MAX];
	struct sbx_user u = { 65535, 65535 }, back;
	int n = sbx_user_format(&u, buf, sizeof(buf));
	assert_int_equal(n, 12);
	assert_string_equal(buf, "65535:65535\n");
	assert_int_equal(sbx_user_parse(buf, (size_t)n, &back), 0);
	assert_true(back.uid == 65535 && back.gid == 65535);
	assert_int_equal(sbx_user_parse("0:0\n", 4, &back), 0);
	assert_true(back.uid == 0 && back.gid == 0);
	u.uid = 65536;
	assert_int_equal(sbx_user_format(&u, buf, sizeof(buf)), -EINVAL);
	static const char *const bad[] = {
		"",	   "0:0",	"1000\n", "1000:\n", ":1\n",   "01:1\n", "1:01\n",
		"1:2:3\n", "65536:1\n", "a:b\n",  "1:2\n\n", " 1:2\n", "1:2 \n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(sbx_user_parse(bad[i], strlen(bad[i]), &back), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_syntax),	       cmocka_unit_test(test_passwd),
		cmocka_unit_test(test_passwd_hostile), cmocka_unit_test(test_group),
		cmocka_unit_test(test_resolve),	       cmocka_unit_test(test_user_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

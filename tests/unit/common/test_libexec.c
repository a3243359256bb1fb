/* SPDX-License-Identifier: Apache-2.0 */
/* Finding airlock's helper programs relative to the binary: the configured
 * directory first, then the binary's own; anything that must not run is
 * refused, not skipped over. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/libexec.h"
#include "helpers.h"

/* snprintf into an array, checked to fit. */
#define PATHF(buf, ...) assert_true(snprintf(buf, sizeof(buf), __VA_ARGS__) < (int)sizeof(buf))

struct tree {
	char *root;
	char bin[LIBEXEC_PATH_MAX];  /* root/bin */
	char self[LIBEXEC_PATH_MAX]; /* root/bin/airlock */
	char conf[LIBEXEC_PATH_MAX]; /* the configured directory, from bin */
};

static void mkdirs(const char *path)
{
	char p[LIBEXEC_PATH_MAX];
	PATHF(p, "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			(void)mkdir(p, 0755);
			*s = '/';
		}
	(void)mkdir(p, 0755);
}

static void put_file(const char *dir, const char *name, mode_t mode)
{
	char p[LIBEXEC_PATH_MAX];
	PATHF(p, "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "#!/bin/true\n", 12), 12);
	close(fd);
	assert_int_equal(chmod(p, mode), 0);
}

static int setup(void **state)
{
	if (AIRLOCK_LIBEXEC_DIR[0] == '/')
		return 0; /* an absolute directory: the tests below need a relative one */
	struct tree *t = calloc(1, sizeof(*t));
	assert_non_null(t);
	t->root = make_temp_dir();
	assert_non_null(t->root);
	PATHF(t->bin, "%s/bin", t->root);
	PATHF(t->self, "%s/airlock", t->bin);
	PATHF(t->conf, "%s/%s", t->bin, AIRLOCK_LIBEXEC_DIR);
	mkdirs(t->bin);
	mkdirs(t->conf);
	put_file(t->bin, "airlock", 0755);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tree *t = *state;
	if (t) {
		remove_tree(t->root);
		free(t->root);
		free(t);
	}
	return 0;
}

#define NEED_TREE(t)             \
	struct tree *t = *state; \
	if (!t)                  \
		skip(); /* AIRLOCK_LIBEXEC_DIR is absolute in this build */

static ino_t ino_of(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st.st_ino;
}

static void test_missing(void **state)
{
	NEED_TREE(t);
	struct al_error err = { 0 };
	char path[LIBEXEC_PATH_MAX] = "";
	assert_int_equal(libexec_open_from(t->self, "airlock-x", path, &err), -ENOENT);
	assert_string_equal(path, "");
	/* The message names both places. */
	assert_non_null(strstr(al_error_message(&err), "airlock-x"));
	assert_non_null(strstr(al_error_message(&err), t->conf));
	assert_non_null(strstr(al_error_message(&err), t->bin));
}

static void test_found_configured_first(void **state)
{
	NEED_TREE(t);
	char path[LIBEXEC_PATH_MAX], want[LIBEXEC_PATH_MAX];
	/* Beside the binary only (a build tree). */
	put_file(t->bin, "airlock-y", 0755);
	int fd = libexec_open_from(t->self, "airlock-y", path, NULL);
	assert_true(fd >= 0);
	PATHF(want, "%s/airlock-y", t->bin);
	assert_string_equal(path, want);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(st.st_ino == ino_of(want));
	int fl = fcntl(fd, F_GETFD);
	assert_true(fl >= 0 && (fl & FD_CLOEXEC));
	close(fd);
	/* Installed as well: the configured directory wins. */
	put_file(t->conf, "airlock-y", 0755);
	fd = libexec_open_from(t->self, "airlock-y", path, NULL);
	assert_true(fd >= 0);
	PATHF(want, "%s/airlock-y", t->conf);
	assert_string_equal(path, want);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(st.st_ino == ino_of(want));
	close(fd);
}

static void test_refused_not_skipped(void **state)
{
	NEED_TREE(t);
	struct al_error err = { 0 };
	/* A good one beside, a bad one where it is installed: refused, and
	 * the one beside is not taken instead. */
	put_file(t->bin, "airlock-z", 0755);
	put_file(t->conf, "airlock-z", 0644);
	assert_int_equal(libexec_open_from(t->self, "airlock-z", NULL, &err), -EACCES);
	assert_non_null(strstr(al_error_message(&err), "not an executable"));
	put_file(t->conf, "airlock-z", 0775);
	al_error_clear(&err);
	assert_int_equal(libexec_open_from(t->self, "airlock-z", NULL, &err), -EPERM);
	put_file(t->conf, "airlock-z", 0757);
	assert_int_equal(libexec_open_from(t->self, "airlock-z", NULL, NULL), -EPERM);
	/* A directory by that name. */
	char d[LIBEXEC_PATH_MAX];
	PATHF(d, "%s/airlock-d", t->conf);
	assert_int_equal(mkdir(d, 0755), 0);
	assert_int_equal(libexec_open_from(t->self, "airlock-d", NULL, NULL), -EACCES);
	/* Names are names, not paths. */
	assert_int_equal(libexec_open_from(t->self, "../bin/airlock", NULL, NULL), -EINVAL);
	assert_int_equal(libexec_open_from(t->self, "", NULL, NULL), -EINVAL);
}

static void test_other_owner(void **state)
{
	NEED_TREE(t);
	if (geteuid() != 0)
		skip(); /* giving a file away needs root */
	char p[LIBEXEC_PATH_MAX];
	put_file(t->conf, "airlock-o", 0755);
	PATHF(p, "%s/airlock-o", t->conf);
	assert_int_equal(chown(p, 12345, 12345), 0);
	struct al_error err = { 0 };
	assert_int_equal(libexec_open_from(t->self, "airlock-o", NULL, &err), -EPERM);
	assert_non_null(strstr(al_error_message(&err), "not owned"));
}

static void test_self(void **state)
{
	/* From /proc/self/exe: this test program's own directory, where no
	 * helper of that name is. */
	struct al_error err = { 0 };
	assert_int_equal(libexec_open("airlock-no-such-helper", NULL, &err), -ENOENT);
	assert_non_null(strstr(al_error_message(&err), "airlock-no-such-helper"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_found_configured_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_not_skipped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_owner, setup, teardown),
		cmocka_unit_test(test_self),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ftw.h>
#include <linux/openat2.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/parse.h"
#include "store/objstore.h"

static char tmpdir[64];
static char root[128];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_DP)
		return rmdir(path);
	return unlink(path);
}

static int setup(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_objstore.XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(root, sizeof(root), "%s/store", tmpdir);
	return 0;
}

static int teardown(void **state)
{
	/* FTW_PHYS: a planted symlink is removed, never followed. */
	return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static struct st_objstore *open_ok(void)
{
	struct st_objstore *s = NULL;
	struct al_error err = { 0 };
	if (st_objstore_open_dir(root, &s, &err) < 0)
		fail_msg("open %s: %s", root, al_error_message(&err));
	return s;
}

static void put_ok(struct st_objstore *s, const char *key, const char *text)
{
	struct al_error err = { 0 };
	if (st_obj_put(s, key, text, strlen(text), &err) < 0)
		fail_msg("put %s: %s", key, al_error_message(&err));
}

static void get_is(struct st_objstore *s, const char *key, const char *want)
{
	struct al_error err = { 0 };
	void *data = NULL;
	size_t len = 0;
	if (st_obj_get(s, key, 1 << 20, &data, &len, &err) < 0)
		fail_msg("get %s: %s", key, al_error_message(&err));
	assert_int_equal(len, strlen(want));
	assert_memory_equal(data, want, len);
	free(data);
}

/* Files directly below dir whose name starts with ".tmp#". */
static int count_temp(const char *dir)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "find '%s' -name '.tmp#*' | wc -l", dir);
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	int n = -1;
	char line[32];
	if (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		assert_int_equal(parse_int_range(line, 0, INT_MAX, &n), 0);
	}
	pclose(f);
	return n;
}

static void test_keys(void **state)
{
	assert_true(st_key_valid("tenants/t/packs/abc"));
	assert_true(st_key_valid("tenants/a-b_c/x/y.z/0-_."));
	assert_true(st_key_valid("tenants/t/x"));
	assert_false(st_key_valid(NULL));
	assert_false(st_key_valid(""));
	assert_false(st_key_valid("tenants/t"));
	assert_false(st_key_valid("tenants/t/"));
	assert_false(st_key_valid("tenants//x"));
	assert_false(st_key_valid("tenants/t//x"));
	assert_false(st_key_valid("tenants/t/../u/x"));
	assert_false(st_key_valid("tenants/t/./x"));
	assert_false(st_key_valid("tenants/t/.."));
	assert_false(st_key_valid("tenants/../x"));
	assert_false(st_key_valid("/tenants/t/x"));
	assert_false(st_key_valid("tenants/t/X"));
	assert_false(st_key_valid("tenants/T/x"));
	assert_false(st_key_valid("tenants/t.x/x")); /* '.' is not a tenant character */
	assert_false(st_key_valid("tenants/-t/x"));
	assert_false(st_key_valid("other/t/x"));
	assert_false(st_key_valid("packs/x"));
	assert_false(st_key_valid("tenants/t/a b"));
	assert_false(st_key_valid("tenants/t/.tmp#0123"));
	assert_false(st_key_valid("tenants/t/x\n"));

	char key[ST_KEY_MAX + 2];
	memcpy(key, "tenants/t/", 10);
	memset(key + 10, 'a', ST_KEY_MAX - 10);
	key[ST_KEY_MAX] = '\0';
	assert_true(st_key_valid(key));
	key[ST_KEY_MAX] = 'a';
	key[ST_KEY_MAX + 1] = '\0';
	assert_false(st_key_valid(key));

	assert_true(st_tenant_valid("t"));
	assert_true(st_tenant_valid("acme_01-x"));
	assert_false(st_tenant_valid(""));
	assert_false(st_tenant_valid(NULL));
	assert_false(st_tenant_valid("-x"));
	assert_false(st_tenant_valid("a.b"));
	assert_false(st_tenant_valid("a/b"));
	assert_false(st_tenant_valid("Acme"));
	char t[ST_TENANT_MAX + 2];
	memset(t, 'a', ST_TENANT_MAX);
	t[ST_TENANT_MAX] = '\0';
	assert_true(st_tenant_valid(t));
	t[ST_TENANT_MAX] = 'a';
	t[ST_TENANT_MAX + 1] = '\0';
	assert_false(st_tenant_valid(t));
}

static void test_put_get(void **state)
{
	struct st_objstore *s = open_ok();
	struct stat st;
	assert_int_equal(stat(root, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);

	put_ok(s, "tenants/t/packs/one", "hello");
	get_is(s, "tenants/t/packs/one", "hello");
	put_ok(s, "tenants/t/packs/one", "overwritten, longer");
	get_is(s, "tenants/t/packs/one", "overwritten, longer");
	put_ok(s, "tenants/t/empty", "");
	get_is(s, "tenants/t/empty", "");

	/* Files 0600, directories 0700, no temp file left behind. */
	char path[256];
	snprintf(path, sizeof(path), "%s/tenants/t/packs/one", root);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	snprintf(path, sizeof(path), "%s/tenants/t/packs", root);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(count_temp(root), 0);

	/* Binary content with NULs. */
	struct al_error err = { 0 };
	unsigned char bin[1000];
	for (size_t i = 0; i < sizeof(bin); i++)
		bin[i] = (unsigned char)(i * 7);
	assert_int_equal(st_obj_put(s, "tenants/t/bin", bin, sizeof(bin), &err), 0);

	/* get_range: inside, at the end, past the end. */
	unsigned char buf[100];
	assert_int_equal(st_obj_get_range(s, "tenants/t/bin", 10, 100, buf, &err), 0);
	assert_memory_equal(buf, bin + 10, 100);
	assert_int_equal(st_obj_get_range(s, "tenants/t/bin", 900, 100, buf, &err), 0);
	assert_memory_equal(buf, bin + 900, 100);
	assert_int_equal(st_obj_get_range(s, "tenants/t/bin", 0, 0, buf, &err), 0);
	assert_int_equal(st_obj_get_range(s, "tenants/t/bin", 901, 100, buf, &err), -EIO);
	assert_non_null(strstr(err.msg, "tenants/t/bin"));
	al_error_clear(&err);
	assert_int_equal(st_obj_get_range(s, "tenants/t/bin", UINT64_MAX - 5, 10, buf, &err), -EIO);

	/* max respected: exactly max is fine, one less is -EFBIG. */
	void *data = (void *)1;
	size_t len = 7;
	assert_int_equal(st_obj_get(s, "tenants/t/bin", sizeof(bin), &data, &len, &err), 0);
	assert_int_equal(len, sizeof(bin));
	free(data);
	data = NULL;
	len = 7;
	al_error_clear(&err);
	assert_int_equal(st_obj_get(s, "tenants/t/bin", sizeof(bin) - 1, &data, &len, &err),
			 -EFBIG);
	assert_null(data);
	assert_int_equal(len, 7); /* untouched on failure */
	assert_non_null(strstr(err.msg, "tenants/t/bin"));

	/* Absent objects name the key. */
	al_error_clear(&err);
	assert_int_equal(st_obj_get(s, "tenants/t/nope", 10, &data, &len, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "tenants/t/nope"));
	al_error_clear(&err);
	assert_int_equal(st_obj_get(s, "tenants/u/nope", 10, &data, &len, &err), -ENOENT);
	/* A directory is not an object. */
	al_error_clear(&err);
	assert_true(st_obj_get(s, "tenants/t/packs", 10, &data, &len, &err) < 0);
	assert_int_equal(st_obj_exists(s, "tenants/t/packs", &err), 0);
	/* Nor is the path through an object. */
	al_error_clear(&err);
	assert_true(st_obj_put(s, "tenants/t/bin/under", "x", 1, &err) < 0);
	assert_non_null(strstr(err.msg, "tenants/t/bin/under"));
	assert_int_equal(count_temp(root), 0);

	st_objstore_close(s);
	st_objstore_close(NULL);

	/* Reopening an existing root sees the objects. */
	s = open_ok();
	get_is(s, "tenants/t/packs/one", "overwritten, longer");
	st_objstore_close(s);
}

static void test_bad_keys(void **state)
{
	struct st_objstore *s = open_ok();
	static const char *const bad[] = {
		"tenants/t/../../etc/passwd",
		"tenants/t//x",
		"tenants/t/Upper",
		"/etc/passwd",
		"/tenants/t/x",
		"tenants/x",
		"packs/x",
		"tenants//x",
		"tenants/t/.",
		"",
	};
	char longkey[ST_KEY_MAX + 16];
	memcpy(longkey, "tenants/t/", 10);
	memset(longkey + 10, 'a', ST_KEY_MAX + 1 - 10);
	longkey[ST_KEY_MAX + 1] = '\0';
	for (size_t i = 0; i <= sizeof(bad) / sizeof(bad[0]); i++) {
		const char *key = i < sizeof(bad) / sizeof(bad[0]) ? bad[i] : longkey;
		struct al_error err = { 0 };
		void *data = NULL;
		size_t len = 0;
		char buf[4];
		assert_int_equal(st_obj_put(s, key, "x", 1, &err), -EINVAL);
		assert_non_null(strstr(err.msg, "invalid object key"));
		if (*key && i < sizeof(bad) / sizeof(bad[0]) && !strstr(err.msg, key))
			fail_msg("error '%s' does not name '%s'", err.msg, key);
		al_error_clear(&err);
		assert_int_equal(st_obj_get(s, key, 10, &data, &len, &err), -EINVAL);
		assert_int_equal(st_obj_get_range(s, key, 0, 1, buf, &err), -EINVAL);
		assert_int_equal(st_obj_exists(s, key, &err), -EINVAL);
		assert_int_equal(st_obj_del(s, key, &err), -EINVAL);
	}
	struct al_error err = { 0 };
	assert_int_equal(st_obj_put(s, NULL, "x", 1, &err), -EINVAL);
	/* Nothing was created anywhere. */
	char path[256];
	snprintf(path, sizeof(path), "%s/tenants", root);
	assert_int_equal(access(path, F_OK), -1);
	st_objstore_close(s);
}

struct seen {
	char keys[16][ST_KEY_MAX + 1];
	int n;
	int stop_at;
};

static int collect(const char *key, void *ud)
{
	struct seen *s = ud;
	if (s->stop_at && s->n + 1 >= s->stop_at)
		return -ECANCELED;
	assert_true(s->n < 16);
	snprintf(s->keys[s->n++], ST_KEY_MAX + 1, "%s", key);
	return 0;
}

static bool seen_has(const struct seen *s, const char *key)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->keys[i], key) == 0)
			return true;
	return false;
}

static void test_exists_del_list(void **state)
{
	struct st_objstore *s = open_ok();
	struct al_error err = { 0 };
	put_ok(s, "tenants/t/packs/a", "1");
	put_ok(s, "tenants/t/packs/b", "2");
	put_ok(s, "tenants/t/index/a", "3");
	put_ok(s, "tenants/t/deep/er/still/c", "4");
	put_ok(s, "tenants/u/packs/a", "5");

	assert_int_equal(st_obj_exists(s, "tenants/t/packs/a", &err), 1);
	assert_int_equal(st_obj_exists(s, "tenants/t/packs/z", &err), 0);
	assert_int_equal(st_obj_exists(s, "tenants/zz/packs/z", &err), 0);
	assert_int_equal(st_obj_exists(s, "tenants/t/packs/a/b", &err), 0);

	/* Leftovers that are not objects: a temp file, a bad name, a FIFO. */
	char path[256];
	snprintf(path, sizeof(path), "%s/tenants/t/packs/.tmp#deadbeef", root);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/tenants/t/packs/Bad Name", root);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/tenants/t/packs/fifo", root);
	assert_int_equal(mkfifo(path, 0600), 0);
	void *data = NULL;
	size_t len = 0;
	/* Neither hangs nor reads: a FIFO is not a regular file. */
	assert_int_equal(st_obj_get(s, "tenants/t/packs/fifo", 10, &data, &len, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "tenants/t/packs/fifo"));

	struct seen seen = { 0 };
	assert_int_equal(st_obj_list(s, "tenants/t/packs/", collect, &seen, &err), 0);
	assert_int_equal(seen.n, 2);
	assert_true(seen_has(&seen, "tenants/t/packs/a"));
	assert_true(seen_has(&seen, "tenants/t/packs/b"));

	memset(&seen, 0, sizeof(seen));
	assert_int_equal(st_obj_list(s, "tenants/t/", collect, &seen, &err), 0);
	assert_int_equal(seen.n, 4);
	assert_true(seen_has(&seen, "tenants/t/deep/er/still/c"));
	assert_true(seen_has(&seen, "tenants/t/index/a"));

	memset(&seen, 0, sizeof(seen));
	assert_int_equal(st_obj_list(s, "tenants/", collect, &seen, &err), 0);
	assert_int_equal(seen.n, 5);

	memset(&seen, 0, sizeof(seen));
	assert_int_equal(st_obj_list(s, "tenants/none/", collect, &seen, &err), 0);
	assert_int_equal(seen.n, 0);

	/* The callback stops the walk. */
	memset(&seen, 0, sizeof(seen));
	seen.stop_at = 2;
	assert_int_equal(st_obj_list(s, "tenants/t/", collect, &seen, &err), -ECANCELED);
	assert_int_equal(seen.n, 1);

	/* Bad prefixes. */
	static const char *const badp[] = { "tenants",	   "tenants/t", "",	     "/",
					    "tenants/../", "other/",	"tenants/T/" };
	for (size_t i = 0; i < sizeof(badp) / sizeof(badp[0]); i++) {
		al_error_clear(&err);
		assert_int_equal(st_obj_list(s, badp[i], collect, &seen, &err), -EINVAL);
	}

	/* del, twice, and of something that never was. */
	al_error_clear(&err);
	assert_int_equal(st_obj_del(s, "tenants/t/packs/a", &err), 0);
	assert_int_equal(st_obj_exists(s, "tenants/t/packs/a", &err), 0);
	assert_int_equal(st_obj_del(s, "tenants/t/packs/a", &err), 0);
	assert_int_equal(st_obj_del(s, "tenants/nobody/x/y", &err), 0);
	assert_int_equal(st_obj_exists(s, "tenants/t/packs/b", &err), 1);

	/* The sweep removes old temp files only, never objects. */
	assert_int_equal(st_objstore_sweep_temp(s, 3600, &err), 0);
	assert_int_equal(count_temp(root), 1);
	assert_int_equal(st_objstore_sweep_temp(s, 0, &err), 1);
	assert_int_equal(count_temp(root), 0);
	assert_int_equal(st_obj_exists(s, "tenants/t/packs/b", &err), 1);
	st_objstore_close(s);
}

static void test_symlinks_not_followed(void **state)
{
	struct st_objstore *s = open_ok();
	struct al_error err = { 0 };
	put_ok(s, "tenants/t/index/x", "1");

	/* tenants/t/packs -> a directory outside the store holding a "secret". */
	char outside[128], path[256], link[256];
	snprintf(outside, sizeof(outside), "%s/outside", tmpdir);
	assert_int_equal(mkdir(outside, 0700), 0);
	snprintf(path, sizeof(path), "%s/secret", outside);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "secret", 6), 6);
	close(fd);
	snprintf(link, sizeof(link), "%s/tenants/t/packs", root);
	assert_int_equal(symlink(outside, link), 0);

	void *data = NULL;
	size_t len = 0;
	char buf[6];
	assert_true(st_obj_get(s, "tenants/t/packs/secret", 100, &data, &len, &err) < 0);
	assert_null(data);
	if (!strstr(err.msg, "tenants/t/packs/secret") || !strstr(err.msg, "symlink"))
		fail_msg("error '%s' does not name the key and the symlink", err.msg);
	al_error_clear(&err);
	assert_true(st_obj_get_range(s, "tenants/t/packs/secret", 0, 6, buf, &err) < 0);
	al_error_clear(&err);
	assert_true(st_obj_exists(s, "tenants/t/packs/secret", &err) < 0);
	al_error_clear(&err);
	assert_true(st_obj_put(s, "tenants/t/packs/new", "x", 1, &err) < 0);
	assert_non_null(strstr(err.msg, "tenants/t/packs/new"));
	al_error_clear(&err);
	assert_int_equal(st_obj_del(s, "tenants/t/packs/secret", &err) < 0, 1);
	struct seen seen = { 0 };
	al_error_clear(&err);
	assert_true(st_obj_list(s, "tenants/t/packs/", collect, &seen, &err) < 0);
	assert_int_equal(seen.n, 0);
	/* A walk of the tenant skips the link rather than entering it. */
	assert_int_equal(st_obj_list(s, "tenants/t/", collect, &seen, &err), 0);
	assert_int_equal(seen.n, 1);
	assert_string_equal(seen.keys[0], "tenants/t/index/x");

	/* Nothing was written or removed outside. */
	snprintf(path, sizeof(path), "%s/new", outside);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof(path), "%s/secret", outside);
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(count_temp(outside), 0);

	/* A symlink as the last component: neither read nor followed on put. */
	snprintf(link, sizeof(link), "%s/tenants/t/index/evil", root);
	assert_int_equal(symlink(path, link), 0);
	al_error_clear(&err);
	assert_true(st_obj_get(s, "tenants/t/index/evil", 100, &data, &len, &err) < 0);
	assert_null(data);
	/* put replaces the link itself (rename), the target is untouched. */
	put_ok(s, "tenants/t/index/evil", "mine");
	get_is(s, "tenants/t/index/evil", "mine");
	struct stat st;
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, sizeof(buf)), 6);
	assert_memory_equal(buf, "secret", 6);
	close(fd);

	/* A symlinked tenant directory. */
	snprintf(link, sizeof(link), "%s/tenants/v", root);
	assert_int_equal(symlink(outside, link), 0);
	al_error_clear(&err);
	assert_true(st_obj_put(s, "tenants/v/secret", "x", 1, &err) < 0);
	al_error_clear(&err);
	assert_true(st_obj_put(s, "tenants/v/packs/x", "x", 1, &err) < 0);
	snprintf(path, sizeof(path), "%s/packs", outside);
	assert_int_equal(access(path, F_OK), -1);
	st_objstore_close(s);
}

/* ---- the walk for kernels without openat2 ----
 *
 * A child process makes openat2 fail with ENOSYS (a seccomp filter, as on
 * kernels before 5.6), then runs every operation, on keys fine and bad and
 * through planted symlinks. cmocka's asserts cannot cross fork, so the child
 * writes the first failed check to a pipe and exits 1; the parent asserts.
 */

static int child_report = -1;

static void child_fail(int line, const char *what, const struct al_error *err)
{
	char msg[768];
	int n = snprintf(msg, sizeof(msg), "line %d: %s%s%s", line, what,
			 err && err->code ? "; last error: " : "",
			 err && err->code ? al_error_message(err) : "");
	if (n > 0)
		(void)!write(child_report, msg,
			     (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
	_exit(1);
}

/* err is cleared after each refusal: al_error_set keeps the first reason, and
 * a message checked must be the one the call under test set. */
#define CHILD_CHECK(cond)                                  \
	do {                                               \
		if (!(cond))                               \
			child_fail(__LINE__, #cond, &err); \
	} while (0)

static bool file_is(const char *path, const char *want)
{
	char buf[64];
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	return n == (ssize_t)strlen(want) && memcmp(buf, want, (size_t)n) == 0;
}

static bool absent(const char *path)
{
	struct stat st;
	return lstat(path, &st) < 0 && errno == ENOENT;
}

static bool make_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
	return close(fd) == 0 && ok;
}

/* Entries of dir, "." and ".." aside; -1 when it cannot be read. */
static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n;
}

static bool obj_is(struct st_objstore *s, const char *key, const char *want, struct al_error *err)
{
	void *data = NULL;
	size_t len = 0;
	if (st_obj_get(s, key, 1 << 20, &data, &len, err) < 0)
		return false;
	bool ok = len == strlen(want) && memcmp(data, want, len) == 0;
	free(data);
	return ok;
}

/* Any data returned (a followed link) is a failure, whatever the code. */
static bool get_refused(struct st_objstore *s, const char *key, struct al_error *err)
{
	void *data = NULL;
	size_t len = 0;
	int r = st_obj_get(s, key, 1 << 20, &data, &len, err);
	free(data);
	return r < 0 && data == NULL;
}

static bool get_range_refused(struct st_objstore *s, const char *key, struct al_error *err)
{
	char buf[6] = { 0 };
	int r = st_obj_get_range(s, key, 0, sizeof(buf), buf, err);
	return r < 0 && memcmp(buf, "secret", 6) != 0;
}

/* The message of a refusal names the key and the symlink, as with openat2. */
static bool says_symlink(const struct al_error *err, const char *key)
{
	return strstr(err->msg, key) && strstr(err->msg, "symlink");
}

static void fallback_ops(void)
{
	struct al_error err = { 0 };
	char path[256], link[256], outside[128];

	/* The filter is in place: every resolution below takes the walk. */
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC };
	errno = 0;
	long fd = syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
	CHILD_CHECK(fd == -1 && errno == ENOSYS);

	struct st_objstore *s = NULL;
	CHILD_CHECK(st_objstore_open_dir(root, &s, &err) == 0);

	/* put, get, get_range, exists, list, del on plain keys. */
	CHILD_CHECK(st_obj_put(s, "tenants/t/packs/a", "hello", 5, &err) == 0);
	CHILD_CHECK(obj_is(s, "tenants/t/packs/a", "hello", &err));
	CHILD_CHECK(st_obj_put(s, "tenants/t/packs/a", "hello again", 11, &err) == 0);
	CHILD_CHECK(obj_is(s, "tenants/t/packs/a", "hello again", &err));
	CHILD_CHECK(st_obj_put(s, "tenants/t/deep/er/still/b", "deep", 4, &err) == 0);
	CHILD_CHECK(obj_is(s, "tenants/t/deep/er/still/b", "deep", &err));
	CHILD_CHECK(st_obj_put(s, "tenants/t/empty", "", 0, &err) == 0);
	CHILD_CHECK(obj_is(s, "tenants/t/empty", "", &err));
	char buf[8] = { 0 };
	CHILD_CHECK(st_obj_get_range(s, "tenants/t/packs/a", 6, 5, buf, &err) == 0);
	CHILD_CHECK(memcmp(buf, "again", 5) == 0);
	CHILD_CHECK(st_obj_get_range(s, "tenants/t/packs/a", 7, 5, buf, &err) == -EIO);
	al_error_clear(&err);
	void *data = NULL;
	size_t len = 0;
	CHILD_CHECK(st_obj_get(s, "tenants/t/packs/a", 4, &data, &len, &err) == -EFBIG);
	al_error_clear(&err);
	CHILD_CHECK(st_obj_get(s, "tenants/t/nope", 10, &data, &len, &err) == -ENOENT);
	CHILD_CHECK(strstr(err.msg, "tenants/t/nope"));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_get(s, "tenants/t/packs", 10, &data, &len, &err) == -EINVAL);
	al_error_clear(&err);
	CHILD_CHECK(st_obj_exists(s, "tenants/t/packs/a", &err) == 1);
	CHILD_CHECK(st_obj_exists(s, "tenants/t/packs/z", &err) == 0);
	CHILD_CHECK(st_obj_exists(s, "tenants/zz/packs/z", &err) == 0);
	CHILD_CHECK(st_obj_exists(s, "tenants/t/packs", &err) == 0);
	CHILD_CHECK(st_obj_exists(s, "tenants/t/packs/a/b", &err) == 0);
	CHILD_CHECK(st_obj_put(s, "tenants/t/packs/a/under", "x", 1, &err) < 0);
	al_error_clear(&err);
	snprintf(path, sizeof(path), "%s/tenants/t/packs/fifo", root);
	CHILD_CHECK(mkfifo(path, 0600) == 0);
	CHILD_CHECK(st_obj_get(s, "tenants/t/packs/fifo", 10, &data, &len, &err) == -EINVAL);
	al_error_clear(&err);
	struct seen seen = { 0 };
	CHILD_CHECK(st_obj_list(s, "tenants/t/", collect, &seen, &err) == 0);
	CHILD_CHECK(seen.n == 3 && seen_has(&seen, "tenants/t/packs/a") &&
		    seen_has(&seen, "tenants/t/deep/er/still/b") &&
		    seen_has(&seen, "tenants/t/empty"));
	memset(&seen, 0, sizeof(seen));
	CHILD_CHECK(st_obj_list(s, "tenants/none/", collect, &seen, &err) == 0 && seen.n == 0);
	CHILD_CHECK(st_obj_del(s, "tenants/t/packs/a", &err) == 0);
	CHILD_CHECK(st_obj_exists(s, "tenants/t/packs/a", &err) == 0);
	CHILD_CHECK(st_obj_del(s, "tenants/t/packs/a", &err) == 0);
	CHILD_CHECK(st_obj_del(s, "tenants/nobody/x/y", &err) == 0);

	/* Bad keys and prefixes are refused before anything is resolved. */
	static const char *const bad[] = { "tenants/t/../../etc/passwd",
					   "/etc/passwd",
					   "tenants/t/.",
					   "tenants/t//x",
					   "tenants/../x",
					   "tenants/t/.tmp#00" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHILD_CHECK(st_obj_put(s, bad[i], "x", 1, &err) == -EINVAL);
		CHILD_CHECK(st_obj_get(s, bad[i], 10, &data, &len, &err) == -EINVAL);
		CHILD_CHECK(st_obj_get_range(s, bad[i], 0, 1, buf, &err) == -EINVAL);
		CHILD_CHECK(st_obj_exists(s, bad[i], &err) == -EINVAL);
		CHILD_CHECK(st_obj_del(s, bad[i], &err) == -EINVAL);
		al_error_clear(&err);
	}
	CHILD_CHECK(st_obj_list(s, "tenants/../", collect, &seen, &err) == -EINVAL);
	al_error_clear(&err);

	/* The lock: shared beside shared, exclusive alone. */
	int l1 = -1, l2 = -1;
	CHILD_CHECK(st_objstore_lock(s, false, &l1, &err) == 0);
	CHILD_CHECK(st_objstore_lock(s, false, &l2, &err) == 0);
	snprintf(path, sizeof(path), "%s/.lock", root);
	int probe = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	CHILD_CHECK(probe >= 0);
	CHILD_CHECK(flock(probe, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK);
	close(l1);
	close(l2);
	CHILD_CHECK(st_objstore_lock(s, true, &l1, &err) == 0);
	CHILD_CHECK(flock(probe, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK);
	close(l1);
	CHILD_CHECK(flock(probe, LOCK_SH | LOCK_NB) == 0);
	close(probe);

	/* Symlinks planted in the store, to a directory outside holding a secret. */
	snprintf(outside, sizeof(outside), "%s/outside", tmpdir);
	CHILD_CHECK(mkdir(outside, 0700) == 0);
	snprintf(path, sizeof(path), "%s/secret", outside);
	CHILD_CHECK(make_file(path, "secret"));
	snprintf(path, sizeof(path), "%s/sub", outside);
	CHILD_CHECK(mkdir(path, 0700) == 0);
	snprintf(path, sizeof(path), "%s/sub/secret", outside);
	CHILD_CHECK(make_file(path, "secret"));
	CHILD_CHECK(st_obj_put(s, "tenants/s/index/x", "1", 1, &err) == 0);

	/* A directory on the way: tenants/s/packs -> outside. */
	snprintf(link, sizeof(link), "%s/tenants/s/packs", root);
	CHILD_CHECK(symlink(outside, link) == 0);
	CHILD_CHECK(get_refused(s, "tenants/s/packs/secret", &err));
	CHILD_CHECK(says_symlink(&err, "tenants/s/packs/secret"));
	al_error_clear(&err);
	CHILD_CHECK(get_range_refused(s, "tenants/s/packs/secret", &err));
	CHILD_CHECK(says_symlink(&err, "tenants/s/packs/secret"));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_exists(s, "tenants/s/packs/secret", &err) < 0);
	CHILD_CHECK(says_symlink(&err, "tenants/s/packs/secret"));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_put(s, "tenants/s/packs/new", "x", 1, &err) < 0);
	CHILD_CHECK(says_symlink(&err, "tenants/s/packs/new"));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_put(s, "tenants/s/packs/sub/new", "x", 1, &err) < 0);
	al_error_clear(&err);
	CHILD_CHECK(st_obj_del(s, "tenants/s/packs/secret", &err) < 0);
	CHILD_CHECK(says_symlink(&err, "tenants/s/packs/secret"));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_del(s, "tenants/s/packs/sub/secret", &err) < 0);
	al_error_clear(&err);
	memset(&seen, 0, sizeof(seen));
	CHILD_CHECK(st_obj_list(s, "tenants/s/packs/", collect, &seen, &err) < 0 && seen.n == 0);
	CHILD_CHECK(says_symlink(&err, "tenants/s/packs/"));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_list(s, "tenants/s/packs/sub/", collect, &seen, &err) < 0 &&
		    seen.n == 0);
	al_error_clear(&err);
	/* A walk of the tenant skips the link rather than entering it. */
	CHILD_CHECK(st_obj_list(s, "tenants/s/", collect, &seen, &err) == 0);
	CHILD_CHECK(seen.n == 1 && strcmp(seen.keys[0], "tenants/s/index/x") == 0);

	/* A deeper one: tenants/s/index/deep -> outside. */
	snprintf(link, sizeof(link), "%s/tenants/s/index/deep", root);
	CHILD_CHECK(symlink(outside, link) == 0);
	CHILD_CHECK(get_refused(s, "tenants/s/index/deep/sub/secret", &err));
	CHILD_CHECK(says_symlink(&err, "tenants/s/index/deep/sub/secret"));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_put(s, "tenants/s/index/deep/sub/new", "x", 1, &err) < 0);
	al_error_clear(&err);
	CHILD_CHECK(st_obj_del(s, "tenants/s/index/deep/sub/secret", &err) < 0);
	al_error_clear(&err);

	/* A dangling one: nothing is created where it points. */
	snprintf(link, sizeof(link), "%s/tenants/s/dangling", root);
	snprintf(path, sizeof(path), "%s/made", outside);
	CHILD_CHECK(symlink(path, link) == 0);
	CHILD_CHECK(st_obj_put(s, "tenants/s/dangling/x", "x", 1, &err) < 0);
	al_error_clear(&err);
	CHILD_CHECK(absent(path));

	/* The last component: tenants/s/index/evil -> outside/secret. */
	snprintf(link, sizeof(link), "%s/tenants/s/index/evil", root);
	snprintf(path, sizeof(path), "%s/secret", outside);
	CHILD_CHECK(symlink(path, link) == 0);
	CHILD_CHECK(get_refused(s, "tenants/s/index/evil", &err));
	CHILD_CHECK(says_symlink(&err, "tenants/s/index/evil"));
	al_error_clear(&err);
	CHILD_CHECK(get_range_refused(s, "tenants/s/index/evil", &err));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_exists(s, "tenants/s/index/evil", &err) < 0);
	CHILD_CHECK(says_symlink(&err, "tenants/s/index/evil"));
	al_error_clear(&err);
	memset(&seen, 0, sizeof(seen));
	CHILD_CHECK(st_obj_list(s, "tenants/s/index/", collect, &seen, &err) == 0);
	CHILD_CHECK(seen.n == 1 && strcmp(seen.keys[0], "tenants/s/index/x") == 0);
	/* put replaces the link itself (rename); del removes a link, not its target. */
	CHILD_CHECK(st_obj_put(s, "tenants/s/index/evil", "mine", 4, &err) == 0);
	CHILD_CHECK(obj_is(s, "tenants/s/index/evil", "mine", &err));
	CHILD_CHECK(unlink(link) == 0 && symlink(path, link) == 0);
	CHILD_CHECK(st_obj_del(s, "tenants/s/index/evil", &err) == 0);
	CHILD_CHECK(absent(link));

	/* A symlinked tenant directory: tenants/v -> outside. */
	snprintf(link, sizeof(link), "%s/tenants/v", root);
	CHILD_CHECK(symlink(outside, link) == 0);
	CHILD_CHECK(get_refused(s, "tenants/v/secret", &err));
	al_error_clear(&err);
	CHILD_CHECK(get_range_refused(s, "tenants/v/sub/secret", &err));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_exists(s, "tenants/v/secret", &err) < 0);
	al_error_clear(&err);
	CHILD_CHECK(st_obj_put(s, "tenants/v/secret", "x", 1, &err) < 0);
	al_error_clear(&err);
	CHILD_CHECK(st_obj_put(s, "tenants/v/packs/x", "x", 1, &err) < 0);
	al_error_clear(&err);
	CHILD_CHECK(st_obj_del(s, "tenants/v/secret", &err) < 0);
	al_error_clear(&err);
	memset(&seen, 0, sizeof(seen));
	CHILD_CHECK(st_obj_list(s, "tenants/v/", collect, &seen, &err) < 0 && seen.n == 0);
	al_error_clear(&err);
	st_objstore_close(s);

	/* A second store whose "tenants" and ".lock" are links out. */
	char root2[160];
	snprintf(root2, sizeof(root2), "%s/store2", tmpdir);
	CHILD_CHECK(mkdir(root2, 0700) == 0);
	snprintf(link, sizeof(link), "%s/tenants", root2);
	CHILD_CHECK(symlink(outside, link) == 0);
	snprintf(link, sizeof(link), "%s/.lock", root2);
	snprintf(path, sizeof(path), "%s/lock-target", outside);
	CHILD_CHECK(symlink(path, link) == 0);
	CHILD_CHECK(st_objstore_open_dir(root2, &s, &err) == 0);
	CHILD_CHECK(get_refused(s, "tenants/sub/secret", &err));
	al_error_clear(&err);
	CHILD_CHECK(st_obj_exists(s, "tenants/sub/secret", &err) < 0);
	al_error_clear(&err);
	CHILD_CHECK(st_obj_put(s, "tenants/t/x", "x", 1, &err) < 0);
	al_error_clear(&err);
	CHILD_CHECK(st_obj_del(s, "tenants/sub/secret", &err) < 0);
	al_error_clear(&err);
	memset(&seen, 0, sizeof(seen));
	CHILD_CHECK(st_obj_list(s, "tenants/", collect, &seen, &err) < 0 && seen.n == 0);
	al_error_clear(&err);
	l1 = -1;
	CHILD_CHECK(st_objstore_lock(s, true, &l1, &err) < 0 && l1 == -1);
	al_error_clear(&err);
	st_objstore_close(s);

	/* Nothing outside was read, written, created or removed. */
	snprintf(path, sizeof(path), "%s/secret", outside);
	CHILD_CHECK(file_is(path, "secret"));
	snprintf(path, sizeof(path), "%s/sub/secret", outside);
	CHILD_CHECK(file_is(path, "secret"));
	CHILD_CHECK(count_entries(outside) == 2); /* secret, sub */
	snprintf(path, sizeof(path), "%s/sub", outside);
	CHILD_CHECK(count_entries(path) == 1);
}

static void test_without_openat2(void **state)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		child_report = p[1];
		struct al_error err = { 0 };
		CHILD_CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
		scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
		CHILD_CHECK(ctx != NULL);
		CHILD_CHECK(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0) ==
			    0);
		CHILD_CHECK(seccomp_load(ctx) == 0);
		seccomp_release(ctx);
		fallback_ops();
		_exit(0);
	}
	close(p[1]);
	char msg[768] = { 0 };
	size_t got = 0;
	for (;;) {
		ssize_t n = read(p[0], msg + got, sizeof(msg) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(p[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0)
		assert_int_equal(errno, EINTR);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("without openat2 (status 0x%x): %s", (unsigned)status,
			 got ? msg : "the child reported nothing");
}

static void test_root_checks(void **state)
{
	struct st_objstore *s = NULL;
	struct al_error err = { 0 };
	char path[256];

	snprintf(path, sizeof(path), "%s/open", tmpdir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(chmod(path, 0777), 0);
	assert_int_equal(st_objstore_open_dir(path, &s, &err), -EPERM);
	assert_null(s);
	if (!strstr(err.msg, path) || !strstr(err.msg, "writable"))
		fail_msg("error '%s' does not name the root and the reason", err.msg);
	assert_int_equal(chmod(path, 0770), 0);
	al_error_clear(&err);
	assert_int_equal(st_objstore_open_dir(path, &s, &err), -EPERM);
	assert_int_equal(chmod(path, 0755), 0);
	al_error_clear(&err);
	assert_int_equal(st_objstore_open_dir(path, &s, &err), 0);
	st_objstore_close(s);
	s = NULL;

	/* Not a directory; parent missing; not ours (when a root-owned one exists). */
	snprintf(path, sizeof(path), "%s/file", tmpdir);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	al_error_clear(&err);
	assert_int_equal(st_objstore_open_dir(path, &s, &err), -ENOTDIR);
	assert_non_null(strstr(err.msg, path));
	snprintf(path, sizeof(path), "%s/no/such", tmpdir);
	al_error_clear(&err);
	assert_int_equal(st_objstore_open_dir(path, &s, &err), -ENOENT);
	if (geteuid() != 0) {
		al_error_clear(&err);
		assert_int_equal(st_objstore_open_dir("/", &s, &err), -EPERM);
		assert_non_null(strstr(err.msg, "owned by"));
	}
	assert_null(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keys),
		cmocka_unit_test_setup_teardown(test_put_get, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exists_del_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlinks_not_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_root_checks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_without_openat2, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

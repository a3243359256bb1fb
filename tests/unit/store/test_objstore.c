/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	if (fgets(line, sizeof(line), f))
		n = (int)strtol(line, NULL, 10);
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

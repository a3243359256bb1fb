/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention and mark-and-sweep GC (src/store/gc.c) on small repositories
 * built in a temp dir. Every log entry is renamed to a chosen creation time
 * (set_log_time) and GC is given its own clock (st_gc_opts.now), so nothing
 * depends on when the test runs or how fast.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "store/cas.h"
#include "store/checkpoint.h"
#include "store/gc.h"

#define TENANT "t"
#define PATH_LEN 256
#define T0 1700000000ll /* 2023-11-14: day 0 of every test's history */
#define DAY 86400ll
#define NS 1000000000ll

static char tmpdir[64];
static char store_dir[128];
static const uint8_t hmac_key[ST_HMAC_KEY_MIN] = "0123456789abcdef0123456789abcdef";
static int restore_count;

/* ---- fixture ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path);
	return unlink(path);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_gc.XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(store_dir, sizeof(store_dir), "%s/store", tmpdir);
	restore_count = 0;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static struct st_repo *repo_open(void)
{
	struct st_repo_opts o = { .store_dir = store_dir,
				  .tenant = TENANT,
				  .key = hmac_key,
				  .keylen = sizeof(hmac_key) };
	struct st_repo *r = NULL;
	struct al_error err = { 0 };
	if (st_repo_open(&o, &r, &err) < 0)
		fail_msg("open the repository: %s", al_error_message(&err));
	return r;
}

/* GC leaves the repository's chunk index stale: tests reopen after it. */
static struct st_repo *repo_reopen(struct st_repo *r)
{
	st_repo_close(r);
	return repo_open();
}

/* ---- workspaces ---- */

/* out = a/b; the length checked (it also keeps -Wformat-truncation quiet). */
static void join(char out[PATH_LEN], const char *a, const char *b)
{
	int n = snprintf(out, PATH_LEN, "%s/%s", a, b);
	if (n < 0 || n >= PATH_LEN)
		fail_msg("path too long: %s/%s", a, b);
}

/* Deterministic bytes no other seed repeats (xorshift64). */
static void fill(uint8_t *buf, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (uint8_t)(x >> 24);
	}
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		fail_msg("create %s: %s", path, al_strerror(errno));
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, 0644), 0);
	assert_int_equal(close(fd), 0);
}

/* A file of size bytes from seed (one chunk: below ST_CDC_MIN). */
static void make_file(const char *dir, const char *name, uint64_t seed, size_t size)
{
	char path[PATH_LEN];
	join(path, dir, name);
	uint8_t *data = malloc(size ? size : 1);
	assert_non_null(data);
	fill(data, size, seed);
	write_file(path, data, size);
	free(data);
}

static void make_text(const char *dir, const char *name, const char *text)
{
	char path[PATH_LEN];
	join(path, dir, name);
	write_file(path, text, strlen(text));
}

static void make_dir(const char *dir, const char *name, char out[PATH_LEN])
{
	char path[PATH_LEN];
	if (!out)
		out = path;
	if (name)
		join(out, dir, name);
	else
		snprintf(out, PATH_LEN, "%s", dir);
	if (mkdir(out, 0755) < 0)
		fail_msg("mkdir %s: %s", out, al_strerror(errno));
	assert_int_equal(chmod(out, 0755), 0);
}

/*
 * Workspace <tmpdir>/<name> of generation gen: "shared" (the same bytes in
 * every workspace), "own" and "dir/note" (only in this one), a symlink.
 */
static void make_ws(const char *name, uint64_t gen, char out[PATH_LEN])
{
	char path[PATH_LEN];
	join(path, tmpdir, name);
	make_dir(path, NULL, out);
	make_file(out, "shared", 1, 20000);
	make_file(out, "own", 1000 + gen, 30000);
	char sub[PATH_LEN];
	make_dir(out, "dir", sub);
	char note[64];
	snprintf(note, sizeof(note), "note of generation %" PRIu64 "\n", gen);
	make_text(sub, "note", note);
	join(path, out, "link");
	assert_int_equal(symlink("dir/note", path), 0);
}

/* ---- the store, as objects ---- */

struct names {
	char (*v)[ST_KEY_MAX + 1];
	size_t n, cap;
};

static int collect_name(const char *key, void *ud)
{
	struct names *ns = ud;
	if (ns->n == ns->cap) {
		ns->cap = ns->cap ? 2 * ns->cap : 16;
		ns->v = realloc(ns->v, ns->cap * sizeof(*ns->v));
		assert_non_null(ns->v);
	}
	snprintf(ns->v[ns->n++], ST_KEY_MAX + 1, "%s", key);
	return 0;
}

/* Keys below tenants/t/<what>/. */
static struct names list_keys(struct st_repo *r, const char *what)
{
	char prefix[ST_KEY_MAX + 1];
	snprintf(prefix, sizeof(prefix), "tenants/" TENANT "/%s/", what);
	struct names ns = { 0 };
	struct al_error err = { 0 };
	if (st_obj_list(st_repo_objstore(r), prefix, collect_name, &ns, &err) < 0)
		fail_msg("list %s: %s", prefix, al_error_message(&err));
	return ns;
}

static bool names_has(const struct names *ns, const char *key)
{
	for (size_t i = 0; i < ns->n; i++)
		if (strcmp(ns->v[i], key) == 0)
			return true;
	return false;
}

static size_t count_keys(struct st_repo *r, const char *what)
{
	struct names ns = list_keys(r, what);
	free(ns.v);
	return ns.n;
}

/* The one pack in the store now that was not in before (NULL: none). */
static void new_pack(struct st_repo *r, const struct names *before, char out[ST_ID_HEX + 1])
{
	struct names now = list_keys(r, "packs");
	out[0] = '\0';
	for (size_t i = 0; i < now.n; i++) {
		if (names_has(before, now.v[i]))
			continue;
		assert_true(out[0] == '\0');
		const char *slash = strrchr(now.v[i], '/');
		snprintf(out, ST_ID_HEX + 1, "%s", slash + 1);
	}
	free(now.v);
}

static bool obj_exists(struct st_repo *r, const char *what, const char *name)
{
	char key[ST_KEY_MAX + 1];
	snprintf(key, sizeof(key), "tenants/" TENANT "/%s/%s", what, name);
	struct al_error err = { 0 };
	int e = st_obj_exists(st_repo_objstore(r), key, &err);
	if (e < 0)
		fail_msg("exists %s: %s", key, al_error_message(&err));
	return e == 1;
}

static void obj_path(const char *what, const char *name, char out[PATH_LEN])
{
	snprintf(out, PATH_LEN, "%s/tenants/" TENANT "/%s/%s", store_dir, what, name);
}

static uint64_t obj_size(const char *what, const char *name)
{
	char path[PATH_LEN];
	obj_path(what, name, path);
	struct stat st;
	if (stat(path, &st) < 0)
		fail_msg("stat %s: %s", path, al_strerror(errno));
	return (uint64_t)st.st_size;
}

static void obj_put(struct st_repo *r, const char *what, const char *name, const void *data,
		    size_t len)
{
	char key[ST_KEY_MAX + 1];
	snprintf(key, sizeof(key), "tenants/" TENANT "/%s/%s", what, name);
	struct al_error err = { 0 };
	if (st_obj_put(st_repo_objstore(r), key, data, len, &err) < 0)
		fail_msg("put %s: %s", key, al_error_message(&err));
}

/* Every file of the store with its size and an FNV-1a of its bytes, sorted:
 * equal listings mean nothing was deleted, added or rewritten. */
static struct {
	char **lines;
	size_t n, cap;
} walk_out;

static int listing_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag != FTW_F)
		return 0;
	uint64_t h = 0xcbf29ce484222325ull;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	uint8_t buf[8192];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n; i++)
			h = (h ^ buf[i]) * 0x100000001b3ull;
	close(fd);
	if (walk_out.n == walk_out.cap) {
		walk_out.cap = walk_out.cap ? 2 * walk_out.cap : 64;
		walk_out.lines = realloc(walk_out.lines, walk_out.cap * sizeof(char *));
		if (!walk_out.lines)
			return -1;
	}
	char line[PATH_LEN + 64];
	snprintf(line, sizeof(line), "%s %lld %016" PRIx64, path + strlen(store_dir),
		 (long long)st->st_size, h);
	walk_out.lines[walk_out.n] = strdup(line);
	return walk_out.lines[walk_out.n++] ? 0 : -1;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Heap text; the lock file aside (GC takes it). */
static char *store_listing(void)
{
	walk_out.n = 0;
	assert_int_equal(nftw(store_dir, listing_entry, 16, FTW_PHYS), 0);
	qsort(walk_out.lines, walk_out.n, sizeof(char *), str_cmp);
	size_t len = 1;
	for (size_t i = 0; i < walk_out.n; i++)
		len += strlen(walk_out.lines[i]) + 1;
	char *out = malloc(len);
	assert_non_null(out);
	out[0] = '\0';
	size_t at = 0;
	for (size_t i = 0; i < walk_out.n; i++) {
		if (strncmp(walk_out.lines[i], "/.lock ", 7) != 0)
			at += (size_t)snprintf(out + at, len - at, "%s\n", walk_out.lines[i]);
		free(walk_out.lines[i]);
	}
	free(walk_out.lines);
	walk_out.lines = NULL;
	walk_out.cap = walk_out.n = 0;
	return out;
}

/* ---- checkpoints ---- */

static void snap(struct st_repo *r, const char *ws, const char *session, char id[ST_ID_HEX + 1])
{
	struct st_snapshot_opts o = { .workspace = ws, .session = session };
	struct st_snapshot_result res;
	struct al_error err = { 0 };
	if (st_snapshot(r, &o, &res, &err) < 0)
		fail_msg("snapshot %s: %s", ws, al_error_message(&err));
	snprintf(id, ST_ID_HEX + 1, "%s", res.id);
}

/* Renames the log entry of checkpoint id to creation time t (ns). */
static void set_log_time(struct st_repo *r, const char *session, const char *id, int64_t t)
{
	char what[ST_KEY_MAX + 1];
	snprintf(what, sizeof(what), "sessions/%s/log", session);
	struct names ns = list_keys(r, what);
	struct al_error err = { 0 };
	size_t found = 0;
	for (size_t i = 0; i < ns.n; i++) {
		size_t len = strlen(ns.v[i]);
		if (len < ST_ID_HEX || strcmp(ns.v[i] + len - ST_ID_HEX, id) != 0)
			continue;
		found++;
		if (st_obj_del(st_repo_objstore(r), ns.v[i], &err) < 0)
			fail_msg("delete %s: %s", ns.v[i], al_error_message(&err));
	}
	free(ns.v);
	assert_int_equal(found, 1);
	char name[ST_KEY_MAX + 1];
	snprintf(name, sizeof(name), "log/%020" PRId64 "-%s", t, id);
	char sess[ST_KEY_MAX + 1];
	snprintf(sess, sizeof(sess), "sessions/%s", session);
	obj_put(r, sess, name, "", 0);
}

/* A snapshot of ws whose log entry says it was made on day (+ extra ns). */
static void snap_at(struct st_repo *r, const char *ws, const char *session, int64_t day,
		    int64_t extra_ns, char id[ST_ID_HEX + 1])
{
	snap(r, ws, session, id);
	set_log_time(r, session, id, (T0 + day * DAY) * NS + extra_ns);
}

static void latest_is(struct st_repo *r, const char *session, const char *want)
{
	char got[ST_ID_HEX + 1];
	struct al_error err = { 0 };
	if (st_session_latest(r, session, got, &err) < 0)
		fail_msg("latest of %s: %s", session, al_error_message(&err));
	assert_string_equal(got, want);
}

/* ---- trees ---- */

static void read_whole(const char *path, uint8_t **ret, size_t *len)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	uint8_t *data = malloc((size_t)st.st_size + 1);
	assert_non_null(data);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
		assert_true(n > 0);
		got += (size_t)n;
	}
	close(fd);
	*ret = data;
	*len = got;
}

static size_t count_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		fail_msg("opendir %s: %s", dir, al_strerror(errno));
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n;
}

/* got has exactly want's entries: types, permission bits, bytes, targets. */
static void assert_same_tree(const char *want, const char *got)
{
	DIR *d = opendir(want);
	if (!d)
		fail_msg("opendir %s: %s", want, al_strerror(errno));
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char a[PATH_LEN], b[PATH_LEN];
		join(a, want, de->d_name);
		join(b, got, de->d_name);
		struct stat sa, sb;
		assert_int_equal(lstat(a, &sa), 0);
		if (lstat(b, &sb) < 0)
			fail_msg("%s is missing (want %s)", b, a);
		if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT))
			fail_msg("%s: type 0%o, want 0%o", b, sb.st_mode & S_IFMT,
				 sa.st_mode & S_IFMT);
		if (S_ISLNK(sa.st_mode)) {
			char ta[PATH_LEN] = { 0 }, tb[PATH_LEN] = { 0 };
			assert_true(readlink(a, ta, sizeof(ta) - 1) > 0);
			assert_true(readlink(b, tb, sizeof(tb) - 1) > 0);
			assert_string_equal(ta, tb);
			continue;
		}
		if ((sa.st_mode & 07777) != (sb.st_mode & 07777))
			fail_msg("%s: mode 0%o, want 0%o", b, sb.st_mode & 07777,
				 sa.st_mode & 07777);
		if (S_ISDIR(sa.st_mode)) {
			assert_same_tree(a, b);
		} else {
			uint8_t *da, *db;
			size_t la, lb;
			read_whole(a, &da, &la);
			read_whole(b, &db, &lb);
			if (la != lb || memcmp(da, db, la) != 0)
				fail_msg("%s differs from %s", b, a);
			free(da);
			free(db);
		}
	}
	closedir(d);
	if (count_dir(want) != count_dir(got))
		fail_msg("%s has %zu entries, want %zu (%s)", got, count_dir(got), count_dir(want),
			 want);
}

static void restores_as(struct st_repo *r, const char *id, const char *want)
{
	char out[PATH_LEN];
	snprintf(out, sizeof(out), "%s/restore-%d", tmpdir, restore_count++);
	struct al_error err = { 0 };
	if (st_restore(r, id, out, NULL, &err) < 0)
		fail_msg("restore %.12s: %s", id, al_error_message(&err));
	assert_same_tree(want, out);
}

static void is_gone(struct st_repo *r, const char *id)
{
	struct st_manifest *m = NULL;
	struct al_error err = { 0 };
	assert_int_equal(st_manifest_load(r, id, NULL, &m, &err), -ENOENT);
	assert_null(m);
	assert_false(obj_exists(r, "manifests", id));
	char out[PATH_LEN];
	snprintf(out, sizeof(out), "%s/restore-%d", tmpdir, restore_count++);
	al_error_clear(&err);
	assert_int_equal(st_restore(r, id, out, NULL, &err), -ENOENT);
	assert_non_null(strstr(err.msg, id));
}

/* ---- GC ---- */

static struct st_gc_result gc_ok(struct st_repo *r, struct st_gc_opts o)
{
	struct st_gc_result res;
	memset(&res, 0xa5, sizeof(res));
	struct al_error err = { 0 };
	if (st_gc(r, &o, &res, &err) < 0)
		fail_msg("gc: %s", al_error_message(&err));
	return res;
}

#define EXPECT(res, field, want)                                                              \
	do {                                                                                  \
		if ((res).field != (uint64_t)(want))                                          \
			fail_msg("gc: %s is %" PRIu64 ", want %" PRIu64, #field, (res).field, \
				 (uint64_t)(want));                                           \
	} while (0)

static void expect_same_result(const struct st_gc_result *a, const struct st_gc_result *b)
{
	EXPECT(*a, sessions, b->sessions);
	EXPECT(*a, checkpoints_kept, b->checkpoints_kept);
	EXPECT(*a, checkpoints_deleted, b->checkpoints_deleted);
	EXPECT(*a, manifests_kept, b->manifests_kept);
	EXPECT(*a, manifests_deleted, b->manifests_deleted);
	EXPECT(*a, chunks_marked, b->chunks_marked);
	EXPECT(*a, packs_kept, b->packs_kept);
	EXPECT(*a, packs_partial, b->packs_partial);
	EXPECT(*a, packs_deleted, b->packs_deleted);
	EXPECT(*a, packs_orphan, b->packs_orphan);
	EXPECT(*a, temp_deleted, b->temp_deleted);
	EXPECT(*a, bytes_freed, b->bytes_freed);
}

static void expect_nothing_deleted(const struct st_gc_result *res)
{
	EXPECT(*res, checkpoints_deleted, 0);
	EXPECT(*res, manifests_deleted, 0);
	EXPECT(*res, packs_deleted, 0);
	EXPECT(*res, packs_orphan, 0);
	EXPECT(*res, bytes_freed, 0);
}

/* A sealed pack of the given chunks that no checkpoint references. */
static void stray_pack(struct st_repo *r, const uint64_t *seeds, size_t n, struct st_id *ids,
		       char pack[ST_ID_HEX + 1])
{
	struct names before = list_keys(r, "packs");
	struct st_cas *cas = st_repo_cas(r);
	struct al_error err = { 0 };
	for (size_t i = 0; i < n; i++) {
		uint8_t data[5000];
		fill(data, sizeof(data), seeds[i]);
		bool fresh = false;
		if (st_cas_put(cas, data, sizeof(data), &ids[i], &fresh, &err) < 0)
			fail_msg("cas put: %s", al_error_message(&err));
		assert_true(fresh);
	}
	if (st_cas_flush(cas, &err) < 0)
		fail_msg("cas flush: %s", al_error_message(&err));
	new_pack(r, &before, pack);
	assert_true(pack[0] != '\0');
	free(before.v);
}

static bool chunk_readable(struct st_repo *r, const struct st_id *id)
{
	void *data = NULL;
	size_t len = 0;
	struct al_error err = { 0 };
	int rc = st_cas_get(st_repo_cas(r), id, &data, &len, &err);
	free(data);
	return rc == 0;
}

/* ---- tests ---- */

/* keep_last per session; the chunk all share stays with the first pack. */
static void test_keep_last(void **state)
{
	(void)state;
	struct st_repo *r = repo_open();
	char ws[4][PATH_LEN], wsu[PATH_LEN], id[4][ST_ID_HEX + 1], idu[ST_ID_HEX + 1];
	char pack[4][ST_ID_HEX + 1], packu[ST_ID_HEX + 1];
	char name[32];
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		make_ws(name, (uint64_t)i, ws[i]);
		struct names before = list_keys(r, "packs");
		snap_at(r, ws[i], "s", i, 0, id[i]);
		new_pack(r, &before, pack[i]);
		free(before.v);
		assert_true(pack[i][0] != '\0');
		if (i == 0) {
			make_ws("u0", 10, wsu);
			before = list_keys(r, "packs");
			snap_at(r, wsu, "u", 0, 0, idu);
			new_pack(r, &before, packu);
			free(before.v);
		}
	}
	int64_t now = T0 + 10 * DAY;

	/* No limit: nothing goes, whatever the clock. */
	char *before = store_listing();
	struct st_gc_result res = gc_ok(r, (struct st_gc_opts){ .now = now });
	EXPECT(res, sessions, 2);
	EXPECT(res, checkpoints_kept, 5);
	EXPECT(res, manifests_kept, 5);
	EXPECT(res, packs_kept, 5);
	EXPECT(res, packs_partial, 0);
	expect_nothing_deleted(&res);
	char *after = store_listing();
	assert_string_equal(before, after);
	free(before);
	free(after);

	uint64_t freed = obj_size("packs", pack[1]) + obj_size("index", pack[1]);
	res = gc_ok(r, (struct st_gc_opts){ .keep_last = 2, .now = now });
	EXPECT(res, sessions, 2);
	EXPECT(res, checkpoints_deleted, 2);
	EXPECT(res, checkpoints_kept, 3);
	EXPECT(res, manifests_deleted, 2);
	EXPECT(res, manifests_kept, 3);
	/* shared + (own, note) of s2, s3 and u0. */
	EXPECT(res, chunks_marked, 7);
	/* s0's pack holds "shared", which every kept checkpoint uses: kept,
	 * partly; s1's is wholly unreferenced: deleted, index and all. */
	EXPECT(res, packs_kept, 4);
	EXPECT(res, packs_partial, 1);
	EXPECT(res, packs_deleted, 1);
	EXPECT(res, packs_orphan, 0);
	EXPECT(res, bytes_freed, freed);
	assert_true(obj_exists(r, "packs", pack[0]) && obj_exists(r, "index", pack[0]));
	assert_false(obj_exists(r, "packs", pack[1]) || obj_exists(r, "index", pack[1]));
	assert_true(obj_exists(r, "packs", pack[2]) && obj_exists(r, "packs", pack[3]));
	assert_true(obj_exists(r, "packs", packu));
	assert_int_equal(count_keys(r, "sessions/s/log"), 2);
	assert_int_equal(count_keys(r, "sessions/u/log"), 1);
	assert_int_equal(count_keys(r, "manifests"), 3);
	latest_is(r, "s", id[3]);
	latest_is(r, "u", idu);

	r = repo_reopen(r);
	is_gone(r, id[0]);
	is_gone(r, id[1]);
	restores_as(r, id[2], ws[2]);
	restores_as(r, id[3], ws[3]);
	restores_as(r, idu, wsu);

	/* Again: nothing more to do. */
	res = gc_ok(r, (struct st_gc_opts){ .keep_last = 2, .now = now });
	EXPECT(res, checkpoints_kept, 3);
	expect_nothing_deleted(&res);

	/* A later snapshot over the collected store is whole. */
	char ws4[PATH_LEN], id4[ST_ID_HEX + 1];
	make_ws("s4", 4, ws4);
	snap(r, ws4, "s", id4);
	r = repo_reopen(r);
	restores_as(r, id4, ws4);
	st_repo_close(r);
}

/* keep_days against the given clock, to the nanosecond; either limit drops. */
static void test_keep_days(void **state)
{
	(void)state;
	struct st_repo *r = repo_open();
	char ws[4][PATH_LEN], id[4][ST_ID_HEX + 1], wsw[4][PATH_LEN], idw[4][ST_ID_HEX + 1];
	/* Ten days before now: one a nanosecond older, one exactly. */
	static const int64_t day[4] = { 0, 20, 20, 25 };
	static const int64_t extra[4] = { 0, -1, 0, 0 };
	static const int64_t wday[4] = { 0, 10, 22, 29 };
	char name[32];
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		make_ws(name, (uint64_t)i, ws[i]);
		snap_at(r, ws[i], "s", day[i], extra[i], id[i]);
		snprintf(name, sizeof(name), "w%d", i);
		make_ws(name, 100 + (uint64_t)i, wsw[i]);
		snap_at(r, wsw[i], "w", wday[i], 0, idw[i]);
	}
	int64_t now = T0 + 30 * DAY;

	/* 31 days: everything is younger. */
	struct st_gc_result res = gc_ok(r, (struct st_gc_opts){ .keep_days = 31, .now = now });
	EXPECT(res, checkpoints_kept, 8);
	expect_nothing_deleted(&res);

	/* s: 30 days and 10 days + 1 ns go, exactly 10 days stays.
	 * w: keep_last 3 drops w0, keep_days 10 w0 and w1 (20 days). */
	res = gc_ok(r, (struct st_gc_opts){ .keep_last = 3, .keep_days = 10, .now = now });
	EXPECT(res, checkpoints_deleted, 4);
	EXPECT(res, checkpoints_kept, 4);
	EXPECT(res, manifests_deleted, 4);
	EXPECT(res, manifests_kept, 4);
	r = repo_reopen(r);
	is_gone(r, id[0]);
	is_gone(r, id[1]);
	is_gone(r, idw[0]);
	is_gone(r, idw[1]);
	restores_as(r, id[2], ws[2]);
	restores_as(r, id[3], ws[3]);
	restores_as(r, idw[2], wsw[2]);
	restores_as(r, idw[3], wsw[3]);

	/* The clock moves on a day: s2 is now too old; keep_last does not
	 * save it (either limit drops). */
	res = gc_ok(r, (struct st_gc_opts){ .keep_last = 5, .keep_days = 10, .now = now + DAY });
	EXPECT(res, checkpoints_deleted, 1);
	EXPECT(res, checkpoints_kept, 3);
	r = repo_reopen(r);
	is_gone(r, id[2]);
	restores_as(r, id[3], ws[3]);

	/* now 0 is the clock: a checkpoint dated 1970 goes, one dated 2100 stays. */
	set_log_time(r, "w", idw[2], 86400 * NS);
	set_log_time(r, "w", idw[3], 4102444800ll * NS);
	res = gc_ok(r, (struct st_gc_opts){ .keep_days = 1 });
	EXPECT(res, checkpoints_deleted, 1);
	r = repo_reopen(r);
	is_gone(r, idw[2]);
	restores_as(r, idw[3], wsw[3]);
	st_repo_close(r);
}

/* Neither limit drops a session's latest, wherever its log entry sorts. */
static void test_latest_never_dropped(void **state)
{
	(void)state;
	struct st_repo *r = repo_open();
	char ws[3][PATH_LEN], id[3][ST_ID_HEX + 1], wsc[2][PATH_LEN], idc[2][ST_ID_HEX + 1];
	char name[32];
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		make_ws(name, (uint64_t)i, ws[i]);
		snap_at(r, ws[i], "s", i, 0, id[i]);
	}
	for (int i = 0; i < 2; i++) {
		snprintf(name, sizeof(name), "c%d", i);
		make_ws(name, 10 + (uint64_t)i, wsc[i]);
		snap_at(r, wsc[i], "c", i, 0, idc[i]);
	}
	/* A crash between c1's log entry and its latest: latest still says c0. */
	char line[ST_ID_HEX + 2];
	snprintf(line, sizeof(line), "%s\n", idc[0]);
	obj_put(r, "sessions/c", "latest", line, ST_ID_HEX + 1);
	int64_t now = T0 + 100 * DAY;

	/* keep_last 1: s keeps s2; c keeps c1 (the last entry) and c0 (latest). */
	struct st_gc_result res = gc_ok(r, (struct st_gc_opts){ .keep_last = 1, .now = now });
	EXPECT(res, checkpoints_deleted, 2);
	EXPECT(res, checkpoints_kept, 3);
	EXPECT(res, manifests_deleted, 2);
	assert_true(obj_exists(r, "manifests", idc[0]));
	assert_true(obj_exists(r, "manifests", idc[1]));
	assert_int_equal(count_keys(r, "sessions/c/log"), 2);

	/* keep_days 1, everything 98 days old or more: only the latests stay. */
	res = gc_ok(r, (struct st_gc_opts){ .keep_days = 1, .now = now });
	EXPECT(res, checkpoints_deleted, 1); /* c1 */
	EXPECT(res, checkpoints_kept, 2);
	EXPECT(res, manifests_kept, 2);
	r = repo_reopen(r);
	is_gone(r, id[0]);
	is_gone(r, id[1]);
	is_gone(r, idc[1]);
	latest_is(r, "s", id[2]);
	latest_is(r, "c", idc[0]);
	restores_as(r, id[2], ws[2]);
	restores_as(r, idc[0], wsc[0]);

	/* Both limits at once, twice over: still there. */
	res = gc_ok(r, (struct st_gc_opts){ .keep_last = 1, .keep_days = 1, .now = now * 2 });
	EXPECT(res, checkpoints_kept, 2);
	expect_nothing_deleted(&res);
	st_repo_close(r);
}

/* A dry run deletes nothing and reports what the real run then does. */
static void test_dry_run(void **state)
{
	(void)state;
	struct st_repo *r = repo_open();
	char ws[3][PATH_LEN], id[3][ST_ID_HEX + 1], name[32];
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		make_ws(name, (uint64_t)i, ws[i]);
		snap_at(r, ws[i], "s", i, 0, id[i]);
	}
	/* An unreferenced pack and one without an index, to be swept too. */
	static const uint64_t seeds[2] = { 501, 502 };
	struct st_id ids[2];
	char stray[ST_ID_HEX + 1];
	stray_pack(r, seeds, 2, ids, stray);
	uint8_t junk[3000];
	fill(junk, sizeof(junk), 77);
	char orphan[ST_ID_HEX + 1];
	struct st_id oid;
	st_sha256(junk, sizeof(junk), &oid);
	st_id_hex(&oid, orphan);
	obj_put(r, "packs", orphan, junk, sizeof(junk));
	struct st_gc_opts o = { .keep_last = 1, .now = T0 + 10 * DAY, .dry_run = true };

	char *before = store_listing();
	struct st_gc_result dry = gc_ok(r, o);
	char *after = store_listing();
	assert_string_equal(before, after);
	free(after);
	EXPECT(dry, checkpoints_deleted, 2);
	EXPECT(dry, manifests_deleted, 2);
	EXPECT(dry, packs_deleted, 2); /* s1's and the stray one */
	EXPECT(dry, packs_orphan, 1);
	/* Twice: the same (nothing happened in between). */
	struct st_gc_result dry2 = gc_ok(r, o);
	expect_same_result(&dry2, &dry);

	o.dry_run = false;
	struct st_gc_result real = gc_ok(r, o);
	expect_same_result(&real, &dry);
	after = store_listing();
	assert_string_not_equal(before, after);
	free(before);
	free(after);
	assert_false(obj_exists(r, "packs", stray) || obj_exists(r, "packs", orphan));
	r = repo_reopen(r);
	is_gone(r, id[0]);
	is_gone(r, id[1]);
	restores_as(r, id[2], ws[2]);
	st_repo_close(r);
}

/*
 * Chunks placed by hand (st_repo_cas, st_commit): a pack is kept, whole,
 * while any chunk of it is referenced by a kept manifest, whichever
 * checkpoint stored it; a pack no kept manifest references goes.
 */
static void test_sweep_by_reference(void **state)
{
	(void)state;
	struct st_repo *r = repo_open();
	/* p1 {x, y}, p2 {z}, p3 {w}, p4 {v}. */
	static const uint64_t s1[2] = { 1, 2 }, s2[1] = { 3 }, s3[1] = { 4 }, s4[1] = { 5 };
	struct st_id x[2], z, w, v;
	char p1[ST_ID_HEX + 1], p2[ST_ID_HEX + 1], p3[ST_ID_HEX + 1], p4[ST_ID_HEX + 1];
	int lock = -1;
	struct al_error err = { 0 };
	assert_int_equal(st_repo_lock_writer(r, &lock, &err), 0);
	stray_pack(r, s1, 2, x, p1);
	stray_pack(r, s2, 1, &z, p2);
	stray_pack(r, s3, 1, &w, p3);
	stray_pack(r, s4, 1, &v, p4);
	close(lock);

	/* a (old): "x" = x[0], "z" = z. b (latest): "x" = x[0], "w" = w. */
	char ida[ST_ID_HEX + 1], idb[ST_ID_HEX + 1];
	struct st_entry ea[2] = {
		{ .type = ST_FILE,
		  .path = (char *)"z",
		  .mode = 0644,
		  .size = 5000,
		  .chunks = &z,
		  .n_chunks = 1 },
		{ .type = ST_FILE,
		  .path = (char *)"x",
		  .mode = 0600,
		  .size = 5000,
		  .chunks = &x[0],
		  .n_chunks = 1 },
	};
	if (st_commit(r, "s", ea, 2, ida, &err) < 0)
		fail_msg("commit: %s", al_error_message(&err));
	set_log_time(r, "s", ida, T0 * NS);
	struct st_entry eb[2] = {
		{ .type = ST_FILE,
		  .path = (char *)"x",
		  .mode = 0600,
		  .size = 5000,
		  .chunks = &x[0],
		  .n_chunks = 1 },
		{ .type = ST_FILE,
		  .path = (char *)"w",
		  .mode = 0644,
		  .size = 5000,
		  .chunks = &w,
		  .n_chunks = 1 },
	};
	if (st_commit(r, "s", eb, 2, idb, &err) < 0)
		fail_msg("commit: %s", al_error_message(&err));
	set_log_time(r, "s", idb, (T0 + DAY) * NS);

	uint64_t freed = obj_size("packs", p2) + obj_size("index", p2) + obj_size("packs", p4) +
			 obj_size("index", p4);
	struct st_gc_result res = gc_ok(r, (struct st_gc_opts){ .keep_last = 1, .now = T0 });
	EXPECT(res, checkpoints_deleted, 1);
	EXPECT(res, manifests_deleted, 1);
	EXPECT(res, chunks_marked, 2);
	EXPECT(res, packs_kept, 2);
	EXPECT(res, packs_partial, 1); /* p1: y is referenced by nothing */
	EXPECT(res, packs_deleted, 2);
	EXPECT(res, packs_orphan, 0);
	EXPECT(res, bytes_freed, freed);
	assert_true(obj_exists(r, "packs", p1) && obj_exists(r, "index", p1));
	assert_true(obj_exists(r, "packs", p3) && obj_exists(r, "index", p3));
	assert_false(obj_exists(r, "packs", p2) || obj_exists(r, "index", p2));
	assert_false(obj_exists(r, "packs", p4) || obj_exists(r, "index", p4));

	r = repo_reopen(r);
	assert_true(chunk_readable(r, &x[0]));
	assert_true(chunk_readable(r, &x[1])); /* kept with its pack */
	assert_true(chunk_readable(r, &w));
	assert_false(chunk_readable(r, &z));
	assert_false(chunk_readable(r, &v));
	is_gone(r, ida);

	/* b restores with the bytes put. */
	char want[PATH_LEN];
	make_dir(tmpdir, "want-b", want);
	make_file(want, "x", 1, 5000);
	make_file(want, "w", 4, 5000);
	char path[PATH_LEN];
	join(path, want, "x");
	assert_int_equal(chmod(path, 0600), 0);
	restores_as(r, idb, want);
	st_repo_close(r);
}

/* A manifest that does not load stops GC before anything is deleted. */
static void test_bad_manifest_deletes_nothing(void **state)
{
	(void)state;
	struct st_repo *r = repo_open();
	char ws[3][PATH_LEN], id[3][ST_ID_HEX + 1], name[32];
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		make_ws(name, (uint64_t)i, ws[i]);
		snap_at(r, ws[i], "s", i, 0, id[i]);
	}
	static const uint64_t seeds[1] = { 900 };
	struct st_id sid;
	char stray[ST_ID_HEX + 1];
	stray_pack(r, seeds, 1, &sid, stray);
	/* An old temp file: a full run would sweep it. */
	char tmp[PATH_LEN];
	obj_path("packs", ".tmp#0123456789abcdef", tmp);
	write_file(tmp, "x", 1);
	struct timespec old[2] = { { .tv_sec = time(NULL) - 2 * ST_GC_TEMP_AGE_SEC },
				   { .tv_sec = time(NULL) - 2 * ST_GC_TEMP_AGE_SEC } };
	assert_int_equal(utimensat(AT_FDCWD, tmp, old, 0), 0);
	struct st_gc_opts o = { .keep_last = 1, .now = T0 + 10 * DAY };

	/* 1: a byte of a kept manifest flipped (its id no longer matches). */
	char path[PATH_LEN];
	obj_path("manifests", id[2], path);
	uint8_t *text;
	size_t len;
	read_whole(path, &text, &len);
	text[len / 2] ^= 0x01;
	write_file(path, text, len);
	char *before = store_listing();
	struct st_gc_result res;
	memset(&res, 0x5a, sizeof(res));
	struct st_gc_result untouched = res;
	struct al_error err = { 0 };
	assert_int_equal(st_gc(r, &o, &res, &err), -EBADMSG);
	if (!strstr(err.msg, "nothing deleted") || !strstr(err.msg, id[2]))
		fail_msg("the error '%s' does not say nothing was deleted, or name %s", err.msg,
			 id[2]);
	assert_memory_equal(&res, &untouched, sizeof(res));
	char *after = store_listing();
	assert_string_equal(before, after);
	free(after);
	text[len / 2] ^= 0x01;
	write_file(path, text, len);
	free(text);

	/* 2: a manifest no log names, signed with another key (not authentic). */
	static const uint8_t other_key[ST_HMAC_KEY_MIN] = "another key, another key, anothe";
	struct st_manifest m = { .tenant = TENANT, .session = "s", .created = T0 };
	char *forged = NULL;
	size_t flen = 0;
	assert_int_equal(st_manifest_write(&m, other_key, sizeof(other_key), &forged, &flen, &err),
			 0);
	char fid[ST_ID_HEX + 1];
	st_manifest_id(forged, flen, fid);
	obj_put(r, "manifests", fid, forged, flen);
	free(forged);
	/* 2a: named by a log entry that retention keeps (the newest): it
	 * must be loaded to be marked, and cannot be. */
	char logname[128];
	snprintf(logname, sizeof(logname), "%020" PRId64 "-%s", (int64_t)((T0 + 9 * DAY) * NS),
		 fid);
	obj_put(r, "sessions/s/log", logname, "", 0);
	free(before);
	before = store_listing();
	al_error_clear(&err);
	assert_int_equal(st_gc(r, &o, &res, &err), -EBADMSG);
	if (!strstr(err.msg, "nothing deleted") || !strstr(err.msg, fid))
		fail_msg("the error '%s' does not say nothing was deleted, or name %s", err.msg,
			 fid);
	after = store_listing();
	assert_string_equal(before, after);
	free(after);
	char key[ST_KEY_MAX + 1];
	snprintf(key, sizeof(key), "tenants/" TENANT "/sessions/s/log/%s", logname);
	assert_int_equal(st_obj_del(st_repo_objstore(r), key, &err), 0);
	/* 2b: named by nothing (and the base of nothing): garbage, collected
	 * unread, in a dry run counted only. */
	snprintf(key, sizeof(key), "tenants/" TENANT "/manifests/%s", fid);
	struct st_gc_opts all = { .now = o.now }, dry = { .now = o.now, .dry_run = true };
	al_error_clear(&err);
	assert_int_equal(st_gc(r, &dry, &res, &err), 0);
	assert_int_equal(res.manifests_deleted, 1);
	assert_int_equal(st_obj_exists(st_repo_objstore(r), key, &err), 1);
	assert_int_equal(st_gc(r, &all, &res, &err), 0);
	assert_int_equal(res.manifests_deleted, 1);
	/* The stray pack and the old temp file went with it. */
	EXPECT(res, packs_deleted, 1);
	EXPECT(res, temp_deleted, 1);
	assert_int_equal(st_obj_exists(st_repo_objstore(r), key, &err), 0);
	for (int i = 0; i < 3; i++)
		restores_as(r, id[i], ws[i]);

	/* 3: an object among the manifests that no checkpoint id names. */
	obj_put(r, "manifests", "not-an-id", "x", 1);
	free(before);
	before = store_listing();
	al_error_clear(&err);
	assert_int_equal(st_gc(r, &o, &res, &err), -EBADMSG);
	if (!strstr(err.msg, "nothing deleted") || !strstr(err.msg, "not-an-id"))
		fail_msg("the error '%s' does not say nothing was deleted, or name the object",
			 err.msg);
	after = store_listing();
	assert_string_equal(before, after);
	free(after);
	free(before);
	snprintf(key, sizeof(key), "tenants/" TENANT "/manifests/not-an-id");
	assert_int_equal(st_obj_del(st_repo_objstore(r), key, &err), 0);

	/* Repaired, the same GC runs. */
	res = gc_ok(r, o);
	EXPECT(res, checkpoints_deleted, 2);
	EXPECT(res, packs_deleted, 1);
	EXPECT(res, temp_deleted, 0);
	r = repo_reopen(r);
	restores_as(r, id[2], ws[2]);
	st_repo_close(r);
}

struct copy_ctx {
	struct st_cas *from, *to;
};

/* st_cas_each_pack: stores every chunk of a pack again, into cc->to. */
static int copy_chunks(const char *hex, const struct st_id *chunks, size_t n, void *ud)
{
	struct copy_ctx *cc = ud;
	(void)hex;
	for (size_t i = n; i-- > 0;) { /* in reverse: another pack, not the same bytes */
		void *data = NULL;
		size_t len = 0;
		if (st_cas_get(cc->from, &chunks[i], &data, &len, NULL) < 0)
			return -EIO;
		int r = st_cas_put_id(cc->to, &chunks[i], data, len, NULL, NULL);
		free(data);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A pack rewritten while GC was killed: its chunks are in two packs. Reads
 * still work; the next GC collects the copies and keeps every checkpoint. */
static void test_rewrite_and_a_crash_in_between(void **state)
{
	(void)state;
	struct st_repo *r = repo_open();
	char ws[PATH_LEN], id[ST_ID_HEX + 1];
	make_ws("s0", 0, ws);
	snap_at(r, ws, "s", 0, 0, id);
	struct names packs = list_keys(r, "packs");
	assert_int_equal(packs.n, 1);

	/* The crash state: every chunk of the pack stored again, in a new
	 * pack, as a rewrite does before it deletes the old one. */
	struct st_cas *fresh = NULL, *w = NULL;
	struct al_error err = { 0 };
	struct st_objstore *os = st_repo_objstore(r);
	assert_int_equal(st_cas_open(os, TENANT, 1, &fresh, &err), 0);
	assert_int_equal(st_cas_open_empty(os, TENANT, 1, &w, &err), 0);
	struct copy_ctx cc = { fresh, w };
	assert_int_equal(st_cas_each_pack(fresh, copy_chunks, &cc, &err), 0);
	assert_int_equal(st_cas_flush(w, &err), 0);
	st_cas_close(w);
	st_cas_close(fresh);
	assert_int_equal(count_keys(r, "packs"), 2);
	r = repo_reopen(r);
	restores_as(r, id, ws);

	/* The next GC: one copy of each chunk is garbage; one pack goes. */
	struct st_gc_opts o = { .repack = true };
	struct st_gc_result res = gc_ok(r, o);
	EXPECT(res, packs_deleted, 1);
	EXPECT(res, packs_repacked, 0);
	assert_int_equal(count_keys(r, "packs"), 1);
	r = repo_reopen(r);
	restores_as(r, id, ws);
	free(packs.v);
	st_repo_close(r);
}

/* Crash leftovers: packs without an index and old temp files go. */
static void test_orphans_and_temp_files(void **state)
{
	(void)state;
	struct st_repo *r = repo_open();
	char ws[PATH_LEN], id[ST_ID_HEX + 1];
	make_ws("s0", 0, ws);
	snap_at(r, ws, "s", 0, 0, id);

	/* A sealed pack whose index never made it (a crash between the two). */
	static const uint64_t seeds[2] = { 300, 301 };
	struct st_id ids[2];
	char lost[ST_ID_HEX + 1];
	stray_pack(r, seeds, 2, ids, lost);
	uint64_t freed = obj_size("packs", lost);
	char key[ST_KEY_MAX + 1];
	snprintf(key, sizeof(key), "tenants/" TENANT "/index/%s", lost);
	struct al_error err = { 0 };
	assert_int_equal(st_obj_del(st_repo_objstore(r), key, &err), 0);
	/* One planted whole, and an unreferenced pack with its index. */
	uint8_t junk[2000];
	fill(junk, sizeof(junk), 12);
	char planted[ST_ID_HEX + 1];
	memset(planted, 'e', ST_ID_HEX);
	planted[ST_ID_HEX] = '\0';
	obj_put(r, "packs", planted, junk, sizeof(junk));
	freed += sizeof(junk);
	static const uint64_t seeds2[1] = { 302 };
	struct st_id sid;
	char stray[ST_ID_HEX + 1];
	stray_pack(r, seeds2, 1, &sid, stray);
	freed += obj_size("packs", stray) + obj_size("index", stray);
	/* Not a pack name: left alone. */
	obj_put(r, "packs", "readme", "hi", 2);
	/* Temp files: one from a put that died long ago, one maybe in flight. */
	char old_tmp[PATH_LEN], new_tmp[PATH_LEN];
	obj_path("packs", ".tmp#0123456789abcdef", old_tmp);
	obj_path("index", ".tmp#fedcba9876543210", new_tmp);
	write_file(old_tmp, "x", 1);
	write_file(new_tmp, "y", 1);
	struct timespec old[2] = { { .tv_sec = time(NULL) - 2 * ST_GC_TEMP_AGE_SEC },
				   { .tv_sec = time(NULL) - 2 * ST_GC_TEMP_AGE_SEC } };
	assert_int_equal(utimensat(AT_FDCWD, old_tmp, old, 0), 0);

	struct st_gc_result res = gc_ok(r, (struct st_gc_opts){ .now = T0 });
	EXPECT(res, checkpoints_deleted, 0);
	EXPECT(res, manifests_deleted, 0);
	EXPECT(res, packs_kept, 1);
	EXPECT(res, packs_deleted, 1);
	EXPECT(res, packs_orphan, 2);
	EXPECT(res, temp_deleted, 1);
	EXPECT(res, bytes_freed, freed);
	assert_false(obj_exists(r, "packs", lost));
	assert_false(obj_exists(r, "packs", planted));
	assert_false(obj_exists(r, "packs", stray) || obj_exists(r, "index", stray));
	assert_true(obj_exists(r, "packs", "readme"));
	assert_int_equal(access(old_tmp, F_OK), -1);
	assert_int_equal(access(new_tmp, F_OK), 0);

	r = repo_reopen(r);
	restores_as(r, id, ws);
	/* The chunks of the lost pack are stored anew, not taken as present. */
	char ws1[PATH_LEN], id1[ST_ID_HEX + 1];
	make_ws("s1", 1, ws1);
	make_file(ws1, "lost", seeds[0], 5000);
	snap(r, ws1, "s", id1);
	r = repo_reopen(r);
	restores_as(r, id1, ws1);
	st_repo_close(r);
}

static void make_whiteout(const char *dir, const char *name)
{
	char path[PATH_LEN];
	join(path, dir, name);
	if (mknod(path, S_IFCHR | 0600, makedev(0, 0)) < 0)
		fail_msg("mknod %s: %s", path, al_strerror(errno));
}

/*
 * A delta keeps its base alive (docs/checkpoints.md, "Layered
 * workspaces"): when retention drops the base's log entry while a delta
 * over it stays, the base manifest and its chunks stay.
 */
static void test_delta_keeps_base(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* a whiteout is a character device 0/0 */
	struct st_repo *r = repo_open();

	/* The base: keep, plain, gone, sub/inner, big (only in the base). */
	char base_ws[PATH_LEN], sub[PATH_LEN], id_base[ST_ID_HEX + 1];
	make_dir(tmpdir, "base", base_ws);
	make_text(base_ws, "keep.txt", "kept as is\n");
	make_text(base_ws, "plain.txt", "plain, as in the base\n");
	make_file(base_ws, "gone.bin", 40, 12000);
	make_file(base_ws, "big.bin", 41, 30000);
	make_dir(base_ws, "sub", sub);
	make_text(sub, "inner.txt", "inner\n");
	snap_at(r, base_ws, "base", 0, 0, id_base);

	/* The upper layer: plain changed, new files and a directory, gone.bin
	 * whited out, sub merged with one more file. */
	char upper[PATH_LEN], usub[PATH_LEN], unew[PATH_LEN], id_delta[ST_ID_HEX + 1];
	make_dir(tmpdir, "upper", upper);
	make_text(upper, "plain.txt", "plain, changed in the layer\n");
	make_file(upper, "new.bin", 42, 9000);
	make_dir(upper, "newdir", unew);
	make_text(unew, "f", "in a new directory\n");
	make_whiteout(upper, "gone.bin");
	make_dir(upper, "sub", usub);
	make_text(usub, "added.txt", "added below a base directory\n");
	struct st_snapshot_opts so = { .upper = upper, .lower = id_base, .session = "layer" };
	struct st_snapshot_result sr;
	struct al_error err = { 0 };
	if (st_snapshot(r, &so, &sr, &err) < 0)
		fail_msg("layered snapshot: %s", al_error_message(&err));
	snprintf(id_delta, sizeof(id_delta), "%s", sr.id);
	set_log_time(r, "layer", id_delta, (T0 + DAY) * NS);
	struct st_manifest *m = NULL;
	if (st_manifest_load(r, id_delta, NULL, &m, &err) < 0)
		fail_msg("load the delta: %s", al_error_message(&err));
	assert_string_equal(m->base, id_base);
	st_manifest_free(m);

	/* What the delta's tree is: the base with the layer's changes. */
	char merged[PATH_LEN], msub[PATH_LEN], mnew[PATH_LEN];
	make_dir(tmpdir, "merged", merged);
	make_text(merged, "keep.txt", "kept as is\n");
	make_text(merged, "plain.txt", "plain, changed in the layer\n");
	make_file(merged, "big.bin", 41, 30000);
	make_file(merged, "new.bin", 42, 9000);
	make_dir(merged, "newdir", mnew);
	make_text(mnew, "f", "in a new directory\n");
	make_dir(merged, "sub", msub);
	make_text(msub, "inner.txt", "inner\n");
	make_text(msub, "added.txt", "added below a base directory\n");

	/* The base's session moves on, without big.bin and gone.bin. */
	char moved[PATH_LEN], msub2[PATH_LEN], id_moved[ST_ID_HEX + 1];
	make_dir(tmpdir, "moved", moved);
	make_text(moved, "keep.txt", "kept as is\n");
	make_text(moved, "plain.txt", "the base moved on\n");
	make_dir(moved, "sub", msub2);
	make_text(msub2, "inner.txt", "inner\n");
	snap_at(r, moved, "base", 2, 0, id_moved);

	struct st_gc_opts o = { .keep_last = 1, .now = T0 + 3 * DAY, .dry_run = true };
	struct st_gc_result dry = gc_ok(r, o);
	o.dry_run = false;
	struct st_gc_result res = gc_ok(r, o);
	expect_same_result(&res, &dry);
	/* The base's log entry goes; its manifest stays, for the delta. */
	EXPECT(res, checkpoints_deleted, 1);
	EXPECT(res, checkpoints_kept, 2);
	EXPECT(res, manifests_deleted, 0);
	EXPECT(res, manifests_kept, 3);
	EXPECT(res, packs_deleted, 0);
	assert_true(obj_exists(r, "manifests", id_base));
	assert_int_equal(count_keys(r, "sessions/base/log"), 1);
	latest_is(r, "base", id_moved);

	r = repo_reopen(r);
	restores_as(r, id_delta, merged);
	restores_as(r, id_moved, moved);
	/* The base is whole too: gone.bin's chunk was kept with it. */
	restores_as(r, id_base, base_ws);

	/* A second GC changes nothing. */
	res = gc_ok(r, o);
	expect_nothing_deleted(&res);
	r = repo_reopen(r);
	restores_as(r, id_delta, merged);
	st_repo_close(r);
}

/* ---- a restore with an owner (here for this file's repository helpers) ---- */

static struct {
	uid_t uid;
	gid_t gid;
	size_t seen, wrong;
} owned;

static int owner_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	owned.seen++;
	if (st->st_uid != owned.uid || st->st_gid != owned.gid)
		owned.wrong++;
	return 0;
}

static void test_restore_with_owner(void **state)
{
	char ws[PATH_LEN], id[ST_ID_HEX + 1], out[PATH_LEN];
	make_ws("ws", 1, ws);
	struct st_repo *r = repo_open();
	snap(r, ws, "s", id);
	join(out, tmpdir, "owned");
	struct al_error err = { 0 };
	/* (uint32_t)-1 is chown's "leave it": the caller's root would stay. */
	struct st_restore_opts bad[] = {
		{ .chown = true, .uid = UINT32_MAX, .gid = 4343 },
		{ .chown = true, .uid = 4242, .gid = UINT32_MAX },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		al_error_clear(&err);
		assert_int_equal(st_restore_with(r, id, out, &bad[i], &err), -EINVAL);
		assert_int_equal(access(out, F_OK), -1);
	}
	if (geteuid() != 0) {
		st_repo_close(r);
		skip(); /* giving files away needs root */
	}
	struct st_restore_opts o = { .chown = true, .uid = 4242, .gid = 4343 };
	if (st_restore_with(r, id, out, &o, &err) < 0)
		fail_msg("restore: %s", al_error_message(&err));
	assert_same_tree(ws, out);
	owned.uid = 4242;
	owned.gid = 4343;
	assert_int_equal(nftw(out, owner_entry, 16, FTW_PHYS), 0);
	assert_int_equal(owned.seen, 6); /* out, shared, own, dir, dir/note, link */
	assert_int_equal(owned.wrong, 0);
	st_repo_close(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_restore_with_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keep_last, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keep_days, setup, teardown),
		cmocka_unit_test_setup_teardown(test_latest_never_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dry_run, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sweep_by_reference, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_manifest_deletes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_orphans_and_temp_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rewrite_and_a_crash_in_between, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_delta_keeps_base, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

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

#include "store/cas.h"

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
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_cas.XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(root, sizeof(root), "%s/store", tmpdir);
	return 0;
}

static int teardown(void **state)
{
	return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static struct st_objstore *os_open(void)
{
	struct st_objstore *s = NULL;
	struct al_error err = { 0 };
	if (st_objstore_open_dir(root, &s, &err) < 0)
		fail_msg("open %s: %s", root, al_error_message(&err));
	return s;
}

static struct st_cas *cas_open(struct st_objstore *os)
{
	struct st_cas *c = NULL;
	struct al_error err = { 0 };
	if (st_cas_open(os, "t", 3, &c, &err) < 0)
		fail_msg("cas open: %s", al_error_message(&err));
	return c;
}

/* Deterministic pseudo-random bytes (xorshift), so failures reproduce. */
static void fill(void *p, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	uint8_t *b = p;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (uint8_t)x;
	}
}

static struct st_id put_ok(struct st_cas *c, const void *data, size_t len, bool want_new)
{
	struct st_id id;
	bool is_new = !want_new;
	struct al_error err = { 0 };
	if (st_cas_put(c, data, len, &id, &is_new, &err) < 0)
		fail_msg("put: %s", al_error_message(&err));
	assert_int_equal(is_new, want_new);
	struct st_id want;
	st_sha256(data, len, &want);
	assert_memory_equal(id.b, want.b, ST_ID_LEN);
	return id;
}

static void get_is(struct st_cas *c, const struct st_id *id, const void *want, size_t len)
{
	void *data = NULL;
	size_t n = 0;
	struct al_error err = { 0 };
	if (st_cas_get(c, id, &data, &n, &err) < 0)
		fail_msg("get: %s", al_error_message(&err));
	assert_int_equal(n, len);
	if (len)
		assert_memory_equal(data, want, len);
	free(data);
}

static void test_ids(void **state)
{
	struct st_id id, back;
	char hex[ST_ID_HEX + 1];
	st_sha256("abc", 3, &id);
	st_id_hex(&id, hex);
	assert_string_equal(hex,
			    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(st_id_parse(hex, ST_ID_HEX, &back), 0);
	assert_memory_equal(back.b, id.b, ST_ID_LEN);
	assert_int_equal(st_id_parse(hex, ST_ID_HEX - 1, &back), -EINVAL);
	hex[3] = 'A';
	assert_int_equal(st_id_parse(hex, ST_ID_HEX, &back), -EINVAL);
	hex[3] = 'g';
	assert_int_equal(st_id_parse(hex, ST_ID_HEX, &back), -EINVAL);
}

static void test_round_trip_and_dedupe(void **state)
{
	struct st_objstore *os = os_open();
	struct st_cas *c = cas_open(os);
	struct al_error err = { 0 };

	size_t big = ST_CHUNK_MAX;
	uint8_t *data = malloc(big + 1);
	assert_non_null(data);
	fill(data, big + 1, 1);

	struct st_id r1 = put_ok(c, data, 5000, true);
	struct st_id empty = put_ok(c, "", 0, true);
	struct st_id full = put_ok(c, data, big, true);
	assert_true(st_cas_has(c, &r1) && st_cas_has(c, &empty) && st_cas_has(c, &full));

	/* Readable from the open pack, before any flush. */
	get_is(c, &r1, data, 5000);
	get_is(c, &empty, "", 0);
	get_is(c, &full, data, big);

	/* Over the maximum: refused, nothing stored. */
	struct st_id id;
	assert_int_equal(st_cas_put(c, data, big + 1, &id, NULL, &err), -EFBIG);

	/* Dedupe in the open pack. */
	put_ok(c, data, 5000, false);
	put_ok(c, "", 0, false);
	bool is_new = true;
	assert_int_equal(st_cas_put_id(c, &r1, data, 5000, &is_new, &err), 0);
	assert_false(is_new);

	struct st_cas_stats st;
	st_cas_stats(c, &st);
	assert_int_equal(st.chunks_new, 3);
	assert_int_equal(st.chunks_dup, 3);
	assert_int_equal(st.packs_written, 0);
	assert_int_equal(st.bytes_in, 5000 + 0 + big + 5000 + 0 + 5000);
	assert_true(st.bytes_stored > big && st.bytes_stored < big + big / 50);

	/* Compressible data compresses. */
	uint8_t *zeros = calloc(1, 100000);
	assert_non_null(zeros);
	struct st_id z = put_ok(c, zeros, 100000, true);
	st_cas_stats(c, &st);
	assert_true(st.bytes_stored < big + big / 50 + 1000);

	assert_int_equal(st_cas_flush(c, &err), 0);
	assert_int_equal(st_cas_flush(c, &err), 0); /* nothing open: no empty pack */
	st_cas_stats(c, &st);
	assert_int_equal(st.packs_written, 1);
	/* Sealed: read back from the pack object. */
	get_is(c, &r1, data, 5000);
	get_is(c, &z, zeros, 100000);
	/* Dedupe against sealed packs. */
	put_ok(c, data, big, false);
	st_cas_close(c);

	/* A new open sees everything through the index. */
	c = cas_open(os);
	assert_true(st_cas_has(c, &r1) && st_cas_has(c, &empty) && st_cas_has(c, &full));
	get_is(c, &full, data, big);
	get_is(c, &empty, "", 0);
	put_ok(c, data, 5000, false);
	st_cas_stats(c, &st);
	assert_int_equal(st.chunks_new, 0);
	assert_int_equal(st.chunks_dup, 1);

	/* Absent chunk. */
	struct st_id none;
	st_sha256("none", 4, &none);
	assert_false(st_cas_has(c, &none));
	void *out = (void *)1;
	size_t n = 7;
	al_error_clear(&err);
	assert_int_equal(st_cas_get(c, &none, &out, &n, &err), -ENOENT);
	assert_int_equal(n, 7);
	char hex[ST_ID_HEX + 1];
	st_id_hex(&none, hex);
	assert_non_null(strstr(err.msg, hex));

	st_cas_close(c);
	free(zeros);
	free(data);
	st_objstore_close(os);
}

struct packs_seen {
	size_t packs, chunks;
	char first[ST_ID_HEX + 1];
};

static int count_pack(const char *hex, const struct st_id *chunks, size_t n, void *ud)
{
	struct packs_seen *p = ud;
	if (p->packs++ == 0)
		memcpy(p->first, hex, ST_ID_HEX + 1);
	p->chunks += n;
	return 0;
}

static void test_many_packs(void **state)
{
	struct st_objstore *os = os_open();
	struct st_cas *c = cas_open(os);
	struct al_error err = { 0 };
	st_cas_set_pack_target(c, 64 * 1024);

	enum { N = 300, LEN = 3000 };
	static uint8_t buf[N][LEN];
	struct st_id ids[N];
	for (int i = 0; i < N; i++) {
		fill(buf[i], LEN, (uint64_t)i + 100);
		ids[i] = put_ok(c, buf[i], LEN, true);
	}
	struct st_cas_stats st;
	st_cas_stats(c, &st);
	/* ~3 KiB each, 64 KiB packs: sealed automatically, ~14 of them. */
	assert_true(st.packs_written >= 10);
	uint64_t sealed = st.packs_written;
	for (int i = 0; i < N; i += 7)
		get_is(c, &ids[i], buf[i], LEN);
	assert_int_equal(st_cas_flush(c, &err), 0);
	st_cas_close(c);

	c = cas_open(os);
	struct packs_seen seen = { 0 };
	assert_int_equal(st_cas_each_pack(c, count_pack, &seen, &err), 0);
	assert_int_equal(seen.packs, sealed + 1);
	assert_int_equal(seen.chunks, N);
	for (int i = 0; i < N; i++) {
		assert_true(st_cas_has(c, &ids[i]));
		get_is(c, &ids[i], buf[i], LEN);
	}
	/* Pack and index objects exist under the documented keys. */
	char key[ST_KEY_MAX + 1];
	snprintf(key, sizeof(key), "tenants/t/packs/%s", seen.first);
	assert_int_equal(st_obj_exists(os, key, &err), 1);
	snprintf(key, sizeof(key), "tenants/t/index/%s", seen.first);
	assert_int_equal(st_obj_exists(os, key, &err), 1);
	/* Another tenant sees none of it. */
	struct st_cas *other = NULL;
	assert_int_equal(st_cas_open(os, "u", 3, &other, &err), 0);
	assert_false(st_cas_has(other, &ids[0]));
	st_cas_close(other);
	other = NULL;
	assert_int_equal(st_cas_open(os, "../t", 3, &other, &err), -EINVAL);
	assert_int_equal(st_cas_open(os, "t", 0, &other, &err), -EINVAL);
	assert_null(other);
	st_cas_close(c);
	st_objstore_close(os);
}

/* Thousands of chunks in the open pack, then as many again over the index
 * read back: the table grows past its first size both ways, and every
 * chunk is found (and a second copy is known) throughout. */
static void test_table_grows(void **state)
{
	enum { N = 6000 };
	static uint64_t v[2 * N];
	static struct st_id ids[2 * N];
	struct st_objstore *os = os_open();
	struct al_error err = { 0 };
	for (int round = 0; round < 2; round++) {
		struct st_cas *c = cas_open(os);
		for (int i = round * N; i < (round + 1) * N; i++) {
			v[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
			ids[i] = put_ok(c, &v[i], sizeof(v[i]), true);
		}
		for (int i = 0; i < (round + 1) * N; i++) {
			assert_true(st_cas_has(c, &ids[i]));
			put_ok(c, &v[i], sizeof(v[i]), false);
		}
		assert_int_equal(st_cas_flush(c, &err), 0);
		st_cas_close(c);
	}
	struct st_cas *c = cas_open(os);
	for (int i = 0; i < 2 * N; i += 97)
		get_is(c, &ids[i], &v[i], sizeof(v[i]));
	st_cas_close(c);
	st_objstore_close(os);
}

/* ---- the merged index ---- */

static void flip_byte(const char *path, off_t off);

enum { MX_PER = 20, MX_MAX = 60 * MX_PER };
static uint64_t mx_v[MX_MAX];
static struct st_id mx_ids[MX_MAX];
static int mx_n;

/* packs more packs of MX_PER small chunks each, each sealed. */
static void mx_add_packs(struct st_objstore *os, int packs)
{
	struct st_cas *c = cas_open(os);
	struct al_error err = { 0 };
	for (int p = 0; p < packs; p++) {
		for (int i = 0; i < MX_PER; i++, mx_n++) {
			mx_v[mx_n] = 0xd1b54a32d192ed03ull * (uint64_t)(mx_n + 7);
			mx_ids[mx_n] = put_ok(c, &mx_v[mx_n], sizeof(mx_v[mx_n]), true);
		}
		assert_int_equal(st_cas_flush(c, &err), 0);
	}
	st_cas_close(c);
}

/* Opens lazily and loads: what the load read and wrote. */
static struct st_cas *mx_load(struct st_objstore *os, struct st_cas_stats *st)
{
	struct st_cas *c = NULL;
	struct al_error err = { 0 };
	assert_int_equal(st_cas_open_lazy(os, "t", 3, &c, &err), 0);
	if (st_cas_load(c, &err) < 0)
		fail_msg("load: %s", al_error_message(&err));
	st_cas_stats(c, st);
	return c;
}

/* Every chunk from..to is there (found and read back), a second copy of
 * it is known. */
static void mx_all_there(struct st_cas *c, int from, int to)
{
	for (int i = from; i < to; i++) {
		assert_true(st_cas_has(c, &mx_ids[i]));
		assert_int_equal(st_cas_chunk_len(c, &mx_ids[i]), sizeof(mx_v[i]));
		get_is(c, &mx_ids[i], &mx_v[i], sizeof(mx_v[i]));
		put_ok(c, &mx_v[i], sizeof(mx_v[i]), false);
	}
}

/* A load reads `read` index objects, writes a merged index or not, and
 * (from >= 0) finds every chunk from `from` on. */
static void mx_expect(struct st_objstore *os, uint64_t read, uint64_t written, int from)
{
	struct st_cas_stats st;
	struct st_cas *c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, read);
	assert_int_equal(st.midx_written, written);
	if (from >= 0)
		mx_all_there(c, from, mx_n);
	st_cas_close(c);
}

/* The merged index's first record (its offset and bytes), and which of
 * the chunks from MX_PER on it is. */
static int mx_first(const char *path, off_t *rec0, uint8_t first[32 + 20])
{
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	uint8_t hdr[16 + 16];
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
	uint32_t np = (uint32_t)hdr[16] | (uint32_t)hdr[17] << 8 | (uint32_t)hdr[18] << 16 |
		      (uint32_t)hdr[19] << 24;
	*rec0 = 32 + 1024 + (off_t)np * 32;
	assert_int_equal(pread(fd, first, 32 + 20, *rec0), 32 + 20);
	close(fd);
	int victim = -1;
	for (int i = MX_PER; i < mx_n; i++)
		if (memcmp(mx_ids[i].b, first, 32) == 0)
			victim = i;
	assert_true(victim >= 0);
	return victim;
}

/* Writes len bytes at off of path. */
static void mx_poke(const char *path, off_t off, const void *data, size_t len)
{
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, data, len, off), (ssize_t)len);
	close(fd);
}

static void midx_path(char *path, size_t size)
{
	snprintf(path, size, "%s/tenants/t/midx/chunks", root);
}

static void test_merged_index(void **state)
{
	struct st_objstore *os = os_open();
	struct st_cas_stats st;
	struct al_error err = { 0 };
	mx_n = 0;
	/* A few packs: no merged index is worth it. */
	mx_add_packs(os, 3);
	struct st_cas *c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, 3);
	assert_int_equal(st.midx_written, 0);
	st_cas_close(c);

	/* Eight: the load that read them all writes it; the next reads none. */
	mx_add_packs(os, 5);
	mx_expect(os, 8, 1, -1);
	c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, 0);
	assert_int_equal(st.midx_chunks, mx_n);
	mx_all_there(c, 0, mx_n);
	/* Its packs' chunks are not listed pack by pack: GC opens the store
	 * with st_cas_open, which reads every index object. */
	struct packs_seen seen = { 0 };
	assert_int_equal(st_cas_each_pack(c, count_pack, &seen, &err), -EINVAL);
	st_cas_close(c);
	c = cas_open(os);
	assert_int_equal(st_cas_each_pack(c, count_pack, &seen, &err), 0);
	assert_int_equal(seen.packs, 8);
	st_cas_close(c);

	/* Packs written since are read as before, up to 16 of them... */
	mx_add_packs(os, 16);
	mx_expect(os, 16, 0, 0);
	/* ...then the merged index takes them in. */
	mx_add_packs(os, 1);
	mx_expect(os, 17, 1, -1);
	c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, 0);
	assert_int_equal(st.midx_chunks, mx_n);
	mx_all_there(c, 0, mx_n);
	st_cas_close(c);

	/* A pack it names is gone (as GC removes one): it is not used, and
	 * the gone pack's chunks are not believed present. */
	char pack_hex[ST_ID_HEX + 1], key[ST_KEY_MAX + 1];
	c = cas_open(os);
	assert_string_not_equal(st_cas_owner(c, &mx_ids[0]), "");
	snprintf(pack_hex, sizeof(pack_hex), "%s", st_cas_owner(c, &mx_ids[0]));
	st_cas_close(c);
	snprintf(key, sizeof(key), "tenants/t/index/%s", pack_hex);
	assert_int_equal(st_obj_del(os, key, &err), 0);
	snprintf(key, sizeof(key), "tenants/t/packs/%s", pack_hex);
	assert_int_equal(st_obj_del(os, key, &err), 0);
	mx_add_packs(os, 1); /* as many packs listed as it names */
	c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, 25);
	assert_int_equal(st.midx_chunks, 0);
	assert_int_equal(st.midx_written, 1);
	for (int i = 0; i < MX_PER; i++)
		assert_false(st_cas_has(c, &mx_ids[i]));
	mx_all_there(c, MX_PER, mx_n);
	st_cas_close(c);
	c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, 0);
	assert_int_equal(st.midx_chunks, mx_n - MX_PER);
	st_cas_close(c);

	/* A damaged one is ignored (and written anew): another magic, a
	 * length that does not add up. */
	char path[256];
	midx_path(path, sizeof(path));
	for (int damage = 0; damage < 2; damage++) {
		if (damage == 0) {
			flip_byte(path, 3);
		} else {
			int fd = open(path, O_WRONLY);
			assert_true(fd >= 0);
			struct stat sb;
			assert_int_equal(fstat(fd, &sb), 0);
			assert_int_equal(ftruncate(fd, sb.st_size - 1), 0);
			close(fd);
		}
		c = mx_load(os, &st);
		assert_int_equal(st.indexes_read, 25);
		assert_int_equal(st.midx_written, 1);
		mx_all_there(c, MX_PER, mx_n);
		st_cas_close(c);
	}

	/* A record whose pack number is out of range: that chunk looks
	 * absent, so it is stored again (never read from nowhere). */
	c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, 0);
	st_cas_close(c);
	off_t rec0;
	uint8_t first[32 + 20];
	int victim = mx_first(path, &rec0, first);
	static const uint8_t bad[4] = { 0xff, 0xff, 0xff, 0x00 };
	mx_poke(path, rec0 + 48, bad, sizeof(bad));
	c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, 0);
	assert_false(st_cas_has(c, &mx_ids[victim]));
	put_ok(c, &mx_v[victim], sizeof(mx_v[victim]), true);
	get_is(c, &mx_ids[victim], &mx_v[victim], sizeof(mx_v[victim]));
	assert_int_equal(st_cas_flush(c, &err), 0);
	st_cas_close(c);

	/* A record that still looks right but points elsewhere in its pack:
	 * the read finds the chunk through the index objects all the same,
	 * and the merged index is dropped (the next load writes it anew). */
	unlink(path);
	mx_expect(os, 26, 1, -1);
	victim = mx_first(path, &rec0, first);
	uint8_t off8[8];
	memcpy(off8, first + 32, 8);
	off8[0] += 1;
	mx_poke(path, rec0 + 32, off8, sizeof(off8));
	c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, 0);
	assert_true(st_cas_has(c, &mx_ids[victim]));
	get_is(c, &mx_ids[victim], &mx_v[victim], sizeof(mx_v[victim]));
	st_cas_close(c);
	assert_int_equal(access(path, F_OK), -1);
	mx_expect(os, 26, 1, MX_PER);

	/* Damage is never merged into a new one: with more than 16 packs
	 * outside it, the load drops it instead of writing from it. */
	flip_byte(path, rec0 + 5);
	mx_add_packs(os, 17);
	mx_expect(os, 17, 0, -1);
	assert_int_equal(access(path, F_OK), -1);
	mx_expect(os, 43, 1, MX_PER);

	/* A load that fails (an index object is damaged) leaves nothing
	 * half-read: the next one, once the object is whole again, reads
	 * every pack once, and what it writes is whole. */
	unlink(path);
	c = cas_open(os);
	snprintf(pack_hex, sizeof(pack_hex), "%s", st_cas_owner(c, &mx_ids[mx_n - 1]));
	st_cas_close(c);
	char ipath[256];
	snprintf(ipath, sizeof(ipath), "%s/tenants/t/index/%s", root, pack_hex);
	flip_byte(ipath, 20);
	assert_int_equal(st_cas_open_lazy(os, "t", 3, &c, &err), 0);
	assert_true(st_cas_load(c, &err) < 0);
	flip_byte(ipath, 20);
	assert_int_equal(st_cas_load(c, &err), 0);
	mx_all_there(c, MX_PER, mx_n);
	st_cas_close(c);
	c = mx_load(os, &st);
	assert_int_equal(st.indexes_read, 0);
	assert_int_equal(st.midx_chunks, mx_n - MX_PER);
	st_cas_close(c);
	st_objstore_close(os);
}

/* The path of the only pack (or index) object of tenant t. */
static void only_object(const char *kind, char *path, size_t size)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "ls %s/tenants/t/%s", root, kind);
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	char name[128];
	assert_non_null(fgets(name, sizeof(name), f));
	pclose(f);
	name[strcspn(name, "\n")] = '\0';
	assert_int_equal(strlen(name), ST_ID_HEX);
	snprintf(path, size, "%s/tenants/t/%s/%s", root, kind, name);
}

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	uint8_t b;
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

static off_t file_size(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

/* Stores two chunks in one pack and returns their ids. */
static void store_two(struct st_id ids[2], uint8_t data[2][4000])
{
	struct st_objstore *os = os_open();
	struct st_cas *c = cas_open(os);
	struct al_error err = { 0 };
	fill(data[0], 4000, 7);
	fill(data[1], 4000, 8);
	ids[0] = put_ok(c, data[0], 4000, true);
	ids[1] = put_ok(c, data[1], 4000, true);
	assert_int_equal(st_cas_flush(c, &err), 0);
	st_cas_close(c);
	st_objstore_close(os);
}

static void get_fails(struct st_cas *c, const struct st_id *id, int code)
{
	void *out = NULL;
	size_t n = 0;
	struct al_error err = { 0 };
	char hex[ST_ID_HEX + 1];
	st_id_hex(id, hex);
	assert_int_equal(st_cas_get(c, id, &out, &n, &err), code);
	assert_null(out);
	if (!strstr(err.msg, hex))
		fail_msg("error '%s' does not name chunk %s", err.msg, hex);
}

static void test_corrupt_pack(void **state)
{
	struct st_id ids[2];
	static uint8_t data[2][4000];
	store_two(ids, data);
	char pack[256];
	only_object("packs", pack, sizeof(pack));
	off_t size = file_size(pack);

	struct st_objstore *os = os_open();
	struct st_cas *c = cas_open(os);
	/* A byte in the second chunk's frame: the first still reads. */
	flip_byte(pack, size - 100);
	get_is(c, &ids[0], data[0], 4000);
	get_fails(c, &ids[1], -EBADMSG);
	flip_byte(pack, size - 100);
	get_is(c, &ids[1], data[1], 4000);
	/* A byte of a record header (the first chunk's length). */
	flip_byte(pack, 15 + 32);
	get_fails(c, &ids[0], -EBADMSG);
	flip_byte(pack, 15 + 32);
	/* A byte of the first frame's header area. */
	flip_byte(pack, 15 + 40 + 5);
	get_fails(c, &ids[0], -EBADMSG);
	flip_byte(pack, 15 + 40 + 5);
	get_is(c, &ids[0], data[0], 4000);

	/* Truncated: the last chunk is cut off. */
	assert_int_equal(truncate(pack, size - 10), 0);
	get_is(c, &ids[0], data[0], 4000);
	get_fails(c, &ids[1], -EBADMSG);
	/* Gone altogether: an error naming the chunk, not a crash. */
	assert_int_equal(unlink(pack), 0);
	get_fails(c, &ids[0], -ENOENT);
	st_cas_close(c);
	st_objstore_close(os);
}

static void open_fails(const char *what)
{
	struct st_objstore *os = os_open();
	struct st_cas *c = NULL;
	struct al_error err = { 0 };
	int r = st_cas_open(os, "t", 3, &c, &err);
	if (r != -EBADMSG)
		fail_msg("%s: open returned %d (%s)", what, r, al_error_message(&err));
	assert_null(c);
	if (!strstr(err.msg, "tenants/t/index/"))
		fail_msg("%s: error '%s' does not name the index object", what, err.msg);
	st_objstore_close(os);
}

static void test_corrupt_index(void **state)
{
	struct st_id ids[2];
	static uint8_t data[2][4000];
	store_two(ids, data);
	char index[256];
	only_object("index", index, sizeof(index));
	off_t size = file_size(index);
	assert_int_equal(size, 32 + 2 * 48 + 32);

	/* Every byte matters: magic, header, records, checksum. */
	static const off_t at[] = { 0, 15, 16, 24, 28, 32, 32 + 33, 32 + 48 + 40, 32 + 96, 159 };
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		flip_byte(index, at[i]);
		open_fails("flipped byte");
		flip_byte(index, at[i]);
	}
	assert_int_equal(truncate(index, size - 1), 0);
	open_fails("truncated index");
	assert_int_equal(truncate(index, 0), 0);
	open_fails("empty index");

	/* An index object whose name is not a pack id. */
	assert_int_equal(unlink(index), 0);
	char path[256];
	snprintf(path, sizeof(path), "%s/tenants/t/index/notanid", root);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	open_fails("bad name");
	assert_int_equal(unlink(path), 0);

	/* Without its index, a pack is invisible (GC's business). */
	struct st_objstore *os = os_open();
	struct st_cas *c = cas_open(os);
	assert_false(st_cas_has(c, &ids[0]));
	st_cas_close(c);
	st_objstore_close(os);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ids),
		cmocka_unit_test_setup_teardown(test_round_trip_and_dedupe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_packs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_table_grows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_merged_index, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_pack, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_index, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

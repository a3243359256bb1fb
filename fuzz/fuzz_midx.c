/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The merged chunk index (src/store/cas.c: "tenants/<t>/midx/chunks") on
 * arbitrary bytes, beside one well-formed pack index. The first byte picks
 * the mode: even, the rest is the whole object; odd, the rest is its
 * records, behind a header that adds up (the one pack named, the fanout
 * counted from the records' first bytes, in whatever order they come), so
 * that the fuzzer reaches the lookups. Whatever the object holds, the load
 * succeeds (a merged index that cannot be used is not used), every lookup
 * stays in bounds, and a chunk it says is there is read from a pack that
 * is not there: the read fails, saying why in one line.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_store.h"

#define MX_MAGIC "airlock-midx-01\n"
#define MX_HDR (16 + 4 + 4 + 8)
#define MX_REC (32 + 8 + 4 + 4 + 4)

static void put_midx(const uint8_t *data, size_t len)
{
	char p[160];
	snprintf(p, sizeof(p), "%s/tenants/" FZ_TENANT "/midx", fz_dir);
	mkdir(p, 0700);
	snprintf(p, sizeof(p), "%s/tenants/" FZ_TENANT "/midx/chunks", fz_dir);
	unlink(p);
	if (!len)
		return;
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	check(fd >= 0);
	check(write_full(fd, data, len) == 0);
	close(fd);
}

/* One pack of one chunk (id all 0x11), its index well-formed. */
static void put_index(void)
{
	uint8_t idx[FZ_INDEX_HDR + FZ_INDEX_REC + SHA256_DIGEST_LENGTH] = { 0 };
	memcpy(idx, FZ_INDEX_MAGIC, FZ_INDEX_MAGIC_LEN);
	fz_le64(idx + FZ_INDEX_MAGIC_LEN, FZ_PACK_MAGIC_LEN + FZ_REC_HDR + 10);
	fz_le32(idx + FZ_INDEX_MAGIC_LEN + 8, 1);
	uint8_t *r = idx + FZ_INDEX_HDR;
	memset(r, 0x11, 32);
	fz_le64(r + 32, FZ_PACK_MAGIC_LEN + FZ_REC_HDR);
	fz_le32(r + 40, 10);
	fz_le32(r + 44, 10);
	SHA256(idx, FZ_INDEX_HDR + FZ_INDEX_REC, idx + FZ_INDEX_HDR + FZ_INDEX_REC);
	fz_put("index", idx, sizeof(idx));
	fz_put("packs", NULL, 0);
}

static void look_up(struct st_cas *c, const uint8_t *id)
{
	struct st_id k;
	memcpy(k.b, id, 32);
	if (!st_cas_has(c, &k)) {
		check(st_cas_chunk_len(c, &k) == 0 && st_cas_stored_len(c, &k) == 0);
		check(!st_cas_owner(c, &k));
		return;
	}
	check(st_cas_chunk_len(c, &k) <= ST_CHUNK_MAX);
	check(st_cas_stored_len(c, &k) > FZ_REC_HDR);
	const char *owner = st_cas_owner(c, &k);
	check(owner && strcmp(owner, FZ_PACK_HEX) == 0);
	void *data = (void *)1;
	size_t len = 7;
	struct al_error err = { 0 };
	check(st_cas_get(c, &k, &data, &len, &err) < 0);
	check(err.msg[0] && !strchr(err.msg, '\n'));
	check(data == (void *)1 && len == 7);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	fz_store();
	put_index();
	const uint8_t *in = data + 1;
	size_t len = size - 1;
	uint8_t *obj = NULL;
	size_t olen = len;
	if (data[0] & 1) {
		size_t n = len / MX_REC;
		olen = MX_HDR + 1024 + 32 + n * MX_REC + 32;
		obj = calloc(1, olen);
		check(obj);
		memcpy(obj, MX_MAGIC, 16);
		fz_le32(obj + 16, 1);
		fz_le64(obj + 24, n);
		uint32_t count[256] = { 0 };
		for (size_t i = 0; i < n; i++)
			count[in[i * MX_REC]]++;
		uint32_t sum = 0;
		for (int b = 0; b < 256; b++) {
			sum += count[b];
			fz_le32(obj + MX_HDR + (size_t)b * 4, sum);
		}
		uint8_t *pk = obj + MX_HDR + 1024;
		for (int i = 0; i < 32; i++)
			pk[i] = i == 31 ? 0xaa : 0;
		memcpy(pk + 32, in, n * MX_REC);
		SHA256(obj, olen - 32, obj + olen - 32);
	} else {
		obj = malloc(len ? len : 1);
		check(obj);
		memcpy(obj, in, len);
	}
	put_midx(obj, olen);

	struct st_cas *c = NULL;
	struct al_error err = { 0 };
	check(st_cas_open_lazy(fz_store(), FZ_TENANT, 1, &c, &err) == 0);
	check(st_cas_load(c, &err) == 0);
	struct st_cas_stats st;
	st_cas_stats(c, &st);
	check(st.indexes_read <= 1 && st.chunks_new == 0);
	uint8_t known[32];
	memset(known, 0x11, sizeof(known));
	look_up(c, known);
	for (size_t off = 0; off + 32 <= olen && off < 64 * MX_REC; off += MX_REC / 4)
		look_up(c, obj + off);
	st_cas_close(c);
	free(obj);
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pack reader (a chunk's record read from its pack object, checked
 * against its index, decompressed and verified: st_cas_get, and st_cas_read
 * of a reader) on arbitrary bytes. The first byte picks the mode:
 *   odd:  the rest is a pack object, and its index is made from its own
 *         records as the writer makes it (as far as they go), so every
 *         chunk the index names is read from bytes the fuzzer chose;
 *   even: the rest is [u16 n][n bytes: an index without its checksum]
 *         [a pack object]: index and pack disagree as they please.
 * Every read either gives exactly the chunk (the length its index says,
 * bytes whose SHA-256 is its id) or fails with a reason in one line, and
 * the two ways of reading agree.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_store.h"

#define RECS_MAX 4096

/* An index (with its checksum) of the records at the start of pack; its
 * length, or 0 when there is none. */
static size_t index_of(const uint8_t *pack, size_t len, uint8_t **ret)
{
	if (len < FZ_PACK_MAGIC_LEN || memcmp(pack, FZ_PACK_MAGIC, FZ_PACK_MAGIC_LEN) != 0)
		return 0;
	uint8_t *idx = malloc(FZ_INDEX_HDR + (size_t)RECS_MAX * FZ_INDEX_REC + 32);
	check(idx);
	size_t off = FZ_PACK_MAGIC_LEN, n = 0;
	while (n < RECS_MAX && len - off >= FZ_REC_HDR) {
		const uint8_t *rec = pack + off;
		uint32_t ulen = fz_get32(rec + 32), clen = fz_get32(rec + 36);
		if (clen == 0 || clen > len - off - FZ_REC_HDR)
			break;
		uint8_t *r = idx + FZ_INDEX_HDR + n * FZ_INDEX_REC;
		memcpy(r, rec, 32);
		fz_le64(r + 32, off + FZ_REC_HDR);
		fz_le32(r + 40, clen);
		fz_le32(r + 44, ulen);
		off += FZ_REC_HDR + clen;
		n++;
	}
	if (n == 0) {
		free(idx);
		return 0;
	}
	memcpy(idx, FZ_INDEX_MAGIC, FZ_INDEX_MAGIC_LEN);
	fz_le64(idx + FZ_INDEX_MAGIC_LEN, off);
	fz_le32(idx + FZ_INDEX_MAGIC_LEN + 8, (uint32_t)n);
	fz_le32(idx + FZ_INDEX_MAGIC_LEN + 12, 0);
	size_t ilen = FZ_INDEX_HDR + n * FZ_INDEX_REC;
	SHA256(idx, ilen, idx + ilen);
	*ret = idx;
	return ilen + 32;
}

struct reading {
	struct st_cas *c;
	struct st_cas_reader *rd;
};

static void read_one(struct reading *x, const struct st_id *id)
{
	void *a = NULL;
	size_t alen = 0;
	struct al_error ea = { 0 };
	int ra = st_cas_get(x->c, id, &a, &alen, &ea);
	const void *b = NULL;
	size_t blen = 0;
	struct al_error eb = { 0 };
	int rb = st_cas_read(x->rd, id, &b, &blen, &eb);
	check(ra == rb);
	if (ra < 0) {
		check(ea.msg[0] && !strchr(ea.msg, '\n'));
		check(strcmp(ea.msg, eb.msg) == 0);
		check(!a);
		return;
	}
	check(alen == st_cas_chunk_len(x->c, id));
	check(alen == blen && (alen == 0 || memcmp(a, b, alen) == 0));
	uint8_t sum[SHA256_DIGEST_LENGTH];
	SHA256(a, alen, sum);
	check(memcmp(sum, id->b, sizeof(sum)) == 0);
	free(a);
}

static int on_pack(const char *hex, const struct st_id *ids, size_t n, void *ud)
{
	(void)hex;
	for (size_t i = 0; i < n; i++)
		read_one(ud, &ids[i]);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	struct st_objstore *os = fz_store();
	const uint8_t *pack = data + 1;
	size_t plen = size - 1;
	uint8_t *idx = NULL;
	size_t ilen = 0;
	if (data[0] & 1) {
		ilen = index_of(pack, plen, &idx);
		if (ilen == 0)
			return 0;
	} else {
		if (plen < 2)
			return 0;
		size_t n = (size_t)pack[0] | (size_t)pack[1] << 8;
		if (n > plen - 2)
			return 0;
		idx = malloc(n + SHA256_DIGEST_LENGTH);
		check(idx);
		memcpy(idx, pack + 2, n);
		SHA256(idx, n, idx + n);
		ilen = n + SHA256_DIGEST_LENGTH;
		pack += 2 + n;
		plen -= 2 + n;
	}
	fz_put("index", idx, ilen);
	fz_put("packs", pack, plen);
	free(idx);

	struct st_cas *c = NULL;
	struct al_error err = { 0 };
	if (st_cas_open(os, FZ_TENANT, 1, &c, &err) < 0) {
		check(err.msg[0] && !strchr(err.msg, '\n'));
		return 0;
	}
	struct reading x = { .c = c };
	check(st_cas_reader_new(c, &x.rd, NULL) == 0);
	check(st_cas_each_pack(c, on_pack, &x, NULL) == 0);
	st_cas_reader_free(x.rd);
	st_cas_close(c);
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pack index parser (st_cas_open reads every index object of a tenant)
 * on arbitrary bytes. The first byte picks the mode: even, the rest is a
 * whole index object (its checksum must hold everything off); odd, the rest
 * is an index without its checksum, and the right one is appended, so the
 * fuzzer reaches the checks behind it. An index that loads must describe
 * chunks as the writer does (one pack, lengths in bounds); a refusal says
 * why in one line. No pack object is there: every read must fail, saying
 * why.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_store.h"

struct seen {
	struct st_cas *c;
	size_t packs, chunks;
};

static int on_pack(const char *hex, const struct st_id *ids, size_t n, void *ud)
{
	struct seen *s = ud;
	s->packs++;
	check(strcmp(hex, FZ_PACK_HEX) == 0);
	check(n >= 1);
	for (size_t i = 0; i < n; i++) {
		s->chunks++;
		const char *owner = st_cas_owner(s->c, &ids[i]);
		check(owner && strcmp(owner, FZ_PACK_HEX) == 0);
		check(st_cas_chunk_len(s->c, &ids[i]) <= ST_CHUNK_MAX);
		check(st_cas_stored_len(s->c, &ids[i]) > FZ_REC_HDR);
		check(st_cas_has(s->c, &ids[i]));
	}
	/* The pack object is missing: a read fails, and says why. */
	void *data = (void *)1;
	size_t len = 7;
	struct al_error err = { 0 };
	check(st_cas_get(s->c, &ids[0], &data, &len, &err) < 0);
	check(err.msg[0] && !strchr(err.msg, '\n'));
	check(data == (void *)1 && len == 7);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	struct st_objstore *os = fz_store();
	size_t len = size - 1;
	uint8_t *idx = malloc(len + SHA256_DIGEST_LENGTH);
	check(idx);
	memcpy(idx, data + 1, len);
	if (data[0] & 1) {
		SHA256(idx, len, idx + len);
		len += SHA256_DIGEST_LENGTH;
	}
	fz_put("index", idx, len);
	fz_put("packs", NULL, 0);
	free(idx);

	struct st_cas *c = NULL;
	struct al_error err = { 0 };
	int r = st_cas_open(os, FZ_TENANT, 1, &c, &err);
	if (r < 0) {
		check(!c);
		check(err.msg[0] && !strchr(err.msg, '\n'));
		return 0;
	}
	struct seen s = { .c = c };
	check(st_cas_each_pack(c, on_pack, &s, NULL) == 0);
	check(s.packs == 1 && s.chunks >= 1);
	struct st_cas_stats st;
	st_cas_stats(c, &st);
	check(st.chunks_new == 0 && st.packs_written == 0);
	st_cas_close(c);
	return 0;
}

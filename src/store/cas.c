/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Chunks in packs.
 *
 * Pack object: PACK_MAGIC, then records
 *	[32-byte id][u32 ulen][u32 clen][clen bytes: one zstd frame]
 * (little-endian), so a pack can be walked without its index (fsck).
 *
 * Index object (its key names the pack, "tenants/<t>/index/<pack-id>"):
 *	INDEX_MAGIC (16 bytes), u64 pack size, u32 record count, u32 zero,
 *	records [32-byte id][u64 offset of the frame][u32 clen][u32 ulen],
 *	SHA-256 of everything before it.
 * The records tile the pack exactly, in order; anything else is refused.
 *
 * Merged index object ("tenants/<t>/midx/chunks"), a cache of the index
 * objects of many packs in one, so that opening the store costs what its
 * newest packs hold, not what all of them do:
 *	MIDX_MAGIC (16 bytes), u32 pack count, u32 zero, u64 record count,
 *	fanout: 256 u32, the count of records whose id's first byte <= i,
 *	the packs' ids (32 bytes each),
 *	records sorted by id, each id once:
 *		[32-byte id][u64 offset][u32 clen][u32 ulen][u32 pack number],
 *	SHA-256 of everything before it.
 * It is mapped and searched in place, not read: only the fanout and the
 * records a lookup touches are. Whether it can be used is decided from the
 * listing of index objects: every pack it names must still have one (GC
 * deleted none of them since); the packs it does not name are read as
 * before. A merged index that fails those checks is ignored (and written
 * anew); a damaged record makes a chunk look absent (stored again) or its
 * location wrong: the read (checked against the pack's record and the
 * chunk's id) then finds it through the index objects and drops the merged
 * index (cas_get). It is merged into a new one only when its checksum
 * holds.
 * Writers with the store's lock write it (rename over the old one) when
 * none is usable and the store has MIDX_MIN_PACKS packs, or when more than
 * MIDX_NEW_MAX packs are not in it.
 *
 * In memory: parallel arrays of chunk ids and locations, in pack order
 * (the chunks of one pack are contiguous, the open pack's are last), and
 * an open-addressing table id -> position for O(1) lookups.
 *
 * Concurrent writers (st_cas_put_shared) hash and compress without the
 * lock, then take it to look up, append to the open pack and, when it is
 * full, hand it over: the pack gets its number (a pending entry in packs,
 * hex still empty) and a fresh open pack starts at once, while the writer
 * that filled it hashes and writes it without the lock. The index object
 * is built from the pack's own records, so a sealing writer never reads
 * ids/locs, which the others may be growing meanwhile.
 */
#include "store/cas.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "common/cleanup.h"
#include "common/encode.h"
#include "common/log.h"

#define PACK_MAGIC "airlock-pack-1\n"
#define PACK_MAGIC_LEN (sizeof(PACK_MAGIC) - 1)
#define INDEX_MAGIC "airlock-index-1\n"
#define INDEX_MAGIC_LEN (sizeof(INDEX_MAGIC) - 1)
#define REC_HDR (ST_ID_LEN + 4 + 4)
#define INDEX_HDR (INDEX_MAGIC_LEN + 8 + 4 + 4)
#define INDEX_REC (ST_ID_LEN + 8 + 4 + 4)
#define INDEX_TRAILER ST_ID_LEN
/* No record is larger, and no pack: it is sealed once past the target. */
#define CLEN_MAX ZSTD_COMPRESSBOUND(ST_CHUNK_MAX)
#define PACK_MAX ((size_t)ST_PACK_TARGET + REC_HDR + CLEN_MAX)
/* Every record takes at least REC_HDR + 1 bytes of its pack. */
#define INDEX_RECS_MAX ((PACK_MAX - PACK_MAGIC_LEN) / (REC_HDR + 1))
#define INDEX_MAX (INDEX_HDR + INDEX_RECS_MAX * INDEX_REC + INDEX_TRAILER)
#define RECS_MAX (UINT32_MAX / 4)
#define MIDX_MAGIC "airlock-midx-01\n"
#define MIDX_MAGIC_LEN (sizeof(MIDX_MAGIC) - 1)
#define MIDX_HDR (MIDX_MAGIC_LEN + 4 + 4 + 8)
#define MIDX_FAN (256 * 4)
#define MIDX_REC (ST_ID_LEN + 8 + 4 + 4 + 4)
#define MIDX_PACKS_MAX (1u << 24)
#define MIDX_MIN_PACKS 8
#define MIDX_NEW_MAX 16

struct cas_loc {
	uint64_t off;  /* of the zstd frame in its pack */
	uint32_t pack; /* index into packs; n_packs is the open pack */
	uint32_t clen, ulen;
};

struct cas_pack {
	char hex[ST_ID_HEX + 1];
	size_t first, n; /* its chunks: ids[first .. first + n) */
};

struct st_cas {
	struct st_objstore *os;
	char tenant[ST_TENANT_MAX + 1];
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	int level;
	size_t target;

	struct st_id *ids;
	struct cas_loc *locs;
	size_t n_recs, cap_recs;

	struct cas_pack *packs;
	size_t n_packs, cap_packs;

	uint64_t *slots; /* slot_make(); 0 is empty */
	size_t n_slots;	 /* a power of two, kept at most half full */
	size_t n_used;

	uint8_t *open; /* the open pack's bytes */
	size_t open_len, open_cap;
	size_t open_first; /* its first chunk in ids/locs */

	struct st_cas_stats stats;

	/* For st_cas_put_shared: guards everything above but os, tenant,
	 * target and dctx (read-only while writers run; cctx is unused). */
	pthread_mutex_t lock;
	uint8_t *spare; /* a sealed pack's buffer, kept for the next one */
	size_t spare_cap;
	int broken; /* a pack handed over could not be written: every write fails */
	/* The index objects are not read yet (st_cas_open_lazy): the first
	 * operation that needs them reads them (st_cas_load). */
	bool lazy;
	/* The merged index, mapped (st_cas_open_lazy only): its packs are
	 * packs[0 .. midx_packs), its records are not in ids/locs. */
	bool use_midx;
	const uint8_t *midx;
	size_t midx_len, midx_packs, midx_recs;
	const uint8_t *midx_fan, *midx_rec;
};

struct st_cas_writer {
	struct st_cas *c;
	ZSTD_CCtx *cctx;
	uint8_t *rec; /* REC_HDR + CLEN_MAX: one record, compressed outside the lock */
};

/* ---- ids ---- */

void st_id_hex(const struct st_id *id, char out[ST_ID_HEX + 1])
{
	enc_hex(id->b, ST_ID_LEN, out);
}

int st_id_parse(const char *hex, size_t len, struct st_id *ret)
{
	struct st_id id;
	if (!hex || len != ST_ID_HEX || enc_unhex_lower(hex, len, id.b, ST_ID_LEN) < 0)
		return -EINVAL;
	*ret = id;
	return 0;
}

void st_sha256(const void *data, size_t len, struct st_id *ret)
{
	SHA256(data, len, ret->b);
}

/* ---- little-endian fields ---- */

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* ---- the table ---- */

static size_t slot_of(const struct st_id *id, size_t n_slots)
{
	/* The id is a SHA-256: any 8 of its bytes are a good hash. */
	return (size_t)get_u64(id->b) & (n_slots - 1);
}

/* A slot: the position + 1 (0: empty), and above it 32 other bits of the
 * id, so that a probe past another chunk rarely reads its id. */
static uint64_t slot_make(const struct st_id *id, size_t pos)
{
	return (uint64_t)get_u32(id->b + 8) << 32 | (uint64_t)(pos + 1);
}

static bool slot_is(const struct st_cas *c, uint64_t v, const struct st_id *id)
{
	return v >> 32 == get_u32(id->b + 8) &&
	       memcmp(c->ids[(uint32_t)v - 1].b, id->b, ST_ID_LEN) == 0;
}

/* The position of id, or SIZE_MAX. */
static size_t lookup(const struct st_cas *c, const struct st_id *id)
{
	if (c->n_slots == 0)
		return SIZE_MAX;
	for (size_t i = slot_of(id, c->n_slots);; i = (i + 1) & (c->n_slots - 1)) {
		uint64_t v = c->slots[i];
		if (v == 0)
			return SIZE_MAX;
		if (slot_is(c, v, id))
			return (uint32_t)v - 1;
	}
}

static void slot_put(uint64_t *slots, size_t n_slots, const struct st_id *id, uint64_t v)
{
	size_t i = slot_of(id, n_slots);
	while (slots[i] != 0)
		i = (i + 1) & (n_slots - 1);
	slots[i] = v;
}

/* Room in the table for n more chunks. */
static int table_reserve(struct st_cas *c, size_t n)
{
	if ((c->n_used + n) * 2 <= c->n_slots)
		return 0;
	size_t size = c->n_slots ? c->n_slots : 1024;
	while (size / 2 < c->n_used + n)
		size *= 2;
	uint64_t *slots = calloc(size, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_slots; i++) {
		uint64_t v = c->slots[i];
		if (v)
			slot_put(slots, size, &c->ids[(uint32_t)v - 1], v);
	}
	free(c->slots);
	c->slots = slots;
	c->n_slots = size;
	return 0;
}

/* Room for n more records. */
static int recs_reserve(struct st_cas *c, size_t n)
{
	if (n > RECS_MAX - c->n_recs)
		return -E2BIG;
	if (c->n_recs + n <= c->cap_recs)
		return table_reserve(c, n);
	size_t cap = c->cap_recs ? c->cap_recs : 1024;
	while (cap < c->n_recs + n)
		cap *= 2;
	struct st_id *ids = realloc(c->ids, cap * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	c->ids = ids;
	struct cas_loc *locs = realloc(c->locs, cap * sizeof(*locs));
	if (!locs)
		return -ENOMEM;
	c->locs = locs;
	c->cap_recs = cap;
	return table_reserve(c, n);
}

/* Appends a chunk record; indexes it unless the id is known already
 * (*known: where, or SIZE_MAX). */
static int add_rec(struct st_cas *c, const struct st_id *id, const struct cas_loc *loc,
		   size_t *known)
{
	int r = recs_reserve(c, 1);
	if (r < 0)
		return r;
	size_t pos = c->n_recs++;
	c->ids[pos] = *id;
	c->locs[pos] = *loc;
	for (size_t i = slot_of(id, c->n_slots);; i = (i + 1) & (c->n_slots - 1)) {
		uint64_t v = c->slots[i];
		if (v == 0) {
			c->slots[i] = slot_make(id, pos);
			c->n_used++;
			*known = SIZE_MAX;
			return 0;
		}
		if (slot_is(c, v, id)) {
			*known = (uint32_t)v - 1;
			return 0;
		}
	}
}

/* ---- the merged index ---- */

static size_t midx_fan(const struct st_cas *c, int b)
{
	return b < 0 ? 0 : get_u32(c->midx_fan + (size_t)b * 4);
}

/* Where the merged index has id; false when it does not, or when its
 * record is out of bounds (then the chunk is stored again). */
static bool midx_find(const struct st_cas *c, const struct st_id *id, struct cas_loc *loc)
{
	if (!c->midx)
		return false;
	size_t lo = midx_fan(c, id->b[0] - 1), hi = midx_fan(c, id->b[0]);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const uint8_t *r = c->midx_rec + mid * MIDX_REC;
		int cmp = memcmp(r, id->b, ST_ID_LEN);
		if (cmp < 0) {
			lo = mid + 1;
			continue;
		}
		if (cmp > 0) {
			hi = mid;
			continue;
		}
		loc->off = get_u64(r + ST_ID_LEN);
		loc->clen = get_u32(r + ST_ID_LEN + 8);
		loc->ulen = get_u32(r + ST_ID_LEN + 12);
		loc->pack = get_u32(r + ST_ID_LEN + 16);
		return loc->pack < c->midx_packs && loc->clen > 0 && loc->clen <= CLEN_MAX &&
		       loc->ulen <= ST_CHUNK_MAX && loc->off >= PACK_MAGIC_LEN + REC_HDR &&
		       loc->off <= PACK_MAX - loc->clen;
	}
	return false;
}

/* Where the chunk is: the table (the packs read, the open one), then the
 * merged index. */
static bool find(const struct st_cas *c, const struct st_id *id, struct cas_loc *loc)
{
	size_t pos = lookup(c, id);
	if (pos != SIZE_MAX) {
		*loc = c->locs[pos];
		return true;
	}
	return midx_find(c, id, loc);
}

static int add_pack(struct st_cas *c, const char *hex, size_t first, size_t n)
{
	if (c->n_packs >= UINT32_MAX - 1)
		return -E2BIG;
	if (c->n_packs == c->cap_packs) {
		size_t cap = c->cap_packs ? c->cap_packs * 2 : 16;
		struct cas_pack *p = realloc(c->packs, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		c->packs = p;
		c->cap_packs = cap;
	}
	struct cas_pack *p = &c->packs[c->n_packs++];
	memcpy(p->hex, hex, ST_ID_HEX + 1);
	p->first = first;
	p->n = n;
	return 0;
}

/* ---- index objects ---- */

static void obj_key(const struct st_cas *c, const char *kind, const char *hex,
		    char out[ST_KEY_MAX + 1])
{
	snprintf(out, ST_KEY_MAX + 1, "tenants/%s/%s/%s", c->tenant, kind, hex);
}

/* Checks an index object of the pack hex and adds its chunks. */
static int load_index(struct st_cas *c, const char *key, const char *hex, const uint8_t *p,
		      size_t len, struct al_error *err)
{
	if (len < INDEX_HDR + INDEX_TRAILER || memcmp(p, INDEX_MAGIC, INDEX_MAGIC_LEN) != 0)
		return al_error_set(err, -EBADMSG, "index %s: not an airlock-index-1 object", key);
	struct st_id sum;
	st_sha256(p, len - INDEX_TRAILER, &sum);
	if (memcmp(sum.b, p + len - INDEX_TRAILER, ST_ID_LEN) != 0)
		return al_error_set(err, -EBADMSG, "index %s: checksum mismatch (corrupt)", key);
	uint64_t pack_size = get_u64(p + INDEX_MAGIC_LEN);
	uint32_t count = get_u32(p + INDEX_MAGIC_LEN + 8);
	if (get_u32(p + INDEX_MAGIC_LEN + 12) != 0 || count == 0 || count > INDEX_RECS_MAX ||
	    len != INDEX_HDR + (size_t)count * INDEX_REC + INDEX_TRAILER || pack_size > PACK_MAX)
		return al_error_set(err, -EBADMSG, "index %s: bad header", key);

	size_t first = c->n_recs;
	uint32_t pack = (uint32_t)c->n_packs;
	uint64_t expect = PACK_MAGIC_LEN + REC_HDR;
	int rr = recs_reserve(c, count);
	if (rr < 0)
		return al_error_set_errno(err, rr, "index %s", key);
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *r = p + INDEX_HDR + (size_t)i * INDEX_REC;
		struct st_id id;
		memcpy(id.b, r, ST_ID_LEN);
		struct cas_loc loc = {
			.off = get_u64(r + ST_ID_LEN),
			.clen = get_u32(r + ST_ID_LEN + 8),
			.ulen = get_u32(r + ST_ID_LEN + 12),
			.pack = pack,
		};
		if (loc.off != expect || loc.clen == 0 || loc.clen > CLEN_MAX ||
		    loc.ulen > ST_CHUNK_MAX || loc.off + loc.clen > pack_size)
			return al_error_set(err, -EBADMSG, "index %s: record %u is out of place",
					    key, i);
		expect = loc.off + loc.clen + REC_HDR;
		size_t at;
		rr = add_rec(c, &id, &loc, &at);
		if (rr < 0)
			return al_error_set_errno(err, rr, "index %s", key);
		if (at != SIZE_MAX && c->locs[at].pack == pack) {
			char idhex[ST_ID_HEX + 1];
			st_id_hex(&id, idhex);
			return al_error_set(err, -EBADMSG, "index %s: chunk %s listed twice", key,
					    idhex);
		}
	}
	if (expect - REC_HDR != pack_size)
		return al_error_set(err, -EBADMSG, "index %s: records do not cover the pack", key);
	int r = add_pack(c, hex, first, count);
	if (r < 0)
		return al_error_set_errno(err, r, "index %s", key);
	return 0;
}

struct load_ctx {
	struct st_cas *c;
	struct al_error *err;
	size_t prefix_len;
	char (*names)[ST_ID_HEX + 1];
	size_t n, cap;
};

static int list_one(const char *key, void *ud)
{
	struct load_ctx *l = ud;
	const char *name = key + l->prefix_len;
	struct st_id pid;
	if (strlen(name) != ST_ID_HEX || st_id_parse(name, ST_ID_HEX, &pid) < 0)
		return al_error_set(l->err, -EBADMSG, "index %s: its name is not a pack id", key);
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char(*names)[ST_ID_HEX + 1] = realloc(l->names, cap * sizeof(*names));
		if (!names)
			return al_error_set(l->err, -ENOMEM, "chunk store: out of memory");
		l->names = names;
		l->cap = cap;
	}
	st_id_hex(&pid, l->names[l->n++]);
	return 0;
}

static int load_pack(struct st_cas *c, const char *hex, struct al_error *err)
{
	char key[ST_KEY_MAX + 1];
	obj_key(c, "index", hex, key);
	_cleanup_free_ void *data = NULL;
	size_t len = 0;
	int r = st_obj_get(c->os, key, INDEX_MAX, &data, &len, err);
	if (r < 0)
		return al_error_set(err, r, "index %s: cannot read it", key);
	c->stats.indexes_read++;
	return load_index(c, key, hex, data, len, err);
}

static int hex_cmp(const void *a, const void *b)
{
	return memcmp(a, b, ST_ID_HEX);
}

static int rec_cmp(const void *a, const void *b)
{
	return memcmp(a, b, ST_ID_LEN);
}

/*
 * Maps the merged index and takes its packs as packs[0 ..) when every pack
 * it names is listed (names: sorted, n of them; covered[i]: names[i] is
 * one of them). 1: in use; 0: none, or not usable; -ENOMEM.
 */
static int midx_open(struct st_cas *c, char (*names)[ST_ID_HEX + 1], size_t n, bool *covered)
{
	char key[ST_KEY_MAX + 1];
	obj_key(c, "midx", "chunks", key);
	struct al_error e = { 0 };
	const void *p = NULL;
	size_t len = 0;
	size_t max = MIDX_HDR + MIDX_FAN + (size_t)MIDX_PACKS_MAX * ST_ID_LEN +
		     (size_t)RECS_MAX * MIDX_REC + ST_ID_LEN;
	if (st_obj_map(c->os, key, max, &p, &len, &e) < 0)
		return 0;
	const uint8_t *m = p;
	bool ok = len >= MIDX_HDR + MIDX_FAN + ST_ID_LEN &&
		  memcmp(m, MIDX_MAGIC, MIDX_MAGIC_LEN) == 0;
	uint64_t np = ok ? get_u32(m + MIDX_MAGIC_LEN) : 0;
	uint64_t nr = ok ? get_u64(m + MIDX_MAGIC_LEN + 8) : 0;
	ok = ok && get_u32(m + MIDX_MAGIC_LEN + 4) == 0 && np <= MIDX_PACKS_MAX && nr <= RECS_MAX &&
	     len == MIDX_HDR + MIDX_FAN + np * ST_ID_LEN + nr * MIDX_REC + ST_ID_LEN;
	const uint8_t *fan = m + MIDX_HDR, *pk = fan + MIDX_FAN;
	for (size_t b = 0, prev = 0; ok && b < 256; b++) {
		size_t f = get_u32(fan + b * 4);
		ok = f >= prev && (b < 255 || f == nr);
		prev = f;
	}
	for (size_t i = 0; ok && i < np; i++) {
		struct st_id pid;
		char hex[ST_ID_HEX + 1];
		memcpy(pid.b, pk + i * ST_ID_LEN, ST_ID_LEN);
		st_id_hex(&pid, hex);
		char(*at)[ST_ID_HEX + 1] = bsearch(hex, names, n, sizeof(*names), hex_cmp);
		ok = at && !covered[at - names];
		if (ok)
			covered[at - names] = true;
	}
	if (!ok) {
		memset(covered, 0, n * sizeof(*covered));
		st_obj_unmap(p, len);
		return 0;
	}
	for (size_t i = 0; i < np; i++) {
		struct st_id pid;
		char hex[ST_ID_HEX + 1];
		memcpy(pid.b, pk + i * ST_ID_LEN, ST_ID_LEN);
		st_id_hex(&pid, hex);
		if (add_pack(c, hex, 0, 0) < 0) {
			st_obj_unmap(p, len);
			return -ENOMEM;
		}
	}
	c->midx = m;
	c->midx_len = len;
	c->midx_packs = np;
	c->midx_recs = nr;
	c->midx_fan = fan;
	c->midx_rec = pk + np * ST_ID_LEN;
	c->stats.midx_chunks = nr;
	return 1;
}

/* The merged index is wrong somewhere: removed, so that the next load
 * reads every index object and writes it anew. */
static void midx_discard(struct st_cas *c)
{
	char key[ST_KEY_MAX + 1];
	obj_key(c, "midx", "chunks", key);
	struct al_error e = { 0 };
	st_obj_del(c->os, key, &e);
}

static void midx_put_rec(uint8_t *r, const struct st_id *id, const struct cas_loc *loc)
{
	memcpy(r, id->b, ST_ID_LEN);
	put_u64(r + ST_ID_LEN, loc->off);
	put_u32(r + ST_ID_LEN + 8, loc->clen);
	put_u32(r + ST_ID_LEN + 12, loc->ulen);
	put_u32(r + ST_ID_LEN + 16, loc->pack);
}

/*
 * Writes the merged index of every pack the store knows (right after the
 * load: no chunk is in the open pack yet). A cache: when it cannot be
 * written, the next load reads the index objects as before.
 */
static void midx_write(struct st_cas *c)
{
	/* The records merged from the old one must be as it was written: a
	 * damaged one is dropped instead, and the next load reads every
	 * index object. */
	if (c->midx) {
		struct st_id sum;
		st_sha256(c->midx, c->midx_len - ST_ID_LEN, &sum);
		if (memcmp(sum.b, c->midx + c->midx_len - ST_ID_LEN, ST_ID_LEN) != 0) {
			midx_discard(c);
			return;
		}
	}
	/* The table's chunks the merged index does not have, each once. */
	size_t ne = 0;
	_cleanup_free_ uint8_t *ex = malloc((c->n_recs ? c->n_recs : 1) * MIDX_REC);
	if (!ex || c->n_packs > MIDX_PACKS_MAX)
		return;
	for (size_t i = 0; i < c->n_recs; i++) {
		struct cas_loc l;
		if (lookup(c, &c->ids[i]) == i && !midx_find(c, &c->ids[i], &l))
			midx_put_rec(ex + ne++ * MIDX_REC, &c->ids[i], &c->locs[i]);
	}
	qsort(ex, ne, MIDX_REC, rec_cmp);
	size_t total = c->midx_recs + ne;
	size_t len = MIDX_HDR + MIDX_FAN + c->n_packs * ST_ID_LEN + total * MIDX_REC + ST_ID_LEN;
	_cleanup_free_ uint8_t *buf = malloc(len);
	if (!buf)
		return;
	memcpy(buf, MIDX_MAGIC, MIDX_MAGIC_LEN);
	put_u32(buf + MIDX_MAGIC_LEN, (uint32_t)c->n_packs);
	put_u32(buf + MIDX_MAGIC_LEN + 4, 0);
	put_u64(buf + MIDX_MAGIC_LEN + 8, total);
	uint8_t *fan = buf + MIDX_HDR, *pk = fan + MIDX_FAN;
	for (size_t i = 0; i < c->n_packs; i++) {
		struct st_id pid;
		if (st_id_parse(c->packs[i].hex, ST_ID_HEX, &pid) < 0)
			return;
		memcpy(pk + i * ST_ID_LEN, pid.b, ST_ID_LEN);
	}
	/* Both sorted: merged, the table's record first on a tie (the
	 * merged index's may be one that failed its bounds). */
	uint8_t *out = pk + c->n_packs * ST_ID_LEN;
	size_t i = 0, j = 0, k = 0;
	uint32_t count[256] = { 0 };
	while (i < c->midx_recs || j < ne) {
		const uint8_t *a = i < c->midx_recs ? c->midx_rec + i * MIDX_REC : NULL;
		const uint8_t *b = j < ne ? ex + j * MIDX_REC : NULL;
		int cmp = !a ? 1 : !b ? -1 : memcmp(a, b, ST_ID_LEN);
		const uint8_t *r = cmp < 0 ? a : b;
		if (cmp >= 0)
			j++;
		if (cmp <= 0)
			i++;
		memcpy(out + k++ * MIDX_REC, r, MIDX_REC);
		count[r[0]]++;
	}
	put_u64(buf + MIDX_MAGIC_LEN + 8, k);
	len = MIDX_HDR + MIDX_FAN + c->n_packs * ST_ID_LEN + k * MIDX_REC + ST_ID_LEN;
	uint32_t sum = 0;
	for (size_t b = 0; b < 256; b++) {
		sum += count[b];
		put_u32(fan + b * 4, sum);
	}
	struct st_id h;
	st_sha256(buf, len - ST_ID_LEN, &h);
	memcpy(buf + len - ST_ID_LEN, h.b, ST_ID_LEN);
	char key[ST_KEY_MAX + 1];
	obj_key(c, "midx", "chunks", key);
	struct al_error e = { 0 };
	if (st_obj_put(c->os, key, buf, len, &e) == 0)
		c->stats.midx_written++;
}

/* ---- open and close ---- */

void st_cas_close(struct st_cas *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->cctx);
	ZSTD_freeDCtx(c->dctx);
	free(c->ids);
	free(c->locs);
	free(c->packs);
	free(c->slots);
	free(c->open);
	free(c->spare);
	st_obj_unmap(c->midx, c->midx_len);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

DEFINE_CLEANUP_FUNC(struct st_cas, st_cas_close)

static int cas_open(struct st_objstore *os, const char *tenant, int level, bool read_index,
		    struct st_cas **ret, struct al_error *err)
{
	if (!st_tenant_valid(tenant))
		return al_error_set(err, -EINVAL, "chunk store: invalid tenant name '%.*s'",
				    ST_TENANT_MAX, tenant ? tenant : "(null)");
	if (level < 1 || level > 19)
		return al_error_set(err, -EINVAL, "chunk store: zstd level %d is not in 1..19",
				    level);
	_cleanup_(st_cas_closep) struct st_cas *c = calloc(1, sizeof(*c));
	if (!c)
		return al_error_set(err, -ENOMEM, "chunk store: out of memory");
	if (pthread_mutex_init(&c->lock, NULL) != 0) {
		free(TAKE_PTR(c));
		return al_error_set(err, -ENOMEM, "chunk store: cannot make a lock");
	}
	c->os = os;
	memcpy(c->tenant, tenant, strlen(tenant) + 1);
	c->target = ST_PACK_TARGET;
	c->level = level;
	c->cctx = ZSTD_createCCtx();
	c->dctx = ZSTD_createDCtx();
	if (!c->cctx || !c->dctx)
		return al_error_set(err, -ENOMEM, "chunk store: out of memory");
	if (ZSTD_isError(ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_contentSizeFlag, 1)))
		return al_error_set(err, -EINVAL, "chunk store: zstd refuses level %d", level);

	c->lazy = read_index;
	int r = st_cas_load(c, err);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(c);
	return 0;
}

/* Back to nothing read (a failed load: the next one starts over). */
static void load_undo(struct st_cas *c)
{
	st_obj_unmap(c->midx, c->midx_len);
	c->midx = NULL;
	c->midx_len = c->midx_packs = c->midx_recs = 0;
	c->midx_fan = c->midx_rec = NULL;
	c->n_recs = c->n_packs = c->n_used = 0;
	if (c->slots)
		memset(c->slots, 0, c->n_slots * sizeof(*c->slots));
	c->stats.midx_chunks = 0;
}

int st_cas_load(struct st_cas *c, struct al_error *err)
{
	if (!c->lazy)
		return 0;
	/* Nothing is stored before the index is read (every put reads it
	 * first), so the open pack starts after what the index holds. */
	char prefix[ST_KEY_MAX + 1];
	int n = snprintf(prefix, sizeof(prefix), "tenants/%s/index/", c->tenant);
	struct load_ctx l = { .c = c, .err = err, .prefix_len = (size_t)n };
	int r = st_obj_list(c->os, prefix, list_one, &l, err);
	if (r < 0) {
		free(l.names);
		return al_error_set(err, r, "chunk store of tenant %s: cannot list %s", c->tenant,
				    prefix);
	}
	if (l.n)
		qsort(l.names, l.n, sizeof(*l.names), hex_cmp);
	_cleanup_free_ bool *covered = calloc(l.n ? l.n : 1, sizeof(*covered));
	if (!covered)
		r = -ENOMEM;
	if (r == 0 && c->use_midx)
		r = midx_open(c, l.names, l.n, covered);
	if (r < 0) {
		free(l.names);
		load_undo(c);
		return al_error_set(err, r, "chunk store of tenant %s: out of memory", c->tenant);
	}
	for (size_t i = 0; r >= 0 && i < l.n; i++)
		if (!covered[i])
			r = load_pack(c, l.names[i], err);
	free(l.names);
	if (r < 0) {
		load_undo(c);
		return r;
	}
	c->open_first = c->n_recs;
	c->lazy = false;
	if (c->use_midx &&
	    (c->midx ? c->n_packs - c->midx_packs > MIDX_NEW_MAX : c->n_packs >= MIDX_MIN_PACKS))
		midx_write(c);
	log_debug("chunk index of tenant %s: %zu packs, %" PRIu64 " index objects read, %zu "
		  "chunks from the merged index%s",
		  c->tenant, c->n_packs, c->stats.indexes_read, c->midx_recs,
		  c->stats.midx_written ? " (written anew)" : "");
	return 0;
}

bool st_cas_loaded(const struct st_cas *c)
{
	return !c->lazy;
}

int st_cas_open(struct st_objstore *os, const char *tenant, int level, struct st_cas **ret,
		struct al_error *err)
{
	return cas_open(os, tenant, level, true, ret, err);
}

int st_cas_open_lazy(struct st_objstore *os, const char *tenant, int level, struct st_cas **ret,
		     struct al_error *err)
{
	int r = cas_open(os, tenant, level, false, ret, err);
	if (r == 0) {
		(*ret)->lazy = true;
		(*ret)->use_midx = true;
	}
	return r;
}

int st_cas_open_empty(struct st_objstore *os, const char *tenant, int level, struct st_cas **ret,
		      struct al_error *err)
{
	return cas_open(os, tenant, level, false, ret, err);
}

const char *st_cas_owner(const struct st_cas *c, const struct st_id *id)
{
	struct cas_loc loc;
	if (!find(c, id, &loc) || loc.pack >= c->n_packs)
		return NULL;
	return c->packs[loc.pack].hex;
}

uint32_t st_cas_stored_len(const struct st_cas *c, const struct st_id *id)
{
	struct cas_loc loc;
	return find(c, id, &loc) ? REC_HDR + loc.clen : 0;
}

uint32_t st_cas_chunk_len(const struct st_cas *c, const struct st_id *id)
{
	struct cas_loc loc;
	return find(c, id, &loc) ? loc.ulen : 0;
}

void st_cas_set_pack_target(struct st_cas *c, size_t bytes)
{
	if (bytes < PACK_MAGIC_LEN + 1)
		bytes = PACK_MAGIC_LEN + 1;
	c->target = bytes < ST_PACK_TARGET ? bytes : ST_PACK_TARGET;
}

bool st_cas_has(const struct st_cas *c, const struct st_id *id)
{
	struct cas_loc loc;
	return find(c, id, &loc);
}

void st_cas_stats(const struct st_cas *c, struct st_cas_stats *ret)
{
	*ret = c->stats;
}

/* ---- writing ---- */

static int open_reserve(struct st_cas *c, size_t n)
{
	if (n <= c->open_cap - c->open_len)
		return 0;
	size_t need = c->open_len + n;
	if (need > PACK_MAX)
		return -E2BIG;
	size_t cap = c->open_cap ? c->open_cap : 256 * 1024;
	while (cap < need)
		cap *= 2;
	if (cap > PACK_MAX)
		cap = PACK_MAX;
	uint8_t *p = realloc(c->open, cap);
	if (!p)
		return -ENOMEM;
	c->open = p;
	c->open_cap = cap;
	return 0;
}

/*
 * Writes a full pack: the pack object, then its index, built from the
 * pack's own records (n of them, as the caller counted). Reads nothing of c
 * but os and tenant, so a writer may run it without the lock.
 */
static int seal_write(const struct st_cas *c, const uint8_t *pack, size_t len, size_t n,
		      char hex[ST_ID_HEX + 1], struct al_error *err)
{
	struct st_id pid;
	char key[ST_KEY_MAX + 1];
	st_sha256(pack, len, &pid);
	st_id_hex(&pid, hex);

	size_t ilen = INDEX_HDR + n * INDEX_REC + INDEX_TRAILER;
	_cleanup_free_ uint8_t *idx = malloc(ilen);
	if (!idx)
		return al_error_set(err, -ENOMEM, "sealing pack %s: out of memory", hex);
	memcpy(idx, INDEX_MAGIC, INDEX_MAGIC_LEN);
	put_u64(idx + INDEX_MAGIC_LEN, len);
	put_u32(idx + INDEX_MAGIC_LEN + 8, (uint32_t)n);
	put_u32(idx + INDEX_MAGIC_LEN + 12, 0);
	size_t off = PACK_MAGIC_LEN;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *rec = pack + off;
		uint8_t *r = idx + INDEX_HDR + i * INDEX_REC;
		uint32_t ulen = get_u32(rec + ST_ID_LEN), clen = get_u32(rec + ST_ID_LEN + 4);
		memcpy(r, rec, ST_ID_LEN);
		put_u64(r + ST_ID_LEN, off + REC_HDR);
		put_u32(r + ST_ID_LEN + 8, clen);
		put_u32(r + ST_ID_LEN + 12, ulen);
		off += REC_HDR + clen;
	}
	if (off != len)
		return al_error_set(err, -EIO, "sealing pack %s: its records do not tile it", hex);
	struct st_id sum;
	st_sha256(idx, ilen - INDEX_TRAILER, &sum);
	memcpy(idx + ilen - INDEX_TRAILER, sum.b, ST_ID_LEN);

	/* Pack first: an index never names a pack that is not there. */
	obj_key(c, "packs", hex, key);
	int r = st_obj_put(c->os, key, pack, len, err);
	if (r < 0)
		return al_error_set(err, r, "sealing pack %s", key);
	obj_key(c, "index", hex, key);
	r = st_obj_put(c->os, key, idx, ilen, err);
	if (r < 0)
		return al_error_set(err, r, "sealing pack index %s", key);
	return 0;
}

static int broken_error(const struct st_cas *c, int code, struct al_error *err)
{
	return al_error_set(err, code,
			    "chunk store of tenant %s: an earlier pack could not be written",
			    c->tenant);
}

int st_cas_flush(struct st_cas *c, struct al_error *err)
{
	if (c->broken)
		return broken_error(c, c->broken, err);
	size_t n = c->n_recs - c->open_first;
	if (n == 0)
		return 0;
	char hex[ST_ID_HEX + 1];
	int r = seal_write(c, c->open, c->open_len, n, hex, err);
	if (r < 0)
		return r;
	r = add_pack(c, hex, c->open_first, n);
	if (r < 0)
		return al_error_set_errno(err, r, "sealing pack %s", hex);
	c->open_first = c->n_recs;
	c->open_len = 0;
	c->stats.packs_written++;
	return 0;
}

/* Makes room in the open pack for one record and returns where it goes. */
static int rec_reserve(struct st_cas *c, uint8_t **ret)
{
	bool fresh = c->open_len == 0;
	int r = open_reserve(c, (fresh ? PACK_MAGIC_LEN : 0) + REC_HDR + CLEN_MAX);
	if (r < 0)
		return r;
	if (fresh) {
		memcpy(c->open, PACK_MAGIC, PACK_MAGIC_LEN);
		c->open_len = PACK_MAGIC_LEN;
	}
	*ret = c->open + c->open_len;
	return 0;
}

/* Completes the record at the end of the open pack, its frame in place. */
static int rec_commit(struct st_cas *c, const struct st_id *id, size_t len, size_t clen)
{
	uint8_t *rec = c->open + c->open_len;
	memcpy(rec, id->b, ST_ID_LEN);
	put_u32(rec + ST_ID_LEN, (uint32_t)len);
	put_u32(rec + ST_ID_LEN + 4, (uint32_t)clen);
	struct cas_loc loc = {
		.off = c->open_len + REC_HDR,
		.pack = (uint32_t)c->n_packs,
		.clen = (uint32_t)clen,
		.ulen = (uint32_t)len,
	};
	size_t known;
	int r = add_rec(c, id, &loc, &known);
	if (r < 0)
		return r;
	c->open_len += REC_HDR + clen;
	c->stats.chunks_new++;
	c->stats.bytes_stored += REC_HDR + clen;
	return 0;
}

int st_cas_put_id(struct st_cas *c, const struct st_id *id, const void *data, size_t len,
		  bool *ret_new, struct al_error *err)
{
	int lr = st_cas_load(c, err);
	if (lr < 0)
		return lr;
	char hex[ST_ID_HEX + 1];
	if (c->broken)
		return broken_error(c, c->broken, err);
	if (len > ST_CHUNK_MAX) {
		st_id_hex(id, hex);
		return al_error_set(err, -EFBIG, "chunk %s: %zu bytes, more than %u", hex, len,
				    ST_CHUNK_MAX);
	}
	c->stats.bytes_in += len;
	if (st_cas_has(c, id)) {
		c->stats.chunks_dup++;
		if (ret_new)
			*ret_new = false;
		return 0;
	}

	bool fresh = c->open_len == 0;
	uint8_t *rec;
	int r = rec_reserve(c, &rec);
	if (r < 0) {
		st_id_hex(id, hex);
		return al_error_set_errno(err, r, "chunk %s: cannot buffer it", hex);
	}
	size_t clen = ZSTD_compress2(c->cctx, rec + REC_HDR, CLEN_MAX, data, len);
	if (ZSTD_isError(clen)) {
		st_id_hex(id, hex);
		if (fresh)
			c->open_len = 0;
		return al_error_set(err, -EIO, "chunk %s: zstd: %s", hex, ZSTD_getErrorName(clen));
	}
	r = rec_commit(c, id, len, clen);
	if (r < 0) {
		st_id_hex(id, hex);
		if (fresh)
			c->open_len = 0;
		return al_error_set_errno(err, r, "chunk %s", hex);
	}
	if (ret_new)
		*ret_new = true;
	if (c->open_len >= c->target)
		return st_cas_flush(c, err);
	return 0;
}

int st_cas_put(struct st_cas *c, const void *data, size_t len, struct st_id *ret_id, bool *ret_new,
	       struct al_error *err)
{
	int lr = st_cas_load(c, err);
	if (lr < 0)
		return lr;
	struct st_id id;
	st_sha256(data, len, &id);
	int r = st_cas_put_id(c, &id, data, len, ret_new, err);
	if (r < 0)
		return r;
	*ret_id = id;
	return 0;
}

/* ---- concurrent writers ---- */

void st_cas_writer_free(struct st_cas_writer *w)
{
	if (!w)
		return;
	ZSTD_freeCCtx(w->cctx);
	free(w->rec);
	free(w);
}

DEFINE_CLEANUP_FUNC(struct st_cas_writer, st_cas_writer_free)

int st_cas_writer_new(struct st_cas *c, struct st_cas_writer **ret, struct al_error *err)
{
	_cleanup_(st_cas_writer_freep) struct st_cas_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return al_error_set(err, -ENOMEM, "chunk store: out of memory");
	w->c = c;
	w->cctx = ZSTD_createCCtx();
	w->rec = malloc(REC_HDR + CLEN_MAX);
	if (!w->cctx || !w->rec)
		return al_error_set(err, -ENOMEM, "chunk store: out of memory");
	if (ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, c->level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_contentSizeFlag, 1)))
		return al_error_set(err, -EINVAL, "chunk store: zstd refuses level %d", c->level);
	*ret = TAKE_PTR(w);
	return 0;
}

bool st_cas_has_shared(struct st_cas *c, const struct st_id *id)
{
	pthread_mutex_lock(&c->lock);
	bool has = st_cas_has(c, id);
	pthread_mutex_unlock(&c->lock);
	return has;
}

struct handover {
	uint8_t *buf;
	size_t len, cap, n;
	uint32_t pack; /* its number in packs */
};

/*
 * Under the lock: appends the record compressed into w->rec, unless the
 * chunk arrived meanwhile, and hands the open pack over in *ho once full.
 */
static int append_locked(struct st_cas_writer *w, const struct st_id *id, size_t len, size_t clen,
			 bool *ret_new, struct handover *ho)
{
	struct st_cas *c = w->c;
	c->stats.bytes_in += len;
	if (st_cas_has(c, id)) {
		c->stats.chunks_dup++;
		*ret_new = false;
		return 0;
	}
	bool fresh = c->open_len == 0;
	uint8_t *rec;
	int r = rec_reserve(c, &rec);
	if (r == 0) {
		memcpy(rec + REC_HDR, w->rec + REC_HDR, clen);
		r = rec_commit(c, id, len, clen);
	}
	if (r < 0) {
		c->stats.bytes_in -= len;
		if (fresh)
			c->open_len = 0;
		return r;
	}
	*ret_new = true;
	if (c->open_len < c->target)
		return 0;
	size_t n = c->n_recs - c->open_first;
	ho->pack = (uint32_t)c->n_packs;
	static const char pending[ST_ID_HEX + 1]; /* its hex comes with the seal */
	r = add_pack(c, pending, c->open_first, n);
	if (r < 0) {
		c->broken = r; /* the records are in; the pack can never be named */
		return r;
	}
	ho->buf = c->open;
	ho->len = c->open_len;
	ho->cap = c->open_cap;
	ho->n = n;
	c->open = TAKE_PTR(c->spare);
	c->open_cap = c->spare_cap;
	c->spare_cap = 0;
	c->open_len = 0;
	c->open_first = c->n_recs;
	return 0;
}

int st_cas_put_shared(struct st_cas_writer *w, const void *data, size_t len, struct st_id *ret_id,
		      bool *ret_new, struct al_error *err)
{
	struct st_cas *c = w->c;
	struct st_id id;
	char hex[ST_ID_HEX + 1];
	st_sha256(data, len, &id);
	if (len > ST_CHUNK_MAX) {
		st_id_hex(&id, hex);
		return al_error_set(err, -EFBIG, "chunk %s: %zu bytes, more than %u", hex, len,
				    ST_CHUNK_MAX);
	}

	/* The index is read before any writer starts (st_cas_load): reading
	 * it here would race with the other writers. */
	if (c->lazy)
		return al_error_set(err, -EINVAL, "chunk store of tenant %s: index not read",
				    c->tenant);
	/* Most chunks of a second copy are known: no compression for them. */
	pthread_mutex_lock(&c->lock);
	int r = c->broken;
	bool known = r == 0 && st_cas_has(c, &id);
	if (known) {
		c->stats.bytes_in += len;
		c->stats.chunks_dup++;
	}
	pthread_mutex_unlock(&c->lock);
	if (r < 0)
		return broken_error(c, r, err);
	if (known) {
		*ret_id = id;
		if (ret_new)
			*ret_new = false;
		return 0;
	}

	size_t clen = ZSTD_compress2(w->cctx, w->rec + REC_HDR, CLEN_MAX, data, len);
	if (ZSTD_isError(clen)) {
		st_id_hex(&id, hex);
		return al_error_set(err, -EIO, "chunk %s: zstd: %s", hex, ZSTD_getErrorName(clen));
	}

	bool fresh = false;
	struct handover ho = { 0 };
	pthread_mutex_lock(&c->lock);
	int broken = c->broken;
	r = broken ? broken : append_locked(w, &id, len, clen, &fresh, &ho);
	pthread_mutex_unlock(&c->lock);
	if (broken)
		return broken_error(c, broken, err);
	if (r < 0) {
		st_id_hex(&id, hex);
		return al_error_set_errno(err, r, "chunk %s: cannot buffer it", hex);
	}

	if (ho.buf) {
		r = seal_write(c, ho.buf, ho.len, ho.n, hex, err);
		pthread_mutex_lock(&c->lock);
		if (r < 0) {
			if (!c->broken)
				c->broken = r;
		} else {
			memcpy(c->packs[ho.pack].hex, hex, ST_ID_HEX + 1);
			c->stats.packs_written++;
		}
		if (!c->spare) {
			c->spare = TAKE_PTR(ho.buf);
			c->spare_cap = ho.cap;
		}
		pthread_mutex_unlock(&c->lock);
		free(ho.buf);
		if (r < 0)
			return r;
	}
	*ret_id = id;
	if (ret_new)
		*ret_new = fresh;
	return 0;
}

/* ---- reading ---- */

struct st_cas_reader {
	struct st_cas *c;
	ZSTD_DCtx *dctx;
	uint8_t *frame; /* REC_HDR + CLEN_MAX: a record read from a pack */
	uint8_t *out;	/* ST_CHUNK_MAX: the chunk */
};

static uint8_t *reader_frame(struct st_cas_reader *rd)
{
	return rd->frame;
}

static uint8_t *reader_out(struct st_cas_reader *rd)
{
	return rd->out;
}

/* Reads and verifies chunk id at loc (cas_get). */
static int read_at(struct st_cas *c, ZSTD_DCtx *dctx, struct st_cas_reader *rd,
		   const struct st_id *id, const char *hex, const struct cas_loc *loc, void **ret,
		   size_t *ret_len, struct al_error *err)
{
	_cleanup_free_ uint8_t *frame = NULL;
	const uint8_t *rec;
	const char *where;
	if (loc->pack == c->n_packs) {
		rec = c->open + loc->off - REC_HDR;
		where = "the open pack";
	} else {
		char key[ST_KEY_MAX + 1];
		where = c->packs[loc->pack].hex;
		obj_key(c, "packs", where, key);
		uint8_t *into = rd ? reader_frame(rd) : (frame = malloc(REC_HDR + loc->clen));
		if (!into)
			return al_error_set(err, -ENOMEM, "chunk %s: out of memory", hex);
		struct al_error e = { 0 };
		int r = st_obj_get_range(c->os, key, loc->off - REC_HDR, REC_HDR + loc->clen, into,
					 &e);
		if (r == -EIO)
			return al_error_set(err, -EBADMSG, "chunk %s: pack %s is truncated (%s)",
					    hex, key, al_error_message(&e));
		if (r < 0)
			return al_error_set(err, r, "chunk %s: %s", hex, al_error_message(&e));
		rec = into;
	}
	if (memcmp(rec, id->b, ST_ID_LEN) != 0 || get_u32(rec + ST_ID_LEN) != loc->ulen ||
	    get_u32(rec + ST_ID_LEN + 4) != loc->clen)
		return al_error_set(err, -EBADMSG,
				    "chunk %s: its record in pack %s does not match the index", hex,
				    where);

	_cleanup_free_ uint8_t *owned = NULL;
	uint8_t *out = rd ? reader_out(rd) : (owned = malloc(loc->ulen ? loc->ulen : 1));
	if (!out)
		return al_error_set(err, -ENOMEM, "chunk %s: out of memory", hex);
	size_t n = ZSTD_decompressDCtx(dctx, out, loc->ulen, rec + REC_HDR, loc->clen);
	if (ZSTD_isError(n))
		return al_error_set(err, -EBADMSG, "chunk %s in pack %s: bad zstd frame: %s", hex,
				    where, ZSTD_getErrorName(n));
	if (n != loc->ulen)
		return al_error_set(err, -EBADMSG,
				    "chunk %s in pack %s: %zu bytes, the index says %u", hex, where,
				    n, loc->ulen);
	struct st_id got;
	st_sha256(out, n, &got);
	if (memcmp(got.b, id->b, ST_ID_LEN) != 0)
		return al_error_set(err, -EBADMSG, "chunk %s in pack %s: SHA-256 mismatch", hex,
				    where);
	*ret = rd ? out : TAKE_PTR(owned);
	*ret_len = n;
	return 0;
}

/*
 * Where the index objects say chunk id is (a slow path: every pack's index
 * read until it is found), or -ENOENT. For a location from the merged index
 * that could not be read.
 */
static int index_scan(struct st_cas *c, const struct st_id *id, struct cas_loc *ret)
{
	for (size_t k = 0; k < c->n_packs; k++) {
		if (!c->packs[k].hex[0])
			continue;
		char key[ST_KEY_MAX + 1];
		obj_key(c, "index", c->packs[k].hex, key);
		_cleanup_free_ uint8_t *p = NULL;
		size_t len = 0;
		struct al_error e = { 0 };
		if (st_obj_get(c->os, key, INDEX_MAX, (void **)&p, &len, &e) < 0 ||
		    len < INDEX_HDR + INDEX_TRAILER || memcmp(p, INDEX_MAGIC, INDEX_MAGIC_LEN) != 0)
			continue;
		uint32_t count = get_u32(p + INDEX_MAGIC_LEN + 8);
		struct st_id sum;
		if (len != INDEX_HDR + (size_t)count * INDEX_REC + INDEX_TRAILER)
			continue;
		st_sha256(p, len - INDEX_TRAILER, &sum);
		if (memcmp(sum.b, p + len - INDEX_TRAILER, ST_ID_LEN) != 0)
			continue;
		for (uint32_t i = 0; i < count; i++) {
			const uint8_t *r = p + INDEX_HDR + (size_t)i * INDEX_REC;
			if (memcmp(r, id->b, ST_ID_LEN) != 0)
				continue;
			*ret = (struct cas_loc){ .off = get_u64(r + ST_ID_LEN),
						 .clen = get_u32(r + ST_ID_LEN + 8),
						 .ulen = get_u32(r + ST_ID_LEN + 12),
						 .pack = (uint32_t)k };
			if (ret->clen == 0 || ret->clen > CLEN_MAX || ret->ulen > ST_CHUNK_MAX ||
			    ret->off < PACK_MAGIC_LEN + REC_HDR || ret->off > PACK_MAX - ret->clen)
				break;
			return 0;
		}
	}
	return -ENOENT;
}

/*
 * Reads and verifies chunk id. With rd (a reader's buffers), *ret points
 * into rd's output buffer until its next read; without, *ret is malloc'd.
 * A location from the merged index that cannot be read is looked up again
 * in the index objects (and the merged index dropped) before it is an
 * error: a damaged cache never loses a chunk.
 */
static int cas_get(struct st_cas *c, ZSTD_DCtx *dctx, struct st_cas_reader *rd,
		   const struct st_id *id, void **ret, size_t *ret_len, struct al_error *err)
{
	char hex[ST_ID_HEX + 1];
	st_id_hex(id, hex);
	struct cas_loc loc;
	bool cached = lookup(c, id) == SIZE_MAX;
	if (!find(c, id, &loc))
		return al_error_set(err, -ENOENT, "chunk %s is not in the store of tenant %s", hex,
				    c->tenant);
	int r = read_at(c, dctx, rd, id, hex, &loc, ret, ret_len, err);
	struct cas_loc alt;
	if (r < 0 && r != -ENOMEM && cached && index_scan(c, id, &alt) == 0 &&
	    (alt.pack != loc.pack || alt.off != loc.off || alt.clen != loc.clen ||
	     alt.ulen != loc.ulen)) {
		midx_discard(c);
		al_error_clear(err);
		r = read_at(c, dctx, rd, id, hex, &alt, ret, ret_len, err);
	}
	return r;
}

int st_cas_get(struct st_cas *c, const struct st_id *id, void **ret, size_t *ret_len,
	       struct al_error *err)
{
	int lr = st_cas_load(c, err);
	if (lr < 0)
		return lr;
	return cas_get(c, c->dctx, NULL, id, ret, ret_len, err);
}

int st_cas_reader_new(struct st_cas *c, struct st_cas_reader **ret, struct al_error *err)
{
	int lr = st_cas_load(c, err);
	if (lr < 0)
		return lr;
	struct st_cas_reader *rd = calloc(1, sizeof(*rd));
	if (rd) {
		rd->frame = malloc(REC_HDR + CLEN_MAX);
		rd->out = malloc(ST_CHUNK_MAX);
		rd->dctx = ZSTD_createDCtx();
	}
	if (!rd || !rd->frame || !rd->out || !rd->dctx) {
		st_cas_reader_free(rd);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	rd->c = c;
	*ret = rd;
	return 0;
}

void st_cas_reader_free(struct st_cas_reader *rd)
{
	if (!rd)
		return;
	ZSTD_freeDCtx(rd->dctx);
	free(rd->frame);
	free(rd->out);
	free(rd);
}

int st_cas_read(struct st_cas_reader *rd, const struct st_id *id, const void **ret, size_t *ret_len,
		struct al_error *err)
{
	void *p = NULL;
	int r = cas_get(rd->c, rd->dctx, rd, id, &p, ret_len, err);
	if (r == 0)
		*ret = p;
	return r;
}

int st_cas_each_pack(struct st_cas *c,
		     int (*fn)(const char *pack_hex, const struct st_id *chunks, size_t n,
			       void *ud),
		     void *ud, struct al_error *err)
{
	int lr = st_cas_load(c, err);
	if (lr < 0)
		return lr;
	if (c->midx)
		return al_error_set(err, -EINVAL,
				    "chunk store of tenant %s: its packs' chunks are in the merged "
				    "index (open it with st_cas_open)",
				    c->tenant);
	for (size_t i = 0; i < c->n_packs; i++) {
		const struct cas_pack *p = &c->packs[i];
		int r = fn(p->hex, c->ids + p->first, p->n, ud);
		if (r < 0)
			return al_error_set(err, r, "pack %s: stopped by the caller", p->hex);
	}
	return 0;
}

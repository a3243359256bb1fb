/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The stat cache: what the last snapshot of a session saw on disk, so that
 * the next one can tell what changed without reading it. Local knowledge,
 * not part of a checkpoint: a missing, damaged or foreign cache only means
 * every file is read.
 *
 *   airlock-statcache 2 <kind> <dev> <root ino> <start ns>
 *   <type> <ino> <ctime ns> <mtime ns> <size> <mode> <hex path>    one per entry
 *   end <checkpoint id> <tenant> <session>
 *   hmac <hex of HMAC-SHA256(key, every byte before this line)>
 *
 * kind: "p" for a plain directory (every directory, file and symlink
 * walked), "l" for an overlay's upper layer (its files only). type: d, f or
 * l; mode: the permission bits, decimal. The end line names the checkpoint
 * the cache describes, sealed by the commit that made it: a plain
 * snapshot believes a cache's entries unchanged on disk to be unchanged in
 * that checkpoint, and writes only the rest as a delta over it, so a cache
 * must be authentic (the repository's key) and of this very checkpoint,
 * tenant and session; anything else is no cache. Version 1 caches (no end
 * line, no HMAC) are no cache either: one snapshot reads every file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/encode.h"
#include "common/parse.h"
#include "store/internal.h"

#define MAGIC "airlock-statcache 2 "

void st_statcache_free(struct st_statcache *sc)
{
	free(sc->text);
	free(sc->recs);
	free(sc->slots);
	memset(sc, 0, sizeof(*sc));
}

/* Paths in the cache are hex-encoded: no escaping rules to get wrong. */
static int hex_encode(const char *s, struct buf *b)
{
	size_t n = strlen(s);
	if (buf_reserve(b, 2 * n) < 0)
		return -ENOMEM;
	char *o = b->data + b->len;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		o[2 * i] = enc_hex_lower[c >> 4];
		o[2 * i + 1] = enc_hex_lower[c & 15];
	}
	b->len += 2 * n;
	return 0;
}

/* A number at *p followed by term (a space, or the header's LF). */
static bool u64_field(char **p, uint64_t *ret, char term)
{
	const char *end;
	if (parse_u64_prefix(*p, ret, &end) < 0 || *end != term)
		return false;
	*p = (char *)end + 1;
	return true;
}

static bool i64_field(char **p, int64_t *ret, char term)
{
	const char *end;
	if (parse_i64_prefix(*p, ret, &end) < 0 || *end != term)
		return false;
	*p = (char *)end + 1;
	return true;
}

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t path_hash(const char *p)
{
	uint64_t h = FNV_OFFSET;
	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * FNV_PRIME;
	return h;
}

/* A table of positions + 1, at most half full: lookups by path in O(1)
 * (a snapshot asks once per entry walked). */
static int index_recs(struct st_statcache *sc)
{
	size_t cap = 16;
	while (cap < 2 * sc->n + 2)
		cap *= 2;
	sc->slots = calloc(cap, sizeof(*sc->slots));
	if (!sc->slots)
		return -ENOMEM;
	sc->n_slots = cap;
	for (size_t i = 0; i < sc->n; i++) {
		size_t k = (size_t)path_hash(sc->recs[i].path) & (cap - 1);
		while (sc->slots[k]) {
			if (strcmp(sc->recs[sc->slots[k] - 1].path, sc->recs[i].path) == 0)
				return -EEXIST;
			k = (k + 1) & (cap - 1);
		}
		sc->slots[k] = i + 1;
	}
	return 0;
}

struct st_stat_rec *st_statcache_find(const struct st_statcache *sc, const char *path)
{
	if (!sc->n_slots)
		return NULL;
	for (size_t k = (size_t)path_hash(path) & (sc->n_slots - 1); sc->slots[k];
	     k = (k + 1) & (sc->n_slots - 1))
		if (strcmp(sc->recs[sc->slots[k] - 1].path, path) == 0)
			return &sc->recs[sc->slots[k] - 1];
	return NULL;
}

/* One record line (NUL-terminated in place); its path is decoded in place. */
static bool parse_rec(char *p, struct st_stat_rec *rec)
{
	uint64_t mode;
	if (!(p[0] == 'd' || p[0] == 'f' || p[0] == 'l') || p[1] != ' ')
		return false;
	rec->type = p[0];
	p += 2;
	if (!u64_field(&p, &rec->ino, ' ') || !i64_field(&p, &rec->ctime_ns, ' ') ||
	    !i64_field(&p, &rec->mtime_ns, ' ') || !u64_field(&p, &rec->size, ' ') ||
	    !u64_field(&p, &mode, ' ') || mode > 0777)
		return false;
	rec->mode = (uint32_t)mode;
	size_t n = strlen(p);
	if (n == 0 || n % 2 || n / 2 > ST_PATH_MAX || enc_unhex_lower(p, n, p, n / 2) < 0 ||
	    memchr(p, '\0', n / 2))
		return false;
	p[n / 2] = '\0';
	rec->path = p;
	return true;
}

void st_statcache_load(struct st_repo *r, const char *session, const struct stat *root,
		       struct st_statcache *sc)
{
	memset(sc, 0, sizeof(*sc));
	char key[ST_KEY_MAX + 1];
	struct al_error e = { 0 };
	if (st_repo_key(key, sizeof(key), r, "sessions/%s/statcache", session) < 0 ||
	    st_obj_exists(r->os, key, &e) != 1)
		return;
	void *data = NULL;
	size_t len = 0;
	if (st_obj_get(r->os, key, ST_STATCACHE_MAX, &data, &len, &e) < 0)
		return;
	char *t = data;
	sc->text = t;
	bool ok = false;
	/* The last line: the HMAC of all before it, checked before anything
	 * of it is believed; the line before it names what it describes. */
	size_t hl = strlen("hmac ") + ST_ID_HEX + 1;
	char mac[ST_ID_HEX + 1];
	if (len < hl + strlen(MAGIC) || t[len - 1] != '\n' || t[len - hl - 1] != '\n' ||
	    memcmp(t + len - hl, "hmac ", 5) != 0 || memchr(t, '\0', len) ||
	    st_hmac_hex(r->key, r->keylen, t, len - hl, mac) < 0 ||
	    !st_hmac_equal(mac, t + len - hl + 5))
		goto out;
	/* "airlock-statcache 2 <kind> <dev> <root ino> <start ns>" */
	char *hdr = memchr(t, '\n', len - hl);
	char *p = t + strlen(MAGIC);
	if (!hdr || strncmp(t, MAGIC, strlen(MAGIC)) != 0 || !(p[0] == 'p' || p[0] == 'l') ||
	    p[1] != ' ')
		goto out;
	sc->kind = p[0];
	p += 2;
	if (!u64_field(&p, &sc->dev, ' ') || !u64_field(&p, &sc->root_ino, ' ') ||
	    !i64_field(&p, &sc->start_ns, '\n') || p != hdr + 1 ||
	    sc->dev != (uint64_t)root->st_dev || sc->root_ino != (uint64_t)root->st_ino)
		goto out;
	/* "end <id> <tenant> <session>", after the records */
	t[len - hl - 1] = '\0';
	char *last = memrchr(t, '\n', len - hl - 1);
	if (!last || last < hdr)
		goto out;
	char *end = last + 1, want[ST_KEY_MAX + 1];
	size_t tl = strlen(r->tenant), sl = strlen(session);
	if (strncmp(end, "end ", 4) != 0 || strlen(end) != 4 + ST_ID_HEX + 1 + tl + 1 + sl ||
	    !enc_is_lower_hex(end + 4, ST_ID_HEX))
		goto out;
	snprintf(want, sizeof(want), " %s %s", r->tenant, session);
	if (strcmp(end + 4 + ST_ID_HEX, want) != 0)
		goto out;
	memcpy(sc->id, end + 4, ST_ID_HEX);
	sc->id[ST_ID_HEX] = '\0';
	/* The records: from the header's LF to the end line's. */
	*last = '\0';
	size_t cap = 0;
	for (p = hdr + 1; p < last;) {
		char *nl = strchr(p, '\n');
		if (nl)
			*nl = '\0';
		if (sc->n == cap) {
			size_t nc = cap ? cap * 2 : 1024;
			struct st_stat_rec *nr = realloc(sc->recs, nc * sizeof(*nr));
			if (!nr)
				goto out;
			sc->recs = nr;
			cap = nc;
		}
		struct st_stat_rec *rec = &sc->recs[sc->n];
		memset(rec, 0, sizeof(*rec));
		if (!parse_rec(p, rec))
			goto out;
		sc->n++;
		if (!nl)
			break;
		p = nl + 1;
	}
	ok = index_recs(sc) == 0;
out:
	if (!ok)
		st_statcache_free(sc);
}

int st_statcache_header(struct buf *b, char kind, const struct stat *root, int64_t start_ns)
{
	return buf_appendf(b, MAGIC "%c %" PRIu64 " %" PRIu64 " %" PRId64 "\n", kind,
			   (uint64_t)root->st_dev, (uint64_t)root->st_ino, start_ns) < 0 ?
		       -ENOMEM :
		       0;
}

int st_statcache_line(struct buf *b, char type, const struct stat *st, const char *path)
{
	if (buf_appendf(b, "%c %" PRIu64 " %" PRId64 " %" PRId64 " %" PRIu64 " %u ", type,
			(uint64_t)st->st_ino, st_ts_ns(st->st_ctim), st_ts_ns(st->st_mtim),
			(uint64_t)st->st_size, (unsigned)(st->st_mode & 0777)) < 0 ||
	    hex_encode(path, b) < 0 || buf_append_char(b, '\n') < 0)
		return -ENOMEM;
	return 0;
}

int st_statcache_seal(struct st_repo *r, const char *session, const char *id, struct buf *b)
{
	char mac[ST_ID_HEX + 1];
	if (buf_appendf(b, "end %s %s %s\n", id, r->tenant, session) < 0 ||
	    st_hmac_hex(r->key, r->keylen, b->data, b->len, mac) < 0 ||
	    buf_appendf(b, "hmac %s\n", mac) < 0)
		return -ENOMEM;
	return 0;
}

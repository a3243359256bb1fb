/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The stat cache: what the last snapshot of a session saw on disk (inode,
 * ctime, mtime and size of every file), so that the next one can take
 * unchanged files from the previous checkpoint unread. Local knowledge,
 * not part of a checkpoint: a missing, damaged or foreign cache only means
 * every file is read.
 *
 *   airlock-statcache 1 <dev> <root ino> <start ns>
 *   <ino> <ctime ns> <mtime ns> <size> <hex path>      one per file
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/encode.h"
#include "common/parse.h"
#include "store/internal.h"

void st_statcache_free(struct st_statcache *sc)
{
	for (size_t i = 0; i < sc->n; i++)
		free(sc->recs[i].path);
	free(sc->recs);
	memset(sc, 0, sizeof(*sc));
}

/* Paths in the cache are hex-encoded: no escaping rules to get wrong. */
static int hex_encode(const char *s, struct buf *b)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		char two[2] = { enc_hex_lower[*p >> 4], enc_hex_lower[*p & 15] };
		if (buf_append(b, two, 2) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* A path back: no NUL inside, no more than a path's length. */
static char *hex_decode(const char *s, size_t n)
{
	if (n % 2 || n / 2 > ST_PATH_MAX)
		return NULL;
	char *out = malloc(n / 2 + 1);
	if (!out)
		return NULL;
	if (enc_unhex_lower(s, n, out, n / 2) < 0 || memchr(out, '\0', n / 2)) {
		free(out);
		return NULL;
	}
	out[n / 2] = '\0';
	return out;
}

static int parse_i64(const char *s, int64_t *ret)
{
	uint64_t v;
	bool neg = s[0] == '-';
	if (parse_u64(s + neg, &v) < 0 || v > (uint64_t)INT64_MAX)
		return -EINVAL;
	*ret = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

/* Splits line at single spaces into exactly n fields (in place). */
static bool split_fields(char *line, char **f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		f[i] = line;
		char *sp = strchr(line, ' ');
		if (i + 1 < n) {
			if (!sp)
				return false;
			*sp = '\0';
			line = sp + 1;
		} else if (sp) {
			return false;
		}
	}
	return true;
}

static int rec_cmp(const void *a, const void *b)
{
	return st_path_cmp(((const struct st_stat_rec *)a)->path,
			   ((const struct st_stat_rec *)b)->path);
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
	char *p = data, *end = p + len;
	bool ok = false;
	size_t cap = 0;
	/* header: "airlock-statcache 1 <dev> <root ino> <start ns>\n" */
	char *nl = memchr(p, '\n', (size_t)(end - p));
	if (nl) {
		*nl = '\0';
		char *f[5];
		ok = split_fields(p, f, 5) && strcmp(f[0], "airlock-statcache") == 0 &&
		     strcmp(f[1], "1") == 0 && parse_u64(f[2], &sc->dev) == 0 &&
		     parse_u64(f[3], &sc->root_ino) == 0 && parse_i64(f[4], &sc->start_ns) == 0 &&
		     sc->dev == (uint64_t)root->st_dev && sc->root_ino == (uint64_t)root->st_ino;
		p = nl + 1;
	}
	while (ok && p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl) {
			ok = false;
			break;
		}
		*nl = '\0';
		/* "<ino> <ctime ns> <mtime ns> <size> <hex path>" */
		char *f[5];
		struct st_stat_rec rec = { 0 };
		if (!split_fields(p, f, 5) || parse_u64(f[0], &rec.ino) < 0 ||
		    parse_i64(f[1], &rec.ctime_ns) < 0 || parse_i64(f[2], &rec.mtime_ns) < 0 ||
		    parse_u64(f[3], &rec.size) < 0 ||
		    !(rec.path = hex_decode(f[4], strlen(f[4])))) {
			ok = false;
			break;
		}
		if (sc->n == cap) {
			size_t nc = cap ? cap * 2 : 1024;
			struct st_stat_rec *nr = realloc(sc->recs, nc * sizeof(*nr));
			if (!nr) {
				free(rec.path);
				ok = false;
				break;
			}
			sc->recs = nr;
			cap = nc;
		}
		sc->recs[sc->n++] = rec;
		p = nl + 1;
	}
	free(data);
	if (!ok) {
		st_statcache_free(sc);
		return;
	}
	if (sc->n)
		qsort(sc->recs, sc->n, sizeof(*sc->recs), rec_cmp);
}

const struct st_stat_rec *st_statcache_find(const struct st_statcache *sc, const char *path)
{
	return st_find_path(sc->recs, sc->n, sizeof(*sc->recs), offsetof(struct st_stat_rec, path),
			    path);
}

int st_statcache_header(struct buf *b, const struct stat *root, int64_t start_ns)
{
	return buf_appendf(b, "airlock-statcache 1 %" PRIu64 " %" PRIu64 " %" PRId64 "\n",
			   (uint64_t)root->st_dev, (uint64_t)root->st_ino, start_ns) < 0 ?
		       -ENOMEM :
		       0;
}

int st_statcache_line(struct buf *b, const struct stat *st, const char *path)
{
	if (buf_appendf(b, "%" PRIu64 " %" PRId64 " %" PRId64 " %" PRIu64 " ", (uint64_t)st->st_ino,
			st_ts_ns(st->st_ctim), st_ts_ns(st->st_mtim), (uint64_t)st->st_size) < 0 ||
	    hex_encode(path, b) < 0 || buf_append_char(b, '\n') < 0)
		return -ENOMEM;
	return 0;
}

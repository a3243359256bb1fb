/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Manifest text: writing and strict parsing (format in manifest.h).
 *
 * The parser believes nothing before the HMAC over every byte before the
 * last line has been checked; after that it still checks every rule, since
 * an authentic manifest may come from a buggy writer or a stolen key. The
 * rules on the decoded tree (order, parents, depth, modes, sizes) are one
 * function, check_entry, used by both the writer and the parser, so a
 * written manifest always parses and the parser accepts exactly the
 * canonical form the writer produces.
 */
#include "store/manifest.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/encode.h"
#include "store/objstore.h"

#define MAGIC_V1 "airlock-manifest 1"
#define MAGIC_V2 "airlock-manifest 2" /* with holes */
#define HMAC_PREFIX "hmac "
#define HMAC_LINE_LEN (sizeof(HMAC_PREFIX) - 1 + 2 * 32 + 1) /* with its LF */
#define SNIP_MAX 60 /* characters of input an error message may quote */
#define SNIP_BUF (SNIP_MAX + 4)
#define TEXT_MAX (SIZE_MAX / 2) /* the writer's buffer; never reached in practice */

/* A printable quote of at most SNIP_MAX characters of input, for an error
 * message: bytes outside printable ASCII as \xNN, "..." when cut short. */
static const char *snip(const char *p, size_t n, char out[SNIP_BUF])
{
	size_t o = 0, i = 0;
	for (; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		bool plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
		if (o + (plain ? 1 : 4) > SNIP_MAX)
			break;
		if (plain) {
			out[o++] = (char)c;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = enc_hex_lower[c >> 4];
			out[o++] = enc_hex_lower[c & 15];
		}
	}
	if (i < n) {
		out[o++] = '.';
		out[o++] = '.';
		out[o++] = '.';
	}
	out[o] = '\0';
	return out;
}

static bool session_valid(const char *s, size_t n)
{
	if (n == 0 || n > ST_SESSION_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* A byte that appears in a path or target as it is; every other is %XX. */
static bool is_plain(unsigned char c)
{
	return c >= 0x21 && c <= 0x7e && c != '%' && c != ',';
}

static int hmac_hex(const uint8_t *key, size_t keylen, const void *data, size_t len,
		    char out[ST_ID_HEX + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (keylen > INT_MAX)
		return -EINVAL;
	if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)data, len, md, &mdlen) ||
	    mdlen != 32)
		return -EIO;
	enc_hex(md, 32, out);
	OPENSSL_cleanse(md, sizeof(md));
	return 0;
}

int st_hmac_hex(const uint8_t *key, size_t keylen, const void *data, size_t len,
		char out[ST_ID_HEX + 1])
{
	return hmac_hex(key, keylen, data, len, out);
}

bool st_hmac_equal(const char *a, const char *b)
{
	return CRYPTO_memcmp(a, b, ST_ID_HEX) == 0;
}

/* Compares the NUL-terminated path e with the n bytes at p, bytewise. */
static int cmp_path_n(const char *e, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char a = (unsigned char)e[i], b = (unsigned char)p[i];
		if (a != b)
			return a < b ? -1 : 1;
	}
	return e[n] ? 1 : 0;
}

int st_path_cmp(const char *a, const char *b)
{
	int r = strcmp(a, b); /* compares as unsigned char */
	return r < 0 ? -1 : r > 0;
}

/* Segments of a decoded path, or 0 (and *why) when it breaks a rule. */
static size_t path_depth(const char *p, size_t n, const char **why)
{
	if (n == 0) {
		*why = "empty path";
		return 0;
	}
	if (n > ST_PATH_MAX) {
		*why = "path longer than ST_PATH_MAX";
		return 0;
	}
	if (p[0] == '/') {
		*why = "absolute path";
		return 0;
	}
	size_t depth = 0, start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && p[i] != '/')
			continue;
		size_t len = i - start;
		if (len == 0) {
			*why = i == n ? "trailing '/'" : "empty path segment";
			return 0;
		}
		if (p[start] == '.' && (len == 1 || (len == 2 && p[start + 1] == '.'))) {
			*why = "'.' or '..' segment";
			return 0;
		}
		depth++;
		start = i + 1;
	}
	return depth;
}

struct check_state {
	size_t max_depth;
	uint64_t max_bytes; /* 0: none */
	uint64_t bytes;	    /* sum of file sizes so far */
};

/* Binary search of entries[0..n) for the path p[0..plen). */
static const struct st_entry *find_n(const struct st_entry *entries, size_t n, const char *p,
				     size_t plen)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = cmp_path_n(entries[mid].path, p, plen);
		if (c == 0)
			return &entries[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The rules on entry i's path (grammar, depth, order after entry i-1). */
static const char *check_path(const struct st_entry *entries, size_t i,
			      const struct check_state *st)
{
	const struct st_entry *e = &entries[i];
	const char *why = NULL;
	if (!e->path)
		return "no path";
	size_t depth = path_depth(e->path, strlen(e->path), &why);
	if (depth == 0)
		return why;
	if (depth > st->max_depth)
		return "deeper than the limit";
	if (i > 0 && st_path_cmp(entries[i - 1].path, e->path) >= 0)
		return st_path_cmp(entries[i - 1].path, e->path) == 0 ?
			       "duplicate path" :
			       "not sorted after the previous path";
	return NULL;
}

/* The parent of entry i among entries 0..i-1, or NULL. It sorts before its
 * children, so when present it is among the entries before, which are
 * sorted: a binary search. (Not a stack of open directories: "a" < "a-b" <
 * "a/b" puts other names between a directory and its children.) *top is
 * set when the path has no parent (a top-level entry). */
static const struct st_entry *parent_of(const struct st_entry *entries, size_t i, bool *top)
{
	const char *slash = strrchr(entries[i].path, '/');
	*top = !slash;
	return slash ? find_n(entries, i, entries[i].path, (size_t)(slash - entries[i].path)) :
		       NULL;
}

/* The rules of an entry's type and fields; files add their size to st
 * (checked against its byte limit when count_bytes). */
static const char *check_fields(const struct st_entry *e, struct check_state *st, bool count_bytes)
{
	switch (e->type) {
	case ST_DIR:
	case ST_OPAQUE:
		break;
	case ST_FILE: {
		/* Holes: in order, never two at one place (they would be one),
		 * inside the file. What is left is the chunks'. */
		uint64_t holes = 0;
		if (e->n_holes && !e->holes)
			return "no holes";
		for (size_t k = 0; k < e->n_holes; k++) {
			const struct st_hole *h = &e->holes[k];
			if (h->len == 0)
				return "a hole of no bytes";
			if (h->at > e->n_chunks)
				return "a hole past the last chunk";
			if (k > 0 && h->at <= e->holes[k - 1].at)
				return "two holes next to each other, or out of order";
			if (h->len > e->size - holes)
				return "holes larger than the file";
			holes += h->len;
		}
		uint64_t data = e->size - holes;
		if (data == 0 && e->n_chunks != 0)
			return e->n_holes ? "chunks in a file that is all hole" :
					    "an empty file with chunks";
		if (data != 0 && e->n_chunks == 0)
			return "a non-empty file without chunks";
		if (data != 0) {
			/* Every chunk holds 1..ST_CHUNK_MAX bytes. */
			uint64_t least = data / ST_CHUNK_MAX + (data % ST_CHUNK_MAX != 0);
			if (e->n_chunks < least || (uint64_t)e->n_chunks > data)
				return "chunk count does not fit the size";
			if (!e->chunks)
				return "no chunk ids";
		}
		/* The byte limit counts a file's size, holes and all: what a
		 * restore or an export may have to produce where holes are not
		 * kept (docs/checkpoints.md). */
		if (!count_bytes)
			break;
		if (st->max_bytes && e->size > st->max_bytes - st->bytes)
			return "files add up to more than the byte limit";
		if (e->size > UINT64_MAX - st->bytes)
			return "sizes overflow";
		st->bytes += e->size;
		break;
	}
	case ST_SYMLINK:
		if (!e->target || !e->target[0])
			return "empty symlink target";
		if (strlen(e->target) > ST_PATH_MAX)
			return "symlink target longer than ST_PATH_MAX";
		return NULL;
	default:
		return "unknown entry type";
	}
	if (e->mode > 0777)
		return "mode has bits other than permissions";
	return NULL;
}

/*
 * The rules on entry i of a decoded tree, entries 0..i-1 having passed
 * them: NULL when it is fine, else why not. By induction every ancestor of
 * an entry is a directory.
 */
static const char *check_entry(const struct st_entry *entries, size_t i, struct check_state *st)
{
	const char *why = check_path(entries, i, st);
	if (why)
		return why;
	if (entries[i].type == ST_OPAQUE || entries[i].type == ST_WHITEOUT)
		return "unknown entry type"; /* delta records */
	bool top;
	const struct st_entry *parent = parent_of(entries, i, &top);
	if (!top && !parent)
		return "parent directory not listed before it";
	if (parent && parent->type == ST_SYMLINK)
		return "below a symlink";
	if (parent && parent->type != ST_DIR)
		return "below a file";
	return check_fields(&entries[i], st, true);
}

/*
 * The rules on entry i of a delta, entries 0..i-1 having passed them: those
 * of check_entry, except that a parent may be in the base (checked when the
 * delta is applied), that "o" and "x" records are allowed, and that the
 * byte limit is the applied tree's.
 */
static const char *check_delta_entry(const struct st_entry *entries, size_t i,
				     struct check_state *st)
{
	const char *why = check_path(entries, i, st);
	if (why)
		return why;
	bool top;
	const struct st_entry *parent = parent_of(entries, i, &top);
	if (parent && parent->type != ST_DIR && parent->type != ST_OPAQUE)
		return parent->type == ST_SYMLINK  ? "below a symlink" :
		       parent->type == ST_WHITEOUT ? "below a removed path" :
						     "below a file";
	if (entries[i].type == ST_WHITEOUT)
		return NULL;
	return check_fields(&entries[i], st, false);
}

int st_entry_push_chunk(struct st_entry *e, size_t *cap, const struct st_id *id)
{
	if (e->n_chunks == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		struct st_id *n = realloc(e->chunks, nc * sizeof(*n));
		if (!n)
			return -ENOMEM;
		e->chunks = n;
		*cap = nc;
	}
	e->chunks[e->n_chunks++] = *id;
	return 0;
}

int st_entry_push_hole(struct st_entry *e, size_t *cap, uint64_t len)
{
	if (len == 0)
		return 0;
	if (e->n_holes && e->holes[e->n_holes - 1].at == e->n_chunks) {
		/* Right after another hole: one hole. */
		if (len > UINT64_MAX - e->holes[e->n_holes - 1].len)
			return -EOVERFLOW;
		e->holes[e->n_holes - 1].len += len;
		return 0;
	}
	if (e->n_holes == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		struct st_hole *n = realloc(e->holes, nc * sizeof(*n));
		if (!n)
			return -ENOMEM;
		e->holes = n;
		*cap = nc;
	}
	e->holes[e->n_holes++] = (struct st_hole){ .at = e->n_chunks, .len = len };
	return 0;
}

int st_entry_copy_pieces(struct st_entry *dst, const struct st_entry *src)
{
	struct st_id *c = NULL;
	struct st_hole *h = NULL;
	if (src->n_chunks && !(c = malloc(src->n_chunks * sizeof(*c))))
		return -ENOMEM;
	if (src->n_holes && !(h = malloc(src->n_holes * sizeof(*h)))) {
		free(c);
		return -ENOMEM;
	}
	if (c)
		memcpy(c, src->chunks, src->n_chunks * sizeof(*c));
	if (h)
		memcpy(h, src->holes, src->n_holes * sizeof(*h));
	dst->chunks = c;
	dst->n_chunks = src->n_chunks;
	dst->holes = h;
	dst->n_holes = src->n_holes;
	return 0;
}

uint64_t st_entry_hole_bytes(const struct st_entry *e)
{
	uint64_t n = 0;
	for (size_t k = 0; k < e->n_holes; k++)
		n += e->holes[k].len;
	return n;
}

/* ---- path sets ---- */

struct pathset_slot {
	const char *path; /* NULL: free */
	size_t len;
	uint64_t hash;
};

struct st_pathset {
	struct pathset_slot *slots;
	size_t cap; /* a power of two, more than twice the count */
	size_t n;
};

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv(uint64_t h, unsigned char c)
{
	return (h ^ c) * FNV_PRIME;
}

int st_pathset_new(size_t expect, struct st_pathset **ret)
{
	struct st_pathset *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cap = 16;
	while (s->cap < 2 * expect + 2) {
		if (s->cap > SIZE_MAX / 4 / sizeof(*s->slots)) {
			free(s);
			return -ENOMEM;
		}
		s->cap *= 2;
	}
	s->slots = calloc(s->cap, sizeof(*s->slots));
	if (!s->slots) {
		free(s);
		return -ENOMEM;
	}
	*ret = s;
	return 0;
}

void st_pathset_free(struct st_pathset *s)
{
	if (!s)
		return;
	free(s->slots);
	free(s);
}

static void slot_put(struct pathset_slot *slots, size_t cap, struct pathset_slot v)
{
	size_t i = (size_t)v.hash & (cap - 1);
	while (slots[i].path)
		i = (i + 1) & (cap - 1);
	slots[i] = v;
}

int st_pathset_add(struct st_pathset *s, const char *path)
{
	if (2 * (s->n + 1) >= s->cap) {
		size_t nc = s->cap * 2;
		struct pathset_slot *ns = calloc(nc, sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		for (size_t i = 0; i < s->cap; i++)
			if (s->slots[i].path)
				slot_put(ns, nc, s->slots[i]);
		free(s->slots);
		s->slots = ns;
		s->cap = nc;
	}
	uint64_t h = FNV_OFFSET;
	size_t len = 0;
	for (; path[len]; len++)
		h = fnv(h, (unsigned char)path[len]);
	slot_put(s->slots, s->cap, (struct pathset_slot){ .path = path, .len = len, .hash = h });
	s->n++;
	return 0;
}

static bool pathset_has_n(const struct st_pathset *s, const char *p, size_t len, uint64_t h)
{
	for (size_t i = (size_t)h & (s->cap - 1); s->slots[i].path; i = (i + 1) & (s->cap - 1))
		if (s->slots[i].hash == h && s->slots[i].len == len &&
		    memcmp(s->slots[i].path, p, len) == 0)
			return true;
	return false;
}

bool st_pathset_has_ancestor(const struct st_pathset *s, const char *path)
{
	if (!s || s->n == 0)
		return false;
	uint64_t h = FNV_OFFSET;
	for (size_t i = 0; path[i]; i++) {
		if (path[i] == '/' && pathset_has_n(s, path, i, h))
			return true;
		h = fnv(h, (unsigned char)path[i]);
	}
	return false;
}

/* ---- applying a delta ---- */

void st_entries_free(struct st_entry *entries, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(entries[i].path);
		free(entries[i].target);
		free(entries[i].chunks);
		free(entries[i].holes);
	}
	free(entries);
}

void st_manifest_free(struct st_manifest *m)
{
	if (!m)
		return;
	st_entries_free(m->entries, m->n_entries);
	free(m);
}

DEFINE_CLEANUP_FUNC(struct st_manifest, st_manifest_free)

static void entry_free(struct st_entry *e)
{
	free(e->path);
	free(e->target);
	free(e->chunks);
	free(e->holes);
	memset(e, 0, sizeof(*e));
}

int st_manifest_apply(struct st_manifest *base, struct st_manifest *delta,
		      const struct st_manifest_limits *limits, struct st_manifest **ret,
		      struct al_error *err)
{
	_cleanup_(st_manifest_freep) struct st_manifest *b = base, *d = delta;
	if (!b || !d || (b->base[0] && !b->applied) || !d->base[0] || d->applied ||
	    strcmp(b->tenant, d->tenant) != 0)
		return al_error_set(err, -EINVAL, "manifest: not a delta and its base");
	if (b->n_entries != d->base_entries)
		return al_error_set(err, -EBADMSG,
				    "manifest: the delta was made over a base of %" PRIu64
				    " entries, its base %s has %zu",
				    d->base_entries, d->base, b->n_entries);

	/* The paths of d that replace or remove what the base has below them
	 * (borrowed: moved into out or freed with d, after cuts is gone). */
	struct st_pathset *cuts = NULL;
	size_t total = b->n_entries + d->n_entries;
	_cleanup_free_ struct st_entry *out = calloc(total ? total : 1, sizeof(*out));
	if (!out || st_pathset_new(d->n_entries, &cuts) < 0)
		return al_error_set_errno(err, -ENOMEM, "manifest: applying a delta");
	for (size_t i = 0; i < d->n_entries; i++)
		if (d->entries[i].type != ST_DIR && st_pathset_add(cuts, d->entries[i].path) < 0) {
			st_pathset_free(cuts);
			return al_error_set_errno(err, -ENOMEM, "manifest: applying a delta");
		}

	/* Merge: base entries that survive, and d's entries but removals. */
	size_t i = 0, j = 0, n = 0;
	while (i < b->n_entries || j < d->n_entries) {
		int c = i == b->n_entries ? 1 :
			j == d->n_entries ? -1 :
					    st_path_cmp(b->entries[i].path, d->entries[j].path);
		if (c < 0) {
			struct st_entry *e = &b->entries[i++];
			if (st_pathset_has_ancestor(cuts, e->path))
				entry_free(e);
			else
				out[n++] = *e, memset(e, 0, sizeof(*e));
			continue;
		}
		if (c == 0)
			entry_free(&b->entries[i++]); /* replaced or removed */
		struct st_entry *e = &d->entries[j++];
		if (e->type == ST_WHITEOUT)
			continue; /* freed with d: cuts still points at its path */
		if (e->type == ST_OPAQUE)
			e->type = ST_DIR;
		out[n++] = *e;
		memset(e, 0, sizeof(*e));
	}

	st_pathset_free(cuts);
	size_t max_entries = limits && limits->max_entries ? limits->max_entries :
							     ST_MANIFEST_MAX_ENTRIES_DEFAULT;
	struct check_state st = {
		.max_depth = limits && limits->max_depth ? limits->max_depth :
							   ST_MANIFEST_MAX_DEPTH_DEFAULT,
		.max_bytes = limits ? limits->max_bytes : 0,
	};
	int rc = 0;
	char q[SNIP_BUF];
	if (n > max_entries)
		rc = al_error_set(err, -EBADMSG, "manifest: %zu entries, more than the limit %zu",
				  n, max_entries);
	for (size_t k = 0; rc == 0 && k < n; k++) {
		const char *why = check_entry(out, k, &st);
		if (why)
			rc = al_error_set(
				err, -EBADMSG,
				"manifest: the delta does not apply to its base %s: \"%s\": %s",
				d->base, snip(out[k].path, strlen(out[k].path), q), why);
	}
	if (rc < 0) {
		for (size_t k = 0; k < n; k++)
			entry_free(&out[k]);
		return rc;
	}
	st_entries_free(d->entries, d->n_entries); /* all moved out or freed: the arrays */
	d->entries = TAKE_PTR(out);
	d->n_entries = n;
	d->applied = true;
	*ret = TAKE_PTR(d);
	return 0;
}

/* ---- writing ---- */

static int put_name(struct buf *b, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		int r;
		if (is_plain(*p)) {
			r = buf_append_char(b, (char)*p);
		} else {
			char esc[3] = { '%', enc_hex_upper[*p >> 4], enc_hex_upper[*p & 15] };
			r = buf_append(b, esc, sizeof(esc));
		}
		if (r < 0)
			return r;
	}
	return 0;
}

static int put_entry(struct buf *b, const struct st_entry *e)
{
	int r;
	switch (e->type) {
	case ST_DIR:
	case ST_OPAQUE:
		r = buf_appendf(b, "%c %04" PRIo32 " %" PRId64 " ", (char)e->type, e->mode,
				e->mtime_ns);
		if (r >= 0)
			r = put_name(b, e->path);
		break;
	case ST_WHITEOUT:
		r = buf_append(b, "x ", 2);
		if (r >= 0)
			r = put_name(b, e->path);
		break;
	case ST_FILE:
		r = buf_appendf(b, "f %04" PRIo32 " %" PRId64 " %" PRIu64 " ", e->mode, e->mtime_ns,
				e->size);
		if (r >= 0)
			r = put_name(b, e->path);
		if (r >= 0 && e->n_chunks == 0 && e->n_holes == 0)
			r = buf_append(b, " -", 2);
		/* Pieces in file order: a hole at k comes before chunk k. */
		for (size_t k = 0, h = 0, first = 1; r >= 0 && k <= e->n_chunks; k++) {
			if (h < e->n_holes && e->holes[h].at == k) {
				r = buf_appendf(b, "%ch%" PRIu64, first ? ' ' : ',',
						e->holes[h].len);
				h++;
				first = 0;
			}
			if (r < 0 || k == e->n_chunks)
				break;
			char hex[ST_ID_HEX + 1];
			st_id_hex(&e->chunks[k], hex);
			r = buf_append_char(b, first ? ' ' : ',');
			if (r >= 0)
				r = buf_append(b, hex, ST_ID_HEX);
			first = 0;
		}
		break;
	case ST_SYMLINK:
		r = buf_appendf(b, "l %" PRId64 " ", e->mtime_ns);
		if (r >= 0)
			r = put_name(b, e->path);
		if (r >= 0)
			r = buf_append_char(b, ' ');
		if (r >= 0)
			r = put_name(b, e->target);
		break;
	default:
		return -EINVAL;
	}
	if (r >= 0)
		r = buf_append_char(b, '\n');
	return r < 0 ? r : 0;
}

int st_manifest_write(const struct st_manifest *m, const uint8_t *key, size_t keylen, char **ret,
		      size_t *ret_len, struct al_error *err)
{
	char q[SNIP_BUF];
	if (!m || !ret || !ret_len || !key)
		return al_error_set(err, -EINVAL, "manifest: nothing to write");
	if (keylen < ST_HMAC_KEY_MIN)
		return al_error_set(err, -EINVAL, "manifest: HMAC key shorter than %d bytes",
				    ST_HMAC_KEY_MIN);
	if (strnlen(m->tenant, sizeof(m->tenant)) == sizeof(m->tenant) ||
	    !st_tenant_valid(m->tenant))
		return al_error_set(err, -EINVAL, "manifest: invalid tenant");
	size_t slen = strnlen(m->session, sizeof(m->session));
	if (!session_valid(m->session, slen))
		return al_error_set(err, -EINVAL, "manifest: invalid session");
	size_t plen = strnlen(m->parent, sizeof(m->parent));
	if (plen != 0 && (plen != ST_ID_HEX || !enc_is_lower_hex(m->parent, plen)))
		return al_error_set(err, -EINVAL, "manifest: parent is not a checkpoint id");
	if (m->n_entries > ST_MANIFEST_MAX_ENTRIES_DEFAULT)
		return al_error_set(err, -EINVAL, "manifest: %zu entries, more than %d",
				    m->n_entries, ST_MANIFEST_MAX_ENTRIES_DEFAULT);
	if (m->n_entries && !m->entries)
		return al_error_set(err, -EINVAL, "manifest: no entries");
	size_t blen = strnlen(m->base, sizeof(m->base));
	if (blen != 0 && (blen != ST_ID_HEX || !enc_is_lower_hex(m->base, blen)))
		return al_error_set(err, -EINVAL, "manifest: base is not a checkpoint id");
	if (m->applied)
		return al_error_set(err, -EINVAL, "manifest: an applied delta is not written");
	size_t llen = strnlen(m->lower, sizeof(m->lower));
	if (llen != 0 && (llen != ST_ID_HEX || !enc_is_lower_hex(m->lower, llen)))
		return al_error_set(err, -EINVAL, "manifest: lower is not a checkpoint id");

	struct check_state st = { .max_depth = ST_MANIFEST_MAX_DEPTH_DEFAULT };
	for (size_t i = 0; i < m->n_entries; i++) {
		const char *why = blen ? check_delta_entry(m->entries, i, &st) :
					 check_entry(m->entries, i, &st);
		if (why) {
			const char *p = m->entries[i].path ? m->entries[i].path : "";
			return al_error_set(err, -EINVAL, "manifest: entry %zu \"%s\": %s", i + 1,
					    snip(p, strlen(p), q), why);
		}
	}

	/* Version 2 only when a file has a hole: a manifest without stays
	 * what it always was (and readable by versions that know only 1). */
	bool holes = false;
	for (size_t i = 0; i < m->n_entries && !holes; i++)
		holes = m->entries[i].type == ST_FILE && m->entries[i].n_holes > 0;
	_cleanup_buf_ struct buf b = BUF_INIT(TEXT_MAX);
	int r = buf_appendf(&b, "%s\ntenant %s\nsession %s\nparent %s\n",
			    holes ? MAGIC_V2 : MAGIC_V1, m->tenant, m->session,
			    plen ? m->parent : "-");
	if (r >= 0 && blen)
		r = buf_appendf(&b, "base %s %" PRIu64 "\n", m->base, m->base_entries);
	if (r >= 0 && m->lower[0])
		r = buf_appendf(&b, "lower %s\n", m->lower);
	if (r >= 0)
		r = buf_appendf(&b, "created %" PRId64 "\nentries %zu\n", m->created, m->n_entries);
	for (size_t i = 0; r >= 0 && i < m->n_entries; i++)
		r = put_entry(&b, &m->entries[i]);
	char mac[ST_ID_HEX + 1];
	if (r >= 0)
		r = hmac_hex(key, keylen, b.data, b.len, mac);
	if (r >= 0)
		r = buf_appendf(&b, HMAC_PREFIX "%s\n", mac);
	if (r < 0)
		return al_error_set_errno(err, r, "manifest: writing");
	char *text;
	size_t len;
	r = buf_steal(&b, &text, &len);
	if (r < 0)
		return al_error_set_errno(err, r, "manifest: writing");
	*ret = text;
	*ret_len = len;
	return 0;
}

/* ---- parsing ---- */

/* Decodes a path or target field; NULL on success, else why not. */
static const char *decode_name(const char *s, size_t n, char **ret)
{
	if (n == 0)
		return "empty name";
	_cleanup_free_ char *out = malloc(n + 1);
	if (!out)
		return "out of memory";
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '%') {
			unsigned v = 0;
			if (n - i < 3)
				return "truncated %XX escape";
			for (size_t k = 1; k <= 2; k++) {
				char h = s[i + k];
				if (h >= '0' && h <= '9')
					v = v * 16 + (unsigned)(h - '0');
				else if (h >= 'A' && h <= 'F')
					v = v * 16 + (unsigned)(h - 'A' + 10);
				else
					return "bad %XX escape (upper-case hex only)";
			}
			if (v == 0)
				return "encoded NUL";
			if (is_plain((unsigned char)v))
				return "escape of a byte that must appear as it is";
			c = (unsigned char)v;
			i += 2;
		} else if (!is_plain(c)) {
			return "byte that must be escaped";
		}
		if (o == ST_PATH_MAX)
			return "longer than ST_PATH_MAX";
		out[o++] = (char)c;
	}
	out[o] = '\0';
	*ret = TAKE_PTR(out);
	return NULL;
}

/* Signed decimal without leading zeros ("0", "-5", not "-0" or "05"). */
static bool parse_i64(const char *s, size_t n, int64_t *ret)
{
	bool neg = n > 0 && s[0] == '-';
	const char *d = s + neg;
	size_t dn = n - neg;
	if (dn == 0 || dn > 19 || (d[0] == '0' && (dn > 1 || neg)))
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i < dn; i++) {
		if (d[i] < '0' || d[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(d[i] - '0'); /* 19 digits fit */
	}
	if (v > (uint64_t)INT64_MAX + neg)
		return false;
	*ret = neg ? (int64_t)(0 - v) : (int64_t)v;
	return true;
}

static bool parse_u64(const char *s, size_t n, uint64_t *ret)
{
	if (n == 0 || n > 20 || (s[0] == '0' && n > 1))
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		unsigned digit = (unsigned)(s[i] - '0');
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, digit, &v))
			return false;
	}
	*ret = v;
	return true;
}

/* Permission bits as exactly 4 octal digits, 0000..0777. */
static bool parse_mode(const char *s, size_t n, uint32_t *ret)
{
	if (n != 4 || s[0] != '0')
		return false;
	uint32_t v = 0;
	for (size_t i = 1; i < 4; i++) {
		if (s[i] < '0' || s[i] > '7')
			return false;
		v = v * 8 + (uint32_t)(s[i] - '0');
	}
	*ret = v;
	return true;
}

/* The pieces of a file: chunk ids and (holes set: version 2) holes. */
static const char *parse_chunks(const char *s, size_t n, bool holes, struct st_entry *e)
{
	if (n == 1 && s[0] == '-')
		return NULL;
	/* Counted first, so that what is allocated is what the text holds:
	 * an id takes 65 bytes of it, a hole at least 3 (",h1"). */
	size_t ids = 0, hs = 0;
	for (size_t i = 0;;) {
		const char *c = memchr(s + i, ',', n - i);
		size_t end = c ? (size_t)(c - s) : n, tl = end - i;
		if (tl > 0 && s[i] == 'h') {
			if (!holes)
				return "a hole in a version 1 manifest";
			hs++;
		} else if (tl != ST_ID_HEX) {
			return "chunk ids are not 64 hex digits each";
		} else {
			ids++;
		}
		if (!c)
			break;
		i = end + 1;
	}
	if (ids && !(e->chunks = calloc(ids, sizeof(*e->chunks))))
		return "out of memory";
	if (hs && !(e->holes = calloc(hs, sizeof(*e->holes))))
		return "out of memory";
	for (size_t i = 0;;) {
		const char *c = memchr(s + i, ',', n - i);
		size_t end = c ? (size_t)(c - s) : n, tl = end - i;
		if (s[i] == 'h') {
			uint64_t len;
			if (!parse_u64(s + i + 1, tl - 1, &len) || len == 0)
				return "a hole's length is not a count of bytes (1 or more)";
			e->holes[e->n_holes++] = (struct st_hole){ .at = e->n_chunks, .len = len };
		} else {
			if (!enc_is_lower_hex(s + i, ST_ID_HEX) ||
			    st_id_parse(s + i, ST_ID_HEX, &e->chunks[e->n_chunks]) < 0)
				return "chunk ids are not 64 lower-case hex digits each";
			e->n_chunks++;
		}
		if (!c)
			break;
		i = end + 1;
	}
	return NULL;
}

/* Splits a line at single spaces into at most max fields; the count. */
static size_t split_fields(const char *p, size_t n, const char **f, size_t *fl, size_t max)
{
	size_t count = 0, start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && p[i] != ' ')
			continue;
		if (count == max)
			return max + 1;
		f[count] = p + start;
		fl[count] = i - start;
		count++;
		start = i + 1;
	}
	return count;
}

/* Fills e from an entry line; NULL on success, else why not. */
static const char *parse_entry(const char *p, size_t n, bool delta, bool holes, struct st_entry *e)
{
	const char *f[7];
	size_t fl[7];
	size_t count = split_fields(p, n, f, fl, 6);
	if (fl[0] != 1)
		return "unknown entry type";
	size_t want;
	if (!delta && (p[0] == 'o' || p[0] == 'x'))
		return "unknown entry type"; /* delta records */
	switch (p[0]) {
	case 'd':
	case 'o':
		want = 4;
		break;
	case 'x':
		want = 2;
		break;
	case 'f':
		want = 6;
		break;
	case 'l':
		want = 4;
		break;
	default:
		return "unknown entry type";
	}
	if (count != want)
		return "wrong number of fields";
	e->type = (enum st_entry_type)p[0];
	if (e->type == ST_WHITEOUT)
		return decode_name(f[1], fl[1], &e->path);
	if (e->type == ST_SYMLINK) {
		e->mode = 0777; /* what lstat says of every symlink */
		if (!parse_i64(f[1], fl[1], &e->mtime_ns))
			return "bad mtime";
		const char *why = decode_name(f[2], fl[2], &e->path);
		if (why)
			return why;
		return decode_name(f[3], fl[3], &e->target);
	}
	if (!parse_mode(f[1], fl[1], &e->mode))
		return "mode is not 4 octal digits of permission bits (0000-0777)";
	if (!parse_i64(f[2], fl[2], &e->mtime_ns))
		return "bad mtime";
	if (e->type == ST_DIR || e->type == ST_OPAQUE)
		return decode_name(f[3], fl[3], &e->path);
	if (!parse_u64(f[3], fl[3], &e->size))
		return "bad size";
	const char *why = decode_name(f[4], fl[4], &e->path);
	if (why)
		return why;
	return parse_chunks(f[5], fl[5], holes, e);
}

struct line_reader {
	const char *p, *end; /* what is left; ends with LF */
	size_t line;	     /* number of the line last read */
};

static bool next_line(struct line_reader *lr, const char **ret, size_t *ret_len)
{
	if (lr->p == lr->end)
		return false;
	const char *nl = memchr(lr->p, '\n', (size_t)(lr->end - lr->p));
	*ret = lr->p;
	*ret_len = (size_t)(nl - lr->p);
	lr->p = nl + 1;
	lr->line++;
	return true;
}

/* A header line "<key> <value>": the value, or NULL. */
static const char *header_value(struct line_reader *lr, const char *key, size_t *ret_len)
{
	const char *p;
	size_t n, kl = strlen(key);
	if (!next_line(lr, &p, &n) || n <= kl + 1 || memcmp(p, key, kl) != 0 || p[kl] != ' ')
		return NULL;
	*ret_len = n - kl - 1;
	return p + kl + 1;
}

static int bad_line(struct al_error *err, size_t line, const char *what, const char *p, size_t n)
{
	char q[SNIP_BUF];
	return al_error_set(err, -EBADMSG, "manifest line %zu: %s: \"%s\"", line, what,
			    snip(p, n, q));
}

int st_manifest_parse(const char *text, size_t len, const uint8_t *key, size_t keylen,
		      const char *tenant, const struct st_manifest_limits *limits,
		      struct st_manifest **ret, struct al_error *err)
{
	if (!key || keylen < ST_HMAC_KEY_MIN)
		return al_error_set(err, -EINVAL, "manifest: HMAC key shorter than %d bytes",
				    ST_HMAC_KEY_MIN);
	if (!tenant || !st_tenant_valid(tenant))
		return al_error_set(err, -EINVAL, "manifest: invalid tenant to check against");
	if (!text && len)
		return al_error_set(err, -EINVAL, "manifest: no text");

	/* 1. The last line is the HMAC of every byte before it. */
	if (len < HMAC_LINE_LEN || text[len - 1] != '\n')
		return al_error_set(err, -EBADMSG, "manifest: not authentic (no hmac line)");
	size_t body_len = len - HMAC_LINE_LEN;
	const char *mac_line = text + body_len;
	if ((body_len > 0 && text[body_len - 1] != '\n') ||
	    memcmp(mac_line, HMAC_PREFIX, sizeof(HMAC_PREFIX) - 1) != 0)
		return al_error_set(err, -EBADMSG, "manifest: not authentic (no hmac line)");
	char mac[ST_ID_HEX + 1];
	int r = hmac_hex(key, keylen, text, body_len, mac);
	if (r < 0)
		return al_error_set_errno(err, r, "manifest: computing its HMAC");
	if (CRYPTO_memcmp(mac, mac_line + sizeof(HMAC_PREFIX) - 1, ST_ID_HEX) != 0)
		return al_error_set(err, -EBADMSG, "manifest: not authentic (hmac mismatch)");

	/* 2. The header, line by line. */
	size_t max_entries = limits && limits->max_entries ? limits->max_entries :
							     ST_MANIFEST_MAX_ENTRIES_DEFAULT;
	struct check_state st = {
		.max_depth = limits && limits->max_depth ? limits->max_depth :
							   ST_MANIFEST_MAX_DEPTH_DEFAULT,
		.max_bytes = limits ? limits->max_bytes : 0,
	};
	struct line_reader lr = { .p = text, .end = text + body_len };
	const char *p = NULL, *v;
	size_t n = 0, vn;
	bool v2 = false;
	if (!next_line(&lr, &p, &n) || n != strlen(MAGIC_V1) ||
	    (memcmp(p, MAGIC_V1, n) != 0 && !(v2 = memcmp(p, MAGIC_V2, n) == 0)))
		return bad_line(err, 1, "not an airlock manifest version 1 or 2", p, n);

	_cleanup_(st_manifest_freep) struct st_manifest *m = calloc(1, sizeof(*m));
	if (!m)
		return al_error_set_errno(err, -ENOMEM, "manifest");

	if (!(v = header_value(&lr, "tenant", &vn)))
		return al_error_set(err, -EBADMSG, "manifest line 2: expected \"tenant <name>\"");
	if (vn != strlen(tenant) || memcmp(v, tenant, vn) != 0)
		return al_error_set(err, -EACCES, "manifest line 2: not a manifest of tenant %s",
				    tenant);
	memcpy(m->tenant, v, vn);

	if (!(v = header_value(&lr, "session", &vn)) || !session_valid(v, vn))
		return al_error_set(err, -EBADMSG,
				    "manifest line 3: expected \"session <[a-zA-Z0-9._-]{1,64}>\"");
	memcpy(m->session, v, vn);

	if (!(v = header_value(&lr, "parent", &vn)) ||
	    !((vn == 1 && v[0] == '-') || (vn == ST_ID_HEX && enc_is_lower_hex(v, vn))))
		return al_error_set(err, -EBADMSG,
				    "manifest line 4: expected \"parent <checkpoint id or ->\"");
	if (vn == ST_ID_HEX)
		memcpy(m->parent, v, vn);

	/* "base <id> <its entries>" (a delta) or nothing (a full manifest);
	 * then "lower <id>" when it was taken of a layered workspace. */
	size_t hl = 5;
	if ((size_t)(lr.end - lr.p) > 5 && memcmp(lr.p, "base ", 5) == 0) {
		if (!(v = header_value(&lr, "base", &vn)) || vn < ST_ID_HEX + 2 ||
		    !enc_is_lower_hex(v, ST_ID_HEX) || v[ST_ID_HEX] != ' ' ||
		    !parse_u64(v + ST_ID_HEX + 1, vn - ST_ID_HEX - 1, &m->base_entries))
			return al_error_set(err, -EBADMSG,
					    "manifest line %zu: expected "
					    "\"base <checkpoint id> <entries>\"",
					    hl);
		memcpy(m->base, v, ST_ID_HEX);
		hl++;
	}
	if ((size_t)(lr.end - lr.p) > 6 && memcmp(lr.p, "lower ", 6) == 0) {
		if (!(v = header_value(&lr, "lower", &vn)) || vn != ST_ID_HEX ||
		    !enc_is_lower_hex(v, vn))
			return al_error_set(err, -EBADMSG,
					    "manifest line %zu: expected \"lower <checkpoint id>\"",
					    hl);
		memcpy(m->lower, v, vn);
		hl++;
	}

	if (!(v = header_value(&lr, "created", &vn)) || !parse_i64(v, vn, &m->created))
		return al_error_set(err, -EBADMSG,
				    "manifest line %zu: expected \"created <seconds>\"", hl);

	uint64_t count;
	hl++;
	if (!(v = header_value(&lr, "entries", &vn)) || !parse_u64(v, vn, &count))
		return al_error_set(err, -EBADMSG,
				    "manifest line %zu: expected \"entries <count>\"", hl);
	if (count > max_entries)
		return al_error_set(err, -EBADMSG,
				    "manifest line %zu: %" PRIu64
				    " entries, more than the limit %zu",
				    hl, count, max_entries);
	size_t lines = 0;
	for (const char *s = lr.p; (s = memchr(s, '\n', (size_t)(lr.end - s))); s++)
		lines++;
	if (lines != count)
		return al_error_set(err, -EBADMSG,
				    "manifest line %zu: %" PRIu64
				    " entries declared, %zu entry lines",
				    hl, count, lines);

	m->declared = count;
	if (limits && limits->header_only) {
		*ret = TAKE_PTR(m);
		return 0;
	}

	/* 3. The entries: count is bounded by the input's lines now. */
	bool holes = false; /* version 2 is for manifests with a hole */
	if (count > 0) {
		m->entries = calloc((size_t)count, sizeof(*m->entries));
		if (!m->entries)
			return al_error_set_errno(err, -ENOMEM, "manifest: %" PRIu64 " entries",
						  count);
	}
	for (size_t i = 0; i < count; i++) {
		next_line(&lr, &p, &n);
		m->n_entries = i + 1; /* so st_manifest_free sees what parse_entry allocated */
		const char *why = parse_entry(p, n, m->base[0] != '\0', v2, &m->entries[i]);
		if (!why)
			why = m->base[0] ? check_delta_entry(m->entries, i, &st) :
					   check_entry(m->entries, i, &st);
		if (why)
			return bad_line(err, lr.line, why, p, n);
		holes = holes || m->entries[i].n_holes;
	}
	if (v2 && !holes)
		return al_error_set(err, -EBADMSG,
				    "manifest line 1: version 2 without a hole (not canonical)");

	*ret = TAKE_PTR(m);
	return 0;
}

void st_manifest_id(const char *text, size_t len, char out[ST_ID_HEX + 1])
{
	struct st_id id;
	st_sha256(text, len, &id);
	st_id_hex(&id, out);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A manifest's head: what a manifest's header says (delta or not, of what
 * base, how many entries, which lower layer), its length and its id, in a
 * small object of its own, "tenants/T/heads/<id>", authenticated with the
 * repository's HMAC key like the manifest:
 *
 *   airlock-head 1
 *   tenant <tenant>
 *   id <checkpoint id>
 *   bytes <the manifest's length>
 *   base <checkpoint id> <entries>     or "base -"
 *   lower <checkpoint id>              or "lower -"
 *   entries <count>
 *   hmac <hex of HMAC-SHA256(key, every byte before this line)>
 *
 * The HMAC of a manifest covers every byte of it, so believing its header
 * means hashing all of it: 15 MB for a tree of 100,000 files. A snapshot
 * over a checkpoint and a fork need only the header; a head gives it for
 * the cost of a few hundred bytes. It is written by the commit right after
 * its manifest (by the writer that just made and so knows the manifest),
 * and since the id is the manifest's SHA-256, a head names exactly one
 * manifest. A restore, a diff, a listing or GC still load and check the
 * manifest itself. A manifest without a head (written before heads, or a
 * crash between the two writes) is read as before.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/encode.h"
#include "common/parse.h"
#include "store/internal.h"

#define HEAD_MAGIC "airlock-head 1\n"
#define HEAD_MAX 1024

/* The text before the hmac line: one canonical form, so that a head is
 * checked by writing it again and comparing. */
static int head_body(const struct st_repo *r, const struct st_head *h, struct buf *b)
{
	int rc = buf_appendf(b, HEAD_MAGIC "tenant %s\nid %s\nbytes %" PRIu64 "\n", r->tenant,
			     h->id, h->bytes);
	if (rc >= 0)
		rc = h->base[0] ?
			     buf_appendf(b, "base %s %" PRIu64 "\n", h->base, h->base_entries) :
			     buf_appendf(b, "base -\n");
	if (rc >= 0)
		rc = buf_appendf(b, "lower %s\nentries %" PRIu64 "\n", h->lower[0] ? h->lower : "-",
				 h->entries);
	return rc < 0 ? -ENOMEM : 0;
}

int st_head_put(struct st_repo *r, struct st_fault *f, const struct st_head *h,
		struct al_error *err)
{
	_cleanup_buf_ struct buf b = BUF_INIT(HEAD_MAX);
	char mac[ST_ID_HEX + 1], key[ST_KEY_MAX + 1];
	if (head_body(r, h, &b) < 0 || st_hmac_hex(r->key, r->keylen, b.data, b.len, mac) < 0 ||
	    buf_appendf(&b, "hmac %s\n", mac) < 0)
		return al_error_set(err, -ENOMEM, "head of checkpoint %s: out of memory", h->id);
	st_repo_key(key, sizeof(key), r, "heads/%s", h->id);
	st_fault_point(f);
	return st_obj_put(r->os, key, b.data, b.len, err);
}

/* "<name> " at p: the rest of the line, NUL-terminated in place. */
static char *field(char **p, const char *name)
{
	size_t n = strlen(name);
	char *nl = strchr(*p, '\n');
	if (!nl || strncmp(*p, name, n) != 0 || (*p)[n] != ' ')
		return NULL;
	*nl = '\0';
	char *v = *p + n + 1;
	*p = nl + 1;
	return v;
}

static bool copy_id(char out[ST_ID_HEX + 1], const char *v)
{
	if (strcmp(v, "-") == 0) {
		out[0] = '\0';
		return true;
	}
	if (strlen(v) != ST_ID_HEX || !enc_is_lower_hex(v, ST_ID_HEX))
		return false;
	memcpy(out, v, ST_ID_HEX + 1);
	return true;
}

int st_head_load(struct st_repo *r, const char *id, struct st_head *ret, struct al_error *err)
{
	memset(ret, 0, sizeof(*ret));
	char key[ST_KEY_MAX + 1];
	if (!st_id_valid(id))
		return al_error_set(err, -EINVAL, "'%s' is not a checkpoint id (64 hex digits)",
				    id);
	st_repo_key(key, sizeof(key), r, "heads/%s", id);
	_cleanup_free_ void *data = NULL;
	size_t len = 0;
	int rc = st_obj_get(r->os, key, HEAD_MAX, &data, &len, err);
	if (rc == -ENOENT) {
		al_error_clear(err);
		return 0;
	}
	if (rc < 0)
		return rc;
	/* Parsed from a copy (NULs go in), then written again from what was
	 * parsed and compared with the original, HMAC line aside. */
	_cleanup_free_ char *text = malloc(len + 1);
	if (!text)
		return al_error_set(err, -ENOMEM, "out of memory");
	memcpy(text, data, len);
	text[len] = '\0';
	char *p = text, *v, *end;
	struct st_head h = { 0 };
	bool ok = len > strlen(HEAD_MAGIC) && memcmp(p, HEAD_MAGIC, strlen(HEAD_MAGIC)) == 0 &&
		  !memchr(data, '\0', len);
	p += strlen(HEAD_MAGIC);
	ok = ok && field(&p, "tenant") && (v = field(&p, "id")) && copy_id(h.id, v) && h.id[0] &&
	     (v = field(&p, "bytes")) && parse_u64(v, &h.bytes) == 0 && (v = field(&p, "base"));
	if (ok && strcmp(v, "-") != 0) {
		ok = strlen(v) > ST_ID_HEX + 1 && v[ST_ID_HEX] == ' ';
		if (ok) {
			v[ST_ID_HEX] = '\0';
			ok = copy_id(h.base, v) &&
			     parse_u64(v + ST_ID_HEX + 1, &h.base_entries) == 0;
		}
	}
	ok = ok && (v = field(&p, "lower")) && copy_id(h.lower, v) && (v = field(&p, "entries")) &&
	     parse_u64(v, &h.entries) == 0 && (end = field(&p, "hmac")) &&
	     strlen(end) == ST_ID_HEX && *p == '\0';
	if (!ok)
		return al_error_set(err, -EBADMSG, "%s: not a checkpoint head", key);
	_cleanup_buf_ struct buf b = BUF_INIT(HEAD_MAX);
	char mac[ST_ID_HEX + 1];
	if (head_body(r, &h, &b) < 0 || st_hmac_hex(r->key, r->keylen, b.data, b.len, mac) < 0)
		return al_error_set(err, -ENOMEM, "out of memory");
	/* The body as it would be written, the tenant this repository's: a
	 * head of another tenant, or edited in any byte, fails here. */
	if (b.len + strlen("hmac \n") + ST_ID_HEX != len || memcmp(b.data, data, b.len) != 0 ||
	    !st_hmac_equal(mac, end))
		return al_error_set(err, -EBADMSG, "%s: not authentic", key);
	if (strcmp(h.id, id) != 0)
		return al_error_set(err, -EBADMSG, "%s: names checkpoint %s", key, h.id);
	*ret = h;
	return 1;
}

int st_head_check(struct st_repo *r, const struct st_head *h, struct al_error *err)
{
	char key[ST_KEY_MAX + 1];
	char last;
	st_repo_key(key, sizeof(key), r, "manifests/%s", h->id);
	/* Its last byte, an LF: the manifest is there, at least that long. */
	int rc = h->bytes ? st_obj_get_range(r->os, key, h->bytes - 1, 1, &last, err) : -EBADMSG;
	if (rc == -ENOENT) {
		al_error_clear(err);
		return al_error_set(err, -ENOENT, "no checkpoint %s in tenant %s", h->id,
				    r->tenant);
	}
	if (rc < 0 || last != '\n') {
		al_error_clear(err);
		return al_error_set(err, -EBADMSG, "checkpoint %s: the manifest is not whole",
				    h->id);
	}
	return 0;
}

int st_checkpoint_chain(struct st_repo *r, const char *id, struct st_head *ret, unsigned *depth,
			uint64_t *tree_entries, struct al_error *err)
{
	int rc = st_checkpoint_head(r, id, ret, err);
	if (rc < 0)
		return rc;
	struct st_head h = *ret;
	uint64_t sum = h.entries;
	unsigned k = 0;
	while (h.base[0]) {
		if (k == ST_CHAIN_MAX)
			return al_error_set(err, -EBADMSG,
					    "checkpoint %s: a chain of more than %d deltas", id,
					    ST_CHAIN_MAX);
		struct st_head b;
		rc = st_checkpoint_head(r, h.base, &b, err);
		if (rc < 0)
			return rc;
		if (b.entries != h.base_entries)
			return al_error_set(err, -EBADMSG,
					    "checkpoint %s: made over a base of %" PRIu64
					    " entries, its base %s has %" PRIu64,
					    id, h.base_entries, h.base, b.entries);
		sum += b.entries;
		k++;
		h = b;
	}
	*depth = k;
	*tree_entries = sum;
	return 0;
}

int st_checkpoint_head(struct st_repo *r, const char *id, struct st_head *ret, struct al_error *err)
{
	int rc = st_head_load(r, id, ret, err);
	if (rc < 0)
		return rc;
	if (rc == 1)
		return st_head_check(r, ret, err);
	/* No head: the manifest's own header, its HMAC checked over it all. */
	static const struct st_manifest_limits head_only = { .header_only = true };
	struct st_manifest *m = NULL;
	rc = st_manifest_load_raw(r, id, &head_only, &m, err);
	if (rc < 0)
		return rc;
	snprintf(ret->id, sizeof(ret->id), "%s", id);
	memcpy(ret->base, m->base, sizeof(ret->base));
	memcpy(ret->lower, m->lower, sizeof(ret->lower));
	ret->base_entries = m->base_entries;
	ret->entries = m->declared;
	st_manifest_free(m);
	return 0;
}

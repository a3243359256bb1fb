/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Committing a checkpoint. The writes go in this order: chunks (packs,
 * then indexes), manifest, log entry, latest, stat cache. Each write is
 * atomic, and each refers only to what is already durable, so a crash
 * between any two leaves the previous checkpoints whole and the store
 * consistent (docs/checkpoints.md, "Crash safety").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "store/internal.h"

static int put_step(struct st_repo *r, struct st_fault *f, const char *key, const void *data,
		    size_t len, struct al_error *err)
{
	st_fault_point(f);
	return st_obj_put(r->os, key, data, len, err);
}

int st_commit_entries(struct st_repo *r, struct st_fault *f, const char *session,
		      const char *parent, const struct st_layer_head *lh, struct st_entry *entries,
		      size_t n, struct timespec now, struct buf *cache, char out_id[ST_ID_HEX + 1],
		      struct al_error *err)
{
	if (n)
		qsort(entries, n, sizeof(*entries), st_entry_cmp);
	struct st_manifest m = { .created = (int64_t)now.tv_sec,
				 .entries = entries,
				 .n_entries = n };
	if (lh && lh->base) {
		snprintf(m.base, sizeof(m.base), "%s", lh->base);
		m.base_entries = lh->base_entries;
	}
	if (lh && lh->lower)
		snprintf(m.lower, sizeof(m.lower), "%s", lh->lower);
	snprintf(m.tenant, sizeof(m.tenant), "%s", r->tenant);
	snprintf(m.session, sizeof(m.session), "%s", session);
	snprintf(m.parent, sizeof(m.parent), "%s", parent);
	char *text = NULL;
	size_t len = 0;
	int rc = st_manifest_write(&m, r->key, r->keylen, &text, &len, err);
	if (rc == 0) {
		st_fault_point(f);
		rc = st_cas_flush(r->cas, err);
	}
	char key[ST_KEY_MAX + 1];
	if (rc == 0) {
		st_manifest_id(text, len, out_id);
		st_repo_key(key, sizeof(key), r, "manifests/%s", out_id);
		rc = put_step(r, f, key, text, len, err);
	}
	if (rc == 0) {
		/* Before anything names the manifest: a snapshot over it or a
		 * fork of it reads this instead of the whole manifest. */
		struct st_head h = { .base_entries = m.base_entries, .entries = n, .bytes = len };
		memcpy(h.id, out_id, sizeof(h.id));
		memcpy(h.base, m.base, sizeof(h.base));
		memcpy(h.lower, m.lower, sizeof(h.lower));
		rc = st_head_put(r, f, &h, err);
	}
	if (rc == 0) {
		st_repo_key(key, sizeof(key), r, "sessions/%s/log/%020" PRId64 "-%s", session,
			    st_ts_ns(now), out_id);
		rc = put_step(r, f, key, "", 0, err);
	}
	if (rc == 0 && !cache) {
		st_repo_key(key, sizeof(key), r, "sessions/%s/statcache", session);
		st_fault_point(f);
		rc = st_obj_del(r->os, key, err);
	}
	if (rc == 0) {
		char line[ST_ID_HEX + 2];
		snprintf(line, sizeof(line), "%s\n", out_id);
		st_repo_key(key, sizeof(key), r, "sessions/%s/latest", session);
		rc = put_step(r, f, key, line, ST_ID_HEX + 1, err);
	}
	if (rc == 0 && cache) {
		/* Sealed to this checkpoint: the next snapshot believes it only
		 * over this one (statcache.c). */
		st_repo_key(key, sizeof(key), r, "sessions/%s/statcache", session);
		rc = st_statcache_seal(r, session, out_id, cache) < 0 ?
			     al_error_set(err, -ENOMEM, "out of memory") :
			     put_step(r, f, key, cache->data, cache->len, err);
	}
	free(text);
	return rc;
}

int st_commit(struct st_repo *r, const char *session, struct st_entry *entries, size_t n,
	      char out_id[ST_ID_HEX + 1], struct al_error *err)
{
	struct st_fault fault = st_fault_start(r);
	if (!st_session_valid(session))
		return st_session_error(session, err);
	_cleanup_close_ int lock = -1;
	int rc = st_repo_lock_writer(r, &lock, err);
	if (rc < 0)
		return rc;
	char parent[ST_ID_HEX + 1];
	rc = st_session_latest(r, session, parent, err);
	if (rc < 0)
		return rc;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	return st_commit_entries(r, &fault, session, parent, NULL, entries, n, now, NULL, out_id,
				 err);
}

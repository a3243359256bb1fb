/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A session's references in the store: adopting another session's
 * checkpoint as a starting point (a fork), and deleting a session's
 * references so that GC collects what only it held.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "store/internal.h"

/*
 * The checkpoint must be this tenant's and there, or the session would
 * start from nothing. Its head (store/internal.h) says so for a few hundred
 * bytes whatever the tree's size: authentic, this tenant's, naming this id,
 * and its manifest present; a delta's bases likewise, down to the full
 * manifest at the end of the chain, each of the size the delta over it
 * was made over. Every byte of the manifests is checked again by whatever
 * reads the tree (a restore, a snapshot over it). A checkpoint with a
 * manifest in its chain that has no head is loaded and checked whole, as
 * it always was.
 */
static int adopt_check(struct st_repo *r, const char *id, struct al_error *err)
{
	struct st_head h;
	int rc = st_head_load(r, id, &h, err);
	for (int depth = 0; rc == 1; depth++) {
		if ((rc = st_head_check(r, &h, err)) < 0)
			return rc;
		if (!h.base[0])
			return 0;
		if (depth == ST_CHAIN_MAX)
			return al_error_set(err, -EBADMSG,
					    "checkpoint %s: a chain of more than %d deltas", id,
					    ST_CHAIN_MAX);
		struct st_head b;
		rc = st_head_load(r, h.base, &b, err);
		if (rc == 1 && b.entries != h.base_entries)
			return al_error_set(err, -EBADMSG,
					    "checkpoint %s: made over a base of %" PRIu64
					    " entries, its base %s has %" PRIu64,
					    id, h.base_entries, h.base, b.entries);
		h = b;
	}
	if (rc < 0)
		return rc;
	struct st_manifest *m = NULL;
	rc = st_manifest_load(r, id, NULL, &m, err);
	st_manifest_free(m);
	return rc;
}

int st_session_adopt(struct st_repo *r, const char *session, const char *id, struct al_error *err)
{
	if (!st_session_valid(session))
		return st_session_error(session, err);
	_cleanup_close_ int lock = -1;
	int rc = st_repo_lock_writer(r, &lock, err);
	if (rc < 0)
		return rc;
	rc = adopt_check(r, id, err);
	if (rc < 0)
		return rc;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	char key[ST_KEY_MAX + 1];
	/* As a commit writes them: the log entry first, then latest. */
	if (st_repo_key(key, sizeof(key), r, "sessions/%s/log/%020" PRId64 "-%s", session,
			st_ts_ns(now), id) < 0)
		return al_error_set(err, -ENAMETOOLONG, "session name too long");
	rc = st_obj_put(r->os, key, "", 0, err);
	if (rc < 0)
		return rc;
	st_repo_key(key, sizeof(key), r, "sessions/%s/statcache", session);
	rc = st_obj_del(r->os, key, err);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	char line[ST_ID_HEX + 2];
	snprintf(line, sizeof(line), "%s\n", id);
	st_repo_key(key, sizeof(key), r, "sessions/%s/latest", session);
	return st_obj_put(r->os, key, line, ST_ID_HEX + 1, err);
}

struct keys {
	char **v;
	size_t n, cap;
};

static int collect(const char *key, void *ud)
{
	struct keys *k = ud;
	if (k->n == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 64;
		char **v = realloc(k->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		k->v = v;
		k->cap = cap;
	}
	if (!(k->v[k->n] = strdup(key)))
		return -ENOMEM;
	k->n++;
	return 0;
}

int st_session_delete(struct st_repo *r, const char *session, struct al_error *err)
{
	if (!st_session_valid(session))
		return st_session_error(session, err);
	_cleanup_close_ int lock = -1;
	int rc = st_repo_lock_writer(r, &lock, err);
	if (rc < 0)
		return rc;
	char prefix[ST_KEY_MAX + 1];
	if (st_repo_key(prefix, sizeof(prefix), r, "sessions/%s/", session) < 0)
		return al_error_set(err, -ENAMETOOLONG, "session name too long");
	struct keys k = { 0 };
	rc = st_obj_list(r->os, prefix, collect, &k, err);
	if (rc == -ENOMEM)
		al_error_set(err, rc, "out of memory");
	/* latest first: a session cut short by a crash here still has log
	 * entries, and deleting again finishes the job. */
	char latest[ST_KEY_MAX + 1];
	st_repo_key(latest, sizeof(latest), r, "sessions/%s/latest", session);
	if (rc >= 0) {
		rc = st_obj_del(r->os, latest, err);
		if (rc == -ENOENT)
			rc = 0;
	}
	for (size_t i = 0; rc >= 0 && i < k.n; i++) {
		if (strcmp(k.v[i], latest) == 0)
			continue;
		rc = st_obj_del(r->os, k.v[i], err);
		if (rc == -ENOENT)
			rc = 0;
	}
	for (size_t i = 0; i < k.n; i++)
		free(k.v[i]);
	free(k.v);
	return rc;
}

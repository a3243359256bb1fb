/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object store: named immutable blobs under a tenant prefix.
 *
 * Keys are "tenants/<tenant>/<kind>/<name>" (see st_key_valid); every
 * object of a tenant lives under its prefix, so deleting a tenant is
 * deleting a prefix, and nothing of one tenant can be named from another.
 * The interface is a table of operations so that the S3-compatible backend
 * of a later version drops in beside the local directory one.
 *
 * Writes are atomic: a reader sees the whole object or none (temp file,
 * fsync, rename, fsync of the directory for the directory backend).
 * Every function returns 0 (or a count) or a negative errno with err set.
 */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define ST_KEY_MAX 512
#define ST_TENANT_MAX 64

struct st_objstore;

struct st_objstore_ops {
	int (*put)(struct st_objstore *s, const char *key, const void *data, size_t len,
		   struct al_error *err);
	/* Reads the whole object, at most max bytes (-EFBIG beyond). */
	int (*get)(struct st_objstore *s, const char *key, size_t max, void **ret, size_t *ret_len,
		   struct al_error *err);
	/* Reads len bytes at off (-EIO when the object is shorter). */
	int (*get_range)(struct st_objstore *s, const char *key, uint64_t off, size_t len,
			 void *buf, struct al_error *err);
	/* Maps the whole object read-only (1 <= length <= max; -EFBIG
	 * beyond, -EBADMSG when empty), as it is when mapped: a put that
	 * replaces it later does not change what the mapping shows. NULL:
	 * the backend cannot (callers read instead). */
	int (*map)(struct st_objstore *s, const char *key, size_t max, const void **ret,
		   size_t *ret_len, struct al_error *err);
	/* 1 present, 0 absent, or a negative errno. */
	int (*exists)(struct st_objstore *s, const char *key, struct al_error *err);
	/* Deleting an absent object is not an error. */
	int (*del)(struct st_objstore *s, const char *key, struct al_error *err);
	/* Calls fn for every key below prefix (which ends in '/'), in no
	 * particular order; fn returning < 0 stops the walk with that value. */
	int (*list)(struct st_objstore *s, const char *prefix, int (*fn)(const char *key, void *ud),
		    void *ud, struct al_error *err);
	void (*close)(struct st_objstore *s);
};

struct st_objstore {
	const struct st_objstore_ops *ops;
};

/* A directory (created 0700 if absent; must be owned by the caller and not
 * writable by others). Objects are files below it, named by their keys. */
int st_objstore_open_dir(const char *root, struct st_objstore **ret, struct al_error *err);

/* Directory backend: removes temp files of puts that never finished (a
 * crash between create and rename) older than min_age_sec, so that puts in
 * flight are left alone. Returns the count removed; 0 for other backends. */
int st_objstore_sweep_temp(struct st_objstore *s, unsigned min_age_sec, struct al_error *err);

/*
 * The store's writer/collector lock. Writers (snapshot, commit, import) hold
 * it shared from before their first chunk is stored until their last
 * reference is written; readers of chunks (restore, export, diff) hold it
 * shared too; GC holds it exclusive for its mark and sweep, so no chunk of
 * a write in flight is ever collected and no pack is rewritten under a
 * reader (see store/gc.h). On *ret_fd it returns a descriptor to close to
 * release the lock (-1: a shared lock on a store this process may not
 * write and that has no lock file, where no GC can run). Blocks until
 * granted.
 *
 * Directory backend: flock(2) on "<root>/.lock" (created 0600), so it works
 * between processes on one host. Other backends return -EOPNOTSUPP: an
 * S3-compatible backend cannot flock and will need a lease object (written
 * with a conditional put, renewed while held, taken over once expired).
 */
int st_objstore_lock(struct st_objstore *s, bool exclusive, int *ret_fd, struct al_error *err);

/* Keys: 1..ST_KEY_MAX bytes of [a-z0-9._-] segments separated by '/', no
 * empty, "." or ".." segment, starting with "tenants/<tenant>/". */
bool st_key_valid(const char *key);
/* Tenant names: 1..ST_TENANT_MAX of [a-z0-9_-], not starting with '-'. */
bool st_tenant_valid(const char *tenant);

static inline int st_obj_put(struct st_objstore *s, const char *key, const void *data, size_t len,
			     struct al_error *err)
{
	return s->ops->put(s, key, data, len, err);
}
static inline int st_obj_get(struct st_objstore *s, const char *key, size_t max, void **ret,
			     size_t *ret_len, struct al_error *err)
{
	return s->ops->get(s, key, max, ret, ret_len, err);
}
static inline int st_obj_get_range(struct st_objstore *s, const char *key, uint64_t off, size_t len,
				   void *buf, struct al_error *err)
{
	return s->ops->get_range(s, key, off, len, buf, err);
}
/* -EOPNOTSUPP (err untouched) when the backend cannot map. */
static inline int st_obj_map(struct st_objstore *s, const char *key, size_t max, const void **ret,
			     size_t *ret_len, struct al_error *err)
{
	return s->ops->map ? s->ops->map(s, key, max, ret, ret_len, err) : -EOPNOTSUPP;
}

/* Ends a mapping st_obj_map made. */
void st_obj_unmap(const void *p, size_t len);

static inline int st_obj_exists(struct st_objstore *s, const char *key, struct al_error *err)
{
	return s->ops->exists(s, key, err);
}
static inline int st_obj_del(struct st_objstore *s, const char *key, struct al_error *err)
{
	return s->ops->del(s, key, err);
}
static inline int st_obj_list(struct st_objstore *s, const char *prefix,
			      int (*fn)(const char *key, void *ud), void *ud, struct al_error *err)
{
	return s->ops->list(s, prefix, fn, ud, err);
}
static inline void st_objstore_close(struct st_objstore *s)
{
	if (s)
		s->ops->close(s);
}

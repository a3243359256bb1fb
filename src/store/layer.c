/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Layered workspaces (docs/checkpoints.md): reading an overlayfs upper
 * directory's attributes, composing deltas, and committing a delta (or the
 * whole tree, when the delta has grown large).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "store/internal.h"

/* A delta this large, and larger than a quarter of its base, is stored
 * as a full manifest instead (docs/checkpoints.md). */
#define FLATTEN_MIN 4096

/*
 * An overlayfs attribute of an upper-layer entry ("trusted.overlay.NAME",
 * or "user.overlay.NAME" for a mount with userxattr): its value's length
 * (at most size - 1, NUL-terminated), 0 when it has none, or -errno. fd is
 * the entry itself, or (name set) its directory.
 */
static ssize_t ovl_xattr(bool user, int fd, const char *name, const char *attr, char *buf,
			 size_t size)
{
	char proc[64 + NAME_MAX], key[64];
	if (name &&
	    (size_t)snprintf(proc, sizeof(proc), "/proc/self/fd/%d/%s", fd, name) >= sizeof(proc))
		return -ENAMETOOLONG;
	/* Only the namespace the mount uses: on a mount without userxattr,
	 * "user.overlay.*" is an ordinary attribute the workspace may set. */
	snprintf(key, sizeof(key), "%s.overlay.%s", user ? "user" : "trusted", attr);
	ssize_t n = name ? lgetxattr(proc, key, buf, size - 1) : fgetxattr(fd, key, buf, size - 1);
	if (n >= 0) {
		buf[n] = '\0';
		return n ? n : 1;
	}
	if (errno == ERANGE)
		return (ssize_t)size; /* present, and longer than any value we read */
	if (errno != ENODATA && errno != ENOTSUP)
		return -errno;
	return 0;
}

int st_layer_kind(bool user, int dirfd, const char *name, const char *path, const struct stat *st,
		  struct al_error *err)
{
	char v[256];
	if (S_ISCHR(st->st_mode) && st->st_rdev == 0)
		return 1;
	if (!S_ISREG(st->st_mode))
		return 0;
	ssize_t n = ovl_xattr(user, dirfd, name, "metacopy", v, sizeof(v));
	if (n > 0)
		return al_error_set(
			err, -EOPNOTSUPP,
			"%s: a metadata-only copy in the upper layer (mount the overlay "
			"with metacopy=off)",
			path);
	if (n == 0)
		n = ovl_xattr(user, dirfd, name, "whiteout", v, sizeof(v));
	if (n < 0)
		return al_error_set_errno(err, (int)n, "cannot read the attributes of %s", path);
	return n > 0;
}

int st_layer_opaque(bool user, int fd, const char *path, struct al_error *err)
{
	char v[256];
	ssize_t n = ovl_xattr(user, fd, NULL, "redirect", v, sizeof(v));
	if (n > 0)
		return al_error_set(err, -EOPNOTSUPP,
				    "%s: a renamed directory in the upper layer (mount the overlay "
				    "with redirect_dir=off)",
				    path);
	if (n == 0)
		n = ovl_xattr(user, fd, NULL, "opaque", v, sizeof(v));
	if (n < 0)
		return al_error_set_errno(err, (int)n, "cannot read the attributes of %s", path);
	/* "y": opaque; "x" (Linux 6.7+): holds whiteouts made of attributes. */
	return n > 0 && n < (ssize_t)sizeof(v) && strcmp(v, "y") == 0;
}

/* The bytes of the files of the tree delta d (sorted, nd entries) makes
 * of base b: b's files that d neither replaces nor removes, and d's. */
static int tree_bytes(const struct st_manifest *b, const struct st_entry *d, size_t nd,
		      uint64_t *ret)
{
	struct st_pathset *cuts = NULL;
	if (st_pathset_new(nd, &cuts) < 0)
		return -ENOMEM;
	for (size_t k = 0; k < nd; k++)
		if (d[k].type != ST_DIR && st_pathset_add(cuts, d[k].path) < 0) {
			st_pathset_free(cuts);
			return -ENOMEM;
		}
	uint64_t sum = 0;
	bool over = false;
	for (size_t k = 0; k < b->n_entries; k++) {
		const struct st_entry *e = &b->entries[k];
		if (e->type != ST_FILE ||
		    st_find_path(d, nd, sizeof(*d), offsetof(struct st_entry, path), e->path) ||
		    st_pathset_has_ancestor(cuts, e->path))
			continue;
		over |= __builtin_add_overflow(sum, e->size, &sum);
	}
	for (size_t k = 0; k < nd; k++)
		if (d[k].type == ST_FILE)
			over |= __builtin_add_overflow(sum, d[k].size, &sum);
	st_pathset_free(cuts);
	*ret = over ? UINT64_MAX : sum;
	return 0;
}

int st_layer_commit(struct st_repo *r, struct st_fault *f, const char *session, const char *parent,
		    const struct st_layer_head *lh, const struct st_manifest_limits *limits,
		    struct st_entry **entries, size_t *n, struct timespec now, struct buf *cache,
		    char out_id[ST_ID_HEX + 1], struct al_error *err)
{
	uint64_t base_n = lh->base_tree;
	size_t max_entries = limits && limits->max_entries ? limits->max_entries :
							     ST_MANIFEST_MAX_ENTRIES_DEFAULT;
	bool big = *n > FLATTEN_MIN && *n > base_n / 4;
	struct st_manifest *b = NULL;
	int rc;
	/* The base's tree (a delta's applied). */
	if (limits && limits->max_bytes) {
		rc = st_manifest_load(r, lh->base, NULL, &b, err);
		uint64_t bytes = 0;
		if (rc == 0 && tree_bytes(b, *entries, *n, &bytes) < 0)
			rc = al_error_set(err, -ENOMEM, "out of memory");
		if (rc == 0 && bytes > limits->max_bytes)
			rc = al_error_set(
				err, -EFBIG,
				"the layered workspace's files add up to %" PRIu64
				" bytes (holes count), more than the byte limit of %" PRIu64
				" (--max-bytes); nothing was committed",
				bytes, limits->max_bytes);
		if (rc < 0) {
			st_manifest_free(b);
			return rc;
		}
	}
	if (!big && base_n + *n <= max_entries) {
		st_manifest_free(b);
		return st_commit_entries(r, f, session, parent, lh, *entries, *n, now, cache,
					 out_id, err);
	}

	if (!b) {
		rc = st_manifest_load(r, lh->base, NULL, &b, err);
		if (rc < 0)
			return rc;
	}
	struct st_manifest *d = calloc(1, sizeof(*d)), *t = NULL;
	if (!d) {
		st_manifest_free(b);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	snprintf(d->tenant, sizeof(d->tenant), "%s", r->tenant);
	snprintf(d->base, sizeof(d->base), "%s", lh->base);
	d->base_entries = b->n_entries;
	d->entries = *entries;
	d->n_entries = *n;
	*entries = NULL;
	*n = 0;
	rc = st_manifest_apply(b, d, limits, &t, err);
	if (rc < 0)
		return rc;
	*entries = t->entries;
	*n = t->n_entries;
	t->entries = NULL;
	t->n_entries = 0;
	st_manifest_free(t);
	/* (A small delta near the limit is stored whole too: rare, and right.) */
	const struct st_layer_head full = { .lower = lh->lower };
	return st_commit_entries(r, f, session, parent, &full, *entries, *n, now, cache, out_id,
				 err);
}

int st_layer_compose(struct st_entry *lops, size_t nl, struct st_entry *up, size_t nu,
		     struct st_entry **ret, size_t *ret_n)
{
	/* What the upper layer replaces or removes, subtree and all (the
	 * paths stay where they are until the set is freed: moved to out). */
	struct st_pathset *cuts = NULL;
	struct st_entry *out = calloc(nl + nu ? nl + nu : 1, sizeof(*out));
	if (!out || st_pathset_new(nu, &cuts) < 0) {
		free(out);
		return -ENOMEM;
	}
	size_t i = 0, j = 0, n = 0;
	for (size_t k = 0; k < nu; k++)
		if (up[k].type != ST_DIR && st_pathset_add(cuts, up[k].path) < 0) {
			st_pathset_free(cuts);
			free(out);
			return -ENOMEM;
		}
	while (i < nl || j < nu) {
		int c = i == nl ? 1 : j == nu ? -1 : st_path_cmp(lops[i].path, up[j].path);
		if (c < 0) {
			struct st_entry *e = &lops[i++];
			if (!st_pathset_has_ancestor(cuts, e->path)) {
				out[n++] = *e;
				memset(e, 0, sizeof(*e));
			}
			continue;
		}
		struct st_entry *e = &up[j++];
		if (c == 0) {
			/* A directory the upper layer merges into one the lower
			 * layer's delta replaced, removed or made a file: it
			 * still hides what the base has there. */
			if (e->type == ST_DIR && lops[i].type != ST_DIR)
				e->type = ST_OPAQUE;
			i++;
		}
		out[n++] = *e;
		memset(e, 0, sizeof(*e));
	}
	st_pathset_free(cuts);
	*ret = out;
	*ret_n = n;
	return 0;
}

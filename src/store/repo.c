/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A repository: one tenant's part of an object store, its chunk store and
 * the key of its manifests; sessions' references and loading manifests.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/parse.h"
#include "store/internal.h"

#define KEY_MAX 1024

/* ---- threads ---- */

int st_threads(unsigned *ret, struct al_error *err)
{
	const char *s = getenv("AIRLOCK_STORE_THREADS");
	uint64_t v;
	if (s && *s) {
		if (parse_u64(s, &v) < 0 || v == 0 || v > ST_THREADS_MAX)
			return al_error_set(
				err, -EINVAL,
				"AIRLOCK_STORE_THREADS wants a thread count from 1 to %d, "
				"not '%s'",
				ST_THREADS_MAX, s);
		*ret = (unsigned)v;
		return 0;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	*ret = n < 1 ? 1 : n > ST_THREADS_DEFAULT_MAX ? ST_THREADS_DEFAULT_MAX : (unsigned)n;
	return 0;
}

/* ---- fault injection for the crash tests (see tests/integration/test_checkpoint.py) ---- */

void st_fault_point(struct st_fault *f)
{
	if (f && f->step > 0 && ++f->count == f->step)
		_exit(99);
}

/* ---- names ---- */

int st_path_error(struct al_error *err, int r, const char *what, const char *path)
{
	if (r == -ELOOP)
		return al_error_set(err, r,
				    "%s %s: a symbolic link in the path is not followed (name the "
				    "real path, with no link in any component)",
				    what, path);
	if (r == -EINVAL)
		return al_error_set(err, r, "%s %s: not a path to a file or directory", what, path);
	return al_error_set_errno(err, r, "%s %s", what, path);
}

bool st_session_valid(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > ST_SESSION_MAX || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
		      c == '.'))
			return false;
	}
	return true;
}

int st_session_error(const char *session, struct al_error *err)
{
	return al_error_set(err, -EINVAL, "session '%s': expected 1 to %d of [a-z0-9._-]", session,
			    ST_SESSION_MAX);
}

bool st_id_valid(const char *id)
{
	if (strlen(id) != ST_ID_HEX)
		return false;
	for (size_t i = 0; i < ST_ID_HEX; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}

/* ---- repository ---- */

int st_repo_open(const struct st_repo_opts *o, struct st_repo **ret, struct al_error *err)
{
	if (!st_tenant_valid(o->tenant))
		return al_error_set(err, -EINVAL, "tenant '%s': expected 1 to %d of [a-z0-9_-]",
				    o->tenant, ST_TENANT_MAX);
	if (!o->key || o->keylen < ST_HMAC_KEY_MIN)
		return al_error_set(err, -EINVAL, "the checkpoint key is shorter than %d bytes",
				    ST_HMAC_KEY_MIN);
	struct st_repo *r = calloc(1, sizeof(*r));
	if (!r)
		return al_error_set(err, -ENOMEM, "out of memory");
	snprintf(r->tenant, sizeof(r->tenant), "%s", o->tenant);
	r->key = malloc(o->keylen);
	if (!r->key) {
		free(r);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	memcpy(r->key, o->key, o->keylen);
	r->keylen = o->keylen;
	r->level = o->level ? o->level : 1;
	r->fault_step = o->fault_step > 0 ? o->fault_step : 0;
	int rc = st_objstore_open_dir(o->store_dir, &r->os, err);
	if (rc == 0)
		rc = st_cas_open_lazy(r->os, r->tenant, r->level, &r->cas, err);
	if (rc < 0) {
		st_repo_close(r);
		return rc;
	}
	*ret = r;
	return 0;
}

struct st_cas *st_repo_cas(struct st_repo *r)
{
	/* For importers and exporters, which look chunks up: the index read
	 * now. Should that fail, their first put or get reads it again and
	 * reports why. */
	struct al_error e = { 0 };
	(void)st_cas_load(r->cas, &e);
	return r->cas;
}

int st_repo_cas_load(struct st_repo *r, struct al_error *err)
{
	return st_cas_load(r->cas, err);
}

struct st_objstore *st_repo_objstore(struct st_repo *r)
{
	return r->os;
}

const char *st_repo_tenant(const struct st_repo *r)
{
	return r->tenant;
}

int st_repo_lock_writer(struct st_repo *r, int *ret_fd, struct al_error *err)
{
	_cleanup_close_ int fd = -1;
	int rc = st_objstore_lock(r->os, false, &fd, err);
	if (rc < 0)
		return rc;
	struct st_cas_stats cs;
	st_cas_stats(r->cas, &cs);
	if (cs.chunks_new == 0 && cs.packs_written == 0) {
		/* Read again once needed, under the lock (st_cas_load). */
		struct st_cas *fresh = NULL;
		rc = st_cas_open_lazy(r->os, r->tenant, r->level, &fresh, err);
		if (rc < 0)
			return rc;
		st_cas_close(r->cas);
		r->cas = fresh;
	}
	*ret_fd = TAKE_FD(fd);
	return 0;
}

void st_repo_close(struct st_repo *r)
{
	if (!r)
		return;
	st_cas_close(r->cas);
	st_objstore_close(r->os);
	if (r->key) {
		explicit_bzero(r->key, r->keylen);
		free(r->key);
	}
	free(r);
}

int st_key_load(const char *path, bool create, uint8_t **ret, size_t *ret_len, struct al_error *err)
{
	/* The key's directory without following a link (a user who owns one
	 * on the way cannot point it at a file of root's), then the key
	 * relative to it. */
	char name[NAME_MAX + 1];
	bool dir_only = false;
	_cleanup_close_ int dfd =
		open_parent_no_symlinks(AT_FDCWD, path, name, sizeof(name), &dir_only);
	if (dfd < 0)
		return st_path_error(err, dfd, "the key", path);
	if (dir_only)
		return al_error_set(err, -EISDIR, "the key %s: names a directory", path);
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0 && errno == ENOENT && create) {
		uint8_t k[32];
		if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k))
			return al_error_set_errno(err, -EIO, "cannot make a key");
		fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		int r = fd < 0 ? -errno : write_full(fd, k, sizeof(k));
		if (fd >= 0 && r == 0 && fsync(fd) < 0)
			r = -errno;
		if (fd >= 0)
			close(fd);
		explicit_bzero(k, sizeof(k));
		if (r < 0)
			return al_error_set_errno(err, r, "cannot write the key %s", path);
		fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	}
	if (fd < 0)
		return st_path_error(err, -errno, "cannot open the key", path);
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) ||
	    st.st_uid != geteuid()) {
		close(fd);
		return al_error_set(err, -EPERM,
				    "the key %s must be a regular file of yours with mode 0600",
				    path);
	}
	uint8_t *k = malloc(KEY_MAX + 1);
	ssize_t n = k ? read_full(fd, k, KEY_MAX + 1) : -ENOMEM;
	close(fd);
	if (n < ST_HMAC_KEY_MIN || n > KEY_MAX) {
		if (k) {
			explicit_bzero(k, KEY_MAX + 1);
			free(k);
		}
		return al_error_set(err, -EINVAL, "the key %s must hold %d to %d bytes", path,
				    ST_HMAC_KEY_MIN, KEY_MAX);
	}
	*ret = k;
	*ret_len = (size_t)n;
	return 0;
}

int st_fault_step_from_env(void)
{
	const char *s = getenv("AIRLOCK_FAULT_STEP");
	uint64_t v;
	if (!s || !*s || parse_u64(s, &v) < 0 || v == 0 || v >= 1000000)
		return 0;
	return (int)v;
}

int st_repo_key(char *out, size_t size, const struct st_repo *r, const char *fmt, ...)
{
	int n = snprintf(out, size, "tenants/%s/", r->tenant);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(out + n, size - (size_t)n, fmt, ap);
	va_end(ap);
	return m < 0 || (size_t)m >= size - (size_t)n ? -ENAMETOOLONG : 0;
}

int st_session_latest(struct st_repo *r, const char *session, char out[ST_ID_HEX + 1],
		      struct al_error *err)
{
	out[0] = '\0';
	if (!st_session_valid(session))
		return st_session_error(session, err);
	char key[ST_KEY_MAX + 1];
	if (st_repo_key(key, sizeof(key), r, "sessions/%s/latest", session) < 0)
		return al_error_set(err, -ENAMETOOLONG, "session name too long");
	int e = st_obj_exists(r->os, key, err);
	if (e <= 0)
		return e;
	void *data = NULL;
	size_t len = 0;
	int rc = st_obj_get(r->os, key, ST_ID_HEX + 1, &data, &len, err);
	if (rc < 0)
		return rc;
	if (len != ST_ID_HEX + 1 || ((char *)data)[ST_ID_HEX] != '\n') {
		free(data);
		return al_error_set(err, -EBADMSG, "%s: not a checkpoint id", key);
	}
	memcpy(out, data, ST_ID_HEX);
	out[ST_ID_HEX] = '\0';
	free(data);
	if (!st_id_valid(out))
		return al_error_set(err, -EBADMSG, "%s: not a checkpoint id", key);
	return 0;
}

/* ---- ids as typed, a session's log ---- */

struct prefix_ctx {
	const char *prefix;
	size_t len, prefix_len, found;
	char id[ST_ID_HEX + 1];
};

static int on_manifest(const char *key, void *ud)
{
	struct prefix_ctx *p = ud;
	const char *name = key + p->prefix_len;
	if (strlen(name) == ST_ID_HEX && strncmp(name, p->prefix, p->len) == 0 &&
	    st_id_valid(name) && p->found++ == 0)
		memcpy(p->id, name, ST_ID_HEX + 1);
	return 0;
}

int st_checkpoint_resolve(struct st_repo *r, const char *typed, char out[ST_ID_HEX + 1],
			  struct al_error *err)
{
	size_t len = strlen(typed);
	bool hex = len > 0 && len <= ST_ID_HEX;
	for (size_t i = 0; hex && i < len; i++)
		hex = (typed[i] >= '0' && typed[i] <= '9') || (typed[i] >= 'a' && typed[i] <= 'f');
	if (!hex || len < 4)
		return al_error_set(err, -EINVAL,
				    "'%.80s' is not a checkpoint id (64 hex digits, or at least "
				    "the first 4 of them)",
				    typed);
	if (len == ST_ID_HEX) {
		memcpy(out, typed, ST_ID_HEX + 1);
		return 0;
	}
	char prefix[ST_KEY_MAX + 1];
	if (st_repo_key(prefix, sizeof(prefix), r, "manifests/") < 0)
		return al_error_set(err, -ENAMETOOLONG, "key too long");
	struct prefix_ctx p = { .prefix = typed, .len = len, .prefix_len = strlen(prefix) };
	int rc = st_obj_list(r->os, prefix, on_manifest, &p, err);
	if (rc == -ENOENT) {
		al_error_clear(err);
		rc = 0;
	}
	if (rc < 0)
		return rc;
	if (p.found == 0)
		return al_error_set(err, -ENOENT, "no checkpoint %s... in tenant %s", typed,
				    r->tenant);
	if (p.found > 1)
		return al_error_set(err, -EINVAL,
				    "%s... is more than one checkpoint (%zu start with it): give "
				    "more of the id",
				    typed, p.found);
	memcpy(out, p.id, ST_ID_HEX + 1);
	return 0;
}

struct log_entry {
	int64_t when;
	char id[ST_ID_HEX + 1];
};

struct log_ctx {
	struct log_entry *e;
	size_t n, cap, prefix_len;
};

static int on_log_key(const char *key, void *ud)
{
	struct log_ctx *l = ud;
	const char *name = key + l->prefix_len;
	/* "<20 digits of unix ns>-<id>"; anything else is not a log entry. */
	if (strlen(name) != 20 + 1 + ST_ID_HEX || name[20] != '-' || !st_id_valid(name + 21))
		return 0;
	char digits[21];
	memcpy(digits, name, 20);
	digits[20] = '\0';
	uint64_t when;
	if (parse_u64(digits, &when) < 0 || when > INT64_MAX)
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 32;
		struct log_entry *e = realloc(l->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		l->e = e;
		l->cap = cap;
	}
	l->e[l->n].when = (int64_t)when;
	memcpy(l->e[l->n].id, name + 21, ST_ID_HEX + 1);
	l->n++;
	return 0;
}

static int log_cmp(const void *a, const void *b)
{
	const struct log_entry *x = a, *y = b;
	return x->when < y->when ? -1 : x->when > y->when ? 1 : strcmp(x->id, y->id);
}

int st_session_log(struct st_repo *r, const char *session,
		   int (*fn)(const char *id, int64_t when_ns, void *ud), void *ud,
		   struct al_error *err)
{
	if (!st_session_valid(session))
		return st_session_error(session, err);
	char prefix[ST_KEY_MAX + 1];
	if (st_repo_key(prefix, sizeof(prefix), r, "sessions/%s/log/", session) < 0)
		return al_error_set(err, -ENAMETOOLONG, "key too long");
	struct log_ctx l = { .prefix_len = strlen(prefix) };
	int rc = st_obj_list(r->os, prefix, on_log_key, &l, err);
	if (rc == -ENOENT) {
		al_error_clear(err);
		rc = 0;
	}
	if (rc == -ENOMEM)
		rc = al_error_set(err, rc, "out of memory");
	if (rc == 0 && l.n)
		qsort(l.e, l.n, sizeof(*l.e), log_cmp);
	for (size_t i = 0; rc == 0 && i < l.n; i++)
		rc = fn(l.e[i].id, l.e[i].when, ud);
	free(l.e);
	return rc;
}

/* ---- manifests ---- */

int st_manifest_load_raw(struct st_repo *r, const char *id, const struct st_manifest_limits *limits,
			 struct st_manifest **ret, struct al_error *err)
{
	if (!st_id_valid(id))
		return al_error_set(err, -EINVAL, "'%s' is not a checkpoint id (64 hex digits)",
				    id);
	char key[ST_KEY_MAX + 1];
	if (st_repo_key(key, sizeof(key), r, "manifests/%s", id) < 0)
		return al_error_set(err, -ENAMETOOLONG, "key too long");
	void *text = NULL;
	size_t len = 0;
	int rc = st_obj_get(r->os, key, ST_MANIFEST_OBJ_MAX, &text, &len, err);
	if (rc == -ENOENT) {
		al_error_clear(err);
		return al_error_set(err, -ENOENT, "no checkpoint %s in tenant %s", id, r->tenant);
	}
	if (rc < 0)
		return rc;
	/* The object's name is its content's hash: a swapped object is caught
	 * here, an edited one by the HMAC. */
	char actual[ST_ID_HEX + 1];
	st_manifest_id(text, len, actual);
	if (strcmp(actual, id) != 0) {
		free(text);
		return al_error_set(err, -EBADMSG,
				    "checkpoint %s: the manifest's content does not "
				    "match its id (corrupt store)",
				    id);
	}
	rc = st_manifest_parse(text, len, r->key, r->keylen, r->tenant, limits, ret, err);
	free(text);
	return rc;
}

/* err's message, prefixed "checkpoint ID: base: " (the chain's reasons
 * would not say which manifest they were about). */
static int base_error(int rc, const char *id, struct al_error *err)
{
	char why[AL_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", al_error_message(err));
	al_error_clear(err);
	return al_error_set(err, rc, "checkpoint %s: base: %s", id, why);
}

int st_manifest_load_chain(struct st_repo *r, const char *id,
			   const struct st_manifest_limits *limits, struct st_manifest **ret_root,
			   struct st_manifest **ret_delta, char base[ST_ID_HEX + 1],
			   uint64_t *base_entries, struct al_error *err)
{
	/* chain[0] is id, chain[k + 1] the base of chain[k]; the last is the
	 * full manifest when ret_root asks for it, else the last delta. */
	struct st_manifest *chain[ST_CHAIN_MAX + 1] = { 0 };
	size_t n = 0, deltas = 0;
	int rc = st_manifest_load_raw(r, id, limits, &chain[n++], err);
	/* The byte limit is the tree's: checked once the changes are applied. */
	struct st_manifest_limits bl = limits ? *limits : (struct st_manifest_limits){ 0 };
	bl.max_bytes = 0;
	while (rc == 0 && chain[n - 1]->base[0]) {
		const struct st_manifest *d = chain[n - 1];
		deltas++;
		if (deltas > ST_CHAIN_MAX) {
			rc = al_error_set(err, -EBADMSG,
					  "checkpoint %s: a chain of more than %d deltas", id,
					  ST_CHAIN_MAX);
			break;
		}
		/* A delta names its base with the count of entries the base's
		 * manifest lists (for a full one, its tree's). */
		uint64_t listed = 0;
		struct st_head bh;
		if (!ret_root && (rc = st_checkpoint_head(r, d->base, &bh, err)) == 0 &&
		    !bh.base[0]) {
			/* The full manifest at the end: its count, not its entries. */
			listed = bh.entries;
		} else if (rc == 0) {
			rc = st_manifest_load_raw(r, d->base, &bl, &chain[n], err);
			if (rc == 0)
				listed = chain[n++]->declared;
		}
		if (rc < 0) {
			rc = base_error(rc, id, err);
			break;
		}
		if (listed != d->base_entries)
			rc = al_error_set(err, -EBADMSG,
					  "checkpoint %s: made over a base of %" PRIu64
					  " entries, its base %s has %" PRIu64,
					  id, d->base_entries, d->base, listed);
		if (d == chain[n - 1])
			break; /* the full manifest was not read */
	}
	if (rc == 0 && base) {
		memcpy(base, chain[0]->base, ST_ID_HEX + 1);
		*base_entries = chain[0]->base_entries;
	}
	/* The deltas composed, oldest first, into one over the full manifest:
	 * a delta's entries are to the tree of its base what an upper layer's
	 * are to its lower one. */
	for (size_t k = deltas - 1; rc == 0 && deltas > 1 && k > 0; k--) {
		struct st_manifest *lo = chain[k], *up = chain[k - 1];
		struct st_entry *c = NULL;
		size_t nc = 0;
		if (st_layer_compose(lo->entries, lo->n_entries, up->entries, up->n_entries, &c,
				     &nc) < 0) {
			rc = al_error_set(err, -ENOMEM, "out of memory");
			break;
		}
		st_entries_free(up->entries, up->n_entries);
		up->entries = c;
		up->n_entries = nc;
		memcpy(up->base, lo->base, sizeof(up->base));
		up->base_entries = lo->base_entries;
	}
	for (size_t k = 1; k < deltas; k++)
		st_manifest_free(chain[k]);
	struct st_manifest *root = n > deltas ? chain[n - 1] : NULL;
	if (rc < 0 || !ret_root) {
		if (rc < 0 || !deltas)
			st_manifest_free(chain[0]);
		st_manifest_free(root == chain[0] ? NULL : root);
		if (rc == 0)
			*ret_delta = deltas ? chain[0] : NULL;
		return rc;
	}
	*ret_root = root;
	*ret_delta = deltas ? chain[0] : NULL;
	return 0;
}

int st_manifest_load(struct st_repo *r, const char *id, const struct st_manifest_limits *limits,
		     struct st_manifest **ret, struct al_error *err)
{
	struct st_manifest *root = NULL, *delta = NULL;
	char base[ST_ID_HEX + 1];
	uint64_t base_entries = 0;
	int rc = st_manifest_load_chain(r, id, limits, &root, &delta, base, &base_entries, err);
	if (rc < 0 || !delta) {
		if (rc == 0)
			*ret = root;
		return rc;
	}
	rc = st_manifest_apply(root, delta, limits, ret, err);
	if (rc < 0)
		return rc;
	/* As stored: the checkpoint's own base (GC keeps it). */
	memcpy((*ret)->base, base, sizeof(base));
	(*ret)->base_entries = base_entries;
	return 0;
}

/* ---- path lookup in a manifest (entries are sorted) ---- */

const void *st_find_path(const void *base, size_t n, size_t size, size_t path_off, const char *path)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *item = (const char *)base + mid * size;
		int c = st_path_cmp(*(char *const *)(item + path_off), path);
		if (c == 0)
			return item;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const struct st_entry *st_manifest_find(const struct st_manifest *m, const char *path)
{
	if (!m)
		return NULL;
	return st_find_path(m->entries, m->n_entries, sizeof(*m->entries),
			    offsetof(struct st_entry, path), path);
}

int st_entry_cmp(const void *a, const void *b)
{
	return st_path_cmp(((const struct st_entry *)a)->path, ((const struct st_entry *)b)->path);
}

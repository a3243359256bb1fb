/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The local directory backend of the object store.
 *
 * Every path below the root is resolved relative to the root descriptor,
 * opened once, with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS): a symlink planted anywhere in the tree (by a
 * sandbox that could write there, or by an operator's mistake) makes the
 * operation fail instead of reading or writing elsewhere. Kernels without
 * openat2 get an equivalent walk, one O_NOFOLLOW component at a time.
 *
 * Temp files are named TEMP_PREFIX + random hex; '#' is not a key
 * character, so a temp file can never be read, listed or overwritten as
 * an object.
 */
#include "store/objstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"

#define TEMP_PREFIX ".tmp#"
#define TEMP_PREFIX_LEN (sizeof(TEMP_PREFIX) - 1)
#define TEMP_NAME_MAX (TEMP_PREFIX_LEN + 16 + 1)
#define TEMP_TRIES 16

struct dir_store {
	struct st_objstore base; /* first: the ops table casts back */
	int root_fd;
	char *root;
};

static const struct st_objstore_ops dir_ops;

static struct dir_store *to_dir(struct st_objstore *s)
{
	return (struct dir_store *)s;
}

/* ---- names ---- */

static bool seg_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

static bool seg_valid(const char *s, size_t len)
{
	if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!seg_char_ok(s[i]))
			return false;
	return true;
}

static bool tenant_valid_n(const char *s, size_t len)
{
	if (len == 0 || len > ST_TENANT_MAX || s[0] == '-')
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return false;
	}
	return true;
}

bool st_tenant_valid(const char *tenant)
{
	return tenant && tenant_valid_n(tenant, strnlen(tenant, ST_TENANT_MAX + 1));
}

/*
 * Checks "tenants/<tenant>[/seg...]" of exactly len bytes with at least
 * min_segs segments. min_segs 1 admits "tenants" alone (a prefix for
 * listing every tenant).
 */
static bool path_valid(const char *p, size_t len, size_t min_segs)
{
	size_t segs = 0;
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && p[i] != '/')
			continue;
		const char *seg = p + start;
		size_t n = i - start;
		if (!seg_valid(seg, n))
			return false;
		if (segs == 0 && !(n == 7 && memcmp(seg, "tenants", 7) == 0))
			return false;
		if (segs == 1 && !tenant_valid_n(seg, n))
			return false;
		segs++;
		start = i + 1;
	}
	return segs >= min_segs;
}

bool st_key_valid(const char *key)
{
	if (!key)
		return false;
	size_t len = strnlen(key, ST_KEY_MAX + 1);
	return len >= 1 && len <= ST_KEY_MAX && path_valid(key, len, 3);
}

/* A prefix ends in '/'; without it, "tenants" or a key-shaped path. */
static bool prefix_valid(const char *prefix)
{
	if (!prefix)
		return false;
	size_t len = strnlen(prefix, ST_KEY_MAX + 1);
	if (len < 2 || len > ST_KEY_MAX || prefix[len - 1] != '/')
		return false;
	return path_valid(prefix, len - 1, 1);
}

/* ---- resolution beneath the root ---- */

/* A symlink opened O_NOFOLLOW | O_DIRECTORY fails with ENOTDIR, which
 * callers read as "absent": it is ELOOP, as under RESOLVE_NO_SYMLINKS. */
static int walk_errno(int dirfd, const char *name)
{
	int r = -errno;
	struct stat st;
	if (r == -ENOTDIR && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISLNK(st.st_mode))
		return -ELOOP;
	return r;
}

/* The walk for kernels without openat2: every component O_NOFOLLOW, every
 * directory opened as one. Keys hold no "..", so this stays beneath. */
static int openat_walk(int dirfd, const char *path, int flags, mode_t mode)
{
	char buf[ST_KEY_MAX + 1];
	size_t len = strnlen(path, sizeof(buf));
	if (len == 0 || len >= sizeof(buf) || path[0] == '/')
		return -EINVAL;
	memcpy(buf, path, len + 1);

	int cur = dirfd;
	_cleanup_close_ int owned = -1;
	char *seg = buf;
	for (;;) {
		char *slash = strchr(seg, '/');
		if (!slash)
			break;
		*slash = '\0';
		int fd = openat(cur, seg, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return walk_errno(cur, seg);
		safe_close(owned);
		owned = cur = fd;
		seg = slash + 1;
	}
	int fd = openat(cur, seg, flags | O_NOFOLLOW | O_CLOEXEC, mode);
	return fd < 0 ? walk_errno(cur, seg) : fd;
}

/* Opens path (relative, no "..") below dirfd following no symlink at all. */
static int openat_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	/* O_NOFOLLOW | O_DIRECTORY on a link fails with ENOTDIR, which callers
	 * read as "absent"; RESOLVE_NO_SYMLINKS alone says ELOOP. */
	int nofollow = (flags & O_DIRECTORY) ? 0 : O_NOFOLLOW;
	struct open_how how = {
		.flags = (uint64_t)(flags | nofollow | O_CLOEXEC),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	if (fd >= 0)
		return fd;
	if (errno != ENOSYS)
		return -errno;
	return openat_walk(dirfd, path, flags, mode);
}

/* The message for a failed resolution: a symlink on the way is named as
 * such (ELOOP from RESOLVE_NO_SYMLINKS / O_NOFOLLOW, EXDEV from BENEATH). */
static int resolve_error(struct al_error *err, int r, const char *what, const char *key)
{
	if (r == -ELOOP || r == -EXDEV)
		return al_error_set(err, r, "%s %s: a symlink in its path is not followed", what,
				    key);
	if (r == -ENOENT)
		return al_error_set(err, r, "%s %s: no such object", what, key);
	return al_error_set_errno(err, r, "%s %s", what, key);
}

/* Splits key into a parent path (copied into parent) and the last name. */
static const char *split_key(const char *key, char parent[ST_KEY_MAX + 1])
{
	const char *slash = strrchr(key, '/');
	size_t n = (size_t)(slash - key); /* valid keys always hold a '/' */
	memcpy(parent, key, n);
	parent[n] = '\0';
	return slash + 1;
}

/* Opens the directory a key lives in, creating missing ones (0700) and
 * making each creation durable, when create is set. */
static int open_parent(struct dir_store *d, const char *parent, bool create)
{
	int fd = openat_beneath(d->root_fd, parent, O_RDONLY | O_DIRECTORY, 0);
	if (fd >= 0 || !create || fd != -ENOENT)
		return fd;

	char buf[ST_KEY_MAX + 1];
	size_t len = strnlen(parent, sizeof(buf));
	memcpy(buf, parent, len + 1);
	_cleanup_close_ int cur = fcntl(d->root_fd, F_DUPFD_CLOEXEC, 3);
	if (cur < 0)
		return -errno;
	char *seg = buf;
	while (seg) {
		char *slash = strchr(seg, '/');
		if (slash)
			*slash = '\0';
		bool made = false;
		if (mkdirat(cur, seg, 0700) == 0)
			made = true;
		else if (errno != EEXIST)
			return -errno;
		int next = openat_beneath(cur, seg, O_RDONLY | O_DIRECTORY, 0);
		if (next < 0)
			return next;
		if (made && fsync(cur) < 0) {
			int r = -errno;
			safe_close(next);
			return r;
		}
		safe_close(cur);
		cur = next;
		seg = slash ? slash + 1 : NULL;
	}
	return TAKE_FD(cur);
}

/* ---- operations ---- */

static int dir_put(struct st_objstore *s, const char *key, const void *data, size_t len,
		   struct al_error *err)
{
	struct dir_store *d = to_dir(s);
	if (!st_key_valid(key))
		return al_error_set(err, -EINVAL, "put: invalid object key '%.*s'", ST_KEY_MAX,
				    key ? key : "(null)");

	char parent[ST_KEY_MAX + 1];
	const char *name = split_key(key, parent);
	_cleanup_close_ int dfd = open_parent(d, parent, true);
	if (dfd < 0)
		return resolve_error(err, dfd, "put: cannot create the directory of", key);

	char tmp[TEMP_NAME_MAX];
	_cleanup_close_ int fd = -1;
	for (int i = 0; i < TEMP_TRIES && fd < 0; i++) {
		uint64_t rnd;
		if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return al_error_set_errno(err, -EIO, "put %s: getrandom", key);
		snprintf(tmp, sizeof(tmp), TEMP_PREFIX "%016llx", (unsigned long long)rnd);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			return al_error_set_errno(err, -errno, "put %s: cannot create a temp file",
						  key);
	}
	if (fd < 0)
		return al_error_set(err, -EEXIST, "put %s: no free temp file name", key);

	int r = write_full(fd, data, len);
	if (r < 0) {
		al_error_set_errno(err, r, "put %s: write", key);
		goto fail;
	}
	if (fsync(fd) < 0) {
		r = al_error_set_errno(err, -errno, "put %s: fsync", key);
		goto fail;
	}
	fd = safe_close(fd);
	if (renameat(dfd, tmp, dfd, name) < 0) {
		r = al_error_set_errno(err, -errno, "put %s: rename", key);
		goto fail;
	}
	if (fsync(dfd) < 0)
		return al_error_set_errno(err, -errno, "put %s: fsync of the directory", key);
	return 0;
fail:
	unlinkat(dfd, tmp, 0);
	return r;
}

/* Opens the object for reading and checks it is a regular file. */
static int open_object(struct dir_store *d, const char *key, const char *what, struct stat *st,
		       struct al_error *err)
{
	if (!st_key_valid(key))
		return al_error_set(err, -EINVAL, "%s: invalid object key '%.*s'", what, ST_KEY_MAX,
				    key ? key : "(null)");
	/* O_NONBLOCK: a FIFO planted at a key must not hang the open. */
	int fd = openat_beneath(d->root_fd, key, O_RDONLY | O_NONBLOCK, 0);
	if (fd < 0)
		return resolve_error(err, fd, what, key);
	if (fstat(fd, st) < 0) {
		int r = -errno;
		safe_close(fd);
		return al_error_set_errno(err, r, "%s %s: fstat", what, key);
	}
	if (!S_ISREG(st->st_mode)) {
		safe_close(fd);
		return al_error_set(err, -EINVAL, "%s %s: not a regular file", what, key);
	}
	return fd;
}

static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return done == len ? 0 : -EIO;
}

static int dir_get(struct st_objstore *s, const char *key, size_t max, void **ret, size_t *ret_len,
		   struct al_error *err)
{
	struct stat st;
	_cleanup_close_ int fd = open_object(to_dir(s), key, "get", &st, err);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > max)
		return al_error_set(err, -EFBIG, "get %s: %lld bytes, more than the %zu allowed",
				    key, (long long)st.st_size, max);
	size_t len = (size_t)st.st_size;
	_cleanup_free_ void *data = malloc(len ? len : 1);
	if (!data)
		return al_error_set(err, -ENOMEM, "get %s: out of memory", key);
	int r = pread_full(fd, data, len, 0);
	if (r < 0)
		return al_error_set_errno(err, r, "get %s: read", key);
	*ret = TAKE_PTR(data);
	*ret_len = len;
	return 0;
}

static int dir_map(struct st_objstore *s, const char *key, size_t max, const void **ret,
		   size_t *ret_len, struct al_error *err)
{
	struct stat st;
	_cleanup_close_ int fd = open_object(to_dir(s), key, "map", &st, err);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > max)
		return al_error_set(err, -EFBIG, "map %s: %lld bytes, more than the %zu allowed",
				    key, (long long)st.st_size, max);
	if (st.st_size == 0)
		return al_error_set(err, -EBADMSG, "map %s: empty", key);
	/* Objects are replaced by a rename, never rewritten in place: the
	 * mapped file stays as it is. */
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return al_error_set_errno(err, -errno, "map %s", key);
	*ret = p;
	*ret_len = (size_t)st.st_size;
	return 0;
}

void st_obj_unmap(const void *p, size_t len)
{
	if (p)
		munmap((void *)p, len);
}

static int dir_get_range(struct st_objstore *s, const char *key, uint64_t off, size_t len,
			 void *buf, struct al_error *err)
{
	struct stat st;
	_cleanup_close_ int fd = open_object(to_dir(s), key, "get", &st, err);
	if (fd < 0)
		return fd;
	if (off > (uint64_t)st.st_size || len > (uint64_t)st.st_size - off)
		return al_error_set(err, -EIO,
				    "get %s: %zu bytes at %llu are past its end (%lld bytes)", key,
				    len, (unsigned long long)off, (long long)st.st_size);
	int r = pread_full(fd, buf, len, off);
	if (r == -EIO)
		return al_error_set(err, r, "get %s: short read at %llu", key,
				    (unsigned long long)off);
	if (r < 0)
		return al_error_set_errno(err, r, "get %s: read", key);
	return 0;
}

static int dir_exists(struct st_objstore *s, const char *key, struct al_error *err)
{
	struct dir_store *d = to_dir(s);
	if (!st_key_valid(key))
		return al_error_set(err, -EINVAL, "exists: invalid object key '%.*s'", ST_KEY_MAX,
				    key ? key : "(null)");
	_cleanup_close_ int fd = openat_beneath(d->root_fd, key, O_PATH, 0);
	if (fd == -ENOENT || fd == -ENOTDIR)
		return 0;
	if (fd < 0)
		return resolve_error(err, fd, "exists", key);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set_errno(err, -errno, "exists %s: fstat", key);
	if (S_ISDIR(st.st_mode))
		return 0;	 /* a directory on the way to other keys is not an object */
	if (S_ISLNK(st.st_mode)) /* O_PATH | O_NOFOLLOW opens the link itself */
		return resolve_error(err, -ELOOP, "exists", key);
	if (!S_ISREG(st.st_mode))
		return al_error_set(err, -EINVAL, "exists %s: not a regular file", key);
	return 1;
}

static int dir_del(struct st_objstore *s, const char *key, struct al_error *err)
{
	struct dir_store *d = to_dir(s);
	if (!st_key_valid(key))
		return al_error_set(err, -EINVAL, "delete: invalid object key '%.*s'", ST_KEY_MAX,
				    key ? key : "(null)");
	char parent[ST_KEY_MAX + 1];
	const char *name = split_key(key, parent);
	_cleanup_close_ int dfd = open_parent(d, parent, false);
	if (dfd == -ENOENT || dfd == -ENOTDIR)
		return 0;
	if (dfd < 0)
		return resolve_error(err, dfd, "delete", key);
	if (unlinkat(dfd, name, 0) < 0) {
		if (errno == ENOENT)
			return 0;
		return al_error_set_errno(err, -errno, "delete %s", key);
	}
	if (fsync(dfd) < 0)
		return al_error_set_errno(err, -errno, "delete %s: fsync of the directory", key);
	return 0;
}

struct list_ctx {
	int (*fn)(const char *key, void *ud);
	void *ud;
	struct al_error *err;
	char key[ST_KEY_MAX + 1];
};

static bool is_temp_name(const char *name)
{
	return strncmp(name, TEMP_PREFIX, TEMP_PREFIX_LEN) == 0;
}

/* Walks the directory fd (consumed) whose path is ctx->key[0..len). */
static int list_dir(struct list_ctx *ctx, int fd, size_t len)
{
	DIR *dir = fdopendir(fd);
	if (!dir) {
		int r = -errno;
		safe_close(fd);
		ctx->key[len] = '\0';
		return al_error_set_errno(ctx->err, r, "list %s", ctx->key);
	}
	int r = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(dir);
		if (!de) {
			if (errno != 0) {
				r = -errno;
				ctx->key[len] = '\0';
				al_error_set_errno(ctx->err, r, "list %s", ctx->key);
			}
			break;
		}
		const char *name = de->d_name;
		size_t n = strlen(name);
		/* Temp files, and anything else no key could name, are not objects. */
		if (is_temp_name(name) || !seg_valid(name, n) || len + n + 1 > ST_KEY_MAX)
			continue;
		memcpy(ctx->key + len, name, n + 1);
		unsigned char type = de->d_type;
		if (type == DT_UNKNOWN) {
			struct stat st;
			if (fstatat(dirfd(dir), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue; /* gone meanwhile */
			type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
		}
		if (type == DT_DIR) {
			int sub = openat(dirfd(dir), name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				if (errno == ENOENT)
					continue;
				r = al_error_set_errno(ctx->err, -errno, "list %s", ctx->key);
				break;
			}
			ctx->key[len + n] = '/';
			r = list_dir(ctx, sub, len + n + 1);
		} else if (type == DT_REG && st_key_valid(ctx->key)) {
			r = ctx->fn(ctx->key, ctx->ud);
		}
		if (r < 0)
			break;
	}
	closedir(dir);
	return r;
}

static int dir_list(struct st_objstore *s, const char *prefix, int (*fn)(const char *key, void *ud),
		    void *ud, struct al_error *err)
{
	struct dir_store *d = to_dir(s);
	if (!prefix_valid(prefix))
		return al_error_set(err, -EINVAL, "list: invalid prefix '%.*s'", ST_KEY_MAX,
				    prefix ? prefix : "(null)");
	struct list_ctx ctx = { .fn = fn, .ud = ud, .err = err };
	size_t len = strlen(prefix);
	memcpy(ctx.key, prefix, len - 1);
	ctx.key[len - 1] = '\0';
	int fd = openat_beneath(d->root_fd, ctx.key, O_RDONLY | O_DIRECTORY, 0);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return resolve_error(err, fd, "list", prefix);
	ctx.key[len - 1] = '/';
	int r = list_dir(&ctx, fd, len);
	return r < 0 ? r : 0;
}

static void dir_close(struct st_objstore *s)
{
	struct dir_store *d = to_dir(s);
	safe_close(d->root_fd);
	free(d->root);
	free(d);
}

static const struct st_objstore_ops dir_ops = {
	.put = dir_put,
	.get = dir_get,
	.get_range = dir_get_range,
	.map = dir_map,
	.exists = dir_exists,
	.del = dir_del,
	.list = dir_list,
	.close = dir_close,
};

int st_objstore_open_dir(const char *root, struct st_objstore **ret, struct al_error *err)
{
	if (!root || !*root)
		return al_error_set(err, -EINVAL, "object store: no root directory given");
	/* Made when absent; no link followed anywhere in the path (a user who
	 * owns a directory on the way cannot swap in one to root's). */
	_cleanup_close_ int fd = mkdir_open_no_symlinks(AT_FDCWD, root, 0700);
	if (fd == -ELOOP)
		return al_error_set(err, fd,
				    "object store %s: a symbolic link in the path is not followed "
				    "(name the real path, with no link in any component)",
				    root);
	if (fd < 0)
		return al_error_set_errno(err, fd, "object store %s", root);
	/* Checked on the descriptor, which is what is used from now on. */
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set_errno(err, -errno, "object store %s: fstat", root);
	if (st.st_uid != geteuid())
		return al_error_set(err, -EPERM,
				    "object store %s: owned by uid %u, not by this user (%u)", root,
				    (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return al_error_set(err, -EPERM,
				    "object store %s: writable by group or others (chmod 700)",
				    root);

	struct dir_store *d = calloc(1, sizeof(*d));
	if (!d)
		return al_error_set(err, -ENOMEM, "object store %s: out of memory", root);
	d->root = strdup(root);
	if (!d->root) {
		free(d);
		return al_error_set(err, -ENOMEM, "object store %s: out of memory", root);
	}
	d->base.ops = &dir_ops;
	d->root_fd = TAKE_FD(fd);
	*ret = &d->base;
	return 0;
}

/* ---- temp file sweep ---- */

static int sweep_dir(int fd, time_t cutoff, int depth, struct al_error *err, const char *root)
{
	DIR *dir = fdopendir(fd);
	if (!dir) {
		int r = -errno;
		safe_close(fd);
		return al_error_set_errno(err, r, "sweep %s", root);
	}
	int removed = 0;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(dir))) {
		const char *name = de->d_name;
		struct stat st;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		if (fstatat(dirfd(dir), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth < ST_KEY_MAX / 2) {
			int sub = openat(dirfd(dir), name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0)
				continue;
			r = sweep_dir(sub, cutoff, depth + 1, err, root);
			if (r < 0)
				break;
			removed += r;
		} else if (S_ISREG(st.st_mode) && is_temp_name(name) && st.st_mtime <= cutoff) {
			if (unlinkat(dirfd(dir), name, 0) == 0)
				removed++;
		}
	}
	closedir(dir);
	return r < 0 ? r : removed;
}

int st_objstore_sweep_temp(struct st_objstore *s, unsigned min_age_sec, struct al_error *err)
{
	if (!s || s->ops != &dir_ops)
		return 0; /* only the directory backend leaves temp files */
	struct dir_store *d = to_dir(s);
	int fd = openat(d->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "sweep %s", d->root);
	return sweep_dir(fd, time(NULL) - (time_t)min_age_sec, 0, err, d->root);
}

/* ---- the writer/collector lock ---- */

#define LOCK_NAME ".lock" /* not a key: keys start with "tenants/" */

int st_objstore_lock(struct st_objstore *s, bool exclusive, int *ret_fd, struct al_error *err)
{
	if (!s || s->ops != &dir_ops)
		return al_error_set(
			err, -EOPNOTSUPP,
			"this object store has no lock (a lease object is future work)");
	struct dir_store *d = to_dir(s);
	_cleanup_close_ int fd = openat(d->root_fd, LOCK_NAME,
					O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0 && !exclusive && (errno == EROFS || errno == EACCES)) {
		/* A reader of a store it may not write: GC cannot run there
		 * without the lock file, so a missing one means no GC. */
		fd = openat(d->root_fd, LOCK_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
		if (fd < 0 && errno == ENOENT) {
			*ret_fd = -1;
			return 0;
		}
	}
	if (fd < 0)
		return al_error_set_errno(err, -errno, "object store %s: cannot open its lock",
					  d->root);
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return al_error_set(err, -EINVAL, "object store %s: its lock is not a regular file",
				    d->root);
	while (flock(fd, exclusive ? LOCK_EX : LOCK_SH) < 0) {
		if (errno != EINTR)
			return al_error_set_errno(err, -errno, "object store %s: cannot lock it",
						  d->root);
	}
	*ret_fd = TAKE_FD(fd);
	return 0;
}

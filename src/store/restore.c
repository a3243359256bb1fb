/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Restores: a checkpoint into an empty directory, every path opened
 * beneath it without following a link, files written on the worker pool;
 * never a partial success. With an owner, each entry is given to it through
 * a descriptor of what was just made.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "store/internal.h"
#include "store/pool.h"

#define RESTORE_BATCH 8 /* files a worker takes at a time */

/* Who what is made belongs to; without chown, the caller (as made). */
struct owner {
	bool chown;
	uid_t uid;
	gid_t gid;
};

static int open_beneath(int root, const char *path, uint64_t flags, uint64_t mode)
{
	struct open_how how = {
		.flags = flags | O_CLOEXEC | O_NOFOLLOW,
		.mode = mode,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
			   RESOLVE_NO_XDEV,
	};
	int fd = (int)syscall(SYS_openat2, root, path, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

/* The directory a path's last segment lives in, opened beneath root. */
static int parent_fd(int root, const char *path, const char **ret_name)
{
	const char *slash = strrchr(path, '/');
	if (!slash) {
		*ret_name = path;
		int fd = fcntl(root, F_DUPFD_CLOEXEC, 3);
		return fd < 0 ? -errno : fd;
	}
	*ret_name = slash + 1;
	char dir[ST_PATH_MAX + 1];
	size_t n = (size_t)(slash - path);
	if (n >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, n);
	dir[n] = '\0';
	return open_beneath(root, dir, O_RDONLY | O_DIRECTORY, 0);
}

static int empty_dir(int fd)
{
	int dup = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
	if (!d) {
		if (dup >= 0)
			close(dup);
		return -errno;
	}
	struct dirent *de;
	int r = 1;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			r = 0;
			break;
		}
	closedir(d);
	return r;
}

/* Removes everything below dirfd (never following a link). */
static void remove_below(int dirfd)
{
	int dup = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
	if (!d) {
		if (dup >= 0)
			close(dup);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd, de->d_name, 0) == 0)
			continue;
		int sub =
			openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0) {
			/* A directory we made without write permission. */
			fchmod(sub, 0700);
			remove_below(sub);
			close(sub);
			unlinkat(dirfd, de->d_name, AT_REMOVEDIR);
		}
	}
	closedir(d);
}

/* ---- files, on the worker pool ---- */

/* The directory of the last file a worker wrote: the next file is usually
 * in it too (entries are sorted). */
struct parent_cache {
	int fd;
	size_t len;
	char dir[ST_PATH_MAX + 1];
};

static int cached_parent(struct parent_cache *pc, int root, const char *path, const char **ret_name)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;
	*ret_name = slash ? slash + 1 : path;
	if (pc->fd >= 0 && pc->len == n && memcmp(pc->dir, path, n) == 0)
		return pc->fd;
	if (pc->fd >= 0)
		close(pc->fd);
	pc->fd = -1;
	int fd;
	if (n == 0) {
		fd = fcntl(root, F_DUPFD_CLOEXEC, 3);
		if (fd < 0)
			fd = -errno;
	} else {
		memcpy(pc->dir, path, n);
		pc->dir[n] = '\0';
		fd = open_beneath(root, pc->dir, O_RDONLY | O_DIRECTORY, 0);
	}
	if (fd < 0)
		return fd;
	pc->fd = fd;
	pc->len = n;
	return fd;
}

static void set_times(struct timespec ts[2], int64_t mtime_ns)
{
	ts[0] = (struct timespec){ .tv_nsec = UTIME_OMIT };
	ts[1] = (struct timespec){ .tv_sec = mtime_ns / 1000000000ll,
				   .tv_nsec = mtime_ns % 1000000000ll };
}

static int restore_file(struct st_cas_reader *rd, int root, struct parent_cache *pc,
			const struct st_entry *e, const struct owner *own, struct al_error *err)
{
	const char *name;
	int pfd = cached_parent(pc, root, e->path, &name);
	if (pfd < 0)
		return al_error_set_errno(err, pfd, "cannot open the directory of %s", e->path);
	_cleanup_close_ int fd =
		openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "cannot create %s", e->path);
	/* Holes are skipped, not written: the file comes back as sparse as it
	 * was, in time that follows its data. */
	uint64_t total = 0;
	size_t h = 0;
	for (size_t i = 0; i <= e->n_chunks; i++) {
		if (h < e->n_holes && e->holes[h].at == i) {
			uint64_t len = e->holes[h++].len;
			if (len > e->size - total)
				return al_error_set(err, -EBADMSG,
						    "%s: its holes are longer than its size",
						    e->path);
			total += len;
			if (lseek(fd, (off_t)total, SEEK_SET) < 0)
				return al_error_set_errno(err, -errno, "cannot write %s", e->path);
		}
		if (i == e->n_chunks)
			break;
		const void *data = NULL;
		size_t len = 0;
		int rc = st_cas_read(rd, &e->chunks[i], &data, &len, err);
		if (rc < 0)
			return rc;
		if (len > e->size - total)
			return al_error_set(err, -EBADMSG,
					    "%s: the chunks are longer than its size", e->path);
		total += len;
		rc = write_full(fd, data, len);
		if (rc < 0)
			return al_error_set_errno(err, rc, "cannot write %s", e->path);
	}
	if (total != e->size)
		return al_error_set(err, -EBADMSG, "%s: the chunks are shorter than its size",
				    e->path);
	/* A hole at the end: the size says where the file ends. */
	if (e->n_holes && ftruncate(fd, (off_t)e->size) < 0)
		return al_error_set_errno(err, -errno, "cannot write %s", e->path);
	struct timespec ts[2];
	set_times(ts, e->mtime_ns);
	if (ts[1].tv_nsec < 0) {
		ts[1].tv_sec--;
		ts[1].tv_nsec += 1000000000l;
	}
	/* Owner first: a chown may clear mode bits, the chmod sets them all. */
	if (own->chown && fchown(fd, own->uid, own->gid) < 0)
		return al_error_set_errno(err, -errno, "cannot give %s its owner", e->path);
	if (fchmod(fd, e->mode) < 0 || futimens(fd, ts) < 0)
		return al_error_set_errno(err, -errno, "cannot set the mode or time of %s",
					  e->path);
	return 0;
}

/*
 * Gives the symlink just made as pfd/name its owner and time, through a
 * descriptor of the link itself, checked to be a link: should the name be
 * something else by now (in a target directory another user may write),
 * neither must reach it, least of all a hard link to a file of root's.
 */
static int settle_symlink(int pfd, const char *name, const struct owner *own,
			  const struct timespec ts[2])
{
	_cleanup_close_ int fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISLNK(st.st_mode))
		return -ESTALE;
	if (fchownat(fd, "", own->uid, own->gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	/* Best effort, as for every symlink (Linux 5.8+ takes an O_PATH
	 * descriptor here). */
	if (ts[1].tv_nsec >= 0)
		(void)utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	return 0;
}

struct restore_worker {
	struct st_cas_reader *rd;
	struct parent_cache pc;
	int root;
	const struct st_manifest *m;
	const struct owner *own;
};

/* A job: the files among entries [from, to). */
struct restore_job {
	size_t from, to;
};

static int restore_run(void *worker, void *job, struct al_error *err)
{
	struct restore_worker *wk = worker;
	const struct restore_job *j = job;
	for (size_t i = j->from; i < j->to; i++) {
		const struct st_entry *e = &wk->m->entries[i];
		if (e->type != ST_FILE)
			continue;
		int rc = restore_file(wk->rd, wk->root, &wk->pc, e, wk->own, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static const struct st_pool_ops restore_pool = {
	.job_size = sizeof(struct restore_job),
	.run = restore_run,
};

/* Writes every file of m below root on threads workers (1: this thread). */
static int restore_all_files(struct st_repo *r, int root, const struct st_manifest *m,
			     unsigned threads, const struct owner *own, struct al_error *err)
{
	size_t n_threads = threads > 1 ? threads : 0;
	size_t n = n_threads ? n_threads : 1;
	struct restore_worker *wks = calloc(n, sizeof(*wks));
	void **states = calloc(n, sizeof(*states));
	int rc = 0;
	if (!wks || !states)
		rc = al_error_set(err, -ENOMEM, "out of memory");
	size_t made = 0;
	for (; rc == 0 && made < n; made++) {
		wks[made] =
			(struct restore_worker){ .pc.fd = -1, .root = root, .m = m, .own = own };
		states[made] = &wks[made];
		rc = st_cas_reader_new(r->cas, &wks[made].rd, err);
	}
	/* Room for every batch: a job is two indexes and holds nothing, and
	 * with a short queue this thread would sleep and be woken for each
	 * batch a worker takes (a futex round trip per 8 files). */
	size_t n_files = 0;
	for (size_t i = 0; i < m->n_entries; i++)
		n_files += m->entries[i].type == ST_FILE;
	struct st_pool *p = NULL;
	if (rc == 0)
		rc = st_pool_start(&restore_pool, states, n_threads, n_files / RESTORE_BATCH + 1,
				   &p, err);
	/* Batches of RESTORE_BATCH files, in order. */
	struct restore_job job = { 0 };
	size_t files = 0;
	for (size_t i = 0; rc == 0 && i < m->n_entries; i++) {
		files += m->entries[i].type == ST_FILE;
		if (files == RESTORE_BATCH || i + 1 == m->n_entries) {
			job.to = i + 1;
			if (files)
				rc = st_pool_submit(p, &job);
			job.from = job.to;
			files = 0;
		}
	}
	rc = st_pool_finish(p, rc, err);
	for (size_t k = 0; k < made; k++) {
		if (wks[k].pc.fd >= 0)
			close(wks[k].pc.fd);
		st_cas_reader_free(wks[k].rd);
	}
	free(wks);
	free(states);
	return rc;
}

static int restore_entries(struct st_repo *r, int root, const struct st_manifest *m,
			   unsigned threads, const struct owner *own, struct al_error *err)
{
	int rc = 0;
	/* Directories and symlinks first, in order (a parent before what is
	 * in it), then the files, on every core. Directories stay root's (and
	 * 0700) until the last pass: until then no other user can reach into
	 * what is being made, whoever it will belong to. */
	for (size_t i = 0; i < m->n_entries; i++) {
		const struct st_entry *e = &m->entries[i];
		if (e->type == ST_FILE)
			continue;
		const char *name;
		_cleanup_close_ int pfd = parent_fd(root, e->path, &name);
		if (pfd < 0)
			return al_error_set_errno(err, pfd, "cannot open the directory of %s",
						  e->path);
		if (e->type == ST_DIR) {
			/* Writable until everything below is in; the mode comes last. */
			if (mkdirat(pfd, name, 0700) < 0)
				rc = al_error_set_errno(err, -errno, "cannot create %s", e->path);
		} else if (symlinkat(e->target, pfd, name) < 0) {
			rc = al_error_set_errno(err, -errno, "cannot create %s", e->path);
		} else {
			struct timespec ts[2];
			set_times(ts, e->mtime_ns);
			if (own->chown)
				rc = settle_symlink(pfd, name, own, ts);
			else if (ts[1].tv_nsec >= 0)
				(void)utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW);
			if (rc == -ESTALE)
				rc = al_error_set(err, rc, "%s was replaced while it was restored",
						  e->path);
			else if (rc < 0)
				rc = al_error_set_errno(err, rc, "cannot give %s its owner",
							e->path);
		}
		if (rc < 0)
			return rc;
	}
	rc = restore_all_files(r, root, m, threads, own, err);
	if (rc < 0)
		return rc;
	/* Directories last, deepest first: their modes and times. */
	for (size_t i = m->n_entries; i-- > 0;) {
		const struct st_entry *e = &m->entries[i];
		if (e->type != ST_DIR)
			continue;
		int fd = open_beneath(root, e->path, O_RDONLY | O_DIRECTORY, 0);
		if (fd < 0)
			return al_error_set_errno(err, fd, "cannot open %s", e->path);
		struct timespec ts[2];
		set_times(ts, e->mtime_ns);
		if (own->chown && fchown(fd, own->uid, own->gid) < 0)
			rc = al_error_set_errno(err, -errno, "cannot give %s its owner", e->path);
		else if (fchmod(fd, e->mode) < 0 || (ts[1].tv_nsec >= 0 && futimens(fd, ts) < 0))
			rc = al_error_set_errno(err, -errno, "cannot set the mode of %s", e->path);
		close(fd);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int st_restore(struct st_repo *r, const char *id, const char *dir,
	       const struct st_manifest_limits *limits, struct al_error *err)
{
	struct st_restore_opts o = { .limits = limits };
	return st_restore_with(r, id, dir, &o, err);
}

int st_restore_with(struct st_repo *r, const char *id, const char *dir,
		    const struct st_restore_opts *o, struct al_error *err)
{
	struct st_restore_opts none = { 0 };
	if (!o)
		o = &none;
	/* (uid_t)-1 would tell chown to leave the owner as it is. */
	if (o->chown && (o->uid == (uint32_t)-1 || o->gid == (uint32_t)-1))
		return al_error_set(err, -EINVAL, "no owner %" PRIu32 ":%" PRIu32, o->uid, o->gid);
	const struct owner own = { .chown = o->chown, .uid = o->uid, .gid = o->gid };
	const struct st_manifest_limits *limits = o->limits;
	unsigned threads;
	int rc = st_threads(&threads, err);
	if (rc < 0)
		return rc;
	/* Shared, like a snapshot: GC (which may rewrite packs) waits. */
	_cleanup_close_ int lock = -1;
	rc = st_repo_lock_writer(r, &lock, err);
	if (rc < 0)
		return rc;
	struct st_manifest *m = NULL;
	rc = st_manifest_load(r, id, limits, &m, err);
	if (rc < 0)
		return rc;
	/* Made when absent. No link is followed anywhere in the path (a user
	 * who owns a directory on the way cannot send the restore into one of
	 * root's); only the descriptor is used from then on. */
	_cleanup_close_ int root = o->at_fd ? fcntl(o->dir_fd, F_DUPFD_CLOEXEC, 3) :
					      mkdir_open_no_symlinks(AT_FDCWD, dir, 0700);
	if (root < 0 && o->at_fd)
		root = -errno;
	if (root < 0) {
		st_manifest_free(m);
		return st_path_error(err, root, "restore target", dir);
	}
	int empty = empty_dir(root);
	if (empty <= 0) {
		st_manifest_free(m);
		return empty < 0 ? al_error_set_errno(err, empty, "%s", dir) :
				   al_error_set(err, -ENOTEMPTY, "%s is not empty", dir);
	}
	rc = restore_entries(r, root, m, threads, &own, err);
	st_manifest_free(m);
	/* The target itself last (its mode is not the checkpoint's: a manifest
	 * holds no entry for the root), so a failure leaves it as it was. */
	if (rc >= 0 && own.chown && fchown(root, own.uid, own.gid) < 0)
		rc = al_error_set_errno(err, -errno, "cannot give %s its owner", dir);
	if (rc < 0)
		remove_below(root); /* never a partial success */
	return rc;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Snapshots: walk a workspace (or an overlayfs upper directory) without
 * following symlinks, take unchanged files from the previous checkpoint
 * unread (the stat cache), read, hash and compress the others on the
 * worker pool, and commit (commit.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/fdutil.h"
#include "store/chunker.h"
#include "store/internal.h"
#include "store/pool.h"

/* A file changed this close to the previous snapshot's start may have
 * changed again within the same timestamp tick: it is read again. */
#define RACY_NS (1000000000ll)

/* Where a file's chunks go: the store itself (no threads), or a worker's
 * writer (st_cas_put_shared). */
struct chunk_sink {
	struct st_cas *cas;
	struct st_cas_writer *cw;
	const bool *stop;   /* when set (atomically), a worker gives up early */
	unsigned char *buf; /* 2 * ST_CDC_MAX */
	uint64_t chunks_new, bytes_new;
	uint64_t bytes; /* read by a worker; the walk counts the others */
};

/*
 * The walking thread opens each file to read (so the identity check stays
 * next to the stat) and queues it; a worker reads, cuts, hashes and
 * compresses it and keeps its chunk list, filed in the file's entry once
 * the workers are done (so the walk may grow the entry array meanwhile).
 * Files go in batches, for fewer wake-ups on trees of small files.
 */
#define JOB_FILES 16
#define JOB_BYTES (4u << 20) /* a batch is full with this much (by stat) */

struct job_file {
	int fd;
	size_t entry;	  /* in walk.entries */
	const char *path; /* the entry's: it outlives the workers */
	uint64_t size;	  /* as the walk saw it open: no more is read */
	bool sparse;	  /* fewer blocks than bytes: read by data runs */
};

struct job {
	struct job_file f[JOB_FILES];
	size_t n;
	uint64_t bytes;
};

struct result {
	size_t entry;
	struct st_id *chunks;
	size_t n_chunks;
	struct st_hole *holes;
	size_t n_holes;
	uint64_t size;
};

struct worker {
	struct chunk_sink sink;
	struct result *res; /* the files it read */
	size_t n_res, cap_res;
};

struct walk {
	struct st_repo *r;
	const struct st_snapshot_opts *o;
	struct st_snapshot_result *res;
	const struct st_manifest *prev;
	struct st_statcache sc;
	bool sc_valid; /* an upper layer's cache, of the previous checkpoint */
	/* A plain directory whose cache describes the previous checkpoint:
	 * only what differs from the cache is stored, as a delta over it. */
	bool delta;
	size_t walked; /* entries of the tree walked (a plain directory's) */
	struct st_entry *entries;
	size_t n, cap;
	struct buf cache;		  /* the new stat cache */
	bool layer;			  /* walking an overlayfs upper directory */
	struct st_manifest_limits limits; /* every one set */
	uint64_t bytes_seen;		  /* sizes of the files walked so far */
	struct st_pool *pool;
	struct job cur; /* the batch being filled */
	struct worker *workers;
	size_t n_workers;
};

/* Adds e to the tree, unless the tree is full (the entry limit). */
static int add_entry(struct walk *w, struct st_entry *e, struct al_error *err)
{
	/* A plain directory's entries are counted as they are walked
	 * (count_walked): a delta holds fewer than the tree. */
	if (w->layer && w->n >= w->limits.max_entries)
		return al_error_set(err, -E2BIG,
				    "%s: more than %zu entries, the limit (--max-files); nothing "
				    "was committed",
				    w->layer ? "upper layer" : "workspace", w->limits.max_entries);
	if (w->n == w->cap) {
		size_t nc = w->cap ? w->cap * 2 : 1024;
		struct st_entry *ne = realloc(w->entries, nc * sizeof(*ne));
		if (!ne)
			return al_error_set(err, -ENOMEM, "out of memory");
		w->entries = ne;
		w->cap = nc;
	}
	w->entries[w->n++] = *e;
	return 0;
}

/* Cuts what the buffer holds into chunks and stores them: all of it when
 * final (the end of a run of data), else what a cut can be made in. */
static int store_cuts(struct chunk_sink *s, size_t *have, bool final, struct st_entry *e,
		      size_t *cap, struct al_error *err)
{
	size_t off = 0;
	while (off < *have) {
		size_t cut = st_cdc_cut(s->buf + off, *have - off, final);
		if (cut == 0)
			break;
		struct st_id id;
		bool fresh = false;
		int rc = s->cw ? st_cas_put_shared(s->cw, s->buf + off, cut, &id, &fresh, err) :
				 st_cas_put(s->cas, s->buf + off, cut, &id, &fresh, err);
		if (rc < 0)
			return rc;
		if (fresh) {
			s->chunks_new++;
			s->bytes_new += cut;
		}
		rc = st_entry_push_chunk(e, cap, &id);
		if (rc < 0)
			return al_error_set(err, rc, "out of memory");
		off += cut;
	}
	memmove(s->buf, s->buf + off, *have - off);
	*have -= off;
	return 0;
}

/* Reads at most len bytes from the file's offset in content-defined
 * chunks into the store; *ret_got: how many there were (fewer only at the
 * end of the file). */
static int read_run(struct chunk_sink *s, int fd, const char *path, uint64_t len,
		    struct st_entry *e, size_t *cap, uint64_t *ret_got, struct al_error *err)
{
	size_t have = 0;
	uint64_t got = 0;
	bool end = false;
	for (;;) {
		while (!end && have < 2 * ST_CDC_MAX) {
			if (s->stop && __atomic_load_n(s->stop, __ATOMIC_RELAXED))
				return -ECANCELED;
			size_t want = 2 * ST_CDC_MAX - have;
			if (want > len - got)
				want = (size_t)(len - got);
			if (want == 0) {
				end = true;
				break;
			}
			ssize_t n = read(fd, s->buf + have, want);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return al_error_set_errno(err, -errno, "cannot read %s", path);
			if (n == 0)
				end = true;
			have += (size_t)n;
			got += (uint64_t)n;
		}
		int rc = store_cuts(s, &have, end, e, cap, err);
		if (rc < 0)
			return rc;
		if (end && have == 0)
			break;
	}
	*ret_got = got;
	return 0;
}

/*
 * Reads a regular file into the store: sets e's size, chunks and holes.
 * Its runs of data are read, its holes (SEEK_DATA, SEEK_HOLE) recorded as
 * holes, so that its cost follows its data, not its size. A file without
 * holes when opened (size bytes, as many blocks) is read straight, as
 * before; should it have grown meanwhile, the rest is taken by its runs of
 * data too, so a file made huge and sparse behind the walk's back costs
 * nothing either. Chunks are cut within a run.
 */
static int read_file(struct chunk_sink *s, int fd, const char *path, uint64_t size, bool sparse,
		     struct st_entry *e, struct al_error *err)
{
	size_t cap = 0, hcap = 0;
	uint64_t pos = 0, got = 0;
	int rc;
	if (!sparse) {
		/* One byte more than its size: the end of the file is seen with
		 * the read that says so, as a plain read to the end would. */
		rc = read_run(s, fd, path, size + 1, e, &cap, &got, err);
		if (rc < 0)
			return rc;
		pos = got;
		if (got <= size)
			goto done;
	}
	for (;;) {
		off_t data = lseek(fd, (off_t)pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break; /* no data from pos on */
		if (data < 0 && (errno == EINVAL || errno == EOPNOTSUPP)) {
			/* No such seek here: read to the end. */
			rc = read_run(s, fd, path, UINT64_MAX, e, &cap, &got, err);
			if (rc < 0)
				return rc;
			pos += got;
			goto done;
		}
		off_t hole = data < 0 ? -1 : lseek(fd, data, SEEK_HOLE);
		if (hole < 0 || lseek(fd, data, SEEK_SET) < 0)
			return al_error_set_errno(err, -errno, "cannot read %s", path);
		uint64_t run = (uint64_t)(hole - data);
		rc = st_entry_push_hole(e, &hcap, (uint64_t)data - pos);
		if (rc < 0)
			return al_error_set(err, rc, "out of memory");
		rc = read_run(s, fd, path, run, e, &cap, &got, err);
		if (rc < 0)
			return rc;
		pos = (uint64_t)data + got;
		if (got < run)
			goto done; /* made shorter meanwhile: it ends here */
	}
	/* What is left up to the size is a hole. */
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set_errno(err, -errno, "cannot read %s", path);
	if ((uint64_t)st.st_size > pos) {
		rc = st_entry_push_hole(e, &hcap, (uint64_t)st.st_size - pos);
		if (rc < 0)
			return al_error_set(err, rc, "out of memory");
		pos = (uint64_t)st.st_size;
	}
done:
	e->size = pos;
	s->bytes += pos;
	return 0;
}

/* ---- the pool's side ---- */

static void job_close(struct job *j, size_t from)
{
	for (size_t i = from; i < j->n; i++)
		close(j->f[i].fd);
	j->n = 0;
	j->bytes = 0;
}

static void job_drop(void *job)
{
	job_close(job, 0);
}

/* Reads one file of a batch; its result stays with the worker. */
static int work_file(struct worker *wk, const struct job_file *f, struct al_error *err)
{
	if (wk->n_res == wk->cap_res) {
		size_t nc = wk->cap_res ? wk->cap_res * 2 : 256;
		struct result *nr = realloc(wk->res, nc * sizeof(*nr));
		if (!nr)
			return al_error_set(err, -ENOMEM, "out of memory");
		wk->res = nr;
		wk->cap_res = nc;
	}
	struct st_entry got = { 0 };
	int rc = read_file(&wk->sink, f->fd, f->path, f->size, f->sparse, &got, err);
	if (rc < 0) {
		free(got.chunks);
		free(got.holes);
		return rc;
	}
	wk->res[wk->n_res++] = (struct result){ .entry = f->entry,
						.chunks = got.chunks,
						.n_chunks = got.n_chunks,
						.holes = got.holes,
						.n_holes = got.n_holes,
						.size = got.size };
	return 0;
}

static int job_run(void *worker, void *job, struct al_error *err)
{
	struct worker *wk = worker;
	struct job *j = job;
	int rc = 0;
	size_t i;
	for (i = 0; i < j->n && rc == 0; i++) {
		rc = work_file(wk, &j->f[i], err);
		close(j->f[i].fd);
	}
	job_close(j, i);
	return rc;
}

static const struct st_pool_ops snapshot_pool = {
	.job_size = sizeof(struct job),
	.run = job_run,
	.drop = job_drop,
};

/* Queues the batch being filled (its descriptors go with it, even on
 * failure). */
static int batch_submit(struct walk *w, struct al_error *err)
{
	if (w->cur.n == 0)
		return 0;
	/* The workers look chunks up: the index is read before the first
	 * batch reaches them, by this thread (st_cas_load). */
	int rc = st_repo_cas_load(w->r, err);
	if (rc < 0) {
		job_close(&w->cur, 0);
		return rc;
	}
	rc = st_pool_submit(w->pool, &w->cur);
	w->cur.n = 0;
	w->cur.bytes = 0;
	return rc;
}

/* Adds an open file to the batch (takes fd, even on failure). */
static int batch_add(struct walk *w, int fd, size_t entry, const char *path, uint64_t size,
		     bool sparse, struct al_error *err)
{
	w->cur.f[w->cur.n++] = (struct job_file){
		.fd = fd, .entry = entry, .path = path, .size = size, .sparse = sparse
	};
	w->cur.bytes += size;
	if (w->cur.n < JOB_FILES && w->cur.bytes < JOB_BYTES)
		return 0;
	return batch_submit(w, err);
}

/*
 * Starts the workers: threads of them, or with 1 none (the walking thread
 * reads the files itself, through the store's own writer).
 */
static int workers_start(struct walk *w, unsigned threads, struct al_error *err)
{
	size_t n_threads = threads > 1 ? threads : 0;
	size_t n = n_threads ? n_threads : 1;
	w->workers = calloc(n, sizeof(*w->workers));
	void **states = calloc(n, sizeof(*states));
	int rc = 0;
	if (!w->workers || !states)
		rc = al_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct worker *wk = &w->workers[i];
		w->n_workers = i + 1;
		states[i] = wk;
		wk->sink.cas = w->r->cas;
		wk->sink.buf = malloc(2 * ST_CDC_MAX);
		if (!wk->sink.buf)
			rc = al_error_set(err, -ENOMEM, "out of memory");
		if (rc == 0 && n_threads)
			rc = st_cas_writer_new(w->r->cas, &wk->sink.cw, err);
	}
	if (rc == 0)
		rc = st_pool_start(&snapshot_pool, states, n_threads, 2 * n, &w->pool, err);
	if (rc == 0)
		for (size_t i = 0; i < n; i++)
			w->workers[i].sink.stop = st_pool_stopping(w->pool);
	free(states);
	return rc;
}

/* Waits for the workers and files their results in the walk's entries.
 * rc: the walk's result (its error in err); returns the snapshot's, with
 * the first error in err. */
static int workers_finish(struct walk *w, int rc, struct al_error *err)
{
	if (rc == 0 && w->pool)
		rc = batch_submit(w, err);
	job_close(&w->cur, 0);
	rc = st_pool_finish(TAKE_PTR(w->pool), rc, err);
	for (size_t i = 0; i < w->n_workers; i++) {
		struct worker *wk = &w->workers[i];
		w->res->chunks_new += wk->sink.chunks_new;
		w->res->bytes_new += wk->sink.bytes_new;
		w->res->bytes += wk->sink.bytes;
		for (size_t k = 0; k < wk->n_res; k++) {
			const struct result *rs = &wk->res[k];
			struct st_entry *e = &w->entries[rs->entry];
			e->chunks = rs->chunks;
			e->n_chunks = rs->n_chunks;
			e->holes = rs->holes;
			e->n_holes = rs->n_holes;
			e->size = rs->size;
		}
		free(wk->res);
		st_cas_writer_free(wk->sink.cw);
		free(wk->sink.buf);
	}
	free(w->workers);
	w->workers = NULL;
	w->n_workers = 0;
	return rc;
}

/* ---- the walk ---- */

/* Takes the file from the previous checkpoint when the stat cache vouches
 * for it, or opens it and hands *ret_fd back (else -1) to be queued once
 * its entry is in place. */
static int snap_file(struct walk *w, int dirfd, const char *name, const char *path,
		     const struct stat *st, struct st_entry *e, int *ret_fd, struct stat *ret_st,
		     struct al_error *err)
{
	e->type = ST_FILE;
	const struct st_entry *old = st_manifest_find(w->prev, path);
	const struct st_stat_rec *rec = w->sc_valid ? st_statcache_find(&w->sc, path) : NULL;
	int64_t mt = st_ts_ns(st->st_mtim), ct = st_ts_ns(st->st_ctim);
	/* Unread when size, mtime, inode and ctime match what the previous
	 * snapshot saw, and the file did not change around that snapshot's
	 * start (a change within the same timestamp tick would not show). */
	if (old && rec && old->type == ST_FILE && old->size == (uint64_t)st->st_size &&
	    old->mtime_ns == mt && rec->ino == st->st_ino && rec->ctime_ns == ct &&
	    rec->mtime_ns == mt && rec->size == (uint64_t)st->st_size &&
	    mt < w->sc.start_ns - RACY_NS && ct < w->sc.start_ns - RACY_NS) {
		/* Its chunks must still be there: the index is read first. */
		int lrc = st_repo_cas_load(w->r, err);
		if (lrc < 0)
			return lrc;
		bool all = true;
		for (size_t i = 0; i < old->n_chunks && all; i++)
			all = st_cas_has_shared(w->r->cas, &old->chunks[i]);
		if (all) {
			e->size = old->size;
			if (st_entry_copy_pieces(e, old) < 0)
				return al_error_set(err, -ENOMEM, "out of memory");
			w->res->files_reused++;
			return 0;
		}
	}
	/* O_NONBLOCK: should a fifo have replaced the file since the stat,
	 * the open must not hang; the fstat below then refuses it. */
	_cleanup_close_ int fd =
		openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "cannot open %s", path);
	struct stat fst;
	if (fstat(fd, &fst) < 0 || !S_ISREG(fst.st_mode) || fst.st_ino != st->st_ino)
		return al_error_set(err, -EAGAIN, "%s changed while being read", path);
	*ret_st = fst;
	w->res->files_read++;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static int count_walked(struct walk *w, struct al_error *err)
{
	if (w->layer || w->walked++ < w->limits.max_entries)
		return 0;
	return al_error_set(err, -E2BIG,
			    "workspace: more than %zu entries, the limit (--max-files); nothing "
			    "was committed",
			    w->limits.max_entries);
}

/* Whether a file or symlink is as the previous snapshot saw it: inode,
 * ctime, mtime, size and mode as its cache has them, and no change around
 * that snapshot's start (a change within the same timestamp tick would not
 * show in the times). */
static bool stat_unchanged(const struct walk *w, const struct st_stat_rec *rec, char type,
			   const struct stat *st)
{
	int64_t mt = st_ts_ns(st->st_mtim), ct = st_ts_ns(st->st_ctim);
	return rec && rec->type == type && rec->ino == (uint64_t)st->st_ino &&
	       rec->ctime_ns == ct && rec->mtime_ns == mt && rec->size == (uint64_t)st->st_size &&
	       rec->mode == (st->st_mode & 0777) && mt < w->sc.start_ns - RACY_NS &&
	       ct < w->sc.start_ns - RACY_NS;
}

/* An "x" entry: path, and what the lower layer has below it, are gone. */
static int add_whiteout(struct walk *w, const char *path, struct al_error *err)
{
	struct st_entry e = { .type = ST_WHITEOUT, .path = strdup(path) };
	int rc = e.path ? add_entry(w, &e, err) : al_error_set(err, -ENOMEM, "out of memory");
	if (rc < 0)
		free(e.path);
	return rc;
}

static int walk_dir(struct walk *w, int dirfd, const char *rel, unsigned depth,
		    struct al_error *err)
{
	if (depth > w->limits.max_depth)
		return al_error_set(
			err, -ELOOP,
			"%s: deeper than %zu directories, the limit (--max-depth); nothing "
			"was committed",
			rel, w->limits.max_depth);
	/* A new open file description: a dup would share (and move) the
	 * directory offset of dirfd. */
	int dupfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dupfd < 0)
		return al_error_set_errno(err, -errno, "%s", rel[0] ? rel : ".");
	DIR *d = fdopendir(dupfd);
	if (!d) {
		close(dupfd);
		return al_error_set_errno(err, -errno, "cannot list %s", rel[0] ? rel : ".");
	}
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		const char *name = de->d_name;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		char path[ST_PATH_MAX + 1];
		int n = rel[0] ? snprintf(path, sizeof(path), "%s/%s", rel, name) :
				 snprintf(path, sizeof(path), "%s", name);
		if (n < 0 || (size_t)n >= sizeof(path)) {
			rc = al_error_set(err, -ENAMETOOLONG,
					  "a path below %s is longer than %d bytes",
					  rel[0] ? rel : "the workspace", ST_PATH_MAX);
			break;
		}
		struct stat st, fst = { 0 };
		_cleanup_close_ int fd = -1; /* a file for the workers */
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = al_error_set_errno(err, -errno, "cannot stat %s", path);
			break;
		}
		struct st_entry e = { .mtime_ns = st_ts_ns(st.st_mtim), .mode = st.st_mode & 0777 };
		if (w->layer) {
			int k = st_layer_kind(w->o->userxattr, dirfd, name, path, &st, err);
			if (k < 0) {
				rc = k;
				break;
			}
			if (k == 1) {
				rc = add_whiteout(w, path, err);
				if (rc < 0)
					break;
				continue;
			}
		}
		if ((st.st_mode & 07000) && w->o->report && !S_ISLNK(st.st_mode))
			w->o->report(path, "setuid, setgid or sticky bit dropped", w->o->ud);
		/* A plain directory's delta: what is as the cache saw it stays
		 * out (it is in the previous checkpoint), and the cache learns
		 * what is still there (the rest was removed). */
		struct st_stat_rec *rec = w->delta ? st_statcache_find(&w->sc, path) : NULL;
		bool same = false;
		if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
			char type = S_ISDIR(st.st_mode) ? 'd' : S_ISREG(st.st_mode) ? 'f' : 'l';
			if (rec)
				rec->seen = type;
			if (!w->layer && (rc = count_walked(w, err)) < 0)
				break;
			if (type == 'd')
				same = rec && rec->type == 'd' && rec->mode == e.mode &&
				       rec->mtime_ns == e.mtime_ns;
			else
				same = stat_unchanged(w, rec, type, &st);
			if ((!w->layer || type == 'f') &&
			    st_statcache_line(&w->cache, type, &st, path) < 0) {
				rc = al_error_set(err, -ENOMEM, "out of memory");
				break;
			}
		}
		if (S_ISDIR(st.st_mode)) {
			e.type = ST_DIR;
		} else if (S_ISREG(st.st_mode)) {
			/* Before anything is read: a file's size counts, holes and
			 * all (docs/checkpoints.md, "Limits"); unread ones too. */
			uint64_t size = (uint64_t)st.st_size, max = w->limits.max_bytes;
			if (max && size > max - w->bytes_seen) {
				rc = al_error_set(
					err, -EFBIG,
					"%s: %" PRIu64 " bytes (holes count) would take the "
					"files past the byte limit of %" PRIu64 " (--max-bytes); "
					"nothing was read or committed",
					path, size, max);
				break;
			}
			w->bytes_seen += size;
			e.type = ST_FILE;
			if (same) {
				e.size = size;
				w->res->files_reused++;
			} else {
				rc = snap_file(w, dirfd, name, path, &st, &e, &fd, &fst, err);
			}
		} else if (same) {
			e.type = ST_SYMLINK;
		} else if (S_ISLNK(st.st_mode)) {
			e.type = ST_SYMLINK;
			e.mode = 0777;
			char target[ST_PATH_MAX + 1];
			ssize_t tl = readlinkat(dirfd, name, target, sizeof(target));
			if (tl < 0)
				rc = al_error_set_errno(err, -errno, "cannot read the link %s",
							path);
			else if ((size_t)tl >= sizeof(target) || tl == 0)
				rc = al_error_set(err, -ENAMETOOLONG, "the link %s is too long",
						  path);
			else if (!(e.target = strndup(target, (size_t)tl)))
				rc = al_error_set(err, -ENOMEM, "out of memory");
		} else {
			w->res->skipped++;
			if (w->o->report)
				w->o->report(path,
					     S_ISFIFO(st.st_mode) ? "fifo skipped" :
					     S_ISSOCK(st.st_mode) ? "socket skipped" :
								    "device skipped",
					     w->o->ud);
			/* In an upper layer it still hides what the lower one has
			 * there: the merged view shows no such file either. */
			if (w->layer && (rc = add_whiteout(w, path, err)) < 0)
				break;
			continue;
		}
		if (rc == 0 && !same) {
			e.path = strdup(path);
			rc = e.path ? add_entry(w, &e, err) :
				      al_error_set(err, -ENOMEM, "out of memory");
		}
		if (rc < 0) {
			free(e.path);
			free(e.target);
			free(e.chunks);
			free(e.holes);
			break;
		}
		if (fd >= 0) {
			/* Fewer blocks than bytes: it has holes, read by its data. */
			bool sparse = (uint64_t)fst.st_blocks < (uint64_t)fst.st_size / 512;
			rc = batch_add(w, TAKE_FD(fd), w->n - 1, e.path, (uint64_t)fst.st_size,
				       sparse, err);
			if (rc < 0)
				break;
		}
		if (e.type == ST_DIR) {
			w->res->dirs++;
			int sub =
				openat(dirfd, name,
				       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
			if (sub < 0) {
				rc = al_error_set_errno(err, -errno, "cannot open %s", path);
				break;
			}
			if (w->layer) {
				rc = st_layer_opaque(w->o->userxattr, sub, path, err);
				if (rc == 1)
					w->entries[w->n - 1].type = ST_OPAQUE;
				if (rc < 0) {
					close(sub);
					break;
				}
			}
			rc = walk_dir(w, sub, path, depth + 1, err);
			close(sub);
		} else if (e.type == ST_FILE) {
			w->res->files++;
			w->res->bytes += e.size;
		} else {
			w->res->symlinks++;
		}
	}
	if (rc == 0 && errno != 0)
		rc = al_error_set_errno(err, -errno, "cannot list %s", rel[0] ? rel : ".");
	closedir(d);
	return rc;
}

/* A plain directory's delta: an "x" entry for each entry of the cache the
 * walk no longer found, unless what holds it is gone too (its own "x"
 * removes it) or is no directory now (replaced, subtree and all). */
static int add_removed(struct walk *w, struct al_error *err)
{
	for (size_t i = 0; i < w->sc.n; i++) {
		struct st_stat_rec *rec = &w->sc.recs[i];
		if (rec->seen)
			continue;
		char *slash = strrchr(rec->path, '/');
		if (slash) {
			*slash = '\0';
			const struct st_stat_rec *up = st_statcache_find(&w->sc, rec->path);
			*slash = '/';
			if (!up || up->seen != 'd')
				continue;
		}
		int rc = add_whiteout(w, rec->path, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/*
 * Commits a plain directory's changes over the previous checkpoint parent:
 * a delta over it when it is a full manifest, or over its base, composed
 * with its changes (prev, as stored), when it is a delta. st_layer_commit
 * stores the whole tree instead once the delta has grown large. The walk
 * held the byte limit over the whole tree already.
 */
static int commit_delta(struct st_repo *r, struct st_fault *f, const char *session,
			const char *parent, const struct st_head *ph, uint64_t ptree,
			struct st_manifest *prev, struct walk *w, struct timespec now,
			char out_id[ST_ID_HEX + 1], struct al_error *err)
{
	if (w->n)
		qsort(w->entries, w->n, sizeof(*w->entries), st_entry_cmp);
	if (prev) {
		struct st_entry *d = NULL;
		size_t nd = 0;
		if (st_layer_compose(prev->entries, prev->n_entries, w->entries, w->n, &d, &nd) < 0)
			return al_error_set(err, -ENOMEM, "out of memory");
		st_entries_free(w->entries, w->n);
		w->entries = d;
		w->n = nd;
	}
	const struct st_layer_head lh = {
		.base = prev ? ph->base : parent,
		.base_entries = prev ? ph->base_entries : ph->entries,
		.base_tree = prev ? ptree - ph->entries : ptree,
	};
	struct st_manifest_limits lim = w->limits;
	lim.max_bytes = 0;
	return st_layer_commit(r, f, session, parent, &lh, &lim, &w->entries, &w->n, now, &w->cache,
			       out_id, err);
}

int st_snapshot(struct st_repo *r, const struct st_snapshot_opts *o, struct st_snapshot_result *ret,
		struct al_error *err)
{
	memset(ret, 0, sizeof(*ret));
	struct st_fault fault = st_fault_start(r);
	if (!st_session_valid(o->session))
		return st_session_error(o->session, err);
	if (o->threads > ST_THREADS_MAX)
		return al_error_set(err, -EINVAL, "%u snapshot threads: at most %d", o->threads,
				    ST_THREADS_MAX);
	unsigned threads = o->threads;
	if (threads == 0) {
		int trc = st_threads(&threads, err);
		if (trc < 0)
			return trc;
	}
	/* Held until the last reference is written: GC waits (store/gc.h). */
	_cleanup_close_ int lock = -1;
	int lrc = st_repo_lock_writer(r, &lock, err);
	if (lrc < 0)
		return lrc;
	bool layer = o->upper != NULL;
	const char *dir = layer ? o->upper : o->workspace;
	if (!dir || (layer && !o->lower))
		return al_error_set(err, -EINVAL, "nothing to snapshot");
	/* No link followed anywhere in the path (a user who owns a directory
	 * on the way cannot swap in a link to one of root's), then only the
	 * descriptor. */
	_cleanup_close_ int root =
		open_no_symlinks(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_NOCTTY, 0);
	if (root < 0)
		return st_path_error(err, root, layer ? "upper layer" : "workspace", dir);
	struct stat rst;
	if (fstat(root, &rst) < 0)
		return al_error_set_errno(err, -errno, "%s", dir);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);

	struct walk w = { .r = r, .o = o, .res = ret, .layer = layer };
	if (o->limits)
		w.limits = *o->limits;
	/* A manifest holds no more entries than its writer allows. */
	if (!w.limits.max_entries || w.limits.max_entries > ST_MANIFEST_MAX_ENTRIES_DEFAULT)
		w.limits.max_entries = ST_MANIFEST_MAX_ENTRIES_DEFAULT;
	if (!w.limits.max_depth || w.limits.max_depth > ST_MANIFEST_MAX_DEPTH_DEFAULT)
		w.limits.max_depth = ST_MANIFEST_MAX_DEPTH_DEFAULT;
	buf_init(&w.cache, ST_STATCACHE_MAX);
	struct st_manifest *prev = NULL, *lower = NULL;
	char parent[ST_ID_HEX + 1];
	int rc = st_session_latest(r, o->session, parent, err);
	/*
	 * The stat cache, when it describes this tree (the same root) as the
	 * previous checkpoint has it (sealed to that id). An upper layer's
	 * files are then taken from that checkpoint as stored (its changes)
	 * unread. A plain directory's unchanged entries are left out
	 * altogether: what differs goes into a delta over the previous
	 * checkpoint (composed with its own changes when it is a delta), so
	 * that neither manifest is read whole, nor a new one written whole.
	 */
	st_statcache_load(r, o->session, &rst, &w.sc);
	bool sc_ok = rc == 0 && parent[0] && w.sc.id[0] && strcmp(w.sc.id, parent) == 0 &&
		     w.sc.kind == (layer ? 'l' : 'p');
	struct st_head phead = { 0 };
	unsigned pdepth = 0;
	uint64_t ptree = 0;
	if (sc_ok && layer) {
		rc = st_manifest_load_raw(r, parent, NULL, &prev, err);
		w.sc_valid = rc == 0;
	} else if (sc_ok && o->full) {
		/* The whole tree as before: unchanged files' chunks from it. */
		rc = st_manifest_load(r, parent, NULL, &prev, err);
		w.sc_valid = rc == 0;
	} else if (sc_ok) {
		rc = st_checkpoint_chain(r, parent, &phead, &pdepth, &ptree, err);
		if (rc == 0 && phead.base[0])
			rc = st_manifest_load_raw(r, parent, NULL, &prev, err);
		w.delta = rc == 0;
	}
	struct st_head lhead = { 0 };
	unsigned ldepth = 0;
	uint64_t ltree = 0;
	if (rc == 0 && layer) {
		/* The lower checkpoint is only named, as the base: its head and
		 * its bases' say what it is, not its entries. Once its chain of
		 * deltas is as deep as it may get, the chain's changes are read
		 * and composed, and the new delta goes over the full manifest
		 * under them. */
		rc = st_checkpoint_chain(r, o->lower, &lhead, &ldepth, &ltree, err);
		if (rc == 0)
			log_debug("snapshot of %s over %s: %u deltas under it, its tree at most "
				  "%" PRIu64 " entries%s",
				  dir, o->lower, ldepth, ltree,
				  ldepth >= ST_CHAIN_MAX ? ": composing the chain" : "");
		if (rc == 0 && ldepth >= ST_CHAIN_MAX)
			rc = st_manifest_load_chain(r, o->lower, NULL, NULL, &lower, NULL, NULL,
						    err);
	}
	if (rc < 0) {
		st_manifest_free(prev);
		st_statcache_free(&w.sc);
		buf_free(&w.cache);
		return rc;
	}
	w.prev = layer || o->full ? prev : NULL;
	rc = workers_start(&w, threads, err);
	if (rc == 0 && st_statcache_header(&w.cache, layer ? 'l' : 'p', &rst, st_ts_ns(now)) < 0)
		rc = al_error_set(err, -ENOMEM, "out of memory");
	if (rc == 0)
		rc = walk_dir(&w, root, "", 1, err);
	if (rc == 0 && w.delta)
		rc = add_removed(&w, err);
	/* Every thread is gone before anything is committed. */
	rc = workers_finish(&w, rc, err);
	/* Files that grew while being read may have taken the total past the
	 * byte limit the walk held them to. */
	if (rc == 0 && w.limits.max_bytes && ret->bytes > w.limits.max_bytes)
		rc = al_error_set(err, -EFBIG,
				  "the files grew while being read, to %" PRIu64 " bytes (holes "
				  "count), more than the byte limit of %" PRIu64 " (--max-bytes); "
				  "nothing was committed",
				  ret->bytes, w.limits.max_bytes);
	st_statcache_free(&w.sc);

	if (rc == 0 && layer) {
		/* The lower layer is checkpoint o->lower: the base, or at the
		 * end of a chain its composed changes come first, over the full
		 * manifest under them. */
		if (w.n)
			qsort(w.entries, w.n, sizeof(*w.entries), st_entry_cmp);
		struct st_entry *d = NULL;
		size_t nd = 0;
		rc = st_layer_compose(lower ? lower->entries : NULL, lower ? lower->n_entries : 0,
				      w.entries, w.n, &d, &nd);
		if (rc < 0) {
			rc = al_error_set(err, rc, "out of memory");
		} else {
			st_entries_free(w.entries, w.n);
			w.entries = d;
			w.n = nd;
			const struct st_layer_head lh = {
				.base = lower ? lower->base : o->lower,
				.base_entries = lower ? lower->base_entries : lhead.entries,
				/* the root's alone, or the whole chain's */
				.base_tree = lower ? lower->base_entries : ltree,
				.lower = o->lower,
			};
			rc = st_layer_commit(r, &fault, o->session, parent, &lh, &w.limits,
					     &w.entries, &w.n, now, &w.cache, ret->id, err);
		}
	} else if (rc == 0 && w.delta) {
		rc = commit_delta(r, &fault, o->session, parent, &phead, ptree, prev, &w, now,
				  ret->id, err);
	} else if (rc == 0) {
		rc = st_commit_entries(r, &fault, o->session, parent, NULL, w.entries, w.n, now,
				       &w.cache, ret->id, err);
	}
	st_entries_free(w.entries, w.n);
	st_manifest_free(prev);
	st_manifest_free(lower);
	buf_free(&w.cache);
	return rc;
}

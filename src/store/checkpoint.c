/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Snapshot, restore and diff of workspace checkpoints.
 *
 * Objects of a tenant T (see objstore.h for the key rules):
 *   tenants/T/packs/<pack>, tenants/T/index/<pack>  chunks (cas.c)
 *   tenants/T/manifests/<id>                        manifests (manifest.h)
 *   tenants/T/sessions/<s>/latest                   the session's last checkpoint id
 *   tenants/T/sessions/<s>/log/<created>-<id>        every checkpoint of the session
 *   tenants/T/sessions/<s>/statcache                what the last snapshot saw on disk
 * A snapshot writes in that order: chunks (packs, then indexes), manifest,
 * log entry, latest, stat cache. Each write is atomic, and each refers only
 * to what is already durable, so a crash between any two leaves the
 * previous checkpoints whole and the store consistent.
 */
#include "store/checkpoint.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/parse.h"
#include "store/cas.h"
#include "store/chunker.h"
#include "store/textdiff.h"

#define MANIFEST_MAX (512u << 20)
#define STATCACHE_MAX (512u << 20)
#define KEY_MAX 1024
/* A file changed this close to the previous snapshot's start may have
 * changed again within the same timestamp tick: it is read again. */
#define RACY_NS (1000000000ll)

struct st_repo {
	struct st_objstore *os;
	struct st_cas *cas;
	char tenant[ST_TENANT_MAX + 1];
	uint8_t *key;
	size_t keylen;
	int level;
};

/* ---- threads ---- */

int st_threads(unsigned *ret, struct al_error *err)
{
	const char *s = getenv("AIRLOCK_STORE_THREADS");
	uint64_t v;
	if (s && *s) {
		if (parse_u64(s, &v) < 0 || v == 0 || v > ST_THREADS_MAX)
			return al_error_set(err, -EINVAL,
					    "AIRLOCK_STORE_THREADS wants a thread count from 1 to %d, "
					    "not '%s'", ST_THREADS_MAX, s);
		*ret = (unsigned)v;
		return 0;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	*ret = n < 1 ? 1 : n > ST_THREADS_DEFAULT_MAX ? ST_THREADS_DEFAULT_MAX : (unsigned)n;
	return 0;
}

/* ---- fault injection for the crash tests: AIRLOCK_FAULT_STEP=N dies at
 * the Nth write step of a snapshot (see tests/integration/test_checkpoint.py) ---- */

static int fault_step = -1;
static int fault_count;

static void fault_point(void)
{
	if (fault_step < 0)
		return;
	if (++fault_count == fault_step)
		_exit(99);
}

static void fault_init(void)
{
	const char *s = getenv("AIRLOCK_FAULT_STEP");
	fault_step = -1;
	fault_count = 0;
	if (s && *s) {
		char *end;
		long v = strtol(s, &end, 10);
		if (*end == '\0' && v > 0 && v < 1000000)
			fault_step = (int)v;
	}
}

/* ---- repository ---- */

static bool session_valid(const char *s)
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

static bool id_valid(const char *id)
{
	if (strlen(id) != ST_ID_HEX)
		return false;
	for (size_t i = 0; i < ST_ID_HEX; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}

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
	int rc = st_objstore_open_dir(o->store_dir, &r->os, err);
	if (rc == 0)
		rc = st_cas_open(r->os, r->tenant, r->level, &r->cas, err);
	if (rc < 0) {
		st_repo_close(r);
		return rc;
	}
	*ret = r;
	return 0;
}

struct st_cas *st_repo_cas(struct st_repo *r)
{
	return r->cas;
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
		struct st_cas *fresh = NULL;
		rc = st_cas_open(r->os, r->tenant, r->level, &fresh, err);
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

int st_key_load(const char *path, bool create, uint8_t **ret, size_t *ret_len,
		struct al_error *err)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0 && errno == ENOENT && create) {
		uint8_t k[32];
		if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k))
			return al_error_set_errno(err, -EIO, "cannot make a key");
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		int r = fd < 0 ? -errno : write_full(fd, k, sizeof(k));
		if (fd >= 0 && r == 0 && fsync(fd) < 0)
			r = -errno;
		if (fd >= 0)
			close(fd);
		explicit_bzero(k, sizeof(k));
		if (r < 0)
			return al_error_set_errno(err, r, "cannot write the key %s", path);
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	}
	if (fd < 0)
		return al_error_set_errno(err, -errno, "cannot open the key %s", path);
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) ||
	    st.st_uid != geteuid()) {
		close(fd);
		return al_error_set(err, -EPERM,
				    "the key %s must be a regular file of yours with mode 0600", path);
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

static int key_of(char *out, size_t size, const struct st_repo *r, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int key_of(char *out, size_t size, const struct st_repo *r, const char *fmt, ...)
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
	if (!session_valid(session))
		return al_error_set(err, -EINVAL, "session '%s': expected 1 to %d of [a-z0-9._-]",
				    session, ST_SESSION_MAX);
	char key[ST_KEY_MAX + 1];
	if (key_of(key, sizeof(key), r, "sessions/%s/latest", session) < 0)
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
	if (!id_valid(out))
		return al_error_set(err, -EBADMSG, "%s: not a checkpoint id", key);
	return 0;
}

/* Loads and checks a manifest as it is stored: a delta's entries are its
 * changes (st_manifest_load applies them). */
static int manifest_load_raw(struct st_repo *r, const char *id,
			     const struct st_manifest_limits *limits, struct st_manifest **ret,
			     struct al_error *err)
{
	if (!id_valid(id))
		return al_error_set(err, -EINVAL, "'%s' is not a checkpoint id (64 hex digits)", id);
	char key[ST_KEY_MAX + 1];
	if (key_of(key, sizeof(key), r, "manifests/%s", id) < 0)
		return al_error_set(err, -ENAMETOOLONG, "key too long");
	void *text = NULL;
	size_t len = 0;
	int rc = st_obj_get(r->os, key, MANIFEST_MAX, &text, &len, err);
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
		return al_error_set(err, -EBADMSG, "checkpoint %s: the manifest's content does not "
				    "match its id (corrupt store)", id);
	}
	rc = st_manifest_parse(text, len, r->key, r->keylen, r->tenant, limits, ret, err);
	free(text);
	return rc;
}

int st_manifest_load(struct st_repo *r, const char *id, const struct st_manifest_limits *limits,
		     struct st_manifest **ret, struct al_error *err)
{
	struct st_manifest *m = NULL, *base = NULL;
	int rc = manifest_load_raw(r, id, limits, &m, err);
	if (rc < 0 || !m->base[0]) {
		if (rc == 0)
			*ret = m;
		return rc;
	}
	/* The byte limit is the tree's: checked once the delta is applied. */
	struct st_manifest_limits bl = limits ? *limits : (struct st_manifest_limits){ 0 };
	bl.max_bytes = 0;
	rc = manifest_load_raw(r, m->base, &bl, &base, err);
	if (rc == 0 && base->base[0])
		rc = al_error_set(err, -EBADMSG, "checkpoint %s: its base %s is itself a delta", id,
				  m->base);
	if (rc < 0) {
		char why[AL_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", al_error_message(err));
		al_error_clear(err);
		st_manifest_free(m);
		st_manifest_free(base);
		return al_error_set(err, rc, "checkpoint %s: base: %s", id, why);
	}
	return st_manifest_apply(base, m, limits, ret, err);
}

/* ---- path lookup in a manifest (entries are sorted) ---- */

/* Binary search of an array sorted by st_path_cmp on a char * member. */
static const void *find_path(const void *base, size_t n, size_t size, size_t path_off,
			     const char *path)
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

static const struct st_entry *manifest_find(const struct st_manifest *m, const char *path)
{
	if (!m)
		return NULL;
	return find_path(m->entries, m->n_entries, sizeof(*m->entries),
			 offsetof(struct st_entry, path), path);
}

/* ---- the stat cache: what the last snapshot saw, to skip unchanged files ---- */

struct stat_rec {
	char *path;
	uint64_t ino;
	int64_t ctime_ns, mtime_ns;
	uint64_t size;
};

struct statcache {
	uint64_t dev, root_ino;
	int64_t start_ns;
	struct stat_rec *recs; /* sorted by path */
	size_t n;
};

static void statcache_free(struct statcache *sc)
{
	for (size_t i = 0; i < sc->n; i++)
		free(sc->recs[i].path);
	free(sc->recs);
	memset(sc, 0, sizeof(*sc));
}

/* Paths in the cache are hex-encoded: no escaping rules to get wrong. */
static int hex_encode(const char *s, struct buf *b)
{
	static const char hx[] = "0123456789abcdef";
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		char two[2] = { hx[*p >> 4], hx[*p & 15] };
		if (buf_append(b, two, 2) < 0)
			return -ENOMEM;
	}
	return 0;
}

static char *hex_decode(const char *s, size_t n)
{
	if (n % 2 || n / 2 > ST_PATH_MAX)
		return NULL;
	char *out = malloc(n / 2 + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 2) {
		int v = 0;
		for (int k = 0; k < 2; k++) {
			char c = s[i + (size_t)k];
			int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
			if (d < 0) {
				free(out);
				return NULL;
			}
			v = v * 16 + d;
		}
		if (v == 0) {
			free(out);
			return NULL;
		}
		out[i / 2] = (char)v;
	}
	out[n / 2] = '\0';
	return out;
}

static int parse_i64(const char *s, int64_t *ret)
{
	uint64_t v;
	bool neg = s[0] == '-';
	if (parse_u64(s + neg, &v) < 0 || v > (uint64_t)INT64_MAX)
		return -EINVAL;
	*ret = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

/* Splits line at single spaces into exactly n fields (in place). */
static bool split_fields(char *line, char **f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		f[i] = line;
		char *sp = strchr(line, ' ');
		if (i + 1 < n) {
			if (!sp)
				return false;
			*sp = '\0';
			line = sp + 1;
		} else if (sp) {
			return false;
		}
	}
	return true;
}

static int rec_cmp(const void *a, const void *b)
{
	return st_path_cmp(((const struct stat_rec *)a)->path, ((const struct stat_rec *)b)->path);
}

/* A missing or unreadable cache is no error: every file is read. Nor is
 * one of another tree (device and root inode): it is not parsed further. */
static void statcache_load(struct st_repo *r, const char *session, const struct stat *root,
			   struct statcache *sc)
{
	memset(sc, 0, sizeof(*sc));
	char key[ST_KEY_MAX + 1];
	struct al_error e = { 0 };
	if (key_of(key, sizeof(key), r, "sessions/%s/statcache", session) < 0 ||
	    st_obj_exists(r->os, key, &e) != 1)
		return;
	void *data = NULL;
	size_t len = 0;
	if (st_obj_get(r->os, key, STATCACHE_MAX, &data, &len, &e) < 0)
		return;
	char *p = data, *end = p + len;
	bool ok = false;
	size_t cap = 0;
	/* header: "airlock-statcache 1 <dev> <root ino> <start ns>\n" */
	char *nl = memchr(p, '\n', (size_t)(end - p));
	if (nl) {
		*nl = '\0';
		char *f[5];
		ok = split_fields(p, f, 5) && strcmp(f[0], "airlock-statcache") == 0 &&
		     strcmp(f[1], "1") == 0 && parse_u64(f[2], &sc->dev) == 0 &&
		     parse_u64(f[3], &sc->root_ino) == 0 && parse_i64(f[4], &sc->start_ns) == 0 &&
		     sc->dev == (uint64_t)root->st_dev && sc->root_ino == (uint64_t)root->st_ino;
		p = nl + 1;
	}
	while (ok && p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl) {
			ok = false;
			break;
		}
		*nl = '\0';
		/* "<ino> <ctime ns> <mtime ns> <size> <hex path>" */
		char *f[5];
		struct stat_rec rec = { 0 };
		if (!split_fields(p, f, 5) || parse_u64(f[0], &rec.ino) < 0 ||
		    parse_i64(f[1], &rec.ctime_ns) < 0 || parse_i64(f[2], &rec.mtime_ns) < 0 ||
		    parse_u64(f[3], &rec.size) < 0 || !(rec.path = hex_decode(f[4], strlen(f[4])))) {
			ok = false;
			break;
		}
		if (sc->n == cap) {
			size_t nc = cap ? cap * 2 : 1024;
			struct stat_rec *nr = realloc(sc->recs, nc * sizeof(*nr));
			if (!nr) {
				free(rec.path);
				ok = false;
				break;
			}
			sc->recs = nr;
			cap = nc;
		}
		sc->recs[sc->n++] = rec;
		p = nl + 1;
	}
	free(data);
	if (!ok) {
		statcache_free(sc);
		return;
	}
	if (sc->n)
		qsort(sc->recs, sc->n, sizeof(*sc->recs), rec_cmp);
}

static const struct stat_rec *statcache_find(const struct statcache *sc, const char *path)
{
	return find_path(sc->recs, sc->n, sizeof(*sc->recs), offsetof(struct stat_rec, path), path);
}

/* ---- snapshot ---- */

/* Where a file's chunks go: the store itself (no workers), or a worker's
 * writer (st_cas_put_shared). */
struct chunk_sink {
	struct st_cas *cas;
	struct st_cas_writer *cw;
	const bool *stop; /* when set (atomically), a worker gives up early */
	unsigned char *buf; /* 2 * ST_CDC_MAX */
	uint64_t chunks_new, bytes_new;
	uint64_t bytes; /* read by a worker; the walk counts the others */
};

struct pool;

struct walk {
	struct st_repo *r;
	const struct st_snapshot_opts *o;
	struct st_snapshot_result *res;
	const struct st_manifest *prev;
	struct statcache sc;
	bool sc_valid;
	struct st_entry *entries;
	size_t n, cap;
	struct buf cache; /* the new stat cache */
	bool layer; /* walking an overlayfs upper directory */
	struct chunk_sink sink; /* without workers */
	struct pool *pool;	/* with workers: the files opened go there */
};

/*
 * Worker threads: the walking thread opens each file to read (so the
 * identity check stays next to the stat) and queues it; a worker reads,
 * cuts, hashes and compresses it and keeps its chunk list, filed in the
 * file's entry once the workers are done (so the walk may grow the entry
 * array meanwhile). Files go in batches, for fewer wake-ups on trees of
 * small files. The queue is bounded, so are open descriptors and memory.
 * The first error, the walker's or a worker's, stops everything and is
 * the one reported.
 */
#define JOB_FILES 16
#define JOB_BYTES (4u << 20) /* a batch is full with this much (by stat) */

struct job_file {
	int fd;
	size_t entry;	  /* in walk.entries */
	const char *path; /* the entry's: it outlives the workers */
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
	uint64_t size;
};

struct worker {
	struct pool *p;
	pthread_t tid;
	bool started;
	struct chunk_sink sink;
	struct result *res; /* the files it read */
	size_t n_res, cap_res;
};

struct pool {
	struct walk *w;
	struct job cur; /* the walker's batch being filled */
	pthread_mutex_t lock; /* the queue, done, failed, err */
	pthread_cond_t more, room;
	struct job *ring;
	size_t cap, head, n;
	bool done;   /* no more jobs will come */
	bool failed; /* also read without the lock (atomically) to stop early */
	struct al_error err; /* the first error */
	struct worker *workers;
	size_t n_workers;
};

static int64_t ts_ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000ll + t.tv_nsec;
}

static int add_entry(struct walk *w, struct st_entry *e)
{
	if (w->n == w->cap) {
		size_t nc = w->cap ? w->cap * 2 : 1024;
		struct st_entry *ne = realloc(w->entries, nc * sizeof(*ne));
		if (!ne)
			return -ENOMEM;
		w->entries = ne;
		w->cap = nc;
	}
	w->entries[w->n++] = *e;
	return 0;
}


/* Reads a regular file in content-defined chunks into the store: sets
 * e's size and chunks. */
static int read_file(struct chunk_sink *s, int fd, const char *path, struct st_entry *e,
		     struct al_error *err)
{
	size_t have = 0, cap = 0;
	bool eof = false;
	uint64_t total = 0;
	for (;;) {
		while (!eof && have < 2 * ST_CDC_MAX) {
			if (s->stop && __atomic_load_n(s->stop, __ATOMIC_RELAXED))
				return -ECANCELED;
			ssize_t n = read(fd, s->buf + have, 2 * ST_CDC_MAX - have);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return al_error_set_errno(err, -errno, "cannot read %s", path);
			if (n == 0)
				eof = true;
			have += (size_t)n;
		}
		size_t off = 0;
		while (off < have) {
			size_t cut = st_cdc_cut(s->buf + off, have - off, eof);
			if (cut == 0)
				break;
			struct st_id id;
			bool fresh = false;
			int rc = s->cw ? st_cas_put_shared(s->cw, s->buf + off, cut, &id, &fresh, err)
				       : st_cas_put(s->cas, s->buf + off, cut, &id, &fresh, err);
			if (rc < 0)
				return rc;
			if (fresh) {
				s->chunks_new++;
				s->bytes_new += cut;
			}
			rc = st_entry_push_chunk(e, &cap, &id);
			if (rc < 0)
				return al_error_set(err, rc, "out of memory");
			off += cut;
			total += cut;
		}
		memmove(s->buf, s->buf + off, have - off);
		have -= off;
		if (eof && have == 0)
			break;
	}
	e->size = total;
	s->bytes += total;
	return 0;
}

/* ---- the workers ---- */

/* Records the first error; the others are consequences. */
static void pool_fail_locked(struct pool *p, const struct al_error *e, int rc)
{
	if (p->failed)
		return;
	__atomic_store_n(&p->failed, true, __ATOMIC_RELAXED);
	al_error_set(&p->err, rc, "%s", al_error_message(e));
	pthread_cond_broadcast(&p->room);
	pthread_cond_broadcast(&p->more);
}

static void job_close(struct job *j, size_t from)
{
	for (size_t i = from; i < j->n; i++)
		close(j->f[i].fd);
	j->n = 0;
	j->bytes = 0;
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
	int rc = read_file(&wk->sink, f->fd, f->path, &got, err);
	if (rc < 0) {
		free(got.chunks);
		return rc;
	}
	wk->res[wk->n_res++] = (struct result){ .entry = f->entry, .chunks = got.chunks,
						 .n_chunks = got.n_chunks, .size = got.size };
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct pool *p = wk->p;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->failed && !p->done && p->n == 0)
			pthread_cond_wait(&p->more, &p->lock);
		if (p->failed || p->n == 0)
			break;
		struct job job = p->ring[p->head];
		p->head = (p->head + 1) % p->cap;
		p->n--;
		pthread_cond_signal(&p->room);
		pthread_mutex_unlock(&p->lock);

		struct al_error e = { 0 };
		int rc = 0;
		size_t i;
		for (i = 0; i < job.n && rc == 0; i++) {
			rc = work_file(wk, &job.f[i], &e);
			close(job.f[i].fd);
		}
		job_close(&job, i);

		pthread_mutex_lock(&p->lock);
		if (rc < 0) {
			if (rc != -ECANCELED)
				pool_fail_locked(p, &e, rc);
			break;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Queues the walker's batch (its descriptors go with it, even on failure). */
static int pool_submit(struct pool *p)
{
	if (p->cur.n == 0)
		return 0;
	pthread_mutex_lock(&p->lock);
	while (!p->failed && p->n == p->cap)
		pthread_cond_wait(&p->room, &p->lock);
	if (p->failed) {
		pthread_mutex_unlock(&p->lock);
		job_close(&p->cur, 0);
		return -ECANCELED; /* the worker's error is the one reported */
	}
	p->ring[(p->head + p->n) % p->cap] = p->cur;
	p->n++;
	pthread_cond_signal(&p->more);
	pthread_mutex_unlock(&p->lock);
	p->cur.n = 0;
	p->cur.bytes = 0;
	return 0;
}

/* Adds an open file to the walker's batch (takes fd, even on failure). */
static int pool_add(struct pool *p, int fd, size_t entry, const char *path, uint64_t size)
{
	p->cur.f[p->cur.n++] = (struct job_file){ .fd = fd, .entry = entry, .path = path };
	p->cur.bytes += size;
	if (p->cur.n < JOB_FILES && p->cur.bytes < JOB_BYTES)
		return 0;
	return pool_submit(p);
}

/* Waits for the workers, files their results in the walk's entries and
 * frees the pool. rc: the walk's result (its error in err); returns the
 * snapshot's, with the first error in err. */
static int pool_finish(struct pool *p, int rc, struct al_error *err)
{
	if (!p)
		return rc;
	if (rc == 0)
		rc = pool_submit(p);
	job_close(&p->cur, 0);
	pthread_mutex_lock(&p->lock);
	bool walker_first = rc < 0 && !p->failed;
	if (walker_first)
		__atomic_store_n(&p->failed, true, __ATOMIC_RELAXED);
	p->done = true;
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->lock);
	struct walk *w = p->w;
	for (size_t i = 0; i < p->n_workers; i++) {
		struct worker *wk = &p->workers[i];
		if (wk->started)
			pthread_join(wk->tid, NULL);
		w->res->chunks_new += wk->sink.chunks_new;
		w->res->bytes_new += wk->sink.bytes_new;
		w->res->bytes += wk->sink.bytes;
		for (size_t k = 0; k < wk->n_res; k++) {
			const struct result *rs = &wk->res[k];
			struct st_entry *e = &w->entries[rs->entry];
			e->chunks = rs->chunks;
			e->n_chunks = rs->n_chunks;
			e->size = rs->size;
		}
		free(wk->res);
		st_cas_writer_free(wk->sink.cw);
		free(wk->sink.buf);
	}
	/* Batches nobody took (after a failure). */
	for (; p->n > 0; p->n--, p->head = (p->head + 1) % p->cap)
		job_close(&p->ring[p->head], 0);
	if (p->failed && !walker_first)
		rc = al_error_set(err, p->err.code, "%s", al_error_message(&p->err));
	pthread_cond_destroy(&p->more);
	pthread_cond_destroy(&p->room);
	pthread_mutex_destroy(&p->lock);
	free(p->workers);
	free(p->ring);
	free(p);
	return rc;
}

static int pool_start(struct walk *w, unsigned n, struct pool **ret, struct al_error *err)
{
	struct pool *p = calloc(1, sizeof(*p));
	if (!p)
		return al_error_set(err, -ENOMEM, "out of memory");
	p->w = w;
	p->cap = 2 * (size_t)n;
	p->ring = calloc(p->cap, sizeof(*p->ring));
	p->workers = calloc(n, sizeof(*p->workers));
	if (!p->ring || !p->workers) {
		free(p->ring);
		free(p->workers);
		free(p);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->more, NULL);
	pthread_cond_init(&p->room, NULL);
	p->n_workers = n;
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct worker *wk = &p->workers[i];
		wk->p = p;
		wk->sink.stop = &p->failed;
		wk->sink.buf = malloc(2 * ST_CDC_MAX);
		if (!wk->sink.buf)
			rc = al_error_set(err, -ENOMEM, "out of memory");
		if (rc == 0)
			rc = st_cas_writer_new(w->r->cas, &wk->sink.cw, err);
	}
	/* Signals are the main thread's business. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct worker *wk = &p->workers[i];
		int e = pthread_create(&wk->tid, NULL, worker_main, wk);
		if (e != 0)
			rc = al_error_set_errno(err, -e, "cannot start a snapshot thread");
		else
			wk->started = true;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc < 0)
		return pool_finish(p, rc, err);
	*ret = p;
	return 0;
}

/* Reads the file, or with workers opens it and hands *ret_fd back (else
 * -1) to be queued once its entry is in place. */
static int snap_file(struct walk *w, int dirfd, const char *name, const char *path,
		     const struct stat *st, struct st_entry *e, int *ret_fd, struct al_error *err)
{
	e->type = ST_FILE;
	const struct st_entry *old = manifest_find(w->prev, path);
	const struct stat_rec *rec = w->sc_valid ? statcache_find(&w->sc, path) : NULL;
	int64_t mt = ts_ns(st->st_mtim), ct = ts_ns(st->st_ctim);
	/* Unread when size, mtime, inode and ctime match what the previous
	 * snapshot saw, and the file did not change around that snapshot's
	 * start (a change within the same timestamp tick would not show). */
	if (old && rec && old->type == ST_FILE && old->size == (uint64_t)st->st_size &&
	    old->mtime_ns == mt && rec->ino == st->st_ino && rec->ctime_ns == ct &&
	    rec->mtime_ns == mt && rec->size == (uint64_t)st->st_size &&
	    mt < w->sc.start_ns - RACY_NS && ct < w->sc.start_ns - RACY_NS) {
		bool all = true;
		for (size_t i = 0; i < old->n_chunks && all; i++)
			all = w->pool ? st_cas_has_shared(w->r->cas, &old->chunks[i])
				      : st_cas_has(w->r->cas, &old->chunks[i]);
		if (all) {
			e->size = old->size;
			e->n_chunks = old->n_chunks;
			if (old->n_chunks) {
				e->chunks = malloc(old->n_chunks * sizeof(*e->chunks));
				if (!e->chunks)
					return al_error_set(err, -ENOMEM, "out of memory");
				memcpy(e->chunks, old->chunks, old->n_chunks * sizeof(*e->chunks));
			}
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
	w->res->files_read++;
	if (w->pool) {
		*ret_fd = TAKE_FD(fd);
		return 0;
	}
	return read_file(&w->sink, fd, path, e, err);
}

static int cache_line(struct walk *w, const struct stat *st, const char *path)
{
	if (buf_appendf(&w->cache, "%" PRIu64 " %" PRId64 " %" PRId64 " %" PRIu64 " ",
			(uint64_t)st->st_ino, ts_ns(st->st_ctim), ts_ns(st->st_mtim),
			(uint64_t)st->st_size) < 0 ||
	    hex_encode(path, &w->cache) < 0 || buf_append_char(&w->cache, '\n') < 0)
		return -ENOMEM;
	return 0;
}

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
	if (name && (size_t)snprintf(proc, sizeof(proc), "/proc/self/fd/%d/%s", fd, name) >=
			    sizeof(proc))
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

/* The kind of an upper-layer entry: whiteout (1), plain (0), or an
 * overlayfs feature a snapshot cannot read (-errno with err set). */
static int layer_kind(bool user, int dirfd, const char *name, const char *path,
		      const struct stat *st, struct al_error *err)
{
	char v[256];
	if (S_ISCHR(st->st_mode) && st->st_rdev == 0)
		return 1;
	if (!S_ISREG(st->st_mode))
		return 0;
	ssize_t n = ovl_xattr(user, dirfd, name, "metacopy", v, sizeof(v));
	if (n > 0)
		return al_error_set(err, -EOPNOTSUPP,
				    "%s: a metadata-only copy in the upper layer (mount the overlay "
				    "with metacopy=off)", path);
	if (n == 0)
		n = ovl_xattr(user, dirfd, name, "whiteout", v, sizeof(v));
	if (n < 0)
		return al_error_set_errno(err, (int)n, "cannot read the attributes of %s", path);
	return n > 0;
}

/* Whether an upper-layer directory hides what the lower one has (1), not
 * (0), or uses a feature a snapshot cannot read (-errno with err set). */
static int layer_opaque(bool user, int fd, const char *path, struct al_error *err)
{
	char v[256];
	ssize_t n = ovl_xattr(user, fd, NULL, "redirect", v, sizeof(v));
	if (n > 0)
		return al_error_set(err, -EOPNOTSUPP,
				    "%s: a renamed directory in the upper layer (mount the overlay "
				    "with redirect_dir=off)", path);
	if (n == 0)
		n = ovl_xattr(user, fd, NULL, "opaque", v, sizeof(v));
	if (n < 0)
		return al_error_set_errno(err, (int)n, "cannot read the attributes of %s", path);
	/* "y": opaque; "x" (Linux 6.7+): holds whiteouts made of attributes. */
	return n > 0 && n < (ssize_t)sizeof(v) && strcmp(v, "y") == 0;
}

/* An "x" entry: path, and what the lower layer has below it, are gone. */
static int add_whiteout(struct walk *w, const char *path, struct al_error *err)
{
	struct st_entry e = { .type = ST_WHITEOUT, .path = strdup(path) };
	if (!e.path || add_entry(w, &e) < 0) {
		free(e.path);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

static int walk_dir(struct walk *w, int dirfd, const char *rel, unsigned depth,
		    struct al_error *err)
{
	if (depth > ST_MANIFEST_MAX_DEPTH_DEFAULT)
		return al_error_set(err, -ELOOP, "%s: deeper than %d directories", rel,
				    ST_MANIFEST_MAX_DEPTH_DEFAULT);
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
		int n = rel[0] ? snprintf(path, sizeof(path), "%s/%s", rel, name)
			       : snprintf(path, sizeof(path), "%s", name);
		if (n < 0 || (size_t)n >= sizeof(path)) {
			rc = al_error_set(err, -ENAMETOOLONG, "a path below %s is longer than %d bytes",
					  rel[0] ? rel : "the workspace", ST_PATH_MAX);
			break;
		}
		struct stat st;
		_cleanup_close_ int fd = -1; /* a file for the workers */
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = al_error_set_errno(err, -errno, "cannot stat %s", path);
			break;
		}
		struct st_entry e = { .mtime_ns = ts_ns(st.st_mtim), .mode = st.st_mode & 0777 };
		if (w->layer) {
			int k = layer_kind(w->o->userxattr, dirfd, name, path, &st, err);
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
		if (S_ISDIR(st.st_mode)) {
			e.type = ST_DIR;
		} else if (S_ISREG(st.st_mode)) {
			rc = snap_file(w, dirfd, name, path, &st, &e, &fd, err);
			if (rc == 0)
				rc = cache_line(w, &st, path) < 0 ? al_error_set(err, -ENOMEM, "out of memory") : 0;
		} else if (S_ISLNK(st.st_mode)) {
			e.type = ST_SYMLINK;
			e.mode = 0777;
			char target[ST_PATH_MAX + 1];
			ssize_t tl = readlinkat(dirfd, name, target, sizeof(target));
			if (tl < 0)
				rc = al_error_set_errno(err, -errno, "cannot read the link %s", path);
			else if ((size_t)tl >= sizeof(target) || tl == 0)
				rc = al_error_set(err, -ENAMETOOLONG, "the link %s is too long", path);
			else if (!(e.target = strndup(target, (size_t)tl)))
				rc = al_error_set(err, -ENOMEM, "out of memory");
		} else {
			w->res->skipped++;
			if (w->o->report)
				w->o->report(path, S_ISFIFO(st.st_mode)   ? "fifo skipped"
						   : S_ISSOCK(st.st_mode) ? "socket skipped"
									  : "device skipped",
					     w->o->ud);
			/* In an upper layer it still hides what the lower one has
			 * there: the merged view shows no such file either. */
			if (w->layer && (rc = add_whiteout(w, path, err)) < 0)
				break;
			continue;
		}
		if (rc < 0) {
			free(e.target);
			free(e.chunks);
			break;
		}
		e.path = strdup(path);
		if (!e.path || add_entry(w, &e) < 0) {
			free(e.path);
			free(e.target);
			free(e.chunks);
			rc = al_error_set(err, -ENOMEM, "out of memory");
			break;
		}
		if (fd >= 0) {
			rc = pool_add(w->pool, TAKE_FD(fd), w->n - 1, e.path, (uint64_t)st.st_size);
			if (rc < 0)
				break;
		}
		if (e.type == ST_DIR) {
			w->res->dirs++;
			int sub = openat(dirfd, name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
			if (sub < 0) {
				rc = al_error_set_errno(err, -errno, "cannot open %s", path);
				break;
			}
			if (w->layer) {
				rc = layer_opaque(w->o->userxattr, sub, path, err);
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

static int entry_cmp(const void *a, const void *b)
{
	return st_path_cmp(((const struct st_entry *)a)->path, ((const struct st_entry *)b)->path);
}

static int put_step(struct st_repo *r, const char *key, const void *data, size_t len,
		    struct al_error *err)
{
	fault_point();
	return st_obj_put(r->os, key, data, len, err);
}

/*
 * Stores entries (sorted here) as the session's next checkpoint: chunks
 * first, then what refers to them. cache: the new stat cache, or NULL to
 * drop the session's (it would describe another tree).
 */
/* What a layered snapshot's manifest names besides its tree. */
struct layer_head {
	const char *base; /* NULL: a full manifest */
	uint64_t base_entries;
	const char *lower;
};

static int commit(struct st_repo *r, const char *session, const char *parent,
		  const struct layer_head *lh, struct st_entry *entries, size_t n, struct timespec now,
		  const struct buf *cache, char out_id[ST_ID_HEX + 1], struct al_error *err)
{
	if (n)
		qsort(entries, n, sizeof(*entries), entry_cmp);
	struct st_manifest m = { .created = (int64_t)now.tv_sec, .entries = entries,
				 .n_entries = n };
	if (lh && lh->base) {
		snprintf(m.base, sizeof(m.base), "%s", lh->base);
		m.base_entries = lh->base_entries;
	}
	if (lh)
		snprintf(m.lower, sizeof(m.lower), "%s", lh->lower);
	snprintf(m.tenant, sizeof(m.tenant), "%s", r->tenant);
	snprintf(m.session, sizeof(m.session), "%s", session);
	snprintf(m.parent, sizeof(m.parent), "%s", parent);
	char *text = NULL;
	size_t len = 0;
	int rc = st_manifest_write(&m, r->key, r->keylen, &text, &len, err);
	if (rc == 0) {
		fault_point();
		rc = st_cas_flush(r->cas, err);
	}
	char key[ST_KEY_MAX + 1];
	if (rc == 0) {
		st_manifest_id(text, len, out_id);
		key_of(key, sizeof(key), r, "manifests/%s", out_id);
		rc = put_step(r, key, text, len, err);
	}
	if (rc == 0) {
		key_of(key, sizeof(key), r, "sessions/%s/log/%020" PRId64 "-%s", session,
		       ts_ns(now), out_id);
		rc = put_step(r, key, "", 0, err);
	}
	if (rc == 0 && !cache) {
		key_of(key, sizeof(key), r, "sessions/%s/statcache", session);
		fault_point();
		rc = st_obj_del(r->os, key, err);
	}
	if (rc == 0) {
		char line[ST_ID_HEX + 2];
		snprintf(line, sizeof(line), "%s\n", out_id);
		key_of(key, sizeof(key), r, "sessions/%s/latest", session);
		rc = put_step(r, key, line, ST_ID_HEX + 1, err);
	}
	if (rc == 0 && cache) {
		key_of(key, sizeof(key), r, "sessions/%s/statcache", session);
		rc = put_step(r, key, cache->data ? cache->data : "", cache->len, err);
	}
	free(text);
	return rc;
}

/* A delta this large, and larger than a quarter of its base, is stored
 * as a full manifest instead (docs/checkpoints.md). */
#define FLATTEN_MIN 4096

/*
 * Commits the delta *entries (sorted) over lh->base, or, when it has grown
 * large against the base or its tree could pass the entry limit, the
 * whole tree as a full manifest (applying it checks that limit: nothing
 * is committed that could not be loaded). *entries and *n may be replaced.
 */
static int commit_layer(struct st_repo *r, const char *session, const char *parent,
			const struct layer_head *lh, struct st_entry **entries, size_t *n,
			struct timespec now, const struct buf *cache, char out_id[ST_ID_HEX + 1],
			struct al_error *err)
{
	uint64_t base_n = lh->base_entries;
	bool big = *n > FLATTEN_MIN && *n > base_n / 4;
	if (!big && base_n + *n <= ST_MANIFEST_MAX_ENTRIES_DEFAULT)
		return commit(r, session, parent, lh, *entries, *n, now, cache, out_id, err);

	struct st_manifest *b = NULL;
	int rc = manifest_load_raw(r, lh->base, NULL, &b, err);
	if (rc < 0)
		return rc;
	struct st_manifest *d = calloc(1, sizeof(*d)), *t = NULL;
	if (!d) {
		st_manifest_free(b);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	snprintf(d->tenant, sizeof(d->tenant), "%s", r->tenant);
	snprintf(d->base, sizeof(d->base), "%s", lh->base);
	d->base_entries = base_n;
	d->entries = *entries;
	d->n_entries = *n;
	*entries = NULL;
	*n = 0;
	rc = st_manifest_apply(b, d, NULL, &t, err);
	if (rc < 0)
		return rc;
	*entries = t->entries;
	*n = t->n_entries;
	t->entries = NULL;
	t->n_entries = 0;
	st_manifest_free(t);
	/* (A small delta near the limit is stored whole too: rare, and right.) */
	const struct layer_head full = { .lower = lh->lower };
	return commit(r, session, parent, &full, *entries, *n, now, cache, out_id, err);
}

/*
 * One delta from two: lops, the changes of the lower layer's checkpoint
 * over its base (none when that checkpoint is the base), then up, what
 * the upper layer holds (sorted). Moves entries out of both (what stays
 * behind is zeroed or freed); *ret is the delta over the same base.
 */
static int compose(struct st_entry *lops, size_t nl, struct st_entry *up, size_t nu,
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

int st_snapshot(struct st_repo *r, const struct st_snapshot_opts *o,
		struct st_snapshot_result *ret, struct al_error *err)
{
	memset(ret, 0, sizeof(*ret));
	fault_init();
	if (!session_valid(o->session))
		return al_error_set(err, -EINVAL, "session '%s': expected 1 to %d of [a-z0-9._-]",
				    o->session, ST_SESSION_MAX);
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
	_cleanup_close_ int root =
		open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (root < 0)
		return al_error_set_errno(err, -errno, "%s %s", layer ? "upper layer" : "workspace",
					  dir);
	struct stat rst;
	if (fstat(root, &rst) < 0)
		return al_error_set_errno(err, -errno, "%s", dir);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);

	struct walk w = { .r = r, .o = o, .res = ret, .layer = layer };
	buf_init(&w.cache, STATCACHE_MAX);
	struct st_manifest *prev = NULL, *lower = NULL;
	char parent[ST_ID_HEX + 1];
	int rc = st_session_latest(r, o->session, parent, err);
	/* The previous checkpoint only matters when the stat cache describes
	 * this tree (the same root): files are then taken from it unread. A
	 * layered snapshot reads it as stored: the files it reuses are among
	 * its changes (or it is the base). */
	statcache_load(r, o->session, &rst, &w.sc);
	w.sc_valid = w.sc.n && w.sc.dev == (uint64_t)rst.st_dev &&
		     w.sc.root_ino == (uint64_t)rst.st_ino;
	if (rc == 0 && parent[0] && w.sc_valid)
		rc = layer ? manifest_load_raw(r, parent, NULL, &prev, err) :
			     st_manifest_load(r, parent, NULL, &prev, err);
	w.sc_valid = w.sc_valid && prev;
	if (rc == 0 && layer) {
		/* A full lower checkpoint is only named (as the base): its
		 * entries are not needed. */
		static const struct st_manifest_limits head = { .header_only = true };
		rc = manifest_load_raw(r, o->lower, &head, &lower, err);
		if (rc == 0 && lower->base[0]) {
			st_manifest_free(lower);
			lower = NULL;
			rc = manifest_load_raw(r, o->lower, NULL, &lower, err);
		}
	}
	if (rc < 0) {
		st_manifest_free(prev);
		statcache_free(&w.sc);
		buf_free(&w.cache);
		return rc;
	}
	w.prev = prev;
	if (threads > 1) {
		rc = pool_start(&w, threads, &w.pool, err);
	} else {
		w.sink.cas = r->cas;
		w.sink.buf = malloc(2 * ST_CDC_MAX);
		if (!w.sink.buf)
			rc = al_error_set(err, -ENOMEM, "out of memory");
	}
	if (rc == 0)
		rc = buf_appendf(&w.cache, "airlock-statcache 1 %" PRIu64 " %" PRIu64 " %" PRId64 "\n",
				 (uint64_t)rst.st_dev, (uint64_t)rst.st_ino, ts_ns(now)) < 0
			     ? al_error_set(err, -ENOMEM, "out of memory")
			     : 0;
	if (rc == 0)
		rc = walk_dir(&w, root, "", 1, err);
	/* Every thread is gone before anything is committed. */
	rc = pool_finish(TAKE_PTR(w.pool), rc, err);
	ret->chunks_new += w.sink.chunks_new;
	ret->bytes_new += w.sink.bytes_new; /* its files' sizes are counted by the walk */
	free(w.sink.buf);
	statcache_free(&w.sc);

	if (rc == 0 && layer) {
		/* The lower layer is checkpoint o->lower: a full one is the
		 * base; a delta's changes come first, over its own base. */
		if (w.n)
			qsort(w.entries, w.n, sizeof(*w.entries), entry_cmp);
		bool full = !lower->base[0];
		struct st_entry *d = NULL;
		size_t nd = 0;
		rc = compose(full ? NULL : lower->entries, full ? 0 : lower->n_entries, w.entries, w.n,
			     &d, &nd);
		if (rc < 0) {
			rc = al_error_set(err, rc, "out of memory");
		} else {
			st_entries_free(w.entries, w.n);
			w.entries = d;
			w.n = nd;
			const struct layer_head lh = {
				.base = full ? o->lower : lower->base,
				.base_entries = full ? lower->declared : lower->base_entries,
				.lower = o->lower,
			};
			rc = commit_layer(r, o->session, parent, &lh, &w.entries, &w.n, now,
					  &w.cache, ret->id, err);
		}
	} else if (rc == 0) {
		rc = commit(r, o->session, parent, NULL, w.entries, w.n, now, &w.cache, ret->id, err);
	}
	st_entries_free(w.entries, w.n);
	st_manifest_free(prev);
	st_manifest_free(lower);
	buf_free(&w.cache);
	return rc;
}

int st_commit(struct st_repo *r, const char *session, struct st_entry *entries, size_t n,
	      char out_id[ST_ID_HEX + 1], struct al_error *err)
{
	fault_init();
	if (!session_valid(session))
		return al_error_set(err, -EINVAL, "session '%s': expected 1 to %d of [a-z0-9._-]",
				    session, ST_SESSION_MAX);
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
	return commit(r, session, parent, NULL, entries, n, now, NULL, out_id, err);
}

/* ---- restore ---- */

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
		return fcntl(root, F_DUPFD_CLOEXEC, 3);
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
		int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
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

/* The directory of the last file a restore worker wrote: the next file is
 * usually in it too (entries are sorted). */
struct parent_cache {
	int fd;
	size_t len;
	char dir[ST_PATH_MAX + 1];
};

static int cached_parent(struct parent_cache *pc, int root, const char *path,
			 const char **ret_name)
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

static int restore_file(struct st_cas_reader *rd, int root, struct parent_cache *pc,
			const struct st_entry *e, struct al_error *err)
{
	const char *name;
	int pfd = cached_parent(pc, root, e->path, &name);
	if (pfd < 0)
		return al_error_set_errno(err, pfd, "cannot open the directory of %s", e->path);
	_cleanup_close_ int fd =
		openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "cannot create %s", e->path);
	uint64_t total = 0;
	for (size_t i = 0; i < e->n_chunks; i++) {
		const void *data = NULL;
		size_t len = 0;
		int rc = st_cas_read(rd, &e->chunks[i], &data, &len, err);
		if (rc < 0)
			return rc;
		total += len;
		if (total > e->size)
			return al_error_set(err, -EBADMSG, "%s: the chunks are longer than its size",
					    e->path);
		rc = write_full(fd, data, len);
		if (rc < 0)
			return al_error_set_errno(err, rc, "cannot write %s", e->path);
	}
	if (total != e->size)
		return al_error_set(err, -EBADMSG, "%s: the chunks are shorter than its size",
				    e->path);
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT },
				  { .tv_sec = e->mtime_ns / 1000000000ll,
				    .tv_nsec = e->mtime_ns % 1000000000ll } };
	if (ts[1].tv_nsec < 0) {
		ts[1].tv_sec--;
		ts[1].tv_nsec += 1000000000l;
	}
	if (fchmod(fd, e->mode) < 0 || futimens(fd, ts) < 0)
		return al_error_set_errno(err, -errno, "cannot set the mode or time of %s", e->path);
	return 0;
}

/* The files of a restore, shared by its workers. */
struct restore_files {
	struct st_repo *r;
	int root;
	const struct st_manifest *m;
	pthread_mutex_t lock;
	size_t next;	      /* the next entry to look at */
	int rc;		      /* the first failure, or 0 */
	struct al_error err;  /* and why */
};

#define RESTORE_BATCH 8 /* files a worker takes at a time */

static void *restore_worker(void *arg)
{
	struct restore_files *j = arg;
	struct al_error e = { 0 };
	struct st_cas_reader *rd = NULL;
	struct parent_cache pc = { .fd = -1 };
	int rc = st_cas_reader_new(j->r->cas, &rd, &e);
	while (rc == 0) {
		pthread_mutex_lock(&j->lock);
		size_t from = j->next, to = j->rc ? from : from + RESTORE_BATCH;
		if (to > j->m->n_entries)
			to = j->m->n_entries;
		j->next = to;
		pthread_mutex_unlock(&j->lock);
		if (from >= to)
			break;
		for (size_t i = from; rc == 0 && i < to; i++)
			if (j->m->entries[i].type == ST_FILE)
				rc = restore_file(rd, j->root, &pc, &j->m->entries[i], &e);
	}
	if (rc < 0) {
		pthread_mutex_lock(&j->lock);
		if (j->rc == 0) {
			j->rc = rc;
			j->err = e;
		}
		pthread_mutex_unlock(&j->lock);
	}
	if (pc.fd >= 0)
		close(pc.fd);
	st_cas_reader_free(rd);
	return NULL;
}

/* Writes every file of m below root on up to threads threads. */
static int restore_all_files(struct st_repo *r, int root, const struct st_manifest *m,
			     unsigned threads, struct al_error *err)
{
	struct restore_files j = { .r = r, .root = root, .m = m };
	pthread_mutex_init(&j.lock, NULL);
	pthread_t tid[ST_THREADS_MAX];
	unsigned started = 0;
	for (; started + 1 < threads; started++)
		if (pthread_create(&tid[started], NULL, restore_worker, &j) != 0)
			break; /* fewer workers: still correct */
	restore_worker(&j);
	for (unsigned k = 0; k < started; k++)
		pthread_join(tid[k], NULL);
	pthread_mutex_destroy(&j.lock);
	if (j.rc < 0)
		return al_error_set(err, j.rc, "%s", al_error_message(&j.err));
	return 0;
}

static int restore_entries(struct st_repo *r, int root, const struct st_manifest *m,
			   unsigned threads, struct al_error *err)
{
	int rc = 0;
	/* Directories and symlinks first, in order (a parent before what is
	 * in it), then the files, on every core. */
	for (size_t i = 0; i < m->n_entries; i++) {
		const struct st_entry *e = &m->entries[i];
		if (e->type == ST_FILE)
			continue;
		const char *name;
		_cleanup_close_ int pfd = parent_fd(root, e->path, &name);
		if (pfd < 0)
			return al_error_set_errno(err, pfd, "cannot open the directory of %s", e->path);
		if (e->type == ST_DIR) {
			/* Writable until everything below is in; the mode comes last. */
			if (mkdirat(pfd, name, 0700) < 0)
				rc = al_error_set_errno(err, -errno, "cannot create %s", e->path);
		} else if (symlinkat(e->target, pfd, name) < 0) {
			rc = al_error_set_errno(err, -errno, "cannot create %s", e->path);
		} else {
			struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT },
						  { .tv_sec = e->mtime_ns / 1000000000ll,
						    .tv_nsec = e->mtime_ns % 1000000000ll } };
			if (ts[1].tv_nsec >= 0)
				(void)utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW);
		}
		if (rc < 0)
			return rc;
	}
	rc = restore_all_files(r, root, m, threads, err);
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
		struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT },
					  { .tv_sec = e->mtime_ns / 1000000000ll,
					    .tv_nsec = e->mtime_ns % 1000000000ll } };
		if (fchmod(fd, e->mode) < 0 || (ts[1].tv_nsec >= 0 && futimens(fd, ts) < 0))
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
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rc = al_error_set_errno(err, -errno, "cannot create %s", dir);
		st_manifest_free(m);
		return rc;
	}
	_cleanup_close_ int root = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0) {
		rc = al_error_set_errno(err, -errno, "%s", dir);
		st_manifest_free(m);
		return rc;
	}
	int empty = empty_dir(root);
	if (empty <= 0) {
		st_manifest_free(m);
		return empty < 0 ? al_error_set_errno(err, empty, "%s", dir)
				 : al_error_set(err, -ENOTEMPTY, "%s is not empty", dir);
	}
	rc = restore_entries(r, root, m, threads, err);
	st_manifest_free(m);
	if (rc < 0)
		remove_below(root); /* never a partial success */
	return rc;
}

/* ---- diff ---- */

static bool same_chunks(const struct st_entry *a, const struct st_entry *b)
{
	return a->n_chunks == b->n_chunks &&
	       (a->n_chunks == 0 || memcmp(a->chunks, b->chunks, a->n_chunks * sizeof(*a->chunks)) == 0);
}

static int load_file(struct st_repo *r, const struct st_entry *e, struct buf *b,
		     struct al_error *err)
{
	for (size_t i = 0; i < e->n_chunks; i++) {
		void *data = NULL;
		size_t len = 0;
		int rc = st_cas_get(r->cas, &e->chunks[i], &data, &len, err);
		if (rc < 0)
			return rc;
		rc = buf_append(b, data, len);
		free(data);
		if (rc < 0)
			return 1; /* over the diff limit: not diffed */
	}
	return 0;
}

static int diff_text(struct st_repo *r, const struct st_entry *a, const struct st_entry *b,
		     struct buf *out, struct al_error *err)
{
	if (a->size > ST_DIFF_MAX_INPUT || b->size > ST_DIFF_MAX_INPUT)
		return buf_appendf(out, "Files a/%s and b/%s differ (too large to diff)\n", a->path,
				   b->path) < 0 ? -ENOMEM : 0;
	struct buf ba = BUF_INIT(ST_DIFF_MAX_INPUT), bb = BUF_INIT(ST_DIFF_MAX_INPUT);
	int rc = load_file(r, a, &ba, err);
	if (rc == 0)
		rc = load_file(r, b, &bb, err);
	if (rc == 0) {
		int d = st_textdiff(ba.data ? ba.data : "", ba.len, bb.data ? bb.data : "", bb.len,
				    b->path, out);
		rc = d < 0 ? al_error_set(err, d, "cannot diff %s", b->path) : 0;
	}
	buf_free(&ba);
	buf_free(&bb);
	return rc < 0 ? rc : 0;
}

int st_diff(struct st_repo *r, const char *a, const char *b, bool with_text, struct buf *out,
	    struct al_error *err)
{
	struct st_manifest *ma = NULL, *mb = NULL;
	_cleanup_close_ int lock = -1;
	int rc = with_text ? st_repo_lock_writer(r, &lock, err) : 0;
	if (rc < 0)
		return rc;
	rc = st_manifest_load(r, a, NULL, &ma, err);
	if (rc == 0)
		rc = st_manifest_load(r, b, NULL, &mb, err);
	size_t i = 0, j = 0;
	while (rc == 0 && (i < ma->n_entries || j < mb->n_entries)) {
		const struct st_entry *ea = i < ma->n_entries ? &ma->entries[i] : NULL;
		const struct st_entry *eb = j < mb->n_entries ? &mb->entries[j] : NULL;
		int c = !ea ? 1 : !eb ? -1 : st_path_cmp(ea->path, eb->path);
		if (c < 0) {
			rc = buf_appendf(out, "D %s\n", ea->path) < 0 ? -ENOMEM : 0;
			i++;
		} else if (c > 0) {
			rc = buf_appendf(out, "A %s\n", eb->path) < 0 ? -ENOMEM : 0;
			j++;
		} else {
			bool changed = ea->type != eb->type || ea->mode != eb->mode ||
				       (ea->type == ST_FILE && (ea->size != eb->size || !same_chunks(ea, eb))) ||
				       (ea->type == ST_SYMLINK && strcmp(ea->target, eb->target) != 0);
			if (changed) {
				rc = buf_appendf(out, "M %s\n", eb->path) < 0 ? -ENOMEM : 0;
				if (rc == 0 && with_text && ea->type == ST_FILE && eb->type == ST_FILE &&
				    !same_chunks(ea, eb))
					rc = diff_text(r, ea, eb, out, err);
			}
			i++;
			j++;
		}
		if (rc == -ENOMEM)
			rc = al_error_set(err, rc, "the diff is too large");
	}
	st_manifest_free(ma);
	st_manifest_free(mb);
	return rc;
}

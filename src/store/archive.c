/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checkpoints as tar archives: export streams a checkpoint's chunks into a
 * pax tar; import reads a tar straight into the chunk store and a manifest,
 * never touching a filesystem, under the rules of a restore.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/fdutil.h"
#include "store/archive.h"
#include "store/chunker.h"

#define QUOTE_MAX 80 /* characters of a name an error message quotes */
#define QUOTE_BUF (QUOTE_MAX + 8)
#define READ_BLOCK (64u * 1024)
#define NS 1000000000ll

/* A one-line, printable quote of a name for an error message: control
 * bytes, backslashes and non-ASCII as \xNN, cut short with "...". */
static const char *quote(const char *s, char out[QUOTE_BUF])
{
	size_t o = 0;
	for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
		bool plain = *c >= 0x20 && *c < 0x7f && *c != '\\';
		if (o + (plain ? 1 : 4) > QUOTE_MAX) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		if (plain) {
			out[o++] = (char)*c;
		} else {
			snprintf(out + o, 5, "\\x%02x", *c);
			o += 4;
		}
	}
	out[o] = '\0';
	return out;
}

/* ---- export ---- */

static void split_ns(int64_t ns, time_t *sec, long *nsec)
{
	int64_t s = ns / NS, n = ns % NS;
	if (n < 0) {
		s--;
		n += NS;
	}
	*sec = (time_t)s;
	*nsec = (long)n;
}

/* Zeros to hand libarchive for a hole: it skips a sparse entry's holes
 * without reading them, but wants their bytes counted through
 * archive_write_data. A read-only mapping: nothing is allocated. */
#define ZEROS_LEN (64u << 20)

struct exporter {
	struct st_repo *r;
	struct archive *a;
	const void *zeros; /* ZEROS_LEN bytes, mapped when a hole comes */
};

static int write_out(struct exporter *x, const void *data, size_t len, struct al_error *err)
{
	while (len > 0) {
		la_ssize_t w = archive_write_data(x->a, data, len);
		if (w <= 0 || (size_t)w > len)
			return al_error_set(
				err, -EIO, "cannot write the archive: %s",
				archive_error_string(x->a) ? archive_error_string(x->a) : "?");
		data = (const char *)data + w;
		len -= (size_t)w;
	}
	return 0;
}

static int write_hole(struct exporter *x, uint64_t len, struct al_error *err)
{
	if (!x->zeros) {
		void *z = mmap(NULL, ZEROS_LEN, PROT_READ,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (z == MAP_FAILED)
			return al_error_set_errno(err, -errno, "cannot export a hole");
		x->zeros = z;
	}
	while (len > 0) {
		size_t k = len < ZEROS_LEN ? (size_t)len : ZEROS_LEN;
		int rc = write_out(x, x->zeros, k, err);
		if (rc < 0)
			return rc;
		len -= k;
	}
	return 0;
}

/*
 * A file with holes goes out as a sparse entry (GNU sparse 1.0 in pax, what
 * GNU tar and libarchive read back as holes): its runs of data, from the
 * chunks' lengths in the index, are its sparse map. -EBADMSG when the
 * pieces do not add up to the size.
 */
static int sparse_map(struct exporter *x, const struct st_entry *e, struct archive_entry *ae,
		      struct al_error *err)
{
	char q[QUOTE_BUF];
	struct st_cas *cas = st_repo_cas(x->r);
	uint64_t pos = 0, run = 0, run_at = 0;
	size_t h = 0;
	for (size_t i = 0; i <= e->n_chunks; i++) {
		if (h < e->n_holes && e->holes[h].at == i) {
			if (run)
				archive_entry_sparse_add_entry(ae, (la_int64_t)run_at,
							       (la_int64_t)run);
			run = 0;
			if (e->holes[h].len > e->size - pos)
				break;
			pos += e->holes[h++].len;
		}
		if (i == e->n_chunks)
			break;
		uint32_t len = st_cas_chunk_len(cas, &e->chunks[i]);
		if (len == 0) {
			char hex[ST_ID_HEX + 1];
			st_id_hex(&e->chunks[i], hex);
			return al_error_set(err, -ENOENT, "%s: chunk %s is not in the store",
					    quote(e->path, q), hex);
		}
		if (len > e->size - pos)
			break;
		if (!run)
			run_at = pos;
		run += len;
		pos += len;
	}
	if (pos != e->size || h != e->n_holes)
		return al_error_set(err, -EBADMSG, "%s: its pieces do not add up to its size",
				    quote(e->path, q));
	if (run)
		archive_entry_sparse_add_entry(ae, (la_int64_t)run_at, (la_int64_t)run);
	else /* ends in a hole: a run of nothing marks the end */
		archive_entry_sparse_add_entry(ae, (la_int64_t)e->size, 0);
	return 0;
}

static int export_file(struct exporter *x, const struct st_entry *e, struct al_error *err)
{
	char q[QUOTE_BUF];
	struct st_cas *cas = st_repo_cas(x->r);
	uint64_t total = 0;
	size_t h = 0;
	for (size_t i = 0; i <= e->n_chunks; i++) {
		if (h < e->n_holes && e->holes[h].at == i) {
			uint64_t len = e->holes[h++].len;
			if (len > e->size - total)
				return al_error_set(err, -EBADMSG,
						    "%s: its holes are longer than its size",
						    quote(e->path, q));
			int rc = write_hole(x, len, err);
			if (rc < 0)
				return rc;
			total += len;
		}
		if (i == e->n_chunks)
			break;
		void *data = NULL;
		size_t len = 0;
		int rc = st_cas_get(cas, &e->chunks[i], &data, &len, err);
		if (rc < 0)
			return al_error_set(err, rc, "%s: a chunk cannot be read",
					    quote(e->path, q));
		if (len > e->size - total) {
			free(data);
			return al_error_set(err, -EBADMSG,
					    "%s: the chunks are longer than its size",
					    quote(e->path, q));
		}
		total += len;
		rc = write_out(x, data, len, err);
		free(data);
		if (rc < 0)
			return rc;
	}
	if (total != e->size)
		return al_error_set(err, -EBADMSG, "%s: the chunks are shorter than its size",
				    quote(e->path, q));
	return 0;
}

static int export_entries(struct exporter *x, const struct st_manifest *m, struct al_error *err)
{
	struct archive *a = x->a;
	struct archive_entry *ae = archive_entry_new();
	if (!ae)
		return al_error_set(err, -ENOMEM, "out of memory");
	int rc = 0;
	for (size_t i = 0; i < m->n_entries && rc == 0; i++) {
		const struct st_entry *e = &m->entries[i];
		char q[QUOTE_BUF];
		time_t sec;
		long nsec;
		archive_entry_clear(ae);
		archive_entry_copy_pathname(ae, e->path);
		archive_entry_set_uid(ae, 0);
		archive_entry_set_gid(ae, 0);
		split_ns(e->mtime_ns, &sec, &nsec);
		archive_entry_set_mtime(ae, sec, nsec);
		if (e->type == ST_DIR) {
			archive_entry_set_filetype(ae, AE_IFDIR);
			archive_entry_set_perm(ae, e->mode & 0777);
		} else if (e->type == ST_FILE) {
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_perm(ae, e->mode & 0777);
			archive_entry_set_size(ae, (la_int64_t)e->size);
			if (e->n_holes && (rc = sparse_map(x, e, ae, err)) < 0)
				break;
		} else {
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_perm(ae, 0777);
			archive_entry_copy_symlink(ae, e->target);
		}
		/* ARCHIVE_WARN: a name that is not text in the locale, written
		 * as its bytes (pax hdrcharset=BINARY), which is what we want. */
		if (archive_write_header(a, ae) < ARCHIVE_WARN) {
			rc = al_error_set(err, -EIO, "%s: cannot write its header: %s",
					  quote(e->path, q),
					  archive_error_string(a) ? archive_error_string(a) : "?");
			break;
		}
		if (e->type == ST_FILE)
			rc = export_file(x, e, err);
	}
	archive_entry_free(ae);
	return rc;
}

/* The archive's output. After a failure the rest (the end-of-archive
 * blocks archive_write_close would add) is dropped: archive_write_fail
 * would do that too, but libarchive 3.6 then leaks its output state. */
struct out_ctx {
	int fd;
	bool discard;
};

static la_ssize_t out_write(struct archive *a, void *ud, const void *data, size_t len)
{
	struct out_ctx *o = ud;
	if (o->discard)
		return (la_ssize_t)len;
	int r = write_full(o->fd, data, len);
	if (r < 0) {
		archive_set_error(a, -r, "%s", al_strerror(r));
		return -1;
	}
	return (la_ssize_t)len;
}

int st_export_tar(struct st_repo *r, const char *id, int out_fd, struct al_error *err)
{
	struct st_manifest *m = NULL;
	/* Shared, like a snapshot: GC (which may rewrite packs) waits. */
	_cleanup_close_ int lock = -1;
	int rc = st_repo_lock_writer(r, &lock, err);
	if (rc == 0)
		rc = st_manifest_load(r, id, NULL, &m, err);
	if (rc < 0)
		return rc;
	struct archive *a = archive_write_new();
	if (!a) {
		st_manifest_free(m);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	struct out_ctx out = { .fd = out_fd };
	/* Full pax rather than pax_restricted: libarchive 3.6 writes an mtime's
	 * nanoseconds in restricted mode only when an entry needs a pax header
	 * for some other reason. No other pax records are written (no atime,
	 * ctime, xattrs or ACLs are set) but the GNU.sparse ones of a file with
	 * holes. */
	if (archive_write_set_format_pax(a) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
	    archive_write_open2(a, &out, NULL, out_write, NULL, NULL) != ARCHIVE_OK)
		rc = al_error_set(err, -EIO, "cannot start the archive: %s",
				  archive_error_string(a) ? archive_error_string(a) : "?");
	struct exporter x = { .r = r, .a = a };
	if (rc == 0)
		rc = export_entries(&x, m, err);
	if (rc < 0)
		out.discard = true; /* never a complete-looking partial archive */
	if (archive_write_close(a) != ARCHIVE_OK && rc == 0)
		rc = al_error_set(err, -EIO, "cannot finish the archive: %s",
				  archive_error_string(a) ? archive_error_string(a) : "?");
	archive_write_free(a);
	st_manifest_free(m);
	if (x.zeros)
		munmap((void *)x.zeros, ZEROS_LEN);
	return rc;
}

/* ---- import ---- */

/* Paths seen so far: an open-addressing table of entry indexes + 1. */
struct pathset {
	size_t *slots;
	size_t cap; /* a power of two, at least twice the entries */
};

struct import {
	struct st_repo *r;
	struct st_cas *cas;
	struct archive *a;
	size_t max_entries, max_depth;
	uint64_t max_bytes;
	struct st_entry *entries;
	bool *implied; /* parallel to entries: made for a path, not listed */
	size_t n, cap;
	struct pathset set;
	size_t names; /* bytes of names and targets held */
	struct st_import_report rep;
	unsigned char *buf; /* 2 * ST_CDC_MAX */
};

static uint64_t hash_path(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* The index of the entry named by p[0..n), or SIZE_MAX. */
static size_t set_find(const struct import *im, const char *p, size_t n)
{
	if (!im->set.cap)
		return SIZE_MAX;
	size_t mask = im->set.cap - 1;
	for (size_t s = (size_t)hash_path(p, n) & mask;; s = (s + 1) & mask) {
		size_t v = im->set.slots[s];
		if (!v)
			return SIZE_MAX;
		const char *q = im->entries[v - 1].path;
		if (strncmp(q, p, n) == 0 && q[n] == '\0')
			return v - 1;
	}
}

static void set_insert(struct pathset *set, const char *p, size_t idx)
{
	size_t mask = set->cap - 1;
	size_t s = (size_t)hash_path(p, strlen(p)) & mask;
	while (set->slots[s])
		s = (s + 1) & mask;
	set->slots[s] = idx + 1;
}

static int set_grow(struct import *im, size_t want)
{
	if (want <= im->set.cap / 2)
		return 0;
	size_t cap = im->set.cap ? im->set.cap : 1024;
	while (cap / 2 < want) {
		if (cap > SIZE_MAX / 2 / sizeof(size_t))
			return -ENOMEM;
		cap *= 2;
	}
	size_t *slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	free(im->set.slots);
	im->set.slots = slots;
	im->set.cap = cap;
	for (size_t i = 0; i < im->n; i++)
		set_insert(&im->set, im->entries[i].path, i);
	return 0;
}

/* Appends e (taking its allocations on success); the caller checked the
 * entry limit. */
static int add_entry(struct import *im, const struct st_entry *e, bool implied)
{
	if (im->n == im->cap) {
		size_t nc = im->cap ? im->cap * 2 : 256;
		if (nc > im->max_entries)
			nc = im->max_entries;
		struct st_entry *ne = realloc(im->entries, nc * sizeof(*ne));
		if (!ne)
			return -ENOMEM;
		im->entries = ne;
		bool *ni = realloc(im->implied, nc * sizeof(*ni));
		if (!ni)
			return -ENOMEM;
		im->implied = ni;
		im->cap = nc;
	}
	int rc = set_grow(im, im->n + 1);
	if (rc < 0)
		return rc;
	im->entries[im->n] = *e;
	im->implied[im->n] = implied;
	set_insert(&im->set, e->path, im->n);
	im->n++;
	return 0;
}

static void import_free(struct import *im)
{
	for (size_t i = 0; i < im->n; i++) {
		free(im->entries[i].path);
		free(im->entries[i].target);
		free(im->entries[i].chunks);
		free(im->entries[i].holes);
	}
	free(im->entries);
	free(im->implied);
	free(im->set.slots);
	free(im->buf);
}

static int too_many(struct import *im, const char *path, struct al_error *err)
{
	char q[QUOTE_BUF];
	return al_error_set(err, -E2BIG, "%s: more than %zu entries (--max-files)", quote(path, q),
			    im->max_entries);
}

static int hold_name(struct import *im, size_t len, const char *path, struct al_error *err)
{
	char q[QUOTE_BUF];
	if (len + 1 > ST_IMPORT_NAMES_MAX - im->names)
		return al_error_set(err, -E2BIG, "%s: the names add up to more than %u bytes",
				    quote(path, q), ST_IMPORT_NAMES_MAX);
	im->names += len + 1;
	return 0;
}

enum { PATH_OK = 0, PATH_ROOT = 1 };

/*
 * Checks a tar entry's name and makes its manifest path (malloc'd) and
 * depth. One leading "./" is dropped, and one trailing '/'; "." and "./"
 * name the root (PATH_ROOT). Everything else that is not a plain relative
 * path is refused.
 */
static int normalize(const char *raw, char **ret, size_t *ret_depth, struct al_error *err)
{
	char q[QUOTE_BUF];
	if (!raw || !raw[0])
		return al_error_set(err, -EPERM, "an entry has no name");
	if (strcmp(raw, ".") == 0 || strcmp(raw, "./") == 0)
		return PATH_ROOT;
	size_t len = strnlen(raw, ST_PATH_MAX + 4);
	if (len > ST_PATH_MAX + 3)
		return al_error_set(err, -ENAMETOOLONG, "%s: a path longer than %d bytes",
				    quote(raw, q), ST_PATH_MAX);
	const char *p = raw;
	if (p[0] == '/')
		return al_error_set(err, -EPERM, "%s: an absolute path", quote(raw, q));
	if (p[0] == '.' && p[1] == '/') {
		p += 2;
		len -= 2;
	}
	if (len > 0 && p[len - 1] == '/')
		len--;
	if (len > ST_PATH_MAX)
		return al_error_set(err, -ENAMETOOLONG, "%s: a path longer than %d bytes",
				    quote(raw, q), ST_PATH_MAX);
	size_t depth = 0;
	for (size_t i = 0; i <= len;) {
		size_t j = i;
		while (j < len && p[j] != '/')
			j++;
		size_t seg = j - i;
		if (seg == 0)
			return al_error_set(err, -EPERM, "%s: an empty path segment",
					    quote(raw, q));
		if (seg == 1 && p[i] == '.')
			return al_error_set(err, -EPERM, "%s: a '.' path segment", quote(raw, q));
		if (seg == 2 && p[i] == '.' && p[i + 1] == '.')
			return al_error_set(err, -EPERM, "%s: a '..' path segment", quote(raw, q));
		depth++;
		i = j + 1;
	}
	char *out = strndup(p, len);
	if (!out)
		return al_error_set(err, -ENOMEM, "out of memory");
	*ret = out;
	*ret_depth = depth;
	return PATH_OK;
}

/*
 * Makes sure every parent of path is a directory: an existing entry must be
 * one (nothing goes below a symlink or a file); missing ones are created
 * (mode 0755, the entry's mtime), shallowest first.
 */
static int make_parents(struct import *im, const char *path, int64_t mtime_ns, struct al_error *err)
{
	char q[QUOTE_BUF], q2[QUOTE_BUF];
	size_t len = strlen(path), end = len;
	/* From the deepest parent up to the first that exists: what exists
	 * was checked the same way when it was added. */
	for (;;) {
		while (end > 0 && path[end - 1] != '/')
			end--;
		if (end == 0)
			break;
		end--; /* path[0..end) is a parent */
		size_t i = set_find(im, path, end);
		if (i == SIZE_MAX)
			continue;
		const struct st_entry *p = &im->entries[i];
		if (p->type != ST_DIR)
			return al_error_set(err, -EPERM, "%s: below the %s %s", quote(path, q),
					    p->type == ST_SYMLINK ? "symlink" : "file",
					    quote(p->path, q2));
		end++; /* past the '/' after the existing parent */
		break;
	}
	/* path[0..end) exists (or end == 0); create the rest, in order. */
	for (size_t j = end; j < len; j++) {
		if (path[j] != '/')
			continue;
		if (im->n >= im->max_entries)
			return too_many(im, path, err);
		int rc = hold_name(im, j, path, err);
		if (rc < 0)
			return rc;
		struct st_entry d = { .type = ST_DIR, .mode = 0755, .mtime_ns = mtime_ns };
		d.path = strndup(path, j);
		if (!d.path || add_entry(im, &d, true) < 0) {
			free(d.path);
			return al_error_set(err, -ENOMEM, "out of memory");
		}
		im->rep.dirs++;
		im->rep.implied_dirs++;
	}
	return 0;
}

/* Cuts what im->buf holds into chunks and stores them: all of it when
 * final (the end of a run of data), else what a cut can be made in. */
static int import_cuts(struct import *im, size_t *have, bool final, struct st_entry *e, size_t *cap,
		       struct al_error *err)
{
	size_t off = 0;
	while (off < *have) {
		size_t cut = st_cdc_cut(im->buf + off, *have - off, final);
		if (cut == 0)
			break;
		struct st_id id;
		bool fresh = false;
		int rc = st_cas_put(im->cas, im->buf + off, cut, &id, &fresh, err);
		if (rc < 0)
			return rc;
		if (fresh) {
			im->rep.chunks_new++;
			im->rep.bytes_new += cut;
		}
		if (st_entry_push_chunk(e, cap, &id) < 0)
			return al_error_set(err, -ENOMEM, "out of memory");
		off += cut;
	}
	memmove(im->buf, im->buf + off, *have - off);
	*have -= off;
	return 0;
}

/*
 * Reads the current entry's data into chunks, holding the byte limit as it
 * goes; the data must be exactly the declared size. A sparse entry (GNU or
 * pax sparse) comes as runs of data at their offsets: what lies between is
 * a hole, stored as one, never read as zeros (a 15 TiB sparse entry costs
 * what its data does).
 */
static int read_data(struct import *im, struct archive_entry *ae, const char *raw,
		     uint64_t declared, struct st_entry *e, struct al_error *err)
{
	char q[QUOTE_BUF];
	size_t have = 0, cap = 0, hcap = 0;
	uint64_t pos = 0; /* where the data read so far ends, holes included */
	for (;;) {
		const void *block = NULL;
		size_t len = 0;
		la_int64_t offset = 0;
		int r = archive_read_data_block(im->a, &block, &len, &offset);
		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK)
			return al_error_set(
				err, -EBADMSG, "%s: truncated or damaged data: %s", quote(raw, q),
				archive_error_string(im->a) ? archive_error_string(im->a) : "?");
		if (offset < 0 || (uint64_t)offset < pos)
			return al_error_set(err, -EBADMSG,
					    "%s: data out of order (a damaged sparse "
					    "map)",
					    quote(raw, q));
		if ((uint64_t)offset > declared || len > declared - (uint64_t)offset)
			return al_error_set(err, -EBADMSG, "%s: more data than its size",
					    quote(raw, q));
		if (im->max_bytes && im->rep.bytes + (uint64_t)offset + len > im->max_bytes)
			return al_error_set(err, -E2BIG,
					    "%s: more than %" PRIu64 " bytes (--max-bytes)",
					    quote(raw, q), im->max_bytes);
		if ((uint64_t)offset > pos) {
			int rc = import_cuts(im, &have, true, e, &cap, err);
			if (rc < 0)
				return rc;
			if (st_entry_push_hole(e, &hcap, (uint64_t)offset - pos) < 0)
				return al_error_set(err, -ENOMEM, "out of memory");
			pos = (uint64_t)offset;
		}
		const unsigned char *p = block;
		while (len > 0) {
			size_t k = 2 * ST_CDC_MAX - have;
			if (k > len)
				k = len;
			memcpy(im->buf + have, p, k);
			have += k;
			p += k;
			len -= k;
			pos += k;
			if (have == 2 * ST_CDC_MAX) {
				int rc = import_cuts(im, &have, false, e, &cap, err);
				if (rc < 0)
					return rc;
			}
		}
	}
	int rc = import_cuts(im, &have, true, e, &cap, err);
	if (rc < 0)
		return rc;
	/* A sparse entry may end in a hole; any other ending early is cut short. */
	if (pos < declared && archive_entry_sparse_count(ae) > 0) {
		if (st_entry_push_hole(e, &hcap, declared - pos) < 0)
			return al_error_set(err, -ENOMEM, "out of memory");
		pos = declared;
	}
	if (pos != declared)
		return al_error_set(err, -EBADMSG,
				    "%s: truncated data (%" PRIu64 " of %" PRIu64 " bytes)",
				    quote(raw, q), pos, declared);
	e->size = pos;
	return 0;
}

static int import_entry(struct import *im, struct archive_entry *ae, struct al_error *err)
{
	char q[QUOTE_BUF];
	const char *raw = archive_entry_pathname(ae);
	if (im->n >= im->max_entries)
		return too_many(im, raw, err);
	if (archive_entry_hardlink(ae))
		return al_error_set(err, -EPERM, "%s: a hard link (refused)", quote(raw, q));
	mode_t type = archive_entry_filetype(ae);
	if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
		return al_error_set(err, -EPERM, "%s: a %s (refused)", quote(raw, q),
				    type == AE_IFCHR  ? "character device" :
				    type == AE_IFBLK  ? "block device" :
				    type == AE_IFIFO  ? "fifo" :
				    type == AE_IFSOCK ? "socket" :
							"special file");
	if (archive_entry_mode(ae) & 07000)
		return al_error_set(err, -EPERM, "%s: a setuid, setgid or sticky bit (refused)",
				    quote(raw, q));

	int64_t mtime_ns = 0;
	if (archive_entry_mtime_is_set(ae)) {
		int64_t s = (int64_t)archive_entry_mtime(ae);
		long ns = archive_entry_mtime_nsec(ae);
		if (s > INT64_MAX / NS - 1 || s < INT64_MIN / NS + 1 || ns < 0 || ns >= NS)
			return al_error_set(err, -ERANGE, "%s: an mtime out of range",
					    quote(raw, q));
		mtime_ns = s * NS + ns;
	}

	char *path = NULL;
	size_t depth = 0;
	int rc = normalize(raw, &path, &depth, err);
	if (rc < 0)
		return rc;
	if (rc == PATH_ROOT) {
		/* The workspace root: not an entry of a manifest. */
		if (type != AE_IFDIR)
			return al_error_set(err, -EPERM, "%s: the root is not a directory",
					    quote(raw, q));
		return 0;
	}
	struct st_entry e = { .path = path,
			      .mtime_ns = mtime_ns,
			      .mode = (uint32_t)(archive_entry_perm(ae) & 0777) };
	if (depth > im->max_depth) {
		rc = al_error_set(err, -E2BIG, "%s: deeper than %zu directories (--max-depth)",
				  quote(raw, q), im->max_depth);
		goto fail;
	}
	size_t have = set_find(im, path, strlen(path));
	if (have != SIZE_MAX) {
		/* A directory made for an earlier entry may be listed later. */
		if (type == AE_IFDIR && im->entries[have].type == ST_DIR && im->implied[have]) {
			im->entries[have].mode = e.mode;
			im->entries[have].mtime_ns = mtime_ns;
			im->implied[have] = false;
			im->rep.implied_dirs--;
			free(path);
			return 0;
		}
		rc = im->implied[have] ?
			     al_error_set(err, -EPERM,
					  "%s: a directory already, for the entries below it",
					  quote(raw, q)) :
			     al_error_set(err, -EPERM, "%s: a duplicate entry", quote(raw, q));
		goto fail;
	}
	rc = make_parents(im, path, mtime_ns, err);
	if (rc < 0)
		goto fail;
	if (im->n >= im->max_entries) {
		rc = too_many(im, raw, err);
		goto fail;
	}
	rc = hold_name(im, strlen(path), raw, err);
	if (rc < 0)
		goto fail;

	if (type == AE_IFDIR) {
		e.type = ST_DIR;
	} else if (type == AE_IFLNK) {
		e.type = ST_SYMLINK;
		e.mode = 0777;
		const char *t = archive_entry_symlink(ae);
		size_t tl = t ? strnlen(t, ST_PATH_MAX + 1) : 0;
		if (tl == 0 || tl > ST_PATH_MAX) {
			rc = al_error_set(err, -EPERM,
					  "%s: a symlink target empty or longer than %d bytes",
					  quote(raw, q), ST_PATH_MAX);
			goto fail;
		}
		rc = hold_name(im, tl, raw, err);
		if (rc < 0)
			goto fail;
		/* Stored as it is: a target is data, never followed. */
		e.target = strndup(t, tl);
		if (!e.target) {
			rc = al_error_set(err, -ENOMEM, "out of memory");
			goto fail;
		}
	} else {
		e.type = ST_FILE;
		la_int64_t declared = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : 0;
		if (declared < 0) {
			rc = al_error_set(err, -EBADMSG, "%s: a negative size", quote(raw, q));
			goto fail;
		}
		/* Refused on its claim, before a byte of it is read or stored. */
		if (im->max_bytes && (uint64_t)declared > im->max_bytes - im->rep.bytes) {
			rc = al_error_set(err, -E2BIG,
					  "%s: more than %" PRIu64 " bytes (--max-bytes)",
					  quote(raw, q), im->max_bytes);
			goto fail;
		}
		rc = read_data(im, ae, raw, (uint64_t)declared, &e, err);
		if (rc < 0)
			goto fail;
	}
	if (add_entry(im, &e, false) < 0) {
		rc = al_error_set(err, -ENOMEM, "out of memory");
		goto fail;
	}
	if (e.type == ST_DIR) {
		im->rep.dirs++;
	} else if (e.type == ST_SYMLINK) {
		im->rep.symlinks++;
	} else {
		im->rep.files++;
		im->rep.bytes += e.size;
	}
	return 0;
fail:
	free(e.path);
	free(e.target);
	free(e.chunks);
	free(e.holes);
	return rc;
}

static int import_open(struct archive *a, int in_fd, struct al_error *err)
{
	/* Tar formats only (ustar, pax and GNU all come with "tar"), and
	 * built-in decompressors only. */
	if (archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    archive_read_support_format_gnutar(a) != ARCHIVE_OK ||
	    archive_read_support_filter_none(a) != ARCHIVE_OK ||
	    archive_read_support_filter_gzip(a) != ARCHIVE_OK ||
	    archive_read_support_filter_xz(a) != ARCHIVE_OK ||
	    archive_read_support_filter_zstd(a) != ARCHIVE_OK)
		return al_error_set(err, -ENOTSUP, "libarchive: %s",
				    archive_error_string(a) ? archive_error_string(a) : "?");
	if (archive_read_open_fd(a, in_fd, READ_BLOCK) != ARCHIVE_OK)
		return al_error_set(err, -EBADMSG, "not a tar archive: %s",
				    archive_error_string(a) ? archive_error_string(a) : "?");
	return 0;
}

int st_import_tar(struct st_repo *r, int in_fd, const char *session,
		  const struct st_manifest_limits *limits, char out_id[ST_ID_HEX + 1],
		  struct st_import_report *rep, struct al_error *err)
{
	/* A bad session is refused before any byte is read. */
	char latest[ST_ID_HEX + 1];
	int rc = st_session_latest(r, session, latest, err);
	if (rc < 0)
		return rc;
	/* Held from the first chunk to the commit: GC must not collect a
	 * chunk of an import in flight (it may re-read the chunk index, so
	 * the chunk store is looked up after). */
	_cleanup_close_ int lock = -1;
	rc = st_repo_lock_writer(r, &lock, err);
	if (rc < 0)
		return rc;
	struct import im = {
		.r = r,
		.cas = st_repo_cas(r),
		.max_entries = limits && limits->max_entries ? limits->max_entries :
							       ST_MANIFEST_MAX_ENTRIES_DEFAULT,
		.max_depth = limits && limits->max_depth ? limits->max_depth :
							   ST_MANIFEST_MAX_DEPTH_DEFAULT,
		.max_bytes = limits ? limits->max_bytes : 0,
	};
	im.buf = malloc(2 * ST_CDC_MAX);
	im.a = archive_read_new();
	if (!im.buf || !im.a) {
		rc = al_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	rc = import_open(im.a, in_fd, err);
	while (rc == 0) {
		struct archive_entry *ae = NULL;
		int ar = archive_read_next_header(im.a, &ae);
		if (ar == ARCHIVE_EOF)
			break;
		/* ARCHIVE_WARN comes with a usable entry (e.g. a name that is not
		 * text in the locale, kept as its bytes); the entry is checked
		 * like any other. */
		if (ar < ARCHIVE_WARN) {
			char q[QUOTE_BUF];
			const char *why = archive_error_string(im.a);
			if (im.n)
				rc = al_error_set(err, -EBADMSG,
						  "truncated or damaged after %s: %s",
						  quote(im.entries[im.n - 1].path, q),
						  why ? why : "?");
			else
				rc = al_error_set(err, -EBADMSG,
						  "not a tar archive, or a damaged one: %s",
						  why ? why : "?");
			break;
		}
		rc = import_entry(&im, ae, err);
	}
	if (rc == 0 && archive_read_close(im.a) != ARCHIVE_OK)
		rc = al_error_set(err, -EBADMSG, "the archive is damaged: %s",
				  archive_error_string(im.a) ? archive_error_string(im.a) : "?");
	if (rc == 0) {
		char id[ST_ID_HEX + 1];
		rc = st_commit(r, session, im.entries, im.n, id, err);
		if (rc == 0) {
			memcpy(out_id, id, sizeof(id));
			if (rep)
				*rep = im.rep;
		}
	}
out:
	if (im.a)
		archive_read_free(im.a);
	import_free(&im);
	return rc;
}

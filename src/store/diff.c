/* SPDX-License-Identifier: Apache-2.0 */
/* The difference of two checkpoints: A/D/M lines, and unified diffs of
 * changed text files. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "store/internal.h"
#include "store/textdiff.h"

static bool same_chunks(const struct st_entry *a, const struct st_entry *b)
{
	if (a->n_chunks != b->n_chunks || a->n_holes != b->n_holes ||
	    (a->n_chunks && memcmp(a->chunks, b->chunks, a->n_chunks * sizeof(*a->chunks)) != 0))
		return false;
	for (size_t k = 0; k < a->n_holes; k++)
		if (a->holes[k].at != b->holes[k].at || a->holes[k].len != b->holes[k].len)
			return false;
	return true;
}

/* Appends n zero bytes (a hole; the caller checked the size). */
static int append_zeros(struct buf *b, uint64_t n)
{
	static const char zeros[4096];
	while (n > 0) {
		size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
		if (buf_append(b, zeros, k) < 0)
			return -ENOMEM;
		n -= k;
	}
	return 0;
}

static int load_file(struct st_repo *r, const struct st_entry *e, struct buf *b,
		     struct al_error *err)
{
	size_t h = 0;
	for (size_t i = 0; i <= e->n_chunks; i++) {
		if (h < e->n_holes && e->holes[h].at == i && append_zeros(b, e->holes[h++].len) < 0)
			return 1; /* over the diff limit: not diffed */
		if (i == e->n_chunks)
			break;
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

/*
 * A path as diff lines show it: as is, or, when it holds a control
 * character, a quote or a backslash, in double quotes with C escapes, so
 * that a name (which a sandbox chose) can never start a line of its own
 * or send a terminal a control sequence.
 */
static const char *qpath(const char *p, char *buf, size_t size)
{
	bool plain = true;
	for (const unsigned char *c = (const unsigned char *)p; *c && plain; c++)
		plain = *c >= 0x20 && *c != 0x7f && *c != '"' && *c != '\\';
	if (plain)
		return p;
	size_t o = 0;
	buf[o++] = '"';
	for (const unsigned char *c = (const unsigned char *)p; *c && o + 6 < size; c++) {
		if (*c == '\n')
			o += (size_t)snprintf(buf + o, size - o, "\\n");
		else if (*c == '\t')
			o += (size_t)snprintf(buf + o, size - o, "\\t");
		else if (*c == '"' || *c == '\\')
			o += (size_t)snprintf(buf + o, size - o, "\\%c", *c);
		else if (*c < 0x20 || *c == 0x7f)
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", *c);
		else
			buf[o++] = (char)*c;
	}
	buf[o++] = '"';
	buf[o] = '\0';
	return buf;
}

#define QPATH_MAX (4 * ST_PATH_MAX + 3)

static int diff_text(struct st_repo *r, const struct st_entry *a, const struct st_entry *b,
		     struct buf *out, struct al_error *err)
{
	char qa[QPATH_MAX], qb[QPATH_MAX];
	if (a->size > ST_DIFF_MAX_INPUT || b->size > ST_DIFF_MAX_INPUT)
		return buf_appendf(out, "Files a/%s and b/%s differ (too large to diff)\n",
				   qpath(a->path, qa, sizeof(qa)),
				   qpath(b->path, qb, sizeof(qb))) < 0 ?
			       -ENOMEM :
			       0;
	struct buf ba = BUF_INIT(ST_DIFF_MAX_INPUT), bb = BUF_INIT(ST_DIFF_MAX_INPUT);
	int rc = load_file(r, a, &ba, err);
	if (rc == 0)
		rc = load_file(r, b, &bb, err);
	if (rc == 0) {
		int d = st_textdiff(ba.data ? ba.data : "", ba.len, bb.data ? bb.data : "", bb.len,
				    qpath(b->path, qb, sizeof(qb)), out);
		rc = d < 0 ? al_error_set(err, d, "cannot diff %s", b->path) : 0;
	}
	buf_free(&ba);
	buf_free(&bb);
	return rc < 0 ? rc : 0;
}

/* The merge of two sorted trees: fn for each entry added, deleted or
 * changed; ma, mb loaded. */
static int diff_walk(const struct st_manifest *ma, const struct st_manifest *mb,
		     int (*fn)(char change, const struct st_entry *ea, const struct st_entry *eb,
			       void *ud),
		     void *ud)
{
	size_t i = 0, j = 0;
	int rc = 0;
	while (rc == 0 && (i < ma->n_entries || j < mb->n_entries)) {
		const struct st_entry *ea = i < ma->n_entries ? &ma->entries[i] : NULL;
		const struct st_entry *eb = j < mb->n_entries ? &mb->entries[j] : NULL;
		int c = !ea ? 1 : !eb ? -1 : st_path_cmp(ea->path, eb->path);
		if (c < 0) {
			rc = fn('D', ea, NULL, ud);
			i++;
		} else if (c > 0) {
			rc = fn('A', NULL, eb, ud);
			j++;
		} else {
			bool changed =
				ea->type != eb->type || ea->mode != eb->mode ||
				(ea->type == ST_FILE &&
				 (ea->size != eb->size || !same_chunks(ea, eb))) ||
				(ea->type == ST_SYMLINK && strcmp(ea->target, eb->target) != 0);
			if (changed)
				rc = fn('M', ea, eb, ud);
			i++;
			j++;
		}
	}
	return rc;
}

struct diff_lines {
	struct st_repo *r;
	bool with_text;
	struct buf *out;
	struct al_error *err;
};

static int diff_line(char change, const struct st_entry *ea, const struct st_entry *eb, void *ud)
{
	struct diff_lines *d = ud;
	char q[QPATH_MAX];
	const struct st_entry *e = eb ? eb : ea;
	int rc = buf_appendf(d->out, "%c %s\n", change, qpath(e->path, q, sizeof(q))) < 0 ?
			 -ENOMEM :
			 0;
	if (rc == 0 && change == 'M' && d->with_text && ea->type == ST_FILE &&
	    eb->type == ST_FILE && !same_chunks(ea, eb))
		rc = diff_text(d->r, ea, eb, d->out, d->err);
	if (rc == -ENOMEM)
		rc = al_error_set(d->err, rc, "the diff is too large");
	return rc;
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
	struct diff_lines d = { .r = r, .with_text = with_text, .out = out, .err = err };
	if (rc == 0)
		rc = diff_walk(ma, mb, diff_line, &d);
	st_manifest_free(ma);
	st_manifest_free(mb);
	return rc;
}

int st_diff_each(struct st_repo *r, const char *a, const char *b,
		 int (*fn)(char change, const struct st_entry *ea, const struct st_entry *eb,
			   void *ud),
		 void *ud, struct al_error *err)
{
	struct st_manifest *ma = NULL, *mb = NULL;
	int rc = st_manifest_load(r, a, NULL, &ma, err);
	if (rc == 0)
		rc = st_manifest_load(r, b, NULL, &mb, err);
	if (rc == 0)
		rc = diff_walk(ma, mb, fn, ud);
	st_manifest_free(ma);
	st_manifest_free(mb);
	return rc;
}

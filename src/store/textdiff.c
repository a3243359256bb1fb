/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Line diff: split into lines, drop the common head and tail, give every
 * distinct line a small integer (so the search compares integers, not
 * bytes), find a shortest edit script with Myers' linear-space
 * divide-and-conquer ("middle snake") search, slide each run of changes as
 * far down as it goes (as GNU diff does, so ties come out the same way),
 * then print unified hunks.
 *
 * Bounds: each side is at most ST_DIFF_MAX_INPUT bytes, so line numbers fit
 * in uint32_t / int; the search gives up once D would exceed
 * ST_DIFF_MAX_EDITS (a cheap lower bound on D is checked first, so two
 * unrelated files are refused in linear time) and once it has done
 * TD_MAX_WORK steps, so time is bounded too; memory is O(lines + D).
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "store/textdiff.h"

#define TD_TEXT_PREFIX 8192
/* Steps (diagonal visits plus snake moves) the search may take in all. */
#define TD_MAX_WORK (256u << 20)

bool st_is_text(const char *p, size_t n)
{
	const unsigned char *s = (const unsigned char *)p;
	bool cut = n > TD_TEXT_PREFIX;
	if (cut)
		n = TD_TEXT_PREFIX;
	size_t i = 0;
	while (i < n) {
		unsigned c = s[i];
		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t need;
		unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
		if (c >= 0xc2 && c <= 0xdf)
			need = 1;
		else if (c >= 0xe0 && c <= 0xef) {
			need = 2;
			if (c == 0xe0)
				lo = 0xa0; /* overlong */
			else if (c == 0xed)
				hi = 0x9f; /* surrogates */
		} else if (c >= 0xf0 && c <= 0xf4) {
			need = 3;
			if (c == 0xf0)
				lo = 0x90; /* overlong */
			else if (c == 0xf4)
				hi = 0x8f; /* beyond U+10FFFF */
		} else
			return false;
		for (size_t k = 1; k <= need; k++) {
			if (i + k >= n)
				return cut; /* a sequence cut by the prefix limit is fine */
			unsigned t = s[i + k];
			if (k == 1 ? (t < lo || t > hi) : (t < 0x80 || t > 0xbf))
				return false;
		}
		i += need + 1;
	}
	return true;
}

struct td_side {
	const char *p;
	size_t len;
	uint32_t n;	 /* lines */
	uint32_t *start; /* n + 1 offsets: line i is [start[i], start[i + 1]) */
	int *cls;	 /* class of each line in the middle region */
	char *changed;	 /* per line, 1 when deleted (a) or inserted (b) */
};

struct td_ctx {
	struct td_side a, b;
	int *vf, *vb; /* furthest-reaching x per diagonal, offset by vmid */
	int vmid;
	int dlimit;  /* D beyond this fails */
	uint32_t lo; /* lines before the middle region (the common head) */
	size_t work;
};

static void td_side_free(struct td_side *s)
{
	free(s->start);
	free(s->cls);
	free(s->changed);
}

static void td_ctx_free(struct td_ctx *c)
{
	td_side_free(&c->a);
	td_side_free(&c->b);
	free(c->vf);
	free(c->vb);
}

static int td_split(struct td_side *s, const char *p, size_t len)
{
	size_t n = 0;
	for (const char *q = p, *end = p + len; q < end; n++) {
		const char *nl = memchr(q, '\n', (size_t)(end - q));
		q = nl ? nl + 1 : end;
	}
	s->p = p;
	s->len = len;
	s->n = (uint32_t)n;
	s->start = malloc((n + 1) * sizeof(*s->start));
	s->changed = calloc(n + 1, 1);
	if (!s->start || !s->changed)
		return -ENOMEM;
	size_t i = 0;
	for (const char *q = p, *end = p + len; q < end; i++) {
		s->start[i] = (uint32_t)(q - p);
		const char *nl = memchr(q, '\n', (size_t)(end - q));
		q = nl ? nl + 1 : end;
	}
	s->start[n] = (uint32_t)len;
	return 0;
}

static inline const char *line_ptr(const struct td_side *s, uint32_t i)
{
	return s->p + s->start[i];
}

static inline size_t line_len(const struct td_side *s, uint32_t i)
{
	return s->start[i + 1] - s->start[i];
}

static bool lines_equal(const struct td_side *x, uint32_t i, const struct td_side *y, uint32_t j)
{
	size_t l = line_len(x, i);
	return l == line_len(y, j) && memcmp(line_ptr(x, i), line_ptr(y, j), l) == 0;
}

static uint64_t line_hash(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

/*
 * Numbers the distinct lines of a[alo, ahi) and b[blo, bhi) and returns
 * through ret_lower a lower bound on D: every copy of a line one side has
 * more of must be deleted or inserted.
 */
static int td_classify(struct td_ctx *c, uint32_t alo, uint32_t ahi, uint32_t blo, uint32_t bhi,
		       size_t *ret_lower)
{
	size_t total = (size_t)(ahi - alo) + (bhi - blo);
	size_t cap = 16;
	while (cap < total * 2)
		cap <<= 1;
	struct slot {
		uint64_t hash;
		const struct td_side *side;
		uint32_t line;
		int cls; /* -1: empty */
	};
	_cleanup_free_ struct slot *tab = malloc(cap * sizeof(*tab));
	/* count[2 * cls] for a, count[2 * cls + 1] for b */
	_cleanup_free_ uint32_t *count = calloc(total * 2 + 2, sizeof(*count));
	c->a.cls = malloc(((size_t)(ahi - alo) + 1) * sizeof(int));
	c->b.cls = malloc(((size_t)(bhi - blo) + 1) * sizeof(int));
	if (!tab || !count || !c->a.cls || !c->b.cls)
		return -ENOMEM;
	for (size_t i = 0; i < cap; i++)
		tab[i].cls = -1;
	int next = 0;
	struct td_side *sides[2] = { &c->a, &c->b };
	uint32_t lo[2] = { alo, blo }, hi[2] = { ahi, bhi };
	for (int w = 0; w < 2; w++) {
		struct td_side *s = sides[w];
		for (uint32_t i = lo[w]; i < hi[w]; i++) {
			uint64_t h = line_hash(line_ptr(s, i), line_len(s, i));
			size_t k = (size_t)h & (cap - 1);
			while (tab[k].cls >= 0 &&
			       (tab[k].hash != h || !lines_equal(tab[k].side, tab[k].line, s, i)))
				k = (k + 1) & (cap - 1);
			if (tab[k].cls < 0)
				tab[k] = (struct slot){
					.hash = h, .side = s, .line = i, .cls = next++
				};
			s->cls[i - lo[w]] = tab[k].cls;
			count[2 * (size_t)tab[k].cls + (size_t)w]++;
		}
	}
	size_t lower = 0;
	for (int k = 0; k < next; k++) {
		uint32_t x = count[2 * k], y = count[2 * k + 1];
		lower += x > y ? x - y : y - x;
	}
	*ret_lower = lower;
	return 0;
}

/*
 * Finds the middle snake of A[0, n) against B[0, m) (both already offset)
 * and returns the point (*rx, *ry) where an optimal path should be cut and
 * the length D of that path; -1 when D exceeds the limit or the work
 * budget ran out. Paths stay inside the box [0, n] x [0, m].
 */
static int td_middle(struct td_ctx *c, const int *A, int n, const int *B, int m, int *rx, int *ry)
{
	int *vf = c->vf + c->vmid, *vb = c->vb + c->vmid; /* vb is indexed by k - delta */
	int delta = n - m;
	bool odd = delta & 1;
	int dmax = (n + m + 1) / 2;
	for (int d = 0; d <= dmax; d++) {
		if (2 * d - 1 > c->dlimit)
			return -1;
		c->work += 2 * (size_t)d + 1;
		if (c->work > TD_MAX_WORK)
			return -1;
		for (int k = -d; k <= d; k += 2) {
			int x = -1;
			if (d == 0)
				x = 0;
			else {
				/* right from k - 1 (delete A[x]) or down from k + 1 (insert B[y]) */
				if (k - 1 >= -(d - 1) && vf[k - 1] >= 0 && vf[k - 1] < n)
					x = vf[k - 1] + 1;
				if (k + 1 <= d - 1 && vf[k + 1] >= 0 && vf[k + 1] - (k + 1) < m &&
				    vf[k + 1] > x)
					x = vf[k + 1];
			}
			if (x >= 0) {
				int y = x - k, x0 = x;
				while (x < n && y < m && A[x] == B[y]) {
					x++;
					y++;
				}
				c->work += (size_t)(x - x0);
				if (odd && d > 0 && k - delta >= -(d - 1) && k - delta <= d - 1 &&
				    vb[k - delta] <= n && vb[k - delta] <= x) {
					*rx = x;
					*ry = y;
					return 2 * d - 1;
				}
			}
			vf[k] = x;
		}
		for (int j = -d; j <= d; j += 2) {
			int k = j + delta; /* diagonal */
			int x = INT_MAX;
			if (d == 0)
				x = n;
			else {
				/* left from j + 1 (delete A[x - 1]) or up from j - 1 (insert B[y - 1]) */
				if (j + 1 <= d - 1 && vb[j + 1] <= n && vb[j + 1] > 0)
					x = vb[j + 1] - 1;
				if (j - 1 >= -(d - 1) && vb[j - 1] <= n &&
				    vb[j - 1] - (k - 1) > 0 && vb[j - 1] < x)
					x = vb[j - 1];
			}
			if (x != INT_MAX) {
				int y = x - k, x0 = x;
				while (x > 0 && y > 0 && A[x - 1] == B[y - 1]) {
					x--;
					y--;
				}
				c->work += (size_t)(x0 - x);
				if (!odd && k >= -d && k <= d && vf[k] >= 0 && vf[k] >= x) {
					*rx = x;
					*ry = y;
					return 2 * d;
				}
			}
			vb[j] = x;
		}
	}
	return -1; /* not reached for a path inside the box */
}

/* Marks the changes that turn A[alo, ahi) into B[blo, bhi) (class indexes). */
static int td_compare(struct td_ctx *c, int alo, int ahi, int blo, int bhi)
{
	const int *A = c->a.cls, *B = c->b.cls;
	while (alo < ahi && blo < bhi && A[alo] == B[blo]) {
		alo++;
		blo++;
	}
	while (alo < ahi && blo < bhi && A[ahi - 1] == B[bhi - 1]) {
		ahi--;
		bhi--;
	}
	if (alo == ahi || blo == bhi) {
		for (int i = alo; i < ahi; i++)
			c->a.changed[c->lo + (uint32_t)i] = 1;
		for (int j = blo; j < bhi; j++)
			c->b.changed[c->lo + (uint32_t)j] = 1;
		return 0;
	}
	int x, y;
	int d = td_middle(c, A + alo, ahi - alo, B + blo, bhi - blo, &x, &y);
	if (d < 0)
		return -ERANGE;
	int r = td_compare(c, alo, alo + x, blo, blo + y);
	if (r < 0)
		return r;
	return td_compare(c, alo + x, ahi, blo + y, bhi);
}

/*
 * Many edit scripts are equally short; this picks the one GNU diff picks so
 * the output matches `diff -u`. A run of changed lines [i, j) in s whose
 * line before it equals its last line describes the same edit as
 * [i - 1, j - 1) (likewise downwards), so each run is slid up as far as it
 * goes, then down as far as it goes (merging with runs it meets), then back
 * up to the last place where it lined up with changes in the other side o,
 * if there was one, so deletions and insertions stay in one group.
 * k is the line of o just past the partner of the unchanged line before the
 * run: a changed o line at k belongs to the run's group.
 */
static void td_slide(struct td_side *s, const struct td_side *o)
{
	char *ch = s->changed;
	const char *och = o->changed;
	uint32_t n = s->n, i = 0, k = 0;
	while (i < n) {
		if (!ch[i]) {
			while (k < o->n && och[k])
				k++;
			i++;
			k++;
			continue;
		}
		uint32_t j = i, len, aligned;
		do {
			while (j < n && ch[j])
				j++;
			len = j - i;
			while (i > 0 && lines_equal(s, i - 1, s, j - 1)) {
				ch[--i] = 1;
				ch[--j] = 0;
				for (k--; k > 0 && och[k - 1]; k--)
					;
				while (i > 0 && ch[i - 1])
					i--;
			}
			aligned = k < o->n && och[k] ? j : 0;
			while (j < n && lines_equal(s, i, s, j)) {
				while (k < o->n && och[k])
					k++;
				k++;
				ch[i++] = 0;
				ch[j++] = 1;
				while (j < n && ch[j])
					j++;
				if (k < o->n && och[k])
					aligned = j;
			}
		} while (j - i != len);
		while (aligned && j > aligned) {
			ch[--i] = 1;
			ch[--j] = 0;
			for (k--; k > 0 && och[k - 1]; k--)
				;
		}
		i = j;
	}
}

static int emit_range(struct buf *out, uint32_t start, uint32_t count)
{
	if (count == 0)
		return buf_appendf(out, "%u,0", start);
	if (count == 1)
		return buf_appendf(out, "%u", start + 1);
	return buf_appendf(out, "%u,%u", start + 1, count);
}

static int emit_line(struct buf *out, char mark, const struct td_side *s, uint32_t i)
{
	int r = buf_append_char(out, mark);
	if (r >= 0)
		r = buf_append(out, line_ptr(s, i), line_len(s, i));
	if (r >= 0 && (line_len(s, i) == 0 || line_ptr(s, i)[line_len(s, i) - 1] != '\n'))
		r = buf_append_str(out, "\n\\ No newline at end of file\n");
	return r;
}

/* Next change group at or after (*i, *j), which must be in step. */
static bool next_group(const struct td_ctx *c, uint32_t *i, uint32_t *j, uint32_t *i2, uint32_t *j2)
{
	while (*i < c->a.n && *j < c->b.n && !c->a.changed[*i] && !c->b.changed[*j]) {
		(*i)++;
		(*j)++;
	}
	if (*i >= c->a.n && *j >= c->b.n)
		return false;
	*i2 = *i;
	*j2 = *j;
	while (*i2 < c->a.n && c->a.changed[*i2])
		(*i2)++;
	while (*j2 < c->b.n && c->b.changed[*j2])
		(*j2)++;
	return true;
}

static int td_emit(const struct td_ctx *c, const char *path, struct buf *out)
{
	int r = buf_appendf(out, "--- a/%s\n+++ b/%s\n", path, path);
	if (r < 0)
		return r;
	uint32_t gi = 0, gj = 0, gi2, gj2;
	bool have = next_group(c, &gi, &gj, &gi2, &gj2);
	while (have) {
		uint32_t before = gi < ST_DIFF_CONTEXT ? gi : ST_DIFF_CONTEXT;
		uint32_t sa = gi - before, sb = gj - before;
		/* Find where this hunk ends: groups closer than 2 * context merge. */
		uint32_t hi2 = gi2, hj2 = gj2;
		uint32_t ni = hi2, nj = hj2, ni2, nj2;
		bool more;
		for (;;) {
			ni = hi2;
			nj = hj2;
			more = next_group(c, &ni, &nj, &ni2, &nj2);
			if (!more || ni - hi2 > 2 * ST_DIFF_CONTEXT)
				break;
			hi2 = ni2;
			hj2 = nj2;
		}
		uint32_t tail = c->a.n - hi2;
		if (more)
			tail = ni - hi2;
		if (tail > ST_DIFF_CONTEXT)
			tail = ST_DIFF_CONTEXT;
		uint32_t ea = hi2 + tail, eb = hj2 + tail;
		r = buf_append_str(out, "@@ -");
		if (r >= 0)
			r = emit_range(out, sa, ea - sa);
		if (r >= 0)
			r = buf_append_str(out, " +");
		if (r >= 0)
			r = emit_range(out, sb, eb - sb);
		if (r >= 0)
			r = buf_append_str(out, " @@\n");
		uint32_t i = sa, j = sb;
		while (r >= 0 && (i < ea || j < eb)) {
			if (i < ea && j < eb && !c->a.changed[i] && !c->b.changed[j]) {
				r = emit_line(out, ' ', &c->a, i);
				i++;
				j++;
				continue;
			}
			while (r >= 0 && i < ea && c->a.changed[i])
				r = emit_line(out, '-', &c->a, i++);
			while (r >= 0 && j < eb && c->b.changed[j])
				r = emit_line(out, '+', &c->b, j++);
		}
		if (r < 0)
			return r;
		gi = ni;
		gj = nj;
		gi2 = ni2;
		gj2 = nj2;
		have = more;
	}
	return 0;
}

static int refuse(struct buf *out, const char *path, const char *why)
{
	int r = buf_appendf(out, "%s a/%s and b/%s %s\n", why[0] == 'd' ? "Binary files" : "Files",
			    path, path, why);
	return r < 0 ? r : 1;
}

int st_textdiff(const char *a, size_t alen, const char *b, size_t blen, const char *path,
		struct buf *out)
{
	if (alen == blen && (alen == 0 || memcmp(a, b, alen) == 0))
		return 0;
	if (alen > ST_DIFF_MAX_INPUT || blen > ST_DIFF_MAX_INPUT)
		return refuse(out, path, "are too large to diff");
	if (!st_is_text(a, alen) || !st_is_text(b, blen))
		return refuse(out, path, "differ");

	_cleanup_(td_ctx_free) struct td_ctx c = { .dlimit = ST_DIFF_MAX_EDITS };
	if (td_split(&c.a, a, alen) < 0 || td_split(&c.b, b, blen) < 0)
		return -ENOMEM;

	uint32_t lo = 0, ahi = c.a.n, bhi = c.b.n;
	while (lo < ahi && lo < bhi && lines_equal(&c.a, lo, &c.b, lo))
		lo++;
	while (ahi > lo && bhi > lo && lines_equal(&c.a, ahi - 1, &c.b, bhi - 1)) {
		ahi--;
		bhi--;
	}

	size_t lower = 0;
	int r = td_classify(&c, lo, ahi, lo, bhi, &lower);
	if (r < 0)
		return r;
	if (lower > ST_DIFF_MAX_EDITS)
		return refuse(out, path, "are too different to diff");
	size_t half = ((size_t)(ahi - lo) + (bhi - lo) + 1) / 2;
	if (half > ST_DIFF_MAX_EDITS / 2 + 2)
		half = ST_DIFF_MAX_EDITS / 2 + 2;
	c.vmid = (int)half + 2;
	c.vf = malloc((2 * half + 5) * sizeof(int));
	c.vb = malloc((2 * half + 5) * sizeof(int));
	if (!c.vf || !c.vb)
		return -ENOMEM;
	c.lo = lo;
	r = td_compare(&c, 0, (int)(ahi - lo), 0, (int)(bhi - lo));
	if (r == -ERANGE)
		return refuse(out, path, "are too different to diff");
	if (r < 0)
		return r;
	td_slide(&c.a, &c.b);
	td_slide(&c.b, &c.a);

	size_t mark = out->len;
	r = td_emit(&c, path, out);
	if (r < 0) {
		buf_truncate(out, mark);
		return r;
	}
	return 0;
}

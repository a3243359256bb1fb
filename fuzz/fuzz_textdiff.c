/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The text differ on two inputs split at the first 0xff byte (which no text
 * contains, so "a\xff" + "b" covers every pair). A diff it writes must
 * consist of the two headers and hunks whose lines start with ' ', '+',
 * '-', '@' or '\', agree with their headers' counts, and, applied to a by
 * the small patcher below, give b exactly.
 */
#include <string.h>

#include "common/buf.h"
#include "fuzz.h"
#include "store/textdiff.h"

static size_t line_end(const char *p, size_t n, size_t i)
{
	const char *nl = memchr(p + i, '\n', n - i);
	return nl ? (size_t)(nl - p) + 1 : n;
}

static unsigned long number(const char *d, size_t n, size_t *i)
{
	unsigned long v = 0;
	check(*i < n && d[*i] >= '0' && d[*i] <= '9');
	while (*i < n && d[*i] >= '0' && d[*i] <= '9') {
		v = v * 10 + (unsigned long)(d[*i] - '0');
		check(v < (1ul << 32));
		(*i)++;
	}
	return v;
}

/* "-l[,s]" or "+l[,s]" at d[*i]. */
static void range(const char *d, size_t n, size_t *i, char sign, unsigned long *l, unsigned long *s)
{
	check(*i < n && d[*i] == sign);
	(*i)++;
	*l = number(d, n, i);
	*s = 1;
	if (*i < n && d[*i] == ',') {
		(*i)++;
		*s = number(d, n, i);
		check(*s != 1); /* GNU writes "l", never "l,1" */
	}
	/* An empty range names the line before it; a non-empty one its first. */
	check(*s == 0 || *l >= 1);
}

/* Applies the diff d to a, appending the result to r. */
static void apply(const char *a, size_t alen, const char *d, size_t n, struct buf *r)
{
	static const char hdr[] = "--- a/fuzz\n+++ b/fuzz\n";
	check(n > sizeof(hdr) - 1 && memcmp(d, hdr, sizeof(hdr) - 1) == 0);
	size_t i = sizeof(hdr) - 1;
	size_t apos = 0;	 /* bytes of a consumed */
	unsigned long aline = 0; /* lines of a consumed */
	bool ended_a = false, ended_b = false;
	while (i < n) {
		check(memcmp(d + i, "@@ ", 3) == 0 && !ended_a && !ended_b);
		i += 3;
		unsigned long al, as, bl, bs;
		range(d, n, &i, '-', &al, &as);
		check(i < n && d[i] == ' ');
		i++;
		range(d, n, &i, '+', &bl, &bs);
		check(n - i >= 4 && memcmp(d + i, " @@\n", 4) == 0);
		i += 4;
		unsigned long astart = as ? al - 1 : al;
		check(astart >= aline);
		/* Copy the untouched lines up to the hunk. */
		while (aline < astart) {
			check(apos < alen);
			size_t e = line_end(a, alen, apos);
			check(buf_append(r, a + apos, e - apos) == 0);
			apos = e;
			aline++;
		}
		(void)bl;
		char last = 0; /* kind of the previous body line */
		while (i < n && (as || bs || d[i] == '\\')) {
			size_t e = line_end(d, n, i);
			check(d[e - 1] == '\n');
			char k = d[i];
			const char *body = d + i + 1;
			size_t blen = e - i - 1;
			if (k == '\\') {
				check(e - i == sizeof("\\ No newline at end of file\n") - 1);
				check(memcmp(d + i, "\\ No newline at end of file\n", e - i) == 0);
				check(last == ' ' || last == '-' || last == '+');
				/* The line just written or skipped had no newline. */
				if (last == ' ' || last == '+') {
					check(r->len > 0 && r->data[r->len - 1] == '\n');
					buf_truncate(r, r->len - 1);
					ended_b = true;
				}
				if (last == ' ' || last == '-') {
					check(apos == alen && alen > 0 && a[alen - 1] != '\n');
					ended_a = true;
				}
				last = k;
				i = e;
				continue;
			}
			check(k == ' ' || k == '-' || k == '+');
			check(!(ended_a && k != '+') && !(ended_b && k != '-'));
			if (k == ' ' || k == '-') {
				check(k == ' ' ? as && bs : as > 0);
				size_t ae = line_end(a, alen, apos);
				size_t alen_line = ae - apos;
				bool nonl = a[ae - 1] != '\n';
				/* The line in the diff carries a newline even when a's does not. */
				check(alen_line + nonl == blen &&
				      memcmp(a + apos, body, alen_line) == 0);
				apos = ae;
				aline++;
				as--;
			}
			if (k == ' ' || k == '+') {
				check(k == '+' ? bs > 0 : true);
				check(buf_append(r, body, blen) == 0);
				bs--;
			}
			last = k;
			i = e;
		}
		check(as == 0 && bs == 0);
	}
	check(apos <= alen);
	check(buf_append(r, a + apos, alen - apos) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	const char *sep = memchr(p, 0xff, size);
	size_t alen = sep ? (size_t)(sep - p) : size;
	const char *b = sep ? sep + 1 : p + size;
	size_t blen = sep ? size - alen - 1 : 0;

	struct buf out = BUF_INIT(64u << 20);
	int r = st_textdiff(p, alen, b, blen, "fuzz", &out);
	check(r == 0 || r == 1);
	bool equal = alen == blen && memcmp(p, b, alen) == 0;
	if (r == 1) {
		check(!equal && out.len > 0 && out.data[out.len - 1] == '\n');
		check(memchr(out.data, '\n', out.len) == out.data + out.len - 1);
	} else if (equal) {
		check(out.len == 0);
	} else {
		check(st_is_text(p, alen) && st_is_text(b, blen));
		check(out.len > 0);
		struct buf res = BUF_INIT(64u << 20);
		apply(p, alen, out.data, out.len, &res);
		check(res.len == blen && (blen == 0 || memcmp(res.data, b, blen) == 0));
		buf_free(&res);
	}
	buf_free(&out);
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
#include "buf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first allocation; small buffers (messages, paths) fit in one go. */
#define BUF_MIN_CAP 64

void buf_init(struct buf *b, size_t max)
{
	*b = (struct buf)BUF_INIT(max);
}

int buf_reserve(struct buf *b, size_t n)
{
	size_t want, need;

	if (__builtin_add_overflow(b->len, n, &want) || want > b->max)
		return -ENOBUFS;
	if (__builtin_add_overflow(want, 1, &need))
		return -ENOBUFS;
	if (need <= b->cap)
		return 0;

	size_t cap = b->cap < BUF_MIN_CAP ? BUF_MIN_CAP : b->cap;
	while (cap < need) {
		if (__builtin_mul_overflow(cap, 2, &cap)) {
			cap = need;
			break;
		}
	}
	/* Never allocate more than the maximum can use. */
	size_t limit;
	if (__builtin_add_overflow(b->max, 1, &limit))
		limit = SIZE_MAX;
	if (cap > limit)
		cap = limit;

	char *p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	if (!b->data)
		p[0] = '\0';
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	int r = buf_reserve(b, n);
	if (r < 0)
		return r;
	if (n > 0)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_append_char(struct buf *b, char c)
{
	return buf_append(b, &c, 1);
}

int buf_vappendf(struct buf *b, const char *fmt, va_list ap)
{
	va_list aq;
	size_t room = b->cap > b->len ? b->cap - b->len : 0;

	va_copy(aq, ap);
	int n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, aq);
	va_end(aq);
	if (n < 0)
		return -EINVAL;

	if ((size_t)n < room && b->len + (size_t)n <= b->max) {
		b->len += (size_t)n;
		return 0;
	}
	/* Did not fit: undo whatever vsnprintf left past the content. */
	if (b->data)
		b->data[b->len] = '\0';

	int r = buf_reserve(b, (size_t)n);
	if (r < 0)
		return r;
	va_copy(aq, ap);
	int m = vsnprintf(b->data + b->len, b->cap - b->len, fmt, aq);
	va_end(aq);
	if (m != n) {
		b->data[b->len] = '\0';
		return -EINVAL;
	}
	b->len += (size_t)n;
	return 0;
}

int buf_appendf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = buf_vappendf(b, fmt, ap);
	va_end(ap);
	return r;
}

void buf_truncate(struct buf *b, size_t len)
{
	if (len >= b->len)
		return;
	b->len = len;
	b->data[len] = '\0';
}

void buf_reset(struct buf *b)
{
	buf_truncate(b, 0);
}

void buf_free(struct buf *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

int buf_steal(struct buf *b, char **ret, size_t *ret_len)
{
	char *p = b->data;
	if (!p) {
		p = strdup("");
		if (!p)
			return -ENOMEM;
	}
	if (ret_len)
		*ret_len = b->len;
	*ret = p;
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	return 0;
}

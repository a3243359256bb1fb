/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A growable byte buffer with a declared maximum. Appends past the maximum
 * fail with -ENOBUFS and leave the buffer as it was, so a caller buffering
 * input from the outside can never be made to allocate without bound.
 * data is always NUL-terminated once anything was appended (the terminator
 * is not counted in len); data is NULL for a buffer that never grew.
 */
#pragma once

#include <stdarg.h>
#include <stddef.h>

struct buf {
	char *data;
	size_t len; /* bytes of content, terminator excluded */
	size_t cap; /* bytes allocated, terminator included */
	size_t max; /* content never grows past this */
};

/* clang-format off */
#define BUF_INIT(m) { .data = NULL, .len = 0, .cap = 0, .max = (m) }
/* clang-format on */

void buf_init(struct buf *b, size_t max);

/* Makes room for n more bytes of content (plus the terminator). */
int buf_reserve(struct buf *b, size_t n);

int buf_append(struct buf *b, const void *p, size_t n);
int buf_append_str(struct buf *b, const char *s);
int buf_append_char(struct buf *b, char c);
int buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vappendf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Shortens the content to len bytes (no-op when already shorter). */
void buf_truncate(struct buf *b, size_t len);

/* Empties the buffer and keeps its memory. */
void buf_reset(struct buf *b);

/* Releases the memory; max is kept so the buffer can be reused. */
void buf_free(struct buf *b);

/* Hands the content over as a NUL-terminated string that the caller frees
 * (an empty string when nothing was appended) and leaves b empty. */
int buf_steal(struct buf *b, char **ret, size_t *ret_len);

#define _cleanup_buf_ __attribute__((cleanup(buf_free)))

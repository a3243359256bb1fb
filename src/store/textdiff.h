/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unified diffs of text files (Myers' O(ND) line diff), as `diff -u` writes
 * them: "--- a/PATH", "+++ b/PATH", hunks with 3 lines of context, and
 * "\ No newline at end of file" where it applies.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

#define ST_DIFF_CONTEXT 3
#define ST_DIFF_MAX_INPUT (16u << 20) /* each side; larger is "too large to diff" */
#define ST_DIFF_MAX_EDITS 20000	      /* D beyond this: "too different to diff" */

/* Whether the bytes look like text: no NUL and valid UTF-8 in the first 8 KiB. */
bool st_is_text(const char *p, size_t n);

/*
 * Appends the unified diff of a and b to out (nothing when they are
 * equal). Returns 0, 1 when no diff was written because a side is not
 * text, too large or too different (out then gets one line saying so,
 * e.g. "Binary files a/x and b/x differ"), or -ENOMEM / -ENOBUFS (out's own limit).
 * Time and memory are bounded by the limits above.
 */
int st_textdiff(const char *a, size_t alen, const char *b, size_t blen, const char *path,
		struct buf *out);

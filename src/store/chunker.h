/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Content-defined chunking (a gear-hash rolling cut, FastCDC style with
 * normalized chunking): cut points depend on the content around them, so an
 * edit in the middle of a large file changes only the chunks near it.
 * Files up to ST_CDC_MIN bytes are one chunk.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define ST_CDC_MIN (64u * 1024)
#define ST_CDC_AVG (256u * 1024)
#define ST_CDC_MAX (1024u * 1024) /* == ST_CHUNK_MAX */

/*
 * The length of the chunk starting at p, given n bytes from there.
 * With eof false and no cut found in n < ST_CDC_MAX bytes, returns 0:
 * call again with more bytes. Never returns more than n or ST_CDC_MAX;
 * returns n when eof and n <= ST_CDC_MAX with no earlier cut.
 * Deterministic: the same bytes always cut at the same places.
 */
size_t st_cdc_cut(const unsigned char *p, size_t n, bool eof);

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Content decoding of response bodies (gzip, deflate, br, zstd), for the
 * one case where the gateway must see the bytes an upstream compressed:
 * a response to a request that carried a credential, which is redacted
 * before it reaches the sandbox. (The gateway asks for an identity body;
 * an upstream that compresses anyway is decoded, never passed on.)
 *
 * Streaming and bounded: each call produces at most GW_DECODE_STEP bytes
 * of output and says how much input it used, so the caller applies
 * backpressure between calls; a body that decodes to more than the limit
 * given at creation fails with -EFBIG (a decompression bomb costs the
 * gateway no more than that many bytes of work, never memory).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/strview.h"

#define GW_DECODE_STEP (64 * 1024)

enum gw_coding {
	GW_CODING_IDENTITY = 0, /* no Content-Encoding, or "identity" */
	GW_CODING_GZIP,		/* gzip, x-gzip */
	GW_CODING_DEFLATE,	/* deflate: zlib-wrapped, or raw as some servers send */
	GW_CODING_BR,
	GW_CODING_ZSTD,
	GW_CODING_UNKNOWN, /* anything else, or a list of codings */
};

/* The coding a Content-Encoding value names (case-insensitive, spaces
 * around it ignored). A list ("gzip, br") is GW_CODING_UNKNOWN. */
enum gw_coding gw_coding_parse(struct sv value);
const char *gw_coding_name(enum gw_coding c);

struct gw_decoder;
typedef int (*gw_decode_emit_fn)(const char *p, size_t n, void *ud);

/* coding: GZIP, DEFLATE, BR or ZSTD; max_out: the most decoded bytes. */
int gw_decoder_new(enum gw_coding coding, uint64_t max_out, struct gw_decoder **ret);
void gw_decoder_free(struct gw_decoder *d);

/*
 * Decodes from p (n bytes), calling emit with the output (at most
 * GW_DECODE_STEP bytes in all per call). *ret_used: input bytes consumed;
 * call again with the rest (a call may use nothing and only flush output).
 * Returns 0, -EINVAL for corrupt input (or bytes after the end of a
 * deflate or br stream; gzip members and zstd frames may follow each
 * other), -EFBIG past max_out, -ENOMEM, or emit's negative value.
 */
int gw_decoder_feed(struct gw_decoder *d, const char *p, size_t n, size_t *ret_used,
		    gw_decode_emit_fn emit, void *ud);

/* The body's end: 0 when the encoded stream had ended, -EINVAL when it was
 * cut short. */
int gw_decoder_finish(struct gw_decoder *d);

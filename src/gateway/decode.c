/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <brotli/decode.h>
#include <zlib.h>
#include <zstd.h>

#include "gateway/decode.h"

struct gw_decoder {
	enum gw_coding coding;
	uint64_t max_out, out_total;
	bool ended;
	/* "deflate": zlib-wrapped (RFC 9110) or raw, as some servers send
	 * it; told apart by the first two bytes, held here until both came. */
	unsigned char head[2];
	size_t head_len;
	bool wrapper_known;
	z_stream z;
	bool z_live;
	BrotliDecoderState *br;
	ZSTD_DStream *zs;
	char buf[GW_DECODE_STEP];
};

enum gw_coding gw_coding_parse(struct sv v)
{
	v = sv_trim(v);
	if (v.len == 0 || sv_equal_ci_cstr(v, "identity"))
		return GW_CODING_IDENTITY;
	if (sv_equal_ci_cstr(v, "gzip") || sv_equal_ci_cstr(v, "x-gzip"))
		return GW_CODING_GZIP;
	if (sv_equal_ci_cstr(v, "deflate"))
		return GW_CODING_DEFLATE;
	if (sv_equal_ci_cstr(v, "br"))
		return GW_CODING_BR;
	if (sv_equal_ci_cstr(v, "zstd"))
		return GW_CODING_ZSTD;
	return GW_CODING_UNKNOWN;
}

const char *gw_coding_name(enum gw_coding c)
{
	static const char *const names[] = {
		"identity", "gzip", "deflate", "br", "zstd", "unknown"
	};
	return (unsigned)c <= GW_CODING_UNKNOWN ? names[c] : "unknown";
}

static int z_init(struct gw_decoder *d, int window_bits)
{
	if (d->z_live)
		inflateEnd(&d->z);
	memset(&d->z, 0, sizeof(d->z));
	if (inflateInit2(&d->z, window_bits) != Z_OK)
		return -ENOMEM;
	d->z_live = true;
	return 0;
}

int gw_decoder_new(enum gw_coding coding, uint64_t max_out, struct gw_decoder **ret)
{
	if (coding == GW_CODING_IDENTITY || coding >= GW_CODING_UNKNOWN)
		return -EINVAL;
	struct gw_decoder *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->coding = coding;
	d->max_out = max_out;
	int r = 0;
	switch (coding) {
	case GW_CODING_GZIP:
		r = z_init(d, 15 + 16);
		break;
	case GW_CODING_DEFLATE:
		break; /* once the first two bytes tell which */
	case GW_CODING_BR:
		d->br = BrotliDecoderCreateInstance(NULL, NULL, NULL);
		r = d->br ? 0 : -ENOMEM;
		break;
	case GW_CODING_ZSTD:
		d->zs = ZSTD_createDStream();
		r = d->zs && !ZSTD_isError(ZSTD_initDStream(d->zs)) ? 0 : -ENOMEM;
		/* A frame may ask for a window of up to 2^31; refuse more than
		 * 8 MiB (what HTTP's zstd coding allows, RFC 8878 9.1). */
		if (r == 0 && ZSTD_isError(ZSTD_DCtx_setParameter(d->zs, ZSTD_d_windowLogMax, 23)))
			r = -ENOMEM;
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0) {
		gw_decoder_free(d);
		return r;
	}
	*ret = d;
	return 0;
}

void gw_decoder_free(struct gw_decoder *d)
{
	if (!d)
		return;
	if (d->z_live)
		inflateEnd(&d->z);
	if (d->br)
		BrotliDecoderDestroyInstance(d->br);
	if (d->zs)
		ZSTD_freeDStream(d->zs);
	free(d);
}

static int put(struct gw_decoder *d, size_t n, gw_decode_emit_fn emit, void *ud)
{
	if (n == 0)
		return 0;
	if (n > d->max_out - d->out_total)
		return -EFBIG;
	d->out_total += n;
	return emit(d->buf, n, ud);
}

/* A zlib header (RFC 1950): deflate, a window of at most 32 KiB, and
 * the check bits. */
static bool zlib_header(const unsigned char h[2])
{
	return (h[0] & 0x0f) == 8 && (h[0] >> 4) <= 7 && ((unsigned)h[0] << 8 | h[1]) % 31 == 0;
}

static int feed_zlib(struct gw_decoder *d, const char *p, size_t n, size_t *used,
		     gw_decode_emit_fn emit, void *ud)
{
	if (d->coding == GW_CODING_DEFLATE && !d->wrapper_known) {
		size_t take = 0;
		while (d->head_len < 2 && take < n)
			d->head[d->head_len++] = (unsigned char)p[take++];
		*used = take;
		if (d->head_len < 2)
			return 0;
		int r = z_init(d, zlib_header(d->head) ? 15 : -15);
		if (r < 0)
			return r;
		d->wrapper_known = true;
		/* The two bytes held first, then the rest on the next call. */
		d->z.next_in = d->head;
		d->z.avail_in = 2;
		d->z.next_out = (Bytef *)d->buf;
		d->z.avail_out = sizeof(d->buf);
		int zr = inflate(&d->z, Z_NO_FLUSH);
		if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
			return zr == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
		if (zr == Z_STREAM_END)
			d->ended = true;
		return put(d, sizeof(d->buf) - d->z.avail_out, emit, ud);
	}
	d->z.next_in = (Bytef *)(uintptr_t)p;
	d->z.avail_in = n > UINT32_MAX ? UINT32_MAX : (uInt)n;
	d->z.next_out = (Bytef *)d->buf;
	d->z.avail_out = sizeof(d->buf);
	int zr = inflate(&d->z, Z_NO_FLUSH);
	if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
		return zr == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
	*used = (size_t)((const char *)d->z.next_in - p);
	int r = put(d, sizeof(d->buf) - d->z.avail_out, emit, ud);
	if (r < 0)
		return r;
	if (zr == Z_STREAM_END)
		d->ended = true;
	return 0;
}

static int feed_br(struct gw_decoder *d, const char *p, size_t n, size_t *used,
		   gw_decode_emit_fn emit, void *ud)
{
	size_t avail_in = n, avail_out = sizeof(d->buf);
	const uint8_t *next_in = (const uint8_t *)p;
	uint8_t *next_out = (uint8_t *)d->buf;
	BrotliDecoderResult br = BrotliDecoderDecompressStream(d->br, &avail_in, &next_in,
							       &avail_out, &next_out, NULL);
	if (br == BROTLI_DECODER_RESULT_ERROR)
		return -EINVAL;
	*used = n - avail_in;
	int r = put(d, sizeof(d->buf) - avail_out, emit, ud);
	if (r < 0)
		return r;
	if (br == BROTLI_DECODER_RESULT_SUCCESS)
		d->ended = true;
	return 0;
}

static int feed_zstd(struct gw_decoder *d, const char *p, size_t n, size_t *used,
		     gw_decode_emit_fn emit, void *ud)
{
	ZSTD_inBuffer in = { p, n, 0 };
	ZSTD_outBuffer out = { d->buf, sizeof(d->buf), 0 };
	size_t zr = ZSTD_decompressStream(d->zs, &out, &in);
	if (ZSTD_isError(zr))
		return -EINVAL;
	*used = in.pos;
	int r = put(d, out.pos, emit, ud);
	if (r < 0)
		return r;
	/* 0: a frame is complete and flushed. A body of several frames is
	 * allowed (RFC 8878): input after one starts the next. */
	if (in.pos)
		d->ended = zr == 0;
	else if (zr == 0)
		d->ended = true;
	return 0;
}

int gw_decoder_feed(struct gw_decoder *d, const char *p, size_t n, size_t *ret_used,
		    gw_decode_emit_fn emit, void *ud)
{
	*ret_used = 0;
	if (d->ended && n > 0) {
		/* gzip may have several members (RFC 1952 2.2), zstd several
		 * frames; anything after the end of deflate or br is corrupt. */
		if (d->coding == GW_CODING_GZIP) {
			if (inflateReset(&d->z) != Z_OK)
				return -EINVAL;
			d->ended = false;
		} else if (d->coding != GW_CODING_ZSTD) {
			return -EINVAL;
		}
	}
	switch (d->coding) {
	case GW_CODING_GZIP:
	case GW_CODING_DEFLATE:
		return feed_zlib(d, p, n, ret_used, emit, ud);
	case GW_CODING_BR:
		return feed_br(d, p, n, ret_used, emit, ud);
	case GW_CODING_ZSTD:
		return feed_zstd(d, p, n, ret_used, emit, ud);
	default:
		return -EINVAL;
	}
}

int gw_decoder_finish(struct gw_decoder *d)
{
	/* Also no avail_in left behind (held bytes that never went in). */
	if (d->z_live && d->z.avail_in)
		return -EINVAL;
	return d->ended ? 0 : -EINVAL;
}

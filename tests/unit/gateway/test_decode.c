/* SPDX-License-Identifier: Apache-2.0 */
/* Content decoding of credentialed responses: every coding, streams cut
 * anywhere, corrupt and truncated input, and bombs stopped at the limit
 * with bounded work per call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <brotli/encode.h>
#include <zlib.h>
#include <zstd.h>

#include "gateway/decode.h"

struct sink {
	char *p;
	size_t len, cap, max_call, this_call;
};

static int collect(const char *p, size_t n, void *ud)
{
	struct sink *s = ud;
	if (s->len + n > s->cap) {
		s->cap = (s->len + n) * 2;
		s->p = realloc(s->p, s->cap);
		assert_non_null(s->p);
	}
	memcpy(s->p + s->len, p, n);
	s->len += n;
	s->this_call += n;
	return 0;
}

/* Decodes enc fed in pieces of `piece` bytes; returns the first error or
 * gw_decoder_finish's answer. Checks the per-call output bound. */
static int decode(enum gw_coding c, const void *enc, size_t len, size_t piece, uint64_t max,
		  struct sink *out)
{
	struct gw_decoder *d = NULL;
	assert_int_equal(gw_decoder_new(c, max, &d), 0);
	const char *p = enc;
	size_t off = 0;
	int r = 0;
	while (r == 0) {
		size_t n = len - off < piece ? len - off : piece, used = 0;
		out->this_call = 0;
		r = gw_decoder_feed(d, p + off, n, &used, collect, out);
		assert_true(out->this_call <= GW_DECODE_STEP);
		assert_true(used <= n);
		off += used;
		if (r == 0 && off == len && out->this_call < GW_DECODE_STEP)
			break; /* all in, nothing more pending */
	}
	if (r == 0)
		r = gw_decoder_finish(d);
	gw_decoder_free(d);
	return r;
}

static char *text(size_t n)
{
	char *t = malloc(n);
	assert_non_null(t);
	uint32_t x = 12345;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		t[i] = "abcdefgh secret ghp_token\n"[(x >> 16) % 26];
	}
	return t;
}

static size_t z_compress(const void *in, size_t n, int window_bits, unsigned char *out, size_t cap)
{
	z_stream z = { 0 };
	assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	size_t len = cap - z.avail_out;
	deflateEnd(&z);
	return len;
}

static void roundtrip(enum gw_coding c, const unsigned char *enc, size_t len, const char *want,
		      size_t wlen)
{
	static const size_t pieces[] = { 1, 7, 4096, 1 << 20 };
	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		struct sink s = { 0 };
		int dr = decode(c, enc, len, pieces[i], UINT64_MAX, &s);
		if (dr != 0)
			fail_msg("coding %s, pieces of %zu: %d", gw_coding_name(c), pieces[i], dr);
		assert_int_equal(s.len, wlen);
		assert_memory_equal(s.p, want, wlen);
		free(s.p);
	}
	/* Cut short anywhere: never a success. */
	for (size_t cut = 0; cut < len; cut += len / 13 + 1) {
		struct sink s = { 0 };
		assert_int_equal(decode(c, enc, cut, 4096, UINT64_MAX, &s), -EINVAL);
		free(s.p);
	}
}

static void test_codings(void **state)
{
	const size_t n = 300000;
	char *t = text(n);
	size_t cap = n + 4096;
	unsigned char *enc = malloc(2 * cap);
	assert_non_null(enc);

	size_t len = z_compress(t, n, 15 + 16, enc, cap);
	roundtrip(GW_CODING_GZIP, enc, len, t, n);
	/* Two gzip members one after the other. */
	size_t len2 = z_compress(t, n, 15 + 16, enc + len, cap);
	char *tt = malloc(2 * n);
	memcpy(tt, t, n);
	memcpy(tt + n, t, n);
	roundtrip(GW_CODING_GZIP, enc, len + len2, tt, 2 * n);
	free(tt);

	len = z_compress(t, n, 15, enc, cap); /* deflate as RFC 9110 means it: zlib */
	roundtrip(GW_CODING_DEFLATE, enc, len, t, n);
	len = z_compress(t, n, -15, enc, cap); /* and raw, as some servers send it */
	roundtrip(GW_CODING_DEFLATE, enc, len, t, n);

	size_t blen = 2 * cap;
	assert_int_equal(BrotliEncoderCompress(5, 22, BROTLI_MODE_TEXT, n, (const uint8_t *)t,
					       &blen, enc),
			 BROTLI_TRUE);
	roundtrip(GW_CODING_BR, enc, blen, t, n);

	size_t zl = ZSTD_compress(enc, 2 * cap, t, n, 3);
	assert_false(ZSTD_isError(zl));
	roundtrip(GW_CODING_ZSTD, enc, zl, t, n);
	free(enc);
	free(t);
}

static void test_corrupt_and_trailing(void **state)
{
	char *t = text(10000);
	unsigned char enc[20000];
	size_t len = z_compress(t, 10000, 15, enc, sizeof(enc));
	struct sink s = { 0 };
	/* Bytes after the end of a deflate stream. */
	memcpy(enc + len, "junk", 4);
	assert_int_equal(decode(GW_CODING_DEFLATE, enc, len + 4, 4096, UINT64_MAX, &s), -EINVAL);
	free(s.p);
	/* Garbage in every coding. */
	static const enum gw_coding all[] = { GW_CODING_GZIP, GW_CODING_DEFLATE, GW_CODING_BR,
					      GW_CODING_ZSTD };
	for (size_t i = 0; i < 4; i++) {
		memset(&s, 0, sizeof(s));
		assert_int_equal(decode(all[i], "this is not compressed at all, not one bit", 43,
					4096, UINT64_MAX, &s),
				 -EINVAL);
		free(s.p);
	}
	free(t);
}

static void test_bombs_stop_at_the_limit(void **state)
{
	/* 64 MiB of zeros: some 64 KiB gzip, a few KiB in br and zstd. */
	const size_t n = 64u << 20;
	char *zeros = calloc(1, n);
	unsigned char *enc = malloc(1 << 20);
	assert_non_null(zeros);
	assert_non_null(enc);
	const uint64_t limit = 1u << 20;

	size_t len = z_compress(zeros, n, 15 + 16, enc, 1 << 20);
	struct sink s = { 0 };
	assert_int_equal(decode(GW_CODING_GZIP, enc, len, len, limit, &s), -EFBIG);
	assert_true(s.len <= limit);
	free(s.p);

	size_t blen = 1 << 20;
	assert_int_equal(BrotliEncoderCompress(1, 22, BROTLI_MODE_GENERIC, n,
					       (const uint8_t *)zeros, &blen, enc),
			 BROTLI_TRUE);
	memset(&s, 0, sizeof(s));
	assert_int_equal(decode(GW_CODING_BR, enc, blen, blen, limit, &s), -EFBIG);
	assert_true(s.len <= limit);
	free(s.p);

	size_t zl = ZSTD_compress(enc, 1 << 20, zeros, n, 1);
	assert_false(ZSTD_isError(zl));
	memset(&s, 0, sizeof(s));
	assert_int_equal(decode(GW_CODING_ZSTD, enc, zl, zl, limit, &s), -EFBIG);
	assert_true(s.len <= limit);
	free(s.p);
	free(enc);
	free(zeros);
}

static void test_zstd_window_limit(void **state)
{
	/* A frame that asks for a 128 MiB window is refused up front. */
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	assert_non_null(cc);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_windowLog, 27);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0);
	char in[64] = "hello";
	unsigned char out[256];
	ZSTD_inBuffer ib = { in, sizeof(in), 0 };
	ZSTD_outBuffer ob = { out, sizeof(out), 0 };
	/* Not all at once: with the size unknown, the window stays as set. */
	assert_false(ZSTD_isError(ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_continue)));
	ZSTD_inBuffer none = { NULL, 0, 0 };
	assert_int_equal(ZSTD_compressStream2(cc, &ob, &none, ZSTD_e_end), 0);
	ZSTD_freeCCtx(cc);
	struct sink s = { 0 };
	assert_int_equal(decode(GW_CODING_ZSTD, out, ob.pos, 4096, UINT64_MAX, &s), -EINVAL);
	free(s.p);
}

static void test_coding_names(void **state)
{
	assert_int_equal(gw_coding_parse(SV_LIT("gzip")), GW_CODING_GZIP);
	assert_int_equal(gw_coding_parse(SV_LIT(" X-GZIP ")), GW_CODING_GZIP);
	assert_int_equal(gw_coding_parse(SV_LIT("Deflate")), GW_CODING_DEFLATE);
	assert_int_equal(gw_coding_parse(SV_LIT("br")), GW_CODING_BR);
	assert_int_equal(gw_coding_parse(SV_LIT("zstd")), GW_CODING_ZSTD);
	assert_int_equal(gw_coding_parse(SV_LIT("identity")), GW_CODING_IDENTITY);
	assert_int_equal(gw_coding_parse(SV_LIT("")), GW_CODING_IDENTITY);
	assert_int_equal(gw_coding_parse(SV_LIT("gzip, br")), GW_CODING_UNKNOWN);
	assert_int_equal(gw_coding_parse(SV_LIT("compress")), GW_CODING_UNKNOWN);
	assert_int_equal(gw_coding_parse(SV_LIT("gzipx")), GW_CODING_UNKNOWN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_codings),
		cmocka_unit_test(test_corrupt_and_trailing),
		cmocka_unit_test(test_bombs_stop_at_the_limit),
		cmocka_unit_test(test_zstd_window_limit),
		cmocka_unit_test(test_coding_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

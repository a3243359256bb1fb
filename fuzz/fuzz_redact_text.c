/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The text redactor (common/redact.h): values and known shapes. The first
 * bytes choose up to four values (8 bytes or more, from a small alphabet
 * so that the text often holds them, or any bytes), the rest is the text,
 * mapped into that alphabet or raw. Whatever the input: no registered
 * value, nor its standard base64 or percent-encoded form, survives in the
 * output; the output is never longer than the input plus the markers it
 * holds; redact_inplace never writes past its buffer and keeps no value;
 * a redactor refuses only values that could show through a marker.
 *
 * Layout: flags, count, len0..len3, value bytes..., text...
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/encode.h"
#include "common/redact.h"
#include "fuzz.h"

#define MARK_LEN (sizeof(REDACT_MARK) - 1)

static char map_byte(uint8_t b)
{
	/* Letters of the shapes' prefixes too, so that they mix with values. */
	static const char alphabet[] = "abcsk-A0";
	return alphabet[b % 8];
}

static size_t count_marks(const char *p, size_t n)
{
	size_t c = 0;
	const char *q = p, *end = p + n;
	while ((q = memmem(q, (size_t)(end - q), REDACT_MARK, MARK_LEN))) {
		c++;
		q += MARK_LEN;
	}
	return c;
}

static void check_absent(const char *out, size_t olen, const char *v, size_t vl)
{
	check(!memmem(out, olen, v, vl));
	char b64[256], pct[256];
	enc_base64(v, vl, b64);
	check(!memmem(out, olen, b64, strlen(b64)));
	for (int lower = 0; lower < 2; lower++) {
		enc_percent(v, vl, lower, pct);
		check(!memmem(out, olen, pct, strlen(pct)));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 6)
		return 0;
	uint8_t flags = data[0];
	size_t n_vals = 1 + data[1] % 4, at = 6;
	char vals[4][48];
	size_t vlen[4];
	bool kept[4] = { false };
	struct redactor *r = NULL;
	check(redactor_new(&r) == 0);
	for (size_t k = 0; k < n_vals; k++) {
		vlen[k] = 8 + data[2 + k] % 40;
		for (size_t m = 0; m < vlen[k]; m++) {
			uint8_t b = at < size ? data[at++] : (uint8_t)m;
			vals[k][m] = (flags & 1) ? (char)b : map_byte(b);
		}
		int rc = redactor_add(r, vals[k], vlen[k]);
		check(rc == 0 || rc == -EINVAL);
		kept[k] = rc == 0;
	}
	size_t len = size - at;
	char *text = malloc(len + 1);
	check(text != NULL);
	for (size_t i = 0; i < len; i++)
		text[i] = (flags & 2) ? (char)data[at + i] : map_byte(data[at + i]);
	text[len] = '\0';

	struct buf out = BUF_INIT(SIZE_MAX / 4);
	check(redact((flags & 4) ? NULL : r, text, len, &out) == 0);
	const char *o = out.data ? out.data : "";
	size_t marks = count_marks(o, out.len);
	check(out.len <= len + marks * MARK_LEN);
	if (!(flags & 4))
		for (size_t k = 0; k < n_vals; k++)
			if (kept[k])
				check_absent(o, out.len, vals[k], vlen[k]);

	/* In place, in a buffer of a size from the flags: no overflow (ASan),
	 * terminated, and nothing of a value either. */
	size_t cap = (flags >> 3) ? len + 1 + (flags >> 3) % 16 : len + 1;
	char *s = malloc(cap);
	check(s != NULL);
	memcpy(s, text, len + 1);
	if (cap > len + 1)
		memset(s + len + 1, 'z', cap - len - 1);
	redact_inplace(r, s, cap);
	size_t sl = strnlen(s, cap);
	check(sl < cap);
	for (size_t k = 0; k < n_vals; k++)
		if (kept[k])
			check(!memmem(s, sl, vals[k], vlen[k]));
	free(s);
	buf_free(&out);
	free(text);
	redactor_free(r);
	return 0;
}

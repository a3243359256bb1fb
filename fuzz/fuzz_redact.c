/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The streaming redactor against a plain reference. The first bytes make a
 * vault of 2 or 3 secrets (8 bytes or more, no controls; one may extend
 * another), drawn from a small alphabet so that the rest of the input, the
 * stream, often contains them; the stream is fed in chunks whose sizes
 * also come from the input. Whatever the cut, the output must equal the
 * reference redaction of the whole stream (leftmost, then longest, resume
 * after the replacement), contain no secret, and never lag the input by
 * more than the longest secret - 1 bytes.
 *
 * Layout: flags, len0, len1, len2, chunk seed, secret bytes..., stream...
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gateway/vault.h"

#define MARKER_LEN (sizeof(GW_REDACTED) - 1)

static char map_byte(uint8_t b)
{
	static const char alphabet[] = "abcXYZ1-";
	if (b & 0x80)
		return (char)(0x20 + (b & 0x7f) % 95); /* any printable ASCII */
	return alphabet[b % 8];
}

struct out {
	char *data;
	size_t len, cap;
};

static int out_emit(const char *p, size_t n, void *ud)
{
	struct out *o = ud;
	if (n == 0 || n > o->cap - o->len)
		abort();
	memcpy(o->data + o->len, p, n);
	o->len += n;
	return 0;
}

struct secret {
	const char *s;
	size_t len;
};

/* Fills ref with the redaction of in, and in_at[j] with the input offset
 * consumed when exactly j output bytes are out (SIZE_MAX inside a marker). */
static size_t reference(const char *in, size_t len, const struct secret *sec, size_t n_sec,
			char *ref, size_t *in_at)
{
	size_t j = 0, i = 0;
	in_at[0] = 0;
	while (i < len) {
		size_t best = 0;
		for (size_t k = 0; k < n_sec; k++)
			if (sec[k].len <= len - i && sec[k].len > best &&
			    memcmp(in + i, sec[k].s, sec[k].len) == 0)
				best = sec[k].len;
		if (best) {
			memcpy(ref + j, GW_REDACTED, MARKER_LEN);
			for (size_t m = 1; m < MARKER_LEN; m++)
				in_at[j + m] = SIZE_MAX;
			j += MARKER_LEN;
			i += best;
		} else {
			ref[j++] = in[i++];
		}
		in_at[j] = i;
	}
	return j;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 5)
		return 0;
	uint8_t flags = data[0];
	size_t n_sec = (flags & 1) ? 3 : 2;
	size_t lens[3];
	for (size_t k = 0; k < 3; k++)
		lens[k] = data[1 + k] >= 0xf8 ? 8 + (size_t)data[1 + k] * 8 :
						8 + (size_t)(data[1 + k] % 12);
	uint32_t seed = data[4] | 1u;
	size_t at = 5;

	/* Secret values, as YAML double-quoted scalars with \x escapes. */
	char values[3][2100];
	size_t vlen[3];
	for (size_t k = 0; k < n_sec; k++) {
		size_t l = 0;
		if (k == 1 && (flags & 2)) {
			/* An extension of the first secret: prefix-of-another cases. */
			memcpy(values[1], values[0], vlen[0]);
			l = vlen[0];
		}
		for (size_t m = 0; m < lens[k] && l < sizeof(values[k]); m++, l++)
			values[k][l] = map_byte(at < size ? data[at++] : (uint8_t)m);
		vlen[k] = l;
	}
	size_t ycap = 64 + 3 * (20 + 4 * sizeof(values[0]));
	char *yaml = malloc(ycap);
	if (!yaml)
		return 0;
	size_t y = (size_t)snprintf(yaml, ycap, "secrets:\n");
	for (size_t k = 0; k < n_sec; k++) {
		y += (size_t)snprintf(yaml + y, ycap - y, "  s%zu: \"", k);
		for (size_t m = 0; m < vlen[k]; m++)
			y += (size_t)snprintf(yaml + y, ycap - y, "\\x%02x",
					      (unsigned)(unsigned char)values[k][m]);
		y += (size_t)snprintf(yaml + y, ycap - y, "\"\n");
	}
	struct gw_vault *v = NULL;
	struct al_error err = { 0 };
	int rc = gw_vault_parse("fuzz.yaml", yaml, y, &v, &err);
	free(yaml);
	if (rc < 0) {
		/* Refused (a value overlapping the marker): say why, quote nothing. */
		if (!err.msg[0])
			abort();
		for (size_t k = 0; k < n_sec; k++)
			if (memmem(err.msg, strlen(err.msg), values[k], vlen[k]))
				abort();
		return 0;
	}
	struct secret sec[3];
	size_t max_len = 0;
	for (size_t k = 0; k < n_sec; k++) {
		char name[8];
		snprintf(name, sizeof(name), "s%zu", k);
		sec[k].s = gw_vault_get(v, name, &sec[k].len);
		if (!sec[k].s || sec[k].len != vlen[k] || memcmp(sec[k].s, values[k], vlen[k]) != 0)
			abort();
		if (sec[k].len > max_len)
			max_len = sec[k].len;
	}

	/* The stream: mapped into the secrets' alphabet, or raw. */
	size_t len = size - at;
	char *in = malloc(len + 1);
	char *ref = malloc(len * MARKER_LEN + 1);
	size_t *in_at = malloc((len * MARKER_LEN + 1) * sizeof(*in_at));
	struct out o = { .data = malloc(len * MARKER_LEN + 1), .len = 0, .cap = len * MARKER_LEN };
	struct gw_redactor *r = NULL;
	if (!in || !ref || !in_at || !o.data || gw_redactor_new(v, &r) < 0)
		goto out;
	for (size_t i = 0; i < len; i++)
		in[i] = (flags & 4) ? (char)data[at + i] : map_byte(data[at + i]);
	size_t ref_len = reference(in, len, sec, n_sec, ref, in_at);

	static const size_t max_chunk[] = { 1, 2, 7, 64, 5000 };
	size_t chunk_max = max_chunk[(flags >> 3) % 5];
	size_t fed = 0;
	while (fed < len) {
		seed ^= seed << 13;
		seed ^= seed >> 17;
		seed ^= seed << 5;
		size_t n = seed % (chunk_max + 1); /* empty chunks too */
		if (n > len - fed)
			n = len - fed;
		if (gw_redact(r, in + fed, n, out_emit, &o) < 0)
			abort();
		fed += n;
		/* Output so far: a prefix of the reference, ending between tokens,
		 * and behind the input by at most max_len - 1 bytes. */
		if (o.len > ref_len || memcmp(o.data, ref, o.len) != 0)
			abort();
		if (in_at[o.len] == SIZE_MAX || fed - in_at[o.len] > (max_len ? max_len - 1 : 0))
			abort();
	}
	if (gw_redact_finish(r, out_emit, &o) < 0)
		abort();
	if (o.len != ref_len || memcmp(o.data, ref, ref_len) != 0)
		abort();
	for (size_t k = 0; k < n_sec; k++)
		if (memmem(o.data, o.len, sec[k].s, sec[k].len))
			abort();
out:
	gw_redactor_free(r);
	free(o.data);
	free(in_at);
	free(ref);
	free(in);
	gw_vault_free(v);
	return 0;
}

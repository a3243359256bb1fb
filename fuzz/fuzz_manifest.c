/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The manifest parser on arbitrary bytes. The first byte picks the mode:
 * even, the rest is a whole manifest (the HMAC check must hold everything
 * off); odd, the rest is a manifest body and its correct hmac line is
 * appended, so the fuzzer reaches the checks behind the HMAC. A manifest
 * that parses must be canonical: writing it back gives the same bytes, and
 * those parse again.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "fuzz.h"
#include "store/manifest.h"
#include "store/objstore.h"

/* The seeds in corpus/fuzz_manifest are signed with this key. */
static const uint8_t key[32] = "airlock-fuzz-manifest-key-012345";

/* The base deltas are applied to (any id will do: apply does not look). */
static const char fuzz_base[] =
	"airlock-manifest 1\ntenant acme\nsession s-1\nparent -\ncreated 1\nentries 6\n"
	"d 0755 0 a\n"
	"f 0644 0 0 a/b -\n"
	"d 0755 0 a/c\n"
	"f 0644 0 0 a/c/d -\n"
	"f 0644 0 0 e -\n"
	"l 0 s e\n";

/* body + LF when missing + its hmac line (malloc'd). */
static char *sign(const uint8_t *body, size_t n, size_t *ret_len)
{
	char *out = malloc(n + 1 + 5 + 64 + 1);
	check(out);
	memcpy(out, body, n);
	if (n > 0 && body[n - 1] != '\n')
		out[n++] = '\n';
	unsigned char md[32];
	unsigned int mdlen = 0;
	check(HMAC(EVP_sha256(), key, sizeof(key), (const unsigned char *)out, n, md, &mdlen));
	memcpy(out + n, "hmac ", 5);
	n += 5;
	for (int i = 0; i < 32; i++) {
		out[n++] = "0123456789abcdef"[md[i] >> 4];
		out[n++] = "0123456789abcdef"[md[i] & 15];
	}
	out[n++] = '\n';
	*ret_len = n;
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	char *text;
	size_t len;
	if (data[0] & 1) {
		text = sign(data + 1, size - 1, &len);
	} else {
		len = size - 1;
		text = malloc(len ? len : 1);
		check(text);
		memcpy(text, data + 1, len);
	}

	struct st_manifest *m = NULL;
	struct al_error err = { 0 };
	int r = st_manifest_parse(text, len, key, sizeof(key), "acme", NULL, &m, &err);
	if (r < 0) {
		/* A refusal says why, quoting little, and leaves *ret alone. */
		check(r == -EBADMSG || r == -EACCES);
		check(err.msg[0]);
		check(strlen(err.msg) < 200);
		check(!m);
		free(text);
		return 0;
	}

	char *again = NULL;
	size_t alen = 0;
	r = st_manifest_write(m, key, sizeof(key), &again, &alen, &err);
	if (r < 0)
		fprintf(stderr, "write of a parsed manifest: %s\n", err.msg);
	check(r == 0);
	check(alen == len && memcmp(again, text, len) == 0);

	struct st_manifest *m2 = NULL;
	check(st_manifest_parse(again, alen, key, sizeof(key), "acme", NULL, &m2, NULL) == 0);
	check(m2->n_entries == m->n_entries);
	char id1[ST_ID_HEX + 1], id2[ST_ID_HEX + 1];
	st_manifest_id(text, len, id1);
	st_manifest_id(again, alen, id2);
	check(strcmp(id1, id2) == 0);

	/* A delta applies to a small base, or is refused with a reason; an
	 * applied tree passes every rule of a full manifest. */
	if (m->base[0]) {
		size_t blen;
		char *btext = sign((const uint8_t *)fuzz_base, strlen(fuzz_base), &blen);
		struct st_manifest *b = NULL, *d = NULL, *t = NULL;
		check(st_manifest_parse(btext, blen, key, sizeof(key), "acme", NULL, &b, NULL) ==
		      0);
		check(st_manifest_parse(text, len, key, sizeof(key), "acme", NULL, &d, NULL) == 0);
		struct al_error aerr = { 0 };
		r = st_manifest_apply(b, d, NULL, &t, &aerr);
		if (r == 0) {
			t->applied = false;
			t->base[0] = '\0';
			char *full = NULL;
			size_t flen = 0;
			check(st_manifest_write(t, key, sizeof(key), &full, &flen, NULL) == 0);
			free(full);
			st_manifest_free(t);
		} else {
			check(r == -EBADMSG && aerr.msg[0] && !t);
		}
		free(btext);
	}

	/* The same manifest is no other tenant's. */
	struct st_manifest *m3 = NULL;
	check(st_manifest_parse(text, len, key, sizeof(key), "other", NULL, &m3, NULL) == -EACCES);

	st_manifest_free(m2);
	st_manifest_free(m);
	free(again);
	free(text);
	return 0;
}

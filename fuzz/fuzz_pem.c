/* SPDX-License-Identifier: Apache-2.0 */
/*
 * PEM bundles as the gateway loads them (the system's trust store, read at
 * start and parsed on first use): any bytes, no crash, and never more
 * certificates added than the bundle has BEGIN lines.
 */
#include <string.h>

#include <openssl/x509.h>

#include "fuzz.h"
#include "gateway/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	X509_STORE *st = X509_STORE_new();
	check(st);
	int n = gw_store_add_pem((struct x509_store_st *)st, (const char *)data, size);
	size_t begins = 0;
	const char *p = (const char *)data, *end = p + size;
	while ((p = memmem(p, (size_t)(end - p), "-----BEGIN", 10))) {
		begins++;
		p += 10;
	}
	check(n >= 0 && (size_t)n <= begins);
	X509_STORE_free(st);
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The per-sandbox certificate authority of the TLS interception. Every
 * sandbox gets its own ECDSA P-256 CA, generated when the sandbox starts;
 * its certificate is put into the sandbox's trust store, its private key
 * never leaves the gateway process. Leaf certificates for the names the
 * sandbox connects to are issued on demand and cached.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define GW_CA_LEAF_CACHE 256 /* leaves kept per CA; least recently used go first */

struct gw_ca;	/* opaque: holds EVP_PKEY and X509 of the CA, and the leaf cache */
struct gw_leaf; /* opaque: a leaf certificate and its private key */

/*
 * Generates a new CA: ECDSA P-256 key, self-signed X.509v3 certificate,
 * subject CN "airlock sandbox CA <label>", basicConstraints CA:TRUE critical
 * with pathlen 0, keyUsage keyCertSign+cRLSign critical, subjectKeyIdentifier,
 * a random 128-bit serial, valid from one hour ago for `days` days.
 */
int gw_ca_new(const char *label, unsigned days, struct gw_ca **ret, struct al_error *err);
void gw_ca_free(struct gw_ca *ca);

/* The CA certificate in PEM, for the sandbox's trust store. The caller
 * frees *ret. The private key is never exported. */
int gw_ca_cert_pem(const struct gw_ca *ca, char **ret, size_t *ret_len);

/*
 * A leaf for host (a normalized DNS name or IP literal, see policy.h): a
 * fresh ECDSA P-256 key; subject CN = host; subjectAltName DNS:host (or
 * IP:address for an IP literal, brackets removed for IPv6); basicConstraints
 * CA:FALSE; keyUsage digitalSignature critical; extendedKeyUsage serverAuth;
 * authorityKeyIdentifier; random serial; valid from one hour ago for 7 days
 * (never beyond the CA's end). Cached per host: the same host gives the
 * same leaf until it is evicted. The leaf belongs to the CA's cache: it stays
 * valid until GW_CA_LEAF_CACHE other hosts have been asked for after its last
 * use (or gw_ca_free), so hand it to OpenSSL (SSL_use_certificate and
 * SSL_use_PrivateKey take their own references) right away. Callers never
 * free it. A host too long for a CN (64 bytes) is named in subjectAltName only.
 */
int gw_ca_leaf(struct gw_ca *ca, const char *host, const struct gw_leaf **ret,
	       struct al_error *err);

/* For SSL_CTX/SSL use: the leaf's X509 * and EVP_PKEY * (as void * to keep
 * OpenSSL headers out of this interface). */
void *gw_leaf_x509(const struct gw_leaf *leaf);
void *gw_leaf_pkey(const struct gw_leaf *leaf);
/* The CA's X509 *, to send as the chain after the leaf. */
void *gw_ca_x509(const struct gw_ca *ca);

/* SPDX-License-Identifier: Apache-2.0 */
#include "gateway/ca.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common/cleanup.h"

#define CA_DAYS_MAX 3650 /* a sandbox does not live ten years */
#define LEAF_DAYS 7
#define BACKDATE_SECONDS 3600 /* tolerate clocks a little behind ours */
#define CN_MAX 64	      /* ub-common-name (RFC 5280) */
#define HOST_MAX 255	      /* 253 for a DNS name, plus brackets for IPv6 */
#define SERIAL_BYTES 16

static const char ca_cn_prefix[] = "airlock sandbox CA ";

struct gw_leaf {
	char *host;
	X509 *x509;
	EVP_PKEY *pkey;
	uint64_t used; /* ca->clock at the last lookup, for LRU */
};

struct gw_ca {
	EVP_PKEY *pkey;
	X509 *x509;
	uint64_t clock;
	size_t n_leaves;
	/* A linear scan: 256 string compares cost nothing next to one
	 * ECDSA key generation, and keep the eviction trivially correct. */
	struct gw_leaf *leaves[GW_CA_LEAF_CACHE];
};

static void leaf_free(struct gw_leaf *leaf)
{
	if (!leaf)
		return;
	X509_free(leaf->x509);
	EVP_PKEY_free(leaf->pkey);
	free(leaf->host);
	free(leaf);
}

DEFINE_CLEANUP_FUNC(X509, X509_free)
DEFINE_CLEANUP_FUNC(EVP_PKEY, EVP_PKEY_free)
DEFINE_CLEANUP_FUNC(BIGNUM, BN_free)
DEFINE_CLEANUP_FUNC(BIO, BIO_free)
DEFINE_CLEANUP_FUNC(X509_EXTENSION, X509_EXTENSION_free)
DEFINE_CLEANUP_FUNC(GENERAL_NAMES, GENERAL_NAMES_free)
DEFINE_CLEANUP_FUNC(GENERAL_NAME, GENERAL_NAME_free)
DEFINE_CLEANUP_FUNC(ASN1_OCTET_STRING, ASN1_OCTET_STRING_free)
DEFINE_CLEANUP_FUNC(struct gw_leaf, leaf_free)

/* Fills err with the oldest queued OpenSSL reason and empties the queue,
 * so a later failure does not report this one. */
static int ssl_error(struct al_error *err, int code, const char *what)
{
	char buf[256] = "unknown OpenSSL error";
	unsigned long e = ERR_get_error();
	if (e != 0)
		ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	return al_error_set(err, code, "%s: %s", what, buf);
}

static int new_key(EVP_PKEY **ret, struct al_error *err)
{
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	if (!k)
		return ssl_error(err, -EIO, "generating an EC P-256 key");
	*ret = k;
	return 0;
}

/* A random 128-bit serial; as a positive INTEGER it takes at most 17
 * octets, within the 20 RFC 5280 allows. */
static int set_serial(X509 *x, struct al_error *err)
{
	unsigned char raw[SERIAL_BYTES];
	_cleanup_(BN_freep) BIGNUM *bn = NULL;
	do {
		if (RAND_bytes(raw, sizeof(raw)) != 1)
			return ssl_error(err, -EIO, "drawing a serial number");
		BN_free(bn);
		bn = BN_bin2bn(raw, sizeof(raw), NULL);
		if (!bn)
			return ssl_error(err, -ENOMEM, "setting the serial number");
	} while (BN_is_zero(bn));
	if (!BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)))
		return ssl_error(err, -ENOMEM, "setting the serial number");
	return 0;
}

static int set_validity(X509 *x, time_t now, unsigned days, struct al_error *err)
{
	if (!X509_time_adj_ex(X509_getm_notBefore(x), 0, -BACKDATE_SECONDS, &now) ||
	    !X509_time_adj_ex(X509_getm_notAfter(x), (int)days, -BACKDATE_SECONDS, &now))
		return ssl_error(err, -EIO, "setting the validity period");
	return 0;
}

static int set_cn(X509 *x, const char *cn, struct al_error *err)
{
	X509_NAME *name = X509_get_subject_name(x);
	if (!X509_NAME_add_entry_by_NID(name, NID_commonName, MBSTRING_UTF8,
					(const unsigned char *)cn, -1, -1, 0))
		return ssl_error(err, -EINVAL, "setting the subject name");
	return 0;
}

/* Adds an extension written in OpenSSL's configuration syntax; values are
 * constants here, never text from outside. */
static int add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value, struct al_error *err)
{
	_cleanup_(X509_EXTENSION_freep)
		X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, ctx, nid, value);
	if (!ext || !X509_add_ext(x, ext, -1))
		return ssl_error(err, -EIO, OBJ_nid2sn(nid));
	return 0;
}

static int new_cert(EVP_PKEY *pkey, X509 **ret, struct al_error *err)
{
	_cleanup_(X509_freep) X509 *x = X509_new();
	if (!x)
		return ssl_error(err, -ENOMEM, "allocating a certificate");
	if (!X509_set_version(x, X509_VERSION_3) || !X509_set_pubkey(x, pkey))
		return ssl_error(err, -EIO, "preparing a certificate");
	int r = set_serial(x, err);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(x);
	return 0;
}

static int sign(X509 *x, EVP_PKEY *issuer_key, struct al_error *err)
{
	if (X509_sign(x, issuer_key, EVP_sha256()) <= 0)
		return ssl_error(err, -EIO, "signing a certificate");
	return 0;
}

struct ext {
	int nid;
	const char *value;
};

/* Adds the extensions (issuer: the issuing certificate, x itself for the
 * CA) and signs with the issuer's key. */
static int add_exts_and_sign(X509 *x, X509 *issuer, EVP_PKEY *issuer_key, const struct ext *exts,
			     size_t n, struct al_error *err)
{
	X509V3_CTX ctx;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	for (size_t i = 0; i < n; i++) {
		int r = add_ext(x, &ctx, exts[i].nid, exts[i].value, err);
		if (r < 0)
			return r;
	}
	return sign(x, issuer_key, err);
}

int gw_ca_new(const char *label, unsigned days, struct gw_ca **ret, struct al_error *err)
{
	if (!label || !ret)
		return al_error_set(err, -EINVAL, "CA: no label");
	if (days == 0 || days > CA_DAYS_MAX)
		return al_error_set(err, -EINVAL, "CA: validity of %u days is not in 1..%d", days,
				    CA_DAYS_MAX);
	char cn[CN_MAX + 1];
	size_t plen = sizeof(ca_cn_prefix) - 1, llen = strlen(label);
	if (llen > CN_MAX - plen)
		return al_error_set(err, -EINVAL, "CA: label is longer than %zu bytes",
				    CN_MAX - plen);
	memcpy(cn, ca_cn_prefix, plen);
	memcpy(cn + plen, label, llen + 1);

	_cleanup_(EVP_PKEY_freep) EVP_PKEY *pkey = NULL;
	_cleanup_(X509_freep) X509 *x = NULL;
	int r = new_key(&pkey, err);
	if (r < 0)
		return r;
	r = new_cert(pkey, &x, err);
	if (r < 0)
		return r;
	r = set_validity(x, time(NULL), days, err);
	if (r < 0)
		return r;
	r = set_cn(x, cn, err);
	if (r < 0)
		return r;
	if (!X509_set_issuer_name(x, X509_get_subject_name(x)))
		return ssl_error(err, -EIO, "setting the issuer name");

	static const struct ext exts[] = {
		{ NID_basic_constraints, "critical,CA:TRUE,pathlen:0" },
		{ NID_key_usage, "critical,keyCertSign,cRLSign" },
		{ NID_subject_key_identifier, "hash" },
	};
	r = add_exts_and_sign(x, x, pkey, exts, ARRAY_SIZE(exts), err);
	if (r < 0)
		return r;

	struct gw_ca *ca = calloc(1, sizeof(*ca));
	if (!ca)
		return al_error_set(err, -ENOMEM, "CA: out of memory");
	ca->pkey = TAKE_PTR(pkey);
	ca->x509 = TAKE_PTR(x);
	*ret = ca;
	return 0;
}

void gw_ca_free(struct gw_ca *ca)
{
	if (!ca)
		return;
	for (size_t i = 0; i < ca->n_leaves; i++)
		leaf_free(ca->leaves[i]);
	X509_free(ca->x509);
	EVP_PKEY_free(ca->pkey);
	free(ca);
}

int gw_ca_cert_pem(const struct gw_ca *ca, char **ret, size_t *ret_len)
{
	if (!ca || !ret)
		return -EINVAL;
	_cleanup_(BIO_freep) BIO *bio = BIO_new(BIO_s_mem());
	if (!bio || !PEM_write_bio_X509(bio, ca->x509)) {
		ERR_clear_error();
		return -ENOMEM;
	}
	char *data;
	long len = BIO_get_mem_data(bio, &data);
	if (len <= 0)
		return -EIO;
	char *s = malloc((size_t)len + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, data, (size_t)len);
	s[len] = '\0';
	*ret = s;
	if (ret_len)
		*ret_len = (size_t)len;
	return 0;
}

/* The subjectAltName: an iPAddress for an IPv4 literal or a bracketed IPv6
 * literal, a dNSName otherwise. Built directly rather than through the
 * configuration syntax, so no character of host is ever interpreted. */
static int add_san(X509 *x, const char *host, struct al_error *err)
{
	unsigned char addr[16];
	size_t addr_len = 0;
	size_t len = strlen(host);
	if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
		char v6[INET6_ADDRSTRLEN];
		if (len - 2 >= sizeof(v6))
			return al_error_set(err, -EINVAL, "leaf: bad IPv6 literal");
		memcpy(v6, host + 1, len - 2);
		v6[len - 2] = '\0';
		if (inet_pton(AF_INET6, v6, addr) != 1)
			return al_error_set(err, -EINVAL, "leaf: bad IPv6 literal %s", host);
		addr_len = 16;
	} else if (inet_pton(AF_INET, host, addr) == 1) {
		addr_len = 4;
	}

	_cleanup_(GENERAL_NAME_freep) GENERAL_NAME *gn = GENERAL_NAME_new();
	_cleanup_(GENERAL_NAMES_freep) GENERAL_NAMES *gns = sk_GENERAL_NAME_new_null();
	if (!gn || !gns)
		return ssl_error(err, -ENOMEM, "subjectAltName");
	if (addr_len > 0) {
		_cleanup_(ASN1_OCTET_STRING_freep) ASN1_OCTET_STRING *os = ASN1_OCTET_STRING_new();
		if (!os || !ASN1_OCTET_STRING_set(os, addr, (int)addr_len))
			return ssl_error(err, -ENOMEM, "subjectAltName");
		GENERAL_NAME_set0_value(gn, GEN_IPADD, TAKE_PTR(os));
	} else {
		ASN1_IA5STRING *ia5 = ASN1_IA5STRING_new();
		if (!ia5 || !ASN1_STRING_set(ia5, host, (int)len)) {
			ASN1_IA5STRING_free(ia5);
			return ssl_error(err, -ENOMEM, "subjectAltName");
		}
		GENERAL_NAME_set0_value(gn, GEN_DNS, ia5);
	}
	if (!sk_GENERAL_NAME_push(gns, gn))
		return ssl_error(err, -ENOMEM, "subjectAltName");
	gn = NULL; /* now owned by gns */
	if (X509_add1_ext_i2d(x, NID_subject_alt_name, gns, 0, X509V3_ADD_DEFAULT) != 1)
		return ssl_error(err, -EIO, "subjectAltName");
	return 0;
}

static int issue_leaf(struct gw_ca *ca, const char *host, struct gw_leaf **ret,
		      struct al_error *err)
{
	_cleanup_(EVP_PKEY_freep) EVP_PKEY *pkey = NULL;
	_cleanup_(X509_freep) X509 *x = NULL;
	int r = new_key(&pkey, err);
	if (r < 0)
		return r;
	r = new_cert(pkey, &x, err);
	if (r < 0)
		return r;
	r = set_validity(x, time(NULL), LEAF_DAYS, err);
	if (r < 0)
		return r;
	/* Never outlive the issuer: a chain with a longer-lived leaf is
	 * refused by some clients and pointless for all. */
	const ASN1_TIME *ca_end = X509_get0_notAfter(ca->x509);
	if (ASN1_TIME_compare(X509_get0_notAfter(x), ca_end) > 0 && !X509_set1_notAfter(x, ca_end))
		return ssl_error(err, -EIO, "setting the validity period");
	/* A commonName is limited to 64 bytes; a longer DNS name is only in
	 * the subjectAltName, which is what clients check anyway. */
	if (strlen(host) <= CN_MAX) {
		r = set_cn(x, host, err);
		if (r < 0)
			return r;
	}
	if (!X509_set_issuer_name(x, X509_get_subject_name(ca->x509)))
		return ssl_error(err, -EIO, "setting the issuer name");

	r = add_san(x, host, err);
	if (r < 0)
		return r;
	static const struct ext exts[] = {
		{ NID_basic_constraints, "CA:FALSE" },
		{ NID_key_usage, "critical,digitalSignature" },
		{ NID_ext_key_usage, "serverAuth" },
		{ NID_subject_key_identifier, "hash" },
		{ NID_authority_key_identifier, "keyid:always" },
	};
	r = add_exts_and_sign(x, ca->x509, ca->pkey, exts, ARRAY_SIZE(exts), err);
	if (r < 0)
		return r;

	_cleanup_(leaf_freep) struct gw_leaf *leaf = calloc(1, sizeof(*leaf));
	if (!leaf)
		return al_error_set(err, -ENOMEM, "leaf: out of memory");
	leaf->host = strdup(host);
	if (!leaf->host)
		return al_error_set(err, -ENOMEM, "leaf: out of memory");
	leaf->pkey = TAKE_PTR(pkey);
	leaf->x509 = TAKE_PTR(x);
	*ret = TAKE_PTR(leaf);
	return 0;
}

int gw_ca_leaf(struct gw_ca *ca, const char *host, const struct gw_leaf **ret, struct al_error *err)
{
	if (!ca || !ret)
		return al_error_set(err, -EINVAL, "leaf: no CA");
	if (!host || host[0] == '\0' || strnlen(host, HOST_MAX + 1) > HOST_MAX)
		return al_error_set(err, -EINVAL, "leaf: host name empty or too long");

	ca->clock++;
	for (size_t i = 0; i < ca->n_leaves; i++) {
		if (strcmp(ca->leaves[i]->host, host) == 0) {
			ca->leaves[i]->used = ca->clock;
			*ret = ca->leaves[i];
			return 0;
		}
	}

	struct gw_leaf *leaf = NULL;
	int r = issue_leaf(ca, host, &leaf, err);
	if (r < 0)
		return r;
	leaf->used = ca->clock;

	size_t slot = ca->n_leaves;
	if (slot == GW_CA_LEAF_CACHE) {
		slot = 0;
		for (size_t i = 1; i < ca->n_leaves; i++)
			if (ca->leaves[i]->used < ca->leaves[slot]->used)
				slot = i;
		leaf_free(ca->leaves[slot]);
	} else {
		ca->n_leaves++;
	}
	ca->leaves[slot] = leaf;
	*ret = leaf;
	return 0;
}

void *gw_leaf_x509(const struct gw_leaf *leaf)
{
	return leaf ? leaf->x509 : NULL;
}

void *gw_leaf_pkey(const struct gw_leaf *leaf)
{
	return leaf ? leaf->pkey : NULL;
}

void *gw_ca_x509(const struct gw_ca *ca)
{
	return ca ? ca->x509 : NULL;
}

/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "gateway/ca.h"

static struct gw_ca *new_ca(const char *label, unsigned days)
{
	struct gw_ca *ca = NULL;
	struct al_error err = { 0 };
	int r = gw_ca_new(label, days, &ca, &err);
	if (r < 0)
		fail_msg("gw_ca_new: %s", al_error_message(&err));
	assert_non_null(ca);
	return ca;
}

static X509 *leaf_of(struct gw_ca *ca, const char *host)
{
	const struct gw_leaf *leaf = NULL;
	struct al_error err = { 0 };
	if (gw_ca_leaf(ca, host, &leaf, &err) < 0)
		fail_msg("gw_ca_leaf(%s): %s", host, al_error_message(&err));
	assert_non_null(leaf);
	assert_non_null(gw_leaf_pkey(leaf));
	return gw_leaf_x509(leaf);
}

/* X509_verify_cert of cert against a store holding only trusted, for
 * purpose (0: none); returns the verification error (X509_V_OK on success). */
static int verify_for(X509 *cert, X509 *trusted, int purpose)
{
	X509_STORE *store = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	assert_non_null(store);
	assert_non_null(ctx);
	assert_int_equal(X509_STORE_add_cert(store, trusted), 1);
	assert_int_equal(X509_STORE_CTX_init(ctx, store, cert, NULL), 1);
	if (purpose != 0)
		assert_int_equal(X509_STORE_CTX_set_purpose(ctx, purpose), 1);
	int ok = X509_verify_cert(ctx);
	int e = X509_STORE_CTX_get_error(ctx);
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	if (ok == 1)
		return X509_V_OK;
	return e == X509_V_OK ? -1 : e;
}

/* As a TLS server certificate. */
static int verify(X509 *cert, X509 *trusted)
{
	return verify_for(cert, trusted, X509_PURPOSE_SSL_SERVER);
}

static void test_ca_self_signed(void **state)
{
	struct gw_ca *ca = new_ca("sbx-1", 30);
	X509 *x = gw_ca_x509(ca);
	assert_non_null(x);
	assert_int_equal(X509_check_issued(x, x), X509_V_OK);
	assert_int_equal(X509_verify(x, X509_get0_pubkey(x)), 1);
	assert_int_equal(verify_for(x, x, 0), X509_V_OK);
	/* a CA, not a server certificate */
	assert_int_equal(verify(x, x), X509_V_ERR_INVALID_PURPOSE);
	assert_int_equal(X509_get_version(x), X509_VERSION_3);

	char cn[128];
	assert_true(X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
					      sizeof(cn)) > 0);
	assert_string_equal(cn, "airlock sandbox CA sbx-1");
	gw_ca_free(ca);
}

static void test_ca_extensions_and_key(void **state)
{
	struct gw_ca *ca = new_ca("ext", 30);
	X509 *x = gw_ca_x509(ca);

	int crit = -1;
	BASIC_CONSTRAINTS *bc = X509_get_ext_d2i(x, NID_basic_constraints, &crit, NULL);
	assert_non_null(bc);
	assert_int_equal(crit, 1);
	assert_true(bc->ca);
	assert_non_null(bc->pathlen);
	assert_int_equal(ASN1_INTEGER_get(bc->pathlen), 0);
	BASIC_CONSTRAINTS_free(bc);

	crit = -1;
	ASN1_BIT_STRING *ku = X509_get_ext_d2i(x, NID_key_usage, &crit, NULL);
	assert_non_null(ku);
	assert_int_equal(crit, 1);
	ASN1_BIT_STRING_free(ku);
	assert_int_equal(X509_get_key_usage(x), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
	assert_int_equal(X509_check_ca(x), 1);
	assert_non_null(X509_get0_subject_key_id(x));

	EVP_PKEY *pk = X509_get0_pubkey(x);
	assert_non_null(pk);
	assert_true(EVP_PKEY_is_a(pk, "EC"));
	char group[64];
	size_t glen = 0;
	assert_int_equal(EVP_PKEY_get_group_name(pk, group, sizeof(group), &glen), 1);
	assert_string_equal(group, "prime256v1");
	assert_int_equal(X509_get_signature_nid(x), NID_ecdsa_with_SHA256);

	const ASN1_INTEGER *serial = X509_get0_serialNumber(x);
	BIGNUM *bn = ASN1_INTEGER_to_BN(serial, NULL);
	assert_non_null(bn);
	assert_false(BN_is_negative(bn));
	assert_true(BN_num_bits(bn) > 64 && BN_num_bits(bn) <= 128);
	BN_free(bn);
	gw_ca_free(ca);
}

static void test_ca_pem(void **state)
{
	struct gw_ca *ca = new_ca("pem", 30);
	char *pem = NULL;
	size_t len = 0;
	assert_int_equal(gw_ca_cert_pem(ca, &pem, &len), 0);
	assert_non_null(pem);
	assert_int_equal(strlen(pem), len);
	assert_non_null(strstr(pem, "-----BEGIN CERTIFICATE-----"));
	assert_null(strstr(pem, "PRIVATE KEY"));

	BIO *bio = BIO_new_mem_buf(pem, (int)len);
	assert_non_null(bio);
	X509 *back = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	assert_non_null(back);
	assert_int_equal(X509_cmp(back, gw_ca_x509(ca)), 0);
	/* nothing after the certificate: no key in the bundle */
	assert_null(PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL));
	ERR_clear_error();
	X509_free(back);
	BIO_free(bio);
	free(pem);
	gw_ca_free(ca);
}

/* Days from now to t (whole days, rounded down). */
static int days_from_now(const ASN1_TIME *t)
{
	int day = 0, sec = 0;
	assert_int_equal(ASN1_TIME_diff(&day, &sec, NULL, t), 1);
	return day;
}

static void test_ca_validity(void **state)
{
	struct gw_ca *ca = new_ca("time", 30);
	X509 *x = gw_ca_x509(ca);
	time_t now = time(NULL);
	assert_true(X509_cmp_time(X509_get0_notBefore(x), &now) < 0);
	/* about an hour back, not days */
	time_t day_ago = now - 86400;
	assert_true(X509_cmp_time(X509_get0_notBefore(x), &day_ago) > 0);
	int days = days_from_now(X509_get0_notAfter(x));
	assert_true(days == 29 || days == 30);
	gw_ca_free(ca);
}

static void test_ca_bad_arguments(void **state)
{
	struct gw_ca *ca = NULL;
	struct al_error err = { 0 };
	assert_int_equal(gw_ca_new(NULL, 30, &ca, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(gw_ca_new("x", 0, &ca, &err), -EINVAL);
	al_error_clear(&err);
	char label[80];
	memset(label, 'a', sizeof(label) - 1);
	label[sizeof(label) - 1] = '\0';
	assert_int_equal(gw_ca_new(label, 30, &ca, &err), -EINVAL);
	assert_null(ca);
	gw_ca_free(NULL);

	ca = new_ca("args", 30);
	const struct gw_leaf *leaf = NULL;
	al_error_clear(&err);
	assert_int_equal(gw_ca_leaf(ca, "", &leaf, &err), -EINVAL);
	assert_int_equal(gw_ca_leaf(ca, "[not-an-ip]", &leaf, &err), -EINVAL);
	assert_null(leaf);
	gw_ca_free(ca);
}

static void test_leaf_dns(void **state)
{
	struct gw_ca *ca = new_ca("leaf", 30);
	X509 *x = leaf_of(ca, "api.example.com");

	assert_int_equal(verify(x, gw_ca_x509(ca)), X509_V_OK);
	assert_int_equal(X509_check_ca(x), 0);
	assert_true(X509_get_extension_flags(x) & EXFLAG_XKUSAGE);
	assert_int_equal(X509_get_extended_key_usage(x), XKU_SSL_SERVER);
	assert_int_equal(X509_get_key_usage(x), KU_DIGITAL_SIGNATURE);
	int crit = -1;
	ASN1_BIT_STRING *ku = X509_get_ext_d2i(x, NID_key_usage, &crit, NULL);
	assert_non_null(ku);
	assert_int_equal(crit, 1);
	ASN1_BIT_STRING_free(ku);

	/* authorityKeyIdentifier names the CA's key */
	const ASN1_OCTET_STRING *akid = X509_get0_authority_key_id(x);
	assert_non_null(akid);
	assert_int_equal(ASN1_OCTET_STRING_cmp(akid, X509_get0_subject_key_id(gw_ca_x509(ca))), 0);

	GENERAL_NAMES *san = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	assert_non_null(san);
	assert_int_equal(sk_GENERAL_NAME_num(san), 1);
	const GENERAL_NAME *gn = sk_GENERAL_NAME_value(san, 0);
	assert_int_equal(gn->type, GEN_DNS);
	const ASN1_IA5STRING *dns = gn->d.dNSName;
	assert_int_equal(ASN1_STRING_length(dns), strlen("api.example.com"));
	assert_memory_equal(ASN1_STRING_get0_data(dns), "api.example.com",
			    strlen("api.example.com"));
	GENERAL_NAMES_free(san);

	char cn[128];
	assert_true(X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
					      sizeof(cn)) > 0);
	assert_string_equal(cn, "api.example.com");
	assert_int_equal(
		X509_NAME_cmp(X509_get_issuer_name(x), X509_get_subject_name(gw_ca_x509(ca))), 0);

	assert_int_equal(X509_check_host(x, "api.example.com", 0, 0, NULL), 1);
	assert_int_equal(X509_check_host(x, "evil.com", 0, 0, NULL), 0);
	assert_int_equal(X509_check_host(x, "x.api.example.com", 0, 0, NULL), 0);

	assert_true(ASN1_TIME_compare(X509_get0_notAfter(x), X509_get0_notAfter(gw_ca_x509(ca))) <=
		    0);
	int days = days_from_now(X509_get0_notAfter(x));
	assert_true(days == 6 || days == 7);
	time_t now = time(NULL);
	assert_true(X509_cmp_time(X509_get0_notBefore(x), &now) < 0);
	EVP_PKEY *pk = X509_get0_pubkey(x);
	assert_true(EVP_PKEY_is_a(pk, "EC"));
	gw_ca_free(ca);
}

static void test_leaf_never_outlives_ca(void **state)
{
	struct gw_ca *ca = new_ca("short", 2);
	X509 *x = leaf_of(ca, "api.example.com");
	assert_int_equal(
		ASN1_TIME_compare(X509_get0_notAfter(x), X509_get0_notAfter(gw_ca_x509(ca))), 0);
	assert_int_equal(verify(x, gw_ca_x509(ca)), X509_V_OK);
	gw_ca_free(ca);
}

static void test_leaf_long_name(void **state)
{
	/* longer than a commonName may be: only in the subjectAltName */
	char host[200];
	memset(host, 'a', sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	for (size_t i = 60; i < sizeof(host) - 1; i += 60)
		host[i] = '.';
	memcpy(host + sizeof(host) - 5, ".com", 5);
	struct gw_ca *ca = new_ca("long", 30);
	X509 *x = leaf_of(ca, host);
	assert_int_equal(verify(x, gw_ca_x509(ca)), X509_V_OK);
	assert_int_equal(X509_check_host(x, host, 0, 0, NULL), 1);
	gw_ca_free(ca);
}

static int san_type(X509 *x)
{
	GENERAL_NAMES *san = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	assert_non_null(san);
	assert_int_equal(sk_GENERAL_NAME_num(san), 1);
	int t = sk_GENERAL_NAME_value(san, 0)->type;
	GENERAL_NAMES_free(san);
	return t;
}

static void test_leaf_ip(void **state)
{
	struct gw_ca *ca = new_ca("ip", 30);
	X509 *v4 = leaf_of(ca, "127.0.0.1");
	assert_int_equal(san_type(v4), GEN_IPADD);
	assert_int_equal(X509_check_ip_asc(v4, "127.0.0.1", 0), 1);
	assert_int_equal(X509_check_ip_asc(v4, "127.0.0.2", 0), 0);
	assert_int_equal(verify(v4, gw_ca_x509(ca)), X509_V_OK);

	X509 *v6 = leaf_of(ca, "[::1]");
	assert_int_equal(san_type(v6), GEN_IPADD);
	assert_int_equal(X509_check_ip_asc(v6, "::1", 0), 1);
	assert_int_equal(X509_check_ip_asc(v6, "127.0.0.1", 0), 0);
	assert_int_equal(verify(v6, gw_ca_x509(ca)), X509_V_OK);
	gw_ca_free(ca);
}

static void test_leaf_cached(void **state)
{
	struct gw_ca *ca = new_ca("cache", 30);
	const struct gw_leaf *a = NULL, *b = NULL, *c = NULL;
	assert_int_equal(gw_ca_leaf(ca, "api.example.com", &a, NULL), 0);
	assert_int_equal(gw_ca_leaf(ca, "other.example.com", &c, NULL), 0);
	assert_int_equal(gw_ca_leaf(ca, "api.example.com", &b, NULL), 0);
	assert_ptr_equal(a, b);
	assert_ptr_not_equal(a, c);
	assert_ptr_not_equal(gw_leaf_pkey(a), gw_leaf_pkey(c));
	gw_ca_free(ca);
}

static void test_leaf_other_ca_refused(void **state)
{
	struct gw_ca *a = new_ca("A", 30);
	struct gw_ca *b = new_ca("A", 30); /* same name, different key */
	X509 *la = leaf_of(a, "api.example.com");
	assert_int_equal(verify(la, gw_ca_x509(a)), X509_V_OK);
	assert_int_not_equal(verify(la, gw_ca_x509(b)), X509_V_OK);
	assert_int_not_equal(verify_for(gw_ca_x509(a), gw_ca_x509(b), 0), X509_V_OK);
	gw_ca_free(a);
	gw_ca_free(b);
}

static void test_serials_differ(void **state)
{
	struct gw_ca *ca = new_ca("serial", 30);
	X509 *l1 = leaf_of(ca, "one.example.com");
	X509 *l2 = leaf_of(ca, "two.example.com");
	X509 *l3 = leaf_of(ca, "127.0.0.1");
	const ASN1_INTEGER *s0 = X509_get0_serialNumber(gw_ca_x509(ca));
	const ASN1_INTEGER *s1 = X509_get0_serialNumber(l1);
	const ASN1_INTEGER *s2 = X509_get0_serialNumber(l2);
	const ASN1_INTEGER *s3 = X509_get0_serialNumber(l3);
	assert_int_not_equal(ASN1_INTEGER_cmp(s0, s1), 0);
	assert_int_not_equal(ASN1_INTEGER_cmp(s1, s2), 0);
	assert_int_not_equal(ASN1_INTEGER_cmp(s1, s3), 0);
	assert_int_not_equal(ASN1_INTEGER_cmp(s2, s3), 0);
	gw_ca_free(ca);
}

static void host_name(char *buf, size_t size, unsigned i)
{
	int n = snprintf(buf, size, "h%u.example.com", i);
	assert_true(n > 0 && (size_t)n < size);
}

static void test_cache_eviction(void **state)
{
	struct gw_ca *ca = new_ca("evict", 30);
	char host[64];
	const struct gw_leaf *first = NULL, *leaf = NULL;

	for (unsigned i = 0; i < GW_CA_LEAF_CACHE; i++) {
		host_name(host, sizeof(host), i);
		assert_int_equal(gw_ca_leaf(ca, host, &leaf, NULL), 0);
		if (i == 0)
			first = leaf;
	}
	host_name(host, sizeof(host), 1);
	assert_int_equal(gw_ca_leaf(ca, host, &leaf, NULL), 0);
	ASN1_INTEGER *old_serial = ASN1_INTEGER_dup(X509_get0_serialNumber(gw_leaf_x509(leaf)));
	assert_non_null(old_serial);

	/* h0 becomes the most recent, so h2 is the least recently used */
	host_name(host, sizeof(host), 0);
	assert_int_equal(gw_ca_leaf(ca, host, &leaf, NULL), 0);
	assert_ptr_equal(leaf, first);
	host_name(host, sizeof(host), GW_CA_LEAF_CACHE);
	assert_int_equal(gw_ca_leaf(ca, host, &leaf, NULL), 0);
	assert_int_equal(verify(gw_leaf_x509(leaf), gw_ca_x509(ca)), X509_V_OK);

	/* survivors are still the cached ones */
	host_name(host, sizeof(host), 0);
	assert_int_equal(gw_ca_leaf(ca, host, &leaf, NULL), 0);
	assert_ptr_equal(leaf, first);
	host_name(host, sizeof(host), 1);
	assert_int_equal(gw_ca_leaf(ca, host, &leaf, NULL), 0);
	assert_int_equal(ASN1_INTEGER_cmp(old_serial, X509_get0_serialNumber(gw_leaf_x509(leaf))),
			 0);

	/* the evicted one comes back as a new, valid leaf */
	host_name(host, sizeof(host), 2);
	assert_int_equal(gw_ca_leaf(ca, host, &leaf, NULL), 0);
	X509 *x = gw_leaf_x509(leaf);
	assert_int_equal(verify(x, gw_ca_x509(ca)), X509_V_OK);
	assert_int_equal(X509_check_host(x, host, 0, 0, NULL), 1);

	/* many more distinct hosts than fit: every one valid */
	for (unsigned i = 1000; i < 1000 + GW_CA_LEAF_CACHE + 1; i++) {
		host_name(host, sizeof(host), i);
		assert_int_equal(gw_ca_leaf(ca, host, &leaf, NULL), 0);
		x = gw_leaf_x509(leaf);
		assert_int_equal(X509_check_host(x, host, 0, 0, NULL), 1);
	}
	assert_int_equal(verify(x, gw_ca_x509(ca)), X509_V_OK);
	ASN1_INTEGER_free(old_serial);
	gw_ca_free(ca);
}

/* The server side of the TLS check, in a forked child: the leaf plus the
 * CA as its chain. Exits 0 when the handshake succeeded. */
static void tls_server(int fd, const struct gw_ca *ca, const struct gw_leaf *leaf)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || SSL_CTX_use_certificate(ctx, gw_leaf_x509(leaf)) != 1 ||
	    SSL_CTX_use_PrivateKey(ctx, gw_leaf_pkey(leaf)) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1 ||
	    SSL_CTX_add1_chain_cert(ctx, gw_ca_x509(ca)) != 1)
		_exit(2);
	SSL *ssl = SSL_new(ctx);
	if (!ssl || SSL_set_fd(ssl, fd) != 1)
		_exit(2);
	if (SSL_accept(ssl) != 1)
		_exit(1);
	char c;
	if (SSL_read(ssl, &c, 1) != 1 || SSL_write(ssl, &c, 1) != 1)
		_exit(1);
	SSL_shutdown(ssl);
	_exit(0);
}

/* Handshakes as a client trusting only the CA and expecting name; returns
 * true when the handshake succeeded and data went both ways. */
static bool tls_handshake(const struct gw_ca *ca, const struct gw_leaf *leaf,
			  const struct gw_ca *trusted, const char *name, long *ret_verify)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		tls_server(sv[1], ca, leaf);
	}
	close(sv[1]);

	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	assert_non_null(ctx);
	assert_int_equal(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), gw_ca_x509(trusted)), 1);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL *ssl = SSL_new(ctx);
	assert_non_null(ssl);
	assert_int_equal(SSL_set1_host(ssl, name), 1);
	assert_int_equal(SSL_set_fd(ssl, sv[0]), 1);
	bool ok = SSL_connect(ssl) == 1;
	*ret_verify = SSL_get_verify_result(ssl);
	if (ok) {
		char c = 'x';
		ok = SSL_write(ssl, &c, 1) == 1 && SSL_read(ssl, &c, 1) == 1 && c == 'x';
	}
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	ERR_clear_error();
	close(sv[0]);

	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (ok)
		assert_int_equal(WEXITSTATUS(status), 0);
	else
		assert_int_equal(WEXITSTATUS(status), 1);
	return ok;
}

static void test_tls_end_to_end(void **state)
{
	signal(SIGPIPE, SIG_IGN);
	struct gw_ca *ca = new_ca("tls", 30);
	const struct gw_leaf *leaf = NULL;
	assert_int_equal(gw_ca_leaf(ca, "api.example.com", &leaf, NULL), 0);

	long v = -1;
	assert_true(tls_handshake(ca, leaf, ca, "api.example.com", &v));
	assert_int_equal(v, X509_V_OK);
	assert_false(tls_handshake(ca, leaf, ca, "other.com", &v));
	assert_int_equal(v, X509_V_ERR_HOSTNAME_MISMATCH);

	/* a client trusting another sandbox's CA refuses this leaf */
	struct gw_ca *other = new_ca("tls-other", 30);
	assert_false(tls_handshake(ca, leaf, other, "api.example.com", &v));
	assert_int_not_equal(v, X509_V_OK);
	gw_ca_free(other);
	gw_ca_free(ca);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ca_self_signed),
		cmocka_unit_test(test_ca_extensions_and_key),
		cmocka_unit_test(test_ca_pem),
		cmocka_unit_test(test_ca_validity),
		cmocka_unit_test(test_ca_bad_arguments),
		cmocka_unit_test(test_leaf_dns),
		cmocka_unit_test(test_leaf_never_outlives_ca),
		cmocka_unit_test(test_leaf_long_name),
		cmocka_unit_test(test_leaf_ip),
		cmocka_unit_test(test_leaf_cached),
		cmocka_unit_test(test_leaf_other_ca_refused),
		cmocka_unit_test(test_serials_differ),
		cmocka_unit_test(test_cache_eviction),
		cmocka_unit_test(test_tls_end_to_end),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

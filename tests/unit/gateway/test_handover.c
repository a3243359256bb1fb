/* SPDX-License-Identifier: Apache-2.0 */
/* The gateway process's handover and READY answer: what is encoded decodes
 * to the same options, and every malformed payload is refused whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/handover.h"

/* (Writable strings: gw_options' lists are char *.) */
static char a1[] = "api.example.test", a2[] = "*.example.org:8443/v1", g1[] = "github:o/r",
	    u1[] = "api.example.test:443=127.0.0.1:4443", c1[] = "/etc/airlock/up.pem",
	    c2[] = "rel/ca.pem", host[] = "host.example", k1[] = "192.0.2.0/24",
	    k2[] = "fd00:1::/64";
static char *allow[] = { a1, a2 };
static char *grants[] = { g1 };
static char *ups[] = { u1 };
static char *cas[] = { c1, c2 };
static char *cidrs[] = { k1, k2 };

static struct gw_handover sample(void)
{
	struct gw_handover h;
	memset(&h, 0, sizeof(h));
	/* clang-format off */
	h.opts = (struct gw_options){
		.mode = GW_MODE_RESTRICTED, .label = "sandbox", .policy_file = "/p.yaml",
		.allow = allow, .n_allow = 2, .grants = grants, .n_grants = 1,
		.upstreams = ups, .n_upstreams = 1, .upstream_cas = cas, .n_upstream_cas = 2,
		.allow_cidrs = cidrs, .n_allow_cidrs = 2, .vault_file = "/root/vault.yaml",
	};
	/* clang-format on */
	h.uid = 0x5fffffff;
	h.sandbox_uid_first = 0x40000000;
	h.sandbox_uid_end = 0x50000000;
	h.parent = 4242;
	h.env_bundle = "/etc/ssl/certs/ca-certificates.crt";
	h.env_ca = "/etc/airlock/ca.crt";
	return h;
}

static void encode(const struct gw_handover *h, struct buf *b)
{
	buf_init(b, GW_HANDOVER_MAX);
	assert_int_equal(gw_handover_encode(h, b), 0);
}

static void same_list(char *const *a, size_t na, char *const *b, size_t nb)
{
	assert_int_equal(na, nb);
	for (size_t i = 0; i < na; i++)
		assert_string_equal(a[i], b[i]);
}

static void same(const struct gw_handover *a, const struct gw_handover *b)
{
	assert_int_equal(a->opts.mode, b->opts.mode);
	assert_string_equal(a->opts.label, b->opts.label);
	if (a->opts.policy_file || b->opts.policy_file)
		assert_string_equal(a->opts.policy_file, b->opts.policy_file);
	assert_int_equal(!!a->opts.policy_text, !!b->opts.policy_text);
	if (a->opts.policy_text) {
		assert_int_equal(a->opts.policy_len, b->opts.policy_len);
		assert_memory_equal(a->opts.policy_text, b->opts.policy_text, a->opts.policy_len);
	}
	same_list(a->opts.allow, a->opts.n_allow, b->opts.allow, b->opts.n_allow);
	same_list(a->opts.grants, a->opts.n_grants, b->opts.grants, b->opts.n_grants);
	same_list(a->opts.upstreams, a->opts.n_upstreams, b->opts.upstreams, b->opts.n_upstreams);
	same_list(a->opts.upstream_cas, a->opts.n_upstream_cas, b->opts.upstream_cas,
		  b->opts.n_upstream_cas);
	same_list(a->opts.allow_cidrs, a->opts.n_allow_cidrs, b->opts.allow_cidrs,
		  b->opts.n_allow_cidrs);
	if (a->opts.vault_file || b->opts.vault_file)
		assert_string_equal(a->opts.vault_file, b->opts.vault_file);
	assert_int_equal(a->opts.many_clients, b->opts.many_clients);
	assert_int_equal(a->uid, b->uid);
	assert_int_equal(a->sandbox_uid_first, b->sandbox_uid_first);
	assert_int_equal(a->sandbox_uid_end, b->sandbox_uid_end);
	assert_int_equal(a->detach, b->detach);
	assert_int_equal(a->parent, b->parent);
	assert_string_equal(a->env_bundle, b->env_bundle);
	assert_string_equal(a->env_ca, b->env_ca);
}

static void test_roundtrip(void **state)
{
	struct gw_handover h = sample();
	struct buf b;
	encode(&h, &b);
	struct gw_handover *d = malloc(sizeof(*d));
	assert_non_null(d);
	assert_int_equal(gw_handover_decode((uint8_t *)b.data, b.len, d), 0);
	same(&h, d);
	/* The lists point into the decoded struct's own storage. */
	assert_ptr_equal(d->opts.allow, d->allow);
	assert_ptr_equal(d->opts.upstream_cas, d->upstream_cas);
	assert_ptr_equal(d->opts.allow_cidrs, d->allow_cidrs);

	/* Detached, policy as text (with a NUL inside: the parser's to refuse),
	 * open, many clients, no lists. */
	h = sample();
	h.opts.policy_file = NULL;
	h.opts.policy_text = "rules:\n\0 - x";
	h.opts.policy_len = 12;
	h.opts.n_allow = h.opts.n_grants = h.opts.n_upstreams = h.opts.n_upstream_cas = 0;
	h.opts.n_allow_cidrs = 0;
	h.opts.vault_file = NULL;
	h.opts.mode = GW_MODE_OPEN;
	h.opts.many_clients = true;
	h.detach = true;
	h.parent = 0;
	buf_free(&b);
	encode(&h, &b);
	assert_int_equal(gw_handover_decode((uint8_t *)b.data, b.len, d), 0);
	same(&h, d);
	assert_null(d->opts.policy_file);
	assert_null(d->opts.vault_file);
	free(d);
	buf_free(&b);
}

/* A record by hand: tag, length, bytes. */
static void rec(struct buf *b, uint8_t tag, const void *p, uint32_t len)
{
	assert_int_equal(buf_append(b, &tag, 1), 0);
	assert_int_equal(buf_append(b, &len, 4), 0);
	if (len)
		assert_int_equal(buf_append(b, p, len), 0);
}

static int decode_buf(struct buf *b)
{
	struct gw_handover *d = malloc(sizeof(*d));
	assert_non_null(d);
	memset(d, 0x5a, sizeof(*d));
	int r = gw_handover_decode((uint8_t *)b->data, b->len, d);
	if (r < 0) {
		/* Nothing written on failure. */
		for (size_t i = 0; i < sizeof(*d); i++)
			assert_int_equal(((uint8_t *)d)[i], 0x5a);
	}
	free(d);
	return r;
}

static void test_malformed(void **state)
{
	struct gw_handover h = sample();
	struct buf good;
	encode(&h, &good);
	struct buf b = BUF_INIT(GW_HANDOVER_MAX);

	/* Every truncation of a good payload. */
	for (size_t n = 0; n < good.len; n++) {
		buf_reset(&b);
		if (n)
			assert_int_equal(buf_append(&b, good.data, n), 0);
		assert_int_equal(decode_buf(&b), -EBADMSG);
	}
	/* The good payload decodes (the harness itself is right). */
	buf_reset(&b);
	assert_int_equal(buf_append(&b, good.data, good.len), 0);
	assert_int_equal(decode_buf(&b), 0);

	/* Unknown tags, 0 included. */
	static const uint8_t unknown[] = { 0, 18, 200, 255 };
	for (size_t i = 0; i < sizeof(unknown); i++) {
		buf_reset(&b);
		assert_int_equal(buf_append(&b, good.data, good.len), 0);
		rec(&b, unknown[i], "x", 2);
		assert_int_equal(decode_buf(&b), -EBADMSG);
	}
	/* A length running past the end. */
	buf_reset(&b);
	assert_int_equal(buf_append(&b, good.data, good.len), 0);
	uint8_t head[5] = { 5 };
	uint32_t big = 1000;
	memcpy(head + 1, &big, 4);
	assert_int_equal(buf_append(&b, head, 5), 0);
	assert_int_equal(buf_append(&b, "abc", 4), 0);
	assert_int_equal(decode_buf(&b), -EBADMSG);

	/* Strings: empty, without their NUL, with a NUL inside, too long. */
	const struct {
		const char *p;
		uint32_t len;
	} bad_str[] = { { "", 0 }, { "", 1 }, { "abc", 3 }, { "a\0b", 4 } };
	for (size_t i = 0; i < sizeof(bad_str) / sizeof(bad_str[0]); i++) {
		buf_reset(&b);
		assert_int_equal(buf_append(&b, good.data, good.len), 0);
		rec(&b, 5 /* allow */, bad_str[i].p, bad_str[i].len);
		assert_int_equal(decode_buf(&b), -EBADMSG);
		buf_reset(&b);
		assert_int_equal(buf_append(&b, good.data, good.len), 0);
		rec(&b, 17 /* allow-cidr */, bad_str[i].p, bad_str[i].len);
		assert_int_equal(decode_buf(&b), -EBADMSG);
	}
	char *longs = malloc(GW_HANDOVER_STR_MAX + 1);
	assert_non_null(longs);
	memset(longs, 'a', GW_HANDOVER_STR_MAX);
	longs[GW_HANDOVER_STR_MAX] = '\0';
	buf_reset(&b);
	assert_int_equal(buf_append(&b, good.data, good.len), 0);
	rec(&b, 5, longs, GW_HANDOVER_STR_MAX + 1);
	assert_int_equal(decode_buf(&b), -EBADMSG);
	/* The longest string allowed passes. */
	longs[GW_HANDOVER_STR_MAX - 1] = '\0';
	buf_reset(&b);
	assert_int_equal(buf_append(&b, good.data, good.len), 0);
	rec(&b, 5, longs, GW_HANDOVER_STR_MAX);
	assert_int_equal(decode_buf(&b), 0);
	free(longs);

	/* A single field twice. */
	uint32_t uid = 1234;
	buf_reset(&b);
	assert_int_equal(buf_append(&b, good.data, good.len), 0);
	rec(&b, 11 /* uid */, &uid, 4);
	assert_int_equal(decode_buf(&b), -EBADMSG);

	/* Values out of range or of the wrong size. */
	const struct {
		uint8_t tag;
		const char *p;
		uint32_t len;
	} bad_val[] = {
		{ 1, "\0\0\0\0", 4 },		   /* mode none */
		{ 1, "\x07\0\0\0", 4 },		   /* mode 7 */
		{ 1, "\x01\0\0", 3 },		   /* short */
		{ 10, "\x02", 1 },		   /* bool 2 */
		{ 10, "\x01\x00", 2 },		   /* bool, two bytes */
		{ 11, "\0\0\0\0", 4 },		   /* uid 0 */
		{ 11, "\xff\xff\xff\xff", 4 },	   /* uid -1 */
		{ 12, "\x02\0\0\0\x01\0\0\0", 8 }, /* first > end */
		{ 12, "\x01\0\0\0", 4 },	   /* short */
		{ 14, "\0\0\0\0", 4 },		   /* parent 0 */
	};
	for (size_t i = 0; i < sizeof(bad_val) / sizeof(bad_val[0]); i++) {
		/* Built from scratch with the bad value in place of the good one. */
		struct gw_handover g = sample();
		struct buf base;
		encode(&g, &base);
		buf_reset(&b);
		/* Walk the good records, replacing the one with this tag. */
		size_t pos = 0;
		bool replaced = false;
		while (pos < base.len) {
			uint8_t t = (uint8_t)base.data[pos];
			uint32_t l;
			memcpy(&l, base.data + pos + 1, 4);
			if (t == bad_val[i].tag && !replaced) {
				rec(&b, t, bad_val[i].p, bad_val[i].len);
				replaced = true;
			} else {
				assert_int_equal(buf_append(&b, base.data + pos, 5 + l), 0);
			}
			pos += 5 + l;
		}
		assert_true(replaced);
		assert_int_equal(decode_buf(&b), -EBADMSG);
		buf_free(&base);
	}

	/* Required fields: each one dropped in turn. */
	static const uint8_t required[] = { 1, 2, 10, 11, 12, 13, 14, 15, 16 };
	for (size_t i = 0; i < sizeof(required); i++) {
		buf_reset(&b);
		size_t pos = 0;
		while (pos < good.len) {
			uint8_t t = (uint8_t)good.data[pos];
			uint32_t l;
			memcpy(&l, good.data + pos + 1, 4);
			if (t != required[i])
				assert_int_equal(buf_append(&b, good.data + pos, 5 + l), 0);
			pos += 5 + l;
		}
		assert_true(b.len < good.len);
		assert_int_equal(decode_buf(&b), -EBADMSG);
	}

	/* A policy file and a policy text. */
	buf_reset(&b);
	assert_int_equal(buf_append(&b, good.data, good.len), 0);
	rec(&b, 4, "rules: []", 9);
	assert_int_equal(decode_buf(&b), -EBADMSG);

	/* Detached and tied to a parent at once. */
	buf_reset(&b);
	size_t pos = 0;
	while (pos < good.len) {
		uint8_t t = (uint8_t)good.data[pos];
		uint32_t l;
		memcpy(&l, good.data + pos + 1, 4);
		if (t == 13)
			rec(&b, 13, "\x01", 1);
		else
			assert_int_equal(buf_append(&b, good.data + pos, 5 + l), 0);
		pos += 5 + l;
	}
	assert_int_equal(decode_buf(&b), -EBADMSG);

	buf_free(&b);
	buf_free(&good);
}

static void test_list_limit(void **state)
{
	static char *many[GW_HANDOVER_LIST_MAX + 1];
	for (size_t i = 0; i < GW_HANDOVER_LIST_MAX + 1; i++)
		many[i] = host;
	struct gw_handover h = sample();
	h.opts.allow = many;
	h.opts.n_allow = GW_HANDOVER_LIST_MAX;
	struct buf b;
	encode(&h, &b);
	assert_int_equal(decode_buf(&b), 0);
	/* One more, by hand: refused by the decoder as by the encoder. */
	rec(&b, 5, "host.example", 13);
	assert_int_equal(decode_buf(&b), -EBADMSG);
	buf_free(&b);
	h.opts.n_allow = GW_HANDOVER_LIST_MAX + 1;
	buf_init(&b, GW_HANDOVER_MAX);
	assert_int_equal(gw_handover_encode(&h, &b), -E2BIG);
	assert_int_equal(b.len, 0);
	buf_free(&b);
	/* --allow-cidr the same way; and every list full at once fits the
	 * frame's maximum. */
	h = sample();
	h.opts.allow_cidrs = many;
	h.opts.n_allow_cidrs = GW_HANDOVER_LIST_MAX;
	encode(&h, &b);
	assert_int_equal(decode_buf(&b), 0);
	rec(&b, 17, "host.example", 13);
	assert_int_equal(decode_buf(&b), -EBADMSG);
	buf_free(&b);
	static char full[GW_HANDOVER_STR_MAX];
	memset(full, 'a', sizeof(full) - 1);
	static char *longest[GW_HANDOVER_LIST_MAX];
	for (size_t i = 0; i < GW_HANDOVER_LIST_MAX; i++)
		longest[i] = full;
	h.opts.allow = h.opts.grants = h.opts.upstreams = h.opts.upstream_cas = longest;
	h.opts.allow_cidrs = longest;
	h.opts.n_allow = h.opts.n_grants = h.opts.n_upstreams = h.opts.n_upstream_cas =
		GW_HANDOVER_LIST_MAX;
	h.opts.n_allow_cidrs = GW_HANDOVER_LIST_MAX;
	encode(&h, &b);
	assert_int_equal(decode_buf(&b), 0);
	buf_free(&b);
	h.opts.n_allow_cidrs = GW_HANDOVER_LIST_MAX + 1;
	buf_init(&b, GW_HANDOVER_MAX);
	assert_int_equal(gw_handover_encode(&h, &b), -E2BIG);
	buf_free(&b);
}

static void test_encoder_refuses(void **state)
{
	struct buf b = BUF_INIT(GW_HANDOVER_MAX);
	struct gw_handover h = sample();
	h.opts.mode = GW_MODE_NONE;
	assert_int_equal(gw_handover_encode(&h, &b), -EINVAL);
	h = sample();
	h.opts.policy_text = "x";
	h.opts.policy_len = 1;
	assert_int_equal(gw_handover_encode(&h, &b), -EINVAL); /* file and text */
	h = sample();
	h.uid = 0;
	assert_int_equal(gw_handover_encode(&h, &b), -EINVAL);
	h = sample();
	h.parent = 0; /* neither detached nor tied */
	assert_int_equal(gw_handover_encode(&h, &b), -EINVAL);
	h = sample();
	h.opts.label = "";
	assert_int_equal(gw_handover_encode(&h, &b), -EINVAL);
	h = sample();
	h.env_ca = NULL;
	assert_int_equal(gw_handover_encode(&h, &b), -EINVAL);
	h = sample();
	char *longs = malloc(GW_HANDOVER_STR_MAX + 1);
	assert_non_null(longs);
	memset(longs, 'a', GW_HANDOVER_STR_MAX);
	longs[GW_HANDOVER_STR_MAX] = '\0';
	h.opts.vault_file = longs;
	assert_int_equal(gw_handover_encode(&h, &b), -E2BIG);
	free(longs);
	h = sample();
	h.opts.policy_file = NULL;
	h.opts.policy_text = "";
	h.opts.policy_len = (size_t)GW_HANDOVER_POLICY_MAX + 1;
	assert_int_equal(gw_handover_encode(&h, &b), -E2BIG);
	/* Nothing left behind by a refusal. */
	assert_int_equal(b.len, 0);
	buf_free(&b);
}

static void test_ready(void **state)
{
	static const char pem[] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
	static char e1[] = "HTTP_PROXY=http://127.0.0.1:3128",
		    e2[] = "EXAMPLE_API_KEY=airlock-dummy";
	char *env[] = { e1, e2 };
	struct buf b = BUF_INIT(GW_READY_MAX);
	assert_int_equal(gw_ready_encode(pem, sizeof(pem) - 1, env, 2, &b), 0);
	struct gw_ready *rd = malloc(sizeof(*rd));
	assert_non_null(rd);
	assert_int_equal(gw_ready_decode((uint8_t *)b.data, b.len, rd), 0);
	assert_int_equal(rd->pem_len, sizeof(pem) - 1);
	assert_memory_equal(rd->pem, pem, rd->pem_len);
	assert_int_equal(rd->n_env, 2);
	assert_string_equal(rd->env[0], env[0]);
	assert_string_equal(rd->env[1], env[1]);
	/* Truncations, a second certificate, an unknown tag, bad variables. */
	/* (Whole records, the certificate's first, are an answer.) */
	size_t whole[] = { 5 + sizeof(pem) - 1, 5 + sizeof(pem) - 1 + 5 + strlen(env[0]) + 1 };
	for (size_t n = 0; n < b.len; n++)
		if (n != whole[0] && n != whole[1])
			assert_int_equal(gw_ready_decode((uint8_t *)b.data, n, rd), -EBADMSG);
	assert_int_equal(gw_ready_decode((uint8_t *)b.data, whole[1], rd), 0);
	assert_int_equal(rd->n_env, 1);
	struct buf c = BUF_INIT(GW_READY_MAX);
	assert_int_equal(buf_append(&c, b.data, b.len), 0);
	rec(&c, 1, "x", 1);
	assert_int_equal(gw_ready_decode((uint8_t *)c.data, c.len, rd), -EBADMSG);
	buf_reset(&c);
	assert_int_equal(buf_append(&c, b.data, b.len), 0);
	rec(&c, 9, "A=b", 4);
	assert_int_equal(gw_ready_decode((uint8_t *)c.data, c.len, rd), -EBADMSG);
	static const char *const bad_env[] = { "NOEQUALS", "=value" };
	for (size_t i = 0; i < 2; i++) {
		buf_reset(&c);
		assert_int_equal(buf_append(&c, b.data, b.len), 0);
		rec(&c, 2, bad_env[i], (uint32_t)strlen(bad_env[i]) + 1);
		assert_int_equal(gw_ready_decode((uint8_t *)c.data, c.len, rd), -EBADMSG);
	}
	/* No certificate at all. */
	buf_reset(&c);
	rec(&c, 2, "A=b", 4);
	assert_int_equal(gw_ready_decode((uint8_t *)c.data, c.len, rd), -EBADMSG);
	/* The encoder refuses what the decoder would. */
	static char noeq[] = "NOEQUALS";
	char *bad[] = { noeq };
	buf_reset(&c);
	assert_int_equal(gw_ready_encode(pem, sizeof(pem) - 1, bad, 1, &c), -EINVAL);
	assert_int_equal(gw_ready_encode("", 0, NULL, 0, &c), -EINVAL);
	assert_int_equal(c.len, 0);
	free(rd);
	buf_free(&b);
	buf_free(&c);
}

static void test_uid(void **state)
{
	struct al_error err = { 0 };
	uint32_t uid = 0;
	unsetenv("AIRLOCK_GATEWAY_UID");
	assert_int_equal(gw_uid_from_env(&uid, &err), 0);
	assert_int_equal(uid, GW_DEFAULT_UID);
	setenv("AIRLOCK_GATEWAY_UID", "1879048192", 1);
	assert_int_equal(gw_uid_from_env(&uid, &err), 0);
	assert_int_equal(uid, 0x70000000);
	setenv("AIRLOCK_GATEWAY_UID", "0x5ffffffe", 1);
	assert_int_equal(gw_uid_from_env(&uid, &err), 0);
	assert_int_equal(uid, 0x5ffffffe);
	static const char *const bad[] = { "0",	 "4294967295", "99999999999", "-1",
					   "0x", "0xzz",       "12a",	      " 5" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("AIRLOCK_GATEWAY_UID", bad[i], 1);
		al_error_clear(&err);
		uid = 7;
		assert_int_equal(gw_uid_from_env(&uid, &err), -EINVAL);
		assert_int_equal(uid, 7);
		assert_non_null(strstr(al_error_message(&err), "AIRLOCK_GATEWAY_UID"));
	}
	unsetenv("AIRLOCK_GATEWAY_UID");

	/* The default uid against ranges that reach it, and ones that do not. */
	al_error_clear(&err);
	assert_int_equal(gw_uid_check(0x5fffffff, 0x50000000, 0x60000000, &err), -EINVAL);
	assert_non_null(strstr(al_error_message(&err), "0x5fffffff"));
	assert_non_null(strstr(al_error_message(&err), "0x50000000-0x5fffffff"));
	assert_int_equal(gw_uid_check(0x50000000, 0x50000000, 0x60000000, NULL), -EINVAL);
	assert_int_equal(gw_uid_check(0x5fffffff, 0x60000000, 0x70000000, NULL), 0);
	assert_int_equal(gw_uid_check(0x5fffffff, 0x4fffffff, 0x5fffffff, NULL), 0);
	assert_int_equal(gw_uid_check(0x5fffffff, 0, 0, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),  cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_list_limit), cmocka_unit_test(test_encoder_refuses),
		cmocka_unit_test(test_ready),	   cmocka_unit_test(test_uid),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "gateway/dns.h"

#define FILL 0xa5
#define T_A 1
#define T_MX 15
#define T_TXT 16
#define T_AAAA 28
#define T_ANY 255

/* What the policy saw. */
struct seen {
	size_t calls;
	char name[GW_DNS_NAME_MAX + 2];
	bool allow_all;
};

static bool allow(const char *name, void *userdata)
{
	struct seen *s = userdata;
	s->calls++;
	snprintf(s->name, sizeof(s->name), "%s", name);
	return s->allow_all || strcmp(name, "example.com") == 0 ||
	       strcmp(name, "www.example.com") == 0 || strcmp(name, "a_b-c.example") == 0;
}

static struct seen seen;

static struct gw_dns_config config(bool have_ipv6)
{
	memset(&seen, 0, sizeof(seen));
	struct gw_dns_config cfg = {
		.ipv4 = { 10, 0, 2, 1 },
		.have_ipv6 = have_ipv6,
		.ipv6 = { 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 },
		.ttl = 60,
		.allow = allow,
		.userdata = &seen,
	};
	return cfg;
}

/* A query message under construction. */
struct msg {
	uint8_t b[1024];
	size_t len;
};

static void put(struct msg *m, const void *p, size_t n)
{
	assert_true(m->len + n <= sizeof(m->b));
	memcpy(m->b + m->len, p, n);
	m->len += n;
}

static void put8(struct msg *m, uint8_t v)
{
	put(m, &v, 1);
}

static void put16(struct msg *m, uint16_t v)
{
	put8(m, (uint8_t)(v >> 8));
	put8(m, (uint8_t)v);
}

static void header(struct msg *m, uint16_t id, uint8_t f1, uint8_t f2, uint16_t qd, uint16_t an,
		   uint16_t ns, uint16_t ar)
{
	m->len = 0;
	put16(m, id);
	put8(m, f1);
	put8(m, f2);
	put16(m, qd);
	put16(m, an);
	put16(m, ns);
	put16(m, ar);
}

/* Wire form of a dotted name ("" is the root). */
static void name(struct msg *m, const char *dotted)
{
	const char *p = dotted;
	while (*p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		put8(m, (uint8_t)n);
		put(m, p, n);
		p += n;
		if (*p == '.')
			p++;
	}
	put8(m, 0);
}

static void query(struct msg *m, uint16_t id, const char *dotted, uint16_t type, uint16_t cls)
{
	header(m, id, 0x01, 0x00, 1, 0, 0, 0);
	name(m, dotted);
	put16(m, type);
	put16(m, cls);
}

/* An OPT RR with an empty RDATA, payload size 1232. */
static void opt(struct msg *m)
{
	put8(m, 0);
	put16(m, 41);
	put16(m, 1232);
	put16(m, 0);
	put16(m, 0x8000); /* DO */
	put16(m, 0);
}

/* Answers q from an exact-size copy into an exact 512-byte buffer, so a
 * sanitized build sees any access past either; checks nothing was written
 * past the returned length. */
static size_t answer_len(const struct gw_dns_config *cfg, const uint8_t *q, size_t qlen,
			 uint8_t out[GW_DNS_MAX_MSG])
{
	_cleanup_free_ uint8_t *exact = malloc(qlen ? qlen : 1);
	_cleanup_free_ uint8_t *buf = malloc(GW_DNS_MAX_MSG);
	assert_non_null(exact);
	assert_non_null(buf);
	if (qlen)
		memcpy(exact, q, qlen);
	memset(buf, FILL, GW_DNS_MAX_MSG);
	size_t n = gw_dns_answer(cfg, exact, qlen, buf, GW_DNS_MAX_MSG);
	assert_true(n <= GW_DNS_MAX_MSG);
	for (size_t i = n; i < GW_DNS_MAX_MSG; i++)
		assert_int_equal(buf[i], FILL);
	memcpy(out, buf, GW_DNS_MAX_MSG);
	return n;
}

static size_t answer(const struct gw_dns_config *cfg, const struct msg *m,
		     uint8_t out[GW_DNS_MAX_MSG])
{
	return answer_len(cfg, m->b, m->len, out);
}

static uint16_t u16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

/* Header checks common to every answer. */
static void check_header(const uint8_t *out, const struct msg *m, int rcode, uint16_t qd,
			 uint16_t an)
{
	assert_int_equal(u16(out), u16(m->b));
	/* QR, the query's opcode, AA, TC clear, the query's RD. */
	assert_int_equal(out[2], 0x80 | (m->b[2] & 0x78) | 0x04 | (m->b[2] & 0x01));
	/* RA, Z, AD, CD all clear. */
	assert_int_equal(out[3], rcode);
	assert_int_equal(u16(out + 4), qd);
	assert_int_equal(u16(out + 6), an);
	assert_int_equal(u16(out + 8), 0);
	assert_int_equal(u16(out + 10), 0);
}

/* The question of the well-formed query m, as echoed. */
static size_t question_len(const struct msg *m)
{
	size_t i = 12;
	while (m->b[i])
		i += 1u + m->b[i];
	return i + 1 + 4 - 12;
}

static void check_rcode(const struct msg *m, int rcode, bool echo)
{
	struct gw_dns_config cfg = config(true);
	uint8_t out[GW_DNS_MAX_MSG];
	size_t n = answer(&cfg, m, out);
	size_t ql = echo ? question_len(m) : 0;
	assert_int_equal(n, 12 + ql);
	check_header(out, m, rcode, echo ? 1 : 0, 0);
	if (echo)
		assert_memory_equal(out + 12, m->b + 12, ql);
}

/* Malformed: FORMERR, nothing echoed, allow() never asked. */
static void check_malformed(const struct msg *m)
{
	struct gw_dns_config cfg = config(true);
	uint8_t out[GW_DNS_MAX_MSG];
	assert_int_equal(answer(&cfg, m, out), 12);
	check_header(out, m, 1, 0, 0);
	assert_int_equal(seen.calls, 0);
}

static void test_a_allowed(void **state)
{
	struct msg m;
	query(&m, 0xbeef, "example.com", T_A, 1);
	struct gw_dns_config cfg = config(false);
	uint8_t out[GW_DNS_MAX_MSG];
	static const uint8_t want[] = {
		0xbe, 0xef, 0x85, 0x00, 0,   1,	  0,   1,   0, 0,   0,	 0,	 /* header */
		7,    'e',  'x',  'a',	'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, /* name */
		0,    1,    0,	  1,						 /* A IN */
		0xc0, 0x0c, 0,	  1,	0,   1,	  0,   0,   0, 60,  0,	 4,   10, 0, 2, 1, /* RR */
	};
	assert_int_equal(answer(&cfg, &m, out), sizeof(want));
	assert_memory_equal(out, want, sizeof(want));
	assert_int_equal(seen.calls, 1);
	assert_string_equal(seen.name, "example.com");

	/* RD clear in the query: clear in the answer; TTL from cfg. */
	m.b[2] = 0;
	cfg.ttl = 0x01020304;
	assert_int_equal(answer(&cfg, &m, out), sizeof(want));
	assert_int_equal(out[2], 0x84);
	assert_memory_equal(out + 35, "\x01\x02\x03\x04", 4);
	/* Past 2^31 - 1 the TTL is capped (RFC 2181 section 8). */
	cfg.ttl = 0xffffffffu;
	assert_int_equal(answer(&cfg, &m, out), sizeof(want));
	assert_memory_equal(out + 35, "\x7f\xff\xff\xff", 4);
}

static void test_aaaa(void **state)
{
	struct msg m;
	query(&m, 0x1234, "www.example.com", T_AAAA, 1);
	struct gw_dns_config cfg = config(true);
	uint8_t out[GW_DNS_MAX_MSG];
	size_t ql = question_len(&m);
	size_t n = answer(&cfg, &m, out);
	assert_int_equal(n, 12 + ql + 12 + 16);
	check_header(out, &m, 0, 1, 1);
	assert_memory_equal(out + 12, m.b + 12, ql);
	static const uint8_t rr[] = {
		0xc0, 0x0c, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16, 0xfd, 0,
		0,    0,    0, 0,  0, 0, 0, 0, 0, 0,  0, 0,  0,	   1,
	};
	assert_memory_equal(out + 12 + ql, rr, sizeof(rr));
	assert_string_equal(seen.name, "www.example.com");

	/* Without IPv6: the name exists, the type has no data. */
	cfg = config(false);
	assert_int_equal(answer(&cfg, &m, out), 12 + ql);
	check_header(out, &m, 0, 1, 0);
	assert_int_equal(seen.calls, 1);
}

static void test_other_types(void **state)
{
	static const uint16_t types[] = { T_TXT, T_MX, T_ANY, 5, 2, 6, 12, 33, 0, 65535 };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		struct msg m;
		query(&m, (uint16_t)i, "example.com", types[i], 1);
		check_rcode(&m, 0, true);
		assert_int_equal(seen.calls, 1);
	}
}

static void test_denied(void **state)
{
	static const uint16_t types[] = { T_A, T_AAAA, T_TXT, T_MX, T_ANY };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		struct msg m;
		query(&m, 7, "evil.example.net", types[i], 1);
		check_rcode(&m, 3, true);
		assert_int_equal(seen.calls, 1);
		assert_string_equal(seen.name, "evil.example.net");
		/* Suffixes and prefixes of allowed names are other names. */
		query(&m, 7, "xexample.com", types[i], 1);
		check_rcode(&m, 3, true);
		query(&m, 7, "com", types[i], 1);
		check_rcode(&m, 3, true);
	}
	/* No callback: nothing is allowed. */
	struct msg m;
	query(&m, 7, "example.com", T_A, 1);
	struct gw_dns_config cfg = config(true);
	cfg.allow = NULL;
	uint8_t out[GW_DNS_MAX_MSG];
	assert_int_equal(answer(&cfg, &m, out), 12 + question_len(&m));
	check_header(out, &m, 3, 1, 0);
}

static void test_case(void **state)
{
	struct msg m;
	query(&m, 9, "WwW.ExAmple.COM", T_A, 1);
	struct gw_dns_config cfg = config(false);
	uint8_t out[GW_DNS_MAX_MSG];
	size_t ql = question_len(&m);
	assert_int_equal(answer(&cfg, &m, out), 12 + ql + 16);
	check_header(out, &m, 0, 1, 1);
	/* The question comes back as sent (0x20 randomization). */
	assert_memory_equal(out + 12, m.b + 12, ql);
	assert_memory_equal(out + 13, "WwW", 3);
	assert_int_equal(seen.calls, 1);
	assert_string_equal(seen.name, "www.example.com");

	query(&m, 9, "A_B-C.EXAMPLE", T_TXT, 1);
	check_rcode(&m, 0, true);
	assert_string_equal(seen.name, "a_b-c.example");
}

static void test_class(void **state)
{
	static const uint16_t classes[] = { 3, 4, 254, 255, 0, 2 };
	for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
		struct msg m;
		query(&m, 11, "example.com", T_A, classes[i]);
		check_rcode(&m, 4, true);
		assert_int_equal(seen.calls, 0);
	}
}

static void test_opcode(void **state)
{
	for (unsigned op = 1; op < 16; op++) {
		struct msg m;
		query(&m, 12, "example.com", T_A, 1);
		m.b[2] = (uint8_t)(op << 3 | 0x01);
		check_rcode(&m, 1, true);
		assert_int_equal(seen.calls, 0);
	}
}

static void test_response_ignored(void **state)
{
	struct msg m;
	query(&m, 13, "example.com", T_A, 1);
	m.b[2] |= 0x80;
	struct gw_dns_config cfg = config(true);
	uint8_t out[GW_DNS_MAX_MSG];
	assert_int_equal(answer(&cfg, &m, out), 0);
	assert_int_equal(seen.calls, 0);
	/* Even a response header alone. */
	assert_int_equal(answer_len(&cfg, m.b, 12, out), 0);
}

static void test_short(void **state)
{
	struct msg m;
	query(&m, 14, "example.com", T_A, 1);
	struct gw_dns_config cfg = config(true);
	uint8_t out[GW_DNS_MAX_MSG];
	for (size_t k = 0; k < 12; k++)
		assert_int_equal(answer_len(&cfg, m.b, k, out), 0);
	assert_int_equal(gw_dns_answer(&cfg, NULL, 0, out, sizeof(out)), 0);
	/* A buffer below the documented minimum gets nothing written. */
	memset(out, FILL, sizeof(out));
	assert_int_equal(gw_dns_answer(&cfg, m.b, m.len, out, GW_DNS_MAX_MSG - 1), 0);
	assert_int_equal(out[0], FILL);
	assert_int_equal(gw_dns_answer(NULL, m.b, m.len, out, sizeof(out)), 0);
	assert_int_equal(seen.calls, 0);
}

static void test_truncated(void **state)
{
	struct msg m;
	query(&m, 15, "www.example.com", T_A, 1);
	for (size_t k = 12; k < m.len; k++) {
		struct msg p = m;
		p.len = k;
		check_malformed(&p);
	}
	/* With an OPT record holding one empty option: once the question
	 * is whole it is echoed. */
	query(&m, 15, "www.example.com", T_TXT, 1);
	m.b[11] = 1;
	struct msg full = m;
	opt(&full);
	full.b[full.len - 1] = 4;
	put16(&full, 10);
	put16(&full, 0);
	check_rcode(&full, 0, true);
	for (size_t k = m.len; k < full.len; k++) {
		struct msg p = full;
		p.len = k;
		check_rcode(&p, 1, true);
		assert_int_equal(seen.calls, 0);
	}
}

static void test_pointer(void **state)
{
	struct msg m;
	/* The whole name a pointer to itself, and a label then a pointer. */
	header(&m, 16, 1, 0, 1, 0, 0, 0);
	put16(&m, 0xc00c);
	put16(&m, T_A);
	put16(&m, 1);
	check_malformed(&m);
	header(&m, 16, 1, 0, 1, 0, 0, 0);
	put8(&m, 3);
	put(&m, "www", 3);
	put16(&m, 0xc00c);
	put16(&m, T_A);
	put16(&m, 1);
	check_malformed(&m);
	/* The extended (0x40) and reserved (0x80) label types. */
	static const uint8_t kinds[] = { 0x40, 0x41, 0x7f, 0x80, 0xbf, 0xff };
	for (size_t i = 0; i < sizeof(kinds); i++) {
		header(&m, 16, 1, 0, 1, 0, 0, 0);
		put8(&m, kinds[i]);
		put(&m, "example", 7);
		put8(&m, 0);
		put16(&m, T_A);
		put16(&m, 1);
		check_malformed(&m);
	}
}

static void fill_name(char *buf, size_t len)
{
	/* Labels of 63 separated by dots: "aaa...a.aaa...a..." */
	for (size_t i = 0; i < len; i++)
		buf[i] = (i + 1) % 64 == 0 ? '.' : (char)('a' + i % 26);
	buf[len] = '\0';
}

static void test_label_length(void **state)
{
	char label[67];
	memset(label, 'x', sizeof(label));
	memcpy(label + 63, ".io", 4);
	struct msg m;
	query(&m, 17, label, T_A, 1);
	struct gw_dns_config cfg = config(false);
	seen.allow_all = true;
	uint8_t out[GW_DNS_MAX_MSG];
	assert_int_equal(answer(&cfg, &m, out), 12 + question_len(&m) + 16);
	check_header(out, &m, 0, 1, 1);
	assert_string_equal(seen.name, label);

	/* 64 bytes: the length byte is 0x40, an extended label type. */
	char longer[68];
	memset(longer, 'x', sizeof(longer));
	memcpy(longer + 64, ".io", 4);
	query(&m, 17, longer, T_A, 1);
	assert_int_equal(m.b[12], 64);
	check_malformed(&m);
}

static void test_name_length(void **state)
{
	char n[GW_DNS_NAME_MAX + 2];
	fill_name(n, GW_DNS_NAME_MAX);
	assert_int_not_equal(n[GW_DNS_NAME_MAX - 1], '.');
	struct msg m;
	query(&m, 18, n, T_AAAA, 1);
	assert_int_equal(m.len, 12 + 255 + 4);
	struct gw_dns_config cfg = config(true);
	seen.allow_all = true;
	uint8_t out[GW_DNS_MAX_MSG];
	/* The largest answer there is. */
	assert_int_equal(answer(&cfg, &m, out), 12 + 255 + 4 + 28);
	check_header(out, &m, 0, 1, 1);
	assert_string_equal(seen.name, n);

	fill_name(n, GW_DNS_NAME_MAX + 1);
	query(&m, 18, n, T_A, 1);
	check_malformed(&m);
	/* And a chain of labels that never ends within the message. */
	header(&m, 18, 1, 0, 1, 0, 0, 0);
	for (int i = 0; i < 200; i++) {
		put8(&m, 1);
		put8(&m, 'a');
	}
	check_malformed(&m);
}

static void test_charset(void **state)
{
	static const char bad[] = { '.',    ' ',    '*',    '/', '\\', '@', '"', '\0', '\n', '\x7f',
				    '\x80', '\xc3', '\xff', '(', '=',  ':', '+', '~',  '$' };
	for (size_t i = 0; i < sizeof(bad); i++) {
		struct msg m;
		query(&m, 19, "abc.example.com", T_A, 1);
		m.b[14] = (uint8_t)bad[i]; /* the 'b' */
		check_malformed(&m);
		/* In the last label too. */
		query(&m, 19, "abc.example.com", T_A, 1);
		m.b[12 + 4 + 8 + 1] = (uint8_t)bad[i];
		check_malformed(&m);
	}
	struct msg m;
	query(&m, 19, "-_-.0-9._", T_A, 1);
	check_rcode(&m, 3, true);
	assert_string_equal(seen.name, "-_-.0-9._");
}

static void test_trailing(void **state)
{
	struct msg m;
	query(&m, 20, "example.com", T_A, 1);
	put8(&m, 0);
	check_rcode(&m, 1, true);
	assert_int_equal(seen.calls, 0);
	/* After an OPT record too. */
	query(&m, 20, "example.com", T_A, 1);
	m.b[11] = 1;
	opt(&m);
	put8(&m, 0);
	check_rcode(&m, 1, true);
	assert_int_equal(seen.calls, 0);
}

static void test_counts(void **state)
{
	struct msg m;
	static const uint16_t qd[] = { 0, 2, 0xffff };
	for (size_t i = 0; i < sizeof(qd) / sizeof(qd[0]); i++) {
		query(&m, 21, "example.com", T_A, 1);
		m.b[4] = (uint8_t)(qd[i] >> 8);
		m.b[5] = (uint8_t)qd[i];
		check_malformed(&m);
	}
	header(&m, 21, 1, 0, 0, 0, 0, 0);
	check_malformed(&m);
	/* Answer or authority records in a query. */
	for (int at = 6; at <= 8; at += 2) {
		query(&m, 21, "example.com", T_A, 1);
		m.b[at + 1] = 1;
		check_rcode(&m, 1, true);
		assert_int_equal(seen.calls, 0);
	}
}

static void test_opt(void **state)
{
	struct msg m;
	query(&m, 22, "example.com", T_A, 1);
	m.b[11] = 1;
	size_t qend = m.len;
	opt(&m);
	struct gw_dns_config cfg = config(false);
	uint8_t out[GW_DNS_MAX_MSG];
	size_t ql = question_len(&m);
	/* Answered as without it; no OPT comes back. */
	assert_int_equal(answer(&cfg, &m, out), 12 + ql + 16);
	check_header(out, &m, 0, 1, 1);
	assert_int_equal(seen.calls, 1);

	/* With options that tile the RDATA (an odd-sized one and an empty
	 * one). */
	m.len = qend;
	opt(&m);
	m.b[m.len - 1] = 17;
	put16(&m, 10);
	put16(&m, 9);
	put(&m, "cookie!!!", 9);
	put16(&m, 12);
	put16(&m, 0);
	assert_int_equal(answer(&cfg, &m, out), 12 + ql + 16);
	check_header(out, &m, 0, 1, 1);

	/* An option running past the RDATA. */
	m.len = qend;
	opt(&m);
	m.b[m.len - 1] = 6;
	put16(&m, 10);
	put16(&m, 8);
	put(&m, "co", 2);
	check_rcode(&m, 1, true);
	assert_int_equal(seen.calls, 0);
	/* RDATA running past the message (by 1, and by a whole option). */
	m.len = qend;
	opt(&m);
	m.b[m.len - 1] = 1;
	check_rcode(&m, 1, true);
	m.b[m.len - 1] = 8;
	put16(&m, 12);
	put16(&m, 0);
	check_rcode(&m, 1, true);
	/* An owner byte that is not the root, followed by an OPT. */
	m.len = qend;
	opt(&m);
	m.b[qend] = 1;
	check_rcode(&m, 1, true);
	/* An owner other than the root. */
	m.len = qend;
	put8(&m, 1);
	put8(&m, 'a');
	opt(&m);
	check_rcode(&m, 1, true);
	/* A compressed owner. */
	m.len = qend;
	opt(&m);
	m.b[qend] = 0xc0;
	m.b[qend + 1] = 0x0c;
	check_rcode(&m, 1, true);
	/* An additional record that is not an OPT. */
	m.len = qend;
	opt(&m);
	m.b[qend + 2] = T_A;
	check_rcode(&m, 1, true);
	assert_int_equal(seen.calls, 0);

	/* Two additional records, whatever they are. */
	m.len = qend;
	m.b[11] = 2;
	opt(&m);
	opt(&m);
	check_rcode(&m, 1, true);
	m.len = qend;
	opt(&m);
	check_rcode(&m, 1, true);
	assert_int_equal(seen.calls, 0);
	/* ARCOUNT 1 and nothing there. */
	m.len = qend;
	m.b[11] = 1;
	check_rcode(&m, 1, true);
}

static void test_root(void **state)
{
	struct msg m;
	query(&m, 23, "", T_A, 1);
	assert_int_equal(m.len, 12 + 1 + 4);
	struct gw_dns_config cfg = config(true);
	seen.allow_all = true;
	uint8_t out[GW_DNS_MAX_MSG];
	assert_int_equal(answer(&cfg, &m, out), 12 + 5);
	check_header(out, &m, 3, 1, 0);
	assert_int_equal(seen.calls, 0);
	query(&m, 23, "", 2 /* NS */, 1);
	check_rcode(&m, 3, true);
	assert_int_equal(seen.calls, 0);
}

static void test_flags(void **state)
{
	/* Whatever else the query sets, the answer's flags are ours. */
	struct msg m;
	query(&m, 24, "example.com", T_TXT, 1);
	m.b[2] = 0x07; /* AA, TC, RD */
	m.b[3] = 0xff; /* RA, Z, AD, CD, RCODE 15 */
	struct gw_dns_config cfg = config(true);
	uint8_t out[GW_DNS_MAX_MSG];
	assert_int_equal(answer(&cfg, &m, out), 12 + question_len(&m));
	assert_int_equal(out[2], 0x85);
	assert_int_equal(out[3], 0x00);
	m.b[2] = 0x06;
	assert_int_equal(answer(&cfg, &m, out), 12 + question_len(&m));
	assert_int_equal(out[2], 0x84);
	/* A FORMERR keeps the id and RD too. */
	m.b[2] = 0x01;
	m.b[5] = 2;
	assert_int_equal(answer(&cfg, &m, out), 12);
	assert_memory_equal(out, "\x00\x18\x85\x01\x00\x00\x00\x00\x00\x00\x00\x00", 12);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_allowed),   cmocka_unit_test(test_aaaa),
		cmocka_unit_test(test_other_types), cmocka_unit_test(test_denied),
		cmocka_unit_test(test_case),	    cmocka_unit_test(test_class),
		cmocka_unit_test(test_opcode),	    cmocka_unit_test(test_response_ignored),
		cmocka_unit_test(test_short),	    cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_pointer),	    cmocka_unit_test(test_label_length),
		cmocka_unit_test(test_name_length), cmocka_unit_test(test_charset),
		cmocka_unit_test(test_trailing),    cmocka_unit_test(test_counts),
		cmocka_unit_test(test_opt),	    cmocka_unit_test(test_root),
		cmocka_unit_test(test_flags),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

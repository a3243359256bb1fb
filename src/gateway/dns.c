/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DNS stub's message side: one query datagram in, one answer out.
 * The query comes from a hostile sandbox, so the parser reads every byte
 * through a bounds-checked cursor and refuses anything it does not fully
 * understand; the answer is built from scratch (never from query bytes
 * other than the id, the RD bit and a question already validated), and is
 * at most 12 + 259 + 28 bytes, well inside GW_DNS_MAX_MSG.
 *
 * Decisions where dns.h leaves room (all of them refusals or omissions):
 *   - the question is echoed only when QDCOUNT is 1 and it parsed cleanly;
 *     every other FORMERR carries QDCOUNT=0;
 *   - the root name is never passed to allow(): NXDOMAIN;
 *   - an OPT record is checked (root owner, option list tiling RDATA) and
 *     then ignored: the answer carries no OPT, so the client stays at 512
 *     bytes, which is all we ever send;
 *   - the TTL is capped at 2^31 - 1 (RFC 2181 section 8);
 *   - the opcode is copied into the answer (RFC 1035 4.1.1), RD is echoed,
 *     TC, Z, AD and CD are zero.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gateway/dns.h"

#define DNS_HEADER_LEN 12
#define DNS_LABEL_MAX 63
#define DNS_TTL_MAX 0x7fffffffu

#define DNS_FLAG_QR 0x80 /* in the first flags byte */
#define DNS_FLAG_AA 0x04
#define DNS_FLAG_RD 0x01
#define DNS_OPCODE_MASK 0x78

#define DNS_RCODE_NOERROR 0
#define DNS_RCODE_FORMERR 1
#define DNS_RCODE_NXDOMAIN 3
#define DNS_RCODE_NOTIMP 4

#define DNS_TYPE_A 1
#define DNS_TYPE_AAAA 28
#define DNS_TYPE_OPT 41
#define DNS_CLASS_IN 1

/* A read-only view of the query with a position; every read is checked. */
struct dns_cursor {
	const uint8_t *p;
	size_t len;
	size_t pos;
};

struct dns_question {
	size_t wire_len; /* the question's bytes from offset 12: name, type, class */
	uint16_t qtype;
	uint16_t qclass;
	size_t name_len;
	char name[GW_DNS_NAME_MAX + 1];
};

static bool cursor_u8(struct dns_cursor *c, uint8_t *ret)
{
	if (c->pos >= c->len)
		return false;
	*ret = c->p[c->pos++];
	return true;
}

static bool cursor_u16(struct dns_cursor *c, uint16_t *ret)
{
	if (c->len - c->pos < 2)
		return false;
	*ret = (uint16_t)((c->p[c->pos] << 8) | c->p[c->pos + 1]);
	c->pos += 2;
	return true;
}

static bool cursor_skip(struct dns_cursor *c, size_t n)
{
	if (c->len - c->pos < n)
		return false;
	c->pos += n;
	return true;
}

static uint16_t get_u16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static void put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static bool is_label_byte(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

static char lower(uint8_t c)
{
	return (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
}

/* The question at c->pos: uncompressed labels only, decoded lower-cased
 * with '.' joins into a buffer that holds GW_DNS_NAME_MAX characters. */
static bool parse_question(struct dns_cursor *c, struct dns_question *ret)
{
	size_t start = c->pos;
	size_t n = 0;

	for (;;) {
		uint8_t len;
		if (!cursor_u8(c, &len))
			return false;
		if (len == 0)
			break;
		/* 0xC0 is a compression pointer, 0x40 and 0x80 are the
		 * extended and reserved label types: none belongs in a
		 * question we answer. */
		if (len > DNS_LABEL_MAX)
			return false;
		size_t need = (n > 0 ? 1 : 0) + len;
		if (need > GW_DNS_NAME_MAX - n)
			return false;
		if (c->len - c->pos < len)
			return false;
		if (n > 0)
			ret->name[n++] = '.';
		for (size_t i = 0; i < len; i++) {
			uint8_t b = c->p[c->pos + i];
			if (!is_label_byte(b))
				return false;
			ret->name[n++] = lower(b);
		}
		c->pos += len;
	}
	if (!cursor_u16(c, &ret->qtype) || !cursor_u16(c, &ret->qclass))
		return false;
	ret->name[n] = '\0';
	ret->name_len = n;
	ret->wire_len = c->pos - start;
	return true;
}

/* One OPT pseudo-RR (RFC 6891): root owner, type 41, then class (payload
 * size) and TTL (extended RCODE, version, flags), which we ignore, and
 * RDATA that must be a whole number of options. */
static bool parse_opt(struct dns_cursor *c)
{
	uint8_t owner;
	uint16_t type, rdlen;

	if (!cursor_u8(c, &owner) || owner != 0)
		return false;
	if (!cursor_u16(c, &type) || type != DNS_TYPE_OPT)
		return false;
	if (!cursor_skip(c, 2 + 4))
		return false;
	if (!cursor_u16(c, &rdlen))
		return false;
	if (c->len - c->pos < rdlen)
		return false;
	struct dns_cursor rd = { c->p + c->pos, rdlen, 0 };
	while (rd.pos < rd.len) {
		uint16_t code, optlen;
		if (!cursor_u16(&rd, &code) || !cursor_u16(&rd, &optlen) ||
		    !cursor_skip(&rd, optlen))
			return false;
	}
	c->pos += rdlen;
	return true;
}

/* The header and, when question is non-NULL, its echo; returns the length
 * written (out has room for GW_DNS_MAX_MSG bytes). */
static size_t write_head(uint8_t *out, const uint8_t *q, const struct dns_question *question,
			 int rcode, uint16_t ancount)
{
	out[0] = q[0];
	out[1] = q[1];
	out[2] = (uint8_t)(DNS_FLAG_QR | (q[2] & DNS_OPCODE_MASK) | DNS_FLAG_AA |
			   (q[2] & DNS_FLAG_RD));
	out[3] = (uint8_t)rcode; /* RA=0, Z=AD=CD=0 */
	put_u16(out + 4, question ? 1 : 0);
	put_u16(out + 6, ancount);
	put_u16(out + 8, 0);
	put_u16(out + 10, 0);
	if (!question)
		return DNS_HEADER_LEN;
	/* The question bytes as sent, case included (0x20 randomization). */
	memcpy(out + DNS_HEADER_LEN, q + DNS_HEADER_LEN, question->wire_len);
	return DNS_HEADER_LEN + question->wire_len;
}

static size_t write_answer(uint8_t *out, size_t n, uint16_t type, uint32_t ttl,
			   const uint8_t *rdata, uint16_t rdlen)
{
	put_u16(out + n, 0xc000 | DNS_HEADER_LEN); /* the question's name */
	put_u16(out + n + 2, type);
	put_u16(out + n + 4, DNS_CLASS_IN);
	put_u32(out + n + 6, ttl > DNS_TTL_MAX ? DNS_TTL_MAX : ttl);
	put_u16(out + n + 10, rdlen);
	memcpy(out + n + 12, rdata, rdlen);
	return n + 12 + rdlen;
}

size_t gw_dns_answer(const struct gw_dns_config *cfg, const uint8_t *q, size_t qlen, uint8_t *out,
		     size_t out_size)
{
	if (!cfg || !q || !out || out_size < GW_DNS_MAX_MSG)
		return 0;
	if (qlen < DNS_HEADER_LEN || (q[2] & DNS_FLAG_QR))
		return 0;

	uint16_t qdcount = get_u16(q + 4);
	uint16_t ancount = get_u16(q + 6);
	uint16_t nscount = get_u16(q + 8);
	uint16_t arcount = get_u16(q + 10);

	if (qdcount != 1)
		return write_head(out, q, NULL, DNS_RCODE_FORMERR, 0);

	struct dns_question question;
	struct dns_cursor c = { q, qlen, DNS_HEADER_LEN };
	if (!parse_question(&c, &question))
		return write_head(out, q, NULL, DNS_RCODE_FORMERR, 0);

	bool wellformed = (q[2] & DNS_OPCODE_MASK) == 0 && ancount == 0 && nscount == 0 &&
			  arcount <= 1;
	if (wellformed && arcount == 1)
		wellformed = parse_opt(&c);
	if (wellformed && c.pos != qlen)
		wellformed = false;
	if (!wellformed)
		return write_head(out, q, &question, DNS_RCODE_FORMERR, 0);

	if (question.qclass != DNS_CLASS_IN)
		return write_head(out, q, &question, DNS_RCODE_NOTIMP, 0);

	if (question.name_len == 0 || !cfg->allow || !cfg->allow(question.name, cfg->userdata))
		return write_head(out, q, &question, DNS_RCODE_NXDOMAIN, 0);

	if (question.qtype == DNS_TYPE_A) {
		size_t n = write_head(out, q, &question, DNS_RCODE_NOERROR, 1);
		return write_answer(out, n, DNS_TYPE_A, cfg->ttl, cfg->ipv4, sizeof(cfg->ipv4));
	}
	if (question.qtype == DNS_TYPE_AAAA && cfg->have_ipv6) {
		size_t n = write_head(out, q, &question, DNS_RCODE_NOERROR, 1);
		return write_answer(out, n, DNS_TYPE_AAAA, cfg->ttl, cfg->ipv6, sizeof(cfg->ipv6));
	}
	return write_head(out, q, &question, DNS_RCODE_NOERROR, 0);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The input as one query datagram from the sandbox through gw_dns_answer().
 * Checks what the resolver relies on: the answer fits 512 bytes and the
 * buffer, nothing is sent for responses or runts, an answer carries the
 * query's id and RD with QR=1, AA=1 and every other flag clear, at most the
 * question as sent and one record, a record only for a name allow() said
 * yes to (and allow() only ever sees a well-formed lower-case name, the one
 * in the question), and only the four documented RCODEs.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/dns.h"
#include "fuzz.h"

struct seen {
	size_t calls;
	bool said;
	char name[GW_DNS_NAME_MAX + 1];
};

static bool valid_name(const char *name)
{
	size_t n = strlen(name), label = 0;
	if (n == 0 || n > GW_DNS_NAME_MAX || name[0] == '.' || name[n - 1] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (c == '.') {
			if (label == 0)
				return false;
			label = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return false;
		if (++label > 63)
			return false;
	}
	return true;
}

/* Allows names ending in "example.com" and, so that random names get both
 * outcomes, those whose bytes sum to an even number. */
static bool allow(const char *name, void *userdata)
{
	struct seen *s = userdata;
	check(valid_name(name));
	s->calls++;
	snprintf(s->name, sizeof(s->name), "%s", name);
	size_t n = strlen(name), sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += (unsigned char)name[i];
	s->said = (n >= 11 && strcmp(name + n - 11, "example.com") == 0) || sum % 2 == 0;
	return s->said;
}

static unsigned u16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

/* The echoed question: its wire length, qtype, qclass and its name
 * decoded lower-cased, by a decoder of our own. */
static size_t decode_question(const uint8_t *p, size_t len, char *name, unsigned *qtype,
			      unsigned *qclass)
{
	size_t i = 0, n = 0;
	for (;;) {
		check(i < len);
		uint8_t l = p[i++];
		if (l == 0)
			break;
		check(l <= 63 && len - i >= l);
		if (n > 0)
			name[n++] = '.';
		check(n + l <= GW_DNS_NAME_MAX);
		for (size_t k = 0; k < l; k++) {
			char c = (char)p[i + k];
			name[n++] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
		}
		i += l;
	}
	name[n] = '\0';
	check(len - i >= 4);
	*qtype = u16(p + i);
	*qclass = u16(p + i + 2);
	return i + 4;
}

/* Exactly one OPT pseudo-RR: root owner, type 41, RDATA to the end made
 * of whole options. */
static bool opt_ok(const uint8_t *p, size_t len)
{
	if (len < 11 || p[0] != 0 || u16(p + 1) != 41 || u16(p + 9) != len - 11)
		return false;
	size_t i = 11;
	while (i < len) {
		if (len - i < 4 || len - i - 4 < u16(p + i + 2))
			return false;
		i += 4 + u16(p + i + 2);
	}
	return true;
}

static size_t run(const struct gw_dns_config *cfg, const uint8_t *data, size_t size, uint8_t *out,
		  size_t out_size)
{
	memset(out, 0xa5, out_size);
	size_t r = gw_dns_answer(cfg, data, size, out, out_size);
	check(r <= GW_DNS_MAX_MSG && r <= out_size);
	for (size_t i = r; i < out_size; i++)
		check(out[i] == 0xa5);
	return r;
}

static void check_answer(const struct gw_dns_config *cfg, const struct seen *seen,
			 const uint8_t *data, size_t size, const uint8_t *out, size_t r)
{
	if (size < 12 || (data[2] & 0x80)) {
		check(r == 0);
		check(seen->calls == 0);
		return;
	}
	check(r >= 12);
	check(out[0] == data[0] && out[1] == data[1]);
	check(out[2] == (0x80 | (data[2] & 0x78) | 0x04 | (data[2] & 0x01)));
	unsigned rcode = out[3] & 0x0f;
	check((out[3] & 0xf0) == 0);
	check(rcode == 0 || rcode == 1 || rcode == 3 || rcode == 4);
	unsigned qd = u16(out + 4), an = u16(out + 6);
	check(qd <= 1 && an <= 1);
	check(u16(out + 8) == 0 && u16(out + 10) == 0);
	check(seen->calls <= 1);

	/* What the header alone makes malformed. */
	if (u16(data + 4) != 1 || (data[2] & 0x78) != 0 || u16(data + 6) != 0 ||
	    u16(data + 8) != 0 || u16(data + 10) > 1)
		check(rcode == 1);
	if (qd == 0) {
		check(rcode == 1 && an == 0 && r == 12 && seen->calls == 0);
		return;
	}
	/* The question as sent, and well-formed. */
	char name[GW_DNS_NAME_MAX + 1];
	unsigned qtype, qclass;
	size_t ql = decode_question(out + 12, r - 12, name, &qtype, &qclass);
	check(size - 12 >= ql && memcmp(out + 12, data + 12, ql) == 0);
	check(name[0] == '\0' || valid_name(name));
	check(u16(data + 4) == 1);

	if (rcode == 1 || rcode == 4)
		check(seen->calls == 0);
	if (rcode == 4)
		check(qclass != 1);
	if (qclass != 1)
		check(rcode == 1 || rcode == 4);
	/* With a sound header, the rest decides FORMERR: nothing after the
	 * question, or exactly one OPT when ARCOUNT is 1. */
	if ((data[2] & 0x78) == 0 && u16(data + 6) == 0 && u16(data + 8) == 0) {
		if (u16(data + 10) == 0)
			check((rcode == 1) == (size != 12 + ql));
		else if (u16(data + 10) == 1)
			check((rcode == 1) == !opt_ok(data + 12 + ql, size - 12 - ql));
	}
	if (seen->calls == 1) {
		check(strcmp(seen->name, name) == 0);
		check(qclass == 1);
		check(rcode == (seen->said ? 0u : 3u));
	}
	if (rcode == 0)
		check(seen->calls == 1 && seen->said);
	if (an == 0) {
		check(r == 12 + ql);
		if (rcode == 0)
			check(qtype != 1 && (qtype != 28 || !cfg->have_ipv6));
		return;
	}
	/* One record: only for an allowed name, of the type asked for. */
	check(rcode == 0 && seen->calls == 1 && seen->said);
	check(qtype == 1 || (qtype == 28 && cfg->have_ipv6));
	const uint8_t *rr = out + 12 + ql;
	size_t rdlen = qtype == 1 ? 4 : 16;
	check(r == 12 + ql + 12 + rdlen);
	check(u16(rr) == 0xc00c && u16(rr + 2) == qtype && u16(rr + 4) == 1);
	uint32_t ttl = (uint32_t)rr[6] << 24 | (uint32_t)rr[7] << 16 | (uint32_t)rr[8] << 8 | rr[9];
	check(ttl == (cfg->ttl > 0x7fffffffu ? 0x7fffffffu : cfg->ttl));
	check(u16(rr + 10) == rdlen);
	check(memcmp(rr + 12, qtype == 1 ? cfg->ipv4 : cfg->ipv6, rdlen) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct seen seen;
	struct gw_dns_config cfg = {
		.ipv4 = { 10, 0, 2, 1 },
		.ipv6 = { 0xfd, 0xa1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 },
		.ttl = 30,
		.allow = allow,
		.userdata = &seen,
	};
	/* Exact-size buffers, so a sanitized build sees any stray access. */
	uint8_t *out = malloc(GW_DNS_MAX_MSG);
	uint8_t *big = malloc(2 * GW_DNS_MAX_MSG);
	check(out && big);

	for (int v6 = 0; v6 <= 1; v6++) {
		cfg.have_ipv6 = v6;
		cfg.ttl = v6 ? 0xfffffff0u : 30;
		memset(&seen, 0, sizeof(seen));
		size_t r = run(&cfg, data, size, out, GW_DNS_MAX_MSG);
		check_answer(&cfg, &seen, data, size, out, r);

		/* A larger buffer changes nothing. */
		memset(&seen, 0, sizeof(seen));
		size_t r2 = run(&cfg, data, size, big, 2 * GW_DNS_MAX_MSG);
		check(r2 == r && memcmp(out, big, r) == 0);
	}
	/* Too small a buffer: nothing written, nothing asked. */
	memset(&seen, 0, sizeof(seen));
	check(run(&cfg, data, size, out, GW_DNS_MAX_MSG - 1) == 0);
	check(seen.calls == 0);

	free(out);
	free(big);
	return 0;
}

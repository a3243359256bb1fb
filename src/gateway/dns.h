/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox's DNS stub, message side. Inside a sandbox, /etc/resolv.conf
 * points at a resolver the gateway serves. It answers only names the policy
 * allows, and always with the in-sandbox address where the gateway itself
 * listens (clients that ignore proxy variables then still reach the gateway,
 * which routes by Host and SNI). Everything else gets NXDOMAIN. Nothing is
 * ever forwarded: no query leaves the machine, so DNS cannot carry data out.
 *
 * These functions only turn one query datagram into one answer datagram;
 * sockets are the gateway's business.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_DNS_MAX_MSG 512 /* classic UDP size: our answers always fit */
#define GW_DNS_NAME_MAX 253

/* Decides whether a name may be resolved. name: lower case, no trailing
 * dot, labels joined with '.', ASCII only (as on the wire). */
typedef bool (*gw_dns_allow_fn)(const char *name, void *userdata);

struct gw_dns_config {
	uint8_t ipv4[4]; /* the answer for A queries of allowed names */
	bool have_ipv6;
	uint8_t ipv6[16]; /* the answer for AAAA queries, when have_ipv6 */
	uint32_t ttl;	  /* seconds */
	gw_dns_allow_fn allow;
	void *userdata;
};

/*
 * Builds the answer to the query in q (qlen bytes, untrusted) into out
 * (out_size >= GW_DNS_MAX_MSG). Returns the answer's length, or 0 when no
 * answer must be sent at all (a response rather than a query, or fewer than
 * 12 bytes: nothing to answer to).
 *
 * The answer always echoes the query's id and its single question, with
 * QR=1, AA=1, RA=0, and:
 *   - FORMERR: not a standard query (opcode != 0), QDCOUNT != 1, ANCOUNT or
 *     NSCOUNT != 0, a malformed or truncated question, a compression pointer
 *     or a label over 63 bytes or a name over 253 in the question, a label
 *     with bytes outside [A-Za-z0-9-_] (answered without echoing the
 *     question), trailing bytes beyond the question and at most one OPT
 *     record in the additional section;
 *   - NOTIMP: a class other than IN;
 *   - NXDOMAIN: a name the policy does not allow (whatever the type);
 *   - NOERROR with one answer: A (or AAAA with have_ipv6) for an allowed name;
 *   - NOERROR with no answer: any other type for an allowed name.
 * Names are matched case-insensitively (lower-cased before allow()).
 */
size_t gw_dns_answer(const struct gw_dns_config *cfg, const uint8_t *q, size_t qlen, uint8_t *out,
		     size_t out_size);

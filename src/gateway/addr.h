/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Upstream address vetting. The gateway resolves names itself and connects
 * only to the address it vetted (no second lookup), and only to public
 * unicast addresses: never loopback, private, link-local (cloud metadata
 * lives there), CGNAT, multicast, reserved or documentation ranges, nor an
 * IPv6 address that embeds an IPv4 one (mapped, translated, NAT64, 6to4,
 * Teredo), unless an operator rule allows a CIDR.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct gw_cidr {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	unsigned prefix;
};

/* "10.0.0.0/8", "fd00::/8", or a single address (a /32 or /128). Host bits
 * must be zero. -EINVAL otherwise. */
int gw_cidr_parse(const char *s, struct gw_cidr *ret);

/* Whether the address (AF_INET or AF_INET6 sockaddr) is inside c. */
bool gw_cidr_contains(const struct gw_cidr *c, const struct sockaddr *sa);

/*
 * Whether the gateway may connect to sa. allow lists operator CIDRs that
 * override the refusal. On refusal *ret_reason (if not NULL) names the
 * range ("loopback", "private", "link-local (cloud metadata)", ...).
 * Address families other than IPv4 and IPv6 are always refused.
 */
bool gw_addr_allowed(const struct sockaddr *sa, const struct gw_cidr *allow, size_t n_allow,
		     const char **ret_reason);

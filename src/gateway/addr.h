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

/*
 * Whether an operator may open c (an allow_cidrs entry, --allow-cidr):
 * NULL, or the range it overlaps that is never opened, by name ("loopback",
 * "link-local (cloud metadata)", ...): loopback, "this network", link-local
 * and the cloud metadata addresses, multicast, reserved, and the IPv6
 * forms that embed an IPv4 address the host would connect to as IPv4.
 */
const char *gw_cidr_unopenable(const struct gw_cidr *c);

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

/*
 * The host's own addresses (every interface's, from getifaddrs) as single-
 * address CIDRs, taken when the gateway starts: its seccomp filter later
 * forbids the netlink socket this needs. *ret is malloc'd.
 */
int gw_host_addrs_snapshot(struct gw_cidr **ret, size_t *ret_n);

/*
 * Whether connecting to sa would reach this host itself, so that no sandbox
 * reaches the host's services through the gateway (under --network open
 * too, on hosts with public addresses): an address of the snapshot own, or
 * one the kernel routes to this host now (addresses added since the
 * snapshot, whole local ranges such as 127/8 or an AnyIP route): a UDP
 * socket connected to it (which sends nothing) gets it as its own address,
 * or one can be bound to it. bind_probe: use the second test (false where
 * the host allows binding to any address: net.ipv4.ip_nonlocal_bind).
 * 1 yes, 0 no, or -errno when it cannot tell (no route: the connection
 * would fail anyway).
 */
int gw_addr_is_host(const struct sockaddr *sa, const struct gw_cidr *own, size_t n_own,
		    bool bind_probe);

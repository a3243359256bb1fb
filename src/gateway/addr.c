/* SPDX-License-Identifier: Apache-2.0 */
#include "gateway/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/parse.h"

struct range {
	const char *cidr;
	const char *why;
};

/* Never an upstream (RFC 6890 and friends). Checked in order; the first
 * match names the reason. */
static const struct range refused[] = {
	{ "0.0.0.0/8", "this network" },
	{ "10.0.0.0/8", "private" },
	{ "100.64.0.0/10", "shared address space (CGNAT)" },
	{ "127.0.0.0/8", "loopback" },
	{ "168.63.129.16/32", "Azure host services (WireServer): public, reached only by the VM" },
	{ "169.254.0.0/16", "link-local (cloud metadata)" },
	{ "172.16.0.0/12", "private" },
	{ "192.0.0.0/24", "IETF protocol assignments" },
	{ "192.0.2.0/24", "documentation" },
	{ "192.88.99.0/24", "6to4 relay anycast" },
	{ "192.168.0.0/16", "private" },
	{ "198.18.0.0/15", "benchmarking" },
	{ "198.51.100.0/24", "documentation" },
	{ "203.0.113.0/24", "documentation" },
	{ "224.0.0.0/4", "multicast" },
	{ "240.0.0.0/4", "reserved" }, /* 255.255.255.255 included */
	{ "::/128", "unspecified" },
	{ "::1/128", "loopback" },
	{ "::/96", "IPv4-compatible (embeds an IPv4 address)" },
	{ "::ffff:0:0/96", "IPv4-mapped (embeds an IPv4 address)" },
	{ "::ffff:0:0:0/96", "IPv4-translated (embeds an IPv4 address)" },
	{ "64:ff9b::/96", "NAT64 (embeds an IPv4 address)" },
	{ "64:ff9b:1::/48", "local NAT64 (embeds an IPv4 address)" },
	{ "100::/64", "discard-only" },
	{ "2001::/32", "Teredo (embeds an IPv4 address)" },
	{ "2001::/23", "IETF protocol assignments" },
	{ "2001:db8::/32", "documentation" },
	{ "2002::/16", "6to4 (embeds an IPv4 address)" },
	{ "3fff::/20", "documentation" },
	{ "5f00::/16", "segment routing" },
	{ "fc00::/7", "unique local (private; cloud metadata)" },
	{ "fe80::/10", "link-local" },
	{ "fec0::/10", "site-local" },
	{ "ff00::/8", "multicast" },
};

/* Never opened, whatever allow_cidrs says: an entry that overlaps one of
 * these is refused where it is parsed, at start and in a running
 * gateway's new generation alike. */
static const struct range never[] = {
	{ "0.0.0.0/8", "this network" },
	{ "127.0.0.0/8", "loopback" },
	{ "169.254.0.0/16", "link-local (cloud metadata)" },
	{ "168.63.129.16/32", "Azure host services (WireServer)" },
	{ "100.100.100.200/32", "cloud metadata (Alibaba Cloud)" },
	{ "224.0.0.0/4", "multicast" },
	{ "240.0.0.0/4", "reserved" },
	{ "::/128", "unspecified" },
	{ "::1/128", "loopback" },
	{ "::/96", "IPv4-compatible (embeds an IPv4 address)" },
	{ "::ffff:0:0/96", "IPv4-mapped (embeds an IPv4 address)" },
	{ "::ffff:0:0:0/96", "IPv4-translated (embeds an IPv4 address)" },
	{ "64:ff9b::/96", "NAT64 (embeds an IPv4 address)" },
	{ "64:ff9b:1::/48", "local NAT64 (embeds an IPv4 address)" },
	{ "fd00:ec2::254/128", "cloud metadata (AWS)" },
	{ "fe80::/10", "link-local" },
	{ "ff00::/8", "multicast" },
};

static bool contains(const struct gw_cidr *c, int family, const uint8_t *a);

int gw_cidr_parse(const char *s, struct gw_cidr *ret)
{
	if (!s)
		return -EINVAL;
	char buf[INET6_ADDRSTRLEN + 8];
	size_t len = strlen(s);
	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len + 1);
	char *slash = strchr(buf, '/');
	struct gw_cidr c = { 0 };
	if (slash)
		*slash = '\0';
	if (inet_pton(AF_INET, buf, c.addr) == 1) {
		c.family = AF_INET;
		c.prefix = 32;
	} else if (inet_pton(AF_INET6, buf, c.addr) == 1) {
		c.family = AF_INET6;
		c.prefix = 128;
	} else {
		return -EINVAL;
	}
	if (slash) {
		int p;
		if (parse_int_range(slash + 1, 0, (int)c.prefix, &p) < 0 || slash[1] == '-')
			return -EINVAL;
		c.prefix = (unsigned)p;
	}
	/* Host bits set mean the rule does not say what it seems to. */
	unsigned bytes = c.family == AF_INET ? 4 : 16;
	for (unsigned bit = c.prefix; bit < bytes * 8; bit++)
		if (c.addr[bit / 8] & (0x80u >> (bit % 8)))
			return -EINVAL;
	*ret = c;
	return 0;
}

static bool addr_of(const struct sockaddr *sa, int *family, const uint8_t **addr)
{
	if (!sa)
		return false;
	if (sa->sa_family == AF_INET) {
		*family = AF_INET;
		*addr = (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		*family = AF_INET6;
		*addr = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
		return true;
	}
	return false;
}

static bool contains(const struct gw_cidr *c, int family, const uint8_t *a)
{
	if (c->family != family)
		return false;
	unsigned full = c->prefix / 8, rest = c->prefix % 8;
	if (memcmp(c->addr, a, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xffu << (8 - rest));
	return (c->addr[full] & mask) == (a[full] & mask);
}

const char *gw_cidr_unopenable(const struct gw_cidr *c)
{
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
		struct gw_cidr n;
		/* Our own table: should an entry not parse, nothing is opened. */
		if (gw_cidr_parse(never[i].cidr, &n) < 0)
			return never[i].why;
		if (n.family != c->family)
			continue;
		/* Two ranges overlap when the wider holds the other's start. */
		const struct gw_cidr *wide = n.prefix <= c->prefix ? &n : c;
		const struct gw_cidr *narrow = wide == &n ? c : &n;
		if (contains(wide, narrow->family, narrow->addr))
			return never[i].why;
	}
	return NULL;
}

bool gw_cidr_contains(const struct gw_cidr *c, const struct sockaddr *sa)
{
	int family;
	const uint8_t *a;
	return c && addr_of(sa, &family, &a) && contains(c, family, a);
}

bool gw_addr_allowed(const struct sockaddr *sa, const struct gw_cidr *allow, size_t n_allow,
		     const char **ret_reason)
{
	int family;
	const uint8_t *a;
	if (!addr_of(sa, &family, &a)) {
		if (ret_reason)
			*ret_reason = "not an IP address";
		return false;
	}
	for (size_t i = 0; i < n_allow; i++)
		if (contains(&allow[i], family, a))
			return true;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct gw_cidr c;
		/* The table is ours (and unit-tested); should an entry ever not
		 * parse, everything is refused rather than that range let out. */
		if (gw_cidr_parse(refused[i].cidr, &c) < 0 || contains(&c, family, a)) {
			if (ret_reason)
				*ret_reason = refused[i].why;
			return false;
		}
	}
	return true;
}

int gw_host_addrs_snapshot(struct gw_cidr **ret, size_t *ret_n)
{
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) < 0)
		return -errno;
	size_t n = 0;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr &&
		    (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
			n++;
	struct gw_cidr *out = calloc(n ? n : 1, sizeof(*out));
	if (!out) {
		freeifaddrs(ifa);
		return -ENOMEM;
	}
	size_t k = 0;
	for (struct ifaddrs *i = ifa; i && k < n; i = i->ifa_next) {
		int family;
		const uint8_t *a;
		if (!i->ifa_addr || !addr_of(i->ifa_addr, &family, &a))
			continue;
		out[k].family = family;
		memcpy(out[k].addr, a, family == AF_INET ? 4 : 16);
		out[k].prefix = family == AF_INET ? 32 : 128;
		k++;
	}
	freeifaddrs(ifa);
	*ret = out;
	*ret_n = k;
	return 0;
}

int gw_addr_is_host(const struct sockaddr *sa, const struct gw_cidr *own, size_t n_own,
		    bool bind_probe)
{
	int family;
	const uint8_t *a;
	if (!addr_of(sa, &family, &a))
		return -EAFNOSUPPORT;
	for (size_t i = 0; i < n_own; i++)
		if (contains(&own[i], family, a))
			return 1;
	_cleanup_close_ int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in) :
					    sizeof(struct sockaddr_in6);
	if (connect(fd, sa, len) < 0)
		return -errno;
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
		return -errno;
	int mf;
	const uint8_t *m;
	if (!addr_of((struct sockaddr *)&me, &mf, &m) || mf != family)
		return -EAFNOSUPPORT;
	if (memcmp(m, a, family == AF_INET ? 4 : 16) == 0)
		return 1;
	if (!bind_probe)
		return 0;
	/* Only a local address can be bound (without IP_FREEBIND and
	 * ip_nonlocal_bind): 127.0.0.9 goes out from 127.0.0.1, but is ours. */
	_cleanup_close_ int b = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (b < 0)
		return -errno;
	struct sockaddr_storage any;
	memcpy(&any, sa, len);
	if (family == AF_INET)
		((struct sockaddr_in *)&any)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&any)->sin6_port = 0;
	if (bind(b, (struct sockaddr *)&any, len) == 0)
		return 1;
	return errno == EADDRNOTAVAIL ? 0 : -errno;
}

/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "gateway/addr.h"

static struct sockaddr_storage sa(const char *ip)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		return ss;
	}
	if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		return ss;
	}
	fail_msg("bad test address %s", ip);
	return ss;
}

static bool allowed(const char *ip, const struct gw_cidr *allow, size_t n, const char **why)
{
	struct sockaddr_storage ss = sa(ip);
	return gw_addr_allowed((const struct sockaddr *)&ss, allow, n, why);
}

static void test_public_addresses_pass(void **state)
{
	/* clang-format off */
	static const char *const ok[] = {
		"1.1.1.1", "8.8.8.8", "140.82.112.3", "100.63.255.255", "100.128.0.0",
		"172.15.255.255", "172.32.0.0", "192.167.255.255", "223.255.255.255",
		"2606:4700:4700::1111", "2a00:1450:4001:82a::200e", "2001:4860::8888",
	};
	/* clang-format on */
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!allowed(ok[i], NULL, 0, NULL))
			fail_msg("refused public %s", ok[i]);
}

static void test_internal_addresses_refused(void **state)
{
	static const struct {
		const char *ip;
		const char *why;
	} bad[] = {
		{ "127.0.0.1", "loopback" },
		{ "127.255.255.254", "loopback" },
		{ "0.0.0.0", "this network" },
		{ "10.1.2.3", "private" },
		{ "172.16.0.1", "private" },
		{ "172.31.255.255", "private" },
		{ "192.168.1.1", "private" },
		{ "100.64.0.1", "CGNAT" },
		{ "169.254.169.254", "metadata" },
		{ "224.0.0.1", "multicast" },
		{ "239.255.255.250", "multicast" },
		{ "255.255.255.255", "reserved" },
		{ "240.0.0.1", "reserved" },
		{ "192.0.2.1", "documentation" },
		{ "198.18.0.1", "benchmarking" },
		{ "::1", "loopback" },
		{ "::", "unspecified" },
		{ "::ffff:127.0.0.1", "IPv4-mapped" },
		{ "::ffff:8.8.8.8", "IPv4-mapped" }, /* even a public one: pin the IPv4 form */
		{ "::127.0.0.1", "IPv4-compatible" },
		{ "::ffff:0:127.0.0.1", "IPv4-translated" },
		{ "64:ff9b::7f00:1", "NAT64" },
		{ "64:ff9b:1::a9fe:a9fe", "NAT64" },
		{ "2002:7f00:1::", "6to4" },
		{ "2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo" },
		{ "fd00:ec2::254", "unique local" },
		{ "fc00::1", "unique local" },
		{ "fe80::1", "link-local" },
		{ "ff02::1", "multicast" },
		{ "2001:db8::1", "documentation" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *why = NULL;
		if (allowed(bad[i].ip, NULL, 0, &why))
			fail_msg("allowed %s", bad[i].ip);
		if (!why || !strstr(why, bad[i].why))
			fail_msg("%s refused as '%s', expected '%s'", bad[i].ip,
				 why ? why : "(null)", bad[i].why);
	}
}

static void test_operator_cidrs_override(void **state)
{
	struct gw_cidr allow[2];
	assert_int_equal(gw_cidr_parse("10.20.0.0/16", &allow[0]), 0);
	assert_int_equal(gw_cidr_parse("fd00:1::/64", &allow[1]), 0);
	assert_true(allowed("10.20.30.40", allow, 2, NULL));
	assert_false(allowed("10.21.0.1", allow, 2, NULL));
	assert_true(allowed("fd00:1::5", allow, 2, NULL));
	assert_false(allowed("fd00:2::5", allow, 2, NULL));
	/* An IPv4 rule says nothing about an IPv4-mapped IPv6 address. */
	assert_false(allowed("::ffff:10.20.30.40", allow, 2, NULL));
	struct gw_cidr one;
	assert_int_equal(gw_cidr_parse("127.0.0.1", &one), 0);
	assert_int_equal(one.prefix, 32);
	assert_true(allowed("127.0.0.1", &one, 1, NULL));
	assert_false(allowed("127.0.0.2", &one, 1, NULL));
}

static void test_cidr_parse(void **state)
{
	struct gw_cidr c;
	static const char *const bad[] = {
		"",	      "10.0.0.0/",   "10.0.0.0/33", "10.0.0.0/-1",
		"10.0.0.1/8", "10.0.0.0/8x", "fd00::/129",  "fd00::1/8",
		"nonsense",   "10.0.0.0/ 8", "010.0.0.0/8",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (gw_cidr_parse(bad[i], &c) == 0)
			fail_msg("accepted '%s'", bad[i]);
	assert_int_equal(gw_cidr_parse(NULL, &c), -EINVAL);
	assert_int_equal(gw_cidr_parse("0.0.0.0/0", &c), 0);
	assert_int_equal(c.prefix, 0);
	struct sockaddr_storage ss = sa("203.0.113.9");
	assert_true(gw_cidr_contains(&c, (struct sockaddr *)&ss));
	assert_int_equal(gw_cidr_parse("172.16.0.0/12", &c), 0);
	ss = sa("172.31.1.1");
	assert_true(gw_cidr_contains(&c, (struct sockaddr *)&ss));
	ss = sa("172.32.1.1");
	assert_false(gw_cidr_contains(&c, (struct sockaddr *)&ss));
}

/* What allow_cidrs may open: the ranges an operator may run services in,
 * never loopback, metadata or what embeds an IPv4 address. */
static void test_unopenable_ranges(void **state)
{
	static const struct {
		const char *cidr, *why;
	} cases[] = {
		{ "10.20.0.0/16", NULL },
		{ "192.0.2.1", NULL },
		{ "198.51.100.0/24", NULL },
		{ "100.64.0.0/10", "cloud metadata (Alibaba Cloud)" },
		{ "100.64.0.0/11", NULL },
		{ "fd00:1::/64", NULL },
		{ "127.0.0.1", "loopback" },
		{ "126.0.0.0/7", "loopback" },
		{ "0.0.0.0/0", "this network" },
		{ "169.254.169.254", "link-local (cloud metadata)" },
		{ "168.63.129.16", "Azure host services (WireServer)" },
		{ "239.1.1.1", "multicast" },
		{ "255.255.255.255", "reserved" },
		{ "::1", "loopback" },
		{ "::/0", "unspecified" },
		{ "::ffff:10.0.0.1", "IPv4-mapped (embeds an IPv4 address)" },
		{ "64:ff9b::a9fe:a9fe", "NAT64 (embeds an IPv4 address)" },
		{ "fd00::/8", "cloud metadata (AWS)" },
		{ "fe80::1", "link-local" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gw_cidr c;
		assert_int_equal(gw_cidr_parse(cases[i].cidr, &c), 0);
		const char *why = gw_cidr_unopenable(&c);
		if (!cases[i].why && why)
			fail_msg("%s: refused as %s", cases[i].cidr, why);
		if (cases[i].why && (!why || strcmp(why, cases[i].why) != 0))
			fail_msg("%s: %s, not %s", cases[i].cidr, why ? why : "opened",
				 cases[i].why);
	}
}

static void test_other_families_refused(void **state)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	const char *why = NULL;
	assert_false(gw_addr_allowed((struct sockaddr *)&un, NULL, 0, &why));
	assert_non_null(why);
	assert_false(gw_addr_allowed(NULL, NULL, 0, NULL));
}

/*
 * Every refused range at both of its edges, with its own reason (so a range
 * deleted from the table fails here even where a wider one still covers
 * its addresses), and the first address past each edge that no range
 * covers, which passes.
 */
static void test_every_range_at_both_edges(void **state)
{
	static const struct {
		const char *first, *last, *why, *below, *above;
	} ranges[] = {
		{ "0.0.0.0", "0.255.255.255", "this network", NULL, "1.0.0.0" },
		{ "10.0.0.0", "10.255.255.255", "private", "9.255.255.255", "11.0.0.0" },
		{ "100.64.0.0", "100.127.255.255", "shared address space (CGNAT)", "100.63.255.255",
		  "100.128.0.0" },
		{ "127.0.0.0", "127.255.255.255", "loopback", "126.255.255.255", "128.0.0.0" },
		{ "168.63.129.16", "168.63.129.16",
		  "Azure host services (WireServer): public, reached only by the VM",
		  "168.63.129.15", "168.63.129.17" },
		{ "169.254.0.0", "169.254.255.255", "link-local (cloud metadata)",
		  "169.253.255.255", "169.255.0.0" },
		{ "172.16.0.0", "172.31.255.255", "private", "172.15.255.255", "172.32.0.0" },
		{ "192.0.0.0", "192.0.0.255", "IETF protocol assignments", "191.255.255.255",
		  "192.0.1.0" },
		{ "192.0.2.0", "192.0.2.255", "documentation", "192.0.1.255", "192.0.3.0" },
		{ "192.88.99.0", "192.88.99.255", "6to4 relay anycast", "192.88.98.255",
		  "192.88.100.0" },
		{ "192.168.0.0", "192.168.255.255", "private", "192.167.255.255", "192.169.0.0" },
		{ "198.18.0.0", "198.19.255.255", "benchmarking", "198.17.255.255", "198.20.0.0" },
		{ "198.51.100.0", "198.51.100.255", "documentation", "198.51.99.255",
		  "198.51.101.0" },
		{ "203.0.113.0", "203.0.113.255", "documentation", "203.0.112.255", "203.0.114.0" },
		{ "224.0.0.0", "239.255.255.255", "multicast", "223.255.255.255", NULL },
		{ "240.0.0.0", "255.255.255.255", "reserved", NULL, NULL },
		{ "::", "::", "unspecified", NULL, NULL },
		{ "::1", "::1", "loopback", NULL, NULL },
		{ "::2", "::ffff:ffff", "IPv4-compatible (embeds an IPv4 address)", NULL,
		  "::1:0:0" },
		{ "::ffff:0.0.0.0", "::ffff:255.255.255.255",
		  "IPv4-mapped (embeds an IPv4 address)", "::fffe:ffff:ffff", "::1:0:0:0" },
		{ "::ffff:0:0:0", "::ffff:0:ffff:ffff", "IPv4-translated (embeds an IPv4 address)",
		  "::fffe:ffff:ffff:ffff", "::ffff:1:0:0" },
		{ "64:ff9b::", "64:ff9b::ffff:ffff", "NAT64 (embeds an IPv4 address)",
		  "64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", "64:ff9b::1:0:0" },
		{ "64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
		  "local NAT64 (embeds an IPv4 address)", "64:ff9b:0:ffff:ffff:ffff:ffff:ffff",
		  "64:ff9b:2::" },
		{ "100::", "100::ffff:ffff:ffff:ffff", "discard-only",
		  "ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "100:0:0:1::" },
		{ "2001::", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff",
		  "Teredo (embeds an IPv4 address)", "2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		  NULL },
		{ "2001:1::", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "IETF protocol assignments",
		  NULL, "2001:200::" },
		{ "2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation",
		  "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::" },
		{ "2002::", "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		  "6to4 (embeds an IPv4 address)", "2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		  "2003::" },
		{ "3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "documentation",
		  "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff:1000::" },
		{ "5f00::", "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "segment routing",
		  "5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "5f01::" },
		{ "fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		  "unique local (private; cloud metadata)",
		  "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", NULL },
		{ "fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "link-local",
		  "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", NULL },
		{ "fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "site-local", NULL, NULL },
		{ "ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "multicast", NULL, NULL },
	};
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		const char *edge[2] = { ranges[i].first, ranges[i].last };
		for (int k = 0; k < 2; k++) {
			const char *why = NULL;
			if (allowed(edge[k], NULL, 0, &why))
				fail_msg("%s passes; it is %s", edge[k], ranges[i].why);
			if (!why || strcmp(why, ranges[i].why) != 0)
				fail_msg("%s refused as \"%s\", expected \"%s\"", edge[k],
					 why ? why : "(none)", ranges[i].why);
		}
		const char *outside[2] = { ranges[i].below, ranges[i].above };
		for (int k = 0; k < 2; k++) {
			const char *why = NULL;
			if (outside[k] && !allowed(outside[k], NULL, 0, &why))
				fail_msg("%s, just outside %s, refused as %s", outside[k],
					 ranges[i].why, why ? why : "(none)");
		}
	}
}

/* The host's own addresses: its loopback at least, and what the kernel
 * routes to itself even when missing from the snapshot. */
static void test_host_addresses(void **state)
{
	struct gw_cidr *own = NULL;
	size_t n = 0;
	assert_int_equal(gw_host_addrs_snapshot(&own, &n), 0);
	struct sockaddr_storage lo = sa("127.0.0.1");
	((struct sockaddr_in *)&lo)->sin_port = htons(80);
	bool found = false;
	for (size_t i = 0; i < n; i++)
		found |= gw_cidr_contains(&own[i], (struct sockaddr *)&lo);
	assert_true(found);
	assert_int_equal(gw_addr_is_host((struct sockaddr *)&lo, own, n, true), 1);
	/* Without the snapshot the route says so too (127.0.0.1 to itself). */
	assert_int_equal(gw_addr_is_host((struct sockaddr *)&lo, NULL, 0, true), 1);
	/* Another loopback address is this host as well. */
	struct sockaddr_storage lo2 = sa("127.0.0.9");
	((struct sockaddr_in *)&lo2)->sin_port = htons(80);
	assert_int_equal(gw_addr_is_host((struct sockaddr *)&lo2, NULL, 0, true), 1);
	/* A documentation address is not this host (or has no route here). */
	struct sockaddr_storage doc = sa("192.0.2.1");
	((struct sockaddr_in *)&doc)->sin_port = htons(80);
	assert_true(gw_addr_is_host((struct sockaddr *)&doc, own, n, true) <= 0);
	free(own);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_public_addresses_pass),
		cmocka_unit_test(test_internal_addresses_refused),
		cmocka_unit_test(test_operator_cidrs_override),
		cmocka_unit_test(test_cidr_parse),
		cmocka_unit_test(test_unopenable_ranges),
		cmocka_unit_test(test_other_families_refused),
		cmocka_unit_test(test_every_range_at_both_edges),
		cmocka_unit_test(test_host_addresses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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
	static const char *const ok[] = {
		"1.1.1.1", "8.8.8.8", "140.82.112.3", "100.63.255.255", "100.128.0.0",
		"172.15.255.255", "172.32.0.0", "192.167.255.255", "223.255.255.255",
		"2606:4700:4700::1111", "2a00:1450:4001:82a::200e", "2001:4860::8888",
	};
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
			fail_msg("%s refused as '%s', expected '%s'", bad[i].ip, why ? why : "(null)",
				 bad[i].why);
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
		"", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.1/8", "10.0.0.0/8x",
		"fd00::/129", "fd00::1/8", "nonsense", "10.0.0.0/ 8", "010.0.0.0/8",
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

static void test_other_families_refused(void **state)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	const char *why = NULL;
	assert_false(gw_addr_allowed((struct sockaddr *)&un, NULL, 0, &why));
	assert_non_null(why);
	assert_false(gw_addr_allowed(NULL, NULL, 0, NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_public_addresses_pass),
		cmocka_unit_test(test_internal_addresses_refused),
		cmocka_unit_test(test_operator_cidrs_override),
		cmocka_unit_test(test_cidr_parse),
		cmocka_unit_test(test_other_families_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* What would allow a refused request: the hint beside every refusal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/denial.h"

static void hint_is(const char *reason, const char *host, unsigned port, const char *want)
{
	char out[256] = "unchanged";
	int r = denial_hint(reason, host, port, out, sizeof(out));
	if (!want) {
		assert_int_equal(r, 0);
		return;
	}
	assert_int_equal(r, 1);
	assert_string_equal(out, want);
}

static void test_hints(void **state)
{
	hint_is("no rule allows this host", "deb.debian.org", 443, "--allow deb.debian.org:443");
	hint_is("no rule allows this request", "deb.debian.org", 80, "--allow deb.debian.org:80");
	hint_is("no rule allows this request", "example.com", 8080, "--allow example.com:8080");
	/* The gateway writes an IPv6 host in brackets: once in the rule. */
	hint_is("no rule allows this host", "[2001:db8::1]", 443, "--allow [2001:db8::1]:443");
	hint_is("no rule allows this host", "2001:db8::1", 443, "--allow [2001:db8::1]:443");
	hint_is("no rule allows this host", "example.com", 0, "--allow example.com");
	hint_is("10.1.2.3 is a refused address: private", "10.1.2.3", 80,
		"--allow-cidr 10.1.2.3/32, or allow_cidrs: [10.1.2.3/32] in a --policy file");
	hint_is("[fd00::1] is a refused address: private", "[fd00::1]", 80,
		"--allow-cidr fd00::1/128, or allow_cidrs: [fd00::1/128] in a --policy file");
	/* A static name of the policy's is no address to put in allow_cidrs. */
	hint_is("internal.test is a refused address: private", "internal.test", 80,
		"--allow-cidr with its address's range, or allow_cidrs in a --policy file");
	hint_is("registry.npmjs.org resolves to a refused address: documentation",
		"registry.npmjs.org", 443,
		"--allow-cidr with its address's range, or allow_cidrs in a --policy file");
	hint_is("192.0.2.1 is a refused address: documentation", "192.0.2.1", 80,
		"--allow-cidr 192.0.2.1/32, or allow_cidrs: [192.0.2.1/32] in a --policy file");
	/* What no option opens: the host itself, metadata, loopback, a deny
	 * rule, a budget. */
	hint_is("localhost resolves to a refused address: loopback", "localhost", 80, NULL);
	hint_is("169.254.169.254 is a refused address: link-local (cloud metadata)",
		"169.254.169.254", 80, NULL);
	hint_is("denied by rule", "example.com", 443, NULL);
	hint_is("the turn's egress budget of 10 requests is spent", "example.com", 443, NULL);
	hint_is("no rule allows this host", "", 443, NULL);
	/* Too small a buffer: nothing half written is offered. */
	char small[8];
	assert_int_equal(denial_hint("no rule allows this host", "deb.debian.org", 443, small,
				     sizeof(small)),
			 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hints),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

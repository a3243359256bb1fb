/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/policy.h"

static struct gw_policy *parse_ok(const char *yaml)
{
	struct gw_policy *p = NULL;
	struct al_error err = { 0 };
	int r = gw_policy_parse("policy.yaml", yaml, strlen(yaml), 7, &p, &err);
	if (r < 0)
		fail_msg("parse failed: %s", al_error_message(&err));
	return p;
}

static void parse_fails(const char *yaml, const char *needle)
{
	struct gw_policy *p = NULL;
	struct al_error err = { 0 };
	assert_true(gw_policy_parse("policy.yaml", yaml, strlen(yaml), 1, &p, &err) < 0);
	assert_null(p);
	if (!strstr(err.msg, needle))
		fail_msg("error '%s' does not mention '%s'", err.msg, needle);
}

static bool allowed(const struct gw_policy *p, const char *method, const char *host,
		    uint16_t port, const char *path)
{
	struct gw_decision d;
	gw_policy_decide(p, method, host, port, path, &d);
	assert_int_equal(d.generation, p->generation);
	return d.allow;
}

static void test_host_normalize(void **state)
{
	char out[300];
	bool ip;
	assert_int_equal(gw_host_normalize("API.Example.COM.", 16, out, sizeof(out), &ip), 0);
	assert_string_equal(out, "api.example.com");
	assert_false(ip);
	assert_int_equal(gw_host_normalize("xn--bcher-kva.example", 21, out, sizeof(out), &ip), 0);
	assert_int_equal(gw_host_normalize("127.0.0.1", 9, out, sizeof(out), &ip), 0);
	assert_true(ip);
	assert_int_equal(gw_host_normalize("[::FFFF:1.2.3.4]", 16, out, sizeof(out), &ip), 0);
	assert_true(ip);
	assert_string_equal(out, "[::ffff:1.2.3.4]");
	static const char *const bad[] = {
		"", ".", "a..b", "-a.com", "a-.com", "a_b.com", ("b\xc3\xbc" "cher.de"), "a.com..",
		"1.2.3", "0x7f.1", "127.1", "[1.2.3.4]", "[::1", "a b.com", "evil.com/x",
		"evil.com:443", "*.a.com",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (gw_host_normalize(bad[i], strlen(bad[i]), out, sizeof(out), &ip) == 0)
			fail_msg("accepted '%s'", bad[i]);
	}
	/* An embedded NUL is not a shorter name. */
	assert_int_equal(gw_host_normalize("a.com\0.evil", 11, out, sizeof(out), &ip), -EINVAL);
	char label[80];
	memset(label, 'a', 64);
	memcpy(label + 64, ".com", 5);
	assert_int_equal(gw_host_normalize(label, strlen(label), out, sizeof(out), &ip), -EINVAL);
}

static void test_wildcards_are_label_aware(void **state)
{
	struct gw_policy *p = parse_ok("rules:\n  - id: ex\n    host: '*.example.com'\n");
	assert_true(allowed(p, "GET", "a.example.com", 443, "/"));
	assert_true(allowed(p, "GET", "a.b.example.com", 443, "/"));
	assert_false(allowed(p, "GET", "example.com", 443, "/"));
	assert_false(allowed(p, "GET", "a.example.com.evil.net", 443, "/"));
	assert_false(allowed(p, "GET", "aexample.com", 443, "/"));
	assert_false(allowed(p, "GET", "evilexample.com", 443, "/"));
	gw_policy_free(p);
}

static void test_exact_host_port_methods_paths(void **state)
{
	struct gw_policy *p = parse_ok("rules:\n"
				       "  - id: api\n"
				       "    host: api.example.com\n"
				       "    port: 443\n"
				       "    methods: [get, POST]\n"
				       "    paths: [/v1/messages, /v2/]\n"
				       "  - id: ip\n"
				       "    host: 10.1.2.3\n");
	assert_true(allowed(p, "POST", "api.example.com", 443, "/v1/messages"));
	assert_true(allowed(p, "GET", "api.example.com", 443, "/v1/messages/123"));
	assert_true(allowed(p, "GET", "api.example.com", 443, "/v2/x"));
	assert_false(allowed(p, "GET", "api.example.com", 443, "/v1/messagesX"));
	assert_false(allowed(p, "GET", "api.example.com", 443, "/v1"));
	assert_false(allowed(p, "DELETE", "api.example.com", 443, "/v1/messages"));
	assert_false(allowed(p, "get", "api.example.com", 443, "/v1/messages")); /* methods are case-sensitive */
	assert_false(allowed(p, "GET", "api.example.com", 8443, "/v1/messages"));
	assert_false(allowed(p, "GET", "sub.api.example.com", 443, "/v1/messages"));
	assert_true(allowed(p, "GET", "10.1.2.3", 80, "/"));
	assert_false(allowed(p, "GET", "10.1.2.4", 80, "/"));
	struct gw_decision d;
	gw_policy_decide(p, "POST", "api.example.com", 443, "/v1/messages", &d);
	assert_true(d.allow);
	assert_string_equal(d.rule, "api");
	assert_int_equal(d.generation, 7);
	gw_policy_decide(p, "POST", "other.com", 443, "/", &d);
	assert_false(d.allow);
	assert_null(d.rule);
	gw_policy_free(p);
}

static void test_deny_wins(void **state)
{
	struct gw_policy *p = parse_ok("rules:\n"
				       "  - id: all\n"
				       "    host: '*.example.com'\n"
				       "  - id: no-admin\n"
				       "    action: deny\n"
				       "    host: '*.example.com'\n"
				       "    paths: [/admin]\n");
	assert_true(allowed(p, "GET", "www.example.com", 443, "/adminx"));
	struct gw_decision d;
	gw_policy_decide(p, "GET", "www.example.com", 443, "/admin/users", &d);
	assert_false(d.allow);
	assert_string_equal(d.rule, "no-admin");
	/* A deny holds whatever the case; an allow needs the exact case. */
	assert_false(allowed(p, "GET", "www.example.com", 443, "/ADMIN/users"));
	assert_false(allowed(p, "GET", "www.example.com", 443, "/Admin"));
	gw_policy_free(p);
	p = parse_ok("rules:\n  - host: a.com\n    paths: [/api]\n");
	assert_true(allowed(p, "GET", "a.com", 443, "/api/x"));
	assert_false(allowed(p, "GET", "a.com", 443, "/API/x"));
	gw_policy_free(p);
}

static void test_empty_policy_denies(void **state)
{
	struct gw_policy *p = parse_ok("rules: []\n");
	assert_false(allowed(p, "GET", "example.com", 443, "/"));
	gw_policy_free(p);
	struct gw_decision d;
	gw_policy_decide(NULL, "GET", "example.com", 443, "/", &d);
	assert_false(d.allow);
}

static void test_bad_policies_name_file_line_key(void **state)
{
	parse_fails("rules:\n  - host: bad_host.com\n", "policy.yaml:2");
	parse_fails("rules:\n  - host: a.com\n    port: 70000\n", "port");
	parse_fails("rules:\n  - host: a.com\n    paths: [/a/../b]\n", "paths");
	parse_fails("rules:\n  - host: a.com\n    paths: [a/b]\n", "canonical");
	parse_fails("rules:\n  - host: a.com\n    methods: [G E T]\n", "method");
	parse_fails("rules:\n  - host: a.com\n    colour: red\n", "colour");
	parse_fails("rules:\n  - host: a.*.com\n", "wildcard");
	parse_fails("rules:\n  - id: x\n    host: a.com\n  - id: x\n    host: b.com\n", "twice");
	parse_fails("rules:\n  - host: a.com\n    action: maybe\n", "action");
	parse_fails("rules:\n  - port: 443\n", "host");
	parse_fails("credentials: {}\n", "credentials");
	parse_fails("- just\n- a list\n", "top level");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_normalize),
		cmocka_unit_test(test_wildcards_are_label_aware),
		cmocka_unit_test(test_exact_host_port_methods_paths),
		cmocka_unit_test(test_deny_wins),
		cmocka_unit_test(test_empty_policy_denies),
		cmocka_unit_test(test_bad_policies_name_file_line_key),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

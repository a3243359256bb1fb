/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
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

static bool allowed(const struct gw_policy *p, const char *method, const char *host, uint16_t port,
		    const char *path)
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
	/* clang-format off */
	static const char *const bad[] = {
		"", ".", "a..b", "-a.com", "a-.com", "a_b.com", ("b\xc3\xbc" "cher.de"), "a.com..",
		"1.2.3", "0x7f.1", "127.1", "[1.2.3.4]", "[::1", "a b.com", "evil.com/x",
		"evil.com:443", "*.a.com",
	};
	/* clang-format on */
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
	assert_false(allowed(p, "get", "api.example.com", 443,
			     "/v1/messages")); /* methods are case-sensitive */
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

/* ---- --allow specs ---- */

static struct gw_policy *empty_policy(void)
{
	struct gw_policy *p = calloc(1, sizeof(*p));
	assert_non_null(p);
	p->generation = 3;
	return p;
}

static const struct gw_rule *spec_ok(struct gw_policy *p, const char *spec, const char *id)
{
	struct al_error err = { 0 };
	size_t n = p->n_rules;
	int r = gw_policy_add_spec(p, spec, id, &err);
	if (r < 0)
		fail_msg("--allow %s refused: %s", spec, al_error_message(&err));
	assert_int_equal(p->n_rules, n + 1);
	const struct gw_rule *rule = &p->rules[n];
	assert_string_equal(rule->id, id);
	assert_false(rule->deny);
	assert_int_equal(rule->n_methods, 0);
	return rule;
}

static void spec_fails(struct gw_policy *p, const char *spec, int want)
{
	struct al_error err = { 0 };
	size_t n = p->n_rules;
	int r = gw_policy_add_spec(p, spec, "x", &err);
	if (r != want)
		fail_msg("--allow '%s': got %d, want %d", spec, r, want);
	assert_int_equal(p->n_rules, n);
	assert_true(err.msg[0] != '\0');
}

static void test_add_spec(void **state)
{
	struct gw_policy *p = empty_policy();
	const struct gw_rule *r = spec_ok(p, "api.example.com", "a1");
	assert_string_equal(r->host, "api.example.com");
	assert_false(r->wildcard);
	assert_false(r->ip_literal);
	assert_int_equal(r->port, 0);
	assert_int_equal(r->n_paths, 0);

	r = spec_ok(p, "API.Example.NET.:443/v1/", "a2");
	assert_string_equal(r->host, "api.example.net");
	assert_int_equal(r->port, 443);
	assert_int_equal(r->n_paths, 1);
	assert_string_equal(r->paths[0], "/v1/");

	r = spec_ok(p, "*.Example.org", "a3");
	assert_true(r->wildcard);
	assert_string_equal(r->host, "example.org");
	assert_int_equal(r->port, 0);

	r = spec_ok(p, "*.example.org:8443/api", "a4");
	assert_true(r->wildcard);
	assert_int_equal(r->port, 8443);
	assert_string_equal(r->paths[0], "/api");

	r = spec_ok(p, "[2001:DB8:0::1]:8080", "a5");
	assert_true(r->ip_literal);
	assert_string_equal(r->host, "[2001:db8::1]");
	assert_int_equal(r->port, 8080);

	r = spec_ok(p, "[::1]", "a6");
	assert_true(r->ip_literal);
	assert_string_equal(r->host, "[::1]");
	assert_int_equal(r->port, 0);

	r = spec_ok(p, "10.0.0.1/x/y", "a7");
	assert_true(r->ip_literal);
	assert_string_equal(r->host, "10.0.0.1");
	assert_string_equal(r->paths[0], "/x/y");

	r = spec_ok(p, "one.test:1", "a8");
	assert_int_equal(r->port, 1);
	r = spec_ok(p, "two.test:65535/", "a9");
	assert_int_equal(r->port, 65535);
	assert_string_equal(r->paths[0], "/");

	/* The rules decide like YAML ones. */
	struct gw_decision d;
	gw_policy_decide(p, "GET", "api.example.com", 80, "/anything", &d);
	assert_true(d.allow);
	assert_string_equal(d.rule, "a1");
	assert_int_equal(d.generation, 3);
	assert_true(allowed(p, "POST", "api.example.net", 443, "/v1/messages"));
	assert_false(allowed(p, "POST", "api.example.net", 443, "/v2/messages"));
	assert_false(allowed(p, "POST", "api.example.net", 8443, "/v1/messages"));
	assert_true(allowed(p, "GET", "a.b.example.org", 1, "/"));
	assert_false(allowed(p, "GET", "example.org", 443, "/"));
	assert_true(allowed(p, "GET", "[2001:db8::1]", 8080, "/"));
	assert_false(allowed(p, "GET", "[2001:db8::1]", 8081, "/"));
	assert_true(allowed(p, "GET", "10.0.0.1", 80, "/x/y/z"));
	assert_false(allowed(p, "GET", "10.0.0.1", 80, "/x/yz"));
	gw_policy_free(p);
}

static void test_add_spec_refusals(void **state)
{
	struct gw_policy *p = empty_policy();
	static const char *const bad[] = {
		"",
		":443",
		"/v1",
		"a.com:",
		"a.com:0",
		"a.com:65536",
		"a.com:99999",
		"a.com:1000000",
		"a.com:443x",
		"a.com:-1",
		"a.com:+443",
		"a.com:443:80",
		"a.com:x",
		"a.com:/v1",
		/* Paths must be canonical prefixes. */
		"a.com/../x",
		"a.com/a/./b",
		"a.com/a/../b",
		"a.com/x?y",
		"a.com/a%2Fb",
		"a.com//x",
		/* Hosts. */
		"a_b.com",
		"-a.com",
		"a..com",
		"a.com x",
		"user@a.com",
		"a.*.com",
		"*",
		"*.",
		"**.a.com",
		"*a.com",
		"*.10.0.0.1",
		"*.[::1]",
		"1.2.3",
		("b\xc3\xbc"
		 "cher.de"),
		"[::1",
		"[::1]x",
		"[::1]:",
		"[::1]:0",
		"[]",
		"[1.2.3.4]",
		"[::1%eth0]",
		"a.com\\x",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		spec_fails(p, bad[i], -EINVAL);
	assert_int_equal(p->n_rules, 0);

	/* Rule ids: unique, bounded. */
	spec_ok(p, "a.com", "same");
	struct al_error err = { 0 };
	assert_int_equal(gw_policy_add_spec(p, "b.com", "same", &err), -EEXIST);
	assert_int_equal(p->n_rules, 1);
	char long_id[GW_RULE_ID_MAX + 2];
	memset(long_id, 'i', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	al_error_clear(&err);
	assert_true(gw_policy_add_spec(p, "b.com", long_id, &err) < 0);
	assert_int_equal(p->n_rules, 1);
	long_id[GW_RULE_ID_MAX] = '\0';
	spec_ok(p, "b.com", long_id);
	gw_policy_free(p);

	/* After a YAML policy: ids shared with its rules are refused. */
	p = parse_ok("rules:\n  - id: allow-1\n    host: a.com\n");
	al_error_clear(&err);
	assert_int_equal(gw_policy_add_spec(p, "b.com", "allow-1", &err), -EEXIST);
	spec_ok(p, "b.com", "allow-2");
	assert_true(allowed(p, "GET", "b.com", 443, "/"));
	gw_policy_free(p);
}

/* ---- host_may_allow ---- */

static void test_host_may_allow(void **state)
{
	struct gw_policy *p = parse_ok("rules:\n"
				       "  - id: api\n"
				       "    host: api.example.com\n"
				       "    port: 443\n"
				       "    paths: [/v1/]\n"
				       "  - id: any-port\n"
				       "    host: files.example.com\n"
				       "  - id: wild\n"
				       "    host: '*.cdn.example'\n"
				       "  - id: deny-one\n"
				       "    action: deny\n"
				       "    host: bad.cdn.example\n"
				       "  - id: deny-path\n"
				       "    action: deny\n"
				       "    host: files.example.com\n"
				       "    paths: [/admin]\n"
				       "  - id: deny-method\n"
				       "    action: deny\n"
				       "    host: files.example.com\n"
				       "    methods: [DELETE]\n"
				       "  - id: deny-port\n"
				       "    action: deny\n"
				       "    host: files.example.com\n"
				       "    port: 8080\n"
				       "  - id: deny-sub\n"
				       "    action: deny\n"
				       "    host: '*.evil.cdn.example'\n"
				       "  - id: ip\n"
				       "    host: 10.1.2.3\n"
				       "    port: 80\n"
				       "  - id: v6\n"
				       "    host: '[2001:db8::1]'\n");
	/* Port: must match when given and the rule has one. */
	assert_true(gw_policy_host_may_allow(p, "api.example.com", 443));
	assert_true(gw_policy_host_may_allow(p, "api.example.com", 0));
	assert_false(gw_policy_host_may_allow(p, "api.example.com", 80));
	assert_true(gw_policy_host_may_allow(p, "files.example.com", 1));
	assert_true(gw_policy_host_may_allow(p, "files.example.com", 0));
	/* Denies of a port, a path or a method leave the host reachable. */
	assert_true(gw_policy_host_may_allow(p, "files.example.com", 443));
	assert_true(gw_policy_host_may_allow(p, "files.example.com", 8080));
	/* Wildcards, and a whole-host deny under them. */
	assert_true(gw_policy_host_may_allow(p, "a.cdn.example", 443));
	assert_true(gw_policy_host_may_allow(p, "a.b.cdn.example", 0));
	assert_false(gw_policy_host_may_allow(p, "cdn.example", 443));
	assert_false(gw_policy_host_may_allow(p, "bad.cdn.example", 443));
	assert_false(gw_policy_host_may_allow(p, "bad.cdn.example", 0));
	assert_true(gw_policy_host_may_allow(p, "x.bad.cdn.example", 443));
	assert_true(gw_policy_host_may_allow(p, "evil.cdn.example", 443));
	assert_false(gw_policy_host_may_allow(p, "x.evil.cdn.example", 443));
	assert_false(gw_policy_host_may_allow(p, "a.b.evil.cdn.example", 443));
	/* Nothing else. */
	assert_false(gw_policy_host_may_allow(p, "example.com", 443));
	assert_false(gw_policy_host_may_allow(p, "xapi.example.com", 443));
	assert_false(gw_policy_host_may_allow(p, "api.example.com.evil.net", 443));
	assert_false(gw_policy_host_may_allow(p, "sub.api.example.com", 443));
	/* IP literals, exactly. */
	assert_true(gw_policy_host_may_allow(p, "10.1.2.3", 80));
	assert_false(gw_policy_host_may_allow(p, "10.1.2.3", 443));
	assert_false(gw_policy_host_may_allow(p, "10.1.2.4", 80));
	assert_true(gw_policy_host_may_allow(p, "[2001:db8::1]", 443));
	assert_false(gw_policy_host_may_allow(p, "[2001:db8::2]", 443));
	gw_policy_free(p);

	/* A whole-host deny wins whatever the order. */
	p = parse_ok("rules:\n"
		     "  - action: deny\n"
		     "    host: a.com\n"
		     "  - host: a.com\n"
		     "    port: 443\n"
		     "  - host: '*.com'\n");
	assert_false(gw_policy_host_may_allow(p, "a.com", 443));
	assert_false(gw_policy_host_may_allow(p, "a.com", 0));
	assert_true(gw_policy_host_may_allow(p, "b.com", 443));
	gw_policy_free(p);

	/* A wildcard rule never matches an IP literal. */
	p = parse_ok("rules:\n  - host: '*.1.2.3.example'\n");
	assert_false(gw_policy_host_may_allow(p, "[::1]", 443));
	assert_true(gw_policy_host_may_allow(p, "x.1.2.3.example", 443));
	gw_policy_free(p);

	p = parse_ok("rules: []\n");
	assert_false(gw_policy_host_may_allow(p, "a.com", 443));
	gw_policy_free(p);
	assert_false(gw_policy_host_may_allow(NULL, "a.com", 443));

	/* --allow rules count too. */
	p = empty_policy();
	spec_ok(p, "*.example.com:443", "w");
	assert_true(gw_policy_host_may_allow(p, "www.example.com", 443));
	assert_false(gw_policy_host_may_allow(p, "www.example.com", 80));
	assert_false(gw_policy_host_may_allow(p, "example.com", 443));
	gw_policy_free(p);
}

/* ---- rules inside a larger document ---- */

static int from_doc(const char *yaml, const char *const *other_keys, struct gw_policy **p,
		    struct al_error *err)
{
	struct config_doc *doc = NULL;
	*p = NULL;
	int r = config_load_string("gw.yaml", yaml, strlen(yaml), &doc, err);
	if (r < 0)
		return r;
	r = gw_policy_from_doc(doc, other_keys, 11, p, err);
	config_doc_free(doc);
	return r;
}

static void test_from_doc_other_keys(void **state)
{
	static const char *const extra[] = { "credentials", "upstreams", NULL };
	static const char yaml[] = "rules:\n"
				   "  - id: r\n"
				   "    host: a.com\n"
				   "credentials:\n"
				   "  - secret: s\n"
				   "upstreams: whatever the caller checks\n";
	struct gw_policy *p;
	struct al_error err = { 0 };
	assert_int_equal(from_doc(yaml, extra, &p, &err), 0);
	assert_non_null(p);
	assert_int_equal(p->n_rules, 1);
	assert_int_equal(p->generation, 11);
	assert_true(allowed(p, "GET", "a.com", 443, "/"));
	gw_policy_free(p);

	/* Extra keys alone: no rules. */
	assert_int_equal(from_doc("credentials: []\n", extra, &p, &err), 0);
	assert_int_equal(p->n_rules, 0);
	gw_policy_free(p);
	assert_int_equal(from_doc("", extra, &p, &err), 0);
	assert_int_equal(p->n_rules, 0);
	gw_policy_free(p);

	/* Keys not listed are still refused, naming the key. */
	al_error_clear(&err);
	assert_true(from_doc(yaml, NULL, &p, &err) < 0);
	assert_null(p);
	assert_non_null(strstr(err.msg, "credentials"));
	static const char *const only_creds[] = { "credentials", NULL };
	al_error_clear(&err);
	assert_true(from_doc(yaml, only_creds, &p, &err) < 0);
	assert_null(p);
	assert_non_null(strstr(err.msg, "upstreams"));
	al_error_clear(&err);
	assert_true(from_doc("rules: []\nrule: []\n", extra, &p, &err) < 0);
	assert_non_null(strstr(err.msg, "rule"));
	/* The rules themselves are checked as usual. */
	al_error_clear(&err);
	assert_true(from_doc("rules:\n  - host: a.com\n    port: 0\ncredentials: []\n", extra, &p,
			     &err) < 0);
	assert_null(p);
	assert_non_null(strstr(err.msg, "gw.yaml:3"));
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
		cmocka_unit_test(test_add_spec),
		cmocka_unit_test(test_add_spec_refusals),
		cmocka_unit_test(test_host_may_allow),
		cmocka_unit_test(test_from_doc_other_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy parser and matcher on arbitrary YAML. A policy that parses must
 * decide every request the same way twice and as an independent oracle
 * says: allowed exactly when some allow rule matches and no deny rule does
 * (deny rules win wherever they stand), by a rule that matches; hosts and
 * paths are fed in their checked forms, as the gateway will.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "gateway/path.h"
#include "gateway/policy.h"

static const char *const hosts[] = {
	"api.example.com", "a.b.example.com", "example.com", "a.example.com.evil.net",
	"10.0.0.1",	   "[::1]",	      "github.com",  "x",
};
static const char *const paths[] = {
	"/", "/v1", "/v1/messages", "/v1x", "/admin", "/ADMIN/x", "/a/b/c",
};
static const char *const methods[] = { "GET", "POST", "get", "DELETE" };
static const unsigned ports[] = { 443, 80, 8443 };

/*
 * The oracle: what a rule matches, written out again from the format's
 * definition (docs/gateway.md), not from the matcher under test. Hosts:
 * exact, or "*.suffix" for names strictly below it; ports: any or equal;
 * methods: any or one of them, case-sensitive; paths: any, or a prefix on
 * a segment boundary, in any case for a deny rule.
 */
static bool ref_host(const struct gw_rule *r, const char *host)
{
	if (!r->wildcard)
		return strcmp(r->host, host) == 0;
	size_t hl = strlen(host), sl = strlen(r->host);
	return host[0] != '[' && hl > sl + 1 && host[hl - sl - 1] == '.' &&
	       strcmp(host + hl - sl, r->host) == 0;
}

static bool ref_prefix(const char *path, const char *prefix, bool fold)
{
	size_t n = strlen(prefix);
	if ((fold ? strncasecmp(path, prefix, n) : strncmp(path, prefix, n)) != 0)
		return false;
	return prefix[n - 1] == '/' || path[n] == '\0' || path[n] == '/';
}

static bool ref_match(const struct gw_rule *r, const char *method, const char *host, unsigned port,
		      const char *path)
{
	if (!ref_host(r, host) || (r->port && r->port != port))
		return false;
	bool m = r->n_methods == 0, p = r->n_paths == 0;
	for (size_t i = 0; i < r->n_methods; i++)
		m |= strcmp(r->methods[i], method) == 0;
	for (size_t i = 0; i < r->n_paths; i++)
		p |= ref_prefix(path, r->paths[i], r->deny);
	return m && p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gw_policy *p = NULL;
	struct al_error err = { 0 };
	if (gw_policy_parse("fuzz.yaml", (const char *)data, size, 3, &p, &err) < 0) {
		/* A refusal always says why. */
		if (!err.msg[0])
			abort();
		return 0;
	}
	for (size_t h = 0; h < sizeof(hosts) / sizeof(hosts[0]); h++) {
		for (size_t q = 0; q < sizeof(paths) / sizeof(paths[0]); q++) {
			for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
				for (size_t o = 0; o < sizeof(ports) / sizeof(ports[0]); o++) {
					struct gw_decision a, b;
					gw_policy_decide(p, methods[m], hosts[h],
							 (uint16_t)ports[o], paths[q], &a);
					gw_policy_decide(p, methods[m], hosts[h],
							 (uint16_t)ports[o], paths[q], &b);
					check(a.allow == b.allow && a.rule == b.rule &&
					      a.generation == 3);
					check(!a.allow || a.rule);
					/* Deny rules win wherever they stand; no allow, no way out. */
					bool deny = false, allow = false;
					for (size_t i = 0; i < p->n_rules; i++) {
						const struct gw_rule *r = &p->rules[i];
						if (ref_match(r, methods[m], hosts[h], ports[o],
							      paths[q])) {
							deny |= r->deny;
							allow |= !r->deny;
						}
					}
					check(a.allow == (allow && !deny));
					/* The deciding rule must be a deny iff the answer is no. */
					for (size_t i = 0; a.rule && i < p->n_rules; i++)
						if (p->rules[i].id == a.rule)
							check(p->rules[i].deny != a.allow &&
							      ref_match(&p->rules[i], methods[m],
									hosts[h], ports[o],
									paths[q]));
				}
			}
		}
	}
	/* No rules, no way out. */
	if (p->n_rules == 0) {
		struct gw_decision d;
		gw_policy_decide(p, "GET", "example.com", 443, "/", &d);
		check(!d.allow);
	}
	gw_policy_free(p);
	return 0;
}

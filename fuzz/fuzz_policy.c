/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy parser and matcher on arbitrary YAML. A policy that parses must
 * decide every request the same way twice, let a deny rule win, and deny
 * whatever no allow rule covers; hosts and paths are fed in their checked
 * forms, as the gateway will.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gateway/path.h"
#include "gateway/policy.h"

static const char *const hosts[] = {
	"api.example.com", "a.b.example.com", "example.com", "a.example.com.evil.net",
	"10.0.0.1", "[::1]", "github.com", "x",
};
static const char *const paths[] = {
	"/", "/v1", "/v1/messages", "/v1x", "/admin", "/ADMIN/x", "/a/b/c",
};
static const char *const methods[] = { "GET", "POST", "get", "DELETE" };
static const unsigned ports[] = { 443, 80, 8443 };

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
					gw_policy_decide(p, methods[m], hosts[h], (uint16_t)ports[o],
							 paths[q], &a);
					gw_policy_decide(p, methods[m], hosts[h], (uint16_t)ports[o],
							 paths[q], &b);
					if (a.allow != b.allow || a.rule != b.rule || a.generation != 3)
						abort();
					if (a.allow && !a.rule)
						abort();
					/* The deciding rule must be a deny iff the answer is no. */
					for (size_t i = 0; a.rule && i < p->n_rules; i++)
						if (p->rules[i].id == a.rule && p->rules[i].deny == a.allow)
							abort();
				}
			}
		}
	}
	/* No rules, no way out. */
	if (p->n_rules == 0) {
		struct gw_decision d;
		gw_policy_decide(p, "GET", "example.com", 443, "/", &d);
		if (d.allow)
			abort();
	}
	gw_policy_free(p);
	return 0;
}

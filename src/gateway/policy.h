/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The egress policy: which requests leave a sandbox.
 *
 * A policy is a list of rules, each allowing or denying requests by host,
 * port, method and path prefix. Deny rules win over allow rules; a request
 * no rule allows is denied. Every decision names the rule that made it and
 * the policy's generation, for the audit log.
 *
 * A policy is immutable once built: a change is a new policy (a new
 * generation) that replaces the old one whole, or fails and leaves the old
 * one in place.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define GW_HOST_MAX 253
#define GW_RULE_ID_MAX 64
#define GW_POLICY_MAX_RULES 4096
#define GW_RULE_MAX_PATHS 64
#define GW_RULE_MAX_METHODS 16

struct gw_rule {
	char id[GW_RULE_ID_MAX + 1];
	bool deny;
	bool wildcard;		    /* host is "*.suffix": matches names below suffix only */
	bool ip_literal;	    /* host is an IP literal: matched exactly */
	char host[GW_HOST_MAX + 3]; /* normalized; for a wildcard, the suffix */
	uint16_t port;		    /* 0: any */
	char *methods[GW_RULE_MAX_METHODS];
	size_t n_methods; /* 0: any */
	char *paths[GW_RULE_MAX_PATHS];
	size_t n_paths; /* 0: any */
};

struct gw_policy {
	uint64_t generation;
	struct gw_rule *rules;
	size_t n_rules;
};

struct gw_decision {
	bool allow;
	const char *rule; /* id of the deciding rule; NULL when none matched */
	uint64_t generation;
	const char *reason; /* for the client and the audit log; static text */
};

/*
 * Normalizes a host name for matching: ASCII only (an IDN must come as
 * punycode), lower-cased, one trailing dot removed, RFC 1123 labels (letters,
 * digits, hyphens inside, 1..63 each), 253 bytes at most. An IPv4 literal or
 * a bracketed IPv6 literal is accepted as such (*ret_ip set) in a canonical
 * form. -EINVAL otherwise.
 */
int gw_host_normalize(const char *in, size_t len, char *out, size_t size, bool *ret_ip);

/* Parses a policy from YAML text; see docs/gateway.md for the format. */
int gw_policy_parse(const char *name, const char *text, size_t len, uint64_t generation,
		    struct gw_policy **ret, struct al_error *err);
int gw_policy_load(const char *path, uint64_t generation, struct gw_policy **ret,
		   struct al_error *err);
void gw_policy_free(struct gw_policy *p);

/* A YAML sequence of canonical path prefixes into out (room for
 * GW_RULE_MAX_PATHS; *n_out counts what was stored, also on failure). */
struct config_node;
int gw_parse_path_prefixes(const struct config_node *n, const char *path, char **out, size_t *n_out,
			   struct al_error *err);

/* Parses the "rules" of a document whose top level may also hold
 * other_keys (NULL-terminated; parsed by the caller). */
struct config_doc;
int gw_policy_from_doc(const struct config_doc *doc, const char *const *other_keys,
		       uint64_t generation, struct gw_policy **ret, struct al_error *err);

/* Appends an allow rule written as HOST[:PORT][/PATH-PREFIX] (the --allow
 * option): HOST as in the YAML format ("*.suffix", IP literals, "[v6]"). */
int gw_policy_add_spec(struct gw_policy *p, const char *spec, const char *id, struct al_error *err);

/* The id of a deny rule that refuses the whole host (any port, method and
 * path), or NULL. */
const char *gw_policy_host_denied(const struct gw_policy *p, const char *host);

/* Whether some request to host (and port; 0: any) could be allowed: some
 * allow rule matches the host and no deny rule refuses the whole host.
 * For the DNS stub's answers and for refusing a CONNECT early. */
bool gw_policy_host_may_allow(const struct gw_policy *p, const char *host, uint16_t port);

/* Whether some rule for host (and port) names paths, allow or deny: then
 * a request's path decides, and must be unambiguous. */
bool gw_policy_paths_matter(const struct gw_policy *p, const char *host, uint16_t port);

/*
 * Decides a request. host must be normalized (gw_host_normalize) and path
 * canonical (gw_path_canonical); method is the request's method token.
 */
void gw_policy_decide(const struct gw_policy *p, const char *method, const char *host,
		      uint16_t port, const char *path, struct gw_decision *ret);

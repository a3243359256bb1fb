/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's decisions as pure functions of the configuration, the
 * policy generation in force and what was parsed: no I/O, no state, so
 * that unit tests ask them directly what the engine will do.
 *
 * HTTPS is decided in two named steps:
 *   1. gw_decide_tunnel: whether a tunnel to host:port is opened at all
 *      (CONNECT on the proxy port, or the server name of a handshake on
 *      the transparent 443), and whether the DNS stub answers a name;
 *   2. gw_decide_request: each request inside the tunnel (and every plain
 *      HTTP request), on method, host, port and canonical path, with the
 *      credential it carries.
 * Under --network open every public host is allowed, but the policy's
 * deny rules still deny (a whole-host deny in step 1 too).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gateway/internal.h"

struct gw_verdict {
	bool allow;
	int status;		    /* the answer when refused (403) */
	const char *rule;	    /* the deciding rule's id, or NULL */
	uint64_t generation;	    /* the policy generation that decided */
	const char *reason;	    /* static text for the client and the audit line */
	const struct gw_cred *cred; /* allowed requests: the credential to inject, or NULL */
	/* A git push under a plain GitHub grant: allowed only once its ref
	 * updates are read and checked (gw_github_push_check). */
	bool check_push;
};

/* Step 1. port 0: any port (the DNS stub's question). */
void gw_decide_tunnel(const struct gw_config *cfg, const struct gw_policy *policy, const char *host,
		      uint16_t port, struct gw_verdict *ret);

/* What a request's decision is made of. host normalized, path canonical. */
struct gw_request_facts {
	const char *method;
	const char *host;
	uint16_t port;
	const char *path;
	bool tls; /* it goes upstream over TLS: only then can it carry a credential */
};

/* Step 2. */
void gw_decide_request(const struct gw_config *cfg, const struct gw_policy *policy,
		       const struct gw_request_facts *rq, struct gw_verdict *ret);

/*
 * Whether a request's path can change its decision: a rule for the host
 * names paths (restricted mode), or a credential for it is scoped by path
 * or to GitHub repositories. Where it cannot, a path that servers may read
 * two ways (an encoded '/', as npm's scoped packages are named) fools
 * nothing, and is passed on.
 */
bool gw_decision_uses_path(const struct gw_config *cfg, const struct gw_policy *policy,
			   const char *host, uint16_t port);

/* The first credential whose scope (host, port, path prefixes) matches. */
const struct gw_cred *gw_find_cred(const struct gw_config *cfg, const char *host, uint16_t port,
				   const char *path);

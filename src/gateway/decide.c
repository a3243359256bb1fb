/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "gateway/decide.h"
#include "gateway/github.h"
#include "gateway/path.h"

const struct gw_cred *gw_find_cred(const struct gw_config *cfg, const char *host, uint16_t port,
				   const char *path)
{
	for (size_t i = 0; i < cfg->n_creds; i++) {
		const struct gw_cred *cr = &cfg->creds[i];
		if (!gw_host_pattern_matches(cr->host, cr->wildcard, host))
			continue;
		if (cr->port && cr->port != port)
			continue;
		if (cr->n_paths) {
			bool ok = false;
			for (size_t j = 0; j < cr->n_paths && !ok; j++)
				ok = gw_path_has_prefix(path, cr->paths[j]);
			if (!ok)
				continue;
		}
		return cr;
	}
	return NULL;
}

void gw_decide_tunnel(const struct gw_config *cfg, const struct gw_policy *policy, const char *host,
		      uint16_t port, struct gw_verdict *ret)
{
	*ret = (struct gw_verdict){ .allow = true, .generation = policy ? policy->generation : 0 };
	const char *denied = gw_policy_host_denied(policy, host);
	if (denied) {
		ret->allow = false;
		ret->status = 403;
		ret->rule = denied;
		ret->reason = "denied by rule";
		return;
	}
	if (cfg->mode == GW_MODE_OPEN) {
		ret->rule = "open";
		ret->reason = "network open";
		return;
	}
	if (!gw_policy_host_may_allow(policy, host, port)) {
		ret->allow = false;
		ret->status = 403;
		ret->reason = "no rule allows this host";
		return;
	}
	ret->reason = "some rule allows this host";
}

void gw_decide_request(const struct gw_config *cfg, const struct gw_policy *policy,
		       const struct gw_request_facts *rq, struct gw_verdict *ret)
{
	*ret = (struct gw_verdict){ .allow = true, .generation = policy ? policy->generation : 0 };
	struct gw_decision d;
	gw_policy_decide(policy, rq->method, rq->host, rq->port, rq->path, &d);
	if (cfg->mode == GW_MODE_OPEN && (d.allow || !d.rule)) {
		/* Open: what no deny rule names is allowed. */
		ret->rule = "open";
		ret->reason = "network open";
	} else {
		ret->rule = d.rule;
		ret->generation = d.generation;
		ret->reason = d.reason;
		if (!d.allow) {
			ret->allow = false;
			ret->status = 403;
			return;
		}
	}
	const struct gw_cred *cred = gw_find_cred(cfg, rq->host, rq->port, rq->path);
	if (cred && cred->github) {
		if (cfg->n_grants == 0) {
			cred = NULL; /* no grant, no credential */
		} else {
			const struct gw_github_grant *g =
				gw_github_grant_for(cfg->grants, cfg->n_grants, rq->host, rq->path);
			if (!g) {
				ret->allow = false;
				ret->status = 403;
				ret->reason = "repository not granted to this run";
				return;
			}
			if (!g->admin && gw_github_needs_admin(rq->host, rq->method, rq->path)) {
				ret->allow = false;
				ret->status = 403;
				ret->reason =
					"this GitHub endpoint administers, creates, deletes, publishes, "
					"approves or merges: it needs a github-admin:OWNER/REPO grant";
				return;
			}
			ret->check_push = !g->admin &&
					  gw_github_is_push(rq->host, rq->method, rq->path);
		}
	}
	/* Never in clear text. */
	ret->cred = rq->tls ? cred : NULL;
}

bool gw_decision_uses_path(const struct gw_config *cfg, const struct gw_policy *policy,
			   const char *host, uint16_t port)
{
	if (gw_policy_paths_matter(policy, host, port))
		return true;
	for (size_t i = 0; i < cfg->n_creds; i++) {
		const struct gw_cred *cr = &cfg->creds[i];
		if (gw_host_pattern_matches(cr->host, cr->wildcard, host) &&
		    (!cr->port || cr->port == port) && (cr->n_paths || cr->github))
			return true;
	}
	return false;
}

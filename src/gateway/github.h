/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Per-run GitHub repository grants. With `github:OWNER/REPO` granted, the
 * GitHub credential is attached only to requests for that repository:
 *   api.github.com  /repos/OWNER/REPO and anything below it
 *   github.com      /OWNER/REPO[.git]/info/refs
 *                   /OWNER/REPO[.git]/git-upload-pack
 *                   /OWNER/REPO[.git]/git-receive-pack
 * Owner and repository compare case-insensitively, as whole segments:
 * OWNER/REPO-evil, OWNER/REPOx and OWNER-x/REPO are other repositories.
 * Only the github.com paths take the ".git" suffix, spelled in lower case;
 * on api.github.com "REPO.git" is another repository (there is none).
 *
 * A grant means "work on this repository": read it, push branches, work
 * with issues and pull requests. The administrative endpoints, and those
 * that create, move, delete, publish or merge, need a grant that names
 * them: `github-admin:OWNER/REPO` (gw_github_needs_admin has the table).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define GW_GITHUB_OWNER_MAX 39 /* GitHub's limit for user and org names */
#define GW_GITHUB_REPO_MAX 100

struct gw_github_grant {
	char owner[GW_GITHUB_OWNER_MAX + 1];
	char repo[GW_GITHUB_REPO_MAX + 1];
	bool admin; /* github-admin: the administrative endpoints too */
};

/*
 * Parses "OWNER/REPO" (the part after "github:"). Owner: ASCII letters,
 * digits and single hyphens, not starting or ending with one, at most 39.
 * Repository: letters, digits, '-', '_', '.', at most 100, not "." or ".."
 * and not ending in ".git" (in any case). Nothing before or after: no
 * "github:", no spaces, no second '/'. -EINVAL otherwise, and *ret is left
 * alone. The names are kept as written; matching ignores case.
 */
int gw_github_grant_parse(const char *s, struct gw_github_grant *ret);

/*
 * Whether a request to host (normalized: lower case, no port) for path
 * (canonical, see path.h; no query) may carry the GitHub credential under
 * the given grants. False for any host but api.github.com and github.com
 * (compared exactly), always false with no grants, and false for a path
 * that is not canonical (checked, not trusted).
 */
bool gw_github_allowed(const struct gw_github_grant *grants, size_t n_grants, const char *host,
		       const char *path);
/* The same, returning the grant that matches (NULL: none). */
const struct gw_github_grant *gw_github_grant_for(const struct gw_github_grant *grants,
						  size_t n_grants, const char *host,
						  const char *path);

/*
 * Whether method on path (canonical, no query) of api.github.com is an
 * endpoint a plain grant does not reach. On /repos/OWNER/REPO[/...]:
 *   any method: hooks, keys, collaborators, invitations, teams, rulesets,
 *     autolinks, environments, secret-scanning, code-scanning, dependabot,
 *     codespaces, vulnerability-alerts, automated-security-fixes,
 *     private-vulnerability-reporting, interaction-limits, properties,
 *     actions/{secrets,variables,permissions,runners,oidc,cache},
 *     branches/B/protection, tags/protection, pulls/N/merge;
 *   methods other than GET and HEAD: everything but issues, pulls,
 *     labels, milestones, comments, git, contents, statuses, check-runs,
 *     check-suites and commits (so the repository itself: DELETE, PATCH;
 *     forks, generate, transfer, releases, deployments, merges,
 *     dispatches, topics, actions ...).
 * Reads of everything else, and git smart HTTP on github.com (clone,
 * fetch, push), are work. Any other host or path: false.
 */
bool gw_github_needs_admin(const char *host, const char *method, const char *path);

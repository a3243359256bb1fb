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
 * A grant means "work on this repository": read it, push branches under
 * GW_GITHUB_BRANCH_PREFIX, work with issues and pull requests. The
 * administrative endpoints, and those that create, move, delete, publish,
 * approve or merge, need a grant that names them: `github-admin:OWNER/REPO`
 * (gw_github_needs_admin has the table, gw_github_push_check the refs a
 * push may update).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define GW_GITHUB_OWNER_MAX 39 /* GitHub's limit for user and org names */
#define GW_GITHUB_REPO_MAX 100
/* The branches a plain grant pushes: refs/heads/airlock/... */
#define GW_GITHUB_BRANCH_PREFIX "airlock/"
/* A push's ref updates are read before it goes on: at most this much. */
#define GW_GITHUB_PUSH_HEAD_MAX (64 * 1024)

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
 * endpoint a plain grant does not reach. On /repos/OWNER/REPO[/...], with
 * segments compared in any case:
 *   any method: hooks, keys, collaborators, invitations, teams, rulesets,
 *     autolinks, environments, secret-scanning, code-scanning, dependabot,
 *     codespaces, vulnerability-alerts, automated-security-fixes,
 *     private-vulnerability-reporting, interaction-limits, properties,
 *     actions/{permissions,runners,oidc,cache} and every actions/ segment
 *     naming secrets or variables (organization-secrets too),
 *     branches/B/protection, tags/protection, pulls/N/merge;
 *   methods other than GET and HEAD: git/refs (moving, deleting or making
 *     a branch or tag), contents (commits onto a branch), pulls/N/reviews
 *     (approving, dismissing), and everything but issues, pulls, labels,
 *     milestones, comments, git (objects), statuses, check-runs,
 *     check-suites and commits (so the repository itself: DELETE, PATCH;
 *     forks, generate, transfer, releases, deployments, merges,
 *     dispatches, topics, actions ...).
 * Reads of everything else, and git smart HTTP on github.com (clone,
 * fetch; a push's refs are checked by gw_github_push_check), are work.
 * Any other host or path: false.
 */
bool gw_github_needs_admin(const char *host, const char *method, const char *path);

/* A git push: POST github.com/OWNER/REPO[.git]/git-receive-pack. */
bool gw_github_is_push(const char *host, const char *method, const char *path);

/*
 * Checks the ref updates at the start of a push's body (receive-pack:
 * pkt-lines "OLD NEW REF", the first with capabilities after a NUL, then a
 * flush) against what a plain grant may do: update, create or delete
 * branches under refs/heads/PREFIX only. body holds the first len bytes
 * (complete: the whole body). 1: every update is allowed; 0: more bytes
 * are needed; -1: refused, with a static reason in *ret_why (another
 * branch, a tag, a signed push, malformed, or longer than
 * GW_GITHUB_PUSH_HEAD_MAX).
 */
int gw_github_push_check(const char *body, size_t len, bool complete, const char *prefix,
			 const char **ret_why);

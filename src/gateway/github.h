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
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define GW_GITHUB_OWNER_MAX 39 /* GitHub's limit for user and org names */
#define GW_GITHUB_REPO_MAX 100

struct gw_github_grant {
	char owner[GW_GITHUB_OWNER_MAX + 1];
	char repo[GW_GITHUB_REPO_MAX + 1];
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

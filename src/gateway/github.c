/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scoping the GitHub credential to granted repositories. Paths are matched
 * segment by segment on the canonical form (path.h), so "/repos/o/r" never
 * matches "/repos/o/r-evil" and no encoding trick reaches another
 * repository; a path that is not canonical is never matched at all.
 */
#include <errno.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/strview.h"
#include "gateway/github.h"
#include "gateway/path.h"

static bool is_ascii_alnum(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool owner_valid(struct sv s)
{
	if (s.len == 0 || s.len > GW_GITHUB_OWNER_MAX)
		return false;
	if (s.p[0] == '-' || s.p[s.len - 1] == '-')
		return false;
	for (size_t i = 0; i < s.len; i++) {
		if (s.p[i] == '-') {
			if (s.p[i - 1] == '-')
				return false;
		} else if (!is_ascii_alnum(s.p[i])) {
			return false;
		}
	}
	return true;
}

static bool repo_valid(struct sv s)
{
	if (s.len == 0 || s.len > GW_GITHUB_REPO_MAX)
		return false;
	for (size_t i = 0; i < s.len; i++)
		if (!is_ascii_alnum(s.p[i]) && s.p[i] != '-' && s.p[i] != '_' && s.p[i] != '.')
			return false;
	if (sv_equal_cstr(s, ".") || sv_equal_cstr(s, ".."))
		return false;
	/* GitHub strips ".git" from clone URLs, so "r.git" could only ever
	 * mean "r"; refused in any case rather than guessed. */
	return !(s.len >= 4 && sv_equal_ci(sv_skip(s, s.len - 4), SV_LIT(".git")));
}

int gw_github_grant_parse(const char *s, struct gw_github_grant *ret)
{
	if (!s || !ret)
		return -EINVAL;
	struct sv rest = sv_from_cstr(s);
	size_t slash;
	if (!sv_find_char(rest, '/', &slash))
		return -EINVAL;
	struct sv owner = sv_head(rest, slash);
	struct sv repo = sv_skip(rest, slash + 1);
	if (!owner_valid(owner) || !repo_valid(repo))
		return -EINVAL;

	struct gw_github_grant g;
	memset(&g, 0, sizeof(g));
	memcpy(g.owner, owner.p, owner.len);
	memcpy(g.repo, repo.p, repo.len);
	*ret = g;
	return 0;
}

/* Splits the segment at the start of *s off, up to (not including) the
 * next '/'; *s keeps the rest, that '/' included. */
static struct sv take_segment(struct sv *s)
{
	size_t i;
	if (!sv_find_char(*s, '/', &i))
		i = s->len;
	struct sv seg = sv_head(*s, i);
	*s = sv_skip(*s, i);
	return seg;
}

/* api.github.com: /repos/OWNER/REPO, optionally followed by '/' and more. */
static bool api_repository(struct sv path, struct sv *ret_owner, struct sv *ret_repo)
{
	if (!sv_starts_with(path, SV_LIT("/repos/")))
		return false;
	path = sv_skip(path, strlen("/repos/"));
	struct sv owner = take_segment(&path);
	if (!sv_starts_with(path, SV_LIT("/")))
		return false;
	path = sv_skip(path, 1);
	struct sv repo = take_segment(&path);
	*ret_owner = owner;
	*ret_repo = repo;
	return true;
}

/* github.com: the three smart-HTTP endpoints of /OWNER/REPO[.git], exactly. */
static bool git_repository(struct sv path, struct sv *ret_owner, struct sv *ret_repo)
{
	static const char *const endpoints[] = { "/info/refs", "/git-upload-pack",
						 "/git-receive-pack" };
	if (!sv_starts_with(path, SV_LIT("/")))
		return false;
	path = sv_skip(path, 1);
	struct sv owner = take_segment(&path);
	if (!sv_starts_with(path, SV_LIT("/")))
		return false;
	path = sv_skip(path, 1);
	struct sv repo = take_segment(&path);
	bool endpoint = false;
	for (size_t i = 0; i < ARRAY_SIZE(endpoints) && !endpoint; i++)
		endpoint = sv_equal_cstr(path, endpoints[i]);
	if (!endpoint)
		return false;
	/* Only the spelling git itself uses; "r.GIT" is left to not match. */
	if (sv_ends_with(repo, SV_LIT(".git")))
		repo = sv_head(repo, repo.len - 4);
	*ret_owner = owner;
	*ret_repo = repo;
	return true;
}

static bool grant_matches(const struct gw_github_grant *g, struct sv owner, struct sv repo)
{
	/* A grant filled in by hand rather than parsed must still be a
	 * terminated, non-empty name to match anything. */
	size_t ol = strnlen(g->owner, sizeof(g->owner));
	size_t rl = strnlen(g->repo, sizeof(g->repo));
	if (ol == 0 || ol == sizeof(g->owner) || rl == 0 || rl == sizeof(g->repo))
		return false;
	return sv_equal_ci(owner, sv_make(g->owner, ol)) && sv_equal_ci(repo, sv_make(g->repo, rl));
}

static bool path_is_canonical(const char *path)
{
	char canon[GW_PATH_MAX + 1];
	size_t len = strlen(path), query;
	return gw_path_canonical(path, len, canon, sizeof(canon), &query) == 0 && query == len &&
	       strcmp(canon, path) == 0;
}

bool gw_github_allowed(const struct gw_github_grant *grants, size_t n_grants, const char *host,
		       const char *path)
{
	return gw_github_grant_for(grants, n_grants, host, path) != NULL;
}

const struct gw_github_grant *gw_github_grant_for(const struct gw_github_grant *grants,
						  size_t n_grants, const char *host,
						  const char *path)
{
	struct sv owner, repo;
	bool found;

	if (!grants || n_grants == 0 || !host || !path)
		return NULL;
	if (strcmp(host, "api.github.com") == 0)
		found = api_repository(sv_from_cstr(path), &owner, &repo);
	else if (strcmp(host, "github.com") == 0)
		found = git_repository(sv_from_cstr(path), &owner, &repo);
	else
		return NULL;
	/* The caller promised a canonical path; a raw one would let
	 * "/repos/o/r/../../x" through, so the promise is checked. */
	if (!found || owner.len == 0 || repo.len == 0 || !path_is_canonical(path))
		return NULL;
	/* An admin grant first: the same repository may be granted both ways. */
	const struct gw_github_grant *hit = NULL;
	for (size_t i = 0; i < n_grants; i++)
		if (grant_matches(&grants[i], owner, repo) && (!hit || grants[i].admin))
			hit = &grants[i];
	return hit;
}

static bool seg_in(struct sv seg, const char *const *list)
{
	for (size_t i = 0; list[i]; i++)
		if (sv_equal_ci_cstr(seg, list[i]))
			return true;
	return false;
}

/* Whether seg holds word, in any case ("organization-secrets"). */
static bool seg_has(struct sv seg, const char *word)
{
	size_t n = strlen(word);
	for (size_t i = 0; i + n <= seg.len; i++)
		if (sv_equal_ci_cstr(sv_make(seg.p + i, n), word))
			return true;
	return false;
}

bool gw_github_needs_admin(const char *host, const char *method, const char *path)
{
	/* Administration and secrets, for any method. */
	/* clang-format off */
	static const char *const admin_any[] = {
		"hooks", "keys", "collaborators", "invitations", "teams", "rulesets", "autolinks",
		"environments", "secret-scanning", "code-scanning", "dependabot", "codespaces",
		"vulnerability-alerts", "automated-security-fixes",
		"private-vulnerability-reporting", "interaction-limits", "properties", NULL,
	};
	/* clang-format on */
	static const char *const actions_admin[] = { "permissions", "runners", "oidc", "cache",
						     NULL };
	/* The work a grant is for: writes allowed below these (with the
	 * exceptions below: refs, contents and reviews). */
	static const char *const work_writes[] = {
		"issues",   "pulls",	  "labels",	  "milestones", "comments", "git",
		"statuses", "check-runs", "check-suites", "commits",	NULL,
	};
	if (!host || !method || !path || strcmp(host, "api.github.com") != 0)
		return false;
	struct sv owner, repo, rest = sv_from_cstr(path);
	if (!api_repository(rest, &owner, &repo))
		return false;
	/* What follows /repos/OWNER/REPO. Segments compare in any case: the
	 * table must not be the one place where /PULLS/1/MERGE differs. */
	rest = sv_skip(rest, strlen("/repos/") + owner.len + 1 + repo.len);
	bool read = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
	struct sv segs[4] = { 0 };
	size_t n = 0;
	while (n < 4 && sv_starts_with(rest, SV_LIT("/"))) {
		rest = sv_skip(rest, 1);
		segs[n++] = take_segment(&rest);
	}
	if (n == 0)
		return !read; /* the repository itself: DELETE, PATCH */
	if (seg_in(segs[0], admin_any))
		return true;
	/* Actions' secrets and variables (the repository's, the
	 * organization's, an environment's), and its configuration. */
	if (sv_equal_ci_cstr(segs[0], "actions") && n > 1 &&
	    (seg_in(segs[1], actions_admin) || seg_has(segs[1], "secret") ||
	     seg_has(segs[1], "variable")))
		return true;
	if (sv_equal_ci_cstr(segs[0], "branches") && n > 2 &&
	    sv_equal_ci_cstr(segs[2], "protection"))
		return true;
	if (sv_equal_ci_cstr(segs[0], "tags") && n > 1 && sv_equal_ci_cstr(segs[1], "protection"))
		return true;
	if (sv_equal_ci_cstr(segs[0], "pulls") && n > 2 && sv_equal_ci_cstr(segs[2], "merge"))
		return true; /* publishing opens a pull request; it never merges one */
	if (read)
		return false;
	/* Moving or deleting a branch or tag (a merge by another name),
	 * committing straight onto one (the default branch unless told
	 * otherwise), and approving or dismissing reviews: git pushes go
	 * through smart HTTP, where the refs are checked (push check). */
	if (sv_equal_ci_cstr(segs[0], "git") && n > 1 && sv_equal_ci_cstr(segs[1], "refs"))
		return true;
	if (sv_equal_ci_cstr(segs[0], "contents"))
		return true;
	if (sv_equal_ci_cstr(segs[0], "pulls") && n > 2 && sv_equal_ci_cstr(segs[2], "reviews"))
		return true;
	return !seg_in(segs[0], work_writes);
}

bool gw_github_is_push(const char *host, const char *method, const char *path)
{
	struct sv owner, repo, p;
	if (!host || !method || !path || strcmp(host, "github.com") != 0 ||
	    strcmp(method, "POST") != 0)
		return false;
	p = sv_from_cstr(path);
	return git_repository(p, &owner, &repo) && sv_ends_with(p, SV_LIT("/git-receive-pack"));
}

/* A pkt-line's length: 4 lower- or upper-case hex digits. */
static int pkt_len(const char *p, size_t *ret)
{
	size_t v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		int d = c >= '0' && c <= '9' ? c - '0' :
			c >= 'a' && c <= 'f' ? c - 'a' + 10 :
			c >= 'A' && c <= 'F' ? c - 'A' + 10 :
					       -1;
		if (d < 0)
			return -1;
		v = v << 4 | (size_t)d;
	}
	*ret = v;
	return 0;
}

static bool is_oid(struct sv s)
{
	if (s.len != 40 && s.len != 64)
		return false;
	for (size_t i = 0; i < s.len; i++)
		if (!((s.p[i] >= '0' && s.p[i] <= '9') || (s.p[i] >= 'a' && s.p[i] <= 'f')))
			return false;
	return true;
}

static bool is_zero_oid(struct sv s)
{
	for (size_t i = 0; i < s.len; i++)
		if (s.p[i] != '0')
			return false;
	return true;
}

int gw_github_push_check(const char *body, size_t len, bool complete, const char *prefix,
			 const char **ret_why)
{
	size_t off = 0;
	*ret_why = NULL;
	for (;;) {
		if (off + 4 > len) {
			if (complete || len >= GW_GITHUB_PUSH_HEAD_MAX)
				goto malformed;
			return 0;
		}
		size_t n;
		if (pkt_len(body + off, &n) < 0)
			goto malformed;
		if (n == 0) /* flush: the commands are all in (git probes with none) */
			return 1;
		if (n < 4 || n > 65520)
			goto malformed;
		if (off + n > len) {
			if (complete || off + n > GW_GITHUB_PUSH_HEAD_MAX) {
				*ret_why = complete ? "malformed push request" :
						      "a push's ref updates are too long";
				return -1;
			}
			return 0;
		}
		struct sv line = sv_make(body + off + 4, n - 4);
		off += n;
		/* The first command carries the capabilities after a NUL. */
		size_t nul;
		if (sv_find_char(line, '\0', &nul))
			line = sv_head(line, nul);
		if (sv_ends_with(line, SV_LIT("\n")))
			line = sv_head(line, line.len - 1);
		if (sv_starts_with(line, SV_LIT("shallow ")))
			continue; /* the client's shallow roots: no ref */
		if (sv_starts_with(line, SV_LIT("push-cert"))) {
			*ret_why = "signed pushes need a github-admin:OWNER/REPO grant";
			return -1;
		}
		/* "OLD NEW REF" */
		size_t sp1, sp2;
		if (!sv_find_char(line, ' ', &sp1))
			goto malformed;
		struct sv old = sv_head(line, sp1), rest = sv_skip(line, sp1 + 1);
		if (!sv_find_char(rest, ' ', &sp2))
			goto malformed;
		struct sv new = sv_head(rest, sp2), ref = sv_skip(rest, sp2 + 1);
		if (!is_oid(old) || !is_oid(new) || old.len != new.len || ref.len == 0)
			goto malformed;
		size_t pl = strlen(prefix);
		struct sv heads = SV_LIT("refs/heads/");
		if (!sv_starts_with(ref, heads) || ref.len <= heads.len + pl ||
		    !sv_equal_cstr(sv_make(ref.p + heads.len, pl), prefix)) {
			*ret_why =
				is_zero_oid(new) ?
					"deleting this ref needs a github-admin:OWNER/REPO grant" :
					"a github: grant pushes only branches under its prefix "
					"(refs/heads/airlock/...); other branches and tags need a "
					"github-admin:OWNER/REPO grant";
			return -1;
		}
	}
malformed:
	*ret_why = "malformed push request";
	return -1;
}

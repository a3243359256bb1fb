/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "gateway/github.h"
#include "gateway/path.h"

#define API "api.github.com"
#define WEB "github.com"

static void parse_ok(const char *s, const char *owner, const char *repo)
{
	struct gw_github_grant g;
	memset(&g, 'X', sizeof(g));
	int r = gw_github_grant_parse(s, &g);
	if (r != 0)
		print_error("grant \"%s\": got %d\n", s, r);
	assert_int_equal(r, 0);
	assert_string_equal(g.owner, owner);
	assert_string_equal(g.repo, repo);
}

static void parse_bad(const char *s)
{
	struct gw_github_grant g;
	memset(&g, 'X', sizeof(g));
	int r = gw_github_grant_parse(s, &g);
	if (r != -EINVAL)
		print_error("grant \"%s\": got %d, want -EINVAL\n", s ? s : "(null)", r);
	assert_int_equal(r, -EINVAL);
	/* Left alone on failure. */
	assert_int_equal(g.owner[0], 'X');
	assert_int_equal(g.repo[0], 'X');
}

static struct gw_github_grant grant(const char *s)
{
	struct gw_github_grant g;
	assert_int_equal(gw_github_grant_parse(s, &g), 0);
	return g;
}

static bool allowed1(const char *grant_text, const char *host, const char *path)
{
	struct gw_github_grant g = grant(grant_text);
	return gw_github_allowed(&g, 1, host, path);
}

static void test_parse_valid(void **state)
{
	parse_ok("octo/hello-world", "octo", "hello-world");
	parse_ok("a/b", "a", "b");
	/* Case is kept as written; matching ignores it. */
	parse_ok("Octo-Org/Hello_World.js", "Octo-Org", "Hello_World.js");
	parse_ok("a-b-c/x", "a-b-c", "x");
	parse_ok("0/9", "0", "9");
	/* Repository names may start with or be made of '.', '-', '_'. */
	parse_ok("o/.github", "o", ".github");
	parse_ok("o/...", "o", "...");
	parse_ok("o/.a", "o", ".a");
	parse_ok("o/..a", "o", "..a");
	parse_ok("o/-", "o", "-");
	parse_ok("o/_", "o", "_");
	parse_ok("o/--x--", "o", "--x--");
	/* ".git" is refused only at the very end. */
	parse_ok("o/r.gitx", "o", "r.gitx");
	parse_ok("o/r.git.x", "o", "r.git.x");
	parse_ok("o/git", "o", "git");
	parse_ok("o/rgit", "o", "rgit");
	parse_ok("o/.gi", "o", ".gi");
}

static void test_parse_invalid(void **state)
{
	static const char *const refused[] = {
		/* Shape. */
		"", "/", "o", "o/", "/r", "o/r/", "o/r/x", "o//r", "//", "/o/r", "github:o/r",
		"https://github.com/o/r", "o/r ", " o/r", "o /r", "o/r\n", "o\t/r",
		/* Owner: letters, digits, single inner hyphens. */
		"-o/r", "o-/r", "-/r", "o--x/r", "o_x/r", "o.x/r", "o+x/r", "O@x/r",
		/* Repository: no "." or "..", no ".git" ending in any case. */
		"o/.", "o/..", "o/r.git", "o/r.GIT", "o/r.Git", "o/.git", "o/..git", "o/a.b.git",
		/* Repository: nothing but letters, digits, '-', '_', '.'. */
		"o/r x", "o/r%2e", "o/r%2F..", "o/r?x", "o/r#x", "o/r:x", "o/r;x", "o/r@x", "o/r+x",
		"o/r\\x", "o/r*",
		/* Non-ASCII: UTF-8, Latin-1, a lookalike. */
		"o/r\xc3\xa9", "\xc3\xb6/r", "o/r\x80", "o/\xff", "o\xe2\x80\x8b/r",
		"o/\xd0\xb0", /* Cyrillic a */
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		parse_bad(refused[i]);
	parse_bad(NULL);
	assert_int_equal(gw_github_grant_parse("o/r", NULL), -EINVAL);
}

static void test_parse_limits(void **state)
{
	char s[256], owner[64], repo[128], path[512];
	memset(owner, 'o', GW_GITHUB_OWNER_MAX);
	owner[GW_GITHUB_OWNER_MAX] = '\0';
	memset(repo, 'r', GW_GITHUB_REPO_MAX);
	repo[GW_GITHUB_REPO_MAX] = '\0';

	snprintf(s, sizeof(s), "%s/%s", owner, repo);
	parse_ok(s, owner, repo);
	/* A full-length grant matches, and only itself. */
	struct gw_github_grant g = grant(s);
	snprintf(path, sizeof(path), "/repos/%s/%s", owner, repo);
	assert_true(gw_github_allowed(&g, 1, API, path));
	snprintf(path, sizeof(path), "/%s/%s.git/info/refs", owner, repo);
	assert_true(gw_github_allowed(&g, 1, WEB, path));
	snprintf(path, sizeof(path), "/repos/%s/%sr", owner, repo);
	assert_false(gw_github_allowed(&g, 1, API, path));
	snprintf(path, sizeof(path), "/repos/%so/%s", owner, repo);
	assert_false(gw_github_allowed(&g, 1, API, path));

	/* One more on either side is too long. */
	snprintf(s, sizeof(s), "%so/%s", owner, repo);
	parse_bad(s);
	snprintf(s, sizeof(s), "%s/%sr", owner, repo);
	parse_bad(s);
	/* Hyphens count toward the limit too. */
	snprintf(s, sizeof(s), "%.37s-o/r", owner);
	parse_ok(s, "ooooooooooooooooooooooooooooooooooooo-o", "r");
	snprintf(s, sizeof(s), "%.38s-o/r", owner);
	parse_bad(s);
}

static void test_api(void **state)
{
	const char *g = "Octo/Hello-World";
	/* The repository itself and anything below it, in any case. */
	assert_true(allowed1(g, API, "/repos/octo/hello-world"));
	assert_true(allowed1(g, API, "/repos/Octo/Hello-World"));
	assert_true(allowed1(g, API, "/repos/OCTO/HELLO-WORLD"));
	assert_true(allowed1(g, API, "/repos/octo/hello-world/"));
	assert_true(allowed1(g, API, "/repos/octo/hello-world/issues"));
	assert_true(allowed1(g, API, "/repos/octo/hello-world/git/refs/heads/main"));
	assert_true(allowed1(g, API, "/repos/octo/hello-world/contents/a%20b.txt"));
	assert_true(allowed1(g, API, "/repos/octo/hello-world/compare/main...dev"));

	/* Siblings: other repositories, whole segments only. */
	assert_false(allowed1(g, API, "/repos/octo/hello-world-evil"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world-evil/issues"));
	assert_false(allowed1(g, API, "/repos/octo/hello-worldx"));
	assert_false(allowed1(g, API, "/repos/octo/hello-worl"));
	assert_false(allowed1(g, API, "/repos/octo/xhello-world"));
	assert_false(allowed1(g, API, "/repos/octo-x/hello-world"));
	assert_false(allowed1(g, API, "/repos/octox/hello-world"));
	assert_false(allowed1(g, API, "/repos/hello-world/octo"));
	assert_false(allowed1(g, API, "/repos/octo/other"));
	/* No ".git" on the API: "hello-world.git" is no repository. */
	assert_false(allowed1(g, API, "/repos/octo/hello-world.git"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world.git/issues"));
	/* Not a repository path. */
	assert_false(allowed1(g, API, "/repos/octo"));
	assert_false(allowed1(g, API, "/repos/octo/"));
	assert_false(allowed1(g, API, "/repos/"));
	assert_false(allowed1(g, API, "/repos"));
	assert_false(allowed1(g, API, "/"));
	assert_false(allowed1(g, API, "/user/repos"));
	assert_false(allowed1(g, API, "/orgs/octo/repos"));
	assert_false(allowed1(g, API, "/REPOS/octo/hello-world"));
	assert_false(allowed1(g, API, "/x/repos/octo/hello-world"));
	assert_false(allowed1(g, API, "/repositories/1/hello-world"));
	/* The smart-HTTP form belongs to github.com. */
	assert_false(allowed1(g, API, "/octo/hello-world/info/refs"));
}

static void test_api_not_canonical(void **state)
{
	const char *g = "octo/hello-world";
	/* Raw tricks never match, even where the prefix looks right. */
	assert_false(allowed1(g, API, "/repos/octo/hello-world/../../other/x"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world/./x"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world/%2e%2e/%2e%2e/other/x"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world%2F..%2Fother"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world%2f"));
	assert_false(allowed1(g, API, "/repos//octo/hello-world"));
	assert_false(allowed1(g, API, "/repos/octo//hello-world"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world//x"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world?x=1"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world#x"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world;x"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world\\..\\x"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world/%252e%252e/x"));
	/* Encoded unreserved characters: not canonical as written... */
	assert_false(allowed1(g, API, "/repos/%6fcto/hello-world"));
	assert_false(allowed1(g, API, "/repos/octo/hello%2Dworld"));
	assert_false(allowed1(g, API, "/repos/octo/hello-world%3a"));
	assert_false(allowed1(g, API, ""));
	assert_false(allowed1(g, API, "repos/octo/hello-world"));

	/* ...and fine once canonicalized, which is how the gateway calls. */
	static const struct {
		const char *target;
		int r;
		bool allowed;
	} pipeline[] = {
		{ "/repos/%6fcto/hello%2Dworld/pulls?state=all", 0, true },
		{ "/repos/%4F%43%54%4F/hello-world", 0, true },
		{ "/repos/octo/hello-world/%2e%2e/%2e%2e/other/x", -EINVAL, false },
		{ "/repos/octo/hello-world/..%2F..%2Fother", -EINVAL, false },
		{ "/repos/octo/hello-world%2F..%2Fx", -EINVAL, false },
		{ "/repos/octo/hello-world%252F..%252Fx", -EINVAL, false },
		{ "/repos/octo/hello-world%2D%65vil", 0, false },
		{ "/repos/octo/hello-world%2Egit", 0, false },
		{ "/repos/octo/hello-world%20", 0, false },
		{ "/repos/octo/hello-world%00", -EINVAL, false },
		{ "/repos/octo/hello-world;/../../x", -EINVAL, false },
	};
	struct gw_github_grant gr = grant(g);
	for (size_t i = 0; i < ARRAY_SIZE(pipeline); i++) {
		char out[GW_PATH_MAX + 1];
		size_t q;
		const char *t = pipeline[i].target;
		int r = gw_path_canonical(t, strlen(t), out, sizeof(out), &q);
		if (r != pipeline[i].r)
			print_error("%s: got %d\n", t, r);
		assert_int_equal(r, pipeline[i].r);
		if (r == 0)
			assert_int_equal(gw_github_allowed(&gr, 1, API, out), pipeline[i].allowed);
	}
}

static void test_git(void **state)
{
	const char *g = "octo/hello-world";
	static const char *const endpoints[] = { "info/refs", "git-upload-pack",
						 "git-receive-pack" };
	for (size_t i = 0; i < ARRAY_SIZE(endpoints); i++) {
		char p[128];
		snprintf(p, sizeof(p), "/octo/hello-world/%s", endpoints[i]);
		assert_true(allowed1(g, WEB, p));
		snprintf(p, sizeof(p), "/octo/hello-world.git/%s", endpoints[i]);
		assert_true(allowed1(g, WEB, p));
		snprintf(p, sizeof(p), "/OCTO/Hello-World.git/%s", endpoints[i]);
		assert_true(allowed1(g, WEB, p));
		/* Exactly these: no trailing slash, nothing below. */
		snprintf(p, sizeof(p), "/octo/hello-world/%s/", endpoints[i]);
		assert_false(allowed1(g, WEB, p));
		snprintf(p, sizeof(p), "/octo/hello-world.git/%s/x", endpoints[i]);
		assert_false(allowed1(g, WEB, p));
		snprintf(p, sizeof(p), "/octo/hello-world-evil/%s", endpoints[i]);
		assert_false(allowed1(g, WEB, p));
		snprintf(p, sizeof(p), "/octo/hello-world-evil.git/%s", endpoints[i]);
		assert_false(allowed1(g, WEB, p));
		snprintf(p, sizeof(p), "/octo-evil/hello-world/%s", endpoints[i]);
		assert_false(allowed1(g, WEB, p));
		snprintf(p, sizeof(p), "/repos/octo/hello-world/%s", endpoints[i]);
		assert_false(allowed1(g, WEB, p));
	}
	/* The web UI and everything else on github.com: no credential. */
	assert_false(allowed1(g, WEB, "/octo/hello-world"));
	assert_false(allowed1(g, WEB, "/octo/hello-world/"));
	assert_false(allowed1(g, WEB, "/octo/hello-world.git"));
	assert_false(allowed1(g, WEB, "/octo/hello-world/blob/main/README.md"));
	assert_false(allowed1(g, WEB, "/octo/hello-world/archive/refs/heads/main.zip"));
	assert_false(allowed1(g, WEB, "/octo/hello-world/info"));
	assert_false(allowed1(g, WEB, "/octo/hello-world/info/refsx"));
	assert_false(allowed1(g, WEB, "/octo/hello-world/INFO/REFS"));
	assert_false(allowed1(g, WEB, "/octo/hello-world/git-upload-pack2"));
	assert_false(allowed1(g, WEB, "/octo/hello-world/info/lfs/objects/batch"));
	assert_false(allowed1(g, WEB, "/repos/octo/hello-world"));
	/* One ".git", lower case, and a name before it. */
	assert_false(allowed1(g, WEB, "/octo/hello-world.git.git/info/refs"));
	assert_false(allowed1(g, WEB, "/octo/hello-world.GIT/info/refs"));
	assert_false(allowed1(g, WEB, "/octo/hello-world.gitx/info/refs"));
	assert_false(allowed1(g, WEB, "/octo/.git/info/refs"));
	assert_false(allowed1(g, WEB, "/octo/hello-world.wiki.git/info/refs"));
	assert_false(allowed1(g, WEB, "/octo/hello-worldgit/info/refs"));
	assert_false(allowed1("o/r", WEB, "/o/r-git/info/refs"));
	assert_false(allowed1("o/r", WEB, "/o/rxgit/info/refs"));
	assert_false(allowed1("o/r", WEB, "/o/r.gi/info/refs"));
	assert_false(allowed1("o/r", WEB, "/o/r.git/.git/info/refs"));
	assert_false(allowed1(g, WEB, "/octo.git/hello-world/info/refs"));
	/* Not canonical. */
	assert_false(allowed1(g, WEB, "/octo/hello-world/x/../info/refs"));
	assert_false(allowed1(g, WEB, "/octo/hello-world%2Einfo/refs"));
	assert_false(allowed1(g, WEB, "//octo/hello-world/info/refs"));
	assert_false(allowed1(g, WEB, "/octo/hello-world/info/refs?service=git-upload-pack"));
	assert_false(allowed1(g, WEB, "/octo/hello-world%2Fx/info/refs"));
	/* A repository whose name ends in dots or is made of them. */
	assert_true(allowed1("o/r.", WEB, "/o/r..git/info/refs"));
	assert_true(allowed1("o/r.", WEB, "/o/r./info/refs"));
	assert_true(allowed1("o/...", WEB, "/o/.../git-upload-pack"));
	assert_true(allowed1("o/...", API, "/repos/o/..."));
	assert_true(allowed1("o/.github", WEB, "/o/.github.git/info/refs"));
	assert_true(allowed1("o/.github", API, "/repos/o/.github/contents"));
}

static void test_hosts(void **state)
{
	static const char *const hosts[] = {
		"",
		"API.GITHUB.COM",
		"GitHub.com",
		"api.github.com.",
		"github.com.",
		"api.github.com:443",
		"uploads.github.com",
		"gist.github.com",
		"raw.githubusercontent.com",
		"codeload.github.com",
		"github.com.evil.net",
		"evilgithub.com",
		"evil-api.github.com",
		"api.github.co",
		"www.github.com",
		"api.github.com\n",
		"objects.githubusercontent.com",
	};
	for (size_t i = 0; i < ARRAY_SIZE(hosts); i++) {
		assert_false(allowed1("octo/r", hosts[i], "/repos/octo/r"));
		assert_false(allowed1("octo/r", hosts[i], "/octo/r/info/refs"));
	}
	struct gw_github_grant g = grant("octo/r");
	assert_false(gw_github_allowed(&g, 1, NULL, "/repos/octo/r"));
	assert_false(gw_github_allowed(&g, 1, API, NULL));
	assert_true(gw_github_allowed(&g, 1, API, "/repos/octo/r"));
}

static void test_grant_sets(void **state)
{
	struct gw_github_grant gs[3];
	gs[0] = grant("alpha/one");
	gs[1] = grant("beta/two");
	gs[2] = grant("gamma-x/three.js");

	/* No grants: nothing, whatever the path. */
	assert_false(gw_github_allowed(gs, 0, API, "/repos/alpha/one"));
	assert_false(gw_github_allowed(NULL, 0, API, "/repos/alpha/one"));
	assert_false(gw_github_allowed(NULL, 3, API, "/repos/alpha/one"));
	assert_false(gw_github_allowed(gs, 0, WEB, "/alpha/one/info/refs"));

	assert_true(gw_github_allowed(gs, 3, API, "/repos/alpha/one"));
	assert_true(gw_github_allowed(gs, 3, API, "/repos/beta/two/pulls"));
	assert_true(gw_github_allowed(gs, 3, API, "/repos/Gamma-X/Three.JS"));
	assert_true(gw_github_allowed(gs, 3, WEB, "/beta/two.git/git-receive-pack"));
	assert_true(gw_github_allowed(gs, 3, WEB, "/gamma-x/three.js.git/info/refs"));
	assert_true(gw_github_allowed(gs, 3, WEB, "/gamma-x/three.js/info/refs"));
	/* Owner of one grant with the repository of another. */
	assert_false(gw_github_allowed(gs, 3, API, "/repos/alpha/two"));
	assert_false(gw_github_allowed(gs, 3, API, "/repos/beta/one"));
	assert_false(gw_github_allowed(gs, 3, WEB, "/beta/one/info/refs"));
	assert_false(gw_github_allowed(gs, 3, API, "/repos/gamma/three.js"));
	assert_false(gw_github_allowed(gs, 3, API, "/repos/gamma-x/three"));
	/* Only the first n count. */
	assert_false(gw_github_allowed(gs, 1, API, "/repos/beta/two"));
	assert_true(gw_github_allowed(gs, 2, API, "/repos/beta/two"));
	assert_false(gw_github_allowed(gs, 2, API, "/repos/gamma-x/three.js"));
}

static void test_unparsed_grants(void **state)
{
	/* Grants built by hand: empty or unterminated names match nothing. */
	struct gw_github_grant empty;
	memset(&empty, 0, sizeof(empty));
	assert_false(gw_github_allowed(&empty, 1, API, "/repos/x/y"));
	assert_false(gw_github_allowed(&empty, 1, WEB, "/x/.git/info/refs"));

	struct gw_github_grant full;
	memset(&full, 'a', sizeof(full));
	char path[512];
	snprintf(path, sizeof(path), "/repos/%.*s/%.*s", (int)sizeof(full.owner), full.owner,
		 (int)sizeof(full.repo), full.repo);
	assert_false(gw_github_allowed(&full, 1, API, path));

	struct gw_github_grant half = grant("o/r");
	half.repo[0] = '\0';
	assert_false(gw_github_allowed(&half, 1, API, "/repos/o/r"));
	assert_false(gw_github_allowed(&half, 1, WEB, "/o/.git/info/refs"));
}

/* A plain grant is work on the repository; administration, creating,
 * deleting, publishing and merging need github-admin. */
static void test_admin_table(void **state)
{
	static const struct {
		const char *method, *path;
		bool admin;
	} cases[] = {
		/* Reading is work, almost everywhere. */
		{ "GET", "/repos/o/r", false },
		{ "HEAD", "/repos/o/r", false },
		{ "GET", "/repos/o/r/pulls", false },
		{ "GET", "/repos/o/r/contents/README.md", false },
		{ "GET", "/repos/o/r/actions/runs", false },
		{ "GET", "/repos/o/r/forks", false },
		{ "GET", "/repos/o/r/releases", false },
		{ "GET", "/repos/o/r/branches/main", false },
		/* Working: issues, pull requests, git objects, contents, checks. */
		{ "POST", "/repos/o/r/issues", false },
		{ "PATCH", "/repos/o/r/issues/3", false },
		{ "POST", "/repos/o/r/issues/3/comments", false },
		{ "POST", "/repos/o/r/pulls", false },
		{ "PATCH", "/repos/o/r/pulls/4", false },
		{ "POST", "/repos/o/r/pulls/4/comments", false },
		{ "POST", "/repos/o/r/pulls/4/requested_reviewers", false },
		{ "GET", "/repos/o/r/pulls/4/reviews", false },
		{ "PUT", "/repos/o/r/pulls/4/update-branch", false },
		{ "POST", "/repos/o/r/git/blobs", false },
		{ "POST", "/repos/o/r/git/trees", false },
		{ "POST", "/repos/o/r/git/commits", false },
		{ "GET", "/repos/o/r/git/refs/heads/main", false },
		{ "POST", "/repos/o/r/statuses/abc123", false },
		{ "POST", "/repos/o/r/check-runs", false },
		{ "POST", "/repos/o/r/labels", false },
		{ "POST", "/repos/o/r/commits/abc/comments", false },
		/* The repository itself, and making others from it. */
		{ "DELETE", "/repos/o/r", true },
		{ "PATCH", "/repos/o/r", true },
		{ "POST", "/repos/o/r/forks", true },
		{ "POST", "/repos/o/r/generate", true },
		{ "POST", "/repos/o/r/transfer", true },
		{ "PUT", "/repos/o/r/topics", true },
		/* Administration and secrets, even to read. */
		{ "GET", "/repos/o/r/hooks", true },
		{ "POST", "/repos/o/r/hooks", true },
		{ "GET", "/repos/o/r/keys", true },
		{ "POST", "/repos/o/r/keys", true },
		{ "PUT", "/repos/o/r/collaborators/mallory", true },
		{ "GET", "/repos/o/r/collaborators", true },
		{ "GET", "/repos/o/r/actions/secrets", true },
		{ "PUT", "/repos/o/r/actions/secrets/TOKEN", true },
		{ "GET", "/repos/o/r/actions/secrets/public-key", true },
		{ "POST", "/repos/o/r/actions/variables", true },
		{ "PUT", "/repos/o/r/actions/permissions", true },
		{ "GET", "/repos/o/r/environments/prod/secrets", true },
		{ "GET", "/repos/o/r/dependabot/secrets", true },
		{ "PUT", "/repos/o/r/branches/main/protection", true },
		{ "GET", "/repos/o/r/branches/main/protection", true },
		{ "POST", "/repos/o/r/tags/protection", true },
		{ "POST", "/repos/o/r/rulesets", true },
		/* Moving, making or deleting a branch or tag, committing onto
		 * one, approving and dismissing: merges by other names. */
		{ "POST", "/repos/o/r/git/refs", true },
		{ "PATCH", "/repos/o/r/git/refs/heads/main", true },
		{ "DELETE", "/repos/o/r/git/refs/heads/main", true },
		{ "PATCH", "/repos/o/r/GIT/REFS/heads/main", true },
		{ "PUT", "/repos/o/r/contents/a/b.txt", true },
		{ "DELETE", "/repos/o/r/contents/a/b.txt", true },
		{ "POST", "/repos/o/r/pulls/4/reviews", true },
		{ "POST", "/repos/o/r/pulls/4/reviews/1/events", true },
		{ "PUT", "/repos/o/r/pulls/4/reviews/1/dismissals", true },
		{ "POST", "/repos/o/r/merge-upstream", true },
		/* Case is no way around the table. */
		{ "PUT", "/repos/o/r/pulls/4/MERGE", true },
		{ "PUT", "/repos/o/r/Pulls/4/Merge", true },
		{ "GET", "/repos/o/r/HOOKS", true },
		{ "GET", "/repos/o/r/Actions/Secrets", true },
		/* Actions' secrets and variables, wherever they are listed. */
		{ "GET", "/repos/o/r/actions/organization-secrets", true },
		{ "GET", "/repos/o/r/actions/organization-variables", true },
		{ "GET", "/repos/o/r/actions/variables/X", true },
		{ "GET", "/repos/o/r/actions/runs/1/logs", false },
		/* Publishing and running. */
		{ "PUT", "/repos/o/r/pulls/4/merge", true },
		{ "GET", "/repos/o/r/pulls/4/merge", true },
		{ "POST", "/repos/o/r/merges", true },
		{ "POST", "/repos/o/r/releases", true },
		{ "POST", "/repos/o/r/deployments", true },
		{ "POST", "/repos/o/r/dispatches", true },
		{ "POST", "/repos/o/r/actions/workflows/ci.yml/dispatches", true },
		{ "POST", "/repos/o/r/actions/runs/1/rerun", true },
		{ "DELETE", "/repos/o/r/releases/1", true },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		if (gw_github_needs_admin(API, cases[i].method, cases[i].path) != cases[i].admin)
			fail_msg("%s %s: needs admin %d, expected %d", cases[i].method,
				 cases[i].path, !cases[i].admin, cases[i].admin);
	/* Git smart HTTP is work (clone, fetch, push); other hosts never. */
	assert_false(gw_github_needs_admin(WEB, "POST", "/o/r.git/git-receive-pack"));
	assert_false(gw_github_needs_admin("example.com", "DELETE", "/repos/o/r"));
	assert_false(gw_github_needs_admin(API, "POST", "/user/repos"));
	assert_false(gw_github_needs_admin(API, NULL, "/repos/o/r"));
}

/* A pkt-line of a push: "OLD NEW REF" (the first with capabilities). */
static size_t pkt(char *out, const char *old, const char *new, const char *ref, bool caps)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "%s %s %s%s\n", old, new, ref,
			 caps ? "@report-status side-band-64k" : "");
	if (caps)
		line[strlen(old) + strlen(new) + strlen(ref) + 2] = '\0'; /* the NUL */
	char len[8];
	snprintf(len, sizeof(len), "%04x", n + 4);
	memcpy(out, len, 4);
	memcpy(out + 4, line, (size_t)n);
	return 4 + (size_t)n;
}

#define Z40 "0000000000000000000000000000000000000000"
#define A40 "1111111111111111111111111111111111111111"
#define B40 "2222222222222222222222222222222222222222"

/* A plain grant's pushes: branches under its prefix, nothing else. */
static void test_push_check(void **state)
{
	static const struct {
		const char *old, *new, *ref;
		int want;
	} one[] = {
		{ Z40, A40, "refs/heads/airlock/fix-1", 1 }, /* create */
		{ A40, B40, "refs/heads/airlock/fix-1", 1 }, /* update, forced or not */
		{ A40, Z40, "refs/heads/airlock/fix-1", 1 }, /* delete its own */
		{ A40, B40, "refs/heads/main", -1 },	     /* the default branch */
		{ Z40, A40, "refs/heads/release/1.0", -1 },  /* any other branch */
		{ A40, Z40, "refs/heads/main", -1 },	     /* deleting one */
		{ Z40, A40, "refs/tags/v1.0", -1 },	     /* a tag */
		{ Z40, A40, "refs/heads/airlock/", -1 },     /* the prefix alone */
		{ Z40, A40, "refs/heads/airlockx/y", -1 },   /* a sibling of it */
		{ Z40, A40, "refs/notes/commits", -1 },	     { Z40, A40, "refs/pull/1/head", -1 },
		{ "xyz", A40, "refs/heads/airlock/a", -1 }, /* malformed */
	};
	const char *why;
	for (size_t i = 0; i < ARRAY_SIZE(one); i++) {
		char body[1024];
		size_t n = pkt(body, one[i].old, one[i].new, one[i].ref, true);
		memcpy(body + n, "0000PACK...", 11);
		int r = gw_github_push_check(body, n + 11, true, "airlock/", &why);
		if (r != one[i].want)
			fail_msg("%s %s %s: %d, expected %d", one[i].old, one[i].new, one[i].ref, r,
				 one[i].want);
		if (r < 0)
			assert_non_null(why);
		/* Every cut of the input before the flush asks for more, the
		 * same verdict once it is all there. */
		for (size_t cut = 0; cut < n + 4; cut++) {
			r = gw_github_push_check(body, cut, false, "airlock/", &why);
			if (r != 0 && !(r < 0 && one[i].want < 0))
				fail_msg("%s cut at %zu: %d", one[i].ref, cut, r);
		}
	}
	/* Several updates: one refused refuses the push. */
	char body[4096];
	size_t n = pkt(body, Z40, A40, "refs/heads/airlock/a", true);
	n += pkt(body + n, A40, B40, "refs/heads/airlock/b", false);
	memcpy(body + n, "0000", 4);
	assert_int_equal(gw_github_push_check(body, n + 4, true, "airlock/", &why), 1);
	n += pkt(body + n, A40, B40, "refs/heads/main", false);
	memcpy(body + n, "0000", 4);
	assert_int_equal(gw_github_push_check(body, n + 4, true, "airlock/", &why), -1);
	assert_non_null(strstr(why, "github-admin:"));
	/* Shallow roots pass; a signed push and junk do not. */
	n = (size_t)snprintf(body, sizeof(body), "0035shallow " A40 "\n");
	n += pkt(body + n, Z40, A40, "refs/heads/airlock/a", true);
	memcpy(body + n, "0000", 4);
	assert_int_equal(gw_github_push_check(body, n + 4, true, "airlock/", &why), 1);
	/* A flush alone updates nothing: git's probe before a chunked push. */
	assert_int_equal(gw_github_push_check("0000", 4, true, "airlock/", &why), 1);
	assert_int_equal(gw_github_push_check("001dpush-cert\0report-status\n0000", 33, true,
					      "airlock/", &why),
			 -1);
	assert_non_null(strstr(why, "signed"));
	assert_int_equal(gw_github_push_check("zzzz", 4, false, "airlock/", &why), -1);
	assert_int_equal(gw_github_push_check("0003", 4, false, "airlock/", &why), -1);
	assert_int_equal(gw_github_push_check("", 0, true, "airlock/", &why), -1);
	/* More than the limit without a flush: refused, never buffered on. */
	char *big = malloc(GW_GITHUB_PUSH_HEAD_MAX + 1024);
	assert_non_null(big);
	size_t off = 0;
	while (off < GW_GITHUB_PUSH_HEAD_MAX + 512)
		off += pkt(big + off, Z40, A40, "refs/heads/airlock/aaaaaaaaaaaaaaaaaaaaaaaa",
			   off == 0);
	assert_int_equal(gw_github_push_check(big, off, false, "airlock/", &why), -1);
	free(big);
	/* Only POSTs of receive-pack on github.com are pushes. */
	assert_true(gw_github_is_push("github.com", "POST", "/o/r.git/git-receive-pack"));
	assert_true(gw_github_is_push("github.com", "POST", "/o/r/git-receive-pack"));
	assert_false(gw_github_is_push("github.com", "GET", "/o/r.git/git-receive-pack"));
	assert_false(gw_github_is_push("github.com", "POST", "/o/r.git/git-upload-pack"));
	assert_false(gw_github_is_push("api.github.com", "POST", "/o/r.git/git-receive-pack"));
}

/* The admin grant is the one found when both are given. */
static void test_grant_for_prefers_admin(void **state)
{
	struct gw_github_grant gs[2];
	assert_int_equal(gw_github_grant_parse("o/r", &gs[0]), 0);
	assert_int_equal(gw_github_grant_parse("O/R", &gs[1]), 0);
	gs[1].admin = true;
	const struct gw_github_grant *g = gw_github_grant_for(gs, 2, API, "/repos/o/r/hooks");
	assert_ptr_equal(g, &gs[1]);
	assert_null(gw_github_grant_for(gs, 1, API, "/repos/o/x"));
	assert_false(gs[0].admin);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_admin_table),
		cmocka_unit_test(test_grant_for_prefers_admin),
		cmocka_unit_test(test_push_check),
		cmocka_unit_test(test_parse_valid),
		cmocka_unit_test(test_parse_invalid),
		cmocka_unit_test(test_parse_limits),
		cmocka_unit_test(test_api),
		cmocka_unit_test(test_api_not_canonical),
		cmocka_unit_test(test_git),
		cmocka_unit_test(test_hosts),
		cmocka_unit_test(test_grant_sets),
		cmocka_unit_test(test_unparsed_grants),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

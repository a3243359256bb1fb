/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The input as a request target through gw_path_canonical(), and as a grant
 * through gw_github_grant_parse(). Checks what the gateway relies on: an
 * accepted path is a fixed point, holds nothing that reads two ways (also
 * after one or two more rounds of percent-decoding by a careless upstream),
 * agrees with gw_path_has_prefix() at every segment boundary, and gets the
 * GitHub credential exactly when a plain reading of it names a granted
 * repository.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway/github.h"
#include "gateway/path.h"
#include "fuzz.h"

static const char *const grant_texts[] = { "octo/hello-world", "a/b.c", "Zz-9/...", "x/.github" };

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* One round of percent-decoding the way a lax server does it: every valid
 * escape decoded, anything else left alone. out holds at least strlen(in)+1
 * bytes; returns the length (the result may hold NUL bytes). */
static size_t decode_once(const char *in, size_t len, char *out)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		int hi, lo;
		if (in[i] == '%' && i + 2 < len && (hi = hex_value(in[i + 1])) >= 0 &&
		    (lo = hex_value(in[i + 2])) >= 0) {
			out[n++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			out[n++] = in[i];
		}
	}
	out[n] = '\0';
	return n;
}

static size_t count_char(const char *s, size_t len, char c)
{
	size_t k = 0;
	for (size_t i = 0; i < len; i++)
		k += s[i] == c;
	return k;
}

/*
 * After a round of decoding the path must still have the same segments,
 * none of them a dot segment, with no other separator or NUL smuggled in.
 * Only after the first round: no dot followed by ';' (a path parameter) and
 * no overlong UTF-8 lead byte; a server that decodes twice and then strips
 * parameters or accepts overlong UTF-8 is beyond helping.
 */
static void check_decoded(const char *canon, size_t canon_len, const char *d, size_t len,
			  bool first)
{
	check(count_char(d, len, '/') == count_char(canon, canon_len, '/'));
	check(memchr(d, '\\', len) == NULL);
	check(memchr(d, '\0', len) == NULL);
	size_t start = 1;
	for (size_t i = 1; i <= len; i++) {
		if (i < len && d[i] != '/')
			continue;
		const char *s = d + start;
		size_t n = i - start;
		check(!(n == 1 && s[0] == '.'));
		check(!(n == 2 && s[0] == '.' && s[1] == '.'));
		if (first) {
			check(!(n >= 2 && s[0] == '.' && s[1] == ';'));
			check(!(n >= 3 && s[0] == '.' && s[1] == '.' && s[2] == ';'));
		}
		start = i + 1;
	}
	for (size_t i = 0; first && i < len; i++) {
		unsigned char c = (unsigned char)d[i];
		unsigned char next = i + 1 < len ? (unsigned char)d[i + 1] : 0;
		check(c != 0xc0 && c != 0xc1);
		check(!(c == 0xe0 && next >= 0x80 && next <= 0x9f));
		check(!(c == 0xf0 && next >= 0x80 && next <= 0x8f));
	}
}

static void check_canonical(const char *s, size_t n)
{
	static const char *const never[] = { "/./", "/../", "//", "%2F", "%5C", "%2E", "%00" };
	check(n >= 1 && s[0] == '/');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		/* Raw: only what RFC 3986 allows in a segment, less ';'. */
		check(c > 0x20 && c < 0x7f);
		check(strchr("\"#;<>?[\\]^`{|}", c) == NULL);
		if (c == '%') {
			/* Kept escapes: two upper-case hex digits, never an
			 * unreserved character. */
			check(i + 2 < n);
			int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
			check(hi >= 0 && lo >= 0);
			check(!(s[i + 1] >= 'a') && !(s[i + 2] >= 'a'));
			int v = hi * 16 + lo;
			check(!((v >= 'A' && v <= 'Z') || (v >= 'a' && v <= 'z') ||
				(v >= '0' && v <= '9') || v == '-' || v == '.' || v == '_' ||
				v == '~'));
			i += 2;
		}
	}
	for (size_t k = 0; k < sizeof(never) / sizeof(never[0]); k++)
		check(strcasestr(s, never[k]) == NULL);
	check(!(n >= 2 && strcmp(s + n - 2, "/.") == 0));
	check(!(n >= 3 && strcmp(s + n - 3, "/..") == 0));
}

static void check_prefixes(const char *s, size_t n)
{
	char prefix[GW_PATH_MAX + 2];
	check(gw_path_has_prefix(s, s));
	check(gw_path_has_prefix(s, "/"));
	/* Every position for short paths, a sample for long ones. */
	size_t step = n <= 256 ? 1 : n / 128;
	for (size_t k = 1; k <= n; k += step) {
		memcpy(prefix, s, k);
		prefix[k] = '\0';
		bool boundary = k == n || s[k] == '/' || s[k - 1] == '/';
		check(gw_path_has_prefix(s, prefix) == boundary);
	}
	/* Something longer is never a prefix, nor is a continuation. */
	memcpy(prefix, s, n);
	memcpy(prefix + n, "x", 2);
	check(!gw_path_has_prefix(s, prefix));
	if (s[n - 1] != '/') {
		memcpy(prefix + n, "/", 2);
		check(!gw_path_has_prefix(s, prefix));
	}
}

/* The credential decision, spelled out naively for comparison: the whole
 * path against the few strings a grant allows, owner and repository
 * without regard to case, the rest exactly. */
static bool reference_allowed(const struct gw_github_grant *gs, size_t n_gs, const char *host,
			      const char *path)
{
	static const char *const tails[] = { "/info/refs",	     "/git-upload-pack",
					     "/git-receive-pack",    ".git/info/refs",
					     ".git/git-upload-pack", ".git/git-receive-pack" };
	char want[256];
	for (size_t i = 0; i < n_gs; i++) {
		int wl = snprintf(want, sizeof(want), "%s/%s", gs[i].owner, gs[i].repo);
		check(wl > 0 && (size_t)wl < sizeof(want));
		if (strcmp(host, "api.github.com") == 0) {
			if (strncmp(path, "/repos/", 7) == 0 &&
			    strncasecmp(path + 7, want, (size_t)wl) == 0 &&
			    (path[7 + wl] == '\0' || path[7 + wl] == '/'))
				return true;
		} else if (strcmp(host, "github.com") == 0) {
			if (path[0] != '/' || strncasecmp(path + 1, want, (size_t)wl) != 0)
				continue;
			for (size_t t = 0; t < sizeof(tails) / sizeof(tails[0]); t++)
				if (strcmp(path + 1 + wl, tails[t]) == 0)
					return true;
		}
	}
	return false;
}

static void check_github(const char *canon)
{
	struct gw_github_grant gs[sizeof(grant_texts) / sizeof(grant_texts[0])];
	size_t n_gs = sizeof(gs) / sizeof(gs[0]);
	for (size_t i = 0; i < n_gs; i++)
		check(gw_github_grant_parse(grant_texts[i], &gs[i]) == 0);
	static const char *const hosts[] = { "api.github.com",	"github.com",
					     "example.com",	"api.github.com.",
					     "xapi.github.com", "api.github.com.evil.net",
					     "GitHub.com",	"github.com:443" };
	for (size_t h = 0; h < sizeof(hosts) / sizeof(hosts[0]); h++) {
		bool got = gw_github_allowed(gs, n_gs, hosts[h], canon);
		check(got == reference_allowed(gs, n_gs, hosts[h], canon));
		check(!gw_github_allowed(gs, 0, hosts[h], canon));
	}
}

static void check_grant(const char *s)
{
	struct gw_github_grant g;
	if (gw_github_grant_parse(s, &g) < 0)
		return;
	size_t ol = strlen(g.owner), rl = strlen(g.repo);
	check(ol >= 1 && ol <= GW_GITHUB_OWNER_MAX && rl >= 1 && rl <= GW_GITHUB_REPO_MAX);
	check(strlen(s) == ol + 1 + rl && s[ol] == '/');
	check(g.owner[0] != '-' && g.owner[ol - 1] != '-' && !strstr(g.owner, "--"));
	check(strcmp(g.repo, ".") != 0 && strcmp(g.repo, "..") != 0);
	check(!(rl >= 4 && strcasecmp(g.repo + rl - 4, ".git") == 0));

	/* A granted repository's paths are canonical as written and allowed;
	 * its "-evil" sibling and other spellings are not. */
	char p[512], out[GW_PATH_MAX + 1];
	size_t q;
	snprintf(p, sizeof(p), "/repos/%s/%s/issues", g.owner, g.repo);
	check(gw_path_canonical(p, strlen(p), out, sizeof(out), &q) == 0 && strcmp(out, p) == 0);
	check(gw_github_allowed(&g, 1, "api.github.com", p));
	snprintf(p, sizeof(p), "/%s/%s.git/info/refs", g.owner, g.repo);
	check(gw_github_allowed(&g, 1, "github.com", p));
	snprintf(p, sizeof(p), "/%s/%s/git-upload-pack", g.owner, g.repo);
	check(gw_github_allowed(&g, 1, "github.com", p));
	snprintf(p, sizeof(p), "/repos/%s/%s-evil", g.owner, g.repo);
	check(!gw_github_allowed(&g, 1, "api.github.com", p));
	snprintf(p, sizeof(p), "/repos/%s/%s.git", g.owner, g.repo);
	check(!gw_github_allowed(&g, 1, "api.github.com", p));
	snprintf(p, sizeof(p), "/repos/%s/%s/../x", g.owner, g.repo);
	check(!gw_github_allowed(&g, 1, "api.github.com", p));
	snprintf(p, sizeof(p), "/%s/%s/blob/x", g.owner, g.repo);
	check(!gw_github_allowed(&g, 1, "github.com", p));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *target = (const char *)data;
	char out[GW_PATH_MAX + 1];
	size_t query = (size_t)-1;

	int r = gw_path_canonical(target, size, out, sizeof(out), &query);
	check(r == 0 || r == -EINVAL || r == -ENAMETOOLONG);
	check(r != -ENAMETOOLONG || size > GW_PATH_MAX);
	if (r == 0) {
		size_t n = strlen(out);
		check(query <= size && n <= query);
		check(query == size || target[query] == '?');
		check(memchr(target, '?', query) == NULL);
		check(memchr(target, '#', size) == NULL);
		/* The query is forwarded as it came: nothing in it may break
		 * the request line. */
		for (size_t i = query; i < size; i++)
			check(data[i] > 0x20 && data[i] < 0x7f);
		check_canonical(out, n);

		/* A fixed point, with the same answer in a buffer just big
		 * enough and -ENAMETOOLONG in one a byte short. */
		char again[GW_PATH_MAX + 1];
		size_t q2;
		check(gw_path_canonical(out, n, again, n + 1, &q2) == 0);
		check(strcmp(again, out) == 0 && q2 == n);
		check(gw_path_canonical(target, size, again, n, &q2) == -ENAMETOOLONG);
		check(gw_path_canonical(target, size, again, n + 1, &q2) == 0 && q2 == query);

		/* One and two more rounds of decoding change no segment. */
		char d1[GW_PATH_MAX + 1], d2[GW_PATH_MAX + 1];
		size_t l1 = decode_once(out, n, d1);
		check_decoded(out, n, d1, l1, true);
		size_t l2 = decode_once(d1, l1, d2);
		check_decoded(out, n, d2, l2, false);

		check_prefixes(out, n);
		check_github(out);
	}

	if (size <= 256) {
		char s[257];
		memcpy(s, data, size);
		s[size] = '\0';
		check_grant(s);
	}
	return 0;
}

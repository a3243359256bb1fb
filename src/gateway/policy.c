/* SPDX-License-Identifier: Apache-2.0 */
#include "gateway/internal.h"
#include "gateway/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/config.h"
#include "gateway/path.h"

DEFINE_CLEANUP_FUNC(struct gw_policy, gw_policy_free)

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_label_char(char c)
{
	return (c >= 'a' && c <= 'z') || is_digit(c) || c == '-';
}

int gw_host_normalize(const char *in, size_t len, char *out, size_t size, bool *ret_ip)
{
	if (len == 0 || size == 0)
		return -EINVAL;
	if (in[0] == '[') {
		/* An IPv6 literal, bracketed as in URLs and Host headers. */
		if (len < 3 || in[len - 1] != ']' || len - 2 >= INET6_ADDRSTRLEN)
			return -EINVAL;
		char buf[INET6_ADDRSTRLEN];
		memcpy(buf, in + 1, len - 2);
		buf[len - 2] = '\0';
		struct in6_addr a;
		if (memchr(buf, '\0', len - 2) || inet_pton(AF_INET6, buf, &a) != 1)
			return -EINVAL;
		char canon[INET6_ADDRSTRLEN];
		if (!inet_ntop(AF_INET6, &a, canon, sizeof(canon)))
			return -EINVAL;
		int n = snprintf(out, size, "[%s]", canon);
		if (n < 0 || (size_t)n >= size)
			return -ENAMETOOLONG;
		*ret_ip = true;
		return 0;
	}
	if (in[len - 1] == '.')
		len--; /* one trailing dot: the root */
	if (len == 0 || len > GW_HOST_MAX || len >= size)
		return -EINVAL;
	char buf[GW_HOST_MAX + 1];
	for (size_t i = 0; i < len; i++) {
		char c = in[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (!is_label_char(c) && c != '.')
			return -EINVAL; /* NUL, non-ASCII (IDNs come as punycode), '_', ... */
		buf[i] = c;
	}
	buf[len] = '\0';
	struct in_addr a4;
	if (inet_pton(AF_INET, buf, &a4) == 1) {
		memcpy(out, buf, len + 1);
		*ret_ip = true;
		return 0;
	}
	/* Labels: 1..63 characters, no hyphen at either end. */
	size_t start = 0;
	bool last_all_digits = false;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && buf[i] != '.')
			continue;
		size_t l = i - start;
		if (l == 0 || l > 63 || buf[start] == '-' || buf[i - 1] == '-')
			return -EINVAL;
		last_all_digits = true;
		for (size_t j = start; j < i; j++)
			if (!is_digit(buf[j]))
				last_all_digits = false;
		start = i + 1;
	}
	/* "1.2.3", "0x7f.1": numbers some resolvers read as addresses. */
	if (last_all_digits)
		return -EINVAL;
	memcpy(out, buf, len + 1);
	*ret_ip = false;
	return 0;
}

void gw_policy_free(struct gw_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_rules; i++) {
		struct gw_rule *r = &p->rules[i];
		for (size_t j = 0; j < r->n_methods; j++)
			free(r->methods[j]);
		for (size_t j = 0; j < r->n_paths; j++)
			free(r->paths[j]);
	}
	free(p->rules);
	free(p);
}

static int parse_host(const struct config_node *n, const char *path, struct gw_rule *r,
		      struct al_error *err)
{
	const char *host;
	int rc = config_get_str(n, path, &host, err);
	if (rc < 0)
		return rc;
	size_t len = strlen(host);
	if (strstr(host, "://"))
		return config_error(n, path, err,
				    "a host takes no URL scheme: the host name alone (the port "
				    "and paths are keys of their own)");
	if (len > 2 && host[0] == '*' && host[1] == '.') {
		bool ip;
		if (gw_host_normalize(host + 2, len - 2, r->host, sizeof(r->host), &ip) < 0 || ip)
			return config_error(n, path, err,
					    "expected *.domain with a valid domain name");
		r->wildcard = true;
		return 0;
	}
	if (strchr(host, '*'))
		return config_error(n, path, err, "a wildcard is only allowed as a leading \"*.\"");
	if (gw_host_normalize(host, len, r->host, sizeof(r->host), &r->ip_literal) < 0)
		return config_error(
			n, path, err,
			"expected a host name (ASCII; IDNs as punycode) or an IP literal");
	return 0;
}

static int parse_methods(const struct config_node *n, const char *path, struct gw_rule *r,
			 struct al_error *err)
{
	int rc = config_expect_kind(n, path, CONFIG_SEQ, err);
	if (rc < 0)
		return rc;
	size_t count = config_node_count(n);
	if (count == 0 || count > GW_RULE_MAX_METHODS)
		return config_error(n, path, err, "expected 1 to %d methods", GW_RULE_MAX_METHODS);
	for (size_t i = 0; i < count; i++) {
		const char *m;
		rc = config_get_str(config_seq_item(n, i), path, &m, err);
		if (rc < 0)
			return rc;
		size_t len = strlen(m);
		bool ok = len > 0 && len <= 32;
		for (size_t j = 0; ok && j < len; j++)
			ok = (m[j] >= 'A' && m[j] <= 'Z') || (m[j] >= 'a' && m[j] <= 'z');
		if (!ok)
			return config_error(config_seq_item(n, i), path, err,
					    "expected an HTTP method such as GET or POST");
		char *up = strdup(m);
		if (!up)
			return -ENOMEM;
		for (char *c = up; *c; c++)
			if (*c >= 'a' && *c <= 'z')
				*c = (char)(*c - 'a' + 'A');
		r->methods[r->n_methods++] = up;
	}
	return 0;
}

int gw_parse_path_prefixes(const struct config_node *n, const char *path, char **out, size_t *n_out,
			   struct al_error *err)
{
	int rc = config_expect_kind(n, path, CONFIG_SEQ, err);
	if (rc < 0)
		return rc;
	size_t count = config_node_count(n);
	if (count == 0 || count > GW_RULE_MAX_PATHS)
		return config_error(n, path, err, "expected 1 to %d path prefixes",
				    GW_RULE_MAX_PATHS);
	for (size_t i = 0; i < count; i++) {
		const struct config_node *item = config_seq_item(n, i);
		const char *p;
		rc = config_get_str(item, path, &p, err);
		if (rc < 0)
			return rc;
		/* A prefix must be written in the canonical form requests are
		 * compared in, or it would silently never match. */
		char canon[GW_PATH_MAX + 1];
		size_t q;
		size_t len = strlen(p);
		if (gw_path_canonical(p, len, canon, sizeof(canon), &q) < 0 || q != len ||
		    strcmp(canon, p) != 0)
			return config_error(item, path, err,
					    "expected a canonical path prefix starting with '/' "
					    "(no query, no '.' or '..' segments, no %%2F)");
		char *copy = strdup(p);
		if (!copy)
			return al_error_set(err, -ENOMEM, "out of memory");
		out[(*n_out)++] = copy;
	}
	return 0;
}

static int parse_paths(const struct config_node *n, const char *path, struct gw_rule *r,
		       struct al_error *err)
{
	return gw_parse_path_prefixes(n, path, r->paths, &r->n_paths, err);
}

static int parse_rule(const struct config_node *n, size_t index, struct gw_rule *r,
		      struct al_error *err)
{
	char path[64];
	snprintf(path, sizeof(path), "rules[%zu]", index);
	int rc = config_expect_kind(n, path, CONFIG_MAP, err);
	if (rc < 0)
		return rc;
	static const char *const keys[] = {
		"id", "action", "host", "port", "methods", "paths", NULL
	};
	rc = config_map_check_keys(n, path, keys, err);
	if (rc < 0)
		return rc;
	const struct config_node *v = config_map_get(n, "id");
	if (v) {
		const char *id;
		rc = config_get_str(v, NULL, &id, err);
		if (rc < 0)
			return rc;
		size_t len = strlen(id);
		bool ok = len > 0 && len <= GW_RULE_ID_MAX;
		for (size_t i = 0; ok && i < len; i++)
			ok = (id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
			     is_digit(id[i]) || id[i] == '-' || id[i] == '_' || id[i] == '.';
		if (!ok)
			return config_error(v, NULL, err,
					    "expected 1 to %d letters, digits, '-', '_' or '.'",
					    GW_RULE_ID_MAX);
		memcpy(r->id, id, len + 1);
	} else {
		snprintf(r->id, sizeof(r->id), "rule-%zu", index + 1);
	}
	v = config_map_get(n, "action");
	if (v) {
		static const char *const actions[] = { "allow", "deny", NULL };
		int a;
		rc = config_get_enum(v, NULL, actions, &a, err);
		if (rc < 0)
			return rc;
		r->deny = a == 1;
	}
	const struct config_node *host;
	rc = config_map_require(n, path, "host", &host, err);
	if (rc < 0)
		return rc;
	rc = parse_host(host, NULL, r, err);
	if (rc < 0)
		return rc;
	v = config_map_get(n, "port");
	if (v) {
		uint64_t port;
		rc = config_get_u64(v, NULL, &port, err);
		if (rc < 0)
			return rc;
		if (port == 0 || port > 65535)
			return config_error(v, NULL, err, "expected a port from 1 to 65535");
		r->port = (uint16_t)port;
	}
	v = config_map_get(n, "methods");
	if (v) {
		rc = parse_methods(v, NULL, r, err);
		if (rc < 0)
			return rc;
	}
	v = config_map_get(n, "paths");
	if (v) {
		rc = parse_paths(v, NULL, r, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int gw_policy_from_doc(const struct config_doc *doc, const char *const *other_keys,
		       uint64_t generation, struct gw_policy **ret, struct al_error *err)
{
	const struct config_node *root = config_root(doc);
	if (config_node_is_null(root)) {
		/* An empty file: no rules. */
		struct gw_policy *p = calloc(1, sizeof(*p));
		if (!p)
			return al_error_set(err, -ENOMEM, "out of memory");
		p->generation = generation;
		*ret = p;
		return 0;
	}
	int rc = config_expect_kind(root, "(top level)", CONFIG_MAP, err);
	if (rc < 0)
		return rc;
	const char *keys[16] = { "rules" };
	size_t nk = 1;
	for (size_t i = 0; other_keys && other_keys[i] && nk < ARRAY_SIZE(keys) - 1; i++)
		keys[nk++] = other_keys[i];
	keys[nk] = NULL;
	rc = config_map_check_keys(root, "(top level)", keys, err);
	if (rc < 0)
		return rc;
	_cleanup_(gw_policy_freep) struct gw_policy *p = calloc(1, sizeof(*p));
	if (!p)
		return al_error_set(err, -ENOMEM, "out of memory");
	p->generation = generation;
	const struct config_node *rules = config_map_get(root, "rules");
	if (rules) {
		rc = config_expect_kind(rules, "rules", CONFIG_SEQ, err);
		if (rc < 0)
			return rc;
		size_t count = config_node_count(rules);
		if (count > GW_POLICY_MAX_RULES)
			return config_error(rules, "rules", err, "at most %d rules",
					    GW_POLICY_MAX_RULES);
		p->rules = calloc(count ? count : 1, sizeof(*p->rules));
		if (!p->rules)
			return al_error_set(err, -ENOMEM, "out of memory");
		for (size_t i = 0; i < count; i++) {
			/* Counted first, so a half-parsed rule is freed too. */
			p->n_rules = i + 1;
			rc = parse_rule(config_seq_item(rules, i), i, &p->rules[i], err);
			if (rc < 0)
				return rc == -ENOMEM ? al_error_set(err, rc, "out of memory") : rc;
			for (size_t j = 0; j < i; j++)
				if (strcmp(p->rules[j].id, p->rules[i].id) == 0)
					return config_error(config_seq_item(rules, i), NULL, err,
							    "rule id \"%s\" is used twice",
							    p->rules[i].id);
		}
	}
	*ret = TAKE_PTR(p);
	return 0;
}

int gw_policy_parse(const char *name, const char *text, size_t len, uint64_t generation,
		    struct gw_policy **ret, struct al_error *err)
{
	_cleanup_config_doc_ struct config_doc *doc = NULL;
	int rc = config_load_string(name, text, len, &doc, err);
	if (rc < 0)
		return rc;
	return gw_policy_from_doc(doc, NULL, generation, ret, err);
}

int gw_policy_load(const char *path, uint64_t generation, struct gw_policy **ret,
		   struct al_error *err)
{
	_cleanup_config_doc_ struct config_doc *doc = NULL;
	int rc = config_load_file(path, &doc, err);
	if (rc < 0)
		return rc;
	return gw_policy_from_doc(doc, NULL, generation, ret, err);
}

int gw_policy_add_spec(struct gw_policy *p, const char *spec, const char *id, struct al_error *err)
{
	if (p->n_rules >= GW_POLICY_MAX_RULES)
		return al_error_set(err, -E2BIG, "at most %d rules", GW_POLICY_MAX_RULES);
	if (strlen(id) > GW_RULE_ID_MAX)
		return al_error_set(err, -EINVAL, "rule id too long");
	for (size_t i = 0; i < p->n_rules; i++)
		if (strcmp(p->rules[i].id, id) == 0)
			return al_error_set(err, -EEXIST, "rule id \"%s\" is used twice", id);
	struct gw_rule r = { 0 };
	snprintf(r.id, sizeof(r.id), "%s", id);
	/* HOST[:PORT][/PATH]; HOST may be "*.suffix" or "[v6]". */
	const char *s = spec, *end;
	/* "https://host": a scheme is letters, digits, '+', '-', '.' after a
	 * letter, at the start (later on, "://" is part of a path). */
	const char *scheme = NULL;
	if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')) {
		size_t k = strspn(
			s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");
		if (strncmp(s + k, "://", 3) == 0)
			scheme = s + k;
	}
	if (scheme)
		return al_error_set(err, -EINVAL,
				    "--allow %s: a rule takes no URL scheme (HOST[:PORT][/PATH], "
				    "e.g. --allow %s)",
				    spec, scheme + 3);
	if (*s == '[') {
		end = strchr(s, ']');
		if (!end)
			return al_error_set(err, -EINVAL, "--allow %s: unterminated IPv6 literal",
					    spec);
		end++;
	} else {
		end = s + strcspn(s, ":/");
	}
	size_t hlen = (size_t)(end - s);
	if (hlen > 2 && s[0] == '*' && s[1] == '.') {
		bool ip;
		if (gw_host_normalize(s + 2, hlen - 2, r.host, sizeof(r.host), &ip) < 0 || ip)
			return al_error_set(
				err, -EINVAL,
				"--allow %s: expected *.domain with a valid domain name", spec);
		r.wildcard = true;
	} else if (memchr(s, '*', hlen) ||
		   gw_host_normalize(s, hlen, r.host, sizeof(r.host), &r.ip_literal) < 0) {
		return al_error_set(err, -EINVAL,
				    "--allow %s: expected HOST[:PORT][/PATH] with a host name "
				    "(ASCII; IDNs as punycode), *.domain or an IP literal",
				    spec);
	}
	s = end;
	if (*s == ':') {
		s++;
		uint64_t port = 0;
		size_t n = 0;
		while (s[n] >= '0' && s[n] <= '9' && n < 6)
			port = port * 10 + (uint64_t)(s[n++] - '0');
		if (n == 0 || s[0] == '0' || port > 65535 || (s[n] && s[n] != '/'))
			return al_error_set(err, -EINVAL,
					    "--allow %s: expected a port from 1 to 65535", spec);
		r.port = (uint16_t)port;
		s += n;
	}
	if (*s == '/') {
		char canon[GW_PATH_MAX + 1];
		size_t q, len = strlen(s);
		if (gw_path_canonical(s, len, canon, sizeof(canon), &q) < 0 || q != len ||
		    strcmp(canon, s) != 0)
			return al_error_set(
				err, -EINVAL,
				"--allow %s: expected a canonical path prefix (no query, "
				"no '.' or '..' segments, no %%2F)",
				spec);
		r.paths[0] = strdup(s);
		if (!r.paths[0])
			return al_error_set(err, -ENOMEM, "out of memory");
		r.n_paths = 1;
	} else if (*s) {
		return al_error_set(err, -EINVAL, "--allow %s: expected HOST[:PORT][/PATH]", spec);
	}
	struct gw_rule *rules = realloc(p->rules, (p->n_rules + 1) * sizeof(*rules));
	if (!rules) {
		free(r.paths[0]);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	p->rules = rules;
	p->rules[p->n_rules++] = r;
	return 0;
}

/* "*.example.com": a.example.com, a.b.example.com; never example.com,
 * never a.example.com.evil.net, never an IP literal. */
static bool host_matches(const struct gw_rule *r, const char *host)
{
	return gw_host_pattern_matches(r->host, r->wildcard, host);
}

static bool rule_matches(const struct gw_rule *r, const char *method, const char *host,
			 uint16_t port, const char *path)
{
	if (!host_matches(r, host))
		return false;
	if (r->port && r->port != port)
		return false;
	if (r->n_methods) {
		bool found = false;
		for (size_t i = 0; i < r->n_methods && !found; i++)
			found = strcmp(r->methods[i], method) == 0;
		if (!found)
			return false;
	}
	if (r->n_paths) {
		bool found = false;
		/* Fail closed both ways: an allow matches the exact case, a deny
		 * any case (an upstream may not tell /ADMIN from /admin). */
		for (size_t i = 0; i < r->n_paths && !found; i++)
			found = r->deny ? gw_path_has_prefix_nocase(path, r->paths[i]) :
					  gw_path_has_prefix(path, r->paths[i]);
		if (!found)
			return false;
	}
	return true;
}

void gw_policy_decide(const struct gw_policy *p, const char *method, const char *host,
		      uint16_t port, const char *path, struct gw_decision *ret)
{
	*ret = (struct gw_decision){ .allow = false,
				     .generation = p ? p->generation : 0,
				     .reason = "no rule allows this request" };
	if (!p)
		return;
	/* Deny rules win, wherever they stand. */
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct gw_rule *r = &p->rules[i];
		if (r->deny && rule_matches(r, method, host, port, path)) {
			ret->rule = r->id;
			ret->reason = "denied by rule";
			return;
		}
	}
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct gw_rule *r = &p->rules[i];
		if (!r->deny && rule_matches(r, method, host, port, path)) {
			ret->allow = true;
			ret->rule = r->id;
			ret->reason = "allowed by rule";
			return;
		}
	}
}

bool gw_policy_paths_matter(const struct gw_policy *p, const char *host, uint16_t port)
{
	for (size_t i = 0; p && i < p->n_rules; i++) {
		const struct gw_rule *r = &p->rules[i];
		if (r->n_paths && host_matches(r, host) && (!r->port || r->port == port))
			return true;
	}
	return false;
}

const char *gw_policy_host_denied(const struct gw_policy *p, const char *host)
{
	for (size_t i = 0; p && i < p->n_rules; i++) {
		const struct gw_rule *r = &p->rules[i];
		if (r->deny && !r->port && !r->n_methods && !r->n_paths && host_matches(r, host))
			return r->id;
	}
	return NULL;
}

bool gw_policy_host_may_allow(const struct gw_policy *p, const char *host, uint16_t port)
{
	if (!p)
		return false;
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct gw_rule *r = &p->rules[i];
		/* A deny of the whole host (any port, method and path). */
		if (r->deny && !r->port && !r->n_methods && !r->n_paths && host_matches(r, host))
			return false;
	}
	for (size_t i = 0; i < p->n_rules; i++) {
		const struct gw_rule *r = &p->rules[i];
		if (!r->deny && host_matches(r, host) && (!port || !r->port || r->port == port))
			return true;
	}
	return false;
}

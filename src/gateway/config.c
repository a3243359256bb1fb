/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's configuration: the policy file (rules, credentials,
 * upstream overrides, static hosts, CIDR exceptions) plus the command
 * line's --allow, --grant, --upstream and --upstream-ca. Everything is
 * checked here, before any process starts; no secret is kept.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/config.h"
#include "common/encode.h"
#include "gateway/internal.h"
#include "gateway/path.h"

bool gw_host_pattern_matches(const char *pattern, bool wildcard, const char *host)
{
	if (!wildcard)
		return strcmp(pattern, host) == 0;
	if (host[0] == '[')
		return false;
	size_t hl = strlen(host), sl = strlen(pattern);
	return hl > sl + 1 && host[hl - sl - 1] == '.' && strcmp(host + hl - sl, pattern) == 0;
}

/* HOST[:PORT] with HOST a name or IP literal ("[v6]" for IPv6); normalized. */
int gw_parse_hostport(const char *s, size_t len, char *host, size_t host_size, uint16_t *port,
		      bool need_port)
{
	const char *end = s + len, *colon = NULL;
	if (len > 0 && s[0] == '[') {
		const char *rb = memchr(s, ']', len);
		if (!rb)
			return -EINVAL;
		if (rb + 1 < end) {
			if (rb[1] != ':')
				return -EINVAL;
			colon = rb + 1;
		}
	} else {
		colon = memchr(s, ':', len);
	}
	size_t hlen = colon ? (size_t)(colon - s) : len;
	bool ip;
	if (hlen == 0 || gw_host_normalize(s, hlen, host, host_size, &ip) < 0)
		return -EINVAL;
	if (!colon) {
		if (need_port)
			return -EINVAL;
		*port = 0;
		return 0;
	}
	const char *p = colon + 1;
	size_t n = (size_t)(end - p);
	uint32_t v = 0;
	if (n == 0 || n > 5 || p[0] == '0')
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint32_t)(p[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -EINVAL;
	*port = (uint16_t)v;
	return 0;
}

/* ADDR:PORT, IPv6 as [addr]:port. */
int gw_parse_sockaddr(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[64];
	const char *colon;
	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');
		if (!rb || rb[1] != ':' || (size_t)(rb - s - 1) >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, (size_t)(rb - s - 1));
		host[rb - s - 1] = '\0';
		colon = rb + 1;
	} else {
		/* IPv6 only in brackets: "::1:443" reads two ways. */
		colon = strchr(s, ':');
		if (!colon || strchr(colon + 1, ':') || (size_t)(colon - s) >= sizeof(host))
			return -EINVAL;
		memcpy(host, s, (size_t)(colon - s));
		host[colon - s] = '\0';
	}
	const char *p = colon + 1;
	uint32_t port = 0;
	size_t n = strlen(p);
	if (n == 0 || n > 5)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		port = port * 10 + (uint32_t)(p[i] - '0');
	}
	if (port == 0 || port > 65535)
		return -EINVAL;
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (s[0] != '[' && inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		*len = sizeof(*in4);
		return 0;
	}
	if (s[0] == '[' && inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*in6);
		return 0;
	}
	return -EINVAL;
}

const struct gw_upstream *gw_config_upstream(const struct gw_config *cfg, const char *host,
					     uint16_t port)
{
	for (size_t i = 0; i < cfg->n_upstreams; i++)
		if (cfg->upstreams[i].port == port && strcmp(cfg->upstreams[i].host, host) == 0)
			return &cfg->upstreams[i];
	return NULL;
}

const struct gw_static_host *gw_config_static_host(const struct gw_config *cfg, const char *host)
{
	for (size_t i = 0; i < cfg->n_hosts; i++)
		if (strcmp(cfg->hosts[i].host, host) == 0)
			return &cfg->hosts[i];
	return NULL;
}

void gw_config_free(struct gw_config *cfg)
{
	if (!cfg)
		return;
	gw_policy_free(cfg->policy);
	for (size_t i = 0; i < cfg->n_creds; i++)
		for (size_t j = 0; j < cfg->creds[i].n_paths; j++)
			free(cfg->creds[i].paths[j]);
	free(cfg->creds);
	free(cfg->upstreams);
	free(cfg->hosts);
	free(cfg->cidrs);
	free(cfg->grants);
	for (size_t i = 0; i < cfg->n_ca_files; i++)
		free(cfg->ca_files[i]);
	free(cfg->ca_files);
	free(cfg->vault_file);
	free(cfg);
}

static void gw_config_freep(struct gw_config **c)
{
	gw_config_free(*c);
}

static int add_upstream(struct gw_config *cfg, const char *host, size_t hlen, uint16_t port,
			const char *to, struct al_error *err, const char *what)
{
	struct gw_upstream u = { .port = port };
	uint16_t p;
	if (gw_parse_hostport(host, hlen, u.host, sizeof(u.host), &p, false) < 0 || p)
		return al_error_set(err, -EINVAL, "%s: expected a host name or IP literal", what);
	if (gw_parse_sockaddr(to, &u.addr, &u.addr_len) < 0)
		return al_error_set(err, -EINVAL, "%s: expected ADDR:PORT after '=', not '%s'",
				    what, to);
	if (gw_config_upstream(cfg, u.host, u.port))
		return al_error_set(err, -EEXIST, "%s: %s:%u has an override already", what, u.host,
				    (unsigned)u.port);
	struct gw_upstream *n = realloc(cfg->upstreams, (cfg->n_upstreams + 1) * sizeof(*n));
	if (!n)
		return al_error_set(err, -ENOMEM, "out of memory");
	cfg->upstreams = n;
	cfg->upstreams[cfg->n_upstreams++] = u;
	return 0;
}

static int copy_name(const struct config_node *v, char *out, size_t size, bool header,
		     struct al_error *err)
{
	const char *s;
	int rc = config_get_str(v, NULL, &s, err);
	if (rc < 0)
		return rc;
	size_t len = strlen(s);
	bool ok = len > 0 && len < size;
	for (size_t i = 0; ok && i < len; i++) {
		char c = s[i];
		ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		     c == '-' || c == '_' || (!header && c == '.');
	}
	if (!ok)
		return config_error(v, NULL, err, "expected 1 to %zu letters, digits, '-' or '_'",
				    size - 1);
	memcpy(out, s, len + 1);
	return 0;
}

static int parse_cred(const struct config_node *n, size_t index, struct gw_cred *c,
		      struct al_error *err)
{
	char path[64];
	snprintf(path, sizeof(path), "credentials[%zu]", index);
	int rc = config_expect_kind(n, path, CONFIG_MAP, err);
	if (rc < 0)
		return rc;
	static const char *const keys[] = { "secret", "host",	"port",	 "paths",
					    "header", "prefix", "query", "basic",
					    "github", "env",	"dummy", NULL };
	rc = config_map_check_keys(n, path, keys, err);
	if (rc < 0)
		return rc;
	const struct config_node *v;
	rc = config_map_require(n, path, "secret", &v, err);
	if (rc < 0)
		return rc;
	rc = copy_name(v, c->secret, sizeof(c->secret), false, err);
	if (rc < 0)
		return rc;
	rc = config_map_require(n, path, "host", &v, err);
	if (rc < 0)
		return rc;
	const char *host;
	rc = config_get_str(v, NULL, &host, err);
	if (rc < 0)
		return rc;
	bool ip;
	size_t hl = strlen(host);
	if (hl > 2 && host[0] == '*' && host[1] == '.') {
		c->wildcard = true;
		if (gw_host_normalize(host + 2, hl - 2, c->host, sizeof(c->host), &ip) < 0 || ip)
			return config_error(v, NULL, err, "expected *.domain with a valid domain");
	} else if (gw_host_normalize(host, hl, c->host, sizeof(c->host), &ip) < 0) {
		return config_error(v, NULL, err, "expected a host name or IP literal");
	}
	if ((v = config_map_get(n, "port"))) {
		uint64_t port;
		rc = config_get_u64(v, NULL, &port, err);
		if (rc < 0)
			return rc;
		if (port == 0 || port > 65535)
			return config_error(v, NULL, err, "expected a port from 1 to 65535");
		c->port = (uint16_t)port;
	}
	if ((v = config_map_get(n, "paths"))) {
		rc = gw_parse_path_prefixes(v, NULL, c->paths, &c->n_paths, err);
		if (rc < 0)
			return rc;
	}
	int kinds = 0;
	if ((v = config_map_get(n, "header"))) {
		kinds++;
		c->kind = GW_CRED_HEADER;
		rc = copy_name(v, c->name, sizeof(c->name), true, err);
		if (rc < 0)
			return rc;
		static const char *const forbidden[] = {
			"host", "content-length", "transfer-encoding",	 "connection", "upgrade",
			"te",	"trailer",	  "proxy-authorization", "keep-alive", NULL
		};
		for (size_t i = 0; forbidden[i]; i++)
			if (strcasecmp(c->name, forbidden[i]) == 0)
				return config_error(v, NULL, err,
						    "header %s cannot carry a credential", c->name);
	}
	if ((v = config_map_get(n, "query"))) {
		kinds++;
		c->kind = GW_CRED_QUERY;
		rc = copy_name(v, c->name, sizeof(c->name), false, err);
		if (rc < 0)
			return rc;
	}
	if ((v = config_map_get(n, "basic"))) {
		kinds++;
		c->kind = GW_CRED_BASIC;
		rc = copy_name(v, c->name, sizeof(c->name), false, err);
		if (rc < 0)
			return rc;
	}
	if (kinds != 1)
		return config_error(n, path, err, "expected exactly one of header, query or basic");
	if ((v = config_map_get(n, "prefix"))) {
		if (c->kind != GW_CRED_HEADER)
			return config_error(v, NULL, err, "prefix goes with header only");
		const char *s;
		rc = config_get_str(v, NULL, &s, err);
		if (rc < 0)
			return rc;
		size_t len = strlen(s);
		bool ok = len < sizeof(c->prefix);
		for (size_t i = 0; ok && i < len; i++)
			ok = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f;
		if (!ok)
			return config_error(v, NULL, err,
					    "expected up to %zu printable ASCII characters",
					    sizeof(c->prefix) - 1);
		memcpy(c->prefix, s, len + 1);
	}
	if ((v = config_map_get(n, "github"))) {
		rc = config_get_bool(v, NULL, &c->github, err);
		if (rc < 0)
			return rc;
	}
	if ((v = config_map_get(n, "env"))) {
		rc = copy_name(v, c->env, sizeof(c->env), false, err);
		if (rc < 0)
			return rc;
		if (strchr(c->env, '-') || strchr(c->env, '.') ||
		    (c->env[0] >= '0' && c->env[0] <= '9'))
			return config_error(v, NULL, err, "expected an environment variable name");
	}
	snprintf(c->dummy, sizeof(c->dummy), "airlock-dummy-%s", c->secret);
	if ((v = config_map_get(n, "dummy"))) {
		const char *s;
		rc = config_get_str(v, NULL, &s, err);
		if (rc < 0)
			return rc;
		size_t len = strlen(s);
		bool ok = len > 0 && len < sizeof(c->dummy);
		for (size_t i = 0; ok && i < len; i++)
			ok = (unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f;
		if (!ok)
			return config_error(v, NULL, err,
					    "expected up to %zu printable ASCII characters",
					    sizeof(c->dummy) - 1);
		memcpy(c->dummy, s, len + 1);
	}
	return 0;
}

/* A policy file's keys besides rules (gw_policy_from_doc's). */
static const char *const policy_extra_keys[] = { "credentials", "upstreams", "hosts",
						 "allow_cidrs", "limits",    NULL };

static int parse_extras(const struct config_doc *doc, struct gw_config *cfg, struct al_error *err)
{
	const struct config_node *root = config_root(doc);
	if (config_node_is_null(root))
		return 0;
	const struct config_node *n = config_map_get(root, "credentials");
	int rc;
	if (n) {
		rc = config_expect_kind(n, "credentials", CONFIG_SEQ, err);
		if (rc < 0)
			return rc;
		size_t count = config_node_count(n);
		if (count > GW_CRED_MAX)
			return config_error(n, "credentials", err, "at most %d credentials",
					    GW_CRED_MAX);
		cfg->creds = calloc(count ? count : 1, sizeof(*cfg->creds));
		if (!cfg->creds)
			return al_error_set(err, -ENOMEM, "out of memory");
		for (size_t i = 0; i < count; i++) {
			cfg->n_creds = i + 1;
			rc = parse_cred(config_seq_item(n, i), i, &cfg->creds[i], err);
			if (rc < 0)
				return rc;
		}
	}
	if ((n = config_map_get(root, "upstreams"))) {
		rc = config_expect_kind(n, "upstreams", CONFIG_SEQ, err);
		if (rc < 0)
			return rc;
		for (size_t i = 0; i < config_node_count(n); i++) {
			const struct config_node *u = config_seq_item(n, i);
			char path[64];
			snprintf(path, sizeof(path), "upstreams[%zu]", i);
			rc = config_expect_kind(u, path, CONFIG_MAP, err);
			if (rc < 0)
				return rc;
			static const char *const keys[] = { "host", "port", "to", NULL };
			rc = config_map_check_keys(u, path, keys, err);
			if (rc < 0)
				return rc;
			const struct config_node *hv, *pv, *tv;
			const char *host, *to;
			uint64_t port;
			if ((rc = config_map_require(u, path, "host", &hv, err)) < 0 ||
			    (rc = config_map_require(u, path, "port", &pv, err)) < 0 ||
			    (rc = config_map_require(u, path, "to", &tv, err)) < 0 ||
			    (rc = config_get_str(hv, NULL, &host, err)) < 0 ||
			    (rc = config_get_u64(pv, NULL, &port, err)) < 0 ||
			    (rc = config_get_str(tv, NULL, &to, err)) < 0)
				return rc;
			if (port == 0 || port > 65535)
				return config_error(pv, NULL, err,
						    "expected a port from 1 to 65535");
			char what[128];
			snprintf(what, sizeof(what), "%s:%u: %s", config_doc_name(doc),
				 config_node_line(u), path);
			rc = add_upstream(cfg, host, strlen(host), (uint16_t)port, to, err, what);
			if (rc < 0)
				return rc;
		}
	}
	if ((n = config_map_get(root, "hosts"))) {
		rc = config_expect_kind(n, "hosts", CONFIG_MAP, err);
		if (rc < 0)
			return rc;
		size_t count = config_node_count(n);
		cfg->hosts = calloc(count ? count : 1, sizeof(*cfg->hosts));
		if (!cfg->hosts)
			return al_error_set(err, -ENOMEM, "out of memory");
		for (size_t i = 0; i < count; i++) {
			const char *name = config_map_key(n, i);
			const struct config_node *v = config_map_value(n, i);
			struct gw_static_host *h = &cfg->hosts[i];
			bool ip;
			if (gw_host_normalize(name, strlen(name), h->host, sizeof(h->host), &ip) <
				    0 ||
			    ip)
				return config_error(config_map_key_node(n, i), NULL, err,
						    "expected a host name");
			const char *addr;
			rc = config_get_str(v, NULL, &addr, err);
			if (rc < 0)
				return rc;
			char buf[80];
			snprintf(buf, sizeof(buf), strchr(addr, ':') ? "[%s]:1" : "%s:1", addr);
			if (gw_parse_sockaddr(buf, &h->addr, &h->addr_len) < 0)
				return config_error(v, NULL, err,
						    "expected an IPv4 or IPv6 address");
			cfg->n_hosts = i + 1;
		}
	}
	if ((n = config_map_get(root, "limits"))) {
		rc = config_expect_kind(n, "limits", CONFIG_MAP, err);
		if (rc < 0)
			return rc;
		static const char *const all[] = {
			"head_timeout",	    "idle_timeout",  "connect_timeout",
			"upstream_timeout", "write_timeout", "audit_max",
			"connections",	    "buffers",	     NULL
		};
		rc = config_map_check_keys(n, "limits", all, err);
		if (rc < 0)
			return rc;
		static const char *const keys[] = { "head_timeout",    "idle_timeout",
						    "connect_timeout", "upstream_timeout",
						    "write_timeout",   NULL };
		uint64_t *dst[] = { &cfg->head_ms, &cfg->idle_ms, &cfg->connect_ms,
				    &cfg->upstream_ms, &cfg->write_ms };
		for (size_t i = 0; keys[i]; i++) {
			const struct config_node *v = config_map_get(n, keys[i]);
			if (!v)
				continue;
			uint64_t ms;
			rc = config_get_duration(v, NULL, &ms, err);
			if (rc < 0)
				return rc;
			if (ms < 100 || ms > 24ull * 3600 * 1000)
				return config_error(v, NULL, err, "expected 100ms to 24h");
			*dst[i] = ms;
		}
		/* Sizes and counts, each with its range. */
		static const struct {
			const char *key;
			bool size;
			uint64_t min, max;
		} lim[] = {
			{ "audit_max", true, 64 * 1024, 1ull << 40 },
			{ "connections", false, 1, GW_MAX_CONNECTIONS },
			{ "buffers", true, 1u << 20, 1ull << 32 },
		};
		uint64_t *ldst[] = { &cfg->audit_max, &cfg->max_conns, &cfg->buffer_max };
		for (size_t i = 0; i < ARRAY_SIZE(lim); i++) {
			const struct config_node *v = config_map_get(n, lim[i].key);
			if (!v)
				continue;
			uint64_t x;
			rc = lim[i].size ? config_get_size(v, NULL, &x, err) :
					   config_get_u64(v, NULL, &x, err);
			if (rc < 0)
				return rc;
			if (x < lim[i].min || x > lim[i].max)
				return config_error(v, NULL, err,
						    "expected %s%" PRIu64 " to %" PRIu64,
						    lim[i].size ? "a size of " : "", lim[i].min,
						    lim[i].max);
			*ldst[i] = x;
		}
	}
	if ((n = config_map_get(root, "allow_cidrs"))) {
		rc = config_expect_kind(n, "allow_cidrs", CONFIG_SEQ, err);
		if (rc < 0)
			return rc;
		size_t count = config_node_count(n);
		cfg->cidrs = calloc(count ? count : 1, sizeof(*cfg->cidrs));
		if (!cfg->cidrs)
			return al_error_set(err, -ENOMEM, "out of memory");
		for (size_t i = 0; i < count; i++) {
			const char *s;
			rc = config_get_str(config_seq_item(n, i), NULL, &s, err);
			if (rc < 0)
				return rc;
			if (gw_cidr_parse(s, &cfg->cidrs[i]) < 0)
				return config_error(config_seq_item(n, i), NULL, err,
						    "expected an address or ADDR/PREFIX");
			const char *never = gw_cidr_unopenable(&cfg->cidrs[i]);
			if (never)
				return config_error(config_seq_item(n, i), NULL, err,
						    "%s overlaps %s, a range that is never opened",
						    s, never);
			cfg->n_cidrs = i + 1;
		}
	}
	return 0;
}

/* --allow-cidr: each one as an allow_cidrs entry of the policy file. */
static int add_allow_cidrs(struct gw_config *cfg, char *const *v, size_t n, struct al_error *err)
{
	if (n == 0)
		return 0;
	struct gw_cidr *c = realloc(cfg->cidrs, (cfg->n_cidrs + n) * sizeof(*c));
	if (!c)
		return al_error_set(err, -ENOMEM, "out of memory");
	cfg->cidrs = c;
	for (size_t i = 0; i < n; i++) {
		struct gw_cidr *e = &cfg->cidrs[cfg->n_cidrs];
		if (gw_cidr_parse(v[i], e) < 0)
			return al_error_set(err, -EINVAL,
					    "--allow-cidr %s: expected an address or ADDR/PREFIX",
					    v[i]);
		const char *never = gw_cidr_unopenable(e);
		if (never)
			return al_error_set(err, -EINVAL,
					    "--allow-cidr %s: overlaps %s, a range that is never "
					    "opened",
					    v[i], never);
		cfg->n_cidrs++;
	}
	return 0;
}

static bool cred_equal(const struct gw_cred *a, const struct gw_cred *b)
{
	if (strcmp(a->secret, b->secret) != 0 || strcmp(a->host, b->host) != 0 ||
	    a->wildcard != b->wildcard || a->port != b->port || a->n_paths != b->n_paths ||
	    a->kind != b->kind || strcmp(a->name, b->name) != 0 ||
	    strcmp(a->prefix, b->prefix) != 0 || a->github != b->github ||
	    strcmp(a->env, b->env) != 0 || strcmp(a->dummy, b->dummy) != 0)
		return false;
	for (size_t i = 0; i < a->n_paths; i++)
		if (strcmp(a->paths[i], b->paths[i]) != 0)
			return false;
	return true;
}

static bool upstream_equal(const struct gw_upstream *a, const struct gw_upstream *b)
{
	return strcmp(a->host, b->host) == 0 && a->port == b->port && a->addr_len == b->addr_len &&
	       memcmp(&a->addr, &b->addr, a->addr_len) == 0;
}

/* What a running gateway cannot take: the next generation's file names
 * credentials, upstreams or limits otherwise than cur has them. */
static int check_fixed(const struct gw_config *cur, const struct gw_config *next,
		       const struct config_doc *doc, struct al_error *err)
{
	const struct config_node *root = config_root(doc);
	if (config_node_is_null(root))
		return 0;
	const struct config_node *n = config_map_get(root, "credentials");
	bool same = n && next->n_creds == cur->n_creds;
	for (size_t i = 0; same && i < cur->n_creds; i++)
		same = cred_equal(&next->creds[i], &cur->creds[i]);
	if (n && !same)
		return config_error(n, "credentials", err,
				    "differ from the running sandbox's, and cannot change: its "
				    "gateway read the vault once, before it dropped root, and the "
				    "sandbox's environment holds their dummy values (leave them "
				    "out, or as they were; a new sandbox takes new ones)");
	n = config_map_get(root, "upstreams");
	same = n && next->n_upstreams == cur->n_file_upstreams;
	for (size_t i = 0; same && i < next->n_upstreams; i++) {
		bool found = false;
		for (size_t j = 0; !found && j < cur->n_file_upstreams; j++)
			found = upstream_equal(&next->upstreams[i], &cur->upstreams[j]);
		same = found;
	}
	if (n && !same)
		return config_error(n, "upstreams", err,
				    "differ from the running sandbox's, and cannot change: "
				    "operator overrides are fixed when its gateway starts (leave "
				    "them out, or as they were)");
	n = config_map_get(root, "limits");
	static const char *const keys[] = { "head_timeout",	"idle_timeout",	 "connect_timeout",
					    "upstream_timeout", "write_timeout", "audit_max",
					    "connections",	"buffers" };
	const uint64_t was[] = { cur->head_ms,	cur->idle_ms,	cur->connect_ms, cur->upstream_ms,
				 cur->write_ms, cur->audit_max, cur->max_conns,	 cur->buffer_max };
	const uint64_t now[] = { next->head_ms,	    next->idle_ms,   next->connect_ms,
				 next->upstream_ms, next->write_ms,  next->audit_max,
				 next->max_conns,   next->buffer_max };
	for (size_t i = 0; n && i < ARRAY_SIZE(keys); i++) {
		const struct config_node *v = config_map_get(n, keys[i]);
		if (v && was[i] != now[i])
			return config_error(v, NULL, err,
					    "differs from the running sandbox's, and cannot "
					    "change: limits are fixed when its gateway starts "
					    "(leave them out, or as they were)");
	}
	return 0;
}

int gw_config_next(const struct gw_config *cur, const char *name, const char *text, size_t len,
		   uint64_t generation, struct gw_config **ret, struct al_error *err)
{
	_cleanup_(gw_config_freep) struct gw_config *cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return al_error_set(err, -ENOMEM, "out of memory");
	/* Limits the file leaves out are the running ones: compared below. */
	cfg->mode = cur->mode;
	cfg->head_ms = cur->head_ms;
	cfg->idle_ms = cur->idle_ms;
	cfg->connect_ms = cur->connect_ms;
	cfg->upstream_ms = cur->upstream_ms;
	cfg->write_ms = cur->write_ms;
	cfg->audit_max = cur->audit_max;
	cfg->max_conns = cur->max_conns;
	cfg->buffer_max = cur->buffer_max;
	_cleanup_config_doc_ struct config_doc *doc = NULL;
	int rc = config_load_string(name, text, len, &doc, err);
	if (rc < 0)
		return rc;
	rc = gw_policy_from_doc(doc, policy_extra_keys, generation, &cfg->policy, err);
	if (rc < 0)
		return rc;
	rc = parse_extras(doc, cfg, err);
	if (rc < 0)
		return rc;
	rc = check_fixed(cur, cfg, doc, err);
	if (rc < 0)
		return rc;
	*ret = TAKE_PTR(cfg);
	return 0;
}

int gw_config_build(const struct gw_options *o, struct gw_config **ret, struct al_error *err)
{
	_cleanup_(gw_config_freep) struct gw_config *cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return al_error_set(err, -ENOMEM, "out of memory");
	cfg->mode = o->mode;
	cfg->head_ms = 10 * 1000;
	cfg->idle_ms = 60 * 1000;
	cfg->connect_ms = 10 * 1000;
	cfg->upstream_ms = 300 * 1000;
	cfg->write_ms = 60 * 1000;
	/* A sandbox's log is bounded; `airlock gateway`'s is the operator's
	 * (rotated like any service's), unless the policy sets a limit. */
	cfg->audit_max = o->many_clients ? UINT64_MAX : GW_DEFAULT_AUDIT_MAX;
	cfg->max_conns = o->many_clients ? GW_MAX_CONNECTIONS : GW_DEFAULT_CONNECTIONS;
	cfg->buffer_max = GW_DEFAULT_BUFFERS;
	snprintf(cfg->label, sizeof(cfg->label), "%s", o->label ? o->label : "airlock");
	int rc;
	if (o->policy_file || o->policy_text) {
		_cleanup_config_doc_ struct config_doc *doc = NULL;
		rc = o->policy_file ? config_load_file(o->policy_file, &doc, err) :
				      config_load_string(o->policy_name ? o->policy_name : "policy",
							 o->policy_text, o->policy_len, &doc, err);
		if (rc < 0)
			return rc;
		rc = gw_policy_from_doc(doc, policy_extra_keys, 1, &cfg->policy, err);
		if (rc < 0)
			return rc;
		rc = parse_extras(doc, cfg, err);
		if (rc < 0)
			return rc;
		cfg->n_file_upstreams = cfg->n_upstreams;
	} else {
		cfg->policy = calloc(1, sizeof(*cfg->policy));
		if (!cfg->policy)
			return al_error_set(err, -ENOMEM, "out of memory");
		cfg->policy->generation = 1;
	}
	rc = add_allow_cidrs(cfg, o->allow_cidrs, o->n_allow_cidrs, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < o->n_allow; i++) {
		char id[32];
		snprintf(id, sizeof(id), "allow-%zu", i + 1);
		rc = gw_policy_add_spec(cfg->policy, o->allow[i], id, err);
		if (rc < 0)
			return rc;
	}
	if (o->n_grants) {
		cfg->grants = calloc(o->n_grants, sizeof(*cfg->grants));
		if (!cfg->grants)
			return al_error_set(err, -ENOMEM, "out of memory");
		for (size_t i = 0; i < o->n_grants; i++) {
			const char *g = o->grants[i];
			bool admin = strncmp(g, "github-admin:", 13) == 0;
			const char *name = admin			 ? g + 13 :
					   strncmp(g, "github:", 7) == 0 ? g + 7 :
									   NULL;
			if (!name || gw_github_grant_parse(name, &cfg->grants[i]) < 0)
				return al_error_set(err, -EINVAL,
						    "--grant %s: expected github:OWNER/REPO or "
						    "github-admin:OWNER/REPO",
						    o->grants[i]);
			cfg->grants[i].admin = admin;
			cfg->n_grants++;
		}
	}
	for (size_t i = 0; i < o->n_upstreams; i++) {
		const char *s = o->upstreams[i];
		const char *eq = strchr(s, '=');
		char what[300];
		snprintf(what, sizeof(what), "--upstream %.250s", s);
		char host[GW_HOST_MAX + 3];
		uint16_t port;
		if (!eq ||
		    gw_parse_hostport(s, (size_t)(eq - s), host, sizeof(host), &port, true) < 0)
			return al_error_set(err, -EINVAL, "%s: expected HOST:PORT=ADDR:PORT", what);
		const char *colon = s[0] == '[' ? strchr(s, ']') + 1 :
						  memchr(s, ':', (size_t)(eq - s));
		rc = add_upstream(cfg, s, (size_t)(colon - s), port, eq + 1, err, what);
		if (rc < 0)
			return rc;
	}
	if (o->n_upstream_cas) {
		cfg->ca_files = calloc(o->n_upstream_cas, sizeof(char *));
		if (!cfg->ca_files)
			return al_error_set(err, -ENOMEM, "out of memory");
		for (size_t i = 0; i < o->n_upstream_cas; i++) {
			FILE *f = fopen(o->upstream_cas[i], "re");
			if (!f)
				return al_error_set_errno(err, -errno, "--upstream-ca %s",
							  o->upstream_cas[i]);
			fclose(f);
			cfg->ca_files[i] = strdup(o->upstream_cas[i]);
			if (!cfg->ca_files[i])
				return al_error_set(err, -ENOMEM, "out of memory");
			cfg->n_ca_files++;
		}
	}
	if (o->vault_file) {
		/* Only the file's kind, owner and mode here: the values are read
		 * by the gateway process alone (its start fails when one is missing). */
		rc = gw_vault_check_file(o->vault_file, err);
		if (rc < 0)
			return rc;
		cfg->vault_file = strdup(o->vault_file);
		if (!cfg->vault_file)
			return al_error_set(err, -ENOMEM, "out of memory");
	} else if (cfg->n_creds && !o->policy_only) {
		return al_error_set(err, -EINVAL,
				    "the policy names credentials but no --vault was given");
	}
	*ret = TAKE_PTR(cfg);
	return 0;
}

void gw_env_free(char **env, size_t n)
{
	if (!env)
		return;
	for (size_t i = 0; i < n; i++)
		free(env[i]);
	free(env);
}

int gw_sandbox_env(const struct gw_config *cfg, const char *bundle_path, const char *ca_path,
		   char ***ret, size_t *ret_n)
{
	static const char *const fixed[] = {
		"HTTP_PROXY=http://" GW_PROXY_ADDR ":3128",
		"HTTPS_PROXY=http://" GW_PROXY_ADDR ":3128",
		"ALL_PROXY=http://" GW_PROXY_ADDR ":3128",
		"http_proxy=http://" GW_PROXY_ADDR ":3128",
		"https_proxy=http://" GW_PROXY_ADDR ":3128",
		"all_proxy=http://" GW_PROXY_ADDR ":3128",
		"NO_PROXY=localhost,127.0.0.1,::1",
		"no_proxy=localhost,127.0.0.1,::1",
	};
	static const char *const bundle_vars[] = { "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
						   "CURL_CA_BUNDLE", "GIT_SSL_CAINFO" };
	size_t cap = ARRAY_SIZE(fixed) + ARRAY_SIZE(bundle_vars) + 1 + cfg->n_creds + 1;
	char **env = calloc(cap, sizeof(char *));
	if (!env)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
		if (!(env[n++] = strdup(fixed[i])))
			goto nomem;
	for (size_t i = 0; i < ARRAY_SIZE(bundle_vars); i++)
		if (asprintf(&env[n++], "%s=%s", bundle_vars[i], bundle_path) < 0)
			goto nomem;
	if (asprintf(&env[n++], "NODE_EXTRA_CA_CERTS=%s", ca_path) < 0)
		goto nomem;
	for (size_t i = 0; i < cfg->n_creds; i++) {
		const struct gw_cred *c = &cfg->creds[i];
		if (!c->env[0])
			continue;
		bool seen = false;
		size_t el = strlen(c->env);
		for (size_t j = 0; j < n && !seen; j++)
			seen = strncmp(env[j], c->env, el) == 0 && env[j][el] == '=';
		if (seen)
			continue;
		if (asprintf(&env[n++], "%s=%s", c->env, c->dummy) < 0)
			goto nomem;
	}
	env[n] = NULL;
	*ret = env;
	*ret_n = n;
	return 0;
nomem:
	/* asprintf leaves its pointer undefined on failure. */
	env[n - 1] = NULL;
	gw_env_free(env, n - 1);
	return -ENOMEM;
}

int gw_config_check_vault(const struct gw_config *cfg, const struct gw_vault *v,
			  struct al_error *err)
{
	for (size_t i = 0; i < cfg->n_creds; i++) {
		size_t len;
		if (!gw_vault_get(v, cfg->creds[i].secret, &len))
			return al_error_set(err, -ENOENT,
					    "credentials[%zu]: the vault %s has no secret \"%s\"",
					    i, cfg->vault_file ? cfg->vault_file : "",
					    cfg->creds[i].secret);
	}
	return 0;
}

/* Each credential's secret in the form the gateway writes it, so that an
 * upstream echoing that form is redacted too. */
int gw_config_add_secret_forms(const struct gw_config *cfg, struct gw_vault *v,
			       struct al_error *err)
{
	for (size_t i = 0; i < cfg->n_creds; i++) {
		const struct gw_cred *cr = &cfg->creds[i];
		size_t len;
		const char *secret = gw_vault_get(v, cr->secret, &len);
		if (!secret)
			continue; /* gw_config_check_vault says so */
		int r = 0;
		if (cr->kind == GW_CRED_BASIC) {
			size_t ul = strlen(cr->name), pl = ul + 1 + len;
			_cleanup_free_ char *pair = malloc(pl);
			_cleanup_free_ char *b64 = malloc(enc_base64_len(pl) + 1);
			if (!pair || !b64)
				return al_error_set(err, -ENOMEM, "out of memory");
			memcpy(pair, cr->name, ul);
			pair[ul] = ':';
			memcpy(pair + ul + 1, secret, len);
			enc_base64(pair, pl, b64);
			r = gw_vault_add_form(v, b64, strlen(b64));
			explicit_bzero(pair, pl);
			explicit_bzero(b64, strlen(b64));
		} else if (cr->kind == GW_CRED_QUERY) {
			_cleanup_free_ char *pct = malloc(3 * len + 1);
			if (!pct)
				return al_error_set(err, -ENOMEM, "out of memory");
			for (int lower = 0; lower < 2 && r == 0; lower++) {
				enc_percent(secret, len, lower, pct);
				r = gw_vault_add_form(v, pct, strlen(pct));
				/* And as a form would echo it: a space as '+'. */
				if (r == 0 && memchr(secret, ' ', len)) {
					size_t o = 0;
					for (size_t k = 0; pct[k]; k++) {
						if (memcmp(pct + k, "%20", 3) == 0) {
							pct[o++] = '+';
							k += 2;
						} else {
							pct[o++] = pct[k];
						}
					}
					pct[o] = '\0';
					r = gw_vault_add_form(v, pct, o);
				}
			}
			explicit_bzero(pct, 3 * len + 1);
		}
		if (r < 0)
			return al_error_set(
				err, r,
				"credentials[%zu]: the encoded form of secret \"%s\" cannot be "
				"redacted safely",
				i, cr->secret);
	}
	return 0;
}

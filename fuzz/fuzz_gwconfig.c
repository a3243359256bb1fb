/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's configuration on arbitrary input: a policy file's text
 * (rules, credentials, upstreams, hosts, allow_cidrs, limits) through
 * gw_config_build, and the same bytes as the host:port, address and CIDR
 * syntaxes of the command line. What builds must hold together (every
 * credential named and placed, no byte that could split a header, limits in
 * range); what is refused must say why; what parses must parse again the
 * same way.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "gateway/internal.h"

static bool clean(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

static void config_text(const uint8_t *data, size_t size)
{
	struct gw_options o = { .mode = size && (data[0] & 1) ? GW_MODE_OPEN : GW_MODE_RESTRICTED,
				.label = "fuzz",
				.policy_text = (const char *)data,
				.policy_len = size };
	struct gw_config *cfg = NULL;
	struct al_error err = { 0 };
	if (gw_config_build(&o, &cfg, &err) < 0) {
		check(err.msg[0]);
		check(!cfg);
		return;
	}
	check(cfg && cfg->policy);
	for (size_t i = 0; i < cfg->n_creds; i++) {
		const struct gw_cred *c = &cfg->creds[i];
		check(c->secret[0] && c->host[0]);
		check(c->kind == GW_CRED_HEADER || c->kind == GW_CRED_QUERY ||
		      c->kind == GW_CRED_BASIC);
		check(c->name[0] && clean(c->name) && clean(c->prefix) && clean(c->dummy));
		check(!strchr(c->name, ':') || c->kind == GW_CRED_QUERY);
		for (size_t j = 0; j < c->n_paths; j++)
			check(c->paths[j] && c->paths[j][0] == '/');
	}
	for (size_t i = 0; i < cfg->n_upstreams; i++) {
		const struct gw_upstream *u = &cfg->upstreams[i];
		check(u->port > 0 && u->host[0]);
		check(u->addr.ss_family == AF_INET || u->addr.ss_family == AF_INET6);
		check(gw_config_upstream(cfg, u->host, u->port) != NULL);
	}
	for (size_t i = 0; i < cfg->n_hosts; i++)
		check(cfg->hosts[i].addr.ss_family == AF_INET ||
		      cfg->hosts[i].addr.ss_family == AF_INET6);
	for (size_t i = 0; i < cfg->n_cidrs; i++)
		check((cfg->cidrs[i].family == AF_INET && cfg->cidrs[i].prefix <= 32) ||
		      (cfg->cidrs[i].family == AF_INET6 && cfg->cidrs[i].prefix <= 128));
	check(cfg->head_ms >= 100 && cfg->write_ms >= 100 && cfg->max_conns >= 1 &&
	      cfg->max_conns <= GW_MAX_CONNECTIONS && cfg->audit_max >= 64 * 1024);
	gw_config_free(cfg);
}

static void syntaxes(const uint8_t *data, size_t size)
{
	char s[512];
	if (size >= sizeof(s))
		return;
	memcpy(s, data, size);
	s[size] = '\0';

	char host[GW_HOST_MAX + 3], again[GW_HOST_MAX + 3];
	uint16_t port = 0, port2 = 0;
	if (gw_parse_hostport(s, size, host, sizeof(host), &port, false) == 0) {
		/* Normalized: parsing the result gives it back. */
		char back[GW_HOST_MAX + 16];
		int n = port ? snprintf(back, sizeof(back), "%s:%u", host, port) :
			       snprintf(back, sizeof(back), "%s", host);
		check(n > 0 && (size_t)n < sizeof(back));
		check(gw_parse_hostport(back, (size_t)n, again, sizeof(again), &port2, false) == 0);
		check(strcmp(host, again) == 0 && port == port2);
	}
	struct gw_cidr c;
	if (gw_cidr_parse(s, &c) == 0) {
		check((c.family == AF_INET && c.prefix <= 32) ||
		      (c.family == AF_INET6 && c.prefix <= 128));
		/* The network address itself is inside. */
		struct sockaddr_storage ss = { 0 };
		if (c.family == AF_INET) {
			struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
			v4->sin_family = AF_INET;
			memcpy(&v4->sin_addr, c.addr, 4);
		} else {
			struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
			v6->sin6_family = AF_INET6;
			memcpy(&v6->sin6_addr, c.addr, 16);
		}
		check(gw_cidr_contains(&c, (struct sockaddr *)&ss));
	}
	struct sockaddr_storage ss;
	socklen_t sl;
	if (gw_parse_sockaddr(s, &ss, &sl) == 0)
		check((ss.ss_family == AF_INET && sl == sizeof(struct sockaddr_in)) ||
		      (ss.ss_family == AF_INET6 && sl == sizeof(struct sockaddr_in6)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	config_text(data, size);
	syntaxes(data, size);
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Options described once: the getopt_long table and the usage text both
 * come from the same definitions, so they cannot drift apart; and one way
 * to say what was wrong with an option.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

const struct cli_optdef cli_gw_optdefs[] = {
	{ "allow", OPT_GW_ALLOW, "RULE", "HOST[:PORT][/PATH-PREFIX] to allow (repeatable)" },
	{ "allow-cidr", OPT_GW_ALLOW_CIDR, "CIDR",
	  "let the gateway connect to addresses in CIDR it would refuse\n"
	  "(10.1.2.3, 10.20.0.0/16: as allow_cidrs; repeatable)" },
	{ "policy", OPT_GW_POLICY, "FILE", "the network policy (rules, credentials, limits ...)" },
	{ "grant", OPT_GW_GRANT, "G",
	  "github:OWNER/REPO the vault's GitHub credential may work on\n"
	  "(github-admin:OWNER/REPO: its administration too; repeatable)" },
	{ "upstream", OPT_GW_UPSTREAM, "H:P=A:P",
	  "the gateway connects to A:P for H:P (repeatable)" },
	{ "upstream-ca", OPT_GW_UPSTREAM_CA, "FILE",
	  "the gateway also trusts these CAs (PEM) upstream (repeatable)" },
	{ "vault", OPT_GW_VAULT, "FILE", "credentials the gateway injects (never seen inside)" },
	{ NULL, 0, NULL, NULL },
};

size_t cli_longopts(struct option *out, size_t cap, size_t n, const struct cli_optdef *defs)
{
	for (size_t i = 0; defs[i].name && n + 1 < cap; i++)
		out[n++] = (struct option){ defs[i].name,
					    defs[i].arg ? required_argument : no_argument, NULL,
					    defs[i].id };
	out[n] = (struct option){ NULL, 0, NULL, 0 };
	return n;
}

void cli_print_optdefs(FILE *f, const struct cli_optdef *defs)
{
	for (size_t i = 0; defs[i].name; i++) {
		char head[64];
		/* An id that is a letter is the option's short form too. */
		int id = defs[i].id;
		bool letter = (id >= 'a' && id <= 'z') || (id >= 'A' && id <= 'Z');
		char short_form[8] = "";
		if (letter)
			snprintf(short_form, sizeof(short_form), "-%c, ", id);
		snprintf(head, sizeof(head), "%s--%s%s%s", short_form, defs[i].name,
			 defs[i].arg ? " " : "", defs[i].arg ? defs[i].arg : "");
		/* Help text of several lines: each under the first. */
		const char *h = defs[i].help;
		fprintf(f, "  %-21s", head);
		if (strlen(head) > 21)
			fprintf(f, "\n  %-21s", "");
		for (;;) {
			const char *nl = strchr(h, '\n');
			fprintf(f, " %.*s\n", nl ? (int)(nl - h) : (int)strlen(h), h);
			if (!nl)
				break;
			h = nl + 1;
			fprintf(f, "  %-21s", "");
		}
	}
}

int cli_bad_option(char **argv, const struct option *longopts, const char *cmd)
{
	/* An unknown short option (or one missing its value) is optopt: its
	 * cluster ("-it") may still be at optind. */
	if (optopt != 0 && optopt < 256) {
		unsigned char oc = (unsigned char)optopt;
		for (size_t i = 0; longopts[i].name; i++)
			if (longopts[i].val == optopt && longopts[i].has_arg == required_argument)
				return cli_fail("option -%c (--%s) needs a value", oc,
						longopts[i].name);
		if (oc > 0x20 && oc < 0x7f)
			return cli_fail("unknown option -%c (see `airlock %s --help`)", oc, cmd);
		return cli_fail("unknown option -\\x%02x (see `airlock %s --help`)", oc, cmd);
	}
	/* A long one: getopt_long leaves it just before optind. */
	const char *arg = optind > 0 ? argv[optind - 1] : "?";
	if (strncmp(arg, "--", 2) == 0) {
		size_t n = strcspn(arg + 2, "=");
		for (size_t i = 0; longopts[i].name; i++)
			if (strlen(longopts[i].name) == n &&
			    strncmp(longopts[i].name, arg + 2, n) == 0) {
				if (longopts[i].has_arg == required_argument)
					return cli_fail("option --%s needs a value",
							longopts[i].name);
				return cli_fail("option --%s takes no value", longopts[i].name);
			}
		/* A prefix of several: getopt_long will not guess, nor do we. */
		char which[256] = "";
		size_t matches = 0;
		for (size_t i = 0; longopts[i].name && n > 0; i++)
			if (strncmp(longopts[i].name, arg + 2, n) == 0) {
				size_t len = strlen(which);
				snprintf(which + len, sizeof(which) - len, "%s--%s",
					 matches++ ? ", " : "", longopts[i].name);
			}
		if (matches > 1)
			return cli_fail("option --%.*s is ambiguous: %s", (int)n, arg + 2, which);
		return cli_fail("unknown option --%.*s (see `airlock %s --help`)", (int)n, arg + 2,
				cmd);
	}
	return cli_fail("unknown option %s (see `airlock %s --help`)", arg, cmd);
}

/* ---- the gateway's options, shared by `sandbox run|create` and `gateway` ---- */

static int list_add(char **list, size_t *n, const char *opt, char *arg)
{
	if (!*arg)
		return cli_fail("%s wants a value", opt);
	if (*n >= CLI_GW_MAX_LIST)
		return cli_fail("too many %s options (at most %d)", opt, CLI_GW_MAX_LIST);
	list[(*n)++] = arg;
	return 0;
}

int cli_gw_option(struct cli_gw_opts *g, int opt, char *arg)
{
	g->any = true;
	switch (opt) {
	case OPT_GW_ALLOW:
		return list_add(g->allow, &g->n_allow, "--allow", arg);
	case OPT_GW_GRANT:
		if (!(strncmp(arg, "github:", 7) == 0 && arg[7]) &&
		    !(strncmp(arg, "github-admin:", 13) == 0 && arg[13]))
			return cli_fail(
				"--grant wants github:OWNER/REPO (or github-admin:OWNER/REPO), "
				"not '%s'",
				arg);
		return list_add(g->grants, &g->n_grants, "--grant", arg);
	case OPT_GW_UPSTREAM:
		if (!strchr(arg, '='))
			return cli_fail("--upstream wants HOST:PORT=ADDR:PORT, not '%s'", arg);
		return list_add(g->upstreams, &g->n_upstreams, "--upstream", arg);
	case OPT_GW_UPSTREAM_CA:
		return list_add(g->upstream_cas, &g->n_upstream_cas, "--upstream-ca", arg);
	case OPT_GW_ALLOW_CIDR:
		/* Checked by the gateway, as an allow_cidrs entry is. */
		return list_add(g->allow_cidrs, &g->n_allow_cidrs, "--allow-cidr", arg);
	case OPT_GW_POLICY:
		if (!*arg)
			return cli_fail("--policy wants a file");
		if (g->policy)
			return cli_fail("--policy may be given once");
		g->policy = arg;
		return 0;
	case OPT_GW_VAULT:
		if (!*arg)
			return cli_fail("--vault wants a file");
		if (g->vault)
			return cli_fail("--vault may be given once");
		g->vault = arg;
		return 0;
	}
	return cli_fail("unknown gateway option");
}

void cli_gw_fill(const struct cli_gw_opts *g, enum gw_mode mode, const char *label,
		 struct gw_options *ret)
{
	*ret = (struct gw_options){
		.mode = mode,
		.label = label,
		.policy_file = g->policy,
		.allow = g->allow,
		.n_allow = g->n_allow,
		.grants = g->grants,
		.n_grants = g->n_grants,
		.upstreams = g->upstreams,
		.n_upstreams = g->n_upstreams,
		.upstream_cas = g->upstream_cas,
		.n_upstream_cas = g->n_upstream_cas,
		.allow_cidrs = g->allow_cidrs,
		.n_allow_cidrs = g->n_allow_cidrs,
		.vault_file = g->vault,
	};
}

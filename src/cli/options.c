/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Options described once: the getopt_long table and the usage text both
 * come from the same definitions, so they cannot drift apart; and one way
 * to say what was wrong with an option.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

const struct cli_optdef cli_gw_optdefs[] = {
	{ "allow", OPT_GW_ALLOW, "RULE", "HOST[:PORT][/PATH-PREFIX] to allow (repeatable)" },
	{ "policy", OPT_GW_POLICY, "FILE", "the network policy (rules, credentials, limits ...)" },
	{ "grant", OPT_GW_GRANT, "G",
	  "github:OWNER/REPO the vault's GitHub credential may work on\n"
	  "(github-admin:OWNER/REPO: its administration too; repeatable)" },
	{ "upstream", OPT_GW_UPSTREAM, "H:P=A:P", "the gateway connects to A:P for H:P (repeatable)" },
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
		snprintf(head, sizeof(head), "--%s%s%s", defs[i].name, defs[i].arg ? " " : "",
			 defs[i].arg ? defs[i].arg : "");
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
	/* getopt_long leaves what it refused just before optind. */
	const char *arg = optind > 0 ? argv[optind - 1] : "?";
	if (strncmp(arg, "--", 2) == 0) {
		size_t n = strcspn(arg + 2, "=");
		for (size_t i = 0; longopts[i].name; i++)
			if (strlen(longopts[i].name) == n && strncmp(longopts[i].name, arg + 2, n) == 0) {
				if (longopts[i].has_arg == required_argument)
					return cli_fail("option --%s needs a value", longopts[i].name);
				return cli_fail("option --%s takes no value", longopts[i].name);
			}
		return cli_fail("unknown option --%.*s (see `airlock %s --help`)", (int)n, arg + 2, cmd);
	}
	return cli_fail("unknown option %s (see `airlock %s --help`)", arg, cmd);
}

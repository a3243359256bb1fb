/* SPDX-License-Identifier: Apache-2.0 */
/* `airlock gateway` (in the gateway's program, airlock-gateway). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/doc.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/fdutil.h"
#include "common/log.h"
#include "control/settings.h"

enum {
	OPT_LISTEN = 256,
	OPT_MODE,
	OPT_AUDIT,
	OPT_CA_OUT,
	OPT_HELP,
};

static const struct cli_optdef gateway_optdefs[] = {
	{ "listen", OPT_LISTEN, "ADDR:PORT", "where to accept clients" },
	{ "mode", OPT_MODE, "MODE",
	  "restricted: the policy decides (default); open: any public host" },
	{ "audit", OPT_AUDIT, "FILE", "append audit lines to FILE (default: stdout)" },
	{ "ca-out", OPT_CA_OUT, "FILE", "write the interception CA certificate (PEM) for clients" },
	{ "help", OPT_HELP, NULL, "print this and exit" },
	{ NULL, 0, NULL, NULL },
};

static void gateway_usage(FILE *f)
{
	fputs("usage: airlock gateway --listen ADDR:PORT [--policy FILE] [--allow RULE]...\n"
	      "                       [--allow-cidr CIDR]...\n"
	      "                       [--grant github:OWNER/REPO]... [--upstream HOST:PORT=ADDR:PORT]...\n"
	      "                       [--upstream-ca FILE]... [--vault FILE] [--mode restricted|open]\n"
	      "                       [--audit FILE] [--ca-out FILE]\n"
	      "\n"
	      "Serves as an HTTP proxy on ADDR:PORT in the foreground until SIGINT or SIGTERM;\n"
	      "says \"listening on ADDR:PORT\" on stderr once it serves. --policy or --allow is\n"
	      "needed unless --mode open.\n\n",
	      f);
	cli_print_optdefs(f, gateway_optdefs);
	cli_print_optdefs(f, cli_gw_optdefs);
}

int cmd_gateway(int argc, char **argv)
{
	struct option longopts[32];
	size_t nl = cli_longopts(longopts, ARRAY_SIZE(longopts), 0, gateway_optdefs);
	cli_longopts(longopts, ARRAY_SIZE(longopts), nl, cli_gw_optdefs);
	struct cli_gw_opts g = { 0 };
	const char *listen = NULL, *audit = NULL, *ca_out = NULL;
	enum gw_mode mode = GW_MODE_RESTRICTED;
	optind = 1;
	opterr = 0;
	int c, r;
	/* No command follows: options may come in any order. */
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_HELP:
			gateway_usage(stdout);
			return 0;
		case OPT_LISTEN:
			listen = optarg;
			break;
		case OPT_MODE:
			if (strcmp(optarg, "restricted") == 0)
				mode = GW_MODE_RESTRICTED;
			else if (strcmp(optarg, "open") == 0)
				mode = GW_MODE_OPEN;
			else
				return cli_fail("--mode wants restricted or open, not '%s'",
						optarg);
			break;
		case OPT_AUDIT:
			audit = optarg;
			break;
		case OPT_CA_OUT:
			ca_out = optarg;
			break;
		case OPT_GW_ALLOW:
		case OPT_GW_POLICY:
		case OPT_GW_GRANT:
		case OPT_GW_UPSTREAM:
		case OPT_GW_UPSTREAM_CA:
		case OPT_GW_VAULT:
		case OPT_GW_ALLOW_CIDR:
			r = cli_gw_option(&g, c, optarg);
			if (r)
				return r;
			break;
		case '?':
		default:
			return cli_bad_option(argv, longopts, "gateway");
		}
	}
	if (optind < argc)
		return cli_fail(
			"gateway takes no arguments but options (see `airlock gateway --help`)");
	if (!listen || !*listen)
		return cli_fail("gateway needs --listen ADDR:PORT");
	if (mode == GW_MODE_RESTRICTED && !g.policy && g.n_allow == 0)
		return cli_fail("gateway needs --policy FILE or --allow RULE (or --mode open)");

	struct gw_options gopts;
	cli_gw_fill(&g, mode, "standalone", &gopts);
	gopts.many_clients = true;
	struct al_error err = { 0 };
	/* Not one of the sandboxes' uids, as for a sandbox's gateway. */
	struct sbx_settings set;
	uint32_t uid;
	if (ctl_settings_from_env(&set, &uid, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	struct gw_config *cfg = NULL;
	r = gw_config_build(&gopts, &cfg, &err);
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	_cleanup_close_ int audit_fd = -1;
	if (audit) {
		audit_fd = open_append_regular(audit);
		if (audit_fd < 0) {
			gw_config_free(cfg);
			if (audit_fd == -ELOOP)
				return cli_fail("%s is a symbolic link: an audit log is opened "
						"without following one (give the file it names)",
						audit);
			if (audit_fd == -EINVAL)
				return cli_fail(
					"%s is not a regular file (an audit log must be one)",
					audit);
			return cli_fail("cannot open %s: %s", audit, al_strerror(audit_fd));
		}
	}
	r = gw_serve_standalone(cfg, listen, ca_out, audit_fd, uid, &err);
	gw_config_free(cfg);
	if (r < 0)
		r = cli_fail("%s", al_error_message(&err));
	/* The process serves from an empty root under its own uid: nothing
	 * is left for exit handlers to do, and some need a /proc it no longer
	 * has (a sanitizer's leak check). */
	fflush(NULL);
	_exit(r);
}

/* ---- for the manual and the completion (cli/doc.h) ---- */

static void gateway_help(FILE *f, const void *ud)
{
	gateway_usage(f);
}

int cli_doc_gateway(void)
{
	const struct cli_doc doc = { .name = "gateway",
				     .help = gateway_help,
				     .tables = { gateway_optdefs, cli_gw_optdefs } };
	return cli_doc_print(stdout, &doc, 1, NULL);
}

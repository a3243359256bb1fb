/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Exit statuses of airlock itself; a command's own status passes through. */
#define EXIT_AIRLOCK_ERROR 125 /* bad option, missing image, setup failure */
#define EXIT_TIMED_OUT 124
#define EXIT_OOM 137
/* An option parser's answer after printing --help: the command exits 0. */
#define CLI_HELP_SHOWN (-1)

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "gateway/gateway.h"

#define CLI_GW_MAX_LIST 256 /* each of --allow, --grant, --upstream, --upstream-ca, --allow-cidr */

/* The gateway's options, as `sandbox run|create` and `gateway` take them. */
struct cli_gw_opts {
	const char *policy;
	const char *vault;
	char *allow[CLI_GW_MAX_LIST];
	size_t n_allow;
	char *grants[CLI_GW_MAX_LIST];
	size_t n_grants;
	char *upstreams[CLI_GW_MAX_LIST];
	size_t n_upstreams;
	char *upstream_cas[CLI_GW_MAX_LIST];
	size_t n_upstream_cas;
	char *allow_cidrs[CLI_GW_MAX_LIST];
	size_t n_allow_cidrs;
	bool any; /* one of them was given */
};

/* Long option names the gateway's options share (getopt values). */
enum {
	OPT_GW_ALLOW = 1024,
	OPT_GW_POLICY,
	OPT_GW_GRANT,
	OPT_GW_UPSTREAM,
	OPT_GW_UPSTREAM_CA,
	OPT_GW_VAULT,
	OPT_GW_ALLOW_CIDR, /* the last of them */
};

/*
 * An option described once (options.c): the getopt_long table and the
 * usage text both come from it. arg: the value's name, NULL for none;
 * help: one or more lines.
 */
struct cli_optdef {
	const char *name;
	int id;
	const char *arg;
	const char *help;
};

/* The gateway's options, shared by `sandbox run|create` and `gateway`. */
extern const struct cli_optdef cli_gw_optdefs[];

/* Appends defs to a getopt_long table holding n entries (cap in all, its
 * terminator included); returns the new count. */
size_t cli_longopts(struct option *out, size_t cap, size_t n, const struct cli_optdef *defs);
/* "  --name ARG            help" lines. */
void cli_print_optdefs(FILE *f, const struct cli_optdef *defs);
/* What was wrong with the option getopt_long just refused ('?'): unknown,
 * or known and missing its value; returns EXIT_AIRLOCK_ERROR after saying
 * so. cmd: for "see `airlock CMD --help`". */
int cli_bad_option(char **argv, const struct option *longopts, const char *cmd);

/* Takes one of the OPT_GW_ options; 0, or an exit status after a message. */
int cli_gw_option(struct cli_gw_opts *g, int opt, char *arg);
void cli_gw_fill(const struct cli_gw_opts *g, enum gw_mode mode, const char *label,
		 struct gw_options *ret);

/* s as a JSON string, quotes included (bytes that are not UTF-8 as
 * \u00XX of the byte). */
void cli_json_str(FILE *f, const char *s);
/* "key":"s" (NULL or "": null), or for s that is not UTF-8 (a path may be
 * any bytes) "key":null,"key_hex":"its bytes in hex": never a lossy
 * string a script would act on. */
void cli_json_field(FILE *f, const char *key, const char *s);

/* Prints "airlock: MESSAGE" (through the log) and returns EXIT_AIRLOCK_ERROR. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* What every airlock program does first: valid descriptors 0 to 2, the log
 * (AIRLOCK_LOG_LEVEL, AIRLOCK_LOG_FORMAT), SIGPIPE ignored; 0 or an exit
 * status. */
int cli_init(void);

/*
 * Runs command argv[0] (argv: the command and its arguments, as main got
 * them after the program's name) in airlock's helper program name
 * (common/libexec.h) in place of this process; returns only on failure,
 * with an exit status after a message.
 */
int cli_exec_helper(const char *name, int argc, char **argv);

/* The commands: sandbox and doctor in airlock itself, gateway in
 * airlock-gateway, checkpoint in airlock-checkpoint. */
int cmd_sandbox(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_gateway(int argc, char **argv);
int cmd_checkpoint(int argc, char **argv);
/* run, turn, session, events, diff, fork, cancel, vault: in airlock-control */
int cmd_control(int argc, char **argv);

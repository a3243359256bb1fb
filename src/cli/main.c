/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `airlock`: the sandbox commands run here, with libc and libseccomp
 * alone; `gateway` and `checkpoint` run in their own programs
 * (airlock-gateway, airlock-checkpoint: cli_exec_helper), which link the
 * gateway's and the store's libraries. A sandbox with a network starts
 * airlock-gateway as its gateway process (gateway/gateway.h).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/doc.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "gateway/gateway.h"

#define CHECKPOINT_HELPER "airlock-checkpoint"
#define CONTROL_HELPER "airlock-control"

static int cmd_version(int argc, char **argv)
{
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		puts("usage: airlock version   print the version");
		return 0;
	}
	if (argc > 1)
		return cli_fail("version takes no arguments");
	printf("airlock %s\n", AIRLOCK_VERSION);
	return 0;
}

static int run_gateway(int argc, char **argv)
{
	return cli_exec_helper(GW_HELPER, argc, argv);
}

static int run_checkpoint(int argc, char **argv)
{
	return cli_exec_helper(CHECKPOINT_HELPER, argc, argv);
}

static int run_control(int argc, char **argv)
{
	return cli_exec_helper(CONTROL_HELPER, argc, argv);
}

static int cmd_help(int argc, char **argv);

/* Every command, once: dispatch and help both come from here. */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *synopsis;
	const char *help;
} commands[] = {
	{ "run", run_control, "[--preset NAME] [--repo DIR|URL] [--session ID] PROMPT",
	  "an agent's turn in a sandbox, with a checkpoint after it" },
	{ "turn", run_control, "SESSION PROMPT", "the next turn of a session" },
	{ "session", run_control, "list|show|rm|gc", "sessions" },
	{ "events", run_control, "SESSION [--follow] [--json]", "a session's agent events" },
	{ "diff", run_control, "SESSION [TURN] [--text]", "what a turn changed" },
	{ "fork", run_control, "SESSION|CHECKPOINT", "a new session from a checkpoint" },
	{ "cancel", run_control, "SESSION", "cancel a session's running or queued turn" },
	{ "vault", run_control, "set NAME|rm NAME|list",
	  "the credentials the gateway injects (values from standard input)" },
	{ "sandbox", cmd_sandbox,
	  "run|create|exec|logs|list|inspect|destroy|audit|policy|budget|gc",
	  "Linux sandboxes, with their egress gateway" },
	{ "gateway", run_gateway, "--listen ADDR:PORT [OPTIONS]",
	  "the egress gateway alone, as an HTTP proxy" },
	{ "checkpoint", run_checkpoint, "create|restore|diff|ls|latest|log|adopt|export|import|gc",
	  "workspace checkpoints" },
	{ "doctor", cmd_doctor, "", "kernel features present or missing" },
	{ "version", cmd_version, "", "print the version" },
	{ "help", cmd_help, "", "print this" },
};

static void usage(FILE *f)
{
	fputs("usage: airlock COMMAND [ARGS]   (airlock COMMAND --help: a command's own options)\n"
	      "\ncommands:\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		fprintf(f, "  %s%s%s\n      %s\n", commands[i].name,
			commands[i].synopsis[0] ? " " : "", commands[i].synopsis, commands[i].help);
	}
	fputs("\nenvironment: AIRLOCK_STATE_DIR, AIRLOCK_CGROUP_PARENT, AIRLOCK_UID_BASE,\n"
	      "             AIRLOCK_GATEWAY_UID, AIRLOCK_STORE_DIR, AIRLOCK_CHECKPOINT_KEY,\n"
	      "             AIRLOCK_STORE_THREADS, AIRLOCK_LOG_LEVEL (error|warning|info|debug),\n"
	      "             AIRLOCK_LOG_FORMAT (human|json)\n",
	      f);
}

static int cmd_help(int argc, char **argv)
{
	usage(stdout);
	return 0;
}

/* ---- for the manual and the completion (cli/doc.h) ---- */

static void top_help(FILE *f, const void *ud)
{
	usage(f);
}

/* Every command, as the manual's list and the completion show them. */
static void top_commands(FILE *f)
{
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		fputs(i ? ",{\"name\":" : "[{\"name\":", f);
		cli_json_str(f, commands[i].name);
		fputs(",\"synopsis\":", f);
		cli_json_str(f, commands[i].synopsis);
		fputs(",\"summary\":", f);
		cli_json_str(f, commands[i].help);
		fputc('}', f);
	}
	fputc(']', f);
}

static int print_doc(void)
{
	struct cli_doc docs[2] = { { .name = "airlock", .help = top_help } };
	cli_doc_sandbox(&docs[1]);
	return cli_doc_print(stdout, docs, ARRAY_SIZE(docs), top_commands);
}

int main(int argc, char **argv)
{
	int r = cli_init();
	if (r)
		return r;
	if (argc < 2) {
		usage(stderr);
		return EXIT_AIRLOCK_ERROR;
	}
	/* For the manual and the completion, at build time. */
	if (argc == 2 && strcmp(argv[1], CLI_DOC_ARG) == 0)
		return print_doc();
	const char *cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
		cmd = "help";
	else if (strcmp(cmd, "--version") == 0)
		cmd = "version";
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (strcmp(cmd, commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	log_error("unknown command '%s' (try `airlock --help`)", cmd);
	return EXIT_AIRLOCK_ERROR;
}

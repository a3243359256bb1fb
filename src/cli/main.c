/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cleanup.h"
#include "common/log.h"

static int cmd_version(int argc, char **argv)
{
	printf("airlock %s\n", AIRLOCK_VERSION);
	return 0;
}

static int cmd_help(int argc, char **argv);

/* Every command, once: dispatch and help both come from here. */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *synopsis;
	const char *help;
} commands[] = {
	{ "sandbox", cmd_sandbox, "run|create|exec|list|destroy|audit|policy|gc",
	  "Linux sandboxes, with their egress gateway" },
	{ "gateway", cmd_gateway, "--listen ADDR:PORT [OPTIONS]",
	  "the egress gateway alone, as an HTTP proxy" },
	{ "checkpoint", cmd_checkpoint, "create|restore|diff|ls|latest|export|import|gc",
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
		fprintf(f, "  %s %s\n      %s\n", commands[i].name, commands[i].synopsis,
			commands[i].help);
	}
	fputs("\nenvironment: AIRLOCK_STATE_DIR, AIRLOCK_CGROUP_PARENT, AIRLOCK_UID_BASE,\n"
	      "             AIRLOCK_STORE_DIR, AIRLOCK_CHECKPOINT_KEY, AIRLOCK_STORE_THREADS,\n"
	      "             AIRLOCK_LOG_LEVEL (error|warning|info|debug), AIRLOCK_LOG_FORMAT (human|json)\n",
	      f);
}

static int cmd_help(int argc, char **argv)
{
	usage(stdout);
	return 0;
}

/* A closed 0, 1 or 2 would be reused by the next open() and then
 * clobbered by whoever writes to "stdout": make them valid first. */
static int ensure_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) >= 0)
			continue;
		int n = open("/dev/null", O_RDWR);
		if (n < 0)
			return -errno;
		if (n != fd)
			return -EBADF;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (ensure_std_fds() < 0)
		return EXIT_AIRLOCK_ERROR;
	enum log_level level = LOG_LEVEL_INFO;
	const char *lv = getenv("AIRLOCK_LOG_LEVEL");
	if (lv && log_level_from_string(lv, &level) < 0)
		level = LOG_LEVEL_INFO;
	const char *lf = getenv("AIRLOCK_LOG_FORMAT");
	log_setup("airlock", level, lf && strcmp(lf, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_HUMAN);
	/* Writes to a closed pipe are errors to handle, not deaths. */
	signal(SIGPIPE, SIG_IGN);

	if (argc < 2) {
		usage(stderr);
		return EXIT_AIRLOCK_ERROR;
	}
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

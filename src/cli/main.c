/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/log.h"

static void usage(FILE *f)
{
	fputs("usage: airlock COMMAND [ARGS]\n"
	      "\n"
	      "commands:\n"
	      "  sandbox run|create|exec|list|destroy|gc   Linux sandboxes (see `airlock sandbox --help`)\n"
	      "  sandbox audit ID                          a sandbox's gateway audit log\n"
	      "  gateway --listen ADDR:PORT [OPTIONS]      the egress gateway as a standalone HTTP proxy\n"
	      "                                            (see `airlock gateway --help`)\n"
	      "  checkpoint create|restore|diff|ls|latest  workspace checkpoints\n"
	      "                                            (see `airlock checkpoint --help`)\n"
	      "  doctor                                    kernel features present or missing\n"
	      "  version                                   print the version\n"
	      "\n"
	      "environment: AIRLOCK_STATE_DIR, AIRLOCK_CGROUP_PARENT, AIRLOCK_UID_BASE,\n"
	      "             AIRLOCK_LOG_LEVEL (error|warning|info|debug), AIRLOCK_LOG_FORMAT (human|json)\n",
	      f);
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
	if (strcmp(cmd, "sandbox") == 0)
		return cmd_sandbox(argc - 1, argv + 1);
	if (strcmp(cmd, "gateway") == 0)
		return cmd_gateway(argc - 1, argv + 1);
	if (strcmp(cmd, "checkpoint") == 0)
		return cmd_checkpoint(argc - 1, argv + 1);
	if (strcmp(cmd, "doctor") == 0)
		return cmd_doctor(argc - 1, argv + 1);
	if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
		printf("airlock %s\n", AIRLOCK_VERSION);
		return 0;
	}
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	log_error("unknown command '%s' (try `airlock --help`)", cmd);
	return EXIT_AIRLOCK_ERROR;
}

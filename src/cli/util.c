/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the CLI's command groups and programs. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cleanup.h"
#include "common/libexec.h"
#include "common/log.h"

extern char **environ;

int cli_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_error("%s", msg);
	return EXIT_AIRLOCK_ERROR;
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

int cli_init(void)
{
	if (ensure_std_fds() < 0)
		return EXIT_AIRLOCK_ERROR;
	enum log_level level = LOG_LEVEL_INFO;
	const char *lv = getenv("AIRLOCK_LOG_LEVEL");
	const char *lf = getenv("AIRLOCK_LOG_FORMAT");
	bool bad_level = lv && *lv && log_level_from_string(lv, &level) < 0;
	bool bad_format = lf && *lf && strcmp(lf, "json") != 0 && strcmp(lf, "human") != 0;
	log_setup("airlock", bad_level ? LOG_LEVEL_INFO : level,
		  lf && strcmp(lf, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_HUMAN);
	/* Said back only when it is short and printable. */
	const char *bad = bad_level ? lv : bad_format ? lf : NULL;
	if (bad) {
		bool show = strlen(bad) <= 32;
		for (const char *c = bad; show && *c; c++)
			show = *c > 0x20 && *c < 0x7f;
		return cli_fail("%s wants %s%s%s%s",
				bad_level ? "AIRLOCK_LOG_LEVEL" : "AIRLOCK_LOG_FORMAT",
				bad_level ? "error, warning, info or debug" : "human or json",
				show ? ", not '" : "", show ? bad : "", show ? "'" : "");
	}
	/* Writes to a closed pipe are errors to handle, not deaths. */
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

int cli_exec_helper(const char *name, int argc, char **argv)
{
	struct al_error err = { 0 };
	char path[LIBEXEC_PATH_MAX];
	_cleanup_close_ int fd = libexec_open(name, path, &err);
	if (fd < 0)
		return cli_fail("%s", al_error_message(&err));
	/* "airlock COMMAND ARGS...", as it was typed. */
	_cleanup_free_ char **av = calloc((size_t)argc + 2, sizeof(char *));
	if (!av)
		return cli_fail("out of memory");
	av[0] = (char *)"airlock";
	for (int i = 0; i < argc; i++)
		av[i + 1] = argv[i];
	fflush(NULL);
	syscall(SYS_execveat, fd, "", av, environ, AT_EMPTY_PATH);
	return cli_fail("cannot run %s: %s", path, al_strerror(errno));
}

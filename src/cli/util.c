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

/* The length of the UTF-8 sequence at p (1..4), or 0 when it is none. */
static size_t utf8_seq(const unsigned char *p)
{
	size_t n = p[0] < 0x80		 ? 1 :
		   (p[0] & 0xe0) == 0xc0 ? 2 :
		   (p[0] & 0xf0) == 0xe0 ? 3 :
		   (p[0] & 0xf8) == 0xf0 ? 4 :
					   0;
	if (n == 0 || (n == 2 && p[0] < 0xc2) || (n == 4 && p[0] > 0xf4))
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	/* no overlong three- or four-byte forms, no surrogates */
	if (n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0)))
		return 0;
	if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90)))
		return 0;
	return n;
}

void cli_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		size_t n = utf8_seq(p);
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f || n == 0)
			fprintf(f, "\\u%04x", *p);
		else
			fwrite(p, 1, n, f);
		p += n ? n : 1;
	}
	fputc('"', f);
}

void cli_json_field(FILE *f, const char *key, const char *s)
{
	bool utf8 = true;
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p && utf8;) {
		size_t n = utf8_seq(p);
		utf8 = n > 0;
		p += n;
	}
	fprintf(f, "\"%s\":", key);
	if (!s || !*s) {
		fputs("null", f);
	} else if (utf8) {
		cli_json_str(f, s);
	} else {
		fprintf(f, "null,\"%s_hex\":\"", key);
		for (const unsigned char *p = (const unsigned char *)s; *p; p++)
			fprintf(f, "%02x", *p);
		fputc('"', f);
	}
}

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

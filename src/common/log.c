/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "error.h"

/* Process-wide logging configuration: set once at start-up. */
static const char *log_program = "airlock";
static enum log_level log_level = LOG_LEVEL_INFO;
static enum log_format log_format = LOG_FORMAT_HUMAN;
static int log_fd = STDERR_FILENO;

#define LOG_LINE_MAX 4096
#define LOG_WRITE_WAIT_MS 1000
/* Bytes kept free at the end of a JSON line for the fields after msg. */
#define LOG_JSON_TAIL 64

void log_setup(const char *program, enum log_level level, enum log_format format)
{
	if (program)
		log_program = program;
	log_level = level;
	log_format = format;
}

void log_set_fd(int fd)
{
	log_fd = fd;
}

enum log_level log_get_level(void)
{
	return log_level;
}

int log_level_from_string(const char *s, enum log_level *ret)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(s, names[i]) == 0) {
			*ret = (enum log_level)i;
			return 0;
		}
	}
	if (strcmp(s, "warn") == 0) { /* as many tools spell it */
		*ret = LOG_LEVEL_WARNING;
		return 0;
	}
	return -EINVAL;
}

static const char *level_name(enum log_level level)
{
	switch (level) {
	case LOG_LEVEL_ERROR:
		return "error";
	case LOG_LEVEL_WARNING:
		return "warning";
	case LOG_LEVEL_INFO:
		return "info";
	case LOG_LEVEL_DEBUG:
		return "debug";
	}
	return "info";
}

/* Appends s to buf as JSON string content; stops at the buffer's end. */
static size_t json_escape(char *buf, size_t pos, size_t size, const char *s)
{
	for (; *s && pos + 7 < size; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			buf[pos++] = '\\';
			buf[pos++] = (char)c;
		} else if (c == '\n') {
			buf[pos++] = '\\';
			buf[pos++] = 'n';
		} else if (c < 0x20 || c == 0x7f) {
			pos += (size_t)snprintf(buf + pos, size - pos, "\\u%04x", c);
		} else {
			buf[pos++] = (char)c;
		}
	}
	return pos;
}

/*
 * Logging never hangs a program: a reader that stops reading (a full pipe)
 * costs at most LOG_WRITE_WAIT_MS per line, then the rest of the line is
 * dropped. Chunks of PIPE_BUF after POLLOUT cannot block on a pipe.
 */
static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		int pr = poll(&pfd, 1, LOG_WRITE_WAIT_MS);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0 || (pfd.revents & (POLLERR | POLLNVAL)))
			return;
		ssize_t w = write(fd, p, n < PIPE_BUF ? n : PIPE_BUF);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		p += w;
		n -= (size_t)w;
	}
}

int log_emitv(enum log_level level, int err, const char *fmt, va_list ap)
{
	int saved = errno;
	int ret = err == 0 ? -EIO : (err < 0 ? err : -err);

	if (level > log_level) {
		errno = saved;
		return ret;
	}

	char msg[LOG_LINE_MAX];
	int n = vsnprintf(msg, sizeof(msg), fmt, ap);
	if (n < 0)
		msg[0] = '\0';
	if (err != 0 && n >= 0 && (size_t)n < sizeof(msg))
		snprintf(msg + n, sizeof(msg) - (size_t)n, ": %s", al_strerror(ret));

	char line[LOG_LINE_MAX + 256];
	size_t len;
	if (log_format == LOG_FORMAT_JSON) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		struct tm tm;
		gmtime_r(&ts.tv_sec, &tm);
		char when[32];
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		len = (size_t)snprintf(line, sizeof(line),
				       "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"program\":\"",
				       when, ts.tv_nsec / 1000000, level_name(level));
		/* Escaping can grow the text six-fold: cut it short rather than
		 * lose the end of the line, which must stay one valid object. */
		len = json_escape(line, len, sizeof(line) - 2 * LOG_JSON_TAIL, log_program);
		len += (size_t)snprintf(line + len, sizeof(line) - len, "\",\"msg\":\"");
		len = json_escape(line, len, sizeof(line) - LOG_JSON_TAIL, msg);
		if (err != 0)
			len += (size_t)snprintf(line + len, sizeof(line) - len,
						"\",\"errno\":%d}\n", -ret);
		else
			len += (size_t)snprintf(line + len, sizeof(line) - len, "\"}\n");
	} else {
		len = (size_t)snprintf(line, sizeof(line), "%s: %s%s\n", log_program,
				       level == LOG_LEVEL_WARNING ? "warning: " : "", msg);
	}
	if (len >= sizeof(line)) {
		/* Truncated: still end the line. */
		len = sizeof(line) - 1;
		line[len - 1] = '\n';
	}
	write_all(log_fd, line, len);
	errno = saved;
	return ret;
}

int log_emit(enum log_level level, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = log_emitv(level, err, fmt, ap);
	va_end(ap);
	return r;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging for program code. Library code returns errors; programs log them.
 * Two formats: human ("airlock: message") and JSON lines for machines.
 * The level and format are the only process-wide mutable state besides
 * parsed configuration. Never log a secret or a raw token.
 */
#pragma once

#include <stdarg.h>
#include <stdbool.h>

enum log_level {
	LOG_LEVEL_ERROR = 0,
	LOG_LEVEL_WARNING,
	LOG_LEVEL_INFO,
	LOG_LEVEL_DEBUG,
};

enum log_format {
	LOG_FORMAT_HUMAN = 0,
	LOG_FORMAT_JSON,
};

void log_setup(const char *program, enum log_level level, enum log_format format);
void log_set_fd(int fd);
enum log_level log_get_level(void);
/* Parses "error", "warning", "info", "debug"; returns -EINVAL otherwise. */
int log_level_from_string(const char *s, enum log_level *ret);

/* Always returns -abs(err) (or -EIO when err is 0) so callers can
 * "return log_error_errno(r, ...);". */
int log_emit(enum log_level level, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int log_emitv(enum log_level level, int err, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

#define log_error(...) log_emit(LOG_LEVEL_ERROR, 0, __VA_ARGS__)
#define log_warning(...) log_emit(LOG_LEVEL_WARNING, 0, __VA_ARGS__)
#define log_info(...) log_emit(LOG_LEVEL_INFO, 0, __VA_ARGS__)
#define log_debug(...) log_emit(LOG_LEVEL_DEBUG, 0, __VA_ARGS__)
#define log_error_errno(e, ...) log_emit(LOG_LEVEL_ERROR, (e), __VA_ARGS__)
#define log_warning_errno(e, ...) log_emit(LOG_LEVEL_WARNING, (e), __VA_ARGS__)
#define log_debug_errno(e, ...) log_emit(LOG_LEVEL_DEBUG, (e), __VA_ARGS__)

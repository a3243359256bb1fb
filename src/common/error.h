/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The error contract: functions return 0 or a negative errno. Where a
 * human-readable reason must reach a user, they take an optional
 * struct al_error * last and fill it on failure via al_error_set(), which
 * returns its negative errno so a failure path is one statement:
 *
 *	return al_error_set(err, -ENOENT, "image %s does not exist", path);
 */
#pragma once

#include <stddef.h>

#define AL_ERROR_MSG_MAX 512

struct al_error {
	int code; /* negative errno, 0 when unset */
	char msg[AL_ERROR_MSG_MAX];
};

/* Sets err (if not NULL) unless it already holds an earlier, more specific
 * reason, and returns code (forced negative; -EIO for 0). */
int al_error_set(struct al_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like al_error_set, with ": " and the errno's description appended. */
int al_error_set_errno(struct al_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

void al_error_clear(struct al_error *err);

/* The message, or the errno's description when none was recorded. */
const char *al_error_message(const struct al_error *err);

/*
 * The description of an errno value (either sign): a constant string,
 * never translated and safe after fork() in a threaded process, unlike
 * strerror, which may allocate and depends on the locale.
 */
const char *al_strerror(int errnum);

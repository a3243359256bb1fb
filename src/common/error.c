/* SPDX-License-Identifier: Apache-2.0 */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int normalize(int code)
{
	if (code == 0)
		return -EIO;
	return code < 0 ? code : -code;
}

static int vset(struct al_error *err, int code, bool with_errno, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));
static int vset(struct al_error *err, int code, bool with_errno, const char *fmt, va_list ap)
{
	code = normalize(code);
	if (!err || err->code != 0)
		return code;
	err->code = code;
	int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	if (n < 0)
		err->msg[0] = '\0';
	else if (with_errno && (size_t)n < sizeof(err->msg))
		snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %s", al_strerror(code));
	return code;
}

int al_error_set(struct al_error *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vset(err, code, false, fmt, ap);
	va_end(ap);
	return r;
}

int al_error_set_errno(struct al_error *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vset(err, code, true, fmt, ap);
	va_end(ap);
	return r;
}

void al_error_clear(struct al_error *err)
{
	if (!err)
		return;
	err->code = 0;
	err->msg[0] = '\0';
}

const char *al_error_message(const struct al_error *err)
{
	if (!err)
		return "unknown error";
	if (err->msg[0])
		return err->msg;
	return al_strerror(err->code ? err->code : EIO);
}

const char *al_strerror(int errnum)
{
	if (errnum < 0)
		errnum = -errnum;
	const char *d = strerrordesc_np(errnum);
	return d ? d : "unknown error";
}

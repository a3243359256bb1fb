/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the CLI's command groups. */
#include <stdarg.h>
#include <stdio.h>

#include "cli/cli.h"
#include "common/log.h"

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

/* SPDX-License-Identifier: Apache-2.0 */
#include "common/denial.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool starts(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

int denial_hint(const char *reason, const char *host, unsigned port, char *out, size_t size)
{
	if (!reason || !host || !*host || size == 0)
		return 0;
	if (starts(reason, "no rule allows this host") ||
	    starts(reason, "no rule allows this request")) {
		/* A rule names its host; a port other than the scheme's own too. */
		bool v6 = strchr(host, ':') != NULL;
		int n = port == 443 || port == 80 || port == 0 ?
				snprintf(out, size, "--allow %s%s%s", v6 ? "[" : "", host,
					 v6 ? "]" : "") :
				snprintf(out, size, "--allow %s%s%s:%u", v6 ? "[" : "", host,
					 v6 ? "]" : "", port);
		return n > 0 && (size_t)n < size;
	}
	/* The address vetting: only the ranges an operator may open. */
	const char *kind = strstr(reason, "a refused address: ");
	if (!kind)
		return 0;
	kind += strlen("a refused address: ");
	static const char *const openable[] = { "private", "documentation",
						"shared address space (CGNAT)", "benchmarking",
						NULL };
	for (size_t i = 0; openable[i]; i++)
		if (starts(kind, openable[i])) {
			/* "ADDR is a refused address": the address itself. */
			const char *sp = strchr(reason, ' ');
			bool named = sp && starts(sp, " is a refused address");
			int n = named ? snprintf(out, size,
						 "allow_cidrs: [%.*s/%s] in a --policy file",
						 (int)(sp - reason), reason,
						 memchr(reason, ':', (size_t)(sp - reason)) ?
							 "128" :
							 "32") :
					snprintf(out, size,
						 "allow_cidrs: [its address's range] in a --policy "
						 "file");
			return n > 0 && (size_t)n < size;
		}
	return 0;
}

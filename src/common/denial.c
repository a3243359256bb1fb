/* SPDX-License-Identifier: Apache-2.0 */
#include "common/denial.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool starts(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* An IP address as the gateway writes one (IPv6 in brackets or not), into
 * out without brackets; false for anything else (a host name). */
static bool ip_literal(const char *s, size_t len, char *out, size_t size, bool *v6)
{
	if (len >= 2 && s[0] == '[' && s[len - 1] == ']')
		s++, len -= 2;
	if (len == 0 || len >= size)
		return false;
	memcpy(out, s, len);
	out[len] = '\0';
	unsigned char buf[16];
	*v6 = strchr(out, ':') != NULL;
	return inet_pton(*v6 ? AF_INET6 : AF_INET, out, buf) == 1;
}

int denial_hint(const char *reason, const char *host, unsigned port, char *out, size_t size)
{
	if (!reason || !host || !*host || size == 0)
		return 0;
	if (starts(reason, "no rule allows this host") ||
	    starts(reason, "no rule allows this request")) {
		/* A rule names its host and, so as to allow no more, the port
		 * asked for (a rule without one allows every port). An IPv6
		 * literal in brackets, once. */
		char ip[64];
		bool v6 = false;
		bool lit = ip_literal(host, strlen(host), ip, sizeof(ip), &v6);
		int n = port ? snprintf(out, size, "--allow %s%s%s:%u", lit && v6 ? "[" : "",
					lit ? ip : host, lit && v6 ? "]" : "", port) :
			       snprintf(out, size, "--allow %s%s%s", lit && v6 ? "[" : "",
					lit ? ip : host, lit && v6 ? "]" : "");
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
			/* "ADDR is a refused address": the address itself, when it
			 * is one (a static name of the policy's is not). */
			const char *sp = strchr(reason, ' ');
			char ip[64];
			bool v6 = false;
			bool named = sp && starts(sp, " is a refused address") &&
				     ip_literal(reason, (size_t)(sp - reason), ip, sizeof(ip), &v6);
			const char *bits = v6 ? "128" : "32";
			int n = named ? snprintf(out, size,
						 "--allow-cidr %s/%s, or allow_cidrs: [%s/%s] in a "
						 "--policy file",
						 ip, bits, ip, bits) :
					snprintf(out, size,
						 "--allow-cidr with its address's range, or "
						 "allow_cidrs in a --policy file");
			return n > 0 && (size_t)n < size;
		}
	return 0;
}

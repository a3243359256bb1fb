/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>

/*
 * What would allow a request the egress gateway refused, for a person to
 * read: from the refusal's reason (as the gateway words it) and the host
 * and port asked for, an option ("--allow deb.debian.org", "--allow-cidr
 * 10.1.2.3/32") and the policy key that does the same, written into out. 0 when none would: a deny rule, the host itself,
 * cloud metadata, a spent budget, a malformed request.
 */
int denial_hint(const char *reason, const char *host, unsigned port, char *out, size_t size);

/* SPDX-License-Identifier: Apache-2.0 */
/* Every number parser on the input taken as a string; checks that what a
 * parser accepts is what it should have. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/parse.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';

	uint64_t u, sz, ms;
	int ru = parse_u64(s, &u);
	int rs = parse_size(s, &sz);
	int rd = parse_duration(s, &ms);

	if (ru == 0) {
		/* Decimal in, the same decimal out (modulo leading zeros). */
		char again[32];
		snprintf(again, sizeof(again), "%llu", (unsigned long long)u);
		const char *p = s;
		while (p[0] == '0' && p[1])
			p++;
		if (strcmp(p, again) != 0)
			abort();
		/* A plain number is bytes for parse_size, seconds for durations. */
		if (rs != 0 || sz != u)
			abort();
		if (u <= UINT64_MAX / 1000 && (rd != 0 || ms != u * 1000))
			abort();
	}
	if (rs == 0 && (s[0] < '0' || s[0] > '9'))
		abort();

	int i;
	if (parse_int_range(s, -1000, 1000, &i) == 0 && (i < -1000 || i > 1000))
		abort();

	double d;
	if (parse_double_range(s, -1e6, 1e6, &d) == 0) {
		if (!isfinite(d) || d < -1e6 || d > 1e6)
			abort();
		/* Only digits, one '.', and a leading '-' may get through. */
		for (const char *p = s; *p; p++)
			if (!((*p >= '0' && *p <= '9') || *p == '.' || (*p == '-' && p == s)))
				abort();
	}
	free(s);
	return 0;
}

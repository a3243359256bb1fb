/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ref updates at the start of a git push, as the gateway reads them
 * before a push under a plain GitHub grant goes on: any bytes, no crash;
 * the verdict does not change with more bytes once given; and an allowed
 * push names no ref outside refs/heads/airlock/ (checked by an independent
 * reading of the same pkt-lines).
 */
#include <string.h>

#include "fuzz.h"
#include "gateway/github.h"

/* Every "OLD NEW REF" line up to the first flush names a ref under the prefix. */
static bool oracle_all_under_prefix(const char *p, size_t len)
{
	size_t off = 0;
	while (off + 4 <= len) {
		char hex[5];
		memcpy(hex, p + off, 4);
		hex[4] = '\0';
		size_t n = 0;
		for (int i = 0; i < 4; i++) {
			char c = hex[i];
			n = n * 16 + (size_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
		}
		if (n == 0)
			return true;
		const char *line = p + off + 4, *end = p + off + n;
		const char *nul = memchr(line, '\0', (size_t)(end - line));
		if (nul)
			end = nul;
		if (end > line && end[-1] == '\n')
			end--;
		size_t ll = (size_t)(end - line);
		if (!(ll >= 8 && memcmp(line, "shallow ", 8) == 0)) {
			const char *sp = memchr(line, ' ', ll);
			sp = sp ? memchr(sp + 1, ' ', (size_t)(end - sp - 1)) : NULL;
			if (!sp)
				return false;
			const char *ref = sp + 1;
			size_t rl = (size_t)(end - ref);
			if (rl <= 19 || memcmp(ref, "refs/heads/airlock/", 19) != 0)
				return false;
		}
		off += n;
	}
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	const char *why = NULL;
	int whole = gw_github_push_check(p, size, true, "airlock/", &why);
	check(whole == 1 || (whole == -1 && why));
	if (whole == 1)
		check(oracle_all_under_prefix(p, size));
	/* Read in two looks: a verdict given on a prefix stands. */
	for (size_t cut = 0; cut <= size; cut += 1 + size / 7) {
		int part = gw_github_push_check(p, cut, false, "airlock/", &why);
		check(part >= -1 && part <= 1);
		if (part == 1)
			check(whole == 1);
		if (part == -1 && size < GW_GITHUB_PUSH_HEAD_MAX)
			check(whole == -1);
	}
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's state file, which `airlock sandbox` reads back as root to find
 * the processes, uid range and cgroups to act on: any bytes, no crash; what
 * is accepted keeps the range and cgroup invariants, and writing it out and
 * reading it again gives the same text (nothing is lost or invented).
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "sandbox/internal.h"

#define ID "0123456789abcdef"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size >= SBX_STATE_FILE_MAX)
		return 0;
	const struct sbx_settings set = { .uid_base = 0x10000000u, .uid_slots = 64 };
	char *text = malloc(size + 1);
	check(text);
	memcpy(text, data, size);
	struct sbx_state st;
	int r = sbx_state_parse(&set, ID, text, size, &st);
	free(text);
	if (r < 0) {
		check(r == -EBADMSG);
		return 0;
	}
	check(strcmp(st.id, ID) == 0);
	check(st.init_pid > 0);
	check(st.slot < set.uid_slots && st.uid == set.uid_base + st.slot * SBX_RANGE);
	for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++) {
		if (!st.cg.present[i])
			continue;
		size_t n = strlen(st.cg.path[i]);
		check(strncmp(st.cg.path[i], "/sys/fs/cgroup/", 15) == 0);
		check(!strstr(st.cg.path[i], "/.."));
		check(n > SBX_ID_LEN && strcmp(st.cg.path[i] + n - SBX_ID_LEN, ID) == 0);
	}

	/* The parser writes into its text: it gets a copy. */
	static char out1[SBX_STATE_FILE_MAX + 1], copy[SBX_STATE_FILE_MAX + 1],
		out2[SBX_STATE_FILE_MAX + 1];
	int n1 = sbx_state_format(&st, out1, sizeof(out1));
	check(n1 > 0);
	memcpy(copy, out1, (size_t)n1);
	struct sbx_state again;
	check(sbx_state_parse(&set, ID, copy, (size_t)n1, &again) == 0);
	int n2 = sbx_state_format(&again, out2, sizeof(out2));
	check(n2 == n1 && memcmp(out1, out2, (size_t)n1) == 0);
	return 0;
}

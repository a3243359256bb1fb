/* SPDX-License-Identifier: Apache-2.0 */
/* The process-wide settings (sandbox.h): defaults and the environment. */
#include <errno.h>
#include <stdlib.h>

#include "common/parse.h"
#include "sandbox/internal.h"

void sbx_settings_default(struct sbx_settings *s)
{
	s->state_dir = "/var/lib/airlock/sandboxes";
	s->cgroup_parent = "airlock";
	s->uid_base = SBX_DEFAULT_UID_BASE;
	s->uid_slots = SBX_DEFAULT_UID_SLOTS;
}

int sbx_settings_from_env(struct sbx_settings *s, struct al_error *err)
{
	const char *v = getenv("AIRLOCK_STATE_DIR");
	if (v && *v) {
		if (v[0] != '/')
			return al_error_set(err, -EINVAL,
					    "AIRLOCK_STATE_DIR must be an absolute path");
		s->state_dir = v;
	}
	v = getenv("AIRLOCK_CGROUP_PARENT");
	if (v && *v)
		s->cgroup_parent = v;
	v = getenv("AIRLOCK_UID_BASE");
	if (v && *v) {
		uint64_t base;
		if (parse_u64_dec_hex(v, &base) < 0 || base < 65536 || base > 0x7fffffffu ||
		    base + (uint64_t)s->uid_slots * SBX_RANGE > 0x7fffffffu)
			return al_error_set(err, -EINVAL,
					    "AIRLOCK_UID_BASE must be a uid (decimal, or hex as "
					    "0x60000000) from 65536 leaving room for %u ranges of "
					    "65536 below 2^31, not '%.32s'",
					    s->uid_slots, v);
		s->uid_base = (uint32_t)base;
	}
	return 0;
}

void sbx_settings_uids(const struct sbx_settings *s, uint32_t *ret_first, uint32_t *ret_end)
{
	*ret_first = s->uid_base;
	*ret_end = s->uid_base + s->uid_slots * SBX_RANGE;
}

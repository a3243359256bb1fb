/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock's process-wide settings: the sandboxes' (state directory, cgroup
 * parent, uid ranges) and the gateway's uid, which must not be one of the
 * sandboxes' uids: a sandbox's process would share it. Whoever starts
 * sandboxes or a gateway reads them through here.
 */
#pragma once

#include <stdint.h>

#include "common/error.h"
#include "sandbox/sandbox.h"

/* From the environment (sbx_settings_from_env, gw_uid_from_env); -EINVAL
 * with a message for a bad value or a gateway uid inside the ranges. */
int ctl_settings_from_env(struct sbx_settings *set, uint32_t *ret_gw_uid, struct al_error *err);

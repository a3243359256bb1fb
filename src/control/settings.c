/* SPDX-License-Identifier: Apache-2.0 */
#include "control/settings.h"
#include "gateway/gateway.h"

int ctl_settings_from_env(struct sbx_settings *set, uint32_t *ret_gw_uid, struct al_error *err)
{
	struct sbx_settings s;
	sbx_settings_default(&s);
	int r = sbx_settings_from_env(&s, err);
	if (r < 0)
		return r;
	uint32_t uid, first, end;
	r = gw_uid_from_env(&uid, err);
	if (r < 0)
		return r;
	sbx_settings_uids(&s, &first, &end);
	r = gw_uid_check(uid, first, end, err);
	if (r < 0)
		return r;
	*set = s;
	*ret_gw_uid = uid;
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's egress budget: the arithmetic and its frames (budget.h). */
#include <errno.h>

#include "gateway/budget.h"

void gw_budget_set(struct gw_budget *b, uint64_t max_requests, uint64_t max_bytes)
{
	*b = (struct gw_budget){ .max_requests = max_requests, .max_bytes = max_bytes };
}

uint64_t gw_budget_room(const struct gw_budget *b)
{
	if (!b->max_bytes)
		return UINT64_MAX;
	return b->bytes < b->max_bytes ? b->max_bytes - b->bytes : 0;
}

int gw_budget_admit(struct gw_budget *b, uint64_t head_len)
{
	if (b->max_requests && b->requests >= b->max_requests)
		return -EDQUOT;
	if (b->max_bytes && (gw_budget_room(b) == 0 || head_len > gw_budget_room(b)))
		return -ENOSPC;
	b->requests++;
	gw_budget_count(b, head_len);
	return 0;
}

void gw_budget_count(struct gw_budget *b, uint64_t n)
{
	/* Saturating: unlimited budgets count too, and never wrap. */
	b->bytes = n <= UINT64_MAX - b->bytes ? b->bytes + n : UINT64_MAX;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

void gw_budget_encode(uint64_t a, uint64_t b, uint8_t out[GW_BUDGET_FRAME_LEN])
{
	put_le64(out, a);
	put_le64(out + 8, b);
}

int gw_budget_decode(const uint8_t *p, size_t len, uint64_t *ret_a, uint64_t *ret_b)
{
	if (!p || len != GW_BUDGET_FRAME_LEN)
		return -EBADMSG;
	*ret_a = get_le64(p);
	*ret_b = get_le64(p + 8);
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's egress budget: how many requests, and how many bytes, the
 * gateway relays for it until root sets the budget again (the control
 * plane does at every agent turn: "egress per turn"). The arithmetic is
 * here, pure; where the engine counts is in docs/gateway.md ("Egress
 * budget") and engine.h.
 *
 * The budget is never passed: a request is admitted only while the
 * requests spent are under max_requests and its head fits in the bytes
 * left; a body or a tunnel moves only as many bytes as are left, and the
 * connection that has more to move is cut.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gw_budget {
	uint64_t max_requests, max_bytes; /* 0: unlimited */
	uint64_t requests, bytes;	  /* spent since it was set */
};

/* Sets the limits and starts counting from zero. */
void gw_budget_set(struct gw_budget *b, uint64_t max_requests, uint64_t max_bytes);

/*
 * Admits one request whose head (as the gateway sends it upstream) is
 * head_len bytes: counts both and returns 0; or -EDQUOT when the requests
 * are spent, -ENOSPC when the head does not fit in the bytes left (nothing
 * counted then).
 */
int gw_budget_admit(struct gw_budget *b, uint64_t head_len);

/* The bytes left (UINT64_MAX when unlimited). */
uint64_t gw_budget_room(const struct gw_budget *b);

/* Counts n bytes relayed (the caller moved at most gw_budget_room). */
void gw_budget_count(struct gw_budget *b, uint64_t n);

/*
 * The frames on a sandbox's control socket (GW_IPC_BUDGET and
 * GW_IPC_BUDGET_SET): two unsigned 64-bit numbers, little-endian. The
 * request carries max_requests and max_bytes; the answer what the budget
 * it replaced had spent (requests, bytes).
 */
#define GW_BUDGET_FRAME_LEN 16
void gw_budget_encode(uint64_t a, uint64_t b, uint8_t out[GW_BUDGET_FRAME_LEN]);
/* -EBADMSG unless len is GW_BUDGET_FRAME_LEN. */
int gw_budget_decode(const uint8_t *p, size_t len, uint64_t *ret_a, uint64_t *ret_b);

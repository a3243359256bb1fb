/* SPDX-License-Identifier: Apache-2.0 */
/* The egress budget's arithmetic (never passed, counts exact, reset on
 * set) and its control frames. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>

#include "gateway/budget.h"

static void test_unlimited(void **state)
{
	struct gw_budget b;
	gw_budget_set(&b, 0, 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(gw_budget_admit(&b, 100), 0);
	assert_true(gw_budget_room(&b) == UINT64_MAX);
	assert_true(b.requests == 1000 && b.bytes == 100000);
	/* Counting saturates instead of wrapping. */
	gw_budget_count(&b, UINT64_MAX);
	assert_true(b.bytes == UINT64_MAX);
	assert_int_equal(gw_budget_admit(&b, 1), 0);
}

static void test_requests(void **state)
{
	struct gw_budget b;
	gw_budget_set(&b, 3, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(gw_budget_admit(&b, 10), 0);
	assert_int_equal(gw_budget_admit(&b, 10), -EDQUOT);
	assert_int_equal(gw_budget_admit(&b, 0), -EDQUOT);
	/* A refusal counts nothing. */
	assert_true(b.requests == 3 && b.bytes == 30);
	/* A new budget counts from zero. */
	gw_budget_set(&b, 1, 0);
	assert_true(b.requests == 0 && b.bytes == 0);
	assert_int_equal(gw_budget_admit(&b, 10), 0);
	assert_int_equal(gw_budget_admit(&b, 10), -EDQUOT);
}

static void test_bytes(void **state)
{
	struct gw_budget b;
	gw_budget_set(&b, 0, 100);
	assert_true(gw_budget_room(&b) == 100);
	/* A head goes whole or not at all. */
	assert_int_equal(gw_budget_admit(&b, 101), -ENOSPC);
	assert_true(b.requests == 0 && b.bytes == 0);
	assert_int_equal(gw_budget_admit(&b, 60), 0);
	assert_true(gw_budget_room(&b) == 40);
	gw_budget_count(&b, 40);
	assert_true(gw_budget_room(&b) == 0);
	/* Spent: even an empty head is refused. */
	assert_int_equal(gw_budget_admit(&b, 0), -ENOSPC);
	assert_true(b.requests == 1 && b.bytes == 100);
	/* Exactly the room fits. */
	gw_budget_set(&b, 2, 50);
	assert_int_equal(gw_budget_admit(&b, 50), 0);
	assert_int_equal(gw_budget_admit(&b, 0), -ENOSPC);
	/* Requests are checked first. */
	gw_budget_set(&b, 1, 10);
	assert_int_equal(gw_budget_admit(&b, 1), 0);
	assert_int_equal(gw_budget_admit(&b, 1), -EDQUOT);
}

static void test_frames(void **state)
{
	uint8_t f[GW_BUDGET_FRAME_LEN];
	gw_budget_encode(3, UINT64_MAX - 1, f);
	/* Little-endian, whatever the host. */
	assert_int_equal(f[0], 3);
	assert_int_equal(f[1], 0);
	assert_int_equal(f[8], 0xfe);
	assert_int_equal(f[15], 0xff);
	uint64_t a = 7, b = 7;
	assert_int_equal(gw_budget_decode(f, sizeof(f), &a, &b), 0);
	assert_true(a == 3 && b == UINT64_MAX - 1);
	/* Any other length is refused, and nothing written. */
	a = b = 7;
	assert_int_equal(gw_budget_decode(f, sizeof(f) - 1, &a, &b), -EBADMSG);
	assert_int_equal(gw_budget_decode(f, 0, &a, &b), -EBADMSG);
	assert_int_equal(gw_budget_decode(NULL, 16, &a, &b), -EBADMSG);
	assert_true(a == 7 && b == 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unlimited),
		cmocka_unit_test(test_requests),
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_frames),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

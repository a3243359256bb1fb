/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cgroup knobs each limit turns into, on v2 and on v1. (The
 * integration tests apply them on whichever hierarchy the host has; this
 * pins down the other one too.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "sandbox/internal.h"

static const struct sbx_cgroup_knob *find(const struct sbx_cgroup_knob *k, int n, const char *file)
{
	for (int i = 0; i < n; i++)
		if (strcmp(k[i].file, file) == 0)
			return &k[i];
	return NULL;
}

static void test_v2(void **state)
{
	struct sbx_spec spec = { .memory_bytes = 512ULL << 20, .pids = 64, .cpus = 1.5 };
	struct sbx_cgroup_knob k[8];
	int n = sbx_cgroup_limits(&spec, true, k, 8);
	assert_int_equal(n, 4);
	const struct sbx_cgroup_knob *m = find(k, n, "memory.max");
	assert_non_null(m);
	assert_string_equal(m->value, "536870912");
	assert_int_equal(m->controller, 0);
	assert_false(m->optional);
	m = find(k, n, "memory.swap.max");
	assert_non_null(m);
	assert_string_equal(m->value, "0");
	assert_true(m->optional);
	m = find(k, n, "pids.max");
	assert_non_null(m);
	assert_string_equal(m->value, "64");
	assert_int_equal(m->controller, 1);
	m = find(k, n, "cpu.max");
	assert_non_null(m);
	assert_string_equal(m->value, "150000 100000");
	assert_int_equal(m->controller, 2);
	assert_null(find(k, n, "memory.limit_in_bytes"));
}

static void test_v1(void **state)
{
	struct sbx_spec spec = { .memory_bytes = 64ULL << 20, .pids = 10, .cpus = 0.25 };
	struct sbx_cgroup_knob k[8];
	int n = sbx_cgroup_limits(&spec, false, k, 8);
	assert_int_equal(n, 5);
	assert_string_equal(find(k, n, "memory.limit_in_bytes")->value, "67108864");
	assert_string_equal(find(k, n, "memory.memsw.limit_in_bytes")->value, "67108864");
	assert_true(find(k, n, "memory.memsw.limit_in_bytes")->optional);
	assert_string_equal(find(k, n, "pids.max")->value, "10");
	assert_string_equal(find(k, n, "cpu.cfs_period_us")->value, "100000");
	assert_string_equal(find(k, n, "cpu.cfs_quota_us")->value, "25000");
	assert_null(find(k, n, "cpu.max"));
}

static void test_no_limits_and_floor(void **state)
{
	struct sbx_spec none = { 0 };
	struct sbx_cgroup_knob k[8];
	assert_int_equal(sbx_cgroup_limits(&none, true, k, 8), 0);
	/* A tiny CPU share still gets the kernel's minimum quota, never 0
	 * (which v1 would read as "no quota"). */
	struct sbx_spec tiny = { .cpus = 0.001 };
	int n = sbx_cgroup_limits(&tiny, false, k, 8);
	assert_string_equal(find(k, n, "cpu.cfs_quota_us")->value, "1000");
	/* Too little room is an error, not a silent cut. */
	struct sbx_spec all = { .memory_bytes = 1 << 30, .pids = 5, .cpus = 1 };
	assert_int_equal(sbx_cgroup_limits(&all, false, k, 2), -ENOBUFS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_v2),
		cmocka_unit_test(test_v1),
		cmocka_unit_test(test_no_limits_and_floor),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

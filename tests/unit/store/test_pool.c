/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker pool of snapshots and restores (src/store/pool.c): every job
 * runs once, on some worker; the first error stops the rest and is the one
 * reported; jobs that never ran are dropped; without threads the jobs run
 * on the submitting thread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sched.h>
#include <string.h>

#include "store/pool.h"

#define JOBS 2000
#define WORKERS 4

struct state {
	int id;
	size_t ran; /* jobs this worker ran */
	pthread_t tid;
};

struct job {
	int n;
	bool fail; /* this job fails */
	bool slow; /* waits until the pool stops (a long job seeing the flag) */
};

static int counts[JOBS];     /* runs of each job */
static int dropped[JOBS];    /* drops of each job */
static const bool *stopping; /* of the pool under test */
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

static int run(void *worker, void *job, struct al_error *err)
{
	struct state *s = worker;
	struct job *j = job;
	s->ran++;
	s->tid = pthread_self();
	pthread_mutex_lock(&count_lock);
	counts[j->n]++;
	pthread_mutex_unlock(&count_lock);
	if (j->slow) {
		while (!__atomic_load_n(stopping, __ATOMIC_RELAXED))
			sched_yield();
		return -ECANCELED;
	}
	if (j->fail)
		return al_error_set(err, -EBADMSG, "job %d failed", j->n);
	return 0;
}

static void drop(void *job)
{
	struct job *j = job;
	pthread_mutex_lock(&count_lock);
	dropped[j->n]++;
	pthread_mutex_unlock(&count_lock);
}

static const struct st_pool_ops ops = { .job_size = sizeof(struct job), .run = run, .drop = drop };

static void reset(struct state *st, void **states, size_t n)
{
	memset(counts, 0, sizeof(counts));
	memset(dropped, 0, sizeof(dropped));
	for (size_t i = 0; i < n; i++) {
		st[i] = (struct state){ .id = (int)i };
		states[i] = &st[i];
	}
}

static void test_every_job_runs_once(void **unused)
{
	(void)unused;
	struct state st[WORKERS];
	void *states[WORKERS];
	reset(st, states, WORKERS);
	struct st_pool *p = NULL;
	struct al_error err = { 0 };
	assert_int_equal(st_pool_start(&ops, states, WORKERS, 3, &p, &err), 0);
	stopping = st_pool_stopping(p);
	for (int i = 0; i < JOBS; i++) {
		struct job j = { .n = i };
		assert_int_equal(st_pool_submit(p, &j), 0);
	}
	assert_int_equal(st_pool_finish(p, 0, &err), 0);
	size_t total = 0;
	for (int i = 0; i < WORKERS; i++)
		total += st[i].ran;
	assert_int_equal(total, JOBS);
	for (int i = 0; i < JOBS; i++) {
		assert_int_equal(counts[i], 1);
		assert_int_equal(dropped[i], 0);
	}
}

static void test_first_error_stops_and_is_reported(void **unused)
{
	(void)unused;
	struct state st[WORKERS];
	void *states[WORKERS];
	reset(st, states, WORKERS);
	struct st_pool *p = NULL;
	struct al_error err = { 0 };
	assert_int_equal(st_pool_start(&ops, states, WORKERS, 2, &p, &err), 0);
	stopping = st_pool_stopping(p);
	for (int i = 0; i < JOBS; i++) {
		struct job j = { .n = i, .fail = i == 10, .slow = i == 5 };
		int rc = st_pool_submit(p, &j);
		assert_true(rc == 0 || rc == -ECANCELED);
	}
	assert_int_equal(st_pool_finish(p, -ECANCELED, &err), -EBADMSG);
	assert_string_equal(err.msg, "job 10 failed");
	/* Every job either ran or was dropped, never both, never twice. */
	for (int i = 0; i < JOBS; i++)
		assert_int_equal(counts[i] + dropped[i], 1);
	assert_int_equal(counts[10], 1);
}

static void test_submitter_error_wins(void **unused)
{
	(void)unused;
	struct state st[WORKERS];
	void *states[WORKERS];
	reset(st, states, WORKERS);
	struct st_pool *p = NULL;
	struct al_error err = { 0 };
	assert_int_equal(st_pool_start(&ops, states, WORKERS, 4, &p, &err), 0);
	stopping = st_pool_stopping(p);
	for (int i = 0; i < 20; i++) {
		struct job j = { .n = i };
		assert_int_equal(st_pool_submit(p, &j), 0);
	}
	int rc = al_error_set(&err, -ENOSPC, "the walk failed");
	assert_int_equal(st_pool_finish(p, rc, &err), -ENOSPC);
	assert_string_equal(err.msg, "the walk failed");
	for (int i = 0; i < 20; i++)
		assert_int_equal(counts[i] + dropped[i], 1);
}

static void test_without_threads_jobs_run_here(void **unused)
{
	(void)unused;
	struct state st[1];
	void *states[1];
	reset(st, states, 1);
	struct st_pool *p = NULL;
	struct al_error err = { 0 };
	assert_int_equal(st_pool_start(&ops, states, 0, 1, &p, &err), 0);
	stopping = st_pool_stopping(p);
	for (int i = 0; i < 100; i++) {
		struct job j = { .n = i };
		assert_int_equal(st_pool_submit(p, &j), 0);
		/* Ran already, on this thread, in order. */
		assert_int_equal(counts[i], 1);
		assert_true(pthread_equal(st[0].tid, pthread_self()));
	}
	struct job bad = { .n = 100, .fail = true };
	assert_int_equal(st_pool_submit(p, &bad), -ECANCELED);
	struct job after = { .n = 101 };
	assert_int_equal(st_pool_submit(p, &after), -ECANCELED);
	assert_int_equal(dropped[101], 1);
	assert_int_equal(counts[101], 0);
	assert_int_equal(st_pool_finish(p, -ECANCELED, &err), -EBADMSG);
	assert_string_equal(err.msg, "job 100 failed");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_job_runs_once),
		cmocka_unit_test(test_first_error_stops_and_is_reported),
		cmocka_unit_test(test_submitter_error_wins),
		cmocka_unit_test(test_without_threads_jobs_run_here),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

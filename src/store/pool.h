/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker pool of snapshots and restores: one thread hands out jobs
 * (a snapshot's walk, a restore's list of files), workers run them.
 *
 * Jobs are fixed-size records copied into a bounded queue, so memory and
 * whatever a job holds (open descriptors) stay bounded: st_pool_submit
 * waits for room. Each worker has its own state (the caller's: an array
 * of n_workers pointers), so results need no lock; the caller collects
 * them from the states once st_pool_finish has joined the threads. The
 * first error, a worker's or the submitter's, stops everything and is the
 * one reported.
 *
 * With no worker thread (n_threads 0, or none could be started) the pool
 * runs each job on the submitting thread, with worker state 0: the same
 * code path, no thread.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

struct st_pool_ops {
	size_t job_size; /* bytes of one job record */
	/* Runs a job on a worker: 0, or -errno with err set; -ECANCELED
	 * (st_pool_stopping seen) ends the worker quietly. */
	int (*run)(void *worker, void *job, struct al_error *err);
	/* Releases a job that will not run (after a failure); may be NULL. */
	void (*drop)(void *job);
};

struct st_pool;

/*
 * Starts n_threads workers (0: none, jobs run on the submitting thread)
 * with the states workers[0 .. max(n_threads, 1)). queue: jobs that may
 * wait (at least 1). The states must outlive the pool.
 */
int st_pool_start(const struct st_pool_ops *ops, void *const *workers, size_t n_threads,
		  size_t queue, struct st_pool **ret, struct al_error *err);

/*
 * Queues a copy of job, waiting for room (or runs it, without threads).
 * After a failure, the job is dropped and -ECANCELED returned: the error
 * st_pool_finish reports is the first one.
 */
int st_pool_submit(struct st_pool *p, const void *job);

/* Set once anything failed: a long job may look and give up early. */
const bool *st_pool_stopping(const struct st_pool *p);

/*
 * Waits for the workers and frees the pool (accepts NULL: returns rc).
 * rc: the submitter's result (its error already in err). Returns the
 * first error of all, with its message in err.
 */
int st_pool_finish(struct st_pool *p, int rc, struct al_error *err);

/* SPDX-License-Identifier: Apache-2.0 */
/* The worker pool of snapshots and restores (pool.h). */
#include "store/pool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct pool_thread {
	struct st_pool *p;
	void *state;
	pthread_t tid;
};

struct st_pool {
	const struct st_pool_ops *ops;
	void *inline_state;   /* without threads: jobs run here */
	pthread_mutex_t lock; /* the queue, done, failed, err */
	pthread_cond_t more, room;
	unsigned char *ring; /* cap records of ops->job_size */
	size_t cap, head, n;
	bool done;	     /* no more jobs will come */
	bool failed;	     /* also read without the lock (atomically) to stop early */
	struct al_error err; /* the first error */
	struct pool_thread *threads;
	size_t n_threads; /* started */
};

static void *slot(struct st_pool *p, size_t i)
{
	return p->ring + (i % p->cap) * p->ops->job_size;
}

static void drop(struct st_pool *p, void *job)
{
	if (p->ops->drop)
		p->ops->drop(job);
}

/* Records the first error; the others are consequences. */
static void fail_locked(struct st_pool *p, const struct al_error *e, int rc)
{
	if (p->failed)
		return;
	__atomic_store_n(&p->failed, true, __ATOMIC_RELAXED);
	al_error_set(&p->err, rc, "%s", al_error_message(e));
	pthread_cond_broadcast(&p->room);
	pthread_cond_broadcast(&p->more);
}

static void *thread_main(void *arg)
{
	struct pool_thread *t = arg;
	struct st_pool *p = t->p;
	/* A copy of the job: the ring slot is reused as soon as it is taken. */
	void *job = malloc(p->ops->job_size);
	pthread_mutex_lock(&p->lock);
	if (!job) {
		struct al_error e = { 0 };
		al_error_set(&e, -ENOMEM, "out of memory");
		fail_locked(p, &e, -ENOMEM);
	}
	while (job) {
		while (!p->failed && !p->done && p->n == 0)
			pthread_cond_wait(&p->more, &p->lock);
		if (p->failed || p->n == 0)
			break;
		memcpy(job, slot(p, p->head), p->ops->job_size);
		p->head = (p->head + 1) % p->cap;
		p->n--;
		pthread_cond_signal(&p->room);
		pthread_mutex_unlock(&p->lock);

		struct al_error e = { 0 };
		int rc = p->ops->run(t->state, job, &e);

		pthread_mutex_lock(&p->lock);
		if (rc < 0) {
			if (rc != -ECANCELED)
				fail_locked(p, &e, rc);
			break;
		}
	}
	pthread_mutex_unlock(&p->lock);
	free(job);
	return NULL;
}

static void pool_free(struct st_pool *p)
{
	pthread_cond_destroy(&p->more);
	pthread_cond_destroy(&p->room);
	pthread_mutex_destroy(&p->lock);
	free(p->threads);
	free(p->ring);
	free(p);
}

int st_pool_start(const struct st_pool_ops *ops, void *const *workers, size_t n_threads,
		  size_t queue, struct st_pool **ret, struct al_error *err)
{
	if (!ops || !ops->run || ops->job_size == 0 || queue == 0 || !workers)
		return al_error_set(err, -EINVAL, "worker pool: bad arguments");
	struct st_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return al_error_set(err, -ENOMEM, "out of memory");
	p->ops = ops;
	p->cap = queue;
	p->inline_state = workers[0];
	if (queue > SIZE_MAX / ops->job_size || !(p->ring = calloc(queue, ops->job_size)) ||
	    (n_threads && !(p->threads = calloc(n_threads, sizeof(*p->threads))))) {
		free(p->ring);
		free(p);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->more, NULL);
	pthread_cond_init(&p->room, NULL);
	/* Signals are the main thread's business. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (size_t i = 0; i < n_threads; i++) {
		struct pool_thread *t = &p->threads[p->n_threads];
		t->p = p;
		t->state = workers[i];
		/* Fewer threads than asked (a limit on threads) is still correct;
		 * none at all runs the jobs on the caller's thread. */
		if (pthread_create(&t->tid, NULL, thread_main, t) != 0)
			break;
		p->n_threads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	*ret = p;
	return 0;
}

const bool *st_pool_stopping(const struct st_pool *p)
{
	return &p->failed;
}

int st_pool_submit(struct st_pool *p, const void *job)
{
	if (p->n_threads == 0) {
		if (p->failed) {
			drop(p, (void *)job);
			return -ECANCELED;
		}
		struct al_error e = { 0 };
		int rc = p->ops->run(p->inline_state, (void *)job, &e);
		if (rc < 0 && rc != -ECANCELED)
			fail_locked(p, &e, rc);
		return rc < 0 ? -ECANCELED : 0;
	}
	pthread_mutex_lock(&p->lock);
	while (!p->failed && p->n == p->cap)
		pthread_cond_wait(&p->room, &p->lock);
	if (p->failed) {
		pthread_mutex_unlock(&p->lock);
		drop(p, (void *)job);
		return -ECANCELED; /* the worker's error is the one reported */
	}
	memcpy(slot(p, p->head + p->n), job, p->ops->job_size);
	p->n++;
	pthread_cond_signal(&p->more);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int st_pool_finish(struct st_pool *p, int rc, struct al_error *err)
{
	if (!p)
		return rc;
	pthread_mutex_lock(&p->lock);
	bool submitter_first = rc < 0 && !p->failed;
	if (submitter_first)
		__atomic_store_n(&p->failed, true, __ATOMIC_RELAXED);
	p->done = true;
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->lock);
	for (size_t i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i].tid, NULL);
	/* Jobs nobody took (after a failure). */
	for (; p->n > 0; p->n--, p->head = (p->head + 1) % p->cap)
		drop(p, slot(p, p->head));
	if (p->failed && !submitter_first)
		rc = al_error_set(err, p->err.code, "%s", al_error_message(&p->err));
	pool_free(p);
	return rc;
}

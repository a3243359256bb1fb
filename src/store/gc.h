/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention and garbage collection of one tenant's checkpoints.
 *
 * Retention, per session: of the checkpoints its log lists (oldest first),
 * those beyond the last keep_last, or created more than keep_days ago, are
 * deleted; the session's latest never is. Deleting a checkpoint deletes its
 * log entry and then, when no other log entry or session's latest names
 * the same id, its manifest.
 *
 * Then mark and sweep: every chunk of every remaining manifest is marked
 * (one that does not load stops GC before anything is deleted: it never
 * sweeps on incomplete marks); a pack none of whose chunks is marked is
 * deleted, its index first, so a crash in between leaves a pack without an
 * index (garbage for the next GC), never an index naming a missing pack. A
 * pack with some marked chunks is kept whole (repacking is future work).
 * Packs without an index (left by a crash between the two writes of a
 * seal) and temp files older than an hour are deleted too. Manifests no log
 * names (a crash between the manifest and its log entry) are kept, and
 * their chunks with them.
 *
 * GC holds the store's lock exclusive throughout (st_objstore_lock), and
 * writers hold it shared, so nothing a snapshot in flight stored is
 * collected; GC waits for running snapshots, and new ones wait for it.
 * Afterwards the repository's chunk index is stale: close it.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "store/checkpoint.h"

#define ST_GC_TEMP_AGE_SEC 3600

struct st_gc_opts {
	unsigned keep_last; /* checkpoints kept per session; 0: all */
	unsigned keep_days; /* checkpoints younger than this kept; 0: no age limit */
	int64_t now;	    /* unix seconds; 0: the clock (tests pass their own) */
	bool dry_run;	    /* count what would go; delete nothing */
	/* Rewrite partly used packs whose unreferenced bytes are more than
	 * max_unused_pct percent of them (0: any), so that their
	 * unreferenced chunks go too. */
	bool repack;
	unsigned max_unused_pct;
};

#define ST_GC_MAX_UNUSED_DEFAULT 10

struct st_gc_result {
	uint64_t sessions;
	uint64_t checkpoints_kept, checkpoints_deleted; /* log entries */
	uint64_t manifests_kept, manifests_deleted;
	uint64_t chunks_marked;
	uint64_t packs_kept, packs_partial; /* partial: kept, some chunks unreferenced */
	uint64_t packs_deleted;		    /* unreferenced packs with their indexes */
	uint64_t packs_repacked;	    /* partly used packs rewritten (their live chunks) */
	uint64_t packs_orphan;		    /* packs without an index, deleted */
	uint64_t temp_deleted;
	uint64_t bytes_freed; /* of packs and indexes (manifests and log entries not counted) */
};

/* *ret is written on success; on failure some deletions may have been made
 * (each leaves the store consistent), never before every mark is in. */
int st_gc(struct st_repo *r, const struct st_gc_opts *o, struct st_gc_result *ret,
	  struct al_error *err);

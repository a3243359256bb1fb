/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checkpoints of a workspace directory: snapshot, restore, diff, list.
 *
 * A repository is one tenant's part of an object store plus the HMAC key
 * that authenticates its manifests. A snapshot walks the workspace without
 * following symlinks, stores new chunks, then the manifest, then the
 * session's references: a crash at any step leaves the previous
 * checkpoints whole (see docs/checkpoints.md).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "store/manifest.h"
#include "store/objstore.h"

struct st_repo;

struct st_repo_opts {
	const char *store_dir; /* the directory backend's root */
	const char *tenant;
	const uint8_t *key; /* HMAC key, >= ST_HMAC_KEY_MIN bytes */
	size_t keylen;
	int level; /* zstd level; 0: 1 (fast; the store is a little larger than at 3) */
	/* For the crash tests: a snapshot or commit dies (_exit(99)) at its
	 * fault_step-th write step (docs/checkpoints.md); 0: never. */
	int fault_step;
};

int st_repo_open(const struct st_repo_opts *o, struct st_repo **ret, struct al_error *err);
/* AIRLOCK_FAULT_STEP=N from the environment, for st_repo_opts.fault_step:
 * the crash tests' kill point, as every command that writes checkpoints
 * takes it; anything but a count from 1 to 999999 is 0 (never). */
int st_fault_step_from_env(void);
void st_repo_close(struct st_repo *r);

/* Reads a key file (32..1024 bytes, owner-only), creating one with 32
 * random bytes (0600) when create is set and it does not exist. */
int st_key_load(const char *path, bool create, uint8_t **ret, size_t *ret_len,
		struct al_error *err);

struct st_snapshot_opts {
	const char *workspace;
	const char *session;
	/*
	 * A layered workspace instead (docs/checkpoints.md): upper is the
	 * upper directory of an overlayfs mount (metacopy=off,
	 * redirect_dir=off) whose lower directory was restored from checkpoint
	 * lower. Only upper is read; the checkpoint is a delta manifest over
	 * lower's base. workspace is then unused.
	 */
	const char *upper;
	const char *lower;
	/* The overlay was mounted with userxattr: its attributes are
	 * "user.overlay.*", not "trusted.overlay.*". */
	bool userxattr;
	/*
	 * A plain directory whose stat cache describes the session's latest
	 * checkpoint is stored as a delta over it by default (what differs
	 * from the cache; docs/checkpoints.md), its unchanged entries left
	 * out unread. full: the whole tree instead, as a full manifest (the
	 * previous one read for its unchanged files' chunks), e.g. so that
	 * retention can drop the checkpoints before it whole.
	 */
	bool full;
	/* Called for every entry left out (devices, fifos, sockets) and every
	 * mode bit dropped (setuid, setgid, sticky); may be NULL. */
	void (*report)(const char *path, const char *what, void *ud);
	void *ud;
	/*
	 * The caps of a restore (NULL: its defaults), held before anything is
	 * read: a tree of more entries, or deeper, or whose files' sizes add
	 * up to more bytes (holes count: a sparse file is cheap to snapshot
	 * but may not be to restore where holes are not kept), is refused
	 * and nothing committed. Entries and depth are at most the defaults.
	 */
	const struct st_manifest_limits *limits;
	/* Threads that read, hash and compress files while this one walks:
	 * 0 for st_threads(); 1 for none (this thread does it all); at most
	 * ST_THREADS_MAX. The checkpoint is the same whatever the number. */
	unsigned threads;
};

struct st_snapshot_result {
	char id[ST_ID_HEX + 1];
	uint64_t files, dirs, symlinks, skipped;
	uint64_t bytes;			/* sum of file sizes */
	uint64_t files_read;		/* files whose bytes were read */
	uint64_t files_reused;		/* files taken from the previous checkpoint unread */
	uint64_t chunks_new, bytes_new; /* stored by this snapshot (compressed) */
};

/* Snapshots opts->workspace as the next checkpoint of opts->session. */
int st_snapshot(struct st_repo *r, const struct st_snapshot_opts *o, struct st_snapshot_result *ret,
		struct al_error *err);

/*
 * Stores entries (paths and fields as in a manifest; chunks already in the
 * repository's chunk store, st_repo_cas) as the session's next checkpoint,
 * e.g. from an imported archive. Sorts entries in place; refuses what a
 * manifest could not hold. The session's stat cache is dropped.
 */
int st_commit(struct st_repo *r, const char *session, struct st_entry *entries, size_t n,
	      char out_id[ST_ID_HEX + 1], struct al_error *err);

/* The repository's chunk store (for importers). */
struct st_cas *st_repo_cas(struct st_repo *r);
/* Its object store and tenant (for GC, store/gc.h). */
struct st_objstore *st_repo_objstore(struct st_repo *r);
const char *st_repo_tenant(const struct st_repo *r);

/*
 * Takes the store's lock shared for a writer (st_objstore_lock) and, when
 * this repository has stored no chunk yet, rereads its chunk index: a GC
 * since it was read may have removed packs, and a chunk deduplicated
 * against one of them would be lost. st_snapshot and st_commit take it
 * themselves; an importer takes it before its first st_cas_put and closes
 * *ret_fd after st_commit, so that GC collects none of its chunks.
 */
int st_repo_lock_writer(struct st_repo *r, int *ret_fd, struct al_error *err);

/* Threads a snapshot or restore uses by default: $AIRLOCK_STORE_THREADS
 * (1 to ST_THREADS_MAX; for comparisons and small machines) or one per
 * online CPU (at most ST_THREADS_DEFAULT_MAX). */
#define ST_THREADS_MAX 256
#define ST_THREADS_DEFAULT_MAX 32
int st_threads(unsigned *ret, struct al_error *err);

/* Restores checkpoint id into dir (created if absent; must be empty). On
 * failure dir is left empty (what was written is removed). */
int st_restore(struct st_repo *r, const char *id, const char *dir,
	       const struct st_manifest_limits *limits, struct al_error *err);

struct st_restore_opts {
	const struct st_manifest_limits *limits; /* NULL: the defaults */
	/*
	 * Every entry the restore makes, and dir itself, belongs to uid:gid
	 * (neither may be (uint32_t)-1) instead of the caller; modes and times
	 * are the checkpoint's all the same. Each is changed through a
	 * descriptor of what was just made, never by a path that could follow a
	 * link, and dir last, once all went well: a failed restore leaves it
	 * empty and as it was.
	 */
	bool chown;
	uint32_t uid, gid;
	/* The target is dir_fd (an empty directory, open O_RDONLY |
	 * O_DIRECTORY), not looked up again; dir only names it in messages. */
	bool at_fd;
	int dir_fd;
};

/* st_restore with options (NULL: st_restore's). */
int st_restore_with(struct st_repo *r, const char *id, const char *dir,
		    const struct st_restore_opts *o, struct al_error *err);

/* Loads and checks a checkpoint's manifest. */
int st_manifest_load(struct st_repo *r, const char *id, const struct st_manifest_limits *limits,
		     struct st_manifest **ret, struct al_error *err);

/*
 * The checkpoint id a user typed: 64 hex digits as they are, or a unique
 * prefix of at least 4 of them (the tenant's manifests are listed); -ENOENT
 * when none matches, -EINVAL when it is no id or matches several.
 */
int st_checkpoint_resolve(struct st_repo *r, const char *typed, char out[ST_ID_HEX + 1],
			  struct al_error *err);

/* The checkpoints of a session, oldest first: fn gets each one's id and
 * when it was committed (unix ns); fn returning < 0 stops with that. */
int st_session_log(struct st_repo *r, const char *session,
		   int (*fn)(const char *id, int64_t when_ns, void *ud), void *ud,
		   struct al_error *err);

/* The latest checkpoint of a session ("" when none). */
int st_session_latest(struct st_repo *r, const char *session, char out[ST_ID_HEX + 1],
		      struct al_error *err);
/* Makes checkpoint id (this repository's) the session's starting point:
 * a log entry and its latest, as a commit writes them, so that GC keeps
 * it for this session whatever becomes of the one that made it. */
int st_session_adopt(struct st_repo *r, const char *session, const char *id, struct al_error *err);
/* Deletes every reference the session has (log, latest, stat cache); GC
 * then collects what no other session refers to. */
int st_session_delete(struct st_repo *r, const char *session, struct al_error *err);

/* Appends "A path", "D path", "M path" lines (and unified diffs of changed
 * text files when with_text) for checkpoint a -> b. */
int st_diff(struct st_repo *r, const char *a, const char *b, bool with_text, struct buf *out,
	    struct al_error *err);
/* The same comparison, entry by entry: fn gets 'A' (eb alone), 'D' (ea
 * alone) or 'M' (both) for each entry that differs, in path order; fn
 * returning < 0 stops with that. */
int st_diff_each(struct st_repo *r, const char *a, const char *b,
		 int (*fn)(char change, const struct st_entry *ea, const struct st_entry *eb,
			   void *ud),
		 void *ud, struct al_error *err);

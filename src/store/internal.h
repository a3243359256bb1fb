/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of a repository share (repo.c, statcache.c, snapshot.c,
 * layer.c, commit.c, restore.c, diff.c). Not an interface: nothing outside
 * src/store includes it.
 *
 * Objects of a tenant T (see objstore.h for the key rules):
 *   tenants/T/packs/<pack>, tenants/T/index/<pack>  chunks (cas.c)
 *   tenants/T/manifests/<id>                        manifests (manifest.h)
 *   tenants/T/sessions/<s>/latest                   the session's last checkpoint id
 *   tenants/T/sessions/<s>/log/<created>-<id>       every checkpoint of the session
 *   tenants/T/sessions/<s>/statcache                what the last snapshot saw on disk
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "common/buf.h"
#include "common/error.h"
#include "store/cas.h"
#include "store/checkpoint.h"
#include "store/manifest.h"
#include "store/objstore.h"

#define ST_MANIFEST_OBJ_MAX (512u << 20)
#define ST_STATCACHE_MAX (512u << 20)
/* The most deltas between a checkpoint and the full manifest under it
 * (store/manifest.h): a layered snapshot over a lower checkpoint that deep
 * composes them into one delta instead of adding another. */
#define ST_CHAIN_MAX 16

struct st_repo {
	struct st_objstore *os;
	struct st_cas *cas;
	char tenant[ST_TENANT_MAX + 1];
	uint8_t *key;
	size_t keylen;
	int level;
	int fault_step; /* st_repo_opts.fault_step; 0: none */
};

/*
 * Fault injection for the crash tests (st_repo_opts.fault_step): the
 * process dies at the step-th write step of one commit. One of these per
 * commit; the repository holds only the (fixed) step.
 */
struct st_fault {
	int step; /* 0: never */
	int count;
};

static inline struct st_fault st_fault_start(const struct st_repo *r)
{
	return (struct st_fault){ .step = r->fault_step };
}

void st_fault_point(struct st_fault *f);

/* The error for a caller's path that open_no_symlinks (common/fdutil.h)
 * refused or could not open: what it is, the path, and why. */
int st_path_error(struct al_error *err, int r, const char *what, const char *path);

bool st_session_valid(const char *s);
bool st_id_valid(const char *id);
int st_session_error(const char *session, struct al_error *err);

/* Reads the chunk index of the repository's chunk store unless read
 * (st_cas_load): before a lookup or a writer thread. */
int st_repo_cas_load(struct st_repo *r, struct al_error *err);

/* "tenants/<tenant>/" + the formatted rest, into out. */
int st_repo_key(char *out, size_t size, const struct st_repo *r, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Loads and checks a manifest as it is stored: a delta's entries are its
 * changes (st_manifest_load applies them). */
int st_manifest_load_raw(struct st_repo *r, const char *id, const struct st_manifest_limits *limits,
			 struct st_manifest **ret, struct al_error *err);

/*
 * A checkpoint as a full manifest and changes over it: *ret_root is the
 * full manifest its chain of bases ends in (id's own when id is full:
 * *ret_delta is then NULL), *ret_delta id's changes over it, the chain's
 * deltas composed (its base and base_entries then the root's; base and
 * *base_entries, when base is not NULL, get id's own). Every manifest is
 * checked as stored, each delta's base entry count against its base, and
 * a chain of more than ST_CHAIN_MAX deltas is refused.
 */
int st_manifest_load_chain(struct st_repo *r, const char *id,
			   const struct st_manifest_limits *limits, struct st_manifest **ret_root,
			   struct st_manifest **ret_delta, char base[ST_ID_HEX + 1],
			   uint64_t *base_entries, struct al_error *err);

/* Binary search of an array sorted by st_path_cmp on a char * member. */
const void *st_find_path(const void *base, size_t n, size_t size, size_t path_off,
			 const char *path);
const struct st_entry *st_manifest_find(const struct st_manifest *m, const char *path);

int st_entry_cmp(const void *a, const void *b);

static inline int64_t st_ts_ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000ll + t.tv_nsec;
}

/* ---- the stat cache (statcache.c) ---- */

struct st_stat_rec {
	char *path; /* in the cache's text */
	uint64_t ino;
	int64_t ctime_ns, mtime_ns;
	uint64_t size;
	uint32_t mode; /* permission bits */
	char type;     /* 'd', 'f' or 'l' */
	char seen;     /* a plain snapshot: the type it has now, 0 when gone */
};

struct st_statcache {
	char kind; /* 'p': a plain directory's, every entry; 'l': an upper layer's files */
	uint64_t dev, root_ino;
	int64_t start_ns;
	char id[ST_ID_HEX + 1]; /* the checkpoint it describes */
	char *text;		/* what the records point into */
	struct st_stat_rec *recs;
	size_t n;
	size_t *slots; /* by path: position + 1 */
	size_t n_slots;
};

/*
 * A missing, unreadable, foreign (another tree: device and root inode) or
 * unauthentic cache is no error: it comes back empty (n 0, id ""). The
 * caller checks that id is the checkpoint it snapshots over.
 */
void st_statcache_load(struct st_repo *r, const char *session, const struct stat *root,
		       struct st_statcache *sc);
void st_statcache_free(struct st_statcache *sc);
struct st_stat_rec *st_statcache_find(const struct st_statcache *sc, const char *path);
/* The first line of a new cache (kind 'p' or 'l'), and one line per entry. */
int st_statcache_header(struct buf *b, char kind, const struct stat *root, int64_t start_ns);
int st_statcache_line(struct buf *b, char type, const struct stat *st, const char *path);
/* Its end: the checkpoint it describes, then its HMAC (by the commit). */
int st_statcache_seal(struct st_repo *r, const char *session, const char *id, struct buf *b);

/* ---- heads (head.c): a manifest's header, authenticated, on its own ---- */

struct st_head {
	char id[ST_ID_HEX + 1];
	char base[ST_ID_HEX + 1]; /* "" for a full manifest */
	uint64_t base_entries;
	char lower[ST_ID_HEX + 1]; /* "" when none */
	uint64_t entries;	   /* its "entries" line */
	uint64_t bytes;		   /* the manifest's length; 0 when not known */
};

/* Writes the head of a manifest just stored (a write step of the commit). */
int st_head_put(struct st_repo *r, struct st_fault *f, const struct st_head *h,
		struct al_error *err);
/* 1 and *ret: the head of id, authentic and this tenant's; 0: it has none
 * (a manifest from before heads, or a crash between the two writes);
 * -EBADMSG: one that is not authentic or names another checkpoint. */
int st_head_load(struct st_repo *r, const char *id, struct st_head *ret, struct al_error *err);
/* That the manifest a head names is there and at least as long (its last
 * byte read): -ENOENT when it is gone. */
int st_head_check(struct st_repo *r, const struct st_head *h, struct al_error *err);
/* The header of checkpoint id: its head, checked against the manifest's
 * presence, or when it has none the manifest's own (read and its HMAC
 * checked whole). */
int st_checkpoint_head(struct st_repo *r, const char *id, struct st_head *ret,
		       struct al_error *err);

/* The head of checkpoint id (st_checkpoint_head), how many deltas lie
 * between it and the full manifest under it (0: it is one), and at most
 * how many entries its tree has (the full manifest's and every delta's).
 * The heads of its bases are read, not their manifests. */
int st_checkpoint_chain(struct st_repo *r, const char *id, struct st_head *ret, unsigned *depth,
			uint64_t *tree_entries, struct al_error *err);

/* ---- commits (commit.c) ---- */

/* What a layered snapshot's manifest names besides its tree. */
struct st_layer_head {
	const char *base;      /* NULL: a full manifest */
	uint64_t base_entries; /* the count of entries base's manifest lists */
	uint64_t base_tree;    /* at most how many its tree has (st_checkpoint_chain) */
	const char *lower;
};

/*
 * Stores entries (sorted here) as the session's next checkpoint: chunks
 * first, then what refers to them. cache: the new stat cache, or NULL to
 * drop the session's (it would describe another tree).
 */
int st_commit_entries(struct st_repo *r, struct st_fault *f, const char *session,
		      const char *parent, const struct st_layer_head *lh, struct st_entry *entries,
		      size_t n, struct timespec now, struct buf *cache, char out_id[ST_ID_HEX + 1],
		      struct al_error *err);

/* ---- layered workspaces (layer.c) ---- */

/* The kind of an upper-layer entry: whiteout (1), plain (0), or an
 * overlayfs feature a snapshot cannot read (-errno with err set). */
int st_layer_kind(bool user, int dirfd, const char *name, const char *path, const struct stat *st,
		  struct al_error *err);
/* Whether an upper-layer directory hides what the lower one has (1), not
 * (0), or uses a feature a snapshot cannot read (-errno with err set). */
int st_layer_opaque(bool user, int fd, const char *path, struct al_error *err);

/*
 * One delta from two: lops, the changes of the lower layer's checkpoint
 * over its base (none when that checkpoint is the base), then up, what
 * the upper layer holds (sorted). Moves entries out of both (what stays
 * behind is zeroed or freed); *ret is the delta over the same base.
 */
int st_layer_compose(struct st_entry *lops, size_t nl, struct st_entry *up, size_t nu,
		     struct st_entry **ret, size_t *ret_n);

/*
 * Commits the delta *entries (sorted) over lh->base, or, when it has grown
 * large against the base or its tree could pass the entry limit, the
 * whole tree as a full manifest (applying it checks limits: nothing is
 * committed that could not be loaded under them). With a byte limit, the
 * tree's bytes are counted (the base is read) and held to it whatever is
 * stored. *entries and *n may be replaced.
 */
int st_layer_commit(struct st_repo *r, struct st_fault *f, const char *session, const char *parent,
		    const struct st_layer_head *lh, const struct st_manifest_limits *limits,
		    struct st_entry **entries, size_t *n, struct timespec now, struct buf *cache,
		    char out_id[ST_ID_HEX + 1], struct al_error *err);

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A checkpoint's manifest: the tree of a workspace (directories, regular
 * files with their chunk ids, symlinks), bound to its tenant and session
 * and authenticated with an HMAC-SHA256 under a key the control side holds.
 * The checkpoint's id is the SHA-256 (hex) of the manifest's bytes.
 *
 * Text format, one record per line, LF-terminated, nothing else allowed:
 *
 *   airlock-manifest <version>        1, or 2 when (and only when) a file
 *                                     has a hole (below)
 *   tenant <tenant>
 *   session <session>                 [a-zA-Z0-9._-]{1,64}
 *   parent <checkpoint id | ->
 *   base <checkpoint id> <entries>    only in a delta (below): its base, and
 *                                     how many entries the base has
 *   lower <checkpoint id>             a layered snapshot's lower layer
 *                                     (docs/checkpoints.md); optional
 *   created <unix seconds>
 *   entries <count>
 *   d <mode> <mtime_ns> <path>
 *   f <mode> <mtime_ns> <size> <path> <piece>[,<piece>...]   ("-" for an empty file)
 *   l <mtime_ns> <path> <target>
 *   hmac <hex of HMAC-SHA256(key, every byte before this line)>
 *
 * mode: 4 octal digits of permission bits only (no setuid, setgid or
 * sticky: 0000..0777); mtime_ns: signed decimal nanoseconds; size: decimal.
 * Numbers have no leading zeros ("0" itself aside) and no '+'; "-0" is
 * refused. A file's pieces are, in the order of its bytes, chunk ids (64
 * lower-case hex digits) and, in version 2, holes "h<length>" (length >= 1:
 * that many zero bytes that are not stored; a restore leaves them
 * unallocated). Two holes are never next to each other, and a file of size
 * s with holes of h bytes in all (h <= s) has from ceil((s - h) /
 * ST_CHUNK_MAX) to s - h chunks. A file that is all hole is "h<s>".
 * path and target: bytes 0x21..0x7e except '%' and ',' as they are, every
 * other byte as %XX (upper-case hex); no NUL (not even encoded); never
 * empty, at most ST_PATH_MAX bytes decoded.
 * Paths are relative ("a/b"), with no empty, "." or ".." segment, no
 * leading or trailing '/'; entries are sorted by path (bytewise, after
 * decoding) with no duplicates, and every path's parent directory is a
 * "d" entry listed before it (top-level entries have none). A symlink is
 * never a parent. The workspace root itself is not an entry.
 *
 * A delta manifest (one with a "base" line) lists changes to the tree of
 * its base, a checkpoint of the same tenant: a full manifest, or itself a
 * delta (a chain, at most 16 deltas deep (ST_CHAIN_MAX), ending in a full
 * manifest). The base's entry count in the "base" line is the count of
 * entries the base's manifest lists (its "entries" line). Its entries follow the same rules of paths and
 * order, except that a parent may be in the base instead, and it may hold
 * two more records:
 *   o <mode> <mtime_ns> <path>        a directory that replaces whatever the
 *                                     base has at path, subtree and all
 *   x <path>                          path and its subtree are gone
 * A "d" entry changes a directory's mode and mtime and keeps what the base
 * has below it; an "f" or "l" entry replaces whatever the base has at its
 * path, subtree and all. The tree of a delta is its base with those changes
 * applied (st_manifest_apply), and must pass every rule of a full manifest.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "store/cas.h"

#define ST_SESSION_MAX 64
#define ST_PATH_MAX 4096 /* one path, decoded */
#define ST_MANIFEST_MAX_ENTRIES_DEFAULT 1000000
#define ST_MANIFEST_MAX_DEPTH_DEFAULT 256
#define ST_HMAC_KEY_MIN 32

enum st_entry_type {
	ST_DIR = 'd',
	ST_FILE = 'f',
	ST_SYMLINK = 'l',
	ST_OPAQUE = 'o',   /* delta manifests only */
	ST_WHITEOUT = 'x', /* delta manifests only */
};

/* A hole in a file: len zero bytes, before its chunk at (0..n_chunks;
 * n_chunks: at the end). */
struct st_hole {
	size_t at;
	uint64_t len;
};

struct st_entry {
	enum st_entry_type type;
	char *path;    /* decoded, NUL-terminated */
	char *target;  /* symlinks: decoded target */
	uint32_t mode; /* permission bits */
	int64_t mtime_ns;
	uint64_t size; /* files */
	struct st_id *chunks;
	size_t n_chunks;
	struct st_hole *holes; /* files: sorted by at, no two at the same place */
	size_t n_holes;
};

struct st_manifest {
	char tenant[ST_TENANT_MAX + 1];
	char session[ST_SESSION_MAX + 1];
	char parent[ST_ID_HEX + 1]; /* "" when none */
	/* A delta's base ("" in a full manifest). After st_manifest_apply the
	 * entries are the whole tree and base still names where it came from. */
	char base[ST_ID_HEX + 1];
	uint64_t base_entries; /* a delta's: the count its base's manifest lists */
	/* The checkpoint a layered snapshot's lower directory was restored
	 * from ("" when none): GC keeps it while this one stays. */
	char lower[ST_ID_HEX + 1];
	bool applied;
	uint64_t declared; /* parsed: the count of its "entries" line */
	int64_t created;
	struct st_entry *entries;
	size_t n_entries;
};

struct st_manifest_limits {
	/* Check the HMAC and read the header, but leave the entries out
	 * (n_entries 0): whether a manifest is a delta, and of what. */
	bool header_only;
	size_t max_entries; /* 0: ST_MANIFEST_MAX_ENTRIES_DEFAULT */
	size_t max_depth;   /* path segments; 0: ST_MANIFEST_MAX_DEPTH_DEFAULT */
	uint64_t max_bytes; /* sum of file sizes; 0: no limit */
};

/*
 * Writes the manifest (entries must already be sorted and valid under the
 * default limits; -EINVAL otherwise). Fields the format does not carry for
 * a type (a symlink's mode, a directory's size) are ignored; a parsed
 * symlink has mode 0777. *ret is malloc'd text. key: the HMAC key
 * (>= ST_HMAC_KEY_MIN bytes).
 */
int st_manifest_write(const struct st_manifest *m, const uint8_t *key, size_t keylen, char **ret,
		      size_t *ret_len, struct al_error *err);

/*
 * Parses and checks a manifest: the HMAC first (-EBADMSG "not authentic"
 * before anything else is believed), then that it belongs to tenant
 * (-EACCES otherwise) and every rule above (-EBADMSG naming the line).
 * limits may be NULL (defaults).
 */
int st_manifest_parse(const char *text, size_t len, const uint8_t *key, size_t keylen,
		      const char *tenant, const struct st_manifest_limits *limits,
		      struct st_manifest **ret, struct al_error *err);

void st_manifest_free(struct st_manifest *m);
/* Frees n entries (their paths, targets and chunk ids) and the array. */
void st_entries_free(struct st_entry *entries, size_t n);
/* Appends a chunk id to a file entry; *cap: the room in e->chunks. */
int st_entry_push_chunk(struct st_entry *e, size_t *cap, const struct st_id *id);
/* Appends a hole of len bytes (>= 1) after the file's chunks so far (joined
 * to one already there); *cap: the room in e->holes. */
int st_entry_push_hole(struct st_entry *e, size_t *cap, uint64_t len);
/* Copies a file entry's chunks and holes into dst (which has none). */
int st_entry_copy_pieces(struct st_entry *dst, const struct st_entry *src);
/* The bytes of a file entry that are holes. */
uint64_t st_entry_hole_bytes(const struct st_entry *e);

/*
 * The tree of delta (a parsed delta manifest) over base (a parsed full
 * manifest whose id is delta->base, or the tree of a delta, applied):
 * base with delta's changes, checked against every rule of a full
 * manifest and limits (NULL: defaults). delta->base_entries must be the
 * count of base's entries as given.
 * Consumes base and delta, whatever the outcome. *ret has delta's header,
 * applied set and base still naming the base.
 */
int st_manifest_apply(struct st_manifest *base, struct st_manifest *delta,
		      const struct st_manifest_limits *limits, struct st_manifest **ret,
		      struct al_error *err);

/*
 * A set of paths (borrowed: they must outlive it), to ask whether one of
 * them is an ancestor of a path in time linear in that path's length.
 */
struct st_pathset;
int st_pathset_new(size_t expect, struct st_pathset **ret);
int st_pathset_add(struct st_pathset *s, const char *path);
bool st_pathset_has_ancestor(const struct st_pathset *s, const char *path);
void st_pathset_free(struct st_pathset *s); /* accepts NULL */

/* HMAC-SHA256 of data under key, in hex (the manifests' and the other
 * authenticated objects' MAC); 0 or -errno. */
int st_hmac_hex(const uint8_t *key, size_t keylen, const void *data, size_t len,
		char out[ST_ID_HEX + 1]);
/* Two hex MACs compared in constant time. */
bool st_hmac_equal(const char *a, const char *b);

/* The checkpoint id of manifest text: SHA-256 hex. */
void st_manifest_id(const char *text, size_t len, char out[ST_ID_HEX + 1]);

/* Path order used by manifests: bytewise on decoded paths ("a" < "a-b" <
 * "a/b" < "a0"), so a directory always sorts before what is in it. */
int st_path_cmp(const char *a, const char *b);

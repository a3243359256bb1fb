/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checkpoints as tar archives (libarchive).
 *
 * Export writes a checkpoint as a POSIX pax tar: directories, regular files
 * (every chunk verified on the way out) and symlinks, with their permission
 * bits and mtimes (nanoseconds in pax records), owned by 0:0.
 *
 * Import reads a tar (ustar, pax or GNU; uncompressed, gzip, xz or zstd)
 * into a new checkpoint without writing anything to a filesystem: file
 * contents go straight into the chunk store, the tree into a manifest. It
 * holds a tar to the rules a restore holds a manifest to, and refuses the
 * whole archive, naming the entry, at the first thing it would not restore
 * (see docs/checkpoints.md, "Export and import").
 */
#pragma once

#include <stdint.h>

#include "common/error.h"
#include "store/checkpoint.h"
#include "store/manifest.h"

/* Names and link targets of one import together, a bound on its memory
 * and on the size of the manifest it makes. */
#define ST_IMPORT_NAMES_MAX (128u << 20)

struct st_import_report {
	uint64_t files, dirs, symlinks;
	uint64_t implied_dirs; /* parents not listed in the tar (mode 0755) */
	uint64_t bytes;	       /* sum of file sizes */
	uint64_t chunks_new, bytes_new;
};

/* Writes checkpoint id to out_fd as a pax tar. On failure (a missing or
 * corrupt chunk, a write error) the archive is left without its
 * end-of-archive blocks: never a complete-looking partial tar. */
int st_export_tar(struct st_repo *r, const char *id, int out_fd, struct al_error *err);

/*
 * Reads a tar from in_fd and stores it as the next checkpoint of session.
 * limits may be NULL; zero fields take the defaults of manifest.h
 * (max_bytes 0: no limit on bytes). rep may be NULL. On failure nothing
 * is committed: out_id, rep and the session are untouched.
 */
int st_import_tar(struct st_repo *r, int in_fd, const char *session,
		  const struct st_manifest_limits *limits, char out_id[ST_ID_HEX + 1],
		  struct st_import_report *rep, struct al_error *err);

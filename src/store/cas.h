/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Content-addressed chunks of one tenant, stored in packs.
 *
 * A chunk is identified by the SHA-256 of its bytes and stored once per
 * tenant, compressed with zstd. Chunks are appended to an open pack; a
 * sealed pack is two objects: "tenants/<t>/packs/<pack-id>" (the
 * compressed chunks) and "tenants/<t>/index/<pack-id>" (for each chunk:
 * id, offset, compressed and plain length), pack-id being the SHA-256 hex
 * of the pack object. The index object is written after the pack object:
 * a crash leaves at worst a pack without an index, which nothing refers to
 * and GC removes. One fsync per pack, not per chunk.
 *
 * Every chunk read is verified: decompressed length and SHA-256 must match
 * its id (-EBADMSG otherwise, with the id in the message).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "store/objstore.h"

#define ST_ID_LEN 32
#define ST_ID_HEX (2 * ST_ID_LEN)
#define ST_PACK_TARGET (32u << 20) /* a pack is sealed once this large */
#define ST_CHUNK_MAX (1u << 20)	   /* no chunk is larger (see chunker.h) */

struct st_id {
	uint8_t b[ST_ID_LEN];
};

void st_id_hex(const struct st_id *id, char out[ST_ID_HEX + 1]);
int st_id_parse(const char *hex, size_t len, struct st_id *ret); /* lower-case hex only */
void st_sha256(const void *data, size_t len, struct st_id *ret);

struct st_cas;

/* Opens the tenant's chunk store: reads every index object (a corrupt one is
 * an error naming it). level: zstd level (1..19; 3 is a good default). */
int st_cas_open(struct st_objstore *os, const char *tenant, int level, struct st_cas **ret,
		struct al_error *err);
void st_cas_close(struct st_cas *c); /* does not seal: call st_cas_flush first */
/*
 * Opens it without reading the index objects: reading them costs what the
 * whole store holds (every chunk of every pack), which a snapshot that
 * stores nothing new, a fork or a listing does not need. st_cas_load reads
 * them; st_cas_put, st_cas_put_id, st_cas_get, st_cas_reader_new and
 * st_cas_each_pack call it themselves. The lookups that cannot fail
 * (st_cas_has, st_cas_has_shared, st_cas_owner, st_cas_stored_len,
 * st_cas_chunk_len) know no chunk until it has run, and st_cas_put_shared
 * fails: call st_cas_load before starting writers.
 */
int st_cas_open_lazy(struct st_objstore *os, const char *tenant, int level, struct st_cas **ret,
		     struct al_error *err);
int st_cas_load(struct st_cas *c, struct al_error *err); /* once read, does nothing */
bool st_cas_loaded(const struct st_cas *c);
/* A chunk store that knows none of the tenant's packs: every chunk put is
 * stored again, in new packs (GC rewrites partly used packs with it). */
int st_cas_open_empty(struct st_objstore *os, const char *tenant, int level, struct st_cas **ret,
		      struct al_error *err);
/* The sealed pack a chunk is read from (the first indexed, should two
 * hold it: a crash while GC rewrote a pack), or NULL. */
const char *st_cas_owner(const struct st_cas *c, const struct st_id *id);
/* The bytes a chunk takes in its pack (record and frame), 0 if absent. */
uint32_t st_cas_stored_len(const struct st_cas *c, const struct st_id *id);
/* A chunk's length as its index says (a read checks it), 0 if absent. */
uint32_t st_cas_chunk_len(const struct st_cas *c, const struct st_id *id);

/* Seals packs once this large instead of ST_PACK_TARGET (clamped to it),
 * for tests that want several packs without writing 32 MiB. */
void st_cas_set_pack_target(struct st_cas *c, size_t bytes);

bool st_cas_has(const struct st_cas *c, const struct st_id *id);
/* Hashes data (len <= ST_CHUNK_MAX); stores it unless present. *ret_new
 * (may be NULL) tells whether it was new. */
int st_cas_put(struct st_cas *c, const void *data, size_t len, struct st_id *ret_id, bool *ret_new,
	       struct al_error *err);
/* Stores data whose id the caller computed already (st_sha256). */
int st_cas_put_id(struct st_cas *c, const struct st_id *id, const void *data, size_t len,
		  bool *ret_new, struct al_error *err);
/*
 * A reader for one thread: st_cas_read is st_cas_get with the reader's own
 * decompression context and buffers, so that any number of threads read
 * at once, each with its reader, while nothing writes to the st_cas.
 * *ret points into the reader: valid until its next read.
 */
struct st_cas_reader;
int st_cas_reader_new(struct st_cas *c, struct st_cas_reader **ret, struct al_error *err);
void st_cas_reader_free(struct st_cas_reader *rd); /* accepts NULL */
int st_cas_read(struct st_cas_reader *rd, const struct st_id *id, const void **ret, size_t *ret_len,
		struct al_error *err);

/* Seals the open pack (if any chunk is in it): pack object, then index. */
int st_cas_flush(struct st_cas *c, struct al_error *err);
/* Reads and verifies a chunk; *ret is malloc'd (free it). */
int st_cas_get(struct st_cas *c, const struct st_id *id, void **ret, size_t *ret_len,
	       struct al_error *err);

/*
 * Concurrent writers, for a snapshot's worker threads. Each thread has its
 * own st_cas_writer (a zstd context and a record buffer) and calls
 * st_cas_put_shared and st_cas_has_shared only; while any of them may run,
 * nothing else may use the st_cas (the functions above are not
 * thread-safe). Once every writer is done, st_cas_flush seals what is left.
 *
 * st_cas_put_shared is st_cas_put for threads: the hashing and compression
 * happen outside the store's lock, the lookup and the append to the open
 * pack under it. The writer that fills a pack writes it (pack, then index)
 * without the lock while the others go on filling the next one. Two
 * writers that store the same new chunk at once both compress it; one
 * stores it, the other gets *ret_new false, so the counts stay exact.
 * Should a pack fail to be written, every later write and st_cas_flush
 * fails too (the in-memory index would name a pack that is not there):
 * close the st_cas.
 */
struct st_cas_writer;
int st_cas_writer_new(struct st_cas *c, struct st_cas_writer **ret, struct al_error *err);
void st_cas_writer_free(struct st_cas_writer *w); /* accepts NULL */
int st_cas_put_shared(struct st_cas_writer *w, const void *data, size_t len, struct st_id *ret_id,
		      bool *ret_new, struct al_error *err);
bool st_cas_has_shared(struct st_cas *c, const struct st_id *id);

/* For GC: calls fn for every pack id with its chunk ids. */
int st_cas_each_pack(struct st_cas *c,
		     int (*fn)(const char *pack_hex, const struct st_id *chunks, size_t n,
			       void *ud),
		     void *ud, struct al_error *err);

struct st_cas_stats {
	uint64_t chunks_new, chunks_dup, bytes_in, bytes_stored, packs_written;
	/* Reading the index (st_cas_open_lazy only uses a merged index): the
	 * index objects read, the chunks known from the merged index, and
	 * whether a new merged index was written. */
	uint64_t indexes_read, midx_chunks, midx_written;
};
void st_cas_stats(const struct st_cas *c, struct st_cas_stats *ret);

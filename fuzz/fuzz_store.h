/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A directory object store for the chunk store's fuzz drivers: made once
 * in a temporary directory on tmpfs (/dev/shm when there is one), with the
 * objects of one pack (its index and its pack object) written straight
 * into it for each input, and removed at exit.
 *
 * The pack format, as src/store/cas.c writes it (its header comment):
 *   pack:  "airlock-pack-1\n", then records [32-byte id][u32 ulen][u32 clen]
 *          [clen bytes: a zstd frame], little-endian
 *   index: "airlock-index-1\n", u64 pack size, u32 count, u32 zero, records
 *          [32-byte id][u64 offset of the frame][u32 clen][u32 ulen], then
 *          the SHA-256 of everything before it
 */
#pragma once

#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "common/fdutil.h"
#include "fuzz.h"
#include "store/cas.h"
#include "store/objstore.h"

#define FZ_TENANT "fuzz"
#define FZ_PACK_MAGIC "airlock-pack-1\n"
#define FZ_PACK_MAGIC_LEN 15
#define FZ_INDEX_MAGIC "airlock-index-1\n"
#define FZ_INDEX_MAGIC_LEN 16
#define FZ_REC_HDR (32 + 4 + 4)
#define FZ_INDEX_HDR (FZ_INDEX_MAGIC_LEN + 8 + 4 + 4)
#define FZ_INDEX_REC (32 + 8 + 4 + 4)
/* The name of the one pack: any 64 hex digits (reads do not check it). */
#define FZ_PACK_HEX "00000000000000000000000000000000000000000000000000000000000000aa"

static char fz_dir[64];
static struct st_objstore *fz_os;

static inline int fz_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static inline void fz_at_exit(void)
{
	st_objstore_close(fz_os);
	fz_os = NULL;
	if (fz_dir[0])
		nftw(fz_dir, fz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void fz_path(char *out, size_t size, const char *kind)
{
	snprintf(out, size, "%s/tenants/" FZ_TENANT "/%s/" FZ_PACK_HEX, fz_dir, kind);
}

/* The store, made on first use. */
static inline struct st_objstore *fz_store(void)
{
	if (fz_os)
		return fz_os;
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(fz_dir, sizeof(fz_dir), "%s/airlock-fuzz-cas-XXXXXX", base);
	check(mkdtemp(fz_dir));
	char p[160];
	const char *dirs[] = { "tenants", "tenants/" FZ_TENANT, "tenants/" FZ_TENANT "/index",
			       "tenants/" FZ_TENANT "/packs" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", fz_dir, dirs[i]);
		check(mkdir(p, 0700) == 0);
	}
	struct al_error err = { 0 };
	if (st_objstore_open_dir(fz_dir, &fz_os, &err) < 0)
		fprintf(stderr, "fuzz: %s\n", err.msg);
	check(fz_os);
	atexit(fz_at_exit);
	return fz_os;
}

/* Writes (or with data NULL, removes) the pack's object of kind
 * ("index" or "packs"). */
static inline void fz_put(const char *kind, const void *data, size_t len)
{
	char p[160];
	fz_path(p, sizeof(p), kind);
	unlink(p);
	if (!data)
		return;
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	check(fd >= 0);
	check(write_full(fd, data, len) == 0);
	close(fd);
}

static inline void fz_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void fz_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t fz_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

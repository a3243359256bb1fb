/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tar import on arbitrary bytes (any compression libarchive is allowed to
 * read), against a store in a temporary directory on tmpfs (/dev/shm when
 * there is one, so the store's fsyncs cost little), made on first use with
 * a fixed key and small limits. A refusal must say why in one short line;
 * an accepted import's manifest must load (HMAC, grammar, limits) again.
 * The store is thrown away and made again every STORE_ROUNDS imports so it
 * does not grow without end.
 */
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/fdutil.h"
#include "fuzz.h"
#include "store/archive.h"
#include "store/checkpoint.h"

#define STORE_ROUNDS 500

static const uint8_t key[32] = "airlock-fuzz-tar-key-0123456789a";

static char dir[64];
static struct st_repo *repo;
static unsigned rounds;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void drop_store(void)
{
	st_repo_close(repo);
	repo = NULL;
	if (dir[0])
		nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	dir[0] = '\0';
}

static void open_store(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/airlock-fuzz-tar-XXXXXX", base);
	check(mkdtemp(dir));
	struct st_repo_opts o = {
		.store_dir = dir, .tenant = "fuzz", .key = key, .keylen = sizeof(key), .level = 1
	};
	struct al_error err = { 0 };
	if (st_repo_open(&o, &repo, &err) < 0)
		fprintf(stderr, "fuzz_tar: %s\n", err.msg);
	check(repo);
	rounds = 0;
}

static void at_exit(void)
{
	drop_store();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!repo) {
		static bool registered;
		if (!registered) {
			atexit(at_exit);
			registered = true;
		}
		open_store();
	}
	int fd = memfd_create("fuzz_tar", MFD_CLOEXEC);
	check(fd >= 0);
	check(write_full(fd, data, size) == 0);
	check(lseek(fd, 0, SEEK_SET) == 0);

	struct st_manifest_limits lim = { .max_entries = 64,
					  .max_depth = 8,
					  .max_bytes = 4u << 20 };
	char id[ST_ID_HEX + 1] = "unset";
	struct st_import_report rep;
	struct al_error err = { 0 };
	int r = st_import_tar(repo, fd, "fuzz", &lim, id, &rep, &err);
	close(fd);
	if (r < 0) {
		/* A refusal says why, in one line, and leaves out_id alone. */
		check(err.msg[0]);
		check(!strchr(err.msg, '\n'));
		check(strcmp(id, "unset") == 0);
	} else {
		struct st_manifest *m = NULL;
		r = st_manifest_load(repo, id, &lim, &m, &err);
		if (r < 0)
			fprintf(stderr, "fuzz_tar: an imported manifest does not load: %s\n",
				err.msg);
		check(r == 0);
		check(m->n_entries == rep.files + rep.dirs + rep.symlinks);
		check(m->n_entries <= lim.max_entries);
		st_manifest_free(m);
	}
	if (++rounds >= STORE_ROUNDS)
		drop_store();
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* Small helpers shared by the unit tests of src/common. */
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Descriptors open in this process (the directory's own one excluded). */
static inline int count_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

static inline bool fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* A fresh directory under $TMPDIR (or /tmp); the caller removes it. */
static inline char *make_temp_dir(void)
{
	const char *base = getenv("TMPDIR");
	char *path;
	if (!base || !*base)
		base = "/tmp";
	if (asprintf(&path, "%s/airlock-test.XXXXXX", base) < 0)
		return NULL;
	if (!mkdtemp(path)) {
		free(path);
		return NULL;
	}
	return path;
}

static inline int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path) < 0 ? -1 : 0;
}

/* Removes a test's temporary tree, depth first, without following links. */
static inline void remove_tree(const char *path)
{
	(void)nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

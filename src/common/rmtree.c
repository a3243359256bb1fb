/* SPDX-License-Identifier: Apache-2.0 */
/* Removing a directory tree someone else may have written. */
#include "common/rmtree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"

#define RM_MAX_DEPTH 128

/*
 * Depth-first removal holding one descriptor per level. A tree deeper than
 * RM_MAX_DEPTH is flattened first: the deep directory is renamed up to the
 * top and removed from there, so a hostile tree cannot exhaust descriptors
 * or the stack.
 */
static int rm_children(int topfd, int dfd, unsigned depth, unsigned *moved)
{
	_cleanup_close_ int dupfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	if (dupfd < 0)
		return -errno;
	DIR *d = fdopendir(dupfd);
	if (!d)
		return -errno;
	dupfd = -1;
	/* The duplicate shares its offset with dfd: start from the top. */
	rewinddir(d);
	int ret = 0;
	struct dirent *de;
	while ((errno = 0, de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		/* The entry's type comes with its name on most filesystems: no
		 * stat per file. unlinkat never follows a link, and refuses a
		 * directory (EISDIR), should one have taken the name since. */
		bool dir = de->d_type == DT_DIR;
		if (de->d_type == DT_UNKNOWN) {
			struct stat st;
			if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
				if (errno != ENOENT && ret == 0)
					ret = -errno;
				continue;
			}
			dir = S_ISDIR(st.st_mode);
		}
		if (!dir) {
			if (unlinkat(dfd, de->d_name, 0) == 0 || errno == ENOENT)
				continue;
			if (errno != EISDIR) {
				if (ret == 0)
					ret = -errno;
				continue;
			}
		}
		if (depth >= RM_MAX_DEPTH) {
			char name[64];
			snprintf(name, sizeof(name), ".airlock-rm-%u", (*moved)++);
			if (renameat(dfd, de->d_name, topfd, name) < 0 && ret == 0)
				ret = -errno;
			continue;
		}
		int sub = openat(dfd, de->d_name,
				 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
		if (sub < 0 && errno == EPERM)
			sub = openat(dfd, de->d_name,
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			if (errno != ENOENT && ret == 0)
				ret = -errno;
			continue;
		}
		int r = rm_children(topfd, sub, depth + 1, moved);
		close(sub);
		if (r < 0 && ret == 0)
			ret = r;
		if (unlinkat(dfd, de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT && ret == 0)
			ret = -errno;
	}
	if (errno != 0 && ret == 0)
		ret = -errno;
	closedir(d);
	return ret;
}

int rm_rf_at(int dirfd, const char *name)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	_cleanup_close_ int fd =
		openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = 0;
	unsigned moved = 0;
	for (int pass = 0; pass < 1 << 16; pass++) {
		unsigned before = moved;
		r = rm_children(fd, fd, 0, &moved);
		if (moved == before)
			break;
	}
	if (r < 0)
		return r;
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int rm_rf(const char *path)
{
	return rm_rf_at(AT_FDCWD, path);
}

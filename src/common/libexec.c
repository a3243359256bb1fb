/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/libexec.h"

#ifndef AIRLOCK_LIBEXEC_DIR
#error "AIRLOCK_LIBEXEC_DIR: where the helpers are installed (set by meson)"
#endif

/* Opens dir/name when it is a helper we may run: 0 and *ret_fd, -ENOENT
 * when there is nothing there, another negative errno with err set when
 * something is there that must not be run. */
static int try_dir(const char *dir, const char *name, const struct stat *self, char *path,
		   int *ret_fd, struct al_error *err)
{
	if (snprintf(path, LIBEXEC_PATH_MAX, "%s/%s", dir, name) >= LIBEXEC_PATH_MAX)
		return al_error_set(err, -ENAMETOOLONG, "%s/%s: path too long", dir, name);
	_cleanup_close_ int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ENOTDIR ?
			       -ENOENT :
			       al_error_set_errno(err, -errno, "%s", path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set_errno(err, -errno, "%s", path);
	if (!S_ISREG(st.st_mode) || !(st.st_mode & S_IXUSR))
		return al_error_set(err, -EACCES, "%s is not an executable file", path);
	if (st.st_uid != self->st_uid || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return al_error_set(
			err, -EPERM,
			"%s: not run, it is not owned by the owner of airlock's own binary "
			"(uid %u) or others may write to it",
			path, (unsigned)self->st_uid);
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static int open_from(const char *self, const struct stat *st, const char *name, char *ret_path,
		     struct al_error *err)
{
	if (!*name || strchr(name, '/'))
		return al_error_set(err, -EINVAL, "bad helper name");
	char dir[LIBEXEC_PATH_MAX];
	size_t n = strlen(self);
	if (n >= sizeof(dir))
		return al_error_set(err, -ENAMETOOLONG, "%s: path too long", self);
	memcpy(dir, self, n + 1);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return al_error_set(err, -EINVAL, "%s: not an absolute path", self);
	/* "/airlock" lives in "/": the empty string here, "/" below. */
	*slash = '\0';

	char where[2][LIBEXEC_PATH_MAX];
	const char *configured = AIRLOCK_LIBEXEC_DIR;
	int w = configured[0] == '/' ?
			snprintf(where[0], sizeof(where[0]), "%s", configured) :
			snprintf(where[0], sizeof(where[0]), "%s/%s", dir, configured);
	if (w < 0 || (size_t)w >= sizeof(where[0]))
		return al_error_set(err, -ENAMETOOLONG, "%s: path too long", dir);
	snprintf(where[1], sizeof(where[1]), "%s", dir[0] ? dir : "/");

	char path[LIBEXEC_PATH_MAX];
	for (size_t i = 0; i < ARRAY_SIZE(where); i++) {
		int fd = -1;
		int r = try_dir(where[i], name, st, path, &fd, err);
		if (r == -ENOENT)
			continue;
		if (r < 0)
			return r;
		if (ret_path)
			memcpy(ret_path, path, strlen(path) + 1);
		return fd;
	}
	return al_error_set(
		err, -ENOENT,
		"airlock's helper %s is missing: it belongs in %s (installed with airlock) "
		"or beside airlock in %s",
		name, where[0], where[1]);
}

int libexec_open_from(const char *self, const char *name, char *ret_path, struct al_error *err)
{
	struct stat st;
	if (stat(self, &st) < 0)
		return al_error_set_errno(err, -errno, "cannot find airlock's own binary (%s)",
					  self);
	return open_from(self, &st, name, ret_path, err);
}

int libexec_open(const char *name, char *ret_path, struct al_error *err)
{
	/* The running binary itself, even if it was replaced or removed since. */
	struct stat st;
	if (stat("/proc/self/exe", &st) < 0)
		return al_error_set_errno(err, -errno,
					  "cannot find airlock's own binary (/proc/self/exe)");
	char self[LIBEXEC_PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self));
	if (n < 0)
		return al_error_set_errno(err, -errno,
					  "cannot find airlock's own binary (/proc/self/exe)");
	if ((size_t)n >= sizeof(self))
		return al_error_set(err, -ENAMETOOLONG, "airlock's own path is too long");
	self[n] = '\0';
	/* Replaced while it runs: "PATH (deleted)"; its directory is still
	 * where the helpers are. */
	static const char deleted[] = " (deleted)";
	size_t dl = sizeof(deleted) - 1;
	if ((size_t)n > dl && strcmp(self + n - dl, deleted) == 0)
		self[n - dl] = '\0';
	return open_from(self, &st, name, ret_path, err);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File descriptor helpers. All return 0 (or a count) on success and a
 * negative errno on failure; none of them leave a descriptor open on a
 * failure path, and every descriptor they open is O_CLOEXEC.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

int fd_set_cloexec(int fd, bool on);
int fd_set_nonblock(int fd, bool on);

/*
 * Reads until n bytes arrived or end of file. Returns the count (less than
 * n only at end of file) or a negative errno. Retries on EINTR; on a
 * non-blocking fd it waits with poll() instead of returning -EAGAIN.
 */
ssize_t read_full(int fd, void *buf, size_t n);

/* Writes all n bytes or fails; same retry rules as read_full. */
int write_full(int fd, const void *buf, size_t n);

/*
 * Closes every descriptor of the process except those in keep (negative
 * entries are ignored). Uses close_range(2), falling back to walking
 * /proc/self/fd, and to closing up to the descriptor limit when /proc is
 * not mounted. Allocates nothing, so it is safe between fork and exec.
 */
int close_all_fds_except(const int *keep, size_t n);

/* The fallback path of close_all_fds_except(), exported for tests. */
int close_all_fds_except_slow(const int *keep, size_t n);

/*
 * Reads a whole regular file (path relative to dirfd, or AT_FDCWD) of at
 * most max bytes into a NUL-terminated buffer the caller frees. Follows
 * symlinks. -EFBIG past max, -EISDIR for a directory, -EINVAL for other
 * files that are not regular (FIFOs, devices: they may never end).
 * ret_len may be NULL.
 */
int read_file_bounded(int dirfd, const char *path, size_t max, char **ret, size_t *ret_len);

/*
 * Writes content to an existing file with one write(2), for kernel files
 * (cgroup knobs, uid_map) where the write is the operation and its errno
 * the answer. Does not create the file and does not follow a symlink in
 * the last component. A short write is -EIO.
 */
int write_file_at(int dirfd, const char *path, const char *content);

/*
 * Opens path (absolute, or relative to dirfd) following no symbolic link
 * in any component, the last one included, with or without a trailing
 * slash, and no magic link (/proc/PID/fd/N): a link on the way is -ELOOP.
 * For paths a privileged process is handed by someone else: a user who
 * owns a directory on the way cannot send it elsewhere by swapping a
 * component for a link, and the descriptor is what is used from then on.
 * openat2(RESOLVE_NO_SYMLINKS); where the kernel has none (or a filter
 * hides it), the same walk one O_NOFOLLOW component at a time. flags as
 * for openat(2) (with O_PATH, only O_DIRECTORY may join it); O_CLOEXEC is
 * always added.
 */
int open_no_symlinks(int dirfd, const char *path, int flags, mode_t mode);

/*
 * The directory path's last component is in, opened with open_no_symlinks
 * (O_PATH | O_DIRECTORY), and that component, copied into name (a buffer
 * of name_size bytes): to make, open or replace it relative to the
 * descriptor (mkdirat, openat with O_EXCL | O_NOFOLLOW, renameat).
 * Trailing slashes are dropped; *ret_dir_only (may be NULL) says whether
 * there were any (the path must then name a directory). -EINVAL when
 * there is no last component to act on: "", "/", or one that is "." or
 * "..". -ENAMETOOLONG when it does not fit in name.
 */
int open_parent_no_symlinks(int dirfd, const char *path, char *name, size_t name_size,
			    bool *ret_dir_only);

/*
 * Makes the directory path (with mode, unless it exists) and opens it
 * O_RDONLY | O_DIRECTORY, following no link anywhere: its parent with
 * open_parent_no_symlinks, then mkdirat and open_no_symlinks relative to
 * it. A path with no last component to make ("/", ending in "." or "..")
 * is only opened.
 */
int mkdir_open_no_symlinks(int dirfd, const char *path, mode_t mode);

/* Opens path for appending (created 0600); nofollow: no link in the last
 * component. The descriptor, or a negative errno. */
int open_append(const char *path, bool nofollow);
/* open_append for a file a user names (an audit log): no link in the last
 * component (-ELOOP), and a regular file (-EINVAL for a FIFO, a device, a
 * socket: never opened for long, never waited on). */
int open_append_regular(const char *path);

/* A listening AF_UNIX stream socket at path (a stale one replaced) that
 * only its owner can connect to (made under umask 077). */
int listen_unix_private(const char *path);

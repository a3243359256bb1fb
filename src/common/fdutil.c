/* SPDX-License-Identifier: Apache-2.0 */
#include "fdutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "buf.h"
#include "cleanup.h"

#ifndef __NR_close_range
#define __NR_close_range 436
#endif

/* Chunk size for files whose size stat() does not know (proc, sysfs). */
#define READ_CHUNK 4096

static int set_flag(int fd, int get, int set, int flag, bool on)
{
	int flags = fcntl(fd, get);
	if (flags < 0)
		return -errno;
	int nflags = on ? flags | flag : flags & ~flag;
	if (nflags == flags)
		return 0;
	if (fcntl(fd, set, nflags) < 0)
		return -errno;
	return 0;
}

int fd_set_cloexec(int fd, bool on)
{
	return set_flag(fd, F_GETFD, F_SETFD, FD_CLOEXEC, on);
}

int fd_set_nonblock(int fd, bool on)
{
	return set_flag(fd, F_GETFL, F_SETFL, O_NONBLOCK, on);
}

static int wait_fd(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };
	for (;;) {
		int r = poll(&p, 1, -1);
		if (r >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

ssize_t read_full(int fd, void *buf, size_t n)
{
	if (n > SSIZE_MAX)
		return -EINVAL;
	size_t done = 0;
	while (done < n) {
		ssize_t k = read(fd, (char *)buf + done, n - done);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				int r = wait_fd(fd, POLLIN);
				if (r < 0)
					return r;
				continue;
			}
			return -errno;
		}
		if (k == 0)
			break;
		done += (size_t)k;
	}
	return (ssize_t)done;
}

int write_full(int fd, const void *buf, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t k = write(fd, (const char *)buf + done, n - done);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				int r = wait_fd(fd, POLLOUT);
				if (r < 0)
					return r;
				continue;
			}
			return -errno;
		}
		if (k == 0)
			return -EIO;
		done += (size_t)k;
	}
	return 0;
}

/* The smallest descriptor in keep that is >= from, or -1. */
static long next_kept(const int *keep, size_t n, unsigned from)
{
	long best = -1;
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < 0 || (unsigned)keep[i] < from)
			continue;
		if (best < 0 || keep[i] < best)
			best = keep[i];
	}
	return best;
}

static bool is_kept(const int *keep, size_t n, int fd)
{
	for (size_t i = 0; i < n; i++)
		if (keep[i] == fd)
			return true;
	return false;
}

int close_all_fds_except(const int *keep, size_t n)
{
	unsigned from = 0;
	for (;;) {
		long k = next_kept(keep, n, from);
		unsigned to = k < 0 ? UINT_MAX : (unsigned)k - 1;
		if (k < 0 || (unsigned)k > from) {
			if (syscall(__NR_close_range, from, to, 0) < 0) {
				if (errno == ENOSYS || errno == EINVAL || errno == EPERM)
					return close_all_fds_except_slow(keep, n);
				return -errno;
			}
		}
		if (k < 0 || (unsigned)k == UINT_MAX)
			return 0;
		from = (unsigned)k + 1;
	}
}

/* Directory entries as getdents64(2) returns them; glibc has no header. */
struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static int parse_fd_name(const char *s)
{
	long v = 0;
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > INT_MAX / 10)
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v > INT_MAX ? -1 : (int)v;
}

int close_all_fds_except_slow(const int *keep, size_t n)
{
	int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0) {
		/* No /proc (early in a new mount namespace): try every number. */
		struct rlimit rl;
		int max = 65536;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		    rl.rlim_cur < INT_MAX)
			max = (int)rl.rlim_cur;
		for (int fd = 0; fd < max; fd++)
			if (!is_kept(keep, n, fd))
				close(fd);
		return 0;
	}

	/* Closing entries while reading is fine: /proc/self/fd is listed by
	 * descriptor number, so the offsets of later entries do not move. */
	char buffer[4096] __attribute__((aligned(8)));
	for (;;) {
		long got = syscall(SYS_getdents64, dir, buffer, sizeof(buffer));
		if (got < 0) {
			int r = -errno;
			close(dir);
			return r;
		}
		if (got == 0)
			break;
		for (long off = 0; off < got;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(buffer + off);
			off += d->d_reclen;
			int fd = parse_fd_name(d->d_name);
			if (fd < 0 || fd == dir || is_kept(keep, n, fd))
				continue;
			close(fd);
		}
	}
	close(dir);
	return 0;
}

int read_file_bounded(int dirfd, const char *path, size_t max, char **ret, size_t *ret_len)
{
	/* O_NONBLOCK so that opening a FIFO cannot hang; it is refused below. */
	_cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;

	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (st.st_size > 0 && (uint64_t)st.st_size > max)
		return -EFBIG;

	_cleanup_buf_ struct buf b = BUF_INIT(max);
	int r;
	/* st_size is a hint only: proc files say 0, and files change. */
	if (st.st_size > 0) {
		r = buf_reserve(&b, (size_t)st.st_size);
		if (r < 0)
			return r;
	}
	for (;;) {
		ssize_t k;
		/* The buffer never holds more than max + 1 bytes, so reading
		 * into its free space cannot pass the limit. */
		size_t avail = b.cap > b.len + 1 ? b.cap - b.len - 1 : 0;
		if (avail > 0) {
			k = read(fd, b.data + b.len, avail);
			if (k > 0) {
				b.len += (size_t)k;
				b.data[b.len] = '\0';
			}
		} else {
			/* Full: read on the side, one byte past max at most, so
			 * a file that is too big is detected, not truncated. */
			char tmp[READ_CHUNK];
			size_t room = max - b.len;
			size_t want = room < sizeof(tmp) ? room + 1 : sizeof(tmp);
			k = read(fd, tmp, want);
			if (k > 0) {
				if ((size_t)k > room)
					return -EFBIG;
				r = buf_append(&b, tmp, (size_t)k);
				if (r < 0)
					return r;
			}
		}
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			break;
	}
	return buf_steal(&b, ret, ret_len);
}

int write_file_at(int dirfd, const char *path, const char *content)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	size_t n = strlen(content);
	ssize_t k;
	do
		k = write(fd, content, n);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return -errno;
	if ((size_t)k != n)
		return -EIO;
	return 0;
}

/* Why a component opened O_NOFOLLOW failed: a symlink there is -ELOOP,
 * whatever openat said (O_DIRECTORY makes it ENOTDIR). */
static int nofollow_errno(int dirfd, const char *name, int r)
{
	struct stat st;
	if (r != -ELOOP && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISLNK(st.st_mode))
		return -ELOOP;
	return r;
}

/* The walk of open_no_symlinks for kernels without openat2. */
static int walk_no_symlinks(int dirfd, const char *path, int flags, mode_t mode)
{
	size_t len = strlen(path);
	if (len == 0)
		return -ENOENT;
	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	char buf[PATH_MAX];
	memcpy(buf, path, len + 1);
	bool dir_only = buf[len - 1] == '/';

	int cur = openat(buf[0] == '/' ? AT_FDCWD : dirfd, buf[0] == '/' ? "/" : ".",
			 O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0)
		return -errno;
	char *seg = buf;
	for (;;) {
		while (*seg == '/')
			seg++;
		char *end = seg + strcspn(seg, "/");
		char *next = end;
		while (*next == '/')
			next++;
		bool last = *next == '\0';
		*end = '\0';
		if (*seg == '\0') {
			/* Nothing left ("/" or a trailing slash): cur itself. */
			int fd = openat(cur, ".", (flags & ~(O_CREAT | O_EXCL)) | O_CLOEXEC);
			int r = fd < 0 ? -errno : fd;
			close(cur);
			return r;
		}
		if (last) {
			int f = flags | O_NOFOLLOW | O_CLOEXEC | (dir_only ? O_DIRECTORY : 0);
			int fd = openat(cur, seg, f, mode);
			int r = fd < 0 ? nofollow_errno(cur, seg, -errno) : fd;
			struct stat st;
			/* O_PATH | O_NOFOLLOW opens a link itself. */
			if (fd >= 0 && (flags & O_PATH) &&
			    (fstat(fd, &st) < 0 || S_ISLNK(st.st_mode))) {
				close(fd);
				r = -ELOOP;
			}
			close(cur);
			return r;
		}
		int fd = openat(cur, seg, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int r = fd < 0 ? nofollow_errno(cur, seg, -errno) : fd;
		close(cur);
		if (r < 0)
			return r;
		cur = fd;
		seg = next;
	}
}

int open_no_symlinks(int dirfd, const char *path, int flags, mode_t mode)
{
	if (!path)
		return -EINVAL;
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	if (fd >= 0)
		return fd;
	if (errno != ENOSYS)
		return -errno;
	return walk_no_symlinks(dirfd, path, flags, mode);
}

int open_parent_no_symlinks(int dirfd, const char *path, char *name, size_t name_size,
			    bool *ret_dir_only)
{
	if (!path)
		return -EINVAL;
	size_t len = strlen(path);
	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	char buf[PATH_MAX];
	memcpy(buf, path, len + 1);
	bool dir_only = false;
	while (len > 0 && buf[len - 1] == '/') {
		buf[--len] = '\0';
		dir_only = true;
	}
	if (len == 0)
		return -EINVAL;
	char *slash = strrchr(buf, '/');
	const char *last = slash ? slash + 1 : buf;
	if (strcmp(last, ".") == 0 || strcmp(last, "..") == 0)
		return -EINVAL;
	size_t nl = strlen(last);
	if (nl >= name_size)
		return -ENAMETOOLONG;
	const char *dir = ".";
	if (slash == buf) {
		dir = "/";
	} else if (slash) {
		*slash = '\0';
		dir = buf;
	}
	int fd = open_no_symlinks(dirfd, dir, O_PATH | O_DIRECTORY, 0);
	if (fd < 0)
		return fd;
	memcpy(name, last, nl + 1);
	if (ret_dir_only)
		*ret_dir_only = dir_only;
	return fd;
}

int mkdir_open_no_symlinks(int dirfd, const char *path, mode_t mode)
{
	char name[NAME_MAX + 1];
	int pfd = open_parent_no_symlinks(dirfd, path, name, sizeof(name), NULL);
	if (pfd == -EINVAL)
		return path && *path ? open_no_symlinks(dirfd, path, O_RDONLY | O_DIRECTORY, 0) :
				       -ENOENT;
	if (pfd < 0)
		return pfd;
	int r = 0;
	if (mkdirat(pfd, name, mode) < 0 && errno != EEXIST)
		r = -errno;
	if (r == 0)
		r = open_no_symlinks(pfd, name, O_RDONLY | O_DIRECTORY, 0);
	close(pfd);
	return r;
}

int open_append(const char *path, bool nofollow)
{
	int fd = open(path,
		      O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY |
			      (nofollow ? O_NOFOLLOW : 0),
		      0600);
	return fd < 0 ? -errno : fd;
}

int open_append_regular(const char *path)
{
	/* O_NONBLOCK: a FIFO is refused, not waited on. */
	int fd =
		open(path,
		     O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK,
		     0600);
	if (fd < 0)
		return errno == ENXIO ? -EINVAL : -errno;
	struct stat st;
	int r = 0;
	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (!S_ISREG(st.st_mode))
		r = -EINVAL;
	else if (fcntl(fd, F_SETFL, O_APPEND) < 0)
		r = -errno;
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int listen_unix_private(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(path);
	if (len >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, len + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	mode_t old = umask(0077);
	int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || listen(fd, 8) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "helpers.h"

static void test_flags(void **state)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_false(fcntl(p[0], F_GETFD) & FD_CLOEXEC);
	assert_int_equal(fd_set_cloexec(p[0], true), 0);
	assert_true(fcntl(p[0], F_GETFD) & FD_CLOEXEC);
	assert_int_equal(fd_set_cloexec(p[0], true), 0);
	assert_int_equal(fd_set_cloexec(p[0], false), 0);
	assert_false(fcntl(p[0], F_GETFD) & FD_CLOEXEC);

	assert_int_equal(fd_set_nonblock(p[0], true), 0);
	assert_true(fcntl(p[0], F_GETFL) & O_NONBLOCK);
	assert_int_equal(fd_set_nonblock(p[0], false), 0);
	assert_false(fcntl(p[0], F_GETFL) & O_NONBLOCK);
	close(p[0]);
	close(p[1]);
	assert_int_equal(fd_set_cloexec(p[0], true), -EBADF);
	assert_int_equal(fd_set_nonblock(-1, true), -EBADF);
}

/* 1 MiB through a pipe (64 KiB buffer) with a child on the other end,
 * with both ends non-blocking, so both EAGAIN paths run. */
static void test_read_write_full(void **state)
{
	size_t len = 1u << 20;
	uint8_t *data = malloc(len), *back = malloc(len + 1);
	assert_non_null(data);
	assert_non_null(back);
	for (size_t i = 0; i < len; i++)
		data[i] = (uint8_t)(i ^ (i >> 8));

	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		_exit(write_full(p[1], data, len) == 0 ? 0 : 1);
	}
	close(p[1]);
	ssize_t n = read_full(p[0], back, len + 1); /* asks for one more: EOF */
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(n, (ssize_t)len);
	assert_memory_equal(back, data, len);
	/* At end of file: 0, not an error. */
	assert_int_equal(read_full(p[0], back, 10), 0);
	close(p[0]);
	assert_int_equal(read_full(p[0], back, 10), -EBADF);
	assert_int_equal(read_full(-1, back, (size_t)SSIZE_MAX + 1), -EINVAL);

	/* Writing to a pipe nobody reads: -EPIPE (SIGPIPE ignored here). */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	close(p[0]);
	signal(SIGPIPE, SIG_IGN);
	assert_int_equal(write_full(p[1], "x", 1), -EPIPE);
	signal(SIGPIPE, SIG_DFL);
	close(p[1]);
	free(data);
	free(back);
}

/* Runs close_fn in a child that opened fds 100..109, keeping some, and
 * reports through the exit status which ones survived. */
static void check_close_all(int (*close_fn)(const int *, size_t))
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (int fd = 100; fd < 110; fd++)
			if (dup2(0, fd) != fd)
				_exit(100);
		int big = dup2(0, 4000);
		/* Unsorted, with duplicates and junk. */
		int keep[] = { 105, 2, -1, 103, 105, 4000, 109 };
		if (close_fn(keep, sizeof(keep) / sizeof(keep[0])) < 0)
			_exit(101);
		int bits = 0;
		for (int fd = 100; fd < 110; fd++)
			if (fcntl(fd, F_GETFD) >= 0)
				bits |= 1 << (fd - 100);
		/* 2 and 4000 are kept, 0 and 1 are not. */
		if (fcntl(2, F_GETFD) < 0 || (big == 4000 && fcntl(4000, F_GETFD) < 0))
			_exit(102);
		if (fcntl(0, F_GETFD) >= 0 || fcntl(1, F_GETFD) >= 0)
			_exit(103);
		/* Exactly 2, 103, 105, 109 and maybe 4000 remain. */
		int n = count_open_fds();
		if (n != (big == 4000 ? 5 : 4))
			_exit(104);
		_exit(bits == ((1 << 3) | (1 << 5) | (1 << 9)) ? 0 : 105);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_close_all_fds(void **state)
{
	check_close_all(close_all_fds_except);
}

static void test_close_all_fds_slow(void **state)
{
	check_close_all(close_all_fds_except_slow);
}

static void test_close_all_keep_nothing(void **state)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(0, 50);
		if (close_all_fds_except(NULL, 0) < 0)
			_exit(1);
		_exit(fcntl(0, F_GETFD) < 0 && fcntl(50, F_GETFD) < 0 ? 0 : 2);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

struct tmp {
	char *dir;
	int dirfd;
};

static int setup_tmp(void **state)
{
	struct tmp *t = calloc(1, sizeof(*t));
	t->dir = make_temp_dir();
	if (!t->dir)
		return -1;
	t->dirfd = open(t->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	*state = t;
	return t->dirfd < 0 ? -1 : 0;
}

static int teardown_tmp(void **state)
{
	struct tmp *t = *state;
	close(t->dirfd);
	remove_tree(t->dir);
	free(t->dir);
	free(t);
	return 0;
}

static void put(int dirfd, const char *name, const char *content, size_t len)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, content, len), 0);
	close(fd);
}

static void test_read_file_bounded(void **state)
{
	struct tmp *t = *state;
	put(t->dirfd, "ten", "0123456789", 10);
	put(t->dirfd, "empty", "", 0);

	char *s = NULL;
	size_t len = 0;
	assert_int_equal(read_file_bounded(t->dirfd, "ten", 10, &s, &len), 0);
	assert_int_equal(len, 10);
	assert_string_equal(s, "0123456789");
	free(s);

	s = (char *)0x1;
	len = 77;
	assert_int_equal(read_file_bounded(t->dirfd, "ten", 9, &s, &len), -EFBIG);
	assert_true(s == (char *)0x1);
	assert_int_equal(len, 77);

	assert_int_equal(read_file_bounded(t->dirfd, "empty", 0, &s, &len), 0);
	assert_int_equal(len, 0);
	assert_string_equal(s, "");
	free(s);

	s = (char *)0x1;
	assert_int_equal(read_file_bounded(t->dirfd, "missing", 10, &s, NULL), -ENOENT);
	assert_int_equal(read_file_bounded(t->dirfd, ".", 10, &s, NULL), -EISDIR);
	assert_true(s == (char *)0x1);

	/* A FIFO would block forever (or never end): refused, at once. */
	assert_int_equal(mkfifoat(t->dirfd, "fifo", 0600), 0);
	assert_int_equal(read_file_bounded(t->dirfd, "fifo", 10, &s, NULL), -EINVAL);
	assert_int_equal(read_file_bounded(AT_FDCWD, "/dev/zero", 10, &s, NULL), -EINVAL);

	/* Symlinks are followed for reading. */
	assert_int_equal(symlinkat("ten", t->dirfd, "link"), 0);
	assert_int_equal(read_file_bounded(t->dirfd, "link", 100, &s, &len), 0);
	assert_int_equal(len, 10);
	free(s);

	/* A kernel file: st_size says 0, the content is longer. */
	assert_int_equal(read_file_bounded(AT_FDCWD, "/proc/self/status", 1 << 20, &s, &len), 0);
	assert_true(len > 100);
	assert_int_equal(strlen(s), len);
	assert_non_null(strstr(s, "Pid:"));
	free(s);
	assert_int_equal(read_file_bounded(AT_FDCWD, "/proc/self/status", 16, &s, &len), -EFBIG);
}

static void test_read_file_bounded_large(void **state)
{
	struct tmp *t = *state;
	size_t n = 300000;
	char *big = malloc(n);
	assert_non_null(big);
	for (size_t i = 0; i < n; i++)
		big[i] = (char)('a' + i % 26);
	put(t->dirfd, "big", big, n);
	char *s;
	size_t len;
	assert_int_equal(read_file_bounded(t->dirfd, "big", n, &s, &len), 0);
	assert_int_equal(len, n);
	assert_memory_equal(s, big, n);
	free(s);
	assert_int_equal(read_file_bounded(t->dirfd, "big", n - 1, &s, &len), -EFBIG);
	free(big);
}

static void test_write_file_at(void **state)
{
	struct tmp *t = *state;
	put(t->dirfd, "knob", "old", 3);
	assert_int_equal(write_file_at(t->dirfd, "knob", "max"), 0);
	char *s;
	assert_int_equal(read_file_bounded(t->dirfd, "knob", 100, &s, NULL), 0);
	assert_string_equal(s, "max");
	free(s);

	/* Never creates, never follows a final symlink. */
	assert_int_equal(write_file_at(t->dirfd, "new", "x"), -ENOENT);
	assert_int_equal(faccessat(t->dirfd, "new", F_OK, 0), -1);
	assert_int_equal(symlinkat("knob", t->dirfd, "link"), 0);
	assert_int_equal(write_file_at(t->dirfd, "link", "evil"), -ELOOP);
	assert_int_equal(read_file_bounded(t->dirfd, "knob", 100, &s, NULL), 0);
	assert_string_equal(s, "max");
	free(s);

	/* A kernel file reports its refusal as the errno of the write. */
	char *cur;
	assert_int_equal(read_file_bounded(AT_FDCWD, "/proc/self/oom_score_adj", 64, &cur, NULL),
			 0);
	assert_int_equal(write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "not-a-number"),
			 -EINVAL);
	assert_int_equal(write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", cur), 0);
	free(cur);
}

static void test_no_fd_leaks(void **state)
{
	struct tmp *t = *state;
	int before = count_open_fds();
	char *s;
	for (int i = 0; i < 50; i++) {
		(void)read_file_bounded(t->dirfd, "missing", 10, &s, NULL);
		(void)read_file_bounded(t->dirfd, ".", 10, &s, NULL);
		(void)read_file_bounded(AT_FDCWD, "/proc/self/status", 16, &s, NULL);
		(void)write_file_at(t->dirfd, "missing", "x");
	}
	assert_int_equal(count_open_fds(), before);
}

/* ---- resolving without links (open_no_symlinks and friends) ---- */

/*
 * A tree with links where a user who owns a directory could put them:
 *   a/b/f   a file;  l -> a   a link to a directory;  a/lf -> b/f;
 *   dang -> a/made   a dangling link (where something could be made).
 * Every check runs in the caller; check_links_child also in a child where
 * openat2 fails with ENOSYS (the walk one component at a time).
 */
static int check_links(int dirfd, const char *dir, char *why, size_t why_len)
{
#define EXPECT(cond)                                                            \
	do {                                                                    \
		if (!(cond)) {                                                  \
			snprintf(why, why_len, "line %d: %s", __LINE__, #cond); \
			return -1;                                              \
		}                                                               \
	} while (0)
	int fd;
	char abs[PATH_MAX];
	snprintf(abs, sizeof(abs), "%s/a/b/f", dir);
	fd = open_no_symlinks(dirfd, "a/b/f", O_RDONLY, 0);
	EXPECT(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC));
	close(fd);
	fd = open_no_symlinks(AT_FDCWD, abs, O_RDONLY, 0);
	EXPECT(fd >= 0);
	close(fd);
	fd = open_no_symlinks(dirfd, "a/./b/../b/f", O_RDONLY, 0);
	EXPECT(fd >= 0);
	close(fd);
	fd = open_no_symlinks(dirfd, "a/b/", O_RDONLY | O_DIRECTORY, 0);
	EXPECT(fd >= 0);
	close(fd);
	fd = open_no_symlinks(dirfd, "a//b", O_PATH | O_DIRECTORY, 0);
	EXPECT(fd >= 0);
	close(fd);
	/* A link anywhere: in the middle, last, last with a trailing slash. */
	EXPECT(open_no_symlinks(dirfd, "l/b/f", O_RDONLY, 0) == -ELOOP);
	snprintf(abs, sizeof(abs), "%s/l/b/f", dir);
	EXPECT(open_no_symlinks(AT_FDCWD, abs, O_RDONLY, 0) == -ELOOP);
	EXPECT(open_no_symlinks(dirfd, "a/lf", O_RDONLY, 0) == -ELOOP);
	EXPECT(open_no_symlinks(dirfd, "l", O_RDONLY | O_DIRECTORY, 0) == -ELOOP);
	EXPECT(open_no_symlinks(dirfd, "l/", O_RDONLY | O_DIRECTORY, 0) == -ELOOP);
	EXPECT(open_no_symlinks(dirfd, "l/", O_PATH | O_DIRECTORY, 0) == -ELOOP);
	EXPECT(open_no_symlinks(dirfd, "l", O_PATH, 0) == -ELOOP);
	EXPECT(open_no_symlinks(dirfd, "dang", O_RDONLY, 0) == -ELOOP);
	/* Magic links too (and /proc/self is a link itself). */
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/%d/fd/%d", (int)getpid(), dirfd);
	EXPECT(open_no_symlinks(AT_FDCWD, proc, O_RDONLY | O_DIRECTORY, 0) == -ELOOP);
	EXPECT(open_no_symlinks(AT_FDCWD, "/proc/self/status", O_RDONLY, 0) == -ELOOP);
	EXPECT(open_no_symlinks(dirfd, "a/b/f/", O_RDONLY, 0) == -ENOTDIR);
	EXPECT(open_no_symlinks(dirfd, "missing", O_RDONLY, 0) == -ENOENT);
	EXPECT(open_no_symlinks(dirfd, "", O_RDONLY, 0) == -ENOENT);

	/* The parent of a path, and its last component. */
	char name[NAME_MAX + 1];
	bool dir_only = true;
	fd = open_parent_no_symlinks(dirfd, "a/b/new", name, sizeof(name), &dir_only);
	EXPECT(fd >= 0 && strcmp(name, "new") == 0 && !dir_only);
	EXPECT(mkdirat(fd, name, 0700) == 0);
	close(fd);
	EXPECT(faccessat(dirfd, "a/b/new", F_OK, AT_SYMLINK_NOFOLLOW) == 0);
	EXPECT(unlinkat(dirfd, "a/b/new", AT_REMOVEDIR) == 0);
	fd = open_parent_no_symlinks(dirfd, "a/b//", name, sizeof(name), &dir_only);
	EXPECT(fd >= 0 && strcmp(name, "b") == 0 && dir_only);
	close(fd);
	fd = open_parent_no_symlinks(AT_FDCWD, "/x", name, sizeof(name), NULL);
	EXPECT(fd >= 0 && strcmp(name, "x") == 0);
	close(fd);
	fd = open_parent_no_symlinks(dirfd, "top", name, sizeof(name), NULL);
	EXPECT(fd >= 0 && strcmp(name, "top") == 0);
	struct stat a, b;
	EXPECT(fstat(fd, &a) == 0 && fstat(dirfd, &b) == 0 && a.st_ino == b.st_ino);
	close(fd);
	EXPECT(open_parent_no_symlinks(dirfd, "l/new", name, sizeof(name), NULL) == -ELOOP);
	EXPECT(open_parent_no_symlinks(dirfd, "l/b/new", name, sizeof(name), NULL) == -ELOOP);
	EXPECT(open_parent_no_symlinks(dirfd, "/", name, sizeof(name), NULL) == -EINVAL);
	EXPECT(open_parent_no_symlinks(dirfd, "", name, sizeof(name), NULL) == -EINVAL);
	EXPECT(open_parent_no_symlinks(dirfd, "a/..", name, sizeof(name), NULL) == -EINVAL);
	EXPECT(open_parent_no_symlinks(dirfd, "a/.", name, sizeof(name), NULL) == -EINVAL);
	EXPECT(open_parent_no_symlinks(dirfd, "a/abcdef", name, 4, NULL) == -ENAMETOOLONG);

	/* Making a directory: never through a link, never at one. */
	fd = mkdir_open_no_symlinks(dirfd, "a/made", 0700);
	EXPECT(fd >= 0);
	close(fd);
	fd = mkdir_open_no_symlinks(dirfd, "a/made/", 0700); /* exists: opened */
	EXPECT(fd >= 0);
	close(fd);
	EXPECT(unlinkat(dirfd, "a/made", AT_REMOVEDIR) == 0);
	EXPECT(mkdir_open_no_symlinks(dirfd, "l/made", 0700) == -ELOOP);
	EXPECT(mkdir_open_no_symlinks(dirfd, "dang", 0700) == -ELOOP);
	EXPECT(mkdir_open_no_symlinks(dirfd, "dang/", 0700) == -ELOOP);
	EXPECT(faccessat(dirfd, "a/made", F_OK, AT_SYMLINK_NOFOLLOW) < 0);
	EXPECT(mkdir_open_no_symlinks(dirfd, "a/b/f", 0700) == -ENOTDIR);
	EXPECT(mkdir_open_no_symlinks(dirfd, "no/such", 0700) == -ENOENT);
	fd = mkdir_open_no_symlinks(AT_FDCWD, "/", 0700);
	EXPECT(fd >= 0);
	close(fd);
	return 0;
#undef EXPECT
}

static void make_link_tree(int dirfd)
{
	assert_int_equal(mkdirat(dirfd, "a", 0700), 0);
	assert_int_equal(mkdirat(dirfd, "a/b", 0700), 0);
	put(dirfd, "a/b/f", "f", 1);
	assert_int_equal(symlinkat("a", dirfd, "l"), 0);
	assert_int_equal(symlinkat("b/f", dirfd, "a/lf"), 0);
	assert_int_equal(symlinkat("a/made", dirfd, "dang"), 0);
}

static void test_open_no_symlinks(void **state)
{
	struct tmp *t = *state;
	make_link_tree(t->dirfd);
	char why[256] = "";
	int before = count_open_fds();
	if (check_links(t->dirfd, t->dir, why, sizeof(why)) < 0)
		fail_msg("%s", why);
	assert_int_equal(count_open_fds(), before);
}

/* The same where openat2 is missing (ENOSYS, as under an old seccomp
 * profile): the walk one O_NOFOLLOW component at a time. */
static void test_open_no_symlinks_without_openat2(void **state)
{
	struct tmp *t = *state;
	make_link_tree(t->dirfd);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char why[256] = "";
		scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
		if (!ctx || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0) < 0 ||
		    seccomp_load(ctx) < 0)
			snprintf(why, sizeof(why), "cannot install the filter");
		else if (syscall(SYS_openat2, AT_FDCWD, "/", NULL, 0) >= 0 || errno != ENOSYS)
			snprintf(why, sizeof(why), "openat2 still there");
		else
			check_links(t->dirfd, t->dir, why, sizeof(why));
		(void)!write(p[1], why, strlen(why));
		_exit(why[0] ? 1 : 0);
	}
	close(p[1]);
	char msg[256] = "";
	(void)!read(p[0], msg, sizeof(msg) - 1);
	close(p[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("without openat2: %s", msg[0] ? msg : "the child died");
}

static void test_open_append_regular(void **state)
{
	struct tmp *t = *state;
	char path[PATH_MAX], link[PATH_MAX], fifo[PATH_MAX];
	snprintf(path, sizeof(path), "%s/log", t->dir);
	snprintf(link, sizeof(link), "%s/link", t->dir);
	snprintf(fifo, sizeof(fifo), "%s/fifo", t->dir);
	/* Made, appended to, blocking again once open. */
	int fd = open_append_regular(path);
	assert_true(fd >= 0);
	assert_int_equal(fcntl(fd, F_GETFL) & (O_NONBLOCK | O_APPEND), O_APPEND);
	assert_int_equal(write_full(fd, "a\n", 2), 0);
	close(fd);
	fd = open_append_regular(path);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, "b\n", 2), 0);
	close(fd);
	char *s;
	assert_int_equal(read_file_bounded(t->dirfd, "log", 100, &s, NULL), 0);
	assert_string_equal(s, "a\nb\n");
	free(s);
	/* A link in the last component, a FIFO (with no reader: never waited
	 * on), a directory, a device: refused. */
	assert_int_equal(symlink(path, link), 0);
	assert_int_equal(open_append_regular(link), -ELOOP);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(open_append_regular(fifo), -EINVAL);
	assert_int_equal(open_append_regular(t->dir), -EISDIR);
	assert_int_equal(open_append_regular("/dev/null"), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_read_write_full),
		cmocka_unit_test(test_close_all_fds),
		cmocka_unit_test(test_close_all_fds_slow),
		cmocka_unit_test(test_close_all_keep_nothing),
		cmocka_unit_test_setup_teardown(test_read_file_bounded, setup_tmp, teardown_tmp),
		cmocka_unit_test_setup_teardown(test_read_file_bounded_large, setup_tmp,
						teardown_tmp),
		cmocka_unit_test_setup_teardown(test_write_file_at, setup_tmp, teardown_tmp),
		cmocka_unit_test_setup_teardown(test_no_fd_leaks, setup_tmp, teardown_tmp),
		cmocka_unit_test_setup_teardown(test_open_no_symlinks, setup_tmp, teardown_tmp),
		cmocka_unit_test_setup_teardown(test_open_no_symlinks_without_openat2, setup_tmp,
						teardown_tmp),
		cmocka_unit_test_setup_teardown(test_open_append_regular, setup_tmp, teardown_tmp),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

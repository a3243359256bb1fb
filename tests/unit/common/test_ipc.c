/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/ipc.h"
#include "helpers.h"

/*
 * This program is linked with -Wl,--wrap=malloc, so the library's calls to
 * malloc() come here: a test can see whether ipc_recv() allocated.
 */
void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);
static size_t malloc_calls;
static size_t malloc_largest;

void *__wrap_malloc(size_t size)
{
	malloc_calls++;
	if (size > malloc_largest)
		malloc_largest = size;
	return __real_malloc(size);
}

enum {
	T_PING = 1, /* no payload, no fds */
	T_DATA = 2, /* up to 64 bytes, up to 2 fds */
	T_BIG = 3,  /* up to 4 MiB, up to IPC_MAX_FDS fds */
};

static const struct ipc_type types[] = {
	{ .type = T_PING, .max_len = 0, .max_fds = 0 },
	{ .type = T_DATA, .max_len = 64, .max_fds = 2 },
	{ .type = T_BIG, .max_len = 4u << 20, .max_fds = IPC_MAX_FDS },
};
#define N_TYPES (sizeof(types) / sizeof(types[0]))

struct pair {
	int s[2];
};

static int setup_pair(void **state)
{
	struct pair *p = malloc(sizeof(*p));
	if (!p || ipc_socketpair(p->s) < 0)
		return -1;
	/* A test that would block on a bug fails instead of hanging. */
	struct timeval tv = { .tv_sec = 3 };
	setsockopt(p->s[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	*state = p;
	return 0;
}

static int teardown_pair(void **state)
{
	struct pair *p = *state;
	safe_close(p->s[0]);
	safe_close(p->s[1]);
	free(p);
	return 0;
}

/* A message whose fields are all garbage, to see it stays untouched. */
static void poison(struct ipc_msg *m)
{
	memset(m, 0x5a, sizeof(*m));
}

static bool is_poisoned(const struct ipc_msg *m)
{
	const unsigned char *p = (const unsigned char *)m;
	for (size_t i = 0; i < sizeof(*m); i++)
		if (p[i] != 0x5a)
			return false;
	return true;
}

/* Sends raw bytes with optional SCM_RIGHTS, bypassing ipc_send(). */
static void raw_send(int sock, const void *p, size_t n, const int *fds, size_t n_fds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 32)];
	} control;
	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	assert_true(n_fds <= 32);
	if (n_fds > 0) {
		memset(&control, 0, sizeof(control));
		msg.msg_control = control.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
	}
	assert_int_equal(sendmsg(sock, &msg, MSG_NOSIGNAL), (ssize_t)n);
}

static void test_roundtrip_with_fds(void **state)
{
	struct pair *p = *state;
	int pipe_a[2], pipe_b[2];
	assert_int_equal(pipe2(pipe_a, O_CLOEXEC), 0);
	assert_int_equal(pipe2(pipe_b, O_CLOEXEC), 0);
	int send_fds[2] = { pipe_a[1], pipe_b[1] };

	assert_int_equal(ipc_send(p->s[0], T_DATA, "hello", 5, send_fds, 2), 0);
	_cleanup_ipc_msg_ struct ipc_msg m = IPC_MSG_INIT;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), 0);
	assert_int_equal(m.type, T_DATA);
	assert_int_equal(m.len, 5);
	assert_memory_equal(m.data, "hello", 5);
	assert_int_equal(m.n_fds, 2);
	for (size_t i = 2; i < IPC_MAX_FDS; i++)
		assert_int_equal(m.fds[i], -1);

	/* The received descriptors are the pipes, in order, close-on-exec. */
	for (int i = 0; i < 2; i++) {
		assert_true(fcntl(m.fds[i], F_GETFD) & FD_CLOEXEC);
		char c = (char)('x' + i), got = 0;
		assert_int_equal(write(m.fds[i], &c, 1), 1);
		assert_int_equal(read(i == 0 ? pipe_a[0] : pipe_b[0], &got, 1), 1);
		assert_int_equal(got, c);
	}

	int taken = ipc_msg_take_fd(&m, 1);
	assert_true(taken >= 0);
	assert_int_equal(m.fds[1], -1);
	assert_int_equal(ipc_msg_take_fd(&m, 1), -EBADF);
	assert_int_equal(ipc_msg_take_fd(&m, 2), -EBADF);
	int kept = m.fds[0];
	ipc_msg_done(&m);
	assert_false(fd_is_open(kept));
	assert_true(fd_is_open(taken)); /* taken: ours now */
	assert_null(m.data);
	ipc_msg_done(&m); /* twice is fine */
	ipc_msg_done(NULL);
	close(taken);
	close(pipe_a[0]);
	close(pipe_a[1]);
	close(pipe_b[0]);
	close(pipe_b[1]);
}

static void test_empty_payload_and_sequence(void **state)
{
	struct pair *p = *state;
	assert_int_equal(ipc_send(p->s[0], T_PING, NULL, 0, NULL, 0), 0);
	assert_int_equal(ipc_send(p->s[0], T_DATA, "abc", 3, NULL, 0), 0);
	assert_int_equal(ipc_send(p->s[0], T_PING, NULL, 0, NULL, 0), 0);

	struct ipc_msg m = IPC_MSG_INIT;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), 0);
	assert_int_equal(m.type, T_PING);
	assert_int_equal(m.len, 0);
	assert_null(m.data);
	assert_int_equal(m.n_fds, 0);
	ipc_msg_done(&m);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), 0);
	assert_int_equal(m.type, T_DATA);
	assert_memory_equal(m.data, "abc", 3);
	ipc_msg_done(&m);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), 0);
	assert_int_equal(m.type, T_PING);
	ipc_msg_done(&m);

	/* The peer goes away between frames: a clean end. */
	p->s[0] = safe_close(p->s[0]);
	poison(&m);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -ECONNRESET);
	assert_true(is_poisoned(&m));
}

static void test_exact_max_len(void **state)
{
	struct pair *p = *state;
	char payload[65];
	memset(payload, 'p', sizeof(payload));
	assert_int_equal(ipc_send(p->s[0], T_DATA, payload, 64, NULL, 0), 0);
	_cleanup_ipc_msg_ struct ipc_msg m = IPC_MSG_INIT;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), 0);
	assert_int_equal(m.len, 64);

	struct ipc_msg m2;
	poison(&m2);
	assert_int_equal(ipc_send(p->s[0], T_DATA, payload, 65, NULL, 0), 0);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m2), -EBADMSG);
	assert_true(is_poisoned(&m2));
}

static void test_oversized_length_is_refused_before_allocation(void **state)
{
	struct pair *p = *state;
	/* A header claiming 4 GiB, and nothing after it. If the receiver
	 * allocated or waited for the payload, we would see it. */
	struct ipc_header h = { .type = T_BIG, .len = UINT32_MAX };
	raw_send(p->s[0], &h, sizeof(h), NULL, 0);

	struct ipc_msg m;
	poison(&m);
	malloc_calls = 0;
	malloc_largest = 0;
	/* Refused from the header alone: nothing allocated, nothing read
	 * (a wait for 4 GiB would never end: the test's timeout says so). */
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EBADMSG);
	assert_int_equal(malloc_calls, 0);
	assert_true(is_poisoned(&m));

	/* The same for a type whose limit is zero. */
	h = (struct ipc_header){ .type = T_PING, .len = 1 };
	raw_send(p->s[0], &h, sizeof(h), NULL, 0);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EBADMSG);
	assert_int_equal(malloc_calls, 0);

	/* And the wrapper works: a valid frame does allocate its payload. */
	assert_int_equal(ipc_send(p->s[0], T_DATA, "12345", 5, NULL, 0), 0);
	_cleanup_ipc_msg_ struct ipc_msg ok = IPC_MSG_INIT;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &ok), 0);
	assert_int_equal(malloc_calls, 1);
	assert_int_equal(malloc_largest, 5);
}

static void test_unknown_type(void **state)
{
	struct pair *p = *state;
	int before = count_open_fds();
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_int_equal(ipc_send(p->s[0], 99, "x", 1, &fd, 1), 0);
	close(fd);
	struct ipc_msg m;
	poison(&m);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EBADMSG);
	assert_true(is_poisoned(&m));
	assert_int_equal(count_open_fds(), before);
	/* No table at all: nothing is accepted. */
	assert_int_equal(ipc_send(p->s[0], T_PING, NULL, 0, NULL, 0), 0);
	assert_int_equal(ipc_recv(p->s[1], NULL, 0, &m), -EBADMSG);
}

static void test_too_many_fds_for_type_are_closed(void **state)
{
	struct pair *p = *state;
	int fds[3];
	for (int i = 0; i < 3; i++)
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);

	/* T_DATA allows 2. */
	assert_int_equal(ipc_send(p->s[0], T_DATA, "x", 1, fds, 3), 0);
	for (int i = 0; i < 3; i++)
		close(fds[i]);

	int before = count_open_fds();
	struct ipc_msg m;
	poison(&m);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EBADMSG);
	assert_int_equal(count_open_fds(), before);
	assert_true(is_poisoned(&m));
}

static void test_ping_with_fd_is_refused(void **state)
{
	struct pair *p = *state;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_int_equal(ipc_send(p->s[0], T_PING, NULL, 0, &fd, 1), 0);
	close(fd);
	int before = count_open_fds();
	struct ipc_msg m;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EBADMSG);
	assert_int_equal(count_open_fds(), before);
}

static void test_more_than_ipc_max_fds(void **state)
{
	struct pair *p = *state;
	int fds[20];
	for (int i = 0; i < 20; i++)
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* ipc_send() refuses to build such a frame... */
	assert_int_equal(ipc_send(p->s[0], T_BIG, "x", 1, fds, 20), -EINVAL);
	/* ...so send it by hand: the kernel truncates the control data. */
	struct ipc_header h = { .type = T_BIG, .len = 0 };
	raw_send(p->s[0], &h, sizeof(h), fds, 20);
	for (int i = 0; i < 20; i++)
		close(fds[i]);

	int before = count_open_fds();
	struct ipc_msg m;
	poison(&m);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EBADMSG);
	assert_int_equal(count_open_fds(), before);
	assert_true(is_poisoned(&m));
}

static void test_exactly_ipc_max_fds(void **state)
{
	struct pair *p = *state;
	int fds[IPC_MAX_FDS];
	for (int i = 0; i < IPC_MAX_FDS; i++)
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_int_equal(ipc_send(p->s[0], T_BIG, NULL, 0, fds, IPC_MAX_FDS), 0);
	for (int i = 0; i < IPC_MAX_FDS; i++)
		close(fds[i]);
	int before = count_open_fds();
	struct ipc_msg m = IPC_MSG_INIT;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), 0);
	assert_int_equal(m.n_fds, IPC_MAX_FDS);
	assert_int_equal(count_open_fds(), before + IPC_MAX_FDS);
	ipc_msg_done(&m);
	assert_int_equal(count_open_fds(), before);
}

static void test_fds_smuggled_in_payload(void **state)
{
	struct pair *p = *state;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct ipc_header h = { .type = T_DATA, .len = 4 };
	raw_send(p->s[0], &h, sizeof(h), NULL, 0);
	raw_send(p->s[0], "abcd", 4, &fd, 1);
	close(fd);

	int before = count_open_fds();
	struct ipc_msg m;
	poison(&m);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EBADMSG);
	assert_int_equal(count_open_fds(), before);
	assert_true(is_poisoned(&m));
}

/* Descriptors sent with the second piece of a split header: one recvmsg
 * reads the whole header and gets them with its first byte, so this is
 * the same as a header that carries them. Accepted, and nothing leaks. */
static void test_fds_on_second_part_of_header(void **state)
{
	struct pair *p = *state;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct ipc_header h = { .type = T_DATA, .len = 0 };
	raw_send(p->s[0], &h, 3, NULL, 0);
	raw_send(p->s[0], (char *)&h + 3, sizeof(h) - 3, &fd, 1);
	close(fd);
	int before = count_open_fds();
	struct ipc_msg m = IPC_MSG_INIT;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), 0);
	assert_int_equal(m.n_fds, 1);
	ipc_msg_done(&m);
	assert_int_equal(count_open_fds(), before);
}

static void test_header_in_pieces(void **state)
{
	struct pair *p = *state;
	/* Legal, if odd: the header arrives byte by byte, no fds. */
	struct ipc_header h = { .type = T_DATA, .len = 2 };
	for (size_t i = 0; i < sizeof(h); i++)
		raw_send(p->s[0], (char *)&h + i, 1, NULL, 0);
	raw_send(p->s[0], "o", 1, NULL, 0);
	raw_send(p->s[0], "k", 1, NULL, 0);
	_cleanup_ipc_msg_ struct ipc_msg m = IPC_MSG_INIT;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), 0);
	assert_memory_equal(m.data, "ok", 2);
}

static void test_credentials_are_refused(void **state)
{
	struct pair *p = *state;
	int one = 1;
	assert_int_equal(setsockopt(p->s[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
	assert_int_equal(ipc_send(p->s[0], T_PING, NULL, 0, NULL, 0), 0);
	struct ipc_msg m;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EBADMSG);
}

static void test_truncated_header(void **state)
{
	struct pair *p = *state;
	struct ipc_header h = { .type = T_DATA, .len = 0 };
	raw_send(p->s[0], &h, 4, NULL, 0);
	p->s[0] = safe_close(p->s[0]);
	struct ipc_msg m;
	poison(&m);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EPIPE);
	assert_true(is_poisoned(&m));
}

static void test_truncated_payload_with_fds(void **state)
{
	struct pair *p = *state;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct ipc_header h = { .type = T_DATA, .len = 10 };
	char frame[sizeof(h) + 5];
	memcpy(frame, &h, sizeof(h));
	memcpy(frame + sizeof(h), "12345", 5);
	raw_send(p->s[0], frame, sizeof(frame), &fd, 1);
	close(fd);
	p->s[0] = safe_close(p->s[0]);

	int before = count_open_fds();
	struct ipc_msg m;
	poison(&m);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EPIPE);
	assert_int_equal(count_open_fds(), before);
	assert_true(is_poisoned(&m));
}

static void test_nonblocking_nothing_to_read(void **state)
{
	struct pair *p = *state;
	int fl = fcntl(p->s[1], F_GETFL);
	assert_int_equal(fcntl(p->s[1], F_SETFL, fl | O_NONBLOCK), 0);
	struct ipc_msg m;
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), -EAGAIN);
	/* And a whole frame is still read whole. */
	assert_int_equal(ipc_send(p->s[0], T_DATA, "nb", 2, NULL, 0), 0);
	assert_int_equal(ipc_recv(p->s[1], types, N_TYPES, &m), 0);
	assert_memory_equal(m.data, "nb", 2);
	ipc_msg_done(&m);
}

static void test_send_errors(void **state)
{
	struct pair *p = *state;
	int fds[IPC_MAX_FDS + 1] = { 0 };
	assert_int_equal(ipc_send(p->s[0], T_DATA, "x", 1, fds, IPC_MAX_FDS + 1), -EINVAL);
	assert_int_equal(ipc_send(p->s[0], T_DATA, "x", (size_t)UINT32_MAX + 1, NULL, 0), -EINVAL);
	assert_int_equal(ipc_send(p->s[0], T_DATA, NULL, 1, NULL, 0), -EINVAL);
	int bad = -1;
	assert_int_equal(ipc_send(p->s[0], T_DATA, "x", 1, &bad, 1), -EBADF);
	/* Nothing half-sent by the refusals above. */
	int fl = fcntl(p->s[1], F_GETFL);
	assert_int_equal(fcntl(p->s[1], F_SETFL, fl | O_NONBLOCK), 0);
	char c;
	assert_int_equal(recv(p->s[1], &c, 1, 0), -1);
	assert_int_equal(errno, EAGAIN);

	/* A closed peer is -EPIPE, not a SIGPIPE that kills us. */
	p->s[1] = safe_close(p->s[1]);
	assert_int_equal(ipc_send(p->s[0], T_DATA, "x", 1, NULL, 0), -EPIPE);
}

static void test_large_frame_across_processes(void **state)
{
	struct pair *p = *state;
	size_t len = 3u << 20; /* far more than a socket buffer */
	uint8_t *payload = malloc(len);
	assert_non_null(payload);
	for (size_t i = 0; i < len; i++)
		payload[i] = (uint8_t)(i * 7 + 3);

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		int r = ipc_send(p->s[0], T_BIG, payload, len, &fd, 1);
		_exit(r == 0 ? 0 : 1);
	}
	struct ipc_msg m = IPC_MSG_INIT;
	int r = ipc_recv(p->s[1], types, N_TYPES, &m);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(r, 0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(m.len, len);
	assert_int_equal(m.n_fds, 1);
	assert_memory_equal(m.data, payload, len);
	ipc_msg_done(&m);
	free(payload);
}

int main(void)
{
	signal(SIGPIPE, SIG_DFL); /* MSG_NOSIGNAL must make this harmless */
#define T(name) cmocka_unit_test_setup_teardown(name, setup_pair, teardown_pair)
	const struct CMUnitTest tests[] = {
		T(test_roundtrip_with_fds),
		T(test_empty_payload_and_sequence),
		T(test_exact_max_len),
		T(test_oversized_length_is_refused_before_allocation),
		T(test_unknown_type),
		T(test_too_many_fds_for_type_are_closed),
		T(test_ping_with_fd_is_refused),
		T(test_more_than_ipc_max_fds),
		T(test_exactly_ipc_max_fds),
		T(test_fds_smuggled_in_payload),
		T(test_fds_on_second_part_of_header),
		T(test_header_in_pieces),
		T(test_credentials_are_refused),
		T(test_truncated_header),
		T(test_truncated_payload_with_fds),
		T(test_nonblocking_nothing_to_read),
		T(test_send_errors),
		T(test_large_frame_across_processes),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}

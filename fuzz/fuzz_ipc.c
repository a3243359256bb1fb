/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Feeds the input to ipc_recv() through a socketpair. The first byte says
 * how many descriptors (0-20) to attach to the first chunk of the stream,
 * the second where to cut the stream into a second send; the rest is the
 * stream. Checks that no received descriptor survives a refused frame or
 * ipc_msg_done(): the lowest free descriptor must be the same afterwards.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/ipc.h"
#include "fuzz.h"

#define FUZZ_MAX_STREAM (64 * 1024)

static const struct ipc_type types[] = {
	{ .type = 1, .max_len = 0, .max_fds = 0 },
	{ .type = 2, .max_len = 64, .max_fds = 1 },
	{ .type = 3, .max_len = 4096, .max_fds = IPC_MAX_FDS },
	{ .type = 0xffffffffu, .max_len = 16, .max_fds = 255 },
};

static int lowest_free_fd(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		close(fd);
	return fd;
}

static void send_chunk(int sock, const uint8_t *p, size_t n, int n_fds, int fd)
{
	int fds[20];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(fds))];
	} control;
	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n == 0)
		return;
	if (n_fds > 0) {
		for (int i = 0; i < n_fds; i++)
			fds[i] = fd;
		memset(&control, 0, sizeof(control));
		msg.msg_control = control.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n_fds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n_fds);
	}
	/* Non-blocking: what does not fit in the socket buffer is dropped,
	 * which is just another truncated stream. */
	(void)sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2 || size - 2 > FUZZ_MAX_STREAM)
		return 0;
	int n_fds = data[0] % 21;
	size_t cut = data[1];
	const uint8_t *stream = data + 2;
	size_t len = size - 2;
	if (cut > len)
		cut = len;

	int before = lowest_free_fd();
	int sv[2];
	if (ipc_socketpair(sv) < 0)
		return 0;
	int extra = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (extra < 0)
		abort();

	send_chunk(sv[0], stream, cut, n_fds, extra);
	send_chunk(sv[0], stream + cut, len - cut, cut < len ? n_fds / 2 : 0, extra);
	close(extra);
	shutdown(sv[0], SHUT_WR);

	/* The reader must never wait: everything is in, and the writer said
	 * so with shutdown(), so a stall would mean it misread a length. */
	for (;;) {
		struct ipc_msg m = IPC_MSG_INIT;
		int r = ipc_recv(sv[1], types, sizeof(types) / sizeof(types[0]), &m);
		if (r < 0)
			break;
		if (m.len > 4096 || m.n_fds > IPC_MAX_FDS || (m.len > 0 && !m.data))
			abort();
		ipc_msg_done(&m);
	}
	close(sv[0]);
	close(sv[1]);
	if (lowest_free_fd() != before)
		abort(); /* a descriptor leaked */
	return 0;
}

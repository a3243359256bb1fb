/* SPDX-License-Identifier: Apache-2.0 */
#include "ipc.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cleanup.h"

/* Room for exactly one SCM_RIGHTS message of IPC_MAX_FDS descriptors. */
union ipc_control {
	struct cmsghdr align;
	char buf[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
};

int ipc_socketpair(int ret[2])
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	ret[0] = sv[0];
	ret[1] = sv[1];
	return 0;
}

static int wait_ready(int sock, short events)
{
	struct pollfd p = { .fd = sock, .events = events };
	for (;;) {
		int r = poll(&p, 1, IPC_STALL_TIMEOUT_MS);
		if (r > 0)
			return 0;
		if (r == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

int ipc_send(int sock, uint32_t type, const void *data, size_t len, const int *fds, size_t n_fds)
{
	if (len > UINT32_MAX || n_fds > IPC_MAX_FDS || (len > 0 && !data) || (n_fds > 0 && !fds))
		return -EINVAL;
	for (size_t i = 0; i < n_fds; i++)
		if (fds[i] < 0)
			return -EBADF;

	struct ipc_header h = { .type = type, .len = (uint32_t)len };
	union ipc_control control;
	memset(&control, 0, sizeof(control));

	size_t total = sizeof(h) + len;
	size_t sent = 0;
	while (sent < total) {
		struct iovec iov[2];
		int n_iov = 0;
		if (sent < sizeof(h)) {
			iov[n_iov++] = (struct iovec){ .iov_base = (char *)&h + sent,
						       .iov_len = sizeof(h) - sent };
			if (len > 0)
				iov[n_iov++] =
					(struct iovec){ .iov_base = (void *)data, .iov_len = len };
		} else {
			size_t off = sent - sizeof(h);
			iov[n_iov++] = (struct iovec){ .iov_base = (char *)data + off,
						       .iov_len = len - off };
		}
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)n_iov };
		/* The descriptors ride on the first byte of the header. */
		if (sent == 0 && n_fds > 0) {
			msg.msg_control = control.buf;
			msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
			struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
			memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
		}
		ssize_t k = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				int r = wait_ready(sock, POLLOUT);
				if (r < 0)
					return r;
				continue;
			}
			return -errno;
		}
		sent += (size_t)k;
	}
	return 0;
}

struct recv_state {
	int fds[IPC_MAX_FDS];
	size_t n_fds;
	bool bad; /* something arrived that the protocol does not allow */
};

static void recv_state_close(struct recv_state *st)
{
	for (size_t i = 0; i < st->n_fds; i++)
		close(st->fds[i]);
	st->n_fds = 0;
}

/* Keeps what SCM_RIGHTS delivered (closing what does not fit) and flags
 * everything else. Runs on every recvmsg, so that no descriptor the peer
 * pushes, wherever it attaches it, is left open. */
static void take_control(struct msghdr *msg, struct recv_state *st, bool fds_allowed)
{
	if (msg->msg_flags & MSG_CTRUNC)
		st->bad = true;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			st->bad = true;
			continue;
		}
		if (!fds_allowed)
			st->bad = true;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (st->n_fds < IPC_MAX_FDS) {
				st->fds[st->n_fds++] = fd;
			} else {
				close(fd);
				st->bad = true;
			}
		}
	}
}

/* Reads exactly n bytes. started: whether any byte of this frame was read
 * before (so end of file and -EAGAIN mean a broken frame). */
static int recv_exact(int sock, void *p, size_t n, bool started, struct recv_state *st)
{
	size_t got = 0;
	while (got < n) {
		union ipc_control control;
		struct iovec iov = { .iov_base = (char *)p + got, .iov_len = n - got };
		struct msghdr msg = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = control.buf,
			.msg_controllen = sizeof(control.buf),
		};
		ssize_t k = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				if (!started && got == 0)
					return -EAGAIN;
				int r = wait_ready(sock, POLLIN);
				if (r < 0)
					return r;
				continue;
			}
			return -errno;
		}
		take_control(&msg, st, !started && got == 0);
		if (st->bad)
			return -EBADMSG;
		if (k == 0)
			return started || got > 0 ? -EPIPE : -ECONNRESET;
		got += (size_t)k;
	}
	return 0;
}

static const struct ipc_type *find_type(const struct ipc_type *allowed, size_t n, uint32_t type)
{
	for (size_t i = 0; i < n; i++)
		if (allowed[i].type == type)
			return &allowed[i];
	return NULL;
}

int ipc_recv(int sock, const struct ipc_type *allowed, size_t n_allowed, struct ipc_msg *ret)
{
	struct recv_state st = { .n_fds = 0, .bad = false };
	struct ipc_header h;
	_cleanup_free_ uint8_t *data = NULL;

	int r = recv_exact(sock, &h, sizeof(h), false, &st);
	if (r < 0)
		goto fail;

	/* Everything about the frame is checked before anything is allocated. */
	const struct ipc_type *t = find_type(allowed, n_allowed, h.type);
	size_t max_fds = t ? (t->max_fds < IPC_MAX_FDS ? t->max_fds : IPC_MAX_FDS) : 0;
	if (!t || h.len > t->max_len || st.n_fds > max_fds) {
		r = -EBADMSG;
		goto fail;
	}

	if (h.len > 0) {
		data = malloc(h.len);
		if (!data) {
			r = -ENOMEM;
			goto fail;
		}
		r = recv_exact(sock, data, h.len, true, &st);
		if (r < 0)
			goto fail;
	}

	ret->type = h.type;
	ret->len = h.len;
	ret->data = TAKE_PTR(data);
	for (size_t i = 0; i < IPC_MAX_FDS; i++)
		ret->fds[i] = i < st.n_fds ? st.fds[i] : -1;
	ret->n_fds = st.n_fds;
	return 0;

fail:
	recv_state_close(&st);
	return r;
}

int ipc_msg_take_fd(struct ipc_msg *msg, size_t i)
{
	if (i >= msg->n_fds || msg->fds[i] < 0)
		return -EBADF;
	return TAKE_FD(msg->fds[i]);
}

void ipc_msg_done(struct ipc_msg *msg)
{
	if (!msg)
		return;
	free(msg->data);
	msg->data = NULL;
	msg->len = 0;
	for (size_t i = 0; i < msg->n_fds && i < IPC_MAX_FDS; i++)
		msg->fds[i] = safe_close(msg->fds[i]);
	msg->n_fds = 0;
}

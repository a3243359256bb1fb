/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Framed IPC between our own processes over AF_UNIX stream sockets.
 *
 * A frame is a header { uint32_t type; uint32_t len; } in host byte order
 * (both ends run on the same machine) followed by len payload bytes. Up to
 * IPC_MAX_FDS descriptors travel with the header as SCM_RIGHTS.
 *
 * The receiver names the frames it accepts in a table: type, largest
 * payload, most descriptors. Everything else is a protocol violation and
 * the connection must be dropped: an unknown type, a length over the
 * type's maximum (refused before anything is allocated), too many
 * descriptors, truncated control data, control messages other than
 * SCM_RIGHTS, descriptors anywhere but on the first byte of the header.
 * No descriptor received on a failed call stays open.
 *
 * ipc_recv() errors:
 *   -EBADMSG     the peer broke the protocol (see above)
 *   -ECONNRESET  the peer closed the connection between frames (clean end)
 *   -EPIPE       the peer closed the connection in the middle of a frame
 *   -EAGAIN      non-blocking socket (or SO_RCVTIMEO) and no frame started
 *   -ETIMEDOUT   a frame started but stalled for IPC_STALL_TIMEOUT_MS
 *   -ENOMEM, or the errno of recvmsg(2)
 * After any error but -EAGAIN the stream position is unknown: close it.
 * Do not enable SO_PASSCRED on these sockets: credentials arrive as a
 * control message and every frame would be refused.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define IPC_MAX_FDS 16
/* How long a frame that started arriving may stall on a non-blocking
 * socket (or one with a timeout) before we give up on the connection. */
#define IPC_STALL_TIMEOUT_MS 10000

struct ipc_header {
	uint32_t type;
	uint32_t len;
};

struct ipc_type {
	uint32_t type;
	uint32_t max_len; /* largest payload accepted */
	uint8_t max_fds;  /* most descriptors accepted (capped at IPC_MAX_FDS) */
};

struct ipc_msg {
	uint32_t type;
	uint32_t len;
	uint8_t *data;	      /* len bytes, NULL when len is 0 */
	int fds[IPC_MAX_FDS]; /* n_fds of them; take one by setting it to -1 */
	size_t n_fds;
};

/* An empty message: safe to pass to ipc_msg_done(). */
/* clang-format off */
#define IPC_MSG_INIT { .type = 0, .len = 0, .data = NULL, .n_fds = 0 }
/* clang-format on */

/* A connected AF_UNIX SOCK_STREAM pair, both ends close-on-exec. */
int ipc_socketpair(int ret[2]);

/*
 * Sends one frame, all of it: retries on EINTR and partial writes, waits
 * on a non-blocking socket (up to IPC_STALL_TIMEOUT_MS at a time, then
 * -ETIMEDOUT), never raises SIGPIPE (-EPIPE instead). After a failure part
 * of the frame may have been sent: close the socket. The
 * descriptors are duplicated into the peer; the caller still owns its own.
 * -EINVAL for len > UINT32_MAX or more than IPC_MAX_FDS descriptors.
 */
int ipc_send(int sock, uint32_t type, const void *data, size_t len, const int *fds, size_t n_fds);

/* Receives one frame of a type in allowed; see the error list above.
 * *ret is written only on success; release it with ipc_msg_done(). */
int ipc_recv(int sock, const struct ipc_type *allowed, size_t n_allowed, struct ipc_msg *ret);

/* Takes descriptor i out of msg (the caller then owns it); -EBADF when
 * there is none or it was taken already. */
int ipc_msg_take_fd(struct ipc_msg *msg, size_t i);

/* Frees the payload and closes the descriptors not taken. Accepts NULL and
 * can be called twice. */
void ipc_msg_done(struct ipc_msg *msg);

#define _cleanup_ipc_msg_ __attribute__((cleanup(ipc_msg_done)))

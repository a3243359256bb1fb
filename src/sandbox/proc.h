/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/sandbox: processes of a sandbox and the messages they send. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/internal.h"

/*
 * The status channel: fixed-size records from a sandbox's first process
 * (or an exec helper) to the supervisor. The sender is trusted code, but it
 * runs inside the sandbox's namespaces, so the receiver still checks every
 * field (size, magic, kind, ranges, termination).
 */
#define SBX_MSG_MAGIC 0x61726c6bu /* "arlk" */

enum sbx_msg_kind {
	SBX_MSG_STARTED = 1, /* value: host pid of the process to kill on timeout */
	SBX_MSG_READY,       /* setup finished */
	SBX_MSG_ERROR,       /* value: negative errno, text: reason */
	SBX_MSG_EXITED,      /* value: exit code */
	SBX_MSG_SIGNALED,    /* value: signal */
	SBX_MSG_KIND_MAX,
};

struct sbx_msg {
	uint32_t magic;
	uint32_t kind;
	int32_t value;
	char text[244];
};

int sbx_msg_send(int fd, enum sbx_msg_kind kind, int32_t value, const char *text);
/* 0 on a valid message, -EPIPE at end of stream, -EBADMSG on anything else. */
int sbx_msg_recv(int fd, struct sbx_msg *ret);

/* The pipes and descriptors one command runs with. */
struct sbx_stdio {
	int in[2], out[2], err[2];
};

/* supervise.c: pumps stdio, enforces the timeout and output cap, and waits
 * for the command's status on status_fd. kill_pidfd is the process whose
 * death ends everything the command started. */
int sbx_supervise(int status_fd, int kill_pidfd, const struct sbx_exec_opts *opts,
		  struct sbx_stdio *io, const struct sbx_cgroup *cg, struct sbx_result *ret,
		  struct al_error *err);

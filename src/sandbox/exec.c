/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running commands in a persistent sandbox.
 *
 * Each persistent sandbox has a keeper: a small host-root process that
 * lives in the sandbox's cgroup, is the parent of the sandbox's init, and
 * listens on <state>/<id>/control (root only). `airlock sandbox exec`
 * connects, sends one EXEC frame (the command, its environment and working
 * directory, plus the descriptors for stdin, stdout, stderr and the status
 * channel) and supervises the command itself. The keeper forks:
 *
 *   E   host root; setns() into the sandbox's mount, net, uts, ipc, cgroup
 *       and pid namespaces (already in the cgroup: no migration)
 *   E1  in the sandbox's pid namespace; unshare(pid); joins the user
 *       namespace and becomes root inside
 *   E2  pid 1 of the command's own pid namespace: starts the command,
 *       reaps, reports. Killing E (or E1) kills E2 through the parent-death
 *       signal, and with it every process the command started.
 *
 * The request comes from root on the same host, but the keeper is a
 * long-lived privileged process: it checks every frame and field anyway.
 */
#include "sandbox/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/ipc.h"

enum {
	KEEPER_EXEC = 1, /* payload: request; fds: stdin, stdout, stderr, status */
	KEEPER_OK,       /* payload: int32 host pid of E */
	KEEPER_ERR,      /* payload: reason (NUL-terminated) */
};

#define KEEPER_REQ_MAX (1024 * 1024)
#define KEEPER_MAX_ARGS 4096
#define KEEPER_RECV_TIMEOUT_S 5

int sbx_control_path(const struct sbx_paths *p, char *out, size_t size)
{
	int n = snprintf(out, size, "%s/control", p->dir);
	return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

/* ---- the request: u32 argc, u32 envc, then NUL-terminated cwd, argv, env ---- */

struct request {
	const char *cwd;
	char **argv; /* argc + 1, NULL-terminated; pointers into the payload */
	char **envp; /* envc + 1 */
};

static void request_free(struct request *r)
{
	free(r->argv);
	free(r->envp);
}

static int request_parse(const uint8_t *data, size_t len, struct request *ret)
{
	uint32_t argc, envc;
	if (len < 8)
		return -EBADMSG;
	memcpy(&argc, data, 4);
	memcpy(&envc, data + 4, 4);
	if (argc == 0 || argc > KEEPER_MAX_ARGS || envc > KEEPER_MAX_ARGS)
		return -EBADMSG;
	/* The payload must end with a NUL, so every string below is bounded. */
	if (len == 8 || data[len - 1] != '\0')
		return -EBADMSG;
	struct request r = { 0 };
	r.argv = calloc((size_t)argc + 1, sizeof(char *));
	r.envp = calloc((size_t)envc + 1, sizeof(char *));
	if (!r.argv || !r.envp) {
		request_free(&r);
		return -ENOMEM;
	}
	const char *p = (const char *)data + 8, *end = (const char *)data + len;
	size_t want = 1 + (size_t)argc + envc;
	for (size_t i = 0; i < want; i++) {
		if (p >= end) {
			request_free(&r);
			return -EBADMSG;
		}
		size_t n = strlen(p); /* bounded: the last byte is NUL */
		if (i == 0)
			r.cwd = p;
		else if (i <= argc)
			r.argv[i - 1] = (char *)p;
		else
			r.envp[i - 1 - argc] = (char *)p;
		p += n + 1;
	}
	if (p != end || r.cwd[0] != '/' || !r.argv[0][0]) {
		request_free(&r);
		return -EBADMSG;
	}
	for (uint32_t i = 0; i < envc; i++) {
		const char *eq = strchr(r.envp[i], '=');
		if (!eq || eq == r.envp[i]) {
			request_free(&r);
			return -EBADMSG;
		}
	}
	*ret = r;
	return 0;
}

static int request_build(char *const *argv, char *const *envp, const char *cwd, uint8_t **ret,
			 size_t *ret_len)
{
	uint32_t argc = 0, envc = 0;
	size_t len = 8 + strlen(cwd) + 1;
	for (; argv[argc]; argc++)
		len += strlen(argv[argc]) + 1;
	for (; envp[envc]; envc++)
		len += strlen(envp[envc]) + 1;
	if (argc == 0 || argc > KEEPER_MAX_ARGS || envc > KEEPER_MAX_ARGS || len > KEEPER_REQ_MAX)
		return -E2BIG;
	uint8_t *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, &argc, 4);
	memcpy(buf + 4, &envc, 4);
	size_t off = 8;
	const char *first[1] = { cwd };
	for (int part = 0; part < 3; part++) {
		char *const *v = part == 0 ? (char *const *)first : part == 1 ? argv : envp;
		size_t count = part == 0 ? 1 : part == 1 ? argc : envc;
		for (size_t i = 0; i < count; i++) {
			size_t n = strlen(v[i]) + 1;
			memcpy(buf + off, v[i], n);
			off += n;
		}
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* ---- E, E1, E2 ---- */

static void __attribute__((noreturn)) exec_child(int init_pidfd, const struct request *req,
						 struct sbx_stdio *io, int s, uint64_t pids,
						 const struct sbx_bpf *filter)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* E1 and E2, in the sandbox's pid namespaces, inherit this (the
	 * request, the filter and the descriptors are not in that memory). */
	int hr = sbx_hide_cmdline("airlock-init");
	if (hr < 0) {
		sbx_msg_send(s, SBX_MSG_ERROR, hr, "cannot hide the keeper's command line");
		_exit(125);
	}
	/* Still host root: this also lowers oom_score_adj_min from the
	 * keeper's -1000, so nothing inside can make itself unkillable. */
	(void)write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "0");
	if (setns(init_pidfd, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC |
				      CLONE_NEWCGROUP | CLONE_NEWPID) < 0) {
		sbx_msg_send(s, SBX_MSG_ERROR, -errno, "cannot enter the sandbox's namespaces");
		_exit(125);
	}
	/* Pipes whose write ends only the parent holds: a child sees its
	 * parent's death as a hang-up even if the parent died before the
	 * child could ask for SIGKILL on it. */
	int alive[2], ealive[2];
	if (pipe2(alive, O_CLOEXEC) < 0 || pipe2(ealive, O_CLOEXEC) < 0)
		_exit(125);
	pid_t e1 = fork();
	if (e1 < 0) {
		sbx_msg_send(s, SBX_MSG_ERROR, -errno, "fork");
		_exit(125);
	}
	if (e1 == 0) {
		/* E1: its children get a pid namespace of their own, and a mount
		 * namespace whose /proc shows that pid namespace, so that a
		 * command's pids and /proc agree. */
		close(ealive[1]);
		if (unshare(CLONE_NEWPID | CLONE_NEWNS) < 0) {
			sbx_msg_send(s, SBX_MSG_ERROR, -errno, "cannot create the command's namespaces");
			_exit(125);
		}
		pid_t e2 = fork();
		if (e2 < 0) {
			sbx_msg_send(s, SBX_MSG_ERROR, -errno, "fork");
			_exit(125);
		}
		if (e2 == 0) {
			/* E2: pid 1 of the command's pid namespace; host root for
			 * the /proc mount, then root inside. */
			close(alive[1]);
			struct al_error e = { 0 };
			if (umount2("/proc", MNT_DETACH) < 0 ||
			    sbx_rootfs_mount_proc("", &e) < 0) {
				sbx_msg_send(s, SBX_MSG_ERROR, e.code ? e.code : -errno,
					     e.code ? al_error_message(&e) : "cannot replace /proc");
				_exit(125);
			}
			int rr = sbx_become_root(init_pidfd);
			if (rr < 0) {
				sbx_msg_send(s, SBX_MSG_ERROR, rr,
					     "cannot enter the sandbox's user namespace");
				_exit(125);
			}
			close(init_pidfd);
			/* (set after the credential change, which clears it) */
			prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
			struct pollfd pa = { .fd = alive[0], .events = POLLIN };
			if (poll(&pa, 1, 0) != 0)
				_exit(125);
			close(alive[0]);
			struct sbx_command cmd = {
				.argv = req->argv,
				.envp = req->envp,
				.cwd = req->cwd,
				.pids = pids,
				.io = io,
				.status_fd = s,
				.filter = filter,
			};
			sbx_run_init(&cmd);
		}
		/* E1 itself becomes as harmless as the rest of the sandbox. */
		if (sbx_become_root(init_pidfd) < 0) {
			kill(e2, SIGKILL);
			_exit(125);
		}
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		struct pollfd pe = { .fd = ealive[0], .events = POLLIN };
		if (poll(&pe, 1, 0) != 0) {
			kill(e2, SIGKILL);
			_exit(125);
		}
		close(ealive[0]);
		close(init_pidfd);
		close(alive[0]);
		sbx_stdio_close(io);
		close(s);
		int wst;
		while (waitpid(e2, &wst, 0) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(alive[0]);
	close(alive[1]);
	close(ealive[0]);
	sbx_stdio_close(io);
	/*
	 * Wait for E1; if the client goes away first (killed, say), the
	 * command goes too: nothing of an exec outlives the one who asked.
	 */
	int e1fd = (int)syscall(SYS_pidfd_open, e1, 0);
	for (;;) {
		struct pollfd w[2] = {
			{ .fd = e1fd, .events = POLLIN },
			{ .fd = s, .events = POLLRDHUP },
		};
		if (poll(w, 2, -1) < 0 && errno != EINTR)
			break;
		if (w[0].revents)
			break;
		if (w[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
			kill(e1, SIGKILL);
			break;
		}
	}
	close(s);
	int wst;
	while (waitpid(e1, &wst, 0) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* ---- the keeper ---- */

static void keeper_reply_err(int conn, const char *why)
{
	(void)ipc_send(conn, KEEPER_ERR, why, strlen(why) + 1, NULL, 0);
}

static void keeper_serve(int conn, int listen_fd, int init_pidfd, int sfd, uint64_t pids,
			 const struct sbx_bpf *filter)
{
	struct timeval tv = { .tv_sec = KEEPER_RECV_TIMEOUT_S };
	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	static const struct ipc_type allowed[] = {
		{ .type = KEEPER_EXEC, .max_len = KEEPER_REQ_MAX, .max_fds = 4 },
	};
	_cleanup_ipc_msg_ struct ipc_msg msg = IPC_MSG_INIT;
	if (ipc_recv(conn, allowed, ARRAY_SIZE(allowed), &msg) < 0)
		return;
	if (msg.n_fds != 4) {
		keeper_reply_err(conn, "an exec request carries four descriptors");
		return;
	}
	struct request req;
	if (request_parse(msg.data, msg.len, &req) < 0) {
		keeper_reply_err(conn, "malformed exec request");
		return;
	}
	pid_t pid = fork();
	if (pid < 0) {
		request_free(&req);
		keeper_reply_err(conn, "cannot fork (is the sandbox at its pids limit?)");
		return;
	}
	if (pid == 0) {
		close(listen_fd);
		close(conn);
		close(sfd);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		/* The command-side ends: stdin's read end, the write ends. */
		struct sbx_stdio io = { .in = { msg.fds[0], -1 },
					.out = { -1, msg.fds[1] },
					.err = { -1, msg.fds[2] } };
		exec_child(init_pidfd, &req, &io, msg.fds[3], pids, filter);
	}
	request_free(&req);
	/* The client gets a pidfd, never a bare pid it would have to trust. */
	int32_t v = pid;
	int efd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (efd < 0) {
		kill(pid, SIGKILL);
		keeper_reply_err(conn, "cannot open the helper's pidfd");
		return;
	}
	(void)ipc_send(conn, KEEPER_OK, &v, sizeof(v), &efd, 1);
	close(efd);
}

void sbx_keeper_main(int listen_fd, int init_pidfd, pid_t init_pid, uint64_t pids,
		     const struct sbx_bpf *filter)
{
	/* Exec helpers that die before their children (a timeout kills them
	 * first) hand those children to us, not to the host's init. */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGPIPE);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		_exit(125);
	for (;;) {
		struct pollfd p[3] = {
			{ .fd = listen_fd, .events = POLLIN },
			{ .fd = init_pidfd, .events = POLLIN },
			{ .fd = sfd, .events = POLLIN },
		};
		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(125);
		}
		if (p[2].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
				;
			/* Reap the exec helpers, and notice the init's end. */
			pid_t done;
			while ((done = waitpid(-1, NULL, WNOHANG)) > 0)
				if (done == init_pid)
					_exit(0);
		}
		if (p[1].revents) {
			/* The sandbox is gone (destroyed, or its init died). */
			siginfo_t si;
			waitid(P_PIDFD, (id_t)init_pidfd, &si, WEXITED);
			_exit(0);
		}
		if (p[0].revents) {
			int conn = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
			if (conn >= 0) {
				keeper_serve(conn, listen_fd, init_pidfd, sfd, pids, filter);
				close(conn);
			}
		}
	}
}

/* ---- the client: `airlock sandbox exec` ---- */

int sbx_exec(const struct sbx_settings *set, const char *id, char *const *argv,
	     const struct sbx_exec_opts *opts, struct sbx_result *ret, struct al_error *err)
{
	struct sbx_state st;
	struct sbx_paths paths;
	int r = sbx_lookup(set, id, &st, &paths, err);
	if (r < 0)
		return r;
	char path[SBX_PATH_MAX];
	r = sbx_control_path(&paths, path, sizeof(path));
	if (r < 0)
		return al_error_set(err, r, "path too long");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return al_error_set(err, -ENAMETOOLONG, "socket path too long: %s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	_cleanup_close_ int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (conn < 0)
		return al_error_set_errno(err, -errno, "socket");
	if (connect(conn, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return al_error_set(err, -ESRCH, "sandbox %s is not running (destroy it or run "
				    "`airlock sandbox gc`)", id);

	struct sbx_env env = { 0 }, base = { 0 };
	r = sbx_env_read_file(&paths, &base);
	if (r >= 0)
		r = sbx_env_build(&env, base.v, base.n, opts->env, opts->n_env);
	sbx_env_free(&base);
	_cleanup_free_ uint8_t *req = NULL;
	size_t req_len = 0;
	if (r >= 0)
		r = request_build(argv, env.v, opts->cwd ? opts->cwd : "/workspace", &req, &req_len);
	sbx_env_free(&env);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot build the command's request");

	/* Before the command can start: kills after this are its (or of
	 * another command running at the same time in the same sandbox). */
	uint64_t oom_before = sbx_cgroup_oom_kills(&st.cg);
	struct sbx_stdio io;
	int chan[2] = { -1, -1 };
	r = sbx_stdio_make(&io);
	if (r >= 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) < 0)
		r = -errno;
	if (r >= 0) {
		int fds[4] = { io.in[0], io.out[1], io.err[1], chan[1] };
		r = ipc_send(conn, KEEPER_EXEC, req, req_len, fds, 4);
	}
	sbx_stdio_close_child_ends(&io);
	chan[1] = safe_close(chan[1]);
	if (r < 0) {
		sbx_stdio_close(&io);
		safe_close(chan[0]);
		return al_error_set_errno(err, r, "cannot reach the sandbox's keeper");
	}
	static const struct ipc_type replies[] = {
		{ .type = KEEPER_OK, .max_len = sizeof(int32_t), .max_fds = 1 },
		{ .type = KEEPER_ERR, .max_len = 512, .max_fds = 0 },
	};
	_cleanup_ipc_msg_ struct ipc_msg reply = IPC_MSG_INIT;
	r = ipc_recv(conn, replies, ARRAY_SIZE(replies), &reply);
	int helper = -1;
	if (r < 0) {
		al_error_set_errno(err, r, "no answer from the sandbox's keeper");
	} else if (reply.type == KEEPER_ERR) {
		bool terminated = reply.len > 0 && memchr(reply.data, '\0', reply.len);
		r = al_error_set(err, -EIO, "the sandbox refused the command: %s",
				 terminated ? (const char *)reply.data : "(no reason)");
	} else if (reply.len != sizeof(int32_t) || reply.n_fds != 1) {
		r = al_error_set(err, -EBADMSG, "malformed answer from the sandbox's keeper");
	} else {
		helper = ipc_msg_take_fd(&reply, 0);
	}
	if (r >= 0) {
		st.cg.dirfd = -1;
		struct sbx_result res;
		r = sbx_supervise(chan[0], helper, opts, &io, &st.cg, oom_before, &res, err);
		if (r >= 0)
			*ret = res;
	}
	if (helper >= 0) {
		/* After a normal end the helpers leave by themselves; otherwise
		 * whatever is left of the command goes with its helper. */
		if (r < 0 || ret->outcome == SBX_TIMED_OUT || ret->outcome == SBX_INTERRUPTED)
			syscall(SYS_pidfd_send_signal, helper, SIGKILL, NULL, 0);
		close(helper);
	}
	safe_close(chan[0]);
	sbx_stdio_close(&io);
	return r;
}

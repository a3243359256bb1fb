/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `airlock sandbox exec`: the client side of a persistent sandbox's keeper
 * (keeper.c). It sends the command, its environment and working directory
 * with the descriptors of its stdio and status channel, gets a pidfd of the
 * helper that runs it, and supervises the command itself (supervise.c).
 */
#include "sandbox/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/ipc.h"

/* prefix: bytes before the request (a terminal's window size, or struct
 * sbx_keeper_exec_as). */
static int request_build(char *const *argv, char *const *envp, const char *cwd, const void *prefix,
			 size_t prefix_len, uint8_t **ret, size_t *ret_len)
{
	uint32_t argc = 0, envc = 0;
	size_t len = prefix_len + 8 + strlen(cwd) + 1;
	for (; argv[argc]; argc++)
		len += strlen(argv[argc]) + 1;
	for (; envp[envc]; envc++)
		len += strlen(envp[envc]) + 1;
	if (argc == 0 || argc > KEEPER_MAX_ARGS || envc > KEEPER_MAX_ARGS ||
	    len - prefix_len > KEEPER_REQ_MAX)
		return -E2BIG;
	uint8_t *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, prefix, prefix_len);
	memcpy(buf + prefix_len, &argc, 4);
	memcpy(buf + prefix_len + 4, &envc, 4);
	size_t off = prefix_len + 8;
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

/* ---- the client: `airlock sandbox exec` ---- */

/*
 * opts->user as ids, names looked up in the running sandbox's own
 * /etc/passwd and /etc/group (its root, as its init has it: whatever the
 * sandbox made of them, every link resolved inside it).
 */
static int exec_user(const struct sbx_state *st, const char *id, const char *text,
		     struct sbx_user *ret, struct al_error *err)
{
	if (!sbx_user_syntax_valid(text))
		return sbx_user_resolve(-1, text, ret, err); /* its message */
	_cleanup_close_ int pidfd = sbx_state_pidfd(st);
	if (pidfd < 0)
		return al_error_set(err, -ESRCH,
				    "sandbox %s is not running (destroy it or run "
				    "`airlock sandbox gc`)",
				    id);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/root", (int)st->init_pid);
	_cleanup_close_ int root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	/* Still the same process: the root is the sandbox's. */
	if (root < 0 || syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0)
		return al_error_set(err, -ESRCH, "sandbox %s is not running", id);
	return sbx_user_resolve(root, text, ret, err);
}

int sbx_exec(const struct sbx_settings *set, const char *id, char *const *argv,
	     const struct sbx_exec_opts *opts, struct sbx_result *ret, struct al_error *err)
{
	int none = -1;
	return sbx_exec_notify(set, id, argv, opts, &none, ret, err);
}

int sbx_exec_notify(const struct sbx_settings *set, const char *id, char *const *argv,
		    const struct sbx_exec_opts *opts, int *notify, struct sbx_result *ret,
		    struct al_error *err)
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
		return al_error_set(err, -ESRCH,
				    "sandbox %s is not running (destroy it or run "
				    "`airlock sandbox gc`)",
				    id);

	/* --user: who, and the terminal, before the request. */
	struct sbx_keeper_exec_as as = { .tty = opts->tty };
	if (opts->user) {
		struct sbx_user u;
		r = exec_user(&st, id, opts->user, &u, err);
		if (r < 0)
			return r;
		as.uid = u.uid;
		as.gid = u.gid;
		if (opts->tty) {
			as.rows = opts->rows;
			as.cols = opts->cols;
		}
	}

	struct sbx_env env = { 0 }, base = { 0 };
	r = sbx_env_read_file(&paths, &base);
	if (r >= 0)
		r = sbx_env_build(&env, NULL, base.v, base.n, opts->env, opts->n_env);
	sbx_env_free(&base);
	_cleanup_free_ uint8_t *req = NULL;
	size_t req_len = 0;
	uint16_t winsize[2] = { opts->rows, opts->cols };
	if (r >= 0 && opts->user)
		r = request_build(argv, env.v, opts->cwd ? opts->cwd : "/workspace",
				  (const void *)&as, sizeof(as), &req, &req_len);
	else if (r >= 0)
		r = request_build(argv, env.v, opts->cwd ? opts->cwd : "/workspace", winsize,
				  opts->tty ? sizeof(winsize) : 0, &req, &req_len);
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
		int type = opts->user ? KEEPER_EXEC_AS : opts->tty ? KEEPER_EXEC_TTY : KEEPER_EXEC;
		r = ipc_send(conn, type, req, req_len, fds, 4);
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
	if (r >= 0 && *notify >= 0) {
		(void)write_full(*notify, "k", 1);
		*notify = safe_close(*notify);
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
		/* Gone before we return (it leaves once the command's init is
		 * reaped; bounded all the same), so that a command that ended
		 * leaves the keeper no live child (sbx_relayer's check). */
		struct pollfd hp = { .fd = helper, .events = POLLIN };
		while (poll(&hp, 1, 1000) < 0 && errno == EINTR)
			;
		close(helper);
	}
	safe_close(chan[0]);
	sbx_stdio_close(&io);
	return r;
}

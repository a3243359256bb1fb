/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keeper of a persistent sandbox, and the helpers it forks for `exec`.
 *
 * The keeper is a small host-root process that lives in the sandbox's
 * cgroup, is the parent of the sandbox's init, and listens on
 * <state>/<id>/control (root only). `airlock sandbox exec` (exec.c)
 * connects, sends one EXEC frame (the command, its environment and working
 * directory, plus the descriptors for stdin, stdout, stderr and the status
 * channel) and supervises the command itself.
 *
 * The keeper joins the sandbox's pid namespace for its children once the
 * init is up, so for each exec it forks one helper straight into it:
 *
 *   helper  setns() into the sandbox's mount, net, uts, ipc and cgroup
 *           namespaces (already in the cgroup: no migration); unshare(pid,
 *           mnt) for the command; becomes root inside and waits, ending
 *           the command if the client goes away
 *   init    pid 1 of the command's own pid namespace, with its own /proc:
 *           starts the command, reaps, reports. Killing the helper kills
 *           it through the parent-death signal, and with it every process
 *           the command started.
 *
 * It also says how long no command has run (KEEPER_ACTIVITY, for
 * `create --idle`: expiry.c), its live children being the truth for
 * whether one runs, and once idle past a limit it was asked about it
 * refuses every later command: the sandbox is being destroyed.
 *
 * The request comes from root on the same host, but the keeper is a
 * long-lived privileged process: it checks every frame and field anyway.
 */
#include "sandbox/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/ipc.h"

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

/* ---- the exec helper and the command's init ---- */

/*
 * The exec helper, forked by the keeper straight into the sandbox's pid
 * namespace (the keeper joined it for its children). It enters the other
 * namespaces, makes the command's own pid and mount namespaces, and forks
 * their pid 1, which mounts a /proc for them, becomes root inside and runs
 * the command. The helper becomes root inside too, and stays to end the
 * command should the client go away. Killing the helper (the client's
 * timeout does) kills the command's init, hence every process it started.
 */
static void __attribute__((noreturn))
exec_helper(int init_pidfd, const struct sbx_argarea *area, const struct request *req,
	    struct sbx_stdio *io, int s, uint64_t pids, const struct sbx_bpf *filter,
	    const uint16_t *winsize, struct sbx_user user)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* The keeper's memory: its arguments are wiped already; the title is
	 * what the command's /proc/1/cmdline shows. */
	sbx_argarea_wipe(area, "airlock-init");
	/* Still host root: this also lowers oom_score_adj_min from the
	 * keeper's -1000, so nothing inside can make itself unkillable. */
	(void)write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "0");
	if (setns(init_pidfd,
		  CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP) < 0) {
		sbx_msg_send(s, SBX_MSG_ERROR, -errno, "cannot enter the sandbox's namespaces");
		_exit(125);
	}
	/* Its children get a pid namespace of their own, and a mount namespace
	 * whose /proc shows that pid namespace, so that a command's pids and
	 * /proc agree. */
	if (unshare(CLONE_NEWPID | CLONE_NEWNS) < 0) {
		sbx_msg_send(s, SBX_MSG_ERROR, -errno, "cannot create the command's namespaces");
		_exit(125);
	}
	/* A pipe whose write end only this helper holds: the command's init
	 * sees the helper's death as a hang-up even if the helper died before
	 * the init could ask for SIGKILL on it. */
	int alive[2];
	if (pipe2(alive, O_CLOEXEC) < 0)
		_exit(125);
	pid_t e2 = fork();
	if (e2 < 0) {
		sbx_msg_send(s, SBX_MSG_ERROR, -errno, "fork");
		_exit(125);
	}
	if (e2 == 0) {
		/* pid 1 of the command's pid namespace; host root for the /proc
		 * mount (over the sandbox's: nothing to unmount), then root
		 * inside. */
		close(alive[1]);
		struct al_error e = { 0 };
		if (sbx_rootfs_mount_proc("", &e) < 0) {
			sbx_msg_send(s, SBX_MSG_ERROR, e.code, al_error_message(&e));
			_exit(125);
		}
		int rr = sbx_become_root(init_pidfd, true);
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
			.tty = winsize != NULL,
			.rows = winsize ? winsize[0] : 0,
			.cols = winsize ? winsize[1] : 0,
			.uid = user.uid,
			.gid = user.gid,
		};
		sbx_run_init(&cmd);
	}
	/* The helper itself becomes as harmless as the rest of the sandbox (it
	 * never execs: its bounding set does not matter). */
	if (sbx_become_root(init_pidfd, false) < 0) {
		kill(e2, SIGKILL);
		_exit(125);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* The keeper is in an ancestor pid namespace: while it lives our
	 * parent's pid reads 0 here; had it died first, we would belong to the
	 * sandbox's init now. */
	if (getppid() != 0) {
		kill(e2, SIGKILL);
		_exit(125);
	}
	close(init_pidfd);
	close(alive[0]);
	sbx_stdio_close(io);
	/*
	 * Wait for the command's init; if the client goes away first (killed,
	 * say), the command goes too: nothing of an exec outlives the one who
	 * asked.
	 */
	int e2fd = (int)syscall(SYS_pidfd_open, e2, 0);
	for (;;) {
		struct pollfd w[2] = {
			{ .fd = e2fd, .events = POLLIN },
			{ .fd = s, .events = POLLRDHUP },
		};
		if (poll(w, 2, -1) < 0 && errno != EINTR)
			break;
		if (w[0].revents)
			break;
		if (w[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
			/* Gone without waiting for it: the command's init
			 * may not have become root inside yet (a kill from
			 * here would then be refused), but it dies with its
			 * parent either way (its parent-death signal, or the
			 * hang-up of the pipe only we hold before that). */
			kill(e2, SIGKILL);
			_exit(0);
		}
	}
	close(s);
	int wst;
	while (waitpid(e2, &wst, 0) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* ---- the keeper ---- */

static void keeper_reply_err(int conn, const char *why)
{
	(void)ipc_send(conn, KEEPER_ERR, why, strlen(why) + 1, NULL, 0);
}

/*
 * What the keeper knows of the sandbox's use, for --idle (expiry.c asks):
 * when it last reaped an exec helper (or started, or saw a command
 * running), on CLOCK_BOOTTIME: setting the wall clock moves nothing, and
 * time suspended counts as it does for people.
 */
struct keeper_activity {
	uint64_t last_ms;
	bool closed;		  /* idle past a limit it was asked about: refuses the rest */
	uint64_t closed_after_ms; /* that limit */
};

/* Reaps the children that are gone (exec helpers: each marks activity);
 * true when the sandbox's init was one of them. */
static bool keeper_reap(pid_t init_pid, struct keeper_activity *act)
{
	bool init_gone = false;
	pid_t done;
	while ((done = waitpid(-1, NULL, WNOHANG)) > 0) {
		if (done == init_pid)
			init_gone = true;
		else
			act->last_ms = sbx_boot_ms();
	}
	return init_gone;
}

/* KEEPER_ACTIVITY: how long nothing has run; closes the sandbox to every
 * later request when asked to and it has been idle long enough. */
static void keeper_activity(int conn, pid_t init_pid, const struct ipc_msg *msg,
			    struct keeper_activity *act)
{
	struct sbx_keeper_activity_req req;
	if (msg->len != sizeof(req) || msg->n_fds != 0) {
		keeper_reply_err(conn, "malformed activity request");
		return;
	}
	memcpy(&req, msg->data, sizeof(req));
	if (req.close_after_ms > SBX_EXPIRY_MAX_MS) {
		keeper_reply_err(conn, "malformed activity request");
		return;
	}
	/* A helper that ended and is not reaped yet ended by now at the
	 * latest: reaped first, it counts from now rather than from an
	 * earlier end. */
	if (keeper_reap(init_pid, act))
		_exit(0);
	int idle = sbx_keeper_sandbox_idle(init_pid);
	if (idle < 0) {
		keeper_reply_err(conn, "cannot list the sandbox's processes");
		return;
	}
	uint64_t now = sbx_boot_ms();
	if (idle == 0)
		act->last_ms = now; /* seen running now */
	struct sbx_keeper_idle rep = {
		.idle_ms = idle && now > act->last_ms ? now - act->last_ms : 0,
		.busy = idle == 0,
	};
	if (!act->closed && req.close_after_ms && idle && rep.idle_ms >= req.close_after_ms) {
		act->closed = true;
		act->closed_after_ms = req.close_after_ms;
	}
	rep.closed = act->closed;
	rep.closed_after_ms = act->closed ? act->closed_after_ms : 0;
	(void)ipc_send(conn, KEEPER_IDLE, &rep, sizeof(rep), NULL, 0);
}

/*
 * KEEPER_EXEC_AS: who runs the command, and whether it has a terminal;
 * then the request. Every field is checked: ids of the sandbox's range,
 * tty 0 or 1, a window size only with a terminal.
 */
static int exec_as_parse(const struct ipc_msg *msg, struct sbx_user *ret_user, bool *ret_tty,
			 uint16_t *ret_winsize)
{
	struct sbx_keeper_exec_as h;
	if (msg->len < sizeof(h))
		return -EBADMSG;
	memcpy(&h, msg->data, sizeof(h));
	if (h.uid > SBX_USER_ID_MAX || h.gid > SBX_USER_ID_MAX || h.tty > 1 ||
	    (!h.tty && (h.rows || h.cols)))
		return -EBADMSG;
	*ret_user = (struct sbx_user){ .uid = h.uid, .gid = h.gid };
	*ret_tty = h.tty;
	ret_winsize[0] = h.rows;
	ret_winsize[1] = h.cols;
	return 0;
}

static void keeper_serve(int conn, int listen_fd, int init_pidfd, pid_t init_pid, int sfd,
			 const struct sbx_argarea *area, uint64_t pids,
			 const struct sbx_bpf *filter, const char *stage,
			 struct keeper_activity *act, const struct sbx_user *user)
{
	struct timeval tv = { .tv_sec = KEEPER_RECV_TIMEOUT_S };
	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	static const struct ipc_type allowed[] = {
		{ .type = KEEPER_EXEC, .max_len = KEEPER_REQ_MAX, .max_fds = 4 },
		{ .type = KEEPER_EXEC_TTY, .max_len = 4 + KEEPER_REQ_MAX, .max_fds = 4 },
		{ .type = KEEPER_EXEC_AS,
		  .max_len = sizeof(struct sbx_keeper_exec_as) + KEEPER_REQ_MAX,
		  .max_fds = 4 },
		{ .type = KEEPER_RELAYER, .max_len = 128, .max_fds = IPC_MAX_FDS },
		{ .type = KEEPER_ACTIVITY,
		  .max_len = sizeof(struct sbx_keeper_activity_req),
		  .max_fds = 0 },
	};
	_cleanup_ipc_msg_ struct ipc_msg msg = IPC_MSG_INIT;
	if (ipc_recv(conn, allowed, ARRAY_SIZE(allowed), &msg) < 0)
		return;
	if (msg.type == KEEPER_ACTIVITY) {
		keeper_activity(conn, init_pid, &msg, act);
		return;
	}
	/* Idle past its --idle: it is being destroyed, and nothing may start
	 * in it meanwhile (a command started now would be killed with it). */
	if (act->closed) {
		char lim[32], why[128];
		sbx_duration_format(act->closed_after_ms, lim, sizeof(lim));
		snprintf(why, sizeof(why),
			 "it has been idle for %s (--idle) and is being destroyed", lim);
		keeper_reply_err(conn, why);
		return;
	}
	/* A failed new layer may have left the sandbox without its
	 * workspace: nothing runs in it any more (it is to be destroyed). */
	static bool broken;
	if (broken) {
		keeper_reply_err(conn, "the sandbox lost its workspace to a failed new layer: "
				       "destroy it");
		return;
	}
	if (msg.type == KEEPER_RELAYER) {
		const int mine[] = { listen_fd, sfd };
		if (sbx_relayer_serve(conn, init_pidfd, init_pid, stage, &msg, mine,
				      ARRAY_SIZE(mine), user) < 0)
			broken = true;
		return;
	}
	if (msg.n_fds != 4) {
		keeper_reply_err(conn, "an exec request carries four descriptors");
		return;
	}
	/* With a terminal: its window size (u16 rows, u16 cols) first; as
	 * another user than the sandbox's: who, and the terminal, first. */
	uint16_t winsize[2] = { 0, 0 };
	struct sbx_user as = *user;
	bool tty = msg.type == KEEPER_EXEC_TTY;
	size_t skip = tty ? sizeof(winsize) : 0;
	if (msg.type == KEEPER_EXEC_AS) {
		skip = sizeof(struct sbx_keeper_exec_as);
		if (exec_as_parse(&msg, &as, &tty, winsize) < 0) {
			keeper_reply_err(conn, "malformed exec request");
			return;
		}
	} else if (msg.len < skip) {
		keeper_reply_err(conn, "malformed exec request");
		return;
	} else if (skip) {
		memcpy(winsize, msg.data, skip);
	}
	struct request req;
	if (request_parse((const uint8_t *)msg.data + skip, msg.len - skip, &req) < 0) {
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
		exec_helper(init_pidfd, area, &req, &io, msg.fds[3], pids, filter,
			    tty ? winsize : NULL, as);
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

/* Runs until the sandbox's init (init_pidfd) exits, serving exec requests
 * on listen_fd. */
static void __attribute__((noreturn))
keeper_main(int listen_fd, int init_pidfd, pid_t init_pid, const struct sbx_argarea *area,
	    uint64_t pids, const struct sbx_bpf *filter, const char *stage,
	    const struct sbx_user *user)
{
	/* Children of ours that die before theirs are reaped here rather
	 * than by the host's init. (A command's init whose helper dies goes to
	 * the sandbox's init, the reaper of the helper's pid namespace.) */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGPIPE);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		_exit(125);
	/* Idle from the start: a sandbox no command ever ran in is idle since
	 * its creation. */
	struct keeper_activity act = { .last_ms = sbx_boot_ms() };
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
			if (keeper_reap(init_pid, &act))
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
				keeper_serve(conn, listen_fd, init_pidfd, init_pid, sfd, area, pids,
					     filter, stage, &act, user);
				close(conn);
			}
		}
	}
}

/* ---- starting the keeper ---- */

/*
 * The keeper, from its first instruction: waits until the creator has put
 * it in the sandbox's cgroup, clones the init, passes its listeners on,
 * reports the init's pid and start time, waits until the creator has
 * recorded the sandbox, then serves exec requests.
 */
static void __attribute__((noreturn))
keeper_child(const struct sbx_init_args *a, const char *stage, int lfd, int rep, int go_fd)
{
	char c;
	ssize_t n;
	while ((n = read(go_fd, &c, 1)) < 0 && errno == EINTR)
		;
	if (n != 1)
		_exit(125);
	/* Nothing of the supervisor's stays open here: above all not the
	 * sandbox's lock, which would then be held for the keeper's life. */
	int keep[8 + 2 * 16] = { 0, 1, 2, lfd, rep, go_fd, a->userns_fd, a->ws_userns_fd };
	size_t n_keep = 8 + sbx_rootfs_plan_fds(a->plan, keep + 8, ARRAY_SIZE(keep) - 8);
	if (close_all_fds_except(keep, n_keep) < 0)
		_exit(125);
	setsid();
	/* The keeper must outlive any memory pressure inside. */
	(void)write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "-1000");
	int ipidfd = -1, chan = -1, go = -1;
	pid_t ipid = sbx_init_spawn(a, false, -1, true, &ipidfd, &chan, &go);
	if (ipid < 0) {
		sbx_msg_send(rep, SBX_MSG_ERROR, ipid, "cannot create the sandbox's namespaces");
		_exit(125);
	}
	if (write(go, "g", 1) != 1)
		_exit(125);
	close(go);
	struct al_error e = { 0 };
	if (a->spec->network != SBX_NETWORK_NONE) {
		/* Passed on to the creator; the keeper keeps no copy. */
		struct sbx_net_fds l;
		if (sbx_init_recv_listeners(chan, &l, &e) < 0) {
			sbx_msg_send(rep, SBX_MSG_ERROR, e.code, al_error_message(&e));
			kill(ipid, SIGKILL);
			_exit(125);
		}
		int sr = sbx_msg_send_listeners(rep, &l);
		sbx_net_fds_close(&l);
		if (sr < 0) {
			kill(ipid, SIGKILL);
			_exit(125);
		}
	}
	if (sbx_init_recv_ready(chan, &e) < 0) {
		sbx_msg_send(rep, SBX_MSG_ERROR, e.code, al_error_message(&e));
		kill(ipid, SIGKILL);
		_exit(125);
	}
	/* The init has everything it needs: the host's descriptors go. */
	close(a->userns_fd);
	safe_close(a->ws_userns_fd);
	int plan_fds[2 * 16];
	size_t n_plan = sbx_rootfs_plan_fds(a->plan, plan_fds, ARRAY_SIZE(plan_fds));
	for (size_t i = 0; i < n_plan; i++)
		close(plan_fds[i]);
	close(chan);
	/* The init is our unreaped child: its pid cannot be reused
	 * before we read its start time and report both. */
	uint64_t istart;
	char text[32];
	if (sbx_proc_starttime(ipid, &istart) < 0) {
		sbx_msg_send(rep, SBX_MSG_ERROR, -ESRCH, "the sandbox's init died");
		kill(ipid, SIGKILL);
		_exit(125);
	}
	snprintf(text, sizeof(text), "%" PRIu64, istart);
	sbx_msg_send(rep, SBX_MSG_STARTED, ipid, text);
	close(rep);
	/* Not a sandbox until the supervisor has recorded it: should it
	 * die or fail first, nothing may be left running unrecorded. */
	while ((n = read(go_fd, &c, 1)) < 0 && errno == EINTR)
		;
	if (n != 1 || c != 'c') {
		kill(ipid, SIGKILL);
		_exit(125);
	}
	close(go_fd);
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull >= 0) {
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(devnull, 2);
	}
	/* Every later child (the exec helpers) is born in the sandbox's pid
	 * namespace: no helper of ours has to enter it. */
	if (setns(ipidfd, CLONE_NEWPID) < 0) {
		kill(ipid, SIGKILL);
		_exit(125);
	}
	/* The creator's command line (--env values, paths) is not shown for
	 * the keeper's whole life, not even to the host's other users. */
	uint64_t pids = a->spec->pids;
	struct sbx_argarea area;
	if (sbx_argarea_get(&area) < 0) {
		kill(ipid, SIGKILL);
		_exit(125);
	}
	sbx_argarea_wipe(&area, "airlock-keeper");
	keeper_main(lfd, ipidfd, ipid, &area, pids, a->filter, stage, &a->user);
}

int sbx_keeper_spawn(const struct sbx_init_args *a, const struct sbx_paths *p,
		     const struct sbx_cgroup *cg, struct sbx_keeper_start *ret,
		     struct al_error *err)
{
	char path[SBX_PATH_MAX];
	int r = sbx_control_path(p, path, sizeof(path));
	if (r < 0)
		return al_error_set(err, r, "state directory path too long");
	_cleanup_close_ int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return al_error_set_errno(err, -errno, "socket");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return al_error_set(err, -ENAMETOOLONG,
				    "state directory path too long for a socket: %s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	mode_t old = umask(0077);
	r = bind(lfd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || listen(lfd, 16) < 0)
		return al_error_set_errno(err, -errno, "cannot listen on %s", path);

	/* rep: keeper to creator; a socket, for the listeners' descriptors. */
	int rep[2], kgo[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, rep) < 0)
		return al_error_set_errno(err, -errno, "socketpair");
	if (pipe2(kgo, O_CLOEXEC) < 0) {
		r = -errno;
		close(rep[0]);
		close(rep[1]);
		return al_error_set_errno(err, r, "pipe");
	}
	int kpidfd = -1;
	pid_t kpid = sbx_clone3_fork(0, &kpidfd, cg->v2 ? cg->dirfd : -1);
	if (kpid < 0) {
		r = -errno;
		close(rep[0]);
		close(rep[1]);
		close(kgo[0]);
		close(kgo[1]);
		return al_error_set_errno(err, r, "cannot start the sandbox's keeper");
	}
	if (kpid == 0) {
		close(rep[0]);
		close(kgo[1]);
		keeper_child(a, p->root, lfd, rep[1], kgo[0]);
	}
	close(rep[1]);
	close(kgo[0]);
	*ret = (struct sbx_keeper_start){
		.pid = kpid, .pidfd = kpidfd, .rep = rep[0], .go = kgo[1]
	};
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The caller's side of the gateway process: start it (fork, then exec of
 * GW_HELPER with nothing but its socket, /dev/null and the log), hand it
 * its options, attach sandboxes, change a policy, stop it. libc alone:
 * whoever starts sandboxes links this without OpenSSL, libevent and the
 * rest of the gateway (see gateway.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/ipc.h"
#include "common/libexec.h"
#include "common/parse.h"
#include "gateway/budget.h"
#include "gateway/handover.h"
#include "gateway/internal.h"

#define START_TIMEOUT_MS 10000

extern char **environ;

int gw_uid_from_env(uint32_t *ret, struct al_error *err)
{
	const char *s = getenv("AIRLOCK_GATEWAY_UID");
	if (!s || !*s) {
		*ret = GW_DEFAULT_UID;
		return 0;
	}
	uint64_t v;
	if (parse_u64_dec_hex(s, &v) < 0 || v == 0 || v >= UINT32_MAX)
		return al_error_set(err, -EINVAL,
				    "AIRLOCK_GATEWAY_UID must be a uid from 1 to 4294967294, "
				    "decimal or 0x hex (the gateway's own, used by nothing else)");
	*ret = (uint32_t)v;
	return 0;
}

int gw_uid_check(uint32_t uid, uint32_t first, uint32_t end, struct al_error *err)
{
	if (uid >= first && uid < end)
		return al_error_set(
			err, -EINVAL,
			"the gateway's uid %#x (AIRLOCK_GATEWAY_UID, default %#x) is inside "
			"the sandboxes' uids %#x-%#x (from AIRLOCK_UID_BASE): a sandbox's "
			"process could run as the gateway's user; set AIRLOCK_GATEWAY_UID or "
			"AIRLOCK_UID_BASE so that it is not",
			uid, GW_DEFAULT_UID, first, end - 1);
	return 0;
}

/* The variables the gateway process keeps: its log's and the sanitizers'
 * (of a sanitized build). Nothing else of the caller's environment. */
static const char *const kept_env[] = {
	"AIRLOCK_LOG_LEVEL=", "AIRLOCK_LOG_FORMAT=", "ASAN_OPTIONS=",
	"UBSAN_OPTIONS=",     "LSAN_OPTIONS=",	     "TSAN_OPTIONS=",
};

static void gateway_env(const char **out, size_t cap)
{
	size_t n = 0;
	for (char **e = environ; e && *e && n + 1 < cap; e++)
		for (size_t i = 0; i < ARRAY_SIZE(kept_env); i++)
			if (strncmp(*e, kept_env[i], strlen(kept_env[i])) == 0) {
				out[n++] = *e;
				break;
			}
	out[n] = NULL;
}

/* Between fork and exec: the process gets /dev/null as stdin and stdout,
 * the log as stderr, its socket at GW_PROCESS_FD and nothing else. When
 * the exec fails the reason goes back as the gateway's error. */
static void __attribute__((noreturn))
exec_gateway(int exe, const char *path, int sock, const struct gw_start_opts *so, pid_t parent,
	     const char **envp)
{
	if (!so->detach) {
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (getppid() != parent)
			_exit(1);
	} else {
		setsid();
	}
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		_exit(1);
	/* Out of the way of 0 to 3 first, so no dup2 below clobbers another. */
	int s = fcntl(sock, F_DUPFD_CLOEXEC, 10);
	int x = fcntl(exe, F_DUPFD_CLOEXEC, 10);
	int l = fcntl(so->log_fd >= 0 ? so->log_fd : devnull, F_DUPFD_CLOEXEC, 10);
	if (s < 0 || x < 0 || l < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 ||
	    dup2(l, 2) < 0 || dup2(s, GW_PROCESS_FD) < 0)
		_exit(1);
	int keep[] = { 0, 1, 2, GW_PROCESS_FD, x };
	if (close_all_fds_except(keep, ARRAY_SIZE(keep)) < 0)
		_exit(1);
	/* Nothing the caller blocked or ignored carries over. */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	char *argv[] = { (char *)"airlock-gw", (char *)GW_PROCESS_ARG, NULL };
	syscall(SYS_execveat, x, "", argv, (char *const *)envp, AT_EMPTY_PATH);
	int e = errno;
	char msg[LIBEXEC_PATH_MAX + 128];
	snprintf(msg, sizeof(msg), "cannot run the gateway (%s): %s", path, al_strerror(e));
	ipc_send(GW_PROCESS_FD, GW_IPC_ERROR, msg, strlen(msg), NULL, 0);
	_exit(1);
}

/* The gateway's answer of type want, or its error (or death) as err. */
static int recv_reply(int sock, uint32_t want, struct ipc_msg *m, size_t max_len,
		      struct al_error *err, const char *what)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	int n;
	while ((n = poll(&p, 1, START_TIMEOUT_MS)) < 0 && errno == EINTR)
		;
	if (n == 0)
		return al_error_set(err, -ETIMEDOUT, "the gateway did not answer (%s)", what);
	const struct ipc_type types[] = { { want, (uint32_t)max_len, 0 },
					  { GW_IPC_ERROR, 4096, 0 } };
	int r = ipc_recv(sock, types, ARRAY_SIZE(types), m);
	if (r < 0)
		return al_error_set(err, -EIO, "the gateway died (%s)", what);
	if (m->type == GW_IPC_ERROR) {
		char msg[4097];
		size_t len = m->len < 4096 ? m->len : 4096;
		memcpy(msg, m->data ? (const char *)m->data : "", len);
		msg[len] = '\0';
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)msg[i] < 0x20)
				msg[i] = ' ';
		ipc_msg_done(m);
		return al_error_set(err, -EIO, "%s", msg);
	}
	return 0;
}

static void proc_free(struct gw_proc *gp)
{
	if (gp->ctl >= 0)
		close(gp->ctl);
	if (gp->pidfd >= 0)
		close(gp->pidfd);
	free(gp->ca_pem);
	if (gp->env)
		for (size_t i = 0; i < gp->n_env; i++)
			free(gp->env[i]);
	free(gp->env);
	memset(gp, 0, sizeof(*gp));
	gp->ctl = gp->pidfd = -1;
}

/* The READY frame's certificate and environment, copied into gp. */
static int take_ready(struct gw_proc *gp, const struct ipc_msg *m, struct al_error *err)
{
	struct gw_ready rd;
	if (gw_ready_decode(m->data, m->len, &rd) < 0)
		return al_error_set(err, -EBADMSG, "the gateway's answer was malformed");
	gp->ca_pem = malloc(rd.pem_len + 1);
	gp->env = calloc(rd.n_env + 1, sizeof(char *));
	if (!gp->ca_pem || !gp->env)
		return al_error_set(err, -ENOMEM, "out of memory");
	memcpy(gp->ca_pem, rd.pem, rd.pem_len);
	gp->ca_pem[rd.pem_len] = '\0';
	gp->ca_pem_len = rd.pem_len;
	for (size_t i = 0; i < rd.n_env; i++) {
		gp->env[i] = strdup(rd.env[i]);
		if (!gp->env[i])
			return al_error_set(err, -ENOMEM, "out of memory");
		gp->n_env++;
	}
	return 0;
}

int gw_start(const struct gw_options *opts, const struct gw_start_opts *so, struct gw_proc *ret,
	     struct al_error *err)
{
	uint32_t uid = so->uid;
	int r = uid ? 0 : gw_uid_from_env(&uid, err);
	if (r < 0)
		return r;
	r = gw_uid_check(uid, so->sandbox_uid_first, so->sandbox_uid_end, err);
	if (r < 0)
		return r;
	pid_t parent = getpid();
	struct gw_handover h = {
		.opts = *opts,
		.uid = uid,
		.sandbox_uid_first = so->sandbox_uid_end ? so->sandbox_uid_first : 0,
		.sandbox_uid_end = so->sandbox_uid_end,
		.detach = so->detach,
		.parent = so->detach ? 0 : (uint32_t)parent,
		.env_bundle = so->env_bundle,
		.env_ca = so->env_ca,
	};
	_cleanup_buf_ struct buf frame = BUF_INIT(GW_HANDOVER_MAX);
	r = gw_handover_encode(&h, &frame);
	if (r == -E2BIG || r == -ENOBUFS)
		return al_error_set(err, -E2BIG,
				    "the gateway's options are too many or too long (at most %d of "
				    "each list, %d bytes each)",
				    GW_HANDOVER_LIST_MAX, GW_HANDOVER_STR_MAX - 1);
	if (r < 0)
		return al_error_set_errno(err, r, "bad gateway options");

	char path[LIBEXEC_PATH_MAX];
	_cleanup_close_ int exe = libexec_open(GW_HELPER, path, err);
	if (exe < 0)
		return exe;
	const char *envp[ARRAY_SIZE(kept_env) + 1];
	gateway_env(envp, ARRAY_SIZE(envp));
	int sp[2];
	if (ipc_socketpair(sp) < 0)
		return al_error_set_errno(err, -errno, "socketpair");
	pid_t pid = fork();
	if (pid < 0) {
		r = -errno;
		close(sp[0]);
		close(sp[1]);
		return al_error_set_errno(err, r, "cannot start the gateway");
	}
	if (pid == 0) {
		close(sp[0]);
		exec_gateway(exe, path, sp[1], so, parent, envp);
	}
	close(sp[1]);
	memset(ret, 0, sizeof(*ret));
	ret->pid = pid;
	ret->ctl = sp[0];
	ret->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	/* Non-blocking: a gateway that stops reading cannot hold us forever
	 * (ipc_send waits a bounded time for room). */
	r = fd_set_nonblock(sp[0], true);
	if (r < 0) {
		gw_stop(ret);
		return al_error_set_errno(err, r, "cannot start the gateway");
	}
	int sr = ipc_send(sp[0], GW_IPC_HANDOVER, frame.data, frame.len, NULL, 0);
	struct ipc_msg m = IPC_MSG_INIT;
	/* Whether or not it took all of it, its own reason (an exec that
	 * failed, a bad option) is the one to give. */
	r = recv_reply(sp[0], GW_IPC_READY, &m, GW_READY_MAX, err, "starting");
	if (r == 0 && sr < 0)
		r = al_error_set_errno(err, sr, "cannot reach the gateway");
	if (r == 0)
		r = take_ready(ret, &m, err);
	ipc_msg_done(&m);
	if (r < 0) {
		gw_stop(ret);
		return r;
	}
	return 0;
}

int gw_attach_encode(const struct gw_attach *a, uint8_t *payload, size_t *ret_len, int *fds,
		     size_t *ret_n_fds)
{
	size_t idlen = strnlen(a->id, sizeof(a->id));
	if (idlen == 0 || idlen > GW_SANDBOX_ID_MAX)
		return -EINVAL;
	size_t n = 0;
	payload[0] = 0;
	for (int i = 0; i < GW_SLOTS; i++)
		if (a->fd[i] >= 0) {
			payload[0] |= (uint8_t)(1u << i);
			fds[n++] = a->fd[i];
		}
	memcpy(payload + 1, a->id, idlen);
	*ret_len = 1 + idlen;
	*ret_n_fds = n;
	return 0;
}

int gw_attach_decode(struct ipc_msg *m, struct gw_attach *ret)
{
	if (m->len < 2 || m->len > 1 + GW_SANDBOX_ID_MAX)
		return -EBADMSG;
	uint8_t mask = m->data[0];
	if (mask >> GW_SLOTS)
		return -EBADMSG;
	size_t want = (size_t)__builtin_popcount(mask);
	if (want != m->n_fds)
		return -EBADMSG;
	if (memchr(m->data + 1, '\0', m->len - 1))
		return -EBADMSG;
	struct gw_attach a;
	memcpy(a.id, m->data + 1, m->len - 1);
	a.id[m->len - 1] = '\0';
	size_t k = 0;
	for (int i = 0; i < GW_SLOTS; i++)
		a.fd[i] = (mask & (1u << i)) ? ipc_msg_take_fd(m, k++) : -1;
	*ret = a;
	return 0;
}

int gw_attach(struct gw_proc *gp, const char *sandbox_id, const struct gw_listeners *l,
	      int audit_fd, int watch_pidfd, struct al_error *err)
{
	struct gw_attach a = { .fd = {
				       [GW_SLOT_PROXY] = l->proxy,
				       [GW_SLOT_HTTP] = l->http,
				       [GW_SLOT_HTTPS] = l->https,
				       [GW_SLOT_DNS] = l->dns,
				       [GW_SLOT_AUDIT] = audit_fd,
				       [GW_SLOT_WATCH] = watch_pidfd,
				       [GW_SLOT_CONTROL] = l->control,
			       } };
	if (strlen(sandbox_id) > GW_SANDBOX_ID_MAX)
		return al_error_set(err, -EINVAL, "sandbox id too long");
	snprintf(a.id, sizeof(a.id), "%s", sandbox_id);
	uint8_t payload[1 + GW_SANDBOX_ID_MAX];
	int fds[GW_SLOTS];
	size_t len, n;
	if (gw_attach_encode(&a, payload, &len, fds, &n) < 0)
		return al_error_set(err, -EINVAL, "bad sandbox id");
	int r = ipc_send(gp->ctl, GW_IPC_ATTACH, payload, len, fds, n);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot reach the gateway");
	struct ipc_msg m = IPC_MSG_INIT;
	r = recv_reply(gp->ctl, GW_IPC_ATTACHED, &m, 0, err, "attaching the sandbox");
	if (r < 0)
		return r;
	ipc_msg_done(&m);
	return 0;
}

void gw_stop(struct gw_proc *gp)
{
	if (gp->pid > 0) {
		kill(gp->pid, SIGTERM);
		bool gone = false;
		if (gp->pidfd >= 0) {
			struct pollfd p = { .fd = gp->pidfd, .events = POLLIN };
			int n;
			while ((n = poll(&p, 1, 1000)) < 0 && errno == EINTR)
				;
			gone = n > 0;
		}
		if (!gone)
			kill(gp->pid, SIGKILL);
		while (waitpid(gp->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	proc_free(gp);
}

void gw_release(struct gw_proc *gp)
{
	proc_free(gp);
}

/* A connection to a sandbox's control socket; the descriptor or -errno. */
static int control_connect(const char *control_path, struct al_error *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(control_path) >= sizeof(sa.sun_path))
		return al_error_set(err, -ENAMETOOLONG, "%s: path too long", control_path);
	memcpy(sa.sun_path, control_path, strlen(control_path) + 1);
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return al_error_set_errno(
			err, -errno, "the sandbox's gateway is not reachable at %s", control_path);
	return TAKE_FD(fd);
}

int gw_set_policy(const char *control_path, const char *text, size_t len, uint64_t *ret_generation,
		  struct al_error *err)
{
	if (len > GW_POLICY_TEXT_MAX)
		return al_error_set(err, -E2BIG, "the policy is larger than %u bytes",
				    GW_POLICY_TEXT_MAX);
	_cleanup_close_ int fd = control_connect(control_path, err);
	if (fd < 0)
		return fd;
	int r = ipc_send(fd, GW_IPC_POLICY, text, len, NULL, 0);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot reach the gateway");
	struct ipc_msg m = IPC_MSG_INIT;
	r = recv_reply(fd, GW_IPC_POLICY_SET, &m, 32, err, "changing the policy");
	if (r < 0)
		return r;
	char g[33];
	memcpy(g, m.data ? (const char *)m.data : "", m.len);
	g[m.len] = '\0';
	ipc_msg_done(&m);
	uint64_t gen;
	if (parse_u64(g, &gen) < 0)
		return al_error_set(err, -EBADMSG, "unexpected answer from the gateway");
	*ret_generation = gen;
	return 0;
}

int gw_set_budget(const char *control_path, uint64_t max_requests, uint64_t max_bytes,
		  struct gw_budget_used *ret_used, struct al_error *err)
{
	_cleanup_close_ int fd = control_connect(control_path, err);
	if (fd < 0)
		return fd;
	uint8_t frame[GW_BUDGET_FRAME_LEN];
	gw_budget_encode(max_requests, max_bytes, frame);
	int r = ipc_send(fd, GW_IPC_BUDGET, frame, sizeof(frame), NULL, 0);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot reach the gateway");
	struct ipc_msg m = IPC_MSG_INIT;
	r = recv_reply(fd, GW_IPC_BUDGET_SET, &m, GW_BUDGET_FRAME_LEN, err, "setting the budget");
	if (r < 0)
		return r;
	struct gw_budget_used used;
	r = gw_budget_decode(m.data, m.len, &used.requests, &used.bytes);
	ipc_msg_done(&m);
	if (r < 0)
		return al_error_set(err, -EBADMSG, "unexpected answer from the gateway");
	if (ret_used)
		*ret_used = used;
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Child processes: the primitives every process of a sandbox is made with,
 * shared by a sandbox's start (start.c, init.c), its keeper and exec helpers
 * (keeper.c) and the exec client (exec.c):
 *
 *   sbx_clone3_fork      fork-like clone3 (namespaces, pidfd, cgroup at birth)
 *   sbx_userns_*         user namespaces with given maps, held by a throwaway child
 *   sbx_become_root      join the sandbox's user namespace as root inside
 *   sbx_hide_cmdline     wipe the supervisor's arguments and environment
 *   sbx_run_init         pid 1 of a pid namespace: start the command, reap, report
 *   sbx_stdio_*          the pipes a command runs with
 *   sbx_env_*            the environment a command sees
 *   sbx_kill_and_reap, sbx_wait_pidfd_exit
 */
#include "sandbox/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "common/fdutil.h"
#include "common/parse.h"

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

extern char **environ;

/* ---- small system call wrappers ---- */

struct clone_args_v2 {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
		set_tid_size, cgroup;
};

/* fork-like clone3: returns 0 in the child. The child must only make
 * system calls and exec or _exit: libc's cached thread id is stale. */
pid_t sbx_clone3_fork(uint64_t flags, int *ret_pidfd, int cgroup_fd)
{
	int pidfd = -1;
	struct clone_args_v2 args = {
		.flags = flags | CLONE_PIDFD,
		.pidfd = (uint64_t)(uintptr_t)&pidfd,
		.exit_signal = SIGCHLD,
	};
	if (cgroup_fd >= 0) {
		args.flags |= CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)cgroup_fd;
	}
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
	if (pid > 0)
		*ret_pidfd = pidfd;
	return pid;
}

/* ---- user namespaces ---- */

/* The throwaway child: holds its user namespace until the pipe closes. It
 * shares our memory (CLONE_VM): nothing of a large address space is copied
 * for a process that only waits. */
static int hold_userns(void *arg)
{
	const int *pipefd = arg; /* its own copies: the descriptor table is not shared */
	close(pipefd[1]);
	char c;
	while (read(pipefd[0], &c, 1) < 0 && errno == EINTR)
		;
	return 0;
}

#define HOLDER_STACK (64 * 1024)

/*
 * Makes a user namespace with the given maps and returns a descriptor for
 * it. A throwaway child holds the namespace while we write its maps.
 */
static int make_userns(const char *uid_map, const char *gid_map)
{
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	/* The child reads pipefd[0] until we close pipefd[1]. Its stack is
	 * ours until we have reaped it. */
	_cleanup_free_ char *stack = malloc(HOLDER_STACK);
	if (!stack) {
		close(pipefd[0]);
		close(pipefd[1]);
		return -ENOMEM;
	}
	pid_t pid = clone(hold_userns, stack + HOLDER_STACK, CLONE_NEWUSER | CLONE_VM | SIGCHLD,
			  pipefd);
	if (pid < 0) {
		int r = -errno;
		close(pipefd[0]);
		close(pipefd[1]);
		return r;
	}
	char path[64];
	int r = 0, fd = -1;
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	r = write_file_at(AT_FDCWD, path, uid_map);
	if (r >= 0) {
		snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
		r = write_file_at(AT_FDCWD, path, gid_map);
	}
	if (r >= 0) {
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			r = -errno;
	}
	close(pipefd[1]);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	close(pipefd[0]);
	if (r < 0) {
		safe_close(fd);
		return r;
	}
	return fd;
}

int sbx_userns_sandbox(uint32_t uid)
{
	char map[64];
	snprintf(map, sizeof(map), "0 %" PRIu32 " %u\n", uid, SBX_RANGE);
	return make_userns(map, map);
}

/*
 * The workspace's idmap: on disk, the workspace's owner (and group) is the
 * sandbox's root, and no other id is mapped at all. So everything the
 * sandbox makes there belongs to the owner; a chown or chgrp to any other
 * id, and files made by any other user inside, are refused by the kernel
 * (EOVERFLOW): the owner can always read and remove all of it, and nothing
 * there belongs to a uid range another sandbox will get. Files of other
 * host users have no name inside; root inside has no power over them.
 */
static void ws_map(char *out, size_t size, uint32_t base, uint32_t owner)
{
	snprintf(out, size, "%" PRIu32 " %" PRIu32 " 1\n", owner, base);
}

int sbx_userns_workspace(uint32_t base, uint32_t owner_uid, uint32_t owner_gid)
{
	return sbx_userns_workspace_as(base, base, owner_uid, owner_gid);
}

/*
 * With --user U:G the owner is the sandbox's user instead of its root (host
 * uid base+U, gid base+G): still the one id mapped, so all of the above
 * holds, and root inside, having no name there, can read and change what
 * exists (its DAC override) but make nothing (EOVERFLOW), as any other
 * user inside.
 */
int sbx_userns_workspace_as(uint32_t host_uid, uint32_t host_gid, uint32_t owner_uid,
			    uint32_t owner_gid)
{
	char umap[256], gmap[256];
	ws_map(umap, sizeof(umap), host_uid, owner_uid);
	ws_map(gmap, sizeof(gmap), host_gid, owner_gid);
	return make_userns(umap, gmap);
}

/* ---- inside: credentials, capabilities, limits ---- */

/* What root inside keeps: enough to own and manage its own files and
 * processes (package managers need these), nothing that reaches the kernel. */
static const int kept_caps[] = {
	CAP_CHOWN,	     CAP_DAC_OVERRIDE,
	CAP_DAC_READ_SEARCH, CAP_FOWNER,
	CAP_FSETID,	     CAP_KILL,
	CAP_SETGID,	     CAP_SETUID,
	CAP_SETPCAP,	     CAP_NET_BIND_SERVICE,
	CAP_NET_RAW,	     CAP_SYS_CHROOT,
	CAP_MKNOD,	     CAP_AUDIT_WRITE,
	CAP_SETFCAP,	     CAP_SYS_PTRACE,
};

static uint64_t kept_mask(void)
{
	uint64_t keep = 0;
	for (size_t i = 0; i < ARRAY_SIZE(kept_caps); i++)
		keep |= 1ULL << kept_caps[i];
	return keep;
}

/* The bounding set: what a later exec could gain. Joining a user namespace
 * fills it again, so it is dropped after that. */
static int drop_bounding(void)
{
	uint64_t keep = kept_mask();
	for (int c = 0; c <= 63; c++) {
		if (keep & (1ULL << c))
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break; /* past the kernel's last capability */
			return -errno;
		}
	}
	return 0;
}

/* The effective, permitted and inheritable sets trimmed to the kept ones,
 * and no ambient capabilities. */
static int trim_caps(void)
{
	uint64_t keep = kept_mask();
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -errno;
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = { { 0 } };
	if (syscall(SYS_capget, &hdr, data) < 0)
		return -errno;
	for (int i = 0; i < 2; i++) {
		uint32_t k = (uint32_t)(keep >> (32 * i));
		data[i].effective &= k;
		data[i].permitted &= k;
		data[i].inheritable = 0;
	}
	if (syscall(SYS_capset, &hdr, data) < 0)
		return -errno;
	return 0;
}

/* Fields 48-51 of /proc/self/stat: where the kernel finds our arguments
 * and environment for /proc/<pid>/cmdline and environ. */
int sbx_argarea_get(struct sbx_argarea *ret)
{
	char buf[2048];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	/* "pid (comm) state ...": comm may hold spaces and parentheses. */
	char *p = strrchr(buf, ')');
	if (!p)
		return -EBADMSG;
	p++;
	unsigned long v[4];
	for (int field = 3; field <= 51; field++) {
		while (*p == ' ')
			p++;
		if (field >= 48) {
			uint64_t x;
			const char *end;
			if (parse_u64_prefix(p, &x, &end) < 0 || x > ULONG_MAX)
				return -EBADMSG;
			v[field - 48] = (unsigned long)x;
		}
		p = strchr(p, ' ');
		if (!p && field < 51)
			return -EBADMSG;
	}
	const unsigned long max = 64ul << 20; /* far above ARG_MAX: a sanity bound */
	if (v[0] == 0 || v[1] <= v[0] || v[1] - v[0] > max || v[3] < v[2] || v[3] - v[2] > max)
		return -EBADMSG;
	*ret = (struct sbx_argarea){ v[0], v[1], v[2], v[3] };
	return 0;
}

void sbx_argarea_wipe(const struct sbx_argarea *a, const char *title)
{
	/*
	 * The arguments and environment of a process forked from airlock are
	 * the supervisor's (binary path, --env values, vault and policy paths,
	 * upstreams), and /proc/<pid>/cmdline of a process in the sandbox's
	 * pid namespace is readable there. Both regions are wiped and the
	 * title written in their place: nothing needs privilege, and nothing
	 * is left to read. The caller uses no string from them any more.
	 */
	memset((void *)a->env_start, 0, a->env_end - a->env_start);
	size_t len = a->arg_end - a->arg_start;
	memset((void *)a->arg_start, 0, len);
	size_t t = strlen(title);
	memcpy((void *)a->arg_start, title, t < len ? t : len - 1);
}

int sbx_hide_cmdline(const char *title)
{
	struct sbx_argarea a;
	int r = sbx_argarea_get(&a);
	if (r < 0)
		return r;
	sbx_argarea_wipe(&a, title);
	return 0;
}

int sbx_become_root(int userns_fd, bool for_exec)
{
	if (setns(userns_fd, CLONE_NEWUSER) < 0)
		return -errno;
	if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		return -errno;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return -errno;
	/* The bounding set limits only what an exec could gain. */
	if (for_exec) {
		int r = drop_bounding();
		if (r < 0)
			return r;
	}
	return trim_caps();
}

/* ---- the environment a command sees ---- */

void sbx_env_free(struct sbx_env *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->v[i]);
	free(e->v);
	e->v = NULL;
	e->n = e->cap = 0;
}

/* Sets K=V, replacing an earlier K. */
int sbx_env_set(struct sbx_env *e, const char *kv)
{
	const char *eq = strchr(kv, '=');
	if (!eq || eq == kv)
		return -EINVAL;
	size_t klen = (size_t)(eq - kv) + 1;
	char *copy = strdup(kv);
	if (!copy)
		return -ENOMEM;
	for (size_t i = 0; i < e->n; i++) {
		if (strncmp(e->v[i], kv, klen) == 0) {
			free(e->v[i]);
			e->v[i] = copy;
			return 0;
		}
	}
	if (e->n + 2 > e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 16;
		char **v = realloc(e->v, cap * sizeof(*v));
		if (!v) {
			free(copy);
			return -ENOMEM;
		}
		e->v = v;
		e->cap = cap;
	}
	e->v[e->n++] = copy;
	e->v[e->n] = NULL;
	return 0;
}

int sbx_env_build(struct sbx_env *e, const char *home, char *const *spec_env, size_t n_spec,
		  char *const *extra, size_t n_extra)
{
	int r = sbx_env_set(e, "PATH=" DEFAULT_PATH);
	if (r >= 0)
		r = sbx_env_set(e, "HOME=/root");
	if (r >= 0 && home) {
		char buf[80];
		if (snprintf(buf, sizeof(buf), "HOME=%s", home) >= (int)sizeof(buf))
			return -ENAMETOOLONG;
		r = sbx_env_set(e, buf);
	}
	const char *term = getenv("TERM");
	if (r >= 0 && term && strlen(term) < 64 && !strchr(term, '\n')) {
		char buf[80];
		snprintf(buf, sizeof(buf), "TERM=%s", term);
		r = sbx_env_set(e, buf);
	}
	for (size_t i = 0; r >= 0 && i < n_spec; i++)
		r = sbx_env_set(e, spec_env[i]);
	for (size_t i = 0; r >= 0 && i < n_extra; i++)
		r = sbx_env_set(e, extra[i]);
	return r;
}

/* ---- the command ---- */

/*
 * From root inside to the command's user (struct sbx_command.uid, gid):
 * its group alone, then the ids. Leaving uid 0 clears the effective,
 * permitted and ambient capabilities (no SECBIT_KEEP_CAPS); checked all
 * the same, as a command that kept one would hold root's power.
 */
static int become_user(uint32_t uid, uint32_t gid)
{
	gid_t g = (gid_t)gid;
	if (setgroups(1, &g) < 0 || setresgid(g, g, g) < 0 || setresuid(uid, uid, uid) < 0)
		return -errno;
	if (uid == 0)
		return 0;
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = { { 0 } };
	if (syscall(SYS_capget, &hdr, data) < 0)
		return -errno;
	for (int i = 0; i < 2; i++)
		if (data[i].effective || data[i].permitted)
			return -EPERM;
	for (int c = 0; c <= 63; c++) {
		int r = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0);
		if (r < 0)
			break; /* past the kernel's last capability */
		if (r > 0)
			return -EPERM;
	}
	return 0;
}

/* In the child that becomes the command (tty: the slave of its terminal,
 * or -1). Never returns. */
static void __attribute__((noreturn)) exec_command(const struct sbx_command *c, int tty)
{
	/* A session of its own; with a terminal, that terminal is its
	 * controlling one (job control, signals from the keyboard). */
	if (setsid() < 0)
		_exit(125);
	if (tty >= 0 && ioctl(tty, TIOCSCTTY, 0) < 0)
		_exit(125);
	int fds[3] = { c->io->in[0], c->io->out[1], c->io->err[1] };
	if (tty >= 0)
		fds[0] = fds[1] = fds[2] = tty;
	for (int i = 0; i < 3; i++) {
		if (dup3(fds[i], i, 0) < 0 && fds[i] != i)
			_exit(125);
	}
	if (syscall(SYS_close_range, 3, ~0U, 0) < 0)
		_exit(125);
	signal(SIGPIPE, SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	struct rlimit core = { 0, 0 };
	setrlimit(RLIMIT_CORE, &core);
	if (c->pids) {
		/* The range's uids are this sandbox's alone, so the per-user
		 * process limit is a per-sandbox one (backing the pids cgroup). */
		struct rlimit np = { c->pids, c->pids };
		setrlimit(RLIMIT_NPROC, &np);
	}
	if (c->uid || c->gid) {
		/* Its terminal is its own, as a login's is. */
		if (tty >= 0 && fchown(0, c->uid, c->gid) < 0) {
			dprintf(2, "airlock: cannot give the terminal to the command's user: %s\n",
				al_strerror(errno));
			_exit(125);
		}
		int ur = become_user(c->uid, c->gid);
		if (ur < 0) {
			dprintf(2, "airlock: cannot become user %u:%u: %s\n", (unsigned)c->uid,
				(unsigned)c->gid, al_strerror(ur));
			_exit(125);
		}
	}
	if (chdir(c->cwd) < 0) {
		dprintf(2, "airlock: cannot change to directory %s: %s\n", c->cwd,
			al_strerror(errno));
		_exit(125);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(125);
	int r = sbx_seccomp_install(c->filter);
	if (r < 0) {
		dprintf(2, "airlock: cannot load the seccomp filter: %s\n", al_strerror(r));
		_exit(125);
	}
	environ = c->envp;
	execvp(c->argv[0], c->argv);
	int e = errno;
	dprintf(2, "airlock: cannot run %s: %s\n", c->argv[0], al_strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

/*
 * pid 1 of a pid namespace: start the command (if any), reap everything,
 * report the command's status. With no command, wait until killed.
 */
void sbx_run_init(const struct sbx_command *c)
{
	prctl(PR_SET_NAME, "airlock-init", 0, 0, 0);
	/* SIGCHLD is taken synchronously: orphans reparented to us later (an
	 * exec helper's, say) are reaped as they come. */
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	pid_t child = -1;
	int tty = -1;
	if (c && c->argv && c->tty) {
		/* A terminal of the sandbox's devpts (this mount namespace's
		 * /dev/ptmx); its master goes out to the supervisor before the
		 * command can write a byte to it. */
		int master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
		int unlock = 0;
		struct winsize ws = { .ws_row = c->rows ? c->rows : 24,
				      .ws_col = c->cols ? c->cols : 80 };
		if (master < 0 || ioctl(master, TIOCSPTLCK, &unlock) < 0 ||
		    ioctl(master, TIOCSWINSZ, &ws) < 0 ||
		    (tty = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
			sbx_msg_send(c->status_fd, SBX_MSG_ERROR, -errno,
				     "cannot make the command's terminal");
			_exit(125);
		}
		if (sbx_msg_send_pty(c->status_fd, master) < 0)
			_exit(125);
		close(master);
	}
	if (c && c->argv) {
		child = fork();
		if (child < 0) {
			sbx_msg_send(c->status_fd, SBX_MSG_ERROR, -errno,
				     "cannot fork the command");
			_exit(125);
		}
		if (child == 0) {
			close(c->status_fd);
			exec_command(c, tty);
		}
		/* Open in the command alone: its last close is the end of the
		 * terminal's output. */
		tty = safe_close(tty);
	}
	/* The command's stdio belongs to the command alone. */
	if (c && c->io) {
		for (int i = 0; i < 2; i++) {
			safe_close(c->io->in[i]);
			safe_close(c->io->out[i]);
			safe_close(c->io->err[i]);
		}
	}
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p < 0 && errno == EINTR)
			continue;
		if (p == child && child > 0) {
			if (WIFEXITED(st))
				sbx_msg_send(c->status_fd, SBX_MSG_EXITED, WEXITSTATUS(st), NULL);
			else
				sbx_msg_send(c->status_fd, SBX_MSG_SIGNALED, WTERMSIG(st), NULL);
			_exit(0);
		}
		if (p > 0)
			continue;
		siginfo_t si;
		while (sigwaitinfo(&chld, &si) < 0 && errno == EINTR)
			;
	}
}

int sbx_stdio_make(struct sbx_stdio *io)
{
	for (int i = 0; i < 2; i++)
		io->in[i] = io->out[i] = io->err[i] = -1;
	if (pipe2(io->in, O_CLOEXEC) < 0 || pipe2(io->out, O_CLOEXEC) < 0 ||
	    pipe2(io->err, O_CLOEXEC) < 0)
		return -errno;
	return 0;
}

void sbx_stdio_close(struct sbx_stdio *io)
{
	for (int i = 0; i < 2; i++) {
		io->in[i] = safe_close(io->in[i]);
		io->out[i] = safe_close(io->out[i]);
		io->err[i] = safe_close(io->err[i]);
	}
}

/* The command-side ends stay with the child; the supervisor keeps its own. */
void sbx_stdio_close_child_ends(struct sbx_stdio *io)
{
	io->in[0] = safe_close(io->in[0]);
	io->out[1] = safe_close(io->out[1]);
	io->err[1] = safe_close(io->err[1]);
}

/* ---- waiting ---- */

void sbx_kill_and_reap(int *pidfd)
{
	if (*pidfd < 0)
		return;
	syscall(SYS_pidfd_send_signal, *pidfd, SIGKILL, NULL, 0);
	siginfo_t si;
	while (waitid(P_PIDFD, (id_t)*pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	*pidfd = safe_close(*pidfd);
}

int sbx_wait_pidfd_exit(int pidfd, int timeout_ms)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	int r;
	while ((r = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
		;
	return r > 0 ? 0 : -ETIMEDOUT;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Creating sandboxes and running commands in them.
 *
 * Processes (P = the supervisor, on the host):
 *
 *   P --clone3(NEWNS|NEWPID|NEWNET|NEWUTS|NEWIPC[|NEWCGROUP|INTO_CGROUP])--> I
 *
 * I is the sandbox's init (pid 1 of its pid namespace). As host root, in
 * namespaces owned by the initial user namespace, it sets up the network,
 * the hostname and every mount; then it joins the sandbox's user namespace
 * (made beforehand by P, where host uid U..U+65535 appear as 0..65535), so
 * the sandbox's root owns nothing but files and processes of its own range.
 * For `run`, I forks the command and reports its status; for `create`, it
 * waits and reaps until the sandbox is destroyed.
 *
 * `exec` forks a helper E that enters the sandbox's namespaces (user last)
 * and a new nested pid namespace whose init E2 runs the command: killing E2
 * kills everything the command started, and nothing else.
 *
 * P is single-threaded and parses nothing but fixed-size status records.
 */
#include "sandbox/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/log.h"
#include "common/parse.h"

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define ENV_FILE_MAX (256 * 1024)

extern char **environ;

/* ---- settings ---- */

void sbx_settings_default(struct sbx_settings *s)
{
	s->state_dir = "/var/lib/airlock/sandboxes";
	s->cgroup_parent = "airlock";
	s->uid_base = SBX_DEFAULT_UID_BASE;
	s->uid_slots = SBX_DEFAULT_UID_SLOTS;
}

int sbx_settings_from_env(struct sbx_settings *s, struct al_error *err)
{
	const char *v = getenv("AIRLOCK_STATE_DIR");
	if (v && *v) {
		if (v[0] != '/')
			return al_error_set(err, -EINVAL, "AIRLOCK_STATE_DIR must be an absolute path");
		s->state_dir = v;
	}
	v = getenv("AIRLOCK_CGROUP_PARENT");
	if (v && *v)
		s->cgroup_parent = v;
	v = getenv("AIRLOCK_UID_BASE");
	if (v && *v) {
		uint64_t base;
		if (parse_u64(v, &base) < 0 || base < 65536 ||
		    base + (uint64_t)s->uid_slots * SBX_RANGE > 0x7fffffffu)
			return al_error_set(err, -EINVAL, "AIRLOCK_UID_BASE must be a uid from 65536 "
					    "leaving room for %u ranges of 65536 below 2^31",
					    s->uid_slots);
		s->uid_base = (uint32_t)base;
	}
	return 0;
}

/* ---- small system call wrappers ---- */

struct clone_args_v2 {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls,
		set_tid, set_tid_size, cgroup;
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

/*
 * Makes a user namespace with the given maps and returns a descriptor for
 * it. A throwaway child holds the namespace while we write its maps.
 */
static int make_userns(const char *uid_map, const char *gid_map)
{
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
	if (pid < 0) {
		int r = -errno;
		close(pipefd[0]);
		close(pipefd[1]);
		return r;
	}
	if (pid == 0) {
		char c;
		close(pipefd[1]);
		while (read(pipefd[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(pipefd[0]);
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
	if (r < 0) {
		safe_close(fd);
		return r;
	}
	return fd;
}

static int sandbox_userns(uint32_t uid)
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

static int workspace_userns(uint32_t base, uint32_t owner_uid, uint32_t owner_gid)
{
	char umap[256], gmap[256];
	ws_map(umap, sizeof(umap), base, owner_uid);
	ws_map(gmap, sizeof(gmap), base, owner_gid);
	return make_userns(umap, gmap);
}

/* ---- inside: credentials, capabilities, limits ---- */

/* What root inside keeps: enough to own and manage its own files and
 * processes (package managers need these), nothing that reaches the kernel. */
static const int kept_caps[] = {
	CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,      CAP_FSETID,
	CAP_KILL,   CAP_SETGID,       CAP_SETUID,          CAP_SETPCAP,     CAP_NET_BIND_SERVICE,
	CAP_NET_RAW, CAP_SYS_CHROOT,  CAP_MKNOD,           CAP_AUDIT_WRITE, CAP_SETFCAP,
	CAP_SYS_PTRACE,
};

int sbx_drop_caps(void)
{
	uint64_t keep = 0;
	for (size_t i = 0; i < ARRAY_SIZE(kept_caps); i++)
		keep |= 1ULL << kept_caps[i];
	for (int c = 0; c <= 63; c++) {
		if (keep & (1ULL << c))
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return -errno;
	}
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
static int arg_env_regions(unsigned long ret[4])
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
	for (int field = 3; field <= 51; field++) {
		while (*p == ' ')
			p++;
		char *end;
		errno = 0;
		unsigned long v = strtoul(p, &end, 10);
		if (field >= 48) {
			if (end == p || errno)
				return -EBADMSG;
			ret[field - 48] = v;
		}
		p = strchr(p, ' ');
		if (!p && field < 51)
			return -EBADMSG;
	}
	return 0;
}

int sbx_hide_cmdline(const char *title)
{
	/*
	 * This process's arguments and environment are the supervisor's
	 * (binary path, --env values, vault and policy paths, upstreams), and
	 * /proc/<pid>/cmdline of a process in the sandbox's pid namespace is
	 * readable there. Both regions are wiped and the title written in
	 * their place: nothing needs privilege, and nothing is left to read.
	 * The caller uses no string from them any more (the command's argv
	 * and environment are copies).
	 */
	unsigned long r[4];
	int e = arg_env_regions(r);
	if (e < 0)
		return e;
	unsigned long arg_start = r[0], arg_end = r[1], env_start = r[2], env_end = r[3];
	const unsigned long max = 64ul << 20; /* far above ARG_MAX: a sanity bound */
	if (arg_start == 0 || arg_end <= arg_start || arg_end - arg_start > max ||
	    env_end < env_start || env_end - env_start > max)
		return -EBADMSG;
	memset((void *)env_start, 0, env_end - env_start);
	size_t len = arg_end - arg_start;
	memset((void *)arg_start, 0, len);
	size_t t = strlen(title);
	memcpy((void *)arg_start, title, t < len ? t : len - 1);
	return 0;
}

int sbx_become_root(int userns_fd)
{
	if (setns(userns_fd, CLONE_NEWUSER) < 0)
		return -errno;
	if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		return -errno;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return -errno;
	return sbx_drop_caps();
}

static int loopback_up(void)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct ifreq ifr = { 0 };
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return -errno;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return -errno;
	return 0;
}

/* The gateway's addresses inside (the same as gateway.h's, which the
 * sandbox does not include). */
#define NET_PROXY_ADDR "127.0.0.1"
#define NET_PROXY_PORT 3128
#define NET_TRANSPARENT_ADDR "127.0.0.2"
#define NET_DNS_ADDR "127.0.0.1"
#define NET_BACKLOG 1024

static int inet_socket(int type, const char *addr, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		return -EINVAL;
	int fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    (type == SOCK_STREAM && listen(fd, NET_BACKLOG) < 0)) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/*
 * The gateway's listeners, made in the sandbox's network namespace (all of
 * 127/8 is on lo). They hold the ports, so nothing inside can take them.
 */
static int make_listeners(struct sbx_net_fds *ret)
{
	struct sbx_net_fds l = { -1, -1, -1, -1 };
	l.proxy = inet_socket(SOCK_STREAM, NET_PROXY_ADDR, NET_PROXY_PORT);
	if (l.proxy >= 0)
		l.http = inet_socket(SOCK_STREAM, NET_TRANSPARENT_ADDR, 80);
	if (l.http >= 0)
		l.https = inet_socket(SOCK_STREAM, NET_TRANSPARENT_ADDR, 443);
	if (l.https >= 0)
		l.dns = inet_socket(SOCK_DGRAM, NET_DNS_ADDR, 53);
	if (l.dns < 0) {
		int r = l.proxy < 0 ? l.proxy : l.http < 0 ? l.http : l.https < 0 ? l.https : l.dns;
		sbx_net_fds_close(&l);
		return r;
	}
	*ret = l;
	return 0;
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

int sbx_env_build(struct sbx_env *e, char *const *spec_env, size_t n_spec,
		     char *const *extra, size_t n_extra)
{
	int r = sbx_env_set(e, "PATH=" DEFAULT_PATH);
	if (r >= 0)
		r = sbx_env_set(e, "HOME=/root");
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

/* In the child that becomes the command. Never returns. */
static void __attribute__((noreturn)) exec_command(const struct sbx_command *c)
{
	int fds[3] = { c->io->in[0], c->io->out[1], c->io->err[1] };
	for (int i = 0; i < 3; i++) {
		if (dup3(fds[i], i, 0) < 0 && fds[i] != i)
			_exit(125);
	}
	if (syscall(SYS_close_range, 3, ~0U, 0) < 0)
		_exit(125);
	if (setsid() < 0)
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
	if (chdir(c->cwd) < 0) {
		dprintf(2, "airlock: cannot change to directory %s: %s\n", c->cwd, strerror(errno));
		_exit(125);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(125);
	int r = sbx_seccomp_install(c->filter);
	if (r < 0) {
		dprintf(2, "airlock: cannot load the seccomp filter: %s\n", strerror(-r));
		_exit(125);
	}
	environ = c->envp;
	execvp(c->argv[0], c->argv);
	int e = errno;
	dprintf(2, "airlock: cannot run %s: %s\n", c->argv[0], strerror(e));
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
	if (c && c->argv) {
		child = fork();
		if (child < 0) {
			sbx_msg_send(c->status_fd, SBX_MSG_ERROR, -errno, "cannot fork the command");
			_exit(125);
		}
		if (child == 0) {
			close(c->status_fd);
			exec_command(c);
		}
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

/* ---- creating a sandbox ---- */

struct sandbox {
	char id[SBX_ID_LEN + 1];
	struct sbx_paths paths;
	struct sbx_state state;
	bool slot_claimed, cgroup_made, dir_made;
	int lock_fd;
	int init_pidfd;
	int keeper_pidfd;
	int status_fd; /* supervisor's end of the status channel */
};

static void kill_and_reap(int *pidfd)
{
	if (*pidfd < 0)
		return;
	syscall(SYS_pidfd_send_signal, *pidfd, SIGKILL, NULL, 0);
	siginfo_t si;
	while (waitid(P_PIDFD, (id_t)*pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	*pidfd = safe_close(*pidfd);
}

static void sandbox_teardown(const struct sbx_settings *set, struct sandbox *sb)
{
	kill_and_reap(&sb->keeper_pidfd);
	if (sb->init_pidfd >= 0 && sb->state.keeper_pid > 0) {
		/* The keeper's child: killing it is enough; the keeper reaps it. */
		syscall(SYS_pidfd_send_signal, sb->init_pidfd, SIGKILL, NULL, 0);
		struct pollfd pf = { .fd = sb->init_pidfd, .events = POLLIN };
		while (poll(&pf, 1, 10000) < 0 && errno == EINTR)
			;
		sb->init_pidfd = safe_close(sb->init_pidfd);
	}
	if (sb->init_pidfd >= 0) {
		syscall(SYS_pidfd_send_signal, sb->init_pidfd, SIGKILL, NULL, 0);
		/* Reap: the namespaces die with their init; the cgroup empties. */
		siginfo_t si;
		while (waitid(P_PIDFD, (id_t)sb->init_pidfd, &si, WEXITED) < 0 && errno == EINTR)
			;
		sb->init_pidfd = safe_close(sb->init_pidfd);
	}
	if (sb->cgroup_made) {
		sbx_cgroup_close(&sb->state.cg);
		if (sbx_cgroup_destroy(&sb->state.cg) < 0)
			log_warning("cannot remove the cgroups of sandbox %s; `airlock sandbox gc` "
				    "will retry", sb->id);
	}
	if (sb->dir_made && sbx_rm_rf(sb->paths.dir) < 0)
		log_warning("cannot remove %s; `airlock sandbox gc` will retry", sb->paths.dir);
	if (sb->slot_claimed)
		sbx_release_slot(set, sb->state.slot, sb->id);
	sb->lock_fd = safe_close(sb->lock_fd);
	sb->status_fd = safe_close(sb->status_fd);
}

static int validate_spec(const struct sbx_settings *set, const struct sbx_spec *spec,
			 struct al_error *err)
{
	if (geteuid() != 0)
		return al_error_set(err, -EPERM, "airlock sandbox needs root (it creates user "
				    "namespaces with private uid ranges, overlays and cgroups)");
	if (spec->network != SBX_NETWORK_NONE && spec->network != SBX_NETWORK_RESTRICTED &&
	    spec->network != SBX_NETWORK_OPEN)
		return al_error_set(err, -EINVAL, "unknown network mode");
	if (spec->network != SBX_NETWORK_NONE && !spec->net_ready)
		return al_error_set(err, -EINVAL,
				    "--network %s needs the egress gateway to serve the sandbox's "
				    "network, and none was started",
				    spec->network == SBX_NETWORK_OPEN ? "open" : "restricted");
	if (spec->trust_pem && spec->trust_pem_len > SBX_TRUST_PEM_MAX)
		return al_error_set(err, -E2BIG, "the certificate to trust is too large");
	if (spec->hostname) {
		size_t n = strlen(spec->hostname);
		bool ok = n > 0 && n <= SBX_HOSTNAME_MAX;
		for (size_t i = 0; ok && i < n; i++) {
			char ch = spec->hostname[i];
			ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			     (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
		}
		if (!ok)
			return al_error_set(err, -EINVAL, "invalid hostname '%s'", spec->hostname);
	}
	const char *paths[] = { spec->workspace, spec->image };
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		for (const char *c = paths[i]; c && *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				return al_error_set(err, -EINVAL,
						    "%s path contains a control character",
						    i == 0 ? "workspace" : "image");
	}
	if (spec->n_env > SBX_MAX_ENV)
		return al_error_set(err, -E2BIG, "too many --env (at most %d)", SBX_MAX_ENV);
	for (size_t i = 0; i < spec->n_env; i++) {
		const char *eq = strchr(spec->env[i], '=');
		if (!eq || eq == spec->env[i])
			return al_error_set(err, -EINVAL, "--env wants K=V, got '%s'", spec->env[i]);
	}
	if (set->state_dir[0] != '/')
		return al_error_set(err, -EINVAL, "the state directory must be absolute");
	return 0;
}

static int write_env_file(const struct sbx_paths *p, const struct sbx_spec *spec)
{
	char path[SBX_PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/env", p->dir);
	_cleanup_close_ int fd =
		open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	for (size_t i = 0; i < spec->n_env; i++) {
		int r = write_full(fd, spec->env[i], strlen(spec->env[i]) + 1);
		if (r < 0)
			return r;
	}
	return 0;
}

int sbx_env_read_file(const struct sbx_paths *p, struct sbx_env *e)
{
	char path[SBX_PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/env", p->dir);
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r = read_file_bounded(AT_FDCWD, path, ENV_FILE_MAX, &text, &len);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	for (size_t off = 0; off < len;) {
		const char *kv = text + off;
		size_t n = strnlen(kv, len - off);
		if (off + n >= len)
			return -EBADMSG;
		r = sbx_env_set(e, kv);
		if (r < 0)
			return r;
		off += n + 1;
	}
	return 0;
}

static bool etc_gen_in_use(const char *gen, void *ud);

/* What the sandbox's init needs; everything was prepared on the host. */
struct init_args {
	const struct sbx_spec *spec;
	const struct sbx_rootfs_plan *plan;
	int userns_fd, ws_userns_fd;
	bool ephemeral;
	struct sbx_command *cmd;
	const struct sbx_bpf *filter;
};

static void __attribute__((noreturn)) init_fail(int st, int r, const char *what)
{
	sbx_msg_send(st, SBX_MSG_ERROR, r < 0 ? r : -EIO, what);
	_exit(125);
}

/*
 * The sandbox's init, from its first instruction: still host root, in the
 * new namespaces. st is its end of the status channel, go_fd is read once
 * before anything of the sandbox's runs (the cgroup placement is done then).
 */
static void __attribute__((noreturn)) init_main(const struct init_args *a, int st, int go_fd,
						bool need_cgroupns)
{
	if (a->ephemeral)
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* (Also lowers oom_score_adj_min: nothing inside may make itself
	 * unkillable by the OOM killer.) */
	(void)write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "0");
	const char *host = a->spec->hostname ? a->spec->hostname : "airlock";
	if (sethostname(host, strlen(host)) < 0 || setdomainname("", 0) < 0)
		init_fail(st, -errno, "cannot set the hostname");
	int r = loopback_up();
	if (r < 0)
		init_fail(st, r, "cannot bring up loopback");
	if (a->spec->network != SBX_NETWORK_NONE) {
		/* Made here, as host root in the new network namespace, and
		 * handed to the supervisor at once: nothing of the sandbox's
		 * ever holds them. */
		struct sbx_net_fds l;
		r = make_listeners(&l);
		if (r < 0)
			init_fail(st, r, "cannot create the gateway's listeners");
		r = sbx_msg_send_listeners(st, &l);
		sbx_net_fds_close(&l);
		if (r < 0)
			_exit(125);
	}
	/* Ports below 1024 for the sandbox's own servers. */
	(void)write_file_at(AT_FDCWD, "/proc/sys/net/ipv4/ip_unprivileged_port_start", "0");
	struct al_error e = { 0 };
	r = sbx_rootfs_mount(a->plan, a->userns_fd, a->ws_userns_fd, &e);
	if (r < 0)
		init_fail(st, r, al_error_message(&e));
	/* Done with the spec's strings (they live in the supervisor's
	 * argument area): the sandbox will see none of it. */
	r = sbx_hide_cmdline("airlock-init");
	if (r < 0)
		init_fail(st, r, "cannot hide the supervisor's command line from the sandbox");
	char c;
	ssize_t n;
	while ((n = read(go_fd, &c, 1)) < 0 && errno == EINTR)
		;
	if (n != 1)
		_exit(125);
	close(go_fd);
	if (need_cgroupns && unshare(CLONE_NEWCGROUP) < 0)
		init_fail(st, -errno, "cannot create the cgroup namespace");
	r = sbx_become_root(a->userns_fd);
	if (r < 0)
		init_fail(st, r, "cannot enter the user namespace");
	/* Nothing of the supervisor's stays open here (its stdio, locks,
	 * descriptors of host directories) but what the command needs. */
	struct sbx_stdio *io = a->cmd ? a->cmd->io : NULL;
	int keep[] = { st, io ? io->in[0] : -1, io ? io->in[1] : -1, io ? io->out[0] : -1,
		       io ? io->out[1] : -1, io ? io->err[0] : -1, io ? io->err[1] : -1 };
	if (close_all_fds_except(keep, ARRAY_SIZE(keep)) < 0)
		_exit(125);
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
		init_fail(st, -errno, "cannot open /dev/null");
	if (devnull > 2)
		close(devnull);
	if (a->ephemeral) {
		/* Die with the supervisor. The credential change above clears
		 * the parent-death signal, so it is set here, and a supervisor
		 * that died before is seen as a hang-up on the channel. */
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		struct pollfd hup = { .fd = st, .events = POLLRDHUP };
		if (poll(&hup, 1, 0) != 0)
			_exit(125);
	}
	sbx_msg_send(st, SBX_MSG_READY, 0, NULL);
	if (a->cmd) {
		a->cmd->status_fd = st;
		sbx_run_init(a->cmd);
	}
	/* A persistent sandbox's init needs nothing at all. */
	syscall(SYS_close_range, 3, ~0U, 0);
	setsid();
	sbx_run_init(NULL);
}

/*
 * Clones the init. In the caller: *ret_chan is the status channel,
 * *ret_go the pipe to write one byte to once the cgroup placement is done.
 */
static pid_t spawn_init(const struct init_args *a, bool into_cgroup_v2, int cgroup_fd,
			bool in_cgroup_already, int *ret_pidfd, int *ret_chan, int *ret_go)
{
	int chan[2], go[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) < 0)
		return -errno;
	if (pipe2(go, O_CLOEXEC) < 0) {
		int r = -errno;
		close(chan[0]);
		close(chan[1]);
		return r;
	}
	uint64_t flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC;
	/* Already in the cgroup at birth: its namespace can come with the clone. */
	if (into_cgroup_v2 || in_cgroup_already)
		flags |= CLONE_NEWCGROUP;
	int pidfd = -1;
	pid_t pid = sbx_clone3_fork(flags, &pidfd, into_cgroup_v2 ? cgroup_fd : -1);
	if (pid < 0) {
		int r = -errno;
		close(chan[0]);
		close(chan[1]);
		close(go[0]);
		close(go[1]);
		return r;
	}
	if (pid == 0) {
		close(chan[0]);
		close(go[1]);
		init_main(a, chan[1], go[0], !(flags & CLONE_NEWCGROUP));
	}
	close(chan[1]);
	close(go[0]);
	*ret_pidfd = pidfd;
	*ret_chan = chan[0];
	*ret_go = go[1];
	return pid;
}

static int recv_ready(int chan, struct al_error *err)
{
	struct sbx_msg m;
	int r = sbx_msg_recv(chan, &m);
	if (r < 0)
		return al_error_set(err, -EIO, "the sandbox died during setup");
	if (m.kind == SBX_MSG_ERROR)
		return al_error_set(err, m.value < 0 ? m.value : -EIO, "sandbox setup failed: %s",
				    m.text);
	if (m.kind != SBX_MSG_READY)
		return al_error_set(err, -EBADMSG, "unexpected message from the sandbox");
	return 0;
}

/* The listeners a sandbox with a network sends before it is ready. */
static int recv_listeners(int chan, struct sbx_net_fds *ret, struct al_error *err)
{
	struct sbx_msg m;
	int r = sbx_msg_recv_listeners(chan, &m, ret);
	if (r == -EBADMSG)
		return al_error_set(err, r, "unexpected message from the sandbox");
	if (r < 0)
		return al_error_set(err, -EIO, "the sandbox died during setup");
	if (m.kind == SBX_MSG_ERROR)
		return al_error_set(err, m.value < 0 ? m.value : -EIO, "sandbox setup failed: %s",
				    m.text);
	if (m.kind != SBX_MSG_LISTENERS)
		return al_error_set(err, -EBADMSG, "unexpected message from the sandbox");
	return 0;
}

/* Hands the listeners to whoever serves them, then lets go of them. */
static int serve_network(const struct sbx_spec *spec, struct sbx_net_fds *l,
			 const struct sandbox *sb, struct al_error *err)
{
	int r = spec->net_ready(l, sb->id, sb->paths.dir, sb->init_pidfd, spec->net_ready_ud);
	sbx_net_fds_close(l);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot connect the sandbox to its gateway");
	return 0;
}

/* `run`: we are the init's parent and supervise its one command. */
static int start_ephemeral(const struct init_args *a, struct sandbox *sb, struct al_error *err)
{
	int go = -1;
	bool v2 = sb->state.cg.v2;
	pid_t pid = spawn_init(a, v2, sb->state.cg.dirfd, false, &sb->init_pidfd, &sb->status_fd,
			       &go);
	if (pid < 0)
		return al_error_set_errno(err, pid, "cannot create the sandbox's namespaces");
	sb->state.init_pid = pid;
	int r = 0;
	/* cgroup v1: placed by pid. This waits for an RCU grace period, so it
	 * runs while the init is busy mounting. */
	if (!v2)
		r = sbx_cgroup_attach(&sb->state.cg, pid);
	if (r < 0) {
		close(go);
		return al_error_set_errno(err, r, "cannot place the sandbox in its cgroup");
	}
	/* A failed write means the init is gone: its reason is on the channel. */
	(void)!write(go, "g", 1);
	close(go);
	if (a->cmd)
		sbx_stdio_close_child_ends(a->cmd->io);
	if (a->spec->network != SBX_NETWORK_NONE) {
		/* Attached while the init mounts: the gateway is serving by the
		 * time the command starts. */
		struct sbx_net_fds l;
		r = recv_listeners(sb->status_fd, &l, err);
		if (r < 0)
			return r;
		r = serve_network(a->spec, &l, sb, err);
		if (r < 0)
			return r;
	}
	r = recv_ready(sb->status_fd, err);
	if (r < 0)
		return r;
	r = sbx_proc_starttime(pid, &sb->state.init_start);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot read the sandbox's start time");
	r = sbx_state_write(&sb->paths, &sb->state);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot record the sandbox's state");
	return 0;
}

/*
 * `create`: a keeper process (host root, in the sandbox's cgroup) becomes
 * the init's parent and stays, so that every later `exec` is forked from
 * inside the cgroup (no migration, and on cgroup v1 no grace period) and
 * the init is reaped when it dies.
 */
static int start_persistent(const struct init_args *a, struct sandbox *sb, struct al_error *err)
{
	char path[SBX_PATH_MAX];
	int r = sbx_control_path(&sb->paths, path, sizeof(path));
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
	bool v2 = sb->state.cg.v2;
	int kpidfd = -1;
	pid_t kpid = sbx_clone3_fork(0, &kpidfd, v2 ? sb->state.cg.dirfd : -1);
	if (kpid < 0) {
		r = -errno;
		close(rep[0]);
		close(rep[1]);
		close(kgo[0]);
		close(kgo[1]);
		return al_error_set_errno(err, r, "cannot start the sandbox's keeper");
	}
	if (kpid == 0) {
		/* K */
		close(rep[0]);
		close(kgo[1]);
		char c;
		ssize_t n;
		while ((n = read(kgo[0], &c, 1)) < 0 && errno == EINTR)
			;
		if (n != 1)
			_exit(125);
		/* Nothing of the supervisor's stays open here: above all not the
		 * sandbox's lock, which would then be held for the keeper's life. */
		int keep[8 + 2 * 16] = { 0, 1, 2, lfd, rep[1], kgo[0], a->userns_fd, a->ws_userns_fd };
		size_t n_keep = 8 + sbx_rootfs_plan_fds(a->plan, keep + 8, ARRAY_SIZE(keep) - 8);
		if (close_all_fds_except(keep, n_keep) < 0)
			_exit(125);
		setsid();
		/* The keeper must outlive any memory pressure inside. */
		(void)write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "-1000");
		int ipidfd = -1, chan = -1, go = -1;
		pid_t ipid = spawn_init(a, false, -1, true, &ipidfd, &chan, &go);
		if (ipid < 0) {
			sbx_msg_send(rep[1], SBX_MSG_ERROR, ipid, "cannot create the sandbox's namespaces");
			_exit(125);
		}
		if (write(go, "g", 1) != 1)
			_exit(125);
		close(go);
		struct al_error e = { 0 };
		if (a->spec->network != SBX_NETWORK_NONE) {
			/* Passed on to the creator; the keeper keeps no copy. */
			struct sbx_net_fds l;
			if (recv_listeners(chan, &l, &e) < 0) {
				sbx_msg_send(rep[1], SBX_MSG_ERROR, e.code, al_error_message(&e));
				kill(ipid, SIGKILL);
				_exit(125);
			}
			int sr = sbx_msg_send_listeners(rep[1], &l);
			sbx_net_fds_close(&l);
			if (sr < 0) {
				kill(ipid, SIGKILL);
				_exit(125);
			}
		}
		if (recv_ready(chan, &e) < 0) {
			sbx_msg_send(rep[1], SBX_MSG_ERROR, e.code, al_error_message(&e));
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
			sbx_msg_send(rep[1], SBX_MSG_ERROR, -ESRCH, "the sandbox's init died");
			kill(ipid, SIGKILL);
			_exit(125);
		}
		snprintf(text, sizeof(text), "%" PRIu64, istart);
		sbx_msg_send(rep[1], SBX_MSG_STARTED, ipid, text);
		close(rep[1]);
		/* Not a sandbox until the supervisor has recorded it: should it
		 * die or fail first, nothing may be left running unrecorded. */
		while ((n = read(kgo[0], &c, 1)) < 0 && errno == EINTR)
			;
		if (n != 1 || c != 'c') {
			kill(ipid, SIGKILL);
			_exit(125);
		}
		close(kgo[0]);
		int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		sbx_keeper_main(lfd, ipidfd, ipid, a->spec->pids, a->filter);
	}
	close(rep[1]);
	close(kgo[0]);
	sb->keeper_pidfd = kpidfd;
	sb->state.keeper_pid = kpid;
	r = 0;
	if (!v2)
		r = sbx_cgroup_attach(&sb->state.cg, kpid);
	if (r >= 0 && write(kgo[1], "g", 1) != 1)
		r = -errno;
	struct sbx_msg m;
	_cleanup_(sbx_net_fds_close) struct sbx_net_fds l = { -1, -1, -1, -1 };
	if (r >= 0 && a->spec->network != SBX_NETWORK_NONE)
		r = recv_listeners(rep[0], &l, err);
	else if (r < 0)
		al_error_set_errno(err, r, "cannot place the sandbox in its cgroup");
	if (r >= 0) {
		r = sbx_msg_recv(rep[0], &m);
		if (r < 0)
			r = al_error_set(err, -EIO, "the sandbox died during setup");
		else if (m.kind == SBX_MSG_ERROR)
			r = al_error_set(err, m.value < 0 ? m.value : -EIO, "sandbox setup failed: %s",
					 m.text);
		else if (m.kind != SBX_MSG_STARTED)
			r = al_error_set(err, -EBADMSG, "unexpected message from the keeper");
	}
	close(rep[0]);
	if (r < 0) {
		close(kgo[1]);
		return r;
	}
	sb->state.init_pid = (pid_t)m.value;
	if (parse_u64(m.text, &sb->state.init_start) < 0) {
		close(kgo[1]);
		return al_error_set(err, -EBADMSG, "unexpected message from the keeper");
	}
	sb->init_pidfd = sbx_pidfd_if_same(sb->state.init_pid, sb->state.init_start);
	if (sb->init_pidfd < 0) {
		close(kgo[1]);
		return al_error_set(err, -ESRCH, "the sandbox died during setup");
	}
	/* The keeper is our child and not reaped: its pid is still its own. */
	r = sbx_proc_starttime(kpid, &sb->state.keeper_start);
	if (r >= 0)
		r = sbx_state_write(&sb->paths, &sb->state);
	if (r < 0) {
		close(kgo[1]);
		return al_error_set_errno(err, r, "cannot record the sandbox's state");
	}
	if (a->spec->network != SBX_NETWORK_NONE) {
		/* Recorded, so a failure from here on is torn down like any. */
		r = serve_network(a->spec, &l, sb, err);
		if (r < 0) {
			close(kgo[1]);
			return r;
		}
	}
	/* Recorded: the keeper may serve now. */
	r = write(kgo[1], "c", 1) == 1 ? 0 : -errno;
	close(kgo[1]);
	if (r < 0)
		return al_error_set_errno(err, r, "the sandbox's keeper is gone");
	return 0;
}

/*
 * Creates the sandbox and starts its init. With cmd != NULL the init runs
 * the command (the `run` case) and io/status carry its streams.
 */
static int sandbox_start(const struct sbx_settings *set, const struct sbx_spec *spec,
			 bool ephemeral, struct sbx_command *cmd, struct sandbox *sb,
			 struct al_error *err)
{
	int r = validate_spec(set, spec, err);
	if (r < 0)
		return r;
	r = sbx_new_id(sb->id);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot make a sandbox id");
	memcpy(sb->state.id, sb->id, sizeof(sb->id));
	r = sbx_paths_init(set, sb->id, &sb->paths, err);
	if (r < 0)
		return r;

	char tmp[SBX_PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", set->state_dir);
	for (char *s = tmp + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return al_error_set_errno(err, -errno, "cannot create %s", tmp);
		*s = '/';
	}
	if (mkdir(set->state_dir, 0700) < 0 && errno != EEXIST)
		return al_error_set_errno(err, -errno, "cannot create %s", set->state_dir);
	r = sbx_check_private_dir(set->state_dir);
	if (r < 0)
		return al_error_set(err, r, "the state directory %s must be a directory owned by "
				    "root and writable by root alone", set->state_dir);
	if (mkdir(sb->paths.dir, 0700) < 0)
		return al_error_set_errno(err, -errno, "cannot create %s", sb->paths.dir);
	sb->dir_made = true;
	sb->lock_fd = sbx_lock_dir(sb->paths.dir, true);
	if (sb->lock_fd < 0)
		return al_error_set_errno(err, sb->lock_fd, "cannot lock %s", sb->paths.dir);

	r = sbx_claim_slot(set, sb->id, &sb->state.slot, err);
	if (r < 0)
		return r;
	sb->slot_claimed = true;
	uint32_t uid = set->uid_base + sb->state.slot * SBX_RANGE;
	sb->state.uid = uid;
	sb->state.created = (int64_t)time(NULL);
	sb->state.ephemeral = ephemeral;
	sb->state.memory_bytes = spec->memory_bytes;
	snprintf(sb->state.image, sizeof(sb->state.image), "%s", spec->image ? spec->image : "host");
	snprintf(sb->state.workspace, sizeof(sb->state.workspace), "%s",
		 spec->workspace ? spec->workspace : "");

	/* Held (shared) until the sandbox has mounted it: see etcview.c. */
	_cleanup_(sbx_etc_view_release) struct sbx_etc_view view = { .lock_fd = -1 };
	const char *etc_path = NULL;
	if (!spec->image || strcmp(spec->image, "host") == 0) {
		r = sbx_etc_view(set, etc_gen_in_use, (void *)set, &view, err);
		if (r < 0)
			return r;
		etc_path = view.path;
		memcpy(sb->state.etc_gen, view.gen, sizeof(sb->state.etc_gen));
	}

	/* Compiled once here; every command of the sandbox loads it as it is. */
	_cleanup_(sbx_seccomp_free) struct sbx_bpf filter = { 0 };
	r = sbx_seccomp_compile(&filter, err);
	if (r < 0)
		return r;

	_cleanup_(sbx_rootfs_plan_freep) struct sbx_rootfs_plan *plan = NULL;
	r = sbx_rootfs_prepare(spec, &sb->paths, uid, etc_path, &plan, err);
	if (r < 0)
		return r;
	if (!ephemeral) {
		r = write_env_file(&sb->paths, spec);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot record the environment");
	}

	r = sbx_cgroup_create(set, sb->id, spec, &sb->state.cg, err);
	if (r < 0)
		return r;
	sb->cgroup_made = true;

	_cleanup_close_ int userns_fd = sandbox_userns(uid);
	if (userns_fd < 0)
		return al_error_set_errno(err, userns_fd, "cannot create the user namespace");
	_cleanup_close_ int ws_userns_fd = -1;
	uint32_t owner[2];
	if (sbx_rootfs_plan_needs_ws_userns(plan, owner)) {
		ws_userns_fd = workspace_userns(uid, owner[0], owner[1]);
		if (ws_userns_fd < 0)
			return al_error_set_errno(err, ws_userns_fd,
						  "cannot create the workspace id mapping");
	}

	r = sbx_rootfs_make_trees(plan, userns_fd, ws_userns_fd, err);
	if (r < 0)
		return r;

	struct init_args ia = {
		.spec = spec,
		.plan = plan,
		.userns_fd = userns_fd,
		.ws_userns_fd = ws_userns_fd,
		.ephemeral = ephemeral,
		.cmd = cmd,
		.filter = &filter,
	};
	if (cmd)
		cmd->filter = &filter;
	if (ephemeral)
		return start_ephemeral(&ia, sb, err);
	return start_persistent(&ia, sb, err);
}

static void sandbox_init_struct(struct sandbox *sb)
{
	memset(sb, 0, sizeof(*sb));
	sb->lock_fd = sb->init_pidfd = sb->status_fd = sb->keeper_pidfd = -1;
	sb->state.cg.dirfd = -1;
}

int sbx_run(const struct sbx_settings *set, const struct sbx_spec *spec, char *const *argv,
	    const struct sbx_exec_opts *opts, struct sbx_result *ret, struct al_error *err)
{
	struct sandbox sb;
	sandbox_init_struct(&sb);
	struct sbx_env env = { 0 };
	struct sbx_stdio io;
	int r = sbx_stdio_make(&io);
	if (r < 0) {
		sbx_stdio_close(&io);
		return al_error_set_errno(err, r, "pipe");
	}
	r = sbx_env_build(&env, spec->env, spec->n_env, opts->env, opts->n_env);
	if (r < 0) {
		sbx_stdio_close(&io);
		sbx_env_free(&env);
		return al_error_set_errno(err, r, "environment");
	}
	/* The init wipes the argument area the caller's strings may live in
	 * (sbx_hide_cmdline): the command's argv and cwd are copies. */
	_cleanup_strv_ char **argv_copy = NULL;
	_cleanup_free_ char *cwd_copy = strdup(opts->cwd ? opts->cwd : "/workspace");
	size_t argc = 0;
	while (argv[argc])
		argc++;
	argv_copy = calloc(argc + 1, sizeof(*argv_copy));
	for (size_t i = 0; argv_copy && i < argc; i++)
		if (!(argv_copy[i] = strdup(argv[i]))) {
			strv_free(TAKE_PTR(argv_copy));
			break;
		}
	if (!argv_copy || !cwd_copy) {
		sbx_stdio_close(&io);
		sbx_env_free(&env);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	struct sbx_command cmd = {
		.argv = argv_copy,
		.envp = env.v,
		.cwd = cwd_copy,
		.pids = spec->pids,
		.io = &io,
		.status_fd = -1,
	};
	r = sandbox_start(set, spec, true, &cmd, &sb, err);
	if (r >= 0) {
		struct sbx_result res;
		/* A fresh cgroup: every OOM kill in it is this command's. */
		r = sbx_supervise(sb.status_fd, sb.init_pidfd, opts, &io, &sb.state.cg, 0, &res, err);
		if (r >= 0)
			*ret = res;
	}
	sbx_stdio_close(&io);
	sbx_env_free(&env);
	sandbox_teardown(set, &sb);
	return r;
}

int sbx_create(const struct sbx_settings *set, const struct sbx_spec *spec, char *ret_id,
	       struct al_error *err)
{
	struct sandbox sb;
	sandbox_init_struct(&sb);
	int r = sandbox_start(set, spec, false, NULL, &sb, err);
	if (r < 0) {
		sandbox_teardown(set, &sb);
		return r;
	}
	memcpy(ret_id, sb.id, sizeof(sb.id));
	/* The sandbox lives on without us: its init is reaped by the host's
	 * init (or a subreaper) once destroyed. */
	sb.init_pidfd = safe_close(sb.init_pidfd);
	sb.keeper_pidfd = safe_close(sb.keeper_pidfd);
	sb.status_fd = safe_close(sb.status_fd);
	sb.lock_fd = safe_close(sb.lock_fd);
	sbx_cgroup_close(&sb.state.cg);
	return 0;
}

/* ---- destroy, list, gc ---- */

static int wait_pidfd_exit(int pidfd, int timeout_ms)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	int r;
	while ((r = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
		;
	return r > 0 ? 0 : -ETIMEDOUT;
}

static int destroy_locked(const struct sbx_settings *set, const char *id, struct sbx_state *st,
			  bool have_state, struct al_error *err)
{
	struct sbx_paths p;
	int r = sbx_paths_init(set, id, &p, err);
	if (r < 0)
		return r;
	if (have_state) {
		int kfd = sbx_pidfd_if_same(st->keeper_pid, st->keeper_start);
		int pidfd = sbx_state_pidfd(st);
		if (pidfd >= 0) {
			syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
			/* pid 1 exits only after every process of its namespace. */
			r = wait_pidfd_exit(pidfd, 10000);
			close(pidfd);
			if (r < 0) {
				safe_close(kfd);
				return al_error_set(err, r, "sandbox %s did not die within 10 s", id);
			}
		}
		if (kfd >= 0) {
			/* The keeper reaps the init and leaves by itself; it is
			 * killed if it does not. */
			if (wait_pidfd_exit(kfd, 2000) < 0) {
				syscall(SYS_pidfd_send_signal, kfd, SIGKILL, NULL, 0);
				r = wait_pidfd_exit(kfd, 10000);
			}
			close(kfd);
			if (r < 0)
				return al_error_set(err, r, "the keeper of sandbox %s did not die", id);
		}
		r = sbx_cgroup_destroy(&st->cg);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot remove the cgroups of sandbox %s", id);
	}
	r = sbx_rm_rf(p.dir);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot remove %s", p.dir);
	if (have_state)
		sbx_release_slot(set, st->slot, id);
	return 0;
}

int sbx_destroy(const struct sbx_settings *set, const char *id, struct al_error *err)
{
	struct sbx_state st;
	struct sbx_paths p;
	int r = sbx_lookup(set, id, &st, &p, err);
	if (r < 0)
		return r;
	_cleanup_close_ int lock = sbx_lock_dir(p.dir, true);
	if (lock < 0)
		return al_error_set_errno(err, lock, "cannot lock sandbox %s", id);
	return destroy_locked(set, id, &st, true, err);
}

int sbx_list(const struct sbx_settings *set,
	     int (*fn)(const struct sbx_info *info, void *userdata), void *userdata,
	     struct al_error *err)
{
	DIR *d = opendir(set->state_dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return al_error_set_errno(err, -errno, "cannot open %s", set->state_dir);
	}
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!sbx_id_valid(de->d_name))
			continue;
		struct sbx_state st;
		struct al_error ignore = { 0 };
		if (sbx_state_read(set, de->d_name, &st, &ignore) < 0)
			continue; /* being created, or debris for gc */
		if (st.ephemeral)
			continue;
		struct sbx_info info = { .created = st.created };
		memcpy(info.id, st.id, sizeof(info.id));
		snprintf(info.image, sizeof(info.image), "%s", st.image);
		snprintf(info.workspace, sizeof(info.workspace), "%s", st.workspace);
		int pidfd = sbx_state_pidfd(&st);
		info.running = pidfd >= 0;
		safe_close(pidfd);
		info.oom_kills = sbx_cgroup_oom_kills(&st.cg);
		r = fn(&info, userdata);
		if (r < 0)
			break;
	}
	closedir(d);
	return r;
}

static bool id_has_live_dir(const char *id, void *ud)
{
	const struct sbx_settings *set = ud;
	char path[SBX_PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", set->state_dir, id);
	return access(path, F_OK) == 0;
}

static bool etc_gen_in_use(const char *gen, void *ud)
{
	const struct sbx_settings *set = ud;
	DIR *d = opendir(set->state_dir);
	if (!d)
		return true; /* cannot tell: keep it */
	bool used = false;
	struct dirent *de;
	while (!used && (de = readdir(d))) {
		if (!sbx_id_valid(de->d_name))
			continue;
		struct sbx_state st;
		if (sbx_state_read(set, de->d_name, &st, NULL) < 0) {
			/* A sandbox being created has no state yet (it holds the
			 * view's lock meanwhile); a damaged one keeps everything. */
			char path[SBX_PATH_MAX + 32];
			snprintf(path, sizeof(path), "%s/%s/state", set->state_dir, de->d_name);
			if (access(path, F_OK) == 0)
				used = true;
			continue;
		}
		used = strcmp(st.etc_gen, gen) == 0;
	}
	closedir(d);
	return used;
}

int sbx_gc(const struct sbx_settings *set, unsigned *ret_removed, struct al_error *err)
{
	if (geteuid() != 0)
		return al_error_set(err, -EPERM, "airlock sandbox needs root");
	unsigned removed = 0;
	int ret = 0;
	DIR *d = opendir(set->state_dir);
	if (d) {
		struct dirent *de;
		while ((de = readdir(d))) {
			if (!sbx_id_valid(de->d_name))
				continue;
			struct sbx_paths p;
			if (sbx_paths_init(set, de->d_name, &p, NULL) < 0)
				continue;
			/* A sandbox being created or destroyed holds its lock. */
			int lock = sbx_lock_dir(p.dir, false);
			if (lock < 0)
				continue;
			struct sbx_state st;
			struct al_error e = { 0 };
			bool have = sbx_state_read(set, de->d_name, &st, &e) == 0;
			bool alive = false;
			if (have) {
				int pidfd = sbx_state_pidfd(&st);
				alive = pidfd >= 0;
				safe_close(pidfd);
			}
			/* A sandbox whose state cannot be read (damaged, or written
			 * under other settings) but whose cgroup still holds
			 * processes is not debris: it is left alone and reported. */
			if (!have && sbx_cgroup_populated(set, de->d_name)) {
				if (ret == 0)
					ret = al_error_set(err, -EBUSY,
							   "sandbox %s has an unreadable state file but "
							   "is still running: left alone (%s)",
							   de->d_name, al_error_message(&e));
				close(lock);
				continue;
			}
			if (!alive) {
				struct al_error de_err = { 0 };
				if (destroy_locked(set, de->d_name, &st, have, &de_err) == 0)
					removed++;
				else if (ret == 0)
					ret = al_error_set(err, de_err.code, "%s",
							   al_error_message(&de_err));
			}
			close(lock);
		}
		closedir(d);
	}
	/* Slots whose sandbox is gone. */
	char slots[SBX_PATH_MAX];
	snprintf(slots, sizeof(slots), "%s/slots", set->state_dir);
	DIR *sd = opendir(slots);
	if (sd) {
		struct dirent *de;
		while ((de = readdir(sd))) {
			if (de->d_name[0] == '.')
				continue;
			char target[SBX_ID_LEN + 2];
			ssize_t n = readlinkat(dirfd(sd), de->d_name, target, sizeof(target) - 1);
			if (n < 0)
				continue;
			target[n] = '\0';
			if (!sbx_id_valid(target) || !id_has_live_dir(target, (void *)set)) {
				if (unlinkat(dirfd(sd), de->d_name, 0) == 0)
					removed++;
			}
		}
		closedir(sd);
	}
	/* Views of /etc no sandbox uses any more. */
	unsigned etc_removed = 0;
	int er = sbx_etc_gc(set, etc_gen_in_use, (void *)set, &etc_removed);
	removed += etc_removed;
	if (er < 0 && ret == 0)
		ret = al_error_set_errno(err, er, "cannot remove old views of /etc");
	/* Cgroups without a sandbox directory. */
	unsigned cg_removed = 0;
	int r = sbx_cgroup_gc(set, id_has_live_dir, (void *)set, &cg_removed);
	removed += cg_removed;
	if (r < 0 && ret == 0)
		ret = al_error_set_errno(err, r, "cannot remove stale cgroups");
	*ret_removed = removed;
	return ret;
}

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
static pid_t clone3_fork(uint64_t flags, int *ret_pidfd, int cgroup_fd)
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

static int setns_pidfd(int pidfd, int flags)
{
	return setns(pidfd, flags) < 0 ? -errno : 0;
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
 * The workspace's idmap: on disk, the workspace's owner is the sandbox's
 * root; the rest of the sandbox's range keeps its own host ids, exactly as
 * outside the workspace. Nothing else on disk (host root above all) has a
 * name inside, so the sandbox can neither act as nor create files of any
 * other host user.
 */
static void ws_map(char *out, size_t size, uint32_t base, uint32_t owner)
{
	snprintf(out, size, "%" PRIu32 " %" PRIu32 " 1\n%" PRIu32 " %" PRIu32 " %u\n", owner, base,
		 base + 1, base + 1, SBX_RANGE - 1);
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

static int drop_caps(void)
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

static int become_sandbox_root(int userns_fd)
{
	if (setns(userns_fd, CLONE_NEWUSER) < 0)
		return -errno;
	if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		return -errno;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return -errno;
	return drop_caps();
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

/* ---- the environment a command sees ---- */

struct env_list {
	char **v;
	size_t n, cap;
};

static void env_list_free(struct env_list *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->v[i]);
	free(e->v);
	e->v = NULL;
	e->n = e->cap = 0;
}

/* Sets K=V, replacing an earlier K. */
static int env_list_set(struct env_list *e, const char *kv)
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

static int build_env(struct env_list *e, char *const *spec_env, size_t n_spec,
		     char *const *extra, size_t n_extra)
{
	int r = env_list_set(e, "PATH=" DEFAULT_PATH);
	if (r >= 0)
		r = env_list_set(e, "HOME=/root");
	const char *term = getenv("TERM");
	if (r >= 0 && term && strlen(term) < 64 && !strchr(term, '\n')) {
		char buf[80];
		snprintf(buf, sizeof(buf), "TERM=%s", term);
		r = env_list_set(e, buf);
	}
	for (size_t i = 0; r >= 0 && i < n_spec; i++)
		r = env_list_set(e, spec_env[i]);
	for (size_t i = 0; r >= 0 && i < n_extra; i++)
		r = env_list_set(e, extra[i]);
	return r;
}

/* ---- the command ---- */

struct command {
	char *const *argv;
	char **envp;
	const char *cwd;
	uint64_t pids;
	struct sbx_stdio *io;
	int status_fd;
};

/* In the child that becomes the command. Never returns. */
static void __attribute__((noreturn)) exec_command(const struct command *c)
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
	int r = sbx_seccomp_load();
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
static void __attribute__((noreturn)) run_init(const struct command *c)
{
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
		pid_t p = waitpid(-1, &st, 0);
		if (p < 0) {
			if (errno == EINTR)
				continue;
			if (child < 0) {
				pause();
				continue;
			}
			_exit(0);
		}
		if (p == child) {
			if (WIFEXITED(st))
				sbx_msg_send(c->status_fd, SBX_MSG_EXITED, WEXITSTATUS(st), NULL);
			else
				sbx_msg_send(c->status_fd, SBX_MSG_SIGNALED, WTERMSIG(st), NULL);
			_exit(0);
		}
	}
}

static int make_stdio(struct sbx_stdio *io)
{
	for (int i = 0; i < 2; i++)
		io->in[i] = io->out[i] = io->err[i] = -1;
	if (pipe2(io->in, O_CLOEXEC) < 0 || pipe2(io->out, O_CLOEXEC) < 0 ||
	    pipe2(io->err, O_CLOEXEC) < 0)
		return -errno;
	return 0;
}

static void close_stdio(struct sbx_stdio *io)
{
	for (int i = 0; i < 2; i++) {
		io->in[i] = safe_close(io->in[i]);
		io->out[i] = safe_close(io->out[i]);
		io->err[i] = safe_close(io->err[i]);
	}
}

/* The command-side ends stay with the child; the supervisor keeps its own. */
static void close_child_ends(struct sbx_stdio *io)
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
	int status_fd; /* supervisor's end of the status channel */
};

static void sandbox_teardown(const struct sbx_settings *set, struct sandbox *sb)
{
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
	if (spec->network != SBX_NETWORK_NONE)
		return al_error_set(err, -EOPNOTSUPP,
				    "--network %s needs the egress gateway, which this build does "
				    "not have yet; use --network none",
				    spec->network == SBX_NETWORK_OPEN ? "open" : "restricted");
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

static int read_env_file(const struct sbx_paths *p, struct env_list *e)
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
		r = env_list_set(e, kv);
		if (r < 0)
			return r;
		off += n + 1;
	}
	return 0;
}

/*
 * Creates the sandbox and starts its init. With cmd != NULL the init runs
 * the command (the `run` case) and io/status carry its streams.
 */
static int sandbox_start(const struct sbx_settings *set, const struct sbx_spec *spec,
			 bool ephemeral, struct command *cmd, struct sandbox *sb,
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

	_cleanup_(sbx_rootfs_plan_freep) struct sbx_rootfs_plan *plan = NULL;
	r = sbx_rootfs_prepare(spec, &sb->paths, uid, &plan, err);
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

	int chan[2], go[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) < 0)
		return al_error_set_errno(err, -errno, "socketpair");
	if (pipe2(go, O_CLOEXEC) < 0) {
		close(chan[0]);
		close(chan[1]);
		return al_error_set_errno(err, -errno, "pipe");
	}

	uint64_t flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC;
	if (sb->state.cg.v2)
		flags |= CLONE_NEWCGROUP;
	int pidfd = -1;
	pid_t pid = clone3_fork(flags, &pidfd, sb->state.cg.v2 ? sb->state.cg.dirfd : -1);
	if (pid < 0) {
		r = -errno;
		close(chan[0]);
		close(chan[1]);
		close(go[0]);
		close(go[1]);
		return al_error_set_errno(err, r, "cannot create the sandbox's namespaces");
	}
	if (pid == 0) {
		/* I: the sandbox's init, still host root. */
		close(chan[0]);
		close(go[1]);
		int st = chan[1];
		if (ephemeral)
			prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		struct al_error e = { 0 };
		const char *host = spec->hostname ? spec->hostname : "airlock";
		if (sethostname(host, strlen(host)) < 0 || setdomainname("", 0) < 0) {
			sbx_msg_send(st, SBX_MSG_ERROR, -errno, "cannot set the hostname");
			_exit(125);
		}
		int rr = loopback_up();
		if (rr < 0) {
			sbx_msg_send(st, SBX_MSG_ERROR, rr, "cannot bring up loopback");
			_exit(125);
		}
		/* Ports below 1024 for the sandbox's own servers. */
		(void)write_file_at(AT_FDCWD, "/proc/sys/net/ipv4/ip_unprivileged_port_start", "0");
		rr = sbx_rootfs_mount(plan, userns_fd, ws_userns_fd, &e);
		if (rr < 0) {
			sbx_msg_send(st, SBX_MSG_ERROR, rr, al_error_message(&e));
			_exit(125);
		}
		/* Wait until the supervisor has placed us in the cgroup. */
		char c;
		ssize_t n;
		while ((n = read(go[0], &c, 1)) < 0 && errno == EINTR)
			;
		if (n != 1)
			_exit(125);
		close(go[0]);
		if (!(flags & CLONE_NEWCGROUP) && unshare(CLONE_NEWCGROUP) < 0) {
			sbx_msg_send(st, SBX_MSG_ERROR, -errno, "cannot create the cgroup namespace");
			_exit(125);
		}
		rr = become_sandbox_root(userns_fd);
		if (rr < 0) {
			sbx_msg_send(st, SBX_MSG_ERROR, rr, "cannot enter the user namespace");
			_exit(125);
		}
		close(userns_fd);
		safe_close(ws_userns_fd);
		if (ephemeral) {
			/* Die with the supervisor. The credential change above clears
			 * the parent-death signal, so it is set here, and a supervisor
			 * that died before is seen as a hang-up on the channel. */
			prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
			struct pollfd hup = { .fd = st, .events = POLLRDHUP };
			if (poll(&hup, 1, 0) != 0)
				_exit(125);
		}
		sbx_msg_send(st, SBX_MSG_READY, 0, NULL);
		if (cmd) {
			cmd->status_fd = st;
			run_init(cmd);
		}
		/* Keep nothing of the host's. */
		syscall(SYS_close_range, 3, ~0U, 0);
		int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		setsid();
		run_init(NULL);
	}

	/* P */
	close(chan[1]);
	close(go[0]);
	sb->init_pidfd = pidfd;
	sb->status_fd = chan[0];
	sb->state.init_pid = pid;
	if (!sb->state.cg.v2) {
		r = sbx_cgroup_attach(&sb->state.cg, pid);
		if (r < 0) {
			close(go[1]);
			return al_error_set_errno(err, r, "cannot place the sandbox in its cgroup");
		}
	}
	if (write(go[1], "g", 1) != 1) {
		r = -errno;
		close(go[1]);
		return al_error_set_errno(err, r, "cannot start the sandbox");
	}
	close(go[1]);
	if (cmd)
		close_child_ends(cmd->io);

	struct sbx_msg m;
	r = sbx_msg_recv(sb->status_fd, &m);
	if (r < 0)
		return al_error_set(err, -EIO, "the sandbox died during setup");
	if (m.kind == SBX_MSG_ERROR)
		return al_error_set(err, m.value < 0 ? m.value : -EIO, "sandbox setup failed: %s",
				    m.text);
	if (m.kind != SBX_MSG_READY)
		return al_error_set(err, -EBADMSG, "unexpected message from the sandbox");
	r = sbx_proc_starttime(pid, &sb->state.init_start);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot read the sandbox's start time");
	r = sbx_state_write(&sb->paths, &sb->state);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot record the sandbox's state");
	return 0;
}

static void sandbox_init_struct(struct sandbox *sb)
{
	memset(sb, 0, sizeof(*sb));
	sb->lock_fd = sb->init_pidfd = sb->status_fd = -1;
	sb->state.cg.dirfd = -1;
}

int sbx_run(const struct sbx_settings *set, const struct sbx_spec *spec, char *const *argv,
	    const struct sbx_exec_opts *opts, struct sbx_result *ret, struct al_error *err)
{
	struct sandbox sb;
	sandbox_init_struct(&sb);
	struct env_list env = { 0 };
	struct sbx_stdio io;
	int r = make_stdio(&io);
	if (r < 0) {
		close_stdio(&io);
		return al_error_set_errno(err, r, "pipe");
	}
	r = build_env(&env, spec->env, spec->n_env, opts->env, opts->n_env);
	if (r < 0) {
		close_stdio(&io);
		env_list_free(&env);
		return al_error_set_errno(err, r, "environment");
	}
	struct command cmd = {
		.argv = argv,
		.envp = env.v,
		.cwd = opts->cwd ? opts->cwd : "/workspace",
		.pids = spec->pids,
		.io = &io,
		.status_fd = -1,
	};
	r = sandbox_start(set, spec, true, &cmd, &sb, err);
	if (r >= 0) {
		struct sbx_result res;
		r = sbx_supervise(sb.status_fd, sb.init_pidfd, opts, &io, &sb.state.cg, &res, err);
		if (r >= 0)
			*ret = res;
	}
	close_stdio(&io);
	env_list_free(&env);
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
	sb.status_fd = safe_close(sb.status_fd);
	sb.lock_fd = safe_close(sb.lock_fd);
	sbx_cgroup_close(&sb.state.cg);
	return 0;
}

/* ---- exec ---- */

int sbx_exec(const struct sbx_settings *set, const char *id, char *const *argv,
	     const struct sbx_exec_opts *opts, struct sbx_result *ret, struct al_error *err)
{
	if (geteuid() != 0)
		return al_error_set(err, -EPERM, "airlock sandbox needs root");
	struct sbx_state st;
	int r = sbx_state_read(set, id, &st, err);
	if (r < 0)
		return r;
	struct sbx_paths paths;
	r = sbx_paths_init(set, id, &paths, err);
	if (r < 0)
		return r;
	_cleanup_close_ int pidfd = sbx_state_pidfd(&st);
	if (pidfd < 0)
		return al_error_set(err, -ESRCH, "sandbox %s is not running (destroy it or run "
				    "`airlock sandbox gc`)", id);
	r = sbx_cgroup_reopen(&st.cg);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot open the sandbox's cgroup");

	struct env_list env = { 0 };
	struct env_list base = { 0 };
	r = read_env_file(&paths, &base);
	if (r >= 0)
		r = build_env(&env, base.v, base.n, opts->env, opts->n_env);
	env_list_free(&base);
	if (r < 0) {
		env_list_free(&env);
		sbx_cgroup_close(&st.cg);
		return al_error_set_errno(err, r, "environment");
	}

	struct sbx_stdio io;
	int chan[2] = { -1, -1 }, go[2] = { -1, -1 };
	r = make_stdio(&io);
	if (r >= 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) < 0)
		r = -errno;
	if (r >= 0 && pipe2(go, O_CLOEXEC) < 0)
		r = -errno;
	int helper_pidfd = -1;
	pid_t pid = -1;
	if (r >= 0) {
		pid = clone3_fork(0, &helper_pidfd, st.cg.v2 ? st.cg.dirfd : -1);
		if (pid < 0)
			r = -errno;
	}
	if (r < 0) {
		close_stdio(&io);
		safe_close(chan[0]);
		safe_close(chan[1]);
		safe_close(go[0]);
		safe_close(go[1]);
		env_list_free(&env);
		sbx_cgroup_close(&st.cg);
		return al_error_set_errno(err, r, "cannot start the command");
	}
	if (pid == 0) {
		/* E: host root, entering the sandbox. */
		close(chan[0]);
		close(go[1]);
		int s = chan[1];
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		char c;
		ssize_t n;
		while ((n = read(go[0], &c, 1)) < 0 && errno == EINTR)
			;
		if (n != 1)
			_exit(125);
		close(go[0]);
		int rr = setns_pidfd(pidfd, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC |
						    CLONE_NEWCGROUP | CLONE_NEWPID);
		if (rr < 0) {
			sbx_msg_send(s, SBX_MSG_ERROR, rr, "cannot enter the sandbox's namespaces");
			_exit(125);
		}
		/* A pipe whose write end only E1 holds: E2 sees E1's death as
		 * POLLHUP even if E1 died before E2 could ask for SIGKILL. */
		int alive[2];
		if (pipe2(alive, O_CLOEXEC) < 0)
			_exit(125);
		pid_t e1 = fork();
		if (e1 < 0) {
			sbx_msg_send(s, SBX_MSG_ERROR, -errno, "fork");
			_exit(125);
		}
		if (e1 == 0) {
			/* E1: in the sandbox's pid namespace; its children get one of
			 * their own, so a kill takes the whole command tree. */
			if (unshare(CLONE_NEWPID) < 0) {
				sbx_msg_send(s, SBX_MSG_ERROR, -errno, "cannot create a pid namespace");
				_exit(125);
			}
			if (setns(pidfd, CLONE_NEWUSER) < 0 || setgroups(0, NULL) < 0 ||
			    setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0 ||
			    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || drop_caps() < 0) {
				sbx_msg_send(s, SBX_MSG_ERROR, -errno,
					     "cannot enter the sandbox's user namespace");
				_exit(125);
			}
			/* (set after the credential change, which clears it) */
			prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
			close(pidfd);
			pid_t e2 = fork();
			if (e2 < 0) {
				sbx_msg_send(s, SBX_MSG_ERROR, -errno, "fork");
				_exit(125);
			}
			if (e2 == 0) {
				/* E2: pid 1 of the command's own pid namespace. */
				prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
				close(alive[1]);
				struct pollfd pa = { .fd = alive[0], .events = POLLIN };
				if (poll(&pa, 1, 0) != 0)
					_exit(125);
				close(alive[0]);
				struct command cmd = {
					.argv = argv,
					.envp = env.v,
					.cwd = opts->cwd ? opts->cwd : "/workspace",
					.pids = 0,
					.io = &io,
					.status_fd = s,
				};
				run_init(&cmd);
			}
			close(alive[0]);
			close_stdio(&io);
			close(s);
			int wst;
			while (waitpid(e2, &wst, 0) < 0 && errno == EINTR)
				;
			_exit(0);
		}
		close(alive[0]);
		close(alive[1]);
		sbx_msg_send(s, SBX_MSG_STARTED, e1, NULL);
		close_stdio(&io);
		close(s);
		int wst;
		while (waitpid(e1, &wst, 0) < 0 && errno == EINTR)
			;
		_exit(0);
	}

	/* P */
	close(chan[1]);
	close(go[0]);
	if (!st.cg.v2) {
		r = sbx_cgroup_attach(&st.cg, pid);
		if (r < 0) {
			syscall(SYS_pidfd_send_signal, helper_pidfd, SIGKILL, NULL, 0);
			al_error_set_errno(err, r, "cannot place the command in the sandbox's cgroup");
		}
	}
	if (r >= 0 && write(go[1], "g", 1) != 1)
		r = al_error_set_errno(err, -errno, "cannot start the command");
	close(go[1]);
	close_child_ends(&io);
	if (r >= 0) {
		struct sbx_result res;
		r = sbx_supervise(chan[0], helper_pidfd, opts, &io, &st.cg, &res, err);
		if (r >= 0)
			*ret = res;
	}
	syscall(SYS_pidfd_send_signal, helper_pidfd, SIGKILL, NULL, 0);
	siginfo_t si;
	while (waitid(P_PIDFD, (id_t)helper_pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	close(helper_pidfd);
	close(chan[0]);
	close_stdio(&io);
	env_list_free(&env);
	sbx_cgroup_close(&st.cg);
	return r;
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
		int pidfd = sbx_state_pidfd(st);
		if (pidfd >= 0) {
			syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
			/* pid 1 exits only after every process of its namespace. */
			r = wait_pidfd_exit(pidfd, 10000);
			close(pidfd);
			if (r < 0)
				return al_error_set(err, r, "sandbox %s did not die within 10 s", id);
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
	if (geteuid() != 0)
		return al_error_set(err, -EPERM, "airlock sandbox needs root");
	struct sbx_state st;
	int r = sbx_state_read(set, id, &st, err);
	if (r < 0)
		return r;
	struct sbx_paths p;
	r = sbx_paths_init(set, id, &p, err);
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
			/* An ephemeral sandbox whose supervisor died is debris too. */
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
	/* Cgroups without a sandbox directory. */
	unsigned cg_removed = 0;
	int r = sbx_cgroup_gc(set, id_has_live_dir, (void *)set, &cg_removed);
	removed += cg_removed;
	if (r < 0 && ret == 0)
		ret = al_error_set_errno(err, r, "cannot remove stale cgroups");
	*ret_removed = removed;
	return ret;
}

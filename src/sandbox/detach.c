/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `airlock sandbox exec --detach`: a command that outlives the exec that
 * started it (a service: a dev server, a database), and `sandbox logs`.
 *
 * The command runs exactly as an exec's does (keeper, helper, its own pid
 * namespace; exec.c); what is detached is its supervisor: a host process
 * of its own session, forked here, that does what `sandbox exec` does with
 * stdin /dev/null and stdout and stderr both going to a log file in the
 * sandbox's state directory. So the timeout and the output limit hold
 * (with a default limit: a detached command's output is written on the
 * host's disk), the command ends with the sandbox, and the supervisor
 * ends with the command.
 *
 *   <state>/<id>/logs/N.log     its output (0600, root's)
 *   <state>/<id>/logs/N.cmd     its command line, quoted for a shell
 *   <state>/<id>/logs/N.pid     its supervisor's pid; locked (flock) while it lives
 *   <state>/<id>/logs/N.status  how it ended (written last, atomically)
 *
 * N counts from 1 in each sandbox. The files go with the sandbox.
 */
#include "sandbox/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/parse.h"
#include "common/quote.h"

#define DETACHED_MAX 100000 /* numbers tried for a new log */

static int logs_dir_open(const struct sbx_paths *p, bool create)
{
	_cleanup_close_ int dir = open(p->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0)
		return -errno;
	if (create && mkdirat(dir, "logs", 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(dir, "logs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Writes name in dir through a temporary file and a rename: a reader sees
 * all of it or nothing. */
static int write_atomic(int dir, const char *name, const char *text)
{
	char tmp[64];
	if (snprintf(tmp, sizeof(tmp), ".%s.tmp", name) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	_cleanup_close_ int fd =
		openat(dir, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int r = write_full(fd, text, strlen(text));
	if (r < 0)
		return r;
	return renameat(dir, tmp, dir, name) < 0 ? -errno : 0;
}

static void status_text(int r, const struct al_error *err, const struct sbx_result *res, char *out,
			size_t size)
{
	if (r < 0) {
		snprintf(out, size, "error: %s\n", al_error_message(err));
		return;
	}
	switch (res->outcome) {
	case SBX_EXITED:
		snprintf(out, size, "exited %d\n", res->status);
		break;
	case SBX_SIGNALED:
		snprintf(out, size, "killed by signal %d\n", res->status);
		break;
	case SBX_TIMED_OUT:
		snprintf(out, size, "timed out\n");
		break;
	case SBX_OOM_KILLED:
		snprintf(out, size, "killed at the memory limit\n");
		break;
	case SBX_INTERRUPTED:
		snprintf(out, size, "stopped by signal %d to its supervisor\n", res->status);
		break;
	}
}

/*
 * The detached supervisor: in a session of its own, its stdio on
 * /dev/null; tells the caller on notify ('k' once the command started, or
 * 'e' and the reason), then supervises it to its end and records how it
 * ended. Never returns.
 */
/* What the detached supervisor is handed. */
struct detached {
	const struct sbx_settings *set;
	const char *id;
	char *const *argv;
	const struct sbx_exec_opts *opts;
	const struct sbx_state *st;
	const char *dir; /* the sandbox's state directory */
	dev_t dir_dev;	 /* ... as it was when the command started */
	ino_t dir_ino;
	int logs, log_fd, pid_fd; /* pid_fd: N.pid, locked while it lives */
	unsigned n;
};

static void __attribute__((noreturn)) detached_main(const struct detached *d, int notify)
{
	int logs = d->logs, log_fd = d->log_fd;
	unsigned n = d->n;
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		_exit(125);
	for (int i = 0; i < 3; i++)
		if (dup2(null, i) < 0)
			_exit(125);
	/* Nothing of the caller's stays open here: a pipe it was started
	 * with (a script reading its output) must see EOF when it returns. */
	const int keep[] = { 0, 1, 2, null, logs, log_fd, d->pid_fd, notify };
	if (close_all_fds_except(keep, ARRAY_SIZE(keep)) < 0)
		_exit(125);
	if (chdir("/") < 0)
		_exit(125);
	/* In the sandbox's cgroup, as its keeper is: what it costs (reading
	 * a flood of output) is the sandbox's, it ends when the sandbox is
	 * destroyed, and it is out of the caller's (a login session or a
	 * service whose end would take it along). */
	(void)sbx_cgroup_attach(&d->st->cg, getpid());
	char text[512];
	/* Who it is, for a person: its lock on the file says it lives. */
	int tl = snprintf(text, sizeof(text), "%d\n", (int)getpid());
	(void)!pwrite(d->pid_fd, text, (size_t)tl, 0);
	struct sbx_exec_opts o = *d->opts;
	o.stdin_fd = null;
	o.stdout_fd = log_fd;
	o.stderr_fd = log_fd;
	o.tty = false;
	o.close_at_limit = true;
	struct sbx_result res = { 0 };
	struct al_error err = { 0 };
	int r = sbx_exec_notify(d->set, d->id, d->argv, &o, &notify, &res, &err);
	if (r < 0 && notify >= 0) {
		/* It never started: the caller says why. */
		char msg[sizeof(text)];
		snprintf(msg, sizeof(msg), "e%s", al_error_message(&err));
		(void)write_full(notify, msg, strlen(msg));
	}
	/* Not into a sandbox that is being destroyed (its directory renamed
	 * away, or gone): that would leave a file in what is being removed. */
	struct stat now;
	if (stat(d->dir, &now) == 0 && now.st_dev == d->dir_dev && now.st_ino == d->dir_ino) {
		char name[32];
		status_text(r, &err, &res, text, sizeof(text));
		snprintf(name, sizeof(name), "%u.status", n);
		(void)write_atomic(logs, name, text);
	}
	_exit(0);
}

/* A detached command's files, when it could not be started. */
static void detached_forget(int logs, unsigned n)
{
	static const char *const ext[] = { "log", "cmd", "pid", "status" };
	for (size_t i = 0; i < ARRAY_SIZE(ext); i++) {
		char name[32];
		snprintf(name, sizeof(name), "%u.%s", n, ext[i]);
		(void)unlinkat(logs, name, 0);
	}
}

/* Past this, a command line is recorded cut short (it is for people). */
#define CMD_RECORD_MAX 1024

int sbx_exec_detached(const struct sbx_settings *set, const char *id, char *const *argv,
		      const struct sbx_exec_opts *opts, unsigned *ret_n, struct al_error *err)
{
	struct sbx_state st;
	struct sbx_paths paths;
	int r = sbx_lookup(set, id, &st, &paths, err);
	if (r < 0)
		return r;
	_cleanup_close_ int logs = logs_dir_open(&paths, true);
	if (logs < 0)
		return al_error_set_errno(err, logs, "cannot make %s/logs", paths.dir);
	/* The first free number: O_EXCL settles a race between two. */
	unsigned n = 0;
	_cleanup_close_ int log_fd = -1;
	char name[32];
	for (unsigned i = 1; i <= DETACHED_MAX && log_fd < 0; i++) {
		snprintf(name, sizeof(name), "%u.log", i);
		log_fd = openat(logs, name,
				O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				0600);
		if (log_fd >= 0)
			n = i;
		else if (errno != EEXIST)
			return al_error_set_errno(err, -errno, "cannot create %s/logs/%s",
						  paths.dir, name);
	}
	if (log_fd < 0)
		return al_error_set(err, -ENOSPC, "sandbox %s has had %u detached commands already",
				    id, DETACHED_MAX);
	_cleanup_buf_ struct buf cmd = BUF_INIT(SIZE_MAX);
	r = quote_argv(&cmd, (const char *const *)argv);
	if (r >= 0 && cmd.len > CMD_RECORD_MAX) {
		buf_truncate(&cmd, CMD_RECORD_MAX);
		r = buf_append_str(&cmd, "...");
	}
	if (r >= 0)
		r = buf_append_char(&cmd, '\n');
	if (r >= 0) {
		snprintf(name, sizeof(name), "%u.cmd", n);
		r = write_atomic(logs, name, cmd.data);
	}
	/* Its supervisor holds a lock on N.pid for as long as it lives: taken
	 * here, before it exists, so the command never looks gone. */
	_cleanup_close_ int pid_fd = -1;
	if (r >= 0) {
		snprintf(name, sizeof(name), "%u.pid", n);
		pid_fd = openat(logs, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				0600);
		if (pid_fd < 0 || flock(pid_fd, LOCK_EX | LOCK_NB) < 0)
			r = -errno;
	}
	struct stat dst;
	if (r >= 0 && stat(paths.dir, &dst) < 0)
		r = -errno;
	if (r < 0) {
		detached_forget(logs, n);
		return al_error_set_errno(err, r, "cannot record the command in %s/logs",
					  paths.dir);
	}

	int notify[2];
	if (pipe2(notify, O_CLOEXEC) < 0) {
		r = al_error_set_errno(err, -errno, "pipe");
		detached_forget(logs, n);
		return r;
	}
	struct detached d = {
		.set = set,
		.id = id,
		.argv = argv,
		.opts = opts,
		.st = &st,
		.dir = paths.dir,
		.dir_dev = dst.st_dev,
		.dir_ino = dst.st_ino,
		.logs = logs,
		.log_fd = log_fd,
		.pid_fd = pid_fd,
		.n = n,
	};
	pid_t child = fork();
	if (child < 0) {
		r = al_error_set_errno(err, -errno, "fork");
		close(notify[0]);
		close(notify[1]);
		detached_forget(logs, n);
		return r;
	}
	if (child == 0) {
		/* A session of its own, and not a session leader (it could get
		 * a controlling terminal otherwise): the caller's grandchild. */
		close(notify[0]);
		if (setsid() < 0)
			_exit(125);
		pid_t pid = fork();
		if (pid < 0)
			_exit(125);
		if (pid == 0)
			detached_main(&d, notify[1]);
		_exit(0);
	}
	close(notify[1]);
	int wst;
	while (waitpid(child, &wst, 0) < 0 && errno == EINTR)
		;
	/* 'k' as soon as it runs (the pipe stays open as long as it does),
	 * or 'e' and the reason, then EOF. */
	char reply[512];
	ssize_t got = read(notify[0], reply, 1);
	while (got < 0 && errno == EINTR)
		got = read(notify[0], reply, 1);
	if (got == 1 && reply[0] == 'e') {
		ssize_t more = read_full(notify[0], reply + 1, sizeof(reply) - 2);
		got = more < 0 ? 1 : 1 + more;
	}
	close(notify[0]);
	if (got > 0 && reply[0] == 'k') {
		*ret_n = n;
		return 0;
	}
	/* It never ran: nothing to list. */
	detached_forget(logs, n);
	if (got > 1 && reply[0] == 'e') {
		reply[got] = '\0';
		return al_error_set(err, -EIO, "%s", reply + 1);
	}
	return al_error_set(err, -EIO, "the detached command's supervisor ended before it started");
}

/* ---- listing and logs ---- */

/* Its supervisor holds a lock on N.pid for as long as it lives: the
 * kernel drops it when the process ends (before it is reaped; a pid that
 * is used again means nothing here). */
static bool supervisor_alive(int logs, unsigned n)
{
	char name[32];
	snprintf(name, sizeof(name), "%u.pid", n);
	_cleanup_close_ int fd = openat(logs, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return false;
	return flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
}

static void read_line(int logs, unsigned n, const char *ext, char *out, size_t size)
{
	char name[32];
	snprintf(name, sizeof(name), "%u.%s", n, ext);
	_cleanup_free_ char *text = NULL;
	out[0] = '\0';
	if (read_file_bounded(logs, name, 64 * 1024, &text, NULL) < 0)
		return;
	text[strcspn(text, "\n")] = '\0';
	snprintf(out, size, "%s", text);
}

int sbx_detached_list(const struct sbx_settings *set, const char *id, struct sbx_detached **ret,
		      size_t *ret_n, struct al_error *err)
{
	*ret = NULL;
	*ret_n = 0;
	struct sbx_state st;
	struct sbx_paths paths;
	int r = sbx_lookup(set, id, &st, &paths, err);
	if (r < 0)
		return r;
	int logs = logs_dir_open(&paths, false);
	if (logs == -ENOENT)
		return 0;
	if (logs < 0)
		return al_error_set_errno(err, logs, "cannot open %s/logs", paths.dir);
	DIR *d = fdopendir(logs);
	if (!d) {
		close(logs);
		return al_error_set_errno(err, -errno, "cannot read %s/logs", paths.dir);
	}
	struct sbx_detached *v = NULL;
	size_t cnt = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		uint64_t n;
		const char *end;
		if (de->d_name[0] == '0' || parse_u64_prefix(de->d_name, &n, &end) < 0 ||
		    strcmp(end, ".log") != 0 || n == 0 || n > DETACHED_MAX)
			continue;
		struct sbx_detached *nv = realloc(v, (cnt + 1) * sizeof(*v));
		if (!nv) {
			free(v);
			closedir(d);
			return al_error_set(err, -ENOMEM, "out of memory");
		}
		v = nv;
		struct sbx_detached *e = &v[cnt++];
		*e = (struct sbx_detached){ .n = (unsigned)n };
		read_line(dirfd(d), e->n, "cmd", e->command, sizeof(e->command));
		read_line(dirfd(d), e->n, "status", e->status, sizeof(e->status));
		if (e->status[0])
			e->state = SBX_DETACHED_ENDED;
		else if (supervisor_alive(dirfd(d), e->n))
			e->state = SBX_DETACHED_RUNNING;
		else
			e->state = SBX_DETACHED_LOST;
	}
	closedir(d);
	/* In the order they were started. */
	for (size_t i = 1; i < cnt; i++)
		for (size_t j = i; j > 0 && v[j - 1].n > v[j].n; j--) {
			struct sbx_detached t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	*ret = v;
	*ret_n = cnt;
	return 0;
}

int sbx_detached_log(const struct sbx_settings *set, const char *id, unsigned n, int *ret_fd,
		     int *ret_logs, unsigned *ret_n, struct al_error *err)
{
	struct sbx_detached *v;
	size_t cnt;
	int r = sbx_detached_list(set, id, &v, &cnt, err);
	if (r < 0)
		return r;
	unsigned want = n ? n : cnt ? v[cnt - 1].n : 0;
	free(v);
	if (cnt == 0)
		return al_error_set(err, -ENOENT,
				    "sandbox %s has no detached commands (`sandbox exec --detach`)",
				    id);
	struct sbx_state st;
	struct sbx_paths paths;
	r = sbx_lookup(set, id, &st, &paths, err);
	if (r < 0)
		return r;
	_cleanup_close_ int logs = logs_dir_open(&paths, false);
	if (logs < 0)
		return al_error_set_errno(err, logs, "cannot open %s/logs", paths.dir);
	char name[32];
	snprintf(name, sizeof(name), "%u.log", want);
	int fd = openat(logs, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return al_error_set(err, -ENOENT, "sandbox %s has no detached command %u", id,
				    want);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "cannot open %s/logs/%s", paths.dir, name);
	*ret_fd = fd;
	*ret_logs = TAKE_FD(logs);
	*ret_n = want;
	return 0;
}

bool sbx_detached_ended(int logs, unsigned n)
{
	char name[32];
	snprintf(name, sizeof(name), "%u.status", n);
	if (faccessat(logs, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return true;
	/* A supervisor killed with SIGKILL writes nothing: its command went
	 * with it (the helper's end of the channel), so it ended too. */
	return !supervisor_alive(logs, n);
}

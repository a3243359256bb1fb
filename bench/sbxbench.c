/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sbxbench: wall-clock timer for sandbox start-up, used by bench/run.sh.
 *
 *   sbxbench run [-n RUNS] [-w WARMUP] [-t TIMEOUT_S] [-o RAW.tsv] [-e ERR.log]
 *                --tool NAME ARGV... [--tool NAME ARGV...]...
 *       Runs the tools interleaved, round by round (A B C, B C A, C A B, ...: the
 *       first tool rotates so that no tool always follows the same one), RUNS
 *       timed rounds after WARMUP untimed ones. One run is timed from just
 *       before fork() to the moment the last process it left behind has been
 *       reaped: the driver is a child subreaper, so daemons, sandbox inits and
 *       anything a tool orphans come back to it and are waited for (bwrap, for
 *       one, exits before its namespace's processes are gone). stdin and
 *       stdout are /dev/null; stderr goes to ERR.log. Writes one line per timed
 *       run to RAW.tsv: tool, round, wall nanoseconds, CPU nanoseconds (user +
 *       system of every process of the run that was reaped, from
 *       RUSAGE_CHILDREN; a daemon started earlier is not counted), exit status,
 *       page faults (minor + major, of the same processes). A tool named
 *       with --tool-hidecg2 runs in a private mount namespace in which an
 *       empty tmpfs covers /sys/fs/cgroup/unified (crun refuses to run on a
 *       cgroup v1 "hybrid" host otherwise); entering it costs one setns() in
 *       the child, which is inside the timed interval. In a tool's arguments
 *       "{n}" becomes a number unique to the run (crun wants a fresh id), and
 *       leading NAME=VALUE arguments are set in the environment, as with env(1)
 *       but without its exec.
 *       Stops at the first run that fails (non-zero status or longer than
 *       TIMEOUT_S), kills what it left, and exits 1.
 *
 *   sbxbench cgattach [-n RUNS] [-i IDLE_MS] CGROUP_V1_DIR
 *       Creates CGROUP_V1_DIR/sbxbench-PID, then RUNS times: forks a child that
 *       waits, sleeps IDLE_MS, writes the child's pid to the new cgroup's
 *       cgroup.procs (timed: "first"), moves it back to the parent's cgroup
 *       (timed: "back"), moves it in again at once (timed: "again"). Prints
 *       one line per run: first_ns back_ns again_ns. Removes the cgroup.
 */
#ifndef _GNU_SOURCE /* also given on the command line, for src/common */
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/parse.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define MAX_TOOLS 16

struct tool {
	const char *name;
	char **argv;
	bool hidecg2;
};

static volatile sig_atomic_t timed_out, stop_requested;

static void on_alarm(int sig)
{
	(void)sig;
	timed_out = 1;
}

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sbxbench: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static long parse_long(const char *s, const char *what)
{
	uint64_t v;
	if (parse_u64(s, &v) < 0 || v > LONG_MAX)
		die("%s wants a non-negative number, not '%s'", what, s);
	return (long)v;
}

/* Kills every process whose parent is us: after a timeout, what the run left. */
static void kill_our_children(void)
{
	pid_t self = getpid();
	DIR *d = opendir("/proc");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		uint64_t pid;
		if (parse_u64(de->d_name, &pid) < 0 || pid <= 1 || pid > INT_MAX)
			continue;
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		/* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
		char *rp = strrchr(buf, ')');
		if (!rp || strlen(rp) < 5)
			continue;
		const char *end;
		int64_t ppid;
		if (parse_i64_prefix(rp + 4, &ppid, &end) == 0 && ppid == self)
			kill((pid_t)pid, SIGKILL);
	}
	closedir(d);
}

/*
 * Returns an fd of a mount namespace in which /sys/fs/cgroup/unified is
 * covered by an empty tmpfs, or -1 if there is no cgroup2 mount there (pure
 * v1 or pure v2 host: nothing to hide). The namespace lives as long as the fd;
 * the helper process that made it is gone when this returns.
 */
static int make_hidden_cg2_ns(void)
{
	struct statfs sfs;
	if (statfs("/sys/fs/cgroup/unified", &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC)
		return -1;
	int ready[2], done[2];
	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(done, O_CLOEXEC) < 0)
		die("pipe: %s", al_strerror(errno));
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", al_strerror(errno));
	if (pid == 0) {
		close(ready[0]);
		close(done[1]);
		char ok = 'n';
		if (unshare(CLONE_NEWNS) == 0 &&
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
		    mount("sbxbench-hide-cgroup2", "/sys/fs/cgroup/unified", "tmpfs",
			  MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64m,mode=755") == 0)
			ok = 'y';
		else
			fprintf(stderr, "sbxbench: cannot hide the cgroup2 mount: %s\n",
				al_strerror(errno));
		if (write(ready[1], &ok, 1) != 1)
			_exit(1);
		char c;
		while (read(done[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(ready[1]);
	close(done[0]);
	char ok = 0;
	if (read(ready[0], &ok, 1) != 1 || ok != 'y')
		die("could not set up the mount namespace for crun");
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("open %s: %s", path, al_strerror(errno));
	close(done[1]);
	close(ready[0]);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return fd;
}

/* A copy of argv in which each "{n}" is replaced by SEQ (unique container ids). */
static char **expand_args(char **argv, long seq)
{
	size_t n = 0;
	while (argv[n])
		n++;
	char **out = calloc(n + 1, sizeof(char *));
	if (!out)
		return argv;
	for (size_t i = 0; i < n; i++) {
		const char *a = argv[i], *mark = strstr(a, "{n}");
		if (!mark) {
			out[i] = argv[i];
			continue;
		}
		size_t size = strlen(a) + 24;
		out[i] = malloc(size);
		if (!out[i])
			return argv;
		snprintf(out[i], size, "%.*s%ld%s", (int)(mark - a), a, seq, mark + 3);
	}
	return out;
}

/* CPU time and page faults of every reaped child so far. */
static uint64_t children_cpu_ns(uint64_t *faults)
{
	struct rusage ru;
	getrusage(RUSAGE_CHILDREN, &ru);
	*faults = (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt;
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000u +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
}

/* One timed run. Returns the exit status (128+sig if killed), -1 on timeout. */
static int run_once(const struct tool *t, long seq, int nsfd, int errfd, int devnull,
		    unsigned timeout_s, uint64_t *ns, uint64_t *cpu_ns, uint64_t *faults)
{
	uint64_t f0;
	uint64_t c0 = children_cpu_ns(&f0);
	uint64_t t0 = now_ns();
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", al_strerror(errno));
	if (pid == 0) {
		if (t->hidecg2 && nsfd >= 0 && setns(nsfd, CLONE_NEWNS) < 0) {
			dprintf(errfd, "sbxbench: setns: %s\n", al_strerror(errno));
			_exit(126);
		}
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(errfd, 2);
		char **argv = expand_args(t->argv, seq);
		/* Leading NAME=VALUE arguments set the environment, as env(1) would. */
		while (argv[0] && strchr(argv[0], '=') && argv[0][0] != '/' && argv[0][0] != '=') {
			char *eq = strchr(argv[0], '=');
			*eq = 0;
			setenv(argv[0], eq + 1, 1);
			argv++;
		}
		if (!argv[0])
			_exit(127);
		execvp(argv[0], argv);
		dprintf(2, "sbxbench: exec %s: %s\n", t->argv[0], al_strerror(errno));
		_exit(127);
	}
	timed_out = 0;
	alarm(timeout_s);
	int st = 0, status = -1;
	bool main_done = false;
	for (;;) {
		int wst;
		pid_t w = waitpid(-1, &wst, __WALL);
		if (w < 0) {
			if (errno == EINTR) {
				if (timed_out)
					break;
				continue;
			}
			if (errno == ECHILD)
				break;
			die("waitpid: %s", al_strerror(errno));
		}
		if (w == pid) {
			main_done = true;
			st = wst;
		}
	}
	alarm(0);
	*ns = now_ns() - t0;
	uint64_t f1;
	*cpu_ns = children_cpu_ns(&f1) - c0;
	*faults = f1 - f0;
	if (timed_out) {
		/* Killed children's orphans come back to us: repeat until none is left. */
		for (int tries = 0; tries < 100; tries++) {
			kill_our_children();
			pid_t w;
			while ((w = waitpid(-1, NULL, __WALL | WNOHANG)) > 0)
				;
			if (w < 0 && errno == ECHILD)
				break;
			usleep(20000);
		}
		return -1;
	}
	if (!main_done)
		return -1;
	if (WIFEXITED(st))
		status = WEXITSTATUS(st);
	else if (WIFSIGNALED(st))
		status = 128 + WTERMSIG(st);
	return status;
}

static int cmd_run(int argc, char **argv)
{
	long runs = 200, warmup = 5, timeout_s = 30;
	const char *out = NULL, *errlog = "/dev/null";
	struct tool tools[MAX_TOOLS];
	int ntools = 0;
	int i = 1;
	for (; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--tool") == 0 || strcmp(a, "--tool-hidecg2") == 0)
			break;
		if (i + 1 >= argc)
			die("%s wants a value", a);
		if (strcmp(a, "-n") == 0)
			runs = parse_long(argv[++i], "-n");
		else if (strcmp(a, "-w") == 0)
			warmup = parse_long(argv[++i], "-w");
		else if (strcmp(a, "-t") == 0)
			timeout_s = parse_long(argv[++i], "-t");
		else if (strcmp(a, "-o") == 0)
			out = argv[++i];
		else if (strcmp(a, "-e") == 0)
			errlog = argv[++i];
		else
			die("unknown option '%s'", a);
	}
	while (i < argc) {
		if (ntools == MAX_TOOLS)
			die("too many tools (at most %d)", MAX_TOOLS);
		struct tool *t = &tools[ntools++];
		t->hidecg2 = strcmp(argv[i], "--tool-hidecg2") == 0;
		if (i + 2 >= argc)
			die("%s wants NAME and a command", argv[i]);
		t->name = argv[i + 1];
		i += 2;
		int start = i;
		while (i < argc && strcmp(argv[i], "--tool") != 0 &&
		       strcmp(argv[i], "--tool-hidecg2") != 0)
			i++;
		if (i == start)
			die("tool %s has no command", t->name);
		/* The argv array is NULL-terminated in place: copy the slice. */
		t->argv = calloc((size_t)(i - start + 1), sizeof(char *));
		if (!t->argv)
			die("out of memory");
		memcpy(t->argv, &argv[start], (size_t)(i - start) * sizeof(char *));
	}
	if (ntools == 0)
		die("no --tool given");
	if (timeout_s == 0)
		timeout_s = 1;

	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		die("PR_SET_CHILD_SUBREAPER: %s", al_strerror(errno));
	struct sigaction sa = { .sa_handler = on_alarm };
	sigaction(SIGALRM, &sa, NULL);
	/* SIGTERM/SIGINT: finish (and reap) the current run, then stop. */
	struct sigaction so = { .sa_handler = on_stop };
	sigaction(SIGTERM, &so, NULL);
	sigaction(SIGINT, &so, NULL);
	sigaction(SIGHUP, &so, NULL);

	int nsfd = -1;
	for (int k = 0; k < ntools; k++)
		if (tools[k].hidecg2) {
			nsfd = make_hidden_cg2_ns();
			break;
		}
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	int errfd = open(errlog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (devnull < 0 || errfd < 0)
		die("open /dev/null or %s: %s", errlog, al_strerror(errno));
	FILE *fo = out ? fopen(out, "w") : stdout;
	if (!fo)
		die("open %s: %s", out, al_strerror(errno));

	long seq = 0;
	for (long r = 0; r < warmup + runs; r++) {
		for (int j = 0; j < ntools; j++) {
			const struct tool *t = &tools[(r + j) % ntools];
			uint64_t ns, cpu_ns, faults;
			int status = run_once(t, seq++, nsfd, errfd, devnull, (unsigned)timeout_s,
					      &ns, &cpu_ns, &faults);
			if (status != 0) {
				if (status < 0)
					fprintf(stderr,
						"sbxbench: %s took longer than %ld s (round %ld); killed it\n",
						t->name, timeout_s, r);
				else
					fprintf(stderr,
						"sbxbench: %s exited with status %d (round %ld); see %s\n",
						t->name, status, r, errlog);
				if (fo != stdout)
					fclose(fo);
				return 1;
			}
			if (stop_requested) {
				fprintf(stderr, "sbxbench: interrupted (round %ld)\n", r);
				if (fo != stdout)
					fclose(fo);
				return 1;
			}
			if (r >= warmup)
				fprintf(fo, "%s\t%ld\t%llu\t%llu\t%d\t%llu\n", t->name, r - warmup,
					(unsigned long long)ns, (unsigned long long)cpu_ns, status,
					(unsigned long long)faults);
		}
	}
	if (fo != stdout && fclose(fo) != 0)
		die("write %s: %s", out, al_strerror(errno));
	return 0;
}

static int write_str(const char *path, const char *s, uint64_t *ns)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = strlen(s);
	uint64_t t0 = now_ns();
	ssize_t n = write(fd, s, len);
	uint64_t t1 = now_ns();
	int e = errno;
	close(fd);
	if (n != (ssize_t)len)
		return n < 0 ? -e : -EIO;
	if (ns)
		*ns = t1 - t0;
	return 0;
}

/* Our own cgroup in the hierarchy mounted at ROOT (from /proc/self/cgroup). */
static int own_cgroup(const char *root, char *buf, size_t size)
{
	struct statfs sfs;
	if (statfs(root, &sfs) < 0)
		return -errno;
	/* The controller list is the mount point's last component (v1 layout). */
	const char *ctl = strrchr(root, '/');
	ctl = ctl ? ctl + 1 : root;
	FILE *f = fopen("/proc/self/cgroup", "r");
	if (!f)
		return -errno;
	char line[4096];
	int r = -ENOENT;
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = 0;
		char *path = c2 + 1;
		path[strcspn(path, "\n")] = 0;
		char *ctls = c1 + 1;
		for (char *tok = ctls; tok && *tok;) {
			char *comma = strchr(tok, ',');
			size_t tl = comma ? (size_t)(comma - tok) : strlen(tok);
			if (tl == strlen(ctl) && strncmp(tok, ctl, tl) == 0) {
				snprintf(buf, size, "%s%s", root, path);
				r = 0;
			}
			tok = comma ? comma + 1 : NULL;
		}
	}
	fclose(f);
	return r;
}

static int cmd_cgattach(int argc, char **argv)
{
	long runs = 10, idle_ms = 200;
	int i = 1;
	for (; i + 1 < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "-n") == 0)
			runs = parse_long(argv[++i], "-n");
		else if (strcmp(argv[i], "-i") == 0)
			idle_ms = parse_long(argv[++i], "-i");
		else
			die("unknown option '%s'", argv[i]);
	}
	if (i != argc - 1)
		die("usage: sbxbench cgattach [-n RUNS] [-i IDLE_MS] CGROUP_V1_DIR");
	const char *root = argv[i];
	char home[4096], dir[4200], procs[4300], home_procs[4200];
	int r = own_cgroup(root, home, sizeof(home));
	if (r < 0)
		die("cannot find our cgroup under %s: %s", root, al_strerror(r));
	snprintf(dir, sizeof(dir), "%s/sbxbench-%d", root, (int)getpid());
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	snprintf(home_procs, sizeof(home_procs), "%s/cgroup.procs", home);
	if (mkdir(dir, 0755) < 0)
		die("mkdir %s: %s", dir, al_strerror(errno));
	int rc = 0;
	for (long k = 0; k < runs && rc == 0; k++) {
		int p[2];
		if (pipe2(p, O_CLOEXEC) < 0)
			die("pipe: %s", al_strerror(errno));
		pid_t pid = fork();
		if (pid < 0)
			die("fork: %s", al_strerror(errno));
		if (pid == 0) {
			close(p[1]);
			char c;
			while (read(p[0], &c, 1) < 0 && errno == EINTR)
				;
			_exit(0);
		}
		close(p[0]);
		struct timespec idle = { idle_ms / 1000, (idle_ms % 1000) * 1000000 };
		nanosleep(&idle, NULL);
		char pidstr[32];
		snprintf(pidstr, sizeof(pidstr), "%d", (int)pid);
		uint64_t first = 0, back = 0, again = 0;
		if ((r = write_str(procs, pidstr, &first)) < 0 ||
		    (r = write_str(home_procs, pidstr, &back)) < 0 ||
		    (r = write_str(procs, pidstr, &again)) < 0) {
			fprintf(stderr, "sbxbench: moving %s between cgroups: %s\n", pidstr,
				al_strerror(r));
			rc = 1;
		} else {
			printf("%llu %llu %llu\n", (unsigned long long)first,
			       (unsigned long long)back, (unsigned long long)again);
		}
		close(p[1]);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	/* A cgroup whose last task just exited may still be busy for a moment. */
	for (int tries = 0; rmdir(dir) < 0; tries++) {
		if (errno != EBUSY || tries > 100) {
			fprintf(stderr, "sbxbench: rmdir %s: %s\n", dir, al_strerror(errno));
			return 1;
		}
		usleep(10000);
	}
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		die("usage: sbxbench run|cgattach ... (see the comment at the top of sbxbench.c)");
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (strcmp(argv[1], "run") == 0)
		return cmd_run(argc - 1, argv + 1);
	if (strcmp(argv[1], "cgattach") == 0)
		return cmd_cgattach(argc - 1, argv + 1);
	die("unknown command '%s'", argv[1]);
}

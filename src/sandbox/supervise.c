/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The supervisor side of one command: stream stdin in and stdout/stderr
 * out as the command writes them, cap the output, enforce the wall-clock
 * timeout, and collect the exit status from the status channel.
 *
 * Bytes from the sandbox are only copied, never interpreted. Writes to our
 * own stdout/stderr happen in chunks of at most PIPE_BUF after POLLOUT, so
 * a slow reader cannot stop the timeout from firing.
 */
#include "sandbox/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <sys/signalfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"

#define PUMP_CHUNK PIPE_BUF
#define DRAIN_MS 1000 /* output still accepted after the command's end */

int sbx_msg_send(int fd, enum sbx_msg_kind kind, int32_t value, const char *text)
{
	struct sbx_msg m = { .magic = SBX_MSG_MAGIC, .kind = (uint32_t)kind, .value = value };
	if (text)
		snprintf(m.text, sizeof(m.text), "%s", text);
	return write_full(fd, &m, sizeof(m));
}

int sbx_msg_recv(int fd, struct sbx_msg *ret)
{
	struct sbx_msg m;
	size_t got = 0;
	while (got < sizeof(m)) {
		ssize_t n = read(fd, (char *)&m + got, sizeof(m) - got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return got == 0 ? -EPIPE : -EBADMSG;
		got += (size_t)n;
	}
	if (m.magic != SBX_MSG_MAGIC || m.kind == 0 || m.kind >= SBX_MSG_KIND_MAX)
		return -EBADMSG;
	if (memchr(m.text, '\0', sizeof(m.text)) == NULL)
		return -EBADMSG;
	if (m.kind == SBX_MSG_SIGNALED && (m.value <= 0 || m.value >= 65))
		return -EBADMSG;
	if (m.kind == SBX_MSG_EXITED && (m.value < 0 || m.value > 255))
		return -EBADMSG;
	if (m.kind == SBX_MSG_STARTED && m.value <= 1)
		return -EBADMSG;
	/* Its descriptors went with a plain read(). */
	if (m.kind == SBX_MSG_LISTENERS || m.kind == SBX_MSG_PTY)
		return -EBADMSG;
	*ret = m;
	return 0;
}

void sbx_net_fds_close(struct sbx_net_fds *l)
{
	l->proxy = safe_close(l->proxy);
	l->http = safe_close(l->http);
	l->https = safe_close(l->https);
	l->dns = safe_close(l->dns);
}

/* One record with descriptors attached (SCM_RIGHTS on a socket). */
static int msg_send_fds(int fd, struct sbx_msg *m, const int *fds, size_t n_fds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * SBX_NET_FDS)];
		struct cmsghdr align;
	} u;
	if (n_fds == 0 || n_fds > SBX_NET_FDS)
		return -EINVAL;
	memset(&u, 0, sizeof(u));
	struct iovec iov = { .iov_base = m, .iov_len = sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
			     .msg_controllen = CMSG_SPACE(sizeof(int) * n_fds) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
	memcpy(CMSG_DATA(cm), fds, sizeof(int) * n_fds);
	ssize_t n;
	while ((n = sendmsg(fd, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (n < 0)
		return -errno;
	/* The descriptors went with the first byte; the rest is plain data. */
	if ((size_t)n < sizeof(*m))
		return write_full(fd, (char *)m + n, sizeof(*m) - (size_t)n);
	return 0;
}

int sbx_msg_send_listeners(int fd, const struct sbx_net_fds *l)
{
	struct sbx_msg m = { .magic = SBX_MSG_MAGIC,
			     .kind = SBX_MSG_LISTENERS,
			     .value = SBX_NET_FDS };
	int fds[SBX_NET_FDS] = { l->proxy, l->http, l->https, l->dns };
	return msg_send_fds(fd, &m, fds, SBX_NET_FDS);
}

int sbx_msg_send_pty(int fd, int master)
{
	struct sbx_msg m = { .magic = SBX_MSG_MAGIC, .kind = SBX_MSG_PTY, .value = 1 };
	return msg_send_fds(fd, &m, &master, 1);
}

static void close_fd_array(const int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		safe_close(fds[i]);
}

#define MSG_FDS_MAX (SBX_NET_FDS + 4) /* more than any record carries: too many is seen */

/*
 * One record and whatever descriptors came with it (at most MSG_FDS_MAX
 * kept, the rest closed); the record's fields are checked as sbx_msg_recv
 * checks them, the descriptors are the caller's to check and close.
 */
static int msg_recv_fds(int fd, struct sbx_msg *ret, int *fds, size_t *ret_n_fds)
{
	struct sbx_msg m;
	union {
		char buf[CMSG_SPACE(sizeof(int) * MSG_FDS_MAX)];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct iovec iov = { .iov_base = &m, .iov_len = sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	*ret_n_fds = 0;
	ssize_t n;
	while ((n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (n < 0)
		return -errno;
	size_t n_fds = 0;
	bool bad = (mh.msg_flags & MSG_CTRUNC) != 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) {
			bad = true;
			continue;
		}
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int f;
			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (n_fds < MSG_FDS_MAX)
				fds[n_fds++] = f;
			else
				close(f);
		}
	}
	if (n == 0) {
		close_fd_array(fds, n_fds);
		return -EPIPE;
	}
	if (!bad && (size_t)n < sizeof(m)) {
		ssize_t rest = read_full(fd, (char *)&m + n, sizeof(m) - (size_t)n);
		if (rest < 0 || (size_t)rest != sizeof(m) - (size_t)n)
			bad = true;
	}
	if (!bad)
		bad = m.magic != SBX_MSG_MAGIC || m.kind == 0 || m.kind >= SBX_MSG_KIND_MAX ||
		      memchr(m.text, '\0', sizeof(m.text)) == NULL ||
		      (m.kind == SBX_MSG_SIGNALED && (m.value <= 0 || m.value >= 65)) ||
		      (m.kind == SBX_MSG_EXITED && (m.value < 0 || m.value > 255)) ||
		      (m.kind == SBX_MSG_STARTED && m.value <= 1);
	if (bad) {
		close_fd_array(fds, n_fds);
		return -EBADMSG;
	}
	*ret = m;
	*ret_n_fds = n_fds;
	return 0;
}

int sbx_msg_recv_listeners(int fd, struct sbx_msg *ret, struct sbx_net_fds *ret_fds)
{
	struct sbx_msg m;
	int fds[MSG_FDS_MAX];
	size_t n_fds;
	int r = msg_recv_fds(fd, &m, fds, &n_fds);
	if (r < 0)
		return r;
	bool bad;
	if (m.kind == SBX_MSG_LISTENERS)
		bad = m.value != SBX_NET_FDS || n_fds != SBX_NET_FDS;
	else
		bad = n_fds != 0 || m.kind == SBX_MSG_PTY;
	for (size_t i = 0; !bad && i < n_fds; i++) {
		struct stat st;
		bad = fstat(fds[i], &st) < 0 || !S_ISSOCK(st.st_mode);
	}
	if (bad) {
		close_fd_array(fds, n_fds);
		return -EBADMSG;
	}
	*ret_fds = (struct sbx_net_fds){ -1, -1, -1, -1 };
	if (n_fds == SBX_NET_FDS)
		*ret_fds = (struct sbx_net_fds){ fds[0], fds[1], fds[2], fds[3] };
	*ret = m;
	return 0;
}

/* The multiplexer of a devpts instance: every master is opened from it. */
#define PTMX_MAJOR 5
#define PTMX_MINOR 2

int sbx_msg_recv_pty(int fd, struct sbx_msg *ret, int *ret_master)
{
	struct sbx_msg m;
	int fds[MSG_FDS_MAX];
	size_t n_fds;
	int r = msg_recv_fds(fd, &m, fds, &n_fds);
	if (r < 0)
		return r;
	bool bad;
	if (m.kind == SBX_MSG_PTY) {
		struct stat st;
		int fl;
		/* Only ever read, written and told its window size: still, a
		 * descriptor from inside a sandbox is checked to be what it
		 * claims, a terminal's master open for reading and writing. */
		bad = m.value != 1 || n_fds != 1 || fstat(fds[0], &st) < 0 ||
		      !S_ISCHR(st.st_mode) || major(st.st_rdev) != PTMX_MAJOR ||
		      minor(st.st_rdev) != PTMX_MINOR || (fl = fcntl(fds[0], F_GETFL)) < 0 ||
		      (fl & O_ACCMODE) != O_RDWR || (fl & O_PATH);
	} else {
		bad = n_fds != 0 || m.kind == SBX_MSG_LISTENERS;
	}
	if (bad) {
		close_fd_array(fds, n_fds);
		return -EBADMSG;
	}
	*ret_master = m.kind == SBX_MSG_PTY ? fds[0] : -1;
	*ret = m;
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct out_stream {
	int from; /* read end of the sandbox's pipe, -1 when done */
	int to;	  /* our stdout or stderr */
	char buf[PUMP_CHUNK];
	size_t len; /* bytes waiting to be written */
};

static void kill_pidfd(int pidfd)
{
	if (pidfd >= 0)
		syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
}

/*
 * The user's terminal, in raw mode while a command with a terminal of its
 * own runs: every key (Ctrl-C, Ctrl-Z included) goes to the command's
 * terminal, whose line discipline turns it into a signal for the
 * foreground process group inside. The mode is restored on the way out of
 * sbx_supervise, and by a handler of every signal that would end us
 * otherwise (SIGINT, SIGTERM, SIGHUP are events of the loop; SIGKILL
 * cannot be caught: `stty sane` after one).
 */
static struct termios tio_saved;
static volatile sig_atomic_t tio_fd = -1;
static struct sigaction tio_old_actions[_NSIG];
static bool tio_handled[_NSIG];

/* Whether signal sig's default action ends the process: all but those
 * that stop, continue or are ignored (and SIGKILL, SIGSTOP: uncatchable).
 * SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGWINCH are the loop's events. */
static bool tio_fatal_by_default(int sig)
{
	switch (sig) {
	case SIGKILL:
	case SIGSTOP:
	case SIGTSTP:
	case SIGTTIN:
	case SIGTTOU:
	case SIGCONT:
	case SIGCHLD:
	case SIGURG:
	case SIGWINCH:
	case SIGINT:
	case SIGTERM:
	case SIGHUP:
	case SIGPIPE:
		return false;
	}
	return true;
}

static void tio_unhandle(void)
{
	for (int sig = 1; sig < _NSIG; sig++)
		if (tio_handled[sig]) {
			sigaction(sig, &tio_old_actions[sig], NULL);
			tio_handled[sig] = false;
		}
}

static void tio_fatal(int sig)
{
	int saved_errno = errno;
	if (tio_fd >= 0)
		tcsetattr(tio_fd, TCSANOW, &tio_saved);
	/* SA_RESETHAND left the default action, SA_NODEFER lets it act now. */
	raise(sig);
	errno = saved_errno;
}

/* Raw mode on fd, when it is a terminal whose foreground we are (a
 * background job leaves it alone rather than being stopped by SIGTTOU). */
static struct termios tio_raw_mode;

static void tio_raw(int fd)
{
	struct termios raw;
	if (fd < 0 || tio_fd >= 0 || !isatty(fd) || tcgetpgrp(fd) != getpgrp() ||
	    tcgetattr(fd, &tio_saved) < 0)
		return;
	struct sigaction sa = { .sa_handler = tio_fatal, .sa_flags = SA_RESETHAND | SA_NODEFER };
	sigemptyset(&sa.sa_mask);
	/* Every signal that would end us as things are (left to its default
	 * action), the real-time ones included. */
	for (int sig = 1; sig < _NSIG; sig++) {
		struct sigaction cur;
		if (!tio_fatal_by_default(sig) || sigaction(sig, NULL, &cur) < 0 ||
		    (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)
			continue;
		if (sigaction(sig, &sa, &tio_old_actions[sig]) == 0)
			tio_handled[sig] = true;
	}
	tio_fd = fd;
	raw = tio_saved;
	cfmakeraw(&raw);
	raw.c_cc[VMIN] = 1;
	raw.c_cc[VTIME] = 0;
	tio_raw_mode = raw;
	if (tcsetattr(fd, TCSANOW, &raw) < 0) {
		/* Nothing changed, then: nothing to restore. */
		tio_fd = -1;
		tio_unhandle();
	}
}

static void tio_restore(void)
{
	int fd = tio_fd;
	if (fd < 0)
		return;
	/* After what we wrote has gone out, and without what was typed but
	 * not read: the answer of the user's terminal to a query the command
	 * printed last must not become the shell's next input. SIGTTOU
	 * blocked: in a background job by now, we are not stopped for it. */
	sigset_t ttou, old;
	sigemptyset(&ttou);
	sigaddset(&ttou, SIGTTOU);
	sigprocmask(SIG_BLOCK, &ttou, &old);
	while (tcsetattr(fd, TCSAFLUSH, &tio_saved) < 0 && errno == EINTR)
		;
	sigprocmask(SIG_SETMASK, &old, NULL);
	tio_fd = -1;
	tio_unhandle();
}

/* Continued after a stop (SIGSTOP from outside: the shell that
 * continues us may have put its own mode back): raw again, when we are
 * still the terminal's foreground. */
static void tio_continued(void)
{
	int fd = tio_fd;
	if (fd >= 0 && tcgetpgrp(fd) == getpgrp())
		(void)tcsetattr(fd, TCSANOW, &tio_raw_mode);
}

/* Where the window size is read: stdin, or stdout, whichever is a terminal. */
static int winsize_source(const struct sbx_exec_opts *opts)
{
	if (opts->stdin_fd >= 0 && isatty(opts->stdin_fd))
		return opts->stdin_fd;
	if (opts->stdout_fd >= 0 && isatty(opts->stdout_fd))
		return opts->stdout_fd;
	return -1;
}

static void winsize_pass(int from, int pty)
{
	struct winsize ws;
	if (from >= 0 && pty >= 0 && ioctl(from, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
		(void)ioctl(pty, TIOCSWINSZ, &ws);
}

int sbx_supervise(int status_fd, int kill_fd, const struct sbx_exec_opts *opts,
		  struct sbx_stdio *io, const struct sbx_cgroup *cg, uint64_t oom_before,
		  struct sbx_result *ret, struct al_error *err)
{
	struct sbx_result res = { .outcome = SBX_EXITED };
	uint64_t deadline = opts->timeout_ms ? now_ms() + opts->timeout_ms : 0;
	bool have_status = false, timed_out = false, truncated_note = false;
	uint64_t drain_deadline = 0;
	int interrupted = 0;

	/* Signals that would kill us are turned into events, so the sandbox
	 * is always torn down. */
	sigset_t mask, old;
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGPIPE);
	if (opts->tty) {
		sigaddset(&mask, SIGWINCH);
		sigaddset(&mask, SIGCONT);
	}
	sigprocmask(SIG_BLOCK, &mask, &old);
	_cleanup_close_ int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

	struct out_stream outs[2] = {
		{ .from = io->out[0], .to = opts->stdout_fd },
		{ .from = io->err[0], .to = opts->stderr_fd },
	};
	io->out[0] = io->err[0] = -1;
	int in_from = opts->stdin_fd, in_to = io->in[1];
	io->in[1] = -1;
	char in_buf[PUMP_CHUNK];
	size_t in_len = 0;
	char in_last = 0; /* the last byte of input read, for a terminal's EOF */
	/* With a terminal: the command's input, output and window size go
	 * through its master (pty, ours), once its init has sent it; until
	 * then stdin waits (in_to -1, in_from kept). */
	int pty = -1, winfd = opts->tty ? winsize_source(opts) : -1;
	if (in_from < 0 || opts->tty)
		in_to = safe_close(in_to);
	if (in_to >= 0)
		fd_set_nonblock(in_to, true);

	int status = status_fd;
	int r = 0;
	for (;;) {
		/* The truncation note goes out through stderr's own queue, after
		 * what was kept: never a blocking write in this loop. */
		if (res.output_truncated && !truncated_note && !outs[0].len && !outs[1].len) {
			truncated_note = true;
			int len = snprintf(outs[1].buf, sizeof(outs[1].buf),
					   "\n[airlock: output truncated at %" PRIu64 " bytes]\n",
					   opts->output_limit);
			outs[1].len = len > 0 ? (size_t)len : 0;
		}
		bool outputs_open = outs[0].from >= 0 || outs[1].from >= 0 || outs[0].len ||
				    outs[1].len;
		if (have_status && !outputs_open)
			break;
		if (status < 0 && !outputs_open)
			break;
		/*
		 * Once the command is over (status in, killed, or the channel
		 * gone), its output gets a moment to drain, not forever: a copy
		 * of a pipe end handed to some other process must not hold us.
		 */
		bool over = status < 0 || timed_out || interrupted;
		if (over && !drain_deadline)
			drain_deadline = now_ms() + DRAIN_MS;
		if (drain_deadline && now_ms() >= drain_deadline)
			break;

		struct pollfd pfd[8];
		int n = 0, idx_status = -1, idx_sig = -1, idx_in = -1, idx_into = -1;
		int idx_from[2] = { -1, -1 }, idx_to[2] = { -1, -1 };
		if (status >= 0) {
			idx_status = n;
			pfd[n++] = (struct pollfd){ .fd = status, .events = POLLIN };
		}
		if (sfd >= 0) {
			idx_sig = n;
			pfd[n++] = (struct pollfd){ .fd = sfd, .events = POLLIN };
		}
		for (int s = 0; s < 2; s++) {
			if (outs[s].len) {
				idx_to[s] = n;
				pfd[n++] = (struct pollfd){ .fd = outs[s].to, .events = POLLOUT };
			} else if (outs[s].from >= 0) {
				idx_from[s] = n;
				pfd[n++] = (struct pollfd){ .fd = outs[s].from, .events = POLLIN };
			}
		}
		if (in_to >= 0) {
			if (in_len) {
				idx_into = n;
				pfd[n++] = (struct pollfd){ .fd = in_to, .events = POLLOUT };
			} else if (in_from >= 0) {
				idx_in = n;
				pfd[n++] = (struct pollfd){ .fd = in_from, .events = POLLIN };
			}
		}

		int wait = -1;
		uint64_t next = 0;
		if (deadline && !timed_out && !have_status)
			next = deadline;
		if (drain_deadline && (!next || drain_deadline < next))
			next = drain_deadline;
		if (next) {
			uint64_t t = now_ms();
			wait = t >= next ? 0 : (int)(next - t > INT_MAX ? INT_MAX : next - t);
		}
		int pr = poll(pfd, (nfds_t)n, wait);
		if (pr < 0) {
			if (errno == EINTR)
				continue;
			r = al_error_set_errno(err, -errno, "poll");
			break;
		}
		if (deadline && !timed_out && !have_status && now_ms() >= deadline) {
			timed_out = true;
			kill_pidfd(kill_fd);
		}
		if (idx_sig >= 0 && (pfd[idx_sig].revents & POLLIN)) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				if (si.ssi_signo == SIGPIPE)
					continue;
				if (si.ssi_signo == SIGWINCH) {
					winsize_pass(winfd, pty);
					continue;
				}
				if (si.ssi_signo == SIGCONT) {
					tio_continued();
					winsize_pass(winfd, pty);
					continue;
				}
				interrupted = (int)si.ssi_signo;
				kill_pidfd(kill_fd);
			}
		}
		for (int s = 0; s < 2; s++) {
			struct out_stream *o = &outs[s];
			if (idx_from[s] >= 0 && pfd[idx_from[s]].revents) {
				ssize_t got = read(o->from, o->buf, sizeof(o->buf));
				if (got < 0 && (errno == EINTR || errno == EAGAIN))
					continue;
				if (got <= 0) {
					o->from = safe_close(o->from);
					continue;
				}
				uint64_t before = res.output_bytes;
				res.output_bytes += (uint64_t)got;
				size_t keep = (size_t)got;
				if (opts->output_limit && res.output_bytes > opts->output_limit) {
					res.output_truncated = true;
					keep = before >= opts->output_limit ?
						       0 :
						       (size_t)(opts->output_limit - before);
				}
				o->len = keep;
			}
			if (idx_to[s] >= 0 && pfd[idx_to[s]].revents) {
				ssize_t w = write(o->to, o->buf, o->len);
				if (w < 0 && (errno == EINTR || errno == EAGAIN))
					continue;
				if (w <= 0) {
					/* Our reader went away: discard from now on. */
					o->len = 0;
					continue;
				}
				memmove(o->buf, o->buf + w, o->len - (size_t)w);
				o->len -= (size_t)w;
			}
		}
		/* At the cap, a command that asks for it gets no more reading:
		 * its next write fails (EPIPE), as under `| head`. */
		if (res.output_truncated && opts->close_at_limit)
			for (int s = 0; s < 2; s++)
				outs[s].from = safe_close(outs[s].from);
		if (idx_in >= 0 && pfd[idx_in].revents) {
			ssize_t got = read(in_from, in_buf, sizeof(in_buf));
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got < 0 && pty >= 0) {
				/* The user's terminal failed (hung up without a
				 * SIGHUP reaching us): as a hang-up. */
				interrupted = SIGHUP;
				kill_pidfd(kill_fd);
				in_from = -1;
				in_to = -1;
			} else if (got <= 0 && pty >= 0) {
				/* End of input, on a terminal: its end-of-file
				 * character (twice after a line left unfinished,
				 * whose first only ends the line); the terminal
				 * stays, its output still comes through it. */
				struct termios t;
				char eof = tcgetattr(pty, &t) == 0 && t.c_cc[VEOF] ?
						   (char)t.c_cc[VEOF] :
						   4;
				in_buf[0] = in_buf[1] = eof;
				in_len = in_last == '\n' || in_last == 0 ? 1 : 2;
				in_from = -1;
			} else if (got <= 0) {
				in_from = -1;
				in_to = safe_close(in_to); /* EOF reaches the command */
			} else {
				in_len = (size_t)got;
				in_last = in_buf[got - 1];
			}
		}
		if (idx_into >= 0 && pfd[idx_into].revents) {
			ssize_t w = write(in_to, in_buf, in_len);
			if (w < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (w <= 0) {
				in_to = pty >= 0 ? -1 : safe_close(in_to);
				in_from = -1;
				in_len = 0;
			} else {
				memmove(in_buf, in_buf + w, in_len - (size_t)w);
				in_len -= (size_t)w;
			}
		}
		if (idx_status >= 0 && pfd[idx_status].revents) {
			struct sbx_msg m;
			int master = -1;
			int mr = opts->tty ? sbx_msg_recv_pty(status, &m, &master) :
					     sbx_msg_recv(status, &m);
			if (mr == 0 && m.kind == SBX_MSG_PTY && pty < 0) {
				/* The command's terminal: its output replaces the
				 * (unused) stdout pipe, whose EOF may have come
				 * first; stderr's stays until its EOF. */
				int dup_out = fcntl(master, F_DUPFD_CLOEXEC, 3);
				if (dup_out < 0) {
					safe_close(master);
					r = al_error_set_errno(err, -errno, "dup");
					status = -1;
					kill_pidfd(kill_fd);
					continue;
				}
				pty = master;
				fd_set_nonblock(pty, true);
				fd_set_nonblock(dup_out, true);
				safe_close(outs[0].from);
				outs[0].from = dup_out;
				if (in_from >= 0)
					in_to = pty;
				winsize_pass(winfd, pty);
				tio_raw(opts->stdin_fd);
			} else if (mr == 0 && m.kind == SBX_MSG_PTY) {
				/* One terminal per command, sent first. */
				safe_close(master);
				status = -1;
				kill_pidfd(kill_fd);
			} else if (mr == 0 &&
				   (m.kind == SBX_MSG_EXITED || m.kind == SBX_MSG_SIGNALED)) {
				/* A status after the deadline is the kill's, not the
				 * command's own: the outcome stays "timed out". */
				if (!timed_out && !interrupted) {
					res.outcome = m.kind == SBX_MSG_EXITED ? SBX_EXITED :
										 SBX_SIGNALED;
					res.status = m.value;
					have_status = true;
				}
				status = -1;
			} else if (mr == 0 && m.kind == SBX_MSG_ERROR) {
				r = al_error_set(err, m.value < 0 ? m.value : -EIO, "%s", m.text);
				status = -1;
				kill_pidfd(kill_fd);
			} else {
				/* End of stream without a status (the sandbox died), or a
				 * record that has no business here. */
				status = -1;
				kill_pidfd(kill_fd);
			}
		}
	}
	for (int s = 0; s < 2; s++)
		safe_close(outs[s].from);
	if (in_to != pty)
		safe_close(in_to);
	safe_close(pty);
	tio_restore();
	sigprocmask(SIG_SETMASK, &old, NULL);

	if (r < 0)
		return r;
	uint64_t oom_after = sbx_cgroup_oom_kills(cg);
	res.oom_kills = oom_after > oom_before ? oom_after - oom_before : 0;
	if (interrupted) {
		res.outcome = SBX_INTERRUPTED;
		res.status = interrupted;
	} else if (timed_out && !have_status) {
		res.outcome = SBX_TIMED_OUT;
	} else if (res.oom_kills &&
		   (!have_status || (res.outcome == SBX_SIGNALED && res.status == SIGKILL))) {
		res.outcome = SBX_OOM_KILLED;
	} else if (!have_status) {
		return al_error_set(err, -ECHILD,
				    "the sandbox ended without reporting a status (destroyed, or "
				    "killed from outside)");
	}
	*ret = res;
	return 0;
}

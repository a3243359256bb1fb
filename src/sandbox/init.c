/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox's init, pid 1 of its pid namespace, and the channel through
 * which its creator hears from it.
 *
 * Cloned by the supervisor (`run`) or by the keeper (`create`) with
 * CLONE_NEWNS|NEWPID|NEWNET|NEWUTS|NEWIPC (and NEWCGROUP when it is born in
 * its cgroup). As host root, in namespaces owned by the initial user
 * namespace, it sets up the network, the hostname and every mount; then it
 * joins the sandbox's user namespace (made beforehand, where host uid
 * U..U+65535 appear as 0..65535), so the sandbox's root owns nothing but
 * files and processes of its own range. For `run` it forks the command and
 * reports its status; for `create` it waits and reaps until destroyed.
 */
#include "sandbox/proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"

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

/* ---- the init ---- */

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
static void __attribute__((noreturn))
init_main(const struct sbx_init_args *a, int st, int go_fd, bool need_cgroupns)
{
	if (a->ephemeral)
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* Out of the caller's session: nothing of the sandbox has the user's
	 * terminal as its controlling terminal (a command with -t gets one of
	 * the sandbox's own). */
	setsid();
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
	r = sbx_become_root(a->userns_fd, true);
	if (r < 0)
		init_fail(st, r, "cannot enter the user namespace");
	/* Nothing of the supervisor's stays open here (its stdio, locks,
	 * descriptors of host directories) but what the command needs. */
	struct sbx_stdio *io = a->cmd ? a->cmd->io : NULL;
	int keep[] = { st,
		       io ? io->in[0] : -1,
		       io ? io->in[1] : -1,
		       io ? io->out[0] : -1,
		       io ? io->out[1] : -1,
		       io ? io->err[0] : -1,
		       io ? io->err[1] : -1 };
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
	sbx_run_init(NULL);
}

/*
 * Clones the init. In the caller: *ret_chan is the status channel,
 * *ret_go the pipe to write one byte to once the cgroup placement is done.
 */
pid_t sbx_init_spawn(const struct sbx_init_args *a, bool into_cgroup_v2, int cgroup_fd,
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

int sbx_init_recv_ready(int chan, struct al_error *err)
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
int sbx_init_recv_listeners(int chan, struct sbx_net_fds *ret, struct al_error *err)
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

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A new layer for a live sandbox's layered workspace (sbx_relayer).
 *
 * The client (the caller, host root) opens and checks the directories and
 * makes their idmapped clones, as a sandbox's creation does; the keeper,
 * which serialises this with the sandbox's execs, makes sure nothing runs
 * inside and forks a child that:
 *
 *   1. makes a private mount namespace of its own and stages the clones
 *      there, on a tmpfs over the sandbox's state directory (nothing of it
 *      is ever seen inside, and the overlay's options stay short);
 *   2. enters the sandbox's mount namespace and detaches the old overlay's
 *      /workspace and home: the old upper directory, a lower from now on,
 *      is then written by no mount;
 *   3. back in its own namespace, mounts the new overlay (the new layer
 *      over the old ones) and clones its workspace/ and home/;
 *   4. enters the sandbox's namespace again and attaches them.
 *
 * Every exec makes its own mount namespace from the sandbox's when it
 * starts, so the next command sees the new overlay; none runs meanwhile.
 */
#include "sandbox/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
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
#include "common/parse.h"

/* How long the keeper's helper may take before it is killed (a mount that
 * hangs). */
#define RELAYER_HELPER_MS 30000

/* ---- the client ---- */

int sbx_relayer(const struct sbx_settings *set, const char *id, const char *home_path,
		char *const *lowers, size_t n_lowers, const char *layer, struct al_error *err)
{
	if (n_lowers == 0 || n_lowers > SBX_LOWERS_MAX)
		return al_error_set(err, -E2BIG,
				    "a layered workspace has 1 to %d lower directories",
				    SBX_LOWERS_MAX);
	if (home_path && !sbx_home_path_valid(home_path))
		return al_error_set(err, -EINVAL, "invalid home path");
	struct sbx_state st;
	struct sbx_paths paths;
	int r = sbx_lookup(set, id, &st, &paths, err);
	if (r < 0)
		return r;
	/* Every directory opened without following a link, all of one
	 * unprivileged owner (the lower directory's). */
	int fds[SBX_LOWERS_MAX + 1];
	size_t n_fds = 0;
	int userns = -1, conn = -1;
	struct ipc_msg reply = IPC_MSG_INIT;
	struct stat own = { 0 };
	for (size_t i = 0; i <= n_lowers; i++) {
		const char *dir = i < n_lowers ? lowers[i] : layer;
		int fd = sbx_open_dir_no_links(dir);
		struct stat sb;
		if (fd < 0) {
			r = al_error_set_errno(err, fd, "%s", dir);
			goto out;
		}
		fds[n_fds++] = fd;
		if (fstat(fd, &sb) < 0) {
			r = al_error_set_errno(err, -errno, "%s", dir);
			goto out;
		}
		if (i == 0)
			own = sb;
		if (sb.st_uid == 0 || sb.st_gid == 0 || sb.st_uid != own.st_uid ||
		    sb.st_gid != own.st_gid) {
			r = al_error_set(err, -EPERM,
					 "%s belongs to %u:%u: a layered workspace has one "
					 "unprivileged owner and group",
					 dir, (unsigned)sb.st_uid, (unsigned)sb.st_gid);
			goto out;
		}
	}
	r = sbx_layer_dirs(fds[n_lowers], layer, (uint32_t)own.st_uid, (uint32_t)own.st_gid, err);
	if (r < 0)
		goto out;
	/* Mapped to the sandbox's user (--user; root without it), as at its
	 * creation. */
	struct sbx_user user = { 0, 0 };
	r = sbx_user_read(&paths, &user);
	if (r < 0 && r != -ENOENT) {
		r = al_error_set_errno(err, r, "cannot read the user of sandbox %s", id);
		goto out;
	}
	userns = sbx_userns_workspace_as(st.uid + user.uid, st.uid + user.gid, own.st_uid,
					 own.st_gid);
	if (userns < 0) {
		r = al_error_set_errno(err, userns, "cannot create the workspace id mapping");
		goto out;
	}
	for (size_t i = 0; i < n_fds; i++) {
		int t = sbx_rootfs_clone(fds[i], i < n_lowers ? lowers[i] : layer, userns,
					 i < n_lowers, err);
		if (t < 0) {
			r = t;
			goto out;
		}
		close(fds[i]);
		fds[i] = t;
	}

	char path[SBX_PATH_MAX];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (sbx_control_path(&paths, path, sizeof(path)) < 0 ||
	    strlen(path) >= sizeof(sa.sun_path)) {
		r = al_error_set(err, -ENAMETOOLONG, "socket path too long");
		goto out;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (conn < 0 || connect(conn, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = al_error_set(err, -ESRCH, "sandbox %s is not running", id);
		goto out;
	}
	/* The keeper answers within its helper's bound; a keeper that does
	 * not is given up on. */
	struct timeval tv = { .tv_sec = RELAYER_HELPER_MS / 1000 + 30 };
	(void)setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	/* u32 uid of root inside, then the home's place ("" for none). */
	char req[4 + 64] = { 0 };
	uint32_t uid = st.uid;
	memcpy(req, &uid, 4);
	snprintf(req + 4, sizeof(req) - 4, "%s", home_path ? home_path + 1 : "");
	r = ipc_send(conn, KEEPER_RELAYER, req, 4 + strlen(req + 4) + 1, fds, n_fds);
	if (r < 0) {
		r = al_error_set_errno(err, r, "cannot reach the sandbox's keeper");
		goto out;
	}
	static const struct ipc_type replies[] = {
		{ .type = KEEPER_OK, .max_len = 0, .max_fds = 0 },
		{ .type = KEEPER_BUSY, .max_len = 0, .max_fds = 0 },
		{ .type = KEEPER_ERR, .max_len = 512, .max_fds = 0 },
	};
	r = ipc_recv(conn, replies, ARRAY_SIZE(replies), &reply);
	if (r < 0) {
		r = al_error_set_errno(err, r, "no answer from the sandbox's keeper");
	} else if (reply.type == KEEPER_BUSY) {
		r = al_error_set(err, -EBUSY, "a command runs in sandbox %s", id);
	} else if (reply.type == KEEPER_ERR) {
		bool terminated = reply.len > 0 && memchr(reply.data, '\0', reply.len);
		r = al_error_set(err, -EIO, "sandbox %s: no new layer: %s", id,
				 terminated ? (const char *)reply.data : "(no reason)");
	}
out:
	ipc_msg_done(&reply);
	safe_close(conn);
	safe_close(userns);
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	return r;
}

/* ---- the keeper's side ---- */

static int sys_open_tree(int dfd, const char *path, unsigned flags)
{
	return (int)syscall(SYS_open_tree, dfd, path, flags);
}

static int sys_move_mount(int from_dfd, const char *from, int to_dfd, const char *to,
			  unsigned flags)
{
	return (int)syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags);
}

/* The root of a mount of the sandbox's (the layered workspace's), reached
 * from its root without a link: nothing is detached unless both are. */
static int mount_point_ok(const char *path)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
	if (fd < 0)
		return -errno;
	struct statx stx;
	int r = statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx);
	if (r < 0)
		r = -errno;
	else if (!(stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) ||
		 !(stx.stx_attributes & STATX_ATTR_MOUNT_ROOT))
		r = -EINVAL;
	close(fd);
	return r;
}

#define FAIL(code, what)                             \
	do {                                         \
		int fail_code_ = (code);             \
		snprintf(why, why_size, "%s", what); \
		return fail_code_;                   \
	} while (0)

static void reply_err(int conn, const char *text)
{
	(void)ipc_send(conn, KEEPER_ERR, text, strlen(text) + 1, NULL, 0);
}

static int relayer(int init_pidfd, const char *stage, uint32_t uid, uint32_t gid,
		   const char *home_rel, const int *fds, size_t n_fds, char *why, size_t why_size)
{
	size_t n_lowers = n_fds - 1;
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		FAIL(-errno, "cannot make a mount namespace");
	if (mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") < 0 ||
	    chdir(stage) < 0)
		FAIL(-errno, "cannot stage the layers");
	_cleanup_close_ int own_ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
	if (own_ns < 0)
		FAIL(-errno, "cannot open the mount namespace");
	char lowerdir[SBX_LOWERS_MAX * 4 + 8] = "";
	for (size_t i = 0; i < n_fds; i++) {
		char name[8];
		snprintf(name, sizeof(name), i < n_lowers ? "l%zu" : "u", i);
		if (mkdir(name, 0700) < 0 ||
		    sys_move_mount(fds[i], "", AT_FDCWD, name, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			FAIL(-errno, "cannot stage a layer");
		if (i < n_lowers) {
			size_t len = strlen(lowerdir);
			snprintf(lowerdir + len, sizeof(lowerdir) - len, "%s%s", i ? ":" : "",
				 name);
		}
	}
	if (mkdir("t", 0700) < 0)
		FAIL(-errno, "cannot stage the overlay");
	char home[64];
	snprintf(home, sizeof(home), "/%s", home_rel);

	/* The old overlay goes from the sandbox (nothing runs there). */
	if (setns(init_pidfd, CLONE_NEWNS) < 0)
		FAIL(-errno, "cannot enter the sandbox's mount namespace");
	if (mount_point_ok("/workspace") < 0 || (home_rel[0] && mount_point_ok(home) < 0))
		FAIL(-ELOOP, "the workspace or the home is not where it was");
	if (umount2("/workspace", MNT_DETACH | UMOUNT_NOFOLLOW) < 0 ||
	    (home_rel[0] && umount2(home, MNT_DETACH | UMOUNT_NOFOLLOW) < 0))
		FAIL(-errno, "cannot detach the old layer");

	/* The new one, made in our namespace (the layers are staged there). */
	if (setns(own_ns, CLONE_NEWNS) < 0 || chdir(stage) < 0)
		FAIL(-errno, "cannot go back to the staging namespace");
	int r = sbx_mount_tree_overlay_as(uid, gid, "t", lowerdir, "u");
	if (r < 0)
		FAIL(r, "cannot mount the new layer");
	_cleanup_close_ int ws = sys_open_tree(
		AT_FDCWD, "t/workspace", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
	if (ws < 0)
		FAIL(-errno, "cannot take the layered workspace");
	_cleanup_close_ int hm = -1;
	if (home_rel[0]) {
		hm = sys_open_tree(AT_FDCWD, "t/home",
				   OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
		if (hm < 0)
			FAIL(-errno, "cannot take the layered home");
	}
	if (setns(init_pidfd, CLONE_NEWNS) < 0)
		FAIL(-errno, "cannot enter the sandbox's mount namespace");
	if (sys_move_mount(ws, "", AT_FDCWD, "/workspace", MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
	    (hm >= 0 && sys_move_mount(hm, "", AT_FDCWD, home, MOVE_MOUNT_F_EMPTY_PATH) < 0))
		FAIL(-errno, "cannot attach the new layer");
	return 0;
}

/* 1 when pid's children are zombies (and skip, when given), 0 when another
 * lives, or a negative errno. */
static int children_idle(pid_t parent, pid_t skip)
{
	char path[64], *kids = NULL;
	size_t len = 0;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)parent, (int)parent);
	int r = read_file_bounded(AT_FDCWD, path, 16384, &kids, &len);
	if (r < 0)
		return r;
	int idle = 1;
	pid_t init_pid = skip;
	for (char *save = NULL, *tok = strtok_r(kids, " \n", &save); tok && idle;
	     tok = strtok_r(NULL, " \n", &save)) {
		int pid;
		if (parse_int_range(tok, 1, INT32_MAX, &pid) < 0) {
			idle = -EBADMSG;
			break;
		}
		if (pid == (int)init_pid)
			continue;
		/* "pid (comm) S ...": the state follows the last ')'. */
		char stat[64], *text = NULL;
		size_t n = 0;
		snprintf(stat, sizeof(stat), "/proc/%d/stat", pid);
		if (read_file_bounded(AT_FDCWD, stat, 4096, &text, &n) < 0) {
			idle = 1; /* gone meanwhile */
			continue;
		}
		char *paren = memrchr(text, ')', n);
		bool zombie = paren && (size_t)(paren - text) + 2 < n && paren[2] == 'Z';
		free(text);
		if (!zombie)
			idle = 0;
	}
	free(kids);
	return idle;
}

/*
 * Nothing runs inside but the sandbox's init: the keeper's only live child
 * is the init (an exec's helper would be another), and the init has none
 * (a command's init whose helper was killed is handed to it, until it has
 * died of the kill).
 */
int sbx_keeper_sandbox_idle(pid_t init_pid)
{
	int r = children_idle(getpid(), init_pid);
	if (r == 1)
		r = children_idle(init_pid, 0);
	return r;
}

int sbx_relayer_serve(int conn, int init_pidfd, pid_t init_pid, const char *stage,
		      struct ipc_msg *msg, const int *keeper_fds, size_t n_keeper_fds,
		      const struct sbx_user *user)
{
	char why[256] = "";
	/* u32 uid, then the home's place: "", "root" or "home/NAME". */
	if (msg->len < 5 || msg->data[msg->len - 1] != '\0' || msg->n_fds < 2 ||
	    msg->n_fds > SBX_LOWERS_MAX + 1) {
		reply_err(conn, "malformed request");
		return 0;
	}
	uint32_t uid;
	memcpy(&uid, msg->data, 4);
	const char *home_rel = (const char *)msg->data + 4;
	char home[64];
	if (strlen(home_rel) != msg->len - 5 ||
	    (home_rel[0] && (snprintf(home, sizeof(home), "/%s", home_rel) >= (int)sizeof(home) ||
			     !sbx_home_path_valid(home)))) {
		reply_err(conn, "malformed request");
		return 0;
	}
	/* Nothing may run inside: our only live child is the sandbox's init
	 * (an exec's helper, or what it left us, would be another). */
	int r = sbx_keeper_sandbox_idle(init_pid);
	if (r < 0) {
		reply_err(conn, "cannot list the sandbox's processes");
		return 0;
	}
	if (r == 0) {
		(void)ipc_send(conn, KEEPER_BUSY, NULL, 0, NULL, 0);
		return 0;
	}
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		reply_err(conn, "pipe");
		return 0;
	}
	pid_t pid = fork();
	if (pid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		reply_err(conn, "cannot fork");
		return 0;
	}
	if (pid == 0) {
		close(pipefd[0]);
		close(conn);
		for (size_t i = 0; i < n_keeper_fds; i++)
			close(keeper_fds[i]);
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		/* Killable like the rest, unlike the keeper. */
		(void)write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "0");
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		/* The layers' idmap names the sandbox's user (root, without
		 * --user), the id the client gave plus the user's. */
		r = relayer(init_pidfd, stage, uid + user->uid, uid + user->gid, home_rel, msg->fds,
			    msg->n_fds, why, sizeof(why));
		if (r < 0) {
			char text[320];
			snprintf(text, sizeof(text), "%s: %s", why, al_strerror(-r));
			(void)write_full(pipefd[1], text, strlen(text));
		}
		_exit(r < 0 ? 1 : 0);
	}
	close(pipefd[1]);
	/* Its reason, or its end (the pipe's other end closes), bounded. */
	struct pollfd pw = { .fd = pipefd[0], .events = POLLIN };
	int pr;
	while ((pr = poll(&pw, 1, RELAYER_HELPER_MS)) < 0 && errno == EINTR)
		;
	ssize_t n = 0;
	if (pr > 0)
		while ((n = read(pipefd[0], why, sizeof(why) - 1)) < 0 && errno == EINTR)
			;
	else
		snprintf(why, sizeof(why), "the layer's helper did not finish in %d s",
			 RELAYER_HELPER_MS / 1000);
	if (pr > 0)
		why[n > 0 ? n : 0] = '\0';
	close(pipefd[0]);
	if (pr <= 0)
		kill(pid, SIGKILL);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (pr > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		(void)ipc_send(conn, KEEPER_OK, NULL, 0, NULL, 0);
		return 0;
	}
	reply_err(conn, why[0] ? why : "the layer's helper died");
	return -1;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Starting a sandbox (`run`, `create`), as the pipeline it is:
 *
 *   plan       check the spec; an id, a locked state directory, a uid range,
 *              the view of /etc, the seccomp filter      (plan_sandbox)
 *   rootfs     the host directories opened and checked, the user namespaces,
 *              the detached idmapped trees the init will attach
 *                                                        (stage_rootfs, rootfs.c)
 *   cgroup     the sandbox's cgroups, with its limits    (stage_cgroup, cgroup.c)
 *   spawn      `run`: the init (init.c), placed in the cgroup; `create`: the
 *              keeper (keeper.c), which clones the init; the network handed
 *              to the gateway; the state recorded        (spawn_ephemeral,
 *                                                         spawn_persistent)
 *   supervise  `run` only: the command's stdio, timeout, output cap and
 *              status                                    (supervise.c)
 *
 * Each step fills struct sandbox; sandbox_teardown undoes whatever was done,
 * whichever step failed. The supervisor is single-threaded and parses
 * nothing but fixed-size status records from its children.
 */
#include "sandbox/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/log.h"
#include "common/parse.h"

/* ---- one sandbox being started ---- */

struct sandbox {
	char id[SBX_ID_LEN + 1];
	struct sbx_paths paths;
	struct sbx_state state;
	bool ephemeral;
	bool slot_claimed, cgroup_made, dir_made;
	int lock_fd;
	/* Setup only: released once the init has everything (release_setup). */
	struct sbx_etc_view view; /* held shared until the init has mounted it */
	struct sbx_bpf filter;
	struct sbx_rootfs_plan *plan;
	int userns_fd, ws_userns_fd;
	struct sbx_user user; /* who its commands run as (spec->user resolved) */
	/* The processes. */
	int init_pidfd;
	int keeper_pidfd;
	int status_fd; /* supervisor's end of the status channel */
};

static void sandbox_init_struct(struct sandbox *sb)
{
	memset(sb, 0, sizeof(*sb));
	sb->lock_fd = sb->init_pidfd = sb->status_fd = sb->keeper_pidfd = -1;
	sb->userns_fd = sb->ws_userns_fd = -1;
	sb->view.lock_fd = -1;
	sb->state.cg.dirfd = -1;
}

/* What only setting up needed: the init has its own copies now. */
static void release_setup(struct sandbox *sb)
{
	sbx_etc_view_release(&sb->view);
	sbx_seccomp_free(&sb->filter);
	sbx_rootfs_plan_free(sb->plan);
	sb->plan = NULL;
	sb->userns_fd = safe_close(sb->userns_fd);
	sb->ws_userns_fd = safe_close(sb->ws_userns_fd);
}

static void sandbox_teardown(const struct sbx_settings *set, struct sandbox *sb)
{
	release_setup(sb);
	sbx_kill_and_reap(&sb->keeper_pidfd);
	if (sb->init_pidfd >= 0 && sb->state.keeper_pid > 0) {
		/* The keeper's child: killing it is enough; the keeper reaps it. */
		syscall(SYS_pidfd_send_signal, sb->init_pidfd, SIGKILL, NULL, 0);
		struct pollfd pf = { .fd = sb->init_pidfd, .events = POLLIN };
		while (poll(&pf, 1, 10000) < 0 && errno == EINTR)
			;
		sb->init_pidfd = safe_close(sb->init_pidfd);
	}
	/* Reap: the namespaces die with their init; the cgroup empties. */
	sbx_kill_and_reap(&sb->init_pidfd);
	if (sb->cgroup_made) {
		sbx_cgroup_close(&sb->state.cg);
		if (sbx_cgroup_destroy(&sb->state.cg) < 0)
			log_warning("cannot remove the cgroups of sandbox %s; `airlock sandbox gc` "
				    "will retry",
				    sb->id);
	}
	if (sb->dir_made && sbx_rm_rf(sb->paths.dir) < 0)
		log_warning("cannot remove %s; `airlock sandbox gc` will retry", sb->paths.dir);
	if (sb->slot_claimed)
		sbx_release_slot(set, sb->state.slot, sb->id);
	sb->lock_fd = safe_close(sb->lock_fd);
	sb->status_fd = safe_close(sb->status_fd);
}

/* ---- plan ---- */

static int validate_spec(const struct sbx_settings *set, const struct sbx_spec *spec,
			 struct al_error *err)
{
	if (geteuid() != 0)
		return al_error_set(err, -EPERM,
				    "airlock sandbox needs root (it creates user "
				    "namespaces with private uid ranges, overlays and cgroups)");
	if (spec->network != SBX_NETWORK_NONE && spec->network != SBX_NETWORK_RESTRICTED &&
	    spec->network != SBX_NETWORK_OPEN)
		return al_error_set(err, -EINVAL, "unknown network mode");
	if (spec->network != SBX_NETWORK_NONE && !spec->net_ready)
		return al_error_set(err, -EINVAL,
				    "--network %s needs the egress gateway to serve the sandbox's "
				    "network, and none was started",
				    spec->network == SBX_NETWORK_OPEN ? "open" : "restricted");
	if ((spec->ttl_ms &&
	     (spec->ttl_ms < SBX_EXPIRY_MIN_MS || spec->ttl_ms > SBX_EXPIRY_MAX_MS)) ||
	    (spec->idle_ms &&
	     (spec->idle_ms < SBX_EXPIRY_MIN_MS || spec->idle_ms > SBX_EXPIRY_MAX_MS)))
		return al_error_set(err, -EINVAL, "a ttl or idle limit is from 1s to 365d");
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
	const char *paths[] = { spec->workspace, spec->image, spec->home, spec->home_path,
				spec->tools,	 spec->lower, spec->layer };
	const char *what[] = { "workspace", "image", "home", "home", "tools", "lower", "layer" };
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		for (const char *c = paths[i]; c && *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				return al_error_set(err, -EINVAL,
						    "%s path contains a control character",
						    what[i]);
	}
	for (size_t i = 0; i < spec->n_closed; i++)
		for (const char *c = spec->closed ? spec->closed[i] : NULL; c && *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				return al_error_set(
					err, -EINVAL,
					"closed layer path contains a control character");
	if (spec->n_closed && (!spec->lower || !spec->closed))
		return al_error_set(err, -EINVAL, "closed layers need a lower directory");
	if (!spec->lower != !spec->layer)
		return al_error_set(err, -EINVAL,
				    "a layered workspace needs both a lower directory and a layer");
	if (spec->lower && (spec->workspace || spec->home))
		return al_error_set(err, -EINVAL,
				    "a layered workspace takes the place of the workspace and home "
				    "directories");
	if (spec->home_path && !spec->home && !spec->lower)
		return al_error_set(err, -EINVAL, "a home path (%s) needs a home directory",
				    spec->home_path);
	if (spec->home && !spec->workspace)
		return al_error_set(err, -EINVAL,
				    "home %s needs a workspace directory: a home must have the "
				    "workspace's owner",
				    spec->home);
	if (spec->home_path && !sbx_home_path_valid(spec->home_path))
		return al_error_set(
			err, -EINVAL,
			"home path '%s' is neither /root nor /home/NAME (NAME: a "
			"lower-case letter or '_', then up to 31 of a-z, 0-9, '_', '-')",
			spec->home_path);
	if (spec->n_env > SBX_MAX_ENV)
		return al_error_set(err, -E2BIG, "too many --env (at most %d)", SBX_MAX_ENV);
	for (size_t i = 0; i < spec->n_env; i++) {
		const char *eq = strchr(spec->env[i], '=');
		if (!eq || eq == spec->env[i])
			return al_error_set(err, -EINVAL, "--env wants K=V, got '%s'",
					    spec->env[i]);
	}
	if (set->state_dir[0] != '/')
		return al_error_set(err, -EINVAL, "the state directory must be absolute");
	return 0;
}

static int make_state_dir(const struct sbx_settings *set, struct al_error *err)
{
	/* Usually there already: one check. */
	if (sbx_check_private_dir(set->state_dir) == 0)
		return 0;
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
	int r = sbx_check_private_dir(set->state_dir);
	if (r < 0)
		return al_error_set(err, r,
				    "the state directory %s must be a directory owned by "
				    "root and writable by root alone",
				    set->state_dir);
	return 0;
}

/* An id, a locked directory, a uid range, the view of /etc, the filter. */
static int plan_sandbox(const struct sbx_settings *set, const struct sbx_spec *spec,
			struct sandbox *sb, struct al_error *err)
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
	r = make_state_dir(set, err);
	if (r < 0)
		return r;
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
	sb->state.uid = set->uid_base + sb->state.slot * SBX_RANGE;
	log_debug("sandbox %s: state %s, uids %#x-%#x (slot %u), image %s, workspace %s, "
		  "network %s",
		  sb->id, sb->paths.dir, sb->state.uid, sb->state.uid + SBX_RANGE - 1,
		  sb->state.slot, spec->image ? spec->image : "host",
		  spec->workspace ? spec->workspace :
		  spec->lower	  ? spec->lower :
				    "(fresh)",
		  spec->network == SBX_NETWORK_NONE	  ? "none" :
		  spec->network == SBX_NETWORK_RESTRICTED ? "restricted" :
							    "open");
	sb->state.created = (int64_t)time(NULL);
	sb->state.ephemeral = sb->ephemeral;
	sb->state.memory_bytes = spec->memory_bytes;
	snprintf(sb->state.image, sizeof(sb->state.image), "%s",
		 spec->image ? spec->image : "host");
	snprintf(sb->state.workspace, sizeof(sb->state.workspace), "%s",
		 spec->workspace ? spec->workspace :
		 spec->layer	 ? spec->layer :
				   "");
	if (spec->home)
		snprintf(sb->state.home, sizeof(sb->state.home), "%s", spec->home);
	snprintf(sb->state.network, sizeof(sb->state.network), "%s",
		 spec->network == SBX_NETWORK_NONE	 ? "none" :
		 spec->network == SBX_NETWORK_RESTRICTED ? "restricted" :
		 spec->learn				 ? "learn" :
							   "open");
	/* Beside the state, not in it: an earlier airlock reads the state file
	 * of this one (a rollback leaves no sandbox it cannot see). */
	char npath[SBX_PATH_MAX];
	if (snprintf(npath, sizeof(npath), "%s/network", sb->paths.dir) < (int)sizeof(npath)) {
		_cleanup_close_ int nfd =
			open(npath, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (nfd < 0 || write_full(nfd, sb->state.network, strlen(sb->state.network)) < 0)
			return al_error_set_errno(err, nfd < 0 ? -errno : -EIO,
						  "cannot record the network mode");
	}

	/* Held (shared) until the sandbox has mounted it: see etcview.c. */
	if (!spec->image || strcmp(spec->image, "host") == 0) {
		r = sbx_etc_view(set, sbx_etc_gen_in_use, (void *)set, &sb->view, err);
		if (r < 0)
			return r;
		memcpy(sb->state.etc_gen, sb->view.gen, sizeof(sb->state.etc_gen));
	}
	/* Compiled once here; every command of the sandbox loads it as it is. */
	r = sbx_seccomp_compile(&sb->filter, err);
	if (r < 0)
		return r;
	if (!sb->ephemeral) {
		r = sbx_env_write_file(&sb->paths, spec);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot record the environment");
	}
	/* Its own file, like the network mode's, and counted from here. */
	if (spec->ttl_ms || spec->idle_ms) {
		struct sbx_expiry e = { .ttl_ms = spec->ttl_ms,
					.idle_ms = spec->idle_ms,
					.created_ms = sbx_wall_ms(),
					.boot_ms = sbx_boot_ms() };
		r = sbx_expiry_write(&sb->paths, &e);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot record the sandbox's expiry");
	}
	return 0;
}

/* ---- root filesystem ---- */

/* The host directories opened and checked, the user namespaces made, the
 * layers and the workspace turned into detached (idmapped) trees. */
static int stage_rootfs(const struct sbx_spec *spec, struct sandbox *sb, struct al_error *err)
{
	uint32_t uid = sb->state.uid;
	int r = sbx_rootfs_prepare(spec, &sb->paths, uid, sb->view.gen[0] ? sb->view.path : NULL,
				   &sb->plan, err);
	if (r < 0)
		return r;
	sbx_rootfs_plan_user(sb->plan, &sb->user);
	if (spec->user) {
		/* Its own file, like the network mode's. */
		r = sbx_user_write(&sb->paths, &sb->user);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot record the sandbox's user");
		log_debug("sandbox %s: commands run as %u:%u", sb->id, (unsigned)sb->user.uid,
			  (unsigned)sb->user.gid);
	}
	sb->userns_fd = sbx_userns_sandbox(uid);
	if (sb->userns_fd < 0)
		return al_error_set_errno(err, sb->userns_fd, "cannot create the user namespace");
	uint32_t owner[2];
	log_debug("sandbox %s: root filesystem planned, user namespace made", sb->id);
	if (sbx_rootfs_plan_needs_ws_userns(sb->plan, owner)) {
		log_debug("sandbox %s: the workspace's %u:%u are the sandbox's %u:%u", sb->id,
			  owner[0], owner[1], (unsigned)sb->user.uid, (unsigned)sb->user.gid);
		sb->ws_userns_fd = sbx_userns_workspace_as(uid + sb->user.uid, uid + sb->user.gid,
							   owner[0], owner[1]);
		if (sb->ws_userns_fd < 0)
			return al_error_set_errno(err, sb->ws_userns_fd,
						  "cannot create the workspace id mapping");
	}
	return sbx_rootfs_make_trees(sb->plan, sb->userns_fd, sb->ws_userns_fd, err);
}

/* ---- cgroup ---- */

static int stage_cgroup(const struct sbx_settings *set, const struct sbx_spec *spec,
			struct sandbox *sb, struct al_error *err)
{
	int r = sbx_cgroup_create(set, sb->id, spec, &sb->state.cg, err);
	if (r == 0)
		log_debug("sandbox %s: cgroup %s (%s), memory %" PRIu64 ", pids %" PRIu64
			  ", cpus %.2f",
			  sb->id, sb->state.cg.path[0], sb->state.cg.v2 ? "v2" : "v1",
			  spec->memory_bytes, spec->pids, spec->cpus);
	if (r < 0)
		return r;
	sb->cgroup_made = true;
	return 0;
}

/* ---- spawn ---- */

static struct sbx_init_args init_args(const struct sbx_spec *spec, struct sandbox *sb,
				      struct sbx_command *cmd)
{
	if (cmd) {
		cmd->filter = &sb->filter;
		cmd->uid = sb->user.uid;
		cmd->gid = sb->user.gid;
	}
	return (struct sbx_init_args){
		.spec = spec,
		.plan = sb->plan,
		.userns_fd = sb->userns_fd,
		.ws_userns_fd = sb->ws_userns_fd,
		.ephemeral = sb->ephemeral,
		.cmd = cmd,
		.filter = &sb->filter,
		.user = sb->user,
	};
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
static int spawn_ephemeral(const struct sbx_spec *spec, struct sbx_command *cmd, struct sandbox *sb,
			   struct al_error *err)
{
	struct sbx_init_args ia = init_args(spec, sb, cmd);
	const struct sbx_init_args *a = &ia;
	int go = -1;
	bool v2 = sb->state.cg.v2;
	pid_t pid = sbx_init_spawn(a, v2, sb->state.cg.dirfd, false, &sb->init_pidfd,
				   &sb->status_fd, &go);
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
		r = sbx_init_recv_listeners(sb->status_fd, &l, err);
		if (r < 0)
			return r;
		r = serve_network(a->spec, &l, sb, err);
		if (r < 0)
			return r;
	}
	r = sbx_init_recv_ready(sb->status_fd, err);
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
static int spawn_persistent(const struct sbx_spec *spec, struct sandbox *sb, struct al_error *err)
{
	struct sbx_init_args ia = init_args(spec, sb, NULL);
	const struct sbx_init_args *a = &ia;
	struct sbx_keeper_start k;
	int r = sbx_keeper_spawn(a, &sb->paths, &sb->state.cg, &k, err);
	if (r < 0)
		return r;
	sb->keeper_pidfd = k.pidfd;
	sb->state.keeper_pid = k.pid;
	int rep = k.rep, go = k.go;
	bool v2 = sb->state.cg.v2;
	if (!v2)
		r = sbx_cgroup_attach(&sb->state.cg, k.pid);
	if (r >= 0 && write(go, "g", 1) != 1)
		r = -errno;
	struct sbx_msg m;
	_cleanup_(sbx_net_fds_close) struct sbx_net_fds l = { -1, -1, -1, -1 };
	if (r >= 0 && a->spec->network != SBX_NETWORK_NONE)
		r = sbx_init_recv_listeners(rep, &l, err);
	else if (r < 0)
		al_error_set_errno(err, r, "cannot place the sandbox in its cgroup");
	if (r >= 0) {
		r = sbx_msg_recv(rep, &m);
		if (r < 0)
			r = al_error_set(err, -EIO, "the sandbox died during setup");
		else if (m.kind == SBX_MSG_ERROR)
			r = al_error_set(err, m.value < 0 ? m.value : -EIO,
					 "sandbox setup failed: %s", m.text);
		else if (m.kind != SBX_MSG_STARTED)
			r = al_error_set(err, -EBADMSG, "unexpected message from the keeper");
	}
	close(rep);
	if (r < 0) {
		close(go);
		return r;
	}
	sb->state.init_pid = (pid_t)m.value;
	if (parse_u64(m.text, &sb->state.init_start) < 0) {
		close(go);
		return al_error_set(err, -EBADMSG, "unexpected message from the keeper");
	}
	sb->init_pidfd = sbx_pidfd_if_same(sb->state.init_pid, sb->state.init_start);
	if (sb->init_pidfd < 0) {
		close(go);
		return al_error_set(err, -ESRCH, "the sandbox died during setup");
	}
	/* The keeper is our child and not reaped: its pid is still its own. */
	r = sbx_proc_starttime(k.pid, &sb->state.keeper_start);
	if (r >= 0)
		r = sbx_state_write(&sb->paths, &sb->state);
	if (r < 0) {
		close(go);
		return al_error_set_errno(err, r, "cannot record the sandbox's state");
	}
	if (a->spec->network != SBX_NETWORK_NONE) {
		/* Recorded, so a failure from here on is torn down like any. */
		r = serve_network(a->spec, &l, sb, err);
		if (r < 0) {
			close(go);
			return r;
		}
	}
	/* Recorded: the keeper may serve now. */
	r = write(go, "c", 1) == 1 ? 0 : -errno;
	close(go);
	if (r < 0)
		return al_error_set_errno(err, r, "the sandbox's keeper is gone");
	return 0;
}

/* ---- run, create ---- */

int sbx_run(const struct sbx_settings *set, const struct sbx_spec *spec, char *const *argv,
	    const struct sbx_exec_opts *opts, struct sbx_result *ret, struct al_error *err)
{
	/* A `run`'s sandbox ends with its command. */
	if (spec->ttl_ms || spec->idle_ms)
		return al_error_set(err, -EINVAL,
				    "--ttl and --idle are for `sandbox create`: a `sandbox run` "
				    "ends with its command");
	struct sandbox sb;
	sandbox_init_struct(&sb);
	sb.ephemeral = true;
	struct sbx_env env = { 0 };
	struct sbx_stdio io;
	int r = sbx_stdio_make(&io);
	if (r < 0) {
		sbx_stdio_close(&io);
		return al_error_set_errno(err, r, "pipe");
	}
	r = sbx_env_build(&env, sbx_spec_home(spec), spec->env, spec->n_env, opts->env,
			  opts->n_env);
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
		.tty = opts->tty,
		.rows = opts->rows,
		.cols = opts->cols,
	};
	r = plan_sandbox(set, spec, &sb, err);
	if (r >= 0)
		r = stage_rootfs(spec, &sb, err);
	if (r >= 0)
		r = stage_cgroup(set, spec, &sb, err);
	if (r >= 0)
		r = spawn_ephemeral(spec, &cmd, &sb, err);
	release_setup(&sb);
	if (r >= 0) {
		struct sbx_result res;
		/* A fresh cgroup: every OOM kill in it is this command's. */
		r = sbx_supervise(sb.status_fd, sb.init_pidfd, opts, &io, &sb.state.cg, 0, &res,
				  err);
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
	int r = plan_sandbox(set, spec, &sb, err);
	if (r >= 0)
		r = stage_rootfs(spec, &sb, err);
	if (r >= 0)
		r = stage_cgroup(set, spec, &sb, err);
	if (r >= 0)
		r = spawn_persistent(spec, &sb, err);
	if (r < 0) {
		sandbox_teardown(set, &sb);
		return r;
	}
	release_setup(&sb);
	memcpy(ret_id, sb.id, sizeof(sb.id));
	/* The sandbox lives on without us: its init is reaped by its keeper,
	 * the keeper by the host's init once the sandbox is destroyed. */
	sb.init_pidfd = safe_close(sb.init_pidfd);
	sb.keeper_pidfd = safe_close(sb.keeper_pidfd);
	sb.status_fd = safe_close(sb.status_fd);
	sb.lock_fd = safe_close(sb.lock_fd);
	sbx_cgroup_close(&sb.state.cg);
	return 0;
}

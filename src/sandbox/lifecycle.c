/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sandboxes after their start: destroy, list, and gc of what crashed or
 * killed ones left behind (state directories, slots, cgroups, views of /etc).
 */
#include "sandbox/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"

/* A destroyed sandbox's directory, renamed before its removal. */
#define GONE_PREFIX ".gone-"

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
			r = sbx_wait_pidfd_exit(pidfd, 10000);
			close(pidfd);
			if (r < 0) {
				safe_close(kfd);
				return al_error_set(err, r, "sandbox %s did not die within 10 s",
						    id);
			}
		}
		if (kfd >= 0) {
			/* The keeper reaps the init and leaves by itself; it is
			 * killed if it does not. */
			if (sbx_wait_pidfd_exit(kfd, 2000) < 0) {
				syscall(SYS_pidfd_send_signal, kfd, SIGKILL, NULL, 0);
				r = sbx_wait_pidfd_exit(kfd, 10000);
			}
			close(kfd);
			if (r < 0)
				return al_error_set(err, r, "the keeper of sandbox %s did not die",
						    id);
		}
		sbx_cgroup_kill_all(&st->cg);
		r = sbx_cgroup_destroy(&st->cg);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot remove the cgroups of sandbox %s",
						  id);
	}
	/* Out of every other process's way first: one that opens the
	 * sandbox's lock file (and so creates it again) while the directory
	 * is removed finds nothing, instead of leaving it not empty. A crash
	 * from here on leaves a ".gone-" directory for gc. */
	char rand[SBX_ID_LEN + 1], gone[SBX_PATH_MAX];
	r = sbx_new_id(rand);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot make a name");
	if (snprintf(gone, sizeof(gone), "%s/" GONE_PREFIX "%s-%s", set->state_dir, id, rand) >=
	    (int)sizeof(gone))
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	if (rename(p.dir, gone) < 0 && errno != ENOENT)
		return al_error_set_errno(err, -errno, "cannot move %s out of the way", p.dir);
	/* A detached command's supervisor may write its last file while
	 * this runs (it checks for the directory first, but cannot hold it):
	 * then once more. */
	r = sbx_rm_rf(gone);
	for (int i = 0; i < 3 && r == -ENOTEMPTY; i++)
		r = sbx_rm_rf(gone);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot remove %s", gone);
	if (have_state)
		sbx_release_slot(set, st->slot, id);
	return 0;
}

int sbx_destroy_held(const struct sbx_settings *set, const char *id, struct sbx_state *st,
		     struct al_error *err)
{
	return destroy_locked(set, id, st, true, err);
}

int sbx_destroy(const struct sbx_settings *set, const char *id, struct al_error *err)
{
	struct sbx_state st;
	struct sbx_paths p;
	int r = sbx_lookup(set, id, &st, &p, err);
	if (r < 0)
		return r;
	/* A `run`'s sandbox is its command's: its airlock holds the lock for
	 * the command's life and removes everything once it ends. Destroying
	 * it is ending the command, everything it started with it. */
	if (st.ephemeral) {
		int pidfd = sbx_state_pidfd(&st);
		if (pidfd < 0)
			return al_error_set(err, -ENOENT, "no sandbox with id %s", id);
		syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
		r = sbx_wait_pidfd_exit(pidfd, 10000);
		close(pidfd);
		if (r < 0)
			return al_error_set(err, r, "sandbox %s did not die within 10 s", id);
		return 0;
	}
	_cleanup_close_ int lock = sbx_lock_dir(p.dir, true);
	if (lock < 0)
		return al_error_set_errno(err, lock, "cannot lock sandbox %s", id);
	return destroy_locked(set, id, &st, true, err);
}

static void info_from_state(const struct sbx_settings *set, const struct sbx_state *st,
			    struct sbx_info *info)
{
	*info = (struct sbx_info){ .created = st->created,
				   .ephemeral = st->ephemeral,
				   .memory_bytes = st->memory_bytes,
				   .uid_first = st->uid,
				   .uid_last = st->uid + SBX_RANGE - 1,
				   .cgroup_v2 = st->cg.v2 };
	memcpy(info->id, st->id, sizeof(info->id));
	snprintf(info->image, sizeof(info->image), "%s", st->image);
	snprintf(info->workspace, sizeof(info->workspace), "%s", st->workspace);
	snprintf(info->home, sizeof(info->home), "%s", st->home);
	/* The network mode, from its own file (none before it was kept). */
	char npath[SBX_PATH_MAX], mode[16] = "";
	if (snprintf(npath, sizeof(npath), "%s/%s/network", set->state_dir, st->id) <
	    (int)sizeof(npath)) {
		int fd = open(npath, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		ssize_t k = fd >= 0 ? read(fd, mode, sizeof(mode) - 1) : -1;
		mode[k > 0 ? k : 0] = '\0';
		if (fd >= 0)
			close(fd);
	}
	if (strcmp(mode, "none") == 0 || strcmp(mode, "restricted") == 0 ||
	    strcmp(mode, "open") == 0 || strcmp(mode, "learn") == 0)
		snprintf(info->network, sizeof(info->network), "%s", mode);
	/* Its user, from its own file too (none: root). */
	struct sbx_paths up;
	struct al_error ignore = { 0 };
	if (sbx_paths_init(set, st->id, &up, &ignore) == 0 && sbx_user_read(&up, &info->user) < 0)
		info->user = (struct sbx_user){ 0, 0 };
	for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++)
		if (st->cg.present[i]) {
			snprintf(info->cgroup, sizeof(info->cgroup), "%s", st->cg.path[i]);
			break;
		}
	int pidfd = sbx_state_pidfd(st);
	info->running = pidfd >= 0;
	safe_close(pidfd);
	info->oom_kills = sbx_cgroup_oom_kills(&st->cg);
	sbx_expiry_info(set, st, info);
}

int sbx_list(const struct sbx_settings *set, int (*fn)(const struct sbx_info *info, void *userdata),
	     void *userdata, struct al_error *err)
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
		struct sbx_info info;
		info_from_state(set, &st, &info);
		r = fn(&info, userdata);
		if (r < 0)
			break;
	}
	closedir(d);
	return r;
}

int sbx_inspect(const struct sbx_settings *set, const char *id, struct sbx_info *ret,
		struct al_error *err)
{
	struct sbx_state st;
	int r = sbx_state_read(set, id, &st, err);
	if (r == -ENOENT) {
		al_error_clear(err);
		return al_error_set(err, -ENOENT, "no sandbox with id %s", id);
	}
	if (r < 0)
		return r;
	info_from_state(set, &st, ret);
	return 0;
}

int sbx_id_resolve(const struct sbx_settings *set, const char *typed, char out[SBX_ID_LEN + 1],
		   struct al_error *err)
{
	size_t len = strlen(typed);
	bool hex = len >= 4 && len <= SBX_ID_LEN;
	for (size_t i = 0; hex && i < len; i++)
		hex = (typed[i] >= '0' && typed[i] <= '9') || (typed[i] >= 'a' && typed[i] <= 'f');
	if (!hex)
		return al_error_set(err, -EINVAL,
				    "'%.80s' is not a sandbox id (16 hex digits, or at least the "
				    "first 4 of them)",
				    typed);
	if (len == SBX_ID_LEN) {
		memcpy(out, typed, SBX_ID_LEN + 1);
		return 0;
	}
	DIR *d = opendir(set->state_dir);
	if (!d && errno != ENOENT)
		return al_error_set_errno(err, -errno, "cannot open %s", set->state_dir);
	size_t found = 0;
	struct dirent *de;
	/* Only sandboxes (whose state can be read): not debris for gc, nor one
	 * still being made. */
	while (d && (de = readdir(d))) {
		struct sbx_state st;
		struct al_error ignore = { 0 };
		if (sbx_id_valid(de->d_name) && strncmp(de->d_name, typed, len) == 0 &&
		    sbx_state_read(set, de->d_name, &st, &ignore) == 0 && found++ == 0)
			memcpy(out, de->d_name, SBX_ID_LEN + 1);
	}
	if (d)
		closedir(d);
	if (found == 0)
		return al_error_set(err, -ENOENT, "no sandbox with id %s...", typed);
	if (found > 1)
		return al_error_set(err, -EINVAL,
				    "%s... is more than one sandbox (%zu start with it): give more "
				    "of the id",
				    typed, found);
	return 0;
}

static bool id_has_live_dir(const char *id, void *ud)
{
	const struct sbx_settings *set = ud;
	char path[SBX_PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", set->state_dir, id);
	return access(path, F_OK) == 0;
}

bool sbx_etc_gen_in_use(const char *gen, void *ud)
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
			/* What a destroy had moved out of the way when it stopped. */
			if (strncmp(de->d_name, GONE_PREFIX, strlen(GONE_PREFIX)) == 0) {
				char path[SBX_PATH_MAX];
				if (snprintf(path, sizeof(path), "%s/%s", set->state_dir,
					     de->d_name) < (int)sizeof(path) &&
				    sbx_rm_rf(path) == 0)
					removed++;
				continue;
			}
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
					ret = al_error_set(
						err, -EBUSY,
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
	int er = sbx_etc_gc(set, sbx_etc_gen_in_use, (void *)set, &etc_removed);
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
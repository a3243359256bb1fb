/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/sandbox. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/sandbox.h"

#define SBX_RANGE 65536u /* uids (and gids) per sandbox */
#define SBX_DEFAULT_UID_BASE 0x60000000u
#define SBX_DEFAULT_UID_SLOTS 4096u
#define SBX_PATH_MAX 4096
#define SBX_STATE_FILE_MAX 16384
#define SBX_CGROUP_CONTROLLERS 3	      /* memory, pids, cpu */
#define SBX_TRUST_PEM_MAX (1024 * 1024)	      /* spec->trust_pem */
#define SBX_HOST_BUNDLE_MAX (4 * 1024 * 1024) /* the host's CA bundle, copied in */

/* Where a sandbox lives on the host. */
struct sbx_paths {
	char dir[SBX_PATH_MAX];	 /* <state_dir>/<id> */
	char root[SBX_PATH_MAX]; /* <dir>/root: mount point of the sandbox's private tmpfs */
};

struct sbx_cgroup {
	bool v2;
	char path[SBX_CGROUP_CONTROLLERS][SBX_PATH_MAX]; /* v1: per controller; v2: [0] */
	bool present[SBX_CGROUP_CONTROLLERS];
	int dirfd; /* v2: for CLONE_INTO_CGROUP; else -1 */
};

/* What the state file records about a running sandbox. */
struct sbx_state {
	char id[SBX_ID_LEN + 1];
	pid_t init_pid;
	uint64_t init_start; /* /proc/<pid>/stat starttime: guards against pid reuse */
	pid_t keeper_pid;    /* persistent sandboxes: see exec.c; 0 when none */
	uint64_t keeper_start;
	uint32_t slot;
	uint32_t uid; /* host uid of root inside */
	int64_t created;
	struct sbx_cgroup cg;
	char image[256];
	char workspace[512];
	char home[512];		      /* "" when none */
	char etc_gen[SBX_ID_LEN + 1]; /* the /etc view in use; "" for images */
	bool ephemeral;
	uint64_t memory_bytes;
	char network[16]; /* kept in a file of its own ("network"), not in the state */
};

/* state.c */
int sbx_new_id(char ret[SBX_ID_LEN + 1]);
int sbx_paths_init(const struct sbx_settings *set, const char *id, struct sbx_paths *p,
		   struct al_error *err);
int sbx_claim_slot(const struct sbx_settings *set, const char *id, uint32_t *ret_slot,
		   struct al_error *err);
void sbx_release_slot(const struct sbx_settings *set, uint32_t slot, const char *id);
/* The text of a state file into buf: its length, -EINVAL for a value with
 * a control character, -ENOBUFS when it does not fit. */
int sbx_state_format(const struct sbx_state *st, char *buf, size_t size);
int sbx_state_write(const struct sbx_paths *p, const struct sbx_state *st);
int sbx_state_read(const struct sbx_settings *set, const char *id, struct sbx_state *ret,
		   struct al_error *err);
/* Parses a state file's text (len bytes, with room for a NUL after them) of
 * sandbox id: -EBADMSG for anything but what sbx_state_write writes. */
int sbx_state_parse(const struct sbx_settings *set, const char *id, char *text, size_t len,
		    struct sbx_state *ret);
/* The state and paths of an existing sandbox (root only). */
int sbx_lookup(const struct sbx_settings *set, const char *id, struct sbx_state *st,
	       struct sbx_paths *p, struct al_error *err);
int sbx_proc_starttime(pid_t pid, uint64_t *ret);
/* Opens a pidfd for st->init_pid if it is still the same process. */
int sbx_state_pidfd(const struct sbx_state *st);
/* The same for any (pid, start time) pair. */
int sbx_pidfd_if_same(pid_t pid, uint64_t start);
/* Removes a directory tree without following symlinks, whatever its depth. */
int sbx_rm_rf(const char *path);
int sbx_lock_dir(const char *dir, bool wait);
/* 0 when path is a real directory owned by root and writable by root alone. */
int sbx_check_private_dir(const char *path);

/* expiry.c: <id>/expiry of a sandbox made with --ttl or --idle, beside
 * the state file (which an earlier airlock must still read). Lengths in
 * milliseconds; created_ms is the wall clock (CLOCK_REALTIME) at creation,
 * for people; boot_ms the CLOCK_BOOTTIME then, which the ttl is counted
 * on (see expiry.c). */
struct sbx_expiry {
	uint64_t ttl_ms, idle_ms;
	int64_t created_ms;
	uint64_t boot_ms;
};
#define SBX_EXPIRY_FILE_MAX 256
/* The file's text into buf: its length, or -EINVAL for values out of range. */
int sbx_expiry_format(const struct sbx_expiry *e, char *buf, size_t size);
/* Parses the file's text (len bytes, no NUL needed): -EBADMSG for anything
 * but what sbx_expiry_format writes. */
int sbx_expiry_parse(const char *text, size_t len, struct sbx_expiry *ret);
/* Written atomically (a temporary file renamed). */
int sbx_expiry_write(const struct sbx_paths *p, const struct sbx_expiry *e);
/* -ENOENT when the sandbox has none, -EBADMSG when it is damaged. */
int sbx_expiry_read(const struct sbx_paths *p, struct sbx_expiry *ret);
/* CLOCK_BOOTTIME and CLOCK_REALTIME in milliseconds. */
uint64_t sbx_boot_ms(void);
int64_t sbx_wall_ms(void);
/* Fills info's expiry fields (asking the keeper how long it has been idle). */
void sbx_expiry_info(const struct sbx_settings *set, const struct sbx_state *st,
		     struct sbx_info *info);

/* user.c: --user. Names are looked up in the passwd and group files of a
 * sandbox's root filesystem, never through the host's name service. */
#define SBX_USER_NAME_MAX 32
#define SBX_PASSWD_MAX (4 * 1024 * 1024) /* /etc/passwd, /etc/group */
#define SBX_PASSWD_LINE_MAX 4096	 /* a line of them */
#define SBX_USER_FILE_MAX 16		 /* <id>/user: "65535:65535\n" */
/* The entry of user name in a passwd file's text (len bytes): 0; -ENOENT
 * when there is none; -ERANGE when its ids are above SBX_USER_ID_MAX;
 * -EBADMSG when its line is malformed (not 7 fields, an id that is no
 * decimal number, longer than SBX_PASSWD_LINE_MAX). */
int sbx_passwd_lookup(const char *text, size_t len, const char *name, struct sbx_user *ret);
/* The same for a group in a group file's text. */
int sbx_group_lookup(const char *text, size_t len, const char *name, uint32_t *ret_gid);
/* text (struct sbx_spec.user) as ids, names looked up in etc/passwd and
 * etc/group below root_fd (the root filesystem as the sandbox sees it),
 * every link there resolved inside it. */
int sbx_user_resolve(int root_fd, const char *text, struct sbx_user *ret, struct al_error *err);
/* <id>/user, beside the state file: "UID:GID\n". -ENOENT: none (root). */
int sbx_user_format(const struct sbx_user *u, char *buf, size_t size);
int sbx_user_parse(const char *text, size_t len, struct sbx_user *ret);
int sbx_user_write(const struct sbx_paths *p, const struct sbx_user *u);
int sbx_user_read(const struct sbx_paths *p, struct sbx_user *ret);

/* lifecycle.c: destroys a sandbox whose lock the caller holds. */
int sbx_destroy_held(const struct sbx_settings *set, const char *id, struct sbx_state *st,
		     struct al_error *err);

/* lifecycle.c: whether a sandbox of the state directory (ud: the settings)
 * uses this generation of the /etc view. */
bool sbx_etc_gen_in_use(const char *gen, void *ud);

/* cgroup.c */
struct sbx_cgroup_knob {
	int controller; /* index into sbx_cgroup.path: 0 memory, 1 pids, 2 cpu */
	const char *file;
	char value[48];
	bool optional; /* absent on some kernels (swap accounting) */
};
/* The knob writes that put spec's limits in place; returns their count. */
int sbx_cgroup_limits(const struct sbx_spec *spec, bool v2, struct sbx_cgroup_knob *out,
		      size_t max);
int sbx_cgroup_create(const struct sbx_settings *set, const char *id, const struct sbx_spec *spec,
		      struct sbx_cgroup *ret, struct al_error *err);
/* Puts pid into every controller (cgroup v1; v2 places at clone time). */
int sbx_cgroup_attach(const struct sbx_cgroup *cg, pid_t pid);
/* Number of OOM kills recorded so far; 0 if unknown. */
uint64_t sbx_cgroup_oom_kills(const struct sbx_cgroup *cg);
/* SIGKILL to whatever is left in the sandbox's cgroup (a detached
 * command's supervisor, once its sandbox's processes are gone). */
void sbx_cgroup_kill_all(const struct sbx_cgroup *cg);
int sbx_cgroup_destroy(const struct sbx_cgroup *cg);
void sbx_cgroup_close(struct sbx_cgroup *cg);
/* Removes cgroups below the parent whose names are not live sandbox ids. */
int sbx_cgroup_gc(const struct sbx_settings *set, bool (*alive)(const char *id, void *ud), void *ud,
		  unsigned *removed);
bool sbx_cgroup_v2_usable(void);
/* Whether <parent>/<id> holds processes in any hierarchy (derived from the
 * settings alone, for when a state file cannot be read). */
bool sbx_cgroup_populated(const struct sbx_settings *set, const char *id);

/* seccomp.c */
struct sock_filter;
struct seccomp_data;
/* A compiled filter: classic BPF, as seccomp(2) loads it. */
struct sbx_bpf {
	struct sock_filter *insns;
	unsigned short len;
};
/* Builds the filter with libseccomp, exports it and checks it (non-native
 * calls killed, a denied call refused, an ordinary one allowed). */
int sbx_seccomp_compile(struct sbx_bpf *ret, struct al_error *err);
void sbx_seccomp_free(struct sbx_bpf *p);
/* Loads a compiled filter into the calling thread (no_new_privs must be set);
 * only system calls, so it may run between fork and exec. */
int sbx_seccomp_install(const struct sbx_bpf *p);
/* Runs a classic BPF program on d as seccomp would; returns the action word
 * (SECCOMP_RET_*), 0 (kill) for an invalid program. */
uint32_t sbx_bpf_run(const struct sock_filter *insns, size_t len, const struct seccomp_data *d);
/* The names refused with EPERM, and with ENOSYS, whatever the arguments. */
const char *const *sbx_seccomp_denied(size_t *ret_n);
const char *const *sbx_seccomp_enosys(size_t *ret_n);

/* rootfs.c: host side (before the sandbox's processes exist) */
struct sbx_rootfs_plan;
int sbx_rootfs_prepare(const struct sbx_spec *spec, const struct sbx_paths *p, uint32_t uid,
		       const char *etc_view, struct sbx_rootfs_plan **ret, struct al_error *err);

/* etcview.c: the filtered copy of the host's /etc that sandboxes see. */
struct sbx_etc_view {
	char path[SBX_PATH_MAX]; /* the copy, to use as /etc's lower layer */
	char gen[SBX_ID_LEN + 1];
	int lock_fd; /* shared lock: keep until the sandbox has mounted it */
};
int sbx_etc_view(const struct sbx_settings *set, bool (*in_use)(const char *gen, void *ud),
		 void *ud, struct sbx_etc_view *ret, struct al_error *err);
void sbx_etc_view_release(struct sbx_etc_view *v);
/* Removes generations neither current nor in use. */
int sbx_etc_gc(const struct sbx_settings *set, bool (*in_use)(const char *gen, void *ud), void *ud,
	       unsigned *removed);
/* rootfs.c: host side, once the user namespaces exist: turns the plan's
 * directories into detached (idmapped) mounts the init can attach. */
int sbx_rootfs_make_trees(struct sbx_rootfs_plan *plan, int userns_fd, int ws_userns_fd,
			  struct al_error *err);
/* rootfs.c: inside the new mount namespace, as host root, before joining
 * the sandbox's user namespace. */
int sbx_rootfs_mount(const struct sbx_rootfs_plan *plan, int userns_fd, int ws_userns_fd,
		     struct al_error *err);
/* Mounts a fresh /proc (for the caller's pid namespace) under root, with
 * the kernel's global knobs read-only or hidden. */
int sbx_rootfs_mount_proc(const char *root, struct al_error *err);
/* A directory the caller named, O_PATH, no symbolic link followed on the
 * way (-ELOOP). */
int sbx_open_dir_no_links(const char *path);
/* A detached clone of the directory src_fd: nosuid, nodev, ids shifted
 * through userns_fd unless it is -1 (what: its name in errors). */
int sbx_rootfs_clone(int src_fd, const char *what, int userns_fd, bool readonly,
		     struct al_error *err);
/* A layer's upper/ and work/ (struct sbx_spec.layer), made owned by uid:gid
 * when missing, checked to be directories of that owner. */
int sbx_layer_dirs(int layer_fd, const char *layer, uint32_t uid, uint32_t gid,
		   struct al_error *err);
/* Mounts a layered tree's overlay at target: lowers (':'-separated, top
 * first) under layer/upper, with layer/work; as the sandbox's root (uid),
 * who alone has a name in the layers' idmap. Paths as the overlay takes
 * them; the caller is host root with its own ids. */
int sbx_mount_tree_overlay(uint32_t uid, const char *target, const char *lowers, const char *layer);
/* The same as uid:gid (a sandbox's user, whom the layers' idmap names
 * instead of its root). */
int sbx_mount_tree_overlay_as(uint32_t uid, uint32_t gid, const char *target, const char *lowers,
			      const char *layer);
/* Who the plan's commands run as (inside ids; 0:0 for root). */
void sbx_rootfs_plan_user(const struct sbx_rootfs_plan *plan, struct sbx_user *ret);
bool sbx_rootfs_plan_needs_ws_userns(const struct sbx_rootfs_plan *plan, uint32_t *ret_owner);
void sbx_rootfs_plan_free(struct sbx_rootfs_plan *plan);
/* The descriptors the plan holds (a process that closes the rest keeps these). */
size_t sbx_rootfs_plan_fds(const struct sbx_rootfs_plan *plan, int *out, size_t max);
static inline void sbx_rootfs_plan_freep(struct sbx_rootfs_plan **p)
{
	sbx_rootfs_plan_free(*p);
}

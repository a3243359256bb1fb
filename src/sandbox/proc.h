/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/sandbox: processes of a sandbox and the messages they send. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/internal.h"

/*
 * The status channel: fixed-size records from a sandbox's first process
 * (or an exec helper) to the supervisor. The sender is trusted code, but it
 * runs inside the sandbox's namespaces, so the receiver still checks every
 * field (size, magic, kind, ranges, termination).
 */
#define SBX_MSG_MAGIC 0x61726c6bu /* "arlk" */

enum sbx_msg_kind {
	SBX_MSG_STARTED = 1, /* keeper to creator: value the init's pid, text its start time */
	SBX_MSG_READY,	     /* setup finished */
	SBX_MSG_ERROR,	     /* value: negative errno, text: reason */
	SBX_MSG_EXITED,	     /* value: exit code */
	SBX_MSG_SIGNALED,    /* value: signal */
	SBX_MSG_LISTENERS,   /* value: count of descriptors attached (SBX_NET_FDS) */
	SBX_MSG_PTY,	     /* command's init to supervisor: its terminal's master attached */
	SBX_MSG_KIND_MAX,
};

struct sbx_msg {
	uint32_t magic;
	uint32_t kind;
	int32_t value;
	char text[244];
};

int sbx_msg_send(int fd, enum sbx_msg_kind kind, int32_t value, const char *text);
/* 0 on a valid message, -EPIPE at end of stream, -EBADMSG on anything else
 * (a record that carried descriptors included: they are lost here). */
int sbx_msg_recv(int fd, struct sbx_msg *ret);

/* The network listeners, in the order of struct sbx_net_fds. */
#define SBX_NET_FDS 4
/* SBX_MSG_LISTENERS with its descriptors (SCM_RIGHTS on a socket). */
int sbx_msg_send_listeners(int fd, const struct sbx_net_fds *l);
/*
 * Like sbx_msg_recv, on a socket, also accepting SBX_MSG_LISTENERS: then
 * *ret_fds holds its descriptors (O_CLOEXEC; the caller closes them), else
 * every member is -1. Descriptors arriving with any other record, or a
 * record with the wrong number of them, are closed and refused.
 */
int sbx_msg_recv_listeners(int fd, struct sbx_msg *ret, struct sbx_net_fds *ret_fds);
void sbx_net_fds_close(struct sbx_net_fds *l);
/* SBX_MSG_PTY with the master of the command's terminal. */
int sbx_msg_send_pty(int fd, int master);
/*
 * Like sbx_msg_recv, on a socket, also accepting SBX_MSG_PTY: then
 * *ret_master is its descriptor (O_CLOEXEC), checked to be the master side
 * of a pseudo-terminal (a devpts instance's ptmx), else -1. Descriptors with
 * any other record are closed and the record refused.
 */
int sbx_msg_recv_pty(int fd, struct sbx_msg *ret, int *ret_master);

/* The pipes and descriptors one command runs with. */
struct sbx_stdio {
	int in[2], out[2], err[2];
};

/* An environment under construction: K=V strings, NULL-terminated. */
struct sbx_env {
	char **v;
	size_t n, cap;
};

void sbx_env_free(struct sbx_env *e);
/* Sets K=V, replacing an earlier K. */
int sbx_env_set(struct sbx_env *e, const char *kv);
/* PATH, HOME (home, or /root when NULL), the caller's TERM, then the
 * sandbox's env, then extra. */
int sbx_env_build(struct sbx_env *e, const char *home, char *const *spec_env, size_t n_spec,
		  char *const *extra, size_t n_extra);
/* The HOME of a sandbox's commands: its home's path inside, or NULL (/root). */
const char *sbx_spec_home(const struct sbx_spec *spec);
/* state.c: the NUL-separated --env file of a persistent sandbox (HOME first
 * when the sandbox has a home, then its --env). */
int sbx_env_write_file(const struct sbx_paths *p, const struct sbx_spec *spec);
int sbx_env_read_file(const struct sbx_paths *p, struct sbx_env *e);

/* One command to start inside a sandbox. */
struct sbx_command {
	char *const *argv;
	char **envp;
	const char *cwd;
	uint64_t pids;
	struct sbx_stdio *io;
	int status_fd;
	const struct sbx_bpf *filter; /* loaded right before exec */
	/* A terminal of the sandbox's own (its devpts) instead of io: the
	 * master goes to the supervisor (SBX_MSG_PTY) before the command
	 * starts, the slave is the command's controlling terminal. */
	bool tty;
	uint16_t rows, cols;
	/* Who it runs as, inside (0:0: root, with root's trimmed
	 * capabilities; any other: none at all). */
	uint32_t uid, gid;
};

int sbx_stdio_make(struct sbx_stdio *io);
void sbx_stdio_close(struct sbx_stdio *io);
/* Closes the ends that belong to the command (after handing them on). */
void sbx_stdio_close_child_ends(struct sbx_stdio *io);

/* ---- proc.c: the primitives every process of a sandbox is made with ---- */

/* fork-like clone3: returns 0 in the child, which must only make system
 * calls and exec or _exit (libc's cached thread id is stale). */
pid_t sbx_clone3_fork(uint64_t flags, int *ret_pidfd, int cgroup_fd);
/* A user namespace where host uid..uid+65535 appear as 0..65535; returns
 * its descriptor. */
int sbx_userns_sandbox(uint32_t uid);
/* The workspace's idmap: owner_uid/owner_gid on disk are the sandbox's root
 * (host uid base), and nothing else is mapped. */
int sbx_userns_workspace(uint32_t base, uint32_t owner_uid, uint32_t owner_gid);
/* The same with the owner as host_uid:host_gid (a sandbox's user's, with
 * --user) instead. */
int sbx_userns_workspace_as(uint32_t host_uid, uint32_t host_gid, uint32_t owner_uid,
			    uint32_t owner_gid);
/* Joins the sandbox's user namespace (fd: a namespace fd or a pidfd of a
 * process in it) as root inside: no groups, not dumpable, capabilities
 * trimmed to the kept set (proc.c). for_exec: this process or its children
 * will exec what the sandbox runs, so the bounding set is trimmed too
 * (joining a user namespace fills it again). */
int sbx_become_root(int fd, bool for_exec);
/* Where /proc/<pid>/cmdline and environ read from (fork keeps them). */
struct sbx_argarea {
	unsigned long arg_start, arg_end, env_start, env_end;
};
int sbx_argarea_get(struct sbx_argarea *ret);
/* Wipes this process's copy of the supervisor's arguments and environment,
 * so that /proc/<pid>/cmdline shows title and environ nothing. Every string
 * that lived there (argv, the spec's options, getenv's results) is gone. */
void sbx_argarea_wipe(const struct sbx_argarea *a, const char *title);
int sbx_hide_cmdline(const char *title);
/* pid 1 of a pid namespace: starts c (if any), reaps, reports. */
void sbx_run_init(const struct sbx_command *c) __attribute__((noreturn));

/* SIGKILLs the process and reaps it; closes and clears *pidfd. */
void sbx_kill_and_reap(int *pidfd);
/* 0 once the process of pidfd has exited, -ETIMEDOUT after timeout_ms. */
int sbx_wait_pidfd_exit(int pidfd, int timeout_ms);

/* ---- init.c: the sandbox's init ---- */

/* What the sandbox's init needs; everything was prepared on the host. */
struct sbx_init_args {
	const struct sbx_spec *spec;
	const struct sbx_rootfs_plan *plan;
	int userns_fd, ws_userns_fd;
	bool ephemeral;
	struct sbx_command *cmd; /* run: the command; create: NULL */
	const struct sbx_bpf *filter;
	struct sbx_user user; /* who commands run as (the keeper's default for exec) */
};

/*
 * Clones the init (into the v2 cgroup cgroup_fd when into_cgroup_v2; with
 * its own cgroup namespace at once when it is born in its cgroup). In the
 * caller: *ret_chan is the status channel, *ret_go the pipe to write one
 * byte to once the cgroup placement is done.
 */
pid_t sbx_init_spawn(const struct sbx_init_args *a, bool into_cgroup_v2, int cgroup_fd,
		     bool in_cgroup_already, int *ret_pidfd, int *ret_chan, int *ret_go);
/* The init's READY, or its reason for failing. */
int sbx_init_recv_ready(int chan, struct al_error *err);
/* The listeners a sandbox with a network sends before it is ready. */
int sbx_init_recv_listeners(int chan, struct sbx_net_fds *ret, struct al_error *err);

/* ---- keeper.c: the keeper of a persistent sandbox, and its exec helpers ---- */

/* Numbered for good: a keeper outlives the airlock that started it, and
 * talks to the next version's clients. */
enum {
	KEEPER_EXEC = 1, /* payload: request; fds: stdin, stdout, stderr, status */
	KEEPER_OK = 2,	 /* payload: int32 host pid of the helper; fd: its pidfd */
	KEEPER_ERR = 3,	 /* payload: reason (NUL-terminated) */
	/* payload: u32 uid of root inside, the home's place ("", "root",
	 * "home/NAME"; NUL-terminated); fds: the lower layers' idmapped
	 * clones, top first, then the new layer's. Answered OK (no payload),
	 * BUSY or ERR. */
	KEEPER_RELAYER = 4,
	KEEPER_BUSY = 5, /* a command runs: nothing was changed */
	/* payload: struct sbx_keeper_activity_req. Answered IDLE or ERR. */
	KEEPER_ACTIVITY = 6,
	KEEPER_IDLE = 7, /* payload: struct sbx_keeper_idle */
	/* KEEPER_EXEC with a terminal: payload u16 rows, u16 cols, then the
	 * request; the same four descriptors (stdio unused but for EOF). */
	KEEPER_EXEC_TTY = 8,
	/* KEEPER_EXEC as another user than the sandbox's (`exec --user`):
	 * payload struct sbx_keeper_exec_as, then the request; the same four
	 * descriptors. */
	KEEPER_EXEC_AS = 9,
};

struct sbx_keeper_exec_as {
	uint32_t uid, gid;   /* inside, 0 to SBX_USER_ID_MAX */
	uint32_t tty;	     /* 0 or 1 */
	uint16_t rows, cols; /* the terminal's window size; 0 without one */
};

/*
 * How long no command has run in the sandbox, as its keeper sees it: its
 * live children are the truth for "a command runs", the time it reaped the
 * last exec helper (or started) for "since when". close_after_ms: when
 * nothing runs and it has been idle for at least that long, the keeper
 * refuses every later request but this one (the caller destroys the
 * sandbox, and no exec may start in between); 0: only asking.
 */
struct sbx_keeper_activity_req {
	uint64_t close_after_ms; /* 0 to SBX_EXPIRY_MAX_MS */
};
struct sbx_keeper_idle {
	uint64_t idle_ms; /* 0 while busy; CLOCK_BOOTTIME, so no clock setting moves it */
	/* The close_after_ms that closed it (1 to SBX_EXPIRY_MAX_MS), or 0. */
	uint64_t closed_after_ms;
	uint32_t busy;	 /* 0 or 1: a command runs */
	uint32_t closed; /* 0 or 1: it refuses everything now (idle past closed_after_ms) */
};
#define KEEPER_REQ_MAX (1024 * 1024)

struct ipc_msg;
/* The keeper's side of sbx_relayer (relayer.c): answers on conn. user: the
 * sandbox's (the new overlay is mounted as that user). stage: an
 * empty directory of the host's to stage the layers on (in a mount
 * namespace of the helper's own); keeper_fds: the keeper's own, closed in
 * its helper. -1 when the sandbox may have lost its workspace (the keeper
 * then refuses every later request), else 0. */
int sbx_relayer_serve(int conn, int init_pidfd, pid_t init_pid, const char *stage,
		      struct ipc_msg *msg, const int *keeper_fds, size_t n_keeper_fds,
		      const struct sbx_user *user);
#define KEEPER_MAX_ARGS 4096
/* relayer.c: 1 when nothing runs in the sandbox but its init (the keeper's
 * other children are zombies, the init has none), 0 when something does,
 * or a negative errno. Called by the keeper. */
int sbx_keeper_sandbox_idle(pid_t init_pid);

/* Where a persistent sandbox's keeper listens. */
int sbx_control_path(const struct sbx_paths *p, char *out, size_t size);

/* A keeper just started: its creator places it in the cgroup (v1), writes
 * 'g' to go, reads the listeners (with a network) and STARTED (or ERROR)
 * from rep, records the sandbox and writes 'c' to go. */
struct sbx_keeper_start {
	pid_t pid;
	int pidfd;
	int rep;
	int go;
};
int sbx_keeper_spawn(const struct sbx_init_args *a, const struct sbx_paths *p,
		     const struct sbx_cgroup *cg, struct sbx_keeper_start *ret,
		     struct al_error *err);

/* supervise.c: pumps stdio, enforces the timeout and output cap, and waits
 * for the command's status on status_fd. kill_pidfd is the process whose
 * death ends everything the command started. oom_before: the cgroup's OOM
 * kill count before the command could start (0 for a fresh sandbox). */
/* sbx_exec, writing 'k' to *notify (when >= 0) once the command started,
 * then closing it (*notify -1). */
int sbx_exec_notify(const struct sbx_settings *set, const char *id, char *const *argv,
		    const struct sbx_exec_opts *opts, int *notify, struct sbx_result *ret,
		    struct al_error *err);

int sbx_supervise(int status_fd, int kill_pidfd, const struct sbx_exec_opts *opts,
		  struct sbx_stdio *io, const struct sbx_cgroup *cg, uint64_t oom_before,
		  struct sbx_result *ret, struct al_error *err);

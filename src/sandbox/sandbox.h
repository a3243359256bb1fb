/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox runtime: create a sandbox (namespaces, overlay root, cgroup
 * limits, seccomp), run commands in it, destroy it without a trace.
 *
 * Every function returns 0 or a negative errno and fills err with a reason
 * a user can act on. Nothing here exits the process.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define SBX_ID_LEN 16 /* hex characters */
#define SBX_MAX_ENV 256
#define SBX_HOSTNAME_MAX 63
/* Lower layers of a layered workspace at most (struct sbx_spec.lower). */
#define SBX_LOWERS_MAX 15

/* Where a sandbox with a network finds its trust bundle (the host's bundle
 * followed by trust_pem) and trust_pem alone. */
#define SBX_TRUST_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define SBX_CA_FILE "/etc/airlock/ca.crt"
/* Where a sandbox sees its tools directory (struct sbx_spec.tools). */
#define SBX_TOOLS_PATH "/opt/airlock"

/* Who a sandbox's commands run as inside: ids of its user namespace, from
 * 0 (root) to SBX_USER_ID_MAX. */
#define SBX_USER_ID_MAX 65535u
struct sbx_user {
	uint32_t uid, gid;
};

enum sbx_network {
	SBX_NETWORK_NONE = 0,
	SBX_NETWORK_RESTRICTED,
	SBX_NETWORK_OPEN,
};

/*
 * The listeners of a sandbox with a network, made by its init in its network
 * namespace (TCP 127.0.0.1:3128, 127.0.0.2:80, 127.0.0.2:443, listening; UDP
 * 127.0.0.1:53, bound). Nothing inside the sandbox ever holds them.
 */
struct sbx_net_fds {
	int proxy, http, https, dns;
};

/*
 * Called once, on the host, while the sandbox is being set up, with its
 * listeners (the caller's descriptors stay the sandbox runtime's: duplicate
 * what must outlive the call) and a pidfd of its init. A negative errno
 * fails the setup and tears the sandbox down.
 */
typedef int (*sbx_net_ready_fn)(const struct sbx_net_fds *fds, const char *sandbox_id,
				const char *sandbox_dir, int init_pidfd, void *userdata);

/* What a sandbox is made of; fixed for its life. */
struct sbx_spec {
	const char *image;     /* NULL or "host": the host's system directories */
	const char *workspace; /* NULL: a fresh empty directory */
	/* NULL: none. A host directory with the same owner and group as the
	 * workspace (so a workspace is needed), attached read-write at
	 * home_path inside, idmapped like the workspace; HOME names it. */
	const char *home;
	/* Where; NULL: "/root". "/root" or "/home/NAME" (NAME:
	 * [a-z_][a-z0-9_-]{0,31}). Only with a home. */
	const char *home_path;
	/* A host directory with the workspace's owner and group, attached at
	 * SBX_TOOLS_PATH (idmapped like the workspace): what a preset's setup
	 * installs and its sessions share. Read-only unless tools_writable. */
	const char *tools;
	bool tools_writable;
	/*
	 * A layered tree instead of workspace and home (both NULL then): an
	 * overlay whose lower directory is lower, never written (sandboxes may
	 * share it), and whose upper and work directories are layer/upper and
	 * layer/work (made when missing; written by this sandbox alone). Its
	 * "workspace" directory is /workspace and, with a home_path, its
	 * "home" directory the home. lower and layer have one unprivileged
	 * owner and group, idmapped like a workspace. The overlay is mounted
	 * with redirect_dir=off and metacopy=off, so that the upper directory
	 * alone says what changed (a layered checkpoint, docs/checkpoints.md).
	 */
	const char *lower;
	const char *layer;
	/* Closed layers between lower and layer, newest first: upper
	 * directories of an earlier sandbox's layers (sbx_relayer), read-only
	 * here like lower; at most SBX_LOWERS_MAX - 1. */
	char *const *closed;
	size_t n_closed;
	enum sbx_network network;
	bool learn; /* with OPEN: recorded as "learn" (the caller reports the rules it needed) */
	const char *hostname; /* NULL: "airlock" */
	char **env;	      /* K=V strings given for every command */
	size_t n_env;
	uint64_t memory_bytes; /* 0: no limit */
	uint64_t pids;	       /* 0: no limit */
	double cpus;	       /* 0: no limit */
	/* With a network: PEM certificate(s) to trust (SBX_CA_FILE, appended to
	 * SBX_TRUST_BUNDLE); NULL: none. */
	const char *trust_pem;
	size_t trust_pem_len;
	/* Required for SBX_NETWORK_RESTRICTED and _OPEN: who serves the listeners. */
	sbx_net_ready_fn net_ready;
	void *net_ready_ud;
	/* Persistent sandboxes only (sbx_run refuses them): destroyed by
	 * sbx_gc_expired ttl_ms after their creation, or once no command has
	 * run in them for idle_ms; 0: never. From SBX_EXPIRY_MIN_MS to
	 * SBX_EXPIRY_MAX_MS. */
	uint64_t ttl_ms;
	uint64_t idle_ms;
	/*
	 * NULL: root. Who the sandbox's commands run as (`exec` may say
	 * otherwise): "UID", "UID:GID", "NAME", "NAME:GROUP" (a UID alone has
	 * the same GID; a NAME its passwd entry's group), names looked up in
	 * the image's /etc/passwd and /etc/group, never the host's name
	 * service. The workspace, the home, the tools and a layered tree are
	 * then idmapped to that user instead of root (docs/sandbox.md,
	 * "Workspace ownership").
	 */
	const char *user;
};

#define SBX_EXPIRY_MIN_MS 1000ull
#define SBX_EXPIRY_MAX_MS (365ull * 24 * 60 * 60 * 1000)

/* How one command runs. */
struct sbx_exec_opts {
	char **env; /* extra K=V, after the spec's */
	size_t n_env;
	const char *cwd;       /* NULL: /workspace */
	uint64_t timeout_ms;   /* 0: none */
	uint64_t output_limit; /* bytes of stdout+stderr; 0: none */
	int stdin_fd;	       /* usually 0; -1 for /dev/null */
	int stdout_fd;	       /* usually 1 */
	int stderr_fd;	       /* usually 2 */
	/* A pseudo-terminal of the sandbox's own for the command (stdout and
	 * stderr both come from it, to stdout_fd); rows and cols: its first
	 * window size (0: 24x80). When stdin_fd is a terminal it is put in raw
	 * mode while the command runs (restored on every way out, a fatal
	 * signal to this process included), and its window size changes
	 * (SIGWINCH) are passed on. */
	bool tty;
	uint16_t rows, cols;
	/* At output_limit, stop reading the command's output altogether (its
	 * writes then fail with EPIPE) instead of reading and discarding the
	 * rest: for a command nobody watches (a detached one). */
	bool close_at_limit;
	/* sbx_exec only: as struct sbx_spec.user, looked up in the running
	 * sandbox's own files; "0" or "root" for root. NULL: the sandbox's
	 * user. */
	const char *user;
};

enum sbx_outcome {
	SBX_EXITED = 0, /* status holds the exit code */
	SBX_SIGNALED,	/* status holds the signal */
	SBX_TIMED_OUT,
	SBX_OOM_KILLED,
	SBX_INTERRUPTED, /* we got status (the signal): the sandbox was torn down */
};

struct sbx_result {
	enum sbx_outcome outcome;
	int status;
	bool output_truncated;
	uint64_t output_bytes;
	/* Processes the memory limit killed in the sandbox's cgroup while the
	 * command ran (the command's own death included), whatever the outcome:
	 * a command whose child was killed may still exit on its own. */
	uint64_t oom_kills;
};

/* Process-wide settings, from the environment or configuration. */
struct sbx_settings {
	const char *state_dir;	   /* default /var/lib/airlock/sandboxes */
	const char *cgroup_parent; /* default "airlock" (below each hierarchy's root) */
	uint32_t uid_base;	   /* first host uid of the sandbox ranges */
	uint32_t uid_slots;	   /* how many 65536-wide ranges */
};

void sbx_settings_default(struct sbx_settings *s);
/* Applies AIRLOCK_STATE_DIR, AIRLOCK_CGROUP_PARENT, AIRLOCK_UID_BASE. */
int sbx_settings_from_env(struct sbx_settings *s, struct al_error *err);
/* The host uids the sandboxes use, all ranges together: [*ret_first, *ret_end)
 * (below 2^31: sbx_settings_from_env refuses more). */
void sbx_settings_uids(const struct sbx_settings *s, uint32_t *ret_first, uint32_t *ret_end);

/* Runs argv in a new sandbox and destroys it afterwards. */
int sbx_run(const struct sbx_settings *set, const struct sbx_spec *spec, char *const *argv,
	    const struct sbx_exec_opts *opts, struct sbx_result *ret, struct al_error *err);

/* Creates a persistent sandbox; writes its id (SBX_ID_LEN + 1 bytes). */
int sbx_create(const struct sbx_settings *set, const struct sbx_spec *spec, char *ret_id,
	       struct al_error *err);

/* Runs argv in an existing sandbox. */
int sbx_exec(const struct sbx_settings *set, const char *id, char *const *argv,
	     const struct sbx_exec_opts *opts, struct sbx_result *ret, struct al_error *err);

/*
 * Starts argv in an existing sandbox and returns once it runs, leaving it
 * running (detach.c): a supervisor of its own, on the host, does what
 * sbx_exec does, with stdin /dev/null and stdout and stderr both to a log
 * file of the sandbox's (opts->output_limit caps it: set one). *ret_n: its
 * number in the sandbox, from 1. opts->tty must be false.
 */
int sbx_exec_detached(const struct sbx_settings *set, const char *id, char *const *argv,
		      const struct sbx_exec_opts *opts, unsigned *ret_n, struct al_error *err);

/* A detached command, as sbx_detached_list finds it. */
struct sbx_detached {
	unsigned n;
	enum {
		SBX_DETACHED_RUNNING,
		SBX_DETACHED_ENDED, /* status says how */
		SBX_DETACHED_LOST,  /* its supervisor is gone without a word (killed) */
	} state;
	char command[256]; /* quoted for a shell, cut short when longer */
	char status[256];  /* "exited 0", "killed by signal 9", "timed out", "error: ..." */
};
/* The sandbox's detached commands, in the order they started (*ret: the
 * caller frees it). */
int sbx_detached_list(const struct sbx_settings *set, const char *id, struct sbx_detached **ret,
		      size_t *ret_n, struct al_error *err);
/* Opens the log of detached command n (0: the latest): *ret_fd, and
 * *ret_logs the directory it is in (for sbx_detached_ended); *ret_n: its
 * number. */
int sbx_detached_log(const struct sbx_settings *set, const char *id, unsigned n, int *ret_fd,
		     int *ret_logs, unsigned *ret_n, struct al_error *err);
/* Whether detached command n (its log in directory logs) has ended. */
bool sbx_detached_ended(int logs, unsigned n);

/*
 * A new layer for sandbox id's layered workspace (struct sbx_spec.lower):
 * what the workspace and the home hold becomes read-only, and from now on
 * the sandbox writes in layer (its upper/ and work/ made when missing).
 * lowers: the directories the new layer goes over, top first (the upper
 * directories of the layers so far, newest first, then the lower
 * directory); home_path: the spec's. Nothing else of the sandbox changes.
 * -EBUSY when a command runs in the sandbox (then nothing changed); after
 * any other failure the sandbox may have lost its workspace: destroy it.
 */
int sbx_relayer(const struct sbx_settings *set, const char *id, const char *home_path,
		char *const *lowers, size_t n_lowers, const char *layer, struct al_error *err);

/* Kills everything in the sandbox and removes every trace of it. */
int sbx_destroy(const struct sbx_settings *set, const char *id, struct al_error *err);

struct sbx_info {
	char id[SBX_ID_LEN + 1];
	bool running;
	bool ephemeral;	 /* a `run`'s: gone with its command */
	int64_t created; /* unix seconds */
	char image[256];
	char workspace[512];
	char home[512];		      /* "" when none */
	char network[16];	      /* none, restricted, open; "" when not recorded */
	uint64_t oom_kills;	      /* by the memory limit, over the sandbox's life so far */
	uint64_t memory_bytes;	      /* its limit; 0: none */
	uint32_t uid_first, uid_last; /* its host uids */
	bool cgroup_v2;
	char cgroup[4096]; /* its cgroup (v1: the memory controller's) */
	/* Its expiry (`create --ttl`, `--idle`; 0: none), which
	 * sbx_gc_expired enforces. expires_at_ms: unix milliseconds when gc
	 * destroys it at the earliest, as things stand (now or before: due);
	 * 0 when nothing says: no expiry, or only --idle while a command runs,
	 * or expiry_error. */
	uint64_t ttl_ms, idle_ms;
	int64_t expires_at_ms;
	/* "" or why the expiry cannot be told: a damaged expiry file (gc then
	 * leaves the sandbox alone), a keeper that does not answer. */
	char expiry_error[64];
	/* Who its commands run as (struct sbx_spec.user); 0:0 for root. */
	struct sbx_user user;
};

/* Calls fn for every sandbox in the state directory, `run`s included. */
int sbx_list(const struct sbx_settings *set, int (*fn)(const struct sbx_info *info, void *userdata),
	     void *userdata, struct al_error *err);
/* What sbx_list says of one sandbox; -ENOENT when there is none. */
int sbx_inspect(const struct sbx_settings *set, const char *id, struct sbx_info *ret,
		struct al_error *err);
/* The sandbox id a user typed: 16 hex digits, or a unique prefix of at
 * least 4; -ENOENT when none matches, -EINVAL when it is no id or
 * matches several. */
int sbx_id_resolve(const struct sbx_settings *set, const char *typed, char out[SBX_ID_LEN + 1],
		   struct al_error *err);

/* Removes what crashed or killed sandboxes left behind; reports the count. */
int sbx_gc(const struct sbx_settings *set, unsigned *ret_removed, struct al_error *err);

/*
 * Destroys every persistent sandbox whose --ttl has passed (whatever runs
 * in it) or that has been idle for its --idle (never while a command runs):
 * calls fn with its id and why ("ttl 2h passed", "idle 5m passed") for each
 * one destroyed. A sandbox whose expiry cannot be told is left alone and
 * reported (the first such reason in err, -EBUSY); the others are still
 * done.
 */
int sbx_gc_expired(const struct sbx_settings *set,
		   void (*fn)(const char *id, const char *why, void *userdata), void *userdata,
		   struct al_error *err);
/* A duration in its largest whole unit: "7d", "2h", "5m", "30s", "1500ms". */
void sbx_duration_format(uint64_t ms, char *out, size_t size);

/* Removes a directory tree a sandbox may have written (its workspace, a
 * session's tree) as root: no link is followed, and a hostile depth is
 * flattened rather than exhausting descriptors. 0 when it is gone. */
int sbx_rm_rf(const char *path);

/* Kernel feature report for `airlock doctor`; returns the number missing. */
int sbx_doctor(int out_fd);

bool sbx_id_valid(const char *id);
/* What struct sbx_spec.user may be: UID or NAME, then optionally ':' and
 * GID or GROUP (ids from 0 to SBX_USER_ID_MAX). */
bool sbx_user_syntax_valid(const char *text);
/* "/root" or "/home/NAME" with NAME of [a-z_][a-z0-9_-]{0,31}. */
bool sbx_home_path_valid(const char *path);

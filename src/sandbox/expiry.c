/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Expiry of persistent sandboxes: `create --ttl` (destroyed that long after
 * its creation, whatever runs in it) and `--idle` (destroyed once no
 * command has run in it for that long). Nothing runs by itself: `airlock
 * sandbox gc` (sbx_gc_expired) destroys what is due.
 *
 * <id>/expiry, beside the state file rather than in it (an earlier airlock
 * must still read the state of a sandbox this one made), four lines:
 *
 *   ttl_ms=N      0: none
 *   idle_ms=N     0: none
 *   created_ms=N  CLOCK_REALTIME at creation: for people reading the file
 *   boot_ms=N     CLOCK_BOOTTIME at creation: what the ttl is counted on
 *
 * The clocks: the ttl is counted on CLOCK_BOOTTIME, and the keeper counts
 * idle time on it too, so setting the wall clock (by hand, or NTP stepping
 * it after boot) neither ends a sandbox early nor keeps it past its limit,
 * and time spent suspended counts as it does on a wall clock. BOOTTIME
 * starts again at each boot; a sandbox does not survive one (its
 * processes are gone, and gc removes it as debris), so the value only ever
 * meets the boot it was taken in. What is shown (expires_at) is the wall
 * clock now plus what is left.
 *
 * Idle: the keeper's live children are the truth for "a command runs" (an
 * exec client that crashed proves nothing while its command still runs),
 * and it notes when it reaps each exec helper. gc asks it, and in the same
 * answer has it refuse every later request once idle long enough: no exec
 * can start between the answer and the destruction.
 */
#include "sandbox/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/ipc.h"
#include "common/parse.h"

/* How long a keeper may take to answer: gc, and list or inspect (which
 * should not hang on a keeper busy making a new layer). */
#define KEEPER_ASK_GC_S 5
#define KEEPER_ASK_INFO_S 2

static uint64_t clock_ms(clockid_t id)
{
	struct timespec ts;
	if (clock_gettime(id, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t sbx_boot_ms(void)
{
	return clock_ms(CLOCK_BOOTTIME);
}

int64_t sbx_wall_ms(void)
{
	return (int64_t)clock_ms(CLOCK_REALTIME);
}

void sbx_duration_format(uint64_t ms, char *out, size_t size)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = { { "d", 86400000 }, { "h", 3600000 }, { "m", 60000 }, { "s", 1000 } };
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (ms && ms % units[i].ms == 0) {
			snprintf(out, size, "%" PRIu64 "%s", ms / units[i].ms, units[i].unit);
			return;
		}
	snprintf(out, size, "%" PRIu64 "ms", ms);
}

static bool limit_ok(uint64_t ms)
{
	return ms == 0 || (ms >= SBX_EXPIRY_MIN_MS && ms <= SBX_EXPIRY_MAX_MS);
}

static bool expiry_ok(const struct sbx_expiry *e)
{
	return limit_ok(e->ttl_ms) && limit_ok(e->idle_ms) && (e->ttl_ms || e->idle_ms) &&
	       e->created_ms > 0 && e->boot_ms > 0;
}

int sbx_expiry_format(const struct sbx_expiry *e, char *buf, size_t size)
{
	if (!expiry_ok(e))
		return -EINVAL;
	int n = snprintf(buf, size,
			 "ttl_ms=%" PRIu64 "\nidle_ms=%" PRIu64 "\ncreated_ms=%" PRId64
			 "\nboot_ms=%" PRIu64 "\n",
			 e->ttl_ms, e->idle_ms, e->created_ms, e->boot_ms);
	if (n < 0 || (size_t)n >= size)
		return -ENOBUFS;
	return n;
}

int sbx_expiry_parse(const char *text, size_t len, struct sbx_expiry *ret)
{
	static const char *const keys[] = { "ttl_ms", "idle_ms", "created_ms", "boot_ms" };
	if (len == 0 || len >= SBX_EXPIRY_FILE_MAX)
		return -EBADMSG;
	char copy[SBX_EXPIRY_FILE_MAX];
	memcpy(copy, text, len);
	copy[len] = '\0';
	if (strlen(copy) != len)
		return -EBADMSG; /* a NUL inside */
	uint64_t v[4];
	char *line = copy;
	for (size_t i = 0; i < 4; i++) {
		/* Each key once, in this order, each line ended. */
		size_t klen = strlen(keys[i]);
		char *nl = strchr(line, '\n');
		if (!nl || strncmp(line, keys[i], klen) != 0 || line[klen] != '=')
			return -EBADMSG;
		*nl = '\0';
		if (parse_u64(line + klen + 1, &v[i]) < 0)
			return -EBADMSG;
		line = nl + 1;
	}
	if (*line || v[2] > INT64_MAX)
		return -EBADMSG;
	struct sbx_expiry e = {
		.ttl_ms = v[0], .idle_ms = v[1], .created_ms = (int64_t)v[2], .boot_ms = v[3]
	};
	/* Only what sbx_expiry_format writes, byte for byte (no leading
	 * zeros, no sign): one way to say each thing. */
	char again[SBX_EXPIRY_FILE_MAX];
	int n = sbx_expiry_format(&e, again, sizeof(again));
	if (n < 0 || (size_t)n != len || memcmp(again, text, len) != 0)
		return -EBADMSG;
	*ret = e;
	return 0;
}

static int expiry_path(const struct sbx_paths *p, const char *name, char *out, size_t size)
{
	int n = snprintf(out, size, "%s/%s", p->dir, name);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int sbx_expiry_write(const struct sbx_paths *p, const struct sbx_expiry *e)
{
	char buf[SBX_EXPIRY_FILE_MAX];
	int n = sbx_expiry_format(e, buf, sizeof(buf));
	if (n < 0)
		return n;
	char tmp[SBX_PATH_MAX], final[SBX_PATH_MAX];
	if (expiry_path(p, "expiry.tmp", tmp, sizeof(tmp)) < 0 ||
	    expiry_path(p, "expiry", final, sizeof(final)) < 0)
		return -ENAMETOOLONG;
	_cleanup_close_ int fd =
		open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	int r = write_full(fd, buf, (size_t)n);
	if (r < 0)
		return r;
	/* No fsync, as for the state: a power loss ends every sandbox. */
	if (rename(tmp, final) < 0)
		return -errno;
	return 0;
}

int sbx_expiry_read(const struct sbx_paths *p, struct sbx_expiry *ret)
{
	char path[SBX_PATH_MAX];
	if (expiry_path(p, "expiry", path, sizeof(path)) < 0)
		return -ENAMETOOLONG;
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r = read_file_bounded(AT_FDCWD, path, SBX_EXPIRY_FILE_MAX, &text, &len);
	if (r == -ENOENT)
		return r;
	if (r < 0)
		return -EBADMSG;
	return sbx_expiry_parse(text, len, ret);
}

/* The keeper's KEEPER_IDLE answer (close_after_ms: see struct
 * sbx_keeper_activity_req); -ESRCH when no keeper listens. */
static int ask_keeper(const struct sbx_paths *p, uint64_t close_after_ms, int timeout_s,
		      struct sbx_keeper_idle *ret)
{
	char path[SBX_PATH_MAX];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (sbx_control_path(p, path, sizeof(path)) < 0 || strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	_cleanup_close_ int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (conn < 0)
		return -errno;
	if (connect(conn, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -ESRCH;
	struct timeval tv = { .tv_sec = timeout_s };
	(void)setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct sbx_keeper_activity_req req = { .close_after_ms = close_after_ms };
	int r = ipc_send(conn, KEEPER_ACTIVITY, &req, sizeof(req), NULL, 0);
	if (r < 0)
		return r;
	static const struct ipc_type replies[] = {
		{ .type = KEEPER_IDLE, .max_len = sizeof(struct sbx_keeper_idle), .max_fds = 0 },
		{ .type = KEEPER_ERR, .max_len = 512, .max_fds = 0 },
	};
	_cleanup_ipc_msg_ struct ipc_msg reply = IPC_MSG_INIT;
	r = ipc_recv(conn, replies, ARRAY_SIZE(replies), &reply);
	if (r == -EAGAIN)
		return -ETIMEDOUT;
	if (r < 0)
		return r;
	if (reply.type == KEEPER_ERR)
		return -EIO;
	struct sbx_keeper_idle idle;
	if (reply.len != sizeof(idle))
		return -EBADMSG;
	memcpy(&idle, reply.data, sizeof(idle));
	if (idle.busy > 1 || idle.closed > 1 || (idle.busy && idle.idle_ms) ||
	    (idle.closed && idle.busy) ||
	    (idle.closed ? idle.closed_after_ms == 0 || idle.closed_after_ms > SBX_EXPIRY_MAX_MS :
			   idle.closed_after_ms != 0))
		return -EBADMSG;
	*ret = idle;
	return 0;
}

/* Why a keeper's answer is missing, for people. */
static const char *keeper_fault(int r)
{
	return r == -ESRCH     ? "its keeper is not listening" :
	       r == -ETIMEDOUT ? "its keeper did not answer in time" :
				 "its keeper gave no valid answer";
}

/* How much of the ttl is left (0: due); -EBADMSG for a creation time
 * after now on this boot's clock, which only a damaged file has. */
static int ttl_left(const struct sbx_expiry *e, uint64_t now_boot, uint64_t *ret)
{
	if (e->boot_ms > now_boot)
		return -EBADMSG;
	uint64_t age = now_boot - e->boot_ms;
	*ret = age >= e->ttl_ms ? 0 : e->ttl_ms - age;
	return 0;
}

void sbx_expiry_info(const struct sbx_settings *set, const struct sbx_state *st,
		     struct sbx_info *info)
{
	struct sbx_paths p;
	struct sbx_expiry e;
	if (st->ephemeral || sbx_paths_init(set, st->id, &p, NULL) < 0)
		return;
	int r = sbx_expiry_read(&p, &e);
	if (r == -ENOENT)
		return;
	uint64_t now_boot = sbx_boot_ms(), left = 0;
	if (r < 0 || (e.ttl_ms && ttl_left(&e, now_boot, &left) < 0)) {
		snprintf(info->expiry_error, sizeof(info->expiry_error), "damaged expiry file");
		return;
	}
	info->ttl_ms = e.ttl_ms;
	info->idle_ms = e.idle_ms;
	int64_t now = sbx_wall_ms();
	uint64_t soonest = UINT64_MAX; /* ms from now */
	if (e.ttl_ms)
		soonest = left;
	if (e.idle_ms && info->running) {
		struct sbx_keeper_idle idle;
		r = ask_keeper(&p, 0, KEEPER_ASK_INFO_S, &idle);
		/* While a command runs, the idle time has not started. */
		uint64_t idle_left = UINT64_MAX;
		if (r < 0)
			snprintf(info->expiry_error, sizeof(info->expiry_error), "%s",
				 keeper_fault(r));
		else if (!idle.busy)
			idle_left = idle.closed || idle.idle_ms >= e.idle_ms ?
					    0 :
					    e.idle_ms - idle.idle_ms;
		if (idle_left < soonest)
			soonest = idle_left;
	}
	if (soonest != UINT64_MAX)
		info->expires_at_ms = now + (int64_t)soonest;
}

/* One sandbox, locked: destroyed when due. 1 when destroyed, 0 when not
 * due (or not for us), or a negative errno with err set. */
static int expire_one(const struct sbx_settings *set, const char *id,
		      void (*fn)(const char *id, const char *why, void *userdata), void *userdata,
		      struct al_error *err)
{
	struct sbx_state st;
	struct sbx_paths p;
	/* Unreadable state, `run`s and dead sandboxes are sbx_gc's. */
	if (sbx_state_read(set, id, &st, NULL) < 0 || st.ephemeral ||
	    sbx_paths_init(set, id, &p, NULL) < 0)
		return 0;
	int pidfd = sbx_state_pidfd(&st);
	if (pidfd < 0)
		return 0;
	close(pidfd);
	struct sbx_expiry e;
	int r = sbx_expiry_read(&p, &e);
	if (r == -ENOENT)
		return 0;
	uint64_t left = 0;
	/*
	 * A damaged expiry file: the sandbox is left alone and reported, not
	 * destroyed (what it says can no longer be told, and a file that
	 * could be damaged into "destroy now" must not end someone's work)
	 * nor quietly kept forever (gc says so every time it runs, and exits
	 * 125).
	 */
	if (r < 0 || (e.ttl_ms && ttl_left(&e, sbx_boot_ms(), &left) < 0))
		return al_error_set(err, -EBUSY,
				    "sandbox %s has a damaged expiry file: left alone (`airlock "
				    "sandbox destroy %s` removes it)",
				    id, id);
	char lim[32], why[64];
	if (e.ttl_ms && left == 0) {
		sbx_duration_format(e.ttl_ms, lim, sizeof(lim));
		snprintf(why, sizeof(why), "ttl %s passed", lim);
	} else if (e.idle_ms) {
		struct sbx_keeper_idle idle;
		r = ask_keeper(&p, e.idle_ms, KEEPER_ASK_GC_S, &idle);
		if (r < 0)
			return al_error_set(err, -EBUSY,
					    "sandbox %s: %s, so whether it is idle cannot be told: "
					    "left alone",
					    id, keeper_fault(r));
		if (!idle.closed)
			return 0;
		/* The limit that closed it: this one, unless another asker
		 * (root, on the keeper's socket) closed it sooner. */
		sbx_duration_format(idle.closed_after_ms, lim, sizeof(lim));
		snprintf(why, sizeof(why), "idle %s passed", lim);
	} else {
		return 0;
	}
	struct al_error de = { 0 };
	r = sbx_destroy_held(set, id, &st, &de);
	if (r < 0)
		return al_error_set(err, r, "sandbox %s expired (%s) but was not destroyed: %s", id,
				    why, al_error_message(&de));
	if (fn)
		fn(id, why, userdata);
	return 1;
}

int sbx_gc_expired(const struct sbx_settings *set,
		   void (*fn)(const char *id, const char *why, void *userdata), void *userdata,
		   struct al_error *err)
{
	if (geteuid() != 0)
		return al_error_set(err, -EPERM, "airlock sandbox needs root");
	DIR *d = opendir(set->state_dir);
	if (!d)
		return errno == ENOENT ?
			       0 :
			       al_error_set_errno(err, -errno, "cannot open %s", set->state_dir);
	int ret = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct sbx_paths p;
		if (!sbx_id_valid(de->d_name) || sbx_paths_init(set, de->d_name, &p, NULL) < 0)
			continue;
		/* One being created or destroyed holds its lock. */
		int lock = sbx_lock_dir(p.dir, false);
		if (lock < 0)
			continue;
		struct al_error e = { 0 };
		int r = expire_one(set, de->d_name, fn, userdata, &e);
		close(lock);
		if (r < 0 && ret == 0)
			ret = al_error_set(err, r, "%s", al_error_message(&e));
	}
	closedir(d);
	return ret;
}

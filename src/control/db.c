/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control plane's state in SQLite (control/db.h).
 *
 * Durability: WAL with synchronous=NORMAL. A COMMIT has written the
 * transaction to the WAL file (write(2), no fsync) before it returns, so
 * what was committed survives the process being killed (kill -9, a crash):
 * the kernel has the pages. A power loss or kernel crash may lose the last
 * transactions committed before the WAL was last synced (at a checkpoint),
 * but never leaves one half applied: the database stays consistent. A
 * turn lost that way is found running by ctl_db_recover() and failed, and
 * a checkpoint lost from here is still in the store.
 *
 * Every write is one BEGIN IMMEDIATE ... COMMIT: the write lock is taken
 * up front, so a transaction never has to upgrade a read snapshot that
 * another process made stale (which WAL answers with an immediate
 * SQLITE_BUSY the busy timeout cannot wait out), and what it reads before
 * writing (the next turn or event number, a turn's state) cannot change
 * under it. Transactions are short: nothing in them waits for anything but
 * the database, so two processes on one file (a turn running, a cancel
 * from another terminal) take turns within the busy timeout.
 *
 * No SQL is ever built from the caller's text: every value is a bound
 * parameter. Statements are prepared per call, not cached: a list's
 * callback may call back into this handle (cancel a turn while listing
 * them), and preparing costs microseconds.
 */
#include "control/db.h"
#include "control/db_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/encode.h"
#include "common/fdutil.h"
#include "common/parse.h"

#define BUSY_TIMEOUT_MS 5000
#define PREFIX_MIN 4
#define KIND_MAX 32
#define RECOVER_REASON "interrupted: airlock stopped while the turn ran"

struct ctl_db {
	sqlite3 *sql;
	void (*commit_hook)(void *ud);
	void *commit_hook_ud;
};

/* ---- the schema ---- */

/*
 * Migrations in order: migrations[i] takes the schema from version i to
 * i + 1 (PRAGMA user_version), each in one transaction. Never edit one that
 * has shipped; add the next. (One that rebuilds a table must turn
 * foreign_keys off around it: the pragma is a no-op inside a transaction.)
 *
 * Every table has the tenant, and every key starts with it: a query that
 * names the tenant uses the index, and one that forgets it finds nothing.
 * Session ids are unique across tenants too (UNIQUE (id)), so that
 * anything named after a session id alone (a directory, a sandbox label)
 * can never be shared; ids are random, so this tells a tenant nothing.
 * sessions.turns is the last turn's number; events numbers come from the
 * primary key's last entry. Both are assigned inside the write
 * transaction, so two writers can never pick the same.
 */
static const char *const migrations[] = {
	/* 1: the first schema */
	"CREATE TABLE sessions ("
	" tenant TEXT NOT NULL,"
	" id TEXT NOT NULL UNIQUE,"
	" preset TEXT NOT NULL,"
	" agent TEXT NOT NULL,"
	" source TEXT NOT NULL,"
	" repo_grant TEXT NOT NULL,"
	" forked_from TEXT NOT NULL,"
	" last_checkpoint TEXT NOT NULL,"
	" agent_session TEXT NOT NULL DEFAULT '',"
	" sandbox_id TEXT NOT NULL DEFAULT '',"
	" sandbox_checkpoint TEXT NOT NULL DEFAULT '',"
	" state INTEGER NOT NULL DEFAULT 0 CHECK (state IN (0, 1)),"
	" created INTEGER NOT NULL,"
	" updated INTEGER NOT NULL,"
	" turns INTEGER NOT NULL DEFAULT 0 CHECK (turns >= 0),"
	" PRIMARY KEY (tenant, id));"
	"CREATE INDEX sessions_by_created ON sessions (tenant, created);"
	"CREATE TABLE turns ("
	" tenant TEXT NOT NULL,"
	" session TEXT NOT NULL,"
	" n INTEGER NOT NULL CHECK (n > 0),"
	" state INTEGER NOT NULL CHECK (state BETWEEN 0 AND 4),"
	" prompt TEXT NOT NULL,"
	" reason TEXT NOT NULL DEFAULT '',"
	" checkpoint TEXT NOT NULL DEFAULT '',"
	" input_tokens INTEGER NOT NULL DEFAULT 0,"
	" output_tokens INTEGER NOT NULL DEFAULT 0,"
	" cache_read_tokens INTEGER NOT NULL DEFAULT 0,"
	" cache_write_tokens INTEGER NOT NULL DEFAULT 0,"
	" cost_usd REAL," /* NULL: no cost reported */
	" queued_at INTEGER NOT NULL,"
	" started_at INTEGER NOT NULL DEFAULT 0,"
	" ended_at INTEGER NOT NULL DEFAULT 0,"
	" runner_pid INTEGER NOT NULL DEFAULT 0,"
	" runner_start INTEGER NOT NULL DEFAULT 0,"
	" late_outcome TEXT NOT NULL DEFAULT '',"
	" agent_session TEXT NOT NULL DEFAULT '',"
	" PRIMARY KEY (tenant, session, n),"
	" FOREIGN KEY (tenant, session) REFERENCES sessions (tenant, id) ON DELETE CASCADE);"
	/* One running turn per session, held by the database itself too. */
	"CREATE UNIQUE INDEX turns_running ON turns (tenant, session) WHERE state = 1;"
	"CREATE TABLE events ("
	" tenant TEXT NOT NULL,"
	" session TEXT NOT NULL,"
	" seq INTEGER NOT NULL CHECK (seq > 0),"
	" turn INTEGER NOT NULL,"
	" at INTEGER NOT NULL,"
	" kind TEXT NOT NULL,"
	" data TEXT NOT NULL,"
	" PRIMARY KEY (tenant, session, seq),"
	" FOREIGN KEY (tenant, session, turn) REFERENCES turns (tenant, session, n)"
	"  ON DELETE CASCADE);"
	/* The cascade from turns looks events up by turn. */
	"CREATE INDEX events_by_turn ON events (tenant, session, turn);"
	/*
	 * A checkpoint is recorded per session: a fork may start from another
	 * session's checkpoint, and deleting either session keeps the other's
	 * row.
	 */
	"CREATE TABLE checkpoints ("
	" tenant TEXT NOT NULL,"
	" session TEXT NOT NULL,"
	" id TEXT NOT NULL,"
	" turn INTEGER NOT NULL CHECK (turn >= 0),"
	" parent TEXT NOT NULL,"
	" created INTEGER NOT NULL,"
	" PRIMARY KEY (tenant, session, id),"
	" FOREIGN KEY (tenant, session) REFERENCES sessions (tenant, id) ON DELETE CASCADE);"
	"CREATE INDEX checkpoints_by_id ON checkpoints (tenant, id);",
};

#define SCHEMA_VERSION ((int)ARRAY_SIZE(migrations))

/* ---- errors ---- */

static int sql_errno(int rc)
{
	switch (rc) {
	case SQLITE_CONSTRAINT_PRIMARYKEY:
	case SQLITE_CONSTRAINT_UNIQUE:
		return -EEXIST;
	case SQLITE_CONSTRAINT_FOREIGNKEY:
		return -ENOENT;
	default:
		break;
	}
	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		/* Not -EBUSY: that is a claim's "a turn is running". */
		return -ETIMEDOUT;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EPERM;
	case SQLITE_CANTOPEN:
		return -EACCES;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return -EBADMSG;
	case SQLITE_TOOBIG:
		return -E2BIG;
	case SQLITE_CONSTRAINT:
	case SQLITE_MISMATCH:
	case SQLITE_RANGE:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* Sets err from the connection's last error (rc its code), after what. An
 * I/O error or a file that cannot be opened says the system's errno. */
static int db_fail(struct ctl_db *db, struct al_error *err, int rc, const char *what)
{
	int sys = 0;
	if ((rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_CANTOPEN)
		sys = sqlite3_system_errno(db->sql);
	if (sys > 0)
		return al_error_set(err, -sys, "control database: %s: %s (%s)", what,
				    sqlite3_errmsg(db->sql), al_strerror(sys));
	return al_error_set(err, sql_errno(rc), "control database: %s: %s", what,
			    sqlite3_errmsg(db->sql));
}

/* ---- statements ---- */

/*
 * A prepared statement and the first failure binding its parameters, so
 * that a run of binds is checked once, at the step.
 */
struct q {
	struct ctl_db *db;
	sqlite3_stmt *st;
	int rc;
	const char *what; /* for messages: what failed */
};

static void q_finalize(struct q *q)
{
	sqlite3_finalize(q->st);
	q->st = NULL;
}

#define _cleanup_q_ _cleanup_(q_finalize)

static int q_prepare(struct ctl_db *db, struct q *q, const char *sql, const char *what,
		     struct al_error *err)
{
	q_finalize(q);
	*q = (struct q){ .db = db, .what = what };
	int rc = sqlite3_prepare_v2(db->sql, sql, -1, &q->st, NULL);
	if (rc != SQLITE_OK)
		return db_fail(db, err, rc, what);
	return 0;
}

/* NULL binds "": the columns are NOT NULL and "" means none. The text
 * must live until the statement is stepped (SQLITE_STATIC). */
static void q_text(struct q *q, int i, const char *s)
{
	if (q->rc == SQLITE_OK)
		q->rc = sqlite3_bind_text(q->st, i, s ? s : "", -1, SQLITE_STATIC);
}

static void q_int(struct q *q, int i, int64_t v)
{
	if (q->rc == SQLITE_OK)
		q->rc = sqlite3_bind_int64(q->st, i, v);
}

/* Unsigned 64-bit counters are stored as their two's-complement bits and
 * read back the same way: exact for every value. */
static void q_u64(struct q *q, int i, uint64_t v)
{
	q_int(q, i, (int64_t)v);
}

static void q_double_or_null(struct q *q, int i, bool have, double v)
{
	if (q->rc != SQLITE_OK)
		return;
	q->rc = have ? sqlite3_bind_double(q->st, i, v) : sqlite3_bind_null(q->st, i);
}

/* 1 for a row, 0 when done, or a negative errno. */
static int q_step(struct q *q, struct al_error *err)
{
	int rc = q->rc;
	if (rc == SQLITE_OK)
		rc = sqlite3_step(q->st);
	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return db_fail(q->db, err, rc, q->what);
}

/* Runs a statement that returns no row; *ret_changes (may be NULL) the
 * rows it changed. */
static int q_exec(struct q *q, int *ret_changes, struct al_error *err)
{
	int r = q_step(q, err);
	if (r < 0)
		return r;
	if (ret_changes)
		*ret_changes = sqlite3_changes(q->db->sql);
	return 0;
}

static void col_copy(sqlite3_stmt *st, int i, char *out, size_t size)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	int n = sqlite3_column_bytes(st, i);
	size_t len = t && n > 0 ? (size_t)n : 0;
	/* Everything was bounded when written; a row edited by hand is cut,
	 * never overflowed. */
	if (len >= size)
		len = size - 1;
	if (len)
		memcpy(out, t, len);
	out[len] = '\0';
}

/* ---- transactions ---- */

/* An open write transaction; rolled back when it leaves scope uncommitted. */
struct tx {
	struct ctl_db *db;
};

static void tx_end(struct tx *t)
{
	if (t->db && !sqlite3_get_autocommit(t->db->sql))
		sqlite3_exec(t->db->sql, "ROLLBACK", NULL, NULL, NULL);
	t->db = NULL;
}

/* Declared before the statements it runs, so that they are finalized
 * (cleanups run in reverse) before it rolls back. */
#define _cleanup_tx_ _cleanup_(tx_end)

static int tx_begin(struct ctl_db *db, struct tx *t, struct al_error *err)
{
	int rc = sqlite3_exec(db->sql, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return db_fail(db, err, rc, "cannot start a transaction");
	t->db = db;
	return 0;
}

static int tx_commit(struct tx *t, struct al_error *err)
{
	struct ctl_db *db = t->db;
	if (db->commit_hook)
		db->commit_hook(db->commit_hook_ud);
	int rc = sqlite3_exec(db->sql, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return db_fail(db, err, rc, "cannot commit");
	t->db = NULL;
	return 0;
}

void ctl_db_set_commit_hook(struct ctl_db *db, void (*fn)(void *ud), void *ud)
{
	db->commit_hook = fn;
	db->commit_hook_ud = ud;
}

/* ---- values ---- */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool ctl_tenant_valid(const char *tenant)
{
	if (!tenant)
		return false;
	size_t n = strnlen(tenant, CTL_TENANT_MAX + 1);
	if (n == 0 || n > CTL_TENANT_MAX)
		return false;
	/* The characters allow them; a tenant may one day name a directory. */
	if (strcmp(tenant, ".") == 0 || strcmp(tenant, "..") == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = tenant[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static int check_tenant(const char *tenant, struct al_error *err)
{
	if (!ctl_tenant_valid(tenant))
		return al_error_set(err, -EINVAL,
				    "invalid tenant name: 1 to %d of A-Z, a-z, 0-9, '.', '_', '-'",
				    CTL_TENANT_MAX);
	return 0;
}

/* NULL counts as "" (optional fields). */
static int check_len(const char *s, size_t max, const char *what, struct al_error *err)
{
	if (s && strnlen(s, max + 1) > max)
		return al_error_set(err, -EINVAL, "%s is longer than %zu bytes", what, max);
	return 0;
}

/* A full session id, as the functions other than ctl_db_session_get take. */
static int check_session_id(const char *id, struct al_error *err)
{
	if (!id || strnlen(id, CTL_ID_LEN + 1) != CTL_ID_LEN || !enc_is_lower_hex(id, CTL_ID_LEN))
		return al_error_set(err, -EINVAL, "invalid session id: %d lower-case hex digits",
				    CTL_ID_LEN);
	return 0;
}

/* A full checkpoint id, or "" (NULL) when empty_ok. */
static int check_ckpt(const char *id, bool empty_ok, const char *what, struct al_error *err)
{
	if (empty_ok && (!id || !*id))
		return 0;
	if (!id || strnlen(id, CTL_CKPT_HEX + 1) != CTL_CKPT_HEX ||
	    !enc_is_lower_hex(id, CTL_CKPT_HEX))
		return al_error_set(err, -EINVAL, "invalid %s: %d lower-case hex digits", what,
				    CTL_CKPT_HEX);
	return 0;
}

_Static_assert(sizeof(((struct ctl_session *)0)->sandbox_id) == CTL_SANDBOX_ID_MAX + 1,
	       "CTL_SANDBOX_ID_MAX is the size of ctl_session.sandbox_id");

/* 1 to max characters, each in the set (and NUL) chars. */
static bool name_valid(const char *s, size_t max, const char *chars)
{
	size_t n = strnlen(s, max + 1);
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr(chars, c)))
			return false;
	}
	return true;
}

/*
 * An id prefix (4 to max hex digits, either case) as the range of ids
 * that start with it: [lo, hi), hi being lo with 'g' appended. Ids are
 * lower-case hex only, and 'g' sorts after every hex digit, so the range
 * holds exactly the ids with that prefix (no LIKE, no escaping).
 */
static int id_range(const char *id, size_t max, const char *what, char *lo, char *hi,
		    struct al_error *err)
{
	if (!id)
		return al_error_set(err, -EINVAL, "no %s id", what);
	size_t n = strnlen(id, max + 1);
	if (n > max)
		return al_error_set(err, -EINVAL, "invalid %s id: at most %zu hex digits", what,
				    max);
	for (size_t i = 0; i < n; i++) {
		int v = enc_hex_value(id[i]);
		if (v < 0)
			return al_error_set(err, -EINVAL, "invalid %s id: hex digits only", what);
		lo[i] = enc_hex_lower[v];
	}
	lo[n] = '\0';
	if (n < PREFIX_MIN)
		return al_error_set(err, -EINVAL,
				    "%s id prefix %s is too short: at least %d hex digits", what,
				    lo, PREFIX_MIN);
	memcpy(hi, lo, n);
	hi[n] = 'g';
	hi[n + 1] = '\0';
	return 0;
}

/* ---- the runner's liveness ---- */

int ctl_proc_starttime(int32_t pid, uint64_t *ret)
{
	if (pid <= 0)
		return -ESRCH;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%" PRId32 "/stat", pid);
	_cleanup_free_ char *text = NULL;
	int r = read_file_bounded(AT_FDCWD, path, 4096, &text, NULL);
	if (r == -ENOENT || r == -ESRCH)
		return -ESRCH;
	if (r < 0)
		return r;
	/* The command name (field 2) may hold spaces and parentheses: the
	 * fields that follow start after its last ')'. */
	const char *p = strrchr(text, ')');
	if (!p || p[1] != ' ')
		return -EBADMSG;
	p += 2;
	/* Field 3: a zombie will never finish a turn. */
	if (*p == 'Z' || *p == 'X' || *p == 'x')
		return -ESRCH;
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return -EBADMSG;
		p++;
	}
	uint64_t v;
	const char *end;
	if (parse_u64_prefix(p, &v, &end) < 0 || (*end != ' ' && *end != '\n' && *end != '\0'))
		return -EBADMSG;
	*ret = v;
	return 0;
}

/*
 * Whether (pid, start) still runs. Gone when there is no such process, it
 * is a zombie, or the pid now belongs to a process started at another
 * time. When /proc cannot tell (hidepid, an error) the runner counts as
 * alive: failing a turn that still runs is worse than leaving one running
 * until the next recovery.
 */
static bool runner_alive(int32_t pid, uint64_t start)
{
	uint64_t now;
	int r = ctl_proc_starttime(pid, &now);
	if (r == -ESRCH)
		return false;
	if (r < 0)
		return true;
	return now == start;
}

static int ended_runner_alive(struct ctl_db *db, const char *tenant, const char *session,
			      uint32_t except, uint32_t *ret_n, struct al_error *err)
{
	*ret_n = 0;
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q,
			  "SELECT n, runner_pid, runner_start FROM turns WHERE tenant = ?1 AND "
			  "session = ?2 AND state >= 2 AND runner_pid > 0 AND n != ?3",
			  "cannot read the turns", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, except);
	while ((r = q_step(&q, err)) > 0) {
		if (runner_alive((int32_t)sqlite3_column_int64(q.st, 1),
				 (uint64_t)sqlite3_column_int64(q.st, 2))) {
			*ret_n = (uint32_t)sqlite3_column_int64(q.st, 0);
			return 0;
		}
	}
	return r;
}

int ctl_db_turn_release(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
			int32_t pid, struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0 || (r = check_session_id(session, err)) < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "UPDATE turns SET runner_pid = 0 WHERE tenant = ?1 AND session = ?2 AND "
		      "n = ?3 AND runner_pid = ?4 AND state != 1",
		      "cannot update the turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, n);
	q_int(&q, 4, pid);
	return q_exec(&q, NULL, err);
}

int ctl_db_session_runners(struct ctl_db *db, const char *tenant, const char *session,
			   uint32_t *ret_n, struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0 || (r = check_session_id(session, err)) < 0)
		return r;
	/* A running turn's runner, or an ended one's still at work. */
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "SELECT n, runner_pid, runner_start FROM turns WHERE tenant = ?1 AND "
		      "session = ?2 AND state >= 1 AND runner_pid > 0",
		      "cannot read the turns", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	*ret_n = 0;
	while ((r = q_step(&q, err)) > 0)
		if (runner_alive((int32_t)sqlite3_column_int64(q.st, 1),
				 (uint64_t)sqlite3_column_int64(q.st, 2)))
			(*ret_n)++;
	return r;
}

/* ---- opening ---- */

/* Makes the directories above path that are missing, owner-only. */
static int make_parents(const char *path, struct al_error *err)
{
	_cleanup_free_ char *dir = strdup(path);
	if (!dir)
		return al_error_set(err, -ENOMEM, "out of memory");
	char *slash = strrchr(dir, '/');
	if (!slash)
		return 0;
	while (slash > dir && slash[-1] == '/')
		slash--;
	if (slash == dir)
		return 0;
	*slash = '\0';
	struct stat st;
	if (stat(dir, &st) == 0) {
		if (!S_ISDIR(st.st_mode))
			return al_error_set(err, -ENOTDIR, "%s is not a directory", dir);
		return 0;
	}
	for (char *p = dir + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return al_error_set_errno(err, -errno, "cannot create the directory %s",
						  dir);
		*p = c;
		if (c == '\0')
			break;
	}
	if (stat(dir, &st) < 0)
		return al_error_set_errno(err, -errno, "cannot create the directory %s", dir);
	if (!S_ISDIR(st.st_mode))
		return al_error_set(err, -ENOTDIR, "%s is not a directory", dir);
	return 0;
}

/*
 * Creates the file (0600) when missing and checks that path names a
 * regular file and no symlink; *ret its identity, to check that SQLite
 * opened the same one.
 */
static int prepare_file(const char *path, struct stat *ret, struct al_error *err)
{
	struct stat st;
	if (lstat(path, &st) == 0) {
		/* Checked before opening: opening a device can do things. */
		if (S_ISLNK(st.st_mode))
			return al_error_set(err, -ELOOP,
					    "the control database %s is a symbolic link", path);
		if (!S_ISREG(st.st_mode))
			return al_error_set(err, -EINVAL,
					    "the control database %s is not a regular file", path);
	} else if (errno != ENOENT) {
		return al_error_set_errno(err, -errno, "cannot access the control database %s",
					  path);
	}
	_cleanup_close_ int fd =
		open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0) {
		if (errno == ELOOP)
			return al_error_set(err, -ELOOP,
					    "the control database %s is a symbolic link", path);
		return al_error_set_errno(err, -errno, "cannot open the control database %s", path);
	}
	if (fstat(fd, &st) < 0)
		return al_error_set_errno(err, -errno, "cannot access the control database %s",
					  path);
	if (!S_ISREG(st.st_mode))
		return al_error_set(err, -EINVAL, "the control database %s is not a regular file",
				    path);
	*ret = st;
	/* Closed here, before SQLite opens the file: closing any descriptor
	 * of a file drops all of the process's POSIX locks on it, SQLite's
	 * included. */
	return 0;
}

static int exec_sql(struct ctl_db *db, const char *sql, const char *what, struct al_error *err)
{
	int rc = sqlite3_exec(db->sql, sql, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return db_fail(db, err, rc, what);
	return 0;
}

/* A pragma's answer as text, into out. */
static int pragma_text(struct ctl_db *db, const char *sql, char *out, size_t size,
		       struct al_error *err)
{
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q, sql, "cannot set up the connection", err);
	if (r < 0)
		return r;
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0)
		out[0] = '\0';
	else
		col_copy(q.st, 0, out, size);
	return 0;
}

static int user_version(struct ctl_db *db, int *ret, struct al_error *err)
{
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q, "PRAGMA user_version", "cannot read the schema version", err);
	if (r < 0)
		return r;
	r = q_step(&q, err);
	if (r < 0)
		return r;
	*ret = r ? sqlite3_column_int(q.st, 0) : 0;
	return 0;
}

static int refuse_newer(const char *path, int v, struct al_error *err)
{
	return al_error_set(err, -EPROTONOSUPPORT,
			    "the control database %s has schema version %d, newer than this "
			    "airlock knows (%d): use the airlock that wrote it, or a later one",
			    path, v, SCHEMA_VERSION);
}

static int migrate(struct ctl_db *db, const char *path, struct al_error *err)
{
	int v, r = user_version(db, &v, err);
	if (r < 0)
		return r;
	if (v > SCHEMA_VERSION)
		return refuse_newer(path, v, err);
	while (v < SCHEMA_VERSION) {
		_cleanup_tx_ struct tx tx = { 0 };
		r = tx_begin(db, &tx, err);
		if (r < 0)
			return r;
		/* Again under the write lock: another process may have
		 * migrated since. */
		r = user_version(db, &v, err);
		if (r < 0)
			return r;
		if (v > SCHEMA_VERSION)
			return refuse_newer(path, v, err);
		if (v < 0)
			return al_error_set(err, -EBADMSG,
					    "the control database %s has schema version %d", path,
					    v);
		if (v == SCHEMA_VERSION)
			break;
		char what[64];
		snprintf(what, sizeof(what), "schema migration %d", v + 1);
		r = exec_sql(db, migrations[v], what, err);
		if (r < 0)
			return r;
		/* A pragma takes no parameter; this is our own number. */
		char set[64];
		snprintf(set, sizeof(set), "PRAGMA user_version = %d", v + 1);
		r = exec_sql(db, set, what, err);
		if (r < 0)
			return r;
		r = tx_commit(&tx, err);
		if (r < 0)
			return r;
		v++;
	}
	return 0;
}

/*
 * Switches the file to WAL (once for good: the mode is kept in the file).
 * The switch needs the file to itself; when another process is opening a
 * new database at the same moment, SQLite answers SQLITE_BUSY at once
 * rather than call the busy handler (waiting there could deadlock), so the
 * wait is here, up to the same timeout.
 */
static int set_wal(struct ctl_db *db, const char *path, struct al_error *err)
{
	for (int waited = 0;; waited += 10) {
		_cleanup_q_ struct q q = { 0 };
		int r = q_prepare(db, &q, "PRAGMA journal_mode = WAL",
				  "cannot set up the connection", err);
		if (r < 0)
			return r;
		int rc = sqlite3_step(q.st);
		if ((rc & 0xff) == SQLITE_BUSY && waited < BUSY_TIMEOUT_MS) {
			q_finalize(&q);
			struct timespec ts = { .tv_nsec = 10 * 1000 * 1000 };
			nanosleep(&ts, NULL);
			continue;
		}
		if (rc != SQLITE_ROW)
			return db_fail(db, err, rc, "cannot set up the connection");
		char mode[16];
		col_copy(q.st, 0, mode, sizeof(mode));
		if (strcmp(mode, "wal") != 0)
			return al_error_set(err, -ENOTSUP,
					    "the control database %s cannot use a write-ahead log "
					    "(mode %s)",
					    path, mode);
		return 0;
	}
}

static int setup(struct ctl_db *db, const char *path, struct al_error *err)
{
	sqlite3_extended_result_codes(db->sql, 1);
	sqlite3_busy_timeout(db->sql, BUSY_TIMEOUT_MS);
	/* The file's schema runs no function of ours, and no statement may
	 * write the schema or pages behind SQLite's back. */
	sqlite3_db_config(db->sql, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	sqlite3_db_config(db->sql, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
	int r = set_wal(db, path, err);
	if (r < 0)
		return r;
	r = exec_sql(db, "PRAGMA synchronous = NORMAL", "cannot set up the connection", err);
	if (r < 0)
		return r;
	r = exec_sql(db, "PRAGMA foreign_keys = ON", "cannot set up the connection", err);
	if (r < 0)
		return r;
	char fk[8];
	r = pragma_text(db, "PRAGMA foreign_keys", fk, sizeof(fk), err);
	if (r < 0)
		return r;
	if (strcmp(fk, "1") != 0)
		return al_error_set(err, -ENOTSUP, "this SQLite enforces no foreign keys");
	return migrate(db, path, err);
}

int ctl_db_open(const char *path, struct ctl_db **ret, struct al_error *err)
{
	if (!path || !*path)
		return al_error_set(err, -EINVAL, "no control database path");
	int r = make_parents(path, err);
	if (r < 0)
		return r;
	struct stat want = { 0 };
	r = prepare_file(path, &want, err);
	if (r < 0)
		return r;

	/* "./" before a relative path: never read as a URI or ":memory:". */
	_cleanup_free_ char *name = NULL;
	if (path[0] == '/')
		name = strdup(path);
	else if (asprintf(&name, "./%s", path) < 0)
		name = NULL;
	if (!name)
		return al_error_set(err, -ENOMEM, "out of memory");

	struct ctl_db *db = calloc(1, sizeof(*db));
	if (!db)
		return al_error_set(err, -ENOMEM, "out of memory");
	int rc = sqlite3_open_v2(name, &db->sql,
				 SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX,
				 NULL);
	if (rc != SQLITE_OK) {
		r = db->sql ? db_fail(db, err, rc, path) :
			      al_error_set(err, -ENOMEM, "cannot open %s: out of memory", path);
		ctl_db_close(db);
		return r;
	}
	/* The path still names the file checked: a swap in between (by
	 * whoever else can write to the directory) is caught here, not proved
	 * impossible. */
	struct stat st;
	if (lstat(path, &st) < 0 || st.st_dev != want.st_dev || st.st_ino != want.st_ino) {
		ctl_db_close(db);
		return al_error_set(err, -ESTALE, "the control database %s changed while opened",
				    path);
	}
	r = setup(db, path, err);
	if (r < 0) {
		ctl_db_close(db);
		return r;
	}
	*ret = db;
	return 0;
}

void ctl_db_close(struct ctl_db *db)
{
	if (!db)
		return;
	sqlite3_close_v2(db->sql);
	free(db);
}

/* ---- sessions ---- */

#define SESSION_COLS                                                                    \
	"id, tenant, preset, agent, source, repo_grant, forked_from, last_checkpoint, " \
	"agent_session, sandbox_id, sandbox_checkpoint, state, created, updated, turns"

static void read_session(sqlite3_stmt *st, struct ctl_session *s)
{
	memset(s, 0, sizeof(*s));
	col_copy(st, 0, s->id, sizeof(s->id));
	col_copy(st, 1, s->tenant, sizeof(s->tenant));
	col_copy(st, 2, s->preset, sizeof(s->preset));
	col_copy(st, 3, s->agent, sizeof(s->agent));
	col_copy(st, 4, s->source, sizeof(s->source));
	col_copy(st, 5, s->grant, sizeof(s->grant));
	col_copy(st, 6, s->forked_from, sizeof(s->forked_from));
	col_copy(st, 7, s->last_checkpoint, sizeof(s->last_checkpoint));
	col_copy(st, 8, s->agent_session, sizeof(s->agent_session));
	col_copy(st, 9, s->sandbox_id, sizeof(s->sandbox_id));
	col_copy(st, 10, s->sandbox_checkpoint, sizeof(s->sandbox_checkpoint));
	s->state = sqlite3_column_int(st, 11) == CTL_SESSION_DELETING ? CTL_SESSION_DELETING :
									CTL_SESSION_ACTIVE;
	s->created = sqlite3_column_int64(st, 12);
	s->updated = sqlite3_column_int64(st, 13);
	s->turns = (uint32_t)sqlite3_column_int64(st, 14);
}

/*
 * The one answer for a session this tenant cannot see, whether it does not
 * exist or is another tenant's: same code, same words.
 */
static int session_not_found(const char *id, struct al_error *err)
{
	return al_error_set(err, -ENOENT, "session %s not found", id);
}

/* 0 when the tenant has session id (a full id), else session_not_found. */
static int session_check(struct ctl_db *db, const char *tenant, const char *id,
			 struct al_error *err)
{
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q, "SELECT 1 FROM sessions WHERE tenant = ?1 AND id = ?2",
			  "cannot read the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, id);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	return r ? 0 : session_not_found(id, err);
}

/* -ENOENT when the session is being deleted: no turn is queued or starts. */
static int session_active(struct ctl_db *db, const char *tenant, const char *id,
			  struct al_error *err)
{
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q, "SELECT state FROM sessions WHERE tenant = ?1 AND id = ?2",
			  "cannot read the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, id);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0)
		return session_not_found(id, err);
	if (sqlite3_column_int(q.st, 0) != CTL_SESSION_ACTIVE)
		return al_error_set(err, -ENOENT, "session %s is being deleted", id);
	return 0;
}

/* The turn (other than `except`) of the session whose runner still works
 * on it after it ended (cancelled under it, or finishing up), or 0. */
static int ended_runner_alive(struct ctl_db *db, const char *tenant, const char *session,
			      uint32_t except, uint32_t *ret_n, struct al_error *err);

/* Validates the tenant and a full session id, and checks it exists. */
static int session_args(struct ctl_db *db, const char *tenant, const char *id, struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	r = check_session_id(id, err);
	if (r < 0)
		return r;
	return session_check(db, tenant, id, err);
}

/* Bumps the session's updated time (in the caller's transaction). */
static int session_touch(struct ctl_db *db, const char *tenant, const char *id, int64_t now,
			 struct al_error *err)
{
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q, "UPDATE sessions SET updated = ?3 WHERE tenant = ?1 AND id = ?2",
			  "cannot update the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, id);
	q_int(&q, 3, now);
	return q_exec(&q, NULL, err);
}

int ctl_db_session_insert(struct ctl_db *db, const struct ctl_session *s, struct al_error *err)
{
	int r;
	if ((r = check_tenant(s->tenant, err)) < 0 || (r = check_session_id(s->id, err)) < 0 ||
	    (r = check_len(s->preset, CTL_NAME_MAX, "the preset name", err)) < 0 ||
	    (r = check_len(s->agent, CTL_NAME_MAX, "the agent name", err)) < 0 ||
	    (r = check_len(s->source, CTL_SOURCE_MAX, "the source", err)) < 0 ||
	    (r = check_len(s->grant, CTL_SOURCE_MAX, "the grant", err)) < 0 ||
	    (r = check_ckpt(s->forked_from, true, "checkpoint id to fork from", err)) < 0 ||
	    (r = check_ckpt(s->last_checkpoint, true, "last checkpoint id", err)) < 0 ||
	    (r = check_len(s->agent_session, CTL_AGENT_SID_MAX, "the agent's session id", err)) < 0)
		return r;

	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	/* Taken by any tenant: asked for explicitly, so that the answer is
	 * the same words whoever holds it (SQLite's would name the index). */
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q, "SELECT 1 FROM sessions WHERE id = ?1", "cannot add the session",
		      err);
	if (r < 0)
		return r;
	q_text(&q, 1, s->id);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r)
		return al_error_set(err, -EEXIST, "session id %s is taken", s->id);

	int64_t now = now_ms();
	r = q_prepare(db, &q,
		      "INSERT INTO sessions (tenant, id, preset, agent, source, repo_grant, "
		      "forked_from, last_checkpoint, agent_session, created, updated) "
		      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?10, ?9, ?9)",
		      "cannot add the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, s->tenant);
	q_text(&q, 2, s->id);
	q_text(&q, 3, s->preset);
	q_text(&q, 4, s->agent);
	q_text(&q, 5, s->source);
	q_text(&q, 6, s->grant);
	q_text(&q, 7, s->forked_from);
	q_text(&q, 8, s->last_checkpoint);
	q_int(&q, 9, now);
	q_text(&q, 10, s->agent_session);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;
	return tx_commit(&tx, err);
}

int ctl_db_session_get(struct ctl_db *db, const char *tenant, const char *id,
		       struct ctl_session *ret, struct al_error *err)
{
	char lo[CTL_ID_LEN + 1], hi[CTL_ID_LEN + 2];
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	r = id_range(id, CTL_ID_LEN, "session", lo, hi, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "SELECT " SESSION_COLS " FROM sessions "
		      "WHERE tenant = ?1 AND id >= ?2 AND id < ?3 ORDER BY id LIMIT 2",
		      "cannot read the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, lo);
	q_text(&q, 3, hi);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0)
		return session_not_found(lo, err);
	struct ctl_session s;
	read_session(q.st, &s);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r)
		return al_error_set(err, -EINVAL, "session id prefix %s is ambiguous", lo);
	*ret = s;
	return 0;
}

int ctl_db_session_list_idle(struct ctl_db *db, int64_t before,
			     int (*fn)(const struct ctl_session *s, void *ud), void *ud,
			     struct al_error *err)
{
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q,
			  "SELECT " SESSION_COLS " FROM sessions WHERE updated < ?1 "
			  "ORDER BY updated, rowid",
			  "cannot list the sessions", err);
	if (r < 0)
		return r;
	q_int(&q, 1, before);
	while ((r = q_step(&q, err)) > 0) {
		struct ctl_session s;
		read_session(q.st, &s);
		r = fn(&s, ud);
		if (r != 0)
			return r;
	}
	return r;
}

int ctl_db_session_list(struct ctl_db *db, const char *tenant,
			int (*fn)(const struct ctl_session *s, void *ud), void *ud,
			struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "SELECT " SESSION_COLS " FROM sessions WHERE tenant = ?1 "
		      "ORDER BY created DESC, rowid DESC",
		      "cannot list the sessions", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	while ((r = q_step(&q, err)) > 0) {
		struct ctl_session s;
		read_session(q.st, &s);
		r = fn(&s, ud);
		if (r != 0)
			return r;
	}
	return r;
}

int ctl_db_session_set_sandbox(struct ctl_db *db, const char *tenant, const char *id,
			       const char *sandbox_id, const char *checkpoint, struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	if ((r = check_session_id(id, err)) < 0)
		return r;
	if (sandbox_id && *sandbox_id &&
	    !name_valid(sandbox_id, CTL_SANDBOX_ID_MAX, "ABCDEFGHIJKLMNOPQRSTUVWXYZ._-"))
		return al_error_set(err, -EINVAL,
				    "invalid sandbox id: 1 to %d of a-z, A-Z, 0-9, '.', '_', '-'",
				    CTL_SANDBOX_ID_MAX);
	if ((r = check_ckpt(checkpoint, true, "sandbox checkpoint id", err)) < 0)
		return r;

	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "UPDATE sessions SET sandbox_id = ?3, sandbox_checkpoint = ?4, updated = ?5 "
		      "WHERE tenant = ?1 AND id = ?2",
		      "cannot update the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, id);
	q_text(&q, 3, sandbox_id);
	q_text(&q, 4, checkpoint);
	q_int(&q, 5, now_ms());
	int changed;
	r = q_exec(&q, &changed, err);
	if (r < 0)
		return r;
	if (changed == 0)
		return session_not_found(id, err);
	return tx_commit(&tx, err);
}

int ctl_db_session_clear_sandbox_if(struct ctl_db *db, const char *tenant, const char *id,
				    const char *sandbox_id, struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0 || (r = check_session_id(id, err)) < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "UPDATE sessions SET sandbox_id = '', sandbox_checkpoint = '' "
		      "WHERE tenant = ?1 AND id = ?2 AND sandbox_id = ?3 AND sandbox_id != ''",
		      "cannot update the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, id);
	q_text(&q, 3, sandbox_id);
	int changes = 0;
	if ((r = q_exec(&q, &changes, err)) < 0)
		return r;
	return changes > 0 ? 1 : 0;
}

int ctl_db_session_set_state(struct ctl_db *db, const char *tenant, const char *id,
			     enum ctl_session_state state, struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	if ((r = check_session_id(id, err)) < 0)
		return r;
	if (state != CTL_SESSION_ACTIVE && state != CTL_SESSION_DELETING)
		return al_error_set(err, -EINVAL, "invalid session state %d", (int)state);

	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "UPDATE sessions SET state = ?3, updated = ?4 WHERE tenant = ?1 AND id = ?2",
		      "cannot update the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, id);
	q_int(&q, 3, state);
	q_int(&q, 4, now_ms());
	int changed;
	r = q_exec(&q, &changed, err);
	if (r < 0)
		return r;
	if (changed == 0)
		return session_not_found(id, err);
	return tx_commit(&tx, err);
}

int ctl_db_session_delete(struct ctl_db *db, const char *tenant, const char *id,
			  struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	if ((r = check_session_id(id, err)) < 0)
		return r;

	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	/* Its turns, events and checkpoint rows go with it (ON DELETE
	 * CASCADE, in this transaction). */
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q, "DELETE FROM sessions WHERE tenant = ?1 AND id = ?2",
		      "cannot delete the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, id);
	int changed;
	r = q_exec(&q, &changed, err);
	if (r < 0)
		return r;
	if (changed == 0)
		return session_not_found(id, err);
	return tx_commit(&tx, err);
}

/* ---- turns ---- */

const char *ctl_turn_state_name(enum ctl_turn_state s)
{
	switch (s) {
	case CTL_TURN_QUEUED:
		return "queued";
	case CTL_TURN_RUNNING:
		return "running";
	case CTL_TURN_SUCCEEDED:
		return "succeeded";
	case CTL_TURN_FAILED:
		return "failed";
	case CTL_TURN_CANCELLED:
		return "cancelled";
	}
	return "unknown";
}

void ctl_turn_clear(struct ctl_turn *t)
{
	if (!t)
		return;
	free(t->prompt);
	t->prompt = NULL;
}

#define TURN_COLS                                                                              \
	"session, tenant, n, state, prompt, reason, checkpoint, input_tokens, output_tokens, " \
	"cache_read_tokens, cache_write_tokens, cost_usd, queued_at, started_at, ended_at, "   \
	"runner_pid, runner_start, late_outcome, agent_session"

static int read_turn(sqlite3_stmt *st, struct ctl_turn *t, struct al_error *err)
{
	memset(t, 0, sizeof(*t));
	col_copy(st, 0, t->session, sizeof(t->session));
	col_copy(st, 1, t->tenant, sizeof(t->tenant));
	t->n = (uint32_t)sqlite3_column_int64(st, 2);
	int state = sqlite3_column_int(st, 3);
	t->state = state >= CTL_TURN_QUEUED && state <= CTL_TURN_CANCELLED ?
			   (enum ctl_turn_state)state :
			   CTL_TURN_FAILED;
	const char *prompt = (const char *)sqlite3_column_text(st, 4);
	t->prompt = strdup(prompt ? prompt : "");
	if (!t->prompt)
		return al_error_set(err, -ENOMEM, "out of memory");
	col_copy(st, 5, t->reason, sizeof(t->reason));
	col_copy(st, 6, t->checkpoint, sizeof(t->checkpoint));
	t->usage.input_tokens = (uint64_t)sqlite3_column_int64(st, 7);
	t->usage.output_tokens = (uint64_t)sqlite3_column_int64(st, 8);
	t->usage.cache_read_tokens = (uint64_t)sqlite3_column_int64(st, 9);
	t->usage.cache_write_tokens = (uint64_t)sqlite3_column_int64(st, 10);
	t->usage.have_cost = sqlite3_column_type(st, 11) != SQLITE_NULL;
	t->usage.cost_usd = t->usage.have_cost ? sqlite3_column_double(st, 11) : 0;
	t->queued_at = sqlite3_column_int64(st, 12);
	t->started_at = sqlite3_column_int64(st, 13);
	t->ended_at = sqlite3_column_int64(st, 14);
	t->runner_pid = (int32_t)sqlite3_column_int64(st, 15);
	t->runner_start = (uint64_t)sqlite3_column_int64(st, 16);
	col_copy(st, 17, t->late_outcome, sizeof(t->late_outcome));
	col_copy(st, 18, t->agent_session, sizeof(t->agent_session));
	return 0;
}

static int turn_not_found(const char *session, uint32_t n, struct al_error *err)
{
	return al_error_set(err, -ENOENT, "turn %" PRIu32 " of session %s not found", n, session);
}

/* Reads turn n of the session into *ret (prompt owned). The session was
 * checked. */
static int turn_read(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
		     struct ctl_turn *ret, struct al_error *err)
{
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q,
			  "SELECT " TURN_COLS " FROM turns "
			  "WHERE tenant = ?1 AND session = ?2 AND n = ?3",
			  "cannot read the turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, n);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0)
		return turn_not_found(session, n, err);
	return read_turn(q.st, ret, err);
}

/* The state of turn n of the session (checked): -ENOENT when none. */
static int turn_state(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
		      enum ctl_turn_state *ret, struct al_error *err)
{
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q,
			  "SELECT state FROM turns WHERE tenant = ?1 AND session = ?2 AND n = ?3",
			  "cannot read the turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, n);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0)
		return turn_not_found(session, n, err);
	*ret = (enum ctl_turn_state)sqlite3_column_int(q.st, 0);
	return 0;
}

int ctl_db_turn_queue(struct ctl_db *db, const char *tenant, const char *session,
		      const char *prompt, uint32_t *ret_n, struct al_error *err)
{
	return ctl_db_turn_queue_by(db, tenant, session, prompt, 0, 0, ret_n, err);
}

int ctl_db_turn_queue_by(struct ctl_db *db, const char *tenant, const char *session,
			 const char *prompt, int32_t pid, uint64_t start, uint32_t *ret_n,
			 struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	if ((r = check_session_id(session, err)) < 0)
		return r;
	if (!prompt)
		return al_error_set(err, -EINVAL, "no prompt");
	if ((r = check_len(prompt, CTL_PROMPT_MAX, "the prompt", err)) < 0)
		return r;

	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	if ((r = session_active(db, tenant, session, err)) < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q, "SELECT turns FROM sessions WHERE tenant = ?1 AND id = ?2",
		      "cannot read the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0)
		return session_not_found(session, err);
	int64_t last = sqlite3_column_int64(q.st, 0);
	if (last < 0 || last >= UINT32_MAX)
		return al_error_set(err, -EOVERFLOW, "session %s has too many turns", session);
	uint32_t n = (uint32_t)last + 1;

	int64_t now = now_ms();
	r = q_prepare(
		db, &q,
		"INSERT INTO turns (tenant, session, n, state, prompt, queued_at, runner_pid, "
		"runner_start) VALUES (?1, ?2, ?3, 0, ?4, ?5, ?6, ?7)",
		"cannot queue the turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, n);
	q_text(&q, 4, prompt);
	q_int(&q, 5, now);
	q_int(&q, 6, pid > 0 ? pid : 0);
	q_u64(&q, 7, pid > 0 ? start : 0);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;
	r = q_prepare(db, &q,
		      "UPDATE sessions SET turns = ?3, updated = ?4 WHERE tenant = ?1 AND id = ?2",
		      "cannot queue the turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, n);
	q_int(&q, 4, now);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;
	r = tx_commit(&tx, err);
	if (r < 0)
		return r;
	if (ret_n)
		*ret_n = n;
	return 0;
}

int ctl_db_turn_claim(struct ctl_db *db, const char *tenant, const char *session, int32_t pid,
		      uint64_t start, struct ctl_turn *ret, struct al_error *err)
{
	return ctl_db_turn_claim_n(db, tenant, session, 0, pid, start, ret, err);
}

int ctl_db_turn_claim_n(struct ctl_db *db, const char *tenant, const char *session, uint32_t want,
			int32_t pid, uint64_t start, struct ctl_turn *ret, struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	if ((r = check_session_id(session, err)) < 0)
		return r;
	if (pid <= 0)
		return al_error_set(err, -EINVAL, "invalid runner pid %" PRId32, pid);

	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	r = session_check(db, tenant, session, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "SELECT n FROM turns WHERE tenant = ?1 AND session = ?2 AND state = 1",
		      "cannot claim a turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r)
		return al_error_set(err, -EBUSY, "turn %" PRId64 " of session %s is running",
				    (int64_t)sqlite3_column_int64(q.st, 0), session);
	if ((r = session_active(db, tenant, session, err)) < 0)
		return r;
	/* Runners one at a time: a cancelled turn's runner may still be making
	 * or dropping its sandbox, a finished one recording it. */
	uint32_t busy = 0;
	if ((r = ended_runner_alive(db, tenant, session, want, &busy, err)) < 0)
		return r;
	if (busy)
		return al_error_set(err, -EBUSY, "turn %" PRIu32 " of session %s is still ending",
				    busy, session);

	r = q_prepare(db, &q,
		      "SELECT n FROM turns WHERE tenant = ?1 AND session = ?2 AND state = 0 "
		      "ORDER BY n LIMIT 1",
		      "cannot claim a turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0)
		return al_error_set(err, -ENOENT, "no turn of session %s is queued", session);
	uint32_t n = (uint32_t)sqlite3_column_int64(q.st, 0);
	/* Turns run in the order they were queued: a later one waits. */
	if (want && n != want)
		return al_error_set(err, -EBUSY, "turn %" PRIu32 " of session %s is queued first",
				    n, session);

	int64_t now = now_ms();
	r = q_prepare(db, &q,
		      "UPDATE turns SET state = 1, started_at = ?4, runner_pid = ?5, "
		      "runner_start = ?6 WHERE tenant = ?1 AND session = ?2 AND n = ?3",
		      "cannot claim a turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, n);
	q_int(&q, 4, now);
	q_int(&q, 5, pid);
	q_u64(&q, 6, start);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;
	r = session_touch(db, tenant, session, now, err);
	if (r < 0)
		return r;
	struct ctl_turn t;
	r = turn_read(db, tenant, session, n, &t, err);
	if (r < 0)
		return r;
	r = tx_commit(&tx, err);
	if (r < 0 || !ret) {
		ctl_turn_clear(&t);
		return r;
	}
	*ret = t;
	return 0;
}

int ctl_db_turn_finish(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
		       enum ctl_turn_state state, const char *reason, const struct ctl_usage *usage,
		       const char *checkpoint, const char *agent_session, struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	if ((r = check_session_id(session, err)) < 0)
		return r;
	if (state != CTL_TURN_SUCCEEDED && state != CTL_TURN_FAILED)
		return al_error_set(err, -EINVAL, "a turn finishes as succeeded or failed, not %s",
				    ctl_turn_state_name(state));
	if ((r = check_len(reason, CTL_REASON_MAX, "the reason", err)) < 0 ||
	    (r = check_ckpt(checkpoint, true, "checkpoint id", err)) < 0 ||
	    (r = check_len(agent_session, CTL_AGENT_SID_MAX, "the agent's session id", err)) < 0)
		return r;
	struct ctl_usage none = { 0 };
	if (!usage)
		usage = &none;
	if (usage->have_cost && !isfinite(usage->cost_usd))
		return al_error_set(err, -EINVAL, "the turn's cost is not a number");

	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q, "SELECT last_checkpoint FROM sessions WHERE tenant = ?1 AND id = ?2",
		      "cannot read the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0)
		return session_not_found(session, err);
	char parent[CTL_CKPT_HEX + 1];
	col_copy(q.st, 0, parent, sizeof(parent));

	enum ctl_turn_state cur;
	r = turn_state(db, tenant, session, n, &cur, err);
	if (r < 0)
		return r;
	int64_t now = now_ms();
	if (ctl_turn_state_terminal(cur)) {
		/* Cancelled (or ended) while this ran: the outcome is
		 * recorded as ignored, nothing else changes. */
		r = q_prepare(db, &q,
			      "UPDATE turns SET late_outcome = ?4 "
			      "WHERE tenant = ?1 AND session = ?2 AND n = ?3",
			      "cannot update the turn", err);
		if (r < 0)
			return r;
		q_text(&q, 1, tenant);
		q_text(&q, 2, session);
		q_int(&q, 3, n);
		q_text(&q, 4, ctl_turn_state_name(state));
		r = q_exec(&q, NULL, err);
		if (r < 0)
			return r;
		r = tx_commit(&tx, err);
		if (r < 0)
			return r;
		return al_error_set(err, -EALREADY,
				    "turn %" PRIu32 " of session %s is already %s: its outcome "
				    "(%s) is ignored",
				    n, session, ctl_turn_state_name(cur),
				    ctl_turn_state_name(state));
	}
	if (cur != CTL_TURN_RUNNING)
		return al_error_set(err, -EINVAL, "turn %" PRIu32 " of session %s is not running",
				    n, session);

	r = q_prepare(db, &q,
		      "UPDATE turns SET state = ?4, reason = ?5, checkpoint = ?6, "
		      "input_tokens = ?7, output_tokens = ?8, cache_read_tokens = ?9, "
		      "cache_write_tokens = ?10, cost_usd = ?11, ended_at = ?12, "
		      "agent_session = ?13 "
		      "WHERE tenant = ?1 AND session = ?2 AND n = ?3",
		      "cannot finish the turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, n);
	q_int(&q, 4, state);
	q_text(&q, 5, reason);
	q_text(&q, 6, checkpoint);
	q_u64(&q, 7, usage->input_tokens);
	q_u64(&q, 8, usage->output_tokens);
	q_u64(&q, 9, usage->cache_read_tokens);
	q_u64(&q, 10, usage->cache_write_tokens);
	q_double_or_null(&q, 11, usage->have_cost, usage->cost_usd);
	q_int(&q, 12, now);
	q_text(&q, 13, agent_session);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;

	if (checkpoint && *checkpoint) {
		/* Already recorded for this session (the store gave the same
		 * id again): the first row stays. */
		r = q_prepare(
			db, &q,
			"INSERT INTO checkpoints (tenant, session, id, turn, parent, created) "
			"VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
			"cannot record the checkpoint", err);
		if (r < 0)
			return r;
		q_text(&q, 1, tenant);
		q_text(&q, 2, session);
		q_text(&q, 3, checkpoint);
		q_int(&q, 4, n);
		q_text(&q, 5, strcmp(parent, checkpoint) == 0 ? "" : parent);
		q_int(&q, 6, now);
		r = q_exec(&q, NULL, err);
		if (r < 0)
			return r;
	}
	/* An empty checkpoint or agent session id keeps the session's. */
	r = q_prepare(db, &q,
		      "UPDATE sessions SET "
		      "last_checkpoint = CASE WHEN ?3 = '' THEN last_checkpoint ELSE ?3 END, "
		      "agent_session = CASE WHEN ?4 = '' THEN agent_session ELSE ?4 END, "
		      "updated = ?5 WHERE tenant = ?1 AND id = ?2",
		      "cannot update the session", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_text(&q, 3, checkpoint);
	q_text(&q, 4, agent_session);
	q_int(&q, 5, now);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;
	return tx_commit(&tx, err);
}

int ctl_db_turn_cancel(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
		       const char *reason, uint32_t *ret_n, struct al_error *err)
{
	return ctl_db_turn_cancel_take(db, tenant, session, n, reason, ret_n, NULL, 0, err);
}

int ctl_db_turn_cancel_take(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
			    const char *reason, uint32_t *ret_n, char *ret_sandbox,
			    size_t sandbox_size, struct al_error *err)
{
	if (ret_sandbox && sandbox_size)
		ret_sandbox[0] = '\0';
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	if ((r = check_session_id(session, err)) < 0)
		return r;
	if ((r = check_len(reason, CTL_REASON_MAX, "the reason", err)) < 0)
		return r;

	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	r = session_check(db, tenant, session, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	if (n == 0 || n == CTL_TURN_CURRENT) {
		/* 0: the latest turn not ended; CTL_TURN_CURRENT: the running
		 * one, else the first queued. */
		r = q_prepare(db, &q,
			      n == 0 ? "SELECT n FROM turns WHERE tenant = ?1 AND session = ?2 "
				       "AND state IN (0, 1) ORDER BY n DESC LIMIT 1" :
				       "SELECT n FROM turns WHERE tenant = ?1 AND session = ?2 "
				       "AND state IN (0, 1) ORDER BY state DESC, n ASC LIMIT 1",
			      "cannot read the turns", err);
		if (r < 0)
			return r;
		q_text(&q, 1, tenant);
		q_text(&q, 2, session);
		r = q_step(&q, err);
		if (r < 0)
			return r;
		if (r == 0)
			return al_error_set(err, -ENOENT,
					    "no turn of session %s is queued or running", session);
		n = (uint32_t)sqlite3_column_int64(q.st, 0);
	} else {
		enum ctl_turn_state cur;
		r = turn_state(db, tenant, session, n, &cur, err);
		if (r < 0)
			return r;
		if (ctl_turn_state_terminal(cur))
			return al_error_set(err, -ENOENT,
					    "turn %" PRIu32 " of session %s is not queued or "
					    "running: it %s",
					    n, session, ctl_turn_state_name(cur));
	}
	enum ctl_turn_state was;
	r = turn_state(db, tenant, session, n, &was, err);
	if (r < 0)
		return r;
	int64_t now = now_ms();
	if (was == CTL_TURN_RUNNING && ret_sandbox) {
		/* The running turn's sandbox holds what it did: the session
		 * forgets it in this transaction, so that no next turn can
		 * take it for the last checkpoint's; the caller destroys it. */
		r = q_prepare(db, &q,
			      "SELECT sandbox_id FROM sessions WHERE tenant = ?1 AND id = ?2",
			      "cannot read the session", err);
		if (r < 0)
			return r;
		q_text(&q, 1, tenant);
		q_text(&q, 2, session);
		if ((r = q_step(&q, err)) < 0)
			return r;
		if (r)
			col_copy(q.st, 0, ret_sandbox, sandbox_size);
		r = q_prepare(db, &q,
			      "UPDATE sessions SET sandbox_id = '', sandbox_checkpoint = '' "
			      "WHERE tenant = ?1 AND id = ?2",
			      "cannot cancel the turn", err);
		if (r < 0)
			return r;
		q_text(&q, 1, tenant);
		q_text(&q, 2, session);
		if ((r = q_exec(&q, NULL, err)) < 0)
			return r;
	}
	/* runner_pid stays: whoever cancels a running turn stops its runner. */
	r = q_prepare(db, &q,
		      "UPDATE turns SET state = 4, reason = ?4, ended_at = ?5 "
		      "WHERE tenant = ?1 AND session = ?2 AND n = ?3",
		      "cannot cancel the turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, n);
	q_text(&q, 4, reason);
	q_int(&q, 5, now);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;
	r = session_touch(db, tenant, session, now, err);
	if (r < 0)
		return r;
	r = tx_commit(&tx, err);
	if (r < 0)
		return r;
	if (ret_n)
		*ret_n = n;
	return 0;
}

int ctl_db_turn_get(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
		    struct ctl_turn *ret, struct al_error *err)
{
	int r = session_args(db, tenant, session, err);
	if (r < 0)
		return r;
	return turn_read(db, tenant, session, n, ret, err);
}

int ctl_db_turn_list(struct ctl_db *db, const char *tenant, const char *session,
		     int (*fn)(const struct ctl_turn *t, void *ud), void *ud, struct al_error *err)
{
	int r = session_args(db, tenant, session, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "SELECT " TURN_COLS " FROM turns WHERE tenant = ?1 AND session = ?2 "
		      "ORDER BY n",
		      "cannot list the turns", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	while ((r = q_step(&q, err)) > 0) {
		struct ctl_turn t;
		r = read_turn(q.st, &t, err);
		if (r < 0) {
			ctl_turn_clear(&t);
			return r;
		}
		r = fn(&t, ud);
		ctl_turn_clear(&t);
		if (r != 0)
			return r;
	}
	return r;
}

/* A running turn found by ctl_db_recover. */
struct running {
	char tenant[CTL_TENANT_MAX + 1];
	char session[CTL_ID_LEN + 1];
	char sandbox[CTL_SANDBOX_ID_MAX + 1];
	bool queued; /* a queued turn whose caller died: it never ran */
	uint32_t n;
	int32_t pid;
	uint64_t start;
};

static int fail_interrupted(struct ctl_db *db, const struct running *t, int64_t now,
			    struct al_error *err)
{
	_cleanup_q_ struct q q = { 0 };
	int r = q_prepare(db, &q,
			  "UPDATE turns SET state = 3, reason = ?4, ended_at = ?5 "
			  "WHERE tenant = ?1 AND session = ?2 AND n = ?3 AND state = ?6",
			  "cannot fail an interrupted turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, t->tenant);
	q_text(&q, 2, t->session);
	q_int(&q, 3, t->n);
	q_text(&q, 4, t->queued ? "its caller went away before it ran" : RECOVER_REASON);
	q_int(&q, 5, now);
	q_int(&q, 6, t->queued ? 0 : 1);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;
	if (t->queued)
		return 0;
	/* The sandbox may hold what the turn did half-way: it is not the
	 * session's to reuse. */
	r = q_prepare(db, &q,
		      "UPDATE sessions SET sandbox_id = '', sandbox_checkpoint = '', updated = ?3 "
		      "WHERE tenant = ?1 AND id = ?2",
		      "cannot fail an interrupted turn", err);
	if (r < 0)
		return r;
	q_text(&q, 1, t->tenant);
	q_text(&q, 2, t->session);
	q_int(&q, 3, now);
	return q_exec(&q, NULL, err);
}

int ctl_db_recover(struct ctl_db *db, void (*gone)(const char *sandbox_id, void *ud), void *ud,
		   unsigned *ret_n, struct al_error *err)
{
	_cleanup_tx_ struct tx tx = { 0 };
	int r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	/* Collected first, then updated: no write under an open cursor. One
	 * running turn per session bounds the list by the sessions. */
	_cleanup_free_ struct running *dead = NULL;
	size_t n_dead = 0, cap = 0;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(
		db, &q,
		"SELECT t.tenant, t.session, t.n, t.runner_pid, t.runner_start, s.sandbox_id, "
		"t.state FROM turns t "
		"JOIN sessions s ON s.tenant = t.tenant AND s.id = t.session "
		"WHERE t.state = 1 OR (t.state = 0 AND t.runner_pid > 0)",
		"cannot read the running turns", err);
	if (r < 0)
		return r;
	while ((r = q_step(&q, err)) > 0) {
		struct running t;
		col_copy(q.st, 0, t.tenant, sizeof(t.tenant));
		col_copy(q.st, 1, t.session, sizeof(t.session));
		t.n = (uint32_t)sqlite3_column_int64(q.st, 2);
		t.pid = (int32_t)sqlite3_column_int64(q.st, 3);
		t.start = (uint64_t)sqlite3_column_int64(q.st, 4);
		col_copy(q.st, 5, t.sandbox, sizeof(t.sandbox));
		t.queued = sqlite3_column_int(q.st, 6) == 0;
		if (t.queued)
			t.sandbox[0] = '\0';
		if (runner_alive(t.pid, t.start))
			continue;
		if (n_dead == cap) {
			size_t ncap = cap ? 2 * cap : 8;
			struct running *p = reallocarray(dead, ncap, sizeof(*dead));
			if (!p)
				return al_error_set(err, -ENOMEM, "out of memory");
			dead = p;
			cap = ncap;
		}
		dead[n_dead++] = t;
	}
	if (r < 0)
		return r;
	q_finalize(&q);

	int64_t now = now_ms();
	for (size_t i = 0; i < n_dead; i++) {
		r = fail_interrupted(db, &dead[i], now, err);
		if (r < 0)
			return r;
	}
	r = tx_commit(&tx, err);
	if (r < 0)
		return r;
	for (size_t i = 0; gone && i < n_dead; i++)
		if (dead[i].sandbox[0])
			gone(dead[i].sandbox, ud);
	if (ret_n)
		*ret_n = (unsigned)n_dead;
	return 0;
}

/* ---- events ---- */

int ctl_db_event_append(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
			const char *kind, const char *data, uint64_t *ret_seq, struct al_error *err)
{
	const struct ctl_event_in e = { kind, data };
	return ctl_db_event_append_many(db, tenant, session, n, &e, 1, ret_seq, err);
}

int ctl_db_event_append_many(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
			     const struct ctl_event_in *ev, size_t count, uint64_t *ret_first_seq,
			     struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	if ((r = check_session_id(session, err)) < 0)
		return r;
	if (count == 0 || count > CTL_EVENTS_BATCH_MAX)
		return al_error_set(err, -EINVAL, "1 to %d events at a time", CTL_EVENTS_BATCH_MAX);
	for (size_t i = 0; i < count; i++) {
		if (!ev[i].kind || !name_valid(ev[i].kind, KIND_MAX, "_"))
			return al_error_set(err, -EINVAL,
					    "invalid event kind: 1 to %d of a-z, 0-9, '_'",
					    KIND_MAX);
		if (!ev[i].data)
			return al_error_set(err, -EINVAL, "no event data");
		if ((r = check_len(ev[i].data, CTL_EVENT_DATA_MAX, "the event's data", err)) < 0)
			return r;
	}

	/* All in one transaction: a burst of events costs one commit. */
	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	r = session_check(db, tenant, session, err);
	if (r < 0)
		return r;
	enum ctl_turn_state cur;
	r = turn_state(db, tenant, session, n, &cur, err);
	if (r < 0)
		return r;
	/* The next numbers: the primary key's last entry, under the write
	 * lock. */
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "INSERT INTO events (tenant, session, seq, turn, at, kind, data) "
		      "SELECT ?1, ?2, COALESCE(MAX(seq), 0) + 1, ?3, ?4, ?5, ?6 FROM events "
		      "WHERE tenant = ?1 AND session = ?2 RETURNING seq",
		      "cannot append the event", err);
	if (r < 0)
		return r;
	uint64_t first = 0;
	int64_t at = now_ms();
	for (size_t i = 0; i < count; i++) {
		if (i > 0) {
			sqlite3_reset(q.st);
			sqlite3_clear_bindings(q.st);
		}
		q_text(&q, 1, tenant);
		q_text(&q, 2, session);
		q_int(&q, 3, n);
		q_int(&q, 4, at);
		q_text(&q, 5, ev[i].kind);
		q_text(&q, 6, ev[i].data);
		r = q_step(&q, err);
		if (r < 0)
			return r;
		if (r == 0)
			return al_error_set(err, -EIO, "control database: the event got no number");
		uint64_t seq = (uint64_t)sqlite3_column_int64(q.st, 0);
		if (i == 0)
			first = seq;
		else if (seq != first + i)
			return al_error_set(err, -EIO, "control database: events out of order");
		/* RETURNING: the insert is finished only when the statement is. */
		r = q_step(&q, err);
		if (r < 0)
			return r;
	}
	q_finalize(&q);
	r = tx_commit(&tx, err);
	if (r < 0)
		return r;
	if (ret_first_seq)
		*ret_first_seq = first;
	return 0;
}

int ctl_db_event_list(struct ctl_db *db, const char *tenant, const char *session, uint64_t after,
		      size_t limit, int (*fn)(const struct ctl_event_row *e, void *ud), void *ud,
		      struct al_error *err)
{
	int r = session_args(db, tenant, session, err);
	if (r < 0)
		return r;
	if (after >= INT64_MAX)
		return 0;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "SELECT seq, turn, at, kind, data FROM events "
		      "WHERE tenant = ?1 AND session = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4",
		      "cannot list the events", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_int(&q, 3, (int64_t)after);
	/* LIMIT -1: no limit. */
	q_int(&q, 4, limit == 0 || limit > INT64_MAX ? -1 : (int64_t)limit);
	while ((r = q_step(&q, err)) > 0) {
		const char *kind = (const char *)sqlite3_column_text(q.st, 3);
		const char *data = (const char *)sqlite3_column_text(q.st, 4);
		struct ctl_event_row e = {
			.seq = (uint64_t)sqlite3_column_int64(q.st, 0),
			.turn = (uint32_t)sqlite3_column_int64(q.st, 1),
			.at = sqlite3_column_int64(q.st, 2),
			.kind = kind ? kind : "",
			.data = data ? data : "",
		};
		r = fn(&e, ud);
		if (r != 0)
			return r;
	}
	return r;
}

/* ---- checkpoints ---- */

#define CKPT_COLS "id, session, turn, parent, created"

static void read_ckpt(sqlite3_stmt *st, struct ctl_checkpoint *c)
{
	memset(c, 0, sizeof(*c));
	col_copy(st, 0, c->id, sizeof(c->id));
	col_copy(st, 1, c->session, sizeof(c->session));
	c->turn = (uint32_t)sqlite3_column_int64(st, 2);
	col_copy(st, 3, c->parent, sizeof(c->parent));
	c->created = sqlite3_column_int64(st, 4);
}

int ctl_db_checkpoint_add(struct ctl_db *db, const char *tenant, const char *session,
			  const char *id, const char *parent, struct al_error *err)
{
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	if ((r = check_session_id(session, err)) < 0 ||
	    (r = check_ckpt(id, false, "checkpoint id", err)) < 0 ||
	    (r = check_ckpt(parent, true, "parent checkpoint id", err)) < 0)
		return r;

	_cleanup_tx_ struct tx tx = { 0 };
	r = tx_begin(db, &tx, err);
	if (r < 0)
		return r;
	r = session_check(db, tenant, session, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "SELECT 1 FROM checkpoints WHERE tenant = ?1 AND session = ?2 AND id = ?3",
		      "cannot record the checkpoint", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_text(&q, 3, id);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r)
		return al_error_set(err, -EEXIST,
				    "checkpoint %s is already recorded for session %s", id,
				    session);
	int64_t now = now_ms();
	r = q_prepare(db, &q,
		      "INSERT INTO checkpoints (tenant, session, id, turn, parent, created) "
		      "VALUES (?1, ?2, ?3, 0, ?4, ?5)",
		      "cannot record the checkpoint", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_text(&q, 3, id);
	q_text(&q, 4, parent);
	q_int(&q, 5, now);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;
	r = q_prepare(db, &q,
		      "UPDATE sessions SET last_checkpoint = ?3, updated = ?4 "
		      "WHERE tenant = ?1 AND id = ?2",
		      "cannot record the checkpoint", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	q_text(&q, 3, id);
	q_int(&q, 4, now);
	r = q_exec(&q, NULL, err);
	if (r < 0)
		return r;
	return tx_commit(&tx, err);
}

int ctl_db_checkpoint_get(struct ctl_db *db, const char *tenant, const char *id,
			  struct ctl_checkpoint *ret, struct al_error *err)
{
	char lo[CTL_CKPT_HEX + 1], hi[CTL_CKPT_HEX + 2];
	int r = check_tenant(tenant, err);
	if (r < 0)
		return r;
	r = id_range(id, CTL_CKPT_HEX, "checkpoint", lo, hi, err);
	if (r < 0)
		return r;
	/*
	 * Distinct ids first: one checkpoint recorded in several sessions (a
	 * fork's starting point) is one match, not an ambiguity; its first
	 * row (the session that made it) answers.
	 */
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "SELECT DISTINCT id FROM checkpoints "
		      "WHERE tenant = ?1 AND id >= ?2 AND id < ?3 ORDER BY id LIMIT 2",
		      "cannot read the checkpoint", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, lo);
	q_text(&q, 3, hi);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0)
		return al_error_set(err, -ENOENT, "checkpoint %s not found", lo);
	char full[CTL_CKPT_HEX + 1];
	col_copy(q.st, 0, full, sizeof(full));
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r)
		return al_error_set(err, -EINVAL, "checkpoint id prefix %s is ambiguous", lo);

	r = q_prepare(db, &q,
		      "SELECT " CKPT_COLS " FROM checkpoints WHERE tenant = ?1 AND id = ?2 "
		      "ORDER BY created, rowid LIMIT 1",
		      "cannot read the checkpoint", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, full);
	r = q_step(&q, err);
	if (r < 0)
		return r;
	if (r == 0) /* only if deleted in between: no transaction holds both */
		return al_error_set(err, -ENOENT, "checkpoint %s not found", lo);
	read_ckpt(q.st, ret);
	return 0;
}

int ctl_db_checkpoint_list(struct ctl_db *db, const char *tenant, const char *session,
			   int (*fn)(const struct ctl_checkpoint *c, void *ud), void *ud,
			   struct al_error *err)
{
	int r = session_args(db, tenant, session, err);
	if (r < 0)
		return r;
	_cleanup_q_ struct q q = { 0 };
	r = q_prepare(db, &q,
		      "SELECT " CKPT_COLS " FROM checkpoints WHERE tenant = ?1 AND session = ?2 "
		      "ORDER BY created, rowid",
		      "cannot list the checkpoints", err);
	if (r < 0)
		return r;
	q_text(&q, 1, tenant);
	q_text(&q, 2, session);
	while ((r = q_step(&q, err)) > 0) {
		struct ctl_checkpoint c;
		read_ckpt(q.st, &c);
		r = fn(&c, ud);
		if (r != 0)
			return r;
	}
	return r;
}

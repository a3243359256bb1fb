/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "control/db.h"
#include "control/db_internal.h"

static char tmpdir[64];
static char dbpath[128];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_DP)
		return rmdir(path);
	return unlink(path);
}

static int setup(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/ctldbtest.XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	/* Two directories that do not exist yet: the open makes them. */
	snprintf(dbpath, sizeof(dbpath), "%s/state/ctl/control.db", tmpdir);
	return 0;
}

static int teardown(void **state)
{
	return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- helpers ---- */

static struct ctl_db *open_ok(void)
{
	struct ctl_db *db = NULL;
	struct al_error err = { 0 };
	if (ctl_db_open(dbpath, &db, &err) < 0)
		fail_msg("open %s: %s", dbpath, al_error_message(&err));
	return db;
}

/* Session id number v: 16 hex digits. */
static void sid(char out[CTL_ID_LEN + 1], uint64_t v)
{
	snprintf(out, CTL_ID_LEN + 1, "%016" PRIx64, v);
}

/* Checkpoint id number v: 64 hex digits. */
static void ckid(char out[CTL_CKPT_HEX + 1], uint64_t v)
{
	snprintf(out, CTL_CKPT_HEX + 1, "%048x%016" PRIx64, 0xc0u, v);
}

/* The checkpoint of turn n of session id (unique across sessions). */
static void turn_ck(char out[CTL_CKPT_HEX + 1], const char *id, uint32_t n)
{
	snprintf(out, CTL_CKPT_HEX + 1, "%s%048" PRIx32, id, n);
}

static void add_session(struct ctl_db *db, const char *tenant, const char *id)
{
	struct ctl_session s = { 0 };
	snprintf(s.id, sizeof(s.id), "%s", id);
	snprintf(s.tenant, sizeof(s.tenant), "%s", tenant);
	snprintf(s.preset, sizeof(s.preset), "default");
	snprintf(s.agent, sizeof(s.agent), "claude");
	snprintf(s.source, sizeof(s.source), "/src/project");
	snprintf(s.grant, sizeof(s.grant), "github:owner/repo");
	struct al_error err = { 0 };
	if (ctl_db_session_insert(db, &s, &err) < 0)
		fail_msg("insert %s/%s: %s", tenant, id, al_error_message(&err));
}

static uint32_t queue_ok(struct ctl_db *db, const char *tenant, const char *id, const char *prompt)
{
	uint32_t n = 0;
	struct al_error err = { 0 };
	if (ctl_db_turn_queue(db, tenant, id, prompt, &n, &err) < 0)
		fail_msg("queue %s: %s", id, al_error_message(&err));
	return n;
}

/* This process is done with the session's earlier turns (as a runner
 * says when it ends): the next may be claimed. */
static void release_all(struct ctl_db *db, const char *tenant, const char *id)
{
	struct al_error err = { 0 };
	for (uint32_t n = 1; n <= 64; n++)
		(void)ctl_db_turn_release(db, tenant, id, n, getpid(), &err);
}

/* Claims as this process (its real start time: it is alive). */
static uint32_t claim_ok(struct ctl_db *db, const char *tenant, const char *id)
{
	release_all(db, tenant, id);
	struct ctl_turn t = { 0 };
	struct al_error err = { 0 };
	uint64_t start;
	assert_int_equal(ctl_proc_starttime(getpid(), &start), 0);
	if (ctl_db_turn_claim(db, tenant, id, getpid(), start, &t, &err) < 0)
		fail_msg("claim %s: %s", id, al_error_message(&err));
	uint32_t n = t.n;
	ctl_turn_clear(&t);
	return n;
}

static void finish_ok(struct ctl_db *db, const char *tenant, const char *id, uint32_t n,
		      const char *ckpt, const char *agent_sid)
{
	struct al_error err = { 0 };
	struct ctl_usage u = { .input_tokens = 10, .output_tokens = 20 };
	if (ctl_db_turn_finish(db, tenant, id, n, CTL_TURN_SUCCEEDED, "", &u, ckpt, agent_sid,
			       &err) < 0)
		fail_msg("finish %s/%u: %s", id, n, al_error_message(&err));
}

static struct ctl_session get_session(struct ctl_db *db, const char *tenant, const char *id)
{
	struct ctl_session s;
	struct al_error err = { 0 };
	if (ctl_db_session_get(db, tenant, id, &s, &err) < 0)
		fail_msg("get %s: %s", id, al_error_message(&err));
	return s;
}

static struct ctl_turn get_turn(struct ctl_db *db, const char *tenant, const char *id, uint32_t n)
{
	struct ctl_turn t;
	struct al_error err = { 0 };
	if (ctl_db_turn_get(db, tenant, id, n, &t, &err) < 0)
		fail_msg("turn %s/%u: %s", id, n, al_error_message(&err));
	return t;
}

static enum ctl_turn_state turn_state(struct ctl_db *db, const char *tenant, const char *id,
				      uint32_t n)
{
	struct ctl_turn t = get_turn(db, tenant, id, n);
	ctl_turn_clear(&t);
	return t.state;
}

/* One integer from SQL run on the file directly (not through db.c). */
static int64_t sql_int(const char *sql)
{
	sqlite3 *s = NULL;
	assert_int_equal(sqlite3_open_v2(dbpath, &s, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s, sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(s));
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	int64_t v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(s);
	return v;
}

static void sql_exec(const char *sql)
{
	sqlite3 *s = NULL;
	assert_int_equal(sqlite3_open_v2(dbpath, &s, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	if (sqlite3_exec(s, sql, NULL, NULL, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(s));
	sqlite3_close(s);
}

/* Rows of table whose session column is id. */
static int64_t rows_of(const char *table, const char *id)
{
	char sql[256];
	snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s WHERE %s = '%s'", table,
		 strcmp(table, "sessions") == 0 ? "id" : "session", id);
	return sql_int(sql);
}

/*
 * fork() for the tests: the child gets the default actions back for the
 * signals cmocka catches, so that a crash in a child kills the child
 * (and its parent sees it) instead of jumping back into cmocka's runner
 * and running the remaining tests, and their teardowns, a second time.
 */
static pid_t test_fork(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS };
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], SIG_DFL);
	}
	return pid;
}

static void wait_child(pid_t pid, int *status)
{
	while (waitpid(pid, status, 0) < 0)
		assert_int_equal(errno, EINTR);
}

/* ---- opening ---- */

static void test_tenant_valid(void **state)
{
	assert_true(ctl_tenant_valid("acme"));
	assert_true(ctl_tenant_valid("Acme.Corp_1-x"));
	char max[CTL_TENANT_MAX + 2];
	memset(max, 'a', CTL_TENANT_MAX);
	max[CTL_TENANT_MAX] = '\0';
	assert_true(ctl_tenant_valid(max));
	max[CTL_TENANT_MAX] = 'a';
	max[CTL_TENANT_MAX + 1] = '\0';
	assert_false(ctl_tenant_valid(max));
	assert_false(ctl_tenant_valid(NULL));
	assert_false(ctl_tenant_valid(""));
	assert_false(ctl_tenant_valid("."));
	assert_false(ctl_tenant_valid(".."));
	assert_false(ctl_tenant_valid("a/b"));
	assert_false(ctl_tenant_valid("a b"));
	assert_false(ctl_tenant_valid("a%"));
	assert_false(ctl_tenant_valid("caf\xc3\xa9"));
}

static void test_open_create_reopen(void **state)
{
	mode_t old = umask(022);
	struct ctl_db *db = open_ok();
	umask(old);
	struct stat st;
	assert_int_equal(stat(dbpath, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0600);
	char dir[160];
	snprintf(dir, sizeof(dir), "%s/state/ctl", tmpdir);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	snprintf(dir, sizeof(dir), "%s/state", tmpdir);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);

	char id[CTL_ID_LEN + 1];
	sid(id, 1);
	add_session(db, "t1", id);
	ctl_db_close(db);

	/* The schema is at the last migration, in WAL mode. */
	assert_int_equal(sql_int("PRAGMA user_version"), 1);
	assert_int_equal(sql_int("SELECT COUNT(*) FROM sqlite_schema WHERE name IN "
				 "('sessions', 'turns', 'events', 'checkpoints')"),
			 4);
	sqlite3 *s = NULL;
	assert_int_equal(sqlite3_open(dbpath, &s), SQLITE_OK);
	sqlite3_stmt *q = NULL;
	assert_int_equal(sqlite3_prepare_v2(s, "PRAGMA journal_mode", -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(q, 0), "wal");
	sqlite3_finalize(q);
	sqlite3_close(s);

	/* Reopened: nothing migrated again, the data is there. */
	db = open_ok();
	struct ctl_session got = get_session(db, "t1", id);
	assert_string_equal(got.preset, "default");
	assert_string_equal(got.grant, "github:owner/repo");
	assert_int_equal(got.state, CTL_SESSION_ACTIVE);
	assert_true(got.created > 0);
	assert_int_equal(got.turns, 0);
	ctl_db_close(db);
	assert_int_equal(sql_int("PRAGMA user_version"), 1);
}

/* A file that exists but is empty (version 0) is migrated. */
static void test_open_migrates_empty_file(void **state)
{
	struct ctl_db *db = open_ok(); /* makes the directories */
	ctl_db_close(db);
	assert_int_equal(unlink(dbpath), 0);
	char wal[160];
	snprintf(wal, sizeof(wal), "%s-wal", dbpath);
	unlink(wal);
	snprintf(wal, sizeof(wal), "%s-shm", dbpath);
	unlink(wal);
	FILE *f = fopen(dbpath, "w");
	assert_non_null(f);
	fclose(f);
	db = open_ok();
	ctl_db_close(db);
	assert_int_equal(sql_int("PRAGMA user_version"), 1);
}

static void test_open_future_version_refused(void **state)
{
	struct ctl_db *db = open_ok();
	ctl_db_close(db);
	sql_exec("PRAGMA user_version = 99");
	struct al_error err = { 0 };
	db = NULL;
	assert_int_equal(ctl_db_open(dbpath, &db, &err), -EPROTONOSUPPORT);
	assert_null(db);
	assert_non_null(strstr(err.msg, "schema version 99"));
	assert_non_null(strstr(err.msg, "newer"));
	/* Left as it was. */
	assert_int_equal(sql_int("PRAGMA user_version"), 99);
}

static void test_open_refuses_links_and_others(void **state)
{
	struct ctl_db *db = open_ok();
	ctl_db_close(db);
	char link[160];
	snprintf(link, sizeof(link), "%s/link.db", tmpdir);
	assert_int_equal(symlink(dbpath, link), 0);
	struct al_error err = { 0 };
	assert_int_equal(ctl_db_open(link, &db, &err), -ELOOP);
	assert_non_null(strstr(err.msg, "symbolic link"));

	/* A dangling one is not created through either. */
	char dangling[160], target[160];
	snprintf(dangling, sizeof(dangling), "%s/dangling.db", tmpdir);
	snprintf(target, sizeof(target), "%s/elsewhere.db", tmpdir);
	assert_int_equal(symlink(target, dangling), 0);
	al_error_clear(&err);
	assert_int_equal(ctl_db_open(dangling, &db, &err), -ELOOP);
	struct stat st;
	assert_int_equal(lstat(target, &st), -1);

	char fifo[160];
	snprintf(fifo, sizeof(fifo), "%s/fifo.db", tmpdir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	al_error_clear(&err);
	assert_int_equal(ctl_db_open(fifo, &db, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "not a regular file"));

	al_error_clear(&err);
	assert_int_equal(ctl_db_open(tmpdir, &db, &err), -EINVAL);

	/* A file where a directory should be. */
	char under[160];
	snprintf(under, sizeof(under), "%s/sub/x.db", dbpath);
	al_error_clear(&err);
	assert_int_equal(ctl_db_open(under, &db, &err), -ENOTDIR);

	/* Not a database. */
	char junk[160];
	snprintf(junk, sizeof(junk), "%s/junk.db", tmpdir);
	FILE *f = fopen(junk, "w");
	assert_non_null(f);
	for (int i = 0; i < 512; i++)
		fputs("not a database ", f);
	fclose(f);
	al_error_clear(&err);
	assert_true(ctl_db_open(junk, &db, &err) < 0);
	assert_non_null(strstr(err.msg, "control database"));
}

/* Several processes opening a new database at once: one migrates, all
 * open it. */
static void test_open_concurrent(void **state)
{
	enum { N = 4 };
	pid_t pids[N];
	for (int i = 0; i < N; i++) {
		pids[i] = test_fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			struct ctl_db *db = NULL;
			struct al_error err = { 0 };
			if (ctl_db_open(dbpath, &db, &err) < 0) {
				fprintf(stderr, "child: %s\n", al_error_message(&err));
				_exit(1);
			}
			char id[CTL_ID_LEN + 1];
			sid(id, 100 + (uint64_t)i);
			struct ctl_session s = { 0 };
			snprintf(s.id, sizeof(s.id), "%s", id);
			snprintf(s.tenant, sizeof(s.tenant), "t");
			if (ctl_db_session_insert(db, &s, &err) < 0) {
				fprintf(stderr, "child: %s\n", al_error_message(&err));
				_exit(1);
			}
			ctl_db_close(db);
			_exit(0);
		}
	}
	/* All waited for before any assert: a failure tears the directory
	 * down, which must not happen under children still running. */
	int status[N];
	for (int i = 0; i < N; i++)
		wait_child(pids[i], &status[i]);
	for (int i = 0; i < N; i++) {
		assert_true(WIFEXITED(status[i]));
		assert_int_equal(WEXITSTATUS(status[i]), 0);
	}
	assert_int_equal(sql_int("SELECT COUNT(*) FROM sessions"), N);
	assert_int_equal(sql_int("PRAGMA user_version"), 1);
}

/* ---- sessions ---- */

struct idlist {
	char ids[8][CTL_ID_LEN + 1];
	int n;
};

static int collect_session(const struct ctl_session *s, void *ud)
{
	struct idlist *l = ud;
	if (l->n < 8)
		snprintf(l->ids[l->n], CTL_ID_LEN + 1, "%s", s->id);
	l->n++;
	return 0;
}

static int stop_at_first(const struct ctl_session *s, void *ud)
{
	(*(int *)ud)++;
	return 42;
}

static void test_session_basics(void **state)
{
	struct ctl_db *db = open_ok();
	char a[CTL_ID_LEN + 1], b[CTL_ID_LEN + 1];
	sid(a, 0xa1);
	sid(b, 0xb2);
	add_session(db, "t", a);
	usleep(2000); /* created differs: the list is newest first */
	add_session(db, "t", b);

	struct al_error err = { 0 };
	struct ctl_session s = { 0 };
	snprintf(s.id, sizeof(s.id), "%s", a);
	snprintf(s.tenant, sizeof(s.tenant), "t");
	assert_int_equal(ctl_db_session_insert(db, &s, &err), -EEXIST);
	char taken[AL_ERROR_MSG_MAX];
	snprintf(taken, sizeof(taken), "%s", err.msg);
	/* Another tenant's id: the same answer, in the same words. */
	snprintf(s.tenant, sizeof(s.tenant), "other");
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_insert(db, &s, &err), -EEXIST);
	assert_string_equal(err.msg, taken);

	struct idlist l = { 0 };
	assert_int_equal(ctl_db_session_list(db, "t", collect_session, &l, &err), 0);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.ids[0], b);
	assert_string_equal(l.ids[1], a);
	int calls = 0;
	assert_int_equal(ctl_db_session_list(db, "t", stop_at_first, &calls, &err), 42);
	assert_int_equal(calls, 1);
	l.n = 0;
	assert_int_equal(ctl_db_session_list(db, "nobody", collect_session, &l, &err), 0);
	assert_int_equal(l.n, 0);

	char ck[CTL_CKPT_HEX + 1];
	ckid(ck, 7);
	assert_int_equal(ctl_db_session_set_sandbox(db, "t", a, "0123456789abcdef", ck, &err), 0);
	struct ctl_session got = get_session(db, "t", a);
	assert_string_equal(got.tenant, "t");
	assert_string_equal(got.agent, "claude");
	assert_string_equal(got.source, "/src/project");
	assert_string_equal(got.sandbox_id, "0123456789abcdef");
	assert_string_equal(got.sandbox_checkpoint, ck);
	assert_true(got.updated >= got.created);
	assert_int_equal(ctl_db_session_set_sandbox(db, "t", a, "", "", &err), 0);
	got = get_session(db, "t", a);
	assert_string_equal(got.sandbox_id, "");
	assert_string_equal(got.sandbox_checkpoint, "");

	assert_int_equal(ctl_db_session_set_state(db, "t", a, CTL_SESSION_DELETING, &err), 0);
	got = get_session(db, "t", a);
	assert_int_equal(got.state, CTL_SESSION_DELETING);
	assert_int_equal(get_session(db, "t", b).state, CTL_SESSION_ACTIVE);
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_set_state(db, "t", a, (enum ctl_session_state)7, &err),
			 -EINVAL);

	/* forked_from, last_checkpoint and agent_session as given. */
	char c[CTL_ID_LEN + 1], ck2[CTL_CKPT_HEX + 1];
	sid(c, 0xc3);
	ckid(ck2, 8);
	memset(&s, 0, sizeof(s));
	snprintf(s.id, sizeof(s.id), "%s", c);
	snprintf(s.tenant, sizeof(s.tenant), "t");
	snprintf(s.forked_from, sizeof(s.forked_from), "%s", ck);
	snprintf(s.last_checkpoint, sizeof(s.last_checkpoint), "%s", ck2);
	snprintf(s.agent_session, sizeof(s.agent_session), "kept-for-a-fork");
	s.turns = 9;
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_insert(db, &s, &err), 0);
	got = get_session(db, "t", c);
	assert_string_equal(got.forked_from, ck);
	assert_string_equal(got.last_checkpoint, ck2);
	/* A fork starts with the agent's session as of its checkpoint. */
	assert_string_equal(got.agent_session, "kept-for-a-fork");
	assert_int_equal(got.turns, 0);
	ctl_db_close(db);
}

static void test_prefix_lookup(void **state)
{
	struct ctl_db *db = open_ok();
	add_session(db, "t", "abcd000000000001");
	add_session(db, "t", "abcd000000000002");
	add_session(db, "t", "abce000000000000");
	add_session(db, "u", "abcf000000000000");
	struct al_error err = { 0 };
	struct ctl_session s;

	assert_string_equal(get_session(db, "t", "abce").id, "abce000000000000");
	assert_string_equal(get_session(db, "t", "ABCE0").id, "abce000000000000");
	assert_string_equal(get_session(db, "t", "abcd000000000002").id, "abcd000000000002");
	assert_string_equal(get_session(db, "t", "abce00000000000").id, "abce000000000000");

	assert_int_equal(ctl_db_session_get(db, "t", "abcd", &s, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "ambiguous"));
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_get(db, "t", "abc", &s, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "too short"));
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_get(db, "t", "", &s, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_get(db, "t", "abcz", &s, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "hex"));
	/* LIKE's wildcards are no wildcards. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_get(db, "t", "abc%", &s, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_get(db, "t", "ab_d", &s, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_get(db, "t", "abcd0000000000010", &s, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_get(db, "t", "ffff", &s, &err), -ENOENT);
	assert_string_equal(err.msg, "session ffff not found");
	/* Another tenant's: not found, not ambiguous, whatever the prefix. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_get(db, "t", "abcf", &s, &err), -ENOENT);
	assert_string_equal(err.msg, "session abcf not found");
	assert_string_equal(get_session(db, "u", "abcf").id, "abcf000000000000");
	/* Another tenant's ids neither match nor make a prefix ambiguous. */
	add_session(db, "u", "abce000000000001");
	assert_string_equal(get_session(db, "t", "abce").id, "abce000000000000");
	assert_string_equal(get_session(db, "u", "abce").id, "abce000000000001");
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_get(db, "u", "abcd", &s, &err), -ENOENT);
	al_error_clear(&err);

	/* Checkpoints the same way. */
	char c1[CTL_CKPT_HEX + 1], c2[CTL_CKPT_HEX + 1], c3[CTL_CKPT_HEX + 1];
	memset(c1, '0', CTL_CKPT_HEX);
	c1[CTL_CKPT_HEX] = '\0';
	memcpy(c2, c1, sizeof(c1));
	memcpy(c3, c1, sizeof(c1));
	memcpy(c1, "beef1", 5);
	memcpy(c2, "beef2", 5);
	memcpy(c3, "cafe1", 5);
	assert_int_equal(ctl_db_checkpoint_add(db, "t", "abce000000000000", c1, NULL, &err), 0);
	assert_int_equal(ctl_db_checkpoint_add(db, "t", "abce000000000000", c2, c1, &err), 0);
	assert_int_equal(ctl_db_checkpoint_add(db, "t", "abcd000000000001", c3, "", &err), 0);
	struct ctl_checkpoint c;
	assert_int_equal(ctl_db_checkpoint_get(db, "t", "beef2", &c, &err), 0);
	assert_string_equal(c.id, c2);
	assert_string_equal(c.parent, c1);
	assert_string_equal(c.session, "abce000000000000");
	assert_int_equal(c.turn, 0);
	assert_int_equal(ctl_db_checkpoint_get(db, "t", "CAFE", &c, &err), 0);
	assert_string_equal(c.id, c3);
	assert_int_equal(ctl_db_checkpoint_get(db, "t", c1, &c, &err), 0);
	assert_string_equal(c.id, c1);
	assert_int_equal(ctl_db_checkpoint_get(db, "t", "beef", &c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "ambiguous"));
	al_error_clear(&err);
	assert_int_equal(ctl_db_checkpoint_get(db, "t", "bee", &c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "too short"));
	al_error_clear(&err);
	assert_int_equal(ctl_db_checkpoint_get(db, "t", "beefx", &c, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_checkpoint_get(db, "t", "dead", &c, &err), -ENOENT);
	assert_string_equal(err.msg, "checkpoint dead not found");
	al_error_clear(&err);
	assert_int_equal(ctl_db_checkpoint_get(db, "u", "beef1", &c, &err), -ENOENT);
	assert_string_equal(err.msg, "checkpoint beef1 not found");
	/* The session's last one. */
	assert_string_equal(get_session(db, "t", "abce").last_checkpoint, c2);
	/* Recorded twice for one session: refused. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_checkpoint_add(db, "t", "abce000000000000", c1, NULL, &err),
			 -EEXIST);
	ctl_db_close(db);
}

/* ---- tenant isolation ---- */

#define PROBES 18

struct answer {
	int code;
	char msg[AL_ERROR_MSG_MAX];
};

static int count_session(const struct ctl_session *s, void *ud)
{
	(*(int *)ud)++;
	return 0;
}

static int count_turn(const struct ctl_turn *t, void *ud)
{
	(*(int *)ud)++;
	return 0;
}

static int count_event(const struct ctl_event_row *e, void *ud)
{
	(*(int *)ud)++;
	return 0;
}

static int count_ckpt(const struct ctl_checkpoint *c, void *ud)
{
	(*(int *)ud)++;
	return 0;
}

/* Every getter, list and mutator on session id (and checkpoint ck) as
 * tenant; each answer recorded. No callback may run. */
static void probe_all(struct ctl_db *db, const char *tenant, const char *id, const char *ck,
		      struct answer out[PROBES])
{
	struct al_error e[PROBES];
	memset(e, 0, sizeof(e));
	int r[PROBES];
	int calls = 0;
	struct ctl_session s;
	struct ctl_turn t = { 0 };
	struct ctl_checkpoint c;
	struct ctl_usage u = { 0 };
	uint32_t n = 0;
	uint64_t seq = 0;
	char prefix[8], ckprefix[8], newck[CTL_CKPT_HEX + 1];
	snprintf(prefix, sizeof(prefix), "%.6s", id);
	snprintf(ckprefix, sizeof(ckprefix), "%.6s", ck);
	ckid(newck, 0xfeed);

	r[0] = ctl_db_session_get(db, tenant, id, &s, &e[0]);
	r[1] = ctl_db_session_get(db, tenant, prefix, &s, &e[1]);
	r[2] = ctl_db_session_set_sandbox(db, tenant, id, "sbx", "", &e[2]);
	r[3] = ctl_db_session_set_state(db, tenant, id, CTL_SESSION_DELETING, &e[3]);
	r[4] = ctl_db_turn_queue(db, tenant, id, "hello", &n, &e[4]);
	r[5] = ctl_db_turn_claim(db, tenant, id, getpid(), 1, &t, &e[5]);
	ctl_turn_clear(&t);
	r[6] = ctl_db_turn_finish(db, tenant, id, 1, CTL_TURN_SUCCEEDED, "", &u, newck, "x", &e[6]);
	r[7] = ctl_db_turn_cancel(db, tenant, id, 0, "no", &n, &e[7]);
	r[8] = ctl_db_turn_cancel(db, tenant, id, 1, "no", &n, &e[8]);
	r[9] = ctl_db_turn_get(db, tenant, id, 1, &t, &e[9]);
	ctl_turn_clear(&t);
	r[10] = ctl_db_turn_list(db, tenant, id, count_turn, &calls, &e[10]);
	r[11] = ctl_db_event_append(db, tenant, id, 1, "text", "{}", &seq, &e[11]);
	r[12] = ctl_db_event_list(db, tenant, id, 0, 0, count_event, &calls, &e[12]);
	r[13] = ctl_db_checkpoint_add(db, tenant, id, newck, "", &e[13]);
	r[14] = ctl_db_checkpoint_get(db, tenant, ck, &c, &e[14]);
	r[15] = ctl_db_checkpoint_get(db, tenant, ckprefix, &c, &e[15]);
	r[16] = ctl_db_checkpoint_list(db, tenant, id, count_ckpt, &calls, &e[16]);
	r[17] = ctl_db_session_delete(db, tenant, id, &e[17]);
	for (int i = 0; i < PROBES; i++) {
		out[i].code = r[i];
		snprintf(out[i].msg, sizeof(out[i].msg), "%s", e[i].msg);
		if (r[i] != -ENOENT)
			fail_msg("probe %d: %d (%s)", i, r[i], e[i].msg);
	}
	assert_int_equal(calls, 0);
	int listed = 0;
	assert_int_equal(ctl_db_session_list(db, tenant, count_session, &listed, &e[0]), 0);
	assert_int_equal(listed, 0);
}

static int collect_seq(const struct ctl_event_row *e, void *ud)
{
	uint64_t *v = ud;
	v[v[0] + 1] = e->seq;
	v[0]++;
	return 0;
}

static void test_event_batches(void **state)
{
	struct ctl_db *db = open_ok();
	char id[CTL_ID_LEN + 1];
	sid(id, 0xba7c);
	add_session(db, "alice", id);
	assert_int_equal(queue_ok(db, "alice", id, "p1"), 1);
	assert_int_equal(claim_ok(db, "alice", id), 1);
	struct al_error err = { 0 };
	uint64_t first = 0;
	assert_int_equal(ctl_db_event_append(db, "alice", id, 1, "text", "{}", &first, &err), 0);
	assert_int_equal(first, 1);
	struct ctl_event_in ev[3] = { { "text", "{\"text\":\"a\"}" },
				      { "tool_call", "{}" },
				      { "usage", "{}" } };
	assert_int_equal(ctl_db_event_append_many(db, "alice", id, 1, ev, 3, &first, &err), 0);
	assert_int_equal(first, 2);
	/* One bad event refuses the whole batch: nothing of it is stored. */
	struct ctl_event_in bad[2] = { { "text", "{}" }, { "Bad Kind", "{}" } };
	assert_int_equal(ctl_db_event_append_many(db, "alice", id, 1, bad, 2, &first, &err),
			 -EINVAL);
	assert_int_equal(ctl_db_event_append_many(db, "alice", id, 1, ev, 0, &first, &err),
			 -EINVAL);
	assert_int_equal(ctl_db_event_append_many(db, "alice", id, 1, ev, CTL_EVENTS_BATCH_MAX + 1,
						  &first, &err),
			 -EINVAL);
	/* Another tenant's session, or a turn that is not there: refused. */
	assert_int_equal(ctl_db_event_append_many(db, "mallory", id, 1, ev, 3, &first, &err),
			 -ENOENT);
	assert_int_equal(ctl_db_event_append_many(db, "alice", id, 9, ev, 3, &first, &err),
			 -ENOENT);
	uint64_t seqs[8] = { 0 };
	assert_int_equal(ctl_db_event_list(db, "alice", id, 0, 0, collect_seq, seqs, &err), 0);
	assert_int_equal(seqs[0], 4);
	for (uint64_t i = 1; i <= 4; i++)
		assert_int_equal(seqs[i], i);
	ctl_db_close(db);
}

static void test_cancel_current(void **state)
{
	struct ctl_db *db = open_ok();
	char id[CTL_ID_LEN + 1], sbx[CTL_SANDBOX_ID_MAX + 1];
	sid(id, 0xca9c);
	add_session(db, "alice", id);
	struct al_error err = { 0 };
	uint32_t n = 0;
	/* Nothing to cancel. */
	assert_int_equal(ctl_db_turn_cancel_take(db, "alice", id, CTL_TURN_CURRENT, "c", &n, sbx,
						 sizeof(sbx), &err),
			 -ENOENT);
	assert_int_equal(queue_ok(db, "alice", id, "p1"), 1);
	assert_int_equal(queue_ok(db, "alice", id, "p2"), 2);
	assert_int_equal(queue_ok(db, "alice", id, "p3"), 3);
	assert_int_equal(claim_ok(db, "alice", id), 1);
	/* The running one first, then the first queued, not the latest. */
	assert_int_equal(ctl_db_turn_cancel_take(db, "alice", id, CTL_TURN_CURRENT, "c", &n, sbx,
						 sizeof(sbx), &err),
			 0);
	assert_int_equal(n, 1);
	assert_int_equal(ctl_db_turn_cancel_take(db, "alice", id, CTL_TURN_CURRENT, "c", &n, sbx,
						 sizeof(sbx), &err),
			 0);
	assert_int_equal(n, 2);
	assert_int_equal(turn_state(db, "alice", id, 3), CTL_TURN_QUEUED);
	ctl_db_close(db);
}

static void test_tenant_isolation(void **state)
{
	struct ctl_db *db = open_ok();
	char id[CTL_ID_LEN + 1], ck[CTL_CKPT_HEX + 1];
	sid(id, 0x5eed);
	ckid(ck, 0xabc);
	add_session(db, "alice", id);
	assert_int_equal(queue_ok(db, "alice", id, "p1"), 1);
	assert_int_equal(claim_ok(db, "alice", id), 1);
	struct al_error err = { 0 };
	assert_int_equal(ctl_db_event_append(db, "alice", id, 1, "text", "{\"text\":\"hi\"}", NULL,
					     &err),
			 0);
	finish_ok(db, "alice", id, 1, ck, "agent-1");
	assert_int_equal(queue_ok(db, "alice", id, "p2"), 2);
	assert_int_equal(claim_ok(db, "alice", id), 2);

	struct answer other[PROBES], gone[PROBES], own_gone[PROBES];
	probe_all(db, "mallory", id, ck, other);

	/* Nothing of alice's changed. */
	struct ctl_session s = get_session(db, "alice", id);
	assert_int_equal(s.state, CTL_SESSION_ACTIVE);
	assert_string_equal(s.sandbox_id, "");
	assert_string_equal(s.last_checkpoint, ck);
	assert_string_equal(s.agent_session, "agent-1");
	assert_int_equal(s.turns, 2);
	assert_int_equal(turn_state(db, "alice", id, 1), CTL_TURN_SUCCEEDED);
	assert_int_equal(turn_state(db, "alice", id, 2), CTL_TURN_RUNNING);
	assert_int_equal(rows_of("events", id), 1);
	assert_int_equal(rows_of("checkpoints", id), 1);
	assert_int_equal(rows_of("turns", id), 2);

	/* Once the session is gone, mallory and alice get exactly what
	 * mallory got while it was there. */
	assert_int_equal(ctl_db_session_delete(db, "alice", id, &err), 0);
	probe_all(db, "mallory", id, ck, gone);
	probe_all(db, "alice", id, ck, own_gone);
	for (int i = 0; i < PROBES; i++) {
		assert_int_equal(other[i].code, gone[i].code);
		assert_string_equal(other[i].msg, gone[i].msg);
		assert_int_equal(other[i].code, own_gone[i].code);
		assert_string_equal(other[i].msg, own_gone[i].msg);
	}
	char want[64];
	snprintf(want, sizeof(want), "session %s not found", id);
	assert_string_equal(other[0].msg, want);
	ctl_db_close(db);
}

/* ---- turns ---- */

struct turnlist {
	uint32_t n[16];
	enum ctl_turn_state state[16];
	int count;
};

static int collect_turn(const struct ctl_turn *t, void *ud)
{
	struct turnlist *l = ud;
	if (l->count < 16) {
		l->n[l->count] = t->n;
		l->state[l->count] = t->state;
	}
	l->count++;
	return 0;
}

static void test_turn_state_machine(void **state)
{
	struct ctl_db *db = open_ok();
	char id[CTL_ID_LEN + 1], other[CTL_ID_LEN + 1];
	char c1[CTL_CKPT_HEX + 1], c2[CTL_CKPT_HEX + 1], c4[CTL_CKPT_HEX + 1];
	sid(id, 1);
	sid(other, 2);
	ckid(c1, 1);
	ckid(c2, 2);
	ckid(c4, 4);
	add_session(db, "t", id);
	add_session(db, "t", other);
	struct al_error err = { 0 };
	struct ctl_turn t = { 0 };

	assert_int_equal(queue_ok(db, "t", id, "one"), 1);
	assert_int_equal(queue_ok(db, "t", id, "two"), 2);
	assert_int_equal(queue_ok(db, "t", id, "three"), 3);
	/* Numbers are per session. */
	assert_int_equal(queue_ok(db, "t", other, "other one"), 1);
	assert_int_equal(get_session(db, "t", id).turns, 3);

	t = get_turn(db, "t", id, 2);
	assert_int_equal(t.state, CTL_TURN_QUEUED);
	assert_string_equal(t.prompt, "two");
	assert_true(t.queued_at > 0);
	assert_int_equal(t.started_at, 0);
	ctl_turn_clear(&t);

	/* Finishing a queued turn is not a thing. */
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_SUCCEEDED, "", NULL, c1, "",
					    &err),
			 -EINVAL);
	assert_int_equal(turn_state(db, "t", id, 1), CTL_TURN_QUEUED);

	/* The oldest queued one is claimed, with its runner. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_claim(db, "t", id, 4242, 777, &t, &err), 0);
	assert_int_equal(t.n, 1);
	assert_int_equal(t.state, CTL_TURN_RUNNING);
	assert_string_equal(t.prompt, "one");
	assert_string_equal(t.session, id);
	assert_string_equal(t.tenant, "t");
	assert_int_equal(t.runner_pid, 4242);
	assert_int_equal(t.runner_start, 777);
	assert_true(t.started_at >= t.queued_at);
	ctl_turn_clear(&t);
	/* One running per session. */
	assert_int_equal(ctl_db_turn_claim(db, "t", id, 4242, 777, &t, &err), -EBUSY);
	assert_non_null(strstr(err.msg, "running"));
	/* Another session's is independent. */
	assert_int_equal(claim_ok(db, "t", other), 1);

	/* Only succeeded or failed end a turn. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_CANCELLED, "", NULL, "", "",
					    &err),
			 -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_RUNNING, "", NULL, "", "",
					    &err),
			 -EINVAL);

	/* Success: turn, checkpoint row, session, all at once. */
	struct ctl_usage u = { .input_tokens = 100,
			       .output_tokens = 200,
			       .cache_read_tokens = 3,
			       .cache_write_tokens = UINT64_MAX,
			       .cost_usd = 0.125,
			       .have_cost = true };
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_SUCCEEDED, "", &u, c1,
					    "agent-sid-1", &err),
			 0);
	t = get_turn(db, "t", id, 1);
	assert_int_equal(t.state, CTL_TURN_SUCCEEDED);
	assert_string_equal(t.checkpoint, c1);
	assert_int_equal(t.usage.input_tokens, 100);
	assert_int_equal(t.usage.output_tokens, 200);
	assert_int_equal(t.usage.cache_read_tokens, 3);
	assert_true(t.usage.cache_write_tokens == UINT64_MAX);
	assert_true(t.usage.have_cost);
	assert_true(t.usage.cost_usd == 0.125);
	assert_true(t.ended_at >= t.started_at);
	assert_string_equal(t.late_outcome, "");
	ctl_turn_clear(&t);
	struct ctl_session s = get_session(db, "t", id);
	assert_string_equal(s.last_checkpoint, c1);
	assert_string_equal(s.agent_session, "agent-sid-1");
	struct ctl_checkpoint c;
	assert_int_equal(ctl_db_checkpoint_get(db, "t", c1, &c, &err), 0);
	assert_int_equal(c.turn, 1);
	assert_string_equal(c.session, id);
	assert_string_equal(c.parent, "");

	/* Terminal stays terminal: a second finish is ignored, recorded. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_FAILED, "late", NULL, "", "",
					    &err),
			 -EALREADY);
	t = get_turn(db, "t", id, 1);
	assert_int_equal(t.state, CTL_TURN_SUCCEEDED);
	assert_string_equal(t.reason, "");
	assert_string_equal(t.late_outcome, "failed");
	ctl_turn_clear(&t);

	/* Claim order: 2 before 3. */
	assert_int_equal(claim_ok(db, "t", id), 2);
	/* Cancel with n 0: the latest non-terminal one (3, queued). */
	uint32_t n = 0;
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_cancel(db, "t", id, 0, "changed my mind", &n, &err), 0);
	assert_int_equal(n, 3);
	t = get_turn(db, "t", id, 3);
	assert_int_equal(t.state, CTL_TURN_CANCELLED);
	assert_string_equal(t.reason, "changed my mind");
	assert_true(t.ended_at > 0);
	ctl_turn_clear(&t);

	/* Cancel the running one; its late success is ignored but recorded. */
	assert_int_equal(ctl_db_turn_cancel(db, "t", id, 2, "stop", &n, &err), 0);
	assert_int_equal(n, 2);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 2, CTL_TURN_SUCCEEDED, "", &u, c2,
					    "agent-sid-2", &err),
			 -EALREADY);
	assert_non_null(strstr(err.msg, "cancelled"));
	t = get_turn(db, "t", id, 2);
	assert_int_equal(t.state, CTL_TURN_CANCELLED);
	assert_string_equal(t.reason, "stop");
	assert_string_equal(t.late_outcome, "succeeded");
	assert_string_equal(t.checkpoint, "");
	assert_int_equal(t.usage.input_tokens, 0);
	assert_int_equal(t.runner_pid, getpid()); /* kept: the canceller stops it */
	ctl_turn_clear(&t);
	s = get_session(db, "t", id);
	assert_string_equal(s.last_checkpoint, c1);
	assert_string_equal(s.agent_session, "agent-sid-1");
	al_error_clear(&err);
	assert_int_equal(ctl_db_checkpoint_get(db, "t", c2, &c, &err), -ENOENT);

	/* Nothing left to cancel or claim. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_cancel(db, "t", id, 2, "again", &n, &err), -ENOENT);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_cancel(db, "t", id, 0, "again", &n, &err), -ENOENT);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_cancel(db, "t", id, 9, "none", &n, &err), -ENOENT);
	al_error_clear(&err);
	/* The cancelled turn's runner (this process) still holds the session
	 * until it says it is done. */
	assert_int_equal(ctl_db_turn_claim(db, "t", id, getpid(), 1, &t, &err), -EBUSY);
	release_all(db, "t", id);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_claim(db, "t", id, getpid(), 1, &t, &err), -ENOENT);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_get(db, "t", id, 9, &t, &err), -ENOENT);
	assert_int_equal(turn_state(db, "t", id, 3), CTL_TURN_CANCELLED);

	/* A failure, with its reason, and a checkpoint kept. */
	assert_int_equal(queue_ok(db, "t", id, "four"), 4);
	assert_int_equal(claim_ok(db, "t", id), 4);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 4, CTL_TURN_FAILED, "agent crashed", NULL,
					    c4, "", &err),
			 0);
	t = get_turn(db, "t", id, 4);
	assert_int_equal(t.state, CTL_TURN_FAILED);
	assert_string_equal(t.reason, "agent crashed");
	assert_false(t.usage.have_cost);
	ctl_turn_clear(&t);
	s = get_session(db, "t", id);
	assert_string_equal(s.last_checkpoint, c4);
	assert_string_equal(s.agent_session, "agent-sid-1"); /* "" keeps it */
	assert_int_equal(ctl_db_checkpoint_get(db, "t", c4, &c, &err), 0);
	assert_string_equal(c.parent, c1);
	assert_int_equal(c.turn, 4);
	/* Cancelling a failed turn: nothing to cancel. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_cancel(db, "t", id, 4, "x", &n, &err), -ENOENT);
	assert_int_equal(turn_state(db, "t", id, 4), CTL_TURN_FAILED);

	/* Cancelling a queued turn means it is never claimed. */
	assert_int_equal(queue_ok(db, "t", id, "five"), 5);
	assert_int_equal(queue_ok(db, "t", id, "six"), 6);
	assert_int_equal(ctl_db_turn_cancel(db, "t", id, 5, "", &n, &err), 0);
	assert_int_equal(claim_ok(db, "t", id), 6);

	struct turnlist l = { 0 };
	assert_int_equal(ctl_db_turn_list(db, "t", id, collect_turn, &l, &err), 0);
	assert_int_equal(l.count, 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(l.n[i], (uint32_t)i + 1);
	assert_int_equal(l.state[0], CTL_TURN_SUCCEEDED);
	assert_int_equal(l.state[1], CTL_TURN_CANCELLED);
	assert_int_equal(l.state[2], CTL_TURN_CANCELLED);
	assert_int_equal(l.state[3], CTL_TURN_FAILED);
	assert_int_equal(l.state[4], CTL_TURN_CANCELLED);
	assert_int_equal(l.state[5], CTL_TURN_RUNNING);

	assert_string_equal(ctl_turn_state_name(CTL_TURN_QUEUED), "queued");
	assert_string_equal(ctl_turn_state_name(CTL_TURN_CANCELLED), "cancelled");
	assert_false(ctl_turn_state_terminal(CTL_TURN_RUNNING));
	assert_true(ctl_turn_state_terminal(CTL_TURN_FAILED));
	ctl_db_close(db);
}

/* ---- recovery ---- */

/* A process that has exited and been reaped, and its start time. */
static void dead_runner(int32_t *ret_pid, uint64_t *ret_start)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = test_fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[1]);
		char c;
		while (read(p[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(p[0]);
	uint64_t start = 0;
	assert_int_equal(ctl_proc_starttime(pid, &start), 0);
	close(p[1]);
	/* A zombie is no runner either. */
	for (int i = 0; i < 1000; i++) {
		uint64_t x;
		if (ctl_proc_starttime(pid, &x) == -ESRCH)
			break;
		usleep(1000);
	}
	uint64_t x;
	assert_int_equal(ctl_proc_starttime(pid, &x), -ESRCH);
	int status;
	wait_child(pid, &status);
	assert_int_equal(ctl_proc_starttime(pid, &x), -ESRCH);
	*ret_pid = pid;
	*ret_start = start;
}

static void test_recover(void **state)
{
	struct ctl_db *db = open_ok();
	char dead[CTL_ID_LEN + 1], live[CTL_ID_LEN + 1], reused[CTL_ID_LEN + 1],
		idle[CTL_ID_LEN + 1];
	char ck[CTL_CKPT_HEX + 1];
	sid(dead, 0xd);
	sid(live, 0x1);
	sid(reused, 0x2);
	sid(idle, 0x3);
	ckid(ck, 1);
	add_session(db, "t", dead);
	add_session(db, "u", live);
	add_session(db, "t", reused);
	add_session(db, "t", idle);
	struct al_error err = { 0 };
	struct ctl_turn t = { 0 };

	uint64_t self_start;
	assert_int_equal(ctl_proc_starttime(getpid(), &self_start), 0);
	int32_t dpid;
	uint64_t dstart;
	dead_runner(&dpid, &dstart);

	const char *ids[] = { dead, live, reused, idle };
	const char *tenants[] = { "t", "u", "t", "t" };
	for (int i = 0; i < 4; i++) {
		queue_ok(db, tenants[i], ids[i], "p");
		assert_int_equal(ctl_db_session_set_sandbox(db, tenants[i], ids[i],
							    "0123456789abcdef", ck, &err),
				 0);
	}
	queue_ok(db, "t", dead, "second, queued");
	assert_int_equal(ctl_db_turn_claim(db, "t", dead, dpid, dstart, &t, &err), 0);
	ctl_turn_clear(&t);
	assert_int_equal(ctl_db_turn_claim(db, "u", live, getpid(), self_start, &t, &err), 0);
	ctl_turn_clear(&t);
	/* This pid, another start time: the pid was reused. */
	assert_int_equal(ctl_db_turn_claim(db, "t", reused, getpid(), self_start + 1, &t, &err), 0);
	ctl_turn_clear(&t);

	unsigned n = 99;
	assert_int_equal(ctl_db_recover(db, NULL, NULL, &n, &err), 0);
	assert_int_equal(n, 2);

	t = get_turn(db, "t", dead, 1);
	assert_int_equal(t.state, CTL_TURN_FAILED);
	assert_string_equal(t.reason, "interrupted: airlock stopped while the turn ran");
	assert_true(t.ended_at > 0);
	ctl_turn_clear(&t);
	assert_int_equal(turn_state(db, "t", dead, 2), CTL_TURN_QUEUED);
	assert_int_equal(turn_state(db, "t", reused, 1), CTL_TURN_FAILED);
	assert_int_equal(turn_state(db, "u", live, 1), CTL_TURN_RUNNING);
	assert_int_equal(turn_state(db, "t", idle, 1), CTL_TURN_QUEUED);

	struct ctl_session s = get_session(db, "t", dead);
	assert_string_equal(s.sandbox_id, "");
	assert_string_equal(s.sandbox_checkpoint, "");
	s = get_session(db, "t", reused);
	assert_string_equal(s.sandbox_id, "");
	s = get_session(db, "u", live);
	assert_string_equal(s.sandbox_id, "0123456789abcdef");
	assert_string_equal(s.sandbox_checkpoint, ck);
	s = get_session(db, "t", idle);
	assert_string_equal(s.sandbox_id, "0123456789abcdef");

	/* The failed turn's late completion is ignored like a cancel's. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", dead, 1, CTL_TURN_SUCCEEDED, "", NULL, ck, "",
					    &err),
			 -EALREADY);
	assert_int_equal(turn_state(db, "t", dead, 1), CTL_TURN_FAILED);
	/* The session can go on. */
	assert_int_equal(claim_ok(db, "t", dead), 2);

	n = 99;
	assert_int_equal(ctl_db_recover(db, NULL, NULL, &n, &err), 0);
	assert_int_equal(n, 0);
	ctl_db_close(db);
}

/* ---- events ---- */

struct evlist {
	uint64_t seq[16];
	uint32_t turn[16];
	char kind[16][16];
	char data[16][32];
	int count;
	int stop_at;
};

static int collect_event(const struct ctl_event_row *e, void *ud)
{
	struct evlist *l = ud;
	if (l->count < 16) {
		l->seq[l->count] = e->seq;
		l->turn[l->count] = e->turn;
		snprintf(l->kind[l->count], sizeof(l->kind[0]), "%s", e->kind);
		snprintf(l->data[l->count], sizeof(l->data[0]), "%s", e->data);
		assert_true(e->at > 0);
	}
	l->count++;
	return l->count == l->stop_at ? -EINTR : 0;
}

static void test_events(void **state)
{
	struct ctl_db *db = open_ok();
	char id[CTL_ID_LEN + 1], other[CTL_ID_LEN + 1];
	sid(id, 1);
	sid(other, 2);
	add_session(db, "t", id);
	add_session(db, "t", other);
	queue_ok(db, "t", id, "a");
	queue_ok(db, "t", id, "b");
	queue_ok(db, "t", other, "c");
	struct al_error err = { 0 };
	uint64_t seq = 0;
	const char *kinds[] = { "status", "text", "tool_call", "tool_result", "usage" };
	for (int i = 0; i < 5; i++) {
		char data[32];
		snprintf(data, sizeof(data), "{\"i\":%d}", i);
		assert_int_equal(ctl_db_event_append(db, "t", id, 1, kinds[i], data, &seq, &err),
				 0);
		assert_int_equal(seq, (uint64_t)i + 1);
	}
	/* The sequence is the session's, across its turns. */
	assert_int_equal(ctl_db_event_append(db, "t", id, 2, "error", "{}", &seq, &err), 0);
	assert_int_equal(seq, 6);
	assert_int_equal(ctl_db_event_append(db, "t", other, 1, "text", "{}", &seq, &err), 0);
	assert_int_equal(seq, 1);

	struct evlist l = { 0 };
	assert_int_equal(ctl_db_event_list(db, "t", id, 0, 0, collect_event, &l, &err), 0);
	assert_int_equal(l.count, 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(l.seq[i], (uint64_t)i + 1);
	assert_string_equal(l.kind[2], "tool_call");
	assert_string_equal(l.data[2], "{\"i\":2}");
	assert_int_equal(l.turn[4], 1);
	assert_int_equal(l.turn[5], 2);

	memset(&l, 0, sizeof(l));
	assert_int_equal(ctl_db_event_list(db, "t", id, 2, 2, collect_event, &l, &err), 0);
	assert_int_equal(l.count, 2);
	assert_int_equal(l.seq[0], 3);
	assert_int_equal(l.seq[1], 4);
	memset(&l, 0, sizeof(l));
	assert_int_equal(ctl_db_event_list(db, "t", id, 4, 0, collect_event, &l, &err), 0);
	assert_int_equal(l.count, 2);
	assert_int_equal(l.seq[0], 5);
	memset(&l, 0, sizeof(l));
	assert_int_equal(ctl_db_event_list(db, "t", id, 6, 0, collect_event, &l, &err), 0);
	assert_int_equal(l.count, 0);
	assert_int_equal(ctl_db_event_list(db, "t", id, UINT64_MAX, 0, collect_event, &l, &err), 0);
	assert_int_equal(l.count, 0);
	memset(&l, 0, sizeof(l));
	l.stop_at = 3;
	assert_int_equal(ctl_db_event_list(db, "t", id, 0, 0, collect_event, &l, &err), -EINTR);
	assert_int_equal(l.count, 3);

	/* No such turn; bad kinds. */
	assert_int_equal(ctl_db_event_append(db, "t", id, 3, "text", "{}", &seq, &err), -ENOENT);
	al_error_clear(&err);
	assert_int_equal(ctl_db_event_append(db, "t", id, 0, "text", "{}", &seq, &err), -ENOENT);
	al_error_clear(&err);
	assert_int_equal(ctl_db_event_append(db, "t", id, 1, "", "{}", &seq, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_event_append(db, "t", id, 1, "Text", "{}", &seq, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_event_append(db, "t", id, 1, "te xt", "{}", &seq, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_event_append(db, "t", id, 1, "text", NULL, &seq, &err), -EINVAL);
	/* Nothing was added by the refusals. */
	assert_int_equal(rows_of("events", id), 6);
	ctl_db_close(db);
}

/* ---- deletion ---- */

static void test_session_delete(void **state)
{
	struct ctl_db *db = open_ok();
	char a[CTL_ID_LEN + 1], b[CTL_ID_LEN + 1], fork_id[CTL_ID_LEN + 1];
	char ca[CTL_CKPT_HEX + 1], cb[CTL_CKPT_HEX + 1], start[CTL_CKPT_HEX + 1];
	sid(a, 0xa);
	sid(b, 0xb);
	sid(fork_id, 0xf);
	ckid(ca, 0xa);
	ckid(cb, 0xb);
	ckid(start, 0x5);
	struct al_error err = { 0 };
	const char *ids[] = { a, b };
	const char *cks[] = { ca, cb };
	for (int i = 0; i < 2; i++) {
		add_session(db, "t", ids[i]);
		assert_int_equal(ctl_db_checkpoint_add(db, "t", ids[i], i ? cb : start, "", &err),
				 0);
		if (i == 0) {
			queue_ok(db, "t", ids[i], "x");
			claim_ok(db, "t", ids[i]);
			assert_int_equal(ctl_db_event_append(db, "t", ids[i], 1, "text", "{}", NULL,
							     &err),
					 0);
			finish_ok(db, "t", ids[i], 1, cks[i], "s");
			queue_ok(db, "t", ids[i], "y");
		} else {
			queue_ok(db, "t", ids[i], "x");
			assert_int_equal(ctl_db_event_append(db, "t", ids[i], 1, "text", "{}", NULL,
							     &err),
					 0);
		}
	}
	/* A fork of a starts from a's starting point: its own row. */
	add_session(db, "t", fork_id);
	assert_int_equal(ctl_db_checkpoint_add(db, "t", fork_id, start, "", &err), 0);
	struct ctl_checkpoint c;
	assert_int_equal(ctl_db_checkpoint_get(db, "t", start, &c, &err), 0);
	assert_string_equal(c.session, a); /* the first one recorded */
	int count = 0;
	assert_int_equal(ctl_db_checkpoint_list(db, "t", a, count_ckpt, &count, &err), 0);
	assert_int_equal(count, 2);

	assert_int_equal(rows_of("turns", a), 2);
	assert_int_equal(rows_of("events", a), 1);
	assert_int_equal(rows_of("checkpoints", a), 2);

	assert_int_equal(ctl_db_session_delete(db, "t", a, &err), 0);
	assert_int_equal(rows_of("sessions", a), 0);
	assert_int_equal(rows_of("turns", a), 0);
	assert_int_equal(rows_of("events", a), 0);
	assert_int_equal(rows_of("checkpoints", a), 0);
	/* The others are whole. */
	assert_int_equal(rows_of("sessions", b), 1);
	assert_int_equal(rows_of("turns", b), 1);
	assert_int_equal(rows_of("events", b), 1);
	assert_int_equal(rows_of("checkpoints", b), 1);
	assert_int_equal(rows_of("checkpoints", fork_id), 1);
	assert_int_equal(ctl_db_checkpoint_get(db, "t", start, &c, &err), 0);
	assert_string_equal(c.session, fork_id);
	al_error_clear(&err);
	assert_int_equal(ctl_db_checkpoint_get(db, "t", ca, &c, &err), -ENOENT);
	count = 0;
	assert_int_equal(ctl_db_turn_list(db, "t", b, count_turn, &count, &err), 0);
	assert_int_equal(count, 1);

	al_error_clear(&err);
	assert_int_equal(ctl_db_session_delete(db, "t", a, &err), -ENOENT);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_list(db, "t", a, count_turn, &count, &err), -ENOENT);
	/* Nothing of the old one is left to collide with: the id can be
	 * inserted again, and its turns start at 1. */
	add_session(db, "t", a);
	assert_int_equal(queue_ok(db, "t", a, "again"), 1);
	ctl_db_close(db);
}

/* ---- bounds ---- */

static char *filled(size_t n, char c)
{
	char *s = malloc(n + 1);
	assert_non_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static void test_bounds(void **state)
{
	struct ctl_db *db = open_ok();
	char id[CTL_ID_LEN + 1], ck[CTL_CKPT_HEX + 1];
	sid(id, 1);
	ckid(ck, 1);
	add_session(db, "t", id);
	struct al_error err = { 0 };
	uint32_t n;

	/* Session fields. */
	struct ctl_session s = { 0 };
	sid(s.id, 2);
	snprintf(s.tenant, sizeof(s.tenant), "t");
	memset(s.preset, 'p', sizeof(s.preset)); /* not terminated: too long */
	assert_int_equal(ctl_db_session_insert(db, &s, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "preset"));
	memset(s.preset, 0, sizeof(s.preset));
	memset(s.preset, 'p', CTL_NAME_MAX);
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_insert(db, &s, &err), 0);
	assert_int_equal(strlen(get_session(db, "t", s.id).preset), CTL_NAME_MAX);

	struct ctl_session bad = { 0 };
	snprintf(bad.tenant, sizeof(bad.tenant), "t");
	const char *bad_ids[] = { "", "abc", "0123456789ABCDEF", "0123456789abcdeg",
				  "0123456789abcde" };
	for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
		snprintf(bad.id, sizeof(bad.id), "%s", bad_ids[i]);
		al_error_clear(&err);
		assert_int_equal(ctl_db_session_insert(db, &bad, &err), -EINVAL);
	}
	sid(bad.id, 3);
	snprintf(bad.tenant, sizeof(bad.tenant), "bad tenant");
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_insert(db, &bad, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "tenant"));
	snprintf(bad.tenant, sizeof(bad.tenant), "t");
	memset(bad.source, 's', sizeof(bad.source));
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_insert(db, &bad, &err), -EINVAL);
	memset(bad.source, 0, sizeof(bad.source));
	memset(bad.grant, 'g', sizeof(bad.grant));
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_insert(db, &bad, &err), -EINVAL);
	memset(bad.grant, 0, sizeof(bad.grant));
	snprintf(bad.forked_from, sizeof(bad.forked_from), "abcd");
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_insert(db, &bad, &err), -EINVAL);
	bad.forked_from[0] = '\0';
	memset(bad.agent, 'a', sizeof(bad.agent));
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_insert(db, &bad, &err), -EINVAL);
	assert_int_equal(rows_of("sessions", bad.id), 0);

	/* Every function checks the tenant and the session id. */
	const char *bad_tenants[] = { "", "a/b", "..", "x y" };
	for (size_t i = 0; i < 4; i++) {
		struct ctl_session got;
		al_error_clear(&err);
		assert_int_equal(ctl_db_session_get(db, bad_tenants[i], id, &got, &err), -EINVAL);
		al_error_clear(&err);
		assert_int_equal(ctl_db_turn_queue(db, bad_tenants[i], id, "p", &n, &err), -EINVAL);
	}
	char *long_tenant = filled(CTL_TENANT_MAX + 1, 't');
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_queue(db, long_tenant, id, "p", &n, &err), -EINVAL);
	free(long_tenant);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_queue(db, "t", "0001", "p", &n, &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_delete(db, "t", "0000000000000001x", &err), -EINVAL);
	assert_int_equal(rows_of("sessions", id), 1);

	/* Prompts: up to 1 MiB. */
	char *prompt = filled(CTL_PROMPT_MAX + 1, 'x');
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_queue(db, "t", id, prompt, &n, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "prompt"));
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_queue(db, "t", id, NULL, &n, &err), -EINVAL);
	prompt[CTL_PROMPT_MAX] = '\0';
	assert_int_equal(queue_ok(db, "t", id, prompt), 1);
	struct ctl_turn t = get_turn(db, "t", id, 1);
	assert_int_equal(strlen(t.prompt), CTL_PROMPT_MAX);
	ctl_turn_clear(&t);
	free(prompt);

	/* Event data: up to 256 KiB. */
	char *data = filled(CTL_EVENT_DATA_MAX + 1, 'd');
	uint64_t seq;
	al_error_clear(&err);
	assert_int_equal(ctl_db_event_append(db, "t", id, 1, "text", data, &seq, &err), -EINVAL);
	data[CTL_EVENT_DATA_MAX] = '\0';
	al_error_clear(&err);
	assert_int_equal(ctl_db_event_append(db, "t", id, 1, "text", data, &seq, &err), 0);
	free(data);
	char *kind = filled(33, 'k');
	al_error_clear(&err);
	assert_int_equal(ctl_db_event_append(db, "t", id, 1, kind, "{}", &seq, &err), -EINVAL);
	free(kind);

	/* Finish: reason, agent session, checkpoint, cost. */
	assert_int_equal(claim_ok(db, "t", id), 1);
	char *reason = filled(CTL_REASON_MAX + 1, 'r');
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_FAILED, reason, NULL, "", "",
					    &err),
			 -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_cancel(db, "t", id, 1, reason, &n, &err), -EINVAL);
	char *asid = filled(CTL_AGENT_SID_MAX + 1, 'a');
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_SUCCEEDED, "", NULL, ck, asid,
					    &err),
			 -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_SUCCEEDED, "", NULL, "abcd",
					    "", &err),
			 -EINVAL);
	struct ctl_usage u = { .have_cost = true, .cost_usd = NAN };
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_SUCCEEDED, "", &u, ck, "",
					    &err),
			 -EINVAL);
	assert_int_equal(turn_state(db, "t", id, 1), CTL_TURN_RUNNING);
	reason[CTL_REASON_MAX] = '\0';
	asid[CTL_AGENT_SID_MAX] = '\0';
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_SUCCEEDED, reason, NULL, ck,
					    asid, &err),
			 0);
	assert_int_equal(strlen(get_session(db, "t", id).agent_session), CTL_AGENT_SID_MAX);
	free(reason);
	free(asid);

	/* The sandbox. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_set_sandbox(db, "t", id, "0123456789abcdef0123456789abcdef",
						    "", &err),
			 -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_set_sandbox(db, "t", id, "a/b", "", &err), -EINVAL);
	al_error_clear(&err);
	assert_int_equal(ctl_db_session_set_sandbox(db, "t", id, "abc", "xyz", &err), -EINVAL);

	/* Checkpoint ids. */
	al_error_clear(&err);
	assert_int_equal(ctl_db_checkpoint_add(db, "t", id, "", "", &err), -EINVAL);
	char upper[CTL_CKPT_HEX + 1];
	memset(upper, 'A', CTL_CKPT_HEX);
	upper[CTL_CKPT_HEX] = '\0';
	al_error_clear(&err);
	assert_int_equal(ctl_db_checkpoint_add(db, "t", id, upper, "", &err), -EINVAL);
	char *long_ck = filled(CTL_CKPT_HEX + 1, 'a');
	al_error_clear(&err);
	struct ctl_checkpoint c;
	assert_int_equal(ctl_db_checkpoint_get(db, "t", long_ck, &c, &err), -EINVAL);
	free(long_ck);
	al_error_clear(&err);
	assert_int_equal(ctl_db_turn_claim(db, "t", id, 0, 1, NULL, &err), -EINVAL);
	ctl_db_close(db);
}

/* ---- concurrency and crashes ---- */

/* Processes appending to one session at once get distinct, dense numbers;
 * a cancel from another process beats the running one's finish. */
static void test_processes_share_the_file(void **state)
{
	struct ctl_db *db = open_ok();
	char id[CTL_ID_LEN + 1];
	sid(id, 1);
	add_session(db, "t", id);
	queue_ok(db, "t", id, "p");
	assert_int_equal(claim_ok(db, "t", id), 1);

	enum { CHILDREN = 3, EACH = 200 };
	pid_t pids[CHILDREN];
	for (int i = 0; i < CHILDREN; i++) {
		pids[i] = test_fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			struct ctl_db *c = NULL;
			struct al_error e = { 0 };
			if (ctl_db_open(dbpath, &c, &e) < 0)
				_exit(1);
			for (int k = 0; k < EACH; k++) {
				if (ctl_db_event_append(c, "t", id, 1, "text", "{}", NULL, &e) <
				    0) {
					fprintf(stderr, "child: %s\n", al_error_message(&e));
					_exit(2);
				}
			}
			ctl_db_close(c);
			_exit(0);
		}
	}
	int statuses[CHILDREN];
	for (int i = 0; i < CHILDREN; i++)
		wait_child(pids[i], &statuses[i]);
	for (int i = 0; i < CHILDREN; i++) {
		assert_true(WIFEXITED(statuses[i]));
		assert_int_equal(WEXITSTATUS(statuses[i]), 0);
	}
	assert_int_equal(rows_of("events", id), CHILDREN * EACH);
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "SELECT COUNT(DISTINCT seq) = %d AND MIN(seq) = 1 AND MAX(seq) = %d "
		 "FROM events WHERE session = '%s'",
		 CHILDREN * EACH, CHILDREN * EACH, id);
	assert_int_equal(sql_int(sql), 1);

	pid_t pid = test_fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct ctl_db *c = NULL;
		struct al_error e = { 0 };
		uint32_t n = 0;
		if (ctl_db_open(dbpath, &c, &e) < 0 ||
		    ctl_db_turn_cancel(c, "t", id, 0, "from another terminal", &n, &e) < 0 ||
		    n != 1)
			_exit(1);
		ctl_db_close(c);
		_exit(0);
	}
	int status;
	wait_child(pid, &status);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	char ck[CTL_CKPT_HEX + 1];
	ckid(ck, 1);
	struct al_error err = { 0 };
	assert_int_equal(ctl_db_turn_finish(db, "t", id, 1, CTL_TURN_SUCCEEDED, "", NULL, ck, "",
					    &err),
			 -EALREADY);
	assert_int_equal(turn_state(db, "t", id, 1), CTL_TURN_CANCELLED);
	ctl_db_close(db);
}

static int hook_count, hook_kill_at;

static void kill_hook(void *ud)
{
	if (++hook_count == hook_kill_at)
		raise(SIGKILL);
}

/* In a child: turns 1..rounds of session id, each queued, claimed and
 * finished with checkpoint ckid(n) and agent session "a<n>"; after each
 * finish, n is written to fd (when >= 0). With kill_at, SIGKILL just
 * before that commit. */
static void run_turns(const char *id, int rounds, int kill_at, int fd)
{
	struct ctl_db *db = NULL;
	struct al_error e = { 0 };
	if (ctl_db_open(dbpath, &db, &e) < 0)
		_exit(1);
	hook_count = 0;
	hook_kill_at = kill_at;
	if (kill_at)
		ctl_db_set_commit_hook(db, kill_hook, NULL);
	for (int i = 1; i <= rounds; i++) {
		uint32_t n;
		struct ctl_turn t = { 0 };
		char ck[CTL_CKPT_HEX + 1], asid[16];
		turn_ck(ck, id, (uint32_t)i);
		snprintf(asid, sizeof(asid), "a%d", i);
		struct ctl_usage u = { .input_tokens = (uint64_t)i };
		if (ctl_db_turn_queue(db, "t", id, "p", &n, &e) < 0 || n != (uint32_t)i ||
		    ctl_db_turn_claim(db, "t", id, getpid(), 1, &t, &e) < 0 || t.n != n ||
		    ctl_db_turn_finish(db, "t", id, n, CTL_TURN_SUCCEEDED, "", &u, ck, asid, &e) <
			    0) {
			fprintf(stderr, "child: %s\n", al_error_message(&e));
			_exit(2);
		}
		ctl_turn_clear(&t);
		if (fd >= 0 && write(fd, &n, sizeof(n)) != sizeof(n))
			_exit(3);
	}
	ctl_db_close(db);
	_exit(0);
}

/*
 * The state after run_turns died: every turn is queued, running, or
 * succeeded with all of it (its checkpoint row, the session's last
 * checkpoint and agent session if it is the latest); nothing half. At
 * least `committed` turns succeeded. Returns how many did.
 */
static uint32_t check_whole(struct ctl_db *db, const char *id, uint32_t committed)
{
	struct ctl_session s = get_session(db, "t", id);
	assert_int_equal(rows_of("turns", id), s.turns);
	uint32_t succeeded = 0;
	for (uint32_t n = 1; n <= s.turns; n++) {
		struct ctl_turn t = get_turn(db, "t", id, n);
		char ck[CTL_CKPT_HEX + 1];
		turn_ck(ck, id, n);
		struct ctl_checkpoint c;
		struct al_error err = { 0 };
		int r = ctl_db_checkpoint_get(db, "t", ck, &c, &err);
		if (t.state == CTL_TURN_SUCCEEDED) {
			assert_int_equal(succeeded, n - 1); /* in order, no gap */
			succeeded = n;
			assert_string_equal(t.checkpoint, ck);
			assert_int_equal(t.usage.input_tokens, n);
			assert_int_equal(r, 0);
			assert_int_equal(c.turn, n);
		} else {
			assert_true(t.state == CTL_TURN_RUNNING || t.state == CTL_TURN_QUEUED);
			assert_int_equal(n, s.turns); /* only the last one */
			assert_string_equal(t.checkpoint, "");
			assert_int_equal(t.usage.input_tokens, 0);
			assert_int_equal(r, -ENOENT);
		}
		ctl_turn_clear(&t);
	}
	assert_true(succeeded >= committed);
	assert_int_equal(rows_of("checkpoints", id), succeeded);
	if (succeeded) {
		char ck[CTL_CKPT_HEX + 1], asid[16];
		turn_ck(ck, id, succeeded);
		snprintf(asid, sizeof(asid), "a%u", succeeded);
		assert_string_equal(s.last_checkpoint, ck);
		assert_string_equal(s.agent_session, asid);
	} else {
		assert_string_equal(s.last_checkpoint, "");
	}
	return succeeded;
}

/* Killed inside a transaction, after its statements and before COMMIT. */
static void test_crash_before_commit(void **state)
{
	struct ctl_db *db = open_ok();
	/* Three commits per turn: queue, claim, finish. Killed in turn 5's
	 * finish, then in turn 3's queue, then in its claim. */
	const int kill_at[] = { 3 * 5, 3 * 3 - 2, 3 * 3 - 1 };
	const uint32_t want_turns[] = { 5, 2, 3 };
	for (int k = 0; k < 3; k++) {
		char id[CTL_ID_LEN + 1];
		sid(id, 0x100 + (uint64_t)k);
		add_session(db, "t", id);
		pid_t pid = test_fork();
		assert_true(pid >= 0);
		if (pid == 0)
			run_turns(id, 10, kill_at[k], -1);
		int status;
		wait_child(pid, &status);
		assert_true(WIFSIGNALED(status));
		assert_int_equal(WTERMSIG(status), SIGKILL);

		/* Read by a new connection, as a restarted airlock would. */
		ctl_db_close(db);
		db = open_ok();
		struct ctl_session s = get_session(db, "t", id);
		assert_int_equal(s.turns, want_turns[k]);
		uint32_t ok = check_whole(db, id, 0);
		assert_int_equal(ok, k == 0 ? 4u : 2u);
		/* Killed in its finish, the turn runs still; its runner is dead,
		 * so recovery fails it. Killed in its claim, it is queued. */
		enum ctl_turn_state st = k == 0 ? CTL_TURN_RUNNING : CTL_TURN_QUEUED;
		if (k != 1)
			assert_int_equal(turn_state(db, "t", id, want_turns[k]), st);
		unsigned n = 9;
		struct al_error err = { 0 };
		assert_int_equal(ctl_db_recover(db, NULL, NULL, &n, &err), 0);
		assert_int_equal(n, k == 0 ? 1 : 0);
		if (k == 0)
			assert_int_equal(turn_state(db, "t", id, want_turns[k]), CTL_TURN_FAILED);
	}
	ctl_db_close(db);
}

/* Killed wherever it happens to be, several times. */
static void test_crash_anywhere(void **state)
{
	struct ctl_db *db = open_ok();
	for (int round = 0; round < 6; round++) {
		char id[CTL_ID_LEN + 1];
		sid(id, 0x200 + (uint64_t)round);
		add_session(db, "t", id);
		int p[2];
		assert_int_equal(pipe(p), 0);
		pid_t pid = test_fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(p[0]);
			run_turns(id, 100000, 0, p[1]);
		}
		close(p[1]);
		/* Some finishes reported committed, then a little more time. */
		uint32_t last = 0, got;
		while (last < 20 + 5 * (uint32_t)round &&
		       read(p[0], &got, sizeof(got)) == sizeof(got))
			last = got;
		usleep(300 * (useconds_t)round);
		assert_int_equal(kill(pid, SIGKILL), 0);
		int status;
		wait_child(pid, &status);
		close(p[0]);
		assert_true(WIFSIGNALED(status));

		ctl_db_close(db);
		db = open_ok();
		uint32_t ok = check_whole(db, id, last);
		assert_true(ok >= last);
	}
	ctl_db_close(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tenant_valid),
		cmocka_unit_test_setup_teardown(test_open_create_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_migrates_empty_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_future_version_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_refuses_links_and_others, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_open_concurrent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_session_basics, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prefix_lookup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tenant_isolation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_turn_state_machine, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_session_delete, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_event_batches, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_current, setup, teardown),
		cmocka_unit_test_setup_teardown(test_processes_share_the_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_before_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_anywhere, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

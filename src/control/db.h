/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control plane's state: tenants, sessions, turns, events and
 * checkpoints, in SQLite (WAL, foreign keys, a busy timeout, schema
 * migrations in order, each applied in one transaction). Every state
 * change is one transaction. Every row belongs to one tenant and every
 * lookup takes the tenant: another tenant's id answers exactly like a
 * missing one (-ENOENT, same message).
 *
 * Later the same interface gets a PostgreSQL implementation; nothing here
 * exposes SQLite.
 *
 * Turn states: queued -> running -> succeeded | failed | cancelled.
 * Terminal states never change: a completion that arrives after a cancel
 * is recorded as ignored (-EALREADY, the row untouched but for the
 * `late_outcome` column). One running turn per session (a claim takes the
 * oldest queued turn only when none runs).
 *
 * A turn that is running records who runs it (host pid and its start
 * time): ctl_db_recover() fails the running turns whose runner is gone
 * (kill -9 of airlock mid-turn), with a reason, so nothing stays running.
 *
 * Every function returns 0 or a negative errno and fills err. A database
 * another process holds past the busy timeout (5 s) is -ETIMEDOUT, never
 * -EBUSY (a claim's "a turn runs").
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define CTL_ID_LEN 16	      /* session ids: hex characters */
#define CTL_TENANT_MAX 64     /* [A-Za-z0-9._-], 1..64 */
#define CTL_NAME_MAX 64	      /* preset and agent names */
#define CTL_CKPT_HEX 64	      /* checkpoint ids (the store's) */
#define CTL_AGENT_SID_MAX 128 /* the agent's own session id */
#define CTL_REASON_MAX 512
#define CTL_SOURCE_MAX 1024
#define CTL_SANDBOX_ID_MAX 31		 /* ctl_session.sandbox_id */
#define CTL_PROMPT_MAX (1024u * 1024)	 /* a turn's prompt, bytes */
#define CTL_EVENT_DATA_MAX (256u * 1024) /* an event's data, bytes */

struct ctl_db;

int ctl_db_open(const char *path, struct ctl_db **ret, struct al_error *err);
void ctl_db_close(struct ctl_db *db);

/* True for a valid tenant name ("." and ".." are not). */
bool ctl_tenant_valid(const char *tenant);

/*
 * The start time of a live process (/proc/PID/stat field 22, clock ticks
 * after boot), the `start` of a turn's runner: -ESRCH when there is no
 * such process or it is a zombie.
 */
int ctl_proc_starttime(int32_t pid, uint64_t *ret);

/* ---- sessions ---- */

enum ctl_session_state {
	CTL_SESSION_ACTIVE = 0,
	CTL_SESSION_DELETING, /* being deleted: sandbox and checkpoints going */
};

struct ctl_session {
	char id[CTL_ID_LEN + 1];
	char tenant[CTL_TENANT_MAX + 1];
	char preset[CTL_NAME_MAX + 1];
	char agent[CTL_NAME_MAX + 1];
	char source[CTL_SOURCE_MAX + 1];	   /* "", a local path, or the GitHub URL */
	char grant[CTL_SOURCE_MAX + 1];		   /* "github:OWNER/REPO" or "" */
	char forked_from[CTL_CKPT_HEX + 1];	   /* checkpoint it was forked from, or "" */
	char last_checkpoint[CTL_CKPT_HEX + 1];	   /* "" until the first one */
	char agent_session[CTL_AGENT_SID_MAX + 1]; /* the agent's own id, "" before turn 1 */
	char sandbox_id[32];			   /* the live sandbox, or "" */
	char sandbox_checkpoint[CTL_CKPT_HEX + 1]; /* what the live sandbox holds */
	enum ctl_session_state state;
	int64_t created, updated; /* unix ms */
	uint32_t turns;		  /* number of turns so far */
};

/* Session ids: ctl_db_session_get takes a prefix, every other function
 * the full id (CTL_ID_LEN lower-case hex digits). */

/* Inserts s (id, tenant, preset, agent, source, grant, forked_from,
 * last_checkpoint, agent_session as given; created/updated set here). -EEXIST if the id
 * is taken (by any tenant: ids are random, and are never shared). */
int ctl_db_session_insert(struct ctl_db *db, const struct ctl_session *s, struct al_error *err);
/* id may be a unique prefix (at least 4 characters); -ENOENT when none or
 * another tenant's, -EINVAL ("ambiguous") when several. */
int ctl_db_session_get(struct ctl_db *db, const char *tenant, const char *id,
		       struct ctl_session *ret, struct al_error *err);
/* Newest first. fn returning non-zero stops and is returned. */
int ctl_db_session_list(struct ctl_db *db, const char *tenant,
			int (*fn)(const struct ctl_session *s, void *ud), void *ud,
			struct al_error *err);
/* Every tenant's sessions not updated since before (unix ms), oldest
 * first: for retention, which is the operator's and crosses tenants. fn
 * must not change the database (collect, then act). */
int ctl_db_session_list_idle(struct ctl_db *db, int64_t before,
			     int (*fn)(const struct ctl_session *s, void *ud), void *ud,
			     struct al_error *err);
/* Records the live sandbox (id, and the checkpoint it holds); "" for none. */
int ctl_db_session_set_sandbox(struct ctl_db *db, const char *tenant, const char *id,
			       const char *sandbox_id, const char *checkpoint,
			       struct al_error *err);
/* The runner of turn n (pid) is done with it: it no longer holds the
 * session's next turn back (a turn that ended keeps its runner until this,
 * so that runners of one session never overlap). */
int ctl_db_turn_release(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
			int32_t pid, struct al_error *err);
/* How many runners (alive) still work on the session's turns. */
int ctl_db_session_runners(struct ctl_db *db, const char *tenant, const char *session,
			   uint32_t *ret_n, struct al_error *err);
/* Forgets the session's sandbox only if it is still sandbox_id: 1 when it
 * was, 0 when the session names another one (or none). */
int ctl_db_session_clear_sandbox_if(struct ctl_db *db, const char *tenant, const char *id,
				    const char *sandbox_id, struct al_error *err);
int ctl_db_session_set_state(struct ctl_db *db, const char *tenant, const char *id,
			     enum ctl_session_state state, struct al_error *err);
/* Deletes the session and everything that belongs to it (turns, events,
 * checkpoint rows). */
int ctl_db_session_delete(struct ctl_db *db, const char *tenant, const char *id,
			  struct al_error *err);

/* ---- turns ---- */

enum ctl_turn_state {
	CTL_TURN_QUEUED = 0,
	CTL_TURN_RUNNING,
	CTL_TURN_SUCCEEDED,
	CTL_TURN_FAILED,
	CTL_TURN_CANCELLED,
};
const char *ctl_turn_state_name(enum ctl_turn_state s);
static inline bool ctl_turn_state_terminal(enum ctl_turn_state s)
{
	return s >= CTL_TURN_SUCCEEDED;
}

struct ctl_usage {
	uint64_t input_tokens, output_tokens, cache_read_tokens, cache_write_tokens;
	double cost_usd;
	bool have_cost; /* the agent reported a cost */
};

struct ctl_turn {
	char session[CTL_ID_LEN + 1];
	char tenant[CTL_TENANT_MAX + 1];
	uint32_t n; /* 1, 2, ... within the session */
	enum ctl_turn_state state;
	char *prompt;			   /* owned: ctl_turn_clear */
	char reason[CTL_REASON_MAX + 1];   /* why it failed or was cancelled; "" */
	char checkpoint[CTL_CKPT_HEX + 1]; /* committed after it; "" */
	struct ctl_usage usage;
	int64_t queued_at, started_at, ended_at; /* unix ms; 0 not yet */
	int32_t runner_pid;			 /* while running */
	uint64_t runner_start;			 /* its start time (/proc stat field 22) */
	char late_outcome[32]; /* a completion after a terminal state: its state name */
	char agent_session[CTL_AGENT_SID_MAX + 1]; /* the agent's id after this turn */
};
void ctl_turn_clear(struct ctl_turn *t);

/* Queues a turn; *ret_n its number. */
/* The same, naming who waits for it (pid and start time, as a runner):
 * recovery fails it if that caller dies before it runs. */
int ctl_db_turn_queue_by(struct ctl_db *db, const char *tenant, const char *session,
			 const char *prompt, int32_t pid, uint64_t start, uint32_t *ret_n,
			 struct al_error *err);
int ctl_db_turn_queue(struct ctl_db *db, const char *tenant, const char *session,
		      const char *prompt, uint32_t *ret_n, struct al_error *err);
/*
 * When no turn of the session runs, moves its oldest queued turn to
 * running, owned by (pid, start); fills *ret (0). -EBUSY when one runs,
 * -ENOENT when none is queued.
 */
int ctl_db_turn_claim(struct ctl_db *db, const char *tenant, const char *session, int32_t pid,
		      uint64_t start, struct ctl_turn *ret, struct al_error *err);
/* The same for turn n only (0: any): -EBUSY while an older one is queued. */
int ctl_db_turn_claim_n(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
			int32_t pid, uint64_t start, struct ctl_turn *ret, struct al_error *err);
/*
 * Ends a running turn: state (succeeded or failed), reason, usage; on
 * success also the checkpoint, which becomes the session's last one (its
 * checkpoint row inserted) and the agent's session id — all in one
 * transaction. -EALREADY (nothing changed but late_outcome) when the
 * turn is already terminal (cancelled while this ran). A checkpoint or
 * agent session id given with a failed turn is recorded the same way; ""
 * (or NULL) leaves the session's as it was.
 */
int ctl_db_turn_finish(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
		       enum ctl_turn_state state, const char *reason, const struct ctl_usage *usage,
		       const char *checkpoint, const char *agent_session, struct al_error *err);
/* Cancels a queued or running turn (the latest non-terminal one when n is
 * 0), with reason; *ret_n the turn cancelled. -ENOENT when none is
 * queued or running. */
int ctl_db_turn_cancel(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
		       const char *reason, uint32_t *ret_n, struct al_error *err);
/* The same; when the turn cancelled was running, the session forgets its
 * sandbox in the same transaction and *ret_sandbox (size bytes) gets its
 * id for the caller to destroy ("" for none). n CTL_TURN_CURRENT: the
 * running turn, else the first queued, chosen in the transaction. */
#define CTL_TURN_CURRENT UINT32_MAX
int ctl_db_turn_cancel_take(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
			    const char *reason, uint32_t *ret_n, char *ret_sandbox, size_t size,
			    struct al_error *err);
int ctl_db_turn_get(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
		    struct ctl_turn *ret, struct al_error *err);
/* Oldest first. */
int ctl_db_turn_list(struct ctl_db *db, const char *tenant, const char *session,
		     int (*fn)(const struct ctl_turn *t, void *ud), void *ud, struct al_error *err);
/*
 * Fails every running turn whose runner (pid and start time) is no longer
 * alive, with reason "interrupted: airlock stopped while the turn ran"; the
 * session's sandbox is forgotten (it may hold uncommitted state), and
 * handed to gone (may be NULL) after the commit, to be destroyed.
 * *ret_n how many.
 */
int ctl_db_recover(struct ctl_db *db, void (*gone)(const char *sandbox_id, void *ud), void *ud,
		   unsigned *ret_n, struct al_error *err);

/* ---- events ---- */

/* Appends one event (kind: "text", "tool_call", "tool_result", "usage",
 * "error", "status"; data: a JSON object as text, already bounded and
 * redacted) to turn n; *ret_seq its sequence number within the session
 * (1, 2, ...). Kinds are 1 to 32 of [a-z0-9_]. */
int ctl_db_event_append(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
			const char *kind, const char *data, uint64_t *ret_seq,
			struct al_error *err);
/* Appends count events (at most CTL_EVENTS_BATCH_MAX) to turn n in one
 * transaction, numbered from *ret_first_seq on, in order. */
struct ctl_event_in {
	const char *kind, *data;
};
#define CTL_EVENTS_BATCH_MAX 1024
int ctl_db_event_append_many(struct ctl_db *db, const char *tenant, const char *session, uint32_t n,
			     const struct ctl_event_in *ev, size_t count, uint64_t *ret_first_seq,
			     struct al_error *err);
struct ctl_event_row {
	uint64_t seq;
	uint32_t turn;
	int64_t at; /* unix ms */
	const char *kind;
	const char *data;
};
/* Events with seq > after, oldest first, at most limit (0: all). The
 * row's kind and data live for the call only. */
int ctl_db_event_list(struct ctl_db *db, const char *tenant, const char *session, uint64_t after,
		      size_t limit, int (*fn)(const struct ctl_event_row *e, void *ud), void *ud,
		      struct al_error *err);

/* ---- checkpoints ---- */

struct ctl_checkpoint {
	char id[CTL_CKPT_HEX + 1];
	char session[CTL_ID_LEN + 1];
	uint32_t turn; /* 0: the session's starting point (clone, copy, fork) */
	char parent[CTL_CKPT_HEX + 1];
	int64_t created;
};
/* Records a checkpoint that is not a turn's (the starting point); it
 * becomes the session's last one. */
int ctl_db_checkpoint_add(struct ctl_db *db, const char *tenant, const char *session,
			  const char *id, const char *parent, struct al_error *err);
/* id: full or a unique prefix (at least 4), within the tenant. */
int ctl_db_checkpoint_get(struct ctl_db *db, const char *tenant, const char *id,
			  struct ctl_checkpoint *ret, struct al_error *err);
int ctl_db_checkpoint_list(struct ctl_db *db, const char *tenant, const char *session,
			   int (*fn)(const struct ctl_checkpoint *c, void *ud), void *ud,
			   struct al_error *err);

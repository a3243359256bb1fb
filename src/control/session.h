/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sessions and turns: what `airlock run` and the daemon both do.
 *
 * A session is made from a preset and a workspace source (nothing, a local
 * directory for trusted local callers, or an https://github.com/OWNER/REPO
 * URL cloned inside the sandbox through the gateway with that session's
 * grant). Its files live in a tree owned by one unprivileged host uid:
 * workspace/ (the sandbox's /workspace) and home/ (the agent's home, with
 * its history). The starting point and every succeeded turn are
 * checkpoints of that tree.
 *
 * A turn runs the preset's agent in the session's sandbox, resuming the
 * agent's own session. The sandbox stays alive between turns while it
 * holds the last committed checkpoint; after a cancel, a failure, a lost
 * sandbox or a fork a fresh one starts from the last checkpoint.
 *
 * Every function returns 0 or a negative errno and fills err.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "control/conf.h"
#include "control/db.h"
#include "sandbox/sandbox.h"

struct redactor;

struct ctl_ctx {
	struct ctl_conf *conf;
	struct ctl_db *db;
	struct sbx_settings set;
	uint32_t gw_uid;
	uint8_t *key; /* the checkpoint store's HMAC key */
	size_t keylen;
	struct redactor *red; /* every vault value, once a turn runs */
	bool red_loaded;
	bool trusted; /* a local caller: local directories may be sources */
};

/* Loads the config (path NULL: the default), opens the state, fails
 * running turns whose runner is gone (ctl_db_recover). */
int ctl_ctx_open(struct ctl_ctx *c, const char *conf_path, struct al_error *err);
void ctl_ctx_close(struct ctl_ctx *c);

/* What a caller sees while it waits. progress: a line of what airlock does
 * ("setting up preset claude", "cloning ...", "restoring ..."); event: an
 * agent event as stored. Either may be NULL. */
struct ctl_observer {
	void (*progress)(const char *line, void *ud);
	void (*event)(const struct ctl_event_row *e, void *ud);
	void *ud;
};

/* Checks a GitHub URL: https://github.com/OWNER/REPO[.git] and nothing
 * else; fills owner and repo. -EINVAL with the reason. */
int ctl_github_url_parse(const char *url, char *owner, size_t osize, char *repo, size_t rsize,
			 struct al_error *err);

int ctl_session_create(struct ctl_ctx *c, const char *tenant, const char *preset,
		       const char *source, const struct ctl_observer *obs, struct ctl_session *ret,
		       struct al_error *err);

/*
 * Queues a turn, waits for the session's running turn (if any) to end,
 * runs it and records its outcome. *ret is the turn as recorded (its
 * state says how it went; an airlock error is a negative return).
 */
int ctl_turn_run(struct ctl_ctx *c, const char *tenant, const char *session, const char *prompt,
		 const struct ctl_observer *obs, struct ctl_turn *ret, bool *ret_timed_out,
		 struct al_error *err);

/* Cancels the session's queued or running turn and kills the agent with
 * everything it started (the sandbox goes). *ret_n the turn cancelled. */
int ctl_turn_cancel(struct ctl_ctx *c, const char *tenant, const char *session, uint32_t *ret_n,
		    struct al_error *err);

/* A new session from a checkpoint (or a session's last one) of the same
 * tenant. */
int ctl_session_fork(struct ctl_ctx *c, const char *tenant, const char *from,
		     struct ctl_session *ret, struct al_error *err);

/* Stops the sandbox, deletes the session's checkpoints from the store and
 * every row. */
int ctl_session_delete(struct ctl_ctx *c, const char *tenant, const char *session,
		       struct al_error *err);

/* Removes the lower directories (checkpoints restored for sandboxes to
 * start from) that no session's sandbox uses any more. */
void ctl_lowers_gc(struct ctl_ctx *c);

/* Deletes the sessions idle longer than the config's retention (none
 * when it has none), every tenant's; *ret_deleted how many; then
 * ctl_lowers_gc. */
int ctl_retention_gc(struct ctl_ctx *c, int64_t now_ms, unsigned *ret_deleted,
		     struct al_error *err);

/* What turn n changed (0: the last turn that committed), as "A/D/M path"
 * lines, with text diffs when with_text: the workspace's paths (relative
 * to it), or with all the agent's home too (paths from the tree's top,
 * workspace/ and home/). */
int ctl_session_diff(struct ctl_ctx *c, const char *tenant, const char *session, uint32_t n,
		     bool with_text, bool all, struct buf *out, struct al_error *err);

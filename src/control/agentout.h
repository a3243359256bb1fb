/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What an agent CLI prints, made into airlock's events and a turn's
 * outcome. Each agent has a parser (claude, gemini, codex, opencode, pi):
 * its standard output is read as JSON lines as they come (any split),
 * each line becomes zero or more normalized events, and the outcome is
 * decided strictly from the agent's result envelope when the output ends:
 * missing, truncated, contradictory or failed is a failed turn, never a
 * success (Claude's is_error:true under subtype "success", Gemini's fatal
 * errors on stderr, Codex's turn.failed, opencode's error line, pi's exit
 * 0 after an "error" stop). The exit status alone never makes a success.
 *
 * Events (kind, and a JSON object as text):
 *   text         {"text": "..."}                      what the agent says
 *   tool_call    {"id": "...", "name": "...", "input": {...}|"..."}
 *   tool_result  {"id": "...", "output": "...", "is_error": bool}
 *   usage        {"input_tokens": N, "output_tokens": N, ...}
 *   error        {"message": "..."}
 *   status       {"message": "..."}                   (session started, ...)
 * Every string in an event is bounded (CTL_EVENT_TEXT_MAX bytes, cut on a
 * UTF-8 boundary with "[...N bytes cut]") and redacted (redact.h) before
 * the callback sees it; an event is at most CTL_EVENT_MAX bytes. A line
 * longer than CTL_LINE_MAX is dropped with an error event (and, if it was
 * the envelope, the turn fails). Non-JSON lines on stdout become status
 * events only for agents whose JSON mode may print them; stderr is kept
 * (bounded, redacted) for the failure reason and Gemini's errors.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/redact.h"
#include "control/db.h"

#define CTL_LINE_MAX (4u * 1024 * 1024)
#define CTL_EVENT_TEXT_MAX (64u * 1024)
#define CTL_EVENT_MAX (256u * 1024)
#define CTL_STDERR_KEEP (64u * 1024)

enum ctl_parser {
	CTL_PARSER_CLAUDE = 0,
	CTL_PARSER_GEMINI,
	CTL_PARSER_CODEX,
	CTL_PARSER_OPENCODE,
	CTL_PARSER_PI,
};
/* By name ("claude", ...); -EINVAL for an unknown one. */
int ctl_parser_from_name(const char *name, enum ctl_parser *ret);
const char *ctl_parser_name(enum ctl_parser p);

/* kind and data (NUL-terminated JSON object) live for the call only. A
 * non-zero return stops the parser and is returned by the feed call. */
typedef int (*ctl_event_fn)(const char *kind, const char *data, void *ud);

struct ctl_outcome {
	bool succeeded;
	char reason[CTL_REASON_MAX + 1];	   /* why not (redacted); "" on success */
	char result_text[CTL_EVENT_TEXT_MAX];	   /* the agent's final answer, if any (redacted) */
	char agent_session[CTL_AGENT_SID_MAX + 1]; /* the id to resume, from the output */
	struct ctl_usage usage;
	/* usage.cost_usd is the agent session's running total, not this
	 * turn's: Claude Code restores the earlier turns' cost on --resume
	 * (total_cost_usd then counts them too; its tokens are this run's).
	 * The turn's own cost is the difference from the previous turn's. */
	bool cost_is_session_total;
};

struct ctl_agentout;

/* red may be NULL (nothing beyond the known shapes). */
int ctl_agentout_new(enum ctl_parser p, const struct redactor *red, ctl_event_fn fn, void *ud,
		     struct ctl_agentout **ret);
void ctl_agentout_free(struct ctl_agentout *a);
int ctl_agentout_feed(struct ctl_agentout *a, const char *data, size_t len);
int ctl_agentout_feed_stderr(struct ctl_agentout *a, const char *data, size_t len);
/*
 * The output has ended. exited/status: how the agent's process ended
 * (exited true: status is the exit code; false: status is the signal or
 * -1 when it was killed by airlock for a limit). Fills *ret.
 */
int ctl_agentout_finish(struct ctl_agentout *a, bool exited, int status, struct ctl_outcome *ret);

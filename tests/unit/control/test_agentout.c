/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent output parsers against synthetic outputs written from
 * AGENT-CLIS.md and against real captures of the CLIs
 * (tests/fixtures/agent-output/<agent>/real-*: stdout, stderr and the
 * run's metadata with its exit status).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/fdutil.h"
#include "control/agentout.h"

#ifndef FIXTURES_DIR
#error "FIXTURES_DIR: the tests/fixtures directory"
#endif

#define SECRET "vault-secret-value-1234"
#define SHAPE "sk-ant-api03-SYNTHETICKEYSYNTHETICKEY123"
#define NO_RESULT "no result from the agent (the output ended without one)"

/* ---- running a parser ---- */

struct events {
	struct buf all; /* "kind data\n" per event */
	size_t n;
	size_t stop_at; /* the callback returns 7 at this event (0: never) */
	bool count_only;
};

/* Every string in v within the bound. */
static void check_strings(json_t *v)
{
	const char *key;
	json_t *val;
	size_t i;
	switch (json_typeof(v)) {
	case JSON_STRING:
		assert_true(json_string_length(v) <= CTL_EVENT_TEXT_MAX);
		break;
	case JSON_OBJECT:
		json_object_foreach(v, key, val)
		{
			assert_true(strlen(key) <= 1024);
			check_strings(val);
		}
		break;
	case JSON_ARRAY:
		json_array_foreach(v, i, val) check_strings(val);
		break;
	default:
		break;
	}
}

static int on_event(const char *kind, const char *data, void *ud)
{
	struct events *e = ud;
	static const char *const kinds[] = { "text",  "tool_call", "tool_result",
					     "usage", "error",	   "status" };
	bool known = false;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		known = known || strcmp(kind, kinds[i]) == 0;
	if (!known)
		fail_msg("unknown event kind %s", kind);
	size_t len = strlen(data);
	assert_true(len <= CTL_EVENT_MAX);
	/* Valid JSON, hence valid UTF-8 (jansson checks), an object. */
	json_error_t jerr;
	json_t *o = json_loadb(data, len, 0, &jerr);
	if (!json_is_object(o))
		fail_msg("event %s is not a JSON object: %s (%.200s)", kind, jerr.text, data);
	check_strings(o);
	json_decref(o);
	e->n++;
	if (!e->count_only)
		assert_int_equal(buf_appendf(&e->all, "%s %s\n", kind, data), 0);
	if (e->stop_at && e->n == e->stop_at)
		return 7;
	return 0;
}

enum split { WHOLE, BYTES, RANDOM };

static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static struct redactor *vault(void)
{
	struct redactor *r = NULL;
	assert_int_equal(redactor_new(&r), 0);
	assert_int_equal(redactor_add(r, SECRET, strlen(SECRET)), 0);
	return r;
}

/* Feeds out (and err) in pieces as split says; returns feed's last value. */
static int feed_split(struct ctl_agentout *a, const char *p, size_t n, enum split sp, uint32_t seed,
		      int (*feed)(struct ctl_agentout *, const char *, size_t))
{
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0;) {
		size_t k = sp == WHOLE ? n : sp == BYTES ? 1 : 1 + rnd(&seed) % 97;
		if (k > n - i)
			k = n - i;
		rc = feed(a, p + i, k);
		i += k;
	}
	return rc;
}

static struct ctl_outcome *run(enum ctl_parser p, const char *out, size_t len, const char *err,
			       size_t elen, bool exited, int status, enum split sp,
			       struct events *ev)
{
	struct redactor *red = vault();
	struct ctl_agentout *a = NULL;
	assert_int_equal(ctl_agentout_new(p, red, on_event, ev, &a), 0);
	int rc = feed_split(a, out, len, sp, 0x9e3779b9u, ctl_agentout_feed);
	if (!ev->stop_at)
		assert_int_equal(rc, 0);
	assert_int_equal(feed_split(a, err, elen, sp, 12345, ctl_agentout_feed_stderr), 0);
	struct ctl_outcome *o = malloc(sizeof(*o));
	assert_non_null(o);
	memset(o, 0xa5, sizeof(*o)); /* finish fills all of it */
	assert_int_equal(ctl_agentout_finish(a, exited, status, o), 0);
	ctl_agentout_free(a);
	redactor_free(red);
	return o;
}

static char *load(const char *path, size_t *len)
{
	char *data = NULL;
	if (read_file_bounded(AT_FDCWD, path, 64u * 1024 * 1024, &data, len) < 0) {
		*len = 0;
		return NULL;
	}
	return data;
}

struct fixture {
	char *out, *err;
	size_t out_len, err_len;
	int exit; /* real captures: the recorded exit status */
};

static void fixture_load(const char *agent, const char *name, struct fixture *f)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/agent-output/%s/%s.stdout", FIXTURES_DIR, agent, name);
	f->out = load(path, &f->out_len);
	if (!f->out)
		fail_msg("missing fixture %s", path);
	snprintf(path, sizeof(path), "%s/agent-output/%s/%s.stderr", FIXTURES_DIR, agent, name);
	f->err = load(path, &f->err_len);
	f->exit = 0;
	snprintf(path, sizeof(path), "%s/agent-output/%s/%s.json", FIXTURES_DIR, agent, name);
	json_error_t jerr;
	json_t *meta = json_load_file(path, 0, &jerr);
	if (meta) {
		assert_true(json_is_integer(json_object_get(meta, "exit")));
		f->exit = (int)json_integer_value(json_object_get(meta, "exit"));
		json_decref(meta);
	}
}

static void fixture_free(struct fixture *f)
{
	free(f->out);
	free(f->err);
}

static void same_outcome(const struct ctl_outcome *a, const struct ctl_outcome *b)
{
	assert_int_equal(a->succeeded, b->succeeded);
	assert_string_equal(a->reason, b->reason);
	assert_string_equal(a->result_text, b->result_text);
	assert_string_equal(a->agent_session, b->agent_session);
	assert_int_equal(a->usage.input_tokens, b->usage.input_tokens);
	assert_int_equal(a->usage.output_tokens, b->usage.output_tokens);
	assert_int_equal(a->usage.cache_read_tokens, b->usage.cache_read_tokens);
	assert_int_equal(a->usage.cache_write_tokens, b->usage.cache_write_tokens);
	assert_true(a->usage.cost_usd == b->usage.cost_usd);
	assert_int_equal(a->usage.have_cost, b->usage.have_cost);
	assert_int_equal(a->cost_is_session_total, b->cost_is_session_total);
}

/* A reason starts with want (stderr's last line may follow, as context). */
static void assert_prefix(const char *reason, const char *want)
{
	if (strncmp(reason, want, strlen(want)) != 0)
		fail_msg("reason \"%s\" does not start with \"%s\"", reason, want);
}

static void no_secret(const char *s)
{
	if (s && (strstr(s, SECRET) || strstr(s, SHAPE)))
		fail_msg("a secret survived in: %.300s", s);
}

/*
 * Runs a fixture whole, byte by byte and in random pieces: the same
 * events and outcome every time, no secret anywhere. Returns the outcome
 * (and the events, when ev is given) of the whole run.
 */
static struct ctl_outcome *check_fixture(enum ctl_parser p, const char *agent, const char *name,
					 bool exited, int status, bool use_meta, struct events *ev)
{
	struct fixture f;
	fixture_load(agent, name, &f);
	if (use_meta)
		status = f.exit;
	struct ctl_outcome *o[3];
	struct events e[3];
	for (int sp = 0; sp < 3; sp++) {
		e[sp] = (struct events){ .all = BUF_INIT(64u * 1024 * 1024) };
		o[sp] = run(p, f.out, f.out_len, f.err, f.err_len, exited, status, (enum split)sp,
			    &e[sp]);
		no_secret(e[sp].all.data);
		no_secret(o[sp]->reason);
		no_secret(o[sp]->result_text);
		assert_true(strlen(o[sp]->reason) <= CTL_REASON_MAX);
		assert_int_equal(o[sp]->succeeded, o[sp]->reason[0] == '\0');
	}
	for (int sp = 1; sp < 3; sp++) {
		assert_int_equal(e[sp].n, e[0].n);
		if (e[0].n)
			assert_string_equal(e[sp].all.data, e[0].all.data);
		same_outcome(o[sp], o[0]);
		free(o[sp]);
		buf_free(&e[sp].all);
	}
	if (ev)
		*ev = e[0];
	else
		buf_free(&e[0].all);
	fixture_free(&f);
	return o[0];
}

static void expect_case(enum ctl_parser p, const char *agent, const char *name, int status, bool ok,
			const char *reason)
{
	struct ctl_outcome *o = check_fixture(p, agent, name, true, status, false, NULL);
	if (o->succeeded != ok)
		fail_msg("%s/%s: %s, reason \"%s\"", agent, name,
			 o->succeeded ? "succeeded" : "failed", o->reason);
	if (reason && !strstr(o->reason, reason))
		fail_msg("%s/%s: reason \"%s\" lacks \"%s\"", agent, name, o->reason, reason);
	free(o);
}

/* ---- the synthetic cases, agent by agent ---- */

struct scase {
	const char *name;
	int status;
	bool ok;
	const char *reason; /* a part of it */
};

static void run_cases(enum ctl_parser p, const struct scase *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		expect_case(p, ctl_parser_name(p), c[i].name, c[i].status, c[i].ok, c[i].reason);
}

/* The success fixture: every agent's own checks on it, then the exit
 * status and signal contradictions. */
static void success_and_contradictions(enum ctl_parser p, const char *session, const char *result)
{
	const char *agent = ctl_parser_name(p);
	struct events ev;
	struct ctl_outcome *o = check_fixture(p, agent, "success", true, 0, false, &ev);
	assert_true(o->succeeded);
	assert_string_equal(o->reason, "");
	assert_string_equal(o->agent_session, session);
	assert_string_equal(o->result_text, result);
	/* The secrets were there, and are gone. */
	assert_non_null(strstr(ev.all.data, "[REDACTED]"));
	assert_non_null(strstr(ev.all.data, "tool_call "));
	assert_non_null(strstr(ev.all.data, "tool_result "));
	assert_non_null(strstr(ev.all.data, "usage "));
	buf_free(&ev.all);
	free(o);

	o = check_fixture(p, agent, "success", true, 1, false, NULL);
	assert_false(o->succeeded);
	assert_prefix(o->reason,
		      "contradictory: the agent reported success but exited with status 1");
	assert_string_equal(o->agent_session, session); /* still known */
	free(o);
	o = check_fixture(p, agent, "success", false, 15, false, NULL);
	assert_false(o->succeeded);
	assert_prefix(o->reason, "killed by signal 15 (SIGTERM)");
	free(o);
	o = check_fixture(p, agent, "success", false, -1, false, NULL);
	assert_false(o->succeeded);
	assert_prefix(o->reason, "stopped by airlock: a limit was reached");
	free(o);
}

static void test_names(void **state)
{
	static const char *const names[] = { "claude", "gemini", "codex", "opencode", "pi" };
	for (size_t i = 0; i < 5; i++) {
		enum ctl_parser p;
		assert_int_equal(ctl_parser_from_name(names[i], &p), 0);
		assert_int_equal(p, (enum ctl_parser)i);
		assert_string_equal(ctl_parser_name(p), names[i]);
	}
	enum ctl_parser p = CTL_PARSER_PI;
	assert_int_equal(ctl_parser_from_name("Claude", &p), -EINVAL);
	assert_int_equal(ctl_parser_from_name("", &p), -EINVAL);
	assert_int_equal(ctl_parser_from_name(NULL, &p), -EINVAL);
	assert_int_equal(p, CTL_PARSER_PI);
	assert_string_equal(ctl_parser_name((enum ctl_parser)99), "unknown");
	struct ctl_agentout *a = NULL;
	assert_int_equal(ctl_agentout_new((enum ctl_parser)5, NULL, on_event, NULL, &a), -EINVAL);
	assert_int_equal(ctl_agentout_new(CTL_PARSER_PI, NULL, NULL, NULL, &a), -EINVAL);
	assert_null(a);
	ctl_agentout_free(NULL);
}

static void test_claude(void **state)
{
	success_and_contradictions(CTL_PARSER_CLAUDE, "11111111-2222-4333-8444-555555555555",
				   "All done.");
	static const struct scase c[] = {
		{ "api-error", 1, false, "API Error: 401 invalid x-api-key" },
		/* is_error under subtype success: failed even with exit 0 */
		{ "api-error", 0, false, "API Error: 401 invalid x-api-key" },
		{ "max-turns", 1, false, "error_max_turns: Reached maximum number of turns (1)" },
		{ "no-result", 0, false, NO_RESULT },
		{ "truncated", 0, false, "the output ended in the middle of a line (truncated)" },
		{ "lying", 0, false, NO_RESULT },
		{ "junk-after", 0, false, "the output went on after the agent's result" },
		{ "record-after", 0, false, "the output went on after the agent's result" },
		{ "success-under-error", 0, false, "contradictory result" },
		/* A last line without its newline that is whole JSON counts. */
		{ "no-newline", 0, true, NULL },
		{ "new-session", 0, true, NULL },
	};
	run_cases(CTL_PARSER_CLAUDE, c, sizeof(c) / sizeof(c[0]));
	struct ctl_outcome *o =
		check_fixture(CTL_PARSER_CLAUDE, "claude", "new-session", true, 0, false, NULL);
	/* The id to resume is the result's, not the first one seen. */
	assert_string_equal(o->agent_session, "bbbbbbbb-0000-4000-8000-000000000002");
	free(o);
	o = check_fixture(CTL_PARSER_CLAUDE, "claude", "success", true, 0, false, NULL);
	assert_int_equal(o->usage.input_tokens, 100);
	assert_int_equal(o->usage.output_tokens, 20);
	assert_int_equal(o->usage.cache_read_tokens, 30);
	assert_int_equal(o->usage.cache_write_tokens, 40);
	assert_true(o->usage.have_cost);
	assert_float_equal(o->usage.cost_usd, 0.0123, 1e-9);
	assert_false(o->cost_is_session_total);
	free(o);
}

static void test_gemini(void **state)
{
	/* The success fixture splits a key across two deltas: joined before
	 * redaction, it goes. */
	success_and_contradictions(CTL_PARSER_GEMINI, "22222222-3333-4444-8555-666666666666",
				   "The key is [REDACTED] and [REDACTED]. Done.");
	static const struct scase c[] = {
		{ "error-result", 1, false, "[API Error: quota]" },
		/* A fatal error on stderr, the secret in it redacted. */
		{ "stderr-error", 41, false,
		  "auth failed: [REDACTED]; authentication failed (exit status 41)" },
		/* An error event under a success result with exit 0. */
		{ "error-event", 0, false, "Model stream ended without a finish reason." },
		{ "warning", 0, true, NULL },
		{ "no-result", 0, false, NO_RESULT },
		{ "no-result", 53, false, NO_RESULT "; turn limit reached (exit status 53)" },
		{ "no-result", 55, false, "untrusted workspace (exit status 55)" },
		{ "no-result", 130, false, "cancelled (exit status 130)" },
		{ "truncated", 0, false, "truncated" },
		{ "lying", 0, false, NO_RESULT },
		{ "junk-after", 0, false, "the output went on after the agent's result" },
	};
	run_cases(CTL_PARSER_GEMINI, c, sizeof(c) / sizeof(c[0]));
}

static void test_codex(void **state)
{
	success_and_contradictions(CTL_PARSER_CODEX, "01a23592-0000-7000-8000-000000000001",
				   "Done with [REDACTED]");
	static const struct scase c[] = {
		{ "failed", 1, false, "unexpected status 401" },
		/* An error that is not a reconnect notice ends the turn, even
		 * when turn.completed follows. */
		{ "error-then-completed", 0, false, "something broke" },
		{ "no-result", 0, false, NO_RESULT },
		{ "truncated", 0, false, "truncated" },
		{ "lying", 0, false, NO_RESULT },
		{ "junk-after", 0, false, "the output went on after the agent's result" },
	};
	run_cases(CTL_PARSER_CODEX, c, sizeof(c) / sizeof(c[0]));
	struct ctl_outcome *o =
		check_fixture(CTL_PARSER_CODEX, "codex", "success", true, 0, false, NULL);
	assert_int_equal(o->usage.input_tokens, 1000);
	assert_int_equal(o->usage.cache_read_tokens, 200);
	assert_int_equal(o->usage.output_tokens, 50);
	assert_false(o->usage.have_cost);
	free(o);
}

static void test_opencode(void **state)
{
	success_and_contradictions(CTL_PARSER_OPENCODE, "ses_0123456789abcdefABCDEF", "All done.");
	static const struct scase c[] = {
		{ "error", 1, false, "APIError: invalid api key [REDACTED]" },
		{ "error-then-stop", 0, false, "APIError: boom" },
		{ "tool-calls-last", 0, false, NO_RESULT },
		{ "length", 0, false, "the model stopped: length" },
		{ "no-result", 0, false, NO_RESULT },
		{ "truncated", 0, false, "truncated" },
		{ "lying", 0, false, NO_RESULT },
		{ "junk-after", 0, false, "the output went on after the agent's result" },
	};
	run_cases(CTL_PARSER_OPENCODE, c, sizeof(c) / sizeof(c[0]));
	/* Cost and tokens summed over every step. */
	struct ctl_outcome *o =
		check_fixture(CTL_PARSER_OPENCODE, "opencode", "success", true, 0, false, NULL);
	assert_true(o->usage.have_cost);
	assert_float_equal(o->usage.cost_usd, 0.03, 1e-9);
	assert_int_equal(o->usage.input_tokens, 300);
	assert_int_equal(o->usage.output_tokens, 34);
	assert_int_equal(o->usage.cache_read_tokens, 10);
	assert_int_equal(o->usage.cache_write_tokens, 14);
	free(o);
}

static void test_pi(void **state)
{
	success_and_contradictions(CTL_PARSER_PI, "01a23595-0000-7000-8000-00000000abcd",
				   "Done: [REDACTED]");
	static const struct scase c[] = {
		/* JSON mode exits 0 after an error: the stream says. */
		{ "error-exit0", 0, false, "the model stopped: error: 401 invalid x-api-key" },
		{ "aborted", 0, false, "the model stopped: aborted" },
		{ "length", 0, false, "the model stopped: length" },
		{ "retry-success", 0, true, NULL },
		{ "no-result", 0, false, NO_RESULT },
		{ "truncated", 0, false, "truncated" },
		{ "lying", 0, false, NO_RESULT },
		{ "junk-after", 0, false, "the output went on after the agent's result" },
	};
	run_cases(CTL_PARSER_PI, c, sizeof(c) / sizeof(c[0]));
	struct ctl_outcome *o = check_fixture(CTL_PARSER_PI, "pi", "success", true, 0, false, NULL);
	assert_int_equal(o->usage.input_tokens, 300);
	assert_int_equal(o->usage.output_tokens, 30);
	assert_float_equal(o->usage.cost_usd, 0.003, 1e-9);
	free(o);
}

/* ---- the real captures ---- */

struct rcase {
	enum ctl_parser p;
	const char *name; /* real-<name>.* */
	bool ok;
	const char *reason;  /* a part of it, or NULL */
	const char *session; /* exact, or NULL */
	const char *result;  /* exact, or NULL */
};

#define DONE "Done: wrote hello.txt and ran the command."
#define SECOND "Second turn: I remember the first."

/* clang-format off */
static const struct rcase real_cases[] = {
	{ CTL_PARSER_CLAUDE, "turn1-success", true, NULL, "00000000-0000-4000-8000-000000000001", DONE },
	{ CTL_PARSER_CLAUDE, "turn1-success-json", true, NULL, "00000000-0000-4000-8000-000000000002", DONE },
	{ CTL_PARSER_CLAUDE, "turn2-resume", true, NULL, "00000000-0000-4000-8000-000000000001", SECOND },
	/* without the permission bypass: tools refused, the agent's success stands */
	{ CTL_PARSER_CLAUDE, "turn1-no-bypass", true, NULL, "22222222-3333-4444-8555-666666666666", DONE },
	{ CTL_PARSER_CLAUDE, "api-401", false, "Invalid API key", "00000000-0000-4000-8000-000000000003", "" },
	{ CTL_PARSER_CLAUDE, "api-401-json", false, "Invalid API key", "00000000-0000-4000-8000-000000000004", "" },
	{ CTL_PARSER_CLAUDE, "api-429", false, "API Error: Request rejected (429)", NULL, "" },
	{ CTL_PARSER_CLAUDE, "api-500", false, "API Error: 500 Internal server error", NULL, "" },
	{ CTL_PARSER_CLAUDE, "max-turns", false, "error_max_turns: Reached maximum number of turns (1)", NULL, "" },
	{ CTL_PARSER_CLAUDE, "resume-unknown", false, "error_during_execution: No conversation found with session ID", NULL, "" },
	{ CTL_PARSER_CLAUDE, "stream-error", false, "API Error: 529 Overloaded", NULL, "" },
	{ CTL_PARSER_CLAUDE, "stream-truncated", false, "Connection to the API was lost", NULL, "" },
	{ CTL_PARSER_GEMINI, "turn1-success", true, NULL, "00000000-0000-4000-8000-000000000001", DONE },
	{ CTL_PARSER_GEMINI, "turn1-success-json", true, NULL, "00000000-0000-4000-8000-000000000002", DONE },
	{ CTL_PARSER_GEMINI, "turn2-resume", true, NULL, "00000000-0000-4000-8000-000000000001", SECOND },
	{ CTL_PARSER_GEMINI, "turn2-resume-json", true, NULL, "00000000-0000-4000-8000-000000000002", SECOND },
	{ CTL_PARSER_GEMINI, "turn1-no-bypass", true, NULL, "22222222-3333-4444-8555-666666666666", DONE },
	{ CTL_PARSER_GEMINI, "api-400-key", false, "API key not valid", "00000000-0000-4000-8000-000000000003", NULL },
	{ CTL_PARSER_GEMINI, "api-401", false, "Request had invalid authentication credentials", NULL, NULL },
	/* -o json: the error object on stderr after a stack trace */
	{ CTL_PARSER_GEMINI, "api-401-json", false, "Request had invalid authentication credentials", "", NULL },
	{ CTL_PARSER_GEMINI, "api-429", false, "Resource has been exhausted", NULL, NULL },
	{ CTL_PARSER_GEMINI, "api-500", false, "Internal error encountered", NULL, NULL },
	{ CTL_PARSER_GEMINI, "resume-unknown", false, NO_RESULT "; invalid input (exit status 42); stderr: Error resuming session", "", NULL },
	/* an error event and a result without error, exit 0 */
	{ CTL_PARSER_GEMINI, "stream-error", false, "Model stream ended without a finish reason.", NULL, NULL },
	{ CTL_PARSER_GEMINI, "stream-truncated", false, "[API Error: terminated]", NULL, NULL },
	{ CTL_PARSER_CODEX, "turn1-success", true, NULL, "01a23592-7233-7170-bc81-af2fb0349a0c", DONE },
	{ CTL_PARSER_CODEX, "turn2-resume", true, NULL, "01a23592-7233-7170-bc81-af2fb0349a0c", SECOND },
	{ CTL_PARSER_CODEX, "turn1-no-bypass", true, NULL, "01a235a1-1cbe-7581-8253-d7700d164ada", DONE },
	/* error lines on the way to a success: WebSocket retries, then HTTPS */
	{ CTL_PARSER_CODEX, "turn1-websocket-fallback", true, NULL, "01a235a0-fee6-7710-a919-99bf66a21c4d", DONE },
	{ CTL_PARSER_CODEX, "api-401", false, "unexpected status 401 Unauthorized", NULL, "" },
	{ CTL_PARSER_CODEX, "api-429", false, "exceeded retry limit, last status: 429", NULL, "" },
	{ CTL_PARSER_CODEX, "api-500", false, "high demand", NULL, "" },
	{ CTL_PARSER_CODEX, "resume-unknown", false, NO_RESULT "; exit status 1; stderr: Error: thread/resume", "", "" },
	{ CTL_PARSER_CODEX, "stream-error", false, "stream disconnected before completion", NULL, "" },
	{ CTL_PARSER_CODEX, "stream-truncated", false, "stream disconnected before completion", NULL, "" },
	{ CTL_PARSER_OPENCODE, "turn1-success", true, NULL, "ses_dca69cd2fffeaOqD31yQCvOtjn", DONE },
	{ CTL_PARSER_OPENCODE, "turn2-resume", true, NULL, "ses_dca69cd2fffeaOqD31yQCvOtjn", SECOND },
	{ CTL_PARSER_OPENCODE, "turn1-no-bypass", true, NULL, "ses_dca5ced3effeYOBHQXgdN8FBYM", DONE },
	{ CTL_PARSER_OPENCODE, "api-401", false, "APIError: invalid x-api-key; exit status 1", "ses_dca6990a7ffezMA1nNZTnXel3Q", "" },
	/* retried until the exec timeout killed it (exit 124 from the exec) */
	{ CTL_PARSER_OPENCODE, "api-500", false, NO_RESULT "; exit status 124; stderr: airlock: the command timed out", "", "" },
	{ CTL_PARSER_OPENCODE, "stream-error", false, NO_RESULT "; exit status 124", "ses_dca687645ffe8LEAaCeWSSPZzq", "" },
	{ CTL_PARSER_OPENCODE, "stream-truncated", false, NO_RESULT "; exit status 124", NULL, NULL },
	/* stderr in colour: the escape sequences do not reach the reason */
	{ CTL_PARSER_OPENCODE, "resume-unknown", false, NO_RESULT "; exit status 1; stderr: Error: Session not found", "", "" },
	{ CTL_PARSER_PI, "turn1-success", true, NULL, "01a23595-104b-768b-9c9f-10f9a9a7d322", DONE },
	{ CTL_PARSER_PI, "openai-gpt-4.1-turn1-success", true, NULL, "01a23595-a0e7-703a-b040-65d8f3bbc791", DONE },
	{ CTL_PARSER_PI, "openai-gpt-5-turn1-success", true, NULL, "01a23595-92b0-752a-a8f1-960a479aa18f", DONE },
	{ CTL_PARSER_PI, "chat-completions-turn1-success", true, NULL, "01a235a5-81e2-70bb-8704-cd2f22b18c59", DONE },
	{ CTL_PARSER_PI, "chat-completions-turn2-resume", true, NULL, "01a235a5-81e2-70bb-8704-cd2f22b18c59", SECOND },
	{ CTL_PARSER_PI, "turn1-no-bypass", true, NULL, "01a235a3-00ab-72a8-bd0a-ab0b3d4fda60", DONE },
	{ CTL_PARSER_PI, "turn2-resume", true, NULL, "01a23595-104b-768b-9c9f-10f9a9a7d322", SECOND },
	/* exit 0 each time: the stream alone says it failed */
	{ CTL_PARSER_PI, "api-401", false, "the model stopped: error: 401", NULL, "" },
	{ CTL_PARSER_PI, "api-429", false, "the model stopped: error: 429", NULL, "" },
	{ CTL_PARSER_PI, "api-500", false, "the model stopped: error: 500", NULL, "" },
	{ CTL_PARSER_PI, "resume-unknown", false, NO_RESULT "; exit status 1; stderr: No session found", "", "" },
	{ CTL_PARSER_PI, "stream-error", false, "overloaded_error", NULL, NULL },
	{ CTL_PARSER_PI, "stream-truncated", false, "the model stopped: error: terminated", NULL, NULL },
};
/* clang-format on */

static void test_real_captures(void **state)
{
	for (size_t i = 0; i < sizeof(real_cases) / sizeof(real_cases[0]); i++) {
		const struct rcase *c = &real_cases[i];
		char name[128];
		snprintf(name, sizeof(name), "real-%s", c->name);
		struct ctl_outcome *o =
			check_fixture(c->p, ctl_parser_name(c->p), name, true, 0, true, NULL);
		if (o->succeeded != c->ok || (c->reason && !strstr(o->reason, c->reason)))
			fail_msg("%s/%s: %s, reason \"%s\"", ctl_parser_name(c->p), name,
				 o->succeeded ? "succeeded" : "failed", o->reason);
		if (c->session)
			assert_string_equal(o->agent_session, c->session);
		if (c->result)
			assert_string_equal(o->result_text, c->result);
		free(o);
	}
}

static void test_real_details(void **state)
{
	/* Claude on --resume counts the earlier turn's cost in its total. */
	struct ctl_outcome *o = check_fixture(CTL_PARSER_CLAUDE, "claude", "real-turn2-resume",
					      true, 0, true, NULL);
	assert_true(o->cost_is_session_total);
	assert_float_equal(o->usage.cost_usd, 0.204856, 1e-9);
	assert_int_equal(o->usage.input_tokens, 12840);
	assert_int_equal(o->usage.output_tokens, 12);
	free(o);
	o = check_fixture(CTL_PARSER_CLAUDE, "claude", "real-turn1-success", true, 0, true, NULL);
	assert_false(o->cost_is_session_total);
	assert_float_equal(o->usage.cost_usd, 0.153256, 1e-9);
	free(o);

	/* The events of a real run, in order. */
	struct events ev;
	o = check_fixture(CTL_PARSER_CLAUDE, "claude", "real-turn1-success", true, 0, true, &ev);
	const char *want[] = { "status ",
			       "tool_call {\"id\":\"toolu_model_0003_0\",\"name\":\"Write\"",
			       "tool_result {\"id\":\"toolu_model_0003_0\"",
			       "tool_call {\"id\":\"toolu_model_0004_0\",\"name\":\"Bash\"",
			       "tool_result {\"id\":\"toolu_model_0004_0\",\"output\":\"0\"",
			       "text {\"text\":\"" DONE "\"}",
			       "usage {\"input_tokens\":38134" };
	const char *at = ev.all.data;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (strncmp(at, want[i], strlen(want[i])) != 0)
			fail_msg("event %zu: want \"%s\", got \"%.120s\"", i, want[i], at);
		at = strchr(at, '\n') + 1;
	}
	assert_int_equal(ev.n, 7);
	buf_free(&ev.all);
	free(o);

	/* Claude without the bypass: each refusal an error event. */
	o = check_fixture(CTL_PARSER_CLAUDE, "claude", "real-turn1-no-bypass", true, 0, true, &ev);
	assert_non_null(strstr(ev.all.data, "error {\"message\":\"permission denied (Write): "));
	assert_non_null(strstr(ev.all.data, "error {\"message\":\"permission denied (Bash): "));
	buf_free(&ev.all);
	free(o);

	/* Codex's reconnect notices are status, the final error an error. */
	o = check_fixture(CTL_PARSER_CODEX, "codex", "real-api-401", true, 0, true, &ev);
	assert_non_null(strstr(ev.all.data, "status {\"message\":\"Reconnecting... 1/5"));
	assert_non_null(strstr(ev.all.data, "error {\"message\":\"unexpected status 401"));
	buf_free(&ev.all);
	free(o);

	/* Gemini's deltas make one text event. */
	o = check_fixture(CTL_PARSER_GEMINI, "gemini", "real-turn1-success", true, 0, true, &ev);
	assert_non_null(strstr(ev.all.data, "\ntext {\"text\":\"" DONE "\"}\n"));
	assert_int_equal(o->usage.input_tokens, 36903);
	assert_int_equal(o->usage.output_tokens, 48);
	buf_free(&ev.all);
	free(o);

	/* opencode: cost and tokens summed over its steps. */
	o = check_fixture(CTL_PARSER_OPENCODE, "opencode", "real-turn1-success", true, 0, true,
			  NULL);
	assert_int_equal(o->usage.input_tokens, 7714 + 7803 + 7878);
	assert_int_equal(o->usage.output_tokens, 36);
	assert_true(o->usage.have_cost);
	assert_float_equal(o->usage.cost_usd, 0.023322 + 0.023589 + 0.023814, 1e-9);
	free(o);

	/* pi: usage summed over its assistant messages, cost included. */
	o = check_fixture(CTL_PARSER_PI, "pi", "real-turn1-success", true, 0, true, NULL);
	assert_int_equal(o->usage.input_tokens, 1471 + 1561 + 1634);
	assert_true(o->usage.have_cost);
	assert_float_equal(o->usage.cost_usd, 0.004593 + 0.004863 + 0.005082, 1e-9);
	free(o);
}

/* ---- streams built here ---- */

/* A whole run from pieces; returns the outcome. */
static struct ctl_outcome *run_text(enum ctl_parser p, const char *out, size_t len, int status,
				    struct events *ev)
{
	return run(p, out, len, "", 0, true, status, WHOLE, ev);
}

#define CLAUDE_INIT \
	"{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s-1\",\"model\":\"m\"}\n"
#define CLAUDE_OK                                                                            \
	"{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"ok\"," \
	"\"session_id\":\"s-1\",\"usage\":{}}\n"

static void test_flood_lines(void **state)
{
	/* 100,000 lines, then the result: every one an event, nothing kept. */
	struct buf in = BUF_INIT(64u * 1024 * 1024);
	assert_int_equal(buf_append_str(&in, CLAUDE_INIT), 0);
	for (int i = 0; i < 100000; i++)
		assert_int_equal(buf_appendf(&in,
					     "{\"type\":\"assistant\",\"message\":{\"content\":[{"
					     "\"type\":\"text\",\"text\":\"line %d\"}]}}\n",
					     i),
				 0);
	assert_int_equal(buf_append_str(&in, CLAUDE_OK), 0);
	struct events ev = { .all = BUF_INIT(0), .count_only = true };
	struct redactor *red = vault();
	struct ctl_agentout *a = NULL;
	assert_int_equal(ctl_agentout_new(CTL_PARSER_CLAUDE, red, on_event, &ev, &a), 0);
	size_t before = mallinfo2().uordblks, peak = before;
	for (size_t i = 0; i < in.len; i += 4096) {
		size_t k = in.len - i < 4096 ? in.len - i : 4096;
		assert_int_equal(ctl_agentout_feed(a, in.data + i, k), 0);
		size_t now = mallinfo2().uordblks;
		if (now > peak)
			peak = now;
	}
	struct ctl_outcome *o = malloc(sizeof(*o));
	assert_int_equal(ctl_agentout_finish(a, true, 0, o), 0);
	assert_true(o->succeeded);
	assert_int_equal(ev.n, 100000 + 2); /* + status, usage */
	/* Memory does not follow the number of lines (mallinfo2 sees glibc's
	 * heap; under ASan it sees nothing and this checks nothing). */
	assert_true(peak - before < 1024 * 1024);
	free(o);
	ctl_agentout_free(a);
	redactor_free(red);
	buf_free(&in);
}

/* Feeds one line of len bytes in 1 MiB pieces (optionally its newline). */
static void feed_long_line(struct ctl_agentout *a, size_t len, bool newline, size_t *peak)
{
	static char chunk[1024 * 1024];
	memset(chunk, 'x', sizeof(chunk));
	chunk[0] = '{';
	size_t before = mallinfo2().uordblks;
	for (size_t i = 0; i < len; i += sizeof(chunk)) {
		size_t k = len - i < sizeof(chunk) ? len - i : sizeof(chunk);
		assert_int_equal(ctl_agentout_feed(a, chunk, k), 0);
		size_t now = mallinfo2().uordblks;
		if (now > before && now - before > *peak)
			*peak = now - before;
	}
	if (newline)
		assert_int_equal(ctl_agentout_feed(a, "\n", 1), 0);
}

static void test_overlong_lines(void **state)
{
	struct redactor *red = vault();
	for (int where = 0; where < 3; where++) {
		/* 0: before the result (dropped, the result counts); 1: after
		 * it (contradicts it); 2: the last line, cut (truncated). */
		struct events ev = { .all = BUF_INIT(1 << 20) };
		struct ctl_agentout *a = NULL;
		assert_int_equal(ctl_agentout_new(CTL_PARSER_CLAUDE, red, on_event, &ev, &a), 0);
		assert_int_equal(ctl_agentout_feed(a, CLAUDE_INIT, strlen(CLAUDE_INIT)), 0);
		size_t peak = 0;
		if (where == 1)
			assert_int_equal(ctl_agentout_feed(a, CLAUDE_OK, strlen(CLAUDE_OK)), 0);
		feed_long_line(a, 3 * (size_t)CTL_LINE_MAX + 5, where != 2, &peak);
		if (where == 0)
			assert_int_equal(ctl_agentout_feed(a, CLAUDE_OK, strlen(CLAUDE_OK)), 0);
		/* Never held whole: at most one line's limit in memory. */
		assert_true(peak <= (size_t)CTL_LINE_MAX + 1024 * 1024);
		struct ctl_outcome *o = malloc(sizeof(*o));
		assert_int_equal(ctl_agentout_finish(a, true, 0, o), 0);
		char want[128];
		snprintf(want, sizeof(want), "error {\"message\":\"a line of %zu bytes was dropped",
			 3 * (size_t)CTL_LINE_MAX + 5);
		assert_non_null(strstr(ev.all.data, want));
		if (where == 0)
			assert_true(o->succeeded);
		else if (where == 1)
			assert_non_null(strstr(o->reason,
					       "went on after the agent's result (1 line, "
					       "the first a line over the length limit)"));
		else
			assert_non_null(strstr(o->reason, "truncated"));
		free(o);
		buf_free(&ev.all);
		ctl_agentout_free(a);
	}
	redactor_free(red);
}

static void test_line_at_limit_is_kept(void **state)
{
	/* A line of exactly CTL_LINE_MAX bytes is read: a text event cut to
	 * the event bound. */
	const char *head = "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\","
			   "\"text\":\"";
	const char *tail = "\"}]}}";
	size_t len = CTL_LINE_MAX;
	char *line = malloc(len + 1);
	assert_non_null(line);
	memset(line, 'a', len);
	memcpy(line, head, strlen(head));
	memcpy(line + len - strlen(tail), tail, strlen(tail));
	line[len] = '\n';
	struct events ev = { .all = BUF_INIT(1 << 20) };
	struct ctl_outcome *o = run_text(CTL_PARSER_CLAUDE, line, len + 1, 0, &ev);
	size_t text_len = len - strlen(head) - strlen(tail);
	char marker[64];
	snprintf(marker, sizeof(marker), "[...%zu bytes cut]\"}",
		 text_len - (CTL_EVENT_TEXT_MAX - 40));
	assert_non_null(strstr(ev.all.data, marker));
	assert_non_null(strstr(o->reason, NO_RESULT));
	free(o);
	free(line);
	buf_free(&ev.all);
}

static void test_bounds_and_utf8(void **state)
{
	/* 100,000 two-byte characters: cut on a character boundary. */
	struct buf in = BUF_INIT(1 << 22);
	assert_int_equal(buf_append_str(&in,
					CLAUDE_INIT "{\"type\":\"assistant\",\"message\":{"
						    "\"content\":[{\"type\":\"text\",\"text\":\""),
			 0);
	for (int i = 0; i < 100000; i++)
		assert_int_equal(buf_append_str(&in, "\xc3\xa9"), 0);
	/* Invalid bytes, a lone surrogate escape, a NUL escape. */
	assert_int_equal(
		buf_append_str(&in, "\"}]}}\n{\"type\":\"assistant\",\"message\":{"
				    "\"content\":[{\"type\":\"text\",\"text\":\"a\xff"
				    "b\xc3("
				    "c\\ud800d\\udc00e\\ud83d\\ude00f\\u0000g\"}]}}\n" CLAUDE_OK),
		0);
	for (int sp = 0; sp < 3; sp++) {
		struct events ev = { .all = BUF_INIT(1 << 22) };
		struct ctl_outcome *o = run(CTL_PARSER_CLAUDE, in.data, in.len, "", 0, true, 0,
					    (enum split)sp, &ev);
		assert_true(o->succeeded);
		/* The first text: whole characters, then the marker. */
		const char *t = strstr(ev.all.data, "text {\"text\":\"");
		assert_non_null(t);
		const char *m = strstr(t, "[...");
		assert_non_null(m);
		assert_true((m - t - 14) % 2 == 0);
		assert_true(m - t - 14 <= (long)CTL_EVENT_TEXT_MAX);
		/* U+FFFD for each invalid byte, the lone surrogates and the
		 * NUL; the pair kept. */
		assert_non_null(strstr(ev.all.data, "text {\"text\":\"a\xef\xbf\xbd"
						    "b\xef\xbf\xbd("
						    "c\xef\xbf\xbd"
						    "d\xef\xbf\xbd"
						    "e\xf0\x9f\x98\x80"
						    "f\xef\xbf\xbdg\"}"));
		free(o);
		buf_free(&ev.all);
	}
	buf_free(&in);
}

static void test_too_many_values(void **state)
{
	/* A line whose tree would be huge is refused before it is built. */
	struct buf in = BUF_INIT(1 << 22);
	assert_int_equal(buf_append_str(&in, CLAUDE_INIT "{\"type\":\"user\",\"x\":["), 0);
	for (int i = 0; i < 300000; i++)
		assert_int_equal(buf_append_str(&in, i ? ",[]" : "[]"), 0);
	assert_int_equal(buf_append_str(&in, "]}\n" CLAUDE_OK), 0);
	struct events ev = { .all = BUF_INIT(1 << 20) };
	struct ctl_outcome *o = run_text(CTL_PARSER_CLAUDE, in.data, in.len, 0, &ev);
	assert_true(o->succeeded);
	assert_non_null(strstr(ev.all.data, "error {\"message\":\"a line with more than"));
	free(o);
	buf_free(&ev.all);
	buf_free(&in);
}

static void test_big_and_deep_events(void **state)
{
	/* A tool input of ten 60 KiB strings, nested 100 deep in another:
	 * each event within CTL_EVENT_MAX, still valid (on_event checks). */
	struct buf in = BUF_INIT(1 << 24);
	assert_int_equal(buf_append_str(&in,
					CLAUDE_INIT "{\"type\":\"assistant\",\"message\":{"
						    "\"content\":[{\"type\":\"tool_use\",\"id\":"
						    "\"t1\",\"name\":\"Big\",\"input\":{"),
			 0);
	for (int k = 0; k < 10; k++) {
		assert_int_equal(buf_appendf(&in, "%s\"k%d\":\"", k ? "," : "", k), 0);
		for (int i = 0; i < 60 * 1024; i++)
			assert_int_equal(buf_append_char(&in, 'z'), 0);
		assert_int_equal(buf_append_char(&in, '"'), 0);
	}
	assert_int_equal(buf_append_str(&in, "}},{\"type\":\"tool_use\",\"id\":\"t2\",\"name\":"
					     "\"Deep\",\"input\":"),
			 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(buf_append_str(&in, "{\"a\":"), 0);
	assert_int_equal(buf_append_str(&in, "1"), 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(buf_append_char(&in, '}'), 0);
	assert_int_equal(buf_append_str(&in, "}]}}\n" CLAUDE_OK), 0);
	struct events ev = { .all = BUF_INIT(1 << 22) };
	struct ctl_outcome *o = run_text(CTL_PARSER_CLAUDE, in.data, in.len, 0, &ev);
	assert_true(o->succeeded);
	assert_non_null(
		strstr(ev.all.data, "tool_call {\"id\":\"t1\",\"name\":\"Big\",\"input\":\""));
	assert_non_null(strstr(ev.all.data, "[...nested too deep]"));
	free(o);
	buf_free(&ev.all);
	buf_free(&in);
}

static void test_callback_stops(void **state)
{
	struct fixture f;
	fixture_load("claude", "success", &f);
	struct events ev = { .all = BUF_INIT(1 << 20), .stop_at = 2 };
	struct redactor *red = vault();
	struct ctl_agentout *a = NULL;
	assert_int_equal(ctl_agentout_new(CTL_PARSER_CLAUDE, red, on_event, &ev, &a), 0);
	assert_int_equal(ctl_agentout_feed(a, f.out, f.out_len), 7);
	/* Stopped: nothing more is read or said. */
	assert_int_equal(ctl_agentout_feed(a, f.out, f.out_len), 7);
	assert_int_equal(ev.n, 2);
	struct ctl_outcome *o = malloc(sizeof(*o));
	assert_int_equal(ctl_agentout_finish(a, true, 0, o), 0);
	assert_false(o->succeeded);
	assert_non_null(strstr(o->reason, "not read to its end"));
	assert_int_equal(ev.n, 2);
	free(o);
	ctl_agentout_free(a);
	redactor_free(red);
	buf_free(&ev.all);
	fixture_free(&f);
}

static void test_session_id_checked(void **state)
{
	const char *in = "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"--evil x\"}\n"
			 "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,"
			 "\"session_id\":\"--evil x\"}\n";
	struct events ev = { .all = BUF_INIT(1 << 20) };
	struct ctl_outcome *o = run_text(CTL_PARSER_CLAUDE, in, strlen(in), 0, &ev);
	assert_true(o->succeeded);
	assert_string_equal(o->agent_session, "");
	assert_non_null(strstr(ev.all.data, "session id was ignored"));
	/* Said once. */
	const char *first = strstr(ev.all.data, "ignored");
	assert_null(strstr(first + 1, "ignored"));
	free(o);
	buf_free(&ev.all);
}

static void test_claude_permission_denied(void **state)
{
	/* Refused tool calls are errors in the stream; the result decides. */
	const char *in = CLAUDE_INIT
		"{\"type\":\"system\",\"subtype\":\"permission_denied\","
		"\"tool_name\":\"Write\",\"message\":\"not granted\"}\n" CLAUDE_OK;
	struct events ev = { .all = BUF_INIT(1 << 20) };
	struct ctl_outcome *o = run_text(CTL_PARSER_CLAUDE, in, strlen(in), 0, &ev);
	assert_true(o->succeeded);
	assert_non_null(strstr(ev.all.data,
			       "error {\"message\":\"permission denied (Write): not granted\"}"));
	free(o);
	buf_free(&ev.all);
}

static void test_blank_and_crlf_lines(void **state)
{
	const char *in = "\n  \r\n" CLAUDE_INIT "\r\n\n"
			 "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false}\r\n\n\n";
	struct events ev = { .all = BUF_INIT(1 << 20) };
	struct ctl_outcome *o = run_text(CTL_PARSER_CLAUDE, in, strlen(in), 0, &ev);
	assert_true(o->succeeded);
	free(o);
	buf_free(&ev.all);
}

static void test_no_redactor(void **state)
{
	/* red may be NULL: the known shapes still go. */
	const char *in = CLAUDE_INIT "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":"
				     "\"text\",\"text\":\"" SHAPE " " SECRET "\"}]}}\n" CLAUDE_OK;
	struct events ev = { .all = BUF_INIT(1 << 20) };
	struct ctl_agentout *a = NULL;
	assert_int_equal(ctl_agentout_new(CTL_PARSER_CLAUDE, NULL, on_event, &ev, &a), 0);
	assert_int_equal(ctl_agentout_feed(a, in, strlen(in)), 0);
	struct ctl_outcome *o = malloc(sizeof(*o));
	assert_int_equal(ctl_agentout_finish(a, true, 0, o), 0);
	assert_true(o->succeeded);
	assert_null(strstr(ev.all.data, SHAPE));
	assert_non_null(strstr(ev.all.data, "[REDACTED] " SECRET));
	free(o);
	ctl_agentout_free(a);
	buf_free(&ev.all);
}

static void test_stderr_tail(void **state)
{
	/* A megabyte of stderr in small pieces: its last line is the one in
	 * the reason, and only the tail is kept. */
	struct redactor *red = vault();
	struct events ev = { .all = BUF_INIT(1 << 20) };
	struct ctl_agentout *a = NULL;
	assert_int_equal(ctl_agentout_new(CTL_PARSER_CODEX, red, on_event, &ev, &a), 0);
	char line[64];
	for (int i = 0; i < 20000; i++) {
		int n = snprintf(line, sizeof(line), "noise line %d\n", i);
		assert_int_equal(ctl_agentout_feed_stderr(a, line, (size_t)n), 0);
	}
	const char *last = "Error: the end " SECRET "\n";
	assert_int_equal(ctl_agentout_feed_stderr(a, last, strlen(last)), 0);
	struct ctl_outcome *o = malloc(sizeof(*o));
	assert_int_equal(ctl_agentout_finish(a, true, 2, o), 0);
	assert_false(o->succeeded);
	assert_string_equal(o->reason,
			    NO_RESULT "; exit status 2; stderr: Error: the end [REDACTED]");
	free(o);
	ctl_agentout_free(a);
	redactor_free(red);
	buf_free(&ev.all);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_claude),
		cmocka_unit_test(test_gemini),
		cmocka_unit_test(test_codex),
		cmocka_unit_test(test_opencode),
		cmocka_unit_test(test_pi),
		cmocka_unit_test(test_real_captures),
		cmocka_unit_test(test_real_details),
		cmocka_unit_test(test_flood_lines),
		cmocka_unit_test(test_overlong_lines),
		cmocka_unit_test(test_line_at_limit_is_kept),
		cmocka_unit_test(test_bounds_and_utf8),
		cmocka_unit_test(test_too_many_values),
		cmocka_unit_test(test_big_and_deep_events),
		cmocka_unit_test(test_callback_stops),
		cmocka_unit_test(test_session_id_checked),
		cmocka_unit_test(test_claude_permission_denied),
		cmocka_unit_test(test_blank_and_crlf_lines),
		cmocka_unit_test(test_no_redactor),
		cmocka_unit_test(test_stderr_tail),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

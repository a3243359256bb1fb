/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Agent output: lines, then records, then events and an outcome.
 *
 * Lines: stdout is cut at '\n' whatever the pieces it comes in, so the
 * events do not depend on the split. A line longer than CTL_LINE_MAX is
 * never held: its bytes are counted and dropped up to its newline.
 *
 * Records: each line is made safe for jansson first (invalid UTF-8 bytes
 * and lone UTF-16 surrogate escapes replaced, the number of values
 * bounded so that a line's tree stays small), then parsed. What a record
 * means is each agent's business (the handlers below); what they share is
 * the envelope: the record that says how the run ended (Claude's result,
 * Gemini's result, Codex's turn.completed/turn.failed, opencode's
 * step_finish, pi's agent_end). The last envelope decides, and any line
 * after it contradicts it.
 *
 * Events: every string the agent printed goes through redact() (the
 * redactor and the known shapes) on its whole length first, then is made
 * valid UTF-8 and cut to CTL_EVENT_TEXT_MAX on a character boundary, so
 * a cut can never leave part of a secret. Text that arrives in pieces
 * (Gemini's deltas) is joined before it is redacted, so that a secret
 * split across pieces is still found.
 *
 * Where the CLIs' real output (tests/fixtures/agent-output/<agent>/real-*)
 * differs from what /work/shared/AGENT-CLIS.md says, the real one is
 * followed:
 * - Claude Code: an API failure comes as a synthetic assistant message
 *   (model "<synthetic>", "error", "is_api_error_message") before the
 *   result; the result also has terminal_reason ("completed" on success),
 *   and on --resume total_cost_usd includes the earlier turns' cost.
 * - Gemini CLI: API failures end stream-json with a result of status
 *   "error" on stdout, not "[ERROR] {json}" on stderr; -o json prints its
 *   document over several lines, and its error object on stderr after a
 *   stack trace; those runs exit with the HTTP status modulo 256 (144,
 *   145, 173, 244), not 41-55; a stream that breaks gives an error event
 *   and a result without an error object, exit status 0.
 * - Codex: "error" lines "Reconnecting... n/m (...)" are retries, followed
 *   by turn.completed when one works; the fatal error comes twice (error,
 *   then turn.failed). An item of type error is a warning.
 * - pi: a failed run is retried after its agent_end (auto_retry_start,
 *   another agent_start ... agent_end, then auto_retry_end).
 * - opencode: as documented; on 5xx or a broken stream it retries until
 *   killed, printing step_start lines and no step_finish.
 */
#include "control/agentout.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/cleanup.h"

/* Values of one line jansson may build (each some 50-100 bytes of tree):
 * a line of 4 MiB of "[]," would otherwise cost hundreds of MiB. */
#define LINE_VALUES_MAX 200000u
/* Nesting kept in a tool's input or output; deeper levels become text. */
#define VALUE_DEPTH_MAX 32
/* Object keys in events (a key is not where text goes). */
#define KEY_MAX 1024u
/* Events: compact, fields in the order written, costs to 12 digits. */
#define DUMP_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12))
/* Room kept for the "[...N bytes cut]" marker. */
#define CUT_MARK_MAX 40u

enum env {
	ENV_NONE = 0, /* no envelope, or one that says more follows */
	ENV_OK,
	ENV_FAILED,
};

struct ctl_agentout {
	enum ctl_parser parser;
	const struct redactor *red;
	ctl_event_fn fn;
	void *ud;
	int stop;  /* the callback's non-zero return; sticky */
	int error; /* a negative errno that stopped the reading (memory) */

	struct buf line;  /* the line being read, its newline not yet seen */
	bool dropping;	  /* inside an overlong line: dropped up to its newline */
	uint64_t dropped; /* its length so far */

	char *err_tail; /* stderr's last bytes: 2 * CTL_STDERR_KEEP, amortized */
	size_t err_len;

	/* What the output said so far. */
	enum env env;
	char env_reason[CTL_REASON_MAX + 1];
	uint64_t after_env;   /* lines after the last envelope */
	char after_what[128]; /* the first of them, described */
	bool fatal;	      /* an error record no later success undoes */
	char fatal_reason[CTL_REASON_MAX + 1];
	bool cut_line;	   /* the output ended inside a line that is not JSON */
	bool saw_envelope; /* any envelope at all */
	struct ctl_usage usage;
	bool cost_total; /* Claude: usage.cost_usd is the session's running total */
	char session[CTL_AGENT_SID_MAX + 1];
	bool bad_session;   /* an id was refused (said once) */
	struct buf result;  /* the final answer, as printed (redacted on the way out) */
	struct buf pending; /* Gemini: assistant deltas being joined */
	bool doc_mode;	    /* Gemini -o json: one object over several lines */
	struct buf doc;
	bool doc_overflow;
	char pi_stop[32];    /* pi: the last assistant message's stopReason */
	struct buf pi_error; /* and its errorMessage */
};

/* clang-format off */
static const char *const parser_names[] = {
	[CTL_PARSER_CLAUDE] = "claude",
	[CTL_PARSER_GEMINI] = "gemini",
	[CTL_PARSER_CODEX] = "codex",
	[CTL_PARSER_OPENCODE] = "opencode",
	[CTL_PARSER_PI] = "pi",
};
/* clang-format on */

int ctl_parser_from_name(const char *name, enum ctl_parser *ret)
{
	if (!name)
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(parser_names); i++)
		if (strcmp(name, parser_names[i]) == 0) {
			*ret = (enum ctl_parser)i;
			return 0;
		}
	return -EINVAL;
}

const char *ctl_parser_name(enum ctl_parser p)
{
	if ((unsigned)p >= ARRAY_SIZE(parser_names))
		return "unknown";
	return parser_names[p];
}

/* ---- UTF-8 ---- */

/* Length of the valid UTF-8 sequence at p (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	unsigned char c = p[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f; /* no surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else {
		return 0;
	}
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t k = 2; k < len; k++)
		if ((p[k] & 0xc0) != 0x80)
			return 0;
	return len;
}

#define REPLACEMENT "\xef\xbf\xbd"

/* Length of the character at p as it goes into an event, 0 when it is
 * replaced: an invalid byte, or NUL (valid JSON as \u0000, but refused by
 * many readers, jansson's default among them). */
static size_t event_char(const unsigned char *p, size_t n)
{
	return p[0] ? utf8_seq(p, n) : 0;
}

/*
 * Appends s as valid UTF-8 (an invalid byte or a NUL becomes U+FFFD), at
 * most max bytes: when it does not fit, it is cut on a character boundary
 * and "[...N bytes cut]" says how much of it is missing.
 */
static int append_bounded(struct buf *out, const char *s, size_t len, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t total = 0;
	for (size_t i = 0; i < len;) {
		size_t k = event_char(p + i, len - i);
		total += k ? k : 3;
		i += k ? k : 1;
	}
	size_t room = total <= max ? max : (max > CUT_MARK_MAX ? max - CUT_MARK_MAX : 0);
	size_t used = 0;
	int rc = buf_reserve(out, total < room ? total : room);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < len;) {
		size_t k = event_char(p + i, len - i);
		size_t w = k ? k : 3;
		if (used + w > room)
			break;
		rc = buf_append(out, k ? s + i : REPLACEMENT, w);
		if (rc < 0)
			return rc;
		used += w;
		i += k ? k : 1;
	}
	if (used < total)
		rc = buf_appendf(out, "[...%zu bytes cut]", total - used);
	return rc;
}

/* text, redacted then bounded, into out (appended). */
static int clean_text(const struct ctl_agentout *a, const char *s, size_t len, size_t max,
		      struct buf *out)
{
	/* A marker replaces at least one byte of a header's value ("x-api-key:
	 * a" at least 11 bytes): the redacted text is under twice the input. */
	_cleanup_buf_ struct buf red = BUF_INIT(2 * len + 64);
	int rc = redact(a->red, s ? s : "", len, &red);
	if (rc < 0)
		return rc;
	rc = append_bounded(out, red.data ? red.data : "", red.len, max);
	if (red.data)
		explicit_bzero(red.data, red.len);
	return rc;
}

/* A JSON string of text, redacted and bounded. NULL when out of memory. */
static json_t *jtext(const struct ctl_agentout *a, const char *s, size_t len)
{
	_cleanup_buf_ struct buf out = BUF_INIT(CTL_EVENT_TEXT_MAX);
	if (clean_text(a, s, len, CTL_EVENT_TEXT_MAX, &out) < 0)
		return NULL;
	return json_stringn(out.data ? out.data : "", out.len);
}

static json_t *jtext_str(const struct ctl_agentout *a, const char *s)
{
	return jtext(a, s, s ? strlen(s) : 0);
}

/* A parsed value made fit for an event: every string and key redacted and
 * bounded, nesting cut at VALUE_DEPTH_MAX. */
static json_t *jvalue(const struct ctl_agentout *a, json_t *v, int depth)
{
	switch (json_typeof(v)) {
	case JSON_STRING:
		return jtext(a, json_string_value(v), json_string_length(v));
	case JSON_OBJECT: {
		if (depth >= VALUE_DEPTH_MAX)
			return json_string("[...nested too deep]");
		json_t *o = json_object();
		const char *key;
		size_t klen;
		json_t *val;
		json_object_keylen_foreach(v, key, klen, val)
		{
			_cleanup_buf_ struct buf k = BUF_INIT(KEY_MAX);
			json_t *c = jvalue(a, val, depth + 1);
			if (!o || !c || clean_text(a, key, klen, KEY_MAX, &k) < 0 ||
			    json_object_setn_new(o, k.data ? k.data : "", k.len, c) < 0) {
				json_decref(o);
				return NULL;
			}
		}
		return o;
	}
	case JSON_ARRAY: {
		if (depth >= VALUE_DEPTH_MAX)
			return json_string("[...nested too deep]");
		json_t *arr = json_array();
		size_t i;
		json_t *val;
		json_array_foreach(v, i, val)
		{
			if (!arr || json_array_append_new(arr, jvalue(a, val, depth + 1)) < 0) {
				json_decref(arr);
				return NULL;
			}
		}
		return arr;
	}
	default:
		/* Numbers, booleans, null: shared with the parsed tree. */
		return json_incref(v);
	}
}

/* ---- reading records ---- */

static const char *str_or(const char *s, const char *dflt)
{
	return s ? s : dflt;
}

/* A value or JSON null (json_null() is a singleton: nothing to free). */
static json_t *or_null(json_t *v)
{
	return v ? v : json_null();
}

static json_t *jget(json_t *o, const char *key)
{
	return json_is_object(o) ? json_object_get(o, key) : NULL;
}

/* The string at key, or NULL (its length in *len when given). */
static const char *jstr(json_t *o, const char *key, size_t *len)
{
	json_t *v = jget(o, key);
	if (!json_is_string(v))
		return NULL;
	if (len)
		*len = json_string_length(v);
	return json_string_value(v);
}

static bool jstr_is(json_t *o, const char *key, const char *want)
{
	const char *s = jstr(o, key, NULL);
	return s && strcmp(s, want) == 0;
}

/* A count: a non-negative number (tokens), 0 when absent or not one. */
static uint64_t jcount(json_t *o, const char *key)
{
	json_t *v = jget(o, key);
	if (json_is_integer(v))
		return json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
	if (json_is_real(v)) {
		double d = json_real_value(v);
		return d > 0 && d < 1.8e19 ? (uint64_t)d : 0;
	}
	return 0;
}

static bool jnumber(json_t *o, const char *key, double *ret)
{
	json_t *v = jget(o, key);
	if (!json_is_number(v))
		return false;
	double d = json_number_value(v);
	if (!isfinite(d) || d < 0)
		return false;
	*ret = d;
	return true;
}

/* ---- events ---- */

static int fail_mem(struct ctl_agentout *a)
{
	if (!a->error)
		a->error = -ENOMEM;
	return a->error;
}

/* Sends one event (o is consumed). An event over CTL_EVENT_MAX has its
 * structured fields flattened to bounded text; one still over is dropped,
 * saying so. */
static int emit(struct ctl_agentout *a, const char *kind, json_t *o)
{
	if (a->stop || a->error) {
		json_decref(o);
		return a->stop ? a->stop : a->error;
	}
	if (!o)
		return fail_mem(a);
	char *s = json_dumps(o, DUMP_FLAGS);
	if (s && strlen(s) > CTL_EVENT_MAX) {
		const char *key;
		json_t *val;
		void *tmp;
		json_object_foreach_safe(o, tmp, key, val)
		{
			if (!json_is_object(val) && !json_is_array(val))
				continue;
			char *flat = json_dumps(val, DUMP_FLAGS);
			_cleanup_buf_ struct buf b = BUF_INIT(CTL_EVENT_TEXT_MAX);
			if (!flat ||
			    append_bounded(&b, flat, strlen(flat), CTL_EVENT_TEXT_MAX) < 0 ||
			    json_object_set_new(o, key, json_stringn(b.data ? b.data : "", b.len)) <
				    0) {
				free(flat);
				free(s);
				json_decref(o);
				return fail_mem(a);
			}
			free(flat);
		}
		free(s);
		s = json_dumps(o, DUMP_FLAGS);
		if (s && strlen(s) > CTL_EVENT_MAX) {
			char msg[128];
			snprintf(msg, sizeof(msg), "a %s event of %zu bytes was dropped (limit %u)",
				 kind, strlen(s), CTL_EVENT_MAX);
			free(s);
			json_decref(o);
			kind = "error";
			o = json_pack("{ss}", "message", msg);
			s = o ? json_dumps(o, JSON_COMPACT) : NULL;
		}
	}
	json_decref(o);
	if (!s)
		return fail_mem(a);
	int rc = a->fn(kind, s, a->ud);
	free(s);
	if (rc)
		a->stop = rc;
	return rc;
}

static int emit_msg(struct ctl_agentout *a, const char *kind, const char *msg, size_t len)
{
	json_t *t = jtext(a, msg, len);
	if (!t)
		return fail_mem(a);
	return emit(a, kind, json_pack("{so}", "message", t));
}

__attribute__((format(printf, 3, 4))) static int emitf(struct ctl_agentout *a, const char *kind,
						       const char *fmt, ...)
{
	_cleanup_buf_ struct buf b = BUF_INIT(CTL_EVENT_TEXT_MAX);
	va_list ap;
	va_start(ap, fmt);
	int rc = buf_vappendf(&b, fmt, ap);
	va_end(ap);
	if (rc == -ENOMEM)
		return fail_mem(a);
	return emit_msg(a, kind, b.data ? b.data : "", b.len);
}

static int emit_text(struct ctl_agentout *a, const char *s, size_t len)
{
	json_t *t = jtext(a, s, len);
	if (!t)
		return fail_mem(a);
	return emit(a, "text", json_pack("{so}", "text", t));
}

/* input: a parsed value (borrowed) or NULL with input_text instead. */
static int emit_tool_call(struct ctl_agentout *a, const char *id, const char *name, json_t *input,
			  const char *input_text)
{
	json_t *i = input ? jvalue(a, input, 0) : jtext_str(a, input_text ? input_text : "");
	json_t *jid = jtext_str(a, id ? id : ""), *jname = jtext_str(a, name ? name : "");
	if (!i || !jid || !jname) {
		json_decref(i);
		json_decref(jid);
		json_decref(jname);
		return fail_mem(a);
	}
	return emit(a, "tool_call", json_pack("{sososo}", "id", jid, "name", jname, "input", i));
}

/* output: a parsed value (borrowed: a string stays text, anything else is
 * kept as structure) or NULL with output_text. */
static int emit_tool_result(struct ctl_agentout *a, const char *id, json_t *output,
			    const char *output_text, size_t output_len, bool is_error)
{
	json_t *o = output ? jvalue(a, output, 0) : jtext(a, output_text, output_len);
	json_t *jid = jtext_str(a, id ? id : "");
	if (!o || !jid) {
		json_decref(o);
		json_decref(jid);
		return fail_mem(a);
	}
	return emit(a, "tool_result",
		    json_pack("{sososb}", "id", jid, "output", o, "is_error", is_error));
}

static int emit_usage(struct ctl_agentout *a, const struct ctl_usage *u)
{
	json_t *o = json_pack("{sIsIsIsI}", "input_tokens", (json_int_t)u->input_tokens,
			      "output_tokens", (json_int_t)u->output_tokens, "cache_read_tokens",
			      (json_int_t)u->cache_read_tokens, "cache_write_tokens",
			      (json_int_t)u->cache_write_tokens);
	if (o && u->have_cost && json_object_set_new(o, "cost_usd", json_real(u->cost_usd)) < 0) {
		json_decref(o);
		o = NULL;
	}
	return emit(a, "usage", o);
}

static void usage_add(struct ctl_usage *sum, const struct ctl_usage *u)
{
	sum->input_tokens += u->input_tokens;
	sum->output_tokens += u->output_tokens;
	sum->cache_read_tokens += u->cache_read_tokens;
	sum->cache_write_tokens += u->cache_write_tokens;
	if (u->have_cost) {
		sum->cost_usd += u->cost_usd;
		sum->have_cost = true;
	}
}

/* ---- the outcome so far ---- */

__attribute__((format(printf, 3, 4))) static void set_reason(char *dst, size_t size,
							     const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(dst, size, fmt, ap);
	va_end(ap);
}

static void envelope(struct ctl_agentout *a, enum env e)
{
	a->env = e;
	a->after_env = 0;
	a->after_what[0] = '\0';
	a->saw_envelope = true;
	if (e != ENV_FAILED)
		a->env_reason[0] = '\0';
}

/* Text for a reason, from the agent: stored raw (bounded), redacted when
 * the outcome is written. */
static void copy_text(char *dst, size_t size, const char *s, size_t len)
{
	if (!s)
		s = "", len = 0;
	size_t n = len < size - 1 ? len : size - 1;
	memcpy(dst, s, n);
	dst[n] = '\0';
}

static void set_fatal(struct ctl_agentout *a, const char *s, size_t len)
{
	if (a->fatal)
		return; /* the first error is the cause; later ones follow from it */
	a->fatal = true;
	copy_text(a->fatal_reason, sizeof(a->fatal_reason), s, len);
}

static void set_result(struct ctl_agentout *a, const char *s, size_t len)
{
	buf_reset(&a->result);
	if (s && buf_append(&a->result, s, len) < 0)
		buf_append(&a->result, s, a->result.max); /* too long: its start */
}

static bool session_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.' || c == ':';
}

/* The id to resume with: it goes on a command line, so only a plain token
 * is taken; anything else is refused (once, saying so). */
static int set_session(struct ctl_agentout *a, const char *s, size_t len)
{
	if (!s)
		return 0;
	bool ok = len > 0 && len <= CTL_AGENT_SID_MAX;
	for (size_t i = 0; ok && i < len; i++)
		ok = session_char(s[i]);
	if (ok) {
		memcpy(a->session, s, len);
		a->session[len] = '\0';
		return 0;
	}
	if (a->bad_session)
		return 0;
	a->bad_session = true;
	return emitf(a, "error",
		     "the agent's session id was ignored: not 1 to %d of [A-Za-z0-9._:-]",
		     CTL_AGENT_SID_MAX);
}

/* ---- Claude Code (stream-json, or json: the result line alone) ---- */

/* Tool output: a string, or content blocks of which the text is kept. */
static int claude_tool_text(json_t *content, struct buf *out)
{
	if (json_is_string(content))
		return buf_append(out, json_string_value(content), json_string_length(content));
	size_t i;
	json_t *b;
	json_array_foreach(content, i, b)
	{
		size_t len;
		const char *t = jstr(b, "text", &len);
		int rc = 0;
		if (out->len > 0)
			rc = buf_append_char(out, '\n');
		if (rc == 0)
			rc = t ? buf_append(out, t, len) :
				 buf_appendf(out, "[%s]", str_or(jstr(b, "type", NULL), "?"));
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int claude_result(struct ctl_agentout *a, json_t *o)
{
	size_t len;
	const char *s = jstr(o, "session_id", &len);
	int rc = set_session(a, s, len);
	if (rc)
		return rc;
	const char *text = jstr(o, "result", &len);
	/* Under is_error, result is the error's text, not an answer. */
	set_result(a, text, text && json_is_false(jget(o, "is_error")) ? len : 0);

	json_t *u = jget(o, "usage");
	struct ctl_usage use = {
		.input_tokens = jcount(u, "input_tokens"),
		.output_tokens = jcount(u, "output_tokens"),
		.cache_read_tokens = jcount(u, "cache_read_input_tokens"),
		.cache_write_tokens = jcount(u, "cache_creation_input_tokens"),
	};
	use.have_cost = jnumber(o, "total_cost_usd", &use.cost_usd);
	/* On --resume Claude Code restores the session's cost: total_cost_usd
	 * and modelUsage then count the earlier turns too, while usage is
	 * this run's. More tokens in modelUsage than in usage says so. */
	uint64_t model_tokens = 0;
	const char *key;
	json_t *mu;
	json_object_foreach(jget(o, "modelUsage"), key, mu)
		model_tokens += jcount(mu, "inputTokens") + jcount(mu, "outputTokens");
	a->cost_total = model_tokens > use.input_tokens + use.output_tokens;
	/* The last result is the run's: it replaces, not adds. */
	a->usage = use;
	rc = emit_usage(a, &use);
	if (rc)
		return rc;

	json_t *is_error = jget(o, "is_error");
	const char *subtype = jstr(o, "subtype", NULL);
	const char *terminal = jstr(o, "terminal_reason", NULL);
	if (!json_is_boolean(is_error) || !subtype) {
		envelope(a, ENV_FAILED);
		set_reason(a->env_reason, sizeof(a->env_reason),
			   "the agent's result has no is_error or subtype");
	} else if (json_is_true(is_error)) {
		envelope(a, ENV_FAILED);
		/* Under subtype "success" this is an API failure: its text says
		 * which. The error_* subtypes list theirs in errors. */
		_cleanup_buf_ struct buf why = BUF_INIT(CTL_REASON_MAX);
		if (strcmp(subtype, "success") != 0)
			buf_append_str(&why, subtype);
		size_t i;
		json_t *e;
		json_array_foreach(jget(o, "errors"), i, e)
		{
			if (!json_is_string(e))
				continue;
			buf_append_str(&why, why.len ? (i ? "; " : ": ") : "");
			buf_append(&why, json_string_value(e), json_string_length(e));
		}
		if (text && len > 0 && strcmp(subtype, "success") == 0) {
			buf_append_str(&why, why.len ? ": " : "");
			buf_append(&why, text, len);
		}
		if (why.len == 0)
			buf_append_str(&why, "the agent reported an error (is_error true)");
		copy_text(a->env_reason, sizeof(a->env_reason), why.data, why.len);
	} else if (strcmp(subtype, "success") != 0) {
		envelope(a, ENV_FAILED);
		set_reason(a->env_reason, sizeof(a->env_reason),
			   "contradictory result: is_error false under subtype %.64s", subtype);
	} else if (terminal && strcmp(terminal, "completed") != 0) {
		envelope(a, ENV_FAILED);
		set_reason(a->env_reason, sizeof(a->env_reason),
			   "contradictory result: success, but terminal_reason %.64s", terminal);
	} else if (json_array_size(jget(o, "errors")) > 0) {
		envelope(a, ENV_FAILED);
		set_reason(a->env_reason, sizeof(a->env_reason),
			   "contradictory result: success, with errors listed");
	} else {
		envelope(a, ENV_OK);
	}
	return 0;
}

static int claude_record(struct ctl_agentout *a, json_t *o, const char *type, bool *env_rec)
{
	size_t len;
	if (strcmp(type, "result") == 0) {
		*env_rec = true;
		return claude_result(a, o);
	}
	if (strcmp(type, "system") == 0) {
		const char *sub = jstr(o, "subtype", NULL);
		if (sub && strcmp(sub, "init") == 0) {
			const char *s = jstr(o, "session_id", &len);
			int rc = set_session(a, s, len);
			if (rc)
				return rc;
			return emitf(a, "status", "session started (model %s, Claude Code %s)",
				     str_or(jstr(o, "model", NULL), "?"),
				     str_or(jstr(o, "claude_code_version", NULL), "?"));
		}
		if (sub && strcmp(sub, "api_retry") == 0) {
			json_t *st = jget(o, "error_status");
			char status[32] = "";
			if (json_is_integer(st))
				snprintf(status, sizeof(status), " (%" JSON_INTEGER_FORMAT ")",
					 json_integer_value(st));
			return emitf(a, "status",
				     "API request failed, retrying (%" PRIu64 " of %" PRIu64
				     "): %s%s",
				     jcount(o, "attempt"), jcount(o, "max_retries"),
				     str_or(jstr(o, "error", NULL), "error"), status);
		}
		if (sub && strcmp(sub, "permission_denied") == 0) {
			/* A tool call refused (no bypass): the turn goes on, and
			 * its result still decides. */
			const char *m = jstr(o, "message", &len);
			return emitf(a, "error", "permission denied (%s): %.*s",
				     str_or(jstr(o, "tool_name", NULL), "?"),
				     m ? (int)(len < CTL_EVENT_TEXT_MAX / 2 ?
						       len :
						       CTL_EVENT_TEXT_MAX / 2) :
					 0,
				     m ? m : "");
		}
		return emitf(a, "status", "%s", sub ? sub : "system");
	}
	json_t *msg = jget(o, "message");
	json_t *content = jget(msg, "content");
	size_t i;
	json_t *b;
	if (strcmp(type, "assistant") == 0) {
		/* Claude Code's own messages for a failed API call: errors. */
		bool api_error = jget(o, "error") || json_is_true(jget(o, "is_api_error_message"));
		json_array_foreach(content, i, b)
		{
			const char *bt = jstr(b, "type", NULL);
			int rc = 0;
			if (!bt)
				continue;
			if (strcmp(bt, "text") == 0) {
				const char *t = jstr(b, "text", &len);
				if (t)
					rc = api_error ? emit_msg(a, "error", t, len) :
							 emit_text(a, t, len);
			} else if (strcmp(bt, "tool_use") == 0) {
				rc = emit_tool_call(a, jstr(b, "id", NULL), jstr(b, "name", NULL),
						    or_null(jget(b, "input")), NULL);
			}
			if (rc)
				return rc;
		}
		return 0;
	}
	if (strcmp(type, "user") == 0) {
		json_array_foreach(content, i, b)
		{
			if (!jstr_is(b, "type", "tool_result"))
				continue;
			_cleanup_buf_ struct buf out = BUF_INIT(CTL_LINE_MAX);
			if (claude_tool_text(jget(b, "content"), &out) == -ENOMEM)
				return fail_mem(a);
			int rc = emit_tool_result(a, jstr(b, "tool_use_id", NULL), NULL,
						  out.data ? out.data : "", out.len,
						  json_is_true(jget(b, "is_error")));
			if (rc)
				return rc;
		}
		return 0;
	}
	/* stream_event (partial messages) and the rest: nothing of their own. */
	return 0;
}

/* ---- Gemini CLI (stream-json; json: one object, maybe over lines) ---- */

/* Assistant text joined so far, as one event (and the answer so far). */
static int gemini_flush(struct ctl_agentout *a)
{
	if (a->pending.len == 0)
		return 0;
	set_result(a, a->pending.data, a->pending.len);
	int rc = emit_text(a, a->pending.data, a->pending.len);
	explicit_bzero(a->pending.data, a->pending.len);
	buf_reset(&a->pending);
	return rc;
}

/* The message of an error object ({"type", "message", "code"}), or of a
 * string. */
static const char *error_message(json_t *e, size_t *len)
{
	if (json_is_string(e)) {
		*len = json_string_length(e);
		return json_string_value(e);
	}
	const char *m = jstr(e, "message", len);
	if (!m)
		m = jstr(jget(e, "data"), "message", len);
	if (!m)
		m = jstr(e, "name", len);
	return m;
}

static void gemini_stats(struct ctl_agentout *a, json_t *stats)
{
	struct ctl_usage u = {
		.input_tokens = jcount(stats, "input_tokens"),
		.output_tokens = jcount(stats, "output_tokens"),
		.cache_read_tokens = jcount(stats, "cached"),
	};
	/* -o json: per model, {"tokens": {"prompt", "candidates", "cached"}}. */
	const char *key;
	json_t *m;
	json_object_foreach(jget(stats, "models"), key, m)
	{
		json_t *t = jget(m, "tokens");
		u.input_tokens += jcount(t, "prompt");
		u.output_tokens += jcount(t, "candidates");
		u.cache_read_tokens += jcount(t, "cached");
	}
	a->usage = u;
}

/* The -o json document: {session_id, response, stats, error?}. */
static int gemini_document(struct ctl_agentout *a, json_t *o)
{
	size_t len;
	const char *s = jstr(o, "session_id", &len);
	int rc = set_session(a, s, len);
	if (rc)
		return rc;
	const char *resp = jstr(o, "response", &len);
	if (resp) {
		set_result(a, resp, len);
		rc = emit_text(a, resp, len);
		if (rc)
			return rc;
	}
	gemini_stats(a, jget(o, "stats"));
	rc = emit_usage(a, &a->usage);
	if (rc)
		return rc;
	json_t *err = jget(o, "error");
	if (err && !json_is_null(err)) {
		const char *m = error_message(err, &len);
		envelope(a, ENV_FAILED);
		copy_text(a->env_reason, sizeof(a->env_reason),
			  m ? m : "the agent reported an error",
			  m ? len : strlen("the agent reported an error"));
		return emit_msg(a, "error", a->env_reason, strlen(a->env_reason));
	}
	envelope(a, ENV_OK);
	return 0;
}

static int gemini_record(struct ctl_agentout *a, json_t *o, const char *type, bool *env_rec)
{
	size_t len;
	int rc;
	if (!type) {
		/* No "type": the -o json document printed on one line. */
		if (!jget(o, "response") && !jget(o, "session_id") && !jget(o, "error"))
			return 0;
		*env_rec = true;
		return gemini_document(a, o);
	}
	if (strcmp(type, "message") == 0) {
		if (!jstr_is(o, "role", "assistant"))
			return 0;
		const char *t = jstr(o, "content", &len);
		if (!t)
			return 0;
		/* A whole message stands alone; deltas join the text before. */
		if (!json_is_true(jget(o, "delta")) && (rc = gemini_flush(a)))
			return rc;
		if (buf_append(&a->pending, t, len) == -ENOBUFS) {
			/* Past the join limit the rest of this text is dropped:
			 * the event keeps only its first CTL_EVENT_TEXT_MAX bytes. */
			return 0;
		}
		return 0;
	}
	if ((rc = gemini_flush(a)))
		return rc;
	if (strcmp(type, "init") == 0) {
		const char *s = jstr(o, "session_id", &len);
		if ((rc = set_session(a, s, len)))
			return rc;
		return emitf(a, "status", "session started (model %s)",
			     str_or(jstr(o, "model", NULL), "?"));
	}
	if (strcmp(type, "tool_use") == 0)
		return emit_tool_call(a, jstr(o, "tool_id", NULL), jstr(o, "tool_name", NULL),
				      or_null(jget(o, "parameters")), NULL);
	if (strcmp(type, "tool_result") == 0) {
		bool ok = jstr_is(o, "status", "success");
		json_t *out = jget(o, "output");
		const char *m = NULL;
		if (!out && !ok)
			m = error_message(jget(o, "error"), &len);
		if (!out && !m)
			m = "", len = 0;
		return emit_tool_result(a, jstr(o, "tool_id", NULL), out, m, m ? len : 0, !ok);
	}
	if (strcmp(type, "error") == 0) {
		const char *m = error_message(o, &len);
		if (!m)
			m = "error", len = 5;
		/* Warnings (a loop detected) go on; an error ends the turn. */
		if (!jstr_is(o, "severity", "warning"))
			set_fatal(a, m, len);
		return emit_msg(a, "error", m, len);
	}
	if (strcmp(type, "result") == 0) {
		*env_rec = true;
		gemini_stats(a, jget(o, "stats"));
		if ((rc = emit_usage(a, &a->usage)))
			return rc;
		if (jstr_is(o, "status", "success") &&
		    !(jget(o, "error") && !json_is_null(jget(o, "error")))) {
			envelope(a, ENV_OK);
			return 0;
		}
		envelope(a, ENV_FAILED);
		const char *m = error_message(jget(o, "error"), &len);
		if (m)
			copy_text(a->env_reason, sizeof(a->env_reason), m, len);
		else
			set_reason(a->env_reason, sizeof(a->env_reason), "result status %.64s",
				   str_or(jstr(o, "status", NULL), "(none)"));
		return 0;
	}
	return 0;
}

/* Gemini's exit statuses (FatalError codes). */
static const char *gemini_exit_meaning(int status)
{
	switch (status) {
	case 41:
		return "authentication failed";
	case 42:
		return "invalid input";
	case 44:
		return "sandbox error";
	case 52:
		return "configuration error";
	case 53:
		return "turn limit reached";
	case 54:
		return "tool execution error";
	case 55:
		return "untrusted workspace";
	case 130:
		return "cancelled";
	default:
		return NULL;
	}
}

/* A JSON error object at p ({"error": {...}} or {"message": ...}): its
 * message into msg. */
static bool json_error_at(const char *p, size_t n, struct buf *msg)
{
	json_error_t jerr;
	json_t *o = json_loadb(p, n, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &jerr);
	json_t *e = jget(o, "error");
	if (!e && !jget(o, "message")) {
		json_decref(o);
		return false;
	}
	size_t len;
	const char *m = error_message(e ? e : o, &len);
	if (m)
		buf_append(msg, m, len < msg->max ? len : msg->max);
	else
		buf_append_str(msg, "an error (no message)");
	json_decref(o);
	return true;
}

/*
 * An error Gemini wrote to stderr: "[ERROR] {json}" (the last one), or
 * (-o json) the error object printed over several lines after a stack
 * trace, from a line that is "{". Its message into msg. 2: a JSON error
 * (fatal), 1: "[ERROR] text" (context only), 0: none.
 */
static int gemini_stderr_error(const char *tail, size_t n, struct buf *msg)
{
	const char *at = NULL;
	for (const char *p = tail; (p = memmem(p, (size_t)(tail + n - p), "[ERROR]", 7)); p += 7)
		at = p + 7;
	if (at) {
		while (at < tail + n && (*at == ' ' || *at == '\t'))
			at++;
		if (json_error_at(at, (size_t)(tail + n - at), msg))
			return 2;
		const char *end = memchr(at, '\n', (size_t)(tail + n - at));
		size_t len = end ? (size_t)(end - at) : (size_t)(tail + n - at);
		buf_append(msg, at, len < msg->max ? len : msg->max);
		return msg->len > 0 ? 1 : 0;
	}
	/* From the end, the few last lines that open an object: bounded work
	 * whatever stderr holds. */
	int tries = 0;
	for (size_t i = n; i > 0 && tries < 8; i--) {
		if (tail[i - 1] != '{' || (i > 1 && tail[i - 2] != '\n'))
			continue;
		tries++;
		if (json_error_at(tail + i - 1, n - (i - 1), msg))
			return 2;
	}
	return 0;
}

/* ---- Codex (exec --json) ---- */

static int codex_item(struct ctl_agentout *a, json_t *item, bool started, bool completed)
{
	const char *type = jstr(item, "type", NULL);
	const char *id = jstr(item, "id", NULL);
	const char *status = jstr(item, "status", NULL);
	size_t len;
	if (!type)
		return 0;
	if (strcmp(type, "agent_message") == 0) {
		const char *t = jstr(item, "text", &len);
		if (!completed || !t)
			return 0;
		set_result(a, t, len);
		return emit_text(a, t, len);
	}
	if (strcmp(type, "command_execution") == 0) {
		if (started)
			return emit_tool_call(a, id, "command", NULL, jstr(item, "command", NULL));
		if (!completed)
			return 0;
		const char *out = jstr(item, "aggregated_output", &len);
		json_t *code = jget(item, "exit_code");
		bool failed = (status && strcmp(status, "completed") != 0) ||
			      (json_is_integer(code) && json_integer_value(code) != 0);
		return emit_tool_result(a, id, NULL, out ? out : "", out ? len : 0, failed);
	}
	if (strcmp(type, "mcp_tool_call") == 0) {
		if (started) {
			_cleanup_buf_ struct buf name = BUF_INIT(KEY_MAX);
			buf_appendf(&name, "%s.%s", str_or(jstr(item, "server", NULL), "?"),
				    str_or(jstr(item, "tool", NULL), "?"));
			return emit_tool_call(a, id, name.data ? name.data : "",
					      or_null(jget(item, "arguments")), NULL);
		}
		if (!completed)
			return 0;
		bool failed = status && strcmp(status, "completed") != 0;
		json_t *res = jget(item, "result");
		const char *m = error_message(jget(item, "error"), &len);
		if (res && !json_is_null(res))
			return emit_tool_result(a, id, res, NULL, 0, failed);
		return emit_tool_result(a, id, NULL, m ? m : "", m ? len : 0, failed || m);
	}
	if (strcmp(type, "file_change") == 0 || strcmp(type, "web_search") == 0) {
		if (!completed)
			return 0;
		json_t *input = jget(item, strcmp(type, "file_change") == 0 ? "changes" : "query");
		int rc = emit_tool_call(a, id, type, or_null(input), NULL);
		if (rc)
			return rc;
		return emit_tool_result(a, id, NULL, status ? status : "",
					status ? strlen(status) : 0,
					status && strcmp(status, "failed") == 0);
	}
	if (strcmp(type, "error") == 0 && completed) {
		/* An item of type error is a warning: the turn goes on. */
		const char *m = jstr(item, "message", &len);
		return emit_msg(a, "error", m ? m : "", m ? len : 0);
	}
	/* reasoning, todo_list: not shown. */
	return 0;
}

static int codex_record(struct ctl_agentout *a, json_t *o, const char *type, bool *env_rec)
{
	size_t len;
	int rc;
	if (strcmp(type, "thread.started") == 0) {
		const char *s = jstr(o, "thread_id", &len);
		if ((rc = set_session(a, s, len)))
			return rc;
		return emitf(a, "status", "thread started");
	}
	if (strncmp(type, "item.", 5) == 0)
		return codex_item(a, jget(o, "item"), strcmp(type, "item.started") == 0,
				  strcmp(type, "item.completed") == 0);
	if (strcmp(type, "turn.completed") == 0) {
		*env_rec = true;
		json_t *u = jget(o, "usage");
		struct ctl_usage use = {
			.input_tokens = jcount(u, "input_tokens"),
			.output_tokens = jcount(u, "output_tokens"),
			.cache_read_tokens = jcount(u, "cached_input_tokens"),
		};
		usage_add(&a->usage, &use);
		envelope(a, ENV_OK);
		return emit_usage(a, &use);
	}
	if (strcmp(type, "turn.failed") == 0) {
		*env_rec = true;
		const char *m = error_message(jget(o, "error"), &len);
		envelope(a, ENV_FAILED);
		copy_text(a->env_reason, sizeof(a->env_reason), m ? m : "turn failed",
			  m ? len : strlen("turn failed"));
		/* Codex says it twice (an error, then turn.failed): once is enough. */
		if (a->fatal && strcmp(a->fatal_reason, a->env_reason) == 0)
			return 0;
		return emit_msg(a, "error", a->env_reason, strlen(a->env_reason));
	}
	if (strcmp(type, "error") == 0) {
		const char *m = error_message(o, &len);
		if (!m)
			m = "error", len = 5;
		/* "Reconnecting... 1/5 (...)": a retry, which may still succeed
		 * (turn.completed then follows); the error that ends the turn
		 * comes without it, before turn.failed. */
		if (len >= 15 && memcmp(m, "Reconnecting...", 15) == 0)
			return emit_msg(a, "status", m, len);
		set_fatal(a, m, len);
		return emit_msg(a, "error", m, len);
	}
	return 0;
}

/* ---- opencode (run --format json) ---- */

static int opencode_record(struct ctl_agentout *a, json_t *o, const char *type, bool *env_rec)
{
	size_t len;
	int rc;
	const char *sid = jstr(o, "sessionID", &len);
	if (sid && (rc = set_session(a, sid, len)))
		return rc;
	json_t *part = jget(o, "part");
	if (strcmp(type, "step_start") == 0) {
		/* The answer is the text of the last step. */
		buf_reset(&a->result);
		return 0;
	}
	if (strcmp(type, "text") == 0) {
		const char *t = jstr(part, "text", &len);
		if (!t)
			return 0;
		if (buf_append(&a->result, t, len) < 0)
			set_result(a, t, len);
		return emit_text(a, t, len);
	}
	if (strcmp(type, "tool_use") == 0) {
		json_t *st = jget(part, "state");
		const char *status = jstr(st, "status", NULL);
		const char *id = jstr(part, "callID", NULL);
		if (!id)
			id = jstr(part, "id", NULL);
		rc = emit_tool_call(a, id, jstr(part, "tool", NULL), or_null(jget(st, "input")),
				    NULL);
		if (rc || !status)
			return rc;
		if (strcmp(status, "completed") == 0) {
			json_t *out = jget(st, "output");
			return emit_tool_result(a, id, out, "", 0, false);
		}
		if (strcmp(status, "error") == 0) {
			const char *m = error_message(jget(st, "error"), &len);
			return emit_tool_result(a, id, NULL, m ? m : "", m ? len : 0, true);
		}
		return 0;
	}
	if (strcmp(type, "step_finish") == 0) {
		*env_rec = true;
		json_t *t = jget(part, "tokens");
		struct ctl_usage use = {
			.input_tokens = jcount(t, "input"),
			.output_tokens = jcount(t, "output") + jcount(t, "reasoning"),
			.cache_read_tokens = jcount(jget(t, "cache"), "read"),
			.cache_write_tokens = jcount(jget(t, "cache"), "write"),
		};
		use.have_cost = jnumber(part, "cost", &use.cost_usd);
		usage_add(&a->usage, &use);
		const char *reason = jstr(part, "reason", NULL);
		if (reason && strcmp(reason, "tool-calls") == 0) {
			envelope(a, ENV_NONE); /* another step follows */
		} else if (reason && strcmp(reason, "stop") == 0) {
			envelope(a, ENV_OK);
		} else {
			envelope(a, ENV_FAILED);
			set_reason(a->env_reason, sizeof(a->env_reason), "the model stopped: %.64s",
				   reason ? reason : "(no reason given)");
		}
		return emit_usage(a, &use);
	}
	if (strcmp(type, "error") == 0) {
		json_t *e = jget(o, "error");
		const char *m = error_message(e, &len);
		_cleanup_buf_ struct buf why = BUF_INIT(CTL_REASON_MAX);
		const char *name = jstr(e, "name", NULL);
		if (name && m && strcmp(name, m) != 0)
			buf_appendf(&why, "%s: ", name);
		buf_append(&why, m ? m : "error", m ? len : 5);
		set_fatal(a, why.data, why.len);
		return emit_msg(a, "error", why.data, why.len);
	}
	return 0;
}

/* ---- pi (--mode json) ---- */

/* The text blocks of a message's content, joined. */
static int pi_text(json_t *content, struct buf *out)
{
	if (json_is_string(content))
		return buf_append(out, json_string_value(content), json_string_length(content));
	size_t i;
	json_t *b;
	json_array_foreach(content, i, b)
	{
		size_t len;
		const char *t = jstr(b, "type", NULL);
		if (!t || strcmp(t, "text") != 0 || !jstr(b, "text", &len))
			continue;
		int rc = buf_append(out, jstr(b, "text", NULL), len);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int pi_assistant(struct ctl_agentout *a, json_t *m)
{
	size_t i, len;
	json_t *b;
	_cleanup_buf_ struct buf text = BUF_INIT(CTL_LINE_MAX);
	json_array_foreach(jget(m, "content"), i, b)
	{
		const char *bt = jstr(b, "type", NULL);
		int rc = 0;
		if (!bt)
			continue;
		if (strcmp(bt, "text") == 0) {
			const char *t = jstr(b, "text", &len);
			if (!t)
				continue;
			if (buf_append(&text, t, len) == -ENOMEM)
				return fail_mem(a);
			rc = emit_text(a, t, len);
		} else if (strcmp(bt, "toolCall") == 0) {
			rc = emit_tool_call(a, jstr(b, "id", NULL), jstr(b, "name", NULL),
					    or_null(jget(b, "arguments")), NULL);
		}
		if (rc)
			return rc;
	}
	set_result(a, text.data, text.len);
	json_t *u = jget(m, "usage");
	struct ctl_usage use = {
		.input_tokens = jcount(u, "input"),
		.output_tokens = jcount(u, "output"),
		.cache_read_tokens = jcount(u, "cacheRead"),
		.cache_write_tokens = jcount(u, "cacheWrite"),
	};
	use.have_cost = jnumber(jget(u, "cost"), "total", &use.cost_usd);
	usage_add(&a->usage, &use);
	const char *stop = jstr(m, "stopReason", NULL);
	snprintf(a->pi_stop, sizeof(a->pi_stop), "%s", stop ? stop : "");
	buf_reset(&a->pi_error);
	const char *em = jstr(m, "errorMessage", &len);
	if (em)
		buf_append(&a->pi_error, em, len < a->pi_error.max ? len : a->pi_error.max);
	if (u)
		return emit_usage(a, &use);
	return 0;
}

/* How the run ended: the last assistant message's stop reason. */
static void pi_outcome(struct ctl_agentout *a, json_t *messages)
{
	json_t *last = NULL;
	size_t i;
	json_t *m;
	json_array_foreach(messages, i, m) if (jstr_is(m, "role", "assistant")) last = m;
	char stop[32];
	_cleanup_buf_ struct buf err = BUF_INIT(CTL_REASON_MAX);
	if (last) {
		size_t len;
		const char *s = jstr(last, "stopReason", NULL);
		snprintf(stop, sizeof(stop), "%s", s ? s : "");
		const char *em = jstr(last, "errorMessage", &len);
		if (em)
			buf_append(&err, em, len < err.max ? len : err.max);
	} else {
		memcpy(stop, a->pi_stop, sizeof(stop));
		if (a->pi_error.len)
			buf_append(&err, a->pi_error.data, a->pi_error.len);
	}
	if (strcmp(stop, "stop") == 0) {
		envelope(a, ENV_OK);
		return;
	}
	envelope(a, ENV_FAILED);
	if (!stop[0])
		set_reason(a->env_reason, sizeof(a->env_reason),
			   "the agent ended without a stop reason");
	else if (strcmp(stop, "toolUse") == 0)
		set_reason(a->env_reason, sizeof(a->env_reason),
			   "the agent ended while calling a tool");
	else
		set_reason(a->env_reason, sizeof(a->env_reason), "the model stopped: %s%s%.*s",
			   stop, err.len ? ": " : "", (int)err.len, err.data ? err.data : "");
}

static int pi_record(struct ctl_agentout *a, json_t *o, const char *type, bool *env_rec)
{
	size_t len;
	int rc;
	if (strcmp(type, "session") == 0) {
		const char *s = jstr(o, "id", &len);
		if ((rc = set_session(a, s, len)))
			return rc;
		return emitf(a, "status", "session started");
	}
	if (strcmp(type, "message_end") == 0) {
		json_t *m = jget(o, "message");
		if (jstr_is(m, "role", "assistant"))
			return pi_assistant(a, m);
		if (jstr_is(m, "role", "toolResult")) {
			_cleanup_buf_ struct buf out = BUF_INIT(CTL_LINE_MAX);
			if (pi_text(jget(m, "content"), &out) == -ENOMEM)
				return fail_mem(a);
			return emit_tool_result(a, jstr(m, "toolCallId", NULL), NULL,
						out.data ? out.data : "", out.len,
						json_is_true(jget(m, "isError")));
		}
		return 0;
	}
	if (strcmp(type, "agent_end") == 0) {
		*env_rec = true;
		pi_outcome(a, jget(o, "messages"));
		return 0;
	}
	if (strcmp(type, "auto_retry_start") == 0) {
		/* The run that just ended is tried again: its agent_end is not
		 * the last word, and what follows is not after it. */
		*env_rec = true;
		envelope(a, ENV_NONE);
		const char *m = jstr(o, "errorMessage", &len);
		return emitf(a, "status", "retrying (%" PRIu64 " of %" PRIu64 ") after: %.*s",
			     jcount(o, "attempt"), jcount(o, "maxAttempts"),
			     m ? (int)(len < 1024 ? len : 1024) : 0, m ? m : "");
	}
	if (strcmp(type, "auto_retry_end") == 0) {
		/* Closes the retries after the last agent_end: no contradiction,
		 * and a failure when it says the retries failed. */
		*env_rec = true;
		if (json_is_true(jget(o, "success")))
			return 0;
		const char *m = jstr(o, "finalError", &len);
		if (a->env != ENV_FAILED) {
			envelope(a, ENV_FAILED);
			copy_text(a->env_reason, sizeof(a->env_reason), m ? m : "retries failed",
				  m ? len : strlen("retries failed"));
		}
		return 0;
	}
	if (strcmp(type, "auto_compaction_start") == 0)
		return emitf(a, "status", "compacting the context");
	return 0;
}

/* ---- lines ---- */

/*
 * Makes a line fit for jansson: invalid UTF-8 bytes become U+FFFD and a
 * lone surrogate escape (\ud800, which JSON.stringify writes for broken
 * UTF-16) becomes \ufffd, where jansson would refuse the whole line; and
 * counts the values outside strings. *ret is the line itself or fixed.
 * -E2BIG when the line holds too many values.
 */
static int prepare_line(const char *p, size_t n, struct buf *fixed, const char **ret,
			size_t *ret_len)
{
	const unsigned char *u = (const unsigned char *)p;
	size_t values = 0;
	bool in_str = false, copy = false;
	for (int pass = 0; pass < 2; pass++) {
		size_t done = 0; /* bytes of p already in fixed */
		in_str = false;
		for (size_t i = 0; i < n;) {
			unsigned char c = u[i];
			size_t k = c < 0x80 ? 1 : utf8_seq(u + i, n - i);
			if (k == 0) {
				if (pass == 0) {
					copy = true;
					i++;
					continue;
				}
				if (buf_append(fixed, p + done, i - done) < 0 ||
				    buf_append(fixed, REPLACEMENT, 3) < 0)
					return -ENOMEM;
				done = ++i;
				continue;
			}
			if (!in_str) {
				if (c == '"')
					in_str = true;
				else if (pass == 0 &&
					 (c == ',' || c == ':' || c == '[' || c == '{') &&
					 ++values > LINE_VALUES_MAX)
					return -E2BIG;
				i += k;
				continue;
			}
			if (c == '"') {
				in_str = false;
				i++;
				continue;
			}
			if (c != '\\' || i + 1 >= n) {
				i += k;
				continue;
			}
			if (u[i + 1] != 'u' || n - i < 6) {
				i += 2;
				continue;
			}
			int v = 0;
			for (size_t h = 2; h < 6; h++) {
				char x = p[i + h];
				int d = (x >= '0' && x <= '9') ? x - '0' :
					(x >= 'a' && x <= 'f') ? x - 'a' + 10 :
					(x >= 'A' && x <= 'F') ? x - 'A' + 10 :
								 -1;
				v = d < 0 || v < 0 ? -1 : v * 16 + d;
			}
			bool lone = false;
			size_t step = 6;
			if (v >= 0xd800 && v <= 0xdbff) {
				/* A high surrogate needs a low one right after. */
				int w = -1;
				if (n - i >= 12 && p[i + 6] == '\\' && p[i + 7] == 'u') {
					w = 0;
					for (size_t h = 8; h < 12; h++) {
						char x = p[i + h];
						int d = (x >= '0' && x <= '9') ? x - '0' :
							(x >= 'a' && x <= 'f') ? x - 'a' + 10 :
							(x >= 'A' && x <= 'F') ? x - 'A' + 10 :
										 -1;
						w = d < 0 || w < 0 ? -1 : w * 16 + d;
					}
				}
				if (w >= 0xdc00 && w <= 0xdfff)
					step = 12;
				else
					lone = true;
			} else if (v >= 0xdc00 && v <= 0xdfff) {
				lone = true;
			}
			if (lone && pass == 0)
				copy = true;
			if (lone && pass == 1) {
				if (buf_append(fixed, p + done, i - done) < 0 ||
				    buf_append(fixed, "\\ufffd", 6) < 0)
					return -ENOMEM;
				done = i + 6;
			}
			i += step;
		}
		if (pass == 0 && !copy) {
			*ret = p;
			*ret_len = n;
			return 0;
		}
		if (pass == 1) {
			if (buf_append(fixed, p + done, n - done) < 0)
				return -ENOMEM;
			*ret = fixed->data;
			*ret_len = fixed->len;
		}
	}
	return 0;
}

/* A line that came after the envelope: noted, it contradicts it. */
static void after_envelope(struct ctl_agentout *a, const char *what)
{
	if (a->env == ENV_NONE)
		return; /* no envelope yet, or one that says more follows */
	if (a->after_env++ == 0)
		snprintf(a->after_what, sizeof(a->after_what), "%s", what);
}

/* A line that is not a JSON object. */
static int other_line(struct ctl_agentout *a, const char *p, size_t n, const char *why)
{
	int rc = a->parser == CTL_PARSER_GEMINI ? gemini_flush(a) : 0;
	if (rc)
		return rc;
	after_envelope(a, why);
	/* Gemini may print plain lines on stdout in its JSON modes; from the
	 * others such a line is an anomaly. */
	if (a->parser == CTL_PARSER_GEMINI)
		return emit_msg(a, "status", p, n);
	_cleanup_buf_ struct buf b = BUF_INIT(CTL_EVENT_TEXT_MAX);
	if (buf_appendf(&b, "%s: ", why) < 0 ||
	    clean_text(a, p, n, CTL_EVENT_TEXT_MAX - b.len, &b) < 0)
		return fail_mem(a);
	/* Already redacted: sent as is (redacting again changes nothing). */
	return emit(a, "error", json_pack("{ss%}", "message", b.data ? b.data : "", b.len));
}

/* One line (no newline). *parsed: whether it was a JSON object. */
static int do_line(struct ctl_agentout *a, const char *p, size_t n, bool *parsed)
{
	*parsed = false;
	if (n > 0 && p[n - 1] == '\r')
		n--;
	size_t s = 0;
	while (s < n && (p[s] == ' ' || p[s] == '\t'))
		s++;
	if (s == n) {
		*parsed = true; /* blank: nothing, and nothing wrong */
		return 0;
	}
	if (a->doc_mode) {
		*parsed = true;
		if (a->doc_overflow)
			return 0;
		if (buf_append(&a->doc, p, n) < 0 || buf_append_char(&a->doc, '\n') < 0) {
			a->doc_overflow = true;
			buf_free(&a->doc);
		}
		return 0;
	}
	_cleanup_buf_ struct buf fixed = BUF_INIT(3 * (size_t)CTL_LINE_MAX + 16);
	const char *text;
	size_t len;
	int rc = prepare_line(p, n, &fixed, &text, &len);
	if (rc == -ENOMEM)
		return fail_mem(a);
	if (rc == -E2BIG) {
		char why[96];
		snprintf(why, sizeof(why), "a line with more than %u JSON values (dropped)",
			 LINE_VALUES_MAX);
		*parsed = true; /* whole, not cut: refused for its size */
		after_envelope(a, why);
		return emitf(a, "error", "%s, %zu bytes", why, n);
	}
	json_error_t jerr;
	json_t *o = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
	if (!json_is_object(o)) {
		json_decref(o);
		/* Gemini -o json prints one object over several lines. */
		if (a->parser == CTL_PARSER_GEMINI && !a->saw_envelope && n - s == 1 &&
		    p[s] == '{') {
			a->doc_mode = true;
			*parsed = true;
			buf_append(&a->doc, "{\n", 2);
			return 0;
		}
		return other_line(a, p, n,
				  o ? "a JSON line that is not an object" :
				      "a line that is not JSON");
	}
	*parsed = true;
	const char *type = jstr(o, "type", NULL);
	bool env_rec = false;
	char what[80];
	snprintf(what, sizeof(what), "a \"%.48s\" record", type ? type : "(untyped)");
	switch (a->parser) {
	case CTL_PARSER_CLAUDE:
		rc = type ? claude_record(a, o, type, &env_rec) : 0;
		break;
	case CTL_PARSER_GEMINI:
		rc = gemini_record(a, o, type, &env_rec);
		break;
	case CTL_PARSER_CODEX:
		rc = type ? codex_record(a, o, type, &env_rec) : 0;
		break;
	case CTL_PARSER_OPENCODE:
		rc = type ? opencode_record(a, o, type, &env_rec) : 0;
		break;
	case CTL_PARSER_PI:
		rc = type ? pi_record(a, o, type, &env_rec) : 0;
		break;
	}
	json_decref(o);
	if (!env_rec)
		after_envelope(a, what);
	return rc;
}

static int dropped_line(struct ctl_agentout *a)
{
	after_envelope(a, "a line over the length limit");
	return emitf(a, "error", "a line of %" PRIu64 " bytes was dropped (limit %u bytes)",
		     a->dropped, CTL_LINE_MAX);
}

int ctl_agentout_new(enum ctl_parser p, const struct redactor *red, ctl_event_fn fn, void *ud,
		     struct ctl_agentout **ret)
{
	if ((unsigned)p >= ARRAY_SIZE(parser_names) || !fn || !ret)
		return -EINVAL;
	struct ctl_agentout *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->err_tail = malloc(2 * CTL_STDERR_KEEP);
	if (!a->err_tail) {
		free(a);
		return -ENOMEM;
	}
	a->parser = p;
	a->red = red;
	a->fn = fn;
	a->ud = ud;
	buf_init(&a->line, CTL_LINE_MAX);
	buf_init(&a->result, CTL_LINE_MAX);
	buf_init(&a->pending, CTL_LINE_MAX);
	buf_init(&a->doc, CTL_LINE_MAX);
	buf_init(&a->pi_error, CTL_REASON_MAX);
	*ret = a;
	return 0;
}

static void buf_wipe(struct buf *b)
{
	if (b->data)
		explicit_bzero(b->data, b->len);
	buf_free(b);
}

void ctl_agentout_free(struct ctl_agentout *a)
{
	if (!a)
		return;
	/* What the agent printed may hold secrets not yet redacted. */
	buf_wipe(&a->line);
	buf_wipe(&a->result);
	buf_wipe(&a->pending);
	buf_wipe(&a->doc);
	buf_wipe(&a->pi_error);
	explicit_bzero(a->err_tail, a->err_len);
	free(a->err_tail);
	explicit_bzero(a, sizeof(*a));
	free(a);
}

int ctl_agentout_feed(struct ctl_agentout *a, const char *data, size_t len)
{
	while (len > 0) {
		if (a->stop)
			return a->stop;
		if (a->error)
			return a->error;
		const char *nl = memchr(data, '\n', len);
		size_t take = nl ? (size_t)(nl - data) : len;
		int rc = 0;
		bool parsed;
		if (a->dropping) {
			a->dropped += take;
		} else if (take > CTL_LINE_MAX - a->line.len) {
			/* Never held whole: counted and dropped to its newline. */
			a->dropping = true;
			a->dropped = a->line.len + take;
			buf_wipe(&a->line);
		} else if (nl && a->line.len == 0) {
			rc = do_line(a, data, take, &parsed);
		} else {
			if (buf_append(&a->line, data, take) < 0)
				return fail_mem(a);
			if (nl) {
				rc = do_line(a, a->line.data, a->line.len, &parsed);
				explicit_bzero(a->line.data, a->line.len);
				buf_reset(&a->line);
			}
		}
		if (nl) {
			if (a->dropping) {
				rc = dropped_line(a);
				a->dropping = false;
				a->dropped = 0;
			}
			take++;
		}
		if (rc)
			return rc;
		data += take;
		len -= take;
	}
	return a->stop ? a->stop : a->error;
}

int ctl_agentout_feed_stderr(struct ctl_agentout *a, const char *data, size_t len)
{
	/* The last CTL_STDERR_KEEP bytes, in a buffer twice that size so that
	 * keeping them costs O(1) a byte however small the pieces. */
	const size_t keep = CTL_STDERR_KEEP;
	if (len >= keep) {
		memcpy(a->err_tail, data + len - keep, keep);
		a->err_len = keep;
		return 0;
	}
	if (a->err_len + len > 2 * keep) {
		memmove(a->err_tail, a->err_tail + a->err_len - keep, keep);
		a->err_len = keep;
	}
	memcpy(a->err_tail + a->err_len, data, len);
	a->err_len += len;
	return 0;
}

/* stderr's kept part: its last CTL_STDERR_KEEP bytes, from a line start
 * when one is in reach. */
static const char *err_view(const struct ctl_agentout *a, size_t *n)
{
	size_t len = a->err_len < CTL_STDERR_KEEP ? a->err_len : CTL_STDERR_KEEP;
	const char *p = a->err_tail + a->err_len - len;
	if (len < a->err_len) {
		const char *nl = memchr(p, '\n', len);
		if (nl) {
			len -= (size_t)(nl + 1 - p);
			p = nl + 1;
		}
	}
	*n = len;
	return p;
}

/* The line of stderr that best says what went wrong: among the last 64
 * lines the last one that names an error, or else the last non-blank one. */
static bool err_line(const struct ctl_agentout *a, const char **ret, size_t *ret_len)
{
	size_t n;
	const char *p = err_view(a, &n);
	const char *last = NULL;
	size_t last_len = 0;
	int lines = 0;
	while (n > 0 && lines < 64) {
		size_t e = n;
		while (e > 0 && (p[e - 1] == '\n' || p[e - 1] == '\r' || p[e - 1] == ' ' ||
				 p[e - 1] == '\t'))
			e--;
		size_t s = e;
		while (s > 0 && p[s - 1] != '\n')
			s--;
		if (e > s) {
			lines++;
			if (!last) {
				last = p + s;
				last_len = e - s;
			}
			if (memmem(p + s, e - s, "rror", 4) || memmem(p + s, e - s, "RROR", 4)) {
				*ret = p + s;
				*ret_len = e - s;
				return true;
			}
		}
		n = s;
	}
	*ret = last;
	*ret_len = last_len;
	return last != NULL;
}

/* A reason is one line of plain text: terminal escape sequences (stderr
 * in colour) go, other control characters become spaces. */
static void plain_line(const char *s, size_t len, struct buf *out)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == 0x1b) {
			/* ESC [ parameters... final byte (0x40-0x7e); ESC x. */
			if (i + 1 < len && s[i + 1] == '[') {
				i += 2;
				while (i < len && !((unsigned char)s[i] >= 0x40 &&
						    (unsigned char)s[i] <= 0x7e))
					i++;
			} else {
				i++;
			}
			continue;
		}
		buf_append_char(out, c < 0x20 || c == 0x7f ? ' ' : (char)c);
	}
}

/* Writes the outcome's reason: one line, redacted, bounded. */
static void put_reason(const struct ctl_agentout *a, struct ctl_outcome *out, const char *s,
		       size_t len)
{
	_cleanup_buf_ struct buf plain = BUF_INIT(len);
	plain_line(s, len, &plain);
	s = plain.data ? plain.data : "";
	len = plain.len;
	_cleanup_buf_ struct buf b = BUF_INIT(CTL_REASON_MAX);
	if (clean_text(a, s, len, CTL_REASON_MAX, &b) < 0 || !b.data) {
		/* Out of memory: a fixed reason, nothing of the agent's. */
		snprintf(out->reason, sizeof(out->reason), "failed (the reason could not be kept)");
		return;
	}
	memcpy(out->reason, b.data, b.len);
	out->reason[b.len] = '\0';
}

int ctl_agentout_finish(struct ctl_agentout *a, bool exited, int status, struct ctl_outcome *ret)
{
	/* The last line, without its newline: whole if it parses, cut if not. */
	if (!a->stop && !a->error) {
		if (a->dropping) {
			a->cut_line = true;
			dropped_line(a);
			a->dropping = false;
		} else if (a->line.len > 0) {
			bool parsed;
			do_line(a, a->line.data, a->line.len, &parsed);
			if (!parsed)
				a->cut_line = true;
			explicit_bzero(a->line.data, a->line.len);
			buf_reset(&a->line);
		}
	}
	if (a->parser == CTL_PARSER_GEMINI && !a->stop && !a->error) {
		gemini_flush(a);
		if (a->doc_mode && !a->doc_overflow && a->doc.len > 0) {
			json_error_t jerr;
			json_t *o = json_loadb(a->doc.data, a->doc.len, JSON_ALLOW_NUL, &jerr);
			if (json_is_object(o))
				gemini_document(a, o);
			else
				a->cut_line = true;
			json_decref(o);
		} else if (a->doc_mode) {
			a->cut_line = true;
		}
	}

	struct ctl_outcome *out = ret;
	memset(out, 0, sizeof(*out));
	out->usage = a->usage;
	out->cost_is_session_total = a->cost_total;
	memcpy(out->agent_session, a->session, sizeof(out->agent_session));
	if (a->result.len > 0) {
		_cleanup_buf_ struct buf b = BUF_INIT(CTL_EVENT_TEXT_MAX - 1);
		if (clean_text(a, a->result.data, a->result.len, CTL_EVENT_TEXT_MAX - 1, &b) == 0 &&
		    b.data) {
			memcpy(out->result_text, b.data, b.len);
			out->result_text[b.len] = '\0';
		}
	}

	_cleanup_buf_ struct buf why = BUF_INIT(4 * CTL_REASON_MAX);
	/* Gemini: a fatal error on stderr, and what its exit status means. */
	_cleanup_buf_ struct buf gem = BUF_INIT(CTL_REASON_MAX);
	int gem_kind = 0;
	if (a->parser == CTL_PARSER_GEMINI) {
		size_t n;
		const char *p = err_view(a, &n);
		gem_kind = gemini_stderr_error(p, n, &gem);
	}
	const char *meaning =
		a->parser == CTL_PARSER_GEMINI && exited ? gemini_exit_meaning(status) : NULL;

	if (a->stop || a->error)
		buf_appendf(&why, "the agent's output was not read to its end (%s)",
			    a->error ? al_strerror(a->error) : "stopped by the caller");
	else if (!exited && status == -1)
		buf_append_str(&why, "stopped by airlock: a limit was reached");
	else if (!exited)
		buf_appendf(&why, "killed by signal %d (SIG%s)", status,
			    sigabbrev_np(status) ? sigabbrev_np(status) : "?");
	else if (a->fatal)
		buf_append_str(&why, a->fatal_reason);
	else if (gem_kind == 2)
		buf_append(&why, gem.data, gem.len);
	else if (a->env == ENV_FAILED)
		buf_append_str(&why, a->env_reason);
	else if (a->cut_line)
		buf_append_str(&why, "the output ended in the middle of a line (truncated)");
	else if (a->after_env > 0)
		buf_appendf(&why,
			    "the output went on after the agent's result (%" PRIu64
			    " line%s, the first %s)",
			    a->after_env, a->after_env == 1 ? "" : "s", a->after_what);
	else if (a->env == ENV_NONE)
		buf_append_str(&why, "no result from the agent (the output ended without one)");
	else if (status != 0)
		buf_appendf(&why,
			    "contradictory: the agent reported success but exited with status %d",
			    status);

	if (why.len == 0) {
		out->succeeded = true;
		return 0;
	}
	/* Context: what the exit status means, stderr's last word. */
	if (meaning)
		buf_appendf(&why, "; %s (exit status %d)", meaning, status);
	else if (exited && status != 0 && (a->env != ENV_OK || a->fatal || a->cut_line))
		buf_appendf(&why, "; exit status %d", status);
	const char *line;
	size_t ll;
	if (gem_kind == 1)
		buf_appendf(&why, "; stderr: %.*s", (int)gem.len, gem.data);
	else if (gem_kind != 2 && a->env != ENV_FAILED && !a->fatal && err_line(a, &line, &ll))
		buf_appendf(&why, "; stderr: %.*s", (int)(ll < 256 ? ll : 256), line);
	put_reason(a, out, why.data ? why.data : "failed", why.data ? why.len : 6);
	return 0;
}

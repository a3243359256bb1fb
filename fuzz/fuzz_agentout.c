/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent output parsers (control/agentout.h) on any bytes, fed in any
 * pieces. Whatever the input: every event is one JSON object (jansson
 * parses it: valid UTF-8) within CTL_EVENT_MAX; no event, reason or answer
 * holds the registered secret; the outcome is complete (a reason exactly
 * when it failed) and the same whether the output came whole or in the
 * pieces the input chooses; nothing leaks (ASan).
 *
 * Layout: parser, seed, flags, stderr length, stderr..., stdout...
 * flags: bit 0 exited (else killed: status 9 or -1 by bit 1), bits 2-3
 * the exit status (0, 1, 42, 53), bits 4-7 the event at which the
 * callback stops the parser (0: never).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "control/agentout.h"
#include "fuzz.h"

#define SECRET "fuzz-secret-value-42"

struct seen {
	unsigned n, stop_at;
	uint64_t hash; /* of every kind and data, in order */
};

static uint64_t fnv(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return (h ^ 0xff) * 1099511628211ull;
}

static int on_event(const char *kind, const char *data, void *ud)
{
	struct seen *s = ud;
	size_t len = strlen(data);
	check(len <= CTL_EVENT_MAX);
	check(!strstr(data, SECRET));
	json_error_t jerr;
	json_t *o = json_loadb(data, len, 0, &jerr);
	check(json_is_object(o));
	json_decref(o);
	s->hash = fnv(fnv(s->hash, kind), data);
	if (++s->n == s->stop_at)
		return 1;
	return 0;
}

static void run(enum ctl_parser p, const struct redactor *red, const uint8_t *out, size_t out_len,
		const uint8_t *err, size_t err_len, uint32_t seed, uint8_t flags, struct seen *s,
		struct ctl_outcome *o)
{
	struct ctl_agentout *a = NULL;
	check(ctl_agentout_new(p, red, on_event, s, &a) == 0);
	for (size_t i = 0; i < out_len;) {
		size_t k = out_len - i;
		if (seed) {
			seed ^= seed << 13;
			seed ^= seed >> 17;
			seed ^= seed << 5;
			k = 1 + seed % 64;
			if (k > out_len - i)
				k = out_len - i;
		}
		int rc = ctl_agentout_feed(a, (const char *)out + i, k);
		check(rc == 0 || (s->stop_at && rc == 1));
		i += k;
		/* stderr comes between stdout's pieces, as it may. */
		if (i >= out_len / 2 && err_len) {
			check(ctl_agentout_feed_stderr(a, (const char *)err, err_len) == 0);
			err_len = 0;
		}
	}
	if (err_len)
		check(ctl_agentout_feed_stderr(a, (const char *)err, err_len) == 0);
	static const int statuses[] = { 0, 1, 42, 53 };
	bool exited = flags & 1;
	int status = exited ? statuses[(flags >> 2) & 3] : (flags & 2) ? 9 : -1;
	check(ctl_agentout_finish(a, exited, status, o) == 0);
	ctl_agentout_free(a);
	size_t rl = strnlen(o->reason, sizeof(o->reason));
	check(rl < sizeof(o->reason));
	check(strnlen(o->result_text, sizeof(o->result_text)) < sizeof(o->result_text));
	check(strnlen(o->agent_session, sizeof(o->agent_session)) < sizeof(o->agent_session));
	check(o->succeeded == (rl == 0));
	check(!strstr(o->reason, SECRET) && !strstr(o->result_text, SECRET));
	if (o->succeeded)
		check(exited && status == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	enum ctl_parser p = (enum ctl_parser)(data[0] % 5);
	uint32_t seed = data[1] | 0x100u;
	uint8_t flags = data[2];
	size_t err_len = data[3];
	if (err_len > size - 4)
		err_len = size - 4;
	const uint8_t *err = data + 4, *out = err + err_len;
	size_t out_len = size - 4 - err_len;

	struct redactor *red = NULL;
	check(redactor_new(&red) == 0);
	check(redactor_add(red, SECRET, strlen(SECRET)) == 0);
	struct ctl_outcome *o[2] = { malloc(sizeof(*o[0])), malloc(sizeof(*o[1])) };
	check(o[0] && o[1]);
	struct seen s[2] = { { .stop_at = flags >> 4 }, { .stop_at = flags >> 4 } };
	run(p, red, out, out_len, err, err_len, 0, flags, &s[0], o[0]);
	run(p, red, out, out_len, err, err_len, seed, flags, &s[1], o[1]);
	/* The pieces change nothing. */
	check(s[0].n == s[1].n && s[0].hash == s[1].hash);
	check(o[0]->succeeded == o[1]->succeeded);
	check(strcmp(o[0]->reason, o[1]->reason) == 0);
	check(strcmp(o[0]->result_text, o[1]->result_text) == 0);
	check(strcmp(o[0]->agent_session, o[1]->agent_session) == 0);
	check(o[0]->usage.input_tokens == o[1]->usage.input_tokens);
	check(o[0]->usage.output_tokens == o[1]->usage.output_tokens);
	free(o[0]);
	free(o[1]);
	redactor_free(red);
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* WebSocket frames from an upstream, redacted: secrets split across
 * fragments and reads, control frames, re-fragmentation, and protocol
 * violations that end the connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/vault.h"
#include "gateway/ws.h"

#define SECRET "sk-real-0123456789abcdef"

static struct gw_vault *vault;

static int setup(void **state)
{
	const char text[] = "secrets:\n  k: " SECRET "\n";
	struct al_error err = { 0 };
	return gw_vault_parse("v", text, sizeof(text) - 1, &vault, &err);
}

static int teardown(void **state)
{
	gw_vault_free(vault);
	return 0;
}

struct bytes {
	char *p;
	size_t len, cap;
};

static void add(struct bytes *b, const void *p, size_t n)
{
	if (n == 0)
		return;
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static int collect(const char *p, size_t n, void *ud)
{
	add(ud, p, n);
	return 0;
}

/* A server frame (unmasked unless mask). */
static void put_frame(struct bytes *b, bool fin, int op, const char *p, size_t n, bool mask)
{
	unsigned char h[14];
	size_t hl = 2;
	h[0] = (unsigned char)((fin ? 0x80 : 0) | op);
	if (n < 126) {
		h[1] = (unsigned char)n;
	} else if (n <= 0xffff) {
		h[1] = 126;
		h[2] = (unsigned char)(n >> 8);
		h[3] = (unsigned char)n;
		hl = 4;
	} else {
		h[1] = 127;
		for (int i = 0; i < 8; i++)
			h[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
		hl = 10;
	}
	if (mask) {
		h[1] |= 0x80;
		memset(h + hl, 0, 4);
		hl += 4;
	}
	add(b, h, hl);
	add(b, p, n);
}

struct msg {
	int op;
	struct bytes data;
};

/* Reads the gateway's output back: messages (data reassembled) and
 * control frames, each checked to be well formed. */
static size_t parse_out(const struct bytes *o, struct msg *msgs, size_t max)
{
	size_t i = 0, k = 0;
	bool in_msg = false;
	while (i < o->len) {
		assert_true(o->len - i >= 2);
		unsigned char b0 = (unsigned char)o->p[i], b1 = (unsigned char)o->p[i + 1];
		assert_int_equal(b0 & 0x70, 0);
		assert_int_equal(b1 & 0x80, 0); /* never masked towards the client */
		uint64_t n = b1 & 0x7f;
		size_t hl = 2;
		if (n == 126) {
			n = (uint64_t)(unsigned char)o->p[i + 2] << 8 | (unsigned char)o->p[i + 3];
			assert_true(n >= 126);
			hl = 4;
		} else if (n == 127) {
			n = 0;
			for (int j = 0; j < 8; j++)
				n = n << 8 | (unsigned char)o->p[i + 2 + j];
			assert_true(n > 0xffff);
			hl = 10;
		}
		assert_true(o->len - i - hl >= n);
		int op = b0 & 0x0f;
		bool fin = b0 & 0x80;
		const char *pl = o->p + i + hl;
		if (op & 8) {
			assert_true(fin);
			assert_true(n <= 125);
			assert_true(k < max);
			msgs[k] = (struct msg){ .op = op };
			add(&msgs[k].data, pl, n);
			k++;
		} else {
			if (op == 0) {
				assert_true(in_msg);
			} else {
				assert_false(in_msg);
				assert_true(k < max);
				msgs[k] = (struct msg){ .op = op };
				in_msg = true;
				k++;
			}
			/* The data message is the last non-control one. */
			size_t m = k - 1;
			while (msgs[m].op & 8)
				m--;
			add(&msgs[m].data, pl, n);
			if (fin)
				in_msg = false;
		}
		i += hl + n;
	}
	assert_false(in_msg);
	return k;
}

/* Feeds in to a fresh relay cut at `cut` (and again in one piece),
 * checks both give the same bytes, returns them. */
static int relay(const struct bytes *in, size_t cut, struct bytes *out)
{
	struct gw_ws *w = NULL;
	assert_int_equal(gw_ws_new(vault, &w), 0);
	size_t used;
	int r = gw_ws_feed(w, in->p, cut, &used, collect, out);
	if (r == 0) {
		assert_int_equal(used, cut);
		r = gw_ws_feed(w, in->p + cut, in->len - cut, &used, collect, out);
	}
	gw_ws_free(w);
	return r;
}

static void test_secret_split_across_fragments(void **state)
{
	/* "hello <secret> bye" as three fragments cutting the secret twice,
	 * with a ping between them, then a binary message, then a close
	 * frame whose reason echoes the secret. */
	const char *msg = "hello " SECRET " bye";
	struct bytes in = { 0 };
	put_frame(&in, false, 1, msg, 10, false);
	put_frame(&in, true, 9, "ping " SECRET, 5 + strlen(SECRET), false);
	put_frame(&in, false, 0, msg + 10, 12, false);
	put_frame(&in, true, 0, msg + 22, strlen(msg) - 22, false);
	put_frame(&in, true, 2, "\x01\x02" SECRET "\x03", 3 + strlen(SECRET), false);
	put_frame(&in, true, 8,
		  "\x03\xe8"
		  "bye " SECRET,
		  6 + strlen(SECRET), false);

	struct bytes first = { 0 };
	for (size_t cut = 0; cut <= in.len; cut++) {
		struct bytes out = { 0 };
		assert_int_equal(relay(&in, cut, &out), 0);
		assert_null(memmem(out.p, out.len, SECRET, strlen(SECRET)));
		struct msg msgs[8] = { 0 };
		size_t k = parse_out(&out, msgs, 8);
		assert_int_equal(k, 4);
		/* The text message started before the ping came. */
		assert_int_equal(msgs[0].op, 1);
		assert_int_equal(msgs[0].data.len, strlen("hello [redacted] bye"));
		assert_memory_equal(msgs[0].data.p, "hello [redacted] bye", msgs[0].data.len);
		assert_int_equal(msgs[1].op, 9);
		assert_int_equal(msgs[1].data.len, strlen("ping [redacted]"));
		assert_memory_equal(msgs[1].data.p, "ping [redacted]", msgs[1].data.len);
		assert_int_equal(msgs[2].op, 2);
		assert_memory_equal(msgs[2].data.p, "\x01\x02[redacted]\x03", 13);
		assert_int_equal(msgs[3].op, 8);
		assert_memory_equal(msgs[3].data.p,
				    "\x03\xe8"
				    "bye [redacted]",
				    16);
		for (size_t i = 0; i < k; i++)
			free(msgs[i].data.p);
		if (cut == 0)
			first = out;
		else
			free(out.p);
	}
	free(first.p);
	free(in.p);
}

static void test_close_code_bytes_are_redacted_too(void **state)
{
	/* A close frame whose status code is the secret's first two bytes:
	 * the payload is redacted as one stream, so the secret is seen whole. */
	struct bytes in = { 0 };
	put_frame(&in, true, 8, SECRET, strlen(SECRET), false);
	for (size_t cut = 0; cut <= in.len; cut++) {
		struct bytes out = { 0 };
		assert_int_equal(relay(&in, cut, &out), 0);
		assert_null(memmem(out.p, out.len, SECRET, strlen(SECRET)));
		assert_null(memmem(out.p, out.len, &SECRET[2], strlen(SECRET) - 2));
		struct msg msgs[2] = { 0 };
		assert_int_equal(parse_out(&out, msgs, 2), 1);
		assert_int_equal(msgs[0].op, 8);
		assert_int_equal(msgs[0].data.len, strlen("[redacted]"));
		free(msgs[0].data.p);
		free(out.p);
	}
	free(in.p);
}

static void test_large_frames(void **state)
{
	/* 200 KiB with the secret at the 64 KiB and 16 KiB boundaries. */
	size_t n = 200 * 1024;
	char *big = malloc(n);
	memset(big, 'x', n);
	memcpy(big + 65536 - 5, SECRET, strlen(SECRET));
	memcpy(big + 16384 - 3, SECRET, strlen(SECRET));
	struct bytes in = { 0 };
	put_frame(&in, true, 2, big, n, false);
	put_frame(&in, true, 1, "", 0, false); /* an empty message */
	struct bytes out = { 0 };
	assert_int_equal(relay(&in, 70000, &out), 0);
	struct msg msgs[4] = { 0 };
	assert_int_equal(parse_out(&out, msgs, 4), 2);
	size_t want = n - 2 * strlen(SECRET) + 2 * strlen("[redacted]");
	assert_int_equal(msgs[0].data.len, want);
	assert_null(memmem(msgs[0].data.p, want, SECRET, strlen(SECRET)));
	assert_int_equal(msgs[1].op, 1);
	assert_int_equal(msgs[1].data.len, 0);
	free(msgs[0].data.p);
	free(msgs[1].data.p);
	free(out.p);
	free(in.p);
	free(big);
}

static void test_protocol_violations(void **state)
{
	struct {
		const char *what;
		bool fin;
		int op;
		const char *p;
		size_t n;
		bool mask;
		bool prefix_open_message;
	} cases[] = {
		{ "masked frame from the server", true, 1, "hi", 2, true, false },
		{ "reserved opcode", true, 3, "hi", 2, false, false },
		{ "reserved control opcode", true, 11, "", 0, false, false },
		{ "fragmented control frame", false, 9, "hi", 2, false, false },
		{ "continuation without a message", true, 0, "hi", 2, false, false },
		{ "new message inside one", true, 1, "hi", 2, false, true },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct bytes in = { 0 };
		if (cases[i].prefix_open_message)
			put_frame(&in, false, 1, "a", 1, false);
		put_frame(&in, cases[i].fin, cases[i].op, cases[i].p, cases[i].n, cases[i].mask);
		struct bytes out = { 0 };
		int r = relay(&in, in.len, &out);
		if (r != -EPROTO)
			fail_msg("%s: %d", cases[i].what, r);
		free(in.p);
		free(out.p);
	}
	/* RSV1 set (permessage-deflate was never agreed). */
	struct bytes in = { 0 };
	put_frame(&in, true, 1, "hi", 2, false);
	in.p[0] |= 0x40;
	struct bytes out = { 0 };
	assert_int_equal(relay(&in, in.len, &out), -EPROTO);
	free(in.p);
	free(out.p);
	/* A control frame over 125 bytes. */
	char ping[126];
	memset(ping, 'p', sizeof(ping));
	in = (struct bytes){ 0 };
	put_frame(&in, true, 9, ping, sizeof(ping), false);
	out = (struct bytes){ 0 };
	assert_int_equal(relay(&in, in.len, &out), -EPROTO);
	free(in.p);
	free(out.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_secret_split_across_fragments),
		cmocka_unit_test(test_close_code_bytes_are_redacted_too),
		cmocka_unit_test(test_large_frames),
		cmocka_unit_test(test_protocol_violations),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

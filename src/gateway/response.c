/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Responses: the head written from what was parsed (framing ours, never
 * copied), the body moved to the client with backpressure, and both
 * through the redactor where a credential went out.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway/decode.h"
#include "gateway/engine.h"
#include "gateway/vault.h"
#include "gateway/ws.h"

/*
 * A response body goes through up to four stages:
 *   the wire framing (Content-Length, chunked or up to the close) taken off;
 *   the content decoded (gzip, deflate, br, zstd) when a credential went out
 *     and the upstream compressed anyway: the redactor must see plain bytes;
 *   the redactor, when a credential went out;
 *   our own framing: chunked again for HTTP/1.1 clients, or up to the close
 *     for HTTP/1.0 ones, whenever the length may have changed or the
 *     upstream chunked it (chunk sizes, extensions and trailers are never
 *     passed on as the upstream wrote them).
 * A body nothing changes and whose length is known goes on as it came.
 */

/* Largest decoded body of a credentialed response. */
#define GW_DECODED_BODY_MAX (1ull << 30)
/* Interim (1xx) responses to one request: 100 Continue and 103 Early
 * Hints come once or twice; more than this is an upstream flooding. */
#define GW_INTERIM_MAX 16

/* The last stage: our framing. */
static int emit_chunk(const char *p, size_t n, void *ud)
{
	struct conn *c = ud;
	struct evbuffer *out = c->acc;
	if (n == 0)
		return 0;
	if (c->rechunk)
		evbuffer_add_printf(out, "%zx\r\n", n);
	evbuffer_add(out, p, n);
	if (c->rechunk)
		evbuffer_add(out, "\r\n", 2);
	c->bytes_down += n;
	return 0;
}

/* Decoded (or plain) content: redacted where a credential went out. */
static int content_out(const char *p, size_t n, void *ud)
{
	struct conn *c = ud;
	return c->red ? gw_redact(c->red, p, n, emit_chunk, c) : emit_chunk(p, n, c);
}

static int decoded_out(const char *p, size_t n, void *ud)
{
	struct conn *c = ud;
	c->dec_step += n;
	return content_out(p, n, c);
}

/* The body's bytes with the wire framing taken off. */
static int body_in(const char *p, size_t n, void *ud)
{
	struct conn *c = ud;
	if (c->dec)
		return evbuffer_add(c->dec_in, p, n) < 0 ? -ENOMEM : 0;
	return content_out(p, n, c);
}

/* Writes a field value through a fresh redactor. */
static int add_redacted(const char *p, size_t n, void *ud)
{
	return evbuffer_add(ud, p, n);
}

static void write_response_head(struct conn *c, const struct gw_http_response *res, const char *raw)
{
	struct evbuffer *out = c->acc;
	/* The status line: the code and the reason as received, the reason
	 * through the redactor when a credential went out. */
	const char *eol = memchr(raw, '\r', res->head_len);
	size_t sl = eol ? (size_t)(eol - raw) : 0;
	evbuffer_add_printf(out, "HTTP/1.1 %03d", res->status);
	if (sl > 12) {
		if (c->red) {
			struct gw_redactor *r = NULL;
			if (gw_redactor_new(c->e->vault, &r) == 0) {
				gw_redact(r, raw + 12, sl - 12, add_redacted, out);
				gw_redact_finish(r, add_redacted, out);
				gw_redactor_free(r);
			}
		} else {
			evbuffer_add(out, raw + 12, sl - 12);
		}
	} else {
		evbuffer_add(out, " ", 1);
	}
	evbuffer_add(out, "\r\n", 2);
	struct sv tokens[32];
	size_t n_tokens = gw_http_connection_tokens(res->fields, res->n_fields, tokens, 32);
	bool switching = res->status == 101;
	for (size_t i = 0; i < res->n_fields; i++) {
		const struct gw_http_field *f = &res->fields[i];
		if (!switching && gw_http_is_hop_by_hop(f->name, tokens, n_tokens))
			continue;
		if (switching && (sv_equal_ci_cstr(f->name, "connection") ||
				  sv_equal_ci_cstr(f->name, "upgrade")))
			continue;
		/* The body's framing is ours to write (below), from what was
		 * parsed; a bodiless response keeps its Content-Length (HEAD). */
		if (res->body != GW_BODY_NONE && sv_equal_ci_cstr(f->name, "content-length"))
			continue;
		/* A body decoded here goes on decoded. */
		if (c->dec && sv_equal_ci_cstr(f->name, "content-encoding"))
			continue;
		/* No extension on a redacted WebSocket (checked before). */
		if (switching && c->red && sv_equal_ci_cstr(f->name, "sec-websocket-extensions"))
			continue;
		/* A field's name cannot be redacted into another valid name:
		 * one that carries a secret goes. */
		if (c->red && gw_vault_contains(c->e->vault, f->name.p, f->name.len))
			continue;
		evbuffer_add(out, f->name.p, f->name.len);
		evbuffer_add(out, ": ", 2);
		if (c->red) {
			struct gw_redactor *r = NULL;
			if (gw_redactor_new(c->e->vault, &r) == 0) {
				gw_redact(r, f->value.p, f->value.len, add_redacted, out);
				gw_redact_finish(r, add_redacted, out);
				gw_redactor_free(r);
			}
		} else {
			evbuffer_add(out, f->value.p, f->value.len);
		}
		evbuffer_add(out, "\r\n", 2);
	}
	if (switching) {
		/* Checked to be exactly this (websocket_switch). */
		evbuffer_add(out, "Upgrade: websocket\r\nConnection: Upgrade\r\n", 41);
	} else if (res->status >= 200) {
		if (c->rechunk)
			evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
		else if (res->body == GW_BODY_LENGTH && !c->unframed)
			evbuffer_add_printf(out, "Content-Length: %" PRIu64 "\r\n",
					    res->content_length);
		evbuffer_add_printf(out, "Connection: %s\r\n",
				    c->close_after ? "close" : "keep-alive");
	}
	evbuffer_add(out, "\r\n", 2);
}

static void finish_exchange(struct conn *c)
{
	gw_flush_acc(c);
	gw_audit(c, "allow");
	if (c->close_after || c->req_close || !c->req_done) {
		gw_close_when_flushed(c);
		return;
	}
	c->phase = P_HEAD;
	/* The upstream connection waits in the sandbox's pool, not on this
	 * client connection: an idle client connection holds no upstream TLS
	 * state, and the next request takes it back (or another client does). */
	if (evbuffer_get_length(bufferevent_get_input(c->cbev)) == 0)
		gw_release_upstream(c);
	gw_reset_request(c);
	gw_arm_timer(c, IDLE_TIMEOUT_MS);
	gw_process_client(c);
}

void gw_response_body_done(struct conn *c)
{
	if (c->red)
		gw_redact_finish(c->red, emit_chunk, c);
	if (c->rechunk)
		evbuffer_add(c->acc, "0\r\n\r\n", 5);
	c->resp_done = true;
	finish_exchange(c);
}

/* A body that cannot be finished: the client sees it cut off (no last
 * chunk, or the connection closed), never a complete-looking one. */
static void cut_off(struct conn *c, const char *why)
{
	snprintf(c->reason, sizeof(c->reason), "%s", why);
	gw_audit(c, "allow");
	gw_conn_free(c);
}

/*
 * The framing of a response body on its way to the client, and whether
 * its content is decoded first; 0, or -1 after answering 502.
 */
static int choose_framing(struct conn *c, const struct gw_http_response *res)
{
	c->resp_body = res->body;
	c->resp_left = res->content_length;
	c->close_after = res->connection_close || res->body == GW_BODY_CLOSE || c->req_close;
	c->up_reusable = !res->connection_close && res->body != GW_BODY_CLOSE;
	if (res->body == GW_BODY_NONE)
		return 0;
	if (c->red) {
		/* The gateway asked for an identity body; one compressed anyway
		 * is decoded here, or refused: never passed on unread. */
		enum gw_coding coding = GW_CODING_IDENTITY;
		size_t n = 0;
		for (size_t i = 0; i < res->n_fields; i++)
			if (sv_equal_ci_cstr(res->fields[i].name, "content-encoding")) {
				coding = gw_coding_parse(res->fields[i].value);
				n++;
			}
		if (n > 1)
			coding = GW_CODING_UNKNOWN;
		if (coding == GW_CODING_UNKNOWN) {
			gw_respond_error(
				c, 502,
				"the upstream encoded a response to a request with a credential "
				"in a way the gateway cannot decode (to redact it)",
				false);
			return -1;
		}
		if (coding != GW_CODING_IDENTITY) {
			if ((!c->dec_in && !(c->dec_in = evbuffer_new())) ||
			    gw_decoder_new(coding, GW_DECODED_BODY_MAX, &c->dec) < 0) {
				gw_respond_error(c, 502, "out of memory", false);
				return -1;
			}
		}
	}
	bool transformed = c->red || c->dec;
	if (transformed || res->body == GW_BODY_CHUNKED) {
		if (c->http10)
			c->unframed = c->close_after = true;
		else
			c->rechunk = true;
	} else if (res->body == GW_BODY_CLOSE) {
		c->unframed = true;
	}
	return 0;
}

/* The 101 switches to a WebSocket and nothing else (one Upgrade field,
 * "websocket"); after a credentialed upgrade also with no extension (the
 * request offered none). */
static bool websocket_switch(const struct conn *c, const struct gw_http_response *res)
{
	size_t n = 0, ws = 0;
	for (size_t i = 0; i < res->n_fields; i++) {
		if (c->red && sv_equal_ci_cstr(res->fields[i].name, "sec-websocket-extensions"))
			return false;
		if (sv_equal_ci_cstr(res->fields[i].name, "upgrade")) {
			n++;
			ws += sv_equal_ci_cstr(res->fields[i].value, "websocket");
		}
	}
	return n == 1 && ws == 1;
}

static int ws_out(const char *p, size_t n, void *ud)
{
	struct conn *c = ud;
	c->bytes_down += n;
	return evbuffer_add(c->acc, p, n) < 0 ? -ENOMEM : 0;
}

/* One bounded step of the decoder: 1 when it made progress (and may have
 * more), 0 when it waits for input, or an error. */
static int decode_step(struct conn *c)
{
	struct evbuffer_iovec v = { 0 };
	if (evbuffer_get_length(c->dec_in))
		evbuffer_peek(c->dec_in, -1, NULL, &v, 1);
	size_t used = 0;
	c->dec_step = 0;
	int r = gw_decoder_feed(c->dec, v.iov_base, v.iov_len, &used, decoded_out, c);
	if (r < 0)
		return r;
	evbuffer_drain(c->dec_in, used);
	return used > 0 || c->dec_step == GW_DECODE_STEP;
}

/* Parses the response head; false when there is nothing more to do now. */
static bool response_head(struct conn *c, struct evbuffer *in)
{
	size_t len = evbuffer_get_length(in);
	if (len == 0)
		return false;
	size_t want = len < GW_HTTP_HEAD_MAX + 1 ? len : GW_HTTP_HEAD_MAX + 1;
	const char *p = (const char *)evbuffer_pullup(in, (ssize_t)want);
	struct gw_http_response *res = malloc(sizeof(*res));
	if (!res || !p) {
		free(res);
		gw_conn_free(c);
		return false;
	}
	int r = gw_http_parse_response(p, want, c->head_req, res);
	if (r == 0) {
		free(res);
		return false;
	}
	if (r < 0) {
		free(res);
		gw_respond_error(c, 502, "malformed response from the upstream", false);
		return false;
	}
	/* A head is taken whole from the upstream, or not at all. */
	if (res->head_len > gw_budget_left(c)) {
		free(res);
		gw_budget_cut(c);
		return false;
	}
	gw_budget_moved(c, res->head_len);
	c->status = res->status;
	if (res->status >= 100 && res->status < 200 && res->status != 101) {
		/* Interim (100 Continue, 103 Early Hints): passed on, the final
		 * one follows. A few per request; an upstream that sends them
		 * without end is answered with 502. An HTTP/1.0 client gets
		 * none (it does not know them). */
		if (++c->interim > GW_INTERIM_MAX) {
			free(res);
			gw_respond_error(c, 502, "the upstream sent interim responses without end",
					 false);
			return false;
		}
		if (!c->http10)
			write_response_head(c, res, p);
		evbuffer_drain(in, res->head_len);
		free(res);
		return true;
	}
	if (res->status == 101) {
		if (!c->upgrade) {
			free(res);
			gw_respond_error(c, 502, "upstream switched protocols unasked", false);
			return false;
		}
		if (!websocket_switch(c, res)) {
			free(res);
			gw_respond_error(
				c, 502,
				c->red ? "the upstream switched a request with a credential to a "
					 "protocol or extension the gateway cannot redact" :
					 "the upstream switched to another protocol than WebSocket",
				false);
			return false;
		}
		/* After a credentialed upgrade the frames are redacted. */
		if (c->red && gw_ws_new(c->e->vault, &c->ws) < 0) {
			free(res);
			gw_respond_error(c, 502, "out of memory", false);
			return false;
		}
		write_response_head(c, res, p);
		evbuffer_drain(in, res->head_len);
		free(res);
		c->resp_head_done = true;
		gw_audit(c, "allow");
		c->phase = P_TUNNEL;
		gw_client_read_limit(c, CONN_HIGH_WATER);
		bufferevent_set_timeouts(c->ubev, NULL, NULL);
		if (c->ctls)
			bufferevent_set_max_single_read(c->cbev, READ_LARGE);
		bufferevent_enable(c->cbev, EV_READ);
		return true;
	}
	if (choose_framing(c, res) < 0) {
		free(res);
		return false;
	}
	write_response_head(c, res, p);
	evbuffer_drain(in, res->head_len);
	free(res);
	c->resp_head_done = true;
	if (c->resp_body == GW_BODY_NONE || (c->resp_body == GW_BODY_LENGTH && c->resp_left == 0))
		c->wire_done = true;
	return true;
}

/* Moves response bytes from the upstream to the client (through acc). */
static void pump_response_inner(struct conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->cbev);
	struct evbuffer *acc = c->acc;
	while (c->phase == P_FORWARD && !c->resp_head_done && c->ubev) {
		/* Interim heads queue for the client too: within its bounds. */
		if (evbuffer_get_length(out) + evbuffer_get_length(acc) >= CONN_HIGH_WATER ||
		    gw_over_budget(c)) {
			bufferevent_disable(c->ubev, EV_READ);
			return;
		}
		if (!response_head(c, bufferevent_get_input(c->ubev)))
			return;
	}
	if (c->phase == P_TUNNEL) {
		struct evbuffer *in = bufferevent_get_input(c->ubev);
		if (evbuffer_get_length(out) >= CONN_HIGH_WATER || gw_over_budget(c)) {
			bufferevent_disable(c->ubev, EV_READ);
			return;
		}
		gw_flush_acc(c);
		if (!c->ws && !gw_budget_relay(c, in, out, &c->bytes_down))
			return;
		while (c->ws && evbuffer_get_length(in) > 0) {
			struct evbuffer_iovec v;
			if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
				return;
			uint64_t left = gw_budget_left(c);
			if (left == 0) {
				gw_flush_acc(c);
				gw_budget_cut(c);
				return;
			}
			size_t used = 0;
			int r = gw_ws_feed(c->ws, v.iov_base,
					   (uint64_t)v.iov_len <= left ? v.iov_len : (size_t)left,
					   &used, ws_out, c);
			gw_budget_moved(c, used);
			evbuffer_drain(in, used);
			if (r < 0) {
				gw_flush_acc(c);
				snprintf(c->reason, sizeof(c->reason),
					 "WebSocket protocol error "
					 "from the upstream");
				gw_close_when_flushed(c);
				return;
			}
			if (evbuffer_get_length(acc) >= CONN_HIGH_WATER / 2)
				gw_flush_acc(c);
		}
		if (c->up_gone && evbuffer_get_length(in) == 0) {
			gw_flush_acc(c);
			gw_close_when_flushed(c);
		}
		return;
	}
	while (c->phase == P_FORWARD && c->resp_head_done && !c->resp_done) {
		if (evbuffer_get_length(out) + evbuffer_get_length(acc) >= CONN_HIGH_WATER ||
		    gw_over_budget(c)) {
			if (c->ubev)
				bufferevent_disable(c->ubev, EV_READ);
			return;
		}
		if (c->dec) {
			int r = decode_step(c);
			if (r < 0) {
				cut_off(c, r == -EFBIG ?
						   "the decoded response body is over the limit" :
						   "corrupt encoded response body");
				return;
			}
			if (r > 0)
				continue;
			if (c->wire_done) {
				if (gw_decoder_finish(c->dec) < 0 ||
				    evbuffer_get_length(c->dec_in)) {
					cut_off(c, "the encoded response body was cut short");
					return;
				}
				gw_response_body_done(c);
				return;
			}
		} else if (c->wire_done) {
			gw_response_body_done(c);
			return;
		}
		if (!c->ubev)
			return;
		struct evbuffer *in = bufferevent_get_input(c->ubev);
		struct evbuffer_iovec v;
		if (evbuffer_get_length(in) == 0 && c->up_gone) {
			/* All the upstream sent is through. */
			if (c->resp_body == GW_BODY_CLOSE && c->up_gone == 1) {
				c->wire_done = true;
				continue;
			}
			cut_off(c, "upstream closed mid-response");
			return;
		}
		if (evbuffer_get_length(in) == 0 || evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			return;
		/* The egress budget: the bytes as they come from the upstream
		 * (framing included, before decoding). */
		uint64_t left = gw_budget_left(c);
		if (left == 0) {
			gw_budget_cut(c);
			return;
		}
		size_t take = (uint64_t)v.iov_len <= left ? v.iov_len : (size_t)left;
		int r = 0;
		if (c->resp_body == GW_BODY_CHUNKED) {
			r = gw_chunked_feed(&c->resp_ch, v.iov_base, take, &take, body_in, c);
			gw_budget_moved(c, take);
			if (r < 0) {
				cut_off(c, "malformed chunked response");
				return;
			}
			evbuffer_drain(in, take);
			if (r == 1)
				c->wire_done = true;
			continue;
		}
		if (c->resp_body == GW_BODY_LENGTH && (uint64_t)take >= c->resp_left) {
			take = (size_t)c->resp_left;
			c->wire_done = true;
		}
		if (c->resp_body == GW_BODY_LENGTH)
			c->resp_left -= take;
		gw_budget_moved(c, take);
		if (c->red || c->dec) {
			r = body_in(v.iov_base, take, c);
			evbuffer_drain(in, take);
			if (r < 0) {
				cut_off(c, "out of memory");
				return;
			}
		} else if (take <= 16384) {
			/* Small: copied next to the head, one TLS record. */
			evbuffer_add(acc, v.iov_base, take);
			evbuffer_drain(in, take);
			c->bytes_down += take;
		} else {
			gw_flush_acc(c);
			evbuffer_remove_buffer(in, out, take);
			c->bytes_down += take;
		}
	}
}

bool gw_response_pending(const struct conn *c)
{
	if (c->phase != P_FORWARD && c->phase != P_TUNNEL)
		return false;
	if (c->ubev && evbuffer_get_length(bufferevent_get_input(c->ubev)) > 0)
		return true;
	/* The decoder's last step filled its output: it may hold more. */
	return c->dec && (evbuffer_get_length(c->dec_in) > 0 || c->wire_done ||
			  c->dec_step == GW_DECODE_STEP);
}

void gw_pump_response(struct conn *c)
{
	gw_conn_hold(c);
	pump_response_inner(c);
	if (gw_conn_release(c) && c->phase != P_CLOSING)
		gw_flush_acc(c);
}

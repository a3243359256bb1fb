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

#include "gateway/engine.h"

/* ---- the upstream side ---- */

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

static int redact_piece(const char *p, size_t n, void *ud)
{
	struct conn *c = ud;
	return gw_redact(c->red, p, n, emit_chunk, c);
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
		if (switching && (sv_equal_ci_cstr(f->name, "connection") || sv_equal_ci_cstr(f->name, "upgrade")))
			continue;
		/* The body's framing is ours to write (below), from what was
		 * parsed; a bodiless response keeps its Content-Length (HEAD). */
		if (res->body != GW_BODY_NONE && sv_equal_ci_cstr(f->name, "content-length"))
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
		for (size_t i = 0; i < res->n_fields; i++)
			if (sv_equal_ci_cstr(res->fields[i].name, "upgrade")) {
				evbuffer_add(out, "Upgrade: ", 9);
				evbuffer_add(out, res->fields[i].value.p, res->fields[i].value.len);
				evbuffer_add(out, "\r\n", 2);
				break;
			}
		evbuffer_add(out, "Connection: Upgrade\r\n", 21);
	} else if (res->status >= 200) {
		if (c->rechunk || (res->body == GW_BODY_CHUNKED && !c->unframed))
			evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
		else if (res->body == GW_BODY_LENGTH && !c->unframed)
			evbuffer_add_printf(out, "Content-Length: %" PRIu64 "\r\n",
					    res->content_length);
		evbuffer_add_printf(out, "Connection: %s\r\n", c->close_after ? "close" : "keep-alive");
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
	gw_reset_request(c);
	gw_arm_timer(c, IDLE_TIMEOUT_MS);
	gw_process_client(c);
}

void gw_response_body_done(struct conn *c)
{
	if (c->red) {
		gw_redact_finish(c->red, emit_chunk, c);
		if (c->rechunk)
			evbuffer_add(c->acc, "0\r\n\r\n", 5);
	}
	c->resp_done = true;
	finish_exchange(c);
}

/* Moves response bytes from the upstream to the client (through acc). */
static void pump_response_inner(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->ubev);
	struct evbuffer *out = bufferevent_get_output(c->cbev);
	struct evbuffer *acc = c->acc;
	while (c->phase == P_FORWARD && !c->resp_head_done) {
		size_t len = evbuffer_get_length(in);
		if (len == 0)
			return;
		size_t want = len < GW_HTTP_HEAD_MAX + 1 ? len : GW_HTTP_HEAD_MAX + 1;
		const char *p = (const char *)evbuffer_pullup(in, (ssize_t)want);
		struct gw_http_response *res = malloc(sizeof(*res));
		if (!res || !p) {
			free(res);
			gw_conn_free(c);
			return;
		}
		int r = gw_http_parse_response(p, want, c->head_req, res);
		if (r == 0) {
			free(res);
			return;
		}
		if (r < 0) {
			free(res);
			gw_respond_error(c, 502, "malformed response from the upstream", false);
			return;
		}
		c->status = res->status;
		if (res->status >= 100 && res->status < 200 && res->status != 101) {
			/* Interim (100 Continue): passed on, the final one follows. */
			write_response_head(c, res, p);
			evbuffer_drain(in, res->head_len);
			free(res);
			continue;
		}
		if (res->status == 101) {
			if (!c->upgrade) {
				free(res);
				gw_respond_error(c, 502, "upstream switched protocols unasked", false);
				return;
			}
			write_response_head(c, res, p);
			evbuffer_drain(in, res->head_len);
			free(res);
			c->resp_head_done = true;
			gw_audit(c, "allow");
			c->phase = P_TUNNEL;
			bufferevent_set_timeouts(c->ubev, NULL, NULL);
			bufferevent_enable(c->cbev, EV_READ);
			break;
		}
		c->resp_body = res->body;
		c->resp_left = res->content_length;
		c->close_after = res->connection_close || res->body == GW_BODY_CLOSE || c->req_close;
		c->up_reusable = !res->connection_close && res->body != GW_BODY_CLOSE;
		/* A body being redacted may change length: chunked for HTTP/1.1
		 * clients, up to the close for HTTP/1.0 ones. */
		if (c->red && res->body != GW_BODY_NONE) {
			if (c->http10)
				c->unframed = c->close_after = true;
			else
				c->rechunk = true;
			if (res->body == GW_BODY_CLOSE)
				c->close_after = true;
		}
		write_response_head(c, res, p);
		evbuffer_drain(in, res->head_len);
		free(res);
		c->resp_head_done = true;
		if (c->resp_body == GW_BODY_NONE ||
		    (c->resp_body == GW_BODY_LENGTH && c->resp_left == 0)) {
			gw_response_body_done(c);
			return;
		}
	}
	if (c->phase == P_TUNNEL) {
		if (evbuffer_get_length(out) >= CONN_HIGH_WATER || gw_over_budget(c)) {
			bufferevent_disable(c->ubev, EV_READ);
			return;
		}
		gw_flush_acc(c);
		c->bytes_down += evbuffer_get_length(in);
		evbuffer_add_buffer(out, in);
		return;
	}
	while (c->phase == P_FORWARD && !c->resp_done && evbuffer_get_length(in) > 0) {
		if (evbuffer_get_length(out) + evbuffer_get_length(acc) >= CONN_HIGH_WATER ||
		    gw_over_budget(c)) {
			bufferevent_disable(c->ubev, EV_READ);
			return;
		}
		struct evbuffer_iovec v;
		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			return;
		size_t take = v.iov_len;
		bool done = false;
		if (c->resp_body == GW_BODY_LENGTH) {
			if ((uint64_t)take >= c->resp_left) {
				take = (size_t)c->resp_left;
				done = true;
			}
			c->resp_left -= take;
			if (c->red)
				redact_piece(v.iov_base, take, c);
		} else if (c->resp_body == GW_BODY_CHUNKED) {
			size_t used;
			int r = gw_chunked_feed(&c->resp_ch, v.iov_base, v.iov_len, &used,
						c->red ? redact_piece : NULL, c);
			if (r < 0) {
				snprintf(c->reason, sizeof(c->reason), "malformed chunked response");
				gw_audit(c, "allow");
				gw_conn_free(c);
				return;
			}
			take = used;
			done = r == 1;
		} else if (c->red) {
			redact_piece(v.iov_base, take, c);
		}
		if (c->red) {
			evbuffer_drain(in, take);
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
		if (done) {
			gw_response_body_done(c);
			return;
		}
	}
}

void gw_pump_response(struct conn *c)
{
	gw_conn_hold(c);
	pump_response_inner(c);
	if (gw_conn_release(c) && c->phase != P_CLOSING)
		gw_flush_acc(c);
}

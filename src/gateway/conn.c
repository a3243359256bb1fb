/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A connection's life: the global output budget, timers, the answers the
 * gateway writes itself, closing once the client has everything, and
 * freeing (held while a caller up the stack still looks at it).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/bufferevent_ssl.h>

#include "common/denial.h"
#include "gateway/engine.h"
#include "gateway/decode.h"
#include "gateway/vault.h"
#include "gateway/ws.h"

double gw_ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* clang-format off */
static const char *status_text(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 408: return "Request Timeout";
	case 414: return "URI Too Long";
	case 421: return "Misdirected Request";
	case 431: return "Request Header Fields Too Large";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return "Error";
	}
}
/* clang-format on */

/* ---- budgets: every buffer reports what it holds ---- */

static void unpause(struct conn *list)
{
	for (struct conn *c = list, *n; c; c = n) {
		n = c->paused_next;
		c->paused = 0;
		c->paused_next = NULL;
		if (c->cbev)
			bufferevent_enable(c->cbev, EV_READ);
		if (c->ubev && !c->up_gone)
			bufferevent_enable(c->ubev, EV_READ);
		/* From the loop, not from inside this buffer's callback. */
		event_active(c->kick_up, EV_TIMEOUT, 0);
		event_active(c->kick_client, EV_TIMEOUT, 0);
	}
}

static void budget_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *ud)
{
	struct gw_watch *w = ud;
	struct gw_sbx *s = w->s;
	struct gw_engine *e = s->e;
	w->counted += info->n_added;
	e->queued += info->n_added;
	s->queued += info->n_added;
	uint64_t gone = info->n_deleted <= w->counted ? info->n_deleted : w->counted;
	w->counted -= gone;
	e->queued -= gone <= e->queued ? gone : e->queued;
	s->queued -= gone <= s->queued ? gone : s->queued;
	if (e->paused && e->queued < GLOBAL_BUDGET / 2) {
		struct conn *list = e->paused;
		e->paused = NULL;
		unpause(list);
	}
	if (s->paused && s->queued < e->cfg->buffer_max / 2) {
		struct conn *list = s->paused;
		s->paused = NULL;
		unpause(list);
	}
}

struct gw_watch *gw_watch_bev(struct gw_sbx *s, struct bufferevent *bev)
{
	struct gw_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->s = s;
	w->out = bufferevent_get_output(bev);
	w->in = bufferevent_get_input(bev);
	w->ent_out = evbuffer_add_cb(w->out, budget_cb, w);
	w->ent_in = w->ent_out ? evbuffer_add_cb(w->in, budget_cb, w) : NULL;
	if (!w->ent_in) {
		if (w->ent_out)
			evbuffer_remove_cb_entry(w->out, w->ent_out);
		free(w);
		return NULL;
	}
	return w;
}

void gw_unwatch(struct gw_watch *w)
{
	if (!w)
		return;
	struct gw_sbx *s = w->s;
	struct gw_engine *e = s->e;
	evbuffer_remove_cb_entry(w->out, w->ent_out);
	evbuffer_remove_cb_entry(w->in, w->ent_in);
	e->queued -= w->counted <= e->queued ? w->counted : e->queued;
	s->queued -= w->counted <= s->queued ? w->counted : s->queued;
	free(w);
}

/* Frees a bufferevent (its buffers unwatched by the caller first). */
void gw_bev_free(struct bufferevent *bev)
{
	if (bev)
		bufferevent_free(bev);
}

void gw_client_read_limit(struct conn *c, size_t high)
{
	if (c->cbev)
		bufferevent_setwatermark(c->cbev, EV_READ, 0, high);
}

bool gw_over_budget(struct conn *c)
{
	struct gw_sbx *s = c->s;
	if (s->queued >= c->e->cfg->buffer_max) {
		if (!c->paused) {
			c->paused = 2;
			c->paused_next = s->paused;
			s->paused = c;
		}
		return true;
	}
	if (c->e->queued < GLOBAL_BUDGET)
		return false;
	if (!c->paused) {
		c->paused = 1;
		c->paused_next = c->e->paused;
		c->e->paused = c;
	}
	return true;
}

void gw_up_free(struct conn *c)
{
	gw_unwatch(c->w_up);
	c->w_up = NULL;
	gw_bev_free(c->ubev);
	c->ubev = NULL;
}

/* ---- responses of our own ---- */

/*
 * Hands the gathered response bytes to the client's buffer in one piece:
 * a TLS bufferevent writes one record per buffer chain, so a head and a
 * small body made of many small adds would go out as a dozen records.
 */
void gw_flush_acc(struct conn *c)
{
	size_t len = evbuffer_get_length(c->acc);
	if (!len)
		return;
	if (len <= 16384)
		evbuffer_pullup(c->acc, -1);
	bufferevent_write_buffer(c->cbev, c->acc);
}

bool gw_client_flushed(struct conn *c)
{
	if (evbuffer_get_length(bufferevent_get_output(c->cbev)) > 0)
		return false;
	struct bufferevent *under = bufferevent_get_underlying(c->cbev);
	return !under || evbuffer_get_length(bufferevent_get_output(under)) == 0;
}

/* The socket under a closing TLS filter wrote something: free the
 * connection from the loop (not from inside the buffer's callback) once
 * all is out. */
static void closing_drain_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *ud)
{
	struct conn *c = ud;
	if (info->n_deleted && c->phase == P_CLOSING && gw_client_flushed(c))
		event_active(c->timer, EV_TIMEOUT, 0);
}

void gw_close_when_flushed(struct conn *c)
{
	gw_flush_acc(c);
	c->phase = P_CLOSING;
	gw_release_upstream(c);
	if (c->dns_req) {
		evdns_getaddrinfo_cancel(c->dns_req);
		c->dns_req = NULL;
	}
	bufferevent_disable(c->cbev, EV_READ);
	/* A TLS filter's bytes sit in the socket's buffer below it: the
	 * connection goes once that is empty too. */
	struct bufferevent *under = bufferevent_get_underlying(c->cbev);
	if (under && !c->drain_cb) {
		bufferevent_setwatermark(c->cbev, EV_WRITE, 0, 0);
		c->drain_cb = evbuffer_add_cb(bufferevent_get_output(under), closing_drain_cb, c);
	}
	if (gw_client_flushed(c)) {
		gw_conn_free(c);
		return;
	}
	/* Bounded: a client that never reads goes after CLIENT_WRITE_MS. */
	gw_arm_timer(c, CLIENT_WRITE_MS);
}

/* Answers with status and reason (plain text), audits, and closes or goes on. */
void gw_respond_error(struct conn *c, int status, const char *reason, bool keep)
{
	c->status = status;
	snprintf(c->reason, sizeof(c->reason), "%s", reason);
	gw_audit(c, status >= 500 ? "allow" : "deny");
	struct evbuffer *out = bufferevent_get_output(c->cbev);
	/* The reason, and what would allow it (the option or policy key). */
	char body[640], hint[256];
	bool hinted = status == 403 && c->host[0] &&
		      denial_hint(reason, c->host, c->port, hint, sizeof(hint));
	int blen = snprintf(body, sizeof(body), "airlock: %s%s%s%s\n%s%s%s", reason,
			    c->rule[0] ? " (rule " : "", c->rule[0] ? c->rule : "",
			    c->rule[0] ? ")" : "", hinted ? "airlock: to allow it: " : "",
			    hinted ? hint : "", hinted ? "\n" : "");
	if (blen < 0)
		blen = 0;
	if ((size_t)blen >= sizeof(body))
		blen = sizeof(body) - 1;
	bool close = !keep || c->req_close;
	evbuffer_add_printf(
		out,
		"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
		"Content-Length: %d\r\nX-Airlock-Reason: %s\r\nCache-Control: no-store\r\n"
		"Connection: %s\r\n\r\n",
		status, status_text(status), blen, reason, close ? "close" : "keep-alive");
	if (!c->head_req)
		evbuffer_add(out, body, (size_t)blen);
	c->bytes_down = (uint64_t)blen;
	if (close) {
		gw_close_when_flushed(c);
		return;
	}
	/* Next request on this connection. */
	c->phase = P_HEAD;
	gw_client_read_limit(c, CONN_HIGH_WATER);
	c->head_started = false;
	gw_arm_timer(c, IDLE_TIMEOUT_MS);
	gw_process_client(c);
}

/* ---- the egress budget ---- */

uint64_t gw_budget_left(const struct conn *c)
{
	return gw_budget_room(&c->s->budget);
}

void gw_budget_moved(struct conn *c, uint64_t n)
{
	gw_budget_count(&c->s->budget, n);
}

bool gw_budget_relay(struct conn *c, struct evbuffer *in, struct evbuffer *out, uint64_t *counter)
{
	size_t len = evbuffer_get_length(in);
	uint64_t left = gw_budget_left(c);
	size_t take = (uint64_t)len <= left ? len : (size_t)left;
	*counter += take;
	gw_budget_moved(c, take);
	evbuffer_remove_buffer(in, out, take);
	if (take == len)
		return true;
	gw_budget_cut(c);
	return false;
}

/*
 * c has bytes to move and the sandbox's bytes are spent: what it relayed
 * so far still goes to the client, then the connection goes. A client
 * that has had nothing of the response yet gets a 403 saying why.
 */
void gw_budget_cut(struct conn *c)
{
	if (c->budget_cut || c->phase == P_CLOSING)
		return;
	c->budget_cut = true;
	c->audit_kind = "budget";
	char why[160];
	if (c->phase != P_TUNNEL && !c->resp_head_done) {
		snprintf(why, sizeof(why), "the turn's egress budget of %" PRIu64 " bytes is spent",
			 c->s->budget.max_bytes);
		/* Interim heads gathered for the client go before our answer. */
		gw_flush_acc(c);
		gw_respond_error(c, 403, why, false);
		return;
	}
	snprintf(c->reason, sizeof(c->reason),
		 "the turn's egress budget of %" PRIu64 " bytes is spent: cut mid-transfer",
		 c->s->budget.max_bytes);
	/* A WebSocket's request was audited at its 101: the cut is a line
	 * of its own. */
	c->audited = false;
	gw_audit(c, "deny");
	gw_close_when_flushed(c);
}

/* ---- request state ---- */

void gw_reset_request(struct conn *c)
{
	free(c->path);
	c->path = NULL;
	c->method[0] = c->host[0] = c->rule[0] = c->reason[0] = '\0';
	c->port = 0;
	c->head_req = c->req_close = c->upgrade = c->http10 = false;
	c->req_body = GW_BODY_NONE;
	c->req_left = 0;
	memset(&c->req_ch, 0, sizeof(c->req_ch));
	c->req_done = false;
	c->resp_head_done = c->resp_done = false;
	c->interim = 0;
	c->resp_body = GW_BODY_NONE;
	c->resp_left = 0;
	memset(&c->resp_ch, 0, sizeof(c->resp_ch));
	if (c->red) {
		gw_redactor_free(c->red);
		c->red = NULL;
	}
	gw_decoder_free(c->dec);
	c->dec = NULL;
	if (c->dec_in)
		evbuffer_drain(c->dec_in, evbuffer_get_length(c->dec_in));
	c->dec_step = 0;
	c->wire_done = false;
	c->up_gone = 0;
	if (c->ctls && c->cbev)
		bufferevent_set_max_single_read(c->cbev, READ_SMALL); /* waiting for a head */
	gw_client_read_limit(c, CONN_HIGH_WATER);
	gw_ws_free(c->ws);
	c->ws = NULL;
	c->rechunk = c->unframed = c->close_after = c->reused = false;
	if (c->retry)
		evbuffer_drain(c->retry, evbuffer_get_length(c->retry));
	c->status = 0;
	c->bytes_up = c->bytes_down = 0;
	c->cred_name = NULL;
	c->generation = c->e->policy ? c->e->policy->generation : 0;
	c->audited = false;
	c->audit_kind = NULL;
	c->admitted = false;
	c->head_started = false;
	clock_gettime(CLOCK_MONOTONIC, &c->t0);
	if (c->pending)
		evbuffer_drain(c->pending, evbuffer_get_length(c->pending));
}

struct timeval gw_ms_tv(uint64_t ms)
{
	return (struct timeval){ .tv_sec = (time_t)(ms / 1000),
				 .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
}

void gw_arm_timer(struct conn *c, uint64_t ms)
{
	struct timeval tv = gw_ms_tv(ms);
	evtimer_add(c->timer, &tv);
}

void gw_timer_cb(evutil_socket_t fd, short what, void *ud)
{
	struct conn *c = ud;
	if (c->phase == P_CLOSING) {
		gw_conn_free(c);
		return;
	}
	if (c->phase == P_HEAD && c->head_started) {
		gw_respond_error(c, 408, "the request head took too long", false);
		return;
	}
	if (c->phase == P_INSPECT) {
		gw_respond_error(c, 408, "the push's ref updates took too long to come", false);
		return;
	}
	gw_conn_free(c);
}

/* ---- connections ---- */

void gw_conn_hold(struct conn *c)
{
	c->hold++;
}

/* Whether c is still there to use after a call that may have freed it. */
bool gw_conn_release(struct conn *c)
{
	c->hold--;
	if (c->dead) {
		if (c->hold == 0)
			gw_conn_free(c);
		return false;
	}
	return true;
}

void gw_conn_free(struct conn *c)
{
	/* A buffer callback naming c must not outlive it: the buffer's
	 * callbacks may be deferred to a later turn of the loop. */
	if (c->drain_cb && c->cbev) {
		struct bufferevent *under = bufferevent_get_underlying(c->cbev);
		if (under)
			evbuffer_remove_cb_entry(bufferevent_get_output(under), c->drain_cb);
		c->drain_cb = NULL;
	}
	struct gw_sbx *s = c->s;
	if (c->hold) {
		/* Someone up the stack still looks at it: stop everything now,
		 * free when they are done. */
		c->dead = true;
		if (c->cbev)
			bufferevent_disable(c->cbev, EV_READ | EV_WRITE);
		if (c->ubev)
			bufferevent_disable(c->ubev, EV_READ | EV_WRITE);
		if (c->timer)
			evtimer_del(c->timer);
		if (c->kick_up)
			event_del(c->kick_up);
		if (c->kick_client)
			event_del(c->kick_client);
		return;
	}
	if (c->paused) {
		struct conn **head = c->paused == 1 ? &c->e->paused : &s->paused;
		for (struct conn **pp = head; *pp; pp = &(*pp)->paused_next)
			if (*pp == c) {
				*pp = c->paused_next;
				break;
			}
	}
	if (c->dns_req)
		evdns_getaddrinfo_cancel(c->dns_req);
	gw_release_upstream(c);
	gw_unwatch(c->w_tls);
	gw_unwatch(c->w_client);
	c->w_tls = c->w_client = NULL;
	gw_bev_free(c->cbev);
	if (c->timer)
		event_free(c->timer);
	if (c->kick_up)
		event_free(c->kick_up);
	if (c->kick_client)
		event_free(c->kick_client);
	if (c->pending)
		evbuffer_free(c->pending);
	if (c->retry)
		evbuffer_free(c->retry);
	if (c->acc)
		evbuffer_free(c->acc);
	if (c->red)
		gw_redactor_free(c->red);
	gw_decoder_free(c->dec);
	if (c->dec_in)
		evbuffer_free(c->dec_in);
	gw_ws_free(c->ws);
	free(c->path);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->n_conns--;
	free(c);
}

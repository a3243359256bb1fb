/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client side: a sandbox's connections. Three listeners per sandbox:
 * the proxy (absolute-form http:// requests and CONNECT, which is answered
 * with TLS under a leaf of the sandbox's CA), the transparent port 80
 * (origin-form, routed by Host) and the transparent port 443 (TLS, routed
 * by SNI). Inside TLS every request is decided on its own, and its Host
 * must name the tunnel's host (421).
 *
 * Each connection carries one request at a time (no pipelining: bytes
 * after a request wait in the kernel and our input buffer until its
 * response is done).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "common/buf.h"
#include "gateway/ca.h"
#include "gateway/decide.h"
#include "gateway/engine.h"
#include "gateway/github.h"
#include "gateway/path.h"

static bool span_copy(struct sv s, char *out, size_t size)
{
	if (s.len >= size)
		return false;
	memcpy(out, s.p, s.len);
	out[s.len] = '\0';
	return true;
}

/* The audit line of a head refused before its decision names whatever
 * was parsed of it: method, host, port and path (without the query).
 * Every byte of a request line and of field values is visible ASCII. */
static void note_refused_head(struct conn *c, const struct gw_http_request *req)
{
	if (!c->method[0] && req->method.len)
		span_copy(req->method, c->method, sizeof(c->method));
	struct sv a = req->authority.len ? req->authority : req->host;
	if (!c->host[0] && a.len) {
		uint16_t port = 0;
		if (gw_parse_hostport(a.p, a.len, c->host, sizeof(c->host), &port, false) < 0) {
			size_t n = a.len < sizeof(c->host) - 1 ? a.len : sizeof(c->host) - 1;
			memcpy(c->host, a.p, n);
			c->host[n] = '\0';
		} else if (!c->port) {
			c->port = port;
		}
	}
	/* Inside a tunnel its host is known whatever the head said. */
	if (!c->host[0] && c->ctls && c->tunnel_host[0]) {
		snprintf(c->host, sizeof(c->host), "%s", c->tunnel_host);
		c->port = c->tunnel_port;
	}
	struct sv path = req->path;
	if (!path.len && req->target.len && req->target.p[0] == '/')
		path = req->target; /* refused before the target's form was known */
	if (!c->path && path.len) {
		const char *q = memchr(path.p, '?', path.len);
		size_t n = q ? (size_t)(q - path.p) : path.len;
		c->path = strndup(path.p, n < GW_PATH_MAX ? n : GW_PATH_MAX);
	}
}

/* The request asks for a WebSocket and nothing else. */
static bool websocket_upgrade(const struct gw_http_request *req)
{
	size_t n = 0, ws = 0;
	for (size_t i = 0; i < req->n_fields; i++)
		if (sv_equal_ci_cstr(req->fields[i].name, "upgrade")) {
			n++;
			ws += sv_equal_ci_cstr(req->fields[i].value, "websocket");
		}
	return n == 1 && ws == 1;
}

/* Host[:port] from a Host field or authority, normalized; the default port when absent. */
static int host_port(struct sv s, uint16_t dflt, char *host, size_t size, uint16_t *port)
{
	uint16_t p = 0;
	if (gw_parse_hostport(s.p, s.len, host, size, &p, false) < 0)
		return -1;
	*port = p ? p : dflt;
	return 0;
}

/* A complete head in the client's input: decide and start the request. */
static void handle_request(struct conn *c, struct gw_http_request *req)
{
	struct gw_engine *e = c->e;
	const struct gw_config *cfg = e->cfg;
	struct evbuffer *in = bufferevent_get_input(c->cbev);
	gw_reset_request(c);
	span_copy(req->method, c->method, sizeof(c->method));
	c->head_req = sv_equal_ci_cstr(req->method, "HEAD") && strcmp(c->method, "HEAD") == 0;
	c->req_close = req->connection_close;
	c->req_body = req->body;
	c->req_left = req->content_length;
	/* Only to WebSocket: after any other upgrade (h2c) the connection
	 * would carry requests the gateway never decides, and what comes back
	 * could not be redacted. Such a request goes on without its upgrade,
	 * as the plain request it also is (RFC 9110 7.8). */
	c->upgrade = req->upgrade && websocket_upgrade(req);
	c->http10 = req->http10;

	/* No egress goes unaudited: past the log's limit nothing goes out. */
	if (c->s->audit.capped) {
		evbuffer_drain(in, req->head_len);
		gw_respond_error(c, 503, "the sandbox's audit log is full (limits: audit_max)",
				 false);
		return;
	}

	if (req->form == GW_FORM_AUTHORITY) {
		/* CONNECT: only on the proxy, never inside a tunnel. */
		uint16_t port;
		if (c->kind != CK_PROXY || c->ctls ||
		    host_port(req->authority, 443, c->host, sizeof(c->host), &port) < 0) {
			evbuffer_drain(in, req->head_len);
			gw_respond_error(c, 400, "CONNECT is for the proxy port, with HOST:PORT",
					 false);
			return;
		}
		c->port = port;
		evbuffer_drain(in, req->head_len);
		/* Step 1: the tunnel. */
		struct gw_verdict v;
		gw_decide_tunnel(cfg, e->policy, c->host, port, &v);
		if (!v.allow) {
			gw_respond_error(c, v.status, v.reason, false);
			return;
		}
		/* Tunnel: TLS with a leaf for the host, every request inside decided. */
		const struct gw_leaf *leaf;
		struct al_error err = { 0 };
		if (gw_ca_leaf(e->ca, c->host, &leaf, &err) < 0) {
			gw_respond_error(c, 502, "cannot make a certificate for this host", false);
			return;
		}
		SSL *ssl = SSL_new(e->srv_ctx);
		if (!ssl) {
			gw_respond_error(c, 502, "out of memory", false);
			return;
		}
		SSL_use_certificate(ssl, gw_leaf_x509(leaf));
		SSL_use_PrivateKey(ssl, gw_leaf_pkey(leaf));
		SSL_add1_chain_cert(ssl, gw_ca_x509(e->ca));
		SSL_set_app_data(ssl, c);
		snprintf(c->tunnel_host, sizeof(c->tunnel_host), "%s", c->host);
		c->tunnel_port = port;
		evbuffer_add(bufferevent_get_output(c->cbev),
			     "HTTP/1.1 200 Connection established\r\n\r\n", 39);
		struct bufferevent *tls = bufferevent_openssl_filter_new(
			e->base, c->cbev, ssl, BUFFEREVENT_SSL_ACCEPTING,
			BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
		if (!tls) {
			SSL_free(ssl);
			gw_conn_free(c);
			return;
		}
		c->cbev = tls;
		c->cssl = ssl;
		c->ctls = true;
		bufferevent_setcb(tls, gw_client_read_cb, gw_client_write_cb, gw_client_event_cb,
				  c);
		c->w_tls = gw_watch_bev(c->s, tls);
		if (!c->w_tls) {
			gw_conn_free(c);
			return;
		}
		bufferevent_setwatermark(tls, EV_WRITE, CONN_HIGH_WATER / 2, 0);
		bufferevent_setwatermark(tls, EV_READ, 0, CONN_HIGH_WATER);
		bufferevent_set_max_single_read(tls, READ_SMALL);
		bufferevent_enable(tls, EV_READ | EV_WRITE);
		c->phase = P_HEAD;
		gw_arm_timer(c, IDLE_TIMEOUT_MS);
		return;
	}

	/* Where the request goes. */
	uint16_t port = 0;
	if (req->form == GW_FORM_ABSOLUTE) {
		if (c->kind != CK_PROXY || c->ctls) {
			evbuffer_drain(in, req->head_len);
			gw_respond_error(c, 400, "absolute-form request outside the proxy", false);
			return;
		}
		if (host_port(req->authority, 80, c->host, sizeof(c->host), &port) < 0) {
			evbuffer_drain(in, req->head_len);
			gw_respond_error(c, 400, "bad host", false);
			return;
		}
	} else {
		uint16_t dflt = c->ctls ? 443 : 80;
		if (host_port(req->host, dflt, c->host, sizeof(c->host), &port) < 0) {
			evbuffer_drain(in, req->head_len);
			gw_respond_error(c, 400, "bad Host", false);
			return;
		}
		if (c->kind == CK_PROXY && !c->ctls) {
			evbuffer_drain(in, req->head_len);
			gw_respond_error(c, 400,
					 "this is a proxy: send absolute-form requests or CONNECT",
					 false);
			return;
		}
		if (c->ctls) {
			/* One name for the tunnel, the SNI and the request. */
			if (strcmp(c->host, c->tunnel_host) != 0 || port != c->tunnel_port ||
			    (c->sni[0] && strcmp(c->sni, c->tunnel_host) != 0)) {
				c->port = port;
				evbuffer_drain(in, req->head_len);
				gw_respond_error(c, 421,
						 "Host, TLS server name and CONNECT target differ",
						 false);
				return;
			}
		} else if (port != 80) {
			c->port = port;
			evbuffer_drain(in, req->head_len);
			gw_respond_error(c, 421, "Host names another port than this connection's",
					 false);
			return;
		}
	}
	c->port = port;

	/* The one canonical path every decision uses. */
	char *canon = malloc(GW_PATH_MAX + 1);
	if (!canon) {
		gw_conn_free(c);
		return;
	}
	size_t qoff;
	int pr = gw_path_canonical(req->path.p, req->path.len, canon, GW_PATH_MAX + 1, &qoff);
	if (pr == -EINVAL && !gw_decision_uses_path(cfg, e->policy, c->host, port))
		pr = gw_path_canonical_opts(req->path.p, req->path.len, canon, GW_PATH_MAX + 1,
					    &qoff, GW_PATH_ENCODED_SLASH);
	if (pr < 0) {
		free(canon);
		note_refused_head(c, req);
		evbuffer_drain(in, req->head_len);
		gw_respond_error(c, 400, "ambiguous or malformed path", false);
		return;
	}
	c->path = canon;
	const char *query = req->path.p + qoff;
	size_t query_len = req->path.len - qoff;

	/* Step 2: the request itself. */
	struct gw_request_facts facts = {
		.method = c->method, .host = c->host, .port = port, .path = c->path, .tls = c->ctls
	};
	struct gw_verdict v;
	gw_decide_request(cfg, e->policy, &facts, &v);
	c->generation = v.generation;
	if (v.rule)
		snprintf(c->rule, sizeof(c->rule), "%s", v.rule);
	if (!v.allow) {
		evbuffer_drain(in, req->head_len);
		gw_respond_error(c, v.status, v.reason, req->body == GW_BODY_NONE);
		return;
	}
	snprintf(c->reason, sizeof(c->reason), "%s", v.reason);
	/* Servers that honour a method override act on the method it names:
	 * it must be allowed as well (with the same credential). */
	for (size_t i = 0; i < req->n_fields; i++) {
		const struct gw_http_field *f = &req->fields[i];
		if (!sv_equal_ci_cstr(f->name, "x-http-method-override") &&
		    !sv_equal_ci_cstr(f->name, "x-http-method") &&
		    !sv_equal_ci_cstr(f->name, "x-method-override"))
			continue;
		char m[sizeof(c->method)];
		struct gw_verdict ov = { .allow = false };
		struct gw_request_facts of = facts;
		if (span_copy(f->value, m, sizeof(m)) && f->value.len > 0) {
			for (char *q = m; *q; q++)
				if (*q >= 'a' && *q <= 'z')
					*q = (char)(*q - 'a' + 'A');
			of.method = m;
			gw_decide_request(cfg, e->policy, &of, &ov);
		}
		if (!ov.allow || ov.cred != v.cred || ov.check_push != v.check_push) {
			evbuffer_drain(in, req->head_len);
			gw_respond_error(c, 403,
					 "a method override names a method this request may "
					 "not use",
					 false);
			return;
		}
	}

	/* The credential's value (the vault holds every one: checked at start). */
	const struct gw_cred *cred = v.cred;
	const char *secret = NULL;
	size_t secret_len = 0;
	if (cred && e->vault)
		secret = gw_vault_get(e->vault, cred->secret, &secret_len);
	if (!secret)
		cred = NULL;
	if (v.check_push) {
		/* Its ref updates are read as sent: an encoded body is not. */
		for (size_t i = 0; i < req->n_fields; i++)
			if (sv_equal_ci_cstr(req->fields[i].name, "content-encoding") &&
			    !sv_equal_ci_cstr(req->fields[i].value, "identity")) {
				evbuffer_drain(in, req->head_len);
				gw_respond_error(c, 403,
						 "a push's ref updates are checked: send them "
						 "without Content-Encoding",
						 false);
				return;
			}
	}
	c->cred_name = cred ? cred->secret : NULL;
	if (cred && gw_redactor_new(e->vault, &c->red) < 0) {
		gw_conn_free(c);
		return;
	}

	gw_build_upstream_head(c, req, c->path, query, query_len, cred, secret, secret_len);
	c->bytes_up = evbuffer_get_length(c->pending);
	evbuffer_drain(in, req->head_len);
	if (c->req_body == GW_BODY_NONE || (c->req_body == GW_BODY_LENGTH && c->req_left == 0)) {
		c->req_done = true;
		gw_client_read_limit(c, READ_HOLD);
	} else if (c->ctls) {
		bufferevent_set_max_single_read(c->cbev, READ_LARGE); /* a body follows */
	}
	if (v.check_push && !c->req_done) {
		/* Step 3: a git push goes on once its ref updates are checked. */
		c->phase = P_INSPECT;
		gw_arm_timer(c, HEAD_DEADLINE_MS);
		gw_process_client(c);
		return;
	}
	if (v.check_push) {
		gw_respond_error(c, 403, "malformed push request", false);
		return;
	}
	gw_upstream_start(c);
}

static int gather_body(const char *p, size_t n, void *ud)
{
	return buf_append(ud, p, n) < 0 ? -1 : 0;
}

/*
 * A push's ref updates, read from the start of its body without taking
 * it from the input: the body goes on unchanged once they are allowed.
 */
static void inspect_push(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->cbev);
	size_t avail = evbuffer_get_length(in);
	const char *why = NULL;
	int r;
	if (c->req_body == GW_BODY_LENGTH) {
		size_t n = (uint64_t)avail < c->req_left ? avail : (size_t)c->req_left;
		if (n > GW_GITHUB_PUSH_HEAD_MAX)
			n = GW_GITHUB_PUSH_HEAD_MAX;
		const char *p = n ? (const char *)evbuffer_pullup(in, (ssize_t)n) : "";
		r = gw_github_push_check(p, n, n == c->req_left, GW_GITHUB_BRANCH_PREFIX, &why);
	} else {
		/* Chunked: the data of the chunks so far, taken out of their
		 * framing again at each look (bounded: twice the limit). */
		size_t n = avail < 2 * GW_GITHUB_PUSH_HEAD_MAX ? avail :
								 2 * GW_GITHUB_PUSH_HEAD_MAX;
		const char *p = n ? (const char *)evbuffer_pullup(in, (ssize_t)n) : "";
		struct gw_chunked ch = { 0 };
		struct buf data = BUF_INIT(GW_GITHUB_PUSH_HEAD_MAX + 65536);
		size_t used = 0;
		int cr = gw_chunked_feed(&ch, p, n, &used, gather_body, &data);
		if (cr < 0 && data.len < GW_GITHUB_PUSH_HEAD_MAX) {
			r = -1;
			why = "malformed chunked request body";
		} else {
			r = gw_github_push_check(data.data ? data.data : "", data.len, cr == 1,
						 GW_GITHUB_BRANCH_PREFIX, &why);
		}
		if (r == 0 && n == 2 * GW_GITHUB_PUSH_HEAD_MAX) {
			r = -1;
			why = "a push's ref updates are too long";
		}
		buf_free(&data);
	}
	if (r == 0) {
		bufferevent_enable(c->cbev, EV_READ);
		return;
	}
	evtimer_del(c->timer);
	if (r < 0) {
		c->cred_name = NULL; /* the head that carries it never goes */
		gw_respond_error(c, 403, why, false);
		return;
	}
	gw_upstream_start(c);
}

struct chunk_sink {
	struct evbuffer *out;
	uint64_t written; /* for the egress budget */
};

/* A piece of chunk data, framed again by us: chunk-size lines (and their
 * extensions) and trailers are never forwarded as the client wrote them. */
static int chunk_out(const char *p, size_t n, void *ud)
{
	struct chunk_sink *k = ud;
	if (n == 0)
		return 0; /* a zero-size chunk would end the body */
	int hl = evbuffer_add_printf(k->out, "%zx\r\n", n);
	if (hl < 0 || evbuffer_add(k->out, p, n) < 0 || evbuffer_add(k->out, "\r\n", 2) < 0)
		return -1;
	k->written += (uint64_t)hl + n + 2;
	return 0;
}

/*
 * What a chunked request body is fed at a time stays this far below the
 * bytes left in the budget, since the gateway writes its own framing: per
 * feed it writes at most a chunk-size line and two CRLFs (at most 22
 * bytes) and the last chunk (5) more than it consumed.
 */
#define CHUNK_SLACK 32

/* Moves request body bytes from the client to the upstream. */
static void pump_request_body(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->cbev);
	struct evbuffer *out = bufferevent_get_output(c->ubev);
	while (!c->req_done && evbuffer_get_length(in) > 0) {
		if (evbuffer_get_length(out) >= CONN_HIGH_WATER || gw_over_budget(c)) {
			bufferevent_disable(c->cbev, EV_READ);
			return;
		}
		size_t take;
		uint64_t left = gw_budget_left(c);
		if (c->req_body == GW_BODY_LENGTH) {
			size_t avail = evbuffer_get_length(in);
			take = (uint64_t)avail < c->req_left ? avail : (size_t)c->req_left;
			if (take > left)
				take = (size_t)left;
			if (take == 0) {
				gw_budget_cut(c);
				return;
			}
			c->req_left -= take;
			if (c->req_left == 0) {
				c->req_done = true;
				gw_client_read_limit(c, READ_HOLD);
			}
		} else {
			struct evbuffer_iovec v;
			if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
				return;
			size_t feed = v.iov_len;
			if (left != UINT64_MAX) {
				if (left <= CHUNK_SLACK) {
					gw_budget_cut(c);
					return;
				}
				if (feed > left - CHUNK_SLACK)
					feed = (size_t)(left - CHUNK_SLACK);
			}
			size_t used;
			struct chunk_sink sink = { .out = out };
			int r = gw_chunked_feed(&c->req_ch, v.iov_base, feed, &used, chunk_out,
						&sink);
			gw_budget_moved(c, sink.written);
			if (r < 0) {
				/* Part of the body went already: nothing to answer. */
				snprintf(c->reason, sizeof(c->reason),
					 "malformed chunked request body");
				c->status = 400;
				gw_audit(c, "error");
				gw_conn_free(c);
				return;
			}
			evbuffer_drain(in, used);
			c->bytes_up += used;
			if (r == 1) {
				/* The last chunk, with no trailer. */
				evbuffer_add(out, "0\r\n\r\n", 5);
				gw_budget_moved(c, 5);
				c->req_done = true;
				gw_client_read_limit(c, READ_HOLD);
			}
			continue;
		}
		evbuffer_remove_buffer(in, out, take);
		c->bytes_up += take;
		gw_budget_moved(c, take);
	}
	/* Once the body is in, the connection stays readable: bytes of a
	 * next request wait in the input buffer (bounded by its watermark)
	 * until this exchange is over, without an epoll change per request. */
	if (!c->req_done)
		bufferevent_enable(c->cbev, EV_READ);
}

void gw_process_client(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->cbev);
	for (;;) {
		switch (c->phase) {
		case P_HEAD: {
			size_t len = evbuffer_get_length(in);
			if (len == 0) {
				bufferevent_enable(c->cbev, EV_READ);
				return;
			}
			if (!c->head_started) {
				c->head_started = true;
				gw_arm_timer(c, HEAD_DEADLINE_MS);
			}
			size_t want = len < GW_HTTP_HEAD_MAX + 1 ? len : GW_HTTP_HEAD_MAX + 1;
			const char *p = (const char *)evbuffer_pullup(in, (ssize_t)want);
			struct gw_http_request *req = malloc(sizeof(*req));
			if (!req || !p) {
				free(req);
				gw_conn_free(c);
				return;
			}
			int r = gw_http_parse_request(p, want, req);
			if (r == 0) {
				free(req);
				/* Half a head counts against the sandbox's buffers too:
				 * over them, the rest waits in the kernel. */
				if (gw_over_budget(c))
					bufferevent_disable(c->cbev, EV_READ);
				else
					bufferevent_enable(c->cbev, EV_READ);
				return;
			}
			evtimer_del(c->timer);
			if (r < 0) {
				gw_reset_request(c);
				note_refused_head(c, req);
				bool method = r == -501 && !req->http10 && req->method.len &&
					      req->target.len;
				free(req);
				gw_respond_error(c, -r,
						 method	   ? "method not supported (methods are "
							     "case-sensitive; TRACE is refused)" :
						 r == -400 ? "malformed request" :
						 r == -414 ? "request line too long" :
						 r == -431 ? "request head too large" :
							     "not implemented",
						 false);
				return;
			}
			handle_request(c, req);
			free(req);
			return;
		}
		case P_INSPECT:
			inspect_push(c);
			return;
		case P_RESOLVE:
			return;
		case P_FORWARD:
			if (!c->req_done && c->ubev)
				pump_request_body(c);
			return;
		case P_TUNNEL: {
			if (!c->ubev)
				return;
			struct evbuffer *out = bufferevent_get_output(c->ubev);
			if (evbuffer_get_length(out) >= CONN_HIGH_WATER || gw_over_budget(c)) {
				bufferevent_disable(c->cbev, EV_READ);
				return;
			}
			(void)gw_budget_relay(c, in, out, &c->bytes_up);
			return;
		}
		case P_CLOSING:
			evbuffer_drain(in, evbuffer_get_length(in));
			return;
		}
	}
}

void gw_client_read_cb(struct bufferevent *bev, void *ud)
{
	gw_process_client(ud);
}

void gw_client_write_cb(struct bufferevent *bev, void *ud)
{
	struct conn *c = ud;
	if (c->phase == P_CLOSING) {
		if (gw_client_flushed(c))
			gw_conn_free(c);
		return;
	}
	/* Drained below the low-water mark: the upstream may send again, and
	 * what it sent while we were paused moves on now (no new byte may
	 * come to wake us). */
	if (!c->paused) {
		if (c->ubev && !c->up_gone)
			bufferevent_enable(c->ubev, EV_READ);
		if (gw_response_pending(c))
			event_active(c->kick_up, EV_TIMEOUT, 0);
	}
}

/*
 * A client's TLS handshake that did not complete: refused by the gateway
 * (transparent 443 with a name no rule allows), or abandoned by the client
 * (it does not trust the sandbox's CA, or pins certificates). Audited, so
 * an operator sees what the sandbox tried to reach.
 */
static void audit_tls_failure(struct conn *c, struct bufferevent *bev)
{
	const char *decision = "error", *why;
	unsigned long e = bufferevent_get_openssl_error(bev);
	int reason = e ? ERR_GET_REASON(e) : 0;
	if (c->tls_refusal) {
		decision = "deny";
		why = c->tls_refusal;
	} else if (reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
		   reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
		   reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN ||
		   reason == SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE) {
		why = "the client refused the sandbox's certificate: it does not trust the "
		      "sandbox's CA, or pins certificates";
	} else if (e) {
		why = "the TLS handshake with the client failed";
	} else {
		why = "the client closed the connection during the TLS handshake (it may not "
		      "trust the sandbox's CA, or pins certificates)";
	}
	while (bufferevent_get_openssl_error(bev))
		;
	ERR_clear_error();
	const char *host = c->tunnel_host[0] ? c->tunnel_host : c->sni[0] ? c->sni : c->host;
	struct gw_audit_rec r = { .kind = "tls",
				  .decision = decision,
				  .host = host,
				  .port = c->tunnel_port ? c->tunnel_port : 443,
				  .reason = why,
				  .generation = c->e->policy ? c->e->policy->generation : 0 };
	gw_audit_write(c->s, &r);
	c->audited = true;
}

void gw_client_event_cb(struct bufferevent *bev, short what, void *ud)
{
	struct conn *c = ud;
	if (what & BEV_EVENT_CONNECTED) {
		c->tls_up = true;
		return;
	}
	if (c->ctls && !c->tls_up)
		audit_tls_failure(c, bev);
	/* EOF, error or timeout: the client is gone or stuck. */
	if (!c->audited && c->method[0] &&
	    (c->phase == P_FORWARD || c->phase == P_RESOLVE || c->phase == P_INSPECT)) {
		snprintf(c->reason, sizeof(c->reason), "client went away");
		gw_audit(c, "allow");
	}
	gw_conn_free(c);
}

/* Refuses a transparent handshake, saying why in the audit line. */
static int refuse_tls(struct conn *c, const char *name, const char *why)
{
	c->tls_refusal = why;
	if (name && !c->host[0])
		snprintf(c->host, sizeof(c->host), "%.*s", GW_HOST_MAX, name);
	return 0;
}

int gw_cert_cb(SSL *ssl, void *arg)
{
	struct conn *c = SSL_get_app_data(ssl);
	struct gw_engine *e = arg;
	if (!c)
		return 0;
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
	char norm[GW_HOST_MAX + 3] = "";
	bool ip = false;
	if (name && gw_host_normalize(name, strlen(name), norm, sizeof(norm), &ip) < 0)
		return refuse_tls(c, NULL, "the TLS server name is not a host name");
	if (c->kind != CK_HTTPS) {
		/* CONNECT: the leaf is the CONNECT host's; a differing name is
		 * answered with 421 per request. */
		snprintf(c->sni, sizeof(c->sni), "%s", norm);
		return 1;
	}
	/* Transparent 443: the name is all we have. */
	if (!norm[0] || ip)
		return refuse_tls(c, norm,
				  "no TLS server name (SNI), or an address: the gateway "
				  "needs the host's name");
	/* Step 1: the tunnel, named by the handshake alone. */
	struct gw_verdict v;
	gw_decide_tunnel(e->cfg, e->policy, norm, 443, &v);
	if (!v.allow)
		return refuse_tls(c, norm, v.reason);
	const struct gw_leaf *leaf;
	struct al_error err = { 0 };
	if (gw_ca_leaf(e->ca, norm, &leaf, &err) < 0)
		return 0;
	if (SSL_use_certificate(ssl, gw_leaf_x509(leaf)) != 1 ||
	    SSL_use_PrivateKey(ssl, gw_leaf_pkey(leaf)) != 1)
		return 0;
	SSL_add1_chain_cert(ssl, gw_ca_x509(e->ca));
	snprintf(c->sni, sizeof(c->sni), "%s", norm);
	snprintf(c->tunnel_host, sizeof(c->tunnel_host), "%s", norm);
	c->tunnel_port = 443;
	return 1;
}

int gw_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
	       unsigned int inlen, void *arg)
{
	for (unsigned i = 0; i < inlen;) {
		unsigned l = in[i];
		if (i + 1 + l > inlen)
			break;
		if (l == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0) {
			*out = in + i + 1;
			*outlen = 8;
			return SSL_TLSEXT_ERR_OK;
		}
		i += 1 + l;
	}
	return SSL_TLSEXT_ERR_NOACK;
}

static void kick_up_cb(evutil_socket_t fd, short what, void *ud)
{
	struct conn *c = ud;
	if (gw_response_pending(c))
		gw_pump_response(c);
}

static void kick_client_cb(evutil_socket_t fd, short what, void *ud)
{
	struct conn *c = ud;
	if (evbuffer_get_length(bufferevent_get_input(c->cbev)) > 0)
		gw_process_client(c);
}

void gw_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		  void *ud)
{
	struct gw_sbx *s = ud;
	struct gw_engine *e = s->e;
	enum conn_kind kind = CK_PROXY;
	for (int i = 0; i < 3; i++)
		if (s->listeners[i] == l)
			kind = (enum conn_kind)i;
	if (s->n_conns >= e->cfg->max_conns) {
		close(fd);
		/* Counted, not repeated (audit.c), like any identical denial. */
		struct gw_audit_rec r = { .kind = "tcp",
					  .decision = "deny",
					  .reason = "too many connections from this sandbox "
						    "(limits: connections)",
					  .generation = e->policy ? e->policy->generation : 0 };
		gw_audit_write(s, &r);
		return;
	}
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->e = e;
	c->s = s;
	c->kind = kind;
	c->timer = evtimer_new(e->base, gw_timer_cb, c);
	c->kick_up = event_new(e->base, -1, 0, kick_up_cb, c);
	c->kick_client = event_new(e->base, -1, 0, kick_client_cb, c);
	c->pending = evbuffer_new();
	c->acc = evbuffer_new();
	int opts = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
	if (kind == CK_HTTPS) {
		SSL *ssl = SSL_new(e->srv_ctx);
		if (ssl) {
			SSL_set_app_data(ssl, c);
			c->cbev = bufferevent_openssl_socket_new(e->base, fd, ssl,
								 BUFFEREVENT_SSL_ACCEPTING, opts);
			if (!c->cbev)
				SSL_free(ssl);
			c->cssl = ssl;
			c->ctls = true;
		}
	} else {
		c->cbev = bufferevent_socket_new(e->base, fd, opts);
	}
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->n_conns++;
	if (!c->cbev || !c->timer || !c->pending || !c->acc || !c->kick_up || !c->kick_client) {
		if (!c->cbev)
			close(fd);
		gw_conn_free(c);
		return;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	bufferevent_setcb(c->cbev, gw_client_read_cb, gw_client_write_cb, gw_client_event_cb, c);
	c->w_client = gw_watch_bev(s, c->cbev);
	if (!c->w_client) {
		gw_conn_free(c);
		return;
	}
	struct timeval wt = gw_ms_tv(CLIENT_WRITE_MS);
	bufferevent_set_timeouts(c->cbev, NULL, &wt);
	bufferevent_setwatermark(c->cbev, EV_WRITE, CONN_HIGH_WATER / 2, 0);
	bufferevent_setwatermark(c->cbev, EV_READ, 0, CONN_HIGH_WATER);
	if (c->ctls)
		bufferevent_set_max_single_read(c->cbev, READ_SMALL);
	bufferevent_enable(c->cbev, EV_READ | EV_WRITE);
	gw_reset_request(c);
	gw_arm_timer(c, IDLE_TIMEOUT_MS);
}

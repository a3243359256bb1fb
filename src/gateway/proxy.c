/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's engine: one libevent loop serving the listeners of every
 * attached sandbox.
 *
 * A connection's sandbox is the one whose listener accepted it. Each
 * connection carries one request at a time (no pipelining: bytes after a
 * request wait in the kernel and our input buffer until its response is
 * done): read the head, decide, connect (or reuse the connection to the
 * same upstream), stream the body each way with backpressure, audit, and
 * go on with the next request or close.
 *
 * Three listeners per sandbox: the proxy (absolute-form http:// requests
 * and CONNECT, which is answered with TLS under a leaf of the sandbox's
 * CA), the transparent port 80 (origin-form, routed by Host) and the
 * transparent port 443 (TLS, routed by SNI). Inside TLS every request is
 * decided on its own, and its Host must name the tunnel's host (421).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <jansson.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/cleanup.h"
#include "common/ipc.h"
#include "gateway/ca.h"
#include "gateway/dns.h"
#include "gateway/http.h"
#include "gateway/internal.h"
#include "gateway/path.h"

#define CONN_HIGH_WATER (256 * 1024)  /* per direction, then the other side pauses */
#define GLOBAL_BUDGET (64ull << 20)   /* bytes queued in all output buffers */
#define MAX_CONNS_PER_SANDBOX 4096
/* Timeouts come from the configuration (limits:, see config.c). */
#define HEAD_DEADLINE_MS (c->e->cfg->head_ms)
#define IDLE_TIMEOUT_MS (c->e->cfg->idle_ms)
#define UPSTREAM_CONNECT_MS (c->e->cfg->connect_ms)
#define UPSTREAM_IDLE_MS (c->e->cfg->upstream_ms)
#define CLIENT_WRITE_MS (c->e->cfg->write_ms)
#define SANDBOX_ID_MAX 64
#define POOL_MAX 64         /* idle upstream connections per sandbox */
#define POOL_IDLE_S 30      /* then closed */
#define SESSION_CACHE 64    /* upstream TLS sessions kept for resumption */

struct gw_sbx;
struct conn;

struct gw_engine {
	struct event_base *base;
	struct evdns_base *dns;
	const struct gw_config *cfg;
	const struct gw_policy *policy; /* the current generation */
	struct gw_policy *owned_policy; /* when it came later (GW_IPC_POLICY) */
	struct gw_vault *vault;
	struct gw_ca *ca;
	SSL_CTX *srv_ctx, *up_ctx;
	X509_STORE *store;       /* up_ctx's */
	struct {
		char key[GW_HOST_MAX + 10]; /* host:port */
		SSL_SESSION *sess;
	} sessions[SESSION_CACHE];
	unsigned next_session;
	char *bundle;            /* the system bundle, until first needed */
	size_t bundle_len;
	struct gw_sbx *sandboxes;
	bool exit_when_idle;
	int ctl;
	struct event *ctl_ev, *sig_int, *sig_term;
	uint64_t queued;     /* bytes in all output buffers */
	struct conn *paused; /* connections waiting for the global budget */
};

struct gw_sbx {
	struct gw_engine *e;
	char id[SANDBOX_ID_MAX + 1];
	int audit_fd;
	struct evconnlistener *listeners[3];
	int dns_fd, watch_fd;
	struct event *dns_ev, *watch_ev;
	struct evconnlistener *control; /* root's socket for policy changes */
	struct conn *conns;
	size_t n_conns;
	struct pooled *pool; /* idle upstream connections, this sandbox's only */
	size_t n_pool;
	struct gw_sbx *next;
};

/* An idle kept-alive upstream connection waiting for its next request. */
struct pooled {
	struct gw_sbx *s;
	struct bufferevent *bev;
	char host[GW_HOST_MAX + 3];
	uint16_t port;
	bool tls;
	struct pooled *next;
};

enum conn_kind { CK_PROXY = 0, CK_HTTP, CK_HTTPS };

enum phase {
	P_HEAD = 0, /* waiting for a request head */
	P_RESOLVE,  /* looking the upstream up */
	P_FORWARD,  /* request and response under way */
	P_TUNNEL,   /* after 101: bytes both ways */
	P_CLOSING,  /* flushing the last bytes to the client */
};

struct conn {
	struct gw_engine *e;
	struct gw_sbx *s;
	struct conn *prev, *next;
	struct conn *paused_next;
	bool paused;
	enum conn_kind kind;
	enum phase phase;
	struct bufferevent *cbev;
	bool ctls;
	SSL *cssl;
	char tunnel_host[GW_HOST_MAX + 3]; /* CONNECT's host or the SNI (transparent 443) */
	uint16_t tunnel_port;
	char sni[GW_HOST_MAX + 3];
	struct event *timer;
	struct event *kick_up;     /* moves buffered upstream bytes on (after a pause) */
	struct event *kick_client; /* moves buffered client bytes on */
	unsigned hold;             /* callers up the stack still use it */
	bool dead;                 /* freed while held: goes when the last hold does */
	bool head_started;

	/* The request under way. */
	char method[33];
	char host[GW_HOST_MAX + 3];
	uint16_t port;
	char *path; /* canonical path, for decisions and the audit log */
	bool head_req, req_close, upgrade, http10;
	enum gw_http_body req_body;
	uint64_t req_left;
	struct gw_chunked req_ch;
	bool req_done;
	struct evdns_getaddrinfo_request *dns_req;
	struct evbuffer *pending; /* the head for the upstream, until it is connected */

	/* The upstream. */
	struct bufferevent *ubev;
	char up_host[GW_HOST_MAX + 3];
	uint16_t up_port;
	bool up_tls, up_connected, up_reusable;

	/* The response. */
	bool resp_head_done, resp_done;
	enum gw_http_body resp_body;
	uint64_t resp_left;
	struct gw_chunked resp_ch;
	struct gw_redactor *red;
	struct evbuffer *acc;      /* response bytes gathered, written to the client at once */
	bool rechunk, unframed, close_after;
	bool reused;               /* this exchange went on a kept-alive upstream connection */
	struct evbuffer *retry;    /* its head, to resend once on a fresh connection */
	int status;

	/* For the audit line. */
	struct timespec t0;
	uint64_t bytes_up, bytes_down;
	const char *cred_name;
	char rule[GW_RULE_ID_MAX + 1];
	uint64_t generation;
	char reason[256];
	bool audited;
};

static void conn_free(struct conn *c);
static void conn_hold(struct conn *c);
static bool conn_release(struct conn *c);
static void client_read_cb(struct bufferevent *bev, void *ud);
static void client_write_cb(struct bufferevent *bev, void *ud);
static void client_event_cb(struct bufferevent *bev, short what, void *ud);
static void up_read_cb(struct bufferevent *bev, void *ud);
static void up_write_cb(struct bufferevent *bev, void *ud);
static void up_event_cb(struct bufferevent *bev, short what, void *ud);
static void process_client(struct conn *c);
static void arm_timer(struct conn *c, uint64_t ms);

/* ---- small helpers ---- */

static double ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

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

static void audit(struct conn *c, const char *decision)
{
	if (c->audited || c->s->audit_fd < 0)
		return;
	c->audited = true;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct tm tm;
	gmtime_r(&now.tv_sec, &tm);
	char ts[64];
	snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 now.tv_nsec / 1000000);
	json_t *o = json_object();
	if (!o)
		return;
	json_object_set_new(o, "time", json_string(ts));
	json_object_set_new(o, "sandbox", json_string(c->s->id));
	json_object_set_new(o, "generation", json_integer((json_int_t)c->generation));
	json_object_set_new(o, "rule", c->rule[0] ? json_string(c->rule) : json_null());
	json_object_set_new(o, "decision", json_string(decision));
	json_object_set_new(o, "method", c->method[0] ? json_string(c->method) : json_null());
	json_object_set_new(o, "host", c->host[0] ? json_string(c->host) : json_null());
	json_object_set_new(o, "port", c->port ? json_integer(c->port) : json_null());
	json_object_set_new(o, "path", c->path ? json_string(c->path) : json_null());
	json_object_set_new(o, "status", json_integer(c->status));
	json_object_set_new(o, "bytes_up", json_integer((json_int_t)c->bytes_up));
	json_object_set_new(o, "bytes_down", json_integer((json_int_t)c->bytes_down));
	json_object_set_new(o, "duration_ms", json_real(ms_since(&c->t0)));
	json_object_set_new(o, "credential", c->cred_name ? json_string(c->cred_name) : json_null());
	json_object_set_new(o, "reason", json_string(c->reason));
	char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	json_decref(o);
	if (!line)
		return;
	size_t len = strlen(line);
	line[len] = '\n';
	/* One write per line: O_APPEND keeps lines whole. */
	ssize_t w = write(c->s->audit_fd, line, len + 1);
	(void)w;
	free(line);
}

/* ---- global budget: every output buffer reports what it holds ---- */

static void budget_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *ud)
{
	struct gw_engine *e = ud;
	e->queued += info->n_added;
	e->queued -= info->n_deleted <= e->queued ? info->n_deleted : e->queued;
	if (e->paused && e->queued < GLOBAL_BUDGET / 2) {
		struct conn *list = e->paused;
		e->paused = NULL;
		for (struct conn *c = list, *n; c; c = n) {
			n = c->paused_next;
			c->paused = false;
			c->paused_next = NULL;
			if (c->cbev)
				bufferevent_enable(c->cbev, EV_READ);
			if (c->ubev)
				bufferevent_enable(c->ubev, EV_READ);
			/* From the loop, not from inside this buffer's callback. */
			event_active(c->kick_up, EV_TIMEOUT, 0);
			event_active(c->kick_client, EV_TIMEOUT, 0);
		}
	}
}

/* Frees a bufferevent after emptying its output buffers, so the budget
 * hears of the bytes that go with it. */
static void bev_free(struct bufferevent *bev)
{
	if (!bev)
		return;
	struct bufferevent *under = bufferevent_get_underlying(bev);
	struct evbuffer *out = bufferevent_get_output(bev);
	evbuffer_drain(out, evbuffer_get_length(out));
	if (under) {
		out = bufferevent_get_output(under);
		evbuffer_drain(out, evbuffer_get_length(out));
	}
	bufferevent_free(bev);
}

static bool over_budget(struct conn *c)
{
	if (c->e->queued < GLOBAL_BUDGET)
		return false;
	if (!c->paused) {
		c->paused = true;
		c->paused_next = c->e->paused;
		c->e->paused = c;
	}
	return true;
}

static void watch_output(struct gw_engine *e, struct bufferevent *bev)
{
	evbuffer_add_cb(bufferevent_get_output(bev), budget_cb, e);
}

/* ---- idle upstream connections ---- */

static void pooled_free(struct pooled *p)
{
	struct gw_sbx *s = p->s;
	for (struct pooled **pp = &s->pool; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	s->n_pool--;
	bev_free(p->bev);
	free(p);
}

/* Anything from an idle upstream (bytes, EOF, error, idle timeout) ends it. */
static void pooled_read_cb(struct bufferevent *bev, void *ud)
{
	pooled_free(ud);
}

static void pooled_event_cb(struct bufferevent *bev, short what, void *ud)
{
	pooled_free(ud);
}

/* Keeps c's upstream connection for a later client connection of the same
 * sandbox, when its last exchange ended cleanly; frees it otherwise. */
static void release_upstream(struct conn *c)
{
	struct bufferevent *bev = c->ubev;
	if (!bev)
		return;
	c->ubev = NULL;
	bool clean = c->up_reusable && c->up_connected && (c->resp_done || !c->method[0]) &&
		     evbuffer_get_length(bufferevent_get_input(bev)) == 0 &&
		     evbuffer_get_length(bufferevent_get_output(bev)) == 0;
	struct pooled *p = clean && c->s->n_pool < POOL_MAX ? calloc(1, sizeof(*p)) : NULL;
	if (!p) {
		bev_free(bev);
		return;
	}
	p->s = c->s;
	p->bev = bev;
	snprintf(p->host, sizeof(p->host), "%s", c->up_host);
	p->port = c->up_port;
	p->tls = c->up_tls;
	p->next = c->s->pool;
	c->s->pool = p;
	c->s->n_pool++;
	bufferevent_setcb(bev, pooled_read_cb, NULL, pooled_event_cb, p);
	struct timeval rt = { .tv_sec = POOL_IDLE_S };
	bufferevent_set_timeouts(bev, &rt, NULL);
	bufferevent_enable(bev, EV_READ);
}

/* An idle upstream connection to host:port, taken out of the pool. */
static struct bufferevent *pool_take(struct gw_sbx *s, const char *host, uint16_t port, bool tls)
{
	for (struct pooled *p = s->pool; p; p = p->next)
		if (p->port == port && p->tls == tls && strcmp(p->host, host) == 0) {
			struct bufferevent *bev = p->bev;
			p->bev = NULL;
			for (struct pooled **pp = &s->pool; *pp; pp = &(*pp)->next)
				if (*pp == p) {
					*pp = p->next;
					break;
				}
			s->n_pool--;
			free(p);
			return bev;
		}
	return NULL;
}

/* ---- responses of our own ---- */

/*
 * Hands the gathered response bytes to the client's buffer in one piece:
 * a TLS bufferevent writes one record per buffer chain, so a head and a
 * small body made of many small adds would go out as a dozen records.
 */
static void flush_acc(struct conn *c)
{
	size_t len = evbuffer_get_length(c->acc);
	if (!len)
		return;
	if (len <= 16384)
		evbuffer_pullup(c->acc, -1);
	bufferevent_write_buffer(c->cbev, c->acc);
}

static bool client_flushed(struct conn *c)
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
	if (info->n_deleted && c->phase == P_CLOSING && client_flushed(c))
		event_active(c->timer, EV_TIMEOUT, 0);
}

static void close_when_flushed(struct conn *c)
{
	flush_acc(c);
	c->phase = P_CLOSING;
	release_upstream(c);
	if (c->dns_req) {
		evdns_getaddrinfo_cancel(c->dns_req);
		c->dns_req = NULL;
	}
	bufferevent_disable(c->cbev, EV_READ);
	/* A TLS filter's bytes sit in the socket's buffer below it: the
	 * connection goes once that is empty too. */
	struct bufferevent *under = bufferevent_get_underlying(c->cbev);
	if (under) {
		bufferevent_setwatermark(c->cbev, EV_WRITE, 0, 0);
		evbuffer_add_cb(bufferevent_get_output(under), closing_drain_cb, c);
	}
	if (client_flushed(c)) {
		conn_free(c);
		return;
	}
	/* Bounded: a client that never reads goes after CLIENT_WRITE_MS. */
	arm_timer(c, CLIENT_WRITE_MS);
}

/* Answers with status and reason (plain text), audits, and closes or goes on. */
static void respond_error(struct conn *c, int status, const char *reason, bool keep)
{
	c->status = status;
	snprintf(c->reason, sizeof(c->reason), "%s", reason);
	audit(c, status >= 500 ? "allow" : "deny");
	struct evbuffer *out = bufferevent_get_output(c->cbev);
	char body[256];
	int blen = snprintf(body, sizeof(body), "airlock: %s%s%s\n", reason,
			    c->rule[0] ? " (rule " : "", c->rule[0] ? c->rule : "");
	if (c->rule[0] && blen > 0 && (size_t)blen < sizeof(body) - 2) {
		body[blen - 1] = ')';
		body[blen] = '\n';
		body[++blen] = '\0';
	}
	if (blen < 0)
		blen = 0;
	if ((size_t)blen >= sizeof(body))
		blen = sizeof(body) - 1;
	bool close = !keep || c->req_close;
	evbuffer_add_printf(out,
			    "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
			    "Content-Length: %d\r\nX-Airlock-Reason: %s\r\nCache-Control: no-store\r\n"
			    "Connection: %s\r\n\r\n",
			    status, status_text(status), blen, reason, close ? "close" : "keep-alive");
	if (!c->head_req)
		evbuffer_add(out, body, (size_t)blen);
	c->bytes_down = (uint64_t)blen;
	if (close) {
		close_when_flushed(c);
		return;
	}
	/* Next request on this connection. */
	c->phase = P_HEAD;
	c->head_started = false;
	arm_timer(c, IDLE_TIMEOUT_MS);
	process_client(c);
}

/* ---- request state ---- */

static void reset_request(struct conn *c)
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
	c->resp_body = GW_BODY_NONE;
	c->resp_left = 0;
	memset(&c->resp_ch, 0, sizeof(c->resp_ch));
	if (c->red) {
		gw_redactor_free(c->red);
		c->red = NULL;
	}
	c->rechunk = c->unframed = c->close_after = c->reused = false;
	if (c->retry)
		evbuffer_drain(c->retry, evbuffer_get_length(c->retry));
	c->status = 0;
	c->bytes_up = c->bytes_down = 0;
	c->cred_name = NULL;
	c->generation = c->e->policy ? c->e->policy->generation : 0;
	c->audited = false;
	c->head_started = false;
	clock_gettime(CLOCK_MONOTONIC, &c->t0);
	if (c->pending)
		evbuffer_drain(c->pending, evbuffer_get_length(c->pending));
}

static struct timeval ms_tv(uint64_t ms)
{
	return (struct timeval){ .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
}

static void arm_timer(struct conn *c, uint64_t ms)
{
	struct timeval tv = ms_tv(ms);
	evtimer_add(c->timer, &tv);
}

static void timer_cb(evutil_socket_t fd, short what, void *ud)
{
	struct conn *c = ud;
	if (c->phase == P_CLOSING) {
		conn_free(c);
		return;
	}
	if (c->phase == P_HEAD && c->head_started) {
		respond_error(c, 408, "the request head took too long", false);
		return;
	}
	conn_free(c);
}

/* ---- the client side ---- */

static bool span_copy(struct gw_span s, char *out, size_t size)
{
	if (s.len >= size)
		return false;
	memcpy(out, s.p, s.len);
	out[s.len] = '\0';
	return true;
}

static bool is_hop_by_hop(struct gw_span name, const struct gw_span *conn_tokens, size_t n_tokens)
{
	static const char *const hop[] = { "connection", "keep-alive", "proxy-connection",
					   "proxy-authorization", "proxy-authenticate", "te",
					   "trailer", "transfer-encoding", "upgrade", NULL };
	for (size_t i = 0; hop[i]; i++)
		if (gw_span_eq_ci(name, hop[i]))
			return true;
	for (size_t i = 0; i < n_tokens; i++)
		if (name.len == conn_tokens[i].len && strncasecmp(name.p, conn_tokens[i].p, name.len) == 0)
			return true;
	return false;
}

/* The tokens listed in Connection fields name more hop-by-hop fields. */
static size_t connection_tokens(const struct gw_http_field *f, size_t n, struct gw_span *out,
				size_t max)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!gw_span_eq_ci(f[i].name, "connection"))
			continue;
		const char *p = f[i].value.p, *end = p + f[i].value.len;
		while (p < end && k < max) {
			while (p < end && (*p == ',' || *p == ' ' || *p == '\t'))
				p++;
			const char *s = p;
			while (p < end && *p != ',' && *p != ' ' && *p != '\t')
				p++;
			if (p > s)
				out[k++] = (struct gw_span){ s, (size_t)(p - s) };
		}
	}
	return k;
}

static const struct gw_cred *find_cred(const struct gw_config *cfg, const char *host,
				       uint16_t port, const char *path)
{
	for (size_t i = 0; i < cfg->n_creds; i++) {
		const struct gw_cred *cr = &cfg->creds[i];
		if (!gw_host_pattern_matches(cr->host, cr->wildcard, host))
			continue;
		if (cr->port && cr->port != port)
			continue;
		if (cr->n_paths) {
			bool ok = false;
			for (size_t j = 0; j < cr->n_paths && !ok; j++)
				ok = gw_path_has_prefix(path, cr->paths[j]);
			if (!ok)
				continue;
		}
		return cr;
	}
	return NULL;
}

static void base64(const unsigned char *in, size_t n, struct evbuffer *out)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char q[4];
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		q[0] = tab[(v >> 18) & 63];
		q[1] = tab[(v >> 12) & 63];
		q[2] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		q[3] = i + 2 < n ? tab[v & 63] : '=';
		evbuffer_add(out, q, 4);
	}
}

static void add_query_escaped(struct evbuffer *out, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
		    ch == '-' || ch == '.' || ch == '_' || ch == '~')
			evbuffer_add(out, s + i, 1);
		else
			evbuffer_add_printf(out, "%%%02X", ch);
	}
}

/*
 * Writes the head the upstream gets: origin-form target (canonical path and
 * the query, with an injected parameter), the client's fields minus
 * hop-by-hop ones and minus whatever the credential replaces.
 */
static void build_upstream_head(struct conn *c, const struct gw_http_request *req,
				const char *canon, const char *query, size_t query_len,
				const struct gw_cred *cred, const char *secret, size_t secret_len)
{
	struct evbuffer *out = c->pending;
	evbuffer_add(out, req->method.p, req->method.len);
	evbuffer_add(out, " ", 1);
	evbuffer_add(out, canon, strlen(canon));
	bool first = true;
	if (query_len > 1) {
		/* query starts with '?'; drop parameters the credential sets. */
		const char *p = query + 1, *end = query + query_len;
		while (p < end) {
			const char *amp = memchr(p, '&', (size_t)(end - p));
			const char *pe = amp ? amp : end;
			bool drop = false;
			if (cred && cred->kind == GW_CRED_QUERY) {
				size_t nl = strlen(cred->name);
				drop = (size_t)(pe - p) >= nl && memcmp(p, cred->name, nl) == 0 &&
				       (p + nl == pe || p[nl] == '=');
			}
			if (!drop && pe > p) {
				evbuffer_add(out, first ? "?" : "&", 1);
				evbuffer_add(out, p, (size_t)(pe - p));
				first = false;
			}
			p = amp ? amp + 1 : end;
		}
	}
	if (cred && cred->kind == GW_CRED_QUERY) {
		evbuffer_add(out, first ? "?" : "&", 1);
		evbuffer_add(out, cred->name, strlen(cred->name));
		evbuffer_add(out, "=", 1);
		add_query_escaped(out, secret, secret_len);
	}
	evbuffer_add(out, " HTTP/1.1\r\n", 11);

	struct gw_span tokens[32];
	size_t n_tokens = connection_tokens(req->fields, req->n_fields, tokens, 32);
	const char *replaced = NULL;
	if (cred && cred->kind == GW_CRED_HEADER)
		replaced = cred->name;
	else if (cred && cred->kind == GW_CRED_BASIC)
		replaced = "authorization";
	/* Where the request goes and how its body is framed are written by
	 * us from what we parsed and decided, never copied. */
	evbuffer_add_printf(out, "Host: %s", c->host);
	if (c->port != (c->ctls ? 443 : 80))
		evbuffer_add_printf(out, ":%u", (unsigned)c->port);
	evbuffer_add(out, "\r\n", 2);
	if (req->body == GW_BODY_LENGTH)
		evbuffer_add_printf(out, "Content-Length: %" PRIu64 "\r\n", req->content_length);
	for (size_t i = 0; i < req->n_fields; i++) {
		const struct gw_http_field *f = &req->fields[i];
		if (gw_span_eq_ci(f->name, "host") || gw_span_eq_ci(f->name, "content-length"))
			continue;
		if (is_hop_by_hop(f->name, tokens, n_tokens))
			continue;
		if (replaced && gw_span_eq_ci(f->name, replaced))
			continue;
		/* With a credential on board, ask for an identity body so an
		 * echo of it can be redacted. */
		if (cred && gw_span_eq_ci(f->name, "accept-encoding"))
			continue;
		evbuffer_add(out, f->name.p, f->name.len);
		evbuffer_add(out, ": ", 2);
		evbuffer_add(out, f->value.p, f->value.len);
		evbuffer_add(out, "\r\n", 2);
	}
	if (cred && cred->kind == GW_CRED_HEADER) {
		evbuffer_add_printf(out, "%s: %s", cred->name, cred->prefix);
		evbuffer_add(out, secret, secret_len);
		evbuffer_add(out, "\r\n", 2);
	} else if (cred && cred->kind == GW_CRED_BASIC) {
		size_t ul = strlen(cred->name);
		unsigned char *up = malloc(ul + 1 + secret_len);
		if (up) {
			memcpy(up, cred->name, ul);
			up[ul] = ':';
			memcpy(up + ul + 1, secret, secret_len);
			evbuffer_add(out, "Authorization: Basic ", 21);
			base64(up, ul + 1 + secret_len, out);
			evbuffer_add(out, "\r\n", 2);
			explicit_bzero(up, ul + 1 + secret_len);
			free(up);
		}
	}
	if (cred)
		evbuffer_add(out, "Accept-Encoding: identity\r\n", 27);
	if (req->body == GW_BODY_CHUNKED)
		evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
	if (c->upgrade) {
		for (size_t i = 0; i < req->n_fields; i++)
			if (gw_span_eq_ci(req->fields[i].name, "upgrade")) {
				evbuffer_add(out, "Upgrade: ", 9);
				evbuffer_add(out, req->fields[i].value.p, req->fields[i].value.len);
				evbuffer_add(out, "\r\n", 2);
				break;
			}
		evbuffer_add(out, "Connection: Upgrade\r\n", 21);
	}
	evbuffer_add(out, "\r\n", 2);
}

static void upstream_connect(struct conn *c, const struct sockaddr *sa, socklen_t len);

static void dns_cb(int result, struct evutil_addrinfo *res, void *ud)
{
	struct conn *c = ud;
	if (result == EVUTIL_EAI_CANCEL) {
		if (res)
			evutil_freeaddrinfo(res);
		return;
	}
	c->dns_req = NULL;
	if (result != 0 || !res) {
		if (res)
			evutil_freeaddrinfo(res);
		char why[512];
		snprintf(why, sizeof(why), "cannot resolve %s: %s", c->up_host,
			 evutil_gai_strerror(result));
		respond_error(c, 502, why, false);
		return;
	}
	const char *reason = NULL;
	struct evutil_addrinfo *pick = NULL;
	/* IPv4 first: the sandbox has no say in the family. */
	for (int pass = 0; pass < 2 && !pick; pass++)
		for (struct evutil_addrinfo *ai = res; ai && !pick; ai = ai->ai_next) {
			if ((pass == 0) != (ai->ai_family == AF_INET))
				continue;
			const char *r = NULL;
			if (gw_addr_allowed(ai->ai_addr, c->e->cfg->cidrs, c->e->cfg->n_cidrs, &r))
				pick = ai;
			else if (!reason)
				reason = r;
		}
	if (!pick) {
		char why[512];
		snprintf(why, sizeof(why), "%s resolves to a refused address: %s", c->up_host,
			 reason ? reason : "none usable");
		evutil_freeaddrinfo(res);
		respond_error(c, 403, why, false);
		return;
	}
	struct sockaddr_storage ss;
	socklen_t sl = (socklen_t)pick->ai_addrlen;
	memcpy(&ss, pick->ai_addr, sl);
	evutil_freeaddrinfo(res);
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons(c->up_port);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = htons(c->up_port);
	upstream_connect(c, (struct sockaddr *)&ss, sl);
}

/* ---- upstream TLS sessions: resumed for the same host:port ---- */

static int session_key_idx = -1;

static void free_session_key(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
			     void *argp)
{
	free(ptr);
}

static int new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
	struct gw_engine *e = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	const char *key = SSL_get_ex_data(ssl, session_key_idx);
	if (!e || !key)
		return 0;
	unsigned slot = e->next_session;
	for (unsigned i = 0; i < SESSION_CACHE; i++)
		if (e->sessions[i].sess && strcmp(e->sessions[i].key, key) == 0) {
			slot = i;
			break;
		}
	if (slot == e->next_session)
		e->next_session = (e->next_session + 1) % SESSION_CACHE;
	if (e->sessions[slot].sess)
		SSL_SESSION_free(e->sessions[slot].sess);
	snprintf(e->sessions[slot].key, sizeof(e->sessions[slot].key), "%s", key);
	e->sessions[slot].sess = sess;
	return 1; /* the reference is ours now */
}

static void session_attach(struct gw_engine *e, SSL *ssl, const char *host, uint16_t port)
{
	char key[GW_HOST_MAX + 10];
	snprintf(key, sizeof(key), "%s:%u", host, (unsigned)port);
	char *k = strdup(key);
	if (!k || !SSL_set_ex_data(ssl, session_key_idx, k)) {
		free(k);
		return;
	}
	for (unsigned i = 0; i < SESSION_CACHE; i++)
		if (e->sessions[i].sess && strcmp(e->sessions[i].key, key) == 0) {
			if (SSL_SESSION_is_resumable(e->sessions[i].sess))
				SSL_set_session(ssl, e->sessions[i].sess);
			break;
		}
}

/* The system's trust anchors join the store when TLS upstream is first needed. */
static void load_system_bundle(struct gw_engine *e)
{
	BIO *bio = BIO_new_mem_buf(e->bundle, (int)e->bundle_len);
	if (bio) {
		X509 *x;
		while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
			X509_STORE_add_cert(e->store, x);
			X509_free(x);
		}
		BIO_free(bio);
	}
	ERR_clear_error(); /* the end of the data reads as an error */
	free(e->bundle);
	e->bundle = NULL;
}

static void upstream_connect(struct conn *c, const struct sockaddr *sa, socklen_t len)
{
	struct gw_engine *e = c->e;
	int opts = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
	if (c->up_tls && e->bundle)
		load_system_bundle(e);
	if (c->up_tls) {
		SSL *ssl = SSL_new(e->up_ctx);
		if (!ssl) {
			respond_error(c, 502, "out of memory", false);
			return;
		}
		bool ip = c->up_host[0] == '[' || strspn(c->up_host, "0123456789.") == strlen(c->up_host);
		if (ip) {
			char lit[64];
			snprintf(lit, sizeof(lit), "%s", c->up_host[0] == '[' ? c->up_host + 1 : c->up_host);
			char *rb = strchr(lit, ']');
			if (rb)
				*rb = '\0';
			X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), lit);
		} else {
			SSL_set_tlsext_host_name(ssl, c->up_host);
			SSL_set1_host(ssl, c->up_host);
		}
		session_attach(e, ssl, c->up_host, c->up_port);
		c->ubev = bufferevent_openssl_socket_new(e->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
							 opts);
	} else {
		c->ubev = bufferevent_socket_new(e->base, -1, opts);
	}
	if (!c->ubev) {
		respond_error(c, 502, "out of memory", false);
		return;
	}
	c->up_connected = false;
	bufferevent_setcb(c->ubev, up_read_cb, up_write_cb, up_event_cb, c);
	watch_output(e, c->ubev);
	struct timeval rt = ms_tv(UPSTREAM_IDLE_MS), wt = ms_tv(UPSTREAM_CONNECT_MS);
	bufferevent_set_timeouts(c->ubev, &rt, &wt);
	bufferevent_setwatermark(c->ubev, EV_WRITE, CONN_HIGH_WATER / 2, 0);
	bufferevent_setwatermark(c->ubev, EV_READ, 0, CONN_HIGH_WATER);
	if (bufferevent_socket_connect(c->ubev, sa, (int)len) < 0) {
		respond_error(c, 502, "cannot connect to the upstream", false);
		return;
	}
	bufferevent_enable(c->ubev, EV_READ | EV_WRITE);
	c->phase = P_FORWARD;
	bufferevent_write_buffer(c->ubev, c->pending);
	process_client(c);
}

/* Picks the upstream address: operator override, static host, IP literal, or DNS. */
static void upstream_start(struct conn *c)
{
	struct gw_engine *e = c->e;
	const struct gw_config *cfg = e->cfg;
	/* The same upstream as the last request: go on on that connection. */
	if (c->ubev && c->up_reusable && strcmp(c->up_host, c->host) == 0 &&
	    c->up_port == c->port && c->up_tls == c->ctls) {
		c->phase = P_FORWARD;
		c->reused = true;
		/* The upstream may have closed it just now: a request without
		 * a body can go again on a fresh connection. */
		if (c->req_done && (c->retry || (c->retry = evbuffer_new())))
			evbuffer_add(c->retry, evbuffer_pullup(c->pending, -1),
				     evbuffer_get_length(c->pending));
		bufferevent_write_buffer(c->ubev, c->pending);
		bufferevent_enable(c->ubev, EV_READ);
		process_client(c);
		return;
	}
	if (c->ubev) {
		bev_free(c->ubev);
		c->ubev = NULL;
	}
	snprintf(c->up_host, sizeof(c->up_host), "%s", c->host);
	c->up_port = c->port;
	c->up_tls = c->ctls;
	c->up_reusable = false;
	/* An idle connection to the same upstream, left by an earlier client
	 * connection of this sandbox: no new TCP or TLS handshake. */
	struct bufferevent *pooled = pool_take(c->s, c->host, c->port, c->ctls);
	if (pooled) {
		c->ubev = pooled;
		c->up_connected = true;
		c->up_reusable = true;
		bufferevent_setcb(pooled, up_read_cb, up_write_cb, up_event_cb, c);
		struct timeval rt = ms_tv(UPSTREAM_IDLE_MS), wt = ms_tv(CLIENT_WRITE_MS);
		bufferevent_set_timeouts(pooled, &rt, &wt);
		upstream_start(c);
		return;
	}
	const struct gw_upstream *u = gw_config_upstream(cfg, c->host, c->port);
	if (u) {
		/* The operator's own routing: not vetted. */
		upstream_connect(c, (const struct sockaddr *)&u->addr, u->addr_len);
		return;
	}
	struct sockaddr_storage ss = { 0 };
	socklen_t sl = 0;
	const struct gw_static_host *sh = gw_config_static_host(cfg, c->host);
	char lit[80];
	if (sh) {
		ss = sh->addr;
		sl = sh->addr_len;
	} else if (c->host[0] == '[' || strspn(c->host, "0123456789.") == strlen(c->host)) {
		snprintf(lit, sizeof(lit), "%s:%u", c->host, (unsigned)c->port);
		if (gw_parse_sockaddr(lit, &ss, &sl) < 0) {
			respond_error(c, 400, "bad IP literal", false);
			return;
		}
	}
	if (sl) {
		if (ss.ss_family == AF_INET)
			((struct sockaddr_in *)&ss)->sin_port = htons(c->port);
		else
			((struct sockaddr_in6 *)&ss)->sin6_port = htons(c->port);
		const char *reason = NULL;
		if (!gw_addr_allowed((struct sockaddr *)&ss, cfg->cidrs, cfg->n_cidrs, &reason)) {
			char why[512];
			snprintf(why, sizeof(why), "%s is a refused address: %s", c->host,
				 reason ? reason : "refused");
			respond_error(c, 403, why, false);
			return;
		}
		upstream_connect(c, (struct sockaddr *)&ss, sl);
		return;
	}
	if (!e->dns) {
		respond_error(c, 502, "no resolver configured for upstream names", false);
		return;
	}
	struct evutil_addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
					 .ai_protocol = IPPROTO_TCP };
	c->phase = P_RESOLVE;
	bufferevent_disable(c->cbev, EV_READ);
	struct evdns_getaddrinfo_request *rq =
		evdns_getaddrinfo(e->dns, c->host, NULL, &hints, dns_cb, c);
	/* NULL: done already (the callback ran) or failed (it ran too). */
	if (rq)
		c->dns_req = rq;
}

/* Host[:port] from a Host field or authority, normalized; the default port when absent. */
static int host_port(struct gw_span s, uint16_t dflt, char *host, size_t size, uint16_t *port)
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
	reset_request(c);
	span_copy(req->method, c->method, sizeof(c->method));
	c->head_req = gw_span_eq_ci(req->method, "HEAD") && strcmp(c->method, "HEAD") == 0;
	c->req_close = req->connection_close;
	c->req_body = req->body;
	c->req_left = req->content_length;
	c->upgrade = req->upgrade;
	c->http10 = req->http10;

	if (req->form == GW_FORM_AUTHORITY) {
		/* CONNECT: only on the proxy, never inside a tunnel. */
		uint16_t port;
		if (c->kind != CK_PROXY || c->ctls ||
		    host_port(req->authority, 443, c->host, sizeof(c->host), &port) < 0) {
			evbuffer_drain(in, req->head_len);
			respond_error(c, 400, "CONNECT is for the proxy port, with HOST:PORT", false);
			return;
		}
		c->port = port;
		evbuffer_drain(in, req->head_len);
		if (cfg->mode == GW_MODE_RESTRICTED && !gw_policy_host_may_allow(e->policy, c->host, port)) {
			respond_error(c, 403, "no rule allows this host", false);
			return;
		}
		/* Tunnel: TLS with a leaf for the host, every request inside decided. */
		const struct gw_leaf *leaf;
		struct al_error err = { 0 };
		if (gw_ca_leaf(e->ca, c->host, &leaf, &err) < 0) {
			respond_error(c, 502, "cannot make a certificate for this host", false);
			return;
		}
		SSL *ssl = SSL_new(e->srv_ctx);
		if (!ssl) {
			respond_error(c, 502, "out of memory", false);
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
			conn_free(c);
			return;
		}
		c->cbev = tls;
		c->cssl = ssl;
		c->ctls = true;
		bufferevent_setcb(tls, client_read_cb, client_write_cb, client_event_cb, c);
		watch_output(e, tls);
		bufferevent_setwatermark(tls, EV_WRITE, CONN_HIGH_WATER / 2, 0);
		bufferevent_setwatermark(tls, EV_READ, 0, CONN_HIGH_WATER);
		bufferevent_enable(tls, EV_READ | EV_WRITE);
		c->phase = P_HEAD;
		arm_timer(c, IDLE_TIMEOUT_MS);
		return;
	}

	/* Where the request goes. */
	uint16_t port = 0;
	if (req->form == GW_FORM_ABSOLUTE) {
		if (c->kind != CK_PROXY || c->ctls) {
			evbuffer_drain(in, req->head_len);
			respond_error(c, 400, "absolute-form request outside the proxy", false);
			return;
		}
		if (host_port(req->authority, 80, c->host, sizeof(c->host), &port) < 0) {
			evbuffer_drain(in, req->head_len);
			respond_error(c, 400, "bad host", false);
			return;
		}
	} else {
		uint16_t dflt = c->ctls ? 443 : 80;
		if (host_port(req->host, dflt, c->host, sizeof(c->host), &port) < 0) {
			evbuffer_drain(in, req->head_len);
			respond_error(c, 400, "bad Host", false);
			return;
		}
		if (c->kind == CK_PROXY && !c->ctls) {
			evbuffer_drain(in, req->head_len);
			respond_error(c, 400, "this is a proxy: send absolute-form requests or CONNECT",
				      false);
			return;
		}
		if (c->ctls) {
			/* One name for the tunnel, the SNI and the request. */
			if (strcmp(c->host, c->tunnel_host) != 0 || port != c->tunnel_port ||
			    (c->sni[0] && strcmp(c->sni, c->tunnel_host) != 0)) {
				c->port = port;
				evbuffer_drain(in, req->head_len);
				respond_error(c, 421, "Host, TLS server name and CONNECT target differ",
					      false);
				return;
			}
		} else if (port != 80) {
			c->port = port;
			evbuffer_drain(in, req->head_len);
			respond_error(c, 421, "Host names another port than this connection's", false);
			return;
		}
	}
	c->port = port;

	/* The one canonical path every decision uses. */
	char *canon = malloc(GW_PATH_MAX + 1);
	if (!canon) {
		conn_free(c);
		return;
	}
	size_t qoff;
	int pr = gw_path_canonical(req->path.p, req->path.len, canon, GW_PATH_MAX + 1, &qoff);
	if (pr < 0) {
		free(canon);
		evbuffer_drain(in, req->head_len);
		respond_error(c, 400, "ambiguous or malformed path", false);
		return;
	}
	c->path = canon;
	const char *query = req->path.p + qoff;
	size_t query_len = req->path.len - qoff;

	/* The decision. */
	if (cfg->mode == GW_MODE_OPEN) {
		snprintf(c->rule, sizeof(c->rule), "open");
		snprintf(c->reason, sizeof(c->reason), "network open");
	} else {
		struct gw_decision d;
		gw_policy_decide(e->policy, c->method, c->host, port, c->path, &d);
		c->generation = d.generation;
		if (d.rule)
			snprintf(c->rule, sizeof(c->rule), "%s", d.rule);
		if (!d.allow) {
			evbuffer_drain(in, req->head_len);
			respond_error(c, 403, d.reason, req->body == GW_BODY_NONE);
			return;
		}
		snprintf(c->reason, sizeof(c->reason), "%s", d.reason);
	}

	/* The credential, on TLS upstreams only. */
	const struct gw_cred *cred = find_cred(cfg, c->host, port, c->path);
	const char *secret = NULL;
	size_t secret_len = 0;
	if (cred && cred->github) {
		if (cfg->n_grants == 0) {
			cred = NULL; /* no grant, no credential */
		} else if (!gw_github_allowed(cfg->grants, cfg->n_grants, c->host, c->path)) {
			evbuffer_drain(in, req->head_len);
			respond_error(c, 403, "repository not granted to this run",
				      req->body == GW_BODY_NONE);
			return;
		}
	}
	if (cred && c->ctls && e->vault) {
		secret = gw_vault_get(e->vault, cred->secret, &secret_len);
		if (!secret)
			cred = NULL;
	} else {
		cred = NULL;
	}
	c->cred_name = cred ? cred->secret : NULL;
	if (cred && gw_redactor_new(e->vault, &c->red) < 0) {
		conn_free(c);
		return;
	}

	build_upstream_head(c, req, c->path, query, query_len, cred, secret, secret_len);
	c->bytes_up = evbuffer_get_length(c->pending);
	evbuffer_drain(in, req->head_len);
	if (c->req_body == GW_BODY_NONE || (c->req_body == GW_BODY_LENGTH && c->req_left == 0))
		c->req_done = true;
	upstream_start(c);
}

static int chunk_noop(const char *p, size_t n, void *ud)
{
	return 0;
}

/* Moves request body bytes from the client to the upstream. */
static void pump_request_body(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->cbev);
	struct evbuffer *out = bufferevent_get_output(c->ubev);
	while (!c->req_done && evbuffer_get_length(in) > 0) {
		if (evbuffer_get_length(out) >= CONN_HIGH_WATER || over_budget(c)) {
			bufferevent_disable(c->cbev, EV_READ);
			return;
		}
		size_t take;
		if (c->req_body == GW_BODY_LENGTH) {
			size_t avail = evbuffer_get_length(in);
			take = (uint64_t)avail < c->req_left ? avail : (size_t)c->req_left;
			c->req_left -= take;
			if (c->req_left == 0)
				c->req_done = true;
		} else {
			struct evbuffer_iovec v;
			if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
				return;
			size_t used;
			int r = gw_chunked_feed(&c->req_ch, v.iov_base, v.iov_len, &used, chunk_noop,
						NULL);
			if (r < 0) {
				/* Part of the body went already: nothing to answer. */
				snprintf(c->reason, sizeof(c->reason), "malformed chunked request body");
				c->status = 400;
				audit(c, "error");
				conn_free(c);
				return;
			}
			take = used;
			if (r == 1)
				c->req_done = true;
		}
		evbuffer_remove_buffer(in, out, take);
		c->bytes_up += take;
	}
	/* Once the body is in, the connection stays readable: bytes of a
	 * next request wait in the input buffer (bounded by its watermark)
	 * until this exchange is over, without an epoll change per request. */
	if (!c->req_done)
		bufferevent_enable(c->cbev, EV_READ);
}

static void process_client(struct conn *c)
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
				arm_timer(c, HEAD_DEADLINE_MS);
			}
			size_t want = len < GW_HTTP_HEAD_MAX + 1 ? len : GW_HTTP_HEAD_MAX + 1;
			const char *p = (const char *)evbuffer_pullup(in, (ssize_t)want);
			struct gw_http_request *req = malloc(sizeof(*req));
			if (!req || !p) {
				free(req);
				conn_free(c);
				return;
			}
			int r = gw_http_parse_request(p, want, req);
			if (r == 0) {
				free(req);
				bufferevent_enable(c->cbev, EV_READ);
				return;
			}
			evtimer_del(c->timer);
			if (r < 0) {
				free(req);
				reset_request(c);
				respond_error(c, -r, r == -400 ? "malformed request" :
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
			if (evbuffer_get_length(out) >= CONN_HIGH_WATER || over_budget(c)) {
				bufferevent_disable(c->cbev, EV_READ);
				return;
			}
			c->bytes_up += evbuffer_get_length(in);
			evbuffer_add_buffer(out, in);
			return;
		}
		case P_CLOSING:
			evbuffer_drain(in, evbuffer_get_length(in));
			return;
		}
	}
}

static void client_read_cb(struct bufferevent *bev, void *ud)
{
	process_client(ud);
}

static void client_write_cb(struct bufferevent *bev, void *ud)
{
	struct conn *c = ud;
	if (c->phase == P_CLOSING) {
		if (client_flushed(c))
			conn_free(c);
		return;
	}
	/* Drained below the low-water mark: the upstream may send again, and
	 * what it sent while we were paused moves on now (no new byte may
	 * come to wake us). */
	if (c->ubev && !c->paused) {
		bufferevent_enable(c->ubev, EV_READ);
		if (evbuffer_get_length(bufferevent_get_input(c->ubev)) > 0)
			event_active(c->kick_up, EV_TIMEOUT, 0);
	}
}

static void client_event_cb(struct bufferevent *bev, short what, void *ud)
{
	struct conn *c = ud;
	if (what & BEV_EVENT_CONNECTED)
		return;
	/* EOF, error or timeout: the client is gone or stuck. */
	if (!c->audited && c->method[0] && (c->phase == P_FORWARD || c->phase == P_RESOLVE)) {
		snprintf(c->reason, sizeof(c->reason), "client went away");
		audit(c, "allow");
	}
	conn_free(c);
}

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
	struct gw_span tokens[32];
	size_t n_tokens = connection_tokens(res->fields, res->n_fields, tokens, 32);
	bool switching = res->status == 101;
	for (size_t i = 0; i < res->n_fields; i++) {
		const struct gw_http_field *f = &res->fields[i];
		if (!switching && is_hop_by_hop(f->name, tokens, n_tokens))
			continue;
		if (switching && (gw_span_eq_ci(f->name, "connection") || gw_span_eq_ci(f->name, "upgrade")))
			continue;
		/* The body's framing is ours to write (below), from what was
		 * parsed; a bodiless response keeps its Content-Length (HEAD). */
		if (res->body != GW_BODY_NONE && gw_span_eq_ci(f->name, "content-length"))
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
			if (gw_span_eq_ci(res->fields[i].name, "upgrade")) {
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
	flush_acc(c);
	audit(c, "allow");
	if (c->close_after || c->req_close || !c->req_done) {
		close_when_flushed(c);
		return;
	}
	c->phase = P_HEAD;
	reset_request(c);
	arm_timer(c, IDLE_TIMEOUT_MS);
	process_client(c);
}

static void response_body_done(struct conn *c)
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
			conn_free(c);
			return;
		}
		int r = gw_http_parse_response(p, want, c->head_req, res);
		if (r == 0) {
			free(res);
			return;
		}
		if (r < 0) {
			free(res);
			respond_error(c, 502, "malformed response from the upstream", false);
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
				respond_error(c, 502, "upstream switched protocols unasked", false);
				return;
			}
			write_response_head(c, res, p);
			evbuffer_drain(in, res->head_len);
			free(res);
			c->resp_head_done = true;
			audit(c, "allow");
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
			response_body_done(c);
			return;
		}
	}
	if (c->phase == P_TUNNEL) {
		if (evbuffer_get_length(out) >= CONN_HIGH_WATER || over_budget(c)) {
			bufferevent_disable(c->ubev, EV_READ);
			return;
		}
		flush_acc(c);
		c->bytes_down += evbuffer_get_length(in);
		evbuffer_add_buffer(out, in);
		return;
	}
	while (c->phase == P_FORWARD && !c->resp_done && evbuffer_get_length(in) > 0) {
		if (evbuffer_get_length(out) + evbuffer_get_length(acc) >= CONN_HIGH_WATER ||
		    over_budget(c)) {
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
				audit(c, "allow");
				conn_free(c);
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
			flush_acc(c);
			evbuffer_remove_buffer(in, out, take);
			c->bytes_down += take;
		}
		if (done) {
			response_body_done(c);
			return;
		}
	}
}

static void pump_response(struct conn *c)
{
	conn_hold(c);
	pump_response_inner(c);
	if (conn_release(c) && c->phase != P_CLOSING)
		flush_acc(c);
}

static void up_read_cb(struct bufferevent *bev, void *ud)
{
	struct conn *c = ud;
	if (c->phase == P_FORWARD || c->phase == P_TUNNEL)
		pump_response(c);
	else
		evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
}

static void up_write_cb(struct bufferevent *bev, void *ud)
{
	struct conn *c = ud;
	if (c->paused)
		return;
	if ((c->phase == P_FORWARD && !c->req_done) || c->phase == P_TUNNEL) {
		bufferevent_enable(c->cbev, EV_READ);
		if (evbuffer_get_length(bufferevent_get_input(c->cbev)) > 0)
			event_active(c->kick_client, EV_TIMEOUT, 0);
	}
}

static void up_event_cb(struct bufferevent *bev, short what, void *ud)
{
	struct conn *c = ud;
	if (what & BEV_EVENT_CONNECTED) {
		c->up_connected = true;
		struct timeval rt = ms_tv(UPSTREAM_IDLE_MS), wt = ms_tv(CLIENT_WRITE_MS);
		bufferevent_set_timeouts(bev, &rt, &wt);
		int one = 1;
		setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		return;
	}
	/* A response that ends with the connection. */
	if ((what & BEV_EVENT_EOF) && c->phase == P_FORWARD && c->resp_head_done &&
	    c->resp_body == GW_BODY_CLOSE) {
		conn_hold(c);
		pump_response(c);
		if (!conn_release(c))
			return;
		if (c->phase == P_FORWARD && c->ubev) {
			bev_free(c->ubev);
			c->ubev = NULL;
			c->close_after = true;
			response_body_done(c);
		}
		return;
	}
	if (c->phase == P_TUNNEL) {
		conn_hold(c);
		pump_response(c);
		if (!conn_release(c))
			return;
		bev_free(c->ubev);
		c->ubev = NULL;
		close_when_flushed(c);
		return;
	}
	if (c->phase == P_FORWARD && !c->resp_head_done && c->reused && c->retry &&
	    evbuffer_get_length(c->retry) > 0 && evbuffer_get_length(bufferevent_get_input(bev)) == 0) {
		bev_free(c->ubev);
		c->ubev = NULL;
		c->up_reusable = c->reused = false;
		evbuffer_add_buffer(c->pending, c->retry);
		upstream_start(c);
		return;
	}
	if (c->phase == P_FORWARD && !c->resp_head_done) {
		char why[512];
		unsigned long e = ERR_peek_last_error();
		SSL *ssl = bufferevent_openssl_get_ssl(bev);
		long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
		if (ssl && vr != X509_V_OK)
			snprintf(why, sizeof(why), "upstream certificate not trusted: %s",
				 X509_verify_cert_error_string(vr));
		else if (what & BEV_EVENT_TIMEOUT)
			snprintf(why, sizeof(why), "upstream timed out");
		else if (!c->up_connected)
			snprintf(why, sizeof(why), "cannot connect to the upstream: %s",
				 e ? "TLS handshake failed" : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		else
			snprintf(why, sizeof(why), "the upstream closed the connection");
		ERR_clear_error();
		bev_free(c->ubev);
		c->ubev = NULL;
		respond_error(c, what & BEV_EVENT_TIMEOUT ? 504 : 502, why, false);
		return;
	}
	if (c->phase == P_FORWARD && !c->resp_done) {
		/* Cut off in the middle of a framed body: the client must see
		 * it cut off too — unless the bytes we still held end it. */
		conn_hold(c);
		pump_response(c);
		if (!conn_release(c) || c->phase != P_FORWARD || c->resp_done)
			return;
		snprintf(c->reason, sizeof(c->reason), "upstream closed mid-response");
		audit(c, "allow");
		conn_free(c);
		return;
	}
	/* An idle kept-alive upstream went away: forget it. */
	bev_free(c->ubev);
	c->ubev = NULL;
}

/* ---- connections ---- */

static void conn_hold(struct conn *c)
{
	c->hold++;
}

/* Whether c is still there to use after a call that may have freed it. */
static bool conn_release(struct conn *c)
{
	c->hold--;
	if (c->dead) {
		if (c->hold == 0)
			conn_free(c);
		return false;
	}
	return true;
}

static void conn_free(struct conn *c)
{
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
		for (struct conn **pp = &c->e->paused; *pp; pp = &(*pp)->paused_next)
			if (*pp == c) {
				*pp = c->paused_next;
				break;
			}
	}
	if (c->dns_req)
		evdns_getaddrinfo_cancel(c->dns_req);
	release_upstream(c);
	bev_free(c->cbev);
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

static int cert_cb(SSL *ssl, void *arg)
{
	struct conn *c = SSL_get_app_data(ssl);
	struct gw_engine *e = arg;
	if (!c)
		return 0;
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
	char norm[GW_HOST_MAX + 3] = "";
	bool ip = false;
	if (name && gw_host_normalize(name, strlen(name), norm, sizeof(norm), &ip) < 0)
		return 0;
	if (c->kind != CK_HTTPS) {
		/* CONNECT: the leaf is the CONNECT host's; a differing name is
		 * answered with 421 per request. */
		snprintf(c->sni, sizeof(c->sni), "%s", norm);
		return 1;
	}
	/* Transparent 443: the name is all we have. */
	if (!norm[0] || ip)
		return 0;
	if (e->cfg->mode == GW_MODE_RESTRICTED &&
	    !gw_policy_host_may_allow(e->policy, norm, 443))
		return 0;
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

static int alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		   const unsigned char *in, unsigned int inlen, void *arg)
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
	if (c->ubev && (c->phase == P_FORWARD || c->phase == P_TUNNEL) &&
	    evbuffer_get_length(bufferevent_get_input(c->ubev)) > 0)
		pump_response(c);
}

static void kick_client_cb(evutil_socket_t fd, short what, void *ud)
{
	struct conn *c = ud;
	if (evbuffer_get_length(bufferevent_get_input(c->cbev)) > 0)
		process_client(c);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		      void *ud)
{
	struct gw_sbx *s = ud;
	struct gw_engine *e = s->e;
	enum conn_kind kind = CK_PROXY;
	for (int i = 0; i < 3; i++)
		if (s->listeners[i] == l)
			kind = (enum conn_kind)i;
	if (s->n_conns >= MAX_CONNS_PER_SANDBOX) {
		close(fd);
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
	c->timer = evtimer_new(e->base, timer_cb, c);
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
		conn_free(c);
		return;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	bufferevent_setcb(c->cbev, client_read_cb, client_write_cb, client_event_cb, c);
	watch_output(e, c->cbev);
	struct timeval wt = ms_tv(CLIENT_WRITE_MS);
	bufferevent_set_timeouts(c->cbev, NULL, &wt);
	bufferevent_setwatermark(c->cbev, EV_WRITE, CONN_HIGH_WATER / 2, 0);
	bufferevent_setwatermark(c->cbev, EV_READ, 0, CONN_HIGH_WATER);
	bufferevent_enable(c->cbev, EV_READ | EV_WRITE);
	reset_request(c);
	arm_timer(c, IDLE_TIMEOUT_MS);
}

/* ---- DNS stub ---- */

struct dns_allow_ctx {
	const struct gw_config *cfg;
};

static bool dns_allow(const char *name, void *ud)
{
	const struct gw_engine *e = ud;
	const struct gw_config *cfg = e->cfg;
	char norm[GW_HOST_MAX + 3];
	bool ip;
	if (gw_host_normalize(name, strlen(name), norm, sizeof(norm), &ip) < 0 || ip)
		return false;
	if (cfg->mode == GW_MODE_OPEN)
		return true;
	return gw_policy_host_may_allow(e->policy, norm, 0);
}

static void dns_cb_udp(evutil_socket_t fd, short what, void *ud)
{
	struct gw_sbx *s = ud;
	struct gw_dns_config dc = { .ipv4 = { 127, 0, 0, 2 }, .ttl = 60, .allow = dns_allow,
				    .userdata = s->e };
	for (int i = 0; i < 64; i++) {
		uint8_t q[1500], a[GW_DNS_MAX_MSG];
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(fd, q, sizeof(q), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		if (n < 0)
			return;
		size_t alen = gw_dns_answer(&dc, q, (size_t)n, a, sizeof(a));
		if (alen)
			(void)sendto(fd, a, alen, MSG_DONTWAIT, (struct sockaddr *)&from, fl);
	}
}

/* ---- sandboxes ---- */

static void sandbox_free(struct gw_sbx *s)
{
	struct gw_engine *e = s->e;
	while (s->conns)
		conn_free(s->conns);
	while (s->pool)
		pooled_free(s->pool);
	for (int i = 0; i < 3; i++)
		if (s->listeners[i])
			evconnlistener_free(s->listeners[i]);
	if (s->control)
		evconnlistener_free(s->control);
	if (s->dns_ev)
		event_free(s->dns_ev);
	if (s->watch_ev)
		event_free(s->watch_ev);
	if (s->dns_fd >= 0)
		close(s->dns_fd);
	if (s->watch_fd >= 0)
		close(s->watch_fd);
	if (s->audit_fd >= 0)
		close(s->audit_fd);
	for (struct gw_sbx **pp = &e->sandboxes; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	free(s);
	if (e->exit_when_idle && !e->sandboxes)
		event_base_loopexit(e->base, NULL);
}

static void watch_cb(evutil_socket_t fd, short what, void *ud)
{
	/* The sandbox's init exited: the sandbox is gone. */
	sandbox_free(ud);
}

static void control_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
			      int salen, void *ud);

int gw_engine_add_sandbox(struct gw_engine *e, const char *id, const struct gw_listeners *l,
			  int audit_fd, int watch_pidfd, struct al_error *err)
{
	int fds[3] = { l->proxy, l->http, l->https };
	struct gw_sbx *s = calloc(1, sizeof(*s));
	if (!s) {
		for (int i = 0; i < 3; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		if (l->dns >= 0)
			close(l->dns);
		if (audit_fd >= 0)
			close(audit_fd);
		if (watch_pidfd >= 0)
			close(watch_pidfd);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	s->e = e;
	snprintf(s->id, sizeof(s->id), "%s", id);
	s->audit_fd = audit_fd;
	s->dns_fd = l->dns;
	s->watch_fd = watch_pidfd;
	s->next = e->sandboxes;
	e->sandboxes = s;
	int rc = 0;
	for (int i = 0; i < 3; i++) {
		if (fds[i] < 0)
			continue;
		evutil_make_socket_nonblocking(fds[i]);
		s->listeners[i] = evconnlistener_new(e->base, accept_cb, s, LEV_OPT_CLOSE_ON_FREE, -1,
						     fds[i]);
		if (!s->listeners[i]) {
			close(fds[i]);
			rc = -ENOMEM;
		}
	}
	if (s->dns_fd >= 0) {
		evutil_make_socket_nonblocking(s->dns_fd);
		s->dns_ev = event_new(e->base, s->dns_fd, EV_READ | EV_PERSIST, dns_cb_udp, s);
		if (!s->dns_ev || event_add(s->dns_ev, NULL) < 0)
			rc = -ENOMEM;
	}
	if (l->control >= 0) {
		evutil_make_socket_nonblocking(l->control);
		s->control = evconnlistener_new(e->base, control_accept_cb, s, LEV_OPT_CLOSE_ON_FREE,
						-1, l->control);
		if (!s->control) {
			close(l->control);
			rc = -ENOMEM;
		}
	}
	if (s->watch_fd >= 0) {
		s->watch_ev = event_new(e->base, s->watch_fd, EV_READ, watch_cb, s);
		if (!s->watch_ev || event_add(s->watch_ev, NULL) < 0)
			rc = -ENOMEM;
	}
	if (rc < 0) {
		sandbox_free(s);
		return al_error_set(err, rc, "cannot serve the sandbox's listeners");
	}
	return 0;
}

/* ---- control ---- */

/* A new generation replaces the old one whole, or the old one stays. */
static int set_policy(struct gw_engine *e, const uint8_t *text, size_t len, uint64_t *ret_gen,
		      struct al_error *err)
{
	uint64_t gen = (e->policy ? e->policy->generation : 0) + 1;
	struct gw_policy *p = NULL;
	int r = gw_policy_parse("policy", (const char *)text, len, gen, &p, err);
	if (r < 0)
		return r;
	gw_policy_free(e->owned_policy);
	e->owned_policy = p;
	e->policy = p;
	*ret_gen = gen;
	return 0;
}

/* One request per connection on a sandbox's control socket. */
static void policy_conn_cb(evutil_socket_t fd, short what, void *ud)
{
	struct gw_engine *e = ud;
	static const struct ipc_type types[] = { { GW_IPC_POLICY, GW_POLICY_TEXT_MAX, 0 } };
	struct ipc_msg m = IPC_MSG_INIT;
	int r = ipc_recv(fd, types, ARRAY_SIZE(types), &m);
	struct al_error err = { 0 };
	uint64_t gen = 0;
	if (r < 0)
		r = al_error_set(&err, r, "bad request on the control socket");
	else
		r = set_policy(e, m.data, m.len, &gen, &err);
	ipc_msg_done(&m);
	if (r < 0) {
		const char *msg = al_error_message(&err);
		ipc_send(fd, GW_IPC_ERROR, msg, strlen(msg), NULL, 0);
	} else {
		char g[32];
		int n = snprintf(g, sizeof(g), "%" PRIu64, gen);
		ipc_send(fd, GW_IPC_POLICY_SET, g, (size_t)n, NULL, 0);
	}
	close(fd);
}

static void control_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
			      int salen, void *ud)
{
	struct gw_sbx *s = ud;
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	/* The socket lives in a root-only directory; still, root only. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.uid != 0) {
		close(fd);
		return;
	}
	struct timeval tv = { .tv_sec = 5 };
	if (event_base_once(s->e->base, fd, EV_READ, policy_conn_cb, s->e, &tv) < 0)
		close(fd);
}

static void ctl_cb(evutil_socket_t fd, short what, void *ud)
{
	struct gw_engine *e = ud;
	static const struct ipc_type types[] = {
		{ GW_IPC_ATTACH, 1 + SANDBOX_ID_MAX, 7 },
	};
	struct ipc_msg m = IPC_MSG_INIT;
	int r = ipc_recv(fd, types, ARRAY_SIZE(types), &m);
	if (r == -EAGAIN)
		return;
	if (r < 0) {
		/* The caller is gone (a detached gateway lives on) or broke
		 * the protocol: no more control either way. */
		event_del(e->ctl_ev);
		close(e->ctl);
		e->ctl = -1;
		if (!e->sandboxes && e->exit_when_idle)
			event_base_loopexit(e->base, NULL);
		return;
	}
	/* payload: mask of the listeners present, then the id. */
	char id[SANDBOX_ID_MAX + 1] = "";
	uint8_t mask = m.len ? m.data[0] : 0;
	if (m.len > 1)
		memcpy(id, m.data + 1, m.len - 1);
	id[m.len > 1 ? m.len - 1 : 0] = '\0';
	struct gw_listeners l = { -1, -1, -1, -1, -1 };
	int *slots[4] = { &l.proxy, &l.http, &l.https, &l.dns };
	size_t k = 0;
	for (int i = 0; i < 4; i++)
		if (mask & (1u << i))
			*slots[i] = ipc_msg_take_fd(&m, k++);
	int audit_fd = (mask & 16) ? ipc_msg_take_fd(&m, k++) : -1;
	int watch_fd = (mask & 32) ? ipc_msg_take_fd(&m, k++) : -1;
	l.control = (mask & 64) ? ipc_msg_take_fd(&m, k++) : -1;
	bool ok = k == m.n_fds;
	ipc_msg_done(&m);
	struct al_error err = { 0 };
	if (ok)
		r = gw_engine_add_sandbox(e, id, &l, audit_fd, watch_fd, &err);
	else
		r = al_error_set(&err, -EBADMSG, "descriptors do not match the mask");
	if (r < 0) {
		const char *msg = al_error_message(&err);
		ipc_send(fd, GW_IPC_ERROR, msg, strlen(msg), NULL, 0);
	} else {
		ipc_send(fd, GW_IPC_ATTACHED, NULL, 0, NULL, 0);
	}
}

int gw_engine_add_control(struct gw_engine *e, int ctl)
{
	e->ctl = ctl;
	evutil_make_socket_nonblocking(ctl);
	e->ctl_ev = event_new(e->base, ctl, EV_READ | EV_PERSIST, ctl_cb, e);
	if (!e->ctl_ev || event_add(e->ctl_ev, NULL) < 0)
		return -ENOMEM;
	return 0;
}

static void signal_cb(evutil_socket_t sig, short what, void *ud)
{
	struct gw_engine *e = ud;
	event_base_loopexit(e->base, NULL);
}

int gw_engine_handle_signals(struct gw_engine *e)
{
	e->sig_int = evsignal_new(e->base, SIGINT, signal_cb, e);
	e->sig_term = evsignal_new(e->base, SIGTERM, signal_cb, e);
	if (!e->sig_int || !e->sig_term || evsignal_add(e->sig_int, NULL) < 0 ||
	    evsignal_add(e->sig_term, NULL) < 0)
		return -ENOMEM;
	return 0;
}

/* ---- the engine ---- */

int gw_engine_new(const struct gw_engine_opts *o, struct gw_engine **ret, struct al_error *err)
{
	struct gw_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return al_error_set(err, -ENOMEM, "out of memory");
	e->cfg = o->cfg;
	e->policy = o->cfg->policy;
	e->bundle = o->system_bundle;
	e->bundle_len = o->system_bundle_len;
	e->store = o->upstream_store;
	e->vault = o->vault;
	e->ca = o->ca;
	e->exit_when_idle = o->exit_when_idle;
	e->ctl = -1;
	struct event_config *ec = event_config_new();
	if (ec) {
		/* No signal fd or timer fd games: epoll only. */
		event_config_avoid_method(ec, "select");
		event_config_avoid_method(ec, "poll");
		e->base = event_base_new_with_config(ec);
		event_config_free(ec);
	}
	e->srv_ctx = SSL_CTX_new(TLS_server_method());
	e->up_ctx = SSL_CTX_new(TLS_client_method());
	if (!e->base || !e->srv_ctx || !e->up_ctx) {
		X509_STORE_free(o->upstream_store);
		gw_engine_free(e);
		return al_error_set(err, -ENOMEM, "cannot set up the event loop or TLS");
	}
	SSL_CTX_set_min_proto_version(e->srv_ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(e->srv_ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET |
						SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_session_cache_mode(e->srv_ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(e->srv_ctx, 0);
	/* Idle connections keep no TLS record buffers. */
	SSL_CTX_set_mode(e->srv_ctx, SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_mode(e->up_ctx, SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_cert_cb(e->srv_ctx, cert_cb, e);
	SSL_CTX_set_alpn_select_cb(e->srv_ctx, alpn_cb, e);
	SSL_CTX_set_min_proto_version(e->up_ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(e->up_ctx, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_verify(e->up_ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_cert_store(e->up_ctx, o->upstream_store);
	if (session_key_idx < 0)
		session_key_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, free_session_key);
	SSL_CTX_set_app_data(e->up_ctx, e);
	SSL_CTX_set_session_cache_mode(e->up_ctx,
				       SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(e->up_ctx, new_session_cb);
	static const unsigned char alpn[] = "\x08http/1.1";
	SSL_CTX_set_alpn_protos(e->up_ctx, alpn, sizeof(alpn) - 1);
	*ret = e;
	return 0;
}

int gw_engine_dns_init(struct gw_engine *e, struct al_error *err)
{
	e->dns = evdns_base_new(e->base, 0);
	if (!e->dns)
		return al_error_set(err, -ENOMEM, "cannot set up the resolver");
	/* Missing resolv.conf: upstream names fail, overrides still work. */
	(void)evdns_base_resolv_conf_parse(e->dns, DNS_OPTIONS_ALL, "/etc/resolv.conf");
	(void)evdns_base_load_hosts(e->dns, "/etc/hosts");
	evdns_base_set_option(e->dns, "randomize-case:", "0");
	return 0;
}

int gw_engine_run(struct gw_engine *e)
{
	return event_base_dispatch(e->base) < 0 ? -EIO : 0;
}

void gw_engine_free(struct gw_engine *e)
{
	if (!e)
		return;
	while (e->sandboxes)
		sandbox_free(e->sandboxes);
	if (e->ctl_ev)
		event_free(e->ctl_ev);
	if (e->ctl >= 0)
		close(e->ctl);
	if (e->sig_int)
		event_free(e->sig_int);
	if (e->sig_term)
		event_free(e->sig_term);
	if (e->dns)
		evdns_base_free(e->dns, 1);
	SSL_CTX_free(e->srv_ctx);
	SSL_CTX_free(e->up_ctx);
	for (unsigned i = 0; i < SESSION_CACHE; i++)
		if (e->sessions[i].sess)
			SSL_SESSION_free(e->sessions[i].sess);
	if (e->base)
		event_base_free(e->base);
	gw_vault_free(e->vault);
	gw_ca_free(e->ca);
	gw_policy_free(e->owned_policy);
	free(e->bundle);
	free(e);
}

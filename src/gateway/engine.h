/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to src/gateway: the engine's state and what its files call of
 * each other.
 *
 *   engine.c    the loop, sandboxes (listeners, the DNS stub), the control
 *               socket (ATTACH, policy generations, egress budgets)
 *   client.c    the client side: accepting, TLS towards the sandbox, request
 *               heads, the decision's two steps applied, request bodies
 *   upstream.c  the upstream side: addresses, connecting, the pool of idle
 *               connections, TLS sessions, the head the upstream gets
 *   response.c  responses: heads and bodies back to the client, redacted
 *               where a credential went out
 *   conn.c      a connection's life: budget, timers, answers of our own,
 *               closing
 *   audit.c     the audit line of each decision
 *   decide.c    the decisions themselves, as pure functions (decide.h)
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/ssl.h>

#include "gateway/budget.h"
#include "gateway/http.h"
#include "gateway/internal.h"

#define CONN_HIGH_WATER (256 * 1024) /* per direction, then the other side pauses */
/*
 * How much a TLS bufferevent reads at a time. libevent reserves that much
 * in its input buffer before each read and keeps the reservation while the
 * connection waits (an empty buffer it cannot release), so a connection
 * waiting for a request head, or an idle pooled upstream, reads a little;
 * one moving a body reads a lot.
 */
#define READ_SMALL 1024
#define READ_LARGE (16 * 1024)
#define READ_HOLD 4096
#define GLOBAL_BUDGET (64ull << 20) /* bytes queued in all connection buffers */
/* Timeouts come from the configuration (limits:, see config.c). */
#define HEAD_DEADLINE_MS (c->e->cfg->head_ms)
#define IDLE_TIMEOUT_MS (c->e->cfg->idle_ms)
#define UPSTREAM_CONNECT_MS (c->e->cfg->connect_ms)
#define UPSTREAM_IDLE_MS (c->e->cfg->upstream_ms)
#define CLIENT_WRITE_MS (c->e->cfg->write_ms)
#define POOL_MAX 64	 /* idle upstream connections per sandbox */
#define POOL_IDLE_S 30	 /* then closed */
#define SESSION_CACHE 64 /* upstream TLS sessions kept for resumption */

#define SESSION_CACHE 64 /* upstream TLS sessions kept for resumption */

struct gw_sbx;
struct conn;

struct gw_engine {
	struct event_base *base;
	struct evdns_base *dns;
	const struct gw_config *cfg;
	const struct gw_policy *policy; /* the current generation's rules */
	/* The current generation: its policy, hosts and cidrs (cfg itself,
	 * until one comes later over GW_IPC_POLICY: owned_gen). */
	const struct gw_config *gen;
	struct gw_config *owned_gen;
	struct gw_vault *vault;
	struct gw_ca *ca;
	SSL_CTX *srv_ctx, *up_ctx;
	X509_STORE *store; /* up_ctx's */
	struct {
		char key[GW_SANDBOX_ID_MAX + GW_HOST_MAX + 12]; /* sandbox host:port */
		SSL_SESSION *sess;
	} sessions[SESSION_CACHE];
	unsigned next_session;
	int session_key_idx; /* the SSL ex-data slot of a session's host:port */
	char *bundle;	     /* the system bundle, until first needed */
	size_t bundle_len;
	struct gw_sbx *sandboxes;
	bool exit_when_idle;
	int ctl;
	struct event *ctl_ev, *sig_int, *sig_term;
	struct gw_cidr *own; /* the host's own addresses when the gateway started */
	size_t n_own;
	bool bind_probe;     /* the host does not let anything bind to any address */
	uint64_t queued;     /* bytes in all connection buffers */
	struct conn *paused; /* connections waiting for the global budget */
};

/*
 * A sandbox's audit log (audit.c): bounded, so nothing a sandbox does
 * fills the host's disk. Repeated identical denials (same kind, host,
 * port, method, status, rule and reason; any path) are written once and
 * then counted: a summary line every AUDIT_WINDOW_S seconds says how many
 * more there were. At audit_max bytes a marker line is written, nothing
 * more, and new requests are refused (no egress goes unaudited).
 */
#define AUDIT_SLOTS 64
#define AUDIT_WINDOW_S 10
#define AUDIT_PATH_MAX 1024

struct gw_audit_slot {
	uint64_t hash; /* 0: free */
	char kind[8], decision[8], method[33], rule[GW_RULE_ID_MAX + 1], reason[256];
	char host[GW_HOST_MAX + 3];
	uint16_t port;
	int status;
	uint64_t generation;
	uint64_t count; /* more of the same since its line */
	char since[32]; /* when the first of those came */
};

struct gw_audit {
	int fd;
	uint64_t written, max;
	bool capped;
	uint64_t dropped;	     /* lines not written after the cap */
	struct gw_audit_slot *slots; /* AUDIT_SLOTS, allocated on the first denial */
	struct event *flush;	     /* the summary timer, armed while counts wait */
};

/* What an audit line says (audit.c writes it). */
struct gw_audit_rec {
	const char *kind;     /* "http", "dns", "tls" */
	const char *decision; /* "allow", "deny", "error" */
	const char *method, *host, *path, *rule, *credential, *reason;
	uint16_t port;
	int status;
	uint64_t generation, bytes_up, bytes_down;
	double duration_ms;
};

/* A request on a sandbox's control socket, waiting for its frame: owned
 * by the sandbox, so nothing names a sandbox that is gone. */
struct gw_ctl_req {
	struct gw_sbx *s;
	int fd;
	struct event *ev;
	struct gw_ctl_req *next;
};

struct gw_sbx {
	struct gw_engine *e;
	char id[GW_SANDBOX_ID_MAX + 1];
	struct gw_audit audit;
	struct evconnlistener *listeners[3];
	int dns_fd, watch_fd;
	struct event *dns_ev, *watch_ev;
	struct evconnlistener *control; /* root's socket: policy changes, the budget */
	struct gw_ctl_req *ctl_reqs;
	/* The egress budget (budget.h), set by root (GW_IPC_BUDGET): requests
	 * are admitted in gw_upstream_start, bytes counted where they move
	 * between a client and its upstream (client.c, response.c). */
	struct gw_budget budget;
	struct conn *conns;
	size_t n_conns;
	uint64_t queued;     /* bytes in this sandbox's connection buffers */
	struct conn *paused; /* its connections waiting for its own budget */
	struct pooled *pool; /* idle upstream connections, this sandbox's only */
	size_t n_pool;
	struct gw_sbx *next;
};

/*
 * A bufferevent whose buffers' bytes count against the budgets (the engine's and
 * its sandbox's). The record, not the connection, is the callback's
 * argument, and it is unwatched (its count given back, the callback
 * removed) before its buffer goes: libevent may run buffer callbacks
 * deferred, after their owner is gone.
 */
struct gw_watch {
	struct gw_sbx *s;
	struct evbuffer *in, *out;
	struct evbuffer_cb_entry *ent_in, *ent_out;
	uint64_t counted; /* what the two buffers hold, as reported so far */
};

/* An idle kept-alive upstream connection waiting for its next request. */
struct pooled {
	struct gw_sbx *s;
	struct bufferevent *bev;
	struct gw_watch *w;
	char host[GW_HOST_MAX + 3];
	uint16_t port;
	bool tls;
	bool cred;    /* it has carried a credential: only credentialed requests take it */
	uint64_t gen; /* the policy generation that vetted its address */
	struct pooled *next;
};

enum conn_kind { CK_PROXY = 0, CK_HTTP, CK_HTTPS };

enum phase {
	P_HEAD = 0, /* waiting for a request head */
	P_INSPECT,  /* reading the start of the body before deciding (git push) */
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
	int paused; /* 0; 1: on the engine's list; 2: on its sandbox's */
	struct gw_watch *w_client, *w_tls, *w_up; /* the budget's records */
	enum conn_kind kind;
	enum phase phase;
	struct bufferevent *cbev;
	bool ctls;
	SSL *cssl;
	char tunnel_host[GW_HOST_MAX + 3]; /* CONNECT's host or the SNI (transparent 443) */
	uint16_t tunnel_port;
	char sni[GW_HOST_MAX + 3];
	struct event *timer;
	/* closing_drain_cb on the output below a closing TLS filter: removed
	 * before the connection goes (libevent may run it deferred, later). */
	struct evbuffer_cb_entry *drain_cb;
	struct event *kick_up;	   /* moves buffered upstream bytes on (after a pause) */
	struct event *kick_client; /* moves buffered client bytes on */
	unsigned hold;		   /* callers up the stack still use it */
	bool dead;		   /* freed while held: goes when the last hold does */
	bool head_started;
	bool tls_up;		 /* the TLS handshake with the client completed */
	const char *tls_refusal; /* why the handshake was refused (static text) */

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
	/* This upstream connection has carried a credential. Should it ever
	 * get out of step with its requests (an upstream answering twice),
	 * what it sends may be the answer to that request: it then serves
	 * only requests whose responses are redacted. */
	bool up_cred;
	uint64_t up_gen; /* the policy generation that vetted its address */
	/* The upstream ended (1: EOF, 2: error or timeout) while bytes it sent
	 * may still wait in its input buffer for the client. */
	int up_gone;

	/* The response. */
	bool resp_head_done, resp_done;
	unsigned interim; /* 1xx heads before the final one */
	enum gw_http_body resp_body;
	uint64_t resp_left;
	struct gw_chunked resp_ch;
	struct gw_redactor *red; /* a credential went out: what comes back is redacted */
	struct gw_decoder *dec;	 /* ... and decoded first when the upstream compressed it */
	struct evbuffer *dec_in; /* encoded body bytes waiting for the decoder */
	size_t dec_step;	 /* decoded bytes of the current decoder call */
	bool wire_done;		 /* the body's last byte came from the upstream */
	struct gw_ws *ws;	 /* after a credentialed WebSocket upgrade: frames redacted */
	struct evbuffer *acc;	 /* response bytes gathered, written to the client at once */
	bool rechunk, unframed, close_after;
	bool reused;		/* this exchange went on a kept-alive upstream connection */
	struct evbuffer *retry; /* its head, to resend once on a fresh connection */
	int status;

	/* For the audit line. */
	struct timespec t0;
	uint64_t bytes_up, bytes_down;
	const char *cred_name;
	char rule[GW_RULE_ID_MAX + 1];
	uint64_t generation;
	char reason[256];
	bool audited;
	const char *audit_kind; /* NULL: "http" */
	bool admitted;		/* this request is counted in the sandbox's budget */
	bool budget_cut;	/* cut for the budget (audited once) */
};

/* conn.c */
void gw_conn_hold(struct conn *c);
/* Whether c is still there to use after a call that may have freed it. */
bool gw_conn_release(struct conn *c);
void gw_conn_free(struct conn *c);
struct timeval gw_ms_tv(uint64_t ms);
void gw_arm_timer(struct conn *c, uint64_t ms);
void gw_timer_cb(evutil_socket_t fd, short what, void *ud);
double gw_ms_since(const struct timespec *t0);
void gw_bev_free(struct bufferevent *bev);
bool gw_over_budget(struct conn *c);
/* How much of the client's bytes the gateway reads ahead: CONN_HIGH_WATER
 * while a head or a body is read, READ_HOLD while a request waits for its
 * response (the next one's bytes wait in the kernel, not here). */
void gw_client_read_limit(struct conn *c, size_t high);
/* Counts what a bufferevent's input and output buffers hold. */
struct gw_watch *gw_watch_bev(struct gw_sbx *s, struct bufferevent *bev);
/* Gives back what the buffer counted and removes the callback; NULL is fine. */
void gw_unwatch(struct gw_watch *w);
/* Frees c's upstream connection (unwatched first); c->ubev is NULL after. */
void gw_up_free(struct conn *c);
void gw_flush_acc(struct conn *c);
bool gw_client_flushed(struct conn *c);
void gw_close_when_flushed(struct conn *c);
void gw_respond_error(struct conn *c, int status, const char *reason, bool keep);
void gw_reset_request(struct conn *c);
/* The egress budget: the bytes c may still move for its sandbox, counting
 * n of them moved, and cutting c when it has more to move than that. */
uint64_t gw_budget_left(const struct conn *c);
void gw_budget_moved(struct conn *c, uint64_t n);
void gw_budget_cut(struct conn *c);
/* Moves what in holds to out as far as the budget allows, adding it to
 * *counter too; cuts c (gw_budget_cut) and returns false when some was
 * left over. */
bool gw_budget_relay(struct conn *c, struct evbuffer *in, struct evbuffer *out, uint64_t *counter);

/* audit.c */
/* The line of c's request (kind http), once per request. */
void gw_audit(struct conn *c, const char *decision);
void gw_audit_write(struct gw_sbx *s, const struct gw_audit_rec *r);
int gw_audit_init(struct gw_sbx *s, int fd);
/* Writes what is still counted, and closes. */
void gw_audit_close(struct gw_sbx *s);

/* client.c */
void gw_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		  void *ud);
int gw_cert_cb(SSL *ssl, void *arg);
int gw_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
	       unsigned int inlen, void *arg);
void gw_process_client(struct conn *c);
void gw_client_read_cb(struct bufferevent *bev, void *ud);
void gw_client_write_cb(struct bufferevent *bev, void *ud);
void gw_client_event_cb(struct bufferevent *bev, short what, void *ud);

/* upstream.c */
void gw_upstream_start(struct conn *c);
void gw_release_upstream(struct conn *c);
void gw_pooled_free(struct pooled *p);
void gw_build_upstream_head(struct conn *c, const struct gw_http_request *req, const char *canon,
			    const char *query, size_t query_len, const struct gw_cred *cred,
			    const char *secret, size_t secret_len);
/* Upstream TLS sessions resumed per host:port. */
void gw_upstream_ctx_setup(struct gw_engine *e);
void gw_upstream_sessions_free(struct gw_engine *e);

/* response.c */
void gw_pump_response(struct conn *c);
/* Response bytes wait for the client to take them (from the upstream's
 * buffer, or the decoder's). */
bool gw_response_pending(const struct conn *c);
void gw_response_body_done(struct conn *c);

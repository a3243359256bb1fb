/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The upstream side: the head the upstream gets, its address (operator
 * override, static host, IP literal or the gateway's own lookup, vetted),
 * connecting with verified TLS, idle connections kept per sandbox for
 * reuse, TLS sessions resumed per host:port, and the upstream
 * connection's events.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/bufferevent_ssl.h>
#include <event2/util.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/encode.h"
#include "gateway/engine.h"

/* ---- idle upstream connections ---- */

void gw_pooled_free(struct pooled *p)
{
	struct gw_sbx *s = p->s;
	for (struct pooled **pp = &s->pool; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	s->n_pool--;
	gw_unwatch(p->w);
	gw_bev_free(p->bev);
	free(p);
}

/* Anything from an idle upstream (bytes, EOF, error, idle timeout) ends it. */
static void pooled_read_cb(struct bufferevent *bev, void *ud)
{
	gw_pooled_free(ud);
}

static void pooled_event_cb(struct bufferevent *bev, short what, void *ud)
{
	gw_pooled_free(ud);
}

/* Keeps c's upstream connection for a later client connection of the same
 * sandbox, when its last exchange ended cleanly; frees it otherwise. */
void gw_release_upstream(struct conn *c)
{
	struct bufferevent *bev = c->ubev;
	if (!bev)
		return;
	/* In step only after a whole exchange: a response that came before
	 * all of its request's body leaves the upstream waiting for the rest,
	 * and the next request's head would be read as that body. */
	bool clean = c->up_reusable && c->up_connected &&
		     ((c->resp_done && c->req_done) || !c->method[0]) &&
		     evbuffer_get_length(bufferevent_get_input(bev)) == 0 &&
		     evbuffer_get_length(bufferevent_get_output(bev)) == 0;
	struct pooled *p = clean && c->s->n_pool < POOL_MAX ? calloc(1, sizeof(*p)) : NULL;
	if (!p) {
		gw_up_free(c);
		return;
	}
	c->ubev = NULL;
	p->s = c->s;
	p->bev = bev;
	p->w = c->w_up;
	c->w_up = NULL;
	snprintf(p->host, sizeof(p->host), "%s", c->up_host);
	p->port = c->up_port;
	p->tls = c->up_tls;
	p->cred = c->up_cred;
	p->gen = c->up_gen;
	p->next = c->s->pool;
	c->s->pool = p;
	c->s->n_pool++;
	bufferevent_setcb(bev, pooled_read_cb, NULL, pooled_event_cb, p);
	if (p->tls)
		bufferevent_set_max_single_read(bev, READ_SMALL);
	struct timeval rt = { .tv_sec = POOL_IDLE_S };
	bufferevent_set_timeouts(bev, &rt, NULL);
	bufferevent_enable(bev, EV_READ);
}

/* An idle upstream connection to host:port that nothing has come from
 * since, taken out of the pool (with its budget record, into *ret_w, and
 * whether it carried a credential); one that carried a credential only for
 * a request with one. */
static struct bufferevent *pool_take(struct gw_sbx *s, const char *host, uint16_t port, bool tls,
				     bool credentialed, uint64_t gen, struct gw_watch **ret_w,
				     bool *ret_cred)
{
	for (struct pooled *p = s->pool; p; p = p->next)
		if (p->port == port && p->tls == tls && strcmp(p->host, host) == 0 &&
		    (!p->cred || credentialed) && p->gen == gen &&
		    evbuffer_get_length(bufferevent_get_input(p->bev)) == 0) {
			struct bufferevent *bev = p->bev;
			p->bev = NULL;
			*ret_w = p->w;
			*ret_cred = p->cred;
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

/*
 * Writes the head the upstream gets: origin-form target (canonical path and
 * the query, with an injected parameter), the client's fields minus
 * hop-by-hop ones and minus whatever the credential replaces.
 */
void gw_build_upstream_head(struct conn *c, const struct gw_http_request *req, const char *canon,
			    const char *query, size_t query_len, const struct gw_cred *cred,
			    const char *secret, size_t secret_len)
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
		char *esc = malloc(secret_len * 3 + 1);
		if (esc) {
			enc_percent(secret, secret_len, false, esc);
			evbuffer_add(out, esc, strlen(esc));
			explicit_bzero(esc, strlen(esc));
			free(esc);
		}
	}
	evbuffer_add(out, " HTTP/1.1\r\n", 11);

	struct sv tokens[32];
	size_t n_tokens = gw_http_connection_tokens(req->fields, req->n_fields, tokens, 32);
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
		if (sv_equal_ci_cstr(f->name, "host") ||
		    sv_equal_ci_cstr(f->name, "content-length"))
			continue;
		if (gw_http_is_hop_by_hop(f->name, tokens, n_tokens))
			continue;
		if (replaced && sv_equal_ci_cstr(f->name, replaced))
			continue;
		/* Meaningful only with an h2c upgrade, which never goes on. */
		if (sv_equal_ci_cstr(f->name, "http2-settings"))
			continue;
		/* With a credential on board, ask for an identity body so an
		 * echo of it can be redacted. */
		if (cred && sv_equal_ci_cstr(f->name, "accept-encoding"))
			continue;
		/* Nor a compressed WebSocket (permessage-deflate): its frames
		 * are redacted. */
		if (cred && c->upgrade && sv_equal_ci_cstr(f->name, "sec-websocket-extensions"))
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
		size_t pl = ul + 1 + secret_len;
		unsigned char *up = malloc(pl);
		char *b64 = malloc(enc_base64_len(pl) + 1);
		if (up && b64) {
			memcpy(up, cred->name, ul);
			up[ul] = ':';
			memcpy(up + ul + 1, secret, secret_len);
			enc_base64(up, pl, b64);
			evbuffer_add(out, "Authorization: Basic ", 21);
			evbuffer_add(out, b64, strlen(b64));
			evbuffer_add(out, "\r\n", 2);
			explicit_bzero(up, pl);
			explicit_bzero(b64, strlen(b64));
		}
		free(up);
		free(b64);
	}
	if (cred)
		evbuffer_add(out, "Accept-Encoding: identity\r\n", 27);
	if (req->body == GW_BODY_CHUNKED)
		evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
	if (c->upgrade) /* WebSocket only (client.c) */
		evbuffer_add(out, "Upgrade: websocket\r\nConnection: Upgrade\r\n", 41);
	evbuffer_add(out, "\r\n", 2);
}

static void upstream_connect(struct conn *c, const struct sockaddr *sa, socklen_t len);
static void up_read_cb(struct bufferevent *bev, void *ud);
static void up_write_cb(struct bufferevent *bev, void *ud);
static void up_event_cb(struct bufferevent *bev, short what, void *ud);

/*
 * Whether the gateway may connect to sa: not in a refused range (unless
 * the operator allowed a CIDR), and never the host itself, whatever
 * allow_cidrs says (a service of the host is reached through an operator
 * override, --upstream, not by vetting).
 */
static bool vetted(struct conn *c, const struct sockaddr *sa, const char **ret_why)
{
	const struct gw_config *gen = c->e->gen; /* the current generation's allow_cidrs */
	if (!gw_addr_allowed(sa, gen->cidrs, gen->n_cidrs, ret_why))
		return false;
	int r = gw_addr_is_host(sa, c->e->own, c->e->n_own, c->e->bind_probe);
	if (r == 0)
		return true;
	*ret_why = r > 0 ? "an address of this host" : "no route to it";
	return false;
}

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
		gw_respond_error(c, 502, why, false);
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
			if (ai->ai_family == AF_INET)
				((struct sockaddr_in *)ai->ai_addr)->sin_port = htons(c->up_port);
			else if (ai->ai_family == AF_INET6)
				((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons(c->up_port);
			if (vetted(c, ai->ai_addr, &r))
				pick = ai;
			else if (!reason)
				reason = r;
		}
	if (!pick) {
		char why[512];
		snprintf(why, sizeof(why), "%s resolves to a refused address: %s", c->up_host,
			 reason ? reason : "none usable");
		evutil_freeaddrinfo(res);
		gw_respond_error(c, 403, why, false);
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

static void free_session_key(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
			     void *argp)
{
	free(ptr);
}

static int new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
	struct gw_engine *e = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	const char *key = e ? SSL_get_ex_data(ssl, e->session_key_idx) : NULL;
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

/* Sessions are resumed within a sandbox only: a resumed session would
 * tell an upstream that two sandboxes are the same client. */
static void session_attach(struct gw_engine *e, SSL *ssl, const struct gw_sbx *s, const char *host,
			   uint16_t port)
{
	char key[sizeof(e->sessions[0].key)];
	snprintf(key, sizeof(key), "%s %s:%u", s->id, host, (unsigned)port);
	char *k = strdup(key);
	if (!k || !SSL_set_ex_data(ssl, e->session_key_idx, k)) {
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

void gw_upstream_ctx_setup(struct gw_engine *e)
{
	/* Where each upstream SSL keeps its host:port key (freed with it). */
	e->session_key_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, free_session_key);
	SSL_CTX_set_app_data(e->up_ctx, e);
	SSL_CTX_set_session_cache_mode(e->up_ctx,
				       SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(e->up_ctx, new_session_cb);
}

void gw_upstream_sessions_free(struct gw_engine *e)
{
	for (unsigned i = 0; i < SESSION_CACHE; i++)
		if (e->sessions[i].sess)
			SSL_SESSION_free(e->sessions[i].sess);
}

int gw_store_add_pem(X509_STORE *store, const char *pem, size_t len)
{
	if (len > INT_MAX)
		return -EFBIG;
	BIO *bio = BIO_new_mem_buf(pem, (int)len);
	if (!bio)
		return -ENOMEM;
	int n = 0;
	X509 *x;
	while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
		if (X509_STORE_add_cert(store, x) == 1)
			n++;
		X509_free(x);
	}
	BIO_free(bio);
	ERR_clear_error(); /* the end of the data reads as an error */
	return n;
}

/* The system's trust anchors join the store when TLS upstream is first needed. */
static void load_system_bundle(struct gw_engine *e)
{
	(void)gw_store_add_pem(e->store, e->bundle, e->bundle_len);
	free(e->bundle);
	e->bundle = NULL;
}

static void upstream_connect(struct conn *c, const struct sockaddr *sa, socklen_t len)
{
	struct gw_engine *e = c->e;
	/* The generation whose allow_cidrs vetted sa (just now). */
	c->up_gen = e->policy ? e->policy->generation : 0;
	int opts = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
	if (c->up_tls && e->bundle)
		load_system_bundle(e);
	if (c->up_tls) {
		SSL *ssl = SSL_new(e->up_ctx);
		if (!ssl) {
			gw_respond_error(c, 502, "out of memory", false);
			return;
		}
		bool ip = c->up_host[0] == '[' ||
			  strspn(c->up_host, "0123456789.") == strlen(c->up_host);
		if (ip) {
			char lit[GW_HOST_MAX + 3];
			snprintf(lit, sizeof(lit), "%s",
				 c->up_host[0] == '[' ? c->up_host + 1 : c->up_host);
			char *rb = strchr(lit, ']');
			if (rb)
				*rb = '\0';
			X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), lit);
		} else {
			SSL_set_tlsext_host_name(ssl, c->up_host);
			SSL_set1_host(ssl, c->up_host);
		}
		session_attach(e, ssl, c->s, c->up_host, c->up_port);
		c->ubev = bufferevent_openssl_socket_new(e->base, -1, ssl,
							 BUFFEREVENT_SSL_CONNECTING, opts);
	} else {
		c->ubev = bufferevent_socket_new(e->base, -1, opts);
	}
	if (!c->ubev) {
		gw_respond_error(c, 502, "out of memory", false);
		return;
	}
	c->up_connected = false;
	bufferevent_setcb(c->ubev, up_read_cb, up_write_cb, up_event_cb, c);
	c->w_up = gw_watch_bev(c->s, c->ubev);
	if (!c->w_up) {
		gw_bev_free(c->ubev);
		c->ubev = NULL;
		gw_respond_error(c, 502, "out of memory", false);
		return;
	}
	struct timeval rt = gw_ms_tv(UPSTREAM_IDLE_MS), wt = gw_ms_tv(UPSTREAM_CONNECT_MS);
	bufferevent_set_timeouts(c->ubev, &rt, &wt);
	bufferevent_setwatermark(c->ubev, EV_WRITE, CONN_HIGH_WATER / 2, 0);
	bufferevent_setwatermark(c->ubev, EV_READ, 0, CONN_HIGH_WATER);
	if (bufferevent_socket_connect(c->ubev, sa, (int)len) < 0) {
		gw_respond_error(c, 502, "cannot connect to the upstream", false);
		return;
	}
	bufferevent_enable(c->ubev, EV_READ | EV_WRITE);
	c->phase = P_FORWARD;
	bufferevent_write_buffer(c->ubev, c->pending);
	gw_process_client(c);
}

static bool idempotent(const char *method)
{
	static const char *const m[] = { "GET",	     "HEAD",   "OPTIONS", "PUT",  "DELETE",
					 "PROPFIND", "MKCOL",  "COPY",	  "MOVE", "UNLOCK",
					 "REPORT",   "SEARCH", NULL };
	for (size_t i = 0; m[i]; i++)
		if (strcmp(method, m[i]) == 0)
			return true;
	return false;
}

/*
 * The sandbox's egress budget admits the request (counted, with its head)
 * or it is refused with 403; false then. Once per request: a retry on a
 * fresh connection, or a pooled one, is the same request.
 */
static bool budget_admit(struct conn *c)
{
	if (c->admitted)
		return true;
	const struct gw_budget *b = &c->s->budget;
	int r = gw_budget_admit(&c->s->budget, evbuffer_get_length(c->pending));
	if (r == 0) {
		c->admitted = true;
		return true;
	}
	char why[160];
	if (r == -EDQUOT)
		snprintf(why, sizeof(why),
			 "the turn's egress budget of %" PRIu64 " requests is spent",
			 b->max_requests);
	else
		snprintf(why, sizeof(why), "the turn's egress budget of %" PRIu64 " bytes is spent",
			 b->max_bytes);
	c->cred_name = NULL; /* the head that carries it never goes */
	c->audit_kind = "budget";
	/* Its body, if any, was not read: the connection cannot go on. */
	gw_respond_error(c, 403, why, c->req_done && c->phase == P_HEAD);
	return false;
}

/* Picks the upstream address: operator override, static host, IP literal, or DNS. */
void gw_upstream_start(struct conn *c)
{
	struct gw_engine *e = c->e;
	const struct gw_config *cfg = e->cfg;
	bool credentialed = c->cred_name != NULL;
	/* A connection vetted under an earlier generation is not used again:
	 * the address of every request is vetted under the generation that
	 * decided it (its allow_cidrs may have shrunk since). */
	uint64_t gen = e->policy ? e->policy->generation : 0;
	if (!budget_admit(c))
		return;
	/* The same upstream as the last request: go on on that connection,
	 * if nothing came from it since its last response. */
	if (c->ubev && c->up_reusable && strcmp(c->up_host, c->host) == 0 &&
	    c->up_port == c->port && c->up_tls == c->ctls && (!c->up_cred || credentialed) &&
	    c->up_gen == gen && evbuffer_get_length(bufferevent_get_input(c->ubev)) == 0) {
		c->phase = P_FORWARD;
		c->reused = true;
		c->up_cred |= credentialed;
		/* The upstream may have closed it just now: an idempotent
		 * request without a body can go again on a fresh connection
		 * (RFC 9112 9.3.1). A POST never does: the upstream may have
		 * acted on it before the connection went. */
		if (c->req_done && idempotent(c->method) &&
		    (c->retry || (c->retry = evbuffer_new())))
			evbuffer_add(c->retry, evbuffer_pullup(c->pending, -1),
				     evbuffer_get_length(c->pending));
		bufferevent_write_buffer(c->ubev, c->pending);
		bufferevent_enable(c->ubev, EV_READ);
		gw_process_client(c);
		return;
	}
	if (c->ubev)
		gw_up_free(c);
	snprintf(c->up_host, sizeof(c->up_host), "%s", c->host);
	c->up_port = c->port;
	c->up_tls = c->ctls;
	c->up_reusable = false;
	c->up_cred = false;
	/* An idle connection to the same upstream, left by an earlier client
	 * connection of this sandbox: no new TCP or TLS handshake. */
	struct gw_watch *pw = NULL;
	bool pooled_cred = false;
	struct bufferevent *pooled =
		pool_take(c->s, c->host, c->port, c->ctls, credentialed, gen, &pw, &pooled_cred);
	if (pooled) {
		c->up_cred = pooled_cred;
		c->up_gen = gen;
		c->ubev = pooled;
		c->w_up = pw;
		if (c->ctls)
			bufferevent_set_max_single_read(pooled, READ_LARGE);
		c->up_connected = true;
		c->up_reusable = true;
		bufferevent_setcb(pooled, up_read_cb, up_write_cb, up_event_cb, c);
		struct timeval rt = gw_ms_tv(UPSTREAM_IDLE_MS), wt = gw_ms_tv(CLIENT_WRITE_MS);
		bufferevent_set_timeouts(pooled, &rt, &wt);
		gw_upstream_start(c);
		return;
	}
	c->up_cred = credentialed;
	const struct gw_upstream *u = gw_config_upstream(cfg, c->host, c->port);
	if (u) {
		/* The operator's own routing: not vetted. */
		upstream_connect(c, (const struct sockaddr *)&u->addr, u->addr_len);
		return;
	}
	struct sockaddr_storage ss = { 0 };
	socklen_t sl = 0;
	const struct gw_static_host *sh = gw_config_static_host(c->e->gen, c->host);
	char lit[GW_HOST_MAX + 10];
	if (sh) {
		ss = sh->addr;
		sl = sh->addr_len;
	} else if (c->host[0] == '[' || strspn(c->host, "0123456789.") == strlen(c->host)) {
		snprintf(lit, sizeof(lit), "%s:%u", c->host, (unsigned)c->port);
		if (gw_parse_sockaddr(lit, &ss, &sl) < 0) {
			gw_respond_error(c, 400, "bad IP literal", false);
			return;
		}
	}
	if (sl) {
		if (ss.ss_family == AF_INET)
			((struct sockaddr_in *)&ss)->sin_port = htons(c->port);
		else
			((struct sockaddr_in6 *)&ss)->sin6_port = htons(c->port);
		const char *reason = NULL;
		if (!vetted(c, (struct sockaddr *)&ss, &reason)) {
			char why[512];
			snprintf(why, sizeof(why), "%s is a refused address: %s", c->host,
				 reason ? reason : "refused");
			gw_respond_error(c, 403, why, false);
			return;
		}
		upstream_connect(c, (struct sockaddr *)&ss, sl);
		return;
	}
	if (!e->dns) {
		gw_respond_error(c, 502, "no resolver configured for upstream names", false);
		return;
	}
	struct evutil_addrinfo hints = { .ai_family = AF_UNSPEC,
					 .ai_socktype = SOCK_STREAM,
					 .ai_protocol = IPPROTO_TCP };
	c->phase = P_RESOLVE;
	bufferevent_disable(c->cbev, EV_READ);
	struct evdns_getaddrinfo_request *rq =
		evdns_getaddrinfo(e->dns, c->host, NULL, &hints, dns_cb, c);
	/* NULL: done already (the callback ran) or failed (it ran too). */
	if (rq)
		c->dns_req = rq;
}

static void up_read_cb(struct bufferevent *bev, void *ud)
{
	struct conn *c = ud;
	if (c->phase == P_FORWARD || c->phase == P_TUNNEL)
		gw_pump_response(c);
	else
		gw_up_free(c); /* bytes no request asked for: the connection is out of step */
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
		struct timeval rt = gw_ms_tv(UPSTREAM_IDLE_MS), wt = gw_ms_tv(CLIENT_WRITE_MS);
		bufferevent_set_timeouts(bev, &rt, &wt);
		int one = 1;
		setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		return;
	}
	/* The upstream ended while a response (or a tunnel) is under way:
	 * what it sent before still goes to the client as the client takes
	 * it; the pump then ends the body (up to the close), cuts it off (a
	 * framed body not complete), or closes the tunnel. */
	if (c->phase == P_TUNNEL || (c->phase == P_FORWARD && c->resp_head_done)) {
		bufferevent_disable(bev, EV_READ | EV_WRITE);
		c->up_gone = (what & BEV_EVENT_EOF) ? 1 : 2;
		c->up_reusable = false;
		gw_pump_response(c);
		return;
	}
	if (c->phase == P_FORWARD && !c->resp_head_done && c->reused && c->retry &&
	    evbuffer_get_length(c->retry) > 0 &&
	    evbuffer_get_length(bufferevent_get_input(bev)) == 0) {
		gw_up_free(c);
		c->up_reusable = c->reused = false;
		/* The head goes again: its bytes count again. */
		uint64_t n = evbuffer_get_length(c->retry);
		if (n > gw_budget_left(c)) {
			gw_budget_cut(c);
			return;
		}
		gw_budget_moved(c, n);
		evbuffer_add_buffer(c->pending, c->retry);
		gw_upstream_start(c);
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
				 e ? "TLS handshake failed" :
				     evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		else
			snprintf(why, sizeof(why), "the upstream closed the connection");
		ERR_clear_error();
		gw_up_free(c);
		gw_respond_error(c, what & BEV_EVENT_TIMEOUT ? 504 : 502, why, false);
		return;
	}
	/* An idle kept-alive upstream went away: forget it. */
	gw_up_free(c);
}

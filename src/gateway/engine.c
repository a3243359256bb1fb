/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's engine: one libevent loop serving the listeners of every
 * attached sandbox. A connection's sandbox is the one whose listener
 * accepted it. Also the sandbox's DNS stub and the control socket (ATTACH
 * frames from the caller, policy generations and egress budgets from root).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>

#include <event2/util.h>
#include <openssl/ssl.h>

#include "common/cleanup.h"
#include "common/ipc.h"
#include "gateway/ca.h"
#include "gateway/decide.h"
#include "gateway/dns.h"
#include "gateway/engine.h"

/* ---- DNS stub ---- */

static bool dns_allow(const char *name, void *ud)
{
	struct gw_sbx *s = ud;
	const struct gw_engine *e = s->e;
	char norm[GW_HOST_MAX + 3];
	bool ip;
	struct gw_verdict v = { .allow = false, .reason = "not a host name a rule can name" };
	if (gw_host_normalize(name, strlen(name), norm, sizeof(norm), &ip) == 0 && !ip)
		gw_decide_tunnel(e->cfg, e->policy, norm, 0, &v);
	if (!v.allow) {
		/* What the sandbox tried to reach, even if it never connects:
		 * the name as asked (its characters are checked by the stub). */
		struct gw_audit_rec r = { .kind = "dns",
					  .decision = "deny",
					  .host = name,
					  .reason = v.reason,
					  .generation = e->policy ? e->policy->generation : 0 };
		gw_audit_write(s, &r);
	}
	return v.allow;
}

static void dns_cb_udp(evutil_socket_t fd, short what, void *ud)
{
	struct gw_sbx *s = ud;
	struct gw_dns_config dc = {
		.ipv4 = { 127, 0, 0, 2 }, .ttl = 60, .allow = dns_allow, .userdata = s
	};
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

static void ctl_req_free(struct gw_ctl_req *q);

static void sandbox_free(struct gw_sbx *s)
{
	struct gw_engine *e = s->e;
	while (s->conns)
		gw_conn_free(s->conns);
	while (s->pool)
		gw_pooled_free(s->pool);
	for (int i = 0; i < 3; i++)
		if (s->listeners[i])
			evconnlistener_free(s->listeners[i]);
	if (s->control)
		evconnlistener_free(s->control);
	while (s->ctl_reqs)
		ctl_req_free(s->ctl_reqs);
	if (s->dns_ev)
		event_free(s->dns_ev);
	if (s->watch_ev)
		event_free(s->watch_ev);
	if (s->dns_fd >= 0)
		close(s->dns_fd);
	if (s->watch_fd >= 0)
		close(s->watch_fd);
	gw_audit_close(s);
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
	s->audit.fd = -1;
	/* No audit, no egress: a sandbox whose log cannot be kept is not served. */
	int audit_rc = gw_audit_init(s, audit_fd);
	if (audit_rc < 0 && audit_fd >= 0)
		close(audit_fd);
	s->dns_fd = l->dns;
	s->watch_fd = watch_pidfd;
	s->next = e->sandboxes;
	e->sandboxes = s;
	int rc = audit_rc;
	for (int i = 0; i < 3; i++) {
		if (fds[i] < 0)
			continue;
		evutil_make_socket_nonblocking(fds[i]);
		s->listeners[i] = evconnlistener_new(e->base, gw_accept_cb, s,
						     LEV_OPT_CLOSE_ON_FREE, -1, fds[i]);
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
		s->control = evconnlistener_new(e->base, control_accept_cb, s,
						LEV_OPT_CLOSE_ON_FREE, -1, l->control);
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
	struct gw_config *next = NULL;
	int r = gw_config_next(e->cfg, "policy", (const char *)text, len, gen, &next, err);
	if (r < 0)
		return r;
	/* Rules, hosts and allow_cidrs change together, between two events:
	 * no decision sees half of a generation. */
	gw_config_free(e->owned_gen);
	e->owned_gen = next;
	e->gen = next;
	e->policy = next->policy;
	/* Idle upstream connections were vetted under the old generation:
	 * none is taken again (gw_upstream_start), so none is kept. */
	for (struct gw_sbx *s = e->sandboxes; s; s = s->next)
		while (s->pool)
			gw_pooled_free(s->pool);
	*ret_gen = gen;
	return 0;
}

static void ctl_req_free(struct gw_ctl_req *q)
{
	for (struct gw_ctl_req **pp = &q->s->ctl_reqs; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	if (q->ev)
		event_free(q->ev);
	close(q->fd);
	free(q);
}

/* A new budget for the sandbox, its counts from zero; the answer is what
 * the old one spent. */
static int set_budget(struct gw_sbx *s, const struct ipc_msg *m, uint8_t *answer,
		      struct al_error *err)
{
	uint64_t max_requests, max_bytes;
	if (gw_budget_decode(m->data, m->len, &max_requests, &max_bytes) < 0)
		return al_error_set(err, -EBADMSG, "malformed budget request");
	gw_budget_encode(s->budget.requests, s->budget.bytes, answer);
	gw_budget_set(&s->budget, max_requests, max_bytes);
	return 0;
}

/* One request per connection on a sandbox's control socket. */
static void ctl_req_cb(evutil_socket_t fd, short what, void *ud)
{
	struct gw_ctl_req *q = ud;
	struct gw_sbx *s = q->s;
	static const struct ipc_type types[] = { { GW_IPC_POLICY, GW_POLICY_TEXT_MAX, 0 },
						 { GW_IPC_BUDGET, GW_BUDGET_FRAME_LEN, 0 } };
	struct ipc_msg m = IPC_MSG_INIT;
	int r = (what & EV_TIMEOUT) ? -ETIMEDOUT : ipc_recv(fd, types, ARRAY_SIZE(types), &m);
	struct al_error err = { 0 };
	uint64_t gen = 0;
	uint8_t used[GW_BUDGET_FRAME_LEN];
	if (r < 0)
		r = al_error_set(&err, r, "bad request on the control socket");
	else if (m.type == GW_IPC_BUDGET)
		r = set_budget(s, &m, used, &err);
	else
		r = set_policy(s->e, m.data, m.len, &gen, &err);
	uint32_t type = m.type;
	ipc_msg_done(&m);
	if (r < 0) {
		const char *msg = al_error_message(&err);
		ipc_send(fd, GW_IPC_ERROR, msg, strlen(msg), NULL, 0);
	} else if (type == GW_IPC_BUDGET) {
		ipc_send(fd, GW_IPC_BUDGET_SET, used, sizeof(used), NULL, 0);
	} else {
		char g[32];
		int n = snprintf(g, sizeof(g), "%" PRIu64, gen);
		ipc_send(fd, GW_IPC_POLICY_SET, g, (size_t)n, NULL, 0);
	}
	ctl_req_free(q);
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
	struct gw_ctl_req *q = calloc(1, sizeof(*q));
	if (!q) {
		close(fd);
		return;
	}
	q->s = s;
	q->fd = fd;
	q->next = s->ctl_reqs;
	s->ctl_reqs = q;
	struct timeval tv = { .tv_sec = 5 };
	q->ev = event_new(s->e->base, fd, EV_READ, ctl_req_cb, q);
	if (!q->ev || event_add(q->ev, &tv) < 0)
		ctl_req_free(q);
}

static void ctl_cb(evutil_socket_t fd, short what, void *ud)
{
	struct gw_engine *e = ud;
	static const struct ipc_type types[] = {
		{ GW_IPC_ATTACH, 1 + GW_SANDBOX_ID_MAX, GW_SLOTS },
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
	struct gw_attach a;
	struct al_error err = { 0 };
	r = gw_attach_decode(&m, &a);
	ipc_msg_done(&m);
	if (r < 0) {
		r = al_error_set(&err, r, "bad ATTACH request");
	} else {
		struct gw_listeners l = {
			.proxy = a.fd[GW_SLOT_PROXY],
			.http = a.fd[GW_SLOT_HTTP],
			.https = a.fd[GW_SLOT_HTTPS],
			.dns = a.fd[GW_SLOT_DNS],
			.control = a.fd[GW_SLOT_CONTROL],
		};
		r = gw_engine_add_sandbox(e, a.id, &l, a.fd[GW_SLOT_AUDIT], a.fd[GW_SLOT_WATCH],
					  &err);
	}
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

/* A boolean sysctl that reads 1 (missing or unreadable: 0). */
static bool sysctl_on(const char *path)
{
	char buf[4] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 && buf[0] == '1';
}

int gw_engine_new(const struct gw_engine_opts *o, struct gw_engine **ret, struct al_error *err)
{
	struct gw_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return al_error_set(err, -ENOMEM, "out of memory");
	e->cfg = o->cfg;
	e->policy = o->cfg->policy;
	e->gen = o->cfg;
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
	/* The host's addresses, while netlink is still allowed. */
	int ar = gw_host_addrs_snapshot(&e->own, &e->n_own);
	e->bind_probe = !sysctl_on("/proc/sys/net/ipv4/ip_nonlocal_bind") &&
			!sysctl_on("/proc/sys/net/ipv6/ip_nonlocal_bind");
	if (ar < 0) {
		X509_STORE_free(o->upstream_store);
		gw_engine_free(e);
		return al_error_set_errno(err, ar, "cannot list the host's addresses");
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
	SSL_CTX_set_cert_cb(e->srv_ctx, gw_cert_cb, e);
	SSL_CTX_set_alpn_select_cb(e->srv_ctx, gw_alpn_cb, e);
	SSL_CTX_set_min_proto_version(e->up_ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(e->up_ctx, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_verify(e->up_ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_cert_store(e->up_ctx, o->upstream_store);
	gw_upstream_ctx_setup(e);
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
	gw_upstream_sessions_free(e);
	if (e->base)
		event_base_free(e->base);
	gw_vault_free(e->vault);
	gw_ca_free(e->ca);
	gw_config_free(e->owned_gen);
	free(e->own);
	free(e->bundle);
	free(e);
}

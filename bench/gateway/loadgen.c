// SPDX-License-Identifier: Apache-2.0
/*
 * The gateway benchmark's load client: one thread, epoll, non-blocking
 * OpenSSL. Every connection goes to the proxy, sends
 * "CONNECT HOST:443 HTTP/1.1", expects a 200, then does TLS with SNI HOST,
 * verifying the certificate against the given CA file only (the proxy's
 * interception CA): a handshake that succeeds proves this proxy made the
 * leaf. With -D it connects to the origin directly (no CONNECT) and verifies
 * against the origin's CA: the no-proxy baseline.
 *
 * Modes (-m):
 *   ka    -c connections, each sends GETs back to back for the whole run.
 *   new   -c connections at a time, each does connect (+CONNECT) + a full
 *         TLS handshake (no session reuse) + one GET, then closes.
 *   idle  opens -n connections (CONNECT + TLS + one GET each, -c at a
 *         time), keeps them all open and idle, samples the memory of the
 *         processes of -p before and after (VmRSS summed, Pss summed), then
 *         sends one more GET on every connection to check they survived.
 *
 * Time: -w warm-up seconds (not counted), then -t measured seconds. Only
 * requests that complete inside the measured window count; their latency
 * (request written to response complete) goes into the percentiles, and in
 * "new" mode also the connection's whole time (connect() to response).
 * CPU: user+system ticks of the process trees of -p (the proxy) and -u (the
 * origin), read from /proc at the window's start and end, and the client's
 * own (getrusage). For the proxy also the time its threads spent on a CPU
 * and waiting for one (schedstat), in % of the window: on-CPU + waiting
 * near 100% per thread means busy (a low rate then means CPU contention),
 * much less means it was idle, waiting for something.
 *
 * Output: one JSON object on stdout. Exit 0 when the run worked (requests
 * were answered, no certificate failed verification), 1 otherwise; other
 * errors are counted in the JSON. Compiled by bench/gateway.sh.
 */
#ifndef _GNU_SOURCE /* also given on the command line, for src/common */
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "common/error.h"
#include "common/parse.h"

#define BUF 16384
#define BODY_LEN 1024

enum state { S_CONNECTING, S_SEND_CONNECT, S_READ_CONNECT, S_TLS, S_SEND_REQ, S_READ_RESP, S_IDLE };

struct conn {
	int fd;
	enum state st;
	SSL *ssl;
	char buf[BUF];
	size_t len;
	size_t sent;
	uint64_t t_conn, t_req;
	int idle_round; /* idle mode: requests done on this connection */
};

/* options */
static const char *mode = "ka", *target, *cafile, *host = "bench.test", *label = "";
static int direct, conc = 16, n_idle = 1000;
static double warm = 0.5, dur = 4;
static char *proxy_pids = "", *upstream_pids = "";

static SSL_CTX *ctx;
static struct sockaddr_in taddr;
static int ep;
static char connect_req[256], get_req[256];
static size_t connect_req_len, get_req_len;

/* results */
static uint64_t *lat_req, *lat_conn;
static size_t n_lat_req, cap_lat_req, n_lat_conn, cap_lat_conn;
static unsigned long n_requests, n_conns, n_errors, n_verify_fail, n_verified, n_total_ok;
static int measuring, done_measuring;
static uint64_t t_start, t0, t1;
static char tls_info[256];
static int n_err_printed;
static int n_idle_open, n_idle_second, n_idle_dead;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void push(uint64_t **a, size_t *n, size_t *cap, uint64_t v)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 65536;
		*a = realloc(*a, *cap * sizeof(**a));
		if (!*a) {
			perror("realloc");
			exit(1);
		}
	}
	(*a)[(*n)++] = v;
}

/* ------------------------------------------------------------ /proc */

struct procinfo {
	int pid, ppid;
};

/* Fields first..first+n-1 of a /proc/PID/stat line (numbered as in proc(5):
 * 3 is the state after "(comm)"), which must be numbers unless first is 3. */
static int stat_fields(const char *line, int first, int n, uint64_t *out)
{
	const char *p = strrchr(line, ')');
	if (!p)
		return -1;
	p++;
	for (int field = 3; field < first + n; field++) {
		if (*p != ' ')
			return -1;
		p++;
		if (field >= first && field != 3) {
			if (parse_u64_prefix(p, &out[field - first], &p) < 0)
				return -1;
		} else {
			p += strcspn(p, " ");
		}
	}
	return 0;
}

/* Fills pids[] with the roots (comma-separated list) and all descendants. */
static int proc_tree(const char *roots, int *pids, int max)
{
	int n = 0;
	char *copy = strdup(roots), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
		if (parse_int_range(t, 1, INT_MAX, &pids[n]) == 0)
			n++;
	free(copy);
	if (n == 0)
		return 0;
	static struct procinfo all[32768];
	int na = 0;
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d && (de = readdir(d)) && na < 32768) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		char path[300], line[1024];
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(line, sizeof(line), f)) {
			uint64_t ppid;
			int pid;
			if (stat_fields(line, 4, 1, &ppid) == 0 && ppid <= INT_MAX &&
			    parse_int_range(de->d_name, 1, INT_MAX, &pid) == 0) {
				all[na].pid = pid;
				all[na].ppid = (int)ppid;
				na++;
			}
		}
		fclose(f);
	}
	if (d)
		closedir(d);
	for (int grew = 1; grew;) {
		grew = 0;
		for (int i = 0; i < na; i++) {
			int in = 0, parent_in = 0;
			for (int j = 0; j < n; j++) {
				if (pids[j] == all[i].pid)
					in = 1;
				if (pids[j] == all[i].ppid)
					parent_in = 1;
			}
			if (!in && parent_in && n < max) {
				pids[n++] = all[i].pid;
				grew = 1;
			}
		}
	}
	return n;
}

/* User+system CPU seconds of the trees under roots. */
static double tree_cpu(const char *roots)
{
	int pids[4096];
	int n = proc_tree(roots, pids, 4096);
	double ticks = 0;
	for (int i = 0; i < n; i++) {
		char path[64], line[2048];
		snprintf(path, sizeof(path), "/proc/%d/stat", pids[i]);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(line, sizeof(line), f)) {
			uint64_t t[2]; /* utime(14), stime(15) */
			if (stat_fields(line, 14, 2, t) == 0)
				ticks += (double)(t[0] + t[1]);
		}
		fclose(f);
	}
	return ticks / (double)sysconf(_SC_CLK_TCK);
}

/* On-CPU and run-queue-wait nanoseconds of every thread of the trees under
 * roots (/proc/PID/task/TID/schedstat): was the proxy busy, starved of CPU
 * by other processes, or idle? */
static void tree_sched(const char *roots, double *oncpu, double *waiting)
{
	int pids[4096];
	int n = proc_tree(roots, pids, 4096);
	*oncpu = *waiting = 0;
	for (int i = 0; i < n; i++) {
		char path[300];
		snprintf(path, sizeof(path), "/proc/%d/task", pids[i]);
		DIR *d = opendir(path);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (!isdigit((unsigned char)de->d_name[0]))
				continue;
			snprintf(path, sizeof(path), "/proc/%d/task/%s/schedstat", pids[i],
				 de->d_name);
			FILE *f = fopen(path, "r");
			char line[128];
			uint64_t a, b;
			const char *p;
			if (f && fgets(line, sizeof(line), f) &&
			    parse_u64_prefix(line, &a, &p) == 0 && *p == ' ' &&
			    parse_u64_prefix(p + 1, &b, &p) == 0) {
				*oncpu += (double)a;
				*waiting += (double)b;
			}
			if (f)
				fclose(f);
		}
		if (d)
			closedir(d);
	}
}

/* The number after "name" (e.g. "VmRSS:     1234 kB") in a /proc file; 0 if absent. */
static long kib_field(const char *path, const char *name)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char line[256];
	uint64_t v = 0;
	size_t nlen = strlen(name);
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, name, nlen) != 0)
			continue;
		const char *p = line + nlen, *end;
		while (*p == ' ' || *p == '\t')
			p++;
		if (parse_u64_prefix(p, &v, &end) < 0 || v > LONG_MAX)
			v = 0;
		break;
	}
	fclose(f);
	return (long)v;
}

/* Summed VmRSS and Pss (KiB) of the trees under roots; returns the process count. */
static int tree_mem(const char *roots, long *rss, long *pss)
{
	int pids[4096];
	int n = proc_tree(roots, pids, 4096);
	*rss = *pss = 0;
	for (int i = 0; i < n; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/status", pids[i]);
		*rss += kib_field(path, "VmRSS:");
		snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pids[i]);
		*pss += kib_field(path, "Pss:");
	}
	return n;
}

/* ------------------------------------------------------------ connections */

static void fail(struct conn *c, const char *what)
{
	n_errors++;
	if (n_err_printed < 5) {
		n_err_printed++;
		unsigned long e = ERR_peek_error();
		char es[256] = "";
		if (e)
			ERR_error_string_n(e, es, sizeof(es));
		fprintf(stderr, "loadgen %s: connection error at %s%s%s%s%s\n", label, what,
			errno ? ": " : "", errno ? al_strerror(errno) : "", es[0] ? ": " : "", es);
	}
	(void)c;
}

static void conn_close(struct conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	if (c->ssl) {
		if (c->st >= S_SEND_REQ)
			SSL_shutdown(c->ssl); /* close_notify; no waiting for the peer's */
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	close(c->fd);
	c->fd = -1;
	ERR_clear_error();
}

static int conn_open(struct conn *c)
{
	memset(c, 0, sizeof(*c));
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		perror("socket");
		exit(1);
	}
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->t_conn = now_ns();
	c->st = S_CONNECTING;
	if (connect(c->fd, (struct sockaddr *)&taddr, sizeof(taddr)) < 0 && errno != EINPROGRESS) {
		fail(c, "connect");
		close(c->fd);
		c->fd = -1;
		return -1;
	}
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP,
				  .data.ptr = c };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
		perror("epoll_ctl");
		exit(1);
	}
	return 0;
}

static void note_tls(SSL *ssl)
{
	if (tls_info[0])
		return;
	X509 *leaf = SSL_get1_peer_certificate(ssl);
	char issuer[128] = "?", key[64] = "?";
	if (leaf) {
		X509_NAME_get_text_by_NID(X509_get_issuer_name(leaf), NID_commonName, issuer,
					  sizeof(issuer));
		EVP_PKEY *pk = X509_get0_pubkey(leaf);
		if (pk)
			snprintf(key, sizeof(key), "%s-%d", OBJ_nid2sn(EVP_PKEY_get_base_id(pk)),
				 EVP_PKEY_get_bits(pk));
		X509_free(leaf);
	}
	for (char *p = issuer; *p; p++)
		if (*p == '"' || *p == '\\' || (unsigned char)*p < 32)
			*p = '_';
	snprintf(tls_info, sizeof(tls_info),
		 "\"tls_version\": \"%s\", \"cipher\": \"%s\", \"leaf_key\": \"%s\", "
		 "\"leaf_issuer_cn\": \"%s\"",
		 SSL_get_version(ssl), SSL_get_cipher_name(ssl), key, issuer);
}

/* Parses a complete HTTP response in c->buf; 1 done, 0 need more, -1 bad. */
static int parse_response(struct conn *c)
{
	char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
	if (!end)
		return c->len >= sizeof(c->buf) ? -1 : 0;
	size_t hlen = (size_t)(end - c->buf) + 4;
	if (c->len < 12 || memcmp(c->buf, "HTTP/1.", 7) != 0 || memcmp(c->buf + 8, " 200", 4) != 0)
		return -1;
	char *cl = memmem(c->buf, hlen, "\nContent-Length:", 16);
	if (!cl)
		cl = memmem(c->buf, hlen, "\ncontent-length:", 16);
	if (!cl)
		return -1;
	const char *v = cl + 16, *vend;
	while (*v == ' ')
		v++;
	uint64_t blen;
	if (parse_u64_prefix(v, &blen, &vend) < 0 || blen != BODY_LEN)
		return -1;
	if (c->len < hlen + (size_t)blen)
		return 0;
	if (c->len > hlen + (size_t)blen)
		return -1; /* nothing was pipelined */
	c->len = 0;
	return 1;
}

static void start_request(struct conn *c)
{
	c->st = S_SEND_REQ;
	c->sent = 0;
	c->len = 0;
	c->t_req = now_ns();
}

/* Drives one connection; returns -1 when it ended (closed), 0 otherwise. */
static int drive(struct conn *c)
{
	for (;;) {
		switch (c->st) {
		case S_CONNECTING: {
			int err = 0;
			socklen_t l = sizeof(err);
			getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
			if (err == EINPROGRESS || err == EALREADY)
				return 0;
			if (err) {
				errno = err;
				fail(c, "connect");
				return -1;
			}
			/* Not yet connected: no error, but no EPOLLOUT yet either. */
			struct sockaddr_in peer;
			socklen_t pl = sizeof(peer);
			if (getpeername(c->fd, (struct sockaddr *)&peer, &pl) < 0)
				return 0;
			c->st = direct ? S_TLS : S_SEND_CONNECT;
			break;
		}
		case S_SEND_CONNECT: {
			ssize_t n = send(c->fd, connect_req + c->sent, connect_req_len - c->sent,
					 MSG_NOSIGNAL);
			if (n < 0) {
				if (errno == EAGAIN)
					return 0;
				fail(c, "sending CONNECT");
				return -1;
			}
			c->sent += (size_t)n;
			if (c->sent == connect_req_len) {
				c->st = S_READ_CONNECT;
				c->len = 0;
			}
			break;
		}
		case S_READ_CONNECT: {
			/* Reads only up to the end of the answer's headers: peeks, then
			 * consumes exactly that much, so no TLS byte is taken. */
			ssize_t n = recv(c->fd, c->buf, sizeof(c->buf) - 1, MSG_PEEK);
			if (n < 0 && errno == EAGAIN)
				return 0;
			if (n <= 0) {
				errno = n == 0 ? ECONNRESET : errno;
				fail(c, "reading the CONNECT answer");
				return -1;
			}
			c->buf[n] = 0;
			char *end = memmem(c->buf, (size_t)n, "\r\n\r\n", 4);
			if (!end) {
				if ((size_t)n >= sizeof(c->buf) - 1) {
					errno = 0;
					fail(c, "CONNECT answer too long");
					return -1;
				}
				return 0; /* edge-triggered: more will come with a new edge */
			}
			size_t hlen = (size_t)(end - c->buf) + 4;
			if (recv(c->fd, c->buf, hlen, 0) != (ssize_t)hlen) {
				fail(c, "reading the CONNECT answer");
				return -1;
			}
			if (memcmp(c->buf, "HTTP/1.", 7) != 0 ||
			    memcmp(c->buf + 8, " 200", 4) != 0) {
				errno = 0;
				c->buf[hlen < 60 ? hlen : 60] = 0;
				fail(c, "CONNECT refused");
				if (n_err_printed <= 5)
					fprintf(stderr, "loadgen %s: answer was: %s\n", label,
						c->buf);
				return -1;
			}
			c->st = S_TLS;
			break;
		}
		case S_TLS: {
			if (!c->ssl) {
				c->ssl = SSL_new(ctx);
				if (!c->ssl) {
					fail(c, "SSL_new");
					return -1;
				}
				SSL_set_fd(c->ssl, c->fd);
				SSL_set_tlsext_host_name(c->ssl, host);
				SSL_set1_host(c->ssl, host);
			}
			int r = SSL_connect(c->ssl);
			if (r <= 0) {
				int e = SSL_get_error(c->ssl, r);
				if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
					return 0;
				long v = SSL_get_verify_result(c->ssl);
				if (v != X509_V_OK) {
					n_verify_fail++;
					if (n_err_printed < 5)
						fprintf(stderr,
							"loadgen %s: certificate verification failed: %s\n",
							label, X509_verify_cert_error_string(v));
				}
				errno = 0;
				fail(c, "TLS handshake");
				return -1;
			}
			if (SSL_get_verify_result(c->ssl) != X509_V_OK) {
				n_verify_fail++;
				errno = 0;
				fail(c, "verification");
				return -1;
			}
			n_verified++;
			note_tls(c->ssl);
			start_request(c);
			break;
		}
		case S_SEND_REQ: {
			size_t nw = 0;
			int r = SSL_write_ex(c->ssl, get_req + c->sent, get_req_len - c->sent, &nw);
			if (!r) {
				int e = SSL_get_error(c->ssl, 0);
				if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
					return 0;
				errno = 0;
				fail(c, "sending GET");
				return -1;
			}
			c->sent += nw;
			if (c->sent == get_req_len)
				c->st = S_READ_RESP;
			break;
		}
		case S_READ_RESP: {
			size_t nr = 0;
			int r = SSL_read_ex(c->ssl, c->buf + c->len, sizeof(c->buf) - c->len, &nr);
			if (!r) {
				int e = SSL_get_error(c->ssl, 0);
				if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
					return 0;
				errno = 0;
				fail(c, "reading the response");
				return -1;
			}
			c->len += nr;
			int p = parse_response(c);
			if (p < 0) {
				errno = 0;
				fail(c, "bad response");
				return -1;
			}
			if (p == 0)
				break;
			uint64_t t = now_ns();
			n_total_ok++;
			if (measuring && t <= t1) {
				n_requests++;
				push(&lat_req, &n_lat_req, &cap_lat_req, t - c->t_req);
				if (strcmp(mode, "new") == 0) {
					n_conns++;
					push(&lat_conn, &n_lat_conn, &cap_lat_conn, t - c->t_conn);
				}
			}
			if (strcmp(mode, "ka") == 0) {
				if (done_measuring)
					return -1;
				start_request(c);
				break;
			}
			if (strcmp(mode, "new") == 0)
				return -1;
			/* idle */
			c->idle_round++;
			if (c->idle_round == 1)
				n_idle_open++;
			else
				n_idle_second++;
			c->st = S_IDLE;
			return 0;
		}
		case S_IDLE: {
			/* Nothing should arrive; EOF or an error means the proxy dropped us. */
			char b[64];
			size_t nr = 0;
			int r = SSL_read_ex(c->ssl, b, sizeof(b), &nr);
			if (!r) {
				int e = SSL_get_error(c->ssl, 0);
				if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
					return 0;
			}
			n_idle_dead++;
			return -1;
		}
		}
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile in microseconds. */
static double pct(uint64_t *a, size_t n, double p)
{
	if (n == 0)
		return -1;
	size_t k = (size_t)((p / 100.0) * (double)n + 0.999999);
	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return (double)a[k - 1] / 1000.0;
}

static double client_cpu(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void usage(void)
{
	fprintf(stderr, "usage: loadgen -a ADDR:PORT -C CAFILE [-D] [-m ka|new|idle] [-c CONC] "
			"[-n IDLE_CONNS] [-w WARM_S] [-t MEASURE_S] [-H HOST] [-p PIDS] [-u PIDS] "
			"[-l LABEL]\n");
	exit(2);
}

static void run_loop(int (*keep_going)(void), void (*tick)(void))
{
	struct epoll_event evs[512];
	while (keep_going()) {
		int n = epoll_wait(ep, evs, 512, 5);
		if (n < 0 && errno != EINTR) {
			perror("epoll_wait");
			exit(1);
		}
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (c->fd < 0)
				continue;
			if (drive(c) < 0) {
				conn_close(c);
			}
		}
		tick();
	}
}

/* --- ka / new --- */
static struct conn *conns;
static int nconns;
static double cpu_proxy0, cpu_up0, cpu_cli0, cpu_proxy1, cpu_up1, cpu_cli1;
static double sched_on0, sched_wait0, sched_on1, sched_wait1;

static int timed_keep_going(void)
{
	if (!done_measuring)
		return 1;
	if (now_ns() > t1 + 5000000000u) {
		fprintf(stderr, "loadgen %s: connections still busy 5 s after the end\n", label);
		return 0;
	}
	for (int i = 0; i < nconns; i++)
		if (conns[i].fd >= 0)
			return 1;
	return 0;
}

static void timed_tick(void)
{
	uint64_t t = now_ns();
	if (!measuring && t >= t0) {
		tree_sched(proxy_pids, &sched_on0, &sched_wait0);
		cpu_proxy0 = tree_cpu(proxy_pids);
		cpu_up0 = tree_cpu(upstream_pids);
		cpu_cli0 = client_cpu();
		measuring = 1;
		t0 = now_ns();
		t1 = t0 + (uint64_t)(dur * 1e9);
	}
	if (measuring && !done_measuring && t >= t1) {
		done_measuring = 1;
		cpu_proxy1 = tree_cpu(proxy_pids);
		tree_sched(proxy_pids, &sched_on1, &sched_wait1);
		cpu_up1 = tree_cpu(upstream_pids);
		cpu_cli1 = client_cpu();
	}
	/* Connections that ended: reopen (new mode, or a ka connection that failed). */
	if (!done_measuring)
		for (int i = 0; i < nconns; i++)
			if (conns[i].fd < 0) {
				if (conn_open(&conns[i]) == 0 && drive(&conns[i]) < 0)
					conn_close(&conns[i]);
			}
	/* Bail out on a proxy that fails every connection. */
	if (n_errors > 1000 && n_total_ok == 0) {
		fprintf(stderr, "loadgen %s: nothing but errors; giving up\n", label);
		exit(1);
	}
}

/* --- idle --- */
static int idle_keep_going_open(void)
{
	int open = 0;
	for (int i = 0; i < nconns; i++)
		if (conns[i].fd >= 0 && conns[i].st != S_IDLE)
			open++;
	return open > 0;
}

static int idle_next; /* next connection to open */
static void idle_tick(void)
{
	int inflight = 0;
	for (int i = 0; i < idle_next; i++)
		if (conns[i].fd >= 0 && conns[i].st != S_IDLE)
			inflight++;
	while (idle_next < nconns && inflight < conc) {
		if (conn_open(&conns[idle_next]) == 0) {
			if (drive(&conns[idle_next]) < 0)
				conn_close(&conns[idle_next]);
			else
				inflight++;
		}
		idle_next++;
	}
	if (n_errors > 100) {
		fprintf(stderr, "loadgen %s: too many errors opening idle connections\n", label);
		exit(1);
	}
}
static int idle_keep_going(void)
{
	return idle_next < nconns || idle_keep_going_open();
}
static uint64_t hold_until;
static int hold_keep_going(void)
{
	return now_ns() < hold_until;
}
static void no_tick(void)
{
}
static int second_keep_going(void)
{
	return now_ns() < hold_until && idle_keep_going_open();
}

int main(int argc, char **argv)
{
	/* clang-format off */
	int opt;
	while ((opt = getopt(argc, argv, "a:C:Dm:c:n:w:t:H:p:u:l:")) != -1) {
		switch (opt) {
		case 'a': target = optarg; break;
		case 'C': cafile = optarg; break;
		case 'D': direct = 1; break;
		case 'm': mode = optarg; break;
		case 'c': if (parse_int_range(optarg, 1, 1 << 20, &conc) < 0) usage(); break;
		case 'n': if (parse_int_range(optarg, 0, 1 << 20, &n_idle) < 0) usage(); break;
		case 'w': if (parse_double_range(optarg, 0, 3600, &warm) < 0) usage(); break;
		case 't': if (parse_double_range(optarg, 0, 86400, &dur) < 0) usage(); break;
		case 'H': host = optarg; break;
		case 'p': proxy_pids = optarg; break;
		case 'u': upstream_pids = optarg; break;
		case 'l': label = optarg; break;
		default: usage();
		}
	}
	/* clang-format on */
	if (!target || !cafile || conc < 1 ||
	    (strcmp(mode, "ka") && strcmp(mode, "new") && strcmp(mode, "idle")))
		usage();
	char *colon = strrchr(target, ':');
	if (!colon)
		usage();
	*colon = 0;
	taddr.sin_family = AF_INET;
	int port;
	if (parse_int_range(colon + 1, 1, 65535, &port) < 0)
		usage();
	taddr.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, target, &taddr.sin_addr) != 1)
		usage();
	*colon = ':';

	struct rlimit rl = { 65536, 65536 };
	setrlimit(RLIMIT_NOFILE, &rl);
	signal(SIGPIPE, SIG_IGN);

	ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx || SSL_CTX_load_verify_locations(ctx, cafile, NULL) != 1) {
		fprintf(stderr, "loadgen: cannot load CA file %s\n", cafile);
		ERR_print_errors_fp(stderr);
		return 1;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	/* Full handshakes only: no session is ever offered again. */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);

	connect_req_len = (size_t)snprintf(connect_req, sizeof(connect_req),
					   "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", host,
					   host);
	get_req_len =
		(size_t)snprintf(get_req, sizeof(get_req),
				 "GET /1k HTTP/1.1\r\nHost: %s\r\nUser-Agent: airlock-bench\r\n"
				 "Accept: */*\r\n\r\n",
				 host);

	ep = epoll_create1(EPOLL_CLOEXEC);
	t_start = now_ns();

	if (strcmp(mode, "idle") == 0) {
		long rss0, pss0, rss1, pss1;
		int np0 = tree_mem(proxy_pids, &rss0, &pss0);
		nconns = n_idle;
		conns = calloc((size_t)nconns, sizeof(*conns));
		for (int i = 0; i < nconns; i++)
			conns[i].fd = -1;
		uint64_t ta = now_ns();
		run_loop(idle_keep_going, idle_tick);
		double open_s = (double)(now_ns() - ta) / 1e9;
		/* Let the proxy settle (helpers, deferred frees), then sample. */
		hold_until = now_ns() + 1000000000u;
		run_loop(hold_keep_going, no_tick);
		int np1 = tree_mem(proxy_pids, &rss1, &pss1);
		int alive = 0;
		for (int i = 0; i < nconns; i++)
			if (conns[i].fd >= 0 && conns[i].st == S_IDLE)
				alive++;
		/* Second request on every surviving connection. */
		for (int i = 0; i < nconns; i++)
			if (conns[i].fd >= 0 && conns[i].st == S_IDLE) {
				start_request(&conns[i]);
				if (drive(&conns[i]) < 0)
					conn_close(&conns[i]);
			}
		hold_until = now_ns() + 20000000000u;
		run_loop(second_keep_going, no_tick);
		long kib = rss1 - rss0;
		printf("{\"label\": \"%s\", \"mode\": \"idle\", \"conns\": %d, \"concurrency\": %d, "
		       "\"opened\": %d, \"alive_after_hold\": %d, \"second_request_ok\": %d, "
		       "\"open_seconds\": %.3f, \"procs_before\": %d, \"procs_after\": %d, "
		       "\"rss_before_kib\": %ld, \"rss_after_kib\": %ld, \"pss_before_kib\": %ld, "
		       "\"pss_after_kib\": %ld, \"rss_per_conn_kib\": %.2f, \"pss_per_conn_kib\": %.2f, "
		       "\"errors\": %lu, \"verify_failures\": %lu, \"verified_handshakes\": %lu, "
		       "\"completed_total\": %lu%s%s}\n",
		       label, nconns, conc, n_idle_open, alive, n_idle_second, open_s, np0, np1,
		       rss0, rss1, pss0, pss1, (double)kib / nconns, (double)(pss1 - pss0) / nconns,
		       n_errors, n_verify_fail, n_verified, n_total_ok, tls_info[0] ? ", " : "",
		       tls_info);
		return (n_verify_fail || n_idle_open == 0) ? 1 : 0;
	}

	/* ka / new */
	nconns = conc;
	conns = calloc((size_t)nconns, sizeof(*conns));
	for (int i = 0; i < nconns; i++)
		conns[i].fd = -1;
	t0 = t_start + (uint64_t)(warm * 1e9);
	t1 = UINT64_MAX;
	run_loop(timed_keep_going, timed_tick);
	double window = (double)(t1 - t0) / 1e9;
	qsort(lat_req, n_lat_req, sizeof(*lat_req), cmp_u64);
	qsort(lat_conn, n_lat_conn, sizeof(*lat_conn), cmp_u64);
	double pcpu = cpu_proxy1 - cpu_proxy0, ucpu = cpu_up1 - cpu_up0, ccpu = cpu_cli1 - cpu_cli0;
	unsigned long units = strcmp(mode, "new") == 0 ? n_conns : n_requests;
	printf("{\"label\": \"%s\", \"mode\": \"%s\", \"direct\": %s, \"concurrency\": %d, "
	       "\"seconds\": %.3f, \"requests\": %lu, \"connections\": %lu, \"rps\": %.1f, "
	       "\"req_p50_ms\": %.4f, \"req_p99_ms\": %.4f, \"conn_p50_ms\": %.4f, "
	       "\"conn_p99_ms\": %.4f, \"proxy_cpu_s\": %.3f, \"upstream_cpu_s\": %.3f, "
	       "\"client_cpu_s\": %.3f, \"proxy_cpu_us_per_unit\": %.2f, "
	       "\"upstream_cpu_us_per_unit\": %.2f, \"client_cpu_us_per_unit\": %.2f, "
	       "\"proxy_oncpu_pct\": %.1f, \"proxy_runqueue_wait_pct\": %.1f, "
	       "\"errors\": %lu, \"verify_failures\": %lu, \"verified_handshakes\": %lu, "
	       "\"completed_total\": %lu%s%s}\n",
	       label, mode, direct ? "true" : "false", conc, window, n_requests, n_conns,
	       (double)n_requests / window, pct(lat_req, n_lat_req, 50) / 1000.0,
	       pct(lat_req, n_lat_req, 99) / 1000.0, pct(lat_conn, n_lat_conn, 50) / 1000.0,
	       pct(lat_conn, n_lat_conn, 99) / 1000.0, pcpu, ucpu, ccpu,
	       units ? pcpu * 1e6 / (double)units : -1, units ? ucpu * 1e6 / (double)units : -1,
	       units ? ccpu * 1e6 / (double)units : -1, (sched_on1 - sched_on0) / (window * 1e7),
	       (sched_wait1 - sched_wait0) / (window * 1e7), n_errors, n_verify_fail, n_verified,
	       n_total_ok, tls_info[0] ? ", " : "", tls_info);
	return (n_verify_fail || n_requests == 0) ? 1 : 0;
}

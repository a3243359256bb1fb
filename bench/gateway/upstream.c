// SPDX-License-Identifier: Apache-2.0
/*
 * The gateway benchmark's origin server: HTTPS (OpenSSL) on one address,
 * epoll, non-blocking, HTTP/1.1 keep-alive. Every request (GET, no body)
 * gets the same answer: 200 with a 1 KiB body and a Content-Length.
 * "Connection: close" in a request closes the connection after the answer.
 *
 * Usage: upstream ADDR PORT CERT KEY [THREADS]
 *   THREADS (default 1) event loops, each with its own SO_REUSEPORT socket.
 * Prints "ready" on stdout once listening. On SIGUSR1 it prints
 * "requests N connections M handshakes H" (totals so far); SIGTERM/SIGINT
 * end it. Compiled by bench/gateway.sh; not part of airlock.
 */
#ifndef _GNU_SOURCE /* also given on the command line, for src/common */
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "common/error.h"
#include "common/parse.h"

#define BODY_LEN 1024
#define RBUF 8192

static SSL_CTX *ctx;
static struct sockaddr_in addr;
static char response[512 + BODY_LEN];
static size_t response_len;
static atomic_ulong n_requests, n_conns, n_handshakes;
static volatile sig_atomic_t want_stats, want_stop;

struct conn {
	int fd;
	SSL *ssl;
	int handshaken;
	char rbuf[RBUF];
	size_t rlen;
	const char *out; /* pending answer bytes (points into `response`) */
	size_t out_left;
	unsigned out_count; /* answers still to write after `out` */
	int close_after;
};

static void die(const char *what)
{
	fprintf(stderr, "upstream: %s: %s\n", what, al_strerror(errno));
	ERR_print_errors_fp(stderr);
	exit(1);
}

static void conn_free(int ep, struct conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	if (c->ssl)
		SSL_free(c->ssl);
	close(c->fd);
	free(c);
}

/* Writes what is pending; 1: all written, 0: would block, -1: error. */
static int flush(struct conn *c)
{
	for (;;) {
		if (c->out_left == 0) {
			if (c->out_count == 0)
				return 1;
			c->out_count--;
			c->out = response;
			c->out_left = response_len;
		}
		int n = SSL_write(c->ssl, c->out, (int)c->out_left);
		if (n <= 0) {
			int e = SSL_get_error(c->ssl, n);
			if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
				return 0;
			return -1;
		}
		c->out += n;
		c->out_left -= (size_t)n;
	}
}

/* Counts the complete requests in rbuf, drops them; -1 on garbage. */
static int take_requests(struct conn *c)
{
	int found = 0;
	for (;;) {
		char *end = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
		if (!end)
			break;
		size_t hlen = (size_t)(end - c->rbuf) + 4;
		if (memmem(c->rbuf, hlen, "\nConnection: close", 18) ||
		    memmem(c->rbuf, hlen, "\nconnection: close", 18))
			c->close_after = 1;
		memmove(c->rbuf, c->rbuf + hlen, c->rlen - hlen);
		c->rlen -= hlen;
		found++;
	}
	if (c->rlen == sizeof(c->rbuf))
		return -1;
	return found;
}

/* Handles readiness; returns -1 when the connection is to be closed. */
static int serve(struct conn *c)
{
	if (!c->handshaken) {
		int r = SSL_accept(c->ssl);
		if (r <= 0) {
			int e = SSL_get_error(c->ssl, r);
			return (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) ? 0 : -1;
		}
		c->handshaken = 1;
		atomic_fetch_add(&n_handshakes, 1);
	}
	for (;;) {
		int f = flush(c);
		if (f < 0)
			return -1;
		if (f == 0)
			return 0;
		if (c->close_after)
			return -1;
		int n = SSL_read(c->ssl, c->rbuf + c->rlen, (int)(sizeof(c->rbuf) - c->rlen));
		if (n <= 0) {
			int e = SSL_get_error(c->ssl, n);
			if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
				return 0;
			return -1; /* EOF, close_notify or error */
		}
		c->rlen += (size_t)n;
		int k = take_requests(c);
		if (k < 0)
			return -1;
		if (k > 0) {
			atomic_fetch_add(&n_requests, (unsigned long)k);
			c->out_count += (unsigned)k;
		}
	}
}

static int listener(void)
{
	int one = 1;
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		die("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
		die("bind");
	if (listen(lfd, 4096) < 0)
		die("listen");
	return lfd;
}

static void *loop(void *arg)
{
	int one = 1;
	int lfd = (int)(intptr_t)arg;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		die("epoll_ctl");
	struct epoll_event evs[256];
	while (!want_stop) {
		int n = epoll_wait(ep, evs, 256, 200);
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		if (want_stats) {
			want_stats = 0;
			printf("requests %lu connections %lu handshakes %lu\n",
			       atomic_load(&n_requests), atomic_load(&n_conns),
			       atomic_load(&n_handshakes));
			fflush(stdout);
		}
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (!c) {
				for (;;) {
					int fd = accept4(lfd, NULL, NULL,
							 SOCK_NONBLOCK | SOCK_CLOEXEC);
					if (fd < 0)
						break;
					setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					c = calloc(1, sizeof(*c));
					if (!c)
						die("calloc");
					c->fd = fd;
					c->ssl = SSL_new(ctx);
					if (!c->ssl)
						die("SSL_new");
					SSL_set_fd(c->ssl, fd);
					atomic_fetch_add(&n_conns, 1);
					struct epoll_event cev = { .events = EPOLLIN | EPOLLOUT |
									     EPOLLET,
								   .data.ptr = c };
					if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev) < 0)
						die("epoll_ctl");
					if (serve(c) < 0)
						conn_free(ep, c);
				}
				continue;
			}
			if (serve(c) < 0)
				conn_free(ep, c);
			ERR_clear_error();
		}
	}
	return NULL;
}

static void on_usr1(int sig)
{
	(void)sig;
	want_stats = 1;
}

static void on_term(int sig)
{
	(void)sig;
	want_stop = 1;
}

int main(int argc, char **argv)
{
	if (argc < 5 || argc > 6) {
		fprintf(stderr, "usage: upstream ADDR PORT CERT KEY [THREADS]\n");
		return 2;
	}
	int threads = 1, port;
	if ((argc == 6 && parse_int_range(argv[5], 1, 64, &threads) < 0) ||
	    parse_int_range(argv[2], 1, 65535, &port) < 0) {
		fprintf(stderr, "upstream: bad port %s or thread count\n", argv[2]);
		return 2;
	}
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
		fprintf(stderr, "upstream: bad address %s\n", argv[1]);
		return 2;
	}
	struct rlimit rl = { 65536, 65536 };
	setrlimit(RLIMIT_NOFILE, &rl);
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = { .sa_handler = on_usr1 };
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, argv[3]) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, argv[4], SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1)
		die("loading the certificate and key");
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
				      SSL_MODE_RELEASE_BUFFERS);

	int hl = snprintf(response, sizeof(response),
			  "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
			  "Cache-Control: no-store\r\nContent-Length: %d\r\n\r\n",
			  BODY_LEN);
	memset(response + hl, 'x', BODY_LEN);
	response_len = (size_t)hl + BODY_LEN;

	pthread_t tids[64];
	int lfds[64];
	for (int i = 0; i < threads; i++)
		lfds[i] = listener();
	for (int i = 1; i < threads; i++)
		if (pthread_create(&tids[i], NULL, loop, (void *)(intptr_t)lfds[i]) != 0)
			die("pthread_create");
	printf("ready\n");
	fflush(stdout);
	loop((void *)(intptr_t)lfds[0]);
	for (int i = 1; i < threads; i++)
		pthread_join(tids[i], NULL);
	printf("requests %lu connections %lu handshakes %lu\n", atomic_load(&n_requests),
	       atomic_load(&n_conns), atomic_load(&n_handshakes));
	return 0;
}

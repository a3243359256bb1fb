/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "gateway/http.h"

/* Parses s (len bytes) from an exact-size copy, so a sanitized build sees
 * any read past the end. When more bytes are needed *ret must be untouched. */
static int parse_len(const char *s, size_t len, struct gw_http_request *ret, const char **base)
{
	static struct gw_http_request sentinel;
	_cleanup_free_ char *exact = malloc(len ? len : 1);
	assert_non_null(exact);
	if (len > 0)
		memcpy(exact, s, len);
	memset(&sentinel, 0xa5, sizeof(sentinel));
	memcpy(ret, &sentinel, sizeof(*ret));
	int r = gw_http_parse_request(exact, len, ret);
	if (r == 0) {
		assert_memory_equal(ret, &sentinel, sizeof(*ret));
		return r;
	}
	if (r < 0) {
		/* What was parsed before the refusal: views into the buffer
		 * or empty, nothing else. */
		const struct sv spans[] = { ret->method, ret->target, ret->authority, ret->path,
					    ret->host };
		for (size_t i = 0; i < sizeof(spans) / sizeof(spans[0]); i++)
			if (spans[i].len)
				assert_true(spans[i].p >= exact &&
					    spans[i].p + spans[i].len <= exact + len);
		assert_true(ret->n_fields <= GW_HTTP_MAX_FIELDS);
		memcpy(ret, &sentinel, sizeof(*ret));
		return r;
	}
	/* Rebase the spans onto s, which outlives exact. */
	const char *b = exact;
#define REBASE(sp)                                 \
	do {                                       \
		if ((sp).p)                        \
			(sp).p = s + ((sp).p - b); \
	} while (0)
	REBASE(ret->method);
	REBASE(ret->target);
	REBASE(ret->authority);
	REBASE(ret->path);
	REBASE(ret->host);
	for (size_t i = 0; i < ret->n_fields; i++) {
		REBASE(ret->fields[i].name);
		REBASE(ret->fields[i].value);
	}
#undef REBASE
	if (base)
		*base = s;
	return r;
}

/* Every strict prefix needs more bytes; the whole head (and the head with
 * body bytes after it) is accepted with the same result. */
static void ok_len(const char *s, size_t len, struct gw_http_request *req)
{
	struct gw_http_request tmp;
	for (size_t k = 0; k < len; k++) {
		int r = parse_len(s, k, &tmp, NULL);
		if (r != 0)
			print_error("prefix %zu of \"%.*s\": got %d, want 0\n", k, (int)len, s, r);
		assert_int_equal(r, 0);
	}
	int r = parse_len(s, len, req, NULL);
	if (r != 1)
		print_error("head \"%.*s\": got %d, want 1\n", (int)len, s, r);
	assert_int_equal(r, 1);
	assert_int_equal(req->head_len, len);

	_cleanup_free_ char *more = malloc(len + 5);
	assert_non_null(more);
	memcpy(more, s, len);
	memcpy(more + len, "hello", 5);
	assert_int_equal(parse_len(more, len + 5, &tmp, NULL), 1);
	assert_int_equal(tmp.head_len, len);
	assert_int_equal(tmp.body, req->body);
	assert_int_equal(tmp.n_fields, req->n_fields);
}

static void ok(const char *s, struct gw_http_request *req)
{
	ok_len(s, strlen(s), req);
}

/* Refused with want; and once refused, refused the same with more bytes. */
static void bad_len(const char *s, size_t len, int want)
{
	struct gw_http_request tmp;
	int r = parse_len(s, len, &tmp, NULL);
	if (r != want)
		print_error("head \"%.*s\": got %d, want %d\n", (int)len, s, r, want);
	assert_int_equal(r, want);
	_cleanup_free_ char *more = malloc(len + 4);
	assert_non_null(more);
	memcpy(more, s, len);
	memcpy(more + len, "\r\n\r\n", 4);
	assert_int_equal(parse_len(more, len + 4, &tmp, NULL), want);
}

static void bad(const char *s, int want)
{
	bad_len(s, strlen(s), want);
}

static void span_is(struct sv sp, const char *want)
{
	if (!want) {
		assert_int_equal(sp.len, 0);
		return;
	}
	if (sp.len != strlen(want) || memcmp(sp.p, want, sp.len) != 0)
		print_error("span \"%.*s\", want \"%s\"\n", (int)sp.len, sp.p ? sp.p : "", want);
	assert_int_equal(sp.len, strlen(want));
	assert_memory_equal(sp.p, want, sp.len);
}

static void test_get(void **state)
{
	struct gw_http_request req;
	ok("GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n", &req);
	span_is(req.method, "GET");
	span_is(req.target, "/a/b?c=d");
	span_is(req.path, "/a/b?c=d");
	span_is(req.authority, NULL);
	span_is(req.host, "example.com");
	assert_int_equal(req.form, GW_FORM_ORIGIN);
	assert_int_equal(req.n_fields, 2);
	span_is(req.fields[0].name, "Host");
	span_is(req.fields[1].name, "Accept");
	span_is(req.fields[1].value, "*/*");
	assert_int_equal(req.body, GW_BODY_NONE);
	assert_int_equal(req.content_length, 0);
	assert_false(req.connection_close);
	assert_false(req.upgrade);

	/* OWS trimmed, empty values kept, names as received. */
	ok("GET / HTTP/1.1\r\nhOsT:\t example.com:8080 \t\r\nX-Empty:\r\nX-Sp:   \r\n"
	   "X-In: a  b\r\n\r\n",
	   &req);
	span_is(req.host, "example.com:8080");
	span_is(req.fields[0].name, "hOsT");
	span_is(req.fields[1].value, "");
	span_is(req.fields[2].value, "");
	span_is(req.fields[3].value, "a  b");

	ok("GET / HTTP/1.0\r\nHost: 10.0.0.1\r\n\r\n", &req);
	/* No keep-alive on HTTP/1.0. */
	assert_true(req.connection_close);
	ok("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", &req);
	span_is(req.host, "[::1]:80");
	ok("OPTIONS /x HTTP/1.1\r\nHost: a\r\n\r\n", &req);
	ok("PROPFIND /dav/ HTTP/1.1\r\nHost: a\r\n\r\n", &req);
	span_is(req.method, "PROPFIND");
	/* Everything VCHAR in a value. */
	ok("GET / HTTP/1.1\r\nHost: a\r\nX: !\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~\r\n\r\n",
	   &req);
}

static void test_post_length(void **state)
{
	struct gw_http_request req;
	ok("POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\n", &req);
	assert_int_equal(req.body, GW_BODY_LENGTH);
	assert_int_equal(req.content_length, 5);
	ok("POST / HTTP/1.1\r\nHost: a\r\ncontent-length:0\r\n\r\n", &req);
	assert_int_equal(req.body, GW_BODY_LENGTH);
	assert_int_equal(req.content_length, 0);
	ok("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551615\r\n\r\n", &req);
	assert_true(req.content_length == UINT64_MAX);
	ok("POST / HTTP/1.0\r\nHost: a\r\nContent-Length: 7\r\n\r\n", &req);
	assert_int_equal(req.content_length, 7);
}

static void test_post_chunked(void **state)
{
	struct gw_http_request req;
	ok("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", &req);
	assert_int_equal(req.body, GW_BODY_CHUNKED);
	assert_int_equal(req.content_length, 0);
	ok("POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: CHUNKED\r\n\r\n", &req);
	assert_int_equal(req.body, GW_BODY_CHUNKED);
	/* A tab is OWS. */
	ok("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\t\r\n\r\n", &req);
	assert_int_equal(req.body, GW_BODY_CHUNKED);
}

static void test_connect(void **state)
{
	struct gw_http_request req;
	/* HTTP/1.0 clients (urllib, pip) send CONNECT and absolute-form
	 * without Host; origin-form still needs it, and so does HTTP/1.1. */
	ok("CONNECT example.com:443 HTTP/1.0\r\n\r\n", &req);
	assert_int_equal(req.host.len, 0);
	ok("GET http://example.com/ HTTP/1.0\r\n\r\n", &req);
	assert_int_equal(gw_http_parse_request("GET / HTTP/1.0\r\n\r\n", 18, NULL), -400);
	assert_int_equal(gw_http_parse_request("CONNECT a:1 HTTP/1.1\r\n\r\n", 24, NULL), -400);
	ok("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", &req);
	assert_int_equal(req.form, GW_FORM_AUTHORITY);
	span_is(req.authority, "example.com:443");
	span_is(req.target, "example.com:443");
	span_is(req.path, NULL);
	ok("CONNECT [2001:db8::1]:8443 HTTP/1.1\r\nHost: [2001:DB8::1]:8443\r\n\r\n", &req);
	span_is(req.authority, "[2001:db8::1]:8443");
	ok("CONNECT a:1 HTTP/1.1\r\nHost: A:1\r\n\r\n", &req);
	ok("CONNECT a:65535 HTTP/1.1\r\nHost: a:65535\r\n\r\n", &req);

	static const char *const refused[] = {
		"CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"CONNECT example.com: HTTP/1.1\r\nHost: example.com:\r\n\r\n",
		"CONNECT example.com:0 HTTP/1.1\r\nHost: example.com:0\r\n\r\n",
		"CONNECT example.com:65536 HTTP/1.1\r\nHost: example.com:65536\r\n\r\n",
		"CONNECT example.com:100000 HTTP/1.1\r\nHost: example.com:100000\r\n\r\n",
		"CONNECT example.com:0443 HTTP/1.1\r\nHost: example.com:0443\r\n\r\n",
		"CONNECT example.com:+443 HTTP/1.1\r\nHost: example.com:+443\r\n\r\n",
		"CONNECT example.com:44a HTTP/1.1\r\nHost: example.com:44a\r\n\r\n",
		"CONNECT :443 HTTP/1.1\r\nHost: :443\r\n\r\n",
		"CONNECT user@example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"CONNECT /a HTTP/1.1\r\nHost: a\r\n\r\n",
		"CONNECT http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"CONNECT [::1 HTTP/1.1\r\nHost: a\r\n\r\n",
		"CONNECT [::1%eth0]:443 HTTP/1.1\r\nHost: [::1%eth0]:443\r\n\r\n",
		"CONNECT []:443 HTTP/1.1\r\nHost: []:443\r\n\r\n",
		"CONNECT ::1:443 HTTP/1.1\r\nHost: ::1:443\r\n\r\n",
		"CONNECT a:443:443 HTTP/1.1\r\nHost: a:443:443\r\n\r\n",
		/* Host must name the same place. */
		"CONNECT a.com:443 HTTP/1.1\r\nHost: b.com:443\r\n\r\n",
		"CONNECT a.com:8443 HTTP/1.1\r\nHost: a.com\r\n\r\n",
		"CONNECT a.com:443 HTTP/1.1\r\nHost: b.com\r\n\r\n",
		"CONNECT a.com:443 HTTP/1.1\r\nHost: a.co\r\n\r\n",
		"CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:80\r\n\r\n",
		"CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]\r\n\r\n",
		"CONNECT a.com:443 HTTP/1.1\r\n\r\n",
		/* Only CONNECT may leave the default port out of Host. */
		"GET http://a.com:80/ HTTP/1.1\r\nHost: a.com\r\n\r\n",
		/* No body on CONNECT. */
		"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nContent-Length: 0\r\n\r\n",
		"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nTransfer-Encoding: chunked\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i], -400);

	/* Node's proxy agent (undici): Host without the target's default
	 * port (RFC 9110 7.2). */
	ok("CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com\r\n"
	   "Connection: keep-alive\r\n\r\n",
	   &req);
	span_is(req.authority, "api.example.com:443");
	span_is(req.host, "api.example.com");
	ok("CONNECT a.com:80 HTTP/1.1\r\nHost: A.com\r\n\r\n", &req);
	ok("CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n", &req);
}

/* Methods are case-sensitive tokens; one the gateway does not know could
 * frame a response differently from the upstream ("head" is HEAD to some
 * servers: no body), so it is refused, and so is TRACE (an echo). */
static void test_methods(void **state)
{
	static const char *const known[] = { "GET",	  "HEAD",   "POST",    "PUT",
					     "DELETE",	  "PATCH",  "OPTIONS", "PROPFIND",
					     "PROPPATCH", "MKCOL",  "COPY",    "MOVE",
					     "LOCK",	  "UNLOCK", "REPORT",  "MKCALENDAR",
					     "SEARCH" };
	char head[128];
	struct gw_http_request req;
	for (size_t i = 0; i < ARRAY_SIZE(known); i++) {
		snprintf(head, sizeof(head), "%s /x HTTP/1.1\r\nHost: a\r\n\r\n", known[i]);
		ok(head, &req);
		span_is(req.method, known[i]);
	}
	static const char *const unknown[] = {
		"head",	 "Head", "get", "post", "connect", "TRACE", "trace", "M-S.E!#$%&'*+^_`|~",
		"HEADX", "GETS", "PRI", "BREW",
	};
	for (size_t i = 0; i < ARRAY_SIZE(unknown); i++) {
		snprintf(head, sizeof(head), "%s /x HTTP/1.1\r\nHost: a\r\n\r\n", unknown[i]);
		bad(head, -501);
		/* What was parsed still names the method, for the audit line. */
		struct gw_http_request partial;
		assert_int_equal(gw_http_parse_request(head, strlen(head), &partial), -501);
		span_is(partial.method, unknown[i]);
	}
	bad("connect a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", -501);
}

/* A refused head still tells what it was: method, target and Host when
 * they came before the refusal. */
static void test_refusal_keeps_what_was_parsed(void **state)
{
	const char *h = "GET /secret/path?q=1 HTTP/1.1\r\nHost: evil.example\r\n"
			"Content-Length: 1\r\nContent-Length: 1\r\n\r\n";
	struct gw_http_request req;
	assert_int_equal(gw_http_parse_request(h, strlen(h), &req), -400);
	span_is(req.method, "GET");
	span_is(req.target, "/secret/path?q=1");
	span_is(req.path, "/secret/path?q=1");
	span_is(req.host, "evil.example");
	const char *c = "CONNECT a.com:443 HTTP/1.1\r\nHost: b.com\r\n\r\n";
	assert_int_equal(gw_http_parse_request(c, strlen(c), &req), -400);
	span_is(req.method, "CONNECT");
	span_is(req.authority, "a.com:443");
}

static void test_absolute(void **state)
{
	struct gw_http_request req;
	ok("GET http://example.com/a?b HTTP/1.1\r\nHost: example.com\r\n\r\n", &req);
	assert_int_equal(req.form, GW_FORM_ABSOLUTE);
	span_is(req.authority, "example.com");
	span_is(req.path, "/a?b");
	span_is(req.host, "example.com");
	ok("GET HTTP://Example.COM:8080/ HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", &req);
	span_is(req.authority, "Example.COM:8080");
	span_is(req.path, "/");
	ok("GET http://[::1]:8080/x HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", &req);
	span_is(req.authority, "[::1]:8080");

	static const char *const refused[] = {
		"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET http:/example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET http:// HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET http:/// HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET http://example.com?a HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET http://user@example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET http://user@example.com/ HTTP/1.1\r\nHost: user@example.com\r\n\r\n",
		"GET http://a%2eb/ HTTP/1.1\r\nHost: a%2eb\r\n\r\n",
		"GET http://example.com:/ HTTP/1.1\r\nHost: example.com:\r\n\r\n",
		/* Host must match the authority. */
		"GET http://example.com/ HTTP/1.1\r\nHost: evil.com\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com:80\r\n\r\n",
		"GET http://example.com:80/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com.\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\n\r\n",
		"GET example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET example.com:80 HTTP/1.1\r\nHost: example.com:80\r\n\r\n",
		"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i], -400);
}

static void test_connection(void **state)
{
	struct gw_http_request req;
	ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", &req);
	assert_true(req.connection_close);
	assert_false(req.upgrade);
	ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, CLOSE\r\n\r\n", &req);
	assert_true(req.connection_close);
	ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", &req);
	assert_false(req.connection_close);
	ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n", &req);
	assert_false(req.connection_close);
	ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", &req);
	assert_true(req.upgrade);
	assert_false(req.connection_close);
	ok("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: ,upgrade ,\t close\r\n\r\n",
	   &req);
	assert_true(req.upgrade);
	assert_true(req.connection_close);
	ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", &req);
	assert_false(req.upgrade);
	ok("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", &req);
	assert_false(req.upgrade);
	ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: upgrade\r\n"
	   "Upgrade: h2c\r\n\r\n",
	   &req);
	assert_true(req.upgrade);
	bad("GET / HTTP/1.1\r\nHost: a\r\nConnection: close;x\r\n\r\n", -400);
	bad("GET / HTTP/1.1\r\nHost: a\r\nConnection: close keep-alive\r\n\r\n", -400);
	bad("GET / HTTP/1.1\r\nHost: a\r\nConnection: \"close\"\r\n\r\n", -400);
}

/* Every refusal the header lists, with its status. */
static void test_refusals(void **state)
{
	static const struct {
		const char *head;
		int want;
	} cases[] = {
		/* Bare CR or LF, anywhere. */
		{ "GET / HTTP/1.1\nHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\rHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\n\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\n\r\r", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: a\nb\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX\r\n\r\n", -400 },
		{ "GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		/* obs-fold, and whitespace before the first field. */
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n\tb\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\n Host: a\r\n\r\n", -400 },
		/* Control bytes and obs-text in the request line. */
		{ "GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET /\x80 HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET /\tHTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		/* Field names: tokens, no space before the colon. */
		{ "GET / HTTP/1.1\r\nHost : a\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX Y: 1\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX(: 1\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX\"Y: 1\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\n: 1\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX\x80: 1\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX/Y: 1\r\n\r\n", -400 },
		/* Field values: CTL other than tab, DEL, obs-text. */
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: a\x01\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: a\x1f\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: \x80\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\r\n\r\n", -400 },
		/* Method, target, version. */
		{ "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ " / HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ " GET / HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET / x HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET /  HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", -400 },
		{ "GET HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET\r\nHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/2.0\r\nHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/1.2\r\nHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/0.9\r\nHost: a\r\n\r\n", -400 },
		{ "GET / http/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/1.10\r\nHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/1\r\nHost: a\r\n\r\n", -400 },
		{ "GET /\r\n\r\n", -400 },
		/* Host: exactly one, a plain authority. */
		{ "GET / HTTP/1.1\r\n\r\n", -400 },
		{ "GET / HTTP/1.0\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost:\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a, b\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", -400 },
		{ "GET / HTTP/1.1\r\nHost: a:0\r\n\r\n", -400 },
		/* Content-Length: 1*DIGIT, once, not with Transfer-Encoding. */
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5 5\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5.0\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 05\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551616\r\n\r\n",
		  -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
		  -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
		  -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n",
		  -400 },
		/* Transfer-Encoding: exactly "chunked", once. */
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
		  -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
		  "Transfer-Encoding: chunked\r\n\r\n",
		  -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", -400 },
		/* Both framings. */
		{ "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		  -400 },
		{ "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		  -400 },
		/* Transfer-Encoding on HTTP/1.0, whatever it says. */
		{ "POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", -501 },
		{ "POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", -501 },
		{ "POST / HTTP/1.0\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		  -501 },
		/* Target forms. */
		{ "GET a HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET ?a HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
		{ "GET a:80 HTTP/1.1\r\nHost: a:80\r\n\r\n", -400 },
		{ "POST a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", -400 },
		{ "GET * HTTP/1.1\r\nHost: a\r\n\r\n", -400 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		bad(cases[i].head, cases[i].want);

	/* NUL anywhere. */
	static const char nul_line[] = "GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n";
	bad_len(nul_line, sizeof(nul_line) - 1, -400);
	static const char nul_value[] = "GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n";
	bad_len(nul_value, sizeof(nul_value) - 1, -400);
	static const char nul_name[] = "GET / HTTP/1.1\r\nHost: a\r\nX\0: b\r\n\r\n";
	bad_len(nul_name, sizeof(nul_name) - 1, -400);
	static const char nul_host[] = "GET / HTTP/1.1\r\nHost: a\0.evil\r\n\r\n";
	bad_len(nul_host, sizeof(nul_host) - 1, -400);
}

/* The payloads request smuggling is made of. */
static void test_smuggling(void **state)
{
	static const char *const refused[] = {
		/* CL.TE and TE.CL. */
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 13\r\nTransfer-Encoding: chunked\r\n\r\n"
		"0\r\n\r\nSMUGGLED",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
		"8\r\nSMUGGLED\r\n0\r\n\r\n",
		/* TE.TE: obfuscated codings. */
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunkedx\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\n Transfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ch unked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\x0b\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\x0c\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer_Encoding: chunked\r\nContent-Length: 5\r\n"
		"Content-Length: 6\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \xc2\xa0"
		"chunked\r\n\r\n",
		/* Content-Length variants. */
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n Content-Length: 6\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n 5\r\n\r\n",
		/* Bare LF lines and obs-fold. */
		"POST / HTTP/1.1\nHost: a\nContent-Length: 5\n\n",
		"POST / HTTP/1.1\r\nHost: a\nContent-Length: 5\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nX: a\nContent-Length: 5\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nX: a\rContent-Length: 5\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
		/* Request-line injection. */
		"GET / HTTP/1.1 x\r\nHost: a\r\n\r\n",
		"GET /\nHost: evil HTTP/1.1\r\nHost: a\r\n\r\n",
		/* Two hosts. */
		"GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i], -400);
	static const char nul_te[] =
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\0\r\n\r\n";
	bad_len(nul_te, sizeof(nul_te) - 1, -400);

	/* A tab is OWS, so this is plain chunked. */
	struct gw_http_request req;
	ok("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\n\r\n", &req);
	assert_int_equal(req.body, GW_BODY_CHUNKED);
	/* And the body after the head is not looked at. */
	static const char h[] = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n";
	static const char withbody[] = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n"
				       "\r\n\nGET /x HTTP/1.1\r\n\r\n";
	assert_int_equal(parse_len(withbody, sizeof(withbody) - 1, &req, NULL), 1);
	assert_int_equal(req.head_len, sizeof(h) - 1);
}

/* Builds "GET <target of n bytes> HTTP/1.1" so that the request line is
 * exactly line_len bytes, followed by the rest. */
static char *request_with_line(size_t line_len, const char *rest, size_t *ret_len)
{
	const size_t fixed = strlen("GET  HTTP/1.1");
	assert_true(line_len > fixed + 1);
	size_t rl = strlen(rest);
	char *s = malloc(line_len + 2 + rl + 1);
	assert_non_null(s);
	memcpy(s, "GET /", 5);
	memset(s + 5, 'a', line_len - fixed - 1);
	memcpy(s + line_len - 9, " HTTP/1.1", 9);
	memcpy(s + line_len, "\r\n", 2);
	memcpy(s + line_len + 2, rest, rl + 1);
	*ret_len = line_len + 2 + rl;
	return s;
}

static void test_line_limit(void **state)
{
	struct gw_http_request req;
	size_t len;
	_cleanup_free_ char *at = request_with_line(GW_HTTP_LINE_MAX, "Host: a\r\n\r\n", &len);
	assert_int_equal(parse_len(at, len, &req, NULL), 1);
	assert_int_equal(req.target.len, GW_HTTP_LINE_MAX - strlen("GET  HTTP/1.1"));
	/* At the limit and without the CR yet: more may come. */
	assert_int_equal(parse_len(at, GW_HTTP_LINE_MAX, &req, NULL), 0);
	assert_int_equal(parse_len(at, GW_HTTP_LINE_MAX + 1, &req, NULL), 0);

	_cleanup_free_ char *past =
		request_with_line(GW_HTTP_LINE_MAX + 1, "Host: a\r\n\r\n", &len);
	assert_int_equal(parse_len(past, len, &req, NULL), -414);
	/* Refused as soon as the line is too long, without a CRLF. */
	assert_int_equal(parse_len(past, GW_HTTP_LINE_MAX + 1, &req, NULL), -414);
	assert_int_equal(parse_len(past, GW_HTTP_LINE_MAX, &req, NULL), 0);

	/* A long line of garbage is too long before it is anything else. */
	_cleanup_free_ char *junk = malloc(GW_HTTP_HEAD_MAX);
	assert_non_null(junk);
	memset(junk, 'x', GW_HTTP_HEAD_MAX);
	assert_int_equal(parse_len(junk, GW_HTTP_LINE_MAX, &req, NULL), 0);
	assert_int_equal(parse_len(junk, GW_HTTP_LINE_MAX + 1, &req, NULL), -414);
	assert_int_equal(parse_len(junk, GW_HTTP_HEAD_MAX, &req, NULL), -414);
}

/* "GET / HTTP/1.1\r\nHost: a\r\n" and one "X: vvv" field filling the head to
 * exactly total bytes. */
static char *head_of_size(size_t total)
{
	static const char start[] = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
	static const char end[] = "\r\n\r\n";
	size_t fixed = sizeof(start) - 1 + sizeof(end) - 1;
	assert_true(total > fixed);
	char *s = malloc(total);
	assert_non_null(s);
	memcpy(s, start, sizeof(start) - 1);
	memset(s + sizeof(start) - 1, 'v', total - fixed);
	memcpy(s + total - 4, end, 4);
	return s;
}

static void test_head_limit(void **state)
{
	struct gw_http_request req;
	_cleanup_free_ char *at = head_of_size(GW_HTTP_HEAD_MAX);
	assert_int_equal(parse_len(at, GW_HTTP_HEAD_MAX, &req, NULL), 1);
	assert_int_equal(req.head_len, GW_HTTP_HEAD_MAX);
	assert_int_equal(parse_len(at, GW_HTTP_HEAD_MAX - 1, &req, NULL), 0);
	assert_int_equal(parse_len(at, GW_HTTP_HEAD_MAX - 2, &req, NULL), 0);

	_cleanup_free_ char *past = head_of_size(GW_HTTP_HEAD_MAX + 1);
	assert_int_equal(parse_len(past, GW_HTTP_HEAD_MAX + 1, &req, NULL), -431);
	/* The final CRLF cannot fit any more: refused before the LF. */
	assert_int_equal(parse_len(past, GW_HTTP_HEAD_MAX, &req, NULL), -431);
	assert_int_equal(parse_len(past, GW_HTTP_HEAD_MAX - 1, &req, NULL), 0);

	/* A value that just keeps coming: once GW_HTTP_HEAD_MAX bytes are
	 * there without the end of the head, it cannot end in time. */
	_cleanup_free_ char *big = head_of_size(GW_HTTP_HEAD_MAX + 100);
	assert_int_equal(parse_len(big, GW_HTTP_HEAD_MAX - 1, &req, NULL), 0);
	assert_int_equal(parse_len(big, GW_HTTP_HEAD_MAX, &req, NULL), -431);
	assert_int_equal(parse_len(big, GW_HTTP_HEAD_MAX + 1, &req, NULL), -431);
	assert_int_equal(parse_len(big, GW_HTTP_HEAD_MAX + 50, &req, NULL), -431);
}

/* A head with n fields (Host and n - 1 "X: 1"). */
static char *head_with_fields(size_t n, size_t *ret_len)
{
	static const char start[] = "GET / HTTP/1.1\r\nHost: a\r\n";
	static const char field[] = "X: 1\r\n";
	size_t len = sizeof(start) - 1 + (n - 1) * (sizeof(field) - 1) + 2;
	char *s = malloc(len);
	assert_non_null(s);
	size_t k = 0;
	memcpy(s, start, sizeof(start) - 1);
	k += sizeof(start) - 1;
	for (size_t i = 1; i < n; i++) {
		memcpy(s + k, field, sizeof(field) - 1);
		k += sizeof(field) - 1;
	}
	memcpy(s + k, "\r\n", 2);
	*ret_len = len;
	return s;
}

static void test_field_limit(void **state)
{
	struct gw_http_request req;
	size_t len;
	_cleanup_free_ char *at = head_with_fields(GW_HTTP_MAX_FIELDS, &len);
	assert_int_equal(parse_len(at, len, &req, NULL), 1);
	assert_int_equal(req.n_fields, GW_HTTP_MAX_FIELDS);
	span_is(req.fields[GW_HTTP_MAX_FIELDS - 1].name, "X");

	_cleanup_free_ char *past = head_with_fields(GW_HTTP_MAX_FIELDS + 1, &len);
	assert_int_equal(parse_len(past, len, &req, NULL), -431);
	/* Refused at the first byte of the extra field ("X: 1\r\n\r\n" is
	 * the last 8 bytes)... */
	assert_int_equal(parse_len(past, len - 7, &req, NULL), -431);
	/* ...not before it. */
	assert_int_equal(parse_len(past, len - 8, &req, NULL), 0);
}

static void test_incremental(void **state)
{
	/* Bytes arriving one at a time: 0 until the head is whole, then the
	 * same head; refusals stay refusals. */
	static const char good[] =
		"POST http://h.example:81/p?q HTTP/1.1\r\nHost: H.example:81\r\n"
		"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello";
	struct gw_http_request req, one;
	size_t head = strstr(good, "\r\n\r\n") - good + 4;
	ok_len(good, head, &one);
	for (size_t k = head; k < sizeof(good); k++) {
		assert_int_equal(parse_len(good, k, &req, NULL), 1);
		assert_int_equal(req.head_len, head);
		assert_int_equal(req.body, GW_BODY_CHUNKED);
		assert_true(req.connection_close);
		span_is(req.authority, "h.example:81");
		span_is(req.path, "/p?q");
	}

	static const char refused[] = "GET / HTTP/1.1\r\nHost: a\r\nX: a\nb\r\n\r\n";
	size_t at = strchr(refused, '\n') - refused;
	at = strchr(refused + at + 1, '\n') - refused;
	at = strchr(refused + at + 1, '\n') - refused;
	for (size_t k = 0; k <= sizeof(refused) - 1; k++)
		assert_int_equal(parse_len(refused, k, &req, NULL), k <= at ? 0 : -400);

	/* A CR at the end of the buffer waits for its LF. */
	assert_int_equal(parse_len("GET / HTTP/1.1\r", 15, &req, NULL), 0);
	assert_int_equal(parse_len("GET / HTTP/1.1\r\nHost: a\r", 24, &req, NULL), 0);
	assert_int_equal(parse_len("GET / HTTP/1.1\r\nHost: a\r\n\r", 26, &req, NULL), 0);
	assert_int_equal(parse_len("", 0, &req, NULL), 0);
	assert_int_equal(gw_http_parse_request(NULL, 0, &req), 0);
}

static void test_span_eq_ci(void **state)
{
	struct sv s = { "Chunked", 7 };
	assert_true(sv_equal_ci_cstr(s, "chunked"));
	assert_true(sv_equal_ci_cstr(s, "CHUNKED"));
	assert_false(sv_equal_ci_cstr(s, "chunke"));
	assert_false(sv_equal_ci_cstr(s, "chunkedx"));
	assert_false(sv_equal_ci_cstr((struct sv){ "Chunked", 6 }, "chunked"));
	assert_true(sv_equal_ci_cstr((struct sv){ NULL, 0 }, ""));
	assert_false(sv_equal_ci_cstr((struct sv){ NULL, 0 }, "a"));
	assert_false(sv_equal_ci_cstr(s, NULL));
	/* ASCII only: no locale folding of other bytes. */
	assert_false(sv_equal_ci_cstr((struct sv){ "\xc9", 1 }, "\xe9"));
	assert_false(sv_equal_ci_cstr((struct sv){ "[", 1 }, "{"));
}

/* ---- response heads ---- */

/* Parses a response from an exact-size copy (a sanitized build sees any
 * read past the end); *ret untouched on failure; spans rebased onto s. */
static int parse_res_len(const char *s, size_t len, bool head, struct gw_http_response *ret)
{
	static struct gw_http_response sentinel;
	_cleanup_free_ char *exact = malloc(len ? len : 1);
	assert_non_null(exact);
	if (len > 0)
		memcpy(exact, s, len);
	memset(&sentinel, 0xa5, sizeof(sentinel));
	memcpy(ret, &sentinel, sizeof(*ret));
	int r = gw_http_parse_response(exact, len, head, ret);
	if (r != 1) {
		assert_memory_equal(ret, &sentinel, sizeof(*ret));
		return r;
	}
	for (size_t i = 0; i < ret->n_fields; i++) {
		ret->fields[i].name.p = s + (ret->fields[i].name.p - exact);
		if (ret->fields[i].value.p)
			ret->fields[i].value.p = s + (ret->fields[i].value.p - exact);
	}
	return r;
}

/* Accepted whole, every strict prefix needs more, and bytes after the head
 * change nothing. */
static void res_ok_len(const char *s, size_t len, bool head, struct gw_http_response *res)
{
	struct gw_http_response tmp;
	for (size_t k = 0; k < len; k++) {
		int r = parse_res_len(s, k, head, &tmp);
		if (r != 0)
			print_error("prefix %zu of \"%.*s\": got %d, want 0\n", k, (int)len, s, r);
		assert_int_equal(r, 0);
	}
	int r = parse_res_len(s, len, head, res);
	if (r != 1)
		print_error("response \"%.*s\": got %d, want 1\n", (int)len, s, r);
	assert_int_equal(r, 1);
	assert_int_equal(res->head_len, len);

	_cleanup_free_ char *more = malloc(len + 12);
	assert_non_null(more);
	memcpy(more, s, len);
	memcpy(more + len, "0\r\n\r\nHTTP/1.", 12);
	assert_int_equal(parse_res_len(more, len + 12, head, &tmp), 1);
	assert_int_equal(tmp.head_len, len);
	assert_int_equal(tmp.status, res->status);
	assert_int_equal(tmp.body, res->body);
	assert_true(tmp.content_length == res->content_length);
	assert_int_equal(tmp.n_fields, res->n_fields);
}

static void res_ok(const char *s, bool head, struct gw_http_response *res)
{
	res_ok_len(s, strlen(s), head, res);
}

/* Refused, for GET and HEAD alike, and still refused with more bytes. */
static void res_bad_len(const char *s, size_t len)
{
	struct gw_http_response tmp;
	for (int head = 0; head <= 1; head++) {
		int r = parse_res_len(s, len, head, &tmp);
		if (r != -400)
			print_error("response \"%.*s\" (head %d): got %d, want -400\n", (int)len, s,
				    head, r);
		assert_int_equal(r, -400);
		_cleanup_free_ char *more = malloc(len + 4);
		assert_non_null(more);
		memcpy(more, s, len);
		memcpy(more + len, "\r\n\r\n", 4);
		assert_int_equal(parse_res_len(more, len + 4, head, &tmp), -400);
	}
}

static void res_bad(const char *s)
{
	res_bad_len(s, strlen(s));
}

static void test_response_framing(void **state)
{
	struct gw_http_response res;
	res_ok("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\n\r\n", false, &res);
	assert_int_equal(res.status, 200);
	assert_int_equal(res.minor, 1);
	assert_int_equal(res.body, GW_BODY_LENGTH);
	assert_int_equal(res.content_length, 5);
	assert_false(res.connection_close);
	assert_int_equal(res.n_fields, 2);
	span_is(res.fields[0].name, "Content-Length");
	span_is(res.fields[0].value, "5");
	span_is(res.fields[1].value, "y");

	res_ok("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", false, &res);
	assert_int_equal(res.body, GW_BODY_LENGTH);
	assert_int_equal(res.content_length, 0);
	res_ok("HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\n", false, &res);
	assert_true(res.content_length == UINT64_MAX);

	res_ok("HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n", false, &res);
	assert_int_equal(res.status, 201);
	assert_int_equal(res.body, GW_BODY_CHUNKED);
	res_ok("HTTP/1.1 200 OK\r\ntransfer-encoding:\tChunked \r\n\r\n", false, &res);
	assert_int_equal(res.body, GW_BODY_CHUNKED);

	/* Neither: the body runs until the connection closes. */
	res_ok("HTTP/1.1 200 OK\r\nX: y\r\n\r\n", false, &res);
	assert_int_equal(res.body, GW_BODY_CLOSE);
	res_ok("HTTP/1.1 200 OK\r\n\r\n", false, &res);
	assert_int_equal(res.body, GW_BODY_CLOSE);
	assert_int_equal(res.n_fields, 0);
	/* No reason phrase, an empty one, one with tabs and obs-text. */
	res_ok("HTTP/1.1 200\r\nContent-Length: 1\r\n\r\n", false, &res);
	assert_int_equal(res.status, 200);
	res_ok("HTTP/1.1 404 \r\nContent-Length: 1\r\n\r\n", false, &res);
	assert_int_equal(res.status, 404);
	res_ok("HTTP/1.1 200 tr\xc3\xa8s\tbien\r\nContent-Length: 1\r\n\r\n", false, &res);
	/* Field values may carry obs-text (filenames). */
	res_ok("HTTP/1.1 200 OK\r\nContent-Disposition: attachment; filename=\"caf\xc3\xa9\"\r\n"
	       "Content-Length: 1\r\n\r\n",
	       false, &res);
	assert_int_equal(res.body, GW_BODY_LENGTH);

	/* HTTP/1.0: no persistent connection, length or close-delimited. */
	res_ok("HTTP/1.0 200 OK\r\n\r\n", false, &res);
	assert_int_equal(res.minor, 0);
	assert_true(res.connection_close);
	assert_int_equal(res.body, GW_BODY_CLOSE);
	res_ok("HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n", false, &res);
	assert_true(res.connection_close);
	assert_int_equal(res.body, GW_BODY_LENGTH);
	assert_int_equal(res.content_length, 3);
}

static void test_response_no_body(void **state)
{
	struct gw_http_response res;
	/* 1xx, 204, 304 and any answer to HEAD have no body, whatever the
	 * fields say. */
	static const char *const none[] = {
		"HTTP/1.1 100 Continue\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
		"HTTP/1.1 199 x\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 100 Continue\r\nTransfer-Encoding: chunked\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(none); i++) {
		res_ok(none[i], false, &res);
		assert_int_equal(res.body, GW_BODY_NONE);
		res_ok(none[i], true, &res);
		assert_int_equal(res.body, GW_BODY_NONE);
	}
	static const char *const head[] = {
		"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\n",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(head); i++) {
		res_ok(head[i], true, &res);
		assert_int_equal(res.body, GW_BODY_NONE);
		res_ok(head[i], false, &res);
		assert_int_not_equal(res.body, GW_BODY_NONE);
	}
	/* Neighbours of the bodiless codes have bodies. */
	res_ok("HTTP/1.1 200 OK\r\n\r\n", false, &res);
	assert_int_equal(res.body, GW_BODY_CLOSE);
	res_ok("HTTP/1.1 205 Reset Content\r\nContent-Length: 0\r\n\r\n", false, &res);
	assert_int_equal(res.body, GW_BODY_LENGTH);
	res_ok("HTTP/1.1 305 x\r\nContent-Length: 2\r\n\r\n", false, &res);
	assert_int_equal(res.body, GW_BODY_LENGTH);
	res_ok("HTTP/1.1 203 x\r\nTransfer-Encoding: chunked\r\n\r\n", false, &res);
	assert_int_equal(res.body, GW_BODY_CHUNKED);
}

static void test_response_connection(void **state)
{
	struct gw_http_response res;
	res_ok("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false, &res);
	assert_true(res.connection_close);
	res_ok("HTTP/1.1 200 OK\r\nConnection: keep-alive, CLOSE\r\n\r\n", false, &res);
	assert_true(res.connection_close);
	res_ok("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", false,
	       &res);
	assert_true(res.connection_close);
	res_ok("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n\r\n", false, &res);
	assert_false(res.connection_close);
	res_ok("HTTP/1.1 200 OK\r\nConnection: closed\r\n\r\n", false, &res);
	assert_false(res.connection_close);
	res_ok("HTTP/1.1 200 OK\r\nX-Connection: close\r\n\r\n", false, &res);
	assert_false(res.connection_close);
	res_ok("HTTP/1.0 204 No Content\r\nConnection: keep-alive\r\n\r\n", false, &res);
	assert_true(res.connection_close);
	res_bad("HTTP/1.1 200 OK\r\nConnection: close;x\r\n\r\n");
	res_bad("HTTP/1.1 200 OK\r\nConnection: \"close\"\r\n\r\n");
}

static void test_response_refusals(void **state)
{
	static const char *const refused[] = {
		/* Both framings, in either order, whatever the status. */
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
		/* Two lengths, even equal ones. */
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
		/* Lengths that are not 1*DIGIT. */
		"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 05\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n",
		/* Transfer codings other than one "chunked". */
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n",
		/* Transfer-Encoding on HTTP/1.0. */
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.0 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
		/* obs-fold, whitespace before the first field. */
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\tContent-Length: 6\r\n\r\n",
		"HTTP/1.1 200 OK\r\n Content-Length: 5\r\n\r\n",
		/* Bare LF or CR anywhere. */
		"HTTP/1.1 200 OK\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\n",
		"HTTP/1.1 200 OK\r\nX: a\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\rContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\rX: a\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\r",
		"HTTP/1.1 200 OK\r\nX\r\n\r\n",
		/* Status lines. */
		"HTTP/1.1 099 Too Low\r\n\r\n",
		"HTTP/1.1 000 Zero\r\n\r\n",
		"HTTP/1.1 20 OK\r\n\r\n",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 20x OK\r\n\r\n",
		"HTTP/1.1 200OK\r\n\r\n",
		"HTTP/1.1  200 OK\r\n\r\n",
		"HTTP/1.1 200\tOK\r\n\r\n",
		"HTTP/1.1 -20 OK\r\n\r\n",
		"HTTP/1.2 200 OK\r\n\r\n",
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/2.0 200 OK\r\n\r\n",
		"http/1.1 200 OK\r\n\r\n",
		"HTTP/1.1\r\n\r\n",
		" HTTP/1.1 200 OK\r\n\r\n",
		"\r\nHTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 O\x01K\r\n\r\n",
		"HTTP/1.1 200 O\x7fK\r\n\r\n",
		/* Field names and values. */
		"HTTP/1.1 200 OK\r\n: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX Y: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX(: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX\x80: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\x01\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\x7f\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		res_bad(refused[i]);
	static const char nul_status[] = "HTTP/1.1 200 O\0K\r\n\r\n";
	res_bad_len(nul_status, sizeof(nul_status) - 1);
	static const char nul_value[] = "HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n";
	res_bad_len(nul_value, sizeof(nul_value) - 1);
	static const char nul_te[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\0\r\n\r\n";
	res_bad_len(nul_te, sizeof(nul_te) - 1);

	/* Refused at the first bad byte, without waiting for the end. */
	struct gw_http_response res;
	assert_int_equal(parse_res_len("HTTP/1.1 200 OK\n", 16, false, &res), -400);
	assert_int_equal(parse_res_len("HTTP/1.1 200 OK\r\nX: a\r\n b", 25, false, &res), -400);
	assert_int_equal(parse_res_len("HTTP/1.1 200 OK\r\nX Y", 20, false, &res), -400);
	/* ...but a CR at the end waits for its LF. */
	assert_int_equal(parse_res_len("HTTP/1.1 200 OK\r", 16, false, &res), 0);
	assert_int_equal(parse_res_len("HTTP/1.1 200 OK\r\nX: a\r", 22, false, &res), 0);
	assert_int_equal(parse_res_len("HTTP/1.1 200 OK\r\n\r", 18, false, &res), 0);
	assert_int_equal(parse_res_len("", 0, false, &res), 0);
	assert_int_equal(gw_http_parse_response(NULL, 0, false, &res), 0);
}

static void test_response_limits(void **state)
{
	struct gw_http_response res;
	/* A status line at the limit, then past it. */
	_cleanup_free_ char *line = malloc(GW_HTTP_LINE_MAX + 8);
	assert_non_null(line);
	memcpy(line, "HTTP/1.1 200 ", 13);
	memset(line + 13, 'r', GW_HTTP_LINE_MAX - 13);
	memcpy(line + GW_HTTP_LINE_MAX, "\r\n\r\n", 4);
	assert_int_equal(parse_res_len(line, GW_HTTP_LINE_MAX + 4, false, &res), 1);
	assert_int_equal(parse_res_len(line, GW_HTTP_LINE_MAX, false, &res), 0);
	line[GW_HTTP_LINE_MAX] = 'r';
	assert_int_equal(parse_res_len(line, GW_HTTP_LINE_MAX + 1, false, &res), -400);
	assert_int_equal(parse_res_len(line, GW_HTTP_LINE_MAX + 4, false, &res), -400);

	/* A head of exactly GW_HTTP_HEAD_MAX bytes, then one byte more. */
	static const char start[] = "HTTP/1.1 200 OK\r\nX: ";
	_cleanup_free_ char *big = malloc(GW_HTTP_HEAD_MAX + 1);
	assert_non_null(big);
	size_t fixed = sizeof(start) - 1 + 4;
	memcpy(big, start, sizeof(start) - 1);
	memset(big + sizeof(start) - 1, 'v', GW_HTTP_HEAD_MAX - fixed);
	memcpy(big + GW_HTTP_HEAD_MAX - 4, "\r\n\r\n", 4);
	assert_int_equal(parse_res_len(big, GW_HTTP_HEAD_MAX, false, &res), 1);
	assert_int_equal(res.head_len, GW_HTTP_HEAD_MAX);
	assert_int_equal(parse_res_len(big, GW_HTTP_HEAD_MAX - 1, false, &res), 0);
	memset(big + sizeof(start) - 1, 'v', GW_HTTP_HEAD_MAX + 1 - fixed);
	memcpy(big + GW_HTTP_HEAD_MAX + 1 - 4, "\r\n\r\n", 4);
	assert_int_equal(parse_res_len(big, GW_HTTP_HEAD_MAX + 1, false, &res), -400);
	assert_int_equal(parse_res_len(big, GW_HTTP_HEAD_MAX, false, &res), -400);

	/* GW_HTTP_MAX_FIELDS fields, then one more. */
	static const char field[] = "X: 1\r\n";
	size_t cap = 17 + (GW_HTTP_MAX_FIELDS + 1) * 6 + 2;
	_cleanup_free_ char *many = malloc(cap);
	assert_non_null(many);
	size_t k = 0;
	memcpy(many, "HTTP/1.1 200 OK\r\n", 17);
	k = 17;
	for (size_t i = 0; i < GW_HTTP_MAX_FIELDS; i++, k += 6)
		memcpy(many + k, field, 6);
	memcpy(many + k, "\r\n", 2);
	assert_int_equal(parse_res_len(many, k + 2, false, &res), 1);
	assert_int_equal(res.n_fields, GW_HTTP_MAX_FIELDS);
	memcpy(many + k, field, 6);
	memcpy(many + k + 6, "\r\n", 2);
	assert_int_equal(parse_res_len(many, k + 8, false, &res), -400);
}

/* ---- chunked bodies ---- */

struct sink {
	char data[64 * 1024];
	size_t len;
	size_t calls;
	size_t fail_after; /* 0: never fail */
};

static int sink_fn(const char *p, size_t n, void *ud)
{
	struct sink *s = ud;
	assert_true(n > 0);
	if (s->fail_after && s->calls + 1 >= s->fail_after)
		return -1;
	s->calls++;
	assert_true(s->len + n <= sizeof(s->data));
	memcpy(s->data + s->len, p, n);
	s->len += n;
	return 0;
}

struct chunked_result {
	int r;
	size_t end; /* bytes of the input that belong to the body (r == 1) */
	struct sink out;
};

/* Feeds s in pieces cut at cuts[] (ascending), each from an exact-size
 * copy; stops at the end of the body or an error. */
static void feed_cuts(const char *s, size_t len, const size_t *cuts, size_t n_cuts,
		      struct chunked_result *res)
{
	struct gw_chunked c = { 0 };
	memset(res, 0, sizeof(*res));
	size_t off = 0;
	for (size_t i = 0; i <= n_cuts; i++) {
		size_t to = i < n_cuts ? cuts[i] : len;
		assert_true(to >= off && to <= len);
		size_t n = to - off;
		_cleanup_free_ char *piece = malloc(n ? n : 1);
		assert_non_null(piece);
		memcpy(piece, s + off, n);
		size_t used = (size_t)-1;
		res->r = gw_chunked_feed(&c, piece, n, &used, sink_fn, &res->out);
		if (res->r < 0)
			return;
		assert_true(used <= n);
		if (res->r == 1) {
			res->end = off + used;
			/* Done stays done, and takes nothing more. */
			used = (size_t)-1;
			assert_int_equal(
				gw_chunked_feed(&c, "0\r\n\r\n", 5, &used, sink_fn, &res->out), 1);
			assert_int_equal(used, 0);
			return;
		}
		assert_int_equal(used, n); /* all of it, until the end */
		off = to;
	}
}

static void feed_whole(const char *s, size_t len, struct chunked_result *res)
{
	feed_cuts(s, len, NULL, 0, res);
}

static void feed_bytes(const char *s, size_t len, struct chunked_result *res)
{
	size_t *cuts = calloc(len ? len : 1, sizeof(size_t));
	assert_non_null(cuts);
	for (size_t i = 0; i < len; i++)
		cuts[i] = i;
	feed_cuts(s, len, cuts, len, res);
	free(cuts);
}

static void same_result(const struct chunked_result *a, const struct chunked_result *b)
{
	assert_int_equal(a->r, b->r);
	assert_int_equal(a->end, b->end);
	assert_int_equal(a->out.len, b->out.len);
	assert_memory_equal(a->out.data, b->out.data, a->out.len);
}

static uint64_t rng_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* A body that ends (want_data) with tail_len bytes after it: the same end
 * and data whole, byte by byte and in random pieces. */
static void chunked_ok_len(const char *s, size_t len, const char *want_data, size_t want_len,
			   size_t tail_len)
{
	struct chunked_result whole, other;
	feed_whole(s, len, &whole);
	if (whole.r != 1)
		print_error("body \"%.*s\": got %d, want 1\n", (int)len, s, whole.r);
	assert_int_equal(whole.r, 1);
	assert_int_equal(whole.end, len - tail_len);
	assert_int_equal(whole.out.len, want_len);
	assert_memory_equal(whole.out.data, want_data, whole.out.len);

	feed_bytes(s, len, &other);
	same_result(&whole, &other);

	uint64_t x = 0x9e3779b97f4a7c15ull ^ len;
	size_t cuts[16];
	for (int round = 0; round < 200; round++) {
		size_t n = (size_t)(rng_next(&x) % 16);
		for (size_t i = 0; i < n; i++)
			cuts[i] = (size_t)(rng_next(&x) % (len + 1));
		/* Sort (insertion). */
		for (size_t i = 1; i < n; i++)
			for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
				size_t t = cuts[j];
				cuts[j] = cuts[j - 1];
				cuts[j - 1] = t;
			}
		feed_cuts(s, len, cuts, n, &other);
		same_result(&whole, &other);
	}

	/* Every strict prefix of the body needs more. */
	for (size_t k = 0; k < len - tail_len; k++) {
		struct gw_chunked c = { 0 };
		size_t used = (size_t)-1;
		assert_int_equal(gw_chunked_feed(&c, s, k, &used, NULL, NULL), 0);
		assert_int_equal(used, k);
	}
}

static void chunked_ok(const char *s, const char *want_data, size_t tail_len)
{
	chunked_ok_len(s, strlen(s), want_data, strlen(want_data), tail_len);
}

/* Malformed: -1 whole and byte by byte, with the same data passed on
 * before the bad byte. */
static void chunked_bad_len(const char *s, size_t len)
{
	struct chunked_result whole, bytes;
	feed_whole(s, len, &whole);
	if (whole.r != -1)
		print_error("body \"%.*s\": got %d, want -1\n", (int)len, s, whole.r);
	assert_int_equal(whole.r, -1);
	feed_bytes(s, len, &bytes);
	assert_int_equal(bytes.r, -1);
	assert_int_equal(bytes.out.len, whole.out.len);
	assert_memory_equal(bytes.out.data, whole.out.data, whole.out.len);
}

static void chunked_bad(const char *s)
{
	chunked_bad_len(s, strlen(s));
}

static void test_chunked_good(void **state)
{
	chunked_ok("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world", 0);
	/* Bytes after the end are not consumed. */
	chunked_ok("5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n", "hello", 18);
	chunked_ok("0\r\n\r\n", "", 0);
	chunked_ok("0\r\n\r\n0\r\n\r\n", "", 5);
	/* Hex in either case, leading zeros, up to 16 digits. */
	chunked_ok("A\r\n0123456789\r\nb\r\nabcdefghijk\r\n0\r\n\r\n", "0123456789abcdefghijk", 0);
	chunked_ok("0000000000000005\r\nhello\r\n0000000000000000\r\n\r\n", "hello", 0);
	chunked_ok("1\r\n\r\r\n1\r\n\n\r\n0\r\n\r\n", "\r\n", 0);
	/* Extensions, with or without values, quoted, after BWS. */
	chunked_ok("5;a\r\nhello\r\n0;b=c\r\n\r\n", "hello", 0);
	chunked_ok("5;a=b;c=\"d e;f\"\r\nhello\r\n0\r\n\r\n", "hello", 0);
	chunked_ok("5 ;a=b\r\nhello\r\n0\t;x\r\n\r\n", "hello", 0);
	chunked_ok("5;\xc3\xa9=\t1\r\nhello\r\n0\r\n\r\n", "hello", 0);
	/* Trailers. */
	chunked_ok("5\r\nhello\r\n0\r\nX-Sum: 1\r\nX-Other: a b\r\n\r\nrest", "hello", 4);
	chunked_ok("0\r\nX: \r\n\r\n", "", 0);
	/* Binary data, NUL included. */
	static const char bin[] = "4\r\n\0\r\n\xff\r\n0\r\n\r\n";
	chunked_ok_len(bin, sizeof(bin) - 1, "\0\r\n\xff", 4, 0);

	/* No callback: framing only. */
	struct gw_chunked c = { 0 };
	size_t used = 0;
	assert_int_equal(gw_chunked_feed(&c, "3\r\nabc\r\n0\r\n\r\nx", 14, &used, NULL, NULL), 1);
	assert_int_equal(used, 13);
	assert_int_equal(c.total, 3);
	/* Nothing fed: more needed. */
	struct gw_chunked e = { 0 };
	used = 99;
	assert_int_equal(gw_chunked_feed(&e, "", 0, &used, NULL, NULL), 0);
	assert_int_equal(used, 0);
	/* A huge chunk is fine until the data runs short. */
	struct gw_chunked h = { 0 };
	assert_int_equal(gw_chunked_feed(&h, "ffffffffffffffff\r\nabc", 21, &used, NULL, NULL), 0);
	assert_int_equal(used, 21);
}

static void test_chunked_data_pieces(void **state)
{
	/* The data of a chunk split over feeds comes in order, nothing but data. */
	static const char body[] = "a\r\n0123456789\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n";
	struct chunked_result whole;
	feed_whole(body, sizeof(body) - 1, &whole);
	assert_int_equal(whole.r, 1);
	assert_int_equal(whole.out.len, 13);
	assert_memory_equal(whole.out.data, "0123456789abc", 13);
	assert_int_equal(whole.out.calls, 2);

	/* A callback failure stops at once. */
	struct gw_chunked c = { 0 };
	struct sink s = { .fail_after = 2 };
	size_t used = 0;
	assert_int_equal(gw_chunked_feed(&c, body, sizeof(body) - 1, &used, sink_fn, &s), -2);
	assert_int_equal(s.len, 10);
}

static void test_chunked_refusals(void **state)
{
	static const char *const refused[] = {
		/* Sizes. */
		"\r\n",
		"\r\nhello",
		";a\r\n",
		" 5\r\nhello\r\n0\r\n\r\n",
		"+5\r\nhello\r\n0\r\n\r\n",
		"-5\r\nhello\r\n0\r\n\r\n",
		"0x5\r\nhello\r\n0\r\n\r\n",
		"g\r\n",
		"5g\r\nhello\r\n0\r\n\r\n",
		/* Junk after whitespace: "5 5" would be 5 here and 55 elsewhere. */
		"5 5\r\nhello\r\n0\r\n\r\n",
		"1 0\r\nh\r\n0\r\n\r\n",
		"5 x\r\nhello\r\n0\r\n\r\n",
		/* A trailer line without a colon, or not starting with a name. */
		"0\r\nX-Trailer\r\n\r\n",
		"0\r\n:x\r\n\r\n",
		/* 17 digits: overflow, even when the value would fit. */
		"10000000000000000\r\n",
		"00000000000000005\r\nhello\r\n0\r\n\r\n",
		"fffffffffffffffff\r\n",
		/* Bare LF, bare CR. */
		"5\nhello\r\n0\r\n\r\n",
		"5\rhello\r\n0\r\n\r\n",
		"5;a\nhello\r\n0\r\n\r\n",
		"5;a\rb\r\nhello\r\n0\r\n\r\n",
		"5\r\nhello\n0\r\n\r\n",
		"5\r\nhello\r0\r\n\r\n",
		"0\n\r\n",
		"0\r\n\n",
		"0\r\n\r\r",
		"0\r\nX: y\n\r\n",
		"0\r\nX: y\rz\r\n\r\n",
		"0\r\nX: y\r\n\n",
		/* The data is not followed by CRLF: too long, too short. */
		"5\r\nhelloX\r\n0\r\n\r\n",
		"5\r\nhello world\r\n0\r\n\r\n",
		"5\r\nhell\r\n0\r\n\r\n0\r\n\r\n",
		/* Control bytes in extensions and trailers, obs-fold in trailers. */
		"5;a=\x01\r\nhello\r\n0\r\n\r\n",
		"5;a=\x7f\r\nhello\r\n0\r\n\r\n",
		"0\r\nX: \x01\r\n\r\n",
		"0\r\nX: a\r\n b\r\n\r\n",
		"0\r\n X: a\r\n\r\n",
		"0\r\n\tX: a\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		chunked_bad(refused[i]);
	static const char nul_size[] = "5\0\r\nhello\r\n0\r\n\r\n";
	chunked_bad_len(nul_size, sizeof(nul_size) - 1);
	static const char nul_ext[] = "5;\0\r\nhello\r\n0\r\n\r\n";
	chunked_bad_len(nul_ext, sizeof(nul_ext) - 1);
	static const char nul_trailer[] = "0\r\nX: \0\r\n\r\n";
	chunked_bad_len(nul_trailer, sizeof(nul_trailer) - 1);

	/* Refused data is still handed on up to the bad byte. */
	struct chunked_result r;
	feed_whole("5\r\nhelloX", 9, &r);
	assert_int_equal(r.r, -1);
	assert_int_equal(r.out.len, 5);
}

/* "5;xxx...\r\nhello\r\n0\r\n\r\n" with a size line (digits and extension,
 * without CRLF) of line_len bytes. */
static char *body_with_line(size_t line_len, size_t *ret_len)
{
	static const char rest[] = "\r\nhello\r\n0\r\n\r\n";
	assert_true(line_len >= 2);
	char *s = malloc(line_len + sizeof(rest));
	assert_non_null(s);
	memcpy(s, "5;", 2);
	memset(s + 2, 'x', line_len - 2);
	memcpy(s + line_len, rest, sizeof(rest));
	*ret_len = line_len + sizeof(rest) - 1;
	return s;
}

/* "0\r\n" and trailer lines of line_len bytes each (CRLF not counted) up to
 * total bytes of lines, then the empty line. */
static char *body_with_trailers(size_t n_lines, size_t line_len, size_t *ret_len)
{
	size_t len = 3 + n_lines * (line_len + 2) + 2;
	char *s = malloc(len);
	assert_non_null(s);
	memcpy(s, "0\r\n", 3);
	size_t k = 3;
	for (size_t i = 0; i < n_lines; i++) {
		memcpy(s + k, "X:", 2);
		memset(s + k + 2, 'v', line_len - 2);
		memcpy(s + k + line_len, "\r\n", 2);
		k += line_len + 2;
	}
	memcpy(s + k, "\r\n", 2);
	*ret_len = len;
	return s;
}

static void test_chunked_limits(void **state)
{
	size_t len;
	/* A size line with its extensions: GW_CHUNK_LINE_MAX bytes with the
	 * CRLF are fine, a line longer than GW_CHUNK_LINE_MAX is not. */
	_cleanup_free_ char *at = body_with_line(GW_CHUNK_LINE_MAX - 2, &len);
	chunked_ok_len(at, len, "hello", 5, 0);
	_cleanup_free_ char *past = body_with_line(GW_CHUNK_LINE_MAX + 1, &len);
	chunked_bad_len(past, len);
	/* Refused once the line is too long, without waiting for its end. */
	struct gw_chunked c = { 0 };
	size_t used;
	assert_int_equal(gw_chunked_feed(&c, past, GW_CHUNK_LINE_MAX + 1, &used, NULL, NULL), -1);
	/* An extension that never ends. */
	_cleanup_free_ char *endless = body_with_line(4 * GW_CHUNK_LINE_MAX, &len);
	struct gw_chunked c2 = { 0 };
	assert_int_equal(gw_chunked_feed(&c2, endless, 4 * GW_CHUNK_LINE_MAX, &used, NULL, NULL),
			 -1);

	/* Trailers: well below the limit in one line or many; above it in one
	 * line or summed over many. */
	_cleanup_free_ char *t1 = body_with_trailers(1, GW_CHUNK_TRAILER_MAX - 16, &len);
	chunked_ok_len(t1, len, "", 0, 0);
	_cleanup_free_ char *t2 = body_with_trailers(8, GW_CHUNK_TRAILER_MAX / 8 - 16, &len);
	chunked_ok_len(t2, len, "", 0, 0);
	_cleanup_free_ char *t3 = body_with_trailers(1, GW_CHUNK_TRAILER_MAX + 1, &len);
	chunked_bad_len(t3, len);
	_cleanup_free_ char *t4 = body_with_trailers(4, GW_CHUNK_TRAILER_MAX / 3, &len);
	chunked_bad_len(t4, len);
	/* Many short lines count too. */
	_cleanup_free_ char *t5 = body_with_trailers(GW_CHUNK_TRAILER_MAX / 3, 3, &len);
	chunked_bad_len(t5, len);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_get),
		cmocka_unit_test(test_post_length),
		cmocka_unit_test(test_post_chunked),
		cmocka_unit_test(test_connect),
		cmocka_unit_test(test_methods),
		cmocka_unit_test(test_refusal_keeps_what_was_parsed),
		cmocka_unit_test(test_absolute),
		cmocka_unit_test(test_connection),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_smuggling),
		cmocka_unit_test(test_line_limit),
		cmocka_unit_test(test_head_limit),
		cmocka_unit_test(test_field_limit),
		cmocka_unit_test(test_incremental),
		cmocka_unit_test(test_span_eq_ci),
		cmocka_unit_test(test_response_framing),
		cmocka_unit_test(test_response_no_body),
		cmocka_unit_test(test_response_connection),
		cmocka_unit_test(test_response_refusals),
		cmocka_unit_test(test_response_limits),
		cmocka_unit_test(test_chunked_good),
		cmocka_unit_test(test_chunked_data_pieces),
		cmocka_unit_test(test_chunked_refusals),
		cmocka_unit_test(test_chunked_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

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
 * any read past the end. On failure *ret must be untouched. */
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
	if (r != 1) {
		assert_memory_equal(ret, &sentinel, sizeof(*ret));
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

static void span_is(struct gw_span sp, const char *want)
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
	ok("M-S.E!#$%&'*+^_`|~ / HTTP/1.1\r\nHost: a\r\n\r\n", &req);
	span_is(req.method, "M-S.E!#$%&'*+^_`|~");
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
		"CONNECT a.com:443 HTTP/1.1\r\nHost: a.com\r\n\r\n",
		"CONNECT a.com:443 HTTP/1.1\r\n\r\n",
		/* No body on CONNECT. */
		"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nContent-Length: 0\r\n\r\n",
		"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nTransfer-Encoding: chunked\r\n\r\n",
		/* Methods are case-sensitive: this is not CONNECT. */
		"connect a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		bad(refused[i], -400);
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
	struct gw_span s = { "Chunked", 7 };
	assert_true(gw_span_eq_ci(s, "chunked"));
	assert_true(gw_span_eq_ci(s, "CHUNKED"));
	assert_false(gw_span_eq_ci(s, "chunke"));
	assert_false(gw_span_eq_ci(s, "chunkedx"));
	assert_false(gw_span_eq_ci((struct gw_span){ "Chunked", 6 }, "chunked"));
	assert_true(gw_span_eq_ci((struct gw_span){ NULL, 0 }, ""));
	assert_false(gw_span_eq_ci((struct gw_span){ NULL, 0 }, "a"));
	assert_false(gw_span_eq_ci(s, NULL));
	/* ASCII only: no locale folding of other bytes. */
	assert_false(gw_span_eq_ci((struct gw_span){ "\xc9", 1 }, "\xe9"));
	assert_false(gw_span_eq_ci((struct gw_span){ "[", 1 }, "{"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_get),	     cmocka_unit_test(test_post_length),
		cmocka_unit_test(test_post_chunked), cmocka_unit_test(test_connect),
		cmocka_unit_test(test_absolute),     cmocka_unit_test(test_connection),
		cmocka_unit_test(test_refusals),     cmocka_unit_test(test_smuggling),
		cmocka_unit_test(test_line_limit),   cmocka_unit_test(test_head_limit),
		cmocka_unit_test(test_field_limit),  cmocka_unit_test(test_incremental),
		cmocka_unit_test(test_span_eq_ci),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

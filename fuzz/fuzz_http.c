/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The input as bytes of a request head arriving through
 * gw_http_parse_request(). Checks what the gateway relies on: the answer
 * never changes once given (a longer buffer gives the same refusal or the
 * same head, every strict prefix of an accepted head needs more), an
 * accepted head is CRLF-framed with no stray CR or LF, every span lies in
 * it, the framing agrees with the one Content-Length or Transfer-Encoding
 * field there is, and the limits are the only reasons for -414 and -431.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/http.h"
#include "fuzz.h"

static char lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool mem_eq_ci(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (lower(a[i]) != lower(b[i]))
			return false;
	return true;
}

static bool lit_eq_ci(struct sv s, const char *lit)
{
	return s.len == strlen(lit) && mem_eq_ci(s.p, lit, s.len);
}

static void check_span(const char *base, size_t len, struct sv s, bool may_be_empty)
{
	if (s.len == 0 && may_be_empty)
		return;
	check(s.p != NULL);
	check(s.p >= base && s.len <= len && (size_t)(s.p - base) <= len - s.len);
}

static bool is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static void check_accepted(const char *buf, const struct gw_http_request *req)
{
	size_t n = req->head_len;
	check(n >= 4 && n <= GW_HTTP_HEAD_MAX);
	check(memcmp(buf + n - 4, "\r\n\r\n", 4) == 0);
	/* Every CR starts a CRLF, every LF ends one; no NUL, no obs-text. */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c == '\r')
			check(i + 1 < n && buf[i + 1] == '\n');
		else if (c == '\n')
			check(i > 0 && buf[i - 1] == '\r');
		else
			check(c == '\t' || (c >= 0x20 && c < 0x7f));
		/* No line starts with whitespace (obs-fold). */
		if (i > 0 && buf[i - 1] == '\n')
			check(c != ' ' && c != '\t');
	}
	const char *eol = memchr(buf, '\r', n);
	check(eol && (size_t)(eol - buf) <= GW_HTTP_LINE_MAX);

	check_span(buf, n, req->method, false);
	check_span(buf, n, req->target, false);
	check_span(buf, n, req->authority, req->form == GW_FORM_ORIGIN);
	check_span(buf, n, req->path, req->form == GW_FORM_AUTHORITY);
	/* HTTP/1.0 CONNECT and absolute-form may come without Host. */
	bool host_optional = req->http10 && req->form != GW_FORM_ORIGIN;
	check_span(buf, n, req->host, host_optional);
	check(req->method.p == buf);
	check(req->target.p == req->method.p + req->method.len + 1);
	check(req->target.p + req->target.len + strlen(" HTTP/1.x") == eol);
	for (size_t i = 0; i < req->target.len; i++)
		check(req->target.p[i] != ' ');
	switch (req->form) {
	case GW_FORM_ORIGIN:
		check(req->path.p == req->target.p && req->path.len == req->target.len);
		check(req->target.p[0] == '/');
		check(req->authority.len == 0);
		break;
	case GW_FORM_ABSOLUTE:
		check(lit_eq_ci((struct sv){ req->target.p, 7 }, "http://"));
		check(req->authority.p == req->target.p + 7);
		check(req->path.p == req->authority.p + req->authority.len);
		check(req->path.len > 0 && req->path.p[0] == '/');
		check(req->path.p + req->path.len == req->target.p + req->target.len);
		check(memchr(req->authority.p, '@', req->authority.len) == NULL);
		break;
	case GW_FORM_AUTHORITY:
		check(req->method.len == 7 && memcmp(req->method.p, "CONNECT", 7) == 0);
		check(req->authority.p == req->target.p && req->authority.len == req->target.len);
		check(req->path.len == 0);
		check(memchr(req->authority.p, ':', req->authority.len) != NULL);
		check(req->body == GW_BODY_NONE);
		break;
	default:
		check(!"form");
	}
	if (req->form != GW_FORM_ORIGIN && req->host.len) {
		bool same = req->host.len == req->authority.len &&
			    mem_eq_ci(req->host.p, req->authority.p, req->host.len);
		/* CONNECT h:443 (or h:80) with Host: h, as Node's proxy agent sends. */
		struct sv rest = { req->authority.p + req->host.len,
				   req->authority.len - req->host.len };
		bool default_port = req->form == GW_FORM_AUTHORITY &&
				    req->host.len < req->authority.len &&
				    mem_eq_ci(req->host.p, req->authority.p, req->host.len) &&
				    (lit_eq_ci(rest, ":443") || lit_eq_ci(rest, ":80"));
		check(same || default_port);
	}
	/* Only methods the gateway knows, in their case. */
	static const char *const methods[] = { "GET",	     "HEAD",	  "POST",    "PUT",
					       "DELETE",     "PATCH",	  "OPTIONS", "CONNECT",
					       "PROPFIND",   "PROPPATCH", "MKCOL",   "COPY",
					       "MOVE",	     "LOCK",	  "UNLOCK",  "REPORT",
					       "MKCALENDAR", "SEARCH",	  NULL };
	bool known = false;
	for (size_t i = 0; methods[i] && !known; i++)
		known = req->method.len == strlen(methods[i]) &&
			memcmp(req->method.p, methods[i], req->method.len) == 0;
	check(known);

	check(req->n_fields <= GW_HTTP_MAX_FIELDS);
	size_t n_cl = 0, n_te = 0, n_host = 0;
	const struct gw_http_field *cl = NULL;
	for (size_t i = 0; i < req->n_fields; i++) {
		const struct gw_http_field *f = &req->fields[i];
		check_span(buf, n, f->name, false);
		check_span(buf, n, f->value, true);
		for (size_t k = 0; k < f->name.len; k++)
			check(is_tchar((unsigned char)f->name.p[k]));
		check(f->name.p[f->name.len] == ':');
		if (f->value.len > 0) {
			check(f->value.p[0] != ' ' && f->value.p[0] != '\t');
			check(f->value.p[f->value.len - 1] != ' ' &&
			      f->value.p[f->value.len - 1] != '\t');
		}
		if (i > 0)
			check(f->name.p > req->fields[i - 1].name.p);
		if (lit_eq_ci(f->name, "content-length")) {
			n_cl++;
			cl = f;
		} else if (lit_eq_ci(f->name, "transfer-encoding")) {
			n_te++;
			check(lit_eq_ci(f->value, "chunked"));
		} else if (lit_eq_ci(f->name, "host")) {
			n_host++;
			check(f->value.p == req->host.p && f->value.len == req->host.len);
		}
	}
	check(n_host == 1 || (n_host == 0 && host_optional));
	check(n_cl + n_te <= 1);
	switch (req->body) {
	case GW_BODY_NONE:
		check(n_cl == 0 && n_te == 0 && req->content_length == 0);
		break;
	case GW_BODY_CHUNKED:
		check(n_te == 1 && req->content_length == 0);
		break;
	case GW_BODY_LENGTH: {
		check(n_cl == 1);
		/* Only digits, and they spell content_length exactly. */
		char want[32];
		int wl = snprintf(want, sizeof(want), "%llu",
				  (unsigned long long)req->content_length);
		check(wl > 0 && cl->value.len == (size_t)wl &&
		      memcmp(cl->value.p, want, (size_t)wl) == 0);
		break;
	}
	default:
		check(!"body");
	}
}

static bool same_span(struct sv a, struct sv b)
{
	return a.p == b.p && a.len == b.len;
}

static bool same_request(const struct gw_http_request *a, const struct gw_http_request *b)
{
	if (!same_span(a->method, b->method) || !same_span(a->target, b->target) ||
	    a->form != b->form || !same_span(a->authority, b->authority) ||
	    !same_span(a->path, b->path) || !same_span(a->host, b->host) ||
	    a->n_fields != b->n_fields || a->body != b->body ||
	    a->content_length != b->content_length || a->connection_close != b->connection_close ||
	    a->upgrade != b->upgrade || a->head_len != b->head_len)
		return false;
	for (size_t i = 0; i < a->n_fields; i++)
		if (!same_span(a->fields[i].name, b->fields[i].name) ||
		    !same_span(a->fields[i].value, b->fields[i].value))
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct gw_http_request req, again;
	memset(&req, 0, sizeof(req));
	memset(&again, 0, sizeof(again));

	int r = gw_http_parse_request(buf, size, &req);
	check(r == 1 || r == 0 || r == -400 || r == -414 || r == -431 || r == -501);
	if (r < 0) {
		/* What was parsed before a refusal lies in the buffer. */
		check_span(buf, size, req.method, true);
		check_span(buf, size, req.target, true);
		check_span(buf, size, req.authority, true);
		check_span(buf, size, req.path, true);
		check_span(buf, size, req.host, true);
		check(req.n_fields <= GW_HTTP_MAX_FIELDS);
		memset(&req, 0, sizeof(req));
	}

	if (r == -414) {
		check(size > GW_HTTP_LINE_MAX);
		check(memchr(buf, '\r', GW_HTTP_LINE_MAX) == NULL);
	}
	if (r == -431) {
		size_t lines = 0;
		for (size_t i = 0; i < size; i++)
			lines += buf[i] == '\n';
		check(size >= GW_HTTP_HEAD_MAX || lines >= GW_HTTP_MAX_FIELDS + 1);
	}
	if (r == 0)
		check(size < GW_HTTP_HEAD_MAX);

	/* The answer on every prefix: 0 up to some length, then the answer
	 * for the whole buffer. Each call rescans from the start, so beyond
	 * 512 bytes only a sample of the prefixes and the last 64 of them. */
	size_t stop = r == 1 ? req.head_len : size;
	size_t step = stop <= 512 ? 1 : stop / 256;
	bool decided = false;
	for (size_t k = 0; k <= stop;) {
		memset(&again, 0, sizeof(again));
		int rk = gw_http_parse_request(buf, k, &again);
		if (r == 1) {
			check(rk == (k == stop ? 1 : 0));
		} else if (rk != 0) {
			check(rk == r);
			decided = true;
		} else {
			check(!decided);
		}
		k += stop - k <= 64 ? 1 : step;
	}

	if (r == 1) {
		check_accepted(buf, &req);
		/* The head alone says the same; so does the head with anything
		 * after it. */
		memset(&again, 0, sizeof(again));
		check(gw_http_parse_request(buf, req.head_len, &again) == 1);
		check(same_request(&req, &again));
	}
	return 0;
}

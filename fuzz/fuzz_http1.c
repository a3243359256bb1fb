/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An upstream's side of HTTP/1.1: response heads through
 * gw_http_parse_response() and chunked bodies through gw_chunked_feed().
 *
 * The first byte is a control byte: bit 0 says whether the request was
 * HEAD, the other bits pick a piece size for a third way of feeding the
 * body. The rest is a response head; the bytes after an accepted head (or
 * all of them when the head is not accepted) are a chunked body.
 *
 * Checks for the head: the answer never changes once given (every strict
 * prefix of an accepted head needs more, a refusal stays a refusal), an
 * accepted head is CRLF-framed with no stray CR, LF or control byte and no
 * obs-fold, every span lies inside it, and the body framing agrees with
 * the status, the HEAD flag and the one Content-Length or
 * Transfer-Encoding field there is. For the body: fed whole, byte by byte
 * and in pieces, the decoder gives the same answer, ends at the same
 * position and passes on the same data; a body it accepts ends in CRLF and
 * every strict prefix of it needs more.
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

static bool lit_eq_ci(struct sv s, const char *lit)
{
	if (s.len != strlen(lit))
		return false;
	for (size_t i = 0; i < s.len; i++)
		if (lower(s.p[i]) != lit[i])
			return false;
	return true;
}

static bool is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static void check_span(const char *base, size_t len, struct sv s, bool may_be_empty)
{
	if (s.len == 0 && may_be_empty)
		return;
	check(s.p != NULL);
	check(s.p >= base && s.len <= len && (size_t)(s.p - base) <= len - s.len);
}

static void check_accepted(const char *buf, bool head_request, const struct gw_http_response *res)
{
	size_t n = res->head_len;
	check(n >= 16 && n <= GW_HTTP_HEAD_MAX);
	check(memcmp(buf + n - 4, "\r\n\r\n", 4) == 0);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c == '\r')
			check(i + 1 < n && buf[i + 1] == '\n');
		else if (c == '\n')
			check(i > 0 && buf[i - 1] == '\r');
		else
			check(c == '\t' || (c >= 0x20 && c != 0x7f)); /* obs-text allowed */
		if (i > 0 && buf[i - 1] == '\n')
			check(c != ' ' && c != '\t');
	}
	const char *eol = memchr(buf, '\r', n);
	check(eol && (size_t)(eol - buf) <= GW_HTTP_LINE_MAX);
	check(memcmp(buf, "HTTP/1.", 7) == 0 && (buf[7] == '0' || buf[7] == '1'));
	check(res->minor == buf[7] - '0');
	check(buf[8] == ' ');
	check(res->status >= 100 && res->status <= 999);
	check(res->status == (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0'));
	check(eol == buf + 12 || buf[12] == ' ');

	check(res->n_fields <= GW_HTTP_MAX_FIELDS);
	size_t n_cl = 0, n_te = 0;
	bool close = false;
	const struct gw_http_field *cl = NULL;
	for (size_t i = 0; i < res->n_fields; i++) {
		const struct gw_http_field *f = &res->fields[i];
		check_span(buf, n, f->name, false);
		check_span(buf, n, f->value, true);
		check(f->name.p > eol);
		for (size_t k = 0; k < f->name.len; k++)
			check(is_tchar((unsigned char)f->name.p[k]));
		check(f->name.p[f->name.len] == ':');
		check(f->name.p[-1] == '\n');
		if (f->value.len > 0) {
			check(f->value.p[0] != ' ' && f->value.p[0] != '\t');
			check(f->value.p[f->value.len - 1] != ' ' &&
			      f->value.p[f->value.len - 1] != '\t');
		}
		if (i > 0)
			check(f->name.p > res->fields[i - 1].name.p);
		if (lit_eq_ci(f->name, "content-length")) {
			n_cl++;
			cl = f;
		} else if (lit_eq_ci(f->name, "transfer-encoding")) {
			n_te++;
			check(lit_eq_ci(f->value, "chunked"));
		} else if (lit_eq_ci(f->name, "connection")) {
			/* A close element, roughly: the parser is stricter. */
			for (size_t k = 0; k + 5 <= f->value.len; k++)
				if (lit_eq_ci((struct sv){ f->value.p + k, 5 }, "close"))
					close = true;
		}
	}
	/* One framing field at most, and never chunked on HTTP/1.0. */
	check(n_cl <= 1 && n_te <= 1 && n_cl + n_te <= 1);
	if (res->minor == 0) {
		check(n_te == 0);
		check(res->connection_close);
	} else if (res->connection_close) {
		check(close);
	}
	if (n_cl == 1) {
		char want[32];
		int wl = snprintf(want, sizeof(want), "%llu",
				  (unsigned long long)res->content_length);
		check(wl > 0 && cl->value.len == (size_t)wl &&
		      memcmp(cl->value.p, want, (size_t)wl) == 0);
	}
	bool bodiless = head_request || res->status < 200 || res->status == 204 ||
			res->status == 304;
	switch (res->body) {
	case GW_BODY_NONE:
		check(bodiless);
		break;
	case GW_BODY_CHUNKED:
		check(!bodiless && n_te == 1);
		break;
	case GW_BODY_LENGTH:
		check(!bodiless && n_cl == 1);
		break;
	case GW_BODY_CLOSE:
		check(!bodiless && n_cl == 0 && n_te == 0);
		break;
	default:
		check(!"body");
	}
}

static bool same_response(const struct gw_http_response *a, const struct gw_http_response *b)
{
	if (a->status != b->status || a->minor != b->minor || a->n_fields != b->n_fields ||
	    a->body != b->body || a->content_length != b->content_length ||
	    a->connection_close != b->connection_close || a->head_len != b->head_len)
		return false;
	for (size_t i = 0; i < a->n_fields; i++)
		if (a->fields[i].name.p != b->fields[i].name.p ||
		    a->fields[i].name.len != b->fields[i].name.len ||
		    a->fields[i].value.p != b->fields[i].value.p ||
		    a->fields[i].value.len != b->fields[i].value.len)
			return false;
	return true;
}

static void fuzz_head(const char *buf, size_t size, bool head_request, struct gw_http_response *res,
		      int *ret)
{
	static struct gw_http_response again;
	int r = gw_http_parse_response(buf, size, head_request, res);
	check(r == 1 || r == 0 || r == -400);
	if (r == 0)
		check(size < GW_HTTP_HEAD_MAX);

	/* 0 up to some length, then the answer for the whole buffer. Each
	 * call rescans, so past 512 bytes only a sample and the last 64. */
	size_t stop = r == 1 ? res->head_len : size;
	size_t step = stop <= 512 ? 1 : stop / 256;
	bool decided = false;
	for (size_t k = 0; k <= stop;) {
		int rk = gw_http_parse_response(buf, k, head_request, &again);
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
		check_accepted(buf, head_request, res);
		memset(&again, 0, sizeof(again));
		check(gw_http_parse_response(buf, res->head_len, head_request, &again) == 1);
		check(same_response(res, &again));
		/* The HEAD flag changes the body's framing, nothing else. */
		memset(&again, 0, sizeof(again));
		check(gw_http_parse_response(buf, size, !head_request, &again) == 1);
		check(again.head_len == res->head_len && again.status == res->status &&
		      again.n_fields == res->n_fields);
	}
	*ret = r;
}

struct collected {
	char *data;
	size_t len, cap;
};

static int collect(const char *p, size_t n, void *ud)
{
	struct collected *c = ud;
	check(n > 0 && p != NULL);
	check(c->len + n <= c->cap);
	memcpy(c->data + c->len, p, n);
	c->len += n;
	return 0;
}

struct outcome {
	int r;
	size_t end; /* with r == 1: body bytes */
	uint64_t total;
	struct collected out;
};

/* Feeds body in pieces of piece bytes (0: all at once). */
static void feed(const char *body, size_t n, size_t piece, struct outcome *o)
{
	struct gw_chunked c = { 0 };
	size_t off = 0;
	o->out.len = 0;
	o->end = 0;
	o->r = 0;
	do {
		size_t k = piece == 0 || n - off < piece ? n - off : piece;
		size_t used = (size_t)-1;
		o->r = gw_chunked_feed(&c, body + off, k, &used, collect, &o->out);
		check(o->r >= -1 && o->r <= 1);
		if (o->r < 0)
			break;
		check(used <= k);
		if (o->r == 1) {
			o->end = off + used;
			/* Done takes nothing more. */
			used = (size_t)-1;
			check(gw_chunked_feed(&c, body, n, &used, collect, &o->out) == 1);
			check(used == 0);
			break;
		}
		check(used == k);
		off += k;
	} while (off < n);
	o->total = c.total;
}

static void same_outcome(const struct outcome *a, const struct outcome *b)
{
	check(a->r == b->r);
	check(a->end == b->end);
	check(a->out.len == b->out.len);
	check(a->out.len == 0 || memcmp(a->out.data, b->out.data, a->out.len) == 0);
	if (a->r >= 0)
		check(a->total == b->total);
}

static void fuzz_body(const char *body, size_t n, size_t piece)
{
	struct outcome whole = { 0 }, bytes = { 0 }, pieces = { 0 };
	char *bufs = malloc(3 * (n ? n : 1));
	if (!bufs)
		return;
	whole.out = (struct collected){ bufs, 0, n };
	bytes.out = (struct collected){ bufs + n, 0, n };
	pieces.out = (struct collected){ bufs + 2 * n, 0, n };

	feed(body, n, 0, &whole);
	feed(body, n, 1, &bytes);
	feed(body, n, piece, &pieces);
	same_outcome(&whole, &bytes);
	same_outcome(&whole, &pieces);

	if (whole.r == 1) {
		size_t end = whole.end;
		check(end >= 5 && end <= n);
		check(body[end - 2] == '\r' && body[end - 1] == '\n');
		/* The data passed on is no more than what was framed. */
		check(whole.out.len == whole.total);
		check(whole.out.len < end);
		/* The body alone gives the same; a strict prefix needs more. */
		struct gw_chunked c = { 0 };
		size_t used = 0;
		check(gw_chunked_feed(&c, body, end, &used, NULL, NULL) == 1 && used == end);
		struct gw_chunked d = { 0 };
		check(gw_chunked_feed(&d, body, end - 1, &used, NULL, NULL) == 0 &&
		      used == end - 1);
	} else if (whole.r == 0) {
		check(whole.out.len <= n);
	}
	free(bufs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	bool head_request = data[0] & 1;
	size_t piece = (size_t)(data[0] >> 1) + 1;
	const char *buf = (const char *)data + 1;
	size_t len = size - 1;

	static struct gw_http_response res;
	memset(&res, 0, sizeof(res));
	int r;
	fuzz_head(buf, len, head_request, &res, &r);

	if (r == 1)
		fuzz_body(buf + res.head_len, len - res.head_len, piece);
	else
		fuzz_body(buf, len, piece);
	return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The request-head parser. One pass from the start of the buffer on every
 * call: each refusal is decided at a byte position from the bytes before
 * it, in buffer order, so a longer buffer can only reach the same decision
 * (or get further), and a strict prefix of a good head always needs more.
 * Where RFC 9110/9112 let a recipient choose between repairing and
 * refusing, this refuses; where two implementations could read a field two
 * ways (lists, signs, leading zeros, odd hosts), this refuses too.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gateway/http.h"

#define HTTP_BAD -400
#define HTTP_URI_TOO_LONG -414
#define HTTP_HEAD_TOO_LARGE -431
#define HTTP_NOT_IMPLEMENTED -501

struct http_parse {
	struct gw_http_request req;
	bool http10;
	bool connect;
	bool have_host;
	bool have_length;
	bool have_chunked;
	bool connection_upgrade;
	bool have_upgrade;
};

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_alpha(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* RFC 9110 tchar. */
static bool is_tchar(char c)
{
	if (is_alpha(c) || is_digit(c))
		return true;
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_token(struct sv s)
{
	if (s.len == 0)
		return false;
	for (size_t i = 0; i < s.len; i++)
		if (!is_tchar(s.p[i]))
			return false;
	return true;
}

static bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static struct sv trim_ows(struct sv s)
{
	while (s.len > 0 && is_ows(s.p[0])) {
		s.p++;
		s.len--;
	}
	while (s.len > 0 && is_ows(s.p[s.len - 1]))
		s.len--;
	return s;
}

/* 1..65535 as 1-5 digits without a leading zero: "0443" is 443 to some
 * and 291 (octal) to others. */
static bool is_port(const char *p, size_t n)
{
	if (n == 0 || n > 5 || p[0] == '0')
		return false;
	uint32_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (!is_digit(p[i]))
			return false;
		v = v * 10 + (uint32_t)(p[i] - '0');
	}
	return v <= 65535;
}

/*
 * host [":" port], the host a registered name of letters, digits, '-',
 * '.', '_' and '~' (no percent-encoding, sub-delims or userinfo) or an
 * IPv6 literal in brackets (hex digits, ':' and '.'; no zone, no
 * IPvFuture). Stricter than RFC 3986, so no resolver reads it differently.
 */
static bool is_authority(struct sv a, bool need_port)
{
	size_t i = 0;
	if (a.len == 0)
		return false;
	if (a.p[0] == '[') {
		bool colon = false;
		for (i = 1; i < a.len && a.p[i] != ']'; i++) {
			char c = a.p[i];
			if (c == ':')
				colon = true;
			else if (!is_digit(c) &&
				 !(sv_ascii_lower(c) >= 'a' && sv_ascii_lower(c) <= 'f') &&
				 c != '.')
				return false;
		}
		if (i == a.len || !colon || i < 3)
			return false;
		i++; /* the ']' */
	} else {
		for (; i < a.len && a.p[i] != ':'; i++) {
			char c = a.p[i];
			if (!is_alpha(c) && !is_digit(c) && c != '-' && c != '.' && c != '_' &&
			    c != '~')
				return false;
		}
		if (i == 0)
			return false;
	}
	if (i == a.len)
		return !need_port;
	if (a.p[i] != ':')
		return false;
	return is_port(a.p + i + 1, a.len - i - 1);
}

/* The host and the port of an authority already checked by
 * is_authority(); port empty when absent. */
static void split_authority(struct sv a, struct sv *host, struct sv *port)
{
	size_t end = 0;
	if (a.len && a.p[0] == '[') {
		while (end < a.len && a.p[end] != ']')
			end++;
		end = end < a.len ? end + 1 : end;
	} else {
		while (end < a.len && a.p[end] != ':')
			end++;
	}
	*host = sv_head(a, end);
	*port = end < a.len ? sv_skip(a, end + 1) : sv_skip(a, a.len);
}

/*
 * Whether Host names the request target's authority: the same text
 * (ignoring case), or, for CONNECT, Host without a port naming the
 * target's host when the target's port is the default of a scheme a
 * tunnel carries (80 or 443): RFC 9110 lets Host omit a default port, and
 * Node's proxy agent (undici) sends "CONNECT h:443" with "Host: h". A Host
 * with another port, or another host, still differs.
 */
static bool host_names_authority(struct sv host, struct sv authority, bool connect)
{
	if (sv_equal_ci(host, authority))
		return true;
	if (!connect)
		return false;
	struct sv hh, hp, ah, ap;
	split_authority(host, &hh, &hp);
	split_authority(authority, &ah, &ap);
	return hp.len == 0 && sv_equal_ci(hh, ah) &&
	       (sv_equal_cstr(ap, "443") || sv_equal_cstr(ap, "80"));
}

/* Methods are case-sensitive tokens (RFC 9110 9.1). The gateway frames a
 * response by its request's method (HEAD has no body, a 2xx to CONNECT is
 * a tunnel), so a method it does not know, or knows in another case
 * ("head" is HEAD to some servers), could frame a response differently
 * from the upstream: refused instead (501). TRACE is left out: it echoes
 * the request, injected credentials included. */
static bool known_method(struct sv m)
{
	/* clang-format off */
	static const char *const methods[] = {
		"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT",
		/* WebDAV (RFC 4918, 3253, 4791, 5323) */
		"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT",
		"MKCALENDAR", "SEARCH", NULL,
	};
	/* clang-format on */
	for (size_t i = 0; methods[i]; i++)
		if (sv_equal_cstr(m, methods[i]))
			return true;
	return false;
}

/* 1*DIGIT without a leading zero (but "0"), fitting uint64_t. */
static bool parse_length(struct sv v, uint64_t *ret)
{
	uint64_t n = 0;
	if (v.len == 0 || (v.p[0] == '0' && v.len > 1))
		return false;
	for (size_t i = 0; i < v.len; i++) {
		if (!is_digit(v.p[i]))
			return false;
		uint64_t d = (uint64_t)(v.p[i] - '0');
		if (n > (UINT64_MAX - d) / 10)
			return false;
		n = n * 10 + d;
	}
	*ret = n;
	return true;
}

/* The request line (without CRLF; bytes already known to be VCHAR or SP). */
static int parse_request_line(struct http_parse *st, const char *line, size_t len)
{
	struct gw_http_request *req = &st->req;
	const char *sp1 = memchr(line, ' ', len);
	const char *sp2 = NULL;
	for (size_t i = len; i > 0; i--)
		if (line[i - 1] == ' ') {
			sp2 = line + i - 1;
			break;
		}
	if (!sp1 || sp1 == sp2)
		return HTTP_BAD;

	req->method = (struct sv){ line, (size_t)(sp1 - line) };
	req->target = (struct sv){ sp1 + 1, (size_t)(sp2 - sp1 - 1) };
	struct sv version = { sp2 + 1, (size_t)(line + len - sp2 - 1) };
	if (!is_token(req->method) || req->target.len == 0)
		return HTTP_BAD;
	if (!known_method(req->method))
		return HTTP_NOT_IMPLEMENTED;
	if (memchr(req->target.p, ' ', req->target.len))
		return HTTP_BAD;
	/* HTTP-name is case-sensitive. */
	if (version.len != 8 || memcmp(version.p, "HTTP/1.", 7) != 0 ||
	    (version.p[7] != '1' && version.p[7] != '0'))
		return HTTP_BAD;
	st->http10 = version.p[7] == '0';
	/* Methods are case-sensitive: "connect" is some other method. */
	st->connect = req->method.len == 7 && memcmp(req->method.p, "CONNECT", 7) == 0;

	struct sv t = req->target;
	if (st->connect) {
		if (!is_authority(t, true))
			return HTTP_BAD;
		req->form = GW_FORM_AUTHORITY;
		req->authority = t;
		return 0;
	}
	if (t.p[0] == '/') {
		req->form = GW_FORM_ORIGIN;
		req->path = t;
		return 0;
	}
	if (t.len > 7 && sv_equal_ci_cstr((struct sv){ t.p, 7 }, "http://")) {
		/* The authority ends at the path, which must be there: '?',
		 * '#' or '@' in it fail is_authority(). */
		const char *slash = memchr(t.p + 7, '/', t.len - 7);
		if (!slash)
			return HTTP_BAD;
		struct sv a = { t.p + 7, (size_t)(slash - t.p - 7) };
		if (!is_authority(a, false))
			return HTTP_BAD;
		req->form = GW_FORM_ABSOLUTE;
		req->authority = a;
		req->path = (struct sv){ slash, (size_t)(t.p + t.len - slash) };
		return 0;
	}
	/* Asterisk-form, authority-form without CONNECT, other schemes. */
	return HTTP_BAD;
}

static int parse_connection(struct http_parse *st, struct sv v)
{
	size_t start = 0;
	for (size_t i = 0; i <= v.len; i++) {
		if (i < v.len && v.p[i] != ',')
			continue;
		struct sv e = trim_ows((struct sv){ v.p + start, i - start });
		start = i + 1;
		/* Empty elements are allowed (RFC 9110 5.6.1); anything
		 * else must be a token. */
		if (e.len == 0)
			continue;
		if (!is_token(e))
			return HTTP_BAD;
		/* A field the framing or routing rests on cannot be made
		 * hop-by-hop: a proxy dropping it would pass a body on as the
		 * next request (smuggling). */
		if (sv_equal_ci_cstr(e, "content-length") ||
		    sv_equal_ci_cstr(e, "transfer-encoding") || sv_equal_ci_cstr(e, "host"))
			return HTTP_BAD;
		if (sv_equal_ci_cstr(e, "close"))
			st->req.connection_close = true;
		else if (sv_equal_ci_cstr(e, "upgrade"))
			st->connection_upgrade = true;
	}
	return 0;
}

/* A complete field line; name is a token, value trimmed and checked. */
static int parse_field(struct http_parse *st, struct sv name, struct sv value)
{
	struct gw_http_request *req = &st->req;

	if (sv_equal_ci_cstr(name, "Transfer-Encoding")) {
		if (st->http10)
			return HTTP_NOT_IMPLEMENTED;
		/* One field, exactly "chunked": no list, no other coding. */
		if (st->have_chunked || st->have_length || st->connect ||
		    !sv_equal_ci_cstr(value, "chunked"))
			return HTTP_BAD;
		st->have_chunked = true;
		req->body = GW_BODY_CHUNKED;
	} else if (sv_equal_ci_cstr(name, "Content-Length")) {
		uint64_t n;
		if (st->have_length || st->have_chunked || st->connect || !parse_length(value, &n))
			return HTTP_BAD;
		st->have_length = true;
		req->body = GW_BODY_LENGTH;
		req->content_length = n;
	} else if (sv_equal_ci_cstr(name, "Host")) {
		if (st->have_host || !is_authority(value, false))
			return HTTP_BAD;
		/* Where the request goes must not depend on which of the two
		 * a server looks at. */
		if (req->form != GW_FORM_ORIGIN &&
		    !host_names_authority(value, req->authority, st->connect))
			return HTTP_BAD;
		st->have_host = true;
		req->host = value;
	} else if (sv_equal_ci_cstr(name, "Connection")) {
		return parse_connection(st, value);
	} else if (sv_equal_ci_cstr(name, "Upgrade")) {
		if (value.len > 0)
			st->have_upgrade = true;
	}
	return 0;
}

/*
 * Looks at the line ending at the CR at buf[i]: 0 to go on (a CRLF at
 * i, i+1), 1 when the LF has not arrived yet, or a refusal.
 */
static int line_end(const char *buf, size_t len, size_t i)
{
	/* The LF would make the head one byte too long. */
	if (i + 1 >= GW_HTTP_HEAD_MAX)
		return HTTP_HEAD_TOO_LARGE;
	if (i + 1 >= len)
		return 1;
	return buf[i + 1] == '\n' ? 0 : HTTP_BAD;
}

/*
 * One field line at buf[*pi] (not empty, not starting with whitespace):
 * 1 with the name and trimmed value and *pi past its CRLF, 0 for more
 * bytes, or a refusal (over_limit when the head grows past its maximum).
 * obs_text: bytes >= 0x80 allowed in the value (responses only).
 */
static int read_field(const char *buf, size_t len, size_t *pi, bool obs_text, int over_limit,
		      struct sv *ret_name, struct sv *ret_value)
{
	size_t i = *pi;
	size_t name_start = i;
	for (;; i++) {
		if (i >= GW_HTTP_HEAD_MAX)
			return over_limit;
		if (i >= len)
			return 0;
		if (buf[i] == ':')
			break;
		/* Also SP or HTAB before the colon, CR/LF without one. */
		if (!is_tchar(buf[i]))
			return HTTP_BAD;
	}
	struct sv name = { buf + name_start, i - name_start };
	if (name.len == 0)
		return HTTP_BAD;
	i++;
	size_t value_start = i;
	for (;; i++) {
		if (i >= GW_HTTP_HEAD_MAX)
			return over_limit;
		if (i >= len)
			return 0;
		unsigned char u = (unsigned char)buf[i];
		if (u == '\r')
			break;
		/* VCHAR, SP, HTAB (and obs-text where allowed). */
		if (u != '\t' && (u < 0x20 || u == 0x7f || (u >= 0x80 && !obs_text)))
			return HTTP_BAD;
	}
	int r = line_end(buf, len, i);
	if (r != 0)
		return r > 0 ? 0 : over_limit == HTTP_BAD ? HTTP_BAD : r;
	*ret_name = name;
	*ret_value = trim_ows((struct sv){ buf + value_start, i - value_start });
	*pi = i + 2;
	return 1;
}

static int parse_request(const char *buf, size_t len, struct http_parse *st)
{
	size_t i;
	int r;

	if (!buf)
		return len == 0 ? 0 : HTTP_BAD;

	/* The request line: VCHAR and SP only, CRLF-terminated. */
	for (i = 0;; i++) {
		if (i >= len)
			return 0;
		char c = buf[i];
		if (c == '\r')
			break;
		if (i >= GW_HTTP_LINE_MAX)
			return HTTP_URI_TOO_LONG;
		unsigned char u = (unsigned char)c;
		if (u < 0x20 || u >= 0x7f)
			return HTTP_BAD; /* bare LF, CTL, NUL, obs-text */
	}
	r = line_end(buf, len, i);
	if (r != 0)
		return r > 0 ? 0 : r;
	r = parse_request_line(st, buf, i);
	if (r < 0)
		return r;
	i += 2;

	/* Field lines, up to the empty line. */
	for (;;) {
		if (i >= GW_HTTP_HEAD_MAX)
			return HTTP_HEAD_TOO_LARGE;
		if (i >= len)
			return 0;
		char c = buf[i];
		if (c == '\r') {
			r = line_end(buf, len, i);
			if (r != 0)
				return r > 0 ? 0 : r;
			i += 2;
			break;
		}
		if (is_ows(c))
			return HTTP_BAD; /* obs-fold, or whitespace before the first field */
		if (st->req.n_fields == GW_HTTP_MAX_FIELDS)
			return HTTP_HEAD_TOO_LARGE;

		struct sv name, value;
		r = read_field(buf, len, &i, false, HTTP_HEAD_TOO_LARGE, &name, &value);
		if (r <= 0)
			return r;

		r = parse_field(st, name, value);
		if (r < 0)
			return r;
		st->req.fields[st->req.n_fields++] = (struct gw_http_field){ name, value };
	}

	/* HTTP/1.0 clients (Python's urllib, pip, openssl s_client) send
	 * CONNECT and absolute-form requests without Host: the target names
	 * the host. Everywhere else Host is required. */
	if (!st->have_host && !(st->http10 && st->req.form != GW_FORM_ORIGIN))
		return HTTP_BAD;
	st->req.upgrade = st->connection_upgrade && st->have_upgrade;
	/* HTTP/1.0 has no persistent connections here (no keep-alive). */
	if (st->http10)
		st->req.connection_close = true;
	st->req.http10 = st->http10;
	st->req.head_len = i;
	return 1;
}

int gw_http_parse_request(const char *buf, size_t len, struct gw_http_request *ret)
{
	struct http_parse st = { 0 };
	int r = parse_request(buf, len, &st);
	/* A refusal too: what was parsed before it, for the audit line. */
	if (r != 0 && ret)
		*ret = st.req;
	return r;
}

/*
 * Response heads come from upstreams, which are trusted less than the
 * operator but more than the sandbox: the same framing rules hold (one
 * length, no length with chunked, no obs-fold, CRLF only), but field
 * values may carry obs-text (filenames in Content-Disposition, ...).
 */
int gw_http_parse_response(const char *buf, size_t len, bool head_request,
			   struct gw_http_response *ret)
{
	struct gw_http_response res = { 0 };
	bool have_length = false, have_te = false, chunked_last = false;
	size_t i;
	int r;

	if (!buf)
		return len == 0 ? 0 : HTTP_BAD;
	for (i = 0;; i++) {
		if (i >= len)
			return 0;
		if (buf[i] == '\r')
			break;
		if (i >= GW_HTTP_LINE_MAX)
			return HTTP_BAD;
		unsigned char u = (unsigned char)buf[i];
		if (u != '\t' && (u < 0x20 || u == 0x7f))
			return HTTP_BAD;
	}
	r = line_end(buf, len, i);
	if (r != 0)
		return r > 0 ? 0 : HTTP_BAD;
	/* "HTTP/1.x SSS[ reason]" */
	if (i < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || (buf[7] != '0' && buf[7] != '1') ||
	    buf[8] != ' ' || !is_digit(buf[9]) || !is_digit(buf[10]) || !is_digit(buf[11]) ||
	    (i > 12 && buf[12] != ' '))
		return HTTP_BAD;
	res.minor = buf[7] - '0';
	res.status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
	if (res.status < 100)
		return HTTP_BAD;
	i += 2;
	for (;;) {
		if (i >= GW_HTTP_HEAD_MAX)
			return HTTP_BAD;
		if (i >= len)
			return 0;
		char c = buf[i];
		if (c == '\r') {
			r = line_end(buf, len, i);
			if (r != 0)
				return r > 0 ? 0 : HTTP_BAD;
			i += 2;
			break;
		}
		if (is_ows(c) || res.n_fields == GW_HTTP_MAX_FIELDS)
			return HTTP_BAD;
		struct sv name, value;
		r = read_field(buf, len, &i, true, HTTP_BAD, &name, &value);
		if (r <= 0)
			return r;
		if (sv_equal_ci_cstr(name, "Content-Length")) {
			if (have_length || !parse_length(value, &res.content_length))
				return HTTP_BAD;
			have_length = true;
		} else if (sv_equal_ci_cstr(name, "Transfer-Encoding")) {
			/* Only "chunked", alone: gzip etc. as transfer codings
			 * are not passed on (nobody uses them). */
			if (have_te || !sv_equal_ci_cstr(value, "chunked"))
				return HTTP_BAD;
			have_te = chunked_last = true;
		} else if (sv_equal_ci_cstr(name, "Connection")) {
			struct http_parse st = { 0 };
			if (parse_connection(&st, value) < 0)
				return HTTP_BAD;
			if (st.req.connection_close)
				res.connection_close = true;
		}
		res.fields[res.n_fields++] = (struct gw_http_field){ name, value };
	}
	if (have_length && have_te)
		return HTTP_BAD;
	if (res.minor == 0 && have_te)
		return HTTP_BAD;
	if ((res.status >= 100 && res.status < 200) || res.status == 204 || res.status == 304 ||
	    head_request)
		res.body = GW_BODY_NONE;
	else if (chunked_last)
		res.body = GW_BODY_CHUNKED;
	else if (have_length)
		res.body = GW_BODY_LENGTH;
	else
		res.body = GW_BODY_CLOSE;
	if (res.minor == 0)
		res.connection_close = true;
	res.head_len = i;
	if (ret)
		*ret = res;
	return 1;
}

/*
 * Chunked framing, byte by byte. Sizes are 1-16 hex digits; extensions
 * (";name[=value]") are tolerated up to GW_CHUNK_LINE_MAX bytes of line;
 * trailer fields up to GW_CHUNK_TRAILER_MAX bytes in all. CRLF only.
 */
enum {
	CH_SIZE = 0, /* reading hex digits */
	CH_EXT,	     /* after ';', up to CR */
	CH_BWS,	     /* whitespace after the digits: only more of it, ';' or CR */
	CH_SIZE_LF,  /* CR seen */
	CH_DATA,     /* remaining bytes of data */
	CH_DATA_CR,  /* CRLF after the data */
	CH_DATA_LF,
	CH_TRAILER,	 /* at the start of a trailer line */
	CH_TRAILER_LINE, /* inside a trailer line */
	CH_TRAILER_LF,	 /* CR of a trailer line seen */
	CH_END_LF,	 /* CR of the final empty line seen */
	CH_DONE,
};

int gw_chunked_feed(struct gw_chunked *c, const char *p, size_t n, size_t *ret_used,
		    gw_chunk_data_fn fn, void *ud)
{
	size_t i = 0;
	while (i < n && c->state != CH_DONE) {
		char ch = p[i];
		switch (c->state) {
		case CH_SIZE: {
			int d = -1;
			if (ch >= '0' && ch <= '9')
				d = ch - '0';
			else if (ch >= 'a' && ch <= 'f')
				d = ch - 'a' + 10;
			else if (ch >= 'A' && ch <= 'F')
				d = ch - 'A' + 10;
			if (d >= 0) {
				if (++c->digits > 16)
					return -1;
				c->remaining = c->remaining * 16 + (uint64_t)d;
				i++;
				break;
			}
			if (c->digits == 0)
				return -1;
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			else if (ch == ';')
				c->state = CH_EXT;
			else if (ch == ' ' || ch == '\t')
				c->state = CH_BWS;
			else
				return -1;
			c->line = c->digits + 1;
			i++;
			break;
		}
		case CH_BWS:
			/* "5 5" must not be read as 5 here and 55 upstream. */
			if (++c->line > GW_CHUNK_LINE_MAX)
				return -1;
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			else if (ch == ';')
				c->state = CH_EXT;
			else if (ch != ' ' && ch != '\t')
				return -1;
			i++;
			break;
		case CH_EXT: {
			unsigned char u = (unsigned char)ch;
			if (++c->line > GW_CHUNK_LINE_MAX)
				return -1;
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			else if (u != '\t' && (u < 0x20 || u == 0x7f))
				return -1;
			i++;
			break;
		}
		case CH_SIZE_LF:
			if (ch != '\n')
				return -1;
			i++;
			c->digits = 0;
			if (c->remaining == 0) {
				c->state = CH_TRAILER;
			} else {
				c->state = CH_DATA;
				c->total += c->remaining;
			}
			break;
		case CH_DATA: {
			size_t take = n - i;
			if ((uint64_t)take > c->remaining)
				take = (size_t)c->remaining;
			if (fn && fn(p + i, take, ud) < 0)
				return -2;
			i += take;
			c->remaining -= take;
			if (c->remaining == 0)
				c->state = CH_DATA_CR;
			break;
		}
		case CH_DATA_CR:
			if (ch != '\r')
				return -1;
			c->state = CH_DATA_LF;
			i++;
			break;
		case CH_DATA_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_SIZE;
			i++;
			break;
		case CH_TRAILER:
			if (ch == '\r') {
				c->state = CH_END_LF;
			} else if (!is_tchar(ch)) {
				return -1; /* obs-fold, bare LF, not a field name */
			} else {
				c->state = CH_TRAILER_LINE;
				c->colon = false;
				if (++c->trailer > GW_CHUNK_TRAILER_MAX)
					return -1;
			}
			i++;
			break;
		case CH_TRAILER_LINE: {
			unsigned char u = (unsigned char)ch;
			if (++c->trailer > GW_CHUNK_TRAILER_MAX)
				return -1;
			if (ch == '\r') {
				if (!c->colon)
					return -1; /* a trailer field is name ":" value */
				c->state = CH_TRAILER_LF;
			} else if (u != '\t' && (u < 0x20 || u == 0x7f)) {
				return -1;
			} else if (ch == ':') {
				c->colon = true;
			} else if (!c->colon && !is_tchar(ch)) {
				return -1;
			}
			i++;
			break;
		}
		case CH_TRAILER_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_TRAILER;
			i++;
			break;
		case CH_END_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_DONE;
			i++;
			break;
		default:
			return -1;
		}
	}
	*ret_used = i;
	return c->state == CH_DONE ? 1 : 0;
}

bool gw_http_is_hop_by_hop(struct sv name, const struct sv *conn_tokens, size_t n_tokens)
{
	/* clang-format off */
	static const char *const hop[] = { "connection", "keep-alive", "proxy-connection",
					   "proxy-authorization", "proxy-authenticate", "te",
					   "trailer", "transfer-encoding", "upgrade", NULL };
	/* clang-format on */
	for (size_t i = 0; hop[i]; i++)
		if (sv_equal_ci_cstr(name, hop[i]))
			return true;
	for (size_t i = 0; i < n_tokens; i++)
		if (sv_equal_ci(name, conn_tokens[i]))
			return true;
	return false;
}

size_t gw_http_connection_tokens(const struct gw_http_field *f, size_t n, struct sv *out,
				 size_t max)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!sv_equal_ci_cstr(f[i].name, "connection"))
			continue;
		const char *p = f[i].value.p, *end = p + f[i].value.len;
		while (p < end && k < max) {
			while (p < end && (*p == ',' || *p == ' ' || *p == '\t'))
				p++;
			const char *s = p;
			while (p < end && *p != ',' && *p != ' ' && *p != '\t')
				p++;
			if (p > s)
				out[k++] = (struct sv){ s, (size_t)(p - s) };
		}
	}
	return k;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A strict HTTP/1.1 request-head parser for the gateway.
 *
 * The head (request line and header section, up to the empty line) comes
 * from a hostile sandbox and decides where a request goes and how its body
 * is framed, so every way two servers could read it differently is refused
 * rather than repaired (request smuggling). Bodies are not parsed here: the
 * result says how the body is framed (none, Content-Length, chunked).
 *
 * The parser works on a buffer holding the bytes received so far: it either
 * needs more bytes, refuses the head with an HTTP status to answer, or
 * returns the head with every field as a view into the buffer.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strview.h"

#define GW_HTTP_LINE_MAX (8 * 1024)  /* request line, without CRLF */
#define GW_HTTP_HEAD_MAX (64 * 1024) /* whole head, request line and final CRLF included */
#define GW_HTTP_MAX_FIELDS 128

struct gw_http_field {
	struct sv name;	 /* as received (a token; compare case-insensitively) */
	struct sv value; /* leading and trailing spaces and tabs removed */
};

enum gw_http_body {
	GW_BODY_NONE = 0,
	GW_BODY_LENGTH,	 /* content_length bytes */
	GW_BODY_CHUNKED, /* Transfer-Encoding: chunked */
	GW_BODY_CLOSE,	 /* responses only: until the connection closes */
};

enum gw_http_form {
	GW_FORM_ORIGIN = 0, /* "/path?query" */
	GW_FORM_ABSOLUTE,   /* "http://host[:port]/path?query" (plain HTTP proxying) */
	GW_FORM_AUTHORITY,  /* "host:port" (CONNECT only) */
};

struct gw_http_request {
	struct sv method; /* a token */
	struct sv target; /* as received */
	enum gw_http_form form;
	struct sv authority; /* absolute-form and CONNECT: host[:port] from the target */
	struct sv path;	     /* origin- and absolute-form: from the first '/' (query included) */
	struct sv host;	     /* the Host header's value */
	struct gw_http_field fields[GW_HTTP_MAX_FIELDS];
	size_t n_fields;
	enum gw_http_body body;
	uint64_t content_length;
	bool connection_close; /* "Connection: close" */
	bool upgrade;	       /* "Connection: upgrade" and an Upgrade header */
	bool http10;	       /* HTTP/1.0 (no chunked responses for it) */
	size_t head_len;       /* bytes of the head, final CRLF included */
};

/*
 * Parses the head at the start of buf (len bytes so far).
 * Returns 1 and fills *ret when a whole head is there; 0 when more bytes
 * are needed (and the limits still allow them); or a negative HTTP status
 * to answer before closing the connection, with *ret holding what was
 * parsed before the refusal (the method, target, authority, path and Host
 * when they came before it; empty views otherwise):
 *   -400  malformed: bare CR or LF, obs-fold (a line starting with space or
 *         tab), a control byte or byte >= 0x80 in the request line, a field
 *         name that is not a token, a space before the colon, a CTL other
 *         than tab in a field value, a method that is not a token, a target
 *         with a space, a version other than HTTP/1.1 or HTTP/1.0, no Host
 *         (HTTP/1.0 CONNECT and absolute-form may omit it)
 *         or more than one Host, Host different from the absolute-form
 *         authority, Content-Length that is not 1*DIGIT (or overflows), two
 *         Content-Length fields (even equal ones), Content-Length together
 *         with Transfer-Encoding, a Transfer-Encoding other than exactly
 *         "chunked" (any other coding, a list, repeats), a CONNECT target
 *         that is not host:port, any other method with an authority-form
 *         target, an asterisk-form target. Host must equal the CONNECT or
 *         absolute-form authority, except that on CONNECT to port 80 or
 *         443 it may leave that port out (Node's proxy agent does).
 *   -414  request line longer than GW_HTTP_LINE_MAX
 *   -431  head longer than GW_HTTP_HEAD_MAX, or more than GW_HTTP_MAX_FIELDS fields
 *   -501  Transfer-Encoding on HTTP/1.0; a method the gateway does not
 *         know (methods are case-sensitive: "head" is not HEAD), and TRACE
 * Never reads past buf + len.
 */
int gw_http_parse_request(const char *buf, size_t len, struct gw_http_request *ret);

/* An upstream's response head. */
struct gw_http_response {
	int status;
	int minor; /* HTTP/1.minor */
	struct gw_http_field fields[GW_HTTP_MAX_FIELDS];
	size_t n_fields;
	enum gw_http_body body;
	uint64_t content_length;
	bool connection_close;
	size_t head_len;
};

/*
 * Parses a response head: 1 and *ret filled when complete, 0 for more
 * bytes, -400 when malformed (the gateway answers 502). The body's framing
 * follows RFC 9112 6.3 (HEAD, 1xx, 204, 304: none). Field values may hold
 * obs-text; framing is as strict as for requests.
 */
int gw_http_parse_response(const char *buf, size_t len, bool head_request,
			   struct gw_http_response *ret);

#define GW_CHUNK_LINE_MAX 1024	  /* a chunk-size line with its extensions */
#define GW_CHUNK_TRAILER_MAX 8192 /* all trailer fields */

/* The state of a chunked body being read; zero-initialize. */
struct gw_chunked {
	int state;
	unsigned digits;
	uint64_t remaining;
	uint64_t total; /* data bytes so far */
	size_t line;
	size_t trailer;
	bool colon; /* inside a trailer line: its colon was seen */
};

typedef int (*gw_chunk_data_fn)(const char *p, size_t n, void *ud);

/*
 * Feeds n bytes of a chunked body. Calls fn (when not NULL) with every
 * piece of chunk data. *ret_used is how many bytes belong to the body
 * (all of them until the end). Returns 1 at the end of the body, 0 when
 * it goes on, -1 on malformed framing, -2 when fn failed.
 */
int gw_chunked_feed(struct gw_chunked *c, const char *p, size_t n, size_t *ret_used,
		    gw_chunk_data_fn fn, void *ud);

/*
 * Hop-by-hop fields: the fixed set (Connection, Keep-Alive,
 * Proxy-Connection, Proxy-Authorization, Proxy-Authenticate, TE, Trailer,
 * Transfer-Encoding, Upgrade) and the names a Connection field lists.
 * gw_http_connection_tokens collects those names (at most max) from the
 * fields of a head.
 */
bool gw_http_is_hop_by_hop(struct sv name, const struct sv *conn_tokens, size_t n_tokens);
size_t gw_http_connection_tokens(const struct gw_http_field *f, size_t n, struct sv *out,
				 size_t max);

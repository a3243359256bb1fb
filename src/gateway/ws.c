/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "gateway/vault.h"
#include "gateway/ws.h"

/* Payload bytes redacted per step: bounds what is gathered before a
 * fragment is written. */
#define WS_STEP (16 * 1024)
#define WS_OUT_MAX (WS_STEP + GW_SECRET_FORM_MAX + 64 * 1024)
#define WS_CONTROL_MAX 125

enum { OP_CONT = 0, OP_TEXT = 1, OP_BINARY = 2, OP_CLOSE = 8, OP_PING = 9, OP_PONG = 10 };

struct gw_ws {
	const struct gw_vault *vault;
	/* The frame being read. */
	unsigned char hdr[10];
	size_t hdr_len, hdr_need;
	bool in_payload;
	bool fin;
	int opcode;
	uint64_t left; /* payload bytes still to come */
	/* A control frame's payload, gathered whole. */
	char ctl[WS_CONTROL_MAX];
	size_t ctl_len;
	/* The data message under way. */
	bool in_message;
	int msg_opcode;	  /* text or binary */
	bool msg_written; /* a first fragment went out: the rest are continuations */
	struct gw_redactor *red;
	struct buf out; /* redacted payload gathered for the next fragment */
	bool failed;
};

int gw_ws_new(const struct gw_vault *v, struct gw_ws **ret)
{
	struct gw_ws *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->vault = v;
	buf_init(&w->out, WS_OUT_MAX);
	*ret = w;
	return 0;
}

void gw_ws_free(struct gw_ws *w)
{
	if (!w)
		return;
	gw_redactor_free(w->red);
	if (w->out.data)
		explicit_bzero(w->out.data, w->out.cap);
	buf_free(&w->out);
	explicit_bzero(w->ctl, sizeof(w->ctl));
	free(w);
}

static int gather(const char *p, size_t n, void *ud)
{
	struct gw_ws *w = ud;
	return buf_append(&w->out, p, n) < 0 ? -ENOBUFS : 0;
}

/* Writes one unmasked frame: header, then payload. */
static int frame(bool fin, int opcode, const char *p, size_t n, gw_ws_emit_fn emit, void *ud)
{
	unsigned char h[10];
	size_t hl = 2;
	h[0] = (unsigned char)((fin ? 0x80 : 0) | opcode);
	if (n < 126) {
		h[1] = (unsigned char)n;
	} else if (n <= 0xffff) {
		h[1] = 126;
		h[2] = (unsigned char)(n >> 8);
		h[3] = (unsigned char)n;
		hl = 4;
	} else {
		h[1] = 127;
		for (int i = 0; i < 8; i++)
			h[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
		hl = 10;
	}
	int r = emit((const char *)h, hl, ud);
	if (r == 0 && n)
		r = emit(p, n, ud);
	return r;
}

/* The redacted payload gathered so far goes out as the next fragment of
 * the message (the last one with fin). */
static int flush_fragment(struct gw_ws *w, bool fin, gw_ws_emit_fn emit, void *ud)
{
	if (w->out.len == 0 && !fin)
		return 0;
	int op = w->msg_written ? OP_CONT : w->msg_opcode;
	int r = frame(fin, op, w->out.data, w->out.len, emit, ud);
	if (w->out.data)
		explicit_bzero(w->out.data, w->out.len);
	buf_reset(&w->out);
	w->msg_written = true;
	return r;
}

static int end_of_frame(struct gw_ws *w, gw_ws_emit_fn emit, void *ud)
{
	int r = 0;
	w->in_payload = false;
	w->hdr_len = 0;
	if (w->opcode & 8) {
		/* A control frame, redacted whole as one stream (a close
		 * frame's status code too: a secret may start in it) and kept
		 * within the 125 bytes allowed. */
		buf_reset(&w->out);
		struct gw_redactor *red = NULL;
		r = gw_redactor_new(w->vault, &red);
		if (r == 0)
			r = gw_redact(red, w->ctl, w->ctl_len, gather, w);
		if (r == 0)
			r = gw_redact_finish(red, gather, w);
		gw_redactor_free(red);
		explicit_bzero(w->ctl, sizeof(w->ctl));
		w->ctl_len = 0;
		if (r == 0) {
			size_t n = w->out.len < WS_CONTROL_MAX ? w->out.len : WS_CONTROL_MAX;
			r = frame(true, w->opcode, w->out.data, n, emit, ud);
		}
		buf_reset(&w->out);
		return r;
	}
	if (!w->fin)
		return flush_fragment(w, false, emit, ud);
	/* The message's last frame: what the redactor held back too. */
	r = gw_redact_finish(w->red, gather, w);
	if (r == 0)
		r = flush_fragment(w, true, emit, ud);
	gw_redactor_free(w->red);
	w->red = NULL;
	w->in_message = false;
	w->msg_written = false;
	return r;
}

/* A whole header is in w->hdr: check it and start the payload. */
static int start_frame(struct gw_ws *w, gw_ws_emit_fn emit, void *ud)
{
	unsigned char b0 = w->hdr[0], b1 = w->hdr[1];
	w->fin = b0 & 0x80;
	w->opcode = b0 & 0x0f;
	if (b0 & 0x70)
		return -EPROTO; /* reserved bits: no extension was agreed */
	if (b1 & 0x80)
		return -EPROTO; /* frames from a server are never masked */
	uint64_t len = b1 & 0x7f;
	if (len == 126) {
		len = (uint64_t)w->hdr[2] << 8 | w->hdr[3];
	} else if (len == 127) {
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | w->hdr[2 + i];
		if (len >> 63)
			return -EPROTO;
	}
	switch (w->opcode) {
	case OP_CLOSE:
	case OP_PING:
	case OP_PONG:
		if (!w->fin || len > WS_CONTROL_MAX)
			return -EPROTO;
		w->ctl_len = 0;
		break;
	case OP_TEXT:
	case OP_BINARY:
		if (w->in_message)
			return -EPROTO;
		if (gw_redactor_new(w->vault, &w->red) < 0)
			return -ENOMEM;
		w->in_message = true;
		w->msg_opcode = w->opcode;
		w->msg_written = false;
		break;
	case OP_CONT:
		if (!w->in_message)
			return -EPROTO;
		break;
	default:
		return -EPROTO;
	}
	w->left = len;
	w->in_payload = true;
	if (len == 0)
		return end_of_frame(w, emit, ud);
	return 0;
}

int gw_ws_feed(struct gw_ws *w, const char *p, size_t n, size_t *ret_used, gw_ws_emit_fn emit,
	       void *ud)
{
	size_t i = 0;
	int r = 0;
	*ret_used = 0;
	if (w->failed)
		return -EPROTO;
	while (i < n && r == 0) {
		if (!w->in_payload) {
			w->hdr[w->hdr_len++] = (unsigned char)p[i++];
			if (w->hdr_len == 2) {
				unsigned l = w->hdr[1] & 0x7f;
				w->hdr_need = l == 126 ? 4 : l == 127 ? 10 : 2;
			}
			if (w->hdr_len >= 2 && w->hdr_len == w->hdr_need)
				r = start_frame(w, emit, ud);
			continue;
		}
		size_t take = n - i;
		if (take > w->left)
			take = (size_t)w->left;
		if (w->opcode & 8) {
			memcpy(w->ctl + w->ctl_len, p + i, take);
			w->ctl_len += take;
		} else {
			if (take > WS_STEP)
				take = WS_STEP;
			r = gw_redact(w->red, p + i, take, gather, w);
			if (r == 0 && w->out.len >= WS_STEP)
				r = flush_fragment(w, false, emit, ud);
		}
		i += take;
		w->left -= take;
		if (r == 0 && w->left == 0)
			r = end_of_frame(w, emit, ud);
	}
	*ret_used = i;
	if (r == -EPROTO || r == -ENOBUFS)
		w->failed = true;
	return r == -ENOBUFS ? -EPROTO : r;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * WebSocket frames from an upstream, redacted (RFC 6455). After an upgrade
 * whose request carried a credential, an upstream that echoes it must not
 * carry it into the sandbox inside a frame any more than in an HTTP body.
 *
 * The gateway strips the client's extension offers from such an upgrade
 * (no permessage-deflate: compressed payloads could not be redacted) and
 * refuses a 101 that names an extension anyway. Then every frame from the
 * upstream is parsed and written again: data frames (text, binary and
 * their continuations) go through a redactor per message, so a secret
 * split across fragments is caught, and are re-fragmented as the output
 * comes (an intermediary may do so when no extension is in use, RFC 6455
 * 5.4); control frames (close, ping, pong) are redacted whole and stay
 * within 125 bytes. A frame that breaks the protocol (masked, reserved bits
 * or opcodes, a fragmented or oversized control frame, a continuation with
 * no message, a new message inside one) ends the connection.
 *
 * Frames from the client go upstream unchanged.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct gw_vault;
struct gw_ws;

typedef int (*gw_ws_emit_fn)(const char *p, size_t n, void *ud);

int gw_ws_new(const struct gw_vault *v, struct gw_ws **ret);
void gw_ws_free(struct gw_ws *w);

/*
 * Feeds n bytes from the upstream; calls emit with frames to pass on.
 * *ret_used: bytes consumed (all of them unless emit failed). Returns 0,
 * -EPROTO when the upstream broke the protocol, or emit's negative value.
 */
int gw_ws_feed(struct gw_ws *w, const char *p, size_t n, size_t *ret_used, gw_ws_emit_fn emit,
	       void *ud);

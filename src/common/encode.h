/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Byte encodings written in one place: hex, base64 (RFC 4648, with
 * padding) and percent-encoding (RFC 3986: every byte but the unreserved
 * ones as %XX, upper-case hex). Callers size the output with the _len
 * functions; nothing here allocates.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern const char enc_hex_lower[17]; /* "0123456789abcdef" */
extern const char enc_hex_upper[17];

/* 0..15 for a hex digit of either case, -1 otherwise. */
int enc_hex_value(char c);

/* Whether s (n bytes) is lower-case hex digits only (the canonical
 * spelling of the ids and digests airlock writes). */
bool enc_is_lower_hex(const char *s, size_t n);

/* Decodes exactly 2 * out_size lower-case hex digits; -EINVAL otherwise. */
int enc_unhex_lower(const char *in, size_t len, void *out, size_t out_size);

/* Lower-case hex of n bytes: 2n characters and a NUL into out. */
void enc_hex(const void *in, size_t n, char *out);

/* Decodes exactly 2 * out_size hex digits (either case) from in (len
 * bytes); -EINVAL when len is not that or a digit is not hex. */
int enc_unhex(const char *in, size_t len, void *out, size_t out_size);

/* Bytes of the base64 text for n input bytes (no NUL); SIZE_MAX on overflow. */
size_t enc_base64_len(size_t n);
/* Writes enc_base64_len(n) characters and a NUL. */
void enc_base64(const void *in, size_t n, char *out);

/* Bytes of the percent-encoded form of n bytes (no NUL). */
size_t enc_percent_len(const void *in, size_t n);
/* Writes enc_percent_len(in, n) characters and a NUL. With lower set, the
 * hex digits are lower case (a form some servers echo back). */
void enc_percent(const void *in, size_t n, bool lower, char *out);

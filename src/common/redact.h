/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Redaction of text that leaves airlock towards a user (events, logs,
 * reasons): every registered secret value (the vault's, in the forms in
 * which they may come back: raw, base64 of a Basic pair, percent-encoded,
 * JSON-escaped)
 * and the known shapes of credentials (Anthropic, OpenAI, Google API keys,
 * GitHub tokens, AWS access keys, Slack tokens, PEM private keys, bearer
 * authorization values) are replaced by "[REDACTED]".
 *
 * Values shorter than REDACT_MIN_VALUE are not registered (they would
 * redact ordinary words); the caller should refuse such secrets.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

#define REDACT_MIN_VALUE 8
#define REDACT_MARK "[REDACTED]"

struct redactor;

int redactor_new(struct redactor **ret);
void redactor_free(struct redactor *r);
/* Registers value (len bytes) and its derived forms. -EINVAL when too short
 * (or longer than 8 KiB, or when a form could show through REDACT_MARK),
 * -E2BIG past the redactor's limits; on failure nothing is registered. */
int redactor_add(struct redactor *r, const char *value, size_t len);
/* Appends text with every secret replaced to out (r may be NULL: known
 * shapes only). */
int redact(const struct redactor *r, const char *text, size_t len, struct buf *out);
/* Redacts a NUL-terminated string in place (the result is never longer
 * than REDACT_MARK per secret, and never longer than the input plus that
 * mark: the caller's buffer of size bytes bounds it). */
void redact_inplace(const struct redactor *r, char *s, size_t size);

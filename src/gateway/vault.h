/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The vault: the real credentials, which only the gateway process reads,
 * and the redactor that keeps them out of everything a sandbox or a log
 * could see (an upstream that echoes a key back, an error message).
 *
 * Vault file (YAML), readable by its owner alone:
 *
 *   secrets:
 *     anthropic: sk-ant-...
 *     github: ghp_...
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

#define GW_VAULT_MAX_SECRETS 256
#define GW_VAULT_NAME_MAX 64
#define GW_SECRET_MIN 8 /* shorter values cannot be redacted safely */
#define GW_SECRET_MAX 8192
/* Forms of a secret the gateway writes (base64 of a Basic pair, percent-
 * encoded): a little longer than the secret itself. */
#define GW_SECRET_FORM_MAX (4 * GW_SECRET_MAX)
#define GW_VAULT_MAX_FORMS 1024
#define GW_REDACTED "[redacted]"

struct gw_vault;

/*
 * Loads a vault file. Refused (-EPERM, saying why): a file group- or
 * world-readable or -writable, or not a regular file, or a symlink.
 * Also -EPERM: a file not owned by the user the gateway runs as.
 * Refused (-EINVAL, file:line:key): no "secrets" map, names that are not
 * 1..64 of [A-Za-z0-9_.-], duplicate names, values that are not strings,
 * values shorter than GW_SECRET_MIN or longer than GW_SECRET_MAX, values
 * with control characters (CR/LF would split headers), values that could
 * still show after redaction (containing GW_REDACTED, inside it, or
 * overlapping its ends), more than GW_VAULT_MAX_SECRETS entries, unknown
 * top-level keys. Messages never quote a value.
 */
int gw_vault_load(const char *path, struct gw_vault **ret, struct al_error *err);
/* The same from text, for tests (no file checks). */
int gw_vault_parse(const char *name, const char *text, size_t len, struct gw_vault **ret,
		   struct al_error *err);
/* Frees, wiping every secret from memory first (explicit_bzero). */
void gw_vault_free(struct gw_vault *v);
/* The checks gw_vault_load makes on the file (a regular file, the caller's,
 * no access for group or others, not too large) without reading a byte:
 * for processes that must never hold a vault value. */
int gw_vault_check_file(const char *path, struct al_error *err);

/* The secret named name, or NULL; *ret_len gets its length. */
const char *gw_vault_get(const struct gw_vault *v, const char *name, size_t *ret_len);
size_t gw_vault_count(const struct gw_vault *v);

/*
 * Adds another form of a secret to redact (the gateway adds the forms in
 * which it writes each credential: base64 of "user:secret" for Basic,
 * percent-encoded for a query parameter). Duplicates are ignored. -EINVAL
 * for a form shorter than GW_SECRET_MIN or one that could still show
 * after redaction (see gw_vault_load), -E2BIG past GW_VAULT_MAX_FORMS.
 */
int gw_vault_add_form(struct gw_vault *v, const char *p, size_t len);

/*
 * A streaming redactor: replaces every occurrence of every vault value,
 * and of every form added with gw_vault_add_form, with
 * GW_REDACTED in a stream fed in pieces of any size, including occurrences
 * split across pieces (leftmost first, the longest of those starting there,
 * then on after it). The output does not depend on how the stream is cut.
 * It holds back at most (longest secret - 1) bytes between calls;
 * gw_redact_finish flushes them. It uses the vault's secrets in place: the
 * vault must outlive it.
 */
struct gw_redactor;
/* Whether any form of any secret occurs in p[0..n). */
bool gw_vault_contains(const struct gw_vault *v, const char *p, size_t n);

int gw_redactor_new(const struct gw_vault *v, struct gw_redactor **ret);
void gw_redactor_free(struct gw_redactor *r);
/*
 * Feeds len bytes; calls emit(data, n, userdata) zero or more times with
 * output ready to pass on. Returns 0, or the first negative value emit
 * returned.
 */
int gw_redact(struct gw_redactor *r, const char *data, size_t len,
	      int (*emit)(const char *p, size_t n, void *ud), void *ud);
int gw_redact_finish(struct gw_redactor *r, int (*emit)(const char *p, size_t n, void *ud),
		     void *ud);

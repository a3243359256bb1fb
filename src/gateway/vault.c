/* SPDX-License-Identifier: Apache-2.0 */
#include "gateway/vault.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/config.h"

/* Bigger than any sane vault (256 secrets of 8 KiB would be 2 MiB, but a
 * real one holds a handful of API keys); checked before buffering. */
#define GW_VAULT_FILE_MAX (1024u * 1024)
/* The redactor works on at most this many new bytes at a time, so its
 * buffer is bounded by the longest secret, not by what a caller feeds. */
#define GW_REDACT_BLOCK 4096

struct gw_secret {
	char name[GW_VAULT_NAME_MAX + 1];
	char *value;
	size_t len;
};

/* A byte string the redactor replaces: a secret's value (borrowed from
 * it) or a form the gateway writes it in (owned). */
struct gw_form {
	char *p;
	size_t len;
	bool owned;
};

struct gw_vault {
	size_t n_secrets;
	size_t max_len; /* of every form */
	struct gw_secret secrets[GW_VAULT_MAX_SECRETS];
	size_t n_forms;
	struct gw_form forms[GW_VAULT_MAX_FORMS];
	bool first[256]; /* some form starts with this byte */
};

struct gw_redactor {
	const struct gw_vault *vault; /* borrowed: must outlive the redactor */
	char *buf;		      /* held-back bytes, then the block being scanned */
	size_t len;		      /* held-back bytes at buf[0..len) between calls */
	size_t cap;
	int error; /* sticky: the first emit failure */
};

void gw_vault_free(struct gw_vault *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n_secrets; i++) {
		if (v->secrets[i].value) {
			explicit_bzero(v->secrets[i].value, v->secrets[i].len);
			free(v->secrets[i].value);
		}
	}
	for (size_t i = 0; i < v->n_forms; i++)
		if (v->forms[i].owned) {
			explicit_bzero(v->forms[i].p, v->forms[i].len);
			free(v->forms[i].p);
		}
	explicit_bzero(v, sizeof(*v));
	free(v);
}

DEFINE_CLEANUP_FUNC(struct gw_vault, gw_vault_free)

static bool is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '-';
}

static bool valid_name(const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || len > GW_VAULT_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!is_name_char(name[i]))
			return false;
	return true;
}

/*
 * True when a redacted stream could show the secret even though every
 * occurrence in the input was replaced: an occurrence straddling or
 * inside a GW_REDACTED marker ("redacted", "ed]xyz..." after a marker,
 * "...xyz[re" before one).
 */
static bool overlaps_marker(const char *s, size_t len)
{
	static const char marker[] = GW_REDACTED;
	const size_t mlen = sizeof(marker) - 1;
	if (memmem(s, len, marker, mlen) || memmem(marker, mlen, s, len))
		return true;
	for (size_t k = 1; k < mlen && k <= len; k++) {
		/* The secret starts with the marker's last k bytes ... */
		if (memcmp(s, marker + mlen - k, k) == 0)
			return true;
		/* ... or ends with its first k bytes. */
		if (memcmp(s + len - k, marker, k) == 0)
			return true;
	}
	return false;
}

static int add_form(struct gw_vault *v, char *p, size_t len, bool owned)
{
	for (size_t i = 0; i < v->n_forms; i++)
		if (v->forms[i].len == len && memcmp(v->forms[i].p, p, len) == 0)
			return 0; /* already there */
	if (v->n_forms == GW_VAULT_MAX_FORMS)
		return -E2BIG;
	v->forms[v->n_forms++] = (struct gw_form){ .p = p, .len = len, .owned = owned };
	v->first[(unsigned char)p[0]] = true;
	if (len > v->max_len)
		v->max_len = len;
	return 1;
}

int gw_vault_add_form(struct gw_vault *v, const char *p, size_t len)
{
	if (!v || !p || len < GW_SECRET_MIN || len > GW_SECRET_FORM_MAX)
		return -EINVAL;
	if (overlaps_marker(p, len))
		return -EINVAL;
	char *copy = malloc(len);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, p, len);
	int r = add_form(v, copy, len, true);
	if (r <= 0) {
		explicit_bzero(copy, len);
		free(copy);
	}
	return r < 0 ? r : 0;
}

static int parse_secret(const struct config_node *map, size_t i, struct gw_secret *s,
			struct al_error *err)
{
	const char *name = config_map_key(map, i);
	const struct config_node *n = config_map_value(map, i);
	if (!name || !n)
		return config_error(map, "secrets", err, "malformed entry");
	/* The computed path shows the name with control characters masked. */
	if (!valid_name(name))
		return config_error(n, NULL, err,
				    "expected a name of 1 to %d letters, digits, '_', "
				    "'.' or '-'",
				    GW_VAULT_NAME_MAX);
	const char *value;
	int rc = config_get_str(n, NULL, &value, err);
	if (rc < 0)
		return rc;
	/* Messages never quote the value: it is the secret. */
	size_t len = strlen(value);
	if (len < GW_SECRET_MIN || len > GW_SECRET_MAX)
		return config_error(n, NULL, err, "expected a value of %d to %d bytes",
				    GW_SECRET_MIN, GW_SECRET_MAX);
	for (size_t j = 0; j < len; j++) {
		unsigned char c = (unsigned char)value[j];
		if (c < 0x20 || c == 0x7f)
			return config_error(n, NULL, err,
					    "control characters are not allowed in a value");
	}
	if (overlaps_marker(value, len))
		return config_error(
			n, NULL, err,
			"a value must not contain \"%s\", be part of it, start with its end "
			"or end with its start (redacted output would show it)",
			GW_REDACTED);
	memcpy(s->name, name, strlen(name) + 1);
	s->value = malloc(len + 1);
	if (!s->value)
		return al_error_set(err, -ENOMEM, "out of memory");
	memcpy(s->value, value, len + 1);
	s->len = len;
	return 0;
}

static int parse_doc(const struct config_doc *doc, struct gw_vault **ret, struct al_error *err)
{
	const struct config_node *root = config_root(doc);
	int rc = config_expect_kind(root, "(top level)", CONFIG_MAP, err);
	if (rc < 0)
		return rc;
	static const char *const keys[] = { "secrets", NULL };
	rc = config_map_check_keys(root, "(top level)", keys, err);
	if (rc < 0)
		return rc;
	/* An empty or misnamed file is a mistake, not a vault with nothing in it. */
	const struct config_node *map;
	rc = config_map_require(root, "(top level)", "secrets", &map, err);
	if (rc < 0)
		return rc == -ENOENT ? -EINVAL : rc;
	rc = config_expect_kind(map, "secrets", CONFIG_MAP, err);
	if (rc < 0)
		return rc;
	size_t count = config_node_count(map);
	if (count > GW_VAULT_MAX_SECRETS)
		return config_error(map, "secrets", err, "at most %d secrets",
				    GW_VAULT_MAX_SECRETS);
	_cleanup_(gw_vault_freep) struct gw_vault *v = calloc(1, sizeof(*v));
	if (!v)
		return al_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < count; i++) {
		rc = parse_secret(map, i, &v->secrets[i], err);
		if (rc < 0)
			return rc;
		v->n_secrets = i + 1;
		/* The config layer refuses duplicate keys already; this keeps
		 * gw_vault_get unambiguous whatever it does. */
		for (size_t j = 0; j < i; j++)
			if (strcmp(v->secrets[j].name, v->secrets[i].name) == 0)
				return config_error(config_map_value(map, i), NULL, err,
						    "the name is used twice");
		rc = add_form(v, v->secrets[i].value, v->secrets[i].len, false);
		if (rc < 0)
			return al_error_set(err, rc, "too many secrets");
	}
	*ret = TAKE_PTR(v);
	return 0;
}

int gw_vault_parse(const char *name, const char *text, size_t len, struct gw_vault **ret,
		   struct al_error *err)
{
	_cleanup_config_doc_ struct config_doc *doc = NULL;
	int rc = config_load_string(name, text, len, &doc, err);
	if (rc < 0)
		return rc;
	return parse_doc(doc, ret, err);
}

/* Opens the vault file and checks what it is, without reading it. */
static int open_checked(const char *path, struct al_error *err)
{
	/* O_NONBLOCK: a FIFO planted at the path must not hang the open. */
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		int e = -errno;
		if (e == -ELOOP)
			return al_error_set(
				err, -EPERM,
				"%s: is a symlink; point the gateway at the file itself", path);
		return al_error_set_errno(err, e, "%s: cannot open", path);
	}
	struct stat st;
	int r = 0;
	if (fstat(fd, &st) < 0)
		r = al_error_set_errno(err, -errno, "%s: cannot stat", path);
	else if (!S_ISREG(st.st_mode))
		r = al_error_set(err, -EPERM, "%s: not a regular file", path);
	else if (st.st_mode & 077)
		r = al_error_set(err, -EPERM,
				 "%s: readable or writable by group or others (mode %04o); "
				 "fix with: chmod 600 %s",
				 path, (unsigned)(st.st_mode & 07777), path);
	else if (st.st_uid != geteuid())
		r = al_error_set(err, -EPERM,
				 "%s: owned by uid %u, not by the gateway's uid %u; fix with: "
				 "chown %u %s",
				 path, (unsigned)st.st_uid, (unsigned)geteuid(),
				 (unsigned)geteuid(), path);
	else if (st.st_size < 0 || (uint64_t)st.st_size > GW_VAULT_FILE_MAX)
		r = al_error_set(err, -EFBIG, "%s: larger than the limit of %u bytes", path,
				 GW_VAULT_FILE_MAX);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int gw_vault_check_file(const char *path, struct al_error *err)
{
	int fd = open_checked(path, err);
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

int gw_vault_load(const char *path, struct gw_vault **ret, struct al_error *err)
{
	_cleanup_close_ int fd = open_checked(path, err);
	if (fd < 0)
		return fd;
	/* One byte more than the limit, to notice a file that grew since fstat. */
	const size_t cap = GW_VAULT_FILE_MAX + 1;
	char *text = malloc(cap);
	if (!text)
		return al_error_set(err, -ENOMEM, "out of memory");
	size_t len = 0;
	int rc = 0;
	while (len < cap) {
		ssize_t n = read(fd, text + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = al_error_set_errno(err, -errno, "%s: cannot read", path);
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (rc == 0 && len > GW_VAULT_FILE_MAX)
		rc = al_error_set(err, -EFBIG, "%s: larger than the limit of %u bytes", path,
				  GW_VAULT_FILE_MAX);
	if (rc == 0)
		rc = gw_vault_parse(path, text, len, ret, err);
	/* Only the bytes read can hold anything. */
	explicit_bzero(text, len);
	free(text);
	return rc;
}

const char *gw_vault_get(const struct gw_vault *v, const char *name, size_t *ret_len)
{
	if (!v || !name)
		return NULL;
	for (size_t i = 0; i < v->n_secrets; i++) {
		if (strcmp(v->secrets[i].name, name) == 0) {
			if (ret_len)
				*ret_len = v->secrets[i].len;
			return v->secrets[i].value;
		}
	}
	return NULL;
}

size_t gw_vault_count(const struct gw_vault *v)
{
	return v ? v->n_secrets : 0;
}

bool gw_vault_contains(const struct gw_vault *v, const char *p, size_t n)
{
	if (!v || !p)
		return false;
	for (size_t i = 0; i < v->n_forms; i++)
		if (memmem(p, n, v->forms[i].p, v->forms[i].len))
			return true;
	return false;
}

int gw_redactor_new(const struct gw_vault *v, struct gw_redactor **ret)
{
	if (!v || !ret)
		return -EINVAL;
	struct gw_redactor *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	/* max_len <= GW_SECRET_MAX: no overflow. */
	r->cap = (v->max_len ? v->max_len - 1 : 0) + GW_REDACT_BLOCK;
	r->buf = malloc(r->cap);
	if (!r->buf) {
		free(r);
		return -ENOMEM;
	}
	r->vault = v;
	*ret = r;
	return 0;
}

void gw_redactor_free(struct gw_redactor *r)
{
	if (!r)
		return;
	/* Held-back bytes may be the start of a secret. */
	if (r->buf) {
		explicit_bzero(r->buf, r->cap);
		free(r->buf);
	}
	free(r);
}

static int emit_bytes(struct gw_redactor *r, const char *p, size_t n,
		      int (*emit)(const char *p, size_t n, void *ud), void *ud)
{
	if (n == 0)
		return 0;
	int rc = emit(p, n, ud);
	if (rc < 0)
		r->error = rc;
	return rc < 0 ? rc : 0;
}

/*
 * Scans buf[0..len). At each position, the longest secret found there is
 * replaced and the scan resumes after it (leftmost first, then longest;
 * an occurrence overlapping one already replaced is not looked for, its
 * remaining bytes pass through). Unless final, the scan stops at the first
 * position where some secret could still match with more input; that tail,
 * a proper prefix of a secret and so at most max_len - 1 bytes, is kept.
 * Output therefore does not depend on how the stream was cut.
 */
static int scan(struct gw_redactor *r, bool final, int (*emit)(const char *p, size_t n, void *ud),
		void *ud)
{
	const struct gw_vault *v = r->vault;
	const char *buf = r->buf;
	size_t n = r->len, pos = 0, start = 0;
	while (pos < n) {
		if (!v->first[(unsigned char)buf[pos]]) {
			pos++;
			continue;
		}
		size_t best = 0, avail = n - pos;
		bool wait = false;
		for (size_t i = 0; i < v->n_forms; i++) {
			const struct gw_form *s = &v->forms[i];
			if (buf[pos] != s->p[0])
				continue;
			if (avail >= s->len) {
				if (s->len > best && memcmp(buf + pos, s->p, s->len) == 0)
					best = s->len;
			} else if (!final && memcmp(buf + pos, s->p, avail) == 0) {
				wait = true;
				break;
			}
		}
		if (wait)
			break;
		if (best == 0) {
			pos++;
			continue;
		}
		int rc = emit_bytes(r, buf + start, pos - start, emit, ud);
		if (rc < 0)
			return rc;
		rc = emit_bytes(r, GW_REDACTED, sizeof(GW_REDACTED) - 1, emit, ud);
		if (rc < 0)
			return rc;
		pos += best;
		start = pos;
	}
	int rc = emit_bytes(r, buf + start, pos - start, emit, ud);
	if (rc < 0)
		return rc;
	memmove(r->buf, r->buf + pos, n - pos);
	r->len = n - pos;
	explicit_bzero(r->buf + r->len, pos);
	return 0;
}

int gw_redact(struct gw_redactor *r, const char *data, size_t len,
	      int (*emit)(const char *p, size_t n, void *ud), void *ud)
{
	if (r->error)
		return r->error;
	while (len > 0) {
		size_t take = r->cap - r->len;
		if (take > len)
			take = len;
		memcpy(r->buf + r->len, data, take);
		r->len += take;
		data += take;
		len -= take;
		int rc = scan(r, false, emit, ud);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int gw_redact_finish(struct gw_redactor *r, int (*emit)(const char *p, size_t n, void *ud),
		     void *ud)
{
	if (r->error)
		return r->error;
	return scan(r, true, emit, ud);
}

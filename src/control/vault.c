/* SPDX-License-Identifier: Apache-2.0 */
/* `airlock vault`: the operator's edits of the vault file (vault.h). */
#include "control/vault.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/config.h"
#include "common/fdutil.h"
#include "gateway/vault.h"

struct entry {
	char *name;
	char *value;
	size_t len;
};

struct entries {
	struct entry v[GW_VAULT_MAX_SECRETS];
	size_t n;
};

static void entries_wipe(struct entries *e)
{
	for (size_t i = 0; i < e->n; i++) {
		free(e->v[i].name);
		if (e->v[i].value) {
			explicit_bzero(e->v[i].value, e->v[i].len);
			free(e->v[i].value);
		}
	}
	e->n = 0;
}

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

/* The entries of an existing vault (none when there is no file). The
 * file must be what the gateway accepts: a regular file, root's, 0600. */
static int load(const char *path, struct entries *e, struct al_error *err)
{
	struct stat st;
	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		return al_error_set_errno(err, -errno, "%s", path);
	}
	int r = gw_vault_check_file(path, err);
	if (r < 0)
		return r;
	_cleanup_config_doc_ struct config_doc *doc = NULL;
	if ((r = config_load_file(path, &doc, err)) < 0)
		return r;
	const struct config_node *root = config_root(doc);
	if (config_node_is_null(root) || config_node_count(root) == 0)
		return 0;
	const struct config_node *secrets;
	if ((r = config_expect_kind(root, NULL, CONFIG_MAP, err)) < 0 ||
	    (r = config_map_require(root, NULL, "secrets", &secrets, err)) < 0 ||
	    (r = config_expect_kind(secrets, NULL, CONFIG_MAP, err)) < 0)
		return r;
	size_t n = config_node_count(secrets);
	if (n > GW_VAULT_MAX_SECRETS)
		return al_error_set(err, -E2BIG, "%s: more than %d entries", path,
				    GW_VAULT_MAX_SECRETS);
	for (size_t i = 0; i < n; i++) {
		const char *v;
		if ((r = config_get_str(config_map_value(secrets, i), NULL, &v, err)) < 0)
			return r;
		struct entry *en = &e->v[e->n];
		en->name = strdup(config_map_key(secrets, i));
		en->len = strlen(v);
		en->value = strdup(v);
		e->n++;
		if (!en->name || !en->value)
			return al_error_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

/* Writes the entries as a new file beside path, then renames it over. */
static int save(const char *path, const struct entries *e, struct al_error *err)
{
	struct buf b;
	buf_init(&b, 4u * 1024 * 1024);
	int r = buf_append_str(&b, "# airlock vault: written by `airlock vault`; read by the "
				   "gateway alone\nsecrets:\n");
	for (size_t i = 0; r >= 0 && i < e->n; i++) {
		r = buf_appendf(&b, "  %s: \"", e->v[i].name);
		for (size_t j = 0; r >= 0 && j < e->v[i].len; j++) {
			char c = e->v[i].value[j];
			r = c == '"' || c == '\\' ? buf_appendf(&b, "\\%c", c) :
						    buf_append_char(&b, c);
		}
		if (r >= 0)
			r = buf_append_str(&b, "\"\n");
	}
	char tmp[4096];
	if (r >= 0 &&
	    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
		r = -ENAMETOOLONG;
	if (r < 0) {
		explicit_bzero(b.data, b.len);
		buf_free(&b);
		return al_error_set_errno(err, r, "cannot write %s", path);
	}
	/* What the gateway will read must be what it accepts: a value it
	 * would refuse (not UTF-8, one that could survive redaction) never
	 * replaces a vault that works. */
	struct gw_vault *check = NULL;
	struct al_error verr = { 0 };
	if (gw_vault_parse(path, b.data, b.len, &check, &verr) < 0) {
		explicit_bzero(b.data, b.len);
		buf_free(&b);
		return al_error_set(err, -EINVAL, "the vault would not load, nothing changed: %s",
				    al_error_message(&verr));
	}
	gw_vault_free(check);
	(void)unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		r = -errno;
	else if (fchown(fd, 0, 0) < 0 || fchmod(fd, 0600) < 0)
		r = -errno;
	else
		r = write_full(fd, b.data, b.len);
	if (r >= 0 && fsync(fd) < 0)
		r = -errno;
	if (fd >= 0)
		close(fd);
	explicit_bzero(b.data, b.len);
	buf_free(&b);
	if (r >= 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r >= 0) {
		/* The rename itself durable too. */
		char dir[4096];
		snprintf(dir, sizeof(dir), "%s", path);
		char *slash = strrchr(dir, '/');
		if (slash && slash != dir)
			*slash = '\0';
		int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			(void)fsync(dfd);
			close(dfd);
		}
	}
	if (r < 0) {
		(void)unlink(tmp);
		return al_error_set_errno(err, r, "cannot write %s", path);
	}
	return 0;
}

/* Writers one at a time: an exclusive lock on PATH.lock, held until the
 * rename. */
static int vault_lock(const char *path, struct al_error *err)
{
	char lp[4096];
	if (snprintf(lp, sizeof(lp), "%s.lock", path) >= (int)sizeof(lp))
		return al_error_set(err, -ENAMETOOLONG, "path too long: %s", path);
	int fd = open(lp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		int e = -errno;
		if (fd >= 0)
			close(fd);
		return al_error_set_errno(err, e, "cannot lock %s", lp);
	}
	return fd;
}

int ctl_vault_set_stdin(const char *path, const char *name, struct al_error *err)
{
	if (!name_ok(name))
		return al_error_set(err, -EINVAL,
				    "a vault entry's name is 1-64 of A-Z, a-z, 0-9, '_', '.', '-'");
	/* One line at most GW_SECRET_MAX bytes; a final newline is not part
	 * of it. */
	char *val = malloc(GW_SECRET_MAX + 2);
	if (!val)
		return al_error_set(err, -ENOMEM, "out of memory");
	size_t len = 0;
	int r = 0;
	while (len < GW_SECRET_MAX + 2) {
		ssize_t n = read(0, val + len, GW_SECRET_MAX + 2 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = al_error_set_errno(err, -errno, "cannot read standard input");
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (memchr(val, '\n', len))
			break;
	}
	char *nl = r >= 0 ? memchr(val, '\n', len) : NULL;
	if (nl) {
		if (nl + 1 != val + len)
			r = al_error_set(err, -EINVAL, "the value is one line");
		len = (size_t)(nl - val);
		if (len && val[len - 1] == '\r')
			len--;
	}
	for (size_t i = 0; r >= 0 && i < len; i++)
		if ((unsigned char)val[i] < 0x20 || val[i] == 0x7f)
			r = al_error_set(err, -EINVAL, "the value holds a control character");
	if (r >= 0 && (len < GW_SECRET_MIN || len > GW_SECRET_MAX))
		r = al_error_set(err, -EINVAL,
				 "a value is %d to %d bytes (standard input gave %zu)",
				 GW_SECRET_MIN, GW_SECRET_MAX, len);
	struct entries *e = calloc(1, sizeof(*e));
	if (r >= 0 && !e)
		r = al_error_set(err, -ENOMEM, "out of memory");
	int lock = -1;
	if (r >= 0 && (lock = vault_lock(path, err)) < 0)
		r = lock;
	if (r >= 0)
		r = load(path, e, err);
	if (r >= 0) {
		size_t i = 0;
		while (i < e->n && strcmp(e->v[i].name, name) != 0)
			i++;
		if (i == e->n && e->n == GW_VAULT_MAX_SECRETS) {
			r = al_error_set(err, -E2BIG, "the vault holds %d entries already",
					 GW_VAULT_MAX_SECRETS);
		} else {
			if (i == e->n) {
				e->v[i].name = strdup(name);
				e->n++;
			} else {
				explicit_bzero(e->v[i].value, e->v[i].len);
				free(e->v[i].value);
			}
			e->v[i].value = malloc(len + 1);
			if (!e->v[i].name || !e->v[i].value) {
				r = al_error_set(err, -ENOMEM, "out of memory");
			} else {
				memcpy(e->v[i].value, val, len);
				e->v[i].value[len] = '\0';
				e->v[i].len = len;
				r = save(path, e, err);
			}
		}
	}
	explicit_bzero(val, GW_SECRET_MAX + 2);
	free(val);
	if (e)
		entries_wipe(e);
	free(e);
	if (lock >= 0)
		close(lock);
	return r;
}

int ctl_vault_remove(const char *path, const char *name, struct al_error *err)
{
	struct entries *e = calloc(1, sizeof(*e));
	if (!e)
		return al_error_set(err, -ENOMEM, "out of memory");
	int lock = vault_lock(path, err);
	int r = lock < 0 ? lock : load(path, e, err);
	if (r >= 0) {
		size_t i = 0;
		while (i < e->n && strcmp(e->v[i].name, name) != 0)
			i++;
		if (i == e->n) {
			r = al_error_set(err, -ENOENT, "the vault has no entry %s", name);
		} else {
			struct entry gone = e->v[i];
			memmove(&e->v[i], &e->v[i + 1], (e->n - i - 1) * sizeof(e->v[0]));
			e->n--;
			r = save(path, e, err);
			e->v[e->n] = gone; /* wiped and freed with the rest */
			e->n++;
		}
	}
	entries_wipe(e);
	free(e);
	if (lock >= 0)
		close(lock);
	return r;
}

int ctl_vault_list(const char *path, FILE *out, struct al_error *err)
{
	struct entries *e = calloc(1, sizeof(*e));
	if (!e)
		return al_error_set(err, -ENOMEM, "out of memory");
	int r = load(path, e, err);
	for (size_t i = 0; r >= 0 && i < e->n; i++)
		fprintf(out, "%s\n", e->v[i].name);
	entries_wipe(e);
	free(e);
	return r;
}

int ctl_vault_each(const char *path,
		   int (*fn)(const char *name, const char *value, size_t len, void *ud), void *ud,
		   struct al_error *err)
{
	struct entries *e = calloc(1, sizeof(*e));
	if (!e)
		return al_error_set(err, -ENOMEM, "out of memory");
	int r = load(path, e, err);
	for (size_t i = 0; r >= 0 && i < e->n; i++)
		r = fn(e->v[i].name, e->v[i].value, e->v[i].len, ud);
	entries_wipe(e);
	free(e);
	return r;
}

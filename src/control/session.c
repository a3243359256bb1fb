/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sessions and turns (session.h).
 *
 * On disk, under the state directory (root's, 0700):
 *
 *   airlock.db                      the state (db.h)
 *   checkpoint.key                  the store's HMAC key
 *   store/                          the checkpoint store (unless moved)
 *   tools/<preset version>/         what a preset's setup installed (shared,
 *                                   read-only in sessions at /opt/airlock)
 *   lowers/<tenant>/<checkpoint>/   a checkpoint as restored, once: the
 *       workspace, home             lower directory of every sandbox that
 *                                   starts from it (read-only inside, shared)
 *   sessions/<tenant>/<id>/         a session's directory (root's, 0700):
 *       tree-<n>/base               the checkpoint its sandbox started from
 *       tree-<n>/layer/upper, work  what the sandbox's turns changed (the
 *                                   overlay's upper directory)...
 *       tree-<n>/layer-<k>/         ... or from its k-th new layer on: a
 *                                   turn in a kept sandbox starts one
 *       tree-<n>/top                "<k> <checkpoint> <boot id>": the
 *                                   newest layer, the checkpoint the ones
 *                                   under it hold, the boot that closed them
 *       tree-<n>/disk.img, disk/    with a disk limit: the layers' own
 *                                   filesystem (an ext4 image, mounted)
 *       current                     which tree the live sandbox uses
 *       audit.jsonl                 every egress decision of its sandboxes
 *
 * Everything a sandbox sees there is owned by the workspace uid (root
 * inside). A sandbox's /workspace and the agent's home are the workspace/
 * and home/ of an overlay of its lower directory and its layer, so a
 * checkpoint after a turn reads the upper directory alone (a layered
 * snapshot: what changed since the sandbox started, not the whole tree).
 * A turn in a kept sandbox first starts a new layer over the last one
 * (sbx_relayer), so that its checkpoint reads what that turn changed.
 * A checkpoint is of the whole tree, the agent's history with the files.
 * While a session is created its tree is a plain one (tree-<n>/workspace,
 * home: the copy or the clone); its first checkpoint made, that tree
 * becomes the checkpoint's lower directory.
 */
#include "control/session.h"

#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/loop.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/encode.h"
#include "common/fdutil.h"
#include "common/parse.h"
#include "common/redact.h"
#include "control/agentout.h"
#include "control/net.h"
#include "control/settings.h"
#include "control/vault.h"
#include "gateway/gateway.h"
#include "store/checkpoint.h"
#include "store/gc.h"

#define PATH_MAX_CTL 4096
#define WAIT_STEP_MS 200

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void progress(const struct ctl_observer *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void progress(const struct ctl_observer *o, const char *fmt, ...)
{
	if (!o || !o->progress)
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	o->progress(line, o->ud);
}

static int fmt_path(char *out, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fmt_path(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, size, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* mkdir that accepts an existing directory (not a link) with any owner
 * only when it is root's and not writable by others. */
static int mkdir_private(const char *path, mode_t mode, struct al_error *err)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return al_error_set_errno(err, -errno, "cannot create %s", path);
	struct stat st;
	if (lstat(path, &st) < 0)
		return al_error_set_errno(err, -errno, "%s", path);
	if (!S_ISDIR(st.st_mode))
		return al_error_set(err, -ENOTDIR, "%s is not a directory", path);
	if (st.st_uid != 0 || (st.st_mode & 022))
		return al_error_set(err, -EPERM,
				    "%s must be root's and writable by root alone (chmod go-w)",
				    path);
	return 0;
}

/* The trees hold what a sandbox wrote: removed without following a link,
 * however deep (sbx_rm_rf). */
static int rm_tree(const char *path)
{
	return sbx_rm_rf(path);
}

/* ---- the context ---- */

static bool tenant_ok(const char *t, struct al_error *err)
{
	/* The store's rule (it names directories): a-z, 0-9, '_', '-'. */
	size_t n = strlen(t);
	bool ok = n > 0 && n <= 64 && t[0] != '-';
	for (size_t i = 0; ok && i < n; i++)
		ok = (t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_' ||
		     t[i] == '-';
	if (!ok)
		al_error_set(err, -EINVAL,
			     "a tenant is 1-64 of a-z, 0-9, '_' and '-', not starting with '-'");
	return ok;
}

static int add_secret(const char *name, const char *value, size_t len, void *ud)
{
	/* Too short to redact safely: the gateway refuses those anyway. */
	int r = redactor_add(ud, value, len);
	return r == -EINVAL ? 0 : r;
}

/* The sandbox of a turn whose runner died: it holds what was never
 * committed. Best effort: `airlock sandbox gc` finds what is left. */
static void sandbox_gone(const char *id, void *ud)
{
	struct ctl_ctx *c = ud;
	struct al_error e = { 0 };
	(void)sbx_destroy(&c->set, id, &e);
}

int ctl_ctx_open(struct ctl_ctx *c, const char *conf_path, struct al_error *err)
{
	memset(c, 0, sizeof(*c));
	int r = ctl_conf_load(conf_path, &c->conf, err);
	if (r < 0)
		return r;
	r = ctl_settings_from_env(&c->set, &c->gw_uid, err);
	if (r < 0)
		return r;
	uint32_t first, end;
	sbx_settings_uids(&c->set, &first, &end);
	uint32_t wu = c->conf->workspace_uid;
	if (wu == c->gw_uid || (wu >= first && wu < end))
		return al_error_set(err, -EINVAL,
				    "workspace_uid %u is the gateway's or a sandbox's uid: choose "
				    "another",
				    wu);
	const char *sd = c->conf->state_dir;
	char path[PATH_MAX_CTL];
	if ((r = mkdir_private(sd, 0700, err)) < 0)
		return r;
	if (fmt_path(path, sizeof(path), "%s/sessions", sd) < 0)
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	if ((r = mkdir_private(path, 0700, err)) < 0)
		return r;
	if (fmt_path(path, sizeof(path), "%s/airlock.db", sd) < 0)
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	if ((r = ctl_db_open(path, &c->db, err)) < 0)
		return r;
	if (fmt_path(path, sizeof(path), "%s/checkpoint.key", sd) < 0)
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	if ((r = st_key_load(path, true, &c->key, &c->keylen, err)) < 0)
		return r;
	if ((r = redactor_new(&c->red)) < 0)
		return al_error_set(err, r, "out of memory");
	unsigned n = 0;
	return ctl_db_recover(c->db, sandbox_gone, c, &n, err);
}

void ctl_ctx_close(struct ctl_ctx *c)
{
	ctl_db_close(c->db);
	ctl_conf_free(c->conf);
	if (c->key) {
		explicit_bzero(c->key, c->keylen);
		free(c->key);
	}
	redactor_free(c->red);
	memset(c, 0, sizeof(*c));
}

static int repo_open(struct ctl_ctx *c, const char *tenant, struct st_repo **ret,
		     struct al_error *err)
{
	struct st_repo_opts o = { .store_dir = c->conf->store_dir,
				  .tenant = tenant,
				  .key = c->key,
				  .keylen = c->keylen,
				  .fault_step = st_fault_step_from_env() };
	return st_repo_open(&o, ret, err);
}

static void repo_closep(struct st_repo **r)
{
	if (*r)
		st_repo_close(*r);
}
#define _cleanup_repo_ _cleanup_(repo_closep)

static int session_dir(const struct ctl_ctx *c, const char *tenant, const char *id, char *out,
		       size_t size)
{
	return fmt_path(out, size, "%s/sessions/%s/%s", c->conf->state_dir, tenant, id);
}

/* ---- GitHub URLs ---- */

static bool gh_name_ok(const char *s, size_t n)
{
	if (n == 0 || n > 100 || s[0] == '-' || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
			return false;
	}
	return !(n == 1 && s[0] == '.') && !(n == 2 && s[0] == '.' && s[1] == '.');
}

int ctl_github_url_parse(const char *url, char *owner, size_t osize, char *repo, size_t rsize,
			 struct al_error *err)
{
	static const char prefix[] = "https://github.com/";
	if (strncmp(url, prefix, sizeof(prefix) - 1) != 0)
		return al_error_set(err, -EINVAL,
				    "a repository is https://github.com/OWNER/REPO (no other "
				    "scheme, host, port or user)");
	const char *p = url + sizeof(prefix) - 1;
	const char *slash = strchr(p, '/');
	if (!slash)
		return al_error_set(err, -EINVAL, "a repository is https://github.com/OWNER/REPO");
	size_t on = (size_t)(slash - p);
	const char *r = slash + 1;
	size_t rn = strlen(r);
	if (rn > 4 && strcmp(r + rn - 4, ".git") == 0)
		rn -= 4;
	if (rn && r[rn - 1] == '/')
		rn--;
	if (!gh_name_ok(p, on) || !gh_name_ok(r, rn) || memchr(r, '/', rn) || on >= osize ||
	    rn >= rsize)
		return al_error_set(
			err, -EINVAL,
			"a repository is https://github.com/OWNER/REPO, each part "
			"letters, digits, '-', '_' or '.' (not starting with '-' or '.')");
	/* Only what the check above allowed may follow. */
	size_t tail = strlen(r) - rn;
	if (tail && strcmp(r + rn, ".git") != 0 && strcmp(r + rn, "/") != 0 &&
	    strcmp(r + rn, ".git/") != 0)
		return al_error_set(err, -EINVAL, "a repository is https://github.com/OWNER/REPO");
	memcpy(owner, p, on);
	owner[on] = '\0';
	memcpy(repo, r, rn);
	repo[rn] = '\0';
	return 0;
}

/* ---- ids ---- */

static void random_hex(char *out, size_t chars)
{
	uint8_t b[32];
	size_t n = (chars + 1) / 2;
	if (getrandom(b, n, 0) != (ssize_t)n)
		abort(); /* the kernel's random source cannot fail once seeded */
	char hex[65];
	enc_hex(b, n, hex);
	memcpy(out, hex, chars);
	out[chars] = '\0';
}

static void random_uuid(char out[37])
{
	uint8_t b[16];
	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		abort();
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	char hex[33];
	enc_hex(b, 16, hex);
	snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
}

/* The agent's session id comes from the agent's output: it becomes an
 * argument next turn, so it must look like an id and never like an option. */
static bool agent_sid_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > CTL_AGENT_SID_MAX || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == ':'))
			return false;
	}
	return true;
}

/* ---- trees ---- */

static int mkdir_owned_at(int dfd, const char *name, mode_t mode, uint32_t uid)
{
	if (mkdirat(dfd, name, mode) < 0)
		return -errno;
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fchown(fd, uid, uid) < 0 || fchmod(fd, mode) < 0)
		return -errno;
	return 0;
}

/* A new tree's name (tree-<random>, in name) and path in session
 * directory sdir. */
static int tree_name_new(const char *sdir, char *name, size_t size, char path[PATH_MAX_CTL],
			 struct al_error *err)
{
	char rnd[9];
	random_hex(rnd, 8);
	snprintf(name, size, "tree-%s", rnd);
	if (fmt_path(path, PATH_MAX_CTL, "%s/%s", sdir, name) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	return 0;
}

/* A new, empty tree: tree-<n>/{workspace,home} in the session's directory. */
static int tree_new(struct ctl_ctx *c, const char *sdir, char *name, size_t size,
		    struct al_error *err)
{
	char path[PATH_MAX_CTL];
	if (tree_name_new(sdir, name, size, path, err) < 0)
		return -ENAMETOOLONG;
	uint32_t u = c->conf->workspace_uid;
	int r = mkdir_owned_at(AT_FDCWD, path, 0755, u);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot create %s", path);
	_cleanup_close_ int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || (r = mkdir_owned_at(dfd, "workspace", 0755, u)) < 0 ||
	    (r = mkdir_owned_at(dfd, "home", 0700, u)) < 0)
		return al_error_set_errno(err, dfd < 0 ? -errno : r, "cannot create %s", path);
	return 0;
}

/* The agent's starting files in a new home (its settings), owned by the
 * workspace uid; their directories are made as needed. The tree is new:
 * nothing in it was made by a sandbox, and no link is followed anyway. */
static int home_files(struct ctl_ctx *c, const struct ctl_agent *a, const char *home,
		      struct al_error *err)
{
	uint32_t u = c->conf->workspace_uid;
	for (size_t i = 0; i < a->n_files; i++) {
		_cleanup_close_ int dfd =
			open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0)
			return al_error_set_errno(err, -errno, "%s", home);
		char rel[256];
		snprintf(rel, sizeof(rel), "%s", a->file_paths[i]);
		char *name = rel;
		for (char *slash; (slash = strchr(name, '/'));) {
			*slash = '\0';
			int r = mkdir_owned_at(dfd, name, 0700, u);
			if (r < 0 && r != -EEXIST)
				return al_error_set_errno(err, r, "cannot create %s/%s", home, rel);
			int next =
				openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (next < 0)
				return al_error_set_errno(err, -errno, "%s/%s", home, rel);
			close(dfd);
			dfd = next;
			name = slash + 1;
		}
		_cleanup_close_ int fd = openat(
			dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 || fchown(fd, u, u) < 0 ||
		    write_full(fd, a->file_texts[i], strlen(a->file_texts[i])) < 0)
			return al_error_set_errno(err, -errno, "cannot write %s/%s", home,
						  a->file_paths[i]);
	}
	return 0;
}

/* Checkpoint ckpt restored into path (made here), owned by the workspace
 * uid, its workspace/ and home/ there whatever it held. */
static int tree_restore(struct ctl_ctx *c, struct st_repo *repo, const char *ckpt, const char *path,
			struct al_error *err)
{
	struct st_restore_opts ro = { .chown = true,
				      .uid = c->conf->workspace_uid,
				      .gid = c->conf->workspace_uid };
	int r = st_restore_with(repo, ckpt, path, &ro, err);
	if (r < 0)
		return r;
	/* Both halves must be there whatever the checkpoint held. */
	_cleanup_close_ int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return al_error_set_errno(err, -errno, "%s", path);
	const char *const parts[] = { "workspace", "home" };
	for (size_t i = 0; i < 2; i++) {
		struct stat st;
		if (fstatat(dfd, parts[i], &st, AT_SYMLINK_NOFOLLOW) == 0) {
			if (!S_ISDIR(st.st_mode))
				return al_error_set(err, -EBADMSG,
						    "checkpoint %.12s: %s is not a directory", ckpt,
						    parts[i]);
			continue;
		}
		r = mkdir_owned_at(dfd, parts[i], i ? 0700 : 0755, c->conf->workspace_uid);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot create %s/%s", path, parts[i]);
	}
	return 0;
}

/* ---- shared lower directories ---- */

/* What a tree holds, on disk before anyone relies on it (a lower is
 * trusted to be its checkpoint after a crash too). */
static int sync_tree(const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return syncfs(fd) < 0 ? -errno : 0;
}

/* This boot's id: a session's closed layers are never synced, so they are
 * trusted in the boot that wrote them only. */
static void boot_id(char out[40])
{
	char *text = NULL;
	size_t len = 0;
	out[0] = '\0';
	if (read_file_bounded(AT_FDCWD, "/proc/sys/kernel/random/boot_id", 64, &text, &len) < 0)
		return;
	size_t n = 0;
	for (size_t i = 0; i < len && n < 39; i++)
		if ((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f') ||
		    text[i] == '-')
			out[n++] = text[i];
	out[n] = '\0';
	free(text);
}

static int lowers_dir(const struct ctl_ctx *c, const char *tenant, char *out, size_t size)
{
	return fmt_path(out, size, "%s/lowers/%s", c->conf->state_dir, tenant);
}

/* The tenant's lowers/ made and locked: shared by those who pick a lower
 * until their tree names it, exclusive for lowers_gc. */
static int lowers_lock(struct ctl_ctx *c, const char *tenant, int how, struct al_error *err)
{
	char dir[PATH_MAX_CTL], top[PATH_MAX_CTL], path[PATH_MAX_CTL];
	if (fmt_path(top, sizeof(top), "%s/lowers", c->conf->state_dir) < 0 ||
	    lowers_dir(c, tenant, dir, sizeof(dir)) < 0 ||
	    fmt_path(path, sizeof(path), "%s/.lock", dir) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	int r = mkdir_private(top, 0700, err);
	if (r < 0 || (r = mkdir_private(dir, 0700, err)) < 0)
		return r;
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "%s", path);
	if (flock(fd, how) < 0) {
		r = -errno;
		close(fd);
		return r == -EWOULDBLOCK ? r : al_error_set_errno(err, r, "cannot lock %s", path);
	}
	return fd;
}

static bool ckpt_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n != CTL_CKPT_HEX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return false;
	return true;
}

/* A complete tree from made into the lower directory to, whole (renamed);
 * when the tenant has that lower already (put there meanwhile by another
 * runner: as good), from goes instead. */
static int lower_place(const char *from, const char *to)
{
	if (rename(from, to) == 0)
		return 0;
	int r = -errno;
	struct stat st;
	if ((r == -EEXIST || r == -ENOTEMPTY) && lstat(to, &st) == 0 && S_ISDIR(st.st_mode)) {
		(void)rm_tree(from);
		return 0;
	}
	return r;
}

/*
 * The lower directory of checkpoint ckpt (out), restored when the tenant
 * has none yet: into a new directory, renamed into place whole, so that a
 * lower is always complete. The caller holds lowers_lock shared.
 */
static int lower_get(struct ctl_ctx *c, const char *tenant, const char *ckpt,
		     const struct ctl_observer *obs, char *out, size_t size, struct al_error *err)
{
	char dir[PATH_MAX_CTL], tmp[PATH_MAX_CTL], rnd[9];
	if (!ckpt_name_ok(ckpt))
		return al_error_set(err, -EINVAL, "no checkpoint to start from");
	random_hex(rnd, 8);
	if (lowers_dir(c, tenant, dir, sizeof(dir)) < 0 ||
	    fmt_path(out, size, "%s/%s", dir, ckpt) < 0 ||
	    fmt_path(tmp, sizeof(tmp), "%s/.tmp-%s", dir, rnd) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	struct stat st;
	if (lstat(out, &st) == 0 && S_ISDIR(st.st_mode))
		return 0;
	_cleanup_repo_ struct st_repo *repo = NULL;
	int r = repo_open(c, tenant, &repo, err);
	if (r < 0)
		return r;
	progress(obs, "restoring checkpoint %.12s", ckpt);
	if ((r = tree_restore(c, repo, ckpt, tmp, err)) < 0) {
		(void)rm_tree(tmp);
		return r;
	}
	/* The directory itself is the owner's too (the sandbox wants one
	 * owner for the whole layered tree). */
	if (chown(tmp, c->conf->workspace_uid, c->conf->workspace_uid) < 0) {
		r = al_error_set_errno(err, -errno, "%s", tmp);
		(void)rm_tree(tmp);
		return r;
	}
	if ((r = sync_tree(tmp)) < 0) {
		al_error_set_errno(err, r, "cannot sync %s", tmp);
		(void)rm_tree(tmp);
		return r;
	}
	if ((r = lower_place(tmp, out)) < 0) {
		(void)rm_tree(tmp);
		return al_error_set_errno(err, r, "cannot rename %s", tmp);
	}
	return 0;
}

/*
 * Removes the tenant's lower directories no tree of its sessions names
 * (and what an interrupted restore left), unless someone is picking one
 * (then the next call does it): wait for that with block.
 */
/* Adds the checkpoint every tree-<n>/base of session directory sdir names
 * to *used; -ENOENT when the session went meanwhile, another negative
 * errno when anything could not be read. */
static int trees_bases(const char *sdir, char (**used)[CTL_CKPT_HEX + 1], size_t *n_used,
		       size_t *cap)
{
	DIR *td = opendir(sdir);
	if (!td)
		return -errno;
	int r = 0;
	struct dirent *te;
	for (;;) {
		errno = 0;
		if (!(te = readdir(td))) {
			r = -errno;
			break;
		}
		char base[PATH_MAX_CTL];
		if (strncmp(te->d_name, "tree-", 5) != 0)
			continue;
		if (fmt_path(base, sizeof(base), "%s/%s/base", sdir, te->d_name) < 0) {
			r = -ENAMETOOLONG;
			break;
		}
		char *text = NULL;
		size_t len = 0;
		r = read_file_bounded(AT_FDCWD, base, CTL_CKPT_HEX + 1, &text, &len);
		if (r == -ENOENT) { /* a plain tree, or one going */
			r = 0;
			continue;
		}
		if (r < 0)
			break;
		if (*n_used == *cap) {
			size_t nc = *cap ? 2 * *cap : 32;
			void *v = reallocarray(*used, nc, sizeof(**used));
			if (!v) {
				free(text);
				r = -ENOMEM;
				break;
			}
			*used = v;
			*cap = nc;
		}
		snprintf((*used)[*n_used], sizeof((*used)[*n_used]), "%.*s", (int)len, text);
		(*n_used)++;
		free(text);
	}
	closedir(td);
	return r;
}

/*
 * Removes the tenant's lower directories no tree of its sessions names
 * (and what an interrupted restore or removal left), unless someone is
 * picking one (then the next call does it): wait for that with block.
 * Whatever cannot be read stops it before anything is removed: a lower
 * that looks unused for want of a listing may be under a live sandbox.
 * A lower goes by a rename first, so that none is ever seen half removed.
 */
static void lowers_gc(struct ctl_ctx *c, const char *tenant, bool block)
{
	struct al_error e = { 0 };
	_cleanup_close_ int lk = lowers_lock(c, tenant, LOCK_EX | (block ? 0 : LOCK_NB), &e);
	if (lk < 0)
		return;
	char dir[PATH_MAX_CTL], sroot[PATH_MAX_CTL];
	if (lowers_dir(c, tenant, dir, sizeof(dir)) < 0 ||
	    fmt_path(sroot, sizeof(sroot), "%s/sessions/%s", c->conf->state_dir, tenant) < 0)
		return;
	char(*used)[CTL_CKPT_HEX + 1] = NULL;
	size_t n_used = 0, cap = 0;
	int r = 0;
	DIR *sd = opendir(sroot);
	if (!sd && errno != ENOENT)
		return;
	for (struct dirent *de; sd && r >= 0;) {
		errno = 0;
		if (!(de = readdir(sd))) {
			r = -errno;
			break;
		}
		if (de->d_name[0] == '.')
			continue;
		char sdir[PATH_MAX_CTL];
		if (fmt_path(sdir, sizeof(sdir), "%s/%s", sroot, de->d_name) < 0) {
			r = -ENAMETOOLONG;
			break;
		}
		r = trees_bases(sdir, &used, &n_used, &cap);
		if (r == -ENOENT) /* deleted meanwhile */
			r = 0;
	}
	if (sd)
		closedir(sd);
	DIR *ld = r >= 0 ? opendir(dir) : NULL;
	for (struct dirent *de; ld && (de = readdir(ld));) {
		bool tmp = strncmp(de->d_name, ".tmp-", 5) == 0;
		if (!tmp && !ckpt_name_ok(de->d_name))
			continue;
		bool keep = false;
		for (size_t i = 0; !tmp && !keep && i < n_used; i++)
			keep = strcmp(used[i], de->d_name) == 0;
		char path[PATH_MAX_CTL], gone[PATH_MAX_CTL], rnd[9];
		random_hex(rnd, 8);
		if (keep || fmt_path(path, sizeof(path), "%s/%s", dir, de->d_name) < 0 ||
		    fmt_path(gone, sizeof(gone), "%s/.tmp-%s", dir, rnd) < 0)
			continue;
		if (tmp || rename(path, gone) == 0)
			(void)rm_tree(tmp ? path : gone);
	}
	if (ld)
		closedir(ld);
	free(used);
}

void ctl_lowers_gc(struct ctl_ctx *c)
{
	char top[PATH_MAX_CTL];
	if (fmt_path(top, sizeof(top), "%s/lowers", c->conf->state_dir) < 0)
		return;
	DIR *d = opendir(top);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		struct al_error e = { 0 };
		if (de->d_name[0] != '.' && tenant_ok(de->d_name, &e))
			lowers_gc(c, de->d_name, true);
	}
	if (d)
		closedir(d);
}

/* ---- a tree's own filesystem (limits.disk) ---- */

static void output_tail(int fd, char *out, size_t size);

/* Whether the tree keeps its layers in a filesystem of its own. */
static bool tree_has_disk(const char *tree)
{
	char path[PATH_MAX_CTL];
	return fmt_path(path, sizeof(path), "%s/disk.img", tree) == 0 && access(path, F_OK) == 0;
}

/* Whether that filesystem is mounted (it is not after a reboot). */
static bool tree_disk_mounted(const char *tree)
{
	char path[PATH_MAX_CTL];
	struct statx stx;
	return fmt_path(path, sizeof(path), "%s/disk", tree) == 0 &&
	       statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx) == 0 &&
	       (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
	       (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* Whether the tree's own filesystem is other than a preset with a disk
 * limit of disk bytes wants (another size), or nine tenths full: its
 * closed layers keep what they hold (a file removed later is a whiteout
 * over it), so only a new tree gives the room back. */
static bool tree_disk_stale(const char *tree, uint64_t disk)
{
	char img[PATH_MAX_CTL], mnt[PATH_MAX_CTL];
	struct stat st;
	struct statfs sf;
	if (fmt_path(img, sizeof(img), "%s/disk.img", tree) < 0 ||
	    fmt_path(mnt, sizeof(mnt), "%s/disk", tree) < 0 || stat(img, &st) < 0 ||
	    (uint64_t)st.st_size != disk || statfs(mnt, &sf) < 0 || sf.f_blocks == 0)
		return true;
	return sf.f_bavail < sf.f_blocks / 10;
}

/* Where tree's layer k is: in its own filesystem when it has one. */
static void layer_name(unsigned k, char *out, size_t size);

static int layer_dir(const char *tree, unsigned k, char *out, size_t size)
{
	char lname[32];
	layer_name(k, lname, sizeof(lname));
	return fmt_path(out, size, "%s%s/%s", tree, tree_has_disk(tree) ? "/disk" : "", lname);
}

/* The parent of tree's layers, opened; never the host's filesystem for a
 * tree that has its own but lost the mount. */
static int layers_parent(const char *tree)
{
	char path[PATH_MAX_CTL];
	if (tree_has_disk(tree) && !tree_disk_mounted(tree))
		return -ENOTCONN;
	if (fmt_path(path, sizeof(path), "%s%s", tree, tree_has_disk(tree) ? "/disk" : "") < 0)
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* A free loop device over img_fd, detached once unmounted: its descriptor
 * (to close once mounted), its path in dev. */
static int loop_attach(int img_fd, char *dev, size_t size)
{
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return -errno;
	int r = -EBUSY;
	for (int tries = 0; tries < 32 && r == -EBUSY; tries++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0)
			return -errno;
		snprintf(dev, size, "/dev/loop%d", n);
		int lfd = open(dev, O_RDWR | O_CLOEXEC);
		if (lfd < 0)
			return -errno;
		struct loop_config cfg = { .fd = (uint32_t)img_fd,
					   .info = { .lo_flags = LO_FLAGS_AUTOCLEAR } };
		if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0)
			return lfd;
		r = -errno; /* EBUSY: taken meanwhile, the next one */
		close(lfd);
	}
	return r;
}

/*
 * The tree's own filesystem of size bytes, for its layers: an ext4 image
 * (sparse; no journal: its contents matter for the sandbox's life only,
 * the checkpoints hold what lasts) mounted at tree/disk, nosuid, nodev,
 * its root the workspace uid's. What the sandbox writes past it fails with
 * ENOSPC inside.
 */
static int tree_disk_make(struct ctl_ctx *c, const char *tree, uint64_t size, struct al_error *err)
{
	char img[PATH_MAX_CTL], mnt[PATH_MAX_CTL], opt[64];
	if (fmt_path(img, sizeof(img), "%s/disk.img", tree) < 0 ||
	    fmt_path(mnt, sizeof(mnt), "%s/disk", tree) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	_cleanup_close_ int fd =
		open(img, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0 || mkdir(mnt, 0700) < 0)
		return al_error_set_errno(err, -errno, "cannot make %s", img);
	/* Its root is root's (0755): only the layers in it are the
	 * workspace uid's. */
	snprintf(opt, sizeof(opt), "root_owner=0:0,nodiscard");
	_cleanup_close_ int out = memfd_create("airlock-mkfs", MFD_CLOEXEC);
	pid_t pid = out < 0 ? -1 : fork();
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);
		if (nul < 0 || dup2(nul, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
			_exit(127);
		const char *argv[] = { "mkfs.ext4", "-q",	    "-F",      "-m",	     "0",
				       "-O",	    "^has_journal", "-e",      "remount-ro", "-E",
				       opt,	    "-L",	    "airlock", img,	     NULL };
		const char *envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
		execvpe(argv[0], (char *const *)argv, (char *const *)envp);
		_exit(127);
	}
	if (pid < 0)
		return al_error_set_errno(err, -errno, "cannot run mkfs.ext4");
	int st = 0;
	pid_t w;
	while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
		;
	if (w != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		char said[400] = "";
		output_tail(out, said, sizeof(said));
		return al_error_set(
			err, -EIO, "a disk limit needs mkfs.ext4 (e2fsprogs), which %s%s%s",
			WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "is missing" : "failed",
			said[0] ? ": " : "", said);
	}
	char dev[64];
	int lfd = loop_attach(fd, dev, sizeof(dev));
	if (lfd < 0)
		return al_error_set_errno(err, lfd,
					  "a disk limit needs a loop device (/dev/loop-control)");
	int r = mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "") < 0 ? -errno : 0;
	close(lfd);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot mount %s", img);
	return 0;
}

/* A tree removed, its filesystem first unmounted (the loop device goes
 * with it). */
static int tree_remove(const char *tree)
{
	char mnt[PATH_MAX_CTL];
	if (fmt_path(mnt, sizeof(mnt), "%s/disk", tree) == 0 && tree_disk_mounted(tree))
		(void)umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW);
	return rm_tree(tree);
}

/* Every tree of session directory sdir unmounted (before it goes whole). */
static void trees_unmount(const char *sdir)
{
	DIR *d = opendir(sdir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char tree[PATH_MAX_CTL], mnt[PATH_MAX_CTL];
		if (strncmp(de->d_name, "tree-", 5) != 0 ||
		    fmt_path(tree, sizeof(tree), "%s/%s", sdir, de->d_name) < 0 ||
		    fmt_path(mnt, sizeof(mnt), "%s/disk", tree) < 0)
			continue;
		if (tree_disk_mounted(tree))
			(void)umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW);
	}
	if (d)
		closedir(d);
}

static int layer_new_in(struct ctl_ctx *c, const char *path, const char *ckpt, uint64_t disk,
			struct al_error *err);

/* A new tree (its name in name) for a sandbox over the lower directory of
 * ckpt: tree-<n>/base naming it, tree-<n>/layer for the overlay (the
 * sandbox makes its upper/ and work/), in a filesystem of its own of disk
 * bytes when disk is not 0. Nothing of it is left on failure. */
static int layer_new(struct ctl_ctx *c, const char *sdir, const char *ckpt, uint64_t disk,
		     char *name, size_t size, struct al_error *err)
{
	char path[PATH_MAX_CTL];
	if (tree_name_new(sdir, name, size, path, err) < 0)
		return -ENAMETOOLONG;
	if (mkdir(path, 0700) < 0)
		return al_error_set_errno(err, -errno, "cannot create %s", path);
	int r = layer_new_in(c, path, ckpt, disk, err);
	if (r < 0)
		(void)tree_remove(path);
	return r;
}

static int layer_new_in(struct ctl_ctx *c, const char *path, const char *ckpt, uint64_t disk,
			struct al_error *err)
{
	_cleanup_close_ int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return al_error_set_errno(err, -errno, "%s", path);
	int r = disk ? tree_disk_make(c, path, disk, err) : 0;
	if (r < 0)
		return r;
	_cleanup_close_ int pfd = layers_parent(path);
	r = pfd < 0 ? pfd : mkdir_owned_at(pfd, "layer", 0755, c->conf->workspace_uid);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot create %s's first layer", path);
	_cleanup_close_ int fd =
		openat(dfd, "base", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || (r = write_full(fd, ckpt, strlen(ckpt))) < 0)
		return al_error_set_errno(err, fd < 0 ? -errno : r, "cannot write %s/base", path);
	return 0;
}

/* The checkpoint tree-<n> started from ("" for a plain tree). */
static int tree_base(const char *tree, char out[CTL_CKPT_HEX + 1])
{
	char path[PATH_MAX_CTL];
	out[0] = '\0';
	if (fmt_path(path, sizeof(path), "%s/base", tree) < 0)
		return -ENAMETOOLONG;
	char *text = NULL;
	size_t len = 0;
	int r = read_file_bounded(AT_FDCWD, path, CTL_CKPT_HEX + 1, &text, &len);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	if (len != CTL_CKPT_HEX) {
		free(text);
		return -EBADMSG;
	}
	memcpy(out, text, len);
	out[len] = '\0';
	free(text);
	return ckpt_name_ok(out) ? 0 : -EBADMSG;
}

/* The newest layer of tree (k: 0 for "layer", else "layer-<k>") and the
 * checkpoint the layers under it hold (its base for layer 0); *boot (may be
 * NULL; 40 bytes): the boot that closed them ("" for layer 0). */
static int tree_top_boot(const char *tree, unsigned *ret_k, char ckpt[CTL_CKPT_HEX + 1], char *boot)
{
	int r = tree_base(tree, ckpt);
	*ret_k = 0;
	if (boot)
		boot[0] = '\0';
	if (r < 0 || !ckpt[0])
		return r;
	char path[PATH_MAX_CTL];
	if (fmt_path(path, sizeof(path), "%s/top", tree) < 0)
		return -ENAMETOOLONG;
	char *text = NULL;
	size_t len = 0;
	r = read_file_bounded(AT_FDCWD, path, 64 + CTL_CKPT_HEX, &text, &len);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	int k = 0;
	char id[CTL_CKPT_HEX + 1] = "";
	char line[64 + CTL_CKPT_HEX + 1];
	snprintf(line, sizeof(line), "%.*s", (int)len, text);
	free(text);
	/* "<k> <checkpoint>[ <boot id>]" */
	char *sp = strchr(line, ' ');
	if (!sp)
		return -EBADMSG;
	*sp = '\0';
	char *sp2 = strchr(sp + 1, ' ');
	if (sp2) {
		*sp2 = '\0';
		if (boot && strlen(sp2 + 1) < 40)
			snprintf(boot, 40, "%s", sp2 + 1);
	}
	if (strlen(sp + 1) != CTL_CKPT_HEX)
		return -EBADMSG;
	memcpy(id, sp + 1, CTL_CKPT_HEX + 1);
	if (parse_int_range(line, 1, SBX_LOWERS_MAX - 1, &k) < 0 || !ckpt_name_ok(id))
		return -EBADMSG;
	*ret_k = (unsigned)k;
	memcpy(ckpt, id, CTL_CKPT_HEX + 1);
	return 0;
}

static int tree_top(const char *tree, unsigned *ret_k, char ckpt[CTL_CKPT_HEX + 1])
{
	return tree_top_boot(tree, ret_k, ckpt, NULL);
}

static void layer_name(unsigned k, char *out, size_t size)
{
	if (k == 0)
		snprintf(out, size, "layer");
	else
		snprintf(out, size, "layer-%u", k);
}

static int current_get(const char *sdir, char *name, size_t size)
{
	char path[PATH_MAX_CTL];
	if (fmt_path(path, sizeof(path), "%s/current", sdir) < 0)
		return -ENAMETOOLONG;
	char *text = NULL;
	size_t len = 0;
	int r = read_file_bounded(AT_FDCWD, path, 64, &text, &len);
	if (r < 0)
		return r;
	if (len == 0 || len >= size || strncmp(text, "tree-", 5) != 0 || memchr(text, '/', len)) {
		free(text);
		return -EBADMSG;
	}
	memcpy(name, text, len);
	name[len] = '\0';
	free(text);
	return 0;
}

/* dir/file holding text, replaced whole (written beside it, renamed). */
static int file_replace(const char *dir, const char *file, const char *text)
{
	char path[PATH_MAX_CTL], tmp[PATH_MAX_CTL];
	if (fmt_path(path, sizeof(path), "%s/%s", dir, file) < 0 ||
	    fmt_path(tmp, sizeof(tmp), "%s/%s.tmp", dir, file) < 0)
		return -ENAMETOOLONG;
	(void)unlink(tmp);
	_cleanup_close_ int fd =
		open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int r = write_full(fd, text, strlen(text));
	if (r < 0)
		return r;
	return rename(tmp, path) < 0 ? -errno : 0;
}

static int current_set(const char *sdir, const char *name)
{
	return file_replace(sdir, "current", name);
}

/* Removes every tree but keep (NULL: all). */
static void trees_prune(const char *sdir, const char *keep)
{
	DIR *d = opendir(sdir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "tree-", 5) != 0 || (keep && strcmp(de->d_name, keep) == 0))
			continue;
		char path[PATH_MAX_CTL];
		if (fmt_path(path, sizeof(path), "%s/%s", sdir, de->d_name) == 0)
			(void)tree_remove(path);
	}
	closedir(d);
}

/* Whether anything of tree is more than a checkpoint keeps: a hard link (a
 * restore makes separate files) or an extended attribute. */
static _Thread_local bool beyond;
static int beyond_fn(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_F && S_ISREG(st->st_mode) && st->st_nlink > 1)
		beyond = true;
	/* Any attribute but the security label the host puts on every file
	 * (SELinux). */
	char names[256];
	ssize_t n = flag == FTW_NS || flag == FTW_DNR ? 0 : llistxattr(path, names, sizeof(names));
	if (n < 0 ? errno != ENOTSUP : n > 0) {
		static const char label[] = "security.selinux";
		if (n < 0 || (size_t)n != sizeof(label) || memcmp(names, label, sizeof(label)) != 0)
			beyond = true;
	}
	return beyond ? 1 : 0;
}

static bool tree_beyond_checkpoint(const char *tree)
{
	beyond = false;
	/* Unreadable: as good as different. */
	if (nftw(tree, beyond_fn, 32, FTW_PHYS) < 0)
		return true;
	return beyond;
}

/*
 * The plain tree sdir/name (a session's starting point, just checkpointed
 * as ckpt, its sandbox gone) made the lower directory of ckpt: renamed,
 * not copied. When the tenant has that lower already, the tree goes.
 */
static int lower_adopt(struct ctl_ctx *c, const char *tenant, const char *ckpt, const char *sdir,
		       const char *name, struct al_error *err)
{
	char tree[PATH_MAX_CTL], dir[PATH_MAX_CTL], path[PATH_MAX_CTL];
	if (fmt_path(tree, sizeof(tree), "%s/%s", sdir, name) < 0 ||
	    lowers_dir(c, tenant, dir, sizeof(dir)) < 0 ||
	    fmt_path(path, sizeof(path), "%s/%s", dir, ckpt) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	int r = sync_tree(tree);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot sync %s", tree);
	_cleanup_close_ int lk = lowers_lock(c, tenant, LOCK_SH, err);
	if (lk < 0)
		return lk;
	if ((r = lower_place(tree, path)) < 0)
		return al_error_set_errno(err, r, "cannot move %s to %s", tree, path);
	return 0;
}

/* ---- the preset's setup ---- */

/* ---- sandboxes ---- */

/* Whether the sandbox still runs. */
static bool sandbox_alive(const struct ctl_ctx *c, const char *id)
{
	struct al_error e = { 0 };
	struct sbx_info info;
	return sbx_inspect(&c->set, id, &info, &e) == 0 && info.running && !info.ephemeral;
}

/*
 * Destroys the sandbox s names (the caller's own view of the session: a
 * runner's is the sandbox it ran in) and makes the session forget it —
 * only if the session still names that one, never a newer sandbox. One
 * that could not be destroyed stays recorded, to be tried again.
 */
static void sandbox_discard(struct ctl_ctx *c, const struct ctl_session *s)
{
	if (!s->sandbox_id[0])
		return;
	struct al_error e = { 0 };
	int r = sbx_destroy(&c->set, s->sandbox_id, &e);
	if (r < 0 && r != -ENOENT)
		return;
	(void)ctl_db_session_clear_sandbox_if(c->db, s->tenant, s->id, s->sandbox_id, &e);
}

static int vault_has(const struct ctl_ctx *c, const struct ctl_preset *p, struct al_error *err)
{
	/* Whether the vault exists is all this process may know of it: the
	 * gateway names a missing entry. */
	struct stat st;
	if (p->network == SBX_NETWORK_NONE || p->agent->n_hosts == 0)
		return 0;
	if (stat(c->conf->vault, &st) < 0)
		return al_error_set(err, -ENOENT,
				    "no vault at %s: add the %s key with `airlock vault set %s` "
				    "(it reads the key from standard input)",
				    c->conf->vault, p->agent->hosts[0].secret,
				    p->agent->hosts[0].secret);
	return 0;
}

struct sandbox_req {
	const struct ctl_preset *preset;
	const char *workspace, *home;
	const char *lower, *layer; /* a layered tree instead */
	char *const *closed;	   /* and its closed layers, newest first */
	size_t n_closed;
	const char *tools; /* the preset's tools directory, or NULL */
	const char *grant; /* "github:OWNER/REPO" or NULL */
	const char *audit;
	bool setup; /* the setup's sandbox: its own policy, tools writable */
};

static int sandbox_start(struct ctl_ctx *c, const struct sandbox_req *q, char id[SBX_ID_LEN + 1],
			 struct al_error *err)
{
	const struct ctl_preset *p = q->preset;
	int r = q->setup ? 0 : vault_has(c, p, err);
	if (r < 0)
		return r;
	struct sbx_spec spec = {
		.image = p->image,
		.workspace = q->workspace,
		.home = q->home,
		.home_path = q->home || q->lower ? p->agent->home : NULL,
		.lower = q->lower,
		.layer = q->layer,
		.closed = q->closed,
		.n_closed = q->n_closed,
		.tools = q->tools,
		.tools_writable = q->setup,
		.network = p->network,
		.memory_bytes = p->limits.memory,
		.pids = p->limits.pids,
		.cpus = p->limits.cpus,
		.env = p->env,
		.n_env = p->n_env,
	};
	char *grants[1] = { (char *)q->grant };
	const char *policy = q->setup && p->setup_policy ? p->setup_policy : p->policy;
	struct gw_options g = {
		.mode = p->network == SBX_NETWORK_OPEN ? GW_MODE_OPEN : GW_MODE_RESTRICTED,
		.label = "sandbox",
		.policy_text = policy,
		.policy_len = policy ? strlen(policy) : 0,
		.policy_name = p->policy_name,
		.grants = grants,
		.n_grants = q->grant ? 1 : 0,
		.upstream_cas = p->upstream_cas,
		.n_upstream_cas = p->n_upstream_cas,
		.vault_file = c->conf->vault,
	};
	/* Setup under its own policy has a network even in a preset without
	 * one (to fetch what it installs). */
	if (q->setup && p->setup_policy && p->network == SBX_NETWORK_NONE)
		spec.network = SBX_NETWORK_RESTRICTED;
	/* Credentials need the vault; a policy without any, none. */
	struct stat vst;
	if (stat(c->conf->vault, &vst) < 0)
		g.vault_file = NULL;
	struct ctl_net_opts no = { .gw = &g,
				   .set = &c->set,
				   .gw_uid = c->gw_uid,
				   .audit_file = q->audit,
				   .detach = true,
				   .log_fd = -1 };
	struct ctl_net n;
	ctl_net_init(&n);
	r = ctl_net_setup(&n, &no, &spec, err);
	if (r < 0) {
		ctl_net_done(&n, false);
		return r;
	}
	r = sbx_create(&c->set, &spec, id, err);
	ctl_net_done(&n, r >= 0);
	return r;
}

/* Runs argv in sandbox id, its output to the caller's progress lines. */
static int run_logged(struct ctl_ctx *c, const char *id, char *const *argv, uint64_t timeout_ms,
		      int out_fd, struct sbx_result *res, struct al_error *err)
{
	struct sbx_exec_opts o = {
		.cwd = "/workspace",
		.timeout_ms = timeout_ms,
		.output_limit = 64u << 20,
		.stdin_fd = -1,
		.stdout_fd = out_fd,
		.stderr_fd = out_fd,
	};
	return sbx_exec(&c->set, id, argv, &o, res, err);
}

static const char *result_text(const struct sbx_result *r, char *buf, size_t size)
{
	switch (r->outcome) {
	case SBX_EXITED:
		snprintf(buf, size, "exit status %d", r->status);
		break;
	case SBX_SIGNALED:
		snprintf(buf, size, "killed by signal %d", r->status);
		break;
	case SBX_TIMED_OUT:
		snprintf(buf, size, "timed out");
		break;
	case SBX_OOM_KILLED:
		snprintf(buf, size, "killed by the memory limit");
		break;
	case SBX_INTERRUPTED:
		snprintf(buf, size, "interrupted");
		break;
	}
	return buf;
}

static bool result_ok(const struct sbx_result *r)
{
	return r->outcome == SBX_EXITED && r->status == 0;
}

/*
 * The preset's setup, once per version: installs the agent (npm, into
 * CTL_TOOLS_PATH) and runs the preset's commands in a sandbox whose tools
 * directory is writable, under the setup's policy. Made in a temporary
 * directory and renamed into place: a directory under tools/ is whole.
 */
static int preset_setup(struct ctl_ctx *c, const struct ctl_preset *p,
			const struct ctl_observer *obs, int log_fd, char *ret_dir, size_t size,
			struct al_error *err)
{
	char tools[PATH_MAX_CTL], lockp[PATH_MAX_CTL];
	if (fmt_path(ret_dir, size, "%s/%s", c->conf->tools_dir, p->version) < 0 ||
	    fmt_path(tools, sizeof(tools), "%s", c->conf->tools_dir) < 0 ||
	    fmt_path(lockp, sizeof(lockp), "%s/%s.lock", c->conf->tools_dir, p->version) < 0)
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	int r = mkdir_private(tools, 0700, err);
	if (r < 0)
		return r;
	struct stat st;
	if (p->agent->n_install == 0 && p->n_setup == 0) {
		ret_dir[0] = '\0';
		return 0;
	}
	if (lstat(ret_dir, &st) == 0 && S_ISDIR(st.st_mode))
		return 0;
	_cleanup_close_ int lock = open(lockp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		return al_error_set_errno(err, -errno, "cannot lock %s", lockp);
	if (lstat(ret_dir, &st) == 0 && S_ISDIR(st.st_mode))
		return 0; /* another caller set it up meanwhile */
	progress(obs, "setting up preset %s (once per version: %s)", p->name, p->version);
	char tmp[PATH_MAX_CTL], scratch[PATH_MAX_CTL];
	if (fmt_path(tmp, sizeof(tmp), "%s.tmp", ret_dir) < 0 ||
	    fmt_path(scratch, sizeof(scratch), "%s.scratch", ret_dir) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	(void)rm_tree(tmp);
	(void)rm_tree(scratch);
	uint32_t u = c->conf->workspace_uid;
	if ((r = mkdir_owned_at(AT_FDCWD, tmp, 0755, u)) < 0 ||
	    (r = mkdir_owned_at(AT_FDCWD, scratch, 0755, u)) < 0)
		return al_error_set_errno(err, r, "cannot create %s", tmp);
	struct sandbox_req q = { .preset = p, .workspace = scratch, .tools = tmp, .setup = true };
	char id[SBX_ID_LEN + 1];
	r = sandbox_start(c, &q, id, err);
	if (r < 0)
		goto out;
	/* The agent from the npm registry, then the operator's commands. */
	for (size_t i = 0; r >= 0 && i <= p->n_setup; i++) {
		static const char prefix_opt[] = "--prefix=" CTL_TOOLS_PATH;
		const char *argv_npm[6 + 64] = { "npm",	       "install",   "--global",
						 "--no-audit", "--no-fund", prefix_opt };
		const char *argv_sh[4] = { "/bin/sh", "-ec", NULL, NULL };
		const char *const *argv;
		if (i == 0) {
			if (p->agent->n_install == 0)
				continue;
			size_t k = 6;
			for (size_t j = 0; j < p->agent->n_install && k < ARRAY_SIZE(argv_npm) - 1;
			     j++)
				argv_npm[k++] = p->agent->install[j];
			argv = argv_npm;
			progress(obs, "setup: npm install %s", p->agent->install[0]);
		} else {
			argv_sh[2] = p->setup[i - 1];
			argv = argv_sh;
			const char *nl = strchr(p->setup[i - 1], '\n');
			progress(obs, "setup: %.*s%s",
				 nl ? (int)(nl - p->setup[i - 1]) : (int)strlen(p->setup[i - 1]),
				 p->setup[i - 1], nl && nl[1] ? " ..." : "");
		}
		struct sbx_result res;
		r = run_logged(c, id, (char *const *)argv, 30 * 60 * 1000, log_fd, &res, err);
		if (r >= 0 && !result_ok(&res)) {
			char why[64];
			r = al_error_set(err, -EIO, "preset %s: setup step %zu failed (%s)",
					 p->name, i, result_text(&res, why, sizeof(why)));
		}
	}
	struct al_error e2 = { 0 };
	(void)sbx_destroy(&c->set, id, &e2);
	if (r >= 0 && rename(tmp, ret_dir) < 0)
		r = al_error_set_errno(err, -errno, "cannot rename %s", tmp);
out:
	(void)rm_tree(scratch);
	if (r < 0)
		(void)rm_tree(tmp);
	return r;
}

/* ---- sessions ---- */

/* A session's grant holds only while its preset's github: list allows it:
 * the operator may have narrowed the list since the session (or the one it
 * was forked from) was made. */
static int grant_check(const struct ctl_preset *p, const struct ctl_session *s,
		       struct al_error *err)
{
	static const char prefix[] = "github:";
	if (!s->grant[0])
		return 0;
	const char *o = s->grant + sizeof(prefix) - 1;
	const char *slash = strchr(o, '/');
	char owner[128];
	if (strncmp(s->grant, prefix, sizeof(prefix) - 1) != 0 || !slash ||
	    (size_t)(slash - o) >= sizeof(owner))
		return al_error_set(err, -EINVAL, "session %s has a malformed grant", s->id);
	memcpy(owner, o, (size_t)(slash - o));
	owner[slash - o] = '\0';
	if (!ctl_preset_allows_repo(p, owner, slash + 1))
		return al_error_set(err, -EPERM,
				    "session %s is granted %s, which preset %s no longer allows "
				    "(its github: list)",
				    s->id, o, p->name);
	return 0;
}

/*
 * The session's current tree again, for a fresh sandbox that starts from
 * ckpt, when its closed layers over its lower directory hold exactly that
 * (the last turn's checkpoint; its sandbox lost or discarded after a failed
 * or cancelled turn): what the newest layer holds is not committed and
 * goes, an empty one takes its place, nothing is restored. 1 when reused
 * (name, *ret_k: the layer to write in; closed: the upper directories
 * under it, newest first, to free), 0 when not.
 */
static int tree_reuse(struct ctl_ctx *c, const char *sdir, const char *ckpt, uint64_t disk,
		      char *name, size_t size, unsigned *ret_k, char **closed, size_t *ret_n,
		      struct al_error *err)
{
	char tree[PATH_MAX_CTL], base[CTL_CKPT_HEX + 1], top[CTL_CKPT_HEX + 1], path[PATH_MAX_CTL];
	char lname[32];
	unsigned k;
	*ret_n = 0;
	char boot[40], now[40];
	if (current_get(sdir, name, size) < 0 ||
	    fmt_path(tree, sizeof(tree), "%s/%s", sdir, name) < 0 || tree_base(tree, base) < 0 ||
	    !base[0] || tree_top_boot(tree, &k, top, boot) < 0 || strcmp(top, ckpt) != 0)
		return 0;
	/* Closed layers of another boot may have lost what was not written
	 * out: not trusted (the lower directory is synced when made). */
	boot_id(now);
	if (k > 0 && (!now[0] || strcmp(boot, now) != 0))
		return 0;
	/* The preset's disk limit as the tree has it (a limit changed since
	 * applies from a new tree on), its filesystem mounted. */
	if (tree_has_disk(tree) != (disk != 0) ||
	    (disk && (!tree_disk_mounted(tree) || tree_disk_stale(tree, disk))))
		return 0;
	/* Every layer from k on goes: a crash between a layer's start and its
	 * record can leave one more. */
	for (unsigned i = k; i < SBX_LOWERS_MAX + 1; i++) {
		if (layer_dir(tree, i, path, sizeof(path)) < 0)
			return 0;
		if (rm_tree(path) < 0)
			return al_error_set(err, -EIO, "cannot remove %s", path);
	}
	_cleanup_close_ int dfd = layers_parent(tree);
	layer_name(k, lname, sizeof(lname));
	int r = dfd < 0 ? dfd : mkdir_owned_at(dfd, lname, 0755, c->conf->workspace_uid);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot create %s/%s", tree, lname);
	for (unsigned i = k; i-- > 0;) {
		char up[PATH_MAX_CTL];
		if (layer_dir(tree, i, path, sizeof(path)) < 0 ||
		    fmt_path(up, sizeof(up), "%s/upper", path) < 0 ||
		    !(closed[(*ret_n)++] = strdup(up)))
			return al_error_set(err, -ENOMEM, "out of memory");
	}
	*ret_k = k;
	return 1;
}

static int session_sandbox_in(struct ctl_ctx *c, const struct ctl_session *s,
			      const struct ctl_preset *p, const char *plain, const char *ckpt,
			      char **closed, size_t *n_closed, const struct ctl_observer *obs,
			      struct al_error *err)
{
	char sdir[PATH_MAX_CTL], tools[PATH_MAX_CTL], name[32], lower[PATH_MAX_CTL] = "";
	if (session_dir(c, s->tenant, s->id, sdir, sizeof(sdir)) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	int r = preset_setup(c, p, obs, -1, tools, sizeof(tools), err);
	if (r < 0)
		return r;
	unsigned k = 0;
	bool reused = false;
	if (plain) {
		snprintf(name, sizeof(name), "%s", plain);
	} else {
		/* Held until the new tree names the lower: lowers_gc leaves it. */
		_cleanup_close_ int lk = lowers_lock(c, s->tenant, LOCK_SH, err);
		if (lk < 0)
			return lk;
		char base[CTL_CKPT_HEX + 1] = "", tree[PATH_MAX_CTL];
		r = tree_reuse(c, sdir, ckpt, p->limits.disk, name, sizeof(name), &k, closed,
			       n_closed, err);
		if (r < 0)
			return r;
		reused = r == 1;
		if (reused && (fmt_path(tree, sizeof(tree), "%s/%s", sdir, name) < 0 ||
			       tree_base(tree, base) < 0))
			return al_error_set(err, -EBADMSG, "session %s: %s/base", s->id, name);
		if ((r = lower_get(c, s->tenant, reused ? base : ckpt, obs, lower, sizeof(lower),
				   err)) < 0 ||
		    (!reused &&
		     (r = layer_new(c, sdir, ckpt, p->limits.disk, name, sizeof(name), err)) < 0))
			return r;
	}
	char ws[PATH_MAX_CTL], home[PATH_MAX_CTL], layer[PATH_MAX_CTL], audit[PATH_MAX_CTL];
	char tree[PATH_MAX_CTL];
	if (fmt_path(ws, sizeof(ws), "%s/%s/workspace", sdir, name) < 0 ||
	    fmt_path(home, sizeof(home), "%s/%s/home", sdir, name) < 0 ||
	    fmt_path(tree, sizeof(tree), "%s/%s", sdir, name) < 0 ||
	    layer_dir(tree, k, layer, sizeof(layer)) < 0 ||
	    fmt_path(audit, sizeof(audit), "%s/audit.jsonl", sdir) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	struct sandbox_req q = { .preset = p,
				 .workspace = plain ? ws : NULL,
				 .home = plain ? home : NULL,
				 .lower = plain ? NULL : lower,
				 .layer = plain ? NULL : layer,
				 .closed = closed,
				 .n_closed = *n_closed,
				 .tools = tools[0] ? tools : NULL,
				 .grant = s->grant[0] ? s->grant : NULL,
				 .audit = audit };
	char id[SBX_ID_LEN + 1];
	progress(obs, "starting the sandbox");
	r = sandbox_start(c, &q, id, err);
	if (r < 0) {
		if (!plain && !reused)
			(void)tree_remove(tree);
		return r;
	}
	r = current_set(sdir, name);
	if (r < 0)
		al_error_set_errno(err, r, "cannot record the session's tree in %s", sdir);
	else
		r = ctl_db_session_set_sandbox(c->db, s->tenant, s->id, id, ckpt, err);
	if (r < 0) {
		struct al_error e2 = { 0 };
		(void)sbx_destroy(&c->set, id, &e2);
		return r;
	}
	trees_prune(sdir, name);
	lowers_gc(c, s->tenant, false);
	return 0;
}

/*
 * A sandbox for the session holding checkpoint ckpt: over the session's
 * tree again when its closed layers hold ckpt (tree_reuse), else over the
 * lower directory of ckpt (restored if the tenant has none yet) with a new
 * layer; or on the plain tree of the session's directory named plain
 * (while the session is created: ckpt is "").
 */
static int session_sandbox(struct ctl_ctx *c, const struct ctl_session *s,
			   const struct ctl_preset *p, const char *plain, const char *ckpt,
			   const struct ctl_observer *obs, struct al_error *err)
{
	char *closed[SBX_LOWERS_MAX] = { 0 };
	size_t n_closed = 0;
	int r = session_sandbox_in(c, s, p, plain, ckpt, closed, &n_closed, obs, err);
	for (size_t i = 0; i < n_closed; i++)
		free(closed[i]);
	return r;
}

static void reported(const char *path, const char *what, void *ud)
{
	(void)path;
	(void)what;
	if (ud)
		*(bool *)ud = true;
}

/* Snapshots the session's current tree as its next checkpoint;
 * *ret_reported (may be NULL): whether anything of it was left out of the
 * checkpoint (a fifo, a setuid bit). */
static int session_snapshot(struct ctl_ctx *c, const struct ctl_session *s,
			    char out[CTL_CKPT_HEX + 1], bool *ret_reported, struct al_error *err)
{
	char sdir[PATH_MAX_CTL], name[32], tree[PATH_MAX_CTL];
	if (session_dir(c, s->tenant, s->id, sdir, sizeof(sdir)) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	int r = current_get(sdir, name, sizeof(name));
	if (r < 0)
		return al_error_set_errno(err, r, "session %s: no current tree", s->id);
	if (fmt_path(tree, sizeof(tree), "%s/%s", sdir, name) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	char base[CTL_CKPT_HEX + 1], upper[PATH_MAX_CTL], lname[PATH_MAX_CTL];
	unsigned k;
	if ((r = tree_top(tree, &k, base)) < 0)
		return al_error_set_errno(err, r, "session %s: %s/base, top", s->id, tree);
	if (layer_dir(tree, k, lname, sizeof(lname)) < 0 ||
	    fmt_path(upper, sizeof(upper), "%s/upper", lname) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	_cleanup_repo_ struct st_repo *repo = NULL;
	if ((r = repo_open(c, s->tenant, &repo, err)) < 0)
		return r;
	/* A layered tree: the newest upper directory alone, a delta over the
	 * checkpoint the layers under it hold. */
	struct st_snapshot_opts o = { .workspace = base[0] ? NULL : tree,
				      .upper = base[0] ? upper : NULL,
				      .lower = base[0] ? base : NULL,
				      .session = s->id,
				      .report = reported,
				      .ud = ret_reported };
	if (ret_reported)
		*ret_reported = false;
	struct st_snapshot_result res;
	r = st_snapshot(repo, &o, &res, err);
	if (r < 0)
		return r;
	memcpy(out, res.id, CTL_CKPT_HEX + 1);
	return 0;
}

static bool dir_empty(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return false;
	struct dirent *de;
	bool empty = true;
	while (empty && (de = readdir(d)))
		empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
	closedir(d);
	return empty;
}

/*
 * After a turn succeeded in the sandbox of s, before its checkpoint: a new
 * layer over the last, so that nothing writes in the last one any more
 * (its checkpoint reads exactly what the sandbox goes on over) and the
 * next turn's checkpoint reads what that turn changed. None when the last
 * is empty or the stack is full (the next turn writes on in the last), or
 * when a command still runs in the sandbox (likewise: what it writes after
 * this checkpoint is read by the next). *ret_k: the new layer's number, 0
 * for none; top_set records it once the checkpoint is made. A failure:
 * the sandbox must go.
 */
static int relayer_maybe(struct ctl_ctx *c, const struct ctl_session *s, const struct ctl_preset *p,
			 unsigned *ret_k, struct al_error *err)
{
	*ret_k = 0;
	char sdir[PATH_MAX_CTL], name[32], tree[PATH_MAX_CTL], base[CTL_CKPT_HEX + 1];
	char top[CTL_CKPT_HEX + 1], lname[PATH_MAX_CTL], path[PATH_MAX_CTL];
	unsigned k;
	if (session_dir(c, s->tenant, s->id, sdir, sizeof(sdir)) < 0 ||
	    current_get(sdir, name, sizeof(name)) < 0 ||
	    fmt_path(tree, sizeof(tree), "%s/%s", sdir, name) < 0)
		return al_error_set(err, -ENOENT, "session %s: no current tree", s->id);
	int r = tree_base(tree, base);
	if (r < 0 || (r = tree_top(tree, &k, top)) < 0)
		return al_error_set_errno(err, r, "session %s: %s/base, top", s->id, tree);
	if (!base[0] || k + 2 > SBX_LOWERS_MAX)
		return 0;
	if (layer_dir(tree, k, lname, sizeof(lname)) < 0 ||
	    fmt_path(path, sizeof(path), "%s/upper", lname) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	if (dir_empty(path))
		return 0;
	/* Over: every upper directory so far, newest first, then the lower. */
	char *lowers[SBX_LOWERS_MAX] = { 0 };
	size_t n = 0;
	int dfd = -1;
	char layer[PATH_MAX_CTL], ldir[PATH_MAX_CTL], next[32];
	for (unsigned i = k + 1; i-- > 0 && r >= 0;) {
		if (layer_dir(tree, i, lname, sizeof(lname)) < 0 ||
		    fmt_path(path, sizeof(path), "%s/upper", lname) < 0 ||
		    !(lowers[n++] = strdup(path)))
			r = -ENOMEM;
	}
	if (r >= 0 && (lowers_dir(c, s->tenant, ldir, sizeof(ldir)) < 0 ||
		       fmt_path(path, sizeof(path), "%s/%s", ldir, base) < 0 ||
		       !(lowers[n++] = strdup(path))))
		r = -ENOMEM;
	layer_name(k + 1, next, sizeof(next));
	if (r >= 0 && layer_dir(tree, k + 1, layer, sizeof(layer)) < 0)
		r = -ENAMETOOLONG;
	if (r < 0) {
		al_error_set_errno(err, r, "cannot name the layers");
		goto out;
	}
	dfd = layers_parent(tree);
	if (dfd < 0 || (r = mkdir_owned_at(dfd, next, 0755, c->conf->workspace_uid)) < 0) {
		r = al_error_set_errno(err, dfd < 0 ? dfd : r, "cannot create %s", layer);
		goto out;
	}
	r = sbx_relayer(&c->set, s->sandbox_id, p->agent->home, lowers, n, layer, err);
	if (r == -EBUSY) {
		/* A command of someone else's still runs: this turn writes on in
		 * the last layer. */
		al_error_clear(err);
		(void)rm_tree(layer);
		r = 0;
		goto out;
	}
	if (r >= 0)
		*ret_k = k + 1;
out:
	safe_close(dfd);
	for (size_t i = 0; i < n; i++)
		free(lowers[i]);
	return r;
}

/* Records that the sandbox of s writes in layer k from now on, over what
 * holds checkpoint ckpt. */
static int top_set(struct ctl_ctx *c, const struct ctl_session *s, unsigned k, const char *ckpt,
		   struct al_error *err)
{
	char sdir[PATH_MAX_CTL], name[32], tree[PATH_MAX_CTL];
	if (session_dir(c, s->tenant, s->id, sdir, sizeof(sdir)) < 0 ||
	    current_get(sdir, name, sizeof(name)) < 0 ||
	    fmt_path(tree, sizeof(tree), "%s/%s", sdir, name) < 0)
		return al_error_set(err, -ENOENT, "session %s: no current tree", s->id);
	char text[64 + CTL_CKPT_HEX], boot[40];
	boot_id(boot);
	snprintf(text, sizeof(text), "%u %s %s", k, ckpt, boot);
	int r = file_replace(tree, "top", text);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot record the new layer in %s/top", tree);
	return 0;
}

/* What git said last: the tail of file fd (at most 400 bytes, from a line's
 * start), lines joined by "; ", bytes other than printable ASCII as '?'. */
static void output_tail(int fd, char *out, size_t size)
{
	char buf[400];
	size_t k = 0;
	off_t end = lseek(fd, 0, SEEK_END);
	off_t from = end > (off_t)sizeof(buf) ? end - (off_t)sizeof(buf) : 0;
	ssize_t n = end > 0 ? pread(fd, buf, (size_t)(end - from), from) : 0;
	ssize_t i = 0;
	if (from > 0)
		while (i < n && buf[i++] != '\n')
			;
	while (n > i && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	for (; i < n && k + 3 < size; i++) {
		if (buf[i] == '\n') {
			out[k++] = ';';
			out[k++] = ' ';
		} else {
			out[k++] = buf[i] >= 0x20 && buf[i] < 0x7f ? buf[i] : '?';
		}
	}
	out[k] = '\0';
}

static int clone_repo(struct ctl_ctx *c, const struct ctl_session *s, const char *url,
		      const struct ctl_observer *obs, struct al_error *err)
{
	/* git's own options cannot be smuggled: the URL was checked, and "--"
	 * ends the options anyway. No hooks or config come from the URL. */
	const char *argv[] = { "git",
			       "-c",
			       "protocol.allow=never",
			       "-c",
			       "protocol.https.allow=always",
			       "clone",
			       "--quiet",
			       "--no-recurse-submodules",
			       "--",
			       url,
			       "/workspace",
			       NULL };
	progress(obs, "cloning %s", url);
	/* git's messages, for the error: the failed session's directory, its
	 * audit log included, goes with it. */
	_cleanup_close_ int out = memfd_create("airlock-clone", MFD_CLOEXEC);
	if (out < 0)
		return al_error_set_errno(err, -errno, "memfd_create");
	struct sbx_result res;
	int r = run_logged(c, s->sandbox_id, (char *const *)argv, 30 * 60 * 1000, out, &res, err);
	if (r >= 0 && !result_ok(&res)) {
		char why[64], said[400];
		output_tail(out, said, sizeof(said));
		r = al_error_set(err, -EIO, "cannot clone %s (%s)%s%s", url,
				 result_text(&res, why, sizeof(why)), said[0] ? ": " : "", said);
	}
	return r;
}

int ctl_session_create(struct ctl_ctx *c, const char *tenant, const char *preset,
		       const char *source, const struct ctl_observer *obs, struct ctl_session *ret,
		       struct al_error *err)
{
	if (!tenant_ok(tenant, err))
		return -EINVAL;
	const struct ctl_preset *p =
		ctl_conf_preset(c->conf, preset ? preset : c->conf->default_preset);
	if (!p)
		return al_error_set(err, -ENOENT, "no preset named %s in %s", preset,
				    c->conf->file ? c->conf->file : "the built-in config");
	struct ctl_session s = { 0 };
	random_hex(s.id, CTL_ID_LEN);
	snprintf(s.tenant, sizeof(s.tenant), "%s", tenant);
	snprintf(s.preset, sizeof(s.preset), "%s", p->name);
	snprintf(s.agent, sizeof(s.agent), "%s", p->agent->name);
	char owner[128], repo[128];
	bool github = false, local = false;
	if (source && *source) {
		if (strncmp(source, "https://", 8) == 0 || strstr(source, "://") ||
		    strchr(source, '@') || strstr(source, "::")) {
			int r = ctl_github_url_parse(source, owner, sizeof(owner), repo,
						     sizeof(repo), err);
			if (r < 0)
				return r;
			if (!ctl_preset_allows_repo(p, owner, repo))
				return al_error_set(
					err, -EPERM,
					"preset %s may not be granted %s/%s (its github: "
					"list)",
					p->name, owner, repo);
			github = true;
			snprintf(s.grant, sizeof(s.grant), "github:%s/%s", owner, repo);
			snprintf(s.source, sizeof(s.source), "https://github.com/%s/%s", owner,
				 repo);
		} else {
			if (!c->trusted)
				return al_error_set(
					err, -EPERM,
					"a local directory is a source for local callers "
					"only");
			if (source[0] != '/' || strlen(source) >= sizeof(s.source))
				return al_error_set(
					err, -EINVAL,
					"a local directory is given by its absolute path");
			local = true;
			snprintf(s.source, sizeof(s.source), "%s", source);
		}
	}
	char sdir[PATH_MAX_CTL], tdir[PATH_MAX_CTL];
	if (fmt_path(tdir, sizeof(tdir), "%s/sessions/%s", c->conf->state_dir, tenant) < 0 ||
	    session_dir(c, tenant, s.id, sdir, sizeof(sdir)) < 0)
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	int r = mkdir_private(tdir, 0700, err);
	if (r < 0 || (r = mkdir_private(sdir, 0700, err)) < 0)
		return r;
	r = ctl_db_session_insert(c->db, &s, err);
	if (r < 0) {
		(void)rm_tree(sdir);
		return r;
	}
	/* The starting point: an empty tree, the local directory's files, or
	 * the clone; committed as the session's first checkpoint. */
	char name[32];
	_cleanup_repo_ struct st_repo *rp = NULL;
	if ((r = repo_open(c, tenant, &rp, err)) < 0)
		goto fail;
	if (local) {
		/* Copied through the store: read without following links,
		 * restored owned by the workspace uid. */
		progress(obs, "copying %s", source);
		char imp[CTL_ID_LEN + 8];
		snprintf(imp, sizeof(imp), "%s-import", s.id);
		struct st_snapshot_opts so = { .workspace = source, .session = imp };
		struct st_snapshot_result sr;
		if ((r = st_snapshot(rp, &so, &sr, err)) < 0 ||
		    (r = tree_new(c, sdir, name, sizeof(name), err)) < 0)
			goto fail;
		char ws[PATH_MAX_CTL];
		if (fmt_path(ws, sizeof(ws), "%s/%s/workspace", sdir, name) < 0) {
			r = al_error_set(err, -ENAMETOOLONG, "path too long");
			goto fail;
		}
		(void)rmdir(ws);
		struct st_restore_opts ro = { .chown = true,
					      .uid = c->conf->workspace_uid,
					      .gid = c->conf->workspace_uid };
		r = st_restore_with(rp, sr.id, ws, &ro, err);
		struct al_error e2 = { 0 };
		(void)st_session_delete(rp, imp, &e2);
		if (r < 0)
			goto fail;
	} else if ((r = tree_new(c, sdir, name, sizeof(name), err)) < 0) {
		goto fail;
	}
	char home[PATH_MAX_CTL];
	if (fmt_path(home, sizeof(home), "%s/%s/home", sdir, name) < 0) {
		r = al_error_set(err, -ENAMETOOLONG, "path too long");
		goto fail;
	}
	if ((r = home_files(c, p->agent, home, err)) < 0)
		goto fail;
	if ((r = session_sandbox(c, &s, p, name, "", obs, err)) < 0 ||
	    (r = ctl_db_session_get(c->db, tenant, s.id, &s, err)) < 0)
		goto fail;
	if (github && (r = clone_repo(c, &s, s.source, obs, err)) < 0)
		goto fail;
	char ckpt[CTL_CKPT_HEX + 1];
	bool left_out = false;
	progress(obs, "checkpoint of the starting point");
	if ((r = session_snapshot(c, &s, ckpt, &left_out, err)) < 0 ||
	    (r = ctl_db_checkpoint_add(c->db, tenant, s.id, ckpt, "", err)) < 0)
		goto fail;
	/* The plain tree becomes the checkpoint's lower directory, unless
	 * the checkpoint left anything of it out (then it is restored from
	 * the checkpoint, as a lower must be exactly that): its sandbox goes
	 * first, surely, and the session's starts over it. */
	if ((r = sbx_destroy(&c->set, s.sandbox_id, err)) < 0 && r != -ENOENT)
		goto fail;
	al_error_clear(err);
	(void)ctl_db_session_clear_sandbox_if(c->db, tenant, s.id, s.sandbox_id, err);
	al_error_clear(err);
	char tree[PATH_MAX_CTL];
	if (fmt_path(tree, sizeof(tree), "%s/%s", sdir, name) < 0) {
		r = al_error_set(err, -ENAMETOOLONG, "path too long");
		goto fail;
	}
	if (!left_out && tree_beyond_checkpoint(tree))
		left_out = true;
	if (!left_out && (r = lower_adopt(c, tenant, ckpt, sdir, name, err)) < 0)
		goto fail;
	if ((r = ctl_db_session_get(c->db, tenant, s.id, &s, err)) < 0 ||
	    (r = session_sandbox(c, &s, p, NULL, ckpt, obs, err)) < 0 ||
	    (r = ctl_db_session_get(c->db, tenant, s.id, ret, err)) < 0)
		goto fail;
	return 0;
fail:;
	struct al_error e3 = { 0 };
	(void)ctl_db_session_get(c->db, tenant, s.id, &s, &e3);
	sandbox_discard(c, &s);
	(void)ctl_db_session_delete(c->db, tenant, s.id, &e3);
	if (rp)
		(void)st_session_delete(rp, s.id, &e3);
	trees_unmount(sdir);
	(void)rm_tree(sdir);
	return r;
}

/* ---- turns ---- */

/* Events a turn stores at most; what comes after is counted and said in
 * one last status event. */
#define TURN_EVENTS_MAX 20000
/* Events are stored in batches (one transaction each): when the agent
 * pauses, or at CTL_EVENTS_BATCH_MAX events, EVENTS_BATCH_BYTES of data or
 * EVENTS_BATCH_MS after the first waiting one. */
#define EVENTS_BATCH_BYTES (1024 * 1024)
#define EVENTS_BATCH_MS 100

struct turn_io {
	struct ctl_ctx *c;
	const struct ctl_session *s;
	uint32_t n;
	const struct ctl_observer *obs;
	struct ctl_agentout *ao;
	int out_fd, err_fd; /* read ends */
	int rc;
	struct al_error err;
	struct ctl_event_in pend[CTL_EVENTS_BATCH_MAX]; /* copies, to be stored */
	size_t n_pend, pend_bytes;
	int64_t pend_since;
	uint64_t stored, dropped;
};

static void events_drop_pending(struct turn_io *t)
{
	for (size_t i = 0; i < t->n_pend; i++) {
		free((char *)t->pend[i].kind);
		free((char *)t->pend[i].data);
	}
	t->n_pend = t->pend_bytes = 0;
}

/* Stores the waiting events in one transaction, then shows them. */
static int events_flush(struct turn_io *t)
{
	if (t->n_pend == 0)
		return 0;
	uint64_t first = 0;
	int r = ctl_db_event_append_many(t->c->db, t->s->tenant, t->s->id, t->n, t->pend, t->n_pend,
					 &first, &t->err);
	if (r >= 0) {
		t->stored += t->n_pend;
		for (size_t i = 0; t->obs && t->obs->event && i < t->n_pend; i++) {
			struct ctl_event_row e = { .seq = first + i,
						   .turn = t->n,
						   .at = now_ms(),
						   .kind = t->pend[i].kind,
						   .data = t->pend[i].data };
			t->obs->event(&e, t->obs->ud);
		}
	}
	events_drop_pending(t);
	return r;
}

static int on_event(const char *kind, const char *data, void *ud)
{
	struct turn_io *t = ud;
	if (t->stored + t->n_pend >= TURN_EVENTS_MAX) {
		t->dropped++;
		return 0;
	}
	char *k = strdup(kind), *d = strdup(data);
	if (!k || !d) {
		free(k);
		free(d);
		return al_error_set(&t->err, -ENOMEM, "out of memory");
	}
	if (t->n_pend == 0)
		t->pend_since = now_ms();
	t->pend[t->n_pend++] = (struct ctl_event_in){ k, d };
	t->pend_bytes += strlen(d);
	if (t->n_pend == CTL_EVENTS_BATCH_MAX || t->pend_bytes >= EVENTS_BATCH_BYTES ||
	    now_ms() - t->pend_since >= EVENTS_BATCH_MS)
		return events_flush(t);
	return 0;
}

/* One event of airlock's own, stored even past the cap. */
static int event_own(struct turn_io *t, const char *kind, const char *data)
{
	char *k = strdup(kind), *d = strdup(data);
	if (!k || !d) {
		free(k);
		free(d);
		return al_error_set(&t->err, -ENOMEM, "out of memory");
	}
	if (t->n_pend == CTL_EVENTS_BATCH_MAX) {
		int r = events_flush(t);
		if (r < 0) {
			free(k);
			free(d);
			return r;
		}
	}
	if (t->n_pend == 0)
		t->pend_since = now_ms();
	t->pend[t->n_pend++] = (struct ctl_event_in){ k, d };
	t->pend_bytes += strlen(d);
	return 0;
}

/* The last of a turn's events: what is waiting, and the count of those
 * past the cap. */
static int events_finish(struct turn_io *t)
{
	int r = events_flush(t);
	if (r >= 0 && t->dropped) {
		char data[160];
		snprintf(data, sizeof(data),
			 "{\"message\":\"%" PRIu64 " more events were not stored (at most %d "
			 "per turn)\"}",
			 t->dropped, TURN_EVENTS_MAX);
		t->dropped = 0;
		r = event_own(t, "status", data);
		if (r >= 0)
			r = events_flush(t);
	}
	return r;
}

/* Reads the agent's stdout and stderr until both end. */
static void *turn_reader(void *ud)
{
	struct turn_io *t = ud;
	char buf[65536];
	bool open_out = true, open_err = true;
	while (open_out || open_err) {
		struct pollfd p[2] = { { .fd = open_out ? t->out_fd : -1, .events = POLLIN },
				       { .fd = open_err ? t->err_fd : -1, .events = POLLIN } };
		/* Events waiting are stored as soon as the agent pauses. */
		int pr = poll(p, 2, t->n_pend ? 0 : -1);
		if (pr < 0) {
			if (errno == EINTR)
				continue;
			t->rc = -errno;
			break;
		}
		if (pr == 0) {
			int r = events_flush(t);
			if (r < 0 && t->rc == 0)
				t->rc = r;
			continue;
		}
		for (int i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			ssize_t n = read(p[i].fd, buf, sizeof(buf));
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (n <= 0) {
				if (i == 0)
					open_out = false;
				else
					open_err = false;
				continue;
			}
			int r = i == 0 ? ctl_agentout_feed(t->ao, buf, (size_t)n) :
					 ctl_agentout_feed_stderr(t->ao, buf, (size_t)n);
			/* Waiting events go out in time even while the agent
			 * never pauses (say it writes to stderr all along). */
			if (r >= 0 && t->n_pend && now_ms() - t->pend_since >= EVENTS_BATCH_MS)
				r = events_flush(t);
			/* A stored event that fails (the database) stops the
			 * events, never the reading: the agent must not block. */
			if (r < 0 && t->rc == 0)
				t->rc = r;
		}
	}
	return NULL;
}

/* The argv of a turn: the template with {prompt} and {session} replaced
 * whole. */
static char **turn_argv(const struct ctl_agent *a, bool resume, const char *prompt, const char *sid)
{
	char *const *tpl = resume ? a->argv_resume : a->argv_first;
	size_t n = 0;
	while (tpl[n])
		n++;
	char **v = calloc(n + 1, sizeof(char *));
	if (!v)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(tpl[i], "{prompt}") == 0)
			v[i] = (char *)prompt;
		else if (strcmp(tpl[i], "{session}") == 0)
			v[i] = (char *)sid;
		else
			v[i] = tpl[i];
	}
	return v;
}

/* The agent's environment: its own, the preset's, HOME, PATH with the
 * tools, and a heap that fits the sandbox. */
static int turn_env(const struct ctl_preset *p, char ***ret, size_t *ret_n)
{
	const struct ctl_agent *a = p->agent;
	size_t cap = a->n_env + p->n_env + 4;
	char **v = calloc(cap + 1, sizeof(char *));
	if (!v)
		return -ENOMEM;
	size_t n = 0;
	int r = 0;
	if (asprintf(&v[n++], "HOME=%s", a->home) < 0 ||
	    asprintf(&v[n++],
		     "PATH=%s/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		     CTL_TOOLS_PATH) < 0)
		r = -ENOMEM;
	if (r == 0 && a->node_heap && p->limits.memory) {
		/* Node sizes its heap from the host's memory: three quarters of
		 * the sandbox's limit instead. */
		uint64_t mb = p->limits.memory / (1024 * 1024) * 3 / 4;
		if (asprintf(&v[n++], "NODE_OPTIONS=--max-old-space-size=%" PRIu64, mb) < 0)
			r = -ENOMEM;
	}
	for (size_t i = 0; r == 0 && i < a->n_env; i++)
		if (!(v[n++] = strdup(a->env[i])))
			r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < p->n_env; i++)
		if (!(v[n++] = strdup(p->env[i])))
			r = -ENOMEM;
	if (r < 0) {
		for (size_t i = 0; i < n; i++)
			free(v[i]);
		free(v);
		return r;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/* Runs the agent for turn t in the session's live sandbox; fills *oc. */
static int turn_agent(struct ctl_ctx *c, const struct ctl_session *s, const struct ctl_preset *p,
		      const struct ctl_turn *t, const struct ctl_observer *obs,
		      const char *first_sid, struct ctl_outcome *oc, bool *timed_out,
		      struct al_error *err)
{
	const struct ctl_agent *a = p->agent;
	bool resume = s->agent_session[0] != '\0';
	/* Every vault value is redacted from what the agent prints: read only
	 * by a process that runs a turn, when it does. */
	if (!c->red_loaded) {
		int vr = ctl_vault_each(c->conf->vault, add_secret, c->red, err);
		if (vr < 0)
			return vr;
		c->red_loaded = true;
	}
	const char *sid = resume ? s->agent_session : first_sid;
	/* A message is one argument, but the agent's option parser would take
	 * one that starts with '-' for an option: a space in front keeps it
	 * a message (and means nothing to a model). */
	_cleanup_free_ char *spaced = NULL;
	const char *msg = t->prompt;
	if (msg[0] == '-' && asprintf(&spaced, " %s", msg) >= 0)
		msg = spaced;
	if (msg[0] == '-')
		return al_error_set(err, -ENOMEM, "out of memory");
	_cleanup_free_ char **argv = turn_argv(a, resume, a->prompt_stdin ? "" : msg, sid);
	char **env = NULL;
	size_t n_env = 0;
	if (!argv || turn_env(p, &env, &n_env) < 0) {
		free(env);
		return al_error_set(err, -ENOMEM, "out of memory");
	}
	/* The message on stdin (closed after it), or nothing: an agent that
	 * waits for its stdin to end must not wait. */
	_cleanup_close_ int in = -1;
	if (a->prompt_stdin) {
		in = memfd_create("airlock-prompt", MFD_CLOEXEC);
		if (in < 0 || write_full(in, t->prompt, strlen(t->prompt)) < 0 ||
		    lseek(in, 0, SEEK_SET) < 0) {
			for (size_t i = 0; i < n_env; i++)
				free(env[i]);
			free(env);
			return al_error_set_errno(err, -errno, "cannot hold the prompt");
		}
	}
	int outp[2] = { -1, -1 }, errp[2] = { -1, -1 };
	struct turn_io io = { .c = c, .s = s, .n = t->n, .obs = obs };
	int r = ctl_agentout_new(a->parser, c->red, on_event, &io, &io.ao);
	if (r < 0 || pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
		r = al_error_set_errno(err, r < 0 ? r : -errno, "cannot start the agent");
		goto out;
	}
	io.out_fd = outp[0];
	io.err_fd = errp[0];
	pthread_t th;
	if ((r = -pthread_create(&th, NULL, turn_reader, &io)) < 0) {
		al_error_set_errno(err, r, "cannot start the agent's reader");
		goto out;
	}
	struct sbx_exec_opts o = {
		.env = env,
		.n_env = n_env,
		.cwd = "/workspace",
		.timeout_ms = p->limits.turn_ms,
		.output_limit = p->limits.output,
		.stdin_fd = in,
		.stdout_fd = outp[1],
		.stderr_fd = errp[1],
	};
	struct sbx_result res = { 0 };
	/* The turn's own egress budget, from zero (its gateway refuses what
	 * passes it, with 403 and an audit line). */
	bool budget = p->network != SBX_NETWORK_NONE &&
		      (p->limits.egress_requests || p->limits.egress_bytes);
	char gsock[PATH_MAX_CTL];
	if (budget) {
		if (fmt_path(gsock, sizeof(gsock), "%s/%s/gateway.sock", c->set.state_dir,
			     s->sandbox_id) < 0)
			r = al_error_set(err, -ENAMETOOLONG, "path too long");
		else
			r = gw_set_budget(gsock, p->limits.egress_requests, p->limits.egress_bytes,
					  NULL, err);
		if (r < 0) {
			outp[1] = safe_close(outp[1]);
			errp[1] = safe_close(errp[1]);
			pthread_join(th, NULL);
			goto out;
		}
	}
	progress(obs, "turn %u: %s is working", t->n, a->title ? a->title : a->name);
	r = sbx_exec(&c->set, s->sandbox_id, argv, &o, &res, err);
	outp[1] = safe_close(outp[1]);
	errp[1] = safe_close(errp[1]);
	pthread_join(th, NULL);
	if (r < 0) {
		(void)events_finish(&io);
		/* The sandbox failed under the agent (lost, killed, destroyed
		 * by a cancel): a failed turn, not airlock's own error. */
		oc->succeeded = false;
		snprintf(oc->reason, sizeof(oc->reason), "the session's sandbox failed: %s",
			 al_error_message(err));
		al_error_clear(err);
		r = 0;
		goto out;
	}
	bool exited = res.outcome == SBX_EXITED;
	int status = exited ? res.status : res.outcome == SBX_SIGNALED ? res.status : -1;
	ctl_agentout_finish(io.ao, exited, status, oc);
	if (budget) {
		/* What the turn spent, said in a status event; the next turn gets
		 * its own budget. */
		struct gw_budget_used used = { 0 };
		struct al_error e2 = { 0 };
		if (gw_set_budget(gsock, p->limits.egress_requests, p->limits.egress_bytes, &used,
				  &e2) == 0) {
			char data[200];
			snprintf(data, sizeof(data),
				 "{\"message\":\"egress: %" PRIu64 " requests, %" PRIu64
				 " bytes (the turn's budget: %" PRIu64 " requests, %" PRIu64
				 " bytes; 0: none)\"}",
				 used.requests, used.bytes, p->limits.egress_requests,
				 p->limits.egress_bytes);
			(void)event_own(&io, "status", data);
		}
	}
	int fr = events_finish(&io);
	if (fr < 0 && io.rc == 0)
		io.rc = fr;
	if (oc->succeeded && io.rc < 0) {
		oc->succeeded = false;
		snprintf(oc->reason, sizeof(oc->reason),
			 "the agent's events could not be stored: %s",
			 al_error_message(&io.err)[0] ? al_error_message(&io.err) : "error");
	}
	if (res.outcome == SBX_TIMED_OUT) {
		oc->succeeded = false;
		snprintf(oc->reason, sizeof(oc->reason), "timed out after %" PRIu64 " s",
			 p->limits.turn_ms / 1000);
	} else if (res.outcome == SBX_OOM_KILLED || res.oom_kills) {
		oc->succeeded = false;
		snprintf(oc->reason, sizeof(oc->reason), "the memory limit killed the agent");
	} else if (res.output_truncated) {
		oc->succeeded = false;
		snprintf(oc->reason, sizeof(oc->reason),
			 "the agent's output passed the limit of %" PRIu64 " bytes",
			 p->limits.output);
	}
	/* The first turn's id is ours when the agent takes it; the output's
	 * otherwise, which must look like an id. */
	if (oc->succeeded && !oc->agent_session[0] && sid)
		snprintf(oc->agent_session, sizeof(oc->agent_session), "%s", sid);
	if (oc->succeeded && !agent_sid_ok(oc->agent_session)) {
		oc->succeeded = false;
		snprintf(oc->reason, sizeof(oc->reason),
			 "the agent reported no usable session id to resume");
	}
	*timed_out = res.outcome == SBX_TIMED_OUT;
	r = 0;
out:
	safe_close(outp[0]);
	safe_close(outp[1]);
	safe_close(errp[0]);
	safe_close(errp[1]);
	ctl_agentout_free(io.ao);
	events_drop_pending(&io);
	for (size_t i = 0; i < n_env; i++)
		free(env[i]);
	free(env);
	return r;
}

/* Waits until this turn may run (the one before it ended); 0 once claimed
 * (*t filled), -ECANCELED when it was cancelled while it waited. */
static int turn_wait_claim(struct ctl_ctx *c, const char *tenant, const char *session, uint32_t n,
			   const struct ctl_observer *obs, struct ctl_turn *t, struct al_error *err)
{
	uint64_t start = 0;
	(void)ctl_proc_starttime((int32_t)getpid(), &start);
	bool said = false;
	for (unsigned round = 0;; round++) {
		/* Now and then: turns whose caller or runner died go, so that
		 * nobody waits behind them forever. */
		if (round % 5 == 4) {
			unsigned nr;
			if (ctl_db_recover(c->db, sandbox_gone, c, &nr, err) < 0)
				return -EIO;
		}
		struct ctl_turn cur = { 0 };
		int r = ctl_db_turn_get(c->db, tenant, session, n, &cur, err);
		if (r < 0)
			return r;
		enum ctl_turn_state st = cur.state;
		ctl_turn_clear(&cur);
		if (ctl_turn_state_terminal(st))
			return -ECANCELED;
		/* Ours only, in queue order. */
		r = ctl_db_turn_claim_n(c->db, tenant, session, n, (int32_t)getpid(), start, t,
					err);
		if (r == 0)
			return 0;
		if (r != -EBUSY)
			return r;
		al_error_clear(err);
		if (!said)
			progress(obs, "turn %u queued: another turn of this session is running", n);
		said = true;
		struct timespec ts = { 0, WAIT_STEP_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
}

struct cost_sum {
	const char *agent_session;
	double sum;
};

static int cost_fn(const struct ctl_turn *t, void *ud)
{
	struct cost_sum *cs = ud;
	if (t->state == CTL_TURN_SUCCEEDED && t->usage.have_cost &&
	    strcmp(t->agent_session, cs->agent_session) == 0)
		cs->sum += t->usage.cost_usd;
	return 0;
}

/* An agent that reports its whole session's cost (Claude on --resume):
 * this turn's is what the session's earlier turns of that agent session
 * did not cost. A fork's turns before it are another session's, so a
 * fork's first turn counts them too. */
static void turn_cost_of_total(struct ctl_ctx *c, const struct ctl_session *s,
			       struct ctl_outcome *oc)
{
	struct cost_sum cs = { oc->agent_session, 0 };
	struct al_error e = { 0 };
	if (ctl_db_turn_list(c->db, s->tenant, s->id, cost_fn, &cs, &e) < 0)
		return;
	oc->usage.cost_usd = oc->usage.cost_usd > cs.sum ? oc->usage.cost_usd - cs.sum : 0;
}

static int turn_run(struct ctl_ctx *c, const char *tenant, const char *session, const char *prompt,
		    const struct ctl_observer *obs, struct ctl_turn *ret, bool *ret_timed_out,
		    uint32_t *ret_n, struct al_error *err);

int ctl_turn_run(struct ctl_ctx *c, const char *tenant, const char *session, const char *prompt,
		 const struct ctl_observer *obs, struct ctl_turn *ret, bool *ret_timed_out,
		 struct al_error *err)
{
	uint32_t n = 0;
	int r = turn_run(c, tenant, session, prompt, obs, ret, ret_timed_out, &n, err);
	/* Whatever happened, this runner is done with its turn: the next may
	 * start (runners of one session never overlap). */
	if (n) {
		struct ctl_session s;
		struct al_error e2 = { 0 };
		if (ctl_db_session_get(c->db, tenant, session, &s, &e2) == 0)
			(void)ctl_db_turn_release(c->db, tenant, s.id, n, (int32_t)getpid(), &e2);
	}
	return r;
}

static int turn_run(struct ctl_ctx *c, const char *tenant, const char *session, const char *prompt,
		    const struct ctl_observer *obs, struct ctl_turn *ret, bool *ret_timed_out,
		    uint32_t *ret_n, struct al_error *err)
{
	struct ctl_session s;
	int r = ctl_db_session_get(c->db, tenant, session, &s, err);
	if (r < 0)
		return r;
	const struct ctl_preset *p = ctl_conf_preset(c->conf, s.preset);
	if (!p)
		return al_error_set(err, -ENOENT,
				    "session %s uses preset %s, which the config no longer has",
				    s.id, s.preset);
	if ((r = grant_check(p, &s, err)) < 0)
		return r;
	if (!*prompt)
		return al_error_set(err, -EINVAL, "an empty message");
	if (s.state == CTL_SESSION_DELETING)
		return al_error_set(err, -ENOENT, "session %s is being deleted", s.id);
	uint32_t n;
	uint64_t me = 0;
	(void)ctl_proc_starttime((int32_t)getpid(), &me);
	if ((r = ctl_db_turn_queue_by(c->db, tenant, s.id, prompt, (int32_t)getpid(), me, &n,
				      err)) < 0)
		return r;
	*ret_n = n;
	struct ctl_turn t = { 0 };
	r = turn_wait_claim(c, tenant, s.id, n, obs, &t, err);
	if (r == -ECANCELED)
		return ctl_db_turn_get(c->db, tenant, s.id, n, ret, err);
	if (r < 0)
		return r;
	/* Promise 9: the live sandbox is kept while it holds the last
	 * committed checkpoint; anything else starts afresh from it. */
	if ((r = ctl_db_session_get(c->db, tenant, s.id, &s, err)) < 0)
		goto fail;
	bool reuse = s.sandbox_id[0] && strcmp(s.sandbox_checkpoint, s.last_checkpoint) == 0 &&
		     sandbox_alive(c, s.sandbox_id);
	if (reuse && p->limits.disk) {
		/* Its own filesystem full (or of another size than the preset's
		 * now): a new tree gives the room back. */
		char sdir[PATH_MAX_CTL], name[32], tree[PATH_MAX_CTL];
		if (session_dir(c, tenant, s.id, sdir, sizeof(sdir)) < 0 ||
		    current_get(sdir, name, sizeof(name)) < 0 ||
		    fmt_path(tree, sizeof(tree), "%s/%s", sdir, name) < 0 || !tree_has_disk(tree) ||
		    tree_disk_stale(tree, p->limits.disk))
			reuse = false;
	}
	if (!reuse) {
		sandbox_discard(c, &s);
		/* One that could not be destroyed may still write its layer: the
		 * session's tree is not taken from under it. */
		if ((r = ctl_db_session_get(c->db, tenant, s.id, &s, err)) < 0)
			goto fail;
		if (s.sandbox_id[0]) {
			r = al_error_set(err, -EBUSY,
					 "the session's sandbox %s could not be destroyed: run "
					 "`airlock sandbox destroy %s`",
					 s.sandbox_id, s.sandbox_id);
			goto fail;
		}
		if ((r = session_sandbox(c, &s, p, NULL, s.last_checkpoint, obs, err)) < 0 ||
		    (r = ctl_db_session_get(c->db, tenant, s.id, &s, err)) < 0)
			goto fail;
	}
	/* Cancelled while its sandbox was being made: the agent never starts
	 * (the cancel could not kill what did not run yet). */
	struct ctl_turn cur = { 0 };
	if ((r = ctl_db_turn_get(c->db, tenant, s.id, n, &cur, err)) < 0)
		goto fail;
	enum ctl_turn_state cst = cur.state;
	ctl_turn_clear(&cur);
	if (cst != CTL_TURN_RUNNING) {
		sandbox_discard(c, &s);
		ctl_turn_clear(&t);
		return ctl_db_turn_get(c->db, tenant, s.id, n, ret, err);
	}
	char first_sid[37];
	random_uuid(first_sid);
	struct ctl_outcome oc;
	memset(&oc, 0, sizeof(oc));
	bool timed_out = false;
	if ((r = turn_agent(c, &s, p, &t, obs, p->agent->choose_session ? first_sid : NULL, &oc,
			    &timed_out, err)) < 0)
		goto fail;
	if (oc.usage.have_cost && oc.cost_is_session_total)
		turn_cost_of_total(c, &s, &oc);
	char ckpt[CTL_CKPT_HEX + 1] = "";
	if (oc.succeeded) {
		/* Cancelled meanwhile: nothing of this turn is committed. */
		struct ctl_turn now = { 0 };
		if (ctl_db_turn_get(c->db, tenant, s.id, n, &now, err) == 0 &&
		    now.state == CTL_TURN_RUNNING) {
			progress(obs, "checkpoint of turn %u", n);
			unsigned k = 0;
			r = relayer_maybe(c, &s, p, &k, err);
			if (r < 0) {
				/* Its workspace may be gone: never taken again for
				 * the last checkpoint's, even if it outlives the
				 * discard below. */
				struct al_error e4 = { 0 };
				(void)ctl_db_session_set_sandbox(c->db, tenant, s.id, s.sandbox_id,
								 "", &e4);
			}
			if (r >= 0)
				r = session_snapshot(c, &s, ckpt, NULL, err);
			if (r >= 0 && k)
				r = top_set(c, &s, k, ckpt, err);
			if (r < 0) {
				oc.succeeded = false;
				snprintf(oc.reason, sizeof(oc.reason), "the checkpoint failed: %s",
					 al_error_message(err));
				al_error_clear(err);
			}
		}
		ctl_turn_clear(&now);
	}
	r = ctl_db_turn_finish(c->db, tenant, s.id, n,
			       oc.succeeded ? CTL_TURN_SUCCEEDED : CTL_TURN_FAILED, oc.reason,
			       &oc.usage, oc.succeeded ? ckpt : NULL,
			       oc.succeeded ? oc.agent_session : NULL, err);
	if (r == -EALREADY) {
		/* Cancelled while it ran: its sandbox went with the cancel. */
		al_error_clear(err);
		r = 0;
	} else if (r < 0) {
		goto fail;
	}
	if (oc.succeeded && r == 0) {
		struct al_error e2 = { 0 };
		(void)ctl_db_session_set_sandbox(c->db, tenant, s.id, s.sandbox_id, ckpt, &e2);
	} else {
		/* A failed or cancelled turn's sandbox holds what was never
		 * committed: it goes (this runner's own, never a newer one),
		 * and the next turn starts afresh. */
		sandbox_discard(c, &s);
	}
	ctl_turn_clear(&t);
	if (ret_timed_out)
		*ret_timed_out = timed_out;
	return ctl_db_turn_get(c->db, tenant, s.id, n, ret, err);
fail:;
	/* airlock's own failure: the turn is failed with the reason, never
	 * left running. */
	struct al_error e3 = { 0 };
	int fr = ctl_db_turn_finish(c->db, tenant, s.id, n, CTL_TURN_FAILED, al_error_message(err),
				    NULL, NULL, NULL, &e3);
	sandbox_discard(c, &s);
	ctl_turn_clear(&t);
	/* Cancelled while it ran: the sandbox went under it, which is the
	 * cancel's doing, not a failure of airlock's. */
	if (fr == -EALREADY) {
		al_error_clear(err);
		return ctl_db_turn_get(c->db, tenant, s.id, n, ret, err);
	}
	return r;
}

int ctl_turn_cancel(struct ctl_ctx *c, const char *tenant, const char *session, uint32_t *ret_n,
		    struct al_error *err)
{
	struct ctl_session s;
	int r = ctl_db_session_get(c->db, tenant, session, &s, err);
	if (r < 0)
		return r;
	/* The running turn; with none, the first queued one (chosen in the
	 * cancel's own transaction: a turn that ends meanwhile is not it).
	 * A running turn's sandbox is forgotten with the cancel, in one
	 * transaction: no next turn can take it for the last checkpoint's. The
	 * agent and everything it started go with it; its runner sees its
	 * command end and records nothing more. */
	char sbx[CTL_SANDBOX_ID_MAX + 1];
	r = ctl_db_turn_cancel_take(c->db, tenant, s.id, CTL_TURN_CURRENT, "cancelled", ret_n, sbx,
				    sizeof(sbx), err);
	if (r < 0)
		return r;
	uint32_t n = *ret_n;
	if (sbx[0]) {
		struct al_error e2 = { 0 };
		int dr = sbx_destroy(&c->set, sbx, &e2);
		if (dr < 0 && dr != -ENOENT)
			return al_error_set(err, dr,
					    "turn %u is cancelled, but its sandbox %s could not be "
					    "destroyed (%s): run `airlock sandbox destroy %s`",
					    n, sbx, al_error_message(&e2), sbx);
	}
	return 0;
}

/* ---- fork, delete, diff ---- */

int ctl_session_fork(struct ctl_ctx *c, const char *tenant, const char *from,
		     struct ctl_session *ret, struct al_error *err)
{
	struct ctl_session parent;
	struct ctl_checkpoint ck;
	char agent_sid[CTL_AGENT_SID_MAX + 1] = "";
	int r = ctl_db_session_get(c->db, tenant, from, &parent, err);
	if (r == 0) {
		if (!parent.last_checkpoint[0])
			return al_error_set(err, -ENOENT, "session %s has no checkpoint yet",
					    parent.id);
		r = ctl_db_checkpoint_get(c->db, tenant, parent.last_checkpoint, &ck, err);
		snprintf(agent_sid, sizeof(agent_sid), "%s", parent.agent_session);
	} else if (r == -ENOENT || (r == -EINVAL && strlen(from) > CTL_ID_LEN)) {
		/* Not a session's id (or prefix): a checkpoint's. */
		al_error_clear(err);
		r = ctl_db_checkpoint_get(c->db, tenant, from, &ck, err);
		if (r == -ENOENT)
			return al_error_set(err, -ENOENT, "no session or checkpoint %s", from);
		if (r == 0)
			r = ctl_db_session_get(c->db, tenant, ck.session, &parent, err);
		if (r == 0 && ck.turn) {
			struct ctl_turn t = { 0 };
			if (ctl_db_turn_get(c->db, tenant, ck.session, ck.turn, &t, err) == 0)
				snprintf(agent_sid, sizeof(agent_sid), "%s", t.agent_session);
			ctl_turn_clear(&t);
		}
	}
	if (r < 0)
		return r;
	const struct ctl_preset *pp = ctl_conf_preset(c->conf, parent.preset);
	if (pp && (r = grant_check(pp, &parent, err)) < 0)
		return r;
	struct ctl_session s = { 0 };
	random_hex(s.id, CTL_ID_LEN);
	snprintf(s.tenant, sizeof(s.tenant), "%s", tenant);
	snprintf(s.preset, sizeof(s.preset), "%s", parent.preset);
	snprintf(s.agent, sizeof(s.agent), "%s", parent.agent);
	snprintf(s.source, sizeof(s.source), "%s", parent.source);
	snprintf(s.grant, sizeof(s.grant), "%s", parent.grant);
	snprintf(s.forked_from, sizeof(s.forked_from), "%s", ck.id);
	snprintf(s.last_checkpoint, sizeof(s.last_checkpoint), "%s", ck.id);
	snprintf(s.agent_session, sizeof(s.agent_session), "%s", agent_sid);
	char sdir[PATH_MAX_CTL];
	if (session_dir(c, tenant, s.id, sdir, sizeof(sdir)) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	_cleanup_repo_ struct st_repo *rp = NULL;
	if ((r = repo_open(c, tenant, &rp, err)) < 0 ||
	    (r = st_session_adopt(rp, s.id, ck.id, err)) < 0)
		return r;
	if ((r = mkdir_private(sdir, 0700, err)) < 0 ||
	    (r = ctl_db_session_insert(c->db, &s, err)) < 0 ||
	    (r = ctl_db_checkpoint_add(c->db, tenant, s.id, ck.id, "", err)) < 0) {
		struct al_error e2 = { 0 };
		(void)st_session_delete(rp, s.id, &e2);
		(void)ctl_db_session_delete(c->db, tenant, s.id, &e2);
		(void)rm_tree(sdir);
		return r;
	}
	return ctl_db_session_get(c->db, tenant, s.id, ret, err);
}

int ctl_session_delete(struct ctl_ctx *c, const char *tenant, const char *session,
		       struct al_error *err)
{
	struct ctl_session s;
	int r = ctl_db_session_get(c->db, tenant, session, &s, err);
	if (r < 0)
		return r;
	/* From here the session refuses turns. */
	if ((r = ctl_db_session_set_state(c->db, tenant, s.id, CTL_SESSION_DELETING, err)) < 0)
		return r;
	uint32_t n;
	struct al_error e2 = { 0 };
	char taken[CTL_SANDBOX_ID_MAX + 1];
	while (ctl_db_turn_cancel_take(c->db, tenant, s.id, 0, "the session was deleted", &n, taken,
				       sizeof(taken), &e2) == 0)
		if (taken[0])
			(void)sbx_destroy(&c->set, taken, &e2);
	/* Their runners see their sandboxes go and stop; none may still be
	 * making one when the files go (bounded: a runner that hangs is
	 * reported, and `rm` again finishes the job). */
	for (int i = 0;; i++) {
		uint32_t alive = 0;
		if ((r = ctl_db_session_runners(c->db, tenant, s.id, &alive, err)) < 0)
			return r;
		if (!alive)
			break;
		if (i == 300)
			return al_error_set(
				err, -EBUSY,
				"session %s: a turn's runner is still at work after 60 s; "
				"try again",
				s.id);
		struct timespec ts = { 0, WAIT_STEP_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
	if ((r = ctl_db_session_get(c->db, tenant, s.id, &s, err)) < 0)
		return r;
	if (s.sandbox_id[0] && (r = sbx_destroy(&c->set, s.sandbox_id, err)) < 0 && r != -ENOENT)
		return r;
	/* The files first: should anything stop the deletion, the session is
	 * still listed (refusing turns) with its checkpoints, and `rm` again
	 * finishes the job. */
	char sdir[PATH_MAX_CTL];
	if (session_dir(c, tenant, s.id, sdir, sizeof(sdir)) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	trees_unmount(sdir);
	if ((r = rm_tree(sdir)) < 0)
		return al_error_set_errno(err, r, "cannot remove %s", sdir);
	lowers_gc(c, tenant, false);
	_cleanup_repo_ struct st_repo *rp = NULL;
	if ((r = repo_open(c, tenant, &rp, err)) < 0 || (r = st_session_delete(rp, s.id, err)) < 0)
		return r;
	/* Really gone: GC takes what no other session refers to. */
	struct st_gc_opts go = { .repack = true, .max_unused_pct = 0 };
	struct st_gc_result gr;
	if ((r = st_gc(rp, &go, &gr, err)) < 0)
		return r;
	return ctl_db_session_delete(c->db, tenant, s.id, err);
}

/* The workspace's part of a tree's diff, its paths made relative to it. */
static int diff_workspace_only(const struct buf *in, struct buf *out)
{
	static const char ws[] = "workspace/";
	const size_t wl = sizeof(ws) - 1;
	bool keep = false;
	int r = 0;
	for (size_t off = 0; r >= 0 && off < in->len;) {
		const char *line = in->data + off;
		const char *nl = memchr(line, '\n', in->len - off);
		size_t len = nl ? (size_t)(nl - line) + 1 : in->len - off;
		off += len;
		/* A path's header: "A path", "D path", "M path". */
		if (len > 2 && (line[0] == 'A' || line[0] == 'D' || line[0] == 'M') &&
		    line[1] == ' ') {
			/* A quoted path (it holds a control character, the
			 * store's diff says so) keeps its quotes. */
			bool quoted = line[2] == '"';
			size_t at = 2 + (quoted ? 1 : 0);
			keep = len > at + wl && memcmp(line + at, ws, wl) == 0;
			if (keep)
				r = buf_appendf(out, "%c %s%.*s", line[0], quoted ? "\"" : "",
						(int)(len - at - wl), line + at + wl);
			continue;
		}
		if (!keep)
			continue;
		if (len > 6 + wl &&
		    (memcmp(line, "--- a/", 6) == 0 || memcmp(line, "+++ b/", 6) == 0) &&
		    memcmp(line + 6, ws, wl) == 0)
			r = buf_appendf(out, "%.6s%.*s", line, (int)(len - 6 - wl), line + 6 + wl);
		else
			r = buf_append(out, line, len);
	}
	return r;
}

int ctl_session_diff(struct ctl_ctx *c, const char *tenant, const char *session, uint32_t n,
		     bool with_text, bool all, struct buf *out, struct al_error *err)
{
	struct ctl_session s;
	int r = ctl_db_session_get(c->db, tenant, session, &s, err);
	if (r < 0)
		return r;
	if (n == 0) {
		/* The last turn that committed a checkpoint. */
		for (uint32_t i = s.turns; i >= 1 && n == 0; i--) {
			struct ctl_turn t = { 0 };
			if (ctl_db_turn_get(c->db, tenant, s.id, i, &t, err) == 0 &&
			    t.checkpoint[0])
				n = i;
			ctl_turn_clear(&t);
		}
		if (n == 0)
			return al_error_set(err, -ENOENT, "session %s has no succeeded turn yet",
					    s.id);
	}
	struct ctl_turn t = { 0 };
	if ((r = ctl_db_turn_get(c->db, tenant, s.id, n, &t, err)) < 0)
		return r;
	char after[CTL_CKPT_HEX + 1];
	snprintf(after, sizeof(after), "%s", t.checkpoint);
	ctl_turn_clear(&t);
	if (!after[0])
		return al_error_set(err, -ENOENT, "turn %u of session %s committed no checkpoint",
				    n, s.id);
	struct ctl_checkpoint ck;
	if ((r = ctl_db_checkpoint_get(c->db, tenant, after, &ck, err)) < 0)
		return r;
	_cleanup_repo_ struct st_repo *rp = NULL;
	if ((r = repo_open(c, tenant, &rp, err)) < 0)
		return r;
	if (all)
		return st_diff(rp, ck.parent, after, with_text, out, err);
	struct buf whole;
	buf_init(&whole, out->max);
	r = st_diff(rp, ck.parent, after, with_text, &whole, err);
	if (r >= 0 && (r = diff_workspace_only(&whole, out)) < 0)
		al_error_set_errno(err, r, "the diff is too large");
	buf_free(&whole);
	return r;
}

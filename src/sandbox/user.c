/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `--user NAME|UID[:GID]`: who a sandbox's commands run as inside.
 *
 * A name is looked up in the passwd and group files of the sandbox's own
 * root filesystem, as the sandbox sees it (the view of /etc for --image
 * host, the image's for --image DIR, the live sandbox's for `exec`), never
 * through the host's name service. Those files may have been written by
 * whoever made the image, or by the sandbox itself: the parser is strict
 * and bounded, and every path in them resolves inside that root.
 *
 * The user is recorded in <state>/<id>/user, beside the state file (whose
 * format an earlier airlock must still read), as "UID:GID\n".
 */
#include "sandbox/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"

/* ---- the text of --user ---- */

/* 1 to 5 decimal digits of at most SBX_USER_ID_MAX; -1 when s is not one. */
static int64_t id_value(const char *s, size_t n)
{
	if (n == 0 || n > 5)
		return -1;
	int64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v <= SBX_USER_ID_MAX ? v : -1;
}

static bool all_digits(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return n > 0;
}

/* A user or group name: a letter or '_', then up to 31 of letters,
 * digits, '_', '.', '-' (and a last '$', as machine accounts have). */
static bool name_valid(const char *s, size_t n)
{
	if (n == 0 || n > SBX_USER_NAME_MAX)
		return false;
	char c0 = s[0];
	if (!((c0 >= 'a' && c0 <= 'z') || (c0 >= 'A' && c0 <= 'Z') || c0 == '_'))
		return false;
	for (size_t i = 1; i < n; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' ||
			  (c == '$' && i == n - 1);
		if (!ok)
			return false;
	}
	return true;
}

/* One side of --user: an id in range, or a name. */
static bool part_valid(const char *s, size_t n)
{
	return all_digits(s, n) ? id_value(s, n) >= 0 : name_valid(s, n);
}

bool sbx_user_syntax_valid(const char *text)
{
	if (!text)
		return false;
	const char *colon = strchr(text, ':');
	size_t n = strlen(text);
	if (!colon)
		return part_valid(text, n);
	size_t left = (size_t)(colon - text);
	return part_valid(text, left) && part_valid(colon + 1, n - left - 1);
}

/* ---- the passwd and group files ---- */

/*
 * The line of text (len bytes) whose first field is name, split into its
 * fields: 0, -ENOENT when there is none, -EBADMSG when the first such line
 * does not have exactly n_fields fields or is longer than
 * SBX_PASSWD_LINE_MAX (the first line that names it is the one, as the C
 * library's lookup takes it; a broken line of another name is no
 * concern of this one's).
 */
static int find_line(const char *text, size_t len, const char *name, size_t n_fields,
		     const char **fields, size_t *lens)
{
	size_t name_len = strlen(name);
	const char *end = text + len;
	for (const char *p = text; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *line_end = nl ? nl : end;
		size_t line_len = (size_t)(line_end - p);
		const char *next = nl ? nl + 1 : end;
		if (line_len <= name_len || memcmp(p, name, name_len) != 0 || p[name_len] != ':') {
			p = next;
			continue;
		}
		if (line_len > SBX_PASSWD_LINE_MAX || memchr(p, '\0', line_len))
			return -EBADMSG;
		size_t f = 0;
		const char *q = p;
		for (;;) {
			const char *colon = memchr(q, ':', (size_t)(line_end - q));
			const char *field_end = colon ? colon : line_end;
			if (f == n_fields)
				return -EBADMSG; /* too many */
			fields[f] = q;
			lens[f] = (size_t)(field_end - q);
			f++;
			if (!colon)
				break;
			q = colon + 1;
		}
		return f == n_fields ? 0 : -EBADMSG;
	}
	return -ENOENT;
}

/* A numeric field of a passwd or group line: -EBADMSG when it is no
 * number, -ERANGE when it is one outside a sandbox's ids. */
static int id_field(const char *s, size_t n, uint32_t *ret)
{
	if (!all_digits(s, n) || n > 10)
		return -EBADMSG;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v = v * 10 + (uint64_t)(s[i] - '0');
	if (v > SBX_USER_ID_MAX)
		return v > UINT32_MAX ? -EBADMSG : -ERANGE;
	*ret = (uint32_t)v;
	return 0;
}

int sbx_passwd_lookup(const char *text, size_t len, const char *name, struct sbx_user *ret)
{
	/* name:password:uid:gid:gecos:home:shell */
	const char *f[7];
	size_t n[7];
	int r = find_line(text, len, name, 7, f, n);
	if (r < 0)
		return r;
	uint32_t uid, gid;
	r = id_field(f[2], n[2], &uid);
	int r2 = id_field(f[3], n[3], &gid);
	if (r == -EBADMSG || r2 == -EBADMSG)
		return -EBADMSG;
	if (r < 0 || r2 < 0)
		return -ERANGE;
	*ret = (struct sbx_user){ .uid = uid, .gid = gid };
	return 0;
}

int sbx_group_lookup(const char *text, size_t len, const char *name, uint32_t *ret_gid)
{
	/* name:password:gid:members */
	const char *f[4];
	size_t n[4];
	int r = find_line(text, len, name, 4, f, n);
	if (r < 0)
		return r;
	uint32_t gid;
	r = id_field(f[2], n[2], &gid);
	if (r < 0)
		return r;
	*ret_gid = gid;
	return 0;
}

/* Filesystems whose files do something when read (or say what the
 * sandbox may not know): never read for a sandbox, whatever a link in it
 * points at. */
static bool pseudo_fs(int fd)
{
	static const unsigned long magic[] = {
		PROC_SUPER_MAGIC, SYSFS_MAGIC,	      DEBUGFS_MAGIC,	   TRACEFS_MAGIC,
		SECURITYFS_MAGIC, CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, BPF_FS_MAGIC,
		EFIVARFS_MAGIC,	  PSTOREFS_MAGIC,     SELINUX_MAGIC,	   SMACK_MAGIC,
	};
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0)
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(magic); i++)
		if ((unsigned long)sf.f_type == magic[i])
			return true;
	return false;
}

/* etc/NAME below root_fd, every link resolved inside that root, into a
 * buffer of at most SBX_PASSWD_MAX bytes (the caller frees it). Host root
 * reads it for a hostile sandbox or image: what it names is looked at
 * (O_PATH) before anything is opened, so a device or a FIFO is never
 * opened and a file of /proc or /sys never read; then that same inode is
 * opened for reading. */
static int read_etc_file(int root_fd, const char *name, char **ret, size_t *ret_len)
{
	char rel[32];
	snprintf(rel, sizeof(rel), "etc/%s", name);
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	_cleanup_close_ int path_fd = (int)syscall(SYS_openat2, root_fd, rel, &how, sizeof(how));
	if (path_fd < 0)
		return -errno;
	struct stat st;
	if (fstat(path_fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || pseudo_fs(path_fd))
		return -EINVAL;
	if (st.st_size > SBX_PASSWD_MAX)
		return -EFBIG;
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", path_fd);
	_cleanup_close_ int fd = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat again;
	if (fstat(fd, &again) < 0)
		return -errno;
	if (again.st_dev != st.st_dev || again.st_ino != st.st_ino)
		return -EINVAL;
	_cleanup_free_ char *buf = malloc(SBX_PASSWD_MAX + 1);
	if (!buf)
		return -ENOMEM;
	size_t have = 0;
	for (;;) {
		ssize_t k = read(fd, buf + have, SBX_PASSWD_MAX + 1 - have);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		have += (size_t)k;
		if (have > SBX_PASSWD_MAX)
			return -EFBIG;
	}
	buf[have] = '\0';
	*ret = TAKE_PTR(buf);
	*ret_len = have;
	return 0;
}

static int file_error(int r, const char *file, struct al_error *err)
{
	if (r == -EFBIG)
		return al_error_set(err, r, "the sandbox's /etc/%s is larger than %d KiB", file,
				    SBX_PASSWD_MAX / 1024);
	if (r == -EINVAL)
		return al_error_set(err, r, "the sandbox's /etc/%s is not a regular file", file);
	return al_error_set_errno(err, r, "cannot read the sandbox's /etc/%s", file);
}

int sbx_user_resolve(int root_fd, const char *text, struct sbx_user *ret, struct al_error *err)
{
	if (!sbx_user_syntax_valid(text))
		return al_error_set(err, -EINVAL,
				    "--user wants NAME, UID or UID:GID (UID and GID from 0 to "
				    "65535), not '%s'",
				    text);
	char left[SBX_USER_NAME_MAX + 1], right[SBX_USER_NAME_MAX + 1] = "";
	const char *colon = strchr(text, ':');
	size_t ln = colon ? (size_t)(colon - text) : strlen(text);
	memcpy(left, text, ln);
	left[ln] = '\0';
	if (colon)
		snprintf(right, sizeof(right), "%s", colon + 1);
	struct sbx_user u;
	if (all_digits(left, ln)) {
		/* UID alone: its group is the same number. */
		u.uid = u.gid = (uint32_t)id_value(left, ln);
	} else {
		_cleanup_free_ char *pw = NULL;
		size_t pw_len = 0;
		int r = read_etc_file(root_fd, "passwd", &pw, &pw_len);
		if (r == -ENOENT)
			return al_error_set(err, -ENOENT,
					    "no user '%s': the sandbox has no /etc/passwd", left);
		if (r < 0)
			return file_error(r, "passwd", err);
		r = sbx_passwd_lookup(pw, pw_len, left, &u);
		if (r == -ENOENT)
			return al_error_set(err, r, "no user '%s' in the sandbox's /etc/passwd",
					    left);
		if (r == -ERANGE)
			return al_error_set(
				err, r,
				"user '%s' of the sandbox's /etc/passwd has an id above "
				"65535, which no sandbox has",
				left);
		if (r < 0)
			return al_error_set(
				err, r,
				"the sandbox's /etc/passwd has a malformed line for user "
				"'%s'",
				left);
	}
	if (colon && all_digits(right, strlen(right))) {
		u.gid = (uint32_t)id_value(right, strlen(right));
	} else if (colon) {
		_cleanup_free_ char *gr = NULL;
		size_t gr_len = 0;
		int r = read_etc_file(root_fd, "group", &gr, &gr_len);
		if (r == -ENOENT)
			return al_error_set(err, -ENOENT,
					    "no group '%s': the sandbox has no /etc/group", right);
		if (r < 0)
			return file_error(r, "group", err);
		r = sbx_group_lookup(gr, gr_len, right, &u.gid);
		if (r == -ENOENT)
			return al_error_set(err, r, "no group '%s' in the sandbox's /etc/group",
					    right);
		if (r == -ERANGE)
			return al_error_set(
				err, r,
				"group '%s' of the sandbox's /etc/group has an id above "
				"65535, which no sandbox has",
				right);
		if (r < 0)
			return al_error_set(
				err, r,
				"the sandbox's /etc/group has a malformed line for group "
				"'%s'",
				right);
	}
	*ret = u;
	return 0;
}

/* ---- <state>/<id>/user ---- */

int sbx_user_format(const struct sbx_user *u, char *buf, size_t size)
{
	if (u->uid > SBX_USER_ID_MAX || u->gid > SBX_USER_ID_MAX)
		return -EINVAL;
	int n = snprintf(buf, size, "%u:%u\n", (unsigned)u->uid, (unsigned)u->gid);
	return n < 0 || (size_t)n >= size ? -ENOBUFS : n;
}

int sbx_user_parse(const char *text, size_t len, struct sbx_user *ret)
{
	if (len < 4 || text[len - 1] != '\n')
		return -EBADMSG;
	const char *colon = memchr(text, ':', len);
	if (!colon)
		return -EBADMSG;
	size_t un = (size_t)(colon - text), gn = len - un - 2;
	/* The numbers as sbx_user_format writes them: no leading zero. */
	if ((un > 1 && text[0] == '0') || (gn > 1 && colon[1] == '0'))
		return -EBADMSG;
	int64_t uid = id_value(text, un), gid = id_value(colon + 1, gn);
	if (uid < 0 || gid < 0)
		return -EBADMSG;
	*ret = (struct sbx_user){ .uid = (uint32_t)uid, .gid = (uint32_t)gid };
	return 0;
}

int sbx_user_write(const struct sbx_paths *p, const struct sbx_user *u)
{
	char buf[SBX_USER_FILE_MAX], path[SBX_PATH_MAX];
	int n = sbx_user_format(u, buf, sizeof(buf));
	if (n < 0)
		return n;
	if (snprintf(path, sizeof(path), "%s/user", p->dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	_cleanup_close_ int fd =
		open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	return write_full(fd, buf, (size_t)n);
}

int sbx_user_read(const struct sbx_paths *p, struct sbx_user *ret)
{
	char path[SBX_PATH_MAX], buf[SBX_USER_FILE_MAX];
	if (snprintf(path, sizeof(path), "%s/user", p->dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t k;
	while ((k = read(fd, buf, sizeof(buf))) < 0 && errno == EINTR)
		;
	if (k < 0)
		return -errno;
	if ((size_t)k >= sizeof(buf))
		return -EBADMSG;
	return sbx_user_parse(buf, (size_t)k, ret);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox's view of the host's /etc: a filtered copy, shared by every
 * sandbox made from it, rebuilt when /etc changes.
 *
 * Why a copy: through the idmapped lower layer, files the host's root owns
 * belong to the sandbox's root, mode 0600 or not. So /etc must be filtered
 * (what an unprivileged host user cannot read, the sandbox does not get), and
 * a filter applied to the live directory would let secrets written into
 * /etc after a sandbox started show up in it. A copy holds only what was
 * world-readable when it was made: however stale, it never leaks.
 *
 * Freshness: each sandbox re-checks the modification time of every
 * directory of /etc (about a hundred stats: files added, removed or renamed
 * show there); every ETC_VERIFY_MS the whole tree is compared with the
 * copy's manifest (in-place edits, mode changes). A mismatch rebuilds.
 *
 * Layout: <state>/.etc/<gen>/etc (the copy), <gen>/manifest, <gen>/dirs,
 * <state>/.etc/current -> <gen>, <state>/.etc/lock (flock: shared while a
 * sandbox sets up from a generation, exclusive to build or remove one).
 */
#include "sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/parse.h"

#define ETC_VERIFY_MS 10000
#define ETC_MAX_ENTRIES 50000
#define ETC_MAX_DEPTH 16
#define ETC_MANIFEST_MAX (16 * 1024 * 1024)
#define ETC_FILE_MAX (64 * 1024 * 1024)

/* Never copied, whatever their mode. */
static const char *const etc_never[] = {
	"airlock",	    "shadow",	   "shadow-",	 "gshadow",  "gshadow-", "ssl/private",
	"security/opasswd", "krb5.keytab", "machine-id", "hostname", "hosts",	 "resolv.conf",
};

static bool never_copied(const char *rel)
{
	for (size_t i = 0; i < ARRAY_SIZE(etc_never); i++)
		if (strcmp(rel, etc_never[i]) == 0)
			return true;
	/* ssh host keys, private and public alike */
	return strncmp(rel, "ssh/ssh_host_", 13) == 0;
}

/* The previous generation's manifest, by path: what its copies were made
 * from. A file or link whose line is unchanged is linked from there. */
struct prev_entry {
	const char *path; /* into text */
	const char *line; /* the whole line, without its newline */
	size_t line_len;
};

struct prev {
	char *text;
	struct prev_entry *e;
	size_t n;
};

struct walk {
	struct buf manifest; /* one line per entry: what the copy was made from */
	struct buf dirs;     /* "<mtime> <ino> <path>\n" per directory */
	int dst;	     /* copy: the destination directory, or -1 to only list */
	unsigned entries;
	const struct prev *prev; /* NULL: nothing to link from */
	unsigned linked;
};

static int64_t ts_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static bool same_version(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_mode == b->st_mode && a->st_size == b->st_size &&
	       a->st_uid == b->st_uid && a->st_gid == b->st_gid &&
	       ts_ns(&a->st_mtim) == ts_ns(&b->st_mtim) && ts_ns(&a->st_ctim) == ts_ns(&b->st_ctim);
}

/*
 * Copies one world-readable file. The file must be the same, unchanged and
 * still world-readable after the copy as when it was judged: a file made
 * private and rewritten meanwhile (its ctime moves) is never copied.
 * Returns 1 when the file was left out (too large), -EAGAIN when it changed.
 */
static int copy_file(int sfd, const char *name, int dst, const struct stat *st)
{
	if (st->st_size > ETC_FILE_MAX)
		return 1;
	/* O_NONBLOCK: should a FIFO be swapped in, the open must not hang. */
	_cleanup_close_ int in =
		openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (in < 0)
		return errno == ENOENT ? -EAGAIN : -errno;
	struct stat now;
	if (fstat(in, &now) < 0)
		return -errno;
	if (!S_ISREG(now.st_mode) || !same_version(&now, st))
		return -EAGAIN;
	_cleanup_close_ int out =
		openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return -errno;
	off_t left = now.st_size;
	while (left > 0) {
		ssize_t n = sendfile(out, in, NULL, (size_t)left);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EAGAIN; /* shrank meanwhile */
		left -= n;
	}
	struct stat after;
	if (fstat(in, &after) < 0)
		return -errno;
	if (!same_version(&after, st) || !(after.st_mode & S_IROTH))
		return -EAGAIN;
	if (fchown(out, st->st_uid, st->st_gid) < 0 || fchmod(out, st->st_mode & 0777) < 0)
		return -errno;
	struct timespec times[2] = { st->st_atim, st->st_mtim };
	futimens(out, times);
	return 0;
}

static int compare_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int compare_prev(const void *a, const void *b)
{
	return strcmp(((const struct prev_entry *)a)->path, ((const struct prev_entry *)b)->path);
}

/* The previous generation's line for path, if any. */
static const struct prev_entry *prev_find(const struct prev *p, const char *path)
{
	if (!p || !p->n)
		return NULL;
	struct prev_entry key = { .path = path };
	return bsearch(&key, p->e, p->n, sizeof(*p->e), compare_prev);
}

/*
 * An unchanged file or symbolic link (the same inode, mode, owner, size,
 * mtime and ctime as when the previous generation copied it: any write or
 * chmod moves the ctime) is hard-linked from the previous generation: its
 * copy holds exactly that version, and nothing ever writes a generation.
 * Returns 1 when linked, 0 when it must be copied.
 */
static int link_unchanged(struct walk *w, int odfd, int dfd, const char *name, const char *sub,
			  size_t line_start)
{
	if (odfd < 0)
		return 0;
	const struct prev_entry *e = prev_find(w->prev, sub);
	size_t len = w->manifest.len - line_start - 1; /* without the newline */
	if (!e || e->line_len != len || memcmp(e->line, w->manifest.data + line_start, len) != 0)
		return 0;
	if (linkat(odfd, name, dfd, name, 0) < 0)
		return 0; /* gone or odd: copy it */
	w->linked++;
	return 1;
}

/* Walks the host directory sfd (rel inside /etc), listing and copying (into
 * dfd, from odfd: the same directory in the previous generation, or -1). */
static int walk_dir(struct walk *w, int sfd, int dfd, int odfd, const char *rel, int depth)
{
	int dup_fd = fcntl(sfd, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0)
		return -errno;
	DIR *d = fdopendir(dup_fd);
	if (!d) {
		close(dup_fd);
		return -errno;
	}
	/* Sorted names make the manifest comparable from run to run. */
	char **names = NULL;
	size_t n = 0, cap = 0;
	int ret = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (++w->entries > ETC_MAX_ENTRIES) {
			ret = -E2BIG;
			break;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **nn = realloc(names, cap * sizeof(*names));
			if (!nn) {
				ret = -ENOMEM;
				break;
			}
			names = nn;
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			ret = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (ret == 0 && n > 1)
		qsort(names, n, sizeof(*names), compare_names);
	for (size_t i = 0; ret == 0 && i < n; i++) {
		const char *name = names[i];
		char sub[SBX_PATH_MAX];
		int len = snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", name);
		if (len < 0 || (size_t)len >= sizeof(sub)) {
			ret = -ENAMETOOLONG;
			break;
		}
		if (never_copied(sub))
			continue;
		struct stat st;
		if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			ret = -errno;
			break;
		}
		/* Everything the copy depends on: a change anywhere differs here. */
		size_t line_start = w->manifest.len;
		ret = buf_appendf(&w->manifest, "%o %u %u %jd %ju %jd %jd %s\n", st.st_mode,
				  st.st_uid, st.st_gid, (intmax_t)st.st_size, (uintmax_t)st.st_ino,
				  (intmax_t)ts_ns(&st.st_mtim), (intmax_t)ts_ns(&st.st_ctim), sub);
		if (ret < 0)
			break;
		if (S_ISLNK(st.st_mode)) {
			if (w->dst < 0 || link_unchanged(w, odfd, dfd, name, sub, line_start))
				continue;
			char target[SBX_PATH_MAX];
			ssize_t tl = readlinkat(sfd, name, target, sizeof(target) - 1);
			if (tl < 0) {
				ret = errno == ENOENT ? -EAGAIN : -errno;
				break;
			}
			target[tl] = '\0';
			if (symlinkat(target, dfd, name) < 0 ||
			    fchownat(dfd, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
				ret = -errno;
		} else if (S_ISDIR(st.st_mode)) {
			/* An unreadable directory, or one too deep, is left out whole. */
			if ((st.st_mode & (S_IROTH | S_IXOTH)) != (S_IROTH | S_IXOTH) ||
			    depth >= ETC_MAX_DEPTH)
				continue;
			_cleanup_close_ int s2 =
				openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (s2 < 0) {
				ret = errno == ENOENT ? -EAGAIN : -errno;
				break;
			}
			_cleanup_close_ int d2 = -1, o2 = -1;
			if (w->dst >= 0) {
				if (odfd >= 0)
					o2 = openat(odfd, name,
						    O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
							    O_CLOEXEC);
				if (mkdirat(dfd, name, 0700) < 0) {
					ret = -errno;
					break;
				}
				d2 = openat(dfd, name,
					    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (d2 < 0) {
					ret = -errno;
					break;
				}
			}
			ret = buf_appendf(&w->dirs, "%jd %ju %s\n", (intmax_t)ts_ns(&st.st_mtim),
					  (uintmax_t)st.st_ino, sub);
			if (ret >= 0)
				ret = walk_dir(w, s2, d2, o2, sub, depth + 1);
			/* Still the same, still open to all, after its contents were
			 * read: or a private directory's files may have been copied. */
			struct stat after;
			if (ret >= 0 && (fstat(s2, &after) < 0 || !same_version(&after, &st)))
				ret = -EAGAIN;
			if (ret >= 0 && d2 >= 0) {
				struct timespec times[2] = { st.st_atim, st.st_mtim };
				if (fchown(d2, st.st_uid, st.st_gid) < 0 ||
				    fchmod(d2, st.st_mode & 07777) < 0 || futimens(d2, times) < 0)
					ret = -errno;
			}
		} else if (S_ISREG(st.st_mode)) {
			if (!(st.st_mode & S_IROTH) || w->dst < 0 ||
			    link_unchanged(w, odfd, dfd, name, sub, line_start))
				continue;
			ret = copy_file(sfd, name, dfd, &st);
			if (ret > 0)
				ret = 0; /* too large: left out */
		}
		/* sockets, fifos, devices: not copied */
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return ret;
}

/* Lists (and, with dst >= 0, copies) the host's /etc; odfd: the previous
 * generation's copy, or -1. */
static int walk_etc(struct walk *w, int odfd)
{
	_cleanup_close_ int sfd = open("/etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0)
		return -errno;
	struct stat st;
	if (fstat(sfd, &st) < 0)
		return -errno;
	int r = buf_appendf(&w->dirs, "%jd %ju .\n", (intmax_t)ts_ns(&st.st_mtim),
			    (uintmax_t)st.st_ino);
	if (r < 0)
		return r;
	return walk_dir(w, sfd, w->dst, odfd, "", 0);
}

static void walk_free(struct walk *w)
{
	buf_free(&w->manifest);
	buf_free(&w->dirs);
}

static int read_small(int dfd, const char *name, char **ret, size_t *len)
{
	return read_file_bounded(dfd, name, ETC_MANIFEST_MAX, ret, len);
}

static int write_small(int dfd, const char *name, const char *data, size_t len)
{
	_cleanup_close_ int fd =
		openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	return write_full(fd, data, len);
}

/* Every directory listed in dirs still has the same inode and mtime. */
static bool dirs_unchanged(const char *dirs)
{
	_cleanup_close_ int etc = open("/etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (etc < 0)
		return false;
	for (const char *line = dirs; *line;) {
		const char *nl = strchr(line, '\n');
		if (!nl)
			return false;
		const char *end;
		int64_t mt;
		uint64_t ino;
		if (parse_i64_prefix(line, &mt, &end) < 0 || *end != ' ' ||
		    parse_u64_prefix(end + 1, &ino, &end) < 0 || *end != ' ')
			return false;
		char path[SBX_PATH_MAX];
		size_t plen = (size_t)(nl - (end + 1));
		if (plen == 0 || plen >= sizeof(path))
			return false;
		memcpy(path, end + 1, plen);
		path[plen] = '\0';
		struct stat st;
		if (fstatat(etc, path, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
		    st.st_ino != ino || ts_ns(&st.st_mtim) != mt)
			return false;
		line = nl + 1;
	}
	return true;
}

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The boot a generation was made in: after a crash, files not yet on disk
 * could read back empty, so a generation from an earlier boot is stale. */
static int boot_id(char out[64])
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	int r = read_file_bounded(AT_FDCWD, "/proc/sys/kernel/random/boot_id", 64, &text, &len);
	if (r < 0)
		return r;
	snprintf(out, 64, "%s", text);
	return 0;
}

/*
 * Is generation gen (a directory under base) still true to /etc? Checks
 * the directories always and the whole manifest every ETC_VERIFY_MS.
 */
static bool generation_fresh(int basefd, const char *gen)
{
	_cleanup_close_ int g =
		openat(basefd, gen, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (g < 0)
		return false;
	_cleanup_free_ char *dirs = NULL, *boot = NULL;
	size_t len;
	char now_boot[64];
	if (read_small(g, "boot_id", &boot, &len) < 0 || boot_id(now_boot) < 0 ||
	    strcmp(boot, now_boot) != 0)
		return false;
	if (read_small(g, "dirs", &dirs, &len) < 0 || !dirs_unchanged(dirs))
		return false;
	struct stat vst;
	if (fstatat(g, "verified", &vst, 0) < 0)
		return false;
	int64_t verified = (int64_t)vst.st_mtim.tv_sec * 1000 + vst.st_mtim.tv_nsec / 1000000;
	int64_t age = now_ms() - verified;
	if (age >= 0 && age < ETC_VERIFY_MS)
		return true;
	/* Time for the full comparison. */
	_cleanup_free_ char *manifest = NULL;
	if (read_small(g, "manifest", &manifest, &len) < 0)
		return false;
	struct walk w = { .dst = -1 };
	buf_init(&w.manifest, ETC_MANIFEST_MAX);
	buf_init(&w.dirs, ETC_MANIFEST_MAX);
	bool same = walk_etc(&w, -1) >= 0 && w.manifest.len == len &&
		    memcmp(w.manifest.data ? w.manifest.data : "", manifest, len) == 0;
	walk_free(&w);
	if (same)
		utimensat(g, "verified", NULL, 0);
	return same;
}

static void prev_free(struct prev *p)
{
	free(p->text);
	free(p->e);
	*p = (struct prev){ 0 };
}

/*
 * The current generation, to link unchanged entries from: its manifest by
 * path, and its copy's directory. Only one made in this boot (after a
 * crash, its files could read back empty); none is fine (-1).
 */
static int prev_load(int basefd, const char *boot, struct prev *ret)
{
	char cur[SBX_ID_LEN + 2];
	ssize_t cl = readlinkat(basefd, "current", cur, sizeof(cur) - 1);
	if (cl != SBX_ID_LEN)
		return -1;
	cur[cl] = '\0';
	if (!sbx_id_valid(cur))
		return -1;
	_cleanup_close_ int g =
		openat(basefd, cur, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (g < 0)
		return -1;
	_cleanup_free_ char *pboot = NULL;
	size_t len;
	if (read_small(g, "boot_id", &pboot, &len) < 0 || strcmp(pboot, boot) != 0)
		return -1;
	struct prev p = { 0 };
	if (read_small(g, "manifest", &p.text, &len) < 0)
		return -1;
	size_t lines = 0;
	for (size_t i = 0; i < len; i++)
		lines += p.text[i] == '\n';
	p.e = calloc(lines ? lines : 1, sizeof(*p.e));
	if (!p.e) {
		prev_free(&p);
		return -1;
	}
	for (char *line = p.text; *line;) {
		char *nl = strchr(line, '\n');
		if (!nl)
			break;
		*nl = '\0';
		/* "mode uid gid size ino mtime ctime path": the path follows the
		 * seventh space (and may hold spaces itself). */
		char *path = line;
		for (int f = 0; f < 7 && path; f++) {
			path = strchr(path, ' ');
			if (path)
				path++;
		}
		if (path && p.n < lines)
			p.e[p.n++] = (struct prev_entry){ path, line, (size_t)(nl - line) };
		line = nl + 1;
	}
	if (p.n > 1)
		qsort(p.e, p.n, sizeof(*p.e), compare_prev);
	int fd = openat(g, "etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		prev_free(&p);
		return -1;
	}
	*ret = p;
	return fd;
}

static int build_once(int basefd, char *ret_gen, size_t size)
{
	char id[SBX_ID_LEN + 1], tmp[64], boot[64];
	int r = boot_id(boot);
	if (r < 0)
		return r;
	r = sbx_new_id(id);
	if (r < 0)
		return r;
	snprintf(tmp, sizeof(tmp), "tmp-%s", id);
	if (mkdirat(basefd, tmp, 0700) < 0)
		return -errno;
	_cleanup_close_ int g =
		openat(basefd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (g < 0)
		return -errno;
	if (mkdirat(g, "etc", 0755) < 0)
		return -errno;
	_cleanup_close_ int dst = openat(g, "etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dst < 0)
		return -errno;
	struct prev prev = { 0 };
	_cleanup_close_ int prev_fd = prev_load(basefd, boot, &prev);
	struct walk w = { .dst = dst, .prev = prev_fd >= 0 ? &prev : NULL };
	buf_init(&w.manifest, ETC_MANIFEST_MAX);
	buf_init(&w.dirs, ETC_MANIFEST_MAX);
	r = walk_etc(&w, prev_fd);
	prev_free(&prev);
	if (r >= 0) {
		struct stat st;
		if (fstatat(AT_FDCWD, "/etc", &st, 0) == 0 &&
		    (fchown(dst, st.st_uid, st.st_gid) < 0 || fchmod(dst, st.st_mode & 07777) < 0))
			r = -errno;
	}
	if (r >= 0)
		r = write_small(g, "manifest", w.manifest.data ? w.manifest.data : "",
				w.manifest.len);
	if (r >= 0)
		r = write_small(g, "dirs", w.dirs.data ? w.dirs.data : "", w.dirs.len);
	if (r >= 0)
		r = write_small(g, "boot_id", boot, strlen(boot));
	if (r >= 0)
		r = write_small(g, "verified", "", 0);
	walk_free(&w);
	if (r >= 0 && renameat(basefd, tmp, basefd, id) < 0)
		r = -errno;
	if (r < 0) {
		char path[SBX_PATH_MAX];
		snprintf(path, sizeof(path), "/proc/self/fd/%d/%s", basefd, tmp);
		sbx_rm_rf(path);
		return r;
	}
	/* current -> id, replaced atomically. */
	char link[80];
	snprintf(link, sizeof(link), "current-%s", id);
	if (symlinkat(id, basefd, link) < 0 || renameat(basefd, link, basefd, "current") < 0) {
		r = -errno;
		unlinkat(basefd, link, 0);
		return r;
	}
	snprintf(ret_gen, size, "%s", id);
	return 0;
}

/* /etc changing while it is copied makes a copy unusable: try again. */
static int build_generation(int basefd, char *ret_gen, size_t size)
{
	int r = -EAGAIN;
	for (int attempt = 0; attempt < 5 && r == -EAGAIN; attempt++)
		r = build_once(basefd, ret_gen, size);
	return r;
}

/* Removes generations neither current nor in use, and build debris. The
 * caller holds the lock exclusively. */
static int gc_locked(int basefd, const char *base, bool (*in_use)(const char *gen, void *ud),
		     void *ud, unsigned *removed)
{
	char cur[SBX_ID_LEN + 2] = "";
	ssize_t cl = readlinkat(basefd, "current", cur, sizeof(cur) - 1);
	cur[cl > 0 ? cl : 0] = '\0';
	int dup_fd = fcntl(basefd, F_DUPFD_CLOEXEC, 3);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d) {
		safe_close(dup_fd);
		return -errno;
	}
	int ret = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *name = de->d_name;
		if (strncmp(name, "current-", 8) == 0 && sbx_id_valid(name + 8)) {
			if (unlinkat(basefd, name, 0) == 0)
				(*removed)++;
			continue;
		}
		bool tmp = strncmp(name, "tmp-", 4) == 0 && sbx_id_valid(name + 4);
		bool gen = sbx_id_valid(name);
		if (!tmp && !(gen && strcmp(name, cur) != 0 && !in_use(name, ud)))
			continue;
		char path[SBX_PATH_MAX + 32];
		int len = snprintf(path, sizeof(path), "%s/%.40s", base, name);
		if (len < 0 || (size_t)len >= sizeof(path))
			continue;
		int r = sbx_rm_rf(path);
		if (r == 0)
			(*removed)++;
		else if (ret == 0)
			ret = r;
	}
	closedir(d);
	return ret;
}

int sbx_etc_view(const struct sbx_settings *set, bool (*in_use)(const char *gen, void *ud),
		 void *ud, struct sbx_etc_view *ret, struct al_error *err)
{
	char base[SBX_PATH_MAX];
	int n = snprintf(base, sizeof(base), "%s/.etc", set->state_dir);
	if (n < 0 || (size_t)n >= sizeof(base))
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	if (mkdir(base, 0700) < 0 && errno != EEXIST)
		return al_error_set_errno(err, -errno, "cannot create %s", base);
	int pr = sbx_check_private_dir(base);
	if (pr < 0)
		return al_error_set(err, pr,
				    "%s must be a directory owned by root and writable "
				    "by root alone",
				    base);
	_cleanup_close_ int basefd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (basefd < 0)
		return al_error_set_errno(err, -errno, "cannot open %s", base);
	int lock = openat(basefd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lock < 0)
		return al_error_set_errno(err, -errno, "cannot open the /etc view's lock");

	char gen[SBX_ID_LEN + 1] = "";
	int rounds = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		/* Shared: the generation found cannot be removed under us. */
		if (flock(lock, attempt == 0 ? LOCK_SH : LOCK_EX) < 0) {
			int r = -errno;
			close(lock);
			return al_error_set_errno(err, r, "cannot lock the /etc view");
		}
		char cur[SBX_ID_LEN + 2];
		ssize_t cl = readlinkat(basefd, "current", cur, sizeof(cur) - 1);
		if (cl == SBX_ID_LEN) {
			cur[cl] = '\0';
			if (sbx_id_valid(cur) && generation_fresh(basefd, cur)) {
				memcpy(gen, cur, sizeof(gen));
				break;
			}
		}
		if (attempt == 1) {
			int r = build_generation(basefd, gen, sizeof(gen));
			if (r < 0) {
				close(lock);
				return al_error_set_errno(err, r,
							  "cannot make the sandbox's view of /etc");
			}
			/* Older generations no sandbox uses go now, so that a busy
			 * /etc cannot pile them up. */
			unsigned removed = 0;
			(void)gc_locked(basefd, base, in_use, ud, &removed);
			/* Back to shared. The switch is not atomic: should another
			 * builder have replaced (and collected) ours meanwhile,
			 * start over. */
			if (flock(lock, LOCK_SH) < 0 || faccessat(basefd, gen, F_OK, 0) < 0) {
				gen[0] = '\0';
				flock(lock, LOCK_UN);
				attempt = -1;
				if (++rounds > 5) {
					close(lock);
					return al_error_set(err, -EBUSY,
							    "the view of /etc keeps changing");
				}
			}
		}
	}
	n = snprintf(ret->path, sizeof(ret->path), "%s/%s/etc", base, gen);
	if (n < 0 || (size_t)n >= sizeof(ret->path)) {
		close(lock);
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	}
	memcpy(ret->gen, gen, sizeof(ret->gen));
	ret->lock_fd = lock;
	return 0;
}

void sbx_etc_view_release(struct sbx_etc_view *v)
{
	v->lock_fd = safe_close(v->lock_fd);
}

int sbx_etc_gc(const struct sbx_settings *set, bool (*in_use)(const char *gen, void *ud), void *ud,
	       unsigned *removed)
{
	char base[SBX_PATH_MAX];
	int n = snprintf(base, sizeof(base), "%s/.etc", set->state_dir);
	if (n < 0 || (size_t)n >= sizeof(base))
		return -ENAMETOOLONG;
	_cleanup_close_ int basefd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (basefd < 0)
		return errno == ENOENT ? 0 : -errno;
	_cleanup_close_ int lock =
		openat(basefd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	/* Nobody is setting up from a generation while we hold this; if
	 * someone is, old generations wait for the next gc. */
	if (lock < 0)
		return -errno;
	if (flock(lock, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? 0 : -errno;
	return gc_locked(basefd, base, in_use, ud, removed);
}

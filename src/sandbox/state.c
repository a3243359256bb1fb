/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The on-host record of sandboxes: ids, directories, uid slots, the state
 * file, and removal of what a sandbox leaves on disk.
 *
 * Layout under the state directory (root-only, 0700):
 *   <id>/state        key=value lines, written atomically
 *   <id>/lock         flock()ed while the sandbox is being created or destroyed
 *   <id>/root         mount point of the sandbox's private tmpfs (only ever
 *                     mounted inside the sandbox's mount namespace), which holds
 *                     its "/", the overlay upper and work directories and a
 *                     fresh workspace when none was given
 *   <id>/env          --env of a persistent sandbox; <id>/control: its keeper
 *   slots/<n>         symlink to the id owning host uid range n
 */
#include "sandbox/proc.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/rmtree.h"
#include "common/parse.h"

#define ENV_FILE_MAX (256 * 1024)

bool sbx_id_valid(const char *id)
{
	if (!id || strlen(id) != SBX_ID_LEN)
		return false;
	for (const char *c = id; *c; c++)
		if (!isxdigit((unsigned char)*c) || isupper((unsigned char)*c))
			return false;
	return true;
}

bool sbx_home_path_valid(const char *path)
{
	if (!path)
		return false;
	if (strcmp(path, "/root") == 0)
		return true;
	if (strncmp(path, "/home/", 6) != 0)
		return false;
	/* A user name as useradd takes it (less its '$' and capitals): one
	 * segment, nothing a shell or a path could read twice. */
	const char *name = path + 6;
	size_t n = strlen(name);
	if (n == 0 || n > 32 || !((name[0] >= 'a' && name[0] <= 'z') || name[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return false;
	}
	return true;
}

const char *sbx_spec_home(const struct sbx_spec *spec)
{
	if (!spec->home && !(spec->layer && spec->home_path))
		return NULL;
	return spec->home_path ? spec->home_path : "/root";
}

int sbx_new_id(char ret[SBX_ID_LEN + 1])
{
	uint8_t raw[SBX_ID_LEN / 2];
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return -EIO;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(ret + 2 * i, 3, "%02x", raw[i]);
	return 0;
}

static int path_join(char *out, size_t size, const char *a, const char *b)
{
	int n = snprintf(out, size, "%s/%s", a, b);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}

int sbx_paths_init(const struct sbx_settings *set, const char *id, struct sbx_paths *p,
		   struct al_error *err)
{
	if (!sbx_id_valid(id))
		return al_error_set(err, -EINVAL, "invalid sandbox id '%s'", id);
	if (path_join(p->dir, sizeof(p->dir), set->state_dir, id) < 0 ||
	    path_join(p->root, sizeof(p->root), p->dir, "root") < 0)
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	return 0;
}

static int ensure_dir(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	struct stat st;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return 0;
}

int sbx_claim_slot(const struct sbx_settings *set, const char *id, uint32_t *ret_slot,
		   struct al_error *err)
{
	char slots[SBX_PATH_MAX];
	if (path_join(slots, sizeof(slots), set->state_dir, "slots") < 0)
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	int r = ensure_dir(slots, 0700);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot create %s", slots);
	_cleanup_close_ int dfd = open(slots, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return al_error_set_errno(err, -errno, "cannot open %s", slots);

	uint32_t start;
	if (getrandom(&start, sizeof(start), 0) != (ssize_t)sizeof(start))
		start = (uint32_t)getpid();
	for (uint32_t i = 0; i < set->uid_slots; i++) {
		uint32_t slot = (start + i) % set->uid_slots;
		char name[16];
		snprintf(name, sizeof(name), "%" PRIu32, slot);
		/* symlinkat is atomic: exactly one claimant wins a slot. */
		if (symlinkat(id, dfd, name) == 0) {
			*ret_slot = slot;
			return 0;
		}
		if (errno != EEXIST)
			return al_error_set_errno(err, -errno, "cannot claim uid slot");
	}
	return al_error_set(err, -EUSERS, "all %" PRIu32 " sandbox uid ranges are in use",
			    set->uid_slots);
}

void sbx_release_slot(const struct sbx_settings *set, uint32_t slot, const char *id)
{
	char path[SBX_PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s/slots/%" PRIu32, set->state_dir, slot);
	if (n < 0 || (size_t)n >= sizeof(path))
		return;
	char target[SBX_ID_LEN + 2];
	ssize_t len = readlink(path, target, sizeof(target) - 1);
	if (len < 0)
		return;
	target[len] = '\0';
	/* Only the owner releases: a reused slot belongs to someone else now. */
	if (strcmp(target, id) == 0)
		unlink(path);
}

int sbx_check_private_dir(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	/* Anyone else who can write here could swap what airlock trusts. */
	if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return -EPERM;
	return 0;
}

int sbx_lock_dir(const char *dir, bool wait)
{
	char path[SBX_PATH_MAX];
	if (path_join(path, sizeof(path), dir, "lock") < 0)
		return -ENAMETOOLONG;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* A value must stay on its line: no control characters at all. */
static bool value_ok(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 || *v == 0x7f)
			return false;
	return true;
}

int sbx_state_format(const struct sbx_state *st, char *buf, size_t size)
{
	if (!value_ok(st->image) || !value_ok(st->workspace) || !value_ok(st->home))
		return -EINVAL;
	for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++)
		if (st->cg.present[i] && !value_ok(st->cg.path[i]))
			return -EINVAL;
	size_t len = 0;
#define ADD(...)                                                       \
	do {                                                           \
		int _n = snprintf(buf + len, size - len, __VA_ARGS__); \
		if (_n < 0 || (size_t)_n >= size - len)                \
			return -ENOBUFS;                               \
		len += (size_t)_n;                                     \
	} while (0)
	ADD("id=%s\n", st->id);
	ADD("pid=%d\n", (int)st->init_pid);
	ADD("start=%" PRIu64 "\n", st->init_start);
	if (st->keeper_pid > 0) {
		ADD("keeper=%d\n", (int)st->keeper_pid);
		ADD("keeper_start=%" PRIu64 "\n", st->keeper_start);
	}
	ADD("slot=%" PRIu32 "\n", st->slot);
	ADD("uid=%" PRIu32 "\n", st->uid);
	ADD("created=%" PRId64 "\n", st->created);
	ADD("ephemeral=%d\n", st->ephemeral ? 1 : 0);
	ADD("memory=%" PRIu64 "\n", st->memory_bytes);
	ADD("cgroup_v2=%d\n", st->cg.v2 ? 1 : 0);
	for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++)
		if (st->cg.present[i])
			ADD("cgroup%d=%s\n", i, st->cg.path[i]);
	if (st->etc_gen[0])
		ADD("etc=%s\n", st->etc_gen);
	ADD("image=%s\n", st->image);
	ADD("workspace=%s\n", st->workspace);
	/* Only when there is one: the state of a sandbox without a home stays
	 * what earlier versions read. */
	if (st->home[0])
		ADD("home=%s\n", st->home);
#undef ADD
	return (int)len;
}

int sbx_state_write(const struct sbx_paths *p, const struct sbx_state *st)
{
	char buf[SBX_STATE_FILE_MAX];
	int n = sbx_state_format(st, buf, sizeof(buf));
	if (n < 0)
		return n;
	size_t len = (size_t)n;
	char tmp[SBX_PATH_MAX], final[SBX_PATH_MAX];
	if (path_join(tmp, sizeof(tmp), p->dir, "state.tmp") < 0 ||
	    path_join(final, sizeof(final), p->dir, "state") < 0)
		return -ENAMETOOLONG;
	_cleanup_close_ int fd =
		open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	int r = write_full(fd, buf, len);
	if (r < 0)
		return r;
	/* No fsync: after a power loss every sandbox is gone anyway, and gc
	 * handles a missing or partial state file. The rename keeps readers
	 * from ever seeing half a file. */
	if (rename(tmp, final) < 0)
		return -errno;
	return 0;
}

static int copy_value(char *dst, size_t size, const char *v)
{
	size_t n = strlen(v);
	if (n >= size)
		return -EBADMSG;
	memcpy(dst, v, n + 1);
	return 0;
}

int sbx_state_read(const struct sbx_settings *set, const char *id, struct sbx_state *ret,
		   struct al_error *err)
{
	struct sbx_paths p;
	int r = sbx_paths_init(set, id, &p, err);
	if (r < 0)
		return r;
	char path[SBX_PATH_MAX];
	if (path_join(path, sizeof(path), p.dir, "state") < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");

	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	r = read_file_bounded(AT_FDCWD, path, SBX_STATE_FILE_MAX, &text, &len);
	if (r == -ENOENT)
		return al_error_set(err, -ENOENT, "no sandbox with id %s", id);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot read state of sandbox %s", id);
	if (sbx_state_parse(set, id, text, len, ret) < 0)
		return al_error_set(
			err, -EBADMSG,
			"state file of sandbox %s is damaged (run `airlock sandbox gc`)", id);
	return 0;
}

int sbx_state_parse(const struct sbx_settings *set, const char *id, char *text, size_t len,
		    struct sbx_state *ret)
{
	/* A NUL inside the file would hide what follows it; no value of ours
	 * holds a control character (sbx_state_format refuses them). */
	for (size_t i = 0; i < len; i++)
		if (((unsigned char)text[i] < 0x20 && text[i] != '\n') || text[i] == 0x7f)
			return -EBADMSG;
	text[len] = '\0';
	if (!sbx_id_valid(id))
		return -EBADMSG;
	struct sbx_state st = { .init_pid = 0 };
	st.cg.dirfd = -1;
	bool have_pid = false, have_uid = false, have_id = false, have_slot = false;
	char seen[1024] = "\n"; /* "\nkey\n..." of the keys read so far */
	char *save = text;
	for (char *line = save; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		char *eq = strchr(line, '=');
		if (!eq)
			goto bad;
		*eq = '\0';
		const char *key = line, *val = eq + 1;
		uint64_t u;
		/* A key twice means the file was tampered with: never pick one. */
		char probe[64];
		if (strlen(key) > 32)
			goto bad;
		snprintf(probe, sizeof(probe), "\n%s\n", key);
		if (strstr(seen, probe))
			goto bad;
		if (strlen(seen) + strlen(key) + 2 >= sizeof(seen))
			goto bad;
		memcpy(seen + strlen(seen), probe + 1, strlen(probe)); /* "key\n" + NUL */
		if (strcmp(key, "id") == 0) {
			if (strcmp(val, id) != 0)
				goto bad;
			memcpy(st.id, id, SBX_ID_LEN + 1);
			have_id = true;
		} else if (strcmp(key, "pid") == 0) {
			if (parse_u64(val, &u) < 0 || u == 0 || u > INT_MAX)
				goto bad;
			st.init_pid = (pid_t)u;
			have_pid = true;
		} else if (strcmp(key, "keeper") == 0) {
			if (parse_u64(val, &u) < 0 || u == 0 || u > INT_MAX)
				goto bad;
			st.keeper_pid = (pid_t)u;
		} else if (strcmp(key, "keeper_start") == 0) {
			if (parse_u64(val, &st.keeper_start) < 0)
				goto bad;
		} else if (strcmp(key, "start") == 0) {
			if (parse_u64(val, &st.init_start) < 0)
				goto bad;
		} else if (strcmp(key, "slot") == 0) {
			if (parse_u64(val, &u) < 0 || u >= set->uid_slots)
				goto bad;
			st.slot = (uint32_t)u;
			have_slot = true;
		} else if (strcmp(key, "uid") == 0) {
			if (parse_u64(val, &u) < 0 || u == 0 || u > UINT32_MAX - SBX_RANGE)
				goto bad;
			st.uid = (uint32_t)u;
			have_uid = true;
		} else if (strcmp(key, "created") == 0) {
			if (parse_u64(val, &u) < 0 || u > INT64_MAX)
				goto bad;
			st.created = (int64_t)u;
		} else if (strcmp(key, "ephemeral") == 0) {
			if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0)
				goto bad;
			st.ephemeral = val[0] == '1';
		} else if (strcmp(key, "memory") == 0) {
			if (parse_u64(val, &st.memory_bytes) < 0)
				goto bad;
		} else if (strcmp(key, "cgroup_v2") == 0) {
			if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0)
				goto bad;
			st.cg.v2 = val[0] == '1';
		} else if (strncmp(key, "cgroup", 6) == 0 && key[6] >= '0' &&
			   key[6] < '0' + SBX_CGROUP_CONTROLLERS && key[7] == '\0') {
			int i = key[6] - '0';
			/* Only ever a cgroup of this sandbox's own. */
			size_t vlen = strlen(val);
			if (strncmp(val, "/sys/fs/cgroup/", 15) != 0 || strstr(val, "/..") ||
			    vlen < SBX_ID_LEN + 1 || val[vlen - SBX_ID_LEN - 1] != '/' ||
			    strcmp(val + vlen - SBX_ID_LEN, id) != 0)
				goto bad;
			if (copy_value(st.cg.path[i], sizeof(st.cg.path[i]), val) < 0)
				goto bad;
			st.cg.present[i] = true;
		} else if (strcmp(key, "etc") == 0) {
			if (!sbx_id_valid(val))
				goto bad;
			memcpy(st.etc_gen, val, SBX_ID_LEN + 1);
		} else if (strcmp(key, "image") == 0) {
			if (copy_value(st.image, sizeof(st.image), val) < 0)
				goto bad;
		} else if (strcmp(key, "workspace") == 0) {
			if (copy_value(st.workspace, sizeof(st.workspace), val) < 0)
				goto bad;
		} else if (strcmp(key, "home") == 0) {
			if (!val[0] || copy_value(st.home, sizeof(st.home), val) < 0)
				goto bad;

		} else {
			goto bad;
		}
		line = nl ? nl + 1 : NULL;
	}
	if (!have_id || !have_pid || !have_uid || !have_slot ||
	    st.uid != set->uid_base + st.slot * SBX_RANGE)
		goto bad;
	*ret = st;
	return 0;
bad:
	return -EBADMSG;
}

/* Reads the start time, and whether the process is a zombie (or dead). */
static int proc_stat(pid_t pid, uint64_t *ret_start, bool *ret_dead);

int sbx_lookup(const struct sbx_settings *set, const char *id, struct sbx_state *st,
	       struct sbx_paths *p, struct al_error *err)
{
	if (geteuid() != 0)
		return al_error_set(err, -EPERM, "airlock sandbox needs root");
	int r = sbx_state_read(set, id, st, err);
	if (r < 0)
		return r;
	return sbx_paths_init(set, id, p, err);
}

int sbx_proc_starttime(pid_t pid, uint64_t *ret)
{
	bool dead;
	return proc_stat(pid, ret, &dead);
}

static int proc_stat(pid_t pid, uint64_t *ret_start, bool *ret_dead)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	_cleanup_free_ char *text = NULL;
	size_t len;
	int r = read_file_bounded(AT_FDCWD, path, 4096, &text, &len);
	if (r < 0)
		return r;
	/* comm may hold spaces and parentheses: fields start after the last ')'. */
	char *p = strrchr(text, ')');
	if (!p)
		return -EBADMSG;
	p++;
	if (p[0] != ' ' || !p[1])
		return -EBADMSG;
	bool dead = p[1] == 'Z' || p[1] == 'X' || p[1] == 'x';
	/* p is at the space before field 3 (state); starttime is field 22,
	 * nineteen fields further. */
	for (int skip = 0; skip < 19; skip++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return -EBADMSG;
	}
	p++;
	char *end = p;
	while (*end >= '0' && *end <= '9')
		end++;
	*end = '\0';
	r = parse_u64(p, ret_start);
	if (r >= 0)
		*ret_dead = dead;
	return r;
}

int sbx_pidfd_if_same(pid_t pid, uint64_t start)
{
	if (pid <= 0)
		return -ESRCH;
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return -errno;
	uint64_t now;
	bool dead;
	/* Checked after pidfd_open: the pidfd now pins this exact process. A
	 * zombie is not alive: its namespaces are gone already. */
	if (proc_stat(pid, &now, &dead) < 0 || now != start || dead) {
		close(fd);
		return -ESRCH;
	}
	return fd;
}

int sbx_state_pidfd(const struct sbx_state *st)
{
	return sbx_pidfd_if_same(st->init_pid, st->init_start);
}

int sbx_rm_rf(const char *path)
{
	return rm_rf(path);
}

/* ---- the --env of a persistent sandbox ---- */

int sbx_env_write_file(const struct sbx_paths *p, const struct sbx_spec *spec)
{
	char path[SBX_PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/env", p->dir);
	_cleanup_close_ int fd =
		open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	const char *home = sbx_spec_home(spec);
	if (home) {
		/* Before --env, which may still set its own. */
		int r = write_full(fd, "HOME=", 5);
		if (r >= 0)
			r = write_full(fd, home, strlen(home) + 1);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < spec->n_env; i++) {
		int r = write_full(fd, spec->env[i], strlen(spec->env[i]) + 1);
		if (r < 0)
			return r;
	}
	return 0;
}

int sbx_env_read_file(const struct sbx_paths *p, struct sbx_env *e)
{
	char path[SBX_PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/env", p->dir);
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r = read_file_bounded(AT_FDCWD, path, ENV_FILE_MAX, &text, &len);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	for (size_t off = 0; off < len;) {
		const char *kv = text + off;
		size_t n = strnlen(kv, len - off);
		if (off + n >= len)
			return -EBADMSG;
		r = sbx_env_set(e, kv);
		if (r < 0)
			return r;
		off += n + 1;
	}
	return 0;
}

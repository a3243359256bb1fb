/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Resource limits through cgroups, v2 (unified) or v1 (one hierarchy per
 * controller). v2 is used when the unified hierarchy has the memory, pids
 * and cpu controllers; a v2 sandbox is placed into its cgroup at clone time
 * (CLONE_INTO_CGROUP), a v1 one is attached by pid right after the clone.
 *
 * Each sandbox gets <parent>/<id> in every hierarchy it uses, where
 * <parent> is a path below the hierarchy's root ("airlock" by default).
 */
#include "sandbox/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/log.h"
#include "common/parse.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

static const char *const controllers[SBX_CGROUP_CONTROLLERS] = { "memory", "pids", "cpu" };

#define CGROUP_FS "/sys/fs/cgroup"

struct cgroup_roots {
	const char *v1; /* directory holding one mount per controller */
	const char *v2; /* the unified hierarchy, or NULL */
};

static bool is_cgroup2(const char *path)
{
	struct statfs sfs;
	return statfs(path, &sfs) == 0 && (unsigned long)sfs.f_type == CGROUP2_SUPER_MAGIC;
}

static const char *unified_root(void)
{
	if (is_cgroup2(CGROUP_FS))
		return CGROUP_FS;
	if (is_cgroup2(CGROUP_FS "/unified"))
		return CGROUP_FS "/unified";
	return NULL;
}

/* True when "name" is a whole word of the space-separated list in path. */
static bool file_lists_word(const char *dir, const char *file, const char *name)
{
	char path[SBX_PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (read_file_bounded(AT_FDCWD, path, 4096, &text, &len) < 0)
		return false;
	size_t n = strlen(name);
	for (char *p = text; (p = strstr(p, name)); p += n) {
		bool start = p == text || p[-1] == ' ' || p[-1] == '\n';
		bool end = p[n] == '\0' || p[n] == ' ' || p[n] == '\n';
		if (start && end)
			return true;
	}
	return false;
}

static bool v2_has_all(const char *root)
{
	for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++)
		if (!file_lists_word(root, "cgroup.controllers", controllers[i]))
			return false;
	return true;
}

bool sbx_cgroup_v2_usable(void)
{
	const char *root = unified_root();
	return root && v2_has_all(root);
}

static int write_knob(const char *dir, const char *knob, const char *value)
{
	char path[SBX_PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s/%s", dir, knob);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	return write_file_at(AT_FDCWD, path, value);
}

static int mkdir_p(char *path, mode_t mode)
{
	/* Usually only the last component is new: try it first. */
	if (mkdir(path, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -errno;
	for (char *s = path + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		int r = mkdir(path, mode);
		*s = '/';
		if (r < 0 && errno != EEXIST)
			return -errno;
	}
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int v2_enable_controllers(const char *root, const char *parent_rel)
{
	/* Each level from the root down to <parent> delegates the controllers. */
	char path[SBX_PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s", root);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	const char *rel = parent_rel;
	for (;;) {
		for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++) {
			if (file_lists_word(path, "cgroup.subtree_control", controllers[i]))
				continue;
			char word[32];
			snprintf(word, sizeof(word), "+%s", controllers[i]);
			int r = write_knob(path, "cgroup.subtree_control", word);
			if (r < 0)
				return r;
		}
		if (!*rel)
			return 0;
		const char *slash = strchr(rel, '/');
		size_t seg = slash ? (size_t)(slash - rel) : strlen(rel);
		size_t len = strlen(path);
		if (len + 1 + seg >= sizeof(path))
			return -ENAMETOOLONG;
		path[len] = '/';
		memcpy(path + len + 1, rel, seg);
		path[len + 1 + seg] = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		rel = slash ? slash + 1 : rel + seg;
	}
}

int sbx_cgroup_limits(const struct sbx_spec *spec, bool v2, struct sbx_cgroup_knob *out, size_t max)
{
	size_t n = 0;
#define KNOB(ctl_, file_, opt_, ...)                                       \
	do {                                                               \
		if (n >= max)                                              \
			return -ENOBUFS;                                   \
		out[n] = (struct sbx_cgroup_knob){ .controller = (ctl_),   \
						   .file = (file_),        \
						   .optional = (opt_) };   \
		snprintf(out[n].value, sizeof(out[n].value), __VA_ARGS__); \
		n++;                                                       \
	} while (0)
	if (spec->memory_bytes) {
		KNOB(0, v2 ? "memory.max" : "memory.limit_in_bytes", false, "%" PRIu64,
		     spec->memory_bytes);
		/* No swap beyond the limit, where swap accounting exists. */
		if (v2)
			KNOB(0, "memory.swap.max", true, "0");
		else
			KNOB(0, "memory.memsw.limit_in_bytes", true, "%" PRIu64,
			     spec->memory_bytes);
	}
	if (spec->pids)
		KNOB(1, "pids.max", false, "%" PRIu64, spec->pids);
	if (spec->cpus > 0) {
		uint64_t period = 100000;
		uint64_t quota = (uint64_t)(spec->cpus * (double)period);
		if (quota < 1000)
			quota = 1000;
		if (v2) {
			KNOB(2, "cpu.max", false, "%" PRIu64 " %" PRIu64, quota, period);
		} else {
			KNOB(2, "cpu.cfs_period_us", false, "%" PRIu64, period);
			KNOB(2, "cpu.cfs_quota_us", false, "%" PRIu64, quota);
		}
	}
#undef KNOB
	return (int)n;
}

static int apply_limits(struct sbx_cgroup *cg, const struct sbx_spec *spec)
{
	struct sbx_cgroup_knob knobs[8];
	int n = sbx_cgroup_limits(spec, cg->v2, knobs, ARRAY_SIZE(knobs));
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		int r = write_knob(cg->path[knobs[i].controller], knobs[i].file, knobs[i].value);
		if (r < 0 && !knobs[i].optional)
			return r;
	}
	return 0;
}

static bool parent_valid(const char *parent)
{
	if (!*parent || parent[0] == '/' || strlen(parent) > 256)
		return false;
	for (const char *s = parent; *s; s++) {
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.' || *s == '/'))
			return false;
	}
	return strstr(parent, "..") == NULL && strstr(parent, "//") == NULL &&
	       parent[strlen(parent) - 1] != '/';
}

int sbx_cgroup_create(const struct sbx_settings *set, const char *id, const struct sbx_spec *spec,
		      struct sbx_cgroup *ret, struct al_error *err)
{
	struct sbx_cgroup cg = { .dirfd = -1 };
	if (!parent_valid(set->cgroup_parent))
		return al_error_set(err, -EINVAL, "invalid cgroup parent '%s'", set->cgroup_parent);

	const char *v2root = unified_root();
	if (v2root && v2_has_all(v2root)) {
		cg.v2 = true;
		int r = v2_enable_controllers(v2root, set->cgroup_parent);
		if (r < 0)
			return al_error_set_errno(err, r,
						  "cannot delegate cgroup controllers below %s/%s",
						  v2root, set->cgroup_parent);
		int n = snprintf(cg.path[0], sizeof(cg.path[0]), "%s/%s/%s", v2root,
				 set->cgroup_parent, id);
		if (n < 0 || (size_t)n >= sizeof(cg.path[0]))
			return al_error_set(err, -ENAMETOOLONG, "cgroup path too long");
		if (mkdir(cg.path[0], 0755) < 0)
			return al_error_set_errno(err, -errno, "cannot create cgroup %s",
						  cg.path[0]);
		cg.present[0] = true;
		memcpy(cg.path[1], cg.path[0], sizeof(cg.path[0]));
		memcpy(cg.path[2], cg.path[0], sizeof(cg.path[0]));
	} else {
		for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++) {
			char root[SBX_PATH_MAX];
			char procs[SBX_PATH_MAX + 32];
			snprintf(root, sizeof(root), CGROUP_FS "/%s", controllers[i]);
			snprintf(procs, sizeof(procs), "%s/cgroup.procs", root);
			if (is_cgroup2(root) || access(procs, F_OK) < 0) {
				sbx_cgroup_destroy(&cg);
				return al_error_set(
					err, -EOPNOTSUPP,
					"the %s cgroup controller is not mounted (see `airlock doctor`)",
					controllers[i]);
			}
			int n = snprintf(cg.path[i], sizeof(cg.path[i]), "%s/%s/%s", root,
					 set->cgroup_parent, id);
			if (n < 0 || (size_t)n >= sizeof(cg.path[i])) {
				sbx_cgroup_destroy(&cg);
				return al_error_set(err, -ENAMETOOLONG, "cgroup path too long");
			}
			int r = mkdir_p(cg.path[i], 0755);
			if (r < 0) {
				sbx_cgroup_destroy(&cg);
				return al_error_set_errno(err, r, "cannot create cgroup %s",
							  cg.path[i]);
			}
			cg.present[i] = true;
		}
	}
	int r = apply_limits(&cg, spec);
	if (r < 0) {
		sbx_cgroup_destroy(&cg);
		return al_error_set_errno(err, r, "cannot set cgroup limits");
	}
	if (cg.v2) {
		cg.dirfd = open(cg.path[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cg.dirfd < 0) {
			r = -errno;
			sbx_cgroup_destroy(&cg);
			return al_error_set_errno(err, r, "cannot open cgroup %s", cg.path[0]);
		}
	}
	*ret = cg;
	return 0;
}

int sbx_cgroup_attach(const struct sbx_cgroup *cg, pid_t pid)
{
	char v[32];
	snprintf(v, sizeof(v), "%d", (int)pid);
	for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++) {
		if (!cg->present[i] || (cg->v2 && i > 0))
			continue;
		int r = write_knob(cg->path[i], "cgroup.procs", v);
		if (r < 0)
			return r;
	}
	return 0;
}

static uint64_t read_counter(const char *dir, const char *file, const char *key)
{
	char path[SBX_PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (read_file_bounded(AT_FDCWD, path, 8192, &text, &len) < 0)
		return 0;
	size_t klen = strlen(key);
	for (char *line = text; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
			uint64_t v;
			if (parse_u64(line + klen + 1, &v) == 0)
				return v;
		}
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

uint64_t sbx_cgroup_oom_kills(const struct sbx_cgroup *cg)
{
	if (!cg->present[0])
		return 0;
	if (cg->v2)
		return read_counter(cg->path[0], "memory.events", "oom_kill");
	return read_counter(cg->path[0], "memory.oom_control", "oom_kill");
}

static int rmdir_retry(const char *path)
{
	/* A cgroup stays busy for a moment after its last task exits. */
	struct timespec delay = { 0, 1000000 };
	for (int attempt = 0; attempt < 200; attempt++) {
		if (rmdir(path) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -errno;
		nanosleep(&delay, NULL);
		if (delay.tv_nsec < 50000000)
			delay.tv_nsec *= 2;
	}
	return -EBUSY;
}

void sbx_cgroup_kill_all(const struct sbx_cgroup *cg)
{
	for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++) {
		if (!cg->present[i] || (cg->v2 && i > 0))
			continue;
		char path[SBX_PATH_MAX];
		snprintf(path, sizeof(path), "%s/cgroup.procs", cg->path[i]);
		_cleanup_free_ char *text = NULL;
		if (read_file_bounded(AT_FDCWD, path, 1 << 20, &text, NULL) < 0)
			continue;
		for (const char *p = text; *p;) {
			uint64_t pid;
			const char *end;
			if (parse_u64_prefix(p, &pid, &end) < 0 || *end != '\n')
				break;
			/* Ours alone (the sandbox's cgroup): never pid 1. */
			if (pid > 1 && pid <= INT32_MAX)
				kill((pid_t)pid, SIGKILL);
			p = end + 1;
		}
	}
}

int sbx_cgroup_destroy(const struct sbx_cgroup *cg)
{
	int ret = 0;
	for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++) {
		if (!cg->present[i] || (cg->v2 && i > 0))
			continue;
		int r = rmdir_retry(cg->path[i]);
		if (r < 0 && ret == 0)
			ret = r;
	}
	return ret;
}

void sbx_cgroup_close(struct sbx_cgroup *cg)
{
	cg->dirfd = safe_close(cg->dirfd);
}

static int gc_dir(const char *dir, bool (*alive)(const char *id, void *ud), void *ud,
		  unsigned *removed)
{
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	int ret = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!sbx_id_valid(de->d_name) || alive(de->d_name, ud))
			continue;
		char path[SBX_PATH_MAX];
		int n = snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (n < 0 || (size_t)n >= sizeof(path))
			continue;
		/* A cgroup with processes in it is not debris: the kernel refuses
		 * to remove it, and it belongs to someone (another state
		 * directory sharing the parent, say). */
		if (rmdir(path) == 0)
			(*removed)++;
		else if (errno != EBUSY && errno != ENOENT && ret == 0)
			ret = -errno;
	}
	closedir(d);
	return ret;
}

bool sbx_cgroup_populated(const struct sbx_settings *set, const char *id)
{
	if (!parent_valid(set->cgroup_parent) || !sbx_id_valid(id))
		return true; /* cannot tell: assume the worst */
	char path[SBX_PATH_MAX];
	const char *v2root = unified_root();
	const char *roots[SBX_CGROUP_CONTROLLERS + 1] = { v2root, CGROUP_FS "/memory",
							  CGROUP_FS "/pids", CGROUP_FS "/cpu" };
	for (size_t i = 0; i < ARRAY_SIZE(roots); i++) {
		if (!roots[i])
			continue;
		int n = snprintf(path, sizeof(path), "%s/%s/%s/cgroup.procs", roots[i],
				 set->cgroup_parent, id);
		if (n < 0 || (size_t)n >= sizeof(path))
			return true;
		_cleanup_free_ char *text = NULL;
		size_t len = 0;
		int r = read_file_bounded(AT_FDCWD, path, 4096, &text, &len);
		if (r == -ENOENT)
			continue;
		if (r < 0 && r != -EFBIG)
			return true;
		if (r == -EFBIG || len > 0)
			return true;
	}
	return false;
}

int sbx_cgroup_gc(const struct sbx_settings *set, bool (*alive)(const char *id, void *ud), void *ud,
		  unsigned *removed)
{
	if (!parent_valid(set->cgroup_parent))
		return -EINVAL;
	char dir[SBX_PATH_MAX];
	int ret = 0;
	const char *v2root = unified_root();
	if (v2root) {
		snprintf(dir, sizeof(dir), "%s/%s", v2root, set->cgroup_parent);
		ret = gc_dir(dir, alive, ud, removed);
	}
	for (int i = 0; i < SBX_CGROUP_CONTROLLERS; i++) {
		snprintf(dir, sizeof(dir), CGROUP_FS "/%s/%s", controllers[i], set->cgroup_parent);
		int r = gc_dir(dir, alive, ud, removed);
		if (r < 0 && ret == 0)
			ret = r;
	}
	return ret;
}

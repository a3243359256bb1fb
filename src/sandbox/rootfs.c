/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandbox's root filesystem.
 *
 * "/" is a directory on disk (<state>/<id>/root) owned by the sandbox's
 * root. Each system directory of the image is an overlay on it: the lower
 * layer is an idmapped, read-only clone of the host directory (so files the
 * host's root owns appear owned by the sandbox's root, and copy-up works),
 * the upper layer is on disk and lives as long as the sandbox. With
 * `--image DIR` the whole of DIR is one overlay at "/".
 *
 * Nothing is mounted in the host's mount namespace: every mount below is
 * made by the sandbox's first process in its own namespace, as host root,
 * before it joins the sandbox's user namespace. The mounts are therefore
 * owned by the initial user namespace and the sandbox cannot change them
 * even without the seccomp filter.
 *
 * /etc's lower layer is not the host's /etc but its filtered copy (see
 * etcview.c): host secrets there do not exist inside at all.
 */
#include "sandbox/internal.h"

#include <dirent.h>
#include <linux/openat2.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <stdarg.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"

#define MAX_LAYERS 16

struct layer {
	int fd;			   /* O_PATH descriptor of the lower directory, then
				   * (sbx_rootfs_make_trees) a detached clone of it */
	struct stat st;		   /* of the lower directory, on the host */
	unsigned missing_points;   /* image: mount points it lacks (bit i: points[i]) */
	char name[32];		   /* directory name under upper/ and work/ */
	char lower[SBX_PATH_MAX];  /* host path */
	char target[SBX_PATH_MAX]; /* path inside the sandbox, "" for "/" */
};

struct link {
	char name[32];
	char target[256];
};

struct sbx_rootfs_plan {
	char dir[SBX_PATH_MAX];
	char mnt[SBX_PATH_MAX];	 /* <dir>/root: where the private tmpfs goes */
	char root[SBX_PATH_MAX]; /* <mnt>/rootfs: the sandbox's "/" */
	char upper[SBX_PATH_MAX];
	char work[SBX_PATH_MAX];
	char workspace[SBX_PATH_MAX];
	bool ws_idmap;
	uint32_t ws_uid, ws_gid;	/* on-disk owner of the workspace */
	int ws_fd;			/* O_PATH descriptor of --workspace, or -1 */
	int home_fd;			/* the home: O_PATH descriptor, then its tree; or -1 */
	char home_rel[48];		/* where inside, relative to "/": "root", "home/NAME" */
	int tools_fd;			/* the tools directory, as the home; or -1 */
	int lower_fd, layer_fd;		/* a layered tree's (struct sbx_spec.lower), as the home */
	int closed_fds[SBX_LOWERS_MAX]; /* its closed layers, newest first */
	size_t n_closed;
	bool tools_writable;
	uint32_t uid; /* host uid of root inside */
	uint64_t tmp_size;
	uint64_t state_size; /* of the private tmpfs holding "/" and the upper layers */
	struct layer layers[MAX_LAYERS];
	size_t n_layers;
	struct link links[MAX_LAYERS];
	size_t n_links;
	bool host_image;
	bool fresh_workspace;
	bool ws_handover; /* an empty workspace of host root's, given to the user at the end */
	/* Who the commands run as (struct sbx_spec.user; 0:0 for root): the
	 * workspace, home, tools and layered tree are that user's inside. */
	struct sbx_user user;
	char *host_bundle; /* the host's CA bundle, when there is a PEM to add */
	size_t host_bundle_len;
	const struct sbx_spec *spec; /* valid until the init has set up */
};

/* Host directories shown read-only (through an overlay) with --image host. */
static const char *const host_layers[] = {
	"usr",	 "etc",	  "opt",    "bin",	    "sbin",	   "lib",
	"lib32", "lib64", "libx32", "var/lib/dpkg", "var/lib/apt",
};

/* What an image must have (or is given in its upper layer). */
static const char *const image_points[] = { "tmp", "proc", "dev", "workspace", "etc" };

/* Fresh directories of the sandbox's own (name, mode). */
/* clang-format off */
static const struct {
	const char *path;
	mode_t mode;
} skeleton[] = {
	{ "tmp", 01777 },     { "proc", 0555 },      { "dev", 0755 },
	{ "workspace", 0755 }, { "root", 0700 },     { "home", 0755 },
	{ "run", 0755 },      { "mnt", 0755 },       { "srv", 0755 },
	{ "var", 0755 },      { "var/lib", 0755 },   { "var/cache", 0755 },
	{ "var/cache/apt", 0755 }, { "var/cache/apt/archives", 0755 },
	{ "var/cache/apt/archives/partial", 0700 }, { "var/log", 0755 },
	{ "var/tmp", 01777 }, { "var/spool", 0755 },
};
/* clang-format on */

static int fmt(char *out, size_t size, const char *f, ...) __attribute__((format(printf, 3, 4)));
static int fmt(char *out, size_t size, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	int n = vsnprintf(out, size, f, ap);
	va_end(ap);
	return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

void sbx_rootfs_plan_free(struct sbx_rootfs_plan *plan)
{
	if (!plan)
		return;
	safe_close(plan->ws_fd);
	safe_close(plan->home_fd);
	safe_close(plan->tools_fd);
	safe_close(plan->lower_fd);
	safe_close(plan->layer_fd);
	for (size_t i = 0; i < plan->n_closed; i++)
		safe_close(plan->closed_fds[i]);
	for (size_t i = 0; i < plan->n_layers; i++)
		safe_close(plan->layers[i].fd);
	free(plan->host_bundle);
	free(plan);
}

size_t sbx_rootfs_plan_fds(const struct sbx_rootfs_plan *plan, int *out, size_t max)
{
	size_t n = 0;
	if (plan->ws_fd >= 0 && n < max)
		out[n++] = plan->ws_fd;
	if (plan->home_fd >= 0 && n < max)
		out[n++] = plan->home_fd;
	if (plan->tools_fd >= 0 && n < max)
		out[n++] = plan->tools_fd;
	if (plan->lower_fd >= 0 && n < max)
		out[n++] = plan->lower_fd;
	if (plan->layer_fd >= 0 && n < max)
		out[n++] = plan->layer_fd;
	for (size_t i = 0; i < plan->n_closed && n < max; i++)
		out[n++] = plan->closed_fds[i];
	for (size_t i = 0; i < plan->n_layers && n < max; i++)
		out[n++] = plan->layers[i].fd;
	return n;
}

/*
 * Opens a directory the caller named, following no symbolic link on the
 * way: a link could have been planted by an earlier sandbox (in its own
 * workspace, say) to send this one somewhere else. The descriptor is used
 * from then on, so nothing can be swapped between the checks and the mount.
 */
int sbx_open_dir_no_links(const char *path)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

bool sbx_rootfs_plan_needs_ws_userns(const struct sbx_rootfs_plan *plan, uint32_t *ret_owner)
{
	if (plan->ws_idmap && ret_owner) {
		ret_owner[0] = plan->ws_uid;
		ret_owner[1] = plan->ws_gid;
	}
	return plan->ws_idmap;
}

/* Overlay options are comma separated and ':' separates lower layers. */
static bool path_ok_for_overlay(const char *p)
{
	return strpbrk(p, ",:\\\n") == NULL;
}

/*
 * Who new entries belong to while the init builds the tree. The init runs
 * with umask 0 (modes are exact) and switches its filesystem ids to the
 * owner of a run of entries, so that they need no chown each: an entry of
 * another owner, or one that existed already, gets its owner and mode set.
 */
struct maker {
	uint32_t fsid; /* current fsuid and fsgid */
};

static int as_owner(struct maker *mk, uint32_t id)
{
	if (mk->fsid == id)
		return 0;
	/* setfsuid returns the previous id; -1 changes nothing and tells. */
	syscall(SYS_setfsuid, id);
	syscall(SYS_setfsgid, id);
	if ((uint32_t)syscall(SYS_setfsuid, -1) != id || (uint32_t)syscall(SYS_setfsgid, -1) != id)
		return -EPERM;
	mk->fsid = id;
	return 0;
}

static int mkdir_owned(struct maker *mk, int dfd, const char *path, mode_t mode, uid_t uid,
		       gid_t gid)
{
	bool made = mkdirat(dfd, path, mode) == 0;
	if (!made && errno != EEXIST)
		return -errno;
	if (made && uid == mk->fsid && gid == mk->fsid)
		return 0; /* the right owner, and (umask 0) the exact mode */
	if (fchownat(dfd, path, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!made && fchmodat(dfd, path, mode, 0) < 0)
		return -errno;
	return 0;
}

/* Host ids in 0..65535 appear shifted by uid inside; others are unmapped. */
static uint32_t shift(uint32_t base, uint32_t id)
{
	return id < SBX_RANGE ? base + id : base + 65534; /* nobody */
}

/* A file of root inside (0644) in an upper layer: a, then b (may be empty).
 * Made with the maker's ids, which the caller set to root inside's. */
static int write_upper_data(struct maker *mk, int upperfd, const char *name, const char *a,
			    size_t a_len, const char *b, size_t b_len, uint32_t uid)
{
	_cleanup_close_ int fd =
		openat(upperfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 && errno == EEXIST) {
		unlinkat(upperfd, name, 0);
		fd = openat(upperfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			    0644);
	}
	if (fd < 0)
		return -errno;
	int r = write_full(fd, a, a_len);
	if (r >= 0 && b_len)
		r = write_full(fd, b, b_len);
	if (r < 0)
		return r;
	if (uid != mk->fsid && fchown(fd, uid, uid) < 0)
		return -errno;
	return 0;
}

static int write_upper_file(struct maker *mk, int upperfd, const char *name, const char *content,
			    uint32_t uid)
{
	return write_upper_data(mk, upperfd, name, content, strlen(content), NULL, 0, uid);
}

/*
 * The host's CA bundle, to which a sandbox's own trust is appended. Read
 * on the host, only if any host user could read it (the rule of the /etc
 * view), bounded. Absent: the sandbox's bundle is its PEM alone.
 */
static int read_host_bundle(char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd =
		open(SBX_TRUST_BUNDLE, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR) {
			*ret = NULL;
			*ret_len = 0;
			return 0;
		}
		return -errno;
	}
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || !(st.st_mode & S_IROTH)) {
		*ret = NULL;
		*ret_len = 0;
		return 0;
	}
	if ((uint64_t)st.st_size > SBX_HOST_BUNDLE_MAX)
		return -EFBIG;
	size_t cap = (size_t)st.st_size + 1; /* one more: a file that grew is seen */
	_cleanup_free_ char *data = malloc(cap);
	if (!data)
		return -ENOMEM;
	ssize_t n = read_full(fd, data, cap);
	if (n < 0)
		return (int)n;
	if ((size_t)n == cap)
		return -EAGAIN; /* changed under us; the next sandbox reads it again */
	*ret_len = (size_t)n;
	*ret = TAKE_PTR(data);
	return 0;
}

/* Directories of the sandbox's own in /etc's upper layer; overlay merges
 * them with the lower layer's, so what /etc/ssl/certs holds stays visible. */
static int mkdir_upper_path(struct maker *mk, int upperfd, const char *path, uint32_t uid)
{
	char buf[128];
	if (fmt(buf, sizeof(buf), "%s", path) < 0)
		return -ENAMETOOLONG;
	for (char *s = buf;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		int r = mkdir_owned(mk, upperfd, buf, 0755, uid, uid);
		if (r < 0)
			return r;
		if (c == '\0')
			return 0;
		*s = c;
	}
}

/* The trust files: the sandbox's CA alone, and the bundle that programs
 * read (the host's, then the sandbox's CA). */
static int prepare_trust(struct maker *mk, int upperfd, const struct sbx_rootfs_plan *plan,
			 uint32_t uid)
{
	const struct sbx_spec *spec = plan->spec;
	/* Relative to /etc. */
	const char *ca = &SBX_CA_FILE[sizeof("/etc/") - 1];
	const char *bundle = &SBX_TRUST_BUNDLE[sizeof("/etc/") - 1];
	char dir[128];
	const char *files[] = { ca, bundle };
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		const char *slash = strrchr(files[i], '/');
		if (!slash)
			continue;
		if (fmt(dir, sizeof(dir), "%.*s", (int)(slash - files[i]), files[i]) < 0)
			return -ENAMETOOLONG;
		int r = mkdir_upper_path(mk, upperfd, dir, uid);
		if (r < 0)
			return r;
	}
	int r = write_upper_data(mk, upperfd, ca, spec->trust_pem, spec->trust_pem_len, NULL, 0,
				 uid);
	if (r < 0)
		return r;
	const char *host = plan->host_bundle ? plan->host_bundle : "";
	size_t host_len = plan->host_bundle_len;
	if (host_len && host[host_len - 1] != '\n') {
		/* One certificate may not run into the next. */
		_cleanup_free_ char *joined = malloc(host_len + 1);
		if (!joined)
			return -ENOMEM;
		memcpy(joined, host, host_len);
		joined[host_len] = '\n';
		return write_upper_data(mk, upperfd, bundle, joined, host_len + 1, spec->trust_pem,
					spec->trust_pem_len, uid);
	}
	return write_upper_data(mk, upperfd, bundle, host, host_len, spec->trust_pem,
				spec->trust_pem_len, uid);
}

/* The sandbox's own files in /etc's upper layer (the lower layer is the
 * filtered copy of the host's /etc, see etcview.c). */
static int prepare_etc(struct maker *mk, int upperfd, const struct sbx_rootfs_plan *plan,
		       uint32_t uid)
{
	const struct sbx_spec *spec = plan->spec;
	int r = as_owner(mk, uid);
	if (r < 0)
		return r;
	const char *host = spec->hostname ? spec->hostname : "airlock";
	char buf[512];
	if (fmt(buf, sizeof(buf), "%s\n", host) < 0)
		return -ENAMETOOLONG;
	r = write_upper_file(mk, upperfd, "hostname", buf, uid);
	if (r < 0)
		return r;
	if (fmt(buf, sizeof(buf),
		"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n",
		host) < 0)
		return -ENAMETOOLONG;
	r = write_upper_file(mk, upperfd, "hosts", buf, uid);
	if (r < 0)
		return r;
	if (spec->network == SBX_NETWORK_NONE)
		r = write_upper_file(mk, upperfd, "resolv.conf",
				     "# no name service in this sandbox\n", uid);
	else
		r = write_upper_file(mk, upperfd, "resolv.conf",
				     "# the egress gateway answers (allowed names only)\n"
				     "nameserver 127.0.0.1\n",
				     uid);
	if (r < 0)
		return r;
	if (spec->trust_pem) {
		r = prepare_trust(mk, upperfd, plan, uid);
		if (r < 0)
			return r;
	}
	uint8_t raw[16];
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return -EIO;
	char mid[34];
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(mid + 2 * i, 3, "%02x", raw[i]);
	mid[32] = '\n';
	mid[33] = '\0';
	return write_upper_file(mk, upperfd, "machine-id", mid, uid);
}

static int prepare_workspace(const struct sbx_spec *spec, struct sbx_rootfs_plan *plan,
			     struct al_error *err)
{
	if (!spec->workspace) {
		/* Made in the private tmpfs when the init sets up. */
		plan->fresh_workspace = true;
		return 0;
	}
	int fd = sbx_open_dir_no_links(spec->workspace);
	if (fd == -ELOOP)
		return al_error_set(err, -ELOOP,
				    "workspace %s goes through a symbolic link: give its real path",
				    spec->workspace);
	if (fd == -ENOTDIR)
		return al_error_set(err, -ENOTDIR, "workspace %s is not a directory",
				    spec->workspace);
	if (fd < 0)
		return al_error_set_errno(err, fd, "workspace %s", spec->workspace);
	plan->ws_fd = fd;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set_errno(err, -errno, "workspace %s", spec->workspace);
	if (st.st_uid != 0) {
		/* Inside, the workspace's owner and group are root's, and they
		 * are the only ids the workspace's mount maps (see ws_map in
		 * proc.c). The group must be mapped (the kernel refuses writes
		 * to a directory whose group has no name inside), so it must not
		 * be the host's root group. */
		gid_t gid = st.st_gid;
		if (gid == 0)
			return al_error_set(
				err, -EPERM,
				"workspace %s belongs to group root, so files made inside "
				"would be root's on the host; give it its owner's group: chown "
				"-R %u:GROUP %s",
				spec->workspace, (unsigned)st.st_uid, spec->workspace);
		plan->ws_idmap = true;
		plan->ws_uid = (uint32_t)st.st_uid;
		plan->ws_gid = (uint32_t)gid;
		return 0;
	}
	/* Owned by host root. With a home, refused before anything is handed
	 * over: the home would need the workspace's new owner, the sandbox's
	 * root, which no directory the caller made can have. */
	if (spec->home)
		return al_error_set(
			err, -EPERM,
			"workspace %s is owned by root: with a home, give the workspace "
			"and the home one unprivileged owner (chown)",
			spec->workspace);
	/* The sandbox must never create root-owned files on the host. An
	 * empty private directory is handed to the sandbox's root; a shared
	 * one (/tmp, /dev/shm: world-writable or sticky) never. */
	if (st.st_mode & (S_IWOTH | S_ISVTX))
		return al_error_set(err, -EPERM,
				    "workspace %s is a shared directory owned by root: give the "
				    "sandbox a directory of its own",
				    spec->workspace);
	_cleanup_close_ int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return al_error_set_errno(err, -errno, "workspace %s", spec->workspace);
	DIR *d = fdopendir(fcntl(dfd, F_DUPFD_CLOEXEC, 3));
	if (!d)
		return al_error_set_errno(err, -errno, "workspace %s", spec->workspace);
	bool empty = true;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			empty = false;
	closedir(d);
	if (!empty)
		return al_error_set(
			err, -EPERM,
			"workspace %s is owned by root and not empty, so files made inside "
			"would be root's on the host; give it to an unprivileged user and "
			"group: chown -R USER:GROUP %s",
			spec->workspace, spec->workspace);
	/* Handed over once the user is known (sbx_rootfs_prepare's end). */
	plan->ws_handover = true;
	return 0;
}

/* The sandbox's user (spec->user) looked up in the image's files (the view
 * of /etc for the host's), then the root-owned empty workspace handed to
 * that user. */
static int prepare_user(const struct sbx_spec *spec, const char *etc_view,
			struct sbx_rootfs_plan *plan, struct al_error *err)
{
	if (spec->user) {
		_cleanup_close_ int root_fd = -1;
		if (plan->host_image) {
			/* The view is <gen>/etc: <gen> is the root it resolves in. */
			char parent[SBX_PATH_MAX];
			if (fmt(parent, sizeof(parent), "%s", etc_view) < 0)
				return al_error_set(err, -ENAMETOOLONG, "path too long");
			char *slash = strrchr(parent, '/');
			if (!slash || strcmp(slash, "/etc") != 0)
				return al_error_set(err, -EINVAL, "no view of /etc was prepared");
			*slash = '\0';
			root_fd = sbx_open_dir_no_links(parent);
			if (root_fd < 0)
				return al_error_set_errno(err, root_fd,
							  "cannot open the view of /etc");
		} else {
			root_fd = fcntl(plan->layers[0].fd, F_DUPFD_CLOEXEC, 3);
			if (root_fd < 0)
				return al_error_set_errno(err, -errno, "image %s", spec->image);
		}
		int r = sbx_user_resolve(root_fd, spec->user, &plan->user, err);
		if (r < 0)
			return r;
	}
	if (plan->ws_handover) {
		uint32_t uid = plan->uid + plan->user.uid, gid = plan->uid + plan->user.gid;
		if (fchownat(plan->ws_fd, "", uid, gid, AT_EMPTY_PATH) < 0)
			return al_error_set_errno(err, -errno,
						  "cannot hand workspace to the sandbox");
		plan->ws_idmap = true;
		plan->ws_uid = uid;
		plan->ws_gid = gid;
	}
	return 0;
}

void sbx_rootfs_plan_user(const struct sbx_rootfs_plan *plan, struct sbx_user *ret)
{
	*ret = plan->user;
}

/* A directory of the layered tree's (what: its name), opened without
 * following a link, of the tree's owner and group. */
static int tree_dir(int dfd, const char *name, const char *what, const char *path,
		    const struct sbx_rootfs_plan *plan, struct al_error *err)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
			   RESOLVE_NO_XDEV,
	};
	int fd = (int)syscall(SYS_openat2, dfd, name, &how, sizeof(how));
	if (fd < 0)
		return al_error_set_errno(err, -errno, "%s %s/%s is not a directory", what, path,
					  name);
	struct stat st;
	if (fstat(fd, &st) < 0 || (uint32_t)st.st_uid != plan->ws_uid ||
	    (uint32_t)st.st_gid != plan->ws_gid) {
		close(fd);
		return al_error_set(err, -EPERM,
				    "%s %s/%s must have the owner and group of the lower directory "
				    "(%u:%u)",
				    what, path, name, (unsigned)plan->ws_uid,
				    (unsigned)plan->ws_gid);
	}
	return fd;
}

/*
 * A layered tree: the lower directory's owner is the workspace's (never
 * root); its workspace/ (and with a home home/) must be there. The layer's
 * upper/ and work/ are made when missing, as its owner's.
 */
static int prepare_layered(const struct sbx_spec *spec, struct sbx_rootfs_plan *plan,
			   struct al_error *err)
{
	if (!spec->lower)
		return 0;
	const char *const dirs[] = { spec->lower, spec->layer };
	const char *const whats[] = { "lower directory", "layer" };
	int *fds[] = { &plan->lower_fd, &plan->layer_fd };
	for (size_t i = 0; i < 2; i++) {
		int fd = sbx_open_dir_no_links(dirs[i]);
		if (fd == -ELOOP)
			return al_error_set(
				err, -ELOOP,
				"%s %s goes through a symbolic link: give its real path", whats[i],
				dirs[i]);
		if (fd < 0)
			return al_error_set_errno(err, fd, "%s %s", whats[i], dirs[i]);
		*fds[i] = fd;
		struct stat st;
		if (fstat(fd, &st) < 0)
			return al_error_set_errno(err, -errno, "%s %s", whats[i], dirs[i]);
		if (i == 0) {
			if (st.st_uid == 0 || st.st_gid == 0)
				return al_error_set(
					err, -EPERM,
					"lower directory %s belongs to %u:%u: a layered tree "
					"has one unprivileged owner and group (chown)",
					dirs[i], (unsigned)st.st_uid, (unsigned)st.st_gid);
			plan->ws_idmap = true;
			plan->ws_uid = (uint32_t)st.st_uid;
			plan->ws_gid = (uint32_t)st.st_gid;
		} else if ((uint32_t)st.st_uid != plan->ws_uid ||
			   (uint32_t)st.st_gid != plan->ws_gid) {
			return al_error_set(err, -EPERM,
					    "layer %s belongs to %u:%u and the lower directory to "
					    "%u:%u: they must have one owner and group",
					    dirs[i], (unsigned)st.st_uid, (unsigned)st.st_gid,
					    (unsigned)plan->ws_uid, (unsigned)plan->ws_gid);
		}
	}
	const char *need[2] = { "workspace", spec->home_path ? "home" : NULL };
	for (size_t i = 0; i < 2 && need[i]; i++) {
		int fd = tree_dir(plan->lower_fd, need[i], "lower directory", spec->lower, plan,
				  err);
		if (fd < 0)
			return fd;
		close(fd);
	}
	if (spec->home_path &&
	    fmt(plan->home_rel, sizeof(plan->home_rel), "%s", spec->home_path + 1) < 0)
		return al_error_set(err, -ENAMETOOLONG, "home path too long");
	if (spec->n_closed > SBX_LOWERS_MAX - 1)
		return al_error_set(err, -E2BIG, "at most %d closed layers", SBX_LOWERS_MAX - 1);
	for (size_t i = 0; i < spec->n_closed; i++) {
		const char *dir = spec->closed[i];
		int fd = sbx_open_dir_no_links(dir);
		if (fd < 0)
			return al_error_set_errno(err, fd, "closed layer %s", dir);
		plan->closed_fds[plan->n_closed++] = fd;
		struct stat st;
		if (fstat(fd, &st) < 0)
			return al_error_set_errno(err, -errno, "closed layer %s", dir);
		if ((uint32_t)st.st_uid != plan->ws_uid || (uint32_t)st.st_gid != plan->ws_gid)
			return al_error_set(
				err, -EPERM,
				"closed layer %s belongs to %u:%u and the lower directory "
				"to %u:%u: they must have one owner and group",
				dir, (unsigned)st.st_uid, (unsigned)st.st_gid,
				(unsigned)plan->ws_uid, (unsigned)plan->ws_gid);
	}
	return sbx_layer_dirs(plan->layer_fd, spec->layer, plan->ws_uid, plan->ws_gid, err);
}

int sbx_layer_dirs(int layer_fd, const char *layer, uint32_t uid, uint32_t gid,
		   struct al_error *err)
{
	const struct sbx_rootfs_plan owner = { .ws_uid = uid, .ws_gid = gid };
	const char *const parts[] = { "upper", "work" };
	for (size_t i = 0; i < 2; i++) {
		if (mkdirat(layer_fd, parts[i], 0755) == 0) {
			/* Through a descriptor of the directory, never by name. */
			int fd = openat(layer_fd, parts[i],
					O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			int r = fd < 0 || fchown(fd, uid, gid) < 0 ? -errno : 0;
			safe_close(fd);
			if (r < 0)
				return al_error_set_errno(err, r, "layer %s/%s", layer, parts[i]);
		} else if (errno != EEXIST) {
			return al_error_set_errno(err, -errno, "layer %s/%s", layer, parts[i]);
		}
		int fd = tree_dir(layer_fd, parts[i], "layer", layer, &owner, err);
		if (fd < 0)
			return fd;
		close(fd);
	}
	return 0;
}

/*
 * The agent's home: a host directory of the workspace's owner and group,
 * mapped through the workspace's idmap (the same user namespace), so that
 * everything said of the workspace's ownership holds for it too.
 */
static int prepare_home(const struct sbx_spec *spec, struct sbx_rootfs_plan *plan,
			struct al_error *err)
{
	if (!spec->home)
		return 0;
	const char *home = spec->home;
	/* validate_spec checked the path; its copy outlives the spec's strings,
	 * which the init wipes. */
	const char *inside = spec->home_path ? spec->home_path : "/root";
	if (fmt(plan->home_rel, sizeof(plan->home_rel), "%s", inside + 1) < 0)
		return al_error_set(err, -ENAMETOOLONG, "home path too long");
	if (!spec->workspace || !plan->ws_idmap)
		return al_error_set(err, -EINVAL,
				    "home %s needs a workspace directory: a home must have the "
				    "workspace's owner",
				    home);
	int fd = sbx_open_dir_no_links(home);
	if (fd == -ELOOP)
		return al_error_set(err, -ELOOP,
				    "home %s goes through a symbolic link: give its real path",
				    home);
	if (fd == -ENOTDIR)
		return al_error_set(err, -ENOTDIR, "home %s is not a directory", home);
	if (fd < 0)
		return al_error_set_errno(err, fd, "home %s", home);
	plan->home_fd = fd;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set_errno(err, -errno, "home %s", home);
	/* Any other id has no name in the workspace's idmap: files of another
	 * owner would be out of reach inside, and the sandbox's files there
	 * would not be the workspace owner's. */
	if ((uint32_t)st.st_uid != plan->ws_uid || (uint32_t)st.st_gid != plan->ws_gid)
		return al_error_set(err, -EPERM,
				    "home %s belongs to %u:%u and the workspace %s to %u:%u: a "
				    "home must have the workspace's owner and group",
				    home, (unsigned)st.st_uid, (unsigned)st.st_gid, spec->workspace,
				    (unsigned)plan->ws_uid, (unsigned)plan->ws_gid);
	return 0;
}

/*
 * The tools directory (what a preset's setup installed, shared by its
 * sessions): like the home, a host directory of the workspace's owner and
 * group through the workspace's idmap, read-only unless the spec says
 * otherwise.
 */
static int prepare_tools(const struct sbx_spec *spec, struct sbx_rootfs_plan *plan,
			 struct al_error *err)
{
	if (!spec->tools)
		return 0;
	const char *tools = spec->tools;
	if ((!spec->workspace && !spec->lower) || !plan->ws_idmap)
		return al_error_set(err, -EINVAL,
				    "tools directory %s needs a workspace directory of the same "
				    "owner",
				    tools);
	int fd = sbx_open_dir_no_links(tools);
	if (fd == -ELOOP)
		return al_error_set(
			err, -ELOOP,
			"tools directory %s goes through a symbolic link: give its real "
			"path",
			tools);
	if (fd < 0)
		return al_error_set_errno(err, fd, "tools directory %s", tools);
	plan->tools_fd = fd;
	plan->tools_writable = spec->tools_writable;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set_errno(err, -errno, "tools directory %s", tools);
	if (!S_ISDIR(st.st_mode))
		return al_error_set(err, -ENOTDIR, "tools directory %s is not a directory", tools);
	if ((uint32_t)st.st_uid != plan->ws_uid || (uint32_t)st.st_gid != plan->ws_gid)
		return al_error_set(err, -EPERM,
				    "tools directory %s belongs to %u:%u and the workspace to "
				    "%u:%u: it must have the workspace's owner and group",
				    tools, (unsigned)st.st_uid, (unsigned)st.st_gid,
				    (unsigned)plan->ws_uid, (unsigned)plan->ws_gid);
	return 0;
}

static int add_layer(struct sbx_rootfs_plan *plan, const char *lower, const char *target)
{
	if (plan->n_layers >= MAX_LAYERS)
		return -E2BIG;
	struct layer *l = &plan->layers[plan->n_layers];
	snprintf(l->name, sizeof(l->name), "%zu", plan->n_layers);
	if (fmt(l->lower, sizeof(l->lower), "%s", lower) < 0 ||
	    fmt(l->target, sizeof(l->target), "%s", target) < 0)
		return -ENAMETOOLONG;
	l->fd = sbx_open_dir_no_links(lower);
	if (l->fd < 0)
		return l->fd;
	plan->n_layers++;
	if (fstat(l->fd, &l->st) < 0)
		return -errno;
	return 0;
}

static int prepare_layer_dirs(struct maker *mk, const struct sbx_rootfs_plan *plan,
			      const struct layer *l, int *ret_upperfd)
{
	char up[SBX_PATH_MAX], wk[SBX_PATH_MAX];
	if (fmt(up, sizeof(up), "%s/%s", plan->upper, l->name) < 0 ||
	    fmt(wk, sizeof(wk), "%s/%s", plan->work, l->name) < 0)
		return -ENAMETOOLONG;
	const struct stat *st = &l->st;
	int r = as_owner(mk, 0); /* in upper/ and work/, root's alone */
	if (r < 0)
		return r;
	r = mkdir_owned(mk, AT_FDCWD, up, st->st_mode & 07777, shift(plan->uid, st->st_uid),
			shift(plan->uid, st->st_gid));
	if (r < 0)
		return r;
	r = mkdir_owned(mk, AT_FDCWD, wk, 0700, 0, 0);
	if (r < 0)
		return r;
	if (ret_upperfd) {
		*ret_upperfd = open(up, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (*ret_upperfd < 0)
			return -errno;
	}
	return 0;
}

int sbx_rootfs_prepare(const struct sbx_spec *spec, const struct sbx_paths *p, uint32_t uid,
		       const char *etc_view, struct sbx_rootfs_plan **ret, struct al_error *err)
{
	_cleanup_(sbx_rootfs_plan_freep) struct sbx_rootfs_plan *plan = calloc(1, sizeof(*plan));
	if (!plan)
		return al_error_set(err, -ENOMEM, "out of memory");
	plan->ws_fd = plan->home_fd = plan->tools_fd = plan->lower_fd = plan->layer_fd = -1;
	plan->uid = uid;
	plan->spec = spec;
	memcpy(plan->dir, p->dir, sizeof(plan->dir));
	if (fmt(plan->mnt, sizeof(plan->mnt), "%s", p->root) < 0 ||
	    fmt(plan->root, sizeof(plan->root), "%s/rootfs", p->root) < 0 ||
	    fmt(plan->upper, sizeof(plan->upper), "%s/upper", p->root) < 0 ||
	    fmt(plan->work, sizeof(plan->work), "%s/work", p->root) < 0 ||
	    fmt(plan->workspace, sizeof(plan->workspace), "%s/ws", p->root) < 0)
		return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
	plan->tmp_size = spec->memory_bytes ? spec->memory_bytes : (uint64_t)1 << 30;
	/* Writes outside /workspace live in memory and count against the
	 * memory limit: a sandbox cannot fill the host's disk through /usr. */
	plan->state_size = spec->memory_bytes ? spec->memory_bytes : 0;
	if (!path_ok_for_overlay(p->dir))
		return al_error_set(err, -EINVAL,
				    "state directory %s may not contain ',', ':' or '\\'", p->dir);

	int r = spec->lower ? prepare_layered(spec, plan, err) : prepare_workspace(spec, plan, err);
	if (r >= 0)
		r = prepare_home(spec, plan, err);
	if (r >= 0)
		r = prepare_tools(spec, plan, err);
	if (r < 0)
		return r;
	/* The one directory on disk: the mount point of the private tmpfs. */
	if (mkdir(plan->mnt, 0700) < 0)
		return al_error_set_errno(err, -errno, "cannot create %s", plan->mnt);

	plan->host_image = !spec->image || strcmp(spec->image, "host") == 0;
	if (plan->host_image && spec->trust_pem) {
		r = read_host_bundle(&plan->host_bundle, &plan->host_bundle_len);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot read %s", SBX_TRUST_BUNDLE);
	}
	if (plan->host_image) {
		for (size_t i = 0; i < ARRAY_SIZE(host_layers); i++) {
			char host[SBX_PATH_MAX];
			struct stat st;
			if (fmt(host, sizeof(host), "/%s", host_layers[i]) < 0)
				continue;
			if (lstat(host, &st) < 0)
				continue;
			if (S_ISLNK(st.st_mode) && plan->n_links < MAX_LAYERS) {
				/* merged-/usr: /bin -> usr/bin and the like */
				struct link *l = &plan->links[plan->n_links];
				ssize_t n = readlink(host, l->target, sizeof(l->target) - 1);
				if (n < 0)
					continue;
				l->target[n] = '\0';
				snprintf(l->name, sizeof(l->name), "%s", host_layers[i]);
				plan->n_links++;
				continue;
			}
			if (!S_ISDIR(st.st_mode))
				continue;
			/* /etc is shown through its filtered copy, never itself. */
			bool etc = strcmp(host_layers[i], "etc") == 0;
			if (etc && !etc_view)
				return al_error_set(err, -EINVAL, "no view of /etc was prepared");
			r = add_layer(plan, etc ? etc_view : host, host_layers[i]);
			if (r < 0)
				return al_error_set_errno(err, r, "cannot use /%s", host_layers[i]);
		}
	} else {
		if (strcmp(spec->image, "/") == 0)
			return al_error_set(err, -EINVAL,
					    "image / is the host itself: use --image host");
		r = add_layer(plan, spec->image, "");
		if (r == -ELOOP)
			return al_error_set(err, r,
					    "image %s goes through a symbolic link: give its real "
					    "path",
					    spec->image);
		if (r < 0)
			return al_error_set_errno(err, r, "image %s cannot be used", spec->image);
		struct layer *l = &plan->layers[0];
		struct stat st;
		if (fstatat(l->fd, "bin", &st, 0) < 0)
			return al_error_set(err, -ENOENT,
					    "image %s has no /bin: not a root filesystem",
					    spec->image);
		for (size_t i = 0; i < ARRAY_SIZE(image_points); i++)
			if (fstatat(l->fd, image_points[i], &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			    !S_ISDIR(st.st_mode))
				l->missing_points |= 1u << i;
	}
	r = prepare_user(spec, etc_view, plan, err);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(plan);
	return 0;
}

/* ---- inside the sandbox's mount namespace ---- */

/* Builds "/" and the upper layers in the freshly mounted private tmpfs. */
static int build_tree(struct maker *mk, const struct sbx_rootfs_plan *plan, struct al_error *err)
{
	uint32_t uid = plan->uid;
	char lowerdir[SBX_PATH_MAX];
	if (fmt(lowerdir, sizeof(lowerdir), "%s/lower", plan->mnt) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	/* The tmpfs's own directories, root's (as we are). */
	if (mkdir_owned(mk, AT_FDCWD, plan->root, 0755, uid, uid) < 0 ||
	    mkdir_owned(mk, AT_FDCWD, plan->upper, 0700, 0, 0) < 0 ||
	    mkdir_owned(mk, AT_FDCWD, plan->work, 0700, 0, 0) < 0 ||
	    mkdir_owned(mk, AT_FDCWD, lowerdir, 0700, 0, 0) < 0)
		return al_error_set_errno(err, -errno, "cannot create the sandbox's tree");
	if (plan->lower_fd >= 0) {
		char tree[SBX_PATH_MAX];
		if (fmt(tree, sizeof(tree), "%s/tree", plan->mnt) < 0 ||
		    mkdir_owned(mk, AT_FDCWD, tree, 0700, 0, 0) < 0)
			return al_error_set_errno(err, -errno, "cannot create the sandbox's tree");
	}
	if (plan->fresh_workspace) {
		int r = mkdir_owned(mk, AT_FDCWD, plan->workspace, 0755, uid + plan->user.uid,
				    uid + plan->user.gid);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot create the workspace");
	}
	_cleanup_close_ int rootfd =
		open(plan->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (rootfd < 0)
		return al_error_set_errno(err, -errno, "cannot open %s", plan->root);
	int r;
	if (plan->host_image) {
		/* "/" itself: root inside's, made as root inside. */
		r = as_owner(mk, uid);
		if (r < 0)
			return al_error_set_errno(err, r, "cannot take the sandbox's ids");
		for (size_t i = 0; i < plan->n_links; i++) {
			const struct link *l = &plan->links[i];
			if (symlinkat(l->target, rootfd, l->name) < 0)
				return al_error_set_errno(err, -errno, "cannot link /%s", l->name);
		}
		for (size_t i = 0; i < ARRAY_SIZE(skeleton); i++) {
			r = mkdir_owned(mk, rootfd, skeleton[i].path, skeleton[i].mode, uid, uid);
			if (r < 0)
				return al_error_set_errno(err, r, "cannot create /%s",
							  skeleton[i].path);
		}
		for (size_t i = 0; i < plan->n_layers; i++) {
			r = mkdir_owned(mk, rootfd, plan->layers[i].target, 0755, uid, uid);
			if (r < 0)
				return al_error_set_errno(err, r, "cannot create /%s",
							  plan->layers[i].target);
		}
		for (size_t i = 0; i < plan->n_layers; i++) {
			const struct layer *l = &plan->layers[i];
			int upperfd = -1;
			r = prepare_layer_dirs(mk, plan, l, &upperfd);
			if (r >= 0 && strcmp(l->target, "etc") == 0)
				r = prepare_etc(mk, upperfd, plan, uid);
			safe_close(upperfd);
			if (r < 0)
				return al_error_set_errno(err, r, "cannot prepare /%s", l->target);
		}
		return 0;
	}
	const struct layer *l = &plan->layers[0];
	int upperfd = -1;
	r = prepare_layer_dirs(mk, plan, l, &upperfd);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot prepare the image layer");
	/* Mount points the image lacks, made in the upper layer. */
	for (size_t i = 0; i < ARRAY_SIZE(image_points) && r >= 0; i++) {
		if (!(l->missing_points & (1u << i)))
			continue;
		unlinkat(upperfd, image_points[i], 0);
		r = mkdir_owned(mk, upperfd, image_points[i],
				strcmp(image_points[i], "tmp") ? 0755 : 01777, uid, uid);
	}
	safe_close(upperfd);
	if (r < 0)
		return al_error_set_errno(err, r, "cannot prepare the image's mount points");
	return 0;
}

static int sys_open_tree(int dfd, const char *path, unsigned flags)
{
	return (int)syscall(SYS_open_tree, dfd, path, flags);
}

static int sys_mount_setattr(int dfd, const char *path, unsigned flags, struct mount_attr *attr)
{
	return (int)syscall(SYS_mount_setattr, dfd, path, flags, attr, sizeof(*attr));
}

static int sys_move_mount(int from_dfd, const char *from, int to_dfd, const char *to,
			  unsigned flags)
{
	return (int)syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags);
}

/* A detached clone of the directory src_fd: nosuid, nodev, with ids shifted
 * through userns_fd unless it is -1. Made in the host's mount namespace
 * (where src_fd lives); the init attaches it in its own. */
int sbx_rootfs_clone(int src_fd, const char *what, int userns_fd, bool readonly,
		     struct al_error *err)
{
	int fd = sys_open_tree(src_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "open_tree %s", what);
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
			    (readonly ? MOUNT_ATTR_RDONLY : 0),
	};
	if (userns_fd >= 0) {
		attr.attr_set |= MOUNT_ATTR_IDMAP;
		attr.userns_fd = (uint64_t)userns_fd;
	}
	if (sys_mount_setattr(fd, "", AT_EMPTY_PATH, &attr) < 0) {
		int r = -errno;
		close(fd);
		return al_error_set_errno(
			err, r,
			"cannot make an idmapped mount of %s (needs Linux 5.19+ "
			"and a filesystem that supports it; see `airlock doctor`)",
			what);
	}
	return fd;
}

int sbx_rootfs_make_trees(struct sbx_rootfs_plan *plan, int userns_fd, int ws_userns_fd,
			  struct al_error *err)
{
	for (size_t i = 0; i < plan->n_layers; i++) {
		struct layer *l = &plan->layers[i];
		int t = sbx_rootfs_clone(l->fd, l->lower, userns_fd, true, err);
		if (t < 0)
			return t;
		close(l->fd);
		l->fd = t;
	}
	if (plan->ws_fd >= 0) {
		int t = sbx_rootfs_clone(plan->ws_fd, "the workspace",
					 plan->ws_idmap ? ws_userns_fd : -1, false, err);
		if (t < 0)
			return t;
		close(plan->ws_fd);
		plan->ws_fd = t;
	}
	if (plan->home_fd >= 0) {
		/* prepare_home made sure the workspace is idmapped. */
		int t = sbx_rootfs_clone(plan->home_fd, "the home", ws_userns_fd, false, err);
		if (t < 0)
			return t;
		close(plan->home_fd);
		plan->home_fd = t;
	}
	if (plan->lower_fd >= 0) {
		/* Never written: other sandboxes may have the same lower. */
		int t = sbx_rootfs_clone(plan->lower_fd, "the lower directory", ws_userns_fd, true,
					 err);
		if (t < 0)
			return t;
		close(plan->lower_fd);
		plan->lower_fd = t;
		t = sbx_rootfs_clone(plan->layer_fd, "the layer", ws_userns_fd, false, err);
		if (t < 0)
			return t;
		close(plan->layer_fd);
		plan->layer_fd = t;
		for (size_t i = 0; i < plan->n_closed; i++) {
			t = sbx_rootfs_clone(plan->closed_fds[i], "a closed layer", ws_userns_fd,
					     true, err);
			if (t < 0)
				return t;
			close(plan->closed_fds[i]);
			plan->closed_fds[i] = t;
		}
	}
	if (plan->tools_fd >= 0) {
		/* Read-only but for a preset's setup, which fills it. */
		int t = sbx_rootfs_clone(plan->tools_fd, "the tools directory", ws_userns_fd,
					 !plan->tools_writable, err);
		if (t < 0)
			return t;
		close(plan->tools_fd);
		plan->tools_fd = t;
	}
	return 0;
}

static int attach_tree(int tree_fd, const char *dst, struct al_error *err)
{
	if (sys_move_mount(tree_fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return al_error_set_errno(err, -errno, "cannot attach a mount at %s", dst);
	return 0;
}

/* A directory below dfd, in one step, following no link and (unless
 * cross) crossing no mount. */
static int open_dir_beneath(int dfd, const char *name, bool cross)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
			   (cross ? 0 : RESOLVE_NO_XDEV),
	};
	int fd = (int)syscall(SYS_openat2, dfd, name, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

/*
 * Attaches a tree (the home, the tools) at its place in the new root
 * (where: relative to "/"), found segment by segment
 * without following a link and made (as root inside, so that it is the
 * sandbox's) where it is missing. With --image DIR /home and /root are the
 * image's: a link there would resolve against the host's root, where the
 * init still is, so one is refused rather than followed.
 */
static int attach_at(const struct sbx_rootfs_plan *plan, struct maker *mk, int tree_fd,
		     const char *where, const char *what, bool cross, struct al_error *err)
{
	_cleanup_close_ int dfd = open(plan->root, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return al_error_set_errno(err, -errno, "cannot open %s", plan->root);
	char rel[64];
	if (fmt(rel, sizeof(rel), "%s", where) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long: /%s", where);
	for (char *seg = rel;;) {
		char *slash = strchr(seg, '/');
		if (slash)
			*slash = '\0';
		int fd = open_dir_beneath(dfd, seg, cross);
		if (fd == -ENOENT) {
			/* /root is private to its owner; the rest is a mount point. */
			mode_t mode = (seg == rel && strcmp(seg, "root") == 0) ? 0700 : 0755;
			int r = as_owner(mk, plan->uid);
			if (r >= 0 && mkdirat(dfd, seg, mode) < 0 && errno != EEXIST)
				r = -errno;
			int back = as_owner(mk, 0);
			if (r >= 0)
				r = back;
			fd = r < 0 ? r : open_dir_beneath(dfd, seg, cross);
		}
		if (fd == -ELOOP || fd == -ENOTDIR || fd == -EXDEV)
			return al_error_set(
				err, fd,
				"cannot attach %s at /%s: /%s is not a directory "
				"of the sandbox's root (a symbolic link is not followed)",
				what, where, rel);
		if (fd < 0)
			return al_error_set_errno(err, fd, "cannot attach %s at /%s", what, where);
		close(dfd);
		dfd = fd;
		if (!slash)
			break;
		*slash = '/';
		seg = slash + 1;
	}
	if (sys_move_mount(tree_fd, "", dfd, "",
			   MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return al_error_set_errno(err, -errno, "cannot attach %s at /%s", what, where);
	return 0;
}

/*
 * The overlay's options name its layers relative to the private tmpfs (the
 * caller's working directory): /proc/self/mountinfo shows them as given,
 * and the sandbox must not learn where its state directory is.
 */
static int mount_layer(const struct sbx_rootfs_plan *plan, const struct layer *l, int userns_fd,
		       struct al_error *err)
{
	char staged[SBX_PATH_MAX], target[SBX_PATH_MAX], opts[3 * SBX_PATH_MAX + 128];
	if (fmt(staged, sizeof(staged), "lower/%s", l->name) < 0 ||
	    fmt(target, sizeof(target), "%s%s%s", plan->root, *l->target ? "/" : "", l->target) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	if (mkdir(staged, 0700) < 0 && errno != EEXIST)
		return al_error_set_errno(err, -errno, "mkdir %s", staged);
	int r = attach_tree(l->fd, staged, err);
	if (r < 0)
		return r;
	if (fmt(opts, sizeof(opts),
		"lowerdir=%s,upperdir=upper/%s,workdir=work/%s,redirect_dir=off,metacopy=off,"
		"index=off,xino=off,volatile",
		staged, l->name, l->name) < 0)
		return al_error_set(err, -ENAMETOOLONG, "overlay options too long");
	if (mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
		return al_error_set_errno(err, -errno, "cannot mount overlay on /%s", l->target);
	/* The staged lower layer stays attached where the sandbox cannot see
	 * it; it goes with the old root, all in one detach (each unmount
	 * waits for an RCU grace period). */
	return 0;
}

int sbx_mount_tree_overlay(uint32_t uid, const char *target, const char *lowers, const char *layer)
{
	return sbx_mount_tree_overlay_as(uid, uid, target, lowers, layer);
}

int sbx_mount_tree_overlay_as(uint32_t uid, uint32_t gid, const char *target, const char *lowers,
			      const char *layer)
{
	char opts[1024];
	int n = snprintf(opts, sizeof(opts),
			 "lowerdir=%s,upperdir=%s/upper,workdir=%s/work,redirect_dir=off,"
			 "metacopy=off,index=off,xino=off,volatile",
			 lowers, layer, layer);
	if (n < 0 || (size_t)n >= sizeof(opts))
		return -ENAMETOOLONG;
	/*
	 * The overlay does its work in the layer (its work directory, copies
	 * up, whiteouts) with its mounter's credentials, and the layer's idmap
	 * names no id but the sandbox's root: mounted as that id (with the
	 * capabilities a change of filesystem id clears raised again), what it
	 * makes there is the owner's on disk.
	 */
	syscall(SYS_setfsuid, uid);
	syscall(SYS_setfsgid, gid);
	int r = 0;
	if ((uint32_t)syscall(SYS_setfsuid, -1) != uid ||
	    (uint32_t)syscall(SYS_setfsgid, -1) != gid)
		r = -EIO;
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct caps[2];
	if (r >= 0 && syscall(SYS_capget, &hdr, caps) < 0)
		r = -errno;
	for (size_t i = 0; r >= 0 && i < 2; i++)
		caps[i].effective = caps[i].permitted;
	if (r >= 0 && syscall(SYS_capset, &hdr, caps) < 0)
		r = -errno;
	if (r >= 0 && mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
		r = -errno;
	/* Back to root's ids (which brings the capabilities back too). */
	syscall(SYS_setfsuid, 0);
	syscall(SYS_setfsgid, 0);
	if ((uint32_t)syscall(SYS_setfsuid, -1) != 0 || (uint32_t)syscall(SYS_setfsgid, -1) != 0)
		return r < 0 ? r : -EIO;
	return r;
}

/*
 * The layered tree: the overlay of its lower directory and its layer,
 * mounted at "tree" in the private tmpfs (the working directory) with its
 * layers named relative to it, as mount_layer's. /workspace is its
 * workspace/; the home, its home/. *ret_home: a detached clone of the
 * latter for attach_at, or -1.
 */
static int mount_tree(const struct sbx_rootfs_plan *plan, struct maker *mk, int *ret_home,
		      struct al_error *err)
{
	*ret_home = -1;
	if (mkdir("lower/tree-lower", 0700) < 0 || mkdir("lower/tree-layer", 0700) < 0)
		return al_error_set_errno(err, -errno, "cannot stage the layered tree");
	int r = attach_tree(plan->lower_fd, "lower/tree-lower", err);
	if (r >= 0)
		r = attach_tree(plan->layer_fd, "lower/tree-layer", err);
	/* The closed layers over the lower, newest first. */
	char lowers[SBX_LOWERS_MAX * 16 + 32] = "";
	for (size_t i = 0; r >= 0 && i < plan->n_closed; i++) {
		char name[32];
		snprintf(name, sizeof(name), "lower/tree-c%zu", i);
		if (mkdir(name, 0700) < 0)
			return al_error_set_errno(err, -errno, "cannot stage the layered tree");
		r = attach_tree(plan->closed_fds[i], name, err);
		size_t len = strlen(lowers);
		snprintf(lowers + len, sizeof(lowers) - len, "%s:", name);
	}
	if (r < 0)
		return r;
	size_t len = strlen(lowers);
	snprintf(lowers + len, sizeof(lowers) - len, "lower/tree-lower");
	r = as_owner(mk, 0);
	if (r >= 0)
		r = sbx_mount_tree_overlay_as(plan->uid + plan->user.uid,
					      plan->uid + plan->user.gid, "tree", lowers,
					      "lower/tree-layer");
	if (r < 0)
		return al_error_set_errno(err, r, "cannot mount the layered workspace");
	char path[SBX_PATH_MAX];
	if (fmt(path, sizeof(path), "%s/workspace", plan->root) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	/* Its own entries, not links: a clone of each, attached. */
	int fd = sys_open_tree(AT_FDCWD, "tree/workspace",
			       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
	if (fd < 0)
		return al_error_set_errno(err, -errno, "cannot take the layered workspace");
	r = attach_tree(fd, path, err);
	close(fd);
	if (r < 0)
		return r;
	if (plan->home_rel[0]) {
		fd = sys_open_tree(AT_FDCWD, "tree/home",
				   OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
		if (fd < 0)
			return al_error_set_errno(err, -errno, "cannot take the layered home");
		*ret_home = fd;
	}
	return 0;
}

static int mount_dev(const char *root, uint32_t uid, struct al_error *err)
{
	char dev[SBX_PATH_MAX], opts[128];
	if (fmt(dev, sizeof(dev), "%s/dev", root) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	snprintf(opts, sizeof(opts), "mode=755,size=64k,nr_inodes=64,uid=%u,gid=%u", uid, uid);
	if (mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, opts) < 0)
		return al_error_set_errno(err, -errno, "mount /dev");
	_cleanup_close_ int dfd = open(dev, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return al_error_set_errno(err, -errno, "open /dev");
	static const struct {
		const char *name;
		unsigned major, minor;
	} nodes[] = {
		{ "null", 1, 3 },   { "zero", 1, 5 },	 { "full", 1, 7 },
		{ "random", 1, 8 }, { "urandom", 1, 9 }, { "tty", 5, 0 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(nodes); i++) {
		/* (umask 0: the mode is exact; making a device needs root's ids) */
		if (mknodat(dfd, nodes[i].name, S_IFCHR | 0666,
			    makedev(nodes[i].major, nodes[i].minor)) < 0 ||
		    fchownat(dfd, nodes[i].name, uid, uid, 0) < 0)
			return al_error_set_errno(err, -errno, "cannot create /dev/%s",
						  nodes[i].name);
	}
	static const struct {
		const char *name, *target;
	} links[] = {
		{ "fd", "/proc/self/fd" },	 { "stdin", "/proc/self/fd/0" },
		{ "stdout", "/proc/self/fd/1" }, { "stderr", "/proc/self/fd/2" },
		{ "ptmx", "pts/ptmx" },		 { "core", "/proc/kcore" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(links); i++)
		if (symlinkat(links[i].target, dfd, links[i].name) < 0)
			return al_error_set_errno(err, -errno, "cannot link /dev/%s",
						  links[i].name);
	if (mkdirat(dfd, "pts", 0755) < 0 || mkdirat(dfd, "shm", 01777) < 0)
		return al_error_set_errno(err, -errno, "cannot create /dev directories");
	char path[SBX_PATH_MAX];
	if (fmt(path, sizeof(path), "%s/pts", dev) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	snprintf(opts, sizeof(opts), "newinstance,ptmxmode=0666,mode=620,gid=%u", uid + 5);
	if (mount("devpts", path, "devpts", MS_NOSUID | MS_NOEXEC, opts) < 0)
		return al_error_set_errno(err, -errno, "mount /dev/pts");
	if (fmt(path, sizeof(path), "%s/shm", dev) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	snprintf(opts, sizeof(opts), "mode=1777,size=256m,uid=%u,gid=%u", uid, uid);
	if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return al_error_set_errno(err, -errno, "mount /dev/shm");
	/* Device nodes exist; nothing more may be created or reinterpreted. */
	if (mount(NULL, dev, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, opts) < 0 &&
	    mount(NULL, dev, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) <
		    0)
		return al_error_set_errno(err, -errno, "remount /dev read-only");
	return 0;
}

int sbx_rootfs_mount_proc(const char *root, struct al_error *err)
{
	char proc[SBX_PATH_MAX];
	if (fmt(proc, sizeof(proc), "%s/proc", root) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	if (mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return al_error_set_errno(err, -errno, "mount /proc");
	/* Kernel-wide knobs and information: read-only or hidden. Whatever
	 * this kernel lacks is skipped (ENOENT), without a look beforehand. */
	static const char *const ro[] = { "sys", "sysrq-trigger", "irq", "bus", "fs" };
	for (size_t i = 0; i < ARRAY_SIZE(ro); i++) {
		char p[SBX_PATH_MAX];
		if (fmt(p, sizeof(p), "%s/%s", proc, ro[i]) < 0)
			return al_error_set(err, -ENAMETOOLONG, "path too long");
		if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0) {
			if (errno == ENOENT)
				continue;
			return al_error_set_errno(err, -errno, "cannot make /proc/%s read-only",
						  ro[i]);
		}
		if (mount(NULL, p, NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  NULL) < 0)
			return al_error_set_errno(err, -errno, "cannot make /proc/%s read-only",
						  ro[i]);
	}
	char devnull[SBX_PATH_MAX];
	if (fmt(devnull, sizeof(devnull), "%s/dev/null", root) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	static const char *const hidden_files[] = { "kcore",	   "keys",	    "timer_list",
						    "sched_debug", "latency_stats", "kallsyms",
						    "kpagecount",  "kpageflags",    "kpagecgroup" };
	for (size_t i = 0; i < ARRAY_SIZE(hidden_files); i++) {
		char p[SBX_PATH_MAX];
		if (fmt(p, sizeof(p), "%s/%s", proc, hidden_files[i]) < 0)
			return al_error_set(err, -ENAMETOOLONG, "path too long");
		if (mount(devnull, p, NULL, MS_BIND, NULL) < 0 && errno != ENOENT)
			return al_error_set_errno(err, -errno, "cannot hide /proc/%s",
						  hidden_files[i]);
	}
	static const char *const hidden_dirs[] = { "sysvipc", "acpi", "scsi", "asound" };
	for (size_t i = 0; i < ARRAY_SIZE(hidden_dirs); i++) {
		char p[SBX_PATH_MAX];
		if (fmt(p, sizeof(p), "%s/%s", proc, hidden_dirs[i]) < 0)
			return al_error_set(err, -ENAMETOOLONG, "path too long");
		if (mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=0,mode=555") < 0 &&
		    errno != ENOENT)
			return al_error_set_errno(err, -errno, "cannot hide /proc/%s",
						  hidden_dirs[i]);
	}
	return 0;
}

int sbx_rootfs_mount(const struct sbx_rootfs_plan *plan, int userns_fd, int ws_userns_fd,
		     struct al_error *err)
{
	/* Nothing we mount may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return al_error_set_errno(err, -errno, "cannot make mounts private");
	char opts0[96] = "mode=0700";
	if (plan->state_size)
		snprintf(opts0, sizeof(opts0), "mode=0700,size=%" PRIu64, plan->state_size);
	if (mount("tmpfs", plan->mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts0) < 0)
		return al_error_set_errno(err, -errno, "cannot mount the sandbox's tmpfs");
	/* Exact modes, and entries made with their owner's ids (struct maker):
	 * no chmod or chown for most of them. The command gets its umask
	 * back below. */
	mode_t old_umask = umask(0);
	struct maker mk = { .fsid = 0 };
	int rb = build_tree(&mk, plan, err);
	if (rb < 0)
		return rb;
	rb = as_owner(&mk, 0);
	if (rb < 0)
		return al_error_set_errno(err, rb, "cannot take root's ids back");
	if (mount(plan->root, plan->root, NULL, MS_BIND, NULL) < 0)
		return al_error_set_errno(err, -errno, "cannot bind %s", plan->root);
	if (mount(NULL, plan->root, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
		return al_error_set_errno(err, -errno, "cannot remount %s", plan->root);

	/* Overlay layers are named relative to the tmpfs (see mount_layer). */
	if (chdir(plan->mnt) < 0)
		return al_error_set_errno(err, -errno, "chdir %s", plan->mnt);
	for (size_t i = 0; i < plan->n_layers; i++) {
		int r = mount_layer(plan, &plan->layers[i], userns_fd, err);
		if (r < 0)
			return r;
	}

	char path[SBX_PATH_MAX], opts[128];
	if (fmt(path, sizeof(path), "%s/tmp", plan->root) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	snprintf(opts, sizeof(opts), "mode=1777,size=%" PRIu64 ",uid=%u,gid=%u", plan->tmp_size,
		 plan->uid, plan->uid);
	if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return al_error_set_errno(err, -errno, "mount /tmp");

	int r = mount_dev(plan->root, plan->uid, err);
	if (r < 0)
		return r;
	r = sbx_rootfs_mount_proc(plan->root, err);
	if (r < 0)
		return r;

	if (fmt(path, sizeof(path), "%s/workspace", plan->root) < 0)
		return al_error_set(err, -ENAMETOOLONG, "path too long");
	if (plan->lower_fd >= 0) {
		int home = -1;
		r = mount_tree(plan, &mk, &home, err);
		if (r >= 0 && home >= 0)
			r = attach_at(plan, &mk, home, plan->home_rel, "the home", false, err);
		safe_close(home);
		if (r < 0)
			return r;
	} else if (plan->ws_fd >= 0) {
		r = attach_tree(plan->ws_fd, path, err);
		if (r < 0)
			return r;
	} else {
		/* The fresh workspace, in our own tmpfs. */
		if (mount(plan->workspace, path, NULL, MS_BIND, NULL) < 0 ||
		    mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
			return al_error_set_errno(err, -errno, "cannot bind the workspace");
	}
	if (plan->home_fd >= 0) {
		r = attach_at(plan, &mk, plan->home_fd, plan->home_rel, "the home", false, err);
		if (r < 0)
			return r;
	}
	if (plan->tools_fd >= 0) {
		/* /opt is one of the image's own overlays: crossed, never a link. */
		r = attach_at(plan, &mk, plan->tools_fd, &SBX_TOOLS_PATH[1], "the tools directory",
			      true, err);
		if (r < 0)
			return r;
	}

	/* Switch to the new root; the old one is detached entirely. */
	if (chdir(plan->root) < 0)
		return al_error_set_errno(err, -errno, "chdir %s", plan->root);
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return al_error_set_errno(err, -errno, "pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		return al_error_set_errno(err, -errno, "cannot detach the host root");
	if (chdir("/") < 0)
		return al_error_set_errno(err, -errno, "chdir /");
	umask(old_umask);
	return 0;
}

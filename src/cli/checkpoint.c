/* SPDX-License-Identifier: Apache-2.0 */
/* `airlock checkpoint`: workspace checkpoints for operators and tests. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/doc.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/error.h"
#include "common/fdutil.h"
#include "common/log.h"
#include "common/parse.h"
#include "common/rmtree.h"
#include "store/archive.h"
#include "store/checkpoint.h"
#include "store/gc.h"

#define DEFAULT_STORE "/var/lib/airlock/store"
#define DEFAULT_KEY "/var/lib/airlock/checkpoint.key"

static const char usage[] =
	"usage: airlock checkpoint create --workspace DIR [--session S] [--full]   prints the id\n"
	"                                      (--full: the whole tree, not a delta over the\n"
	"                                      session's latest)\n"
	"       airlock checkpoint create --upper DIR --lower ID [--userxattr] [--session S]\n"
	"                                      (an overlayfs upper layer over checkpoint ID;\n"
	"                                      --userxattr: the mount's option of that name)\n"
	"                                      both: [--json] [--max-bytes SIZE] [--max-files N]\n"
	"                                      [--max-depth N] (refused before reading past them;\n"
	"                                      a file's holes count)\n"
	"       airlock checkpoint restore ID --to DIR [--owner USER[:GROUP]] [--force]\n"
	"                                      [--max-bytes SIZE] [--max-files N] [--max-depth N]\n"
	"                                      (--force: DIR may hold a tree, replaced in one\n"
	"                                      rename once the restore is whole; its mode and\n"
	"                                      owner stay)\n"
	"                                      (--owner: every entry, DIR too, is USER's; names or\n"
	"                                      numbers; USER alone: with USER's primary group)\n"
	"       airlock checkpoint diff A B [--names-only | --json]\n"
	"       airlock checkpoint ls ID [--json]\n"
	"       airlock checkpoint latest [--session S] [--json]\n"
	"       airlock checkpoint log [--session S] [--json]   the session's checkpoints,\n"
	"                                      newest first, with when the session took\n"
	"                                      each (made, or adopted by a fork)\n"
	"       airlock checkpoint adopt ID --session S [--json]   (a fork: S starts from\n"
	"                                      checkpoint ID)\n"
	"       airlock checkpoint gc [--keep-last K] [--keep-days N] [--max-unused PCT]\n"
	"                                      [--dry-run] [--json]   (PCT: rewrite packs\n"
	"                                      more unused; 10)\n"
	"       airlock checkpoint export ID -o FILE.tar   (-o -: standard output)\n"
	"       airlock checkpoint import FILE.tar [--session S] [--max-bytes SIZE]\n"
	"                                      [--max-files N] [--max-depth N] [--json]\n"
	"                                      prints the id\n"
	"--json: what the command prints, as one JSON value (docs/checkpoints.md)\n"
	"An ID may be given as a unique prefix of at least 4 of its hex digits.\n"
	"\noptions:\n";
static const char usage_env[] =
	"\nenvironment:\n"
	"  AIRLOCK_STORE_THREADS=N  `create` and `restore` use N threads\n"
	"                           (default: one per CPU; 1: no extra thread)\n";

enum {
	OPT_STORE = 256,
	OPT_TENANT,
	OPT_KEY,
	OPT_WORKSPACE,
	OPT_UPPER,
	OPT_LOWER,
	OPT_USERXATTR,
	OPT_SESSION,
	OPT_TO,
	OPT_MAX_BYTES,
	OPT_MAX_FILES,
	OPT_MAX_DEPTH,
	OPT_NAMES_ONLY,
	OPT_OWNER,
	OPT_FULL,
	OPT_KEEP_LAST,
	OPT_KEEP_DAYS,
	OPT_MAX_UNUSED,
	OPT_DRY_RUN,
	OPT_FORCE,
	OPT_JSON,
	OPT_HELP,
	OPT_OUTPUT = 'o',
};

/* Every subcommand parses them all; one that does not apply is refused
 * after parsing (cmd_checkpoint). */
static const struct cli_optdef checkpoint_optdefs[] = {
	{ "store", OPT_STORE, "DIR",
	  "the object store (default $AIRLOCK_STORE_DIR or\n" DEFAULT_STORE ")" },
	{ "tenant", OPT_TENANT, "T", "the tenant (default: default)" },
	{ "key", OPT_KEY, "FILE",
	  "the manifests' HMAC key (default $AIRLOCK_CHECKPOINT_KEY or\n" DEFAULT_KEY
	  "; `create` makes it when absent)" },
	{ "workspace", OPT_WORKSPACE, "DIR", "(create) the tree to checkpoint" },
	{ "upper", OPT_UPPER, "DIR", "(create) an overlayfs upper layer over checkpoint --lower" },
	{ "lower", OPT_LOWER, "ID", "(create) the checkpoint under --upper" },
	{ "userxattr", OPT_USERXATTR, NULL, "(create) the upper layer's mount had that option" },
	{ "session", OPT_SESSION, "S", "the session (default: default)" },
	{ "to", OPT_TO, "DIR", "(restore) where the tree goes" },
	{ "max-bytes", OPT_MAX_BYTES, "SIZE",
	  "(create, restore, import) refused before reading past SIZE\n"
	  "bytes (a file's holes count)" },
	{ "max-files", OPT_MAX_FILES, "N", "(create, restore, import) at most N entries" },
	{ "max-depth", OPT_MAX_DEPTH, "N", "(create, restore, import) at most N levels deep" },
	{ "names-only", OPT_NAMES_ONLY, NULL, "(diff) the A/D/M lines alone" },
	{ "owner", OPT_OWNER, "USER[:GROUP]",
	  "(restore) every entry, DIR too, is USER's; names or\n"
	  "numbers; USER alone: with USER's primary group" },
	{ "full", OPT_FULL, NULL,
	  "(create) the whole tree, not a delta over the session's latest" },
	{ "keep-last", OPT_KEEP_LAST, "K", "(gc) keep each session's last K checkpoints" },
	{ "keep-days", OPT_KEEP_DAYS, "N", "(gc) keep the checkpoints of the last N days" },
	{ "max-unused", OPT_MAX_UNUSED, "PCT",
	  "(gc) rewrite the packs more than PCT percent unused (10)" },
	{ "dry-run", OPT_DRY_RUN, NULL, "(gc) count what would go, delete nothing" },
	{ "force", OPT_FORCE, NULL,
	  "(restore) DIR may hold a tree, replaced in one rename once\n"
	  "the restore is whole; its mode and owner stay" },
	{ "json", OPT_JSON, NULL, "(log) JSON lines" },
	{ "output", OPT_OUTPUT, "FILE",
	  "(export; also -o FILE) the tar file (-: standard output)" },
	{ "help", OPT_HELP, NULL, "print this and exit" },
	{ NULL, 0, NULL, NULL },
};

static void checkpoint_usage(FILE *f)
{
	fputs(usage, f);
	cli_print_optdefs(f, checkpoint_optdefs);
	fputs(usage_env, f);
}

struct copts {
	const char *store, *tenant, *key, *workspace, *upper, *lower, *session, *to, *owner;
	const char *output;
	struct st_manifest_limits limits;
	bool names_only, userxattr, full, force, json;
	struct st_gc_opts gc;
	char ids[2][ST_ID_HEX + 1], lower_id[ST_ID_HEX + 1]; /* as resolved */
	bool gc_given;					     /* one of gc's own options */
	char **args;
	int n_args;
};

static int parse(int argc, char **argv, struct copts *o)
{
	struct option longopts[32];
	cli_longopts(longopts, ARRAY_SIZE(longopts), 0, checkpoint_optdefs);
	const char *env;
	o->store = (env = getenv("AIRLOCK_STORE_DIR")) && *env ? env : DEFAULT_STORE;
	o->key = (env = getenv("AIRLOCK_CHECKPOINT_KEY")) && *env ? env : DEFAULT_KEY;
	o->tenant = "default";
	o->session = "default";
	o->gc = (struct st_gc_opts){ .repack = true, .max_unused_pct = ST_GC_MAX_UNUSED_DEFAULT };
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "o:", longopts, NULL)) != -1) {
		uint64_t v;
		switch (c) {
		case OPT_STORE:
			o->store = optarg;
			break;
		case OPT_TENANT:
			o->tenant = optarg;
			break;
		case OPT_KEY:
			o->key = optarg;
			break;
		case OPT_WORKSPACE:
			o->workspace = optarg;
			break;
		case OPT_UPPER:
			o->upper = optarg;
			break;
		case OPT_LOWER:
			o->lower = optarg;
			break;
		case OPT_USERXATTR:
			o->userxattr = true;
			break;
		case OPT_SESSION:
			o->session = optarg;
			break;
		case OPT_TO:
			o->to = optarg;
			break;
		case OPT_MAX_BYTES:
			if (parse_size(optarg, &v) < 0 || v == 0)
				return cli_fail("--max-bytes wants a size such as 10G, not '%s'",
						optarg);
			o->limits.max_bytes = v;
			break;
		case OPT_MAX_FILES:
			if (parse_u64(optarg, &v) < 0 || v == 0 || v > 100000000)
				return cli_fail("--max-files wants a count, not '%s'", optarg);
			o->limits.max_entries = (size_t)v;
			break;
		case OPT_MAX_DEPTH:
			if (parse_u64(optarg, &v) < 0 || v == 0 || v > 4096)
				return cli_fail("--max-depth wants a count, not '%s'", optarg);
			o->limits.max_depth = (size_t)v;
			break;
		case OPT_NAMES_ONLY:
			o->names_only = true;
			break;
		case OPT_OWNER:
			o->owner = optarg;
			break;
		case OPT_FULL:
			o->full = true;
			break;
		case OPT_KEEP_LAST:
		case OPT_KEEP_DAYS:
			if (parse_u64(optarg, &v) < 0 || v > 1000000)
				return cli_fail("--keep-%s wants a count, not '%s'",
						c == OPT_KEEP_LAST ? "last" : "days", optarg);
			*(c == OPT_KEEP_LAST ? &o->gc.keep_last : &o->gc.keep_days) = (unsigned)v;
			o->gc_given = true;
			break;
		case OPT_MAX_UNUSED:
			if (parse_u64(optarg, &v) < 0 || v > 100)
				return cli_fail(
					"--max-unused wants a percentage from 0 to 100, not '%s'",
					optarg);
			o->gc.max_unused_pct = (unsigned)v;
			o->gc_given = true;
			break;
		case OPT_DRY_RUN:
			o->gc.dry_run = true;
			o->gc_given = true;
			break;
		case OPT_FORCE:
			o->force = true;
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_OUTPUT:
			if (o->output)
				return cli_fail("-o (--output) may be given once");
			o->output = optarg;
			break;
		case OPT_HELP:
			checkpoint_usage(stdout);
			return CLI_HELP_SHOWN;
		default:
			return cli_bad_option(argv, longopts, "checkpoint");
		}
	}
	o->args = argv + optind;
	o->n_args = argc - optind;
	return 0;
}

static int open_repo(const struct copts *o, bool create_key, struct st_repo **ret)
{
	struct al_error err = { 0 };
	uint8_t *key = NULL;
	size_t keylen = 0;
	int r = st_key_load(o->key, create_key, &key, &keylen, &err);
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	struct st_repo_opts ro = { .store_dir = o->store,
				   .tenant = o->tenant,
				   .key = key,
				   .keylen = keylen,
				   .fault_step = st_fault_step_from_env() };
	r = st_repo_open(&ro, ret, &err);
	explicit_bzero(key, keylen);
	free(key);
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	return 0;
}

/* The first n arguments and --lower, ids as typed (unique prefixes too),
 * made whole; 0 or an exit status after a message. */
static int resolve_ids(struct st_repo *r, struct copts *o, int n)
{
	struct al_error err = { 0 };
	for (int i = 0; i < n && i < o->n_args && i < 2; i++) {
		if (st_checkpoint_resolve(r, o->args[i], o->ids[i], &err) < 0)
			return cli_fail("%s", al_error_message(&err));
		o->args[i] = o->ids[i];
	}
	if (o->lower) {
		if (st_checkpoint_resolve(r, o->lower, o->lower_id, &err) < 0)
			return cli_fail("--lower: %s", al_error_message(&err));
		o->lower = o->lower_id;
	}
	return 0;
}

static int resolve_id(struct st_repo *r, const char *typed, char out[ST_ID_HEX + 1])
{
	struct al_error err = { 0 };
	if (st_checkpoint_resolve(r, typed, out, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	return 0;
}

/* Paths as they are, but control bytes and backslashes escaped. */
static void put_path(FILE *f, const char *p)
{
	for (const unsigned char *c = (const unsigned char *)p; *c; c++) {
		if (*c < 0x20 || *c == 0x7f || *c == '\\')
			fprintf(f, "\\x%02x", *c);
		else
			fputc(*c, f);
	}
}

static void report(const char *path, const char *what, void *ud)
{
	fputs("airlock: ", stderr);
	put_path(stderr, path);
	fprintf(stderr, ": %s\n", what);
}

static int do_create(struct copts *o)
{
	if (o->n_args != 0 || !o->workspace == !o->upper || !o->upper != !o->lower ||
	    (o->userxattr && !o->upper) || (o->full && o->upper))
		return cli_fail("usage: airlock checkpoint create (--workspace DIR | --upper DIR "
				"--lower ID) [--session S]");
	struct st_repo *r = NULL;
	int rc = open_repo(o, true, &r);
	if (rc)
		return rc;
	rc = resolve_ids(r, o, 0);
	if (rc) {
		st_repo_close(r);
		return rc;
	}
	struct st_snapshot_opts so = { .workspace = o->workspace,
				       .upper = o->upper,
				       .lower = o->lower,
				       .userxattr = o->userxattr,
				       .full = o->full,
				       .session = o->session,
				       .report = report,
				       .limits = &o->limits };
	struct st_snapshot_result res;
	struct al_error err = { 0 };
	rc = st_snapshot(r, &so, &res, &err);
	st_repo_close(r);
	if (rc < 0)
		return cli_fail("%s", al_error_message(&err));
	if (o->json)
		printf("{\"id\":\"%s\",\"files\":%" PRIu64 ",\"files_read\":%" PRIu64
		       ",\"files_unchanged\":%" PRIu64 ",\"dirs\":%" PRIu64 ",\"symlinks\":%" PRIu64
		       ",\"skipped\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"chunks_new\":%" PRIu64
		       ",\"bytes_new\":%" PRIu64 "}\n",
		       res.id, res.files, res.files_read, res.files_reused, res.dirs, res.symlinks,
		       res.skipped, res.bytes, res.chunks_new, res.bytes_new);
	else
		printf("%s\n", res.id);
	fprintf(stderr,
		"airlock: %" PRIu64 " files (%" PRIu64 " read, %" PRIu64 " unchanged), %" PRIu64
		" directories, %" PRIu64 " symlinks, %" PRIu64 " skipped; %" PRIu64
		" bytes, %" PRIu64 " new chunks (%" PRIu64 " bytes)\n",
		res.files, res.files_read, res.files_reused, res.dirs, res.symlinks, res.skipped,
		res.bytes, res.chunks_new, res.bytes_new);
	return 0;
}

/* An id as digits alone: below (uint32_t)-1, which chown reads as "none". */
static bool owner_number(const char *s, uint32_t *ret)
{
	uint64_t v;
	if (!*s || strspn(s, "0123456789") != strlen(s) || parse_u64(s, &v) < 0 || v >= UINT32_MAX)
		return false;
	*ret = (uint32_t)v;
	return true;
}

/* A user by name or number; *ret_gid its primary group. */
static int owner_user(const char *user, uint32_t *ret_uid, uint32_t *ret_gid, bool *ret_known)
{
	char buf[16384];
	struct passwd pw, *found = NULL;
	uint32_t uid;
	bool numeric = owner_number(user, &uid);
	int e = numeric ? getpwuid_r(uid, &pw, buf, sizeof(buf), &found) :
			  getpwnam_r(user, &pw, buf, sizeof(buf), &found);
	*ret_known = found != NULL;
	if (found) {
		*ret_uid = (uint32_t)pw.pw_uid;
		*ret_gid = (uint32_t)pw.pw_gid;
		return 0;
	}
	if (numeric) {
		*ret_uid = uid;
		return 0;
	}
	if (e != 0)
		return cli_fail("cannot look up user %s: %s", user, al_strerror(e));
	return cli_fail("--owner: no user %s", user);
}

/* --owner USER[:GROUP]; names or numbers; USER alone: its primary group. */
static int parse_owner(const char *arg, struct st_restore_opts *ro)
{
	char spec[256];
	if (strlen(arg) >= sizeof(spec))
		return cli_fail("--owner wants USER[:GROUP]");
	memcpy(spec, arg, strlen(arg) + 1);
	char *group = strchr(spec, ':');
	if (group)
		*group++ = '\0';
	if (!*spec || (group && (!*group || strchr(group, ':'))))
		return cli_fail("--owner wants USER[:GROUP] (names or numbers), not '%s'", arg);
	bool known;
	uint32_t gid = 0;
	int rc = owner_user(spec, &ro->uid, &gid, &known);
	if (rc)
		return rc;
	if (!group) {
		if (!known)
			return cli_fail("--owner: user %s has no entry, so no primary group: give "
					"one (--owner %s:GROUP)",
					spec, spec);
		ro->gid = gid;
	} else if (!owner_number(group, &ro->gid)) {
		char buf[16384];
		struct group gr, *found = NULL;
		int e = getgrnam_r(group, &gr, buf, sizeof(buf), &found);
		if (!found)
			return e ? cli_fail("cannot look up group %s: %s", group, al_strerror(e)) :
				   cli_fail("--owner: no group %s", group);
		ro->gid = (uint32_t)gr.gr_gid;
	}
	if (ro->uid == (uint32_t)-1 || ro->gid == (uint32_t)-1)
		return cli_fail("--owner: %s is not an owner", arg);
	ro->chown = true;
	return 0;
}

/* The message for a caller's path open_no_symlinks refused or could not
 * open. */
static int path_fail(const char *what, const char *path, int r)
{
	if (r == -ELOOP)
		return cli_fail("%s %s: a symbolic link in the path is not followed (name the real "
				"path, with no link in any component)",
				what, path);
	return cli_fail("%s %s: %s", what, path, al_strerror(r));
}

/*
 * FILE is written whole or not at all: a temporary file beside it, renamed.
 * Its directory is opened once, following no link anywhere in the path (a
 * user who owns a directory on the way cannot send the file into one of
 * root's), and the temporary file is made (O_EXCL), renamed and synced
 * relative to that descriptor only.
 */
/* Whether dir (opened following no link) is a directory holding something
 * (1); 0 for anything else, which the restore itself then judges: absent,
 * empty, not a directory, a link on the way. */
static int dir_holds_something(const char *dir)
{
	int fd = open_no_symlinks(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_NOCTTY, 0);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	struct dirent *de;
	int full = 0;
	while (!full && (de = readdir(d)))
		full = strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return full;
}

/*
 * The directories earlier --force restores of base left beside it (a
 * signal stopped them): root's, 0700, named as restore_in_place names them,
 * and not locked by a restore still at work.
 */
static void remove_stale(int pfd, const char *base)
{
	char prefix[NAME_MAX + 2];
	int n = snprintf(prefix, sizeof(prefix), ".%.64s.restore-", base);
	_cleanup_close_ int dfd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d)
		return;
	dfd = -1;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, prefix, (size_t)n) != 0 ||
		    strlen(de->d_name) != (size_t)n + 16)
			continue;
		_cleanup_close_ int fd = openat(dirfd(d), de->d_name,
						O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || st.st_uid != 0 ||
		    (st.st_mode & 07777) != 0700 || flock(fd, LOCK_EX | LOCK_NB) < 0)
			continue;
		rm_rf_at(dirfd(d), de->d_name);
	}
	closedir(d);
}

/*
 * restore --force into a directory that holds a tree: the checkpoint goes
 * into a new directory beside it, which takes the old one's mode (and
 * owner, without --owner), then the two are swapped in one rename and the
 * old tree removed. Until the swap, the old tree is as it was. The
 * directory they are in is opened once, following no link, and everything
 * is made, restored into, checked, swapped and removed through descriptors.
 * The new directory is locked while it is in use: one a signal left behind
 * is removed by the next --force of the same target.
 */
static int restore_in_place(struct st_repo *r, const char *id, const char *to,
			    struct st_restore_opts *ro)
{
	char base[NAME_MAX + 1];
	_cleanup_close_ int pfd = open_parent_no_symlinks(AT_FDCWD, to, base, sizeof(base), NULL);
	if (pfd == -EINVAL)
		return cli_fail("--to %s --force: name the directory by its path (not . or ..)",
				to);
	if (pfd < 0)
		return path_fail("cannot open the directory of", to, pfd);
	struct stat old, made, now;
	if (fstatat(pfd, base, &old, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(old.st_mode))
		return cli_fail("%s is not a directory", to);
	remove_stale(pfd, base);
	uint8_t rnd[8];
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return cli_fail("cannot make a name: %s", al_strerror(errno));
	char name[NAME_MAX + 1];
	snprintf(name, sizeof(name), ".%.64s.restore-%02x%02x%02x%02x%02x%02x%02x%02x", base,
		 rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	if (mkdirat(pfd, name, 0700) < 0)
		return cli_fail("cannot make a directory beside %s: %s", to, al_strerror(errno));
	_cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &made) < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		rm_rf_at(pfd, name);
		return cli_fail("cannot open the directory made beside %s: %s", to, al_strerror(e));
	}
	ro->at_fd = true;
	ro->dir_fd = fd;
	struct al_error err = { 0 };
	int rc = st_restore_with(r, id, to, ro, &err);
	if (rc < 0) {
		rm_rf_at(pfd, name);
		return cli_fail("%s (%s is as it was)", al_error_message(&err), to);
	}
	/* The names still the directories they were (nobody moved them). */
	if (fstatat(pfd, name, &now, AT_SYMLINK_NOFOLLOW) < 0 || now.st_ino != made.st_ino ||
	    now.st_dev != made.st_dev || fstatat(pfd, base, &now, AT_SYMLINK_NOFOLLOW) < 0 ||
	    now.st_ino != old.st_ino || now.st_dev != old.st_dev) {
		rm_rf_at(pfd, name);
		return cli_fail("%s or the restore beside it was moved while it was made: nothing "
				"replaced",
				to);
	}
	if (fchmod(fd, old.st_mode & 07777) < 0 ||
	    (!ro->chown && geteuid() == 0 && fchown(fd, old.st_uid, old.st_gid) < 0)) {
		int e = errno;
		rm_rf_at(pfd, name);
		return cli_fail("cannot give the restored tree %s's mode and owner: %s (%s is as "
				"it was)",
				to, al_strerror(e), to);
	}
	if (syscall(SYS_renameat2, pfd, name, pfd, base, RENAME_EXCHANGE) < 0) {
		int e = errno;
		rm_rf_at(pfd, name);
		return cli_fail("cannot put the restored tree in the place of %s: %s (%s is as it "
				"was)",
				to, al_strerror(e), to);
	}
	rc = rm_rf_at(pfd, name);
	if (rc < 0)
		log_warning("restored into %s; the old tree is left beside it as %s: %s", to, name,
			    al_strerror(rc));
	return 0;
}

static int do_restore(struct copts *o)
{
	if (o->n_args != 1 || !o->to)
		return cli_fail("usage: airlock checkpoint restore ID --to DIR [--force]");
	struct st_restore_opts ro = { .limits = &o->limits };
	if (o->owner) {
		int rc = parse_owner(o->owner, &ro);
		if (rc)
			return rc;
	}
	bool empty = !dir_holds_something(o->to);
	if (!empty && !o->force)
		return cli_fail("%s is not empty (--force: replace what it holds, as one rename "
				"once the restore is whole)",
				o->to);
	struct st_repo *r = NULL;
	int rc = open_repo(o, false, &r);
	if (rc)
		return rc;
	char id[ST_ID_HEX + 1];
	rc = resolve_id(r, o->args[0], id);
	if (rc == 0 && !empty) {
		rc = restore_in_place(r, id, o->to, &ro);
	} else if (rc == 0) {
		struct al_error err = { 0 };
		if (st_restore_with(r, id, o->to, &ro, &err) < 0)
			rc = cli_fail("%s", al_error_message(&err));
	}
	st_repo_close(r);
	return rc;
}

/* The subcommands that take --json. */
static bool json_command(const char *sub)
{
	static const char *const with[] = { "create", "import", "ls",	 "diff",
					    "latest", "log",	"adopt", "gc" };
	for (size_t i = 0; i < sizeof(with) / sizeof(with[0]); i++)
		if (strcmp(sub, with[i]) == 0)
			return true;
	return false;
}

static const char *entry_type_name(enum st_entry_type t)
{
	return t == ST_DIR ? "dir" : t == ST_FILE ? "file" : "symlink";
}

/* One entry as `ls --json` gives it: type, path, mode, size, target. */
static void entry_json(FILE *f, const struct st_entry *e)
{
	fprintf(f, "{\"type\":\"%s\",", entry_type_name(e->type));
	cli_json_field(f, "path", e->path);
	if (e->type == ST_SYMLINK) {
		fputc(',', f);
		cli_json_field(f, "target", e->target);
	} else {
		fprintf(f, ",\"mode\":\"%04o\"", (unsigned)e->mode);
	}
	if (e->type == ST_FILE)
		fprintf(f, ",\"size\":%" PRIu64, e->size);
	fputc('}', f);
}

static void ls_json(const struct st_manifest *m)
{
	fputs("[", stdout);
	for (size_t i = 0; i < m->n_entries; i++) {
		if (i)
			fputc(',', stdout);
		entry_json(stdout, &m->entries[i]);
	}
	fputs("]\n", stdout);
}

struct diff_json {
	bool first;
};

/* {"change":"A","path":...,"before":null,"after":{entry}}: what was
 * there in A and is in B, as `ls --json` shows entries. */
static int diff_json_entry(char change, const struct st_entry *ea, const struct st_entry *eb,
			   void *ud)
{
	struct diff_json *d = ud;
	fprintf(stdout, "%s{\"change\":\"%c\",", d->first ? "" : ",", change);
	d->first = false;
	cli_json_field(stdout, "path", (eb ? eb : ea)->path);
	fputs(",\"before\":", stdout);
	if (ea)
		entry_json(stdout, ea);
	else
		fputs("null", stdout);
	fputs(",\"after\":", stdout);
	if (eb)
		entry_json(stdout, eb);
	else
		fputs("null", stdout);
	fputc('}', stdout);
	return ferror(stdout) ? -EIO : 0;
}

static int do_diff(struct copts *o)
{
	if (o->n_args != 2)
		return cli_fail("usage: airlock checkpoint diff A B");
	struct st_repo *r = NULL;
	int rc = open_repo(o, false, &r);
	if (rc)
		return rc;
	rc = resolve_ids(r, o, 2);
	if (rc) {
		st_repo_close(r);
		return rc;
	}
	if (o->json) {
		struct al_error err = { 0 };
		struct diff_json d = { .first = true };
		fputs("[", stdout);
		rc = st_diff_each(r, o->args[0], o->args[1], diff_json_entry, &d, &err);
		st_repo_close(r);
		if (rc < 0)
			return cli_fail("%s", err.code ? al_error_message(&err) : "cannot write");
		fputs("]\n", stdout);
		return fflush(stdout) == 0 ? 0 : cli_fail("cannot write");
	}
	struct buf out = BUF_INIT(1u << 30);
	struct al_error err = { 0 };
	rc = st_diff(r, o->args[0], o->args[1], !o->names_only, &out, &err);
	st_repo_close(r);
	if (rc == 0 && out.len)
		rc = write_full(1, out.data, out.len) < 0 ? -EIO : 0;
	buf_free(&out);
	return rc < 0 ? cli_fail("%s", rc == -EIO ? "cannot write" : al_error_message(&err)) : 0;
}

static int do_ls(struct copts *o)
{
	if (o->n_args != 1)
		return cli_fail("usage: airlock checkpoint ls ID");
	struct st_repo *r = NULL;
	int rc = open_repo(o, false, &r);
	if (rc)
		return rc;
	rc = resolve_ids(r, o, 1);
	if (rc) {
		st_repo_close(r);
		return rc;
	}
	struct st_manifest *m = NULL;
	struct al_error err = { 0 };
	rc = st_manifest_load(r, o->args[0], &o->limits, &m, &err);
	st_repo_close(r);
	if (rc < 0)
		return cli_fail("%s", al_error_message(&err));
	if (o->json) {
		ls_json(m);
		st_manifest_free(m);
		return fflush(stdout) == 0 ? 0 : cli_fail("cannot write");
	}
	for (size_t i = 0; i < m->n_entries; i++) {
		const struct st_entry *e = &m->entries[i];
		if (e->type == ST_DIR)
			printf("d %04o %12s ", (unsigned)e->mode, "-");
		else if (e->type == ST_FILE)
			printf("f %04o %12" PRIu64 " ", (unsigned)e->mode, e->size);
		else
			printf("l %4s %12s ", "-", "-");
		put_path(stdout, e->path);
		if (e->type == ST_SYMLINK) {
			fputs(" -> ", stdout);
			put_path(stdout, e->target);
		}
		fputc('\n', stdout);
	}
	st_manifest_free(m);
	return fflush(stdout) == 0 ? 0 : cli_fail("cannot write");
}

static int do_latest(struct copts *o)
{
	if (o->n_args != 0)
		return cli_fail("usage: airlock checkpoint latest [--session S]");
	struct st_repo *r = NULL;
	int rc = open_repo(o, false, &r);
	if (rc)
		return rc;
	char id[ST_ID_HEX + 1];
	struct al_error err = { 0 };
	rc = st_session_latest(r, o->session, id, &err);
	st_repo_close(r);
	if (rc < 0)
		return cli_fail("%s", al_error_message(&err));
	if (!id[0])
		return cli_fail("session %s has no checkpoint", o->session);
	if (o->json) {
		printf("{\"id\":\"%s\",", id);
		cli_json_field(stdout, "session", o->session);
		fputs("}\n", stdout);
	} else {
		printf("%s\n", id);
	}
	return 0;
}

struct log_list {
	char (*ids)[ST_ID_HEX + 1];
	int64_t *when;
	size_t n, cap;
};

static int on_log(const char *id, int64_t when_ns, void *ud)
{
	struct log_list *l = ud;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char(*ids)[ST_ID_HEX + 1] = realloc(l->ids, cap * sizeof(*ids));
		if (ids)
			l->ids = ids;
		int64_t *when = ids ? realloc(l->when, cap * sizeof(*when)) : NULL;
		if (!ids || !when)
			return -ENOMEM;
		l->when = when;
		l->cap = cap;
	}
	memcpy(l->ids[l->n], id, ST_ID_HEX + 1);
	l->when[l->n++] = when_ns;
	return 0;
}

/* `log --session S`: the session's checkpoints, newest first. */
static int do_log(struct copts *o)
{
	if (o->n_args != 0)
		return cli_fail("usage: airlock checkpoint log [--session S] [--json]");
	struct st_repo *r = NULL;
	int rc = open_repo(o, false, &r);
	if (rc)
		return rc;
	struct log_list l = { 0 };
	struct al_error err = { 0 };
	rc = st_session_log(r, o->session, on_log, &l, &err);
	st_repo_close(r);
	if (rc == -ENOMEM)
		rc = cli_fail("out of memory");
	else if (rc < 0)
		rc = cli_fail("%s", al_error_message(&err));
	if (rc == 0 && o->json)
		fputs("[", stdout);
	for (size_t i = l.n; rc == 0 && i-- > 0;) {
		time_t t = (time_t)(l.when[i] / 1000000000);
		struct tm tm;
		char when[32];
		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		if (o->json)
			printf("%s{\"id\":\"%s\",\"logged\":\"%s\",\"logged_ns\":%" PRId64 "}",
			       i + 1 == l.n ? "" : ",", l.ids[i], when, l.when[i]);
		else
			printf("%s  %s\n", l.ids[i], when);
	}
	if (rc == 0 && o->json)
		fputs("]\n", stdout);
	if (rc == 0 && !o->json && l.n == 0)
		log_warning("session %s has no checkpoints", o->session);
	free(l.ids);
	free(l.when);
	return rc;
}

/* A fork as sessions make one (st_session_adopt): the session's next
 * checkpoint follows ID. The operators' and the benchmark's way in. */
static int do_adopt(struct copts *o)
{
	if (o->n_args != 1)
		return cli_fail("usage: airlock checkpoint adopt ID --session S");
	struct st_repo *r = NULL;
	int rc = open_repo(o, false, &r);
	if (rc)
		return rc;
	rc = resolve_ids(r, o, 1);
	if (rc) {
		st_repo_close(r);
		return rc;
	}
	struct al_error err = { 0 };
	rc = st_session_adopt(r, o->session, o->args[0], &err);
	st_repo_close(r);
	if (rc < 0)
		return cli_fail("%s", al_error_message(&err));
	if (o->json) {
		printf("{\"id\":\"%s\",", o->args[0]);
		cli_json_field(stdout, "session", o->session);
		fputs("}\n", stdout);
	} else {
		printf("%s\n", o->args[0]);
	}
	return 0;
}

static int export_to_file(struct st_repo *r, const char *id, const char *file)
{
	char name[NAME_MAX + 1];
	bool dir_only = false;
	_cleanup_close_ int dfd =
		open_parent_no_symlinks(AT_FDCWD, file, name, sizeof(name), &dir_only);
	if (dfd < 0)
		return path_fail("cannot write", file, dfd);
	if (dir_only)
		return cli_fail("cannot write %s: names a directory", file);
	char tmp[NAME_MAX + 1];
	int fd = -1;
	for (int tries = 0; fd < 0 && tries < 16; tries++) {
		uint32_t rnd;
		if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return cli_fail("cannot make a temporary name: %s", al_strerror(errno));
		if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp-%08" PRIx32, name, rnd) >=
		    sizeof(tmp))
			return cli_fail(
				"cannot write %s: the name is too long for a temporary file "
				"beside it",
				file);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0)
		return cli_fail("cannot create a temporary file beside %s: %s", file,
				al_strerror(errno));
	struct al_error err = { 0 };
	int rc = st_export_tar(r, id, fd, &err);
	if (rc == 0 && fsync(fd) < 0)
		rc = al_error_set_errno(&err, -errno, "cannot write %s", file);
	if (close(fd) < 0 && rc == 0)
		rc = al_error_set_errno(&err, -errno, "cannot write %s", file);
	if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0)
		rc = al_error_set_errno(&err, -errno, "cannot rename %s to %s", tmp, file);
	if (rc < 0) {
		unlinkat(dfd, tmp, 0);
		return cli_fail("%s", al_error_message(&err));
	}
	/* The rename is durable once the directory is. */
	int sfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd >= 0) {
		(void)fsync(sfd);
		close(sfd);
	}
	return 0;
}

static int do_export(struct copts *o)
{
	const char *out = o->output;
	if (o->n_args != 1 || !out || !out[0])
		return cli_fail("usage: airlock checkpoint export ID -o FILE.tar");
	struct st_repo *r = NULL;
	int rc = open_repo(o, false, &r);
	if (rc)
		return rc;
	rc = resolve_ids(r, o, 1);
	if (rc) {
		st_repo_close(r);
		return rc;
	}
	if (strcmp(out, "-") == 0) {
		struct al_error err = { 0 };
		rc = st_export_tar(r, o->args[0], 1, &err);
		st_repo_close(r);
		return rc < 0 ? cli_fail("%s", al_error_message(&err)) : 0;
	}
	rc = export_to_file(r, o->args[0], out);
	st_repo_close(r);
	return rc;
}

static int do_import(struct copts *o)
{
	if (o->n_args != 1)
		return cli_fail("usage: airlock checkpoint import FILE.tar [--session S]");
	const char *file = o->args[0];
	/* No link followed anywhere in the path: a user who owns a directory
	 * on the way cannot swap in one to a file of root's. */
	_cleanup_close_ int fd = -1;
	if (strcmp(file, "-") == 0) {
		fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
		if (fd < 0)
			fd = -errno;
	} else
		fd = open_no_symlinks(AT_FDCWD, file, O_RDONLY | O_NOCTTY, 0);
	if (fd < 0)
		return path_fail("cannot read", file, fd);
	struct st_repo *r = NULL;
	int rc = open_repo(o, true, &r);
	if (rc)
		return rc;
	char id[ST_ID_HEX + 1];
	struct st_import_report rep;
	struct al_error err = { 0 };
	rc = st_import_tar(r, fd, o->session, &o->limits, id, &rep, &err);
	st_repo_close(r);
	if (rc < 0)
		return cli_fail("%s", al_error_message(&err));
	if (o->json)
		printf("{\"id\":\"%s\",\"files\":%" PRIu64 ",\"dirs\":%" PRIu64
		       ",\"implied_dirs\":%" PRIu64 ",\"symlinks\":%" PRIu64 ",\"bytes\":%" PRIu64
		       ",\"chunks_new\":%" PRIu64 ",\"bytes_new\":%" PRIu64 "}\n",
		       id, rep.files, rep.dirs, rep.implied_dirs, rep.symlinks, rep.bytes,
		       rep.chunks_new, rep.bytes_new);
	else
		printf("%s\n", id);
	fprintf(stderr,
		"airlock: %" PRIu64 " files, %" PRIu64 " directories (%" PRIu64
		" not in the archive), %" PRIu64 " symlinks; %" PRIu64 " bytes, %" PRIu64
		" new chunks (%" PRIu64 " bytes)\n",
		rep.files, rep.dirs, rep.implied_dirs, rep.symlinks, rep.bytes, rep.chunks_new,
		rep.bytes_new);
	return 0;
}

/* AIRLOCK_GC_NOW (unix seconds) stands in for the clock (tests). */
static int do_gc(struct copts *o)
{
	struct st_gc_opts go = o->gc;
	const char *now = getenv("AIRLOCK_GC_NOW");
	uint64_t v;
	if (now && *now) {
		if (parse_u64(now, &v) < 0 || v > (uint64_t)INT64_MAX)
			return cli_fail("AIRLOCK_GC_NOW wants unix seconds, not '%s'", now);
		go.now = (int64_t)v;
	}
	if (o->n_args != 0)
		return cli_fail("usage: airlock checkpoint gc [--keep-last K] [--keep-days N] "
				"[--max-unused PCT] [--dry-run]");
	struct st_repo *r = NULL;
	int rc = open_repo(o, false, &r);
	if (rc)
		return rc;
	struct st_gc_result res;
	struct al_error err = { 0 };
	rc = st_gc(r, &go, &res, &err);
	st_repo_close(r);
	if (rc < 0)
		return cli_fail("%s", al_error_message(&err));
	if (o->json) {
		printf("{\"dry_run\":%s,\"checkpoints_deleted\":%" PRIu64
		       ",\"checkpoints_kept\":%" PRIu64 ",\"manifests_deleted\":%" PRIu64
		       ",\"packs_deleted\":%" PRIu64 ",\"packs_orphan_deleted\":%" PRIu64
		       ",\"packs_kept\":%" PRIu64 ",\"packs_partly_used\":%" PRIu64
		       ",\"packs_rewritten\":%" PRIu64 ",\"temp_deleted\":%" PRIu64
		       ",\"bytes_freed\":%" PRIu64 "}\n",
		       go.dry_run ? "true" : "false", res.checkpoints_deleted, res.checkpoints_kept,
		       res.manifests_deleted, res.packs_deleted, res.packs_orphan, res.packs_kept,
		       res.packs_partial, res.packs_repacked, res.temp_deleted, res.bytes_freed);
		return 0;
	}
	printf("gc%s: %" PRIu64 " checkpoints deleted, %" PRIu64 " kept; %" PRIu64
	       " manifests deleted; %" PRIu64 " packs deleted, %" PRIu64
	       " without an index deleted, %" PRIu64 " kept (%" PRIu64 " partly used), %" PRIu64
	       " rewritten; %" PRIu64 " temp files deleted; %" PRIu64 " bytes freed\n",
	       go.dry_run ? " (dry run, nothing deleted)" : "", res.checkpoints_deleted,
	       res.checkpoints_kept, res.manifests_deleted, res.packs_deleted, res.packs_orphan,
	       res.packs_kept, res.packs_partial, res.packs_repacked, res.temp_deleted,
	       res.bytes_freed);
	return 0;
}

int cmd_checkpoint(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		checkpoint_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_AIRLOCK_ERROR : 0;
	}
	const char *sub = argv[1];
	struct copts o = { 0 };
	int rc = parse(argc - 1, argv + 1, &o);
	if (rc)
		return rc == CLI_HELP_SHOWN ? 0 : rc;
	/* An option that would do nothing where it was given is refused. */
	if (o.owner && strcmp(sub, "restore") != 0)
		return cli_fail("--owner is an option of `checkpoint restore` only");
	if (o.gc_given && strcmp(sub, "gc") != 0)
		return cli_fail("--keep-last, --keep-days, --max-unused and --dry-run are options "
				"of `checkpoint gc` only");
	if (o.output && strcmp(sub, "export") != 0)
		return cli_fail("-o (--output) is an option of `checkpoint export` only");
	if (o.force && strcmp(sub, "restore") != 0)
		return cli_fail("--force is an option of `checkpoint restore` only");
	if (o.json && !json_command(sub))
		return cli_fail(
			"--json is an option of `checkpoint create`, `import`, `ls`, `diff`, "
			"`latest`, `log`, `adopt` and `gc` only");
	if (o.json && o.names_only)
		return cli_fail(
			"--json lists the changed paths alone: --names-only goes without it");
	if (strcmp(sub, "gc") == 0)
		return do_gc(&o);
	if (strcmp(sub, "export") == 0)
		return do_export(&o);
	if (strcmp(sub, "create") == 0)
		return do_create(&o);
	if (strcmp(sub, "restore") == 0)
		return do_restore(&o);
	if (strcmp(sub, "diff") == 0)
		return do_diff(&o);
	if (strcmp(sub, "ls") == 0)
		return do_ls(&o);
	if (strcmp(sub, "latest") == 0)
		return do_latest(&o);
	if (strcmp(sub, "adopt") == 0)
		return do_adopt(&o);
	if (strcmp(sub, "import") == 0)
		return do_import(&o);
	if (strcmp(sub, "log") == 0)
		return do_log(&o);
	return cli_fail("unknown checkpoint command '%s' (try `airlock checkpoint --help`)", sub);
}

/* ---- for the manual and the completion (cli/doc.h) ---- */

static void checkpoint_help(FILE *f, const void *ud)
{
	checkpoint_usage(f);
}

int cli_doc_checkpoint(void)
{
	const struct cli_doc doc = { .name = "checkpoint",
				     .help = checkpoint_help,
				     .tables = { checkpoint_optdefs } };
	return cli_doc_print(stdout, &doc, 1, NULL);
}

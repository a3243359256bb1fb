/* SPDX-License-Identifier: Apache-2.0 */
/* `airlock sandbox ...` and `airlock doctor`. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/log.h"
#include "common/parse.h"
#include "sandbox/sandbox.h"

#define DEFAULT_MEMORY ((uint64_t)4 << 30)
#define DEFAULT_PIDS 4096

static const char sandbox_usage[] =
	"usage:\n"
	"  airlock sandbox run [OPTIONS] -- CMD [ARG...]      create, run, destroy\n"
	"  airlock sandbox create [OPTIONS]                   print the new sandbox's id\n"
	"  airlock sandbox exec [--env K=V] [--cwd DIR] [--timeout S] [--output-limit SIZE]\n"
	"                       ID -- CMD [ARG...]\n"
	"  airlock sandbox list\n"
	"  airlock sandbox destroy ID\n"
	"  airlock sandbox audit ID                            print its gateway's audit log\n"
	"  airlock sandbox policy ID FILE                      replace its rules (a policy file's\n"
	"                                                      rules:) with a new generation\n"
	"  airlock sandbox gc                                  remove what crashes left behind\n"
	"\n"
	"options:\n"
	"  --workspace DIR        shown as /workspace (default: a fresh empty directory)\n"
	"  --image host|DIR       root filesystem (default host: the host's /usr, /etc, ...\n"
	"                         read-only under a writable overlay)\n"
	"  --network MODE         none: loopback only (default without the options below);\n"
	"                         restricted: out through the egress gateway, as the policy\n"
	"                         allows (default with them); open: any public host\n"
	"  --allow RULE           HOST[:PORT][/PATH-PREFIX] the sandbox may reach (repeatable)\n"
	"  --policy FILE          the network policy\n"
	"  --grant G              github:OWNER/REPO the vault's GitHub credential may reach\n"
	"                         (repeatable)\n"
	"  --upstream H:P=A:P     the gateway connects to A:P for H:P (repeatable)\n"
	"  --upstream-ca FILE     the gateway also trusts these CAs (PEM) upstream (repeatable)\n"
	"  --vault FILE           credentials the gateway injects (never seen inside)\n"
	"  --audit FILE           (run) append the gateway's audit log to FILE (default: the\n"
	"                         sandbox's own, gone with it; `sandbox audit ID` for create)\n"
	"  --env K=V              environment for every command (repeatable); with a network,\n"
	"                         the gateway's variables (proxies, CA bundles) cannot be set\n"
	"  --memory SIZE          memory limit, e.g. 512M, 2G (default 4G; 0 = none)\n"
	"  --pids N               process limit (default 4096; 0 = none)\n"
	"  --cpus F               CPU limit in cores, e.g. 1.5 (default none)\n"
	"  --timeout SECONDS      wall-clock limit for the command (also 500ms, 5m)\n"
	"  --output-limit SIZE    cap on stdout+stderr (truncated with a marker)\n"
	"  --hostname NAME        hostname inside (default airlock)\n"
	"\n"
	"exit status: the command's own; 124 timeout; 137 memory limit; 125 airlock's own error\n";

enum {
	OPT_WORKSPACE = 256,
	OPT_IMAGE,
	OPT_NETWORK,
	OPT_ENV,
	OPT_MEMORY,
	OPT_PIDS,
	OPT_CPUS,
	OPT_TIMEOUT,
	OPT_OUTPUT_LIMIT,
	OPT_HOSTNAME,
	OPT_CWD,
	OPT_AUDIT,
	OPT_HELP,
};

struct options {
	struct sbx_spec spec;
	struct sbx_exec_opts exec;
	char *env[SBX_MAX_ENV];
	size_t n_env;
	bool network_given;
	struct cli_gw_opts gw;
	const char *audit;
};


/* Parses options; which ones are allowed depends on the subcommand (run has
 * both spec_opts and exec_opts). */
static int parse_options(int argc, char **argv, bool spec_opts, bool exec_opts,
			 struct options *o, int *ret_optind)
{
	static const struct option longopts[] = {
		{ "workspace", required_argument, NULL, OPT_WORKSPACE },
		{ "image", required_argument, NULL, OPT_IMAGE },
		{ "network", required_argument, NULL, OPT_NETWORK },
		{ "env", required_argument, NULL, OPT_ENV },
		{ "memory", required_argument, NULL, OPT_MEMORY },
		{ "pids", required_argument, NULL, OPT_PIDS },
		{ "cpus", required_argument, NULL, OPT_CPUS },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "output-limit", required_argument, NULL, OPT_OUTPUT_LIMIT },
		{ "hostname", required_argument, NULL, OPT_HOSTNAME },
		{ "cwd", required_argument, NULL, OPT_CWD },
		{ "audit", required_argument, NULL, OPT_AUDIT },
		{ "allow", required_argument, NULL, OPT_GW_ALLOW },
		{ "policy", required_argument, NULL, OPT_GW_POLICY },
		{ "grant", required_argument, NULL, OPT_GW_GRANT },
		{ "upstream", required_argument, NULL, OPT_GW_UPSTREAM },
		{ "upstream-ca", required_argument, NULL, OPT_GW_UPSTREAM_CA },
		{ "vault", required_argument, NULL, OPT_GW_VAULT },
		{ "help", no_argument, NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};
	o->spec.memory_bytes = DEFAULT_MEMORY;
	o->spec.pids = DEFAULT_PIDS;
	o->exec.stdin_fd = 0;
	o->exec.stdout_fd = 1;
	o->exec.stderr_fd = 2;
	optind = 1;
	opterr = 0;
	int c, li = -1;
	char optname[32];
	/* "+": stop at the first non-option, so CMD's own options stay its own. */
	while ((c = getopt_long(argc, argv, "+", longopts, &li)) != -1) {
		const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
		if (c != '?' && li >= 0) {
			/* Not argv[optind - 1]: that is the value of "--opt VALUE". */
			snprintf(optname, sizeof(optname), "--%s", longopts[li].name);
			name = optname;
		}
		li = -1;
		bool is_gw = c >= OPT_GW_ALLOW && c <= OPT_GW_VAULT;
		bool is_spec = c == OPT_WORKSPACE || c == OPT_IMAGE || c == OPT_NETWORK ||
			       c == OPT_MEMORY || c == OPT_PIDS || c == OPT_CPUS ||
			       c == OPT_HOSTNAME || is_gw;
		bool is_exec = c == OPT_TIMEOUT || c == OPT_OUTPUT_LIMIT || c == OPT_CWD;
		bool is_run = c == OPT_AUDIT;
		if ((is_spec && !spec_opts) || (is_exec && !exec_opts) ||
		    (is_run && !(spec_opts && exec_opts)))
			return cli_fail("option %s does not apply here (see `airlock sandbox --help`)", name);
		if (is_gw) {
			int r = cli_gw_option(&o->gw, c, optarg);
			if (r)
				return r;
			continue;
		}
		switch (c) {
		case OPT_HELP:
			fputs(sandbox_usage, stdout);
			exit(0);
		case OPT_WORKSPACE:
			o->spec.workspace = optarg;
			break;
		case OPT_IMAGE:
			if (!*optarg)
				return cli_fail("--image wants host or a directory");
			o->spec.image = optarg;
			break;
		case OPT_NETWORK:
			if (strcmp(optarg, "none") == 0)
				o->spec.network = SBX_NETWORK_NONE;
			else if (strcmp(optarg, "restricted") == 0)
				o->spec.network = SBX_NETWORK_RESTRICTED;
			else if (strcmp(optarg, "open") == 0)
				o->spec.network = SBX_NETWORK_OPEN;
			else
				return cli_fail("--network wants none, restricted or open, not '%s'", optarg);
			o->network_given = true;
			break;
		case OPT_AUDIT:
			if (!*optarg)
				return cli_fail("--audit wants a file");
			o->audit = optarg;
			break;
		case OPT_ENV: {
			const char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg)
				return cli_fail("--env wants K=V, not '%s'", optarg);
			if (o->n_env >= SBX_MAX_ENV)
				return cli_fail("too many --env options (at most %d)", SBX_MAX_ENV);
			o->env[o->n_env++] = optarg;
			break;
		}
		case OPT_MEMORY:
			if (parse_size(optarg, &o->spec.memory_bytes) < 0 ||
			    (o->spec.memory_bytes && o->spec.memory_bytes < ((uint64_t)16 << 20)))
				return cli_fail("--memory wants a size of at least 16M like 512M or 2G (or 0), not '%s'",
					    optarg);
			break;
		case OPT_PIDS:
			if (parse_u64(optarg, &o->spec.pids) < 0 || o->spec.pids > 4194304 ||
			    (o->spec.pids && o->spec.pids < 4))
				return cli_fail("--pids wants a number from 4 to 4194304 (or 0), not '%s'", optarg);
			break;
		case OPT_CPUS:
			if (parse_double_range(optarg, 0.01, 1024, &o->spec.cpus) < 0)
				return cli_fail("--cpus wants a number of cores like 0.5 or 2, not '%s'", optarg);
			break;
		case OPT_TIMEOUT:
			if (parse_duration(optarg, &o->exec.timeout_ms) < 0 || o->exec.timeout_ms == 0)
				return cli_fail("--timeout wants seconds (or 500ms, 5m, 2h), not '%s'", optarg);
			break;
		case OPT_OUTPUT_LIMIT:
			if (parse_size(optarg, &o->exec.output_limit) < 0)
				return cli_fail("--output-limit wants a size like 1M, not '%s'", optarg);
			break;
		case OPT_HOSTNAME:
			o->spec.hostname = optarg;
			break;
		case OPT_CWD:
			if (optarg[0] != '/')
				return cli_fail("--cwd wants an absolute path inside the sandbox");
			o->exec.cwd = optarg;
			break;
		case '?':
		default:
			if (optopt)
				return cli_fail("option %s needs a value", name);
			return cli_fail("unknown option %s (see `airlock sandbox --help`)", name);
		}
	}
	if (spec_opts) {
		if (o->gw.any || o->audit) {
			if (o->network_given && o->spec.network == SBX_NETWORK_NONE)
				return cli_fail("--network none leaves nothing for the gateway's options "
					    "(--allow, --policy, --grant, --upstream, --upstream-ca, "
					    "--vault, --audit) to do");
			if (!o->network_given)
				o->spec.network = SBX_NETWORK_RESTRICTED;
		}
		o->spec.env = o->env;
		o->spec.n_env = o->n_env;
	} else {
		o->exec.env = o->env;
		o->exec.n_env = o->n_env;
	}
	*ret_optind = optind;
	return 0;
}

static int settings(struct sbx_settings *set)
{
	sbx_settings_default(set);
	struct al_error err = { 0 };
	if (sbx_settings_from_env(set, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	return 0;
}

/* Every process the memory limit killed is reported, with what became of
 * the command: a command whose child died that way may exit on its own. */
static void report_oom_kills(const struct sbx_result *res)
{
	uint64_t n = res->oom_kills;
	if (n == 0 || res->outcome == SBX_OOM_KILLED)
		return;
	const char *what = n == 1 ? "process was" : "processes were";
	if (res->outcome == SBX_EXITED)
		log_error("%" PRIu64 " %s killed by the sandbox's memory limit (OOM); the command "
			  "exited with status %d", n, what, res->status);
	else if (res->outcome == SBX_SIGNALED)
		log_error("%" PRIu64 " %s killed by the sandbox's memory limit (OOM); the command "
			  "was killed by signal %d", n, what, res->status);
	else
		log_error("%" PRIu64 " %s killed by the sandbox's memory limit (OOM)", n, what);
}

static int report(const struct sbx_result *res)
{
	report_oom_kills(res);
	switch (res->outcome) {
	case SBX_EXITED:
		return res->status;
	case SBX_SIGNALED:
		return 128 + res->status;
	case SBX_TIMED_OUT:
		log_error("the command timed out and was killed with everything it started");
		return EXIT_TIMED_OUT;
	case SBX_INTERRUPTED:
		log_error("interrupted by signal %d: the command and its sandbox were stopped",
			  res->status);
		return 128 + res->status;
	case SBX_OOM_KILLED:
		log_error("the command was killed: it reached the sandbox's memory limit (OOM; %" PRIu64
			  " process%s killed)", res->oom_kills, res->oom_kills == 1 ? "" : "es");
		return EXIT_OOM;
	}
	return EXIT_AIRLOCK_ERROR;
}

/* Everything after "--" (or the first non-option) is the command. */
static char **command_argv(int argc, char **argv, int optind_, int skip)
{
	int i = optind_ + skip;
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc)
		return NULL;
	return argv + i;
}

/* ---- the egress gateway of a sandbox with a network ---- */

struct net {
	struct gw_config *cfg;
	struct gw_proc gp;
	bool started;
	char **gw_env;
	size_t n_gw_env;
	char **env; /* the user's --env, then the gateway's */
	int audit_fd; /* run --audit FILE; else the sandbox's own, opened when it exists */
	struct al_error *err; /* the sandbox call's: the gateway's reason is kept */
};

static void net_init(struct net *n, struct al_error *err)
{
	memset(n, 0, sizeof(*n));
	n->audit_fd = -1;
	n->err = err;
}

static size_t env_name_len(const char *kv)
{
	const char *eq = strchr(kv, '=');
	return eq ? (size_t)(eq - kv) : strlen(kv);
}

static int net_ready(const struct sbx_net_fds *fds, const char *id, const char *dir,
		     int init_pidfd, void *ud)
{
	struct net *n = ud;
	_cleanup_close_ int own = -1;
	int audit_fd = n->audit_fd;
	if (audit_fd < 0) {
		char path[4096];
		if (snprintf(path, sizeof(path), "%s/audit.jsonl", dir) >= (int)sizeof(path))
			return al_error_set(n->err, -ENAMETOOLONG, "state directory path too long");
		/* The directory is root's alone; still, no link is followed. */
		own = cli_open_audit(path, true);
		if (own < 0)
			return al_error_set_errno(n->err, own, "cannot open %s", path);
		audit_fd = own;
	}
	/* Root's way to change the sandbox's policy later (`sandbox policy`). */
	char sock[4096];
	if (snprintf(sock, sizeof(sock), "%s/gateway.sock", dir) >= (int)sizeof(sock))
		return al_error_set(n->err, -ENAMETOOLONG, "state directory path too long");
	_cleanup_close_ int control = cli_listen_unix(sock);
	if (control < 0)
		return al_error_set_errno(n->err, control, "cannot listen on %s", sock);
	struct gw_listeners l = {
		.proxy = fds->proxy, .http = fds->http, .https = fds->https, .dns = fds->dns,
		.control = control,
	};
	return gw_attach(&n->gp, id, &l, audit_fd, init_pidfd, n->err);
}

/* Builds the gateway's configuration and starts it; nothing to do without
 * a network. Returns 0 or an exit status after a message. */
static int net_setup(struct options *o, const char *audit, bool detach, struct net *n)
{
	if (o->spec.network == SBX_NETWORK_NONE)
		return 0;
	struct gw_options gopts;
	cli_gw_fill(&o->gw, o->spec.network == SBX_NETWORK_OPEN ? GW_MODE_OPEN : GW_MODE_RESTRICTED,
		    "sandbox", &gopts);
	int r = gw_config_build(&gopts, &n->cfg, n->err);
	if (r < 0)
		return cli_fail("%s", al_error_message(n->err));
	r = gw_sandbox_env(n->cfg, SBX_TRUST_BUNDLE, SBX_CA_FILE, &n->gw_env, &n->n_gw_env);
	if (r < 0)
		return cli_fail("cannot make the sandbox's environment: %s", strerror(-r));
	/* The gateway's variables are not the user's to change silently. */
	for (size_t i = 0; i < o->n_env; i++) {
		size_t len = env_name_len(o->env[i]);
		for (size_t j = 0; j < n->n_gw_env; j++) {
			if (env_name_len(n->gw_env[j]) == len &&
			    strncmp(o->env[i], n->gw_env[j], len) == 0)
				return cli_fail("--env %.*s: the gateway sets this variable in a sandbox "
					    "with a network", (int)len, o->env[i]);
		}
	}
	if (o->n_env + n->n_gw_env > SBX_MAX_ENV)
		return cli_fail("too many --env options with the gateway's variables (at most %d)",
			    SBX_MAX_ENV);
	n->env = calloc(o->n_env + n->n_gw_env + 1, sizeof(*n->env));
	if (!n->env)
		return cli_fail("out of memory");
	for (size_t i = 0; i < o->n_env; i++)
		n->env[i] = o->env[i];
	for (size_t j = 0; j < n->n_gw_env; j++)
		n->env[o->n_env + j] = n->gw_env[j];
	if (audit) {
		n->audit_fd = cli_open_audit(audit, false);
		if (n->audit_fd < 0)
			return cli_fail("cannot open %s: %s", audit, strerror(-n->audit_fd));
	}
	struct gw_start_opts so = {
		.detach = detach,
		.log_fd = detach ? -1 : 2,
		.uid = 0,
	};
	r = gw_start(n->cfg, &so, &n->gp, n->err);
	if (r < 0)
		return cli_fail("cannot start the egress gateway: %s", al_error_message(n->err));
	n->started = true;
	o->spec.env = n->env;
	o->spec.n_env = o->n_env + n->n_gw_env;
	o->spec.trust_pem = n->gp.ca_pem;
	o->spec.trust_pem_len = n->gp.ca_pem_len;
	o->spec.net_ready = net_ready;
	o->spec.net_ready_ud = n;
	return 0;
}

/* keep: the sandbox lives on, and its gateway with it (it leaves when the
 * sandbox's init dies); otherwise the gateway is stopped. */
static void net_done(struct net *n, bool keep)
{
	if (n->started) {
		if (keep)
			gw_release(&n->gp);
		else
			gw_stop(&n->gp);
		n->started = false;
	}
	n->audit_fd = safe_close(n->audit_fd);
	free(n->env);
	n->env = NULL;
	if (n->gw_env)
		gw_env_free(n->gw_env, n->n_gw_env);
	n->gw_env = NULL;
	gw_config_free(n->cfg);
	n->cfg = NULL;
}

static int do_run(int argc, char **argv)
{
	struct options o = { 0 };
	int oi;
	int r = parse_options(argc, argv, true, true, &o, &oi);
	if (r)
		return r;
	char **cmd = command_argv(argc, argv, oi, 0);
	if (!cmd)
		return cli_fail("sandbox run needs a command after --");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	struct sbx_result res;
	struct al_error err = { 0 };
	struct net n;
	net_init(&n, &err);
	r = net_setup(&o, o.audit, false, &n);
	if (r) {
		net_done(&n, false);
		return r;
	}
	r = sbx_run(&set, &o.spec, cmd, &o.exec, &res, &err);
	net_done(&n, false);
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	return report(&res);
}

static int do_create(int argc, char **argv)
{
	struct options o = { 0 };
	int oi;
	int r = parse_options(argc, argv, true, false, &o, &oi);
	if (r)
		return r;
	if (oi < argc)
		return cli_fail("sandbox create takes no command (use `sandbox exec`)");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	char id[SBX_ID_LEN + 1];
	struct al_error err = { 0 };
	struct net n;
	net_init(&n, &err);
	r = net_setup(&o, NULL, true, &n);
	if (r) {
		net_done(&n, false);
		return r;
	}
	r = sbx_create(&set, &o.spec, id, &err);
	net_done(&n, r >= 0);
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	printf("%s\n", id);
	return 0;
}

static int do_exec(int argc, char **argv)
{
	struct options o = { 0 };
	int oi;
	int r = parse_options(argc, argv, false, true, &o, &oi);
	if (r)
		return r;
	if (oi >= argc)
		return cli_fail("sandbox exec needs an id");
	const char *id = argv[oi];
	if (!sbx_id_valid(id))
		return cli_fail("'%s' is not a sandbox id", id);
	char **cmd = command_argv(argc, argv, oi, 1);
	if (!cmd)
		return cli_fail("sandbox exec needs a command after --");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	struct sbx_result res;
	struct al_error err = { 0 };
	if (sbx_exec(&set, id, cmd, &o.exec, &res, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	return report(&res);
}

static int print_info(const struct sbx_info *info, void *ud)
{
	bool *header = ud;
	if (!*header) {
		printf("%-16s  %-8s  %-20s  %-10s  %-6s  %s\n", "ID", "STATE", "CREATED", "IMAGE",
		       "OOM", "WORKSPACE");
		*header = true;
	}
	char when[32];
	struct tm tm;
	time_t t = (time_t)info->created;
	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	printf("%-16s  %-8s  %-20s  %-10s  %-6" PRIu64 "  %s\n", info->id,
	       info->running ? "running" : "dead", when, info->image, info->oom_kills,
	       info->workspace[0] ? info->workspace : "(fresh)");
	return 0;
}

static int do_list(int argc, char **argv)
{
	if (argc > 1)
		return cli_fail("sandbox list takes no arguments");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	bool header = false;
	struct al_error err = { 0 };
	if (sbx_list(&set, print_info, &header, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	return 0;
}

static int do_destroy(int argc, char **argv)
{
	if (argc != 2)
		return cli_fail("usage: airlock sandbox destroy ID");
	if (!sbx_id_valid(argv[1]))
		return cli_fail("'%s' is not a sandbox id", argv[1]);
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	struct al_error err = { 0 };
	if (sbx_destroy(&set, argv[1], &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	return 0;
}

/* Prints the audit log of a sandbox's gateway. */
static int do_audit(int argc, char **argv)
{
	if (argc != 2)
		return cli_fail("usage: airlock sandbox audit ID");
	const char *id = argv[1];
	if (!sbx_id_valid(id))
		return cli_fail("'%s' is not a sandbox id", id);
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/%s", set.state_dir, id) >= (int)sizeof(path))
		return cli_fail("state directory path too long");
	_cleanup_close_ int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		if (errno == ENOENT)
			return cli_fail("no sandbox %s", id);
		return cli_fail("cannot open sandbox %s: %s", id, strerror(errno));
	}
	_cleanup_close_ int fd = openat(dfd, "audit.jsonl",
					O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0; /* nothing audited yet */
		return cli_fail("cannot open the audit log of sandbox %s: %s", id, strerror(errno));
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return cli_fail("the audit log of sandbox %s is not a regular file", id);
	char buf[65536];
	for (;;) {
		ssize_t k = read(fd, buf, sizeof(buf));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return cli_fail("cannot read the audit log of sandbox %s: %s", id, strerror(errno));
		if (k == 0)
			break;
		int w = write_full(1, buf, (size_t)k);
		if (w < 0)
			return cli_fail("cannot write the audit log: %s", strerror(-w));
	}
	return 0;
}

/* `sandbox policy ID FILE`: the sandbox's rules, replaced whole. */
static int do_policy(int argc, char **argv)
{
	if (argc != 3)
		return cli_fail("usage: airlock sandbox policy ID FILE");
	const char *id = argv[1];
	if (!sbx_id_valid(id))
		return cli_fail("'%s' is not a sandbox id", id);
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	char sock[4096];
	if (snprintf(sock, sizeof(sock), "%s/%s/gateway.sock", set.state_dir, id) >=
	    (int)sizeof(sock))
		return cli_fail("state directory path too long");
	char *text = NULL;
	size_t len = 0;
	int r = read_file_bounded(AT_FDCWD, argv[2], 1024 * 1024, &text, &len);
	if (r < 0)
		return cli_fail("%s: %s", argv[2], r == -EFBIG ? "larger than 1 MiB" : strerror(-r));
	struct al_error err = { 0 };
	uint64_t gen = 0;
	r = gw_set_policy(sock, text, len, &gen, &err);
	free(text);
	if (r < 0) {
		if (r == -ENOENT || r == -ECONNREFUSED)
			return cli_fail("sandbox %s has no gateway (no such sandbox, or --network none)", id);
		return cli_fail("%s", al_error_message(&err));
	}
	printf("policy generation %" PRIu64 "\n", gen);
	return 0;
}

static int do_gc(int argc, char **argv)
{
	if (argc > 1)
		return cli_fail("sandbox gc takes no arguments");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	unsigned removed = 0;
	struct al_error err = { 0 };
	int r = sbx_gc(&set, &removed, &err);
	printf("removed %u leftover%s\n", removed, removed == 1 ? "" : "s");
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	return 0;
}

int cmd_sandbox(int argc, char **argv)
{
	if (argc < 2) {
		fputs(sandbox_usage, stderr);
		return EXIT_AIRLOCK_ERROR;
	}
	const char *sub = argv[1];
	if (strcmp(sub, "run") == 0)
		return do_run(argc - 1, argv + 1);
	if (strcmp(sub, "create") == 0)
		return do_create(argc - 1, argv + 1);
	if (strcmp(sub, "exec") == 0)
		return do_exec(argc - 1, argv + 1);
	if (strcmp(sub, "list") == 0)
		return do_list(argc - 1, argv + 1);
	if (strcmp(sub, "destroy") == 0)
		return do_destroy(argc - 1, argv + 1);
	if (strcmp(sub, "gc") == 0)
		return do_gc(argc - 1, argv + 1);
	if (strcmp(sub, "audit") == 0)
		return do_audit(argc - 1, argv + 1);
	if (strcmp(sub, "policy") == 0)
		return do_policy(argc - 1, argv + 1);
	if (strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0 || strcmp(sub, "-h") == 0) {
		fputs(sandbox_usage, stdout);
		return 0;
	}
	return cli_fail("unknown sandbox command '%s' (try `airlock sandbox --help`)", sub);
}

int cmd_doctor(int argc, char **argv)
{
	if (argc > 1)
		return cli_fail("doctor takes no arguments");
	return sbx_doctor(1) == 0 ? 0 : 1;
}

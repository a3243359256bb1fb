/* SPDX-License-Identifier: Apache-2.0 */
/* `airlock sandbox ...` and `airlock doctor`. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cleanup.h"
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
	"  airlock sandbox gc                                  remove what crashes left behind\n"
	"\n"
	"options:\n"
	"  --workspace DIR        shown as /workspace (default: a fresh empty directory)\n"
	"  --image host|DIR       root filesystem (default host: the host's /usr, /etc, ...\n"
	"                         read-only under a writable overlay)\n"
	"  --network none         no network but loopback (restricted and open need the gateway)\n"
	"  --env K=V              environment for every command (repeatable)\n"
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
	OPT_HELP,
};

struct options {
	struct sbx_spec spec;
	struct sbx_exec_opts exec;
	char *env[SBX_MAX_ENV];
	size_t n_env;
};

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_error("%s", msg);
	return EXIT_AIRLOCK_ERROR;
}

/* Parses options; which ones are allowed depends on the subcommand. */
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
	int c;
	/* "+": stop at the first non-option, so CMD's own options stay its own. */
	while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
		const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
		bool is_spec = c == OPT_WORKSPACE || c == OPT_IMAGE || c == OPT_NETWORK ||
			       c == OPT_MEMORY || c == OPT_PIDS || c == OPT_CPUS || c == OPT_HOSTNAME;
		bool is_exec = c == OPT_TIMEOUT || c == OPT_OUTPUT_LIMIT || c == OPT_CWD;
		if ((is_spec && !spec_opts) || (is_exec && !exec_opts))
			return fail("option %s does not apply here (see `airlock sandbox --help`)", name);
		switch (c) {
		case OPT_HELP:
			fputs(sandbox_usage, stdout);
			exit(0);
		case OPT_WORKSPACE:
			o->spec.workspace = optarg;
			break;
		case OPT_IMAGE:
			if (!*optarg)
				return fail("--image wants host or a directory");
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
				return fail("--network wants none, restricted or open, not '%s'", optarg);
			break;
		case OPT_ENV: {
			const char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg)
				return fail("--env wants K=V, not '%s'", optarg);
			if (o->n_env >= SBX_MAX_ENV)
				return fail("too many --env options (at most %d)", SBX_MAX_ENV);
			o->env[o->n_env++] = optarg;
			break;
		}
		case OPT_MEMORY:
			if (parse_size(optarg, &o->spec.memory_bytes) < 0 ||
			    (o->spec.memory_bytes && o->spec.memory_bytes < ((uint64_t)16 << 20)))
				return fail("--memory wants a size of at least 16M like 512M or 2G (or 0), not '%s'",
					    optarg);
			break;
		case OPT_PIDS:
			if (parse_u64(optarg, &o->spec.pids) < 0 || o->spec.pids > 4194304 ||
			    (o->spec.pids && o->spec.pids < 4))
				return fail("--pids wants a number from 4 to 4194304 (or 0), not '%s'", optarg);
			break;
		case OPT_CPUS:
			if (parse_double_range(optarg, 0.01, 1024, &o->spec.cpus) < 0)
				return fail("--cpus wants a number of cores like 0.5 or 2, not '%s'", optarg);
			break;
		case OPT_TIMEOUT:
			if (parse_duration(optarg, &o->exec.timeout_ms) < 0 || o->exec.timeout_ms == 0)
				return fail("--timeout wants seconds (or 500ms, 5m, 2h), not '%s'", optarg);
			break;
		case OPT_OUTPUT_LIMIT:
			if (parse_size(optarg, &o->exec.output_limit) < 0)
				return fail("--output-limit wants a size like 1M, not '%s'", optarg);
			break;
		case OPT_HOSTNAME:
			o->spec.hostname = optarg;
			break;
		case OPT_CWD:
			if (optarg[0] != '/')
				return fail("--cwd wants an absolute path inside the sandbox");
			o->exec.cwd = optarg;
			break;
		case '?':
		default:
			if (optopt)
				return fail("option %s needs a value", name);
			return fail("unknown option %s (see `airlock sandbox --help`)", name);
		}
	}
	if (spec_opts) {
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
		return fail("%s", al_error_message(&err));
	return 0;
}

static int report(const struct sbx_result *res)
{
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
		log_error("the command was killed: it reached the sandbox's memory limit");
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

static int do_run(int argc, char **argv)
{
	struct options o = { 0 };
	int oi;
	int r = parse_options(argc, argv, true, true, &o, &oi);
	if (r)
		return r;
	char **cmd = command_argv(argc, argv, oi, 0);
	if (!cmd)
		return fail("sandbox run needs a command after --");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	struct sbx_result res;
	struct al_error err = { 0 };
	if (sbx_run(&set, &o.spec, cmd, &o.exec, &res, &err) < 0)
		return fail("%s", al_error_message(&err));
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
		return fail("sandbox create takes no command (use `sandbox exec`)");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	char id[SBX_ID_LEN + 1];
	struct al_error err = { 0 };
	if (sbx_create(&set, &o.spec, id, &err) < 0)
		return fail("%s", al_error_message(&err));
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
		return fail("sandbox exec needs an id");
	const char *id = argv[oi];
	if (!sbx_id_valid(id))
		return fail("'%s' is not a sandbox id", id);
	char **cmd = command_argv(argc, argv, oi, 1);
	if (!cmd)
		return fail("sandbox exec needs a command after --");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	struct sbx_result res;
	struct al_error err = { 0 };
	if (sbx_exec(&set, id, cmd, &o.exec, &res, &err) < 0)
		return fail("%s", al_error_message(&err));
	return report(&res);
}

static int print_info(const struct sbx_info *info, void *ud)
{
	bool *header = ud;
	if (!*header) {
		printf("%-16s  %-8s  %-20s  %-10s  %s\n", "ID", "STATE", "CREATED", "IMAGE", "WORKSPACE");
		*header = true;
	}
	char when[32];
	struct tm tm;
	time_t t = (time_t)info->created;
	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	printf("%-16s  %-8s  %-20s  %-10s  %s\n", info->id, info->running ? "running" : "dead", when,
	       info->image, info->workspace[0] ? info->workspace : "(fresh)");
	return 0;
}

static int do_list(int argc, char **argv)
{
	if (argc > 1)
		return fail("sandbox list takes no arguments");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	bool header = false;
	struct al_error err = { 0 };
	if (sbx_list(&set, print_info, &header, &err) < 0)
		return fail("%s", al_error_message(&err));
	return 0;
}

static int do_destroy(int argc, char **argv)
{
	if (argc != 2)
		return fail("usage: airlock sandbox destroy ID");
	if (!sbx_id_valid(argv[1]))
		return fail("'%s' is not a sandbox id", argv[1]);
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	struct al_error err = { 0 };
	if (sbx_destroy(&set, argv[1], &err) < 0)
		return fail("%s", al_error_message(&err));
	return 0;
}

static int do_gc(int argc, char **argv)
{
	if (argc > 1)
		return fail("sandbox gc takes no arguments");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	unsigned removed = 0;
	struct al_error err = { 0 };
	int r = sbx_gc(&set, &removed, &err);
	printf("removed %u leftover%s\n", removed, removed == 1 ? "" : "s");
	if (r < 0)
		return fail("%s", al_error_message(&err));
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
	if (strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0 || strcmp(sub, "-h") == 0) {
		fputs(sandbox_usage, stdout);
		return 0;
	}
	return fail("unknown sandbox command '%s' (try `airlock sandbox --help`)", sub);
}

int cmd_doctor(int argc, char **argv)
{
	if (argc > 1)
		return fail("doctor takes no arguments");
	return sbx_doctor(1) == 0 ? 0 : 1;
}

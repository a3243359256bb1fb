/* SPDX-License-Identifier: Apache-2.0 */
/* `airlock sandbox ...` and `airlock doctor`. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/doc.h"
#include "common/cleanup.h"
#include "common/denial.h"
#include "common/error.h"
#include "common/fdutil.h"
#include "common/log.h"
#include "common/parse.h"
#include "control/net.h"
#include "control/settings.h"
#include "sandbox/sandbox.h"

#define DEFAULT_MEMORY ((uint64_t)4 << 30)
#define DEFAULT_PIDS 4096
/* A detached command's log is on the host's disk: capped unless asked. */
#define DETACH_OUTPUT_LIMIT ((uint64_t)64 << 20)

enum {
	OPT_WORKSPACE = 256,
	OPT_HOME,
	OPT_HOME_PATH,
	OPT_LOWER,
	OPT_LAYER,
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
	OPT_JSON,
	OPT_HELP,
	OPT_TTL,
	OPT_IDLE,
	OPT_USER,
};

/* What a sandbox is made of (run, create). */
static const struct cli_optdef spec_optdefs[] = {
	{ "workspace", OPT_WORKSPACE, "DIR",
	  "shown as /workspace (default: a fresh empty directory)" },
	{ "home", OPT_HOME, "DIR",
	  "the home directory inside (HOME), read-write; owned like\n"
	  "the workspace, which it needs (default: none, /root is the\n"
	  "sandbox's own)" },
	{ "home-path", OPT_HOME_PATH, "PATH", "where the home is: /root (default) or /home/NAME" },
	{ "lower", OPT_LOWER, "DIR",
	  "a layered workspace instead (with --layer): DIR/workspace\n"
	  "is /workspace and, with --home-path, DIR/home the home;\n"
	  "DIR is never written and may be shared" },
	{ "layer", OPT_LAYER, "DIR",
	  "where the layered workspace's changes go: DIR/upper (its\n"
	  "overlay's upper directory) and DIR/work" },
	{ "image", OPT_IMAGE, "host|DIR",
	  "root filesystem (default host: the host's /usr, /etc, ...\n"
	  "read-only under a writable overlay)" },
	{ "network", OPT_NETWORK, "MODE",
	  "none: loopback only (default without the gateway's options);\n"
	  "restricted: out through the egress gateway, as the policy\n"
	  "allows (default with them); open: any public host;\n"
	  "learn: as open, and prints the --allow rules it needed" },
	{ "memory", OPT_MEMORY, "SIZE", "memory limit, e.g. 512M, 2G (default 4G; 0 = none)" },
	{ "pids", OPT_PIDS, "N", "process limit (default 4096; 0 = none)" },
	{ "cpus", OPT_CPUS, "F", "CPU limit in cores, e.g. 1.5 (default none)" },
	{ "hostname", OPT_HOSTNAME, "NAME", "hostname inside (default airlock)" },
	{ "ttl", OPT_TTL, "DURATION",
	  "(create) destroyed this long after its creation, even with a\n"
	  "command running (30s, 5m, 2h, 7d; by `sandbox gc`)" },
	{ "idle", OPT_IDLE, "DURATION",
	  "(create) destroyed once no command has run in it for this\n"
	  "long (by `sandbox gc`)" },
	{ NULL, 0, NULL, NULL },
};

/* How a command runs (run, exec). */
static const struct cli_optdef exec_optdefs[] = {
	{ "env", OPT_ENV, "K=V",
	  "environment for every command (repeatable); with a network,\n"
	  "the gateway's variables (proxies, CA bundles) cannot be set" },
	{ "cwd", OPT_CWD, "DIR", "(exec) working directory inside" },
	{ "user", OPT_USER, "USER",
	  "run as UID, UID:GID or NAME[:GROUP] of the sandbox's\n"
	  "/etc/passwd (ids 0 to 65535), not root: the workspace is\n"
	  "that user's inside; exec: this command only (root or 0: root)" },
	{ "detach", 'd', NULL,
	  "(exec) leave the command running and print its number:\n"
	  "output to its log (`sandbox logs ID N`), stdin /dev/null,\n"
	  "--output-limit 64M unless given; ends with the sandbox" },
	{ "tty", 't', NULL,
	  "a terminal of the sandbox's own for the command (job control,\n"
	  "window size; keys such as Ctrl-C go to the command; output\n"
	  "and errors both on stdout)" },
	{ "timeout", OPT_TIMEOUT, "SECONDS", "wall-clock limit for the command (also 500ms, 5m)" },
	{ "output-limit", OPT_OUTPUT_LIMIT, "SIZE",
	  "cap on stdout+stderr (truncated with a marker)" },
	{ "audit", OPT_AUDIT, "FILE",
	  "(run) append the gateway's audit log to FILE (default: the\n"
	  "sandbox's own, gone with it; `sandbox audit ID` for create)" },
	{ "json", OPT_JSON, NULL, "(create) print the new sandbox as JSON, as inspect --json" },
	{ "help", OPT_HELP, NULL, "print this and exit" },
	{ NULL, 0, NULL, NULL },
};

static void sandbox_usage(FILE *f)
{
	fputs("usage:\n"
	      "  airlock sandbox run [OPTIONS] -- CMD [ARG...]      create, run, destroy\n"
	      "  airlock sandbox create [OPTIONS]                   print the new sandbox's id\n"
	      "  airlock sandbox exec [-t|-d] [--env K=V] [--cwd DIR] [--user USER]\n"
	      "                       [--timeout S] [--output-limit SIZE] ID -- CMD [ARG...]\n"
	      "  airlock sandbox logs ID [N] [-f|--follow]           output of detached command N\n"
	      "                                                      (default: the latest)\n"
	      "  airlock sandbox list [--json]                     every sandbox, `run`s too\n"
	      "  airlock sandbox inspect ID [--json]\n"
	      "  airlock sandbox destroy ID...\n"
	      "  airlock sandbox audit ID                            print its gateway's audit log\n"
	      "  airlock sandbox policy ID FILE [--json]             a new generation of its policy from\n"
	      "                                                      a whole policy file (as --policy)\n"
	      "  airlock sandbox budget ID [--requests N] [--bytes SIZE] [--json]\n"
	      "                                                      a new egress budget (0: no limit),\n"
	      "                                                      counted from zero\n"
	      "  airlock sandbox gc [--json]                         destroy expired sandboxes (--ttl,\n"
	      "                                                      --idle); remove what crashes left\n"
	      "                                                      behind\n"
	      "An ID may be given as a unique prefix of at least 4 of its hex digits.\n"
	      "\noptions:\n",
	      f);
	cli_print_optdefs(f, spec_optdefs);
	cli_print_optdefs(f, cli_gw_optdefs);
	cli_print_optdefs(f, exec_optdefs);
	fputs("\nexit status: the command's own; 124 timeout; 137 memory limit; 125 airlock's own "
	      "error\n",
	      f);
}

struct options {
	struct sbx_spec spec;
	struct sbx_exec_opts exec;
	char *env[SBX_MAX_ENV];
	size_t n_env;
	bool network_given;
	struct cli_gw_opts gw;
	const char *audit;
	bool json;
	bool detach;
};

/* Parses options; which ones are allowed depends on the subcommand (run has
 * both spec_opts and exec_opts). */
static int parse_options(int argc, char **argv, bool spec_opts, bool exec_opts, struct options *o,
			 int *ret_optind)
{
	struct option longopts[48];
	size_t nl = cli_longopts(longopts, ARRAY_SIZE(longopts), 0, spec_optdefs);
	nl = cli_longopts(longopts, ARRAY_SIZE(longopts), nl, cli_gw_optdefs);
	cli_longopts(longopts, ARRAY_SIZE(longopts), nl, exec_optdefs);
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
	while ((c = getopt_long(argc, argv, "+dt", longopts, &li)) != -1) {
		const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
		if (c != '?' && li >= 0) {
			/* Not argv[optind - 1]: that is the value of "--opt VALUE". */
			snprintf(optname, sizeof(optname), "--%s", longopts[li].name);
			name = optname;
		}
		li = -1;
		bool is_gw = c >= OPT_GW_ALLOW && c <= OPT_GW_ALLOW_CIDR;
		bool is_spec = c == OPT_WORKSPACE || c == OPT_HOME || c == OPT_HOME_PATH ||
			       c == OPT_LOWER || c == OPT_LAYER || c == OPT_IMAGE ||
			       c == OPT_NETWORK || c == OPT_MEMORY || c == OPT_PIDS ||
			       c == OPT_CPUS || c == OPT_HOSTNAME || c == OPT_TTL ||
			       c == OPT_IDLE || is_gw;
		bool is_exec = c == OPT_TIMEOUT || c == OPT_OUTPUT_LIMIT || c == OPT_CWD ||
			       c == 't';
		bool is_exec_only = c == 'd';
		bool is_run = c == OPT_AUDIT;
		bool is_create = c == OPT_JSON;
		if ((c == OPT_TTL || c == OPT_IDLE) && spec_opts && exec_opts)
			return cli_fail("%s is for `sandbox create`: a `sandbox run` ends with its "
					"command",
					name);
		if ((is_spec && !spec_opts) || (is_exec && !exec_opts) ||
		    (is_exec_only && (spec_opts || !exec_opts)) ||
		    (is_run && !(spec_opts && exec_opts)) || (is_create && exec_opts))
			return cli_fail(
				"option %s does not apply here (see `airlock sandbox --help`)",
				name);
		if (is_gw) {
			int r = cli_gw_option(&o->gw, c, optarg);
			if (r)
				return r;
			continue;
		}
		switch (c) {
		case OPT_HELP:
			sandbox_usage(stdout);
			return CLI_HELP_SHOWN;
		case OPT_WORKSPACE:
			o->spec.workspace = optarg;
			break;
		case OPT_HOME:
			if (!*optarg)
				return cli_fail("--home wants a directory");
			o->spec.home = optarg;
			break;
		case OPT_HOME_PATH: {
			if (sbx_home_path_valid(optarg)) {
				o->spec.home_path = optarg;
				break;
			}
			/* Said back on one line, or not at all. */
			bool printable = true;
			for (const char *ch = optarg; *ch; ch++)
				if ((unsigned char)*ch < 0x20 || *ch == 0x7f)
					printable = false;
			return cli_fail("--home-path wants /root or /home/NAME (NAME: a lower-case "
					"letter or '_', then up to 31 of a-z, 0-9, '_', '-')%s%s%s",
					printable ? ", not '" : "", printable ? optarg : "",
					printable ? "'" : "");
		}
		case OPT_LOWER:
		case OPT_LAYER:
			if (!*optarg)
				return cli_fail("%s wants a directory", name);
			*(c == OPT_LOWER ? &o->spec.lower : &o->spec.layer) = optarg;
			break;
		case OPT_IMAGE:
			if (!*optarg)
				return cli_fail("--image wants host or a directory");
			o->spec.image = optarg;
			break;
		case OPT_NETWORK:
			o->spec.learn = false; /* the last --network wins */
			if (strcmp(optarg, "none") == 0)
				o->spec.network = SBX_NETWORK_NONE;
			else if (strcmp(optarg, "restricted") == 0)
				o->spec.network = SBX_NETWORK_RESTRICTED;
			else if (strcmp(optarg, "open") == 0)
				o->spec.network = SBX_NETWORK_OPEN;
			else if (strcmp(optarg, "learn") == 0)
				o->spec.network = SBX_NETWORK_OPEN, o->spec.learn = true;
			else
				return cli_fail(
					"--network wants none, restricted, open or learn, not '%s'",
					optarg);
			o->network_given = true;
			break;
		case OPT_JSON:
			o->json = true;
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
				return cli_fail(
					"--memory wants a size of at least 16M like 512M or 2G (or 0), not '%s'",
					optarg);
			break;
		case OPT_PIDS:
			if (parse_u64(optarg, &o->spec.pids) < 0 || o->spec.pids > 4194304 ||
			    (o->spec.pids && o->spec.pids < 4))
				return cli_fail(
					"--pids wants a number from 4 to 4194304 (or 0), not '%s'",
					optarg);
			break;
		case OPT_CPUS:
			if (parse_double_range(optarg, 0.01, 1024, &o->spec.cpus) < 0)
				return cli_fail(
					"--cpus wants a number of cores like 0.5 or 2, not '%s'",
					optarg);
			break;
		case OPT_TIMEOUT:
			if (parse_duration(optarg, &o->exec.timeout_ms) < 0 ||
			    o->exec.timeout_ms == 0)
				return cli_fail(
					"--timeout wants seconds (or 500ms, 5m, 2h), not '%s'",
					optarg);
			break;
		case OPT_OUTPUT_LIMIT:
			if (parse_size(optarg, &o->exec.output_limit) < 0)
				return cli_fail("--output-limit wants a size like 1M, not '%s'",
						optarg);
			break;
		case OPT_HOSTNAME:
			o->spec.hostname = optarg;
			break;
		case 't':
			o->exec.tty = true;
			break;
		case 'd':
			o->detach = true;
			break;
		case OPT_TTL:
		case OPT_IDLE: {
			uint64_t ms;
			if (parse_duration(optarg, &ms) < 0 || ms < SBX_EXPIRY_MIN_MS ||
			    ms > SBX_EXPIRY_MAX_MS)
				return cli_fail("%s wants a duration from 1s to 365d (30s, 5m, 2h, "
						"7d), not '%s'",
						name, optarg);
			*(c == OPT_TTL ? &o->spec.ttl_ms : &o->spec.idle_ms) = ms;
			break;
		}
		case OPT_USER: {
			if (!sbx_user_syntax_valid(optarg)) {
				bool printable = true;
				for (const char *ch = optarg; *ch; ch++)
					if ((unsigned char)*ch < 0x20 || *ch == 0x7f)
						printable = false;
				return cli_fail(
					"--user wants NAME, UID or UID:GID (UID and GID from "
					"0 to 65535)%s%s%s",
					printable ? ", not '" : "", printable ? optarg : "",
					printable ? "'" : "");
			}
			/* run and create: the sandbox's; exec: this command's. */
			*(spec_opts ? &o->spec.user : &o->exec.user) = optarg;
			break;
		}
		case OPT_CWD:
			if (optarg[0] != '/')
				return cli_fail("--cwd wants an absolute path inside the sandbox");
			o->exec.cwd = optarg;
			break;
		case '?':
		default:
			return cli_bad_option(argv, longopts, "sandbox");
		}
	}
	if (spec_opts) {
		if (o->gw.any || o->audit) {
			if (o->network_given && o->spec.network == SBX_NETWORK_NONE)
				return cli_fail(
					"--network none leaves nothing for the gateway's options "
					"(--allow, --allow-cidr, --policy, --grant, --upstream, "
					"--upstream-ca, --vault, --audit) to do");
			if (!o->network_given)
				o->spec.network = SBX_NETWORK_RESTRICTED;
		}
		o->spec.env = o->env;
		o->spec.n_env = o->n_env;
	} else {
		o->exec.env = o->env;
		o->exec.n_env = o->n_env;
	}
	if (o->detach && o->exec.tty)
		return cli_fail("--detach and --tty do not go together: a detached command has "
				"no terminal (its output is in `sandbox logs`)");
	if (o->exec.tty) {
		/* The terminal's first size: ours (stdin's, or stdout's). */
		struct winsize ws;
		if (ioctl(0, TIOCGWINSZ, &ws) == 0 || ioctl(1, TIOCGWINSZ, &ws) == 0) {
			o->exec.rows = ws.ws_row;
			o->exec.cols = ws.ws_col;
		}
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

/* For a new sandbox: the settings, and the gateway's uid outside the
 * sandboxes' ranges (a sandbox without a network is refused too: the
 * settings are wrong for every sandbox, and some have gateways). */
static int start_settings(struct sbx_settings *set, uint32_t *gw_uid)
{
	struct al_error err = { 0 };
	if (ctl_settings_from_env(set, gw_uid, &err) < 0)
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
			  "exited with status %d",
			  n, what, res->status);
	else if (res->outcome == SBX_SIGNALED)
		log_error("%" PRIu64 " %s killed by the sandbox's memory limit (OOM); the command "
			  "was killed by signal %d",
			  n, what, res->status);
	else
		log_error("%" PRIu64 " %s killed by the sandbox's memory limit (OOM)", n, what);
}

static int report(const struct sbx_result *res)
{
	log_debug("command ended: outcome %d, status %d, %" PRIu64 " OOM kill%s", (int)res->outcome,
		  res->status, res->oom_kills, res->oom_kills == 1 ? "" : "s");
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
		log_error(
			"the command was killed: it reached the sandbox's memory limit (OOM; %" PRIu64
			" process%s killed)",
			res->oom_kills, res->oom_kills == 1 ? "" : "es");
		return EXIT_OOM;
	}
	return EXIT_AIRLOCK_ERROR;
}

/* ---- what the gateway refused, where the user looks ---- */

/* The string or number after ,"key": (or {"key":) in one audit line of
 * the gateway's own (compact JSON), unescaped into out with every control
 * byte and anything not ASCII as '?'; false when it is not there. */
static bool audit_field(const char *line, const char *key, char *out, size_t size)
{
	char pat[40];
	const char *p = NULL;
	for (int lead = 0; lead < 2 && !p; lead++) {
		snprintf(pat, sizeof(pat), "%c\"%s\":", lead ? '{' : ',', key);
		p = strstr(line, pat);
	}
	if (!p || size == 0)
		return false;
	p += strlen(pat);
	size_t n = 0;
	if (*p != '"') {
		while ((*p >= '0' && *p <= '9') && n + 1 < size)
			out[n++] = *p++;
		out[n] = '\0';
		return n > 0;
	}
	for (p++; *p && *p != '"' && n + 1 < size; p++) {
		char ch = *p;
		if (ch == '\\') {
			p++;
			ch = *p == 'n' || *p == 't' || *p == 'r' || *p == 'b' || *p == 'f' ? '?' :
			     *p == 'u'							   ? '?' :
											     *p;
			if (*p == 'u')
				for (int k = 0; k < 4 && p[1]; k++)
					p++;
			if (!ch)
				break;
		}
		out[n++] = (unsigned char)ch < 0x20 || (unsigned char)ch >= 0x7f ? '?' : ch;
	}
	out[n] = '\0';
	return *p == '"';
}

struct denial {
	char host[256], reason[256];
	unsigned port;
	uint64_t count;
};

/*
 * After a command: what the gateway refused it (the audit lines from off
 * on, fd read with pread), one line per host, port and reason, with what
 * would allow it. The audit log has it all; this is where people look.
 * Only sandbox's lines (an --audit FILE may be shared). exact: the gateway
 * is gone and has written every count (a `run`); a persistent sandbox's
 * gateway writes a repeat's count up to 10 s later (and maybe one of an
 * earlier command's), so after an exec the counts and those lines are
 * left out. DNS answers refused are not requests. where: what keeps each
 * line, for the message.
 */
static void report_denials(int fd, off_t off, const char *sandbox, bool exact, bool learn,
			   const char *where)
{
	enum { MAX_KINDS = 32, MAX_READ = 16 << 20 };
	struct denial d[MAX_KINDS], learned[MAX_KINDS];
	size_t nd = 0, nlearned = 0;
	bool more_learned = false;
	uint64_t total = 0, other = 0;
	_cleanup_free_ char *buf = malloc(65536 + 1);
	if (!buf)
		return;
	size_t have = 0;
	bool cut = false, skip = false;
	for (off_t done = 0;;) {
		if (done >= MAX_READ) {
			cut = true;
			break;
		}
		ssize_t k = pread(fd, buf + have, 65536 - have, off + done);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		done += k;
		have += (size_t)k;
		buf[have] = '\0';
		char *line = buf, *nl;
		if (skip) {
			/* The rest of a line too long to read: up to its end. */
			nl = memchr(buf, '\n', have);
			if (!nl) {
				have = 0;
				continue;
			}
			line = nl + 1;
			skip = false;
		}
		while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
			*nl = '\0';
			char dec[16], num[24], host[256], reason[256], rule[8], who[40], kind[16];
			bool mine = !sandbox || (audit_field(line, "sandbox", who, sizeof(who)) &&
						 strcmp(who, sandbox) == 0);
			bool dns = audit_field(line, "kind", kind, sizeof(kind)) &&
				   strcmp(kind, "dns") == 0;
			if (!mine || dns || (!exact && strstr(line, ",\"repeated\":"))) {
				line = nl + 1;
				continue;
			}
			/* --network learn: what went out by the open network's own
			 * allowing (rule "open"), not a rule of the policy's, is what
			 * rules must allow. */
			if (learn && audit_field(line, "decision", dec, sizeof(dec)) &&
			    strcmp(dec, "allow") == 0 &&
			    audit_field(line, "rule", rule, sizeof(rule)) &&
			    strcmp(rule, "open") == 0 &&
			    audit_field(line, "host", host, sizeof(host))) {
				uint64_t v;
				unsigned port = 0;
				if (audit_field(line, "port", num, sizeof(num)) &&
				    parse_u64(num, &v) == 0 && v < 65536)
					port = (unsigned)v;
				size_t i = 0;
				while (i < nlearned && !(learned[i].port == port &&
							 strcmp(learned[i].host, host) == 0))
					i++;
				if (i == nlearned && nlearned < MAX_KINDS) {
					learned[nlearned] = (struct denial){ .port = port };
					snprintf(learned[nlearned].host,
						 sizeof(learned[nlearned].host), "%s", host);
					nlearned++;
				} else if (i == nlearned) {
					more_learned = true;
				}
			}
			if (audit_field(line, "decision", dec, sizeof(dec)) &&
			    strcmp(dec, "deny") == 0 &&
			    audit_field(line, "reason", reason, sizeof(reason))) {
				/* A request with no host (malformed, one connection too
				 * many) is refused too. */
				if (!audit_field(line, "host", host, sizeof(host)))
					snprintf(host, sizeof(host), "(no host)");
				unsigned port = 0;
				uint64_t v, times = 1;
				if (audit_field(line, "port", num, sizeof(num)) &&
				    parse_u64(num, &v) == 0 && v < 65536)
					port = (unsigned)v;
				if (audit_field(line, "repeated", num, sizeof(num)) &&
				    parse_u64(num, &v) == 0 && v < (1ull << 40))
					times = v;
				total += times;
				size_t i = 0;
				while (i < nd &&
				       !(d[i].port == port && strcmp(d[i].host, host) == 0 &&
					 strcmp(d[i].reason, reason) == 0))
					i++;
				if (i == nd && nd < MAX_KINDS) {
					d[nd] = (struct denial){ .port = port };
					snprintf(d[i].host, sizeof(d[i].host), "%s", host);
					snprintf(d[i].reason, sizeof(d[i].reason), "%s", reason);
					nd++;
				}
				if (i < nd)
					d[i].count += times;
				else
					other += times;
			}
			line = nl + 1;
		}
		/* A line longer than the buffer is skipped whole. */
		size_t rest = have - (size_t)(line - buf);
		if (rest == 65536) {
			rest = 0;
			skip = true;
		}
		memmove(buf, line, rest);
		have = rest;
	}
	if (nlearned) {
		log_warning("--network learn: the rules this command needed:");
		for (size_t i = 0; i < nlearned; i++) {
			char rule_opt[300];
			if (denial_hint("no rule allows this host", learned[i].host,
					learned[i].port, rule_opt, sizeof(rule_opt)))
				log_warning("  %s", rule_opt);
		}
		if (more_learned)
			log_warning("  and more (the audit log has each)");
	}
	if (cut)
		log_warning("more than %d MiB of the gateway's audit lines: what follows is of "
			    "the first only (%s)",
			    MAX_READ >> 20, where);
	if (total == 0)
		return;
	if (exact)
		log_warning("the gateway refused %" PRIu64 " request%s (%s):", total,
			    total == 1 ? "" : "s", where);
	else
		log_warning("the gateway refused requests (%s):", where);
	for (size_t i = 0; i < nd; i++) {
		char hint[256], times[32] = "";
		bool hinted = denial_hint(d[i].reason, d[i].host, d[i].port, hint, sizeof(hint));
		if (exact)
			snprintf(times, sizeof(times), "  %" PRIu64 "x", d[i].count);
		log_warning("  %s:%u%s  %s%s%s%s", d[i].host, d[i].port, times, d[i].reason,
			    hinted ? "  (to allow it: " : "", hinted ? hint : "",
			    hinted ? ")" : "");
	}
	if (other && exact)
		log_warning("  and %" PRIu64 " more to other hosts", other);
	else if (other)
		log_warning("  and more to other hosts");
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

/* ---- the egress gateway of a sandbox with a network (control/net.h) ---- */

/* Starts the gateway of a sandbox with a network; 0, or an exit status
 * after a message. */
static int net_setup(struct options *o, const struct sbx_settings *set, uint32_t gw_uid,
		     const char *audit, bool detach, struct ctl_net *n, struct al_error *err)
{
	struct gw_options gopts;
	cli_gw_fill(&o->gw, GW_MODE_RESTRICTED, "sandbox", &gopts);
	struct ctl_net_opts no = { .gw = &gopts,
				   .set = set,
				   .gw_uid = gw_uid,
				   .audit_file = audit,
				   .detach = detach,
				   .log_fd = detach ? -1 : 2 };
	if (ctl_net_setup(n, &no, &o->spec, err) < 0)
		return cli_fail("%s", al_error_message(err));
	return 0;
}

static void when_utc(int64_t secs, char out[32])
{
	struct tm tm;
	time_t t = (time_t)secs;
	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static const char *state_name(const struct sbx_info *info)
{
	return info->running ? "running" : "dead";
}

/* Milliseconds until the sandbox expires (0: due), or -1 when nothing
 * says when (see struct sbx_info). */
static int64_t expires_in(const struct sbx_info *info)
{
	if (!info->expires_at_ms)
		return -1;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	return info->expires_at_ms > now ? info->expires_at_ms - now : 0;
}

/* The EXPIRES column: "-" (none), "in 5s", "in 59m", "in 3h", "in 6d",
 * "now" (due: the next `sandbox gc` destroys it), "when idle" (only --idle,
 * and a command runs), "?" (cannot be told: inspect says why). */
static void expires_text(const struct sbx_info *info, char out[32])
{
	int64_t left = expires_in(info);
	if (info->expiry_error[0])
		snprintf(out, 32, "?");
	else if (!info->ttl_ms && !info->idle_ms)
		snprintf(out, 32, "-");
	else if (left == 0)
		snprintf(out, 32, "now");
	else if (left < 0)
		snprintf(out, 32, "when idle");
	else if (left < 60000)
		snprintf(out, 32, "in %" PRId64 "s", (left + 999) / 1000);
	else if (left < 3600000)
		snprintf(out, 32, "in %" PRId64 "m", left / 60000);
	else if (left < 86400000)
		snprintf(out, 32, "in %" PRId64 "h", left / 3600000);
	else
		snprintf(out, 32, "in %" PRId64 "d", left / 86400000);
}

/* ,"ttl_ms":N|null,"idle_ms":N|null,"expires_at":"...Z"|null,
 * "expires_in_ms":N|null,"expiry_error":"..."|null */
static void json_expiry(const struct sbx_info *info)
{
	const uint64_t lim[2] = { info->ttl_ms, info->idle_ms };
	const char *const key[2] = { "ttl_ms", "idle_ms" };
	for (int i = 0; i < 2; i++) {
		if (lim[i])
			printf(",\"%s\":%" PRIu64, key[i], lim[i]);
		else
			printf(",\"%s\":null", key[i]);
	}
	int64_t left = expires_in(info);
	if (left >= 0) {
		char when[32];
		when_utc((info->expires_at_ms + 999) / 1000, when);
		printf(",\"expires_at\":\"%s\",\"expires_in_ms\":%" PRId64, when, left);
	} else {
		fputs(",\"expires_at\":null,\"expires_in_ms\":null", stdout);
	}
	fputc(',', stdout);
	cli_json_field(stdout, "expiry_error", info->expiry_error);
}

static const char *detached_state(const struct sbx_detached *d)
{
	return d->state == SBX_DETACHED_RUNNING ? "running" :
	       d->state == SBX_DETACHED_ENDED	? "ended" :
						  "lost";
}

/* det: inspect's list of detached commands (NULL: none shown). */
static void json_info(const struct sbx_info *info, const struct sbx_detached *det, size_t n_det)
{
	char when[32];
	when_utc(info->created, when);
	printf("{\"id\":\"%s\",\"kind\":\"%s\",\"state\":\"%s\",\"created\":\"%s\","
	       "\"network\":",
	       info->id, info->ephemeral ? "run" : "create", state_name(info), when);
	if (info->network[0])
		printf("\"%s\"", info->network);
	else
		fputs("null", stdout);
	fputc(',', stdout);
	cli_json_field(stdout, "image", info->image);
	fputc(',', stdout);
	cli_json_field(stdout, "workspace", info->workspace);
	fputc(',', stdout);
	cli_json_field(stdout, "home", info->home);
	printf(",\"user\":{\"uid\":%" PRIu32 ",\"gid\":%" PRIu32 "}", info->user.uid,
	       info->user.gid);
	printf(",\"memory_bytes\":%" PRIu64 ",\"oom_kills\":%" PRIu64 ",\"uids\":[%" PRIu32
	       ",%" PRIu32 "],",
	       info->memory_bytes, info->oom_kills, info->uid_first, info->uid_last);
	cli_json_field(stdout, "cgroup", info->cgroup);
	printf(",\"cgroup_version\":%d", info->cgroup_v2 ? 2 : 1);
	json_expiry(info);
	if (det) {
		fputs(",\"detached\":[", stdout);
		for (size_t i = 0; i < n_det; i++) {
			printf("%s{\"n\":%u,\"state\":\"%s\",", i ? "," : "", det[i].n,
			       detached_state(&det[i]));
			cli_json_field(stdout, "status", det[i].status);
			fputc(',', stdout);
			cli_json_field(stdout, "command", det[i].command);
			fputc('}', stdout);
		}
		fputc(']', stdout);
	}
	fputc('}', stdout);
}

static int do_run(int argc, char **argv)
{
	struct options o = { 0 };
	int oi;
	int r = parse_options(argc, argv, true, true, &o, &oi);
	if (r)
		return r == CLI_HELP_SHOWN ? 0 : r;
	char **cmd = command_argv(argc, argv, oi, 0);
	if (!cmd)
		return cli_fail("sandbox run needs a command after --");
	struct sbx_settings set;
	uint32_t gw_uid;
	if (start_settings(&set, &gw_uid))
		return EXIT_AIRLOCK_ERROR;
	struct sbx_result res;
	struct al_error err = { 0 };
	struct ctl_net n;
	ctl_net_init(&n);
	r = net_setup(&o, &set, gw_uid, o.audit, false, &n, &err);
	if (r) {
		ctl_net_done(&n, false);
		return r;
	}
	/* What the gateway refuses is summed up at the end: read back from
	 * the audit file (--audit's, reopened and checked to be the same), or
	 * else a memory file the gateway writes instead of the sandbox's own. */
	_cleanup_close_ int audit_rd = -1;
	off_t audit_from = 0;
	if (n.started && o.audit) {
		struct stat a, b;
		audit_rd = open_no_symlinks(AT_FDCWD, o.audit, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
		if (audit_rd >= 0 && (fstat(audit_rd, &a) < 0 || fstat(n.audit_fd, &b) < 0 ||
				      a.st_ino != b.st_ino || a.st_dev != b.st_dev))
			audit_rd = safe_close(audit_rd);
		audit_from = audit_rd >= 0 ? a.st_size : 0;
	} else if (n.started) {
		audit_rd = memfd_create("airlock-audit", MFD_CLOEXEC);
		if (audit_rd >= 0)
			n.audit_fd = fcntl(audit_rd, F_DUPFD_CLOEXEC, 3);
	}
	r = sbx_run(&set, &o.spec, cmd, &o.exec, &res, &err);
	char n_id[sizeof(n.sandbox_id)];
	memcpy(n_id, n.sandbox_id, sizeof(n_id));
	ctl_net_done(&n, false);
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	if (audit_rd >= 0)
		report_denials(audit_rd, audit_from, n_id[0] ? n_id : NULL, true, o.spec.learn,
			       o.audit ? "the audit log has each" : "--audit FILE keeps each");
	return report(&res);
}

static int do_create(int argc, char **argv)
{
	struct options o = { 0 };
	int oi;
	int r = parse_options(argc, argv, true, false, &o, &oi);
	if (r)
		return r == CLI_HELP_SHOWN ? 0 : r;
	if (oi < argc)
		return cli_fail("sandbox create takes no command (use `sandbox exec`)");
	struct sbx_settings set;
	uint32_t gw_uid;
	if (start_settings(&set, &gw_uid))
		return EXIT_AIRLOCK_ERROR;
	char id[SBX_ID_LEN + 1];
	struct al_error err = { 0 };
	struct ctl_net n;
	ctl_net_init(&n);
	r = net_setup(&o, &set, gw_uid, NULL, true, &n, &err);
	if (r) {
		ctl_net_done(&n, false);
		return r;
	}
	r = sbx_create(&set, &o.spec, id, &err);
	ctl_net_done(&n, r >= 0);
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	struct sbx_info info;
	if (o.json && sbx_inspect(&set, id, &info, &err) == 0) {
		json_info(&info, NULL, 0);
		fputc('\n', stdout);
	} else if (o.json) {
		printf("{\"id\":\"%s\"}\n", id);
	} else {
		printf("%s\n", id);
	}
	return 0;
}

/* The sandbox id the user typed (a unique prefix too), made whole. */
static int resolve(const struct sbx_settings *set, const char *typed, char out[SBX_ID_LEN + 1])
{
	struct al_error err = { 0 };
	if (sbx_id_resolve(set, typed, out, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	return 0;
}

static int do_exec(int argc, char **argv)
{
	struct options o = { 0 };
	int oi;
	int r = parse_options(argc, argv, false, true, &o, &oi);
	if (r)
		return r == CLI_HELP_SHOWN ? 0 : r;
	if (oi >= argc)
		return cli_fail("sandbox exec needs an id");
	const char *typed = argv[oi];
	/* "exec ID --env X=1 -- cmd": the options were meant for exec. A
	 * command that starts with '-' comes after "--". */
	if (oi + 1 < argc && argv[oi + 1][0] == '-' && strcmp(argv[oi + 1], "--") != 0)
		return cli_fail("options go before the sandbox id: airlock sandbox exec [OPTIONS] "
				"%s -- CMD (found '%s' after the id)",
				typed, argv[oi + 1]);
	char **cmd = command_argv(argc, argv, oi, 1);
	if (!cmd)
		return cli_fail("sandbox exec needs a command after --");
	struct sbx_settings set;
	char id[SBX_ID_LEN + 1];
	if (settings(&set) || resolve(&set, typed, id))
		return EXIT_AIRLOCK_ERROR;
	/* The sandbox's gateway (if it has one) appends to its audit log: what
	 * it refuses this command (and under --network learn, what it let out
	 * with no rule) is summed up at the end. */
	struct sbx_info sinfo;
	struct al_error ierr = { 0 };
	bool learn = sbx_inspect(&set, id, &sinfo, &ierr) == 0 &&
		     strcmp(sinfo.network, "learn") == 0;
	char apath[4096];
	_cleanup_close_ int audit_rd = -1;
	struct stat ast;
	if (snprintf(apath, sizeof(apath), "%s/%s/audit.jsonl", set.state_dir, id) <
		    (int)sizeof(apath) &&
	    (audit_rd = open(apath, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)) >=
		    0 &&
	    (fstat(audit_rd, &ast) < 0 || !S_ISREG(ast.st_mode)))
		audit_rd = safe_close(audit_rd);
	struct sbx_result res;
	struct al_error err = { 0 };
	if (o.detach) {
		/* Its refusals are in the audit log, as every command's. */
		unsigned n;
		if (!o.exec.output_limit)
			o.exec.output_limit = DETACH_OUTPUT_LIMIT;
		if (sbx_exec_detached(&set, id, cmd, &o.exec, &n, &err) < 0)
			return cli_fail("%s", al_error_message(&err));
		/* Its number is how to reach it: not lost silently. */
		if (printf("%u\n", n) < 0 || fflush(stdout) != 0)
			return cli_fail("detached command %u started, but its number could not "
					"be written: %s",
					n, al_strerror(errno));
		return 0;
	}
	if (sbx_exec(&set, id, cmd, &o.exec, &res, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	if (audit_rd >= 0)
		report_denials(audit_rd, ast.st_size, id, false, learn, "the audit log has each");
	return report(&res);
}

/* `sandbox logs ID [N] [--follow]`: a detached command's output. */
static int do_logs(int argc, char **argv)
{
	static const char usage[] = "usage: airlock sandbox logs ID [N] [-f|--follow]";
	const char *typed = NULL, *num = NULL;
	bool follow = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--follow") == 0)
			follow = true;
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			sandbox_usage(stdout);
			return 0;
		} else if (argv[i][0] == '-')
			return cli_fail("unknown option %s (%s)", argv[i], usage);
		else if (!typed)
			typed = argv[i];
		else if (!num)
			num = argv[i];
		else
			return cli_fail("%s", usage);
	}
	if (!typed)
		return cli_fail("%s", usage);
	uint64_t n = 0;
	if (num && (parse_u64(num, &n) < 0 || n == 0 || n > UINT32_MAX))
		return cli_fail("a detached command's number is 1 or more (as `sandbox exec "
				"--detach` printed it), not '%s'",
				num);
	struct sbx_settings set;
	char id[SBX_ID_LEN + 1];
	if (settings(&set) || resolve(&set, typed, id))
		return EXIT_AIRLOCK_ERROR;
	struct al_error err = { 0 };
	_cleanup_close_ int fd = -1, logs = -1;
	unsigned which;
	if (sbx_detached_log(&set, id, (unsigned)n, &fd, &logs, &which, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	/* With --follow: new output as it is written, until the command has
	 * ended and all of it is out. inotify wakes us; the 1 s poll is a
	 * bound, not a guess (each round reads whatever is there). */
	_cleanup_close_ int ino = -1;
	if (follow) {
		ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
		char self[64];
		snprintf(self, sizeof(self), "/proc/self/fd/%d", logs);
		if (ino < 0 ||
		    inotify_add_watch(ino, self, IN_MODIFY | IN_MOVED_TO | IN_CLOSE_WRITE) < 0)
			return cli_fail("cannot follow the log: %s", al_strerror(errno));
	}
	char buf[65536];
	for (;;) {
		bool ended = follow && sbx_detached_ended(logs, which);
		ssize_t got;
		while ((got = read(fd, buf, sizeof(buf))) > 0)
			if (write_full(1, buf, (size_t)got) < 0)
				return 0; /* our reader went away */
		if (got < 0 && errno != EINTR)
			return cli_fail("cannot read the log: %s", al_strerror(errno));
		/* Ended before that last read: nothing more will come. */
		if (!follow || ended)
			return 0;
		struct pollfd p = { .fd = ino, .events = POLLIN };
		if (poll(&p, 1, 1000) > 0) {
			char ev[4096];
			while (read(ino, ev, sizeof(ev)) > 0)
				;
		}
	}
}

struct list_out {
	bool json;
	size_t n;
};

static int print_info(const struct sbx_info *info, void *ud)
{
	struct list_out *lo = ud;
	if (lo->json) {
		fputs(lo->n++ ? "," : "[", stdout);
		json_info(info, NULL, 0);
		return 0;
	}
	if (lo->n++ == 0)
		printf("%-16s  %-6s  %-7s  %-20s  %-10s  %-10s  %-4s  %-9s  %s\n", "ID", "KIND",
		       "STATE", "CREATED", "NETWORK", "IMAGE", "OOM", "EXPIRES", "WORKSPACE");
	char when[32], expires[32];
	when_utc(info->created, when);
	expires_text(info, expires);
	/* The whole path, the home after its workspace (whose owner it has). */
	printf("%-16s  %-6s  %-7s  %-20s  %-10s  %-10s  %-4" PRIu64 "  %-9s  %s%s%s%s\n", info->id,
	       info->ephemeral ? "run" : "create", state_name(info), when,
	       info->network[0] ? info->network : "?", info->image, info->oom_kills, expires,
	       info->workspace[0] ? info->workspace : "(fresh)", info->home[0] ? " (home " : "",
	       info->home, info->home[0] ? ")" : "");
	return 0;
}

/* --json, alone, or nothing. */
static int json_flag(int argc, char **argv, int first, const char *usage, bool *json)
{
	*json = false;
	for (int i = first; i < argc; i++) {
		if (strcmp(argv[i], "--json") != 0 || *json)
			return cli_fail("usage: %s", usage);
		*json = true;
	}
	return 0;
}

static int do_list(int argc, char **argv)
{
	struct list_out lo = { 0 };
	if (json_flag(argc, argv, 1, "airlock sandbox list [--json]", &lo.json))
		return EXIT_AIRLOCK_ERROR;
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	struct al_error err = { 0 };
	if (sbx_list(&set, print_info, &lo, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	if (lo.json)
		fputs(lo.n ? "]\n" : "[]\n", stdout);
	else if (lo.n == 0)
		printf("no sandboxes in %s\n", set.state_dir);
	return 0;
}

/* inspect's ttl:, idle: and expires: lines. */
static void print_expiry(const struct sbx_info *info)
{
	char ttl[32] = "none", idle[32] = "none", expires[32];
	if (info->ttl_ms)
		sbx_duration_format(info->ttl_ms, ttl, sizeof(ttl));
	if (info->idle_ms)
		sbx_duration_format(info->idle_ms, idle, sizeof(idle));
	expires_text(info, expires);
	printf("ttl:        %s\nidle:       %s\n", ttl, idle);
	if (info->expiry_error[0]) {
		printf("expires:    cannot tell: %s\n", info->expiry_error);
	} else if (!info->ttl_ms && !info->idle_ms) {
		printf("expires:    never\n");
	} else if (expires_in(info) < 0) {
		printf("expires:    once idle for %s (a command runs)\n", idle);
	} else {
		char when[32];
		when_utc((info->expires_at_ms + 999) / 1000, when);
		printf("expires:    %s (%s; by `airlock sandbox gc`)\n", expires, when);
	}
}

static int do_inspect(int argc, char **argv)
{
	bool json;
	if (argc < 2 || json_flag(argc, argv, 2, "airlock sandbox inspect ID [--json]", &json))
		return argc < 2 ? cli_fail("usage: airlock sandbox inspect ID [--json]") :
				  EXIT_AIRLOCK_ERROR;
	struct sbx_settings set;
	char id[SBX_ID_LEN + 1];
	if (settings(&set) || resolve(&set, argv[1], id))
		return EXIT_AIRLOCK_ERROR;
	struct sbx_info info;
	struct al_error err = { 0 };
	if (sbx_inspect(&set, id, &info, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	_cleanup_free_ struct sbx_detached *det = NULL;
	size_t n_det = 0;
	if (sbx_detached_list(&set, id, &det, &n_det, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	if (json) {
		json_info(&info, det ? det : (struct sbx_detached[1]){ { 0 } }, n_det);
		fputc('\n', stdout);
		return 0;
	}
	char when[32];
	when_utc(info.created, when);
	printf("id:         %s\nkind:       %s\nstate:      %s\ncreated:    %s\n"
	       "network:    %s\nimage:      %s\nworkspace:  %s\nhome:       %s\n",
	       info.id, info.ephemeral ? "run (gone with its command)" : "create",
	       state_name(&info), when, info.network[0] ? info.network : "?", info.image,
	       info.workspace[0] ? info.workspace : "(fresh)", info.home[0] ? info.home : "(none)");
	if (info.user.uid || info.user.gid)
		printf("user:       %" PRIu32 ":%" PRIu32 "\n", info.user.uid, info.user.gid);
	else
		printf("user:       root\n");
	if (info.memory_bytes)
		printf("memory:     %" PRIu64 " bytes\n", info.memory_bytes);
	else
		printf("memory:     no limit\n");
	printf("oom kills:  %" PRIu64 "\nuids:       %" PRIu32 "-%" PRIu32
	       " (root inside is %" PRIu32 ")\ncgroup:     %s (v%d)\n",
	       info.oom_kills, info.uid_first, info.uid_last, info.uid_first, info.cgroup,
	       info.cgroup_v2 ? 2 : 1);
	print_expiry(&info);
	for (size_t i = 0; i < n_det; i++)
		printf("%-12s%-3u %-22s %s\n", i ? "" : "detached:", det[i].n,
		       det[i].state == SBX_DETACHED_ENDED   ? det[i].status :
		       det[i].state == SBX_DETACHED_RUNNING ? "running" :
							      "lost (its supervisor was killed)",
		       det[i].command);
	return 0;
}

static int do_destroy(int argc, char **argv)
{
	if (argc < 2)
		return cli_fail("usage: airlock sandbox destroy ID...");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	_cleanup_free_ char(*ids)[SBX_ID_LEN + 1] = calloc((size_t)argc, sizeof(*ids));
	if (!ids)
		return cli_fail("out of memory");
	for (int i = 1; i < argc; i++) {
		struct al_error err = { 0 };
		int r = sbx_id_resolve(&set, argv[i], ids[i], &err);
		if (r == -EINVAL)
			return cli_fail("%s (nothing was destroyed)", al_error_message(&err));
		if (r < 0)
			ids[i][0] = '\0'; /* said below, in its turn */
	}
	/* Each one, whatever became of the others. */
	int rc = 0;
	for (int i = 1; i < argc; i++) {
		struct al_error err = { 0 };
		if (!ids[i][0])
			rc = cli_fail("no sandbox with id %s", argv[i]);
		else if (sbx_destroy(&set, ids[i], &err) < 0)
			rc = cli_fail("%s", al_error_message(&err));
	}
	return rc;
}

/* Prints the audit log of a sandbox's gateway. */
static int do_audit(int argc, char **argv)
{
	if (argc != 2)
		return cli_fail("usage: airlock sandbox audit ID");
	struct sbx_settings set;
	char id[SBX_ID_LEN + 1];
	if (settings(&set) || resolve(&set, argv[1], id))
		return EXIT_AIRLOCK_ERROR;
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/%s", set.state_dir, id) >= (int)sizeof(path))
		return cli_fail("state directory path too long");
	_cleanup_close_ int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		if (errno == ENOENT)
			return cli_fail("no sandbox %s", id);
		return cli_fail("cannot open sandbox %s: %s", id, al_strerror(errno));
	}
	_cleanup_close_ int fd = openat(dfd, "audit.jsonl",
					O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0; /* nothing audited yet */
		return cli_fail("cannot open the audit log of sandbox %s: %s", id,
				al_strerror(errno));
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
			return cli_fail("cannot read the audit log of sandbox %s: %s", id,
					al_strerror(errno));
		if (k == 0)
			break;
		int w = write_full(1, buf, (size_t)k);
		if (w < 0)
			return cli_fail("cannot write the audit log: %s", al_strerror(w));
	}
	return 0;
}

/* `sandbox policy ID FILE`: the sandbox's policy (rules, hosts,
 * allow_cidrs) from a whole policy file, replaced whole. */
/* The control socket of sandbox id's gateway. */
static int gateway_sock(const struct sbx_settings *set, const char *id, char *out, size_t size)
{
	int n = snprintf(out, size, "%s/%s/gateway.sock", set->state_dir, id);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* The sandbox typed (a prefix too) and its gateway's control socket; 0, or
 * an exit status after a message. */
static int gateway_of(const char *typed, char id[SBX_ID_LEN + 1], char *sock, size_t size)
{
	struct sbx_settings set;
	if (settings(&set) || resolve(&set, typed, id))
		return EXIT_AIRLOCK_ERROR;
	if (gateway_sock(&set, id, sock, size) < 0)
		return cli_fail("state directory path too long");
	return 0;
}

/* What a request to the gateway of sandbox id that failed with r says. */
static int gateway_fail(const char *id, int r, const char *msg)
{
	if (r == -ENOENT || r == -ECONNREFUSED)
		return cli_fail("sandbox %s has no gateway (no such sandbox, or --network none)",
				id);
	return cli_fail("%s", msg);
}

/* Takes a --json out of argv (once; a second is an error: -1). */
static int take_json(int *argc, char **argv)
{
	int found = 0;
	for (int i = 1; i < *argc; i++)
		if (strcmp(argv[i], "--json") == 0) {
			if (found++)
				return -1;
			memmove(&argv[i], &argv[i + 1], (size_t)(*argc - i) * sizeof(*argv));
			(*argc)--;
			i--;
		}
	return found;
}

static int do_policy(int argc, char **argv)
{
	int json = take_json(&argc, argv);
	if (argc != 3 || json < 0)
		return cli_fail("usage: airlock sandbox policy ID FILE [--json]");
	char id[SBX_ID_LEN + 1], sock[4096];
	int g = gateway_of(argv[1], id, sock, sizeof(sock));
	if (g)
		return g;
	char *text = NULL;
	size_t len = 0;
	int r = read_file_bounded(AT_FDCWD, argv[2], 1024 * 1024, &text, &len);
	if (r < 0)
		return cli_fail("%s: %s", argv[2],
				r == -EFBIG ? "larger than 1 MiB" : al_strerror(r));
	struct al_error err = { 0 };
	uint64_t gen = 0;
	r = gw_set_policy(sock, text, len, &gen, &err);
	free(text);
	if (r < 0) {
		/* The gateway names the text it was sent "policy": the file it
		 * came from is what the user can open. */
		const char *m = al_error_message(&err);
		if (strncmp(m, "policy:", 7) == 0 && r != -ENOENT && r != -ECONNREFUSED)
			return cli_fail("%s:%s", argv[2], m + 7);
		return gateway_fail(id, r, m);
	}
	if (json)
		printf("{\"generation\":%" PRIu64 "}\n", gen);
	else
		printf("policy generation %" PRIu64 "\n", gen);
	return 0;
}

/*
 * `sandbox budget ID [--requests N] [--bytes SIZE]`: a new egress budget
 * (0 or absent: no limit), counted from zero; prints what the old one spent.
 */
static int do_budget(int argc, char **argv)
{
	static const char usage[] =
		"usage: airlock sandbox budget ID [--requests N] [--bytes SIZE] [--json]";
	int json = take_json(&argc, argv);
	if (argc < 2 || json < 0)
		return cli_fail("%s", usage);
	uint64_t max_requests = 0, max_bytes = 0;
	bool seen_requests = false, seen_bytes = false;
	for (int i = 2; i < argc; i++) {
		/* --requests N or --requests=N; the same for --bytes. */
		const char *a = argv[i], *v = NULL;
		bool req = strncmp(a, "--requests", 10) == 0 && (a[10] == '=' || !a[10]);
		bool byt = strncmp(a, "--bytes", 7) == 0 && (a[7] == '=' || !a[7]);
		if (req || byt) {
			const char *eq = strchr(a, '=');
			v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
			if (!v)
				return cli_fail("option %s needs a value", a);
		}
		if (req && !seen_requests) {
			seen_requests = true;
			if (parse_u64(v, &max_requests) < 0)
				return cli_fail("--requests: '%s' is not a number", v);
		} else if (byt && !seen_bytes) {
			seen_bytes = true;
			if (parse_size(v, &max_bytes) < 0)
				return cli_fail(
					"--bytes: '%s' is not a size (1048576, 512K, 10M ...)", v);
		} else {
			return cli_fail("%s", usage);
		}
	}
	char id[SBX_ID_LEN + 1], sock[4096];
	int g = gateway_of(argv[1], id, sock, sizeof(sock));
	if (g)
		return g;
	struct al_error err = { 0 };
	struct gw_budget_used used;
	int r = gw_set_budget(sock, max_requests, max_bytes, &used, &err);
	if (r < 0)
		return gateway_fail(id, r, al_error_message(&err));
	if (json)
		printf("{\"previous\":{\"requests\":%" PRIu64 ",\"bytes\":%" PRIu64 "}}\n",
		       used.requests, used.bytes);
	else
		printf("budget set; the previous one spent %" PRIu64 " requests, %" PRIu64
		       " bytes\n",
		       used.requests, used.bytes);
	return 0;
}

static void said_expired(const char *id, const char *why, void *ud)
{
	size_t *n_json = ud;
	if (!n_json) {
		printf("destroyed sandbox %s (%s)\n", id, why);
		return;
	}
	printf("%s{\"id\":\"%s\",", (*n_json)++ ? "," : "", id);
	cli_json_field(stdout, "reason", why);
	fputc('}', stdout);
}

static int do_gc(int argc, char **argv)
{
	int json = take_json(&argc, argv);
	if (argc > 1 || json < 0)
		return cli_fail("sandbox gc takes no arguments but --json");
	struct sbx_settings set;
	if (settings(&set))
		return EXIT_AIRLOCK_ERROR;
	/* The expired first: what they leave is then debris like any. */
	struct al_error xerr = { 0 };
	size_t n_json = 0;
	if (json)
		fputs("{\"destroyed\":[", stdout);
	int xr = sbx_gc_expired(&set, said_expired, json ? &n_json : NULL, &xerr);
	unsigned removed = 0;
	struct al_error err = { 0 };
	int r = sbx_gc(&set, &removed, &err);
	if (json)
		printf("],\"removed\":%u}\n", removed);
	else
		printf("removed %u leftover%s\n", removed, removed == 1 ? "" : "s");
	fflush(stdout);
	int rc = 0;
	if (xr < 0)
		rc = cli_fail("%s", al_error_message(&xerr));
	/* (Both say so when the caller is not root: once is enough.) */
	if (r < 0 && !(xr < 0 && strcmp(al_error_message(&xerr), al_error_message(&err)) == 0))
		rc = cli_fail("%s", al_error_message(&err));
	return rc;
}

int cmd_sandbox(int argc, char **argv)
{
	if (argc < 2) {
		sandbox_usage(stderr);
		return EXIT_AIRLOCK_ERROR;
	}
	const char *sub = argv[1];
	/* The commands without options of their own have --help too. */
	static const char *const plain[] = { "list",   "inspect", "destroy", "gc", "audit",
					     "policy", "budget",  "logs",    NULL };
	for (size_t i = 0; plain[i]; i++)
		if (strcmp(sub, plain[i]) == 0 && argc > 2 &&
		    (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
			sandbox_usage(stdout);
			return 0;
		}
	if (strcmp(sub, "run") == 0)
		return do_run(argc - 1, argv + 1);
	if (strcmp(sub, "create") == 0)
		return do_create(argc - 1, argv + 1);
	if (strcmp(sub, "exec") == 0)
		return do_exec(argc - 1, argv + 1);
	if (strcmp(sub, "list") == 0)
		return do_list(argc - 1, argv + 1);
	if (strcmp(sub, "inspect") == 0)
		return do_inspect(argc - 1, argv + 1);
	if (strcmp(sub, "logs") == 0)
		return do_logs(argc - 1, argv + 1);
	if (strcmp(sub, "destroy") == 0)
		return do_destroy(argc - 1, argv + 1);
	if (strcmp(sub, "gc") == 0)
		return do_gc(argc - 1, argv + 1);
	if (strcmp(sub, "audit") == 0)
		return do_audit(argc - 1, argv + 1);
	if (strcmp(sub, "policy") == 0)
		return do_policy(argc - 1, argv + 1);
	if (strcmp(sub, "budget") == 0)
		return do_budget(argc - 1, argv + 1);
	if (strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0 || strcmp(sub, "-h") == 0) {
		sandbox_usage(stdout);
		return 0;
	}
	return cli_fail("unknown sandbox command '%s' (try `airlock sandbox --help`)", sub);
}

int cmd_doctor(int argc, char **argv)
{
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		fputs("usage: airlock doctor   what this host's kernel has of what sandboxes need "
		      "(exit 1: something is missing)\n",
		      stdout);
		return 0;
	}
	if (argc > 1)
		return cli_fail("doctor takes no arguments");
	return sbx_doctor(1) == 0 ? 0 : 1;
}

/* ---- for the manual and the completion (cli/doc.h) ---- */

static void sandbox_help(FILE *f, const void *ud)
{
	sandbox_usage(f);
}

void cli_doc_sandbox(struct cli_doc *ret)
{
	*ret = (struct cli_doc){ .name = "sandbox",
				 .help = sandbox_help,
				 .tables = { spec_optdefs, cli_gw_optdefs, exec_optdefs } };
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The session commands: run, turn, session, events, diff, fork, cancel,
 * and vault. They parse and print; src/control does the work (the daemon
 * will call the same functions).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/doc.h"
#include "common/buf.h"
#include "common/cleanup.h"
#include "common/parse.h"
#include "control/session.h"
#include "control/vault.h"

#define EXIT_TURN_FAILED 1

enum {
	OPT_CONFIG = 2048,
	OPT_TENANT,
	OPT_PRESET,
	OPT_REPO,
	OPT_SESSION,
	OPT_JSON,
	OPT_FOLLOW,
	OPT_AFTER,
	OPT_TEXT,
	OPT_ALL,
	OPT_QUIET,
	OPT_HELP,
};

static const struct cli_optdef common_optdefs[] = {
	{ "config", OPT_CONFIG, "FILE",
	  "the deployment config (default /etc/airlock/airlock.yaml,\n"
	  "or the built-in one when that does not exist)" },
	{ "tenant", OPT_TENANT, "T", "the tenant (default: local)" },
	{ "json", OPT_JSON, NULL, "machine-readable output (JSON lines)" },
	{ "help", OPT_HELP, NULL, "print this" },
	{ NULL, 0, NULL, NULL },
};

static const struct cli_optdef run_optdefs[] = {
	{ "preset", OPT_PRESET, "NAME", "the preset (default: the config's default_preset)" },
	{ "repo", OPT_REPO, "DIR|URL",
	  "the workspace: a local directory (copied in) or\nhttps://github.com/OWNER/REPO (cloned "
	  "inside)" },
	{ "session", OPT_SESSION, "ID", "a turn in this session instead of a new one" },
	{ "quiet", OPT_QUIET, NULL, "no progress lines on standard error" },
	{ NULL, 0, NULL, NULL },
};

static const struct cli_optdef events_optdefs[] = {
	{ "follow", OPT_FOLLOW, NULL, "wait for more until the session is idle" },
	{ "after", OPT_AFTER, "SEQ", "only events after this sequence number" },
	{ NULL, 0, NULL, NULL },
};

static const struct cli_optdef diff_optdefs[] = {
	{ "text", OPT_TEXT, NULL, "unified diffs of changed text files too" },
	{ "all", OPT_ALL, NULL, "the agent's home too (paths from the tree: workspace/, home/)" },
	{ NULL, 0, NULL, NULL },
};

struct opts {
	const char *config, *tenant, *preset, *repo, *session;
	bool json, follow, text, quiet, all;
	uint64_t after;
	char **args;
	int n_args;
};

struct cmd {
	const char *name;
	int (*run)(struct opts *o);
	const char *synopsis;
	const char *help;
	const struct cli_optdef *defs; /* besides the common ones */
	int min_args, max_args;
};

static void cmd_usage(FILE *f, const void *ud)
{
	const struct cmd *c = ud;
	fprintf(f, "usage: airlock %s %s\n  %s\n\noptions:\n", c->name, c->synopsis, c->help);
	if (c->defs)
		cli_print_optdefs(f, c->defs);
	cli_print_optdefs(f, common_optdefs);
}

static int parse(const struct cmd *c, int argc, char **argv, struct opts *o)
{
	struct option longopts[48];
	size_t n = cli_longopts(longopts, ARRAY_SIZE(longopts), 0, common_optdefs);
	if (c->defs)
		n = cli_longopts(longopts, ARRAY_SIZE(longopts), n, c->defs);
	memset(o, 0, sizeof(*o));
	o->tenant = "local";
	optind = 1;
	opterr = 0;
	int ch;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_CONFIG:
			o->config = optarg;
			break;
		case OPT_TENANT:
			o->tenant = optarg;
			break;
		case OPT_PRESET:
			o->preset = optarg;
			break;
		case OPT_REPO:
			o->repo = optarg;
			break;
		case OPT_SESSION:
			o->session = optarg;
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_FOLLOW:
			o->follow = true;
			break;
		case OPT_TEXT:
			o->text = true;
			break;
		case OPT_QUIET:
			o->quiet = true;
			break;
		case OPT_ALL:
			o->all = true;
			break;
		case OPT_AFTER:
			if (parse_u64(optarg, &o->after) < 0)
				return cli_fail("--after wants a sequence number, not '%s'",
						optarg);
			break;
		case OPT_HELP:
			cmd_usage(stdout, c);
			return CLI_HELP_SHOWN;
		default:
			return cli_bad_option(argv, longopts, c->name);
		}
	}
	o->args = argv + optind;
	o->n_args = argc - optind;
	if (o->n_args < c->min_args || o->n_args > c->max_args)
		return cli_fail("usage: airlock %s %s (see `airlock %s --help`)", c->name,
				c->synopsis, c->name);
	return 0;
}

/* ---- printing ---- */

static void on_progress(const char *line, void *ud)
{
	const struct opts *o = ud;
	if (!o->quiet)
		fprintf(stderr, "airlock: %s\n", line);
}

/*
 * What an agent printed, on a terminal: control characters (ESC above
 * all: colours, titles, clipboard writes, cursor moves) and C1 controls
 * shown escaped, never sent; newlines kept where multiline.
 */
/* The length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len = c >= 0xc2 && c <= 0xdf ? 2 :
		     c >= 0xe0 && c <= 0xef ? 3 :
		     c >= 0xf0 && c <= 0xf4 ? 4 :
					      0;
	if (len == 0 || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	/* No overlong forms, no surrogates, nothing past U+10FFFF. */
	if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
	    (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
		return 0;
	return len;
}

/*
 * Text from an agent or a workspace, made harmless for a terminal: control
 * characters (C0, DEL, and C1 written as UTF-8) as escapes, and any byte
 * that is not part of valid UTF-8 as \xNN (a lone 0x9b is a CSI to a
 * terminal that is not in UTF-8).
 */
static void put_safe(FILE *f, const char *s, size_t n, bool multiline)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = u[i];
		if (c < 0x80) {
			if ((c == '\n' && multiline) || c == '\t' || (c >= 0x20 && c != 0x7f))
				fputc(c, f);
			else
				fprintf(f, "\\x%02x", c);
			continue;
		}
		size_t len = utf8_len(u + i, n - i);
		if (len == 0) {
			fprintf(f, "\\x%02x", c);
		} else if (c == 0xc2 && u[i + 1] <= 0x9f) {
			fprintf(f, "\\u%04x", u[i + 1]);
			i++;
		} else {
			fwrite(u + i, 1, len, f);
			i += len - 1;
		}
	}
}

static void puts_safe(const char *s, bool multiline)
{
	put_safe(stdout, s, strlen(s), multiline);
}

static const char *jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static void print_event(const struct ctl_event_row *e, bool json)
{
	if (json) {
		printf("{\"seq\":%" PRIu64 ",\"turn\":%u,\"at\":%" PRId64
		       ",\"kind\":\"%s\",\"data\":%s}\n",
		       e->seq, e->turn, e->at, e->kind, e->data);
		fflush(stdout);
		return;
	}
	json_t *d = json_loads(e->data, 0, NULL);
	if (!d)
		return;
	if (strcmp(e->kind, "text") == 0) {
		puts_safe(jstr(d, "text"), true);
		putchar('\n');
	} else if (strcmp(e->kind, "tool_call") == 0) {
		json_t *in = json_object_get(d, "input");
		char *s = in ? json_dumps(in, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
		fputs("-> ", stdout);
		puts_safe(jstr(d, "name"), false);
		putchar(' ');
		if (s)
			put_safe(stdout, s, strlen(s) > 200 ? 200 : strlen(s), false);
		putchar('\n');
		free(s);
	} else if (strcmp(e->kind, "tool_result") == 0) {
		const char *out = jstr(d, "output");
		const char *nl = strchr(out, '\n');
		size_t len = nl ? (size_t)(nl - out) : strlen(out);
		fputs(json_is_true(json_object_get(d, "is_error")) ? "<- error: " : "<- ", stdout);
		put_safe(stdout, out, len > 200 ? 200 : len, false);
		puts(nl || len > 200 ? " ..." : "");
	} else if (strcmp(e->kind, "error") == 0) {
		fputs("error: ", stdout);
		puts_safe(jstr(d, "message"), false);
		putchar('\n');
	}
	json_decref(d);
	fflush(stdout);
}

static void on_event(const struct ctl_event_row *e, void *ud)
{
	const struct opts *o = ud;
	print_event(e, o->json);
}

static void print_session(const struct ctl_session *s, bool json)
{
	if (json) {
		json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:i}",
				      "id", s->id, "tenant", s->tenant, "preset", s->preset,
				      "agent", s->agent, "source", s->source, "forked_from",
				      s->forked_from, "last_checkpoint", s->last_checkpoint,
				      "sandbox", s->sandbox_id, "created", (json_int_t)s->created,
				      "updated", (json_int_t)s->updated, "turns", (int)s->turns);
		char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (t)
			printf("%s\n", t);
		free(t);
		json_decref(j);
		return;
	}
	printf("%s  %-10s %-10s turns %-3u %s%s\n", s->id, s->preset, s->agent, s->turns,
	       s->source[0] ? s->source : "(empty)", s->sandbox_id[0] ? "  [sandbox live]" : "");
}

static void print_turn(const struct ctl_turn *t, bool json)
{
	const struct ctl_usage *u = &t->usage;
	if (json) {
		json_t *j = json_pack("{s:s, s:i, s:s, s:s, s:s, s:{s:I, s:I, s:I, s:I}}",
				      "session", t->session, "turn", (int)t->n, "state",
				      ctl_turn_state_name(t->state), "reason", t->reason,
				      "checkpoint", t->checkpoint, "usage", "input_tokens",
				      (json_int_t)u->input_tokens, "output_tokens",
				      (json_int_t)u->output_tokens, "cache_read_tokens",
				      (json_int_t)u->cache_read_tokens, "cache_write_tokens",
				      (json_int_t)u->cache_write_tokens);
		if (j && u->have_cost)
			json_object_set_new(json_object_get(j, "usage"), "cost_usd",
					    json_real(u->cost_usd));
		char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (s)
			printf("{\"result\":%s}\n", s);
		free(s);
		json_decref(j);
		return;
	}
	printf("turn %u %s%s", t->n, ctl_turn_state_name(t->state), t->reason[0] ? ": " : "");
	puts_safe(t->reason, false);
	putchar('\n');
	printf("usage: %" PRIu64 " input tokens, %" PRIu64 " output tokens", u->input_tokens,
	       u->output_tokens);
	if (u->cache_read_tokens || u->cache_write_tokens)
		printf(" (cache: %" PRIu64 " read, %" PRIu64 " written)", u->cache_read_tokens,
		       u->cache_write_tokens);
	if (u->have_cost)
		printf(", $%.4f", u->cost_usd);
	printf("\n");
	if (t->checkpoint[0])
		printf("checkpoint %.16s\n", t->checkpoint);
}

static int open_ctx(const struct opts *o, struct ctl_ctx *c)
{
	struct al_error err = { 0 };
	if (ctl_ctx_open(c, o->config, &err) < 0) {
		ctl_ctx_close(c);
		return cli_fail("%s", al_error_message(&err));
	}
	c->trusted = true; /* the command line is a local caller */
	return 0;
}

/* ---- run and turn ---- */

static int turn_exit(const struct ctl_turn *t, bool timed_out)
{
	if (t->state == CTL_TURN_SUCCEEDED)
		return 0;
	return timed_out ? EXIT_TIMED_OUT : EXIT_TURN_FAILED;
}

static int do_turn(struct ctl_ctx *c, const struct opts *o, const char *session, const char *prompt)
{
	struct ctl_observer obs = { on_progress, on_event, (void *)o };
	struct ctl_turn t = { 0 };
	struct al_error err = { 0 };
	bool timed_out = false;
	int r = ctl_turn_run(c, o->tenant, session, prompt, &obs, &t, &timed_out, &err);
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	print_turn(&t, o->json);
	if (!o->json && t.state == CTL_TURN_SUCCEEDED) {
		struct buf b;
		buf_init(&b, 1u << 20);
		if (ctl_session_diff(c, o->tenant, session, t.n, false, false, &b, &err) == 0) {
			size_t lines = 0;
			for (size_t i = 0; i < b.len; i++)
				lines += b.data[i] == '\n';
			printf("changed: %zu path%s\n", lines, lines == 1 ? "" : "s");
			if (b.len)
				put_safe(stdout, b.data, b.len, true);
		}
		buf_free(&b);
	}
	int code = turn_exit(&t, timed_out);
	ctl_turn_clear(&t);
	return code;
}

static int cmd_run(struct opts *o)
{
	_cleanup_(ctl_ctx_close) struct ctl_ctx c;
	int r = open_ctx(o, &c);
	if (r)
		return r;
	char session[CTL_ID_LEN + 1];
	struct al_error err = { 0 };
	if (o->session) {
		struct ctl_session s;
		if (ctl_db_session_get(c.db, o->tenant, o->session, &s, &err) < 0)
			return cli_fail("%s", al_error_message(&err));
		memcpy(session, s.id, sizeof(session));
	} else {
		struct ctl_observer obs = { on_progress, NULL, o };
		struct ctl_session s;
		char abs[4096];
		const char *src = o->repo;
		if (src && src[0] != '/' && !strstr(src, "://") && !strstr(src, "::") &&
		    !strchr(src, '@')) {
			if (!realpath(src, abs))
				return cli_fail("--repo %s: %s", src, al_strerror(errno));
			src = abs;
		}
		if (ctl_session_create(&c, o->tenant, o->preset, src, &obs, &s, &err) < 0)
			return cli_fail("%s", al_error_message(&err));
		memcpy(session, s.id, sizeof(session));
	}
	if (o->json)
		printf("{\"session\":\"%s\"}\n", session);
	else
		fprintf(stderr, "airlock: session %s\n", session);
	fflush(stdout);
	return do_turn(&c, o, session, o->args[0]);
}

static int cmd_turn(struct opts *o)
{
	_cleanup_(ctl_ctx_close) struct ctl_ctx c;
	int r = open_ctx(o, &c);
	if (r)
		return r;
	return do_turn(&c, o, o->args[0], o->args[1]);
}

/* ---- sessions ---- */

static int list_fn(const struct ctl_session *s, void *ud)
{
	const struct opts *o = ud;
	print_session(s, o->json);
	return 0;
}

static int turn_fn(const struct ctl_turn *t, void *ud)
{
	const struct opts *o = ud;
	if (o->json) {
		print_turn(t, true);
		return 0;
	}
	printf("  turn %-3u %-10s %s", t->n, ctl_turn_state_name(t->state),
	       t->checkpoint[0] ? "checkpoint " : "");
	puts_safe(t->checkpoint[0] ? t->checkpoint : t->reason, false);
	putchar('\n');
	return 0;
}

static int cmd_session(struct opts *o)
{
	_cleanup_(ctl_ctx_close) struct ctl_ctx c;
	int r = open_ctx(o, &c);
	if (r)
		return r;
	struct al_error err = { 0 };
	const char *verb = o->args[0];
	if (strcmp(verb, "list") == 0 || strcmp(verb, "ls") == 0) {
		if (o->n_args != 1)
			return cli_fail("usage: airlock session list");
		if (ctl_db_session_list(c.db, o->tenant, list_fn, o, &err) < 0)
			return cli_fail("%s", al_error_message(&err));
		return 0;
	}
	if (strcmp(verb, "gc") == 0) {
		if (o->n_args != 1)
			return cli_fail("usage: airlock session gc");
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		unsigned n = 0;
		r = ctl_retention_gc(&c, (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000, &n,
				     &err);
		if (r < 0)
			return cli_fail("%s", al_error_message(&err));
		if (o->json)
			printf("{\"deleted\":%u}\n", n);
		else
			printf("%u idle session%s deleted\n", n, n == 1 ? "" : "s");
		return 0;
	}
	if (o->n_args != 2)
		return cli_fail("usage: airlock session %s ID", verb);
	if (strcmp(verb, "show") == 0) {
		struct ctl_session s;
		if (ctl_db_session_get(c.db, o->tenant, o->args[1], &s, &err) < 0)
			return cli_fail("%s", al_error_message(&err));
		print_session(&s, o->json);
		if (ctl_db_turn_list(c.db, o->tenant, s.id, turn_fn, o, &err) < 0)
			return cli_fail("%s", al_error_message(&err));
		return 0;
	}
	if (strcmp(verb, "rm") == 0 || strcmp(verb, "delete") == 0) {
		if (ctl_session_delete(&c, o->tenant, o->args[1], &err) < 0)
			return cli_fail("%s", al_error_message(&err));
		return 0;
	}
	return cli_fail("unknown session command '%s' (list, show, rm, gc)", verb);
}

/* ---- events ---- */

static int ev_fn(const struct ctl_event_row *e, void *ud)
{
	struct opts *o = ud;
	print_event(e, o->json);
	o->after = e->seq;
	return 0;
}

static bool session_busy(struct ctl_ctx *c, const char *tenant, const char *id)
{
	struct ctl_session s;
	struct al_error err = { 0 };
	if (ctl_db_session_get(c->db, tenant, id, &s, &err) < 0 || s.turns == 0)
		return false;
	struct ctl_turn t = { 0 };
	bool busy = ctl_db_turn_get(c->db, tenant, id, s.turns, &t, &err) == 0 &&
		    !ctl_turn_state_terminal(t.state);
	ctl_turn_clear(&t);
	return busy;
}

static int cmd_events(struct opts *o)
{
	_cleanup_(ctl_ctx_close) struct ctl_ctx c;
	int r = open_ctx(o, &c);
	if (r)
		return r;
	struct al_error err = { 0 };
	struct ctl_session s;
	if (ctl_db_session_get(c.db, o->tenant, o->args[0], &s, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	for (;;) {
		if (ctl_db_event_list(c.db, o->tenant, s.id, o->after, 0, ev_fn, o, &err) < 0)
			return cli_fail("%s", al_error_message(&err));
		if (!o->follow || !session_busy(&c, o->tenant, s.id))
			break;
		struct timespec ts = { 0, 200 * 1000000L };
		nanosleep(&ts, NULL);
	}
	/* What came between the last read and the session going idle. */
	if (o->follow && ctl_db_event_list(c.db, o->tenant, s.id, o->after, 0, ev_fn, o, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	return 0;
}

/* ---- diff, fork, cancel ---- */

static int cmd_diff(struct opts *o)
{
	_cleanup_(ctl_ctx_close) struct ctl_ctx c;
	int r = open_ctx(o, &c);
	if (r)
		return r;
	uint64_t n = 0;
	if (o->n_args == 2 && (parse_u64(o->args[1], &n) < 0 || n == 0 || n > UINT32_MAX))
		return cli_fail("a turn is a number from 1, not '%s'", o->args[1]);
	struct buf b;
	buf_init(&b, 256u << 20);
	struct al_error err = { 0 };
	r = ctl_session_diff(&c, o->tenant, o->args[0], (uint32_t)n, o->text, o->all, &b, &err);
	if (r < 0) {
		buf_free(&b);
		return cli_fail("%s", al_error_message(&err));
	}
	/* Paths with control characters come quoted; file contents (with
	 * --text) may hold anything. */
	if (b.len)
		put_safe(stdout, b.data, b.len, true);
	buf_free(&b);
	return 0;
}

static int cmd_fork(struct opts *o)
{
	_cleanup_(ctl_ctx_close) struct ctl_ctx c;
	int r = open_ctx(o, &c);
	if (r)
		return r;
	struct ctl_session s;
	struct al_error err = { 0 };
	if (ctl_session_fork(&c, o->tenant, o->args[0], &s, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	if (o->json)
		print_session(&s, true);
	else
		printf("%s\n", s.id);
	return 0;
}

static int cmd_cancel(struct opts *o)
{
	_cleanup_(ctl_ctx_close) struct ctl_ctx c;
	int r = open_ctx(o, &c);
	if (r)
		return r;
	uint32_t n = 0;
	struct al_error err = { 0 };
	if (ctl_turn_cancel(&c, o->tenant, o->args[0], &n, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	if (o->json)
		printf("{\"cancelled\":%u}\n", n);
	else
		printf("cancelled turn %u\n", n);
	return 0;
}

/* ---- vault ---- */

/* The terminal as it was before `vault set` turned echo off: put back by
 * a signal that ends the command too (tcsetattr is async-signal-safe). */
static struct termios vault_saved_tty;

static void vault_restore_tty(int sig)
{
	(void)tcsetattr(0, TCSAFLUSH, &vault_saved_tty);
	signal(sig, SIG_DFL);
	raise(sig);
}

static int cmd_vault(struct opts *o)
{
	struct al_error err = { 0 };
	struct ctl_conf *conf = NULL;
	if (ctl_conf_load(o->config, &conf, &err) < 0)
		return cli_fail("%s", al_error_message(&err));
	int r = 0;
	const char *verb = o->args[0];
	/* The default vault lives in the state directory. */
	if (mkdir(conf->state_dir, 0700) < 0 && errno != EEXIST)
		r = al_error_set_errno(&err, -errno, "cannot create %s", conf->state_dir);
	else if (strcmp(verb, "set") == 0 && o->n_args == 2) {
		/* On a terminal the key is typed (or pasted) unseen. */
		struct termios quiet;
		bool tty = isatty(0) && tcgetattr(0, &vault_saved_tty) == 0;
		/* Ctrl-C and the like end it with the echo back; Ctrl-Z and
		 * Ctrl-\ (a stop with echo on, a core with the key in it) are
		 * ignored while the value is read. */
		static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP };
		struct sigaction old[ARRAY_SIZE(sigs)];
		if (tty) {
			struct sigaction sa = { .sa_handler = vault_restore_tty };
			struct sigaction ign = { .sa_handler = SIG_IGN };
			sigemptyset(&sa.sa_mask);
			sigemptyset(&ign.sa_mask);
			for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
				sigaction(sigs[i],
					  sigs[i] == SIGQUIT || sigs[i] == SIGTSTP ? &ign : &sa,
					  &old[i]);
			quiet = vault_saved_tty;
			quiet.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
			(void)tcsetattr(0, TCSAFLUSH, &quiet);
			fprintf(stderr, "airlock: the value of %s, then Enter: ", o->args[1]);
		}
		r = ctl_vault_set_stdin(conf->vault, o->args[1], &err);
		if (tty) {
			(void)tcsetattr(0, TCSAFLUSH, &vault_saved_tty);
			for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
				sigaction(sigs[i], &old[i], NULL);
			fputc('\n', stderr);
		}
	} else if ((strcmp(verb, "rm") == 0 || strcmp(verb, "delete") == 0) && o->n_args == 2) {
		r = ctl_vault_remove(conf->vault, o->args[1], &err);
	} else if ((strcmp(verb, "list") == 0 || strcmp(verb, "ls") == 0) && o->n_args == 1) {
		r = ctl_vault_list(conf->vault, stdout, &err);
	} else {
		r = al_error_set(&err, -EINVAL, "usage: airlock vault set NAME | rm NAME | list");
	}
	ctl_conf_free(conf);
	if (r < 0)
		return cli_fail("%s", al_error_message(&err));
	return 0;
}

/* ---- the table ---- */

static const struct cmd cmds[] = {
	{ "run", cmd_run, "[--preset NAME] [--repo DIR|URL] [--session ID] PROMPT",
	  "a turn of an agent in a new session (or --session's), with a checkpoint after it",
	  run_optdefs, 1, 1 },
	{ "turn", cmd_turn, "SESSION PROMPT", "the next turn of a session", run_optdefs, 2, 2 },
	{ "session", cmd_session, "list | show ID | rm ID | gc",
	  "sessions: list, show, delete; gc deletes those idle past the config's retention", NULL,
	  1, 2 },
	{ "events", cmd_events, "SESSION [--follow] [--after SEQ]", "a session's agent events",
	  events_optdefs, 1, 1 },
	{ "diff", cmd_diff, "SESSION [TURN] [--text]",
	  "what a turn changed (default: the last that committed)", diff_optdefs, 1, 2 },
	{ "fork", cmd_fork, "SESSION|CHECKPOINT", "a new session from a checkpoint", NULL, 1, 1 },
	{ "cancel", cmd_cancel, "SESSION", "cancel the session's running or queued turn", NULL, 1,
	  1 },
	{ "vault", cmd_vault, "set NAME | rm NAME | list",
	  "the credentials the gateway injects (set reads the value from standard input)", NULL, 1,
	  2 },
};

int cmd_control(int argc, char **argv)
{
	for (size_t i = 0; i < ARRAY_SIZE(cmds); i++) {
		if (strcmp(argv[0], cmds[i].name) != 0)
			continue;
		struct opts o;
		int r = parse(&cmds[i], argc, argv, &o);
		if (r == CLI_HELP_SHOWN)
			return 0;
		if (r)
			return r;
		return cmds[i].run(&o);
	}
	return cli_fail("unknown command '%s'", argv[0]);
}

/* ---- for the manual and the completion (cli/doc.h) ---- */

int cli_doc_control(void)
{
	struct cli_doc docs[ARRAY_SIZE(cmds)];
	for (size_t i = 0; i < ARRAY_SIZE(cmds); i++) {
		docs[i] =
			(struct cli_doc){ .name = cmds[i].name, .help = cmd_usage, .ud = &cmds[i] };
		docs[i].tables[0] = cmds[i].defs ? cmds[i].defs : common_optdefs;
		docs[i].tables[1] = cmds[i].defs ? common_optdefs : NULL;
	}
	return cli_doc_print(stdout, docs, ARRAY_SIZE(cmds), NULL);
}

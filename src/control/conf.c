/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The deployment config (conf.h): agents, presets and where state lives.
 *
 * A preset's network policy is handed to its gateway as text in the
 * gateway's own format. It is made here from the agent's model hosts (a
 * rule and a credential per host, scoped to the model-call paths) followed
 * by whatever the preset's `policy:` map says, written as JSON whose
 * tokens stand on the lines they had in the config file: the gateway's
 * messages then name the deployment file and the right line.
 */
#include "control/conf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/config.h"
#include "common/encode.h"
#include "common/parse.h"
#include "gateway/gateway.h"

/* The shipped agent definitions (the agents directory's YAML files,
 * embedded at build time by scripts/embed.py). */
struct ctl_builtin_file {
	const char *name;
	const char *text;
};
extern const struct ctl_builtin_file ctl_builtin_agents[];
extern const size_t ctl_builtin_agents_n;

#define LIST_MAX 256 /* items in any list of the config */

/* ---- small helpers ---- */

static void free_strv(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* A NULL-terminated argv's length. */
static size_t strv_len(char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	return n;
}

static bool name_valid(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > CTL_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
			  c == '_' || (i > 0 && c == '.');
		if (!ok)
			return false;
	}
	return true;
}

static bool env_name_valid(const char *s)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
		      (*s >= '0' && *s <= '9') || *s == '_'))
			return false;
	return true;
}

/* A string list: a sequence of non-empty scalars. */
static int get_strv(const struct config_node *n, const char *path, bool argv_like, char ***ret,
		    size_t *ret_n, struct al_error *err)
{
	int r = config_expect_kind(n, path, CONFIG_SEQ, err);
	if (r < 0)
		return r;
	size_t count = config_node_count(n);
	if (count > LIST_MAX)
		return config_error(n, path, err, "at most %d items", LIST_MAX);
	if (argv_like && count == 0)
		return config_error(n, path, err, "expected at least the program's name");
	char **v = calloc(count + 1, sizeof(char *));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++) {
		const char *s;
		r = config_get_str(config_seq_item(n, i), NULL, &s, err);
		if (r < 0 || !(v[i] = strdup(s))) {
			free_strv(v, i);
			return r < 0 ? r : -ENOMEM;
		}
	}
	*ret = v;
	*ret_n = count;
	return 0;
}

/* An env map: NAME: value, into K=V strings. */
static int get_env(const struct config_node *n, const char *path, char ***ret, size_t *ret_n,
		   struct al_error *err)
{
	int r = config_expect_kind(n, path, CONFIG_MAP, err);
	if (r < 0)
		return r;
	size_t count = config_node_count(n);
	if (count > SBX_MAX_ENV / 2)
		return config_error(n, path, err, "at most %d variables", SBX_MAX_ENV / 2);
	char **v = calloc(count + 1, sizeof(char *));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++) {
		const char *k = config_map_key(n, i), *val;
		if (!env_name_valid(k)) {
			free_strv(v, i);
			return config_error(config_map_key_node(n, i), NULL, err,
					    "not a variable name");
		}
		const struct config_node *vn = config_map_value(n, i);
		if (config_node_kind(vn) != CONFIG_SCALAR) {
			free_strv(v, i);
			return config_error(vn, NULL, err, "expected a string");
		}
		val = config_node_scalar(vn);
		if (strchr(val, '\n')) {
			free_strv(v, i);
			return config_error(vn, NULL, err, "a value may not hold a newline");
		}
		if (asprintf(&v[i], "%s=%s", k, val) < 0) {
			free_strv(v, i);
			return -ENOMEM;
		}
	}
	*ret = v;
	*ret_n = count;
	return 0;
}

static int get_opt_str(const struct config_node *map, const char *key, char **ret,
		       struct al_error *err)
{
	const struct config_node *n = config_map_get(map, key);
	if (!n)
		return 0;
	const char *s;
	int r = config_get_str(n, NULL, &s, err);
	if (r < 0)
		return r;
	free(*ret);
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

static bool abs_path_ok(const char *p)
{
	if (p[0] != '/' || strlen(p) >= 512)
		return false;
	/* Normal form: no "//", no "." or ".." component, no trailing "/". */
	for (const char *s = p; *s; s++) {
		if (s[0] == '/' && (s[1] == '/' || (s[1] == '.' && (s[2] == '/' || !s[2])) ||
				    (s[1] == '.' && s[2] == '.' && (s[3] == '/' || !s[3]))))
			return false;
	}
	return strlen(p) == 1 || p[strlen(p) - 1] != '/';
}

/* ---- agents ---- */

static void agent_clear(struct ctl_agent *a)
{
	free(a->name);
	free(a->title);
	free(a->origin);
	free_strv(a->install, a->n_install);
	free_strv(a->argv_first, strv_len(a->argv_first));
	free_strv(a->argv_resume, strv_len(a->argv_resume));
	free(a->home);
	free_strv(a->file_paths, a->n_files);
	free_strv(a->file_texts, a->n_files);
	free_strv(a->env, a->n_env);
	for (size_t i = 0; i < a->n_hosts; i++) {
		struct ctl_model_host *h = &a->hosts[i];
		free(h->host);
		free_strv(h->paths, h->n_paths);
		free(h->secret);
		free(h->header);
		free(h->prefix);
		free(h->query);
		free(h->env);
		free(h->dummy);
	}
	free(a->hosts);
	memset(a, 0, sizeof(*a));
}

/* A relative path of plain names: no "", ".", ".." or other characters. */
static bool rel_path_ok(const char *p)
{
	if (!*p || strlen(p) > 255)
		return false;
	for (const char *seg = p; seg;) {
		const char *slash = strchr(seg, '/');
		size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
		if (n == 0 || (n == 1 && seg[0] == '.') ||
		    (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return false;
		for (size_t i = 0; i < n; i++) {
			char c = seg[i];
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
				return false;
		}
		seg = slash ? slash + 1 : NULL;
	}
	return true;
}

static int get_files(const struct config_node *n, struct ctl_agent *a, struct al_error *err)
{
	int r = config_expect_kind(n, NULL, CONFIG_MAP, err);
	if (r < 0)
		return r;
	size_t count = config_node_count(n);
	if (count > 16)
		return config_error(n, NULL, err, "at most 16 files");
	a->file_paths = calloc(count + 1, sizeof(char *));
	a->file_texts = calloc(count + 1, sizeof(char *));
	if (!a->file_paths || !a->file_texts)
		return -ENOMEM;
	for (size_t i = 0; i < count; i++) {
		const char *k = config_map_key(n, i), *text;
		if (!rel_path_ok(k))
			return config_error(config_map_key_node(n, i), NULL, err,
					    "a path relative to the home, of plain names");
		if ((r = config_get_str(config_map_value(n, i), NULL, &text, err)) < 0)
			return r;
		if (strlen(text) > 65536)
			return config_error(config_map_value(n, i), NULL, err, "at most 64 KiB");
		if (!(a->file_paths[i] = strdup(k)) || !(a->file_texts[i] = strdup(text)))
			return -ENOMEM;
		a->n_files = i + 1;
	}
	return 0;
}

/* {prompt} and {session} stand alone; nothing else may look like them. */
static int check_template(const struct config_node *n, char **argv, bool resume,
			  struct al_error *err)
{
	bool prompt = false, session = false;
	for (size_t i = 0; argv[i]; i++) {
		if (strcmp(argv[i], "{prompt}") == 0)
			prompt = true;
		else if (strcmp(argv[i], "{session}") == 0)
			session = true;
		else if (strchr(argv[i], '{') && strchr(argv[i], '}'))
			return config_error(config_seq_item(n, i), NULL, err,
					    "{prompt} and {session} must be whole arguments");
	}
	if (resume && !session)
		return config_error(n, NULL, err, "a resumed turn's arguments need {session}");
	(void)prompt;
	return 0;
}

static int parse_model_host(const struct config_node *n, struct ctl_model_host *h,
			    struct al_error *err)
{
	static const char *const keys[] = { "host",  "paths", "secret", "header", "prefix",
					    "query", "env",   "dummy",	NULL };
	int r = config_map_check_keys(n, NULL, keys, err);
	if (r < 0)
		return r;
	const struct config_node *v;
	r = config_map_require(n, NULL, "host", &v, err);
	if (r >= 0)
		r = get_opt_str(n, "host", &h->host, err);
	if (r >= 0)
		r = config_map_require(n, NULL, "secret", &v, err);
	if (r >= 0)
		r = get_opt_str(n, "secret", &h->secret, err);
	if (r >= 0)
		r = get_opt_str(n, "header", &h->header, err);
	if (r >= 0)
		r = get_opt_str(n, "prefix", &h->prefix, err);
	if (r >= 0)
		r = get_opt_str(n, "query", &h->query, err);
	if (r >= 0)
		r = get_opt_str(n, "env", &h->env, err);
	if (r >= 0)
		r = get_opt_str(n, "dummy", &h->dummy, err);
	if (r < 0)
		return r;
	if (!h->header == !h->query)
		return config_error(n, NULL, err, "give one of header or query");
	if (h->env && !env_name_valid(h->env))
		return config_error(config_map_get(n, "env"), NULL, err, "not a variable name");
	if ((v = config_map_get(n, "paths"))) {
		r = get_strv(v, NULL, false, &h->paths, &h->n_paths, err);
		if (r < 0)
			return r;
		for (size_t i = 0; i < h->n_paths; i++)
			if (h->paths[i][0] != '/')
				return config_error(config_seq_item(v, i), NULL, err,
						    "expected a path starting with /");
	}
	return 0;
}

static int parse_agent(const char *name, const struct config_node *n, const char *origin,
		       struct ctl_agent *a, struct al_error *err)
{
	static const char *const keys[] = { "title",	   "install", "parser", "home", "session",
					    "prompt",	   "first",   "resume", "env",	"node_heap",
					    "model_hosts", "files",   NULL };
	int r = config_expect_kind(n, NULL, CONFIG_MAP, err);
	if (r >= 0)
		r = config_map_check_keys(n, NULL, keys, err);
	if (r < 0)
		return r;
	if (!(a->name = strdup(name)) || !(a->origin = strdup(origin)))
		return -ENOMEM;
	const struct config_node *v;
	r = get_opt_str(n, "title", &a->title, err);
	if (r < 0)
		return r;
	if ((v = config_map_get(n, "install")) &&
	    (r = get_strv(v, NULL, false, &a->install, &a->n_install, err)) < 0)
		return r;
	const char *s;
	if ((r = config_map_require(n, NULL, "parser", &v, err)) < 0 ||
	    (r = config_get_str(v, NULL, &s, err)) < 0)
		return r;
	if (ctl_parser_from_name(s, &a->parser) < 0)
		return config_error(v, NULL, err,
				    "expected one of claude, gemini, codex, opencode, pi");
	a->home = strdup("/root");
	if (!a->home || (r = get_opt_str(n, "home", &a->home, err)) < 0)
		return r < 0 ? r : -ENOMEM;
	if (strcmp(a->home, "/root") != 0 &&
	    (strncmp(a->home, "/home/", 6) != 0 || !name_valid(a->home + 6)))
		return config_error(config_map_get(n, "home"), NULL, err,
				    "expected /root or /home/NAME");
	static const char *const session_modes[] = { "from-output", "choose", NULL };
	static const char *const prompt_modes[] = { "argv", "stdin", NULL };
	int mode = 0;
	if ((v = config_map_get(n, "session"))) {
		if ((r = config_get_enum(v, NULL, session_modes, &mode, err)) < 0)
			return r;
		a->choose_session = mode == 1;
	}
	mode = 0;
	if ((v = config_map_get(n, "prompt"))) {
		if ((r = config_get_enum(v, NULL, prompt_modes, &mode, err)) < 0)
			return r;
		a->prompt_stdin = mode == 1;
	}
	size_t dummy;
	if ((r = config_map_require(n, NULL, "first", &v, err)) < 0 ||
	    (r = get_strv(v, NULL, true, &a->argv_first, &dummy, err)) < 0 ||
	    (r = check_template(v, a->argv_first, false, err)) < 0)
		return r;
	if ((r = config_map_require(n, NULL, "resume", &v, err)) < 0 ||
	    (r = get_strv(v, NULL, true, &a->argv_resume, &dummy, err)) < 0 ||
	    (r = check_template(v, a->argv_resume, true, err)) < 0)
		return r;
	if (a->choose_session) {
		bool has = false;
		for (size_t i = 0; a->argv_first[i]; i++)
			has |= strcmp(a->argv_first[i], "{session}") == 0;
		if (!has)
			return config_error(config_map_get(n, "first"), NULL, err,
					    "session: choose needs {session} here");
	}
	if ((v = config_map_get(n, "env")) && (r = get_env(v, NULL, &a->env, &a->n_env, err)) < 0)
		return r;
	if ((v = config_map_get(n, "files")) && (r = get_files(v, a, err)) < 0)
		return r;
	if ((v = config_map_get(n, "node_heap")) &&
	    (r = config_get_bool(v, NULL, &a->node_heap, err)) < 0)
		return r;
	if ((r = config_map_require(n, NULL, "model_hosts", &v, err)) < 0 ||
	    (r = config_expect_kind(v, NULL, CONFIG_SEQ, err)) < 0)
		return r;
	size_t nh = config_node_count(v);
	if (nh == 0 || nh > 16)
		return config_error(v, NULL, err, "expected 1 to 16 hosts");
	if (!(a->hosts = calloc(nh, sizeof(*a->hosts))))
		return -ENOMEM;
	a->n_hosts = nh;
	for (size_t i = 0; i < nh; i++)
		if ((r = parse_model_host(config_seq_item(v, i), &a->hosts[i], err)) < 0)
			return r;
	return 0;
}

/* ---- presets ---- */

static void preset_clear(struct ctl_preset *p)
{
	free(p->name);
	free(p->image);
	free_strv(p->setup, p->n_setup);
	free(p->setup_policy);
	free(p->policy);
	free(p->policy_name);
	free_strv(p->github, p->n_github);
	free_strv(p->env, p->n_env);
	free_strv(p->upstream_cas, p->n_upstream_cas);
	memset(p, 0, sizeof(*p));
}

/* JSON for a config subtree, each token on the line it had in the file. */
struct jw {
	struct buf *b;
	unsigned line;
};

static int jw_to_line(struct jw *w, const struct config_node *n)
{
	unsigned want = config_node_line(n);
	while (w->line < want) {
		if (buf_append_char(w->b, '\n') < 0)
			return -ENOMEM;
		w->line++;
	}
	return 0;
}

static int jw_string(struct jw *w, const char *s)
{
	int r = buf_append_char(w->b, '"');
	for (; r >= 0 && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			r = buf_appendf(w->b, "\\%c", c);
		else if (c < 0x20)
			r = buf_appendf(w->b, "\\u%04x", c);
		else
			r = buf_append_char(w->b, (char)c);
	}
	return r < 0 ? r : buf_append_char(w->b, '"');
}

static int jw_node(struct jw *w, const struct config_node *n)
{
	int r = jw_to_line(w, n);
	if (r < 0)
		return r;
	switch (config_node_kind(n)) {
	case CONFIG_SCALAR:
		if (config_node_is_null(n))
			return buf_append_str(w->b, "null");
		return jw_string(w, config_node_scalar(n));
	case CONFIG_SEQ:
		r = buf_append_char(w->b, '[');
		for (size_t i = 0; r >= 0 && i < config_node_count(n); i++) {
			if (i)
				r = buf_append_char(w->b, ',');
			if (r >= 0)
				r = jw_node(w, config_seq_item(n, i));
		}
		return r < 0 ? r : buf_append_char(w->b, ']');
	case CONFIG_MAP:
		r = buf_append_char(w->b, '{');
		for (size_t i = 0; r >= 0 && i < config_node_count(n); i++) {
			if (i)
				r = buf_append_char(w->b, ',');
			if (r >= 0)
				r = jw_to_line(w, config_map_key_node(n, i));
			if (r >= 0)
				r = jw_string(w, config_map_key(n, i));
			if (r >= 0)
				r = buf_append_char(w->b, ':');
			if (r >= 0)
				r = jw_node(w, config_map_value(n, i));
		}
		return r < 0 ? r : buf_append_char(w->b, '}');
	}
	return -EINVAL;
}

/* The agent's rules and credentials: one rule and one credential per model
 * host, both scoped to the model-call paths. */
static int agent_policy_items(struct jw *w, const struct ctl_agent *a, bool credentials)
{
	int r = 0;
	for (size_t i = 0; r >= 0 && i < a->n_hosts; i++) {
		const struct ctl_model_host *h = &a->hosts[i];
		if (i)
			r = buf_append_char(w->b, ',');
		if (r >= 0)
			r = buf_appendf(w->b, "{\"%s\":", credentials ? "secret" : "id");
		if (r >= 0 && credentials)
			r = jw_string(w, h->secret);
		else if (r >= 0)
			r = buf_appendf(w->b, "\"%s-model-%zu\"", a->name, i + 1);
		if (r >= 0)
			r = buf_append_str(w->b, ",\"host\":");
		if (r >= 0)
			r = jw_string(w, h->host);
		if (r >= 0 && h->n_paths) {
			r = buf_append_str(w->b, ",\"paths\":[");
			for (size_t j = 0; r >= 0 && j < h->n_paths; j++) {
				if (j)
					r = buf_append_char(w->b, ',');
				if (r >= 0)
					r = jw_string(w, h->paths[j]);
			}
			if (r >= 0)
				r = buf_append_char(w->b, ']');
		}
		if (r >= 0 && credentials) {
			const char *const fields[][2] = {
				{ "header", h->header }, { "prefix", h->prefix },
				{ "query", h->query },	 { "env", h->env },
				{ "dummy", h->dummy },
			};
			for (size_t k = 0; r >= 0 && k < ARRAY_SIZE(fields); k++) {
				if (!fields[k][1])
					continue;
				r = buf_appendf(w->b, ",\"%s\":", fields[k][0]);
				if (r >= 0)
					r = jw_string(w, fields[k][1]);
			}
		}
		if (r >= 0)
			r = buf_append_char(w->b, '}');
	}
	return r;
}

/*
 * The policy text: {"rules": [agent's..., preset's...], "credentials":
 * [agent's..., preset's...], preset's other keys}. with_agent false: the
 * preset's map alone (a setup policy).
 */
static int make_policy(const struct ctl_agent *a, const struct config_node *pol, bool with_agent,
		       char **ret, struct al_error *err)
{
	struct buf b;
	buf_init(&b, 4u * 1024 * 1024);
	struct jw w = { .b = &b, .line = 1 };
	int r = buf_append_char(&b, '{');
	const char *const lists[] = { "rules", "credentials" };
	bool first = true;
	for (size_t l = 0; r >= 0 && l < 2; l++) {
		const struct config_node *mine = pol ? config_map_get(pol, lists[l]) : NULL;
		if (mine && config_node_kind(mine) != CONFIG_SEQ) {
			buf_free(&b);
			return config_error(mine, NULL, err, "expected a list");
		}
		if (!with_agent && !mine)
			continue;
		if (!first)
			r = buf_append_char(&b, ',');
		first = false;
		if (r >= 0)
			r = buf_appendf(&b, "\"%s\":[", lists[l]);
		bool any = false;
		if (r >= 0 && with_agent) {
			r = agent_policy_items(&w, a, l == 1);
			any = a->n_hosts > 0;
		}
		for (size_t i = 0; r >= 0 && mine && i < config_node_count(mine); i++) {
			if (any)
				r = buf_append_char(&b, ',');
			any = true;
			if (r >= 0)
				r = jw_node(&w, config_seq_item(mine, i));
		}
		if (r >= 0)
			r = buf_append_char(&b, ']');
	}
	for (size_t i = 0; r >= 0 && pol && i < config_node_count(pol); i++) {
		const char *k = config_map_key(pol, i);
		if (strcmp(k, "rules") == 0 || strcmp(k, "credentials") == 0)
			continue;
		if (!first)
			r = buf_append_char(&b, ',');
		first = false;
		if (r >= 0)
			r = jw_to_line(&w, config_map_key_node(pol, i));
		if (r >= 0)
			r = jw_string(&w, k);
		if (r >= 0)
			r = buf_append_char(&b, ':');
		if (r >= 0)
			r = jw_node(&w, config_map_value(pol, i));
	}
	if (r >= 0)
		r = buf_append_str(&b, "}\n");
	if (r < 0) {
		buf_free(&b);
		return r == -ENOMEM ? r : al_error_set(err, r, "policy too large");
	}
	size_t len;
	return buf_steal(&b, ret, &len);
}

/* Builds the policy as the gateway will, for its messages now. */
static int check_policy(const char *name, const char *text, enum sbx_network net,
			struct al_error *err)
{
	struct gw_options o = {
		.mode = net == SBX_NETWORK_OPEN ? GW_MODE_OPEN : GW_MODE_RESTRICTED,
		.label = "config",
		.policy_text = text,
		.policy_len = strlen(text),
		.policy_name = name,
		.policy_only = true,
	};
	struct gw_config *cfg = NULL;
	int r = gw_config_build(&o, &cfg, err);
	gw_config_free(cfg);
	return r;
}

static int parse_limits(const struct config_node *n, struct ctl_limits *l, struct al_error *err)
{
	static const char *const keys[] = {
		"memory",	   "pids",	   "cpus", "disk", "turn_time", "output",
		"egress_requests", "egress_bytes", NULL
	};
	int r = config_expect_kind(n, NULL, CONFIG_MAP, err);
	if (r >= 0)
		r = config_map_check_keys(n, NULL, keys, err);
	const struct config_node *v;
	if (r >= 0 && (v = config_map_get(n, "memory")))
		r = config_get_size(v, NULL, &l->memory, err);
	if (r >= 0 && (v = config_map_get(n, "pids")))
		r = config_get_u64(v, NULL, &l->pids, err);
	if (r >= 0 && (v = config_map_get(n, "disk")))
		r = config_get_size(v, NULL, &l->disk, err);
	if (r >= 0 && (v = config_map_get(n, "turn_time")))
		r = config_get_duration(v, NULL, &l->turn_ms, err);
	if (r >= 0 && (v = config_map_get(n, "output")))
		r = config_get_size(v, NULL, &l->output, err);
	if (r >= 0 && (v = config_map_get(n, "egress_requests")))
		r = config_get_u64(v, NULL, &l->egress_requests, err);
	if (r >= 0 && (v = config_map_get(n, "egress_bytes")))
		r = config_get_size(v, NULL, &l->egress_bytes, err);
	if (r >= 0 && (v = config_map_get(n, "cpus"))) {
		const char *s;
		r = config_get_str(v, NULL, &s, err);
		if (r >= 0 && parse_double_range(s, 0.01, 1024, &l->cpus) < 0)
			r = config_error(v, NULL, err, "expected a number of CPUs from 0.01");
	}
	if (r >= 0 && l->memory && l->memory < 64u * 1024 * 1024)
		r = config_error(config_map_get(n, "memory"), NULL, err, "at least 64M");
	if (r >= 0 && l->disk && l->disk < 16u * 1024 * 1024)
		r = config_error(config_map_get(n, "disk"), NULL, err, "at least 16M");
	if (r >= 0 && l->turn_ms && l->turn_ms < 1000)
		r = config_error(config_map_get(n, "turn_time"), NULL, err, "at least 1s");
	return r;
}

/* The version: a hash of what setup's result depends on. */
static void preset_version(struct ctl_preset *p)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned len = 0;
	if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1) {
		const char *image = p->image;
		EVP_DigestUpdate(ctx, "airlock-setup-1", 16);
		EVP_DigestUpdate(ctx, image, strlen(image) + 1);
		for (size_t i = 0; i < p->agent->n_install; i++)
			EVP_DigestUpdate(ctx, p->agent->install[i],
					 strlen(p->agent->install[i]) + 1);
		EVP_DigestUpdate(ctx, "\n", 1);
		for (size_t i = 0; i < p->n_setup; i++)
			EVP_DigestUpdate(ctx, p->setup[i], strlen(p->setup[i]) + 1);
		EVP_DigestFinal_ex(ctx, md, &len);
	}
	EVP_MD_CTX_free(ctx);
	enc_hex(md, len >= 8 ? 8 : 0, p->version);
	p->version[len >= 8 ? 16 : 0] = '\0';
}

static bool grant_pattern_ok(const char *s)
{
	const char *slash = strchr(s, '/');
	if (!slash || slash == s || strchr(slash + 1, '/') || !slash[1])
		return false;
	for (const char *c = s; *c; c++) {
		bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			  (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.' ||
			  *c == '/';
		if (!ok && !(*c == '*' && c == slash + 1 && !c[1]))
			return false;
	}
	return true;
}

/* A preset that installs its agent and says nothing of its setup's
 * network: the npm registry alone, read-only. (Where the registry resolves
 * to addresses the gateway's vetting refuses, the preset's setup policy
 * must say so with allow_cidrs.) */
static int default_setup_policy(struct ctl_preset *p, struct al_error *err)
{
	if (p->setup_policy || p->agent->n_install == 0)
		return 0;
	p->setup_policy = strdup("{\"rules\": [{\"id\": \"npm-registry\", \"host\": "
				 "\"registry.npmjs.org\", \"methods\": [\"GET\", \"HEAD\"]}]}\n");
	return p->setup_policy ? 0 : al_error_set(err, -ENOMEM, "out of memory");
}

static int parse_preset(struct ctl_conf *c, const char *name, const struct config_node *n,
			const char *file, struct ctl_preset *p, struct al_error *err)
{
	static const char *const keys[] = { "agent",  "image", "setup",	 "network",	"policy",
					    "github", "env",   "limits", "upstream_ca", NULL };
	int r = config_expect_kind(n, NULL, CONFIG_MAP, err);
	if (r >= 0)
		r = config_map_check_keys(n, NULL, keys, err);
	if (r < 0)
		return r;
	if (!(p->name = strdup(name)) || !(p->policy_name = strdup(file)))
		return -ENOMEM;
	const struct config_node *v;
	const char *s;
	if ((r = config_map_require(n, NULL, "agent", &v, err)) < 0 ||
	    (r = config_get_str(v, NULL, &s, err)) < 0)
		return r;
	p->agent = ctl_conf_agent(c, s);
	if (!p->agent)
		return config_error(v, NULL, err, "no agent of that name (agents: %s)",
				    "claude, gemini, codex, opencode, pi, or the file's own");
	p->image = strdup("host");
	if (!p->image || (r = get_opt_str(n, "image", &p->image, err)) < 0)
		return r < 0 ? r : -ENOMEM;
	if (strcmp(p->image, "host") != 0 && !abs_path_ok(p->image))
		return config_error(config_map_get(n, "image"), NULL, err,
				    "expected host or an absolute directory path");
	p->network = SBX_NETWORK_RESTRICTED;
	if ((v = config_map_get(n, "network"))) {
		static const char *const modes[] = { "none", "restricted", "open", NULL };
		int m;
		if ((r = config_get_enum(v, NULL, modes, &m, err)) < 0)
			return r;
		p->network = (enum sbx_network)m;
	}
	const struct config_node *pol = config_map_get(n, "policy");
	if (pol && (r = config_expect_kind(pol, NULL, CONFIG_MAP, err)) < 0)
		return r;
	if (p->network != SBX_NETWORK_NONE) {
		if ((r = make_policy(p->agent, pol, true, &p->policy, err)) < 0 ||
		    (r = check_policy(file, p->policy, p->network, err)) < 0)
			return r;
	} else if (pol) {
		return config_error(pol, NULL, err, "a preset with network none has no policy");
	}
	if ((v = config_map_get(n, "setup"))) {
		static const char *const skeys[] = { "commands", "policy", NULL };
		const struct config_node *cmds;
		if ((r = config_expect_kind(v, NULL, CONFIG_MAP, err)) < 0 ||
		    (r = config_map_check_keys(v, NULL, skeys, err)) < 0 ||
		    (r = config_map_require(v, NULL, "commands", &cmds, err)) < 0 ||
		    (r = get_strv(cmds, NULL, false, &p->setup, &p->n_setup, err)) < 0)
			return r;
		const struct config_node *sp = config_map_get(v, "policy");
		if (sp) {
			if ((r = config_expect_kind(sp, NULL, CONFIG_MAP, err)) < 0 ||
			    (r = make_policy(p->agent, sp, false, &p->setup_policy, err)) < 0 ||
			    (r = check_policy(file, p->setup_policy, SBX_NETWORK_RESTRICTED, err)) <
				    0)
				return r;
		}
	}
	if ((v = config_map_get(n, "github"))) {
		if ((r = get_strv(v, NULL, false, &p->github, &p->n_github, err)) < 0)
			return r;
		for (size_t i = 0; i < p->n_github; i++)
			if (!grant_pattern_ok(p->github[i]))
				return config_error(config_seq_item(v, i), NULL, err,
						    "expected OWNER/REPO or OWNER/*");
	}
	if ((v = config_map_get(n, "env")) && (r = get_env(v, NULL, &p->env, &p->n_env, err)) < 0)
		return r;
	if ((v = config_map_get(n, "upstream_ca"))) {
		if ((r = get_strv(v, NULL, false, &p->upstream_cas, &p->n_upstream_cas, err)) < 0)
			return r;
		for (size_t i = 0; i < p->n_upstream_cas; i++)
			if (!abs_path_ok(p->upstream_cas[i]))
				return config_error(config_seq_item(v, i), NULL, err,
						    "expected an absolute path");
	}
	/* Defaults a turn runs under unless the preset says otherwise. */
	p->limits = (struct ctl_limits){
		.memory = 4ull << 30,
		.pids = 4096,
		.turn_ms = 30 * 60 * 1000,
		.output = 64ull << 20,
	};
	if ((v = config_map_get(n, "limits")) && (r = parse_limits(v, &p->limits, err)) < 0)
		return r;
	if ((r = default_setup_policy(p, err)) < 0)
		return r;
	preset_version(p);
	return 0;
}

/* ---- the whole file ---- */

void ctl_conf_free(struct ctl_conf *c)
{
	if (!c)
		return;
	free(c->file);
	free(c->state_dir);
	free(c->store_dir);
	free(c->tools_dir);
	free(c->vault);
	for (size_t i = 0; i < c->n_agents; i++)
		agent_clear(&c->agents[i]);
	free(c->agents);
	for (size_t i = 0; i < c->n_presets; i++)
		preset_clear(&c->presets[i]);
	free(c->presets);
	free(c->default_preset);
	free(c);
}

static void ctl_conf_freep(struct ctl_conf **c)
{
	ctl_conf_free(*c);
}

const struct ctl_agent *ctl_conf_agent(const struct ctl_conf *c, const char *name)
{
	for (size_t i = 0; i < c->n_agents; i++)
		if (strcmp(c->agents[i].name, name) == 0)
			return &c->agents[i];
	return NULL;
}

const struct ctl_preset *ctl_conf_preset(const struct ctl_conf *c, const char *name)
{
	for (size_t i = 0; i < c->n_presets; i++)
		if (strcmp(c->presets[i].name, name) == 0)
			return &c->presets[i];
	return NULL;
}

bool ctl_preset_allows_repo(const struct ctl_preset *p, const char *owner, const char *repo)
{
	size_t ol = strlen(owner);
	for (size_t i = 0; i < p->n_github; i++) {
		const char *g = p->github[i];
		if (strncasecmp(g, owner, ol) != 0 || g[ol] != '/')
			continue;
		if (strcmp(g + ol + 1, "*") == 0 || strcasecmp(g + ol + 1, repo) == 0)
			return true;
	}
	return false;
}

/* The shipped agents first; the file's `agents:` replace or add. */
static int load_agents(struct ctl_conf *c, const struct config_node *mine, struct al_error *err)
{
	size_t cap = ctl_builtin_agents_n + (mine ? config_node_count(mine) : 0);
	c->agents = calloc(cap ? cap : 1, sizeof(*c->agents));
	if (!c->agents)
		return -ENOMEM;
	for (size_t i = 0; i < ctl_builtin_agents_n; i++) {
		const struct ctl_builtin_file *f = &ctl_builtin_agents[i];
		char name[80];
		snprintf(name, sizeof(name), "agents/%s.yaml", f->name);
		_cleanup_config_doc_ struct config_doc *doc = NULL;
		int r = config_load_string(name, f->text, strlen(f->text), &doc, err);
		if (r < 0)
			return r;
		r = parse_agent(f->name, config_root(doc), "built-in", &c->agents[c->n_agents++],
				err);
		if (r < 0)
			return r;
	}
	if (!mine)
		return 0;
	int r = config_expect_kind(mine, NULL, CONFIG_MAP, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < config_node_count(mine); i++) {
		const char *name = config_map_key(mine, i);
		if (!name_valid(name))
			return config_error(config_map_key_node(mine, i), NULL, err,
					    "an agent's name is 1-64 of a-z, 0-9, '-', '_', '.'");
		struct ctl_agent a = { 0 };
		r = parse_agent(name, config_map_value(mine, i), c->file, &a, err);
		if (r < 0) {
			agent_clear(&a);
			return r;
		}
		struct ctl_agent *old = (struct ctl_agent *)ctl_conf_agent(c, name);
		if (old) {
			agent_clear(old);
			*old = a;
		} else {
			c->agents[c->n_agents++] = a;
		}
	}
	return 0;
}

/* No presets in the file (or no file): one per agent, named after it,
 * reaching that agent's model hosts only. */
static int default_presets(struct ctl_conf *c, const char *file, struct al_error *err)
{
	c->presets = calloc(c->n_agents, sizeof(*c->presets));
	if (!c->presets)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_agents; i++) {
		struct ctl_preset *p = &c->presets[c->n_presets++];
		p->agent = &c->agents[i];
		p->network = SBX_NETWORK_RESTRICTED;
		if (!(p->name = strdup(c->agents[i].name)) || !(p->image = strdup("host")) ||
		    !(p->policy_name = strdup(file)))
			return -ENOMEM;
		int r = make_policy(p->agent, NULL, true, &p->policy, err);
		if (r < 0 || (r = default_setup_policy(p, err)) < 0)
			return r;
		p->limits = (struct ctl_limits){
			.memory = 4ull << 30,
			.pids = 4096,
			.turn_ms = 30 * 60 * 1000,
			.output = 64ull << 20,
		};
		preset_version(p);
	}
	return 0;
}

static int load_doc(const struct config_doc *doc, const char *file, struct ctl_conf **ret,
		    struct al_error *err)
{
	static const char *const keys[] = { "state_dir", "store_dir", "tools_dir",
					    "vault",	 "retention", "workspace_uid",
					    "agents",	 "presets",   "default_preset",
					    NULL };
	const struct config_node *root = config_root(doc);
	int r = config_expect_kind(root, NULL, CONFIG_MAP, err);
	if (r >= 0)
		r = config_map_check_keys(root, NULL, keys, err);
	if (r < 0)
		return r;
	_cleanup_(ctl_conf_freep) struct ctl_conf *c = calloc(1, sizeof(*c));
	if (!c || (file && !(c->file = strdup(file))))
		return -ENOMEM;
	c->state_dir = strdup(CTL_STATE_DEFAULT);
	if (!c->state_dir)
		return -ENOMEM;
	if ((r = get_opt_str(root, "state_dir", &c->state_dir, err)) < 0 ||
	    (r = get_opt_str(root, "store_dir", &c->store_dir, err)) < 0 ||
	    (r = get_opt_str(root, "tools_dir", &c->tools_dir, err)) < 0 ||
	    (r = get_opt_str(root, "vault", &c->vault, err)) < 0)
		return r;
	const char *const paths[][2] = { { "state_dir", c->state_dir },
					 { "store_dir", c->store_dir },
					 { "tools_dir", c->tools_dir },
					 { "vault", c->vault } };
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
		if (paths[i][1] && !abs_path_ok(paths[i][1]))
			return config_error(config_map_get(root, paths[i][0]), NULL, err,
					    "expected an absolute path in normal form");
	if (!c->store_dir && asprintf(&c->store_dir, "%s/store", c->state_dir) < 0)
		return -ENOMEM;
	if (!c->vault && asprintf(&c->vault, "%s/vault.yaml", c->state_dir) < 0)
		return -ENOMEM;
	if (!c->tools_dir && asprintf(&c->tools_dir, "%s/tools", c->state_dir) < 0)
		return -ENOMEM;
	const struct config_node *v;
	if ((v = config_map_get(root, "retention"))) {
		static const char *const rkeys[] = { "sessions", NULL };
		if ((r = config_expect_kind(v, NULL, CONFIG_MAP, err)) < 0 ||
		    (r = config_map_check_keys(v, NULL, rkeys, err)) < 0)
			return r;
		const struct config_node *s = config_map_get(v, "sessions");
		if (s && (r = config_get_duration(s, NULL, &c->retention_ms, err)) < 0)
			return r;
	}
	c->workspace_uid = CTL_WORKSPACE_UID_DEFAULT;
	if ((v = config_map_get(root, "workspace_uid"))) {
		uint64_t u;
		if ((r = config_get_u64(v, NULL, &u, err)) < 0)
			return r;
		if (u == 0 || u >= UINT32_MAX)
			return config_error(v, NULL, err, "expected a uid from 1 to 4294967294");
		c->workspace_uid = (uint32_t)u;
	}
	if ((r = load_agents(c, config_map_get(root, "agents"), err)) < 0)
		return r;
	const char *name_for_msgs = file ? file : "built-in config";
	const struct config_node *presets = config_map_get(root, "presets");
	if (!presets) {
		if ((r = default_presets(c, name_for_msgs, err)) < 0)
			return r;
	} else {
		if ((r = config_expect_kind(presets, NULL, CONFIG_MAP, err)) < 0)
			return r;
		size_t np = config_node_count(presets);
		if (np == 0)
			return config_error(presets, NULL, err, "no presets");
		if (!(c->presets = calloc(np, sizeof(*c->presets))))
			return -ENOMEM;
		for (size_t i = 0; i < np; i++) {
			const char *name = config_map_key(presets, i);
			if (!name_valid(name))
				return config_error(
					config_map_key_node(presets, i), NULL, err,
					"a preset's name is 1-64 of a-z, 0-9, '-', '_', '.'");
			r = parse_preset(c, name, config_map_value(presets, i), name_for_msgs,
					 &c->presets[c->n_presets++], err);
			if (r < 0)
				return r;
		}
	}
	if ((v = config_map_get(root, "default_preset"))) {
		if ((r = get_opt_str(root, "default_preset", &c->default_preset, err)) < 0)
			return r;
		if (!ctl_conf_preset(c, c->default_preset))
			return config_error(v, NULL, err, "no preset of that name");
	} else if (!(c->default_preset = strdup(c->presets[0].name))) {
		return -ENOMEM;
	}
	*ret = c;
	c = NULL;
	return 0;
}

int ctl_conf_load_string(const char *name, const char *text, size_t len, struct ctl_conf **ret,
			 struct al_error *err)
{
	_cleanup_config_doc_ struct config_doc *doc = NULL;
	int r = config_load_string(name, text, len, &doc, err);
	if (r < 0)
		return r;
	return load_doc(doc, name, ret, err);
}

int ctl_conf_load(const char *path, struct ctl_conf **ret, struct al_error *err)
{
	bool given = path != NULL;
	if (!path)
		path = CTL_CONF_DEFAULT_PATH;
	struct stat st;
	if (!given && lstat(path, &st) < 0 && errno == ENOENT) {
		_cleanup_config_doc_ struct config_doc *doc = NULL;
		int r = config_load_string("built-in config", "", 0, &doc, err);
		if (r < 0)
			return r;
		return load_doc(doc, NULL, ret, err);
	}
	_cleanup_config_doc_ struct config_doc *doc = NULL;
	int r = config_load_file(path, &doc, err);
	if (r < 0)
		return r;
	return load_doc(doc, path, ret, err);
}

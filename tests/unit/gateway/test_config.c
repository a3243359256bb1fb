/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/internal.h"

/* ---- files ---- */

static char tmpdir[64];
static char made[32][128];
static size_t n_made;

static int make_tmpdir(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_config.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
	for (size_t i = 0; i < n_made; i++)
		unlink(made[i]);
	return rmdir(tmpdir);
}

/* Writes tmpdir/name (replacing it) with mode; returns its path (static). */
static const char *write_file(const char *name, mode_t mode, const char *text)
{
	static char path[8][128];
	static size_t next;
	char *p = path[next++ % 8];
	snprintf(p, 128, "%s/%s", tmpdir, name);
	unlink(p);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	size_t len = strlen(text);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
	bool known = false;
	for (size_t i = 0; i < n_made && !known; i++)
		known = strcmp(made[i], p) == 0;
	if (!known) {
		assert_true(n_made < 32);
		snprintf(made[n_made++], 128, "%s", p);
	}
	return p;
}

#define SECRET_A "sk-ant-REAL-0123456789abcdef"
#define SECRET_G "ghp_REALREALREAL0123456789"
#define SECRET_Q "AIzaREAL-0123456789"

static const char vault_text[] = "secrets:\n"
				 "  anthropic: " SECRET_A "\n"
				 "  github: " SECRET_G "\n"
				 "  google: " SECRET_Q "\n";

static const char full_policy[] = "rules:\n"
				  "  - id: anthropic\n"
				  "    host: api.anthropic.com\n"
				  "    port: 443\n"
				  "credentials:\n"
				  "  - secret: anthropic\n"
				  "    host: API.anthropic.com\n"
				  "    port: 443\n"
				  "    paths: [/v1/]\n"
				  "    header: x-api-key\n"
				  "    env: ANTHROPIC_API_KEY\n"
				  "    dummy: sk-ant-dummy\n"
				  "  - secret: github\n"
				  "    host: api.github.com\n"
				  "    header: Authorization\n"
				  "    prefix: 'Bearer '\n"
				  "    github: true\n"
				  "    env: GH_TOKEN\n"
				  "  - secret: github\n"
				  "    host: github.com\n"
				  "    basic: x-access-token\n"
				  "    github: true\n"
				  "    env: GH_TOKEN\n"
				  "  - secret: google\n"
				  "    host: '*.googleapis.com'\n"
				  "    query: key\n"
				  "upstreams:\n"
				  "  - host: api.anthropic.com\n"
				  "    port: 443\n"
				  "    to: 10.1.2.3:8443\n"
				  "  - host: '[2001:db8::5]'\n"
				  "    port: 80\n"
				  "    to: '[::1]:8080'\n"
				  "hosts:\n"
				  "  metadata.internal.test: 169.254.169.254\n"
				  "  v6.internal.test: 'fd00::1'\n"
				  "allow_cidrs: [10.20.0.0/16, 192.168.1.1]\n";

static int build(const struct gw_options *o, struct gw_config **cfg, struct al_error *err)
{
	*cfg = NULL;
	al_error_clear(err);
	return gw_config_build(o, cfg, err);
}

static struct gw_config *build_ok(const struct gw_options *o)
{
	struct gw_config *cfg;
	struct al_error err = { 0 };
	int r = build(o, &cfg, &err);
	if (r < 0)
		fail_msg("gw_config_build: %d %s", r, al_error_message(&err));
	assert_non_null(cfg);
	return cfg;
}

/* What the failing case was, for the message. */
static const char *what = "";

/* Refused with an error naming needle; nothing returned. */
static void build_fails(const struct gw_options *o, int want, const char *needle)
{
	struct gw_config *cfg;
	struct al_error err = { 0 };
	int r = build(o, &cfg, &err);
	if (r >= 0) {
		gw_config_free(cfg);
		fail_msg("%s: accepted, want %d '%s'", what, want, needle);
	}
	assert_null(cfg);
	if ((want && r != want) || !strstr(err.msg, needle))
		fail_msg("%s: got %d '%s', want %d '%s'", what, r, err.msg, want, needle);
}

/* The policy file policy (in a 0600 file) with the good vault. */
static void policy_fails(const char *policy, int want, const char *needle)
{
	struct gw_options o = { .mode = GW_MODE_RESTRICTED };
	o.policy_file = write_file("p.yaml", 0600, policy);
	o.vault_file = write_file("v.yaml", 0600, vault_text);
	what = policy;
	build_fails(&o, want, needle);
	what = "";
}

static void test_build_minimal(void **state)
{
	struct gw_options o = { .mode = GW_MODE_OPEN };
	struct gw_config *cfg = build_ok(&o);
	assert_int_equal(cfg->mode, GW_MODE_OPEN);
	assert_string_equal(cfg->label, "airlock");
	assert_non_null(cfg->policy);
	assert_int_equal(cfg->policy->n_rules, 0);
	assert_int_equal(cfg->n_creds, 0);
	assert_int_equal(cfg->n_upstreams, 0);
	assert_null(cfg->vault_file);
	gw_config_free(cfg);
	gw_config_free(NULL);

	/* --allow rules, numbered; an empty policy file. */
	char *allow[] = { (char *)"api.example.com", (char *)"*.example.org:8443/v1/" };
	o = (struct gw_options){
		.mode = GW_MODE_RESTRICTED, .label = "sbx-1", .allow = allow, .n_allow = 2
	};
	o.policy_file = write_file("empty.yaml", 0644, "");
	cfg = build_ok(&o);
	assert_string_equal(cfg->label, "sbx-1");
	assert_int_equal(cfg->policy->n_rules, 2);
	assert_string_equal(cfg->policy->rules[0].id, "allow-1");
	assert_string_equal(cfg->policy->rules[1].id, "allow-2");
	assert_true(gw_policy_host_may_allow(cfg->policy, "api.example.com", 443));
	assert_true(gw_policy_host_may_allow(cfg->policy, "a.example.org", 8443));
	assert_false(gw_policy_host_may_allow(cfg->policy, "a.example.org", 443));
	gw_config_free(cfg);

	/* A vault without credentials is fine. */
	o = (struct gw_options){ .mode = GW_MODE_RESTRICTED };
	o.vault_file = write_file("v.yaml", 0600, vault_text);
	cfg = build_ok(&o);
	assert_string_equal(cfg->vault_file, o.vault_file);
	gw_config_free(cfg);
}

static void test_build_full(void **state)
{
	struct gw_options o = { .mode = GW_MODE_RESTRICTED };
	o.policy_file = write_file("p.yaml", 0600, full_policy);
	o.vault_file = write_file("v.yaml", 0600, vault_text);
	struct gw_config *cfg = build_ok(&o);

	assert_int_equal(cfg->policy->n_rules, 1);
	assert_int_equal(cfg->policy->generation, 1);
	assert_int_equal(cfg->n_creds, 4);
	const struct gw_cred *c = &cfg->creds[0];
	assert_string_equal(c->secret, "anthropic");
	assert_string_equal(c->host, "api.anthropic.com");
	assert_false(c->wildcard);
	assert_int_equal(c->port, 443);
	assert_int_equal(c->n_paths, 1);
	assert_string_equal(c->paths[0], "/v1/");
	assert_int_equal(c->kind, GW_CRED_HEADER);
	assert_string_equal(c->name, "x-api-key");
	assert_string_equal(c->prefix, "");
	assert_false(c->github);
	assert_string_equal(c->env, "ANTHROPIC_API_KEY");
	assert_string_equal(c->dummy, "sk-ant-dummy");

	c = &cfg->creds[1];
	assert_int_equal(c->kind, GW_CRED_HEADER);
	assert_string_equal(c->name, "Authorization");
	assert_string_equal(c->prefix, "Bearer ");
	assert_true(c->github);
	assert_int_equal(c->port, 0);
	assert_int_equal(c->n_paths, 0);
	/* The default dummy names the secret, never its value. */
	assert_string_equal(c->dummy, "airlock-dummy-github");

	c = &cfg->creds[2];
	assert_int_equal(c->kind, GW_CRED_BASIC);
	assert_string_equal(c->name, "x-access-token");
	assert_true(c->github);

	c = &cfg->creds[3];
	assert_int_equal(c->kind, GW_CRED_QUERY);
	assert_string_equal(c->name, "key");
	assert_true(c->wildcard);
	assert_string_equal(c->host, "googleapis.com");
	assert_string_equal(c->env, "");

	/* Upstream overrides: by normalized host and port. */
	assert_int_equal(cfg->n_upstreams, 2);
	const struct gw_upstream *u = gw_config_upstream(cfg, "api.anthropic.com", 443);
	assert_non_null(u);
	const struct sockaddr_in *in4 = (const struct sockaddr_in *)&u->addr;
	assert_int_equal(in4->sin_family, AF_INET);
	assert_int_equal(ntohs(in4->sin_port), 8443);
	assert_int_equal(ntohl(in4->sin_addr.s_addr), 0x0a010203);
	assert_int_equal(u->addr_len, sizeof(struct sockaddr_in));
	assert_null(gw_config_upstream(cfg, "api.anthropic.com", 80));
	assert_null(gw_config_upstream(cfg, "anthropic.com", 443));
	u = gw_config_upstream(cfg, "[2001:db8::5]", 80);
	assert_non_null(u);
	assert_int_equal(u->addr.ss_family, AF_INET6);
	assert_int_equal(ntohs(((const struct sockaddr_in6 *)&u->addr)->sin6_port), 8080);

	/* Static hosts. */
	assert_int_equal(cfg->n_hosts, 2);
	const struct gw_static_host *h = gw_config_static_host(cfg, "metadata.internal.test");
	assert_non_null(h);
	assert_int_equal(h->addr.ss_family, AF_INET);
	assert_int_equal(ntohl(((const struct sockaddr_in *)&h->addr)->sin_addr.s_addr),
			 0xa9fea9fe);
	h = gw_config_static_host(cfg, "v6.internal.test");
	assert_non_null(h);
	assert_int_equal(h->addr.ss_family, AF_INET6);
	assert_null(gw_config_static_host(cfg, "other.test"));

	assert_int_equal(cfg->n_cidrs, 2);
	assert_string_equal(cfg->vault_file, o.vault_file);
	gw_config_free(cfg);
}

static bool env_has(char **env, size_t n, const char *kv)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(env[i], kv) == 0)
			return true;
	return false;
}

static size_t env_count(char **env, size_t n, const char *key)
{
	size_t kl = strlen(key), count = 0;
	for (size_t i = 0; i < n; i++)
		count += strncmp(env[i], key, kl) == 0 && env[i][kl] == '=';
	return count;
}

static void test_sandbox_env(void **state)
{
	/* A credential whose env would shadow a fixed variable does not. */
	static const char extra_cred[] = "  - secret: google\n"
					 "    host: x.test\n"
					 "    query: k\n"
					 "    env: HTTPS_PROXY\n"
					 "    dummy: shadow\n";
	char policy[sizeof(full_policy) + sizeof(extra_cred)];
	const char *split = strstr(full_policy, "upstreams:");
	size_t head = (size_t)(split - full_policy);
	memcpy(policy, full_policy, head);
	memcpy(policy + head, extra_cred, sizeof(extra_cred) - 1);
	memcpy(policy + head + sizeof(extra_cred) - 1, split, strlen(split) + 1);

	struct gw_options o = { .mode = GW_MODE_RESTRICTED };
	o.policy_file = write_file("p.yaml", 0600, policy);
	o.vault_file = write_file("v.yaml", 0600, vault_text);
	struct gw_config *cfg = build_ok(&o);
	assert_int_equal(cfg->n_creds, 5);

	char **env = NULL;
	size_t n = 0;
	assert_int_equal(
		gw_sandbox_env(cfg, "/etc/airlock/bundle.pem", "/etc/airlock/ca.pem", &env, &n), 0);
	assert_non_null(env);
	assert_null(env[n]);
	static const char *const want[] = {
		"HTTP_PROXY=http://127.0.0.1:3128",
		"HTTPS_PROXY=http://127.0.0.1:3128",
		"ALL_PROXY=http://127.0.0.1:3128",
		"http_proxy=http://127.0.0.1:3128",
		"https_proxy=http://127.0.0.1:3128",
		"all_proxy=http://127.0.0.1:3128",
		"SSL_CERT_FILE=/etc/airlock/bundle.pem",
		"REQUESTS_CA_BUNDLE=/etc/airlock/bundle.pem",
		"CURL_CA_BUNDLE=/etc/airlock/bundle.pem",
		"GIT_SSL_CAINFO=/etc/airlock/bundle.pem",
		"NODE_EXTRA_CA_CERTS=/etc/airlock/ca.pem",
		"ANTHROPIC_API_KEY=sk-ant-dummy",
		"GH_TOKEN=airlock-dummy-github",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!env_has(env, n, want[i]))
			fail_msg("no %s in the sandbox environment", want[i]);
	assert_int_equal(env_count(env, n, "NO_PROXY"), 1);
	assert_int_equal(env_count(env, n, "no_proxy"), 1);
	/* One of each variable, the credentials' GH_TOKEN and HTTPS_PROXY too. */
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(env[i], '=');
		assert_non_null(eq);
		char key[128];
		snprintf(key, sizeof(key), "%.*s", (int)(eq - env[i]), env[i]);
		assert_int_equal(env_count(env, n, key), 1);
	}
	/* No secret value, nor a piece of one, ever. */
	static const char *const secrets[] = { SECRET_A, SECRET_G, SECRET_Q, "REAL" };
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < sizeof(secrets) / sizeof(secrets[0]); j++)
			if (strstr(env[i], secrets[j]))
				fail_msg("secret in the sandbox environment: %s", env[i]);
	gw_env_free(env, n);
	gw_env_free(NULL, 0);
	gw_config_free(cfg);

	/* Without credentials: the fixed variables only. */
	o = (struct gw_options){ .mode = GW_MODE_OPEN };
	cfg = build_ok(&o);
	assert_int_equal(gw_sandbox_env(cfg, "/b", "/c", &env, &n), 0);
	assert_int_equal(n, 13);
	assert_true(env_has(env, n, "SSL_CERT_FILE=/b"));
	gw_env_free(env, n);
	gw_config_free(cfg);
}

static void test_build_credential_errors(void **state)
{
	static const char head[] = "credentials:\n  - secret: anthropic\n    host: a.test\n";
	static const struct {
		const char *fields;
		const char *needle;
	} cases[] = {
		{ "    header: x-api-key\n    query: key\n", "exactly one" },
		{ "    header: x-api-key\n    basic: user\n", "exactly one" },
		{ "    query: key\n    basic: user\n", "exactly one" },
		{ "    env: X\n", "exactly one" },
		{ "    query: key\n    prefix: 'Bearer '\n", "prefix" },
		{ "    basic: user\n    prefix: 'Bearer '\n", "prefix" },
		{ "    header: Content-Length\n", "cannot carry" },
		{ "    header: content-length\n", "cannot carry" },
		{ "    header: HOST\n", "cannot carry" },
		{ "    header: Transfer-Encoding\n", "cannot carry" },
		{ "    header: Connection\n", "cannot carry" },
		{ "    header: Proxy-Authorization\n", "cannot carry" },
		{ "    header: te\n", "cannot carry" },
		{ "    header: 'x api key'\n", "header" },
		{ "    header: 'x:y'\n", "header" },
		{ "    header: ''\n", "header" },
		{ "    header: x.y\n", "header" },
		{ "    header: x-api-key\n    prefix: \"a\\nb\"\n", "prefix" },
		{ "    header: x-api-key\n    token: abc\n", "token" },
		{ "    header: x-api-key\n    env: MY-KEY\n", "env" },
		{ "    header: x-api-key\n    env: 1KEY\n", "env" },
		{ "    header: x-api-key\n    dummy: 'a b'\n", "dummy" },
		{ "    header: x-api-key\n    dummy: ''\n", "dummy" },
		{ "    header: x-api-key\n    port: 0\n", "port" },
		{ "    header: x-api-key\n    port: 65536\n", "port" },
		{ "    header: x-api-key\n    paths: [/a/../b]\n", "canonical" },
		{ "    header: x-api-key\n    paths: []\n", "path" },
		{ "    header: x-api-key\n    github: maybe\n", "github" },
	};
	char policy[512];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(policy, sizeof(policy), "%s%s", head, cases[i].fields);
		policy_fails(policy, 0, cases[i].needle);
	}
	policy_fails("credentials:\n  - host: a.test\n    header: x\n", 0, "secret");
	policy_fails("credentials:\n  - secret: anthropic\n    header: x\n", 0, "host");
	policy_fails("credentials:\n  - secret: anthropic\n    host: a_b.test\n    header: x\n", 0,
		     "host");
	policy_fails("credentials:\n  - secret: anthropic\n    host: '*.1.2.3.4'\n    header: x\n",
		     0, "domain");
	policy_fails("credentials:\n  - secret: 'a b'\n    host: a.test\n    header: x\n", 0,
		     "secret");
	policy_fails("credentials: {}\n", 0, "credentials");
}

static void test_build_vault_errors(void **state)
{
	static const char policy[] = "credentials:\n"
				     "  - secret: anthropic\n"
				     "    host: a.test\n"
				     "    header: x-api-key\n"
				     "  - secret: openai\n"
				     "    host: b.test\n"
				     "    header: authorization\n";
	struct gw_options o = { .mode = GW_MODE_RESTRICTED };
	o.policy_file = write_file("p.yaml", 0600, policy);
	/* Credentials and no vault. */
	build_fails(&o, -EINVAL, "--vault");
	/* A vault without one of the named secrets: the configuration is
	 * built without reading the vault (no value in this process), and
	 * the gateway's start-up check refuses it. */
	o.vault_file = write_file("v.yaml", 0600, vault_text);
	struct gw_config *cfg = build_ok(&o);
	struct gw_vault *v = NULL;
	struct al_error err = { 0 };
	assert_int_equal(gw_vault_parse("v.yaml", vault_text, strlen(vault_text), &v, &err), 0);
	assert_int_equal(gw_config_check_vault(cfg, v, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "openai"));
	/* The error never quotes a value. */
	assert_null(strstr(err.msg, "REAL"));
	gw_vault_free(v);
	gw_config_free(cfg);
	/* A vault others may read, or write. */
	static const char ok_policy[] = "credentials:\n"
					"  - secret: anthropic\n"
					"    host: a.test\n"
					"    header: x-api-key\n";
	o.policy_file = write_file("p.yaml", 0600, ok_policy);
	cfg = build_ok(&o);
	gw_config_free(cfg);
	o.vault_file = write_file("v.yaml", 0644, vault_text);
	build_fails(&o, -EPERM, "");
	o.vault_file = write_file("v.yaml", 0640, vault_text);
	build_fails(&o, -EPERM, "");
	o.vault_file = write_file("v.yaml", 0602, vault_text);
	build_fails(&o, -EPERM, "");
	/* A vault that is not there, or not a regular file. */
	o.vault_file = tmpdir;
	build_fails(&o, -EPERM, "");
	char missing[128];
	snprintf(missing, sizeof(missing), "%s/no-such-vault", tmpdir);
	o.vault_file = missing;
	build_fails(&o, 0, "");
}

static void test_build_upstream_errors(void **state)
{
	static const char *const bad_yaml[] = {
		"upstreams:\n  - host: a.test\n    port: 443\n    to: 10.0.0.1\n",
		"upstreams:\n  - host: a.test\n    port: 443\n    to: 10.0.0.1:0\n",
		"upstreams:\n  - host: a.test\n    port: 443\n    to: a.test:443\n",
		"upstreams:\n  - host: a.test\n    port: 443\n    to: '::1'\n",
		"upstreams:\n  - host: a.test:443\n    port: 443\n    to: 10.0.0.1:1\n",
		"upstreams:\n  - host: a_b.test\n    port: 443\n    to: 10.0.0.1:1\n",
		"upstreams:\n  - host: a.test\n    port: 0\n    to: 10.0.0.1:1\n",
		"upstreams:\n  - host: a.test\n    to: 10.0.0.1:1\n",
		"upstreams:\n  - host: a.test\n    port: 443\n",
		"upstreams:\n  - host: a.test\n    port: 443\n    to: 10.0.0.1:1\n    via: x\n",
		"upstreams: a.test\n",
	};
	for (size_t i = 0; i < sizeof(bad_yaml) / sizeof(bad_yaml[0]); i++) {
		policy_fails(bad_yaml[i], 0, "upstreams");
	}
	/* Two overrides of one host and port. */
	policy_fails("upstreams:\n"
		     "  - host: a.test\n    port: 443\n    to: 10.0.0.1:1\n"
		     "  - host: A.test.\n    port: 443\n    to: 10.0.0.2:1\n",
		     -EEXIST, "override");

	static const struct {
		const char *spec;
		int want;
		const char *needle;
	} bad_cli[] = {
		{ "a.test:443", -EINVAL, "HOST:PORT=ADDR:PORT" },
		{ "a.test=10.0.0.1:1", -EINVAL, "HOST:PORT=ADDR:PORT" },
		{ "a.test:0=10.0.0.1:1", -EINVAL, "HOST:PORT=ADDR:PORT" },
		{ "a.test:65536=10.0.0.1:1", -EINVAL, "HOST:PORT=ADDR:PORT" },
		{ ":443=10.0.0.1:1", -EINVAL, "HOST:PORT=ADDR:PORT" },
		{ "a_b.test:443=10.0.0.1:1", -EINVAL, "HOST:PORT=ADDR:PORT" },
		{ "[::1:443=10.0.0.1:1", -EINVAL, "HOST:PORT=ADDR:PORT" },
		{ "a.test:443=", -EINVAL, "ADDR:PORT" },
		{ "a.test:443=10.0.0.1", -EINVAL, "ADDR:PORT" },
		{ "a.test:443=10.0.0.1:99999", -EINVAL, "ADDR:PORT" },
		{ "a.test:443=host.test:443", -EINVAL, "ADDR:PORT" },
	};
	for (size_t i = 0; i < sizeof(bad_cli) / sizeof(bad_cli[0]); i++) {
		char *ups[] = { (char *)bad_cli[i].spec };
		struct gw_options o = { .mode = GW_MODE_RESTRICTED,
					.upstreams = ups,
					.n_upstreams = 1 };
		what = bad_cli[i].spec;
		build_fails(&o, bad_cli[i].want, bad_cli[i].needle);
		what = "";
	}

	/* Good ones, and a duplicate between the file and the command line. */
	char *ups[] = { (char *)"b.test:8080=127.0.0.1:9000", (char *)"[::1]:443=[::1]:8443" };
	struct gw_options o = { .mode = GW_MODE_RESTRICTED, .upstreams = ups, .n_upstreams = 2 };
	struct gw_config *cfg = build_ok(&o);
	assert_int_equal(cfg->n_upstreams, 2);
	assert_non_null(gw_config_upstream(cfg, "b.test", 8080));
	assert_null(gw_config_upstream(cfg, "b.test", 443));
	assert_non_null(gw_config_upstream(cfg, "[::1]", 443));
	gw_config_free(cfg);
	char *dup[] = { (char *)"b.test:8080=127.0.0.1:9000",
			(char *)"B.TEST:8080=127.0.0.1:9001" };
	o.upstreams = dup;
	build_fails(&o, -EEXIST, "override");
	char *clash[] = { (char *)"api.anthropic.com:443=127.0.0.1:1" };
	o.upstreams = clash;
	o.n_upstreams = 1;
	o.policy_file = write_file("p.yaml", 0600, full_policy);
	o.vault_file = write_file("v.yaml", 0600, vault_text);
	build_fails(&o, -EEXIST, "override");
}

static void test_build_other_errors(void **state)
{
	/* Unknown keys, at the top and inside. */
	policy_fails("rules: []\ncolour: red\n", 0, "colour");
	policy_fails("hosts:\n  a.test: 10.0.0.1\nallow_cidr: []\n", 0, "allow_cidr");
	policy_fails("rules:\n  - host: a.test\n    colour: red\n", 0, "colour");
	/* hosts and allow_cidrs. */
	policy_fails("hosts:\n  a_b.test: 10.0.0.1\n", 0, "host name");
	policy_fails("hosts:\n  10.0.0.1: 10.0.0.2\n", 0, "host name");
	policy_fails("hosts:\n  a.test: b.test\n", 0, "address");
	policy_fails("hosts:\n  a.test: '10.0.0.1:80'\n", 0, "address");
	policy_fails("hosts: [a.test]\n", 0, "hosts");
	policy_fails("allow_cidrs: [10.0.0.0/33]\n", 0, "ADDR/PREFIX");
	policy_fails("allow_cidrs: [example.test]\n", 0, "ADDR/PREFIX");
	policy_fails("allow_cidrs: 10.0.0.0/8\n", 0, "allow_cidrs");
	/* Not YAML, or not there. */
	policy_fails("rules: [\n", 0, "p.yaml");
	struct gw_options o = { .mode = GW_MODE_RESTRICTED };
	char missing[128];
	snprintf(missing, sizeof(missing), "%s/no-such-policy", tmpdir);
	o.policy_file = missing;
	build_fails(&o, 0, "no-such-policy");

	/* --allow */
	char *allow[] = { (char *)"a.test:0" };
	o = (struct gw_options){ .mode = GW_MODE_RESTRICTED, .allow = allow, .n_allow = 1 };
	build_fails(&o, -EINVAL, "a.test:0");
	/* --allow ids after the file's rules must not clash. */
	char *allow2[] = { (char *)"b.test" };
	o = (struct gw_options){ .mode = GW_MODE_RESTRICTED, .allow = allow2, .n_allow = 1 };
	o.policy_file = write_file("p.yaml", 0600, "rules:\n  - id: allow-1\n    host: a.test\n");
	build_fails(&o, -EEXIST, "allow-1");

	/* --grant */
	static const char *const bad_grants[] = { "github:acme",       "github:acme/",
						  "github:/app",       "gitlab:acme/app",
						  "github:acme/app/x", "github:acme/app.git",
						  "github:-acme/app" };
	for (size_t i = 0; i < sizeof(bad_grants) / sizeof(bad_grants[0]); i++) {
		char *g[] = { (char *)bad_grants[i] };
		o = (struct gw_options){ .mode = GW_MODE_RESTRICTED, .grants = g, .n_grants = 1 };
		build_fails(&o, -EINVAL, "--grant");
	}

	/* --upstream-ca that is not there. */
	char *cas[] = { missing };
	o = (struct gw_options){ .mode = GW_MODE_RESTRICTED,
				 .upstream_cas = cas,
				 .n_upstream_cas = 1 };
	build_fails(&o, 0, "--upstream-ca");
	char *good_ca[] = { (char *)write_file("ca.pem", 0644, "not checked here\n") };
	o.upstream_cas = good_ca;
	struct gw_config *cfg = build_ok(&o);
	assert_int_equal(cfg->n_ca_files, 1);
	assert_string_equal(cfg->ca_files[0], good_ca[0]);
	gw_config_free(cfg);
}

/* --allow-cidr: an allow_cidrs entry, checked the same way. */
static void test_build_allow_cidr(void **state)
{
	char *good[] = { (char *)"192.0.2.7", (char *)"fd00:1::/64" };
	struct gw_options o = { .mode = GW_MODE_RESTRICTED,
				.allow_cidrs = good,
				.n_allow_cidrs = 2 };
	o.policy_file = write_file("p.yaml", 0600, "allow_cidrs: [10.20.0.0/16]\n");
	struct gw_config *cfg = build_ok(&o);
	assert_int_equal(cfg->n_cidrs, 3);
	assert_int_equal(cfg->cidrs[1].prefix, 32);
	assert_int_equal(cfg->cidrs[2].prefix, 64);
	gw_config_free(cfg);
	static const struct {
		const char *v, *msg;
	} bad[] = {
		{ "10.0.0.1/8", "--allow-cidr 10.0.0.1/8: expected an address or ADDR/PREFIX" },
		{ "example.test", "--allow-cidr example.test: expected an address or ADDR/PREFIX" },
		{ "127.0.0.0/8",
		  "--allow-cidr 127.0.0.0/8: overlaps loopback, a range that is never opened" },
		{ "169.254.169.254", "--allow-cidr 169.254.169.254: overlaps link-local (cloud "
				     "metadata), a range that is never opened" },
		{ "0.0.0.0/0",
		  "--allow-cidr 0.0.0.0/0: overlaps this network, a range that is never opened" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *v[] = { (char *)bad[i].v };
		o = (struct gw_options){ .mode = GW_MODE_RESTRICTED,
					 .allow_cidrs = v,
					 .n_allow_cidrs = 1 };
		struct al_error err = { 0 };
		assert_int_equal(build(&o, &cfg, &err), -EINVAL);
		assert_string_equal(err.msg, bad[i].msg);
	}
	/* The file's entries the same way, at start. */
	policy_fails("allow_cidrs: [10.0.0.0/8, 169.254.0.0/16]\n", -EINVAL,
		     "p.yaml:1: allow_cidrs[1]: 169.254.0.0/16 overlaps link-local (cloud "
		     "metadata), a range that is never opened");
}

/* A running gateway's next generation: a whole policy file, parsed as at
 * start; what cannot change must be left out or be as it was. */
static void next_fails(const struct gw_config *cur, const char *text, const char *msg)
{
	struct gw_config *n = NULL;
	struct al_error err = { 0 };
	int r = gw_config_next(cur, "policy", text, strlen(text), 2, &n, &err);
	if (r >= 0) {
		gw_config_free(n);
		fail_msg("accepted: %s", text);
	}
	assert_null(n);
	if (strcmp(err.msg, msg) != 0)
		fail_msg("%s: got '%s', want '%s'", text, err.msg, msg);
}

static struct gw_config *next_ok(const struct gw_config *cur, const char *text)
{
	struct gw_config *n = NULL;
	struct al_error err = { 0 };
	int r = gw_config_next(cur, "policy", text, strlen(text), 2, &n, &err);
	if (r < 0)
		fail_msg("%s: %s", text, err.msg);
	assert_int_equal(n->policy->generation, 2);
	return n;
}

static void test_next_generation(void **state)
{
	char *ups[] = { (char *)"cli.test:443=10.9.9.9:443" };
	char *cidrs[] = { (char *)"192.0.2.0/24" };
	struct gw_options o = { .mode = GW_MODE_RESTRICTED,
				.upstreams = ups,
				.n_upstreams = 1,
				.allow_cidrs = cidrs,
				.n_allow_cidrs = 1 };
	o.policy_file = write_file("p.yaml", 0600, full_policy);
	o.vault_file = write_file("v.yaml", 0600, vault_text);
	struct gw_config *cur = build_ok(&o);
	assert_int_equal(cur->n_upstreams, 3);
	assert_int_equal(cur->n_file_upstreams, 2);
	assert_int_equal(cur->n_cidrs, 3);

	/* The file it started with, given again: the same, minus the
	 * command line's --allow-cidr (a file replaces allow_cidrs whole). */
	struct gw_config *n = next_ok(cur, full_policy);
	assert_int_equal(n->policy->n_rules, 1);
	assert_int_equal(n->n_cidrs, 2);
	assert_int_equal(n->n_hosts, 2);
	gw_config_free(n);
	/* Rules and allow_cidrs alone; what it leaves out of the rest stays. */
	n = next_ok(cur, "rules:\n  - host: b.test\nallow_cidrs: [198.51.100.7]\n");
	assert_int_equal(n->n_cidrs, 1);
	assert_int_equal(n->n_hosts, 0);
	assert_int_equal(n->n_creds, 0);
	gw_config_free(n);
	n = next_ok(cur, "");
	assert_int_equal(n->policy->n_rules, 0);
	assert_int_equal(n->n_cidrs, 0);
	gw_config_free(n);
	/* Limits as they are: accepted. */
	n = next_ok(cur, "limits:\n  connections: 512\n  head_timeout: 10s\n");
	gw_config_free(n);

	/* Parsed as at start: the same errors. */
	next_fails(cur, "rules:\n  - host: a.test\n    port: 0\n",
		   "policy:3: rules[0].port: expected a port from 1 to 65535");
	next_fails(cur, "allow_cidrs: [10.0.0.0/8, 127.0.0.0/8]\n",
		   "policy:1: allow_cidrs[1]: 127.0.0.0/8 overlaps loopback, a range that is "
		   "never opened");
	next_fails(cur, "allow_cidrs: [10.0.0.1/8]\n",
		   "policy:1: allow_cidrs[0]: expected an address or ADDR/PREFIX");
	next_fails(cur, "colour: red\n",
		   "policy:1: (top level).colour: unknown key (expected one of rules, credentials, "
		   "upstreams, hosts, allow_cidrs, limits)");
	/* What was fixed at start. */
	next_fails(cur, "credentials:\n  - secret: google\n    host: a.test\n    query: key\n",
		   "policy:2: credentials: differ from the running sandbox's, and cannot change: "
		   "its gateway read the vault once, before it dropped root, and the sandbox's "
		   "environment holds their dummy values (leave them out, or as they were; a new "
		   "sandbox takes new ones)");
	next_fails(cur, "credentials: []\n",
		   "policy:1: credentials: differ from the running sandbox's, and cannot change: "
		   "its gateway read the vault once, before it dropped root, and the sandbox's "
		   "environment holds their dummy values (leave them out, or as they were; a new "
		   "sandbox takes new ones)");
	next_fails(cur,
		   "upstreams:\n  - host: api.anthropic.com\n    port: 443\n"
		   "    to: 10.1.2.4:8443\n",
		   "policy:2: upstreams: differ from the running sandbox's, and cannot change: "
		   "operator overrides are fixed when its gateway starts (leave them out, or as "
		   "they were)");
	next_fails(cur, "limits:\n  head_timeout: 10s\n  connections: 100\n",
		   "policy:3: limits.connections: differs from the running sandbox's, and cannot "
		   "change: limits are fixed when its gateway starts (leave them out, or as they "
		   "were)");
	gw_config_free(cur);
}

/* --grant github:OWNER/REPO, as the command line passes it on (the CLI
 * checks the "github:" prefix and keeps it). */
static void test_build_grants(void **state)
{
	char *g[] = { (char *)"github:acme/app", (char *)"github:Other-Org/repo.name_2" };
	struct gw_options o = { .mode = GW_MODE_RESTRICTED, .grants = g, .n_grants = 2 };
	struct gw_config *cfg = build_ok(&o);
	assert_int_equal(cfg->n_grants, 2);
	assert_string_equal(cfg->grants[0].owner, "acme");
	assert_string_equal(cfg->grants[0].repo, "app");
	assert_string_equal(cfg->grants[1].owner, "Other-Org");
	assert_string_equal(cfg->grants[1].repo, "repo.name_2");
	gw_config_free(cfg);
}

/* ---- pieces ---- */

static void test_parse_hostport(void **state)
{
	char host[GW_HOST_MAX + 3];
	uint16_t port = 7;
	assert_int_equal(gw_parse_hostport("A.Test", 6, host, sizeof(host), &port, false), 0);
	assert_string_equal(host, "a.test");
	assert_int_equal(port, 0);
	assert_int_equal(gw_parse_hostport("a.test.:443", 11, host, sizeof(host), &port, true), 0);
	assert_string_equal(host, "a.test");
	assert_int_equal(port, 443);
	assert_int_equal(
		gw_parse_hostport("[::FFFF:1.2.3.4]:1", 18, host, sizeof(host), &port, true), 0);
	assert_string_equal(host, "[::ffff:1.2.3.4]");
	assert_int_equal(port, 1);
	assert_int_equal(gw_parse_hostport("[::1]", 5, host, sizeof(host), &port, false), 0);
	assert_string_equal(host, "[::1]");
	assert_int_equal(port, 0);
	assert_int_equal(gw_parse_hostport("10.0.0.1:65535", 14, host, sizeof(host), &port, true),
			 0);
	assert_int_equal(port, 65535);
	/* Only len bytes count. */
	assert_int_equal(
		gw_parse_hostport("a.test:443=10.0.0.1:1", 10, host, sizeof(host), &port, true), 0);
	assert_string_equal(host, "a.test");
	assert_int_equal(port, 443);

	static const char *const bad[] = {
		"",
		":443",
		"a.test:",
		"a.test:0",
		"a.test:65536",
		"a.test:0443",
		"a.test:44a",
		"a.test:+443",
		"a.test:443:1",
		"a.test: 443",
		"a_b.test:1",
		"[::1]x",
		"[::1]:",
		"[::1",
		"[::1]:0",
		"[]:1",
		"::1:443",
		"a.test:123456",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (gw_parse_hostport(bad[i], strlen(bad[i]), host, sizeof(host), &port, false) ==
		    0)
			fail_msg("accepted '%s'", bad[i]);
	}
	assert_int_equal(gw_parse_hostport("a.test", 6, host, sizeof(host), &port, true), -EINVAL);
	assert_int_equal(gw_parse_hostport("[::1]", 5, host, sizeof(host), &port, true), -EINVAL);
}

static void test_parse_sockaddr(void **state)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	assert_int_equal(gw_parse_sockaddr("127.0.0.1:80", &ss, &len), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(len, sizeof(struct sockaddr_in));
	assert_int_equal(ntohs(((struct sockaddr_in *)&ss)->sin_port), 80);
	assert_int_equal(ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr), 0x7f000001);
	assert_int_equal(gw_parse_sockaddr("[2001:db8::1]:65535", &ss, &len), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(len, sizeof(struct sockaddr_in6));
	assert_int_equal(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port), 65535);
	struct in6_addr want;
	assert_int_equal(inet_pton(AF_INET6, "2001:db8::1", &want), 1);
	assert_memory_equal(&((struct sockaddr_in6 *)&ss)->sin6_addr, &want, sizeof(want));

	static const char *const bad[] = {
		"",
		"127.0.0.1",
		"127.0.0.1:",
		":80",
		"127.0.0.1:0",
		"127.0.0.1:65536",
		"127.0.0.1:123456",
		"127.0.0.1:8a",
		"127.0.0.1:-1",
		"localhost:80",
		"1.2.3:80",
		"[::1]80",
		"[::1]:",
		"[::1]",
		"[::1:80",
		"[a.test]:80",
		"127.0.0.1 :80",
		"[::1%lo]:80",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		len = 0;
		if (gw_parse_sockaddr(bad[i], &ss, &len) == 0)
			fail_msg("accepted '%s'", bad[i]);
	}
	/* A name longer than any address. */
	char long_host[200];
	memset(long_host, '1', 150);
	memcpy(long_host + 150, ":80", 4);
	assert_int_equal(gw_parse_sockaddr(long_host, &ss, &len), -EINVAL);
	long_host[0] = '[';
	memcpy(long_host + 150, "]:80", 5);
	assert_int_equal(gw_parse_sockaddr(long_host, &ss, &len), -EINVAL);
}

static void test_host_pattern(void **state)
{
	assert_true(gw_host_pattern_matches("a.test", false, "a.test"));
	assert_false(gw_host_pattern_matches("a.test", false, "b.a.test"));
	assert_true(gw_host_pattern_matches("a.test", true, "b.a.test"));
	assert_true(gw_host_pattern_matches("a.test", true, "c.b.a.test"));
	assert_false(gw_host_pattern_matches("a.test", true, "a.test"));
	assert_false(gw_host_pattern_matches("a.test", true, "ba.test"));
	assert_false(gw_host_pattern_matches("a.test", true, "b.a.test.evil"));
	assert_false(gw_host_pattern_matches("1", true, "[::1]"));
}

/* ---- the forms in which the gateway writes a secret are redacted too ---- */

struct out {
	char buf[4096];
	size_t len;
};

static int collect(const char *p, size_t n, void *ud)
{
	struct out *o = ud;
	assert_true(o->len + n < sizeof(o->buf));
	memcpy(o->buf + o->len, p, n);
	o->len += n;
	o->buf[o->len] = '\0';
	return 0;
}

/* Redacts text fed in two pieces cut at every offset; returns the result. */
static void redact_every_split(struct gw_vault *v, const char *text, struct out *first)
{
	size_t len = strlen(text);
	for (size_t cut = 0; cut <= len; cut++) {
		struct out o = { .len = 0 };
		struct gw_redactor *r = NULL;
		assert_int_equal(gw_redactor_new(v, &r), 0);
		assert_int_equal(gw_redact(r, text, cut, collect, &o), 0);
		assert_int_equal(gw_redact(r, text + cut, len - cut, collect, &o), 0);
		assert_int_equal(gw_redact_finish(r, collect, &o), 0);
		gw_redactor_free(r);
		if (cut == 0)
			*first = o;
		else
			assert_string_equal(o.buf, first->buf);
	}
}

static void test_secret_forms_redacted(void **state)
{
	/* A secret with characters that percent-encoding changes. */
	const char *vtext = "secrets:\n"
			    "  gh: ghp_REAL+/=&0123456789\n"
			    "  q: key with spaces+&/\n";
	const char *policy = "rules: []\n"
			     "credentials:\n"
			     "  - secret: gh\n"
			     "    host: github.com\n"
			     "    basic: x-access-token\n"
			     "  - secret: q\n"
			     "    host: api.example.com\n"
			     "    query: key\n";
	struct gw_options o = { .mode = GW_MODE_RESTRICTED };
	o.policy_file = write_file("p.yaml", 0600, policy);
	o.vault_file = write_file("v.yaml", 0600, vtext);
	struct gw_config *cfg = build_ok(&o);
	struct gw_vault *v = NULL;
	struct al_error err = { 0 };
	assert_int_equal(gw_vault_load(o.vault_file, &v, &err), 0);
	assert_int_equal(gw_config_add_secret_forms(cfg, v, &err), 0);
	/* Adding them twice changes nothing. */
	assert_int_equal(gw_config_add_secret_forms(cfg, v, &err), 0);

	/* base64("x-access-token:ghp_REAL+/=&0123456789"), as an echo of the
	 * Authorization field would carry it. */
	const char *b64 = "eC1hY2Nlc3MtdG9rZW46Z2hwX1JFQUwrLz0mMDEyMzQ1Njc4OQ==";
	char text[1024];
	snprintf(
		text, sizeof(text),
		"{\"authorization\":\"Basic %s\",\"args\":{\"key\":"
		"\"key%%20with%%20spaces%%2B%%26%%2F\",\"k2\":\"key%%20with%%20spaces%%2b%%26%%2f\","
		"\"k3\":\"key+with+spaces%%2B%%26%%2F\"},"
		"\"raw\":\"key with spaces+&/\"}",
		b64);
	struct out res;
	redact_every_split(v, text, &res);
	assert_null(strstr(res.buf, b64));
	assert_null(strstr(res.buf, "with"));
	assert_null(strstr(res.buf, "ghp_"));
	assert_string_equal(res.buf,
			    "{\"authorization\":\"Basic [redacted]\",\"args\":"
			    "{\"key\":\"[redacted]\",\"k2\":\"[redacted]\",\"k3\":\"[redacted]\"},"
			    "\"raw\":\"[redacted]\"}");
	gw_vault_free(v);
	gw_config_free(cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_build_minimal),
		cmocka_unit_test(test_build_full),
		cmocka_unit_test(test_sandbox_env),
		cmocka_unit_test(test_build_credential_errors),
		cmocka_unit_test(test_build_vault_errors),
		cmocka_unit_test(test_build_upstream_errors),
		cmocka_unit_test(test_build_other_errors),
		cmocka_unit_test(test_build_grants),
		cmocka_unit_test(test_parse_hostport),
		cmocka_unit_test(test_parse_sockaddr),
		cmocka_unit_test(test_host_pattern),
		cmocka_unit_test(test_secret_forms_redacted),
		cmocka_unit_test(test_build_allow_cidr),
		cmocka_unit_test(test_next_generation),
	};
	return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* The gateway's decisions, asked directly (decide.h): the same verdicts the
 * engine acts on, without a connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/decide.h"

static char tmpdir[64];

static int setup(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_decide.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	char p[128];
	snprintf(p, sizeof(p), "%s/p.yaml", tmpdir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/v.yaml", tmpdir);
	unlink(p);
	return rmdir(tmpdir);
}

static const char *write_file(const char *name, const char *text)
{
	static char path[2][128];
	static int next;
	char *p = path[next++ % 2];
	snprintf(p, 128, "%s/%s", tmpdir, name);
	unlink(p);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return p;
}

static const char vault[] = "secrets:\n"
			    "  anthropic: sk-ant-REAL-0123456789\n"
			    "  github: ghp_REAL0123456789\n";

static const char policy[] = "rules:\n"
			     "  - id: api\n"
			     "    host: api.anthropic.com\n"
			     "    port: 443\n"
			     "    paths: [/v1/]\n"
			     "  - id: gh-api\n"
			     "    host: api.github.com\n"
			     "  - id: gh\n"
			     "    host: github.com\n"
			     "  - id: example\n"
			     "    host: '*.example.com'\n"
			     "    methods: [GET]\n"
			     "  - id: no-admin\n"
			     "    action: deny\n"
			     "    host: '*.example.com'\n"
			     "    paths: [/admin]\n"
			     "  - id: no-evil\n"
			     "    action: deny\n"
			     "    host: evil.example.com\n"
			     "credentials:\n"
			     "  - secret: anthropic\n"
			     "    host: api.anthropic.com\n"
			     "    paths: [/v1/messages]\n"
			     "    header: x-api-key\n"
			     "  - secret: github\n"
			     "    host: api.github.com\n"
			     "    header: authorization\n"
			     "    prefix: 'Bearer '\n"
			     "    github: true\n"
			     "  - secret: github\n"
			     "    host: github.com\n"
			     "    basic: x-access-token\n"
			     "    github: true\n";

static struct gw_config *config(enum gw_mode mode, char *const *grants, size_t n_grants)
{
	struct gw_options o = { .mode = mode, .label = "t" };
	o.policy_file = write_file("p.yaml", policy);
	o.vault_file = write_file("v.yaml", vault);
	o.grants = grants;
	o.n_grants = n_grants;
	struct gw_config *cfg = NULL;
	struct al_error err = { 0 };
	if (gw_config_build(&o, &cfg, &err) < 0)
		fail_msg("gw_config_build: %s", al_error_message(&err));
	return cfg;
}

static struct gw_verdict req(const struct gw_config *cfg, const char *method, const char *host,
			     uint16_t port, const char *path, bool tls)
{
	struct gw_request_facts f = {
		.method = method, .host = host, .port = port, .path = path, .tls = tls
	};
	struct gw_verdict v;
	gw_decide_request(cfg, cfg->policy, &f, &v);
	return v;
}

static struct gw_verdict tunnel(const struct gw_config *cfg, const char *host, uint16_t port)
{
	struct gw_verdict v;
	gw_decide_tunnel(cfg, cfg->policy, host, port, &v);
	return v;
}

static void test_tunnel_step(void **state)
{
	struct gw_config *cfg = config(GW_MODE_RESTRICTED, NULL, 0);
	assert_true(tunnel(cfg, "api.anthropic.com", 443).allow);
	/* The rule names port 443: another port opens no tunnel. */
	struct gw_verdict v = tunnel(cfg, "api.anthropic.com", 8443);
	assert_false(v.allow);
	assert_int_equal(v.status, 403);
	assert_string_equal(v.reason, "no rule allows this host");
	assert_true(tunnel(cfg, "a.example.com", 443).allow);
	/* A host a deny rule refuses whole: no tunnel, no DNS answer. */
	assert_false(tunnel(cfg, "evil.example.com", 443).allow);
	assert_false(tunnel(cfg, "evil.example.com", 0).allow);
	assert_false(tunnel(cfg, "example.com", 0).allow);
	assert_false(tunnel(cfg, "unknown.test", 0).allow);
	assert_true(tunnel(cfg, "api.anthropic.com", 0).allow); /* the DNS stub's question */
	gw_config_free(cfg);
}

static void test_request_step(void **state)
{
	struct gw_config *cfg = config(GW_MODE_RESTRICTED, NULL, 0);
	struct gw_verdict v = req(cfg, "POST", "api.anthropic.com", 443, "/v1/messages", true);
	assert_true(v.allow);
	assert_string_equal(v.rule, "api");
	assert_int_equal(v.generation, cfg->policy->generation);
	assert_non_null(v.cred);
	assert_string_equal(v.cred->secret, "anthropic");
	/* Allowed, but outside the credential's paths: no credential. */
	v = req(cfg, "GET", "api.anthropic.com", 443, "/v1/models", true);
	assert_true(v.allow);
	assert_null(v.cred);
	/* Outside the rule's paths. */
	v = req(cfg, "GET", "api.anthropic.com", 443, "/v2/x", true);
	assert_false(v.allow);
	assert_int_equal(v.status, 403);
	/* Never a credential in clear text. */
	v = req(cfg, "POST", "api.anthropic.com", 443, "/v1/messages", false);
	assert_true(v.allow);
	assert_null(v.cred);
	/* Methods, and deny rules winning in any case of the path. */
	assert_true(req(cfg, "GET", "a.example.com", 443, "/x", true).allow);
	assert_false(req(cfg, "POST", "a.example.com", 443, "/x", true).allow);
	v = req(cfg, "GET", "a.example.com", 443, "/ADMIN/x", true);
	assert_false(v.allow);
	assert_string_equal(v.rule, "no-admin");
	gw_config_free(cfg);
}

static void test_github_grants(void **state)
{
	/* No grant: the request goes on, with no credential. */
	struct gw_config *cfg = config(GW_MODE_RESTRICTED, NULL, 0);
	struct gw_verdict v = req(cfg, "GET", "api.github.com", 443, "/repos/acme/app", true);
	assert_true(v.allow);
	assert_null(v.cred);
	gw_config_free(cfg);

	char g0[] = "github:acme/app";
	char *grants[] = { g0 };
	cfg = config(GW_MODE_RESTRICTED, grants, 1);
	v = req(cfg, "GET", "api.github.com", 443, "/repos/acme/app/pulls", true);
	assert_true(v.allow);
	assert_non_null(v.cred);
	v = req(cfg, "GET", "github.com", 443, "/acme/app.git/info/refs", true);
	assert_true(v.allow);
	assert_non_null(v.cred);
	assert_int_equal(v.cred->kind, GW_CRED_BASIC);
	/* Another repository, a sibling sharing the prefix: 403, no credential. */
	v = req(cfg, "GET", "api.github.com", 443, "/repos/acme/app-evil", true);
	assert_false(v.allow);
	assert_int_equal(v.status, 403);
	assert_string_equal(v.reason, "repository not granted to this run");
	assert_null(v.cred);
	v = req(cfg, "GET", "github.com", 443, "/acme/other.git/info/refs", true);
	assert_false(v.allow);
	/* Work, not administration: deleting the repository, reading its
	 * secrets or merging needs a github-admin grant. */
	assert_true(req(cfg, "POST", "api.github.com", 443, "/repos/acme/app/pulls", true).allow);
	/* A push goes on once its ref updates are checked; a fetch at once. */
	v = req(cfg, "POST", "github.com", 443, "/acme/app.git/git-receive-pack", true);
	assert_true(v.allow);
	assert_true(v.check_push);
	v = req(cfg, "POST", "github.com", 443, "/acme/app.git/git-upload-pack", true);
	assert_true(v.allow);
	assert_false(v.check_push);
	static const char *const admin[][2] = {
		{ "DELETE", "/repos/acme/app" },
		{ "POST", "/repos/acme/app/forks" },
		{ "GET", "/repos/acme/app/actions/secrets" },
		{ "PUT", "/repos/acme/app/pulls/1/merge" },
		{ "POST", "/repos/acme/app/hooks" },
	};
	for (size_t i = 0; i < sizeof(admin) / sizeof(admin[0]); i++) {
		v = req(cfg, admin[i][0], "api.github.com", 443, admin[i][1], true);
		assert_false(v.allow);
		assert_int_equal(v.status, 403);
		assert_null(v.cred);
		assert_non_null(strstr(v.reason, "github-admin:"));
	}
	gw_config_free(cfg);

	char g1[] = "github-admin:acme/app";
	char *admin_grants[] = { g1 };
	cfg = config(GW_MODE_RESTRICTED, admin_grants, 1);
	for (size_t i = 0; i < sizeof(admin) / sizeof(admin[0]); i++) {
		v = req(cfg, admin[i][0], "api.github.com", 443, admin[i][1], true);
		assert_true(v.allow);
		assert_non_null(v.cred);
	}
	v = req(cfg, "POST", "github.com", 443, "/acme/app.git/git-receive-pack", true);
	assert_true(v.allow);
	assert_false(v.check_push); /* the administration may push anywhere */
	gw_config_free(cfg);
}

static void test_open_mode(void **state)
{
	struct gw_config *cfg = config(GW_MODE_OPEN, NULL, 0);
	struct gw_verdict v = tunnel(cfg, "anything.test", 443);
	assert_true(v.allow);
	assert_string_equal(v.rule, "open");
	v = req(cfg, "DELETE", "anything.test", 443, "/", true);
	assert_true(v.allow);
	assert_string_equal(v.rule, "open");
	/* The policy's deny rules still deny, a whole host at the tunnel. */
	v = tunnel(cfg, "evil.example.com", 443);
	assert_false(v.allow);
	assert_string_equal(v.rule, "no-evil");
	v = req(cfg, "GET", "evil.example.com", 443, "/", true);
	assert_false(v.allow);
	assert_string_equal(v.rule, "no-evil");
	v = req(cfg, "GET", "a.example.com", 443, "/Admin/x", true);
	assert_false(v.allow);
	assert_string_equal(v.rule, "no-admin");
	/* Allow rules restrict nothing under open (their methods, here). */
	v = req(cfg, "POST", "a.example.com", 443, "/x", true);
	assert_true(v.allow);
	assert_string_equal(v.rule, "open");
	/* Credentials still apply by scope under open. */
	v = req(cfg, "POST", "api.anthropic.com", 443, "/v1/messages", true);
	assert_non_null(v.cred);
	gw_config_free(cfg);
}

/* Where the path cannot change a decision, an ambiguous one fools nothing. */
static void test_decision_uses_path(void **state)
{
	struct gw_config *cfg = config(GW_MODE_RESTRICTED, NULL, 0);
	assert_true(
		gw_decision_uses_path(cfg, cfg->policy, "api.anthropic.com", 443)); /* rule paths */
	assert_true(gw_decision_uses_path(cfg, cfg->policy, "a.example.com", 443)); /* a deny's */
	assert_true(gw_decision_uses_path(cfg, cfg->policy, "api.github.com", 443)); /* GitHub */
	assert_true(gw_decision_uses_path(cfg, cfg->policy, "github.com", 443));
	assert_false(gw_decision_uses_path(cfg, cfg->policy, "unknown.test", 443));
	gw_config_free(cfg);
	cfg = config(GW_MODE_OPEN, NULL, 0);
	/* Under open the deny rules' paths still matter, and credentials'. */
	assert_true(gw_decision_uses_path(cfg, cfg->policy, "a.example.com", 443));
	assert_false(gw_decision_uses_path(cfg, cfg->policy, "unknown.test", 443));
	assert_true(gw_decision_uses_path(cfg, cfg->policy, "api.anthropic.com", 443));
	gw_config_free(cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tunnel_step),	   cmocka_unit_test(test_request_step),
		cmocka_unit_test(test_github_grants),	   cmocka_unit_test(test_open_mode),
		cmocka_unit_test(test_decision_uses_path),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

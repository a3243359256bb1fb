/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "control/conf.h"

static struct ctl_conf *load_ok(const char *text)
{
	struct ctl_conf *c = NULL;
	struct al_error err = { 0 };
	int r = ctl_conf_load_string("airlock.yaml", text, strlen(text), &c, &err);
	if (r < 0)
		fail_msg("load: %s", al_error_message(&err));
	return c;
}

/* Loading fails; the message must hold want. */
static void load_bad(const char *text, const char *want)
{
	struct ctl_conf *c = NULL;
	struct al_error err = { 0 };
	int r = ctl_conf_load_string("airlock.yaml", text, strlen(text), &c, &err);
	assert_true(r < 0);
	assert_null(c);
	if (!strstr(al_error_message(&err), want))
		fail_msg("message '%s' lacks '%s'", al_error_message(&err), want);
}

static void test_builtin_default(void **state)
{
	struct ctl_conf *c = load_ok("");
	assert_int_equal(c->n_agents, 5);
	assert_int_equal(c->n_presets, 5);
	const char *names[] = { "claude", "codex", "gemini", "opencode", "pi" };
	for (size_t i = 0; i < 5; i++) {
		const struct ctl_preset *p = ctl_conf_preset(c, names[i]);
		assert_non_null(p);
		assert_string_equal(p->agent->name, names[i]);
		assert_int_equal(p->network, SBX_NETWORK_RESTRICTED);
		/* Restricted to the agent's model host, with its credential. */
		assert_non_null(strstr(p->policy, p->agent->hosts[0].host));
		assert_non_null(strstr(p->policy, "\"credentials\""));
		assert_non_null(strstr(p->policy, p->agent->hosts[0].secret));
		assert_int_equal(strlen(p->version), 16);
		assert_true(p->agent->n_install >= 1);
	}
	assert_string_equal(c->state_dir, "/var/lib/airlock");
	assert_string_equal(c->store_dir, "/var/lib/airlock/store");
	assert_string_equal(c->vault, "/var/lib/airlock/vault.yaml");
	ctl_conf_free(c);
}

static void test_argv_templates_whole(void **state)
{
	struct ctl_conf *c = load_ok("");
	for (size_t i = 0; i < c->n_agents; i++) {
		const struct ctl_agent *a = &c->agents[i];
		bool prompt = false, session = false;
		for (size_t j = 0; a->argv_resume[j]; j++) {
			prompt |= strcmp(a->argv_resume[j], "{prompt}") == 0;
			session |= strcmp(a->argv_resume[j], "{session}") == 0;
		}
		assert_true(session);
		assert_true(prompt || a->prompt_stdin);
	}
	ctl_conf_free(c);
	/* Spliced into another argument: refused, with the line. */
	load_bad("agents:\n"
		 "  mine:\n"
		 "    parser: claude\n"
		 "    first: [x, \"--p={prompt}\"]\n"
		 "    resume: [x, \"{session}\"]\n"
		 "    model_hosts: [{host: a.example, secret: s, header: x-key}]\n",
		 "airlock.yaml:4");
	load_bad("agents:\n"
		 "  mine:\n"
		 "    parser: claude\n"
		 "    first: [x, \"{prompt}\"]\n"
		 "    resume: [x, \"{prompt}\"]\n"
		 "    model_hosts: [{host: a.example, secret: s, header: x-key}]\n",
		 "need {session}");
}

static void test_preset_errors_name_line_and_key(void **state)
{
	load_bad("presets:\n  p:\n    agent: claude\n    nework: open\n", "airlock.yaml:4");
	load_bad("presets:\n  p:\n    agent: claude\n    nework: open\n", "unknown key");
	load_bad("presets:\n  p:\n    agent: nobody\n", "no agent of that name");
	load_bad("presets:\n  p:\n    agent: claude\n    network: wide\n", "airlock.yaml:4");
	load_bad("presets:\n  p:\n    agent: claude\n    limits: {memory: 1M}\n", "at least 64M");
	load_bad("presets:\n  p:\n    agent: claude\n    limits: {disk: 1M}\n", "at least 16M");
	load_bad("presets:\n  p:\n    agent: claude\n    limits: {egress_bytes: lots}\n",
		 "airlock.yaml:4");
	load_bad("presets:\n  p:\n    agent: claude\n    github: [\"a/b/c\"]\n", "OWNER/REPO");
	load_bad("presets:\n  P!:\n    agent: claude\n", "preset's name");
	load_bad("stat_dir: /x\n", "unknown key");
	load_bad("state_dir: relative\n", "absolute path");
	load_bad("default_preset: nope\n", "no preset of that name");
	/* A policy problem is found by the gateway's own parser, and still
	 * named at its line in this file. */
	load_bad("presets:\n"
		 "  p:\n"
		 "    agent: claude\n"
		 "    policy:\n"
		 "      rules:\n"
		 "        - host: ok.example\n"
		 "        - host: bad.example\n"
		 "          port: 99999\n",
		 "airlock.yaml:8");
}

static void test_preset_policy_merged(void **state)
{
	struct ctl_conf *c = load_ok("presets:\n"
				     "  p:\n"
				     "    agent: codex\n"
				     "    github: [acme/*, Other/one]\n"
				     "    env: {FOO: bar}\n"
				     "    limits: {memory: 2G, turn_time: 10m, cpus: 1.5}\n"
				     "    policy:\n"
				     "      rules:\n"
				     "        - host: registry.npmjs.org\n"
				     "      allow_cidrs: [10.9.0.0/16]\n");
	const struct ctl_preset *p = ctl_conf_preset(c, "p");
	assert_non_null(p);
	assert_non_null(strstr(p->policy, "api.openai.com"));
	assert_non_null(strstr(p->policy, "registry.npmjs.org"));
	assert_non_null(strstr(p->policy, "10.9.0.0/16"));
	assert_int_equal(p->limits.memory, 2ull << 30);
	assert_int_equal(p->limits.turn_ms, 600000);
	assert_string_equal(p->env[0], "FOO=bar");
	assert_true(ctl_preset_allows_repo(p, "acme", "anything"));
	assert_true(ctl_preset_allows_repo(p, "other", "ONE"));
	assert_false(ctl_preset_allows_repo(p, "other", "one-evil"));
	assert_false(ctl_preset_allows_repo(p, "acme-evil", "x"));
	assert_false(ctl_preset_allows_repo(p, "evil", "one"));
	/* Only the file's presets exist, the first is the default. */
	assert_int_equal(c->n_presets, 1);
	assert_string_equal(c->default_preset, "p");
	ctl_conf_free(c);
}

static void test_version_follows_setup(void **state)
{
	struct ctl_conf *a = load_ok("presets:\n  p:\n    agent: pi\n"
				     "    setup: {commands: [\"echo one\"]}\n");
	struct ctl_conf *b = load_ok("presets:\n  p:\n    agent: pi\n"
				     "    setup: {commands: [\"echo two\"]}\n");
	struct ctl_conf *d = load_ok("presets:\n  p:\n    agent: pi\n"
				     "    setup: {commands: [\"echo one\"]}\n"
				     "    env: {X: y}\n");
	assert_string_not_equal(ctl_conf_preset(a, "p")->version, ctl_conf_preset(b, "p")->version);
	/* What setup does not depend on leaves it. */
	assert_string_equal(ctl_conf_preset(a, "p")->version, ctl_conf_preset(d, "p")->version);
	ctl_conf_free(a);
	ctl_conf_free(b);
	ctl_conf_free(d);
}

static void test_agent_override(void **state)
{
	struct ctl_conf *c =
		load_ok("agents:\n"
			"  claude:\n"
			"    parser: claude\n"
			"    first: [claude, -p, \"{prompt}\"]\n"
			"    resume: [claude, -p, --resume, \"{session}\", \"{prompt}\"]\n"
			"    model_hosts:\n"
			"      - {host: llm.internal.example, secret: k, header: x-api-key}\n");
	const struct ctl_agent *a = ctl_conf_agent(c, "claude");
	assert_string_equal(a->origin, "airlock.yaml");
	assert_string_equal(a->hosts[0].host, "llm.internal.example");
	assert_int_equal(c->n_agents, 5);
	assert_non_null(strstr(ctl_conf_preset(c, "claude")->policy, "llm.internal.example"));
	ctl_conf_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_builtin_default),
		cmocka_unit_test(test_argv_templates_whole),
		cmocka_unit_test(test_preset_errors_name_line_and_key),
		cmocka_unit_test(test_preset_policy_merged),
		cmocka_unit_test(test_version_follows_setup),
		cmocka_unit_test(test_agent_override),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The deployment config: the operator's YAML file (default
 * /etc/airlock/airlock.yaml; docs/sessions.md), or a built-in default when
 * there is none. It names where state lives, the agents (airlock ships
 * definitions for Claude Code, Gemini CLI, Codex, opencode and pi; the
 * file may override or add), and the presets callers choose by name:
 * image, setup, network policy with credentials, GitHub grants a session
 * may ask for, environment, limits, agent. Callers never supply any of
 * those themselves.
 *
 * Loading checks everything (each preset's policy is built as the gateway
 * would build it) and names file, line and key for the first problem; a
 * config that fails to load changes and starts nothing.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "control/agentout.h"
#include "sandbox/sandbox.h"

#define CTL_CONF_DEFAULT_PATH "/etc/airlock/airlock.yaml"
#define CTL_STATE_DEFAULT "/var/lib/airlock"
/* The host uid and gid owning session trees (workspace and agent home):
 * root inside a session's sandbox, nobody's on the host. Outside the
 * sandboxes' uid ranges and apart from the gateway's uid. */
#define CTL_WORKSPACE_UID_DEFAULT 0x5ffffffeu
/* Where a preset's setup installs what sessions share (read-only there). */
#define CTL_TOOLS_PATH SBX_TOOLS_PATH

/* How an agent's model host gets its real key (the gateway's credential). */
struct ctl_model_host {
	char *host;
	char **paths; /* path prefixes of the model calls (the credential's scope) */
	size_t n_paths;
	char *secret; /* the vault entry */
	char *header; /* placement: a header (with prefix), or */
	char *prefix;
	char *query; /* a query parameter */
	char *env;   /* the variable holding the dummy inside */
	char *dummy; /* its value; NULL: the gateway's default */
};

struct ctl_agent {
	char *name;
	char *title;
	char *origin;	/* "built-in" or the config file */
	char **install; /* npm package specs setup installs under CTL_TOOLS_PATH */
	size_t n_install;
	/* argv templates, NULL-terminated; "{prompt}" and "{session}" are
	 * whole elements, replaced by the message and the agent's session id */
	char **argv_first, **argv_resume;
	bool prompt_stdin;   /* the message goes on stdin (closed after it) */
	bool choose_session; /* the first turn's {session} is a UUID airlock makes */
	char *home;	     /* the agent's home directory inside the sandbox */
	/* Files a new session's home starts with (its settings: telemetry
	 * off, a provider of our own): paths relative to the home. */
	char **file_paths, **file_texts;
	size_t n_files;
	char **env; /* K=V */
	size_t n_env;
	struct ctl_model_host *hosts;
	size_t n_hosts;
	enum ctl_parser parser;
	bool node_heap; /* size Node's heap from the memory limit (NODE_OPTIONS) */
};

struct ctl_limits {
	uint64_t memory;	  /* bytes; 0 none */
	uint64_t pids;		  /* 0 none */
	double cpus;		  /* 0 none */
	uint64_t disk;		  /* bytes a sandbox's layers may hold; 0 none */
	uint64_t turn_ms;	  /* wall time per turn */
	uint64_t output;	  /* bytes of an agent's output per turn */
	uint64_t egress_requests; /* per turn; 0 none */
	uint64_t egress_bytes;	  /* per turn; 0 none */
};

struct ctl_preset {
	char *name;
	const struct ctl_agent *agent;
	char *image;  /* "host" or a directory */
	char **setup; /* shell commands, run once per preset version */
	size_t n_setup;
	char *setup_policy; /* the setup's gateway policy (text); NULL: the preset's */
	enum sbx_network network;
	char *policy;	   /* the gateway policy (text, in the config's line numbers) */
	char *policy_name; /* what its messages call it: the config file */
	char **github;	   /* OWNER/REPO, or OWNER/ then '*': what a session may be granted */
	size_t n_github;
	char **env; /* K=V */
	size_t n_env;
	char **upstream_cas; /* PEM files the gateway trusts upstream too */
	size_t n_upstream_cas;
	struct ctl_limits limits;
	char version[17]; /* hex; changes when what setup depends on changes */
};

struct ctl_conf {
	char *file; /* NULL: the built-in default */
	char *state_dir;
	char *store_dir;
	char *tools_dir; /* the presets' setup results */
	char *vault;
	uint64_t retention_ms; /* sessions idle this long go at gc; 0 never */
	uint32_t workspace_uid;
	struct ctl_agent *agents;
	size_t n_agents;
	struct ctl_preset *presets;
	size_t n_presets;
	char *default_preset;
};

/*
 * path NULL: CTL_CONF_DEFAULT_PATH when it exists, else the built-in
 * default. A path given and missing is an error.
 */
int ctl_conf_load(const char *path, struct ctl_conf **ret, struct al_error *err);
/* The same from text (tests; name is what messages call it). */
int ctl_conf_load_string(const char *name, const char *text, size_t len, struct ctl_conf **ret,
			 struct al_error *err);
void ctl_conf_free(struct ctl_conf *c);

const struct ctl_preset *ctl_conf_preset(const struct ctl_conf *c, const char *name);
const struct ctl_agent *ctl_conf_agent(const struct ctl_conf *c, const char *name);
/* Whether the preset lets a session be granted github:OWNER/REPO. */
bool ctl_preset_allows_repo(const struct ctl_preset *p, const char *owner, const char *repo);

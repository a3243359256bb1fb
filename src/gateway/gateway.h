/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The egress gateway process: the only way out of a sandbox and the only
 * place a real credential exists.
 *
 * The caller (the CLI today, the control side later) collects options into
 * struct gw_options. gw_start runs the gateway process, a program of its own
 * (GW_HELPER, found beside airlock: common/libexec.h), and hands it those
 * options over a socket (gateway/handover.h): nothing else of the caller's
 * memory, descriptors or environment reaches it. The gateway builds its
 * configuration (policy, credentials, upstream overrides), loads the vault,
 * the trust store and the operator's CA files, makes the sandbox's own CA,
 * reports the CA certificate and the sandbox's environment back, then drops
 * every privilege (its own uid, an empty root, no_new_privs, seccomp) before
 * it accepts anything from a sandbox. gw_attach hands it a sandbox's
 * listeners (created inside that sandbox's network namespace) over IPC; a
 * connection's sandbox is known from the listener it arrived on. The
 * functions a caller needs (gw_start to gw_set_policy, gw_uid_*) use libc
 * alone; `airlock gateway` and the gateway process itself link the rest.
 *
 * Every function returns 0 or a negative errno and fills err; nothing here
 * exits the caller.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* Where the gateway listens inside a sandbox (its loopback). */
#define GW_PROXY_ADDR "127.0.0.1"
#define GW_PROXY_PORT 3128
#define GW_TRANSPARENT_ADDR "127.0.0.2" /* the DNS stub's answer; listens on 80 and 443 */
#define GW_DNS_ADDR "127.0.0.1"		/* port 53, UDP */

/* Default unprivileged uid/gid of the gateway (AIRLOCK_GATEWAY_UID overrides). */
#define GW_DEFAULT_UID 0x5fffffffu

/* The gateway's program (see common/libexec.h for where it is found). */
#define GW_HELPER "airlock-gateway"

enum gw_mode {
	GW_MODE_NONE = 0,   /* nothing leaves */
	GW_MODE_RESTRICTED, /* the policy decides every request */
	GW_MODE_OPEN,	    /* any public host (address vetting and audit still apply) */
};

/* What the caller collected (command line, later the control side). */
struct gw_options {
	enum gw_mode mode;
	const char *label;	 /* sandbox id or "standalone": CA subject, audit lines */
	const char *policy_file; /* NULL: none (see docs/gateway.md) */
	const char *policy_text; /* or the same format in memory (policy_file NULL) */
	const char *policy_name; /* what messages call policy_text; NULL: "policy" */
	size_t policy_len;
	char *const *allow; /* --allow RULE: HOST[:PORT][/PATH-PREFIX] */
	size_t n_allow;
	char *const *grants; /* --grant github:OWNER/REPO */
	size_t n_grants;
	char *const *upstreams; /* --upstream HOST:PORT=ADDR:PORT */
	size_t n_upstreams;
	char *const *upstream_cas; /* --upstream-ca FILE (PEM) */
	size_t n_upstream_cas;
	char *const *allow_cidrs; /* --allow-cidr CIDR: as a policy file's allow_cidrs */
	size_t n_allow_cidrs;
	const char *vault_file; /* NULL: no credentials */
	bool policy_only;	/* checking a configuration: credentials need no vault yet */
	bool many_clients;	/* `airlock gateway`: one listener for a whole host, so
					* limits.connections defaults to its maximum and the
					* audit log is not bounded unless limits.audit_max is set */
};

/*
 * The gateway's uid: AIRLOCK_GATEWAY_UID (a number from 1 to 4294967294)
 * or GW_DEFAULT_UID; -EINVAL with a message for any other value.
 */
int gw_uid_from_env(uint32_t *ret, struct al_error *err);

/*
 * -EINVAL with a message when uid is one of the sandboxes' uids, [first,
 * end): a sandbox's process would then share the gateway's uid. end 0: none.
 */
int gw_uid_check(uint32_t uid, uint32_t first, uint32_t end, struct al_error *err);

struct gw_config; /* opaque: parsed policy, credentials, overrides, CA files */

/* Parses and checks everything (files named in opts are read; the vault
 * only for its permissions and syntax, its values are dropped again). */
int gw_config_build(const struct gw_options *opts, struct gw_config **ret, struct al_error *err);
void gw_config_free(struct gw_config *cfg);

/*
 * The environment a sandbox behind this gateway gets: proxy variables,
 * NO_PROXY, CA bundle variables, and the dummy values of credentials that
 * name an environment variable. NULL-terminated array of "K=V" strings;
 * free with gw_env_free.
 */
int gw_sandbox_env(const struct gw_config *cfg, const char *bundle_path, const char *ca_path,
		   char ***ret, size_t *ret_n);
void gw_env_free(char **env, size_t n);

/* A started gateway process. */
struct gw_proc {
	pid_t pid;
	int pidfd;
	int ctl;      /* IPC socket to the gateway */
	char *ca_pem; /* the sandbox's CA certificate (PEM); for its trust bundle */
	size_t ca_pem_len;
	char **env; /* the sandbox's environment (gw_sandbox_env), NULL-terminated */
	size_t n_env;
};

/* How the gateway process lives. */
struct gw_start_opts {
	bool detach;  /* outlive the caller (persistent sandboxes): new session */
	int log_fd;   /* gateway's own errors; -1: /dev/null */
	uint32_t uid; /* unprivileged user to become; 0: gw_uid_from_env */
	/* The sandboxes' uids, [first, end), which uid must stay out of
	 * (gw_uid_check; the gateway checks again); end 0: none. */
	uint32_t sandbox_uid_first, sandbox_uid_end;
	/* For the sandbox's environment (gw_sandbox_env): its trust bundle
	 * and CA file as the sandbox sees them. */
	const char *env_bundle;
	const char *env_ca;
};

/*
 * Starts the gateway process with opts (mode restricted or open) and
 * returns once it has built its configuration, made its CA and dropped
 * privileges; a bad option is the gateway's reason in err, as
 * gw_config_build gives it.
 */
int gw_start(const struct gw_options *opts, const struct gw_start_opts *so, struct gw_proc *ret,
	     struct al_error *err);

/* A sandbox's listeners, created in its network namespace; -1 when absent. */
struct gw_listeners {
	int proxy; /* TCP GW_PROXY_ADDR:GW_PROXY_PORT, listening */
	int http;  /* TCP GW_TRANSPARENT_ADDR:80, listening */
	int https; /* TCP GW_TRANSPARENT_ADDR:443, listening */
	int dns;   /* UDP GW_DNS_ADDR:53, bound */
	int control; /* optional: a listening AF_UNIX socket (root only): gw_set_policy, gw_set_budget */
};

/*
 * Hands the gateway a sandbox's listeners, the audit log (an open append-only
 * file) and a pidfd of the sandbox's init: the gateway serves until that
 * process exits (or, with watch_pidfd -1, until it is killed). The caller's
 * descriptors stay the caller's (close them after).
 */
int gw_attach(struct gw_proc *gp, const char *sandbox_id, const struct gw_listeners *l,
	      int audit_fd, int watch_pidfd, struct al_error *err);

/*
 * Gives the sandbox served behind the control socket at path (struct
 * gw_listeners.control) the policy in the YAML text, a whole policy file
 * as --policy takes it: its rules, hosts and allow_cidrs become the next
 * generation, which replaces the old one whole; credentials, upstreams and
 * limits were fixed when the gateway started and may only be left out or
 * repeated as they are. Otherwise the old generation stays and err says
 * why (messages name the text "policy"). *ret_generation: the new
 * generation.
 */
int gw_set_policy(const char *control_path, const char *text, size_t len, uint64_t *ret_generation,
		  struct al_error *err);

/* What a sandbox's egress budget spent, as gw_set_budget reports it. */
struct gw_budget_used {
	uint64_t requests; /* requests admitted and sent upstream */
	uint64_t bytes;	   /* bytes relayed to and from upstreams */
};

/*
 * Sets the egress budget of the sandbox served behind the control socket at
 * path (as gw_set_policy): at most max_requests requests and max_bytes bytes
 * relayed to and from upstreams from now on (0: no limit for that one), the
 * counts starting from zero. What counts, and what happens at the limit, is
 * in docs/gateway.md ("Egress budget"). *ret_used (when not NULL): what the
 * budget it replaces spent.
 */
int gw_set_budget(const char *control_path, uint64_t max_requests, uint64_t max_bytes,
		  struct gw_budget_used *ret_used, struct al_error *err);

/* Stops the gateway (SIGKILL if it does not stop within a second), reaps it, frees gp. */
void gw_stop(struct gw_proc *gp);
/* Forgets the gateway without stopping it (it lives on, detached); frees gp. */
void gw_release(struct gw_proc *gp);

/*
 * `airlock gateway`: serves as an HTTP proxy on listen_addr (ADDR:PORT) in
 * the foreground until SIGINT or SIGTERM, as uid (gw_uid_from_env). ca_out:
 * where to write the CA certificate (PEM) for clients to trust; audit_fd:
 * -1 for stdout.
 */
int gw_serve_standalone(const struct gw_config *cfg, const char *listen_addr, const char *ca_out,
			int audit_fd, uint32_t uid, struct al_error *err);

/*
 * The gateway process gw_start runs (GW_HELPER GW_PROCESS_ARG, its socket
 * at GW_PROCESS_FD; see gateway/handover.h): reads the handover, starts,
 * serves until its sandboxes are gone. Returns the process's exit status;
 * every failure before it serves goes back to the caller as its reason.
 */
int gw_process_main(int sock);

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's way out: starts the gateway process with the caller's
 * options (it builds its configuration from them and refuses bad ones),
 * and gives the sandbox's spec what it needs from it: the environment
 * (proxy and CA variables, dummy keys) after the caller's own, the CA to
 * trust, and the hook that hands the sandbox's listeners to the gateway
 * when the sandbox exists. The CLI (`sandbox run|create`) and the daemon
 * both go through here; none of the gateway's libraries is loaded here.
 *
 *   struct ctl_net n;
 *   ctl_net_init(&n);
 *   ctl_net_setup(&n, &opts, &spec, &err);   nothing to do without a network
 *   sbx_run(..., &spec, ...) / sbx_create(...)
 *   ctl_net_done(&n, created_and_kept);
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "gateway/gateway.h"
#include "sandbox/sandbox.h"

struct ctl_net_opts {
	/* The gateway's options (its mode follows spec->network; label is
	 * set here). */
	const struct gw_options *gw;
	/* The sandboxes' settings and the gateway's uid (ctl_settings_from_env). */
	const struct sbx_settings *set;
	uint32_t gw_uid;
	/* Append the audit log here (run --audit FILE); NULL: the sandbox's
	 * own audit.jsonl in its state directory, gone with it. */
	const char *audit_file;
	bool detach; /* the gateway outlives the caller (a persistent sandbox) */
	int log_fd;  /* the gateway's own errors; -1: none */
};

struct ctl_net {
	struct gw_proc gp;
	bool started;
	char **env; /* the caller's environment, then the gateway's */
	int audit_fd;
	char sandbox_id[32];  /* once the sandbox exists: whose lines its audit log holds */
	struct al_error *err; /* the sandbox call's: the gateway's reason reaches it */
};

void ctl_net_init(struct ctl_net *n);

/*
 * With spec->network NONE: nothing (0). Otherwise starts the gateway and
 * fills spec->env, n_env, trust_pem and net_ready; spec->env
 * must hold the caller's variables, none of which may be one the gateway
 * sets (-EINVAL naming it). err: the error the later sandbox call will be
 * given too (the gateway's own reason for a failed attach lands there).
 */
int ctl_net_setup(struct ctl_net *n, const struct ctl_net_opts *o, struct sbx_spec *spec,
		  struct al_error *err);

/* keep: the sandbox lives on, and its gateway with it (it leaves when the
 * sandbox's init dies); otherwise the gateway is stopped. Frees n's parts;
 * spec->env and trust_pem point into n until then. */
void ctl_net_done(struct ctl_net *n, bool keep);

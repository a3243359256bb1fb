/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fdutil.h"
#include "common/log.h"
#include "control/net.h"

void ctl_net_init(struct ctl_net *n)
{
	memset(n, 0, sizeof(*n));
	n->audit_fd = -1;
}

static size_t env_name_len(const char *kv)
{
	const char *eq = strchr(kv, '=');
	return eq ? (size_t)(eq - kv) : strlen(kv);
}

/* The sandbox exists: its listeners, audit log and control socket go to
 * the gateway. */
static int net_ready(const struct sbx_net_fds *fds, const char *id, const char *dir, int init_pidfd,
		     void *ud)
{
	struct ctl_net *n = ud;
	snprintf(n->sandbox_id, sizeof(n->sandbox_id), "%s", id);
	_cleanup_close_ int own = -1;
	int audit_fd = n->audit_fd;
	if (audit_fd < 0) {
		char path[4096];
		if (snprintf(path, sizeof(path), "%s/audit.jsonl", dir) >= (int)sizeof(path))
			return al_error_set(n->err, -ENAMETOOLONG, "state directory path too long");
		/* The directory is root's alone; still, no link is followed. */
		own = open_append(path, true);
		if (own < 0)
			return al_error_set_errno(n->err, own, "cannot open %s", path);
		audit_fd = own;
	}
	/* Root's way to change the sandbox's policy later (`sandbox policy`). */
	char sock[4096];
	if (snprintf(sock, sizeof(sock), "%s/gateway.sock", dir) >= (int)sizeof(sock))
		return al_error_set(n->err, -ENAMETOOLONG, "state directory path too long");
	_cleanup_close_ int control = listen_unix_private(sock);
	if (control < 0)
		return al_error_set_errno(n->err, control, "cannot listen on %s", sock);
	struct gw_listeners l = {
		.proxy = fds->proxy,
		.http = fds->http,
		.https = fds->https,
		.dns = fds->dns,
		.control = control,
	};
	log_debug("sandbox %s: its gateway (pid %d) takes the proxy, DNS and control socket %s", id,
		  (int)n->gp.pid, sock);
	return gw_attach(&n->gp, id, &l, audit_fd, init_pidfd, n->err);
}

int ctl_net_setup(struct ctl_net *n, const struct ctl_net_opts *o, struct sbx_spec *spec,
		  struct al_error *err)
{
	n->err = err;
	if (spec->network == SBX_NETWORK_NONE)
		return 0;
	struct gw_options gopts = *o->gw;
	gopts.mode = spec->network == SBX_NETWORK_OPEN ? GW_MODE_OPEN : GW_MODE_RESTRICTED;
	gopts.label = "sandbox";
	if (o->audit_file) {
		n->audit_fd = open_append_regular(o->audit_file);
		if (n->audit_fd == -ELOOP)
			return al_error_set(err, n->audit_fd,
					    "%s is a symbolic link: an audit log is opened without "
					    "following one (give the file it names)",
					    o->audit_file);
		if (n->audit_fd == -EINVAL)
			return al_error_set(err, n->audit_fd,
					    "%s is not a regular file (an audit log must be one)",
					    o->audit_file);
		if (n->audit_fd < 0)
			return al_error_set_errno(err, n->audit_fd, "cannot open %s",
						  o->audit_file);
	}
	struct gw_start_opts so = { .detach = o->detach,
				    .log_fd = o->log_fd,
				    .uid = o->gw_uid,
				    .env_bundle = SBX_TRUST_BUNDLE,
				    .env_ca = SBX_CA_FILE };
	sbx_settings_uids(o->set, &so.sandbox_uid_first, &so.sandbox_uid_end);
	int r = gw_start(&gopts, &so, &n->gp, err);
	if (r < 0)
		return r;
	log_debug("gateway started: pid %d, uid %u, %s, %zu rule%s given as --allow%s%s",
		  (int)n->gp.pid, o->gw_uid, gopts.mode == GW_MODE_OPEN ? "open" : "restricted",
		  gopts.n_allow, gopts.n_allow == 1 ? "" : "s",
		  gopts.policy_file ? ", policy " : "", gopts.policy_file ? gopts.policy_file : "");
	n->started = true;
	/* The gateway's variables are not the caller's to change silently. */
	for (size_t i = 0; i < spec->n_env; i++) {
		size_t len = env_name_len(spec->env[i]);
		for (size_t j = 0; j < n->gp.n_env; j++)
			if (env_name_len(n->gp.env[j]) == len &&
			    strncmp(spec->env[i], n->gp.env[j], len) == 0)
				return al_error_set(
					err, -EINVAL,
					"--env %.*s: the gateway sets this variable in a "
					"sandbox with a network",
					(int)len, spec->env[i]);
	}
	if (spec->n_env + n->gp.n_env > SBX_MAX_ENV)
		return al_error_set(
			err, -E2BIG,
			"too many --env options with the gateway's variables (at most %d)",
			SBX_MAX_ENV);
	n->env = calloc(spec->n_env + n->gp.n_env + 1, sizeof(*n->env));
	if (!n->env)
		return al_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < spec->n_env; i++)
		n->env[i] = spec->env[i];
	for (size_t j = 0; j < n->gp.n_env; j++)
		n->env[spec->n_env + j] = n->gp.env[j];
	spec->n_env += n->gp.n_env;
	spec->env = n->env;
	spec->trust_pem = n->gp.ca_pem;
	spec->trust_pem_len = n->gp.ca_pem_len;
	spec->net_ready = net_ready;
	spec->net_ready_ud = n;
	return 0;
}

void ctl_net_done(struct ctl_net *n, bool keep)
{
	if (n->started) {
		if (keep)
			gw_release(&n->gp);
		else
			gw_stop(&n->gp);
		n->started = false;
	}
	n->audit_fd = safe_close(n->audit_fd);
	free(n->env);
	n->env = NULL;
}

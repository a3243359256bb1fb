/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/gateway: the configuration and the engine. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "gateway/addr.h"
#include "gateway/gateway.h"
#include "gateway/github.h"
#include "gateway/policy.h"
#include "gateway/vault.h"

#define GW_CRED_MAX 256
#define GW_NAME_MAX 64

enum gw_cred_kind {
	GW_CRED_HEADER = 0, /* header: NAME = prefix + secret */
	GW_CRED_QUERY,	    /* ?NAME=secret */
	GW_CRED_BASIC,	    /* Authorization: Basic base64(user:secret) */
};

struct gw_cred {
	char secret[GW_VAULT_NAME_MAX + 1]; /* vault entry */
	char host[GW_HOST_MAX + 3];	    /* normalized; for a wildcard, the suffix */
	bool wildcard;
	uint16_t port; /* 0: any */
	char *paths[GW_RULE_MAX_PATHS];
	size_t n_paths;
	enum gw_cred_kind kind;
	char name[GW_NAME_MAX + 1];   /* header name, query parameter or Basic user */
	char prefix[GW_NAME_MAX + 1]; /* header value prefix ("Bearer ") */
	bool github;		      /* only on the run's granted repositories */
	char env[GW_NAME_MAX + 1];    /* sandbox variable for the dummy value; "" none */
	char dummy[GW_NAME_MAX + 16]; /* the dummy value */
};

struct gw_upstream {
	char host[GW_HOST_MAX + 3]; /* normalized */
	uint16_t port;
	struct sockaddr_storage addr;
	socklen_t addr_len;
};

struct gw_static_host {
	char host[GW_HOST_MAX + 3];
	struct sockaddr_storage addr;
	socklen_t addr_len;
};

struct gw_config {
	enum gw_mode mode;
	char label[GW_NAME_MAX + 1];
	struct gw_policy *policy;
	struct gw_cred *creds;
	size_t n_creds;
	struct gw_upstream *upstreams;
	size_t n_upstreams;
	size_t n_file_upstreams; /* the first of them: the policy file's */
	struct gw_static_host *hosts;
	size_t n_hosts;
	struct gw_cidr *cidrs;
	size_t n_cidrs;
	struct gw_github_grant *grants;
	size_t n_grants;
	char **ca_files;
	size_t n_ca_files;
	char *vault_file;
	/* limits: (milliseconds) */
	uint64_t head_ms;     /* a request head's first byte to its end */
	uint64_t idle_ms;     /* a client connection without a request */
	uint64_t connect_ms;  /* connecting (and TLS) to an upstream */
	uint64_t upstream_ms; /* upstream silence while we wait for it */
	uint64_t write_ms;    /* a client or upstream that does not take our bytes */
	/* per sandbox: */
	uint64_t audit_max;  /* bytes of audit log, then a marker and no more */
	uint64_t max_conns;  /* open client connections */
	uint64_t buffer_max; /* bytes queued in the gateway for the sandbox's connections */
};

#define GW_DEFAULT_AUDIT_MAX (64ull << 20)
#define GW_DEFAULT_CONNECTIONS 512
#define GW_MAX_CONNECTIONS 4096
#define GW_DEFAULT_BUFFERS (16ull << 20)

/* config.c */
bool gw_host_pattern_matches(const char *pattern, bool wildcard, const char *host);
int gw_parse_hostport(const char *s, size_t len, char *host, size_t host_size, uint16_t *port,
		      bool need_port);
int gw_parse_sockaddr(const char *s, struct sockaddr_storage *ss, socklen_t *len);
const struct gw_upstream *gw_config_upstream(const struct gw_config *cfg, const char *host,
					     uint16_t port);
const struct gw_static_host *gw_config_static_host(const struct gw_config *cfg, const char *host);

/*
 * A running gateway's next generation, from a whole policy file (text,
 * called name in messages) parsed as gw_config_build parses one: *ret's
 * policy, hosts and cidrs are the generation (its other fields are cur's
 * limits and nothing else). Credentials, upstreams and limits were fixed
 * when cur was built: a file that names them otherwise than cur has them
 * is refused, naming the key; left out, they stay.
 */
int gw_config_next(const struct gw_config *cur, const char *name, const char *text, size_t len,
		   uint64_t generation, struct gw_config **ret, struct al_error *err);

/* Every credential's secret is in the vault (the gateway checks at start). */
int gw_config_check_vault(const struct gw_config *cfg, const struct gw_vault *v,
			  struct al_error *err);
/* Adds the forms in which the gateway writes each credential (base64 of a
 * Basic pair, percent-encoded query values) to what the vault redacts. */
int gw_config_add_secret_forms(const struct gw_config *cfg, struct gw_vault *v,
			       struct al_error *err);

/* Adds every certificate of a PEM bundle (len bytes) to store; the number
 * added. Anything that is not a PEM certificate ends the reading. */
struct x509_store_st;
int gw_store_add_pem(struct x509_store_st *store, const char *pem, size_t len);

/* engine.c: the event loop serving sandboxes. */
struct gw_engine;
struct gw_engine_opts {
	const struct gw_config *cfg;
	struct gw_vault *vault; /* owned by the engine from here on; may be NULL */
	struct gw_ca *ca;	/* owned by the engine */
	void *upstream_store;	/* X509_STORE *, owned by the engine */
	char *system_bundle;	/* PEM, owned by the engine: parsed into the store on first use */
	size_t system_bundle_len;
	bool exit_when_idle; /* stop when the last sandbox is gone */
};
int gw_engine_new(const struct gw_engine_opts *o, struct gw_engine **ret, struct al_error *err);
/* Loads /etc/resolv.conf and /etc/hosts for upstream lookups (before the root goes). */
int gw_engine_dns_init(struct gw_engine *e, struct al_error *err);
/* Serves the control socket: ATTACH frames add sandboxes. */
int gw_engine_add_control(struct gw_engine *e, int ctl);
/* Adds a sandbox (takes the descriptors). */
int gw_engine_add_sandbox(struct gw_engine *e, const char *id, const struct gw_listeners *l,
			  int audit_fd, int watch_pidfd, struct al_error *err);
/* Stops the loop on SIGINT/SIGTERM. */
int gw_engine_handle_signals(struct gw_engine *e);
int gw_engine_run(struct gw_engine *e);
void gw_engine_free(struct gw_engine *e);

/* IPC frame types between caller and gateway process. */
enum {
	GW_IPC_READY = 1, /* gateway -> caller: CA certificate, sandbox environment (handover.h) */
	GW_IPC_ERROR,	  /* gateway -> caller: message */
	GW_IPC_ATTACH,	  /* caller -> gateway: sandbox id; fds: proxy http https dns audit watch */
	GW_IPC_ATTACHED,  /* gateway -> caller: empty, or GW_IPC_ERROR */
	GW_IPC_POLICY,	  /* root -> gateway (control socket): YAML rules */
	GW_IPC_POLICY_SET, /* gateway -> root: the new generation, as text */
	GW_IPC_HANDOVER,   /* caller -> new gateway process: its options (handover.h) */
	GW_IPC_BUDGET,	   /* root -> gateway (control socket): max requests, bytes (budget.h) */
	GW_IPC_BUDGET_SET, /* gateway -> root: what the replaced budget spent (budget.h) */
};

#define GW_POLICY_TEXT_MAX (1024 * 1024)
#define GW_SANDBOX_ID_MAX 64

/*
 * GW_IPC_ATTACH: one byte saying which descriptors follow (bit 1 << slot,
 * sent in slot order), then the sandbox id (not NUL-terminated).
 */
enum gw_attach_slot {
	GW_SLOT_PROXY = 0,
	GW_SLOT_HTTP,
	GW_SLOT_HTTPS,
	GW_SLOT_DNS,
	GW_SLOT_AUDIT,
	GW_SLOT_WATCH,	 /* a pidfd of the sandbox's init */
	GW_SLOT_CONTROL, /* root's listening socket for policy changes */
	GW_SLOTS,
};

struct gw_attach {
	char id[GW_SANDBOX_ID_MAX + 1];
	int fd[GW_SLOTS]; /* -1: absent */
};

/* The payload (1 + GW_SANDBOX_ID_MAX bytes at most) and the descriptors to
 * send, in order; -EINVAL for an id that is empty or too long. */
int gw_attach_encode(const struct gw_attach *a, uint8_t *payload, size_t *ret_len, int *fds,
		     size_t *ret_n_fds);
/* Takes the descriptors out of m; -EBADMSG (and nothing taken) when the
 * payload or the descriptors do not match. */
struct ipc_msg;
int gw_attach_decode(struct ipc_msg *m, struct gw_attach *ret);

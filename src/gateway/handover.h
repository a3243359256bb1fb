/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a caller hands the gateway process it starts (GW_IPC_HANDOVER), and
 * what the gateway answers once it serves (GW_IPC_READY). Private to
 * src/gateway (its tests and fuzz drivers may use it).
 *
 * The gateway is a program of its own (airlock-gateway, GW_PROCESS_ARG),
 * exec'd with its end of the caller's socket at GW_PROCESS_FD: nothing of
 * the caller's memory reaches it but what is encoded here. Both payloads
 * are a sequence of records, each { uint8_t tag; uint32_t len (host byte
 * order); len bytes }. A string's bytes end with its NUL, and that is its
 * only NUL; it is never empty. The decoders refuse, with -EBADMSG and
 * nothing kept: an unknown tag, a record running past the end, a value of
 * the wrong size or out of range, a string that is empty, too long or
 * holds a NUL, a single field given twice, a list longer than its maximum,
 * a required field missing. Nothing in a payload is trusted to size an
 * allocation: the frame's length was bounded before it was read
 * (GW_HANDOVER_MAX, GW_READY_MAX) and the decoders only point into it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/config.h"
#include "gateway/gateway.h"

#define GW_PROCESS_ARG "--handover"
#define GW_PROCESS_FD 3

#define GW_HANDOVER_LIST_MAX 256 /* entries of each list (--allow, --allow-cidr ...) */
#define GW_HANDOVER_STR_MAX 4096 /* bytes of a string, its NUL included */
#define GW_HANDOVER_POLICY_MAX CONFIG_MAX_FILE_SIZE
#define GW_HANDOVER_REC 5 /* a record's tag and length */
#define GW_HANDOVER_MAX                                                       \
	(GW_HANDOVER_POLICY_MAX +                                             \
	 5 * GW_HANDOVER_LIST_MAX * (GW_HANDOVER_REC + GW_HANDOVER_STR_MAX) + \
	 16 * (GW_HANDOVER_REC + GW_HANDOVER_STR_MAX))

#define GW_READY_PEM_MAX (64 * 1024)
#define GW_READY_ENV_MAX 512
#define GW_READY_MAX                          \
	(GW_HANDOVER_REC + GW_READY_PEM_MAX + \
	 GW_READY_ENV_MAX * (GW_HANDOVER_REC + GW_HANDOVER_STR_MAX))

struct gw_handover {
	/* The caller's options: mode (restricted or open), label, policy (a
	 * file or text, not both), the lists, vault, many_clients. */
	struct gw_options opts;
	uint32_t uid;		    /* to become (neither 0 nor 2^32-1) */
	uint32_t sandbox_uid_first; /* the sandboxes' uids [first, end): uid must lie outside */
	uint32_t sandbox_uid_end;
	bool detach;		/* outlive the caller */
	uint32_t parent;	/* the caller's pid: die with it (required unless detach) */
	const char *env_bundle; /* gw_sandbox_env's paths */
	const char *env_ca;
	/* Storage the decoder points opts' lists at. */
	char *allow[GW_HANDOVER_LIST_MAX];
	char *grants[GW_HANDOVER_LIST_MAX];
	char *upstreams[GW_HANDOVER_LIST_MAX];
	char *upstream_cas[GW_HANDOVER_LIST_MAX];
	char *allow_cidrs[GW_HANDOVER_LIST_MAX];
};

/* Appends the records of h to out (whose maximum should be
 * GW_HANDOVER_MAX); -EINVAL for a value the decoder would refuse, -E2BIG
 * for a list or string over its maximum, -ENOBUFS past out's maximum. */
int gw_handover_encode(const struct gw_handover *h, struct buf *out);

/* Fills *ret with pointers into data (which must outlive it); -EBADMSG. */
int gw_handover_decode(uint8_t *data, size_t len, struct gw_handover *ret);

/* The gateway's answer: its CA certificate and the sandbox's environment. */
struct gw_ready {
	const char *pem; /* not NUL-terminated */
	size_t pem_len;
	const char *env[GW_READY_ENV_MAX]; /* "K=V" */
	size_t n_env;
};

int gw_ready_encode(const char *pem, size_t pem_len, char *const *env, size_t n_env,
		    struct buf *out);
int gw_ready_decode(const uint8_t *data, size_t len, struct gw_ready *ret);

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the gateway process reads first, as root, from whoever started it
 * (GW_IPC_HANDOVER), and what that caller reads back (GW_IPC_READY): any
 * bytes, no crash and no read past them; what is accepted keeps every
 * field's invariant, and encoding it again decodes to the same options.
 * The first byte picks the decoder.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "gateway/handover.h"

static void check_str(const char *s, const uint8_t *data, size_t size)
{
	check(s);
	size_t n = strlen(s);
	check(n > 0 && n < GW_HANDOVER_STR_MAX);
	/* Points into the input, NUL included. */
	check((const uint8_t *)s >= data && (const uint8_t *)s + n < data + size);
}

static void same_list(char *const *a, size_t na, char *const *b, size_t nb)
{
	check(na == nb && na <= GW_HANDOVER_LIST_MAX);
	for (size_t i = 0; i < na; i++)
		check(strcmp(a[i], b[i]) == 0);
}

static void handover(uint8_t *data, size_t size)
{
	static struct gw_handover h, again;
	if (gw_handover_decode(data, size, &h) < 0)
		return;
	const struct gw_options *o = &h.opts;
	check(o->mode == GW_MODE_RESTRICTED || o->mode == GW_MODE_OPEN);
	check_str(o->label, data, size);
	check_str(h.env_bundle, data, size);
	check_str(h.env_ca, data, size);
	check(!(o->policy_file && o->policy_text));
	check(h.uid != 0 && h.uid != UINT32_MAX);
	check(h.sandbox_uid_first <= h.sandbox_uid_end);
	check(h.detach == (h.parent == 0));
	check(o->policy_len <= GW_HANDOVER_POLICY_MAX);
	for (size_t i = 0; i < o->n_allow; i++)
		check_str(o->allow[i], data, size);
	for (size_t i = 0; i < o->n_upstream_cas; i++)
		check_str(o->upstream_cas[i], data, size);
	for (size_t i = 0; i < o->n_allow_cidrs; i++)
		check_str(o->allow_cidrs[i], data, size);

	struct buf b = BUF_INIT(GW_HANDOVER_MAX);
	check(gw_handover_encode(&h, &b) == 0);
	check(b.len == size); /* the same records, in the encoder's order */
	check(gw_handover_decode((uint8_t *)b.data, b.len, &again) == 0);
	check(again.opts.mode == o->mode && strcmp(again.opts.label, o->label) == 0);
	check(again.uid == h.uid && again.parent == h.parent && again.detach == h.detach);
	check(again.sandbox_uid_first == h.sandbox_uid_first &&
	      again.sandbox_uid_end == h.sandbox_uid_end);
	check(again.opts.many_clients == o->many_clients);
	check(again.opts.policy_len == o->policy_len);
	check(!o->policy_text ||
	      memcmp(again.opts.policy_text, o->policy_text, o->policy_len) == 0);
	same_list(again.opts.allow, again.opts.n_allow, o->allow, o->n_allow);
	same_list(again.opts.grants, again.opts.n_grants, o->grants, o->n_grants);
	same_list(again.opts.upstreams, again.opts.n_upstreams, o->upstreams, o->n_upstreams);
	same_list(again.opts.upstream_cas, again.opts.n_upstream_cas, o->upstream_cas,
		  o->n_upstream_cas);
	same_list(again.opts.allow_cidrs, again.opts.n_allow_cidrs, o->allow_cidrs,
		  o->n_allow_cidrs);
	check(strcmp(again.env_bundle, h.env_bundle) == 0 && strcmp(again.env_ca, h.env_ca) == 0);
	buf_free(&b);
}

static void ready(const uint8_t *data, size_t size)
{
	static struct gw_ready rd, again;
	if (gw_ready_decode(data, size, &rd) < 0)
		return;
	check(rd.pem_len > 0 && rd.pem_len <= GW_READY_PEM_MAX && !memchr(rd.pem, 0, rd.pem_len));
	check(rd.n_env <= GW_READY_ENV_MAX);
	for (size_t i = 0; i < rd.n_env; i++) {
		check_str(rd.env[i], data, size);
		const char *eq = strchr(rd.env[i], '=');
		check(eq && eq != rd.env[i]);
	}
	struct buf b = BUF_INIT(GW_READY_MAX);
	check(gw_ready_encode(rd.pem, rd.pem_len, (char *const *)rd.env, rd.n_env, &b) == 0);
	check(gw_ready_decode((const uint8_t *)b.data, b.len, &again) == 0);
	check(again.pem_len == rd.pem_len && memcmp(again.pem, rd.pem, rd.pem_len) == 0);
	check(again.n_env == rd.n_env);
	for (size_t i = 0; i < rd.n_env; i++)
		check(strcmp(again.env[i], rd.env[i]) == 0);
	buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size - 1 > GW_HANDOVER_MAX)
		return 0;
	/* An exact-size copy: a read past the end is the sanitizer's to see. */
	uint8_t *copy = malloc(size - 1 ? size - 1 : 1);
	check(copy);
	memcpy(copy, data + 1, size - 1);
	if (data[0] & 1)
		ready(copy, size - 1);
	else
		handover(copy, size - 1);
	free(copy);
	return 0;
}

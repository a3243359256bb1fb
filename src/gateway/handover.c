/* SPDX-License-Identifier: Apache-2.0 */
/* The gateway's start-up records (handover.h): encoding and strict decoding. */
#include <errno.h>
#include <string.h>

#include "common/cleanup.h"
#include "gateway/handover.h"

enum {
	TAG_MODE = 1,	  /* u32 */
	TAG_LABEL,	  /* string */
	TAG_POLICY_FILE,  /* string */
	TAG_POLICY_TEXT,  /* bytes */
	TAG_ALLOW,	  /* string, repeated */
	TAG_GRANT,	  /* string, repeated */
	TAG_UPSTREAM,	  /* string, repeated */
	TAG_UPSTREAM_CA,  /* string, repeated */
	TAG_VAULT,	  /* string */
	TAG_MANY_CLIENTS, /* u8: 0 or 1 */
	TAG_UID,	  /* u32 */
	TAG_SANDBOX_UIDS, /* u32 first, u32 end */
	TAG_DETACH,	  /* u8: 0 or 1 */
	TAG_PARENT,	  /* u32 */
	TAG_ENV_BUNDLE,	  /* string */
	TAG_ENV_CA,	  /* string */
	TAG_ALLOW_CIDR,	  /* string, repeated */
	TAG_COUNT,
};

enum {
	RTAG_PEM = 1, /* bytes */
	RTAG_ENV,     /* string, repeated */
	RTAG_COUNT,
};

/* ---- encoding ---- */

static int put(struct buf *out, uint8_t tag, const void *p, size_t len)
{
	if (len > UINT32_MAX)
		return -E2BIG;
	uint32_t l = (uint32_t)len;
	uint8_t head[GW_HANDOVER_REC];
	head[0] = tag;
	memcpy(head + 1, &l, sizeof(l));
	size_t mark = out->len;
	int r = buf_append(out, head, sizeof(head));
	if (r == 0 && len)
		r = buf_append(out, p, len);
	if (r < 0)
		buf_truncate(out, mark);
	return r;
}

static bool str_ok(const char *s)
{
	return s && *s && strlen(s) < GW_HANDOVER_STR_MAX;
}

static int put_str(struct buf *out, uint8_t tag, const char *s)
{
	if (!s || !*s)
		return -EINVAL;
	if (!str_ok(s))
		return -E2BIG;
	return put(out, tag, s, strlen(s) + 1);
}

static int put_u32(struct buf *out, uint8_t tag, uint32_t v)
{
	return put(out, tag, &v, sizeof(v));
}

static int put_u8(struct buf *out, uint8_t tag, bool v)
{
	uint8_t b = v ? 1 : 0;
	return put(out, tag, &b, 1);
}

static int put_list(struct buf *out, uint8_t tag, char *const *v, size_t n)
{
	if (n > GW_HANDOVER_LIST_MAX)
		return -E2BIG;
	for (size_t i = 0; i < n; i++) {
		int r = put_str(out, tag, v[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

int gw_handover_encode(const struct gw_handover *h, struct buf *out)
{
	const struct gw_options *o = &h->opts;
	if ((o->mode != GW_MODE_RESTRICTED && o->mode != GW_MODE_OPEN) ||
	    (o->policy_file && o->policy_text) || h->uid == 0 || h->uid == UINT32_MAX ||
	    h->sandbox_uid_first > h->sandbox_uid_end || (!h->detach && h->parent == 0))
		return -EINVAL;
	if (o->policy_text && o->policy_len > GW_HANDOVER_POLICY_MAX)
		return -E2BIG;
	size_t mark = out->len;
	uint32_t uids[2] = { h->sandbox_uid_first, h->sandbox_uid_end };
	int r = put_u32(out, TAG_MODE, (uint32_t)o->mode);
	if (r == 0)
		r = put_str(out, TAG_LABEL, o->label);
	if (r == 0 && o->policy_file)
		r = put_str(out, TAG_POLICY_FILE, o->policy_file);
	if (r == 0 && o->policy_text)
		r = put(out, TAG_POLICY_TEXT, o->policy_text, o->policy_len);
	if (r == 0)
		r = put_list(out, TAG_ALLOW, o->allow, o->n_allow);
	if (r == 0)
		r = put_list(out, TAG_GRANT, o->grants, o->n_grants);
	if (r == 0)
		r = put_list(out, TAG_UPSTREAM, o->upstreams, o->n_upstreams);
	if (r == 0)
		r = put_list(out, TAG_UPSTREAM_CA, o->upstream_cas, o->n_upstream_cas);
	if (r == 0)
		r = put_list(out, TAG_ALLOW_CIDR, o->allow_cidrs, o->n_allow_cidrs);
	if (r == 0 && o->vault_file)
		r = put_str(out, TAG_VAULT, o->vault_file);
	if (r == 0)
		r = put_u8(out, TAG_MANY_CLIENTS, o->many_clients);
	if (r == 0)
		r = put_u32(out, TAG_UID, h->uid);
	if (r == 0)
		r = put(out, TAG_SANDBOX_UIDS, uids, sizeof(uids));
	if (r == 0)
		r = put_u8(out, TAG_DETACH, h->detach);
	if (r == 0 && !h->detach)
		r = put_u32(out, TAG_PARENT, h->parent);
	if (r == 0)
		r = put_str(out, TAG_ENV_BUNDLE, h->env_bundle);
	if (r == 0)
		r = put_str(out, TAG_ENV_CA, h->env_ca);
	if (r < 0)
		buf_truncate(out, mark);
	return r;
}

int gw_ready_encode(const char *pem, size_t pem_len, char *const *env, size_t n_env,
		    struct buf *out)
{
	if (pem_len == 0 || memchr(pem, '\0', pem_len))
		return -EINVAL;
	if (pem_len > GW_READY_PEM_MAX || n_env > GW_READY_ENV_MAX)
		return -E2BIG;
	size_t mark = out->len;
	int r = put(out, RTAG_PEM, pem, pem_len);
	for (size_t i = 0; i < n_env && r == 0; i++) {
		const char *eq = env[i] ? strchr(env[i], '=') : NULL;
		r = !eq || eq == env[i] ? -EINVAL : put_str(out, RTAG_ENV, env[i]);
	}
	if (r < 0)
		buf_truncate(out, mark);
	return r;
}

/* ---- decoding ---- */

struct rec {
	uint8_t tag;
	uint8_t *p;
	uint32_t len;
};

/* The next record at *pos; 0 at the end, 1 with *ret filled, -EBADMSG. */
static int next(uint8_t *data, size_t len, size_t *pos, struct rec *ret)
{
	if (*pos == len)
		return 0;
	if (len - *pos < GW_HANDOVER_REC)
		return -EBADMSG;
	ret->tag = data[*pos];
	memcpy(&ret->len, data + *pos + 1, sizeof(ret->len));
	*pos += GW_HANDOVER_REC;
	if (ret->len > len - *pos)
		return -EBADMSG;
	ret->p = data + *pos;
	*pos += ret->len;
	return 1;
}

static int get_str(const struct rec *r, const char **ret)
{
	if (r->len < 2 || r->len > GW_HANDOVER_STR_MAX || r->p[r->len - 1] != '\0' ||
	    memchr(r->p, '\0', r->len - 1))
		return -EBADMSG;
	*ret = (const char *)r->p;
	return 0;
}

static int get_u32(const struct rec *r, uint32_t *ret)
{
	if (r->len != sizeof(*ret))
		return -EBADMSG;
	memcpy(ret, r->p, sizeof(*ret));
	return 0;
}

static int get_bool(const struct rec *r, bool *ret)
{
	if (r->len != 1 || r->p[0] > 1)
		return -EBADMSG;
	*ret = r->p[0] == 1;
	return 0;
}

static int add(char **list, size_t *n, const struct rec *r)
{
	const char *s;
	if (*n >= GW_HANDOVER_LIST_MAX || get_str(r, &s) < 0)
		return -EBADMSG;
	list[(*n)++] = (char *)s;
	return 0;
}

int gw_handover_decode(uint8_t *data, size_t len, struct gw_handover *ret)
{
	struct gw_handover tmp;
	memset(&tmp, 0, sizeof(tmp));
	struct gw_handover *h = &tmp;
	struct gw_options *o = &h->opts;
	bool seen[TAG_COUNT] = { false };
	size_t pos = 0;
	struct rec r;
	int k, rc = 0;
	while (rc == 0 && (k = next(data, len, &pos, &r)) != 0) {
		if (k < 0 || r.tag == 0 || r.tag >= TAG_COUNT) {
			rc = -EBADMSG;
			break;
		}
		bool repeated = r.tag == TAG_ALLOW || r.tag == TAG_GRANT || r.tag == TAG_UPSTREAM ||
				r.tag == TAG_UPSTREAM_CA || r.tag == TAG_ALLOW_CIDR;
		if (seen[r.tag] && !repeated) {
			rc = -EBADMSG;
			break;
		}
		seen[r.tag] = true;
		uint32_t v;
		switch (r.tag) {
		case TAG_MODE:
			rc = get_u32(&r, &v);
			if (rc == 0 && v != GW_MODE_RESTRICTED && v != GW_MODE_OPEN)
				rc = -EBADMSG;
			o->mode = (enum gw_mode)v;
			break;
		case TAG_LABEL:
			rc = get_str(&r, &o->label);
			break;
		case TAG_POLICY_FILE:
			rc = get_str(&r, &o->policy_file);
			break;
		case TAG_POLICY_TEXT:
			if (r.len > GW_HANDOVER_POLICY_MAX)
				rc = -EBADMSG;
			/* An empty policy is an empty document: still a policy. */
			o->policy_text = r.len ? (const char *)r.p : "";
			o->policy_len = r.len;
			break;
		case TAG_ALLOW:
			rc = add(h->allow, &o->n_allow, &r);
			break;
		case TAG_GRANT:
			rc = add(h->grants, &o->n_grants, &r);
			break;
		case TAG_UPSTREAM:
			rc = add(h->upstreams, &o->n_upstreams, &r);
			break;
		case TAG_UPSTREAM_CA:
			rc = add(h->upstream_cas, &o->n_upstream_cas, &r);
			break;
		case TAG_ALLOW_CIDR:
			rc = add(h->allow_cidrs, &o->n_allow_cidrs, &r);
			break;
		case TAG_VAULT:
			rc = get_str(&r, &o->vault_file);
			break;
		case TAG_MANY_CLIENTS:
			rc = get_bool(&r, &o->many_clients);
			break;
		case TAG_UID:
			rc = get_u32(&r, &h->uid);
			if (rc == 0 && (h->uid == 0 || h->uid == UINT32_MAX))
				rc = -EBADMSG;
			break;
		case TAG_SANDBOX_UIDS:
			if (r.len != 2 * sizeof(uint32_t)) {
				rc = -EBADMSG;
				break;
			}
			memcpy(&h->sandbox_uid_first, r.p, sizeof(uint32_t));
			memcpy(&h->sandbox_uid_end, r.p + sizeof(uint32_t), sizeof(uint32_t));
			if (h->sandbox_uid_first > h->sandbox_uid_end)
				rc = -EBADMSG;
			break;
		case TAG_DETACH:
			rc = get_bool(&r, &h->detach);
			break;
		case TAG_PARENT:
			rc = get_u32(&r, &h->parent);
			if (rc == 0 && h->parent == 0)
				rc = -EBADMSG;
			break;
		case TAG_ENV_BUNDLE:
			rc = get_str(&r, &h->env_bundle);
			break;
		case TAG_ENV_CA:
			rc = get_str(&r, &h->env_ca);
			break;
		}
	}
	if (rc == 0) {
		static const int required[] = { TAG_MODE,	TAG_LABEL,	  TAG_MANY_CLIENTS,
						TAG_UID,	TAG_SANDBOX_UIDS, TAG_DETACH,
						TAG_ENV_BUNDLE, TAG_ENV_CA };
		for (size_t i = 0; i < ARRAY_SIZE(required); i++)
			if (!seen[required[i]])
				rc = -EBADMSG;
		if (seen[TAG_POLICY_FILE] && seen[TAG_POLICY_TEXT])
			rc = -EBADMSG;
		/* Dies with its caller, or outlives it: one of the two. */
		if (rc == 0 && h->detach == seen[TAG_PARENT])
			rc = -EBADMSG;
	}
	if (rc < 0)
		return -EBADMSG;
	memcpy(ret, h, sizeof(*ret));
	ret->opts.allow = ret->allow;
	ret->opts.grants = ret->grants;
	ret->opts.upstreams = ret->upstreams;
	ret->opts.upstream_cas = ret->upstream_cas;
	ret->opts.allow_cidrs = ret->allow_cidrs;
	return 0;
}

int gw_ready_decode(const uint8_t *data, size_t len, struct gw_ready *ret)
{
	struct gw_ready rd = { 0 };
	bool pem = false;
	size_t pos = 0;
	struct rec r;
	int k;
	/* next() does not write through p: the cast only shares the walker. */
	while ((k = next((uint8_t *)data, len, &pos, &r)) != 0) {
		if (k < 0)
			return -EBADMSG;
		if (r.tag == RTAG_PEM) {
			if (pem || r.len == 0 || r.len > GW_READY_PEM_MAX ||
			    memchr(r.p, '\0', r.len))
				return -EBADMSG;
			pem = true;
			rd.pem = (const char *)r.p;
			rd.pem_len = r.len;
		} else if (r.tag == RTAG_ENV) {
			const char *s;
			if (rd.n_env >= GW_READY_ENV_MAX || get_str(&r, &s) < 0)
				return -EBADMSG;
			const char *eq = strchr(s, '=');
			if (!eq || eq == s)
				return -EBADMSG;
			rd.env[rd.n_env++] = s;
		} else {
			return -EBADMSG;
		}
	}
	if (!pem)
		return -EBADMSG;
	memcpy(ret, &rd, sizeof(rd));
	return 0;
}

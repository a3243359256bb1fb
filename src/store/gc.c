/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention and mark-and-sweep GC (see gc.h).
 *
 * Everything is planned before anything is deleted: the retention plan,
 * the marks of every manifest that stays, and the chunk index read afresh
 * under the exclusive lock. A failure while planning deletes nothing. The
 * deletions then go in an order that leaves the store consistent at every
 * step: log entries before their manifests, indexes before their packs.
 */
#include "store/gc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "store/cas.h"

/* Log entries are "<%020 created ns>-<id>" (checkpoint.c). */
#define LOG_TIME_DIGITS 20
#define LOG_NAME_LEN (LOG_TIME_DIGITS + 1 + ST_ID_HEX)
#define INDEX_SIZE_MAX (64u << 20)
#define ORPHAN_SIZE_MAX (2 * (size_t)ST_PACK_TARGET)
#define INDEX_PACK_SIZE_OFF 16 /* after the 16-byte magic: u64 pack size (cas.c) */
#define NS_PER_SEC 1000000000ll

/* A partly used pack to rewrite: its referenced chunks go to new packs. */
struct repack {
	char hex[ST_ID_HEX + 1];
	struct st_id *live;
	size_t n_live;
	uint64_t live_bytes; /* what its referenced chunks take */
};

struct log_entry {
	char *key;
	char session[ST_SESSION_MAX + 1];
	int64_t created_ns;
	char id[ST_ID_HEX + 1];
	bool del;
};

/* A set of ids: open addressing, kept at most half full. */
struct idset {
	struct st_id *ids;
	bool *used;
	size_t cap, n;
};

struct gc {
	struct st_repo *r;
	struct st_objstore *os;
	const char *tenant;
	struct al_error *err;
	size_t prefix_len; /* of the list being walked */

	struct log_entry *logs;
	size_t n_logs, cap_logs;
	char (*sessions)[ST_SESSION_MAX + 1];
	size_t n_sessions, cap_sessions;

	char (*keep)[ST_ID_HEX + 1]; /* ids still named by a log entry or a latest */
	size_t n_keep, cap_keep;
	char (*drop)[ST_ID_HEX + 1]; /* manifests to delete */
	size_t n_drop, cap_drop;
	char (*manifests)[ST_ID_HEX + 1]; /* every manifest in the store */
	size_t n_manifests, cap_manifests;
	char (*heads)[ST_ID_HEX + 1]; /* every manifest's head (store/internal.h) */
	size_t n_heads, cap_heads;

	struct idset marks;

	char (*dead)[ST_ID_HEX + 1]; /* unreferenced packs */
	size_t n_dead, cap_dead;
	const struct st_gc_opts *o;
	struct st_cas *fresh;  /* the chunk index read under the lock */
	struct repack *repack; /* partly used packs to rewrite */
	size_t n_repack, cap_repack;
	char (*indexed)[ST_ID_HEX + 1]; /* every pack with an index */
	size_t n_indexed, cap_indexed;
	char (*orphans)[ST_ID_HEX + 1]; /* packs without one */
	size_t n_orphans, cap_orphans;

	struct st_gc_result res;
};

/* Grows *arr (of elements of size) to hold one more; -ENOMEM otherwise. */
static int grow(void *arr, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 64;
	if (nc > SIZE_MAX / size)
		return -ENOMEM;
	void *p = realloc(*(void **)arr, nc * size);
	if (!p)
		return -ENOMEM;
	*(void **)arr = p;
	*cap = nc;
	return 0;
}

static int push_hex(char (**arr)[ST_ID_HEX + 1], size_t *n, size_t *cap, const char *hex)
{
	if (grow(arr, cap, *n, sizeof(**arr)) < 0)
		return -ENOMEM;
	memcpy((*arr)[*n], hex, ST_ID_HEX);
	(*arr)[*n][ST_ID_HEX] = '\0';
	(*n)++;
	return 0;
}

static int hex_cmp(const void *a, const void *b)
{
	return memcmp(a, b, ST_ID_HEX);
}

static void hex_sort(char (*arr)[ST_ID_HEX + 1], size_t n)
{
	if (n)
		qsort(arr, n, sizeof(*arr), hex_cmp);
}

static bool hex_has(char (*arr)[ST_ID_HEX + 1], size_t n, const char *hex)
{
	return n && bsearch(hex, arr, n, sizeof(*arr), hex_cmp);
}

static bool is_hex_id(const char *s)
{
	if (strlen(s) != ST_ID_HEX)
		return false;
	for (size_t i = 0; i < ST_ID_HEX; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* ---- the mark set ---- */

static size_t idset_slot(const struct st_id *id, size_t cap)
{
	uint64_t h;
	memcpy(&h, id->b, sizeof(h)); /* SHA-256 bytes: already uniform */
	return (size_t)h & (cap - 1);
}

static bool idset_has(const struct idset *s, const struct st_id *id)
{
	if (!s->cap)
		return false;
	for (size_t i = idset_slot(id, s->cap);; i = (i + 1) & (s->cap - 1)) {
		if (!s->used[i])
			return false;
		if (memcmp(s->ids[i].b, id->b, ST_ID_LEN) == 0)
			return true;
	}
}

static void idset_put_slot(struct idset *s, const struct st_id *id)
{
	size_t i = idset_slot(id, s->cap);
	while (s->used[i]) {
		if (memcmp(s->ids[i].b, id->b, ST_ID_LEN) == 0)
			return;
		i = (i + 1) & (s->cap - 1);
	}
	s->used[i] = true;
	s->ids[i] = *id;
	s->n++;
}

static int idset_add(struct idset *s, const struct st_id *id)
{
	if (2 * (s->n + 1) > s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 4096;
		if (nc > SIZE_MAX / sizeof(struct st_id))
			return -ENOMEM;
		struct idset g = { .ids = malloc(nc * sizeof(*g.ids)),
				   .used = calloc(nc, 1),
				   .cap = nc };
		if (!g.ids || !g.used) {
			free(g.ids);
			free(g.used);
			return -ENOMEM;
		}
		for (size_t i = 0; i < s->cap; i++)
			if (s->used[i])
				idset_put_slot(&g, &s->ids[i]);
		free(s->ids);
		free(s->used);
		*s = g;
	}
	idset_put_slot(s, id);
	return 0;
}

static void gc_free(struct gc *g)
{
	for (size_t i = 0; i < g->n_logs; i++)
		free(g->logs[i].key);
	free(g->logs);
	free(g->sessions);
	free(g->keep);
	free(g->drop);
	free(g->manifests);
	free(g->heads);
	free(g->marks.ids);
	free(g->marks.used);
	free(g->dead);
	free(g->indexed);
	free(g->orphans);
	for (size_t i = 0; i < g->n_repack; i++)
		free(g->repack[i].live);
	free(g->repack);
	st_cas_close(g->fresh);
}

/* ---- retention ---- */

static int add_session(struct gc *g, const char *name, size_t len)
{
	for (size_t i = 0; i < g->n_sessions; i++)
		if (strlen(g->sessions[i]) == len && memcmp(g->sessions[i], name, len) == 0)
			return 0;
	if (grow(&g->sessions, &g->cap_sessions, g->n_sessions, sizeof(*g->sessions)) < 0)
		return al_error_set(g->err, -ENOMEM, "gc: out of memory");
	memcpy(g->sessions[g->n_sessions], name, len);
	g->sessions[g->n_sessions][len] = '\0';
	g->n_sessions++;
	return 0;
}

/* "<session>/log/<created>-<id>", "<session>/latest", ... */
static int on_session_key(const char *key, void *ud)
{
	struct gc *g = ud;
	const char *rest = key + g->prefix_len;
	const char *slash = strchr(rest, '/');
	if (!slash || slash == rest || (size_t)(slash - rest) > ST_SESSION_MAX)
		return 0; /* nothing a snapshot writes: left alone */
	size_t slen = (size_t)(slash - rest);
	int rc = add_session(g, rest, slen);
	if (rc < 0)
		return rc;
	const char *name = slash + 1;
	if (strncmp(name, "log/", 4) != 0)
		return 0;
	name += 4;
	/* Only names a snapshot writes are believed; anything else stays. */
	if (strlen(name) != LOG_NAME_LEN || name[LOG_TIME_DIGITS] != '-' ||
	    !is_hex_id(name + LOG_TIME_DIGITS + 1))
		return 0;
	int64_t ns = 0;
	for (size_t i = 0; i < LOG_TIME_DIGITS; i++) {
		if (name[i] < '0' || name[i] > '9' || ns > (INT64_MAX - 9) / 10)
			return 0;
		ns = ns * 10 + (name[i] - '0');
	}
	if (grow(&g->logs, &g->cap_logs, g->n_logs, sizeof(*g->logs)) < 0)
		return al_error_set(g->err, -ENOMEM, "gc: out of memory");
	struct log_entry *e = &g->logs[g->n_logs];
	memset(e, 0, sizeof(*e));
	e->key = strdup(key);
	if (!e->key)
		return al_error_set(g->err, -ENOMEM, "gc: out of memory");
	memcpy(e->session, rest, slen);
	e->created_ns = ns;
	memcpy(e->id, name + LOG_TIME_DIGITS + 1, ST_ID_HEX + 1);
	g->n_logs++;
	return 0;
}

static int log_cmp(const void *a, const void *b)
{
	const struct log_entry *x = a, *y = b;
	int c = strcmp(x->session, y->session);
	return c ? c : strcmp(x->key, y->key); /* same session: by name, i.e. time */
}

static int plan_retention(struct gc *g, const struct st_gc_opts *o)
{
	char prefix[ST_KEY_MAX + 1];
	int n = snprintf(prefix, sizeof(prefix), "tenants/%s/sessions/", g->tenant);
	g->prefix_len = (size_t)n;
	int rc = st_obj_list(g->os, prefix, on_session_key, g, g->err);
	if (rc < 0)
		return rc;
	if (g->n_logs)
		qsort(g->logs, g->n_logs, sizeof(*g->logs), log_cmp);
	g->res.sessions = g->n_sessions;

	int64_t now = o->now ? o->now : (int64_t)time(NULL);
	int64_t cutoff_ns = INT64_MIN;
	if (o->keep_days) {
		int64_t age = (int64_t)o->keep_days * 86400;
		if (now - age > INT64_MIN / NS_PER_SEC && now - age < INT64_MAX / NS_PER_SEC)
			cutoff_ns = (now - age) * NS_PER_SEC;
	}
	for (size_t s = 0; s < g->n_sessions; s++) {
		char latest[ST_ID_HEX + 1];
		rc = st_session_latest(g->r, g->sessions[s], latest, g->err);
		if (rc == -EINVAL) {
			al_error_clear(g->err);
			continue; /* not a session name: nothing of it is touched */
		}
		if (rc < 0)
			return rc;
		if (latest[0] && push_hex(&g->keep, &g->n_keep, &g->cap_keep, latest) < 0)
			return al_error_set(g->err, -ENOMEM, "gc: out of memory");
		size_t first = SIZE_MAX, count = 0;
		for (size_t i = 0; i < g->n_logs; i++)
			if (strcmp(g->logs[i].session, g->sessions[s]) == 0) {
				if (first == SIZE_MAX)
					first = i;
				count++;
			}
		for (size_t k = 0; k < count; k++) {
			struct log_entry *e = &g->logs[first + k];
			bool beyond = o->keep_last && count - k > o->keep_last;
			bool old = e->created_ns < cutoff_ns;
			e->del = (beyond || old) && strcmp(e->id, latest) != 0;
		}
	}
	for (size_t i = 0; i < g->n_logs; i++) {
		if (g->logs[i].del) {
			g->res.checkpoints_deleted++;
		} else {
			g->res.checkpoints_kept++;
			if (push_hex(&g->keep, &g->n_keep, &g->cap_keep, g->logs[i].id) < 0)
				return al_error_set(g->err, -ENOMEM, "gc: out of memory");
		}
	}
	hex_sort(g->keep, g->n_keep);
	for (size_t i = 0; i < g->n_logs; i++) {
		const char *id = g->logs[i].id;
		if (g->logs[i].del && !hex_has(g->keep, g->n_keep, id) &&
		    push_hex(&g->drop, &g->n_drop, &g->cap_drop, id) < 0)
			return al_error_set(g->err, -ENOMEM, "gc: out of memory");
	}
	hex_sort(g->drop, g->n_drop);
	size_t u = 0; /* unique: two sessions may both drop one id */
	for (size_t i = 0; i < g->n_drop; i++)
		if (u == 0 || memcmp(g->drop[u - 1], g->drop[i], ST_ID_HEX) != 0)
			memcpy(g->drop[u++], g->drop[i], ST_ID_HEX + 1);
	g->n_drop = u;
	return 0;
}

/* ---- mark ---- */

static int on_manifest_key(const char *key, void *ud)
{
	struct gc *g = ud;
	const char *name = key + g->prefix_len;
	/* Whatever it holds, it cannot be marked: never sweep without it. */
	if (!is_hex_id(name))
		return al_error_set(g->err, -EBADMSG,
				    "gc: %s is not named by a checkpoint id; nothing deleted", key);
	if (push_hex(&g->manifests, &g->n_manifests, &g->cap_manifests, name) < 0)
		return al_error_set(g->err, -ENOMEM, "gc: out of memory");
	return 0;
}

static int on_head_key(const char *key, void *ud)
{
	struct gc *g = ud;
	const char *name = key + g->prefix_len;
	/* A name that is no id names no manifest: left as it is. */
	if (is_hex_id(name) && push_hex(&g->heads, &g->n_heads, &g->cap_heads, name) < 0)
		return al_error_set(g->err, -ENOMEM, "gc: out of memory");
	return 0;
}

/* The ids a manifest needs kept with it: the base of a delta, and the lower
 * layer of a layered snapshot (a live workspace may still be over it). */
struct rescue {
	char (*ids)[ST_ID_HEX + 1];
	size_t n, cap;
};

static int rescue_add(struct gc *g, struct rescue *rs, const char *id)
{
	if (!id[0] || !hex_has(g->drop, g->n_drop, id))
		return 0;
	for (size_t i = 0; i < rs->n; i++)
		if (memcmp(rs->ids[i], id, ST_ID_HEX) == 0)
			return 0;
	return push_hex(&rs->ids, &rs->n, &rs->cap, id);
}

/* Loads manifest id and marks its chunks (a delta's whole tree); adds
 * what it needs kept to rs (its lower only when with_lower). */
static int mark_one(struct gc *g, const char *id, struct rescue *rs, bool with_lower)
{
	struct st_manifest *m = NULL;
	int rc = st_manifest_load(g->r, id, NULL, &m, g->err);
	if (rc < 0) {
		char why[AL_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", al_error_message(g->err));
		al_error_clear(g->err);
		/* The parser's reasons (not authentic, a bad line) do not say
		 * which of the many manifests it was. */
		if (strstr(why, id))
			return al_error_set(g->err, rc, "gc: nothing deleted: %s", why);
		return al_error_set(g->err, rc, "gc: nothing deleted: checkpoint %s: %s", id, why);
	}
	for (size_t j = 0; rc == 0 && j < m->n_entries; j++)
		for (size_t k = 0; rc == 0 && k < m->entries[j].n_chunks; k++)
			rc = idset_add(&g->marks, &m->entries[j].chunks[k]);
	if (rc == 0)
		rc = rescue_add(g, rs, m->base);
	if (rc == 0 && with_lower)
		rc = rescue_add(g, rs, m->lower);
	st_manifest_free(m);
	if (rc < 0)
		return al_error_set(g->err, rc, "gc: out of memory");
	g->res.manifests_kept++;
	return 0;
}

static int mark(struct gc *g)
{
	char prefix[ST_KEY_MAX + 1];
	int n = snprintf(prefix, sizeof(prefix), "tenants/%s/manifests/", g->tenant);
	g->prefix_len = (size_t)n;
	int rc = st_obj_list(g->os, prefix, on_manifest_key, g, g->err);
	if (rc < 0)
		return rc;
	hex_sort(g->manifests, g->n_manifests);
	n = snprintf(prefix, sizeof(prefix), "tenants/%s/heads/", g->tenant);
	g->prefix_len = (size_t)n;
	rc = st_obj_list(g->os, prefix, on_head_key, g, g->err);
	if (rc < 0)
		return rc;
	/* A manifest no log entry and no latest names is dropped too: the
	 * base of deltas that have gone since, or one a crash left before its
	 * log entry (snapshots hold the lock shared until their last
	 * reference is written, so none is in flight now). */
	for (size_t i = 0; i < g->n_manifests; i++)
		if (!hex_has(g->keep, g->n_keep, g->manifests[i]) &&
		    !hex_has(g->drop, g->n_drop, g->manifests[i]) &&
		    push_hex(&g->drop, &g->n_drop, &g->cap_drop, g->manifests[i]) < 0)
			return al_error_set(g->err, -ENOMEM, "gc: out of memory");
	hex_sort(g->drop, g->n_drop);

	/* Every manifest that stays, then what they need that retention
	 * dropped: bases and lower layers, then the bases of those (one
	 * step: a lower layer's own lower is not kept). */
	struct rescue rs = { 0 };
	for (size_t i = 0; rc == 0 && i < g->n_manifests; i++)
		if (!hex_has(g->drop, g->n_drop, g->manifests[i]))
			rc = mark_one(g, g->manifests[i], &rs, true);
	for (size_t k = 0; rc == 0 && k < rs.n; k++) {
		char id[ST_ID_HEX + 1];
		memcpy(id, rs.ids[k], sizeof(id));
		size_t u = 0;
		for (size_t i = 0; i < g->n_drop; i++)
			if (memcmp(g->drop[i], id, ST_ID_HEX) != 0)
				memcpy(g->drop[u++], g->drop[i], ST_ID_HEX + 1);
		g->n_drop = u;
		if (hex_has(g->manifests, g->n_manifests, id))
			rc = mark_one(g, id, &rs, false);
	}
	free(rs.ids);
	if (rc < 0)
		return rc;
	/* Only manifests that exist count as deleted. */
	for (size_t i = 0; i < g->n_drop; i++)
		if (hex_has(g->manifests, g->n_manifests, g->drop[i]))
			g->res.manifests_deleted++;
	g->res.chunks_marked = g->marks.n;
	return 0;
}

/* ---- sweep ---- */

/* Whether chunk i of a pack is referenced and read from this pack (a copy
 * another pack also holds is garbage here). */
static bool live_here(struct gc *g, const char *pack_hex, const struct st_id *id)
{
	const char *owner = st_cas_owner(g->fresh, id);
	return idset_has(&g->marks, id) && owner && strcmp(owner, pack_hex) == 0;
}

static int on_pack(const char *pack_hex, const struct st_id *chunks, size_t n, void *ud)
{
	struct gc *g = ud;
	size_t marked = 0;
	for (size_t i = 0; i < n; i++)
		marked += live_here(g, pack_hex, &chunks[i]);
	if (push_hex(&g->indexed, &g->n_indexed, &g->cap_indexed, pack_hex) < 0)
		return -ENOMEM;
	if (marked == 0)
		return push_hex(&g->dead, &g->n_dead, &g->cap_dead, pack_hex);
	if (marked < n && g->o->repack) {
		uint64_t dead = 0, total = 0;
		for (size_t i = 0; i < n; i++) {
			uint64_t b = st_cas_stored_len(g->fresh, &chunks[i]);
			total += b;
			dead += live_here(g, pack_hex, &chunks[i]) ? 0 : b;
		}
		if (dead * 100 > (uint64_t)g->o->max_unused_pct * total) {
			if (grow(&g->repack, &g->cap_repack, g->n_repack, sizeof(*g->repack)) < 0)
				return -ENOMEM;
			struct repack *rp = &g->repack[g->n_repack];
			*rp = (struct repack){ .live_bytes = total - dead };
			memcpy(rp->hex, pack_hex, ST_ID_HEX + 1);
			rp->live = malloc(marked * sizeof(*rp->live));
			if (!rp->live)
				return -ENOMEM;
			for (size_t i = 0; i < n; i++)
				if (live_here(g, pack_hex, &chunks[i]))
					rp->live[rp->n_live++] = chunks[i];
			g->n_repack++;
			return 0;
		}
	}
	g->res.packs_kept++;
	if (marked < n)
		g->res.packs_partial++;
	return 0;
}

static int on_pack_key(const char *key, void *ud)
{
	struct gc *g = ud;
	const char *name = key + g->prefix_len;
	if (!is_hex_id(name) || hex_has(g->indexed, g->n_indexed, name))
		return 0;
	if (push_hex(&g->orphans, &g->n_orphans, &g->cap_orphans, name) < 0)
		return al_error_set(g->err, -ENOMEM, "gc: out of memory");
	return 0;
}

static int plan_sweep(struct gc *g)
{
	/* Read afresh under the lock: the repository's own index may predate
	 * packs written since it was opened. */
	int rc = st_cas_open(g->os, g->tenant, 1, &g->fresh, g->err);
	if (rc < 0)
		return rc;
	rc = st_cas_each_pack(g->fresh, on_pack, g, g->err);
	if (rc < 0)
		return al_error_set(g->err, rc, "gc: out of memory");
	hex_sort(g->indexed, g->n_indexed);
	char prefix[ST_KEY_MAX + 1];
	int n = snprintf(prefix, sizeof(prefix), "tenants/%s/packs/", g->tenant);
	g->prefix_len = (size_t)n;
	return st_obj_list(g->os, prefix, on_pack_key, g, g->err);
}

static uint64_t get_u64le(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* The bytes a pack and its index take: the index says the pack's size. */
static int dead_pack_bytes(struct gc *g, const char *hex, uint64_t *ret)
{
	char key[ST_KEY_MAX + 1];
	snprintf(key, sizeof(key), "tenants/%s/index/%s", g->tenant, hex);
	_cleanup_free_ void *data = NULL;
	size_t len = 0;
	int rc = st_obj_get(g->os, key, INDEX_SIZE_MAX, &data, &len, g->err);
	if (rc < 0)
		return rc;
	*ret = len + (len >= INDEX_PACK_SIZE_OFF + 8 ?
			      get_u64le((const uint8_t *)data + INDEX_PACK_SIZE_OFF) :
			      0);
	return 0;
}

/* A pack without an index has nothing that says its size but itself. */
static uint64_t orphan_bytes(struct gc *g, const char *key)
{
	_cleanup_free_ void *data = NULL;
	size_t len = 0;
	struct al_error e = { 0 };
	if (st_obj_get(g->os, key, ORPHAN_SIZE_MAX, &data, &len, &e) < 0)
		return 0; /* deleted anyway; its size is just not counted */
	return len;
}

static int del_key(struct gc *g, const char *kind, const char *name)
{
	char key[ST_KEY_MAX + 1];
	snprintf(key, sizeof(key), "tenants/%s/%s/%s", g->tenant, kind, name);
	return st_obj_del(g->os, key, g->err);
}

/*
 * Rewrites the partly used packs chosen: their referenced chunks (read and
 * verified) into new packs, sealed (pack, then index) before the old
 * index, then the old pack, is deleted. A crash in between leaves chunks
 * in two packs: reads use one of them (st_cas_owner), and the next run
 * finds the copies in the other unused and collects them.
 */
static int repack_packs(struct gc *g, bool dry_run)
{
	if (g->n_repack == 0)
		return 0;
	struct st_cas *w = NULL;
	int rc = dry_run ? 0 : st_cas_open_empty(g->os, g->tenant, 1, &w, g->err);
	for (size_t i = 0; rc == 0 && i < g->n_repack; i++)
		for (size_t k = 0; rc == 0 && !dry_run && k < g->repack[i].n_live; k++) {
			void *data = NULL;
			size_t len = 0;
			rc = st_cas_get(g->fresh, &g->repack[i].live[k], &data, &len, g->err);
			if (rc == 0)
				rc = st_cas_put_id(w, &g->repack[i].live[k], data, len, NULL,
						   g->err);
			free(data);
		}
	if (rc == 0 && w)
		rc = st_cas_flush(w, g->err);
	uint64_t written = 0;
	if (w) {
		struct st_cas_stats st;
		st_cas_stats(w, &st);
		written = st.bytes_stored;
		st_cas_close(w);
	}
	if (rc < 0)
		return rc;
	uint64_t old_bytes = 0;
	for (size_t i = 0; i < g->n_repack; i++) {
		uint64_t bytes = 0;
		rc = dead_pack_bytes(g, g->repack[i].hex, &bytes);
		if (rc == 0 && !dry_run)
			rc = del_key(g, "index", g->repack[i].hex);
		if (rc == 0 && !dry_run)
			rc = del_key(g, "packs", g->repack[i].hex);
		if (rc < 0)
			return rc;
		old_bytes += bytes;
		g->res.packs_repacked++;
		if (dry_run)
			written += g->repack[i].live_bytes; /* what the rewrite would store */
	}
	if (old_bytes > written)
		g->res.bytes_freed += old_bytes - written;
	return 0;
}

static int sweep(struct gc *g, bool dry_run)
{
	int rc;
	/* Log entries before the manifests they name. */
	for (size_t i = 0; !dry_run && i < g->n_logs; i++)
		if (g->logs[i].del && (rc = st_obj_del(g->os, g->logs[i].key, g->err)) < 0)
			return rc;
	for (size_t i = 0; !dry_run && i < g->n_drop; i++)
		if ((rc = del_key(g, "manifests", g->drop[i])) < 0)
			return rc;
	/* Heads after their manifests (a crash in between leaves a head whose
	 * manifest is gone, which nothing believes: st_head_check), and heads
	 * of no manifest that such a crash left. */
	for (size_t i = 0; !dry_run && i < g->n_heads; i++)
		if ((hex_has(g->drop, g->n_drop, g->heads[i]) ||
		     !hex_has(g->manifests, g->n_manifests, g->heads[i])) &&
		    (rc = del_key(g, "heads", g->heads[i])) < 0)
			return rc;
	/* Indexes before their packs. Dead packs and orphans go before any
	 * pack is rewritten: a rewrite may make a pack of the very bytes (so
	 * the name) of one of them, left by a GC killed while rewriting. */
	for (size_t i = 0; i < g->n_dead; i++) {
		uint64_t bytes = 0;
		rc = dead_pack_bytes(g, g->dead[i], &bytes);
		if (rc == 0 && !dry_run)
			rc = del_key(g, "index", g->dead[i]);
		if (rc == 0 && !dry_run)
			rc = del_key(g, "packs", g->dead[i]);
		if (rc < 0)
			return rc;
		g->res.packs_deleted++;
		g->res.bytes_freed += bytes;
	}
	for (size_t i = 0; i < g->n_orphans; i++) {
		char key[ST_KEY_MAX + 1];
		snprintf(key, sizeof(key), "tenants/%s/packs/%s", g->tenant, g->orphans[i]);
		g->res.bytes_freed += orphan_bytes(g, key);
		if (!dry_run && (rc = st_obj_del(g->os, key, g->err)) < 0)
			return rc;
		g->res.packs_orphan++;
	}
	rc = repack_packs(g, dry_run);
	if (rc < 0)
		return rc;
	if (!dry_run) {
		rc = st_objstore_sweep_temp(g->os, ST_GC_TEMP_AGE_SEC, g->err);
		if (rc < 0)
			return rc;
		g->res.temp_deleted = (uint64_t)rc;
	}
	return 0;
}

int st_gc(struct st_repo *r, const struct st_gc_opts *o, struct st_gc_result *ret,
	  struct al_error *err)
{
	struct gc g = {
		.r = r, .os = st_repo_objstore(r), .tenant = st_repo_tenant(r), .err = err, .o = o
	};
	_cleanup_close_ int lock = -1;
	int rc = st_objstore_lock(g.os, true, &lock, err);
	if (rc == 0)
		rc = plan_retention(&g, o);
	if (rc == 0)
		rc = mark(&g);
	if (rc == 0)
		rc = plan_sweep(&g);
	if (rc == 0)
		rc = sweep(&g, o->dry_run);
	if (rc == 0)
		*ret = g.res;
	gc_free(&g);
	return rc;
}

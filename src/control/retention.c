/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention: sessions left idle longer than the config's
 * retention.sessions are deleted (their sandboxes stopped, their
 * checkpoints collected), whatever their tenant; and what a crash left in
 * the state directory is removed (ctl_retention_gc, `airlock session gc`;
 * the daemon will run it on a timer).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/session.h"

struct idle {
	struct ctl_session *v;
	size_t n, cap;
};

static int collect(const struct ctl_session *s, void *ud)
{
	struct idle *l = ud;
	/* A session with a turn under way is not idle, however old. */
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct ctl_session *v = reallocarray(l->v, cap, sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *s;
	return 0;
}

static bool turn_under_way(struct ctl_ctx *c, const struct ctl_session *s)
{
	if (s->turns == 0)
		return false;
	struct ctl_turn t = { 0 };
	struct al_error e = { 0 };
	bool busy = ctl_db_turn_get(c->db, s->tenant, s->id, s->turns, &t, &e) == 0 &&
		    !ctl_turn_state_terminal(t.state);
	ctl_turn_clear(&t);
	return busy;
}

int ctl_retention_gc(struct ctl_ctx *c, int64_t now_ms, unsigned *ret_deleted, struct al_error *err)
{
	*ret_deleted = 0;
	if (c->conf->retention_ms == 0) {
		ctl_lowers_gc(c);
		return 0;
	}
	struct idle l = { 0 };
	int r = ctl_db_session_list_idle(c->db, now_ms - (int64_t)c->conf->retention_ms, collect,
					 &l, err);
	if (r == -ENOMEM)
		al_error_set(err, r, "out of memory");
	for (size_t i = 0; r >= 0 && i < l.n; i++) {
		if (turn_under_way(c, &l.v[i]))
			continue;
		r = ctl_session_delete(c, l.v[i].tenant, l.v[i].id, err);
		if (r == -ENOENT) { /* deleted meanwhile */
			al_error_clear(err);
			r = 0;
			continue;
		}
		if (r >= 0)
			(*ret_deleted)++;
	}
	free(l.v);
	ctl_lowers_gc(c);
	return r;
}

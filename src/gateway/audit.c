/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The audit log: one JSON line per decision, written with one write(2)
 * (O_APPEND keeps lines whole), bounded per sandbox (engine.h says how).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "gateway/engine.h"

/* ts: 32 bytes. */
static void now_text(char *ts, size_t size)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct tm tm;
	gmtime_r(&now.tv_sec, &tm);
	char day[16];
	strftime(day, sizeof(day), "%Y-%m-%d", &tm);
	snprintf(ts, size, "%sT%02d:%02d:%02d.%03dZ", day, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 (int)(now.tv_nsec / 1000000));
}

static json_t *str_or_null(const char *s)
{
	return s && s[0] ? json_string(s) : json_null();
}

/* Writes o as one line, within the sandbox's cap. */
static void put_line(struct gw_sbx *s, json_t *o, bool marker)
{
	struct gw_audit *a = &s->audit;
	char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	json_decref(o);
	if (!line)
		return;
	size_t len = strlen(line);
	line[len] = '\n';
	if (!marker && a->written + len + 1 > a->max) {
		free(line);
		a->dropped++;
		if (!a->capped) {
			a->capped = true;
			char ts[32], why[160];
			now_text(ts, sizeof(ts));
			snprintf(
				why, sizeof(why),
				"the audit log reached its limit of %" PRIu64 " bytes (limits: "
				"audit_max): nothing more is written, and new requests are refused",
				a->max);
			json_t *m = json_object();
			if (!m)
				return;
			json_object_set_new(m, "time", json_string(ts));
			json_object_set_new(m, "sandbox", json_string(s->id));
			json_object_set_new(m, "kind", json_string("audit"));
			json_object_set_new(m, "decision", json_string("deny"));
			json_object_set_new(m, "reason", json_string(why));
			put_line(s, m, true);
		}
		return;
	}
	ssize_t w = write(a->fd, line, len + 1);
	if (w > 0)
		a->written += (uint64_t)w;
	free(line);
}

static json_t *base_line(struct gw_sbx *s, const char *ts, const struct gw_audit_rec *r,
			 const char *path)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	json_object_set_new(o, "time", json_string(ts));
	json_object_set_new(o, "sandbox", json_string(s->id));
	json_object_set_new(o, "kind", json_string(r->kind));
	json_object_set_new(o, "generation", json_integer((json_int_t)r->generation));
	json_object_set_new(o, "rule", str_or_null(r->rule));
	json_object_set_new(o, "decision", json_string(r->decision));
	json_object_set_new(o, "method", str_or_null(r->method));
	json_object_set_new(o, "host", str_or_null(r->host));
	json_object_set_new(o, "port", r->port ? json_integer(r->port) : json_null());
	json_object_set_new(o, "path", path ? json_string(path) : json_null());
	json_object_set_new(o, "status", json_integer(r->status));
	return o;
}

static uint64_t key_hash(const struct gw_audit_rec *r)
{
	/* FNV-1a over the fields that make two denials the same. */
	uint64_t h = 1469598103934665603ull;
	const char *parts[] = { r->kind, r->decision, r->method, r->host, r->rule, r->reason };
	for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
		for (const char *p = parts[i] ? parts[i] : ""; *p; p++)
			h = (h ^ (unsigned char)*p) * 1099511628211ull;
		h = (h ^ 0xff) * 1099511628211ull;
	}
	h = (h ^ r->port) * 1099511628211ull;
	h = (h ^ (uint64_t)(unsigned)r->status) * 1099511628211ull;
	return h ? h : 1;
}

static bool slot_is(const struct gw_audit_slot *sl, const struct gw_audit_rec *r)
{
#define SAME(field) (strcmp(sl->field, r->field ? r->field : "") == 0)
	return SAME(kind) && SAME(decision) && SAME(method) && SAME(host) && SAME(rule) &&
	       SAME(reason) && sl->port == r->port && sl->status == r->status;
#undef SAME
}

static void summary(struct gw_sbx *s, struct gw_audit_slot *sl)
{
	char ts[32];
	now_text(ts, sizeof(ts));
	struct gw_audit_rec r = { .kind = sl->kind,
				  .decision = sl->decision,
				  .method = sl->method,
				  .host = sl->host,
				  .rule = sl->rule,
				  .port = sl->port,
				  .status = sl->status,
				  .generation = sl->generation };
	json_t *o = base_line(s, ts, &r, NULL);
	if (!o)
		return;
	json_object_set_new(o, "reason", json_string(sl->reason));
	json_object_set_new(o, "repeated", json_integer((json_int_t)sl->count));
	json_object_set_new(o, "since", json_string(sl->since));
	put_line(s, o, false);
	sl->count = 0;
}

static void flush_cb(evutil_socket_t fd, short what, void *ud)
{
	struct gw_sbx *s = ud;
	bool armed = false;
	for (size_t i = 0; i < AUDIT_SLOTS; i++) {
		struct gw_audit_slot *sl = &s->audit.slots[i];
		if (!sl->hash)
			continue;
		if (sl->count) {
			summary(s, sl);
			armed = true; /* stays counted for one more window */
		} else {
			sl->hash = 0; /* quiet for a window: its next one is written */
		}
	}
	if (armed) {
		struct timeval tv = { .tv_sec = AUDIT_WINDOW_S };
		evtimer_add(s->audit.flush, &tv);
	}
}

/* Whether r repeats a denial written recently: then it is only counted. */
static bool counted(struct gw_sbx *s, const struct gw_audit_rec *r)
{
	struct gw_audit *a = &s->audit;
	if (strcmp(r->decision, "allow") == 0)
		return false;
	if (!a->slots && !(a->slots = calloc(AUDIT_SLOTS, sizeof(*a->slots))))
		return false;
	uint64_t h = key_hash(r);
	struct gw_audit_slot *free_slot = NULL;
	for (size_t i = 0; i < AUDIT_SLOTS; i++) {
		struct gw_audit_slot *sl = &a->slots[i];
		if (sl->hash == h && slot_is(sl, r)) {
			if (sl->count++ == 0)
				now_text(sl->since, sizeof(sl->since));
			if (!evtimer_pending(a->flush, NULL)) {
				struct timeval tv = { .tv_sec = AUDIT_WINDOW_S };
				evtimer_add(a->flush, &tv);
			}
			return true;
		}
		if (!sl->hash && !free_slot)
			free_slot = sl;
	}
	if (free_slot) {
		/* Written in full now; the same again within the window is counted. */
		struct gw_audit_slot *sl = free_slot;
		memset(sl, 0, sizeof(*sl));
		sl->hash = h;
#define KEEP(field) snprintf(sl->field, sizeof(sl->field), "%s", r->field ? r->field : "")
		KEEP(kind);
		KEEP(decision);
		KEEP(method);
		KEEP(host);
		KEEP(rule);
		KEEP(reason);
#undef KEEP
		sl->port = r->port;
		sl->status = r->status;
		sl->generation = r->generation;
		if (!evtimer_pending(a->flush, NULL)) {
			struct timeval tv = { .tv_sec = AUDIT_WINDOW_S };
			evtimer_add(a->flush, &tv);
		}
	}
	return false;
}

void gw_audit_write(struct gw_sbx *s, const struct gw_audit_rec *r)
{
	struct gw_audit *a = &s->audit;
	if (a->fd < 0)
		return;
	if (a->capped) {
		a->dropped++;
		return;
	}
	if (counted(s, r))
		return;
	char ts[32];
	now_text(ts, sizeof(ts));
	char path[AUDIT_PATH_MAX + 1];
	bool truncated = false;
	if (r->path) {
		size_t n = strlen(r->path);
		truncated = n > AUDIT_PATH_MAX;
		snprintf(path, sizeof(path), "%.*s", (int)(truncated ? AUDIT_PATH_MAX : n),
			 r->path);
	}
	json_t *o = base_line(s, ts, r, r->path ? path : NULL);
	if (!o)
		return;
	if (truncated)
		json_object_set_new(o, "path_truncated", json_true());
	json_object_set_new(o, "bytes_up", json_integer((json_int_t)r->bytes_up));
	json_object_set_new(o, "bytes_down", json_integer((json_int_t)r->bytes_down));
	json_object_set_new(o, "duration_ms", json_real(r->duration_ms));
	json_object_set_new(o, "credential", str_or_null(r->credential));
	json_object_set_new(o, "reason", json_string(r->reason ? r->reason : ""));
	put_line(s, o, false);
}

void gw_audit(struct conn *c, const char *decision)
{
	if (c->audited)
		return;
	c->audited = true;
	/* clang-format off */
	struct gw_audit_rec r = {
		.kind = c->audit_kind ? c->audit_kind : "http", .decision = decision, .method = c->method, .host = c->host,
		.path = c->path, .rule = c->rule, .credential = c->cred_name, .reason = c->reason,
		.port = c->port, .status = c->status, .generation = c->generation,
		.bytes_up = c->bytes_up, .bytes_down = c->bytes_down,
		.duration_ms = gw_ms_since(&c->t0),
	};
	/* clang-format on */
	gw_audit_write(c->s, &r);
}

int gw_audit_init(struct gw_sbx *s, int fd)
{
	struct gw_audit *a = &s->audit;
	a->fd = -1;
	a->max = s->e->cfg->audit_max;
	a->flush = evtimer_new(s->e->base, flush_cb, s);
	if (!a->flush)
		return -ENOMEM;
	a->fd = fd;
	return 0;
}

void gw_audit_close(struct gw_sbx *s)
{
	struct gw_audit *a = &s->audit;
	if (a->slots && a->fd >= 0 && !a->capped)
		for (size_t i = 0; i < AUDIT_SLOTS; i++)
			if (a->slots[i].hash && a->slots[i].count)
				summary(s, &a->slots[i]);
	if (a->flush)
		event_free(a->flush);
	a->flush = NULL;
	free(a->slots);
	a->slots = NULL;
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
}

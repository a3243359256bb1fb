/* SPDX-License-Identifier: Apache-2.0 */
/* The audit log: one JSON line per decision, written with one write(2). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "gateway/engine.h"

void gw_audit(struct conn *c, const char *decision)
{
	if (c->audited || c->s->audit_fd < 0)
		return;
	c->audited = true;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct tm tm;
	gmtime_r(&now.tv_sec, &tm);
	char ts[64];
	snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 now.tv_nsec / 1000000);
	json_t *o = json_object();
	if (!o)
		return;
	json_object_set_new(o, "time", json_string(ts));
	json_object_set_new(o, "sandbox", json_string(c->s->id));
	json_object_set_new(o, "generation", json_integer((json_int_t)c->generation));
	json_object_set_new(o, "rule", c->rule[0] ? json_string(c->rule) : json_null());
	json_object_set_new(o, "decision", json_string(decision));
	json_object_set_new(o, "method", c->method[0] ? json_string(c->method) : json_null());
	json_object_set_new(o, "host", c->host[0] ? json_string(c->host) : json_null());
	json_object_set_new(o, "port", c->port ? json_integer(c->port) : json_null());
	json_object_set_new(o, "path", c->path ? json_string(c->path) : json_null());
	json_object_set_new(o, "status", json_integer(c->status));
	json_object_set_new(o, "bytes_up", json_integer((json_int_t)c->bytes_up));
	json_object_set_new(o, "bytes_down", json_integer((json_int_t)c->bytes_down));
	json_object_set_new(o, "duration_ms", json_real(gw_ms_since(&c->t0)));
	json_object_set_new(o, "credential", c->cred_name ? json_string(c->cred_name) : json_null());
	json_object_set_new(o, "reason", json_string(c->reason));
	char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	json_decref(o);
	if (!line)
		return;
	size_t len = strlen(line);
	line[len] = '\n';
	/* One write per line: O_APPEND keeps lines whole. */
	ssize_t w = write(c->s->audit_fd, line, len + 1);
	(void)w;
	free(line);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Configuration files: YAML read through libyaml into a small immutable
 * tree of maps, sequences and scalars, each node knowing its file, line,
 * column and key path, so that every complaint about a value can say where
 * it is: "policy.yaml:12: network.mode: expected one of none, restricted,
 * open". The messages never quote the offending value (it may be a
 * secret put in the wrong place).
 *
 * Only the plain subset of YAML is accepted. Refused, with the line:
 * anchors and aliases (no "billion laughs"), tags and tag directives,
 * duplicate keys, keys that are not scalars, NUL bytes in scalars, more
 * than one document, nesting deeper than CONFIG_MAX_DEPTH, more than
 * CONFIG_MAX_NODES nodes, input larger than CONFIG_MAX_FILE_SIZE.
 * An input with no document at all (empty, or only comments) gives an
 * empty map.
 *
 * Errors: -EINVAL for content, -E2BIG for a limit, -EFBIG for size,
 * -ENOMEM; loading fills err with "file:line: reason".
 *
 * Accessors taking a "path" use it to name the value in messages
 * ("network.mode"); pass NULL to use the node's own path, computed from
 * the document ("rules[2].host").
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define CONFIG_MAX_FILE_SIZE (4u * 1024 * 1024)
#define CONFIG_MAX_DEPTH 64
#define CONFIG_MAX_NODES 100000

struct config_doc;
struct config_node;

enum config_kind {
	CONFIG_SCALAR,
	CONFIG_MAP,
	CONFIG_SEQ,
};

int config_load_file(const char *path, struct config_doc **ret, struct al_error *err);
/* name is what messages call the input (usually a file name). */
int config_load_string(const char *name, const char *text, size_t len, struct config_doc **ret,
		       struct al_error *err);
void config_doc_free(struct config_doc *doc);

static inline void config_doc_freep(struct config_doc **doc)
{
	config_doc_free(*doc);
}
#define _cleanup_config_doc_ __attribute__((cleanup(config_doc_freep)))

const struct config_node *config_root(const struct config_doc *doc);
const char *config_doc_name(const struct config_doc *doc);

enum config_kind config_node_kind(const struct config_node *n);
unsigned config_node_line(const struct config_node *n);	  /* 1-based */
unsigned config_node_column(const struct config_node *n); /* 1-based */
/* The scalar's text, or NULL for a map or sequence. */
const char *config_node_scalar(const struct config_node *n);
/* True for a plain scalar that YAML means as null: "", "~", "null". */
bool config_node_is_null(const struct config_node *n);
/* Writes the node's key path ("" for the root) into buf; returns buf. */
const char *config_node_path(const struct config_node *n, char *buf, size_t size);

/* Entries of a map or items of a sequence, in document order; 0 for a
 * scalar. Out-of-range indexes and wrong kinds give NULL. */
size_t config_node_count(const struct config_node *n);
const struct config_node *config_seq_item(const struct config_node *seq, size_t i);
const char *config_map_key(const struct config_node *map, size_t i);
const struct config_node *config_map_key_node(const struct config_node *map, size_t i);
const struct config_node *config_map_value(const struct config_node *map, size_t i);
/* The value of key, or NULL when absent (or map is not a map). */
const struct config_node *config_map_get(const struct config_node *map, const char *key);

/* Fills err with "file:line: path: <message>" and returns -EINVAL, for
 * checks the caller makes itself. */
int config_error(const struct config_node *n, const char *path, struct al_error *err,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

int config_expect_kind(const struct config_node *n, const char *path, enum config_kind kind,
		       struct al_error *err);
/* -ENOENT naming the map's line when key is absent. */
int config_map_require(const struct config_node *map, const char *path, const char *key,
		       const struct config_node **ret, struct al_error *err);
/* Refuses a map with a key not in allowed (NULL-terminated), naming it. */
int config_map_check_keys(const struct config_node *map, const char *path,
			  const char *const *allowed, struct al_error *err);

/* Scalar conversions; a NULL node is -ENOENT. */
int config_get_str(const struct config_node *n, const char *path, const char **ret,
		   struct al_error *err);
int config_get_bool(const struct config_node *n, const char *path, bool *ret, struct al_error *err);
int config_get_u64(const struct config_node *n, const char *path, uint64_t *ret,
		   struct al_error *err);
int config_get_size(const struct config_node *n, const char *path, uint64_t *ret,
		    struct al_error *err);
int config_get_duration(const struct config_node *n, const char *path, uint64_t *ret_msec,
			struct al_error *err);
/* *ret is the index in choices (NULL-terminated) of the scalar's text. */
int config_get_enum(const struct config_node *n, const char *path, const char *const *choices,
		    int *ret, struct al_error *err);

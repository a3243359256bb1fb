/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "buf.h"
#include "cleanup.h"
#include "fdutil.h"
#include "parse.h"

/* Keys longer than this are cut short in messages. */
#define PATH_KEY_MAX 64
#define PATH_MAX_LEN 512
#define MSG_MAX 400

struct config_pair {
	struct config_node *key;
	struct config_node *value; /* NULL only while the value is being read */
};

struct config_node {
	enum config_kind kind;
	unsigned line, column;
	const struct config_doc *doc;
	const struct config_node *parent;
	const char *key; /* in a map: the entry's key (keys point to themselves) */
	size_t index;	 /* in a sequence: the position */

	char *value; /* scalars */
	bool plain;

	size_t n, cap; /* maps: pairs; sequences: items */
	struct config_pair *pairs;
	struct config_node **items;
};

struct config_doc {
	char *name;
	struct config_node *root;
};

static void node_free(struct config_node *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n->n; i++) {
		if (n->kind == CONFIG_MAP) {
			node_free(n->pairs[i].key);
			node_free(n->pairs[i].value);
		} else {
			node_free(n->items[i]);
		}
	}
	free(n->pairs);
	free(n->items);
	/* Scalars may be secrets (a vault is config too): wiped, not just freed. */
	if (n->value)
		explicit_bzero(n->value, strlen(n->value));
	free(n->value);
	free(n);
}

void config_doc_free(struct config_doc *doc)
{
	if (!doc)
		return;
	node_free(doc->root);
	free(doc->name);
	free(doc);
}

/* ---- paths and messages ---- */

static void append_key(struct buf *b, const char *key)
{
	size_t n = 0;
	for (; key[n] && n < PATH_KEY_MAX; n++) {
		unsigned char c = (unsigned char)key[n];
		/* Keep control characters out of logs and terminals. */
		(void)buf_append_char(b, c < 0x20 || c == 0x7f ? '?' : (char)c);
	}
	if (key[n])
		(void)buf_append_str(b, "...");
}

const char *config_node_path(const struct config_node *n, char *out, size_t size)
{
	/* Depth is bounded by CONFIG_MAX_DEPTH collections plus one scalar. */
	const struct config_node *chain[CONFIG_MAX_DEPTH + 2];
	size_t depth = 0;
	for (const struct config_node *p = n; p && p->parent && depth < ARRAY_SIZE(chain);
	     p = p->parent)
		chain[depth++] = p;

	_cleanup_buf_ struct buf b = BUF_INIT(size > 0 ? size - 1 : 0);
	while (depth-- > 0) {
		const struct config_node *c = chain[depth];
		if (c->parent->kind == CONFIG_MAP) {
			if (b.len > 0)
				(void)buf_append_char(&b, '.');
			append_key(&b, c->key);
		} else {
			(void)buf_appendf(&b, "[%zu]", c->index);
		}
	}
	if (size > 0) {
		if (b.len > 0)
			memcpy(out, b.data, b.len);
		out[b.len] = '\0';
	}
	return out;
}

static int vnode_error(const struct config_node *n, const char *path, struct al_error *err,
		       int code, const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));
static int vnode_error(const struct config_node *n, const char *path, struct al_error *err,
		       int code, const char *fmt, va_list ap)
{
	char msg[MSG_MAX];
	char computed[PATH_MAX_LEN];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (!path)
		path = config_node_path(n, computed, sizeof(computed));
	return al_error_set(err, code, "%s:%u: %s%s%s", n->doc->name, n->line, path,
			    path[0] ? ": " : "", msg);
}

static int node_error(const struct config_node *n, const char *path, struct al_error *err, int code,
		      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int node_error(const struct config_node *n, const char *path, struct al_error *err, int code,
		      const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vnode_error(n, path, err, code, fmt, ap);
	va_end(ap);
	return r;
}

int config_error(const struct config_node *n, const char *path, struct al_error *err,
		 const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vnode_error(n, path, err, -EINVAL, fmt, ap);
	va_end(ap);
	return r;
}

/* ---- building the tree from libyaml events ---- */

struct builder {
	struct config_doc *doc;
	struct al_error *err;
	struct config_node *stack[CONFIG_MAX_DEPTH]; /* open maps and sequences */
	size_t depth;
	size_t n_nodes;
};

static int mark_error(struct builder *b, const yaml_mark_t *mark, int code, const char *what)
{
	return al_error_set(b->err, code, "%s:%zu: %s", b->doc->name, mark->line + 1, what);
}

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : 4, bytes;
	if (__builtin_mul_overflow(ncap, elem, &bytes))
		return -ENOMEM;
	void *q = realloc(*p, bytes);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = ncap;
	return 0;
}

/* Creates a node and hangs it into the open collection (or makes it the
 * root), so that the tree owns it from the start. */
static int add_node(struct builder *b, enum config_kind kind, const yaml_mark_t *mark,
		    struct config_node **ret)
{
	if (b->n_nodes >= CONFIG_MAX_NODES)
		return mark_error(b, mark, -E2BIG, "too many nodes (the limit is 100000)");

	struct config_node *parent = b->depth > 0 ? b->stack[b->depth - 1] : NULL;
	bool is_key = parent && parent->kind == CONFIG_MAP &&
		      (parent->n == 0 || parent->pairs[parent->n - 1].value);
	if (is_key && kind != CONFIG_SCALAR)
		return mark_error(b, mark, -EINVAL, "a map key must be a plain value");
	if (parent) {
		int r = parent->kind == CONFIG_MAP ? grow((void **)&parent->pairs, &parent->cap,
							  parent->n, sizeof(*parent->pairs)) :
						     grow((void **)&parent->items, &parent->cap,
							  parent->n, sizeof(*parent->items));
		if (r < 0)
			return mark_error(b, mark, r, "out of memory");
	}

	struct config_node *n = calloc(1, sizeof(*n));
	if (!n)
		return mark_error(b, mark, -ENOMEM, "out of memory");
	n->kind = kind;
	n->line = (unsigned)mark->line + 1;
	n->column = (unsigned)mark->column + 1;
	n->doc = b->doc;
	n->parent = parent;
	b->n_nodes++;

	if (!parent) {
		b->doc->root = n;
	} else if (parent->kind == CONFIG_SEQ) {
		n->index = parent->n;
		parent->items[parent->n++] = n;
	} else if (is_key) {
		parent->pairs[parent->n++] = (struct config_pair){ .key = n, .value = NULL };
	} else {
		parent->pairs[parent->n - 1].value = n;
		n->key = parent->pairs[parent->n - 1].key->value;
	}
	*ret = n;
	return 0;
}

static int cmp_pair_keys(const void *a, const void *b)
{
	const struct config_pair *x = *(const struct config_pair *const *)a;
	const struct config_pair *y = *(const struct config_pair *const *)b;
	int c = strcmp(x->key->value, y->key->value);
	if (c != 0)
		return c;
	return x < y ? -1 : x > y;
}

/* Sorting finds duplicates in n log n; a map with 50000 keys must not
 * take 50000^2 comparisons. */
static int check_duplicates(struct builder *b, const struct config_node *map)
{
	if (map->n < 2)
		return 0;
	_cleanup_free_ const struct config_pair **sorted = calloc(map->n, sizeof(*sorted));
	if (!sorted)
		return al_error_set(b->err, -ENOMEM, "%s: out of memory", b->doc->name);
	for (size_t i = 0; i < map->n; i++)
		sorted[i] = &map->pairs[i];
	qsort(sorted, map->n, sizeof(*sorted), cmp_pair_keys);

	/* Report the duplicate that comes first in the document. */
	const struct config_pair *first = NULL;
	for (size_t i = 1; i < map->n; i++)
		if (strcmp(sorted[i - 1]->key->value, sorted[i]->key->value) == 0 &&
		    (!first || sorted[i] < first))
			first = sorted[i];
	if (first)
		return node_error(first->key, NULL, b->err, -EINVAL, "duplicate key");
	return 0;
}

static int on_scalar(struct builder *b, const yaml_event_t *e)
{
	if (e->data.scalar.anchor)
		return mark_error(b, &e->start_mark, -EINVAL,
				  "anchors and aliases are not supported");
	if (e->data.scalar.tag)
		return mark_error(b, &e->start_mark, -EINVAL, "tags are not supported");
	if (e->data.scalar.length > 0 && memchr(e->data.scalar.value, '\0', e->data.scalar.length))
		return mark_error(b, &e->start_mark, -EINVAL, "NUL byte in a value");

	struct config_node *n;
	int r = add_node(b, CONFIG_SCALAR, &e->start_mark, &n);
	if (r < 0)
		return r;
	n->value = strndup((const char *)e->data.scalar.value, e->data.scalar.length);
	if (!n->value)
		return mark_error(b, &e->start_mark, -ENOMEM, "out of memory");
	n->plain = e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
	if (!n->parent || n->parent->kind != CONFIG_MAP || n->key)
		return 0;
	n->key = n->value; /* a key: its path is its entry's */
	return 0;
}

static int on_start(struct builder *b, const yaml_event_t *e, enum config_kind kind)
{
	const yaml_char_t *anchor = kind == CONFIG_MAP ? e->data.mapping_start.anchor :
							 e->data.sequence_start.anchor;
	const yaml_char_t *tag = kind == CONFIG_MAP ? e->data.mapping_start.tag :
						      e->data.sequence_start.tag;
	if (anchor)
		return mark_error(b, &e->start_mark, -EINVAL,
				  "anchors and aliases are not supported");
	if (tag)
		return mark_error(b, &e->start_mark, -EINVAL, "tags are not supported");
	if (b->depth >= CONFIG_MAX_DEPTH)
		return mark_error(b, &e->start_mark, -E2BIG,
				  "nested too deeply (the limit is 64 levels)");
	struct config_node *n;
	int r = add_node(b, kind, &e->start_mark, &n);
	if (r < 0)
		return r;
	b->stack[b->depth++] = n;
	return 0;
}

static int on_end(struct builder *b)
{
	struct config_node *n = b->stack[--b->depth];
	if (n->kind == CONFIG_MAP)
		return check_duplicates(b, n);
	return 0;
}

static int parser_error(struct builder *b, const yaml_parser_t *p)
{
	if (p->error == YAML_MEMORY_ERROR)
		return al_error_set(b->err, -ENOMEM, "%s: out of memory", b->doc->name);
	const char *problem = p->problem ? p->problem : "malformed YAML";
	if (p->context)
		return al_error_set(b->err, -EINVAL, "%s:%zu: %s (%s, line %zu)", b->doc->name,
				    p->problem_mark.line + 1, problem, p->context,
				    p->context_mark.line + 1);
	return al_error_set(b->err, -EINVAL, "%s:%zu: %s", b->doc->name, p->problem_mark.line + 1,
			    problem);
}

static int on_event(struct builder *b, const yaml_event_t *e, int *documents)
{
	switch (e->type) {
	case YAML_STREAM_START_EVENT:
	case YAML_STREAM_END_EVENT:
	case YAML_DOCUMENT_END_EVENT:
	case YAML_NO_EVENT:
		return 0;
	case YAML_DOCUMENT_START_EVENT:
		if (++*documents > 1)
			return mark_error(b, &e->start_mark, -EINVAL, "more than one document");
		if (e->data.document_start.tag_directives.start !=
		    e->data.document_start.tag_directives.end)
			return mark_error(b, &e->start_mark, -EINVAL, "tags are not supported");
		return 0;
	case YAML_ALIAS_EVENT:
		return mark_error(b, &e->start_mark, -EINVAL,
				  "anchors and aliases are not supported");
	case YAML_SCALAR_EVENT:
		return on_scalar(b, e);
	case YAML_SEQUENCE_START_EVENT:
		return on_start(b, e, CONFIG_SEQ);
	case YAML_MAPPING_START_EVENT:
		return on_start(b, e, CONFIG_MAP);
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		return on_end(b);
	}
	return mark_error(b, &e->start_mark, -EINVAL, "unexpected YAML event");
}

static int build(struct builder *b, const char *text, size_t len)
{
	yaml_parser_t parser;
	if (!yaml_parser_initialize(&parser))
		return al_error_set(b->err, -ENOMEM, "%s: out of memory", b->doc->name);
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);

	int r = 0, documents = 0;
	for (bool done = false; !done && r == 0;) {
		yaml_event_t e;
		if (!yaml_parser_parse(&parser, &e)) {
			r = parser_error(b, &parser);
			break;
		}
		done = e.type == YAML_STREAM_END_EVENT;
		r = on_event(b, &e, &documents);
		yaml_event_delete(&e);
	}
	yaml_parser_delete(&parser);
	return r;
}

int config_load_string(const char *name, const char *text, size_t len, struct config_doc **ret,
		       struct al_error *err)
{
	if (!name)
		name = "<config>";
	if (!text) {
		if (len > 0)
			return al_error_set(err, -EINVAL, "%s: no text", name);
		text = "";
	}
	if (len > CONFIG_MAX_FILE_SIZE)
		return al_error_set(err, -EFBIG, "%s: larger than the limit of %u bytes", name,
				    CONFIG_MAX_FILE_SIZE);

	struct config_doc *doc = calloc(1, sizeof(*doc));
	if (!doc)
		return al_error_set(err, -ENOMEM, "%s: out of memory", name);
	doc->name = strdup(name);
	if (!doc->name) {
		free(doc);
		return al_error_set(err, -ENOMEM, "%s: out of memory", name);
	}

	struct builder b = { .doc = doc, .err = err };
	int r = build(&b, text, len);
	if (r == 0 && !doc->root) {
		/* Nothing but comments: an empty map. */
		yaml_mark_t start = { .index = 0, .line = 0, .column = 0 };
		struct config_node *root;
		r = add_node(&b, CONFIG_MAP, &start, &root);
	}
	if (r < 0) {
		config_doc_free(doc);
		return r;
	}
	*ret = doc;
	return 0;
}

int config_load_file(const char *path, struct config_doc **ret, struct al_error *err)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	int r = read_file_bounded(AT_FDCWD, path, CONFIG_MAX_FILE_SIZE, &text, &len);
	if (r == -EFBIG)
		return al_error_set(err, r, "%s: larger than the limit of %u bytes", path,
				    CONFIG_MAX_FILE_SIZE);
	if (r < 0)
		return al_error_set_errno(err, r, "%s: cannot read", path);
	return config_load_string(path, text, len, ret, err);
}

/* ---- reading the tree ---- */

const struct config_node *config_root(const struct config_doc *doc)
{
	return doc ? doc->root : NULL;
}

const char *config_doc_name(const struct config_doc *doc)
{
	return doc ? doc->name : NULL;
}

enum config_kind config_node_kind(const struct config_node *n)
{
	return n->kind;
}

unsigned config_node_line(const struct config_node *n)
{
	return n->line;
}

unsigned config_node_column(const struct config_node *n)
{
	return n->column;
}

const char *config_node_scalar(const struct config_node *n)
{
	return n && n->kind == CONFIG_SCALAR ? n->value : NULL;
}

bool config_node_is_null(const struct config_node *n)
{
	if (!n || n->kind != CONFIG_SCALAR || !n->plain)
		return false;
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
	for (size_t i = 0; i < ARRAY_SIZE(nulls); i++)
		if (strcmp(n->value, nulls[i]) == 0)
			return true;
	return false;
}

size_t config_node_count(const struct config_node *n)
{
	return n && n->kind != CONFIG_SCALAR ? n->n : 0;
}

const struct config_node *config_seq_item(const struct config_node *seq, size_t i)
{
	if (!seq || seq->kind != CONFIG_SEQ || i >= seq->n)
		return NULL;
	return seq->items[i];
}

const struct config_node *config_map_key_node(const struct config_node *map, size_t i)
{
	if (!map || map->kind != CONFIG_MAP || i >= map->n)
		return NULL;
	return map->pairs[i].key;
}

const char *config_map_key(const struct config_node *map, size_t i)
{
	const struct config_node *k = config_map_key_node(map, i);
	return k ? k->value : NULL;
}

const struct config_node *config_map_value(const struct config_node *map, size_t i)
{
	if (!map || map->kind != CONFIG_MAP || i >= map->n)
		return NULL;
	return map->pairs[i].value;
}

const struct config_node *config_map_get(const struct config_node *map, const char *key)
{
	if (!map || map->kind != CONFIG_MAP || !key)
		return NULL;
	for (size_t i = 0; i < map->n; i++)
		if (strcmp(map->pairs[i].key->value, key) == 0)
			return map->pairs[i].value;
	return NULL;
}

static const char *kind_name(enum config_kind kind)
{
	switch (kind) {
	case CONFIG_MAP:
		return "a map";
	case CONFIG_SEQ:
		return "a list";
	case CONFIG_SCALAR:
		break;
	}
	return "a single value";
}

static int missing(const char *path, struct al_error *err)
{
	return al_error_set(err, -ENOENT, "%s: missing", path ? path : "value");
}

int config_expect_kind(const struct config_node *n, const char *path, enum config_kind kind,
		       struct al_error *err)
{
	if (!n)
		return missing(path, err);
	if (n->kind != kind)
		return config_error(n, path, err, "expected %s", kind_name(kind));
	return 0;
}

int config_map_require(const struct config_node *map, const char *path, const char *key,
		       const struct config_node **ret, struct al_error *err)
{
	int r = config_expect_kind(map, path, CONFIG_MAP, err);
	if (r < 0)
		return r;
	const struct config_node *v = config_map_get(map, key);
	if (!v)
		return node_error(map, path, err, -ENOENT, "missing required key \"%s\"", key);
	*ret = v;
	return 0;
}

/* "a, b, c", cut short if it does not fit. */
static void join_choices(const char *const *choices, char *out, size_t size)
{
	_cleanup_buf_ struct buf b = BUF_INIT(size - 1);
	for (size_t i = 0; choices[i]; i++)
		if (buf_appendf(&b, "%s%s", i ? ", " : "", choices[i]) < 0)
			break;
	if (b.len > 0)
		memcpy(out, b.data, b.len);
	out[b.len] = '\0';
}

int config_map_check_keys(const struct config_node *map, const char *path,
			  const char *const *allowed, struct al_error *err)
{
	int r = config_expect_kind(map, path, CONFIG_MAP, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < map->n; i++) {
		const struct config_node *k = map->pairs[i].key;
		bool ok = false;
		for (size_t j = 0; allowed[j] && !ok; j++)
			ok = strcmp(k->value, allowed[j]) == 0;
		if (ok)
			continue;

		char list[MSG_MAX / 2];
		join_choices(allowed, list, sizeof(list));
		char full[PATH_MAX_LEN];
		if (path) {
			_cleanup_buf_ struct buf b = BUF_INIT(sizeof(full) - 1);
			(void)buf_append_str(&b, path);
			if (path[0])
				(void)buf_append_char(&b, '.');
			append_key(&b, k->value);
			memcpy(full, b.data ? b.data : "", b.len + 1);
		} else {
			config_node_path(k, full, sizeof(full));
		}
		if (!allowed[0])
			return node_error(k, full, err, -EINVAL, "unknown key (none are allowed)");
		return node_error(k, full, err, -EINVAL, "unknown key (expected one of %s)", list);
	}
	return 0;
}

static int get_scalar(const struct config_node *n, const char *path, const char *expected,
		      const char **ret, struct al_error *err)
{
	if (!n)
		return missing(path, err);
	if (n->kind != CONFIG_SCALAR)
		return config_error(n, path, err, "expected %s, not %s", expected,
				    kind_name(n->kind));
	*ret = n->value;
	return 0;
}

int config_get_str(const struct config_node *n, const char *path, const char **ret,
		   struct al_error *err)
{
	const char *s = NULL;
	int r = get_scalar(n, path, "a string", &s, err);
	if (r < 0)
		return r;
	if (config_node_is_null(n))
		return config_error(n, path, err, "expected a string, not an empty value");
	*ret = s;
	return 0;
}

int config_get_bool(const struct config_node *n, const char *path, bool *ret, struct al_error *err)
{
	const char *s = NULL;
	int r = get_scalar(n, path, "true or false", &s, err);
	if (r < 0)
		return r;
	if (strcmp(s, "true") == 0)
		*ret = true;
	else if (strcmp(s, "false") == 0)
		*ret = false;
	else
		return config_error(n, path, err, "expected true or false");
	return 0;
}

typedef int (*parse_fn)(const char *s, uint64_t *ret);

static int get_number(const struct config_node *n, const char *path, parse_fn parse,
		      const char *expected, uint64_t *ret, struct al_error *err)
{
	const char *s = NULL;
	int r = get_scalar(n, path, expected, &s, err);
	if (r < 0)
		return r;
	uint64_t v;
	r = parse(s, &v);
	if (r == -ERANGE)
		return node_error(n, path, err, r, "number too large");
	if (r < 0)
		return node_error(n, path, err, r, "expected %s", expected);
	*ret = v;
	return 0;
}

int config_get_u64(const struct config_node *n, const char *path, uint64_t *ret,
		   struct al_error *err)
{
	return get_number(n, path, parse_u64, "a non-negative integer", ret, err);
}

int config_get_size(const struct config_node *n, const char *path, uint64_t *ret,
		    struct al_error *err)
{
	return get_number(n, path, parse_size, "a size such as 512M or 2G", ret, err);
}

int config_get_duration(const struct config_node *n, const char *path, uint64_t *ret_msec,
			struct al_error *err)
{
	return get_number(n, path, parse_duration, "a duration such as 30s, 500ms or 5m", ret_msec,
			  err);
}

int config_get_enum(const struct config_node *n, const char *path, const char *const *choices,
		    int *ret, struct al_error *err)
{
	char list[MSG_MAX / 2];
	join_choices(choices, list, sizeof(list));

	const char *s = NULL;
	if (n && n->kind == CONFIG_SCALAR)
		s = n->value;
	for (int i = 0; s && choices[i]; i++) {
		if (strcmp(s, choices[i]) == 0) {
			*ret = i;
			return 0;
		}
	}
	if (!n)
		return missing(path, err);
	return config_error(n, path, err, "expected one of %s", list);
}

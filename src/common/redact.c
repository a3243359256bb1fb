/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Redaction in one pass over the text, whatever the number of secrets:
 *
 * - Registered values: an Aho-Corasick automaton over every form of every
 *   value (rebuilt by each redactor_add, O(P log P) for P bytes of forms).
 *   A scan follows one goto or failure link per step, amortized: at most
 *   2n steps for n bytes of text, each a binary search among a node's
 *   children (at most 8 comparisons). Every node knows the longest form
 *   that ends there, so each text position yields at most one span: the
 *   longest occurrence ending there. Time O(n log 256), independent of the
 *   number of values.
 * - Known shapes: hand-written matchers tried where a shape can start (its
 *   first byte; for the generic ones also a word boundary before it). A failed attempt
 *   looks at a bounded number of bytes (at most ~90); a match resumes the
 *   scan after its end, and the only unbounded look-ahead (a PEM block's
 *   END line) either finds its end, where the scan resumes, or runs to the
 *   end of the text, which it then redacts. Time O(n) with that constant.
 *
 * Every byte inside any occurrence of a value or a shape is covered; each
 * maximal run of covered bytes becomes one REDACT_MARK. Since a value may
 * not overlap the marker, no value can survive: an occurrence in the
 * output touching no marker would be uncovered bytes that were contiguous
 * in the input, an occurrence there. Memory: O(n) for the spans.
 */
#include "common/redact.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/encode.h"

/* A vault's values are API keys and tokens; 8 KiB is far above any. */
#define REDACT_VALUE_MAX 8192u
/* Forms of all values together: bounds the automaton (about 17 bytes a
 * node, one node per byte) to some 17 MiB. */
#define REDACT_FORMS_MAX 4096u
#define REDACT_TOTAL_MAX (1024u * 1024)
/* The forms registered for one value: raw, standard base64, base64 of it
 * at each of the three alignments inside a longer encoding (a Basic
 * "user:value" pair), percent-encoded in upper and lower case, and as a
 * JSON string escapes it (quotes, backslashes, control characters). */
#define REDACT_VALUE_FORMS 8

#define MARK_LEN (sizeof(REDACT_MARK) - 1)

struct form {
	char *p;
	size_t len;
};

struct redactor {
	struct form *forms;
	size_t n_forms, cap_forms;
	size_t total;
	/* The automaton: node 0 is the root; a node's children are
	 * edge_byte/edge_to[edge_off[node] .. edge_off[node + 1]), by byte. */
	uint32_t n_nodes;
	uint32_t *fail;
	uint32_t *out; /* length of the longest form ending at this node, 0 none */
	uint32_t *edge_off;
	uint32_t *edge_to;
	unsigned char *edge_byte;
	uint32_t root[256]; /* the root's children, direct */
};

struct span {
	size_t s, e;
};

struct spans {
	struct span *v;
	size_t n, cap;
};

static void automaton_free(struct redactor *r)
{
	if (r->edge_byte)
		explicit_bzero(r->edge_byte, r->n_nodes ? r->n_nodes - 1 : 0);
	free(r->fail);
	free(r->out);
	free(r->edge_off);
	free(r->edge_to);
	free(r->edge_byte);
	r->fail = r->out = r->edge_off = r->edge_to = NULL;
	r->edge_byte = NULL;
	r->n_nodes = 0;
	memset(r->root, 0, sizeof(r->root));
}

int redactor_new(struct redactor **ret)
{
	struct redactor *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	*ret = r;
	return 0;
}

void redactor_free(struct redactor *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_forms; i++) {
		explicit_bzero(r->forms[i].p, r->forms[i].len);
		free(r->forms[i].p);
	}
	free(r->forms);
	automaton_free(r);
	free(r);
}

/* True when redacted text could still show s: s inside the marker,
 * containing it, or overlapping either end of it. */
static bool overlaps_mark(const char *s, size_t len)
{
	static const char mark[] = REDACT_MARK;
	if (memmem(s, len, mark, MARK_LEN) || memmem(mark, MARK_LEN, s, len))
		return true;
	for (size_t k = 1; k < MARK_LEN && k <= len; k++)
		if (memcmp(s, mark + MARK_LEN - k, k) == 0 || memcmp(s + len - k, mark, k) == 0)
			return true;
	return false;
}

static uint32_t child(const struct redactor *r, uint32_t node, unsigned char c)
{
	if (node == 0)
		return r->root[c];
	uint32_t lo = r->edge_off[node], hi = r->edge_off[node + 1];
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (r->edge_byte[mid] == c)
			return r->edge_to[mid];
		if (r->edge_byte[mid] < c)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static int cmp_forms(const void *a, const void *b)
{
	const struct form *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->p, y->p, n);
	if (c)
		return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

/*
 * Builds the automaton from the forms. Inserted in sorted order, each
 * form shares its longest common prefix with the one before, so its new
 * nodes hang below that one's path, and every node's children are created
 * in increasing byte order: a stable counting sort by parent then gives
 * each node's edges sorted, ready for binary search.
 */
static int build(struct redactor *r)
{
	size_t n_nodes = r->total + 1, n_edges = r->total, max_len = 0;
	for (size_t i = 0; i < r->n_forms; i++)
		if (r->forms[i].len > max_len)
			max_len = r->forms[i].len;
	_cleanup_free_ struct form *sorted = malloc(r->n_forms * sizeof(*sorted));
	_cleanup_free_ uint32_t *path = malloc((max_len + 1) * sizeof(*path));
	/* Trie edges in creation order: edge k leads to node k + 1. */
	_cleanup_free_ uint32_t *e_parent = malloc(n_edges * sizeof(*e_parent));
	_cleanup_free_ unsigned char *e_byte = malloc(n_edges);
	_cleanup_free_ uint32_t *cursor = malloc(n_nodes * sizeof(*cursor));
	_cleanup_free_ uint32_t *queue = malloc(n_nodes * sizeof(*queue));
	_cleanup_free_ uint32_t *fail = calloc(n_nodes, sizeof(*fail));
	_cleanup_free_ uint32_t *out = calloc(n_nodes, sizeof(*out));
	_cleanup_free_ uint32_t *edge_off = calloc(n_nodes + 1, sizeof(*edge_off));
	_cleanup_free_ uint32_t *edge_to = malloc(n_edges * sizeof(*edge_to));
	_cleanup_free_ unsigned char *edge_byte = malloc(n_edges);
	if (!sorted || !path || !e_parent || !e_byte || !cursor || !queue || !fail || !out ||
	    !edge_off || !edge_to || !edge_byte)
		return -ENOMEM;
	memcpy(sorted, r->forms, r->n_forms * sizeof(*sorted));
	qsort(sorted, r->n_forms, sizeof(*sorted), cmp_forms);

	uint32_t nodes = 1;
	size_t prev_len = 0;
	path[0] = 0;
	for (size_t i = 0; i < r->n_forms; i++) {
		const struct form *f = &sorted[i];
		size_t lcp = 0;
		if (i > 0) {
			const struct form *p = &sorted[i - 1];
			size_t lim = prev_len < f->len ? prev_len : f->len;
			while (lcp < lim && p->p[lcp] == f->p[lcp])
				lcp++;
		}
		for (size_t d = lcp; d < f->len; d++) {
			uint32_t v = nodes++;
			e_parent[v - 1] = path[d];
			e_byte[v - 1] = (unsigned char)f->p[d];
			path[d + 1] = v;
		}
		out[path[f->len]] = (uint32_t)f->len;
		prev_len = f->len;
	}
	uint32_t edges = nodes - 1;
	for (uint32_t k = 0; k < edges; k++)
		edge_off[e_parent[k] + 1]++;
	for (uint32_t v = 0; v < nodes; v++)
		edge_off[v + 1] += edge_off[v];
	memcpy(cursor, edge_off, nodes * sizeof(*cursor));
	for (uint32_t k = 0; k < edges; k++) {
		uint32_t at = cursor[e_parent[k]]++;
		edge_byte[at] = e_byte[k];
		edge_to[at] = k + 1;
	}
	explicit_bzero(e_byte, n_edges);

	/* A view of the new automaton for child(), r itself untouched until
	 * it is complete. */
	struct redactor next = {
		.n_nodes = nodes, .edge_off = edge_off, .edge_to = edge_to, .edge_byte = edge_byte
	};
	for (uint32_t k = edge_off[0]; k < edge_off[1]; k++)
		next.root[edge_byte[k]] = edge_to[k];

	/* Failure links breadth first: a node's link is shallower, so it is
	 * final before the node's children need it. */
	size_t head = 0, tail = 0;
	for (uint32_t k = edge_off[0]; k < edge_off[1]; k++)
		queue[tail++] = edge_to[k];
	while (head < tail) {
		uint32_t u = queue[head++];
		for (uint32_t k = edge_off[u]; k < edge_off[u + 1]; k++) {
			uint32_t v = edge_to[k], f = fail[u], t;
			unsigned char c = edge_byte[k];
			for (;;) {
				t = child(&next, f, c);
				if (t || f == 0)
					break;
				f = fail[f];
			}
			fail[v] = t;
			/* A form ending here is this node's whole string, the
			 * longest possible; otherwise the link's. */
			if (!out[v])
				out[v] = out[t];
			queue[tail++] = v;
		}
	}

	automaton_free(r);
	memcpy(r->root, next.root, sizeof(r->root));
	r->n_nodes = nodes;
	r->fail = TAKE_PTR(fail);
	r->out = TAKE_PTR(out);
	r->edge_off = TAKE_PTR(edge_off);
	r->edge_to = TAKE_PTR(edge_to);
	r->edge_byte = TAKE_PTR(edge_byte);
	return 0;
}

static bool have_form(const struct redactor *r, const char *p, size_t len)
{
	for (size_t i = 0; i < r->n_forms; i++)
		if (r->forms[i].len == len && memcmp(r->forms[i].p, p, len) == 0)
			return true;
	return false;
}

static void forms_wipe(struct form *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (f[i].p) {
			explicit_bzero(f[i].p, f[i].len);
			free(f[i].p);
		}
		f[i].p = NULL;
	}
}

/* The derived forms of value, into f (n_ret of them, owned). */
static int derive(const char *value, size_t len, struct form *f, size_t *n_ret)
{
	size_t n = 0;
	char *raw = malloc(len);
	if (!raw)
		return -ENOMEM;
	memcpy(raw, value, len);
	f[n++] = (struct form){ raw, len };

	/* Standard base64, and the value's bytes from each alignment as they
	 * show inside any longer base64 text (the part made of whole groups
	 * of three): a Basic pair "user:value" holds one of those. */
	for (size_t skip = 0; skip <= 3; skip++) {
		size_t from = skip == 3 ? 0 : skip;
		size_t cnt = skip == 3 ? len : (len - from) / 3 * 3;
		char *b = malloc(enc_base64_len(cnt) + 1);
		if (!b)
			goto oom;
		enc_base64(value + from, cnt, b);
		size_t blen = strlen(b);
		if (blen < REDACT_MIN_VALUE) {
			explicit_bzero(b, blen);
			free(b);
			continue;
		}
		f[n++] = (struct form){ b, blen };
	}
	for (int lower = 0; lower < 2; lower++) {
		size_t plen = enc_percent_len(value, len);
		if (plen == len)
			break; /* nothing to encode: the raw form */
		char *p = malloc(plen + 1);
		if (!p)
			goto oom;
		enc_percent(value, len, lower, p);
		f[n++] = (struct form){ p, plen };
	}
	/* JSON text of the value when escaping changes it: a line of an
	 * agent's output that is not valid JSON is shown as it came. */
	size_t jlen = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)value[i];
		jlen += c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' ? 2 :
			c < 0x20						     ? 6 :
										       1;
	}
	if (jlen != len) {
		char *j = malloc(jlen);
		if (!j)
			goto oom;
		size_t o = 0;
		for (size_t i = 0; i < len; i++) {
			unsigned char c = (unsigned char)value[i];
			const char *esc = c == '"'  ? "\\\"" :
					  c == '\\' ? "\\\\" :
					  c == '\n' ? "\\n" :
					  c == '\r' ? "\\r" :
					  c == '\t' ? "\\t" :
						      NULL;
			if (esc) {
				memcpy(j + o, esc, 2);
				o += 2;
			} else if (c < 0x20) {
				j[o++] = '\\';
				j[o++] = 'u';
				j[o++] = '0';
				j[o++] = '0';
				j[o++] = enc_hex_lower[c >> 4];
				j[o++] = enc_hex_lower[c & 15];
			} else {
				j[o++] = (char)c;
			}
		}
		f[n++] = (struct form){ j, jlen };
	}
	*n_ret = n;
	return 0;
oom:
	forms_wipe(f, n);
	return -ENOMEM;
}

int redactor_add(struct redactor *r, const char *value, size_t len)
{
	if (!r || !value || len < REDACT_MIN_VALUE || len > REDACT_VALUE_MAX)
		return -EINVAL;
	struct form f[REDACT_VALUE_FORMS] = { 0 };
	size_t n = 0;
	int rc = derive(value, len, f, &n);
	if (rc < 0)
		return rc;
	/* All or nothing: every form is checked before any is kept. */
	size_t add = 0, add_bytes = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (overlaps_mark(f[i].p, f[i].len)) {
			rc = -EINVAL;
			break;
		}
		bool dup = have_form(r, f[i].p, f[i].len);
		for (size_t j = 0; j < i && !dup; j++)
			dup = f[j].p && f[j].len == f[i].len &&
			      memcmp(f[j].p, f[i].p, f[i].len) == 0;
		if (dup) {
			explicit_bzero(f[i].p, f[i].len);
			free(f[i].p);
			f[i].p = NULL;
			continue;
		}
		add++;
		add_bytes += f[i].len;
	}
	if (rc == 0 &&
	    (r->n_forms + add > REDACT_FORMS_MAX || r->total + add_bytes > REDACT_TOTAL_MAX))
		rc = -E2BIG;
	if (rc == 0 && r->n_forms + add > r->cap_forms) {
		size_t cap = r->cap_forms ? r->cap_forms * 2 : 16;
		while (cap < r->n_forms + add)
			cap *= 2;
		struct form *v = realloc(r->forms, cap * sizeof(*v));
		if (!v)
			rc = -ENOMEM;
		else {
			r->forms = v;
			r->cap_forms = cap;
		}
	}
	if (rc < 0 || add == 0) {
		forms_wipe(f, n);
		return rc;
	}
	size_t before = r->n_forms, before_total = r->total;
	for (size_t i = 0; i < n; i++)
		if (f[i].p) {
			r->forms[r->n_forms++] = f[i];
			r->total += f[i].len;
		}
	rc = build(r);
	if (rc < 0) {
		/* Back to the redactor as it was (its automaton is untouched). */
		forms_wipe(r->forms + before, r->n_forms - before);
		r->n_forms = before;
		r->total = before_total;
	}
	return rc;
}

static int spans_push(struct spans *sp, size_t s, size_t e)
{
	if (sp->n == sp->cap) {
		size_t cap = sp->cap ? sp->cap * 2 : 16;
		struct span *v = realloc(sp->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		sp->v = v;
		sp->cap = cap;
	}
	sp->v[sp->n++] = (struct span){ s, e };
	return 0;
}

/* Spans of every value occurrence, sorted and disjoint: they come by end,
 * and a new one swallows the ones it overlaps or touches. */
static int scan_values(const struct redactor *r, const unsigned char *t, size_t n, struct spans *sp)
{
	if (!r || r->n_nodes <= 1)
		return 0;
	uint32_t s = 0;
	for (size_t j = 0; j < n; j++) {
		unsigned char c = t[j];
		for (;;) {
			uint32_t x = child(r, s, c);
			if (x || s == 0) {
				s = x;
				break;
			}
			s = r->fail[s];
		}
		if (!r->out[s])
			continue;
		size_t b = j + 1 - r->out[s], e = j + 1;
		while (sp->n > 0 && sp->v[sp->n - 1].e >= b) {
			if (sp->v[sp->n - 1].s < b)
				b = sp->v[sp->n - 1].s;
			sp->n--;
		}
		int rc = spans_push(sp, b, e);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ---- known shapes ---- */

static bool is_alnum(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool is_upnum(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* The characters of API keys and tokens. */
static bool is_tok(unsigned char c)
{
	return is_alnum(c) || c == '_' || c == '-';
}

static bool is_word(unsigned char c)
{
	return is_alnum(c) || c == '_';
}

static bool is_slack(unsigned char c)
{
	return is_alnum(c) || c == '-';
}

/* RFC 6750 b64token. */
static bool is_b64tok(unsigned char c)
{
	return is_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' ||
	       c == '/' || c == '=';
}

/* Bytes of class cls from i, counting at most lim. */
static size_t run(const unsigned char *t, size_t n, size_t i, bool (*cls)(unsigned char),
		  size_t lim)
{
	size_t k = 0;
	while (i + k < n && k < lim && cls(t[i + k]))
		k++;
	return k;
}

static bool has(const unsigned char *t, size_t n, size_t i, const char *lit)
{
	size_t l = strlen(lit);
	return n - i >= l && memcmp(t + i, lit, l) == 0;
}

static bool has_ci(const unsigned char *t, size_t n, size_t i, const char *lit)
{
	size_t l = strlen(lit);
	if (n - i < l)
		return false;
	for (size_t k = 0; k < l; k++) {
		unsigned char c = t[i + k];
		if (c >= 'A' && c <= 'Z')
			c = (unsigned char)(c - 'A' + 'a');
		if (c != (unsigned char)lit[k])
			return false;
	}
	return true;
}

/*
 * A token shape: prefix at i, then at least need bytes of class need_cls;
 * the span runs on over every byte of class ext (the whole token, not a
 * prefix of it). Returns the end, or 0.
 */
static size_t token(const unsigned char *t, size_t n, size_t i, const char *prefix,
		    bool (*need_cls)(unsigned char), size_t need, bool (*ext)(unsigned char))
{
	if (!has(t, n, i, prefix))
		return 0;
	size_t k = i + strlen(prefix);
	if (run(t, n, k, need_cls, need) < need)
		return 0;
	k += need;
	return k + run(t, n, k, ext, SIZE_MAX);
}

/* A word, not a token: letters only, lower case after the first. */
static bool plain_word(const unsigned char *t, size_t len)
{
	for (size_t k = 0; k < len; k++) {
		unsigned char c = t[k];
		if (!((c >= 'a' && c <= 'z') || (k == 0 && c >= 'A' && c <= 'Z')))
			return false;
	}
	return true;
}

static size_t skip_blanks(const unsigned char *t, size_t n, size_t i)
{
	for (size_t k = 0; k < 16 && i < n && (t[i] == ' ' || t[i] == '\t'); k++)
		i++;
	return i;
}

/* "Bearer <token>": the token (a word of prose after "bearer" is not one). */
static size_t bearer(const unsigned char *t, size_t n, size_t i, size_t *rs)
{
	if (!has_ci(t, n, i, "bearer"))
		return 0;
	size_t k = i + 6;
	size_t v = skip_blanks(t, n, k);
	if (v == k)
		return 0;
	size_t len = run(t, n, v, is_b64tok, SIZE_MAX);
	if (len < 8 || plain_word(t + v, len))
		return 0;
	*rs = v;
	return v + len;
}

/* A credential header's or field's value: "Authorization: ...",
 * "authorization": "...", AUTHORIZATION=..., and the API key headers. */
static size_t header(const unsigned char *t, size_t n, size_t i, size_t *rs)
{
	static const char *const names[] = { "authorization", "x-api-key", "x-goog-api-key" };
	size_t k = 0;
	for (size_t j = 0; j < ARRAY_SIZE(names) && !k; j++)
		if (has_ci(t, n, i, names[j]))
			k = i + strlen(names[j]);
	if (!k)
		return 0;
	if (k < n && (t[k] == '"' || t[k] == '\''))
		k++;
	k = skip_blanks(t, n, k);
	if (k >= n || (t[k] != ':' && t[k] != '='))
		return 0;
	k = skip_blanks(t, n, k + 1);
	unsigned char q = 0;
	if (k < n && (t[k] == '"' || t[k] == '\''))
		q = t[k++];
	size_t v = k;
	while (k < n && t[k] != '\n' && t[k] != '\r' &&
	       (q ? t[k] != q : (t[k] != '"' && t[k] != '\'')))
		k++;
	if (k == v)
		return 0;
	*rs = v;
	return k;
}

/* A PEM private key block, from its BEGIN line through its END line (or
 * to the end of the text, when that was cut). */
static size_t pem(const unsigned char *t, size_t n, size_t i)
{
	if (!has(t, n, i, "-----BEGIN "))
		return 0;
	size_t k = i + 11, lab = k;
	while (k < n && k - lab < 64 && (is_upnum(t[k]) || t[k] == ' '))
		k++;
	size_t ll = k - lab;
	bool key = (ll >= 11 && memcmp(t + k - 11, "PRIVATE KEY", 11) == 0) ||
		   (ll >= 17 && memcmp(t + k - 17, "PRIVATE KEY BLOCK", 17) == 0);
	if (!key || !has(t, n, k, "-----"))
		return 0;
	k += 5;
	const unsigned char *end = memmem(t + k, n - k, "-----END ", 9);
	if (!end)
		return n;
	size_t e = (size_t)(end - t) + 9;
	for (size_t x = e; x < n && x - e < 80; x++)
		if (has(t, n, x, "-----"))
			return x + 5;
	return n;
}

/*
 * The shape starting at i: its span [*rs, end), or 0. The distinctive
 * prefixes match anywhere (a key glued to a word is still a key); the
 * generic "sk-" and the words (bearer, header names) only at the start of
 * a word, so that "task-management-..." stays prose.
 */
static size_t shape_at(const unsigned char *t, size_t n, size_t i, size_t *rs)
{
	unsigned char c = t[i];
	bool boundary = i == 0 || !is_alnum(t[i - 1]);
	size_t e = 0;
	*rs = i;
	switch (c) {
	case 's':
		if (has(t, n, i, "sk-ant-"))
			return token(t, n, i, "sk-ant-", is_tok, 8, is_tok);
		return boundary ? token(t, n, i, "sk-", is_tok, 20, is_tok) : 0;
	case 'A':
		if ((e = token(t, n, i, "AIza", is_tok, 35, is_tok)))
			return e;
		if ((e = token(t, n, i, "AKIA", is_upnum, 16, is_upnum)))
			return e;
		if ((e = token(t, n, i, "ASIA", is_upnum, 16, is_upnum)))
			return e;
		break;
	case 'g':
		if (has(t, n, i, "github_pat_"))
			return token(t, n, i, "github_pat_", is_word, 22, is_tok);
		if (n - i > 4 && t[i + 1] == 'h' && t[i + 2] && strchr("pousr", t[i + 2]) &&
		    t[i + 3] == '_') {
			size_t k = i + 4;
			if (run(t, n, k, is_alnum, 36) == 36)
				return k + 36 + run(t, n, k + 36, is_tok, SIZE_MAX);
		}
		return 0;
	case 'x':
		if (n - i > 5 && t[i + 1] == 'o' && t[i + 2] == 'x' && t[i + 3] &&
		    strchr("abprs", t[i + 3]) && t[i + 4] == '-') {
			size_t k = i + 5;
			if (run(t, n, k, is_slack, 10) == 10)
				return k + 10 + run(t, n, k + 10, is_tok, SIZE_MAX);
		}
		break;
	case '-':
		return pem(t, n, i);
	default:
		break;
	}
	if (!boundary)
		return 0;
	if (c == 'b' || c == 'B')
		return bearer(t, n, i, rs);
	if (c == 'a' || c == 'A' || c == 'x' || c == 'X')
		return header(t, n, i, rs);
	return 0;
}

static int scan_shapes(const unsigned char *t, size_t n, struct spans *sp)
{
	size_t i = 0;
	while (i < n) {
		size_t rs, e = shape_at(t, n, i, &rs);
		if (!e) {
			i++;
			continue;
		}
		int rc = spans_push(sp, rs, e);
		if (rc < 0)
			return rc;
		i = e;
	}
	return 0;
}

int redact(const struct redactor *r, const char *text, size_t len, struct buf *out)
{
	const unsigned char *t = (const unsigned char *)text;
	struct spans vals = { 0 }, shapes = { 0 };
	size_t start_len = out->len;
	int rc = scan_values(r, t, len, &vals);
	if (rc == 0)
		rc = scan_shapes(t, len, &shapes);
	/* The union of both lists, each sorted and disjoint. */
	size_t a = 0, b = 0, pos = 0;
	while (rc == 0 && (a < vals.n || b < shapes.n)) {
		struct span cur;
		if (b >= shapes.n || (a < vals.n && vals.v[a].s <= shapes.v[b].s))
			cur = vals.v[a++];
		else
			cur = shapes.v[b++];
		for (;;) {
			if (a < vals.n && vals.v[a].s <= cur.e) {
				if (vals.v[a].e > cur.e)
					cur.e = vals.v[a].e;
				a++;
			} else if (b < shapes.n && shapes.v[b].s <= cur.e) {
				if (shapes.v[b].e > cur.e)
					cur.e = shapes.v[b].e;
				b++;
			} else {
				break;
			}
		}
		rc = buf_append(out, text + pos, cur.s - pos);
		if (rc == 0)
			rc = buf_append(out, REDACT_MARK, MARK_LEN);
		pos = cur.e;
	}
	if (rc == 0)
		rc = buf_append(out, text + pos, len - pos);
	free(vals.v);
	free(shapes.v);
	if (rc < 0) {
		/* Nothing half-redacted stays behind. */
		if (out->data)
			explicit_bzero(out->data + start_len, out->len - start_len);
		buf_truncate(out, start_len);
	}
	return rc;
}

void redact_inplace(const struct redactor *r, char *s, size_t size)
{
	if (!s || size == 0)
		return;
	size_t len = strnlen(s, size);
	if (len == size) {
		/* Not terminated within the buffer: the last byte becomes the
		 * terminator, as if the string ended there. */
		len = size - 1;
		s[len] = '\0';
	}
	/* At most a marker per 8 bytes plus one, and at least the input. */
	_cleanup_buf_ struct buf out = BUF_INIT(2 * len + MARK_LEN + 64);
	if (redact(r, s, len, &out) < 0) {
		/* Fail closed: nothing of the text is left. */
		size_t n = MARK_LEN < size - 1 ? MARK_LEN : size - 1;
		memcpy(s, REDACT_MARK, n);
		s[n] = '\0';
		return;
	}
	size_t n = out.len;
	if (n > size - 1) {
		n = size - 1;
		/* Cut on a UTF-8 character boundary. */
		while (n > 0 && ((unsigned char)out.data[n] & 0xc0) == 0x80)
			n--;
	}
	if (n > 0)
		memcpy(s, out.data, n);
	s[n] = '\0';
}

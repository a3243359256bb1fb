/* SPDX-License-Identifier: Apache-2.0 */
#include "quote.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "strview.h"

/*
 * Characters that mean nothing to the shell anywhere in a word. Left out on
 * purpose: '=' (FOO=bar as the first word is an assignment), '~' (tilde
 * expansion), '#' (comment), '%' (job specs), and every byte >= 0x80 (its
 * meaning depends on the locale).
 */
static bool is_safe_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-' || c == '.' || c == '/' || c == ',' || c == ':' || c == '+' ||
	       c == '@';
}

static bool is_reserved_word(struct sv w)
{
	/* POSIX reserved words plus the ones bash and ksh add. */
	static const char *const words[] = {
		"case", "do",	"done",	 "elif",  "else",     "esac",	"fi",	"for",	  "if",
		"in",	"then", "until", "while", "function", "select", "time", "coproc",
	};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (sv_equal_cstr(w, words[i]))
			return true;
	return false;
}

static bool needs_quotes(struct sv w)
{
	if (w.len == 0 || is_reserved_word(w))
		return true;
	for (size_t i = 0; i < w.len; i++)
		if (!is_safe_char(w.p[i]))
			return true;
	return false;
}

static int append_quoted(struct buf *out, struct sv w)
{
	if (!needs_quotes(w))
		return buf_append(out, w.p, w.len);

	int r = buf_append_char(out, '\'');
	size_t run = 0; /* bytes since the last quote, copied in one go */
	for (size_t i = 0; i < w.len && r == 0; i++) {
		if (w.p[i] != '\'') {
			run++;
			continue;
		}
		/* Close the quotes, write an escaped quote, reopen. */
		r = buf_append(out, w.p + i - run, run);
		if (r == 0)
			r = buf_append(out, "'\\''", 4);
		run = 0;
	}
	if (r == 0 && run > 0)
		r = buf_append(out, w.p + w.len - run, run);
	if (r == 0)
		r = buf_append_char(out, '\'');
	return r;
}

int quote_append(struct buf *out, const char *p, size_t len)
{
	if (len > 0 && memchr(p, '\0', len))
		return -EINVAL;
	size_t saved = out->len;
	int r = append_quoted(out, sv_make(p, len));
	if (r < 0)
		buf_truncate(out, saved);
	return r;
}

int quote_append_str(struct buf *out, const char *s)
{
	return quote_append(out, s, strlen(s));
}

int quote_argv(struct buf *out, const char *const *argv)
{
	size_t saved = out->len;
	int r = 0;
	for (size_t i = 0; argv[i] && r == 0; i++) {
		if (i > 0)
			r = buf_append_char(out, ' ');
		if (r == 0)
			r = quote_append_str(out, argv[i]);
	}
	if (r < 0)
		buf_truncate(out, saved);
	return r;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hidden CLI_DOC_ARG: a program's commands, their help text and their
 * option tables as JSON, for scripts/gendoc.py (the manual pages and the
 * shell completion). Not for people: nothing else reads it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/doc.h"
#include "common/cleanup.h"
#include "common/error.h"

/* What fn printed, as one string (the caller frees it); NULL when out of
 * memory. */
static char *printed(void (*fn)(FILE *f, const struct cli_doc *d), const struct cli_doc *d)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		return NULL;
	fn(f, d);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

static void print_help(FILE *f, const struct cli_doc *d)
{
	d->help(f, d->ud);
}

static void print_tables(FILE *f, const struct cli_doc *d)
{
	for (size_t t = 0; t < ARRAY_SIZE(d->tables) && d->tables[t]; t++)
		cli_print_optdefs(f, d->tables[t]);
}

static int print_doc(FILE *f, const struct cli_doc *d)
{
	_cleanup_free_ char *help = printed(print_help, d);
	_cleanup_free_ char *tables = printed(print_tables, d);
	if (!help || !tables)
		return cli_fail("out of memory");
	/* The manual shows the options apart: it must find them. */
	if (!strstr(help, tables))
		return cli_fail("%s: the help text does not print the option tables one after "
				"the other, as the command describes them",
				d->name);
	fputs("{\"name\":", f);
	cli_json_str(f, d->name);
	fputs(",\"help\":", f);
	cli_json_str(f, help);
	fputs(",\"options_text\":", f);
	cli_json_str(f, tables);
	fputs(",\"options\":[", f);
	size_t n = 0;
	for (size_t t = 0; t < ARRAY_SIZE(d->tables) && d->tables[t]; t++)
		for (const struct cli_optdef *o = d->tables[t]; o->name; o++) {
			fputs(n++ ? ",{\"name\":" : "{\"name\":", f);
			cli_json_str(f, o->name);
			fputs(",\"arg\":", f);
			if (o->arg)
				cli_json_str(f, o->arg);
			else
				fputs("null", f);
			fputs(",\"help\":", f);
			cli_json_str(f, o->help);
			/* An id that is a letter is the option's short form too. */
			if ((o->id >= 'a' && o->id <= 'z') || (o->id >= 'A' && o->id <= 'Z'))
				fprintf(f, ",\"short\":\"%c\"", o->id);
			fputc('}', f);
		}
	fputs("]}", f);
	return 0;
}

int cli_doc_print(FILE *f, const struct cli_doc *docs, size_t n, void (*top)(FILE *f))
{
	fputs("{\"version\":", f);
	cli_json_str(f, AIRLOCK_VERSION);
	if (top) {
		fputs(",\"top\":", f);
		top(f);
	}
	fputs(",\"commands\":[", f);
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputc(',', f);
		int r = print_doc(f, &docs[i]);
		if (r)
			return r;
	}
	fputs("]}\n", f);
	if (fflush(f) != 0 || ferror(f))
		return cli_fail("cannot write the description: %s", al_strerror(errno));
	return 0;
}

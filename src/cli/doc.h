/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * What the manual pages and the shell completion are made from: each
 * program describes its commands (hidden argument CLI_DOC_ARG) with the
 * same option tables and help text as --help, and scripts/gendoc.py turns
 * that into airlock(1), airlock-COMMAND(1) and the bash and zsh completion
 * at build time, so they cannot drift from the program.
 */
#include <stdbool.h>
#include <stdio.h>

#include "cli/cli.h"

#define CLI_DOC_ARG "__doc"

/*
 * A command as its manual page shows it. help: prints what `airlock NAME
 * --help` prints (ud: its argument). tables: the option tables that help
 * prints, in the order it prints them (one after the other: the manual
 * lists them apart from the rest of the text), NULL-terminated.
 */
struct cli_doc {
	const char *name;
	void (*help)(FILE *f, const void *ud);
	const void *ud;
	const struct cli_optdef *tables[8];
};

/* JSON on f: {"version":...,"commands":[...]} of n docs, and "top": what
 * top prints (airlock's own command list) unless NULL; 0, or an exit
 * status after a message. Each help text must hold its tables as
 * cli_print_optdefs prints them. */
int cli_doc_print(FILE *f, const struct cli_doc *docs, size_t n, void (*top)(FILE *f));

/* The commands of each program, printed as above. */
int cli_doc_gateway(void);
int cli_doc_checkpoint(void);
int cli_doc_control(void);
/* airlock's own: sandbox (main.c adds the command list). */
void cli_doc_sandbox(struct cli_doc *ret);

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The vault file as the operator edits it (`airlock vault`): entries are
 * set from standard input (never from the command line, where other users
 * and the shell's history would see them), removed, or listed by name.
 * The file is rewritten whole, atomically, root's and 0600, and every
 * value read or written is wiped from memory afterwards.
 */
#pragma once

#include <stdio.h>

#include "common/error.h"

int ctl_vault_set_stdin(const char *path, const char *name, struct al_error *err);
int ctl_vault_remove(const char *path, const char *name, struct al_error *err);
/* The names, one per line. */
int ctl_vault_list(const char *path, FILE *out, struct al_error *err);
/* Calls fn with every entry (for redaction; the value is wiped after the
 * call). No file: nothing. */
int ctl_vault_each(const char *path,
		   int (*fn)(const char *name, const char *value, size_t len, void *ud), void *ud,
		   struct al_error *err);

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to src/control/db.c and its unit tests.
 */
#pragma once

#include "control/db.h"

/*
 * For the crash tests: fn runs in every write transaction after its last
 * statement and just before its COMMIT (NULL: none). A test that kills
 * the process from there shows that a transaction cut short leaves
 * nothing behind.
 */
void ctl_db_set_commit_hook(struct ctl_db *db, void (*fn)(void *ud), void *ud);

/* SPDX-License-Identifier: Apache-2.0 */
/* The libFuzzer entry point each driver defines; replay_main.c calls it. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of a driver: a violation aborts, naming the check, so the
 * fuzzer keeps the input. */
#define check(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                 \
		}                                                                                \
	} while (0)

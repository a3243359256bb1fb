/* SPDX-License-Identifier: Apache-2.0 */
/* The libFuzzer entry point each driver defines; replay_main.c calls it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Strict number parsing for command-line flags and configuration. Unlike
 * strtoul and friends these accept no leading whitespace, no sign where
 * none makes sense, no base prefixes and no trailing junk, and they do not
 * depend on the locale. Errors: -EINVAL for anything that is not a number
 * of the expected form (including NULL and ""), -ERANGE for a well-formed
 * number that does not fit. *ret is written only on success.
 */
#pragma once

#include <stdint.h>

/* Decimal digits only: "0", "42", "007". */
int parse_u64(const char *s, uint64_t *ret);
/* Decimal, or hexadecimal after "0x" or "0X" ("0x60000000"): ids that
 * are written in hex. */
int parse_u64_dec_hex(const char *s, uint64_t *ret);

/*
 * For numbers inside a larger text (a /proc file, a record): the decimal
 * digits at the start of s (at least one; an optional '-' first for the
 * signed form), with *ret_end set just past them. The caller checks what
 * follows.
 */
int parse_u64_prefix(const char *s, uint64_t *ret, const char **ret_end);
int parse_i64_prefix(const char *s, int64_t *ret, const char **ret_end);

/* An optional '-' and decimal digits, within [min, max]. */
int parse_int_range(const char *s, int min, int max, int *ret);

/*
 * A byte count: digits, then optionally one of K, M, G, T (binary
 * multiples of 1024), each optionally followed by "B" or "iB"; a bare "B"
 * means bytes. The suffix is case-insensitive: "512M", "2GiB", "4kb",
 * "1048576", "100B". Refused: "", "-1", "1.5G", "12X", "1 G".
 */
int parse_size(const char *s, uint64_t *ret);

/*
 * A duration in milliseconds: digits, then optionally "ms", "s", "m", "h"
 * or "d" (lower case only). A plain number means seconds: "30" = 30000.
 */
int parse_duration(const char *s, uint64_t *ret_msec);

/*
 * A decimal fraction "-?[0-9]+(\.[0-9]+)?" within [min, max], parsed the
 * same way whatever the locale. No exponent, hex, "inf" or "nan".
 */
int parse_double_range(const char *s, double min, double max, double *ret);

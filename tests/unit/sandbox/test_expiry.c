/* SPDX-License-Identifier: Apache-2.0 */
/* The expiry file of a sandbox made with --ttl or --idle: written and read
 * back, and nothing else read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fdutil.h"
#include "sandbox/proc.h"

static const struct sbx_expiry good = {
	.ttl_ms = 7200000, .idle_ms = 300000, .created_ms = 1764700000123, .boot_ms = 5010745
};
static const char good_text[] = "ttl_ms=7200000\nidle_ms=300000\ncreated_ms=1764700000123\n"
				"boot_ms=5010745\n";

static void test_format_and_parse(void **state)
{
	char buf[SBX_EXPIRY_FILE_MAX];
	assert_int_equal(sbx_expiry_format(&good, buf, sizeof(buf)), (int)strlen(good_text));
	assert_string_equal(buf, good_text);
	struct sbx_expiry e;
	assert_int_equal(sbx_expiry_parse(good_text, strlen(good_text), &e), 0);
	assert_memory_equal(&e, &good, sizeof(e));
	/* One limit alone. */
	static const char ttl_only[] = "ttl_ms=1000\nidle_ms=0\ncreated_ms=1\nboot_ms=1\n";
	assert_int_equal(sbx_expiry_parse(ttl_only, strlen(ttl_only), &e), 0);
	assert_true(e.ttl_ms == 1000 && e.idle_ms == 0);
	/* Out of range: not written. */
	struct sbx_expiry bad = good;
	bad.ttl_ms = 999;
	assert_int_equal(sbx_expiry_format(&bad, buf, sizeof(buf)), -EINVAL);
	bad = good;
	bad.ttl_ms = 0, bad.idle_ms = 0;
	assert_int_equal(sbx_expiry_format(&bad, buf, sizeof(buf)), -EINVAL);
	bad = good;
	bad.idle_ms = SBX_EXPIRY_MAX_MS + 1;
	assert_int_equal(sbx_expiry_format(&bad, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(sbx_expiry_format(&good, buf, 10), -ENOBUFS);
}

static void test_parse_refuses_all_else(void **state)
{
	static const char *const bad[] = {
		"",
		"ttl_ms=7200000\nidle_ms=300000\ncreated_ms=1764700000123\n", /* a key missing */
		"ttl_ms=7200000\nidle_ms=300000\ncreated_ms=1764700000123\nboot_ms=5010745",
		"idle_ms=300000\nttl_ms=7200000\ncreated_ms=1764700000123\nboot_ms=5010745\n",
		"ttl_ms=7200000\nttl_ms=7200000\nidle_ms=300000\ncreated_ms=1\nboot_ms=1\n",
		"ttl_ms=07200000\nidle_ms=300000\ncreated_ms=1764700000123\nboot_ms=5010745\n",
		"ttl_ms=+7200000\nidle_ms=300000\ncreated_ms=1764700000123\nboot_ms=5010745\n",
		"ttl_ms=-1\nidle_ms=300000\ncreated_ms=1764700000123\nboot_ms=5010745\n",
		"ttl_ms= 7200000\nidle_ms=300000\ncreated_ms=1764700000123\nboot_ms=5010745\n",
		"ttl_ms=7200000\r\nidle_ms=300000\ncreated_ms=1764700000123\nboot_ms=5010745\n",
		"ttl_ms=7200000\nidle_ms=300000\ncreated_ms=1764700000123\nboot_ms=5010745\nx=1\n",
		"ttl_ms=7200000\nidle_ms=300000\ncreated_ms=1764700000123\nboot_ms=5010745\n\n",
		"ttl_ms=0\nidle_ms=0\ncreated_ms=1764700000123\nboot_ms=5010745\n",   /* no limit */
		"ttl_ms=500\nidle_ms=0\ncreated_ms=1764700000123\nboot_ms=5010745\n", /* too short */
		"ttl_ms=31536000001\nidle_ms=0\ncreated_ms=1\nboot_ms=1\n",	      /* > 365d */
		"ttl_ms=1000\nidle_ms=0\ncreated_ms=0\nboot_ms=1\n",
		"ttl_ms=1000\nidle_ms=0\ncreated_ms=9223372036854775808\nboot_ms=1\n",
		"ttl_ms=1000\nidle_ms=0\ncreated_ms=1\nboot_ms=0\n",
		"ttl_ms=18446744073709551616\nidle_ms=0\ncreated_ms=1\nboot_ms=1\n",
		"TTL_MS=1000\nidle_ms=0\ncreated_ms=1\nboot_ms=1\n",
		"ttl_ms:1000\nidle_ms=0\ncreated_ms=1\nboot_ms=1\n",
	};
	struct sbx_expiry e = { .ttl_ms = 42 };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (sbx_expiry_parse(bad[i], strlen(bad[i]), &e) != -EBADMSG)
			fail_msg("accepted: %s", bad[i]);
		assert_int_equal(e.ttl_ms, 42); /* untouched on failure */
	}
	/* A NUL inside, and a file too long to be ours. */
	char nul[sizeof(good_text)];
	memcpy(nul, good_text, sizeof(good_text));
	nul[3] = '\0';
	assert_int_equal(sbx_expiry_parse(nul, strlen(good_text), &e), -EBADMSG);
	char big[SBX_EXPIRY_FILE_MAX + 8];
	memset(big, '1', sizeof(big));
	assert_int_equal(sbx_expiry_parse(big, sizeof(big), &e), -EBADMSG);
}

static void test_write_read(void **state)
{
	struct sbx_paths p = { 0 };
	snprintf(p.dir, sizeof(p.dir), "/tmp/airlock-unit-XXXXXX");
	assert_non_null(mkdtemp(p.dir));
	struct sbx_expiry e;
	assert_int_equal(sbx_expiry_read(&p, &e), -ENOENT);
	assert_int_equal(sbx_expiry_write(&p, &good), 0);
	assert_int_equal(sbx_expiry_read(&p, &e), 0);
	assert_memory_equal(&e, &good, sizeof(e));
	char path[SBX_PATH_MAX + 16], tmp[SBX_PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/expiry", p.dir);
	snprintf(tmp, sizeof(tmp), "%s/expiry.tmp", p.dir);
	assert_int_equal(access(tmp, F_OK), -1); /* renamed into place */
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	/* Damaged: said so, not taken as "no expiry". */
	assert_int_equal(write_file_at(AT_FDCWD, path, "ttl_ms=1\n"), 0);
	assert_int_equal(sbx_expiry_read(&p, &e), -EBADMSG);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkdir(path, 0700), 0); /* not a file */
	assert_int_equal(sbx_expiry_read(&p, &e), -EBADMSG);
	sbx_rm_rf(p.dir);
}

static void test_duration_format(void **state)
{
	static const struct {
		uint64_t ms;
		const char *text;
	} cases[] = { { 1000, "1s" },	       { 2000, "2s" },	    { 90000, "90s" },
		      { 300000, "5m" },	       { 3600000, "1h" },   { 5400000, "90m" },
		      { 86400000, "1d" },      { 1500, "1500ms" },  { 0, "0ms" },
		      { 31536000000, "365d" }, { 3601000, "3601s" } };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[32];
		sbx_duration_format(cases[i].ms, out, sizeof(out));
		assert_string_equal(out, cases[i].text);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_and_parse),
		cmocka_unit_test(test_parse_refuses_all_else),
		cmocka_unit_test(test_write_read),
		cmocka_unit_test(test_duration_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

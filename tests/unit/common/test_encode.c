/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "common/encode.h"

static void check_base64(const char *in, const char *want)
{
	char out[64];
	assert_int_equal(enc_base64_len(strlen(in)), strlen(want));
	enc_base64(in, strlen(in), out);
	assert_string_equal(out, want);
}

/* RFC 4648 section 10, and the Basic pair the gateway writes. */
static void test_base64_vectors(void **state)
{
	check_base64("", "");
	check_base64("f", "Zg==");
	check_base64("fo", "Zm8=");
	check_base64("foo", "Zm9v");
	check_base64("foob", "Zm9vYg==");
	check_base64("fooba", "Zm9vYmE=");
	check_base64("foobar", "Zm9vYmFy");
	check_base64("x-access-token:ghp_secret", "eC1hY2Nlc3MtdG9rZW46Z2hwX3NlY3JldA==");
	unsigned char bin[3] = { 0xfb, 0xff, 0xbf };
	char out[8];
	enc_base64(bin, 3, out);
	assert_string_equal(out, "+/+/");
	assert_true(enc_base64_len(SIZE_MAX) == SIZE_MAX);
}

static void test_hex(void **state)
{
	unsigned char in[] = { 0x00, 0x01, 0xab, 0xff };
	char out[9];
	enc_hex(in, sizeof(in), out);
	assert_string_equal(out, "0001abff");
	unsigned char back[4];
	assert_int_equal(enc_unhex("0001ABff", 8, back, 4), 0);
	assert_memory_equal(back, in, 4);
	assert_int_equal(enc_unhex("0001abf", 7, back, 4), -EINVAL);
	assert_int_equal(enc_unhex("0001abfg", 8, back, 4), -EINVAL);
	assert_int_equal(enc_unhex(" 001abff", 8, back, 4), -EINVAL);
	assert_int_equal(enc_hex_value('a'), 10);
	assert_int_equal(enc_hex_value('F'), 15);
	assert_int_equal(enc_hex_value('g'), -1);
	assert_int_equal(enc_hex_value('\0'), -1);
}

static void test_percent(void **state)
{
	const char in[] = "a b/c~d_e.f-g+h%\xff";
	char out[64];
	size_t n = enc_percent_len(in, strlen(in));
	enc_percent(in, strlen(in), false, out);
	assert_string_equal(out, "a%20b%2Fc~d_e.f-g%2Bh%25%FF");
	assert_int_equal(n, strlen(out));
	enc_percent(in, strlen(in), true, out);
	assert_string_equal(out, "a%20b%2fc~d_e.f-g%2bh%25%ff");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_base64_vectors),
		cmocka_unit_test(test_hex),
		cmocka_unit_test(test_percent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

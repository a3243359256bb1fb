/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/strview.h"

static void test_append_and_terminate(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(100);
	assert_null(b.data);
	assert_int_equal(buf_append(&b, "abc", 3), 0);
	assert_int_equal(b.len, 3);
	assert_string_equal(b.data, "abc");
	assert_int_equal(buf_append_str(&b, "def"), 0);
	assert_int_equal(buf_append_char(&b, '!'), 0);
	assert_string_equal(b.data, "abcdef!");
	assert_int_equal(b.len, 7);
	assert_true(b.cap >= b.len + 1);
	/* Zero bytes is fine, even with a NULL pointer. */
	assert_int_equal(buf_append(&b, NULL, 0), 0);
	assert_int_equal(b.len, 7);
}

static void test_max_is_exact(void **state)
{
	struct buf b;
	buf_init(&b, 10);
	assert_int_equal(buf_append(&b, "0123456789", 10), 0);
	assert_int_equal(b.len, 10);
	/* One more byte is refused and changes nothing. */
	assert_int_equal(buf_append(&b, "x", 1), -ENOBUFS);
	assert_int_equal(b.len, 10);
	assert_string_equal(b.data, "0123456789");
	/* Never allocated more than the maximum can use. */
	assert_true(b.cap <= 11);
	buf_free(&b);
	assert_null(b.data);
	assert_int_equal(b.max, 10);
}

static void test_zero_max(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(0);
	assert_int_equal(buf_append(&b, "x", 1), -ENOBUFS);
	assert_int_equal(buf_append(&b, "", 0), 0);
	assert_non_null(b.data);
	assert_string_equal(b.data, "");
}

static void test_overflow(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(SIZE_MAX);
	assert_int_equal(buf_append(&b, "abc", 3), 0);
	/* len + n wraps around: must be refused, not turned into a small
	 * allocation followed by a huge copy. */
	assert_int_equal(buf_append(&b, "x", SIZE_MAX - 1), -ENOBUFS);
	assert_int_equal(buf_reserve(&b, SIZE_MAX), -ENOBUFS);
	/* len + n == SIZE_MAX fits the max but not the terminator. */
	assert_int_equal(buf_reserve(&b, SIZE_MAX - 3), -ENOBUFS);
	assert_int_equal(b.len, 3);
	assert_string_equal(b.data, "abc");
}

static void test_appendf(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(1000);
	assert_int_equal(buf_appendf(&b, "%d-%s", 42, "x"), 0);
	assert_string_equal(b.data, "42-x");
	/* Larger than the first allocation: takes the grow-and-retry path. */
	char big[300];
	memset(big, 'y', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(buf_appendf(&b, "[%s]", big), 0);
	assert_int_equal(b.len, 4 + 2 + 299);
	assert_int_equal(b.data[b.len], '\0');
	assert_int_equal(b.data[5], 'y');
	assert_int_equal(b.data[b.len - 1], ']');
	assert_int_equal(buf_appendf(&b, "%s", ""), 0);
	assert_int_equal(b.len, 305);
}

static void test_appendf_bounded(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(8);
	assert_int_equal(buf_appendf(&b, "%s", "abcd"), 0);
	/* Fits in the allocation (64 bytes) but not the maximum. */
	assert_int_equal(buf_appendf(&b, "%s", "efghi"), -ENOBUFS);
	assert_int_equal(b.len, 4);
	assert_string_equal(b.data, "abcd");
	assert_int_equal(buf_appendf(&b, "%s", "efgh"), 0);
	assert_string_equal(b.data, "abcdefgh");
	assert_int_equal(buf_appendf(&b, "%c", 'z'), -ENOBUFS);
	assert_string_equal(b.data, "abcdefgh");
}

static void test_appendf_bounded_when_growing(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(100);
	char big[200];
	memset(big, 'q', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(buf_append_str(&b, "keep"), 0);
	assert_int_equal(buf_appendf(&b, "%s", big), -ENOBUFS);
	assert_string_equal(b.data, "keep");
	assert_int_equal(b.len, 4);
}

static void test_reset_truncate_steal(void **state)
{
	struct buf b = BUF_INIT(64);
	assert_int_equal(buf_append_str(&b, "hello world"), 0);
	size_t cap = b.cap;
	buf_truncate(&b, 5);
	assert_string_equal(b.data, "hello");
	buf_truncate(&b, 50); /* longer: no-op */
	assert_int_equal(b.len, 5);
	buf_reset(&b);
	assert_int_equal(b.len, 0);
	assert_string_equal(b.data, "");
	assert_int_equal(b.cap, cap);

	assert_int_equal(buf_append_str(&b, "taken"), 0);
	char *s = NULL;
	size_t len = 0;
	assert_int_equal(buf_steal(&b, &s, &len), 0);
	assert_string_equal(s, "taken");
	assert_int_equal(len, 5);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	free(s);

	/* Nothing appended: still a string the caller can free. */
	assert_int_equal(buf_steal(&b, &s, NULL), 0);
	assert_non_null(s);
	assert_string_equal(s, "");
	free(s);
	buf_free(&b);
	buf_free(NULL);
}

static void test_binary_content(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(16);
	assert_int_equal(buf_append(&b, "a\0b", 3), 0);
	assert_int_equal(b.len, 3);
	assert_memory_equal(b.data, "a\0b\0", 4);
}

static void test_strview(void **state)
{
	struct sv s = sv_from_cstr("  Hello, World\t\n");
	struct sv t = sv_trim(s);
	assert_true(sv_equal_cstr(t, "Hello, World"));
	assert_true(sv_equal_ci(t, SV_LIT("hello, WORLD")));
	assert_false(sv_equal_ci(t, SV_LIT("hello, WORLDS")));
	assert_false(sv_equal(t, SV_LIT("hello, world")));
	assert_true(sv_starts_with(t, SV_LIT("Hello")));
	assert_false(sv_starts_with(t, SV_LIT("World")));
	assert_true(sv_ends_with(t, SV_LIT("World")));
	assert_true(sv_ends_with(t, SV_LIT("")));
	assert_false(sv_ends_with(SV_LIT("ld"), SV_LIT("World")));
	size_t i = 99;
	assert_true(sv_find_char(t, ',', &i));
	assert_int_equal(i, 5);
	assert_false(sv_find_char(t, '#', &i));
	assert_int_equal(i, 5);

	struct sv list = SV_LIT("a,b,,c");
	const char *want[] = { "a", "b", "", "c" };
	for (size_t k = 0; k < 4; k++)
		assert_true(sv_equal_cstr(sv_chop(&list, ','), want[k]));
	assert_true(sv_is_empty(list));
	assert_true(sv_is_empty(sv_chop(&list, ',')));

	/* Empty and NULL views are harmless everywhere. */
	struct sv empty = sv_from_cstr(NULL);
	assert_true(sv_is_empty(sv_trim(empty)));
	assert_true(sv_equal(empty, sv_make(NULL, 0)));
	assert_true(sv_starts_with(empty, sv_make(NULL, 0)));
	assert_true(sv_is_empty(sv_skip(sv_make(NULL, 0), 3)));
	assert_true(sv_equal_cstr(sv_head(SV_LIT("abc"), 10), "abc"));
	assert_true(sv_equal_cstr(sv_skip(SV_LIT("abc"), 1), "bc"));
	/* Only ASCII letters fold: 0xC4 and 0xE4 stay different. */
	assert_false(sv_equal_ci(SV_LIT("\xc4"), SV_LIT("\xe4")));
	assert_true(sv_equal_cstr(sv_trim(SV_LIT("\xa0x\xa0")), "\xa0x\xa0"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_append_and_terminate),
		cmocka_unit_test(test_max_is_exact),
		cmocka_unit_test(test_zero_max),
		cmocka_unit_test(test_overflow),
		cmocka_unit_test(test_appendf),
		cmocka_unit_test(test_appendf_bounded),
		cmocka_unit_test(test_appendf_bounded_when_growing),
		cmocka_unit_test(test_reset_truncate_steal),
		cmocka_unit_test(test_binary_content),
		cmocka_unit_test(test_strview),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

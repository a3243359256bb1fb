/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "store/chunker.h"

#define MIB (1024u * 1024)

/* splitmix64: fast, and the same bytes on every run. */
static void fill_random(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i < n; i += 8) {
		s += UINT64_C(0x9E3779B97F4A7C15);
		uint64_t z = s;
		z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
		z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
		z ^= z >> 31;
		size_t k = n - i < 8 ? n - i : 8;
		memcpy(p + i, &z, k);
	}
}

static unsigned char *random_buffer(size_t n, uint64_t seed)
{
	unsigned char *p = malloc(n);
	assert_non_null(p);
	fill_random(p, n, seed);
	return p;
}

/* Cuts p[0..n) into chunks, the whole buffer available at once; returns
 * the chunk lengths (malloc'd) and their count. */
static size_t *cut_whole(const unsigned char *p, size_t n, size_t *ret_count)
{
	size_t cap = n / ST_CDC_MIN + 2, count = 0, off = 0;
	size_t *lens = calloc(cap, sizeof(*lens));
	assert_non_null(lens);
	while (off < n) {
		size_t c = st_cdc_cut(p + off, n - off, true);
		assert_true(c > 0);
		assert_true(c <= n - off);
		assert_true(c <= ST_CDC_MAX);
		assert_true(count < cap);
		lens[count++] = c;
		off += c;
	}
	*ret_count = count;
	return lens;
}

static void test_small_inputs(void **state)
{
	unsigned char *p = random_buffer(ST_CDC_MIN + 1, 1);
	assert_int_equal(st_cdc_cut(p, 0, true), 0);
	assert_int_equal(st_cdc_cut(p, 1, true), 1);
	assert_int_equal(st_cdc_cut(p, 1, false), 0);
	assert_int_equal(st_cdc_cut(p, ST_CDC_MIN, true), ST_CDC_MIN);
	assert_int_equal(st_cdc_cut(p, ST_CDC_MIN, false), 0);
	/* One byte past the minimum: a cut there would be a 1-in-a-million
	 * coincidence of the hash; with this seed there is none. */
	assert_int_equal(st_cdc_cut(p, ST_CDC_MIN + 1, true), ST_CDC_MIN + 1);
	free(p);
}

static void test_never_past_max(void **state)
{
	/* Constant bytes drive the gear hash to a fixed point: either it cuts
	 * everywhere (at ST_CDC_MIN + a little) or nowhere (at ST_CDC_MAX). */
	size_t n = 3 * ST_CDC_MAX + 17;
	unsigned char *p = calloc(n, 1);
	assert_non_null(p);
	size_t count;
	size_t *lens = cut_whole(p, n, &count);
	for (size_t i = 0; i + 1 < count; i++) {
		assert_true(lens[i] >= ST_CDC_MIN);
		assert_true(lens[i] <= ST_CDC_MAX);
	}
	size_t first = st_cdc_cut(p, ST_CDC_MAX - 1, false);
	if (lens[0] == ST_CDC_MAX)
		assert_int_equal(first, 0); /* needs more bytes */
	else
		assert_int_equal(first, lens[0]);
	assert_true(st_cdc_cut(p, n, false) > 0); /* a full window always cuts */
	free(lens);
	free(p);
}

static void test_deterministic_bounded_average(void **state)
{
	size_t n = 64 * MIB;
	unsigned char *p = random_buffer(n, 42);
	size_t c1, c2;
	size_t *a = cut_whole(p, n, &c1);
	size_t *b = cut_whole(p, n, &c2);
	assert_int_equal(c1, c2);
	assert_memory_equal(a, b, c1 * sizeof(*a));
	size_t total = 0;
	for (size_t i = 0; i < c1; i++) {
		if (i + 1 < c1) {
			assert_true(a[i] >= ST_CDC_MIN);
			assert_true(a[i] <= ST_CDC_MAX);
		}
		total += a[i];
	}
	assert_int_equal(total, n);
	double avg = (double)n / (double)c1;
	print_message("# %zu chunks, average %.0f bytes (target %u)\n", c1, avg, ST_CDC_AVG);
	assert_true(avg >= 0.7 * ST_CDC_AVG && avg <= 1.3 * ST_CDC_AVG);
	free(a);
	free(b);
	free(p);
}

static void test_incremental_same_cuts(void **state)
{
	size_t n = 64 * MIB;
	unsigned char *p = random_buffer(n, 7);
	size_t count;
	size_t *whole = cut_whole(p, n, &count);

	/* A reader that has only `avail` bytes of the stream so far, getting
	 * more in uneven steps, sees eof only once it has everything. */
	uint64_t rng = 12345;
	size_t off = 0, avail = 0, k = 0;
	while (off < n) {
		rng = rng * UINT64_C(6364136223846793005) + 1442695040888963407u;
		size_t step = 1 + (size_t)((rng >> 33) % (300u * 1024));
		avail = n - avail < step ? n : avail + step;
		for (;;) {
			bool eof = avail == n;
			size_t c = st_cdc_cut(p + off, avail - off, eof);
			if (c == 0) {
				assert_false(eof && avail > off);
				assert_true(avail - off < ST_CDC_MAX);
				break;
			}
			assert_true(k < count);
			assert_int_equal(c, whole[k]);
			k++;
			off += c;
			if (off == n)
				break;
		}
	}
	assert_int_equal(k, count);
	free(whole);
	free(p);
}

static int cmp_digest(const void *a, const void *b)
{
	return memcmp(a, b, SHA256_DIGEST_LENGTH);
}

static unsigned char *chunk_hashes(const unsigned char *p, size_t n, size_t *ret_count)
{
	size_t count;
	size_t *lens = cut_whole(p, n, &count);
	unsigned char *h = malloc(count * SHA256_DIGEST_LENGTH);
	assert_non_null(h);
	size_t off = 0;
	for (size_t i = 0; i < count; i++) {
		SHA256(p + off, lens[i], h + i * SHA256_DIGEST_LENGTH);
		off += lens[i];
	}
	qsort(h, count, SHA256_DIGEST_LENGTH, cmp_digest);
	free(lens);
	*ret_count = count;
	return h;
}

static void test_insert_changes_few_chunks(void **state)
{
	size_t n = 16 * MIB, ins = 100, mid = n / 2 + 12345;
	unsigned char *p = random_buffer(n, 99);
	unsigned char *q = malloc(n + ins);
	assert_non_null(q);
	memcpy(q, p, mid);
	fill_random(q + mid, ins, 5);
	memcpy(q + mid + ins, p + mid, n - mid);

	size_t ca, cb;
	unsigned char *ha = chunk_hashes(p, n, &ca);
	unsigned char *hb = chunk_hashes(q, n + ins, &cb);
	size_t fresh = 0;
	for (size_t i = 0; i < cb; i++)
		if (!bsearch(hb + i * SHA256_DIGEST_LENGTH, ha, ca, SHA256_DIGEST_LENGTH,
			     cmp_digest))
			fresh++;
	print_message("# %zu of %zu chunks new after inserting %zu bytes\n", fresh, cb, ins);
	assert_true(fresh >= 1);
	assert_true(fresh <= 3);
	free(ha);
	free(hb);
	free(q);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_inputs),
		cmocka_unit_test(test_never_past_max),
		cmocka_unit_test(test_deterministic_bounded_average),
		cmocka_unit_test(test_incremental_same_cuts),
		cmocka_unit_test(test_insert_changes_few_chunks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

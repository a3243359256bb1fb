/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>

#include "common/encode.h"

const char enc_hex_lower[17] = "0123456789abcdef";
const char enc_hex_upper[17] = "0123456789ABCDEF";

int enc_hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool enc_is_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

int enc_unhex_lower(const char *in, size_t len, void *out, size_t out_size)
{
	if (!enc_is_lower_hex(in, len))
		return -EINVAL;
	return enc_unhex(in, len, out, out_size);
}

void enc_hex(const void *in, size_t n, char *out)
{
	const uint8_t *p = in;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = enc_hex_lower[p[i] >> 4];
		out[2 * i + 1] = enc_hex_lower[p[i] & 15];
	}
	out[2 * n] = '\0';
}

int enc_unhex(const char *in, size_t len, void *out, size_t out_size)
{
	if (out_size > SIZE_MAX / 2 || len != 2 * out_size)
		return -EINVAL;
	uint8_t *o = out;
	for (size_t i = 0; i < out_size; i++) {
		int hi = enc_hex_value(in[2 * i]), lo = enc_hex_value(in[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		o[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

size_t enc_base64_len(size_t n)
{
	size_t groups = n / 3 + (n % 3 != 0);
	if (groups > SIZE_MAX / 4)
		return SIZE_MAX;
	return groups * 4;
}

void enc_base64(const void *in, size_t n, char *out)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const uint8_t *p = in;
	size_t k = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		out[k++] = tab[(v >> 18) & 63];
		out[k++] = tab[(v >> 12) & 63];
		out[k++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		out[k++] = i + 2 < n ? tab[v & 63] : '=';
	}
	out[k] = '\0';
}

static bool unreserved(uint8_t ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
	       ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

size_t enc_percent_len(const void *in, size_t n)
{
	const uint8_t *p = in;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += unreserved(p[i]) ? 1 : 3;
	return k;
}

void enc_percent(const void *in, size_t n, bool lower, char *out)
{
	const uint8_t *p = in;
	const char *digits = lower ? enc_hex_lower : enc_hex_upper;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (unreserved(p[i])) {
			out[k++] = (char)p[i];
		} else {
			out[k++] = '%';
			out[k++] = digits[p[i] >> 4];
			out[k++] = digits[p[i] & 15];
		}
	}
	out[k] = '\0';
}

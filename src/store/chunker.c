/* SPDX-License-Identifier: Apache-2.0 */
/*
 * FastCDC-style content-defined chunking (Xia et al., "FastCDC", USENIX ATC
 * 2016): a gear hash h = (h << 1) + gear[byte] rolls over the data, and a
 * position is a cut point when the bits of h selected by a mask are all
 * zero. Each byte's contribution is shifted out after 64 steps, so the
 * decision at a position depends only on the 64 bytes before it and a cut
 * point survives edits elsewhere.
 *
 * Normalized chunking: below ST_CDC_AVG the mask has 2 bits more than
 * log2(ST_CDC_AVG) (cuts are rare), from there on 2 bits fewer (cuts are
 * frequent), which pulls chunk sizes towards the average. The masks take
 * the top bits of h, the ones that depend on the whole 64-byte window.
 * Nothing is hashed in the first ST_CDC_MIN bytes of a chunk.
 */
#include "store/chunker.h"

#include <stdint.h>

/* Changing any of these changes every cut point, and so every chunk id of
 * every stored file: deduplication against older checkpoints is lost. */
#define CDC_AVG_BITS 18 /* log2(ST_CDC_AVG) */
#define CDC_MASK_STRICT (~UINT64_C(0) << (64 - (CDC_AVG_BITS + 2)))
#define CDC_MASK_LOOSE (~UINT64_C(0) << (64 - (CDC_AVG_BITS - 2)))

_Static_assert(ST_CDC_AVG == 1u << CDC_AVG_BITS, "CDC_AVG_BITS must match ST_CDC_AVG");
_Static_assert(ST_CDC_MIN < ST_CDC_AVG && ST_CDC_AVG < ST_CDC_MAX, "min < avg < max");

/*
 * 256 pseudo-random 64-bit constants: splitmix64 (Steele, Lea, Flood 2014)
 * from the seed 0x61726c6f636b2d67, outputs 1..256. Written out rather than
 * computed at start-up so the table is constant data and cannot change
 * with the code that generates it.
 */
static const uint64_t gear[256] = {
	0x5df25de4358f4a8dull, 0x01c4eab22e3f943eull, 0xf7cc212d7790f7c4ull, 0x9e492f3daaaedc07ull,
	0xeb651af537de9ec2ull, 0x7f4bcd645c740f02ull, 0x3991f2ccb65f5271ull, 0x5bddfd1c7f9b0c2eull,
	0x6dab99b764d6966bull, 0x696595784f080488ull, 0x94405a08ca09a43full, 0x9d1fbc153399971bull,
	0x29a9601c9c8e6bc6ull, 0xce9ccae913246c36ull, 0x0248660c26887edaull, 0x6c75c4336770b7c0ull,
	0x582ce86e9e793e80ull, 0xc9c2e9b5efa8c101ull, 0xee21fe0dfde06126ull, 0x85c2d6a2750eb76aull,
	0x6cfb3bc9a841d7caull, 0xb672bc50f46cd9aaull, 0xbb46fc9c9607fcb6ull, 0x98e9f5cc143db955ull,
	0xa695b6026608226dull, 0x34dc94f6a8f14343ull, 0xff45f57609b4582full, 0x25990f16daa4310eull,
	0x6a9f2b8c94537e24ull, 0xa2e3db9bb56307a6ull, 0x910d0e6d9259848dull, 0xbda216f740b5af8cull,
	0x8312632b0e8e7268ull, 0x110d961ac329cb08ull, 0x9f184a349bf7991eull, 0x4804a800288790b8ull,
	0xc8d345be93d8cc78ull, 0xab79c6cff28c5cedull, 0xc9da681b6513efabull, 0x5564c2509d176000ull,
	0xee3964493ddda79bull, 0x521e78eefcedd22dull, 0xa534fe2013a92046ull, 0x323a518ca6abf7a8ull,
	0xd0a6fda7ab36d246ull, 0x687886581cf54f62ull, 0x15e1b945967ab84cull, 0x8f554cf1d0da95cfull,
	0x4837cefcb173e860ull, 0x48ce83afa05fae74ull, 0xdf188efa59f38298ull, 0x084ae61a0907162dull,
	0xa8ac2ce38a7b2e40ull, 0x066fd2523cda77a6ull, 0x3b9f804621fb3127ull, 0x366e864384c685ddull,
	0x362b9d369f7e7d41ull, 0x9392439c207c95aeull, 0x29ad07c048010136ull, 0x7d901113af2185efull,
	0x5948d1bd00c08d53ull, 0x8bf2a88c2228c9f6ull, 0xbe6972ede7a11943ull, 0x01a7768bfd374b36ull,
	0xf0dfc23f85ae68e1ull, 0x79fa232c5a6e58bdull, 0xaf0ab6e7013bcf6bull, 0xa47165e5b8441cdbull,
	0xc4eceb4496c26202ull, 0x083335999d13234full, 0x5c518b453fc1ee88ull, 0xfe043f20fd90cc6dull,
	0xe21ef058a9b81906ull, 0x52b957a920e6d30dull, 0x3ab4afa8f654219cull, 0x9d27b7c8e167b972ull,
	0xa066f2708978345aull, 0x646048c6bf94bb4full, 0xb57927b3d86c4935ull, 0xaaecdd82628b0fa9ull,
	0xe48f6c61fa0e19f8ull, 0xa9af94b51859caf9ull, 0xccf736529e94a030ull, 0xa267766a0c2f0fedull,
	0x41dc98cc5be9a71aull, 0x05438a5c066f5e28ull, 0x0c34fb58dc033e99ull, 0xaf8080f32b5a6a42ull,
	0xd2307548b2758af9ull, 0xae32dab979adfff8ull, 0x9faec871790f779aull, 0x5b642f42de1af359ull,
	0x5ce3af90d2c673a5ull, 0x795dc57109238e93ull, 0xabba427a384ebd3eull, 0x6ea6628ce7b7c6e2ull,
	0x2bff24ae82e24a1eull, 0xfe02b3771c9bfc73ull, 0xcd4fd64525be3c54ull, 0x6899077eab3d8ef8ull,
	0x5bc5bb2d080fd06dull, 0x9dc626acbd973e09ull, 0x1ac045809a62ae83ull, 0x8b88a6cc5f1e9d8cull,
	0xfe1bc17b97780c6eull, 0x7373343aa44c71b9ull, 0x5c00caf071309250ull, 0xf616dd183f8aa244ull,
	0x45c265de76863aebull, 0x49033c327b583479ull, 0x6785298bffd52865ull, 0x8bee4b8636964455ull,
	0xf5d01527ba7ce975ull, 0x59ebfc1485ea33dbull, 0x73c6cd27f1f8963full, 0x9d9edeb6a4d620f3ull,
	0x6ccde028fb4328efull, 0x9a229148bae43e66ull, 0x15492ba65fbd6f4cull, 0xd6cd982b089568aaull,
	0x8cc6d65f8912ca08ull, 0x868bbb21de4d3aaaull, 0xa7d2e5916a86198bull, 0x88d5d864267ef4e4ull,
	0x690aa6afe1fee296ull, 0x5525184c55dba931ull, 0xc1ddc66da85d2b0bull, 0xb05656aacb96c5d4ull,
	0x86b13bc82cef8ca7ull, 0x6cbc098708e27588ull, 0x3c50ec0d8ba7a34bull, 0x8ad80a84fd1e82a8ull,
	0xf0a48a22b979c1d7ull, 0x5e2274550a572f0bull, 0x96a1488af982691dull, 0xa26c614bdcef67a2ull,
	0x5224c6c16f862e95ull, 0xd7d8ff7cd81ffa5full, 0x29f0a4049ac72c1eull, 0x0090568cee02657dull,
	0xd1763bd61c8ce654ull, 0xfe65976bdf24e572ull, 0x95acf764543a9bf7ull, 0xfb4136601ee78790ull,
	0xc9d6c9abaa40954dull, 0x2b26ce11b96ca747ull, 0xbc6b8716267ce5e8ull, 0x393ac142bc6bd66full,
	0xd33ee0f1df0bfe84ull, 0x418cb67729feb04aull, 0xc6fc07bfd9fc7de6ull, 0xfe570b90dca43e56ull,
	0x45be4ccfb1f39b23ull, 0xb26e1e8b8ebd49dcull, 0x4f8da218c9caed83ull, 0x6a3dc797f2c40fa0ull,
	0xe4a4d8403120b1a1ull, 0x5ea99172b9c7c05eull, 0xec740f3896225ec6ull, 0x954348e3dd3b8585ull,
	0xf64736b36c069954ull, 0x5239314b6c1405a5ull, 0xbe15cdf3415c1ec2ull, 0x6abfdeb68e33bd1aull,
	0x96c3cf9f655d4532ull, 0xb458067d4ed17ab4ull, 0x0cc1be1a613ce8efull, 0x60165a309a6260b9ull,
	0xedb77a3ea5c63628ull, 0x91ec6f4303b630e0ull, 0xc62cd0aba33e58ddull, 0xe8a00065868f5dcaull,
	0xb91b6b4247949116ull, 0x3e16c1e51262157full, 0xa103722b5b51e184ull, 0x5b45c3e583a356abull,
	0xad8487d322b7a591ull, 0x49f61a195baef102ull, 0xe732663c19923eebull, 0x0452e0ee01e746c3ull,
	0xc44b909c0b1c786cull, 0x24077938850a6ba6ull, 0xfa22d54336a7248eull, 0x01f9ba339d83bcb3ull,
	0xd6c0e4382de78eb3ull, 0x6213837a445ea485ull, 0xe8416a8ca185487bull, 0x3c09a4448b582ef2ull,
	0x28ec6656b7ad8d48ull, 0x8d10bcc3583b3c0aull, 0x4a29039851589c94ull, 0xd3aeae46bf5aebc0ull,
	0x2033ab99e0d87093ull, 0x280f97e1591b5926ull, 0x78ebbc05eacb25f6ull, 0x34984e048c336bf8ull,
	0x9cbbad113fe414b1ull, 0xb2839dad24eadb32ull, 0xf1c60716077602c4ull, 0x4447dc4f41c21f28ull,
	0xbe94ea5377c6ec0dull, 0xe2321a0cf23973bfull, 0x70c58afba1f936ddull, 0x86b56dabd8dc339full,
	0xbc440e27ded2c48full, 0x6ea5f77a0c93e7edull, 0x8d6bdc3c4e73d74eull, 0x3a9aff729ff85996ull,
	0x86be1ae81fadc48bull, 0xbc669f855862979eull, 0x6e0f631ec502acfeull, 0x7c2b0a4dc635e95bull,
	0x1282abdd4f741628ull, 0x2e8f9b607aeee72bull, 0xc5c0ac4743bd5697ull, 0xfa210406c5c23673ull,
	0xe5c5abea7be1ab57ull, 0xb85d4229130d224cull, 0x072432726f8e1d7dull, 0x124f4e98b17c1b1full,
	0x24d73ed2263cec59ull, 0x0f44d74c0a30f196ull, 0x828034eead6f6bf5ull, 0x24ff77b5f3a08253ull,
	0x41eed7017d063504ull, 0x17298db5be97288dull, 0x1352c8906946bb7full, 0xf5234223c98feb10ull,
	0x894a63a8028d11acull, 0x64d2e5c0a605ae0full, 0x957738cd766ad130ull, 0x00213c552253ea98ull,
	0x5a5e646093268f9full, 0x2666ec49924849caull, 0xf956f38d324e79d2ull, 0x8e2e96e606310fdeull,
	0x81c53719917699f3ull, 0xd97206a8bbb6f9e5ull, 0x47adaddd5bb6c6caull, 0x6c7431f7859ca6bcull,
	0x39691a807e56c6d4ull, 0x6a308ab1ad5f4a03ull, 0x1ca1f2e0c25f4129ull, 0x2b69b27f038c7112ull,
	0xd9554b8b4ba2cc89ull, 0xf62ce5ba4c4bf42dull, 0x0473b9247a31e7f6ull, 0xafb5a080e49c3703ull,
	0xba91ff86d3bb7232ull, 0x0af273eb61e52811ull, 0x5215ca330932ba4dull, 0x2510dc2d2b2153d5ull,
	0xc2be38ce25f4f586ull, 0xc245dc31cfb01ebbull, 0x075b8c2057006e0aull, 0xb0449d8c0a27006full,

};

size_t st_cdc_cut(const unsigned char *p, size_t n, bool eof)
{
	if (n <= ST_CDC_MIN)
		return eof ? n : 0;

	size_t end = n < ST_CDC_MAX ? n : ST_CDC_MAX;
	size_t normal = end < ST_CDC_AVG ? end : ST_CDC_AVG;
	uint64_t h = 0;
	size_t i = ST_CDC_MIN;

	for (; i < normal; i++) {
		h = (h << 1) + gear[p[i]];
		if (!(h & CDC_MASK_STRICT))
			return i + 1;
	}
	for (; i < end; i++) {
		h = (h << 1) + gear[p[i]];
		if (!(h & CDC_MASK_LOOSE))
			return i + 1;
	}
	if (end == ST_CDC_MAX || eof)
		return end;
	return 0;
}

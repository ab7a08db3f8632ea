/* The standard CRC-32 (zlib's, ISA-L's, crcmod's "crc-32") for twlog's compiled kernel (_kernel.pyx).
 *
 * On x86-64 with PCLMULQDQ and SSE4.1 (checked at run time), buffers of 64 bytes or more are folded
 * 64 bytes at a time with carry-less multiplication, as in Intel's white paper "Fast CRC Computation
 * for Generic Polynomials Using PCLMULQDQ Instruction" (2009): the bit-reflected constants k1..k5 and
 * the Barrett reduction are the paper's, as used by Linux (crc32-pclmul) and Chromium's zlib
 * (crc32_simd.c).  The rest (shorter buffers, and the tail under 16 bytes) goes through a
 * slice-by-8 table.  The tests compare it with zlib.crc32 on random data of every length.
 */
#ifndef TWLOG_CRC32_H
#define TWLOG_CRC32_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t twlog_crc_table[8][256];
static int twlog_crc_simd = 0;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TWLOG_HAVE_PCLMUL 1
#include <immintrin.h>

__attribute__((target("sse4.1,pclmul")))
static uint32_t twlog_crc32_pclmul(const uint8_t *buf, size_t len, uint32_t crc)
{
    /* len >= 64 and a multiple of 16; crc is the running (inverted) state, returned likewise. */
    static const uint64_t k1k2[2] __attribute__((aligned(16))) = {0x0154442bd4ULL, 0x01c6e41596ULL};
    static const uint64_t k3k4[2] __attribute__((aligned(16))) = {0x01751997d0ULL, 0x00ccaa009eULL};
    static const uint64_t k5k0[2] __attribute__((aligned(16))) = {0x0163cd6124ULL, 0x0000000000ULL};
    static const uint64_t poly[2] __attribute__((aligned(16))) = {0x01db710641ULL, 0x01f7011641ULL};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    x0 = _mm_load_si128((const __m128i *)k3k4);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64, then Barrett reduction to 32. */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static void twlog_crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        twlog_crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            twlog_crc_table[t][i] = (twlog_crc_table[t - 1][i] >> 8) ^ twlog_crc_table[0][twlog_crc_table[t - 1][i] & 0xff];
#ifdef TWLOG_HAVE_PCLMUL
    __builtin_cpu_init();
    twlog_crc_simd = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

/* Slice-by-8 over the running (inverted) state; little-endian loads. */
static inline uint32_t twlog_crc32_table(uint32_t crc, const uint8_t *p, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 4);
        a ^= crc;
        crc = twlog_crc_table[7][a & 0xff] ^ twlog_crc_table[6][(a >> 8) & 0xff] ^
              twlog_crc_table[5][(a >> 16) & 0xff] ^ twlog_crc_table[4][a >> 24] ^
              twlog_crc_table[3][b & 0xff] ^ twlog_crc_table[2][(b >> 8) & 0xff] ^
              twlog_crc_table[1][(b >> 16) & 0xff] ^ twlog_crc_table[0][b >> 24];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        crc = twlog_crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static inline uint32_t twlog_crc32(const uint8_t *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
#ifdef TWLOG_HAVE_PCLMUL
    if (twlog_crc_simd && n >= 64) {
        size_t chunk = n & ~(size_t)15;
        crc = twlog_crc32_pclmul(p, chunk, crc);
        p += chunk;
        n -= chunk;
    }
#endif
    return ~twlog_crc32_table(crc, p, n);
}

static inline int twlog_crc32_uses_simd(void) { return twlog_crc_simd; }

#endif

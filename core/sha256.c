/* SPDX-License-Identifier: MIT */
/* SHA-256 as specified in FIPS 180-4, sections 4.1.2 (functions), 4.2.2
 * (constants), 5.1.1 (padding), 5.3.3 (initial value) and 6.2.2 (the
 * compression). Names follow the standard so the two can be read side by side. */
#include <string.h>
#include "sha256.h"

#define SCHEDULE_WORDS 64   /* W0..W63: one message schedule word per round */
#define LENGTH_FIELD_BYTES 8  /* padding ends with the message length in bits, 64-bit big-endian */
#define PAD_MARKER 0x80       /* the single '1' bit appended after the message */

/* K0..K63: first 32 bits of the fractional parts of the cube roots of the
 * first 64 primes (FIPS 180-4, 4.2.2). */
static const uint32_t K[SCHEDULE_WORDS] = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* H(0): first 32 bits of the fractional parts of the square roots of the
 * first 8 primes (FIPS 180-4, 5.3.3). */
static const uint32_t H0[8] = {
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }
static uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
static uint32_t maj(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }
static uint32_t big_sigma0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
static uint32_t big_sigma1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
static uint32_t small_sigma0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
static uint32_t small_sigma1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }

/* The standard reads words big-endian, whatever the host's byte order. */
static uint32_t load_be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32(unsigned char *p, uint32_t x) {
  p[0] = (unsigned char)(x >> 24);
  p[1] = (unsigned char)(x >> 16);
  p[2] = (unsigned char)(x >> 8);
  p[3] = (unsigned char)x;
}

/* One application of the compression function to a 512-bit block M(i). */
static void compress(uint32_t h[8], const unsigned char *m) {
  uint32_t w[SCHEDULE_WORDS];
  for (int t = 0; t < 16; t++) w[t] = load_be32(m + 4 * t);
  for (int t = 16; t < SCHEDULE_WORDS; t++)
    w[t] = small_sigma1(w[t - 2]) + w[t - 7] + small_sigma0(w[t - 15]) + w[t - 16];

  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int t = 0; t < SCHEDULE_WORDS; t++) {
    uint32_t t1 = hh + big_sigma1(e) + ch(e, f, g) + K[t] + w[t];
    uint32_t t2 = big_sigma0(a) + maj(a, b, c);
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d;
  h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void fat_sha256_init(fat_sha256_ctx *c) {
  memcpy(c->h, H0, sizeof H0);
  c->total_bytes = 0;
  c->fill = 0;
}

void fat_sha256_update(fat_sha256_ctx *c, const void *data, size_t len) {
  const unsigned char *p = data;
  if (len == 0) return; /* DATA may then be NULL, which memcpy must never see */
  c->total_bytes += len;
  /* Top up a partial block first, then hash whole blocks straight from the
   * caller's buffer, and keep the tail for later. */
  if (c->fill) {
    size_t take = FAT_SHA256_BLOCK_BYTES - c->fill;
    if (take > len) take = len;
    memcpy(c->block + c->fill, p, take);
    c->fill += take;
    p += take;
    len -= take;
    if (c->fill < FAT_SHA256_BLOCK_BYTES) return;
    compress(c->h, c->block);
    c->fill = 0;
  }
  for (; len >= FAT_SHA256_BLOCK_BYTES; p += FAT_SHA256_BLOCK_BYTES, len -= FAT_SHA256_BLOCK_BYTES)
    compress(c->h, p);
  memcpy(c->block, p, len);
  c->fill = len;
}

void fat_sha256_final(fat_sha256_ctx *c, unsigned char digest[FAT_SHA256_DIGEST_BYTES]) {
  uint64_t bits = c->total_bytes * 8;
  /* Padding (5.1.1): a 1 bit, zeros until 8 bytes short of a block boundary,
   * then the length. When the length no longer fits, it goes in an extra block. */
  c->block[c->fill++] = PAD_MARKER;
  if (c->fill > FAT_SHA256_BLOCK_BYTES - LENGTH_FIELD_BYTES) {
    memset(c->block + c->fill, 0, FAT_SHA256_BLOCK_BYTES - c->fill);
    compress(c->h, c->block);
    c->fill = 0;
  }
  memset(c->block + c->fill, 0, FAT_SHA256_BLOCK_BYTES - LENGTH_FIELD_BYTES - c->fill);
  store_be32(c->block + FAT_SHA256_BLOCK_BYTES - 8, (uint32_t)(bits >> 32));
  store_be32(c->block + FAT_SHA256_BLOCK_BYTES - 4, (uint32_t)bits);
  compress(c->h, c->block);
  for (int i = 0; i < 8; i++) store_be32(digest + 4 * i, c->h[i]);
}

void fat_sha256_final_hex(fat_sha256_ctx *c, char out[FAT_SHA256_HEX_CHARS + 1]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char d[FAT_SHA256_DIGEST_BYTES];
  fat_sha256_final(c, d);
  for (int i = 0; i < FAT_SHA256_DIGEST_BYTES; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 0xf];
  }
  out[FAT_SHA256_HEX_CHARS] = '\0';
}

void fat_sha256_hex(const void *data, size_t len, char out[FAT_SHA256_HEX_CHARS + 1]) {
  fat_sha256_ctx c;
  fat_sha256_init(&c);
  fat_sha256_update(&c, data, len);
  fat_sha256_final_hex(&c, out);
}

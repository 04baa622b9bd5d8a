/* SPDX-License-Identifier: MIT */
/* SHA-256 (FIPS 180-4), the one hash fatune uses: variant content hashes,
 * build-cache keys and template hashes are all SHA-256 in lowercase hex.
 * Written here rather than linked so the binary needs no crypto library. */
#ifndef FAT_SHA256_H
#define FAT_SHA256_H
#include <stddef.h>
#include <stdint.h>

#define FAT_SHA256_BLOCK_BYTES 64   /* the message is processed in 512-bit blocks */
#define FAT_SHA256_DIGEST_BYTES 32
#define FAT_SHA256_HEX_CHARS 64     /* hex digest without its terminating NUL */

/* Incremental state: init, any number of updates, then one final. */
typedef struct fat_sha256_ctx {
  uint32_t h[8];                                /* running hash value H(i) */
  uint64_t total_bytes;                         /* message length so far */
  unsigned char block[FAT_SHA256_BLOCK_BYTES];  /* bytes waiting for a full block */
  size_t fill;                                  /* how many of block[] are used */
} fat_sha256_ctx;

void fat_sha256_init(fat_sha256_ctx *c);
void fat_sha256_update(fat_sha256_ctx *c, const void *data, size_t len);
/* Pads, finishes and writes the digest; the context must be re-initialised
 * before it is used again. */
void fat_sha256_final(fat_sha256_ctx *c, unsigned char digest[FAT_SHA256_DIGEST_BYTES]);
/* As fat_sha256_final, as 64 lowercase hex digits and a NUL. */
void fat_sha256_final_hex(fat_sha256_ctx *c, char out[FAT_SHA256_HEX_CHARS + 1]);

/* One-shot: the hex digest of LEN bytes at DATA. */
void fat_sha256_hex(const void *data, size_t len, char out[FAT_SHA256_HEX_CHARS + 1]);
#endif

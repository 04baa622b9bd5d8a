/* SPDX-License-Identifier: MIT */
/* SHA-256 against the FIPS 180-2 appendix vectors, every padding boundary
 * (55/56/63/64/65 bytes: where the length field moves to an extra block), and
 * the incremental API fed in every chunk size against the one-shot digest.
 * Boundary digests were computed with coreutils sha256sum. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sha256.h"
#include "check.h"

/* The hex digest GOT is WANT; WHAT names the input when it is not. */
#define CHECK_HEX(what, got, want) \
  CHECK_WHY(strcmp((got), (want)) == 0, "%s:\n  got  %s\n  want %s", (what), (got), (want))

static void test_standard_vectors(void) {
  static const struct { const char *msg, *digest; } vectors[] = {
    {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
     "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
  };
  for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
    char hex[65];
    fat_sha256_hex(vectors[i].msg, strlen(vectors[i].msg), hex);
    char what[64];
    snprintf(what, sizeof what, "vector %zu (%zu bytes)", i, strlen(vectors[i].msg));
    CHECK_HEX(what, hex, vectors[i].digest);
  }
}

#define MILLION 1000000
static void test_million_a(void) {
  static const char *want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  char *msg = malloc(MILLION);
  if (!msg) {
    CHECK_WHY(msg != NULL, "out of memory for %d bytes", MILLION);
    return;
  }
  memset(msg, 'a', MILLION);
  char hex[65];
  fat_sha256_hex(msg, MILLION, hex);
  CHECK_HEX("one million 'a' (one shot)", hex, want);

  /* 1000 is not a multiple of the block size: every update straddles blocks. */
  fat_sha256_ctx c;
  fat_sha256_init(&c);
  for (int i = 0; i < MILLION / 1000; i++) fat_sha256_update(&c, msg + i * 1000, 1000);
  fat_sha256_final_hex(&c, hex);
  CHECK_HEX("one million 'a' (1000-byte updates)", hex, want);
  free(msg);
}

static void test_padding_boundaries(void) {
  static const struct { size_t len; const char *digest; } cases[] = {
    {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
    {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
    {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
    {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
    {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
    {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
    {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
    {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
  };
  char msg[128];
  memset(msg, 'a', sizeof msg);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char hex[65], what[64];
    fat_sha256_hex(msg, cases[i].len, hex);
    snprintf(what, sizeof what, "%zu x 'a'", cases[i].len);
    CHECK_HEX(what, hex, cases[i].digest);
  }
}

/* Every chunk size from 1 to 130 over a 300-byte message must give the
 * one-shot digest: exercises partial-block top-up, whole-block and tail paths. */
static void test_incremental_matches_one_shot(void) {
  unsigned char msg[300];
  for (size_t i = 0; i < sizeof msg; i++) msg[i] = (unsigned char)(i * 7 + 3);
  char want[65];
  fat_sha256_hex(msg, sizeof msg, want);
  for (size_t chunk = 1; chunk <= 130; chunk++) {
    fat_sha256_ctx c;
    fat_sha256_init(&c);
    for (size_t off = 0; off < sizeof msg; off += chunk) {
      size_t n = sizeof msg - off < chunk ? sizeof msg - off : chunk;
      fat_sha256_update(&c, msg + off, n);
    }
    char hex[65], what[64];
    fat_sha256_final_hex(&c, hex);
    snprintf(what, sizeof what, "300 bytes in chunks of %zu", chunk);
    CHECK_HEX(what, hex, want);
  }
  /* Empty updates change nothing. */
  fat_sha256_ctx c;
  fat_sha256_init(&c);
  fat_sha256_update(&c, "", 0);
  fat_sha256_update(&c, "ab", 2);
  fat_sha256_update(&c, NULL, 0);
  fat_sha256_update(&c, "c", 1);
  char hex[65];
  fat_sha256_final_hex(&c, hex);
  CHECK_HEX("abc with empty updates", hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

int main(void) {
  test_standard_vectors();
  test_million_a();
  test_padding_boundaries();
  test_incremental_matches_one_shot();
  return check_summary("test_sha256");
}

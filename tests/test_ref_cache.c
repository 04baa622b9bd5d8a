/* SPDX-License-Identifier: MIT */
/* Tests of the host cache of fp64 references (tuner/measure/ref_cache.c),
 * which lets every variant of a problem be compared with one computation of
 * each check shape's reference: that a key names its reference exactly
 * (each field of the variant kind, the shape -- a profile's lengths too --
 * and the seed tells two apart), that what was inserted is found with its
 * contents, that the least recently used entry goes first when the slots or
 * the byte budget run out, that an entry above the budget is not kept, and
 * that the byte count stays true through replace, drop and clear; and that
 * an entry kept on the device holds only its host arrays and has its device
 * handles freed, each once, whenever it goes. */
#include <stdint.h>
#include <string.h>
#include "ref_cache.h"
#include "check.h"

static fat_ref_key key_of(int seqlen, uint64_t seed) {
  return (fat_ref_key){.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_CAUSAL,
                       .head_dim = 128,
                       .shape = {FAT_SHAPE_DIMS(1, 2, 2, seqlen, seqlen)},
                       .seed = seed};
}

static void test_key_equal(void) {
  const fat_ref_key a = key_of(1024, 7);
  fat_ref_key b = a;
  CHECK(fat_ref_key_equal(&a, &b));
  /* Every field a reference depends on tells two keys apart. */
  fat_ref_key v[16];
  int n = 0;
  v[n] = a, v[n++].direction = FAT_BWD;
  v[n] = a, v[n++].dtype = FAT_FP16;
  v[n] = a, v[n++].mask = FAT_MASK_NONE;
  v[n] = a, v[n++].head_dim = 64;
  v[n] = a, v[n++].seed = 8;
  v[n] = a, v[n++].shape.batch = 2;
  v[n] = a, v[n++].shape.heads = 4;
  v[n] = a, v[n++].shape.heads_k = 1;
  v[n] = a, v[n++].shape.seqlen_q = 1023;
  v[n] = a, v[n++].shape.seqlen_k = 1025;
  v[n] = a, v[n++].shape.window_left = 256;
  v[n] = a, v[n++].shape.window_right = 3;
  v[n] = a, v[n++].shape.head_dim = 120;
  v[n] = a, v[n++].shape.softcap = 30.0f;
  v[n] = a, v[n++].shape.varlen = 1;
  v[n] = a, v[n].shape.lengths.n = 2, v[n].shape.lengths.v[0] = 5, v[n++].shape.lengths.v[1] = 9;
  for (int i = 0; i < n; i++) CHECK_WHY(!fat_ref_key_equal(&a, &v[i]), "variation %d", i);
  /* Two profiles of the same count differ by a length; past the count nothing counts. */
  fat_ref_key p = v[n - 1], q = v[n - 1];
  q.shape.lengths.v[1] = 10;
  CHECK(!fat_ref_key_equal(&p, &q));
  q.shape.lengths.v[1] = 9;
  q.shape.lengths.v[2] = 77;
  CHECK(fat_ref_key_equal(&p, &q));
}

static void test_find_insert(void) {
  fat_ref_cache c;
  fat_ref_cache_init(&c, 0);
  CHECK(c.budget == FAT_REF_CACHE_BYTES);
  const fat_ref_key k = key_of(100, 1);
  CHECK(fat_ref_cache_find(&c, &k) == NULL);
  CHECK_INT(c.misses, 1);
  fat_ref_entry *e = fat_ref_cache_insert(&c, &k, 1000, 0, 10, 0);
  REQUIRE(e != NULL);
  CHECK_INT(e->bytes, (1000 + 10) * sizeof(double));
  CHECK_INT(c.bytes, e->bytes);
  for (int i = 0; i < 1000; i++) e->ref[0][i] = i * 0.5;
  for (int i = 0; i < 10; i++) e->ref[1][i] = -i;
  const fat_ref_entry *f = fat_ref_cache_find(&c, &k);
  REQUIRE(f != NULL);
  CHECK(f->ref[0][999] == 499.5 && f->ref[1][9] == -9 && f->n_q == 1000 && f->n_rows == 10);
  CHECK_INT(c.hits, 1);
  /* Another seed is another reference. */
  const fat_ref_key other = key_of(100, 2);
  CHECK(fat_ref_cache_find(&c, &other) == NULL);
  /* A backward entry holds three gradients and the rounded O and lse. */
  fat_ref_key kb = k;
  kb.direction = FAT_BWD;
  e = fat_ref_cache_insert(&c, &kb, 1000, 600, 10, 2);
  REQUIRE(e != NULL);
  CHECK(e->ref[0] && e->ref[1] && e->ref[2] && e->o_in && e->lse_in);
  CHECK_INT(e->bytes, (1000 + 2 * 600) * sizeof(double) + 1000 * 2 + 10 * sizeof(float));
  CHECK_INT(fat_ref_entry_bytes(FAT_BWD, 1000, 600, 10, 2), e->bytes);
  /* Inserting a key again replaces its entry, bytes counted once. */
  const size_t before = c.bytes;
  e = fat_ref_cache_insert(&c, &k, 1000, 0, 10, 0);
  REQUIRE(e != NULL);
  CHECK_INT(c.bytes, before);
  fat_ref_cache_drop(&c, &kb);
  CHECK(fat_ref_cache_find(&c, &kb) == NULL);
  CHECK_INT(c.bytes, (1000 + 10) * sizeof(double));
  fat_ref_cache_clear(&c);
  CHECK_INT(c.bytes, 0);
  CHECK(fat_ref_cache_find(&c, &k) == NULL);
out:
  fat_ref_cache_clear(&c);
}

/* More keys than slots: the least recently used goes, the one just found stays. */
static void test_evict_slots(void) {
  fat_ref_cache c;
  fat_ref_cache_init(&c, 0);
  for (int i = 0; i < FAT_REF_CACHE_SLOTS; i++) {
    const fat_ref_key k = key_of(64 + i, 1);
    CHECK(fat_ref_cache_insert(&c, &k, 16, 0, 4, 0) != NULL);
  }
  CHECK_INT(c.evictions, 0);
  const fat_ref_key first = key_of(64, 1), second = key_of(65, 1);
  CHECK(fat_ref_cache_find(&c, &first) != NULL);  /* now the most recent */
  const fat_ref_key extra = key_of(999, 1);
  CHECK(fat_ref_cache_insert(&c, &extra, 16, 0, 4, 0) != NULL);
  CHECK_INT(c.evictions, 1);
  CHECK(fat_ref_cache_find(&c, &first) != NULL);
  CHECK(fat_ref_cache_find(&c, &second) == NULL);  /* the oldest went */
  CHECK(fat_ref_cache_find(&c, &extra) != NULL);
  CHECK_INT(c.bytes, (size_t)FAT_REF_CACHE_SLOTS * (16 + 4) * sizeof(double));
  fat_ref_cache_clear(&c);
}

/* The byte budget: old entries go until a new one fits; one above the
 * whole budget is not kept and evicts nothing. */
static void test_evict_bytes(void) {
  fat_ref_cache c;
  const size_t one = (100 + 1) * sizeof(double);  /* n_q 100, n_rows 1 */
  fat_ref_cache_init(&c, 3 * one);
  const fat_ref_key a = key_of(1, 1), b = key_of(2, 1), d = key_of(3, 1), e = key_of(4, 1);
  CHECK(fat_ref_cache_insert(&c, &a, 100, 0, 1, 0) != NULL);
  CHECK(fat_ref_cache_insert(&c, &b, 100, 0, 1, 0) != NULL);
  CHECK(fat_ref_cache_insert(&c, &d, 100, 0, 1, 0) != NULL);
  CHECK_INT(c.bytes, 3 * one);
  CHECK(fat_ref_cache_find(&c, &a) != NULL);  /* b is now the oldest */
  /* Twice an entry's size: b and then d go. */
  CHECK(fat_ref_cache_insert(&c, &e, 200, 0, 2, 0) != NULL);
  CHECK_INT(c.evictions, 2);
  CHECK(fat_ref_cache_find(&c, &b) == NULL && fat_ref_cache_find(&c, &d) == NULL);
  CHECK(fat_ref_cache_find(&c, &a) != NULL && fat_ref_cache_find(&c, &e) != NULL);
  CHECK_INT(c.bytes, 3 * one);
  /* Above the budget: refused, the others kept. */
  const fat_ref_key huge = key_of(5, 1);
  CHECK(fat_ref_cache_insert(&c, &huge, 1000, 0, 1, 0) == NULL);
  CHECK_INT(c.too_big, 1);
  CHECK(fat_ref_cache_find(&c, &a) != NULL && fat_ref_cache_find(&c, &e) != NULL);
  CHECK_INT(c.bytes, 3 * one);
  /* A budget of one byte keeps nothing (what a check without the cache does). */
  fat_ref_cache_clear(&c);
  fat_ref_cache_init(&c, 1);
  CHECK(fat_ref_cache_insert(&c, &a, 100, 0, 1, 0) == NULL);
  CHECK_INT(c.bytes, 0);
}

/* What the device entries' free function saw. */
static uint64_t freed[64];
static int n_freed;
static void note_free(void *ctx, uint64_t handle) {
  CHECK(ctx == (void *)freed);
  if (n_freed < 64) freed[n_freed++] = handle;
}

static void test_device_entries(void) {
  fat_ref_cache c;
  fat_ref_cache_init(&c, 0);
  const fat_ref_key f = key_of(100, 1);
  fat_ref_key b = key_of(100, 2);
  b.direction = FAT_BWD;
  CHECK(fat_ref_cache_insert_device(&c, &f, 1000, 0, 10, 0, NULL, NULL) == NULL);
  fat_ref_entry *e = fat_ref_cache_insert_device(&c, &f, 1000, 0, 10, 0, note_free, freed);
  REQUIRE(e != NULL);
  /* Forward: lse on the host for the row verdicts, O on the device. */
  CHECK(e->ref[0] == NULL && e->ref[1] != NULL && e->ref[2] == NULL && !e->o_in && !e->lse_in);
  CHECK_INT(e->bytes, fat_ref_entry_bytes(FAT_FWD, 1000, 0, 10, 0));
  e->ref[1][9] = -9;
  e->dev[0] = 0xd0;
  /* Backward: nothing on the host. */
  e = fat_ref_cache_insert_device(&c, &b, 1000, 600, 10, 2, note_free, freed);
  REQUIRE(e != NULL);
  CHECK(!e->ref[0] && !e->ref[1] && !e->ref[2] && !e->o_in && !e->lse_in);
  for (int i = 0; i < FAT_REF_DEV_ARRAYS; i++) e->dev[i] = 0xb0 + (uint64_t)i;
  /* The arrays' sizes the fingerprints read (check.c): together, the entry. */
  size_t sum = 0;
  for (int i = 0; i < FAT_REF_DEV_ARRAYS; i++) sum += fat_ref_dev_bytes(e, i);
  CHECK_INT(sum, e->bytes);
  CHECK_INT(fat_ref_dev_bytes(e, 1), 600 * sizeof(double));
  CHECK_INT(fat_ref_dev_bytes(e, 3), 1000 * 2);
  CHECK_INT(fat_ref_dev_bytes(e, 4), 10 * sizeof(float));
  CHECK_INT(fat_ref_dev_bytes(e, FAT_REF_DEV_ARRAYS), 0);
  CHECK(!strcmp(fat_ref_dev_name(e, 1), "dK") && !strcmp(fat_ref_dev_name(e, 4), "the rounded lse"));
  CHECK_INT(c.bytes, fat_ref_entry_bytes(FAT_FWD, 1000, 0, 10, 0) +
                         fat_ref_entry_bytes(FAT_BWD, 1000, 600, 10, 2));
  const fat_ref_entry *got = fat_ref_cache_find(&c, &f);
  CHECK(got && got->dev[0] == 0xd0 && got->ref[1][9] == -9);
  /* The forward keeps O alone on the device: lse is the host's. */
  CHECK(got && fat_ref_dev_bytes(got, 0) == 1000 * sizeof(double) && fat_ref_dev_bytes(got, 1) == 0);
  CHECK(got && !strcmp(fat_ref_dev_name(got, 0), "O"));
  /* Dropped: its one handle freed; cleared: the other's five. */
  fat_ref_cache_drop(&c, &f);
  CHECK(n_freed == 1 && freed[0] == 0xd0);
  fat_ref_cache_clear(&c);
  CHECK_INT(n_freed, 1 + FAT_REF_DEV_ARRAYS);
  for (int i = 0; i < FAT_REF_DEV_ARRAYS && n_freed == 1 + FAT_REF_DEV_ARRAYS; i++)
    CHECK(freed[1 + i] == 0xb0 + (uint64_t)i);
  CHECK_INT(c.bytes, 0);
  /* Evicted by the budget: freed too, a handle never set (0) never. */
  n_freed = 0;
  fat_ref_cache_init(&c, fat_ref_entry_bytes(FAT_FWD, 1000, 0, 10, 0));
  e = fat_ref_cache_insert_device(&c, &f, 1000, 0, 10, 0, note_free, freed);
  REQUIRE(e != NULL);
  e->dev[0] = 0xd1;
  fat_ref_key g = key_of(100, 3);
  CHECK(fat_ref_cache_insert_device(&c, &g, 1000, 0, 10, 0, note_free, freed) != NULL);
  CHECK(n_freed == 1 && freed[0] == 0xd1);
  fat_ref_cache_clear(&c);
  CHECK_INT(n_freed, 1);
out:
  fat_ref_cache_clear(&c);
}

int main(void) {
  test_key_equal();
  test_find_insert();
  test_evict_slots();
  test_evict_bytes();
  test_device_entries();
  return check_summary("test_ref_cache");
}

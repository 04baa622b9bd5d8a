/* SPDX-License-Identifier: MIT */
/* The host cache of fp64 references (ref_cache.h): a few slots, least
 * recently used out first, under a byte budget. */
#include <stdlib.h>
#include <string.h>
#include "ref_cache.h"

void fat_ref_cache_init(fat_ref_cache *c, size_t budget) {
  memset(c, 0, sizeof *c);
  c->budget = budget ? budget : FAT_REF_CACHE_BYTES;
}

/* At least one byte, so that an empty array is not mistaken for a failure. */
static void *alloc_bytes(size_t n) { return malloc(n ? n : 1); }

static void entry_free(fat_ref_cache *c, int i) {
  fat_ref_entry *e = &c->slots[i];
  for (int k = 0; k < 3; k++) free(e->ref[k]);
  free(e->o_in);
  free(e->lse_in);
  for (int k = 0; k < FAT_REF_DEV_ARRAYS; k++)
    if (e->dev[k] && e->free_dev) e->free_dev(e->dev_ctx, e->dev[k]);
  c->bytes -= e->bytes;
  memset(e, 0, sizeof *e);
  c->filled[i] = 0;
}

void fat_ref_cache_clear(fat_ref_cache *c) {
  for (int i = 0; i < FAT_REF_CACHE_SLOTS; i++)
    if (c->filled[i]) entry_free(c, i);
}

static int shape_equal(const fat_check_shape *a, const fat_check_shape *b) {
  if (a->batch != b->batch || a->heads != b->heads || a->heads_k != b->heads_k ||
      a->seqlen_q != b->seqlen_q || a->seqlen_k != b->seqlen_k ||
      a->window_left != b->window_left || a->window_right != b->window_right ||
      a->head_dim != b->head_dim || a->softcap != b->softcap || a->varlen != b->varlen ||
      a->lengths.n != b->lengths.n || a->page_size != b->page_size ||
      a->descale_per_head != b->descale_per_head)
    return 0;
  for (int i = 0; i < a->lengths.n && i < FAT_VARLEN_MAX; i++)
    if (a->lengths.v[i] != b->lengths.v[i]) return 0;
  return 1;
}

int fat_ref_key_equal(const fat_ref_key *a, const fat_ref_key *b) {
  return a->direction == b->direction && a->dtype == b->dtype && a->mask == b->mask &&
         a->head_dim == b->head_dim && a->seed == b->seed && shape_equal(&a->shape, &b->shape);
}

static int slot_of(const fat_ref_cache *c, const fat_ref_key *key) {
  for (int i = 0; i < FAT_REF_CACHE_SLOTS; i++)
    if (c->filled[i] && fat_ref_key_equal(&c->slots[i].key, key)) return i;
  return -1;
}

const fat_ref_entry *fat_ref_cache_find(fat_ref_cache *c, const fat_ref_key *key) {
  const int i = slot_of(c, key);
  if (i < 0) {
    c->misses++;
    return NULL;
  }
  c->hits++;
  c->slots[i].used = ++c->clock;
  return &c->slots[i];
}

size_t fat_ref_entry_bytes(fat_direction direction, size_t n_q, size_t n_kv, size_t n_rows,
                           size_t elem_bytes) {
  if (direction == FAT_BWD)
    return (n_q + 2 * n_kv) * sizeof(double) + n_q * elem_bytes + n_rows * sizeof(float);
  return (n_q + n_rows) * sizeof(double);
}

size_t fat_ref_dev_bytes(const fat_ref_entry *e, int i) {
  if (e->key.direction != FAT_BWD) return i == 0 ? e->n_q * sizeof(double) : 0;
  switch (i) {
    case 0: return e->n_q * sizeof(double);
    case 1:
    case 2: return e->n_kv * sizeof(double);
    case 3: return e->n_q * e->elem_bytes;
    case 4: return e->n_rows * sizeof(float);
    default: return 0;
  }
}

const char *fat_ref_dev_name(const fat_ref_entry *e, int i) {
  static const char *const bwd[FAT_REF_DEV_ARRAYS] = {"dQ", "dK", "dV", "the rounded O",
                                                      "the rounded lse"};
  if (i < 0 || i >= FAT_REF_DEV_ARRAYS) return "?";
  if (e->key.direction != FAT_BWD) return i == 0 ? "O" : "?";
  return bwd[i];
}

/* The least recently used filled slot, or -1 when none is. */
static int oldest(const fat_ref_cache *c) {
  int best = -1;
  for (int i = 0; i < FAT_REF_CACHE_SLOTS; i++)
    if (c->filled[i] && (best < 0 || c->slots[i].used < c->slots[best].used)) best = i;
  return best;
}

void fat_ref_cache_drop(fat_ref_cache *c, const fat_ref_key *key) {
  const int i = slot_of(c, key);
  if (i >= 0) entry_free(c, i);
}

static fat_ref_entry *insert(fat_ref_cache *c, const fat_ref_key *key, size_t n_q, size_t n_kv,
                             size_t n_rows, size_t elem_bytes, fat_ref_dev_free free_dev,
                             void *ctx) {
  const size_t bytes = fat_ref_entry_bytes(key->direction, n_q, n_kv, n_rows, elem_bytes);
  fat_ref_cache_drop(c, key);
  if (bytes > c->budget) {
    c->too_big++;
    return NULL;
  }
  int slot = -1;
  for (int i = 0; i < FAT_REF_CACHE_SLOTS && slot < 0; i++)
    if (!c->filled[i]) slot = i;
  /* Out with the oldest until there is a slot and room for BYTES. */
  while (slot < 0 || c->bytes + bytes > c->budget) {
    const int i = oldest(c);
    if (i < 0) break;  /* empty, and BYTES fits the budget */
    entry_free(c, i);
    c->evictions++;
    if (slot < 0) slot = i;
  }
  fat_ref_entry *e = &c->slots[slot];
  memset(e, 0, sizeof *e);
  e->key = *key;
  e->n_q = n_q;
  e->n_kv = n_kv;
  e->n_rows = n_rows;
  e->elem_bytes = elem_bytes;
  e->free_dev = free_dev;
  e->dev_ctx = ctx;
  int ok;
  if (free_dev) {  /* on the device but the forward's lse */
    if (key->direction == FAT_FWD) e->ref[1] = alloc_bytes(n_rows * sizeof(double));
    ok = key->direction != FAT_FWD || e->ref[1];
  } else if (key->direction == FAT_BWD) {
    e->ref[0] = alloc_bytes(n_q * sizeof(double));
    e->ref[1] = alloc_bytes(n_kv * sizeof(double));
    e->ref[2] = alloc_bytes(n_kv * sizeof(double));
    e->o_in = alloc_bytes(n_q * elem_bytes);
    e->lse_in = alloc_bytes(n_rows * sizeof(float));
    ok = e->ref[0] && e->ref[1] && e->ref[2] && e->o_in && e->lse_in;
  } else {
    e->ref[0] = alloc_bytes(n_q * sizeof(double));
    e->ref[1] = alloc_bytes(n_rows * sizeof(double));
    ok = e->ref[0] && e->ref[1];
  }
  c->filled[slot] = 1;
  e->bytes = bytes;
  c->bytes += bytes;
  if (!ok) {
    entry_free(c, slot);
    return NULL;
  }
  e->used = ++c->clock;
  return e;
}

fat_ref_entry *fat_ref_cache_insert(fat_ref_cache *c, const fat_ref_key *key, size_t n_q,
                                    size_t n_kv, size_t n_rows, size_t elem_bytes) {
  return insert(c, key, n_q, n_kv, n_rows, elem_bytes, NULL, NULL);
}

fat_ref_entry *fat_ref_cache_insert_device(fat_ref_cache *c, const fat_ref_key *key, size_t n_q,
                                           size_t n_kv, size_t n_rows, size_t elem_bytes,
                                           fat_ref_dev_free free_dev, void *ctx) {
  return free_dev ? insert(c, key, n_q, n_kv, n_rows, elem_bytes, free_dev, ctx) : NULL;
}

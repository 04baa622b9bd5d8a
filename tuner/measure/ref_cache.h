/* SPDX-License-Identifier: MIT */
/* The fp64 references of the check shapes, kept so that the variants of
 * one problem are all compared with one computation of each.
 *
 * A check's inputs are a function of its seed and shape alone
 * (fat_gpu_fill_random), so a reference is a function of the key below: the
 * direction, dtype, mask and template head dim of the variant, the whole
 * check shape and the seed. The tuner hands every variant of a problem the
 * same check seed (fat_eval_job.check_seed), and check.c computes the
 * reference once, before the first variant runs, then refills the inputs
 * from the seed for each variant and compares with the kept arrays: a
 * variant that writes outside its outputs cannot change the inputs the
 * next one is given. Arrays kept on the GPU (below) are not out of its
 * reach: a variant that writes wildly could overwrite one. So each kept
 * array has a fingerprint (dev_sum: templates/fat_util.cu's
 * fat_fingerprint, an exact sum that any changed word changes), taken
 * when the entry is made and compared twice in every check that uses it:
 * before the variant runs -- a mismatch there is an earlier launch's doing
 * (another variant's check or timing), so the entry is dropped and the
 * reference computed afresh, and the variant in hand is judged against
 * that (counted in `damaged`) -- and after it ran, before its outputs are
 * compared -- a mismatch there is this variant's: its check fails ("wrote
 * outside its outputs: the kept reference of dK changed") and the entry is
 * dropped. No variant is judged against a damaged reference.
 *
 * Entries are evicted least recently used first, to stay under a byte
 * budget; one larger than the whole budget is not kept (the check computes
 * its reference as if there were no cache).
 *
 * The worker keeps the large arrays on the GPU, where the check compares
 * them (fat_ref_cache_insert_device): the entry then holds their device
 * pointers as opaque handles and frees them through the caller's function.
 * This file knows nothing of CUDA, and its test runs without a GPU. */
#ifndef FAT_REF_CACHE_H
#define FAT_REF_CACHE_H
#include <stddef.h>
#include <stdint.h>
#include "job.h"
#include "types.h"

#define FAT_REF_CACHE_SLOTS 8                        /* a problem has 3 check shapes */
#define FAT_REF_CACHE_BYTES ((size_t)2 << 30)        /* the default budget: 2 GiB */

typedef struct fat_ref_key {
  fat_direction direction;
  fat_dtype dtype;
  fat_mask mask;
  int head_dim;           /* the template's (the variant's desc.head_dim) */
  fat_check_shape shape;  /* compared field by field, the profile's lengths too */
  uint64_t seed;
} fat_ref_key;

/* What a check compares with. Forward: O and lse (ref[0] n_q doubles,
 * ref[1] n_rows doubles). Backward: dQ, dK, dV (n_q, n_kv, n_kv doubles)
 * and the inputs the reference made for the variant -- O rounded to the
 * dtype (o_in, n_q elements of elem_bytes) and lse in fp32 (lse_in). */
/* Frees device memory HANDLE of an entry kept on the device. */
typedef void (*fat_ref_dev_free)(void *ctx, uint64_t handle);

/* An entry kept on the device (fat_ref_cache_insert_device) holds in DEV
 * what the host entry holds in its arrays, in the same order -- forward:
 * dev[0] O (n_q doubles) and, on the host still, ref[1] lse (n_rows
 * doubles, for the row-by-row verdicts); backward: dev[0..2] dQ, dK, dV
 * (doubles), dev[3] O rounded (n_q elements of elem_bytes), dev[4] lse
 * (n_rows floats), nothing on the host. */
enum { FAT_REF_DEV_ARRAYS = 5 };

typedef struct fat_ref_entry {
  fat_ref_key key;
  size_t n_q, n_kv, n_rows, elem_bytes;
  double *ref[3];
  void *o_in;
  float *lse_in;
  uint64_t dev[FAT_REF_DEV_ARRAYS];  /* 0 where nothing is held */
  uint64_t dev_sum[FAT_REF_DEV_ARRAYS];  /* each dev array's fingerprint, taken when it was made */
  fat_ref_dev_free free_dev;  /* NULL for a host entry */
  void *dev_ctx;
  size_t bytes;           /* of the arrays above, host and device */
  uint64_t used;          /* the cache's clock at the last find or insert */
} fat_ref_entry;

typedef struct fat_ref_cache {
  fat_ref_entry slots[FAT_REF_CACHE_SLOTS];
  int filled[FAT_REF_CACHE_SLOTS];
  size_t budget, bytes;   /* the budget and what the entries hold */
  uint64_t clock;
  unsigned long long hits, misses, evictions, too_big;
  unsigned long long damaged;  /* entries found changed where they were kept, and dropped */
} fat_ref_cache;

/* An empty cache holding at most BUDGET bytes (0: FAT_REF_CACHE_BYTES). */
void fat_ref_cache_init(fat_ref_cache *c, size_t budget);
/* Frees every entry; the cache stays usable (empty). */
void fat_ref_cache_clear(fat_ref_cache *c);

/* 1 when A and B name the same reference. */
int fat_ref_key_equal(const fat_ref_key *a, const fat_ref_key *b);

/* The entry of KEY, or NULL (counted as a miss). */
const fat_ref_entry *fat_ref_cache_find(fat_ref_cache *c, const fat_ref_key *key);

/* A new entry for KEY with its arrays allocated (uninitialised) for a
 * forward (three counts: n_q, n_rows; n_kv unused) or backward reference,
 * evicting the least recently used entries until it fits. NULL when it
 * cannot be kept: larger than the budget, or out of host memory (the
 * check then computes its reference without the cache). An entry of the
 * same key is replaced. The caller fills the arrays; the pointer is valid
 * until the next insert or clear. */
fat_ref_entry *fat_ref_cache_insert(fat_ref_cache *c, const fat_ref_key *key, size_t n_q,
                                    size_t n_kv, size_t n_rows, size_t elem_bytes);

/* The same for an entry whose large arrays the caller keeps on the device:
 * only the host arrays the comment on FAT_REF_DEV_ARRAYS names are
 * allocated; the caller sets DEV's handles, which the cache frees through
 * FREE_DEV(CTX, handle) when the entry goes. The budget counts both. */
fat_ref_entry *fat_ref_cache_insert_device(fat_ref_cache *c, const fat_ref_key *key, size_t n_q,
                                           size_t n_kv, size_t n_rows, size_t elem_bytes,
                                           fat_ref_dev_free free_dev, void *ctx);

/* Drops KEY's entry if there is one (a reference that could not be
 * completed after insert). */
void fat_ref_cache_drop(fat_ref_cache *c, const fat_ref_key *key);

/* The bytes of E's device array I (0 to FAT_REF_DEV_ARRAYS - 1) as the
 * comment on FAT_REF_DEV_ARRAYS lays them out: 0 for one the entry's
 * direction does not keep there. */
size_t fat_ref_dev_bytes(const fat_ref_entry *e, int i);
/* What E's device array I holds, for messages: "O", "dQ", "the rounded O", ... */
const char *fat_ref_dev_name(const fat_ref_entry *e, int i);

/* Bytes an entry of these counts would hold. */
size_t fat_ref_entry_bytes(fat_direction direction, size_t n_q, size_t n_kv, size_t n_rows,
                           size_t elem_bytes);
#endif

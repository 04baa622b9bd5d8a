/* SPDX-License-Identifier: MIT */
/* The built-in default variants, one per (direction, head dim, dtype, mask)
 * and, for the backward, a second one whose gradients are deterministic: the
 * family's fixed configuration that the tuner measures every winner against
 * and that passes on every supported shape. The runtime cannot run the Lua
 * generator, so gen_defaults.c expands them at build time into
 * fatune_defaults.c; the runtime compiles a default's source with NVRTC the
 * first time it is needed (and stores the cubin in the user's database). */
#ifndef FAT_RUNTIME_DEFAULTS_H
#define FAT_RUNTIME_DEFAULTS_H

typedef struct fat_default_variant {
  const char *name;    /* fwd.mma80.fp16.d128.none.m128n64w4s1 */
  int direction;       /* fat_direction */
  int deterministic;   /* backward: 1 when its dQ mode is deterministic (fat_dq_deterministic) */
  const char *family;  /* "mma80" */
  const char *params;  /* canonical parameter list */
  const char *entry;   /* extern "C" kernel symbol */
  const char *hash;    /* sha256 of source, hex */
  int dtype;           /* fat_dtype */
  int mask;            /* fat_mask */
  int head_dim;
  int block_m;         /* grid.x = ceil(seqlen_q / block_m); backward: the key block */
  int threads;         /* per block */
  int smem_bytes;      /* dynamic shared memory per block */
  const char *source;  /* self-contained CUDA C++ */
} fat_default_variant;

extern const fat_default_variant fat_default_variants[];
extern const int fat_n_default_variants;
#endif

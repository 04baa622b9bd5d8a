/* SPDX-License-Identifier: MIT */
/* A fixture tuning database with known winners, for the tests of what
 * prints or exports them (test_summary_json, test_winner_rule): one H200,
 * two forward problems, and on each variants with checks and timings whose
 * winner is plain from the numbers -- a faster variant that failed a check,
 * a materialising baseline that is no candidate, a variant whose latest
 * timing is slower than an earlier one. Header-only, for one test file. */
#ifndef FAT_TESTS_WINNERS_FIXTURE_H
#define FAT_TESTS_WINNERS_FIXTURE_H
#include <stdio.h>
#include <string.h>
#include "db.h"
#include "fat_abi.h"
#include "sha256.h"

/* The fixture's problems, in fat_db_summary's order (by dtype's name). */
enum { FIX_P_BF16 = 0, FIX_P_FP16, FIX_N_PROBLEMS };

typedef struct fixture {
  sqlite3_int64 gpu_id;
  sqlite3_int64 problem_ids[FIX_N_PROBLEMS];
  fat_problem problems[FIX_N_PROBLEMS];
} fixture;

static inline fat_gpu_info fixture_gpu(void) {
  fat_gpu_info g;
  memset(&g, 0, sizeof g);
  snprintf(g.name, sizeof g.name, "NVIDIA H200");
  g.cc_major = 9, g.cc_minor = 0, g.sm_count = 132, g.driver_version = 13000;
  g.nvrtc_major = 13, g.nvrtc_minor = 0;
  g.mem_bytes = 150ull << 30, g.smem_per_block_optin = 232448, g.l2_bytes = 50 << 20;
  g.clock_khz = 1980000, g.mem_clock_khz = 2619000;
  return g;
}

/* One fixture variant: NAME's family and the problem's key. Its source is
 * a stand-in that names it and today's kernel ABI, its hash the source's
 * sha256, as the runtime requires of what it serves. */
typedef struct fixture_variant {
  const char *name, *family, *params;
  int is_default;
  int problem;          /* FIX_P_* */
  int passed;           /* its one check */
  double rel_l2;
  double median_ms[2];  /* its timings in order; 0: none */
} fixture_variant;

/* fp16 d64 none s1024: m64n64's latest timing (0.75) is slower than
 * m128n64's (0.5), though its first (0.25) was the fastest of all: the
 * latest timing counts. bf16 d128 causal s4096: m64n128 (1.0) failed its
 * check, so m128n128 (1.5) wins over the default m128n64 (2.0); the
 * materialising baseline (8.0) is reported, never a candidate. */
static const fixture_variant FIXTURE_VARIANTS[] = {
    {"fwd.mma80.fp16.d64.none.m128n64w4s1", "mma80", "BLOCK_M=128 BLOCK_N=64 STAGES=1 WARPS=4",
     1, FIX_P_FP16, 1, 1e-3, {0.5, 0}},
    {"fwd.mma80.fp16.d64.none.m64n64w4s1", "mma80", "BLOCK_M=64 BLOCK_N=64 STAGES=1 WARPS=4",
     0, FIX_P_FP16, 1, 2e-3, {0.25, 0.75}},
    {"fwd.mma80.bf16.d128.causal.m128n64w4s1", "mma80", "BLOCK_M=128 BLOCK_N=64 STAGES=1 WARPS=4",
     1, FIX_P_BF16, 1, 3e-3, {2.0, 0}},
    {"fwd.mma80.bf16.d128.causal.m128n128w8s2", "mma80",
     "BLOCK_M=128 BLOCK_N=128 STAGES=2 WARPS=8", 0, FIX_P_BF16, 1, 4e-3, {1.5, 0}},
    {"fwd.mma80.bf16.d128.causal.m64n128w4s2", "mma80", "BLOCK_M=64 BLOCK_N=128 STAGES=2 WARPS=4",
     0, FIX_P_BF16, 0, 0.5, {1.0, 0}},
    {"fwd.materialize.bf16.d128.causal", "materialize", "", 0, FIX_P_BF16, 1, 5e-3, {8.0, 0}},
};
#define FIX_N_VARIANTS (sizeof FIXTURE_VARIANTS / sizeof FIXTURE_VARIANTS[0])
/* The winners the numbers give, by problem. */
static const char *const FIXTURE_WINNERS[FIX_N_PROBLEMS] = {
    [FIX_P_BF16] = "fwd.mma80.bf16.d128.causal.m128n128w8s2",
    [FIX_P_FP16] = "fwd.mma80.fp16.d64.none.m128n64w4s1"};

static inline fat_problem fixture_problem(int which) {
  fat_problem p;
  memset(&p, 0, sizeof p);
  p.direction = FAT_FWD;
  if (which == FIX_P_FP16) {
    p.dtype = FAT_FP16, p.mask = FAT_MASK_NONE, p.head_dim = 64;
    p.batch = 16, p.heads = 32, p.heads_k = 32, p.seqlen_q = p.seqlen_k = 1024;
  } else {
    p.dtype = FAT_BF16, p.mask = FAT_MASK_CAUSAL, p.head_dim = 128;
    p.batch = 4, p.heads = 16, p.heads_k = 16, p.seqlen_q = p.seqlen_k = 4096;
  }
  return p;
}

/* Stores the fixture's GPU, problems, variants, checks and timings in DB
 * (a fresh database) into *F. No winner is set: that is the rule under
 * test. 0, or -1 with the database's message on stderr. */
static inline int fixture_fill(fat_db *db, fixture *f) {
  fat_gpu_info g = fixture_gpu();
  memset(f, 0, sizeof *f);
  if (fat_db_put_gpu(db, &g, &f->gpu_id)) goto fail;
  for (int k = 0; k < FIX_N_PROBLEMS; k++) {
    f->problems[k] = fixture_problem(k);
    if (fat_db_put_problem(db, &f->problems[k], &f->problem_ids[k])) goto fail;
  }
  for (size_t i = 0; i < FIX_N_VARIANTS; i++) {
    const fixture_variant *x = &FIXTURE_VARIANTS[i];
    const fat_problem *p = &f->problems[x->problem];
    fat_variant v;
    memset(&v, 0, sizeof v);
    v.name = (char *)x->name;
    v.family = (char *)x->family;
    v.params = (char *)x->params;
    char source[256];
    snprintf(source, sizeof source, "// fixture stand-in of %s\n#define FAT_ABI_VERSION %d\n",
             x->name, FAT_ABI_VERSION);
    v.entry = "fat_fwd_mma80";
    v.source = source;
    fat_sha256_hex(source, strlen(source), v.hash);
    v.direction = p->direction, v.dtype = p->dtype, v.mask = p->mask, v.head_dim = p->head_dim;
    v.block_m = 128, v.threads = 128, v.smem_bytes = 49152, v.is_default = x->is_default;
    sqlite3_int64 vid;
    if (fat_db_put_variant(db, &v, &vid)) goto fail;
    fat_check c;
    memset(&c, 0, sizeof c);
    c.batch = 1, c.heads = 2, c.seqlen_q = c.seqlen_k = 256;
    c.rel_l2 = x->rel_l2, c.max_abs = x->rel_l2 * 4, c.lse_max_abs = 1e-5;
    c.passed = x->passed;
    snprintf(c.reason, sizeof c.reason, "%s", x->passed ? "ok" : "rel_l2 0.5 > 0.01");
    if (fat_db_put_check(db, vid, f->gpu_id, f->problem_ids[x->problem], &c)) goto fail;
    for (int t = 0; t < 2 && x->median_ms[t] > 0; t++) {
      const double ms = x->median_ms[t];
      const fat_timing tm = {.reps = 20, .median_ms = ms, .min_ms = ms * 0.9, .max_ms = ms * 1.2,
                             .p10_ms = ms * 0.95, .p90_ms = ms * 1.05, .tflops = 1.0 / ms,
                             .sm_clock_mhz = 1755};
      if (fat_db_put_timing(db, vid, f->gpu_id, f->problem_ids[x->problem], &tm, NULL)) goto fail;
    }
  }
  return 0;
fail:
  fprintf(stderr, "fixture: %s\n", fat_db_errmsg(db));
  return -1;
}
#endif

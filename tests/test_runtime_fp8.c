/* SPDX-License-Identifier: MIT */
/* e4m3 calls through libfatune, on the CPU (issue 26): the lookup and the
 * launch against a stand-in CUDA driver (stand_in_cuda.c, by
 * FATUNE_LIBCUDA, an H200) and a table built here with two e4m3 winners of
 * the ws90 family at d128 causal, one whose source carries today's
 * FAT_ABI_FP8_VERSION line (bucket 4096) and one built against another
 * layout of the descale block (bucket 1024). A call of seqlen 1024 is
 * served by the 4096 winner: the exact but stale one is passed over, never
 * launched. The launch hands the kernel its descale factors as its fifth
 * argument (fat_fwd_fp8_params: the pointers and the strides of
 * fat_attn_args), per tensor or per (batch, key head). A bf16 call of the
 * same shape is never served by an e4m3 winner (the dtype is part of the
 * key). Exits 77 (skipped) while the database schema does not admit e4m3
 * problems (db/schema.sql's CHECK). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "stand_in.h"
#include "compile.h"
#include "db.h"
#include "fat_abi.h"
#include "fat_abi_fp8.h"
#include "fat_abi_kv.h"
#include "fatune.h"
#include "fwd_launch.h"
#include "sha256.h"
#include "problems.h"

#define SKIP 77
#define H200 "NVIDIA H200"  /* the stand-in driver's GPU */
#define H200_SMS 132
#define BATCH 2
#define HEADS 16
#define HEADS_K 4
#define HEAD_DIM 128
#define CUBIN_PREFIX "stand-in cubin of "
#define FAKE_TENSOR_SPAN (1ull << 30)  /* fake device addresses this far apart: never read */
#define DESCALE_AT (6 * FAKE_TENSOR_SPAN)
#define ENTRY "fat_fwd_ws90_e4m3"      /* the stand-in records the fp8 block of an "e4m3" entry */

_Static_assert(sizeof(fat_fwd_fp8_params) == 48, "stand_in_cuda.c's STAND_IN_FP8_BYTES");

/* The table's winners (e4m3 causal d128, 4 query heads per K/V head). */
typedef struct winner {
  const char *name;
  int seqlen;   /* its bucket: seqlen_q = seqlen_k */
  int fp8_abi;  /* its source carries today's FAT_ABI_FP8_VERSION line */
} winner;
static const winner WINNERS[] = {
    {"fwd.ws90.e4m3.d128.causal.m128n128s2", 4096, 1},
    {"fwd.ws90.e4m3.d128.causal.m128n176s2", 1024, 0},
};
#define N_WINNERS (sizeof WINNERS / sizeof WINNERS[0])

static const char *(*stand_in_recent_fp8)(int back, void *out, size_t n);

/* Stores winner W in the database at PATH as test_runtime_paged does: a
 * stand-in source (with today's ABI lines, the fp8 one as W says), a
 * passing check, a timing and a build whose cubin is CUBIN_PREFIX + its
 * name. 0, or -1 when the schema refuses an e4m3 problem or variant. */
static int put_winner(const char *path, const winner *w, const char *arch) {
  char err[1024], source[512], cubin[256];
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_gpu_info g = {.cc_major = 9, .cc_minor = 0, .sm_count = H200_SMS, .driver_version = 13000,
                    .nvrtc_major = 13, .nvrtc_minor = 0, .smem_per_block_optin = 232448};
  snprintf(g.name, sizeof g.name, "%s", H200);
  fat_problem p;
  fat_tune_problem(FAT_E4M3, FAT_MASK_CAUSAL, HEAD_DIM, w->seqlen, w->seqlen, HEADS / HEADS_K, BATCH, &p);
  snprintf(source, sizeof source, "// stand-in source of %s\n#define FAT_ABI_VERSION %d\n"
           "#define FAT_ABI_KV_VERSION %d\n#define FAT_ABI_FP8_VERSION %d\n", w->name,
           FAT_ABI_VERSION, FAT_ABI_KV_VERSION, w->fp8_abi ? FAT_ABI_FP8_VERSION : FAT_ABI_FP8_VERSION + 1);
  fat_variant v = {.name = (char *)w->name, .family = "ws90", .source = source,
                   .params = "BLOCK_M=128 BLOCK_N=128 PERSISTENT=0 STAGES=2", .entry = ENTRY,
                   .direction = FAT_FWD, .dtype = FAT_E4M3, .mask = FAT_MASK_CAUSAL,
                   .head_dim = HEAD_DIM, .block_m = 128, .threads = 384, .smem_bytes = 131072};
  fat_sha256_hex(source, strlen(source), v.hash);
  fat_check c = {.batch = BATCH, .heads = HEADS, .seqlen_q = w->seqlen, .seqlen_k = w->seqlen,
                 .rel_l2 = 0.02, .max_abs = 0.05, .lse_max_abs = 1e-3, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = 20, .median_ms = 0.1, .min_ms = 0.09, .max_ms = 0.12, .p10_ms = 0.095,
                  .p90_ms = 0.105, .tflops = 900.0, .sm_clock_mhz = 1755};
  const int n = snprintf(cubin, sizeof cubin, CUBIN_PREFIX "%s", w->name) + 1;
  fat_build b = {.ok = 1, .cubin = (unsigned char *)cubin, .cubin_size = (size_t)n};
  snprintf(b.arch, sizeof b.arch, "%s", arch);
  fat_sha256_hex(cubin, (size_t)n, b.key);
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  if (fat_db_put_problem(db, &p, &pid) || fat_db_put_variant(db, &v, &vid)) {
    printf("skipped: the schema refuses an e4m3 problem or variant (%s)\n", fat_db_errmsg(db));
    fat_db_close(db);
    return -1;
  }
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c) == 0);
  REQUIRE_EXIT(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  REQUIRE_EXIT(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
  REQUIRE_EXIT(fat_db_put_build(db, vid, &b, fat_compile_options(), "13.0") == 0);
  fat_db_close(db);
  return 0;
}

/* A prefill of SEQLEN on fake device addresses: e4m3 q, k and v, bf16 o,
 * one descale factor per tensor at DESCALE_AT. */
static fat_attn_args call(int seqlen) {
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = BATCH, a.heads = HEADS, a.heads_k = HEADS_K, a.seqlen_q = a.seqlen_k = seqlen;
  a.head_dim = HEAD_DIM, a.dtype = FAT_ATTN_E4M3, a.mask = FAT_ATTN_MASK_CAUSAL;
  a.q = (void *)(uintptr_t)(1 * FAKE_TENSOR_SPAN), a.k = (void *)(uintptr_t)(2 * FAKE_TENSOR_SPAN);
  a.v = (void *)(uintptr_t)(3 * FAKE_TENSOR_SPAN), a.o = (void *)(uintptr_t)(4 * FAKE_TENSOR_SPAN);
  a.lse = (float *)(uintptr_t)(5 * FAKE_TENSOR_SPAN);
  fat_attn_args_contiguous(&a);
  a.q_descale = (const float *)(uintptr_t)DESCALE_AT;
  a.k_descale = (const float *)(uintptr_t)(DESCALE_AT + 256);
  a.v_descale = (const float *)(uintptr_t)(DESCALE_AT + 512);
  return a;
}

/* The fp8 block a launch of A must carry: A's descale fields. */
static int block_is(const fat_fwd_fp8_params *got, const fat_attn_args *a) {
  const fat_fwd_fp8_params want = {
      .descale = {a->q_descale, a->k_descale, a->v_descale},
      .batch_stride = {a->q_descale_batch_stride, a->k_descale_batch_stride, a->v_descale_batch_stride},
      .head_stride = {a->q_descale_head_stride, a->k_descale_head_stride, a->v_descale_head_stride}};
  return !memcmp(got, &want, sizeof want);
}

int main(void) {
  char dir[] = "/tmp/fatune-fp8-XXXXXX", path[256], arch[16];
  const char *driver = use_stand_in_driver();
  if (!driver) return 1;
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tables.db", dir);
  fat_arch_for_cc(9, 0, arch);
  for (size_t i = 0; i < N_WINNERS; i++)
    if (put_winner(path, &WINNERS[i], arch)) {
      remove(path);
      rmdir(dir);
      return SKIP;
    }

  const char *const tables[] = {path};
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *c = NULL;
  o.user_db = "", o.tables = tables, o.n_tables = 1, o.no_builtin = 1;
  fat_status st = fat_context_open(&c, &o);
  if (st) fprintf(stderr, "open: %s\n", fat_context_error(c));
  REQUIRE_EXIT(st == FAT_OK);
  void *lib = dlopen(driver, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE_EXIT(lib);
  *(void **)&stand_in_recent_fp8 = dlsym(lib, "stand_in_recent_fp8");
  REQUIRE_EXIT(stand_in_recent_fp8);

  /* The stale exact winner is passed over for today's nearest one. */
  fat_choice ch = FAT_CHOICE_INIT;
  fat_attn_args a = call(1024);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, WINNERS[0].name);
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  CHECK_INT(ch.bucket_seqlen, 4096);
  /* A bf16 call of the shape: no bf16 winner, no built-in fallback. */
  fat_attn_args bf = a;
  bf.dtype = FAT_ATTN_BF16, bf.q_descale = bf.k_descale = bf.v_descale = NULL;
  CHECK_INT(fat_attention_select(c, &bf, &ch), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(c), "no tuned fwd winner for bf16 causal head_dim 128 on NVIDIA H200 "
            "and the built-in default is disabled");

  /* The launch: the descale factors, per tensor, as the fifth argument. */
  fat_choice ran = FAT_CHOICE_INIT;
  fat_fwd_fp8_params got;
  st = fat_attention_fwd(c, &a, NULL, &ran);
  if (st) fprintf(stderr, "launch: %s\n", fat_context_error(c));
  CHECK_INT(st, FAT_OK);
  CHECK_STR(ran.variant, WINNERS[0].name);
  CHECK_STR(stand_in_recent_fp8(0, &got, sizeof got), ENTRY);
  CHECK(block_is(&got, &a));
  /* FlashAttention-3's (batch, heads_k) factors; q's without a factor. */
  a.q_descale = NULL;
  a.k_descale_batch_stride = a.v_descale_batch_stride = HEADS_K;
  a.k_descale_head_stride = a.v_descale_head_stride = 1;
  st = fat_attention_fwd(c, &a, NULL, &ran);
  if (st) fprintf(stderr, "launch: %s\n", fat_context_error(c));
  CHECK_INT(st, FAT_OK);
  CHECK_STR(stand_in_recent_fp8(0, &got, sizeof got), ENTRY);
  CHECK(block_is(&got, &a));
  CHECK(got.descale[0] == NULL && got.batch_stride[1] == HEADS_K && got.head_stride[2] == 1);

  fat_context_close(c);
  remove(path);
  char wal[300];
  snprintf(wal, sizeof wal, "%s-wal", path);
  remove(wal);
  snprintf(wal, sizeof wal, "%s-shm", path);
  remove(wal);
  rmdir(dir);
  return check_summary("test_runtime_fp8");
}

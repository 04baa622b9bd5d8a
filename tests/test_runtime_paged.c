/* SPDX-License-Identifier: MIT */
/* Paged calls through libfatune, on the CPU: the lookup and the launch
 * against a stand-in CUDA driver (stand_in_cuda.c, by FATUNE_LIBCUDA) and
 * a table built here with a contiguous decoding winner and paged ones (page
 * sizes 16, 64 and 256; the 64 one's source built against another layout
 * of the kernels' second block). A call without a block table is served by
 * the contiguous winner and never a paged one, a paged call by the paged
 * winner of its page size, else the nearest, never the contiguous winner
 * nor a stale layout; a paged problem with nothing tuned by the paged
 * family's built-in default (a contiguous one by mma80's). The launch of a
 * paged call hands its kernel the block table, the page size as a shift and
 * the split count fat_fwd_launch_splits chooses for the GPU (grid z batch x
 * splits, then the combine kernel), and one split -- no combine -- when the
 * caller's workspace is too small for more. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "stand_in.h"
#include "compile.h"
#include "db.h"
#include "fat_abi.h"
#include "fat_abi_kv.h"
#include "fatune.h"
#include "fwd_launch.h"
#include "sha256.h"
#include "problems.h"
#include "runtime_int.h"

#define H200 "NVIDIA H200"  /* the stand-in driver's GPU */
#define H200_SMS 132
#define HEADS 32
#define HEADS_K 8
#define HEAD_DIM 128
#define SEQLEN_K 4096
#define CUBIN_PREFIX "stand-in cubin of "
#define FAKE_TENSOR_SPAN (1ull << 30)  /* fake device addresses this far apart: never read */
#define TABLE_AT (6 * FAKE_TENSOR_SPAN)
#define WORKSPACE_AT (7 * FAKE_TENSOR_SPAN)

/* The table's winners (bf16 causal d128, 4 query heads per K/V head,
 * seqlen_q 1, seqlen_k 4096): contiguous, and paged at three page sizes. */
typedef struct winner {
  const char *name, *family, *params;
  int page_size;
  int kv_abi;  /* its source carries today's FAT_ABI_KV_VERSION line */
} winner;
static const winner WINNERS[] = {
    {"fwd.splitkv.bf16.d128.causal.m64n64w4s2.g1x8", "splitkv",
     "BLOCK_M=64 BLOCK_N=64 PACK_GQA=1 SPLITS=8 STAGES=2 WARPS=4", 0, 0},
    {"fwd.paged.bf16.d128.causal.m64n64w4s2.g1x0", "paged",
     "BLOCK_M=64 BLOCK_N=64 PACK_GQA=1 SPLITS=0 STAGES=2 WARPS=4", 16, 1},
    {"fwd.paged.bf16.d128.causal.m64n64w4s3.g1x0", "paged",
     "BLOCK_M=64 BLOCK_N=64 PACK_GQA=1 SPLITS=0 STAGES=3 WARPS=4", 64, 0},
    {"fwd.paged.bf16.d128.causal.m64n128w4s2.g1x0", "paged",
     "BLOCK_M=64 BLOCK_N=128 PACK_GQA=1 SPLITS=0 STAGES=2 WARPS=4", 256, 1},
    /* d64: a contiguous decoding winner whose launch chooses its splits */
    {"fwd.splitkv.bf16.d64.causal.m64n64w4s2.g1x0", "splitkv",
     "BLOCK_M=64 BLOCK_N=64 PACK_GQA=1 SPLITS=0 STAGES=2 WARPS=4", 0, 1},
};
#define N_WINNERS (sizeof WINNERS / sizeof WINNERS[0])

/* The stand-in driver's record of what it launched (stand_in_cuda.c). */
static unsigned long (*stand_in_launches)(void);
static const char *(*stand_in_last_image)(void);
static const char *(*stand_in_recent_launch)(int back, unsigned grid[3], void *second, size_t n);

/* Stores winner W in the database at PATH, as test_runtime_lookup_reuse's
 * put_winner does: a stand-in source (with today's ABI lines), a passing
 * check, a timing and a build whose cubin is CUBIN_PREFIX + its name. */
static void put_winner(const char *path, const winner *w, const char *arch) {
  char err[1024], source[512], cubin[256];
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_gpu_info g = {.cc_major = 9, .cc_minor = 0, .sm_count = H200_SMS, .driver_version = 13000,
                    .nvrtc_major = 13, .nvrtc_minor = 0, .smem_per_block_optin = 232448};
  snprintf(g.name, sizeof g.name, "%s", H200);
  fat_problem p;
  const int head_dim = strstr(w->name, ".d64.") ? 64 : HEAD_DIM;
  fat_tune_problem(FAT_BF16, FAT_MASK_CAUSAL, head_dim, 1, SEQLEN_K, HEADS / HEADS_K, 8, &p);
  p.page_size = w->page_size;
  snprintf(source, sizeof source, "// stand-in source of %s\n#define FAT_ABI_VERSION %d\n"
           "#define FAT_ABI_KV_VERSION %d\n", w->name, FAT_ABI_VERSION,
           w->kv_abi ? FAT_ABI_KV_VERSION : FAT_ABI_KV_VERSION + 1);
  fat_variant v = {.name = (char *)w->name, .family = (char *)w->family, .source = source,
                   .params = (char *)w->params, .entry = "fat_fwd_mma80", .direction = FAT_FWD,
                   .dtype = FAT_BF16, .mask = FAT_MASK_CAUSAL, .head_dim = head_dim, .block_m = 64,
                   .threads = 128, .smem_bytes = 81920};
  fat_sha256_hex(source, strlen(source), v.hash);
  fat_check c = {.batch = 2, .heads = 8, .seqlen_q = 1, .seqlen_k = 1000, .rel_l2 = 0.002,
                 .max_abs = 0.01, .lse_max_abs = 1e-5, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = 20, .median_ms = 0.1, .min_ms = 0.09, .max_ms = 0.12, .p10_ms = 0.095,
                  .p90_ms = 0.105, .tflops = 1.0, .sm_clock_mhz = 1755};
  const int n = snprintf(cubin, sizeof cubin, CUBIN_PREFIX "%s", w->name) + 1;
  fat_build b = {.ok = 1, .cubin = (unsigned char *)cubin, .cubin_size = (size_t)n};
  snprintf(b.arch, sizeof b.arch, "%s", arch);
  fat_sha256_hex(cubin, (size_t)n, b.key);
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  REQUIRE_EXIT(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE_EXIT(fat_db_put_variant(db, &v, &vid) == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c) == 0);
  REQUIRE_EXIT(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  REQUIRE_EXIT(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
  REQUIRE_EXIT(fat_db_put_build(db, vid, &b, fat_compile_options(), "13.0") == 0);
  fat_db_close(db);
}

static fat_context *open_ctx(const char *path, int no_builtin) {
  const char *const tables[] = {path};
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *c = NULL;
  o.user_db = "", o.tables = tables, o.n_tables = 1, o.no_builtin = no_builtin;
  fat_status st = fat_context_open(&c, &o);
  if (st) fprintf(stderr, "open: %s\n", fat_context_error(c));
  REQUIRE_EXIT(st == FAT_OK);
  return c;
}

/* A decoding step, batch 1, on fake device addresses: paged in pages of
 * PAGE_SIZE (0: a contiguous cache). */
static fat_attn_args call(int head_dim, int page_size) {
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = 1, a.heads = HEADS, a.heads_k = HEADS_K, a.seqlen_q = 1, a.seqlen_k = SEQLEN_K;
  a.head_dim = head_dim, a.dtype = FAT_ATTN_BF16, a.mask = FAT_ATTN_MASK_CAUSAL;
  a.q = (void *)(uintptr_t)(1 * FAKE_TENSOR_SPAN), a.k = (void *)(uintptr_t)(2 * FAKE_TENSOR_SPAN);
  a.v = (void *)(uintptr_t)(3 * FAKE_TENSOR_SPAN), a.o = (void *)(uintptr_t)(4 * FAKE_TENSOR_SPAN);
  a.lse = (float *)(uintptr_t)(5 * FAKE_TENSOR_SPAN);
  fat_attn_args_contiguous(&a);
  if (page_size) {
    a.block_table = (const int *)(uintptr_t)TABLE_AT, a.page_size = page_size;
    a.block_table_stride = (SEQLEN_K + page_size - 1) / page_size;
    a.num_pages = 4 * a.block_table_stride;
    a.k_batch_stride = a.v_batch_stride = (long long)page_size * a.k_row_stride;
  }
  return a;
}

/* The variant fat_attention_select names for A on C, its bucket's page size
 * in *PAGE (and the status's message on failure). */
static const char *selected(fat_context *c, const fat_attn_args *a, int *page) {
  static fat_choice ch;
  ch = (fat_choice)FAT_CHOICE_INIT;
  fat_status st = fat_attention_select(c, a, &ch);
  if (st) return fat_context_error(c);
  *page = ch.bucket_page_size;
  return ch.variant;
}

int main(void) {
  char dir[] = "/tmp/fatune-paged-XXXXXX", path[256], arch[16];
  const char *driver = use_stand_in_driver();
  if (!driver) return 1;
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tables.db", dir);
  fat_arch_for_cc(9, 0, arch);
  for (size_t i = 0; i < N_WINNERS; i++) put_winner(path, &WINNERS[i], arch);

  fat_context *c = open_ctx(path, 0);
  void *lib = dlopen(driver, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE_EXIT(lib);
  *(void **)&stand_in_launches = dlsym(lib, "stand_in_launches");
  *(void **)&stand_in_last_image = dlsym(lib, "stand_in_last_image");
  *(void **)&stand_in_recent_launch = dlsym(lib, "stand_in_recent_launch");
  REQUIRE_EXIT(stand_in_launches && stand_in_last_image && stand_in_recent_launch);

  /* Selection: the contiguous winner for a contiguous call, the paged
   * winner of the call's page size for a paged one, else the nearest one
   * that is today's layout (64's is not: 16 and 256 are as near, the
   * larger served). */
  int page = -1;
  fat_attn_args a = call(HEAD_DIM, 0);
  CHECK_STR(selected(c, &a, &page), WINNERS[0].name);
  CHECK_INT(page, 0);
  static const struct { int page_size; const char *variant; } PAGED[] = {
      {16, "fwd.paged.bf16.d128.causal.m64n64w4s2.g1x0"},
      {256, "fwd.paged.bf16.d128.causal.m64n128w4s2.g1x0"},
      {32, "fwd.paged.bf16.d128.causal.m64n64w4s2.g1x0"},
      {64, "fwd.paged.bf16.d128.causal.m64n128w4s2.g1x0"},
      {4096, "fwd.paged.bf16.d128.causal.m64n128w4s2.g1x0"},
  };
  for (size_t i = 0; i < sizeof PAGED / sizeof PAGED[0]; i++) {
    a = call(HEAD_DIM, PAGED[i].page_size);
    CHECK_STR(selected(c, &a, &page), PAGED[i].variant);
    CHECK_INT(page, PAGED[i].page_size == 16 || PAGED[i].page_size == 32 ? 16 : 256);
  }
  /* Nothing paged tuned at d64: the paged call runs the paged family's
   * default (no mask's: causal with one query sees every key); the
   * contiguous one the splitkv winner. */
  a = call(64, 16);
  CHECK_STR(selected(c, &a, &page), "fwd.paged.bf16.d64.none.m64n64w4s2.g0x0");
  a = call(64, 0);
  CHECK_STR(selected(c, &a, &page), "fwd.splitkv.bf16.d64.causal.m64n64w4s2.g1x0");

  /* The launch of a paged call: the main kernel gets the block table, the
   * page size's shift and the launch's split count (8 blocks of one split
   * on 132 SMs: 16 splits of 256 keys), then the combine kernel runs. */
  a = call(HEAD_DIM, 16);
  size_t need = 0;
  CHECK_INT(fat_attention_fwd_workspace(c, &a, &need), FAT_OK);
  const int splits = fat_fwd_launch_splits(HEADS_K, SEQLEN_K, H200_SMS);
  CHECK_INT(splits, 16);
  const size_t rows = (size_t)splits * HEADS;  /* batch 1, seqlen_q 1 */
  CHECK_INT((long long)need, (long long)(rows * HEAD_DIM * sizeof(float) + 256 * ((rows * 4 + 255) / 256)));
  a.workspace = (void *)(uintptr_t)WORKSPACE_AT, a.workspace_bytes = need;
  fat_choice ran = FAT_CHOICE_INIT;
  const unsigned long before = stand_in_launches();
  fat_status st = fat_attention_fwd(c, &a, NULL, &ran);
  if (st) fprintf(stderr, "launch: %s\n", fat_context_error(c));
  CHECK_INT(st, FAT_OK);
  CHECK_STR(ran.variant, "fwd.paged.bf16.d128.causal.m64n64w4s2.g1x0");
  CHECK_INT(ran.bucket_page_size, 16);
  CHECK_INT(stand_in_launches() - before, 2);
  unsigned grid[3];
  fat_fwd_kv_params kv;
  CHECK_STR(stand_in_recent_launch(0, NULL, NULL, 0), "fat_fwd_mma80_combine");
  CHECK_STR(stand_in_recent_launch(1, grid, &kv, sizeof kv), "fat_fwd_mma80");
  CHECK_INT(grid[0], 1);            /* 4 packed rows: one block of 64 */
  CHECK_INT(grid[1], HEADS_K);
  CHECK_INT(grid[2], splits);       /* batch 1 x the splits */
  CHECK((uintptr_t)kv.block_table == TABLE_AT);
  CHECK_INT(kv.block_table_stride, SEQLEN_K / 16);
  CHECK_INT(kv.page_shift, 4);
  CHECK_INT(kv.splits, splits);
  /* Too little workspace for the splits: one, which needs none. */
  a.workspace_bytes = need - 1;
  CHECK_INT(fat_attention_fwd(c, &a, NULL, &ran), FAT_OK);
  CHECK_INT(stand_in_launches() - before, 3);
  CHECK_STR(stand_in_recent_launch(0, grid, &kv, sizeof kv), "fat_fwd_mma80");
  CHECK_INT(grid[2], 1);
  CHECK_INT(kv.splits, 1);
  a.workspace = NULL, a.workspace_bytes = 0;
  CHECK_INT(fat_attention_fwd(c, &a, NULL, &ran), FAT_OK);
  CHECK_STR(stand_in_recent_launch(0, grid, &kv, sizeof kv), "fat_fwd_mma80");
  CHECK_INT(kv.splits, 1);
  CHECK_STR(ran.variant, "fwd.paged.bf16.d128.causal.m64n64w4s2.g1x0");
  /* A page size of 256: the other winner, a shift of 8. */
  a = call(HEAD_DIM, 256);
  CHECK_INT(fat_attention_fwd(c, &a, NULL, &ran), FAT_OK);
  CHECK_STR(ran.variant, "fwd.paged.bf16.d128.causal.m64n128w4s2.g1x0");
  CHECK_STR(stand_in_recent_launch(0, NULL, &kv, sizeof kv), "fat_fwd_mma80");
  CHECK_INT(kv.page_shift, 8);
  CHECK_INT(kv.block_table_stride, SEQLEN_K / 256);
  char want_image[256];
  snprintf(want_image, sizeof want_image, CUBIN_PREFIX "%s", ran.variant);
  CHECK_STR(stand_in_last_image(), want_image);
  /* A contiguous decoding winner whose launch chooses its splits: the
   * second block with no table and the launch's count, then the combine. */
  a = call(64, 0);
  CHECK_INT(fat_attention_fwd_workspace(c, &a, &need), FAT_OK);
  a.workspace = (void *)(uintptr_t)WORKSPACE_AT, a.workspace_bytes = need;
  CHECK_INT(fat_attention_fwd(c, &a, NULL, &ran), FAT_OK);
  CHECK_STR(ran.variant, "fwd.splitkv.bf16.d64.causal.m64n64w4s2.g1x0");
  CHECK_STR(stand_in_recent_launch(0, NULL, NULL, 0), "fat_fwd_mma80_combine");
  CHECK_STR(stand_in_recent_launch(1, grid, &kv, sizeof kv), "fat_fwd_mma80");
  CHECK(kv.block_table == NULL && kv.page_shift == 0);
  CHECK_INT(kv.splits, splits);
  CHECK_INT(grid[2], splits);
  fat_context_close(c);

  /* Without the built-in defaults, a paged problem with nothing tuned is
   * refused by name, as a contiguous one is. */
  c = open_ctx(path, 1);
  a = call(256, 16);
  fat_choice ch = FAT_CHOICE_INIT;
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(c), "no tuned fwd winner for bf16 causal head_dim 256 on NVIDIA H200 "
                                  "and the built-in default is disabled");
  fat_context_close(c);
  dlclose(lib);

  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_summary("test_runtime_paged");
}

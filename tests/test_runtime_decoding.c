/* SPDX-License-Identifier: MIT */
/* The built-in default of a 16-bit decoding call (issue 24), through
 * offline contexts with nothing tuned (no GPU needed): a contiguous fp16 or
 * bf16 forward is served by the splitkv family's default (the packed
 * decoding tile, its key splits chosen at launch) exactly where the launch
 * would split its keys -- the grid of that default fills under 80 % of the
 * GPU's block slots (two an SM) and the keys make two splits of 256 or
 * more -- with seqlen_q up to the family's 128, and by mma80's default
 * everywhere else. Each boundary is crossed from both sides: the batch
 * (26 and 27 sequences of 8 blocks on 132 SMs), the SM count, seqlen_k
 * (256 and 257), seqlen_q (128 and 129) and a local window's width. A
 * head dim above 128 (no decoding default: its splits spill), a packed
 * batch of variable lengths and an fp8 K/V cache keep their defaults; a
 * paged call gets the paged family's. The choice's note says why the
 * decoding default serves. The calls are causal with one query, as a
 * decoding step is, and so served by no mask's defaults (select.c,
 * fat_rt_causal_is_none); 128 and 129 queries by causal's.
 * Then launched, on a stand-in CUDA driver (stand_in_cuda.c, by
 * FATUNE_LIBCUDA: 132 SMs) with the two defaults' cubins stored in a user
 * database: the decoding default runs its main kernel over the packed grid
 * (1 x 8 K/V heads x the launch's splits) and then the combine kernel; 27
 * sequences run mma80's one kernel; and 26 again the decoding default --
 * the same (seqlen_q, seqlen_k, group) three times in one context, which
 * its memo of shapes must tell apart by batch. FATUNE_LOG's line names the
 * default and why. */
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
#include "fatune.h"
#include "fat_abi_kv.h"
#include "fwd_launch.h"
#include "gen.h"
#include "sha256.h"

#define H100 "NVIDIA H100 80GB HBM3"
#define H100_SMS 132
#define HEADS 32
#define HEADS_K 8
#define LONG_KEYS 131072
#define PAGED_TABLE_AT 0x1000  /* a paged call's block table: only its shape is read */
#define CU_SEQLENS_AT 0x2000   /* a packed batch's cu_seqlens: only their presence is read */
#define STAND_IN_SMS 132       /* the stand-in driver's GPU (an H200) */
#define CUBIN_PREFIX "stand-in cubin of "
#define FAKE_TENSOR_SPAN (1ull << 36)  /* fake device addresses this far apart: never read */
#define WORKSPACE_AT (6 * FAKE_TENSOR_SPAN)

static const char *(*stand_in_recent_launch)(int back, unsigned grid[3], void *second, size_t n);
static unsigned long (*stand_in_launches)(void);

/* Stores the generator's built-in defaults of bf16 none d128 (mma80's
 * and splitkv's) in the database at PATH, each with a build for ARCH whose
 * cubin is CUBIN_PREFIX + its name: what the runtime loads for them. */
static void put_default_builds(const char *path, const char *arch) {
  char err[1024], cubin[256];
  const fat_dtype dt[] = {FAT_BF16};
  const fat_mask mk[] = {FAT_MASK_NONE};
  const int hd[] = {128};
  fat_gen_query q = {.direction = FAT_FWD, .arch = "sm_80", .dtypes = dt, .n_dtypes = 1, .masks = mk,
                     .n_masks = 1, .head_dims = hd, .n_head_dims = 1};
  fat_variant *v = NULL;
  size_t n = 0;
  fat_db *db = NULL;
  fat_gen *g = fat_gen_open(NULL, err, sizeof err);
  REQUIRE_EXIT(g && fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == 0);
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  int stored = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i].is_default && (!strcmp(v[i].family, "mma80") || !strcmp(v[i].family, "splitkv"))) {
      const int len = snprintf(cubin, sizeof cubin, CUBIN_PREFIX "%s", v[i].name) + 1;
      fat_build b = {.ok = 1, .cubin = (unsigned char *)cubin, .cubin_size = (size_t)len};
      snprintf(b.arch, sizeof b.arch, "%s", arch);
      fat_sha256_hex(cubin, (size_t)len, b.key);
      sqlite3_int64 vid;
      REQUIRE_EXIT(fat_db_put_variant(db, &v[i], &vid) == 0);
      REQUIRE_EXIT(fat_db_put_build(db, vid, &b, fat_compile_options(), "13.0") == 0);
      stored++;
    }
    fat_variant_free(&v[i]);
  }
  free(v);
  fat_db_close(db);
  fat_gen_close(g);
  CHECK_INT(stored, 2);
}

/* Launches A (on fake device addresses, with the workspace it asks for)
 * on C: the variant that ran. */
static const char *launched(fat_context *c, fat_attn_args a) {
  static fat_choice ran;
  a.q = (void *)(uintptr_t)(1 * FAKE_TENSOR_SPAN), a.k = (void *)(uintptr_t)(2 * FAKE_TENSOR_SPAN);
  a.v = (void *)(uintptr_t)(3 * FAKE_TENSOR_SPAN), a.o = (void *)(uintptr_t)(4 * FAKE_TENSOR_SPAN);
  a.lse = (float *)(uintptr_t)(5 * FAKE_TENSOR_SPAN);
  fat_attn_args_contiguous(&a);
  size_t need = 0;
  if (fat_attention_fwd_workspace(c, &a, &need)) return fat_context_error(c);
  a.workspace = need ? (void *)(uintptr_t)WORKSPACE_AT : NULL, a.workspace_bytes = need;
  ran = (fat_choice)FAT_CHOICE_INIT;
  if (fat_attention_fwd(c, &a, NULL, &ran)) return fat_context_error(c);
  return ran.variant;
}

static fat_context *offline(int sms, int no_builtin) {
  const char *const none[] = {"/nonexistent/fatune-tables.db"};
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *c = NULL;
  o.user_db = "", o.tables = none, o.n_tables = 1, o.no_builtin = no_builtin;
  o.gpu_name = H100, o.gpu_cc_major = 9, o.gpu_cc_minor = 0, o.gpu_sm_count = sms;
  fat_status st = fat_context_open(&c, &o);
  if (st) fprintf(stderr, "open: %s\n", fat_context_error(c));
  REQUIRE_EXIT(st == FAT_OK);
  return c;
}

/* BATCH sequences of SEQLEN_Q queries against SEQLEN_K keys, 32 query and
 * 8 K/V heads (each sequence 8 blocks of the packed decoding tile up to 16
 * queries). */
static fat_attn_args decode(fat_attn_dtype dt, fat_attn_mask mk, int hd, int batch, int seqlen_q,
                            int seqlen_k) {
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = batch, a.heads = HEADS, a.heads_k = HEADS_K, a.seqlen_q = seqlen_q, a.seqlen_k = seqlen_k;
  a.head_dim = hd, a.dtype = dt, a.mask = mk;
  return a;
}

/* The variant C selects for A (the status's message on failure); its
 * choice in *OUT when OUT is set. */
static const char *selected(fat_context *c, const fat_attn_args *a, fat_choice *out) {
  static fat_choice ch;
  ch = (fat_choice)FAT_CHOICE_INIT;
  if (fat_attention_select(c, a, &ch)) return fat_context_error(c);
  if (out) *out = ch;
  return ch.variant;
}

#define SPLIT_BF16 "fwd.splitkv.bf16.d128.none.m64n64w4s2.g1x0"
#define MMA80_BF16 "fwd.mma80.bf16.d128.none.m128n64w4s1"

int main(void) {
  fat_context *c = offline(H100_SMS, 0);
  fat_choice ch;

  /* The shape: one sequence, one query, 131072 keys. */
  fat_attn_args a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 1, 1, LONG_KEYS);
  CHECK_STR(selected(c, &a, &ch), SPLIT_BF16);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK_INT(ch.match, FAT_MATCH_DEFAULT);
  CHECK_CONTAINS(ch.note, "decoding-shaped: nothing tuned, so the splitkv family's built-in default, "
                          "whose launch splits the keys to fill the 132 SMs (mma80's would leave most idle)");
  a = decode(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 128, 1, 16, LONG_KEYS);
  CHECK_STR(selected(c, &a, NULL), "fwd.splitkv.fp16.d128.none.m64n64w4s2.g1x0");
  /* A head dim without a template of its own: its template's (d96's). */
  a = decode(FAT_ATTN_FP16, FAT_ATTN_MASK_NONE, 80, 1, 1, LONG_KEYS);
  CHECK_STR(selected(c, &a, NULL), "fwd.splitkv.fp16.d96.none.m64n64w4s2.g1x0");

  /* The batch: 26 sequences are 208 blocks, under 80 % of 264 slots; 27
   * are 216, over. The same (seqlen_q, seqlen_k, group) both ways, in one
   * context and back again: the memo keeps them apart. */
  a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 26, 1, LONG_KEYS);
  CHECK_STR(selected(c, &a, NULL), SPLIT_BF16);
  a.batch = 27;
  CHECK_STR(selected(c, &a, &ch), MMA80_BF16);
  CHECK_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  CHECK_WHY(!strstr(ch.note, "decoding-shaped"), "note: %s", ch.note);
  a.batch = 26;
  CHECK_STR(selected(c, &a, NULL), SPLIT_BF16);
  a.batch = 64;
  CHECK_STR(selected(c, &a, NULL), MMA80_BF16);

  /* The keys: 256 make one split of SPLIT_MIN_KEYS, 257 two. */
  a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 1, 1, 256);
  CHECK_STR(selected(c, &a, NULL), MMA80_BF16);
  a.seqlen_k = 257;
  CHECK_STR(selected(c, &a, NULL), SPLIT_BF16);

  /* seqlen_q: the decoding family's longest is 128 (128 queries of a
   * group of 4 are 8 blocks a K/V head, 64 in all: still split). */
  a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 1, 128, LONG_KEYS);
  CHECK_STR(selected(c, &a, NULL), "fwd.splitkv.bf16.d128.causal.m64n64w4s2.g1x0");
  a.seqlen_q = 129;
  CHECK_STR(selected(c, &a, NULL), "fwd.mma80.bf16.d128.causal.m128n64w4s1");

  /* A local window bounds the keys a block sees: 128 to the left (with
   * the block's 16 positions, 144 keys: one split) is mma80's local
   * default, 65536 to the left the decoding one's. */
  a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_LOCAL, 128, 1, 1, LONG_KEYS);
  a.window_left = 128, a.window_right = 0;
  CHECK_STR(selected(c, &a, NULL), "fwd.mma80.bf16.d128.local.m128n64w4s1");
  a.window_left = 65536;
  CHECK_STR(selected(c, &a, NULL), "fwd.splitkv.bf16.d128.local.m64n64w4s2.g1x0");

  /* Above d128 there is no decoding default (its launch's splits spill):
   * mma80's serves. */
  a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 192, 1, 1, LONG_KEYS);
  CHECK_STR(selected(c, &a, NULL), "fwd.mma80.bf16.d192.none.m128n64w8s1");

  /* A packed batch of variable lengths stays with mma80 (its kernels take
   * one; splitkv is never timed on them). */
  a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 1, 1, LONG_KEYS);
  a.cu_seqlens_q = a.cu_seqlens_k = (const int *)(uintptr_t)CU_SEQLENS_AT;
  a.total_q = 1, a.total_k = LONG_KEYS;
  CHECK_STR(selected(c, &a, NULL), MMA80_BF16);

  /* A paged cache: the paged family's default, whose launch splits too. */
  a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 1, 1, LONG_KEYS);
  a.block_table = (const int *)(uintptr_t)PAGED_TABLE_AT, a.page_size = 64;
  a.block_table_stride = LONG_KEYS / 64, a.num_pages = LONG_KEYS / 64;
  CHECK_STR(selected(c, &a, NULL), "fwd.paged.bf16.d128.none.m64n64w4s2.g0x0");

  /* An fp8 K/V cache has the decoding default alone, whatever the shape. */
  a = decode(FAT_ATTN_BF16_E4M3KV, FAT_ATTN_MASK_CAUSAL, 128, 64, 1, 4096);
  CHECK_STR(selected(c, &a, NULL), "fwd.splitkv.bf16-e4m3kv.d128.none.m64n64w4s2.g1x0");
  fat_context_close(c);

  /* The SM count: 4 sequences (32 blocks) fill under 80 % of 132 SMs'
   * slots, not of 16 SMs' 32. */
  a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 4, 1, LONG_KEYS);
  c = offline(H100_SMS, 0);
  CHECK_STR(selected(c, &a, NULL), SPLIT_BF16);
  fat_context_close(c);
  c = offline(16, 0);
  CHECK_STR(selected(c, &a, NULL), MMA80_BF16);
  a.batch = 2; /* 16 blocks of 32 slots: under */
  CHECK_STR(selected(c, &a, NULL), SPLIT_BF16);
  fat_context_close(c);

  /* Launched. */
  const char *driver = use_stand_in_driver();
  if (!driver) return 1;
  char dir[] = "/tmp/fatune-decoding-XXXXXX", path[256], log_path[256], arch[16];
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/user.db", dir);
  snprintf(log_path, sizeof log_path, "%s/log.txt", dir);
  fat_arch_for_cc(9, 0, arch);
  put_default_builds(path, arch);
  /* FATUNE_LOG's lines, into a file while the context lives. */
  fflush(stderr);
  const int saved_stderr = dup(2);
  REQUIRE_EXIT(saved_stderr >= 0 && freopen(log_path, "w", stderr));
  setenv("FATUNE_LOG", "1", 1);
  {
    const char *const none[] = {"/nonexistent/fatune-tables.db"};
    fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
    o.user_db = path, o.tables = none, o.n_tables = 1;
    REQUIRE_EXIT(fat_context_open(&c, &o) == FAT_OK);
  }
  void *lib = dlopen(driver, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE_EXIT(lib);
  *(void **)&stand_in_launches = dlsym(lib, "stand_in_launches");
  *(void **)&stand_in_recent_launch = dlsym(lib, "stand_in_recent_launch");
  REQUIRE_EXIT(stand_in_launches && stand_in_recent_launch);
  const int splits = fat_fwd_launch_splits(HEADS_K, LONG_KEYS, STAND_IN_SMS);
  /* 8 blocks x 29 = 232 of 264 slots (28 splits would be 19 chunks of 256
   * keys a split, as 27 are) */
  CHECK_INT(splits, 29);
  unsigned grid[3];
  fat_fwd_kv_params kv;
  for (int round = 0; round < 2; round++) {
    unsigned long before = stand_in_launches();
    a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 1, 1, LONG_KEYS);
    CHECK_STR(launched(c, a), SPLIT_BF16);
    CHECK_INT(stand_in_launches() - before, 2);
    CHECK_STR(stand_in_recent_launch(0, NULL, NULL, 0), "fat_fwd_mma80_combine");
    CHECK_STR(stand_in_recent_launch(1, grid, &kv, sizeof kv), "fat_fwd_mma80");
    CHECK_INT(grid[0], 1); /* 4 packed rows: one block of 64 */
    CHECK_INT(grid[1], HEADS_K);
    CHECK_INT(grid[2], splits);
    CHECK_INT(kv.splits, splits);
    /* The same (seqlen_q, seqlen_k, group) at batch 27 fills the GPU
     * unsplit: mma80's one kernel, one block per query block and head. */
    before = stand_in_launches();
    a.batch = 27;
    CHECK_STR(launched(c, a), MMA80_BF16);
    CHECK_INT(stand_in_launches() - before, 1);
    CHECK_STR(stand_in_recent_launch(0, grid, NULL, 0), "fat_fwd_mma80");
    CHECK_INT(grid[0], 1);
    CHECK_INT(grid[1], HEADS);
    CHECK_INT(grid[2], 27);
    /* ... and 26 again: split. */
    a.batch = 26;
    CHECK_STR(launched(c, a), SPLIT_BF16);
    CHECK_STR(stand_in_recent_launch(1, grid, NULL, 0), "fat_fwd_mma80");
    CHECK_INT(grid[2], 26 * fat_fwd_launch_splits(26 * HEADS_K, LONG_KEYS, STAND_IN_SMS));
  }
  fat_context_close(c);
  fflush(stderr);
  REQUIRE_EXIT(dup2(saved_stderr, 2) >= 0);
  close(saved_stderr);
  unsetenv("FATUNE_LOG");
  char *log = check_read_file(log_path);
  REQUIRE_EXIT(log);
  CHECK_CONTAINS(log, "fatune: fwd bf16 causal d128 seqlen 1 x 131072 -> " SPLIT_BF16
                      " (built-in default, default, bucket 0, stored cubin): decoding-shaped: nothing "
                      "tuned, so the splitkv family's built-in default, whose launch splits the keys to "
                      "fill the 132 SMs (mma80's would leave most idle); causal with one query sees every key "
                      "(bottom-right): served as mask none\n");
  CHECK_CONTAINS(log, "fatune: fwd bf16 causal d128 seqlen 1 x 131072 -> " MMA80_BF16
                      " (built-in default, default, bucket 0, stored cubin): causal with one query "
                      "sees every key (bottom-right): served as mask none\n");
  free(log);
  dlclose(lib);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);

  /* Without the built-in defaults, nothing serves it. */
  c = offline(H100_SMS, 1);
  a = decode(FAT_ATTN_BF16, FAT_ATTN_MASK_CAUSAL, 128, 1, 1, LONG_KEYS);
  CHECK_STR(selected(c, &a, NULL), "no tuned fwd winner for bf16 causal head_dim 128 on " H100
                                   " and the built-in default is disabled");
  fat_context_close(c);
  return check_summary("test_runtime_decoding");
}

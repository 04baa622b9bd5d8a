/* SPDX-License-Identifier: MIT */
/* An fp8 K/V cache through libfatune, on the CPU (issue 24): dtype
 * bf16-e4m3kv (q and o bf16, k and v e4m3 with k_descale and v_descale)
 * against a stand-in CUDA driver (stand_in_cuda.c, by FATUNE_LIBCUDA, an
 * H200) and a table built here of decoding winners at d128 causal: a
 * contiguous splitkv one whose source carries today's FAT_ABI_FP8_VERSION
 * line (seqlen_k 4096), a contiguous one built against another layout of
 * the descale block (seqlen_k 1024) and a paged one (pages of 16). A step
 * at seqlen_k 1024 is served by the 4096 winner, the exact but stale one
 * passed over, never launched; the launch hands the kernel its descale
 * factors as its third argument (fat_fwd_fp8_params: q's NULL, k's and v's
 * pointers and strides), per tensor or per (batch, key head), after the
 * second block; a paged step the paged winner, with its block table second
 * and the factors third. An fp16-e4m3kv step of the shape is never served
 * by a bf16-e4m3kv winner (the dtype is part of the key).
 * Refused by name: a GPU below compute capability 8.9 (an A100), a
 * q_descale, a head dim narrower than its template and not a multiple of
 * 16 (72, on d96), k and v strides not multiples of 16 bytes.
 * The refusals that need no kernel of the dtype run always; the rest exit
 * 77 (skipped) while this build has no built-in bf16-e4m3kv default (the
 * generator's decoding families make them) or the database schema does not
 * admit fp16-e4m3kv and bf16-e4m3kv rows (db/schema.sql's CHECK, version 9):
 * once both land, they run as written. */
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
#define HEADS 32
#define HEADS_K 8
#define HEAD_DIM 128
#define CUBIN_PREFIX "stand-in cubin of "
#define FAKE_TENSOR_SPAN (1ull << 30)  /* fake device addresses this far apart: never read */
#define TABLE_AT (6 * FAKE_TENSOR_SPAN)
#define DESCALE_AT (7 * FAKE_TENSOR_SPAN)
#define WORKSPACE_AT (8 * FAKE_TENSOR_SPAN)
#define PAGE 16
/* The stand-in records the fp8 block of an "e4m3kv" entry from its third
 * argument, and the second block of an "fat_fwd_mma80" one. */
#define ENTRY "fat_fwd_mma80_e4m3kv"

_Static_assert(sizeof(fat_fwd_fp8_params) == 48, "stand_in_cuda.c's STAND_IN_FP8_BYTES");

/* The table's winners (bf16-e4m3kv causal d128, 4 query heads per K/V
 * head, one query a sequence). */
typedef struct winner {
  const char *name, *family, *params;
  int seqlen_k;
  int page_size; /* 0: a contiguous cache */
  int fp8_abi;   /* its source carries today's FAT_ABI_FP8_VERSION line */
} winner;
static const winner WINNERS[] = {
    {"fwd.splitkv.bf16-e4m3kv.d128.causal.m64n64w4s2.g1x0", "splitkv",
     "BLOCK_M=64 BLOCK_N=64 PACK_GQA=1 SPLITS=0 STAGES=2 WARPS=4", 4096, 0, 1},
    {"fwd.splitkv.bf16-e4m3kv.d128.causal.m64n128w4s2.g1x0", "splitkv",
     "BLOCK_M=64 BLOCK_N=128 PACK_GQA=1 SPLITS=0 STAGES=2 WARPS=4", 1024, 0, 0},
    {"fwd.paged.bf16-e4m3kv.d128.causal.m64n64w4s2.g1x0", "paged",
     "BLOCK_M=64 BLOCK_N=64 PACK_GQA=1 SPLITS=0 STAGES=2 WARPS=4", 4096, PAGE, 1},
};
#define N_WINNERS (sizeof WINNERS / sizeof WINNERS[0])

static const char *(*stand_in_recent_fp8)(int back, void *out, size_t n);
static const char *(*stand_in_recent_launch)(int back, unsigned grid[3], void *second, size_t n);

/* Stores winner W in the database at PATH as test_runtime_fp8 does: a
 * stand-in source (today's ABI lines, the fp8 one as W says), a passing
 * check, a timing and a build whose cubin is CUBIN_PREFIX + its name. 0,
 * or -1 when the schema refuses a bf16-e4m3kv problem or variant. */
static int put_winner(const char *path, const winner *w, const char *arch) {
  char err[1024], source[512], cubin[256];
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_gpu_info g = {.cc_major = 9, .cc_minor = 0, .sm_count = H200_SMS, .driver_version = 13000,
                    .nvrtc_major = 13, .nvrtc_minor = 0, .smem_per_block_optin = 232448};
  snprintf(g.name, sizeof g.name, "%s", H200);
  fat_problem p;
  fat_tune_problem(FAT_BF16_E4M3KV, FAT_MASK_CAUSAL, HEAD_DIM, 1, w->seqlen_k, HEADS / HEADS_K, 8, &p);
  p.page_size = w->page_size;
  snprintf(source, sizeof source, "// stand-in source of %s\n#define FAT_ABI_VERSION %d\n"
           "#define FAT_ABI_KV_VERSION %d\n#define FAT_ABI_FP8_VERSION %d\n", w->name,
           FAT_ABI_VERSION, FAT_ABI_KV_VERSION, w->fp8_abi ? FAT_ABI_FP8_VERSION : FAT_ABI_FP8_VERSION + 1);
  fat_variant v = {.name = (char *)w->name, .family = (char *)w->family, .source = source,
                   .params = (char *)w->params, .entry = ENTRY, .direction = FAT_FWD,
                   .dtype = FAT_BF16_E4M3KV, .mask = FAT_MASK_CAUSAL, .head_dim = HEAD_DIM,
                   .block_m = 64, .threads = 128, .smem_bytes = 49152};
  fat_sha256_hex(source, strlen(source), v.hash);
  fat_check c = {.batch = 2, .heads = 8, .seqlen_q = 1, .seqlen_k = 1000, .rel_l2 = 0.01,
                 .max_abs = 0.02, .lse_max_abs = 1e-3, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = 20, .median_ms = 0.05, .min_ms = 0.045, .max_ms = 0.06, .p10_ms = 0.047,
                  .p90_ms = 0.055, .tflops = 1.0, .sm_clock_mhz = 1755};
  const int n = snprintf(cubin, sizeof cubin, CUBIN_PREFIX "%s", w->name) + 1;
  fat_build b = {.ok = 1, .cubin = (unsigned char *)cubin, .cubin_size = (size_t)n};
  snprintf(b.arch, sizeof b.arch, "%s", arch);
  fat_sha256_hex(cubin, (size_t)n, b.key);
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  if (fat_db_put_problem(db, &p, &pid) || fat_db_put_variant(db, &v, &vid)) {
    printf("skipped: the schema refuses a bf16-e4m3kv problem or variant (%s)\n", fat_db_errmsg(db));
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

/* A decoding step of SEQLEN_K keys on fake device addresses: bf16 q and o,
 * e4m3 k and v with one descale factor each at DESCALE_AT; paged in pages
 * of PAGE_SIZE (0: a contiguous cache). */
static fat_attn_args step(int seqlen_k, int page_size) {
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = BATCH, a.heads = HEADS, a.heads_k = HEADS_K, a.seqlen_q = 1, a.seqlen_k = seqlen_k;
  a.head_dim = HEAD_DIM, a.dtype = FAT_ATTN_BF16_E4M3KV, a.mask = FAT_ATTN_MASK_CAUSAL;
  a.q = (void *)(uintptr_t)(1 * FAKE_TENSOR_SPAN), a.k = (void *)(uintptr_t)(2 * FAKE_TENSOR_SPAN);
  a.v = (void *)(uintptr_t)(3 * FAKE_TENSOR_SPAN), a.o = (void *)(uintptr_t)(4 * FAKE_TENSOR_SPAN);
  a.lse = (float *)(uintptr_t)(5 * FAKE_TENSOR_SPAN);
  fat_attn_args_contiguous(&a);
  a.k_descale = (const float *)(uintptr_t)DESCALE_AT;
  a.v_descale = (const float *)(uintptr_t)(DESCALE_AT + 256);
  if (page_size) {
    a.block_table = (const int *)(uintptr_t)TABLE_AT, a.page_size = page_size;
    a.block_table_stride = (seqlen_k + page_size - 1) / page_size;
    a.num_pages = BATCH * a.block_table_stride;
    a.k_batch_stride = a.v_batch_stride = (long long)page_size * a.k_row_stride;
  }
  return a;
}

/* The fp8 block a launch of A must carry: A's descale fields, q's none. */
static int block_is(const fat_fwd_fp8_params *got, const fat_attn_args *a) {
  const fat_fwd_fp8_params want = {
      .descale = {NULL, a->k_descale, a->v_descale},
      .batch_stride = {0, a->k_descale_batch_stride, a->v_descale_batch_stride},
      .head_stride = {0, a->k_descale_head_stride, a->v_descale_head_stride}};
  return !memcmp(got, &want, sizeof want);
}

/* FAT_ERR_UNSUPPORTED or _INVALID_ARGUMENT WANT from fat_attention_check
 * of A on C, with exactly message MSG. */
static void refused(int line, fat_context *c, const fat_attn_args *a, fat_status want, const char *msg) {
  const fat_status st = fat_attention_check(c, a);
  if (!check_record(st == want && !strcmp(fat_context_error(c), msg)))
    fprintf(stderr, "%s:%d: check gave %d \"%s\",\n  want %d \"%s\"\n", __FILE__, line, (int)st,
            fat_context_error(c), (int)want, msg);
}

/* The refusals that need no kernel of the dtype: a q_descale (q is bf16)
 * on C, and an A100 (compute capability 8.0), before any kernel is looked
 * for. */
static void refusals_before_kernels(fat_context *c) {
  fat_attn_args a = step(1024, 0);
  a.q_descale = (const float *)(uintptr_t)(DESCALE_AT + 512);
  refused(__LINE__, c, &a, FAT_ERR_INVALID_ARGUMENT, "q_descale 0x1c0000200: dtype bf16-e4m3kv has a "
          "bf16 q, which takes no descale factor (k_descale and v_descale are its cache's); set it NULL");
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *a100 = NULL;
  const char *none[1] = {"/nonexistent/tables.db"};
  o.user_db = "", o.tables = none, o.n_tables = 1, o.gpu_name = "NVIDIA A100-SXM4-80GB";
  o.gpu_cc_major = 8, o.gpu_cc_minor = 0, o.gpu_sm_count = 108;
  REQUIRE_EXIT(fat_context_open(&a100, &o) == FAT_OK);
  a = step(1024, 0);
  fat_choice ch = FAT_CHOICE_INIT;
  CHECK_INT(fat_attention_select(a100, &a, &ch), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(a100), "dtype bf16-e4m3kv: its kernels need compute capability 8.9 or "
            "newer (sm_89's e4m3 conversions); NVIDIA A100-SXM4-80GB is sm_80 (compute capability 8.0)");
  fat_context_close(a100);
}

/* The refusals of what the kernels cannot read, once a kernel of the
 * dtype serves d128 (and so d96): head dim 72 on the d96 template; k and
 * v strides in bytes, multiples of 16 (q's and o's, bf16, of 8). */
static void refusals_of_layout(fat_context *c) {
  fat_status st;
  fat_attn_args a = step(1024, 0);
  a.head_dim = 72;
  /* rows 80 elements apart, strides every tensor's load rule admits */
  a.q_head_stride = a.o_head_stride = a.k_head_stride = a.v_head_stride = 80;
  a.q_row_stride = a.o_row_stride = HEADS * 80, a.k_row_stride = a.v_row_stride = HEADS_K * 80;
  a.q_batch_stride = a.o_batch_stride = HEADS * 80;
  a.k_batch_stride = a.v_batch_stride = 1024LL * HEADS_K * 80;
  refused(__LINE__, c, &a, FAT_ERR_UNSUPPORTED, "dtype bf16-e4m3kv: head_dim 72 runs on the d96 "
          "template, whose K and V rows are read in chunks of 16 e4m3 elements (16 bytes): a head "
          "dim below its template must be a multiple of 16");
  a.head_dim = 80; /* a multiple of 16 reads whole chunks */
  CHECK_INT(fat_attention_check(c, &a), FAT_OK);
  a = step(1024, 0);
  a.k_head_stride = 136, a.k_row_stride = HEADS_K * 136, a.k_batch_stride = 1024LL * HEADS_K * 136;
  refused(__LINE__, c, &a, FAT_ERR_INVALID_ARGUMENT, "k_head_stride 136: must be a non-negative "
          "multiple of 16");
  a = step(1024, 0);
  a.v_row_stride = HEADS_K * HEAD_DIM + 8, a.v_batch_stride = 1024LL * (HEADS_K * HEAD_DIM + 16);
  refused(__LINE__, c, &a, FAT_ERR_INVALID_ARGUMENT, "v_row_stride 1032: must be a non-negative "
          "multiple of 16");
  a = step(1024, 0); /* 136 bf16 elements are 272 bytes: q's and o's loads are whole */
  a.q_head_stride = a.o_head_stride = 136;
  a.q_row_stride = a.o_row_stride = a.q_batch_stride = a.o_batch_stride = HEADS * 136;
  st = fat_attention_check(c, &a);
  CHECK_WHY(st == FAT_OK, "%s", fat_context_error(c));
}

int main(void) {
  char dir[] = "/tmp/fatune-kv8-XXXXXX", path[256], arch[16];
  const char *driver = use_stand_in_driver();
  if (!driver) return 1;
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tables.db", dir);
  fat_arch_for_cc(9, 0, arch);
  int rc = SKIP;

  /* First without a table: what needs no kernel, and whether this build
   * has a kernel of the dtype. */
  const char *const tables[] = {path};
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *c = NULL;
  o.user_db = "", o.tables = tables, o.n_tables = 1, o.no_builtin = 1;
  fat_status st = fat_context_open(&c, &o);
  if (st) fprintf(stderr, "open: %s\n", fat_context_error(c));
  REQUIRE_EXIT(st == FAT_OK);
  refusals_before_kernels(c);
  fat_attn_args a = step(1024, 0);
  if (fat_attention_check(c, &a) == FAT_ERR_UNSUPPORTED) {
    CHECK_STR(fat_context_error(c), "dtype bf16-e4m3kv: this libfatune has no bf16-e4m3kv kernel "
              "built in (none of its built-in defaults is of that dtype)");
    printf("skipped: no bf16-e4m3kv kernel is built in (the decoding families' defaults of it); "
           "the layout refusals, the lookup and the launch wait for them\n");
    goto out;
  }
  refusals_of_layout(c);
  fat_context_close(c);
  c = NULL;
  for (size_t i = 0; i < N_WINNERS; i++)
    if (put_winner(path, &WINNERS[i], arch)) goto out;
  rc = 0;

  REQUIRE_EXIT(fat_context_open(&c, &o) == FAT_OK);
  void *lib = dlopen(driver, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE_EXIT(lib);
  *(void **)&stand_in_recent_fp8 = dlsym(lib, "stand_in_recent_fp8");
  *(void **)&stand_in_recent_launch = dlsym(lib, "stand_in_recent_launch");
  REQUIRE_EXIT(stand_in_recent_fp8 && stand_in_recent_launch);

  /* The stale exact winner is passed over for today's nearest one. */
  fat_choice ch = FAT_CHOICE_INIT;
  a = step(1024, 0);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, WINNERS[0].name);
  CHECK_INT(ch.match, FAT_MATCH_NEAREST);
  CHECK_INT(ch.bucket_seqlen_k, 4096);
  /* An fp16-e4m3kv step of the shape: no winner of its own, no built-in. */
  fat_attn_args f = a;
  f.dtype = FAT_ATTN_FP16_E4M3KV;
  CHECK_INT(fat_attention_select(c, &f, &ch), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(c), "no tuned fwd winner for fp16-e4m3kv causal head_dim 128 on NVIDIA "
            "H200 and the built-in default is disabled");

  /* The launch: one factor per tensor, the block third, then the combine
   * kernel of the splits the launch chose, with the same arguments. */
  size_t need = 0;
  CHECK_INT(fat_attention_fwd_workspace(c, &a, &need), FAT_OK);
  a.workspace = (void *)(uintptr_t)WORKSPACE_AT, a.workspace_bytes = need;
  fat_choice ran = FAT_CHOICE_INIT;
  fat_fwd_fp8_params got;
  fat_fwd_kv_params kv;
  st = fat_attention_fwd(c, &a, NULL, &ran);
  if (st) fprintf(stderr, "launch: %s\n", fat_context_error(c));
  CHECK_INT(st, FAT_OK);
  CHECK_STR(ran.variant, WINNERS[0].name);
  CHECK_STR(stand_in_recent_fp8(1, &got, sizeof got), ENTRY);
  CHECK(block_is(&got, &a));
  CHECK(got.descale[0] == NULL && got.batch_stride[1] == 0 && got.head_stride[2] == 0);
  const int splits = fat_fwd_launch_splits(BATCH * HEADS_K, 1024, H200_SMS);
  CHECK(splits > 1); /* so that the combine kernel runs */
  CHECK_STR(stand_in_recent_launch(1, NULL, &kv, sizeof kv), ENTRY);
  CHECK(kv.block_table == NULL);
  CHECK_INT(kv.splits, splits);
  CHECK_STR(stand_in_recent_fp8(0, &got, sizeof got), ENTRY "_combine");
  CHECK(block_is(&got, &a));
  /* FlashAttention-3's (batch, heads_k) factors. */
  a.k_descale_batch_stride = a.v_descale_batch_stride = HEADS_K;
  a.k_descale_head_stride = a.v_descale_head_stride = 1;
  st = fat_attention_fwd(c, &a, NULL, &ran);
  if (st) fprintf(stderr, "launch: %s\n", fat_context_error(c));
  CHECK_INT(st, FAT_OK);
  CHECK_STR(stand_in_recent_fp8(1, &got, sizeof got), ENTRY);
  CHECK(block_is(&got, &a));
  CHECK(got.batch_stride[1] == HEADS_K && got.head_stride[2] == 1);

  /* A paged step: the paged winner, its table second, the factors third. */
  a = step(4096, PAGE);
  CHECK_INT(fat_attention_select(c, &a, &ch), FAT_OK);
  CHECK_STR(ch.variant, WINNERS[2].name);
  CHECK_INT(ch.bucket_page_size, PAGE);
  a.workspace = NULL, a.workspace_bytes = 0; /* one split, no combine */
  st = fat_attention_fwd(c, &a, NULL, &ran);
  if (st) fprintf(stderr, "launch: %s\n", fat_context_error(c));
  CHECK_INT(st, FAT_OK);
  CHECK_STR(ran.variant, WINNERS[2].name);
  CHECK_STR(stand_in_recent_launch(0, NULL, &kv, sizeof kv), ENTRY);
  CHECK((uintptr_t)kv.block_table == TABLE_AT && kv.page_shift == 4 && kv.splits == 1);
  CHECK_STR(stand_in_recent_fp8(0, &got, sizeof got), ENTRY);
  CHECK(block_is(&got, &a));
  dlclose(lib);

out:
  fat_context_close(c);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  /* Skipped only when no check failed before the skip. */
  if (rc == SKIP && !check_failed) {
    printf("test_runtime_kv8: %d passed, 0 failed (the rest skipped)\n", check_passed);
    return SKIP;
  }
  return check_summary("test_runtime_kv8");
}

/* SPDX-License-Identifier: MIT */
/* Bad input to the C API, without a GPU (issue 6, "bad input, everywhere"):
 * fat_attention_check -- what fat_attention_fwd runs before it selects or
 * launches -- on an offline H200 context, one bad value at a time, each
 * refused with its status and the exact message naming the value; and
 * every public struct of another struct_size refused by name. The
 * pointers are never dereferenced, so made-up addresses serve. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include "fatune.h"
#include "fwd_launch.h"
#include "check.h"

static int n_bad;

/* Where the made-up tensors lie: far enough apart not to overlap. */
#define Q_AT 0x1000000
#define K_AT 0x2000000
#define V_AT 0x3000000
#define O_AT 0x4000000
#define LSE_AT 0x5000000
#define DO_AT 0x6000000
#define DQ_AT 0x7000000
#define DK_AT 0x8000000
#define DV_AT 0x9000000
#define WS_AT 0xA000000
#define CU_Q_AT 0xB000000 /* cu_seqlens_q */
#define CU_K_AT 0xB001000 /* cu_seqlens_k */
#define BT_AT 0xC000000   /* a paged cache's block table */
#define DS_AT 0xD000000   /* e4m3's descale factors */

static fat_context *ctx;

/* batch 2, 4 query heads over 2 K/V heads, seqlen 64 x 128, d64, contiguous. */
static fat_attn_args good(void) {
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.q = (const void *)Q_AT, a.k = (const void *)K_AT, a.v = (const void *)V_AT;
  a.o = (void *)O_AT, a.lse = (float *)LSE_AT;
  a.batch = 2, a.heads = 4, a.heads_k = 2, a.seqlen_q = 64, a.seqlen_k = 128, a.head_dim = 64;
  a.dtype = FAT_ATTN_BF16, a.mask = FAT_ATTN_MASK_CAUSAL;
  fat_attn_args_contiguous(&a);
  return a;
}

/* good() decoding from a paged cache: one query a sequence, its 128 keys
 * in 8 pages of 16 (of a pool of 20) listed by a block table of 8 entries
 * a sequence. */
static fat_attn_args good_paged(void) {
  fat_attn_args a = good();
  a.seqlen_q = 1;
  fat_attn_args_contiguous(&a);
  a.block_table = (const int *)BT_AT, a.block_table_stride = 8, a.page_size = 16, a.num_pages = 20;
  a.k_batch_stride = a.v_batch_stride = (long long)a.page_size * a.k_row_stride; /* a page */
  return a;
}

static void expect(int line, const fat_attn_args *a, fat_status want, const char *msg) {
  fat_status st = fat_attention_check(ctx, a);
  n_bad += want != FAT_OK;
  /* check_record rather than CHECK: a failure names the caller's LINE. */
  if (!check_record(st == want && (!msg || !strcmp(fat_context_error(ctx), msg))))
    fprintf(stderr, "%s:%d: check gave %d \"%s\",\n  want %d \"%s\"\n", __FILE__, line, (int)st,
            fat_context_error(ctx), (int)want, msg ? msg : "(any)");
}
#define CHECK_OK(a) expect(__LINE__, a, FAT_OK, NULL)
#define CHECK_BAD(a, msg) expect(__LINE__, a, FAT_ERR_INVALID_ARGUMENT, msg)

/* The backward of good(): its gradients and a workspace of the size asked for. */
static fat_attn_bwd_args good_bwd(void) {
  fat_attn_bwd_args b = FAT_ATTN_BWD_ARGS_INIT;
  b.fwd = good();
  b.dout = (const void *)DO_AT, b.dq = (void *)DQ_AT, b.dk = (void *)DK_AT, b.dv = (void *)DV_AT;
  fat_attn_bwd_args_contiguous(&b);
  b.workspace = (void *)WS_AT;
  REQUIRE_EXIT(fat_attention_bwd_workspace(ctx, &b, &b.workspace_bytes) == FAT_OK);
  return b;
}

static void expect_bwd(int line, const fat_attn_bwd_args *b, fat_status want, const char *msg) {
  fat_status st = fat_attention_bwd_check(ctx, b);
  n_bad += want != FAT_OK;
  if (!check_record(st == want && (!msg || !strcmp(fat_context_error(ctx), msg))))
    fprintf(stderr, "%s:%d: backward check gave %d \"%s\",\n  want %d \"%s\"\n", __FILE__, line,
            (int)st, fat_context_error(ctx), (int)want, msg ? msg : "(any)");
}
#define CHECK_BWD_OK(b) expect_bwd(__LINE__, b, FAT_OK, NULL)
#define CHECK_BWD_BAD(b, msg) expect_bwd(__LINE__, b, FAT_ERR_INVALID_ARGUMENT, msg)

/* The library's version is the header's, in zstd's and SQLite's form. */
static void check_versions(void) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", FATUNE_VERSION_MAJOR, FATUNE_VERSION_MINOR,
           FATUNE_VERSION_PATCH);
  CHECK_STR(FATUNE_VERSION_STRING, want);
  CHECK_STR(fat_version_string(), want);
  CHECK_INT(FATUNE_VERSION_NUMBER,
            FATUNE_VERSION_MAJOR * 10000 + FATUNE_VERSION_MINOR * 100 + FATUNE_VERSION_PATCH);
  CHECK_INT(fat_version_number(), FATUNE_VERSION_NUMBER);
}

/* The refusal of a struct of another size, as fatune.h words it. */
static const char *size_message(const char *type, size_t got, size_t want, const char *init) {
  static char msg[512];
  snprintf(msg, sizeof msg, "%s.struct_size %zu: this libfatune (%s) has sizeof(%s) %zu; "
           "initialise it with %s, built against this library's fatune.h", type, got,
           FATUNE_VERSION_STRING, type, want, init);
  return msg;
}

/* Every public struct of another struct_size -- zero, as from `= {0}`, or
 * a shorter struct of an older header -- is refused by name, and nothing
 * is written into it. OPTS: the context's (good) options. */
static void check_struct_sizes(const fat_context_options *opts) {
  const size_t args_size = sizeof(fat_attn_args), bwd_size = sizeof(fat_attn_bwd_args);
  const size_t choice_size = sizeof(fat_choice), opts_size = sizeof(fat_context_options);
  fat_attn_args a = good();
  a.struct_size = 0;
  CHECK_BAD(&a, size_message("fat_attn_args", 0, args_size, "FAT_ATTN_ARGS_INIT"));
  a.struct_size = args_size - 16; /* a shorter struct, as an older header declares it */
  CHECK_BAD(&a, size_message("fat_attn_args", args_size - 16, args_size, "FAT_ATTN_ARGS_INIT"));
  a.q_row_stride = 7;
  fat_attn_args_contiguous(&a);
  CHECK_INT(a.q_row_stride, 7);

  fat_choice ch = FAT_CHOICE_INIT;
  a = good();
  CHECK_INT(fat_attention_select(ctx, &a, &ch), FAT_OK);
  CHECK_INT((long long)ch.struct_size, (long long)choice_size);
  fat_choice old = {0};
  snprintf(old.variant, sizeof old.variant, "untouched");
  CHECK_INT(fat_attention_select(ctx, &a, &old), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(ctx), size_message("fat_choice", 0, choice_size, "FAT_CHOICE_INIT"));
  CHECK_STR(old.variant, "untouched");
  CHECK_INT(fat_context_last_choice(ctx, &old), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(ctx), size_message("fat_choice", 0, choice_size, "FAT_CHOICE_INIT"));
  /* A launch checks its RAN before anything else, even on this offline context. */
  CHECK_INT(fat_attention_fwd(ctx, &a, NULL, &old), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(ctx), size_message("fat_choice", 0, choice_size, "FAT_CHOICE_INIT"));
  CHECK_STR(old.variant, "untouched");
  n_bad += 4;

  fat_attn_bwd_args b = good_bwd();
  b.struct_size = 0;
  expect_bwd(__LINE__, &b, FAT_ERR_INVALID_ARGUMENT,
             size_message("fat_attn_bwd_args", 0, bwd_size, "FAT_ATTN_BWD_ARGS_INIT"));
  CHECK_INT(fat_attention_bwd_select(ctx, &b, &ch), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(ctx),
            size_message("fat_attn_bwd_args", 0, bwd_size, "FAT_ATTN_BWD_ARGS_INIT"));
  size_t bytes = 12345;
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &bytes), FAT_ERR_INVALID_ARGUMENT);
  CHECK_INT((long long)bytes, 12345);
  CHECK_INT(fat_attention_bwd(ctx, &b, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(ctx),
            size_message("fat_attn_bwd_args", 0, bwd_size, "FAT_ATTN_BWD_ARGS_INIT"));
  b.do_row_stride = 7;
  fat_attn_bwd_args_contiguous(&b);
  CHECK_INT(b.do_row_stride, 7);
  b = good_bwd();
  b.fwd.struct_size = 0; /* the embedded forward is checked too */
  expect_bwd(__LINE__, &b, FAT_ERR_INVALID_ARGUMENT,
             size_message("fat_attn_args", 0, args_size, "FAT_ATTN_ARGS_INIT"));
  b.do_row_stride = 7;
  fat_attn_bwd_args_contiguous(&b);
  CHECK_INT(b.do_row_stride, 7);
  n_bad += 3;

  fat_context_options o = *opts;
  fat_context *c = NULL;
  o.struct_size = opts_size - 8;
  CHECK_INT(fat_context_open(&c, &o), FAT_ERR_INVALID_ARGUMENT);
  REQUIRE_EXIT(c != NULL);
  CHECK_STR(fat_context_error(c), size_message("fat_context_options", opts_size - 8, opts_size,
                                               "FAT_CONTEXT_OPTIONS_INIT"));
  fat_context_close(c);
  n_bad++;
}

/* Bounds at the edges of the types: a pointer in the upper half of the
 * address space (a bound once computed as UINTPTR_MAX / 2 - ptr wrapped
 * and passed it), a workspace of SIZE_MAX bytes, index arrays that are not
 * int32-aligned or lie in an output, workspace sizes past size_t (once
 * wrapped to a small number with FAT_OK), the head-dim query without a
 * buffer, and an offline GPU of no real compute capability. */
static void edges(void) {
  fat_attn_args a = good();
  a.q = (const void *)(uintptr_t)0xfffffffffffff000ull;
  CHECK_BAD(&a, "q 0xfffffffffffff000: its 32768 elements run past the end of the address space");
  a = good(), a.lse = (float *)(uintptr_t)0xfffffffffffffc00ull; /* 1 KiB below the top, 2 KiB of rows */
  CHECK_BAD(&a, "lse 0xfffffffffffffc00: its batch x heads x seqlen_q floats run past the end of "
                "the address space");
  a = good(), a.workspace = (void *)WS_AT, a.workspace_bytes = SIZE_MAX;
  CHECK_BAD(&a, "workspace 0xa000000: its 18446744073709551615 bytes run past the end of the "
                "address space");
  /* Variable-length index arrays: int32, beside the outputs. */
  a = good(), a.cu_seqlens_q = (const int *)CU_Q_AT, a.cu_seqlens_k = (const int *)CU_K_AT;
  a.total_q = 100, a.total_k = 200;
  CHECK_OK(&a);
  a.cu_seqlens_q = (const int *)(CU_Q_AT + 2);
  CHECK_BAD(&a, "cu_seqlens_q 0xb000002 is not 4-byte aligned (int32 entries)");
  a.cu_seqlens_q = (const int *)CU_Q_AT, a.cu_seqlens_k = (const int *)(CU_K_AT + 1);
  CHECK_BAD(&a, "cu_seqlens_k 0xb001001 is not 4-byte aligned (int32 entries)");
  a.cu_seqlens_k = (const int *)CU_K_AT, a.seqused_k = (const int *)(CU_K_AT + 0x102);
  CHECK_BAD(&a, "seqused_k 0xb001102 is not 4-byte aligned (int32 entries)");
  a.seqused_k = (const int *)(uintptr_t)0xfffffffffffffffcull;
  CHECK_BAD(&a, "seqused_k 0xfffffffffffffffc: its 2 entries run past the end of the address "
                "space");
  a.seqused_k = (const int *)(O_AT + 64);
  CHECK_BAD(&a, "seqused_k [0x4000040, +8 bytes) overlaps o [0x4000000, +51200 bytes)");
  a.seqused_k = NULL, a.cu_seqlens_q = (const int *)LSE_AT;
  CHECK_BAD(&a, "cu_seqlens_q [0x5000000, +12 bytes) overlaps lse [0x5000000, +1600 bytes)");
  /* Workspace sizes that do not fit in a size_t are refused, not wrapped. */
  fat_attn_bwd_args b = good_bwd();
  b.fwd.batch = b.fwd.heads = b.fwd.heads_k = b.fwd.seqlen_q = b.fwd.seqlen_k = INT_MAX;
  size_t bytes = 1;
  n_bad++;
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &bytes), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(ctx), "batch 2147483647 x heads 2147483647 x seqlen_q 2147483647: "
            "the workspace would be more bytes than a size_t holds");
  CHECK_INT((long long)bytes, 1);
  b.deterministic = 1;
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &bytes), FAT_ERR_INVALID_ARGUMENT);
  /* INT_MAX² rows: their D just fits in a size_t (2^64 - 2^34 + 4 bytes),
   * their accumulator does not -- a deterministic call's too, since it
   * may be served a variant that sums into one. */
  b.fwd.batch = b.fwd.heads = b.fwd.heads_k = INT_MAX, b.fwd.seqlen_q = b.fwd.seqlen_k = 1;
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &bytes), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(ctx), "batch 2147483647 x heads 2147483647 x seqlen_q 1: the workspace "
            "would be more bytes than a size_t holds");
  CHECK_INT((long long)bytes, 1);
  /* 8 GiB of D, 512 GiB of accumulator and ceil(INT_MAX / 64) semaphores: fits. */
  b.fwd.batch = b.fwd.heads = b.fwd.heads_k = 1, b.fwd.seqlen_q = b.fwd.seqlen_k = INT_MAX;
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &bytes), FAT_OK);
  CHECK((long long)bytes == ((long long)INT_MAX * 4 + 255) / 256 * 256 + (long long)INT_MAX * 64 * 4 +
                                ((long long)INT_MAX + 63) / 64 * 4);
  const fat_fwd_geometry split = {.block_m = 64, .threads = 128, .splits = 4, .head_dim = 128};
  CHECK(fat_fwd_workspace_bytes(&split, INT_MAX, INT_MAX, INT_MAX) == SIZE_MAX);
  CHECK_INT((long long)fat_fwd_workspace_bytes(&split, 2, 4, 64), 4 * 2 * 4 * 64 * (128 + 1) * 4);
  /* The head dims with a template: no buffer asks how many. */
  int dims[8] = {0};
  CHECK_INT(fat_supported_head_dims(NULL, 5), 6);
  CHECK_INT(fat_supported_head_dims(NULL, 0), 6);
  CHECK_INT(fat_supported_head_dims(dims, -3), 6);
  CHECK_INT(dims[0], 0);
  CHECK_INT(fat_supported_head_dims(dims, 3), 3);
  CHECK(dims[0] == 32 && dims[1] == 64 && dims[2] == 96 && dims[3] == 0);
  /* An offline GPU needs a compute capability that exists. */
  const int ccs[][2] = {{9, -5}, {9, 10}, {0, 0}, {100, 0}};
  for (size_t i = 0; i < sizeof ccs / sizeof ccs[0]; i++) {
    fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
    fat_context *c = NULL;
    char want[256];
    o.user_db = "", o.gpu_name = "GPU", o.gpu_cc_major = ccs[i][0], o.gpu_cc_minor = ccs[i][1];
    o.gpu_sm_count = 132;
    n_bad++;
    CHECK_INT(fat_context_open(&c, &o), FAT_ERR_INVALID_ARGUMENT);
    snprintf(want, sizeof want, "offline GPU 'GPU' compute capability %d.%d, 132 SMs: give a name, "
             "a compute capability (major 1 to 99, minor 0 to 9) and an SM count of at least 1",
             ccs[i][0], ccs[i][1]);
    CHECK_STR(fat_context_error(c), want);
    fat_context_close(c);
  }
}

/* good() in e4m3 at d128 (q, k and v of one byte; o bf16), with one
 * descale factor per tensor. */
static fat_attn_args good_e4m3(void) {
  fat_attn_args a = good();
  a.dtype = FAT_ATTN_E4M3, a.head_dim = 128;
  fat_attn_args_contiguous(&a);
  a.q_descale = (const float *)DS_AT, a.k_descale = (const float *)(DS_AT + 64);
  a.v_descale = (const float *)(DS_AT + 128);
  return a;
}

/* The status and message of CTX's fat_attention_select for A. */
static void expect_select(int line, fat_context *c, const fat_attn_args *a, fat_status want,
                          const char *msg) {
  fat_choice ch = FAT_CHOICE_INIT;
  fat_status st = fat_attention_select(c, a, &ch);
  n_bad += want != FAT_OK;
  if (!check_record(st == want && (!msg || !strcmp(fat_context_error(c), msg))))
    fprintf(stderr, "%s:%d: select gave %d \"%s\",\n  want %d \"%s\"\n", __FILE__, line, (int)st,
            fat_context_error(c), (int)want, msg ? msg : "(any)");
}

/* e4m3 (issue 26): the descale factors' rules for every dtype, the
 * refusals of what the e4m3 forward does not serve (a paged cache, the
 * backward, a GPU other than compute capability 9.0), and, where this
 * build has e4m3 kernels built in, its tensors' one-byte strides and
 * spans and its factors' pointers. */
static void e4m3(void) {
  fat_attn_args a = good();
  /* The 16-bit dtypes take no factors. */
  a.q_descale = (const float *)DS_AT;
  CHECK_BAD(&a, "q_descale 0xd000000: descale factors are fp8 inputs' (e4m3, fp16-e4m3kv, "
                "bf16-e4m3kv); with dtype bf16 set it NULL");
  a = good(), a.dtype = FAT_ATTN_FP16, a.v_descale = (const float *)DS_AT;
  CHECK_BAD(&a, "v_descale 0xd000000: descale factors are fp8 inputs' (e4m3, fp16-e4m3kv, "
                "bf16-e4m3kv); with dtype fp16 set it NULL");
  a = good(), a.k_descale_head_stride = 1;
  CHECK_BAD(&a, "k_descale_batch_stride 0, k_descale_head_stride 1: descale strides are fp8 inputs'; "
                "with dtype bf16 set them 0");
  /* e4m3's strides: >= 0, only with their factor, every index an int. */
  a = good_e4m3(), a.q_descale_batch_stride = -2, a.q_descale_head_stride = 1;
  CHECK_BAD(&a, "q_descale_batch_stride -2, q_descale_head_stride 1: must be >= 0 (0 and 0: one "
                "factor for the tensor)");
  a = good_e4m3(), a.v_descale = NULL, a.v_descale_batch_stride = 2, a.v_descale_head_stride = 1;
  CHECK_BAD(&a, "v_descale_batch_stride 2, v_descale_head_stride 1 with v_descale NULL: strides of "
                "a factor not given; set them 0 (NULL is a factor of 1)");
  a = good_e4m3(), a.k_descale_batch_stride = INT_MAX, a.k_descale_head_stride = 1;
  CHECK_BAD(&a, "k_descale_batch_stride 2147483647, k_descale_head_stride 1: batch 2 x heads_k 2 "
                "factors reach index 2147483648, past 2147483647");
  /* What the e4m3 forward does not serve. */
  a = good_e4m3(), a.seqlen_q = 1;
  fat_attn_args_contiguous(&a);
  a.block_table = (const int *)BT_AT, a.block_table_stride = 8, a.page_size = 16, a.num_pages = 20;
  a.k_batch_stride = a.v_batch_stride = (long long)a.page_size * a.k_row_stride;
  expect(__LINE__, &a, FAT_ERR_UNSUPPORTED, "dtype e4m3 with block_table 0xc000000: a paged cache "
         "takes fp16 or bf16 (the e4m3 forward reads a contiguous K/V cache)");
  fat_attn_bwd_args b = good_bwd();
  b.fwd = good_e4m3();
  const char *no_bwd = "dtype e4m3: the backward takes fp16 or bf16 (the e4m3 forward has no "
                       "backward yet)";
  expect_bwd(__LINE__, &b, FAT_ERR_UNSUPPORTED, no_bwd);
  size_t bytes = 7;
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &bytes), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(ctx), no_bwd);
  CHECK_INT((long long)bytes, 7);
  CHECK_INT(fat_attention_bwd_select(ctx, &b, &(fat_choice)FAT_CHOICE_INIT), FAT_ERR_UNSUPPORTED);
  CHECK_STR(fat_context_error(ctx), no_bwd);
  n_bad += 2;
  /* Hopper only: an A100 (and a Blackwell) is refused by its architecture,
   * before any kernel is looked for. */
  const struct { const char *name; int major, minor; const char *arch; } others[] = {
      {"NVIDIA A100-SXM4-80GB", 8, 0, "sm_80"}, {"NVIDIA B200", 10, 0, "sm_100"}};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
    fat_context *c = NULL;
    char want[256];
    o.user_db = "", o.gpu_name = others[i].name, o.gpu_cc_major = others[i].major;
    o.gpu_cc_minor = others[i].minor, o.gpu_sm_count = 108;
    const char *none[1] = {"/nonexistent/tables.db"};
    o.tables = none, o.n_tables = 1;
    REQUIRE_EXIT(fat_context_open(&c, &o) == FAT_OK);
    snprintf(want, sizeof want, "dtype e4m3: its kernels are Hopper's (sm_90a, compute capability "
             "9.0); %s is %s (compute capability %d.%d)", others[i].name, others[i].arch,
             others[i].major, others[i].minor);
    a = good_e4m3();
    expect_select(__LINE__, c, &a, FAT_ERR_UNSUPPORTED, want);
    size_t ws = 0;
    CHECK_INT(fat_attention_fwd_workspace(c, &a, &ws), FAT_ERR_UNSUPPORTED);
    CHECK_STR(fat_context_error(c), want);
    n_bad++;
    a = good(); /* bf16 still serves there */
    expect_select(__LINE__, c, &a, FAT_OK, NULL);
    fat_context_close(c);
  }
  /* The H200's: served by the built-in e4m3 defaults where this build has
   * them (the ws90 family's e4m3 variants), else refused by name. */
  a = good_e4m3();
  fat_status have = fat_attention_check(ctx, &a);
  if (have == FAT_ERR_UNSUPPORTED) {
    expect(__LINE__, &a, FAT_ERR_UNSUPPORTED, "dtype e4m3: this libfatune has no e4m3 kernel "
           "built in (none of its built-in defaults is of that dtype)");
    expect_select(__LINE__, ctx, &a, FAT_ERR_UNSUPPORTED, "dtype e4m3: this libfatune has no e4m3 "
                  "kernel built in (none of its built-in defaults is of that dtype)");
    printf("e4m3: no e4m3 kernel is built in; its tensor checks skipped until the generator's e4m3 "
           "defaults land\n");
    return;
  }
  CHECK_OK(&a);
  expect_select(__LINE__, ctx, &a, FAT_OK, NULL);
  a = good_e4m3(), a.q_descale = a.k_descale = a.v_descale = NULL; /* factors of 1 */
  CHECK_OK(&a);
  /* FlashAttention-3's (batch, heads_k) factors: 4 of each. */
  a = good_e4m3();
  a.q_descale_batch_stride = a.k_descale_batch_stride = a.v_descale_batch_stride = 2;
  a.q_descale_head_stride = a.k_descale_head_stride = a.v_descale_head_stride = 1;
  CHECK_OK(&a);
  a.k_descale = (const float *)(O_AT + 64);
  CHECK_BAD(&a, "k_descale [0x4000040, +16 bytes) overlaps o [0x4000000, +131072 bytes)");
  a = good_e4m3(), a.q_descale = (const float *)(DS_AT + 2);
  CHECK_BAD(&a, "q_descale 0xd000002 is not 4-byte aligned (fp32 factors)");
  a = good_e4m3(), a.v_descale = (const float *)(uintptr_t)0xfffffffffffffffcull;
  a.v_descale_batch_stride = 2, a.v_descale_head_stride = 1;
  CHECK_BAD(&a, "v_descale 0xfffffffffffffffc: its 4 entries run past the end of the address space");
  /* One-byte inputs: strides multiples of 16 elements, spans in bytes;
   * o is bf16, multiples of 8. */
  a = good_e4m3(), a.q_head_stride = 136, a.q_row_stride = 4 * 136, a.q_batch_stride = 64 * 4 * 136;
  CHECK_BAD(&a, "q_head_stride 136: must be a non-negative multiple of 16");
  a = good_e4m3(), a.o_head_stride = 136, a.o_row_stride = 4 * 136, a.o_batch_stride = 64 * 4 * 136;
  CHECK_OK(&a);
  a = good_e4m3(), a.o = (void *)(Q_AT + 65536); /* q: 65536 one-byte elements */
  CHECK_OK(&a);
  a.o = (void *)(Q_AT + 65536 - 16);
  CHECK_BAD(&a, "o [0x100fff0, +131072 bytes) overlaps q [0x1000000, +65536 bytes): the outputs "
                "must not alias another tensor");
  /* A head dim no e4m3 template serves. */
  a = good_e4m3(), a.head_dim = 264;
  fat_attn_args_contiguous(&a);
  expect(__LINE__, &a, FAT_ERR_UNSUPPORTED, NULL);
  const char *prefix = "dtype e4m3: head_dim 264 has no e4m3 template for mask causal (e4m3 templates: ";
  CHECK(!strncmp(fat_context_error(ctx), prefix, strlen(prefix)));
}

/* good() decoding from an fp8 K/V cache of DTYPE at d128: one query a
 * sequence (q and o 16-bit), k and v of one byte with one descale factor
 * each. */
static fat_attn_args good_kv8(fat_attn_dtype dtype) {
  fat_attn_args a = good();
  a.dtype = dtype, a.head_dim = 128, a.seqlen_q = 1;
  fat_attn_args_contiguous(&a);
  a.k_descale = (const float *)DS_AT, a.v_descale = (const float *)(DS_AT + 64);
  return a;
}

/* An fp8 K/V cache (issue 24): q_descale refused (its q is 16-bit), the
 * backward refused, a GPU below compute capability 8.9 refused by its
 * architecture before any kernel is looked for; and, where this build has
 * kernels of the dtype built in, q and o checked as 16-bit, k and v in
 * bytes (multiples of 16), a paged cache served, and a head dim narrower
 * than its template refused unless a multiple of 16. */
static void kv8(void) {
  static const fat_attn_dtype dtypes[] = {FAT_ATTN_FP16_E4M3KV, FAT_ATTN_BF16_E4M3KV};
  for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
    const fat_attn_dtype dt = dtypes[t];
    const char *name = dt == FAT_ATTN_FP16_E4M3KV ? "fp16-e4m3kv" : "bf16-e4m3kv";
    const char *q_type = dt == FAT_ATTN_FP16_E4M3KV ? "fp16" : "bf16";
    char want[512];
    fat_attn_args a = good_kv8(dt);
    a.q_descale = (const float *)(DS_AT + 128);
    snprintf(want, sizeof want, "q_descale 0xd000080: dtype %s has a %s q, which takes no descale "
             "factor (k_descale and v_descale are its cache's); set it NULL", name, q_type);
    CHECK_BAD(&a, want);
    a = good_kv8(dt), a.q_descale_batch_stride = 2, a.q_descale_head_stride = 1;
    snprintf(want, sizeof want, "q_descale_batch_stride 2, q_descale_head_stride 1: dtype %s's q "
             "takes no descale factor; set them 0", name);
    CHECK_BAD(&a, want);
    a = good_kv8(dt), a.v_descale = NULL, a.v_descale_head_stride = 1;
    CHECK_BAD(&a, "v_descale_batch_stride 0, v_descale_head_stride 1 with v_descale NULL: strides of "
                  "a factor not given; set them 0 (NULL is a factor of 1)");
    /* No fp8 backward. */
    fat_attn_bwd_args b = good_bwd();
    b.fwd = good_kv8(dt);
    snprintf(want, sizeof want, "dtype %s: the backward takes fp16 or bf16 (the %s forward has no "
             "backward yet)", name, name);
    expect_bwd(__LINE__, &b, FAT_ERR_UNSUPPORTED, want);
    /* Below compute capability 8.9 (an A100) refused by name; an L4 (8.9)
     * and an H200 (9.0) are not. */
    const struct { const char *name; int major, minor; const char *arch; } gpus[] = {
        {"NVIDIA A100-SXM4-80GB", 8, 0, "sm_80"}, {"NVIDIA A10", 8, 6, "sm_86"},
        {"NVIDIA L4", 8, 9, "sm_89"}};
    for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++) {
      fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
      fat_context *c = NULL;
      const char *none[1] = {"/nonexistent/tables.db"};
      o.user_db = "", o.tables = none, o.n_tables = 1, o.gpu_name = gpus[i].name;
      o.gpu_cc_major = gpus[i].major, o.gpu_cc_minor = gpus[i].minor, o.gpu_sm_count = 58;
      REQUIRE_EXIT(fat_context_open(&c, &o) == FAT_OK);
      snprintf(want, sizeof want, "dtype %s: its kernels need compute capability 8.9 or newer "
               "(sm_89's e4m3 conversions); %s is %s (compute capability %d.%d)", name, gpus[i].name,
               gpus[i].arch, gpus[i].major, gpus[i].minor);
      a = good_kv8(dt);
      fat_choice ch = FAT_CHOICE_INIT;
      const fat_status st = fat_attention_select(c, &a, &ch);
      if (gpus[i].major * 10 + gpus[i].minor < 89) {
        expect_select(__LINE__, c, &a, FAT_ERR_UNSUPPORTED, want);
        size_t ws = 0;
        CHECK_INT(fat_attention_fwd_workspace(c, &a, &ws), FAT_ERR_UNSUPPORTED);
        CHECK_STR(fat_context_error(c), want);
        n_bad++;
      } else {
        CHECK(st == FAT_OK || strcmp(fat_context_error(c), want));
      }
      fat_context_close(c);
    }
    /* The H200's: served by the built-in defaults of the dtype where this
     * build has them, else refused by name. */
    a = good_kv8(dt);
    if (fat_attention_check(ctx, &a) == FAT_ERR_UNSUPPORTED) {
      snprintf(want, sizeof want, "dtype %s: this libfatune has no %s kernel built in (none of its "
               "built-in defaults is of that dtype)", name, name);
      expect(__LINE__, &a, FAT_ERR_UNSUPPORTED, want);
      expect_select(__LINE__, ctx, &a, FAT_ERR_UNSUPPORTED, want);
      printf("%s: no %s kernel is built in; its tensor checks skipped until the generator's "
             "defaults of it land\n", name, name);
      continue;
    }
    CHECK_OK(&a);
    expect_select(__LINE__, ctx, &a, FAT_OK, NULL);
    a = good_kv8(dt), a.k_descale = a.v_descale = NULL; /* factors of 1 */
    CHECK_OK(&a);
    /* FlashAttention-3's (batch, heads_k) factors. */
    a = good_kv8(dt);
    a.k_descale_batch_stride = a.v_descale_batch_stride = 2;
    a.k_descale_head_stride = a.v_descale_head_stride = 1;
    CHECK_OK(&a);
    /* A paged fp8 cache (e4m3's is refused) is the paged family's. */
    a = good_kv8(dt);
    a.block_table = (const int *)BT_AT, a.block_table_stride = 8, a.page_size = 16, a.num_pages = 20;
    a.k_batch_stride = a.v_batch_stride = (long long)a.page_size * a.k_row_stride;
    CHECK_OK(&a);
    expect_select(__LINE__, ctx, &a, FAT_OK, NULL);
    /* q and o are 16-bit: strides multiples of 8; k and v one byte: of 16. */
    a = good_kv8(dt), a.q_head_stride = 136, a.q_row_stride = 4 * 136, a.q_batch_stride = 4 * 136;
    CHECK_OK(&a);
    a = good_kv8(dt), a.o_head_stride = 136, a.o_row_stride = 4 * 136, a.o_batch_stride = 4 * 136;
    CHECK_OK(&a);
    a = good_kv8(dt), a.k_head_stride = 136, a.k_row_stride = 2 * 136, a.k_batch_stride = 128 * 2 * 136;
    CHECK_BAD(&a, "k_head_stride 136: must be a non-negative multiple of 16");
    a = good_kv8(dt), a.v_batch_stride = 128 * 256 + 8;
    CHECK_BAD(&a, "v_batch_stride 32776: must be a non-negative multiple of 16");
    a = good_kv8(dt), a.v_row_stride = 264, a.v_batch_stride = 128 * 272;
    CHECK_BAD(&a, "v_row_stride 264: must be a non-negative multiple of 16");
    /* k spans bytes: 2 x 128 x 2 x 128 of them, v right after it; o
     * 2 x 1 x 4 x 128 16-bit elements. */
    a = good_kv8(dt), a.v = (const void *)(K_AT + 65536);
    CHECK_OK(&a);
    a.o = (void *)(K_AT + 65536 - 16);
    CHECK_BAD(&a, "o [0x200fff0, +2048 bytes) overlaps k [0x2000000, +65536 bytes): the outputs "
                  "must not alias another tensor");
    /* A head dim below its template: a multiple of 16 runs (its rows'
     * last chunk is whole), another (72, whose contiguous strides are not
     * even the load rule's) is refused by name before its strides. */
    a = good_kv8(dt), a.head_dim = 80;
    fat_attn_args_contiguous(&a);
    CHECK_OK(&a);
    a = good_kv8(dt), a.head_dim = 72;
    fat_attn_args_contiguous(&a);
    const char *prefix = "head_dim 72 runs on the d";
    const char *suffix = " template, whose K and V rows are read in chunks of 16 e4m3 elements (16 "
                         "bytes): a head dim below its template must be a multiple of 16";
    snprintf(want, sizeof want, "dtype %s: %s", name, prefix);
    expect(__LINE__, &a, FAT_ERR_UNSUPPORTED, NULL);
    const char *got = fat_context_error(ctx);
    CHECK_WHY(!strncmp(got, want, strlen(want)) && strlen(got) > strlen(suffix) &&
                  !strcmp(got + strlen(got) - strlen(suffix), suffix), "got \"%s\"", got);
    char refused[512];
    snprintf(refused, sizeof refused, "%s", got);
    expect_select(__LINE__, ctx, &a, FAT_ERR_UNSUPPORTED, refused);
  }
}

int main(void) {
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  o.user_db = "", o.tables = NULL, o.n_tables = 0;
  const char *none[1] = {"/nonexistent/tables.db"};
  o.tables = none, o.n_tables = 1;
  o.gpu_name = "NVIDIA H200", o.gpu_cc_major = 9, o.gpu_cc_minor = 0, o.gpu_sm_count = 132;
  REQUIRE_EXIT(fat_context_open(&ctx, &o) == FAT_OK);
  fat_attn_args a = good();
  CHECK_OK(&a);

  /* No context, no arguments. */
  CHECK_INT(fat_attention_check(NULL, &a), FAT_ERR_INVALID_ARGUMENT);
  n_bad++;
  CHECK_BAD(NULL, "args is NULL");

  check_versions();
  check_struct_sizes(&o);

  /* Enums out of range. */
  a = good(), a.dtype = (fat_attn_dtype)7;
  CHECK_BAD(&a, "dtype 7: must be FAT_ATTN_FP16, FAT_ATTN_BF16, FAT_ATTN_E4M3, FAT_ATTN_FP16_E4M3KV "
                "or FAT_ATTN_BF16_E4M3KV");
  a = good(), a.mask = (fat_attn_mask)-1;
  CHECK_BAD(&a, "mask -1: must be FAT_ATTN_MASK_NONE, FAT_ATTN_MASK_CAUSAL or FAT_ATTN_MASK_LOCAL");
  a = good(), a.mask = (fat_attn_mask)3;
  CHECK_BAD(&a, "mask 3: must be FAT_ATTN_MASK_NONE, FAT_ATTN_MASK_CAUSAL or FAT_ATTN_MASK_LOCAL");

  /* The local mask's window: each bound -1 (unbounded) or more. */
  a = good(), a.mask = FAT_ATTN_MASK_LOCAL, a.window_left = 32, a.window_right = 0;
  CHECK_OK(&a);
  a = good(), a.mask = FAT_ATTN_MASK_LOCAL, a.window_left = -1, a.window_right = -1;
  CHECK_OK(&a);
  a = good(), a.mask = FAT_ATTN_MASK_LOCAL, a.window_left = -2, a.window_right = 0;
  CHECK_BAD(&a, "window (-2, 0): each bound must be >= -1 (-1: unbounded)");
  a = good(), a.mask = FAT_ATTN_MASK_LOCAL, a.window_left = 8, a.window_right = -5;
  CHECK_BAD(&a, "window (8, -5): each bound must be >= -1 (-1: unbounded)");
  a = good(), a.window_left = -2; /* read only for the local mask */
  CHECK_OK(&a);

  /* The soft-cap: 0 (none) or a finite positive cap. */
  a = good(), a.softcap = 30.0f;
  CHECK_OK(&a);
  a = good(), a.softcap = -1.0f;
  CHECK_BAD(&a, "softcap -1: must be finite and >= 0 (0: none)");
  a = good(), a.softcap = INFINITY;
  CHECK_BAD(&a, "softcap inf: must be finite and >= 0 (0: none)");
  a = good(), a.softcap = NAN;
  CHECK_BAD(&a, "softcap nan: must be finite and >= 0 (0: none)");

  /* Variable-length batches: both offset arrays or neither, and the packed
   * tensors' rows. */
  a = good(), a.cu_seqlens_q = (const int *)CU_Q_AT;
  CHECK_BAD(&a, "cu_seqlens_q 0xb000000 and cu_seqlens_k (nil): give both or neither");
  a = good(), a.cu_seqlens_k = (const int *)CU_K_AT;
  CHECK_BAD(&a, "cu_seqlens_q (nil) and cu_seqlens_k 0xb001000: give both or neither");
  a = good(), a.cu_seqlens_q = (const int *)CU_Q_AT, a.cu_seqlens_k = (const int *)CU_K_AT;
  a.total_k = 2 * a.seqlen_k;
  CHECK_BAD(&a, "total_q 0, total_k 256: a variable-length batch needs the packed tensors' rows (>= 1)");
  a.total_q = 2 * a.seqlen_q, a.total_k = 0;
  CHECK_BAD(&a, "total_q 128, total_k 0: a variable-length batch needs the packed tensors' rows (>= 1)");
  a.total_k = 2 * a.seqlen_k;
  CHECK_OK(&a);
  /* seqused_k alone is a dense batch with a padded K/V cache. */
  a = good(), a.seqused_k = (const int *)CU_K_AT;
  CHECK_OK(&a);

  /* A paged cache: its page size, pages and table, each by name; k and v
   * as pools of pages, the page stride their batch stride. */
  a = good_paged();
  CHECK_OK(&a);
  a = good_paged(), a.seqused_k = (const int *)CU_K_AT; /* cache_seqlens */
  CHECK_OK(&a);
  a = good_paged(), a.page_size = 256, a.block_table_stride = 1; /* one page holds a sequence */
  a.k_batch_stride = a.v_batch_stride = 256 * a.k_row_stride;
  a.num_pages = 2;
  CHECK_OK(&a);
  a = good_paged(), a.page_size = 48;
  CHECK_BAD(&a, "page_size 48: must be a power of two from 16 to 65536 (a key's page is found by a "
                "shift)");
  a = good_paged(), a.page_size = 8, a.block_table_stride = 16; /* below a key tile's group */
  CHECK_BAD(&a, "page_size 8: must be a power of two from 16 to 65536 (a key's page is found by a "
                "shift)");
  a = good_paged(), a.page_size = 0;
  CHECK_BAD(&a, "page_size 0: must be a power of two from 16 to 65536 (a key's page is found by a "
                "shift)");
  a = good_paged(), a.page_size = 131072;
  CHECK_BAD(&a, "page_size 131072: must be a power of two from 16 to 65536 (a key's page is found "
                "by a shift)");
  a = good_paged(), a.num_pages = 0;
  CHECK_BAD(&a, "num_pages 0: a paged cache has at least one page");
  a = good_paged(), a.block_table_stride = 7;
  CHECK_BAD(&a, "block_table_stride 7: fewer entries than the 8 pages of seqlen_k 128 in pages of 16");
  a = good_paged(), a.seqlen_k = 129;
  CHECK_BAD(&a, "block_table_stride 8: fewer entries than the 9 pages of seqlen_k 129 in pages of 16");
  a = good_paged(), a.cu_seqlens_q = (const int *)CU_Q_AT, a.cu_seqlens_k = (const int *)CU_K_AT;
  a.total_q = 2, a.total_k = 256;
  CHECK_BAD(&a, "block_table 0xc000000 with cu_seqlens_q 0xb000000, cu_seqlens_k 0xb001000: a paged "
                "cache takes a dense batch of queries (cu_seqlens NULL; seqused_k gives each "
                "sequence's keys)");
  a = good(), a.page_size = 16;
  CHECK_BAD(&a, "page_size 16, num_pages 0, block_table_stride 0: a paged cache's; set them only "
                "with a block_table (0 for a contiguous one)");
  a = good(), a.block_table_stride = 4;
  CHECK_BAD(&a, "page_size 0, num_pages 0, block_table_stride 4: a paged cache's; set them only "
                "with a block_table (0 for a contiguous one)");
  a = good_paged(), a.block_table = (const int *)(BT_AT + 2);
  CHECK_BAD(&a, "block_table 0xc000002 is not 4-byte aligned (int32 entries)");
  a = good_paged(), a.block_table = (const int *)((const char *)a.o + 512);
  CHECK_BAD(&a, "block_table [0x4000200, +64 bytes) overlaps o [0x4000000, +1024 bytes)");
  a = good_paged(), a.k_batch_stride = 1024; /* half a page of 16 rows of 128 */
  CHECK_BAD(&a, "k_batch_stride 1024: smaller than the 2048 elements inside it (row_stride); k "
                "would overlap itself");
  a = good_paged(), a.v_row_stride = 64;
  CHECK_BAD(&a, "v_row_stride 64: smaller than the 128 elements inside it (head_stride); v would "
                "overlap itself");
  /* The pool, not batch x seqlen_k, is what k spans: o just past 20 pages. */
  a = good_paged(), a.o = (void *)(K_AT + 20 * 2048 * 2);
  CHECK_OK(&a);
  a = good_paged(), a.o = (void *)(K_AT + 20 * 2048 * 2 - 16);
  CHECK_BAD(&a, "o [0x2013ff0, +1024 bytes) overlaps k [0x2000000, +81920 bytes): the outputs must "
                "not alias another tensor");

  /* Each dimension by name. */
  a = good(), a.batch = 0;
  CHECK_BAD(&a, "batch 0: must be >= 1");
  a = good(), a.heads = -4;
  CHECK_BAD(&a, "heads -4: must be >= 1");
  a = good(), a.heads_k = 0;
  CHECK_BAD(&a, "heads_k 0: must be >= 1");
  a = good(), a.seqlen_q = 0;
  CHECK_BAD(&a, "seqlen_q 0: must be >= 1");
  a = good(), a.seqlen_k = 0;
  CHECK_BAD(&a, "seqlen_k 0: must be >= 1");
  a = good(), a.heads_k = 3;
  CHECK_BAD(&a, "heads_k 3 does not divide heads 4");
  /* Head dims: any multiple of 8 up to 256 (the padded ones run on the
   * next template up); nothing else. */
  const int padded[] = {8, 32, 40, 80, 248, 256};
  for (size_t i = 0; i < sizeof padded / sizeof padded[0]; i++) {
    a = good(), a.head_dim = padded[i];
    fat_attn_args_contiguous(&a);
    CHECK_OK(&a);
  }
  a = good(), a.head_dim = 0;
  expect(__LINE__, &a, FAT_ERR_UNSUPPORTED,
         "head_dim 0 has no template (templates: 32, 64, 96, 128, 192, 256; any multiple of 8 up "
         "to 256 runs on the next one up)");
  a = good(), a.head_dim = 84;
  fat_attn_args_contiguous(&a);
  expect(__LINE__, &a, FAT_ERR_UNSUPPORTED,
         "head_dim 84 has no template (templates: 32, 64, 96, 128, 192, 256; any multiple of 8 up "
         "to 256 runs on the next one up)");
  a = good(), a.head_dim = 264;
  fat_attn_args_contiguous(&a);
  expect(__LINE__, &a, FAT_ERR_UNSUPPORTED,
         "head_dim 264 has no template (templates: 32, 64, 96, 128, 192, 256; any multiple of 8 "
         "up to 256 runs on the next one up)");

  /* Null and misaligned pointers, per tensor. */
  a = good(), a.q = NULL;
  CHECK_BAD(&a, "q is NULL");
  a = good(), a.k = NULL;
  CHECK_BAD(&a, "k is NULL");
  a = good(), a.v = NULL;
  CHECK_BAD(&a, "v is NULL");
  a = good(), a.o = NULL;
  CHECK_BAD(&a, "o is NULL");
  a = good(), a.lse = NULL;
  CHECK_BAD(&a, "lse is NULL");
  a = good(), a.k = (const char *)a.k + 8;
  CHECK_BAD(&a, "k 0x2000008 is not 16-byte aligned");
  a = good(), a.lse = (float *)((char *)a.lse + 4);
  CHECK_BAD(&a, "lse 0x5000004 is not 16-byte aligned");

  /* Strides: sign, multiple, and fit to the shape. */
  a = good(), a.q_row_stride = -256;
  CHECK_BAD(&a, "q_row_stride -256: must be a non-negative multiple of 8");
  a = good(), a.v_head_stride = 65;
  CHECK_BAD(&a, "v_head_stride 65: must be a non-negative multiple of 8");
  a = good(), a.q_row_stride = 64; /* rows of 4 heads x 64 need 256 */
  CHECK_BAD(&a, "q_row_stride 64: smaller than the 256 elements inside it (head_stride); q would "
                "overlap itself");
  a = good(), a.o_head_stride = 0;
  CHECK_BAD(&a, "o_head_stride 0: smaller than the 64 elements inside it (head_dim); o would "
                "overlap itself");
  a = good(), a.k_batch_stride = 128; /* one row of 2 heads is 128; a batch is 128 rows */
  CHECK_BAD(&a, "k_batch_stride 128: smaller than the 16384 elements inside it (row_stride); k "
                "would overlap itself");
  a = good(), a.q_batch_stride = 4611686018427387904LL, a.batch = 3;
  a.o_batch_stride = a.q_row_stride * a.seqlen_q;
  CHECK_BAD(&a, "q_batch_stride 4611686018427387904: q spans more than 9223372036854775807 "
                "elements");
  a = good(), a.q_batch_stride = 0x7FFFFFFFFFFF0000LL;
  CHECK_BAD(&a, "q 0x1000000: its 9223372036854726656 elements run past the end of the address space");
  /* fat_attn_args_contiguous on a shape whose strides overflow. */
  a = good(), a.head_dim = 64, a.heads = 1 << 30, a.heads_k = 1 << 30, a.seqlen_q = 1 << 30;
  fat_attn_args_contiguous(&a);
  CHECK_BAD(&a, "q_batch_stride -1: must be a non-negative multiple of 8");
  /* Layouts that fit are accepted: (batch, heads, seqlen, d), and any
   * stride on a dimension of one element. */
  a = good();
  a.q_head_stride = (long long)a.seqlen_q * a.head_dim, a.q_row_stride = a.head_dim;
  a.q_batch_stride = a.q_head_stride * a.heads;
  CHECK_OK(&a);
  a = good(), a.batch = 1, a.q_batch_stride = 0, a.k_batch_stride = 8;
  CHECK_OK(&a);

  /* Outputs aliasing another tensor (the inputs may share memory). */
  a = good(), a.o = (void *)a.q;
  CHECK_BAD(&a, "o [0x1000000, +65536 bytes) overlaps q [0x1000000, +65536 bytes): the outputs "
                "must not alias another tensor");
  a = good(), a.o = (void *)((char *)a.v + 65536 - 16);
  CHECK_BAD(&a, "o [0x300fff0, +65536 bytes) overlaps v [0x3000000, +65536 bytes): the outputs "
                "must not alias another tensor");
  a = good(), a.lse = (float *)((char *)a.o + 1024);
  CHECK_BAD(&a, "o [0x4000000, +65536 bytes) overlaps lse [0x4000400, +2048 bytes): the outputs "
                "must not alias another tensor");
  a = good(), a.lse = (float *)a.k;
  CHECK_BAD(&a, "lse [0x2000000, +2048 bytes) overlaps k [0x2000000, +65536 bytes): the outputs "
                "must not alias another tensor");
  a = good(), a.k = a.v = a.q; /* a packed input: allowed */
  a.k_row_stride = a.v_row_stride = a.q_row_stride, a.k_batch_stride = a.v_batch_stride = 0;
  a.batch = 1, a.seqlen_k = a.seqlen_q, a.heads_k = a.heads;
  a.k_head_stride = a.v_head_stride = a.head_dim;
  CHECK_OK(&a);

  /* The scale. */
  a = good(), a.softmax_scale = -1.0f;
  CHECK_BAD(&a, "softmax_scale -1: must be finite and >= 0 (0: default)");
  a = good(), a.softmax_scale = NAN;
  CHECK_BAD(&a, "softmax_scale nan: must be finite and >= 0 (0: default)");
  a = good(), a.softmax_scale = INFINITY;
  CHECK_BAD(&a, "softmax_scale inf: must be finite and >= 0 (0: default)");

  /* The backward: the forward's rules on its embedded arguments, then the
   * gradients, the workspace and what they may alias. */
  fat_attn_bwd_args b = good_bwd();
  CHECK_BWD_OK(&b);
  /* D, the dQ accumulator, and 2 x 4 x ceil(64 / 64) semaphores. */
  CHECK_INT((long long)b.workspace_bytes, 2048 + 2 * 4 * 64 * 64 * 4 + 2 * 4 * 1 * 4);
  CHECK_BWD_BAD(NULL, "args is NULL");
  b = good_bwd(), b.fwd.seqlen_k = 0;
  CHECK_BWD_BAD(&b, "seqlen_k 0: must be >= 1");
  b = good_bwd(), b.fwd.q = NULL;
  CHECK_BWD_BAD(&b, "q is NULL");
  b = good_bwd(), b.deterministic = 2;
  CHECK_BWD_BAD(&b, "deterministic 2: must be 0 or 1");
  b = good_bwd(), b.dout = NULL;
  CHECK_BWD_BAD(&b, "dout is NULL");
  b = good_bwd(), b.dq = NULL;
  CHECK_BWD_BAD(&b, "dq is NULL");
  b = good_bwd(), b.dk = (char *)b.dk + 2;
  CHECK_BWD_BAD(&b, "dk 0x8000002 is not 16-byte aligned");
  b = good_bwd(), b.dv_row_stride = 12;
  CHECK_BWD_BAD(&b, "dv_row_stride 12: must be a non-negative multiple of 8");
  b = good_bwd(), b.do_row_stride = 64;
  CHECK_BWD_BAD(&b, "dout_row_stride 64: smaller than the 256 elements inside it (head_stride); "
                    "dout would overlap itself");
  b = good_bwd(), b.workspace = NULL;
  CHECK_BWD_BAD(&b, "workspace is NULL (fat_attention_bwd_workspace: 133152 bytes)");
  b = good_bwd(), b.workspace = (char *)b.workspace + 8;
  CHECK_BWD_BAD(&b, "workspace 0xa000008 is not 16-byte aligned");
  b = good_bwd(), b.workspace_bytes -= 1;
  CHECK_BWD_BAD(&b, "workspace_bytes 133151: this problem needs 133152 (fat_attention_bwd_workspace)");
  /* A deterministic call needs the same: an ordered variant (ws90's) sums
   * into the accumulator and orders its adds with the semaphores. */
  b = good_bwd(), b.deterministic = 1;
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &b.workspace_bytes), FAT_OK);
  CHECK_INT((long long)b.workspace_bytes, 133152);
  CHECK_BWD_OK(&b);
  b.workspace_bytes = 2048; /* D alone, once enough for mma80's separate dQ */
  CHECK_BWD_BAD(&b, "workspace_bytes 2048: this problem needs 133152 (fat_attention_bwd_workspace)");
  /* A seqlen_q that is no multiple of 64: 2 x 4 x 100 rows, D 3200 bytes
   * rounded to 3328, the accumulator's 800 x 64 floats, and 2 x 4 x
   * ceil(100 / 64) = 16 semaphores after it. */
  b = good_bwd(), b.fwd.seqlen_q = 100;
  fat_attn_args_contiguous(&b.fwd);
  fat_attn_bwd_args_contiguous(&b);
  for (int det = 0; det <= 1; det++) {
    b.deterministic = det;
    CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &b.workspace_bytes), FAT_OK);
    CHECK_INT((long long)b.workspace_bytes, 3328 + 800 * 64 * 4 + 16 * 4);
  }
  b = good_bwd(), b.dk = b.dv;
  CHECK_BWD_BAD(&b, "dk [0x9000000, +65536 bytes) overlaps dv [0x9000000, +65536 bytes): the "
                    "outputs must not alias another tensor");
  b = good_bwd(), b.dq = (void *)b.dout;
  CHECK_BWD_BAD(&b, "dq [0x6000000, +65536 bytes) overlaps dout [0x6000000, +65536 bytes): the "
                    "outputs must not alias another tensor");
  b = good_bwd(), b.workspace = (char *)b.fwd.lse + 1024;
  CHECK_BWD_BAD(&b, "workspace [0x5000400, +133152 bytes) overlaps lse [0x5000000, +2048 bytes): "
                    "the outputs must not alias another tensor");
  b = good_bwd(), b.dv = (void *)b.fwd.o;
  CHECK_BWD_BAD(&b, "dv [0x4000000, +65536 bytes) overlaps o [0x4000000, +65536 bytes): the "
                    "outputs must not alias another tensor");
  b = good_bwd(), b.dout = b.fwd.q; /* inputs may share memory */
  CHECK_BWD_OK(&b);
  /* lse's gradient: fp32 of lse's bytes, read, 4-byte aligned; it may be
   * lse itself (both read), never under a written tensor. */
  b = good_bwd(), b.dlse = (const float *)(0x5000000 + 4096);
  CHECK_BWD_OK(&b);
  b.dlse = b.fwd.lse;
  CHECK_BWD_OK(&b);
  b.dlse = (const float *)(0x5000000 + 4096 + 2);
  CHECK_BWD_BAD(&b, "dlse 0x5001002 is not 4-byte aligned");
  b.dlse = (const float *)((char *)b.dq + 65536 - 4);
  CHECK_BWD_BAD(&b, "dq [0x7000000, +65536 bytes) overlaps dlse [0x700fffc, +2048 bytes): the "
                    "outputs must not alias another tensor");
  /* The soft-cap and variable-length batches have a backward (mma80f's):
   * a packed batch's gradients are one sequence of total rows, like q, k
   * and v (their batch strides unused), and its D and dQ accumulator rows
   * are lse's, heads x total_q. */
  b = good_bwd(), b.fwd.softcap = 30.0f;
  CHECK_BWD_OK(&b);
  b = good_bwd(), b.fwd.seqused_k = (const int *)CU_K_AT;
  CHECK_BWD_OK(&b);
  b = good_bwd(), b.fwd.cu_seqlens_q = (const int *)CU_Q_AT, b.fwd.cu_seqlens_k = (const int *)CU_K_AT;
  b.fwd.total_q = 100, b.fwd.total_k = 200; /* within the dense tensors' rows */
  b.do_batch_stride = b.dq_batch_stride = b.dk_batch_stride = b.dv_batch_stride = 1; /* unused */
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &b.workspace_bytes), FAT_OK);
  /* D: 400 floats, rounded to 256; the accumulator; 4 x (100 / 64 + 2)
   * semaphores, which the tiles of any two lengths summing to 100 fit. */
  CHECK_INT((long long)b.workspace_bytes, 1792 + 4 * 100 * 64 * 4 + 4 * 3 * 4);
  CHECK_BWD_OK(&b);
  /* dk just past dq's 100 packed rows (not its dense 2 x 64): no overlap
   * until dq has one row more. */
  b.dk = (void *)(DQ_AT + 100 * 4 * 64 * 2);
  CHECK_BWD_OK(&b);
  b.fwd.total_q = 101;
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &b.workspace_bytes), FAT_OK);
  CHECK_BWD_BAD(&b, "dq [0x7000000, +51712 bytes) overlaps dk [0x700c800, +51200 bytes): the outputs "
                    "must not alias another tensor");
  /* A paged cache is the forward's: the backward says so by name. */
  b = good_bwd(), b.fwd = good_paged();
  expect_bwd(__LINE__, &b, FAT_ERR_UNSUPPORTED, "block_table 0xc000000: the backward reads "
             "contiguous K and V (a paged cache is the forward's)");
  CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &b.workspace_bytes), FAT_ERR_UNSUPPORTED);
  CHECK_INT(fat_attention_bwd_select(ctx, &b, &(fat_choice)FAT_CHOICE_INIT), FAT_ERR_UNSUPPORTED);
  n_bad += 2;
  /* The local mask has a backward. */
  b = good_bwd(), b.fwd.mask = FAT_ATTN_MASK_LOCAL, b.fwd.window_left = 16, b.fwd.window_right = 0;
  CHECK_BWD_OK(&b);
  /* A padded head dim: the backward has no d32, so 32 and 40 run on d64;
   * the dQ accumulator's rows are FAT_BWD_ACCUM_WIDTH, the head dim
   * rounded up to 64 (80 runs on d96, whose ws90 variants pad to 128). */
  const int bwd_dims[][2] = {{32, 64}, {40, 64}, {80, 128}};
  for (size_t i = 0; i < sizeof bwd_dims / sizeof bwd_dims[0]; i++) {
    b = good_bwd(), b.fwd.head_dim = bwd_dims[i][0];
    fat_attn_args_contiguous(&b.fwd);
    fat_attn_bwd_args_contiguous(&b);
    CHECK_INT(fat_attention_bwd_workspace(ctx, &b, &b.workspace_bytes), FAT_OK);
    CHECK_INT((long long)b.workspace_bytes, 2048 + 2 * 4 * 64 * bwd_dims[i][1] * 4 + 2 * 4 * 1 * 4);
    CHECK_BWD_OK(&b);
  }
  b = good_bwd();
  CHECK_INT(fat_attention_bwd(ctx, &b, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  CHECK_STR(fat_context_error(ctx),
            "this context describes NVIDIA H200 without a device: it can select, not launch");

  /* The launch path refuses the same, and an offline context never launches. */
  a = good(), a.seqlen_q = 0;
  CHECK_INT(fat_attention_fwd(ctx, &a, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  a = good();
  const char *offline = "this context describes NVIDIA H200 without a device: it can select, not launch";
  fat_status st = fat_attention_fwd(ctx, &a, NULL, NULL);
  CHECK_WHY(st == FAT_ERR_INVALID_ARGUMENT && !strcmp(fat_context_error(ctx), offline),
            "fat_attention_fwd gave %d \"%s\",\n  want %d \"%s\"", (int)st, fat_context_error(ctx),
            (int)FAT_ERR_INVALID_ARGUMENT, offline);
  edges();
  e4m3();
  kv8();
  fat_context_close(ctx);
  printf("%d bad inputs refused with their messages\n", n_bad);
  return check_summary("test_runtime_args");
}

/* SPDX-License-Identifier: MIT */
/* libfatune on a GPU, end to end:
 *  - a table holding a winner with a cubin for this GPU is launched from
 *    the cubin (asked: load == stored cubin, no NVRTC) and matches a
 *    double-precision reference, on a seqlen between buckets (nearest);
 *  - a key nothing was tuned for runs the built-in default, compiled with
 *    NVRTC the first time and stored in the user database, then loaded
 *    from that cubin by a fresh context;
 *  - four host threads launch through one context at once;
 *  - bad tensors are refused with their exact messages;
 *  - the backward (fat_attention_bwd) on the built-in defaults, atomic and
 *    deterministic, with GQA, causal and odd lengths, against fp64
 *    reference gradients, outputs poisoned first; the deterministic mode
 *    twice, bit for bit;
 *  - it prints the first-call latency (stored cubin / compile) and the
 *    host overhead per call on a hot key against a bare cuLaunchKernel.
 * Exits 77 (skipped) when no CUDA driver or device is present. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "compile.h"
#include "db.h"
#include "fat_abi.h"
#include "fatune.h"
#include "gen.h"
#include "gpu_run.h"
#include "tolerance.h"
#include "problems.h"
#include "gpu_test.h"

#define REL_L2_TOLERANCE 1e-2
#define HOT_CALLS 20000
#define HOT_BATCH 64         /* launches timed between synchronisations: the queue never fills */
#define OVERHEAD_LIMIT_US 20.0 /* sanity bound here; the goal (5 us) is reported */
#define N_THREADS 4

static int failures;
#define EXPECT(cond)                                                          \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);     \
      failures++;                                                             \
    }                                                                         \
  } while (0)
#define EXPECT_INT(got, want)                                                 \
  do {                                                                        \
    long long g_ = (got), w_ = (want);                                        \
    if (g_ != w_) {                                                           \
      fprintf(stderr, "%s:%d: %s = %lld, want %lld\n", __FILE__, __LINE__, #got, g_, w_); \
      failures++;                                                             \
    }                                                                         \
  } while (0)
#define EXPECT_STR(got, want)                                                 \
  do {                                                                        \
    const char *g_ = (got), *w_ = (want);                                     \
    if (strcmp(g_, w_)) {                                                     \
      fprintf(stderr, "%s:%d: %s = \"%s\", want \"%s\"\n", __FILE__, __LINE__, #got, g_, w_); \
      failures++;                                                             \
    }                                                                         \
  } while (0)
#define REQUIRE(cond)                                                         \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: required %s\n", __FILE__, __LINE__, #cond);     \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static fat_gpu *gpu;
static const fat_cuda *cu;

/* ---- host-side data ------------------------------------------------------ */

static uint16_t to_bits(float f, int bf16) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if (bf16) return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
  uint32_t sign = (x >> 16) & 0x8000u, man = x & 0x7fffffu;
  int exp = (int)((x >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return (uint16_t)sign;
  uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13), rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
  return (uint16_t)h;
}

static double from_bits(uint16_t h, int bf16) {
  if (bf16) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
  }
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp ? ldexp(1.0 + man / 1024.0, exp - 15) : ldexp(man / 1024.0, -14);
  return (h & 0x8000) ? -v : v;
}

/* One problem's tensors on host and device, contiguous. */
typedef struct tensors {
  fat_attn_args a;
  uint16_t *q, *k, *v, *o;
  CUdeviceptr dq, dk, dv, dout, dlse;
  size_t nq, nk;
} tensors;

static void make(tensors *t, int B, int H, int HK, int S, int D, int bf16, int causal, unsigned seed) {
  memset(t, 0, sizeof *t);
  t->nq = (size_t)B * S * H * D, t->nk = (size_t)B * S * HK * D;
  t->q = malloc(t->nq * 2), t->k = malloc(t->nk * 2), t->v = malloc(t->nk * 2);
  t->o = malloc(t->nq * 2);
  srand(seed);
  for (size_t i = 0; i < t->nq; i++) t->q[i] = to_bits((float)rand() / RAND_MAX * 4 - 2, bf16);
  for (size_t i = 0; i < t->nk; i++) t->k[i] = to_bits((float)rand() / RAND_MAX * 4 - 2, bf16);
  for (size_t i = 0; i < t->nk; i++) t->v[i] = to_bits((float)rand() / RAND_MAX * 2 - 1, bf16);
  REQUIRE(cu->cuMemAlloc(&t->dq, t->nq * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemAlloc(&t->dk, t->nk * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemAlloc(&t->dv, t->nk * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemAlloc(&t->dout, t->nq * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemAlloc(&t->dlse, (size_t)B * H * S * 4) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemcpyHtoD(t->dq, t->q, t->nq * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemcpyHtoD(t->dk, t->k, t->nk * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemcpyHtoD(t->dv, t->v, t->nk * 2) == CUDA_SUCCESS);
  fat_attn_args *a = &t->a;
  a->struct_size = sizeof *a;
  a->q = (void *)(uintptr_t)t->dq, a->k = (void *)(uintptr_t)t->dk;
  a->v = (void *)(uintptr_t)t->dv, a->o = (void *)(uintptr_t)t->dout;
  a->lse = (float *)(uintptr_t)t->dlse;
  a->batch = B, a->heads = H, a->heads_k = HK, a->seqlen_q = a->seqlen_k = S, a->head_dim = D;
  a->dtype = bf16 ? FAT_ATTN_BF16 : FAT_ATTN_FP16;
  a->mask = causal ? FAT_ATTN_MASK_CAUSAL : FAT_ATTN_MASK_NONE;
  fat_attn_args_contiguous(a);
}

static void release(tensors *t) {
  cu->cuMemFree(t->dq), cu->cuMemFree(t->dk), cu->cuMemFree(t->dv);
  cu->cuMemFree(t->dout), cu->cuMemFree(t->dlse);
  free(t->q), free(t->k), free(t->v), free(t->o);
}

/* Relative L2 error of the device output against double-precision attention. */
static double rel_error(tensors *t) {
  const fat_attn_args *a = &t->a;
  int bf16 = a->dtype == FAT_ATTN_BF16, S = a->seqlen_q, D = a->head_dim;
  REQUIRE(cu->cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cu->cuMemcpyDtoH(t->o, t->dout, t->nq * 2) == CUDA_SUCCESS);
  double *p = malloc(sizeof *p * (size_t)S), num = 0, den = 0, scale = 1.0 / sqrt((double)D);
  for (int b = 0; b < a->batch; b++)
    for (int h = 0; h < a->heads; h++) {
      int hk = h / (a->heads / a->heads_k);
      for (int i = 0; i < S; i++) {
        int last = a->mask == FAT_ATTN_MASK_CAUSAL ? i : S - 1;
        double m = -INFINITY, l = 0;
        for (int j = 0; j <= last; j++) {
          double s = 0;
          for (int d = 0; d < D; d++)
            s += from_bits(t->q[(((size_t)b * S + i) * a->heads + h) * D + d], bf16) *
                 from_bits(t->k[(((size_t)b * S + j) * a->heads_k + hk) * D + d], bf16);
          p[j] = s * scale;
          if (p[j] > m) m = p[j];
        }
        for (int j = 0; j <= last; j++) l += (p[j] = exp(p[j] - m));
        for (int d = 0; d < D; d++) {
          double acc = 0;
          for (int j = 0; j <= last; j++)
            acc += p[j] * from_bits(t->v[(((size_t)b * S + j) * a->heads_k + hk) * D + d], bf16);
          double ref = acc / l;
          double got = from_bits(t->o[(((size_t)b * S + i) * a->heads + h) * D + d], bf16);
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
      }
    }
  free(p);
  return sqrt(num / den);
}

/* ---- backward -------------------------------------------------------------- */

/* The backward's tensors beside T's forward ones (which the forward filled). */
typedef struct grads {
  fat_attn_bwd_args b;
  uint16_t *dout, *gq, *gk, *gv;  /* host: dO, and the gradients read back */
  CUdeviceptr d_dout, d_dq, d_dk, d_dv, d_ws;
} grads;

static void make_grads(grads *g, tensors *t, int deterministic, unsigned seed) {
  memset(g, 0, sizeof *g);
  int bf16 = t->a.dtype == FAT_ATTN_BF16;
  g->dout = malloc(t->nq * 2), g->gq = malloc(t->nq * 2);
  g->gk = malloc(t->nk * 2), g->gv = malloc(t->nk * 2);
  srand(seed);
  for (size_t i = 0; i < t->nq; i++) g->dout[i] = to_bits((float)rand() / RAND_MAX * 2 - 1, bf16);
  REQUIRE(cu->cuMemAlloc(&g->d_dout, t->nq * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemAlloc(&g->d_dq, t->nq * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemAlloc(&g->d_dk, t->nk * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemAlloc(&g->d_dv, t->nk * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemcpyHtoD(g->d_dout, g->dout, t->nq * 2) == CUDA_SUCCESS);
  g->b.struct_size = sizeof g->b;
  g->b.fwd = t->a;
  g->b.dout = (void *)(uintptr_t)g->d_dout, g->b.dq = (void *)(uintptr_t)g->d_dq;
  g->b.dk = (void *)(uintptr_t)g->d_dk, g->b.dv = (void *)(uintptr_t)g->d_dv;
  fat_attn_bwd_args_contiguous(&g->b);
  g->b.deterministic = deterministic;
}

static void release_grads(grads *g) {
  cu->cuMemFree(g->d_dout), cu->cuMemFree(g->d_dq), cu->cuMemFree(g->d_dk), cu->cuMemFree(g->d_dv);
  if (g->d_ws) cu->cuMemFree(g->d_ws);
  free(g->dout), free(g->gq), free(g->gk), free(g->gv);
}

/* Runs the backward with dQ, dK and dV poisoned (all ones: NaN in both
 * dtypes), a workspace poisoned too, and reads the gradients back. */
static fat_status run_bwd(fat_context *c, grads *g, tensors *t, fat_choice *ch) {
  size_t ws = 0;
  fat_status st = fat_attention_bwd_workspace(c, &g->b, &ws);
  if (st) return st;
  if (!g->d_ws) {
    REQUIRE(cu->cuMemAlloc(&g->d_ws, ws) == CUDA_SUCCESS);
    g->b.workspace = (void *)(uintptr_t)g->d_ws, g->b.workspace_bytes = ws;
  }
  REQUIRE(cu->cuMemsetD8(g->d_ws, 0xff, ws) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemsetD8(g->d_dq, 0xff, t->nq * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemsetD8(g->d_dk, 0xff, t->nk * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemsetD8(g->d_dv, 0xff, t->nk * 2) == CUDA_SUCCESS);
  if ((st = fat_attention_bwd(c, &g->b, NULL, ch))) return st;
  REQUIRE(cu->cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cu->cuMemcpyDtoH(g->gq, g->d_dq, t->nq * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemcpyDtoH(g->gk, g->d_dk, t->nk * 2) == CUDA_SUCCESS);
  REQUIRE(cu->cuMemcpyDtoH(g->gv, g->d_dv, t->nk * 2) == CUDA_SUCCESS);
  return FAT_OK;
}

/* rel_l2 of dQ, dK and dV against fp64 gradients of attention on the same
 * 16-bit inputs (P recomputed exactly; bottom-right causal mask). */
static void bwd_errors(const tensors *t, const grads *g, double err[3]) {
  const fat_attn_args *a = &t->a;
  const int bf16 = a->dtype == FAT_ATTN_BF16, S = a->seqlen_q, D = a->head_dim;
  const int H = a->heads, HK = a->heads_k, G = H / HK;
  const double scale = 1.0 / sqrt((double)D);
  double *ref[3] = {calloc(t->nq, sizeof(double)), calloc(t->nk, sizeof(double)),
                    calloc(t->nk, sizeof(double))};
  double *p = malloc(sizeof *p * (size_t)S), *dp = malloc(sizeof *dp * (size_t)S);
  REQUIRE(ref[0] && ref[1] && ref[2] && p && dp);
#define QI(b, i, h, d) ((((size_t)(b) * S + (i)) * H + (h)) * D + (d))
#define KI(b, j, h, d) ((((size_t)(b) * S + (j)) * HK + (h)) * D + (d))
  for (int b = 0; b < a->batch; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / G;
      for (int i = 0; i < S; i++) {
        const int last = a->mask == FAT_ATTN_MASK_CAUSAL ? i : S - 1;
        double m = -INFINITY, l = 0, delta = 0;
        for (int j = 0; j <= last; j++) {
          double s = 0, x = 0;
          for (int d = 0; d < D; d++) {
            s += from_bits(t->q[QI(b, i, h, d)], bf16) * from_bits(t->k[KI(b, j, hk, d)], bf16);
            x += from_bits(g->dout[QI(b, i, h, d)], bf16) * from_bits(t->v[KI(b, j, hk, d)], bf16);
          }
          p[j] = s * scale, dp[j] = x;
          if (p[j] > m) m = p[j];
        }
        for (int j = 0; j <= last; j++) l += (p[j] = exp(p[j] - m));
        for (int j = 0; j <= last; j++) delta += (p[j] /= l) * dp[j];
        for (int j = 0; j <= last; j++) {
          const double ds = p[j] * (dp[j] - delta);
          for (int d = 0; d < D; d++) {
            ref[0][QI(b, i, h, d)] += scale * ds * from_bits(t->k[KI(b, j, hk, d)], bf16);
            ref[1][KI(b, j, hk, d)] += scale * ds * from_bits(t->q[QI(b, i, h, d)], bf16);
            ref[2][KI(b, j, hk, d)] += p[j] * from_bits(g->dout[QI(b, i, h, d)], bf16);
          }
        }
      }
    }
#undef QI
#undef KI
  const uint16_t *got[3] = {g->gq, g->gk, g->gv};
  const size_t n[3] = {t->nq, t->nk, t->nk};
  for (int x = 0; x < 3; x++) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n[x]; i++) {
      double e = from_bits(got[x][i], bf16) - ref[x][i];
      num += e * e, den += ref[x][i] * ref[x][i];
    }
    err[x] = isfinite(num) ? sqrt(num / den) : INFINITY; /* a NaN left unwritten fails */
    free(ref[x]);
  }
  free(p), free(dp);
}

/* ---- a table with a cubin ------------------------------------------------ */

/* Stores the default variant of (fp16, none, D) as the winner of bucket 1024
 * on this GPU, with a cubin compiled here, in a fresh database at PATH.
 * Returns the cubin (for the bare-launch baseline). */
static fat_build table_with_cubin(const char *path, const fat_gpu_info *info, int D,
                                  fat_variant *winner) {
  char err[4096], arch[16];
  fat_gen *g = fat_gen_open(NULL, err, sizeof err);
  REQUIRE(g);
  fat_dtype dt = FAT_FP16;
  fat_mask mk = FAT_MASK_NONE;
  fat_gen_query q = {.direction = FAT_FWD, .head_dims = &D, .n_head_dims = 1, .dtypes = &dt,
                     .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_80"};
  fat_variant *v = NULL;
  size_t n = 0;
  REQUIRE(fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err) == 0);
  for (size_t i = 0; i < n; i++) {
    if (v[i].is_default && !winner->name) *winner = v[i];
    else fat_variant_free(&v[i]);
  }
  free(v);
  fat_gen_close(g);
  REQUIRE(winner->name);
  fat_arch_for_cc(info->cc_major, info->cc_minor, arch);
  fat_build b;
  if (fat_compile_one(winner->name, winner->source, arch, &b, err, sizeof err) || !b.ok) {
    fprintf(stderr, "compile: %s %s\n", err, b.log ? b.log : "");
    exit(1);
  }
  REQUIRE(fat_build_key(winner->source, arch, b.key, err, sizeof err) == 0);
  fat_db *db = NULL;
  REQUIRE(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_gpu_info gi = *info;
  gi.nvrtc_major = 13;
  fat_problem p;
  fat_bench_problem(FAT_FP16, FAT_MASK_NONE, D, 1024, &p);
  fat_check c = {.batch = 1, .heads = 2, .seqlen_q = 256, .seqlen_k = 256, .rel_l2 = 0.002,
                 .max_abs = 0.01, .lse_max_abs = 1e-5, .nonfinite = 0, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = 20, .median_ms = 1.0, .min_ms = 0.9, .max_ms = 1.2, .p10_ms = 0.95,
                  .p90_ms = 1.05, .tflops = 1.0, .sm_clock_mhz = 1755};
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE(fat_db_put_gpu(db, &gi, &gid) == 0);
  REQUIRE(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE(fat_db_put_variant(db, winner, &vid) == 0);
  REQUIRE(fat_db_put_build(db, vid, &b, fat_compile_options(), "13.0") == 0);
  REQUIRE(fat_db_put_check(db, vid, gid, pid, &c) == 0);
  REQUIRE(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  REQUIRE(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
  fat_db_close(db);
  return b;
}

/* ---- threads ------------------------------------------------------------- */

typedef struct worker_arg {
  fat_context *ctx;
  tensors *t;
  fat_status st;
} worker_arg;

static void *worker(void *p) {
  worker_arg *w = p;
  for (int i = 0; i < 50 && w->st == FAT_OK; i++) w->st = fat_attention_fwd(w->ctx, &w->t->a, NULL, NULL);
  return NULL;
}

static fat_context *open_ctx(const char *user, const char *table) {
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  const char *tables[1] = {table};
  o.user_db = user;
  o.tables = tables;
  o.n_tables = table ? 1 : 0;
  if (!table) o.tables = tables, o.n_tables = 0;
  fat_context *c = NULL;
  fat_status st = fat_context_open(&c, &o);
  if (st) fprintf(stderr, "fat_context_open: %s\n", fat_context_error(c));
  REQUIRE(st == FAT_OK);
  return c;
}

int main(void) {
  char err[4096], dir[] = "/tmp/fatune-gpu-runtime-XXXXXX", user[256], table[256];
  fat_gpu_info info;
  fat_context *probe = NULL;
  fat_status st = fat_context_open(&probe, NULL);
  if (st == FAT_ERR_NO_DRIVER) {
    printf("skipped: %s\n", fat_context_error(probe));
    fat_context_close(probe);
    return SKIP;
  }
  REQUIRE(st == FAT_OK);
  fat_context_close(probe);
  REQUIRE(fat_gpu_open(0, &gpu, &info, err, sizeof err) == 0);
  cu = fat_gpu_driver(gpu);
  REQUIRE(mkdtemp(dir));
  snprintf(user, sizeof user, "%s/user.db", dir);
  snprintf(table, sizeof table, "%s/table.db", dir);
  printf("GPU: %s (cc %d.%d, %d SMs)\n", info.name, info.cc_major, info.cc_minor, info.sm_count);

  /* 1. The cubin path: a table winner with a cubin, a cold context. */
  fat_variant winner = {0};
  fat_build cubin = table_with_cubin(table, &info, 128, &winner);
  tensors t1;
  make(&t1, 2, 8, 2, 1000, 128, 0, 0, 11);
  fat_context *c = open_ctx(user, table);
  fat_choice ch = FAT_CHOICE_INIT;
  double t0 = now_s();
  st = fat_attention_fwd(c, &t1.a, NULL, &ch);
  double first_cubin_ms = (now_s() - t0) * 1e3;
  if (st) fprintf(stderr, "%s\n", fat_context_error(c));
  EXPECT_INT(st, FAT_OK);
  EXPECT_STR(ch.variant, winner.name);
  EXPECT_INT(ch.origin, FAT_ORIGIN_TABLES);
  EXPECT_INT(ch.match, FAT_MATCH_NEAREST);
  EXPECT_INT(ch.bucket_seqlen, 1024);
  EXPECT_INT(ch.loaded, 1);
  EXPECT_INT(ch.load, FAT_LOAD_STORED_CUBIN);
  double e1 = rel_error(&t1);
  printf("table winner %s from its cubin: rel_l2 %.3g\n", ch.variant, e1);
  EXPECT(e1 < REL_L2_TOLERANCE);
  /* Selecting a launched problem answers from the launch's cache entry:
   * the variant that runs, loaded, without a database read or a hash. */
  fat_choice sel_ch = FAT_CHOICE_INIT;
  t0 = now_s();
  for (int i = 0; i < 100; i++) EXPECT_INT(fat_attention_select(c, &t1.a, &sel_ch), FAT_OK);
  printf("fat_attention_select of a launched problem: %.1f us a call\n", (now_s() - t0) * 1e4);
  EXPECT_STR(sel_ch.variant, ch.variant);
  EXPECT_INT(sel_ch.loaded, 1);
  EXPECT_INT(sel_ch.load, FAT_LOAD_STORED_CUBIN);

  /* 2. The hot path against a bare cuLaunchKernel of the same kernel. */
  tensors th;
  make(&th, 1, 1, 1, 64, 128, 0, 0, 12);
  REQUIRE(fat_attention_fwd(c, &th.a, NULL, NULL) == FAT_OK);
  REQUIRE(cu->cuCtxSynchronize() == CUDA_SUCCESS);
  /* Host time of the launch calls only, in batches short enough that the
   * GPU keeps up and the launch queue never blocks; synchronised between. */
  double fat_s = 0;
  for (int i = 0; i < HOT_CALLS; i += HOT_BATCH) {
    t0 = now_s();
    for (int j = 0; j < HOT_BATCH; j++)
      if (fat_attention_fwd(c, &th.a, NULL, NULL)) failures++;
    fat_s += now_s() - t0;
    cu->cuCtxSynchronize();
  }
  double fat_us = fat_s * 1e6 / HOT_CALLS;
  CUmodule mod;
  CUfunction fn;
  REQUIRE(cu->cuModuleLoadData(&mod, cubin.cubin) == CUDA_SUCCESS);
  REQUIRE(cu->cuModuleGetFunction(&fn, mod, winner.entry) == CUDA_SUCCESS);
  if (winner.smem_bytes > 48 * 1024)
    REQUIRE(cu->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   winner.smem_bytes) == CUDA_SUCCESS);
  fat_fwd_params p = {0};
  p.q = th.a.q, p.k = th.a.k, p.v = th.a.v, p.o = th.a.o, p.lse = th.a.lse;
  p.q_batch_stride = th.a.q_batch_stride, p.q_row_stride = th.a.q_row_stride, p.q_head_stride = 128;
  p.k_batch_stride = th.a.k_batch_stride, p.k_row_stride = th.a.k_row_stride, p.k_head_stride = 128;
  p.v_batch_stride = th.a.v_batch_stride, p.v_row_stride = th.a.v_row_stride, p.v_head_stride = 128;
  p.o_batch_stride = th.a.o_batch_stride, p.o_row_stride = th.a.o_row_stride, p.o_head_stride = 128;
  p.batch = p.heads = p.heads_k = 1, p.seqlen_q = p.seqlen_k = 64;
  p.softmax_scale = 1.0f / sqrtf(128.0f), p.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  void *args[] = {&p};
  double bare_s = 0;
  for (int i = 0; i < HOT_CALLS; i += HOT_BATCH) {
    t0 = now_s();
    for (int j = 0; j < HOT_BATCH; j++)
      cu->cuLaunchKernel(fn, 1, 1, 1, (unsigned)winner.threads, 1, 1, (unsigned)winner.smem_bytes,
                         NULL, args, NULL);
    bare_s += now_s() - t0;
    cu->cuCtxSynchronize();
  }
  double bare_us = bare_s * 1e6 / HOT_CALLS;
  cu->cuModuleUnload(mod);
  printf("hot key: fat_attention_fwd %.2f us/call, bare cuLaunchKernel %.2f us/call: "
         "overhead %.2f us (goal < 5)\n", fat_us, bare_us, fat_us - bare_us);
  EXPECT(fat_us - bare_us < OVERHEAD_LIMIT_US);

  /* 3. Bad tensors are refused by name. */
  fat_attn_args bad = th.a;
  bad.q = (const char *)bad.q + 2;
  EXPECT_INT(fat_attention_fwd(c, &bad, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  EXPECT(strstr(fat_context_error(c), "is not 16-byte aligned") != NULL);
  bad = th.a;
  bad.k_row_stride = 132;
  EXPECT_INT(fat_attention_fwd(c, &bad, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  EXPECT_STR(fat_context_error(c), "k_row_stride 132: must be a non-negative multiple of 8");
  bad = th.a;
  bad.lse = NULL;
  EXPECT_INT(fat_attention_fwd(c, &bad, NULL, NULL), FAT_ERR_INVALID_ARGUMENT);
  EXPECT_STR(fat_context_error(c), "lse is NULL");

  /* 4. Threads: four problems through one context at once. */
  tensors tt[N_THREADS];
  worker_arg wa[N_THREADS];
  pthread_t th_ids[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    make(&tt[i], 1, 4, 4, 200 + 100 * i, i % 2 ? 64 : 128, i >= 2, i % 2, 20 + i);
    wa[i] = (worker_arg){.ctx = c, .t = &tt[i], .st = FAT_OK};
    REQUIRE(pthread_create(&th_ids[i], NULL, worker, &wa[i]) == 0);
  }
  for (int i = 0; i < N_THREADS; i++) {
    pthread_join(th_ids[i], NULL);
    if (wa[i].st) fprintf(stderr, "thread %d: %s\n", i, fat_context_error(c));
    EXPECT_INT(wa[i].st, FAT_OK);
    double e = rel_error(&tt[i]);
    printf("thread %d: seqlen %d d%d %s %s: rel_l2 %.3g\n", i, tt[i].a.seqlen_q, tt[i].a.head_dim,
           i >= 2 ? "bf16" : "fp16", i % 2 ? "causal" : "none", e);
    EXPECT(e < REL_L2_TOLERANCE);
    release(&tt[i]);
  }
  fat_context_close(c);

  /* 5. The default: compiled once, stored in the user database, then loaded
   * from there by a fresh context. */
  tensors t5;
  make(&t5, 1, 4, 1, 333, 192, 1, 0, 31); /* a key no earlier step touched */
  c = open_ctx(user, NULL);
  t0 = now_s();
  st = fat_attention_fwd(c, &t5.a, NULL, &ch);
  double first_compile_ms = (now_s() - t0) * 1e3;
  if (st) fprintf(stderr, "%s\n", fat_context_error(c));
  EXPECT_INT(st, FAT_OK);
  EXPECT_STR(ch.variant, "fwd.mma80.bf16.d192.none.m128n64w8s1");
  EXPECT_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  EXPECT_INT(ch.load, FAT_LOAD_COMPILED);
  double e5 = rel_error(&t5);
  printf("built-in default, compiled: rel_l2 %.3g\n", e5);
  EXPECT(e5 < REL_L2_TOLERANCE);
  fat_context_close(c);
  c = open_ctx(user, NULL);
  t0 = now_s();
  EXPECT_INT(fat_attention_fwd(c, &t5.a, NULL, &ch), FAT_OK);
  double first_stored_default_ms = (now_s() - t0) * 1e3;
  EXPECT_INT(ch.origin, FAT_ORIGIN_BUILTIN);
  EXPECT_INT(ch.load, FAT_LOAD_STORED_CUBIN);
  EXPECT_INT(fat_context_last_choice(c, &ch), FAT_OK);
  EXPECT_STR(ch.variant, "fwd.mma80.bf16.d192.none.m128n64w8s1");
  EXPECT(rel_error(&t5) < REL_L2_TOLERANCE);
  fat_context_close(c);
  printf("first call: %.1f ms from a stored cubin (table), %.1f ms compiling with NVRTC, "
         "%.1f ms from the cubin it stored\n", first_cubin_ms, first_compile_ms,
         first_stored_default_ms);

  /* 6. The backward through the runtime: the built-in defaults (compiled
   * once), atomic and deterministic, against fp64 gradients. */
  static const struct { int B, H, HK, S, D, bf16, causal; } bwd_cases[] = {
      {1, 4, 2, 77, 64, 1, 1},  {2, 2, 2, 130, 128, 0, 0}, {1, 4, 1, 100, 96, 1, 0},
      {1, 2, 2, 200, 256, 0, 1}, {1, 2, 1, 65, 192, 1, 1},
  };
  c = open_ctx("", NULL);
  for (size_t i = 0; i < sizeof bwd_cases / sizeof bwd_cases[0]; i++)
    for (int det = 0; det < 2; det++) {
      tensors tb;
      grads g;
      double e[3];
      make(&tb, bwd_cases[i].B, bwd_cases[i].H, bwd_cases[i].HK, bwd_cases[i].S, bwd_cases[i].D,
           bwd_cases[i].bf16, bwd_cases[i].causal, 40 + (unsigned)i);
      EXPECT_INT(fat_attention_fwd(c, &tb.a, NULL, NULL), FAT_OK);
      make_grads(&g, &tb, det, 60 + (unsigned)i);
      st = run_bwd(c, &g, &tb, &ch);
      if (st) fprintf(stderr, "backward: %s\n", fat_context_error(c));
      EXPECT_INT(st, FAT_OK);
      bwd_errors(&tb, &g, e);
      double tol = fat_bwd_tolerance_for(bwd_cases[i].bf16 ? FAT_BF16 : FAT_FP16);
      printf("backward %s (batch %d, %d heads over %d K/V heads, seqlen %d): dQ %.3g dK %.3g "
             "dV %.3g (tolerance %.0e)\n", ch.variant, bwd_cases[i].B, bwd_cases[i].H,
             bwd_cases[i].HK, bwd_cases[i].S, e[0], e[1], e[2], tol);
      EXPECT(e[0] < tol && e[1] < tol && e[2] < tol);
      /* A deterministic call runs a deterministic mode: mma80's separate
       * dQ pass or ws90's ordered adds. */
      EXPECT(!det || strstr(ch.variant, ".separate") != NULL || strstr(ch.variant, ".ordered") != NULL);
      fat_choice sel_ch = FAT_CHOICE_INIT;  /* from the launch's cache entry, as for the forward */
      EXPECT_INT(fat_attention_bwd_select(c, &g.b, &sel_ch), FAT_OK);
      EXPECT_STR(sel_ch.variant, ch.variant);
      EXPECT_INT(sel_ch.loaded, 1);
      if (det) {
        /* Bit for bit, run to run. */
        uint16_t *first[3] = {g.gq, g.gk, g.gv};
        size_t n[3] = {tb.nq, tb.nk, tb.nk};
        uint16_t *copy[3];
        for (int x = 0; x < 3; x++) {
          copy[x] = malloc(n[x] * 2);
          memcpy(copy[x], first[x], n[x] * 2);
        }
        EXPECT_INT(run_bwd(c, &g, &tb, &ch), FAT_OK);
        EXPECT(!memcmp(copy[0], g.gq, n[0] * 2) && !memcmp(copy[1], g.gk, n[1] * 2) &&
               !memcmp(copy[2], g.gv, n[2] * 2));
        for (int x = 0; x < 3; x++) free(copy[x]);
      }
      release_grads(&g);
      release(&tb);
    }
  fat_context_close(c);

  release(&t1), release(&th), release(&t5);
  fat_build_free(&cubin);
  fat_variant_free(&winner);
  fat_gpu_close(gpu);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}

/* SPDX-License-Identifier: MIT */
/* Tests of the GPU worker that need no GPU: that a missing driver is
 * reported with the exact message and leaves no process behind; that a
 * worker on the stand-in driver (stand_in_cuda.c) opens the device it was
 * started for, says how many the driver reports (--gpu all's count) and
 * refuses an index past them naming it; that
 * a screening's cutoff that is no time is refused by its value; that
 * CUresults are named and classified; that every message of the worker
 * protocol survives a round trip field by field and that truncated,
 * oversized or garbled frames are refused; that the channel reports EOF and
 * timeouts as such; and that bad jobs are refused before anything is sent. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cuda_api.h"
#include "job.h"
#include "worker.h"
#include "worker_wire.h"
#include "check.h"

#define ERRLEN 512
#define MISSING_LIB "/nonexistent/libcuda.so"
#define SHORT_TIMEOUT_MS 50

static void test_no_driver(void) {
  char err[ERRLEN] = "";
  fat_cuda cu;
  fat_worker *w = (fat_worker *)&cu; /* must be reset to NULL */
  fat_gpu_info info;

  setenv("FATUNE_LIBCUDA", MISSING_LIB, 1);
  CHECK(fat_cuda_load(&cu, err, sizeof err) == -1);
  CHECK_PREFIX(err, "no CUDA driver: could not load " MISSING_LIB " (");
  CHECK(cu.handle == NULL);

  err[0] = '\0';
  CHECK(fat_worker_start(0, NULL, &w, &info, err, sizeof err) == FAT_GPU_NO_DRIVER);
  CHECK(w == NULL);
  CHECK_PREFIX(err, "no CUDA driver: could not load " MISSING_LIB " (");
  /* The worker that found no driver was reaped: no child is left. */
  CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
  unsetenv("FATUNE_LIBCUDA");
}

/* Workers on the stand-in driver describing an H200 and an A100: each
 * opens its own device and reports both; index 2 is refused, named. */
static void test_stand_in_devices(void) {
  char err[ERRLEN] = "";
  fat_worker *w = NULL;
  fat_gpu_info info;
  const char *driver = getenv("FATUNE_STAND_IN_CUDA");
  if (!driver) {
    fprintf(stderr, "test_stand_in_devices: skipped (no FATUNE_STAND_IN_CUDA: run it from ctest)\n");
    return;
  }
  setenv("FATUNE_LIBCUDA", driver, 1);
  setenv("FATUNE_STAND_IN_DEVICES", "h200,a100", 1);
  CHECK_INT(fat_worker_start(1, NULL, &w, &info, err, sizeof err), FAT_GPU_OPENED);
  CHECK_STR(err, "");
  CHECK_STR(info.name, "NVIDIA A100-SXM4-80GB");
  CHECK(info.cc_major == 8 && info.cc_minor == 0 && info.sm_count == 108);
  CHECK_INT(fat_worker_device_count(w), 2);
  CHECK(fat_worker_alive(w));
  fat_worker_stop(w);
  w = NULL;
  CHECK_INT(fat_worker_start(0, NULL, &w, &info, err, sizeof err), FAT_GPU_OPENED);
  CHECK_STR(info.name, "NVIDIA H200");
  CHECK_INT(fat_worker_device_count(w), 2);
  /* A screening's cutoff is a time or none, refused by its value before
   * anything is sent: the worker runs on. */
  {
    static const unsigned char cubin[] = {0x7f, 'E', 'L', 'F'};
    fat_variant v = {.name = "fwd.mma80.fp16.d64.none.m64n64w4s2", .family = "mma80",
                     .entry = "fat_fwd_mma80", .params = "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4",
                     .direction = FAT_FWD, .dtype = FAT_FP16, .mask = FAT_MASK_NONE,
                     .head_dim = 64, .block_m = 64, .threads = 128, .smem_bytes = 40960};
    fat_build b = {.ok = 1, .cubin = (unsigned char *)cubin, .cubin_size = sizeof cubin};
    fat_problem p = {.direction = FAT_FWD, .dtype = FAT_FP16, .mask = FAT_MASK_NONE,
                     .head_dim = 64, .batch = 1, .heads = 2, .heads_k = 2, .seqlen_q = 128,
                     .seqlen_k = 128};
    fat_check_shape sh = {FAT_SHAPE_DIMS(1, 2, 2, 37, 53)};
    fat_check c;
    fat_timing t;
    int timed = 1;
    char reason[ERRLEN];
    CHECK_INT(fat_worker_evaluate(w, &v, &b, &sh, 1, &p, -1.0, &c, &t, &timed, reason,
                                  sizeof reason), FAT_WORKER_ERROR);
    CHECK_STR(reason, "cutoff -1 ms: not a time (0 for none)");
    CHECK(timed == 0);
    CHECK_INT(fat_worker_evaluate(w, &v, &b, &sh, 1, &p, NAN, &c, &t, &timed, reason,
                                  sizeof reason), FAT_WORKER_ERROR);
    CHECK_STR(reason, "cutoff nan ms: not a time (0 for none)");
    CHECK(fat_worker_alive(w));
  }
  fat_worker_stop(w);
  w = NULL;
  CHECK_INT(fat_worker_start(2, NULL, &w, &info, err, sizeof err), FAT_GPU_BAD_INDEX);
  CHECK(w == NULL);
  CHECK_STR(err, "GPU index 2 out of range: 2 devices found");
  /* A list the driver cannot read fails its cuInit: no device. */
  setenv("FATUNE_STAND_IN_DEVICES", "h200,v100", 1);
  CHECK_INT(fat_worker_start(0, NULL, &w, &info, err, sizeof err), FAT_GPU_NO_DEVICE);
  CHECK_PREFIX(err, "no CUDA device: cuInit: CUDA_ERROR_INVALID_VALUE");
  CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
  unsetenv("FATUNE_STAND_IN_DEVICES");
  unsetenv("FATUNE_LIBCUDA");
}

static void test_result_names(void) {
  char buf[64];
  CHECK_STR(fat_cuda_result_text(NULL, CUDA_ERROR_ILLEGAL_ADDRESS, buf, sizeof buf), "CUresult 700");
  CHECK(fat_cuda_result_is_sticky(CUDA_ERROR_ILLEGAL_ADDRESS));
  CHECK(fat_cuda_result_is_sticky(CUDA_ERROR_LAUNCH_FAILED));
  CHECK(fat_cuda_result_is_sticky(CUDA_ERROR_ILLEGAL_INSTRUCTION));
  CHECK(!fat_cuda_result_is_sticky(CUDA_ERROR_INVALID_VALUE));
  CHECK(!fat_cuda_result_is_sticky(CUDA_ERROR_OUT_OF_MEMORY));
  CHECK(!fat_cuda_result_is_sticky(CUDA_ERROR_NO_BINARY_FOR_GPU));
  CHECK(!fat_cuda_result_is_sticky(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES));
}

static void test_shape_validation(void) {
  char err[ERRLEN];
  fat_check_shape ok = {FAT_SHAPE_DIMS(1, 4, 2, 37, 53)}, gqa = {FAT_SHAPE_DIMS(1, 6, 4, 8, 8)},
                  zero = {FAT_SHAPE_DIMS(1, 2, 2, 0, 8)};
  CHECK(fat_check_shape_validate(&ok, 0, err, sizeof err) == 0);
  CHECK(fat_check_shape_validate(&gqa, 1, err, sizeof err) == -1);
  CHECK_STR(err, "check shape 1: heads 6 is not a multiple of heads_k 4");
  CHECK(fat_check_shape_validate(&zero, 2, err, sizeof err) == -1);
  CHECK_STR(err, "check shape 2: seqlen_q 0 is not positive");
}

static fat_rbuf reader(const fat_wbuf *b) {
  fat_rbuf r = {.data = b->data, .len = b->len};
  return r;
}

static void test_scalars_round_trip(void) {
  fat_wbuf b = {0};
  char s[8];
  size_t n;
  fat_put_u32(&b, 0xdeadbeefu);
  fat_put_i32(&b, -7);
  fat_put_u64(&b, UINT64_C(0x0123456789abcdef));
  fat_put_f64(&b, -0.15625);
  fat_put_bytes(&b, "\0\1\2", 3);
  fat_put_str(&b, "sm_90a");
  fat_put_str(&b, "");
  CHECK(!b.failed && b.len == 4 + 4 + 8 + 8 + (8 + 3) + (8 + 6) + 8);
  fat_rbuf r = reader(&b);
  CHECK(fat_get_u32(&r) == 0xdeadbeefu);
  CHECK(fat_get_i32(&r) == -7);
  CHECK(fat_get_u64(&r) == UINT64_C(0x0123456789abcdef));
  CHECK(fat_get_f64(&r) == -0.15625);
  const unsigned char *p = fat_get_bytes(&r, &n);
  CHECK(n == 3 && p && p[0] == 0 && p[1] == 1 && p[2] == 2);
  fat_get_str(&r, s, sizeof s);
  CHECK_STR(s, "sm_90a");
  fat_get_str(&r, s, sizeof s);
  CHECK_STR(s, "");
  CHECK(fat_rbuf_done(&r) == 0);
  /* One read too many fails, and yields zero. */
  CHECK(fat_get_u32(&r) == 0 && r.failed && fat_rbuf_done(&r) == -1);
  /* A string longer than its destination fails rather than truncating. */
  r = reader(&b);
  r.pos = 4 + 4 + 8 + 8 + 8 + 3;
  char tiny[4];
  fat_get_str(&r, tiny, sizeof tiny);
  CHECK(r.failed && tiny[0] == '\0');
  /* Bytes left over are an error too. */
  r = reader(&b);
  fat_get_u32(&r);
  CHECK(fat_rbuf_done(&r) == -1);
  fat_wbuf_free(&b);
}

static void test_records_round_trip(void) {
  fat_wbuf b = {0};
  fat_gpu_info gi = {.name = "NVIDIA H200", .cc_major = 9, .cc_minor = 0, .sm_count = 132,
                     .driver_version = 13000, .nvrtc_major = 13, .nvrtc_minor = 0,
                     .mem_bytes = (size_t)150 << 30, .smem_per_block_optin = 232448,
                     .l2_bytes = 50331648, .clock_khz = 1980000, .mem_clock_khz = 2619000};
  fat_check ck = {.batch = 2, .heads = 3, .seqlen_q = 37, .seqlen_k = 53, .rel_l2 = 1.25e-3,
                  .max_abs = 0.5, .lse_max_abs = 1e-7, .nonfinite = 4736, .passed = 0,
                  .reason = "4736 non-finite outputs"};
  fat_timing tm = {.reps = 20, .median_ms = 1.5, .min_ms = 1.25, .max_ms = 2, .p10_ms = 1.3,
                   .p90_ms = 1.75, .tflops = 512.5, .sm_clock_mhz = 1980};
  fat_gpu_info gi2;
  fat_check ck2;
  fat_timing tm2;
  fat_put_gpu_info(&b, &gi);
  fat_put_check(&b, &ck);
  fat_put_timing(&b, &tm);
  fat_rbuf r = reader(&b);
  memset(&gi2, 0x55, sizeof gi2);
  memset(&ck2, 0x55, sizeof ck2);
  memset(&tm2, 0x55, sizeof tm2);
  fat_get_gpu_info(&r, &gi2);
  fat_get_check(&r, &ck2);
  fat_get_timing(&r, &tm2);
  CHECK(fat_rbuf_done(&r) == 0);
  CHECK_STR(gi2.name, "NVIDIA H200");
  CHECK(gi2.cc_major == 9 && gi2.cc_minor == 0 && gi2.sm_count == 132 &&
        gi2.driver_version == 13000 && gi2.nvrtc_major == 13 && gi2.nvrtc_minor == 0 &&
        gi2.mem_bytes == ((size_t)150 << 30) && gi2.smem_per_block_optin == 232448 &&
        gi2.l2_bytes == 50331648 && gi2.clock_khz == 1980000 && gi2.mem_clock_khz == 2619000);
  CHECK(ck2.batch == 2 && ck2.heads == 3 && ck2.seqlen_q == 37 && ck2.seqlen_k == 53 &&
        ck2.rel_l2 == 1.25e-3 && ck2.max_abs == 0.5 && ck2.lse_max_abs == 1e-7 &&
        ck2.nonfinite == 4736 && ck2.passed == 0);
  CHECK_STR(ck2.reason, "4736 non-finite outputs");
  CHECK(tm2.reps == 20 && tm2.median_ms == 1.5 && tm2.min_ms == 1.25 && tm2.max_ms == 2 &&
        tm2.p10_ms == 1.3 && tm2.p90_ms == 1.75 && tm2.tflops == 512.5 && tm2.sm_clock_mhz == 1980);
  fat_wbuf_free(&b);
}

static const unsigned char fake_cubin[] = {0x7f, 'E', 'L', 'F', 0, 1, 2, 3, 0xff};

static void fill_kernel(fat_kernel_desc *k, const char *name) {
  memset(k, 0, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name);
  snprintf(k->entry, sizeof k->entry, "fat_fwd_mma80");
  k->block_m = 128;
  k->threads = 256;
  k->smem_bytes = 98304;
  k->dtype = FAT_BF16;
  k->mask = FAT_MASK_CAUSAL;
  k->head_dim = 128;
  k->cubin = fake_cubin;
  k->cubin_size = sizeof fake_cubin;
  k->splits = 1; /* one block per query block and head: the unsplit schedule */
}

/* The hello of each outcome, field by field; a status out of range or an
 * opened worker reporting no device is unreadable. */
static void test_hello_round_trip(void) {
  static fat_hello h, h2;
  fat_wbuf b = {0};
  h.status = FAT_GPU_OPENED;
  h.info = (fat_gpu_info){.name = "NVIDIA H200", .cc_major = 9, .sm_count = 132,
                          .driver_version = 13000, .mem_bytes = (size_t)141 << 30,
                          .clock_khz = 1980000};
  h.device_count = 8;
  fat_put_hello(&b, &h);
  fat_rbuf r = reader(&b);
  memset(&h2, 0x55, sizeof h2);
  fat_get_hello(&r, &h2);
  CHECK(fat_rbuf_done(&r) == 0);
  CHECK_INT(h2.status, FAT_GPU_OPENED);
  CHECK_STR(h2.info.name, "NVIDIA H200");
  CHECK(h2.info.cc_major == 9 && h2.info.sm_count == 132 && h2.info.driver_version == 13000 &&
        h2.info.mem_bytes == ((size_t)141 << 30) && h2.info.clock_khz == 1980000);
  CHECK_INT(h2.device_count, 8);
  CHECK_STR(h2.error, "");
  fat_wbuf_free(&b);
  memset(&h, 0, sizeof h);
  h.status = FAT_GPU_BAD_INDEX;
  snprintf(h.error, sizeof h.error, "GPU index 9 out of range: 8 devices found");
  fat_put_hello(&b, &h);
  r = reader(&b);
  fat_get_hello(&r, &h2);
  CHECK(fat_rbuf_done(&r) == 0);
  CHECK_INT(h2.status, FAT_GPU_BAD_INDEX);
  CHECK_STR(h2.error, "GPU index 9 out of range: 8 devices found");
  CHECK_INT(h2.device_count, 0);
  fat_wbuf_free(&b);
  /* Unreadable: a status past FAT_GPU_OPEN_FAILED, an opened one with no device. */
  fat_put_i32(&b, FAT_GPU_OPEN_FAILED + 1);
  fat_put_str(&b, "?");
  r = reader(&b);
  fat_get_hello(&r, &h2);
  CHECK(fat_rbuf_done(&r) == -1);
  fat_wbuf_free(&b);
  h.status = FAT_GPU_OPENED;
  h.device_count = 0;
  fat_put_hello(&b, &h);
  r = reader(&b);
  fat_get_hello(&r, &h2);
  CHECK(fat_rbuf_done(&r) == -1);
  fat_wbuf_free(&b);
}

static void test_jobs_round_trip(void) {
  static fat_eval_job job, job2;
  static fat_eval_result res, res2;
  static fat_interleave_job il, il2;
  fat_wbuf b = {0};

  /* A decoding variant, local mask: every field of the kernel, the shapes
   * and the problem set to something other than its zero. */
  fill_kernel(&job.kernel, "fwd.splitkv.bf16.d128.local.m64n64w4s2.g1x8");
  job.kernel.mask = FAT_MASK_LOCAL;
  job.kernel.pack_gqa = 1;
  job.kernel.splits = 8;
  job.kernel.paged = 1;
  job.seed = UINT64_C(0xfeedfacecafebeef);
  job.check_seed = UINT64_C(0x0123456789abcdef);
  job.n_shapes = 3;
  job.shapes[0] = (fat_check_shape){FAT_SHAPE_DIMS(1, 2, 2, 37, 53), .window_left = 16,
                                    .window_right = -1, .head_dim = 80, .softcap = 30.5f,
                                    .varlen = 1};
  job.shapes[1] = (fat_check_shape){FAT_SHAPE_DIMS(2, 4, 1, 64, 64), .window_left = -1,
                                    .window_right = 7, .varlen = 1,
                                    .lengths = {.n = 2, .v = {17, 64}}};
  job.shapes[2] = (fat_check_shape){FAT_SHAPE_DIMS(1, 2, 2, 53, 37), .window_left = 3,
                                    .window_right = 5, .head_dim = 120, .softcap = 0.125f,
                                    .page_size = 64, .descale_per_head = 1};
  job.timed = 1;
  job.problem = (fat_problem){.direction = FAT_FWD, .dtype = FAT_BF16, .mask = FAT_MASK_LOCAL,
                              .head_dim = 128, .batch = 4, .heads = 16, .heads_k = 16,
                              .seqlen_q = 4096, .seqlen_k = 4096, .window_left = 256,
                              .page_size = 16};
  job.opts = (fat_time_opts){.reps = 5, .warmup = 1, .flush_l2 = 1, .cutoff_ms = 2.5};
  fat_put_eval_job(&b, &job);
  fat_rbuf r = reader(&b);
  CHECK(fat_get_eval_job(&r, &job2) == 0);
  CHECK_STR(job2.kernel.name, "fwd.splitkv.bf16.d128.local.m64n64w4s2.g1x8");
  CHECK_STR(job2.kernel.entry, "fat_fwd_mma80");
  CHECK(job2.kernel.block_m == 128 && job2.kernel.threads == 256 &&
        job2.kernel.smem_bytes == 98304 && job2.kernel.dtype == FAT_BF16 &&
        job2.kernel.mask == FAT_MASK_LOCAL && job2.kernel.head_dim == 128 &&
        job2.kernel.pack_gqa == 1 && job2.kernel.splits == 8 && job2.kernel.paged == 1);
  CHECK(job2.kernel.cubin_size == sizeof fake_cubin &&
        memcmp(job2.kernel.cubin, fake_cubin, sizeof fake_cubin) == 0);
  /* The cubin is read in place, not copied. */
  CHECK(job2.kernel.cubin >= b.data && job2.kernel.cubin < b.data + b.len);
  CHECK(job2.seed == job.seed && job2.check_seed == job.check_seed && job2.n_shapes == 3 &&
        job2.timed == 1);
  CHECK(memcmp(job2.shapes, job.shapes, 3 * sizeof job.shapes[0]) == 0);
  CHECK(memcmp(&job2.problem, &job.problem, sizeof job.problem) == 0);
  CHECK(job2.shapes[0].window_left == 16 && job2.shapes[0].window_right == -1 &&
        job2.shapes[0].head_dim == 80 && job2.shapes[0].softcap == 30.5f &&
        job2.shapes[0].varlen == 1 && job2.shapes[2].softcap == 0.125f);
  CHECK(job2.problem.mask == FAT_MASK_LOCAL && job2.problem.window_left == 256 &&
        job2.problem.window_right == 0 && job2.problem.page_size == 16 &&
        job2.shapes[2].page_size == 64 && job2.shapes[0].page_size == 0);
  CHECK(job2.shapes[2].descale_per_head == 1 && job2.shapes[0].descale_per_head == 0);
  CHECK(job2.opts.reps == 5 && job2.opts.warmup == 1 && job2.opts.flush_l2 == 1 &&
        job2.opts.cutoff_ms == 2.5);
  /* Every truncation of the message is refused. */
  int refused = 0;
  for (size_t cut = 0; cut < b.len; cut++) {
    fat_rbuf t = {.data = b.data, .len = cut};
    refused += fat_get_eval_job(&t, &job2) == -1;
  }
  CHECK(refused == (int)b.len);
  CHECK(job2.shapes[1].lengths.n == 2 && job2.shapes[1].lengths.v[0] == 17 &&
        job2.shapes[1].lengths.v[1] == 64 && job2.problem.lengths.n == 0);
  /* A shape count beyond the array is refused, not trusted. After the count:
   * 3 shapes of 12 int32 and an f64 (softcap), the second with its 2
   * lengths, then timed, the problem's 13 int32 and the options' 3 and
   * an f64 (the cutoff). */
  const size_t shape_bytes = 12 * sizeof(int32_t) + sizeof(double);
  size_t count_at = b.len - (sizeof(int32_t) * (1 + 13 + 3 + 2) + sizeof(double) + 3 * shape_bytes) -
                    sizeof(int32_t);
  int32_t huge = FAT_MAX_CHECK_SHAPES + 1;
  int32_t was;
  memcpy(&was, b.data + count_at, sizeof was);
  CHECK(was == 3);
  memcpy(b.data + count_at, &huge, sizeof huge);
  r = reader(&b);
  CHECK(fat_get_eval_job(&r, &job2) == -1);
  memcpy(b.data + count_at, &was, sizeof was);
  /* So is a profile longer than FAT_VARLEN_MAX: the second shape's count
   * follows its 9 int32 and the f64. */
  const size_t lengths_at = count_at + sizeof(int32_t) + shape_bytes + 9 * sizeof(int32_t) + sizeof(double);
  memcpy(&was, b.data + lengths_at, sizeof was);
  CHECK(was == 2);
  huge = FAT_VARLEN_MAX + 1;
  memcpy(b.data + lengths_at, &huge, sizeof huge);
  r = reader(&b);
  CHECK(fat_get_eval_job(&r, &job2) == -1);
  fat_wbuf_free(&b);

  /* A cutoff is a time or none: a negative one, NaN or infinity is a
   * garbled frame, not a timing that stops at once or never. */
  const double bad_cutoffs[] = {-1.0, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad_cutoffs / sizeof bad_cutoffs[0]; i++) {
    job.opts.cutoff_ms = bad_cutoffs[i];
    fat_put_eval_job(&b, &job);
    r = reader(&b);
    CHECK_WHY(fat_get_eval_job(&r, &job2) == -1, "cutoff %g accepted", bad_cutoffs[i]);
    fat_wbuf_free(&b);
  }
  job.opts.cutoff_ms = 0;  /* none */
  fat_put_eval_job(&b, &job);
  r = reader(&b);
  CHECK(fat_get_eval_job(&r, &job2) == 0 && job2.opts.cutoff_ms == 0);
  fat_wbuf_free(&b);

  /* A schedule the kernels do not have is a garbled frame: packing is 0 or
   * 1, splits 0 (the launch's) to 32 (family_splitkv.lua's largest). */
  const int bad_geometry[][2] = {{2, 1}, {-1, 1}, {0, -1}, {0, 33}, {1, -4}};
  for (size_t i = 0; i < sizeof bad_geometry / sizeof bad_geometry[0]; i++) {
    job.kernel.pack_gqa = bad_geometry[i][0];
    job.kernel.splits = bad_geometry[i][1];
    fat_put_eval_job(&b, &job);
    r = reader(&b);
    CHECK_WHY(fat_get_eval_job(&r, &job2) == -1, "pack_gqa %d splits %d accepted",
              bad_geometry[i][0], bad_geometry[i][1]);
    fat_wbuf_free(&b);
  }
  job.kernel.pack_gqa = 0;
  job.kernel.splits = 32;
  fat_put_eval_job(&b, &job);
  r = reader(&b);
  CHECK(fat_get_eval_job(&r, &job2) == 0 && job2.kernel.splits == 32 && job2.kernel.pack_gqa == 0);
  fat_wbuf_free(&b);
  job.kernel.splits = 0; /* chosen at launch */
  fat_put_eval_job(&b, &job);
  r = reader(&b);
  CHECK(fat_get_eval_job(&r, &job2) == 0 && job2.kernel.splits == 0);
  fat_wbuf_free(&b);
  /* Paged is 0 or 1, and only a fused forward's. */
  job.kernel.paged = 2;
  fat_put_eval_job(&b, &job);
  r = reader(&b);
  CHECK(fat_get_eval_job(&r, &job2) == -1);
  fat_wbuf_free(&b);
  job.kernel.paged = 1, job.kernel.kind = FAT_KERNEL_MATERIALIZE;
  fat_put_eval_job(&b, &job);
  r = reader(&b);
  CHECK(fat_get_eval_job(&r, &job2) == -1);
  fat_wbuf_free(&b);
  job.kernel.kind = FAT_KERNEL_FUSED, job.kernel.paged = 0;

  res.n_checks = 2;
  res.checks[0] = (fat_check){.batch = 1, .heads = 2, .seqlen_q = 37, .seqlen_k = 53,
                              .rel_l2 = 3e-3, .max_abs = 1e-2, .lse_max_abs = 1e-6, .nonfinite = 0,
                              .passed = 1, .reason = "ok"};
  res.checks[1] = (fat_check){.batch = 1, .heads = 2, .seqlen_q = 53, .seqlen_k = 37,
                              .rel_l2 = 2e-2, .max_abs = 1e-1, .lse_max_abs = 1e-6, .nonfinite = 0,
                              .passed = 0, .reason = "rel_l2 2.0e-02 > 1.0e-02"};
  res.timed = 0;
  fat_put_eval_result(&b, &res);
  r = reader(&b);
  CHECK(fat_get_eval_result(&r, &res2) == 0);
  CHECK(res2.n_checks == 2 && res2.timed == 0);
  CHECK(res2.checks[0].passed == 1 && res2.checks[1].passed == 0);
  CHECK_STR(res2.checks[1].reason, "rel_l2 2.0e-02 > 1.0e-02");
  CHECK(res2.checks[1].seqlen_q == 53 && res2.checks[1].rel_l2 == 2e-2);
  fat_wbuf_free(&b);

  il.n = 2;
  fill_kernel(&il.kernels[0], "a");
  fill_kernel(&il.kernels[1], "b");
  il.kernels[1].block_m = 64;
  il.kernels[1].pack_gqa = 1;
  il.kernels[1].splits = 16;
  il.problem = job.problem;
  il.opts = (fat_time_opts){.reps = 30, .warmup = 5};
  il.seed = 42;
  fat_put_interleave_job(&b, &il);
  r = reader(&b);
  CHECK(fat_get_interleave_job(&r, &il2) == 0);
  CHECK(il2.n == 2 && il2.seed == 42 && il2.opts.reps == 30 && il2.opts.flush_l2 == 0 &&
        il2.opts.cutoff_ms == 0);
  CHECK_STR(il2.kernels[1].name, "b");
  CHECK(il2.kernels[0].block_m == 128 && il2.kernels[1].block_m == 64);
  CHECK(il2.kernels[0].pack_gqa == 0 && il2.kernels[0].splits == 1 &&
        il2.kernels[1].pack_gqa == 1 && il2.kernels[1].splits == 16);
  CHECK(memcmp(&il2.problem, &job.problem, sizeof job.problem) == 0);
  fat_wbuf_free(&b);
}

static void test_frames(void) {
  int sv[2];
  char err[ERRLEN] = "";
  uint32_t type = 0;
  unsigned char *payload = NULL;
  size_t len = 0;
  fat_wbuf b = {0};

  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  fat_put_str(&b, "hello");
  CHECK(fat_wire_send(sv[0], FAT_MSG_W_FATAL, &b, err, sizeof err) == 0);
  CHECK(fat_wire_send(sv[0], FAT_MSG_P_QUIT, NULL, err, sizeof err) == 0);
  CHECK(fat_wire_recv(sv[1], SHORT_TIMEOUT_MS, &type, &payload, &len, err, sizeof err) == FAT_WIRE_OK);
  CHECK(type == FAT_MSG_W_FATAL && len == b.len && memcmp(payload, b.data, len) == 0);
  free(payload);
  CHECK(fat_wire_recv(sv[1], SHORT_TIMEOUT_MS, &type, &payload, &len, err, sizeof err) == FAT_WIRE_OK);
  CHECK(type == FAT_MSG_P_QUIT && len == 0 && payload == NULL);
  /* Nothing more: a timeout, not an error. */
  CHECK(fat_wire_recv(sv[1], SHORT_TIMEOUT_MS, &type, &payload, &len, err, sizeof err) == FAT_WIRE_TIMEOUT);

  /* A garbled header is refused with what was seen. */
  unsigned char junk[16] = {'J', 'U', 'N', 'K', 1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0};
  CHECK(write(sv[0], junk, sizeof junk) == (ssize_t)sizeof junk);
  CHECK(fat_wire_recv(sv[1], SHORT_TIMEOUT_MS, &type, &payload, &len, err, sizeof err) == FAT_WIRE_ERROR);
  CHECK_STR(err, "bad frame on worker channel (magic 0x4b4e554a, length 5)");
  /* So is a length beyond any real message. */
  uint32_t magic = FAT_WIRE_MAGIC;
  uint64_t huge = FAT_WIRE_MAX_PAYLOAD + 1;
  memcpy(junk, &magic, 4);
  memcpy(junk + 8, &huge, 8);
  CHECK(write(sv[0], junk, sizeof junk) == (ssize_t)sizeof junk);
  CHECK(fat_wire_recv(sv[1], SHORT_TIMEOUT_MS, &type, &payload, &len, err, sizeof err) == FAT_WIRE_ERROR);
  CHECK_STR(err, "bad frame on worker channel (magic 0x57544146, length 1073741825)");

  /* A frame cut short by the peer's death is EOF, saying how far it got;
   * a clean close is EOF too. */
  uint64_t ten = 10;
  memcpy(junk + 8, &ten, 8);
  CHECK(write(sv[0], junk, sizeof junk) == (ssize_t)sizeof junk);
  CHECK(write(sv[0], "abc", 3) == 3);
  close(sv[0]);
  CHECK(fat_wire_recv(sv[1], SHORT_TIMEOUT_MS, &type, &payload, &len, err, sizeof err) == FAT_WIRE_EOF);
  CHECK_STR(err, "worker channel closed after 3 of 10 payload bytes");
  CHECK(fat_wire_recv(sv[1], SHORT_TIMEOUT_MS, &type, &payload, &len, err, sizeof err) == FAT_WIRE_EOF);
  /* Writing to a closed peer is an error, not SIGPIPE. */
  CHECK(fat_wire_send(sv[1], FAT_MSG_P_QUIT, NULL, err, sizeof err) == -1);
  CHECK_PREFIX(err, "write to worker channel: ");
  close(sv[1]);
  fat_wbuf_free(&b);
}

static void test_parent_refusals(void) {
  char reason[ERRLEN];
  fat_timing t;
  int timed = 1;
  fat_worker_options o;
  fat_worker_options_default(&o);
  CHECK(o.timeout_base_s == 20.0 && o.timeout_factor == 50.0 && o.time.reps == 20 &&
        o.time.warmup == 3 && o.time.flush_l2 == 1);
  CHECK(fat_worker_evaluate(NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, &t, &timed, reason,
                            sizeof reason) == FAT_WORKER_ERROR);
  CHECK(timed == 0);
  CHECK_STR(reason, "no worker running (restart it after a fault or timeout)");
  CHECK(fat_worker_time_interleaved(NULL, NULL, NULL, 2, NULL, &t, reason, sizeof reason) ==
        FAT_WORKER_ERROR);
  CHECK_STR(reason, "no worker running (restart it after a fault or timeout)");
  CHECK(!fat_worker_alive(NULL) && fat_worker_pid(NULL) == 0);
  fat_worker_stop(NULL);
}

int main(void) {
  test_no_driver();
  test_stand_in_devices();
  test_result_names();
  test_shape_validation();
  test_scalars_round_trip();
  test_records_round_trip();
  test_hello_round_trip();
  test_jobs_round_trip();
  test_frames();
  test_parent_refusals();
  return check_summary("test_worker_nogpu");
}

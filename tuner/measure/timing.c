/* SPDX-License-Identifier: MIT */
/* Timing variants: N kernels of one problem round-robin between CUDA
 * events, the L2 flushed outside them, both directions; and the SM clock
 * probe read right after the repetitions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpu_run_int.h"
#include "stats.h"

#define CLOCK_SPIN_NS 500000ull         /* 0.5 ms: the clock to 0.2 % (a microsecond timer) */
#define FLUSH_L2_FACTOR 2               /* write twice the L2 to evict everything */
#define FLUSH_MIN_BYTES (64u << 20)     /* if the driver reports no L2 size */
#define FLOP_PER_TFLOP 1e12
#define KHZ_PER_MHZ 1e3
#define BWD_TIMING_LSE 8.0f               /* lse of timing runs: values are irrelevant there,
                                             this keeps P small and finite */

/* ---- timing --------------------------------------------------------- */

static int time_bwd(fat_gpu *g, const fat_gpu_kernel *const *k, int n, const fat_problem *p,
                    const fat_time_opts *o, uint64_t seed, fat_timing *out, char *err,
                    size_t errlen);

int fat_gpu_clock_mhz(fat_gpu *g, int *mhz, char *err, size_t errlen) {
  int rc;
  uint64_t probe[2] = {0, 0};
  unsigned long long spin = CLOCK_SPIN_NS;
  void *args[] = {&g->probe, &spin};
  *mhz = 0;
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  CU(g->cu.cuLaunchKernel(g->clock_fn, 1, 1, 1, 1, 1, 1, 0, g->stream, args, NULL),
     "launching the clock probe");
  if ((rc = fat_gpu_download(g, probe, g->probe, sizeof probe, err, errlen)) != FAT_GPU_OK) goto out;
  /* cycles per ns = GHz; x1000 = MHz. */
  if (probe[1] > 0) *mhz = (int)lround((double)probe[0] / (double)probe[1] * KHZ_PER_MHZ);
out:
  return rc;
}

static int ensure_flush_buffer(fat_gpu *g, char *err, size_t errlen) {
  int rc = FAT_GPU_OK;
  if (g->flush) return rc;
  size_t bytes = (size_t)FLUSH_L2_FACTOR * (size_t)g->info.l2_bytes;
  if (bytes < FLUSH_MIN_BYTES) bytes = FLUSH_MIN_BYTES;
  CU(g->cu.cuMemAlloc(&g->flush, bytes), "cuMemAlloc of the L2 flush buffer, %zu bytes", bytes);
  g->flush_bytes = bytes;
out:
  return rc;
}

/* Launches kernel K of a timing run on its prepared tensors. */
typedef CUresult (*timed_launch)(fat_gpu *g, const fat_gpu_kernel *k, void *tensors);

static CUresult launch_fwd(fat_gpu *g, const fat_gpu_kernel *k, void *tensors) {
  return fat_gpu_launch_variant(g, k, tensors);
}

static CUresult launch_bwd(fat_gpu *g, const fat_gpu_kernel *k, void *tensors) {
  return fat_gpu_bwd_launch(g, k, tensors);
}

/* The timed part of fat_gpu_time, both directions: O->warmup untimed rounds,
 * then O->reps rounds of every kernel in turn (A B C A B C ...), each launch
 * between its own pair of events with the L2 flushed outside them; OUT[i]
 * gets kernel i's statistics and the SM clock seen right after. With a
 * cutoff (one kernel), the first round is waited for and read before the
 * others are queued: past the cutoff, it is the whole timing. */
static int time_round_robin(fat_gpu *g, const fat_gpu_kernel *const *k, int n, const fat_problem *p,
                            const fat_time_opts *o, timed_launch launch, void *tensors,
                            fat_timing *out, char *err, size_t errlen) {
  int rc = FAT_GPU_FAILED, clock_mhz = 0, reps = o->reps;  /* REPS: those run */
  const size_t n_events = 2 * (size_t)n * (size_t)o->reps;
  /* start of (kernel i, rep r) at 2(i·reps + r), stop right after */
  CUevent *events = calloc(n_events, sizeof *events);
  double *ms = malloc((size_t)o->reps * sizeof *ms);
  if (!events || !ms) {
    snprintf(err, errlen, "out of host memory for %zu events", n_events);
    rc = FAT_GPU_FAILED;
    goto out;
  }
  for (size_t e = 0; e < n_events; e++) CU(g->cu.cuEventCreate(&events[e], CU_EVENT_DEFAULT), "cuEventCreate");

  for (int w = 0; w < o->warmup; w++)
    for (int i = 0; i < n; i++)
      CU(launch(g, k[i], tensors), "warm-up launch of %s", k[i]->desc.name);
  for (int r = 0; r < reps; r++) {
    for (int i = 0; i < n; i++) {
      size_t e = 2 * ((size_t)i * o->reps + r);
      /* The flush sits outside the events, so only the kernel is timed. */
      if (o->flush_l2)
        CU(g->cu.cuMemsetD32Async(g->flush, (unsigned)r, g->flush_bytes / sizeof(uint32_t), g->stream),
           "flushing L2");
      CU(g->cu.cuEventRecord(events[e], g->stream), "cuEventRecord");
      CU(launch(g, k[i], tensors), "launching %s", k[i]->desc.name);
      CU(g->cu.cuEventRecord(events[e + 1], g->stream), "cuEventRecord");
    }
    if (r == 0 && o->cutoff_ms > 0) {
      float first;
      CU(g->cu.cuEventSynchronize(events[1]), "running the first repetition of %s",
         k[0]->desc.name);
      CU(g->cu.cuEventElapsedTime(&first, events[0], events[1]), "cuEventElapsedTime");
      if (first > o->cutoff_ms) reps = 1;  /* far behind: nothing more to learn */
    }
  }
  CU(g->cu.cuStreamSynchronize(g->stream), "running the timed repetitions of %s%s", k[0]->desc.name,
     n > 1 ? " and others" : "");
  /* Right after the repetitions, while the clocks are still where the
   * variants ran them. */
  if ((rc = fat_gpu_clock_mhz(g, &clock_mhz, err, errlen)) != FAT_GPU_OK) goto out;

  for (int i = 0; i < n; i++) {
    fat_stats st;
    for (int r = 0; r < reps; r++) {
      size_t e = 2 * ((size_t)i * o->reps + r);
      float elapsed;
      CU(g->cu.cuEventElapsedTime(&elapsed, events[e], events[e + 1]), "cuEventElapsedTime");
      ms[r] = elapsed;
    }
    if (fat_stats_compute(ms, (size_t)reps, &st)) {
      snprintf(err, errlen, "timings of %s are not numbers", k[i]->desc.name);
      rc = FAT_GPU_FAILED;
      goto out;
    }
    fat_timing *ti = &out[i];
    memset(ti, 0, sizeof *ti);
    ti->reps = reps;
    ti->median_ms = st.median;
    ti->min_ms = st.min;
    ti->max_ms = st.max;
    ti->p10_ms = st.p10;
    ti->p90_ms = st.p90;
    ti->tflops = st.median > 0 ? fat_problem_flops(p) / (st.median / MS_PER_S) / FLOP_PER_TFLOP : 0;
    ti->sm_clock_mhz = clock_mhz;
  }
  rc = FAT_GPU_OK;
out:
  if (events)
    for (size_t e = 0; e < n_events; e++)
      if (events[e]) g->cu.cuEventDestroy(events[e]);
  free(events);
  free(ms);
  return rc;
}

int fat_gpu_time(fat_gpu *g, const fat_gpu_kernel *const *k, int n, const fat_problem *p,
                 const fat_time_opts *o, uint64_t seed, fat_timing *out, char *err,
                 size_t errlen) {
  int rc = FAT_GPU_FAILED;
  fat_gpu_tensors t;
  fat_check_shape shape = {.batch = p->batch, .heads = p->heads, .heads_k = p->heads_k,
                           .seqlen_q = p->seqlen_q, .seqlen_k = p->seqlen_k,
                           .window_left = p->window_left, .window_right = p->window_right,
                           .varlen = p->lengths.n > 0, .lengths = p->lengths,
                           /* a paged problem's every cache full (no varlen) */
                           .page_size = p->page_size,
                           /* fp8 K and V: a factor a (batch, key head), as FlashAttention-3
                            * takes them */
                           .descale_per_head = fat_dtype_kv_fp8(p->dtype)};

  memset(&t, 0, sizeof t);
  if (n < 1 || o->reps < 1 || o->warmup < 0) {
    snprintf(err, errlen, "timing needs at least one variant and one repetition (got %d variants, "
             "%d reps, %d warm-up)", n, o->reps, o->warmup);
    return FAT_GPU_FAILED;
  }
  if (o->cutoff_ms != 0 && (n != 1 || !(o->cutoff_ms > 0))) {
    snprintf(err, errlen, "a timing's cutoff (%g ms) needs one variant and a positive time (got %d"
             " variants)", o->cutoff_ms, n);
    return FAT_GPU_FAILED;
  }
  if (k[0]->desc.direction == FAT_BWD) return time_bwd(g, k, n, p, o, seed, out, err, errlen);
  for (int i = 0; i < n; i++)
    if (k[i]->desc.head_dim != p->head_dim || k[i]->desc.dtype != p->dtype ||
        k[i]->desc.mask != p->mask) {
      snprintf(err, errlen, "%s (d%d %s %s) cannot run the problem d%d %s %s", k[i]->desc.name,
               k[i]->desc.head_dim, fat_dtype_name(k[i]->desc.dtype), fat_mask_name(k[i]->desc.mask),
               p->head_dim, fat_dtype_name(p->dtype), fat_mask_name(p->mask));
      return FAT_GPU_FAILED;
    }
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  double t0 = fat_now_s();
  if (o->flush_l2 && (rc = ensure_flush_buffer(g, err, errlen)) != FAT_GPU_OK) return rc;
  if ((rc = fat_gpu_tensors_alloc(g, &shape, p->head_dim, p->dtype, 0, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  if ((rc = fat_gpu_fill_random(g, &t, seed, err, errlen)) != FAT_GPU_OK) goto out;
  for (int i = 0; i < n; i++)
    if ((rc = fat_gpu_ensure_workspace(g, k[i], &t, err, errlen)) != FAT_GPU_OK) goto out;
  phase_lap(g, FAT_PHASE_TIME_BUFFERS, &t0);

  rc = time_round_robin(g, k, n, p, o, launch_fwd, &t, out, err, errlen);
  phase_lap(g, FAT_PHASE_TIMED_RUNS, &t0);
out:
  fat_gpu_tensors_free(g, &t);
  phase_lap(g, FAT_PHASE_TIME_BUFFERS, &t0);
  return rc;
}

/* fat_gpu_time for backward kernels (N and O checked there): the whole
 * backward (every kernel of it) between one pair of events, on inputs
 * random once from SEED and a constant lse (timing needs no reference). */
static int time_bwd(fat_gpu *g, const fat_gpu_kernel *const *k, int n, const fat_problem *p,
                    const fat_time_opts *o, uint64_t seed, fat_timing *out, char *err,
                    size_t errlen) {
  int rc = FAT_GPU_FAILED;
  fat_gpu_bwd_tensors t;
  /* A profile's packed batch as the forward times it (its lengths). */
  const fat_check_shape shape = {.batch = p->batch, .heads = p->heads, .heads_k = p->heads_k,
                                 .seqlen_q = p->seqlen_q, .seqlen_k = p->seqlen_k,
                                 .window_left = p->window_left, .window_right = p->window_right,
                                 .varlen = p->lengths.n > 0, .lengths = p->lengths};
  const float lse_value = BWD_TIMING_LSE;
  unsigned lse_bits;

  memset(&t, 0, sizeof t);
  for (int i = 0; i < n; i++)
    if (k[i]->desc.direction != p->direction || k[i]->desc.head_dim != p->head_dim ||
        k[i]->desc.dtype != p->dtype || k[i]->desc.mask != p->mask) {
      snprintf(err, errlen, "%s (%s d%d %s %s) cannot run the problem %s d%d %s %s", k[i]->desc.name,
               fat_direction_name(k[i]->desc.direction), k[i]->desc.head_dim,
               fat_dtype_name(k[i]->desc.dtype), fat_mask_name(k[i]->desc.mask),
               fat_direction_name(p->direction), p->head_dim, fat_dtype_name(p->dtype),
               fat_mask_name(p->mask));
      return FAT_GPU_FAILED;
    }
  if ((rc = require_support(g, err, errlen)) != FAT_GPU_OK) return rc;
  double t0 = fat_now_s();
  if (o->flush_l2 && (rc = ensure_flush_buffer(g, err, errlen)) != FAT_GPU_OK) return rc;
  if ((rc = fat_gpu_bwd_tensors_alloc(g, &shape, p->head_dim, p->dtype, 0, &t, err, errlen)) != FAT_GPU_OK)
    return rc;
  memcpy(&lse_bits, &lse_value, sizeof lse_bits);
  if ((rc = fat_gpu_fill_random(g, &t.fwd, seed, err, errlen)) != FAT_GPU_OK ||
      (rc = fat_gpu_fill_one(g, t.fwd.o, t.fwd.n_q, p->dtype, fat_seed_derive(seed, SEED_DO + 1), "O", err,
                             errlen)) != FAT_GPU_OK ||
      (rc = fat_gpu_fill_one(g, t.dout, t.fwd.n_q, p->dtype, fat_seed_derive(seed, SEED_DO), "dO", err,
                             errlen)) != FAT_GPU_OK)
    goto out;
  CU(g->cu.cuMemsetD32Async(t.fwd.lse, lse_bits, t.fwd.n_rows, g->stream), "filling lse");
  phase_lap(g, FAT_PHASE_TIME_BUFFERS, &t0);

  rc = time_round_robin(g, k, n, p, o, launch_bwd, &t, out, err, errlen);
  phase_lap(g, FAT_PHASE_TIMED_RUNS, &t0);
out:
  fat_gpu_bwd_tensors_free(g, &t);
  phase_lap(g, FAT_PHASE_TIME_BUFFERS, &t0);
  return rc;
}

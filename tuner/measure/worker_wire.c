/* SPDX-License-Identifier: MIT */
/* Frames and message encodings of the worker protocol (see worker_wire.h). */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "worker_wire.h"
#include "fwd_launch.h"
#include "gpu_run.h"

#define WBUF_MIN_CAP 256
#define HEADER_BYTES 16  /* u32 magic, u32 type, u64 payload length */
#define MS_PER_S 1000
#define NS_PER_MS 1000000

/* ---- buffers -------------------------------------------------------- */

void fat_wbuf_free(fat_wbuf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

static void put_raw(fat_wbuf *b, const void *p, size_t n) {
  if (b->failed) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : WBUF_MIN_CAP;
    while (cap < b->len + n) cap *= 2;
    unsigned char *d = realloc(b->data, cap);
    if (!d) {
      b->failed = 1;
      return;
    }
    b->data = d;
    b->cap = cap;
  }
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
}

void fat_put_u32(fat_wbuf *b, uint32_t x) { put_raw(b, &x, sizeof x); }
void fat_put_i32(fat_wbuf *b, int32_t x) { put_raw(b, &x, sizeof x); }
void fat_put_u64(fat_wbuf *b, uint64_t x) { put_raw(b, &x, sizeof x); }
void fat_put_f64(fat_wbuf *b, double x) { put_raw(b, &x, sizeof x); }

void fat_put_bytes(fat_wbuf *b, const void *p, size_t n) {
  fat_put_u64(b, n);
  put_raw(b, p, n);
}

void fat_put_str(fat_wbuf *b, const char *s) { fat_put_bytes(b, s, s ? strlen(s) : 0); }

static const void *get_raw(fat_rbuf *b, size_t n) {
  if (b->failed || n > b->len - b->pos) {
    b->failed = 1;
    return NULL;
  }
  const void *p = b->data + b->pos;
  b->pos += n;
  return p;
}

#define GETTER(name, type)                        \
  type name(fat_rbuf *b) {                        \
    type x = 0;                                   \
    const void *p = get_raw(b, sizeof x);         \
    if (p) memcpy(&x, p, sizeof x);               \
    return x;                                     \
  }
GETTER(fat_get_u32, uint32_t)
GETTER(fat_get_i32, int32_t)
GETTER(fat_get_u64, uint64_t)
GETTER(fat_get_f64, double)
#undef GETTER

const void *fat_get_bytes(fat_rbuf *b, size_t *n) {
  uint64_t len = fat_get_u64(b);
  const void *p = get_raw(b, (size_t)len);
  *n = p ? (size_t)len : 0;
  return p;
}

void fat_get_str(fat_rbuf *b, char *dst, size_t cap) {
  size_t n;
  const void *p = fat_get_bytes(b, &n);
  if (!p || n >= cap) {
    b->failed = 1;
    if (cap) dst[0] = '\0';
    return;
  }
  memcpy(dst, p, n);
  dst[n] = '\0';
}

int fat_rbuf_done(const fat_rbuf *b) { return b->failed || b->pos != b->len ? -1 : 0; }

/* ---- records -------------------------------------------------------- */

/* A variable-length profile: its count, then that many lengths. A count
 * outside 0 .. FAT_VARLEN_MAX fails the buffer (and reads none). */
static void put_lengths(fat_wbuf *b, const fat_lengths *x) {
  fat_put_i32(b, x->n);
  for (int i = 0; i < x->n && i < FAT_VARLEN_MAX; i++) fat_put_i32(b, x->v[i]);
}

static void get_lengths(fat_rbuf *b, fat_lengths *x) {
  memset(x, 0, sizeof *x);
  const int n = fat_get_i32(b);
  if (n < 0 || n > FAT_VARLEN_MAX) {
    b->failed = 1;
    return;
  }
  x->n = n;
  for (int i = 0; i < n; i++) x->v[i] = fat_get_i32(b);
}

void fat_put_gpu_info(fat_wbuf *b, const fat_gpu_info *x) {
  fat_put_str(b, x->name);
  fat_put_i32(b, x->cc_major);
  fat_put_i32(b, x->cc_minor);
  fat_put_i32(b, x->sm_count);
  fat_put_i32(b, x->driver_version);
  fat_put_i32(b, x->nvrtc_major);
  fat_put_i32(b, x->nvrtc_minor);
  fat_put_u64(b, x->mem_bytes);
  fat_put_i32(b, x->smem_per_block_optin);
  fat_put_i32(b, x->l2_bytes);
  fat_put_i32(b, x->clock_khz);
  fat_put_i32(b, x->mem_clock_khz);
}

void fat_get_gpu_info(fat_rbuf *b, fat_gpu_info *x) {
  fat_get_str(b, x->name, sizeof x->name);
  x->cc_major = fat_get_i32(b);
  x->cc_minor = fat_get_i32(b);
  x->sm_count = fat_get_i32(b);
  x->driver_version = fat_get_i32(b);
  x->nvrtc_major = fat_get_i32(b);
  x->nvrtc_minor = fat_get_i32(b);
  x->mem_bytes = (size_t)fat_get_u64(b);
  x->smem_per_block_optin = fat_get_i32(b);
  x->l2_bytes = fat_get_i32(b);
  x->clock_khz = fat_get_i32(b);
  x->mem_clock_khz = fat_get_i32(b);
}

void fat_put_hello(fat_wbuf *b, const fat_hello *x) {
  fat_put_i32(b, x->status);
  if (x->status == FAT_GPU_OPENED) {
    fat_put_gpu_info(b, &x->info);
    fat_put_i32(b, x->device_count);
  } else {
    fat_put_str(b, x->error);
  }
}

void fat_get_hello(fat_rbuf *b, fat_hello *x) {
  memset(x, 0, sizeof *x);
  x->status = fat_get_i32(b);
  if (x->status < FAT_GPU_OPENED || x->status > FAT_GPU_OPEN_FAILED) {
    b->failed = 1;
    return;
  }
  if (x->status == FAT_GPU_OPENED) {
    fat_get_gpu_info(b, &x->info);
    x->device_count = fat_get_i32(b);
    if (x->device_count < 1) b->failed = 1;
  } else {
    fat_get_str(b, x->error, sizeof x->error);
  }
}

void fat_put_check(fat_wbuf *b, const fat_check *x) {
  fat_put_i32(b, x->batch);
  fat_put_i32(b, x->heads);
  fat_put_i32(b, x->seqlen_q);
  fat_put_i32(b, x->seqlen_k);
  fat_put_f64(b, x->rel_l2);
  fat_put_f64(b, x->max_abs);
  fat_put_f64(b, x->lse_max_abs);
  fat_put_u64(b, (uint64_t)x->nonfinite);
  fat_put_i32(b, x->passed);
  fat_put_str(b, x->reason);
}

void fat_get_check(fat_rbuf *b, fat_check *x) {
  x->batch = fat_get_i32(b);
  x->heads = fat_get_i32(b);
  x->seqlen_q = fat_get_i32(b);
  x->seqlen_k = fat_get_i32(b);
  x->rel_l2 = fat_get_f64(b);
  x->max_abs = fat_get_f64(b);
  x->lse_max_abs = fat_get_f64(b);
  x->nonfinite = (long long)fat_get_u64(b);
  x->passed = fat_get_i32(b);
  fat_get_str(b, x->reason, sizeof x->reason);
}

void fat_put_timing(fat_wbuf *b, const fat_timing *x) {
  fat_put_i32(b, x->reps);
  fat_put_f64(b, x->median_ms);
  fat_put_f64(b, x->min_ms);
  fat_put_f64(b, x->max_ms);
  fat_put_f64(b, x->p10_ms);
  fat_put_f64(b, x->p90_ms);
  fat_put_f64(b, x->tflops);
  fat_put_i32(b, x->sm_clock_mhz);
}

void fat_get_timing(fat_rbuf *b, fat_timing *x) {
  x->reps = fat_get_i32(b);
  x->median_ms = fat_get_f64(b);
  x->min_ms = fat_get_f64(b);
  x->max_ms = fat_get_f64(b);
  x->p10_ms = fat_get_f64(b);
  x->p90_ms = fat_get_f64(b);
  x->tflops = fat_get_f64(b);
  x->sm_clock_mhz = fat_get_i32(b);
}

void fat_put_problem(fat_wbuf *b, const fat_problem *x) {
  fat_put_i32(b, x->direction);
  fat_put_i32(b, x->dtype);
  fat_put_i32(b, x->mask);
  fat_put_i32(b, x->head_dim);
  fat_put_i32(b, x->batch);
  fat_put_i32(b, x->heads);
  fat_put_i32(b, x->heads_k);
  fat_put_i32(b, x->seqlen_q);
  fat_put_i32(b, x->seqlen_k);
  fat_put_i32(b, x->window_left);
  fat_put_i32(b, x->window_right);
  put_lengths(b, &x->lengths);
  fat_put_i32(b, x->page_size);
}

void fat_get_problem(fat_rbuf *b, fat_problem *x) {
  x->direction = (fat_direction)fat_get_i32(b);
  x->dtype = (fat_dtype)fat_get_i32(b);
  x->mask = (fat_mask)fat_get_i32(b);
  x->head_dim = fat_get_i32(b);
  x->batch = fat_get_i32(b);
  x->heads = fat_get_i32(b);
  x->heads_k = fat_get_i32(b);
  x->seqlen_q = fat_get_i32(b);
  x->seqlen_k = fat_get_i32(b);
  x->window_left = fat_get_i32(b);
  x->window_right = fat_get_i32(b);
  get_lengths(b, &x->lengths);
  x->page_size = fat_get_i32(b);
}

void fat_put_shape(fat_wbuf *b, const fat_check_shape *x) {
  fat_put_i32(b, x->batch);
  fat_put_i32(b, x->heads);
  fat_put_i32(b, x->heads_k);
  fat_put_i32(b, x->seqlen_q);
  fat_put_i32(b, x->seqlen_k);
  fat_put_i32(b, x->window_left);
  fat_put_i32(b, x->window_right);
  fat_put_i32(b, x->head_dim);
  fat_put_f64(b, x->softcap);
  fat_put_i32(b, x->varlen);
  put_lengths(b, &x->lengths);
  fat_put_i32(b, x->page_size);
  fat_put_i32(b, x->descale_per_head);
}

void fat_get_shape(fat_rbuf *b, fat_check_shape *x) {
  x->batch = fat_get_i32(b);
  x->heads = fat_get_i32(b);
  x->heads_k = fat_get_i32(b);
  x->seqlen_q = fat_get_i32(b);
  x->seqlen_k = fat_get_i32(b);
  x->window_left = fat_get_i32(b);
  x->window_right = fat_get_i32(b);
  x->head_dim = fat_get_i32(b);
  x->softcap = (float)fat_get_f64(b);
  x->varlen = fat_get_i32(b);
  get_lengths(b, &x->lengths);
  x->page_size = fat_get_i32(b);
  x->descale_per_head = fat_get_i32(b);
}

void fat_put_kernel(fat_wbuf *b, const fat_kernel_desc *x) {
  fat_put_str(b, x->name);
  fat_put_str(b, x->entry);
  fat_put_i32(b, x->block_m);
  fat_put_i32(b, x->threads);
  fat_put_i32(b, x->smem_bytes);
  fat_put_i32(b, x->dtype);
  fat_put_i32(b, x->mask);
  fat_put_i32(b, x->head_dim);
  fat_put_bytes(b, x->cubin, x->cubin_size);
  fat_put_i32(b, x->kind);
  fat_put_i32(b, x->direction);
  fat_put_i32(b, x->block_q);
  fat_put_i32(b, x->dq_mode);
  fat_put_i32(b, x->pack_gqa);
  fat_put_i32(b, x->splits);
  fat_put_i32(b, x->block_n);
  fat_put_i32(b, x->persistent);
  fat_put_i32(b, x->tma_slab);
  fat_put_i32(b, x->paged);
}

void fat_get_kernel(fat_rbuf *b, fat_kernel_desc *x) {
  fat_get_str(b, x->name, sizeof x->name);
  fat_get_str(b, x->entry, sizeof x->entry);
  x->block_m = fat_get_i32(b);
  x->threads = fat_get_i32(b);
  x->smem_bytes = fat_get_i32(b);
  x->dtype = (fat_dtype)fat_get_i32(b);
  if ((int)x->dtype < 0 || (int)x->dtype >= FAT_N_DTYPES) b->failed = 1;
  x->mask = (fat_mask)fat_get_i32(b);
  x->head_dim = fat_get_i32(b);
  x->cubin = fat_get_bytes(b, &x->cubin_size);
  int32_t kind = fat_get_i32(b);
  if (kind != FAT_KERNEL_FUSED && kind != FAT_KERNEL_MATERIALIZE && kind != FAT_KERNEL_FUSED_TMA)
    b->failed = 1;
  x->kind = kind == FAT_KERNEL_MATERIALIZE || kind == FAT_KERNEL_FUSED_TMA ? (fat_kernel_kind)kind
                                                                           : FAT_KERNEL_FUSED;
  int32_t direction = fat_get_i32(b);
  if (direction != FAT_FWD && direction != FAT_BWD) b->failed = 1;
  x->direction = direction == FAT_BWD ? FAT_BWD : FAT_FWD;
  x->block_q = fat_get_i32(b);
  int32_t dq_mode = fat_get_i32(b);
  if (dq_mode != FAT_DQ_ATOMIC && dq_mode != FAT_DQ_SEPARATE && dq_mode != FAT_DQ_ORDERED) b->failed = 1;
  x->dq_mode = dq_mode == FAT_DQ_SEPARATE || dq_mode == FAT_DQ_ORDERED ? (fat_dq_mode)dq_mode : FAT_DQ_ATOMIC;
  x->pack_gqa = fat_get_i32(b);
  x->splits = fat_get_i32(b);
  /* SPLITS 0: the launch chooses them. */
  if (x->pack_gqa < 0 || x->pack_gqa > 1 || x->splits < 0 || x->splits > FAT_FWD_MAX_SPLITS)
    b->failed = 1;
  x->block_n = fat_get_i32(b);
  x->persistent = fat_get_i32(b);
  if (x->kind == FAT_KERNEL_FUSED_TMA ? x->block_n < 1 || x->block_n > 256 : x->block_n != 0)
    b->failed = 1;
  /* A backward's resident blocks have no drawn schedule. */
  const int most = x->direction == FAT_BWD ? FAT_FWD_RESIDENT : FAT_FWD_DRAWN;
  if (x->persistent != 0 && (x->kind != FAT_KERNEL_FUSED_TMA || x->persistent < 0 || x->persistent > most))
    b->failed = 1;
  x->tma_slab = fat_get_i32(b);
  /* A slab is a row of 128 or 64 bytes of Q: 64 or 32 16-bit columns, 128
   * or 64 of e4m3. */
  const int slab_bytes = x->tma_slab * (int)fat_dtype_size(x->dtype);
  if (x->kind == FAT_KERNEL_FUSED_TMA ? slab_bytes != FAT_TMA_SLAB_BYTES && slab_bytes != FAT_TMA_SLAB_BYTES / 2
                                      : x->tma_slab != 0)
    b->failed = 1;
  /* A paged variant is a forward one of the fused launch. */
  x->paged = fat_get_i32(b);
  if (x->paged != 0 && (x->paged != 1 || x->direction != FAT_FWD || x->kind != FAT_KERNEL_FUSED))
    b->failed = 1;
}

void fat_put_time_opts(fat_wbuf *b, const fat_time_opts *x) {
  fat_put_i32(b, x->reps);
  fat_put_i32(b, x->warmup);
  fat_put_i32(b, x->flush_l2);
  fat_put_f64(b, x->cutoff_ms);
}

void fat_get_time_opts(fat_rbuf *b, fat_time_opts *x) {
  x->reps = fat_get_i32(b);
  x->warmup = fat_get_i32(b);
  x->flush_l2 = fat_get_i32(b);
  x->cutoff_ms = fat_get_f64(b);
  /* A cutoff is a time or none: NaN, infinity or a negative is garbage. */
  if (!(x->cutoff_ms >= 0) || !isfinite(x->cutoff_ms)) b->failed = 1;
}

void fat_put_ceilings(fat_wbuf *b, const fat_ceilings *x) {
  fat_put_f64(b, x->copy_bytes_per_s);
  fat_put_f64(b, x->mma_fp16_flops_per_s);
  fat_put_f64(b, x->mma_bf16_flops_per_s);
  for (int t = FAT_FP16; t <= FAT_BF16; t++) {
    fat_put_f64(b, x->wgmma_flops_per_s[t]);
    fat_put_f64(b, x->wgmma_rs_flops_per_s[t]);
  }
  fat_put_u64(b, x->copy_bytes);
  fat_put_i32(b, x->reps);
}

void fat_get_ceilings(fat_rbuf *b, fat_ceilings *x) {
  x->copy_bytes_per_s = fat_get_f64(b);
  x->mma_fp16_flops_per_s = fat_get_f64(b);
  x->mma_bf16_flops_per_s = fat_get_f64(b);
  for (int t = FAT_FP16; t <= FAT_BF16; t++) {
    x->wgmma_flops_per_s[t] = fat_get_f64(b);
    x->wgmma_rs_flops_per_s[t] = fat_get_f64(b);
  }
  x->copy_bytes = fat_get_u64(b);
  x->reps = fat_get_i32(b);
}

/* ---- jobs ----------------------------------------------------------- */

void fat_put_ceiling_job(fat_wbuf *b, const fat_ceiling_job *x) {
  fat_put_bytes(b, x->cubin, x->cubin_size);
  for (int t = FAT_FP16; t <= FAT_BF16; t++)
    fat_put_bytes(b, x->wgmma_cubin[t], x->wgmma_cubin_size[t]);
  fat_put_i32(b, x->reps);
  fat_put_i32(b, x->warmup);
}

int fat_get_ceiling_job(fat_rbuf *b, fat_ceiling_job *x) {
  memset(x, 0, sizeof *x);
  x->cubin = fat_get_bytes(b, &x->cubin_size);
  for (int t = FAT_FP16; t <= FAT_BF16; t++) {
    x->wgmma_cubin[t] = fat_get_bytes(b, &x->wgmma_cubin_size[t]);
    if (!x->wgmma_cubin_size[t]) x->wgmma_cubin[t] = NULL;  /* none: nothing to load */
  }
  x->reps = fat_get_i32(b);
  x->warmup = fat_get_i32(b);
  /* At least one timed run and a cubin; anything else is not a job. */
  if (x->reps < 1 || x->warmup < 0 || x->cubin_size == 0) b->failed = 1;
  return fat_rbuf_done(b);
}

int fat_get_ceilings_result(fat_rbuf *b, fat_ceilings *x) {
  memset(x, 0, sizeof *x);
  fat_get_ceilings(b, x);
  return fat_rbuf_done(b);
}

/* A count read from the wire, checked against its array before use. */
static int get_count(fat_rbuf *b, int max) {
  int32_t n = fat_get_i32(b);
  if (n < 0 || n > max) {
    b->failed = 1;
    return 0;
  }
  return n;
}

void fat_put_eval_job(fat_wbuf *b, const fat_eval_job *x) {
  fat_put_kernel(b, &x->kernel);
  fat_put_u64(b, x->seed);
  fat_put_u64(b, x->check_seed);
  fat_put_i32(b, x->n_shapes);
  for (int i = 0; i < x->n_shapes; i++) fat_put_shape(b, &x->shapes[i]);
  fat_put_i32(b, x->timed);
  fat_put_problem(b, &x->problem);
  fat_put_time_opts(b, &x->opts);
}

int fat_get_eval_job(fat_rbuf *b, fat_eval_job *x) {
  memset(x, 0, sizeof *x);
  fat_get_kernel(b, &x->kernel);
  x->seed = fat_get_u64(b);
  x->check_seed = fat_get_u64(b);
  x->n_shapes = get_count(b, FAT_MAX_CHECK_SHAPES);
  for (int i = 0; i < x->n_shapes; i++) fat_get_shape(b, &x->shapes[i]);
  x->timed = fat_get_i32(b);
  fat_get_problem(b, &x->problem);
  fat_get_time_opts(b, &x->opts);
  return fat_rbuf_done(b);
}

void fat_put_eval_result(fat_wbuf *b, const fat_eval_result *x) {
  fat_put_i32(b, x->n_checks);
  for (int i = 0; i < x->n_checks; i++) fat_put_check(b, &x->checks[i]);
  fat_put_i32(b, x->timed);
  fat_put_timing(b, &x->timing);
  for (int i = 0; i < FAT_PHASE_COUNT; i++) fat_put_f64(b, x->phase_s[i]);
}

int fat_get_eval_result(fat_rbuf *b, fat_eval_result *x) {
  memset(x, 0, sizeof *x);
  x->n_checks = get_count(b, FAT_MAX_CHECK_SHAPES);
  for (int i = 0; i < x->n_checks; i++) fat_get_check(b, &x->checks[i]);
  x->timed = fat_get_i32(b);
  fat_get_timing(b, &x->timing);
  for (int i = 0; i < FAT_PHASE_COUNT; i++) x->phase_s[i] = fat_get_f64(b);
  return fat_rbuf_done(b);
}

void fat_put_interleave_job(fat_wbuf *b, const fat_interleave_job *x) {
  fat_put_i32(b, x->n);
  for (int i = 0; i < x->n; i++) fat_put_kernel(b, &x->kernels[i]);
  fat_put_problem(b, &x->problem);
  fat_put_time_opts(b, &x->opts);
  fat_put_u64(b, x->seed);
}

int fat_get_interleave_job(fat_rbuf *b, fat_interleave_job *x) {
  memset(x, 0, sizeof *x);
  x->n = get_count(b, FAT_MAX_INTERLEAVED);
  for (int i = 0; i < x->n; i++) fat_get_kernel(b, &x->kernels[i]);
  fat_get_problem(b, &x->problem);
  fat_get_time_opts(b, &x->opts);
  x->seed = fat_get_u64(b);
  return fat_rbuf_done(b);
}

/* ---- frames --------------------------------------------------------- */

static int write_all(int fd, const void *p, size_t n, char *err, size_t errlen) {
  const unsigned char *c = p;
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == ENOTSOCK) w = write(fd, c, n); /* a pipe (tests) */
    if (w < 0) {
      if (errno == EINTR) continue;
      snprintf(err, errlen, "write to worker channel: %s", strerror(errno));
      return -1;
    }
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

int fat_wire_send(int fd, uint32_t type, const fat_wbuf *payload, char *err, size_t errlen) {
  if (payload && payload->failed) {
    snprintf(err, errlen, "out of host memory encoding message %u", type);
    return -1;
  }
  uint64_t len = payload ? payload->len : 0;
  unsigned char header[HEADER_BYTES];
  uint32_t magic = FAT_WIRE_MAGIC;
  memcpy(header, &magic, sizeof magic);
  memcpy(header + 4, &type, sizeof type);
  memcpy(header + 8, &len, sizeof len);
  if (write_all(fd, header, sizeof header, err, errlen)) return -1;
  return len ? write_all(fd, payload->data, (size_t)len, err, errlen) : 0;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * MS_PER_S + ts.tv_nsec / NS_PER_MS;
}

/* Reads exactly N bytes by DEADLINE (< 0: none). *GOT counts what arrived,
 * so the caller can tell a clean EOF from a frame cut short. */
static int read_all(int fd, void *p, size_t n, long long deadline, size_t *got, char *err,
                    size_t errlen) {
  unsigned char *c = p;
  *got = 0;
  while (*got < n) {
    int wait_ms = -1;
    if (deadline >= 0) {
      long long left = deadline - now_ms();
      if (left <= 0) return FAT_WIRE_TIMEOUT;
      wait_ms = left > INT32_MAX ? INT32_MAX : (int)left;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = poll(&pfd, 1, wait_ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      snprintf(err, errlen, "poll on worker channel: %s", strerror(errno));
      return FAT_WIRE_ERROR;
    }
    if (pr == 0) return FAT_WIRE_TIMEOUT;
    ssize_t r = read(fd, c + *got, n - *got);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      /* A peer that died with unread data resets the connection. */
      if (errno == ECONNRESET) return FAT_WIRE_EOF;
      snprintf(err, errlen, "read from worker channel: %s", strerror(errno));
      return FAT_WIRE_ERROR;
    }
    if (r == 0) return FAT_WIRE_EOF;
    *got += (size_t)r;
  }
  return FAT_WIRE_OK;
}

int fat_wire_recv(int fd, int timeout_ms, uint32_t *type, unsigned char **payload, size_t *len,
                  char *err, size_t errlen) {
  unsigned char header[HEADER_BYTES];
  uint32_t magic;
  uint64_t n;
  size_t got;
  long long deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  int rc;

  *payload = NULL;
  *len = 0;
  if ((rc = read_all(fd, header, sizeof header, deadline, &got, err, errlen)) != FAT_WIRE_OK) {
    if (rc == FAT_WIRE_EOF && got > 0)
      snprintf(err, errlen, "worker channel closed after %zu bytes of a frame header", got);
    return rc;
  }
  memcpy(&magic, header, sizeof magic);
  memcpy(type, header + 4, sizeof *type);
  memcpy(&n, header + 8, sizeof n);
  if (magic != FAT_WIRE_MAGIC || n > FAT_WIRE_MAX_PAYLOAD) {
    snprintf(err, errlen, "bad frame on worker channel (magic 0x%08x, length %llu)", magic,
             (unsigned long long)n);
    return FAT_WIRE_ERROR;
  }
  if (n == 0) return FAT_WIRE_OK;
  unsigned char *data = malloc((size_t)n);
  if (!data) {
    snprintf(err, errlen, "out of host memory for a %llu-byte frame", (unsigned long long)n);
    return FAT_WIRE_ERROR;
  }
  if ((rc = read_all(fd, data, (size_t)n, deadline, &got, err, errlen)) != FAT_WIRE_OK) {
    if (rc == FAT_WIRE_EOF)
      snprintf(err, errlen, "worker channel closed after %zu of %llu payload bytes", got,
               (unsigned long long)n);
    free(data);
    return rc;
  }
  *payload = data;
  *len = (size_t)n;
  return FAT_WIRE_OK;
}

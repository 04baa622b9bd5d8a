/* SPDX-License-Identifier: MIT */
/* The wire format between the tuner and its worker process: length-prefixed
 * binary frames over a socket pair, and the encoding of every message. Both
 * ends are the same binary on the same machine, but fields are still written
 * one by one (fixed-width, little-endian as the host is) rather than as raw
 * structs, so that a truncated or garbled frame is detected, never
 * misread. Pure functions and file descriptors: tested without a GPU. */
#ifndef FAT_WORKER_WIRE_H
#define FAT_WORKER_WIRE_H
#include <stddef.h>
#include <stdint.h>
#include "job.h"
#include "types.h"

/* Message types. P_ = parent to worker, W_ = worker to parent. */
enum {
  FAT_MSG_W_HELLO = 1,      /* fat_hello. First message */
  FAT_MSG_P_SETUP,          /* bytes util cubin, bytes reference cubin */
  FAT_MSG_W_READY,          /* (empty) setup done */
  FAT_MSG_P_EVALUATE,       /* fat_eval_job */
  FAT_MSG_W_EVALUATED,      /* fat_eval_result */
  FAT_MSG_P_INTERLEAVE,     /* fat_interleave_job */
  FAT_MSG_W_INTERLEAVED,    /* i32 n, n timings */
  FAT_MSG_W_REJECTED,       /* str: the job could not run, the worker is fine */
  FAT_MSG_W_FATAL,          /* str: the context died; the worker exits right after */
  FAT_MSG_P_QUIT,           /* (empty) exit now */
  FAT_MSG_P_CEILINGS,       /* fat_ceiling_job: measure the GPU's ceilings */
  FAT_MSG_W_CEILINGS,       /* fat_ceilings */
};

/* Frames larger than this are garbage, not data (cubins are a few MB). */
#define FAT_WIRE_MAX_PAYLOAD ((uint64_t)1 << 30)
#define FAT_WIRE_MAGIC 0x57544146u /* "FATW" */

/* A growing output buffer. A failed allocation sets FAILED and later puts
 * do nothing; the sender checks once at the end. */
typedef struct fat_wbuf {
  unsigned char *data;
  size_t len, cap;
  int failed;
} fat_wbuf;

void fat_wbuf_free(fat_wbuf *b);
void fat_put_u32(fat_wbuf *b, uint32_t x);
void fat_put_i32(fat_wbuf *b, int32_t x);
void fat_put_u64(fat_wbuf *b, uint64_t x);
void fat_put_f64(fat_wbuf *b, double x);
void fat_put_bytes(fat_wbuf *b, const void *p, size_t n); /* u64 length, then bytes */
void fat_put_str(fat_wbuf *b, const char *s);             /* as bytes, without the NUL */

/* A reader over one payload. Reading past the end sets FAILED and yields
 * zeros; the receiver checks once at the end (fat_rbuf_done). */
typedef struct fat_rbuf {
  const unsigned char *data;
  size_t len, pos;
  int failed;
} fat_rbuf;

uint32_t fat_get_u32(fat_rbuf *b);
int32_t fat_get_i32(fat_rbuf *b);
uint64_t fat_get_u64(fat_rbuf *b);
double fat_get_f64(fat_rbuf *b);
/* A pointer into the payload (not copied) and its length in *N. */
const void *fat_get_bytes(fat_rbuf *b, size_t *n);
/* Copies a string into DST (CAP bytes, NUL-terminated); fails when it does
 * not fit. */
void fat_get_str(fat_rbuf *b, char *dst, size_t cap);
/* 0 when everything was read exactly (no overrun, nothing left over). */
int fat_rbuf_done(const fat_rbuf *b);

/* Records of the vocabulary in types.h, kernel.h and job.h. */
void fat_put_gpu_info(fat_wbuf *b, const fat_gpu_info *x);
void fat_get_gpu_info(fat_rbuf *b, fat_gpu_info *x);

/* The worker's first message: i32 STATUS (gpu_run.h's fat_gpu_open_status,
 * 0 opened to 4); opened, its device's gpu_info and i32 the devices its
 * driver reports (at least 1); else str why not. fat_get_hello fails the
 * reader on a status out of that range or a count below 1. */
#define FAT_HELLO_ERROR_MAX 1024
typedef struct fat_hello {
  int status;
  fat_gpu_info info;                /* opened only */
  int device_count;                 /* opened only: what --gpu all tunes on */
  char error[FAT_HELLO_ERROR_MAX];  /* not opened only */
} fat_hello;
void fat_put_hello(fat_wbuf *b, const fat_hello *x);
void fat_get_hello(fat_rbuf *b, fat_hello *x);
void fat_put_check(fat_wbuf *b, const fat_check *x);
void fat_get_check(fat_rbuf *b, fat_check *x);
void fat_put_timing(fat_wbuf *b, const fat_timing *x);
void fat_get_timing(fat_rbuf *b, fat_timing *x);
void fat_put_problem(fat_wbuf *b, const fat_problem *x);
void fat_get_problem(fat_rbuf *b, fat_problem *x);
void fat_put_shape(fat_wbuf *b, const fat_check_shape *x);
void fat_get_shape(fat_rbuf *b, fat_check_shape *x);
void fat_put_kernel(fat_wbuf *b, const fat_kernel_desc *x);  /* cubin included */
void fat_get_kernel(fat_rbuf *b, fat_kernel_desc *x);        /* cubin points into the payload */
void fat_put_time_opts(fat_wbuf *b, const fat_time_opts *x);
void fat_get_time_opts(fat_rbuf *b, fat_time_opts *x);
void fat_put_ceilings(fat_wbuf *b, const fat_ceilings *x);
void fat_get_ceilings(fat_rbuf *b, fat_ceilings *x);

/* Evaluate: check one variant on each shape, then (when every check passed
 * and TIMED is 1) time it on PROBLEM. */
typedef struct fat_eval_job {
  fat_kernel_desc kernel;
  uint64_t seed;                  /* the timing's inputs are drawn from it */
  uint64_t check_seed;            /* check i draws its inputs from fat_seed_derive(check_seed, i):
                                     one for every variant of a problem, so that each check
                                     shape's reference is computed once (ref_cache.h) */
  int n_shapes;
  fat_check_shape shapes[FAT_MAX_CHECK_SHAPES];
  int timed;                      /* 1: time on PROBLEM after the checks */
  fat_problem problem;
  fat_time_opts opts;
} fat_eval_job;

typedef struct fat_eval_result {
  int n_checks;
  fat_check checks[FAT_MAX_CHECK_SHAPES];
  int timed;                      /* 1 when TIMING holds a measurement */
  fat_timing timing;
  double phase_s[FAT_PHASE_COUNT];  /* the worker's seconds in each phase since its last reply */
} fat_eval_result;

typedef struct fat_interleave_job {
  int n;
  fat_kernel_desc kernels[FAT_MAX_INTERLEAVED];
  fat_problem problem;
  fat_time_opts opts;
  uint64_t seed;
} fat_interleave_job;

/* Ceilings: the microbenchmarks' cubin (templates/ceilings.cu, compiled by
 * the parent for the worker's GPU), on sm_90a the wgmma ones'
 * (templates/ceilings_wgmma90.cu, one a dtype), and how many runs to make. */
typedef struct fat_ceiling_job {
  const void *cubin;              /* not owned; on receipt points into the payload */
  size_t cubin_size;
  const void *wgmma_cubin[2];     /* by fat_dtype, as CUBIN; size 0 (and NULL on receipt):
                                     no wgmma ceiling to measure */
  size_t wgmma_cubin_size[2];
  int reps, warmup;
} fat_ceiling_job;

void fat_put_ceiling_job(fat_wbuf *b, const fat_ceiling_job *x);
int fat_get_ceiling_job(fat_rbuf *b, fat_ceiling_job *x);   /* 0, or -1 when malformed */
int fat_get_ceilings_result(fat_rbuf *b, fat_ceilings *x);  /* 0, or -1 when malformed */

void fat_put_eval_job(fat_wbuf *b, const fat_eval_job *x);
int fat_get_eval_job(fat_rbuf *b, fat_eval_job *x);        /* 0, or -1 when malformed */
void fat_put_eval_result(fat_wbuf *b, const fat_eval_result *x);
int fat_get_eval_result(fat_rbuf *b, fat_eval_result *x);
void fat_put_interleave_job(fat_wbuf *b, const fat_interleave_job *x);
int fat_get_interleave_job(fat_rbuf *b, fat_interleave_job *x);

/* Outcomes of fat_wire_recv. */
enum { FAT_WIRE_OK = 0, FAT_WIRE_EOF = 1, FAT_WIRE_TIMEOUT = 2, FAT_WIRE_ERROR = -1 };

/* Writes one frame (magic, type, length, payload) to FD in full. No
 * SIGPIPE: a dead peer is an error (EPIPE), not a signal. Returns 0, or -1
 * with err. */
int fat_wire_send(int fd, uint32_t type, const fat_wbuf *payload, char *err, size_t errlen);

/* Reads one frame within TIMEOUT_MS (< 0: wait forever). On FAT_WIRE_OK,
 * *TYPE is set and *PAYLOAD (heap, free() it; NULL when empty) holds *LEN
 * bytes. FAT_WIRE_EOF when the peer closed before a frame started,
 * FAT_WIRE_TIMEOUT when the time ran out, FAT_WIRE_ERROR (err set) for a
 * bad frame, a frame cut short or an I/O error. */
int fat_wire_recv(int fd, int timeout_ms, uint32_t *type, unsigned char **payload, size_t *len,
                  char *err, size_t errlen);
#endif

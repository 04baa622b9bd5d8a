/* SPDX-License-Identifier: MIT */
/* The tuner's GPU worker: a child process that owns the CUDA context and
 * does every check and timing, so that a variant that faults or hangs kills
 * only the worker. The parent (the tuner) never initialises CUDA; it sends
 * cubins and shapes over a socket pair (worker_wire.h) and waits with a
 * watchdog. After a fault or a timeout the worker is gone: the caller
 * records the variant as failed, calls fat_worker_recover (which restarts
 * it) and goes on.
 *
 * The worker is a fresh process image: fork, then exec of the running
 * binary itself (/proc/self/exe) with FATUNE_WORKER_FD and FATUNE_WORKER_GPU
 * in its environment; a constructor in worker.c sees them and runs the
 * worker loop before main. A plain fork would not do: NVRTC loads libcuda
 * into the parent, and the driver refuses cuInit in a forked copy of a
 * process that has it (CUDA_ERROR_NOT_INITIALIZED); exec also leaves behind
 * every lock, thread, SQLite and Lua state of the parent. Any binary that
 * links fatune_core and calls fat_worker_start can therefore host a worker.
 * Between fork and exec the child calls only async-signal-safe functions, so
 * starting a worker is safe while other threads (compiles) run. The worker
 * dies with the thread that started it (PR_SET_PDEATHSIG): start it from
 * the thread that lives as long as the run. */
#ifndef FAT_WORKER_H
#define FAT_WORKER_H
#include <stddef.h>
#include <stdint.h>
#include "gpu_run.h"
#include "job.h"
#include "types.h"

typedef struct fat_worker fat_worker;

/* What a call to the worker came to. */
typedef enum fat_worker_status {
  FAT_WORKER_OK = 0,        /* a result (checks may still have failed: see each fat_check) */
  FAT_WORKER_FAULT = 1,     /* the worker died on this job: reason "fault: CUDA_ERROR_..." or
                               "fault: worker killed by signal 11 (Segmentation fault)"; restart */
  FAT_WORKER_TIMEOUT = 2,   /* no answer in time; the worker was killed: reason
                               "timeout: no answer in 20 s"; restart */
  FAT_WORKER_REJECTED = 3,  /* the worker could not run the job (out of memory, a launch the
                               driver refused while timing); it is still running */
  FAT_WORKER_ERROR = -1,    /* bad arguments, or the worker is not running; nothing was sent */
} fat_worker_status;

/* Tunables; fat_worker_options_default fills the defaults. */
typedef struct fat_worker_options {
  double timeout_base_s;    /* watchdog: every job gets this much ... */
  double timeout_factor;    /* ... plus this many times its estimated duration */
  fat_time_opts time;       /* repetitions, warm-up, L2 flush */
  int screen_reps;          /* > 0: the timing after a variant's checks is a screening of
                               this many repetitions (fewer than FAT_FULL_REPS) after
                               FAT_SCREEN_WARMUP untimed ones, but for the
                               default variant's, which the run's table prints as a
                               figure; interleaved jobs take
                               time.reps. 0: every timing takes time.reps, and no
                               cutoff applies (fat_worker_evaluate) */
  uint64_t seed;            /* first job's seed; each job after takes the next */
} fat_worker_options;

#define FAT_WORKER_TIMEOUT_BASE_S 20.0
#define FAT_WORKER_TIMEOUT_FACTOR 50.0
#define FAT_WORKER_DEFAULT_SEED 20240601u

void fat_worker_options_default(fat_worker_options *o);

/* Forks a worker for GPU index GPU, which initialises CUDA, describes the
 * device in INFO (nvrtc_* left for the caller), and loads the reference and
 * utility kernels, compiled here with NVRTC for its architecture (once per
 * fat_worker; restarts reuse the cubins). OPTS may be NULL (defaults).
 * Returns FAT_GPU_OPENED (0), or the code of why not (gpu_run.h's
 * fat_gpu_open_status, the worker's own for the device) with err: "no CUDA
 * driver: could not load libcuda.so.1 (...)", "no CUDA device: cuInit:
 * ...", "GPU index 3 out of range: 1 device found"; FAT_GPU_OPEN_FAILED for
 * anything else (fork, NVRTC, the support kernels). */
int fat_worker_start(int gpu, const fat_worker_options *opts, fat_worker **w,
                     fat_gpu_info *info, char *err, size_t errlen);

/* Replaces a dead (or live) worker process by a fresh one on the same GPU
 * with the same options. Returns 0, or fat_worker_start's code with err.
 * The fresh worker dies with the thread that restarted it, as a started
 * one does: the tuner's lanes restart theirs from the lane's thread, which
 * lives until the run's last job on that GPU. */
int fat_worker_restart(fat_worker *w, char *err, size_t errlen);

/* The one restart policy, for a caller after any job: a worker the job lost
 * (it died, hung and was killed, or broke the protocol and was killed) is
 * replaced by a fresh one; one that is still running is left as it is.
 * Returns 0 when a worker is running, -1 with err when none would restart. */
int fat_worker_recover(fat_worker *w, char *err, size_t errlen);

/* Asks the worker to exit, kills it if it does not, reaps it, frees W. */
void fat_worker_stop(fat_worker *w);

/* 1 while a worker process is running. */
int fat_worker_alive(const fat_worker *w);

/* How many devices the worker's driver reports on this machine, as its
 * last start saw them (--gpu all tunes on each): at least 1. */
int fat_worker_device_count(const fat_worker *w);

/* The process id of the running worker (0 when none): for tests and logs. */
int fat_worker_pid(const fat_worker *w);

/* Checks variant V (compiled into B for this GPU's architecture) on
 * N_SHAPES shapes (at most FAT_MAX_CHECK_SHAPES), each with fresh random
 * inputs; CHECKS[i] gets shape i's outcome. Then, when every check passed
 * and PROBLEM is not NULL, times it on PROBLEM: *TIMED = 1 and TIMING
 * filled (else *TIMED = 0). CUTOFF_MS > 0: a screening (screen_reps) whose
 * first repetition takes longer stops there, TIMING of 1 repetition (the
 * caller passes FAT_DROP_FACTOR times its problem's best so far); a full
 * timing ignores it; 0: none. Returns a fat_worker_status; REASON (may be
 * NULL) says why for anything but OK. */
int fat_worker_evaluate(fat_worker *w, const fat_variant *v, const fat_build *b,
                        const fat_check_shape *shapes, int n_shapes, const fat_problem *problem,
                        double cutoff_ms, fat_check *checks, fat_timing *timing, int *timed,
                        char *reason, size_t reasonlen);

/* Times N variants (at most FAT_MAX_INTERLEAVED, all for PROBLEM's head
 * dim, dtype and mask) round-robin, A B C A B C ..., so that close
 * contenders meet the same clocks and temperatures; TIMINGS[i] gets
 * variant i's. No checks: call it with variants that passed. */
int fat_worker_time_interleaved(fat_worker *w, const fat_variant *const *v,
                                const fat_build *const *b, int n, const fat_problem *problem,
                                fat_timing *timings, char *reason, size_t reasonlen);

/* Adds to PHASE_S the seconds W's worker spent in each phase (job.h's
 * fat_phase) over the evaluate and interleave jobs it answered, and to
 * *JOB_S the wall seconds of those jobs as the parent waited for them
 * (the difference is the messages, the marshalling and what the phases
 * leave out). */
void fat_worker_phases(const fat_worker *w, double phase_s[FAT_PHASE_COUNT], double *job_s);

/* Measures the GPU's ceilings (job.h's fat_ceilings): device-memory copy
 * bandwidth and the mma.sync fp16 and bf16 rates, and on a GPU whose
 * architecture has wgmma (sm_90a) the wgmma fp16 and bf16 rates, each the
 * median of FAT_CEILING_REPS runs. templates/ceilings.cu (and
 * ceilings_wgmma90.cu) is compiled here with NVRTC on first use (ERROR
 * with NVRTC's reason when it cannot be). Returns a fat_worker_status;
 * REJECTED when the buffers do not fit. */
int fat_worker_measure_ceilings(fat_worker *w, fat_ceilings *out, char *reason, size_t reasonlen);
#endif

/* SPDX-License-Identifier: MIT */
/* The worker process and the parent's side of it (see worker.h): fork,
 * handshake, jobs over a socket pair with a watchdog, and the child's loop
 * that runs each job with gpu_run.h's calls and reports. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "child_env.h"
#include "compile.h"
#include "family.h"
#include "gpu_run.h"
#include "progress.h"
#include "worker.h"
#include "fwd_launch.h"
#include "worker_wire.h"

#define START_TIMEOUT_MS 60000     /* cuInit and module loads; generous for a cold driver */
#define REAP_GRACE_MS 5000         /* a worker that reported a fault gets this long to exit */
#define REAP_POLL_NS 10000000L     /* 10 ms between looks while waiting for it */
#define QUIT_GRACE_MS 2000         /* fat_worker_stop: time to exit politely */
#define MS_PER_S 1000.0
/* Pessimistic rates for the watchdog's estimate of a job: the fp64
 * reference runs at a few TFLOP/s on any GPU fatune supports, a variant at
 * tens; the factor in the options multiplies the estimate anyway. */
#define REFERENCE_FLOP_PER_S 1e12
#define VARIANT_FLOP_PER_S 1e13
/* The ceilings job: a few hundred ms of microbenchmarks (about a second
 * with the wgmma ones) and a few buffer allocations; the watchdog
 * multiplies this by the timeout factor. */
#define CEILINGS_ESTIMATE_S 3.0
#define TIMING_SEED_STREAM 0x7fffffffu /* the timing inputs' stream, apart from the checks' */
/* The checks' seed, one for the worker's life: every variant checked on a
 * shape draws the same inputs, so the shape's fp64 reference is computed
 * once (ref_cache.h); it is still fresh for every run (tune.c draws
 * opts.seed). */
#define CHECK_SEED_STREAM 0x7ffffffeu
#define MSG_MAX 1024
#define SELF_EXE "/proc/self/exe"        /* the running binary: the worker is a copy of it */
#define WORKER_ARGV0 "fatune-worker"     /* what ps shows */
#define WORKER_FD_ENV "FATUNE_WORKER_FD"   /* the worker's end of the channel */
#define WORKER_GPU_ENV "FATUNE_WORKER_GPU" /* the device index it opens */
#define ENV_VAR_MAX 64

enum { CHILD_EXIT_OK = 0, CHILD_EXIT_NO_GPU = 2, CHILD_EXIT_FATAL = 3, CHILD_EXIT_PROTOCOL = 4 };

struct fat_worker {
  int gpu;
  pid_t pid;                 /* 0: no worker running */
  int fd;                    /* parent's end of the socket pair; -1 when none */
  fat_worker_options opts;
  fat_gpu_info info;
  int device_count;          /* devices the worker's driver reports */
  char arch[16];
  fat_build util, ref;       /* support cubins for ARCH, compiled once */
  fat_build ceilings;        /* templates/ceilings.cu for ARCH, compiled on first use */
  fat_build wgmma_ceilings[2];  /* templates/ceilings_wgmma90.cu by fat_dtype, likewise, where
                                   ARCH has wgmma (fat_arch_has_wgmma) */
  uint64_t jobs;             /* jobs sent so far: job j uses seed opts.seed + j */
  double phase_s[FAT_PHASE_COUNT];  /* the worker's seconds in each phase, from its replies */
  double job_s;              /* wall seconds of the evaluate and interleave jobs, sent to answered */
};

static void set_msg(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_msg(char *buf, size_t len, const char *fmt, ...) {
  if (!buf || !len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
}

void fat_worker_options_default(fat_worker_options *o) {
  memset(o, 0, sizeof *o);
  o->timeout_base_s = FAT_WORKER_TIMEOUT_BASE_S;
  o->timeout_factor = FAT_WORKER_TIMEOUT_FACTOR;
  o->time.reps = FAT_DEFAULT_REPS;
  o->time.warmup = FAT_DEFAULT_WARMUP;
  o->time.flush_l2 = 1;
  o->seed = FAT_WORKER_DEFAULT_SEED;
}

/* ====================================================================== */
/* The child                                                              */
/* ====================================================================== */

static void child_send(int fd, uint32_t type, const fat_wbuf *b) {
  char err[MSG_MAX];
  /* Nothing to do if the parent is gone: the next read sees EOF. */
  (void)fat_wire_send(fd, type, b, err, sizeof err);
}

static void child_send_text(int fd, uint32_t type, const char *text) {
  fat_wbuf b = {0};
  fat_put_str(&b, text);
  child_send(fd, type, &b);
  fat_wbuf_free(&b);
}

/* The context is dead: say why, then leave without running anything of
 * the parent's (atexit handlers, stdio buffers, SQLite). */
static void child_fatal(int fd, const char *why) __attribute__((noreturn));
static void child_fatal(int fd, const char *why) {
  child_send_text(fd, FAT_MSG_W_FATAL, why);
  _exit(CHILD_EXIT_FATAL);
}

static void child_evaluate(int fd, fat_gpu *g, fat_rbuf *in) {
  static fat_eval_job job;
  static fat_eval_result res;
  char err[MSG_MAX];
  fat_gpu_kernel k;
  fat_wbuf out = {0};
  int rc;

  if (fat_get_eval_job(in, &job)) child_fatal(fd, "malformed evaluate message");
  memset(&res, 0, sizeof res);
  res.n_checks = job.n_shapes;
  rc = fat_gpu_kernel_load(g, &job.kernel, &k, err, sizeof err);
  if (rc == FAT_GPU_FATAL) child_fatal(fd, err);
  if (rc == FAT_GPU_FAILED) {
    /* A cubin this GPU cannot load fails every check, for the same reason. */
    for (int i = 0; i < job.n_shapes; i++) {
      fat_check *c = &res.checks[i];
      c->batch = job.shapes[i].batch;
      c->heads = job.shapes[i].heads;
      c->seqlen_q = job.shapes[i].seqlen_q;
      c->seqlen_k = job.shapes[i].seqlen_k;
      c->rel_l2 = c->max_abs = c->lse_max_abs = NAN; /* nothing was measured */
      set_msg(c->reason, sizeof c->reason, "load: %s", err);
    }
    goto reply;
  }
  int all_passed = 1;
  for (int i = 0; i < job.n_shapes; i++) {
    rc = fat_gpu_check(g, &k, &job.shapes[i], fat_seed_derive(job.check_seed, (uint64_t)i),
                       &res.checks[i], err, sizeof err);
    if (rc == FAT_GPU_FATAL) child_fatal(fd, err);
    if (rc == FAT_GPU_FAILED) goto rejected;
    all_passed &= res.checks[i].passed;
  }
  /* Check before time: a wrong kernel's speed is worth nothing. */
  if (job.timed && all_passed) {
    const fat_gpu_kernel *one = &k;
    rc = fat_gpu_time(g, &one, 1, &job.problem, &job.opts,
                      fat_seed_derive(job.seed, TIMING_SEED_STREAM), &res.timing, err, sizeof err);
    if (rc == FAT_GPU_FATAL) child_fatal(fd, err);
    if (rc == FAT_GPU_FAILED) goto rejected;
    res.timed = 1;
  }
  fat_gpu_kernel_unload(g, &k);
reply:
  fat_gpu_take_phases(g, res.phase_s);
  fat_put_eval_result(&out, &res);
  child_send(fd, FAT_MSG_W_EVALUATED, &out);
  fat_wbuf_free(&out);
  return;
rejected:
  fat_gpu_kernel_unload(g, &k);
  child_send_text(fd, FAT_MSG_W_REJECTED, err);
}

static void child_interleave(int fd, fat_gpu *g, fat_rbuf *in) {
  static fat_interleave_job job;
  fat_gpu_kernel k[FAT_MAX_INTERLEAVED];
  const fat_gpu_kernel *kp[FAT_MAX_INTERLEAVED];
  fat_timing t[FAT_MAX_INTERLEAVED];
  char err[MSG_MAX], text[MSG_MAX];
  fat_wbuf out = {0};
  int loaded = 0, rc = FAT_GPU_OK;

  if (fat_get_interleave_job(in, &job)) child_fatal(fd, "malformed interleave message");
  for (; loaded < job.n; loaded++) {
    rc = fat_gpu_kernel_load(g, &job.kernels[loaded], &k[loaded], err, sizeof err);
    if (rc != FAT_GPU_OK) break;
    kp[loaded] = &k[loaded];
  }
  if (rc == FAT_GPU_OK)
    rc = fat_gpu_time(g, kp, job.n, &job.problem, &job.opts, job.seed, t, err, sizeof err);
  for (int i = 0; i < loaded; i++) fat_gpu_kernel_unload(g, &k[i]);
  if (rc == FAT_GPU_FATAL) child_fatal(fd, err);
  if (rc == FAT_GPU_FAILED) {
    snprintf(text, sizeof text, "%s", err);
    child_send_text(fd, FAT_MSG_W_REJECTED, text);
    return;
  }
  double phase_s[FAT_PHASE_COUNT] = {0};
  fat_gpu_take_phases(g, phase_s);
  fat_put_i32(&out, job.n);
  for (int i = 0; i < job.n; i++) fat_put_timing(&out, &t[i]);
  for (int i = 0; i < FAT_PHASE_COUNT; i++) fat_put_f64(&out, phase_s[i]);
  child_send(fd, FAT_MSG_W_INTERLEAVED, &out);
  fat_wbuf_free(&out);
}

static void child_ceilings(int fd, fat_gpu *g, fat_rbuf *in) {
  fat_ceiling_job job;
  fat_ceilings c;
  char err[MSG_MAX];
  fat_wbuf out = {0};
  if (fat_get_ceiling_job(in, &job)) child_fatal(fd, "malformed ceilings message");
  int rc = fat_gpu_measure_ceilings(g, job.cubin, job.wgmma_cubin, job.reps, job.warmup, &c, err,
                                    sizeof err);
  if (rc == FAT_GPU_FATAL) child_fatal(fd, err);
  if (rc == FAT_GPU_FAILED) {
    child_send_text(fd, FAT_MSG_W_REJECTED, err);
    return;
  }
  fat_put_ceilings(&out, &c);
  child_send(fd, FAT_MSG_W_CEILINGS, &out);
  fat_wbuf_free(&out);
}

static void child_main(int fd, int gpu) __attribute__((noreturn));
static void child_main(int fd, int gpu) {
  static fat_hello hello;
  char err[MSG_MAX];
  fat_gpu *g = NULL;
  fat_wbuf out = {0};

  /* ^C at a terminal reaches the whole process group, and so does the
   * SIGTERM of a batch scheduler: the parent decides when to stop (after
   * the job in hand) and then ends this worker (it dies with the parent
   * too: PR_SET_PDEATHSIG). */
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);

  hello.status = fat_gpu_open(gpu, &g, &hello.info, err, sizeof err);
  if (hello.status != FAT_GPU_OPENED) {
    snprintf(hello.error, sizeof hello.error, "%s", err);
    fat_put_hello(&out, &hello);
    child_send(fd, FAT_MSG_W_HELLO, &out);
    _exit(CHILD_EXIT_NO_GPU);
  }
  hello.device_count = fat_gpu_device_count(g);
  fat_put_hello(&out, &hello);
  child_send(fd, FAT_MSG_W_HELLO, &out);
  fat_wbuf_free(&out);

  for (;;) {
    uint32_t type;
    unsigned char *payload;
    size_t len;
    int rc = fat_wire_recv(fd, -1, &type, &payload, &len, err, sizeof err);
    if (rc != FAT_WIRE_OK) _exit(rc == FAT_WIRE_EOF ? CHILD_EXIT_OK : CHILD_EXIT_PROTOCOL);
    fat_rbuf in = {.data = payload, .len = len};
    switch (type) {
      case FAT_MSG_P_SETUP: {
        size_t n_util, n_ref;
        const void *util = fat_get_bytes(&in, &n_util);
        const void *ref = fat_get_bytes(&in, &n_ref);
        if (fat_rbuf_done(&in)) child_fatal(fd, "malformed setup message");
        if (fat_gpu_load_support(g, util, ref, err, sizeof err) != FAT_GPU_OK) child_fatal(fd, err);
        child_send(fd, FAT_MSG_W_READY, NULL);
        break;
      }
      case FAT_MSG_P_EVALUATE:
        child_evaluate(fd, g, &in);
        break;
      case FAT_MSG_P_INTERLEAVE:
        child_interleave(fd, g, &in);
        break;
      case FAT_MSG_P_CEILINGS:
        child_ceilings(fd, g, &in);
        break;
      case FAT_MSG_P_QUIT:
        _exit(CHILD_EXIT_OK);
      default:
        snprintf(err, sizeof err, "unknown message type %u", type);
        child_fatal(fd, err);
    }
    free(payload);
  }
}

/* ====================================================================== */
/* The parent                                                             */
/* ====================================================================== */

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits up to GRACE_MS for the worker to exit, then kills it; describes how
 * it ended in DEATH ("worker killed by signal 11 (Segmentation fault)"). */
static void reap(fat_worker *w, int grace_ms, char *death, size_t deathlen) {
  int status = 0;
  pid_t r = 0;
  long long deadline = now_ms() + grace_ms;
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  if (w->pid <= 0) return;
  while ((r = waitpid(w->pid, &status, WNOHANG)) == 0 && now_ms() < deadline) {
    struct timespec pause = {.tv_sec = 0, .tv_nsec = REAP_POLL_NS};
    nanosleep(&pause, NULL);
  }
  if (r == 0) {
    kill(w->pid, SIGKILL);
    while ((r = waitpid(w->pid, &status, 0)) < 0 && errno == EINTR) {
    }
  }
  if (r < 0)
    set_msg(death, deathlen, "worker %d vanished (%s)", (int)w->pid, strerror(errno));
  else if (WIFSIGNALED(status))
    set_msg(death, deathlen, "worker killed by signal %d (%s)", WTERMSIG(status),
            strsignal(WTERMSIG(status)));
  else
    set_msg(death, deathlen, "worker exited with status %d", WEXITSTATUS(status));
  w->pid = 0;
}

static void kill_now(fat_worker *w) {
  char ignored[MSG_MAX];
  if (w->pid > 0) kill(w->pid, SIGKILL);
  reap(w, 0, ignored, sizeof ignored);
}

/* Sends one message and waits up to TIMEOUT_MS for the answer. OK: the
 * answer is of type WANT and *PAYLOAD (*LEN bytes) holds it; free it.
 * Anything else is turned into a status and a reason; after FAULT,
 * TIMEOUT or ERROR the worker is gone. */
static int transact(fat_worker *w, uint32_t type, const fat_wbuf *msg, int timeout_ms,
                    uint32_t want, unsigned char **payload, size_t *len, char *reason,
                    size_t reasonlen) {
  char err[MSG_MAX] = "", death[MSG_MAX] = "";
  uint32_t got;
  int rc;

  *payload = NULL;
  *len = 0;
  if (fat_wire_send(w->fd, type, msg, err, sizeof err)) {
    /* A worker that died while reading leaves EPIPE here; what it said
     * before dying (if anything) is still in the channel. */
    if (msg && msg->failed) {
      set_msg(reason, reasonlen, "%s", err);
      return FAT_WORKER_ERROR;
    }
    timeout_ms = REAP_GRACE_MS;
  }
  rc = fat_wire_recv(w->fd, timeout_ms, &got, payload, len, err, sizeof err);
  if (rc == FAT_WIRE_TIMEOUT) {
    kill_now(w);
    set_msg(reason, reasonlen, "timeout: no answer in %.0f s", timeout_ms / MS_PER_S);
    return FAT_WORKER_TIMEOUT;
  }
  if (rc == FAT_WIRE_EOF) {
    reap(w, REAP_GRACE_MS, death, sizeof death);
    set_msg(reason, reasonlen, "fault: %s", death);
    return FAT_WORKER_FAULT;
  }
  if (rc == FAT_WIRE_ERROR) {
    kill_now(w);
    set_msg(reason, reasonlen, "worker protocol: %s", err);
    return FAT_WORKER_ERROR;
  }
  if (got == want) return FAT_WORKER_OK;

  fat_rbuf in = {.data = *payload, .len = *len};
  char text[MSG_MAX];
  fat_get_str(&in, text, sizeof text);
  if (fat_rbuf_done(&in)) snprintf(text, sizeof text, "(unreadable message)");
  free(*payload);
  *payload = NULL;
  if (got == FAT_MSG_W_FATAL) {
    reap(w, REAP_GRACE_MS, death, sizeof death);
    set_msg(reason, reasonlen, "fault: %s", text);
    return FAT_WORKER_FAULT;
  }
  if (got == FAT_MSG_W_REJECTED) {
    set_msg(reason, reasonlen, "%s", text);
    return FAT_WORKER_REJECTED;
  }
  kill_now(w);
  set_msg(reason, reasonlen, "worker protocol: answer of type %u to message %u", got, type);
  return FAT_WORKER_ERROR;
}

/* The environment of a worker: the parent's, plus where to find its
 * channel and its GPU (fat_child_env: built before fork). */
#define WORKER_ENV_VARS 2
static char **worker_environment(int fd, int gpu) {
  char fd_var[ENV_VAR_MAX], gpu_var[ENV_VAR_MAX];
  snprintf(fd_var, sizeof fd_var, WORKER_FD_ENV "=%d", fd);
  snprintf(gpu_var, sizeof gpu_var, WORKER_GPU_ENV "=%d", gpu);
  const char *const vars[WORKER_ENV_VARS] = {fd_var, gpu_var};
  return fat_child_env(vars, WORKER_ENV_VARS);
}

/* In the forked child: keep only the channel, arrange to die with the
 * parent, and become a fresh copy of this binary. Async-signal-safe calls
 * only. On failure, tells the parent why in a hello frame written by hand. */
static void exec_worker(int fd, pid_t parent, const char *exe, char **envp)
    __attribute__((noreturn));
static void exec_worker(int fd, pid_t parent, const char *exe, char **envp) {
  static const char failed[] = "could not exec the worker (" SELF_EXE ")";
  char *const argv[] = {(char *)WORKER_ARGV0, NULL};
  /* Not the parent's database, not other workers' channels: their EOF must
   * not wait for us. */
  if (fd > STDERR_FILENO + 1) close_range(STDERR_FILENO + 1, (unsigned)fd - 1, 0);
  close_range((unsigned)fd + 1, ~0u, 0);
  fcntl(fd, F_SETFD, 0); /* the channel survives exec */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(CHILD_EXIT_OK);
  execve(exe, argv, envp);
  /* hello (fat_put_hello): magic, type, length, then i32 FAT_GPU_OPEN_FAILED
   * and the message as bytes. */
  unsigned char frame[16 + 4 + 8 + sizeof failed - 1];
  uint32_t magic = FAT_WIRE_MAGIC, type = FAT_MSG_W_HELLO;
  uint64_t len = sizeof frame - 16, text_len = sizeof failed - 1;
  int32_t ok = FAT_GPU_OPEN_FAILED;
  memcpy(frame, &magic, 4);
  memcpy(frame + 4, &type, 4);
  memcpy(frame + 8, &len, 8);
  memcpy(frame + 16, &ok, 4);
  memcpy(frame + 20, &text_len, 8);
  memcpy(frame + 28, failed, sizeof failed - 1);
  ssize_t ignored = write(fd, frame, sizeof frame);
  (void)ignored;
  _exit(CHILD_EXIT_NO_GPU);
}

/* The worker's entry point: runs before main in a process exec'd by
 * exec_worker, recognised by its environment; returns at once in any other
 * process. glibc runs constructors of the executable after its libraries
 * are initialised, so the worker may use everything. */
__attribute__((constructor)) static void worker_entry(void) {
  const char *fd_s = getenv(WORKER_FD_ENV), *gpu_s = getenv(WORKER_GPU_ENV);
  if (!fd_s || !gpu_s) return;
  int fd = atoi(fd_s), gpu = atoi(gpu_s);
  /* Not inherited by anything the driver may start. */
  unsetenv(WORKER_FD_ENV);
  unsetenv(WORKER_GPU_ENV);
  child_main(fd, gpu);
}

/* Forks the worker, reads its hello, compiles the support kernels on first
 * use and hands them over. */
static int spawn(fat_worker *w, fat_gpu_info *info, char *err, size_t errlen) {
  int sv[2], rc = FAT_GPU_OPEN_FAILED;
  unsigned char *payload = NULL;
  size_t len;
  uint32_t type;
  char death[MSG_MAX], reason[MSG_MAX];
  fat_wbuf setup = {0};

  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
    set_msg(err, errlen, "socketpair for the worker: %s", strerror(errno));
    return FAT_GPU_OPEN_FAILED;
  }
  char **envp = worker_environment(sv[1], w->gpu);
  if (!envp) {
    set_msg(err, errlen, "out of host memory preparing the worker's environment");
    close(sv[0]);
    close(sv[1]);
    return FAT_GPU_OPEN_FAILED;
  }
  /* The binary's own path, resolved here: in the child /proc/self/exe would
   * name whatever runs us (valgrind, a loader), not fatune. */
  char exe[PATH_MAX];
  ssize_t exe_len = readlink(SELF_EXE, exe, sizeof exe - 1);
  if (exe_len <= 0) {
    set_msg(err, errlen, "cannot resolve %s: %s", SELF_EXE, strerror(errno));
    fat_child_env_free(envp, WORKER_ENV_VARS);
    close(sv[0]);
    close(sv[1]);
    return FAT_GPU_OPEN_FAILED;
  }
  exe[exe_len] = 0;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    set_msg(err, errlen, "fork of the worker: %s", strerror(errno));
    fat_child_env_free(envp, WORKER_ENV_VARS);
    close(sv[0]);
    close(sv[1]);
    return FAT_GPU_OPEN_FAILED;
  }
  if (pid == 0) exec_worker(sv[1], parent, exe, envp); /* never returns */
  fat_child_env_free(envp, WORKER_ENV_VARS);
  close(sv[1]);
  w->pid = pid;
  w->fd = sv[0];

  int r = fat_wire_recv(w->fd, START_TIMEOUT_MS, &type, &payload, &len, reason, sizeof reason);
  if (r == FAT_WIRE_TIMEOUT) {
    kill_now(w);
    set_msg(err, errlen, "worker for GPU %d did not start within %g s", w->gpu, START_TIMEOUT_MS / MS_PER_S);
    goto out;
  }
  if (r != FAT_WIRE_OK || type != FAT_MSG_W_HELLO) {
    reap(w, REAP_GRACE_MS, death, sizeof death);
    set_msg(err, errlen, "worker for GPU %d failed to start: %s", w->gpu,
            r == FAT_WIRE_OK ? "unexpected first message" : death);
    goto out;
  }
  fat_rbuf in = {.data = payload, .len = len};
  fat_hello hello;
  fat_get_hello(&in, &hello);
  if (fat_rbuf_done(&in)) {
    kill_now(w);
    set_msg(err, errlen, "worker sent an unreadable hello");
    goto out;
  }
  if (hello.status != FAT_GPU_OPENED) {
    /* The worker's own code and words: "no CUDA driver: ...", "GPU index ...". */
    set_msg(err, errlen, "%s", hello.error);
    rc = hello.status;
    reap(w, REAP_GRACE_MS, death, sizeof death);
    goto out;
  }
  w->info = hello.info;
  w->device_count = hello.device_count;
  free(payload);
  payload = NULL;

  if (!w->util.ok) {
    /* NVRTC runs here, in the parent: the child never needs it, and the
     * cubins survive restarts. */
    fat_arch_for_cc(w->info.cc_major, w->info.cc_minor, w->arch);
    if (fat_gpu_compile_support(w->arch, &w->util, &w->ref, err, errlen)) {
      kill_now(w);
      goto out;
    }
  }
  fat_put_bytes(&setup, w->util.cubin, w->util.cubin_size);
  fat_put_bytes(&setup, w->ref.cubin, w->ref.cubin_size);
  r = transact(w, FAT_MSG_P_SETUP, &setup, START_TIMEOUT_MS, FAT_MSG_W_READY, &payload, &len,
               reason, sizeof reason);
  if (r != FAT_WORKER_OK) {
    if (w->pid) kill_now(w);
    set_msg(err, errlen, "worker for GPU %d could not load its support kernels: %s", w->gpu, reason);
    goto out;
  }
  if (info) *info = w->info;
  rc = FAT_GPU_OPENED;
out:
  free(payload);
  fat_wbuf_free(&setup);
  return rc;
}

int fat_worker_start(int gpu, const fat_worker_options *opts, fat_worker **out,
                     fat_gpu_info *info, char *err, size_t errlen) {
  fat_worker *w = calloc(1, sizeof *w);
  *out = NULL;
  if (!w) {
    set_msg(err, errlen, "out of host memory starting a worker");
    return FAT_GPU_OPEN_FAILED;
  }
  w->gpu = gpu;
  w->fd = -1;
  if (opts)
    w->opts = *opts;
  else
    fat_worker_options_default(&w->opts);
  int rc = spawn(w, info, err, errlen);
  if (rc != FAT_GPU_OPENED) {
    fat_worker_stop(w);
    return rc;
  }
  *out = w;
  return 0;
}

int fat_worker_restart(fat_worker *w, char *err, size_t errlen) {
  kill_now(w);
  return spawn(w, NULL, err, errlen);
}

void fat_worker_stop(fat_worker *w) {
  char ignored[MSG_MAX];
  if (!w) return;
  if (w->pid > 0 && w->fd >= 0) {
    (void)fat_wire_send(w->fd, FAT_MSG_P_QUIT, NULL, ignored, sizeof ignored);
    reap(w, QUIT_GRACE_MS, ignored, sizeof ignored);
  }
  kill_now(w);
  fat_build_free(&w->util);
  fat_build_free(&w->ref);
  fat_build_free(&w->ceilings);
  for (int t = FAT_FP16; t <= FAT_BF16; t++) fat_build_free(&w->wgmma_ceilings[t]);
  free(w);
}

int fat_worker_recover(fat_worker *w, char *err, size_t errlen) {
  if (!w) {
    set_msg(err, errlen, "no worker");
    return -1;
  }
  return w->pid > 0 ? 0 : fat_worker_restart(w, err, errlen);
}

int fat_worker_alive(const fat_worker *w) { return w && w->pid > 0; }
int fat_worker_device_count(const fat_worker *w) { return w ? w->device_count : 0; }
int fat_worker_pid(const fat_worker *w) { return w ? (int)w->pid : 0; }

void fat_worker_phases(const fat_worker *w, double phase_s[FAT_PHASE_COUNT], double *job_s) {
  if (!w) return;
  for (int i = 0; i < FAT_PHASE_COUNT; i++) phase_s[i] += w->phase_s[i];
  *job_s += w->job_s;
}

/* ---- jobs ----------------------------------------------------------- */

static double shape_flops(const fat_check_shape *s, const fat_variant *v) {
  fat_problem p = {.direction = v->direction, .dtype = v->dtype, .mask = v->mask,
                   .head_dim = v->head_dim, .batch = s->batch, .heads = s->heads,
                   .heads_k = s->heads_k, .seqlen_q = s->seqlen_q, .seqlen_k = s->seqlen_k};
  return fat_problem_flops(&p);
}

static int watchdog_ms(const fat_worker *w, double estimate_s) {
  double ms = (w->opts.timeout_base_s + w->opts.timeout_factor * estimate_s) * MS_PER_S;
  return ms > INT32_MAX ? INT32_MAX : (int)ms;
}


static int validate_problem(const fat_problem *p, const fat_variant *v, char *reason,
                            size_t reasonlen) {
  fat_check_shape s = {FAT_SHAPE_DIMS(p->batch, p->heads, p->heads_k, p->seqlen_q, p->seqlen_k)};
  char err[MSG_MAX];
  if (p->direction != v->direction || p->head_dim != v->head_dim || p->dtype != v->dtype ||
      p->mask != v->mask) {
    set_msg(reason, reasonlen, "%s (d%d %s %s) cannot run the problem %s d%d %s %s", v->name,
            v->head_dim, fat_dtype_name(v->dtype), fat_mask_name(v->mask),
            fat_direction_name(p->direction), p->head_dim, fat_dtype_name(p->dtype),
            fat_mask_name(p->mask));
    return -1;
  }
  if (fat_check_shape_validate(&s, 0, err, sizeof err)) {
    /* The message names "check shape 0"; say "timing problem" instead. */
    const char *colon = strchr(err, ':');
    set_msg(reason, reasonlen, "timing problem%s", colon ? colon : err);
    return -1;
  }
  return 0;
}

static int require_alive(const fat_worker *w, char *reason, size_t reasonlen) {
  if (fat_worker_alive(w)) return 0;
  set_msg(reason, reasonlen, "no worker running (restart it after a fault or timeout)");
  return -1;
}

int fat_worker_evaluate(fat_worker *w, const fat_variant *v, const fat_build *b,
                        const fat_check_shape *shapes, int n_shapes, const fat_problem *problem,
                        double cutoff_ms, fat_check *checks, fat_timing *timing, int *timed,
                        char *reason, size_t reasonlen) {
  /* Each on the heap: thousands of bytes, and one worker per GPU may be
   * driven from its own thread. */
  fat_eval_job *job = calloc(1, sizeof *job);
  fat_eval_result *res = calloc(1, sizeof *res);
  fat_wbuf msg = {0};
  unsigned char *payload = NULL;
  size_t len;
  int rc = FAT_WORKER_ERROR;
  double estimate_s = 0;

  *timed = 0;
  if (!job || !res) {
    set_msg(reason, reasonlen, "out of host memory for a job");
    goto out;
  }
  if (require_alive(w, reason, reasonlen) || fat_kernel_describe(v, b, &job->kernel, reason, reasonlen))
    goto out;
  if (n_shapes < 0 || n_shapes > FAT_MAX_CHECK_SHAPES) {
    set_msg(reason, reasonlen, "%d check shapes (at most %d)", n_shapes, FAT_MAX_CHECK_SHAPES);
    goto out;
  }
  for (int i = 0; i < n_shapes; i++) {
    if (fat_check_shape_validate(&shapes[i], i, reason, reasonlen)) goto out;
    job->shapes[i] = shapes[i];
    double f = shape_flops(&shapes[i], v);
    estimate_s += f / REFERENCE_FLOP_PER_S + f / VARIANT_FLOP_PER_S;
  }
  if (problem && validate_problem(problem, v, reason, reasonlen)) goto out;
  if (!(cutoff_ms >= 0) || !isfinite(cutoff_ms)) {
    set_msg(reason, reasonlen, "cutoff %g ms: not a time (0 for none)", cutoff_ms);
    goto out;
  }
  job->n_shapes = n_shapes;
  job->seed = w->opts.seed + w->jobs++;
  job->check_seed = fat_seed_derive(w->opts.seed, CHECK_SEED_STREAM);
  job->timed = problem != NULL;
  job->opts = w->opts.time;
  /* A screening, but for the default variant's, whose full timing the
   * run's table prints beside the winner ("x default") and the library
   * serves where no winner is. The materialising baseline's figure ("x
   * materialise") is a screening's too: it runs 28 to 60 times the
   * winner's time, so five repetitions of it spread far less than the
   * ratio's two digits, and its full timing was 7 s of a cold d128 run's
   * 54 s of timed launches. */
  if (w->opts.screen_reps > 0 && !v->is_default) {
    job->opts.reps = w->opts.screen_reps;
    if (job->opts.warmup > FAT_SCREEN_WARMUP) job->opts.warmup = FAT_SCREEN_WARMUP;
    /* Only a screening stops early: a full timing (the default's, every
     * one with --exhaustive) runs all its repetitions. */
    job->opts.cutoff_ms = cutoff_ms;
  }
  if (problem) {
    job->problem = *problem;
    estimate_s += (job->opts.reps + job->opts.warmup) * fat_problem_flops(problem) /
                  VARIANT_FLOP_PER_S;
  } else {
    memset(&job->problem, 0, sizeof job->problem);
  }
  fat_put_eval_job(&msg, job);

  const double t0 = fat_now_s();
  rc = transact(w, FAT_MSG_P_EVALUATE, &msg, watchdog_ms(w, estimate_s), FAT_MSG_W_EVALUATED,
                &payload, &len, reason, reasonlen);
  w->job_s += fat_now_s() - t0;
  if (rc != FAT_WORKER_OK) goto out;
  fat_rbuf in = {.data = payload, .len = len};
  if (fat_get_eval_result(&in, res) || res->n_checks != n_shapes) {
    kill_now(w);
    set_msg(reason, reasonlen, "worker protocol: unreadable result for %s", v->name);
    rc = FAT_WORKER_ERROR;
    goto out;
  }
  for (int i = 0; i < n_shapes; i++) checks[i] = res->checks[i];
  for (int i = 0; i < FAT_PHASE_COUNT; i++) w->phase_s[i] += res->phase_s[i];
  if (res->timed && timing) {
    *timing = res->timing;
    *timed = 1;
  }
  set_msg(reason, reasonlen, "ok");
out:
  free(job);
  free(res);
  free(payload);
  fat_wbuf_free(&msg);
  return rc;
}

int fat_worker_time_interleaved(fat_worker *w, const fat_variant *const *v,
                                const fat_build *const *b, int n, const fat_problem *problem,
                                fat_timing *timings, char *reason, size_t reasonlen) {
  fat_interleave_job *job = calloc(1, sizeof *job);
  fat_wbuf msg = {0};
  unsigned char *payload = NULL;
  size_t len;
  int rc = FAT_WORKER_ERROR;

  if (!job) {
    set_msg(reason, reasonlen, "out of host memory for a job");
    goto out;
  }
  if (require_alive(w, reason, reasonlen)) goto out;
  if (n < 1 || n > FAT_MAX_INTERLEAVED || !problem) {
    set_msg(reason, reasonlen, "%d variants to interleave (1 to %d, and a problem)", n,
            FAT_MAX_INTERLEAVED);
    goto out;
  }
  for (int i = 0; i < n; i++)
    if (fat_kernel_describe(v[i], b[i], &job->kernels[i], reason, reasonlen) ||
        validate_problem(problem, v[i], reason, reasonlen))
      goto out;
  job->n = n;
  job->problem = *problem;
  job->opts = w->opts.time;
  job->seed = w->opts.seed + w->jobs++;
  fat_put_interleave_job(&msg, job);
  double estimate_s =
      n * (job->opts.reps + job->opts.warmup) * fat_problem_flops(problem) / VARIANT_FLOP_PER_S;

  const double t0 = fat_now_s();
  rc = transact(w, FAT_MSG_P_INTERLEAVE, &msg, watchdog_ms(w, estimate_s), FAT_MSG_W_INTERLEAVED,
                &payload, &len, reason, reasonlen);
  w->job_s += fat_now_s() - t0;
  if (rc != FAT_WORKER_OK) goto out;
  fat_rbuf in = {.data = payload, .len = len};
  if (fat_get_i32(&in) != n) in.failed = 1;
  for (int i = 0; i < n; i++) fat_get_timing(&in, &timings[i]);
  double phase_s[FAT_PHASE_COUNT];
  for (int i = 0; i < FAT_PHASE_COUNT; i++) phase_s[i] = fat_get_f64(&in);
  if (fat_rbuf_done(&in)) {
    kill_now(w);
    set_msg(reason, reasonlen, "worker protocol: unreadable interleaved timings");
    rc = FAT_WORKER_ERROR;
    goto out;
  }
  for (int i = 0; i < FAT_PHASE_COUNT; i++) w->phase_s[i] += phase_s[i];
  set_msg(reason, reasonlen, "ok");
out:
  free(job);
  free(payload);
  fat_wbuf_free(&msg);
  return rc;
}

int fat_worker_measure_ceilings(fat_worker *w, fat_ceilings *out, char *reason, size_t reasonlen) {
  fat_wbuf msg = {0};
  unsigned char *payload = NULL;
  size_t len;
  int rc = FAT_WORKER_ERROR;

  memset(out, 0, sizeof *out);
  if (require_alive(w, reason, reasonlen)) goto out;
  if (!w->ceilings.ok) {
    /* NVRTC in the parent, as for the support kernels; kept for restarts. */
    char err[MSG_MAX];
    if (fat_gpu_compile_ceilings(w->arch, &w->ceilings, err, sizeof err)) {
      set_msg(reason, reasonlen, "%s", err);
      goto out;
    }
  }
  fat_ceiling_job job = {.cubin = w->ceilings.cubin, .cubin_size = w->ceilings.cubin_size,
                         .reps = FAT_CEILING_REPS, .warmup = FAT_CEILING_WARMUP};
  for (int t = FAT_FP16; t <= FAT_BF16 && fat_arch_has_wgmma(w->arch); t++) {
    if (!w->wgmma_ceilings[t].ok) {
      char err[MSG_MAX];
      if (fat_gpu_compile_wgmma_ceilings(w->arch, (fat_dtype)t, &w->wgmma_ceilings[t], err,
                                         sizeof err)) {
        set_msg(reason, reasonlen, "%s", err);
        goto out;
      }
    }
    job.wgmma_cubin[t] = w->wgmma_ceilings[t].cubin;
    job.wgmma_cubin_size[t] = w->wgmma_ceilings[t].cubin_size;
  }
  fat_put_ceiling_job(&msg, &job);
  rc = transact(w, FAT_MSG_P_CEILINGS, &msg, watchdog_ms(w, CEILINGS_ESTIMATE_S),
                FAT_MSG_W_CEILINGS, &payload, &len, reason, reasonlen);
  if (rc != FAT_WORKER_OK) goto out;
  fat_rbuf in = {.data = payload, .len = len};
  if (fat_get_ceilings_result(&in, out)) {
    kill_now(w);
    set_msg(reason, reasonlen, "worker protocol: unreadable ceilings");
    rc = FAT_WORKER_ERROR;
    goto out;
  }
  set_msg(reason, reasonlen, "ok");
out:
  free(payload);
  fat_wbuf_free(&msg);
  return rc;
}

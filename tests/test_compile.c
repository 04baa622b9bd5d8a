/* SPDX-License-Identifier: MIT */
/* The compile module against the real NVRTC of the toolkit (no GPU needed):
 * architecture names, the ptxas report parser on verbatim logs, cubins for
 * sm_80 and sm_90a, compile errors reported as answers, the cache key's
 * layout and sensitivity, the thread pool matching one-at-a-time builds,
 * and its compile processes (this binary exec'd: their requests, caps and
 * refusals, an exec that fails, starts beside threads that allocate).
 * NVRTC missing is a failure here, not a skip: the toolkit is required. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "build_key.h"
#include "compile.h"
#include "cuda_api.h"
#include "elf_check.h"
#include "nvrtc_api.h"
#include "ptxas_log.h"
#include "check.h"

static void test_arch_names(void) {
  static const char *valid[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120"};
  static const char *invalid[] = {"", "sm_75", "sm_8", "sm_080", "sm_90b", "compute_80",
                                  "sm_80 ", "SM_80", "sm_1000", "sm_", "sm_90aa", "80"};
  for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++)
    CHECK_WHY(fat_arch_valid(valid[i]), "'%s' should be a valid architecture", valid[i]);
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++)
    CHECK_WHY(!fat_arch_valid(invalid[i]), "'%s' should be rejected", invalid[i]);
  CHECK_INT(fat_arch_valid(NULL), 0);

  char arch[16];
  fat_arch_for_cc(9, 0, arch);
  CHECK_STR(arch, "sm_90a");
  fat_arch_for_cc(8, 0, arch);
  CHECK_STR(arch, "sm_80");
  fat_arch_for_cc(8, 6, arch);
  CHECK_STR(arch, "sm_86");
  fat_arch_for_cc(12, 0, arch);
  CHECK_STR(arch, "sm_120");
}

static void test_options(void) {
  /* No --use_fast_math: it would change numerics silently. No -lineinfo:
   * it stores the PTX text in every cubin the tables ship. */
  CHECK_STR(fat_compile_options(), "--std=c++17 -default-device --ptxas-options=-v");
}

/* Verbatim from NVRTC 13.0 with --ptxas-options=-v, one kernel. */
static const char one_entry_log[] =
    "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
    "ptxas info    : Function properties for k\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem\n";

/* Verbatim from NVRTC 13.0, two kernels: k2 has the larger registers and
 * stack, k the larger smem; spill figures invented to test the maxima. */
static const char two_entry_log[] =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'k2' for 'sm_80'\n"
    "ptxas info    : Function properties for k2\n"
    "ptxas         .     256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
    "ptxas info    : Used 21 registers, used 0 barriers, 256 bytes cumulative stack size, 364 bytes cmem[0]\n"
    "ptxas info    : Compile time = 13.463 ms\n"
    "ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
    "ptxas info    : Function properties for k\n"
    "ptxas         .     0 bytes stack frame, 16 bytes spill stores, 4 bytes spill loads\n"
    "ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]\n"
    "ptxas info    : Compile time = 1.227 ms";

static void test_ptxas_parse(void) {
  fat_build b;
  memset(&b, 0, sizeof b);
  CHECK_INT(fat_ptxas_parse(one_entry_log, &b), 1);
  CHECK_INT(b.registers, 10);
  CHECK_INT(b.smem_static, 1024);
  CHECK_INT(b.stack_frame, 0);
  CHECK_INT(b.spill_stores, 0);
  CHECK_INT(b.spill_loads, 0);

  CHECK_INT(fat_ptxas_parse(two_entry_log, &b), 2);
  CHECK_INT(b.registers, 21);
  CHECK_INT(b.smem_static, 1024);
  CHECK_INT(b.stack_frame, 256);
  CHECK_INT(b.spill_stores, 16);
  CHECK_INT(b.spill_loads, 12);

  /* Absent values are 0, and earlier values do not survive a new parse. */
  CHECK_INT(fat_ptxas_parse("ptxas info    : Used 7 registers\n", &b), 0);
  CHECK_INT(b.registers, 7);
  CHECK_INT(b.smem_static, 0);
  CHECK_INT(b.stack_frame, 0);
  CHECK_INT(b.spill_stores, 0);
  CHECK_INT(b.spill_loads, 0);
  CHECK_INT(fat_ptxas_parse(NULL, &b), 0);
  CHECK_INT(b.registers, 0);
  CHECK_INT(fat_ptxas_parse("", &b), 0);
  /* Front-end messages quoting source are not ptxas's report. */
  CHECK_INT(fat_ptxas_parse("k.cu(3): error: 99 registers undefined\n", &b), 0);
  CHECK_INT(b.registers, 0);
}

static void test_key_layout(void) {
  static const char *opts = "--std=c++17 -default-device --ptxas-options=-v -lineinfo";
  char key[65], other[65];
  /* Expected value: sha256sum of the documented stream, built by hand:
   * printf 'fatune-build-key 1\n1\nsource 3\nabc\narch 5\nsm_80\noptions 56\n...
   * compiler 10\nnvrtc 13.0\n' | sha256sum */
  fat_build_key_of("abc", "sm_80", opts, "nvrtc 13.0", key);
  CHECK_STR(key, "18e00d30f82c1922cc3088b01e9cec496d043069a9417244fc3837ee99041283");
  /* Moving bytes across a field boundary must change the key. */
  fat_build_key_of("ab", "csm_80", opts, "nvrtc 13.0", key);
  fat_build_key_of("abc", "sm_80", opts, "nvrtc 13.0", other);
  CHECK(strcmp(key, other) != 0);
  fat_build_key_of("abc", "sm_80", "--std=c++17", "nvrtc 13.0", key);
  CHECK(strcmp(key, other) != 0);
  fat_build_key_of("abc", "sm_80", opts, "nvrtc 12.8", key);
  CHECK(strcmp(key, other) != 0);
}

static const char kernel_src[] =
    "extern \"C\" __global__ void k(float *x) {\n"
    "  __shared__ float s[256];\n"
    "  s[threadIdx.x] = x[threadIdx.x];\n"
    "  __syncthreads();\n"
    "  x[threadIdx.x] = s[255 - threadIdx.x] * 2.0f;\n"
    "}\n";

static void test_compile_real(const fat_nvrtc *nv) {
  static const char *archs[] = {"sm_80", "sm_90a"};
  char err[4096];
  for (size_t a = 0; a < 2; a++) {
    fat_build b;
    CHECK_INT(fat_compile_one("k.cu", kernel_src, archs[a], &b, err, sizeof err), 0);
    CHECK_INT(b.ok, 1);
    CHECK_STR(b.arch, archs[a]);
    CHECK(b.cubin_size > 4 && b.cubin && memcmp(b.cubin, "\x7f" "ELF", 4) == 0);
    CHECK(b.registers > 0);
    CHECK_INT(b.smem_static, 1024); /* 256 floats */
    CHECK_INT(b.spill_stores, 0);
    CHECK(b.compile_ms > 0);
    char want_line[64];
    snprintf(want_line, sizeof want_line, "Compiling entry function 'k' for '%s'", archs[a]);
    CHECK(b.log && strstr(b.log, want_line));
    char key[65];
    CHECK_INT(fat_build_key(kernel_src, archs[a], key, err, sizeof err), 0);
    CHECK_STR(b.key, key);
    /* The key is the documented layout with this NVRTC's version. */
    char compiler[32], want_key[65];
    snprintf(compiler, sizeof compiler, "nvrtc %d.%d", nv->major, nv->minor);
    fat_build_key_of(kernel_src, archs[a], fat_compile_options(), compiler, want_key);
    CHECK_STR(key, want_key);
    fat_build_free(&b);
  }

  /* A syntax error is an answer: ok = 0 and the log says why. */
  fat_build b;
  CHECK_INT(fat_compile_one("bad.cu", "__global__ void k( {", "sm_80", &b, err, sizeof err), 0);
  CHECK_INT(b.ok, 0);
  CHECK(b.cubin == NULL && b.cubin_size == 0);
  CHECK(b.log && strstr(b.log, "error"));
  CHECK(b.log && strstr(b.log, "bad.cu"));
  fat_build_free(&b);

  /* A bad architecture is the caller's error, named in the message. */
  CHECK_INT(fat_compile_one("k.cu", kernel_src, "sm_75", &b, err, sizeof err), -1);
  CHECK_STR(err, "invalid architecture 'sm_75' (expected sm_<cc> for compute capability "
                 "8.0 or newer, e.g. sm_80, sm_86, sm_90a)");
  CHECK(b.cubin == NULL && b.log == NULL);
}

static void test_key_sensitivity(void) {
  char err[512], k1[65], k2[65];
  CHECK_INT(fat_build_key(kernel_src, "sm_80", k1, err, sizeof err), 0);
  CHECK_INT(fat_build_key(kernel_src, "sm_80", k2, err, sizeof err), 0);
  CHECK_STR(k1, k2);
  CHECK_INT((int)strlen(k1), 64);
  CHECK_INT(fat_build_key(kernel_src, "sm_90a", k2, err, sizeof err), 0);
  CHECK(strcmp(k1, k2) != 0);
  char changed[sizeof kernel_src];
  memcpy(changed, kernel_src, sizeof kernel_src);
  changed[sizeof kernel_src - 3] = ' '; /* one character of the source */
  CHECK_INT(fat_build_key(changed, "sm_80", k2, err, sizeof err), 0);
  CHECK(strcmp(k1, k2) != 0);
  CHECK_INT(fat_build_key(kernel_src, "sm_8", k2, err, sizeof err), -1);
  CHECK_STR(err, "invalid architecture 'sm_8' (expected sm_<cc> for compute capability "
                 "8.0 or newer, e.g. sm_80, sm_86, sm_90a)");
}

/* ---- the pool -------------------------------------------------------- */

#define N_POOL 6

typedef struct progress_log {
  size_t calls;
  size_t done[N_POOL + 1];
  size_t total;
  size_t index[N_POOL + 1];   /* which variant each call reported */
  const fat_variant *variants;
  const fat_build *builds;
  int mismatched;             /* V and B did not point at the same index */
} progress_log;

static int on_progress(void *user, size_t done, size_t total, const fat_variant *v,
                       const fat_build *b) {
  progress_log *p = user;
  size_t i = (size_t)(v - p->variants);
  if (b != &p->builds[i]) p->mismatched = 1;
  if (p->calls <= N_POOL) {
    p->done[p->calls] = done;
    p->index[p->calls] = i;
  }
  p->total = total;
  p->calls++;
  return 0;
}

static void make_variants(fat_variant *v, char sources[N_POOL][256], char names[N_POOL][32]) {
  memset(v, 0, N_POOL * sizeof *v);
  for (int i = 0; i < N_POOL; i++) {
    snprintf(sources[i], 256,
             "extern \"C\" __global__ void k%d(float *x) { x[threadIdx.x] *= %d.0f; }\n", i, i + 2);
    snprintf(names[i], 32, "pool%d.cu", i);
    v[i].name = names[i];
    v[i].source = sources[i];
  }
}

static void test_compile_all(void) {
  fat_variant v[N_POOL];
  char sources[N_POOL][256], names[N_POOL][32], err[4096];
  make_variants(v, sources, names);

  fat_build one[N_POOL], all[N_POOL];
  for (int i = 0; i < N_POOL; i++)
    CHECK_INT(fat_compile_one(names[i], sources[i], "sm_80", &one[i], err, sizeof err), 0);

  progress_log p = {.variants = v, .builds = all};
  memset(all, 0, sizeof all);
  CHECK_INT(fat_compile_all(v, N_POOL, "sm_80", 2, NULL, all, on_progress, &p, NULL, err, sizeof err), 0);
  CHECK_INT(p.calls, N_POOL);
  CHECK_INT(p.total, N_POOL);
  CHECK_INT(p.mismatched, 0);
  int seen[N_POOL] = {0};
  for (size_t c = 0; c < N_POOL && c < p.calls; c++) {
    CHECK_INT(p.done[c], c + 1); /* serialised: counts 1..6 in order */
    seen[p.index[c]]++;
  }
  for (int i = 0; i < N_POOL; i++) {
    CHECK_INT(seen[i], 1);
    CHECK_INT(all[i].ok, 1);
    CHECK_STR(all[i].key, one[i].key);
    CHECK_INT(all[i].registers, one[i].registers);
    CHECK(all[i].cubin_size == one[i].cubin_size &&
          memcmp(all[i].cubin, one[i].cubin, one[i].cubin_size) == 0);
    fat_build_free(&all[i]);
  }

  /* Skipped builds are left exactly as they were and not reported. */
  unsigned char skip[N_POOL] = {1, 0, 0, 1, 0, 1};
  const int sentinel = 4242;
  memset(all, 0, sizeof all);
  for (int i = 0; i < N_POOL; i++) all[i].registers = sentinel;
  memset(&p, 0, sizeof p);
  p.variants = v;
  p.builds = all;
  /* jobs = 0: one thread per online CPU. */
  CHECK_INT(fat_compile_all(v, N_POOL, "sm_90a", 0, skip, all, on_progress, &p, NULL, err, sizeof err), 0);
  CHECK_INT(p.calls, 3);
  CHECK_INT(p.total, 3);
  for (int i = 0; i < N_POOL; i++) {
    if (skip[i]) {
      CHECK_INT(all[i].registers, sentinel);
      CHECK(all[i].cubin == NULL && all[i].log == NULL && all[i].ok == 0);
    } else {
      CHECK_INT(all[i].ok, 1);
      CHECK_STR(all[i].arch, "sm_90a");
      fat_build_free(&all[i]);
    }
  }

  /* More jobs than variants, and a failed compile among them: the pool
   * still returns 0 and reports every build. */
  v[2].source = "extern \"C\" __global__ void broken( {";
  memset(all, 0, sizeof all);
  memset(&p, 0, sizeof p);
  p.variants = v;
  p.builds = all;
  CHECK_INT(fat_compile_all(v, N_POOL, "sm_80", 64, NULL, all, on_progress, &p, NULL, err, sizeof err), 0);
  CHECK_INT(p.calls, N_POOL);
  for (int i = 0; i < N_POOL; i++) {
    CHECK_INT(all[i].ok, i != 2);
    fat_build_free(&all[i]);
  }

  /* Nothing to do is not an error; a bad arch is, before any work. */
  memset(&p, 0, sizeof p);
  CHECK_INT(fat_compile_all(v, 0, "sm_80", 2, NULL, all, on_progress, &p, NULL, err, sizeof err), 0);
  CHECK_INT(p.calls, 0);
  CHECK_INT(fat_compile_all(v, N_POOL, "sm_70", 2, NULL, all, on_progress, &p, NULL, err, sizeof err), -1);
  CHECK_STR(err, "invalid architecture 'sm_70' (expected sm_<cc> for compute capability "
                 "8.0 or newer, e.g. sm_80, sm_86, sm_90a)");
  CHECK_INT(p.calls, 0);

  /* A plan: one thread hands the builds out in its order, skipped ones
   * passed over; an order that is no permutation, or a niceness outside
   * 0-19, is refused by name before any work. */
  v[2].source = sources[2];
  {
    const size_t order[N_POOL] = {5, 3, 1, 0, 2, 4};
    const size_t want[] = {5, 1, 0, 2, 4};
    unsigned char skip3[N_POOL] = {0, 0, 0, 1, 0, 0};
    fat_compile_plan plan = {.order = order, .nice = 5};
    memset(all, 0, sizeof all);
    memset(&p, 0, sizeof p);
    p.variants = v;
    p.builds = all;
    CHECK_INT(fat_compile_planned(v, N_POOL, "sm_80", 1, skip3, all, on_progress, &p, NULL, &plan,
                                  err, sizeof err), 0);
    CHECK_INT(p.calls, 5);
    for (size_t c = 0; c < 5 && c < p.calls; c++) CHECK_INT(p.index[c], want[c]);
    for (int i = 0; i < N_POOL; i++) {
      CHECK_INT(all[i].ok, i != 3);
      fat_build_free(&all[i]);
    }
    const size_t twice[N_POOL] = {0, 1, 2, 3, 4, 4}, past[N_POOL] = {0, 1, 2, 3, 4, 6};
    memset(&p, 0, sizeof p);
    plan = (fat_compile_plan){.order = twice};
    CHECK_INT(fat_compile_planned(v, N_POOL, "sm_80", 1, NULL, all, on_progress, &p, NULL, &plan,
                                  err, sizeof err), -1);
    CHECK_STR(err, "fat_compile_planned: order[5] = 4 is there twice");
    plan = (fat_compile_plan){.order = past};
    CHECK_INT(fat_compile_planned(v, N_POOL, "sm_80", 1, NULL, all, on_progress, &p, NULL, &plan,
                                  err, sizeof err), -1);
    CHECK_STR(err, "fat_compile_planned: order[5] = 6 is past the variants");
    plan = (fat_compile_plan){.nice = 20};
    CHECK_INT(fat_compile_planned(v, N_POOL, "sm_80", 1, NULL, all, on_progress, &p, NULL, &plan,
                                  err, sizeof err), -1);
    CHECK_STR(err, "fat_compile_planned: niceness 20 is outside 0-19");
    CHECK_INT(p.calls, 0);
  }

  for (int i = 0; i < N_POOL; i++) fat_build_free(&one[i]);
}

/* ---- the compile processes ------------------------------------------- */

/* Sets NAME to VALUE (NULL: unsets it); returns the old value to give back
 * to env_restore. */
static char *env_swap(const char *name, const char *value) {
  char *old = getenv(name) ? strdup(getenv(name)) : NULL;
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  return old;
}

static void env_restore(const char *name, char *old) {
  if (old) setenv(name, old, 1);
  else unsetenv(name);
  free(old);
}

/* One variant through the pool, on one thread: in one compile process. */
static int compile_in_server(const char *name, const char *source, fat_build *b, char *err,
                             size_t errlen) {
  fat_variant v = {.name = (char *)name, .source = (char *)source};
  memset(b, 0, sizeof *b);
  return fat_compile_all(&v, 1, "sm_80", 1, NULL, b, NULL, NULL, NULL, err, errlen);
}

/* The request carries the variant's name and source: a source larger than
 * the socket's buffer arrives whole (the same key and cubin as in
 * process), a variant without a name is compiled as "variant.cu", and a
 * source past the bound a compile process takes is a capped build that
 * says so. */
static void test_server_requests(void) {
  char err[4096];
  const size_t comment = 1 << 20; /* past any socket buffer */
  const size_t len = strlen(kernel_src);
  char *big = malloc(len + comment + 1);
  REQUIRE_EXIT(big);
  memcpy(big, kernel_src, len);
  memset(big + len, ' ', comment);
  memcpy(big + len, "//", 2);
  big[len + comment] = 0;
  fat_build in_process, served;
  CHECK_INT(fat_compile_one("big.cu", big, "sm_80", &in_process, err, sizeof err), 0);
  CHECK_INT(compile_in_server("big.cu", big, &served, err, sizeof err), 0);
  CHECK_INT(served.ok, 1);
  CHECK_STR(served.key, in_process.key);
  CHECK(served.cubin_size == in_process.cubin_size &&
        memcmp(served.cubin, in_process.cubin, served.cubin_size) == 0);
  fat_build_free(&in_process);
  fat_build_free(&served);
  free(big);

  CHECK_INT(compile_in_server(NULL, "__global__ void k( {", &served, err, sizeof err), 0);
  CHECK_INT(served.ok, 0);
  CHECK_INT(served.capped, 0);
  CHECK_WHY(served.log && strstr(served.log, "variant.cu(1): error"), "%s", served.log);
  fat_build_free(&served);

  const size_t past = (64u << 20) + 1; /* REQUEST_SOURCE_MAX + 1 */
  char *huge = malloc(past + 1);
  REQUIRE_EXIT(huge);
  memset(huge, ' ', past);
  huge[past] = 0;
  CHECK_INT(compile_in_server("huge.cu", huge, &served, err, sizeof err), 0);
  CHECK_INT(served.capped, 1);
  CHECK_STR(served.log, "fatune: this variant (a name of 7 bytes, a source of 67108865) is more "
                        "than a compile process takes (names to 4096 bytes, sources to 64 MiB); "
                        "not cached");
  fat_build_free(&served);
  free(huge);
}

/* The caps hold in the server: a front end that runs past
 * FATUNE_COMPILE_TIMEOUT_S and, but under AddressSanitizer (whose
 * allocator reports the cap as an error of its own and ends the process),
 * a macro bomb past FATUNE_COMPILE_MAX_MB of address space (its own
 * excluded: the server's NVRTC is loaded before the cap is measured) are
 * capped builds that say which cap; a small kernel still compiles under
 * the memory cap. */
static void test_server_caps(void) {
  char err[4096];
  fat_build b;
  /* The front end of 'slow' takes about 2 s on CI's cores at 50,000
   * terms: four times that keeps it past the 1 s cap on cores several
   * times faster (the cap stops it at 1 s whatever it would take). */
  size_t terms = 200000;
  char *slow = malloc(2 * terms + 64);
  REQUIRE_EXIT(slow);
  char *at = slow + sprintf(slow, "__device__ int f(int a) { return ");
  for (size_t i = 0; i < terms; i++) at += sprintf(at, "a+");
  sprintf(at, "0; }\n");
  char *old = env_swap("FATUNE_COMPILE_TIMEOUT_S", "1");
  CHECK_INT(compile_in_server("slow.cu", slow, &b, err, sizeof err), 0);
  CHECK_INT(b.capped, 1);
  CHECK_STR(b.log, "fatune: NVRTC ran for more than 1 s on this variant and was stopped "
                   "(FATUNE_COMPILE_TIMEOUT_S); not cached");
  fat_build_free(&b);
  env_restore("FATUNE_COMPILE_TIMEOUT_S", old);
  free(slow);

  old = env_swap("FATUNE_COMPILE_MAX_MB", "512");
  CHECK_INT(compile_in_server("k.cu", kernel_src, &b, err, sizeof err), 0);
  CHECK_INT(b.ok, 1);
  fat_build_free(&b);
#ifndef __SANITIZE_ADDRESS__
  static const char bomb[] = "#define A(x) x x x x x x x x x x\n#define B(x) A(A(A(A(x))))\n"
                             "__device__ int f(int a) { return B(B(a+)) 0; }\n";
  CHECK_INT(compile_in_server("bomb.cu", bomb, &b, err, sizeof err), 0);
  CHECK_INT(b.capped, 1);
  CHECK_STR(b.log, "fatune: NVRTC ran out of memory on this variant under a cap of 512 MiB per "
                   "compile (FATUNE_COMPILE_MAX_MB); not cached");
  fat_build_free(&b);
#endif
  env_restore("FATUNE_COMPILE_MAX_MB", old);
}

/* This binary started with ENV_VAR added to its environment (NULL: none)
 * and ARG as its one argument (NULL: none) after ARGV0 (NULL: SELF),
 * keeping descriptor KEEP open (-1: none); returns its pid. */
static pid_t start_self(const char *self, const char *argv0, const char *env_var, const char *arg, int keep) {
  extern char **environ;
  size_t n = 0;
  while (environ[n]) n++;
  char **envp = calloc(n + 2, sizeof *envp);
  REQUIRE_EXIT(envp);
  memcpy(envp, environ, n * sizeof *envp);
  envp[n] = (char *)env_var;
  char *const argv[] = {(char *)(argv0 ? argv0 : self), (char *)arg, NULL};
  const pid_t pid = fork();
  REQUIRE_EXIT(pid >= 0);
  if (pid == 0) {
    if (keep >= 0) fcntl(keep, F_SETFD, 0);
    execve(self, argv, env_var ? envp : environ);
    _exit(127);
  }
  free(envp);
  return pid;
}

/* How process PID ended: its exit status, or 128 + its signal. */
static int end_of(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A compile process (argv exactly {SERVER_ARGV0}) refuses what it cannot
 * take by exiting (2) before compiling anything: an environment variable
 * it cannot read, a request longer than its bounds. Were it to reach main
 * instead, main would end it with NOT_SERVED. Any other process ignores
 * the variable, however it reads: it reaches main (a program that loads
 * libfatune goes on). */
#define SERVER_ARGV0 "fatune-compile"
#define SERVE_ONLY_ARG "--serve-only"
#define NOT_SERVED 99

static void test_server_refuses(const char *self) {
  CHECK_INT(end_of(start_self(self, SERVER_ARGV0, "FATUNE_COMPILE_SERVER=3 sm_80", NULL, -1)), 2);
  CHECK_INT(end_of(start_self(self, SERVER_ARGV0, "FATUNE_COMPILE_SERVER=9 sm_75 1048576 0", NULL, -1)), 2);
  CHECK_INT(end_of(start_self(self, NULL, "FATUNE_COMPILE_SERVER=3 sm_80", SERVE_ONLY_ARG, -1)), NOT_SERVED);
  CHECK_INT(end_of(start_self(self, SERVER_ARGV0, "FATUNE_COMPILE_SERVER=3 sm_80", SERVE_ONLY_ARG, -1)),
            NOT_SERVED);
  int sv[2];
  REQUIRE_EXIT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  char var[128];
  snprintf(var, sizeof var, "FATUNE_COMPILE_SERVER=%d sm_80 536870912 0", sv[1]);
  const pid_t pid = start_self(self, SERVER_ARGV0, var, NULL, sv[1]);
  close(sv[1]);
  const uint64_t request[2] = {1ull << 40, 1}; /* a name of a TiB */
  CHECK_INT(write(sv[0], request, sizeof request), (long long)sizeof request);
  CHECK_INT(end_of(pid), 2);
  close(sv[0]);
}

/* Where the running binary cannot be exec'd (here: deleted after it
 * started), the pool fails with a message that names it and why. A copy
 * of this binary runs with --deleted-exe, removes itself and checks. */
#define DELETED_EXE_ARG "--deleted-exe"

static int deleted_exe_child(void) {
  char self[4096], err[4096], want[sizeof self + 128];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE_EXIT(len > 0);
  self[len] = 0;
  REQUIRE_EXIT(unlink(self) == 0);
  len = readlink("/proc/self/exe", self, sizeof self - 1); /* now "PATH (deleted)" */
  REQUIRE_EXIT(len > 0);
  self[len] = 0;
  fat_build b;
  CHECK_INT(compile_in_server("k.cu", kernel_src, &b, err, sizeof err), -1);
  snprintf(want, sizeof want, "cannot start a compile process: exec of %s (/proc/self/exe): "
           "No such file or directory", self);
  CHECK_STR(err, want);
  return check_summary("test_compile " DELETED_EXE_ARG);
}

/* FROM copied to TO, executable. 0, or -1. */
static int copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  static char chunk[1 << 16];
  size_t k;
  int rc = in && out ? 0 : -1;
  while (!rc && (k = fread(chunk, 1, sizeof chunk, in)) > 0)
    if (fwrite(chunk, 1, k, out) != k) rc = -1;
  if (in) fclose(in);
  if (out && fclose(out)) rc = -1;
  return rc ? rc : chmod(to, 0700);
}

static void test_exec_failure(const char *self) {
  char dir[] = "/tmp/fatune-exe-XXXXXX", copy[256];
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(copy, sizeof copy, "%s/test_compile", dir);
  REQUIRE_EXIT(copy_file(self, copy) == 0);
  CHECK_INT(end_of(start_self(copy, NULL, NULL, DELETED_EXE_ARG, -1)), 0);
  unlink(copy); /* where the child did not get that far */
  rmdir(dir);
}

/* The compile processes start while other threads allocate: the tuner's
 * lanes run beside its compile stage. A forked copy of the tuner that
 * allocated before exec deadlocked under AddressSanitizer when another
 * thread held its allocator's quarantine lock at the fork (a compile hung
 * till its 300 s cap, CI's test_multi_gpu); each process is now a fresh
 * image of this binary. HAMMER_ROUNDS pools of HAMMER_JOBS processes start
 * while HAMMER_THREADS threads allocate and free -- half of them a block
 * of HAMMER_QUARANTINE_BYTES at a time (each sixteenth free passes a
 * thread's share of the quarantine to the shared one, under its lock),
 * half a mix through the size classes and mmap -- and each process
 * compiles its kernel (NVRTC frees far more than a thread's share) within
 * HAMMER_TIMEOUT_S. Against a415cb9's forked processes under
 * AddressSanitizer, 4 to 7 of this test's 64 starts hung in each of 6
 * runs (32 of 600 in longer ones). */
#define HAMMER_ROUNDS 16
#define HAMMER_JOBS 4
#define HAMMER_THREADS 4
#define HAMMER_TIMEOUT_S "60"                /* a hang is a capped build, not a stuck test */
#define HAMMER_QUARANTINE_BYTES (64 << 10)   /* a sixteenth of ASan's 1 MiB thread quarantine */
#define HAMMER_BLOCKS 256                    /* blocks a mixing thread holds at once */
#define HAMMER_LARGE (1 << 20)               /* one mixed block in 16 this size: mmap'ed */

static atomic_int hammer_stop;

static void *hammer(void *arg) {
  const int k = (int)(size_t)arg;
  if (k % 2 == 0) {
    while (!atomic_load(&hammer_stop)) {
      char *p = malloc(HAMMER_QUARANTINE_BYTES);
      if (p) p[0] = 1;
      free(p);
    }
    return NULL;
  }
  unsigned size = (unsigned)k;
  void *held[HAMMER_BLOCKS];
  while (!atomic_load(&hammer_stop)) {
    for (int i = 0; i < HAMMER_BLOCKS; i++) {
      size = size * 1103515245u + 12345u;
      held[i] = malloc(i % 16 == 0 ? HAMMER_LARGE : 16 + size % 8192);
      if (held[i]) memset(held[i], i, 16);
    }
    for (int i = 0; i < HAMMER_BLOCKS; i++) free(held[i]);
  }
  return NULL;
}

static void test_start_beside_malloc(void) {
  fat_variant v[HAMMER_JOBS];
  char sources[HAMMER_JOBS][256], names[HAMMER_JOBS][32], err[4096];
  memset(v, 0, sizeof v);
  for (int i = 0; i < HAMMER_JOBS; i++) {
    snprintf(sources[i], sizeof sources[i],
             "extern \"C\" __global__ void h%d(float *x) { x[threadIdx.x] += %d.0f; }\n", i, i);
    snprintf(names[i], sizeof names[i], "hammer%d.cu", i);
    v[i].name = names[i];
    v[i].source = sources[i];
  }
  char *old = env_swap("FATUNE_COMPILE_TIMEOUT_S", HAMMER_TIMEOUT_S);
  pthread_t t[HAMMER_THREADS];
  atomic_store(&hammer_stop, 0);
  for (size_t k = 0; k < HAMMER_THREADS; k++)
    REQUIRE_EXIT(pthread_create(&t[k], NULL, hammer, (void *)k) == 0);
  int compiled = 0;
  for (int round = 0; round < HAMMER_ROUNDS; round++) {
    fat_build b[HAMMER_JOBS];
    memset(b, 0, sizeof b);
    CHECK_INT(fat_compile_all(v, HAMMER_JOBS, "sm_80", HAMMER_JOBS, NULL, b, NULL, NULL, NULL, err,
                              sizeof err), 0);
    for (int i = 0; i < HAMMER_JOBS; i++) {
      CHECK_WHY(b[i].ok && !b[i].capped, "round %d, variant %d: %s", round, i,
                b[i].log ? b[i].log : "(no log)");
      compiled += b[i].ok;
      fat_build_free(&b[i]);
    }
  }
  atomic_store(&hammer_stop, 1);
  for (size_t k = 0; k < HAMMER_THREADS; k++) pthread_join(t[k], NULL);
  CHECK_INT(compiled, HAMMER_ROUNDS * HAMMER_JOBS);
  env_restore("FATUNE_COMPILE_TIMEOUT_S", old);
}

static void test_missing_nvrtc_message(void) {
  static const char *const bogus[] = {"/nonexistent/libnvrtc.so.13", "libm.so.6"};
  fat_nvrtc t;
  char err[2048];
  CHECK_INT(fat_nvrtc_open(bogus, 2, &t, err, sizeof err), -1);
  CHECK(strncmp(err, "NVRTC could not be loaded; tried:\n  /nonexistent/libnvrtc.so.13: ",
                strlen("NVRTC could not be loaded; tried:\n  /nonexistent/libnvrtc.so.13: ")) == 0);
  /* libm loads but is not NVRTC: the message says which symbol is missing. */
  CHECK(strstr(err, "\n  libm.so.6: no symbol nvrtcGetErrorString\n") != NULL);
  const char *hint =
      "Install the CUDA toolkit's NVRTC or set FATUNE_NVRTC to the path of libnvrtc.so";
  size_t len = strlen(err);
  CHECK(len >= strlen(hint) && strcmp(err + len - strlen(hint), hint) == 0);
}

/* A library file shorter than its program headers say raised SIGBUS
 * inside dlopen: a truncated copy of NVRTC is refused before any dlopen,
 * by path and by name through LD_LIBRARY_PATH, and loading goes on to the
 * next candidate; a FIFO does not block; the real library passes. */
static void test_truncated_library(const fat_nvrtc *nv) {
  char dir[] = "/tmp/fatune-elf-XXXXXX", cut[256], fifo[256], why[512], err[4096];
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(cut, sizeof cut, "%s/libcut.so.1", dir);
  snprintf(fifo, sizeof fifo, "%s/libfifo.so.1", dir);
  FILE *in = fopen(nv->path[0] == '/' ? nv->path : "/usr/local/cuda/lib64/libnvrtc.so.13", "rb");
  if (!in) in = fopen("/usr/local/cuda/lib64/libnvrtc.so", "rb");
  REQUIRE_EXIT(in);
  FILE *out = fopen(cut, "wb");
  REQUIRE_EXIT(out);
  static char chunk[1 << 16];
  size_t total = 0, k;
  const size_t keep = 4 << 20; /* 4 MiB of a library of about 100 */
  while (total < keep && (k = fread(chunk, 1, sizeof chunk, in)) > 0) total += fwrite(chunk, 1, k, out);
  fclose(in);
  fclose(out);
  CHECK_INT(fat_library_check(cut, why, sizeof why), -1);
  CHECK_WHY(strstr(why, ": truncated: segment ") && strstr(why, ", the file has 4194304"), "%s", why);
  CHECK_WHY(!strncmp(why, cut, strlen(cut)), "%s", why);
  /* By name, where dlopen would find it. */
  char *old = getenv("LD_LIBRARY_PATH") ? strdup(getenv("LD_LIBRARY_PATH")) : NULL;
  setenv("LD_LIBRARY_PATH", dir, 1);
  CHECK_INT(fat_library_check("libcut.so.1", why, sizeof why), -1);
  CHECK_WHY(!strncmp(why, cut, strlen(cut)), "%s", why);
  if (old) setenv("LD_LIBRARY_PATH", old, 1);
  else unsetenv("LD_LIBRARY_PATH");
  free(old);
  REQUIRE_EXIT(mkfifo(fifo, 0600) == 0);
  CHECK_INT(fat_library_check(fifo, why, sizeof why), -1);
  char want[1200];  /* two paths (cut[256]) and the text */
  snprintf(want, sizeof want, "%s: not a regular file", fifo);
  CHECK_STR(why, want);
  CHECK_INT(fat_library_check(nv->path, why, sizeof why), 0);
  CHECK_INT(fat_library_check("libnvrtc-not-installed.so.9", why, sizeof why), 0);
  /* Through the loader: refused, and the next candidate serves. */
  const char *const list[] = {cut, nv->path};
  fat_nvrtc t;
  CHECK_INT(fat_nvrtc_open(list, 2, &t, err, sizeof err), 0);
  CHECK_STR(t.path, nv->path);
  CHECK_INT(fat_nvrtc_open(list, 1, &t, err, sizeof err), -1);
  snprintf(want, sizeof want, "NVRTC could not be loaded; tried:\n  %s: truncated: segment ", cut);
  CHECK_WHY(!strncmp(err, want, strlen(want)), "%s", err);
  /* The driver, the same way. */
  fat_cuda cu;
  setenv("FATUNE_LIBCUDA", cut, 1);
  CHECK_INT(fat_cuda_load(&cu, err, sizeof err), -1);
  snprintf(want, sizeof want, "no CUDA driver: could not load %s (%s: truncated: segment ", cut, cut);
  CHECK_WHY(!strncmp(err, want, strlen(want)), "%s", err);
  unsetenv("FATUNE_LIBCUDA");
  unlink(cut);
  unlink(fifo);
  rmdir(dir);
}

/* Sources that would make NVRTC read a file (it reads any path: a
 * template's '#include "/etc/passwd"' once put the file into the build
 * log), each in a spelling the preprocessor accepts, are refused with
 * their line; what only looks like one is not. */
static void test_source_file_reads(void) {
  static const struct { const char *src, *why; } cases[] = {
      {"#include \"/etc/passwd\"\n", "line 1: directive #include"},
      {"int a;\n  #  include <x>\n", "line 2: directive #include"},
      {"int a;\n%:include \"x\"\n", "line 2: directive #include"},
      {"#/* a\ncomment */include \"x\"\n", "line 1: directive #include"},
      {"/* a\n comment */ #include \"x\"\n", "line 1: directive #include"},
      {"int a;\n#inc\\\nlude \"x\"\n", "line 2: directive #include"},
      {"#include_next <x>\n", "line 1: directive #include_next"},
      {"#import \"x\"\n", "line 1: directive #import"},
      {"#embed \"x\"\n", "line 1: directive #embed"},
      {"#frobnicate\n", "line 1: directive #frobnicate"},
      {"#define X 1\n#if __has_include(\"/etc/passwd\")\n#endif\n", "line 2: __has_include probes for a file"},
      /* a string the scanner cannot tell from a comment start: refused, not missed */
      {"const char *s = \"/*\";\n#include \"x\"\n// */\n", "line 2: directive #include"},
      {"int a; ?\?=include \"x\"\n", "line 1: a trigraph makes its lines ambiguous"},
      {"int a;\r\n#include \"x\"\n", "line 1: a carriage return makes its lines ambiguous"},
      {"int a; \\ \n#include \"x\"\n", "line 1: a backslash and spaces before the newline make its lines ambiguous"},
  };
  char why[256];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fat_source_file_reads(cases[i].src, why, sizeof why);
    CHECK_WHY(!strcmp(why, cases[i].why), "source %zu: \"%s\", want \"%s\"", i, why, cases[i].why);
  }
  static const char *const fine[] = {
      "// #include \"x\" in a comment of its own line is still checked, so: none here\n"
      "#define INC \"include\"\n#pragma unroll\n#if 1\n#elif 0\n#else\n#endif\n#\n"
      "#error \"include fat_abi.h first\"\nint include = 1;\n/* includes */\n",
  };
  for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
    fat_source_file_reads(fine[i], why, sizeof why);
    CHECK_WHY(!why[0], "a source without a file read refused: %s", why);
  }
  /* Through fat_compile_one: an answer (a failed build that says why), and
   * the file never read. */
  fat_build b;
  char err[4096];
  CHECK_INT(fat_compile_one("inc.cu", "#include \"/etc/hostname\"\n__global__ void k() {}\n",
                            "sm_80", &b, err, sizeof err), 0);
  CHECK_INT(b.ok, 0);
  CHECK_STR(b.log, "fatune: line 1: directive #include: a generated source is self-contained "
                   "(the generator inlines templates/ includes); not compiled");
  CHECK_INT(strlen(b.key), 64);
  fat_build_free(&b);
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], DELETED_EXE_ARG)) return deleted_exe_child();
  if (argc == 2 && !strcmp(argv[1], SERVE_ONLY_ARG)) return NOT_SERVED;
  if (argc == 1 && !strcmp(argv[0], SERVER_ARGV0)) return NOT_SERVED;
  char err[4096];
  const fat_nvrtc *nv = fat_nvrtc_get(err, sizeof err);
  test_arch_names();
  test_options();
  test_ptxas_parse();
  test_key_layout();
  test_missing_nvrtc_message();
  if (!nv) {
    /* Required by the build: a machine without NVRTC fails this test. */
    fprintf(stderr, "FAIL: %s\n", err);
    return 1;
  }
  printf("NVRTC %d.%d from %s\n", nv->major, nv->minor, nv->path);
  CHECK(nv->major >= 12);
  test_source_file_reads();
  test_truncated_library(nv);
  test_compile_real(nv);
  test_key_sensitivity();
  test_compile_all();
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE_EXIT(len > 0);
  self[len] = 0;
  test_server_requests();
  test_server_caps();
  test_server_refuses(self);
  test_exec_failure(self);
  test_start_beside_malloc();
  return check_summary("test_compile");
}

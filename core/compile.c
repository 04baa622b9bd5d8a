/* SPDX-License-Identifier: MIT */
/* NVRTC compilation of generated variants. One variant is one NVRTC program;
 * a pool of threads compiles many at once because NVRTC is single-threaded
 * per program and a tuning space holds hundreds. Resource usage comes from
 * ptxas's verbose report; the cache key covers everything that can change
 * the cubin: source, architecture, options and NVRTC's version. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "build_key.h"
#include "child_env.h"
#include "compile.h"
#include "nvrtc_api.h"
#include "ptxas_log.h"
#include "sha256.h"

/* No --use_fast_math: it swaps in approximate exp/div and flushes denormals,
 * changing results silently; a kernel that wants fast intrinsics says so.
 * No -lineinfo: it embeds the whole PTX text (64 % of a backward cubin,
 * 270 KB against 65 KB) and leaves the SASS as it was (all 44 d128
 * backward variants compared); Nsight Compute's SASS view needs none. */
#define COMPILE_OPTIONS "--std=c++17 -default-device --ptxas-options=-v"
#define ARCH_OPTION_PREFIX "--gpu-architecture="
#define MAX_OPTIONS 16          /* COMPILE_OPTIONS split on spaces, plus the arch */
#define OPTION_BUF_MAX 256      /* COMPILE_OPTIONS and the arch option, NUL-separated */
#define MIN_ARCH_NUMBER 80      /* the oldest family (mma80) needs Ampere's cp.async and bf16 mma */
#define MAX_ARCH_DIGITS 3       /* sm_80 ... sm_120 */
#define HOPPER_MAJOR 9
#define HOPPER_ARCH "sm_90a"    /* wgmma and TMA: the architecture-specific target only */
#define PTXAS_PREFIX "ptxas"       /* every line of ptxas's report starts so */
#define ENTRY_MARKER "Compiling entry function" /* ptxas: one line per kernel */
#define NS_PER_MS 1e6
#define MS_PER_S 1e3
#define WORKER_ERR_MAX 4096     /* one worker's error message */

int fat_arch_valid(const char *arch) {
  /* sm_<digits>, optionally with the 'a' suffix of architecture-specific
   * features (sm_90a for wgmma), for compute capability 8.0 and newer. */
  if (!arch || strncmp(arch, "sm_", 3) != 0) return 0;
  const char *p = arch + 3;
  int digits = 0, number = 0;
  while (*p >= '0' && *p <= '9' && digits < MAX_ARCH_DIGITS + 1) {
    number = number * 10 + (*p - '0');
    p++;
    digits++;
  }
  if (digits < 2 || digits > MAX_ARCH_DIGITS || arch[3] == '0') return 0;
  if (*p == 'a') p++;
  return *p == '\0' && number >= MIN_ARCH_NUMBER;
}

void fat_arch_for_cc(int major, int minor, char out[16]) {
  /* Hopper's wgmma and TMA exist only in the architecture-specific target. */
  if (major == HOPPER_MAJOR && minor == 0)
    snprintf(out, 16, "%s", HOPPER_ARCH);
  else
    snprintf(out, 16, "sm_%d%d", major, minor);
}

int fat_arch_has_wgmma(const char *arch) { return arch && strcmp(arch, HOPPER_ARCH) == 0; }

const char *fat_compile_options(void) { return COMPILE_OPTIONS; }

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static int check_arch(const char *arch, char *err, size_t errlen) {
  if (fat_arch_valid(arch)) return 0;
  set_err(err, errlen, "invalid architecture '%s' (expected sm_<cc> for compute capability "
          "8.0 or newer, e.g. sm_80, sm_86, sm_90a)", arch ? arch : "(null)");
  return -1;
}

/* ---- ptxas report ---------------------------------------------------- */

/* The number written just before SUFFIX in LINE ("10 registers" → 10), or
 * -1 when SUFFIX is absent or not preceded by a number. Saturates at INT_MAX. */
static long number_before(const char *line, size_t len, const char *suffix) {
  size_t slen = strlen(suffix);
  for (size_t at = 0; at + slen <= len; at++) {
    if (memcmp(line + at, suffix, slen) != 0) continue;
    size_t end = at;
    while (end > 0 && line[end - 1] == ' ') end--;
    size_t start = end;
    while (start > 0 && line[start - 1] >= '0' && line[start - 1] <= '9') start--;
    if (start == end) continue;
    long v = 0;
    for (size_t i = start; i < end; i++) {
      v = v * 10 + (line[i] - '0');
      if (v > INT_MAX) return INT_MAX;
    }
    return v;
  }
  return -1;
}

static void take_max(int *field, long v) {
  if (v > *field) *field = (int)v;
}

int fat_ptxas_parse(const char *log, fat_build *b) {
  b->registers = b->smem_static = b->stack_frame = b->spill_stores = b->spill_loads = 0;
  if (!log) return 0;
  int entries = 0;
  for (const char *line = log; *line;) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    /* Only ptxas's own lines: the compiler front end's messages may quote
     * source text that happens to contain "registers". */
    if (len >= strlen(PTXAS_PREFIX) && memcmp(line, PTXAS_PREFIX, strlen(PTXAS_PREFIX)) == 0) {
      if (memmem(line, len, ENTRY_MARKER, strlen(ENTRY_MARKER))) entries++;
      take_max(&b->registers, number_before(line, len, "registers"));
      take_max(&b->smem_static, number_before(line, len, "bytes smem"));
      take_max(&b->stack_frame, number_before(line, len, "bytes stack frame"));
      take_max(&b->spill_stores, number_before(line, len, "bytes spill stores"));
      take_max(&b->spill_loads, number_before(line, len, "bytes spill loads"));
    }
    line += len;
    if (*line == '\n') line++;
  }
  return entries;
}

/* ---- cache key ------------------------------------------------------- */

/* Each field goes in as "<tag> <length>\n<bytes>\n": with the length in
 * front no two different tuples can produce the same byte stream. */
static void hash_field(fat_sha256_ctx *c, const char *tag, const char *value) {
  char head[64];
  size_t len = strlen(value);
  int n = snprintf(head, sizeof head, "%s %zu\n", tag, len);
  fat_sha256_update(c, head, (size_t)n);
  fat_sha256_update(c, value, len);
  fat_sha256_update(c, "\n", 1);
}

void fat_build_key_of(const char *source, const char *arch, const char *options,
                      const char *compiler, char key[65]) {
  fat_sha256_ctx c;
  fat_sha256_init(&c);
  hash_field(&c, "fatune-build-key", "1"); /* bump when the layout below changes */
  hash_field(&c, "source", source);
  hash_field(&c, "arch", arch);
  hash_field(&c, "options", options);
  hash_field(&c, "compiler", compiler);
  fat_sha256_final_hex(&c, key);
}

int fat_build_key(const char *source, const char *arch, char key[65], char *err, size_t errlen) {
  if (!source) {
    set_err(err, errlen, "fat_build_key: source is NULL");
    return -1;
  }
  if (check_arch(arch, err, errlen)) return -1;
  const fat_nvrtc *nv = fat_nvrtc_get(err, errlen);
  if (!nv) return -1;
  char compiler[32];
  snprintf(compiler, sizeof compiler, "nvrtc %d.%d", nv->major, nv->minor);
  fat_build_key_of(source, arch, COMPILE_OPTIONS, compiler, key);
  return 0;
}

/* ---- what a source may ask of the preprocessor ---------------------- */

/* Directives a generated source may hold: none of them reads a file.
 * #include, #include_next, #import, #embed and anything unknown would
 * (NVRTC reads any path from the disk: "/etc/passwd" into the build log). */
static const char *const SAFE_DIRECTIVES[] = {
    "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef",
    "else", "endif", "line", "error", "warning", "pragma"};
/* Operators that probe for a file from inside #if. */
static const char *const FILE_PROBES[] = {"__has_include", "__has_embed"};

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; }
static int is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* P past white space and block comments, which may span lines: a comment
 * is one space, so '#', a comment over two lines and 'include' are one
 * directive. */
static const char *skip_space_comments(const char *p) {
  for (;;) {
    while (is_space(*p)) p++;
    if (p[0] != '/' || p[1] != '*') return p;
    /* a scan, not strstr: the sanitizers' strstr reads to the end of the
     * source first, at every comment that begins a line */
    const char *end = p + 2;
    while (*end && !(end[0] == '*' && end[1] == '/')) end++;
    if (!*end) return end;
    p = end + 2;
  }
}

/* Why SRC may not be compiled: a directive that reads a file, a probe for
 * one, or what would make the line structure ambiguous to this check
 * (trigraphs, a carriage return, a backslash and spaces before a newline);
 * "" when there is nothing. Generated sources have none: expand.lua inlines
 * every template include. A directive begins only where a line begins
 * (after backslash-newline splices), past white space and comments: every
 * such place is checked, whatever the real parse says the line is inside,
 * so none is missed (a false match refuses a source no generator makes). */
void fat_source_file_reads(const char *src, char *why, size_t cap) {
  long line = 1;
  why[0] = 0;
  for (const char *p = src; *p; p++) {
    if (*p == '\r' || (p[0] == '?' && p[1] == '?' && p[2] && strchr("=/'()!<>-", p[2]))) {
      snprintf(why, cap, "line %ld: %s makes its lines ambiguous", line,
               *p == '\r' ? "a carriage return" : "a trigraph");
      return;
    }
    if (*p == '\\' && is_space(p[1])) {
      const char *q = p + 1;
      while (is_space(*q)) q++;
      if (*q == '\n') {
        snprintf(why, cap, "line %ld: a backslash and spaces before the newline make its lines "
                 "ambiguous", line);
        return;
      }
    }
    /* the first character before the whole name: this loop sees every
     * character of every source the tuner compiles */
    for (size_t k = 0; k < sizeof FILE_PROBES / sizeof FILE_PROBES[0]; k++)
      if (*p == FILE_PROBES[k][0] && !strncmp(p, FILE_PROBES[k], strlen(FILE_PROBES[k]))) {
        snprintf(why, cap, "line %ld: %s probes for a file", line, FILE_PROBES[k]);
        return;
      }
    line += *p == '\n';
  }
  /* The text with its line splices removed, and the physical line each
   * logical line begins on, for the message. */
  const size_t n = strlen(src);
  size_t newlines = 0;
  for (size_t r = 0; r < n; r++) newlines += src[r] == '\n';
  char *text = malloc(n + 1);
  long *line_at = malloc((newlines + 2) * sizeof *line_at);
  if (!text || !line_at) {
    snprintf(why, cap, "out of memory checking the source");
    free(text);
    free(line_at);
    return;
  }
  size_t w = 0, lines = 0;
  long physical = 1;
  line_at[lines++] = 1;
  for (size_t r = 0; r < n; r++) {
    if (src[r] == '\\' && src[r + 1] == '\n') {
      r++;
      physical++;
      continue;
    }
    text[w++] = src[r];
    if (src[r] == '\n') line_at[lines++] = ++physical;
  }
  text[w] = 0;
  size_t k = 0;
  for (const char *start = text; start; k++) {
    const char *p = skip_space_comments(start);
    const int hash = *p == '#' ? 1 : (p[0] == '%' && p[1] == ':') ? 2 : 0;
    if (hash) {
      const char *name = skip_space_comments(p + hash), *end = name;
      while (is_ident(*end)) end++;
      int safe = end == name; /* the null directive */
      for (size_t d = 0; !safe && d < sizeof SAFE_DIRECTIVES / sizeof SAFE_DIRECTIVES[0]; d++)
        safe = (size_t)(end - name) == strlen(SAFE_DIRECTIVES[d]) &&
               !strncmp(name, SAFE_DIRECTIVES[d], (size_t)(end - name));
      if (!safe) {
        snprintf(why, cap, "line %ld: directive #%.*s", line_at[k],
                 (int)(end - name > 32 ? 32 : end - name), name);
        break;
      }
    }
    const char *nl = strchr(start, '\n');
    start = nl ? nl + 1 : NULL;
  }
  free(line_at);
  free(text);
}

/* ---- one compilation ------------------------------------------------- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * MS_PER_S + ts.tv_nsec / NS_PER_MS;
}

/* NVRTC takes options as an argv array: COMPILE_OPTIONS split on spaces,
 * then the architecture. BUF holds the copies OPTS points into. */
static int build_options(const char *arch, char buf[OPTION_BUF_MAX], const char *opts[MAX_OPTIONS]) {
  int n = 0;
  int used = snprintf(buf, OPTION_BUF_MAX, "%s", COMPILE_OPTIONS);
  for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
    opts[n++] = tok;
  char *arch_opt = buf + used + 1;
  snprintf(arch_opt, OPTION_BUF_MAX - used - 1, ARCH_OPTION_PREFIX "%s", arch);
  opts[n++] = arch_opt;
  return n;
}

/* Fetches the program log into B->log (always a string, maybe empty). */
static nvrtcResult fetch_log(const fat_nvrtc *nv, nvrtcProgram prog, fat_build *b) {
  size_t size = 0;
  nvrtcResult r = nv->GetProgramLogSize(prog, &size);
  if (r != NVRTC_SUCCESS) return r;
  b->log = calloc(size + 1, 1);
  if (!b->log) return NVRTC_ERROR_OUT_OF_MEMORY;
  if (size) r = nv->GetProgramLog(prog, b->log);
  return r;
}

/* fat_compile_one, with the NVRTC result of a failure in *CODE. */
static int compile_one(const char *name, const char *source, const char *arch, fat_build *b,
                       char *err, size_t errlen, nvrtcResult *code) {
  int rc = -1;
  const fat_nvrtc *nv = NULL;
  nvrtcProgram prog = NULL;
  const char *what = "";          /* the NVRTC call that failed, for the message */
  nvrtcResult r = NVRTC_SUCCESS;
  char buf[OPTION_BUF_MAX];
  const char *opts[MAX_OPTIONS];
  memset(b, 0, sizeof *b);
  if (!name) name = "variant.cu";
  if (fat_build_key(source, arch, b->key, err, errlen)) goto out;
  snprintf(b->arch, sizeof b->arch, "%s", arch);
  if (!(nv = fat_nvrtc_get(err, errlen))) goto out;
  int nopts = build_options(arch, buf, opts);
  /* A source that would read a file is answered, not compiled: a failed
   * build whose log says why (the same source fails the same way). */
  char why[256];
  fat_source_file_reads(source, why, sizeof why);
  if (why[0]) {
    const char *fmt = "fatune: %s: a generated source is self-contained (the generator inlines "
                      "templates/ includes); not compiled";
    const size_t len = strlen(fmt) + strlen(why);
    if (!(b->log = malloc(len))) {
      set_err(err, errlen, "out of memory");
      goto out;
    }
    snprintf(b->log, len, fmt, why);
    rc = 0;
    goto out;
  }

  double t0 = now_ms();
  what = "nvrtcCreateProgram";
  r = nv->CreateProgram(&prog, source, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) goto out;
  what = "nvrtcCompileProgram";
  nvrtcResult compiled = nv->CompileProgram(prog, nopts, opts);
  /* A compile error is an answer (ok = 0, the log says why), not a failure
   * of the tool; anything else (bad option, out of memory) is. */
  if (compiled != NVRTC_SUCCESS && compiled != NVRTC_ERROR_COMPILATION) {
    r = compiled;
    goto out;
  }
  what = "nvrtcGetProgramLog";
  if ((r = fetch_log(nv, prog, b)) != NVRTC_SUCCESS) goto out;
  if (compiled == NVRTC_SUCCESS) {
    what = "nvrtcGetCUBIN";
    if ((r = nv->GetCUBINSize(prog, &b->cubin_size)) != NVRTC_SUCCESS) goto out;
    b->cubin = malloc(b->cubin_size ? b->cubin_size : 1);
    if (!b->cubin) {
      r = NVRTC_ERROR_OUT_OF_MEMORY;
      goto out;
    }
    if ((r = nv->GetCUBIN(prog, (char *)b->cubin)) != NVRTC_SUCCESS) goto out;
    b->ok = 1;
    fat_ptxas_parse(b->log, b);
  }
  b->compile_ms = now_ms() - t0;
  rc = 0;
out:
  if (rc != 0 && r != NVRTC_SUCCESS)
    set_err(err, errlen, "%s(%s, %s): %s%s%s", what, name, arch ? arch : "(null)",
            nv->GetErrorString(r), b->log && *b->log ? "\n" : "", b->log ? b->log : "");
  if (code) *code = r;
  if (prog) nv->DestroyProgram(&prog);
  if (rc != 0) {
    /* Nothing heap-owned is left behind on failure; the caller may still
     * call fat_build_free. */
    char keep_arch[sizeof b->arch], keep_key[sizeof b->key];
    memcpy(keep_arch, b->arch, sizeof keep_arch);
    memcpy(keep_key, b->key, sizeof keep_key);
    fat_build_free(b);
    memcpy(b->arch, keep_arch, sizeof keep_arch);
    memcpy(b->key, keep_key, sizeof keep_key);
  }
  return rc;
}

int fat_compile_one(const char *name, const char *source, const char *arch, fat_build *b,
                    char *err, size_t errlen) {
  return compile_one(name, source, arch, b, err, errlen, NULL);
}

/* ---- compile processes ------------------------------------------------ */

/* fat_compile_all runs each compile in a child process, one per pool
 * thread, started once and handed variant after variant (a "compile
 * server"): NVRTC there runs under a wall-clock and an address-space cap,
 * so neither a macro bomb (one reached 24 GB, and the kernel's OOM killer)
 * nor NVRTC crashing takes the tuner down; such a build fails, capped, and
 * is never cached. SIGINT, SIGTERM, SIGHUP and SIGQUIT are blocked in the
 * child: NVRTC installs a handler of its own for part of a compile, which
 * on ^C called exit(4) or hung; the tuner's handler sees ^C, hands out no
 * more work, and the compiles in flight finish.
 *
 * The server is a fresh process image, as the GPU worker is (worker.h):
 * fork, then exec of the running binary (/proc/self/exe, resolved in the
 * parent) with SERVER_ENV in its environment; compile_server_entry, a
 * constructor, sees it and serves before main. A forked copy of the tuner
 * would run NVRTC and malloc in a copy of a multithreaded process, where a
 * lock another thread held at the fork stays held for good: under
 * AddressSanitizer a compile hung on its allocator's quarantine lock until
 * the time cap (CI's test_multi_gpu). Between fork and exec the child makes
 * only async-signal-safe calls, so a server may be started from any thread
 * while others run. Every binary that calls fat_compile_planned links this
 * file and so hosts the server; in any other process (libfatune, whose
 * objects include this file, too) the constructor returns at once, the
 * variable set or not. */
#define COMPILE_TIMEOUT_S 300      /* the longest legitimate compile takes seconds */
#define COMPILE_MAX_MB 8192        /* address space one compile may add to the server's own */
#define BYTES_PER_MB (1024LL * 1024)
#define MS_PER_S_INT 1000
#define NICE_MAX 19                /* the most a process may add to its niceness */
#define SELF_EXE "/proc/self/exe"  /* the running binary: the server is a copy of it */
#define SERVER_ARGV0 "fatune-compile" /* what ps shows */
/* The server's one environment variable, "FD ARCH MAX_BYTES NICE": its end of the socket,
 * the architecture it compiles for, the address space one compile may add, its niceness.
 * The parent's pid is not needed: the child checks it before exec. */
#define SERVER_ENV "FATUNE_COMPILE_SERVER"
#define SERVER_ENV_MAX 128         /* SERVER_ENV=, three numbers and an architecture */
#define FD_SCAN_MAX 65536          /* without close_range (Linux < 5.9): descriptors closed one by one */
/* A request's bounds: a generated variant's name is under 100 bytes and its source under a
 * MiB; a length past these is a garbled request, not a variant. */
#define REQUEST_NAME_MAX 4096
#define REQUEST_SOURCE_MAX (64 * BYTES_PER_MB)
/* How NVRTC's front end words running out of memory, in a compile error. */
#define NVRTC_OUT_OF_MEMORY_LOG "catastrophic error: out of memory"

/* How a server process ends. */
enum {
  SERVER_EXIT_DONE = 0,      /* its socket closed, or its parent was gone before the exec */
  SERVER_EXIT_USAGE = 2,     /* a SERVER_ENV it cannot read, or a request past its bounds */
  SERVER_EXIT_NO_MEMORY = 3, /* no memory for a request's name and source */
  SERVER_EXIT_NO_EXEC = 127, /* the forked child could not exec (its errno went to the pipe) */
};

/* The caps: the defaults, or $FATUNE_COMPILE_TIMEOUT_S and
 * $FATUNE_COMPILE_MAX_MB (tests; a machine with less memory per job). */
static long env_or(const char *name, long fallback) {
  const char *v = getenv(name);
  char *end;
  long n = v && *v ? strtol(v, &end, 10) : 0;
  return v && *v && !*end && n > 0 ? n : fallback;
}

typedef struct server {
  pid_t pid;  /* 0: none running */
  int fd;     /* our end of the socket pair */
} server;

/* What the pool sends for one variant; NAME_SIZE bytes of its name (0: none) and
 * SOURCE_SIZE bytes of its source follow, without their NULs. */
typedef struct request {
  uint64_t name_size, source_size;
} request;

/* What the server answers for one variant; CUBIN_SIZE, LOG_SIZE and ERR_SIZE
 * bytes follow, in that order. */
typedef struct reply {
  int32_t rc;  /* fat_compile_one's: 0 an answer, -1 NVRTC itself failed (ERR says why) */
  int32_t capped;  /* NVRTC ran out of memory under the cap: a capped build */
  int32_t ok, registers, smem_static, stack_frame, spill_stores, spill_loads;
  double compile_ms;
  uint64_t cubin_size, log_size, err_size;
  char key[65];
  char arch[16];
} reply;

/* Waits until FD is ready for EVENTS, before DEADLINE (now_ms() clock). 0,
 * 1 on error, 2 when the deadline passed. */
static int wait_ready(int fd, short events, double deadline) {
  for (;;) {
    const double left = deadline - now_ms();
    if (left <= 0) return 2;
    struct pollfd pf = {.fd = fd, .events = events};
    const int r = poll(&pf, 1, left > INT_MAX ? INT_MAX : (int)left + 1);
    if (r < 0 && errno == EINTR) continue;
    return r == 0 ? 2 : r < 0 ? 1 : 0;
  }
}

/* N bytes from BUF before DEADLINE (now_ms() clock; < 0: none). 0, 1 on
 * error (the peer gone), 2 when the deadline passed. */
static int send_all(int fd, const void *buf, size_t n, double deadline) {
  const char *p = buf;
  while (n > 0) {
    if (deadline >= 0) {
      const int w = wait_ready(fd, POLLOUT, deadline);
      if (w) return w;
    }
    /* With a deadline, never blocked in send: a source larger than the
     * socket's buffer goes in the pieces the server takes. */
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | (deadline >= 0 ? MSG_DONTWAIT : 0));
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) return 1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* N bytes into BUF before DEADLINE (now_ms() clock; < 0: none). 0, 1 on
 * end of file or error, 2 when the deadline passed. */
static int recv_all(int fd, void *buf, size_t n, double deadline) {
  char *p = buf;
  while (n > 0) {
    if (deadline >= 0) {
      const int w = wait_ready(fd, POLLIN, deadline);
      if (w) return w;
    }
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* Pages of address space this process has now, or 0 when unknown. */
static long long address_space_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long pages = 0;
  if (!f) return 0;
  if (fscanf(f, "%lld", &pages) != 1) pages = 0;
  fclose(f);
  return pages * sysconf(_SC_PAGESIZE);
}

/* The server: compiles each request read from FD for ARCH until the socket
 * closes, at NICENESS, each compile able to add MAX_BYTES of address space
 * to what the server has. Never returns. */
static void server_main(int fd, const char *arch, long long max_bytes, int niceness)
    __attribute__((noreturn));
static void server_main(int fd, const char *arch, long long max_bytes, int niceness) {
  /* Raising one's own niceness cannot be refused; were it, the compile
   * would only run at its parent's priority. */
  if (niceness > 0 && nice(niceness) == -1) errno = 0;
  /* NVRTC is loaded before the cap is measured: its libraries are the
   * server's, not the compile's. Where it cannot load, the first
   * request's answer says why. */
  char e[WORKER_ERR_MAX] = "";
  (void)fat_nvrtc_get(e, sizeof e);
  /* The address-space cap: what the server has mapped now plus MAX_BYTES. */
  const long long now = address_space_bytes();
  struct rlimit rl;
  if (now > 0 && getrlimit(RLIMIT_AS, &rl) == 0) {
    const rlim_t want = (rlim_t)(now + max_bytes);
    if (rl.rlim_max == RLIM_INFINITY || want < rl.rlim_max) {
      rl.rlim_cur = want;
      setrlimit(RLIMIT_AS, &rl);
    }
  }
  for (;;) {
    request q;
    if (recv_all(fd, &q, sizeof q, -1)) _exit(SERVER_EXIT_DONE);
    if (q.name_size > REQUEST_NAME_MAX || q.source_size > (uint64_t)REQUEST_SOURCE_MAX)
      _exit(SERVER_EXIT_USAGE);
    char *name = malloc(q.name_size + 1), *source = malloc(q.source_size + 1);
    if (!name || !source) _exit(SERVER_EXIT_NO_MEMORY);
    if (recv_all(fd, name, q.name_size, -1) || recv_all(fd, source, q.source_size, -1))
      _exit(SERVER_EXIT_DONE);
    name[q.name_size] = source[q.source_size] = 0;
    fat_build b;
    nvrtcResult code = NVRTC_SUCCESS;
    e[0] = 0;
    int rc = compile_one(q.name_size ? name : NULL, source, arch, &b, e, sizeof e, &code);
    free(name);
    free(source);
    /* Out of memory under the cap: NVRTC fails the call, or its front end
     * answers with a compile error that says so (no code tells them apart). */
    const int capped = (rc && code == NVRTC_ERROR_OUT_OF_MEMORY) ||
                       (!rc && !b.ok && b.log && strstr(b.log, NVRTC_OUT_OF_MEMORY_LOG));
    if (capped) rc = 0;
    reply r = {.rc = rc, .capped = capped, .ok = b.ok, .registers = b.registers, .smem_static = b.smem_static,
               .stack_frame = b.stack_frame, .spill_stores = b.spill_stores,
               .spill_loads = b.spill_loads, .compile_ms = b.compile_ms,
               .cubin_size = b.ok ? b.cubin_size : 0, .log_size = b.log ? strlen(b.log) : 0,
               .err_size = rc ? strlen(e) : 0};
    memcpy(r.key, b.key, sizeof r.key);
    memcpy(r.arch, b.arch, sizeof r.arch);
    if (send_all(fd, &r, sizeof r, -1) || send_all(fd, b.cubin, r.cubin_size, -1) ||
        send_all(fd, b.log, r.log_size, -1) || send_all(fd, e, r.err_size, -1))
      _exit(SERVER_EXIT_DONE);
    fat_build_free(&b);
  }
}

/* The server's entry point: runs before main in a process exec'd by
 * exec_server, recognised by SERVER_ENV and its one argument, SERVER_ARGV0
 * (glibc hands constructors argc and argv); returns at once in any other
 * process, so that a SERVER_ENV left in a user's environment never ends a
 * program that loads libfatune. glibc runs an executable's constructors
 * after its libraries are initialised, so the server may use everything. */
__attribute__((constructor)) static void compile_server_entry(int argc, char **argv) {
  const char *spec = getenv(SERVER_ENV);
  if (!spec || argc != 1 || !argv || !argv[0] || strcmp(argv[0], SERVER_ARGV0)) return;
  int fd = -1, niceness = -1, end = 0;
  long long max_bytes = 0;
  char arch[16] = "";
  if (sscanf(spec, "%d %15s %lld %d%n", &fd, arch, &max_bytes, &niceness, &end) != 4 ||
      spec[end] || fd <= STDERR_FILENO || !fat_arch_valid(arch) || max_bytes <= 0 ||
      niceness < 0 || niceness > NICE_MAX)
    _exit(SERVER_EXIT_USAGE);
  /* Not inherited by anything NVRTC may start. */
  unsetenv(SERVER_ENV);
  server_main(fd, arch, max_bytes, niceness);
}

/* The environment of a server: the parent's, with SERVER_ENV for socket
 * end FD (fat_child_env: built before fork). NULL when out of memory. */
static char **server_environment(int fd, const char *arch, long long max_bytes, int niceness) {
  char var[SERVER_ENV_MAX];
  snprintf(var, sizeof var, SERVER_ENV "=%d %s %lld %d", fd, arch, max_bytes, niceness);
  const char *const vars[] = {var};
  return fat_child_env(vars, 1);
}

/* In the forked child: closes every descriptor above stderr but KEEP_A and
 * KEEP_B. Async-signal-safe. */
static void close_all_but(int keep_a, int keep_b) {
  const int lo = keep_a < keep_b ? keep_a : keep_b, hi = keep_a < keep_b ? keep_b : keep_a;
  const int from[] = {STDERR_FILENO + 1, lo + 1, hi + 1}, to[] = {lo - 1, hi - 1, INT_MAX};
  for (int r = 0; r < 3; r++) {
    if (from[r] > to[r]) continue;
    if (close_range((unsigned)from[r], to[r] == INT_MAX ? ~0u : (unsigned)to[r], 0))
      for (int fd = from[r]; fd <= to[r] && fd < FD_SCAN_MAX; fd++) close(fd);
  }
}

/* In the forked child: keep only FD (the server's socket) and REPORT (the
 * pipe that tells the parent the exec failed; close-on-exec), block the
 * signals the tuner handles (the mask survives exec, so ^C cannot end the
 * server before its first line), arrange to die with the parent thread,
 * and become a fresh copy of EXE. Async-signal-safe calls only. */
static void exec_server(int fd, int report, pid_t parent, const char *exe, char **envp)
    __attribute__((noreturn));
static void exec_server(int fd, int report, pid_t parent, const char *exe, char **envp) {
  char *const argv[] = {(char *)SERVER_ARGV0, NULL};
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  sigaddset(&stop, SIGQUIT);
  sigprocmask(SIG_BLOCK, &stop, NULL);
  /* Not the tuner's database, not another server's socket. */
  close_all_but(fd, report);
  fcntl(fd, F_SETFD, 0); /* the socket survives exec */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(SERVER_EXIT_DONE);
  execve(exe, argv, envp);
  const int32_t errnum = errno;
  ssize_t ignored = write(report, &errnum, sizeof errnum);
  (void)ignored;
  _exit(SERVER_EXIT_NO_EXEC);
}

/* Starts S's server, a fresh image of EXE compiling for ARCH. Returns 0
 * once it has exec'd, or -1 with err (an exec that failed named with its
 * reason). */
static int server_start(server *s, const char *exe, const char *arch, long long max_bytes,
                        int niceness, char *err, size_t errlen) {
  int sv[2] = {-1, -1}, report[2] = {-1, -1}, rc = -1;
  char **envp = NULL;
  s->pid = 0;
  s->fd = -1;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
    set_err(err, errlen, "cannot start a compile process: socketpair: %s", strerror(errno));
    goto out;
  }
  if (pipe2(report, O_CLOEXEC)) {
    set_err(err, errlen, "cannot start a compile process: pipe: %s", strerror(errno));
    goto out;
  }
  if (!(envp = server_environment(sv[1], arch, max_bytes, niceness))) {
    set_err(err, errlen, "out of memory");
    goto out;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    set_err(err, errlen, "cannot start a compile process: fork: %s", strerror(errno));
    goto out;
  }
  if (pid == 0) exec_server(sv[1], report[1], parent, exe, envp); /* never returns */
  /* The pipe reads end of file once the child has exec'd (its end is
   * close-on-exec), or the errno of the exec that failed. */
  close(report[1]);
  report[1] = -1;
  int32_t errnum = 0;
  ssize_t k;
  while ((k = read(report[0], &errnum, sizeof errnum)) < 0 && errno == EINTR) {
  }
  if (k > 0) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    set_err(err, errlen, "cannot start a compile process: exec of %s (" SELF_EXE "): %s", exe,
            strerror(errnum));
    goto out;
  }
  s->pid = pid;
  s->fd = sv[0];
  sv[0] = -1;
  rc = 0;
out:
  for (int i = 0; i < 2; i++) {
    if (sv[i] >= 0) close(sv[i]);
    if (report[i] >= 0) close(report[i]);
  }
  if (envp) fat_child_env_free(envp, 1);
  return rc;
}

/* Ends S's server: its socket closed, it exits; or killed (KILL). */
static void server_stop(server *s, int kill_it) {
  if (s->fd >= 0) close(s->fd);
  if (s->pid > 0) {
    if (kill_it) kill(s->pid, SIGKILL);
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  s->pid = 0;
  s->fd = -1;
}

/* B as a capped failure whose log is WHY (B->key and arch from V, ARCH). */
static int capped_build(fat_build *b, const fat_variant *v, const char *arch, const char *why,
                        char *err, size_t errlen) {
  memset(b, 0, sizeof *b);
  b->capped = 1;
  snprintf(b->arch, sizeof b->arch, "%s", arch);
  if (fat_build_key(v->source, arch, b->key, err, errlen)) return -1;
  if (!(b->log = strdup(why))) {
    set_err(err, errlen, "out of memory");
    return -1;
  }
  return 0;
}

/* Compiles V in S's server within TIMEOUT_S seconds into B. Returns 0 (an
 * answer; B->capped when a cap stopped it or the server died, and S is
 * then stopped), or -1 with err when NVRTC itself failed. */
static int server_compile(server *s, const fat_variant *v, const char *arch, int timeout_s,
                          long long max_bytes, fat_build *b, char *err, size_t errlen) {
  reply r;
  char why[512];
  memset(b, 0, sizeof *b);
  if (!v->source) {
    set_err(err, errlen, "fat_compile_all: %s has no source", v->name ? v->name : "a variant");
    return -1;
  }
  const char *name = v->name ? v->name : "";
  const request q = {.name_size = strlen(name), .source_size = strlen(v->source)};
  if (q.name_size > REQUEST_NAME_MAX || q.source_size > (uint64_t)REQUEST_SOURCE_MAX) {
    snprintf(why, sizeof why, "fatune: this variant (a name of %llu bytes, a source of %llu) is "
             "more than a compile process takes (names to %d bytes, sources to %lld MiB); not "
             "cached",
             (unsigned long long)q.name_size, (unsigned long long)q.source_size,
             REQUEST_NAME_MAX, REQUEST_SOURCE_MAX / BYTES_PER_MB);
    return capped_build(b, v, arch, why, err, errlen);
  }
  const double deadline = now_ms() + (double)timeout_s * MS_PER_S_INT;
  int got = send_all(s->fd, &q, sizeof q, deadline);
  if (!got) got = send_all(s->fd, name, q.name_size, deadline);
  if (!got) got = send_all(s->fd, v->source, q.source_size, deadline);
  if (!got) got = recv_all(s->fd, &r, sizeof r, deadline);
  if (got == 0 && (r.cubin_size > (uint64_t)SIZE_MAX / 2 || r.log_size > (uint64_t)SIZE_MAX / 2 ||
                   r.err_size > (uint64_t)SIZE_MAX / 2))
    got = 1;
  char *e = NULL;
  if (got == 0) {
    b->cubin = r.cubin_size ? malloc(r.cubin_size) : NULL;
    b->log = malloc(r.log_size + 1);
    e = malloc(r.err_size + 1);
    if ((r.cubin_size && !b->cubin) || !b->log || !e) {
      free(e);
      fat_build_free(b);
      set_err(err, errlen, "out of memory");
      return -1;
    }
    got = recv_all(s->fd, b->cubin, r.cubin_size, deadline);
    if (!got) got = recv_all(s->fd, b->log, r.log_size, deadline);
    if (!got) got = recv_all(s->fd, e, r.err_size, deadline);
  }
  if (got) {
    free(e);
    fat_build_free(b);
    int status = 0;
    if (got == 2) {
      kill(s->pid, SIGKILL);
      snprintf(why, sizeof why, "fatune: NVRTC ran for more than %d s on this variant and was "
               "stopped (FATUNE_COMPILE_TIMEOUT_S); not cached", timeout_s);
    }
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR) {
    }
    s->pid = 0;
    if (got == 1 && WIFSIGNALED(status))
      snprintf(why, sizeof why, "fatune: NVRTC died of signal %d (%s) on this variant, under a "
               "cap of %lld MiB of memory per compile (FATUNE_COMPILE_MAX_MB); not cached",
               WTERMSIG(status), strsignal(WTERMSIG(status)), max_bytes / BYTES_PER_MB);
    else if (got == 1)
      snprintf(why, sizeof why, "fatune: the compile process ended (status %d) on this variant; "
               "not cached", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return capped_build(b, v, arch, why, err, errlen);
  }
  b->log[r.log_size] = 0;
  e[r.err_size] = 0;
  if (r.rc) {
    set_err(err, errlen, "%s", e);
    free(e);
    fat_build_free(b);
    return -1;
  }
  free(e);
  if (r.capped) {
    fat_build_free(b);
    snprintf(why, sizeof why, "fatune: NVRTC ran out of memory on this variant under a cap of "
             "%lld MiB per compile (FATUNE_COMPILE_MAX_MB); not cached", max_bytes / BYTES_PER_MB);
    return capped_build(b, v, arch, why, err, errlen);
  }
  b->ok = r.ok;
  b->cubin_size = r.ok ? r.cubin_size : 0;
  b->registers = r.registers, b->smem_static = r.smem_static, b->stack_frame = r.stack_frame;
  b->spill_stores = r.spill_stores, b->spill_loads = r.spill_loads, b->compile_ms = r.compile_ms;
  memcpy(b->key, r.key, sizeof b->key);
  memcpy(b->arch, r.arch, sizeof b->arch);
  b->key[sizeof b->key - 1] = b->arch[sizeof b->arch - 1] = 0;
  return 0;
}

/* ---- many compilations ----------------------------------------------- */

/* State shared by the pool; everything below `lock` is guarded by it. */
typedef struct pool {
  const fat_variant *variants;
  size_t n;
  const char *arch;
  const unsigned char *skip;
  const size_t *order; /* the hand-out order (NULL: 0, 1, ...) */
  int nice;            /* the compile processes' niceness */
  fat_build *builds;
  fat_compile_progress progress;
  void *user;
  fat_compile_cancelled cancelled;
  int timeout_s;       /* each compile's wall-clock cap */
  long long max_bytes; /* ... and its address-space cap */
  char exe[PATH_MAX];  /* the running binary, which each compile process is */
  pthread_mutex_t lock;
  size_t next;        /* first index not yet handed out */
  size_t done;        /* builds finished, reported to PROGRESS */
  size_t total;       /* builds to do: N minus the skipped ones */
  int failed;         /* set on the first tool failure: stop handing out work */
  char err[WORKER_ERR_MAX];
} pool;

/* One pool thread: its compile process and the pool. */
typedef struct worker_arg {
  pool *p;
  server s;
} worker_arg;

/* The next index to compile, or N when there is none left (or a failure or
 * the caller's cancel stopped the run). Skipped indices are passed over here. */
static size_t take_index(pool *p) {
  pthread_mutex_lock(&p->lock);
#define AT(k) (p->order ? p->order[k] : (k))
  while (p->next < p->n && p->skip && p->skip[AT(p->next)]) p->next++;
  size_t i = p->failed || (p->cancelled && p->cancelled()) || p->next >= p->n ? p->n : AT(p->next);
#undef AT
  if (i < p->n) p->next++;
  pthread_mutex_unlock(&p->lock);
  return i;
}

static void *worker(void *arg) {
  worker_arg *w = arg;
  pool *p = w->p;
  char err[WORKER_ERR_MAX];
  for (size_t i; (i = take_index(p)) < p->n;) {
    const fat_variant *v = &p->variants[i];
    /* Each thread starts its server for its first variant; one that timed
     * out or died is replaced for the next. */
    int rc = w->s.pid > 0 ? 0
             : server_start(&w->s, p->exe, p->arch, p->max_bytes, p->nice, err, sizeof err);
    if (rc == 0)
      rc = server_compile(&w->s, v, p->arch, p->timeout_s, p->max_bytes, &p->builds[i], err,
                          sizeof err);
    pthread_mutex_lock(&p->lock);
    if (rc != 0) {
      if (!p->failed) snprintf(p->err, sizeof p->err, "%s", err);
      p->failed = 1;
    } else {
      p->done++;
      if (p->progress && p->progress(p->user, p->done, p->total, v, &p->builds[i]) && !p->failed) {
        snprintf(p->err, sizeof p->err, "stopped after %s", v->name);
        p->failed = 1;
      }
    }
    pthread_mutex_unlock(&p->lock);
  }
  return NULL;
}

int fat_compile_all(const fat_variant *variants, size_t n, const char *arch, int jobs,
                    const unsigned char *skip, fat_build *builds,
                    fat_compile_progress progress, void *user, fat_compile_cancelled cancelled,
                    char *err, size_t errlen) {
  return fat_compile_planned(variants, n, arch, jobs, skip, builds, progress, user, cancelled,
                             NULL, err, errlen);
}

/* 0 when PLAN is one fat_compile_planned takes for N variants, else -1 with
 * err naming what is wrong. */
static int check_plan(const fat_compile_plan *plan, size_t n, char *err, size_t errlen) {
  if (!plan) return 0;
  if (plan->nice < 0 || plan->nice > NICE_MAX) {
    set_err(err, errlen, "fat_compile_planned: niceness %d is outside 0-%d", plan->nice, NICE_MAX);
    return -1;
  }
  if (!plan->order || n == 0) return 0;
  unsigned char *seen = calloc(n, 1);
  if (!seen) {
    set_err(err, errlen, "out of memory");
    return -1;
  }
  int rc = 0;
  for (size_t k = 0; k < n && !rc; k++) {
    const size_t i = plan->order[k];
    if (i >= n || seen[i]) {
      set_err(err, errlen, "fat_compile_planned: order[%zu] = %zu is %s", k, i,
              i >= n ? "past the variants" : "there twice");
      rc = -1;
    } else {
      seen[i] = 1;
    }
  }
  free(seen);
  return rc;
}

int fat_compile_planned(const fat_variant *variants, size_t n, const char *arch, int jobs,
                        const unsigned char *skip, fat_build *builds,
                        fat_compile_progress progress, void *user, fat_compile_cancelled cancelled,
                        const fat_compile_plan *plan, char *err, size_t errlen) {
  if (check_arch(arch, err, errlen)) return -1;
  if (check_plan(plan, n, err, errlen)) return -1;
  /* Fail before starting threads when NVRTC is missing: one clear message. */
  if (!fat_nvrtc_get(err, errlen)) return -1;
  if (n == 0) return 0;
  if (!variants || !builds) {
    set_err(err, errlen, "fat_compile_all: %s is NULL for %zu variants",
            !variants ? "variants" : "builds", n);
    return -1;
  }
  pool p = {.variants = variants, .n = n, .arch = arch, .skip = skip,
            .order = plan ? plan->order : NULL, .nice = plan ? plan->nice : 0, .builds = builds,
            .progress = progress, .user = user, .cancelled = cancelled,
            .timeout_s = (int)env_or("FATUNE_COMPILE_TIMEOUT_S", COMPILE_TIMEOUT_S),
            .max_bytes = env_or("FATUNE_COMPILE_MAX_MB", COMPILE_MAX_MB) * BYTES_PER_MB};
  pthread_mutex_init(&p.lock, NULL);
  for (size_t i = 0; i < n; i++) p.total += !(skip && skip[i]);

  if (jobs <= 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    jobs = cpus > 0 ? (int)(cpus < INT_MAX ? cpus : INT_MAX) : 1;
  }
  size_t nthreads = (size_t)jobs < p.total ? (size_t)jobs : p.total;
  if (nthreads == 0) {
    pthread_mutex_destroy(&p.lock);
    return 0;
  }
  worker_arg *w = calloc(nthreads, sizeof *w);
  pthread_t *threads = nthreads > 1 ? calloc(nthreads - 1, sizeof *threads) : NULL;
  int rc = -1;
  if (!w || (nthreads > 1 && !threads)) {
    set_err(err, errlen, "out of memory for %zu compile threads", nthreads);
    goto out;
  }
  /* The binary's own path, resolved here: in a forked child /proc/self/exe
   * would name whatever runs us (valgrind, a loader), not this program. */
  const ssize_t exe_len = readlink(SELF_EXE, p.exe, sizeof p.exe - 1);
  if (exe_len <= 0) {
    set_err(err, errlen, "cannot start a compile process: cannot resolve " SELF_EXE ": %s",
            exe_len < 0 ? strerror(errno) : "empty");
    goto out;
  }
  p.exe[exe_len] = 0;
  /* Each thread starts its own compile process (worker). */
  for (size_t t = 0; t < nthreads; t++) w[t].p = &p;
  /* The calling thread is one of the workers; if fewer threads can be
   * created than asked for, the ones that exist share the work. */
  size_t started = 0;
  for (size_t t = 0; t + 1 < nthreads; t++) {
    if (pthread_create(&threads[t], NULL, worker, &w[t + 1]) != 0) break;
    started++;
  }
  worker(&w[0]);
  for (size_t t = 0; t < started; t++) pthread_join(threads[t], NULL);
  for (size_t t = 0; t < nthreads; t++) server_stop(&w[t].s, 0);
  if (p.failed) {
    set_err(err, errlen, "%s", p.err);
    goto out;
  }
  rc = 0;
out:
  free(w);
  free(threads);
  pthread_mutex_destroy(&p.lock);
  return rc;
}

/* SPDX-License-Identifier: MIT */
/* The search space, forward and backward, compiles with NVRTC for sm_80
 * and sm_90a, on a machine without a GPU: by default a covering sample of
 * it, the whole of it on request. Spills are allowed (they are a tuning
 * signal, not an error) but are listed; a compile failure fails.
 *
 * Knobs:
 *   FATUNE_COMPILE_COVER=1      the default (unless FATUNE_COMPILE_SAMPLE is
 *                               set): one variant of every (family,
 *                               direction, head dim, dtype, mask) on each
 *                               architecture, the (K + g)-th of group g, so
 *                               every template, head dim, dtype and mask
 *                               compiles and the parameter values the groups
 *                               pick differ from group to group (and with K);
 *                               some 320 builds, about 7 minutes on two cores
 *   FATUNE_COMPILE_COVER=0      instead every variant (some 6700 builds, over
 *                               an hour on two cores), or with
 *   FATUNE_COMPILE_SAMPLE=N     only every N-th variant
 *   FATUNE_COMPILE_SAMPLE_OFFSET=K  the K of either pick (default 0): CI
 *                               rotates it by commit, so that successive
 *                               commits cover the whole space
 *   FATUNE_COMPILE_CACHE_DIR=D  keep cubins in D keyed by fat_build_key and
 *                               skip compiling those already there */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "compile.h"
#include "gen.h"
#include "nvrtc_api.h"
#include "ptxas_log.h"

#define ERR_MAX 4096
#define PATH_MAX_LEN 4096
#define PROGRESS_STEPS 20       /* progress lines per architecture */
#define LOG_LINES_SHOWN 12      /* of a failed compile's log */
#define ELF_MAGIC "\x7f" "ELF"
#define ELF_MAGIC_LEN 4

static const char *const archs[] = {"sm_80", "sm_90a"};
#define N_ARCHS (sizeof archs / sizeof archs[0])

/* ---- the on-disk cache ------------------------------------------------ */

/* Whole file at PATH into *DATA (NUL-terminated), or -1. */
static int read_file(const char *path, unsigned char **data, size_t *size) {
  int rc = -1;
  unsigned char *buf = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) goto out;
  if (fseek(f, 0, SEEK_END) != 0) goto out;
  long len = ftell(f);
  if (len < 0 || fseek(f, 0, SEEK_SET) != 0) goto out;
  buf = malloc((size_t)len + 1);
  if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) goto out;
  buf[len] = '\0';
  *data = buf;
  *size = (size_t)len;
  buf = NULL;
  rc = 0;
out:
  free(buf);
  if (f) fclose(f);
  return rc;
}

/* Writes to a temporary name and renames it into place, so a reader (or an
 * interrupted run) never sees half a file. */
static int write_file_atomic(const char *path, const void *data, size_t size) {
  char tmp[PATH_MAX_LEN];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return -1;
  int bad = fwrite(data, 1, size, f) != size;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    remove(tmp);
    return -1;
  }
  return 0;
}

/* An entry is <key>.log (ptxas's report, re-read for the resource figures)
 * and <key>.cubin; the cubin is written last, so its presence means both. */
static void cache_paths(const char *dir, const char *key, char *cubin, char *log) {
  snprintf(cubin, PATH_MAX_LEN, "%s/%s.cubin", dir, key);
  snprintf(log, PATH_MAX_LEN, "%s/%s.log", dir, key);
}

static int cache_load(const char *dir, const char *arch, const char *key, fat_build *b) {
  char cubin_path[PATH_MAX_LEN], log_path[PATH_MAX_LEN];
  cache_paths(dir, key, cubin_path, log_path);
  unsigned char *cubin = NULL, *log = NULL;
  size_t cubin_size = 0, log_size = 0;
  if (read_file(cubin_path, &cubin, &cubin_size) != 0) return -1;
  if (read_file(log_path, &log, &log_size) != 0) {
    free(cubin);
    return -1;
  }
  memset(b, 0, sizeof *b);
  snprintf(b->arch, sizeof b->arch, "%s", arch);
  snprintf(b->key, sizeof b->key, "%s", key);
  b->ok = 1;
  b->cubin = cubin;
  b->cubin_size = cubin_size;
  b->log = (char *)log;
  fat_ptxas_parse(b->log, b);
  return 0;
}

static void cache_store(const char *dir, const fat_build *b) {
  char cubin_path[PATH_MAX_LEN], log_path[PATH_MAX_LEN];
  cache_paths(dir, b->key, cubin_path, log_path);
  const char *log = b->log ? b->log : "";
  if (write_file_atomic(log_path, log, strlen(log)) != 0 ||
      write_file_atomic(cubin_path, b->cubin, b->cubin_size) != 0)
    fprintf(stderr, "warning: cannot write cache entry %s: %s\n", cubin_path, strerror(errno));
}

/* ---- one architecture ------------------------------------------------- */

typedef struct arch_run {
  const char *arch;
  const char *cache_dir;   /* NULL: no cache */
  size_t every;            /* progress line every this many builds */
} arch_run;

static int on_progress(void *user, size_t done, size_t total, const fat_variant *v,
                       const fat_build *b) {
  arch_run *r = user;
  if (r->cache_dir && b->ok) cache_store(r->cache_dir, b);
  if (done % r->every == 0 || done == total)
    fprintf(stderr, "[%s] %zu/%zu compiled (last: %s, %s)\n", r->arch, done, total, v->name,
            b->ok ? "ok" : "FAILED");
  return 0;
}

typedef struct summary {
  size_t variants, sampled, compiled, cached, failed, with_spills;
  double compile_s;
  int max_registers;
  const char *max_registers_name;
} summary;

/* Whether A and B are of one group of the covering sample: the same
 * family, direction, head dim, dtype and mask. */
static int same_group(const fat_variant *a, const fat_variant *b) {
  return !strcmp(a->family, b->family) && a->direction == b->direction && a->head_dim == b->head_dim &&
         a->dtype == b->dtype && a->mask == b->mask;
}

/* Prints the first lines of a failed build's log. */
static void show_failure(const fat_variant *v, const fat_build *b, const char *why) {
  fprintf(stderr, "FAIL %s [%s]: %s\n", v->name, b->arch, why);
  const char *p = b->log ? b->log : "";
  for (int line = 0; *p && line < LOG_LINES_SHOWN; line++) {
    const char *nl = strchr(p, '\n');
    int len = nl ? (int)(nl - p) : (int)strlen(p);
    fprintf(stderr, "    %.*s\n", len, p);
    p += len + (nl != NULL);
  }
}

/* Compiles ARCH's sample of both directions' spaces, summing into S. */
static int run_arch(fat_gen *g, const char *arch, size_t sample, size_t offset, int cover,
                    const char *cache_dir, summary *s) {
  int rc = -1;
  char err[ERR_MAX];
  fat_variant *v = NULL;
  size_t n = 0;
  fat_build *builds = NULL;
  unsigned char *skip = NULL, *from_cache = NULL;
  memset(s, 0, sizeof *s);

  /* Both directions, forward first, in one list. */
  static const fat_direction directions[] = {FAT_FWD, FAT_BWD};
  for (size_t di = 0; di < sizeof directions / sizeof directions[0]; di++) {
    fat_gen_query q = {.direction = directions[di], .arch = arch};
    fat_variant *more = NULL;
    size_t n_more = 0;
    if (fat_gen_variants(g, &q, &more, &n_more, NULL, NULL, err, sizeof err) != 0) {
      fprintf(stderr, "FAIL generating the %s %s space: %s\n", fat_direction_name(directions[di]),
              arch, err);
      goto out;
    }
    if (n_more == 0) {
      fprintf(stderr, "FAIL the %s space for %s is empty: nothing would be tested\n",
              fat_direction_name(directions[di]), arch);
      free(more);
      goto out;
    }
    fat_variant *all = realloc(v, (n + n_more) * sizeof *all);
    if (!all) {
      fprintf(stderr, "FAIL out of memory for %zu variants\n", n + n_more);
      for (size_t i = 0; i < n_more; i++) fat_variant_free(&more[i]);
      free(more);
      goto out;
    }
    memcpy(all + n, more, n_more * sizeof *more);
    v = all;
    n += n_more;
    free(more);
  }
  s->variants = n;
  builds = calloc(n, sizeof *builds);
  skip = calloc(n, 1);
  from_cache = calloc(n, 1);
  if (!builds || !skip || !from_cache) {
    fprintf(stderr, "FAIL out of memory for %zu builds\n", n);
    goto out;
  }
  /* The variants to compile: every SAMPLE-th, or one a group. The
   * generator emits a group's variants one after the other. */
  for (size_t i = 0, group = 0; i < n;) {
    size_t end = i + 1;
    while (end < n && same_group(&v[i], &v[end])) end++;
    for (size_t j = i; j < end; j++)
      skip[j] = cover ? j != i + (offset + group) % (end - i) : j % sample != offset;
    i = end;
    group++;
  }
  for (size_t i = 0; i < n; i++) {
    if (skip[i]) continue;
    s->sampled++;
    char key[65];
    if (cache_dir && fat_build_key(v[i].source, arch, key, err, sizeof err) == 0 &&
        cache_load(cache_dir, arch, key, &builds[i]) == 0) {
      skip[i] = from_cache[i] = 1;
      s->cached++;
    }
  }

  arch_run r = {.arch = arch, .cache_dir = cache_dir};
  r.every = (s->sampled - s->cached) / PROGRESS_STEPS;
  if (r.every == 0) r.every = 1;
  /* jobs = 0: one compile thread per online CPU. */
  if (fat_compile_all(v, n, arch, 0, skip, builds, on_progress, &r, NULL, err, sizeof err) != 0) {
    fprintf(stderr, "FAIL compiling for %s: %s\n", arch, err);
    goto out;
  }

  for (size_t i = 0; i < n; i++) {
    if (skip[i] && !from_cache[i]) continue;
    const fat_build *b = &builds[i];
    if (!b->ok) {
      show_failure(&v[i], b, "compile error");
      s->failed++;
      continue;
    }
    if (b->cubin_size < ELF_MAGIC_LEN || memcmp(b->cubin, ELF_MAGIC, ELF_MAGIC_LEN) != 0) {
      show_failure(&v[i], b, "the cubin is not an ELF file");
      s->failed++;
      continue;
    }
    if (!from_cache[i]) {
      s->compiled++;
      s->compile_s += b->compile_ms / 1e3;
    }
    if (b->registers > s->max_registers) {
      s->max_registers = b->registers;
      s->max_registers_name = v[i].name;
    }
    if (b->spill_stores || b->spill_loads) {
      s->with_spills++;
      printf("  spills [%s] %s: %d bytes stored, %d bytes loaded, %d registers\n", arch,
             v[i].name, b->spill_stores, b->spill_loads, b->registers);
    }
  }
  rc = 0;
out:
  for (size_t i = 0; builds && i < n; i++) fat_build_free(&builds[i]);
  /* The names quoted in the summary live in V: keep copies before freeing. */
  if (s->max_registers_name) s->max_registers_name = strdup(s->max_registers_name);
  for (size_t i = 0; v && i < n; i++) fat_variant_free(&v[i]);
  free(v);
  free(builds);
  free(skip);
  free(from_cache);
  return rc;
}

/* ---- the knobs -------------------------------------------------------- */

/* Environment variable NAME: an integer in [lo, INT_MAX], DEFAULT when unset. */
static int parse_knob(const char *name, long long lo, size_t def, size_t *out) {
  const char *s = getenv(name);
  *out = def;
  if (!s || !*s) return 0;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > INT_MAX) {
    fprintf(stderr, "FAIL %s=%s: expected an integer >= %lld\n", name, s, lo);
    return -1;
  }
  *out = (size_t)v;
  return 0;
}

int main(void) {
  int status = 1;
  char err[ERR_MAX];
  fat_gen *g = NULL;
  summary sums[N_ARCHS];
  memset(sums, 0, sizeof sums);
  size_t sample, offset, cover;
  if (parse_knob("FATUNE_COMPILE_SAMPLE", 1, 1, &sample) != 0 ||
      parse_knob("FATUNE_COMPILE_SAMPLE_OFFSET", 0, 0, &offset) != 0 ||
      parse_knob("FATUNE_COMPILE_COVER", 0, getenv("FATUNE_COMPILE_SAMPLE") &&
                                             *getenv("FATUNE_COMPILE_SAMPLE") ? 0 : 1,
                 &cover) != 0)
    goto out;
  if (cover > 1) {
    fprintf(stderr, "FAIL FATUNE_COMPILE_COVER=%zu: expected 0 or 1\n", cover);
    goto out;
  }
  if (!cover) offset %= sample;
  const char *cache_dir = getenv("FATUNE_COMPILE_CACHE_DIR");
  if (cache_dir && !*cache_dir) cache_dir = NULL;
  if (cache_dir && mkdir(cache_dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "FAIL FATUNE_COMPILE_CACHE_DIR=%s: %s\n", cache_dir, strerror(errno));
    goto out;
  }

  /* NVRTC is part of the required toolkit: missing is a failure, not a skip. */
  const fat_nvrtc *nv = fat_nvrtc_get(err, sizeof err);
  if (!nv) {
    fprintf(stderr, "FAIL %s\n", err);
    goto out;
  }
  if (!(g = fat_gen_open(NULL, err, sizeof err))) {
    fprintf(stderr, "FAIL opening the generator: %s\n", err);
    goto out;
  }
  if (cover)
    printf("NVRTC %d.%d (%s), options: %s, one variant a group from %zu%s%s\n", nv->major, nv->minor,
           nv->path, fat_compile_options(), offset, cache_dir ? ", cache " : "", cache_dir ? cache_dir : "");
  else
    printf("NVRTC %d.%d (%s), options: %s, sampling every %zu from %zu%s%s\n", nv->major, nv->minor,
           nv->path, fat_compile_options(), sample, offset, cache_dir ? ", cache " : "",
           cache_dir ? cache_dir : "");

  int broken = 0;
  for (size_t a = 0; a < N_ARCHS; a++)
    if (run_arch(g, archs[a], sample, offset, (int)cover, cache_dir, &sums[a]) != 0) broken = 1;

  printf("\n%-7s %8s %8s %8s %7s %6s %10s %8s %11s  %s\n", "arch", "variants", "sampled",
         "compiled", "cached", "failed", "compile_s", "max_regs", "with_spills", "most registers");
  for (size_t a = 0; a < N_ARCHS; a++) {
    const summary *s = &sums[a];
    printf("%-7s %8zu %8zu %8zu %7zu %6zu %10.1f %8d %11zu  %s\n", archs[a], s->variants,
           s->sampled, s->compiled, s->cached, s->failed, s->compile_s, s->max_registers,
           s->with_spills, s->max_registers_name ? s->max_registers_name : "-");
    if (s->failed) broken = 1;
  }
  status = broken;
out:
  for (size_t a = 0; a < N_ARCHS; a++) free((char *)sums[a].max_registers_name);
  if (g) fat_gen_close(g);
  return status;
}

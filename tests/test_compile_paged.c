/* SPDX-License-Identifier: MIT */
/* The variants issue 24 adds compile with NVRTC for sm_80 and sm_90a
 * without spilling, on a machine without a GPU: the splitkv family's whose
 * split count is the launch's (SPLITS 0), and the paged family's (K and
 * V through a block table, the split count the launch's) across its copy
 * paths -- head dims whose rows the threads divide (64, 128, 256) and
 * those whose they do not (96, 192) -- both key tiles, packed and not, and
 * the built-in defaults. Each has its two kernels (the combine reads the
 * launch's count), no spill in ptxas' report, and, where a cuobjdump is
 * found ($FATUNE_CUOBJDUMP, the CUDA toolkit's, the PATH's, the one
 * scripts/install-deps.sh installs), no local memory in its SASS (no LDL
 * or STL), a read of the block table (LDG) and the page handed over by a
 * shuffle (SHFL.IDX). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compile.h"
#include "gen.h"
#include "check.h"

#define ERR_LEN 4096
#define SASS_CAP (8 << 20)

static const char *const ARCHS[] = {"sm_80", "sm_90a"};

/* Variants by name (a dtype, mask and head dim each, so that the
 * generator's whole forward space for an arch is listed once). */
static const char *const PICKS[] = {
    "fwd.paged.bf16.d128.causal.m64n64w4s2.g0x0",  /* the d128 default */
    "fwd.paged.bf16.d128.local.m64n64w4s3.g1x0",   /* packed, three stages, a window */
    "fwd.paged.fp16.d128.none.m128n128w8s2.g0x0",  /* a prefill chunk's tile */
    "fwd.paged.fp16.d96.causal.m64n128w4s2.g1x0",  /* rows the threads do not divide */
    "fwd.paged.bf16.d192.none.m128n64w8s2.g0x0",
    "fwd.paged.bf16.d256.causal.m64n32w4s2.g0x0",  /* the d256 default */
    "fwd.paged.fp16.d64.none.m64n128w4s2.g1x0",
    /* the contiguous decoding family's launch-chosen splits */
    "fwd.splitkv.bf16.d128.causal.m64n128w4s2.g1x0",
    "fwd.splitkv.fp16.d64.none.m64n64w4s3.g0x0",
    "fwd.splitkv.bf16.d96.local.m64n64w4s2.g1x0",  /* rows the threads do not divide */
};
#define N_PICKS (sizeof PICKS / sizeof PICKS[0])

static const fat_variant *find(const fat_variant *v, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i].name, name)) return &v[i];
  return NULL;
}

/* 1 when the cubin's symbol names hold NAME (an entry's). */
static int has_symbol(const fat_build *b, const char *name) {
  const size_t len = strlen(name) + 1; /* with its terminator: not a prefix of another */
  for (size_t i = 0; i + len <= b->cubin_size; i++)
    if (!memcmp(b->cubin + i, name, len)) return 1;
  return 0;
}

static const char *cuobjdump(void) {
  static char path[1024];
  const char *env = getenv("FATUNE_CUOBJDUMP"), *home = getenv("HOME");
  const char *cands[] = {env, "/usr/local/cuda/bin/cuobjdump", NULL, NULL};
  char cached[1024] = "";
  if (home) snprintf(cached, sizeof cached, "%s/.cache/fatune/tools/nvidia/cu13/bin/cuobjdump", home);
  cands[2] = cached;
  for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
    if (cands[i] && cands[i][0] && access(cands[i], X_OK) == 0) {
      snprintf(path, sizeof path, "%s", cands[i]);
      return path;
    }
  FILE *p = popen("command -v cuobjdump 2>/dev/null", "r");
  if (p && fgets(path, sizeof path, p)) path[strcspn(path, "\n")] = 0;
  else path[0] = 0;
  if (p) pclose(p);
  return path[0] ? path : NULL;
}

/* B's SASS by TOOL, into a heap string (NULL with a note when it fails). */
static char *sass_of(const char *tool, const fat_build *b, const char *name) {
  char file[] = "/tmp/fatune_paged_XXXXXX";
  int fd = mkstemp(file);
  char *out = NULL;
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "wb");
  if (!f || fwrite(b->cubin, 1, b->cubin_size, f) != b->cubin_size) {
    if (f) fclose(f);
    unlink(file);
    return NULL;
  }
  fclose(f);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' --dump-sass '%s' 2>&1", tool, file);
  FILE *p = popen(cmd, "r");
  out = p ? calloc(1, SASS_CAP) : NULL;
  if (out) {
    size_t n = fread(out, 1, SASS_CAP - 1, p);
    out[n] = 0;
  }
  if (p && pclose(p) != 0) {
    fprintf(stderr, "%s: %s failed\n", name, tool);
    free(out);
    out = NULL;
  }
  unlink(file);
  return out;
}

/* 1 when the SASS names opcode OP (followed by a modifier or a space). */
static int has_opcode(const char *sass, const char *op) {
  const size_t len = strlen(op);
  for (const char *s = sass; (s = strstr(s, op)) != NULL; s += len)
    if ((s == sass || s[-1] == ' ') && (s[len] == '.' || s[len] == ' ')) return 1;
  return 0;
}

int main(void) {
  char err[ERR_LEN];
  fat_gen *g = fat_gen_open(NULL, err, sizeof err);
  REQUIRE_EXIT(g != NULL);
  const char *tool = cuobjdump();
  if (!tool) printf("no cuobjdump: ptxas' spill report only\n");
  for (size_t a = 0; a < sizeof ARCHS / sizeof ARCHS[0]; a++) {
    fat_gen_query q = {.direction = FAT_FWD, .arch = ARCHS[a]};
    fat_variant *v = NULL;
    size_t n = 0;
    if (fat_gen_variants(g, &q, &v, &n, NULL, NULL, err, sizeof err)) {
      CHECK_WHY(0, "%s: %s", ARCHS[a], err);
      continue;
    }
    for (size_t i = 0; i < N_PICKS; i++) {
      const fat_variant *x = find(v, n, PICKS[i]);
      CHECK_WHY(x != NULL, "%s: %s is not generated", ARCHS[a], PICKS[i]);
      if (!x) continue;
      fat_build b;
      if (fat_compile_one(x->name, x->source, ARCHS[a], &b, err, sizeof err)) {
        CHECK_WHY(0, "%s %s: %s", ARCHS[a], x->name, err);
        continue;
      }
      CHECK_WHY(b.ok, "%s %s does not compile: %.2000s", ARCHS[a], x->name, b.log ? b.log : "");
      if (b.ok) {
        CHECK_WHY(b.spill_stores == 0 && b.spill_loads == 0 && b.stack_frame == 0,
                  "%s %s: %d bytes spilled, %d loaded, a stack frame of %d (%d registers)", ARCHS[a],
                  x->name, b.spill_stores, b.spill_loads, b.stack_frame, b.registers);
        CHECK_WHY(has_symbol(&b, "fat_fwd_mma80") && has_symbol(&b, "fat_fwd_mma80_combine"),
                  "%s %s: an entry missing", ARCHS[a], x->name);
        printf("%s %-44s %3d registers, %d bytes spilled\n", ARCHS[a], x->name, b.registers,
               b.spill_stores);
      }
      char *sass = b.ok && tool ? sass_of(tool, &b, x->name) : NULL;
      if (sass) {
        CHECK_WHY(!has_opcode(sass, "LDL") && !has_opcode(sass, "STL"), "%s %s: local memory in its SASS",
                  ARCHS[a], x->name);
        CHECK_WHY(strncmp(x->name, "fwd.paged.", 10) ||
                      (has_opcode(sass, "LDG") && strstr(sass, "SHFL.IDX") && has_opcode(sass, "LDGSTS")),
                  "%s %s: no table read, page shuffle or asynchronous copy in its SASS", ARCHS[a], x->name);
        free(sass);
      }
      fat_build_free(&b);
    }
    for (size_t i = 0; i < n; i++) fat_variant_free(&v[i]);
    free(v);
  }
  fat_gen_close(g);
  return check_summary("test_compile_paged");
}

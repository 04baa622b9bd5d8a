/* SPDX-License-Identifier: MIT */
/* The wgmma ceiling (templates/ceilings_wgmma90.cu) on the CPU: its source
 * is the template with the dtype defined first and wgmma.cuh and
 * fat_device.cuh inlined once each between #line markers, nothing left for
 * NVRTC to read from the disk; NVRTC compiles it for sm_90a in both dtypes
 * with no spills, no stack frame, both entries under one block a SM's
 * registers, the whole of static shared memory for the SS entry and no
 * wgmma the compiler had to serialise or fence on its own (ptxas's
 * "serialized" and "is injected" notes); it is refused for sm_80 with its
 * message. Where a
 * cuobjdump is found (as tests/test_sass_winners.sh finds one) the SASS of
 * each dtype issues m64n256k16 products of that dtype, the RS ones with A
 * from registers and B transposed, four a group, waits for all but one
 * group in the loop, and keeps nothing in local memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "compile.h"
#include "gpu_run.h"

#define ERRLEN 4096
#define PRODUCTS_PER_ENTRY 4     /* kStepsPerGroup: one 64-column slab of k-steps */
#define MAX_REGISTERS 255        /* what a thread may have: both entries run one block a SM */
#define WHOLE_STATIC_SMEM 49152  /* 2 x 8 KiB A tiles + the 32 KiB B tile (the SS entry's) */

static void test_source(void) {
  char err[ERRLEN] = "", why[256];
  char *s = fat_gpu_wgmma_ceilings_source(FAT_BF16, err, sizeof err);
  REQUIRE_EXIT(s != NULL);
  const char *head = "// templates/ceilings_wgmma90.cu for bf16, its includes inlined "
                     "(tuner/measure/device.c)\n#define FAT_CEILING_BF16 1\n"
                     "#line 1 \"templates/ceilings_wgmma90.cu\"\n";
  CHECK_WHY(!strncmp(s, head, strlen(head)), "%.300s", s);
  /* Each header once, and the template goes on after it at its next line. */
  const char *dev = strstr(s, "#line 1 \"templates/fat_device.cuh\"\n");
  const char *wg = strstr(s, "#line 1 \"templates/wgmma.cuh\"\n");
  CHECK(dev && wg && dev < wg);
  CHECK(dev && !strstr(dev + 1, "#line 1 \"templates/fat_device.cuh\""));
  CHECK(wg && strstr(wg, "#line ") && strstr(wg + 1, "\"templates/ceilings_wgmma90.cu\"\n"));
  fat_source_file_reads(s, why, sizeof why);
  CHECK_STR(why, "");
  free(s);
  s = fat_gpu_wgmma_ceilings_source(FAT_FP16, err, sizeof err);
  REQUIRE_EXIT(s != NULL);
  CHECK(strstr(s, "\n#define FAT_CEILING_BF16 0\n") != NULL);
  free(s);
}

static void test_refused(void) {
  char err[ERRLEN] = "";
  fat_build b;
  CHECK_INT(fat_gpu_compile_wgmma_ceilings("sm_80", FAT_BF16, &b, err, sizeof err), -1);
  CHECK_STR(err, "templates/ceilings_wgmma90.cu is for sm_90a (wgmma), not sm_80");
  CHECK(!b.ok && !b.cubin);
}

/* 1 with PATH in OUT when it is an executable file. */
static int executable(const char *path, char *out, size_t cap) {
  if (!path[0] || access(path, X_OK) != 0) return 0;
  snprintf(out, cap, "%s", path);
  return 1;
}

/* A cuobjdump where tests/test_sass_winners.sh looks for one, in its order:
 * $FATUNE_CUOBJDUMP, the CUDA toolkit's, the PATH's, the one
 * scripts/install-deps.sh installs; "" when none. */
static void find_cuobjdump(char *out, size_t cap) {
  const char *env = getenv("FATUNE_CUOBJDUMP"), *cuda = getenv("CUDA_ROOT"),
             *home = getenv("HOME"), *path = getenv("PATH");
  char c[1024];
  out[0] = '\0';
  if (env && executable(env, out, cap)) return;
  snprintf(c, sizeof c, "%.960s/bin/cuobjdump", cuda ? cuda : "/usr/local/cuda");
  if (executable(c, out, cap)) return;
  for (const char *p = path ? path : ""; *p;) {
    size_t n = strcspn(p, ":");
    snprintf(c, sizeof c, "%.*s/cuobjdump", (int)(n < 960 ? n : 960), p);
    if (n && executable(c, out, cap)) return;
    p += n + (p[n] == ':');
  }
  snprintf(c, sizeof c, "%.960s/.cache/fatune/tools/nvidia/cu13/bin/cuobjdump", home ? home : "");
  executable(c, out, cap);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + strlen(needle), needle)) n++;
  return n;
}

/* The SASS of CUBIN by TOOL, heap; NULL when it cannot be read. */
static char *sass_of(const char *tool, const fat_build *b) {
  char path[] = "/tmp/fatune_ceilings_wgmma.XXXXXX", cmd[2048];
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "wb");
  if (!f || fwrite(b->cubin, 1, b->cubin_size, f) != b->cubin_size) {
    if (f) fclose(f);
    remove(path);
    return NULL;
  }
  fclose(f);
  snprintf(cmd, sizeof cmd, "'%s' --dump-sass '%s' 2>&1", tool, path);
  FILE *p = popen(cmd, "r");
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  char buf[4096];
  size_t n;
  while (p && mem && (n = fread(buf, 1, sizeof buf, p)) > 0) fwrite(buf, 1, n, mem);
  int rc = p ? pclose(p) : -1;
  if (mem) fclose(mem);
  remove(path);
  if (rc != 0) {
    fprintf(stderr, "%s: %s\n", cmd, text ? text : "");
    free(text);
    return NULL;
  }
  return text;
}

/* The SASS of entry NAME: from its "Function : NAME" line to the next entry's. */
static const char *entry_sass(const char *sass, const char *name, const char **end) {
  char head[128];
  snprintf(head, sizeof head, "Function : %s\n", name);
  const char *p = strstr(sass, head);
  if (!p) return NULL;
  *end = strstr(p + 1, "Function : ");
  if (!*end) *end = p + strlen(p);
  return p;
}

static int count_in(const char *from, const char *to, const char *needle) {
  int n = 0;
  for (const char *p = strstr(from, needle); p && p < to; p = strstr(p + 1, needle)) n++;
  return n;
}

static void test_compiles(const char *tool) {
  static const fat_dtype dtypes[] = {FAT_FP16, FAT_BF16};
  for (int i = 0; i < 2; i++) {
    char err[ERRLEN] = "";
    fat_build b;
    const char *dt = fat_dtype_name(dtypes[i]);
    if (fat_gpu_compile_wgmma_ceilings("sm_90a", dtypes[i], &b, err, sizeof err)) {
      fprintf(stderr, "%s: %s\n", dt, err);
      CHECK(!"templates/ceilings_wgmma90.cu compiles for sm_90a");
      continue;
    }
    printf("%s: %d registers, %d bytes static shared memory, %zu-byte cubin\n", dt, b.registers,
           b.smem_static, b.cubin_size);
    CHECK(b.ok && b.cubin_size > 0);
    CHECK_INT(b.spill_stores, 0);
    CHECK_INT(b.spill_loads, 0);
    CHECK_INT(b.stack_frame, 0);
    CHECK(b.registers > 128 && b.registers <= MAX_REGISTERS);  /* 128 accumulators a thread */
    CHECK_INT(b.smem_static, WHOLE_STATIC_SMEM);
    CHECK_INT(count(b.log, "Compiling entry function"), 2);
    /* ptxas's notes when it must serialise the products, or add a fence
     * or a wait the source did not ask for. */
    CHECK_WHY(!strstr(b.log, "serialized") && !strstr(b.log, "is injected"), "%s", b.log);
    if (tool[0]) {
      char *sass = sass_of(tool, &b);
      CHECK(sass != NULL);
      if (sass) {
        char product[64];
        /* fp16's products print without the dtype: HGMMA.64x256x16.F32 R24, ... */
        snprintf(product, sizeof product, "HGMMA.64x256x16.F32%s ", dtypes[i] == FAT_BF16 ? ".BF16" : "");
        const char *end, *ss = entry_sass(sass, "fat_ceiling_wgmma_ss", &end);
        CHECK(ss != NULL);
        if (ss) {
          CHECK_INT(count_in(ss, end, product), PRODUCTS_PER_ENTRY);
          CHECK_INT(count_in(ss, end, "gdesc[UR"), PRODUCTS_PER_ENTRY);
          CHECK_INT(count_in(ss, end, "tnspB"), 0);
        }
        const char *rs = entry_sass(sass, "fat_ceiling_wgmma_rs", &end);
        CHECK(rs != NULL);
        if (rs) {
          CHECK_INT(count_in(rs, end, product), PRODUCTS_PER_ENTRY);
          CHECK_INT(count_in(rs, end, ".tnspB, R"), PRODUCTS_PER_ENTRY);
        }
        CHECK_INT(count(sass, "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;"), 2);
        CHECK_INT(count(sass, "WARPGROUP.ARRIVE ;"), 2);
        CHECK(!strstr(sass, "LDL") && !strstr(sass, "STL"));
        free(sass);
      }
    }
    fat_build_free(&b);
  }
}

int main(void) {
  char tool[1024];
  test_source();
  test_refused();
  find_cuobjdump(tool, sizeof tool);
  if (!tool[0]) {
    printf("no cuobjdump (set FATUNE_CUOBJDUMP, or run scripts/install-deps.sh): SASS not read\n");
    if (getenv("FATUNE_REQUIRE_CUOBJDUMP") && !strcmp(getenv("FATUNE_REQUIRE_CUOBJDUMP"), "1"))
      check_record(0);
  }
  test_compiles(tool);
  return check_summary("test_ceilings_wgmma");
}

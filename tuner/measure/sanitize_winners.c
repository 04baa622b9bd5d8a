/* SPDX-License-Identifier: MIT */
/* Runs every stored winner of this GPU, forward and backward, once on small
 * and boundary shapes, in this process, checked against the fp64 reference
 * (the backward's gradients against the fp64 reference gradients): the
 * program that
 * compute-sanitizer (memcheck, racecheck, synccheck) wraps on the GPU
 * machine. Usage: sanitize_winners DB [GPU_INDEX [PREFIX]]: PREFIX (e.g.
 * bwd.ws90) keeps the winners whose variant names begin PREFIX. Exit 0 when
 * every check passed, 1 otherwise, 77 without a GPU. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "gpu_run.h"
#include "types.h"

#define ERRLEN 1024

/* Shapes that end inside the first tile, cross one tile boundary, have one
 * row or one key, or more queries than keys (causal rows with no key); the
 * last two have more query blocks than an H200 has SMs, so that resident
 * blocks loop, and drawing ones draw (rows with no key among them), with
 * little work a block. */
static const fat_check_shape shapes[] = {
    {FAT_SHAPE_DIMS(1, 2, 2, 1, 1)},       {FAT_SHAPE_DIMS(1, 2, 2, 17, 17)},
    {FAT_SHAPE_DIMS(2, 3, 3, 77, 77)},     {FAT_SHAPE_DIMS(1, 2, 2, 130, 130)},
    {FAT_SHAPE_DIMS(1, 1, 1, 1, 300)},     {FAT_SHAPE_DIMS(1, 2, 2, 300, 45)},
    {FAT_SHAPE_DIMS(8, 16, 16, 130, 130)}, {FAT_SHAPE_DIMS(8, 16, 16, 300, 45)},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

int main(int argc, char **argv) {
  char err[ERRLEN], arch[16];
  fat_gpu *g = NULL;
  fat_gpu_info info;
  fat_build util = {0}, ref = {0};
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int rc = 1, checked = 0, failed = 0;
  if (argc < 2) {
    fprintf(stderr, "usage: sanitize_winners DB [GPU_INDEX [PREFIX]]\n");
    return 2;
  }
  if (fat_gpu_open(argc > 2 ? atoi(argv[2]) : 0, &g, &info, err, sizeof err)) {
    fprintf(stderr, "sanitize_winners: %s\n", err);
    return 77;
  }
  fat_arch_for_cc(info.cc_major, info.cc_minor, arch);
  if (fat_gpu_compile_support(arch, &util, &ref, err, sizeof err) ||
      fat_gpu_load_support(g, util.cubin, ref.cubin, err, sizeof err)) {
    fprintf(stderr, "sanitize_winners: %s\n", err);
    goto out;
  }
  if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db,
                         "SELECT DISTINCT v.name, v.entry, v.block_m, v.threads, v.smem_bytes, "
                         "v.dtype, v.mask, v.head_dim, v.family, b.cubin, v.direction, v.params "
                         "FROM winners w JOIN variants v ON v.id = w.variant_id "
                         "JOIN gpus g ON g.id = w.gpu_id "
                         "JOIN builds b ON b.variant_id = v.id AND b.ok = 1 AND b.arch = ?1 "
                         "WHERE g.name = ?2 AND substr(v.name, 1, length(?3)) = ?3 ORDER BY v.name",
                         -1, &st, NULL) != SQLITE_OK) {
    fprintf(stderr, "sanitize_winners: %s: %s\n", argv[1], sqlite3_errmsg(db));
    goto out;
  }
  sqlite3_bind_text(st, 1, arch, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, info.name, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, argc > 3 ? argv[3] : "", -1, SQLITE_STATIC);
  while (sqlite3_step(st) == SQLITE_ROW) {
    fat_kernel_desc d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(d.entry, sizeof d.entry, "%s", (const char *)sqlite3_column_text(st, 1));
    d.block_m = sqlite3_column_int(st, 2);
    d.threads = sqlite3_column_int(st, 3);
    d.smem_bytes = sqlite3_column_int(st, 4);
    fat_dtype_parse((const char *)sqlite3_column_text(st, 5), &d.dtype);
    fat_mask_parse((const char *)sqlite3_column_text(st, 6), &d.mask);
    d.head_dim = sqlite3_column_int(st, 7);
    d.cubin = sqlite3_column_blob(st, 9);
    d.cubin_size = (size_t)sqlite3_column_bytes(st, 9);
    fat_direction direction = FAT_FWD;
    fat_direction_parse((const char *)sqlite3_column_text(st, 10), &direction);
    /* The launch parameters the variant's name does not carry (a split-KV
     * variant writes its partial results to a workspace sized by its
     * splits: without them it would write through a null pointer). */
    if (fat_kernel_schedule(&d, direction, (const char *)sqlite3_column_text(st, 8),
                            (const char *)sqlite3_column_text(st, 11), err, sizeof err)) {
      printf("%-52s %s\n", d.name, err);
      failed++;
      continue;
    }
    fat_gpu_kernel k;
    if (fat_gpu_kernel_load(g, &d, &k, err, sizeof err)) {
      printf("%-52s load failed: %s\n", d.name, err);
      failed++;
      continue;
    }
    for (int s = 0; s < N_SHAPES; s++) {
      fat_check c;
      /* fat_gpu_check checks a backward kernel's gradients itself. */
      int r = fat_gpu_check(g, &k, &shapes[s], 0x5eed0000u + (uint64_t)checked, &c, err, sizeof err);
      checked++;
      if (r != FAT_GPU_OK || !c.passed) {
        printf("%-52s %dx%dx%dx%d: %s\n", d.name, shapes[s].batch, shapes[s].heads,
               shapes[s].seqlen_q, shapes[s].seqlen_k, r != FAT_GPU_OK ? err : c.reason);
        failed++;
        if (r == FAT_GPU_FATAL) goto out;
      }
    }
    fat_gpu_kernel_unload(g, &k);
    /* One line per winner, so that a run cut short shows how far it got. */
    printf("%-52s %d shapes checked\n", d.name, N_SHAPES);
    fflush(stdout);
  }
  printf("%d checks of stored winners on %s, %d failed\n", checked, info.name, failed);
  rc = failed || !checked;
out:
  if (st) sqlite3_finalize(st);
  if (db) sqlite3_close(db);
  fat_build_free(&util);
  fat_build_free(&ref);
  if (g) fat_gpu_close(g);
  return rc;
}

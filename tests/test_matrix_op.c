/* SPDX-License-Identifier: MIT */
/* The family table's fact of which instruction each family issues, and the
 * ceiling that instruction's peak is stored under: every forward and
 * backward family on mma.sync (mma80, splitkv, paged, bwd mma80, mma80f) is placed
 * against the mma.sync peak, every Hopper family (wgmma90, ws90, both
 * directions) against the wgmma peak, the materialising baseline and a
 * family no row names against none; a family found by name in the other
 * direction is not this direction's. The names are exact. The end-of-run
 * table's "% peak" cell divides by the peak of the winner's instruction,
 * names it, and says "-" where that peak was not measured. */
#include <string.h>
#include "db.h"
#include "family.h"
#include "summary.h"
#include "check.h"

static void test_families(void) {
  static const struct {
    const char *family;
    fat_direction direction;
    fat_matrix_op op;
  } rows[] = {
      {"mma80", FAT_FWD, FAT_MATRIX_MMA_SYNC},   {"splitkv", FAT_FWD, FAT_MATRIX_MMA_SYNC},
      {"wgmma90", FAT_FWD, FAT_MATRIX_WGMMA},    {"ws90", FAT_FWD, FAT_MATRIX_WGMMA},
      {"materialize", FAT_FWD, FAT_MATRIX_OTHER}, {"mma80", FAT_BWD, FAT_MATRIX_MMA_SYNC},
      {"mma80f", FAT_BWD, FAT_MATRIX_MMA_SYNC},  {"wgmma90", FAT_BWD, FAT_MATRIX_WGMMA},
      {"ws90", FAT_BWD, FAT_MATRIX_WGMMA},       {"paged", FAT_FWD, FAT_MATRIX_MMA_SYNC},
      /* Not in the table: a template folder's family, a forward-only one
       * asked for backward, a backward-only one asked for forward, none. */
      {"faulty", FAT_FWD, FAT_MATRIX_OTHER},     {"splitkv", FAT_BWD, FAT_MATRIX_OTHER},
      {"mma80f", FAT_FWD, FAT_MATRIX_OTHER},     {"paged", FAT_BWD, FAT_MATRIX_OTHER},
      {NULL, FAT_FWD, FAT_MATRIX_OTHER},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    fat_matrix_op got = fat_family_matrix_op(rows[i].family, rows[i].direction);
    CHECK_WHY(got == rows[i].op, "%s %s: %s, want %s", rows[i].family ? rows[i].family : "(null)",
              fat_direction_name(rows[i].direction), fat_matrix_op_name(got),
              fat_matrix_op_name(rows[i].op));
  }
  /* Every row of the table is one of the above: a new family says its instruction here. */
  CHECK_INT(fat_family_count(), 10);
  CHECK_STR(fat_family_of_template("faulty", FAT_FWD).name, "faulty");
  CHECK_INT(fat_family_of_template("faulty", FAT_FWD).matrix_op, FAT_MATRIX_OTHER);
}

static void test_names(void) {
  CHECK_STR(fat_matrix_op_name(FAT_MATRIX_MMA_SYNC), "mma.sync");
  CHECK_STR(fat_matrix_op_name(FAT_MATRIX_WGMMA), "wgmma");
  CHECK_STR(fat_matrix_op_name(FAT_MATRIX_OTHER), "other");
  CHECK_STR(fat_ceiling_peak_name(FAT_MATRIX_MMA_SYNC, FAT_FP16), "matrix_peak_fp16");
  CHECK_STR(fat_ceiling_peak_name(FAT_MATRIX_MMA_SYNC, FAT_BF16), "matrix_peak_bf16");
  CHECK_STR(fat_ceiling_peak_name(FAT_MATRIX_WGMMA, FAT_FP16), "wgmma_peak_fp16");
  CHECK_STR(fat_ceiling_peak_name(FAT_MATRIX_WGMMA, FAT_BF16), "wgmma_peak_bf16");
  CHECK(fat_ceiling_peak_name(FAT_MATRIX_OTHER, FAT_BF16) == NULL);
  /* No fp8 peak is measured: e4m3 has none to be placed against. */
  CHECK(fat_ceiling_peak_name(FAT_MATRIX_MMA_SYNC, FAT_E4M3) == NULL);
  CHECK(fat_ceiling_peak_name(FAT_MATRIX_WGMMA, FAT_E4M3) == NULL);
  CHECK_INT(fat_dtype_has_peak(FAT_E4M3), 0);
  CHECK_INT(fat_dtype_has_peak(FAT_BF16), 1);
  /* An fp8 K/V cache's kernels issue its Q's type's products: that peak. */
  CHECK_STR(fat_ceiling_peak_name(FAT_MATRIX_MMA_SYNC, FAT_FP16_E4M3KV), "matrix_peak_fp16");
  CHECK_STR(fat_ceiling_peak_name(FAT_MATRIX_MMA_SYNC, FAT_BF16_E4M3KV), "matrix_peak_bf16");
  CHECK_STR(fat_ceiling_peak_name(FAT_MATRIX_WGMMA, FAT_BF16_E4M3KV), "wgmma_peak_bf16");
  CHECK_INT(fat_dtype_peak(FAT_FP16_E4M3KV), FAT_FP16);
  CHECK_INT(fat_dtype_peak(FAT_BF16_E4M3KV), FAT_BF16);
  CHECK_INT(fat_dtype_peak(FAT_E4M3), -1);
  CHECK_STR(FAT_CEILING_WGMMA_RS_PEAK_FP16, "wgmma_rs_peak_fp16");
  CHECK_STR(FAT_CEILING_WGMMA_RS_PEAK_BF16, "wgmma_rs_peak_bf16");
}

/* 600 TFLOP/s against mma.sync's 800 and wgmma's 750 (bf16; fp16's wgmma
 * peak not measured). */
static void test_peak_cell(void) {
  const double peaks[FAT_MATRIX_OP_COUNT][FAT_PEAK_DTYPES] = {
      [FAT_MATRIX_MMA_SYNC] = {[FAT_FP16] = 800e12, [FAT_BF16] = 800e12},
      [FAT_MATRIX_WGMMA] = {[FAT_FP16] = 0, [FAT_BF16] = 750e12}};
  fat_db_summary_row row = {.problem = {.direction = FAT_FWD, .dtype = FAT_BF16}, .tflops = 600};
  char cell[32];
  snprintf(row.winner_family, sizeof row.winner_family, "mma80");
  fat_summary_peak_cell(&row, peaks, cell, sizeof cell);
  CHECK_STR(cell, "75% mma.sync");
  snprintf(row.winner_family, sizeof row.winner_family, "ws90");
  fat_summary_peak_cell(&row, peaks, cell, sizeof cell);
  CHECK_STR(cell, "80% wgmma");
  row.problem.direction = FAT_BWD;  /* the backward's ws90: wgmma too */
  fat_summary_peak_cell(&row, peaks, cell, sizeof cell);
  CHECK_STR(cell, "80% wgmma");
  row.problem.dtype = FAT_FP16;     /* no fp16 wgmma peak */
  fat_summary_peak_cell(&row, peaks, cell, sizeof cell);
  CHECK_STR(cell, "-");
  snprintf(row.winner_family, sizeof row.winner_family, "faulty");
  row.problem.dtype = FAT_BF16;
  fat_summary_peak_cell(&row, peaks, cell, sizeof cell);
  CHECK_STR(cell, "-");
  /* Above the peak is said as it is, not clipped. */
  snprintf(row.winner_family, sizeof row.winner_family, "mma80");
  row.tflops = 1000;
  fat_summary_peak_cell(&row, peaks, cell, sizeof cell);
  CHECK_STR(cell, "125% mma.sync");
  /* An e4m3 winner (ws90, wgmma) is placed against nothing, and reads no
   * peak past the array's two dtypes. */
  snprintf(row.winner_family, sizeof row.winner_family, "ws90");
  row.problem.direction = FAT_FWD, row.problem.dtype = FAT_E4M3;
  fat_summary_peak_cell(&row, peaks, cell, sizeof cell);
  CHECK_STR(cell, "-");
  /* An fp8 K/V cache's winner (splitkv, mma.sync) against its Q's type's
   * peak: 8 TFLOP/s of fp16's 800 (a decoding step's share). */
  snprintf(row.winner_family, sizeof row.winner_family, "splitkv");
  row.problem.dtype = FAT_FP16_E4M3KV, row.tflops = 8;
  fat_summary_peak_cell(&row, peaks, cell, sizeof cell);
  CHECK_STR(cell, "1% mma.sync");
}

int main(void) {
  test_families();
  test_names();
  test_peak_cell();
  return check_summary("test_matrix_op");
}

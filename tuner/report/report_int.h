/* SPDX-License-Identifier: MIT */
/* The report module's private header (nothing outside tuner/report/ includes
 * it): what report_data.c reads from the database and report.c draws -- the
 * series, one record per problem and the page's data -- and the one call
 * between them; then the SVG primitives (report_svg.c) report.c draws with. */
#ifndef FAT_REPORT_INT_H
#define FAT_REPORT_INT_H
#include <stddef.h>
#include <stdio.h>
#include "db.h"
#include "family.h"

/* Series of the throughput charts: three of fatune's own, then one per
 * external source found in the database, up to MAX_SERIES in all. */
enum { S_WINNER, S_DEFAULT, S_MATERIALIZE, S_FIRST_EXTERNAL };
#define MAX_SERIES 8

/* One problem with everything measured for it on the report's GPU. */
typedef struct rp_problem {
  sqlite3_int64 id;
  fat_problem p;
  double ms[MAX_SERIES];        /* median per series; NAN: none stored */
  double bench_ms;              /* fatune's own median from the benchmark that timed the
                                   peers (FAT_EXTERNAL_FATUNE_BENCH); NAN: none stored */
  int has_winner;
  fat_db_summary_row summary;   /* valid when has_winner */
  fat_matrix_op matrix_op;      /* the winner's family's instruction, when has_winner */
} rp_problem;

typedef struct rp_data {
  rp_problem *probs;
  size_t n;
  char series[MAX_SERIES][64];  /* display name of each series */
  int n_series;
  int dropped_sources;          /* external sources beyond MAX_SERIES, not drawn */
  double bandwidth;             /* B/s, 0 when not measured */
  double peak[FAT_MATRIX_OP_COUNT][FAT_PEAK_DTYPES];  /* FLOP/s of each instruction by fat_dtype (mma.sync's;
                                           wgmma's, SS, on Hopper), 0 when not measured */
  double wgmma_rs_peak[2];      /* wgmma's with A in registers, by fat_dtype; 0: not measured */
  char gpu[256];
  char gpu_detail[256];
} rp_data;

/* Fills D with what the report of GPU_ID shows: the GPU, every problem with
 * something measured (in the order the charts read) and its median per
 * series, the winners' summaries, the external sources and the measured
 * ceilings. Returns 0, or -1 with ERR when the database cannot be read; the
 * caller frees D->probs either way. */
int fat_report_load(fat_db *db, sqlite3_int64 gpu_id, rp_data *d, char *err, size_t errlen);

/* ------------------------------------------- SVG primitives (report_svg.c) */

/* A chart's SVG and its plot area, in SVG user units. */
typedef struct plot_box {
  double w, h, x0, x1, y0, y1; /* the SVG's size; the plot's left, right, bottom, top */
} plot_box;

/* Marker shapes: an implementation's in the small multiples, a dtype's in
 * the roofline (points of different head dims sit on the same spot there:
 * the lower bound's intensity is seqlen/2 whatever the head dim). */
enum marker_shape { MARK_DOT, MARK_RING, MARK_SQUARE, MARK_DIAMOND, N_MARKS };
/* The closing tag of a marker of SHAPE that marker_open opened and a <title> filled. */
#define MARKER_END(shape) \
  ((shape) == MARK_SQUARE ? "</rect>" : (shape) == MARK_DIAMOND ? "</path>" : "</circle>")

/* Writes S to F with HTML's special characters (< > & ") as entities. */
void put_escaped(FILE *f, const char *s);
/* A round step (1, 2 or 5 × 10^n) for a linear axis from 0 to HI. */
double nice_step(double hi);
/* V mapped linearly from [LO, HI] onto [P0, P1]; the middle when HI <= LO. */
double lerp(double v, double lo, double hi, double p0, double p1);
/* Opens B's <svg> element, LABEL its accessible name, and draws the plot's frame. */
void svg_open(FILE *f, const plot_box *b, const char *label);
/* The x axis's label under B's plot and the y axis's, turned, left of it. */
void axis_labels(FILE *f, const plot_box *b, const char *x_label, const char *y_label);
/* Opens a marker of SHAPE at (X, Y) in COLOR, left unclosed: "/>" or MARKER_END ends it. */
void marker_open(FILE *f, enum marker_shape shape, double x, double y, const char *color);
/* One legend row at Y right of B's plot: a line sample (none if DASH is NULL),
 * a marker (none if SHAPE < 0), LABEL. */
void legend_entry(FILE *f, const plot_box *b, double y, const char *color, const char *dash,
                  double width, int shape, const char *label);
/* Grid lines and labels at 1, 2, 5 × 10^n within log10 range [LO, HI], along x if HORIZONTAL. */
void log_ticks(FILE *f, const plot_box *b, double lo, double hi, int horizontal);
#endif

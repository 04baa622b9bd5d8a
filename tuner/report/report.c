/* SPDX-License-Identifier: MIT */
/* `fatune report`: writes one GPU's results (report_data.c reads them from
 * the database) as a single HTML page with inline SVG charts (report.h says
 * what is on it), drawn with report_svg.c's primitives; report_cli.c is the
 * command line. The page reads top down: contents, a summary of speedups
 * against the peers, small multiples (one chart per direction, dtype and
 * mask, a series per head dim and implementation), the roofline, the
 * winners. Nothing on the page reaches the network: no fonts, scripts,
 * images or links outside the file (the contents' links are anchors);
 * inline SVG in HTML needs no namespace URL. Nor does it name a path of the
 * machine that drew it. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "explain.h"
#include "report.h"
#include "report_int.h"

#define ERRLEN 512
#define TERA 1e12
#define MS_PER_S 1e3

/* Small-multiple geometry, in SVG user units (the page scales each SVG to
 * its grid cell: two side by side on a wide screen, one on a narrow one). */
#define CHART_W 580.0
#define CHART_H 330.0
#define MARGIN_L 54.0
#define MARGIN_R 188.0 /* the legend sits right of the plot */
#define MARGIN_T 14.0
#define MARGIN_B 44.0
/* The roofline spans the page. */
#define ROOF_W 800.0
#define ROOF_H 380.0
#define ROOF_MARGIN_R 290.0
#define Y_HEADROOM 1.08    /* the top tick clears the highest point by this factor */
#define LOG_PAD 1.6        /* a log axis extends this factor beyond the data */
#define LEGEND_ROW 16.0
#define LEGEND_GAP 8.0     /* between the series' legend rows and the implementations' */
#define LEGEND_TEXT_DROP 4.0 /* a legend row's text baseline below its sample (report_svg.c) */
#define ROOF_MERGE 0.01    /* peaks within 1 % draw as one roof: two lines would overlap */
#define MAX_KEYS 32        /* series keys (head dims, windows, ...) told apart in a section */
#define INK "#444"         /* roofs and the implementations' legend samples */

static const plot_box small_box = {CHART_W, CHART_H, MARGIN_L, CHART_W - MARGIN_R,
                                   CHART_H - MARGIN_B, MARGIN_T};
static const plot_box roof_box = {ROOF_W, ROOF_H, MARGIN_L, ROOF_W - ROOF_MARGIN_R,
                                  ROOF_H - MARGIN_B, MARGIN_T};

/* Okabe-Ito colours, distinguishable with colour-blindness: one per series
 * key (head dim, window, ...) of a section, the same key the same colour in
 * every chart of it. */
static const char *const palette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                      "#CC79A7", "#56B4E9", "#000000", "#999999"};
#define N_COLOURS (sizeof palette / sizeof palette[0])

/* How each implementation's lines are drawn (dashes tell them apart on a
 * grey printout): fatune's winner solid, then one per external source. */
typedef struct source_style {
  const char *dash;
  double width;
  enum marker_shape shape;
} source_style;

static const source_style winner_style = {"none", 2.4, MARK_DOT};
static const source_style external_styles[] = {
    {"6 3", 1.7, MARK_RING}, {"2 2", 1.7, MARK_SQUARE}, {"9 3 2 3", 1.7, MARK_DIAMOND},
    {"1 3", 1.7, MARK_RING}, {"12 4", 1.5, MARK_SQUARE},
};
_Static_assert(sizeof external_styles / sizeof external_styles[0] >= MAX_SERIES - S_FIRST_EXTERNAL,
               "a style for every external source the data keeps");

static const source_style *style_of(int k) {
  return k == S_WINNER ? &winner_style : &external_styles[k - S_FIRST_EXTERNAL];
}

/* The series a small multiple draws: fatune's winner and every peer (the
 * default configuration and the materialising baseline are the summary's
 * and the winners table's). */
static int drawn_source(int k) { return k == S_WINNER || k >= S_FIRST_EXTERNAL; }

/* ------------------------------------------------------------ writing */

/* A variant name, escaped, with a line-break opportunity after each dot so
 * that long names wrap between their fields in a narrow table. */
static void put_name(FILE *f, const char *name) {
  char one[2] = {0, 0};
  for (; *name; name++) {
    one[0] = *name;
    put_escaped(f, one);
    if (*name == '.' && name[1]) fputs("<wbr>", f);
  }
}

/* ------------------------------------------------- charts and series */

/* What a chart's x axis and unit are. Square problems (seqlen_k = seqlen_q)
 * and local windows are compute-bound: TFLOP/s against the sequence length.
 * Decoding shapes (few queries against a fixed, long seqlen_k) are
 * memory-bound: the input/output lower bound's bytes per second against
 * the queries. Variable-length batches are one profile each, no curve: the
 * winners table lists them. */
enum chart_kind { CK_SQUARE, CK_LOCAL, CK_DECODE, N_KINDS, CK_NONE = N_KINDS };

static enum chart_kind kind_of(const fat_problem *p) {
  if (p->lengths.n) return CK_NONE;
  if (p->seqlen_k != p->seqlen_q) return CK_DECODE;
  return p->mask == FAT_MASK_LOCAL ? CK_LOCAL : CK_SQUARE;
}

/* One chart: a direction, dtype and kind, for square problems the mask
 * (local windows of every size share a chart, so do the masks of decoding),
 * and for decoding the cache's layout: contiguous, or paged in pages of one
 * size (a table tuned over a grid of lengths, groups and page sizes would
 * otherwise draw dozens of lines in one chart). */
static int same_chart(const fat_problem *a, const fat_problem *b) {
  enum chart_kind k = kind_of(a);
  return k != CK_NONE && k == kind_of(b) && a->direction == b->direction &&
         a->dtype == b->dtype && (k != CK_SQUARE || a->mask == b->mask) &&
         (k != CK_DECODE || a->page_size == b->page_size);
}

static int query_group(const fat_problem *p) { return p->heads / p->heads_k; }

/* One series key within a chart: the head dim and query heads per K/V head,
 * with the window (local) or the mask and keys (decoding; the page size is
 * the chart's, so a key keeps its colour in the contiguous and paged charts). */
static int same_series(const fat_problem *a, const fat_problem *b) {
  if (a->head_dim != b->head_dim || query_group(a) != query_group(b)) return 0;
  switch (kind_of(a)) {
    case CK_LOCAL: return a->window_left == b->window_left && a->window_right == b->window_right;
    case CK_DECODE: return a->mask == b->mask && a->seqlen_k == b->seqlen_k;
    default: return 1;
  }
}

/* The series key in few words: "d128", "d128 g4", "d128 w256,0",
 * "causal d128 g4 k65536". */
static void series_label(FILE *f, const fat_problem *p) {
  if (kind_of(p) == CK_DECODE) fprintf(f, "%s ", p->mask == FAT_MASK_CAUSAL ? "causal" : "no mask");
  fprintf(f, "d%d", p->head_dim);
  if (query_group(p) != 1) fprintf(f, " g%d", query_group(p));
  if (kind_of(p) == CK_LOCAL) fprintf(f, " w%d,%d", p->window_left, p->window_right);
  if (kind_of(p) == CK_DECODE) fprintf(f, " k%d", p->seqlen_k);
}

static void chart_title(FILE *f, const fat_problem *p) {
  fprintf(f, "%s, %s, ", p->direction == FAT_FWD ? "Forward" : "Backward",
          fat_dtype_name(p->dtype));
  switch (kind_of(p)) {
    case CK_LOCAL: fputs("local windows", f); break;
    case CK_DECODE:
      fputs("decoding", f);
      if (p->page_size) fprintf(f, ", pages of %d", p->page_size);
      break;
    default: fputs(p->mask == FAT_MASK_CAUSAL ? "causal" : "no mask", f);
  }
}

/* The chart's anchor: "fwd-bf16-causal", "fwd-bf16-local", "fwd-bf16-decoding",
 * "fwd-bf16-decoding-paged16". */
static void chart_id(FILE *f, const fat_problem *p) {
  static const char *const kinds[N_KINDS] = {NULL, "local", "decoding"};
  enum chart_kind k = kind_of(p);
  fprintf(f, "%s-%s-%s", fat_direction_name(p->direction), fat_dtype_name(p->dtype),
          k == CK_SQUARE ? fat_mask_name(p->mask) : kinds[k]);
  if (k == CK_DECODE && p->page_size) fprintf(f, "-paged%d", p->page_size);
}

/* The problem in few words, for the winners table: "fp16 d128 causal",
 * "bf16 d128 local w256,0", "bwd fp16 d64". */
static void problem_short(FILE *f, const fat_problem *p) {
  fprintf(f, "%s%s d%d%s", p->direction == FAT_BWD ? "bwd " : "", fat_dtype_name(p->dtype),
          p->head_dim, p->mask == FAT_MASK_CAUSAL ? " causal" : "");
  if (p->mask == FAT_MASK_LOCAL) fprintf(f, " local w%d,%d", p->window_left, p->window_right);
  if (p->heads_k != p->heads) fprintf(f, " g%d", query_group(p));
  if (p->seqlen_k != p->seqlen_q) fprintf(f, " k%d", p->seqlen_k);
  if (p->lengths.n) fputs(" varlen", f);
  if (p->page_size) fprintf(f, " paged %d", p->page_size);
}

/* A chart's measure of series K of R: TFLOP/s by the FLOP convention, or
 * for decoding TB/s over the input/output lower bound; NAN where nothing
 * was measured (or the IO model has no bound for the shape). */
static double metric(const rp_problem *r, int k) {
  if (isnan(r->ms[k])) return NAN;
  double s = r->ms[k] / MS_PER_S;
  if (kind_of(&r->p) != CK_DECODE) return fat_problem_flops(&r->p) / s / TERA;
  fat_io_model m;
  char err[ERRLEN];
  if (fat_io_model_compute(&r->p, &m, err, sizeof err)) return NAN;
  return (double)m.lower_bound_bytes / s / TERA;
}

static const char *unit_of(enum chart_kind k) { return k == CK_DECODE ? "TB/s" : "TFLOP/s"; }

/* ------------------------------------------------------ small multiples */

/* The series keys of a section (one direction and kind), in the order
 * their problems come: the colour of a key is its place here. */
typedef struct section_keys {
  size_t rep[MAX_KEYS];  /* a problem of each key */
  int n;
} section_keys;

static int key_index(const rp_data *d, const section_keys *keys, const fat_problem *p) {
  for (int i = 0; i < keys->n; i++)
    if (same_series(&d->probs[keys->rep[i]].p, p)) return i;
  return -1;
}

static const char *key_colour(const rp_data *d, const section_keys *keys, const fat_problem *p) {
  int i = key_index(d, keys, p);
  return palette[(i < 0 ? keys->n : i) % N_COLOURS];
}

/* One small multiple: the chart of problem CHART's key, every series with
 * data drawn against a y axis to YMAX (shared by its section, so that the
 * charts of a section compare at a glance). Returns the series drawn. */
static int small_multiple(FILE *f, const rp_data *d, size_t chart, const section_keys *keys,
                          double ymax) {
  const plot_box *b = &small_box;
  const fat_problem *key = &d->probs[chart].p;
  const enum chart_kind kind = kind_of(key);
  double xmin = INFINITY, xmax = -INFINITY;
  int drawn = 0;
  for (size_t i = 0; i < d->n; i++)
    if (same_chart(&d->probs[i].p, key)) {
      xmin = fmin(xmin, log2(d->probs[i].p.seqlen_q));
      xmax = fmax(xmax, log2(d->probs[i].p.seqlen_q));
    }
  /* Half a bucket of air at each end; a lone bucket gets one on each side. */
  xmin -= 0.5;
  xmax += 0.5;
  if (!(ymax > 0)) ymax = 1; /* medians are positive; this only keeps the axis finite */
  double step = nice_step(ymax * Y_HEADROOM), ytop = ceil(ymax * Y_HEADROOM / step) * step;
  char label[160];
  FILE *lf = fmemopen(label, sizeof label, "w");
  if (lf) {
    fprintf(lf, "%s against %s: ", unit_of(kind), kind == CK_DECODE ? "queries" : "sequence length");
    chart_title(lf, key);
    fclose(lf);
  } else {
    label[0] = '\0';
  }
  /* The chart's body is drawn first, so that the <svg> can be made as tall
   * as its legend, one row a series key (a decoding chart may have dozens);
   * without memory for that, the plot's height, as before. */
  FILE *const page = f;
  char *body = NULL;
  size_t body_len = 0;
  if (!(f = open_memstream(&body, &body_len))) {
    f = page;
    svg_open(f, b, label);
  }
  for (double y = 0; y <= ytop + step / 2; y += step) {
    double py = lerp(y, 0, ytop, b->y0, b->y1);
    fprintf(f, "<path class=\"grid\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>", b->x0, py, b->x1, py);
    fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
            b->x0 - 6, py + 4, y);
  }
  /* One tick per sequence length present (problems come in seqlen order
   * within a series, not across: ticks are marked as they are drawn). */
  int ticked[32], n_ticked = 0;
  for (size_t i = 0; i < d->n; i++) {
    if (!same_chart(&d->probs[i].p, key)) continue;
    int s = d->probs[i].p.seqlen_q, seen = 0;
    for (int t = 0; t < n_ticked; t++) seen |= ticked[t] == s;
    if (seen || n_ticked == (int)(sizeof ticked / sizeof ticked[0])) continue;
    ticked[n_ticked++] = s;
    double px = lerp(log2(s), xmin, xmax, b->x0, b->x1);
    fprintf(f, "<path class=\"grid\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>", px, b->y0, px, b->y1);
    fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", px,
            b->y0 + 16, s);
  }
  /* Decoding is memory-bound: the measured copy bandwidth is its roof. */
  if (kind == CK_DECODE && d->bandwidth > 0 && d->bandwidth / TERA <= ytop) {
    double py = lerp(d->bandwidth / TERA, 0, ytop, b->y0, b->y1);
    fprintf(f, "<path class=\"roof\" stroke=\"" INK "\" stroke-width=\"1.2\" "
            "stroke-dasharray=\"2 2\" fill=\"none\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>\n",
            b->x0, py, b->x1, py);
  }
  /* The series keys of this chart, each drawn in every source with data. */
  int legend_rows = 0, sources_seen[MAX_SERIES] = {0};
  double ly = b->y1 + 8;
  for (size_t rep = 0; rep < d->n; rep++) {
    const fat_problem *sp = &d->probs[rep].p;
    if (!same_chart(sp, key)) continue;
    int first = 1; /* REP is the first problem of its series key in this chart */
    for (size_t j = 0; j < rep && first; j++)
      first = !(same_chart(&d->probs[j].p, key) && same_series(&d->probs[j].p, sp));
    if (!first) continue;
    const char *colour = key_colour(d, keys, sp);
    char name[96];
    FILE *nf = fmemopen(name, sizeof name, "w");
    if (nf) {
      series_label(nf, sp);
      fclose(nf);
    } else {
      name[0] = '\0';
    }
    int any = 0;
    for (int k = 0; k < d->n_series; k++) {
      if (!drawn_source(k)) continue;
      const source_style *st = style_of(k);
      int pen = 0;
      for (size_t i = rep; i < d->n; i++) {
        const rp_problem *r = &d->probs[i];
        double v = metric(r, k);
        if (!same_chart(&r->p, key) || !same_series(&r->p, sp) || isnan(v)) continue;
        if (!pen) {
          fprintf(f, "<path class=\"series\" data-series=\"%s, ", name);
          put_escaped(f, d->series[k]);
          fprintf(f, "\" stroke=\"%s\" stroke-width=\"%.1f\" stroke-dasharray=\"%s\" "
                  "fill=\"none\" d=\"", colour, st->width, st->dash);
        }
        fprintf(f, "%s%.1f,%.1f", pen++ ? " L" : "M",
                lerp(log2(r->p.seqlen_q), xmin, xmax, b->x0, b->x1),
                lerp(v, 0, ytop, b->y0, b->y1));
      }
      if (!pen) continue;
      fputs("\"/>\n", f);
      for (size_t i = rep; i < d->n; i++) {
        const rp_problem *r = &d->probs[i];
        double v = metric(r, k);
        if (!same_chart(&r->p, key) || !same_series(&r->p, sp) || isnan(v)) continue;
        marker_open(f, st->shape, lerp(log2(r->p.seqlen_q), xmin, xmax, b->x0, b->x1),
                    lerp(v, 0, ytop, b->y0, b->y1), colour);
        fputs("><title>", f);
        put_escaped(f, d->series[k]);
        fprintf(f, ", %s: batch %d, heads %d", name, r->p.batch, r->p.heads);
        if (r->p.heads_k != r->p.heads) fprintf(f, " (K/V %d)", r->p.heads_k);
        fprintf(f, ", seqlen %d×%d: %.1f %s (%.4g ms)</title>%s\n", r->p.seqlen_q, r->p.seqlen_k,
                v, unit_of(kind), r->ms[k], MARKER_END(st->shape));
      }
      sources_seen[k] = 1;
      any = 1;
      drawn++;
    }
    if (any) {
      legend_entry(f, b, ly + legend_rows++ * LEGEND_ROW, colour, "none", 2.4, -1, name);
    }
  }
  /* Then how each implementation is drawn. */
  ly += LEGEND_GAP;
  for (int k = 0; k < d->n_series; k++) {
    if (!sources_seen[k]) continue;
    const source_style *st = style_of(k);
    legend_entry(f, b, ly + legend_rows++ * LEGEND_ROW, INK, st->dash, st->width, st->shape,
                 d->series[k]);
  }
  if (kind == CK_DECODE && d->bandwidth > 0 && d->bandwidth / TERA <= ytop)
    legend_entry(f, b, ly + legend_rows++ * LEGEND_ROW, INK, "2 2", 1.2, -1, "copy bandwidth");
  axis_labels(f, b, kind == CK_DECODE ? "queries per sequence (log scale)"
                                     : "sequence length (log scale)",
              kind == CK_DECODE ? "TB/s over the lower bound" : "TFLOP/s");
  if (f != page) {
    const int closed = fclose(f);
    f = page;
    plot_box tall = *b;
    /* The last row's baseline (LEGEND_TEXT_DROP below its centre) and air. */
    tall.h = fmax(b->h, ly + (legend_rows - 1) * LEGEND_ROW + LEGEND_TEXT_DROP + LEGEND_ROW / 2);
    svg_open(f, &tall, label);
    if (closed == 0) fwrite(body, 1, body_len, f);
    free(body);
  }
  fputs("</svg>\n", f);
  return drawn;
}

/* ------------------------------------------------------------ roofline */

static int on_roofline(const rp_problem *r, fat_io_model *m) {
  char err[ERRLEN];
  /* The lower bound and its intensity are the forward pass's, of a dense
   * batch (the IO model has no packed one). */
  return r->has_winner && r->p.direction == FAT_FWD && !r->p.lengths.n &&
         !fat_io_model_compute(&r->p, m, err, sizeof err);
}

static double winner_tflops(const rp_problem *r) {
  return fat_problem_flops(&r->p) / (r->ms[S_WINNER] / MS_PER_S) / TERA;
}

/* The roofline's series: one per instruction and dtype. */
static const char *const op_colour[] = {"#999999", "#0072B2", "#D55E00"}; /* by fat_matrix_op */
/* By fat_dtype: e4m3's unused (it is on no series), the fp8 K/V caches'
 * apart from their Q's type's, under whose roof they are drawn. */
static const enum marker_shape dtype_shape[FAT_N_DTYPES] = {MARK_DOT, MARK_SQUARE, MARK_DOT, MARK_RING,
                                                            MARK_DIAMOND};
static const char *const dtype_dash[] = {"none", "6 3"};                 /* a roof, by fat_dtype */
/* The instructions with roofs of their own, in the legend's order. */
static const fat_matrix_op roof_ops[] = {FAT_MATRIX_MMA_SYNC, FAT_MATRIX_WGMMA};
#define N_ROOF_OPS (sizeof roof_ops / sizeof roof_ops[0])

/* Each forward winner at (FLOPs / lower-bound bytes, TFLOP/s), log-log,
 * under the measured copy bandwidth and the peak of its family's
 * instruction, drawn in the instruction's colour as its winners are; where
 * that peak was not measured the legend says so. *ROOFS gets the roof
 * lines drawn; returns the series (instruction, dtype) drawn. */
static int roofline_chart(FILE *f, const rp_data *d, int *roofs) {
  const plot_box *b = &roof_box;
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY, top = 0;
  int drawn = 0, has[FAT_MATRIX_OP_COUNT][FAT_PEAK_DTYPES] = {{0}};
  double ly = b->y1 + 8;
  int row = 0;
  *roofs = 0;
  for (size_t i = 0; i < d->n; i++) {
    const rp_problem *r = &d->probs[i];
    fat_io_model m;
    if (!on_roofline(r, &m)) continue;
    xlo = fmin(xlo, m.intensity);
    xhi = fmax(xhi, m.intensity);
    ylo = fmin(ylo, winner_tflops(r));
    yhi = fmax(yhi, winner_tflops(r));
    /* (an e4m3 winner has no measured peak and no series of its own; an
     * fp8 K/V cache's needs its Q's type's peak) */
    if (fat_dtype_has_peak(r->p.dtype)) has[r->matrix_op][fat_dtype_peak(r->p.dtype)] = 1;
  }
  if (xlo > xhi) return 0;
  for (size_t k = 0; k < N_ROOF_OPS; k++)
    for (int t = 0; t < FAT_PEAK_DTYPES; t++) {
      const double peak = d->peak[roof_ops[k]][t];
      if (!(peak > 0)) continue;
      top = fmax(top, peak);
      yhi = fmax(yhi, peak / TERA);
      /* The ridge point, where the bandwidth line meets the roof. */
      if (d->bandwidth > 0) xlo = fmin(xlo, peak / d->bandwidth);
    }
  if (d->bandwidth > 0) ylo = fmin(ylo, d->bandwidth * xlo / LOG_PAD / TERA);
  double lxlo = log10(xlo / LOG_PAD), lxhi = log10(xhi * LOG_PAD);
  double lylo = log10(ylo / LOG_PAD), lyhi = log10(yhi * LOG_PAD);
  svg_open(f, b, "Roofline of the forward winners");
  log_ticks(f, b, lxlo, lxhi, 1);
  log_ticks(f, b, lylo, lyhi, 0);
  /* Each instruction's peaks, one roof where its two dtypes' are as good as equal. */
  for (size_t k = 0; k < N_ROOF_OPS; k++) {
    const fat_matrix_op op = roof_ops[k];
    const double *peak = d->peak[op];
    const int merged = peak[0] > 0 && peak[1] > 0 && fabs(peak[0] - peak[1]) <= ROOF_MERGE * peak[0];
    for (int t = 0; t < FAT_PEAK_DTYPES; t++) {
      if (!(peak[t] > 0) || (t == FAT_BF16 && merged)) continue;
      double ridge = d->bandwidth > 0 ? log10(peak[t] / d->bandwidth) : lxlo;
      double py = lerp(log10(peak[t] / TERA), lylo, lyhi, b->y0, b->y1);
      fprintf(f,
              "<path class=\"roof\" data-roof=\"%s\" stroke=\"%s\" stroke-width=\"1.5\" "
              "stroke-dasharray=\"%s\" fill=\"none\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>\n",
              fat_matrix_op_name(op), op_colour[op], dtype_dash[t],
              lerp(fmax(ridge, lxlo), lxlo, lxhi, b->x0, b->x1), py, b->x1, py);
      char label[96];
      if (merged)
        snprintf(label, sizeof label, "%s peak %.0f TFLOP/s (fp16, bf16)", fat_matrix_op_name(op),
                 peak[t] / TERA);
      else
        snprintf(label, sizeof label, "%s %s peak %.0f TFLOP/s", fat_matrix_op_name(op),
                 fat_dtype_name((fat_dtype)t), peak[t] / TERA);
      legend_entry(f, b, ly + row++ * LEGEND_ROW, op_colour[op], dtype_dash[t], 1.5, -1, label);
      (*roofs)++;
    }
  }
  if (d->bandwidth > 0) {
    double x_end = top > 0 ? fmin(log10(top / d->bandwidth), lxhi) : lxhi;
    fprintf(f,
            "<path class=\"roof\" data-roof=\"copy\" stroke=\"" INK "\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"2 2\" fill=\"none\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>\n",
            b->x0, lerp(log10(d->bandwidth * pow(10, lxlo) / TERA), lylo, lyhi, b->y0, b->y1),
            lerp(x_end, lxlo, lxhi, b->x0, b->x1),
            lerp(log10(d->bandwidth * pow(10, x_end) / TERA), lylo, lyhi, b->y0, b->y1));
    char label[96];
    snprintf(label, sizeof label, "copy bandwidth %.2f TB/s", d->bandwidth / TERA);
    legend_entry(f, b, ly + row++ * LEGEND_ROW, INK, "2 2", 1.5, -1, label);
    (*roofs)++;
  }
  /* Winners whose instruction's peak nobody measured here (a database from
   * before the wgmma ceiling): said, rather than a roof drawn. */
  for (size_t k = 0; k < N_ROOF_OPS; k++) {
    const fat_matrix_op op = roof_ops[k];
    const int any_peak = d->peak[op][0] > 0 || d->peak[op][1] > 0;
    char label[96];
    for (int t = 0; t < FAT_PEAK_DTYPES; t++) {
      if (!has[op][t] || d->peak[op][t] > 0) continue;
      if (any_peak)
        snprintf(label, sizeof label, "%s %s peak: not measured", fat_matrix_op_name(op),
                 fat_dtype_name((fat_dtype)t));
      else
        snprintf(label, sizeof label, "%s peak: not measured", fat_matrix_op_name(op));
      legend_entry(f, b, ly + row++ * LEGEND_ROW, INK, NULL, 0, -1, label);
      if (!any_peak) break;
    }
  }
  ly += LEGEND_GAP;
  /* A series for each instruction and dtype with a peak: the fp8 K/V
   * caches' beside their Q's types'. */
  for (int op = FAT_MATRIX_OTHER; op <= FAT_MATRIX_WGMMA; op++)
    for (int t = 0; t < FAT_N_DTYPES; t++) {
      if (!fat_dtype_has_peak((fat_dtype)t)) continue;
      int any = 0;
      for (size_t i = 0; i < d->n; i++) {
        const rp_problem *r = &d->probs[i];
        fat_io_model m;
        if (!on_roofline(r, &m) || (int)r->matrix_op != op || (int)r->p.dtype != t) continue;
        if (!any++)
          fprintf(f, "<g class=\"series\" data-series=\"%s %s\">\n",
                  fat_matrix_op_name((fat_matrix_op)op), fat_dtype_name((fat_dtype)t));
        marker_open(f, dtype_shape[t], lerp(log10(m.intensity), lxlo, lxhi, b->x0, b->x1),
                    lerp(log10(winner_tflops(r)), lylo, lyhi, b->y0, b->y1), op_colour[op]);
        fputs("><title>", f);
        put_escaped(f, r->summary.winner);
        fprintf(f, ": seqlen %d×%d, %.0f FLOP/byte, %.1f TFLOP/s</title>%s\n", r->p.seqlen_q,
                r->p.seqlen_k, m.intensity, winner_tflops(r), MARKER_END(dtype_shape[t]));
      }
      if (!any) continue;
      fputs("</g>\n", f);
      char label[64];
      snprintf(label, sizeof label, "%s winners, %s", fat_matrix_op_name((fat_matrix_op)op),
               fat_dtype_name((fat_dtype)t));
      legend_entry(f, b, ly + row++ * LEGEND_ROW, op_colour[op], NULL, 0, dtype_shape[t], label);
      drawn++;
    }
  axis_labels(f, b, "FLOPs per lower-bound byte (log scale)", "TFLOP/s (log scale)");
  fputs("</svg>\n", f);
  return drawn;
}

/* ------------------------------------------------------------- summary */

/* The ratio of series K's median to fatune's over a set of problems: the
 * geometric mean, the range and how many problems had both. */
typedef struct ratio_stats {
  double log_sum, lo, hi;
  int n;
} ratio_stats;

/* A peer's time is divided by fatune's from the benchmark that timed the
 * peer, where it stored one (one harness for both); the default
 * configuration's and the baseline's, and a peer's without it, by the
 * tuner's median of the winner. */
static double yardstick_ms(const rp_problem *r, int k) {
  return k >= S_FIRST_EXTERNAL && !isnan(r->bench_ms) ? r->bench_ms : r->ms[S_WINNER];
}

static void ratio_add(ratio_stats *s, const rp_problem *r, int k) {
  if (!r->has_winner || isnan(r->ms[k]) || isnan(yardstick_ms(r, k))) return;
  double q = r->ms[k] / yardstick_ms(r, k);
  if (!s->n++) s->lo = s->hi = q;
  s->lo = fmin(s->lo, q);
  s->hi = fmax(s->hi, q);
  s->log_sum += log(q);
}

static void ratio_cell(FILE *f, const ratio_stats *s) {
  if (!s->n) fputs("<td>–</td>", f);
  else if (s->n == 1) fprintf(f, "<td>%.2f× <span class=\"range\">(1)</span></td>", s->lo);
  else
    fprintf(f, "<td>%.2f× <span class=\"range\">(%.2f–%.2f, %d)</span></td>",
            exp(s->log_sum / s->n), s->lo, s->hi, s->n);
}

/* The comparisons the summary has columns for: every peer, then fatune's
 * default configuration and the materialising baseline, each where the
 * database holds any timing of it. */
static int summary_columns(const rp_data *d, int *cols) {
  int n = 0;
  for (int k = S_FIRST_EXTERNAL; k < d->n_series; k++) cols[n++] = k;
  for (int k = S_DEFAULT; k <= S_MATERIALIZE; k++) {
    int any = 0;
    for (size_t i = 0; i < d->n && !any; i++) any = d->probs[i].has_winner && !isnan(d->probs[i].ms[k]);
    if (any) cols[n++] = k;
  }
  return n;
}

static int summary_has_default(const rp_data *d) {
  for (size_t i = 0; i < d->n; i++)
    if (d->probs[i].has_winner && !isnan(d->probs[i].summary.default_ms)) return 1;
  return 0;
}

/* Is problem I the first of its chart? */
static int first_of_chart(const rp_data *d, size_t i) {
  if (kind_of(&d->probs[i].p) == CK_NONE) return 0;
  for (size_t j = 0; j < i; j++)
    if (same_chart(&d->probs[j].p, &d->probs[i].p)) return 0;
  return 1;
}

/* The sections, in page order: each direction's square problems, local
 * windows, then decoding. */
static const struct {
  fat_direction direction;
  enum chart_kind kind;
  const char *id, *title;
} sections[] = {
    {FAT_FWD, CK_SQUARE, "forward", "Forward"},
    {FAT_FWD, CK_LOCAL, "forward-local", "Forward, local windows"},
    {FAT_FWD, CK_DECODE, "forward-decoding", "Forward decoding (memory-bound)"},
    {FAT_BWD, CK_SQUARE, "backward", "Backward"},
    {FAT_BWD, CK_LOCAL, "backward-local", "Backward, local windows"},
    {FAT_BWD, CK_DECODE, "backward-decoding", "Backward decoding (memory-bound)"},
};
#define N_SECTIONS (sizeof sections / sizeof sections[0])

static int in_section(const fat_problem *p, size_t s) {
  return p->direction == sections[s].direction && kind_of(p) == sections[s].kind;
}

static void summary_table(FILE *f, const rp_data *d) {
  int cols[MAX_SERIES], n_cols = summary_columns(d, cols), peers = d->n_series - S_FIRST_EXTERNAL;
  ratio_stats all[MAX_SERIES];
  memset(all, 0, sizeof all);
  if (!peers)
    fputs("<p><strong>No peer timings are stored for this GPU</strong>, so nothing here compares "
          "fatune with another implementation: bench/bench_sdpa.py --db stores PyTorch SDPA's "
          "beside a tuning database's winners, bench/store_peers.py those of a benchmark's "
          "JSON.</p>\n",
          f);
  fputs("<table class=\"summary\">\n<thead><tr><th class=\"shape\">Chart</th><th>Problems</th>"
        "<th>fatune, best</th>",
        f);
  for (int c = 0; c < n_cols; c++) {
    fputs("<th>vs ", f);
    put_escaped(f, d->series[cols[c]]);
    fputs("</th>", f);
  }
  fputs("</tr></thead>\n<tbody>\n", f);
  for (size_t s = 0; s < N_SECTIONS; s++)
    for (size_t i = 0; i < d->n; i++) {
      const fat_problem *key = &d->probs[i].p;
      if (!in_section(key, s) || !first_of_chart(d, i)) continue;
      ratio_stats row[MAX_SERIES];
      memset(row, 0, sizeof row);
      int n = 0;
      double best = 0;
      for (size_t j = i; j < d->n; j++) {
        const rp_problem *r = &d->probs[j];
        if (!same_chart(&r->p, key) || !r->has_winner) continue;
        n++;
        best = fmax(best, metric(r, S_WINNER));
        for (int c = 0; c < n_cols; c++) {
          ratio_add(&row[c], r, cols[c]);
          ratio_add(&all[c], r, cols[c]);
        }
      }
      if (!n) continue;
      fputs("<tr><td class=\"shape\"><a href=\"#", f);
      chart_id(f, key);
      fputs("\">", f);
      chart_title(f, key);
      fprintf(f, "</a></td><td>%d</td><td>%.1f %s</td>", n, best, unit_of(kind_of(key)));
      for (int c = 0; c < n_cols; c++) ratio_cell(f, &row[c]);
      fputs("</tr>\n", f);
    }
  fputs("<tr class=\"total\"><td class=\"shape\">Every charted problem</td><td></td><td></td>", f);
  for (int c = 0; c < n_cols; c++) ratio_cell(f, &all[c]);
  fputs("</tr>\n</tbody>\n</table>\n", f);
  fputs("<p class=\"note\">Each comparison is the geometric mean, over the chart's problems "
        "measured by both, of the other implementation's median time over fatune's winner's: "
        "above 1, fatune is faster; in brackets the range and the number of problems. A peer's "
        "time is divided by fatune's own from the benchmark run that timed the peer, where that "
        "run stored it, so that both come from one harness (the charts draw the tuner's "
        "medians, device events with L2 flushed before every repetition); the default "
        "configuration's and the baseline's by the tuner's.</p>\n",
        f);
}

/* ------------------------------------------------------------- the page */

static const char *const page_style =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,"
    "sans-serif;color:#1a1a1a;background:#fff;max-width:1180px;margin:2em auto;padding:0 1em;"
    "line-height:1.45}\n"
    "h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;margin:1.8em 0 .4em;"
    "border-bottom:1px solid #ddd}h3{font-size:1em;margin:.2em 0}\n"
    ".meta{color:#555;margin-top:0}\n"
    "nav.toc ol{margin:.2em 0;padding-left:1.4em}nav.toc li{margin:.1em 0}\n"
    "nav.toc ol ol{display:flex;flex-wrap:wrap;gap:.2em 1.2em;padding-left:0;list-style:none;"
    "font-size:.92em}\n"
    "a{color:#0a5ea8}\n"
    ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(500px,1fr));gap:.6em 1.4em}\n"
    "figure{margin:0 0 1em 0}figcaption{color:#444;font-size:.9em}\n"
    "svg.chart{width:100%;height:auto;display:block;font-size:12px}\n"
    "figure.wide svg.chart{max-width:900px}\n"
    "svg .plot{fill:#fff;stroke:#888;stroke-width:1}svg .grid{stroke:#e3e3e3;stroke-width:1}\n"
    "svg .tick{fill:#444;font-size:11px}svg .axis-label{fill:#222;font-size:12px}\n"
    "svg .legend-text{fill:#222;font-size:11px}\n"
    "table{border-collapse:collapse;width:100%;font-size:.82em}\n"
    "th,td{border-bottom:1px solid #ddd;padding:.3em .45em;text-align:right;white-space:nowrap}\n"
    "th{white-space:normal;vertical-align:bottom}\n"
    "th{background:#f2f2f2}td.name,th.name,td.shape,th.shape{text-align:left}\n"
    "table.summary{font-size:.9em}.range{color:#666;font-size:.9em;display:block}"
    "tr.total td{font-weight:600}\n"
    "td.name{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.92em;"
    "white-space:normal;text-align:left}\n"
    ".note{color:#444;font-size:.92em}\n"
    "@page{margin:14mm}\n"
    "@media print{body{max-width:none;margin:0;font-size:10pt}nav.toc{display:none}"
    "figure,tr{break-inside:avoid;page-break-inside:avoid}"
    "h2,h3{break-after:avoid;page-break-after:avoid}.grid{grid-template-columns:1fr 1fr}"
    "figure{margin-bottom:.8em}th{background:#eee;-webkit-print-color-adjust:exact;"
    "print-color-adjust:exact}table{font-size:8pt}}\n";

static void winners_table(FILE *f, const rp_data *d, int *n_rows) {
  const int any_default = summary_has_default(d);
  fputs("<table>\n<thead><tr><th class=\"shape\">Problem</th><th class=\"shape\">Batch × "
        "heads, seqlen</th><th class=\"name\">Winner</th><th>Median ms</th><th>TFLOP/s</th>",
        f);
  if (any_default) fputs("<th>Default ms</th><th>Over default</th>", f);
  fputs("<th>Worst rel. L2</th><th>Worst max |err|</th><th>Passed / failed</th></tr></thead>\n"
        "<tbody>\n",
        f);
  for (size_t i = 0; i < d->n; i++) {
    const rp_problem *r = &d->probs[i];
    if (!r->has_winner) continue;
    const fat_db_summary_row *s = &r->summary;
    fputs("<tr><td class=\"shape\">", f);
    problem_short(f, &r->p);
    fprintf(f, "</td><td class=\"shape\">%d × %d", r->p.batch, r->p.heads);
    if (r->p.heads_k != r->p.heads) fprintf(f, " (K/V %d)", r->p.heads_k);
    fprintf(f, ", %d", r->p.seqlen_q);
    if (r->p.seqlen_k != r->p.seqlen_q) fprintf(f, "×%d", r->p.seqlen_k);
    fputs("</td><td class=\"name\">", f);
    put_name(f, s->winner);
    fprintf(f, "</td><td>%.4g</td><td>%.1f</td>", s->median_ms, winner_tflops(r));
    if (any_default) {
      if (isnan(s->default_ms)) fputs("<td>–</td><td>–</td>", f);
      else fprintf(f, "<td>%.4g</td><td>%.2f×</td>", s->default_ms, s->default_ms / s->median_ms);
    }
    if (isnan(s->rel_l2)) fputs("<td>–</td>", f);
    else fprintf(f, "<td>%.2e</td>", s->rel_l2);
    if (isnan(s->max_abs)) fputs("<td>–</td>", f);
    else fprintf(f, "<td>%.2e</td>", s->max_abs);
    fprintf(f, "<td>%d / %d</td></tr>\n", s->n_passing, s->n_failed);
    (*n_rows)++;
  }
  fputs("</tbody>\n</table>\n", f);
}

/* The section's largest value of any drawn series: its charts' y axis. */
static double section_max(const rp_data *d, size_t s) {
  double ymax = 0;
  for (size_t i = 0; i < d->n; i++) {
    if (!in_section(&d->probs[i].p, s)) continue;
    for (int k = 0; k < d->n_series; k++) {
      double v = drawn_source(k) ? metric(&d->probs[i], k) : NAN;
      if (!isnan(v)) ymax = fmax(ymax, v);
    }
  }
  return ymax;
}

static int section_has_chart(const rp_data *d, size_t s) {
  for (size_t i = 0; i < d->n; i++)
    if (in_section(&d->probs[i].p, s)) return 1;
  return 0;
}

static void contents(FILE *f, const rp_data *d, int any_winner) {
  fputs("<nav class=\"toc\" aria-label=\"Contents\">\n<h2>Contents</h2>\n<ol>\n"
        "<li><a href=\"#summary\">Summary: speed-ups against the peers</a></li>\n",
        f);
  for (size_t s = 0; s < N_SECTIONS; s++) {
    if (!section_has_chart(d, s)) continue;
    fprintf(f, "<li><a href=\"#%s\">%s</a><ol>", sections[s].id, sections[s].title);
    for (size_t i = 0; i < d->n; i++) {
      if (!in_section(&d->probs[i].p, s) || !first_of_chart(d, i)) continue;
      fputs("<li><a href=\"#", f);
      chart_id(f, &d->probs[i].p);
      fputs("\">", f);
      chart_title(f, &d->probs[i].p);
      fputs("</a></li>", f);
    }
    fputs("</ol></li>\n", f);
  }
  if (any_winner)
    fputs("<li><a href=\"#roofline\">Roofline</a></li>\n<li><a href=\"#winners\">Winners</a></li>\n",
          f);
  fputs("</ol>\n</nav>\n", f);
}

static const char *const section_caption[N_KINDS] = {
    "TFLOP/s against sequence length, by the FLOP convention above; higher is better. Colour: "
    "head dim (g: query heads per K/V head); line and marker: the implementation (SDPA: "
    "PyTorch's scaled_dot_product_attention pinned to one backend). The charts of a section "
    "share their y axis.",
    "TFLOP/s against sequence length, counting only the pairs inside each window; colour: the "
    "window (keys before, after a query).",
    "Decoding reads the whole K/V cache for few queries: bytes, not FLOPs, bound it. TB/s is "
    "the input/output lower bound (Q, K and V read once, O written once) over the time; k: the "
    "keys. The dotted line, where measured, is this GPU's device-to-device copy bandwidth, "
    "which reads and writes every byte: a kernel that mostly reads can pass it.",
};

int fat_report_write(fat_db *db, sqlite3_int64 gpu_id, FILE *f, fat_report_counts *counts,
                     char *err, size_t errlen) {
  rp_data d = {0};
  fat_report_counts c = {0};
  int ret = -1, any_winner = 0, varlen = 0, wgmma_winners = 0;
  if (fat_report_load(db, gpu_id, &d, err, errlen)) goto out;
  for (size_t i = 0; i < d.n; i++) {
    any_winner |= d.probs[i].has_winner;
    varlen += d.probs[i].has_winner && kind_of(&d.probs[i].p) == CK_NONE;
    wgmma_winners |= d.probs[i].has_winner && d.probs[i].matrix_op == FAT_MATRIX_WGMMA;
  }

  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>fatune "
        "report: ",
        f);
  put_escaped(f, d.gpu);
  fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>fatune report: ", page_style);
  put_escaped(f, d.gpu);
  fputs("</h1>\n<p class=\"meta\">", f);
  put_escaped(f, d.gpu_detail);
  fputs(". Generated by fatune " FAT_VERSION ".</p>\n<p class=\"meta\">Measured ceilings: ", f);
  if (d.bandwidth > 0) fprintf(f, "copy bandwidth %.2f TB/s", d.bandwidth / TERA);
  else fputs("copy bandwidth not measured", f);
  for (int t = 0; t < FAT_PEAK_DTYPES; t++) {
    if (d.peak[FAT_MATRIX_MMA_SYNC][t] > 0)
      fprintf(f, "; %s mma.sync peak %.0f TFLOP/s", fat_dtype_name((fat_dtype)t),
              d.peak[FAT_MATRIX_MMA_SYNC][t] / TERA);
    else fprintf(f, "; %s mma.sync peak not measured", fat_dtype_name((fat_dtype)t));
  }
  /* wgmma's where measured, or where a winner issues it (Hopper's). */
  if (wgmma_winners || d.peak[FAT_MATRIX_WGMMA][FAT_FP16] > 0 || d.peak[FAT_MATRIX_WGMMA][FAT_BF16] > 0)
    for (int t = 0; t < FAT_PEAK_DTYPES; t++) {
      if (!(d.peak[FAT_MATRIX_WGMMA][t] > 0)) {
        fprintf(f, "; %s wgmma peak not measured", fat_dtype_name((fat_dtype)t));
        continue;
      }
      fprintf(f, "; %s wgmma peak %.0f TFLOP/s", fat_dtype_name((fat_dtype)t),
              d.peak[FAT_MATRIX_WGMMA][t] / TERA);
      if (d.wgmma_rs_peak[t] > 0) fprintf(f, " (A in registers %.0f)", d.wgmma_rs_peak[t] / TERA);
    }
  /* e4m3 has no measured peak (fat_dtype_has_peak): its winners have no roof. */
  int peakless = 0;
  for (size_t i = 0; i < d.n && !peakless; i++)
    peakless = d.probs[i].has_winner && !fat_dtype_has_peak(d.probs[i].p.dtype);
  if (peakless) fputs("; no e4m3 peak is measured: e4m3 winners are placed against none (not on the roofline)", f);
  fputs(".</p>\n", f);
  fputs("<p class=\"note\">FLOPs follow the FlashAttention papers: forward 4·batch·heads·"
        "seqlen_q·seqlen_k·head dim, halved for causal when seqlen_q = seqlen_k (backward 2.5× "
        "forward). Times are medians of many runs on this GPU; every fatune kernel shown passed "
        "the reference check here.</p>\n",
        f);
  if (!d.n) {
    fputs("<p><strong>No results for this GPU yet</strong>: run fatune on it.</p>\n", f);
  } else {
    contents(f, &d, any_winner);
    fputs("<h2 id=\"summary\">Summary: speed-ups against the peers</h2>\n", f);
    summary_table(f, &d);
  }

  for (size_t s = 0; s < N_SECTIONS; s++) {
    if (!section_has_chart(&d, s)) continue;
    section_keys keys = {.n = 0};
    for (size_t i = 0; i < d.n; i++)
      if (in_section(&d.probs[i].p, s) && key_index(&d, &keys, &d.probs[i].p) < 0 &&
          keys.n < MAX_KEYS)
        keys.rep[keys.n++] = i;
    double ymax = section_max(&d, s);
    fprintf(f, "<h2 id=\"%s\">%s</h2>\n<p class=\"note\">%s</p>\n<div class=\"grid\">\n",
            sections[s].id, sections[s].title, section_caption[sections[s].kind]);
    for (size_t i = 0; i < d.n; i++) {
      if (!in_section(&d.probs[i].p, s) || !first_of_chart(&d, i)) continue;
      fputs("<figure id=\"", f);
      chart_id(f, &d.probs[i].p);
      fputs("\">\n<h3>", f);
      chart_title(f, &d.probs[i].p);
      fputs("</h3>\n", f);
      c.series += small_multiple(f, &d, i, &keys, ymax);
      c.charts++;
      fputs("</figure>\n", f);
    }
    fputs("</div>\n", f);
  }
  if (varlen)
    fprintf(f, "<p class=\"note\">Not charted: %d variable-length batch%s, each one profile of "
            "lengths rather than a curve; the <a href=\"#winners\">winners table</a> lists %s.</p>\n",
            varlen, varlen == 1 ? "" : "es", varlen == 1 ? "it" : "them");
  if (d.dropped_sources)
    fprintf(f, "<p class=\"note\">%d further external source(s) not drawn: at most %d series per "
            "chart.</p>\n", d.dropped_sources, MAX_SERIES);

  if (any_winner) {
    int roofs = 0;
    fputs("<h2 id=\"roofline\">Roofline</h2>\n<figure class=\"wide\">\n", f);
    c.series += roofline_chart(f, &d, &roofs);
    c.charts++;
    fputs("<figcaption>Each forward winner at its arithmetic intensity over the input/output lower "
          "bound (Q, K and V read once, O written once), coloured by its family's matrix "
          "instruction. That bound is not FlashAttention's traffic: a tiled kernel re-reads K "
          "and V for every query tile, so its real intensity is lower than drawn. ",
          f);
    if (roofs)
      fputs("The roofs are this GPU's measured copy bandwidth and the measured peak of each "
            "matrix instruction, in the colour of the winners that issue it: mma.sync "
            "m16n8k16's, and on Hopper wgmma m64n256k16's with both operands in shared memory "
            "(the forward's S = Q·Kᵀ). A winner's distance under its own roof is the fraction of "
            "its instruction's peak it leaves unused.",
            f);
    else
      fputs("No ceilings were measured on this GPU, so no roofs are drawn.", f);
    if (wgmma_winners &&
        !(d.peak[FAT_MATRIX_WGMMA][FAT_FP16] > 0 || d.peak[FAT_MATRIX_WGMMA][FAT_BF16] > 0))
      fputs(" No wgmma peak is stored for this GPU (a database from before the tuner measured "
            "it on Hopper: a tuning run there measures it), so its wgmma winners have no roof of "
            "their own.",
            f);
    fputs("</figcaption>\n</figure>\n<h2 id=\"winners\">Winners</h2>\n", f);
    winners_table(f, &d, &c.winners);
    fputs("<p class=\"note\">Errors are the worst of the live reference checks (fp64 "
          "accumulation) of the winner on this GPU. ", f);
    fputs(summary_has_default(&d) ? "Over default: the default configuration's median over the "
                                    "winner's.</p>\n"
                                  : "No timing of the default configuration is stored (a shipped "
                                    "table keeps the winning timings only).</p>\n",
          f);
  }
  fputs("</body>\n</html>\n", f);
  if (ferror(f)) {
    snprintf(err, errlen, "cannot write the report: %s", strerror(errno));
    goto out;
  }
  if (counts) *counts = c;
  ret = 0;
out:
  free(d.probs);
  return ret;
}

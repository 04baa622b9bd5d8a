/* SPDX-License-Identifier: MIT */
/* `fatune report`: writes one GPU's results (report_data.c reads them from
 * the database) as a single HTML page with inline SVG charts (report.h says
 * what is on it). Nothing on the page reaches the network: no fonts,
 * scripts, images or links outside the file; inline SVG in HTML needs no
 * namespace URL. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "explain.h"
#include "options.h"
#include "cli_args.h"
#include "report.h"
#include "report_int.h"
#include "results_db.h"
#include "tables_path.h"

#define ERRLEN 512
#define TERA 1e12
#define MS_PER_S 1e3

/* Chart geometry, in SVG user units (the page scales the SVG to fit). */
#define CHART_W 760.0
#define CHART_H 340.0
#define MARGIN_L 60.0
#define MARGIN_R 230.0 /* the legend sits right of the plot */
#define MARGIN_T 16.0
#define MARGIN_B 46.0
#define Y_TICKS 5          /* about this many labelled steps on a linear axis */
#define Y_HEADROOM 1.08    /* the top tick clears the highest point by this factor */
#define LOG_PAD 1.6        /* a log axis extends this factor beyond the data */
#define MARKER_R 3.5
#define LEGEND_ROW 18.0

typedef struct series_style {
  const char *color;
  const char *dash;   /* stroke-dasharray: tells series apart on a grey printout */
  double width;
} series_style;

/* Okabe-Ito colours, distinguishable with colour-blindness; dashes for print. */
static const series_style styles[MAX_SERIES] = {
    {"#0072B2", "none", 2.6},    {"#E69F00", "7 4", 2.0},   {"#D55E00", "2 3", 2.0},
    {"#009E73", "9 3 2 3", 2.0}, {"#CC79A7", "1 2", 2.0},   {"#56B4E9", "4 2", 2.0},
    {"#000000", "12 4", 1.5},    {"#999999", "3 6", 1.5},
};

/* ------------------------------------------------------------ writing */

static double tflops_of(const rp_problem *r, int k) {
  return fat_problem_flops(&r->p) / (r->ms[k] / MS_PER_S) / TERA;
}

static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) switch (*s) {
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '&': fputs("&amp;", f); break;
      case '"': fputs("&quot;", f); break;
      default: fputc(*s, f);
    }
}

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

/* A chart draws one group: the same direction, dtype, mask (and local
 * window), head dim and query heads per K/V head, dense or variable-length
 * profiles, and either square problems (seqlen_k = seqlen_q) or one fixed
 * seqlen_k (decoding shapes), against seqlen_q (a profile's longest). */
static int keys_of(const fat_problem *p) { return p->seqlen_k == p->seqlen_q ? 0 : p->seqlen_k; }

static int same_group(const fat_problem *a, const fat_problem *b) {
  return a->direction == b->direction && a->dtype == b->dtype && a->mask == b->mask &&
         a->window_left == b->window_left && a->window_right == b->window_right &&
         a->head_dim == b->head_dim && a->heads / a->heads_k == b->heads / b->heads_k &&
         (a->lengths.n > 0) == (b->lengths.n > 0) && keys_of(a) == keys_of(b);
}

/* The mask in words: "no mask", "causal", "local window 256,0" (the keys
 * seen before and after a query, as --window takes them). */
static void mask_words(FILE *f, const fat_problem *p) {
  if (p->mask == FAT_MASK_LOCAL)
    fprintf(f, "local window %d,%d", p->window_left, p->window_right);
  else
    fputs(p->mask == FAT_MASK_CAUSAL ? "causal" : "no mask", f);
}

static void group_title(FILE *f, const fat_problem *p) {
  fprintf(f, "%s, %s, head dim %d, ", p->direction == FAT_FWD ? "forward" : "backward",
          fat_dtype_name(p->dtype), p->head_dim);
  mask_words(f, p);
  if (p->heads_k == 1 && p->heads > 1) fputs(", one K/V head", f);
  else if (p->heads_k != p->heads) fprintf(f, ", %d query heads per K/V head", p->heads / p->heads_k);
  if (keys_of(p)) fprintf(f, ", %d keys", p->seqlen_k);
  if (p->lengths.n) fputs(", variable lengths (by the longest sequence)", f);
}

/* The group in few words, for legends and table cells: "fp16 d128 causal",
 * "bf16 d128 local w256,0". */
static void group_short(FILE *f, const fat_problem *p) {
  fprintf(f, "%s%s d%d%s", p->direction == FAT_BWD ? "bwd " : "", fat_dtype_name(p->dtype),
          p->head_dim, p->mask == FAT_MASK_CAUSAL ? " causal" : "");
  if (p->mask == FAT_MASK_LOCAL) fprintf(f, " local w%d,%d", p->window_left, p->window_right);
  if (p->heads_k != p->heads) fprintf(f, " g%d", p->heads / p->heads_k);
  if (keys_of(p)) fprintf(f, " k%d", p->seqlen_k);
  if (p->lengths.n) fputs(" varlen", f);
}

/* A step of 1, 2 or 5 times a power of ten giving about Y_TICKS steps to HI. */
static double nice_step(double hi) {
  double raw = hi / Y_TICKS, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

/* Linear map of V from [LO, HI] onto [P0, P1]. */
static double lerp(double v, double lo, double hi, double p0, double p1) {
  return hi > lo ? p0 + (v - lo) / (hi - lo) * (p1 - p0) : (p0 + p1) / 2;
}

static const double plot_x0 = MARGIN_L, plot_x1 = CHART_W - MARGIN_R;
static const double plot_y0 = CHART_H - MARGIN_B, plot_y1 = MARGIN_T;

static void svg_open(FILE *f, const char *label_prefix, const fat_problem *p) {
  fprintf(f, "<svg class=\"chart\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"",
          CHART_W, CHART_H);
  fputs(label_prefix, f);
  if (p) group_title(f, p);
  fputs("\">\n", f);
  fprintf(f, "<rect class=\"plot\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n",
          plot_x0, plot_y1, plot_x1 - plot_x0, plot_y0 - plot_y1);
}

static void axis_labels(FILE *f, const char *x_label, const char *y_label) {
  fprintf(f, "<text class=\"axis-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
          (plot_x0 + plot_x1) / 2, CHART_H - 8, x_label);
  fprintf(f,
          "<text class=\"axis-label\" transform=\"translate(14 %.1f) rotate(-90)\" "
          "text-anchor=\"middle\">%s</text>\n",
          (plot_y0 + plot_y1) / 2, y_label);
}

/* Marker shapes of the roofline's groups: points of different head dims sit
 * on the same spot (the lower bound's intensity is seqlen/2 whatever the
 * head dim), so shapes, not only colours, tell them apart. */
enum marker_shape { MARK_DOT, MARK_RING, MARK_SQUARE, N_MARKS };

/* Opens a marker element at (X, Y); the caller closes it with "/>" or adds
 * a <title> and the closing tag MARKER_END(shape). */
static void marker_open(FILE *f, enum marker_shape shape, double x, double y, const char *color) {
  if (shape == MARK_SQUARE)
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"",
            x - MARKER_R, y - MARKER_R, 2 * MARKER_R, 2 * MARKER_R, color);
  else if (shape == MARK_RING)
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"none\" stroke=\"%s\" "
            "stroke-width=\"2\"", x, y, MARKER_R * 1.7, color);
  else
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\"", x, y, MARKER_R, color);
}
#define MARKER_END(shape) ((shape) == MARK_SQUARE ? "</rect>" : "</circle>")

/* One legend row: a line sample (unless LINE is 0) with a marker of SHAPE
 * (unless SHAPE is negative), then LABEL. */
static void legend_entry(FILE *f, int row, const series_style *st, const char *label, int line,
                         int shape) {
  double y = MARGIN_T + 10 + row * LEGEND_ROW, x = plot_x1 + 12;
  if (line)
    fprintf(f,
            "<path class=\"legend\" d=\"M%.1f,%.1f L%.1f,%.1f\" stroke=\"%s\" "
            "stroke-width=\"%.1f\" stroke-dasharray=\"%s\" fill=\"none\"/>",
            x, y, x + 26, y, st->color, st->width, st->dash);
  if (shape >= 0) {
    marker_open(f, (enum marker_shape)shape, x + 13, y, st->color);
    fputs("/>", f);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"legend-text\">", x + 32, y + 4);
  put_escaped(f, label);
  fputs("</text>\n", f);
}

/* TFLOP/s against seqlen_q for the problems [FIRST, END) of one group:
 * log2 x axis (the buckets are powers of two), linear y from 0. */
static int throughput_chart(FILE *f, const rp_data *d, size_t first, size_t end) {
  double xmin = INFINITY, xmax = -INFINITY, ymax = 0;
  int drawn = 0, row = 0;
  for (size_t i = first; i < end; i++) {
    double x = log2(d->probs[i].p.seqlen_q);
    xmin = fmin(xmin, x);
    xmax = fmax(xmax, x);
    for (int k = 0; k < d->n_series; k++)
      if (!isnan(d->probs[i].ms[k])) ymax = fmax(ymax, tflops_of(&d->probs[i], k));
  }
  if (!(ymax > 0)) ymax = 1; /* medians are positive; this only keeps the axis finite */
  /* Half a bucket of air at each end; a lone bucket gets one on each side. */
  xmin -= 0.5;
  xmax += 0.5;
  double step = nice_step(ymax * Y_HEADROOM), ytop = ceil(ymax * Y_HEADROOM / step) * step;
  if (ytop <= 0) ytop = step = 1;
  svg_open(f, "TFLOP/s against sequence length: ", &d->probs[first].p);
  for (double y = 0; y <= ytop + step / 2; y += step) {
    double py = lerp(y, 0, ytop, plot_y0, plot_y1);
    fprintf(f, "<path class=\"grid\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>", plot_x0, py, plot_x1, py);
    fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
            plot_x0 - 6, py + 4, y);
  }
  int last_tick = -1;
  for (size_t i = first; i < end; i++) {
    int s = d->probs[i].p.seqlen_q;
    if (s == last_tick) continue;
    last_tick = s;
    double px = lerp(log2(s), xmin, xmax, plot_x0, plot_x1);
    fprintf(f, "<path class=\"grid\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>", px, plot_y0, px, plot_y1);
    fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", px,
            plot_y0 + 16, s);
  }
  for (int k = 0; k < d->n_series; k++) {
    const series_style *st = &styles[k];
    int n = 0;
    for (size_t i = first; i < end; i++) n += !isnan(d->probs[i].ms[k]);
    if (!n) continue; /* a series is drawn only where it has data */
    fprintf(f,
            "<path class=\"series\" data-series=\"%d\" stroke=\"%s\" stroke-width=\"%.1f\" "
            "stroke-dasharray=\"%s\" fill=\"none\" d=\"",
            k, st->color, st->width, st->dash);
    int pen = 0;
    for (size_t i = first; i < end; i++) {
      if (isnan(d->probs[i].ms[k])) continue;
      fprintf(f, "%s%.1f,%.1f", pen++ ? " L" : "M",
              lerp(log2(d->probs[i].p.seqlen_q), xmin, xmax, plot_x0, plot_x1),
              lerp(tflops_of(&d->probs[i], k), 0, ytop, plot_y0, plot_y1));
    }
    fputs("\"/>\n", f);
    for (size_t i = first; i < end; i++) {
      const rp_problem *r = &d->probs[i];
      if (isnan(r->ms[k])) continue;
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\"><title>",
              lerp(log2(r->p.seqlen_q), xmin, xmax, plot_x0, plot_x1),
              lerp(tflops_of(r, k), 0, ytop, plot_y0, plot_y1), MARKER_R, st->color);
      put_escaped(f, d->series[k]);
      fprintf(f, ": batch %d, heads %d, seqlen %d×%d: %.1f TFLOP/s (%.4g ms)</title></circle>\n",
              r->p.batch, r->p.heads, r->p.seqlen_q, r->p.seqlen_k, tflops_of(r, k), r->ms[k]);
    }
    legend_entry(f, row++, st, d->series[k], 1, MARK_DOT);
    drawn++;
  }
  axis_labels(f, "sequence length (queries; log scale)", "TFLOP/s");
  fputs("</svg>\n", f);
  return drawn;
}

/* Log-10 axis ticks at 1, 2 and 5 times powers of ten within [LO, HI]
 * (both log10 values). HORIZONTAL: ticks along x, else along y. */
static void log_ticks(FILE *f, double lo, double hi, int horizontal) {
  for (int e = (int)floor(lo); e <= (int)ceil(hi); e++) {
    static const double mult[] = {1, 2, 5};
    for (int m = 0; m < 3; m++) {
      double v = mult[m] * pow(10.0, e), lv = log10(v);
      if (lv < lo || lv > hi) continue;
      /* Only decades are labelled when the range spans more than two. */
      int label = m == 0 || hi - lo <= 2;
      if (horizontal) {
        double px = lerp(lv, lo, hi, plot_x0, plot_x1);
        fprintf(f, "<path class=\"grid\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>", px, plot_y0, px, plot_y1);
        if (label)
          fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>",
                  px, plot_y0 + 16, v);
      } else {
        double py = lerp(lv, lo, hi, plot_y0, plot_y1);
        fprintf(f, "<path class=\"grid\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>", plot_x0, py, plot_x1, py);
        if (label)
          fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>",
                  plot_x0 - 6, py + 4, v);
      }
      fputc('\n', f);
    }
  }
}

/* Each winner at (FLOPs / lower-bound bytes, TFLOP/s), log-log, under the
 * measured bandwidth line and compute roofs. Returns the roof lines drawn. */
static int roofline_chart(FILE *f, const rp_data *d) {
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  char err[ERRLEN];
  int groups = 0, row = 0, roofs = 0;
  for (size_t i = 0; i < d->n; i++) {
    const rp_problem *r = &d->probs[i];
    fat_io_model m;
    /* The lower bound and its intensity are the forward pass's, of a dense
     * batch (the IO model has no packed one). */
    if (!r->has_winner || r->p.direction != FAT_FWD || r->p.lengths.n ||
        fat_io_model_compute(&r->p, &m, err, sizeof err))
      continue;
    xlo = fmin(xlo, m.intensity);
    xhi = fmax(xhi, m.intensity);
    ylo = fmin(ylo, tflops_of(r, S_WINNER));
    yhi = fmax(yhi, tflops_of(r, S_WINNER));
  }
  if (xlo > xhi) return 0;
  for (int t = 0; t < 2; t++)
    if (d->peak[t] > 0) {
      yhi = fmax(yhi, d->peak[t] / TERA);
      /* The ridge point, where the bandwidth line meets the roof. */
      if (d->bandwidth > 0) xlo = fmin(xlo, d->peak[t] / d->bandwidth);
    }
  if (d->bandwidth > 0) ylo = fmin(ylo, d->bandwidth * xlo / LOG_PAD / TERA);
  double lxlo = log10(xlo / LOG_PAD), lxhi = log10(xhi * LOG_PAD);
  double lylo = log10(ylo / LOG_PAD), lyhi = log10(yhi * LOG_PAD);
  svg_open(f, "Roofline of the winners", NULL);
  log_ticks(f, lxlo, lxhi, 1);
  log_ticks(f, lylo, lyhi, 0);
  /* Roofs: bandwidth line up to each ridge, then flat. Equal peaks draw once. */
  for (int t = 0; t < 2; t++) {
    double peak = d->peak[t] / TERA;
    if (peak <= 0 || (t == FAT_BF16 && d->peak[FAT_FP16] == d->peak[FAT_BF16])) continue;
    double ridge = d->bandwidth > 0 ? log10(d->peak[t] / d->bandwidth) : lxlo;
    fprintf(f,
            "<path class=\"roof\" stroke=\"#444\" stroke-width=\"1.5\" stroke-dasharray=\"%s\" "
            "fill=\"none\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>\n",
            t ? "6 3" : "none", lerp(fmax(ridge, lxlo), lxlo, lxhi, plot_x0, plot_x1),
            lerp(log10(peak), lylo, lyhi, plot_y0, plot_y1), plot_x1,
            lerp(log10(peak), lylo, lyhi, plot_y0, plot_y1));
    char label[96];
    if (d->peak[FAT_FP16] == d->peak[FAT_BF16])
      snprintf(label, sizeof label, "matrix peak %.0f TFLOP/s", peak);
    else
      snprintf(label, sizeof label, "%s peak %.0f TFLOP/s", fat_dtype_name((fat_dtype)t), peak);
    series_style st = {"#444", t ? "6 3" : "none", 1.5};
    legend_entry(f, row++, &st, label, 1, -1);
    roofs++;
  }
  if (d->bandwidth > 0) {
    double peak = fmax(d->peak[0], d->peak[1]);
    double x_end = peak > 0 ? fmin(log10(peak / d->bandwidth), lxhi) : lxhi;
    fprintf(f,
            "<path class=\"roof\" stroke=\"#444\" stroke-width=\"1.5\" stroke-dasharray=\"2 2\" "
            "fill=\"none\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>\n",
            plot_x0, lerp(log10(d->bandwidth * pow(10, lxlo) / TERA), lylo, lyhi, plot_y0, plot_y1),
            lerp(x_end, lxlo, lxhi, plot_x0, plot_x1),
            lerp(log10(d->bandwidth * pow(10, x_end) / TERA), lylo, lyhi, plot_y0, plot_y1));
    char label[96];
    snprintf(label, sizeof label, "copy bandwidth %.2f TB/s", d->bandwidth / TERA);
    series_style st = {"#444", "2 2", 1.5};
    legend_entry(f, row++, &st, label, 1, -1);
    roofs++;
  }
  /* One colour per problem group, in chart order. */
  for (size_t i = 0; i < d->n;) {
    size_t end = i;
    while (end < d->n && same_group(&d->probs[end].p, &d->probs[i].p)) end++;
    const series_style *st = &styles[groups % MAX_SERIES];
    enum marker_shape shape = (enum marker_shape)(groups % N_MARKS);
    int any = 0;
    for (size_t j = i; j < end; j++) {
      const rp_problem *r = &d->probs[j];
      fat_io_model m;
      if (!r->has_winner || r->p.direction != FAT_FWD || r->p.lengths.n ||
          fat_io_model_compute(&r->p, &m, err, sizeof err))
        continue;
      any = 1;
      marker_open(f, shape, lerp(log10(m.intensity), lxlo, lxhi, plot_x0, plot_x1),
                  lerp(log10(tflops_of(r, S_WINNER)), lylo, lyhi, plot_y0, plot_y1), st->color);
      fputs("><title>", f);
      put_escaped(f, r->summary.winner);
      fprintf(f, ": seqlen %d×%d, %.0f FLOP/byte, %.1f TFLOP/s</title>%s\n", r->p.seqlen_q,
              r->p.seqlen_k, m.intensity, tflops_of(r, S_WINNER), MARKER_END(shape));
    }
    if (any) {
      char label[96];
      FILE *mf = fmemopen(label, sizeof label, "w");
      if (mf) {
        group_short(mf, &d->probs[i].p);
        fclose(mf);
      } else {
        label[0] = '\0';
      }
      legend_entry(f, row++, st, label, 0, shape);
      groups++;
    }
    i = end;
  }
  axis_labels(f, "FLOPs per lower-bound byte (log scale)", "TFLOP/s (log scale)");
  fputs("</svg>\n", f);
  return roofs;
}

static const char *const page_style =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,"
    "sans-serif;color:#1a1a1a;background:#fff;max-width:1000px;margin:2em auto;padding:0 1em;"
    "line-height:1.45}\n"
    "h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.15em;margin:1.6em 0 .4em}\n"
    ".meta{color:#555;margin-top:0}\n"
    "figure{margin:0 0 1.5em 0}figcaption{color:#444;font-size:.9em}\n"
    "svg.chart{width:100%;height:auto;max-width:860px;display:block;font-size:12px}\n"
    "svg .plot{fill:#fff;stroke:#888;stroke-width:1}svg .grid{stroke:#e3e3e3;stroke-width:1}\n"
    "svg .tick{fill:#444;font-size:11px}svg .axis-label{fill:#222;font-size:12px}\n"
    "svg .legend-text{fill:#222;font-size:11.5px}\n"
    "table{border-collapse:collapse;width:100%;font-size:.82em}\n"
    "th,td{border-bottom:1px solid #ddd;padding:.3em .45em;text-align:right;white-space:nowrap}\n"
    "th{white-space:normal;vertical-align:bottom}\n"
    "th{background:#f2f2f2}td.name,th.name,td.shape,th.shape{text-align:left}\n"
    "td.name{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.92em;"
    "white-space:normal;text-align:left}\n"
    ".note{color:#444;font-size:.92em}\n"
    "@page{margin:14mm}\n"
    "@media print{body{max-width:none;margin:0;font-size:10pt}"
    "figure,tr{break-inside:avoid;page-break-inside:avoid}"
    "h2{break-after:avoid;page-break-after:avoid}"
    "svg.chart{max-width:15.5cm}figure{margin-bottom:.8em}th{background:#eee;-webkit-print-color-adjust:exact;"
    "print-color-adjust:exact}table{font-size:8pt}}\n";

static void winners_table(FILE *f, const rp_data *d, int *n_rows) {
  fputs("<table>\n<thead><tr><th class=\"shape\">Problem</th><th class=\"shape\">Batch × "
        "heads, seqlen</th><th class=\"name\">Winner</th><th>Median ms</th>"
        "<th>TFLOP/s</th><th>Default ms</th><th>Over default</th>"
        "<th>Worst rel. L2</th><th>Worst max |err|</th><th>Passed / failed</th></tr></thead>\n"
        "<tbody>\n",
        f);
  for (size_t i = 0; i < d->n; i++) {
    const rp_problem *r = &d->probs[i];
    if (!r->has_winner) continue;
    const fat_db_summary_row *s = &r->summary;
    fputs("<tr><td class=\"shape\">", f);
    group_short(f, &r->p);
    fprintf(f, "</td><td class=\"shape\">%d × %d", r->p.batch, r->p.heads);
    if (r->p.heads_k != r->p.heads) fprintf(f, " (K/V %d)", r->p.heads_k);
    fprintf(f, ", %d", r->p.seqlen_q);
    if (r->p.seqlen_k != r->p.seqlen_q) fprintf(f, "×%d", r->p.seqlen_k);
    fputs("</td><td class=\"name\">", f);
    put_name(f, s->winner);
    fprintf(f, "</td><td>%.4g</td><td>%.1f</td>", s->median_ms, tflops_of(r, S_WINNER));
    if (isnan(s->default_ms)) fputs("<td>–</td><td>–</td>", f);
    else fprintf(f, "<td>%.4g</td><td>%.2f×</td>", s->default_ms, s->default_ms / s->median_ms);
    if (isnan(s->rel_l2)) fputs("<td>–</td>", f);
    else fprintf(f, "<td>%.2e</td>", s->rel_l2);
    if (isnan(s->max_abs)) fputs("<td>–</td>", f);
    else fprintf(f, "<td>%.2e</td>", s->max_abs);
    fprintf(f, "<td>%d / %d</td></tr>\n", s->n_passing, s->n_failed);
    (*n_rows)++;
  }
  fputs("</tbody>\n</table>\n", f);
}

int fat_report_write(fat_db *db, sqlite3_int64 gpu_id, const char *db_label, FILE *f,
                     fat_report_counts *counts, char *err, size_t errlen) {
  rp_data d = {0};
  fat_report_counts c = {0};
  int ret = -1, any_winner = 0;
  if (fat_report_load(db, gpu_id, &d, err, errlen)) goto out;
  for (size_t i = 0; i < d.n; i++) any_winner |= d.probs[i].has_winner;

  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>fatune "
        "report: ",
        f);
  put_escaped(f, d.gpu);
  fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>fatune report: ", page_style);
  put_escaped(f, d.gpu);
  fputs("</h1>\n<p class=\"meta\">", f);
  put_escaped(f, d.gpu_detail);
  fputs(". Database ", f);
  put_escaped(f, db_label);
  fputs(". Generated by fatune " FAT_VERSION ".</p>\n<p class=\"meta\">Measured ceilings: ", f);
  if (d.bandwidth > 0) fprintf(f, "copy bandwidth %.2f TB/s", d.bandwidth / TERA);
  else fputs("copy bandwidth not measured", f);
  for (int t = 0; t < 2; t++) {
    if (d.peak[t] > 0)
      fprintf(f, "; %s matrix peak %.0f TFLOP/s", fat_dtype_name((fat_dtype)t), d.peak[t] / TERA);
    else fprintf(f, "; %s matrix peak not measured", fat_dtype_name((fat_dtype)t));
  }
  fputs(".</p>\n", f);
  fputs("<p class=\"note\">FLOPs follow the FlashAttention papers: forward 4·batch·heads·"
        "seqlen_q·seqlen_k·head dim, halved for causal when seqlen_q = seqlen_k (backward 2.5× "
        "forward). Times are medians of many runs on this GPU; every fatune kernel shown passed "
        "the reference check here.</p>\n",
        f);
  if (!d.n) fputs("<p><strong>No results for this GPU yet</strong>: run fatune on it.</p>\n", f);

  for (size_t i = 0; i < d.n;) {
    size_t end = i;
    while (end < d.n && same_group(&d.probs[end].p, &d.probs[i].p)) end++;
    fputs("<figure>\n<h2>", f);
    group_title(f, &d.probs[i].p);
    fputs("</h2>\n", f);
    c.series += throughput_chart(f, &d, i, end);
    c.charts++;
    fputs("<figcaption>TFLOP/s against sequence length, by the FLOP convention above; higher is "
          "better. A series appears where it was measured.</figcaption>\n</figure>\n",
          f);
    i = end;
  }
  if (d.dropped_sources)
    fprintf(f, "<p class=\"note\">%d further external source(s) not drawn: at most %d series per "
            "chart.</p>\n", d.dropped_sources, MAX_SERIES);

  if (any_winner) {
    fputs("<figure>\n<h2>Roofline</h2>\n", f);
    roofline_chart(f, &d);
    c.charts++;
    fputs("<figcaption>Each winner at its arithmetic intensity over the input/output lower bound "
          "(Q, K and V read once, O written once). That bound is not FlashAttention's traffic: a "
          "tiled kernel re-reads K and V for every query tile, so its real intensity is lower "
          "than drawn. ",
          f);
    if (d.bandwidth > 0 || d.peak[0] > 0 || d.peak[1] > 0)
      fputs("The roofs are this GPU's measured copy bandwidth and matrix peak.", f);
    else
      fputs("No ceilings were measured on this GPU, so no roofs are drawn.", f);
    fputs("</figcaption>\n</figure>\n<h2>Winners</h2>\n", f);
    winners_table(f, &d, &c.winners);
    fputs("<p class=\"note\">Errors are the worst of the live reference checks (fp64 "
          "accumulation) of the winner on this GPU; speed-up is the default configuration's "
          "median over the winner's.</p>\n",
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

/* ---------------------------------------------------------- command */

const char *fat_report_usage(void) {
  return "Usage: fatune report [--db PATH] [-o FILE] [--gpu-name NAME]\n"
         "Writes one self-contained HTML page (inline SVG, nothing fetched from the network)\n"
         "of the results stored for one GPU: TFLOP/s against sequence length for the winner,\n"
         "the default configuration, the materialising baseline and PyTorch SDPA where\n"
         "stored; a roofline of the winners; and the winners with their verified error.\n"
         "\n"
         "  --db PATH          database (default $FATUNE_DB, else the cache folder's fatune.db)\n"
         "  -o, --output FILE  the page to write (default " FAT_REPORT_DEFAULT_OUTPUT ")\n"
         "  --gpu-name NAME    which GPU of the database (default: its only one)\n"
         "  -h, --help         this text\n"
         "\n" FAT_EXIT_STATUS_HELP;
}

int fat_report_run(int argc, char **argv, FILE *out, FILE *errf) {
  char err[ERRLEN] = "", db_path[4096] = "", output[4096] = FAT_REPORT_DEFAULT_OUTPUT,
       gpu_name[256] = "", gpu[256] = "", tmp[4200] = "";
  int seen_db = 0, seen_out = 0, seen_gpu = 0, status = FAT_EXIT_USAGE, found = 0;
  fat_db *db = NULL;
  FILE *f = NULL;
  sqlite3_int64 gpu_id = 0;
  fat_report_counts counts = {0};

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(fat_report_usage(), out);
      status = FAT_EXIT_OK;
      goto out;
    }
    char flag[32];
    const char *value = NULL, *eq = strchr(a, '=');
    if (eq && eq - a < (long)sizeof flag) {
      memcpy(flag, a, (size_t)(eq - a));
      flag[eq - a] = 0;
      value = eq + 1;
    } else {
      snprintf(flag, sizeof flag, "%s", a);
    }
    char *dst;
    size_t cap;
    int *seen;
    if (!strcmp(flag, "--db")) dst = db_path, cap = sizeof db_path, seen = &seen_db;
    else if (!strcmp(flag, "-o") || !strcmp(flag, "--output"))
      dst = output, cap = sizeof output, seen = &seen_out;
    else if (!strcmp(flag, "--gpu-name")) dst = gpu_name, cap = sizeof gpu_name, seen = &seen_gpu;
    else {
      fprintf(errf, "fatune report: unknown option '%s' (see fatune report --help)\n", a);
      goto out;
    }
    if (!value) {
      if (i + 1 >= argc) {
        fprintf(errf, "fatune report: %s needs a value\n", flag);
        goto out;
      }
      value = argv[++i];
    }
    if ((*seen)++) {
      fprintf(errf, "fatune report: %s given twice\n", flag);
      goto out;
    }
    if (!*value || strlen(value) >= cap) {
      fprintf(errf, "fatune report: %s: '%s' is %s\n", flag, value, *value ? "too long" : "empty");
      goto out;
    }
    strcpy(dst, value);
  }
  if (!seen_db && fat_options_default_db(db_path, sizeof db_path, 0, err, sizeof err)) {
    fprintf(errf, "fatune report: %s\n", err);
    goto out;
  }
  char user_db[sizeof db_path];
  snprintf(user_db, sizeof user_db, "%s", db_path);
  int shipped = 0;
  int rc = fat_results_db_open(db_path, sizeof db_path, seen_db, gpu_name, &db, &gpu_id, gpu, sizeof gpu, &found,
                               &shipped, err, sizeof err);
  if (rc) {
    fprintf(errf, "fatune report: %s\n", err);
    status = rc == 2 ? FAT_EXIT_USAGE : FAT_EXIT_FAILED;
    goto out;
  }
  if (!db) {
    fprintf(errf, "fatune report: --db: no database at %s%s\n", db_path, seen_db ? "" : " (and no shipped tables found)");
    goto out;
  }
  status = FAT_EXIT_FAILED;
  if (!found) {
    /* Point at what does have results. */
    char tables[4096], looked[4096];
    const int have_tables = !shipped && fat_tables_default(tables, sizeof tables, looked, sizeof looked) == 0;
    fprintf(errf, "fatune report: no GPU results in %s: run fatune on a GPU first%s%s%s\n", db_path,
            have_tables ? " (the shipped tables have some: fatune report --db " : "", have_tables ? tables : "",
            have_tables ? ")" : "");
    goto out;
  }
  if (shipped)
    fprintf(errf, "fatune report: no GPU results in %s: reporting the shipped tables, %s\n", user_db, db_path);
  /* Written aside and renamed: a failed run never leaves half a page. The
   * temporary is this process's own (O_EXCL | O_NOFOLLOW: a link planted
   * at its name is never followed), and an OUTPUT that is anything but a
   * regular file (a link, a FIFO, a device) is refused, not replaced. */
  struct stat st;
  if (lstat(output, &st) == 0 && !S_ISREG(st.st_mode)) {
    fprintf(errf, "fatune report: %s exists and is not a regular file: not replaced\n", output);
    goto out;
  }
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", output, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0 || !(f = fdopen(fd, "w"))) {
    fprintf(errf, "fatune report: cannot write %s: %s\n", tmp, strerror(errno));
    if (fd >= 0) {
      close(fd);
      unlink(tmp);
    }
    tmp[0] = '\0';
    goto out;
  }
  if (fat_report_write(db, gpu_id, db_path, f, &counts, err, sizeof err)) {
    fprintf(errf, "fatune report: %s\n", err);
    goto out;
  }
  int close_rc = fclose(f);
  f = NULL;
  if (close_rc) {
    fprintf(errf, "fatune report: cannot write %s: %s\n", tmp, strerror(errno));
    goto out;
  }
  if (rename(tmp, output)) {
    fprintf(errf, "fatune report: cannot rename %s to %s: %s\n", tmp, output, strerror(errno));
    goto out;
  }
  tmp[0] = '\0';
  fprintf(out, "wrote %s: %s, %d chart%s, %d winner%s\n", output, gpu, counts.charts,
          counts.charts == 1 ? "" : "s", counts.winners, counts.winners == 1 ? "" : "s");
  status = FAT_EXIT_OK;
out:
  if (f) fclose(f);
  if (tmp[0]) unlink(tmp);
  fat_db_close(db);
  return status;
}

int fat_report_main(int argc, char **argv) {
  return fat_exit_flushed(stdout, "fatune report", fat_report_run(argc, argv, stdout, stderr));
}

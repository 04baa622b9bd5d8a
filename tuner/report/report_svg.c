/* SPDX-License-Identifier: MIT */
/* The report's SVG drawing primitives, which know nothing of attention or
 * of the data: the HTML escaping all text on the page goes through, and the
 * axes (linear steps, log ticks, labels), markers and legend rows of a chart
 * laid out in a plot_box. report.c draws its charts with them; report_int.h
 * declares them. */
#include <math.h>
#include <stdio.h>
#include "report_int.h"

#define Y_TICKS 5          /* about this many labelled steps on a linear axis */
#define MARKER_R 3.2

void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) switch (*s) {
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '&': fputs("&amp;", f); break;
      case '"': fputs("&quot;", f); break;
      default: fputc(*s, f);
    }
}

/* ------------------------------------------------------------- axes */

/* A step of 1, 2 or 5 times a power of ten giving about Y_TICKS steps to HI. */
double nice_step(double hi) {
  double raw = hi / Y_TICKS, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

/* Linear map of V from [LO, HI] onto [P0, P1]. */
double lerp(double v, double lo, double hi, double p0, double p1) {
  return hi > lo ? p0 + (v - lo) / (hi - lo) * (p1 - p0) : (p0 + p1) / 2;
}

void svg_open(FILE *f, const plot_box *b, const char *label) {
  fprintf(f, "<svg class=\"chart\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"", b->w,
          b->h);
  put_escaped(f, label);
  fputs("\">\n", f);
  fprintf(f, "<rect class=\"plot\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n",
          b->x0, b->y1, b->x1 - b->x0, b->y0 - b->y1);
}

void axis_labels(FILE *f, const plot_box *b, const char *x_label, const char *y_label) {
  fprintf(f, "<text class=\"axis-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
          (b->x0 + b->x1) / 2, b->h - 8, x_label);
  fprintf(f,
          "<text class=\"axis-label\" transform=\"translate(13 %.1f) rotate(-90)\" "
          "text-anchor=\"middle\">%s</text>\n",
          (b->y0 + b->y1) / 2, y_label);
}

/* Opens a marker element at (X, Y); the caller closes it with "/>" or adds
 * a <title> and the closing tag MARKER_END(shape). */
void marker_open(FILE *f, enum marker_shape shape, double x, double y, const char *color) {
  const double r = MARKER_R;
  switch (shape) {
    case MARK_SQUARE:
      fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"", x - r,
              y - r, 2 * r, 2 * r, color);
      break;
    case MARK_DIAMOND:
      fprintf(f, "<path d=\"M%.1f,%.1f L%.1f,%.1f L%.1f,%.1f L%.1f,%.1f Z\" fill=\"%s\"", x,
              y - 1.4 * r, x + 1.4 * r, y, x, y + 1.4 * r, x - 1.4 * r, y, color);
      break;
    case MARK_RING:
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"#fff\" stroke=\"%s\" "
              "stroke-width=\"1.8\"", x, y, r * 1.3, color);
      break;
    default:
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\"", x, y, r, color);
  }
}

/* One legend row at Y right of box B: a line sample (unless DASH is NULL)
 * with a marker of SHAPE (unless SHAPE is negative), then LABEL. */
void legend_entry(FILE *f, const plot_box *b, double y, const char *color, const char *dash,
                  double width, int shape, const char *label) {
  double x = b->x1 + 10;
  if (dash)
    fprintf(f,
            "<path class=\"legend\" d=\"M%.1f,%.1f L%.1f,%.1f\" stroke=\"%s\" "
            "stroke-width=\"%.1f\" stroke-dasharray=\"%s\" fill=\"none\"/>",
            x, y, x + 24, y, color, width, dash);
  if (shape >= 0) {
    marker_open(f, (enum marker_shape)shape, x + 12, y, color);
    fputs("/>", f);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"legend-text\">", x + 30, y + 4);
  put_escaped(f, label);
  fputs("</text>\n", f);
}

/* Log-10 axis ticks at 1, 2 and 5 times powers of ten within [LO, HI]
 * (both log10 values). HORIZONTAL: ticks along x, else along y. */
void log_ticks(FILE *f, const plot_box *b, double lo, double hi, int horizontal) {
  for (int e = (int)floor(lo); e <= (int)ceil(hi); e++) {
    static const double mult[] = {1, 2, 5};
    for (int m = 0; m < 3; m++) {
      double v = mult[m] * pow(10.0, e), lv = log10(v);
      if (lv < lo || lv > hi) continue;
      /* Only decades are labelled when the range spans more than two. */
      int label = m == 0 || hi - lo <= 2;
      if (horizontal) {
        double px = lerp(lv, lo, hi, b->x0, b->x1);
        fprintf(f, "<path class=\"grid\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>", px, b->y0, px, b->y1);
        if (label)
          fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>",
                  px, b->y0 + 16, v);
      } else {
        double py = lerp(lv, lo, hi, b->y0, b->y1);
        fprintf(f, "<path class=\"grid\" d=\"M%.1f,%.1f L%.1f,%.1f\"/>", b->x0, py, b->x1, py);
        if (label)
          fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>",
                  b->x0 - 6, py + 4, v);
      }
      fputc('\n', f);
    }
  }
}

/* SPDX-License-Identifier: MIT */
/* Proves `fatune report` turns a database into one self-contained page: on a
 * fixture built here (a GPU with measured ceilings; fp16 problems at two head
 * dims and three seqlens with winners, default configurations, a
 * materialising baseline, PyTorch SDPA timings and, at one head dim, fatune's
 * own time from the same benchmark; bf16 causal problems at two head dims
 * with only a winner, one of a wgmma family; decoding shapes of both masks;
 * a variant that failed its check) the page has balanced html/body/svg
 * elements, contents whose every link is an anchor of the page, a summary
 * of speed-ups against the peers first with its exact values, one <svg> per
 * direction, dtype and mask (decoding in TB/s) plus the roofline, at least
 * two series in every chart and a non-empty path for exactly the series
 * that have data, the roofs (each instruction's peak in the colour of its
 * winners; a wgmma peak said missing until one is measured, then drawn:
 * a second fixture), every winner (never the failed variant) in the
 * table with its TFLOP/s, escaped text, no path of the machine and nothing
 * that reaches the network; without peers or defaults it says so and draws
 * no empty columns; a grid of decoding shapes gets a chart per cache layout,
 * each as tall as its legend. Bad usage is refused with exact messages and
 * leaves no file behind. Files live in a
 * fresh /tmp folder. For tests/test_report_render.sh, FATUNE_KEEP_DB=PATH
 * builds the fixture database at PATH and leaves it there, and
 * FATUNE_KEEP_REPORT=PATH copies the page to PATH. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "explain.h"
#include "report.h"
#include "check.h"

#define ERRLEN 512
#define TERA 1e12
#define TOKENS 16384 /* the tuner's buckets: batch = TOKENS / seqlen */
#define HIDDEN 2048  /* heads = HIDDEN / head dim */
#define FIXTURE_GPU "NVIDIA Fixture GPU"

static char tmpdir[] = "/tmp/fatune_test_report.XXXXXX";
static char db_path[256], html_path[256];

/* ------------------------------------------------------------- fixture */

typedef struct fixture {
  fat_db *db;
  sqlite3_int64 gpu;
  const char *family;  /* the winners' family; NULL: mma80 */
  int n_variants;      /* makes every variant's hash distinct */
  char winners[16][128];
  int n_winners;
} fixture;

static int fx_variant(fixture *fx, const fat_problem *p, const char *name, const char *family,
                      int is_default, sqlite3_int64 *id) {
  fat_variant v = {.name = (char *)name, .family = (char *)family,
                   .params = "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4", .entry = "fat_fwd",
                   .source = "// fixture source", .direction = p->direction, .dtype = p->dtype,
                   .mask = p->mask, .head_dim = p->head_dim, .block_m = 64, .threads = 128,
                   .smem_bytes = 0, .is_default = is_default};
  snprintf(v.hash, sizeof v.hash, "%064x", ++fx->n_variants);
  return fat_db_put_variant(fx->db, &v, id);
}

/* A variant of P checked (PASSED or not) and timed at the median that gives
 * TFLOPS; *VID and *TID (may be NULL) get its ids. */
static int fx_timed(fixture *fx, const fat_problem *p, sqlite3_int64 pid, const char *name,
                    const char *family, int is_default, int passed, double tflops,
                    sqlite3_int64 *vid_out, sqlite3_int64 *tid_out) {
  sqlite3_int64 vid, tid;
  double ms = fat_problem_flops(p) / (tflops * TERA) * 1e3;
  fat_check c = {.batch = 1, .heads = 2, .seqlen_q = 256, .seqlen_k = 256,
                 .rel_l2 = passed ? 1.5e-3 : 0.2, .max_abs = passed ? 3.1e-3 : 0.9,
                 .lse_max_abs = 1e-4, .nonfinite = 0, .passed = passed, .reason = ""};
  snprintf(c.reason, sizeof c.reason, "%s", passed ? "ok" : "rel_l2 0.2 > 0.002");
  fat_timing t = {.reps = 50, .median_ms = ms, .min_ms = ms, .max_ms = ms, .p10_ms = ms,
                  .p90_ms = ms, .tflops = tflops, .sm_clock_mhz = 1755};
  if (fx_variant(fx, p, name, family, is_default, &vid) ||
      fat_db_put_check(fx->db, vid, fx->gpu, pid, &c) ||
      fat_db_put_timing(fx->db, vid, fx->gpu, pid, &t, &tid))
    return -1;
  if (vid_out) *vid_out = vid;
  if (tid_out) *tid_out = tid;
  return 0;
}

/* One problem with everything: tuned variants (the fastest wins), the
 * default, a failed variant that would have been fastest, the materialising
 * baseline and the SDPA backends (and CUSTOM, when not NULL). Throughputs
 * grow with SEQ so the curves have a shape; a decoding shape's winner
 * moves its lower bound's bytes at DECODE_BW. */
#define DECODE_BW 4.5e12
static int fx_problem_shape(fixture *fx, fat_dtype dtype, fat_mask mask, int d, int seq,
                            int seq_k, int group, int full, const char *custom) {
  fat_problem p = {.direction = FAT_FWD, .dtype = dtype, .mask = mask, .head_dim = d,
                   .batch = TOKENS / seq, .heads = HIDDEN / d, .heads_k = HIDDEN / d / group,
                   .seqlen_q = seq, .seqlen_k = seq_k};
  sqlite3_int64 pid, vid, tid;
  char name[128], base[64];
  double scale = log2(seq) / 12.0; /* 1 at seqlen 4096 */
  const char *family = fx->family ? fx->family : "mma80";
  double winner_tflops = 300.0 * scale;
  if (seq_k != seq) {
    fat_io_model m;
    char err[ERRLEN];
    if (fat_io_model_compute(&p, &m, err, sizeof err)) return -1;
    winner_tflops = fat_problem_flops(&p) / ((double)m.lower_bound_bytes / DECODE_BW) / TERA;
  }
  snprintf(base, sizeof base, "fwd.%s.%s.d%d.%s", family, fat_dtype_name(dtype), d,
           fat_mask_name(mask));
  if (fat_db_put_problem(fx->db, &p, &pid)) return -1;
  snprintf(name, sizeof name, "%s.m128n64w4s2.s%d", base, seq);
  if (fx_timed(fx, &p, pid, name, family, 0, 1, winner_tflops, &vid, &tid) ||
      fat_db_set_winner(fx->db, fx->gpu, pid, vid, tid))
    return -1;
  snprintf(fx->winners[fx->n_winners++], sizeof fx->winners[0], "%s", name);
  if (!full) return 0;
  snprintf(name, sizeof name, "%s.m64n64w4s2.s%d", base, seq);
  if (fx_timed(fx, &p, pid, name, "mma80", 1, 1, 200.0 * scale, NULL, NULL)) return -1;
  snprintf(name, sizeof name, "%s.m128n128w8s3.broken.s%d", base, seq);
  if (fx_timed(fx, &p, pid, name, "mma80", 0, 0, 900.0, NULL, NULL)) return -1;
  snprintf(name, sizeof name, "fwd.materialize.%s.d%d.%s.s%d", fat_dtype_name(dtype), d,
           fat_mask_name(mask), seq);
  if (fx_timed(fx, &p, pid, name, FAT_FAMILY_MATERIALIZE, 0, 1, 60.0, NULL, NULL)) return -1;
  double flops = fat_problem_flops(&p);
  if (fat_db_put_external_timing(fx->db, fx->gpu, pid, FAT_EXTERNAL_SDPA_FLASH,
                                 flops / (280e12 * scale) * 1e3, 280.0 * scale) ||
      fat_db_put_external_timing(fx->db, fx->gpu, pid, FAT_EXTERNAL_SDPA_CUDNN,
                                 flops / (310e12 * scale) * 1e3, 310.0 * scale))
    return -1;
  if (custom && fat_db_put_external_timing(fx->db, fx->gpu, pid, custom,
                                           flops / (100e12) * 1e3, 100.0))
    return -1;
  /* Head dim 128's benchmark timed fatune too, 10 % slower than the tuner
   * did: its peers are divided by that time. */
  if (d == 128 && fat_db_put_external_timing(fx->db, fx->gpu, pid, FAT_EXTERNAL_FATUNE_BENCH,
                                             flops / (300e12 * scale) * 1e3 * 1.1,
                                             300.0 * scale / 1.1))
    return -1;
  return 0;
}

static int fx_problem(fixture *fx, fat_dtype dtype, fat_mask mask, int d, int seq, int full,
                      const char *custom) {
  return fx_problem_shape(fx, dtype, mask, d, seq, seq, 1, full, custom);
}

static int build_fixture(fixture *fx, const char *path) {
  char err[ERRLEN];
  static const int seqlens[] = {1024, 2048, 4096};
  fat_gpu_info g = {.name = FIXTURE_GPU, .cc_major = 9, .cc_minor = 0, .sm_count = 132,
                    .driver_version = 13000, .nvrtc_major = 13, .nvrtc_minor = 0};
  if (fat_db_open(path, &fx->db, err, sizeof err)) {
    fprintf(stderr, "fixture: %s\n", err);
    return -1;
  }
  if (fat_db_put_gpu(fx->db, &g, &fx->gpu) ||
      fat_db_put_ceiling(fx->db, fx->gpu, FAT_CEILING_COPY_BANDWIDTH, 4.0e12,
                         FAT_CEILING_UNIT_BANDWIDTH) ||
      fat_db_put_ceiling(fx->db, fx->gpu, FAT_CEILING_PEAK_FP16, 800e12, FAT_CEILING_UNIT_FLOPS) ||
      fat_db_put_ceiling(fx->db, fx->gpu, FAT_CEILING_PEAK_BF16, 800e12, FAT_CEILING_UNIT_FLOPS))
    goto fail;
  for (int i = 0; i < 3; i++)
    if (fx_problem(fx, FAT_FP16, FAT_MASK_NONE, 64, seqlens[i], 1, "custom<kernel>") ||
        fx_problem(fx, FAT_FP16, FAT_MASK_NONE, 128, seqlens[i], 1, NULL))
      goto fail;
  if (fx_problem(fx, FAT_BF16, FAT_MASK_CAUSAL, 128, 2048, 0, NULL)) goto fail;
  /* A Hopper family's winner: the roofline's wgmma series. */
  fx->family = "wgmma90";
  if (fx_problem(fx, FAT_BF16, FAT_MASK_CAUSAL, 64, 2048, 0, NULL)) goto fail;
  fx->family = NULL;
  /* Decoding shapes with grouped-query heads: a chart of their own, not
   * points among the square problems of the same key, both masks in it. */
  if (fx_problem_shape(fx, FAT_BF16, FAT_MASK_CAUSAL, 128, 16, 65536, 4, 0, NULL) ||
      fx_problem_shape(fx, FAT_BF16, FAT_MASK_NONE, 128, 1, 65536, 4, 0, NULL) ||
      fx_problem_shape(fx, FAT_BF16, FAT_MASK_NONE, 128, 16, 65536, 4, 0, NULL))
    goto fail;
  return 0;
fail:
  fprintf(stderr, "fixture: %s\n", fat_db_errmsg(fx->db));
  return -1;
}

/* ------------------------------------------------------------ helpers */

static void remove_db(const char *path) {
  char p[300];
  remove(path);
  snprintf(p, sizeof p, "%s-wal", path);
  remove(p);
  snprintf(p, sizeof p, "%s-shm", path);
  remove(p);
}


static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + strlen(needle), needle)) n++;
  return n;
}

/* Series paths in [FROM, TO) whose d attribute starts "M<number>,<number>". */
static int series_paths(const char *from, const char *to, const char *cls) {
  char open[64];
  int n = 0;
  snprintf(open, sizeof open, "<path class=\"%s\"", cls);
  for (const char *p = strstr(from, open); p && p < to; p = strstr(p + 1, open)) {
    const char *d = strstr(p, " d=\"M"), *end = strchr(p, '>');
    if (d && d < end && isdigit((unsigned char)d[5]) && strchr(d + 5, ',') < end) n++;
  }
  return n;
}

typedef struct run_result {
  int status;
  char *out, *err;
} run_result;

static run_result run_report(int argc, char **argv) {
  run_result r = {0};
  size_t n_out = 0, n_err = 0;
  FILE *out = open_memstream(&r.out, &n_out), *err = open_memstream(&r.err, &n_err);
  r.status = fat_report_run(argc, argv, out, err);
  fclose(out);
  fclose(err);
  return r;
}

static void run_free(run_result *r) {
  free(r->out);
  free(r->err);
}

/* -------------------------------------------------------------- tests */

static void test_report_of_fixture(void) {
  fixture fx = {0};
  char *html = NULL, want[600], tmp[300];
  REQUIRE(build_fixture(&fx, db_path) == 0);
  fat_db_close(fx.db);
  fx.db = NULL;

  char *argv[] = {"report", "--db", db_path, "-o", html_path};
  run_result r = run_report(5, argv);
  CHECK_INT(r.status, 0);
  snprintf(want, sizeof want, "wrote %s: " FIXTURE_GPU ", 4 charts, 11 winners\n", html_path);
  CHECK_STR(r.out, want);
  CHECK_STR(r.err, "");
  run_free(&r);
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", html_path, (long)getpid());
  CHECK(access(tmp, F_OK) != 0);
  REQUIRE((html = check_read_file(html_path)) != NULL);
  const char *keep = getenv("FATUNE_KEEP_REPORT");
  if (keep && *keep) {
    FILE *k = fopen(keep, "w");
    if (k) {
      fputs(html, k);
      fclose(k);
    }
  }

  /* Well-formed enough: one document, balanced containers. */
  CHECK(!strncmp(html, "<!DOCTYPE html>\n<html lang=\"en\">", 31));
  CHECK_INT(count(html, "<html"), 1);
  CHECK_INT(count(html, "</html>"), 1);
  CHECK_INT(count(html, "<body>"), 1);
  CHECK_INT(count(html, "</body>"), 1);
  CHECK_INT(count(html, "<head>"), 1);
  CHECK_INT(count(html, "</head>"), 1);
  CHECK_INT(count(html, "<table"), 2); /* the summary and the winners */
  CHECK_INT(count(html, "</table>"), 2);
  /* bf16 causal, fp16 no mask, bf16 decoding, the roofline. */
  CHECK_INT(count(html, "<svg"), 4);
  CHECK_INT(count(html, "</svg>"), 4);
  CHECK_INT(count(html, "<figure"), 4);
  CHECK_INT(count(html, "</figure>"), 4);
  CHECK(strstr(html, "@media print") != NULL);

  /* Nothing reaches the network: no URL, no script, and every link an
   * anchor of the page itself. Nor does the page name the machine's paths. */
  CHECK(strstr(html, "http") == NULL);
  CHECK(strstr(html, "src=") == NULL);
  CHECK(strstr(html, "<script") == NULL);
  CHECK(strstr(html, "@import") == NULL);
  CHECK(strstr(html, "url(") == NULL);
  CHECK(strstr(html, tmpdir) == NULL);
  CHECK(strstr(html, "report.db") == NULL);
  int links = 0;
  for (const char *h = strstr(html, "href=\""); h; h = strstr(h + 1, "href=\"")) {
    char id[80], target[100];
    const char *end = strchr(h + 6, '"');
    CHECK(h[6] == '#' && end && end - h - 7 < (long)sizeof id);
    if (h[6] != '#' || !end || end - h - 7 >= (long)sizeof id) break;
    memcpy(id, h + 7, (size_t)(end - h - 7));
    id[end - h - 7] = '\0';
    snprintf(target, sizeof target, " id=\"%s\"", id);
    CHECK_INT(count(html, target), 1);
    links++;
  }
  /* Contents: the summary, two sections and their 2 + 1 charts, the
   * roofline and the winners; then the summary's 3 chart rows. */
  CHECK_INT(links, 1 + (1 + 2) + (1 + 1) + 2 + 3);
  CHECK(strstr(html, "<li><a href=\"#forward\">Forward</a><ol><li><a href=\"#fwd-bf16-causal\">"
                     "Forward, bf16, causal</a></li><li><a href=\"#fwd-fp16-none\">Forward, fp16, "
                     "no mask</a></li></ol></li>") != NULL);
  /* The summary comes first, before any chart. */
  const char *summary = strstr(html, "<h2 id=\"summary\">");
  CHECK(summary != NULL && summary < strstr(html, "<svg"));

  /* The summary: per chart, each peer's, the default's and the baseline's
   * time over fatune's. fp16 no mask: FA2 at 280 and cuDNN at 310 TFLOP/s
   * where the winner is at 300 (d64: 1.07x, 0.97x), divided at d128 by
   * the benchmark's own fatune time, 1.1 x the tuner's (0.97x, 0.88x);
   * the custom source at 100 TFLOP/s (d64 only: 2.5, 2.75, 3); the default
   * at 200 (1.5x); the baseline at 60 (5 x 10/12, 11/12, 1). */
  CHECK(strstr(html,
                "<tr><th class=\"shape\">Chart</th><th>Problems</th><th>fatune, best</th><th>vs "
                "SDPA FlashAttention-2</th><th>vs SDPA cuDNN</th><th>vs custom&lt;kernel&gt;</th>"
                "<th>vs fatune default configuration</th><th>vs materialising baseline</th></tr>") !=
        NULL);
  static const char *const summary_rows[] = {
      "<tr><td class=\"shape\"><a href=\"#fwd-bf16-causal\">Forward, bf16, causal</a></td><td>2"
      "</td><td>275.0 TFLOP/s</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td></tr>",
      "<tr><td class=\"shape\"><a href=\"#fwd-fp16-none\">Forward, fp16, no mask</a></td><td>6"
      "</td><td>300.0 TFLOP/s</td><td>1.02× <span class=\"range\">(0.97–1.07, 6)</span></td>"
      "<td>0.92× <span class=\"range\">(0.88–0.97, 6)</span></td><td>2.74× <span class=\"range\">"
      "(2.50–3.00, 3)</span></td><td>1.50× <span class=\"range\">(1.50–1.50, 6)</span></td>"
      "<td>4.57× <span class=\"range\">(4.17–5.00, 6)</span></td></tr>",
      /* Decoding's best in bandwidth: the fixture's DECODE_BW. */
      "<tr><td class=\"shape\"><a href=\"#fwd-bf16-decoding\">Forward, bf16, decoding</a></td>"
      "<td>3</td><td>4.5 TB/s</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td></tr>",
      "<tr class=\"total\"><td class=\"shape\">Every charted problem</td><td></td><td></td>"
      "<td>1.02× <span class=\"range\">(0.97–1.07, 6)</span></td>",
  };
  for (size_t i = 0; i < sizeof summary_rows / sizeof summary_rows[0]; i++) {
    const char *row = strstr(html, summary_rows[i]);
    CHECK(row != NULL && (i == 0 || row > strstr(html, summary_rows[i - 1])));
  }
  CHECK(strstr(html, "No peer timings are stored") == NULL);

  /* Every chart of the fixture compares: at least two series each, and
   * exactly the series with data. bf16 causal: the d64 and d128 winners;
   * fp16 no mask: d64's winner, two SDPA backends and the custom source,
   * d128's winner and SDPA backends (fatune's own benchmark time is the
   * summary's, not a line); decoding: the causal and the unmasked winner;
   * the roofline: mma.sync fp16 and bf16, wgmma bf16. */
  static const int want_series[] = {2, 7, 2, 3};
  static const char *const titles[] = {
      "<figure id=\"fwd-bf16-causal\">\n<h3>Forward, bf16, causal</h3>",
      "<figure id=\"fwd-fp16-none\">\n<h3>Forward, fp16, no mask</h3>",
      "<figure id=\"fwd-bf16-decoding\">\n<h3>Forward, bf16, decoding</h3>",
      "<h2 id=\"roofline\">Roofline</h2>"};
  const char *svg = html;
  for (int c = 0; c < 4; c++) {
    svg = strstr(svg, "<svg");
    REQUIRE(svg != NULL);
    const char *end = strstr(svg, "</svg>");
    REQUIRE(end != NULL);
    const char *title = strstr(html, titles[c]);
    CHECK(title != NULL && title < svg && (c == 0 || title > strstr(html, titles[c - 1])));
    int series = count(svg, "class=\"series\"") - count(end, "class=\"series\"");
    CHECK(series >= 2);
    CHECK_INT(series, want_series[c]);
    if (c < 3) CHECK_INT(series_paths(svg, end, "series"), want_series[c]);
    svg = end;
  }
  /* Colour is the head dim, the same in every chart: d64 blue, d128 orange. */
  CHECK(strstr(html, "data-series=\"d64, fatune winner\" stroke=\"#0072B2\"") != NULL);
  CHECK(strstr(html, "data-series=\"d128, SDPA cuDNN\" stroke=\"#E69F00\"") != NULL);
  CHECK(strstr(html, "data-series=\"d64, custom&lt;kernel&gt;\"") != NULL);
  CHECK(strstr(html, "fatune_bench") == NULL);
  /* Decoding in bandwidth, under the copy bandwidth's line. */
  CHECK(strstr(html, "data-series=\"no mask d128 g4 k65536, fatune winner\"") != NULL);
  CHECK(strstr(html, "<title>fatune winner, causal d128 g4 k65536: batch 1024, heads 16 (K/V 4), "
                     "seqlen 16×65536: 4.5 TB/s") != NULL);
  const char *decode = strstr(html, "<figure id=\"fwd-bf16-decoding\">");
  REQUIRE(decode != NULL);
  CHECK_INT(series_paths(decode, strstr(decode, "</svg>"), "roof"), 1);
  /* The roofline: one mma.sync roof (fp16 and bf16 peaks equal) in the
   * colour of mma.sync's winners, the bandwidth line, a note for the wgmma
   * peak nobody measured, and a marker per forward winner, each with its
   * tooltip. */
  const char *roof = strstr(html, "<h2 id=\"roofline\">");
  REQUIRE(roof != NULL);
  const char *roof_end = strstr(roof, "</svg>");
  CHECK_INT(series_paths(roof, roof_end, "roof"), 2);
  CHECK(strstr(roof, ">mma.sync peak 800 TFLOP/s (fp16, bf16)</text>") < roof_end);
  CHECK(strstr(roof, "<path class=\"roof\" data-roof=\"mma.sync\" stroke=\"#0072B2\" "
                     "stroke-width=\"1.5\" stroke-dasharray=\"none\"") < roof_end);
  CHECK(strstr(roof, "data-roof=\"wgmma\"") == NULL);
  CHECK(strstr(roof, ">copy bandwidth 4.00 TB/s</text>") < roof_end);
  CHECK(strstr(roof, ">wgmma peak: not measured</text>") < roof_end);
  CHECK(strstr(roof, "No wgmma peak is stored for this GPU (a database from before the tuner "
                     "measured it on Hopper: a tuning run there measures it), so its wgmma "
                     "winners have no roof of their own.</figcaption>") != NULL);
  CHECK(strstr(roof, "<g class=\"series\" data-series=\"wgmma bf16\">") < roof_end);
  CHECK_INT(count(roof, "<title>") - count(roof_end, "<title>"), 11);

  /* The table: every winner, each once, and never the failed variant. */
  CHECK_INT(count(html, "<tr><td class=\"shape\">"), 11 + 3); /* and the summary's 3 charts */
  for (int i = 0; i < fx.n_winners; i++) {
    /* The name may break after each dot (<wbr>) but reads whole. */
    size_t n = (size_t)snprintf(want, sizeof want, "<td class=\"name\">");
    for (const char *c = fx.winners[i]; *c && n + 8 < sizeof want; c++)
      n += (size_t)snprintf(want + n, sizeof want - n, "%c%s", *c, *c == '.' ? "<wbr>" : "");
    snprintf(want + n, sizeof want - n, "</td>");
    CHECK_INT(count(html, want), 1);
  }
  CHECK(strstr(html, ".broken.") == NULL);
  /* fp16 d128 at 4096: 300 TFLOP/s, the default 200 (1.50×), passed 3 of
   * the 4 mma/materialise variants, 1 failed. */
  CHECK(strstr(html,
                "<td class=\"shape\">4 × 16, 4096</td><td class=\"name\">fwd.<wbr>mma80.<wbr>"
                "fp16.<wbr>d128.<wbr>none.<wbr>m128n64w4s2.<wbr>s4096</td><td>1.833</td><td>300.0</td>"
                "<td>2.749</td><td>1.50×</td><td>1.50e-03</td><td>3.10e-03</td><td>3 / 1</td>") !=
        NULL);
  /* The bf16 problem has no default: dashes, not numbers. */
  CHECK(strstr(html, "<td>–</td><td>–</td><td>1.50e-03</td>") != NULL);
  /* Text from the database is escaped. */
  CHECK(strstr(html, "custom&lt;kernel&gt;") != NULL);
  CHECK(strstr(html, "custom<kernel>") == NULL);
  CHECK(strstr(html, "Measured ceilings: copy bandwidth 4.00 TB/s; fp16 mma.sync peak 800 "
                     "TFLOP/s; bf16 mma.sync peak 800 TFLOP/s; fp16 wgmma peak not measured; "
                     "bf16 wgmma peak not measured.</p>") != NULL);
out:
  free(html);
  fat_db_close(fx.db);
}

/* Local windows are groups of their own, named with their window: two
 * lengths of one window share a chart, another window of the same shape
 * gets its own, and each table row says which window it is. */
static void test_local_windows(void) {
  fixture fx = {0};
  char path[300], err[ERRLEN], *html = NULL;
  size_t n_html = 0;
  fat_gpu_info g = {.name = FIXTURE_GPU, .cc_major = 9, .sm_count = 132, .driver_version = 13000,
                    .nvrtc_major = 13};
  static const struct {
    int seq, left, right;
  } problems[] = {{2048, 256, 0}, {4096, 256, 0}, {4096, 1024, -1}};
  snprintf(path, sizeof path, "%s/local.db", tmpdir);
  REQUIRE(fat_db_open(path, &fx.db, err, sizeof err) == 0);
  REQUIRE(fat_db_put_gpu(fx.db, &g, &fx.gpu) == 0);
  for (int i = 0; i < 3; i++) {
    fat_problem p = {.direction = FAT_FWD, .dtype = FAT_FP16, .mask = FAT_MASK_LOCAL,
                     .head_dim = 64, .batch = TOKENS / problems[i].seq, .heads = HIDDEN / 64,
                     .heads_k = HIDDEN / 64, .seqlen_q = problems[i].seq,
                     .seqlen_k = problems[i].seq, .window_left = problems[i].left,
                     .window_right = problems[i].right};
    sqlite3_int64 pid, vid, tid;
    char name[64];
    snprintf(name, sizeof name, "fwd.mma80.fp16.d64.local.w%d.s%d", problems[i].left,
             problems[i].seq);
    REQUIRE(fat_db_put_problem(fx.db, &p, &pid) == 0);
    REQUIRE(fx_timed(&fx, &p, pid, name, "mma80", 0, 1, 200.0, &vid, &tid) == 0);
    REQUIRE(fat_db_set_winner(fx.db, fx.gpu, pid, vid, tid) == 0);
  }
  FILE *f = open_memstream(&html, &n_html);
  CHECK_INT(fat_report_write(fx.db, fx.gpu, f, NULL, err, sizeof err), 0);
  fclose(f);
  /* One chart of local windows, a series per window. */
  CHECK_INT(count(html, "<h3>Forward, fp16, local windows</h3>"), 1);
  CHECK_INT(count(html, "<svg"), 2); /* and the roofline */
  CHECK_INT(count(html, "<path class=\"series\" data-series=\"d64 w256,0, fatune winner\""), 1);
  CHECK_INT(count(html, "<path class=\"series\" data-series=\"d64 w1024,-1, fatune winner\""), 1);
  /* No peers, no defaults: said plainly, no empty columns. */
  CHECK(strstr(html, "<p><strong>No peer timings are stored for this GPU</strong>, so nothing "
                     "here compares fatune with another implementation: bench/bench_sdpa.py --db "
                     "stores PyTorch SDPA's beside a tuning database's winners, "
                     "bench/store_peers.py those of a benchmark's JSON.</p>") != NULL);
  CHECK(strstr(html, "<th>vs ") == NULL);
  CHECK(strstr(html, "Default ms") == NULL);
  CHECK(strstr(html, "No timing of the default configuration is stored") != NULL);
  CHECK_INT(count(html, "<tr><td class=\"shape\">fp16 d64 local w256,0</td>"), 2);
  CHECK_INT(count(html, "<tr><td class=\"shape\">fp16 d64 local w1024,-1</td>"), 1);
  CHECK(strstr(html, "no mask") == NULL);
out:
  free(html);
  fat_db_close(fx.db);
  remove_db(path);
}

/* Decoding over a grid (two masks, four key lengths, three groups: 24
 * series keys, as the H100's decoding table has), contiguous and in
 * pages of 16: a chart for each layout, the paged one named by its page
 * size, a key the same colour in both, and each <svg> as tall as its
 * legend, whose every row stays inside it. */
static void test_decoding_layouts(void) {
  fixture fx = {0};
  char path[300], err[ERRLEN], *html = NULL;
  size_t n_html = 0;
  fat_gpu_info g = {.name = FIXTURE_GPU, .cc_major = 9, .sm_count = 132, .driver_version = 13000,
                    .nvrtc_major = 13};
  static const int pages[] = {0, 16}, masks[] = {FAT_MASK_NONE, FAT_MASK_CAUSAL},
                   keys[] = {4096, 32768, 65536, 131072}, groups[] = {1, 4, 8},
                   queries[] = {1, 16};
  snprintf(path, sizeof path, "%s/decoding.db", tmpdir);
  REQUIRE(fat_db_open(path, &fx.db, err, sizeof err) == 0);
  REQUIRE(fat_db_put_gpu(fx.db, &g, &fx.gpu) == 0);
  REQUIRE(fat_db_put_ceiling(fx.db, fx.gpu, FAT_CEILING_COPY_BANDWIDTH, 4.0e12,
                             FAT_CEILING_UNIT_BANDWIDTH) == 0);
  for (int pg = 0; pg < 2; pg++)
    for (int m = 0; m < 2; m++)
      for (int k = 0; k < 4; k++)
        for (int gr = 0; gr < 3; gr++)
          for (int q = 0; q < 2; q++) {
            fat_problem p = {.direction = FAT_FWD, .dtype = FAT_BF16, .mask = (fat_mask)masks[m],
                             .head_dim = 128, .batch = 8, .heads = 32, .heads_k = 32 / groups[gr],
                             .seqlen_q = queries[q], .seqlen_k = keys[k], .page_size = pages[pg]};
            sqlite3_int64 pid, vid, tid;
            char name[96];
            snprintf(name, sizeof name, "fwd.splitkv.bf16.d128.%s.p%d.k%d.g%d.q%d",
                     fat_mask_name(p.mask), pages[pg], keys[k], groups[gr], queries[q]);
            REQUIRE(fat_db_put_problem(fx.db, &p, &pid) == 0);
            REQUIRE(fx_timed(&fx, &p, pid, name, "splitkv", 0, 1, 1.0 + k, &vid, &tid) == 0);
            REQUIRE(fat_db_set_winner(fx.db, fx.gpu, pid, vid, tid) == 0);
          }
  FILE *f = open_memstream(&html, &n_html);
  CHECK_INT(fat_report_write(fx.db, fx.gpu, f, NULL, err, sizeof err), 0);
  fclose(f);
  CHECK_INT(count(html, "<figure id=\"fwd-bf16-decoding\">\n<h3>Forward, bf16, decoding</h3>"), 1);
  CHECK_INT(count(html, "<figure id=\"fwd-bf16-decoding-paged16\">\n<h3>Forward, bf16, decoding, "
                        "pages of 16</h3>"), 1);
  CHECK_INT(count(html, "<a href=\"#fwd-bf16-decoding-paged16\">"), 2); /* contents, summary */
  CHECK_INT(count(html, "<svg"), 3); /* and the roofline */
  CHECK(strstr(html, "paged 16, fatune winner") == NULL); /* the page size is the chart's */
  static const char *const ids[] = {"<figure id=\"fwd-bf16-decoding\">",
                                    "<figure id=\"fwd-bf16-decoding-paged16\">"};
  char colour[2][16] = {"", ""};
  for (int c = 0; c < 2; c++) {
    const char *fig = strstr(html, ids[c]);
    REQUIRE(fig != NULL);
    const char *svg = strstr(fig, "<svg"), *end = strstr(fig, "</svg>");
    REQUIRE(svg != NULL && end != NULL);
    CHECK_INT(series_paths(svg, end, "series"), 24);
    double w, h;
    REQUIRE(sscanf(strstr(svg, "viewBox=\"0 0 "), "viewBox=\"0 0 %lf %lf", &w, &h) == 2);
    /* 24 keys, the winner's row and the copy bandwidth's: past the plot's 330. */
    CHECK(h > 330);
    double lowest = 0;
    for (const char *t = strstr(svg, "class=\"legend-text\""); t && t < end;
         t = strstr(t + 1, "class=\"legend-text\"")) {
      const char *y = t;
      while (y > svg && strncmp(y, " y=\"", 4)) y--;
      lowest = fmax(lowest, atof(y + 4));
    }
    CHECK(lowest > 330 && lowest < h);
    CHECK(strstr(svg, ">copy bandwidth</text>") < end);
    const char *line = strstr(svg, "data-series=\"causal d128 g8 k131072, fatune winner\" stroke=\"");
    REQUIRE(line != NULL && line < end);
    sscanf(strchr(line + 14, '#'), "%15[#0-9A-Fa-f]", colour[c]);
  }
  CHECK(colour[0][0] == '#' && !strcmp(colour[0], colour[1]));
out:
  free(html);
  fat_db_close(fx.db);
  remove_db(path);
}

/* The fixture with wgmma's peaks measured (as a tuning run on Hopper now
 * stores them; fp16's and bf16's apart by more than the merge, RS beside
 * them): a wgmma roof of each dtype in wgmma's colour over the mma.sync
 * roof, the bandwidth line running on to wgmma's ridge, every winner placed
 * as before, no note of a missing peak, and the page's ceilings line naming
 * both instructions' peaks. Then bf16's alone: fp16's is said missing. */
static void test_measured_wgmma_peak(void) {
  fixture fx = {0};
  char path[300], err[ERRLEN], *html = NULL;
  size_t n_html = 0;
  snprintf(path, sizeof path, "%s/wgmma.db", tmpdir);
  REQUIRE(build_fixture(&fx, path) == 0);
  REQUIRE(fat_db_put_ceiling(fx.db, fx.gpu, FAT_CEILING_WGMMA_PEAK_FP16, 820e12, FAT_CEILING_UNIT_FLOPS) == 0);
  REQUIRE(fat_db_put_ceiling(fx.db, fx.gpu, FAT_CEILING_WGMMA_PEAK_BF16, 900e12, FAT_CEILING_UNIT_FLOPS) == 0);
  REQUIRE(fat_db_put_ceiling(fx.db, fx.gpu, FAT_CEILING_WGMMA_RS_PEAK_FP16, 840e12, FAT_CEILING_UNIT_FLOPS) == 0);
  REQUIRE(fat_db_put_ceiling(fx.db, fx.gpu, FAT_CEILING_WGMMA_RS_PEAK_BF16, 930e12, FAT_CEILING_UNIT_FLOPS) == 0);
  FILE *f = open_memstream(&html, &n_html);
  CHECK_INT(fat_report_write(fx.db, fx.gpu, f, NULL, err, sizeof err), 0);
  fclose(f);
  const char *roof = strstr(html, "<h2 id=\"roofline\">");
  REQUIRE(roof != NULL);
  const char *roof_end = strstr(roof, "</svg>");
  CHECK_INT(series_paths(roof, roof_end, "roof"), 4);
  CHECK(strstr(roof, ">mma.sync peak 800 TFLOP/s (fp16, bf16)</text>") < roof_end);
  CHECK(strstr(roof, ">wgmma fp16 peak 820 TFLOP/s</text>") < roof_end);
  CHECK(strstr(roof, ">wgmma bf16 peak 900 TFLOP/s</text>") < roof_end);
  CHECK(strstr(roof, "<path class=\"roof\" data-roof=\"wgmma\" stroke=\"#D55E00\" "
                     "stroke-width=\"1.5\" stroke-dasharray=\"none\"") < roof_end);
  CHECK(strstr(roof, "<path class=\"roof\" data-roof=\"wgmma\" stroke=\"#D55E00\" "
                     "stroke-width=\"1.5\" stroke-dasharray=\"6 3\"") < roof_end);
  CHECK(strstr(roof, ">copy bandwidth 4.00 TB/s</text>") < roof_end);
  CHECK(strstr(roof, "not measured") == NULL);
  CHECK(strstr(roof, "<g class=\"series\" data-series=\"wgmma bf16\">") < roof_end);
  CHECK_INT(count(roof, "<title>") - count(roof_end, "<title>"), 11);
  CHECK(strstr(html, "No wgmma peak is stored") == NULL);
  CHECK(strstr(html, "Measured ceilings: copy bandwidth 4.00 TB/s; fp16 mma.sync peak 800 "
                     "TFLOP/s; bf16 mma.sync peak 800 TFLOP/s; fp16 wgmma peak 820 TFLOP/s (A in "
                     "registers 840); bf16 wgmma peak 900 TFLOP/s (A in registers 930).</p>") != NULL);
  /* The bandwidth line ends at the highest roof's ridge (900 / 4 = 225
   * FLOP/byte), where the bf16 wgmma roof begins. */
  const char *bw = strstr(roof, "data-roof=\"copy\""), *wg = strstr(roof, "data-roof=\"wgmma\"");
  REQUIRE(bw != NULL && wg != NULL);
  double x0, y0, x1, y1, wx_fp16, wy, wx;
  REQUIRE(sscanf(strstr(bw, " d=\"M"), " d=\"M%lf,%lf L%lf,%lf", &x0, &y0, &x1, &y1) == 4);
  REQUIRE(sscanf(strstr(wg, " d=\"M"), " d=\"M%lf,%lf", &wx_fp16, &wy) == 2);
  const char *wg_bf16 = strstr(wg + 1, "data-roof=\"wgmma\"");
  REQUIRE(wg_bf16 && sscanf(strstr(wg_bf16, " d=\"M"), " d=\"M%lf,%lf", &wx, &wy) == 2);
  CHECK_NEAR(x1, wx, 0.05);
  CHECK_NEAR(y1, wy, 0.05);
  CHECK(wx_fp16 < wx);  /* fp16's lower roof meets the line sooner */
  free(html);
  html = NULL;

  /* bf16's gone (a partial database): the fixture's wgmma winner is bf16,
   * so its peak is said missing by its dtype; fp16's roof stays. */
  sqlite3_exec(fat_db_handle(fx.db), "DELETE FROM ceilings WHERE name = 'wgmma_peak_bf16'", NULL,
               NULL, NULL);
  f = open_memstream(&html, &n_html);
  CHECK_INT(fat_report_write(fx.db, fx.gpu, f, NULL, err, sizeof err), 0);
  fclose(f);
  roof = strstr(html, "<h2 id=\"roofline\">");
  REQUIRE(roof != NULL);
  roof_end = strstr(roof, "</svg>");
  CHECK_INT(series_paths(roof, roof_end, "roof"), 3);
  CHECK(strstr(roof, ">wgmma bf16 peak: not measured</text>") < roof_end);
  CHECK(strstr(html, "; bf16 wgmma peak not measured.</p>") != NULL);
out:
  free(html);
  fat_db_close(fx.db);
  remove_db(path);
}

static void test_refusals(void) {
  char want[600], missing[300], empty[300], err[ERRLEN];
  fat_db *db = NULL;
  snprintf(missing, sizeof missing, "%s/missing.db", tmpdir);
  snprintf(empty, sizeof empty, "%s/empty.db", tmpdir);
  struct {
    int argc;
    char *argv[8];
    int status;
    const char *err;
  } cases[] = {
      {3, {"report", "--db", missing}, 2, "fatune report: --db: no database at %s\n"},
      {4, {"report", "--db", db_path, "--colour"}, 2,
       "fatune report: unknown option '--colour' (see fatune report --help)\n"},
      {4, {"report", "--db", db_path, "-o"}, 2, "fatune report: -o needs a value\n"},
      {5, {"report", "--db", db_path, "--db", db_path}, 2, "fatune report: --db given twice\n"},
      {5, {"report", "--db", db_path, "--gpu-name", "H100"}, 2,
       "fatune report: --gpu-name: no GPU named 'H100' in the database (it holds: " FIXTURE_GPU
       ")\n"},
      {3, {"report", "--db", empty}, 1, "fatune report: no GPU results in %s: run fatune on a GPU "
                                        "first\n"},
  };
  REQUIRE(fat_db_open(empty, &db, err, sizeof err) == 0);
  fat_db_close(db);
  db = NULL;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    remove(html_path);
    run_result r = run_report(cases[i].argc, cases[i].argv);
    snprintf(want, sizeof want, cases[i].err, i == 0 ? missing : empty);
    CHECK_INT(r.status, cases[i].status);
    CHECK_STR(r.err, want);
    CHECK_STR(r.out, "");
    run_free(&r);
  }
  CHECK(access(missing, F_OK) != 0); /* report never creates a database */
  /* An output folder that does not exist: status 1, nothing left behind. */
  char bad_out[300];
  snprintf(bad_out, sizeof bad_out, "%s/no/such/folder/r.html", tmpdir);
  char *argv[] = {"report", "--db", db_path, "--output", bad_out};
  run_result r = run_report(5, argv);
  CHECK_INT(r.status, 1);
  snprintf(want, sizeof want, "fatune report: cannot write %s.%ld.tmp: No such file or directory\n",
           bad_out, (long)getpid());
  CHECK_STR(r.err, want);
  run_free(&r);
  /* A link at -o, or where the temporary once was (X.tmp), is never
   * followed: the file it points to keeps what it had (issue 21). */
  char victim[300], link_out[300], planted[320];
  snprintf(victim, sizeof victim, "%s/victim", tmpdir);
  snprintf(link_out, sizeof link_out, "%s/link.html", tmpdir);
  FILE *vf = fopen(victim, "w");
  REQUIRE(vf != NULL);
  fputs("keep", vf);
  fclose(vf);
  REQUIRE(symlink(victim, link_out) == 0);
  char *to_link[] = {"report", "--db", db_path, "-o", link_out};
  r = run_report(5, to_link);
  CHECK_INT(r.status, 1);
  snprintf(want, sizeof want, "fatune report: %s exists and is not a regular file: not replaced\n",
           link_out);
  CHECK_STR(r.err, want);
  run_free(&r);
  char plain_out[300];
  snprintf(plain_out, sizeof plain_out, "%s/plain.html", tmpdir);
  snprintf(planted, sizeof planted, "%s.tmp", plain_out);
  REQUIRE(symlink(victim, planted) == 0);
  char *to_plain[] = {"report", "--db", db_path, "-o", plain_out};
  r = run_report(5, to_plain);
  CHECK_INT(r.status, 0); /* the page was written: through its own temporary */
  run_free(&r);
  char *kept = check_read_file(victim);
  CHECK(kept && !strcmp(kept, "keep"));
  free(kept);
  char *help[] = {"report", "--help"};
  r = run_report(2, help);
  CHECK_INT(r.status, 0);
  CHECK_STR(r.out, fat_report_usage());
  run_free(&r);
out:
  fat_db_close(db);
}

int main(void) {
  char p[300];
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  const char *keep_db = getenv("FATUNE_KEEP_DB");
  if (keep_db && *keep_db) {
    snprintf(db_path, sizeof db_path, "%s", keep_db);
    remove_db(db_path);
  } else {
    snprintf(db_path, sizeof db_path, "%s/report.db", tmpdir);
  }
  snprintf(html_path, sizeof html_path, "%s/report.html", tmpdir);
  test_report_of_fixture();
  test_measured_wgmma_peak();
  test_local_windows();
  test_decoding_layouts();
  test_refusals();
  if (!keep_db || !*keep_db) remove_db(db_path);
  snprintf(p, sizeof p, "%s/empty.db", tmpdir);
  remove_db(p);
  remove(html_path);
  rmdir(tmpdir);
  return check_summary("test_report");
}

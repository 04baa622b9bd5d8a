/* SPDX-License-Identifier: MIT */
/* `fatune explain`: counts bytes and FLOPs of one attention shape, and sets
 * them against the GPU's measured ceilings and the tuned winner stored in
 * the database (explain.h says what each number means and does not mean). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cli_args.h"
#include "explain.h"
#include "options.h"
#include "results_db.h"

/* Reads and writes a materialising implementation makes of the N² scores:
 * S written, S read for softmax, P written, P read for P·V. */
#define MATERIALISE_SCORE_PASSES 4
/* FLOPs per (query, key, head-dim element): one multiply-add in Q·Kᵀ and one in P·V. */
#define FLOPS_PER_QK_D 4
#define TERA 1e12
#define ERRLEN 512

/* ------------------------------------------------------------------ counts */

/* *acc *= f, refusing overflow: returns -1 when the product does not fit. */
static int mul_into(uint64_t *acc, uint64_t f) {
  return __builtin_mul_overflow(*acc, f, acc) ? -1 : 0;
}

/* Product of N factors into *OUT, -1 on overflow. */
static int product(uint64_t *out, int n, const uint64_t *f) {
  uint64_t acc = 1;
  for (int i = 0; i < n; i++)
    if (mul_into(&acc, f[i])) return -1;
  *out = acc;
  return 0;
}

int fat_io_model_compute(const fat_problem *p, fat_io_model *m, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  const struct {
    const char *name;
    int value;
  } dims[] = {{"batch", p->batch},       {"heads", p->heads},       {"heads_k", p->heads_k},
              {"seqlen_q", p->seqlen_q}, {"seqlen_k", p->seqlen_k}, {"head dim", p->head_dim}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].value <= 0) {
      snprintf(err, errlen, "%s must be positive, not %d", dims[i].name, dims[i].value);
      return -1;
    }
  if (p->heads % p->heads_k != 0) {
    snprintf(err, errlen, "heads (%d) must be a multiple of heads_k (%d)", p->heads, p->heads_k);
    return -1;
  }
  m->problem = *p;
  m->problem.direction = FAT_FWD;
  m->elem_bytes = fat_dtype_size(p->dtype);
  /* An fp8 K/V cache reads one byte a K and V element beside a 16-bit Q:
   * what makes decoding from it cheaper. */
  m->kv_elem_bytes = fat_dtype_kv_size(p->dtype);
  /* O, and the scores a materialising implementation stores, are of the
   * output's type: e4m3's one-byte inputs give bf16 ones. */
  m->out_bytes = fat_dtype_size(fat_dtype_out(p->dtype));
  const uint64_t e = m->elem_bytes, ekv = m->kv_elem_bytes, eo = m->out_bytes;
  const uint64_t b = (uint64_t)p->batch, h = (uint64_t)p->heads,
                 hk = (uint64_t)p->heads_k, sq = (uint64_t)p->seqlen_q,
                 sk = (uint64_t)p->seqlen_k, d = (uint64_t)p->head_dim;
  uint64_t passes = MATERIALISE_SCORE_PASSES, fpd = FLOPS_PER_QK_D;
  int bad = 0;
  bad |= product(&m->score_elements, 4, (uint64_t[]){b, h, sq, sk});
  bad |= product(&m->score_bytes, 2, (uint64_t[]){m->score_elements, eo});
  bad |= product(&m->row_bytes, 2, (uint64_t[]){sk, eo});
  bad |= product(&m->scores_traffic, 2, (uint64_t[]){m->score_bytes, passes});
  bad |= product(&m->q_bytes, 5, (uint64_t[]){b, h, sq, d, e});
  bad |= product(&m->k_bytes, 5, (uint64_t[]){b, hk, sk, d, ekv});
  m->v_bytes = m->k_bytes;
  bad |= product(&m->o_bytes, 5, (uint64_t[]){b, h, sq, d, eo});
  bad |= __builtin_add_overflow(m->q_bytes, m->k_bytes, &m->lower_bound_bytes);
  bad |= __builtin_add_overflow(m->lower_bound_bytes, m->v_bytes, &m->lower_bound_bytes);
  bad |= __builtin_add_overflow(m->lower_bound_bytes, m->o_bytes, &m->lower_bound_bytes);
  bad |= __builtin_add_overflow(m->scores_traffic, m->lower_bound_bytes, &m->materialise_bytes);
  bad |= product(&m->flops, 3, (uint64_t[]){m->score_elements, d, fpd});
  if (bad) {
    snprintf(err, errlen,
             "shape too large to count: batch %d, heads %d, seqlen_q %d, seqlen_k %d, head dim %d "
             "overflows 64-bit byte or FLOP counts",
             p->batch, p->heads, p->seqlen_q, p->seqlen_k, p->head_dim);
    return -1;
  }
  /* The papers' convention, as fat_problem_flops: halved only when the
   * causal triangle is square. The factor 4 keeps the halving exact. */
  if (p->mask == FAT_MASK_CAUSAL && p->seqlen_q == p->seqlen_k) m->flops /= 2;
  /* A local window (a tuned problem the report places on its roofline)
   * counts the pairs it lets through, row by row as fat_problem_flops does:
   * exact below 2^53. */
  if (p->mask == FAT_MASK_LOCAL) m->flops = (uint64_t)fat_problem_flops(&m->problem);
  m->ratio = (double)m->materialise_bytes / (double)m->lower_bound_bytes;
  m->intensity = (double)m->flops / (double)m->lower_bound_bytes;
  return 0;
}

/* -------------------------------------------------------------- formatting */

char *fat_fmt_thousands(uint64_t n, char *buf, size_t cap) {
  char digits[32];
  int len = snprintf(digits, sizeof digits, "%llu", (unsigned long long)n);
  size_t o = 0;
  for (int i = 0; i < len && o + 1 < cap; i++) {
    if (i > 0 && (len - i) % 3 == 0 && o + 2 < cap) buf[o++] = ',';
    buf[o++] = digits[i];
  }
  if (cap) buf[o < cap ? o : cap - 1] = '\0';
  return buf;
}

/* VALUE with up to DECIMALS decimals, trailing zeros (and the point)
 * dropped, into BUF; snprintf's result for the untrimmed text. */
static int trim_into(double value, int decimals, char *buf, size_t cap) {
  const int n = snprintf(buf, cap, "%.*f", decimals, value);
  if (n >= 0 && (size_t)n < cap && strchr(buf, '.')) {
    char *end = buf + strlen(buf) - 1;
    while (*end == '0') *end-- = '\0';
    if (*end == '.') *end = '\0';
  }
  return n;
}

/* trim_into's text; BUF. */
static char *fmt_trimmed(double value, int decimals, char *buf, size_t cap) {
  trim_into(value, decimals, buf, cap);
  return buf;
}

/* A scaled value below FMT_FIXED_MAX prints in fixed notation: a sign, at
 * most 15 digits, the point and the decimals fit FMT_NUM_CAP. A larger one
 * (never a count explain computes: they fit 64 bits, at most 16 EiB or
 * 18.45 EFLOP in the largest unit), infinity and NaN print with %g, so
 * that no number is ever cut short. */
#define FMT_FIXED_MAX 1e15
#define FMT_NUM_CAP 24

/* VALUE scaled by the largest unit of UNITS (steps of STEP) that keeps it
 * at least 1, printed with DECIMALS (at most 4; trimmed or fixed). */
static char *fmt_scaled(double value, double step, const char *const *units, int n_units,
                        int decimals, int trim, char *buf, size_t cap) {
  int u = 0;
  while (u + 1 < n_units && fabs(value) >= step) {
    value /= step;
    u++;
  }
  char num[FMT_NUM_CAP];
  int n = -1;
  if (fabs(value) < FMT_FIXED_MAX)
    n = trim ? trim_into(value, decimals, num, sizeof num)
             : snprintf(num, sizeof num, "%.*f", decimals, value);
  if (n < 0 || (size_t)n >= sizeof num) snprintf(num, sizeof num, "%.*g", decimals + 1, value);
  snprintf(buf, cap, "%s %s", num, units[u]);
  return buf;
}

char *fat_fmt_bytes(double bytes, char *buf, size_t cap) {
  static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  return fmt_scaled(bytes, 1024.0, units, sizeof units / sizeof units[0], 2, 1, buf, cap);
}

char *fat_fmt_flops(double flops, char *buf, size_t cap) {
  static const char *const units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP",
                                      "EFLOP"};
  return fmt_scaled(flops, 1000.0, units, sizeof units / sizeof units[0], 2, 0, buf, cap);
}

/* A duration in seconds with three significant digits in ns, µs, ms or s. */
static char *fmt_seconds(double s, char *buf, size_t cap) {
  static const char *const units[] = {"ns", "µs", "ms", "s"};
  double v = s * 1e9;
  int u = 0;
  while (u + 1 < (int)(sizeof units / sizeof units[0]) && v >= 1000.0) {
    v /= 1000.0;
    u++;
  }
  snprintf(buf, cap, "%.3g %s", v, units[u]);
  return buf;
}

/* ---------------------------------------------------------------- printing */

void fat_explain_print_model(FILE *out, const fat_io_model *m) {
  const fat_problem *p = &m->problem;
  char a[64], b[64], c[64], h1[64], h2[64], h3[64];
  fprintf(out,
          "Attention forward, %s, batch %d, heads %d (K/V heads %d), seqlen_q %d, seqlen_k %d, "
          "head dim %d, %s\n\n",
          fat_dtype_name(p->dtype), p->batch, p->heads, p->heads_k, p->seqlen_q, p->seqlen_k,
          p->head_dim, p->mask == FAT_MASK_CAUSAL ? "causal" : "no mask");
  if (m->kv_elem_bytes != m->elem_bytes)
    fprintf(out, "Q, O, S and P in %s (%llu bytes), K and V in e4m3 (%llu byte each) with descale "
            "factors\n\n", fat_dtype_name(fat_dtype_out(p->dtype)), (unsigned long long)m->elem_bytes,
            (unsigned long long)m->kv_elem_bytes);
  else if (m->out_bytes != m->elem_bytes)
    fprintf(out, "Q, K and V in %s (%llu byte%s each), O, S and P in %s (%llu bytes)\n\n",
            fat_dtype_name(p->dtype), (unsigned long long)m->elem_bytes,
            m->elem_bytes == 1 ? "" : "s", fat_dtype_name(fat_dtype_out(p->dtype)),
            (unsigned long long)m->out_bytes);

  fprintf(out, "Score matrix S = Q·Kᵀ (P = softmax(S) is the same size)\n");
  fprintf(out, "  %s score elements, %s at %llu bytes each\n",
          fat_fmt_thousands(m->score_elements, a, sizeof a),
          fat_fmt_bytes((double)m->score_bytes, h1, sizeof h1), (unsigned long long)m->out_bytes);
  fprintf(out, "  one row: %s scores, a %s row\n\n", fat_fmt_thousands((uint64_t)p->seqlen_k, a, sizeof a),
          fat_fmt_bytes((double)m->row_bytes, h1, sizeof h1));

  fprintf(out, "Bytes a materialising implementation moves\n");
  fprintf(out, "  S written, read for softmax, P written, read for P·V: %s bytes (%s)\n",
          fat_fmt_thousands(m->scores_traffic, a, sizeof a),
          fat_fmt_bytes((double)m->scores_traffic, h1, sizeof h1));
  fprintf(out, "  Q, K, V read and O written once: %s bytes (%s)\n",
          fat_fmt_thousands(m->lower_bound_bytes, a, sizeof a),
          fat_fmt_bytes((double)m->lower_bound_bytes, h1, sizeof h1));
  fprintf(out, "  %s + %s = %s bytes (%s)\n\n", fat_fmt_thousands(m->scores_traffic, a, sizeof a),
          fat_fmt_thousands(m->lower_bound_bytes, b, sizeof b),
          fat_fmt_thousands(m->materialise_bytes, c, sizeof c),
          fat_fmt_bytes((double)m->materialise_bytes, h1, sizeof h1));

  fprintf(out, "Input/output lower bound: %s bytes (%s minimum: Q, K, V read once, O written once)\n",
          fat_fmt_thousands(m->lower_bound_bytes, a, sizeof a),
          fat_fmt_bytes((double)m->lower_bound_bytes, h1, sizeof h1));
  fprintf(out, "  materialising / lower bound: %s×\n\n", fmt_trimmed(m->ratio, 1, h2, sizeof h2));

  fprintf(out, "FLOPs: %s (%s: 4·seqlen_q·seqlen_k·head dim per head%s)\n",
          fat_fmt_thousands(m->flops, a, sizeof a), fat_fmt_flops((double)m->flops, h3, sizeof h3),
          p->mask == FAT_MASK_CAUSAL && p->seqlen_q == p->seqlen_k ? ", halved for causal" : "");
  fprintf(out, "Arithmetic intensity over the lower bound: %s FLOP/byte\n\n",
          fmt_trimmed(m->intensity, 1, h2, sizeof h2));

  if (p->heads_k != p->heads)
    fprintf(out,
            "Grouped-query attention: K and V are counted with %d heads (%d query heads\n"
            "share each), Q, O and the scores with %d.\n",
            p->heads_k, p->heads / p->heads_k, p->heads);
  if (p->mask == FAT_MASK_CAUSAL) {
    if (p->seqlen_q == p->seqlen_k)
      fprintf(out, "Causal: the FLOPs are halved (seqlen_q = seqlen_k).\n");
    else
      fprintf(out,
              "Causal with seqlen_q != seqlen_k: the FLOPs are not halved (the\n"
              "FlashAttention papers' convention).\n");
    fprintf(out,
            "The materialising bytes still count the full seqlen_q × seqlen_k matrix: a\n"
            "materialising implementation writes every score, masked or not, before the\n"
            "softmax.\n");
  }
  fprintf(out,
          "The lower bound is what any exact implementation must read and write once.\n"
          "It is not FlashAttention's actual traffic: K and V tiles are re-read by every\n"
          "query tile, so a tiled kernel moves more. The ratio compares byte counts; it\n"
          "is not a predicted speedup.\n");
}

/* ----------------------------------------------------------------- parsing */

const char *fat_explain_usage(void) {
  return "Usage: fatune explain --seqlen N --head-dim D [options]\n"
         "Counts what one attention forward shape costs: the score matrix, the bytes a\n"
         "materialising implementation moves, the input/output lower bound, the FLOPs and,\n"
         "with the GPU's measured ceilings, the bandwidth and compute floors. With a tuned\n"
         "winner for the shape in the database, where the measured kernel sits: its FLOP\n"
         "rate against the measured peak of the instruction its family issues (mma.sync,\n"
         "or wgmma on Hopper), and why the other candidates lost where they were not\n"
         "timed in full (how far behind the best, after how many repetitions).\n"
         "\n"
         "  --seqlen N         query and key length (or --seqlen-q N and --seqlen-k N)\n"
         "  --head-dim D       head dimension\n"
         "  --batch B          batch size (default 1)\n"
         "  --heads H          query heads (default 1)\n"
         "  --heads-k H        key/value heads, dividing --heads (default: --heads)\n"
         "  --dtype T          fp16 or bf16, both 2 bytes, or e4m3: 1-byte Q, K and V, O in\n"
         "                     bf16, or fp16-e4m3kv, bf16-e4m3kv: an fp8 K/V cache, 1-byte\n"
         "                     K and V, Q and O 2 bytes (default fp16)\n"
         "  --causal           causal mask\n"
         "  --db PATH          database with measured ceilings and winners (default\n"
         "                     $FATUNE_DB, else the cache folder's fatune.db)\n"
         "  --gpu-name NAME    which GPU of the database (default: its only one)\n"
         "  --bandwidth TB/s   copy bandwidth for the bandwidth floor, by hand\n"
         "  --peak TFLOP/s     matrix peak for the compute floor, by hand (standing for\n"
         "                     every instruction's measured one)\n"
         "  -h, --help         this text\n"
         "\n" FAT_EXIT_STATUS_HELP;
}

/* A positive, finite number times SCALE (TB/s → B/s, TFLOP/s → FLOP/s). */
static int parse_positive(const char *flag, const char *s, const char *unit, double scale,
                          double *out, char *err, size_t errlen) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno == ERANGE || !isfinite(v) || v <= 0) {
    snprintf(err, errlen, "%s: '%s' is not a positive number of %s", flag, s, unit);
    return -1;
  }
  *out = v * scale;
  return 0;
}

static int copy_text(const char *flag, const char *s, char *dst, size_t cap, char *err,
                     size_t errlen) {
  if (!*s || strlen(s) >= cap) {
    snprintf(err, errlen, "%s: '%s' is %s", flag, s, *s ? "too long" : "empty");
    return -1;
  }
  strcpy(dst, s);
  return 0;
}

int fat_explain_parse(int argc, char **argv, fat_explain_options *o, char *err, size_t errlen) {
  static const char *const valued[] = {"--batch",    "--heads",     "--heads-k",  "--seqlen",
                                       "--seqlen-q", "--seqlen-k",  "--head-dim", "--dtype",
                                       "--db",       "--gpu-name",  "--bandwidth", "--peak"};
  enum { N_VALUED = sizeof valued / sizeof valued[0] };
  int seen[N_VALUED] = {0}, seen_causal = 0;
  int seqlen = 0, seqlen_q = 0, seqlen_k = 0;

  memset(o, 0, sizeof *o);
  o->problem.direction = FAT_FWD;
  o->problem.dtype = FAT_FP16;
  o->problem.mask = FAT_MASK_NONE;
  o->problem.batch = 1;
  o->problem.heads = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      o->help = 1;
      return 0;
    }
    if (!strcmp(a, "--causal")) {
      if (seen_causal++) {
        snprintf(err, errlen, "--causal given twice");
        return -1;
      }
      o->problem.mask = FAT_MASK_CAUSAL;
      continue;
    }
    /* --flag=value or --flag value */
    int k;
    const char *value;
    int got = fat_cli_valued(argc, argv, &i, valued, N_VALUED, seen, &k, &value, err, errlen);
    if (got < 0) return -1;
    if (got == 0) {
      snprintf(err, errlen, "unknown option '%s' (see fatune explain --help)", a);
      return -1;
    }
    const char *flag = valued[k];
    int rc = 0;
    fat_problem *p = &o->problem;
    if (!strcmp(flag, "--batch"))
      rc = fat_cli_parse_int(flag, value, 1, FAT_EXPLAIN_MAX_BATCH, &p->batch, err, errlen);
    else if (!strcmp(flag, "--heads"))
      rc = fat_cli_parse_int(flag, value, 1, FAT_EXPLAIN_MAX_HEADS, &p->heads, err, errlen);
    else if (!strcmp(flag, "--heads-k"))
      rc = fat_cli_parse_int(flag, value, 1, FAT_EXPLAIN_MAX_HEADS, &p->heads_k, err, errlen);
    else if (!strcmp(flag, "--seqlen"))
      rc = fat_cli_parse_int(flag, value, 1, FAT_MAX_SEQLEN, &seqlen, err, errlen);
    else if (!strcmp(flag, "--seqlen-q"))
      rc = fat_cli_parse_int(flag, value, 1, FAT_MAX_SEQLEN, &seqlen_q, err, errlen);
    else if (!strcmp(flag, "--seqlen-k"))
      rc = fat_cli_parse_int(flag, value, 1, FAT_MAX_SEQLEN, &seqlen_k, err, errlen);
    else if (!strcmp(flag, "--head-dim"))
      rc = fat_cli_parse_int(flag, value, 1, FAT_EXPLAIN_MAX_HEAD_DIM, &p->head_dim, err, errlen);
    else if (!strcmp(flag, "--dtype")) {
      if (fat_dtype_parse(value, &p->dtype)) {
        snprintf(err, errlen, "%s: unknown dtype '%s' (fp16, bf16, e4m3, fp16-e4m3kv, bf16-e4m3kv)",
                 flag, value);
        rc = -1;
      }
    } else if (!strcmp(flag, "--db"))
      rc = copy_text(flag, value, o->db_path, sizeof o->db_path, err, errlen);
    else if (!strcmp(flag, "--gpu-name"))
      rc = copy_text(flag, value, o->gpu_name, sizeof o->gpu_name, err, errlen);
    else if (!strcmp(flag, "--bandwidth"))
      rc = parse_positive(flag, value, "TB/s", TERA, &o->bandwidth, err, errlen);
    else if (!strcmp(flag, "--peak"))
      rc = parse_positive(flag, value, "TFLOP/s", TERA, &o->peak, err, errlen);
    if (rc) return -1;
  }
  if (seqlen && (seqlen_q || seqlen_k)) {
    snprintf(err, errlen, "--seqlen sets both lengths: give it or --seqlen-q/--seqlen-k, not both");
    return -1;
  }
  if (!seqlen && (!seqlen_q != !seqlen_k)) {
    snprintf(err, errlen, "%s given without %s", seqlen_q ? "--seqlen-q" : "--seqlen-k",
             seqlen_q ? "--seqlen-k" : "--seqlen-q");
    return -1;
  }
  if (!seqlen && !seqlen_q) {
    snprintf(err, errlen, "no sequence length: give --seqlen N (or --seqlen-q and --seqlen-k)");
    return -1;
  }
  if (!o->problem.head_dim) {
    snprintf(err, errlen, "no head dim: give --head-dim D");
    return -1;
  }
  o->problem.seqlen_q = seqlen ? seqlen : seqlen_q;
  o->problem.seqlen_k = seqlen ? seqlen : seqlen_k;
  if (!o->problem.heads_k) o->problem.heads_k = o->problem.heads;
  if (o->problem.heads % o->problem.heads_k) {
    snprintf(err, errlen, "--heads-k: %d does not divide --heads %d", o->problem.heads_k,
             o->problem.heads);
    return -1;
  }
  return 0;
}

/* -------------------------------------------------------------- database */

/* A winner stored for explain's shape, or for its key at another batch. */
typedef struct stored_winner {
  char name[256];      /* the variant */
  char family[64];     /* its family, whose instruction's peak it is placed against */
  double median_ms;
  sqlite3_int64 problem_id;  /* its problem: whose eliminations say why the others lost */
} stored_winner;

static void read_winner(sqlite3_stmt *s, stored_winner *w) {
  snprintf(w->name, sizeof w->name, "%s", (const char *)sqlite3_column_text(s, 3));
  w->median_ms = sqlite3_column_double(s, 4);
  snprintf(w->family, sizeof w->family, "%s", (const char *)sqlite3_column_text(s, 5));
  w->problem_id = sqlite3_column_int64(s, 6);
}

/* The winner stored for P's (dtype, head dim, mask, seqlens) on GPU_ID.
 * *FOUND = 1 with *W when one matches batch and heads exactly; otherwise
 * OTHERS lists the batch/heads that are stored ("" when none), and the
 * first of them is in *STORED (its batch and heads) and *W. */
static int find_winner(fat_db *db, sqlite3_int64 gpu_id, const fat_problem *p, int *found,
                       fat_problem *stored, stored_winner *w, char *others, size_t others_cap,
                       char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int ret = -1, rc;
  size_t used = 0;
  *found = 0;
  others[0] = '\0';
  if (sqlite3_prepare_v2(
          fat_db_handle(db),
          "SELECT p.batch, p.heads, p.heads_k, v.name, t.median_ms, v.family, p.id FROM winners w"
          " JOIN problems p ON p.id = w.problem_id JOIN variants v ON v.id = w.variant_id"
          " JOIN timings t ON t.id = w.timing_id"
          " WHERE w.gpu_id = ?1 AND p.direction = 'fwd' AND p.dtype = ?2 AND p.mask = ?3"
          " AND p.head_dim = ?4 AND p.seqlen_q = ?5 AND p.seqlen_k = ?6 AND p.lengths = ''"
          " AND p.page_size = 0"
          " ORDER BY p.batch, p.heads, p.heads_k",
          -1, &s, NULL) != SQLITE_OK)
    goto fail;
  sqlite3_bind_int64(s, 1, gpu_id);
  sqlite3_bind_text(s, 2, fat_dtype_name(p->dtype), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, fat_mask_name(p->mask), -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 4, p->head_dim);
  sqlite3_bind_int(s, 5, p->seqlen_q);
  sqlite3_bind_int(s, 6, p->seqlen_k);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int b = sqlite3_column_int(s, 0), h = sqlite3_column_int(s, 1), hk = sqlite3_column_int(s, 2);
    if (b == p->batch && h == p->heads && hk == p->heads_k) {
      *found = 1;
      read_winner(s, w);
      continue;
    }
    if (!*found && !used) {
      *stored = *p;
      stored->batch = b, stored->heads = h, stored->heads_k = hk;
      read_winner(s, w);
    }
    int n = snprintf(others + used, others_cap - used, "%sbatch %d, heads %d (K/V heads %d)",
                     used ? "; " : "", b, h, hk);
    if (n > 0) used = used + (size_t)n < others_cap ? used + (size_t)n : others_cap - 1;
  }
  if (rc != SQLITE_DONE) goto fail;
  ret = 0;
  goto out;
fail:
  snprintf(err, errlen, "cannot read winners: %s", sqlite3_errmsg(fat_db_handle(db)));
out:
  sqlite3_finalize(s);
  return ret;
}

/* ------------------------------------------------------------------- run */

/* The instructions whose measured peaks explain shows, in order. */
static const fat_matrix_op shown_ops[] = {FAT_MATRIX_MMA_SYNC, FAT_MATRIX_WGMMA};
#define N_SHOWN_OPS (sizeof shown_ops / sizeof shown_ops[0])

static int any_peak_measured(const fat_floors *c) {
  for (size_t k = 0; k < N_SHOWN_OPS; k++)
    if (c->peak[shown_ops[k]] > 0) return 1;
  return 0;
}

static void print_floors(FILE *out, const fat_io_model *m, const fat_floors *c, const char *gpu) {
  char t[64], v[64];
  const char *dt = fat_dtype_name(m->problem.dtype), *sep = "";
  fprintf(out, "\nFloors%s%s:", gpu ? " on " : "", gpu ? gpu : "");
  if (c->bandwidth > 0) {
    fprintf(out, " copy bandwidth %s TB/s (%s)", fmt_trimmed(c->bandwidth / TERA, 2, v, sizeof v),
            c->bandwidth_measured ? "measured" : "given");
    sep = ",";
  }
  if (c->given_peak > 0)
    fprintf(out, "%s %s matrix peak %s TFLOP/s (given)", sep, dt,
            fmt_trimmed(c->given_peak / TERA, 1, v, sizeof v));
  else
    for (size_t k = 0; k < N_SHOWN_OPS; k++) {
      if (!(c->peak[shown_ops[k]] > 0)) continue;
      fprintf(out, "%s %s %s peak %s TFLOP/s (measured)", sep, dt, fat_matrix_op_name(shown_ops[k]),
              fmt_trimmed(c->peak[shown_ops[k]] / TERA, 1, v, sizeof v));
      sep = ",";
    }
  fprintf(out, "\n");
  if (c->bandwidth > 0) {
    fprintf(out, "  bandwidth floor: %s (lower-bound bytes at the copy bandwidth)\n",
            fmt_seconds((double)m->lower_bound_bytes / c->bandwidth, t, sizeof t));
    fprintf(out, "  the materialising bytes alone at the copy bandwidth: %s\n",
            fmt_seconds((double)m->materialise_bytes / c->bandwidth, t, sizeof t));
  }
  if (c->given_peak > 0)
    fprintf(out, "  compute floor: %s (FLOPs at the matrix peak)\n",
            fmt_seconds((double)m->flops / c->given_peak, t, sizeof t));
  else
    for (size_t k = 0; k < N_SHOWN_OPS; k++)
      if (c->peak[shown_ops[k]] > 0)
        fprintf(out, "  compute floor: %s (FLOPs at the %s peak)\n",
                fmt_seconds((double)m->flops / c->peak[shown_ops[k]], t, sizeof t),
                fat_matrix_op_name(shown_ops[k]));
}

/* The winner W at M's shape: its time and TFLOP/s, then the fraction of
 * the matrix peak given by hand or, without one, of the measured peak of
 * the instruction its family issues (or that this peak was not measured),
 * and of the copy bandwidth. */
static void print_measured(FILE *out, const fat_io_model *m, const fat_floors *c, const char *gpu,
                           const stored_winner *w) {
  char t[64], v[64];
  double s = w->median_ms * 1e-3;
  fprintf(out, "\nMeasured on %s: winner %s\n", gpu, w->name);
  fprintf(out, "  time %s, %s TFLOP/s\n", fmt_seconds(s, t, sizeof t),
          fmt_trimmed((double)m->flops / s / TERA, 1, v, sizeof v));
  const fat_matrix_op op = fat_family_matrix_op(w->family, FAT_FWD);
  if (c->given_peak > 0)
    fprintf(out, "  compute floor / measured time: %s%% of the matrix peak\n",
            fmt_trimmed(100.0 * ((double)m->flops / c->given_peak) / s, 1, v, sizeof v));
  else if (op != FAT_MATRIX_OTHER && c->peak[op] > 0)
    fprintf(out, "  compute floor / measured time: %s%% of the %s peak (%s issues %s)\n",
            fmt_trimmed(100.0 * ((double)m->flops / c->peak[op]) / s, 1, v, sizeof v),
            fat_matrix_op_name(op), w->family, fat_matrix_op_name(op));
  else if (op != FAT_MATRIX_OTHER && !fat_ceiling_peak_name(op, m->problem.dtype))
    fprintf(out, "  %s peak: none for %s (fatune measures no fp8 peak: the rate stands alone)\n",
            fat_matrix_op_name(op), fat_dtype_name(m->problem.dtype));
  else if (op != FAT_MATRIX_OTHER)
    fprintf(out, "  %s peak: not measured (%s issues %s)\n", fat_matrix_op_name(op), w->family,
            fat_matrix_op_name(op));
  if (c->bandwidth > 0)
    fprintf(out, "  bandwidth floor / measured time: %s%% of the copy bandwidth\n",
            fmt_trimmed(100.0 * ((double)m->lower_bound_bytes / c->bandwidth) / s, 1, v, sizeof v));
}

/* The eliminated candidates explain names, the closest first. */
#define EXPLAIN_CLOSEST_ELIMINATED 3

/* Why the other candidates of W's problem lost without a full timing (the
 * database's eliminations, db.h): how many, how many of them were dropped
 * after one repetition, and the closest few with their ratios over the
 * best. Nothing where there are none (a problem timed with --exhaustive,
 * decided before schema version 10, or read from a table, which carries
 * none). 0, or -1 with the database's error. */
static int print_eliminated(FILE *out, fat_db *db, sqlite3_int64 gpu_id, const stored_winner *w) {
  fat_db_elimination e[EXPLAIN_CLOSEST_ELIMINATED];
  size_t n = 0, total = 0, drops = 0;
  char t[64];
  if (fat_db_eliminations(db, gpu_id, w->problem_id, e, EXPLAIN_CLOSEST_ELIMINATED, &n, &total,
                          &drops))
    return -1;
  if (!total) return 0;
  fprintf(out, "  eliminated without a full timing: %zu candidate%s", total, total == 1 ? "" : "s");
  if (drops)
    fprintf(out, ", %zu of them after 1 repetition (more than %gx the best so far)", drops,
            FAT_DROP_FACTOR);
  fprintf(out, "\n  the closest, against the fastest timed alone, %s (%s):\n", e[0].best,
          fmt_seconds(e[0].best_ms * 1e-3, t, sizeof t));
  for (size_t i = 0; i < n; i++) {
    fprintf(out, "    %s  %.2fx the best after %d repetition%s", e[i].name, e[i].ratio, e[i].reps,
            e[i].reps == 1 ? "" : "s");
    /* Within the margin, it was cut by the number a job compares. */
    if (e[i].ratio <= 1 + FAT_SCREEN_CONTENDER)
      fprintf(out, " (within %g%%, but not among the %d fastest)", 100 * FAT_SCREEN_CONTENDER,
              FAT_DB_MAX_CONTENDERS);
    fputc('\n', out);
  }
  return 0;
}

int fat_explain_run(int argc, char **argv, FILE *out, FILE *errf) {
  char err[ERRLEN] = "", gpu[256] = "", others[1024] = "", db_path[4096];
  fat_explain_options o;
  fat_io_model m;
  fat_db *db = NULL;
  fat_floors c = {0};
  stored_winner winner = {.median_ms = 0};
  sqlite3_int64 gpu_id = 0;
  int status = FAT_EXIT_USAGE, have_gpu = 0, have_winner = 0, shipped = 0, n_gpus = 0;
  fat_problem stored; /* with no winner of the shape: the first stored one of its key */

  if (fat_explain_parse(argc, argv, &o, err, sizeof err)) {
    fprintf(errf, "fatune explain: %s\n", err);
    goto out;
  }
  if (o.help) {
    fputs(fat_explain_usage(), out);
    status = FAT_EXIT_OK;
    goto out;
  }
  if (fat_io_model_compute(&o.problem, &m, err, sizeof err)) {
    fprintf(errf, "fatune explain: %s\n", err);
    goto out;
  }
  if (o.db_path[0]) snprintf(db_path, sizeof db_path, "%s", o.db_path);
  else if (fat_options_default_db(db_path, sizeof db_path, 0, err, sizeof err)) {
    fprintf(errf, "fatune explain: %s\n", err);
    goto out;
  }
  {
    int rc = fat_results_db_open(db_path, sizeof db_path, o.db_path[0] != 0, o.gpu_name, &db, &gpu_id, gpu,
                                 sizeof gpu, &have_gpu, &shipped, &n_gpus, err, sizeof err);
    if (rc) {
      fprintf(errf, "fatune explain: %s\n", err);
      status = rc == 2 ? FAT_EXIT_USAGE : FAT_EXIT_FAILED;
      goto out;
    }
  }
  status = FAT_EXIT_FAILED;
  if (have_gpu) {
    int found = 0;
    if (fat_db_get_ceiling(db, gpu_id, FAT_CEILING_COPY_BANDWIDTH, &c.bandwidth, NULL, 0, &found))
      goto db_fail;
    c.bandwidth_measured = found;
    if (!found) c.bandwidth = 0;
    for (size_t k = 0; k < N_SHOWN_OPS; k++) {
      const fat_matrix_op op = shown_ops[k];
      /* none for e4m3; an fp8 K/V cache's Q's type's */
      const char *peak = fat_ceiling_peak_name(op, o.problem.dtype);
      found = 0;
      if (peak && fat_db_get_ceiling(db, gpu_id, peak, &c.peak[op], NULL, 0, &found))
        goto db_fail;
      if (!found) c.peak[op] = 0;
    }
    if (find_winner(db, gpu_id, &o.problem, &have_winner, &stored, &winner, others, sizeof others,
                    err, sizeof err))
      goto fail;
  }
  /* Flags given by hand override what was measured. */
  if (o.bandwidth > 0) {
    c.bandwidth = o.bandwidth;
    c.bandwidth_measured = 0;
  }
  c.given_peak = o.peak;

  fat_explain_print_model(out, &m);
  if (shipped) fprintf(out, "\n(your database has no GPU results: read from the shipped tables, %s)\n", db_path);
  if (shipped && n_gpus > 1 && !o.gpu_name[0])
    fprintf(out, "(they hold %d GPUs: %s, the most tuned, speaks for them; --gpu-name picks another)\n", n_gpus, gpu);
  if (!c.bandwidth_measured && !any_peak_measured(&c))
    fprintf(out, "\nno measured ceilings for %s in %s; run fatune on a GPU%s\n",
            have_gpu ? gpu : "this GPU", db_path,
            c.bandwidth > 0 || c.given_peak > 0 ? "" : " (or give --bandwidth TB/s and --peak TFLOP/s)");
  if (c.bandwidth > 0 || c.given_peak > 0 || any_peak_measured(&c))
    print_floors(out, &m, &c, have_gpu ? gpu : NULL);
  if (have_winner) {
    print_measured(out, &m, &c, gpu, &winner);
    if (print_eliminated(out, db, gpu_id, &winner)) goto db_fail;
  } else if (have_gpu) {
    fprintf(out, "\nno tuned winner on %s in %s for %s, head dim %d, %s, seqlen_q %d, seqlen_k %d",
            gpu, db_path, fat_dtype_name(o.problem.dtype), o.problem.head_dim,
            fat_mask_name(o.problem.mask), o.problem.seqlen_q, o.problem.seqlen_k);
    if (others[0]) {
      fprintf(out, " with batch %d, heads %d (K/V heads %d); stored: %s\n", o.problem.batch,
              o.problem.heads, o.problem.heads_k, others);
      /* What was measured is for its own batch and heads: shown at that shape. */
      fat_io_model at;
      if (fat_io_model_compute(&stored, &at, err, sizeof err) == 0) {
        print_measured(out, &at, &c, gpu, &winner);
        fprintf(out, "  (at the stored shape: batch %d, heads %d, K/V heads %d)\n", stored.batch, stored.heads,
                stored.heads_k);
        if (print_eliminated(out, db, gpu_id, &winner)) goto db_fail;
      }
    } else {
      fprintf(out, "\n");
    }
  }
  status = FAT_EXIT_OK;
  goto out;
db_fail:
  snprintf(err, sizeof err, "%s", fat_db_errmsg(db));
fail:
  fprintf(errf, "fatune explain: %s\n", err);
  status = FAT_EXIT_FAILED;
out:
  fat_db_close(db);
  return status;
}

int fat_explain_main(int argc, char **argv) {
  return fat_exit_flushed(stdout, "fatune explain", fat_explain_run(argc, argv, stdout, stderr));
}

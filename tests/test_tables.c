/* SPDX-License-Identifier: MIT */
/* Shipped tables (tuner/tables/tables.h) on databases built here: export -> import
 * -> export is byte-identical; importing or merging twice adds nothing; the
 * exported text is one INSERT per line, each variant without its source
 * (import fills the generator's in) and each cubin deflated; local windows
 * travel as part of the problem key; a table of format 1 (sources, plain
 * hex) exported by a fatune of schema 5 down to 1 (no window columns)
 * still imports, and a database of each of those schemas still merges,
 * both to what today's export gives; an import that tries anything but
 * INSERT into fatune's tables is refused with its reason; a re-export
 * keeps the ids of the table it replaces, so that only the changed rows'
 * lines differ; the command line's usage errors. The winners are real variants of today's generator
 * (import and merge refuse any other: test_tables_trust shows how), and the
 * imports keep cubins as the build's own tables do, so that a round trip
 * gives the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "db.h"
#include "gen.h"
#include "sha256.h"
#include "tables.h"
#include "problems.h"
#include "check.h"

#define H200 "NVIDIA H200"

/* A winner with a cubin build, a source with quotes and newlines, two
 * checks and a fractional timing: everything export must carry exactly. */
/* When set, the next put_variant's problem has this window {left, right}. */
static const int *window_override;
static int reps_override;  /* put_variant's timing: this many repetitions (0: 20) */
/* When set, the next put_variant's problem is this variable-length profile. */
static const char *lengths_override;
/* When set, the next put_variant's build has this log (else "ptxas info"). */
static const char *log_override;
/* When set, the next put_variant's problem reads a paged cache of this page size. */
static int page_override;

/* The generator, and what the imports and merges here are checked against. */
static fat_gen *gen;
static fat_trust *trust;

/* Today's space for (direction, bf16, mask, d128) on sm_90a, expanded on
 * first need and kept for the whole test. */
static fat_variant *cache[2][3];
static size_t n_cache[2][3];

/* The source of the variant of the cache whose hash is HASH, or NULL. */
static const char *cached_source(const char *hash) {
  for (int d = 0; d < 2; d++)
    for (int m = 0; m < 3; m++)
      for (size_t i = 0; i < n_cache[d][m]; i++)
        if (!strncmp(cache[d][m][i].hash, hash, 64)) return cache[d][m][i].source;
  return NULL;
}

/* The K-th variant of today's space for (DIR, bf16, MK, d128) on sm_90a
 * whose params contain WITH ("" for any). Kept for the whole test. */
static const fat_variant *real_variant(fat_direction dir, fat_mask mk, const char *with, int k) {
  char err[1024];
  if (!cache[dir][mk]) {
    int hd = 128;
    fat_dtype dt = FAT_BF16;
    fat_gen_query q = {.direction = dir, .head_dims = &hd, .n_head_dims = 1, .dtypes = &dt,
                       .n_dtypes = 1, .masks = &mk, .n_masks = 1, .arch = "sm_90a"};
    REQUIRE_EXIT(fat_gen_variants(gen, &q, &cache[dir][mk], &n_cache[dir][mk], NULL, NULL, err,
                                  sizeof err) == 0);
  }
  for (size_t i = 0; i < n_cache[dir][mk]; i++)
    if (strstr(cache[dir][mk][i].params, with) && k-- == 0) return &cache[dir][mk][i];
  REQUIRE_EXIT(!"no such variant");
  return NULL;
}

/* The first variant of FAMILY for (forward, bf16, MK, d128). */
static const fat_variant *family_variant(fat_mask mk, const char *family) {
  for (int k = 0;; k++) {
    const fat_variant *v = real_variant(FAT_FWD, mk, "", k);
    if (!strcmp(v->family, family)) return v;
  }
}

/* V as a result on GPU at SEQLEN (its problem: V's direction, dtype, mask
 * and head dim; the window or profile of the overrides), with a cubin
 * build, two checks (the second failed unless PASSED) and a fractional
 * timing, the winner if WINNER: everything export must carry exactly. */
static void put_variant(fat_db *db, const char *gpu, const fat_variant *v, int seqlen, double ms,
                        int passed, int winner) {
  fat_gpu_info g = {0};
  snprintf(g.name, sizeof g.name, "%s", gpu);
  g.cc_major = 9, g.sm_count = 132, g.driver_version = 13000, g.nvrtc_major = 13;
  g.mem_bytes = 150ull << 30, g.smem_per_block_optin = 232448;
  fat_problem p;
  fat_bench_problem(v->dtype, v->mask, v->head_dim, seqlen, &p);
  p.direction = v->direction;
  if (window_override) p.window_left = window_override[0], p.window_right = window_override[1];
  if (lengths_override) {
    char why[256];
    REQUIRE_EXIT(fat_lengths_parse(lengths_override, &p.lengths, why, sizeof why) == 0);
    fat_lengths_apply(&p);
  }
  p.page_size = page_override;
  unsigned char cubin[] = {0x7f, 'E', 'L', 'F', 0, 1, 0xff};
  fat_build b = {0};
  snprintf(b.arch, sizeof b.arch, "sm_90a");
  fat_sha256_hex(v->name, strlen(v->name), b.key);
  b.ok = 1, b.cubin = cubin, b.cubin_size = sizeof cubin, b.registers = 168, b.compile_ms = 812.25;
  b.log = (char *)(log_override ? log_override : "ptxas info");
  fat_check c1 = {.batch = 1, .heads = 2, .seqlen_q = 256, .seqlen_k = 256, .rel_l2 = 0.0021,
                  .max_abs = 0.0123, .lse_max_abs = 1e-5, .nonfinite = 0, .passed = 1,
                  .reason = "ok"};
  fat_check c2 = {.batch = 1, .heads = 2, .seqlen_q = 203, .seqlen_k = 203, .rel_l2 = 1.0 / 3.0,
                  .max_abs = 0.1, .lse_max_abs = 2e-6, .nonfinite = 0, .passed = passed,
                  .reason = "ok"};
  if (!passed) snprintf(c2.reason, sizeof c2.reason, "dQ rel_l2 3.3e-01 > 2.0e-02");
  c2.rel_l2 = 0.0019999999999999999;
  fat_timing t = {.reps = reps_override ? reps_override : 20, .median_ms = ms, .min_ms = ms * 0.9, .max_ms = ms * 1.2,
                  .p10_ms = ms * 0.95, .p90_ms = ms * 1.05, .tflops = 1.0 / ms,
                  .sm_clock_mhz = 1755};
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  REQUIRE_EXIT(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE_EXIT(fat_db_put_variant(db, v, &vid) == 0);
  REQUIRE_EXIT(fat_db_put_build(db, vid, &b, "--std=c++17", "13.0") == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c1) == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c2) == 0);
  REQUIRE_EXIT(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  if (winner) REQUIRE_EXIT(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
}

static void put_winner(fat_db *db, const char *gpu, const fat_variant *v, int seqlen, double ms) {
  put_variant(db, gpu, v, seqlen, ms, 1, 1);
}

/* A winner whose variant the generator does not make (a stand-in source
 * with quotes, a tab and CR LF; or SOURCE): for what export writes. */
static void put_stand_in(fat_db *db, const char *vname, const char *source) {
  char text[256];
  fat_variant v = *real_variant(FAT_FWD, FAT_MASK_NONE, "", 0);
  snprintf(text, sizeof text, "// '%s'\n\textern \"C\" __global__ void f() {}\r\n", vname);
  v.name = (char *)vname, v.entry = "f", v.source = source ? (char *)source : text;
  fat_sha256_hex(v.source, strlen(v.source), v.hash);
  put_winner(db, H200, &v, 1024, 1.0);
}

/* The export of PATH's GPU rows, keeping the ids of IDS (NULL: numbered afresh). */
static char *export_with_ids(const char *path, const char *gpu, const fat_table_ids *ids) {
  char err[1024];
  fat_db *db = NULL;
  char *buf = NULL;
  size_t len = 0;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  FILE *f = open_memstream(&buf, &len);
  int rc = fat_tables_export(db, gpu, ids, f, err, sizeof err);
  fclose(f);
  if (rc) fprintf(stderr, "export: %s\n", err);
  REQUIRE_EXIT(rc == 0);
  fat_db_close(db);
  return buf;
}

static char *export_text(const char *path, const char *gpu) {
  return export_with_ids(path, gpu, NULL);
}

/* As the build imports the shipped tables: cubins kept, so that a round
 * trip gives the same bytes. */
static fat_import_options shipped(void) {
  return (fat_import_options){.trust = trust, .cubins = FAT_CUBINS_SHIPPED};
}

static long long import_text(const char *path, const char *text, char *err, size_t errlen) {
  fat_db *db = NULL;
  fat_tables_report r;
  const fat_import_options o = shipped();
  long long added = -1;
  REQUIRE_EXIT(fat_db_open(path, &db, err, errlen) == 0);
  if (fat_tables_import(db, text, "t.sql", &o, &r, err, errlen) == 0) added = r.added;
  fat_db_close(db);
  return added;
}

/* fat_tables_merge of PATH into DB as the build would; *ADDED its new rows. */
static int merge(fat_db *db, const char *path, long long *added, char *err, size_t errlen) {
  fat_tables_report r;
  const fat_import_options o = shipped();
  int rc = fat_tables_merge(db, path, &o, &r, err, errlen);
  *added = rc ? -1 : r.added;
  return rc;
}

/* How many of PATH's variants have the source the cache gives their hash
 * (-1 when one has another, or none). */
static int generators_sources(const char *path) {
  sqlite3 *h = NULL;
  sqlite3_stmt *s = NULL;
  int n = 0;
  REQUIRE_EXIT(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
  REQUIRE_EXIT(sqlite3_prepare_v2(h, "SELECT source_hash, source FROM variants", -1, &s, NULL) ==
               SQLITE_OK);
  while (n >= 0 && sqlite3_step(s) == SQLITE_ROW) {
    const char *want = cached_source((const char *)sqlite3_column_text(s, 0));
    const char *got = (const char *)sqlite3_column_text(s, 1);
    n = want && got && !strcmp(want, got) ? n + 1 : -1;
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return n;
}

/* LINE (a heap copy of one line of a table) with each fat_inflate(X'<zlib
 * stream>', N) spelled as format 1 spelled a cubin, X'<N bytes' hex>'
 * (heap; LINE freed). */
static char *plain_blobs(char *line) {
  static const char *const call = "fat_inflate(X'";
  char *at;
  while ((at = strstr(line, call))) {
    const char *hex = at + strlen(call), *end = strchr(hex, '\'');
    REQUIRE_EXIT(end && end[1] == ',');
    const size_t zn = (size_t)(end - hex) / 2;
    char *close = strchr(end, ')');
    REQUIRE_EXIT(close);
    uLongf n = strtoul(end + 2, NULL, 10);
    unsigned char *z = malloc(zn + 1), *b = malloc(n + 1);
    REQUIRE_EXIT(z && b);
    for (size_t i = 0; i < zn; i++) REQUIRE_EXIT(sscanf(hex + 2 * i, "%2hhx", &z[i]) == 1);
    REQUIRE_EXIT(uncompress(b, &n, z, (uLong)zn) == Z_OK);
    char *out = malloc(strlen(line) + 2 * n + 4), *o = out;
    REQUIRE_EXIT(out);
    o += sprintf(o, "%.*sX'", (int)(at - line), line);
    for (uLongf i = 0; i < n; i++) o += sprintf(o, "%02x", b[i]);
    sprintf(o, "'%s", close + 1);
    free(z), free(b), free(line);
    line = out;
  }
  return line;
}

/* TEXT as a fatune of schema VERSION (1 to 5) exported it, in table format
 * 1: each variant with its source (the cache's, by its hash; a literal
 * over several lines, as SQL allows), each cubin in plain hex
 * (plain_blobs); version 3's rows are otherwise
 * today's (versions 4 to 6 added a table tables do not carry, and let a
 * variant's source be NULL); version 2's problems have no lengths column
 * (every problem dense), and version 1's no window columns either (every
 * window 0, 0); the header naming the version. */
static char *as_old_export(const char *text, int version) {
  static const char *const lengths_col = ", lengths", *lengths_val = ", '');\n";
  static const char *const window_cols = ", window_left, window_right", *window_vals = ", 0, 0);\n";
  static const char *const hash_col = "source_hash, ", *source_col = "source, ";
  char now[32], *out = NULL;
  size_t out_len = 0, longest = 0;
  for (int d = 0; d < 2; d++)
    for (int m = 0; m < 3; m++)
      for (size_t i = 0; i < n_cache[d][m]; i++)
        if (strlen(cache[d][m][i].source) > longest) longest = strlen(cache[d][m][i].source);
  FILE *f = open_memstream(&out, &out_len);
  REQUIRE_EXIT(f);
  snprintf(now, sizeof now, "schema version %d;", FAT_DB_SCHEMA_VERSION);
  for (const char *l = text; *l;) {
    const char *nl = strchr(l, '\n');
    size_t len = nl ? (size_t)(nl - l) + 1 : strlen(l);
    if (!strncmp(l, FAT_TABLES_MAGIC, strlen(FAT_TABLES_MAGIC))) {
      fputs(FAT_TABLES_MAGIC_V1, f);
      len -= strlen(FAT_TABLES_MAGIC), l += strlen(FAT_TABLES_MAGIC);
    }
    if (!strncmp(l, "INSERT INTO builds ", 19)) {
      char *plain = plain_blobs(strndup(l, len));
      REQUIRE_EXIT(plain);
      fputs(plain, f);
      free(plain);
      l += len;
      continue;
    }
    /* The line, edited in place: room for a source with every quote doubled. */
    char *w = malloc(len + 2 * longest + 64);
    REQUIRE_EXIT(w);
    memcpy(w, l, len);
    w[len] = 0;
    if (!strncmp(w, "INSERT INTO variants ", 21)) {
      /* The source after the 64-digit hash, its column after hash's. */
      char *c = strstr(w, hash_col), *q = strstr(w, ") VALUES (");
      REQUIRE_EXIT(c && q);
      c += strlen(hash_col);
      memmove(c + strlen(source_col), c, strlen(c) + 1);
      memcpy(c, source_col, strlen(source_col));
      char *hq = NULL;
      for (char *p = strchr(q, '\''); p && !hq; p = strchr(p + 1, '\''))
        if (strspn(p + 1, "0123456789abcdef") == 64 && p[65] == '\'') hq = p;
      REQUIRE_EXIT(hq);
      const char *src = cached_source(hq + 1);
      REQUIRE_EXIT(src);
      char *tail = strdup(hq + 66), *o = hq + 66;
      REQUIRE_EXIT(tail);
      o += sprintf(o, ", '");
      for (const char *c2 = src; *c2; c2++) {
        if (*c2 == '\'') *o++ = '\'';
        *o++ = *c2;
      }
      *o++ = '\'';
      strcpy(o, tail);
      free(tail);
    }
    char *h = strstr(w, now);
    if (version <= 2 && !strncmp(w, "INSERT INTO problems ", 21)) {
      char *c = strstr(w, lengths_col), *v = strstr(w, lengths_val);
      REQUIRE_EXIT(c && v);
      memmove(v, v + 4, strlen(v + 4) + 1);  /* ", '');" -> ");" */
      memmove(c, c + strlen(lengths_col), strlen(c + strlen(lengths_col)) + 1);
      if (version == 1) {
        c = strstr(w, window_cols), v = strstr(w, window_vals);
        REQUIRE_EXIT(c && v);
        memmove(v, v + 6, strlen(v + 6) + 1);  /* ", 0, 0);" -> ");" */
        memmove(c, c + strlen(window_cols), strlen(c + strlen(window_cols)) + 1);
      }
    }
    if (h) {  /* today's number (two digits since version 10) for the old one */
      char was[32];
      snprintf(was, sizeof was, "schema version %d;", version);
      REQUIRE_EXIT(strlen(was) <= strlen(now));
      memmove(h + strlen(was), h + strlen(now), strlen(h + strlen(now)) + 1);
      memcpy(h, was, strlen(was));
    }
    fputs(w, f);
    free(w);
    l += len;
  }
  REQUIRE_EXIT(fclose(f) == 0);
  return out;
}

/* A database of schema VERSION (1 to 5) at PATH holding the rows of TEXT,
 * a table of that version (its INSERTs run as they are, as that fatune's
 * own import would have). */
static void make_old_db(const char *path, int version, const char *text) {
  char schema_path[4096], *schema = NULL;
  const char *src = getenv("FATUNE_SOURCE_DIR");
  REQUIRE_EXIT(src);
  snprintf(schema_path, sizeof schema_path, "%s/tests/data/schema_v%d.sql", src, version);
  FILE *f = fopen(schema_path, "rb");
  size_t n = 0;
  REQUIRE_EXIT(f && (schema = calloc(1, 1 << 20)) && (n = fread(schema, 1, (1 << 20) - 1, f)) > 0);
  fclose(f);
  sqlite3 *h = NULL;
  char *msg = NULL;
  REQUIRE_EXIT(sqlite3_open(path, &h) == SQLITE_OK);
  int rc = sqlite3_exec(h, schema, NULL, NULL, &msg);
  if (rc == SQLITE_OK) rc = sqlite3_exec(h, text, NULL, NULL, &msg);
  if (rc) fprintf(stderr, "schema-%d database: %s\n", version, msg);
  REQUIRE_EXIT(rc == SQLITE_OK);
  sqlite3_close(h);
  free(schema);
}

static int count_lines(const char *s, const char *prefix) {
  int n = 0;
  for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    n += !strncmp(l, prefix, strlen(prefix));
  return n;
}

/* ---- stable ids ---------------------------------------------------------- */

/* The lines of TEXT, each a heap copy without its newline; *N their number. */
static char **split_lines(const char *text, size_t *n) {
  size_t cap = 64;
  char **lines = malloc(cap * sizeof *lines);
  REQUIRE_EXIT(lines);
  *n = 0;
  for (const char *l = text; *l;) {
    const char *nl = strchr(l, '\n');
    const size_t len = nl ? (size_t)(nl - l) : strlen(l);
    if (*n == cap) REQUIRE_EXIT((lines = realloc(lines, (cap *= 2) * sizeof *lines)));
    REQUIRE_EXIT((lines[*n] = strndup(l, len)));
    (*n)++;
    l += len + (nl != NULL);
  }
  return lines;
}

static void free_lines(char **lines, size_t n) {
  for (size_t i = 0; i < n; i++) free(lines[i]);
  free(lines);
}

static int has_line(char *const *lines, size_t n, const char *line) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(lines[i], line)) return 1;
  return 0;
}

/* The table of each line of A that B lacks, in A's order, a word each
 * ("variants builds ..."): what a diff from A to B takes away. */
static void lines_gone(char *const *a, size_t na, char *const *b, size_t nb, char *out,
                       size_t cap) {
  size_t len = 0;
  out[0] = 0;
  for (size_t i = 0; i < na && len < cap; i++) {
    char table[64] = "(not an INSERT)";
    if (has_line(b, nb, a[i])) continue;
    sscanf(a[i], "INSERT INTO %63s", table);
    len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? " " : "", table);
  }
}

/* 1 when the lines A and B share come in the same order in both. */
static int same_order(char *const *a, size_t na, char *const *b, size_t nb) {
  for (size_t i = 0, j = 0;; i++, j++) {
    while (i < na && !has_line(b, nb, a[i])) i++;
    while (j < nb && !has_line(a, na, b[j])) j++;
    if (i == na || j == nb) return i == na && j == nb;
    if (strcmp(a[i], b[j])) return 0;
  }
}

/* The last line of TEXT that starts with PREFIX (a heap copy), or "". */
static char *last_line(const char *text, const char *prefix) {
  const char *last = NULL;
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (!strncmp(l, prefix, strlen(prefix))) last = l;
  char *copy = last ? strndup(last, strcspn(last, "\n")) : strdup("");
  REQUIRE_EXIT(copy);
  return copy;
}

/* TEXT with its first OLD replaced by NEW (a heap copy). */
static char *replaced(const char *text, const char *old, const char *new) {
  const char *at = strstr(text, old);
  REQUIRE_EXIT(at);
  char *out = malloc(strlen(text) - strlen(old) + strlen(new) + 1);
  REQUIRE_EXIT(out);
  sprintf(out, "%.*s%s%s", (int)(at - text), text, new, at + strlen(old));
  return out;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  REQUIRE_EXIT(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* Each winner of the database at PATH as "variant@seqlen", by seqlen. */
static char *winners_of(const char *path) {
  char err[1024];
  fat_db *db = NULL;
  sqlite3_stmt *s = NULL;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  REQUIRE_EXIT(sqlite3_prepare_v2(fat_db_handle(db),
                                  "SELECT group_concat(w, ' ') FROM (SELECT v.name || '@' ||"
                                  " p.seqlen_q AS w FROM winners x JOIN variants v ON v.id ="
                                  " x.variant_id JOIN problems p ON p.id = x.problem_id ORDER BY"
                                  " p.seqlen_q)", -1, &s, NULL) == SQLITE_OK);
  REQUIRE_EXIT(sqlite3_step(s) == SQLITE_ROW);
  char *w = strdup(sqlite3_column_text(s, 0) ? (const char *)sqlite3_column_text(s, 0) : "");
  sqlite3_finalize(s);
  fat_db_close(db);
  return w;
}

/* The ids of table TEXT, which must read. */
static fat_table_ids *ids_of(const char *text) {
  char err[1024];
  fat_table_ids *ids = fat_table_ids_read(text, "previous.sql", H200, err, sizeof err);
  if (!ids) fprintf(stderr, "ids: %s\n", err);
  REQUIRE_EXIT(ids);
  return ids;
}

/* An export keeps the ids of the table it replaces. After a re-tune that
 * gives one problem the winner of a new variant, retires the winner of
 * another and measures a ceiling again, the lines of those rows and no
 * others differ from the first export: every other line stays as it was,
 * where it was; the new rows come after the previous largest id of their
 * table, at the end of its lines, and the retired ones leave gaps. The
 * result imports to the database's winners, and exports again to itself.
 * Without the previous table the rows are numbered afresh (the same rows
 * then take other ids), and a previous table that is no table, is cut or
 * is another GPU's is refused by name. */
static void reexport_keeps_ids(const char *dir) {
  char path[300], path2[300], out_path[320], prev_path[320], err[1024], gone[1024];
  fat_db *db = NULL;
  sqlite3_stmt *s = NULL;
  snprintf(path, sizeof path, "%s/stable.db", dir);
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  /* Problems s1024, s2048 and s4096, each won by a variant of its own
   * (the export numbers them s4096, s2048, s1024: by batch), and two
   * ceilings. */
  for (int k = 0; k < 3; k++)
    put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_NONE, "", k), 1024 << k, 1.0 + k);
  REQUIRE_EXIT(fat_db_put_ceiling(db, 1, FAT_CEILING_COPY_BANDWIDTH, 3.7e12,
                                  FAT_CEILING_UNIT_BANDWIDTH) == 0);
  REQUIRE_EXIT(fat_db_put_ceiling(db, 1, FAT_CEILING_PEAK_BF16, 6.0e14, FAT_CEILING_UNIT_FLOPS) == 0);
  fat_db_close(db);
  char *first = export_text(path, H200);
  char *s1024 = last_line(first, "INSERT INTO problems ");
  CHECK(strstr(s1024, ") VALUES (3, 'fwd', 'bf16', 'none', 128, 16, 16, 16, 1024, 1024,") != NULL);

  /* Nothing changed: the same bytes, from today's table or one of schema 1. */
  fat_table_ids *ids = ids_of(first);
  char *again = export_with_ids(path, H200, ids);
  CHECK_STR(again, first);
  fat_table_ids_free(ids), free(again);
  char *old = as_old_export(first, 1);
  ids = ids_of(old);
  again = export_with_ids(path, H200, ids);
  CHECK_STR(again, first);
  fat_table_ids_free(ids), free(again), free(old);

  /* The re-tune. */
  const fat_variant *fresh = real_variant(FAT_FWD, FAT_MASK_NONE, "", 3);
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  put_winner(db, H200, fresh, 2048, 0.5);
  REQUIRE_EXIT(sqlite3_prepare_v2(fat_db_handle(db), "SELECT id FROM problems WHERE seqlen_q = 4096",
                                  -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW);
  REQUIRE_EXIT(fat_db_forget(db, 1, sqlite3_column_int64(s, 0), NULL) == 0);
  sqlite3_finalize(s);
  REQUIRE_EXIT(fat_db_put_ceiling(db, 1, FAT_CEILING_COPY_BANDWIDTH, 3.6e12,
                                  FAT_CEILING_UNIT_BANDWIDTH) == 0);
  fat_db_close(db);
  ids = ids_of(first);
  char *second = export_with_ids(path, H200, ids);
  fat_table_ids_free(ids);
  size_t n1, n2;
  char **l1 = split_lines(first, &n1), **l2 = split_lines(second, &n2);
  /* Gone: the ceiling's old value; the variants that no longer win (the
   * retired s4096's and s2048's old one) with their builds, hashes, checks
   * and timings; the s4096 problem; the two winners. Come: the ceiling's
   * new value, the new variant's rows, s2048's new winner. */
  lines_gone(l1, n1, l2, n2, gone, sizeof gone);
  CHECK_STR(gone, "ceilings variants variants builds builds build_hashes build_hashes problems "
                  "checks checks checks checks timings timings winners winners");
  lines_gone(l2, n2, l1, n1, gone, sizeof gone);
  CHECK_STR(gone, "ceilings variants builds build_hashes checks checks timings winners");
  CHECK(same_order(l1, n1, l2, n2));
  /* Changed values keep their id and place; new rows count on from 3
   * variants, 3 builds, 6 checks and 3 timings, last in their tables. */
  CHECK(strstr(second, "\nINSERT INTO ceilings (id, gpu_id, name, value, unit, measured_at) VALUES "
                       "(1, 1, 'copy_bandwidth', 3600000000000, 'B/s', '") != NULL);
  char *line = last_line(second, "INSERT INTO variants "), want[512];
  snprintf(want, sizeof want, ") VALUES (4, '%s', ", fresh->name);
  CHECK_CONTAINS(line, want);
  free(line), line = last_line(second, "INSERT INTO builds ");
  CHECK_CONTAINS(line, ") VALUES (4, '");
  free(line), line = last_line(second, "INSERT INTO checks ");
  CHECK_CONTAINS(line, ") VALUES (8, 4, 1, 2, ");
  free(line), line = last_line(second, "INSERT INTO timings ");
  CHECK_CONTAINS(line, ") VALUES (4, 4, 1, 2, ");
  free(line);
  CHECK_INT(count_lines(second, "INSERT INTO winners (gpu_id, problem_id, variant_id, timing_id, "
                                "chosen_at) VALUES (1, 2, 4, 4, "), 1);
  /* s1024 keeps id 3, which a fresh numbering gives it no more. */
  CHECK(has_line(l2, n2, s1024));
  char *dense = export_text(path, H200);
  CHECK(strstr(dense, s1024) == NULL);
  CHECK_CONTAINS(dense, ") VALUES (2, 'fwd', 'bf16', 'none', 128, 16, 16, 16, 1024, 1024,");
  free_lines(l1, n1), free_lines(l2, n2);

  /* The second file with its gaps exports to itself, and imports to the
   * database's winners and rows. */
  ids = ids_of(second);
  again = export_with_ids(path, H200, ids);
  CHECK_STR(again, second);
  free(again);
  snprintf(path2, sizeof path2, "%s/stable-imported.db", dir);
  CHECK_INT(import_text(path2, second, err, sizeof err), 1 + 2 + 2 + 2 + 2 + 2 + 4 + 2 + 2);
  char *w1 = winners_of(path), *w2 = winners_of(path2);
  snprintf(want, sizeof want, "%s@1024 %s@2048", real_variant(FAT_FWD, FAT_MASK_NONE, "", 0)->name,
           fresh->name);
  CHECK_STR(w1, want);
  CHECK_STR(w2, w1);
  again = export_text(path2, H200);
  CHECK_STR(again, dense);
  free(again);
  again = export_with_ids(path2, H200, ids);
  CHECK_STR(again, second);
  fat_table_ids_free(ids), free(again), free(w1), free(w2);

  /* A previous table that is none is refused by name, as import refuses it. */
  CHECK(fat_table_ids_read("garbage\n", "g.sql", H200, err, sizeof err) == NULL);
  CHECK_STR(err, "g.sql: not a fatune table (first line must start '-- fatune tables 2')");
  char *cut = strndup(second, strlen(second) / 2);
  CHECK(fat_table_ids_read(cut, "cut.sql", H200, err, sizeof err) == NULL);
  CHECK_STR(err, "cut.sql: truncated: the file does not end with the line '-- end of fatune tables'");
  free(cut);
  CHECK(fat_table_ids_read("-- fatune tables 1\nDELETE FROM winners;\n-- end of fatune tables\n",
                           "evil.sql", H200, err, sizeof err) == NULL);
  CHECK_STR(err, "evil.sql:2: refused DELETE FROM 'winners': a table may only INSERT into fatune's "
                 "tables");
  char *dup = replaced(second, "INSERT INTO gpus ", "INSERT INTO gpus (id, name, cc_major, cc_minor,"
                       " sm_count, driver_version, nvrtc_major, nvrtc_minor, mem_bytes,"
                       " smem_per_block_optin, l2_bytes, clock_khz, mem_clock_khz) VALUES (1, 'X',"
                       " 9, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0);\nINSERT INTO gpus ");
  CHECK(fat_table_ids_read(dup, "dup.sql", H200, err, sizeof err) == NULL);
  CHECK_STR(err, "dup.sql:7: UNIQUE constraint failed: gpus.id");
  free(dup);
  /* An id it cannot count on from, or that export never writes. */
  char *big = replaced(second, ") VALUES (8, ", ") VALUES (9007199254740993, ");
  CHECK(fat_table_ids_read(big, "big.sql", H200, err, sizeof err) == NULL);
  CHECK_STR(err, "big.sql: checks id 9007199254740993 is outside 1 to 9007199254740992");
  free(big);
  char *zero = replaced(second, ") VALUES (8, ", ") VALUES (0, ");
  CHECK(fat_table_ids_read(zero, "zero.sql", H200, err, sizeof err) == NULL);
  CHECK_STR(err, "zero.sql: checks id 0 is outside 1 to 9007199254740992");
  free(zero);
  /* Another GPU's table shares no row with this export. */
  CHECK(fat_table_ids_read(second, "h100.sql", "NVIDIA H100", err, sizeof err) == NULL);
  CHECK_STR(err, "h100.sql: a table of GPU 'NVIDIA H200', not 'NVIDIA H100'");

  /* The command: -o over the previous table keeps its ids; over a file
   * that is no table it refuses and leaves the file, which --renumber
   * replaces; an empty file (mktemp's) has no ids to keep; --ids-from
   * reads another file even where -o's exists. */
  snprintf(out_path, sizeof out_path, "%s/stable.sql", dir);
  snprintf(prev_path, sizeof prev_path, "%s/previous.sql", dir);
  char *exp[] = {"export", "--db", path, "--gpu-name", H200, "-o", out_path, NULL, NULL};
  write_text(out_path, first);
  CHECK_INT(fat_tables_main(7, exp), 0);
  char *got = check_read_file(out_path);
  CHECK_STR(got, second);
  free(got);
  write_text(out_path, "garbage\n");
  CHECK_INT(fat_tables_main(7, exp), 1);
  got = check_read_file(out_path);
  CHECK_STR(got, "garbage\n");
  free(got);
  exp[7] = "--renumber";
  CHECK_INT(fat_tables_main(8, exp), 0);
  got = check_read_file(out_path);
  CHECK_STR(got, dense);
  free(got);
  write_text(out_path, "");
  CHECK_INT(fat_tables_main(7, exp), 0);
  got = check_read_file(out_path);
  CHECK_STR(got, dense);
  free(got);
  write_text(prev_path, first);
  exp[7] = "--ids-from", exp[8] = prev_path;
  CHECK_INT(fat_tables_main(9, exp), 0);
  got = check_read_file(out_path);
  CHECK_STR(got, second);
  free(got);

  free(first), free(second), free(dense), free(s1024);
}

/* A backward winner timed twice, whose earlier timing is the faster: the
 * winner's timing and the deterministic pick (the fastest) are two timings
 * of one variant, and its checks (two rounds of the same shapes) go out
 * once each. Rows of one natural key keep their ids, each its own. */
static void one_variant_timed_twice(const char *dir) {
  char path[300], path2[300], err[1024];
  fat_db *db = NULL;
  const fat_variant *sep = real_variant(FAT_BWD, FAT_MASK_NONE, "DQ_MODE=separate", 0);
  snprintf(path, sizeof path, "%s/twice.db", dir);
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  put_variant(db, H200, sep, 2048, 2.0, 1, 0);
  put_variant(db, H200, sep, 2048, 3.0, 1, 1);
  fat_db_close(db);
  char *text = export_text(path, H200);
  CHECK_INT(count_lines(text, "INSERT INTO variants "), 1);
  CHECK_INT(count_lines(text, "INSERT INTO timings "), 2);
  CHECK_INT(count_lines(text, "INSERT INTO checks "), 4);
  CHECK_INT(count_lines(text, "INSERT INTO winners (gpu_id, problem_id, variant_id, timing_id, "
                              "chosen_at) VALUES (1, 1, 1, 2, "), 1);
  fat_table_ids *ids = ids_of(text);
  char *again = export_with_ids(path, H200, ids);
  CHECK_STR(again, text);
  free(again);
  snprintf(path2, sizeof path2, "%s/twice-imported.db", dir);
  CHECK(import_text(path2, text, err, sizeof err) > 0);
  again = export_with_ids(path2, H200, ids);
  CHECK_STR(again, text);
  free(again);
  again = export_text(path2, H200);
  CHECK_STR(again, text);
  fat_table_ids_free(ids), free(again), free(text);
}

/* Peers' timings (external_timings, bench/store_peers.py) travel with the
 * problems they time: export writes each source's latest of each exported
 * problem (not an older one, not one of a problem without a winner, not
 * another GPU's), import and merge bring them in once, and a peer's row a
 * stranger could forge -- an unknown source, an impossible time -- is
 * refused with the row named. */
static void peers_travel(const char *dir) {
  char path[300], path2[300], path3[300], err[1024];
  fat_db *db = NULL;
  snprintf(path, sizeof path, "%s/peers.db", dir);
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 0), 4096, 0.9);
  put_variant(db, H200, real_variant(FAT_FWD, FAT_MASK_NONE, "", 0), 2048, 1.5, 1, 0); /* no winner */
  put_winner(db, "NVIDIA A100-SXM4-80GB", real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 1), 4096, 2.0);
  sqlite3 *h = fat_db_handle(db);
  REQUIRE_EXIT(sqlite3_exec(h,
      "INSERT INTO external_timings (gpu_id, problem_id, source, median_ms, tflops, measured_at)"
      " SELECT g.id, p.id, s.source, s.ms, 1.0, s.at FROM gpus g, problems p, (SELECT 'sdpa_cudnn'"
      " AS source, 1.1 AS ms, '2026-12-01T00:00:00.000Z' AS at UNION ALL SELECT 'sdpa_cudnn', 0.8,"
      " '2026-12-02T00:00:00.000Z' UNION ALL SELECT 'sdpa_flash', 1.3, '2026-12-02T00:00:00.000Z')"
      " s ORDER BY g.id, p.id, s.at, s.source", NULL, NULL, NULL) == SQLITE_OK);
  fat_db_close(db);
  char *text = export_text(path, H200);
  /* The H200's causal problem alone: cuDNN's latest (0.8) and FA2's. */
  CHECK_INT(count_lines(text, "INSERT INTO external_timings "), 2);
  CHECK_WHY(strstr(text, "'sdpa_cudnn', 0.80000000000000004, 1, '2026-12-02T00:00:00.000Z');\n") != NULL, "%s",
            strstr(text, "INSERT INTO external_timings") ? strstr(text, "INSERT INTO external_timings") : text);
  CHECK(strstr(text, "'sdpa_cudnn', 1.1") == NULL);
  snprintf(path2, sizeof path2, "%s/peers-imported.db", dir);
  CHECK(import_text(path2, text, err, sizeof err) > 0);
  char *again = export_text(path2, H200);
  CHECK_STR(again, text);
  free(again);
  CHECK_INT(import_text(path2, text, err, sizeof err), 0);
  /* Merged from the database: the same rows, once. */
  snprintf(path3, sizeof path3, "%s/peers-merged.db", dir);
  REQUIRE_EXIT(fat_db_open(path3, &db, err, sizeof err) == 0);
  long long added = -1;
  CHECK_INT(merge(db, path2, &added, err, sizeof err), 0);
  CHECK_INT(merge(db, path2, &added, err, sizeof err), 0);
  CHECK_INT(added, 0);
  fat_db_close(db);
  again = export_text(path3, H200);
  CHECK_STR(again, text);
  free(again);
  /* Forged rows are refused by name. */
  static const struct { const char *from, *to, *why; } forged[] = {
      {"'sdpa_flash'", "'sdpa_fastest'", "source 'sdpa_fastest' is none the benchmarks store"},
      {"'sdpa_flash', 1.3", "'sdpa_flash', 1e-9", "median_ms 1e-09 is outside"},
  };
  for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
    char *bad = replaced(text, forged[i].from, forged[i].to), bad_db[320];
    REQUIRE_EXIT(bad);
    snprintf(bad_db, sizeof bad_db, "%s/peers-forged-%zu.db", dir, i);
    CHECK_INT(import_text(bad_db, bad, err, sizeof err), -1);
    CHECK_WHY(strstr(err, "external_timings row") && strstr(err, forged[i].why), "%s", err);
    free(bad);
  }
  free(text);
}

int main(void) {
  char dir[] = "/tmp/fatune-tables-XXXXXX", a[256], b[256], c[256], err[1024];
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(a, sizeof a, "%s/a.db", dir);
  snprintf(b, sizeof b, "%s/b.db", dir);
  snprintf(c, sizeof c, "%s/c.db", dir);
  fat_db *db = NULL;
  REQUIRE_EXIT((gen = fat_gen_open(NULL, err, sizeof err)) && (trust = fat_trust_open(gen)));
  REQUIRE_EXIT(fat_db_open(a, &db, err, sizeof err) == 0);
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 0), 1024, 0.123456789);
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_NONE, "", 0), 2048, 1.5);
  const fat_variant *on_a100 = real_variant(FAT_FWD, FAT_MASK_NONE, "", 1);
  put_winner(db, "NVIDIA A100-SXM4-80GB", on_a100, 2048, 2.5);
  fat_db_close(db);

  /* Export: one GPU's rows, one INSERT per line, a header naming fatune. */
  char *first = export_text(a, H200);
  CHECK(!strncmp(first, FAT_TABLES_MAGIC ": the tuned winners for NVIDIA H200\n",
                 strlen(FAT_TABLES_MAGIC ": the tuned winners for NVIDIA H200\n")));
  CHECK(strstr(first, "-- Generated by fatune " FAT_VERSION " (fatune export)") != NULL);
  CHECK_INT(count_lines(first, "INSERT INTO gpus "), 1);
  CHECK_INT(count_lines(first, "INSERT INTO variants "), 2);
  CHECK_INT(count_lines(first, "INSERT INTO builds "), 2);
  CHECK_INT(count_lines(first, "INSERT INTO build_hashes "), 2);
  CHECK_INT(count_lines(first, "INSERT INTO checks "), 4);
  CHECK_INT(count_lines(first, "INSERT INTO timings "), 2);
  CHECK_INT(count_lines(first, "INSERT INTO winners "), 2);
  CHECK_INT(count_lines(first, "INSERT"), 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
  /* The cubin deflated (7 bytes), given back whole (the round trip). */
  CHECK(strstr(first, ", 1, fat_inflate(X'78da") != NULL && strstr(first, "', 7), 168,") != NULL);
  /* The variants go out by name and source hash, without their sources. */
  CHECK(strstr(first, "smem_bytes, source_hash, is_default, created_at) VALUES") != NULL);
  CHECK(strstr(first, "extern \"C\"") == NULL);
  CHECK(strstr(first, "A100") == NULL);
  CHECK(strstr(first, on_a100->name) == NULL);

  /* Round trip: byte-identical, each variant's source the generator's. */
  CHECK_INT(import_text(b, first, err, sizeof err), 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
  CHECK_INT(generators_sources(b), 2);
  char *second = export_text(b, H200);
  CHECK_STR(second, first);
  /* Importing again adds nothing. */
  CHECK_INT(import_text(b, first, err, sizeof err), 0);
  char *third = export_text(b, H200);
  CHECK_STR(third, first);

  /* Merge another machine's database: the A100 comes in once. */
  REQUIRE_EXIT(fat_db_open(b, &db, err, sizeof err) == 0);
  long long added = -1;
  CHECK_INT(merge(db, a, &added, err, sizeof err), 0);
  CHECK_INT(added, 8); /* the A100's gpu, variant, build, its hash, problem, 2 checks, timing... */
  CHECK_INT(merge(db, a, &added, err, sizeof err), 0);
  CHECK_INT(added, 0);
  CHECK_INT(merge(db, c, &added, err, sizeof err), -1);
  char want[512];
  snprintf(want, sizeof want, "cannot read %s: No such file or directory", c);
  CHECK_STR(err, want);
  fat_db_close(db);
  char *a100 = export_text(b, "NVIDIA A100-SXM4-80GB");
  CHECK_INT(count_lines(a100, "INSERT INTO winners "), 1);
  REQUIRE_EXIT(fat_db_open(b, &db, err, sizeof err) == 0);
  FILE *devnull = fopen("/dev/null", "w");
  CHECK_INT(fat_tables_export(db, "NVIDIA B200", NULL, devnull, err, sizeof err), -1);
  CHECK_STR(err, "no winners for GPU 'NVIDIA B200' in the database");
  fclose(devnull);
  fat_db_close(db);

  /* Import executes nothing but INSERTs into fatune's tables. */
  CHECK_INT(import_text(c, "-- fatune tables 1\nDROP TABLE winners;\n-- end of fatune tables\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql:2: refused DELETE FROM 'sqlite_master': a table may only INSERT into fatune's tables");
  CHECK_INT(import_text(c, "-- fatune tables 1\nINSERT INTO sqlite_master VALUES (1);\n-- end of fatune tables\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql:2: refused INSERT INTO 'sqlite_master': a table may only INSERT into fatune's tables");
  CHECK_INT(import_text(c, "-- fatune tables 1\nATTACH '/tmp/x.db' AS x;\n-- end of fatune tables\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql:2: refused ATTACH '/tmp/x.db': a table may only INSERT into fatune's tables");
  CHECK_INT(import_text(c, "-- fatune tables 1\nINSERT INTO gpus (name) SELECT load_extension('x');\n-- end of fatune tables\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql:2: refused SELECT: a table may only INSERT into fatune's tables");
  CHECK_INT(import_text(c, "INSERT INTO gpus VALUES (1);\n", err, sizeof err), -1);
  CHECK_STR(err, "t.sql: not a fatune table (first line must start '-- fatune tables 2')");
  REQUIRE_EXIT(fat_db_open(c, &db, err, sizeof err) == 0);
  sqlite3_stmt *s = NULL;
  REQUIRE_EXIT(sqlite3_prepare_v2(fat_db_handle(db), "SELECT count(*) FROM winners", -1, &s, NULL) == SQLITE_OK);
  REQUIRE_EXIT(sqlite3_step(s) == SQLITE_ROW);
  CHECK_INT(sqlite3_column_int(s, 0), 0);
  sqlite3_finalize(s);
  fat_db_close(db);

  /* A backward problem exports its winner and, for deterministic
   * gradients, its fastest passed variant of a deterministic dQ mode: not
   * a slower one, not a faster one that failed a check. */
  char d[256];
  const fat_variant *atomic = real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_MODE=atomic", 0);
  const fat_variant *sep_slow = real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_MODE=separate", 0);
  const fat_variant *sep_fast = real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_MODE=separate", 1);
  const fat_variant *sep_failed = real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_MODE=separate", 2);
  snprintf(d, sizeof d, "%s/d.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  put_variant(db, H200, atomic, 4096, 2.0, 1, 1);
  put_variant(db, H200, sep_slow, 4096, 3.5, 1, 0);
  put_variant(db, H200, sep_fast, 4096, 3.0, 1, 0);
  put_variant(db, H200, sep_failed, 4096, 2.5, 0, 0);
  fat_db_close(db);
  char *bwd = export_text(d, H200), quoted[256];
  CHECK_INT(count_lines(bwd, "INSERT INTO variants "), 2);
  CHECK_INT(count_lines(bwd, "INSERT INTO timings "), 2);
  CHECK_INT(count_lines(bwd, "INSERT INTO winners "), 1);
  snprintf(quoted, sizeof quoted, "'%s'", atomic->name);
  CHECK(strstr(bwd, quoted) != NULL);
  snprintf(quoted, sizeof quoted, "'%s'", sep_fast->name);
  CHECK(strstr(bwd, quoted) != NULL);
  snprintf(quoted, sizeof quoted, "'%s'", sep_slow->name);
  CHECK(strstr(bwd, quoted) == NULL);
  snprintf(quoted, sizeof quoted, "'%s'", sep_failed->name);
  CHECK(strstr(bwd, quoted) == NULL);
  snprintf(d, sizeof d, "%s/e.db", dir);
  CHECK_INT(import_text(d, bwd, err, sizeof err), 1 + 2 + 2 + 2 + 1 + 4 + 2 + 1);
  char *bwd2 = export_text(d, H200);
  CHECK_STR(bwd2, bwd);
  free(bwd);
  free(bwd2);
  /* A screening (5 repetitions) of a faster deterministic variant is no
   * timing a table holds: the pick is the fastest by a full timing, and the
   * table imports (the trust rule takes only full timings). Nor is a drop
   * (a screening stopped after 1 repetition, 1.6x the winner), nor the
   * eliminations the decision recorded (the screening's and the drop's):
   * they stay in the tuning database. */
  const fat_variant *atomic_slow = real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_MODE=atomic", 1);
  snprintf(d, sizeof d, "%s/d2.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  put_variant(db, H200, atomic, 4096, 2.0, 1, 1);
  put_variant(db, H200, sep_slow, 4096, 3.5, 1, 0);
  reps_override = FAT_SCREEN_REPS;
  put_variant(db, H200, sep_fast, 4096, 2.9, 1, 0);
  reps_override = 1;
  put_variant(db, H200, atomic_slow, 4096, 3.2, 1, 0);
  reps_override = 0;
  {
    fat_db_choice w;
    int found = 0, changed = -1;
    sqlite3_stmt *q = NULL;
    REQUIRE_EXIT(sqlite3_prepare_v2(fat_db_handle(db), "SELECT id FROM problems", -1, &q, NULL) ==
                     SQLITE_OK && sqlite3_step(q) == SQLITE_ROW);
    CHECK_INT(fat_db_decide_winner(db, 1, sqlite3_column_int64(q, 0), &w, &found, &changed), 0);
    CHECK(found == 1 && changed == 0 && !strcmp(w.name, atomic->name));
    sqlite3_finalize(q);
    REQUIRE_EXIT(sqlite3_prepare_v2(fat_db_handle(db), "SELECT group_concat(reps, ',') FROM"
                                    " (SELECT reps FROM eliminations ORDER BY ratio)", -1, &q,
                                    NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW);
    CHECK_STR((const char *)sqlite3_column_text(q, 0), "5,1");
    sqlite3_finalize(q);
  }
  fat_db_close(db);
  bwd = export_text(d, H200);
  snprintf(quoted, sizeof quoted, "'%s'", sep_slow->name);
  CHECK(strstr(bwd, quoted) != NULL);
  snprintf(quoted, sizeof quoted, "'%s'", sep_fast->name);
  CHECK(strstr(bwd, quoted) == NULL);
  snprintf(quoted, sizeof quoted, "'%s'", atomic_slow->name);
  CHECK(strstr(bwd, quoted) == NULL);
  CHECK(strstr(bwd, "eliminations") == NULL);
  snprintf(d, sizeof d, "%s/e2.db", dir);
  CHECK_INT(import_text(d, bwd, err, sizeof err), 1 + 2 + 2 + 2 + 1 + 4 + 2 + 1);
  free(bwd);
  /* An ordered variant (ws90's DQ_MODE=ordered: the accumulator's adds in
   * a fixed order) is deterministic too: faster than the separate one, it
   * is the pick that goes out beside the winner. The generator makes none
   * yet: a stand-in of a ws90 variant's source with the ordered mode. */
  {
    fat_variant ordered = *real_variant(FAT_BWD, FAT_MASK_CAUSAL, "DQ_KEYS=0 DQ_MODE=atomic", 0);
    char params[256], oname[256], osource[128];
    REQUIRE_EXIT(!strcmp(ordered.family, "ws90"));
    const char *at = strstr(ordered.params, "DQ_MODE=atomic");
    snprintf(params, sizeof params, "%.*sDQ_MODE=ordered%s", (int)(at - ordered.params), ordered.params,
             at + strlen("DQ_MODE=atomic"));
    snprintf(oname, sizeof oname, "%s.ordered", ordered.name);
    snprintf(osource, sizeof osource, "// stand-in of an ordered ws90 backward\n");
    ordered.name = oname, ordered.params = params, ordered.source = osource, ordered.is_default = 0;
    fat_sha256_hex(ordered.source, strlen(ordered.source), ordered.hash);
    snprintf(d, sizeof d, "%s/ordered.db", dir);
    REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
    put_variant(db, H200, atomic, 4096, 2.0, 1, 1);
    put_variant(db, H200, sep_fast, 4096, 3.0, 1, 0);
    put_variant(db, H200, &ordered, 4096, 2.6, 1, 0);
    fat_db_close(db);
    bwd = export_text(d, H200);
    CHECK_INT(count_lines(bwd, "INSERT INTO variants "), 2);
    snprintf(quoted, sizeof quoted, "'%s'", ordered.name);
    CHECK(strstr(bwd, quoted) != NULL);
    snprintf(quoted, sizeof quoted, "'%s'", sep_fast->name);
    CHECK(strstr(bwd, quoted) == NULL);
    free(bwd);
  }
  /* The run's database itself merges (a shard's, say), its screening and
   * its drop with it: measurements, if no winner's; its eliminations stay
   * behind (a decision of that run's, as its jobs are). A tuning run names
   * the device of each timing (schema 5); the merge leaves the device
   * behind, as a table does, and takes the timing as its GPU model's. */
  {
    char src[256], dst[256];
    long long added = -1;
    snprintf(src, sizeof src, "%s/d2.db", dir);
    snprintf(dst, sizeof dst, "%s/m2.db", dir);
    REQUIRE_EXIT(fat_db_open(src, &db, err, sizeof err) == 0);
    REQUIRE_EXIT(sqlite3_exec(fat_db_handle(db),
                              "INSERT INTO devices (gpu_id, host, device_index, mem_bytes, clock_khz,"
                              " mem_clock_khz) SELECT id, 'tuning-host', 0, 0, 0, 0 FROM gpus;"
                              "UPDATE timings SET device_id = (SELECT max(id) FROM devices)",
                              NULL, NULL, NULL) == SQLITE_OK);
    fat_db_close(db);
    REQUIRE_EXIT(fat_db_open(dst, &db, err, sizeof err) == 0);
    CHECK_INT(merge(db, src, &added, err, sizeof err), 0);
    fat_db_close(db);
    sqlite3 *h = NULL;
    REQUIRE_EXIT(sqlite3_open_v2(dst, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *q = NULL;
    REQUIRE_EXIT(sqlite3_prepare_v2(h, "SELECT count(*) FROM timings WHERE reps = 5", -1, &q,
                                    NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW);
    CHECK_INT(sqlite3_column_int(q, 0), 1);
    sqlite3_finalize(q);
    REQUIRE_EXIT(sqlite3_prepare_v2(h, "SELECT (SELECT count(*) FROM timings WHERE reps = 1),"
                                    " (SELECT count(*) FROM eliminations)", -1, &q,
                                    NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW);
    CHECK_INT(sqlite3_column_int(q, 0), 1);
    CHECK_INT(sqlite3_column_int(q, 1), 0);
    sqlite3_finalize(q);
    REQUIRE_EXIT(sqlite3_prepare_v2(h,
                                    "SELECT (SELECT count(*) FROM timings WHERE device_id IS NOT NULL),"
                                    " (SELECT count(*) FROM devices)",
                                    -1, &q, NULL) == SQLITE_OK &&
                 sqlite3_step(q) == SQLITE_ROW);
    CHECK_INT(sqlite3_column_int(q, 0), 0);
    CHECK_INT(sqlite3_column_int(q, 1), 0);
    sqlite3_finalize(q);
    sqlite3_close(h);
    /* A timing of 1 repetition no more than 1.5x its problem's best is no
     * drop the tuner makes: the merge is refused, naming both numbers. */
    snprintf(src, sizeof src, "%s/d3.db", dir);
    snprintf(dst, sizeof dst, "%s/m3.db", dir);
    REQUIRE_EXIT(fat_db_open(src, &db, err, sizeof err) == 0);
    put_variant(db, H200, atomic, 4096, 2.0, 1, 1);
    reps_override = 1;
    put_variant(db, H200, atomic_slow, 4096, 2.5, 1, 0);
    reps_override = 0;
    fat_db_close(db);
    REQUIRE_EXIT(fat_db_open(dst, &db, err, sizeof err) == 0);
    CHECK_INT(merge(db, src, &added, err, sizeof err), -1);
    fat_db_close(db);
    CHECK_WHY(strstr(err, ": reps 1 is fewer than a screening's 5, and median_ms 2.5 is not more"
                          " than 1.5x its problem's best of at least 5 reps (2)") != NULL, "%s", err);
  }

  /* A text of thousands of lines stays one INSERT line that SQLite can
   * parse: its concatenation is chunked, not one chain deeper than
   * SQLite's expression limit of 1000 -- a build log of 5000 lines here,
   * which comes back whole; one with a quote, a tab and CR LF is written as
   * SQL that gives them back. A stand-in variant (one the generator does
   * not make) goes out by name and hash alone, and import refuses it. */
  size_t long_len = 5000 * 8 + 1;
  char *long_log = malloc(long_len), *w = long_log;
  for (int i = 0; i < 5000; i++) w += sprintf(w, "l%04d%s", i, i % 2 ? "\n" : "\r\n");
  static const char quoted_log[] = "// 'fwd.quoted'\n\textern \"C\" __global__ void f() {}\r\n";
  const char *const logs[2] = {long_log, quoted_log};
  for (int i = 0; i < 2; i++) {
    snprintf(d, sizeof d, "%s/log%d.db", dir, i);
    REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
    log_override = logs[i];
    put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 2), 1024, 1.0);
    log_override = NULL;
    fat_db_close(db);
    char *log_sql = export_text(d, H200);
    CHECK_INT(count_lines(log_sql, "INSERT INTO builds "), 1);
    if (i == 1)
      CHECK(strstr(log_sql, "'// ''fwd.quoted''' || char(10) || '\textern \"C\" __global__ void f() {}'"
                            " || char(13) || '' || char(10) || ''") != NULL);
    snprintf(d, sizeof d, "%s/log%d-back.db", dir, i);
    CHECK(import_text(d, log_sql, err, sizeof err) > 0);
    sqlite3 *lh = NULL;
    REQUIRE_EXIT(sqlite3_open_v2(d, &lh, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    REQUIRE_EXIT(sqlite3_prepare_v2(lh, "SELECT log FROM builds", -1, &s, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0) &&
          !strcmp((const char *)sqlite3_column_text(s, 0), logs[i]));
    sqlite3_finalize(s);
    sqlite3_close(lh);
    free(log_sql);
  }
  free(long_log);
  snprintf(d, sizeof d, "%s/stand-in.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  put_stand_in(db, "fwd.quoted", NULL);
  fat_db_close(db);
  char *stand_in = export_text(d, H200);
  CHECK_INT(count_lines(stand_in, "INSERT INTO variants "), 1);
  CHECK(strstr(stand_in, "extern") == NULL);
  snprintf(d, sizeof d, "%s/stand-in-back.db", dir);
  CHECK_INT(import_text(d, stand_in, err, sizeof err), -1);
  CHECK_STR(err, "t.sql: variant fwd.quoted: the generator does not produce this variant; "
                 "refusing the table");
  free(stand_in);

  /* Local windows travel: two windows of one shape are two problems,
   * exported with their windows, and come back the same. */
  static const int w256[2] = {256, 0}, w1024[2] = {1024, -1};
  snprintf(d, sizeof d, "%s/local.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  window_override = w256;
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_LOCAL, "", 0), 4096, 0.4);
  window_override = w1024;
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_LOCAL, "", 1), 4096, 0.9);
  window_override = NULL;
  fat_db_close(db);
  char *local = export_text(d, H200);
  char schema_line[64];
  snprintf(schema_line, sizeof schema_line, "database schema version %d;", FAT_DB_SCHEMA_VERSION);
  CHECK(strstr(local, schema_line) != NULL);
  CHECK_INT(count_lines(local, "INSERT INTO problems "), 2);
  CHECK(strstr(local, "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, heads, "
                      "heads_k, seqlen_q, seqlen_k, window_left, window_right, lengths) VALUES (1, "
                      "'fwd', 'bf16', 'local', 128, 4, 16, 16, 4096, 4096, 256, 0, '');\n") != NULL);
  CHECK(strstr(local, "VALUES (2, 'fwd', 'bf16', 'local', 128, 4, 16, 16, 4096, 4096, 1024, -1, '');\n")
        != NULL);
  snprintf(d, sizeof d, "%s/local2.db", dir);
  CHECK_INT(import_text(d, local, err, sizeof err), 1 + 2 + 2 + 2 + 2 + 4 + 2 + 2);
  char *local2 = export_text(d, H200);
  CHECK_STR(local2, local);
  free(local), free(local2);

  /* Variable-length profiles travel: a profile is a problem of its own
   * beside the dense one of its batch and longest length, exported with
   * its lengths, and comes back the same (merged too). */
  snprintf(d, sizeof d, "%s/varlen.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 0), 3976, 0.8);
  lengths_override = "538,3976,2092";
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 1), 3976, 0.5);
  lengths_override = NULL;
  fat_db_close(db);
  char *varlen = export_text(d, H200);
  CHECK_INT(count_lines(varlen, "INSERT INTO problems "), 2);
  CHECK(strstr(varlen, "'bf16', 'causal', 128, 3, 16, 16, 3976, 3976, 0, 0, '538,3976,2092');\n")
        != NULL);
  snprintf(d, sizeof d, "%s/varlen2.db", dir);
  CHECK(import_text(d, varlen, err, sizeof err) > 0);
  char *varlen2 = export_text(d, H200);
  CHECK_STR(varlen2, varlen);
  char src_path[256];
  snprintf(src_path, sizeof src_path, "%s/varlen.db", dir);
  snprintf(d, sizeof d, "%s/varlen3.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  CHECK_INT(merge(db, src_path, &added, err, sizeof err), 0);
  fat_db_close(db);
  char *varlen3 = export_text(d, H200);
  CHECK_STR(varlen3, varlen);
  /* A profile whose longest is not its seqlen is refused at import. */
  char *at = strstr(varlen, "'538,3976,2092'");
  REQUIRE_EXIT(at);
  memcpy(at, "'538,3977,2092'", 15);
  snprintf(d, sizeof d, "%s/varlen4.db", dir);
  CHECK_INT(import_text(d, varlen, err, sizeof err), -1);
  CHECK(strstr(err, "seqlen_q 3976 is not its profile's longest, 3977") != NULL);
  free(varlen), free(varlen2), free(varlen3);

  /* Paged problems travel: a paged winner's problem is one of its own
   * beside the contiguous one of its shape, exported with a page_size
   * column (every problem's, then: a table of contiguous problems has none,
   * as version 6 wrote it), and comes back the same, merged too. */
  snprintf(d, sizeof d, "%s/paged.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  put_winner(db, H200, real_variant(FAT_FWD, FAT_MASK_CAUSAL, "", 0), 4096, 0.8);
  page_override = 64;
  put_winner(db, H200, family_variant(FAT_MASK_CAUSAL, "paged"), 4096, 0.5);
  page_override = 0;
  fat_db_close(db);
  char *paged = export_text(d, H200);
  CHECK_INT(count_lines(paged, "INSERT INTO problems (id, direction, dtype, mask, head_dim, batch, "
                               "heads, heads_k, seqlen_q, seqlen_k, window_left, window_right, "
                               "lengths, page_size) VALUES "), 2);
  CHECK(strstr(paged, "'bf16', 'causal', 128, 4, 16, 16, 4096, 4096, 0, 0, '', 64);\n") != NULL);
  CHECK(strstr(paged, "'bf16', 'causal', 128, 4, 16, 16, 4096, 4096, 0, 0, '', 0);\n") != NULL);
  snprintf(d, sizeof d, "%s/paged2.db", dir);
  CHECK(import_text(d, paged, err, sizeof err) > 0);
  char *paged2 = export_text(d, H200);
  CHECK_STR(paged2, paged);
  snprintf(src_path, sizeof src_path, "%s/paged.db", dir);
  snprintf(d, sizeof d, "%s/paged3.db", dir);
  REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
  CHECK_INT(merge(db, src_path, &added, err, sizeof err), 0);
  fat_db_close(db);
  char *paged3 = export_text(d, H200);
  CHECK_STR(paged3, paged);
  /* A contiguous family's variant on a paged problem is refused at import,
   * by name. */
  char *misplaced = replaced(paged, ", 4096, 0, 0, '', 0);\n", ", 4096, 0, 0, '', 16);\n");
  snprintf(d, sizeof d, "%s/paged4.db", dir);
  CHECK_INT(import_text(d, misplaced, err, sizeof err), -1);
  CHECK_WHY(strstr(err, "does not read a paged cache, its problem") && strstr(err, "has page size 16"),
            "%s", err);
  free(misplaced), free(paged), free(paged2), free(paged3);

  /* A table of format 1 (each variant with its source) exported by a
   * fatune of schema 5 to 3, 2 (no lengths: every problem dense) or 1 (no
   * windows either: every window 0, 0) imports, and today's export of the
   * result is today's format; so does a database of that schema merge,
   * read as it is and left at its version. */
  for (int version = 5; version >= 1; version--) {
    char *old = as_old_export(first, version), old_db[256], vname[32];
    /* (the kernel sources say "window" and "lengths": only the problems' columns count) */
    CHECK(version > 2 || (strstr(old, ", lengths)") == NULL && strstr(old, ", '');\n") == NULL));
    CHECK(version > 1 || strstr(old, ", window_left, window_right)") == NULL);
    snprintf(vname, sizeof vname, "schema version %d;", version);
    CHECK(strstr(old, vname) != NULL);
    CHECK_INT(count_lines(old, "INSERT INTO problems "), 2);
    snprintf(d, sizeof d, "%s/from-v%d-table.db", dir, version);
    CHECK_INT(import_text(d, old, err, sizeof err), 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
    char *again = export_text(d, H200);
    CHECK_STR(again, first);
    free(again);
    snprintf(old_db, sizeof old_db, "%s/schema%d.db", dir, version);
    make_old_db(old_db, version, old);
    snprintf(d, sizeof d, "%s/from-v%d-db.db", dir, version);
    REQUIRE_EXIT(fat_db_open(d, &db, err, sizeof err) == 0);
    CHECK_INT(merge(db, old_db, &added, err, sizeof err), 0);
    CHECK_INT(added, 2 + 1 + 2 + 2 + 2 + 4 + 2 + 2);
    fat_db_close(db);
    again = export_text(d, H200);
    CHECK_STR(again, first);
    free(again), free(old);
    sqlite3 *oh = NULL;
    REQUIRE_EXIT(sqlite3_open_v2(old_db, &oh, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    REQUIRE_EXIT(sqlite3_prepare_v2(oh, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK);
    REQUIRE_EXIT(sqlite3_step(s) == SQLITE_ROW);
    CHECK_INT(sqlite3_column_int(s, 0), version);
    sqlite3_finalize(s);
    sqlite3_close(oh);
  }

  /* The command line. */
  char *bad[] = {"export", "--db", b};
  CHECK_INT(fat_tables_main(3, bad), 2);
  char *unknown[] = {"frobnicate"};
  CHECK_INT(fat_tables_main(1, unknown), 2);
  char out_path[300];
  snprintf(out_path, sizeof out_path, "%s/h200.sql", dir);
  char *exp[] = {"export", "--db", b, "--gpu-name", H200, "-o", out_path};
  CHECK_INT(fat_tables_main(7, exp), 0);
  FILE *f = fopen(out_path, "r");
  REQUIRE_EXIT(f);
  char *from_cli = calloc(1, strlen(first) + 2);
  CHECK_INT((long long)fread(from_cli, 1, strlen(first) + 1, f), (long long)strlen(first));
  fclose(f);
  CHECK_STR(from_cli, first);
  /* Its temporary file is its own: a link planted at the name an export
   * once wrote through (PATH.tmp) is neither followed nor replaced, and
   * none is left behind, whether the export succeeds or fails. */
  char victim[300], planted[320], find[1024];
  snprintf(victim, sizeof victim, "%s/victim", dir);
  snprintf(planted, sizeof planted, "%s.tmp", out_path);
  f = fopen(victim, "w");
  REQUIRE_EXIT(f && fputs("keep\n", f) >= 0 && fclose(f) == 0);
  REQUIRE_EXIT(symlink(victim, planted) == 0);
  CHECK_INT(fat_tables_main(7, exp), 0);
  char *kept = check_read_file(victim);
  CHECK_STR(kept, "keep\n");
  free(kept);
  char *again = check_read_file(out_path);
  CHECK_STR(again, first);
  free(again);
  char *unknown_gpu[] = {"export", "--db", b, "--gpu-name", "NVIDIA B200", "-o", out_path};
  CHECK_INT(fat_tables_main(7, unknown_gpu), 1);
  unlink(planted);
  snprintf(find, sizeof find, "test -z \"$(find %s -name '*.tmp')\"", dir);
  CHECK_INT(system(find), 0);
  /* `fatune import` checks each variant against the generator (these are
   * today's) and keeps no cubin: the runtime compiles the sources. */
  char *imp[] = {"import", "--db", c, out_path};
  CHECK_INT(fat_tables_main(4, imp), 0);
  REQUIRE_EXIT(fat_db_open(c, &db, err, sizeof err) == 0);
  REQUIRE_EXIT(sqlite3_prepare_v2(fat_db_handle(db), "SELECT (SELECT count(*) FROM winners) || ' '"
                                  " || (SELECT count(*) FROM builds)", -1, &s, NULL) == SQLITE_OK);
  REQUIRE_EXIT(sqlite3_step(s) == SQLITE_ROW);
  CHECK_STR((const char *)sqlite3_column_text(s, 0), "2 0");
  sqlite3_finalize(s);
  fat_db_close(db);
  char *fourth = export_text(b, H200);
  CHECK_STR(fourth, first);

  reexport_keeps_ids(dir);
  one_variant_timed_twice(dir);
  peers_travel(dir);

  free(first), free(second), free(third), free(fourth), free(a100), free(from_cli);
  fat_trust_close(trust);
  fat_gen_close(gen);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_summary("test_tables");
}

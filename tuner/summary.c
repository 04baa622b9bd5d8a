/* SPDX-License-Identifier: MIT */
/* The run's summary as JSON (summary.h): fixed key order, one winner a
 * line, numbers in their shortest exact form, written through a temporary
 * file so that a reader sees the whole summary or the one before. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "interrupt.h"
#include "options.h"
#include "problems.h"
#include "summary.h"

#define DOUBLE_DIGITS 17  /* enough for any double to read back exactly */
#define TEMP_TRIES 100    /* fresh temporary names tried before giving up */
#define MS_PER_S 1000.0
#define FLOPS_PER_TFLOP 1e12
#define PERCENT 100.0

const char *fat_stage_name(fat_stage s) {
  static const char *const names[FAT_STAGE_COUNT] = {
      [FAT_STAGE_GENERATE] = "generate", [FAT_STAGE_COMPILE] = "compile",
      [FAT_STAGE_CEILINGS] = "ceilings", [FAT_STAGE_TUNE] = "tune"};
  return (unsigned)s < FAT_STAGE_COUNT ? names[s] : "?";
}

const char *fat_summary_outcome(int status) {
  switch (status) {
    case FAT_EXIT_OK: return "done";
    case FAT_EXIT_USAGE: return "usage";
    case FAT_EXIT_NO_GPU: return "no_gpu";
    case FAT_EXIT_INTERRUPTED: return "interrupted";
    case FAT_EXIT_TERMINATED: return "terminated";
    default: return "failed";
  }
}

/* S as a JSON string: quotes, backslashes and control characters escaped;
 * NULL as null. */
static void put_string(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
    else if (*c == '\n') fputs("\\n", f);
    else if (*c == '\t') fputs("\\t", f);
    else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
    else fputc(*c, f);
  }
  fputc('"', f);
}

/* X in the fewest digits that read back to X; NaN and infinities (no
 * such figure: no default timed, no baseline) as null. */
static void put_number(FILE *f, double x) {
  char buf[32];
  if (!isfinite(x)) {
    fputs("null", f);
    return;
  }
  for (int digits = 1; digits <= DOUBLE_DIGITS; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (strtod(buf, NULL) == x) break;
  }
  fputs(buf, f);
}

/* A stage's seconds to the millisecond: null when the run did not reach
 * it (negative). */
static void put_seconds(FILE *f, double s) {
  if (s < 0) fputs("null", f);
  else put_number(f, round(s * MS_PER_S) / MS_PER_S);
}

/* GPU G as the JSON names it: name, compute capability, SMs, driver, NVRTC. */
static void put_gpu(FILE *f, const fat_gpu_info *g) {
  fputs("{\"name\": ", f);
  put_string(f, g->name);
  fprintf(f, ", \"compute_capability\": \"%d.%d\", \"sm_count\": %d, \"driver\": %d,"
          " \"nvrtc\": \"%d.%d\"}", g->cc_major, g->cc_minor, g->sm_count, g->driver_version,
          g->nvrtc_major, g->nvrtc_minor);
}

/* A winner row; GPU (NULL: none) the model it was tuned on, as "gpu". */
static void put_winner(FILE *f, const fat_db_summary_row *row, const char *gpu) {
  const fat_problem *p = &row->problem;
  char label[160], lengths[FAT_LENGTHS_TEXT_CAP];
  fat_problem_label(p, label, sizeof label);
  fat_lengths_text(p, lengths);
  fputs("    {", f);
  if (gpu) {
    fputs("\"gpu\": ", f);
    put_string(f, gpu);
    fputs(", ", f);
  }
  fputs("\"problem\": ", f);
  put_string(f, label);
  fprintf(f, ", \"direction\": \"%s\", \"dtype\": \"%s\", \"mask\": \"%s\", \"head_dim\": %d,"
          " \"batch\": %d, \"heads\": %d, \"heads_k\": %d, \"seqlen_q\": %d, \"seqlen_k\": %d,"
          " \"window\": [%d, %d], \"lengths\": ",
          fat_direction_name(p->direction), fat_dtype_name(p->dtype), fat_mask_name(p->mask),
          p->head_dim, p->batch, p->heads, p->heads_k, p->seqlen_q, p->seqlen_k, p->window_left,
          p->window_right);
  put_string(f, lengths);
  fprintf(f, ", \"page_size\": %d", p->page_size);
  fputs(", \"winner\": ", f);
  put_string(f, row->winner);
  fputs(", \"median_ms\": ", f);
  put_number(f, row->median_ms);
  fputs(", \"tflops\": ", f);
  put_number(f, row->tflops);
  fputs(", \"rel_l2\": ", f);
  put_number(f, row->rel_l2);
  fputs(", \"max_abs\": ", f);
  put_number(f, row->max_abs);
  fputs(", \"slowest_ms\": ", f);
  put_number(f, row->slowest_ms);
  fputs(", \"default\": ", f);
  put_string(f, row->default_name[0] ? row->default_name : NULL);
  fputs(", \"default_ms\": ", f);
  put_number(f, row->default_ms);
  fputs(", \"materialize_ms\": ", f);
  put_number(f, row->materialize_ms);
  fprintf(f, ", \"passed\": %d, \"failed\": %d}", row->n_passing, row->n_failed);
}

int fat_summary_write_json(FILE *f, const fat_run_summary *s, const fat_db_summary_row *rows,
                           size_t n) {
  fprintf(f, "{\n  \"format\": %d,\n  \"fatune\": ", FAT_SUMMARY_FORMAT);
  put_string(f, FAT_VERSION);
  fprintf(f, ",\n  \"status\": %d,\n  \"outcome\": \"%s\",\n  \"database\": ", s->status,
          fat_summary_outcome(s->status));
  put_string(f, s->db_path);
  fputs(",\n  \"arch\": ", f);
  put_string(f, s->arch && s->arch[0] ? s->arch : NULL);
  fputs(",\n  \"gpu\": ", f);
  if (s->gpu)
    put_gpu(f, s->gpu);
  else
    fputs("null", f);
  if (s->n_devices > 1) {
    fputs(",\n  \"devices\": [", f);
    for (size_t i = 0; i < s->n_devices; i++) {
      fprintf(f, "%s{\"index\": %d, \"gpu\": ", i ? ", " : "", s->devices[i].index);
      put_gpu(f, s->devices[i].gpu);
      fputc('}', f);
    }
    fputc(']', f);
  }
  fputs(",\n  \"no_gpu\": ", f);
  put_string(f, s->no_gpu && s->no_gpu[0] ? s->no_gpu : NULL);
  fprintf(f, ",\n  \"shard\": {\"index\": %d, \"count\": %d},\n", s->shard_index, s->shard_count);
  fprintf(f, "  \"problems\": {\"total\": %zu, \"done\": %zu},\n", s->problems, s->problems_done);
  fprintf(f, "  \"variants\": {\"generated\": %zu, \"compiled\": %zu, \"from_cache\": %zu,"
          " \"failed\": %zu},\n", s->variants, s->compiled, s->cached, s->compile_failed);
  fprintf(f, "  \"evaluations\": {\"checked\": %zu, \"timed\": %zu, \"failed\": %zu,"
          " \"resumed\": %zu},\n", s->checked, s->timed, s->check_failed, s->resumed);
  fputs("  \"seconds\": {", f);
  for (int i = 0; i < FAT_STAGE_COUNT; i++) {
    fprintf(f, "\"%s\": ", fat_stage_name((fat_stage)i));
    put_seconds(f, s->stage_s[i]);
    fputs(", ", f);
  }
  fputs("\"total\": ", f);
  put_seconds(f, s->total_s);
  fputs("},\n", f);
  if (s->tune_measured) {
    fputs("  \"tune_seconds\": {", f);
    for (int i = 0; i < FAT_PHASE_COUNT; i++) {
      fprintf(f, "\"%s\": ", fat_phase_key((fat_phase)i));
      put_seconds(f, s->tune_phase_s[i]);
      fputs(", ", f);
    }
    fputs("\"messages\": ", f);
    put_seconds(f, s->tune_messages_s);
    fputs(", \"build_wait\": ", f);
    put_seconds(f, s->tune_build_wait_s);
    fputs("},\n", f);
  }
  fputs("  \"winners\": [", f);
  for (size_t k = 0; k < n; k++) {
    fputs(k ? ",\n" : "\n", f);
    put_winner(f, &rows[k], s->row_gpus ? s->row_gpus[k] : NULL);
  }
  fputs(n ? "\n  ]\n}\n" : "]\n}\n", f);
  return ferror(f) ? -1 : 0;
}

/* The temporary beside PATH that the summary is written to first:
 * ".NAME.PID.I.tmp" in PATH's folder, made with O_EXCL | O_NOFOLLOW (a
 * link planted there is never followed). The descriptor, or -1 with errno. */
static int open_temp(const char *path, char *tmp, size_t cap) {
  const char *slash = strrchr(path, '/');
  const int dir_len = slash ? (int)(slash - path) + 1 : 0;
  int fd = -1;
  for (int i = 0; fd < 0 && i < TEMP_TRIES; i++) {
    snprintf(tmp, cap, "%.*s.%s.%ld.%d.tmp", dir_len, path, slash ? slash + 1 : path,
             (long)getpid(), i);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  return fd;
}

/* PATH is absent or a regular file (a link, FIFO, device or folder is
 * never replaced). */
static int replaceable(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "cannot write %s: it exists and is not a regular file", path);
    return -1;
  }
  return 0;
}

int fat_summary_check_path(const char *path, char *err, size_t errlen) {
  char tmp[4096 + 64];
  if (replaceable(path, err, errlen)) return -1;
  int fd = open_temp(path, tmp, sizeof tmp);
  if (fd < 0) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  close(fd);
  unlink(tmp);
  return 0;
}

int fat_summary_save_json(const char *path, const fat_run_summary *s,
                          const fat_db_summary_row *rows, size_t n, char *err, size_t errlen) {
  char tmp[4096 + 64];
  if (replaceable(path, err, errlen)) return -1;
  int fd = open_temp(path, tmp, sizeof tmp);
  if (fd < 0) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    return -1;
  }
  int rc = fat_summary_write_json(f, s, rows, n);
  if (fclose(f) || rc) {
    snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    rc = -1;
  }
  if (rc == 0 && rename(tmp, path)) {
    snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    rc = -1;
  }
  if (rc) unlink(tmp);
  return rc;
}

void fat_summary_peak_cell(const fat_db_summary_row *row,
                           const double peaks[FAT_MATRIX_OP_COUNT][FAT_PEAK_DTYPES], char *out, size_t cap) {
  const fat_matrix_op op = fat_family_matrix_op(row->winner_family, row->problem.direction);
  /* e4m3 has no measured peak (fat_dtype_has_peak): placed against nothing;
   * an fp8 K/V cache against its Q's type's (fat_dtype_peak). */
  const int t = fat_dtype_peak(row->problem.dtype);
  const double peak = t >= 0 ? peaks[op][t] : 0;
  if (op == FAT_MATRIX_OTHER || !(peak > 0))
    snprintf(out, cap, "-");
  else
    snprintf(out, cap, "%.0f%% %s", row->tflops * FLOPS_PER_TFLOP / peak * PERCENT,
             fat_matrix_op_name(op));
}

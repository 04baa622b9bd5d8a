/* SPDX-License-Identifier: MIT */
/* The command line of `fatune report` (fat_report_run, fat_report_main):
 * flags, the database and GPU to read, the page written through a
 * temporary renamed over its target. The page itself is report.c's
 * (fat_report_write). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli_args.h"
#include "options.h"
#include "report.h"
#include "results_db.h"
#include "tables_path.h"

#define ERRLEN 512

const char *fat_report_usage(void) {
  return "Usage: fatune report [--db PATH] [-o FILE] [--gpu-name NAME]\n"
         "Writes one self-contained HTML page (inline SVG, nothing fetched from the network)\n"
         "of the results stored for one GPU: a summary of speed-ups against the peers\n"
         "(PyTorch SDPA's backends, where stored); one chart per direction, dtype and mask\n"
         "with a series per head dim for fatune's winner and each peer (decoding in TB/s);\n"
         "a roofline of the winners; and the winners with their verified error.\n"
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
  int shipped = 0, n_gpus = 0;
  int rc = fat_results_db_open(db_path, sizeof db_path, seen_db, gpu_name, &db, &gpu_id, gpu, sizeof gpu, &found,
                               &shipped, &n_gpus, err, sizeof err);
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
  if (shipped && n_gpus > 1 && !gpu_name[0])
    fprintf(errf, "fatune report: the shipped tables hold %d GPUs: reporting %s, the most tuned (--gpu-name picks another)\n",
            n_gpus, gpu);
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
  if (fat_report_write(db, gpu_id, f, &counts, err, sizeof err)) {
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

/* SPDX-License-Identifier: MIT */
/* The fatune command: parses the command line and hands the run to the
 * pipeline (tune.c) or to a subcommand. Usage errors go to stderr naming the
 * bad value, with exit status 2; help goes to stdout. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "cli_args.h"
#include "compile.h"
#include "explain.h"
#include "gen.h"
#include "options.h"
#include "report.h"
#include "tables.h"
#include "tables_path.h"
#include "tune.h"

#define ERRLEN 1024
#define MAX_HEAD_DIMS 32
#define MAX_ARCHS 32

int main(int argc, char **argv) {
  char err[ERRLEN];
  int known[MAX_HEAD_DIMS], n_known;
  fat_options o;

  /* Subcommands take their own arguments; argv[0] is their name. */
  if (argc > 1 && !strcmp(argv[1], "explain")) return fat_explain_main(argc - 1, argv + 1);
  if (argc > 1 && !strcmp(argv[1], "report")) return fat_report_main(argc - 1, argv + 1);
  if (argc > 1 && (!strcmp(argv[1], "export") || !strcmp(argv[1], "import") ||
                   !strcmp(argv[1], "merge") || !strcmp(argv[1], "retire-stale") ||
                   !strcmp(argv[1], "rehash")))
    return fat_tables_main(argc - 1, argv + 1);

  /* The command line first: a usage error is reported as one (exit 2)
   * whatever the generator would say, and --templates DIR (or =DIR) is
   * known before the generator opens. */
  if (fat_options_parse(argc, argv, NULL, 0, &o, err, sizeof err)) {
    fprintf(stderr, "fatune: %s\n", err);
    return FAT_EXIT_USAGE;
  }
  if (o.command == FAT_CMD_HELP) {
    fputs(fat_options_usage(), stdout);
    return fat_exit_flushed(stdout, "fatune", FAT_EXIT_OK);
  }
  if (o.command == FAT_CMD_VERSION) {
    /* The tables found as libfatune finds them: where this command lies. */
    char tables[4096], looked[4096];
    printf("fatune %s\n", FAT_VERSION);
    if (fat_tables_default(tables, sizeof tables, looked, sizeof looked) == 0)
      printf("shipped tables: %s\n", tables);
    else
      printf("shipped tables: none found (looked for %s)\n", looked);
    return fat_exit_flushed(stdout, "fatune", FAT_EXIT_OK);
  }
  const char *source_dir = o.source_dir[0] ? o.source_dir : NULL;
  struct stat st;
  if (source_dir && (stat(source_dir, &st) || !S_ISDIR(st.st_mode))) {
    fprintf(stderr, "fatune: --templates: '%s' is not a folder\n", source_dir);
    return FAT_EXIT_USAGE;
  }
  /* The head dims the CLI accepts are the ones the space has: the
   * --templates folder's, when one is given. */
  fat_gen *gen = fat_gen_open(source_dir, err, sizeof err);
  if (!gen) {
    fprintf(stderr, "fatune: generator: %s\n", err);
    return FAT_EXIT_FAILED;
  }
  /* --arch: a target the space generates for (the generator would refuse
   * any other only once the run began, with exit 1). */
  char archs[MAX_ARCHS][16];
  const int n_archs = o.arch[0] ? fat_gen_archs(gen, archs, MAX_ARCHS, err, sizeof err) : 0;
  if (n_archs < 0) {
    fat_gen_close(gen);
    fprintf(stderr, "fatune: generator: %s\n", err);
    return FAT_EXIT_FAILED;
  }
  int arch_known = n_archs == 0 && (!o.arch[0] || fat_arch_valid(o.arch));
  for (int i = 0; i < n_archs; i++) arch_known |= !strcmp(archs[i], o.arch);
  if (!arch_known && n_archs == 0) {
    fat_gen_close(gen);
    fprintf(stderr, "fatune: --arch: unknown architecture '%s' (sm_80, sm_86, sm_89, sm_90a, ...)\n",
            o.arch);
    return FAT_EXIT_USAGE;
  }
  if (!arch_known) {
    char list[MAX_ARCHS * 18] = "";
    for (int i = 0; i < n_archs; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", archs[i]);
    fat_gen_close(gen);
    fprintf(stderr, "fatune: --arch: '%s' is not an architecture fatune generates for (%s)\n",
            o.arch, list);
    return FAT_EXIT_USAGE;
  }
  n_known = fat_gen_head_dims(gen, FAT_FWD, known, MAX_HEAD_DIMS, err, sizeof err);
  /* The backward has fewer templates (no 32): checked below. */
  int known_bwd[MAX_HEAD_DIMS];
  const int n_known_bwd =
      n_known < 0 ? n_known : fat_gen_head_dims(gen, FAT_BWD, known_bwd, MAX_HEAD_DIMS, err, sizeof err);
  fat_gen_close(gen);
  if (n_known < 0 || n_known_bwd < 0) {
    fprintf(stderr, "fatune: generator: %s\n", err);
    return FAT_EXIT_FAILED;
  }
  if (fat_options_check_head_dims(&o, known, n_known, err, sizeof err)) {
    fprintf(stderr, "fatune: %s\n", err);
    return FAT_EXIT_USAGE;
  }
  /* Empty lists mean everything the space has: with the backward asked
   * for, the head dims both directions have. */
  int wants_bwd = 0;
  for (int i = 0; i < o.n_directions; i++) wants_bwd |= o.directions[i] == FAT_BWD;
  if (o.n_head_dims == 0) {
    const int *dims = wants_bwd ? known_bwd : known;
    o.n_head_dims = wants_bwd ? n_known_bwd : n_known;
    memcpy(o.head_dims, dims, (size_t)o.n_head_dims * sizeof *dims);
  } else if (wants_bwd) {
    for (int i = 0; i < o.n_head_dims; i++) {
      int found = 0;
      for (int j = 0; j < n_known_bwd; j++) found |= known_bwd[j] == o.head_dims[i];
      if (!found) {
        char list[128] = "";
        for (int j = 0; j < n_known_bwd; j++)
          snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", j ? ", " : "", known_bwd[j]);
        fprintf(stderr, "fatune: --head-dim: %d has no backward template (%s)\n", o.head_dims[i],
                list);
        return FAT_EXIT_USAGE;
      }
    }
  }
  if (o.n_dtypes == 0) {
    o.dtypes[0] = FAT_FP16;
    o.dtypes[1] = FAT_BF16;
    o.n_dtypes = 2;
  }
  if (o.n_masks == 0) {
    o.masks[0] = FAT_MASK_NONE;
    o.masks[1] = FAT_MASK_CAUSAL;
    o.n_masks = 2;
  }
  /* --list opens no database: it neither needs the path nor makes its folder. */
  if (o.command == FAT_CMD_TUNE && !o.db_path[0] &&
      fat_options_default_db(o.db_path, sizeof o.db_path, 1, err, sizeof err)) {
    fprintf(stderr, "fatune: %s\n", err);
    return FAT_EXIT_USAGE;
  }
  return fat_exit_flushed(stdout, "fatune", fat_tune_main(&o, stdout, stderr));
}

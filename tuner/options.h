/* SPDX-License-Identifier: MIT */
/* The fatune command line: one struct of options and the parser that fills
 * it. Parsing never prints and never exits: a bad flag comes back as a
 * message naming the flag and the value, which main() prints to stderr with
 * exit status 2 (the zstd habit: usage errors to stderr, help to stdout). */
#ifndef FAT_OPTIONS_H
#define FAT_OPTIONS_H
#include <stddef.h>
#include "types.h"

#define FAT_MAX_LIST 16           /* entries of one list flag */
#define FAT_MAX_SEQLEN (1 << 20)  /* longest sequence --seqlen accepts */
#define FAT_MIN_REPS 20           /* timings are medians of at least this many runs */
#define FAT_MAX_REPS 10000
#define FAT_MAX_JOBS 256
#define FAT_MAX_TIMEOUT_S 3600
#define FAT_MAX_BATCH 65536
/* --gqa mqa: a single K/V head, whatever the number of query heads. */
#define FAT_GQA_MQA 0
#define FAT_MAX_GROUP 128         /* largest --gqa group: query heads per K/V head */
#define FAT_MAX_SHARDS 4096       /* largest N of --shard K/N: machines of one job array */
#define FAT_MAX_GPU_INDEX 1023    /* largest --gpu index */

/* The exit-status paragraph of every --help: one rule for the command and
 * each subcommand. */
#define FAT_EXIT_STATUS_HELP                                                            \
  "Exit status, the same for fatune and every subcommand: 0 done; 1 run-time\n"         \
  "failure (a file refused, NVRTC missing, a write that failed); 2 bad usage (a bad\n"   \
  "flag or value, an unusable --db); 3 no GPU (generation and compilation done,\n"      \
  "nothing checked or timed); 130 interrupted (^C: what was done is kept); 143\n"   \
  "terminated (SIGTERM: a tuning run stops as on ^C, keeping what was done).\n"

/* Exit statuses of the fatune command and its subcommands. */
enum {
  FAT_EXIT_OK = 0,
  FAT_EXIT_FAILED = 1,  /* a run-time failure: NVRTC missing, database write failed, ... */
  FAT_EXIT_USAGE = 2,   /* bad command line or unusable --db path */
  FAT_EXIT_NO_GPU = 3,  /* no GPU: everything that needs none was done */
  /* 130 (interrupt.h's FAT_EXIT_INTERRUPTED): SIGINT stopped it; 143
   * (FAT_EXIT_TERMINATED): SIGTERM stopped a tuning run */
};

typedef enum fat_command {
  FAT_CMD_TUNE = 0,  /* generate, compile, check, time, store */
  FAT_CMD_LIST,      /* --list: print the variants of the query, compile nothing */
  FAT_CMD_HELP,
  FAT_CMD_VERSION,
} fat_command;

/* One --window: the keys a query sees on each side of its position, -1
 * for no bound on that side (fat_problem's window_left, window_right). */
typedef struct fat_window {
  int left, right;
} fat_window;

typedef struct fat_options {
  fat_command command;
  int gpus[FAT_MAX_LIST];                /* --gpu: CUDA device indices, in the order given */
  int n_gpus;                            /* default: {0}; 0 with --gpu all */
  int gpu_all;                           /* --gpu all: every device the driver reports */
  int head_dims[FAT_MAX_LIST];           /* --head-dim */
  int n_head_dims;                       /* 0: every head dim of the space */
  fat_dtype dtypes[FAT_MAX_LIST];        /* --dtype */
  int n_dtypes;
  fat_mask masks[FAT_MAX_LIST];          /* --mask */
  int n_masks;
  fat_window windows[FAT_MAX_LIST];      /* --window: the local mask's problems, one per window */
  int n_windows;                         /* 0 unless --mask has local (which needs one) */
  int seqlens[FAT_MAX_LIST];             /* --seqlen: the problem buckets (queries) */
  int n_seqlens;
  int seqlens_k[FAT_MAX_LIST];           /* --seqlen-k: keys per bucket; none: as many as queries */
  int n_seqlens_k;
  int gqa[FAT_MAX_LIST];                 /* --gqa: query heads per K/V head, or FAT_GQA_MQA */
  int n_gqa;                             /* default: {1} */
  int batches[FAT_MAX_LIST];             /* --batch: each a problem of its own */
  int n_batches;                         /* 0: 16384 tokens / the longer seqlen */
  fat_lengths varlens[FAT_MAX_LIST];     /* --varlen: variable-length problems, one a profile */
  int n_varlens;                         /* 0: dense problems (--seqlen) */
  int page_sizes[FAT_MAX_LIST];          /* --paged: problems over a paged K/V cache, one a
                                            page size (the paged family's) */
  int n_page_sizes;                      /* 0: a contiguous cache */
  char db_path[4096];                    /* --db; "" until fat_options_default_db fills it */
  char arch[16];                         /* --arch; "" means: the GPU's, or sm_90a without one */
  char source_dir[4096];                 /* --templates: a folder with generator/ and templates/ */
  char json_path[4096];                  /* --json: the run's summary as JSON; "" none */
  int shard_index, shard_count;          /* --shard K/N: this run's share, K of N (1/1 without) */
  int jobs;                              /* --jobs: compile threads; 0 = online CPUs */
  int reps;                              /* --reps: timed repetitions per variant */
  int timeout_s;                         /* --timeout: watchdog for one job on the GPU */
  char families[FAT_MAX_LIST][32];       /* --family: only these template families' variants */
  int n_families;                        /* 0: every family */
  char params[FAT_MAX_LIST][64];         /* --param: only variants with each NAME=VALUE */
  int n_params;                          /* 0: every variant */
  int retune;                            /* --retune: re-measure what the DB already has */
  int exhaustive;                        /* --exhaustive: every candidate timed in full, no
                                            screening round */
  int verbose;                           /* -v: one row per variant; -vv: pruned ones too */
  int quiet;                             /* -q: only the final table and errors */
  fat_direction directions[2];           /* --direction: fwd, bwd or both, in the order given */
  int n_directions;                      /* 1 (default: fwd) or 2 */
} fat_options;

/* Parses ARGV into O (defaults first). Returns 0, or -1 with ERR naming the
 * offending flag and value, e.g. "--head-dim: '1000' is not a head dim
 * fatune can tune (64, 96, 128, 192, 256)". KNOWN_HEAD_DIMS lists what the
 * generator's space supports (N_KNOWN of them); NULL leaves the head dims
 * for fat_options_check_head_dims. */
int fat_options_parse(int argc, char **argv, const int *known_head_dims, int n_known,
                      fat_options *o, char *err, size_t errlen);

/* After fat_options_parse with no KNOWN_HEAD_DIMS: every --head-dim is one
 * of the space's (the generator's, once it is open). Returns 0, or -1 with
 * the message fat_options_parse would have given. */
int fat_options_check_head_dims(const fat_options *o, const int *known_head_dims, int n_known,
                                char *err, size_t errlen);

/* The database path used when --db is absent: $FATUNE_DB, else
 * $XDG_CACHE_HOME/fatune/fatune.db, else $HOME/.cache/fatune/fatune.db.
 * MAKE_FOLDER: creates its folder (not the file), for a command that writes
 * there; one that only reads (--list, explain, report, export) leaves the
 * file system as it was. Returns 0 or -1 with err. */
int fat_options_default_db(char *out, size_t cap, int make_folder, char *err, size_t errlen);

/* The --help text. */
const char *fat_options_usage(void);
#endif

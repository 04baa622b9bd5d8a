/* SPDX-License-Identifier: MIT */
/* Parsing of the fatune command line (options.h): strict numbers with
 * overflow checks, comma-separated lists, each flag at most once, and a
 * message naming the flag and value for every refusal. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "compile.h"
#include "cli_args.h"
#include "db.h"
#include "options.h"

_Static_assert(FAT_MIN_REPS >= FAT_FULL_REPS, "--reps gives full timings");

static const int default_seqlens[] = {512, 1024, 2048, 4096, 8192, 16384};
#define N_DEFAULT_SEQLENS (int)(sizeof default_seqlens / sizeof default_seqlens[0])
#define DEFAULT_TIMEOUT_S 60

const char *fat_options_usage(void) {
  return "Usage: fatune [options]            tune (the options below)\n"
         "       fatune explain [options]    IO of attention for a shape: materialising vs fused\n"
         "       fatune report [options]     one self-contained HTML page of a database\n"
         "       fatune export|import|merge  move winner tables between databases and machines\n"
         "       fatune retire-stale|rehash  bring a database's winners up to today's templates\n"
         "       (each subcommand answers --help)\n"
         "\n"
         "Generates FlashAttention kernels, compiles them with NVRTC, checks each against\n"
         "an fp64 reference on the GPU, times the survivors and stores everything (and the\n"
         "winner of every problem) in SQLite.\n"
         "\n"
         "  --gpu LIST         CUDA device indices, e.g. 0 or 0,1, or all: one worker per GPU,\n"
         "                     the problems handed out among them, results into one --db;\n"
         "                     identical GPUs share their winners (default 0)\n"
         "  --head-dim LIST    head dims to tune, e.g. 128 or 64,128 (default: all)\n"
         "  --dtype LIST       fp16, bf16, e4m3, fp16-e4m3kv, bf16-e4m3kv (default: fp16,bf16;\n"
         "                     e4m3: fp8 inputs, O in bf16; fp16-e4m3kv, bf16-e4m3kv: an fp8\n"
         "                     K/V cache, Q and O 16-bit; the last three the forward only)\n"
         "  --mask LIST        none, causal, local (default: none,causal)\n"
         "  --family LIST      only these template families' variants, e.g. ws90 (default: all)\n"
         "  --param LIST       only variants whose parameters include each NAME=VALUE,\n"
         "                     e.g. PERSISTENT=2 (the names --list prints; default: all)\n"
         "  --window LIST      the local mask's windows L,R, ':'-separated (256,0:1024,0):\n"
         "                     a query sees L keys before its position and R after, -1\n"
         "                     for no bound; each window is tuned as problems of its own\n"
         "  --direction LIST   fwd, bwd or fwd,bwd: forward and/or backward kernels (default fwd)\n"
         "  --seqlen LIST      problem buckets; batch = 16384 tokens / seqlen, heads =\n"
         "                     2048 / head dim (default 512,1024,2048,4096,8192,16384)\n"
         "  --seqlen-k LIST    keys per problem, each with every --seqlen (default: as many\n"
         "                     as queries); causal is bottom-right aligned\n"
         "  --gqa LIST         query heads per K/V head, or mqa for one K/V head (default 1)\n"
         "  --batch LIST       batches, each with every other key, e.g. 1,4 (default: 16384\n"
         "                     tokens / longer seqlen, and for a forward decoding problem\n"
         "                     also the batch whose batch x K/V heads reaches 128): the\n"
         "                     runtime serves a decoding call (128 queries or fewer) the\n"
         "                     winner of its bucket's nearest batch x K/V heads at or below\n"
         "                     its own, the blocks its kernel has to fill the GPU\n"
         "  --varlen LIST      variable-length problems instead of --seqlen: each the sequence\n"
         "                     lengths of a packed batch (flash_attn_varlen_func's), ':'-\n"
         "                     separated (538,2092,3976:1024,1024,512); the backward's on\n"
         "                     its family with variable lengths (mma80f)\n"
         "  --paged LIST       K and V in a paged cache instead, one problem per page size\n"
         "                     (tokens a page, a power of two from 16: 16,64,256), pages in\n"
         "                     random order; forward only, on the paged family\n"
         "  --db PATH          database (default $FATUNE_DB, else\n"
         "                     $XDG_CACHE_HOME/fatune/fatune.db or ~/.cache/fatune/fatune.db)\n"
         "  --jobs J           compile threads (default: number of CPUs)\n"
         "  --reps N           timed repetitions of a full timing, at least 20 (default 20):\n"
         "                     every candidate is first screened by 5 (by 1 when that one is\n"
         "                     over 1.5x the best so far), and those within 10% of the best\n"
         "                     are timed in full, together\n"
         "  --exhaustive       time every candidate in full (no screening round)\n"
         "  --timeout S        watchdog for one variant on the GPU, seconds (default 60)\n"
         "  --arch ARCH        compile for ARCH (sm_80, sm_86, sm_89, sm_90a, sm_100, sm_120,\n"
         "                     ...; default: the GPU's)\n"
         "  --templates DIR    use DIR/generator and DIR/templates instead of the built-in ones\n"
         "  --retune           re-measure what the database already holds\n"
         "  --shard K/N        tune shard K of N of the query's problems: those whose\n"
         "                     index i (0, 1, ... in tuning order) has i mod N = K - 1;\n"
         "                     N machines, one command but for K, each its own --db,\n"
         "                     then fatune merge them (default 1/1: every problem)\n"
         "  --json FILE        write the run's summary to FILE as JSON, for CI: counts of\n"
         "                     variants compiled, checked, timed and failed, each stage's\n"
         "                     wall time, the winners table (also after ^C or without a GPU)\n"
         "  --list             print the variants the query expands to, then stop\n"
         "  -v, --verbose      one row per variant (-vv: pruned configurations too)\n"
         "  -q, --quiet        only the final table and errors\n"
         "  -h, --help         this text\n"
         "  -V, --version      the version\n"
         "\n" FAT_EXIT_STATUS_HELP;
}

/* Splits S at SEP (',' for lists of numbers and names) into at most
 * FAT_MAX_LIST items, each handed to EACH. Empty lists and empty items are
 * refused; so are duplicates, compared as ELEM_SIZE-byte entries of OUT (0:
 * the caller checks them itself). */
typedef int (*item_fn)(const char *flag, const char *item, void *out, int index, char *err,
                       size_t errlen);

static int parse_list_sep(const char *flag, const char *s, char sep, item_fn each, void *out,
                          int *n, size_t elem_size, char *err, size_t errlen) {
  const char seps[2] = {sep, 0}, doubled[3] = {sep, sep, 0};
  char buf[FAT_MAX_LIST * FAT_LENGTHS_TEXT_CAP / 4]; /* --varlen's profiles are the longest */
  if (!*s) {
    snprintf(err, errlen, "%s: empty list", flag);
    return -1;
  }
  if (strlen(s) >= sizeof buf) {
    snprintf(err, errlen, "%s: list too long", flag);
    return -1;
  }
  strcpy(buf, s);
  *n = 0;
  char *save = NULL, *p = buf;
  size_t len = strlen(buf);
  if (buf[0] == sep || buf[len - 1] == sep || strstr(buf, doubled)) {
    snprintf(err, errlen, "%s: empty item in '%s'", flag, s);
    return -1;
  }
  for (char *item = strtok_r(p, seps, &save); item; item = strtok_r(NULL, seps, &save)) {
    if (*n >= FAT_MAX_LIST) {
      snprintf(err, errlen, "%s: more than %d items", flag, FAT_MAX_LIST);
      return -1;
    }
    if (each(flag, item, out, *n, err, errlen)) return -1;
    for (int i = 0; elem_size && i < *n; i++)
      if (memcmp((char *)out + (size_t)i * elem_size, (char *)out + (size_t)*n * elem_size,
                 elem_size) == 0) {
        snprintf(err, errlen, "%s: '%s' given twice", flag, item);
        return -1;
      }
    (*n)++;
  }
  return 0;
}

static int parse_list(const char *flag, const char *s, item_fn each, void *out, int *n,
                      size_t elem_size, char *err, size_t errlen) {
  return parse_list_sep(flag, s, ',', each, out, n, elem_size, err, errlen);
}

typedef struct head_dim_ctx {
  int *out;
  const int *known;
  int n_known;
} head_dim_ctx;

/* The refusal of head dim D, which the space (KNOWN, N_KNOWN) lacks. */
static void not_a_head_dim(const char *flag, const char *item, const int *known, int n_known,
                           char *err, size_t errlen) {
  char list[128] = "";
  for (int i = 0; i < n_known; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? ", " : "", known[i]);
  snprintf(err, errlen, "%s: '%s' is not a head dim fatune can tune (%s)", flag, item, list);
}

static int each_head_dim(const char *flag, const char *item, void *out, int index, char *err,
                         size_t errlen) {
  head_dim_ctx *c = out;
  int d;
  if (fat_cli_parse_int(flag, item, INT_MIN, INT_MAX, &d, err, errlen)) return -1;
  c->out[index] = d;
  if (!c->known) return 0; /* checked later, against the space (fat_options_check_head_dims) */
  for (int i = 0; i < c->n_known; i++)
    if (c->known[i] == d) return 0;
  not_a_head_dim(flag, item, c->known, c->n_known, err, errlen);
  return -1;
}

int fat_options_check_head_dims(const fat_options *o, const int *known, int n_known, char *err,
                                size_t errlen) {
  for (int i = 0; i < o->n_head_dims; i++) {
    int found = 0;
    for (int j = 0; j < n_known; j++) found |= known[j] == o->head_dims[i];
    if (!found) {
      char item[16];
      snprintf(item, sizeof item, "%d", o->head_dims[i]);
      not_a_head_dim("--head-dim", item, known, n_known, err, errlen);
      return -1;
    }
  }
  return 0;
}

static int each_dtype(const char *flag, const char *item, void *out, int index, char *err,
                      size_t errlen) {
  if (fat_dtype_parse(item, (fat_dtype *)out + index) == 0) return 0;
  snprintf(err, errlen, "%s: unknown dtype '%s' (fp16, bf16, e4m3, fp16-e4m3kv, bf16-e4m3kv)", flag,
           item);
  return -1;
}

/* A family name as the generator spells them: letters, digits and '_'
 * (whether the space has it is asked when the space is generated). */
static int each_family(const char *flag, const char *item, void *out, int index, char *err,
                       size_t errlen) {
  char(*families)[32] = out;
  size_t len = strlen(item);
  int ok = len > 0 && len < sizeof families[0];
  for (size_t i = 0; ok && i < len; i++) ok = isalnum((unsigned char)item[i]) || item[i] == '_';
  if (!ok) {
    snprintf(err, errlen, "%s: '%s' is no family name (letters, digits and '_', at most %zu)", flag, item,
             sizeof families[0] - 1);
    return -1;
  }
  memset(families[index], 0, sizeof families[0]);  /* whole, for the duplicate check */
  memcpy(families[index], item, len);
  return 0;
}

/* NAME=VALUE as the generator writes a variant's parameters: NAME of
 * upper-case letters, digits and '_', VALUE of letters, digits, '_' and '-'. */
static int each_param(const char *flag, const char *item, void *out, int index, char *err,
                      size_t errlen) {
  char(*params)[64] = out;
  const size_t len = strlen(item);
  const char *eq = strchr(item, '=');
  int ok = eq && eq > item && eq[1] && len < sizeof params[0];
  for (const char *c = item; ok && c < eq; c++) ok = isupper((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '_';
  for (const char *c = eq ? eq + 1 : item; ok && *c; c++) ok = isalnum((unsigned char)*c) || *c == '_' || *c == '-';
  if (!ok) {
    snprintf(err, errlen, "%s: '%s' is not NAME=VALUE (e.g. PERSISTENT=2; at most %zu characters)", flag, item,
             sizeof params[0] - 1);
    return -1;
  }
  memset(params[index], 0, sizeof params[0]); /* whole, for the duplicate check */
  memcpy(params[index], item, len);
  return 0;
}

static int each_mask(const char *flag, const char *item, void *out, int index, char *err,
                     size_t errlen) {
  if (fat_mask_parse(item, (fat_mask *)out + index) == 0) return 0;
  snprintf(err, errlen, "%s: unknown mask '%s' (none, causal, local)", flag, item);
  return -1;
}

/* One window, "LEFT,RIGHT": each bound -1 (none) up to the longest
 * sequence, at least one of them bounded. */
static int each_window(const char *flag, const char *item, void *out, int index, char *err,
                       size_t errlen) {
  fat_window *w = (fat_window *)out + index;
  char left[32];
  const char *comma = strchr(item, ',');
  if (!comma || strchr(comma + 1, ',') || (size_t)(comma - item) >= sizeof left) {
    snprintf(err, errlen, "%s: '%s' is not a window: give LEFT,RIGHT (keys seen before and "
             "after a query's position, -1 for no bound), e.g. 256,0", flag, item);
    return -1;
  }
  memcpy(left, item, (size_t)(comma - item));
  left[comma - item] = 0;
  if (fat_cli_parse_int(flag, left, -1, FAT_MAX_SEQLEN, &w->left, err, errlen) ||
      fat_cli_parse_int(flag, comma + 1, -1, FAT_MAX_SEQLEN, &w->right, err, errlen))
    return -1;
  if (w->left == -1 && w->right == -1) {
    snprintf(err, errlen, "%s: '%s' bounds neither side: that is --mask none", flag, item);
    return -1;
  }
  return 0;
}

/* One --varlen profile, "L1,L2,...": each length 1 .. FAT_MAX_SEQLEN. */
static int each_varlen(const char *flag, const char *item, void *out, int index, char *err,
                       size_t errlen) {
  fat_lengths *v = (fat_lengths *)out + index;
  char why[256];
  if (fat_lengths_parse(item, v, why, sizeof why)) {
    snprintf(err, errlen, "%s: %s", flag, why);
    return -1;
  }
  for (int b = 0; b < v->n; b++)
    if (v->v[b] > FAT_MAX_SEQLEN) {
      snprintf(err, errlen, "%s: length %d is over %d", flag, v->v[b], FAT_MAX_SEQLEN);
      return -1;
    }
  return 0;
}

/* --varlen gives the lengths (and the batch) of its problems, forward and
 * backward (the backward's on the family that takes packed batches,
 * mma80f: problems.c's fat_family_applies). */
static int check_varlen(const fat_options *o, int shape_given, char *err, size_t errlen) {
  if (o->n_varlens == 0) return 0;
  if (shape_given) {
    snprintf(err, errlen, "--varlen gives its problems' lengths and batch: leave out --seqlen, "
             "--seqlen-k and --batch");
    return -1;
  }
  return 0;
}

/* A page size: a power of two the kernels read (FAT_PAGE_SIZE_MIN ..). */
static int each_page_size(const char *flag, const char *item, void *out, int index, char *err,
                          size_t errlen) {
  int *v = (int *)out + index;
  if (fat_cli_parse_int(flag, item, FAT_PAGE_SIZE_MIN, FAT_PAGE_SIZE_MAX, v, err, errlen) ||
      (*v & (*v - 1))) {
    snprintf(err, errlen, "%s: page size '%s' is not a power of two from %d to %d", flag, item,
             FAT_PAGE_SIZE_MIN, FAT_PAGE_SIZE_MAX);
    return -1;
  }
  return 0;
}

/* --paged: the forward's problems over a paged cache of dense batches. */
static int check_paged(const fat_options *o, char *err, size_t errlen) {
  if (o->n_page_sizes == 0) return 0;
  if (o->n_varlens) {
    snprintf(err, errlen, "--paged and --varlen: a paged cache's problems are dense batches");
    return -1;
  }
  for (int i = 0; i < o->n_directions; i++)
    if (o->directions[i] == FAT_BWD) {
      snprintf(err, errlen, "--paged: the backward reads contiguous K and V (a paged cache is "
               "the forward's): --direction fwd");
      return -1;
    }
  return 0;
}

/* Only the 16-bit dtypes have a backward: e4m3 (fp8 inputs) and the fp8
 * K/V caches (fp16-e4m3kv, bf16-e4m3kv) are the forward's. The first such
 * dtype listed is named. */
static int check_forward_only_dtypes(const fat_options *o, char *err, size_t errlen) {
  int fp8 = -1;
  for (int i = 0; i < o->n_dtypes && fp8 < 0; i++)
    if (o->dtypes[i] != FAT_FP16 && o->dtypes[i] != FAT_BF16) fp8 = i;
  for (int i = 0; fp8 >= 0 && i < o->n_directions; i++)
    if (o->directions[i] == FAT_BWD) {
      const char *name = fat_dtype_name(o->dtypes[fp8]);
      snprintf(err, errlen, "--dtype %s: there is no %s backward (%s are the forward's): "
               "--direction fwd, or the backward with --dtype fp16,bf16", name, name,
               o->dtypes[fp8] == FAT_E4M3 ? "fp8 inputs" : "fp8 K/V caches");
      return -1;
    }
  return 0;
}

/* --window belongs to the local mask, and the local mask needs one. */
static int check_windows(const fat_options *o, char *err, size_t errlen) {
  int local = 0;
  for (int i = 0; i < o->n_masks; i++) local |= o->masks[i] == FAT_MASK_LOCAL;
  if (local && o->n_windows == 0) {
    snprintf(err, errlen, "--mask local needs --window LEFT,RIGHT (e.g. --window 256,0; -1 for "
             "no bound on a side)");
    return -1;
  }
  if (!local && o->n_windows > 0) {
    snprintf(err, errlen, "--window applies to the local mask only: add local to --mask");
    return -1;
  }
  return 0;
}

static int each_direction(const char *flag, const char *item, void *out, int index, char *err,
                          size_t errlen) {
  if (fat_direction_parse(item, (fat_direction *)out + index) == 0) return 0;
  snprintf(err, errlen, "%s: unknown direction '%s' (fwd, bwd)", flag, item);
  return -1;
}

/* One --gpu index: 0 .. FAT_MAX_GPU_INDEX ("all" only alone). */
static int each_gpu(const char *flag, const char *item, void *out, int index, char *err,
                    size_t errlen) {
  if (!strcmp(item, "all")) {
    snprintf(err, errlen, "%s: 'all' goes alone, not in a list of indices", flag);
    return -1;
  }
  return fat_cli_parse_int(flag, item, 0, FAT_MAX_GPU_INDEX, (int *)out + index, err, errlen);
}

static int each_seqlen(const char *flag, const char *item, void *out, int index, char *err,
                       size_t errlen) {
  return fat_cli_parse_int(flag, item, 1, FAT_MAX_SEQLEN, (int *)out + index, err, errlen);
}

static int each_batch(const char *flag, const char *item, void *out, int index, char *err,
                      size_t errlen) {
  return fat_cli_parse_int(flag, item, 1, FAT_MAX_BATCH, (int *)out + index, err, errlen);
}

/* A group size (query heads per K/V head) or "mqa". */
static int each_gqa(const char *flag, const char *item, void *out, int index, char *err,
                    size_t errlen) {
  if (!strcmp(item, "mqa")) {
    ((int *)out)[index] = FAT_GQA_MQA;
    return 0;
  }
  if (fat_cli_parse_int(flag, item, 1, FAT_MAX_GROUP, (int *)out + index, err, errlen)) {
    snprintf(err, errlen, "%s: '%s' is not a group size (1 .. %d query heads per K/V head) or mqa",
             flag, item, FAT_MAX_GROUP);
    return -1;
  }
  return 0;
}

/* A decimal number of digits alone (no sign, no space), saturated at
 * LONG_MAX; -1 when S is empty or holds anything else. */
static long whole_number(const char *s, size_t len) {
  long v = 0;
  if (len == 0) return -1;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v > (LONG_MAX - 9) / 10 ? LONG_MAX : v * 10 + (s[i] - '0');
  }
  return v;
}

/* --shard K/N: this machine's share of the problems, shard K of N, each
 * of K and N a whole decimal number, 1 <= K <= N <= FAT_MAX_SHARDS. */
static int parse_shard(const char *flag, const char *s, fat_options *o, char *err, size_t errlen) {
  const char *slash = strchr(s, '/');
  const long k = slash ? whole_number(s, (size_t)(slash - s)) : -1;
  const long n = slash ? whole_number(slash + 1, strlen(slash + 1)) : -1;
  if (k < 0 || n < 0) {
    snprintf(err, errlen, "%s: '%s' is not K/N (shard K of N machines, e.g. 2/4)", flag, s);
    return -1;
  }
  if (n < 1 || n > FAT_MAX_SHARDS) {
    snprintf(err, errlen, "%s: '%s': N (the number of shards) must be 1 to %d", flag, s,
             FAT_MAX_SHARDS);
    return -1;
  }
  if (k < 1 || k > n) {
    snprintf(err, errlen, "%s: '%s': K (this shard) must be 1 to N (%ld)", flag, s, n);
    return -1;
  }
  o->shard_index = (int)k;
  o->shard_count = (int)n;
  return 0;
}

static int copy_path(const char *flag, const char *s, char *dst, size_t cap, char *err,
                     size_t errlen) {
  if (!*s) {
    snprintf(err, errlen, "%s: empty path", flag);
    return -1;
  }
  if (strlen(s) >= cap) {
    snprintf(err, errlen, "%s: path longer than %zu bytes", flag, cap - 1);
    return -1;
  }
  strcpy(dst, s);
  return 0;
}

int fat_options_parse(int argc, char **argv, const int *known_head_dims, int n_known,
                      fat_options *o, char *err, size_t errlen) {
  /* Flags that take a value; each may appear once. */
  static const char *const valued[] = {"--gpu",  "--head-dim", "--dtype",   "--mask",
                                       "--seqlen", "--db",     "--jobs",    "--reps",
                                       "--timeout", "--arch",  "--templates", "--direction",
                                       "--seqlen-k", "--gqa", "--batch", "--window",
                                       "--varlen", "--family", "--param", "--json",
                                       "--shard", "--paged"};
  enum { N_VALUED = sizeof valued / sizeof valued[0] };
  int seen[N_VALUED] = {0}, seen_retune = 0, seen_list = 0, seen_exhaustive = 0;

  memset(o, 0, sizeof *o);
  o->command = FAT_CMD_TUNE;
  o->shard_index = o->shard_count = 1;
  o->reps = FAT_MIN_REPS;
  o->timeout_s = DEFAULT_TIMEOUT_S;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      o->command = FAT_CMD_HELP;
      return 0;
    }
    if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
      o->command = FAT_CMD_VERSION;
      return 0;
    }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      o->verbose++;
      continue;
    }
    if (!strcmp(a, "-vv")) {
      o->verbose += 2;
      continue;
    }
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      o->quiet = 1;
      continue;
    }
    if (!strcmp(a, "--exhaustive")) {
      if (seen_exhaustive++) {
        snprintf(err, errlen, "%s given twice", a);
        return -1;
      }
      o->exhaustive = 1;
      continue;
    }
    if (!strcmp(a, "--retune") || !strcmp(a, "--list")) {
      int *s = a[2] == 'r' ? &seen_retune : &seen_list;
      if ((*s)++) {
        snprintf(err, errlen, "%s given twice", a);
        return -1;
      }
      if (a[2] == 'r') o->retune = 1;
      else o->command = FAT_CMD_LIST;
      continue;
    }
    /* --flag=value or --flag value */
    int k;
    const char *value;
    int got = fat_cli_valued(argc, argv, &i, valued, N_VALUED, seen, &k, &value, err, errlen);
    if (got < 0) return -1;
    if (got == 0) {
      snprintf(err, errlen, "unknown option '%s' (see --help)", a);
      return -1;
    }
    const char *flag = valued[k];
    int rc = 0;
    if (!strcmp(flag, "--gpu")) {
      if (!strcmp(value, "all"))
        o->gpu_all = 1;
      else
        rc = parse_list(flag, value, each_gpu, o->gpus, &o->n_gpus, sizeof(int), err, errlen);
    } else if (!strcmp(flag, "--head-dim")) {
      head_dim_ctx c = {.out = o->head_dims, .known = known_head_dims, .n_known = n_known};
      rc = parse_list(flag, value, each_head_dim, &c, &o->n_head_dims, 0, err, errlen);
      /* duplicates: compare the ints themselves */
      for (int x = 0; !rc && x < o->n_head_dims; x++)
        for (int y = 0; y < x; y++)
          if (o->head_dims[x] == o->head_dims[y]) {
            snprintf(err, errlen, "%s: '%d' given twice", flag, o->head_dims[x]);
            rc = -1;
            break;
          }
    } else if (!strcmp(flag, "--dtype")) {
      rc = parse_list(flag, value, each_dtype, o->dtypes, &o->n_dtypes, sizeof(fat_dtype), err,
                      errlen);
    } else if (!strcmp(flag, "--family")) {
      rc = parse_list(flag, value, each_family, o->families, &o->n_families, sizeof o->families[0], err,
                      errlen);
    } else if (!strcmp(flag, "--param")) {
      rc = parse_list(flag, value, each_param, o->params, &o->n_params, sizeof o->params[0], err, errlen);
    } else if (!strcmp(flag, "--mask")) {
      rc = parse_list(flag, value, each_mask, o->masks, &o->n_masks, sizeof(fat_mask), err,
                      errlen);
    } else if (!strcmp(flag, "--window")) {
      rc = parse_list_sep(flag, value, ':', each_window, o->windows, &o->n_windows,
                          sizeof(fat_window), err, errlen);
    } else if (!strcmp(flag, "--varlen")) {
      rc = parse_list_sep(flag, value, ':', each_varlen, o->varlens, &o->n_varlens,
                          sizeof(fat_lengths), err, errlen);
    } else if (!strcmp(flag, "--direction")) {
      /* Two directions at most: a third item is a duplicate, and says so. */
      fat_direction dirs[FAT_MAX_LIST];
      int n = 0;
      rc = parse_list(flag, value, each_direction, dirs, &n, sizeof(fat_direction), err, errlen);
      if (!rc) {
        memcpy(o->directions, dirs, (size_t)n * sizeof *dirs);
        o->n_directions = n;
      }
    } else if (!strcmp(flag, "--seqlen")) {
      rc = parse_list(flag, value, each_seqlen, o->seqlens, &o->n_seqlens, sizeof(int), err,
                      errlen);
    } else if (!strcmp(flag, "--seqlen-k")) {
      rc = parse_list(flag, value, each_seqlen, o->seqlens_k, &o->n_seqlens_k, sizeof(int), err,
                      errlen);
    } else if (!strcmp(flag, "--gqa")) {
      rc = parse_list(flag, value, each_gqa, o->gqa, &o->n_gqa, sizeof(int), err, errlen);
    } else if (!strcmp(flag, "--paged")) {
      rc = parse_list(flag, value, each_page_size, o->page_sizes, &o->n_page_sizes, sizeof(int), err,
                      errlen);
    } else if (!strcmp(flag, "--batch")) {
      rc = parse_list(flag, value, each_batch, o->batches, &o->n_batches, sizeof(int), err, errlen);
    } else if (!strcmp(flag, "--db")) {
      rc = copy_path(flag, value, o->db_path, sizeof o->db_path, err, errlen);
    } else if (!strcmp(flag, "--shard")) {
      rc = parse_shard(flag, value, o, err, errlen);
    } else if (!strcmp(flag, "--json")) {
      rc = copy_path(flag, value, o->json_path, sizeof o->json_path, err, errlen);
    } else if (!strcmp(flag, "--templates")) {
      rc = copy_path(flag, value, o->source_dir, sizeof o->source_dir, err, errlen);
    } else if (!strcmp(flag, "--jobs")) {
      rc = fat_cli_parse_int(flag, value, 1, FAT_MAX_JOBS, &o->jobs, err, errlen);
    } else if (!strcmp(flag, "--reps")) {
      rc = fat_cli_parse_int(flag, value, FAT_MIN_REPS, FAT_MAX_REPS, &o->reps, err, errlen);
    } else if (!strcmp(flag, "--timeout")) {
      rc = fat_cli_parse_int(flag, value, 1, FAT_MAX_TIMEOUT_S, &o->timeout_s, err, errlen);
    } else if (!strcmp(flag, "--arch")) {
      /* Which targets exist is the generator's to say (main checks it). */
      if (!*value || strlen(value) >= sizeof o->arch) {
        snprintf(err, errlen, "%s: unknown architecture '%s' (sm_80, sm_86, sm_89, sm_90a, ...)",
                 flag, value);
        rc = -1;
      } else {
        strcpy(o->arch, value);
      }
    }
    if (rc) return -1;
  }
  if (o->quiet && o->verbose) {
    snprintf(err, errlen, "--quiet and --verbose contradict each other");
    return -1;
  }
  if (check_windows(o, err, errlen)) return -1;
  if (o->json_path[0] && o->command == FAT_CMD_LIST) {
    snprintf(err, errlen, "--json writes a tuning run's summary: --list runs none");
    return -1;
  }
  if (o->n_directions == 0) {
    o->directions[0] = FAT_FWD;
    o->n_directions = 1;
  }
  int shape_given = 0; /* --seqlen, --seqlen-k or --batch */
  for (int k = 0; k < N_VALUED; k++)
    if (seen[k] && (!strcmp(valued[k], "--seqlen") || !strcmp(valued[k], "--seqlen-k") ||
                    !strcmp(valued[k], "--batch")))
      shape_given = 1;
  if (check_varlen(o, shape_given, err, errlen)) return -1;
  if (check_paged(o, err, errlen)) return -1;
  if (check_forward_only_dtypes(o, err, errlen)) return -1;
  if (o->n_seqlens == 0) {
    memcpy(o->seqlens, default_seqlens, sizeof default_seqlens);
    o->n_seqlens = N_DEFAULT_SEQLENS;
  }
  if (o->n_gqa == 0) {
    o->gqa[0] = 1;
    o->n_gqa = 1;
  }
  if (o->n_gpus == 0 && !o->gpu_all) {
    o->gpus[0] = 0;
    o->n_gpus = 1;
  }
  return 0;
}

/* mkdir -p for the folder part of PATH. */
static int make_parent_dirs(char *path, char *err, size_t errlen) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    int rc = mkdir(path, 0755);
    int e = errno;
    *p = '/';
    if (rc && e != EEXIST) {
      *p = 0;
      snprintf(err, errlen, "cannot create folder %s: %s", path, strerror(e));
      *p = '/';
      return -1;
    }
  }
  return 0;
}

int fat_options_default_db(char *out, size_t cap, int make_folder, char *err, size_t errlen) {
  const char *env = getenv("FATUNE_DB"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (env && *env) n = snprintf(out, cap, "%s", env);
  else if (xdg && *xdg) n = snprintf(out, cap, "%s/fatune/fatune.db", xdg);
  else if (home && *home) n = snprintf(out, cap, "%s/.cache/fatune/fatune.db", home);
  else {
    snprintf(err, errlen, "no database path: set --db, FATUNE_DB, XDG_CACHE_HOME or HOME");
    return -1;
  }
  if (n < 0 || (size_t)n >= cap) {
    snprintf(err, errlen, "database path too long");
    return -1;
  }
  return make_folder ? make_parent_dirs(out, err, errlen) : 0;
}

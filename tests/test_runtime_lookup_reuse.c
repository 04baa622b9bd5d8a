/* SPDX-License-Identifier: MIT */
/* A decoding loop through fat_attention_fwd, on the CPU: libfatune's launch
 * path (the lookup, the module load, the parameter block, the launch)
 * against a stand-in CUDA driver (stand_in_cuda.c, by FATUNE_LIBCUDA) and a
 * table built here whose winners carry stand-in cubins. After a warm-up
 * that meets each answer once, 10,000 decoding steps (batch 1, 32 query
 * heads over 8 K/V heads, seqlen_q 1, seqlen_k one longer a step from
 * 4096, across the length where the nearest tuned bucket changes) with
 * prefill calls mixed in, of one repeated shape and of a new length each
 * time, run with the table gone. They must read no database, make no
 * allocation of the lookup (sel_stats, read through runtime_int.h: no new
 * record, every new shape served by one met in the warm-up), load no
 * module, and leave the exact-shape memo at its preallocated ways; each
 * call must report (its RAN and fat_context_last_choice) what a fresh
 * context launching the same call reports, exact and nearest matches of
 * one record alike, and the kernel launched must be the reported
 * variant's. fat_attention_select then answers a launched problem the
 * memo has let go, and one not launched whose module is loaded, as their
 * launches do, from memory. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "stand_in.h"
#include "compile.h"
#include "db.h"
#include "fat_abi.h"
#include "fatune.h"
#include "sha256.h"
#include "problems.h"
#include "runtime_int.h"

#define H200 "NVIDIA H200"  /* the stand-in driver's GPU */
#define H200_SMS 132
#define HEADS 32
#define HEADS_K 8
#define HEAD_DIM 128
#define FIRST_SEQLEN_K 4096
#define STEPS 10000
#define PREFILL_EVERY 64     /* steps between prefill calls */
#define PREFILL_GROWTH 16    /* the new prefill length: this much longer each time */
#define REPEATED_PREFILL 2048
#define CHECK_EVERY 97       /* steps between those a fresh context checks */
#define MAX_CHECKED 512
#define CUBIN_PREFIX "stand-in cubin of "
#define FAKE_TENSOR_SPAN (1ull << 30)  /* fake device addresses this far apart: never read */

/* The table's forward winners (bf16 causal d128, 4 query heads per K/V
 * head): two decoding buckets (the nearest to seqlen_k 4096 is 1024 up to
 * sqrt(1024 * 32768) = 5793, then 32768) and two prefill ones (2048 up to
 * 4096, then 8192). */
typedef struct winner {
  const char *name;
  int seqlen_q, seqlen_k;
  double ms;
} winner;
static const winner WINNERS[] = {
    {"fwd.reuse.s1k1024", 1, 1024, 0.05},
    {"fwd.reuse.s1k32768", 1, 32768, 0.3},
    {"fwd.reuse.s2048", 2048, 2048, 1.0},
    {"fwd.reuse.s8192", 8192, 8192, 9.0},
};
#define N_WINNERS (sizeof WINNERS / sizeof WINNERS[0])
#define FWD_PARAMS "BLOCK_M=64 BLOCK_N=64 STAGES=2 WARPS=4"

/* The stand-in driver's record of what it launched (stand_in_cuda.c). */
static unsigned long (*stand_in_launches)(void);
static unsigned long (*stand_in_modules_loaded)(void);
static const char *(*stand_in_last_image)(void);

/* Stores winner W in the database at PATH: its variant (a stand-in source
 * carrying today's ABI line), a passing check, a timing, and a build for
 * ARCH whose cubin is the text CUBIN_PREFIX + its name (the stand-in
 * driver loads any image). */
static void put_winner(const char *path, const winner *w, const char *arch) {
  char err[1024], source[256], cubin[256];
  fat_db *db = NULL;
  REQUIRE_EXIT(fat_db_open(path, &db, err, sizeof err) == 0);
  fat_gpu_info g = {.cc_major = 9, .cc_minor = 0, .sm_count = H200_SMS, .driver_version = 13000,
                    .nvrtc_major = 13, .nvrtc_minor = 0, .smem_per_block_optin = 232448};
  snprintf(g.name, sizeof g.name, "%s", H200);
  fat_problem p;
  fat_tune_problem(FAT_BF16, FAT_MASK_CAUSAL, HEAD_DIM, w->seqlen_q, w->seqlen_k, HEADS / HEADS_K, 0,
                   &p);
  snprintf(source, sizeof source, "// stand-in source of %s\n#define FAT_ABI_VERSION %d\n", w->name,
           FAT_ABI_VERSION);
  fat_variant v = {.name = (char *)w->name, .family = "mma80", .source = source,
                   .params = FWD_PARAMS, .entry = "fat_fwd_mma80", .direction = FAT_FWD,
                   .dtype = FAT_BF16, .mask = FAT_MASK_CAUSAL, .head_dim = HEAD_DIM, .block_m = 64,
                   .threads = 128, .smem_bytes = 40960};
  fat_sha256_hex(source, strlen(source), v.hash);
  fat_check c = {.batch = 1, .heads = 2, .seqlen_q = 256, .seqlen_k = 256, .rel_l2 = 0.002,
                 .max_abs = 0.01, .lse_max_abs = 1e-5, .passed = 1, .reason = "ok"};
  fat_timing t = {.reps = 20, .median_ms = w->ms, .min_ms = w->ms * 0.9, .max_ms = w->ms * 1.2,
                  .p10_ms = w->ms * 0.95, .p90_ms = w->ms * 1.05, .tflops = 1.0 / w->ms,
                  .sm_clock_mhz = 1755};
  /* With its NUL: the stand-in driver reads the image as text. */
  const int n = snprintf(cubin, sizeof cubin, CUBIN_PREFIX "%s", w->name) + 1;
  fat_build b = {.ok = 1, .cubin = (unsigned char *)cubin, .cubin_size = (size_t)n};
  snprintf(b.arch, sizeof b.arch, "%s", arch);
  fat_sha256_hex(cubin, (size_t)n, b.key);  /* any key unique to the build */
  sqlite3_int64 gid, pid, vid, tid;
  REQUIRE_EXIT(fat_db_put_gpu(db, &g, &gid) == 0);
  REQUIRE_EXIT(fat_db_put_problem(db, &p, &pid) == 0);
  REQUIRE_EXIT(fat_db_put_variant(db, &v, &vid) == 0);
  REQUIRE_EXIT(fat_db_put_check(db, vid, gid, pid, &c) == 0);
  REQUIRE_EXIT(fat_db_put_timing(db, vid, gid, pid, &t, &tid) == 0);
  REQUIRE_EXIT(fat_db_set_winner(db, gid, pid, vid, tid) == 0);
  REQUIRE_EXIT(fat_db_put_build(db, vid, &b, fat_compile_options(), "13.0") == 0);
  fat_db_close(db);
}

/* A context on the stand-in device, reading the table at PATH alone. */
static fat_context *open_ctx(const char *path) {
  const char *const tables[] = {path};
  fat_context_options o = FAT_CONTEXT_OPTIONS_INIT;
  fat_context *c = NULL;
  o.user_db = "", o.tables = tables, o.n_tables = 1, o.no_builtin = 1;
  fat_status st = fat_context_open(&c, &o);
  if (st) fprintf(stderr, "open: %s\n", fat_context_error(c));
  REQUIRE_EXIT(st == FAT_OK);
  return c;
}

/* A call of seqlen Q x K on fake device addresses (the stand-in launches
 * nothing, and the pointer checks need a driver that knows memory). */
static fat_attn_args call(int q, int k) {
  fat_attn_args a = FAT_ATTN_ARGS_INIT;
  a.batch = 1, a.heads = HEADS, a.heads_k = HEADS_K, a.seqlen_q = q, a.seqlen_k = k;
  a.head_dim = HEAD_DIM, a.dtype = FAT_ATTN_BF16, a.mask = FAT_ATTN_MASK_CAUSAL;
  a.q = (void *)(uintptr_t)(1 * FAKE_TENSOR_SPAN), a.k = (void *)(uintptr_t)(2 * FAKE_TENSOR_SPAN);
  a.v = (void *)(uintptr_t)(3 * FAKE_TENSOR_SPAN), a.o = (void *)(uintptr_t)(4 * FAKE_TENSOR_SPAN);
  a.lse = (float *)(uintptr_t)(5 * FAKE_TENSOR_SPAN);
  fat_attn_args_contiguous(&a);
  return a;
}

/* Every field of two choices but struct_size; WHICH names the first that
 * differs. */
static int same_choice(const fat_choice *x, const fat_choice *y, const char **which) {
#define SAME_FIELD(cond, name) \
  if (!(cond)) {               \
    *which = name;             \
    return 0;                  \
  }
  SAME_FIELD(!strcmp(x->variant, y->variant), "variant");
  SAME_FIELD(!strcmp(x->source_hash, y->source_hash), "source_hash");
  SAME_FIELD(x->origin == y->origin, "origin");
  SAME_FIELD(x->match == y->match, "match");
  SAME_FIELD(x->bucket_seqlen == y->bucket_seqlen && x->bucket_seqlen_k == y->bucket_seqlen_k &&
                 x->bucket_group == y->bucket_group && x->bucket_window_left == y->bucket_window_left &&
                 x->bucket_window_right == y->bucket_window_right &&
                 x->bucket_page_size == y->bucket_page_size, "bucket");
  SAME_FIELD(x->tuned_ms == y->tuned_ms, "tuned_ms");
  SAME_FIELD(x->loaded == y->loaded && x->load == y->load, "load");
  SAME_FIELD(!strcmp(x->db_path, y->db_path), "db_path");
  SAME_FIELD(!strcmp(x->note, y->note), "note");
#undef SAME_FIELD
  *which = "";
  return 1;
}

/* One call of the loop and what it reported. */
typedef struct checked {
  int seqlen_q, seqlen_k;
  fat_choice ran;
} checked;

/* Launches Q x K on C; 0 on any disagreement, which the first time (*BAD
 * was 0) is printed. RAN gets the call's choice. */
static int launch(fat_context *c, int q, int k, fat_choice *ran, int *bad) {
  const fat_attn_args a = call(q, k);
  fat_choice last = FAT_CHOICE_INIT;
  const char *which = "";
  char want_image[256];
  *ran = (fat_choice)FAT_CHOICE_INIT;
  fat_status st = fat_attention_fwd(c, &a, NULL, ran);
  if (st == FAT_OK) st = fat_context_last_choice(c, &last);
  snprintf(want_image, sizeof want_image, CUBIN_PREFIX "%s", ran->variant);
  const char *why = st                                        ? fat_context_error(c)
                    : !same_choice(ran, &last, &which)        ? "fat_context_last_choice differs"
                    : strcmp(stand_in_last_image(), want_image) ? "another variant's kernel ran"
                                                                : NULL;
  if (why && (*bad)++ == 0)
    fprintf(stderr, "q %d k %d: %s (%s%s%s launched)\n", q, k, why, which, which[0] ? "; " : "",
            stand_in_last_image());
  return !why;
}

int main(void) {
  char dir[] = "/tmp/fatune-reuse-XXXXXX", path[256], gone[256], arch[16];
  const char *driver = use_stand_in_driver();
  if (!driver) return 1;
  REQUIRE_EXIT(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tables.db", dir);
  snprintf(gone, sizeof gone, "%s/tables.db.gone", dir);
  fat_arch_for_cc(9, 0, arch);
  for (size_t i = 0; i < N_WINNERS; i++) put_winner(path, &WINNERS[i], arch);

  fat_context *c = open_ctx(path);
  /* The context loaded the stand-in: this is the same library. */
  void *lib = dlopen(driver, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE_EXIT(lib);
  *(void **)&stand_in_launches = dlsym(lib, "stand_in_launches");
  *(void **)&stand_in_modules_loaded = dlsym(lib, "stand_in_modules_loaded");
  *(void **)&stand_in_last_image = dlsym(lib, "stand_in_last_image");
  REQUIRE_EXIT(stand_in_launches && stand_in_modules_loaded && stand_in_last_image);

  /* Warm-up: each winner's answer once (the first decoding step among
   * them), and the exact decoding bucket. */
  static const int warm[][2] = {{1, FIRST_SEQLEN_K}, {1, 8192}, {1, 1024},
                                {REPEATED_PREFILL, REPEATED_PREFILL}, {8192, 8192}};
  int bad = 0;
  fat_choice ran;
  for (size_t i = 0; i < sizeof warm / sizeof warm[0]; i++)
    launch(c, warm[i][0], warm[i][1], &ran, &bad);
  CHECK_INT(bad, 0);
  CHECK_INT(stand_in_modules_loaded(), N_WINNERS);
  const sel_stats warmed = c->stats;
  const unsigned long launched = stand_in_launches();

  /* The loop, the table gone. */
  REQUIRE_EXIT(rename(path, gone) == 0);
  static checked seen[MAX_CHECKED];
  int n_seen = 0, calls = 0, n_exact = 0, n_nearest = 0, variants_seen[N_WINNERS] = {0};
  for (int step = 0; step < STEPS; step++) {
    int shapes[4][2] = {{1, FIRST_SEQLEN_K + step}}, n = 1;
    if (step % PREFILL_EVERY == 0) {
      const int grown = REPEATED_PREFILL + PREFILL_GROWTH * (step / PREFILL_EVERY + 1);
      shapes[n][0] = shapes[n][1] = REPEATED_PREFILL, n++;
      shapes[n][0] = shapes[n][1] = grown, n++;
      shapes[n][0] = 1, shapes[n][1] = 1024, n++;
    }
    for (int s = 0; s < n; s++) {
      launch(c, shapes[s][0], shapes[s][1], &ran, &bad);
      calls++;
      n_exact += ran.match == FAT_MATCH_EXACT;
      n_nearest += ran.match == FAT_MATCH_NEAREST;
      for (size_t w = 0; w < N_WINNERS; w++) variants_seen[w] += !strcmp(ran.variant, WINNERS[w].name);
      if ((step % CHECK_EVERY == 0 || abs(shapes[s][1] - 5793) < 3) && n_seen < MAX_CHECKED)
        seen[n_seen++] = (checked){.seqlen_q = shapes[s][0], .seqlen_k = shapes[s][1], .ran = ran};
    }
  }
  CHECK_INT(bad, 0);
  CHECK_INT(stand_in_launches() - launched, calls);
  /* Every answer was met, exact and nearest matches both. */
  for (size_t w = 0; w < N_WINNERS; w++)
    CHECK_WHY(variants_seen[w] > 0, "%s never served", WINNERS[w].name);
  CHECK_INT(n_exact, 2 * ((STEPS + PREFILL_EVERY - 1) / PREFILL_EVERY));
  CHECK_INT(n_nearest, calls - n_exact);
  /* No database read, no module loaded, nothing of the lookup allocated:
   * every new shape (each decoding step, each new prefill length) was
   * selected from memory and took a record held since the warm-up. */
  CHECK_INT(c->stats.db_opens, warmed.db_opens);
  CHECK_INT(c->stats.rows_read, warmed.rows_read);
  CHECK_INT(c->stats.kernels, warmed.kernels);
  CHECK_INT(c->stats.records, warmed.records);
  CHECK_INT(stand_in_modules_loaded(), N_WINNERS);
  /* (the warm-up met two of the decoding steps' shapes) */
  const int n_prefills = (STEPS + PREFILL_EVERY - 1) / PREFILL_EVERY;
  CHECK_WHY(c->stats.shapes - warmed.shapes >= (unsigned long)(STEPS - 2 + n_prefills),
            "%lu shapes selected", c->stats.shapes - warmed.shapes);
  /* The memo is its preallocated ways, full, each new shape past them
   * having taken an older one's place. */
  int occupied = 0;
  for (int set = 0; set < SEL_MEMO_SETS; set++)
    for (int w = 0; w < SEL_MEMO_WAYS; w++) occupied += c->memo[set][w].rec != NULL;
  CHECK_INT(occupied, SEL_MEMO_SETS * SEL_MEMO_WAYS);
  CHECK_INT(c->stats.evictions, c->stats.shapes - (unsigned long)occupied);
  /* A shape just called is the memo's. */
  launch(c, REPEATED_PREFILL, REPEATED_PREFILL, &ran, &bad);
  const unsigned long shapes = c->stats.shapes;
  launch(c, REPEATED_PREFILL, REPEATED_PREFILL, &ran, &bad);
  CHECK_INT(c->stats.shapes, shapes);
  CHECK_INT(bad, 0);

  /* fat_attention_select answers a launched problem as its launch did,
   * the memo long past it (the first step), and a problem not launched
   * whose variant's module is loaded as its launch will: from memory, the
   * table still gone. */
  fat_choice sel_ch = FAT_CHOICE_INIT;
  const char *which = "";
  fat_attn_args a = call(seen[0].seqlen_q, seen[0].seqlen_k);
  const unsigned long before = c->stats.shapes;
  CHECK_INT(fat_attention_select(c, &a, &sel_ch), FAT_OK);
  CHECK_INT(c->stats.shapes, before + 1);  /* the memo had let it go, and takes it again */
  CHECK_WHY(same_choice(&sel_ch, &seen[0].ran, &which), "q %d k %d: %s differs from the launch's",
            a.seqlen_q, a.seqlen_k, which);
  a = call(1, FIRST_SEQLEN_K + STEPS);
  CHECK_INT(fat_attention_select(c, &a, &sel_ch), FAT_OK);
  CHECK_INT(sel_ch.loaded, 1);
  CHECK_STR(sel_ch.variant, "fwd.reuse.s1k32768");
  const unsigned long selected = c->stats.shapes;
  launch(c, a.seqlen_q, a.seqlen_k, &ran, &bad);
  CHECK_INT(c->stats.shapes, selected);  /* the select's memo way served the launch */
  CHECK_WHY(same_choice(&sel_ch, &ran, &which), "q %d k %d: the select's %s differs from the launch's",
            a.seqlen_q, a.seqlen_k, which);
  CHECK_INT(c->stats.db_opens, warmed.db_opens);
  CHECK_INT(c->stats.records, warmed.records);

  /* What a fresh context launching the same call reports. */
  REQUIRE_EXIT(rename(gone, path) == 0);
  int differ = 0;
  for (int i = 0; i < n_seen; i++) {
    fat_context *fresh = open_ctx(path);
    fat_choice want;
    int fresh_bad = 0;
    launch(fresh, seen[i].seqlen_q, seen[i].seqlen_k, &want, &fresh_bad);
    fat_context_close(fresh);
    CHECK_INT(fresh_bad, 0);
    if (!same_choice(&seen[i].ran, &want, &which) && differ++ == 0)
      fprintf(stderr, "q %d k %d: %s: %s (match %d) in the loop, %s (match %d) from a fresh context\n",
              seen[i].seqlen_q, seen[i].seqlen_k, which, seen[i].ran.variant, seen[i].ran.match,
              want.variant, want.match);
  }
  CHECK_INT(differ, 0);
  CHECK(n_seen > STEPS / CHECK_EVERY);
  fat_context_close(c);
  dlclose(lib);

  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return check_summary("test_runtime_lookup_reuse");
}

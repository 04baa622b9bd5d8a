/* SPDX-License-Identifier: MIT */
/* The command line of `fatune export|import|merge|retire-stale|rehash`
 * (fat_tables_main): flags, the database and the generator they need, one
 * report line per file on stderr; the table files read here, the export
 * written through a temporary renamed over its target. The work itself is
 * export.c's, import.c's, merge.c's and stale.c's. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli_args.h"
#include "options.h"
#include "tables_int.h"

#define EXIT_OK 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2

static const char *const USAGE =
    "usage: fatune export [--db PATH] --gpu-name NAME [-o FILE.sql]\n"
    "                     [--ids-from OLD.sql | --renumber]\n"
    "         (where FILE.sql exists and is not empty, each row keeps the id it has there\n"
    "          and rows new to it are numbered after its largest, so that a diff of the\n"
    "          two shows only the rows that changed; --ids-from takes the ids from OLD.sql\n"
    "          ('-': standard input) instead, to standard output too. FILE.sql or OLD.sql\n"
    "          must be a table of the same GPU. --renumber, or neither, numbers every row\n"
    "          afresh: 1, 2, ... in natural-key order)\n"
    "       fatune import [--db PATH] [--keep-cubins] FILE.sql...\n"
    "       fatune merge [--db PATH] [--keep-cubins] OTHER.db...\n"
    "         (both refuse a file or database whose variants are not what this fatune's\n"
    "          generator produces, field by field, or whose results put a variant on a\n"
    "          problem it does not serve; no cubin comes in: the runtime compiles the\n"
    "          checked sources. --keep-cubins compiles each cubin again here and keeps it\n"
    "          where it comes out byte for byte (same NVRTC version and options); import\n"
    "          also accepts --recompile, the default)\n"
    "       fatune retire-stale [--db PATH]\n"
    "         (retires the checks and timings, and deletes the winners, of every variant\n"
    "          whose source this fatune no longer generates: run it on a database of\n"
    "          older tunes before merging a re-tune into it after a template change)\n"
    "       fatune rehash [--db PATH]\n"
    "         (after a change to the templates' text that leaves the machine code as it\n"
    "          was: keeps the measurements of every stale variant whose source, compiled\n"
    "          today, gives its stored cubins byte for byte, under today's source; run it\n"
    "          before retire-stale)\n";

/* The largest table file import reads (the H200's is 17 MB). */
#define MAX_TABLE_FILE_BYTES ((size_t)1 << 30)
#define READ_CHUNK ((size_t)1 << 16)

/* The text of table file PATH ("-": standard input), read to its end
 * whatever it is -- a file, a pipe, a FIFO, a terminal -- never more than
 * MAX_TABLE_FILE_BYTES; a folder, a NUL byte (no text file has one) and a
 * read error are refused by name. Heap string, or NULL with err. */
static char *read_file(const char *path, char *err, size_t errlen) {
  const int std_in = !strcmp(path, "-");
  struct stat st;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  FILE *f = NULL;
  if (!std_in && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    set_err(err, errlen, "cannot read %s: it is a folder", path);
    return NULL;
  }
  if (!(f = std_in ? stdin : fopen(path, "rb"))) {
    set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return NULL;
  }
  for (;;) {
    if (cap - n < READ_CHUNK + 1) {
      size_t more = cap ? 2 * cap : 4 * READ_CHUNK;
      char *grown = more <= MAX_TABLE_FILE_BYTES + READ_CHUNK + 1 ? realloc(buf, more) : NULL;
      if (!grown) {
        if (more > MAX_TABLE_FILE_BYTES + READ_CHUNK + 1)
          set_err(err, errlen, "cannot read %s: more than the %zu bytes a table file may have",
                  path, MAX_TABLE_FILE_BYTES);
        else
          set_err(err, errlen, "cannot read %s: out of memory", path);
        goto fail;
      }
      buf = grown, cap = more;
    }
    size_t got = fread(buf + n, 1, READ_CHUNK, f);
    n += got;
    if (n > MAX_TABLE_FILE_BYTES) {
      set_err(err, errlen, "cannot read %s: more than the %zu bytes a table file may have", path,
              MAX_TABLE_FILE_BYTES);
      goto fail;
    }
    if (got < READ_CHUNK) break;
  }
  if (ferror(f)) {
    set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
    goto fail;
  }
  buf[n] = 0;
  const char *nul = memchr(buf, 0, n);
  if (nul) {
    long line = 1;
    for (const char *p = buf; p < nul; p++) line += *p == '\n';
    set_err(err, errlen, "%s:%ld: a NUL byte: not a table file", std_in ? "(stdin)" : path, line);
    goto fail;
  }
  if (!std_in) fclose(f);
  return buf;
fail:
  if (f && !std_in) fclose(f);
  free(buf);
  return NULL;
}

/* Attempts at a fresh temporary name before export gives up. */
#define TEMP_TRIES 100

/* Writes the export to PATH through a temporary file in PATH's folder,
 * renamed over PATH when complete: a failed export leaves the previous
 * table in place. The temporary is made with O_EXCL | O_NOFOLLOW (a link
 * planted where it is to be is never followed), and a PATH that exists as
 * anything but a regular file (a link, a FIFO, a device, a folder) is
 * refused, not replaced. */
static int export_to(fat_db *db, const char *gpu, const fat_table_ids *ids, const char *path,
                     char *err, size_t errlen) {
  char tmp[PATH_CAP + 64];
  struct stat st;
  int fd = -1;
  if (!path) return fat_tables_export(db, gpu, ids, stdout, err, errlen);
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    set_err(err, errlen, "%s exists and is not a regular file: not replaced", path);
    return -1;
  }
  const char *slash = strrchr(path, '/');
  const int dir_len = slash ? (int)(slash - path) + 1 : 0;
  for (int i = 0; fd < 0 && i < TEMP_TRIES; i++) {
    snprintf(tmp, sizeof tmp, "%.*s.%s.%ld.%d.tmp", dir_len, path, slash ? slash + 1 : path,
             (long)getpid(), i);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    return -1;
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    return -1;
  }
  int rc = fat_tables_export(db, gpu, ids, f, err, errlen);
  if (fclose(f) && rc == 0) {
    set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    rc = -1;
  }
  if (rc == 0 && rename(tmp, path)) {
    set_err(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    rc = -1;
  }
  if (rc) unlink(tmp);
  return rc;
}

int fat_tables_main(int argc, char **argv) {
  char err[ERRLEN], db_path[PATH_CAP] = "";
  const char *gpu = NULL, *out_path = NULL, *ids_from = NULL, *cmd = argc > 0 ? argv[0] : "";
  const char **files = NULL;
  int n_files = 0, status = EXIT_FAILED, keep_cubins = 0, renumber = 0;
  fat_db *db = NULL;
  fat_gen *gen = NULL;
  fat_trust *trust = NULL;
  if (strcmp(cmd, "export") && strcmp(cmd, "import") && strcmp(cmd, "merge") &&
      strcmp(cmd, "retire-stale") && strcmp(cmd, "rehash")) {
    fprintf(stderr, "fatune: unknown table command '%s'\n%s", cmd, USAGE);
    return EXIT_USAGE;
  }
  if (!(files = calloc((size_t)argc + 1, sizeof *files))) return EXIT_FAILED;
  /* Each valued flag once, never empty: an empty --db is no path (it is
   * not the default database), and a second one is not last-wins. */
  static const char *const VALUED[] = {"--db", "--gpu-name", "-o", "--ids-from"};
  int seen[4] = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int k, got;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(USAGE, stdout);
      fputs("\n" FAT_EXIT_STATUS_HELP, stdout);
      status = fat_exit_flushed(stdout, "fatune", EXIT_OK);
      goto out;
    }
    if ((got = fat_cli_valued(argc, argv, &i, VALUED, 4, seen, &k, &v, err, sizeof err)) < 0 ||
        (got && !*v) || (got && k == 0 && strlen(v) >= sizeof db_path)) {
      if (got > 0 && !*v)
        snprintf(err, sizeof err, "%s: empty %s", VALUED[k], k == 1 ? "name" : "path");
      else if (got > 0)
        snprintf(err, sizeof err, "%s: path longer than %zu bytes", VALUED[k], sizeof db_path - 1);
      fprintf(stderr, "fatune %s: %s\n%s", cmd, err, USAGE);
      status = EXIT_USAGE;
      goto out;
    }
    if (got) {
      if (k == 0) snprintf(db_path, sizeof db_path, "%s", v);
      else if (k == 1) gpu = v;
      else if (k == 2) out_path = v;
      else ids_from = v;
    } else if (!strcmp(a, "--renumber") && !strcmp(cmd, "export")) {
      renumber = 1;
    } else if (!strcmp(a, "--recompile") && !strcmp(cmd, "import")) {
      keep_cubins = 0;  /* what it always asked for is now the default */
    } else if (!strcmp(a, "--keep-cubins") && (!strcmp(cmd, "import") || !strcmp(cmd, "merge"))) {
      keep_cubins = 1;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "fatune %s: unknown option '%s'\n%s", cmd, a, USAGE);
      status = EXIT_USAGE;
      goto out;
    } else {
      files[n_files++] = a;
    }
  }
  /* A GPU name is one line of printable text (import refuses any other). */
  for (const unsigned char *c = (const unsigned char *)(gpu ? gpu : ""); *c; c++)
    if (*c < 0x20 || *c == 0x7f) {
      fprintf(stderr, "fatune %s: --gpu-name: byte %d is 0x%02x, a control character\n", cmd,
              (int)(c - (const unsigned char *)gpu) + 1, *c);
      status = EXIT_USAGE;
      goto out;
    }
  int is_export = !strcmp(cmd, "export"), is_rehash = !strcmp(cmd, "rehash");
  int is_retire = is_rehash || !strcmp(cmd, "retire-stale");  /* both walk the stale variants */
  if (is_retire && (n_files || gpu || out_path || ids_from)) {
    fprintf(stderr, "fatune %s: takes only --db\n%s", cmd, USAGE);
    status = EXIT_USAGE;
    goto out;
  }
  if (!is_retire &&
      (is_export ? (!gpu || n_files || (ids_from && renumber))
                 : (n_files == 0 || gpu || out_path || ids_from))) {
    fprintf(stderr, "fatune %s: %s\n%s", cmd,
            is_export ? (!gpu ? "--gpu-name is required"
                         : n_files ? "export takes no file arguments (use -o)"
                                   : "--ids-from keeps ids, --renumber makes new ones: give one")
                      : (n_files ? "--gpu-name, -o and --ids-from belong to export"
                                 : "no input files"),
            USAGE);
    status = EXIT_USAGE;
    goto out;
  }
  /* An unusable --db is a usage error, as for every fatune command; export
   * only reads it (nothing is created, or written). */
  if ((!db_path[0] &&
       fat_options_default_db(db_path, sizeof db_path, !is_export, err, sizeof err)) ||
      (is_export ? fat_db_open_readonly : fat_db_open)(db_path, &db, err, sizeof err)) {
    fprintf(stderr, "fatune %s: --db: %s\n", cmd, err);
    status = EXIT_USAGE;
    goto out;
  }
  if (is_retire && !(gen = fat_gen_open(NULL, err, sizeof err))) {
    fprintf(stderr, "fatune %s: the generator: %s\n", cmd, err);
    goto out;
  }
  if (is_rehash) {
    long long carried = 0, left = 0;
    if (fat_tables_rehash(db, gen, &carried, &left, err, sizeof err)) {
      fprintf(stderr, "fatune rehash: %s\n", err);
      goto out;
    }
    fprintf(stderr,
            "fatune rehash: %s: %lld stale variants carried over (same machine code), %lld left"
            " stale\n", db_path, carried, left);
    status = EXIT_OK;
    goto out;
  }
  if (is_retire) {
    long long variants = 0, winners = 0;
    if (fat_tables_retire_stale(db, gen, &variants, &winners, err, sizeof err)) {
      fprintf(stderr, "fatune retire-stale: %s\n", err);
      goto out;
    }
    fprintf(stderr, "fatune retire-stale: %s: %lld stale variants retired, %lld winners deleted\n",
            db_path, variants, winners);
    status = EXIT_OK;
    goto out;
  }
  if (is_export) {
    /* The table whose ids the rows keep: --ids-from's, else the one -o
     * replaces (an empty file, as mktemp leaves one, has none). */
    const char *prev = ids_from;
    struct stat st;
    fat_table_ids *ids = NULL;
    if (!prev && !renumber && out_path && lstat(out_path, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size > 0)
      prev = out_path;
    if (prev) {
      char *text = read_file(prev, err, sizeof err);
      ids = text ? fat_table_ids_read(text, strcmp(prev, "-") ? prev : "(stdin)", gpu, err,
                                      sizeof err)
                 : NULL;
      free(text);
      if (!ids) {
        if (ids_from)
          fprintf(stderr, "fatune export: --ids-from: %s\n", err);
        else
          fprintf(stderr, "fatune export: -o: %s (export keeps the ids of the table it replaces;"
                          " --renumber numbers its rows afresh)\n", err);
        goto out;
      }
    }
    const int rc = export_to(db, gpu, ids, out_path, err, sizeof err);
    fat_table_ids_free(ids);
    if (rc) {
      fprintf(stderr, "fatune export: %s\n", err);
      goto out;
    }
    status = out_path ? EXIT_OK : fat_exit_flushed(stdout, "fatune export", EXIT_OK);
    goto out;
  }
  /* Each variant is checked against the generator, generated once for all
   * the files. */
  if (!(gen = fat_gen_open(NULL, err, sizeof err))) {
    fprintf(stderr, "fatune %s: the generator: %s\n", cmd, err);
    goto out;
  }
  if (!(trust = fat_trust_open(gen))) {
    fprintf(stderr, "fatune %s: out of memory\n", cmd);
    goto out;
  }
  const fat_import_options io = {.trust = trust,
                                 .cubins = keep_cubins ? FAT_CUBINS_RECOMPILE : FAT_CUBINS_DROP};
  /* ^C stops the file in hand (nothing of it reaches the database) and
   * exits 130; a signal that ends the process removes the scratch database
   * first, and one that cannot be caught leaves it for the next import to
   * sweep. */
  fat_interrupt_install();
  signal(SIGTERM, remove_and_die);
  signal(SIGHUP, remove_and_die);
  for (int i = 0; i < n_files && !fat_interrupted(); i++) {
    fat_tables_report r;
    int rc;
    const char *name = strcmp(files[i], "-") ? files[i] : "(stdin)";
    if (!strcmp(cmd, "import")) {
      char *text = read_file(files[i], err, sizeof err);
      rc = text ? fat_tables_import(db, text, name, &io, &r, err, sizeof err) : -1;
      free(text);
    } else {
      rc = fat_tables_merge(db, files[i], &io, &r, err, sizeof err);
    }
    if (rc && fat_interrupted()) break;
    if (rc) {
      fprintf(stderr, "fatune %s: %s\n", cmd, err);
      goto out;
    }
    fprintf(stderr, "fatune %s: %s: %lld new rows into %s", cmd, name, r.added, db_path);
    if (keep_cubins)
      fprintf(stderr, " (%lld cubins kept, compiled here byte for byte; %lld builds left out)\n",
              r.trust.builds_kept, r.trust.builds_dropped);
    else if (r.trust.builds_dropped)
      fprintf(stderr, " (%lld builds left out: the runtime compiles the checked sources)\n",
              r.trust.builds_dropped);
    else
      fputc('\n', stderr);
  }
  if (fat_interrupted()) {
    fprintf(stderr, "fatune %s: interrupted\n", cmd);
    status = FAT_EXIT_INTERRUPTED;
    goto out;
  }
  status = EXIT_OK;
out:
  fat_trust_close(trust);
  fat_gen_close(gen);
  fat_db_close(db);
  free(files);
  return status;
}

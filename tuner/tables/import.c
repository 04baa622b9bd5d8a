/* SPDX-License-Identifier: MIT */
/* `fatune import`: a table file's statements run one by one in a scratch
 * database (scratch.c), never in the target, under an authorizer that
 * allows only INSERT into fatune's tables (tables.h says why). A file
 * without a table's first and last lines is refused, and so is one with a
 * statement that does anything else, naming its line; what loads is
 * judged and merged as a merge's rows are. Export reads the table it
 * replaces through the same two steps (table_text_begin, table_text_run),
 * for its ids only (table_ids.c). */
#include <stdio.h>
#include <string.h>
#include "tables_int.h"

/* Functions a table file may call: char() splices newlines, fat_inflate()
 * gives a cubin back (cubin_text.c), the rest are what the schema's
 * constraints and defaults evaluate. */
static const char *const IMPORT_FUNCTIONS[] = {"char", FAT_INFLATE_SQL, "length", "strftime",
                                               "glob"};
#define N_IMPORT_FUNCTIONS (sizeof IMPORT_FUNCTIONS / sizeof IMPORT_FUNCTIONS[0])

typedef struct import_guard {
  char refused[256];  /* the first action refused, for the message */
} import_guard;

static const char *action_name(int action) {
  switch (action) {
  case SQLITE_INSERT: return "INSERT INTO";
  case SQLITE_DELETE: return "DELETE FROM";
  case SQLITE_UPDATE: return "UPDATE";
  case SQLITE_SELECT: return "SELECT";
  case SQLITE_FUNCTION: return "function";
  case SQLITE_DROP_TABLE: return "DROP TABLE";
  case SQLITE_ATTACH: return "ATTACH";
  case SQLITE_DETACH: return "DETACH";
  case SQLITE_PRAGMA: return "PRAGMA";
  case SQLITE_TRANSACTION: return "transaction";
  case SQLITE_CREATE_TABLE: case SQLITE_CREATE_TEMP_TABLE: return "CREATE TABLE";
  case SQLITE_CREATE_TRIGGER: case SQLITE_CREATE_TEMP_TRIGGER: return "CREATE TRIGGER";
  default: return "statement";
  }
}

/* Only INSERTs into fatune's tables, and what the schema's own triggers and
 * constraints do in response, are allowed. */
static int import_authorizer(void *user, int action, const char *a1, const char *a2,
                             const char *db, const char *trigger) {
  import_guard *g = user;
  switch (action) {
  case SQLITE_INSERT:
    /* Only the scratch database's own tables: never temp or an attachment. */
    if (in_list(a1, IMPORT_TABLES, N_IMPORT_TABLES) && db && !strcmp(db, "main")) return SQLITE_OK;
    break;
  case SQLITE_READ: return SQLITE_OK;
  case SQLITE_FUNCTION:
    if (in_list(a2, IMPORT_FUNCTIONS, N_IMPORT_FUNCTIONS)) return SQLITE_OK;
    break;
  case SQLITE_SELECT:
  case SQLITE_DELETE:
    if (trigger) return SQLITE_OK; /* the schema's triggers */
    break;
  default: break;
  }
  /* The first refusal aborts the statement: it is the one reported. */
  const char *what = action == SQLITE_FUNCTION && a2 ? a2 : (a1 ? a1 : a2);
  if (!g->refused[0])
    snprintf(g->refused, sizeof g->refused, "%s%s%s%s", action_name(action), what ? " '" : "",
             what ? what : "", what ? "'" : "");
  return SQLITE_DENY;
}

/* A UTF-8 byte order mark, which some editors put before the first line. */
#define UTF8_BOM "\xef\xbb\xbf"
/* Longest SQLite message quoted whole: a cut or mangled blob makes one of
 * its whole hex token. */
#define MAX_QUOTED_MESSAGE 160
/* The text after white space and SQL comments at P. */
static const char *skip_space(const char *p) {
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') p++;
    if (p[0] == '-' && p[1] == '-') {
      while (*p && *p != '\n') p++;
    } else if (p[0] == '/' && p[1] == '*') {
      const char *e = strstr(p + 2, "*/");
      p = e ? e + 2 : p + strlen(p);
    } else {
      return p;
    }
  }
}

/* Counts lines up to P: *AT (a position at or before P) moves there and
 * *LINE is the line of P. */
static void count_lines(const char **at, const char *p, long *line) {
  for (; *at < p; (*at)++) *line += **at == '\n';
}

/* 1 when TEXT's last line that is not blank is FAT_TABLES_END's (CR LF line
 * ends and blank lines after it allowed). */
static int ends_with_end_line(const char *text) {
  const size_t want = strlen(FAT_TABLES_END) - 1; /* without its newline */
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ' ||
                   text[n - 1] == '\t'))
    n--;
  return n > want && text[n - want - 1] == '\n' && !strncmp(text + n - want, FAT_TABLES_END, want);
}

/* NAME:LINE: MSG, a long message cut to its start. */
static void set_line_err(char *err, size_t errlen, const char *name, long line, const char *msg) {
  const size_t n = strlen(msg);
  if (n > MAX_QUOTED_MESSAGE)
    set_err(err, errlen, "%s:%ld: %.*s... (%zu more characters)", name, line,
            MAX_QUOTED_MESSAGE, msg, n - MAX_QUOTED_MESSAGE);
  else
    set_err(err, errlen, "%s:%ld: %s", name, line, msg);
}

/* Runs the statements of TEXT on SH one by one under the authorizer,
 * naming the line of the first that fails. Returns 0 or -1 with err. */
static int run_table_text(sqlite3 *sh, const char *text, const char *name, import_guard *guard,
                          char *err, size_t errlen) {
  const char *tail = text, *counted = text;
  long line = 1;
  for (;;) {
    const char *start = skip_space(tail), *next = NULL;
    sqlite3_stmt *st = NULL;
    if (!*start) return 0;
    count_lines(&counted, start, &line);
    int rc = sqlite3_prepare_v2(sh, start, -1, &st, &next);
    if (rc == SQLITE_OK && st) {
      while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      }
      if (rc == SQLITE_DONE) rc = SQLITE_OK;
    } else if (rc != SQLITE_OK) {
      /* The line of the token SQLite stopped at, when it says. */
      const int off = sqlite3_error_offset(sh);
      if (off >= 0) count_lines(&counted, start + off, &line);
    }
    if (rc != SQLITE_OK) {
      char why[ERRLEN];
      if (guard->refused[0])
        snprintf(why, sizeof why, "refused %s: a table may only INSERT into fatune's tables",
                 guard->refused);
      else
        snprintf(why, sizeof why, "%s", sqlite3_errmsg(sh));
      set_line_err(err, errlen, name, line, why);
      sqlite3_finalize(st);
      return -1;
    }
    sqlite3_finalize(st);
    tail = next;
  }
}

const char *table_text_begin(const char *text, const char *name, char *err, size_t errlen) {
  if (!strncmp(text, UTF8_BOM, strlen(UTF8_BOM))) text += strlen(UTF8_BOM);
  if (strncmp(text, FAT_TABLES_MAGIC, strlen(FAT_TABLES_MAGIC)) &&
      strncmp(text, FAT_TABLES_MAGIC_V1, strlen(FAT_TABLES_MAGIC_V1))) {
    set_err(err, errlen, "%s: not a fatune table (first line must start '%s')", name,
            FAT_TABLES_MAGIC);
    return NULL;
  }
  /* A file cut anywhere, between two statements or inside one (a blob's
   * hex, a source), is refused as what it is, before any row is read. */
  if (!ends_with_end_line(text)) {
    set_err(err, errlen, "%s: truncated: the file does not end with the line '%.*s'", name,
            (int)strlen(FAT_TABLES_END) - 1, FAT_TABLES_END);
    return NULL;
  }
  return text;
}

int table_text_run(sqlite3 *sh, const char *text, const char *name, char *err, size_t errlen) {
  import_guard guard = {{0}};
  /* Defensive mode: no writable_schema, no direct writes to the schema or
   * shadow tables, whatever the file manages to say. */
  sqlite3_db_config(sh, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
  sqlite3_db_config(sh, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
  /* Direct only: no view or trigger of the schema calls it. */
  if (sqlite3_create_function(sh, FAT_INFLATE_SQL, 2,
                              SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY, NULL,
                              cubin_inflate_sql, NULL, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s", name, sqlite3_errmsg(sh));
    return -1;
  }
  sqlite3_set_authorizer(sh, import_authorizer, &guard);
  int rc = run_table_text(sh, text, name, &guard, err, errlen);
  sqlite3_set_authorizer(sh, NULL, NULL);
  sqlite3_create_function(sh, FAT_INFLATE_SQL, 2, SQLITE_UTF8, NULL, NULL, NULL, NULL);
  return rc;
}

int fat_tables_import(fat_db *db, const char *sql, const char *name, const fat_import_options *o,
                      fat_tables_report *r, char *err, size_t errlen) {
  char stage[PATH_CAP] = "";
  fat_db *sdb = NULL;
  fat_tables_report scratch_report;
  char *msg = NULL;
  int rc = -1;
  if (!r) r = &scratch_report;
  *r = NO_REPORT;
  if (!(sql = table_text_begin(sql, name, err, errlen))) return -1;
  if (!o || !o->trust) {
    set_err(err, errlen, "%s: no generator to check its variants against", name);
    return -1;
  }
  if (scratch_open(name, stage, &sdb, err, errlen)) goto out;
  sqlite3 *sh = fat_db_handle(sdb);
  sqlite3_progress_handler(sh, INTERRUPT_CHECK_STEPS, interrupt_progress, NULL);
  if (sqlite3_exec(sh, "BEGIN", NULL, NULL, &msg) != SQLITE_OK) {
    set_err(err, errlen, "%s: %s", name, msg ? msg : "scratch database failure");
    goto out;
  }
  if (table_text_run(sh, sql, name, err, errlen)) {
    sqlite3_exec(sh, "ROLLBACK", NULL, NULL, NULL);
    goto out;
  }
  rc = judge_and_merge(db, sdb, stage, name, o, r, err, errlen);
  sdb = NULL;
out:
  sqlite3_free(msg);
  fat_db_close(sdb);
  scratch_done(stage);
  return rc;
}

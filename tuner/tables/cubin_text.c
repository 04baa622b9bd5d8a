/* SPDX-License-Identifier: MIT */
/* A cubin in a table file: export writes each blob deflated, as the SQL
 * expression fat_inflate(X'<zlib stream>', <bytes>), and import gives the
 * statements the function that turns it back (tables.h: format 2). A cubin
 * is an ELF file of mostly zero padding and repeated tables: deflated it is
 * about a quarter of its bytes, and an eighth of the X'hex' it was. Import
 * believes nothing of the stream: the size it names must be within
 * FAT_TABLES_MAX_CUBIN_BYTES, and the stream must inflate, checksum and
 * all, to exactly that many bytes; the cubin is then judged as any other
 * (its build_hashes row, its provenance). */
#include <stdlib.h>
#include <zlib.h>
#include "tables_int.h"

int cubin_deflate(const void *blob, size_t n, unsigned char **out, size_t *out_n) {
  uLongf cap = compressBound((uLong)n);
  *out = malloc(cap ? cap : 1);
  if (!*out) return -1;
  /* Level 9: written once, read on every build; zlib's output for a level
   * is the same bytes every time, so an export stays deterministic. */
  if (compress2(*out, &cap, blob, (uLong)n, 9) != Z_OK) {
    free(*out);
    *out = NULL;
    return -1;
  }
  *out_n = (size_t)cap;
  return 0;
}

void cubin_inflate_sql(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  char msg[160];
  if (argc != 2 || sqlite3_value_type(argv[0]) != SQLITE_BLOB ||
      sqlite3_value_type(argv[1]) != SQLITE_INTEGER) {
    sqlite3_result_error(ctx, FAT_INFLATE_SQL ": takes a blob and its inflated size in bytes", -1);
    return;
  }
  const sqlite3_int64 want = sqlite3_value_int64(argv[1]);
  if (want < 1 || want > FAT_TABLES_MAX_CUBIN_BYTES) {
    snprintf(msg, sizeof msg, FAT_INFLATE_SQL ": size %lld is outside 1 to %lld bytes",
             (long long)want, (long long)FAT_TABLES_MAX_CUBIN_BYTES);
    sqlite3_result_error(ctx, msg, -1);
    return;
  }
  const unsigned char *in = sqlite3_value_blob(argv[0]);
  const int in_n = sqlite3_value_bytes(argv[0]);
  unsigned char *out = malloc((size_t)want);
  if (!out) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  /* uncompress stops at the named size: a stream that holds more ends in
   * Z_BUF_ERROR, one cut short or damaged in Z_DATA_ERROR. */
  uLongf got = (uLongf)want;
  const int zrc = in_n > 0 ? uncompress(out, &got, in, (uLong)in_n) : Z_DATA_ERROR;
  if (zrc != Z_OK || got != (uLongf)want) {
    snprintf(msg, sizeof msg, FAT_INFLATE_SQL ": the %d-byte stream does not inflate to %lld bytes"
             " (%s)", in_n, (long long)want,
             zrc == Z_BUF_ERROR ? "it holds more" : zrc == Z_OK ? "it holds fewer"
             : zrc == Z_MEM_ERROR ? "out of memory" : "not a zlib stream, or damaged");
    free(out);
    sqlite3_result_error(ctx, msg, -1);
    return;
  }
  sqlite3_result_blob64(ctx, out, (sqlite3_uint64)want, free);
}

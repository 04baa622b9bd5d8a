/* SPDX-License-Identifier: MIT */
/* The generator's Lua host. Modelled on lua.c and lauxlib.c: every entry runs
 * its whole body in protected mode under a traceback message handler, and
 * the scripts see the standard string/table/math/utf8 libraries, a trimmed
 * base library and one table of C functions, `fat` (generator/API.md). The
 * host caps what a script may cost (instructions, heap, output), turns the
 * variant tables Lua returns into fat_variant structs and hashes each source.
 * Scripts and templates come from the embedded copies or from SOURCE_DIR. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "embedded.h"
#include "gen.h"
#include "sha256.h"

/* A generator script that runs longer than this is stuck; expanding the
 * whole space takes a few million. */
#define FAT_GEN_MAX_INSTRUCTIONS 200000000LL
/* The count hook fires every this many instructions (cheap, and fine enough). */
#define FAT_GEN_HOOK_STEP 10000
/* Lua's heap: the largest whole space, sm_90a's forward, is 5884 sources
 * of 403 MB in all (measured in the thirty-second session). */
#define FAT_GEN_MAX_HEAP ((size_t)1 << 30)
/* Wall-clock seconds one call into the generator may take (sm_90a's whole
 * forward space takes about 3 s in a plain build). */
#define FAT_GEN_MAX_SECONDS 120
/* Largest script or template file read, and largest generated source. */
#define FAT_GEN_MAX_FILE_BYTES (16 << 20)
#define FAT_GEN_MAX_SOURCE_BYTES (8 << 20)
/* Most variants (and pruned configurations) one query may produce. */
#define FAT_GEN_MAX_VARIANTS 100000

/* Registry keys of the module cache and of the space module. */
#define MODULES_KEY "fat.modules"
#define SPACE_KEY "fat.space"

struct fat_gen {
  lua_State *L;
  char *source_dir;       /* NULL: the embedded files */
  size_t heap_bytes;      /* Lua's heap now */
  long long instructions; /* executed since the current entry began, in hook steps */
};

static fat_gen *gen_of(lua_State *L) { return *(fat_gen **)lua_getextraspace(L); }

/* lua_Alloc with a cap: a script that builds ever larger strings fails with
 * a memory error instead of taking the machine down. */
static void *gen_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  fat_gen *g = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    g->heap_bytes -= old;
    return NULL;
  }
  if (nsize > old && g->heap_bytes - old + nsize > FAT_GEN_MAX_HEAP) return NULL;
  void *p = realloc(ptr, nsize);
  if (p) g->heap_bytes = g->heap_bytes - old + nsize;
  return p;
}

static void count_hook(lua_State *L, lua_Debug *ar) {
  fat_gen *g = gen_of(L);
  g->instructions += FAT_GEN_HOOK_STEP;
  if (g->instructions <= FAT_GEN_MAX_INSTRUCTIONS) return;
  /* From now on every instruction raises the error again, so a script that
   * catches it with pcall cannot loop on. */
  lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
  /* name the line the script was stuck on */
  if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
    lua_pushfstring(L, "%s:%d: ", ar->short_src, ar->currentline);
  else
    lua_pushliteral(L, "");
  lua_pushfstring(L, "%sgenerator script exceeded %d instructions", lua_tostring(L, -1),
                  (int)FAT_GEN_MAX_INSTRUCTIONS);
  lua_error(L);
}

/* As lua.c's msghandler: the message, then where it happened. A table
 * {plain = message} is an answer about the caller's input, not a script
 * fault, and is passed on without a traceback. */
static int msghandler(lua_State *L) {
  if (lua_istable(L, 1) && lua_getfield(L, 1, "plain") == LUA_TSTRING) return 1;
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Raises an error about the caller's input or the shape of what Lua
 * returned: the message says it all, so no traceback (see msghandler). */
static int plain_error(lua_State *L, const char *fmt, ...) {
  va_list ap;
  lua_createtable(L, 0, 1);
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_setfield(L, -2, "plain");
  return lua_error(L);
}

/* The wall-clock watchdog of one call into the generator. The instruction
 * hook never fires inside a library function, and a pattern match such as
 * string.find on a long string can run for hours in C: past the deadline
 * the watchdog ends the process with a message (generator calls run only in
 * the fatune command, never in the runtime library). */
/* The deadline: FAT_GEN_MAX_SECONDS, or $FATUNE_GEN_TIMEOUT_S (tests). */
static int watchdog_seconds(void) {
  const char *env = getenv("FATUNE_GEN_TIMEOUT_S");
  int s = env ? atoi(env) : 0;
  return s > 0 ? s : FAT_GEN_MAX_SECONDS;
}

typedef struct watchdog {
  pthread_mutex_t lock;
  pthread_cond_t finished;
  int done;      /* the call returned */
  int seconds;   /* the deadline */
  int closing;   /* it guards lua_close, not a call */
  pthread_t thread;
  int started;
} watchdog;

static void *watchdog_main(void *arg) {
  watchdog *w = arg;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += w->seconds;
  pthread_mutex_lock(&w->lock);
  int rc = 0;
  while (!w->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&w->finished, &w->lock, &deadline);
  int expired = !w->done;
  pthread_mutex_unlock(&w->lock);
  if (expired && w->closing) {
    dprintf(STDERR_FILENO, "fatune: generator: closing the generator's Lua state took more than "
            "%d s; stopped\n", w->seconds);
    _exit(1);
  }
  if (expired) {
    dprintf(STDERR_FILENO,
            "fatune: generator: a generator script ran for more than %d s inside a library "
            "function (string.find, string.rep, ... on huge input); stopped\n",
            w->seconds);
    _exit(1);
  }
  return NULL;
}

static void watchdog_start(watchdog *w, int closing) {
  *w = (watchdog){.lock = PTHREAD_MUTEX_INITIALIZER, .finished = PTHREAD_COND_INITIALIZER,
                  .seconds = watchdog_seconds(), .closing = closing};
  w->started = pthread_create(&w->thread, NULL, watchdog_main, w) == 0;
}

static void watchdog_stop(watchdog *w) {
  if (!w->started) return;
  pthread_mutex_lock(&w->lock);
  w->done = 1;
  pthread_cond_signal(&w->finished);
  pthread_mutex_unlock(&w->lock);
  pthread_join(w->thread, NULL);
}


/* Runs FN(ctx) in protected mode with a fresh instruction budget and a
 * wall-clock watchdog; on failure copies the message into err. Returns 0
 * or -1. */
static int run_protected(fat_gen *g, lua_CFunction fn, void *ctx, char *err, size_t errlen) {
  lua_State *L = g->L;
  int base = lua_gettop(L);
  watchdog w;
  watchdog_start(&w, 0);
  g->instructions = 0;
  lua_sethook(L, count_hook, LUA_MASKCOUNT, FAT_GEN_HOOK_STEP);
  lua_pushcfunction(L, msghandler);
  lua_pushcfunction(L, fn);
  lua_pushlightuserdata(L, ctx);
  int status = lua_pcall(L, 1, 0, base + 1);
  watchdog_stop(&w);
  if (status != LUA_OK) {
    if (status == LUA_ERRMEM)
      snprintf(err, errlen, "generator: out of memory (Lua heap capped at %zu bytes)",
               (size_t)FAT_GEN_MAX_HEAP);
    else
      snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no message)");
  }
  lua_settop(L, base);
  return status == LUA_OK ? 0 : -1;
}

/* Pushes the contents of REL ("generator/space.lua") from the source folder
 * or the embedded table; returns 0 (nothing pushed) when there is no such
 * file. The buffer is a userdata, so a memory error leaks nothing. */
static int push_file(lua_State *L, const char *rel) {
  fat_gen *g = gen_of(L);
  if (!g->source_dir) {
    const fat_embedded_file *f = fat_embedded_find(rel);
    if (!f) return 0;
    lua_pushlstring(L, f->data, f->size);
    return 1;
  }
  const char *path = lua_pushfstring(L, "%s/%s", g->source_dir, rel);
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
    lua_pop(L, 1);
    return 0;
  }
  if (st.st_size > FAT_GEN_MAX_FILE_BYTES)
    luaL_error(L, "%s: %d bytes, more than the %d a generator file may have", path,
               (int)(st.st_size > INT_MAX ? INT_MAX : st.st_size), FAT_GEN_MAX_FILE_BYTES);
  size_t size = (size_t)st.st_size;
  char *buf = lua_newuserdatauv(L, size ? size : 1, 0);
  FILE *fp = fopen(path, "rb");
  if (!fp) luaL_error(L, "%s: %s", path, strerror(errno));
  size_t got = fread(buf, 1, size, fp);
  int failed = ferror(fp);
  fclose(fp);
  if (failed || got != size) luaL_error(L, "%s: read %d of %d bytes", path, (int)got, (int)size);
  lua_pushlstring(L, buf, size);
  lua_replace(L, -3); /* the string where the path was */
  lua_pop(L, 1);      /* the buffer */
  return 1;
}

/* Module names are plain words so that a name can never leave generator/. */
static int plain_word(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
      return 0;
  return 1;
}

/* fat.require(name): runs generator/<name>.lua once and returns its value. */
static int fat_require(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  if (!plain_word(name))
    luaL_argerror(L, 1, lua_pushfstring(L, "module name '%s' must be letters, digits and '_' only", name));
  lua_getfield(L, LUA_REGISTRYINDEX, MODULES_KEY);
  int modules = lua_gettop(L);
  if (lua_getfield(L, modules, name) != LUA_TNIL) {
    /* false marks a module whose chunk is still running */
    if (lua_isboolean(L, -1) && !lua_toboolean(L, -1))
      luaL_error(L, "fat.require: generator/%s.lua requires itself (a cycle)", name);
    return 1;
  }
  lua_pop(L, 1);
  const char *rel = lua_pushfstring(L, "generator/%s.lua", name);
  if (!push_file(L, rel)) luaL_error(L, "fat.require: no generator script '%s' (%s not found)", name, rel);
  size_t size;
  const char *text = lua_tolstring(L, -1, &size);
  const char *chunkname = lua_pushfstring(L, "@%s", rel);
  /* text only: precompiled chunks can crash the interpreter */
  if (luaL_loadbufferx(L, text, size, chunkname, "t") != LUA_OK) lua_error(L);
  lua_pushboolean(L, 0);
  lua_setfield(L, modules, name);
  lua_call(L, 0, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, modules, name);
  return 1;
}

/* fat.read_template(name): the text of templates/<name>, or nil and a message
 * when there is no such file. */
static int fat_read_template(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  if (!*name || strchr(name, '/') || strchr(name, '\\') || strstr(name, ".."))
    luaL_argerror(L, 1, lua_pushfstring(L,
                  "template name '%s' must be a file name in templates/ (no '/' or '..')", name));
  const char *rel = lua_pushfstring(L, "templates/%s", name);
  if (push_file(L, rel)) return 1;
  lua_pushnil(L);
  lua_pushfstring(L, "%s: no such template", rel);
  return 2;
}

/* setmetatable without finalizers: Lua runs a __gc metamethod with hooks
 * off (the instruction cap never reaches it), during any collection or in
 * lua_close, where no watchdog ran; a generator script has no use for one.
 * A metatable given a __gc field only after setmetatable never finalizes
 * (Lua 5.4), so refusing it here is enough. The original is upvalue 1. */
static int fat_setmetatable(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    const int has_gc = lua_rawget(L, 2) != LUA_TNIL;
    lua_pop(L, 1);
    if (has_gc) luaL_argerror(L, 2, "finalizers (__gc) are not available to generator scripts");
  }
  const int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}

static const luaL_Reg fat_lib[] = {
    {"require", fat_require},
    {"read_template", fat_read_template},
    {NULL, NULL},
};

/* Base-library functions a generator script must not have: file access,
 * loading code other than through fat.require, and stdout. */
static const char *const base_removed[] = {"dofile", "loadfile", "load", "print", NULL};

static int open_main(lua_State *L) {
  const luaL_Reg libs[] = {
      {LUA_GNAME, luaopen_base},          {LUA_STRLIBNAME, luaopen_string},
      {LUA_TABLIBNAME, luaopen_table},    {LUA_MATHLIBNAME, luaopen_math},
      {LUA_UTF8LIBNAME, luaopen_utf8},    {NULL, NULL},
  };
  for (const luaL_Reg *lib = libs; lib->func; lib++) {
    luaL_requiref(L, lib->name, lib->func, 1);
    lua_pop(L, 1);
  }
  for (const char *const *name = base_removed; *name; name++) {
    lua_pushnil(L);
    lua_setglobal(L, *name);
  }
  lua_getglobal(L, "setmetatable");
  lua_pushcclosure(L, fat_setmetatable, 1);
  lua_setglobal(L, "setmetatable");
  /* luaL_requiref leaves a package.loaded-style table in the registry; the
   * scripts cannot reach it, so it stays. */
  luaL_newlib(L, fat_lib);
  lua_setglobal(L, "fat");
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, MODULES_KEY);

  lua_pushcfunction(L, fat_require);
  lua_pushliteral(L, "space");
  lua_call(L, 1, 1);
  if (!lua_istable(L, -1) || lua_getfield(L, -1, "generate") != LUA_TFUNCTION ||
      lua_getfield(L, -2, "head_dims") != LUA_TFUNCTION)
    plain_error(L, "generator/space.lua must return a table with functions 'generate' and 'head_dims'");
  lua_pop(L, 2);
  lua_setfield(L, LUA_REGISTRYINDEX, SPACE_KEY);
  return 0;
}

fat_gen *fat_gen_open(const char *source_dir, char *err, size_t errlen) {
  fat_gen *g = calloc(1, sizeof *g);
  if (!g) {
    snprintf(err, errlen, "generator: out of memory");
    goto fail;
  }
  if (source_dir && !(g->source_dir = strdup(source_dir))) {
    snprintf(err, errlen, "generator: out of memory");
    goto fail;
  }
  if (source_dir) {
    struct stat st;
    if (stat(source_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
      snprintf(err, errlen, "generator source folder '%s' is not a folder", source_dir);
      goto fail;
    }
  }
  g->L = lua_newstate(gen_alloc, g);
  if (!g->L) {
    snprintf(err, errlen, "generator: cannot create a Lua state (out of memory)");
    goto fail;
  }
  *(fat_gen **)lua_getextraspace(g->L) = g;
  lua_sethook(g->L, count_hook, LUA_MASKCOUNT, FAT_GEN_HOOK_STEP);
  if (run_protected(g, open_main, NULL, err, errlen) != 0) goto fail;
  return g;
fail:
  fat_gen_close(g);
  return NULL;
}

void fat_gen_close(fat_gen *g) {
  if (!g) return;
  if (g->L) {
    /* lua_close runs what is left to collect with hooks off: the watchdog
     * guards it too (setmetatable refuses finalizers, so it should never
     * have to act). */
    watchdog w;
    watchdog_start(&w, 1);
    lua_close(g->L);
    watchdog_stop(&w);
  }
  free(g->source_dir);
  free(g);
}

/* What one fat_gen_variants call hands to and gets back from Lua. Whatever is
 * in out/pruned when Lua fails is freed by the caller. */
typedef struct variants_ctx {
  const fat_gen_query *q;
  fat_variant *out;
  size_t n;
  fat_pruned *pruned;
  size_t n_pruned;
  int want_pruned;
} variants_ctx;

static void push_int_list(lua_State *L, const int *v, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushinteger(L, v[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

/* Calls space.<fn> with the arguments on top of the stack (NARGS of them);
 * leaves the result, or raises the message of a (nil, message) return. */
static void call_space(lua_State *L, const char *fn, int nargs) {
  lua_getfield(L, LUA_REGISTRYINDEX, SPACE_KEY);
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  lua_insert(L, -1 - nargs);
  lua_call(L, nargs, 2);
  /* (nil, message) answers the query, it is not a script fault */
  if (lua_isnil(L, -2))
    plain_error(L, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "space: failed without a message");
  lua_pop(L, 1);
}

/* Field KEY of the table at IDX as a heap string; raises naming the variant. */
static char *dup_field(lua_State *L, int idx, const char *key, const char *what, lua_Integer i,
                       size_t max) {
  size_t len;
  if (lua_getfield(L, idx, key) != LUA_TSTRING)
    plain_error(L, "space.generate: %s %d: field '%s' must be a string, not %s", what, (int)i, key,
               luaL_typename(L, -1));
  const char *s = lua_tolstring(L, -1, &len);
  if (len > max)
    plain_error(L, "space.generate: %s %d: field '%s' of %d bytes exceeds the cap of %d", what, (int)i,
               key, (int)(len > INT_MAX ? INT_MAX : len), (int)max);
  char *copy = malloc(len + 1);
  if (!copy) plain_error(L, "generator: out of memory");
  memcpy(copy, s, len + 1);
  lua_pop(L, 1);
  return copy;
}

static int int_field(lua_State *L, int idx, const char *key, lua_Integer i, int min) {
  int isnum;
  lua_getfield(L, idx, key);
  lua_Integer v = lua_tointegerx(L, -1, &isnum);
  if (!isnum || v < min || v > INT_MAX)
    plain_error(L, "space.generate: variant %d: field '%s' must be an integer >= %d, not %s", (int)i, key,
               min, luaL_tolstring(L, -1, NULL));
  lua_pop(L, 1);
  return (int)v;
}

/* Field KEY (a name such as "bf16") parsed by PARSE into *OUT. */
static void enum_field(lua_State *L, int idx, const char *key, lua_Integer i, int (*parse)(const char *, int *),
                       int *out) {
  lua_getfield(L, idx, key);
  const char *s = lua_tostring(L, -1);
  if (!s || parse(s, out) != 0)
    plain_error(L, "space.generate: variant %d: field '%s' has the unknown value %s", (int)i, key,
               luaL_tolstring(L, -1, NULL));
  lua_pop(L, 1);
}

static int parse_dtype(const char *s, int *out) {
  fat_dtype d;
  if (fat_dtype_parse(s, &d)) return -1;
  *out = (int)d;
  return 0;
}
static int parse_mask(const char *s, int *out) {
  fat_mask m;
  if (fat_mask_parse(s, &m)) return -1;
  *out = (int)m;
  return 0;
}
static int parse_direction(const char *s, int *out) {
  fat_direction d;
  if (fat_direction_parse(s, &d)) return -1;
  *out = (int)d;
  return 0;
}

/* Length of the list field KEY of the result table at IDX, capped; leaves the
 * list on the stack. */
static lua_Integer list_field(lua_State *L, int idx, const char *key) {
  if (lua_getfield(L, idx, key) != LUA_TTABLE)
    plain_error(L, "space.generate: result field '%s' must be a table, not %s", key, luaL_typename(L, -1));
  lua_Integer n = luaL_len(L, -1);
  if (n > FAT_GEN_MAX_VARIANTS)
    plain_error(L, "space.generate: %d %s, more than the cap of %d", (int)n, key, FAT_GEN_MAX_VARIANTS);
  return n;
}

static void read_variant(lua_State *L, int idx, lua_Integer i, fat_variant *v) {
  if (!lua_istable(L, idx)) plain_error(L, "space.generate: variant %d must be a table", (int)i);
  v->name = dup_field(L, idx, "name", "variant", i, FAT_GEN_MAX_SOURCE_BYTES);
  v->family = dup_field(L, idx, "family", "variant", i, FAT_GEN_MAX_SOURCE_BYTES);
  v->params = dup_field(L, idx, "params", "variant", i, FAT_GEN_MAX_SOURCE_BYTES);
  v->entry = dup_field(L, idx, "entry", "variant", i, FAT_GEN_MAX_SOURCE_BYTES);
  v->source = dup_field(L, idx, "source", "variant", i, FAT_GEN_MAX_SOURCE_BYTES);
  int e = 0;
  enum_field(L, idx, "direction", i, parse_direction, &e);
  v->direction = (fat_direction)e;
  enum_field(L, idx, "dtype", i, parse_dtype, &e);
  v->dtype = (fat_dtype)e;
  enum_field(L, idx, "mask", i, parse_mask, &e);
  v->mask = (fat_mask)e;
  v->head_dim = int_field(L, idx, "head_dim", i, 1);
  v->block_m = int_field(L, idx, "block_m", i, 1);
  v->threads = int_field(L, idx, "threads", i, 1);
  v->smem_bytes = int_field(L, idx, "smem_bytes", i, 0);
  lua_getfield(L, idx, "is_default");
  v->is_default = lua_toboolean(L, -1);
  lua_pop(L, 1);
  fat_sha256_hex(v->source, strlen(v->source), v->hash);
}

static void push_query(lua_State *L, const fat_gen_query *q) {
  if (fat_direction_name(q->direction)[0] == '?')
    plain_error(L, "query direction %d is not a fat_direction", (int)q->direction);
  if (q->smem_limit < 0) plain_error(L, "query smem_limit %d is negative", q->smem_limit);
  if ((q->n_head_dims > 0 && !q->head_dims) || (q->n_dtypes > 0 && !q->dtypes) ||
      (q->n_masks > 0 && !q->masks) || q->n_head_dims < 0 || q->n_dtypes < 0 || q->n_masks < 0)
    plain_error(L, "query lists: a count is negative, or non-zero with a NULL list");
  lua_createtable(L, 0, 6);
  lua_pushstring(L, fat_direction_name(q->direction));
  lua_setfield(L, -2, "direction");
  push_int_list(L, q->head_dims, q->n_head_dims);
  lua_setfield(L, -2, "head_dims");
  lua_createtable(L, q->n_dtypes, 0);
  for (int i = 0; i < q->n_dtypes; i++) {
    if (fat_dtype_name(q->dtypes[i])[0] == '?') plain_error(L, "query dtype %d is not a fat_dtype", (int)q->dtypes[i]);
    lua_pushstring(L, fat_dtype_name(q->dtypes[i]));
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "dtypes");
  lua_createtable(L, q->n_masks, 0);
  for (int i = 0; i < q->n_masks; i++) {
    if (fat_mask_name(q->masks[i])[0] == '?') plain_error(L, "query mask %d is not a fat_mask", (int)q->masks[i]);
    lua_pushstring(L, fat_mask_name(q->masks[i]));
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "masks");
  lua_pushstring(L, q->arch ? q->arch : "(null)");
  lua_setfield(L, -2, "arch");
  lua_pushinteger(L, q->smem_limit);
  lua_setfield(L, -2, "smem_limit");
}

static int variants_main(lua_State *L) {
  variants_ctx *ctx = lua_touserdata(L, 1);
  push_query(L, ctx->q);
  call_space(L, "generate", 1);
  if (!lua_istable(L, -1)) plain_error(L, "space.generate must return a table, not %s", luaL_typename(L, -1));
  int result = lua_gettop(L);

  lua_Integer n = list_field(L, result, "variants");
  if (n > 0 && !(ctx->out = calloc((size_t)n, sizeof *ctx->out))) plain_error(L, "generator: out of memory");
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, -1, i);
    ctx->n = (size_t)i; /* owned by ctx from here, even half-filled */
    read_variant(L, lua_gettop(L), i, &ctx->out[i - 1]);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);

  if (!ctx->want_pruned) return 0;
  n = list_field(L, result, "pruned");
  if (n > 0 && !(ctx->pruned = calloc((size_t)n, sizeof *ctx->pruned))) plain_error(L, "generator: out of memory");
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, -1, i);
    int idx = lua_gettop(L);
    if (!lua_istable(L, idx)) plain_error(L, "space.generate: pruned %d must be a table", (int)i);
    ctx->n_pruned = (size_t)i;
    ctx->pruned[i - 1].name = dup_field(L, idx, "name", "pruned", i, FAT_GEN_MAX_SOURCE_BYTES);
    ctx->pruned[i - 1].reason = dup_field(L, idx, "reason", "pruned", i, FAT_GEN_MAX_SOURCE_BYTES);
    lua_pop(L, 1);
  }
  return 0;
}

int fat_gen_variants(fat_gen *g, const fat_gen_query *q, fat_variant **out, size_t *n,
                     fat_pruned **pruned, size_t *n_pruned, char *err, size_t errlen) {
  variants_ctx ctx = {.q = q, .want_pruned = pruned != NULL};
  int rc = -1;
  *out = NULL;
  *n = 0;
  if (pruned) *pruned = NULL;
  if (n_pruned) *n_pruned = 0;
  if (!g || !q) {
    snprintf(err, errlen, "fat_gen_variants: %s is NULL", g ? "the query" : "the generator");
    goto out;
  }
  if (run_protected(g, variants_main, &ctx, err, errlen) != 0) goto out;
  *out = ctx.out;
  *n = ctx.n;
  if (pruned) *pruned = ctx.pruned;
  if (n_pruned) *n_pruned = ctx.n_pruned;
  ctx.out = NULL;
  ctx.pruned = NULL;
  rc = 0;
out:
  for (size_t i = 0; ctx.out && i < ctx.n; i++) fat_variant_free(&ctx.out[i]);
  free(ctx.out);
  fat_pruned_free_all(ctx.pruned, ctx.n_pruned);
  return rc;
}

void fat_pruned_free_all(fat_pruned *p, size_t n) {
  for (size_t i = 0; p && i < n; i++) {
    free(p[i].name);
    free(p[i].reason);
  }
  free(p);
}

typedef struct head_dims_ctx {
  fat_direction direction;
  int *out;
  int cap;
  int n;
} head_dims_ctx;

static int head_dims_main(lua_State *L) {
  head_dims_ctx *ctx = lua_touserdata(L, 1);
  if (fat_direction_name(ctx->direction)[0] == '?')
    plain_error(L, "direction %d is not a fat_direction", (int)ctx->direction);
  lua_pushstring(L, fat_direction_name(ctx->direction));
  call_space(L, "head_dims", 1);
  if (!lua_istable(L, -1)) plain_error(L, "space.head_dims must return a table, not %s", luaL_typename(L, -1));
  lua_Integer n = luaL_len(L, -1);
  if (n > ctx->cap) plain_error(L, "the space has %d head dims, more than the %d asked for", (int)n, ctx->cap);
  for (lua_Integer i = 1; i <= n; i++) {
    int isnum;
    lua_geti(L, -1, i);
    lua_Integer d = lua_tointegerx(L, -1, &isnum);
    if (!isnum || d <= 0 || d > INT_MAX) plain_error(L, "space.head_dims: entry %d is not a positive integer", (int)i);
    ctx->out[i - 1] = (int)d;
    lua_pop(L, 1);
  }
  ctx->n = (int)n;
  return 0;
}

typedef struct archs_ctx {
  char (*out)[16];
  int cap;
  int n;
} archs_ctx;

static int archs_main(lua_State *L) {
  archs_ctx *ctx = lua_touserdata(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, SPACE_KEY);
  if (lua_getfield(L, -1, "archs") != LUA_TFUNCTION) return 0; /* the space does not say */
  lua_call(L, 0, 1);
  if (!lua_istable(L, -1)) plain_error(L, "space.archs must return a table, not %s", luaL_typename(L, -1));
  const lua_Integer n = luaL_len(L, -1);
  if (n > ctx->cap) plain_error(L, "the space has %d archs, more than the %d asked for", (int)n, ctx->cap);
  for (lua_Integer i = 1; i <= n; i++) {
    size_t len;
    lua_geti(L, -1, i);
    const char *a = lua_tolstring(L, -1, &len);
    if (!a || len == 0 || len >= sizeof ctx->out[0])
      plain_error(L, "space.archs: entry %d is not an architecture name", (int)i);
    memcpy(ctx->out[i - 1], a, len + 1);
    lua_pop(L, 1);
  }
  ctx->n = (int)n;
  return 0;
}

int fat_gen_archs(fat_gen *g, char (*out)[16], int cap, char *err, size_t errlen) {
  archs_ctx ctx = {.out = out, .cap = cap};
  if (!g || (!out && cap > 0) || cap < 0) {
    snprintf(err, errlen, "fat_gen_archs: %s", !g ? "the generator is NULL" : "bad output buffer");
    return -1;
  }
  if (run_protected(g, archs_main, &ctx, err, errlen) != 0) return -1;
  return ctx.n;
}

int fat_gen_head_dims(fat_gen *g, fat_direction direction, int *out, int cap, char *err, size_t errlen) {
  head_dims_ctx ctx = {.direction = direction, .out = out, .cap = cap};
  if (!g || (!out && cap > 0) || cap < 0) {
    snprintf(err, errlen, "fat_gen_head_dims: %s", !g ? "the generator is NULL" : "bad output buffer");
    return -1;
  }
  if (run_protected(g, head_dims_main, &ctx, err, errlen) != 0) return -1;
  return ctx.n;
}

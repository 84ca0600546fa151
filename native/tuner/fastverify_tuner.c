/*
 * fastverify NCCL tuner plugin: per-size algorithm/protocol/channel choices read from
 * a table measured on the host's own GPUs (see docs/guides/tuner.md).
 *
 * Loaded by NCCL through NCCL_TUNER_PLUGIN=<absolute path of this .so>. The table is
 * the CSV file named by FASTVERIFY_TUNER_TABLE; it is read and checked once per
 * communicator in init(). getCollInfo() only scans the rows kept for that
 * communicator: no allocation, no I/O, no locks, so it is safe while a CUDA graph is
 * being captured (NCCL calls it on the capturing thread at enqueue time).
 *
 * Tuner ABI: the declarations below are this project's own, written from the
 * interface NCCL documents in its plugin headers (nccl_tuner.h / tuner_vN.h):
 *   v5  NCCL 2.28 - 2.30+  (init gains commId, NVLink-domain info, tuning constants)
 *   v4  NCCL 2.24 - 2.27   (getCollInfo gains regBuff)
 *   v3  NCCL 2.22 - 2.23   (getCollInfo receives the cost table)
 * NCCL looks for the newest symbol it knows first, so each release picks the right
 * one. v2 (NCCL 2.21) and v1 (2.19-2.20) have no cost table: the plugin exports them
 * only to refuse clearly (a WARN line) and leave every choice to NCCL.
 *
 * Choosing: the cost table is a flat float[numAlgo][numProto]; NCCL takes the
 * smallest entry that is >= 0 and skips -1 (NCCL_ALGO_PROTO_IGNORE, "not available").
 * Setting the chosen entry to 0 selects it. A row whose algorithm/protocol NCCL marks
 * unavailable for this call, or does not know (index out of range), changes nothing.
 * Sizes outside every row, other collectives and communicators with another
 * nranks/nnodes keep NCCL's own choice.
 *
 * Measurement hook (fastverify_tuner_force): a process that has this library loaded
 * (NCCL dlopens it; ctypes opening the same path gets the same copy) may force one
 * candidate for every following collective, so one process measures every candidate
 * without re-creating communicators. Off unless called.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FV_EXPORT __attribute__((visibility("default")))
#define FV_VERSION "1"
#define FV_TABLE_ENV "FASTVERIFY_TUNER_TABLE"
#define FV_MAX_ROWS 256
#define FV_MAX_LINE 512
#define FV_MAX_CHANNELS 64

/* ---- the ABI, as NCCL defines it (own declarations) ---- */
typedef int fv_result_t; /* ncclResult_t: an int-sized enum; 0 = ncclSuccess */
enum { FV_SUCCESS = 0, FV_INTERNAL_ERROR = 3 };
enum { FV_LOG_WARN = 2, FV_LOG_INFO = 3 };                  /* ncclDebugLogLevel */
enum { FV_SUBSYS_INIT = 0x1, FV_SUBSYS_TUNING = 0x40 };      /* ncclDebugLogSubSys */
typedef void (*fv_logger_t)(int level, unsigned long flags, const char *file, int line,
                            const char *fmt, ...);

/* ncclFunc_t values (stable since NCCL 2.19) */
enum { FV_BROADCAST = 0, FV_REDUCE = 1, FV_ALLGATHER = 2, FV_REDUCESCATTER = 3,
       FV_ALLREDUCE = 4, FV_NUM_COLLS = 5 };
/* NCCL_ALGO_* / NCCL_PROTO_* indices into the cost table */
enum { FV_ALGO_TREE = 0, FV_ALGO_RING = 1, FV_ALGO_COLLNET_DIRECT = 2, FV_ALGO_COLLNET_CHAIN = 3,
       FV_ALGO_NVLS = 4, FV_ALGO_NVLS_TREE = 5, FV_ALGO_PAT = 6, FV_NUM_ALGOS = 7 };
enum { FV_PROTO_LL = 0, FV_PROTO_LL128 = 1, FV_PROTO_SIMPLE = 2, FV_NUM_PROTOS = 3 };
#define FV_DEFAULT (-1)

typedef struct { int nNvlDomains, minRanksPerNvlDomain, maxRanksPerNvlDomain; } fv_nvl_info_t;

typedef struct {
  const char *name;
  fv_result_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                      fv_logger_t log, fv_nvl_info_t *nvl, void *constants);
  fv_result_t (*getCollInfo)(void *ctx, int collType, size_t nBytes, int numPipeOps,
                             float **collCostTable, int numAlgo, int numProto, int regBuff,
                             int *nChannels);
  fv_result_t (*finalize)(void *ctx);
} fv_tuner_v5_t;

typedef struct {
  const char *name;
  fv_result_t (*init)(size_t nRanks, size_t nNodes, fv_logger_t log, void **ctx);
  fv_result_t (*getCollInfo)(void *ctx, int collType, size_t nBytes, int numPipeOps,
                             float **collCostTable, int numAlgo, int numProto, int regBuff,
                             int *nChannels);
  fv_result_t (*destroy)(void *ctx);
} fv_tuner_v4_t;

typedef struct {
  const char *name;
  fv_result_t (*init)(size_t nRanks, size_t nNodes, fv_logger_t log, void **ctx);
  fv_result_t (*getCollInfo)(void *ctx, int collType, size_t nBytes, int numPipeOps,
                             float **collCostTable, int numAlgo, int numProto, int *nChannels);
  fv_result_t (*destroy)(void *ctx);
} fv_tuner_v3_t;

typedef struct {
  const char *name;
  fv_result_t (*init)(size_t nRanks, size_t nNodes, fv_logger_t log, void **ctx);
  fv_result_t (*getCollInfo)(void *ctx, int collType, size_t nBytes, int collNetSupport,
                             int nvlsSupport, int numPipeOps, int *algorithm, int *protocol,
                             int *nChannels);
  fv_result_t (*destroy)(void *ctx);
} fv_tuner_v2_t;

typedef struct {
  const char *name;
  fv_result_t (*init)(size_t nRanks, size_t nNodes, fv_logger_t log);
  fv_result_t (*getCollInfo)(int collType, size_t nBytes, int collNetSupport, int nvlsSupport,
                             int numPipeOps, int *algorithm, int *protocol, int *nChannels);
  fv_result_t (*destroy)(void);
} fv_tuner_v1_t;

/* ---- the table ---- */
typedef struct {
  int coll;
  uint64_t lo, hi; /* inclusive byte range */
  int algo, proto; /* FV_DEFAULT: leave NCCL's choice */
  int channels;    /* FV_DEFAULT: NCCL's own channel count */
  long nranks, nnodes; /* -1: any */
  int line;
} fv_row_t;

typedef struct {
  int nrows;
  size_t nranks, nnodes;
  fv_logger_t log;
  fv_row_t rows[FV_MAX_ROWS];
} fv_ctx_t;

/* Process-wide statistics and the measurement override (see the header comment). */
typedef struct {
  int64_t calls;        /* getCollInfo calls */
  int64_t applied;      /* a row (or the override) set algorithm/protocol */
  int64_t channels_set; /* a row (or the override) set the channel count */
  int64_t unavailable;  /* the wanted algorithm/protocol was not available for the call */
  int64_t abi_mismatch; /* numProto/numAlgo not what this plugin knows */
  int64_t no_row;       /* no row for this collective and size: NCCL's choice */
  int32_t last_coll;
  int32_t last_default_algo, last_default_proto; /* NCCL's own pick: argmin of the table */
  int32_t last_algo, last_proto, last_channels;  /* what the call ended with (-1: NCCL's) */
  int32_t last_applied;
  uint64_t last_bytes;
} fv_stats_t;

static fv_stats_t g_stats;
static volatile int g_force_algo = FV_DEFAULT, g_force_proto = FV_DEFAULT,
                    g_force_channels = FV_DEFAULT;

static const char *const COLL_NAMES[FV_NUM_COLLS] = {"Broadcast", "Reduce", "AllGather",
                                                     "ReduceScatter", "AllReduce"};
static const char *const ALGO_NAMES[FV_NUM_ALGOS] = {"Tree", "Ring", "CollnetDirect",
                                                     "CollnetChain", "NVLS", "NVLSTree", "PAT"};
static const char *const PROTO_NAMES[FV_NUM_PROTOS] = {"LL", "LL128", "Simple"};

/* ---- logging: NCCL's logger when given, else stderr for warnings ---- */
static void fv_log(fv_logger_t log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fv_log(fv_logger_t log, int level, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (log) {
    log(level, FV_SUBSYS_INIT | FV_SUBSYS_TUNING, __FILE__, __LINE__, "%s", msg);
  } else if (level == FV_LOG_WARN) {
    fprintf(stderr, "NCCL WARN %s\n", msg);
  }
}

/* ---- parsing ---- */
static int lookup(const char *tok, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcasecmp(tok, names[i]) == 0) return i;
  return -2;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

static int parse_u64(const char *s, uint64_t *out) {
  if (!*s || !isdigit((unsigned char)*s)) return -1;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return -1;
  *out = (uint64_t)v;
  return 0;
}

/* "-1", "default", "any" (where allowed) -> -1; else a positive integer <= max */
static int parse_opt_int(const char *s, long max, const char *word, long *out) {
  if (strcmp(s, "-1") == 0 || strcasecmp(s, word) == 0) {
    *out = -1;
    return 0;
  }
  uint64_t v;
  if (parse_u64(s, &v) || v < 1 || v > (uint64_t)max) return -1;
  *out = (long)v;
  return 0;
}

typedef struct {
  char msg[256];
  int line;
} fv_err_t;

static int fail(fv_err_t *err, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(fv_err_t *err, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  err->line = line;
  return -1;
}

static int parse_row(char *text, int line, fv_row_t *row, fv_err_t *err) {
  char *field[9];
  int n = 0;
  char *p = text;
  while (n < 9) {
    field[n++] = p;
    char *comma = strchr(p, ',');
    if (!comma) break;
    *comma = '\0';
    p = comma + 1;
  }
  if (n != 8)
    return fail(err, line, "%d fields (expected 8: collective,min_bytes,max_bytes,algorithm,"
                "protocol,channels,nranks,nnodes)", n);
  for (int i = 0; i < 8; i++) field[i] = trim(field[i]);
  row->line = line;
  row->coll = lookup(field[0], COLL_NAMES, FV_NUM_COLLS);
  if (row->coll < 0)
    return fail(err, line, "unknown collective '%s' (AllReduce, AllGather, ReduceScatter, "
                "Broadcast, Reduce)", field[0]);
  if (parse_u64(field[1], &row->lo)) return fail(err, line, "min_bytes '%s' is not a byte count", field[1]);
  if (parse_u64(field[2], &row->hi)) return fail(err, line, "max_bytes '%s' is not a byte count", field[2]);
  if (row->lo > row->hi) return fail(err, line, "min_bytes is above max_bytes");
  row->algo = strcasecmp(field[3], "default") == 0 ? FV_DEFAULT
                                                  : lookup(field[3], ALGO_NAMES, FV_NUM_ALGOS);
  if (row->algo == -2)
    return fail(err, line, "unknown algorithm '%s' (Tree, Ring, CollnetDirect, CollnetChain, "
                "NVLS, NVLSTree, PAT or default)", field[3]);
  row->proto = strcasecmp(field[4], "default") == 0 ? FV_DEFAULT
                                                   : lookup(field[4], PROTO_NAMES, FV_NUM_PROTOS);
  if (row->proto == -2)
    return fail(err, line, "unknown protocol '%s' (LL, LL128, Simple or default)", field[4]);
  if ((row->algo == FV_DEFAULT) != (row->proto == FV_DEFAULT))
    return fail(err, line, "algorithm and protocol must both be named or both 'default' "
                "(NCCL accepts neither one alone)");
  long v;
  if (parse_opt_int(field[5], FV_MAX_CHANNELS, "default", &v))
    return fail(err, line, "channels '%s' (expected 1..64, -1 or default)", field[5]);
  row->channels = (int)v;
  if (row->algo == FV_DEFAULT && row->channels == FV_DEFAULT)
    return fail(err, line, "the row changes nothing (name an algorithm/protocol or channels)");
  if (parse_opt_int(field[6], 1L << 20, "any", &row->nranks))
    return fail(err, line, "nranks '%s' (expected a positive integer, -1 or any)", field[6]);
  if (parse_opt_int(field[7], 1L << 20, "any", &row->nnodes))
    return fail(err, line, "nnodes '%s' (expected a positive integer, -1 or any)", field[7]);
  return 0;
}

static int same_scope(const fv_row_t *a, const fv_row_t *b) {
  return a->coll == b->coll && (a->nranks == b->nranks || a->nranks < 0 || b->nranks < 0) &&
         (a->nnodes == b->nnodes || a->nnodes < 0 || b->nnodes < 0);
}

/* Parse the whole file; on any error keep nothing (a half-applied table is worse than
 * none). Rows for other nranks/nnodes are checked but not kept. */
static int load_table(const char *path, fv_ctx_t *ctx, int *total, fv_err_t *err) {
  FILE *fh = fopen(path, "r");
  if (!fh) return fail(err, 0, "cannot open: %s", strerror(errno));
  fv_row_t *all = calloc(FV_MAX_ROWS, sizeof *all); /* init-time scratch */
  if (!all) {
    fclose(fh);
    return fail(err, 0, "out of memory");
  }
  int n = 0, line = 0, rc = 0, seen_data = 0;
  char buf[FV_MAX_LINE + 2];
  while (fgets(buf, sizeof buf, fh)) {
    line++;
    size_t len = strlen(buf);
    if (len == sizeof buf - 1 && buf[len - 1] != '\n') {
      rc = fail(err, line, "line longer than %d characters", FV_MAX_LINE);
      break;
    }
    char *text = trim(buf);
    if (*text == '\0' || *text == '#') continue;
    if (!seen_data && strncasecmp(text, "collective", 10) == 0 &&
        (text[10] == ',' || isspace((unsigned char)text[10]))) {
      seen_data = 1; /* the header line */
      continue;
    }
    seen_data = 1;
    if (n == FV_MAX_ROWS) {
      rc = fail(err, line, "more than %d rows", FV_MAX_ROWS);
      break;
    }
    if ((rc = parse_row(text, line, &all[n], err)) != 0) break;
    for (int i = 0; i < n; i++) {
      if (!same_scope(&all[i], &all[n])) continue;
      if (all[n].lo <= all[i].hi && all[i].lo <= all[n].hi) {
        rc = fail(err, line, "byte range overlaps the row on line %d", all[i].line);
        break;
      }
      if (all[n].lo < all[i].lo) {
        rc = fail(err, line, "rows are not sorted by min_bytes (line %d starts higher)",
                  all[i].line);
        break;
      }
    }
    if (rc) break;
    n++;
  }
  if (!rc && ferror(fh)) rc = fail(err, line, "read error");
  fclose(fh);
  if (rc) {
    free(all);
    return rc;
  }
  *total = n;
  ctx->nrows = 0;
  for (int i = 0; i < n; i++) {
    const fv_row_t *r = &all[i];
    if ((r->nranks < 0 || (size_t)r->nranks == ctx->nranks) &&
        (r->nnodes < 0 || (size_t)r->nnodes == ctx->nnodes))
      ctx->rows[ctx->nrows++] = *r;
  }
  free(all);
  return 0;
}

static fv_result_t fv_init_common(size_t nRanks, size_t nNodes, fv_logger_t log, void **out,
                                  int abi) {
  fv_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return FV_INTERNAL_ERROR;
  ctx->nranks = nRanks;
  ctx->nnodes = nNodes;
  ctx->log = log;
  *out = ctx;
  const char *path = getenv(FV_TABLE_ENV);
  if (!path || !*path) {
    fv_log(log, FV_LOG_WARN, "fastverify tuner: %s is not set: no table, NCCL chooses "
           "every algorithm/protocol", FV_TABLE_ENV);
    return FV_SUCCESS;
  }
  fv_err_t err = {{0}, 0};
  int total = 0;
  if (load_table(path, ctx, &total, &err)) {
    ctx->nrows = 0;
    fv_log(log, FV_LOG_WARN, "fastverify tuner: %s:%d: %s; table ignored, NCCL chooses every "
           "algorithm/protocol", path, err.line, err.msg);
    return FV_SUCCESS;
  }
  if (ctx->nrows == 0 && total > 0) {
    fv_log(log, FV_LOG_INFO, "fastverify tuner: %s has %d rows, none for nranks=%zu nnodes=%zu: "
           "NCCL chooses for this communicator", path, total, nRanks, nNodes);
  } else {
    fv_log(log, FV_LOG_INFO, "fastverify tuner: %d of %d rows from %s apply (nranks=%zu "
           "nnodes=%zu, tuner ABI v%d)", ctx->nrows, total, path, nRanks, nNodes, abi);
  }
  return FV_SUCCESS;
}

/* ---- the choice (no allocation, no I/O) ---- */
static void fv_choose(fv_ctx_t *ctx, int coll, size_t nBytes, float **collCostTable,
                      int numAlgo, int numProto, int *nChannels) {
  float *table = (float *)collCostTable;
  __atomic_fetch_add(&g_stats.calls, 1, __ATOMIC_RELAXED);
  g_stats.last_coll = coll;
  g_stats.last_bytes = nBytes;
  g_stats.last_applied = 0;
  g_stats.last_algo = g_stats.last_proto = g_stats.last_channels = FV_DEFAULT;
  g_stats.last_default_algo = g_stats.last_default_proto = FV_DEFAULT;
  if (!table || numProto != FV_NUM_PROTOS || numAlgo < 2 || numAlgo > 16) {
    __atomic_fetch_add(&g_stats.abi_mismatch, 1, __ATOMIC_RELAXED);
    return;
  }
  float best = 3.6e9f;
  for (int a = 0; a < numAlgo; a++)
    for (int p = 0; p < numProto; p++) {
      float t = table[a * numProto + p];
      if (t >= 0.0f && t < best) {
        best = t;
        g_stats.last_default_algo = a;
        g_stats.last_default_proto = p;
      }
    }
  int algo = FV_DEFAULT, proto = FV_DEFAULT, channels = FV_DEFAULT;
  int fa = g_force_algo, fp = g_force_proto, fc = g_force_channels;
  if (fa != FV_DEFAULT || fc != FV_DEFAULT) {
    algo = fa;
    proto = fp;
    channels = fc;
  } else {
    const fv_row_t *row = NULL;
    for (int i = 0; ctx && i < ctx->nrows; i++) {
      const fv_row_t *r = &ctx->rows[i];
      if (r->coll == coll && r->lo <= nBytes && nBytes <= r->hi) {
        row = r;
        break;
      }
    }
    if (!row) {
      __atomic_fetch_add(&g_stats.no_row, 1, __ATOMIC_RELAXED);
      return;
    }
    algo = row->algo;
    proto = row->proto;
    channels = row->channels;
  }
  if (algo != FV_DEFAULT) {
    if (algo >= numAlgo || proto < 0 || proto >= numProto) {
      __atomic_fetch_add(&g_stats.abi_mismatch, 1, __ATOMIC_RELAXED);
    } else if (table[algo * numProto + proto] < 0.0f) {
      __atomic_fetch_add(&g_stats.unavailable, 1, __ATOMIC_RELAXED);
    } else {
      table[algo * numProto + proto] = 0.0f;
      g_stats.last_algo = algo;
      g_stats.last_proto = proto;
      g_stats.last_applied = 1;
      __atomic_fetch_add(&g_stats.applied, 1, __ATOMIC_RELAXED);
    }
  }
  if (channels > 0 && nChannels) {
    *nChannels = channels;
    g_stats.last_channels = channels;
    __atomic_fetch_add(&g_stats.channels_set, 1, __ATOMIC_RELAXED);
  }
}

static fv_result_t fv_finalize(void *context) {
  fv_ctx_t *ctx = context;
  if (!ctx) return FV_SUCCESS;
  int64_t mismatch = __atomic_load_n(&g_stats.abi_mismatch, __ATOMIC_RELAXED);
  if (mismatch)
    fv_log(ctx->log, FV_LOG_WARN, "fastverify tuner: %lld calls named an algorithm/protocol "
           "this NCCL does not index as expected (tuner ABI mismatch): NCCL chose for them",
           (long long)mismatch);
  free(ctx);
  return FV_SUCCESS;
}

/* ---- v5 (NCCL 2.28+) ---- */
static fv_result_t v5_init(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                           fv_logger_t log, fv_nvl_info_t *nvl, void *constants) {
  (void)commId, (void)nvl, (void)constants;
  return fv_init_common(nRanks, nNodes, log, ctx, 5);
}
static fv_result_t v45_get(void *ctx, int coll, size_t nBytes, int numPipeOps, float **table,
                           int numAlgo, int numProto, int regBuff, int *nChannels) {
  (void)numPipeOps, (void)regBuff;
  fv_choose(ctx, coll, nBytes, table, numAlgo, numProto, nChannels);
  return FV_SUCCESS;
}

/* ---- v4 (2.24-2.27) and v3 (2.22-2.23) ---- */
static fv_result_t v4_init(size_t nRanks, size_t nNodes, fv_logger_t log, void **ctx) {
  return fv_init_common(nRanks, nNodes, log, ctx, 4);
}
static fv_result_t v3_init(size_t nRanks, size_t nNodes, fv_logger_t log, void **ctx) {
  return fv_init_common(nRanks, nNodes, log, ctx, 3);
}
static fv_result_t v3_get(void *ctx, int coll, size_t nBytes, int numPipeOps, float **table,
                          int numAlgo, int numProto, int *nChannels) {
  (void)numPipeOps;
  fv_choose(ctx, coll, nBytes, table, numAlgo, numProto, nChannels);
  return FV_SUCCESS;
}

/* ---- v2 (2.21) and v1 (2.19-2.20): refused, NCCL keeps every choice ---- */
#define FV_REFUSE_MSG                                                                       \
  "fastverify tuner: this NCCL offers tuner ABI v%d (NCCL %s), which passes no cost table; "\
  "the plugin needs ABI v3 or newer (NCCL 2.22+): leaving every choice to NCCL"
static fv_result_t v2_init(size_t nRanks, size_t nNodes, fv_logger_t log, void **ctx) {
  (void)nRanks, (void)nNodes;
  *ctx = NULL;
  fv_log(log, FV_LOG_WARN, FV_REFUSE_MSG, 2, "2.21");
  return FV_SUCCESS;
}
static fv_result_t v2_get(void *ctx, int coll, size_t nBytes, int collNet, int nvls, int ops,
                          int *algorithm, int *protocol, int *nChannels) {
  (void)ctx, (void)coll, (void)nBytes, (void)collNet, (void)nvls, (void)ops;
  (void)algorithm, (void)protocol, (void)nChannels;
  return FV_SUCCESS;
}
static fv_result_t v2_destroy(void *ctx) {
  (void)ctx;
  return FV_SUCCESS;
}
static fv_result_t v1_init(size_t nRanks, size_t nNodes, fv_logger_t log) {
  (void)nRanks, (void)nNodes;
  fv_log(log, FV_LOG_WARN, FV_REFUSE_MSG, 1, "2.19-2.20");
  return FV_SUCCESS;
}
static fv_result_t v1_get(int coll, size_t nBytes, int collNet, int nvls, int ops,
                          int *algorithm, int *protocol, int *nChannels) {
  (void)coll, (void)nBytes, (void)collNet, (void)nvls, (void)ops;
  (void)algorithm, (void)protocol, (void)nChannels;
  return FV_SUCCESS;
}
static fv_result_t v1_destroy(void) { return FV_SUCCESS; }

FV_EXPORT const fv_tuner_v5_t ncclTunerPlugin_v5 = {"fastverify", v5_init, v45_get, fv_finalize};
FV_EXPORT const fv_tuner_v4_t ncclTunerPlugin_v4 = {"fastverify", v4_init, v45_get, fv_finalize};
FV_EXPORT const fv_tuner_v3_t ncclTunerPlugin_v3 = {"fastverify", v3_init, v3_get, fv_finalize};
FV_EXPORT const fv_tuner_v2_t ncclTunerPlugin_v2 = {"fastverify", v2_init, v2_get, v2_destroy};
FV_EXPORT const fv_tuner_v1_t ncclTunerPlugin_v1 = {"fastverify", v1_init, v1_get, v1_destroy};

/* ---- the project's own entry points (ctypes) ---- */
FV_EXPORT const char *fastverify_tuner_version(void) { return FV_VERSION; }

/* Force algo/proto (both -1: NCCL's) and channels (-1: NCCL's) for every following
 * collective of this process; all -1 turns the override off. Returns 0, or -1 for
 * values out of range (nothing changed). */
FV_EXPORT int fastverify_tuner_force(int algo, int proto, int channels) {
  if ((algo == FV_DEFAULT) != (proto == FV_DEFAULT)) return -1;
  if (algo < FV_DEFAULT || algo >= FV_NUM_ALGOS || proto < FV_DEFAULT || proto >= FV_NUM_PROTOS)
    return -1;
  if (channels != FV_DEFAULT && (channels < 1 || channels > FV_MAX_CHANNELS)) return -1;
  g_force_algo = algo;
  g_force_proto = proto;
  g_force_channels = channels;
  return 0;
}

FV_EXPORT void fastverify_tuner_stats(fv_stats_t *out) {
  if (out) *out = g_stats;
}

FV_EXPORT void fastverify_tuner_reset_stats(void) { memset(&g_stats, 0, sizeof g_stats); }

/* Rows kept for the communicator whose context this is (tests and diagnostics). */
FV_EXPORT int fastverify_tuner_context_rows(void *context) {
  return context ? ((fv_ctx_t *)context)->nrows : -1;
}

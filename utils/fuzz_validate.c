/* fuzz_validate: random programs against verify, validate and the simulators.
 *
 *   fuzz_validate [--seconds S] [--seed N] [--pages]
 *
 * Two generators: small random programs built in memory (dangling references,
 * cycles, huge and duplicate ids, odd threshold and param types, pages, SMs),
 * and random mutations of the real toy lowering (dropped or retargeted waits,
 * changed thresholds and outputs). Every program runs through all four
 * checkers (meant for an ASan/UBSan build: nothing may crash or hang), and
 * whenever it is structurally clean an independent oracle decides safety by
 * brute force: the explicit happens-before closure (Floyd-Warshall on the
 * task-by-task edge matrix), then every wait, every read and every writer
 * pair checked against it. The validator must reject whatever the oracle
 * rejects. Exit 1 on the first disagreement, printing the seed.
 *
 * --pages: acyclic programs (chains, tiles sharing a counter and waits,
 * buffers with several writers and readers) whose pages hold many buffers
 * (duplicates, unwritten and missing ones included); the page-aliasing
 * errors the validator reports must be exactly the unordered pairs of the
 * brute-force all-pairs check, in the same order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amk/builder.h"
#include "amk/diag.h"
#include "amk/pass.h"
#include "amk/synth.h"
#include "amk/validate.h"

typedef struct {
  uint64_t s;
} Rng;

static uint64_t next(Rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int pick(Rng *r, int n) { return (int)(next(r) % (uint64_t)n); }
static bool chance(Rng *r, int percent) { return pick(r, 100) < percent; }

static int32_t random_id(Rng *r, int n) {
  if (chance(r, 3))
    return chance(r, 50) ? INT32_MAX - pick(r, 3) : -1 - pick(r, 3);
  if (chance(r, 4))
    return n + pick(r, 3); /* dangling */
  return n ? pick(r, n) : 0;
}

static AmkValue random_threshold(Rng *r, int producers) {
  AmkValue v = amk_value_int(producers > 0 ? producers : 1);
  switch (pick(r, 14)) {
  case 0: v = amk_value_int(0); break;
  case 1: v = amk_value_int(-1 - pick(r, 5)); break;
  case 2: v.kind = AMK_VALUE_BOOL; v.as.b = true; break;
  case 3: v = amk_value_float(1.0); break;
  case 4: v.kind = AMK_VALUE_STRING; v.as.s = "1"; break;
  case 5: v = amk_value_int(1); break;
  case 6: v = amk_value_int(INT64_MAX); break;
  default: break;
  }
  return v;
}

static const AmkOp ops[] = {AMK_OP_COPY, AMK_OP_ADD, AMK_OP_NOP, AMK_OP_GEMV_TILE,
                            AMK_OP_KV_APPEND, AMK_OP_RMSNORM, AMK_OP_FUSED};

static AmkModule *random_program(Rng *r) {
  AmkModule *m = amk_module_new();
  int nb = 1 + pick(r, 8), nc = 1 + pick(r, 8), nt = 1 + pick(r, 12);
  for (int i = 0; i < nb; i++) {
    AmkBuffer *b = amk_module_add_buffer(m);
    b->id = chance(r, 5) ? random_id(r, nb) : i;
    char name[16];
    snprintf(name, sizeof name, "b%d", chance(r, 5) ? 0 : i);
    b->name = amk_arena_strdup(&m->arena, name);
    b->kind = (AmkBufferKind)pick(r, AMK_KIND_COUNT);
    b->dtype = AMK_DTYPE_F32;
    b->space = chance(r, 15) ? AMK_SPACE_SMEM : AMK_SPACE_HBM;
    b->rank = (uint32_t)(chance(r, 5) ? 5 : 1 + pick(r, 2));
    b->shape = amk_arena_alloc(&m->arena, sizeof(AmkValue) * b->rank);
    for (uint32_t d = 0; d < b->rank; d++)
      b->shape[d] = chance(r, 5) ? amk_value_float(2.5) : amk_value_int(pick(r, 3) + (chance(r, 90) ? 1 : 0));
  }
  for (int i = 0; i < nc; i++) {
    AmkCounter *c = amk_module_add_counter(m);
    c->id = chance(r, 5) ? random_id(r, nc) : i;
  }
  for (int i = 0; i < nt; i++) {
    AmkTask *t = amk_module_add_task(m);
    t->id = chance(r, 5) ? random_id(r, nt) : i;
    t->op = ops[pick(r, (int)(sizeof ops / sizeof ops[0]))];
    t->n_inputs = (uint32_t)pick(r, chance(r, 3) ? 10 : 3);
    t->n_outputs = (uint32_t)(chance(r, 3) ? 5 : pick(r, 3) > 0);
    t->inputs = amk_arena_alloc(&m->arena, sizeof(int32_t) * (t->n_inputs + 1));
    t->outputs = amk_arena_alloc(&m->arena, sizeof(int32_t) * (t->n_outputs + 1));
    for (uint32_t k = 0; k < t->n_inputs; k++)
      t->inputs[k] = random_id(r, nb);
    for (uint32_t k = 0; k < t->n_outputs; k++)
      t->outputs[k] = random_id(r, nb);
    t->out_counter = random_id(r, nc);
    t->n_waits = (uint32_t)pick(r, chance(r, 3) ? 10 : 3);
    t->waits = amk_arena_alloc(&m->arena, sizeof(AmkWait) * (t->n_waits + 1));
    for (uint32_t k = 0; k < t->n_waits; k++) {
      t->waits[k].counter = random_id(r, nc);
      t->waits[k].threshold = random_threshold(r, 1 + pick(r, 2));
    }
    t->n_params = (uint32_t)pick(r, 3);
    t->params = amk_arena_alloc(&m->arena, sizeof(AmkParam) * (t->n_params + 1));
    static const char *const keys[] = {"K", "N_tile", "n_off", "hidden", "eps",
                                       "pos", "recipe", "zzz"};
    for (uint32_t k = 0; k < t->n_params; k++) {
      t->params[k].key = keys[pick(r, 8)];
      t->params[k].value = chance(r, 20) ? amk_value_float(0.5)
                                         : amk_value_int(pick(r, 70) - 2);
    }
    t->has_sm = chance(r, 30);
    t->sm = pick(r, 4) - (chance(r, 5) ? 10 : 0);
    t->label = "";
  }
  if (chance(r, 15)) {
    m->pages = amk_arena_alloc(&m->arena, sizeof *m->pages);
    m->pages->n_pages = 1;
    m->pages->pages = amk_arena_alloc(&m->arena, sizeof(AmkPage));
    m->pages->n_bindings = 2;
    m->pages->bindings = amk_arena_alloc(&m->arena, 2 * sizeof(AmkPageBinding));
    m->pages->bindings[0].buffer = random_id(r, nb);
    m->pages->bindings[1].buffer = random_id(r, nb);
  }
  if (chance(r, 50))
    m->target = amk_arena_memdup(&m->arena, amk_builtin_target("h100"),
                                 sizeof(AmkTarget));
  return m;
}

/* Random damage to a copy of the real lowering. */
static AmkModule *mutated_toy(Rng *r) {
  AmkSynthSpec spec = amk_synth_toy_spec();
  AmkModule *m = amk_synth_llama(&spec);
  int edits = 1 + pick(r, 3);
  for (int e = 0; e < edits; e++) {
    AmkTask *t = &m->tasks[pick(r, (int)m->n_tasks)];
    switch (pick(r, 6)) {
    case 0:
      if (t->n_waits)
        t->n_waits--; /* drop the last wait */
      break;
    case 1:
      if (t->n_waits)
        t->waits[pick(r, (int)t->n_waits)].counter = pick(r, (int)m->n_counters);
      break;
    case 2:
      if (t->n_waits)
        t->waits[pick(r, (int)t->n_waits)].threshold = amk_value_int(1 + pick(r, 4));
      break;
    case 3:
      t->outputs[0] = pick(r, (int)m->n_buffers);
      break;
    case 4:
      t->out_counter = pick(r, (int)m->n_counters);
      break;
    default:
      t->inputs[pick(r, (int)t->n_inputs)] = pick(r, (int)m->n_buffers);
      break;
    }
  }
  return m;
}

/* ---- the oracle --------------------------------------------------------- */

/* Structurally clean: ids are positions, every reference resolves, every
 * threshold is an INT >= 1. Only then is the oracle's verdict meaningful. */
static bool clean(const AmkModule *m) {
  if (!amk_module_ids_are_positions(m))
    return false;
  for (uint32_t i = 0; i < m->n_tasks; i++) {
    const AmkTask *t = &m->tasks[i];
    if (t->id != (int32_t)i || t->out_counter < 0 ||
        (uint32_t)t->out_counter >= m->n_counters)
      return false;
    for (uint32_t k = 0; k < t->n_inputs; k++)
      if (t->inputs[k] < 0 || (uint32_t)t->inputs[k] >= m->n_buffers)
        return false;
    for (uint32_t k = 0; k < t->n_outputs; k++)
      if (t->outputs[k] < 0 || (uint32_t)t->outputs[k] >= m->n_buffers)
        return false;
    for (uint32_t k = 0; k < t->n_waits; k++)
      if (t->waits[k].counter < 0 || (uint32_t)t->waits[k].counter >= m->n_counters ||
          t->waits[k].threshold.kind != AMK_VALUE_INT || t->waits[k].threshold.as.i < 1)
        return false;
  }
  return true;
}

static bool writes(const AmkTask *t, int32_t b) {
  for (uint32_t k = 0; k < t->n_outputs; k++)
    if (t->outputs[k] == b)
      return true;
  return false;
}

/* The brute-force happens-before relation, independent of the validator's:
 * hb[a * n + b] is 1 when task a is ordered before task b through waits
 * (transitively; Floyd-Warshall). calloc'd, n = m->n_tasks. */
static unsigned char *happens_before(const AmkModule *m) {
  uint32_t n = m->n_tasks;
  unsigned char *hb = calloc((size_t)n * n + 1, 1);
  for (uint32_t b = 0; b < n; b++)
    for (uint32_t k = 0; k < m->tasks[b].n_waits; k++)
      for (uint32_t a = 0; a < n; a++)
        if (m->tasks[a].out_counter == m->tasks[b].waits[k].counter)
          hb[a * n + b] = 1;
  for (uint32_t k = 0; k < n; k++)
    for (uint32_t i = 0; i < n; i++)
      if (hb[i * n + k])
        for (uint32_t j = 0; j < n; j++)
          if (hb[k * n + j])
            hb[i * n + j] = 1;
  return hb;
}

/* Why the program is unsafe, or NULL. */
static const char *oracle(const AmkModule *m) {
  uint32_t n = m->n_tasks;
  unsigned char *hb = happens_before(m);
  const char *why = NULL;
  for (uint32_t i = 0; i < n && !why; i++)
    if (hb[i * n + i])
      why = "cycle";
  for (uint32_t t = 0; t < n && !why; t++)
    for (uint32_t k = 0; k < m->tasks[t].n_waits && !why; k++) {
      int64_t producers = 0;
      for (uint32_t a = 0; a < n; a++)
        producers += m->tasks[a].out_counter == m->tasks[t].waits[k].counter;
      int64_t thr = m->tasks[t].waits[k].threshold.as.i;
      if (producers == 0 || thr > producers)
        why = "unsatisfiable wait";
      else if (producers > 1 && thr != producers)
        why = "partial wait on a shared counter";
    }
  for (uint32_t t = 0; t < n && !why; t++) {
    const AmkTask *task = &m->tasks[t];
    for (uint32_t k = 0; k < task->n_inputs && !why; k++) {
      int32_t b = task->inputs[k];
      AmkBufferKind kind = m->buffers[b].kind;
      if (kind == AMK_KIND_WEIGHT || kind == AMK_KIND_CONST || kind == AMK_KIND_IO_INPUT)
        continue;
      int writers = 0;
      for (uint32_t w = 0; w < n; w++) {
        if (!writes(&m->tasks[w], b))
          continue;
        writers++;
        if (w != t && !hb[w * n + t])
          why = "read not ordered after a writer";
      }
      if (!writers && kind != AMK_KIND_KV_CACHE)
        why = "read of a buffer nothing writes";
    }
  }
  /* Unordered writers of one buffer with overlapping (whole) footprints. */
  for (uint32_t a = 0; a < n && !why; a++)
    for (uint32_t b = a + 1; b < n && !why; b++)
      for (uint32_t k = 0; k < m->tasks[a].n_outputs && !why; k++)
        if (writes(&m->tasks[b], m->tasks[a].outputs[k]) && !hb[a * n + b] &&
            !hb[b * n + a] && m->tasks[a].op != AMK_OP_GEMV_TILE &&
            m->tasks[b].op != AMK_OP_GEMV_TILE)
          why = "unordered whole-buffer writers";
  free(hb);
  return why;
}

/* ---- --pages: page aliasing against all pairs ----------------------------- */

static AmkModule *random_paged_program(Rng *r) {
  AmkModule *m = amk_module_new();
  int nb = 2 + pick(r, 14), nt = 2 + pick(r, 30);
  for (int i = 0; i < nb; i++) {
    AmkBuffer *b = amk_module_add_buffer(m);
    b->id = i;
    b->name = "b";
    b->kind = AMK_KIND_ACTIVATION;
    b->dtype = AMK_DTYPE_F32;
    b->rank = 1;
    b->shape = amk_arena_alloc(&m->arena, sizeof(AmkValue));
    b->shape[0] = amk_value_int(4);
  }
  int chain = pick(r, 100); /* how often a task waits on the one before */
  int counters = 0;
  for (int i = 0; i < nt; i++) {
    AmkTask *t = amk_module_add_task(m);
    t->id = i;
    t->op = AMK_OP_NOP;
    t->label = "";
    const AmkTask *prev = i ? &m->tasks[i - 1] : NULL;
    if (prev && chance(r, 30)) { /* a tile of the previous task's group */
      t->out_counter = prev->out_counter;
      t->n_waits = prev->n_waits;
      t->waits = prev->waits;
      t->n_outputs = prev->n_outputs;
      t->outputs = prev->outputs;
    } else {
      t->out_counter = counters++;
      t->n_outputs = (uint32_t)(chance(r, 80) ? 1 : 0);
      t->outputs = amk_arena_alloc(&m->arena, sizeof(int32_t));
      t->outputs[0] = pick(r, nb);
      t->n_waits = 0;
      t->waits = amk_arena_alloc(&m->arena, sizeof(AmkWait) * 3);
      for (int k = 0; k < 3 && i > 0; k++) {
        bool want = k == 0 ? chance(r, chain) : chance(r, 25);
        if (!want)
          continue;
        int32_t c = k == 0 ? prev->out_counter : m->tasks[pick(r, i)].out_counter;
        bool dup = false;
        for (uint32_t w = 0; w < t->n_waits; w++)
          dup = dup || t->waits[w].counter == c;
        if (!dup)
          t->waits[t->n_waits++].counter = c;
      }
    }
    t->n_inputs = (uint32_t)pick(r, 3);
    t->inputs = amk_arena_alloc(&m->arena, sizeof(int32_t) * 3);
    for (uint32_t k = 0; k < t->n_inputs; k++)
      t->inputs[k] = pick(r, nb);
  }
  /* All-join thresholds (the producer counts, now that tasks are final). */
  for (uint32_t t = 0; t < m->n_tasks; t++)
    for (uint32_t w = 0; w < m->tasks[t].n_waits; w++) {
      int64_t producers = 0;
      for (uint32_t p = 0; p < m->n_tasks; p++)
        producers += m->tasks[p].out_counter == m->tasks[t].waits[w].counter;
      m->tasks[t].waits[w].threshold = amk_value_int(producers);
    }
  for (int i = 0; i < counters; i++)
    amk_module_add_counter(m)->id = i;
  m->pages = amk_arena_alloc(&m->arena, sizeof *m->pages);
  int np = 1 + pick(r, 3), nbind = 2 + pick(r, 20);
  m->pages->n_pages = (uint32_t)np;
  m->pages->pages = amk_arena_alloc(&m->arena, sizeof(AmkPage) * (size_t)np);
  for (int i = 0; i < np; i++)
    m->pages->pages[i].id = i;
  m->pages->n_bindings = (uint32_t)nbind;
  m->pages->bindings = amk_arena_alloc(&m->arena, sizeof(AmkPageBinding) * (size_t)nbind);
  for (int i = 0; i < nbind; i++) {
    m->pages->bindings[i].buffer = chance(r, 3) ? nb + 5 : pick(r, nb);
    m->pages->bindings[i].page = pick(r, np);
  }
  return m;
}

static bool uses(const AmkTask *t, int32_t b) {
  for (uint32_t k = 0; k < t->n_inputs; k++)
    if (t->inputs[k] == b)
      return true;
  return writes(t, b);
}

/* Every use of a strictly before every writer of b (hb: the closure). */
static bool all_uses_before_writers(const AmkModule *m, const unsigned char *hb,
                                    int32_t a, int32_t b) {
  uint32_t n = m->n_tasks;
  for (uint32_t u = 0; u < n; u++)
    for (uint32_t w = 0; w < n; w++)
      if (uses(&m->tasks[u], a) && writes(&m->tasks[w], b) && !hb[u * n + w])
        return false;
  return true;
}

/* The page pairs the validator reports equal the brute-force list. */
static bool check_pages_against_all_pairs(const AmkModule *m, AmkDiagEngine *d,
                                          uint64_t seed, uint64_t iter) {
  uint32_t nb = m->n_buffers;
  unsigned char *hb = happens_before(m);
  /* Expected pairs: pages in first-appearance order, bindings in order. */
  const AmkPageAllocation *pa = m->pages;
  size_t cap = (size_t)pa->n_bindings * pa->n_bindings + 1, n_expect = 0;
  int32_t *expect = malloc(sizeof(int32_t) * 2 * cap);
  bool *page_done = calloc((size_t)pa->n_pages + 1, 1);
  for (uint32_t first = 0; first < pa->n_bindings; first++) {
    int32_t page = pa->bindings[first].page;
    if (page_done[page])
      continue;
    page_done[page] = true;
    for (uint32_t i = first; i < pa->n_bindings; i++)
      for (uint32_t j = i + 1; j < pa->n_bindings; j++) {
        int32_t x = pa->bindings[i].buffer, y = pa->bindings[j].buffer;
        if (pa->bindings[i].page != page || pa->bindings[j].page != page ||
            x >= (int32_t)nb || y >= (int32_t)nb)
          continue;
        if (all_uses_before_writers(m, hb, x, y) || all_uses_before_writers(m, hb, y, x))
          continue;
        expect[2 * n_expect] = x;
        expect[2 * n_expect + 1] = y;
        n_expect++;
      }
  }
  size_t n_got = 0;
  bool same = true;
  for (size_t i = 0; i < amk_diag_captured_count(d); i++) {
    const AmkDiagnostic *diag = amk_diag_captured(d, i);
    int page, x, y;
    if (diag->severity != AMK_SEVERITY_ERROR ||
        sscanf(diag->message, "page %d reused by buffers #%d ('%*[^']') and #%d", &page, &x,
               &y) != 3)
      continue;
    if (n_got >= n_expect || expect[2 * n_got] != x || expect[2 * n_got + 1] != y)
      same = false;
    n_got++;
  }
  if (n_got != n_expect)
    same = false;
  if (!same)
    fprintf(stderr,
            "PAGE MISMATCH: seed %llu iteration %llu: validator reported %zu "
            "page pairs, all-pairs check %zu\n",
            (unsigned long long)seed, (unsigned long long)iter, n_got, n_expect);
  free(expect);
  free(page_done);
  free(hb);
  return same;
}

static int fuzz_pages(double seconds, uint64_t seed) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  AmkValidateOptions opts = amk_validate_default_options();
  opts.max_errors = 1 << 20;
  long programs = 0, with_errors = 0;
  clock_t start = clock();
  for (uint64_t iter = 0;; iter++) {
    if ((iter & 63) == 0 && (double)(clock() - start) / CLOCKS_PER_SEC >= seconds)
      break;
    Rng r = {seed * 1000003u + iter};
    AmkModule *m = random_paged_program(&r);
    amk_diag_clear_captured(d);
    amk_validate_module(m, d, &opts, NULL);
    bool ok = check_pages_against_all_pairs(m, d, seed, iter);
    amk_module_free(m);
    if (!ok) {
      amk_diag_free(d);
      return 1;
    }
    programs++;
    for (size_t i = 0; i < amk_diag_captured_count(d); i++)
      if (strncmp(amk_diag_captured(d, i)->message, "page ", 5) == 0) {
        with_errors++;
        break;
      }
  }
  printf("fuzz_validate --pages: seed %llu: %ld programs (%ld with unordered "
         "page pairs), page errors identical to the all-pairs check\n",
         (unsigned long long)seed, programs, with_errors);
  amk_diag_free(d);
  return 0;
}

int main(int argc, char **argv) {
  double seconds = 10;
  uint64_t seed = (uint64_t)time(NULL);
  bool pages = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--pages") == 0)
      pages = true;
    else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 10);
  }
  if (pages)
    return fuzz_pages(seconds, seed);
  FILE *sink = fopen("/dev/null", "w");
  AmkDiagEngine *d = amk_diag_new(sink ? sink : stderr);
  long programs = 0, judged = 0, unsafe = 0, rejected = 0;
  clock_t start = clock();
  for (uint64_t iter = 0;; iter++) {
    if ((iter & 63) == 0 &&
        (double)(clock() - start) / CLOCKS_PER_SEC >= seconds)
      break;
    Rng r = {seed * 1000003u + iter};
    AmkModule *m = chance(&r, 70) ? random_program(&r) : mutated_toy(&r);
    amk_verify_module(m, d);
    bool ok = amk_validate_module(m, d, NULL, NULL);
    amk_simulate_counters(m, d, NULL);
    amk_simulate_adversarial(m, d, 3);
    programs++;
    rejected += !ok;
    if (clean(m)) {
      judged++;
      const char *why = oracle(m);
      if (why) {
        unsafe++;
        if (ok) {
          fprintf(stderr,
                  "FALSE ACCEPT: seed %llu iteration %llu: oracle says %s\n",
                  (unsigned long long)seed, (unsigned long long)iter, why);
          amk_module_free(m);
          amk_diag_free(d);
          if (sink)
            fclose(sink);
          return 1;
        }
      }
    }
    amk_module_free(m);
  }
  printf("fuzz_validate: seed %llu: %ld programs (%ld rejected), %ld judged "
         "by the oracle (%ld unsafe), 0 false accepts\n",
         (unsigned long long)seed, programs, rejected, judged, unsafe);
  amk_diag_free(d);
  if (sink)
    fclose(sink);
  return 0;
}

/* Launch traces: what one megakernel launch spent where (include/amk/backend.h).
 *
 * The device stamps, per instruction, when its block reached it, when its
 * waits held and when it signalled. Here that becomes a Chrome trace (one
 * track per block) and a report: time per kind of task, and the critical
 * chain, walked back from the last signal through whichever of a task's
 * queue predecessor or waited producers finished last. The chain says
 * whether a launch is bound by running tasks or by waiting between them. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "amk/compare.h"
#include "amk/io.h"

/* The kind of a task: its label without the layer prefix `L<n>.` and the
 * tile suffix `[...]` ("L3.q_proj[t7]" -> "q_proj"); unlabelled, its op. */
static void task_kind(const AmkTask *t, char *buf, size_t len) {
  const char *s = t->label;
  if (!s || !*s) {
    snprintf(buf, len, "%s", amk_op_info(t->op)->text_name);
    return;
  }
  if (s[0] == 'L' && s[1] >= '0' && s[1] <= '9') {
    const char *p = s + 1;
    while (*p >= '0' && *p <= '9')
      p++;
    if (*p == '.')
      s = p + 1;
  }
  size_t n = strcspn(s, "[");
  if (n >= len)
    n = len - 1;
  memcpy(buf, s, n);
  buf[n] = '\0';
}

static bool reached(const amk_trace_t *s) { return s->arrive && s->start && s->end; }

/* The earliest arrival of the launch: the trace's time origin. */
static uint64_t time_origin(const AmkTrace *tr) {
  uint64_t t0 = UINT64_MAX;
  for (uint32_t t = 0; t < tr->m->n_tasks; t++)
    if (reached(&tr->stamps[t]) && tr->stamps[t].arrive < t0)
      t0 = tr->stamps[t].arrive;
  return t0 == UINT64_MAX ? 0 : t0;
}

static double us(uint64_t a, uint64_t b) { return b > a ? (double)(b - a) * 1e-3 : 0.0; }

void amk_trace_chrome_json(const AmkTrace *tr, AmkStrBuf *out) {
  const AmkModule *m = tr->m;
  uint64_t t0 = time_origin(tr);
  bool *critical = amk_xcalloc(m->n_tasks ? m->n_tasks : 1, sizeof *critical);
  uint32_t *chain = amk_xcalloc(m->n_tasks ? m->n_tasks : 1, sizeof *chain);
  size_t n_chain = amk_trace_critical_chain(tr, chain);
  for (size_t i = 0; i < n_chain; i++)
    critical[chain[i]] = true;
  amk_sb_puts(out, "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n");
  bool first = true;
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    const amk_trace_t *s = &tr->stamps[t];
    if (!reached(s))
      continue;
    const AmkTask *task = &m->tasks[t];
    char kind[96];
    task_kind(task, kind, sizeof kind);
    const char *name = task->label && *task->label ? task->label : kind;
    if (s->start > s->arrive) {
      amk_sb_printf(out, "%s{\"name\": \"wait\", \"cat\": \"wait\", \"ph\": \"X\", "
                         "\"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}",
                    first ? "" : ",\n", tr->block_of[t], us(t0, s->arrive),
                    us(s->arrive, s->start));
      first = false;
    }
    amk_sb_printf(out, "%s{\"name\": ", first ? "" : ",\n");
    amk_write_json_string(name, out);
    amk_sb_puts(out, ", \"cat\": ");
    amk_write_json_string(critical[t] ? "critical" : kind, out);
    amk_sb_printf(out, ", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                       "\"args\": {\"task\": %d, \"kind\": ",
                  tr->block_of[t], us(t0, s->start), us(s->start, s->end), task->id);
    amk_write_json_string(kind, out);
    amk_sb_printf(out, ", \"wait_us\": %.3f}}", us(s->arrive, s->start));
    first = false;
  }
  amk_sb_puts(out, "\n]}\n");
  free(critical);
  free(chain);
}

/* The task that decided when task t could start: its queue predecessor (the
 * block was busy until then) or the producer of a waited counter, whichever
 * finished last. -1 for the first task of a block with nothing to wait on. */
typedef struct {
  int64_t *queue_prev;  /* per task */
  int64_t *last_writer; /* per counter position: the producer that ended last */
} Blockers;

typedef struct {
  int32_t block;
  uint64_t arrive;
  uint32_t task;
} QueueSlot;

static int by_block_then_arrival(const void *pa, const void *pb) {
  const QueueSlot *a = pa, *b = pb;
  int order = amk_compare_i64(a->block, b->block);
  if (order == 0)
    order = amk_compare_u64(a->arrive, b->arrive);
  return order ? order : amk_compare_i64(a->task, b->task);
}

static void blockers_init(const AmkTrace *tr, Blockers *b) {
  const AmkModule *m = tr->m;
  uint32_t n = m->n_tasks, nc = m->n_counters;
  b->queue_prev = amk_xcalloc(n ? n : 1, sizeof *b->queue_prev);
  b->last_writer = amk_xcalloc(nc ? nc : 1, sizeof *b->last_writer);
  for (uint32_t c = 0; c < nc; c++)
    b->last_writer[c] = -1;
  /* A block runs its tasks one after another, so its tasks ordered by
   * arrival give each one's predecessor (whatever order the loader chose). */
  QueueSlot *slots = amk_xcalloc(n ? n : 1, sizeof *slots);
  size_t k = 0;
  for (uint32_t t = 0; t < n; t++) {
    b->queue_prev[t] = -1;
    if (!reached(&tr->stamps[t]))
      continue;
    slots[k++] = (QueueSlot){tr->block_of[t], tr->stamps[t].arrive, t};
    const AmkCounter *c = amk_module_counter(m, m->tasks[t].out_counter);
    if (c) {
      int64_t *w = &b->last_writer[c - m->counters];
      if (*w < 0 || tr->stamps[*w].end < tr->stamps[t].end)
        *w = t;
    }
  }
  qsort(slots, k, sizeof *slots, by_block_then_arrival);
  for (size_t i = 1; i < k; i++)
    if (slots[i].block == slots[i - 1].block)
      b->queue_prev[slots[i].task] = slots[i - 1].task;
  free(slots);
}

static void blockers_free(Blockers *b) {
  free(b->queue_prev);
  free(b->last_writer);
}

static int64_t blocker_of(const AmkTrace *tr, const Blockers *b, uint32_t t) {
  const AmkTask *task = &tr->m->tasks[t];
  int64_t best = b->queue_prev[t];
  for (uint32_t w = 0; w < task->n_waits; w++) {
    const AmkCounter *c = amk_module_counter(tr->m, task->waits[w].counter);
    int64_t p = c ? b->last_writer[c - tr->m->counters] : -1;
    if (p >= 0 && (best < 0 || tr->stamps[p].end > tr->stamps[best].end))
      best = p;
  }
  return best;
}

size_t amk_trace_critical_chain(const AmkTrace *tr, uint32_t *chain) {
  const AmkModule *m = tr->m;
  int64_t last = -1;
  for (uint32_t t = 0; t < m->n_tasks; t++)
    if (reached(&tr->stamps[t]) && (last < 0 || tr->stamps[t].end > tr->stamps[last].end))
      last = t;
  if (last < 0)
    return 0;
  Blockers b;
  blockers_init(tr, &b);
  size_t n = 0;
  /* Each step goes to a task that ended before this one (clocks permitting);
   * the step cap ends the walk whatever the stamps say. */
  for (int64_t t = last; t >= 0 && n < m->n_tasks; t = blocker_of(tr, &b, (uint32_t)t))
    chain[n++] = (uint32_t)t;
  blockers_free(&b);
  /* Oldest first. */
  for (size_t i = 0; i < n / 2; i++) {
    uint32_t x = chain[i];
    chain[i] = chain[n - 1 - i];
    chain[n - 1 - i] = x;
  }
  return n;
}

typedef struct {
  char kind[96];
  uint32_t tasks, chain_tasks;
  double run_sum, run_max, wait_sum, chain_run;
  /* Phase stamps (AMK_CUDA_TRACE_PHASES builds): tasks with a body stamp,
   * those with a staged stamp too, and the sums of their phases. */
  uint32_t phased, staged;
  double to_staged_sum, staged_to_body_sum, body_sum, signal_sum;
  /* Those with loop stamps too: start to the loop, the loop, its end to the
   * body's end. */
  uint32_t looped;
  double to_loop_sum, loop_sum, looped_to_body_sum;
} KindRow;

static KindRow *kind_row(KindRow **rows, size_t *n, const char *kind) {
  for (size_t i = 0; i < *n; i++)
    if (strcmp((*rows)[i].kind, kind) == 0)
      return &(*rows)[i];
  *rows = amk_xrealloc(*rows, (*n + 1) * sizeof **rows);
  KindRow *r = &(*rows)[(*n)++];
  memset(r, 0, sizeof *r);
  snprintf(r->kind, sizeof r->kind, "%s", kind);
  return r;
}

static int by_run_sum(const void *a, const void *b) {
  double x = ((const KindRow *)a)->run_sum, y = ((const KindRow *)b)->run_sum;
  return (x < y) - (x > y);
}

void amk_trace_report(const AmkTrace *tr, AmkStrBuf *out) {
  const AmkModule *m = tr->m;
  uint32_t n = m->n_tasks, n_reached = 0;
  uint64_t t0 = time_origin(tr), t_end = t0;
  int32_t n_blocks = 0;
  for (uint32_t t = 0; t < n; t++) {
    if (tr->block_of[t] + 1 > n_blocks)
      n_blocks = tr->block_of[t] + 1;
    if (reached(&tr->stamps[t])) {
      n_reached++;
      if (tr->stamps[t].end > t_end)
        t_end = tr->stamps[t].end;
    }
  }
  if (n_reached == 0) {
    amk_sb_puts(out, "trace: no task of the launch was stamped\n");
    return;
  }
  double span = us(t0, t_end);
  double *busy = amk_xcalloc((size_t)(n_blocks > 0 ? n_blocks : 1), sizeof *busy);
  KindRow *rows = NULL;
  size_t n_rows = 0;
  for (uint32_t t = 0; t < n; t++) {
    const amk_trace_t *s = &tr->stamps[t];
    if (!reached(s))
      continue;
    char kind[96];
    task_kind(&m->tasks[t], kind, sizeof kind);
    KindRow *r = kind_row(&rows, &n_rows, kind);
    double run = us(s->start, s->end);
    r->tasks++;
    r->run_sum += run;
    r->wait_sum += us(s->arrive, s->start);
    if (run > r->run_max)
      r->run_max = run;
    if (s->body >= s->start && s->body <= s->end && s->body) {
      r->phased++;
      r->body_sum += us(s->start, s->body);
      r->signal_sum += us(s->body, s->end);
      if (s->staged >= s->start && s->staged <= s->body && s->staged) {
        r->staged++;
        r->to_staged_sum += us(s->start, s->staged);
        r->staged_to_body_sum += us(s->staged, s->body);
      }
      if (s->loop && s->looped && s->loop >= s->start && s->loop <= s->looped &&
          s->looped <= s->body) {
        r->looped++;
        r->to_loop_sum += us(s->start, s->loop);
        r->loop_sum += us(s->loop, s->looped);
        r->looped_to_body_sum += us(s->looped, s->body);
      }
    }
    if (tr->block_of[t] >= 0)
      busy[tr->block_of[t]] += run;
  }
  uint32_t *chain = amk_xcalloc(n ? n : 1, sizeof *chain);
  size_t n_chain = amk_trace_critical_chain(tr, chain);
  double chain_run = 0, gap_cross = 0, gap_same = 0;
  uint32_t hops_cross = 0, hops_same = 0;
  for (size_t i = 0; i < n_chain; i++) {
    uint32_t t = chain[i];
    const amk_trace_t *s = &tr->stamps[t];
    char kind[96];
    task_kind(&m->tasks[t], kind, sizeof kind);
    KindRow *r = kind_row(&rows, &n_rows, kind);
    r->chain_tasks++;
    r->chain_run += us(s->start, s->end);
    chain_run += us(s->start, s->end);
    if (i > 0) {
      uint32_t p = chain[i - 1];
      double gap = us(tr->stamps[p].end, s->start);
      if (tr->block_of[p] == tr->block_of[t]) {
        gap_same += gap;
        hops_same++;
      } else {
        gap_cross += gap;
        hops_cross++;
      }
    }
  }
  double busy_sum = 0, busy_min = -1, busy_max = 0;
  int32_t min_block = 0, max_block = 0, used = 0;
  for (int32_t q = 0; q < n_blocks; q++) {
    if (busy[q] <= 0)
      continue;
    used++;
    busy_sum += busy[q];
    if (busy_min < 0 || busy[q] < busy_min) {
      busy_min = busy[q];
      min_block = q;
    }
    if (busy[q] > busy_max) {
      busy_max = busy[q];
      max_block = q;
    }
  }
  double pct = span > 0 ? 100.0 / span : 0;
  amk_sb_printf(out,
                "trace: %" PRIu32 " of %" PRIu32 " tasks on %" PRId32
                " blocks; %.1f us from the first arrival to the last signal\n",
                n_reached, n, used, span);
  amk_sb_printf(out,
                "trace: blocks busy running tasks: mean %.1f%%, least %.1f%% (block %" PRId32
                "), most %.1f%% (block %" PRId32 ")\n",
                used ? busy_sum / used * pct : 0, busy_min * pct, min_block, busy_max * pct,
                max_block);
  amk_sb_printf(out,
                "trace: critical chain %zu tasks: running %.1f us (%.1f%%), waiting on another "
                "block %.1f us over %" PRIu32 " hops (mean %.2f us), on its own block %.1f us "
                "over %" PRIu32 " hops\n",
                n_chain, chain_run, chain_run * pct, gap_cross, hops_cross,
                hops_cross ? gap_cross / hops_cross : 0, gap_same, hops_same);
  qsort(rows, n_rows, sizeof *rows, by_run_sum);
  amk_sb_puts(out, "| kind                 | tasks | run us sum | run us mean | run us max | "
                   "wait us sum | on chain | chain run us |\n");
  amk_sb_puts(out, "|----------------------|-------|------------|-------------|------------|"
                   "-------------|----------|--------------|\n");
  for (size_t i = 0; i < n_rows; i++) {
    const KindRow *r = &rows[i];
    amk_sb_printf(out, "| %-20s | %5" PRIu32 " | %10.1f | %11.2f | %10.2f | %11.1f | %8" PRIu32
                       " | %12.1f |\n",
                  r->kind, r->tasks, r->run_sum, r->tasks ? r->run_sum / r->tasks : 0, r->run_max,
                  r->wait_sum, r->chain_tasks, r->chain_run);
  }
  bool phased = false;
  for (size_t i = 0; i < n_rows && !phased; i++)
    phased = rows[i].phased > 0;
  if (phased) {
    /* Where a task's run goes (means over the tasks with the stamps): up
     * to its inputs staged, from there to its body's end, then the
     * signal's barrier and release; where it has a weight loop, up to the
     * loop, the loop, and from its end to the body's. */
    amk_sb_puts(out, "trace: phases of a run (AMK_CUDA_TRACE_PHASES), mean us\n");
    amk_sb_puts(out, "| kind                 | tasks | inputs staged | staged to body end | "
                     "body | signal | to loop | loop | loop end to body end |\n");
    amk_sb_puts(out, "|----------------------|-------|---------------|--------------------|"
                     "------|--------|---------|------|----------------------|\n");
    for (size_t i = 0; i < n_rows; i++) {
      const KindRow *r = &rows[i];
      if (!r->phased)
        continue;
      char staged[32] = "-", rest[32] = "-", to_loop[32] = "-", loop[32] = "-", after[32] = "-";
      if (r->staged) {
        snprintf(staged, sizeof staged, "%.2f", r->to_staged_sum / r->staged);
        snprintf(rest, sizeof rest, "%.2f", r->staged_to_body_sum / r->staged);
      }
      if (r->looped) {
        snprintf(to_loop, sizeof to_loop, "%.2f", r->to_loop_sum / r->looped);
        snprintf(loop, sizeof loop, "%.2f", r->loop_sum / r->looped);
        snprintf(after, sizeof after, "%.2f", r->looped_to_body_sum / r->looped);
      }
      amk_sb_printf(out,
                    "| %-20s | %5" PRIu32 " | %13s | %18s | %4.2f | %6.2f | %7s | %4s | %20s |\n",
                    r->kind, r->phased, staged, rest, r->body_sum / r->phased,
                    r->signal_sum / r->phased, to_loop, loop, after);
    }
  }
  free(rows);
  free(chain);
  free(busy);
}

/* sm-assign: give every task an SM and order the task list so that each SM's
 * queue is a linear extension of the dependency DAG.
 *
 * Policies (config.sm_assignment, or --sm-assignment=):
 *   round_robin   tasks in topological order dealt to SMs in turn;
 *   load_balance  list scheduling: tasks by decreasing critical path to the
 *                 end (a task nothing waits on ranked with its siblings:
 *                 rank_sinks_with_siblings), each placed on the SM where it
 *                 would finish first under the cost model below;
 *   explicit      the config's {task id: sm} map (every task must be named).
 *
 * Cost model (from the target): a task costs a fixed issue latency plus
 * max(bytes / per-SM bandwidth, flops / per-SM peak); a dependency between
 * tasks on different SMs adds a counter hop (release, L2 round trip,
 * acquire). Per-SM figures are the card's totals divided by its SMs, i.e.
 * the share each SM gets when all stream at once, as in a decode step.
 *
 * The list is then sorted by predicted start time (a topological order, as
 * every task starts after its predecessors finish), and task ids are
 * renumbered to list positions, as the reference's tools require.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/pass.h"
#include "validate_graph.h"

/* Per-task fixed cost and cross-SM dependency cost, in microseconds, as
 * `amk-run --trace` measures them on an H100 (Llama-3.2-1B, bf16): a task
 * with next to no work (rope_kv) runs 2.6-3 µs from its waits holding to
 * its signal, plus ~0.5 µs before it on its block (prefetch issue, the wait
 * check); a consumer on another block starts ~2.1 µs after its producer's
 * signal (release, L2 round trip, acquire poll). With smaller figures the
 * schedule stacked several tiny tasks (split-KV partitions) on one SM to
 * save hops that cost less than the tasks. */
#define TASK_LATENCY_US 3.0
#define CROSS_SM_DEP_US 2.0

typedef struct {
  double bytes_per_us; /* one SM's share of the HBM bandwidth */
  double flops_per_us; /* one SM's share of the peak */
} CostModel;

/* Bytes a task moves when the lowering left no estimate: its inputs and
 * output, with a tiled GEMV/GEMM reading only its N_tile rows of weights. */
static double estimate_bytes(const AmkModule *m, const AmkTask *t) {
  if (t->est_bytes > 0)
    return (double)t->est_bytes;
  double bytes = 0;
  int64_t n_tile = 0;
  bool tiled = (t->op == AMK_OP_GEMV_TILE || t->op == AMK_OP_GEMM_TILE) &&
               amk_task_param_int(t, "N_tile", &n_tile) && n_tile > 0;
  for (uint32_t i = 0; i < t->n_inputs + t->n_outputs; i++) {
    int32_t id = i < t->n_inputs ? t->inputs[i] : t->outputs[i - t->n_inputs];
    const AmkBuffer *b = amk_module_buffer(m, id);
    int64_t nbytes;
    if (!b || !amk_buffer_nbytes(b, &nbytes))
      continue;
    int64_t rows;
    if (tiled && b->kind == AMK_KIND_WEIGHT && b->rank == 2 &&
        amk_value_as_int(&b->shape[0], &rows) && rows > 0)
      bytes += (double)nbytes * (double)n_tile / (double)rows;
    else
      bytes += (double)nbytes;
  }
  return bytes;
}

static double task_cost_us(const CostModel *cm, const AmkModule *m, const AmkTask *t) {
  double mem = estimate_bytes(m, t) / cm->bytes_per_us;
  double math = (double)t->est_flops / cm->flops_per_us;
  return TASK_LATENCY_US + (mem > math ? mem : math);
}

/* Task adjacency in CSR form: the producers of every counter a task waits
 * on (its predecessors) and the tasks waiting on its counter (successors). */
typedef struct {
  uint32_t *off, *list;
} Adjacency;

static Adjacency build_predecessors(const AmkTaskGraph *g) {
  Adjacency a;
  a.off = amk_xcalloc((size_t)g->n_tasks + 1, sizeof *a.off);
  for (uint32_t t = 0; t < g->n_tasks; t++)
    for (uint32_t k = g->tw_off[t]; k < g->tw_off[t + 1]; k++)
      a.off[t + 1] += amk_graph_producer_count(g, g->tw_slot[k]);
  for (uint32_t t = 0; t < g->n_tasks; t++)
    a.off[t + 1] += a.off[t];
  a.list = amk_xmalloc(((size_t)a.off[g->n_tasks] + 1) * sizeof *a.list);
  for (uint32_t t = 0; t < g->n_tasks; t++) {
    uint32_t out = a.off[t];
    for (uint32_t k = g->tw_off[t]; k < g->tw_off[t + 1]; k++) {
      uint32_t slot = g->tw_slot[k];
      for (uint32_t j = g->prod_off[slot]; j < g->prod_off[slot + 1]; j++)
        a.list[out++] = g->prod[j];
    }
  }
  return a;
}

static Adjacency build_successors(const AmkTaskGraph *g) {
  Adjacency a;
  a.off = amk_xcalloc((size_t)g->n_tasks + 1, sizeof *a.off);
  for (uint32_t t = 0; t < g->n_tasks; t++) {
    uint32_t slot = g->task_slot[t];
    if (slot != AMK_NO_INDEX)
      a.off[t + 1] = g->wait_off[slot + 1] - g->wait_off[slot];
  }
  for (uint32_t t = 0; t < g->n_tasks; t++)
    a.off[t + 1] += a.off[t];
  a.list = amk_xmalloc(((size_t)a.off[g->n_tasks] + 1) * sizeof *a.list);
  for (uint32_t t = 0; t < g->n_tasks; t++) {
    uint32_t slot = g->task_slot[t];
    if (slot != AMK_NO_INDEX)
      memcpy(a.list + a.off[t], g->waiter + g->wait_off[slot],
             (a.off[t + 1] - a.off[t]) * sizeof *a.list);
  }
  return a;
}

static void adjacency_free(Adjacency *a) {
  free(a->off);
  free(a->list);
}

typedef struct {
  double makespan_us;
  double max_busy_us, mean_busy_us; /* mean over all of the target's SMs */
  uint32_t sms_used;
  int64_t num_sms;
} ScheduleSummary;

/* Simulates in-order per-SM queues: `order` lists the tasks in a
 * topological order that is also each SM's queue order. */
static ScheduleSummary simulate(const AmkTaskGraph *g, const Adjacency *preds,
                                const uint32_t *order, const int32_t *sm, const double *cost,
                                int64_t num_sms, double *start_out) {
  double *finish = amk_xcalloc(g->n_tasks ? g->n_tasks : 1, sizeof *finish);
  double *free_at = amk_xcalloc((size_t)num_sms, sizeof *free_at);
  double *busy = amk_xcalloc((size_t)num_sms, sizeof *busy);
  ScheduleSummary s = {0};
  for (uint32_t k = 0; k < g->n_tasks; k++) {
    uint32_t t = order[k];
    double start = free_at[sm[t]];
    for (uint32_t k2 = preds->off[t]; k2 < preds->off[t + 1]; k2++) {
      uint32_t p = preds->list[k2];
      double ready = finish[p] + (sm[p] != sm[t] ? CROSS_SM_DEP_US : 0.0);
      if (ready > start)
        start = ready;
    }
    finish[t] = start + cost[t];
    free_at[sm[t]] = finish[t];
    busy[sm[t]] += cost[t];
    if (start_out)
      start_out[t] = start;
    if (finish[t] > s.makespan_us)
      s.makespan_us = finish[t];
  }
  double total = 0;
  for (int64_t i = 0; i < num_sms; i++) {
    total += busy[i];
    s.sms_used += busy[i] > 0;
    if (busy[i] > s.max_busy_us)
      s.max_busy_us = busy[i];
  }
  s.mean_busy_us = total / (double)num_sms;
  s.num_sms = num_sms;
  free(finish);
  free(free_at);
  free(busy);
  return s;
}

/* Critical path from each task to the end of the program (its "upward
 * rank"), cross-SM hops included as if every edge crossed SMs. */
static double *upward_rank(const AmkTaskGraph *g, const Adjacency *succs,
                           const double *cost) {
  double *rank = amk_xcalloc(g->n_tasks ? g->n_tasks : 1, sizeof *rank);
  for (uint32_t k = g->n_tasks; k-- > 0;) {
    uint32_t t = g->topo[k];
    double best = 0;
    for (uint32_t j = succs->off[t]; j < succs->off[t + 1]; j++) {
      double via = rank[succs->list[j]] + CROSS_SM_DEP_US;
      if (via > best)
        best = via;
    }
    rank[t] = cost[t] + best;
  }
  return rank;
}

/* A task nothing in the step waits on beside other tasks (fuse's rope_kv:
 * the attention takes row pos from qkv, so rope_kv writes only for the
 * steps after) ranks by its own cost alone, so list scheduling would queue
 * it after everything, at the end of the step. It is ranked with its
 * siblings instead (the other successors of its predecessors, those that
 * something waits on), capped below each predecessor so the rank order
 * stays topological: it runs in the idle time beside them. By default with
 * the highest-ranked sibling, so it is placed first, on the first SMs
 * (where four of the 1B's 128 attention tiles then queue behind rope_kv
 * tasks); with AMK_SM_SINKS=idle just below the lowest-ranked one, so it is
 * placed after them, on the SMs they leave idle. On an H200 (twenty-ninth
 * session, docs/Performance.md) idle took the bf16 1B 1.1% and the 8B 0.5%
 * faster but the 8B int4 step 7% slower, every kind of its tiles running
 * longer, so it is not the default. */
static void rank_sinks_with_siblings(const AmkTaskGraph *g, const Adjacency *preds,
                                     const Adjacency *succs, const double *cost, bool below,
                                     double *rank) {
  for (uint32_t t = 0; t < g->n_tasks; t++) {
    if (succs->off[t + 1] > succs->off[t] || preds->off[t + 1] == preds->off[t])
      continue;
    double high = 0, low = INFINITY, cap = INFINITY;
    for (uint32_t j = preds->off[t]; j < preds->off[t + 1]; j++) {
      uint32_t p = preds->list[j];
      double under = rank[p] - cost[p] - CROSS_SM_DEP_US;
      if (under < cap)
        cap = under;
      for (uint32_t k = succs->off[p]; k < succs->off[p + 1]; k++) {
        uint32_t s = succs->list[k];
        if (s == t || succs->off[s + 1] == succs->off[s])
          continue;
        if (rank[s] > high)
          high = rank[s];
        if (rank[s] < low)
          low = rank[s];
      }
    }
    /* idle: a thousandth of a microsecond below orders it after the
     * siblings and before anything ranked under them. */
    double sibling = below ? (low < INFINITY ? low - 1e-3 : 0) : high;
    double want = sibling < cap ? sibling : cap;
    if (want > rank[t])
      rank[t] = want;
  }
}

/* AMK_SM_SINKS: where sinks rank among their siblings (above), siblings
 * (the default) or idle. */
static bool read_sinks_below(AmkDiagEngine *diag, bool *below) {
  const char *text = getenv("AMK_SM_SINKS");
  *below = false;
  if (!text || !*text || strcmp(text, "siblings") == 0)
    return true;
  if (strcmp(text, "idle") == 0) {
    *below = true;
    return true;
  }
  AmkLoc none = {0, 0};
  amk_error(diag, none, "sm-assign: AMK_SM_SINKS must be siblings or idle, not '%s'", text);
  return false;
}

/* Sorting helpers: indices by decreasing rank, ties by topological position. */
typedef struct {
  double key;
  uint32_t tie;
  uint32_t task;
} Keyed;

static int compare_keyed(const Keyed *x, const Keyed *y, bool descending) {
  if (x->key != y->key)
    return (x->key < y->key) == descending ? 1 : -1;
  return (x->tie > y->tie) - (x->tie < y->tie);
}

static int compare_keyed_desc(const void *a, const void *b) {
  return compare_keyed(a, b, true);
}

static int compare_keyed_asc(const void *a, const void *b) {
  return compare_keyed(a, b, false);
}

/* A binary min-heap of SMs keyed by the time each becomes free, to find the
 * earliest-free SM in O(log S). */
typedef struct {
  uint32_t *heap;
  uint32_t *where;
  const double *free_at;
  uint32_t n;
} SmHeap;

static bool heap_less(const SmHeap *h, uint32_t a, uint32_t b) {
  double fa = h->free_at[h->heap[a]], fb = h->free_at[h->heap[b]];
  return fa < fb || (fa == fb && h->heap[a] < h->heap[b]);
}

static void heap_swap(SmHeap *h, uint32_t a, uint32_t b) {
  uint32_t t = h->heap[a];
  h->heap[a] = h->heap[b];
  h->heap[b] = t;
  h->where[h->heap[a]] = a;
  h->where[h->heap[b]] = b;
}

/* Restores the heap after the free time of `sm` grew. */
static void heap_sift_down(SmHeap *h, uint32_t sm) {
  uint32_t i = h->where[sm];
  for (;;) {
    uint32_t l = 2 * i + 1, r = l + 1, best = i;
    if (l < h->n && heap_less(h, l, best))
      best = l;
    if (r < h->n && heap_less(h, r, best))
      best = r;
    if (best == i)
      return;
    heap_swap(h, i, best);
    i = best;
  }
}

/* Load balance: list scheduling in `order` (decreasing upward rank, a
 * topological order). The SM that lets a task start first is either the
 * earliest-free SM or one that ran a predecessor (only those avoid a
 * cross-SM hop), so only those are tried; each costs O(1) after one pass over
 * the predecessors, which records the latest local finish per SM and the two
 * latest remote-ready times on different SMs. */
static void assign_load_balance(const AmkTaskGraph *g, const Adjacency *preds,
                                const uint32_t *order, const double *cost,
                                int64_t num_sms, int32_t *sm) {
  double *free_at = amk_xcalloc((size_t)num_sms, sizeof *free_at);
  double *finish = amk_xcalloc(g->n_tasks ? g->n_tasks : 1, sizeof *finish);
  double *local_finish = amk_xcalloc((size_t)num_sms, sizeof *local_finish);
  uint32_t *local_stamp = amk_xcalloc((size_t)num_sms, sizeof *local_stamp);
  SmHeap heap = {amk_xmalloc((size_t)num_sms * sizeof(uint32_t)),
                 amk_xmalloc((size_t)num_sms * sizeof(uint32_t)), free_at,
                 (uint32_t)num_sms};
  for (uint32_t i = 0; i < heap.n; i++)
    heap.heap[i] = heap.where[i] = i;

  for (uint32_t k = 0; k < g->n_tasks; k++) {
    uint32_t t = order[k], stamp = k + 1;
    double top1 = 0, top2 = 0; /* latest remote-ready times, on different SMs */
    int32_t top1_sm = -1;
    for (uint32_t j = preds->off[t]; j < preds->off[t + 1]; j++) {
      uint32_t p = preds->list[j];
      int32_t psm = sm[p];
      if (local_stamp[psm] != stamp || finish[p] > local_finish[psm]) {
        local_stamp[psm] = stamp;
        local_finish[psm] = finish[p];
      }
      double ready = finish[p] + CROSS_SM_DEP_US;
      if (psm == top1_sm) {
        if (ready > top1)
          top1 = ready;
      } else if (ready > top1) {
        top2 = top1;
        top1 = ready, top1_sm = psm;
      } else if (ready > top2) {
        top2 = ready;
      }
    }
    uint32_t best_sm = heap.heap[0];
    double best_start = free_at[best_sm];
    double remote = (int32_t)best_sm == top1_sm ? top2 : top1;
    if (remote > best_start)
      best_start = remote;
    if (local_stamp[best_sm] == stamp && local_finish[best_sm] > best_start)
      best_start = local_finish[best_sm];
    for (uint32_t j = preds->off[t]; j < preds->off[t + 1]; j++) {
      uint32_t cand = (uint32_t)sm[preds->list[j]];
      double start = free_at[cand];
      double cand_remote = (int32_t)cand == top1_sm ? top2 : top1;
      if (cand_remote > start)
        start = cand_remote;
      if (local_finish[cand] > start)
        start = local_finish[cand];
      if (start < best_start || (start == best_start && cand < best_sm))
        best_start = start, best_sm = cand;
    }
    sm[t] = (int32_t)best_sm;
    finish[t] = best_start + cost[t];
    free_at[best_sm] = finish[t];
    heap_sift_down(&heap, best_sm);
  }
  free(heap.heap);
  free(heap.where);
  free(local_finish);
  free(local_stamp);
  free(free_at);
  free(finish);
}

/* Rewrites the task list in `order` and numbers the tasks by position. An
 * explicit sm map in the config follows its tasks to their new ids. */
static void reorder_tasks(AmkModule *m, const uint32_t *order) {
  AmkTask *tasks = amk_xmalloc((m->n_tasks ? m->n_tasks : 1) * sizeof *tasks);
  int32_t *new_id_of_old = amk_xmalloc((m->n_tasks ? m->n_tasks : 1) * sizeof(int32_t));
  for (uint32_t k = 0; k < m->n_tasks; k++) {
    tasks[k] = m->tasks[order[k]];
    new_id_of_old[order[k]] = (int32_t)k;
  }
  if (m->config && m->config->sm_assignment == AMK_SM_EXPLICIT) {
    for (uint32_t e = 0; e < m->config->n_sm_map; e++) {
      const AmkTask *old = amk_module_task(m, m->config->sm_map[e].task);
      if (old)
        m->config->sm_map[e].task = new_id_of_old[old - m->tasks];
    }
  }
  for (uint32_t k = 0; k < m->n_tasks; k++)
    tasks[k].id = (int32_t)k;
  memcpy(m->tasks, tasks, m->n_tasks * sizeof *tasks);
  free(tasks);
  free(new_id_of_old);
}

static void record_stats(AmkPassContext *ctx, const char *policy, const ScheduleSummary *s) {
  char name[96];
  snprintf(name, sizeof name, "%s: predicted makespan (us)", policy);
  amk_stat_real(ctx->stats, "sm-assign", name, s->makespan_us);
  snprintf(name, sizeof name, "%s: busiest SM load (us)", policy);
  amk_stat_real(ctx->stats, "sm-assign", name, s->max_busy_us);
  snprintf(name, sizeof name, "%s: mean load of the SMs used (us)", policy);
  amk_stat_real(ctx->stats, "sm-assign", name,
                s->sms_used ? s->mean_busy_us * (double)s->num_sms / s->sms_used : 0.0);
  snprintf(name, sizeof name, "%s: SMs used", policy);
  amk_stat_int(ctx->stats, "sm-assign", name, s->sms_used);
}

/* Every task's cost under the target's cost model. */
static double *task_costs(const AmkModule *m, int64_t num_sms) {
  CostModel cm;
  double bw_gbs = m->target->measured_bw_gbs > 0 ? m->target->measured_bw_gbs
                                                 : m->target->hbm_bandwidth_gbs;
  cm.bytes_per_us = (bw_gbs > 0 ? bw_gbs : 1000.0) * 1e3 / (double)num_sms;
  cm.flops_per_us =
      (m->target->fp16_tflops > 0 ? m->target->fp16_tflops : 100.0) * 1e6 / (double)num_sms;
  uint32_t n = m->n_tasks;
  double *cost = amk_xmalloc((n ? n : 1) * sizeof *cost);
  for (uint32_t t = 0; t < n; t++)
    cost[t] = task_cost_us(&cm, m, &m->tasks[t]);
  return cost;
}

bool amk_sm_schedule_predict(const AmkModule *m, double *arrive_us, double *start_us,
                             double *end_us, AmkDiagEngine *diag) {
  AmkLoc none = {0, 0};
  if (!m->target || m->target->num_sms < 1 || m->target->num_sms > 100000) {
    amk_error(diag, none, "the predicted schedule needs a target with an SM count");
    return false;
  }
  for (uint32_t t = 0; t < m->n_tasks; t++)
    if (!m->tasks[t].has_sm || m->tasks[t].sm < 0 || m->tasks[t].sm >= m->target->num_sms) {
      amk_error(diag, m->tasks[t].loc,
                "the predicted schedule needs every task on an SM of the target; task %d "
                "('%s') has none: run -sm-assign first",
                m->tasks[t].id, m->tasks[t].label);
      return false;
    }
  AmkTaskGraph g;
  if (!amk_graph_build_acyclic(&g, m, diag, "schedule", "no schedule can be predicted"))
    return false;
  uint32_t n = m->n_tasks;
  int64_t num_sms = m->target->num_sms;
  double *cost = task_costs(m, num_sms);
  Adjacency preds = build_predecessors(&g);
  /* Each SM runs its tasks in list order (its queue), a task once every
   * producer it waits on has signalled; the SMs advance in turn until none
   * can. The list need not be topological across SMs, only per SM. */
  uint32_t *queue_off = amk_xcalloc((size_t)num_sms + 1, sizeof *queue_off);
  for (uint32_t t = 0; t < n; t++)
    queue_off[m->tasks[t].sm + 1]++;
  for (int64_t s = 0; s < num_sms; s++)
    queue_off[s + 1] += queue_off[s];
  uint32_t *queue = amk_xmalloc((n ? n : 1) * sizeof *queue);
  uint32_t *head = amk_xmalloc((size_t)num_sms * sizeof *head);
  memcpy(head, queue_off, (size_t)num_sms * sizeof *head);
  for (uint32_t t = 0; t < n; t++)
    queue[head[m->tasks[t].sm]++] = t;
  memcpy(head, queue_off, (size_t)num_sms * sizeof *head);
  double *free_at = amk_xcalloc((size_t)num_sms, sizeof *free_at);
  bool *done = amk_xcalloc(n ? n : 1, sizeof *done);
  uint32_t n_done = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (int64_t s = 0; s < num_sms; s++)
      while (head[s] < queue_off[s + 1]) {
        uint32_t t = queue[head[s]];
        double start = free_at[s];
        bool ready = true;
        for (uint32_t k = preds.off[t]; k < preds.off[t + 1]; k++) {
          uint32_t p = preds.list[k];
          if (!done[p]) {
            ready = false;
            break;
          }
          double at = end_us[p] + (m->tasks[p].sm != (int32_t)s ? CROSS_SM_DEP_US : 0.0);
          if (at > start)
            start = at;
        }
        if (!ready)
          break;
        arrive_us[t] = free_at[s];
        start_us[t] = start;
        end_us[t] = free_at[s] = start + cost[t];
        done[t] = true;
        n_done++;
        head[s]++;
        moved = true;
      }
  }
  bool ok = n_done == n;
  if (!ok)
    amk_error(diag, none, "the SM queues cannot all run: a task waits on one queued after it "
                          "on its own SM (run -validate)");
  free(done);
  free(free_at);
  free(head);
  free(queue);
  free(queue_off);
  adjacency_free(&preds);
  free(cost);
  amk_graph_free(&g);
  return ok;
}

bool amk_pass_sm_assign(AmkModule *m, AmkPassContext *ctx) {
  AmkLoc none = {0, 0};
  if (!m->target || m->target->num_sms < 1 || m->target->num_sms > 100000) {
    amk_error(ctx->diag, none,
              m->target ? "sm-assign: target '%s' has no usable SM count"
                        : "sm-assign needs a target (add a `target` line, e.g. `target h200`)",
              m->target ? m->target->name : "");
    return false;
  }
  int64_t num_sms = m->target->num_sms;
  bool sinks_below;
  if (!read_sinks_below(ctx->diag, &sinks_below))
    return false;
  AmkSmPolicy policy = m->config ? m->config->sm_assignment : AMK_SM_LOAD_BALANCE;
  /* The words of --sm-assignment in AMK_PASS_OPTIONS, in order (explicit
   * maps come only from the module's config). */
  static const AmkSmPolicy policy_by_word[] = {AMK_SM_ROUND_ROBIN, AMK_SM_LOAD_BALANCE};
  size_t word;
  if (amk_pass_option_enum(ctx, "sm-assignment", &word))
    policy = policy_by_word[word];

  AmkTaskGraph g;
  if (!amk_graph_build_acyclic(&g, m, ctx->diag, "sm-assign",
                               "no SM order can be safe"))
    return false;
  uint32_t n = m->n_tasks;
  int32_t *sm = amk_xcalloc(n ? n : 1, sizeof *sm);
  if (policy == AMK_SM_EXPLICIT) {
    AmkIdIndex tasks_by_id;
    amk_id_index_build(&tasks_by_id, m->tasks, sizeof *m->tasks, n);
    bool *named = amk_xcalloc(n ? n : 1, sizeof *named);
    bool ok = true;
    for (uint32_t e = 0; e < m->config->n_sm_map && ok; e++) {
      const AmkSmMapEntry *entry = &m->config->sm_map[e];
      uint32_t t = amk_id_index_get(&tasks_by_id, entry->task);
      if (t == AMK_NO_INDEX) {
        amk_error(ctx->diag, none, "sm-assign: the explicit map names task %d, which does not exist",
                  entry->task);
        ok = false;
      } else if (entry->sm < 0 || entry->sm >= num_sms) {
        amk_error(ctx->diag, m->tasks[t].loc,
                  "sm-assign: the explicit map puts task %d on SM %d, outside [0, %lld) of "
                  "target '%s'",
                  entry->task, entry->sm, (long long)num_sms, m->target->name);
        ok = false;
      } else {
        sm[t] = entry->sm;
        named[t] = true;
      }
    }
    for (uint32_t t = 0; t < n && ok; t++)
      if (!named[t]) {
        amk_error(ctx->diag, m->tasks[t].loc,
                  "sm-assign: the explicit map does not name task %d ('%s'); an explicit map "
                  "must place every task",
                  m->tasks[t].id, m->tasks[t].label);
        ok = false;
      }
    free(named);
    amk_id_index_free(&tasks_by_id);
    if (!ok) {
      free(sm);
      amk_graph_free(&g);
      return false;
    }
  }

  double *cost = task_costs(m, num_sms);

  Adjacency preds = build_predecessors(&g), succs = build_successors(&g);
  double *rank = upward_rank(&g, &succs, cost);
  rank_sinks_with_siblings(&g, &preds, &succs, cost, sinks_below, rank);
  Keyed *keyed = amk_xmalloc((n ? n : 1) * sizeof *keyed);
  for (uint32_t t = 0; t < n; t++)
    keyed[t] = (Keyed){rank[t], g.topo_pos[t], t};
  qsort(keyed, n, sizeof *keyed, compare_keyed_desc);
  uint32_t *rank_order = amk_xmalloc((n ? n : 1) * sizeof *rank_order);
  for (uint32_t k = 0; k < n; k++)
    rank_order[k] = keyed[k].task;

  /* Both automatic policies are planned so -stats can compare them. */
  int32_t *rr = amk_xmalloc((n ? n : 1) * sizeof *rr);
  for (uint32_t k = 0; k < n; k++)
    rr[g.topo[k]] = (int32_t)(k % (uint32_t)num_sms);
  ScheduleSummary rr_summary = simulate(&g, &preds, g.topo, rr, cost, num_sms, NULL);
  int32_t *lb = amk_xmalloc((n ? n : 1) * sizeof *lb);
  assign_load_balance(&g, &preds, rank_order, cost, num_sms, lb);
  ScheduleSummary lb_summary = simulate(&g, &preds, rank_order, lb, cost, num_sms, NULL);

  const int32_t *chosen = policy == AMK_SM_ROUND_ROBIN ? rr : policy == AMK_SM_EXPLICIT ? sm : lb;
  const uint32_t *chosen_order = policy == AMK_SM_LOAD_BALANCE ? rank_order : g.topo;
  double *start = amk_xmalloc((n ? n : 1) * sizeof *start);
  ScheduleSummary chosen_summary =
      simulate(&g, &preds, chosen_order, chosen, cost, num_sms, start);

  /* Final list: by predicted start time, ties in the chosen queue order. */
  uint32_t *queue_pos = amk_xmalloc((n ? n : 1) * sizeof *queue_pos);
  for (uint32_t k = 0; k < n; k++)
    queue_pos[chosen_order[k]] = k;
  for (uint32_t t = 0; t < n; t++)
    keyed[t] = (Keyed){start[t], queue_pos[t], t};
  qsort(keyed, n, sizeof *keyed, compare_keyed_asc);
  uint32_t *final_order = amk_xmalloc((n ? n : 1) * sizeof *final_order);
  for (uint32_t k = 0; k < n; k++)
    final_order[k] = keyed[k].task;
  for (uint32_t t = 0; t < n; t++) {
    m->tasks[t].has_sm = true;
    m->tasks[t].sm = chosen[t];
  }
  reorder_tasks(m, final_order);

  if (ctx->stats) {
    double critical = 0;
    for (uint32_t t = 0; t < n; t++)
      if (rank[t] > critical)
        critical = rank[t];
    amk_stat_str(ctx->stats, "sm-assign", "policy", amk_sm_policy_name(policy));
    amk_stat_real(ctx->stats, "sm-assign", "critical path, every hop cross-SM (us)",
                  critical);
    record_stats(ctx, "round_robin", &rr_summary);
    record_stats(ctx, "load_balance", &lb_summary);
    if (policy == AMK_SM_EXPLICIT)
      record_stats(ctx, "explicit", &chosen_summary);
  }
  free(final_order);
  free(queue_pos);
  free(keyed);
  free(rank_order);
  free(rank);
  adjacency_free(&preds);
  adjacency_free(&succs);
  free(start);
  free(lb);
  free(rr);
  free(cost);
  free(sm);
  amk_graph_free(&g);
  return true;
}

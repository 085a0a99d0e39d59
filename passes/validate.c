/* The `validate` pass: a static proof that a schedule cannot deadlock or race.
 *
 * The checks run in the reference's order with its messages, so the first
 * error (the one conformance compares) matches; then the checks the
 * reference lacks (duplicate ids, pages naming missing buffers, shapes and
 * the semantic bounds of validate_bounds.c). There is no task-count cap:
 * every happens-before question is answered on the bipartite task/counter
 * graph, first by a direct-wait test and else by an ancestor search bounded
 * by topological position (validate_graph.c). docs/Validator.md has the rest.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/compare.h"
#include "amk/pass.h"
#include "amk/rope.h"
#include "amk/tables.h"
#include "amk/validate.h"
#include "validate_internal.h"

/* Reusable memory of validation runs (see amk_validator_workspace_new). */
struct AmkValidatorWorkspace {
  AmkScratch scratch;
};

/* Diagnostics about the module as a whole carry no position. */
static const AmkLoc no_loc = {0, 0};

AmkValidateOptions amk_validate_default_options(void) {
  AmkValidateOptions o = {.semantic_bounds = true, .max_errors = 200};
  return o;
}

static const char *op_name(AmkOp op) {
  return (unsigned)op < AMK_OP_COUNT ? amk_op_info(op)->json_name : "?";
}

/* Python's int(...) view of a threshold: INT or BOOL. */
static bool python_int(const AmkValue *v, int64_t *out) {
  if (v->kind == AMK_VALUE_INT) {
    *out = v->as.i;
    return true;
  }
  if (v->kind == AMK_VALUE_BOOL) {
    *out = v->as.b ? 1 : 0;
    return true;
  }
  return false;
}

/* Python's str() of a threshold (same as repr for ints, bools and floats). */
static void value_str(const AmkValue *v, char *buf, size_t size) {
  amk_value_repr(v, buf, size);
}

/* ---- setup -------------------------------------------------------------- */

static void build_buffer_uses(AmkValidator *v) {
  const AmkModule *m = v->m;
  uint32_t nb = m->n_buffers;
  v->wr_off = amk_scratch_calloc(v->scratch, (size_t)nb + 2, sizeof(uint32_t));
  v->use_off = amk_scratch_calloc(v->scratch, (size_t)nb + 2, sizeof(uint32_t));
  v->write_order = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (nb + 1));
  v->n_write_order = 0;
  size_t n_writes = 0, n_uses = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    const AmkTask *task = &m->tasks[t];
    for (uint32_t i = 0; i < task->n_outputs; i++) {
      uint32_t b = amk_id_index_get(&v->bufs, task->outputs[i]);
      if (b == AMK_NO_INDEX)
        continue;
      if (v->wr_off[b + 1]++ == 0)
        v->write_order[v->n_write_order++] = b;
      v->use_off[b + 1]++;
      n_writes++;
      n_uses++;
    }
    for (uint32_t i = 0; i < task->n_inputs; i++) {
      uint32_t b = amk_id_index_get(&v->bufs, task->inputs[i]);
      if (b != AMK_NO_INDEX) {
        v->use_off[b + 1]++;
        n_uses++;
      }
    }
  }
  for (uint32_t b = 0; b < nb; b++) {
    v->wr_off[b + 1] += v->wr_off[b];
    v->use_off[b + 1] += v->use_off[b];
  }
  v->wr = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (n_writes + 1));
  /* Room for any one buffer's writer list (a task may list an output twice). */
  v->scratch_ix = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (n_writes + 1));
  v->use = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (n_uses + 1));
  uint32_t *wfill = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (nb + 1));
  uint32_t *ufill = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (nb + 1));
  memcpy(wfill, v->wr_off, sizeof(uint32_t) * nb);
  memcpy(ufill, v->use_off, sizeof(uint32_t) * nb);
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    const AmkTask *task = &m->tasks[t];
    for (uint32_t i = 0; i < task->n_outputs; i++) {
      uint32_t b = amk_id_index_get(&v->bufs, task->outputs[i]);
      if (b == AMK_NO_INDEX)
        continue;
      v->wr[wfill[b]++] = t;
      v->use[ufill[b]++] = t;
    }
    for (uint32_t i = 0; i < task->n_inputs; i++) {
      uint32_t b = amk_id_index_get(&v->bufs, task->inputs[i]);
      if (b != AMK_NO_INDEX)
        v->use[ufill[b]++] = t;
    }
  }
  /* The one out_counter slot all writers of a buffer share, if any. */
  v->writer_slot = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (nb + 1));
  for (uint32_t b = 0; b < nb; b++) {
    uint32_t slot = AMK_NO_INDEX;
    for (uint32_t i = v->wr_off[b]; i < v->wr_off[b + 1]; i++) {
      uint32_t s = v->g.task_slot[v->wr[i]];
      if (i == v->wr_off[b])
        slot = s;
      else if (s != slot) {
        slot = AMK_NO_INDEX;
        break;
      }
    }
    v->writer_slot[b] = slot;
  }
}

/* Everything lives in the scratch memory: nothing to free one by one. */
static void validator_free(AmkValidator *v) {
  amk_id_index_free(&v->bufs);
  amk_id_index_free(&v->ctrs);
  amk_id_index_free(&v->tasks);
  amk_graph_free(&v->g);
}

/* ---- 0. duplicate ids (the reference has no such check) ------------------ */

/* Reports each record whose id an earlier record already has. Records start
 * with their int32_t id (as the id index reads them); their AmkLoc is at
 * `loc_offset`. */
static void report_duplicate_ids(AmkValidator *v, const AmkIdIndex *ix, const void *records,
                                 size_t stride, size_t loc_offset, uint32_t n, const char *what,
                                 const char *array) {
  if (!ix->n_duplicates)
    return;
  for (uint32_t i = 0; i < n; i++) {
    const char *record = (const char *)records + (size_t)i * stride;
    int32_t id;
    AmkLoc loc;
    memcpy(&id, record, sizeof id);
    memcpy(&loc, record + loc_offset, sizeof loc);
    uint32_t first = amk_id_index_get(ix, id);
    if (first != i)
      amk_validator_report(v, AMK_SEVERITY_ERROR, loc,
                           "duplicate %s id %" PRId32 " (%s[%u] and %s[%u])", what, id, array,
                           first, array, i);
  }
}

static void check_duplicate_ids(AmkValidator *v) {
  const AmkModule *m = v->m;
  report_duplicate_ids(v, &v->tasks, m->tasks, sizeof *m->tasks, offsetof(AmkTask, loc),
                       m->n_tasks, "task", "tasks");
  report_duplicate_ids(v, &v->bufs, m->buffers, sizeof *m->buffers, offsetof(AmkBuffer, loc),
                       m->n_buffers, "buffer", "buffers");
  report_duplicate_ids(v, &v->ctrs, m->counters, sizeof *m->counters,
                       offsetof(AmkCounter, loc), m->n_counters, "counter", "counters");
}

/* ---- 1. per-task structure ---------------------------------------------- */

static const char *const param_names[AMK_PARAM_COUNT] = {
#define X(name, type) #name,
    AMK_PARAMS(X)
#undef X
};
static const char param_types[AMK_PARAM_COUNT] = {
#define X(name, type) type,
    AMK_PARAMS(X)
#undef X
};

/* `key` is `name` (a short string compare after the first character). */
static int param_is(const char *key, const char *name, int field) {
  size_t i = 1;
  while (name[i] && key[i] == name[i])
    i++;
  return key[i] == name[i] ? field : -1;
}

int amk_validator_param_field(const char *key) {
  if (!key)
    return -1;
  switch (key[0]) {
  case 'K':
    return param_is(key, "K", AMK_PARAM_K);
  case 'N':
    return key[1] ? param_is(key, "N_tile", AMK_PARAM_N_tile) : AMK_PARAM_N;
  case 'M':
    return key[1] ? param_is(key, "M_tile", AMK_PARAM_M_tile) : AMK_PARAM_M;
  case 'n':
    if (key[1] != '_')
      return -1;
    return key[2] == 'o'   ? param_is(key, "n_off", AMK_PARAM_n_off)
           : key[2] == 'h' ? param_is(key, "n_heads", AMK_PARAM_n_heads)
                           : param_is(key, "n_kv_heads", AMK_PARAM_n_kv_heads);
  case 'm':
    return param_is(key, "m_off", AMK_PARAM_m_off);
  case 'h':
    return key[1] == 'i' ? param_is(key, "hidden", AMK_PARAM_hidden)
                         : param_is(key, "head_dim", AMK_PARAM_head_dim);
  case 'v':
    return param_is(key, "vocab", AMK_PARAM_vocab);
  case 'k':
    if (!key[1] || !key[2])
      return -1;
    return key[3] == 's' ? param_is(key, "kv_start", AMK_PARAM_kv_start)
                         : param_is(key, "kv_len", AMK_PARAM_kv_len);
  case 'p':
    return param_is(key, "pos", AMK_PARAM_pos);
  case 'q':
    return param_is(key, "qdtype", AMK_PARAM_qdtype);
  case 'f':
    return param_is(key, "flags", AMK_PARAM_flags);
  case 'g':
    return param_is(key, "group", AMK_PARAM_group);
  case 'd':
    return param_is(key, "dim", AMK_PARAM_dim);
  case 'e':
    return param_is(key, "eps", AMK_PARAM_eps);
  case 's':
    return param_is(key, "scale", AMK_PARAM_scale);
  case 't':
    return param_is(key, "theta", AMK_PARAM_theta);
  default:
    return -1;
  }
}

/* The field of every param of every task, looked up once per run. */
static void build_param_fields(AmkValidator *v) {
  const AmkModule *m = v->m;
  v->pfield_off = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (m->n_tasks + 1));
  size_t total = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++)
    total += m->tasks[t].n_params;
  v->pfield = amk_scratch_alloc(v->scratch, total + 1);
  size_t k = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    v->pfield_off[t] = (uint32_t)k;
    const AmkTask *task = &m->tasks[t];
    for (uint32_t i = 0; i < task->n_params; i++) {
      int f = amk_validator_param_field(task->params[i].key);
      v->pfield[k++] = f < 0 ? UINT8_MAX : (uint8_t)f;
    }
  }
  v->pfield_off[m->n_tasks] = (uint32_t)k;
}

/* A ROPE task's Llama-3 scaling params (include/amk/rope.h) do not
 * marshal either, but they are not lost: the plan turns them into the
 * task's frequency table. The reference warns for them as for any other
 * key; here that was one warning per key per ROPE task (200 for a 1B
 * prefill program), all for a program doing what it should. */
static bool host_side_param(const AmkTask *t, const char *key) {
  return t->op == AMK_OP_ROPE &&
         (strcmp(key, AMK_ROPE_PARAM_FACTOR) == 0 ||
          strcmp(key, AMK_ROPE_PARAM_LOW_FREQ_FACTOR) == 0 ||
          strcmp(key, AMK_ROPE_PARAM_HIGH_FREQ_FACTOR) == 0 ||
          strcmp(key, AMK_ROPE_PARAM_ORIGINAL_MAX_POS) == 0);
}

static void check_params(AmkValidator *v, const AmkTask *t) {
  char repr[160];
  const uint8_t *fields = &v->pfield[v->pfield_off[t - v->m->tasks]];
  for (uint32_t i = 0; i < t->n_params; i++) {
    const AmkParam *p = &t->params[i];
    const char *key = p->key ? p->key : "";
    int field = fields[i] == UINT8_MAX ? -1 : fields[i];
    if (field < 0 && host_side_param(t, key))
      continue;
    if (field < 0) {
      amk_validator_report(v, AMK_SEVERITY_WARNING, t->loc,
                           "task %" PRId32 " (%s) param '%s' is not a known "
                           "amk_params_t field (will not marshal to the device)",
                           t->id, op_name(t->op), key);
      continue;
    }
    if (param_types[field] == 'i') {
      int64_t x;
      if (!amk_validator_int(&p->value, &x) || x < INT32_MIN || x > INT32_MAX) {
        amk_value_repr(&p->value, repr, sizeof repr);
        amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                             "task %" PRId32 " param '%s'=%s must be an int32",
                             t->id, key, repr);
      }
    } else {
      double x;
      if (!amk_value_as_real(&p->value, &x)) {
        amk_value_repr(&p->value, repr, sizeof repr);
        amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                             "task %" PRId32
                             " param '%s'=%s must be a real number",
                             t->id, key, repr);
      }
    }
  }
}

/* Missing required params are reported in the order the reference's op
 * registry lists them (one order consistent with every op), so the first
 * error matches; the rest follow in table order. */
static const AmkParamField required_param_order[AMK_PARAM_COUNT] = {
    AMK_PARAM_M_tile,  AMK_PARAM_K,        AMK_PARAM_N_tile,
    AMK_PARAM_n_off,   AMK_PARAM_head_dim, AMK_PARAM_kv_start,
    AMK_PARAM_kv_len,  AMK_PARAM_scale,    AMK_PARAM_n_heads,
    AMK_PARAM_n_kv_heads, AMK_PARAM_eps,   AMK_PARAM_hidden,
    AMK_PARAM_theta,   AMK_PARAM_pos,      AMK_PARAM_qdtype,
    AMK_PARAM_group,   AMK_PARAM_N,        AMK_PARAM_M,
    AMK_PARAM_m_off,   AMK_PARAM_vocab,    AMK_PARAM_flags,
    AMK_PARAM_dim,
};
#define AMK_ALL_PARAM_BITS ((1u << AMK_PARAM_COUNT) - 1)
_Static_assert(AMK_PARAM_COUNT == 22,
               "list a new param in required_param_order");

static void check_task_structure(AmkValidator *v, const AmkTask *t) {
  const AmkModule *m = v->m;
  uint32_t present = 0;
  {
    const uint8_t *field = &v->pfield[v->pfield_off[t - m->tasks]];
    for (uint32_t i = 0; i < t->n_params; i++)
      if (field[i] != UINT8_MAX)
        present |= 1u << field[i];
  }
  const char *label = amk_validator_label(t);
  char repr[160];
  for (uint32_t i = 0; i < t->n_inputs; i++)
    if (amk_id_index_get(&v->bufs, t->inputs[i]) == AMK_NO_INDEX)
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " (%s) reads missing buffer %" PRId32,
                           t->id, label, t->inputs[i]);
  for (uint32_t i = 0; i < t->n_outputs; i++)
    if (amk_id_index_get(&v->bufs, t->outputs[i]) == AMK_NO_INDEX)
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " (%s) writes missing buffer %" PRId32,
                           t->id, label, t->outputs[i]);
  if (amk_id_index_get(&v->ctrs, t->out_counter) == AMK_NO_INDEX)
    amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                         "task %" PRId32 " (%s) increments missing counter %" PRId32,
                         t->id, label, t->out_counter);
  if (t->n_inputs > AMK_MAX_INPUTS)
    amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                         "task %" PRId32 " has %u inputs > ABI_MAX_INPUTS=%d",
                         t->id, t->n_inputs, AMK_MAX_INPUTS);
  if (t->n_outputs > AMK_MAX_OUTPUTS)
    amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                         "task %" PRId32 " has %u outputs > ABI_MAX_OUTPUTS=%d",
                         t->id, t->n_outputs, AMK_MAX_OUTPUTS);
  if (t->n_waits > AMK_MAX_WAITS)
    amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                         "task %" PRId32 " has %u waits > ABI_MAX_WAITS=%d",
                         t->id, t->n_waits, AMK_MAX_WAITS);
  for (uint32_t i = 0; i < t->n_inputs + t->n_outputs; i++) {
    int32_t id = i < t->n_inputs ? t->inputs[i] : t->outputs[i - t->n_inputs];
    uint32_t b = amk_id_index_get(&v->bufs, id);
    if (b != AMK_NO_INDEX && m->buffers[b].rank > AMK_MAX_RANK)
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " buffer %" PRId32
                           " rank %u > ABI_MAX_RANK=%d",
                           t->id, id, m->buffers[b].rank, AMK_MAX_RANK);
  }
  for (uint32_t i = 0; i < t->n_waits; i++) {
    const AmkWait *w = &t->waits[i];
    if (amk_id_index_get(&v->ctrs, w->counter) == AMK_NO_INDEX)
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " (%s) waits on missing counter %" PRId32,
                           t->id, label, w->counter);
    int64_t thr;
    if (!amk_validator_int(&w->threshold, &thr) || thr < 1) {
      value_str(&w->threshold, repr, sizeof repr);
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " (%s) threshold %s on counter %" PRId32
                           " is not a positive static int",
                           t->id, label, repr, w->counter);
    }
  }
  for (uint32_t i = 0; i < t->n_waits; i++)
    if (t->waits[i].counter == t->out_counter)
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " (%s) waits on its OWN out_counter "
                           "%" PRId32 ", self-deadlock",
                           t->id, label, t->out_counter);
  if ((unsigned)t->op >= AMK_OP_COUNT) {
    amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                         "task %" PRId32 " uses unregistered opcode %d", t->id,
                         (int)t->op);
  } else {
    const AmkOpInfo *info = amk_op_info(t->op);
    int max_inputs = amk_validator_max_inputs(v, (uint32_t)(t - m->tasks));
    if ((int64_t)t->n_inputs < info->min_inputs ||
        (max_inputs != -1 && (int64_t)t->n_inputs > max_inputs))
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " (%s) arity: %u inputs, expected "
                           "[%d,%d]",
                           t->id, info->json_name, t->n_inputs,
                           info->min_inputs, max_inputs);
    if (info->n_outputs != -1 && (int64_t)t->n_outputs != info->n_outputs)
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " (%s) expected %d outputs, got %u",
                           t->id, info->json_name, info->n_outputs,
                           t->n_outputs);
    for (int k = 0; k < AMK_PARAM_COUNT &&
                    (info->required_params & ~present & AMK_ALL_PARAM_BITS);
         k++) {
      AmkParamField f = required_param_order[k];
      if ((info->required_params & ~present & (1u << f)))
        amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                             "task %" PRId32 " (%s) missing required param '%s'",
                             t->id, info->json_name, param_names[f]);
    }
    if ((info->required_params & AMK_REQ_RECIPE) &&
        !amk_task_param(t, "recipe"))
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " (%s) missing required param "
                           "'recipe'",
                           t->id, info->json_name);
  }
  check_params(v, t);
}

/* ---- 2. wait satisfiability and the all-join rule ------------------------ */

static void check_wait_satisfiability(AmkValidator *v, const AmkTask *t) {
  const char *label = amk_validator_label(t);
  char repr[64];
  for (uint32_t i = 0; i < t->n_waits; i++) {
    const AmkWait *w = &t->waits[i];
    uint32_t np = amk_graph_producer_count(
        &v->g, amk_graph_counter_slot(&v->g, w->counter));
    int64_t thr;
    if (np == 0) {
      amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                           "task %" PRId32 " (%s) waits on counter %" PRId32
                           " with NO producer, unsatisfiable (deadlock)",
                           t->id, label, w->counter);
    } else if (python_int(&w->threshold, &thr)) {
      if (thr > (int64_t)np || (np > 1 && thr != (int64_t)np))
        value_str(&w->threshold, repr, sizeof repr);
      if (thr > (int64_t)np)
        amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                             "task %" PRId32 " (%s) threshold %s > %u "
                             "producers of counter %" PRId32
                             ", unsatisfiable (deadlock)",
                             t->id, label, repr, np, w->counter);
      else if (np > 1 && thr != (int64_t)np)
        amk_validator_report(
            v, AMK_SEVERITY_ERROR, t->loc,
            "task %" PRId32 " (%s) partial wait threshold %s on shared counter "
            "%" PRId32 " (%u producers), ambiguous which-producer RACE; a "
            "shared counter must be an all-join (threshold == %u)",
            t->id, label, repr, w->counter, np, np);
    }
  }
}

/* ---- 4. read provenance ------------------------------------------------- */

/* Ancestors of `t` are marked down to topological position `min_pos`; a
 * later query needing a lower bound re-marks. */
typedef struct {
  uint32_t task, min_pos;
  uint32_t generation;
} AncestorMarks;

static bool writer_is_ancestor(AmkValidator *v, AncestorMarks *marks,
                               uint32_t t, uint32_t w) {
  AmkTaskGraph *g = &v->g;
  if (g->topo_pos[w] >= g->topo_pos[t])
    return false;
  if (amk_graph_waits_on_slot(g, t, g->task_slot[w]))
    return true;
  if (marks->task != t || marks->generation != g->generation ||
      g->topo_pos[w] < marks->min_pos) {
    amk_graph_mark_ancestors(g, t, g->topo_pos[w]);
    marks->task = t;
    marks->min_pos = g->topo_pos[w];
    marks->generation = g->generation;
  }
  return amk_graph_is_marked(g, w);
}

static void check_provenance(AmkValidator *v) {
  const AmkModule *m = v->m;
  AmkTaskGraph *g = &v->g;
  AncestorMarks marks = {AMK_NO_INDEX, 0, 0};
  char list[512];
  for (uint32_t k = 0; k < g->n_tasks && !v->stopped; k++) {
    uint32_t t = g->topo[k];
    const AmkTask *task = &m->tasks[t];
    for (uint32_t i = 0; i < task->n_inputs; i++) {
      uint32_t b = amk_id_index_get(&v->bufs, task->inputs[i]);
      if (b == AMK_NO_INDEX)
        continue;
      const AmkBuffer *buf = &m->buffers[b];
      if ((unsigned)buf->kind < AMK_KIND_COUNT &&
          amk_kind_is_read_only(buf->kind))
        continue;
      /* A KV_APPEND with a row window updates its cache in place (checked
       * in the bounds checks) without reading it: its sibling windows may
       * write other rows meanwhile. */
      if (task->op == AMK_OP_KV_APPEND && i == 1 && task->n_outputs == 1 &&
          task->outputs[0] == task->inputs[1] &&
          amk_validator_row_window(v, t).kind == AMK_ROW_WINDOW_OK)
        continue;
      uint32_t n_writers = v->wr_off[b + 1] - v->wr_off[b];
      bool kv = buf->kind == AMK_KIND_KV_CACHE;
      if (kv && n_writers == 0)
        continue; /* prior-step state */
      if (n_writers == 0) {
        amk_validator_report(v, AMK_SEVERITY_ERROR, task->loc,
                             "task %" PRId32 " (%s) reads buffer #%" PRId32
                             " ('%s') that is never produced",
                             task->id, amk_validator_label(task), buf->id,
                             buf->name ? buf->name : "");
        continue;
      }
      /* Fast path: every writer signals one counter that t waits on. */
      if (v->writer_slot[b] != AMK_NO_INDEX &&
          v->writer_slot[b] != g->task_slot[t] &&
          amk_graph_waits_on_slot(g, t, v->writer_slot[b]))
        continue;
      size_t n_missing = 0, n_others = 0;
      bool self_writes = false;
      for (uint32_t j = v->wr_off[b]; j < v->wr_off[b + 1]; j++) {
        uint32_t w = v->wr[j];
        if (w == t) {
          self_writes = true;
          continue;
        }
        n_others++;
        /* An attention_rope tile taking row pos from qkv reads the cache
         * below it, rows its rope_kv task does not write (docs/Validator.md). */
        if (kv && amk_validator_read_misses_writer(v, t, i, b, w))
          continue;
        if (!writer_is_ancestor(v, &marks, t, w))
          v->scratch_ix[n_missing++] = w;
      }
      if (n_missing) {
        amk_validator_format_task_ids(m, v->scratch_ix, n_missing, list, sizeof list);
        amk_validator_report(v, AMK_SEVERITY_ERROR, task->loc,
                             "task %" PRId32 " (%s) reads %s #%" PRId32
                             " ('%s') but writer task(s) %s are NOT ordered "
                             "before it, data RACE",
                             task->id, amk_validator_label(task),
                             kv ? "KV cache" : "buffer", buf->id,
                             buf->name ? buf->name : "", list);
      } else if (n_others == 0 && self_writes && !kv) {
        amk_validator_report(v, AMK_SEVERITY_WARNING, task->loc,
                             "task %" PRId32 " (%s) reads buffer #%" PRId32
                             " ('%s') in place with no external producer "
                             "(reads its own uninitialized output?)",
                             task->id, amk_validator_label(task), buf->id,
                             buf->name ? buf->name : "");
      }
    }
  }
}

/* ---- 4a. multi-writer write-after-write ---------------------------------- */

typedef struct {
  bool whole; /* writes the whole buffer */
  bool all_rows;
  int64_t row_lo, row_hi, col_lo, col_hi;
  /* A KV_APPEND window: its pos param, -1 for any other writer. The step's
   * position may replace pos at run time, moving every KV_APPEND's rows
   * together: only windows of one pos are compared. */
  int64_t kv_pos;
} Region;

static bool nonneg_int_param(const AmkParamTable *pt, AmkParamField f,
                             bool positive, int64_t *out) {
  const AmkValue *p = pt->v[f];
  int64_t x;
  if (!p || !amk_validator_int(p, &x) || x < 0 || (positive && x == 0))
    return false;
  *out = x;
  return true;
}

static int64_t saturating_add(int64_t a, int64_t b) {
  return a > INT64_MAX - b ? INT64_MAX : a + b; /* a, b >= 0 here */
}

/* Whether `op` may write only a tile of its output (the columns
 * [n_off, n_off + N_tile), for GEMM also rows [m_off, m_off + M_tile)), so
 * that several writers of one buffer can be disjoint. The per-row ops'
 * row windows (amk_validator_row_window) are taken before this. Every op is listed:
 * a new op fails to compile here until its footprint is decided. The
 * elementwise ops take a column window (their N_tile, inst_columns). */
static bool op_writes_tile(AmkOp op) {
  switch (op) {
  case AMK_OP_GEMV_TILE:
  case AMK_OP_GEMM_TILE:
  case AMK_OP_SILU_MUL:
  case AMK_OP_GELU:
  case AMK_OP_ADD:
  case AMK_OP_MUL:
  case AMK_OP_ATTENTION_TILE: /* with n_off/N_tile or m_off/M_tile */
    return true;
  case AMK_OP_NOP:
  case AMK_OP_COPY:
  case AMK_OP_EMBED:
  case AMK_OP_RMSNORM:
  case AMK_OP_LAYERNORM:
  case AMK_OP_ROPE:
  case AMK_OP_DEQUANT:
  case AMK_OP_SOFTMAX:
  case AMK_OP_ALLREDUCE_SHARD:
  case AMK_OP_KV_APPEND:
  case AMK_OP_SAMPLE_ARGMAX:
  case AMK_OP_ATTENTION_COMBINE:
  case AMK_OP_FUSED:
  case AMK_OP_COUNT:
    return false; /* the whole output, as the reference treats them */
  }
  return false;
}

static Region write_region(const AmkValidator *v, uint32_t task) {
  const AmkTask *t = &v->m->tasks[task];
  Region r = {.whole = true, .kv_pos = -1};
  AmkRowWindow window = amk_validator_row_window(v, task);
  if (window.kind == AMK_ROW_WINDOW_OK) {
    /* Elements [lo, hi) of the output as [rows, width]: exact within one
     * row, else every row it touches (never less than is written). */
    int64_t w = window.out_width, lo = window.lo, hi = window.hi;
    r.whole = false;
    r.kv_pos = window.kv_pos;
    r.row_lo = lo / w;
    r.row_hi = (hi + w - 1) / w;
    bool one_row = r.row_hi == r.row_lo + 1;
    r.col_lo = one_row ? lo % w : 0;
    r.col_hi = one_row ? (hi - 1) % w + 1 : w;
    return r;
  }
  if (!op_writes_tile(t->op))
    return r;
  if (t->op == AMK_OP_ATTENTION_TILE) {
    /* Query rows x the query heads' columns of [rows, n_heads*head_dim]. */
    uint32_t b = t->n_outputs ? amk_id_index_get(&v->bufs, t->outputs[0]) : AMK_NO_INDEX;
    const AmkBuffer *out = b == AMK_NO_INDEX ? NULL : &v->m->buffers[b];
    int64_t width = 0, numel = 1, d;
    for (uint32_t i = 0; out && i < out->rank; i++) {
      if (!amk_validator_int(&out->shape[i], &d) || d < 1 || d > INT32_MAX ||
          numel > INT32_MAX)
        return r;
      numel *= d;
      width = d;
    }
    if (!out || out->rank == 0 ||
        !amk_validator_attention_rect(v, task, numel / width, width, &r.row_lo, &r.row_hi,
                                      &r.col_lo, &r.col_hi))
      return r;
    r.whole = false;
    r.all_rows = false;
    return r;
  }
  /* The four footprint params (the last occurrence of a key wins). */
  AmkParamTable pt;
  pt.v[AMK_PARAM_n_off] = pt.v[AMK_PARAM_N_tile] = NULL;
  pt.v[AMK_PARAM_m_off] = pt.v[AMK_PARAM_M_tile] = NULL;
  const uint8_t *field = &v->pfield[v->pfield_off[task]];
  for (uint32_t i = 0; i < t->n_params; i++)
    if (field[i] == AMK_PARAM_n_off || field[i] == AMK_PARAM_N_tile ||
        field[i] == AMK_PARAM_m_off || field[i] == AMK_PARAM_M_tile)
      pt.v[field[i]] = &t->params[i].value;
  int64_t n_off, n_tile;
  if (!nonneg_int_param(&pt, AMK_PARAM_n_off, false, &n_off) ||
      !nonneg_int_param(&pt, AMK_PARAM_N_tile, true, &n_tile))
    return r;
  r.whole = false;
  r.col_lo = n_off;
  r.col_hi = saturating_add(n_off, n_tile);
  r.all_rows = true;
  int64_t m_off, m_tile;
  if (t->op == AMK_OP_GEMM_TILE &&
      nonneg_int_param(&pt, AMK_PARAM_m_off, false, &m_off) &&
      nonneg_int_param(&pt, AMK_PARAM_M_tile, true, &m_tile)) {
    r.all_rows = false;
    r.row_lo = m_off;
    r.row_hi = saturating_add(m_off, m_tile);
  }
  return r;
}

static bool regions_disjoint(const Region *a, const Region *b) {
  if (a->whole || b->whole || a->kv_pos != b->kv_pos)
    return false;
  bool rows_overlap = a->all_rows || b->all_rows ||
                      (a->row_lo < b->row_hi && b->row_lo < a->row_hi);
  bool cols_overlap = a->col_lo < b->col_hi && b->col_lo < a->col_hi;
  return !rows_overlap || !cols_overlap;
}

static int compare_region_cols(const void *pa, const void *pb) {
  const Region *a = pa, *b = pb;
  return amk_compare_i64(a->col_lo, b->col_lo);
}

/* Pairwise disjointness of k footprints: sort-and-sweep when every writer
 * spans all rows (GEMV), exact pairwise up to a bound for GEMM rectangles,
 * conservatively "not disjoint" beyond it. */
enum { PAIRWISE_LIMIT = 4096 };
static bool all_regions_disjoint(Region *r, size_t k) {
  bool all_rows = true;
  for (size_t i = 0; i < k; i++) {
    if (r[i].whole)
      return false;
    all_rows = all_rows && r[i].all_rows;
  }
  if (all_rows) {
    qsort(r, k, sizeof *r, compare_region_cols);
    for (size_t i = 0; i + 1 < k; i++)
      if (r[i].col_hi > r[i + 1].col_lo)
        return false;
    return true;
  }
  if (k > PAIRWISE_LIMIT)
    return false;
  for (size_t i = 0; i < k; i++)
    for (size_t j = i + 1; j < k; j++)
      if (!regions_disjoint(&r[i], &r[j]))
        return false;
  return true;
}

static int compare_by_topo(const void *pa, const void *pb, const uint32_t *pos) {
  return amk_compare_i64(pos[*(const uint32_t *)pa], pos[*(const uint32_t *)pb]);
}

/* qsort has no context argument: a small insertion-free merge sort. */
static void sort_by_topo(uint32_t *a, uint32_t *tmp, size_t n,
                         const uint32_t *pos) {
  if (n < 2)
    return;
  size_t h = n / 2;
  sort_by_topo(a, tmp, h, pos);
  sort_by_topo(a + h, tmp, n - h, pos);
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n)
    tmp[k++] = compare_by_topo(&a[j], &a[i], pos) < 0 ? a[j++] : a[i++];
  while (i < h)
    tmp[k++] = a[i++];
  while (j < n)
    tmp[k++] = a[j++];
  memcpy(a, tmp, n * sizeof *a);
}

/* The first accumulating tile (mlp, attention_o) among buffer b's writers,
 * or AMK_NO_INDEX: b is then an accumulator. */
static uint32_t first_accumulating_writer(const AmkValidator *v, uint32_t b) {
  for (uint32_t j = v->wr_off[b]; j < v->wr_off[b + 1]; j++)
    if (amk_validator_is_accumulating_tile(v, v->wr[j]))
      return v->wr[j];
  return AMK_NO_INDEX;
}

/* "[a, b)" of an accumulating tile's column range (intermediate columns
 * of mlp, attention columns of attention_o), or a note that the params
 * name none (reported by the bounds checks). */
static void format_columns(const Region *r, char *buf, size_t size) {
  if (r->whole)
    snprintf(buf, size, "(no valid n_off/N_tile: all)");
  else
    snprintf(buf, size, "[%" PRId64 ", %" PRId64 ")", r->col_lo, r->col_hi);
}

/* An accumulating tile's columns (its write_region: n_off / N_tile). */
typedef struct {
  Region r;
  uint32_t task;
} TileColumns;

/* Tiles without valid columns (whole) first: they overlap everything. */
static int compare_tile_columns(const void *pa, const void *pb) {
  const TileColumns *a = pa, *b = pb;
  if (a->r.whole != b->r.whole)
    return a->r.whole ? -1 : 1;
  return amk_compare_i64_then(a->r.col_lo, b->r.col_lo, a->task, b->task);
}

/* An accumulator: a buffer an accumulating tile (mlp, attention_o; a
 * GEMV_TILE whose pattern amk_gemv_pattern_accumulates) writes, adding to
 * it. The additions commute, so its tiles may run in any order and overlap
 * in the elements they touch, provided that
 *   - every writer is an accumulating tile: a store from any other task,
 *     ordered or not, would race with or wipe the sums (the engine zeroes
 *     the buffer before the step, not before that store);
 *   - all of them are of one pattern: their n_off / N_tile count different
 *     columns (mlp: the intermediate's, attention_o: the attention
 *     output's), so the disjointness and coverage below compare like with
 *     like, and each pattern's tile at n_off 0 adds the residual x;
 *   - all of them signal one counter, so that one all-join (threshold = the
 *     number of tiles, check 2) orders every reader after every addition;
 *   - their columns [n_off, n_off + N_tile) are disjoint: a column two
 *     tiles add is counted twice (coverage, check 10, asks that they cover
 *     [0, I), I the rows of the pattern's transposed weight).
 * A read that is not ordered after every tile is a RACE of check 4 as for
 * any buffer. Reports the first violation. */
static void check_accumulator_writers(AmkValidator *v, uint32_t b, uint32_t first) {
  const AmkModule *m = v->m;
  const AmkBuffer *buf = &m->buffers[b];
  const char *name = buf->name ? buf->name : "";
  const uint32_t *ws = &v->wr[v->wr_off[b]];
  size_t k = v->wr_off[b + 1] - v->wr_off[b];
  const AmkTask *tm = &m->tasks[first];
  int64_t pattern = amk_validator_accumulating_pattern(v, first);
  const char *pname = amk_gemv_pattern_name(pattern);
  const AmkAccumulatorInfo *info = amk_validator_accumulator_info(pattern);
  const char *columns = info ? info->columns : "columns";
  for (size_t i = 0; i < k; i++) {
    int64_t p = amk_validator_accumulating_pattern(v, ws[i]);
    if (p == pattern)
      continue;
    const AmkTask *to = &m->tasks[ws[i]];
    if (p >= 0)
      amk_validator_report(
          v, AMK_SEVERITY_ERROR, to->loc,
          "multi-writer WAW race on accumulator #%" PRId32 " ('%s'): %s tile %" PRId32
          " ('%s') and %s tile %" PRId32 " ('%s') both add to it; an accumulator's tiles must "
          "all be of one pattern (their n_off/N_tile count different columns, and each "
          "pattern's tile at n_off 0 adds the residual), write-after-write RACE",
          buf->id, name, pname, tm->id, amk_validator_label(tm), amk_gemv_pattern_name(p),
          to->id, amk_validator_label(to));
    else
      amk_validator_report(
          v, AMK_SEVERITY_ERROR, to->loc,
          "multi-writer WAW race on accumulator #%" PRId32 " ('%s'): %s tile %" PRId32
          " ('%s') adds to it, but task %" PRId32 " ('%s', %s) writes it too; only %s tiles "
          "may write an accumulator, write-after-write RACE",
          buf->id, name, pname, tm->id, amk_validator_label(tm), to->id,
          amk_validator_label(to), op_name(to->op), pname);
    return;
  }
  if (v->writer_slot[b] == AMK_NO_INDEX) {
    const AmkTask *t0 = &m->tasks[ws[0]];
    for (size_t i = 1; i < k; i++) {
      const AmkTask *ti = &m->tasks[ws[i]];
      if (ti->out_counter == t0->out_counter)
        continue;
      amk_validator_report(
          v, AMK_SEVERITY_ERROR, ti->loc,
          "multi-writer WAW race on accumulator #%" PRId32 " ('%s'): %s tiles %" PRId32
          " ('%s') and %" PRId32 " ('%s') signal different counters (%" PRId32 " and %" PRId32
          "); an accumulator's tiles must all signal one counter, whose all-join orders its "
          "readers after every addition, write-after-write RACE",
          buf->id, name, pname, t0->id, amk_validator_label(t0), ti->id,
          amk_validator_label(ti), t0->out_counter, ti->out_counter);
      return;
    }
    return; /* one counter id after all (not resolved: reported in check 1) */
  }
  /* Sorted by first column, a tile overlaps an earlier one exactly when it
   * starts before the furthest end so far (O(k log k) for k tiles). */
  TileColumns *cols = amk_scratch_alloc(v->scratch, sizeof *cols * k);
  for (size_t i = 0; i < k; i++)
    cols[i] = (TileColumns){write_region(v, ws[i]), ws[i]};
  qsort(cols, k, sizeof *cols, compare_tile_columns);
  size_t furthest = 0;
  for (size_t i = 1; i < k; i++) {
    const Region *a = &cols[furthest].r, *r = &cols[i].r;
    if (!a->whole && !r->whole && r->col_lo >= a->col_hi) {
      if (r->col_hi > a->col_hi)
        furthest = i;
      continue;
    }
    const AmkTask *ti = &m->tasks[cols[furthest].task], *tj = &m->tasks[cols[i].task];
    char ci[64], cj[64];
    format_columns(a, ci, sizeof ci);
    format_columns(r, cj, sizeof cj);
    amk_validator_report(
        v, AMK_SEVERITY_ERROR, tj->loc,
        "%s tiles %" PRId32 " ('%s') and %" PRId32 " ('%s') add overlapping %s %s and %s "
        "into accumulator #%" PRId32 " ('%s'): the overlap is summed twice",
        pname, ti->id, amk_validator_label(ti), tj->id, amk_validator_label(tj), columns, ci,
        cj, buf->id, name);
    return;
  }
}

enum { CULPRIT_QUERY_LIMIT = 1 << 16 };
static void check_write_after_write(AmkValidator *v) {
  const AmkModule *m = v->m;
  AmkTaskGraph *g = &v->g;
  for (uint32_t o = 0; o < v->n_write_order && !v->stopped; o++) {
    uint32_t b = v->write_order[o];
    const uint32_t *ws = &v->wr[v->wr_off[b]];
    size_t k = v->wr_off[b + 1] - v->wr_off[b];
    const AmkBuffer *buf = &m->buffers[b];
    if (k < 2 || ((unsigned)buf->kind < AMK_KIND_COUNT &&
                  amk_kind_is_read_only(buf->kind)))
      continue;
    uint32_t acc = first_accumulating_writer(v, b);
    if (acc != AMK_NO_INDEX) {
      check_accumulator_writers(v, b, acc);
      continue;
    }
    bool one_counter = v->writer_slot[b] != AMK_NO_INDEX;
    if (one_counter) {
      Region *regions = amk_scratch_alloc(v->scratch, sizeof *regions * k);
      for (size_t i = 0; i < k; i++)
        regions[i] = write_region(v, ws[i]);
      bool disjoint = all_regions_disjoint(regions, k);
      if (disjoint)
        continue;
    }
    /* A total happens-before order of the writers: sorted by topological
     * position, each must precede the next (a repeated writer never does). */
    uint32_t *sorted = amk_scratch_alloc(v->scratch, sizeof *sorted * k * 2);
    memcpy(sorted, ws, sizeof *sorted * k);
    sort_by_topo(sorted, sorted + k, k, g->topo_pos);
    bool total = true;
    for (size_t i = 0; i + 1 < k && total; i++)
      total = amk_graph_before(g, sorted[i], sorted[i + 1]);
    if (total)
      continue;
    uint32_t c0 = ws[0], c1 = ws[1];
    size_t queries = 0;
    bool found = false;
    for (size_t i = 0; i < k && !found && queries < CULPRIT_QUERY_LIMIT; i++) {
      Region ri = write_region(v, ws[i]);
      for (size_t j = i + 1; j < k && queries < CULPRIT_QUERY_LIMIT; j++) {
        Region rj = write_region(v, ws[j]);
        queries++;
        if (!regions_disjoint(&ri, &rj) && !amk_graph_before(g, ws[i], ws[j]) &&
            !amk_graph_before(g, ws[j], ws[i])) {
          c0 = ws[i];
          c1 = ws[j];
          found = true;
          break;
        }
      }
    }
    const AmkTask *ti = &m->tasks[c0], *tj = &m->tasks[c1];
    amk_validator_report(
        v, AMK_SEVERITY_ERROR, tj->loc,
        "multi-writer WAW race on buffer #%" PRId32 " ('%s'): writers %" PRId32
        " ('%s') and %" PRId32 " ('%s') %sneither is ordered happens-before "
        "the other, write-after-write RACE",
        buf->id, buf->name ? buf->name : "", ti->id, amk_validator_label(ti),
        tj->id, amk_validator_label(tj),
        one_counter ? "share a counter but their tiles OVERLAP; "
                    : "share no counter; ");
  }
}

/* ---- 5. on-chip buffers stay on one SM ----------------------------------- */

static int compare_i32(const void *pa, const void *pb) {
  return amk_compare_i64(*(const int32_t *)pa, *(const int32_t *)pb);
}

static int32_t sm_at(const void *ctx, size_t i) { return ((const int32_t *)ctx)[i]; }

static void check_on_chip(AmkValidator *v) {
  const AmkModule *m = v->m;
  for (uint32_t b = 0; b < m->n_buffers && !v->stopped; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    if ((unsigned)buf->space >= AMK_SPACE_COUNT ||
        !amk_space_is_on_chip(buf->space))
      continue;
    if (amk_id_index_get(&v->bufs, buf->id) != b)
      continue; /* a duplicate id, reported already */
    uint32_t n_uses = v->use_off[b + 1] - v->use_off[b];
    if (n_uses == 0)
      continue;
    int32_t *sms = amk_scratch_alloc(v->scratch, sizeof *sms * n_uses);
    size_t n_sms = 0;
    for (uint32_t i = v->use_off[b]; i < v->use_off[b + 1]; i++) {
      const AmkTask *t = &m->tasks[v->use[i]];
      if (t->has_sm)
        sms[n_sms++] = t->sm;
    }
    qsort(sms, n_sms, sizeof *sms, compare_i32);
    size_t distinct = 0;
    for (size_t i = 0; i < n_sms; i++)
      if (i == 0 || sms[i] != sms[distinct - 1])
        sms[distinct++] = sms[i];
    if (distinct > 1) {
      char list[256];
      amk_validator_format_list(distinct, sm_at, sms, list, sizeof list);
      amk_validator_report(v, AMK_SEVERITY_ERROR, buf->loc,
                           "on-chip buffer '%s'(#%" PRId32 ", %s) is used "
                           "across SMs %s, counters give ordering, not cross-SM "
                           "data; promote to GLOBAL_SCRATCH/HBM or co-locate on "
                           "one SM",
                           buf->name ? buf->name : "", buf->id,
                           amk_space_json_name(buf->space), list);
    } else if (distinct == 0) {
      amk_validator_report(v, AMK_SEVERITY_WARNING, buf->loc,
                           "on-chip buffer '%s'(#%" PRId32 ") requires same-SM "
                           "placement (unverified until sm_assignment runs)",
                           buf->name ? buf->name : "", buf->id);
    }
  }
}

/* ---- 6. per-SM queue order and SM range ---------------------------------- */

static void check_sm_queues(AmkValidator *v) {
  const AmkModule *m = v->m;
  const AmkTaskGraph *g = &v->g;
  bool any = false;
  for (uint32_t t = 0; t < m->n_tasks && !any; t++)
    any = m->tasks[t].has_sm;
  if (!any)
    return;
  /* Edges a->b in (a, b) order; waiters are ascending, so the violating
   * ones (b at or before a in the list) form a prefix. */
  for (uint32_t a = 0; a < m->n_tasks && !v->stopped; a++) {
    const AmkTask *ta = &m->tasks[a];
    if (!ta->has_sm)
      continue;
    uint32_t s = g->task_slot[a];
    for (uint32_t i = g->wait_off[s]; i < g->wait_off[s + 1]; i++) {
      uint32_t b = g->waiter[i];
      if (b > a)
        break;
      const AmkTask *tb = &m->tasks[b];
      if (tb->has_sm && tb->sm == ta->sm)
        amk_validator_report(v, AMK_SEVERITY_ERROR, tb->loc,
                             "SM %" PRId32 " queue order violates dependency "
                             "%" PRId32 "->%" PRId32 " (producer must precede "
                             "consumer in the same SM's serial queue)",
                             ta->sm, ta->id, tb->id);
    }
  }
  if (!m->target)
    return;
  for (uint32_t t = 0; t < m->n_tasks && !v->stopped; t++) {
    const AmkTask *task = &m->tasks[t];
    if (task->has_sm && (task->sm < 0 || task->sm >= m->target->num_sms))
      amk_validator_report(v, AMK_SEVERITY_ERROR, task->loc,
                           "task %" PRId32 " assigned to SM %" PRId32
                           " out of range [0,%" PRId64 ")",
                           task->id, task->sm, m->target->num_sms);
  }
}

/* ---- 7. page aliasing ----------------------------------------------------- */

/* Whether u happens-before w depends on w only through the counters w waits
 * on, so writers with the same waits (the tiles of one projection) have the
 * same strict ancestors and share one search. */
static bool same_waits(const AmkTaskGraph *g, uint32_t x, uint32_t y) {
  uint32_t n = g->tw_off[x + 1] - g->tw_off[x];
  return n == g->tw_off[y + 1] - g->tw_off[y] &&
         memcmp(&g->tw_slot[g->tw_off[x]], &g->tw_slot[g->tw_off[y]],
                sizeof(uint32_t) * n) == 0;
}

/* Every use of buffer `a` happens-before every writer of buffer `b`
 * (vacuously true when `a` has no uses or `b` no writers). One backward
 * search per distinct wait set among b's writers, pruned below the first
 * use of `a`. */
static bool uses_all_before_writers(AmkValidator *v, uint32_t a, uint32_t b) {
  AmkTaskGraph *g = &v->g;
  uint32_t u0 = v->use_off[a], u1 = v->use_off[a + 1];
  uint32_t w0 = v->wr_off[b], w1 = v->wr_off[b + 1];
  if (u0 == u1 || w0 == w1)
    return true;
  uint32_t min_use = UINT32_MAX, max_use = 0, min_wr = UINT32_MAX;
  for (uint32_t i = u0; i < u1; i++) {
    uint32_t p = g->topo_pos[v->use[i]];
    min_use = p < min_use ? p : min_use;
    max_use = p > max_use ? p : max_use;
  }
  for (uint32_t j = w0; j < w1; j++) {
    uint32_t p = g->topo_pos[v->wr[j]];
    min_wr = p < min_wr ? p : min_wr;
  }
  if (max_use >= min_wr) /* some use is not before some writer */
    return false;
  uint32_t searched = AMK_NO_INDEX;
  for (uint32_t j = w0; j < w1; j++) {
    uint32_t w = v->wr[j];
    if (searched != AMK_NO_INDEX && same_waits(g, searched, w))
      continue;
    amk_graph_mark_ancestors(g, w, min_use);
    searched = w;
    for (uint32_t i = u0; i < u1; i++)
      if (!amk_graph_is_marked(g, v->use[i]))
        return false;
  }
  return true;
}

typedef struct {
  uint32_t buffer;   /* buffer index */
  uint32_t key;      /* topological position of its first writer */
  uint32_t member;   /* position among the page's bindings */
} PageEntry;

static int compare_page_entries(const void *pa, const void *pb) {
  const PageEntry *a = pa, *b = pb;
  return amk_compare_i64_then(a->key, b->key, a->member, b->member);
}

static void report_page_pair(AmkValidator *v, const AmkPageBinding *x,
                             const AmkPageBinding *y, uint32_t a, uint32_t b) {
  const AmkModule *m = v->m;
  amk_validator_report(
      v, AMK_SEVERITY_ERROR, m->buffers[b].loc,
      "page %" PRId32 " reused by buffers #%" PRId32 " ('%s') and #%" PRId32
      " ('%s') whose live ranges are NOT ordered, clobber RACE (page reuse "
      "needs separated ranges)",
      x->page, x->buffer, m->buffers[a].name ? m->buffers[a].name : "",
      y->buffer, m->buffers[b].name ? m->buffers[b].name : "");
}

/* The reference compares every pair of buffers on a page: a pair is safe
 * when every use of one happens-before every writer of the other, R(a, b)
 * or R(b, a). A buffer nothing writes is safe with everything (R holds
 * vacuously), so only written buffers matter. Among those:
 *   - R(a, b) implies a's first writer precedes b's in topological order, so
 *     with the buffers sorted by first writer only R(earlier, later) can
 *     hold (equal first writers: neither);
 *   - R is transitive: uses(a) < writers(b) <= uses(b) < writers(c) (b's
 *     writers are among its uses, and there is at least one).
 * So when every neighbouring pair of the sorted list is ordered, every pair
 * is. Otherwise every pair is judged in the reference's order (binding
 * order), a pair inside a run of ordered neighbours by transitivity and any
 * other pair by a query, and each unordered pair is reported as before. */
static void check_page_group(AmkValidator *v, const uint32_t *members,
                             uint32_t n, PageEntry *entries, uint32_t *rank,
                             uint32_t *breaks) {
  const AmkModule *m = v->m;
  const AmkPageAllocation *pa = m->pages;
  const AmkTaskGraph *g = &v->g;
  uint32_t ne = 0;
  for (uint32_t i = 0; i < n; i++) {
    rank[i] = AMK_NO_INDEX;
    uint32_t b = amk_id_index_get(&v->bufs, pa->bindings[members[i]].buffer);
    if (b == AMK_NO_INDEX || v->wr_off[b] == v->wr_off[b + 1])
      continue; /* missing (reported with the bounds checks) or unwritten */
    uint32_t key = UINT32_MAX;
    for (uint32_t j = v->wr_off[b]; j < v->wr_off[b + 1]; j++)
      if (g->topo_pos[v->wr[j]] < key)
        key = g->topo_pos[v->wr[j]];
    entries[ne++] = (PageEntry){b, key, i};
  }
  if (ne < 2)
    return;
  qsort(entries, ne, sizeof *entries, compare_page_entries);
  /* breaks[r]: unordered neighbouring pairs among entries[0..r]. */
  breaks[0] = 0;
  for (uint32_t r = 0; r + 1 < ne; r++) {
    rank[entries[r].member] = r;
    bool ordered = uses_all_before_writers(v, entries[r].buffer,
                                           entries[r + 1].buffer);
    breaks[r + 1] = breaks[r] + (ordered ? 0 : 1);
  }
  rank[entries[ne - 1].member] = ne - 1;
  if (breaks[ne - 1] == 0)
    return;
  for (uint32_t i = 0; i < n && !v->stopped; i++) {
    if (rank[i] == AMK_NO_INDEX)
      continue;
    for (uint32_t j = i + 1; j < n && !v->stopped; j++) {
      if (rank[j] == AMK_NO_INDEX)
        continue;
      uint32_t lo = rank[i] < rank[j] ? rank[i] : rank[j];
      uint32_t hi = rank[i] < rank[j] ? rank[j] : rank[i];
      if (breaks[hi] == breaks[lo] ||
          uses_all_before_writers(v, entries[lo].buffer, entries[hi].buffer))
        continue;
      uint32_t a = entries[rank[i]].buffer, b = entries[rank[j]].buffer;
      report_page_pair(v, &pa->bindings[members[i]], &pa->bindings[members[j]],
                       a, b);
    }
  }
}

/* An accumulator is zeroed by the engine before each step and then added
 * to, so it needs a page of its own: a buffer sharing it would be clobbered
 * by the zeroing or the additions, or hand its bytes to the first tile as
 * the sum's start, however their uses are ordered. Reports the first
 * accumulator among a page's bindings that shares it with another buffer;
 * whether it did. */
static bool check_accumulator_page(AmkValidator *v, const uint32_t *members, uint32_t n) {
  const AmkModule *m = v->m;
  const AmkPageAllocation *pa = m->pages;
  for (uint32_t i = 0; i < n && n > 1; i++) {
    const AmkPageBinding *acc = &pa->bindings[members[i]];
    uint32_t b = amk_id_index_get(&v->bufs, acc->buffer);
    uint32_t tile = b == AMK_NO_INDEX ? AMK_NO_INDEX : first_accumulating_writer(v, b);
    if (tile == AMK_NO_INDEX)
      continue;
    for (uint32_t j = 0; j < n; j++) {
      const AmkPageBinding *other = &pa->bindings[members[j]];
      if (other->buffer == acc->buffer)
        continue; /* the same buffer bound twice */
      uint32_t o = amk_id_index_get(&v->bufs, other->buffer);
      const char *other_name = o == AMK_NO_INDEX ? "" : m->buffers[o].name;
      amk_validator_report(
          v, AMK_SEVERITY_ERROR, m->buffers[b].loc,
          "page %" PRId32 " holds accumulator #%" PRId32 " ('%s') and buffer #%" PRId32
          " ('%s'); the engine zeroes an accumulator before each step and %s tiles add to "
          "it, so it needs a page of its own, clobber RACE",
          acc->page, acc->buffer, m->buffers[b].name ? m->buffers[b].name : "",
          other->buffer, other_name ? other_name : "",
          amk_gemv_pattern_name(amk_validator_accumulating_pattern(v, tile)));
      return true;
    }
  }
  return false;
}

static void check_pages(AmkValidator *v) {
  const AmkModule *m = v->m;
  const AmkPageAllocation *pa = m->pages;
  uint32_t n = pa->n_bindings;
  if (n == 0)
    return;
  /* Group bindings by page in first-appearance order (a stable sort). */
  AmkIdMap page_group;
  amk_idmap_init_in(&page_group, n, v->scratch);
  uint32_t *group_of = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * n);
  for (uint32_t i = 0; i < n; i++)
    group_of[i] = amk_idmap_put(&page_group, pa->bindings[i].page, page_group.count);
  uint32_t n_groups = page_group.count;
  uint32_t *off = amk_scratch_calloc(v->scratch, (size_t)n_groups + 1,
                                     sizeof(uint32_t));
  uint32_t *members = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * n);
  for (uint32_t i = 0; i < n; i++)
    off[group_of[i] + 1]++;
  for (uint32_t k = 0; k < n_groups; k++)
    off[k + 1] += off[k];
  uint32_t *fill = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (n_groups + 1));
  memcpy(fill, off, sizeof(uint32_t) * n_groups);
  for (uint32_t i = 0; i < n; i++)
    members[fill[group_of[i]]++] = i;
  PageEntry *entries = amk_scratch_alloc(v->scratch, sizeof *entries * n);
  uint32_t *rank = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * n);
  uint32_t *breaks = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * n);
  for (uint32_t k = 0; k < n_groups && !v->stopped; k++)
    if (!check_accumulator_page(v, members + off[k], off[k + 1] - off[k]))
      check_page_group(v, members + off[k], off[k + 1] - off[k], entries, rank,
                       breaks);
  amk_idmap_free(&page_group);
}

/* ---- 8. outputs and labelling --------------------------------------------- */

static bool python_truthy(const AmkValue *v) {
  switch (v->kind) {
  case AMK_VALUE_NULL:
    return false;
  case AMK_VALUE_BOOL:
    return v->as.b;
  case AMK_VALUE_INT:
    return v->as.i != 0;
  case AMK_VALUE_FLOAT:
    return v->as.f != 0.0;
  case AMK_VALUE_STRING:
    return v->as.s && v->as.s[0];
  case AMK_VALUE_LIST:
  case AMK_VALUE_OBJECT:
    return v->count != 0;
  }
  return false;
}

static void check_outputs_and_gpu(AmkValidator *v) {
  const AmkModule *m = v->m;
  for (uint32_t b = 0; b < m->n_buffers && !v->stopped; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    if (buf->kind == AMK_KIND_IO_OUTPUT && v->wr_off[b] == v->wr_off[b + 1] &&
        amk_id_index_get(&v->bufs, buf->id) == b)
      amk_validator_report(v, AMK_SEVERITY_ERROR, buf->loc,
                           "IO_OUTPUT buffer '%s'(#%" PRId32 ") is never produced",
                           buf->name ? buf->name : "", buf->id);
  }
  if (!m->target || m->meta.kind != AMK_VALUE_OBJECT)
    return;
  const AmkValue *gpu = amk_object_get(&m->meta, "gpu");
  if (!gpu || !python_truthy(gpu))
    return;
  const char *name = m->target->name ? m->target->name : "";
  if (gpu->kind == AMK_VALUE_STRING && strcmp(gpu->as.s, name) == 0)
    return;
  char have[128], want[128];
  amk_value_repr(gpu, have, sizeof have);
  AmkValue target_name = {.kind = AMK_VALUE_STRING};
  target_name.as.s = name;
  amk_value_repr(&target_name, want, sizeof want);
  amk_validator_report(v, AMK_SEVERITY_WARNING, no_loc,
                       "meta['gpu']=%s != target.name=%s - flywheel rows derive "
                       "GPU from target.name",
                       have, want);
}

/* ---- driver --------------------------------------------------------------- */

AmkValidatorWorkspace *amk_validator_workspace_new(void) {
  return amk_xcalloc(1, sizeof(AmkValidatorWorkspace));
}

void amk_validator_workspace_free(AmkValidatorWorkspace *ws) {
  if (!ws)
    return;
  amk_scratch_free(&ws->scratch);
  free(ws);
}

/* About what one run over `m` takes, so that a one-off run allocates once. */
static size_t scratch_estimate(const AmkModule *m) {
  size_t refs = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++)
    refs += (size_t)m->tasks[t].n_waits + m->tasks[t].n_inputs +
            m->tasks[t].n_outputs;
  return 4096 + 64 * (size_t)m->n_tasks + 24 * refs +
         64 * ((size_t)m->n_buffers + m->n_counters);
}

bool amk_validate_module(const AmkModule *m, AmkDiagEngine *diag,
                         const AmkValidateOptions *opts,
                         AmkValidateResult *out) {
  AmkValidatorWorkspace ws;
  memset(&ws, 0, sizeof ws);
  amk_scratch_reset(&ws.scratch, scratch_estimate(m));
  bool ok = amk_validate_module_ws(&ws, m, diag, opts, out);
  amk_scratch_free(&ws.scratch);
  return ok;
}

bool amk_validate_module_ws(AmkValidatorWorkspace *ws, const AmkModule *m,
                            AmkDiagEngine *diag, const AmkValidateOptions *opts,
                            AmkValidateResult *out) {
  amk_scratch_reset(&ws->scratch, 0);
  AmkValidator v;
  memset(&v, 0, sizeof v);
  v.scratch = &ws->scratch;
  v.m = m;
  v.diag = diag;
  v.opts = opts ? *opts : amk_validate_default_options();
  if (v.opts.max_errors <= 0)
    v.opts.max_errors = 200;
  amk_id_index_build_in(&v.bufs, m->buffers, sizeof *m->buffers, m->n_buffers,
                        v.scratch);
  amk_id_index_build_in(&v.ctrs, m->counters, sizeof *m->counters,
                        m->n_counters, v.scratch);
  amk_id_index_build_in(&v.tasks, m->tasks, sizeof *m->tasks, m->n_tasks,
                        v.scratch);
  amk_graph_build_in(&v.g, m, v.scratch);
  build_param_fields(&v);
  build_buffer_uses(&v);

  check_duplicate_ids(&v);
  for (uint32_t t = 0; t < m->n_tasks && !v.stopped; t++)
    check_task_structure(&v, &m->tasks[t]);
  for (uint32_t t = 0; t < m->n_tasks && !v.stopped; t++)
    check_wait_satisfiability(&v, &m->tasks[t]);
  if (!v.g.acyclic && !v.stopped) {
    char witness[2048];
    uint32_t start = amk_graph_describe_cycle(&v.g, m, witness, sizeof witness);
    amk_validator_report(&v, AMK_SEVERITY_ERROR,
                         start == AMK_NO_INDEX ? no_loc : m->tasks[start].loc,
                         "producer\u2192consumer graph has a CYCLE, structural "
                         "deadlock. %s",
                         witness);
  }
  if (v.g.acyclic && !v.stopped) {
    check_provenance(&v);
    check_write_after_write(&v);
  }
  if (!v.stopped)
    check_on_chip(&v);
  if (!v.stopped)
    check_sm_queues(&v);
  if (m->pages && v.g.acyclic && m->n_tasks > 0 && !v.stopped)
    check_pages(&v);
  if (!v.stopped)
    check_outputs_and_gpu(&v);
  if (!v.stopped)
    amk_validate_check_bounds(&v);

  AmkValidateResult r;
  memset(&r, 0, sizeof r);
  r.ok = v.errors == 0;
  r.tasks = m->n_tasks;
  r.buffers = m->n_buffers;
  r.counters = m->n_counters;
  r.edges = v.g.n_edges;
  r.acyclic = v.g.acyclic;
  r.weight_mb = round((double)amk_module_weight_bytes(m) / 1e6 * 100.0) / 100.0;
  for (uint32_t t = 0; t < m->n_tasks && !r.sm_assigned; t++)
    r.sm_assigned = m->tasks[t].has_sm;
  r.errors = v.errors;
  r.warnings = v.warnings;
  validator_free(&v);
  if (out)
    *out = r;
  return r.ok;
}

void amk_validate_format_summary(const AmkValidateResult *r, char *buf,
                                 size_t size) {
  char mb[32];
  amk_format_float_repr(r->weight_mb, mb);
  snprintf(buf, size,
           "[%s] {'tasks': %" PRId64 ", 'buffers': %" PRId64
           ", 'counters': %" PRId64 ", 'edges': %" PRId64
           ", 'acyclic': %s, 'weight_MB': %s, 'sm_assigned': %s}",
           r->ok ? "VALID" : "REJECTED", r->tasks, r->buffers, r->counters,
           r->edges, r->acyclic ? "True" : "False", mb,
           r->sm_assigned ? "True" : "False");
}

bool amk_pass_validate(AmkModule *m, AmkPassContext *ctx) {
  AmkValidateResult r;
  AmkValidateOptions opts = amk_validate_default_options();
  amk_validate_module(m, ctx->diag, &opts, &r);
  char summary[256];
  amk_validate_format_summary(&r, summary, sizeof summary);
  amk_note(ctx->diag, no_loc, "validate: %s", summary);
  if (ctx->stats) {
    amk_stat_int(ctx->stats, "validate", "tasks", r.tasks);
    amk_stat_int(ctx->stats, "validate", "buffers", r.buffers);
    amk_stat_int(ctx->stats, "validate", "counters", r.counters);
    amk_stat_int(ctx->stats, "validate", "edges", r.edges);
    amk_stat_str(ctx->stats, "validate", "acyclic", r.acyclic ? "true" : "false");
    amk_stat_real(ctx->stats, "validate", "weight_MB", r.weight_mb);
    amk_stat_str(ctx->stats, "validate", "sm_assigned",
                 r.sm_assigned ? "true" : "false");
    amk_stat_int(ctx->stats, "validate", "errors", r.errors);
    amk_stat_int(ctx->stats, "validate", "warnings", r.warnings);
  }
  return r.ok;
}

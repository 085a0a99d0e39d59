/* quantize: weight-only int8 / int4 GEMV weights (docs/Quantization.md).
 *
 * Every WEIGHT matrix that only plain GEMV/GEMM tiles read (as their weight,
 * input 1) becomes the reference's quantized form: the buffer keeps its
 * name, source and [N, K] shape and takes dtype i8 or i4; a new f16 buffer
 * `<name>.scales` [N, ceil(K/group)] with source `<source>.scales` joins
 * it; each tile reads [x, qW, scales] and gains params qdtype (6 or 7) and
 * group. No number is quantized here: the weight loader quantizes each
 * checkpoint tensor as it reads it (or maps an already quantized one), so
 * the same program runs from the original checkpoint or from the folder
 * `amk-opt --emit-weights` writes.
 *
 * Projections named in --quant-keep stay in their dtype (by default, auto:
 * the o projection where fuse's split_o will take it). Only plain tiles
 * are rewritten (fuse then fuses the quantized tiles, docs/Quantization.md),
 * so an fp weight already fused is an error: quantize before -fuse.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/builder.h"
#include "amk/quantize.h"
#include "amk/strbuf.h"
#include "amk/tp.h"
#include "fusion_groups.h"
#include "schedule_rewrite.h"

static const AmkLoc no_loc = {0, 0};

/* The projections --quant-keep names, by the state-dict component of their
 * source ("model.layers.3.mlp.down_proj.weight"); a tied head reads
 * "model.embed_tokens.weight" through its GEMV and counts as lm_head. */
#define PROJECTIONS(X)                                                         \
  X(Q, "q_proj")                                                               \
  X(K, "k_proj")                                                               \
  X(V, "v_proj")                                                               \
  X(O, "o_proj")                                                               \
  X(GATE, "gate_proj")                                                         \
  X(UP, "up_proj")                                                             \
  X(DOWN, "down_proj")                                                         \
  X(LM_HEAD, "lm_head")

typedef enum {
#define X(name, text) PROJ_##name,
  PROJECTIONS(X)
#undef X
      PROJ_COUNT
} Projection;

static const char *const projection_names[] = {
#define X(name, text) text,
    PROJECTIONS(X)
#undef X
};

/* The projection a source key (or, without one, a buffer name) names:
 * the first '.'-separated component that is a projection; -1 for none. */
static int projection_of(const char *key) {
  const char *p = key;
  while (p && *p) {
    const char *end = strchr(p, '.');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == strlen("embed_tokens") && strncmp(p, "embed_tokens", len) == 0)
      return PROJ_LM_HEAD;
    for (int r = 0; r < PROJ_COUNT; r++)
      if (len == strlen(projection_names[r]) && strncmp(p, projection_names[r], len) == 0)
        return r;
    p = end ? end + 1 : NULL;
  }
  return -1;
}

/* --quant-keep: "auto", "none", or projections joined by ','. Sets keep[];
 * auto keeps o_proj where fuse's split_o will take every layer's o
 * projection (it has no quantized form; amk_fusion_split_o_wants_fp_o). */
static bool parse_keep(const char *text, const AmkModule *m, const AmkPassContext *ctx,
                       bool *keep, AmkDiagEngine *diag) {
  char known[160];
  size_t at = 0;
  for (int r = 0; r < PROJ_COUNT; r++)
    at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", r ? ", " : "",
                           projection_names[r]);
  if (strcmp(text, "none") == 0)
    return true;
  if (strcmp(text, "auto") == 0) {
    keep[PROJ_O] = amk_fusion_split_o_wants_fp_o(m, ctx);
    return true;
  }
  const char *p = text;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    int found = -1;
    for (int r = 0; r < PROJ_COUNT && found < 0; r++)
      if (len == strlen(projection_names[r]) && strncmp(p, projection_names[r], len) == 0)
        found = r;
    if (found < 0) {
      amk_error(diag, no_loc,
                "quantize: --quant-keep names '%.*s', which is not a projection (known: %s; "
                "or auto, or none)",
                (int)len, p, known);
      return false;
    }
    keep[found] = true;
    if (!end)
      return true;
    p = end + 1;
  }
}

/* How the tasks read one buffer. */
typedef struct {
  bool as_plain_weight; /* input 1 of a plain two-input GEMV/GEMM tile */
  bool otherwise;       /* by anything else (another op, input, bias...) */
  uint32_t fused_reader; /* a GEMV with a fused pattern reading it as its
                            fp weight, + 1 (0: none) */
} Readers;

static bool is_tile(const AmkTask *t) {
  return t->op == AMK_OP_GEMV_TILE || t->op == AMK_OP_GEMM_TILE;
}

static Readers *find_readers(const AmkModule *m) {
  Readers *r = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, sizeof *r);
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    const AmkTask *task = &m->tasks[t];
    bool fused = is_tile(task) && amk_rw_pattern(task) != AMK_PATTERN_PLAIN;
    bool plain = is_tile(task) && !fused && task->n_inputs == 2 && !amk_rw_quantized(task);
    for (uint32_t i = 0; i < task->n_inputs; i++) {
      const AmkBuffer *b = amk_module_buffer(m, task->inputs[i]);
      if (!b)
        continue;
      Readers *rd = &r[b - m->buffers];
      if (i == 1 && fused && b->kind == AMK_KIND_WEIGHT && !amk_rw_quantized(task)) {
        if (!rd->fused_reader)
          rd->fused_reader = t + 1;
      } else if (i == 1 && plain) {
        rd->as_plain_weight = true;
      } else {
        rd->otherwise = true;
      }
    }
  }
  return r;
}

static int64_t dim(const AmkBuffer *b, uint32_t i) {
  int64_t d = -1;
  return i < b->rank && amk_value_as_int(&b->shape[i], &d) ? d : -1;
}

/* A fresh buffer id: the next list position when ids are positions, else
 * one past the largest id; -1 when none is left. */
static int64_t fresh_buffer_id(const AmkModule *m) {
  if (amk_module_ids_are_positions(m))
    return m->n_buffers;
  int64_t top = -1;
  for (uint32_t i = 0; i < m->n_buffers; i++)
    if (m->buffers[i].id > top)
      top = m->buffers[i].id;
  return top < INT32_MAX ? top + 1 : -1;
}

typedef struct {
  int qdtype, bits;
  int64_t group;
  int64_t quantized, kept, weight_bytes_before, weight_bytes_after;
} Plan;

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* The first column of a tensor-parallel rank's column slice (KEY[:, B:E],
 * shard's row-parallel o_proj and down_proj) that is not a multiple of the
 * group, or 0: such a slice's groups start at B, not where the unsharded
 * program's do. */
static int64_t unaligned_slice_start(const AmkBuffer *b, int64_t group) {
  for (const char *s = b->source; s && *s;) {
    const char *end = strchr(s, '+');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    AmkSourcePart part;
    if (amk_source_part_parse(s, len, &part) && part.col_begin > 0 &&
        part.col_begin % group != 0)
      return part.col_begin;
    s = end ? end + 1 : s + len;
  }
  return 0;
}

/* Says when a rank's quantized slices differ from the unsharded program's:
 * each rank quantizes the columns it holds, in groups from its first one. */
static void note_unaligned_slices(const AmkModule *m, const uint8_t *chosen, int64_t group,
                                  AmkDiagEngine *diag) {
  int64_t count = 0, divisor = group;
  const AmkBuffer *first = NULL;
  int64_t first_start = 0;
  for (uint32_t p = 0; p < m->n_buffers; p++) {
    int64_t start = chosen[p] ? unaligned_slice_start(&m->buffers[p], group) : 0;
    if (!start)
      continue;
    if (!first) {
      first = &m->buffers[p];
      first_start = start;
    }
    count++;
    divisor = gcd64(divisor, start);
  }
  if (!count)
    return;
  int64_t tp_rank = -1, tp_size = -1;
  amk_module_tp(m, &tp_size, &tp_rank);
  amk_note(diag, no_loc,
           "quantize: rank %" PRId64 " of %" PRId64 ": %" PRId64 " weight%s (the first '%s') "
           "take columns from %" PRId64 ", not a multiple of the group (%" PRId64 "): their "
           "groups start there, so they are not the unsharded program's quantized weights "
           "(--quant-group=%" PRId64 " keeps them the same)",
           tp_rank, tp_size, count, count == 1 ? "" : "s", first->name, first_start, group,
           divisor);
}

/* The weight at position p becomes qdtype with a scales buffer; its tiles
 * read both. False (after reporting) when no id is left. */
static bool quantize_weight(AmkModule *m, uint32_t p, const Plan *plan, AmkDiagEngine *diag) {
  int64_t n = dim(&m->buffers[p], 0), k = dim(&m->buffers[p], 1);
  int64_t groups = amk_quant_groups(k, plan->group);
  int64_t id = fresh_buffer_id(m);
  if (id < 0) {
    amk_error(diag, no_loc, "quantize: no buffer id is left for the scales of '%s'",
              m->buffers[p].name);
    return false;
  }
  int64_t elem = amk_dtype_nbytes(m->buffers[p].dtype, 1);
  const char *name = amk_arena_printf(&m->arena, "%s.scales", m->buffers[p].name);
  name = amk_rw_unique_buffer_name(m, name);
  const char *source = NULL;
  if (m->buffers[p].source) {
    /* "a+b" (stacked parts) has scales "a.scales+b.scales". */
    AmkStrBuf sb;
    amk_sb_init(&sb);
    for (const char *s = m->buffers[p].source; *s;) {
      const char *end = strchr(s, '+');
      size_t len = end ? (size_t)(end - s) : strlen(s);
      amk_sb_printf(&sb, "%s%.*s.scales", sb.len ? "+" : "", (int)len, s);
      s = end ? end + 1 : s + len;
    }
    source = amk_arena_strdup(&m->arena, sb.data ? sb.data : "");
    amk_sb_free(&sb);
  }
  int64_t dims[2] = {n, groups};
  amk_module_add_hbm_buffer(m, name, AMK_KIND_WEIGHT, AMK_DTYPE_F16, 2, dims, source);
  m->buffers[m->n_buffers - 1].id = (int32_t)id;
  AmkBuffer *w = &m->buffers[p];
  w->dtype = plan->qdtype == AMK_QDTYPE_INT8 ? AMK_DTYPE_I8 : AMK_DTYPE_I4;
  int64_t row_bytes = amk_quant_row_bytes(plan->bits, k) + 2 * groups;
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    AmkTask *task = &m->tasks[t];
    if (!is_tile(task) || task->n_inputs != 2 || task->inputs[1] != w->id)
      continue;
    int32_t inputs[3] = {task->inputs[0], w->id, (int32_t)id};
    task->n_inputs = 3;
    task->inputs = amk_arena_memdup(&m->arena, inputs, sizeof inputs);
    amk_task_set_param(m, task, "qdtype", amk_value_int(plan->qdtype));
    amk_task_set_param(m, task, "group", amk_value_int(plan->group));
    /* The tile streams N_tile quantized rows and their scales instead of
     * N_tile rows of K elements. */
    int64_t n_tile = 0;
    if (amk_task_param_int(task, "N_tile", &n_tile) && n_tile > 0) {
      int64_t est = task->est_bytes - n_tile * k * elem + n_tile * row_bytes;
      task->est_bytes = est > 0 ? est : 0;
    }
  }
  return true;
}

/* meta's weight_bytes (each source once, as import counts it) and the
 * reference's quantization record. */
static void update_meta(AmkModule *m, const Plan *plan, const bool *keep) {
  if (m->meta.kind != AMK_VALUE_OBJECT)
    return;
  char kept[160] = "";
  size_t at = 0;
  for (int r = 0; r < PROJ_COUNT; r++)
    if (keep[r])
      at += (size_t)snprintf(kept + at, sizeof kept - at, "%s%s", at ? "," : "",
                             projection_names[r]);
  AmkMember quant[5] = {
      {"group", amk_value_int(plan->group)},
      {"bits", amk_value_int(plan->bits)},
      {"symmetric", {.kind = AMK_VALUE_BOOL, .as.b = true}},
      {"n_keys", amk_value_int(plan->quantized)},
      {"kept", {.kind = AMK_VALUE_STRING, .as.s = amk_arena_strdup(&m->arena, at ? kept : "none")}},
  };
  AmkValue quant_value = {.kind = AMK_VALUE_OBJECT, .count = 5};
  quant_value.as.members = amk_arena_memdup(&m->arena, quant, sizeof quant);
  AmkMember updates[3] = {{"weight_bytes", amk_value_int(plan->weight_bytes_after)},
                          {"quantized", {.kind = AMK_VALUE_BOOL, .as.b = true}},
                          {"quant", quant_value}};
  uint32_t n = m->meta.count;
  AmkMember *members = amk_arena_alloc(&m->arena, (n + 3) * sizeof *members);
  memcpy(members, m->meta.as.members, n * sizeof *members);
  for (int u = 0; u < 3; u++) {
    uint32_t i = 0;
    while (i < n && strcmp(members[i].key, updates[u].key) != 0)
      i++;
    if (i == n && u == 0)
      continue; /* no weight_bytes to correct */
    members[i] = updates[u];
    if (i == n)
      n++;
  }
  m->meta.count = n;
  m->meta.as.members = members;
}

/* Bytes of the WEIGHT buffers, a source shared by buffers of one dtype and
 * shape (a tied head) counted once. */
static int64_t weight_bytes(const AmkModule *m) {
  int64_t total = 0;
  for (uint32_t i = 0; i < m->n_buffers; i++) {
    const AmkBuffer *b = &m->buffers[i];
    int64_t nbytes;
    if (b->kind != AMK_KIND_WEIGHT || !amk_buffer_nbytes(b, &nbytes))
      continue;
    bool seen = false;
    for (uint32_t j = 0; j < i && !seen && b->source; j++) {
      const AmkBuffer *o = &m->buffers[j];
      int64_t other;
      seen = o->kind == AMK_KIND_WEIGHT && o->source && strcmp(o->source, b->source) == 0 &&
             o->dtype == b->dtype && amk_buffer_nbytes(o, &other) && other == nbytes;
    }
    total += seen ? 0 : nbytes;
  }
  return total;
}

bool amk_pass_quantize(AmkModule *m, AmkPassContext *ctx) {
  AmkDiagEngine *diag = ctx->diag;
  size_t format;
  if (!amk_pass_option_enum(ctx, "quant", &format)) {
    amk_error(diag, no_loc, "quantize: give the weight format, --quant=int8 or --quant=int4");
    return false;
  }
  Plan plan = {.qdtype = format == 0 ? AMK_QDTYPE_INT8 : AMK_QDTYPE_INT4,
               .bits = format == 0 ? 8 : 4,
               .group = AMK_QUANT_DEFAULT_GROUP};
  amk_pass_option_int(ctx, "quant-group", &plan.group);
  bool keep[PROJ_COUNT] = {false};
  const char *keep_text = amk_pass_option_string(ctx, "quant-keep");
  if (!parse_keep(keep_text ? keep_text : AMK_QUANT_DEFAULT_KEEP, m, ctx, keep, diag))
    return false;

  Readers *readers = find_readers(m);
  uint8_t *chosen = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, 1);
  bool ok = true;
  for (uint32_t p = 0; p < m->n_buffers && ok; p++) {
    const AmkBuffer *b = &m->buffers[p];
    const Readers *r = &readers[p];
    if (b->kind != AMK_KIND_WEIGHT)
      continue;
    if (r->fused_reader) {
      const AmkTask *t = &m->tasks[r->fused_reader - 1];
      amk_error(diag, t->loc,
                "quantize: weight '%s' is read by task %" PRId32 " ('%s'), a GEMV fused with "
                "pattern %s; quantize rewrites plain tiles only (fuse fuses quantized ones): "
                "quantize before -fuse",
                b->name, t->id, t->label, amk_gemv_pattern_name(amk_rw_pattern(t)));
      ok = false;
      break;
    }
    int64_t n = dim(b, 0), k = dim(b, 1);
    if (!r->as_plain_weight || r->otherwise || b->rank != 2 || n <= 0 || k <= 0 ||
        (b->dtype != AMK_DTYPE_F32 && b->dtype != AMK_DTYPE_BF16 && b->dtype != AMK_DTYPE_F16))
      continue;
    int role = projection_of(b->source ? b->source : b->name);
    if (role >= 0 && keep[role]) {
      plan.kept++;
      continue;
    }
    if (plan.bits == 4 && k % 2) {
      amk_error(diag, b->loc,
                "quantize: weight '%s' has an odd K = %" PRId64 "; int4 packs two columns per "
                "byte, so give --quant=int8 or keep it (--quant-keep)",
                b->name, k);
      ok = false;
      break;
    }
    chosen[p] = 1;
  }
  if (ok) {
    plan.weight_bytes_before = weight_bytes(m);
    note_unaligned_slices(m, chosen, plan.group, diag);
    uint32_t n_before = m->n_buffers;
    for (uint32_t p = 0; p < n_before && ok; p++)
      if (chosen[p]) {
        ok = quantize_weight(m, p, &plan, diag);
        plan.quantized++;
      }
    plan.weight_bytes_after = weight_bytes(m);
  }
  free(chosen);
  free(readers);
  if (!ok)
    return false;
  if (plan.quantized == 0)
    amk_warning(diag, no_loc, "quantize: no GEMV weight to quantize (%" PRId64 " kept)",
                plan.kept);
  else
    update_meta(m, &plan, keep);
  amk_stat_str(ctx->stats, "quantize", "format", plan.bits == 8 ? "int8" : "int4");
  amk_stat_int(ctx->stats, "quantize", "group", plan.group);
  amk_stat_int(ctx->stats, "quantize", "weights quantized", plan.quantized);
  amk_stat_int(ctx->stats, "quantize", "weights kept", plan.kept);
  amk_stat_int(ctx->stats, "quantize", "weight bytes before", plan.weight_bytes_before);
  amk_stat_int(ctx->stats, "quantize", "weight bytes after", plan.weight_bytes_after);
  return true;
}

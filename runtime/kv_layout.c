/* KV rows across cache layouts (include/amk/engine.h): the unfused
 * kcache/vcache pair that import builds and every prefill program keeps,
 * and fuse's per-head or combined k|v caches. amk-run copies a prefill
 * chunk's rows into a fused decode program's caches with it (and the rows
 * the decode program wrote back before the next chunk). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "amk/engine.h"

/* One head's key or value row in a cache: `width` elements at `offset`
 * from the start of each row of `stride` elements. */
typedef struct {
  const char *prefix; /* the layer's, e.g. "L3." (into the module) */
  size_t prefix_len;
  int plane; /* 0 keys, 1 values */
  int64_t head;
  uint32_t buffer;
  int64_t offset, stride, width;
} KvSlot;

typedef struct {
  KvSlot *at;
  uint32_t n;
} KvSlots;

struct AmkKvMap {
  /* Pairs: to.at[i] takes from.at[i]. */
  KvSlots to, from;
  int64_t elem_bytes; /* one dtype on both sides */
};

static const AmkLoc no_loc = {0, 0};

static void add_slot(KvSlots *s, KvSlot slot) {
  s->at = amk_xrealloc(s->at, (s->n + 1) * sizeof *s->at);
  s->at[s->n++] = slot;
}

static bool ends_with(const char *name, const char *tail, size_t *prefix_len) {
  size_t n = strlen(name), t = strlen(tail);
  if (n < t || strcmp(name + n - t, tail) != 0)
    return false;
  *prefix_len = n - t;
  return true;
}

/* The head_dim of the module's meta, or 0. */
static int64_t meta_head_dim(const AmkModule *m) {
  int64_t hd = 0;
  const AmkValue *v = amk_object_get(&m->meta, "head_dim");
  return v && amk_value_as_int(v, &hd) && hd > 0 ? hd : 0;
}

/* Every head row of every KV cache of the plan; false, after reporting,
 * for a cache of no layout named above. */
static bool slots_of(const AmkPlan *plan, KvSlots *out, AmkDiagEngine *diag) {
  const AmkModule *m = plan->m;
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    if (pb->kind != AMK_KIND_KV_CACHE)
      continue;
    const char *name = m->buffers[b].name;
    const int64_t *d = pb->shape;
    size_t plen = 0;
    const char *dot_h = strstr(name, "kv_cache.h");
    char *end = NULL;
    long long head = -1;
    if (dot_h && dot_h[10] >= '0' && dot_h[10] <= '9') {
      head = strtoll(dot_h + 10, &end, 10);
      if (*end)
        head = -1;
    }
    bool pair = pb->rank == 3 && (ends_with(name, "kcache", &plen) ||
                                  ends_with(name, "vcache", &plen));
    if (pair) {
      /* [max_seq, n_kv, head_dim], one plane */
      int plane = name[plen] == 'v';
      for (int64_t h = 0; h < d[1]; h++)
        add_slot(out, (KvSlot){name, plen, plane, h, b, h * d[2], d[1] * d[2], d[2]});
    } else if (head >= 0 && pb->rank == 3 && d[1] == 2) {
      /* [max_seq, 2, head_dim] of one KV head */
      plen = (size_t)(dot_h - name);
      for (int p = 0; p < 2; p++)
        add_slot(out, (KvSlot){name, plen, p, head, b, p * d[2], 2 * d[2], d[2]});
    } else if (ends_with(name, "kv_cache", &plen) && pb->rank == 3 && d[1] == 2 &&
               meta_head_dim(m) > 0 && d[2] % meta_head_dim(m) == 0) {
      /* [max_seq, 2, n_kv * head_dim] */
      int64_t hd = meta_head_dim(m);
      for (int p = 0; p < 2; p++)
        for (int64_t h = 0; h < d[2] / hd; h++)
          add_slot(out, (KvSlot){name, plen, p, h, b, p * d[2] + h * hd, 2 * d[2], hd});
    } else {
      amk_error(diag, no_loc,
                "KV cache '%s' is none of the layouts KV rows are copied between (P.kcache "
                "and P.vcache [max_seq, n_kv, head_dim], P.kv_cache.hC [max_seq, 2, head_dim], "
                "P.kv_cache [max_seq, 2, n_kv * head_dim])",
                name);
      return false;
    }
  }
  return true;
}

void amk_kv_map_free(AmkKvMap *map) {
  if (!map)
    return;
  free(map->to.at);
  free(map->from.at);
  free(map);
}

AmkKvMap *amk_kv_map_new(const AmkPlan *to, const AmkPlan *from, AmkDiagEngine *diag) {
  KvSlots t = {0}, f = {0};
  AmkKvMap *map = amk_xcalloc(1, sizeof *map);
  bool ok = slots_of(to, &t, diag) && slots_of(from, &f, diag);
  for (uint32_t i = 0; ok && i < t.n; i++) {
    const KvSlot *a = &t.at[i];
    const KvSlot *match = NULL;
    for (uint32_t j = 0; j < f.n && !match; j++) {
      const KvSlot *b = &f.at[j];
      if (b->plane == a->plane && b->head == a->head && b->prefix_len == a->prefix_len &&
          strncmp(b->prefix, a->prefix, a->prefix_len) == 0)
        match = b;
    }
    const AmkPlanBuffer *tb = &to->buffers[a->buffer];
    const AmkPlanBuffer *fb = match ? &from->buffers[match->buffer] : NULL;
    if (!match || match->width != a->width || fb->dtype != tb->dtype ||
        fb->shape[0] != tb->shape[0]) {
      amk_error(diag, no_loc,
                "KV cache '%s' (layer '%.*s', %s of KV head %" PRId64 ") has %s in the other "
                "program",
                to->m->buffers[a->buffer].name, (int)a->prefix_len, a->prefix,
                a->plane ? "values" : "keys", a->head,
                !match ? "no counterpart" : "a counterpart of another head size, dtype or length");
      ok = false;
      break;
    }
    add_slot(&map->to, *a);
    add_slot(&map->from, *match);
    map->elem_bytes = amk_dtype_nbytes(tb->dtype, 1);
  }
  free(t.at);
  free(f.at);
  if (!ok) {
    amk_kv_map_free(map);
    return NULL;
  }
  return map;
}

bool amk_kv_same_caches(const AmkPlan *a, const AmkPlan *b) {
  for (int side = 0; side < 2; side++) {
    const AmkPlan *x = side ? b : a, *y = side ? a : b;
    for (uint32_t i = 0; i < x->n_buffers; i++) {
      if (x->buffers[i].kind != AMK_KIND_KV_CACHE)
        continue;
      bool found = false;
      for (uint32_t j = 0; j < y->n_buffers && !found; j++)
        found = y->buffers[j].kind == AMK_KIND_KV_CACHE &&
                strcmp(x->m->buffers[i].name, y->m->buffers[j].name) == 0 &&
                x->buffers[i].nbytes == y->buffers[j].nbytes &&
                x->buffers[i].dtype == y->buffers[j].dtype;
      if (!found)
        return false;
    }
  }
  return true;
}

/* The bytes of a slot's buffer, checked to hold rows [0, row_end). */
static char *slot_bytes(AmkEngine *e, const KvSlot *s, int64_t row_end, int64_t elem,
                        AmkDiagEngine *diag) {
  size_t nbytes = 0;
  char *data = amk_engine_kv_data(e, s->buffer, &nbytes);
  if (!data) {
    amk_error(diag, no_loc, "the %s engine keeps no host copy of its KV caches to copy rows of",
              amk_engine_name(e));
    return NULL;
  }
  if ((int64_t)nbytes < row_end * s->stride * elem) {
    amk_error(diag, no_loc, "KV rows up to %" PRId64 " are beyond KV cache '%s'", row_end,
              amk_engine_plan(e)->m->buffers[s->buffer].name);
    return NULL;
  }
  return data;
}

bool amk_engine_copy_kv_rows(const AmkKvMap *map, AmkEngine *to, AmkEngine *from,
                             int64_t row_begin, int64_t row_end, AmkDiagEngine *diag) {
  int64_t elem = map->elem_bytes;
  size_t unused;
  if (!amk_engine_kv_data(to, map->to.n ? map->to.at[0].buffer : 0, &unused) &&
      amk_engine_copies_kv_on_device(to, from)) {
    /* Caches on the device: the same pieces, in bytes, copied there. */
    AmkKvRowCopy *copies = amk_xcalloc(map->to.n ? map->to.n : 1, sizeof *copies);
    for (uint32_t i = 0; i < map->to.n; i++) {
      const KvSlot *t = &map->to.at[i], *f = &map->from.at[i];
      copies[i] = (AmkKvRowCopy){.to_buffer = t->buffer, .from_buffer = f->buffer,
                                 .to_pitch = t->stride * elem, .to_offset = t->offset * elem,
                                 .from_pitch = f->stride * elem,
                                 .from_offset = f->offset * elem, .width = t->width * elem};
    }
    bool ok = amk_engine_copy_kv_device(to, from, copies, map->to.n, row_begin, row_end, diag);
    free(copies);
    return ok;
  }
  for (uint32_t i = 0; i < map->to.n; i++) {
    const KvSlot *t = &map->to.at[i], *f = &map->from.at[i];
    char *dst = slot_bytes(to, t, row_end, elem, diag);
    const char *src = dst ? slot_bytes(from, f, row_end, elem, diag) : NULL;
    if (!src)
      return false;
    for (int64_t r = row_begin; r < row_end; r++)
      memcpy(dst + (r * t->stride + t->offset) * elem, src + (r * f->stride + f->offset) * elem,
             (size_t)(t->width * elem));
  }
  return true;
}

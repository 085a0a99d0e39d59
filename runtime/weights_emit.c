/* Writing a plan's weights as a checkpoint (amk_weights_emit, amk/weights.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "amk/builder.h"
#include "amk/path.h"
#include "amk/safetensors.h"
#include "amk/weights.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

/* The safetensors encoding of an IR dtype; i4 is written as its packed
 * bytes (u8, two columns a byte), as the reference stores int4 weights.
 * -1 when safetensors has none. */
static int st_dtype_of(AmkDType d) {
  switch (d) {
  case AMK_DTYPE_F32: return AMK_ST_F32;
  case AMK_DTYPE_F16: return AMK_ST_F16;
  case AMK_DTYPE_BF16: return AMK_ST_BF16;
  case AMK_DTYPE_F8E4M3: return AMK_ST_F8_E4M3;
  case AMK_DTYPE_F8E5M2: return AMK_ST_F8_E5M2;
  case AMK_DTYPE_I32: return AMK_ST_I32;
  case AMK_DTYPE_I8: return AMK_ST_I8;
  case AMK_DTYPE_I4: return AMK_ST_U8;
  case AMK_DTYPE_U8: return AMK_ST_U8;
  case AMK_DTYPE_BOOL: return AMK_ST_BOOL;
  case AMK_DTYPE_COUNT: break;
  }
  return -1;
}

static bool same_tensor(const AmkStWriteTensor *a, const AmkStWriteTensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes)
    return false;
  for (uint32_t d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d])
      return false;
  return a->data == b->data || memcmp(a->data, b->data, a->nbytes) == 0;
}

static int find_tensor(const AmkStWriteTensor *t, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(t[i].name, name) == 0)
      return (int)i;
  return -1;
}

bool amk_weights_emit(AmkModule *m, const AmkPlan *plan, const AmkWeights *w, const char *dir,
                      const char *const *metadata, AmkDiagEngine *diag) {
  if (!amk_is_directory(dir) && mkdir(dir, 0777) != 0) {
    amk_error(diag, no_loc(), "cannot create the weights folder '%s': %s", dir, strerror(errno));
    return false;
  }
  AmkStWriteTensor *tensors = amk_xcalloc(plan->n_buffers ? plan->n_buffers : 1,
                                          sizeof *tensors);
  const char **key_of = amk_xcalloc(plan->n_buffers ? plan->n_buffers : 1, sizeof *key_of);
  size_t n = 0;
  bool ok = true;
  /* Scales after their weights: they are keyed after them. */
  for (int round = 0; round < 2 && ok; round++)
    for (uint32_t b = 0; b < plan->n_buffers && ok; b++) {
      const AmkPlanBuffer *pb = &plan->buffers[b];
      const AmkBuffer *buf = &m->buffers[b];
      if ((pb->kind != AMK_KIND_WEIGHT && pb->kind != AMK_KIND_CONST) || pb->synthetic ||
          (pb->quant.role == AMK_PLAN_QUANT_SCALES) != (round == 1))
        continue;
      size_t nbytes = 0;
      const void *data = amk_weights_data(w, b, &nbytes);
      int st = st_dtype_of(pb->dtype);
      if (!data || st < 0 || pb->rank > AMK_ST_MAX_RANK || pb->rank == 0) {
        amk_error(diag, no_loc(), "buffer '%s' (%s) has no bytes to write as a tensor",
                  buf->name, amk_dtype_text_name(pb->dtype));
        ok = false;
        break;
      }
      AmkStWriteTensor t = {.dtype = (AmkStDType)st, .rank = pb->rank, .data = data,
                            .nbytes = nbytes};
      memcpy(t.shape, pb->shape, pb->rank * sizeof *pb->shape);
      if (pb->dtype == AMK_DTYPE_I4) /* rows of packed bytes */
        t.shape[pb->rank - 1] = (int64_t)nbytes / (pb->numel / pb->shape[pb->rank - 1]);
      /* The key: the weights' key + ".scales" for quantized scales, else the
       * source when that is one key, else the buffer's name; a key another
       * buffer wrote with other bytes (a tied head quantized apart from the
       * embedding) gives way to the name. */
      /* Joined, sliced or transposed sources are written whole under the
       * buffer's name (their bytes are the buffer's, not KEY's). */
      const char *key = buf->source && !strpbrk(buf->source, "+[^") ? buf->source : buf->name;
      if (pb->quant.role == AMK_PLAN_QUANT_SCALES && key_of[pb->quant.partner])
        key = amk_arena_printf(&m->arena, "%s.scales", key_of[pb->quant.partner]);
      int other = find_tensor(tensors, n, key);
      t.name = key;
      if (other >= 0 && !same_tensor(&tensors[other], &t)) {
        char unique[512];
        snprintf(unique, sizeof unique, "%s", buf->name);
        for (int suffix = 2; find_tensor(tensors, n, unique) >= 0; suffix++)
          snprintf(unique, sizeof unique, "%s.%d", buf->name, suffix);
        t.name = key = amk_arena_strdup(&m->arena, unique);
        other = -1;
      }
      key_of[b] = key;
      if (!buf->source || strcmp(buf->source, key) != 0)
        m->buffers[b].source = key;
      if (other < 0)
        tensors[n++] = t;
    }
  if (ok) {
    char *path = amk_path_join(dir, "model.safetensors");
    ok = amk_safetensors_write(path, tensors, n, metadata, diag);
    free(path);
  }
  free(key_of);
  free(tensors);
  return ok;
}

/* Tensor-parallel facts of the IR (include/amk/tp.h). */
#include <string.h>

#include "amk/tp.h"

int64_t amk_task_tp_group(const AmkTask *t) {
  if (t->op != AMK_OP_ALLREDUCE_SHARD || !amk_task_param(t, AMK_TP_PARAM))
    return 0;
  int64_t n = 0;
  if (!amk_task_param_int(t, AMK_TP_PARAM, &n) || n < 1)
    return -1;
  return n >= 2 ? n : 0;
}

bool amk_module_tp(const AmkModule *m, int64_t *size, int64_t *rank) {
  const AmkValue *s = amk_object_get(&m->meta, "tp_size");
  const AmkValue *r = amk_object_get(&m->meta, "tp_rank");
  if (!s && !r)
    return false;
  int64_t sv = 0, rv = 0;
  if (!s || !r || !amk_value_as_int(s, &sv) || !amk_value_as_int(r, &rv) || sv < 1 ||
      sv > AMK_TP_MAX_RANKS || rv < 0 || rv >= sv) {
    *size = -1;
    return false;
  }
  *size = sv;
  *rank = rv;
  return true;
}

/* Reads "B:E" at *p (decimal, B < E), leaving *p after it. */
static bool parse_range(const char **p, int64_t *begin, int64_t *end) {
  int64_t v[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    if (**p < '0' || **p > '9')
      return false;
    while (**p >= '0' && **p <= '9') {
      if (v[i] > (INT64_MAX - 9) / 10)
        return false;
      v[i] = v[i] * 10 + (*(*p)++ - '0');
    }
    if (i == 0 && *(*p)++ != ':')
      return false;
  }
  if (v[0] >= v[1])
    return false;
  *begin = v[0];
  *end = v[1];
  return true;
}

bool amk_source_part_parse(const char *text, size_t len, AmkSourcePart *out) {
  out->row_begin = out->row_end = out->col_begin = out->col_end = -1;
  /* A transpose applies to the whole (sliced) part, so it can only come
   * last; the rest parses as an untransposed part. */
  const char *caret = memchr(text, '^', len);
  out->transpose = caret != NULL;
  if (caret) {
    if ((size_t)(caret - text) + 2 != len || caret[1] != 'T')
      return false;
    len -= 2;
  }
  const char *open = memchr(text, '[', len);
  size_t key_len = open ? (size_t)(open - text) : len;
  if (key_len == 0 || key_len >= sizeof out->key)
    return false;
  memcpy(out->key, text, key_len);
  out->key[key_len] = '\0';
  if (!open)
    return !memchr(text, ']', len);
  const char *p = open + 1, *stop = text + len;
  if (stop[-1] != ']' || memchr(p, '[', (size_t)(stop - p)))
    return false;
  if (*p == ':') {
    /* [:, C:D] */
    if (p[1] != ',' || p[2] != ' ')
      return false;
    p += 3;
    if (!parse_range(&p, &out->col_begin, &out->col_end))
      return false;
  } else {
    if (!parse_range(&p, &out->row_begin, &out->row_end))
      return false;
    if (*p == ',') {
      if (p[1] != ' ')
        return false;
      p += 2;
      if (!parse_range(&p, &out->col_begin, &out->col_end))
        return false;
    }
  }
  return p == stop - 1;
}

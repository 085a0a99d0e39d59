/* Param decoding: a task's params (or a FUSED step's) into AmkInstParams.
 * The dispatcher is dispatch.c; views and element access are tensor.c. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "inst_internal.h"

static int fail_plain(char *err, size_t err_len, int status, const char *fmt,
                      ...) AMK_PRINTF(4, 5);
static int fail_plain(char *err, size_t err_len, int status, const char *fmt,
                      ...) {
  if (err && err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return status;
}

/* The slot of a field, by the table's order. */
static AmkInstParamSlot *param_slot(AmkInstParams *p, AmkParamField field) {
  switch (field) {
#define X(name, type)                                                          \
  case AMK_PARAM_##name:                                                       \
    return &p->name;
    AMK_PARAMS(X)
#undef X
  default:
    return NULL;
  }
}

int amk_inst_params_set(AmkInstParams *p, const char *key, const AmkValue *v,
                        char *err, size_t err_len) {
  int field = amk_param_from_name(key);
  if (field < 0)
    return AMK_INST_OK; /* not marshalled: the caller interprets it */
  AmkInstParamSlot *slot = param_slot(p, (AmkParamField)field);
  if (amk_param_type((AmkParamField)field) == 'i') {
    int64_t i;
    double f;
    if (amk_value_as_int(v, &i)) {
      /* exact */
    } else if (v && v->kind == AMK_VALUE_FLOAT && amk_value_as_real(v, &f) &&
               f == floor(f) && fabs(f) < 4e9) {
      i = (int64_t)f; /* Python's int(2.0): integral floats are accepted */
    } else {
      return fail_plain(err, err_len, AMK_INST_ERR_PARAM,
                        "param '%s' must be an integer", key);
    }
    if (i < INT32_MIN || i > INT32_MAX)
      return fail_plain(err, err_len, AMK_INST_ERR_PARAM,
                        "param '%s' = %" PRId64 " does not fit int32", key, i);
    slot->i = (int32_t)i;
  } else {
    double f;
    if (!amk_value_as_real(v, &f))
      return fail_plain(err, err_len, AMK_INST_ERR_PARAM,
                        "param '%s' must be a number", key);
    slot->f = (float)f; /* the ABI marshals 'f' fields as fp32 */
  }
  p->present |= 1u << field;
  return AMK_INST_OK;
}

int amk_inst_params_from_task(const AmkTask *t, AmkInstParams *out, char *err,
                              size_t err_len) {
  memset(out, 0, sizeof *out);
  for (uint32_t i = 0; i < t->n_params; i++) {
    int rc = amk_inst_params_set(out, t->params[i].key, &t->params[i].value,
                                 err, err_len);
    if (rc)
      return rc;
  }
  return AMK_INST_OK;
}

int amk_inst_params_from_object(const AmkValue *obj, AmkInstParams *out,
                                char *err, size_t err_len) {
  memset(out, 0, sizeof *out);
  if (!obj || obj->kind == AMK_VALUE_NULL)
    return AMK_INST_OK;
  if (obj->kind != AMK_VALUE_OBJECT)
    return fail_plain(err, err_len, AMK_INST_ERR_PARAM,
                      "params must be an object");
  for (uint32_t i = 0; i < obj->count; i++) {
    int rc = amk_inst_params_set(out, obj->as.members[i].key,
                                 &obj->as.members[i].value, err, err_len);
    if (rc)
      return rc;
  }
  return AMK_INST_OK;
}


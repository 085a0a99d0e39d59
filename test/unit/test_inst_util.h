/* Helpers shared by the instruction-kernel unit tests. */
#ifndef AMK_TEST_INST_UTIL_H
#define AMK_TEST_INST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "amk/instructions.h"
#include "amk/numerics.h"
#include "unit.h"

static inline AmkTensorView view1(void *data, AmkDType dtype, int64_t n) {
  int64_t shape[1] = {n};
  return amk_tensor_view(data, dtype, 1, shape);
}

static inline AmkTensorView view2(void *data, AmkDType dtype, int64_t rows,
                                  int64_t cols) {
  int64_t shape[2] = {rows, cols};
  return amk_tensor_view(data, dtype, 2, shape);
}

static inline AmkTensorView view3(void *data, AmkDType dtype, int64_t a,
                                  int64_t b, int64_t c) {
  int64_t shape[3] = {a, b, c};
  return amk_tensor_view(data, dtype, 3, shape);
}

/* Set an int / float param through the public decoder. */
static inline void set_int(AmkInstParams *p, const char *key, int64_t v) {
  AmkValue value = amk_value_int(v);
  amk_inst_params_set(p, key, &value, NULL, 0);
}

static inline void set_float(AmkInstParams *p, const char *key, double v) {
  AmkValue value = amk_value_float(v);
  amk_inst_params_set(p, key, &value, NULL, 0);
}

/* Relative-or-absolute closeness for values computed with libm. */
static inline int near(float got, double want, double tol) {
  double diff = fabs((double)got - want);
  return diff <= tol || diff <= tol * fabs(want);
}

static inline int same_bits(const void *a, const void *b, size_t n) {
  return memcmp(a, b, n) == 0;
}

/* Run an op and return its status; the message goes to err. */
static inline int run_op(AmkOp op, const AmkInstParams *p, AmkTensorView *in,
                         uint32_t n_in, AmkTensorView *out, char *err,
                         size_t err_len) {
  return amk_inst_execute(op, p, in, n_in, out, 1, NULL, err, err_len);
}

/* CHECK that running `op` returns `want` (0 or an AMK_INST_ERR_ code); the
 * message is left in the caller's `err` array. */
#define CHECK_RUN(c, op, p, in, n_in, out, want)                               \
  CHECK(c, run_op(op, p, in, n_in, out, err, sizeof err) == (want))

#endif

/* Three-way comparisons for qsort comparators (support layer). */
#ifndef AMK_COMPARE_H
#define AMK_COMPARE_H

#include <stdint.h>

/* -1, 0 or 1 as a is below, equal to or above b. */
static inline int amk_compare_i64(int64_t a, int64_t b) {
  return (a > b) - (a < b);
}

static inline int amk_compare_u64(uint64_t a, uint64_t b) {
  return (a > b) - (a < b);
}

#endif

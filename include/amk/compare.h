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

/* Records ordered by a key and then, on a tie, by a second key: a against b
 * by (key, tie) pairs. */
static inline int amk_compare_i64_then(int64_t a_key, int64_t b_key, int64_t a_tie,
                                       int64_t b_tie) {
  int by_key = amk_compare_i64(a_key, b_key);
  return by_key ? by_key : amk_compare_i64(a_tie, b_tie);
}

#endif

/* A minimal unit-test harness: CHECK records a failure with file and line and
 * carries on; UNIT_MAIN_END prints "N passed, N failed" and sets the exit
 * status. */
#ifndef AMK_UNIT_H
#define AMK_UNIT_H

#include <stdio.h>
#include <string.h>

typedef struct {
  int passed, failed;
} UnitCounts;

#define CHECK(counts, cond)                                                    \
  do {                                                                         \
    if (cond) {                                                                \
      (counts)->passed++;                                                      \
    } else {                                                                   \
      (counts)->failed++;                                                      \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

#define CHECK_STR(counts, got, want)                                           \
  do {                                                                         \
    const char *got_ = (got), *want_ = (want);                                 \
    if (got_ && want_ && strcmp(got_, want_) == 0) {                           \
      (counts)->passed++;                                                      \
    } else {                                                                   \
      (counts)->failed++;                                                      \
      fprintf(stderr, "%s:%d: got \"%s\", want \"%s\"\n", __FILE__, __LINE__,  \
              got_ ? got_ : "(null)", want_ ? want_ : "(null)");               \
    }                                                                          \
  } while (0)

static inline int unit_finish(const char *name, const UnitCounts *c) {
  printf("%s: %d passed, %d failed\n", name, c->passed, c->failed);
  return c->failed ? 1 : 0;
}

typedef void (*UnitTest)(UnitCounts *);

/* Run the tests in order, then report as unit_finish does. */
static inline int unit_run(const char *name, const UnitTest *tests, size_t n) {
  UnitCounts c = {0, 0};
  for (size_t i = 0; i < n; i++)
    tests[i](&c);
  return unit_finish(name, &c);
}

/* The whole main of a test program made of UnitTest functions:
 * UNIT_MAIN("test_x", test_one, test_two) */
#define UNIT_MAIN(name, ...)                                                   \
  int main(void) {                                                             \
    static const UnitTest tests_[] = {__VA_ARGS__};                            \
    return unit_run(name, tests_, sizeof tests_ / sizeof tests_[0]);           \
  }

#endif

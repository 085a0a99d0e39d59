/* The NCCL loader (backend/nccl_api.c) refuses what it cannot use with a
 * reason a user can act on: a library that is not there (the one named by
 * AMK_NCCL_LIBRARY, with no silent fallback to another), and a library
 * that is not NCCL 2.27 or later (here libm: no ncclGetVersion at all). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../backend/nccl_api.h"

static int failures;

static void expect(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    failures++;
  }
}

static void refused(const char *library, const char *want1, const char *want2) {
  setenv("AMK_NCCL_LIBRARY", library, 1);
  AmkNccl n;
  char why[512] = "";
  bool opened = amk_nccl_open(&n, why, sizeof why);
  if (opened)
    amk_nccl_close(&n);
  printf("%s: %s\n", library, why);
  expect(!opened, "the library is refused");
  expect(strstr(why, want1) != NULL, want1);
  expect(strstr(why, want2) != NULL, want2);
  expect(n.handle == NULL, "nothing stays open after a refusal");
}

int main(void) {
  refused("/nonexistent/libnccl.so.2", "NCCL (libnccl.so.2) cannot be opened",
          "set AMK_NCCL_LIBRARY to its path");
  refused("libm.so.6", "libm.so.6 is NCCL 0.0.0",
          "the tensor-parallel group needs 2.27 or later");
  AmkNccl none;
  memset(&none, 0, sizeof none);
  char buf[128];
  expect(strcmp(amk_nccl_error_text(&none, 5, buf, sizeof buf), "NCCL error 5") == 0,
         "an error without the library is its number");
  printf("test_nccl_api: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}

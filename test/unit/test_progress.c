/* The progress line (support/progress.c): its text for each state (expected
 * strings written by hand), AMK_PROGRESS, and what reaches the stream: a
 * redraw with '\r', one newline at the end, nothing for work that ends
 * before the first draw. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amk/progress.h"
#include "unit.h"

static void test_sizes_and_durations(UnitCounts *c) {
  char b[64];
  amk_progress_format_bytes(b, sizeof b, 512);
  CHECK_STR(c, b, "512 B");
  amk_progress_format_bytes(b, sizeof b, 476416);
  CHECK_STR(c, b, "476.4 kB");
  amk_progress_format_bytes(b, sizeof b, 2471000000.0);
  CHECK_STR(c, b, "2.47 GB");
  amk_progress_format_bytes(b, sizeof b, 16060000000000.0);
  CHECK_STR(c, b, "16.06 TB");
  amk_progress_format_duration(b, sizeof b, 0.04);
  CHECK_STR(c, b, "0.0 s");
  amk_progress_format_duration(b, sizeof b, 1.26);
  CHECK_STR(c, b, "1.3 s");
  amk_progress_format_duration(b, sizeof b, 12.4);
  CHECK_STR(c, b, "12 s");
  amk_progress_format_duration(b, sizeof b, 187);
  CHECK_STR(c, b, "3m07s");
  amk_progress_format_duration(b, sizeof b, 3900);
  CHECK_STR(c, b, "1h05m");
  amk_progress_format_duration(b, sizeof b, -3);
  CHECK_STR(c, b, "0.0 s");
}

static void test_lines(UnitCounts *c) {
  char b[256];
  /* A quarter of 2 GB in 1 s: three more seconds at that rate. */
  amk_progress_format(b, sizeof b, "amk: loading weights", AMK_PROGRESS_BYTES, NULL, 500000000,
                      2000000000, 1.0, false);
  CHECK_STR(c, b, "amk: loading weights  25% (0.50 of 2.00 GB), 1.0 s, ETA 3.0 s");
  /* Nothing done yet: no rate, no ETA. */
  amk_progress_format(b, sizeof b, "amk: loading weights", AMK_PROGRESS_BYTES, NULL, 0,
                      2000000000, 0.3, false);
  CHECK_STR(c, b, "amk: loading weights   0% (0.00 of 2.00 GB), 0.3 s");
  /* 3 of 8 tokens in 6 s: 2 s each, 10 s to go; the percent rounds down. */
  amk_progress_format(b, sizeof b, "amk-run: prompt", AMK_PROGRESS_ITEMS, "tokens", 3, 8, 6.0,
                      false);
  CHECK_STR(c, b, "amk-run: prompt  37% (3 of 8 tokens), 6.0 s, ETA 10 s");
  amk_progress_format(b, sizeof b, "amk-run: prompt", AMK_PROGRESS_ITEMS, "tokens", 8, 8, 16.0,
                      true);
  CHECK_STR(c, b, "amk-run: prompt 100% (8 tokens) in 16 s");
  amk_progress_format(b, sizeof b, "amk: loading weights", AMK_PROGRESS_BYTES, NULL, 476416,
                      476416, 0.02, true);
  CHECK_STR(c, b, "amk: loading weights 100% (476.4 kB) in 0.0 s");
  /* Ended short of the total (an error part way). */
  amk_progress_format(b, sizeof b, "amk: loading weights", AMK_PROGRESS_BYTES, NULL, 100000,
                      476416, 0.5, true);
  CHECK_STR(c, b, "amk: loading weights  20% (100.0 of 476.4 kB), stopped after 0.5 s");
  /* More reported than the total is shown as the total. */
  amk_progress_format(b, sizeof b, "x", AMK_PROGRESS_ITEMS, "steps", 9, 8, 1.0, false);
  CHECK_STR(c, b, "x 100% (8 steps), 1.0 s, ETA 0.0 s");
  /* No total: the elapsed time only. */
  amk_progress_format(b, sizeof b, "amk: compiling the megakernel (NVRTC)", AMK_PROGRESS_ITEMS,
                      NULL, 0, 0, 2.5, false);
  CHECK_STR(c, b, "amk: compiling the megakernel (NVRTC)... 2.5 s");
  amk_progress_format(b, sizeof b, "amk: compiling the megakernel (NVRTC)", AMK_PROGRESS_ITEMS,
                      NULL, 0, 0, 75, true);
  CHECK_STR(c, b, "amk: compiling the megakernel (NVRTC)... done in 1m15s");
}

static void test_mode(UnitCounts *c) {
  FILE *f = tmpfile();
  setenv(AMK_PROGRESS_ENV, "always", 1);
  CHECK(c, amk_progress_mode() == AMK_PROGRESS_ALWAYS);
  CHECK(c, amk_progress_wanted(f));
  setenv(AMK_PROGRESS_ENV, "never", 1);
  CHECK(c, amk_progress_mode() == AMK_PROGRESS_NEVER);
  CHECK(c, !amk_progress_wanted(f));
  CHECK(c, amk_progress_begin_on(f, 0, "x", AMK_PROGRESS_ITEMS, "steps", 4) == NULL);
  /* auto, the default: a file is no terminal. */
  unsetenv(AMK_PROGRESS_ENV);
  CHECK(c, amk_progress_mode() == AMK_PROGRESS_AUTO);
  CHECK(c, !amk_progress_wanted(f));
  setenv(AMK_PROGRESS_ENV, "sometimes", 1);
  CHECK(c, amk_progress_mode() == AMK_PROGRESS_AUTO);
  CHECK(c, amk_progress_begin_on(f, 0, "x", AMK_PROGRESS_ITEMS, "steps", 4) == NULL);
  fclose(f);
}

/* What the stream holds (NUL-terminated, malloc'd). */
static char *contents(FILE *f) {
  fflush(f);
  long n = ftell(f);
  char *s = calloc(1, (size_t)n + 1);
  rewind(f);
  if (fread(s, 1, (size_t)n, f) != (size_t)n)
    s[0] = '\0';
  return s;
}

static size_t count_char(const char *s, char ch) {
  size_t n = 0;
  for (; *s; s++)
    n += *s == ch;
  return n;
}

/* The lines' clock: advanced by hand, so the times printed are known. */
static _Atomic long fake_ms = 100000;
static double fake_clock(void) { return (double)fake_ms / 1e3; }

static void test_stream(UnitCounts *c) {
  setenv(AMK_PROGRESS_ENV, "always", 1);
  amk_progress_set_clock(fake_clock);
  /* Drawn at the start, then the final state and one newline. */
  FILE *f = tmpfile();
  AmkProgress *p = amk_progress_begin_on(f, 0, "steps", AMK_PROGRESS_ITEMS, "steps", 4);
  CHECK(c, p != NULL);
  for (int i = 0; i < 4; i++)
    amk_progress_add(p, 1);
  fake_ms += 2000;
  amk_progress_end(p);
  char *s = contents(f);
  CHECK(c, strncmp(s, "\rsteps   0% (0 of 4 steps), 0.0 s", 33) == 0);
  /* padded over the longer line before it */
  CHECK(c, strstr(s, "\rsteps 100% (4 steps) in 2.0 s   \n") != NULL);
  CHECK(c, count_char(s, '\n') == 1 && s[strlen(s) - 1] == '\n');
  free(s);
  fclose(f);

  /* Work that ends before the first draw prints nothing. */
  f = tmpfile();
  p = amk_progress_begin_on(f, 30, "quick", AMK_PROGRESS_BYTES, NULL, 100);
  amk_progress_add(p, 100);
  amk_progress_end(p);
  s = contents(f);
  CHECK_STR(c, s, "");
  free(s);
  fclose(f);

  /* One long call: the helper thread redraws the elapsed time meanwhile
   * (every 0.25 s), each redraw over the last. */
  f = tmpfile();
  p = amk_progress_begin_on(f, 0, "compiling", AMK_PROGRESS_ITEMS, NULL, 0);
  fake_ms += 3500;
  nanosleep(&(struct timespec){1, 100000000}, NULL);
  fake_ms += 200;
  amk_progress_end(p);
  s = contents(f);
  CHECK(c, count_char(s, '\r') >= 4);
  CHECK(c, strstr(s, "\rcompiling... 0.0 s") == s);
  CHECK(c, strstr(s, "\rcompiling... 3.5 s") != NULL);
  CHECK(c, strstr(s, "\rcompiling... done in 3.7 s\n") != NULL);
  CHECK(c, count_char(s, '\n') == 1);
  free(s);
  fclose(f);

  /* A message meanwhile (as the diagnostics engine writes one) goes on a
   * line of its own, and the progress line carries on below it. */
  f = tmpfile();
  p = amk_progress_begin_on(f, 0, "load", AMK_PROGRESS_ITEMS, "parts", 2);
  amk_progress_add(p, 1);
  amk_progress_break_line(f);
  fputs("error: part 2 is bad\n", f);
  amk_progress_break_line(f); /* nothing open: nothing written */
  fake_ms += 500;
  amk_progress_end(p);
  s = contents(f);
  CHECK_STR(c, s, "\rload   0% (0 of 2 parts), 0.0 s\nerror: part 2 is bad\n"
                  "\rload  50% (1 of 2 parts), stopped after 0.5 s\n");
  free(s);
  fclose(f);

  /* NULL: nothing to do. */
  amk_progress_add(NULL, 3);
  amk_progress_end(NULL);
  amk_progress_set_clock(NULL);
  unsetenv(AMK_PROGRESS_ENV);
}

UNIT_MAIN("test_progress", test_sizes_and_durations, test_lines, test_mode, test_stream)

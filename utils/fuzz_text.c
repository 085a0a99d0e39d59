/* Fuzz and round-trip driver for the `.amkir` reader and printer.
 *
 *   fuzz_text FILE...                 check print -> parse -> print is a
 *                                     fixed point for each valid FILE
 *   fuzz_text -n RUNS -s SEED FILE... parse RUNS random mutations of the
 *                                     files (byte flips, inserts, deletes,
 *                                     truncations, spliced tokens); under
 *                                     ASan any crash or leak is a bug
 *
 * Exit status 0 when every check held. Parse errors of mutated inputs are
 * expected and silenced.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/diag.h"
#include "amk/io.h"
#include "amk/ir.h"

/* xorshift64*: reproducible from the seed, no global state */
static uint64_t next_random(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 2685821657736338717ULL;
}

static char *print_module(const AmkModule *m, size_t *len) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  amk_print_text(m, &sb);
  amk_sb_putc(&sb, 0);
  *len = sb.len - 1;
  return sb.data;
}

static int check_fixed_point(const char *path, const char *text, size_t len,
                             AmkDiagEngine *diag) {
  AmkModule *first = amk_parse_text(path, text, len, diag);
  if (!first) {
    fprintf(stderr, "%s: does not parse\n", path);
    return 1;
  }
  size_t printed_len, reprinted_len;
  char *printed = print_module(first, &printed_len);
  AmkModule *second = amk_parse_text(path, printed, printed_len, diag);
  int status = 0;
  if (!second) {
    fprintf(stderr, "%s: printed form does not parse:\n%s", path, printed);
    status = 1;
  } else {
    char *reprinted = print_module(second, &reprinted_len);
    if (printed_len != reprinted_len ||
        memcmp(printed, reprinted, printed_len) != 0) {
      fprintf(stderr, "%s: print is not a fixed point\n--- first\n%s--- second\n%s",
              path, printed, reprinted);
      status = 1;
    }
    free(reprinted);
    amk_module_free(second);
  }
  free(printed);
  amk_module_free(first);
  return status;
}

static const char *const splice_tokens[] = {
    "\"",  "\\",  "%",  "#",     "{",       "}",      "[",    "]",   "(",
    ")",   ",",   "=",  "->",    ">=",      "..",     ";",    "\n",  "-",
    "1e999", "99999999999999999999", "\\u12", "\\ud800", "task", "buffer",
    "signal", "page", "target", "\x00", "\xff", "nan", "-inf", "0.2.0",
};

static void mutate(char *buf, size_t *len, size_t cap, uint64_t *rng) {
  int edits = 1 + (int)(next_random(rng) % 4);
  for (int e = 0; e < edits; e++) {
    size_t at = *len ? next_random(rng) % *len : 0;
    switch (next_random(rng) % 5) {
    case 0: /* flip a byte */
      if (*len)
        buf[at] = (char)next_random(rng);
      break;
    case 1: /* delete a run */
      if (*len) {
        size_t n = 1 + next_random(rng) % 8;
        if (n > *len - at)
          n = *len - at;
        memmove(buf + at, buf + at + n, *len - at - n);
        *len -= n;
      }
      break;
    case 2: /* truncate */
      *len = at;
      break;
    default: { /* splice in a token */
      const char *tok =
          splice_tokens[next_random(rng) % (sizeof splice_tokens /
                                            sizeof splice_tokens[0])];
      size_t n = tok[0] ? strlen(tok) : 1;
      if (*len + n > cap)
        break;
      memmove(buf + at + n, buf + at, *len - at);
      memcpy(buf + at, tok, n);
      *len += n;
    }
    }
  }
}

int main(int argc, char **argv) {
  long runs = 0;
  uint64_t seed = 1;
  int first_file = 1;
  while (first_file + 1 < argc && argv[first_file][0] == '-') {
    if (strcmp(argv[first_file], "-n") == 0)
      runs = atol(argv[first_file + 1]);
    else if (strcmp(argv[first_file], "-s") == 0)
      seed = strtoull(argv[first_file + 1], NULL, 10);
    else
      break;
    first_file += 2;
  }
  if (first_file >= argc) {
    fprintf(stderr, "usage: fuzz_text [-n RUNS] [-s SEED] FILE...\n");
    return 2;
  }
  int failures = 0;
  AmkDiagEngine *loud = amk_diag_new(stderr);
  FILE *devnull = fopen("/dev/null", "w");
  AmkDiagEngine *quiet = amk_diag_new(devnull ? devnull : stderr);
  for (int f = first_file; f < argc; f++) {
    size_t len;
    char *text = amk_read_file(argv[f], &len, loud);
    if (!text) {
      failures++;
      continue;
    }
    amk_diag_set_source(loud, argv[f], text, len);
    if (runs == 0) {
      failures += check_fixed_point(argv[f], text, len, loud);
    } else {
      uint64_t rng = seed * 0x9E3779B97F4A7C15ULL + (uint64_t)f;
      size_t cap = len + 64;
      char *buf = malloc(cap);
      for (long r = 0; r < runs; r++) {
        size_t n = len;
        memcpy(buf, text, len);
        mutate(buf, &n, cap, &rng);
        amk_diag_set_source(quiet, argv[f], buf, n);
        AmkModule *m = amk_parse_text(argv[f], buf, n, quiet);
        if (m) {
          /* whatever parses must print and reparse to a fixed point */
          failures += check_fixed_point(argv[f], buf, n, loud);
          amk_module_free(m);
        }
      }
      free(buf);
    }
    amk_diag_set_source(loud, NULL, NULL, 0);
    free(text);
  }
  amk_diag_free(quiet);
  amk_diag_free(loud);
  if (devnull)
    fclose(devnull);
  return failures ? 1 : 0;
}

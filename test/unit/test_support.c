/* support/path.c, support/strutil.c and amk/compare.h: joining paths,
 * classifying them, string suffixes, UTF-8 decoding, three-way compares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amk/compare.h"
#include "amk/path.h"
#include "amk/strutil.h"
#include "unit.h"

static void check_join(UnitCounts *c, const char *dir, const char *name,
                       const char *want) {
  char *got = amk_path_join(dir, name);
  CHECK_STR(c, got, want);
  free(got);
}

static void test_join(UnitCounts *c) {
  check_join(c, "models/tiny", "config.json", "models/tiny/config.json");
  check_join(c, "models/tiny/", "config.json", "models/tiny/config.json");
  check_join(c, "/", "etc", "/etc");
  check_join(c, "", "config.json", "config.json");
  check_join(c, "dir", "", "dir/");
}

static void test_kinds(UnitCounts *c) {
  char dir[] = "/tmp/amk-path-XXXXXX";
  CHECK(c, mkdtemp(dir) != NULL);
  char *file = amk_path_join(dir, "file");
  FILE *f = fopen(file, "w");
  CHECK(c, f != NULL);
  if (f)
    fclose(f);
  char *missing = amk_path_join(dir, "missing");
  CHECK(c, amk_is_directory(dir) && !amk_is_regular_file(dir));
  CHECK(c, amk_is_regular_file(file) && !amk_is_directory(file));
  CHECK(c, amk_path_exists(dir) && amk_path_exists(file));
  CHECK(c, !amk_path_exists(missing) && !amk_is_directory(missing) &&
               !amk_is_regular_file(missing));
  /* A FIFO is there but not regular: callers must not take it for absent. */
  char *fifo = amk_path_join(dir, "fifo");
  CHECK(c, mkfifo(fifo, 0600) == 0);
  CHECK(c, amk_path_kind(fifo) == AMK_PATH_OTHER);
  CHECK(c, amk_path_kind(file) == AMK_PATH_REGULAR_FILE);
  CHECK(c, amk_path_kind(dir) == AMK_PATH_DIRECTORY);
  CHECK(c, amk_path_kind(missing) == AMK_PATH_ABSENT);
  struct stat sb;
  CHECK(c, stat(fifo, &sb) == 0);
  CHECK_STR(c, amk_file_type_name(sb.st_mode), "a FIFO");
  CHECK(c, stat(dir, &sb) == 0);
  CHECK_STR(c, amk_file_type_name(sb.st_mode), "a directory");
  remove(fifo);
  remove(file);
  rmdir(dir);
  free(fifo);
  free(file);
  free(missing);
}

static void test_ends_with(UnitCounts *c) {
  CHECK(c, amk_str_ends_with("model.safetensors.index.json", ".json"));
  CHECK(c, amk_str_ends_with("x.bias", "x.bias"));
  CHECK(c, amk_hex_digit('0') == 0 && amk_hex_digit('9') == 9 && amk_hex_digit('a') == 10 &&
               amk_hex_digit('F') == 15 && amk_hex_digit('g') == -1 && amk_hex_digit('/') == -1);
  CHECK(c, amk_str_ends_with("anything", ""));
  CHECK(c, !amk_str_ends_with("json", ".json"));
  CHECK(c, !amk_str_ends_with("a.jsonl", ".json"));
}

/* Decode all of `bytes` as one sequence: its length, or 0. */
static size_t decode(const char *bytes, uint32_t *cp) {
  const unsigned char *p = (const unsigned char *)bytes;
  return amk_utf8_decode(p, p + strlen(bytes), cp);
}

static void test_utf8(UnitCounts *c) {
  uint32_t cp = 0;
  CHECK(c, decode("A", &cp) == 1 && cp == 'A');
  CHECK(c, decode("\xc3\xa9", &cp) == 2 && cp == 0xE9);
  CHECK(c, decode("\xe2\x82\xac", &cp) == 3 && cp == 0x20AC);
  CHECK(c, decode("\xf0\x9f\x98\x80", &cp) == 4 && cp == 0x1F600);
  CHECK(c, decode("\xc3\x28", &cp) == 0);         /* bad continuation */
  CHECK(c, decode("\xc0\xaf", &cp) == 0);         /* overlong '/' */
  CHECK(c, decode("\xed\xa0\x80", &cp) == 0);     /* surrogate D800 */
  CHECK(c, decode("\xf4\x90\x80\x80", &cp) == 0); /* past U+10FFFF */
  CHECK(c, decode("\xe2\x82", &cp) == 0);         /* truncated */
  CHECK(c, decode("\xff", &cp) == 0);
  CHECK(c, decode("", &cp) == 0);
}

static void test_compare(UnitCounts *c) {
  CHECK(c, amk_compare_i64(-5, 3) == -1 && amk_compare_i64(3, -5) == 1 &&
               amk_compare_i64(7, 7) == 0);
  CHECK(c, amk_compare_i64(INT64_MIN, INT64_MAX) == -1);
  CHECK(c, amk_compare_u64(UINT64_MAX, 0) == 1 && amk_compare_u64(0, 1) == -1 &&
               amk_compare_u64(9, 9) == 0);
  CHECK(c, amk_compare_i64_then(1, 2, 9, 0) == -1 && amk_compare_i64_then(2, 1, 0, 9) == 1 &&
               amk_compare_i64_then(4, 4, 0, 9) == -1 && amk_compare_i64_then(4, 4, 9, 9) == 0);
}

UNIT_MAIN("test_support", test_join, test_kinds, test_ends_with, test_utf8,
          test_compare)

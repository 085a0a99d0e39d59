/* support/path.c and support/strutil.c: joining paths, classifying them, and
 * string suffixes. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
  remove(file);
  rmdir(dir);
  free(file);
  free(missing);
}

static void test_ends_with(UnitCounts *c) {
  CHECK(c, amk_str_ends_with("model.safetensors.index.json", ".json"));
  CHECK(c, amk_str_ends_with("x.bias", "x.bias"));
  CHECK(c, amk_str_ends_with("anything", ""));
  CHECK(c, !amk_str_ends_with("json", ".json"));
  CHECK(c, !amk_str_ends_with("a.jsonl", ".json"));
}

UNIT_MAIN("test_path", test_join, test_kinds, test_ends_with)

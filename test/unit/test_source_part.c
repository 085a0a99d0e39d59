/* amk_source_part_parse (include/amk/tp.h): one part of a weight buffer's
 * source, KEY with optional row and column ranges and an optional
 * trailing ^T (the sliced matrix transposed). */
#include <stdbool.h>
#include <string.h>

#include "amk/tp.h"
#include "unit.h"

static bool parse(const char *text, AmkSourcePart *out) {
  return amk_source_part_parse(text, strlen(text), out);
}

/* `text` parses to key, ranges (-1 where not given) and transpose. */
static bool parses_to(const char *text, const char *key, int64_t rb, int64_t re, int64_t cb,
                      int64_t ce, bool transpose) {
  AmkSourcePart sp;
  memset(&sp, 0x5a, sizeof sp); /* no field may keep a stale value */
  return parse(text, &sp) && strcmp(sp.key, key) == 0 && sp.row_begin == rb &&
         sp.row_end == re && sp.col_begin == cb && sp.col_end == ce && sp.transpose == transpose;
}

static bool malformed(const char *text) {
  AmkSourcePart sp;
  return !parse(text, &sp);
}

static void test_plain_forms(UnitCounts *c) {
  CHECK(c, parses_to("a.b", "a.b", -1, -1, -1, -1, false));
  CHECK(c, parses_to("a[0:4]", "a", 0, 4, -1, -1, false));
  CHECK(c, parses_to("a[:, 2:6]", "a", -1, -1, 2, 6, false));
  CHECK(c, parses_to("a[0:4, 2:6]", "a", 0, 4, 2, 6, false));
  CHECK(c, malformed(""));
  CHECK(c, malformed("a[4:4]"));
  CHECK(c, malformed("a]"));
  CHECK(c, malformed("a[0:4"));
}

static void test_transposed_forms(UnitCounts *c) {
  CHECK(c, parses_to("a.b^T", "a.b", -1, -1, -1, -1, true));
  CHECK(c, parses_to("a[0:4]^T", "a", 0, 4, -1, -1, true));
  CHECK(c, parses_to("a[:, 2:6]^T", "a", -1, -1, 2, 6, true));
  CHECK(c, parses_to("a[0:4, 2:6]^T", "a", 0, 4, 2, 6, true));
  CHECK(c, parses_to("model.layers.0.mlp.down_proj.weight^T",
                     "model.layers.0.mlp.down_proj.weight", -1, -1, -1, -1, true));
  /* A part of a '+'-joined source: len stops before the '+'. */
  const char *joined = "a^T+b";
  AmkSourcePart sp;
  CHECK(c, amk_source_part_parse(joined, 3, &sp) && strcmp(sp.key, "a") == 0 && sp.transpose);
  CHECK(c, amk_source_part_parse(joined + 4, 1, &sp) && strcmp(sp.key, "b") == 0 &&
               !sp.transpose);
}

static void test_malformed_transposes(UnitCounts *c) {
  CHECK(c, malformed("a^"));
  CHECK(c, malformed("a^X"));
  CHECK(c, malformed("a^TT"));
  CHECK(c, malformed("a^T[0:4]"));
  CHECK(c, malformed("a[0:4]^"));
  CHECK(c, malformed("a[0:4]^t"));
  CHECK(c, malformed("a^T^T"));
  CHECK(c, malformed("^T"));
  CHECK(c, malformed("a[4:2]^T"));
  CHECK(c, malformed("a[0:4] ^T"));
}

UNIT_MAIN("test_source_part", test_plain_forms, test_transposed_forms, test_malformed_transposes)

/* amk_json_check_strict: JSON that cJSON accepts but Python's json reads
 * otherwise (or refuses) is refused with the key path; the rest passes. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/json_strict.h"
#include "unit.h"

/* Parses `len` bytes of `text` with cJSON and checks them. Returns the
 * check's verdict; `message` gets the first error (or ""). cJSON must accept
 * the text: the cases below are all ones it does. */
static bool check_text(UnitCounts *c, const char *text, size_t len,
                       AmkJsonTrailing trailing, char *message,
                       size_t message_size) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  CHECK(c, root != NULL);
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  bool ok = amk_json_check_strict("f.json", text, len, end, root, trailing, d);
  message[0] = '\0';
  if (amk_diag_captured_count(d) > 0)
    snprintf(message, message_size, "%s", amk_diag_captured(d, 0)->message);
  CHECK(c, ok == (amk_diag_captured_count(d) == 0));
  amk_diag_free(d);
  cJSON_Delete(root);
  return ok;
}

static void expect_ok(UnitCounts *c, const char *text, AmkJsonTrailing trailing) {
  char message[512];
  bool ok = check_text(c, text, strlen(text), trailing, message, sizeof message);
  if (!ok)
    fprintf(stderr, "expected %s to pass; got: %s\n", text, message);
  CHECK(c, ok);
}

/* `len` 0: strlen(text). */
static void expect_refused(UnitCounts *c, const char *text, size_t len,
                           AmkJsonTrailing trailing, const char *want) {
  char message[512];
  bool ok = check_text(c, text, len ? len : strlen(text), trailing, message,
                       sizeof message);
  CHECK(c, !ok);
  CHECK_STR(c, message, want);
}

static void test_accepted(UnitCounts *c) {
  const AmkJsonTrailing ws = AMK_JSON_TRAILING_WHITESPACE;
  expect_ok(c, "{}", ws);
  expect_ok(c, " \t\r\n{\"a\": [1, -0.5e+3, 0, 10E2, true, null]}\n\t ", ws);
  expect_ok(c, "{\"a\": {\"x\": 1}, \"b\": {\"x\": 2}}", ws); /* same key, two objects */
  expect_ok(c, "{\"a\\\\u0000\": \"\\\\u0000\"}", ws);        /* an escaped backslash */
  expect_ok(c, "{\"tab\\there\": \"\\u00e9\\n\"}", ws);
  expect_ok(c, "[{\"a\": 1}, {\"a\": 2}]", ws);
  expect_ok(c, "{\"a\": 1}    ", AMK_JSON_TRAILING_SPACES);
}

/* A key given twice: what the check says after the key's path. */
#define DUP_TAIL " (Python's json would keep the last value; refusing rather than guessing)"

/* Text cJSON accepts and the check refuses, with the first error (`len` 0:
 * strlen(text)). Keys are compared decoded. */
static const struct {
  const char *text;
  size_t len;
  AmkJsonTrailing trailing;
  const char *want;
} refused_cases[] = {
    {"{\"a\": 1, \"b\": 2, \"a\": 3}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: duplicate key 'a'" DUP_TAIL},
    {"{\"a\": 1, \"\\u0061\": 3}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: duplicate key 'a'" DUP_TAIL},
    {"{\"r\": {\"s\": [{}, {\"t\": 1, \"t\": 1}]}}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: duplicate key 'r.s[1].t'" DUP_TAIL},
    {"{\"a\": 1} x", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: unexpected text after the JSON value (at byte 9 of 10)"},
    {"{\"a\": 1}{}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: unexpected text after the JSON value (at byte 8 of 10)"},
    {"{\"a\": 1}\n", 0, AMK_JSON_TRAILING_SPACES,
     "f.json: unexpected byte 0x0a after the JSON object (at byte 8 of 9); only spaces may pad it"},
    {"{\"a\": 1}  \0", 11, AMK_JSON_TRAILING_SPACES,
     "f.json: unexpected byte 0x00 after the JSON object (at byte 10 of 11); only spaces may pad it"},
    {"{\"model_type\": \"llama\\u0000x\"}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: 'model_type': a string holding U+0000 (\\u0000) is not supported"},
    {"{\"a\": [\"ok\", {\"k\\u0000\": 1}]}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: 'a[1].k\\u0000': a string holding U+0000 (\\u0000) is not supported"},
    {"{\"a\": \"x\0y\"}", 12, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: 'a': raw control character 0x00 in a string (JSON needs it escaped)"},
    {"{\"a\": \"x\ty\"}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: 'a': raw control character 0x09 in a string (JSON needs it escaped)"},
    {"{\"a\": 01}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: 'a': number '01' is not valid JSON"},
    {"{\"a\": [1, 2.]}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: 'a[1]': number '2.' is not valid JSON"},
    {"\xef\xbb\xbf{}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: byte 0xef at offset 0 is not allowed between JSON tokens"},
    {"{\"a\":\f1}", 0, AMK_JSON_TRAILING_WHITESPACE,
     "f.json: 'a': byte 0x0c at offset 5 is not allowed between JSON tokens"},
};

static void test_refused(UnitCounts *c) {
  for (size_t i = 0; i < sizeof refused_cases / sizeof refused_cases[0]; i++)
    expect_refused(c, refused_cases[i].text, refused_cases[i].len, refused_cases[i].trailing,
                   refused_cases[i].want);
}

UNIT_MAIN("test_json_strict", test_accepted, test_refused)

/* Reading the reference's JSON on-disk form.
 *
 * cJSON builds the tree, but it cannot tell 64 from 64.0 and keeps no
 * positions, while the reference's behaviour depends on the former and our
 * messages need the latter. So a small lexer first checks the text against
 * Python's json grammar (cJSON is looser), and then every cJSON node is paired
 * with the byte offset of its token by walking tree and text together in
 * document order. The offset is kept in the node's `valueint`, which cJSON
 * only uses as a copy of a number's value and which this file never reads
 * otherwise; numbers are then re-read from their lexeme.
 *
 * Semantics follow the reference's from_dict: missing optional keys take its
 * defaults, unknown keys are dropped, duplicate keys keep the last value at
 * the first key's position (as a Python dict does).
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "amk/builder.h"
#include "amk/io.h"
#include "amk/strutil.h"

/* ---- the reader's state ----------------------------------------------------- */

/* One step of a JSON path: `.key` or `[index]`. */
typedef struct {
  const char *key; /* NULL: an index */
  size_t index;
} PathSegment;

/* Records nest a handful of levels; deeper values are never checked. */
enum { PATH_DEPTH = 16 };

typedef struct {
  const char *text; /* as given */
  size_t len;
  char *patched;    /* NUL-terminated copy handed to cJSON (see patch_token) */
  AmkDiagEngine *diag;
  AmkModule *module;
  /* The JSON path of the value being read, for messages; only rendered
   * when an error is reported. */
  PathSegment path[PATH_DEPTH];
  size_t path_len;
  /* Offsets are turned into line:col by walking forward from the last one
   * asked for; records are read in document order, so this stays linear. */
  size_t cursor_offset;
  uint32_t cursor_line, cursor_col;
} Reader;

static AmkLoc loc_at(Reader *r, size_t offset) {
  if (offset < r->cursor_offset) {
    r->cursor_offset = 0;
    r->cursor_line = 1;
    r->cursor_col = 1;
  }
  if (offset > r->len)
    offset = r->len;
  const char *p = r->text + r->cursor_offset;
  const char *end = r->text + offset;
  uint32_t line = r->cursor_line, col = r->cursor_col;
  const char *newline;
  while ((newline = memchr(p, '\n', (size_t)(end - p))) != NULL) {
    line++;
    col = 1;
    p = newline + 1;
  }
  col += (uint32_t)(end - p);
  r->cursor_offset = offset;
  r->cursor_line = line;
  r->cursor_col = col;
  AmkLoc loc = {line, col};
  return loc;
}

static size_t node_offset(const cJSON *node) { return (size_t)node->valueint; }

static AmkLoc node_loc(Reader *r, const cJSON *node) {
  return loc_at(r, node_offset(node));
}

/* An error at `offset`, prefixed by the current JSON path when there is one. */
AMK_PRINTF(3, 4)
static bool error_at(Reader *r, size_t offset, const char *fmt, ...) {
  char message[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  char path[256];
  size_t used = 0;
  path[0] = '\0';
  for (size_t i = 0; i < r->path_len && used < sizeof path; i++) {
    const PathSegment *seg = &r->path[i];
    int n = seg->key ? snprintf(path + used, sizeof path - used, "%s%s", i ? "." : "", seg->key)
                     : snprintf(path + used, sizeof path - used, "[%zu]", seg->index);
    if (n < 0)
      break;
    used += (size_t)n;
  }
  AmkLoc loc = loc_at(r, offset);
  if (r->path_len)
    amk_error(r->diag, loc, "%s: %s", path, message);
  else
    amk_error(r->diag, loc, "%s", message);
  return false;
}

#define node_error(r, node, ...) error_at((r), node_offset(node), __VA_ARGS__)

/* ---- JSON paths ------------------------------------------------------------- */

static size_t path_push_key(Reader *r, const char *key) {
  size_t saved = r->path_len;
  AMK_ASSERT(saved < PATH_DEPTH);
  r->path[r->path_len++] = (PathSegment){key, 0};
  return saved;
}

static size_t path_push_index(Reader *r, size_t index) {
  size_t saved = r->path_len;
  AMK_ASSERT(saved < PATH_DEPTH);
  r->path[r->path_len++] = (PathSegment){NULL, index};
  return saved;
}

static void path_pop(Reader *r, size_t saved) { r->path_len = saved; }

/* ---- the lexer: Python's json grammar --------------------------------------- */

static bool is_json_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_punctuation(char c) {
  return c == '{' || c == '}' || c == '[' || c == ']' || c == ':' || c == ',';
}
/* The characters cJSON takes into a number token. */
static bool is_number_char(char c) {
  return is_digit(c) || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
}

/* Length of a well-formed number at p (-?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?),
 * or 0 when there is none. */
static size_t number_length(const char *p, const char *end) {
  const char *q = p;
  if (q < end && *q == '-')
    q++;
  if (q >= end || !is_digit(*q))
    return 0;
  if (*q == '0') {
    q++;
  } else {
    while (q < end && is_digit(*q))
      q++;
  }
  if (q < end && *q == '.') {
    if (q + 1 >= end || !is_digit(q[1]))
      return 0;
    q++;
    while (q < end && is_digit(*q))
      q++;
  }
  if (q < end && (*q == 'e' || *q == 'E')) {
    const char *e = q + 1;
    if (e < end && (*e == '+' || *e == '-'))
      e++;
    if (e >= end || !is_digit(*e))
      return 0;
    while (e < end && is_digit(*e))
      e++;
    q = e;
  }
  return (size_t)(q - p);
}

/* Length of a strict UTF-8 sequence at p, or 0. */
static size_t utf8_length(const char *p, const char *end) {
  uint32_t code_point;
  return amk_utf8_decode((const unsigned char *)p, (const unsigned char *)end,
                         &code_point);
}

static long read_hex4(const char *p, const char *end) {
  if (end - p < 4)
    return -1;
  long v = 0;
  for (int i = 0; i < 4; i++) {
    int h = amk_hex_digit(p[i]);
    if (h < 0)
      return -1;
    v = v * 16 + h;
  }
  return v;
}

/* Checks the string token starting at the quote at `start`; returns the
 * offset just past the closing quote, or 0 after reporting an error. Strings
 * cJSON would turn into something we cannot hold (a NUL, an unpaired
 * surrogate) are refused here with a clear message. */
static size_t lex_string(Reader *r, size_t start) {
  const char *text = r->text, *end = r->text + r->len;
  const char *p = text + start + 1;
  while (p < end) {
    unsigned char c = (unsigned char)*p;
    if (c == '"')
      return (size_t)(p + 1 - text);
    if (c < 0x20)
      return error_at(r, (size_t)(p - text),
                      "malformed JSON: invalid control character in string"),
             0;
    if (c >= 0x80) {
      size_t n = utf8_length(p, end);
      if (n == 0)
        return error_at(r, (size_t)(p - text), "invalid UTF-8 in string"), 0;
      p += n;
      continue;
    }
    if (c != '\\') {
      p++;
      /* Most string bytes are plain ASCII: skip them in a tight loop. */
      while (p < end && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80 &&
             *p != '"' && *p != '\\')
        p++;
      continue;
    }
    if (p + 1 >= end)
      break;
    char esc = p[1];
    if (esc != '\0' && strchr("\"\\/bfnrt", esc)) {
      p += 2;
      continue;
    }
    if (esc != 'u')
      return error_at(r, (size_t)(p - text),
                      "malformed JSON: invalid escape '\\%c' in string", esc),
             0;
    long unit = read_hex4(p + 2, end);
    if (unit < 0)
      return error_at(r, (size_t)(p - text),
                      "malformed JSON: invalid \\u escape in string"),
             0;
    if (unit == 0)
      return error_at(r, (size_t)(p - text),
                      "strings containing \\u0000 are not supported"),
             0;
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      long low = (p + 7 < end && p[6] == '\\' && p[7] == 'u') ? read_hex4(p + 8, end) : -1;
      if (low < 0xDC00 || low > 0xDFFF)
        return error_at(r, (size_t)(p - text),
                        "unpaired UTF-16 surrogate in string is not supported"),
               0;
      p += 12;
      continue;
    }
    if (unit >= 0xDC00 && unit <= 0xDFFF)
      return error_at(r, (size_t)(p - text),
                      "unpaired UTF-16 surrogate in string is not supported"),
             0;
    p += 6;
  }
  return error_at(r, start, "malformed JSON: unterminated string"), 0;
}

/* Overwrites a token cJSON cannot read (NaN, Infinity, -Infinity, numbers
 * too long for its 63-byte buffer) with "0" and spaces in the copy given to
 * cJSON, keeping every offset; the real value is re-read from `text`. */
static void patch_token(Reader *r, size_t start, size_t len) {
  r->patched[start] = '0';
  memset(r->patched + start + 1, ' ', len - 1);
}

static bool word_at(const char *p, const char *end, const char *word) {
  size_t n = strlen(word);
  return (size_t)(end - p) >= n && memcmp(p, word, n) == 0;
}

/* Checks every token of the text against Python's json grammar; the nesting
 * itself is left to cJSON. */
static bool lex_all(Reader *r) {
  const char *text = r->text, *end = r->text + r->len;
  size_t i = 0;
  while (i < r->len) {
    char c = text[i];
    if (is_json_space(c) || is_punctuation(c)) {
      i++;
    } else if (c == '"') {
      size_t next = lex_string(r, i);
      if (!next)
        return false;
      i = next;
    } else if (c == '-' || is_digit(c)) {
      if (word_at(text + i, end, "-Infinity")) {
        patch_token(r, i, 9);
        i += 9;
        continue;
      }
      size_t n = number_length(text + i, end);
      size_t run = 0; /* the characters cJSON would take as the number */
      while (i + run < r->len && is_number_char(text[i + run]))
        run++;
      if (n == 0 || n != run)
        return error_at(r, i, "malformed JSON: invalid number '%.*s'",
                        (int)(run < 40 ? run : 40), text + i);
      if (n > 60)
        patch_token(r, i, n);
      i += n;
    } else if (word_at(text + i, end, "true")) {
      i += 4;
    } else if (word_at(text + i, end, "false")) {
      i += 5;
    } else if (word_at(text + i, end, "null")) {
      i += 4;
    } else if (word_at(text + i, end, "NaN")) {
      patch_token(r, i, 3);
      i += 3;
    } else if (word_at(text + i, end, "Infinity")) {
      patch_token(r, i, 8);
      i += 8;
    } else {
      unsigned char u = (unsigned char)c;
      if (u >= 0x80 && utf8_length(text + i, end) == 0)
        return error_at(r, i, "invalid UTF-8");
      if (u >= 0x20 && u < 0x7F)
        return error_at(r, i, "malformed JSON: unexpected character '%c'", c);
      return error_at(r, i, "malformed JSON: unexpected byte 0x%02x", u);
    }
  }
  return true;
}

/* Advances *pos to the start of the next value token (skipping punctuation,
 * whitespace and object keys) and returns its offset. */
static size_t next_value_token(const Reader *r, size_t *pos) {
  const char *text = r->text;
  size_t i = *pos;
  for (;;) {
    AMK_ASSERT(i < r->len);
    char c = text[i];
    if (is_json_space(c) || c == ',' || c == ':' || c == '}' || c == ']') {
      i++;
      continue;
    }
    if (c == '"') {
      /* The text was lexed already, so a plain scan finds the closing quote. */
      size_t j = i + 1;
      while (text[j] != '"')
        j += text[j] == '\\' ? 2 : 1;
      j++;
      size_t k = j;
      while (k < r->len && is_json_space(text[k]))
        k++;
      if (k < r->len && text[k] == ':') { /* a key, not a value */
        i = k + 1;
        continue;
      }
      *pos = j;
      return i;
    }
    if (c == '{' || c == '[') {
      *pos = i + 1;
      return i;
    }
    /* number or literal */
    size_t j = i + 1;
    while (j < r->len && !is_json_space(text[j]) && !is_punctuation(text[j]))
      j++;
    *pos = j;
    return i;
  }
}

/* Stores each node's token offset in its valueint, in document order. */
static void annotate(const Reader *r, cJSON *node, size_t *pos) {
  for (; node; node = node->next) {
    node->valueint = (int)next_value_token(r, pos);
    if (node->child)
      annotate(r, node->child, pos);
  }
}

/* ---- numbers and types ------------------------------------------------------ */

typedef enum { NUM_INT, NUM_FLOAT, NUM_INT_OVERFLOW } NumberKind;

/* Re-reads a number node from its lexeme. */
static NumberKind number_value(const Reader *r, const cJSON *node, int64_t *i, double *f) {
  const char *p = r->text + node_offset(node);
  const char *end = r->text + r->len;
  if (word_at(p, end, "NaN")) {
    *f = NAN;
    return NUM_FLOAT;
  }
  if (word_at(p, end, "Infinity")) {
    *f = INFINITY;
    return NUM_FLOAT;
  }
  if (word_at(p, end, "-Infinity")) {
    *f = -INFINITY;
    return NUM_FLOAT;
  }
  size_t n = number_length(p, end);
  bool integral = true;
  for (size_t k = 0; k < n; k++)
    if (p[k] == '.' || p[k] == 'e' || p[k] == 'E')
      integral = false;
  if (!integral) {
    char small[64];
    char *copy = n < sizeof small ? small : amk_xmalloc(n + 1);
    memcpy(copy, p, n);
    copy[n] = '\0';
    *f = strtod(copy, NULL); /* overflow gives inf, as Python's float() does */
    if (copy != small)
      free(copy);
    return NUM_FLOAT;
  }
  bool negative = *p == '-';
  uint64_t magnitude = 0;
  for (size_t k = negative ? 1 : 0; k < n; k++) {
    uint64_t digit = (uint64_t)(p[k] - '0');
    if (magnitude > (UINT64_MAX - digit) / 10)
      return NUM_INT_OVERFLOW;
    magnitude = magnitude * 10 + digit;
  }
  if (negative) {
    if (magnitude > (uint64_t)INT64_MAX + 1)
      return NUM_INT_OVERFLOW;
    *i = magnitude == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)magnitude;
  } else {
    if (magnitude > (uint64_t)INT64_MAX)
      return NUM_INT_OVERFLOW;
    *i = (int64_t)magnitude;
  }
  return NUM_INT;
}

static bool is_integer_lexeme(const Reader *r, const cJSON *node) {
  int64_t i;
  double f;
  return cJSON_IsNumber(node) && number_value(r, node, &i, &f) != NUM_FLOAT;
}

static const char *type_name(const Reader *r, const cJSON *node) {
  if (cJSON_IsNull(node))
    return "null";
  if (cJSON_IsBool(node))
    return "a boolean";
  if (cJSON_IsNumber(node))
    return is_integer_lexeme(r, node) ? "an integer" : "a float";
  if (cJSON_IsString(node))
    return "a string";
  if (cJSON_IsArray(node))
    return "a list";
  return "an object";
}

static bool expected(Reader *r, const cJSON *node, const char *what) {
  return node_error(r, node, "expected %s, got %s", what, type_name(r, node));
}

static bool read_int64(Reader *r, const cJSON *node, int64_t *out) {
  if (!cJSON_IsNumber(node))
    return expected(r, node, "an integer");
  double f;
  switch (number_value(r, node, out, &f)) {
  case NUM_INT:
    return true;
  case NUM_FLOAT:
    return expected(r, node, "an integer");
  case NUM_INT_OVERFLOW:
    break;
  }
  return node_error(r, node, "integer is out of the 64-bit range");
}

static bool read_int32(Reader *r, const cJSON *node, int32_t *out) {
  int64_t v;
  if (!read_int64(r, node, &v))
    return false;
  if (v < INT32_MIN || v > INT32_MAX)
    return node_error(r, node, "integer %" PRId64 " is out of the 32-bit range", v);
  *out = (int32_t)v;
  return true;
}

/* A real number: an integer is accepted and converted. */
static bool read_real(Reader *r, const cJSON *node, double *out) {
  if (!cJSON_IsNumber(node))
    return expected(r, node, "a number");
  int64_t i;
  switch (number_value(r, node, &i, out)) {
  case NUM_INT:
    *out = (double)i;
    return true;
  case NUM_FLOAT:
    return true;
  case NUM_INT_OVERFLOW:
    break;
  }
  return node_error(r, node, "integer is out of the 64-bit range");
}

static bool read_bool(Reader *r, const cJSON *node, bool *out) {
  if (!cJSON_IsBool(node))
    return expected(r, node, "a boolean");
  *out = cJSON_IsTrue(node);
  return true;
}

static bool read_string(Reader *r, const cJSON *node, const char **out) {
  if (!cJSON_IsString(node))
    return expected(r, node, "a string");
  *out = amk_arena_strdup(&r->module->arena, node->valuestring);
  return true;
}

static bool read_string_or_null(Reader *r, const cJSON *node, const char **out) {
  if (cJSON_IsNull(node)) {
    *out = NULL;
    return true;
  }
  if (!cJSON_IsString(node))
    return expected(r, node, "a string or null");
  return read_string(r, node, out);
}

/* An enumeration, which the reference reads by NAME (Enum[name]). */
static bool read_enum(Reader *r, const cJSON *node, int (*lookup)(const char *),
                      const char *what, int *out) {
  if (!cJSON_IsString(node))
    return node_error(r, node, "expected %s %s name (a string), got %s",
                      strchr("aeiou", what[0]) ? "an" : "a", what, type_name(r, node));
  int v = lookup(node->valuestring);
  if (v < 0)
    return node_error(r, node, "unknown %s '%s'", what, node->valuestring);
  *out = v;
  return true;
}

/* Python truthiness, for the optional target / pages / config sections. */
static bool is_falsy(const Reader *r, const cJSON *node) {
  if (cJSON_IsNull(node) || cJSON_IsFalse(node))
    return true;
  if (cJSON_IsNumber(node)) {
    int64_t i;
    double f;
    switch (number_value(r, node, &i, &f)) {
    case NUM_INT:
      return i == 0;
    case NUM_FLOAT:
      return f == 0.0;
    case NUM_INT_OVERFLOW:
      return false;
    }
  }
  if (cJSON_IsString(node))
    return node->valuestring[0] == '\0';
  if (cJSON_IsArray(node) || cJSON_IsObject(node))
    return node->child == NULL;
  return false;
}

/* ---- hashing, for duplicate keys and counter names ---------------------------- */

static uint64_t hash_string(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static uint64_t hash_int(int64_t v) {
  uint64_t h = (uint64_t)v * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

/* An open-addressing table of indices; the caller compares keys. */
typedef struct {
  uint32_t *slots; /* index + 1; 0 = empty */
  size_t mask;
} IndexTable;

static void table_init(IndexTable *t, size_t n) {
  size_t cap = 16;
  while (cap < 2 * n)
    cap *= 2;
  t->slots = amk_xcalloc(cap, sizeof *t->slots);
  t->mask = cap - 1;
}

static void table_free(IndexTable *t) { free(t->slots); }

/* ---- object members ----------------------------------------------------------- */

typedef struct {
  const char *key;
  const cJSON *node;
} Member;

/* The members of a JSON object as Python's dict would hold them: a repeated
 * key keeps its first position and takes the last value. Returns a malloc'd
 * array (NULL when empty). */
static Member *object_members(const cJSON *obj, uint32_t *count) {
  uint32_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next)
    n++;
  *count = 0;
  if (n == 0)
    return NULL;
  Member *members = amk_xmalloc(sizeof *members * n);
  IndexTable table;
  table_init(&table, n);
  uint32_t used = 0;
  for (const cJSON *c = obj->child; c; c = c->next) {
    size_t slot = hash_string(c->string) & table.mask;
    for (;;) {
      uint32_t at = table.slots[slot];
      if (at == 0) {
        table.slots[slot] = used + 1;
        members[used].key = c->string;
        members[used].node = c;
        used++;
        break;
      }
      if (strcmp(members[at - 1].key, c->string) == 0) {
        members[at - 1].node = c;
        break;
      }
      slot = (slot + 1) & table.mask;
    }
  }
  table_free(&table);
  *count = used;
  return members;
}

/* The last member named `key`, or NULL. Records have a dozen keys at most. */
static const cJSON *member(const cJSON *obj, const char *key) {
  const cJSON *found = NULL;
  for (const cJSON *c = obj->child; c; c = c->next)
    if (strcmp(c->string, key) == 0)
      found = c;
  return found;
}

static const cJSON *required_member(Reader *r, const cJSON *obj, const char *key) {
  const cJSON *m = member(obj, key);
  if (!m)
    node_error(r, obj, "missing required key '%s'", key);
  return m;
}

/* ---- generic values --------------------------------------------------------- */

static bool read_nested_value(Reader *r, const cJSON *node, AmkValue *out, int depth);

static bool read_object_value(Reader *r, const cJSON *node, AmkValue *out, int depth) {
  uint32_t n;
  Member *members = object_members(node, &n);
  out->kind = AMK_VALUE_OBJECT;
  out->count = n;
  out->as.members = amk_arena_alloc(&r->module->arena, sizeof(AmkMember) * (n ? n : 1));
  bool ok = true;
  for (uint32_t i = 0; i < n && ok; i++) {
    out->as.members[i].key = amk_arena_strdup(&r->module->arena, members[i].key);
    ok = read_nested_value(r, members[i].node, &out->as.members[i].value, depth);
  }
  free(members);
  return ok;
}

/* Any JSON value, kept as written (the verifier judges its type later);
 * `depth` lists and objects of the value are open around it. */
static bool read_nested_value(Reader *r, const cJSON *node, AmkValue *out, int depth) {
  memset(out, 0, sizeof *out);
  /* The text parser's limit too: what is read here can be written as text
   * and read back. */
  if ((cJSON_IsArray(node) || cJSON_IsObject(node)) && ++depth > AMK_VALUE_MAX_DEPTH)
    return node_error(r, node, "lists and objects nest deeper than %d levels here (the most a "
                      "value may nest, so that the program's text can be read back)",
                      AMK_VALUE_MAX_DEPTH);
  if (cJSON_IsNull(node)) {
    out->kind = AMK_VALUE_NULL;
  } else if (cJSON_IsBool(node)) {
    out->kind = AMK_VALUE_BOOL;
    out->as.b = cJSON_IsTrue(node);
  } else if (cJSON_IsNumber(node)) {
    switch (number_value(r, node, &out->as.i, &out->as.f)) {
    case NUM_INT:
      out->kind = AMK_VALUE_INT;
      break;
    case NUM_FLOAT:
      out->kind = AMK_VALUE_FLOAT;
      break;
    case NUM_INT_OVERFLOW:
      return node_error(r, node, "integer is out of the 64-bit range");
    }
  } else if (cJSON_IsString(node)) {
    out->kind = AMK_VALUE_STRING;
    out->as.s = amk_arena_strdup(&r->module->arena, node->valuestring);
  } else if (cJSON_IsArray(node)) {
    uint32_t n = 0;
    for (const cJSON *c = node->child; c; c = c->next)
      n++;
    out->kind = AMK_VALUE_LIST;
    out->count = n;
    out->as.items = amk_arena_alloc(&r->module->arena, sizeof(AmkValue) * (n ? n : 1));
    uint32_t i = 0;
    for (const cJSON *c = node->child; c; c = c->next, i++)
      if (!read_nested_value(r, c, &out->as.items[i], depth))
        return false;
  } else {
    return read_object_value(r, node, out, depth);
  }
  return true;
}

static bool read_value(Reader *r, const cJSON *node, AmkValue *out) {
  return read_nested_value(r, node, out, 0);
}

typedef bool (*ReadItem)(Reader *r, const cJSON *node, void *out);

/* A JSON list into a fresh arena array of `item_size`-byte items, each read
 * by read_item with its index on the path. Stores the length in *count;
 * NULL on an error. */
static void *read_list(Reader *r, const cJSON *node, size_t item_size,
                       ReadItem read_item, uint32_t *count) {
  if (!cJSON_IsArray(node)) {
    expected(r, node, "a list");
    return NULL;
  }
  uint32_t n = 0;
  for (const cJSON *c = node->child; c; c = c->next)
    n++;
  char *items = amk_arena_alloc(&r->module->arena, item_size * (n ? n : 1));
  *count = n;
  uint32_t i = 0;
  for (const cJSON *c = node->child; c; c = c->next, i++) {
    size_t saved = path_push_index(r, i);
    bool ok = read_item(r, c, items + i * item_size);
    path_pop(r, saved);
    if (!ok)
      return NULL;
  }
  return items;
}

/* read_list into `array` (a pointer lvalue) and `count`; true when read. */
#define READ_LIST(r, node, array, count, read_item)                            \
  (((array) = read_list((r), (node), sizeof *(array), (read_item), &(count))) != NULL)

static bool read_id(Reader *r, const cJSON *node, void *id) {
  return read_int32(r, node, id);
}

/* Python's int(str): surrounding whitespace, a sign, digits with single
 * underscores between them. */
static bool parse_python_int(const char *s, int64_t *out) {
  while (*s == ' ' || (*s >= '\t' && *s <= '\r'))
    s++;
  bool negative = false;
  if (*s == '+' || *s == '-')
    negative = *s++ == '-';
  if (!is_digit(*s))
    return false;
  uint64_t magnitude = 0;
  while (is_digit(*s) || (*s == '_' && is_digit(s[1]))) {
    if (*s != '_') {
      if (magnitude > ((uint64_t)INT64_MAX - 9) / 10)
        return false; /* far outside any id range; reported as not an int32 */
      magnitude = magnitude * 10 + (uint64_t)(*s - '0');
    }
    s++;
  }
  while (*s == ' ' || (*s >= '\t' && *s <= '\r'))
    s++;
  if (*s)
    return false;
  *out = negative ? -(int64_t)magnitude : (int64_t)magnitude;
  return true;
}

typedef struct {
  int32_t key, value;
} IntPair;

/* Stores one entry of an int map as records[i]. */
typedef void (*StorePair)(void *records, uint32_t i, int32_t key, int32_t value);

/* A {"<int>": int, ...} object (buffer_to_page, explicit sm_assignment), as
 * the reference reads it: string keys deduplicated first (a JSON object),
 * then the int() of each key (a dict comprehension), so "1" and "01" are
 * one entry. Returns a fresh arena array of `record_size`-byte records
 * filled by `store`, with the entry count in *count; NULL on an error. */
static void *read_int_map(Reader *r, const cJSON *node, size_t record_size,
                          StorePair store, uint32_t *count) {
  if (!cJSON_IsObject(node)) {
    expected(r, node, "an object");
    return NULL;
  }
  uint32_t n;
  Member *members = object_members(node, &n);
  IntPair *out = amk_xmalloc(sizeof(IntPair) * (n ? n : 1));
  const cJSON **value_nodes = amk_xmalloc(sizeof *value_nodes * (n ? n : 1));
  IndexTable table;
  table_init(&table, n);
  uint32_t used = 0;
  bool ok = true;
  for (uint32_t i = 0; i < n && ok; i++) {
    int64_t key;
    if (!parse_python_int(members[i].key, &key) || key < INT32_MIN || key > INT32_MAX) {
      ok = node_error(r, members[i].node, "key '%s' is not a 32-bit integer",
                      members[i].key);
      break;
    }
    size_t slot = hash_int(key) & table.mask;
    for (;;) {
      uint32_t at = table.slots[slot];
      if (at == 0) {
        table.slots[slot] = used + 1;
        out[used].key = (int32_t)key;
        value_nodes[used++] = members[i].node;
        break;
      }
      if (out[at - 1].key == key) {
        value_nodes[at - 1] = members[i].node;
        break;
      }
      slot = (slot + 1) & table.mask;
    }
  }
  for (uint32_t i = 0; i < used && ok; i++) {
    size_t saved = path_push_key(r, value_nodes[i]->string);
    ok = read_int32(r, value_nodes[i], &out[i].value);
    path_pop(r, saved);
  }
  table_free(&table);
  free(value_nodes);
  free(members);
  *count = used;
  char *records = NULL;
  if (ok) {
    records = amk_arena_alloc(&r->module->arena, record_size * (used ? used : 1));
    for (uint32_t i = 0; i < used; i++)
      store(records, i, out[i].key, out[i].value);
  }
  free(out);
  return records;
}

/* ---- sections ------------------------------------------------------------------ */

/* str(value) of a version field, as the reference computes it. */
static bool version_text(Reader *r, const cJSON *node, const char **out) {
  char buf[40];
  if (cJSON_IsString(node))
    return read_string(r, node, out);
  if (cJSON_IsNull(node)) {
    snprintf(buf, sizeof buf, "None");
  } else if (cJSON_IsBool(node)) {
    snprintf(buf, sizeof buf, "%s", cJSON_IsTrue(node) ? "True" : "False");
  } else if (cJSON_IsNumber(node)) {
    AmkValue v;
    if (!read_value(r, node, &v))
      return false;
    if (v.kind == AMK_VALUE_INT)
      snprintf(buf, sizeof buf, "%" PRId64, v.as.i);
    else
      amk_format_float_repr(v.as.f, buf);
  } else {
    return expected(r, node, "a version string");
  }
  *out = amk_arena_strdup(&r->module->arena, buf);
  return true;
}

static bool read_versions(Reader *r, const cJSON *root) {
  struct {
    const char *key, *label, *runtime;
    const char **field;
  } versions[] = {
      {"ir_version", "IR", AMK_IR_VERSION, &r->module->ir_version},
      {"abi_version", "ABI", AMK_ABI_VERSION, &r->module->abi_version},
  };
  for (size_t i = 0; i < 2; i++) {
    const cJSON *node = member(root, versions[i].key);
    if (!node) {
      *versions[i].field = versions[i].runtime;
      continue;
    }
    size_t saved = path_push_key(r, versions[i].key);
    bool ok = version_text(r, node, versions[i].field);
    path_pop(r, saved);
    if (!ok)
      return false;
    if (!amk_same_major_version(*versions[i].field, versions[i].runtime))
      return node_error(r, node, "%s major version mismatch: file %s vs runtime %s",
                        versions[i].label, *versions[i].field, versions[i].runtime);
  }
  return true;
}

static bool read_target(Reader *r, const cJSON *node) {
  if (!cJSON_IsObject(node))
    return expected(r, node, "an object");
  AmkTarget *t = amk_arena_alloc(&r->module->arena, sizeof *t);
  /* The reference's defaults for the optional trailing fields. */
  t->clock_ghz = 0.0;
  t->supports_cooperative = true;
  t->wddm_tdr = false;
  t->measured_bw_gbs = 0.0;
  t->note = "";
  int index = 0;
  bool ok = true;
#define READ_STR(field, m) read_string(r, m, &t->field)
#define READ_INT(field, m) read_int64(r, m, &t->field)
#define READ_FLOAT(field, m) read_real(r, m, &t->field)
#define READ_BOOL(field, m) read_bool(r, m, &t->field)
#define X(field, kind)                                                         \
  if (ok) {                                                                    \
    const cJSON *m = member(node, #field);                                     \
    if (m) {                                                                   \
      size_t saved = path_push_key(r, #field);                                 \
      ok = READ_##kind(field, m);                                              \
      path_pop(r, saved);                                                      \
    } else if (index < AMK_TARGET_REQUIRED_FIELDS) {                           \
      ok = node_error(r, node, "missing required key '%s'", #field);           \
    }                                                                          \
    index++;                                                                   \
  }
  AMK_TARGET_FIELDS(X)
#undef X
#undef READ_STR
#undef READ_INT
#undef READ_FLOAT
#undef READ_BOOL
  if (ok)
    r->module->target = t;
  return ok;
}

/* Evaluates `call` with `node` = `member_node` under the path `key`;
 * returns false from the enclosing function when the call fails. */
#define READ_MEMBER(r, key, member_node, call)                                 \
  do {                                                                         \
    size_t saved_ = path_push_key((r), (key));                                 \
    const cJSON *node = (member_node);                                         \
    bool ok_ = (call);                                                         \
    path_pop((r), saved_);                                                     \
    if (!ok_)                                                                  \
      return false;                                                            \
  } while (0)

/* Reads `key` of `obj` with `call`; absent keys keep the default already
 * stored. */
#define READ_OPTIONAL(r, obj, key, call)                                       \
  do {                                                                         \
    const cJSON *m_ = member((obj), (key));                                    \
    if (m_)                                                                    \
      READ_MEMBER(r, key, m_, call);                                           \
  } while (0)

#define READ_REQUIRED(r, obj, key, call)                                       \
  do {                                                                         \
    const cJSON *m_ = required_member((r), (obj), (key));                      \
    if (!m_)                                                                   \
      return false;                                                            \
    READ_MEMBER(r, key, m_, call);                                             \
  } while (0)

static bool read_buffer(Reader *r, const cJSON *obj) {
  if (!cJSON_IsObject(obj))
    return expected(r, obj, "an object");
  AmkBuffer b = {.space = AMK_SPACE_HBM, .loc = node_loc(r, obj)};
  int kind = 0, dtype = 0, space = AMK_SPACE_HBM;
  READ_REQUIRED(r, obj, "id", read_int32(r, node, &b.id));
  READ_REQUIRED(r, obj, "name", read_string(r, node, &b.name));
  READ_REQUIRED(r, obj, "kind",
                read_enum(r, node, amk_kind_from_json_name, "buffer kind", &kind));
  READ_REQUIRED(r, obj, "dtype", read_enum(r, node, amk_dtype_from_json_name, "dtype", &dtype));
  const cJSON *shape = required_member(r, obj, "shape");
  if (!shape)
    return false;
  size_t saved = path_push_key(r, "shape");
  if (!cJSON_IsArray(shape))
    return expected(r, shape, "a list");
  AmkValue dims;
  if (!read_value(r, shape, &dims))
    return false;
  path_pop(r, saved);
  b.rank = dims.count;
  b.shape = dims.as.items;
  READ_OPTIONAL(r, obj, "space",
                read_enum(r, node, amk_space_from_json_name, "memory space", &space));
  READ_OPTIONAL(r, obj, "source", read_string_or_null(r, node, &b.source));
  b.kind = (AmkBufferKind)kind;
  b.dtype = (AmkDType)dtype;
  b.space = (AmkMemSpace)space;
  *amk_module_add_buffer(r->module) = b;
  return true;
}

static bool read_counter(Reader *r, const cJSON *obj) {
  if (!cJSON_IsObject(obj))
    return expected(r, obj, "an object");
  AmkCounter c = {.init = 0, .note = "", .loc = node_loc(r, obj)};
  READ_REQUIRED(r, obj, "id", read_int32(r, node, &c.id));
  READ_OPTIONAL(r, obj, "init", read_int64(r, node, &c.init));
  READ_OPTIONAL(r, obj, "note", read_string(r, node, &c.note));
  *amk_module_add_counter(r->module) = c;
  return true;
}

static bool read_wait(Reader *r, const cJSON *obj, void *out) {
  AmkWait *w = out;
  if (!cJSON_IsObject(obj))
    return expected(r, obj, "an object");
  READ_REQUIRED(r, obj, "counter", read_int32(r, node, &w->counter));
  /* Loosely typed: a float or bool threshold loads; the validator rejects it. */
  READ_REQUIRED(r, obj, "threshold", read_value(r, node, &w->threshold));
  return true;
}

static bool read_params(Reader *r, const cJSON *node, AmkTask *t) {
  if (!cJSON_IsObject(node))
    return expected(r, node, "an object");
  AmkValue params;
  if (!read_object_value(r, node, &params, 1)) /* the params object is one level */
    return false;
  t->n_params = params.count;
  t->params = amk_arena_alloc(&r->module->arena, sizeof(AmkParam) * (params.count ? params.count : 1));
  for (uint32_t i = 0; i < params.count; i++) {
    t->params[i].key = params.as.members[i].key;
    t->params[i].value = params.as.members[i].value;
  }
  return true;
}

static bool read_sm(Reader *r, const cJSON *node, AmkTask *t) {
  if (cJSON_IsNull(node))
    return true;
  if (!cJSON_IsNumber(node))
    return expected(r, node, "an integer or null");
  t->has_sm = true;
  return read_int32(r, node, &t->sm);
}

static bool read_task(Reader *r, const cJSON *obj) {
  if (!cJSON_IsObject(obj))
    return expected(r, obj, "an object");
  AmkTask t = {.label = "", .loc = node_loc(r, obj)};
  int op = 0;
  READ_REQUIRED(r, obj, "id", read_int32(r, node, &t.id));
  READ_REQUIRED(r, obj, "op", read_enum(r, node, amk_op_from_json_name, "op", &op));
  t.op = (AmkOp)op;
  READ_REQUIRED(r, obj, "inputs", READ_LIST(r, node, t.inputs, t.n_inputs, read_id));
  READ_REQUIRED(r, obj, "outputs",
                READ_LIST(r, node, t.outputs, t.n_outputs, read_id));
  READ_REQUIRED(r, obj, "out_counter", read_int32(r, node, &t.out_counter));
  READ_OPTIONAL(r, obj, "waits", READ_LIST(r, node, t.waits, t.n_waits, read_wait));
  READ_OPTIONAL(r, obj, "params", read_params(r, node, &t));
  READ_OPTIONAL(r, obj, "sm", read_sm(r, node, &t));
  READ_OPTIONAL(r, obj, "est_bytes", read_int64(r, node, &t.est_bytes));
  READ_OPTIONAL(r, obj, "est_flops", read_int64(r, node, &t.est_flops));
  READ_OPTIONAL(r, obj, "label", read_string(r, node, &t.label));
  *amk_module_add_task(r->module) = t;
  return true;
}

/* Reads each element of the list `key` with `read_one`. */
static bool read_record_list(Reader *r, const cJSON *root, const char *key,
                             bool (*read_one)(Reader *, const cJSON *)) {
  const cJSON *list = member(root, key);
  if (!list)
    return true;
  size_t saved = path_push_key(r, key);
  if (!cJSON_IsArray(list))
    return expected(r, list, "a list");
  size_t i = 0;
  for (const cJSON *c = list->child; c; c = c->next, i++) {
    size_t saved_index = path_push_index(r, i);
    if (!read_one(r, c))
      return false;
    path_pop(r, saved_index);
  }
  path_pop(r, saved);
  return true;
}

static bool read_page(Reader *r, const cJSON *obj, void *out) {
  AmkPage *p = out;
  if (!cJSON_IsObject(obj))
    return expected(r, obj, "an object");
  int space = 0;
  p->live_start = p->live_end = -1;
  READ_REQUIRED(r, obj, "id", read_int32(r, node, &p->id));
  READ_REQUIRED(r, obj, "space",
                read_enum(r, node, amk_space_from_json_name, "memory space", &space));
  p->space = (AmkMemSpace)space;
  READ_REQUIRED(r, obj, "nbytes", read_int64(r, node, &p->nbytes));
  READ_OPTIONAL(r, obj, "live_start", read_int64(r, node, &p->live_start));
  READ_OPTIONAL(r, obj, "live_end", read_int64(r, node, &p->live_end));
  return true;
}

static void store_binding(void *records, uint32_t i, int32_t buffer,
                          int32_t page) {
  ((AmkPageBinding *)records)[i] = (AmkPageBinding){buffer, page};
}

static bool read_bindings(Reader *r, const cJSON *node, AmkPageAllocation *pa) {
  pa->bindings = read_int_map(r, node, sizeof *pa->bindings, store_binding,
                              &pa->n_bindings);
  return pa->bindings != NULL;
}

static bool read_pages(Reader *r, const cJSON *obj) {
  if (!cJSON_IsObject(obj))
    return expected(r, obj, "an object");
  AmkPageAllocation *pa = amk_arena_alloc(&r->module->arena, sizeof *pa);
  READ_REQUIRED(r, obj, "buffer_to_page", read_bindings(r, node, pa));
  READ_REQUIRED(r, obj, "pages",
                READ_LIST(r, node, pa->pages, pa->n_pages, read_page));
  r->module->pages = pa;
  return true;
}

static void store_sm_entry(void *records, uint32_t i, int32_t task, int32_t sm) {
  ((AmkSmMapEntry *)records)[i] = (AmkSmMapEntry){task, sm};
}

static bool read_sm_assignment(Reader *r, const cJSON *node, AmkConfig *cfg) {
  if (cJSON_IsObject(node)) {
    cfg->sm_map = read_int_map(r, node, sizeof *cfg->sm_map, store_sm_entry,
                               &cfg->n_sm_map);
    if (!cfg->sm_map)
      return false;
    cfg->sm_assignment = AMK_SM_EXPLICIT;
    return true;
  }
  if (!cJSON_IsString(node))
    return expected(r, node, "a policy name or an object of task id -> SM");
  int policy = amk_sm_policy_from_name(node->valuestring);
  /* "explicit" as a bare string carries no map; only the object form does. */
  if (policy < 0 || policy == AMK_SM_EXPLICIT)
    return node_error(r, node,
                      "unknown policy '%s' (expected \"load_balance\", \"round_robin\" "
                      "or an object of task id -> SM)",
                      node->valuestring);
  cfg->sm_assignment = (AmkSmPolicy)policy;
  return true;
}

static bool read_page_policy(Reader *r, const cJSON *node, AmkConfig *cfg) {
  if (!cJSON_IsString(node))
    return expected(r, node, "a policy name");
  int policy = amk_page_policy_from_name(node->valuestring);
  if (policy < 0)
    return node_error(r, node,
                      "unknown policy '%s' (expected \"linear\", \"graph_color\" or \"none\")",
                      node->valuestring);
  cfg->page_allocation = (AmkPagePolicy)policy;
  return true;
}

static bool read_config(Reader *r, const cJSON *obj) {
  if (!cJSON_IsObject(obj))
    return expected(r, obj, "an object");
  AmkConfig *cfg = amk_config_new_default(r->module);
  READ_OPTIONAL(r, obj, "tiling", read_value(r, node, &cfg->tiling));
  READ_OPTIONAL(r, obj, "fusion_grouping", read_value(r, node, &cfg->fusion_grouping));
  READ_OPTIONAL(r, obj, "sm_assignment", read_sm_assignment(r, node, cfg));
  READ_OPTIONAL(r, obj, "pipelining_depth", read_int64(r, node, &cfg->pipelining_depth));
  READ_OPTIONAL(r, obj, "page_allocation", read_page_policy(r, node, cfg));
  READ_OPTIONAL(r, obj, "threads_per_block", read_int64(r, node, &cfg->threads_per_block));
  READ_OPTIONAL(r, obj, "smem_bytes_per_block",
                read_int64(r, node, &cfg->smem_bytes_per_block));
  r->module->config = cfg;
  return true;
}

/* An optional section that is absent when missing or falsy (Python's
 * `if d.get(key)`). */
static bool read_section(Reader *r, const cJSON *root, const char *key,
                         bool (*read_one)(Reader *, const cJSON *)) {
  const cJSON *node = member(root, key);
  if (!node || is_falsy(r, node))
    return true;
  size_t saved = path_push_key(r, key);
  bool ok = read_one(r, node);
  path_pop(r, saved);
  return ok;
}

static bool read_meta(Reader *r, const cJSON *node) {
  if (!cJSON_IsObject(node))
    return expected(r, node, "an object");
  AmkModule *m = r->module;
  if (!read_object_value(r, node, &m->meta, 1)) /* meta is one level */
    return false;
  /* Our writer's record of the model folder (amk/io.h); the reference's
   * meta is free-form, so anything but a string there is only meta. */
  for (uint32_t i = 0; i < m->meta.count; i++)
    if (strcmp(m->meta.as.members[i].key, AMK_JSON_MODEL_DIR_KEY) == 0 &&
        m->meta.as.members[i].value.kind == AMK_VALUE_STRING)
      m->model_dir = m->meta.as.members[i].value.as.s;
  return true;
}

/* ---- counter names -------------------------------------------------------------- */

static bool is_counter_identifier(const char *s) {
  if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
    return false;
  for (s++; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || is_digit(*s) ||
          *s == '_' || *s == '.'))
      return false;
  return true;
}

/* The text form names a counter by its note when the note is an identifier
 * that no other counter's note repeats. */
static void name_counters(AmkModule *m) {
  uint32_t n = m->n_counters;
  if (n == 0)
    return;
  IndexTable table;
  table_init(&table, n);
  uint32_t *first = amk_xcalloc(n, sizeof *first); /* first counter with this note */
  bool *repeated = amk_xcalloc(n, sizeof *repeated);
  for (uint32_t i = 0; i < n; i++) {
    const char *note = m->counters[i].note;
    size_t slot = hash_string(note) & table.mask;
    for (;;) {
      uint32_t at = table.slots[slot];
      if (at == 0) {
        table.slots[slot] = i + 1;
        first[i] = i;
        break;
      }
      if (strcmp(m->counters[at - 1].note, note) == 0) {
        first[i] = at - 1;
        repeated[at - 1] = true;
        break;
      }
      slot = (slot + 1) & table.mask;
    }
  }
  for (uint32_t i = 0; i < n; i++) {
    const char *note = m->counters[i].note;
    m->counters[i].name =
        !repeated[first[i]] && is_counter_identifier(note) ? note : NULL;
  }
  free(repeated);
  free(first);
  table_free(&table);
}

/* ---- entry point ----------------------------------------------------------------- */

static bool read_module(Reader *r, const cJSON *root) {
  if (!cJSON_IsObject(root))
    return node_error(r, root, "expected a JSON object at the top level, got %s",
                      type_name(r, root));
  if (!read_versions(r, root))
    return false;
  const cJSON *meta = member(root, "meta");
  if (meta) {
    size_t saved = path_push_key(r, "meta");
    bool ok = read_meta(r, meta);
    path_pop(r, saved);
    if (!ok)
      return false;
  }
  if (!read_section(r, root, "target", read_target) ||
      !read_record_list(r, root, "buffers", read_buffer) ||
      !read_record_list(r, root, "counters", read_counter) ||
      !read_record_list(r, root, "tasks", read_task) ||
      !read_section(r, root, "pages", read_pages) ||
      !read_section(r, root, "config", read_config))
    return false;
  name_counters(r->module);
  return true;
}

AmkModule *amk_read_json(const char *name, const char *text, size_t len,
                         AmkDiagEngine *diag) {
  amk_diag_set_source(diag, name, text, len);
  Reader r = {.text = text, .len = len, .diag = diag, .cursor_line = 1, .cursor_col = 1};
  if (len >= (size_t)INT_MAX) {
    /* Token offsets live in cJSON's int valueint. */
    AmkLoc nowhere = {0, 0};
    amk_error(diag, nowhere, "JSON file too large (%zu bytes)", len);
    return NULL;
  }
  r.patched = amk_xmalloc(len + 1);
  memcpy(r.patched, text, len);
  r.patched[len] = '\0';
  if (!lex_all(&r)) {
    free(r.patched);
    return NULL;
  }
  const char *parse_end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(r.patched, len + 1, &parse_end, true);
  if (!root) {
    size_t offset = parse_end ? (size_t)(parse_end - r.patched) : 0;
    if (offset > len)
      offset = len;
    bool only_space = true;
    for (size_t i = 0; i < len && only_space; i++)
      only_space = is_json_space(text[i]);
    if (only_space)
      error_at(&r, offset, "malformed JSON: the file is empty");
    else
      error_at(&r, offset, "malformed JSON: unexpected %s",
               offset >= len ? "end of file" : "token");
    free(r.patched);
    return NULL;
  }
  size_t pos = 0;
  annotate(&r, root, &pos);

  r.module = amk_module_new();
  r.module->source_name = amk_arena_strdup(&r.module->arena, name);
  r.module->source_text = text;
  r.module->source_len = len;
  bool ok = read_module(&r, root);
  cJSON_Delete(root);
  free(r.patched);
  if (!ok) {
    amk_module_free(r.module);
    return NULL;
  }
  return r.module;
}

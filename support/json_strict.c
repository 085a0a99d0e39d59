/* Strict checks on JSON that cJSON has parsed: see amk/json_strict.h.
 *
 * cJSON has already accepted the text, so the scan below only looks for what
 * cJSON lets through and Python's json does not (or reads otherwise); the
 * nesting and the escapes themselves are cJSON's. Duplicate keys are found on
 * the tree, where keys are decoded ("a" and "\u0061" are the same key). */
#include "amk/json_strict.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "amk/strbuf.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

static bool is_json_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* ---- the scan of the text --------------------------------------------------- */

/* One open container while scanning. */
typedef struct {
  bool is_object;
  bool expect_key;  /* object: the next string is a key */
  const char *key;  /* object: the current key as written; NULL before one */
  size_t key_len;
  size_t index;     /* array: the current item */
} Frame;

typedef struct {
  const char *label;
  const char *text;
  AmkDiagEngine *diag;
  Frame *frames;
  size_t depth, cap;
} Scanner;

/* Where the scan is, as `a.b[2].c`, keys as written in the text. */
static void scan_path(const Scanner *s, AmkStrBuf *out) {
  for (size_t i = 0; i < s->depth; i++) {
    const Frame *f = &s->frames[i];
    if (!f->is_object) {
      amk_sb_printf(out, "[%zu]", f->index);
      continue;
    }
    if (!f->key)
      break;
    if (out->len)
      amk_sb_putc(out, '.');
    amk_sb_putn(out, f->key, f->key_len);
  }
}

/* Reports "<label>: '<path>': <what>" (no path at the top level). */
static bool scan_error(const Scanner *s, const char *fmt, ...) AMK_PRINTF(2, 3);
static bool scan_error(const Scanner *s, const char *fmt, ...) {
  AmkStrBuf msg, path;
  amk_sb_init(&msg);
  amk_sb_init(&path);
  scan_path(s, &path);
  amk_sb_puts(&msg, s->label);
  if (path.len)
    amk_sb_printf(&msg, ": '%s'", path.data);
  amk_sb_puts(&msg, ": ");
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  amk_sb_puts(&msg, what);
  amk_error(s->diag, no_loc(), "%s", msg.data);
  amk_sb_free(&msg);
  amk_sb_free(&path);
  return false;
}

static void push_frame(Scanner *s, bool is_object) {
  if (s->depth == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 16;
    s->frames = amk_xrealloc(s->frames, s->cap * sizeof *s->frames);
  }
  s->frames[s->depth++] = (Frame){is_object, is_object, NULL, 0, 0};
}

/* The string token whose opening quote is at `p`; returns the byte after its
 * closing quote, or NULL after an error. A key becomes its frame's key first,
 * so that an error in it names it. */
static const char *scan_string(Scanner *s, const char *p, const char *end) {
  const char *q = p + 1;
  bool has_nul = false;
  int control = -1; /* the first raw control byte, if any */
  while (q < end && *q != '"') {
    if (*q == '\\') {
      if (end - q >= 6 && memcmp(q + 1, "u0000", 5) == 0)
        has_nul = true;
      q += 2; /* cJSON has checked the escape; skip its second byte */
      continue;
    }
    if ((unsigned char)*q < 0x20 && control < 0)
      control = (unsigned char)*q;
    q++;
  }
  Frame *top = s->depth ? &s->frames[s->depth - 1] : NULL;
  if (top && top->is_object && top->expect_key) {
    top->key = p + 1;
    top->key_len = (size_t)(q - (p + 1));
  }
  if (has_nul)
    return scan_error(s, "a string holding U+0000 (\\u0000) is not "
                         "supported"),
           NULL;
  if (control >= 0)
    return scan_error(s, "raw control character 0x%02x in a string (JSON "
                         "needs it escaped)", control),
           NULL;
  return q < end ? q + 1 : end;
}

/* Python's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? */
static bool python_number(const char *p, const char *end) {
  if (p < end && *p == '-')
    p++;
  if (p == end || !is_digit(*p))
    return false;
  if (*p == '0')
    p++;
  else
    while (p < end && is_digit(*p))
      p++;
  if (p < end && *p == '.') {
    if (++p == end || !is_digit(*p))
      return false;
    while (p < end && is_digit(*p))
      p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-'))
      p++;
    if (p == end || !is_digit(*p))
      return false;
    while (p < end && is_digit(*p))
      p++;
  }
  return p == end;
}

static bool is_number_byte(char c) {
  return is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' ||
         c == 'E';
}

static bool scan_text(Scanner *s, const char *end) {
  const char *p = s->text;
  while (p < end) {
    char c = *p;
    Frame *top = s->depth ? &s->frames[s->depth - 1] : NULL;
    if (is_json_space(c)) {
      p++;
    } else if (c == '{' || c == '[') {
      push_frame(s, c == '{');
      p++;
    } else if (c == '}' || c == ']') {
      if (s->depth)
        s->depth--;
      p++;
    } else if (c == ':') {
      if (top)
        top->expect_key = false;
      p++;
    } else if (c == ',') {
      if (top && top->is_object)
        top->expect_key = true;
      else if (top)
        top->index++;
      p++;
    } else if (c == '"') {
      p = scan_string(s, p, end);
      if (!p)
        return false;
    } else if (c == '-' || is_digit(c)) {
      const char *start = p;
      while (p < end && is_number_byte(*p))
        p++;
      if (!python_number(start, p))
        return scan_error(s, "number '%.*s' is not valid JSON",
                          (int)(p - start > 64 ? 64 : p - start), start);
    } else if (c >= 'a' && c <= 'z') {
      p++; /* true, false or null: cJSON reads these exactly */
    } else {
      /* cJSON skips any byte up to 0x20 between tokens, and a byte-order
       * mark at the start. */
      return scan_error(s, "byte 0x%02x at offset %zu is not allowed between "
                           "JSON tokens",
                        (unsigned char)c, (size_t)(p - s->text));
    }
  }
  return true;
}

/* ---- after the value ----------------------------------------------------------- */

static bool check_trailing(const char *label, const char *text, size_t len,
                           const char *value_end, AmkJsonTrailing trailing,
                           AmkDiagEngine *diag) {
  for (const char *p = value_end; p < text + len; p++) {
    bool padding = trailing == AMK_JSON_TRAILING_SPACES ? *p == ' '
                                                         : is_json_space(*p);
    if (padding)
      continue;
    size_t at = (size_t)(p - text);
    if (trailing == AMK_JSON_TRAILING_SPACES)
      amk_error(diag, no_loc(),
                "%s: unexpected byte 0x%02x after the JSON object (at byte %zu "
                "of %zu); only spaces may pad it",
                label, (unsigned char)*p, at, len);
    else
      amk_error(diag, no_loc(),
                "%s: unexpected text after the JSON value (at byte %zu of %zu)",
                label, at, len);
    return false;
  }
  return true;
}

/* ---- duplicate keys -------------------------------------------------------------- */

static int compare_keys(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string,
                (*(const cJSON *const *)b)->string);
}

static void truncate_path(AmkStrBuf *path, size_t len) {
  path->len = len;
  if (path->data)
    path->data[len] = '\0';
}

/* Refuses an object that holds a key twice, at any depth. `path` is where
 * `node` is. */
static bool check_duplicates(const char *label, const cJSON *node,
                             AmkStrBuf *path, AmkDiagEngine *diag) {
  size_t n = 0;
  for (const cJSON *c = node->child; c; c = c->next)
    n++;
  if (cJSON_IsObject(node) && n >= 2) {
    const cJSON **keys = amk_xmalloc(n * sizeof *keys);
    size_t k = 0;
    for (const cJSON *c = node->child; c; c = c->next)
      if (c->string)
        keys[k++] = c;
    qsort(keys, k, sizeof *keys, compare_keys);
    const char *twice = NULL;
    for (size_t i = 1; i < k && !twice; i++)
      if (strcmp(keys[i - 1]->string, keys[i]->string) == 0)
        twice = keys[i]->string;
    if (twice)
      amk_error(diag, no_loc(),
                "%s: duplicate key '%s%s%s' (Python's json would keep the "
                "last value; refusing rather than guessing)",
                label, path->len ? path->data : "", path->len ? "." : "",
                twice);
    free(keys);
    if (twice)
      return false;
  }
  size_t index = 0;
  for (const cJSON *c = node->child; c; c = c->next, index++) {
    if (!c->child)
      continue;
    size_t saved = path->len;
    if (cJSON_IsObject(node))
      amk_sb_printf(path, "%s%s", saved ? "." : "", c->string ? c->string : "");
    else
      amk_sb_printf(path, "[%zu]", index);
    bool ok = check_duplicates(label, c, path, diag);
    truncate_path(path, saved);
    if (!ok)
      return false;
  }
  return true;
}

/* ---- entry ------------------------------------------------------------------------ */

bool amk_json_check_strict(const char *label, const char *text, size_t len,
                           const char *value_end, const cJSON *root,
                           AmkJsonTrailing trailing, AmkDiagEngine *diag) {
  if (!value_end || value_end < text || value_end > text + len)
    value_end = text + len;
  Scanner s = {label, text, diag, NULL, 0, 0};
  bool ok = scan_text(&s, value_end);
  free(s.frames);
  ok = ok && check_trailing(label, text, len, value_end, trailing, diag);
  if (ok && root) {
    AmkStrBuf path;
    amk_sb_init(&path);
    ok = check_duplicates(label, root, &path, diag);
    amk_sb_free(&path);
  }
  return ok;
}

struct cJSON *amk_json_parse_strict(const char *path, const char *text, size_t len,
                                    AmkDiagEngine *diag) {
  const char *parse_end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &parse_end, false);
  if (!root) {
    amk_error(diag, no_loc(), "%s: not valid JSON (near byte %zu)", path,
              parse_end ? (size_t)(parse_end - text) : (size_t)0);
    return NULL;
  }
  if (!amk_json_check_strict(path, text, len, parse_end, root, AMK_JSON_TRAILING_WHITESPACE,
                             diag)) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

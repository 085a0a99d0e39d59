/* Reading tokenizer.json (and a model folder's tokenizer_config.json,
 * generation_config.json and config.json) into an AmkTokenizer.
 *
 * JSON is read as Python's json reads it, or refused (amk/json_strict.h).
 * Every field is checked as tokenizers' deserializer checks it: a field it
 * requires is required here, and a component we do not implement is an
 * error naming its type and its JSON path, never a silent difference. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/fileio.h"
#include "amk/json_strict.h"
#include "amk/path.h"
#include "tokenizer_internal.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

typedef struct {
  const char *label; /* the file, in every message */
  AmkDiagEngine *diag;
} Reader;

/* Reports "LABEL: 'path': message" (no path: "LABEL: message"). */
static bool fail(const Reader *r, const char *path, const char *fmt, ...)
    AMK_PRINTF(3, 4);
static bool fail(const Reader *r, const char *path, const char *fmt, ...) {
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  if (path && *path)
    amk_error(r->diag, no_loc(), "%s: '%s': %s", r->label, path, message);
  else
    amk_error(r->diag, no_loc(), "%s: %s", r->label, message);
  return false;
}

/* `base.key` or `base[index]`, by value; a path too long for it ends in
 * "...". */
typedef struct {
  char text[320];
} Path;

static void mark_cut(Path *p, int written) {
  if (written < 0 || (size_t)written >= sizeof p->text)
    memcpy(p->text + sizeof p->text - 4, "...", 4);
}

static Path key_path(const char *base, const char *key) {
  Path p;
  mark_cut(&p, snprintf(p.text, sizeof p.text, "%s%s%s", base,
                        *base ? "." : "", key));
  return p;
}

static Path index_path(const char *base, size_t index) {
  Path p;
  mark_cut(&p, snprintf(p.text, sizeof p.text, "%s[%zu]", base, index));
  return p;
}

static const char *json_kind(const cJSON *v) {
  if (cJSON_IsString(v))
    return "a string";
  if (cJSON_IsNumber(v))
    return "a number";
  if (cJSON_IsBool(v))
    return "a boolean";
  if (cJSON_IsNull(v))
    return "null";
  if (cJSON_IsArray(v))
    return "an array";
  return "an object";
}

static const cJSON *member(const cJSON *object, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(object, key);
}

/* A member that must be there. */
static const cJSON *need(const Reader *r, const cJSON *object, const char *path,
                         const char *key) {
  const cJSON *v = member(object, key);
  if (!v)
    fail(r, path, "missing key '%s'", key);
  return v;
}

static bool expect_object(const Reader *r, const cJSON *v, const char *path) {
  return cJSON_IsObject(v) ||
         fail(r, path, "expected an object, not %s", json_kind(v));
}

static bool expect_array(const Reader *r, const cJSON *v, const char *path) {
  return cJSON_IsArray(v) ||
         fail(r, path, "expected an array, not %s", json_kind(v));
}

static bool read_string(const Reader *r, const cJSON *object, const char *path,
                        const char *key, const char **out) {
  const cJSON *v = need(r, object, path, key);
  if (!v)
    return false;
  if (!cJSON_IsString(v))
    return fail(r, key_path(path, key).text, "expected a string, not %s",
                json_kind(v));
  *out = v->valuestring;
  return true;
}

/* A boolean; `fallback` when absent, unless it is required. */
static bool read_bool(const Reader *r, const cJSON *object, const char *path,
                      const char *key, bool required, bool fallback,
                      bool *out) {
  const cJSON *v = member(object, key);
  *out = fallback;
  if (!v && required)
    return fail(r, path, "missing key '%s'", key);
  if (!v)
    return true;
  if (!cJSON_IsBool(v))
    return fail(r, key_path(path, key).text, "expected true or false, not %s",
                json_kind(v));
  *out = cJSON_IsTrue(v);
  return true;
}

/* A whole number in [0, limit). */
static bool number_in_range(const Reader *r, const cJSON *v, const char *path,
                            double limit, int64_t *out) {
  if (!cJSON_IsNumber(v))
    return fail(r, path, "expected a whole number, not %s", json_kind(v));
  double d = v->valuedouble;
  if (!(d >= 0 && d < limit) || d != (double)(int64_t)d)
    return fail(r, path, "%.17g is not a whole number in [0, %.0f)", d, limit);
  *out = (int64_t)d;
  return true;
}

/* A token id: a whole number below the vocabulary size. */
static bool token_id_in_range(const Reader *r, const cJSON *v, const char *path,
                              size_t vocab_size, int64_t *out) {
  if (!cJSON_IsNumber(v))
    return fail(r, path, "expected a token id, not %s", json_kind(v));
  double d = v->valuedouble;
  if (!(d >= 0 && d < (double)vocab_size) || d != (double)(int64_t)d)
    return fail(r, path, "%.17g is not a token id (ids run from 0 to %zu)", d,
                vocab_size - 1);
  *out = (int64_t)d;
  return true;
}

static bool read_number(const Reader *r, const cJSON *object, const char *path,
                        const char *key, double limit, int64_t *out) {
  const cJSON *v = need(r, object, path, key);
  return v && number_in_range(r, v, key_path(path, key).text, limit, out);
}

/* The `type` of a component. */
static bool read_type(const Reader *r, const cJSON *v, const char *path,
                      const char **type) {
  return expect_object(r, v, path) && read_string(r, v, path, "type", type);
}

static char *dup_bytes(const char *s, size_t len) {
  char *copy = amk_xmalloc(len + 1);
  memcpy(copy, s, len);
  copy[len] = '\0';
  return copy;
}

/* ---- patterns ------------------------------------------------------------------- */

/* {"String": "..."} or {"Regex": "..."}, compiled. */
static TokRegex *read_pattern(const Reader *r, const cJSON *object,
                              const char *path) {
  const cJSON *pattern = need(r, object, path, "pattern");
  Path at = key_path(path, "pattern");
  if (!pattern || !expect_object(r, pattern, at.text))
    return NULL;
  const cJSON *literal = member(pattern, "String"), *regex = member(pattern, "Regex");
  if (!literal == !regex || cJSON_GetArraySize(pattern) != 1) {
    fail(r, at.text, "expected {\"String\": ...} or {\"Regex\": ...}");
    return NULL;
  }
  const cJSON *v = literal ? literal : regex;
  Path inner = key_path(at.text, literal ? "String" : "Regex");
  if (!cJSON_IsString(v)) {
    fail(r, inner.text, "expected a string, not %s", json_kind(v));
    return NULL;
  }
  AmkStrBuf error;
  amk_sb_init(&error);
  TokRegex *re = tok_regex_compile(v->valuestring, strlen(v->valuestring),
                                   literal != NULL, &error);
  if (!re)
    fail(r, inner.text, "invalid regex: %s", error.data);
  amk_sb_free(&error);
  return re;
}

/* ---- normalizers ------------------------------------------------------------------ */

typedef struct {
  TokNormalizer *items;
  size_t n, cap;
} Normalizers;

static TokNormalizer *add_normalizer(Normalizers *list, TokNormKind kind) {
  if (list->n == list->cap) {
    list->cap = list->cap ? list->cap * 2 : 4;
    list->items = amk_xrealloc(list->items, list->cap * sizeof *list->items);
  }
  TokNormalizer *n = &list->items[list->n++];
  memset(n, 0, sizeof *n);
  n->kind = kind;
  return n;
}

static bool read_replace(const Reader *r, const cJSON *v, const char *path,
                         TokNormalizer *out) {
  const char *content;
  if (!read_string(r, v, path, "content", &content))
    return false;
  out->kind = TOK_NORM_REPLACE;
  out->text = amk_xstrdup(content);
  out->text_len = strlen(content);
  out->pattern = read_pattern(r, v, path);
  return out->pattern != NULL;
}

static bool read_normalizer(const Reader *r, const cJSON *v, const char *path,
                            Normalizers *out) {
  const char *type;
  if (!read_type(r, v, path, &type))
    return false;
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = need(r, v, path, "normalizers");
    Path at = key_path(path, "normalizers");
    if (!list || !expect_array(r, list, at.text))
      return false;
    size_t i = 0;
    for (const cJSON *item = list->child; item; item = item->next, i++)
      if (!read_normalizer(r, item, index_path(at.text, i).text, out))
        return false;
    return true;
  }
  if (strcmp(type, "Prepend") == 0) {
    const char *prepend;
    if (!read_string(r, v, path, "prepend", &prepend))
      return false;
    TokNormalizer *n = add_normalizer(out, TOK_NORM_PREPEND);
    n->text = amk_xstrdup(prepend);
    n->text_len = strlen(prepend);
    return true;
  }
  if (strcmp(type, "Replace") == 0)
    return read_replace(r, v, path, add_normalizer(out, TOK_NORM_REPLACE));
  if (strcmp(type, "NFC") == 0) {
    add_normalizer(out, TOK_NORM_NFC);
    return true;
  }
  return fail(r, key_path(path, "type").text,
              "unsupported normalizer '%s' (supported: Sequence, Prepend, "
              "Replace, NFC)",
              type);
}

/* ---- Metaspace's fields (a pre-tokenizer and a decoder) ------------------------------------ */

typedef struct {
  uint32_t replacement;
  char replacement_utf8[4];
  size_t replacement_len;
  TokPrependScheme prepend;
  bool split;
} MetaspaceFields;

/* As tokenizers reads them: `replacement` one character, `prepend_scheme`
 * "always" (the default), "first" or "never", `split` (default true), and
 * the older `add_prefix_space`, which may only say false with "never". */
static bool read_metaspace(const Reader *r, const cJSON *v, const char *path,
                           MetaspaceFields *out) {
  const char *replacement, *scheme = "always";
  if (!read_string(r, v, path, "replacement", &replacement))
    return false;
  size_t len = strlen(replacement);
  if (len == 0 || tok_utf8_char_len(replacement, len) != len)
    return fail(r, key_path(path, "replacement").text,
                "expected one character, not '%s'", replacement);
  amk_utf8_decode((const unsigned char *)replacement,
                  (const unsigned char *)replacement + len, &out->replacement);
  memcpy(out->replacement_utf8, replacement, len);
  out->replacement_len = len;
  const cJSON *given = member(v, "prepend_scheme");
  if (given && !read_string(r, v, path, "prepend_scheme", &scheme))
    return false;
  static const char *const schemes[] = {"always", "first", "never"};
  size_t k = 0;
  while (k < 3 && strcmp(scheme, schemes[k]) != 0)
    k++;
  if (k == 3)
    return fail(r, key_path(path, "prepend_scheme").text,
                "unknown prepend_scheme '%s' (expected always, first or never)",
                scheme);
  out->prepend = (TokPrependScheme)k;
  bool prefix_space;
  if (!read_bool(r, v, path, "add_prefix_space", false, true, &prefix_space) ||
      !read_bool(r, v, path, "split", false, true, &out->split))
    return false;
  if (!prefix_space && out->prepend != TOK_PREPEND_NEVER)
    return fail(r, key_path(path, "add_prefix_space").text,
                "false does not match prepend_scheme '%s'", scheme);
  return true;
}

/* ---- pre-tokenizers ------------------------------------------------------------------ */

/* GPT-2's pattern, which ByteLevel uses when use_regex is true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

typedef struct {
  TokPreStep *items;
  size_t n, cap;
  bool byte_level;            /* a ByteLevel has been read */
  char byte_level_path[256];  /* where */
} PreSteps;

static TokPreStep *add_step(PreSteps *list, TokStepKind kind) {
  if (list->n == list->cap) {
    list->cap = list->cap ? list->cap * 2 : 4;
    list->items = amk_xrealloc(list->items, list->cap * sizeof *list->items);
  }
  TokPreStep *s = &list->items[list->n++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  return s;
}

static bool add_regex_step(const Reader *r, PreSteps *out, const char *path,
                           const char *pattern, TokSplitBehavior behavior) {
  AmkStrBuf error;
  amk_sb_init(&error);
  TokRegex *re = tok_regex_compile(pattern, strlen(pattern), false, &error);
  amk_sb_free(&error);
  if (!re)
    return fail(r, path, "internal pattern failed to compile");
  TokPreStep *step = add_step(out, TOK_STEP_SPLIT);
  step->regex = re;
  step->behavior = behavior;
  return true;
}

static bool read_behavior(const Reader *r, const cJSON *v, const char *path,
                          TokSplitBehavior *out) {
  static const struct {
    const char *name;
    TokSplitBehavior behavior;
  } names[] = {{"Removed", TOK_SPLIT_REMOVED},
               {"Isolated", TOK_SPLIT_ISOLATED},
               {"MergedWithPrevious", TOK_SPLIT_MERGED_WITH_PREVIOUS},
               {"MergedWithNext", TOK_SPLIT_MERGED_WITH_NEXT},
               {"Contiguous", TOK_SPLIT_CONTIGUOUS}};
  const char *name;
  if (!read_string(r, v, path, "behavior", &name))
    return false;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i].name) == 0) {
      *out = names[i].behavior;
      return true;
    }
  return fail(r, key_path(path, "behavior").text,
              "unknown behavior '%s' (expected Removed, Isolated, "
              "MergedWithPrevious, MergedWithNext or Contiguous)",
              name);
}

static bool read_pre_tokenizer(const Reader *r, const cJSON *v,
                               const char *path, PreSteps *out) {
  const char *type;
  if (!read_type(r, v, path, &type))
    return false;
  if (out->byte_level && strcmp(type, "Sequence") != 0)
    return fail(r, path,
                "a %s pre-tokenizer after ByteLevel (at '%s') is not "
                "supported: ByteLevel must come last",
                type, out->byte_level_path);
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = need(r, v, path, "pretokenizers");
    Path at = key_path(path, "pretokenizers");
    if (!list || !expect_array(r, list, at.text))
      return false;
    size_t i = 0;
    for (const cJSON *item = list->child; item; item = item->next, i++)
      if (!read_pre_tokenizer(r, item, index_path(at.text, i).text, out))
        return false;
    return true;
  }
  if (strcmp(type, "Split") == 0) {
    TokSplitBehavior behavior = TOK_SPLIT_ISOLATED;
    bool invert;
    if (!read_behavior(r, v, path, &behavior) ||
        !read_bool(r, v, path, "invert", true, false, &invert))
      return false;
    TokRegex *re = read_pattern(r, v, path);
    if (!re)
      return false;
    TokPreStep *step = add_step(out, TOK_STEP_SPLIT);
    step->regex = re;
    step->behavior = behavior;
    step->invert = invert;
    return true;
  }
  if (strcmp(type, "Metaspace") == 0) {
    /* Its prepend_scheme "first" needs the piece to be the segment, as it
     * is when Metaspace comes first. */
    if (out->n)
      return fail(r, path, "a Metaspace pre-tokenizer after another is not "
                  "supported: Metaspace must come first");
    MetaspaceFields f;
    if (!read_metaspace(r, v, path, &f))
      return false;
    TokPreStep *step = add_step(out, TOK_STEP_METASPACE);
    memcpy(step->replacement, f.replacement_utf8, f.replacement_len);
    step->replacement_len = f.replacement_len;
    step->prepend = f.prepend;
    if (!f.split)
      return true;
    /* Split before each replacement, which joins the word after it. */
    AmkStrBuf error;
    amk_sb_init(&error);
    TokRegex *re = tok_regex_compile(f.replacement_utf8, f.replacement_len,
                                     true, &error);
    amk_sb_free(&error);
    step = add_step(out, TOK_STEP_SPLIT);
    step->regex = re;
    step->behavior = TOK_SPLIT_MERGED_WITH_NEXT;
    return true;
  }
  if (strcmp(type, "Digits") == 0) {
    bool individual;
    if (!read_bool(r, v, path, "individual_digits", true, false, &individual))
      return false;
    /* Numeric characters (Rust's char::is_numeric is \p{N}), each alone or
     * in runs. */
    return add_regex_step(r, out, path, "\\p{N}",
                          individual ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS);
  }
  if (strcmp(type, "ByteLevel") == 0) {
    bool prefix_space, trim_offsets, use_regex;
    if (!read_bool(r, v, path, "add_prefix_space", true, false, &prefix_space) ||
        !read_bool(r, v, path, "trim_offsets", true, false, &trim_offsets) ||
        !read_bool(r, v, path, "use_regex", false, true, &use_regex))
      return false;
    if (prefix_space)
      add_step(out, TOK_STEP_PREFIX_SPACE);
    if (use_regex && !add_regex_step(r, out, path, GPT2_PATTERN,
                                     TOK_SPLIT_ISOLATED))
      return false;
    out->byte_level = true;
    if (snprintf(out->byte_level_path, sizeof out->byte_level_path, "%s", path) < 0)
      out->byte_level_path[0] = '\0';
    return true;
  }
  return fail(r, key_path(path, "type").text,
              "unsupported pre-tokenizer '%s' (supported: Sequence, Split, "
              "ByteLevel, Digits, Metaspace)",
              type);
}

/* ---- the model ------------------------------------------------------------------------ */

static int32_t vocab_id(const TokBpe *bpe, const char *s, size_t len) {
  return tok_bpe_token_id(bpe, s, len);
}

static bool read_vocab(const Reader *r, const cJSON *vocab, const char *path,
                       TokBpeConfig *config) {
  if (!expect_object(r, vocab, path))
    return false;
  size_t n = (size_t)cJSON_GetArraySize(vocab), bytes = 0;
  for (const cJSON *e = vocab->child; e; e = e->next)
    bytes += strlen(e->string) + 1;
  config->strings = amk_xmalloc(bytes ? bytes : 1);
  config->offsets = amk_xmalloc((n ? n : 1) * sizeof *config->offsets);
  config->ids = amk_xmalloc((n ? n : 1) * sizeof *config->ids);
  /* Which entry holds each id, to refuse an id given twice. */
  int32_t *holder = NULL;
  size_t holder_len = 0, at = 0, i = 0;
  bool ok = true;
  for (const cJSON *e = vocab->child; e && ok; e = e->next, i++) {
    int64_t id;
    Path p = key_path(path, e->string);
    if (!number_in_range(r, e, p.text, TOK_MAX_ID, &id)) {
      ok = false;
      break;
    }
    if ((size_t)id >= holder_len) {
      size_t len = holder_len ? holder_len : 1024;
      while (len <= (size_t)id)
        len *= 2;
      holder = amk_xrealloc(holder, len * sizeof *holder);
      for (size_t k = holder_len; k < len; k++)
        holder[k] = -1;
      holder_len = len;
    }
    if (holder[id] >= 0) {
      ok = fail(r, p.text, "id %lld is also the id of '%s'", (long long)id,
                config->strings + config->offsets[holder[id]]);
      break;
    }
    holder[id] = (int32_t)i;
    size_t len = strlen(e->string) + 1;
    memcpy(config->strings + at, e->string, len);
    config->offsets[i] = at;
    config->ids[i] = (int32_t)id;
    at += len;
  }
  free(holder);
  config->n = i;
  return ok;
}

/* One merge as (left, right): "a b" (one space) or ["a", "b"]. */
static bool read_merge(const Reader *r, const cJSON *m, const char *path,
                       bool as_strings, const char **left, size_t *left_len,
                       const char **right, size_t *right_len) {
  if (as_strings) {
    if (!cJSON_IsString(m))
      return fail(r, path, "expected a string like the first merge, not %s",
                  json_kind(m));
    const char *s = m->valuestring, *space = strchr(s, ' ');
    if (!space || strchr(space + 1, ' '))
      return fail(r, path,
                  "a merge written as a string needs exactly one space, "
                  "between its two tokens: '%s'",
                  s);
    *left = s, *left_len = (size_t)(space - s);
    *right = space + 1, *right_len = strlen(space + 1);
    return true;
  }
  if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2 ||
      !cJSON_IsString(m->child) || !cJSON_IsString(m->child->next))
    return fail(r, path,
                "expected a pair of strings like the first merge, not %s",
                json_kind(m));
  *left = m->child->valuestring, *left_len = strlen(*left);
  *right = m->child->next->valuestring, *right_len = strlen(*right);
  return true;
}

static bool read_merges(const Reader *r, const cJSON *merges, const char *path,
                        TokBpe *bpe) {
  if (!expect_array(r, merges, path))
    return false;
  size_t n = (size_t)cJSON_GetArraySize(merges), kept = 0, i = 0;
  int32_t *triples = amk_xmalloc((n ? n : 1) * 3 * sizeof *triples);
  bool as_strings = merges->child && cJSON_IsString(merges->child);
  AmkStrBuf joined;
  amk_sb_init(&joined);
  bool ok = true;
  for (const cJSON *m = merges->child; m && ok; m = m->next, i++) {
    Path p = index_path(path, i);
    /* merges.txt's header line, which tokenizers skips too. */
    if (as_strings && cJSON_IsString(m) &&
        strncmp(m->valuestring, "#version", 8) == 0)
      continue;
    const char *left = NULL, *right = NULL;
    size_t left_len = 0, right_len = 0;
    if (!read_merge(r, m, p.text, as_strings, &left, &left_len, &right,
                    &right_len)) {
      ok = false;
      break;
    }
    joined.len = 0;
    amk_sb_putn(&joined, left, left_len);
    amk_sb_putn(&joined, right, right_len);
    int32_t a = vocab_id(bpe, left, left_len), b = vocab_id(bpe, right, right_len);
    int32_t ab = vocab_id(bpe, joined.data, joined.len);
    const char *missing = a < 0 ? "its first token" : b < 0 ? "its second token"
                                                          : "the merged token";
    if (a < 0 || b < 0 || ab < 0) {
      const char *what = a < 0 ? left : b < 0 ? right : joined.data;
      int what_len = (int)(a < 0 ? left_len : b < 0 ? right_len : joined.len);
      ok = fail(r, p.text, "%s '%.*s' is not in the vocabulary", missing,
                what_len, what);
      break;
    }
    triples[3 * kept] = a;
    triples[3 * kept + 1] = b;
    triples[3 * kept + 2] = ab;
    kept++;
  }
  amk_sb_free(&joined);
  if (!ok) {
    free(triples);
    return false;
  }
  tok_bpe_set_merges(bpe, triples, kept);
  return true;
}

/* An optional string: NULL when absent or null. */
static bool read_optional_string(const Reader *r, const cJSON *object,
                                 const char *path, const char *key,
                                 const char **out) {
  const cJSON *v = member(object, key);
  *out = NULL;
  if (!v || cJSON_IsNull(v))
    return true;
  if (!cJSON_IsString(v))
    return fail(r, key_path(path, key).text, "expected a string or null, not %s",
                json_kind(v));
  *out = v->valuestring;
  return true;
}

static TokBpe *read_model(const Reader *r, const cJSON *model, bool byte_level) {
  const char *path = "model", *type;
  if (!read_type(r, model, path, &type))
    return NULL;
  if (strcmp(type, "BPE") != 0) {
    fail(r, "model.type", "unsupported model type '%s' (supported: BPE)", type);
    return NULL;
  }
  const cJSON *dropout = member(model, "dropout");
  if (dropout && !cJSON_IsNull(dropout) &&
      !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0)) {
    fail(r, "model.dropout",
         "BPE dropout is not supported (encoding would be random)");
    return NULL;
  }
  const char *prefix, *suffix, *unk;
  if (!read_optional_string(r, model, path, "continuing_subword_prefix", &prefix) ||
      !read_optional_string(r, model, path, "end_of_word_suffix", &suffix) ||
      !read_optional_string(r, model, path, "unk_token", &unk))
    return NULL;
  if ((prefix && *prefix) || (suffix && *suffix)) {
    bool is_prefix = prefix && *prefix;
    fail(r, is_prefix ? "model.continuing_subword_prefix" : "model.end_of_word_suffix",
         "a %s ('%s') is not supported (Llama-family files have none)",
         is_prefix ? "continuing subword prefix" : "end-of-word suffix",
         is_prefix ? prefix : suffix);
    return NULL;
  }
  TokBpeConfig config = {0};
  config.unk_id = -1;
  config.byte_level = byte_level;
  if (!read_bool(r, model, path, "fuse_unk", false, false, &config.fuse_unk) ||
      !read_bool(r, model, path, "byte_fallback", false, false,
                 &config.byte_fallback) ||
      !read_bool(r, model, path, "ignore_merges", false, false,
                 &config.ignore_merges))
    return NULL;
  const cJSON *vocab = need(r, model, path, "vocab");
  const cJSON *merges = need(r, model, path, "merges");
  if (!vocab || !merges || !read_vocab(r, vocab, "model.vocab", &config)) {
    free(config.strings);
    free(config.offsets);
    free(config.ids);
    return NULL;
  }
  TokBpe *bpe = tok_bpe_new(&config);
  if (!read_merges(r, merges, "model.merges", bpe)) {
    tok_bpe_free(bpe);
    return NULL;
  }
  if (unk) {
    int32_t unk_id = vocab_id(bpe, unk, strlen(unk));
    if (unk_id < 0) {
      fail(r, "model.unk_token", "'%s' is not in the vocabulary", unk);
      tok_bpe_free(bpe);
      return NULL;
    }
    /* Set after tok_bpe_new, once the vocabulary can be searched. */
    tok_bpe_set_unk(bpe, unk_id);
  }
  return bpe;
}

/* ---- added tokens ---------------------------------------------------------------------- */

static int32_t added_index(const AmkTokenizer *t, const char *content, size_t len) {
  const AmkNameSlot *slot = amk_name_map_find(&t->added_by_content, content, len);
  return slot ? slot->index : -1;
}

/* Reads added_tokens, giving each token the id tokenizers gives it: the
 * vocabulary's id for its content, else the next id after the vocabulary.
 * A file whose own id differs is refused (tokenizers only warns, and the
 * model's embedding rows would then not match the file's ids). */
static bool read_added_tokens(const Reader *r, const cJSON *list,
                              AmkTokenizer *t) {
  const char *path = "added_tokens";
  if (!expect_array(r, list, path))
    return false;
  size_t n = (size_t)cJSON_GetArraySize(list), i = 0;
  t->added = amk_xcalloc(n ? n : 1, sizeof *t->added);
  int64_t next_id = (int64_t)tok_bpe_vocab_count(t->bpe);
  for (const cJSON *item = list->child; item; item = item->next, i++) {
    Path p = index_path(path, i);
    TokAddedToken token = {0};
    const char *content;
    int64_t file_id;
    if (!expect_object(r, item, p.text) ||
        !read_number(r, item, p.text, "id", TOK_MAX_ID, &file_id) ||
        !read_string(r, item, p.text, "content", &content) ||
        !read_bool(r, item, p.text, "single_word", true, false, &token.single_word) ||
        !read_bool(r, item, p.text, "lstrip", true, false, &token.lstrip) ||
        !read_bool(r, item, p.text, "rstrip", true, false, &token.rstrip) ||
        !read_bool(r, item, p.text, "normalized", true, false, &token.normalized) ||
        !read_bool(r, item, p.text, "special", true, false, &token.special))
      return false;
    size_t len = strlen(content);
    if (len == 0)
      continue; /* tokenizers ignores an empty token */
    int32_t existing = added_index(t, content, len);
    int32_t in_vocab = tok_bpe_token_id(t->bpe, content, len);
    int64_t id = existing >= 0 ? t->added[existing].id
                 : in_vocab >= 0 ? in_vocab
                                 : next_id++;
    if (id >= TOK_MAX_ID)
      return fail(r, p.text, "token '%s' would get id %lld, past the largest "
                  "id supported (%d)", content, (long long)id, TOK_MAX_ID - 1);
    if (id != file_id)
      return fail(r, p.text,
                  "token '%s' has id %lld in the file, but tokenizers gives it "
                  "id %lld (%s); refusing ids that disagree",
                  content, (long long)file_id, (long long)id,
                  existing >= 0 ? "the id of the same token listed before"
                  : in_vocab >= 0
                      ? "its id in model.vocab"
                      : "the next id after the vocabulary and the added tokens "
                        "before it");
    token.id = (int32_t)id;
    if (existing >= 0) {
      /* Listed again: the later flags win, as in tokenizers' map. */
      token.content = t->added[existing].content;
      token.len = len;
      t->added[existing] = token;
      continue;
    }
    token.content = dup_bytes(content, len);
    token.len = len;
    t->added[t->n_added] = token;
    amk_name_map_add(&t->added_by_content, token.content, len,
                     (int32_t)t->n_added);
    t->n_added++;
  }
  return true;
}

/* The tries that cut added tokens out of the text: those matched in the
 * raw text, and those (normalized: true) matched, by their normalized form,
 * in the normalized text. */
static bool build_tries(const Reader *r, AmkTokenizer *t) {
  size_t n = t->n_added;
  const char **raw = amk_xcalloc(n ? n : 1, sizeof *raw);
  const char **normalized = amk_xcalloc(n ? n : 1, sizeof *normalized);
  size_t *raw_len = amk_xcalloc(n ? n : 1, sizeof *raw_len);
  size_t *normalized_len = amk_xcalloc(n ? n : 1, sizeof *normalized_len);
  TokScratch scratch = {0};
  AmkStrBuf error;
  amk_sb_init(&error);
  bool any_raw = false, any_normalized = false, any_single_word = false, ok = true;
  for (size_t i = 0; i < n && ok; i++) {
    const TokAddedToken *token = &t->added[i];
    any_single_word |= token->single_word;
    if (!token->normalized) {
      raw[i] = token->content;
      raw_len[i] = token->len;
      any_raw = true;
      continue;
    }
    TokSpan form;
    ok = tok_normalize(t->normalizers, t->n_normalizers,
                       (TokSpan){token->content, token->len}, &scratch, &form,
                       &error);
    if (!ok) {
      fail(r, "added_tokens", "normalizing '%s': %s", token->content, error.data);
      break;
    }
    /* The arena keeps the normalized forms until the trie has copied them. */
    normalized[i] = form.text;
    normalized_len[i] = form.len;
    any_normalized = true;
  }
  if (ok && any_raw)
    t->raw_trie = tok_trie_new(raw, raw_len, n);
  if (ok && any_normalized)
    t->normalized_trie = tok_trie_new(normalized, normalized_len, n);
  if (ok && any_single_word) {
    /* Rust regex's \w, which tokenizers' single_word test uses. */
    static const char word[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";
    t->word_char = tok_regex_compile(word, strlen(word), false, &error);
    if (!t->word_char)
      AMK_UNREACHABLE("the word-character class does not compile");
  }
  amk_sb_free(&error);
  tok_scratch_free(&scratch);
  free(raw);
  free(normalized);
  free(raw_len);
  free(normalized_len);
  return ok;
}

/* Every id's token string for decoding: the added tokens' content over the
 * model's vocabulary. */
static void build_id_table(AmkTokenizer *t) {
  size_t model_count;
  const char *const *model_tokens = tok_bpe_tokens(t->bpe, &model_count);
  t->vocab_size = model_count;
  for (size_t i = 0; i < t->n_added; i++)
    if ((size_t)t->added[i].id + 1 > t->vocab_size)
      t->vocab_size = (size_t)t->added[i].id + 1;
  size_t n = t->vocab_size ? t->vocab_size : 1;
  t->token_of_id = amk_xcalloc(n, sizeof *t->token_of_id);
  t->token_len = amk_xcalloc(n, sizeof *t->token_len);
  t->special = amk_xcalloc(n, sizeof *t->special);
  for (size_t id = 0; id < model_count; id++)
    if (model_tokens[id]) {
      t->token_of_id[id] = model_tokens[id];
      t->token_len[id] = strlen(model_tokens[id]);
    }
  for (size_t i = 0; i < t->n_added; i++) {
    const TokAddedToken *token = &t->added[i];
    t->token_of_id[token->id] = token->content;
    t->token_len[token->id] = token->len;
    t->special[token->id] = token->special;
  }
}

/* ---- the post-processor ------------------------------------------------------------------ */

static bool read_special_ids(const Reader *r, const AmkTokenizer *t,
                             const cJSON *special_tokens, const char *path,
                             const char *name, TokTemplateItem *item) {
  const cJSON *entry = member(special_tokens, name);
  if (!entry)
    return fail(r, path, "'%s' is not in post_processor's special_tokens", name);
  Path at = key_path("post_processor.special_tokens", name);
  const cJSON *ids = need(r, entry, at.text, "ids");
  Path ids_at = key_path(at.text, "ids");
  if (!expect_object(r, entry, at.text) || !ids || !expect_array(r, ids, ids_at.text))
    return false;
  item->n_ids = (size_t)cJSON_GetArraySize(ids);
  item->ids = amk_xcalloc(item->n_ids ? item->n_ids : 1, sizeof *item->ids);
  size_t k = 0;
  for (const cJSON *v = ids->child; v; v = v->next, k++) {
    int64_t id;
    if (!token_id_in_range(r, v, index_path(ids_at.text, k).text,
                           t->vocab_size, &id))
      return false;
    /* Ids may have holes: one no token has would be encoded as nothing. */
    if (!t->token_of_id[id])
      return fail(r, index_path(ids_at.text, k).text,
                  "token id %" PRId64 " is neither in the vocabulary nor an added token", id);
    item->ids[k] = (int32_t)id;
  }
  return true;
}

static bool read_template(const Reader *r, const cJSON *v, const char *path,
                          AmkTokenizer *t) {
  if (t->template_items)
    return fail(r, path, "a second TemplateProcessing is not supported");
  const cJSON *single = need(r, v, path, "single");
  const cJSON *special_tokens = need(r, v, path, "special_tokens");
  Path single_at = key_path(path, "single");
  if (!single || !need(r, v, path, "pair") || !special_tokens ||
      !expect_array(r, single, single_at.text) ||
      !expect_object(r, special_tokens, key_path(path, "special_tokens").text))
    return false;
  size_t n = (size_t)cJSON_GetArraySize(single), i = 0, sequences = 0;
  t->template_items = amk_xcalloc(n ? n : 1, sizeof *t->template_items);
  t->n_template_items = n;
  for (const cJSON *piece = single->child; piece; piece = piece->next, i++) {
    Path p = index_path(single_at.text, i);
    const cJSON *special = member(piece, "SpecialToken");
    const cJSON *sequence = member(piece, "Sequence");
    if (!expect_object(r, piece, p.text))
      return false;
    if (!special == !sequence || cJSON_GetArraySize(piece) != 1)
      return fail(r, p.text, "expected {\"SpecialToken\": ...} or "
                  "{\"Sequence\": ...}");
    Path inner = key_path(p.text, special ? "SpecialToken" : "Sequence");
    const cJSON *body = special ? special : sequence;
    const char *id;
    int64_t type_id;
    if (!expect_object(r, body, inner.text) ||
        !read_string(r, body, inner.text, "id", &id) ||
        !read_number(r, body, inner.text, "type_id", 4294967296.0, &type_id))
      return false;
    if (special) {
      if (!read_special_ids(r, t, special_tokens, key_path(inner.text, "id").text,
                            id, &t->template_items[i]))
        return false;
      continue;
    }
    if (strcmp(id, "A") != 0)
      return fail(r, key_path(inner.text, "id").text,
                  "the single template holds sequence A, not '%s'", id);
    t->template_items[i].is_sequence = true;
    sequences++;
  }
  if (sequences != 1)
    return fail(r, single_at.text,
                "the template must hold the sequence ({\"Sequence\": {\"id\": "
                "\"A\"}}) exactly once, not %zu times", sequences);
  return true;
}

static bool read_post_processor(const Reader *r, const cJSON *v,
                                const char *path, AmkTokenizer *t) {
  const char *type;
  if (!read_type(r, v, path, &type))
    return false;
  if (strcmp(type, "TemplateProcessing") == 0)
    return read_template(r, v, path, t);
  if (strcmp(type, "ByteLevel") == 0) {
    /* It only trims offsets, which we do not compute. */
    bool unused;
    return read_bool(r, v, path, "add_prefix_space", true, false, &unused) &&
           read_bool(r, v, path, "trim_offsets", true, false, &unused);
  }
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = need(r, v, path, "processors");
    Path at = key_path(path, "processors");
    if (!list || !expect_array(r, list, at.text))
      return false;
    size_t i = 0;
    for (const cJSON *item = list->child; item; item = item->next, i++)
      if (!read_post_processor(r, item, index_path(at.text, i).text, t))
        return false;
    return true;
  }
  return fail(r, key_path(path, "type").text,
              "unsupported post-processor '%s' (supported: TemplateProcessing, "
              "ByteLevel, Sequence)",
              type);
}

/* ---- decoders --------------------------------------------------------------------------- */

typedef struct {
  TokDecoder *items;
  size_t n, cap;
} Decoders;

static TokDecoder *add_decoder(Decoders *list, TokDecoderKind kind) {
  if (list->n == list->cap) {
    list->cap = list->cap ? list->cap * 2 : 4;
    list->items = amk_xrealloc(list->items, list->cap * sizeof *list->items);
  }
  TokDecoder *d = &list->items[list->n++];
  memset(d, 0, sizeof *d);
  d->kind = kind;
  return d;
}

static bool read_strip(const Reader *r, const cJSON *v, const char *path,
                       TokDecoder *d) {
  const char *content;
  int64_t start, stop;
  if (!read_string(r, v, path, "content", &content) ||
      !read_number(r, v, path, "start", 1e15, &start) ||
      !read_number(r, v, path, "stop", 1e15, &stop))
    return false;
  size_t len = strlen(content);
  if (len == 0 || tok_utf8_char_len(content, len) != len)
    return fail(r, key_path(path, "content").text,
                "expected one character, not '%s'", content);
  amk_utf8_decode((const unsigned char *)content,
                  (const unsigned char *)content + len, &d->strip_char);
  d->strip_start = (size_t)start;
  d->strip_stop = (size_t)stop;
  return true;
}

static bool read_decoder(const Reader *r, const cJSON *v, const char *path,
                         Decoders *out) {
  const char *type;
  if (!read_type(r, v, path, &type))
    return false;
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = need(r, v, path, "decoders");
    Path at = key_path(path, "decoders");
    if (!list || !expect_array(r, list, at.text))
      return false;
    size_t i = 0;
    for (const cJSON *item = list->child; item; item = item->next, i++)
      if (!read_decoder(r, item, index_path(at.text, i).text, out))
        return false;
    return true;
  }
  if (strcmp(type, "ByteLevel") == 0) {
    bool unused;
    if (!read_bool(r, v, path, "add_prefix_space", true, false, &unused) ||
        !read_bool(r, v, path, "trim_offsets", true, false, &unused))
      return false;
    add_decoder(out, TOK_DECODE_BYTE_LEVEL);
    return true;
  }
  if (strcmp(type, "Replace") == 0)
    return read_replace(r, v, path, &add_decoder(out, TOK_DECODE_REPLACE)->replace);
  if (strcmp(type, "ByteFallback") == 0) {
    add_decoder(out, TOK_DECODE_BYTE_FALLBACK);
    return true;
  }
  if (strcmp(type, "Fuse") == 0) {
    add_decoder(out, TOK_DECODE_FUSE);
    return true;
  }
  if (strcmp(type, "Strip") == 0)
    return read_strip(r, v, path, add_decoder(out, TOK_DECODE_STRIP));
  if (strcmp(type, "Metaspace") == 0) {
    MetaspaceFields f;
    if (!read_metaspace(r, v, path, &f))
      return false;
    TokDecoder *d = add_decoder(out, TOK_DECODE_METASPACE);
    d->strip_char = f.replacement;
    d->drop_first = f.prepend != TOK_PREPEND_NEVER;
    return true;
  }
  return fail(r, key_path(path, "type").text,
              "unsupported decoder '%s' (supported: Sequence, ByteLevel, "
              "Replace, ByteFallback, Fuse, Strip, Metaspace)",
              type);
}

/* ---- tokenizer.json ---------------------------------------------------------------------- */

/* A top-level component: absent and null both mean none. */
static const cJSON *component(const cJSON *root, const char *key) {
  const cJSON *v = member(root, key);
  return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool read_tokenizer(const Reader *r, const cJSON *root, AmkTokenizer *t) {
  if (!cJSON_IsObject(root))
    return fail(r, NULL, "the top level must be a JSON object, not %s",
                json_kind(root));
  const cJSON *version = member(root, "version");
  if (version && !(cJSON_IsString(version) &&
                   strcmp(version->valuestring, "1.0") == 0))
    return fail(r, "version", "unknown tokenizer.json version (expected \"1.0\")");
  if (component(root, "truncation"))
    return fail(r, "truncation", "truncation is not supported (it would cut "
                "the ids short); it must be null");
  if (component(root, "padding"))
    return fail(r, "padding", "padding is not supported; it must be null");

  const cJSON *v;
  Normalizers norms = {0};
  bool ok = !(v = component(root, "normalizer")) ||
            read_normalizer(r, v, "normalizer", &norms);
  t->normalizers = norms.items;
  t->n_normalizers = norms.n;
  if (!ok)
    return false;

  PreSteps steps = {0};
  ok = !(v = component(root, "pre_tokenizer")) ||
       read_pre_tokenizer(r, v, "pre_tokenizer", &steps);
  t->steps = steps.items;
  t->n_steps = steps.n;
  t->byte_level = steps.byte_level;
  if (!ok)
    return false;

  const cJSON *model = member(root, "model");
  if (!model)
    return fail(r, NULL, "missing key 'model'");
  if (!(t->bpe = read_model(r, model, t->byte_level)))
    return false;

  if ((v = component(root, "added_tokens")) && !read_added_tokens(r, v, t))
    return false;
  if (!build_tries(r, t))
    return false;
  build_id_table(t);

  if ((v = component(root, "post_processor")) &&
      !read_post_processor(r, v, "post_processor", t))
    return false;

  Decoders decoders = {0};
  v = component(root, "decoder");
  t->has_decoder = v != NULL;
  ok = !v || read_decoder(r, v, "decoder", &decoders);
  t->decoders = decoders.items;
  t->n_decoders = decoders.n;
  return ok;
}

/* Parses JSON as Python would read it; NULL after reporting. */
static cJSON *parse_json(const char *label, const char *text, size_t len,
                         AmkDiagEngine *diag) {
  size_t valid = tok_utf8_valid_prefix(text, len);
  if (valid < len) {
    amk_error(diag, no_loc(), "%s: not valid UTF-8 (byte 0x%02x at offset %zu)",
              label, (unsigned char)text[valid], valid);
    return NULL;
  }
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  if (!root) {
    amk_error(diag, no_loc(), "%s: not valid JSON (near byte %zu)", label,
              end ? (size_t)(end - text) : (size_t)0);
    return NULL;
  }
  if (!amk_json_check_strict(label, text, len, end, root,
                             AMK_JSON_TRAILING_WHITESPACE, diag)) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

AmkTokenizer *amk_tokenizer_load_json(const char *json, size_t len,
                                      const char *name, AmkDiagEngine *diag) {
  cJSON *root = parse_json(name, json, len, diag);
  if (!root)
    return NULL;
  AmkTokenizer *t = amk_xcalloc(1, sizeof *t);
  t->label = amk_xstrdup(name);
  t->bos_id = -1;
  Reader r = {t->label, diag};
  bool ok = read_tokenizer(&r, root, t);
  cJSON_Delete(root);
  if (!ok) {
    amk_tokenizer_free(t);
    return NULL;
  }
  /* The template's leading special token is the BOS unless a config says. */
  if (t->n_template_items && !t->template_items[0].is_sequence &&
      t->template_items[0].n_ids == 1)
    t->bos_id = t->template_items[0].ids[0];
  return t;
}

/* ---- a model folder's configs ---------------------------------------------------------------- */

/* Reads `dir/name` if it is there: *root is NULL when it is absent. */
static bool read_config(const char *dir, const char *name, char **label,
                        cJSON **root, AmkDiagEngine *diag) {
  *label = amk_path_join(dir, name);
  *root = NULL;
  if (amk_path_kind(*label) == AMK_PATH_ABSENT)
    return true;
  size_t len;
  char *text = amk_read_regular_file(*label, &len, diag);
  if (!text)
    return false;
  *root = parse_json(*label, text, len, diag);
  free(text);
  if (!*root)
    return false;
  if (!cJSON_IsObject(*root)) {
    amk_error(diag, no_loc(), "%s: the top level must be a JSON object", *label);
    return false;
  }
  return true;
}

static bool check_id(const Reader *r, const AmkTokenizer *t, const cJSON *v,
                     const char *path, int32_t *id) {
  int64_t value;
  if (!token_id_in_range(r, v, path, t->vocab_size, &value))
    return false;
  if (!t->token_of_id[value])
    return fail(r, path, "no token has id %lld", (long long)value);
  *id = (int32_t)value;
  return true;
}

static void add_eos(AmkTokenizer *t, int32_t id) {
  if (amk_tokenizer_is_eos(t, id))
    return;
  t->eos_ids = amk_xrealloc(t->eos_ids, (t->n_eos + 1) * sizeof *t->eos_ids);
  t->eos_ids[t->n_eos++] = id;
}

/* `key`: an id, a list of ids, or null; calls `take` with each. */
static bool read_id_list(const Reader *r, const cJSON *root, const char *key,
                         AmkTokenizer *t, void (*take)(AmkTokenizer *, int32_t)) {
  const cJSON *v = member(root, key);
  if (!v || cJSON_IsNull(v))
    return true;
  int32_t id;
  if (!cJSON_IsArray(v)) {
    if (!check_id(r, t, v, key, &id))
      return false;
    take(t, id);
    return true;
  }
  size_t i = 0;
  for (const cJSON *item = v->child; item; item = item->next, i++) {
    if (!check_id(r, t, item, index_path(key, i).text, &id))
      return false;
    take(t, id);
  }
  return true;
}

/* A list of BOS ids gives the first. */
static void take_bos(AmkTokenizer *t, int32_t id) {
  if (t->bos_id < 0)
    t->bos_id = id;
}

/* bos_token_id and eos_token_id, each an id or a list of ids. */
static bool read_token_ids(const Reader *r, const cJSON *root, AmkTokenizer *t) {
  return read_id_list(r, root, "bos_token_id", t, take_bos) &&
         read_id_list(r, root, "eos_token_id", t, add_eos);
}

/* bos_token / eos_token: a token string, an AddedToken object holding one
 * as "content", or null. -1 when none. */
static bool read_token_name(const Reader *r, const AmkTokenizer *t,
                            const cJSON *root, const char *key, int32_t *id) {
  const cJSON *v = member(root, key);
  *id = -1;
  if (!v || cJSON_IsNull(v))
    return true;
  Path at = key_path("", key);
  if (cJSON_IsObject(v)) {
    v = need(r, v, at.text, "content");
    at = key_path(key, "content");
    if (!v)
      return false;
  }
  if (!cJSON_IsString(v))
    return fail(r, at.text, "expected a token string or an object with "
                "\"content\", not %s", json_kind(v));
  *id = amk_tokenizer_token_id(t, v->valuestring, strlen(v->valuestring));
  if (*id < 0)
    return fail(r, at.text, "'%s' is not a token of %s", v->valuestring,
                t->label);
  return true;
}

/* The BOS and EOS ids: generation_config.json's (else config.json's) ids,
 * then tokenizer_config.json's token names where those left a gap. */
static bool read_folder_configs(AmkTokenizer *t, const char *dir,
                                AmkDiagEngine *diag) {
  char *labels[3] = {NULL, NULL, NULL};
  cJSON *roots[3] = {NULL, NULL, NULL};
  static const char *const names[3] = {"generation_config.json", "config.json",
                                       "tokenizer_config.json"};
  bool ok = true;
  for (int i = 0; i < 3 && ok; i++)
    ok = read_config(dir, names[i], &labels[i], &roots[i], diag);
  int32_t template_bos = t->bos_id;
  t->bos_id = -1;
  const cJSON *ids_root = roots[0] ? roots[0] : roots[1];
  if (ok && ids_root) {
    Reader r = {labels[roots[0] ? 0 : 1], diag};
    ok = read_token_ids(&r, ids_root, t);
  }
  if (ok && roots[2]) {
    Reader r = {labels[2], diag};
    int32_t bos, eos;
    ok = read_token_name(&r, t, roots[2], "bos_token", &bos) &&
         read_token_name(&r, t, roots[2], "eos_token", &eos);
    if (ok && t->bos_id < 0)
      t->bos_id = bos;
    if (ok && eos >= 0)
      add_eos(t, eos);
  }
  if (t->bos_id < 0)
    t->bos_id = template_bos;
  for (int i = 0; i < 3; i++) {
    free(labels[i]);
    cJSON_Delete(roots[i]);
  }
  return ok;
}

AmkTokenizer *amk_tokenizer_load(const char *path, AmkDiagEngine *diag) {
  bool folder = amk_path_kind(path) == AMK_PATH_DIRECTORY;
  char *file = folder ? amk_path_join(path, "tokenizer.json") : amk_xstrdup(path);
  if (folder && amk_path_kind(file) == AMK_PATH_ABSENT) {
    amk_error(diag, no_loc(), "%s: a folder without tokenizer.json", path);
    free(file);
    return NULL;
  }
  size_t len;
  char *text = amk_read_regular_file(file, &len, diag);
  AmkTokenizer *t = text ? amk_tokenizer_load_json(text, len, file, diag) : NULL;
  free(text);
  free(file);
  if (t && folder && !read_folder_configs(t, path, diag)) {
    amk_tokenizer_free(t);
    return NULL;
  }
  return t;
}

/* ---- queries and freeing -------------------------------------------------------------------- */

size_t amk_tokenizer_vocab_size(const AmkTokenizer *t) { return t->vocab_size; }

const char *amk_tokenizer_token(const AmkTokenizer *t, int32_t id) {
  return id >= 0 && (size_t)id < t->vocab_size ? t->token_of_id[id] : NULL;
}

int32_t amk_tokenizer_token_id(const AmkTokenizer *t, const char *token,
                               size_t len) {
  int32_t index = added_index(t, token, len);
  return index >= 0 ? t->added[index].id : tok_bpe_token_id(t->bpe, token, len);
}

bool amk_tokenizer_is_special(const AmkTokenizer *t, int32_t id) {
  return id >= 0 && (size_t)id < t->vocab_size && t->special[id];
}

int32_t amk_tokenizer_bos_id(const AmkTokenizer *t) { return t->bos_id; }

size_t amk_tokenizer_eos_ids(const AmkTokenizer *t, const int32_t **ids) {
  *ids = t->eos_ids;
  return t->n_eos;
}

bool amk_tokenizer_is_eos(const AmkTokenizer *t, int32_t id) {
  for (size_t i = 0; i < t->n_eos; i++)
    if (t->eos_ids[i] == id)
      return true;
  return false;
}

void amk_tokenizer_free(AmkTokenizer *t) {
  if (!t)
    return;
  free(t->label);
  tok_bpe_free(t->bpe);
  for (size_t i = 0; i < t->n_added; i++)
    free(t->added[i].content);
  free(t->added);
  amk_name_map_free(&t->added_by_content);
  tok_trie_free(t->raw_trie);
  tok_trie_free(t->normalized_trie);
  tok_regex_free(t->word_char);
  for (size_t i = 0; i < t->n_normalizers; i++)
    tok_normalizer_free(&t->normalizers[i]);
  free(t->normalizers);
  for (size_t i = 0; i < t->n_steps; i++)
    tok_regex_free(t->steps[i].regex);
  free(t->steps);
  for (size_t i = 0; i < t->n_template_items; i++)
    free(t->template_items[i].ids);
  free(t->template_items);
  for (size_t i = 0; i < t->n_decoders; i++)
    tok_normalizer_free(&t->decoders[i].replace);
  free(t->decoders);
  free(t->token_of_id);
  free(t->token_len);
  free(t->special);
  free(t->eos_ids);
  tok_scratch_free(&t->scratch);
  free(t->cuts.items);
  free(t->normalized_cuts.items);
  free(t);
}

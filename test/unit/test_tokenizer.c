/* The tokenizer library (include/amk/tokenizer.h): each component on small
 * tokenizer.json texts, the pieces of the pipeline on their own, errors,
 * streaming, and seeded property tests on the fixtures in
 * test/tokenizer/Inputs. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tokenizer/tokenizer_internal.h"
#include "../../tokenizer/unicode_nfc.h"
#include "amk/tokenizer.h"
#include "unit.h"

/* ---- helpers ------------------------------------------------------------------ */

static char *format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = malloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* A tokenizer.json; each argument is JSON text ("null" for none). */
typedef struct {
  const char *added, *normalizer, *pre_tokenizer, *post_processor, *decoder;
  const char *vocab, *merges, *model_extra;
} Parts;

static char *tokenizer_json(Parts p) {
  return format("{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
                " \"added_tokens\": %s, \"normalizer\": %s, \"pre_tokenizer\": %s,"
                " \"post_processor\": %s, \"decoder\": %s, \"model\": {\"type\": "
                "\"BPE\", \"vocab\": %s, \"merges\": %s%s}}",
                p.added ? p.added : "[]", p.normalizer ? p.normalizer : "null",
                p.pre_tokenizer ? p.pre_tokenizer : "null",
                p.post_processor ? p.post_processor : "null",
                p.decoder ? p.decoder : "null", p.vocab, p.merges ? p.merges : "[]",
                p.model_extra ? p.model_extra : "");
}

/* Loads `p`, NULL after printing why. */
static AmkTokenizer *load(Parts p) {
  char *json = tokenizer_json(p);
  AmkDiagEngine *d = amk_diag_new(stderr);
  AmkTokenizer *t = amk_tokenizer_load_json(json, strlen(json), "test.json", d);
  amk_diag_free(d);
  free(json);
  return t;
}

/* The first error loading `p` gives (the tokenizer must not load). */
static char *load_error(Parts p) {
  char *json = tokenizer_json(p);
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  AmkTokenizer *t = amk_tokenizer_load_json(json, strlen(json), "test.json", d);
  char *message = amk_diag_captured_count(d)
                      ? strdup(amk_diag_captured(d, 0)->message)
                      : strdup("(no error)");
  amk_tokenizer_free(t);
  amk_diag_free(d);
  free(json);
  return message;
}

/* The ids of `text`, as "1,2,3". */
static char *encode(AmkTokenizer *t, const char *text, bool special) {
  AmkTokenIds ids = {0};
  AmkDiagEngine *d = amk_diag_new(stderr);
  bool ok = amk_tokenizer_encode(t, text, strlen(text), special, &ids, d);
  amk_diag_free(d);
  AmkStrBuf sb;
  amk_sb_init(&sb);
  for (size_t i = 0; ok && i < ids.len; i++)
    amk_sb_printf(&sb, "%s%d", i ? "," : "", ids.ids[i]);
  amk_token_ids_free(&ids);
  char *s = strdup(ok ? (sb.data ? sb.data : "") : "(error)");
  amk_sb_free(&sb);
  return s;
}

static void check_encode(UnitCounts *c, AmkTokenizer *t, const char *text,
                         const char *want) {
  char *got = encode(t, text, false);
  CHECK_STR(c, got, want);
  free(got);
}

static char *decode(const AmkTokenizer *t, const int32_t *ids, size_t n,
                    bool skip_special) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  AmkDiagEngine *d = amk_diag_new(stderr);
  bool ok = amk_tokenizer_decode(t, ids, n, skip_special, &sb, d);
  amk_diag_free(d);
  char *s = strdup(ok ? (sb.data ? sb.data : "") : "(error)");
  amk_sb_free(&sb);
  return s;
}

/* Letters a, b, c, their merges' results, and a few more. */
static const char ABC_VOCAB[] =
    "{\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"bc\": 4, \"abc\": 5, \" \": 6, "
    "\"<\": 7, \"x\": 8, \">\": 9, \"<x>\": 10, \"<unk>\": 11, \"d\": 12, "
    "\"<0xC3>\": 13, \"<0xA1>\": 14, \"aa\": 15}";

/* ---- the model ------------------------------------------------------------------ */

static void test_merge_order(UnitCounts *c) {
  /* The lowest rank merges first: a+b (0) then ab+c (2). */
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB,
                                 .merges = "[\"a b\", \"b c\", \"ab c\"]"});
  check_encode(c, t, "abc", "5");
  amk_tokenizer_free(t);
  /* With b+c ranked first, a and bc have no merge. */
  t = load((Parts){.vocab = ABC_VOCAB, .merges = "[\"b c\", \"a b\", \"ab c\"]"});
  check_encode(c, t, "abc", "0,4");
  amk_tokenizer_free(t);
  /* Among equal ranks the leftmost pair merges first. */
  t = load((Parts){.vocab = ABC_VOCAB, .merges = "[\"a a\"]"});
  check_encode(c, t, "aaa", "15,0");
  check_encode(c, t, "aaaa", "15,15");
  amk_tokenizer_free(t);
  /* Merges as pairs read as the strings do. */
  t = load((Parts){.vocab = ABC_VOCAB, .merges = "[[\"a\", \"b\"], [\"ab\", \"c\"]]"});
  check_encode(c, t, "abcab", "5,3");
  amk_tokenizer_free(t);
}

static void test_merge_list_details(UnitCounts *c) {
  /* A pair listed twice keeps its later rank (tokenizers' map keeps the last
   * insert): b+c (rank 2 now) loses to a+b (rank 1). */
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB,
                                 .merges = "[\"b c\", \"a b\", \"b c\"]"});
  check_encode(c, t, "abc", "3,2");
  amk_tokenizer_free(t);
  /* merges.txt's "#version" line is skipped, as tokenizers skips it. */
  t = load((Parts){.vocab = ABC_VOCAB, .merges = "[\"#version: 0.2\", \"a b\"]"});
  check_encode(c, t, "ab", "3");
  amk_tokenizer_free(t);
}

static void test_unknown_characters(UnitCounts *c) {
  /* No unk token: unknown characters are dropped. */
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB});
  check_encode(c, t, "ayzb", "0,1");
  amk_tokenizer_free(t);
  /* An unk token: one per unknown character, or one per run with fuse_unk. */
  t = load((Parts){.vocab = ABC_VOCAB, .model_extra = ", \"unk_token\": \"<unk>\""});
  check_encode(c, t, "ayzb", "0,11,11,1");
  amk_tokenizer_free(t);
  t = load((Parts){.vocab = ABC_VOCAB,
                   .model_extra = ", \"unk_token\": \"<unk>\", \"fuse_unk\": true"});
  check_encode(c, t, "ayzbq", "0,11,1,11");
  amk_tokenizer_free(t);
  /* Byte fallback: a character missing from the vocabulary becomes its
   * UTF-8 bytes' <0xNN> tokens when all of them exist, else unk. */
  t = load((Parts){.vocab = ABC_VOCAB,
                   .model_extra = ", \"unk_token\": \"<unk>\", \"byte_fallback\": true"});
  check_encode(c, t, "a\xC3\xA1" "b", "0,13,14,1");   /* á: C3 A1 */
  check_encode(c, t, "a\xC3\xA9" "b", "0,11,1");      /* é: C3 A9, no <0xA9> */
  amk_tokenizer_free(t);
}

static void test_ignore_merges(UnitCounts *c) {
  /* "abc" is a token but no merge reaches it from a, b, c. */
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB, .merges = "[\"a b\"]"});
  check_encode(c, t, "abc", "3,2");
  amk_tokenizer_free(t);
  t = load((Parts){.vocab = ABC_VOCAB, .merges = "[\"a b\"]",
                   .model_extra = ", \"ignore_merges\": true"});
  check_encode(c, t, "abc", "5");
  check_encode(c, t, "abca", "3,2,0");
  amk_tokenizer_free(t);
}

/* ---- pre-tokenizers ---------------------------------------------------------------- */

/* The words tok_pre_tokenize makes of `text`, joined by '|'. */
static char *words(const TokPreStep *steps, size_t n, const char *text) {
  TokScratch scratch = {0};
  AmkStrBuf error, out;
  amk_sb_init(&error);
  amk_sb_init(&out);
  bool ok = tok_pre_tokenize(steps, n, (TokSpan){text, strlen(text)}, true,
                             &scratch, &error);
  for (size_t i = 0; ok && i < scratch.pieces.len; i++) {
    if (i)
      amk_sb_putc(&out, '|');
    amk_sb_putn(&out, scratch.pieces.items[i].text, scratch.pieces.items[i].len);
  }
  char *s = strdup(ok ? (out.data ? out.data : "") : "(error)");
  amk_sb_free(&error);
  amk_sb_free(&out);
  tok_scratch_free(&scratch);
  return s;
}

static void check_split(UnitCounts *c, const char *pattern, bool literal,
                        TokSplitBehavior behavior, bool invert, const char *text,
                        const char *want) {
  AmkStrBuf error;
  amk_sb_init(&error);
  TokPreStep step = {.kind = TOK_STEP_SPLIT,
                     .regex = tok_regex_compile(pattern, strlen(pattern), literal,
                                                &error),
                     .behavior = behavior,
                     .invert = invert};
  CHECK(c, step.regex != NULL);
  char *got = words(&step, 1, text);
  CHECK_STR(c, got, want);
  free(got);
  tok_regex_free(step.regex);
  amk_sb_free(&error);
}

static void test_split_behaviors(UnitCounts *c) {
  /* "-" matches at 1, 3 and 4 of "a-b--c". */
  check_split(c, "-", true, TOK_SPLIT_REMOVED, false, "a-b--c", "a|b|c");
  check_split(c, "-", true, TOK_SPLIT_ISOLATED, false, "a-b--c", "a|-|b|-|-|c");
  check_split(c, "-", true, TOK_SPLIT_MERGED_WITH_PREVIOUS, false, "a-b--c",
              "a-|b-|-|c");
  check_split(c, "-", true, TOK_SPLIT_MERGED_WITH_NEXT, false, "a-b--c",
              "a|-b|-|-c");
  check_split(c, "-", true, TOK_SPLIT_CONTIGUOUS, false, "a-b--c", "a|-|b|--|c");
  /* invert: the regex matches what is kept; the rest are the delimiters. */
  check_split(c, "-", true, TOK_SPLIT_REMOVED, true, "a-b--c", "-|-|-");
  check_split(c, "-", true, TOK_SPLIT_ISOLATED, true, "a-b--c", "a|-|b|-|-|c");
  check_split(c, "[a-z]+", false, TOK_SPLIT_MERGED_WITH_PREVIOUS, true, "ab, cd.",
              "ab, |cd.");
  /* A match at the start and the end. */
  check_split(c, "-", true, TOK_SPLIT_MERGED_WITH_NEXT, false, "-a-", "-a|-");
  check_split(c, "-", true, TOK_SPLIT_MERGED_WITH_PREVIOUS, false, "-a-", "-|a-");
}

static void test_split_empty_matches(UnitCounts *c) {
  /* Oniguruma's find_iter: every empty match splits ("x*" matches nowhere
   * but between the characters)... */
  check_split(c, "x*", false, TOK_SPLIT_ISOLATED, false, "ab", "a|b");
  /* ...except the one right after a non-empty match: "a*" matches "aa", not
   * the empty string at 2, then the empty string at 3. */
  check_split(c, "a*", false, TOK_SPLIT_CONTIGUOUS, false, "aab", "aa|b");
  check_split(c, "a*", false, TOK_SPLIT_REMOVED, false, "aab", "b");
  /* The empty String pattern matches everywhere (an escaped empty regex). */
  check_split(c, "", true, TOK_SPLIT_ISOLATED, false, "ab", "a|b");
}

static void test_split_unicode(UnitCounts *c) {
  /* The Llama 3 pattern on letters, digits, contractions and spaces,
   * Unicode classes included (\p{L} for é and 中, \s for U+00A0). */
  const char *llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  check_split(c, llama3, false, TOK_SPLIT_ISOLATED, false,
              "It'S 12345 caf\xC3\xA9  \xE4\xB8\xAD!\n\n x",
              "It|'S| |123|45| caf\xC3\xA9| | \xE4\xB8\xAD|!\n\n| x");
  check_split(c, llama3, false, TOK_SPLIT_ISOLATED, false, "a\xC2\xA0\xC2\xA0" "b",
              "a|\xC2\xA0|\xC2\xA0" "b");
}

static void test_digits_and_byte_level_steps(UnitCounts *c) {
  AmkStrBuf error;
  amk_sb_init(&error);
  TokPreStep digits = {.kind = TOK_STEP_SPLIT,
                       .regex = tok_regex_compile("\\p{N}", 5, false, &error),
                       .behavior = TOK_SPLIT_ISOLATED};
  char *got = words(&digits, 1, "a12b3");
  CHECK_STR(c, got, "a|1|2|b|3");
  free(got);
  digits.behavior = TOK_SPLIT_CONTIGUOUS;
  got = words(&digits, 1, "a12b3\xD9\xA3"); /* U+0663, an Arabic-Indic digit */
  CHECK_STR(c, got, "a|12|b|3\xD9\xA3");
  free(got);
  /* add_prefix_space before each piece, unless it starts with a space. */
  TokPreStep steps[2] = {digits, {.kind = TOK_STEP_PREFIX_SPACE}};
  got = words(steps, 2, "a12 b");
  CHECK_STR(c, got, " a| 12| b");
  free(got);
  tok_regex_free(digits.regex);
  amk_sb_free(&error);
}

static void test_pre_tokenizers_loaded(UnitCounts *c) {
  /* ByteLevel with use_regex (GPT-2's pattern) and add_prefix_space, read
   * from JSON: the words go to the model as byte-level characters. Vocab:
   * the byte-level characters of " ", "H", "i", "!" and "Ġ" + "Hi". */
  const char *vocab = "{\"\\u0120\": 0, \"H\": 1, \"i\": 2, \"!\": 3, \"\\u0120H\": 4, "
                      "\"\\u0120Hi\": 5, \"Hi\": 6}";
  const char *merges = "[\"\\u0120 H\", \"\\u0120H i\", \"H i\"]";
  AmkTokenizer *t = load((Parts){
      .vocab = vocab, .merges = merges,
      .pre_tokenizer = "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                       "\"trim_offsets\": true}",
      .decoder = "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                 "\"trim_offsets\": true, \"use_regex\": true}"});
  CHECK(c, t != NULL);
  check_encode(c, t, "Hi!", "5,3");     /* " Hi" "!" */
  check_encode(c, t, "Hi Hi", "5,5");   /* " Hi" " Hi" */
  int32_t ids[] = {5, 3, 6};
  char *text = decode(t, ids, 3, false);
  CHECK_STR(c, text, " Hi!Hi");
  free(text);
  amk_tokenizer_free(t);
  /* Without the prefix space. */
  t = load((Parts){.vocab = vocab, .merges = merges,
                   .pre_tokenizer = "{\"type\": \"Sequence\", \"pretokenizers\": ["
                                    "{\"type\": \"Digits\", \"individual_digits\": true},"
                                    "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                                    "\"trim_offsets\": true, \"use_regex\": false}]}"});
  check_encode(c, t, "Hi Hi", "6,5");
  amk_tokenizer_free(t);
}

static AmkTokenizer *load_metaspace(const char *scheme, const char *split) {
  char *pre = format("{\"type\": \"Metaspace\", \"replacement\": \"\u2581\", "
                     "\"prepend_scheme\": \"%s\", \"split\": %s}", scheme, split);
  char *decoder = format("{\"type\": \"Metaspace\", \"replacement\": \"\u2581\", "
                         "\"prepend_scheme\": \"%s\", \"split\": %s}", scheme, split);
  AmkTokenizer *t = load((Parts){
      .vocab = "{\"\u2581\": 0, \"a\": 1, \"b\": 2, \"\u2581a\": 3, \"\u2581b\": 4, "
               "\"<x>\": 5, \"\u2581\u2581\": 6}",
      .merges = "[\"\u2581 a\", \"\u2581 b\", \"\u2581 \u2581\"]",
      .added = "[{\"id\": 5, \"content\": \"<x>\", \"single_word\": false, "
               "\"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
               "\"special\": true}]",
      .pre_tokenizer = pre, .decoder = decoder});
  free(pre);
  free(decoder);
  return t;
}

static void test_metaspace(UnitCounts *c) {
  /* Spaces become '▁'; "first" puts one before the text's first segment
   * only (not after an added token); split makes each '▁' start a word
   * ("▁▁" stays apart), without it the word is whole. */
  AmkTokenizer *t = load_metaspace("first", "true");
  CHECK(c, t != NULL);
  check_encode(c, t, "a b", "3,4");
  check_encode(c, t, "<x>a b", "5,1,4");
  check_encode(c, t, "a  b", "3,0,4");
  check_encode(c, t, "  ", "0,0");
  int32_t ids[] = {3, 4};
  char *text = decode(t, ids, 2, false);
  CHECK_STR(c, text, "a b"); /* the first token's '▁' goes */
  free(text);
  amk_tokenizer_free(t);
  t = load_metaspace("always", "false");
  check_encode(c, t, "<x>a b", "5,3,4");
  check_encode(c, t, "  ", "6");
  amk_tokenizer_free(t);
  t = load_metaspace("never", "true");
  check_encode(c, t, "a b", "1,4");
  text = decode(t, ids, 2, false);
  CHECK_STR(c, text, " a b");
  free(text);
  amk_tokenizer_free(t);
}

/* ---- normalizers and added tokens ----------------------------------------------------- */

static const char ADDED_X[] =
    "[{\"id\": 10, \"content\": \"<x>\", \"single_word\": %s, \"lstrip\": %s, "
    "\"rstrip\": %s, \"normalized\": %s, \"special\": true}]";

static AmkTokenizer *load_added(const char *single_word, const char *lstrip,
                                const char *rstrip, const char *normalized,
                                const char *normalizer) {
  char *added = format(ADDED_X, single_word, lstrip, rstrip, normalized);
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB, .added = added,
                                 .normalizer = normalizer});
  free(added);
  return t;
}

static void test_added_token_flags(UnitCounts *c) {
  AmkTokenizer *t = load_added("false", "false", "false", "false", NULL);
  check_encode(c, t, "a <x> b", "0,6,10,6,1");
  check_encode(c, t, "a<x>b<x", "0,10,1,7,8");
  amk_tokenizer_free(t);
  /* lstrip / rstrip take the spaces beside the token into it. */
  t = load_added("false", "true", "false", "false", NULL);
  check_encode(c, t, "a  <x> b", "0,10,6,1");
  amk_tokenizer_free(t);
  t = load_added("false", "false", "true", "false", NULL);
  check_encode(c, t, "a <x>  b", "0,6,10,1");
  amk_tokenizer_free(t);
  /* single_word: only between non-word characters. */
  t = load_added("true", "false", "false", "false", NULL);
  check_encode(c, t, "a <x> b", "0,6,10,6,1");
  check_encode(c, t, "a<x> b", "0,7,8,9,6,1");
  check_encode(c, t, "<x>b", "7,8,9,1");
  check_encode(c, t, "<x>", "10");
  amk_tokenizer_free(t);
}

static void test_normalized_added_tokens(UnitCounts *c) {
  /* The normalizer turns "d" into "a"; a normalized token is matched in the
   * normalized text by its normalized form ("<x>" has no "d", so it is
   * itself), a token with normalized: false in the raw text. */
  const char *replace = "{\"type\": \"Replace\", \"pattern\": {\"String\": \"d\"}, "
                        "\"content\": \"a\"}";
  const char *added = "[{\"id\": 16, \"content\": \"dd\", \"single_word\": false, "
                      "\"lstrip\": false, \"rstrip\": false, \"normalized\": true, "
                      "\"special\": false}]";
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB, .added = added,
                                 .normalizer = replace, .merges = "[\"a a\"]"});
  CHECK(c, t != NULL);
  check_encode(c, t, "dd", "16");    /* normalized "aa" is the token's form */
  check_encode(c, t, "ad", "16");    /* so is this text's */
  check_encode(c, t, "b", "1");
  amk_tokenizer_free(t);
  added = "[{\"id\": 16, \"content\": \"dd\", \"single_word\": false, "
          "\"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
          "\"special\": false}]";
  t = load((Parts){.vocab = ABC_VOCAB, .added = added, .normalizer = replace,
                   .merges = "[\"a a\"]"});
  check_encode(c, t, "dd", "16");
  check_encode(c, t, "ad", "15");    /* "aa" from the model */
  amk_tokenizer_free(t);
}

static void test_normalizers(UnitCounts *c) {
  const char *seq = "{\"type\": \"Sequence\", \"normalizers\": ["
                    "{\"type\": \"Prepend\", \"prepend\": \"<\"},"
                    "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}, "
                    "\"content\": \"x\"}]}";
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB, .normalizer = seq});
  check_encode(c, t, "a  b", "7,0,8,1");
  check_encode(c, t, "", ""); /* Prepend leaves an empty text empty */
  amk_tokenizer_free(t);
  /* Each segment between added tokens is normalized alone. */
  char *added = format(ADDED_X, "false", "false", "false", "false");
  t = load((Parts){.vocab = ABC_VOCAB, .normalizer = seq, .added = added});
  check_encode(c, t, "a<x>b", "7,0,10,7,1");
  check_encode(c, t, "<x>", "10");
  free(added);
  amk_tokenizer_free(t);
}

/* ---- the post-processor and the decoders --------------------------------------------- */

static void test_template(UnitCounts *c) {
  const char *post =
      "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\", "
      "\"add_prefix_space\": true, \"trim_offsets\": false}, {\"type\": "
      "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<x>\", "
      "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
      "{\"SpecialToken\": {\"id\": \"end\", \"type_id\": 0}}], \"pair\": [], "
      "\"special_tokens\": {\"<x>\": {\"id\": \"<x>\", \"ids\": [10], \"tokens\": "
      "[\"<x>\"]}, \"end\": {\"id\": \"end\", \"ids\": [11, 12], \"tokens\": "
      "[\"<unk>\", \"d\"]}}}]}";
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB, .post_processor = post});
  char *got = encode(t, "ab", true);
  CHECK_STR(c, got, "10,0,1,11,12");
  free(got);
  got = encode(t, "", true);
  CHECK_STR(c, got, "10,11,12");
  free(got);
  check_encode(c, t, "ab", "0,1");
  /* A template that starts with one special token names the BOS. */
  CHECK(c, amk_tokenizer_bos_id(t) == 10);
  amk_tokenizer_free(t);
}

static void test_decoders(UnitCounts *c) {
  int32_t ids[] = {0, 6, 1, 6, 6};
  /* No decoder: tokens joined by spaces. */
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB});
  char *got = decode(t, ids, 5, false);
  CHECK_STR(c, got, "a   b    ");
  free(got);
  amk_tokenizer_free(t);
  /* Strip at both ends, after fusing; Replace by a regex. */
  t = load((Parts){.vocab = ABC_VOCAB,
                   .decoder = "{\"type\": \"Sequence\", \"decoders\": ["
                              "{\"type\": \"Replace\", \"pattern\": {\"Regex\": "
                              "\"[ab]\"}, \"content\": \"<>\"}, {\"type\": \"Fuse\"},"
                              "{\"type\": \"Strip\", \"content\": \" \", \"start\": "
                              "0, \"stop\": 1}]}"});
  got = decode(t, ids, 5, false);
  CHECK_STR(c, got, "<> <> ");
  free(got);
  amk_tokenizer_free(t);
  /* Strip more than the token holds: it stops at the start's cut. */
  t = load((Parts){.vocab = ABC_VOCAB,
                   .decoder = "{\"type\": \"Strip\", \"content\": \" \", \"start\": "
                              "3, \"stop\": 3}"});
  got = decode(t, ids + 1, 1, false);
  CHECK_STR(c, got, "");
  free(got);
  amk_tokenizer_free(t);
}

static void test_byte_fallback_decoding(UnitCounts *c) {
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB,
                                 .decoder = "{\"type\": \"ByteFallback\"}"});
  int32_t valid[] = {0, 13, 14, 1}; /* a <0xC3> <0xA1> b */
  char *got = decode(t, valid, 4, false);
  CHECK_STR(c, got, "a\xC3\xA1" "b");
  free(got);
  /* A run of byte tokens that is not UTF-8: one U+FFFD per byte. */
  int32_t invalid[] = {13, 13, 0, 14};
  got = decode(t, invalid, 4, false);
  CHECK_STR(c, got, "\xEF\xBF\xBD\xEF\xBF\xBD" "a\xEF\xBF\xBD");
  free(got);
  amk_tokenizer_free(t);
}

static void test_lossy_utf8(UnitCounts *c) {
  /* One U+FFFD per maximal ill-formed subpart, as from_utf8_lossy. */
  static const struct {
    const char *in;
    size_t len;
    const char *want;
  } cases[] = {
      {"a\xE4\xB8", 3, "a\xEF\xBF\xBD"},                  /* truncated */
      {"\xE4\xB8" "a", 3, "\xEF\xBF\xBD" "a"},
      {"\xF0\x80\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* overlong */
      {"\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
      {"\xFF\xC3\xA9", 3, "\xEF\xBF\xBD\xC3\xA9"},
      {"\xF4\x90\x80\x80", 4, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xF0\x9F\x98", 3, "\xEF\xBF\xBD"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    AmkStrBuf out;
    amk_sb_init(&out);
    tok_utf8_append_lossy(&out, cases[i].in, cases[i].len);
    CHECK_STR(c, out.data, cases[i].want);
    amk_sb_free(&out);
  }
}

static void test_nfc(UnitCounts *c) {
  static const struct {
    const char *in, *want;
  } cases[] = {
      {"e\xCC\x81", "\xC3\xA9"},                      /* e + acute: é */
      {"\xE2\x84\xAB", "\xC3\x85"},                  /* Angstrom sign: Å */
      {"\xE1\xB8\x8B\xCC\xA3", "\xE1\xB8\x8D\xCC\x87"}, /* marks reordered */
      {"\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC"}, /* an exclusion stays apart */
      {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"}, /* jamo: 각 */
      {"a\xCC\x81\xCC\x81", "\xC3\xA1\xCC\x81"},  /* the second acute is blocked */
      {"plain ASCII", "plain ASCII"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    AmkStrBuf out;
    amk_sb_init(&out);
    tok_nfc(cases[i].in, strlen(cases[i].in), &out);
    CHECK_STR(c, out.data, cases[i].want);
    amk_sb_free(&out);
  }
  CHECK(c, tok_nfc_is_trivial("caf\xC3\xA9 \xCB\xBF", 9)); /* all below U+0300 */
  CHECK(c, !tok_nfc_is_trivial("e\xCC\x81", 3));
  /* Through a tokenizer: the normalizer composes before the model. */
  AmkTokenizer *t = load((Parts){.vocab = "{\"\u00e9\": 0, \"e\": 1, \"\u0301\": 2}",
                                 .normalizer = "{\"type\": \"NFC\"}"});
  check_encode(c, t, "e\xCC\x81" "e", "0,1");
  amk_tokenizer_free(t);
}

/* ---- errors ------------------------------------------------------------------------------ */

static void test_encode_decode_errors(UnitCounts *c) {
  AmkTokenizer *t = load((Parts){.vocab = ABC_VOCAB});
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  AmkTokenIds ids = {0};
  CHECK(c, !amk_tokenizer_encode(t, "ab\xC3(", 4, false, &ids, d));
  CHECK_STR(c, amk_diag_captured(d, 0)->message,
            "the text to encode is not valid UTF-8 (byte 0xc3 at offset 2)");
  CHECK(c, ids.len == 0);
  int32_t bad[] = {0, 1, 17};
  AmkStrBuf out;
  amk_sb_init(&out);
  CHECK(c, !amk_tokenizer_decode(t, bad, 3, false, &out, d));
  CHECK_STR(c, amk_diag_captured(d, 1)->message,
            "cannot decode id 17 (at position 2): no token has it (ids run from "
            "0 to 15)");
  amk_sb_free(&out);
  amk_token_ids_free(&ids);
  amk_diag_free(d);
  amk_tokenizer_free(t);
}

static void test_load_errors(UnitCounts *c) {
  /* From memory, the name given is the label of every error. */
  char *e = load_error((Parts){.vocab = "{\"a\": 0}", .merges = "[\"a a\"]"});
  CHECK_STR(c, e, "test.json: 'model.merges[0]': the merged token 'aa' is not in "
                  "the vocabulary");
  free(e);
  e = load_error((Parts){.vocab = "{\"a\": 0}", .pre_tokenizer =
                             "{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                             "\"\\\\p{Nope}\"}, \"behavior\": \"Isolated\", "
                             "\"invert\": false}"});
  CHECK(c, strstr(e, "test.json: 'pre_tokenizer.pattern.Regex': invalid regex: ") == e);
  free(e);
  e = load_error((Parts){.vocab = "{\"a\": 0.5}"});
  CHECK_STR(c, e, "test.json: 'model.vocab.a': 0.5 is not a whole number in [0, "
                  "16777216)");
  free(e);
  /* A regex that backtracks catastrophically gives up with an error. */
  AmkTokenizer *t = load((Parts){.vocab = "{\"a\": 0}", .pre_tokenizer =
      "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a+)+$\"}, \"behavior\": "
      "\"Isolated\", \"invert\": false}"});
  CHECK(c, t != NULL);
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  AmkTokenIds ids = {0};
  char text[64];
  memset(text, 'a', sizeof text - 2);
  text[sizeof text - 2] = 'b';
  text[sizeof text - 1] = '\0';
  tok_ids_push(&ids, 42);
  CHECK(c, !amk_tokenizer_encode(t, text, strlen(text), false, &ids, d));
  CHECK(c, ids.len == 1 && ids.ids[0] == 42); /* left as it was */
  CHECK(c, amk_diag_captured_count(d) == 1 &&
               strstr(amk_diag_captured(d, 0)->message,
                      "test.json: while encoding: the regex engine gave up: ") != NULL);
  amk_token_ids_free(&ids);
  amk_diag_free(d);
  amk_tokenizer_free(t);
}

/* ---- the fixtures ----------------------------------------------------------------------- */

static AmkTokenizer *load_fixture(const char *name) {
  char *path = format("%s/test/tokenizer/Inputs/%s/tokenizer.json", AMK_SOURCE_DIR, name);
  AmkDiagEngine *d = amk_diag_new(stderr);
  AmkTokenizer *t = amk_tokenizer_load(path, d);
  amk_diag_free(d);
  free(path);
  return t;
}

/* xorshift64*: the same strings on every run. */
static uint64_t next_random(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 2685821657736338717ull;
}

/* A random code point: mostly ASCII and common scripts, some anywhere in
 * Unicode (never a surrogate), avoiding the characters in `avoid`. */
static uint32_t random_code_point(uint64_t *state, const char *avoid) {
  for (;;) {
    uint64_t r = next_random(state);
    uint32_t cp;
    switch (r % 8) {
    case 0: case 1: case 2: cp = 0x20 + (uint32_t)(r >> 8) % 0x5F; break;
    case 3: cp = (uint32_t)(r >> 8) % 0x20; break;       /* control and \n \t */
    case 4: cp = 0x80 + (uint32_t)(r >> 8) % 0x780; break;  /* Latin to Arabic */
    case 5: cp = 0x4E00 + (uint32_t)(r >> 8) % 0x5200; break; /* CJK */
    case 6: cp = 0x1F300 + (uint32_t)(r >> 8) % 0x700; break; /* emoji */
    default: cp = (uint32_t)(r >> 8) % 0x110000; break;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
      continue;
    if (cp < 0x80 && avoid && strchr(avoid, (int)cp) && cp)
      continue;
    if (cp == 0x2581 && avoid) /* '▁' decodes as a space */
      continue;
    return cp;
  }
}

static void random_text(uint64_t *state, AmkStrBuf *out, const char *avoid) {
  out->len = 0;
  size_t n = next_random(state) % 40;
  for (size_t i = 0; i < n; i++)
    tok_utf8_append_code_point(out, random_code_point(state, avoid));
  if (!out->data)
    amk_sb_putn(out, "", 0);
}

/* decode(encode(s)) == s for random valid Unicode, and the streaming
 * decoder prints the same text token by token. */
static void check_round_trips(UnitCounts *c, AmkTokenizer *t, const char *avoid,
                              uint64_t seed) {
  uint64_t state = seed;
  AmkStrBuf text, back, streamed;
  amk_sb_init(&text);
  amk_sb_init(&back);
  amk_sb_init(&streamed);
  AmkTokenIds ids = {0};
  AmkDiagEngine *d = amk_diag_new(stderr);
  int failures = 0;
  for (int i = 0; i < 2000; i++) {
    random_text(&state, &text, avoid);
    ids.len = back.len = streamed.len = 0;
    bool ok = amk_tokenizer_encode(t, text.data, text.len, false, &ids, d) &&
              amk_tokenizer_decode(t, ids.ids, ids.len, false, &back, d);
    AmkTokenizerStream *s = amk_tokenizer_stream_new(t, false);
    for (size_t k = 0; ok && k < ids.len; k++)
      ok = amk_tokenizer_stream_push(s, ids.ids[k], &streamed, d);
    ok = ok && amk_tokenizer_stream_flush(s, &streamed, d);
    amk_tokenizer_stream_free(s);
    bool same = ok && back.len == text.len &&
                memcmp(back.data ? back.data : "", text.data, text.len) == 0 &&
                streamed.len == text.len &&
                memcmp(streamed.data ? streamed.data : "", text.data, text.len) == 0;
    if (!same && failures++ < 3)
      fprintf(stderr, "round trip %d failed: %zu bytes in, %zu decoded, %zu "
              "streamed\n", i, text.len, back.len, streamed.len);
    CHECK(c, same);
  }
  amk_diag_free(d);
  amk_token_ids_free(&ids);
  amk_sb_free(&text);
  amk_sb_free(&back);
  amk_sb_free(&streamed);
}

static void test_round_trips(UnitCounts *c) {
  AmkTokenizer *t = load_fixture("bytelevel-llama3");
  CHECK(c, t != NULL);
  /* '<' could spell a special token. */
  check_round_trips(c, t, "<", 1);
  amk_tokenizer_free(t);
  /* SentencePiece-style: '<' could spell <s> or a <0xNN> token, and '▁'
   * decodes as a space. */
  t = load_fixture("spm-llama2");
  CHECK(c, t != NULL);
  check_round_trips(c, t, "<", 2);
  amk_tokenizer_free(t);
}

/* The printed pieces of a stream, joined by '|'. */
static char *stream_pieces(const AmkTokenizer *t, const int32_t *ids, size_t n) {
  AmkTokenizerStream *s = amk_tokenizer_stream_new(t, false);
  AmkStrBuf all, piece;
  amk_sb_init(&all);
  amk_sb_init(&piece);
  AmkDiagEngine *d = amk_diag_new(stderr);
  for (size_t i = 0; i < n; i++) {
    piece.len = 0;
    amk_tokenizer_stream_push(s, ids[i], &piece, d);
    amk_sb_putn(&all, piece.data ? piece.data : "", piece.len);
    amk_sb_putc(&all, '|');
  }
  piece.len = 0;
  amk_tokenizer_stream_flush(s, &piece, d);
  amk_sb_putn(&all, piece.data ? piece.data : "", piece.len);
  amk_diag_free(d);
  amk_tokenizer_stream_free(s);
  char *result = strdup(all.data);
  amk_sb_free(&all);
  amk_sb_free(&piece);
  return result;
}

static void test_streaming(UnitCounts *c) {
  AmkTokenizer *t = load_fixture("bytelevel-llama3");
  /* "😀" is four byte tokens: nothing prints until the fourth. */
  AmkTokenIds ids = {0};
  AmkDiagEngine *d = amk_diag_new(stderr);
  CHECK(c, amk_tokenizer_encode(t, "a\xF0\x9F\x98\x80!", 6, false, &ids, d));
  CHECK(c, ids.len == 6);
  char *got = stream_pieces(t, ids.ids, ids.len);
  CHECK_STR(c, got, "a||||\xF0\x9F\x98\x80|!|");
  free(got);
  /* An incomplete character at the end comes out as U+FFFD on flush. */
  got = stream_pieces(t, ids.ids, 3);
  CHECK_STR(c, got, "a|||\xEF\xBF\xBD");
  free(got);
  /* An unknown id is an error and leaves the stream as it was. */
  AmkTokenizerStream *s = amk_tokenizer_stream_new(t, false);
  AmkStrBuf out;
  amk_sb_init(&out);
  amk_diag_set_capture(d, 1);
  CHECK(c, amk_tokenizer_stream_push(s, ids.ids[0], &out, d));
  CHECK(c, !amk_tokenizer_stream_push(s, 5000, &out, d));
  CHECK(c, amk_tokenizer_stream_push(s, ids.ids[5], &out, d));
  CHECK_STR(c, out.data, "a!");
  amk_sb_free(&out);
  amk_tokenizer_stream_free(s);
  amk_token_ids_free(&ids);
  amk_tokenizer_free(t);

  /* SentencePiece: the leading space of a word after the first is kept
   * (Strip only cuts the start of the whole text), byte tokens wait for
   * their character. */
  t = load_fixture("spm-llama2");
  ids.len = 0;
  CHECK(c, amk_tokenizer_encode(t, "Hi \xE4\xB8\xAD x", 9, false, &ids, d));
  got = stream_pieces(t, ids.ids, ids.len);
  char *whole = decode(t, ids.ids, ids.len, false);
  CHECK_STR(c, whole, "Hi \xE4\xB8\xAD x");
  /* Pieces: "H", "i", " " then the three bytes of 中 (held until whole),
   * " x". */
  CHECK(c, strstr(got, "|\xE4\xB8\xAD|") != NULL);
  AmkStrBuf joined;
  amk_sb_init(&joined);
  for (const char *p = got; *p; p++)
    if (*p != '|')
      amk_sb_putc(&joined, *p);
  CHECK_STR(c, joined.data, whole);
  amk_sb_free(&joined);
  free(whole);
  free(got);
  /* skip_special_tokens leaves out <s>. */
  int32_t with_bos[] = {1, 839, 332};
  s = amk_tokenizer_stream_new(t, true);
  amk_sb_init(&out);
  for (int i = 0; i < 3; i++)
    CHECK(c, amk_tokenizer_stream_push(s, with_bos[i], &out, d));
  CHECK(c, amk_tokenizer_stream_flush(s, &out, d));
  CHECK_STR(c, out.data, "Hi");
  amk_sb_free(&out);
  amk_tokenizer_stream_free(s);
  /* Ids that print nothing, or bytes that never make a character, are held
   * 8 at most: <0xE5> (id 232) alone is no character, so 8 of them print
   * as 8 U+FFFD at the 8th. */
  int32_t lead_bytes[9];
  for (int i = 0; i < 9; i++)
    lead_bytes[i] = 232;
  CHECK_STR(c, amk_tokenizer_token(t, 232), "<0xE5>");
  got = stream_pieces(t, lead_bytes, 9);
  CHECK_STR(c, got, "|||||||\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                    "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD||\xEF\xBF\xBD");
  free(got);
  s = amk_tokenizer_stream_new(t, true);
  amk_sb_init(&out);
  for (int i = 0; i < 20; i++)
    CHECK(c, amk_tokenizer_stream_push(s, 1, &out, d));
  CHECK(c, out.len == 0);
  CHECK(c, amk_tokenizer_stream_push(s, 839, &out, d));
  CHECK_STR(c, out.data, "H");
  amk_sb_free(&out);
  amk_tokenizer_stream_free(s);
  amk_token_ids_free(&ids);
  amk_diag_free(d);
  amk_tokenizer_free(t);
}

static void test_queries(UnitCounts *c) {
  AmkTokenizer *t = load_fixture("spm-llama2");
  CHECK(c, amk_tokenizer_vocab_size(t) == 3259);
  CHECK_STR(c, amk_tokenizer_token(t, 1), "<s>");
  CHECK(c, amk_tokenizer_token(t, 3259) == NULL);
  CHECK(c, amk_tokenizer_token(t, -1) == NULL);
  CHECK(c, amk_tokenizer_token_id(t, "</s>", 4) == 2);
  CHECK(c, amk_tokenizer_token_id(t, "nope", 4) == -1);
  CHECK(c, amk_tokenizer_is_special(t, 2));
  CHECK(c, !amk_tokenizer_is_special(t, 500));
  CHECK(c, amk_tokenizer_bos_id(t) == 1);
  const int32_t *eos;
  CHECK(c, amk_tokenizer_eos_ids(t, &eos) == 0);
  CHECK(c, !amk_tokenizer_is_eos(t, 2));
  amk_tokenizer_free(t);
}

UNIT_MAIN("test_tokenizer", test_merge_order, test_merge_list_details,
          test_unknown_characters, test_ignore_merges, test_split_behaviors,
          test_split_empty_matches, test_split_unicode,
          test_digits_and_byte_level_steps, test_pre_tokenizers_loaded,
          test_metaspace,
          test_added_token_flags, test_normalized_added_tokens, test_normalizers,
          test_nfc, test_template, test_decoders, test_byte_fallback_decoding,
          test_lossy_utf8, test_encode_decode_errors, test_load_errors,
          test_round_trips, test_streaming, test_queries)

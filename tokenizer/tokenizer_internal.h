/* What the tokenizer's files share (tokenizer layer; not a public header).
 *
 * The pipeline is tokenizers' own: added tokens are cut out of the text
 * first, each remaining segment is normalized, cut again at the added tokens
 * that match normalized text, pre-tokenized into words, and each word goes
 * through the BPE model; the post-processor's template then adds the special
 * tokens. Decoding maps ids back to token strings and runs the decoders.
 */
#ifndef AMK_TOKENIZER_INTERNAL_H
#define AMK_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/namemap.h"
#include "amk/strbuf.h"
#include "amk/strutil.h"
#include "amk/tokenizer.h"

/* ---- UTF-8 and the byte-level alphabet (utf8.c) ---------------------------- */

/* The length of the valid UTF-8 prefix of [p, p + len). */
size_t tok_utf8_valid_prefix(const char *p, size_t len);

/* Bytes of the character starting at p (1 for a byte that starts none). */
size_t tok_utf8_char_len(const char *p, size_t len);

/* Appends `len` bytes to `out`, each maximal ill-formed subsequence replaced
 * by U+FFFD (Rust's String::from_utf8_lossy, which tokenizers uses). */
void tok_utf8_append_lossy(AmkStrBuf *out, const char *p, size_t len);

/* Writes the UTF-8 of a code point (at most U+10FFFF); returns its length. */
size_t tok_utf8_encode(uint32_t cp, char out[4]);
void tok_utf8_append_code_point(AmkStrBuf *out, uint32_t cp);

/* Unicode White_Space (Rust's char::is_whitespace). */
bool tok_is_white_space(uint32_t cp);

/* GPT-2's byte-level alphabet: each byte is shown as a printable character
 * (the printable Latin-1 bytes as themselves, the others as U+0100 on). */
uint32_t tok_byte_level_char(unsigned char byte);
/* The byte a byte-level character stands for, or -1. */
int tok_byte_level_byte(uint32_t cp);

/* ---- regular expressions (regex.c) ------------------------------------------ */

typedef struct TokRegex TokRegex;

/* Compiles `pattern` with PCRE2 in UTF + UCP mode (JIT when available), or
 * as a literal string. NULL with the reason in *error on failure. */
TokRegex *tok_regex_compile(const char *pattern, size_t len, bool literal,
                            AmkStrBuf *error);
void tok_regex_free(TokRegex *re);

/* Walks the matches of `re` in `text` as tokenizers does (Oniguruma's
 * find_iter: an empty match right after a match is skipped). Calls
 * on_match(ctx, start, end) for each; returns false with *error set when
 * the engine gives up (a match or stack limit). */
typedef void (*TokMatchFn)(void *ctx, size_t start, size_t end);
bool tok_regex_each_match(TokRegex *re, const char *text, size_t len,
                          TokMatchFn on_match, void *ctx, AmkStrBuf *error);

/* The first match at or after `from` (no empty-match rules). Returns 1 with
 * *start, *end set, 0 for none, -1 with *error set when the engine gives
 * up. */
int tok_regex_find(TokRegex *re, const char *text, size_t len, size_t from,
                   size_t *start, size_t *end, AmkStrBuf *error);

/* ---- spans of text ------------------------------------------------------------ */

typedef struct {
  const char *text;
  size_t len;
} TokSpan;

typedef struct {
  TokSpan *items;
  size_t len, cap;
} TokSpans;

void tok_spans_push(TokSpans *list, const char *text, size_t len);

/* Memory for text that pieces point into during one encode: blocks that
 * never move, so earlier pointers stay valid. */
typedef struct TokArenaBlock TokArenaBlock;
typedef struct {
  TokArenaBlock *head;
} TokArena;

char *tok_arena_alloc(TokArena *a, size_t n);
void tok_arena_reset(TokArena *a); /* keeps the largest block */
void tok_arena_free(TokArena *a);

/* ---- normalizers (normalize.c) ------------------------------------------------ */

typedef enum {
  TOK_NORM_PREPEND, /* `text` before a non-empty string */
  TOK_NORM_REPLACE, /* every match of `pattern` becomes `text` */
  TOK_NORM_NFC,     /* Unicode Normalization Form C */
} TokNormKind;

typedef struct {
  TokNormKind kind;
  char *text;
  size_t text_len;
  TokRegex *pattern; /* Replace: a regex, or a String as a literal */
} TokNormalizer;

typedef struct TokScratch TokScratch;

/* Runs the normalizers over `in`, returning the result: `in` itself when
 * there are none, else text in the scratch's arena. False with *error set
 * when a regex gives up. */
bool tok_normalize(const TokNormalizer *norms, size_t n, TokSpan in,
                   TokScratch *scratch, TokSpan *out, AmkStrBuf *error);

/* One Replace on `in`, appended to `out` (the normalizer and the decoder). */
bool tok_replace(const TokNormalizer *replace, const char *in, size_t len,
                 AmkStrBuf *out, AmkStrBuf *error);

void tok_normalizer_free(TokNormalizer *n);

/* ---- pre-tokenizers (pretokenize.c) -------------------------------------------- */

/* tokenizers' SplitDelimiterBehavior: what becomes of the matches. */
typedef enum {
  TOK_SPLIT_REMOVED,
  TOK_SPLIT_ISOLATED,
  TOK_SPLIT_MERGED_WITH_PREVIOUS,
  TOK_SPLIT_MERGED_WITH_NEXT,
  TOK_SPLIT_CONTIGUOUS,
} TokSplitBehavior;

typedef enum {
  TOK_STEP_SPLIT,        /* Split, Digits, ByteLevel's own regex */
  TOK_STEP_PREFIX_SPACE, /* ByteLevel's add_prefix_space */
  TOK_STEP_METASPACE,    /* Metaspace: spaces become the replacement */
} TokStepKind;

/* Metaspace's prepend_scheme: where the replacement is put first. */
typedef enum {
  TOK_PREPEND_ALWAYS,
  TOK_PREPEND_FIRST, /* only at the very start of the text */
  TOK_PREPEND_NEVER,
} TokPrependScheme;

typedef struct {
  TokStepKind kind;
  TokRegex *regex;
  TokSplitBehavior behavior;
  bool invert;          /* the regex matches what is kept, not the delimiters */
  char replacement[4];  /* Metaspace: one character */
  size_t replacement_len;
  TokPrependScheme prepend;
} TokPreStep;

/* A stretch of a piece being split: a match of the regex, or text between
 * matches. */
typedef struct {
  size_t start, end;
  bool is_match;
} TokSegment;

/* Scratch space for one encode, reused from call to call. */
struct TokScratch {
  TokSpans pieces, next;    /* the words, and the next step's */
  TokSegment *segments;     /* the piece being split, covered in order */
  size_t n_segments, cap_segments;
  AmkStrBuf work[2];        /* normalizers' intermediate results */
  TokArena arena;           /* text the pieces point into */
};

/* Runs the steps over `segment`, leaving the words in scratch->pieces.
 * `at_start`: the segment starts the text (for Metaspace's "first"). False
 * with *error set when a regex gives up. */
bool tok_pre_tokenize(const TokPreStep *steps, size_t n, TokSpan segment,
                      bool at_start, TokScratch *scratch, AmkStrBuf *error);

void tok_scratch_free(TokScratch *s);

/* ---- the BPE model (bpe.c) ----------------------------------------------------- */

typedef struct TokBpe TokBpe;

/* The vocabulary: `strings` holds every token NUL-terminated, token i of `n`
 * at strings + offsets[i] with id ids[i]; ids are distinct and below
 * TOK_MAX_ID. */
typedef struct {
  char *strings;
  size_t *offsets;
  int32_t *ids;
  size_t n;
  int32_t unk_id; /* -1: none */
  bool fuse_unk, byte_fallback, ignore_merges;
  bool byte_level; /* map each word's bytes to the byte-level alphabet */
} TokBpeConfig;

enum { TOK_MAX_ID = 1 << 24 };

/* Takes ownership of the config's arrays. */
TokBpe *tok_bpe_new(TokBpeConfig *config);
void tok_bpe_free(TokBpe *m);

/* The merges, in rank order: (left, right, result) id triples; takes
 * ownership. A pair given twice keeps its later rank, as tokenizers' map
 * does. */
void tok_bpe_set_merges(TokBpe *m, int32_t *triples, size_t n);

void tok_bpe_set_unk(TokBpe *m, int32_t unk_id);

/* The id of a vocabulary string, or -1. */
int32_t tok_bpe_token_id(const TokBpe *m, const char *token, size_t len);
/* The vocabulary's token strings by id (NULL where no token has the id);
 * *count is one more than the largest id. */
const char *const *tok_bpe_tokens(const TokBpe *m, size_t *count);
size_t tok_bpe_vocab_count(const TokBpe *m); /* entries, as vocab.len() */

/* Appends the ids of one word. */
void tok_bpe_encode_word(TokBpe *m, const char *word, size_t len,
                         AmkTokenIds *out);

void tok_ids_push(AmkTokenIds *ids, int32_t id);

/* ---- added tokens (added.c) ------------------------------------------------------ */

typedef struct {
  char *content;
  size_t len;
  int32_t id;
  bool special, single_word, lstrip, rstrip, normalized;
} TokAddedToken;

typedef struct TokTrie TokTrie;

/* A trie of the added tokens' match strings: `strings[i]` (`lens[i]`
 * bytes) for token i, or NULL to leave token i out. */
TokTrie *tok_trie_new(const char *const *strings, const size_t *lens,
                      size_t n);
void tok_trie_free(TokTrie *trie);

/* One piece of a segment: added token `token` (an index), or -1 for text. */
typedef struct {
  size_t start, end;
  int32_t token;
} TokCut;

typedef struct {
  TokCut *items;
  size_t len, cap;
} TokCuts;

/* Cuts `text` at the added tokens of `trie` as tokenizers' AddedVocabulary
 * does: leftmost-longest matches, the single_word / lstrip / rstrip rules.
 * `word_char` tests a character for single_word (may be NULL when no token
 * is single_word). Appends the pieces to `out`; an empty text gives none. */
typedef bool (*TokCharTest)(void *ctx, uint32_t cp);
void tok_cut_added(const TokTrie *trie, const TokAddedToken *tokens,
                   const char *text, size_t len, TokCharTest word_char,
                   void *word_ctx, TokCuts *out);

/* ---- the post-processor and the decoders ----------------------------------------- */

/* One item of TemplateProcessing's `single` template. */
typedef struct {
  bool is_sequence; /* $A */
  int32_t *ids;     /* a special token's ids */
  size_t n_ids;
} TokTemplateItem;

typedef enum {
  TOK_DECODE_BYTE_LEVEL,
  TOK_DECODE_REPLACE,
  TOK_DECODE_BYTE_FALLBACK,
  TOK_DECODE_FUSE,
  TOK_DECODE_STRIP,
  TOK_DECODE_METASPACE,
} TokDecoderKind;

typedef struct {
  TokDecoderKind kind;
  TokNormalizer replace; /* Replace */
  uint32_t strip_char;   /* Strip's content; Metaspace's replacement */
  size_t strip_start, strip_stop;
  bool drop_first;       /* Metaspace: the first token loses its replacements */
} TokDecoder;

/* ---- the tokenizer ------------------------------------------------------------------ */

struct AmkTokenizer {
  char *label;
  TokBpe *bpe;

  TokAddedToken *added;
  size_t n_added;
  AmkNameMap added_by_content; /* content -> index in `added` */
  TokTrie *raw_trie;           /* tokens with normalized: false */
  TokTrie *normalized_trie;    /* tokens with normalized: true */
  TokRegex *word_char;         /* \w, for single_word tokens */

  TokNormalizer *normalizers;
  size_t n_normalizers;
  TokPreStep *steps;
  size_t n_steps;
  bool byte_level; /* a ByteLevel pre-tokenizer maps bytes for the model */

  TokTemplateItem *template_items;
  size_t n_template_items;

  bool has_decoder; /* without one, tokens are joined with spaces */
  TokDecoder *decoders;
  size_t n_decoders;

  /* Decoding: every id's token string and whether it is special. */
  const char **token_of_id;
  size_t *token_len;
  bool *special;
  size_t vocab_size;

  int32_t bos_id;
  int32_t *eos_ids;
  size_t n_eos;

  /* Encoding's scratch space, reused from call to call. */
  TokScratch scratch;
  TokCuts cuts, normalized_cuts;
};

#endif

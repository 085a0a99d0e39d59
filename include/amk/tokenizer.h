/* HuggingFace tokenizers in C (the tokenizer layer: uses support/ only).
 *
 * Reads a `tokenizer.json` and encodes and decodes text as the `tokenizers`
 * Python package does for the files Llama-family models ship:
 *   - byte-level BPE with a `Split` regex pre-tokenizer (Llama 3, SmolLM2,
 *     Qwen2 and its NFC normalizer), the regex compiled by PCRE2 in UTF +
 *     UCP mode;
 *   - SentencePiece-style BPE with byte fallback (Llama 2, TinyLlama,
 *     Mistral), its '▁' rules as normalizers or as Metaspace;
 *   - added and special tokens, TemplateProcessing (the BOS token), and the
 *     BOS / EOS ids of tokenizer_config.json and generation_config.json.
 * Anything else in a file (another model type, normalizer, pre-tokenizer,
 * decoder or post-processor) is refused when loading, naming it and where
 * it is. docs/Tokenizer.md lists what is supported and where we differ.
 *
 * Errors go to an AmkDiagEngine as `LABEL: 'json.path': reason`, where LABEL
 * is the file (or the name given to amk_tokenizer_load_json).
 *
 * An AmkTokenizer is not thread-safe: encoding updates its word cache and
 * scratch buffers. Use one per thread.
 */
#ifndef AMK_TOKENIZER_H
#define AMK_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/strbuf.h"

typedef struct AmkTokenizer AmkTokenizer;

/* Loads `path`: a tokenizer.json file, or a folder holding one. A folder's
 * tokenizer_config.json, generation_config.json and config.json are read
 * too, when present, for the BOS and EOS ids (amk_tokenizer_bos_id). Files
 * inside a folder must be regular files (a FIFO is refused, not waited on).
 * NULL after reporting on failure. */
AmkTokenizer *amk_tokenizer_load(const char *path, AmkDiagEngine *diag);

/* Loads a tokenizer.json held in memory (`len` bytes, no NUL needed); `name`
 * is what errors call it. For fuzzing, and for callers that have the text. */
AmkTokenizer *amk_tokenizer_load_json(const char *json, size_t len,
                                      const char *name, AmkDiagEngine *diag);

void amk_tokenizer_free(AmkTokenizer *t);

/* One more than the largest id of the model's vocabulary and the added
 * tokens. */
size_t amk_tokenizer_vocab_size(const AmkTokenizer *t);

/* The token string of `id` (an added token's content, else the model's
 * vocabulary entry), or NULL when no token has that id. */
const char *amk_tokenizer_token(const AmkTokenizer *t, int32_t id);

/* The id of a token string (added tokens first, then the model's
 * vocabulary), or -1. */
int32_t amk_tokenizer_token_id(const AmkTokenizer *t, const char *token,
                               size_t len);

/* Whether `id` is a special added token (skipped by decoding with
 * skip_special_tokens). */
bool amk_tokenizer_is_special(const AmkTokenizer *t, int32_t id);

/* The BOS id: generation_config.json's (else config.json's) bos_token_id
 * (the first, when it is a list), else tokenizer_config.json's bos_token,
 * else the special token the post-processor's template puts first; -1 when
 * there is none. */
int32_t amk_tokenizer_bos_id(const AmkTokenizer *t);

/* The EOS ids: generation_config.json's (else config.json's) eos_token_id
 * (an int or a list), then tokenizer_config.json's eos_token when not among
 * them. Returns how many; *ids points at them (owned by the tokenizer). */
size_t amk_tokenizer_eos_ids(const AmkTokenizer *t, const int32_t **ids);
bool amk_tokenizer_is_eos(const AmkTokenizer *t, int32_t id);

/* A growable list of token ids. */
typedef struct {
  int32_t *ids;
  size_t len, cap;
} AmkTokenIds;

void amk_token_ids_free(AmkTokenIds *ids);

/* Encodes `len` bytes of UTF-8 text, appending the ids to `out`. With
 * `add_special_tokens` the post-processor's template adds its special
 * tokens (the BOS), as tokenizers' encode(text, add_special_tokens=True).
 * Text that is not valid UTF-8 is an error naming the byte offset; on any
 * error `out` is left as it was. */
bool amk_tokenizer_encode(AmkTokenizer *t, const char *text, size_t len,
                          bool add_special_tokens, AmkTokenIds *out,
                          AmkDiagEngine *diag);

/* Decodes `n` ids, appending UTF-8 text to `out` (always valid UTF-8: bytes
 * that do not form characters become U+FFFD, as tokenizers does). With
 * `skip_special_tokens`, special added tokens are left out. An id that no
 * token has is an error naming it and its position (tokenizers would drop
 * it silently). */
bool amk_tokenizer_decode(const AmkTokenizer *t, const int32_t *ids, size_t n,
                          bool skip_special_tokens, AmkStrBuf *out,
                          AmkDiagEngine *diag);

/* Incremental decoding, for printing generated text token by token: each
 * push appends the text that the new token completes, holding back a
 * character whose bytes are split across tokens until it is whole (as
 * tokenizers' DecodeStream does: decoded text that ends in U+FFFD waits for
 * more ids, at most 8). When the ids decode to valid UTF-8, as a model's
 * output almost always does, the pieces joined are amk_tokenizer_decode of
 * all the ids; where bytes form no character, the U+FFFD may fall
 * otherwise. */
typedef struct AmkTokenizerStream AmkTokenizerStream;

AmkTokenizerStream *amk_tokenizer_stream_new(const AmkTokenizer *t,
                                             bool skip_special_tokens);
/* Appends what `id` makes printable to `out` (perhaps nothing). An unknown id
 * is an error, as in amk_tokenizer_decode; the stream is unchanged then. */
bool amk_tokenizer_stream_push(AmkTokenizerStream *s, int32_t id,
                               AmkStrBuf *out, AmkDiagEngine *diag);
/* Appends what is still held back (an incomplete character becomes U+FFFD)
 * and starts the stream afresh. */
bool amk_tokenizer_stream_flush(AmkTokenizerStream *s, AmkStrBuf *out,
                                AmkDiagEngine *diag);
void amk_tokenizer_stream_free(AmkTokenizerStream *s);

#endif

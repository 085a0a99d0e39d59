/* Fuzz driver: the tokenizer (tokenizer/, amk_tokenizer_load_json, encode,
 * decode and the streaming decoder). The input is a tokenizer.json, then
 * optionally a NUL byte and a text to encode (else a fixed sample). A
 * tokenizer it accepts must encode the text (or refuse invalid UTF-8 with
 * an error) into ids it has, decode those ids to valid UTF-8, and the
 * streaming decoder must take every one of them. */
#include <stdlib.h>
#include <string.h>

#include "amk/strbuf.h"
#include "amk/tokenizer.h"
#include "fuzz.h"

static bool valid_utf8(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (!len || i + len > n)
      return false;
    for (size_t k = 1; k < len; k++)
      if ((s[i + k] & 0xc0) != 0x80)
        return false;
    i += len;
  }
  return true;
}

static void check_ids(AmkTokenizer *t, const AmkTokenIds *ids) {
  size_t vocab = amk_tokenizer_vocab_size(t);
  for (size_t i = 0; i < ids->len; i++)
    if (ids->ids[i] < 0 || (size_t)ids->ids[i] >= vocab || !amk_tokenizer_token(t, ids->ids[i]))
      fuzz_fail(NULL, "encode gave id %d at %zu, which no token has (vocabulary %zu)",
                ids->ids[i], i, vocab);
  AmkDiagEngine *diag = fuzz_diag_new();
  AmkStrBuf text;
  amk_sb_init(&text);
  if (!amk_tokenizer_decode(t, ids->ids, ids->len, false, &text, diag))
    fuzz_fail(diag, "decode refused the %zu ids encode gave", ids->len);
  if (!valid_utf8((const unsigned char *)text.data, text.len))
    fuzz_fail(NULL, "decode gave %zu bytes that are not UTF-8", text.len);
  amk_sb_free(&text);
  AmkTokenizerStream *stream = amk_tokenizer_stream_new(t, false);
  AmkStrBuf piece;
  amk_sb_init(&piece);
  for (size_t i = 0; i < ids->len; i++)
    if (!amk_tokenizer_stream_push(stream, ids->ids[i], &piece, diag))
      fuzz_fail(diag, "the streaming decoder refused id %d at %zu", ids->ids[i], i);
  amk_tokenizer_stream_free(stream);
  amk_sb_free(&piece);
  amk_diag_free(diag);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char sample[] = "Hello, world! def f(x):\n    return x * 2  # héllo ✓ 123";
  const uint8_t *nul = memchr(data, 0, size);
  size_t json_len = nul ? (size_t)(nul - data) : size;
  const char *text = nul ? (const char *)nul + 1 : sample;
  size_t text_len = nul ? size - json_len - 1 : sizeof sample - 1;

  AmkDiagEngine *diag = fuzz_diag_new();
  AmkTokenizer *t = amk_tokenizer_load_json((const char *)data, json_len, "tokenizer.json", diag);
  fuzz_check_verdict("amk_tokenizer_load_json", t != NULL, diag);
  amk_diag_free(diag);
  if (!t)
    return 0;
  for (int special = 0; special < 2; special++) {
    AmkTokenIds ids = {0};
    diag = fuzz_diag_new();
    bool ok = amk_tokenizer_encode(t, text, text_len, special, &ids, diag);
    fuzz_check_verdict("amk_tokenizer_encode", ok, diag);
    amk_diag_free(diag);
    if (ok)
      check_ids(t, &ids);
    else if (ids.len)
      fuzz_fail(NULL, "a refused encode left %zu ids", ids.len);
    amk_token_ids_free(&ids);
  }
  amk_tokenizer_free(t);
  return 0;
}

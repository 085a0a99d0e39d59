/* What a model folder says about generating text (runtime layer): the
 * end-of-sequence and beginning-of-sequence token ids, and whether a chat
 * template comes with it.
 *
 * Each id is read from generation_config.json when that file has the key,
 * else from config.json, as transformers' generate() falls back on the model
 * config. eos_token_id is an id or a list of ids; bos_token_id one id; null or
 * absent means none. The chat template is tokenizer_config.json's
 * `chat_template` or a chat_template.jinja file. Files that are there must be
 * regular files holding JSON that Python reads the same way
 * (amk/json_strict.h); each error names its file and key.
 */
#ifndef AMK_GENERATION_H
#define AMK_GENERATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/strbuf.h"

typedef struct {
  int32_t *eos; /* n_eos ids; decoding stops at any of them */
  size_t n_eos;
  char *eos_file; /* the file they came from; NULL when there are none */
  int32_t bos;    /* -1: none */
  char *bos_file;
  bool has_chat_template;
  /* The template's text (tokenizer_config.json's `chat_template`, the one
   * named "default" when it is a list, else chat_template.jinja); NULL when
   * there is none or it is not text. */
  char *chat_template;
  char *chat_template_file;
} AmkGenerationConfig;

/* Reads the folder `dir`. An absent file is not an error (a folder of weights
 * only has no ids). False after reporting; *out is then empty. */
bool amk_generation_config_read(const char *dir, AmkGenerationConfig *out, AmkDiagEngine *diag);

/* Every id inside [0, vocab), else an error naming the file and the id. */
bool amk_generation_config_check_vocab(const AmkGenerationConfig *g, int64_t vocab,
                                       AmkDiagEngine *diag);

bool amk_generation_config_is_eos(const AmkGenerationConfig *g, int32_t token);

void amk_generation_config_free(AmkGenerationConfig *g);

/* Chat formats: the common chat templates, rendered here rather than by a
 * Jinja interpreter (docs/Runtime.md#chat-mode says what each renders). A
 * conversation is rendered one user turn at a time, so that a decoder can
 * keep the KV cache of the turns before and feed only the new tokens. */
typedef enum {
  AMK_CHAT_NONE = 0,
  AMK_CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
  AMK_CHAT_CHATML,  /* <|im_start|>role\n...<|im_end|>\n (Qwen2, SmolLM2, Hermes) */
  AMK_CHAT_LLAMA2,  /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> */
  AMK_CHAT_MISTRAL, /* <s>[INST] ... [/INST]...</s> (no system role) */
} AmkChatFormat;

/* The names --chat-template takes, for messages: "llama3, chatml, llama2,
 * mistral". */
#define AMK_CHAT_FORMAT_NAMES "llama3, chatml, llama2, mistral"

/* The format a Jinja chat template renders, recognised by its distinctive
 * markers; AMK_CHAT_NONE when none is recognised. */
AmkChatFormat amk_chat_format_recognise(const char *template_text);
/* A --chat-template name; AMK_CHAT_NONE when unknown. */
AmkChatFormat amk_chat_format_named(const char *name);
const char *amk_chat_format_name(AmkChatFormat f);
/* The text of the token that ends an assistant's turn: "<|eot_id|>",
 * "<|im_end|>", else the EOS token's text `eos_token` (may be NULL). */
const char *amk_chat_end_of_turn(AmkChatFormat f, const char *eos_token);

/* One user turn of a conversation. */
typedef struct {
  const char *bos_token; /* the BOS token's text, NULL: none */
  const char *eos_token; /* the EOS token's text, NULL: none */
  const char *system;    /* the system message, first turn only; NULL: none */
  const char *user;      /* what the user typed */
  bool first;            /* no turn before: else the assistant's reply is closed first */
} AmkChatTurn;

/* Appends to `out` the text that the template gives for the user's turn
 * after the conversation so far: the end of the assistant's previous reply
 * (its end-of-turn text, not fed when the reply stopped at it), the user's
 * message, and the header of the assistant's reply (add_generation_prompt).
 * The text holds special tokens by name; encode it without adding more. */
void amk_chat_render_turn(AmkChatFormat f, const AmkChatTurn *turn, AmkStrBuf *out);

#endif

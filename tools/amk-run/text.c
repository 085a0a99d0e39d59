/* Text in and out: the model folder's generation facts (end-of-sequence
 * and beginning-of-sequence ids, chat template), its tokenizer, the prompt
 * as token ids and the printer of generated tokens.
 *
 * With a tokenizer, a text prompt (-p, -f) is encoded with the special
 * tokens its post-processor adds (the BOS), and tokens are printed as text
 * through the tokenizer's streaming decoder, which holds back a character
 * whose bytes are split across tokens. Without one the prompt is ids
 * (--prompt-ids) and so is the output. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/fileio.h"
#include "amk/path.h"
#include "amk/strbuf.h"
#include "amk/tokenizer.h"
#include "run.h"

static AmkLoc nowhere(void) { return (AmkLoc){0, 0}; }

/* ---- printing generated tokens ----------------------------------------------- */

static bool begin_ids(void *ctx, const int32_t *prompt, size_t n) { return true; }

static bool print_id(void *ctx, int32_t token, int64_t index) {
  printf("%s%" PRId32, index ? " " : "", token);
  fflush(stdout);
  return true;
}

static bool finish_line(void *ctx) {
  putchar('\n');
  fflush(stdout);
  return true;
}

/* Text through the tokenizer's stream: special tokens (BOS, end of turn)
 * are not printed, as llama.cpp and transformers' TextStreamer do. */
struct RunTextPrinter {
  AmkTokenizerStream *stream;
  AmkStrBuf piece;
  AmkDiagEngine *diag;
};

/* Writes what the stream made printable; stdout is flushed so that text
 * appears as it is produced. */
static void write_piece(RunTextPrinter *p) {
  if (p->piece.len)
    fwrite(p->piece.data, 1, p->piece.len, stdout);
  p->piece.len = 0;
  fflush(stdout);
}

bool run_text_printer_push(RunTextPrinter *p, int32_t token) {
  bool ok = amk_tokenizer_stream_push(p->stream, token, &p->piece, p->diag);
  write_piece(p);
  return ok;
}

bool run_text_printer_flush(RunTextPrinter *p) {
  bool ok = amk_tokenizer_stream_flush(p->stream, &p->piece, p->diag);
  write_piece(p);
  return ok;
}

/* The prompt is printed first, through the same stream as what follows. */
static bool begin_text(void *ctx, const int32_t *prompt, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!run_text_printer_push(ctx, prompt[i]))
      return false;
  return true;
}

static bool print_text(void *ctx, int32_t token, int64_t index) {
  return run_text_printer_push(ctx, token);
}

static bool finish_text(void *ctx) {
  bool ok = run_text_printer_flush(ctx);
  putchar('\n');
  fflush(stdout);
  return ok;
}

RunTextPrinter *run_text_printer_new(const AmkTokenizer *tok, AmkDiagEngine *diag) {
  RunTextPrinter *p = amk_xmalloc(sizeof *p);
  p->stream = amk_tokenizer_stream_new(tok, true);
  amk_sb_init(&p->piece);
  p->diag = diag;
  return p;
}

void run_text_printer_free(RunTextPrinter *p) {
  if (!p)
    return;
  amk_tokenizer_stream_free(p->stream);
  amk_sb_free(&p->piece);
  free(p);
}

/* ---- the tokenizer ------------------------------------------------------------- */

/* --tokenizer (a file, or a folder holding tokenizer.json), else the model
 * folder's tokenizer.json when it has one. */
static bool find_tokenizer(RunText *t, const RunOptions *o, AmkDiagEngine *diag) {
  if (!o->tokenizer) {
    char *path = t->folder ? amk_path_join(t->folder, "tokenizer.json") : NULL;
    if (path && amk_path_kind(path) != AMK_PATH_ABSENT)
      t->tokenizer = path;
    else
      free(path);
    return true;
  }
  bool folder = amk_path_kind(o->tokenizer) == AMK_PATH_DIRECTORY;
  char *path = folder ? amk_path_join(o->tokenizer, "tokenizer.json") : amk_xstrdup(o->tokenizer);
  switch (amk_path_kind(path)) {
  case AMK_PATH_REGULAR_FILE:
    t->tokenizer = path;
    return true;
  case AMK_PATH_ABSENT:
    amk_error(diag, nowhere(), "--tokenizer '%s': %s", o->tokenizer,
              folder ? "the folder has no tokenizer.json" : "no such file");
    break;
  default:
    amk_error(diag, nowhere(), "--tokenizer '%s': not a regular file", path);
    break;
  }
  free(path);
  return false;
}

/* A text prompt as token ids, with the special tokens the tokenizer's
 * post-processor adds (the BOS), as llama.cpp and transformers encode a
 * prompt. */
static bool encode_text(RunText *t, const char *what, const char *text, size_t len,
                        AmkDiagEngine *diag) {
  const char *ask = "give the prompt as token ids with --prompt-ids";
  if (!t->tok) {
    if (t->folder)
      amk_error(diag, nowhere(),
                "text prompts need a tokenizer (tokenizer.json): '%s' has none (see "
                "--tokenizer); %s",
                t->folder, ask);
    else
      amk_error(diag, nowhere(),
                "text prompts need a tokenizer (tokenizer.json): there is no model folder to "
                "find one in (see --tokenizer); %s",
                ask);
    return false;
  }
  AmkTokenIds ids = {0};
  if (!amk_tokenizer_encode(t->tok, text, len, true, &ids, diag)) {
    amk_error(diag, nowhere(), "%s is not usable as a prompt (above)", what);
    amk_token_ids_free(&ids);
    return false;
  }
  t->prompt = ids.ids;
  t->n_prompt = ids.len;
  return true;
}

/* ---- the prompt ----------------------------------------------------------------- */

/* -f FILE: a regular file, or '-' for standard input (a FIFO or a
 * folder is refused rather than waited on or misread). */
static char *read_prompt_file(const char *path, size_t *len, AmkDiagEngine *diag) {
  if (strcmp(path, "-") == 0)
    return amk_read_file(path, len, diag);
  return amk_read_regular_file(path, len, diag);
}

/* -p or -f encoded, else --prompt-ids, else the model's bos_token_id (1 when
 * it has none). In chat mode -p and -f are the system message instead and
 * there is no prompt. */
static bool read_prompt(RunText *t, const RunOptions *o, AmkDiagEngine *diag) {
  if (o->chat) {
    if (o->system_text)
      t->system = amk_xstrdup(o->system_text);
    else if (o->prompt_text)
      t->system = amk_xstrdup(o->prompt_text);
    else if (o->prompt_file) {
      size_t len = 0;
      t->system = read_prompt_file(o->prompt_file, &len, diag);
      if (!t->system)
        return false;
    }
    return true;
  }
  if (o->prompt_text)
    return encode_text(t, "-p", o->prompt_text, strlen(o->prompt_text), diag);
  if (o->prompt_file) {
    size_t len = 0;
    char *text = read_prompt_file(o->prompt_file, &len, diag);
    AmkStrBuf what;
    amk_sb_init(&what);
    amk_sb_printf(&what, "-f '%s'", o->prompt_file);
    bool ok = text && encode_text(t, what.data, text, len, diag);
    amk_sb_free(&what);
    free(text);
    return ok;
  }
  if (o->prompt_ids) {
    t->n_prompt = o->n_prompt_ids;
    t->prompt = amk_xmalloc(t->n_prompt * sizeof *t->prompt);
    memcpy(t->prompt, o->prompt_ids, t->n_prompt * sizeof *t->prompt);
    return true;
  }
  t->n_prompt = 1;
  t->prompt = amk_xmalloc(sizeof *t->prompt);
  t->prompt[0] = t->gen.bos >= 0 ? t->gen.bos : 1;
  return true;
}

/* Chat mode: the format (--chat-template, else recognised in the folder's
 * template) and the token that ends a reply. */
static bool prepare_chat(RunText *t, const RunOptions *o, AmkDiagEngine *diag) {
  if (!t->tok) {
    amk_error(diag, nowhere(),
              "chat mode (-cnv) needs a tokenizer (tokenizer.json): %s%s%s has none (see "
              "--tokenizer)",
              t->folder ? "'" : "", t->folder ? t->folder : "there is no model folder; it",
              t->folder ? "'" : "");
    return false;
  }
  if (o->chat_template) {
    t->chat = amk_chat_format_named(o->chat_template);
    if (t->chat == AMK_CHAT_NONE) {
      amk_error(diag, nowhere(), "--chat-template '%s': unknown; the built-in templates are %s",
                o->chat_template, AMK_CHAT_FORMAT_NAMES);
      return false;
    }
  } else if (!t->gen.has_chat_template) {
    amk_error(diag, nowhere(),
              "chat mode (-cnv): %s%s%s has no chat template (tokenizer_config.json's "
              "chat_template or chat_template.jinja); name one with --chat-template (%s)",
              t->folder ? "'" : "", t->folder ? t->folder : "there is no model folder; it",
              t->folder ? "'" : "", AMK_CHAT_FORMAT_NAMES);
    return false;
  } else {
    t->chat = amk_chat_format_recognise(t->gen.chat_template);
    if (t->chat == AMK_CHAT_NONE) {
      amk_error(diag, nowhere(),
                "chat mode (-cnv): the chat template of %s is none that amk-run renders (it "
                "knows Llama 3 headers, ChatML and Llama 2 / Mistral [INST]); name one with "
                "--chat-template (%s)",
                t->gen.chat_template_file ? t->gen.chat_template_file : t->folder,
                AMK_CHAT_FORMAT_NAMES);
      return false;
    }
  }
  int32_t bos = t->gen.bos >= 0 ? t->gen.bos : amk_tokenizer_bos_id(t->tok);
  const int32_t *eos = NULL;
  size_t n_eos = amk_tokenizer_eos_ids(t->tok, &eos);
  int32_t first_eos = t->gen.n_eos ? t->gen.eos[0] : n_eos ? eos[0] : -1;
  t->bos_token = bos >= 0 ? amk_tokenizer_token(t->tok, bos) : NULL;
  t->eos_token = first_eos >= 0 ? amk_tokenizer_token(t->tok, first_eos) : NULL;
  const char *eot = amk_chat_end_of_turn(t->chat, t->eos_token);
  t->end_of_turn = eot ? amk_tokenizer_token_id(t->tok, eot, strlen(eot)) : -1;
  if (o->verbose)
    fprintf(stderr, "amk-run: chat template %s (%s); a reply ends at %s%s%s\n",
            amk_chat_format_name(t->chat), o->chat_template ? "--chat-template" : "recognised",
            t->end_of_turn >= 0 ? "token " : "the end-of-sequence ids",
            t->end_of_turn >= 0 ? eot : "", t->end_of_turn >= 0 ? " or the end-of-sequence ids" : "");
  return true;
}

/* What the tokenizer says a turn's text is, as ids (no special tokens
 * added: the rendered text holds them by name). */
bool run_text_encode_turn(const RunText *t, const char *text, AmkTokenIds *ids,
                          AmkDiagEngine *diag) {
  return amk_tokenizer_encode(t->tok, text, strlen(text), false, ids, diag);
}

/* -v: what the folder said. */
static void describe_facts(const RunText *t) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  amk_sb_printf(&sb, "amk-run: model folder '%s': ", t->folder);
  if (t->gen.n_eos) {
    amk_sb_puts(&sb, "eos_token_id");
    for (size_t i = 0; i < t->gen.n_eos; i++)
      amk_sb_printf(&sb, "%s%" PRId32, i ? ", " : " ", t->gen.eos[i]);
    amk_sb_printf(&sb, " (%s)", t->gen.eos_file);
  } else {
    amk_sb_puts(&sb, "no eos_token_id");
  }
  if (t->gen.bos >= 0)
    amk_sb_printf(&sb, "; bos_token_id %" PRId32 " (%s)", t->gen.bos, t->gen.bos_file);
  else
    amk_sb_puts(&sb, "; no bos_token_id");
  amk_sb_printf(&sb, "; tokenizer %s; %s\n", t->tokenizer ? t->tokenizer : "none",
                t->gen.has_chat_template ? "a chat template" : "no chat template");
  fputs(sb.data, stderr);
  amk_sb_free(&sb);
}

bool run_text_prepare(RunText *t, const RunOptions *o, const char *folder, AmkDiagEngine *diag) {
  memset(t, 0, sizeof *t);
  t->gen.bos = -1;
  t->end_of_turn = -1;
  if (folder && amk_is_directory(folder)) {
    t->folder = amk_xstrdup(folder);
    if (!amk_generation_config_read(folder, &t->gen, diag))
      return false;
  }
  if (!find_tokenizer(t, o, diag))
    return false;
  /* A folder is loaded as one, so that its tokenizer_config.json's BOS and
   * EOS tokens are read too. */
  const char *load = !t->tokenizer ? NULL
                     : !o->tokenizer ? t->folder
                     : amk_path_kind(o->tokenizer) == AMK_PATH_DIRECTORY ? o->tokenizer
                                                                         : t->tokenizer;
  if (load && !(t->tok = amk_tokenizer_load(load, diag)))
    return false;
  if (!read_prompt(t, o, diag))
    return false;
  if (o->chat && !prepare_chat(t, o, diag))
    return false;
  if (o->verbose && t->folder)
    describe_facts(t);
  if (t->tok) {
    t->text_printer = run_text_printer_new(t->tok, diag);
    if (!o->json)
      t->printer = (TokenPrinter){.begin = begin_text, .print = print_text,
                                  .finish = finish_text, .ctx = t->text_printer};
  } else if (!o->json) {
    t->printer = (TokenPrinter){.begin = begin_ids, .print = print_id, .finish = finish_line};
  }
  return true;
}

bool run_text_check_vocab(const RunText *t, int64_t vocab, AmkDiagEngine *diag) {
  if (t->tok && (int64_t)amk_tokenizer_vocab_size(t->tok) > vocab) {
    amk_error(diag, nowhere(),
              "the tokenizer '%s' has %zu tokens, more than the model's vocabulary of %" PRId64
              ": they do not belong together",
              t->tokenizer, amk_tokenizer_vocab_size(t->tok), vocab);
    return false;
  }
  return amk_generation_config_check_vocab(&t->gen, vocab, diag);
}

void run_text_note(const RunText *t, const RunOptions *o) {
  if (o->json || t->tokenizer)
    return;
  if (t->folder)
    fprintf(stderr, "amk-run: note: '%s' has no tokenizer (tokenizer.json): the prompt and the "
                    "output are token ids\n", t->folder);
  else
    fprintf(stderr, "amk-run: note: no tokenizer (no model folder): the prompt and the output "
                    "are token ids\n");
}

void run_text_free(RunText *t) {
  amk_generation_config_free(&t->gen);
  run_text_printer_free(t->text_printer);
  amk_tokenizer_free(t->tok);
  free(t->system);
  free(t->folder);
  free(t->tokenizer);
  free(t->prompt);
  memset(t, 0, sizeof *t);
}

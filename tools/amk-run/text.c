/* Text in and out: the model folder's generation facts (end-of-sequence
 * and beginning-of-sequence ids, chat template), its tokenizer, the prompt
 * as token ids and the printer of generated tokens.
 *
 * A tokenizer plugs in at two places: encode_text, where a text prompt
 * (-p, -f) becomes ids, and the TokenPrinter that run_text_prepare picks,
 * where a generated id is printed. Without one the prompt is ids
 * (--prompt-ids) and so is the output. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/fileio.h"
#include "amk/path.h"
#include "amk/strbuf.h"
#include "run.h"

static AmkLoc nowhere(void) { return (AmkLoc){0, 0}; }

/* ---- printing generated tokens ----------------------------------------------- */

static void print_id(void *ctx, int32_t token, int64_t index) {
  printf("%s%" PRId32, index ? " " : "", token);
  fflush(stdout);
}

static void finish_line(void *ctx) {
  putchar('\n');
  fflush(stdout);
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

/* A text prompt as token ids: the tokenizer's work. */
static bool encode_text(RunText *t, const char *text, AmkDiagEngine *diag) {
  const char *ask = "give the prompt as token ids with --prompt-ids";
  if (t->tokenizer)
    amk_error(diag, nowhere(),
              "text prompts need a tokenizer (tokenizer.json): this amk-run does not read "
              "'%s' yet; %s",
              t->tokenizer, ask);
  else if (t->folder)
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

/* ---- the prompt ----------------------------------------------------------------- */

/* -p or -f encoded, else --prompt-ids, else the model's bos_token_id (1 when
 * it has none). */
static bool read_prompt(RunText *t, const RunOptions *o, AmkDiagEngine *diag) {
  if (o->prompt_text)
    return encode_text(t, o->prompt_text, diag);
  if (o->prompt_file) {
    size_t len = 0;
    char *text = amk_read_file(o->prompt_file, &len, diag);
    bool ok = text && encode_text(t, text, diag);
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
  if (folder && amk_is_directory(folder)) {
    t->folder = amk_xstrdup(folder);
    if (!amk_generation_config_read(folder, &t->gen, diag))
      return false;
  }
  if (!find_tokenizer(t, o, diag) || !read_prompt(t, o, diag))
    return false;
  if (o->verbose && t->folder)
    describe_facts(t);
  if (!o->json)
    t->printer = (TokenPrinter){.print = print_id, .finish = finish_line};
  return true;
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
  free(t->folder);
  free(t->tokenizer);
  free(t->prompt);
  memset(t, 0, sizeof *t);
}

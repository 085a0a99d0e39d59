/* amk-run's pieces: the command line (options.c), text in and out
 * (text.c), decoding and its report (decode.c), the GPU bench and trace
 * (bench.c), and main.c, which loads the program and picks the engines. */
#ifndef AMK_RUN_H
#define AMK_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/engine.h"
#include "amk/generation.h"
#include "amk/sampling.h"
#include "amk/tokenizer.h"
#include "amk/weights.h"

/* Exit status of a GPU launch that the watchdog stopped (distinct from a
 * rejected program or a failed check). */
#define EXIT_TIMEOUT 3

typedef struct {
  const char *target; /* -m/--model or the one positional argument */
  const char *device;
  const char *weights;
  const char *pipeline; /* --passes, as given: parsed by the library */
  const char *save_program;
  const char *dump_logits;
  const char *dtype;
  const char *gpu_target;
  const char *quant, *quant_group, *quant_keep; /* as given: the quantize pass parses them */
  const char *max_seq;      /* -c/--ctx-size/--max-seq: checked here, parsed by import */
  const char *compile_flag; /* the first option given that only compiling uses */
  int32_t *prompt_ids;      /* --prompt-ids */
  size_t n_prompt_ids;
  const char *prompt_text; /* -p */
  const char *prompt_file; /* -f */
  const char *tokenizer;   /* --tokenizer */
  bool chat;               /* -cnv/--chat */
  const char *chat_template; /* --chat-template NAME */
  const char *system_text;   /* -sys/--system: chat mode's system message */
  /* -1: until an end-of-sequence token or the KV cache is full; in chat
   * mode the most tokens of one reply. */
  int64_t n_new;
  bool n_new_given;
  bool ignore_eos;
  bool random_seed; /* --seed -1: sampling.seed is drawn at start */
  int64_t threads;  /* -t: the reference VM's workers (0: its default) */
  AmkSamplingParams sampling;
  bool json;
  bool check;          /* --check: the reference VM beside the GPU */
  int64_t check_steps; /* compare only the first N steps (0: all) */
  bool bench;
  const char *bench_pos;
  int64_t bench_steps, bench_warmup;
  int64_t bench_reps;       /* -r: timed repetitions per position */
  int64_t bench_prompt;     /* --bench-prompt: tokens of the prefill the bench times */
  const char *bench_format; /* -o md|csv|json|jsonl (NULL: md, or json with --json) */
  double timeout_ms;
  const char *trace; /* --trace FILE: Chrome trace of the last launch */
  bool verbose;
  bool random_weights;
  uint64_t random_weights_seed;
  int64_t batch_size;   /* -b: prompt tokens per prefill step (1: token by token) */
  bool prefill;         /* set by main: the prompt goes through prefill programs */
  int64_t tp; /* --tp: tensor-parallel ranks (0 or 1: one program) */
} RunOptions;

/* Parses the command line into *o. Returns 0 to run, 1 after a usage error
 * (reported), 2 after --help. */
int run_parse_args(int argc, char **argv, RunOptions *o);
void run_options_free(RunOptions *o);

/* Where the tokens of a decode go as they are chosen: begin sees the prompt
 * (printed first when the output is text), print each generated token with
 * its index among them, finish ends the output. Each returns false after
 * reporting a token it cannot print. */
typedef struct {
  bool (*begin)(void *ctx, const int32_t *prompt, size_t n);
  bool (*print)(void *ctx, int32_t token, int64_t index);
  bool (*finish)(void *ctx);
  void *ctx;
} TokenPrinter;

/* Text through the tokenizer's streaming decoder, written to stdout as soon
 * as it is whole UTF-8 (special tokens are not printed). */
typedef struct RunTextPrinter RunTextPrinter;
RunTextPrinter *run_text_printer_new(const AmkTokenizer *tok, AmkDiagEngine *diag);
bool run_text_printer_push(RunTextPrinter *p, int32_t token);
/* Writes what is held back and starts afresh (the end of a reply). */
bool run_text_printer_flush(RunTextPrinter *p);
void run_text_printer_free(RunTextPrinter *p);

/* The text side of a run: the model folder's generation facts, the
 * tokenizer found for it, the prompt as token ids, the printer of
 * generated tokens, and in chat mode the template's format. */
typedef struct {
  char *folder; /* where the facts were read; NULL when there is no folder */
  AmkGenerationConfig gen;
  char *tokenizer; /* --tokenizer, else the folder's tokenizer.json; NULL: none */
  AmkTokenizer *tok;
  int32_t *prompt;
  size_t n_prompt;
  TokenPrinter printer;         /* print is NULL with --json: nothing streams */
  RunTextPrinter *text_printer; /* with a tokenizer */
  /* Chat mode (-cnv). */
  AmkChatFormat chat;
  char *system;                       /* -sys, or -p/-f: the system message */
  const char *bos_token, *eos_token;  /* their text, owned by tok; NULL: none */
  int32_t end_of_turn;                /* the token that ends a reply, -1: only EOS */
} RunText;

/* Reads the facts of `folder` (NULL or not a folder: none), finds the
 * tokenizer and turns the prompt into token ids. False after reporting. */
bool run_text_prepare(RunText *t, const RunOptions *o, const char *folder, AmkDiagEngine *diag);
/* Without a tokenizer, says once (on stderr, not with --json) that the
 * prompt and the output are token ids. */
void run_text_note(const RunText *t, const RunOptions *o);
void run_text_free(RunText *t);
/* The tokenizer fits the model's vocabulary, and so do the folder's BOS and
 * EOS ids (the engine checks the prompt's). False after reporting. */
bool run_text_check_vocab(const RunText *t, int64_t vocab, AmkDiagEngine *diag);
/* Chat mode: a rendered turn as ids (no special tokens added). */
bool run_text_encode_turn(const RunText *t, const char *text, AmkTokenIds *ids,
                          AmkDiagEngine *diag);

/* Whether the prompt goes through prefill programs: -b > 1, a model
 * folder, the CPU reference VM or the GPU (main says which else). */
bool run_prefill_wanted(const RunOptions *o);

/* Compiles the model folder o->target through o's pipeline (pipeline_text
 * instead when not NULL) and compile options; with --tp N, rank `rank`'s
 * program; batch_size > 1 makes a prefill program of that many rows (every
 * row's logits with all_logits). NULL after reporting. */
AmkModule *run_compile_folder(const RunOptions *o, int64_t rank, const char *pipeline_text,
                              int64_t batch_size, bool all_logits, AmkDiagEngine *diag);

/* Batched prefill (prefill.c): chunks of at most `batch` tokens on prefill
 * programs compiled per chunk size, or with `pad` on one program of `batch`
 * rows (at most the cache's length) for every chunk, running on the decode
 * engine's KV caches and borrowing its weights (both must outlive it). */
typedef struct RunPrefill RunPrefill;
RunPrefill *run_prefill_new(const RunOptions *o, const AmkWeights *weights, AmkEngine *decode,
                            bool pad, int64_t batch);
void run_prefill_free(RunPrefill *p);
/* Whether short chunks are padded. */
bool run_prefill_pads(const RunPrefill *p);
/* With padding, compiles the one program now; false after reporting. */
bool run_prefill_prepare(RunPrefill *p, AmkDiagEngine *diag);
/* The most tokens one chunk takes (-b, or less where the GPU needs). */
int64_t run_prefill_batch(const RunPrefill *p);
/* One chunk: n tokens at positions pos..pos+n-1 in one step. */
AmkStepStatus run_prefill_chunk(RunPrefill *p, const int32_t *tokens, int64_t n, int64_t pos,
                                AmkDiagEngine *diag);
/* The last chunk's logits: its program's last row's (a padding row where
 * it was padded), or with --dump-logits every real row's (*rows of
 * them). */
const float *run_prefill_logits(const RunPrefill *p, size_t *rows, size_t *vocab);
/* The engine that ran the last chunk (NULL before the first). */
AmkEngine *run_prefill_last_engine(const RunPrefill *p);

/* What main hands to decoding and the bench. */
typedef struct {
  const RunOptions *o;
  const RunText *text;
  RunPrefill *prefill; /* NULL: the prompt is fed token by token */
  AmkEngine *engine;
  AmkEngine *reference; /* the CPU VM beside the GPU with --check or --bench */
  /* --check with prefill: the reference VM's prefill of the same chunks. */
  RunPrefill *reference_prefill;
  const char *device;   /* "cpu" or "cuda" */
  double t_start, t_loaded;
} RunContext;

/* Decodes the prompt and the new tokens, printing them, then reports the
 * timing (and with --json the whole result). Returns the exit status. */
int run_decode(const RunContext *rc, AmkDiagEngine *diag);

/* -cnv: a conversation read from stdin, turn by turn, on one KV cache.
 * Returns the exit status. */
int run_chat(const RunContext *rc, AmkDiagEngine *diag);

/* --bench: times the engine per position. Returns the exit status. */
int run_bench(const RunContext *rc, AmkDiagEngine *diag);

/* --trace: the last launch (at pos) as a Chrome trace in o->trace and its
 * report on stderr. */
bool run_write_trace(const char *path, AmkEngine *engine, int64_t pos, AmkDiagEngine *diag);

/* Milliseconds on a monotonic clock. */
double run_now_ms(void);

#endif

/* Private to the `.amkir` reader and printer: the parser state shared by the
 * re2c lexer (lexer.re), the Bison grammar (parser.y) and the driver
 * (text_parse.c), plus a small name map the printer reuses.
 *
 * The parser builds records straight into the module (no AST). Lists,
 * objects and reference lists are collected on scratch stacks in the state
 * and copied into the module's arena when their closing bracket is reduced.
 */
#ifndef AMK_TEXT_INTERNAL_H
#define AMK_TEXT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/namemap.h"
#include "amk/io.h"
#include "amk/ir.h"

/* A byte range of the input (or of an arena string); not NUL-terminated. */
typedef struct {
  const char *ptr;
  size_t len;
} AmkTextSlice;

/* A numeric token: its value and its spelling (versions keep the spelling). */
typedef struct {
  int64_t i;
  double f;
  AmkTextSlice text;
} AmkTextNumber;

/* `%name`, `%"name"`, `%7` (and the same with `#`). */
typedef struct {
  AmkTextSlice name;
  int64_t id;
  bool by_id;
} AmkTextRef;



/* ---- the parser state ---------------------------------------------------- */

/* A buffer or counter name that is resolved once the whole file is read. */
typedef enum {
  AMK_PENDING_INPUT,
  AMK_PENDING_OUTPUT,
  AMK_PENDING_SIGNAL,
  AMK_PENDING_WAIT,
  AMK_PENDING_BINDING,
} AmkPendingKind;

typedef struct {
  AmkPendingKind kind;
  uint32_t record; /* task index, or binding index */
  uint32_t slot;   /* input/output/wait position */
  AmkTextSlice name;
  AmkLoc loc;
} AmkPendingRef;

typedef struct {
  const char *key;
  AmkValue value;
  AmkLoc loc;
} AmkTextMember;

typedef struct {
  AmkTextRef ref;
  AmkLoc loc;
} AmkTextRefAt;

typedef struct {
  AmkTextRefAt ref;
  AmkValue threshold;
} AmkTextWait;

/* A config field's right-hand side: a value, or a bare word (`load_balance`). */
typedef struct {
  AmkValue value;
  AmkTextSlice word;
  bool is_word;
} AmkTextFieldValue;

/* The task being read; the grammar fills it piece by piece. */
typedef struct {
  AmkLoc at, id_loc, op_loc, signal_loc, sm_loc;
  int64_t id;
  AmkTextSlice op;
  size_t inputs_mark, outputs_mark, waits_mark;
  AmkTextRef signal;
  AmkValue params; /* an OBJECT, or NULL kind when absent */
  bool has_sm;
  int64_t sm, est_bytes, est_flops;
  const char *label;
} AmkTextTask;

/* A growable array of `elem` bytes per entry (scratch; malloc'd). */
typedef struct {
  void *data;
  size_t len, cap, elem;
} AmkVec;

typedef struct AmkTextParser {
  /* the lexer's cursor over a private NUL-terminated copy of the input */
  char *copy;
  const unsigned char *cursor, *marker, *limit, *token;
  const unsigned char *line_start;
  uint32_t line;
  /* the last token, for "found ..." in syntax errors */
  AmkTextSlice last_token;
  /* what is being parsed, for syntax error messages ("task inputs") */
  const char *context;

  AmkModule *module;
  AmkDiagEngine *diag;
  bool failed; /* a semantic error was reported; keep parsing, return NULL */

  AmkNameMap buffer_names, counter_names;
  uint32_t value_depth; /* lists and objects open around the next value */
  AmkVec values;   /* AmkValue: open list items */
  AmkVec members;  /* AmkTextMember: open object members */
  AmkVec refs;     /* AmkTextRefAt: the current task's inputs and outputs */
  AmkVec waits;    /* AmkTextWait: the current task's waits */
  AmkVec pending;  /* AmkPendingRef */
  AmkVec pages;    /* AmkPage */
  AmkVec bindings; /* AmkPageBinding */

  AmkTextTask task;
  AmkLoc pages_loc;

  /* the target being read */
  AmkTarget *target;
  AmkLoc target_loc;
  uint32_t target_fields_seen; /* bit per AMK_TARGET_FIELDS entry */
  bool target_has_block;
  uint32_t config_fields_seen;
  bool seen_header, seen_model, seen_meta, seen_target, seen_config,
      seen_pages;
} AmkTextParser;

void amk_vec_init(AmkVec *v, size_t elem);
void amk_vec_free(AmkVec *v);
void *amk_vec_push(AmkVec *v); /* returns the new (zeroed) element */
#define AMK_VEC_AT(v, type, i) (((type *)(v)->data)[(i)])

/* Report an error at a token or record position and mark the parse failed. */
void amk_text_error(AmkTextParser *p, AmkLoc loc, const char *fmt, ...)
    AMK_PRINTF(3, 4);

/* A list or object opens at `loc`: refuses (once) nesting deeper than
 * AMK_VALUE_MAX_DEPTH. amk_text_close_value undoes it. */
void amk_text_open_value(AmkTextParser *p, AmkLoc loc);
void amk_text_close_value(AmkTextParser *p);

/* ---- record builders called from the grammar's actions (text_parse.c) --- */

const char *amk_text_dup(AmkTextParser *p, AmkTextSlice s);
void amk_text_set_versions(AmkTextParser *p, const char *ir, AmkLoc ir_loc,
                           const char *abi, AmkLoc abi_loc);
void amk_text_set_model(AmkTextParser *p, const char *dir, AmkLoc at);
/* `at`: the keyword; `value_at`: the value, which must be an object. */
void amk_text_set_meta(AmkTextParser *p, AmkValue meta, AmkLoc at,
                       AmkLoc value_at);

void amk_text_begin_target(AmkTextParser *p, const char *name, AmkLoc at);
void amk_text_target_field(AmkTextParser *p, const char *key, AmkLoc key_loc,
                           const AmkValue *value, AmkLoc value_loc);
void amk_text_end_target(AmkTextParser *p);

void amk_text_begin_config(AmkTextParser *p, AmkLoc at);
void amk_text_config_field(AmkTextParser *p, const char *key, AmkLoc key_loc,
                           const AmkTextFieldValue *value, AmkLoc value_loc);

/* `id` is NULL when no explicit id was written. */
void amk_text_add_buffer(AmkTextParser *p, AmkLoc at, const int64_t *id,
                         AmkLoc id_loc, AmkTextRef name, AmkLoc name_loc,
                         AmkTextSlice dtype, AmkLoc dtype_loc, AmkValue dims,
                         AmkTextSlice kind, AmkLoc kind_loc, AmkTextSlice space,
                         AmkLoc space_loc, const char *source);
void amk_text_add_counter(AmkTextParser *p, AmkLoc at, const int64_t *id,
                          AmkLoc id_loc, AmkTextRef name, AmkLoc name_loc,
                          const char *note, int64_t init);
void amk_text_begin_task(AmkTextParser *p, AmkLoc at, int64_t id, AmkLoc id_loc,
                         AmkTextSlice op, AmkLoc op_loc);
void amk_text_end_task(AmkTextParser *p);

void amk_text_push_ref(AmkTextParser *p, AmkTextRef ref, AmkLoc at);
void amk_text_push_wait(AmkTextParser *p, AmkTextRef ref, AmkLoc at,
                        AmkValue threshold);
void amk_text_push_value(AmkTextParser *p, AmkValue v);
AmkValue amk_text_make_list(AmkTextParser *p, size_t mark);
void amk_text_push_member(AmkTextParser *p, const char *key, AmkLoc at,
                          AmkValue v);
AmkValue amk_text_make_object(AmkTextParser *p, size_t mark);

void amk_text_begin_pages(AmkTextParser *p, AmkLoc at);
void amk_text_add_page(AmkTextParser *p, int64_t id, AmkLoc id_loc,
                       AmkTextSlice space, AmkLoc space_loc, int64_t nbytes,
                       int64_t live_start, int64_t live_end);
void amk_text_add_binding(AmkTextParser *p, AmkTextRef buffer, AmkLoc at,
                          int64_t page, AmkLoc page_loc);
void amk_text_end_pages(AmkTextParser *p);


/* Parser state around one run of the generated parser (text_entry.c):
 * init copies the input and sets up the scratch; finish resolves names,
 * frees the scratch and returns the module, or NULL after any error. */
void amk_text_parser_init(AmkTextParser *p, const char *name, const char *text, size_t len,
                          AmkDiagEngine *diag);
AmkModule *amk_text_parser_finish(AmkTextParser *p, int parse_status);

#endif

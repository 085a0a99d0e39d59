/* What the fuzz drivers share (docs/Testing.md, "Fuzzing").
 *
 * Each driver defines LLVMFuzzerTestOneInput, libFuzzer's entry point: built
 * with AMK_FUZZ=ON (clang) libFuzzer calls it with mutated inputs; in the
 * ordinary builds replay.c calls it once per file named on its command line,
 * so the seed corpora and the inputs of fixed defects run in every lit run.
 *
 * A driver checks more than "no crash": a broken property calls fuzz_fail,
 * which aborts, so that libFuzzer keeps the input and a replay fails.
 */
#ifndef AMK_FUZZ_FUZZ_H
#define AMK_FUZZ_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A diagnostics engine that keeps its messages instead of printing them
 * (most inputs are refused; millions of messages would drown the log). */
AmkDiagEngine *fuzz_diag_new(void);

/* Prints "fuzz: property broken: ..." and the messages `diag` kept (may be
 * NULL), then aborts. */
_Noreturn void fuzz_fail(const AmkDiagEngine *diag, const char *fmt, ...)
    AMK_PRINTF(2, 3);

/* A reader's answer and its messages must agree: a refusal reports at least
 * one error (every bad input gets a clear error), an acceptance none. */
void fuzz_check_verdict(const char *reader, bool accepted,
                        const AmkDiagEngine *diag);

/* The module's two written forms read back to the same module: its JSON
 * read back writes the same JSON, and its text parsed back prints the same
 * text and writes the same JSON (the text carries everything the JSON does;
 * not the other way round: counter names, for one, live only in the text,
 * and the JSON's counters are named by their ids when read). Then the
 * verifier and the validator run over it (they must not crash or hang on
 * any module the readers produce; their verdicts are not checked). */
void fuzz_check_module(const AmkModule *m);

#endif

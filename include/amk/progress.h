/* Progress of long work on one line of a terminal (support layer): a
 * percentage with the elapsed time and an ETA, redrawn in place with '\r'
 * and ended with a newline, as llama.cpp and cargo show a load. Whether it
 * is drawn at all is the environment's choice:
 *
 *   AMK_PROGRESS=auto    (or unset, or any other value) only when the
 *                        stream is a terminal, and only for work that lasts
 *                        longer than half a second, so quick runs print
 *                        nothing
 *   AMK_PROGRESS=always  on any stream, from the start (tests, logs)
 *   AMK_PROGRESS=never   never
 *
 * A helper thread redraws the line every quarter of a second, so work that
 * is one long blocking call (an NVRTC compile) still shows its elapsed
 * time; amk_progress_add may be called from any thread. */
#ifndef AMK_PROGRESS_H
#define AMK_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define AMK_PROGRESS_ENV "AMK_PROGRESS"

typedef enum {
  AMK_PROGRESS_AUTO,
  AMK_PROGRESS_ALWAYS,
  AMK_PROGRESS_NEVER,
} AmkProgressMode;

/* What the counts are: bytes (printed as kB, MB, GB) or items named by the
 * caller ("tokens"). */
typedef enum {
  AMK_PROGRESS_BYTES,
  AMK_PROGRESS_ITEMS,
} AmkProgressUnit;

/* AMK_PROGRESS as above. */
AmkProgressMode amk_progress_mode(void);
/* Whether progress is drawn on `stream` at all (auto: it is a terminal). */
bool amk_progress_wanted(FILE *stream);

/* "2.47 GB", "476.4 kB", "512 B" (decimal units). */
void amk_progress_format_bytes(char *buf, size_t size, double bytes);
/* "0.4 s", "12 s", "3m07s", "1h05m". */
void amk_progress_format_duration(char *buf, size_t size, double seconds);

/* The line for a state of the work, without '\r' or newline:
 *   running, total known:  "LABEL  37% (0.91 of 2.47 GB), 1.2 s, ETA 2.0 s"
 *                          (no ETA before anything is done)
 *   running, total <= 0:   "LABEL... 1.2 s"
 *   finished, all done:    "LABEL 100% (2.47 GB) in 3.2 s"; "LABEL... done in 3.7 s"
 *   finished short of it:  "LABEL  37% (0.91 of 2.47 GB), stopped after 1.2 s"
 * `items` names ITEMS counts ("tokens"). */
void amk_progress_format(char *buf, size_t size, const char *label, AmkProgressUnit unit,
                         const char *items, int64_t done, int64_t total, double elapsed_s,
                         bool finished);

typedef struct AmkProgress AmkProgress;

/* The clock the lines' times are read from, in seconds (NULL: the
 * monotonic clock); tests set one that they advance themselves. */
void amk_progress_set_clock(double (*now)(void));

/* Starts a progress line on stderr for `total` units of work (<= 0: only
 * the elapsed time is shown); NULL when progress is not wanted there, and
 * every function below takes NULL and does nothing. */
AmkProgress *amk_progress_begin(const char *label, AmkProgressUnit unit, const char *items,
                                int64_t total);
/* The same on `stream`, first drawn after delay_s seconds (< 0: the mode's
 * default, 0.5 s for auto and none for always). */
AmkProgress *amk_progress_begin_on(FILE *stream, double delay_s, const char *label,
                                   AmkProgressUnit unit, const char *items, int64_t total);
/* n more units done. */
void amk_progress_add(AmkProgress *p, int64_t n);
/* Ends the work: when the line was drawn, its final state and a newline;
 * frees p. */
void amk_progress_end(AmkProgress *p);

/* Before other output on `stream`: ends the progress line being drawn
 * there, if any, so that a message does not run on after it; the line is
 * drawn again below it. The diagnostics engine calls this before every
 * message. */
void amk_progress_break_line(FILE *stream);

#endif

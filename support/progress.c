/* Progress of long work on one terminal line (include/amk/progress.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "amk/diag.h"
#include "amk/progress.h"

/* auto mode: work shorter than this prints nothing. */
#define AUTO_DELAY_S 0.5
/* The helper thread's redraw period. */
#define REDRAW_PERIOD_S 0.25

AmkProgressMode amk_progress_mode(void) {
  const char *v = getenv(AMK_PROGRESS_ENV);
  if (v && strcmp(v, "always") == 0)
    return AMK_PROGRESS_ALWAYS;
  if (v && strcmp(v, "never") == 0)
    return AMK_PROGRESS_NEVER;
  return AMK_PROGRESS_AUTO;
}

bool amk_progress_wanted(FILE *stream) {
  switch (amk_progress_mode()) {
  case AMK_PROGRESS_ALWAYS:
    return true;
  case AMK_PROGRESS_NEVER:
    return false;
  case AMK_PROGRESS_AUTO:
    return stream && isatty(fileno(stream));
  }
  return false;
}

/* ---- formatting ------------------------------------------------------------------- */

/* The decimal unit a size is shown in, chosen by the larger of the sizes
 * on one line so that both read in the same unit. */
typedef struct {
  double scale;
  const char *name;
  int decimals;
} ByteUnit;

static ByteUnit byte_unit(double bytes) {
  if (bytes >= 1e12)
    return (ByteUnit){1e12, "TB", 2};
  if (bytes >= 1e9)
    return (ByteUnit){1e9, "GB", 2};
  if (bytes >= 1e6)
    return (ByteUnit){1e6, "MB", 1};
  if (bytes >= 1e3)
    return (ByteUnit){1e3, "kB", 1};
  return (ByteUnit){1, "B", 0};
}

void amk_progress_format_bytes(char *buf, size_t size, double bytes) {
  ByteUnit u = byte_unit(bytes);
  snprintf(buf, size, "%.*f %s", u.decimals, bytes / u.scale, u.name);
}

void amk_progress_format_duration(char *buf, size_t size, double seconds) {
  if (seconds < 0)
    seconds = 0;
  if (seconds < 9.95)
    snprintf(buf, size, "%.1f s", seconds);
  else if (seconds < 59.5)
    snprintf(buf, size, "%.0f s", seconds);
  else if (seconds < 3599.5) {
    long s = (long)(seconds + 0.5);
    snprintf(buf, size, "%ldm%02lds", s / 60, s % 60);
  } else {
    long m = (long)(seconds / 60 + 0.5);
    snprintf(buf, size, "%ldh%02ldm", m / 60, m % 60);
  }
}

/* "0.91 of 2.47 GB", "2.47 GB", "3 of 8 tokens", "8 tokens". */
static void format_amount(char *buf, size_t size, AmkProgressUnit unit, const char *items,
                          int64_t done, int64_t total) {
  if (unit == AMK_PROGRESS_BYTES) {
    ByteUnit u = byte_unit((double)total);
    if (done == total)
      snprintf(buf, size, "%.*f %s", u.decimals, (double)total / u.scale, u.name);
    else
      snprintf(buf, size, "%.*f of %.*f %s", u.decimals, (double)done / u.scale, u.decimals,
               (double)total / u.scale, u.name);
  } else if (done == total) {
    snprintf(buf, size, "%" PRId64 " %s", total, items ? items : "");
  } else {
    snprintf(buf, size, "%" PRId64 " of %" PRId64 " %s", done, total, items ? items : "");
  }
}

void amk_progress_format(char *buf, size_t size, const char *label, AmkProgressUnit unit,
                         const char *items, int64_t done, int64_t total, double elapsed_s,
                         bool finished) {
  char elapsed[32];
  amk_progress_format_duration(elapsed, sizeof elapsed, elapsed_s);
  if (total <= 0) {
    snprintf(buf, size, "%s... %s%s", label, finished ? "done in " : "", elapsed);
    return;
  }
  if (done < 0)
    done = 0;
  if (done > total)
    done = total;
  int percent = (int)((double)done * 100.0 / (double)total);
  char amount[96];
  format_amount(amount, sizeof amount, unit, items, done, total);
  if (finished && done == total) {
    snprintf(buf, size, "%s 100%% (%s) in %s", label, amount, elapsed);
  } else if (finished) {
    snprintf(buf, size, "%s %3d%% (%s), stopped after %s", label, percent, amount, elapsed);
  } else if (done == 0) {
    snprintf(buf, size, "%s %3d%% (%s), %s", label, percent, amount, elapsed);
  } else {
    /* The rate so far carries on. */
    char eta[32];
    amk_progress_format_duration(eta, sizeof eta,
                                 elapsed_s * (double)(total - done) / (double)done);
    snprintf(buf, size, "%s %3d%% (%s), %s, ETA %s", label, percent, amount, elapsed, eta);
  }
}

/* ---- the line ---------------------------------------------------------------------- */

struct AmkProgress {
  FILE *stream;
  char *label, *items;
  AmkProgressUnit unit;
  int64_t total;
  _Atomic int64_t done;
  double start_s, delay_s;
  pthread_mutex_t lock; /* guards what follows and the stream's line */
  pthread_cond_t wake;
  bool stop;
  bool drawn;     /* the line has been drawn */
  bool open;      /* and the stream's cursor is at its end */
  size_t shown;   /* the length of the line last drawn */
  pthread_t thread;
  bool threaded;
};

static double monotonic_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double (*_Atomic clock_fn)(void) = monotonic_s;

void amk_progress_set_clock(double (*now)(void)) {
  atomic_store(&clock_fn, now ? now : monotonic_s);
}

static double now_s(void) { return atomic_load(&clock_fn)(); }

/* Draws the line over the last one (padding over what was longer). Holds
 * the lock. */
static void draw(AmkProgress *p, bool finished) {
  char line[512];
  amk_progress_format(line, sizeof line, p->label, p->unit, p->items, atomic_load(&p->done),
                      p->total, now_s() - p->start_s, finished);
  size_t len = strlen(line);
  int pad = p->shown > len ? (int)(p->shown - len) : 0;
  fprintf(p->stream, "\r%s%*s%s", line, pad, "", finished ? "\n" : "");
  fflush(p->stream);
  p->shown = len;
  p->drawn = true;
  p->open = !finished;
}

/* The line now drawn, for amk_progress_break_line (one at a time: a second
 * line begun meanwhile is not found by it). */
static pthread_mutex_t active_lock = PTHREAD_MUTEX_INITIALIZER;
static AmkProgress *active;

void amk_progress_break_line(FILE *stream) {
  pthread_mutex_lock(&active_lock);
  AmkProgress *p = active;
  if (p && p->stream == stream) {
    pthread_mutex_lock(&p->lock);
    if (p->open) {
      fputc('\n', p->stream);
      p->open = false;
      p->shown = 0;
    }
    pthread_mutex_unlock(&p->lock);
  }
  pthread_mutex_unlock(&active_lock);
}

static void *redraw_loop(void *arg) {
  AmkProgress *p = arg;
  pthread_mutex_lock(&p->lock);
  while (!p->stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long ns = until.tv_nsec + (long)(REDRAW_PERIOD_S * 1e9);
    until.tv_sec += ns / 1000000000L;
    until.tv_nsec = ns % 1000000000L;
    int rc = 0;
    while (!p->stop && rc != ETIMEDOUT)
      rc = pthread_cond_timedwait(&p->wake, &p->lock, &until);
    if (!p->stop && now_s() - p->start_s >= p->delay_s)
      draw(p, false);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

AmkProgress *amk_progress_begin_on(FILE *stream, double delay_s, const char *label,
                                   AmkProgressUnit unit, const char *items, int64_t total) {
  if (!amk_progress_wanted(stream))
    return NULL;
  AmkProgress *p = amk_xcalloc(1, sizeof *p);
  p->stream = stream;
  p->label = amk_xstrdup(label ? label : "");
  p->items = amk_xstrdup(items ? items : "");
  p->unit = unit;
  p->total = total;
  atomic_init(&p->done, 0);
  p->start_s = now_s();
  p->delay_s = delay_s >= 0 ? delay_s
               : amk_progress_mode() == AMK_PROGRESS_ALWAYS ? 0
                                                            : AUTO_DELAY_S;
  pthread_mutex_init(&p->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&p->wake, &attr);
  pthread_condattr_destroy(&attr);
  pthread_mutex_lock(&active_lock);
  if (!active)
    active = p;
  pthread_mutex_unlock(&active_lock);
  if (p->delay_s <= 0) {
    pthread_mutex_lock(&p->lock);
    draw(p, false);
    pthread_mutex_unlock(&p->lock);
  }
  /* Without a thread the line is drawn at the start and the end only. */
  p->threaded = pthread_create(&p->thread, NULL, redraw_loop, p) == 0;
  return p;
}

AmkProgress *amk_progress_begin(const char *label, AmkProgressUnit unit, const char *items,
                                int64_t total) {
  return amk_progress_begin_on(stderr, -1, label, unit, items, total);
}

void amk_progress_add(AmkProgress *p, int64_t n) {
  if (p)
    atomic_fetch_add(&p->done, n);
}

void amk_progress_end(AmkProgress *p) {
  if (!p)
    return;
  pthread_mutex_lock(&active_lock);
  if (active == p)
    active = NULL;
  pthread_mutex_unlock(&active_lock);
  pthread_mutex_lock(&p->lock);
  p->stop = true;
  pthread_cond_signal(&p->wake);
  pthread_mutex_unlock(&p->lock);
  if (p->threaded)
    pthread_join(p->thread, NULL);
  if (p->drawn)
    draw(p, true);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->lock);
  free(p->label);
  free(p->items);
  free(p);
}

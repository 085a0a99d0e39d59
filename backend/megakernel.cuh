// The device library of the AMK megakernel (CUDA C++, compiled by NVRTC at
// run time; the backend embeds this file and pastes it into each program's
// generated source after tables.h and abi.h). The generated part defines
// AMK_NT (threads per block) before it and, after it, one wrapper per
// variant plus amk_dispatch.
//
// Numerics follow the CPU reference (docs/Instructions.md): fp32 compute
// and accumulation, outputs rounded to the buffer's dtype, fused patterns
// rounding their intermediates to the dtype of the unfused buffer. Only the
// order of the sums differs (parallel reductions).

#ifndef AMK_NT
#define AMK_NT 256
#endif
#define AMK_NWARPS (AMK_NT / 32)
// Token rows a step feeds: 1 for decode, the chunk's rows for a prefill
// program (codegen defines it then); the step's window ends at pos + rows.
#ifndef AMK_STEP_ROWS
#define AMK_STEP_ROWS 1
#endif

typedef const amk_program_t &AmkP;
typedef const amk_instruction_t &AmkI;
typedef const amk_inst_aux_t &AmkA;

// ---- conversions --------------------------------------------------------------

__device__ __forceinline__ float amk_bf2f(unsigned short h) {
  return __uint_as_float(((unsigned int)h) << 16);
}
__device__ __forceinline__ unsigned short amk_f2bf(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float amk_h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short amk_f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
// Integer stores truncate toward zero, saturating, NaN as 0.
__device__ __forceinline__ long long amk_f2int(float v, long long lo, long long hi) {
  if (v != v)
    return 0;
  if (v <= (float)lo)
    return lo;
  if (v >= (float)hi)
    return hi;
  return (long long)v;
}

// Element i of a buffer of dtype DT, widened to fp32 (L2, never a stale L1
// line: activations are written by other blocks during the launch).
template <int DT> __device__ __forceinline__ float amk_ld(const void *p, long long i) {
  if constexpr (DT == AMK_ABI_DTYPE_F32)
    return __ldcg((const float *)p + i);
  else if constexpr (DT == AMK_ABI_DTYPE_F16)
    return amk_h2f(__ldcg((const unsigned short *)p + i));
  else if constexpr (DT == AMK_ABI_DTYPE_BF16)
    return amk_bf2f(__ldcg((const unsigned short *)p + i));
  else if constexpr (DT == AMK_ABI_DTYPE_I32)
    return (float)__ldcg((const int *)p + i);
  else if constexpr (DT == AMK_ABI_DTYPE_I8)
    return (float)((const signed char *)p)[i];
  else
    return (float)((const unsigned char *)p)[i];
}
template <int DT> __device__ __forceinline__ long long amk_ldi(const void *p, long long i) {
  if constexpr (DT == AMK_ABI_DTYPE_I32)
    return (long long)__ldcg((const int *)p + i);
  else if constexpr (DT == AMK_ABI_DTYPE_I8)
    return (long long)((const signed char *)p)[i];
  else if constexpr (DT == AMK_ABI_DTYPE_U8 || DT == AMK_ABI_DTYPE_BOOL)
    return (long long)((const unsigned char *)p)[i];
  else
    return (long long)amk_ld<DT>(p, i);
}
template <int DT> __device__ __forceinline__ void amk_st(void *p, long long i, float v) {
  if constexpr (DT == AMK_ABI_DTYPE_F32)
    __stcg((float *)p + i, v);
  else if constexpr (DT == AMK_ABI_DTYPE_F16)
    __stcg((unsigned short *)p + i, amk_f2h(v));
  else if constexpr (DT == AMK_ABI_DTYPE_BF16)
    __stcg((unsigned short *)p + i, amk_f2bf(v));
  else if constexpr (DT == AMK_ABI_DTYPE_I32)
    __stcg((int *)p + i, (int)amk_f2int(v, -2147483647LL - 1, 2147483647LL));
  else if constexpr (DT == AMK_ABI_DTYPE_I8)
    ((signed char *)p)[i] = (signed char)amk_f2int(v, -128, 127);
  else
    ((unsigned char *)p)[i] = (unsigned char)amk_f2int(v, 0, 255);
}
// v rounded as a store to DT and a load back would round it.
template <int DT> __device__ __forceinline__ float amk_round(float v) {
  if constexpr (DT == AMK_ABI_DTYPE_BF16)
    return amk_bf2f(amk_f2bf(v));
  else if constexpr (DT == AMK_ABI_DTYPE_F16)
    return amk_h2f(amk_f2h(v));
  else if constexpr (DT == AMK_ABI_DTYPE_F32)
    return v;
  else
    return (float)amk_f2int(v, -2147483647LL - 1, 2147483647LL);
}

// ---- program access, errors, counters -------------------------------------------

__device__ __forceinline__ const amk_buffer_t &amk_buf(AmkP P, int b) {
  return ((const amk_buffer_t *)P.buffers)[b];
}
// A task's input and output addresses, from its staged aux record.
__device__ __forceinline__ void *amk_in(AmkA A, int k) { return (void *)A.io[k]; }
__device__ __forceinline__ void *amk_out(AmkA A, int k) {
  return (void *)A.io[AMK_MAX_INPUTS + k];
}

// Records the first error and raises the device abort flag; every block
// polls it while waiting, so a failed launch ends instead of hanging.
__device__ __noinline__ void amk_fail(AmkP P, int code, int inst, int a, int b) {
  unsigned int *st = (unsigned int *)P.status;
  if (atomicCAS(st, 0u, (unsigned int)code) == 0u) {
    st[1] = (unsigned int)inst;
    st[2] = (unsigned int)a;
    st[3] = (unsigned int)b;
  }
  __threadfence();
  atomicExch(st + 4, 1u);
}

__device__ __forceinline__ unsigned int amk_ld_acquire(const unsigned int *p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned int amk_ld_relaxed(const unsigned int *p) {
  unsigned int v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void amk_fence_acquire() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
__device__ __forceinline__ void amk_red_release(unsigned int *p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}
__device__ __forceinline__ unsigned long long amk_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Phase stamps inside a task (AMK_TRACE_PHASES, set by codegen for
// AMK_CUDA_TRACE_PHASES=1; a traced launch of another build stamps none):
// thread 0 keeps the running instruction's trace record, and the task
// bodies stamp when their inputs are staged.
#ifndef AMK_TRACE_PHASES
#define AMK_TRACE_PHASES 0
#endif
__shared__ amk_trace_t *amk_phase_record;
template <uint64_t amk_trace_t::*STAMP> __device__ __forceinline__ void amk_mark() {
  if constexpr (AMK_TRACE_PHASES != 0)
    if (threadIdx.x == 0 && amk_phase_record)
      amk_phase_record->*STAMP = amk_globaltimer();
}
__device__ __forceinline__ void amk_mark_staged() { amk_mark<&amk_trace_t::staged>(); }
// The start and the end of a tile's weight loop, after its inputs'
// preparation and before its sums are combined (amk_trace_t.loop, .looped).
__device__ __forceinline__ void amk_mark_loop() { amk_mark<&amk_trace_t::loop>(); }
__device__ __forceinline__ void amk_mark_looped() { amk_mark<&amk_trace_t::looped>(); }

// Thread 0 polls until every wait holds, then a barrier. False: abort.
// A counter not yet there is polled with relaxed loads, AMK_WAIT_DEPTH of
// them in flight, a new one AMK_WAIT_GAP_NS after the oldest is looked at;
// the poll that sees it is followed by an acquire fence (a relaxed read of
// a release, then fence.acq_rel: the block's later reads see the producer's
// writes). The device's abort flag used to be read after every poll, so a
// signal took up to two round trips to notice; it is read every 16 polls
// now. H100, one call (1B, SmolLM2, 8B at position 0): depth 1 with a 128 ns
// gap beat the old loop by 1-5%; depth 4 was slower than depth 1 (100+
// waiting blocks polling one counter's L2 slice), depth 2 the same.
// The host's abort flag lives in mapped host memory, so each poll is a PCIe
// read. Polled every 64 iterations by 100+ waiting blocks, those reads
// stalled the whole GPU for up to hundreds of microseconds at a time
// (--trace on an H100: every block's tasks ending at the same instant; one
// 1B schedule went from 2.0-5.4 ms to 1.86 ms per token once polled less),
// so the flag and the spin limit are looked at once per AMK_HOST_POLL_NS of
// waiting: the watchdog still stops a launch within a fraction of a ms.
#define AMK_HOST_POLL_NS 200000ull
#ifndef AMK_WAIT_DEPTH
#define AMK_WAIT_DEPTH 1
#endif
#ifndef AMK_WAIT_GAP_NS
#define AMK_WAIT_GAP_NS 128
#endif
// Opt-in backoff (AMK_CUDA_WAIT_SLOW_AFTER_NS; 0: off): a wait still
// polling after this many ns polls every AMK_WAIT_SLOW_GAP_NS instead. Every
// waiting block polls its counter's line in one L2 slice, and the streaming
// tiles' lines in that slice wait behind the polls: on an H200 the 8B int4
// step's tiles ran 3% shorter with a 2048 ns gap (twenty-ninth session,
// docs/Performance.md), while each hop was noticed about 1 us later. A wait
// on the critical chain is mostly short; the long ones are blocks that
// finished early.
#ifndef AMK_WAIT_SLOW_AFTER_NS
#define AMK_WAIT_SLOW_AFTER_NS 0
#endif
#ifndef AMK_WAIT_SLOW_GAP_NS
#define AMK_WAIT_SLOW_GAP_NS 1024
#endif
static_assert(AMK_WAIT_DEPTH >= 1 && AMK_WAIT_DEPTH <= 8, "1 to 8 polls in flight");
// The counter values thread 0 has seen in this launch, direct-mapped by
// counter: a wait that a value already seen satisfies needs no round trip
// (the acquire that saw it orders the block's later reads as well). Own-block
// hops cost ~1.5 us on an H100 (--trace), mostly this load; a down_proj tile
// waits again on the counter its gate_up tile waited on.
#ifndef AMK_WAIT_CACHE
#define AMK_WAIT_CACHE 1
#endif
#define AMK_SEEN_SLOTS 64
__shared__ int amk_seen_counter[AMK_SEEN_SLOTS];
__shared__ unsigned int amk_seen_value[AMK_SEEN_SLOTS];
// Thread 0, at the start of a launch.
__device__ __forceinline__ void amk_seen_reset() {
  for (int i = 0; i < AMK_SEEN_SLOTS; i++)
    amk_seen_counter[i] = -1;
}

// Thread 0: polls counter `counter` until it reaches want (relaxed loads,
// AMK_WAIT_DEPTH in flight), then the acquire fence; the device and host
// abort flags and the spin limit are looked at as the loop below says.
// False: the launch is failing (nothing more to do).
__device__ __forceinline__ bool amk_spin_here(AmkP P, int idx, int counter, unsigned int want,
                                              unsigned int *seen_out) {
  const unsigned int *c = (const unsigned int *)P.counters + counter;
  volatile unsigned int *st = (volatile unsigned int *)P.status;
  volatile unsigned int *host_abort = (volatile unsigned int *)P.abort_flag;
  unsigned long long t0 = amk_globaltimer(), next_check = t0 + AMK_HOST_POLL_NS;
  unsigned int v[AMK_WAIT_DEPTH], iter = 0, seen = 0, gap = AMK_WAIT_GAP_NS;
#pragma unroll
  for (int i = 0; i < AMK_WAIT_DEPTH; i++) {
    if (i > 0)
      __nanosleep(AMK_WAIT_GAP_NS);
    v[i] = amk_ld_relaxed(c);
  }
  bool there = false;
  while (!there) {
#pragma unroll
    for (int i = 0; i < AMK_WAIT_DEPTH && !there; i++) {
      if (v[i] >= want) {
        seen = v[i];
        there = true;
      } else {
        if (AMK_WAIT_SLOW_AFTER_NS > 0 && gap != AMK_WAIT_SLOW_GAP_NS &&
            amk_globaltimer() - t0 >= (unsigned long long)AMK_WAIT_SLOW_AFTER_NS)
          gap = AMK_WAIT_SLOW_GAP_NS;
        __nanosleep(gap);
        v[i] = amk_ld_relaxed(c);
      }
    }
    if (there || (++iter & 15u) != 0u)
      continue;
    if (st[4] != 0u)
      return false;
    if (amk_globaltimer() >= next_check) {
      next_check += AMK_HOST_POLL_NS;
      if (*host_abort != 0u) {
        amk_fail(P, AMK_STATUS_ABORTED, idx, counter, (int)want);
        return false;
      }
      if (P.spin_limit_ns > 0 && (long long)(amk_globaltimer() - t0) > P.spin_limit_ns) {
        amk_fail(P, AMK_STATUS_SPIN, idx, counter, (int)want);
        return false;
      }
    }
  }
  amk_fence_acquire();
  *seen_out = seen;
  return true;
}

// The signal's copy (a call: the main loop keeps only a call site); the wait
// keeps its own inline, as a call in amk_wait costs every task its
// register saves.
__device__ __noinline__ bool amk_spin(AmkP P, int idx, int counter, unsigned int want,
                                      unsigned int *seen_out) {
  return amk_spin_here(P, idx, counter, want, seen_out);
}

__device__ __noinline__ bool amk_wait(AmkP P, AmkI I, int idx) {
  __shared__ int s_ok;
  if (threadIdx.x == 0) {
    int ok = 1;
    const unsigned int *C = (const unsigned int *)P.counters;
    for (int w = 0; w < I.n_waits && ok; w++) {
      int counter = I.wait_counter[w];
      unsigned int want = (unsigned int)I.wait_threshold[w];
      int slot = counter & (AMK_SEEN_SLOTS - 1);
      if (AMK_WAIT_CACHE && amk_seen_counter[slot] == counter && amk_seen_value[slot] >= want)
        continue;
      unsigned int seen = amk_ld_acquire(C + counter);
      if (seen < want && !amk_spin_here(P, idx, counter, want, &seen)) {
        ok = 0;
        break;
      }
      amk_seen_counter[slot] = counter;
      amk_seen_value[slot] = seen;
    }
    // The device abort flag is read only while spinning: a block whose
    // counters are already there goes on without another round trip (an
    // error elsewhere is still reported by the status).
    s_ok = ok;
  }
  // One barrier: s_ok is next written by thread 0 in the following wait,
  // which comes after the barrier in amk_signal, so no second one is needed.
  __syncthreads();
  return s_ok != 0;
}

// All threads' writes, then thread 0: one release increment. The barrier
// orders the block's writes before thread 0's release (release is cumulative
// in the PTX memory model), so no full __threadfence is needed.
// A task with signal waits (a consumer of launch-tagged transfers: the
// counters of the producers it read through shadows) signals only once they
// hold: thread 0 loads the first before the barrier, so its round trip
// overlaps the other warps' finish, and the one fence that follows is both
// the acquire of those counters and the release of its own.
// AMK_TAGGED (set by codegen where the program has launch-tagged transfers):
// without it no task has signal waits, and none of their code is built.
#ifndef AMK_TAGGED
#define AMK_TAGGED 0
#endif
__device__ __forceinline__ void amk_signal(AmkP P, AmkI I, AmkA A, int idx) {
  // Thread 0 reads the staged records before the barrier: once past it, the
  // other lanes of warp 0 may already be staging the task after next into
  // this task's slot while thread 0 still waits here.
  unsigned int *C = (unsigned int *)P.counters;
  if constexpr (AMK_TAGGED == 0) {
    unsigned int *mine = threadIdx.x == 0 ? C + I.out_counter : nullptr;
    __syncthreads();
    if (threadIdx.x == 0)
      amk_red_release(mine);
    return;
  }
  unsigned int *mine = nullptr, early = 0;
  int n_late = 0, late_counter[AMK_MAX_SIGNAL_WAITS];
  unsigned int late_want[AMK_MAX_SIGNAL_WAITS];
  if (threadIdx.x == 0) {
    mine = C + I.out_counter;
    n_late = A.n_signal_waits < AMK_MAX_SIGNAL_WAITS ? A.n_signal_waits : AMK_MAX_SIGNAL_WAITS;
#pragma unroll
    for (int w = 0; w < AMK_MAX_SIGNAL_WAITS; w++) {
      late_counter[w] = A.signal_wait_counter[w];
      late_want[w] = (unsigned int)A.signal_wait_threshold[w];
    }
    if (n_late > 0)
      early = amk_ld_relaxed(C + late_counter[0]);
  }
  __syncthreads();
  if (threadIdx.x != 0)
    return;
  if (n_late == 0) {
    amk_red_release(mine);
    return;
  }
#pragma unroll
  for (int w = 0; w < AMK_MAX_SIGNAL_WAITS; w++) {
    if (w >= n_late)
      break;
    unsigned int seen, v = w == 0 ? early : amk_ld_relaxed(C + late_counter[w]);
    if (v < late_want[w] && !amk_spin(P, idx, late_counter[w], late_want[w], &seen))
      return; // the launch is failing: no signal
  }
  amk_fence_acquire();
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(mine) : "memory");
}

// ---- launch-tagged transfers -----------------------------------------------------
//
// A producer also writes each output element as one 8-byte word, its value
// as f32 bits in the low half and the launch's tag in the high, into the
// output's shadow (aux.shadow, set where a consumer reads it so); a
// consumer loads the words it needs and polls again those not yet carrying
// this launch's tag, instead of waiting on the producers' counter: its
// first loads are its input, one round trip where a counter wait took a
// poll, an acquire and the loads. 8-byte accesses are single-copy atomic,
// so a word with the tag has the value. (docs/Backend.md, amk/backend.h.)
#ifndef AMK_TAG_GAP_NS
#define AMK_TAG_GAP_NS 64
#endif
__shared__ unsigned long long *amk_tag_out; // the running task's output shadow, or null
__shared__ unsigned int amk_tag_now;        // this launch's tag

__device__ __forceinline__ void amk_tag_put(long long i, float v) {
  unsigned long long *s = amk_tag_out;
  if (s) {
    unsigned long long w = ((unsigned long long)amk_tag_now << 32) | __float_as_uint(v);
    // No "memory" clobber: nothing needs ordering against this store, and
    // a clobber would keep the compiler from issuing the next row's weight
    // loads ahead of it.
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(s + i), "l"(w));
  }
}
__device__ __forceinline__ unsigned long long amk_tag_ld(const unsigned long long *p) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(w) : "l"(p));
  return w;
}
// Two words (16-byte aligned): each is single-copy atomic on its own.
__device__ __forceinline__ ulonglong2 amk_tag_ld2(const unsigned long long *p) {
  ulonglong2 w;
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(w.x), "=l"(w.y) : "l"(p));
  return w;
}
__device__ __forceinline__ bool amk_tag_ok(unsigned long long w, unsigned int tag) {
  return (unsigned int)(w >> 32) == tag;
}
__device__ __forceinline__ float amk_tag_value(unsigned long long w) {
  return __uint_as_float((unsigned int)w);
}
// Every thread: whether to keep polling (false once the launch is failing:
// a device abort, or the host's abort or the spin limit, reported here).
__device__ __noinline__ bool amk_tag_alive(AmkP P, int idx, unsigned long long t0) {
  if (((volatile unsigned int *)P.status)[4] != 0u)
    return false;
  // The host's flag is a PCIe read: one lane a warp looks, after
  // AMK_HOST_POLL_NS of polling; the others see the device flag it raises.
  unsigned long long now = amk_globaltimer();
  if (now - t0 < AMK_HOST_POLL_NS || (threadIdx.x & 31) != 0)
    return true;
  if (*(volatile unsigned int *)P.abort_flag != 0u) {
    amk_fail(P, AMK_STATUS_ABORTED, idx, -1, (int)P.launch_tag);
    return false;
  }
  if (P.spin_limit_ns > 0 && (long long)(now - t0) > P.spin_limit_ns) {
    amk_fail(P, AMK_STATUS_SPIN, idx, -1, (int)P.launch_tag);
    return false;
  }
  return true;
}
// The lanes `lanes` of a warp, `waiting` of them missing a word (each its
// `first`): the lowest of those polls its word until it has this launch's
// tag. False, for every lane, once the launch is failing.
__device__ __noinline__ bool amk_tag_poll(AmkP P, int idx, unsigned int lanes,
                                          unsigned int waiting,
                                          const unsigned long long *first) {
  int leader = __ffs(waiting) - 1;
  bool alive = true;
  if ((int)(threadIdx.x & 31) == leader) {
    unsigned long long t0 = amk_globaltimer();
    const unsigned int tag = P.launch_tag;
    for (unsigned int iter = 1; !amk_tag_ok(amk_tag_ld(first), tag); iter++) {
      __nanosleep(AMK_TAG_GAP_NS);
      if ((iter & 15u) == 0u && !amk_tag_alive(P, idx, t0)) {
        alive = false;
        break;
      }
    }
  }
  return __shfl_sync(lanes, alive, leader);
}

// N words at p[j] (pairs: 16-byte aligned pairs at p[j], words w[2j], w[2j+1])
// already loaded into w: loads again the ones without this launch's tag
// until all have it. Items with p[j] null are skipped. While a warp's
// lanes miss words, one lane polls one of them (100+ blocks each polling
// every word it needs slowed the tasks that write them); when it lands,
// every lane loads its missing words again at once. The lanes active at the
// call take part together. A failing launch leaves the rest as they are
// (its result is not read).
template <int N, bool PAIRS>
__device__ __forceinline__ void amk_tag_settle(AmkP P, int idx,
                                               const unsigned long long *const (&p)[N],
                                               unsigned long long (&w)[PAIRS ? 2 * N : N]) {
  const unsigned int tag = P.launch_tag;
  auto missing = [&](int j) {
    if (!p[j])
      return false;
    return PAIRS ? !(amk_tag_ok(w[2 * j], tag) && amk_tag_ok(w[2 * j + 1], tag))
                 : !amk_tag_ok(w[j], tag);
  };
  const unsigned int lanes = __activemask();
  for (;;) {
    const unsigned long long *first = nullptr;
#pragma unroll
    for (int j = N - 1; j >= 0; j--)
      if (missing(j))
        first = PAIRS ? p[j] + 1 : p[j]; // a pair's second word is stored last
    unsigned int waiting = __ballot_sync(lanes, first != nullptr);
    if (waiting == 0u)
      return;
    if (!amk_tag_poll(P, idx, lanes, waiting, first))
      return;
#pragma unroll
    for (int j = 0; j < N; j++) {
      if (missing(j)) {
        if constexpr (PAIRS) {
          ulonglong2 v = amk_tag_ld2(p[j]);
          w[2 * j] = v.x;
          w[2 * j + 1] = v.y;
        } else {
          w[j] = amk_tag_ld(p[j]);
        }
      }
    }
  }
}

// One warp streams up to 128 KiB of an instruction's weights into L2 (no
// wait).
__device__ __forceinline__ void amk_prefetch(AmkA A) {
  const char *p = (const char *)A.prefetch_ptr;
  long long n = A.prefetch_bytes;
  if (n > 131072)
    n = 131072;
  for (long long o = (long long)(threadIdx.x & 31) * 128; o < n; o += 32 * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
}

// ---- the weight stream ----------------------------------------------------------
//
// Weights are constants, so a block need not wait for anything to load them.
// At the start of its queue a block describes the weight rows of every GEMV
// tile in the queue into a table in shared memory (all threads at once, so
// the chain of dependent loads behind each description costs one round
// trip); thread 0 then moves weights ahead of the waits, in queue order, up
// to AMK_LOOKAHEAD instructions past the running one (the schedule's
// pipelining_depth), in one of two ways (AMK_STREAM_MODE):
//   1  bulk L2 prefetches (cp.async.bulk.prefetch.L2) of whole tiles, at
//      most AMK_L2_AHEAD_BYTES ahead of the running instruction; the GEMV
//      then reads its weights from L2;
//   2  bulk copies into a ring of AMK_RING_SLOTS shared-memory slots of
//      AMK_RING_SLOT_BYTES (one mbarrier each); the GEMV reads its weights
//      from the slots, releasing and refilling each once read. Slots are
//      filled and consumed in one order, so a chunk's sequence number gives
//      its slot (seq % slots) and the mbarrier phase ((seq / slots) & 1).
//   3  both (hybrid): a small GEMV tile, whose chunks all fit the ring at
//      once, is copied into the ring whole and read from it with no round
//      trip after its waits (amk_gemv_resident); the others (the mlp and
//      lm_head tiles, which stream at the bandwidth floor from their own
//      loads) get mode 1's L2 prefetches.
// The generated part defines the mode, its geometry and amk_variant_stream.
#ifndef AMK_STREAM_MODE
#define AMK_STREAM_MODE 0
#endif
// Whether quantized GEMV tiles stream (their descriptors name their scales).
#ifndef AMK_STREAM_SCALES
#define AMK_STREAM_SCALES 0
#endif
// Whether the stream prefetches whole tiles to L2, and whether it has a ring.
#define AMK_STREAM_HAS_L2 (AMK_STREAM_MODE == 1 || AMK_STREAM_MODE == 3)
#define AMK_STREAM_HAS_RING (AMK_STREAM_MODE == 2 || AMK_STREAM_MODE == 3)
#ifndef AMK_RING_SLOTS
#define AMK_RING_SLOTS 0
#define AMK_RING_SLOT_BYTES 16384
#endif
#ifndef AMK_STREAM_OFFSET
#define AMK_STREAM_OFFSET 0
#endif
#ifndef AMK_LOOKAHEAD
#define AMK_LOOKAHEAD 2
#endif
#ifndef AMK_L2_AHEAD_BYTES
#define AMK_L2_AHEAD_BYTES 262144
#endif
// L2 mode: a tile of more weight bytes than this (0: no limit) holds the
// stream until it has run. Its own reads stream more than L2 keeps (a 1B
// mlp tile: 780 KiB a block, 100 MB a layer for 50 MB of L2), so what
// were prefetched behind it would be evicted before its turn: the next
// layer's q/k/v tiles, prefetched as the mlp tile began.
#ifndef AMK_L2_HOLD_BYTES
#define AMK_L2_HOLD_BYTES 0
#endif
// AMK_NORM_STAGE_BYTES (0: off, AMK_CUDA_NORM_STAGE=0; codegen sets it to the
// program's largest such weight by default): a norm-fused GEMV
// or mlp tile whose input is not of its norm weight's type (the 1B's f32
// residual against a bf16 weight: amk_gemv_prologue's element path) loads
// the weight after the norm's reduction, a second round trip on the
// layer's chain. The pump copies it into shared memory instead, one bulk
// copy before the tile's waits, while its producers finish.
#ifndef AMK_NORM_STAGE_BYTES
#define AMK_NORM_STAGE_BYTES 0
#endif
// AMK_MLP_HEAD_BYTES (0: off; AMK_CUDA_MLP_HEAD_KB): an mlp tile's first
// gate rows, up to this many bytes, are copied into shared memory (after
// the stream header) by the pump when it reaches the tile, lookahead
// positions ahead, while the layer's attention half leaves the DRAM mostly
// idle; the tile reads them from there and streams only the rest.
#ifndef AMK_MLP_HEAD_BYTES
#define AMK_MLP_HEAD_BYTES 0
#endif
// Where an attention tile's cache rows below pos (written by earlier steps,
// constant in this one) go to L2: 0 nowhere; 1 at the tile's arrival, by
// thread 0 before its waits (amk_attention_prewait); 2 with the weight
// stream, AMK_LOOKAHEAD instructions ahead (L2 mode only, else as 1), so
// that they are there when the tile's waits hold.
#ifndef AMK_KV_PREFETCH
#define AMK_KV_PREFETCH 2
#endif
// The cache span an attention variant reads below pos (the generated part).
__device__ bool amk_variant_kv_span(AmkI I, AmkA A, int pos, const char **base, unsigned *bytes);
#define AMK_RING_MAX_SLOTS 64
// The ring size as a divisor (1 when there is no ring: the code that divides
// by it is then never run).
#define AMK_RING_MOD (AMK_RING_SLOTS > 0 ? AMK_RING_SLOTS : 1)
#define AMK_DESC_MAX 256
#ifndef AMK_STREAM_HEADER_BYTES
#define AMK_STREAM_HEADER_BYTES 12288
#endif

// A variant's weights: `stack` ranges of rows of row_bytes, range s starting
// at row s * nout + n_off of its weight input (row_bytes 0: not streamed);
// ring: in mode 3, whether its body can read a tile from the ring.
struct amk_stream_info_t {
  int row_bytes, stack, nout, ring;
  int norm_bytes; // its norm weight's bytes that the pump stages (amk_norm_stage_bytes)
  int head;       // an mlp variant that reads its first rows from the head buffer
  int scale_row_bytes; // a quantized variant: the bytes of a weight row's scales (input 2)
};
__device__ amk_stream_info_t amk_variant_stream(int variant);

// One queue position's weights, ready for the loader (row_bytes 0: none).
struct AmkStreamDesc {
  const char *weights; // first row of range 0
  long long range_stride; // bytes from one range to the next
  int row_bytes, rows, stack;
  int chunks_per_range; // ring chunks a range (mode 3: 0 for a tile prefetched to L2)
  int prefetched; // L2 mode: bytes prefetched ahead of its turn
  int kv_bytes;   // an attention tile's cache span below pos at `weights` (L2 mode,
                  // AMK_KV_PREFETCH 2; row_bytes 0)
#if AMK_NORM_STAGE_BYTES > 0
  const void *norm; // its norm weight to stage, or null
  int norm_bytes;
#endif
#if AMK_MLP_HEAD_BYTES > 0
  int head_bytes; // an mlp tile's first gate rows copied to the head buffer (0: none)
#endif
#if AMK_STREAM_SCALES
  // A quantized tile's scales (a 16-byte-aligned span over range 0's rows,
  // inside the arena's 256-byte-aligned buffer), prefetched with its
  // weights: a scale that missed L2 would hold up the rows read from it.
  const char *scales;
  int scale_bytes, scale_stride;
#endif
};

struct AmkStream {
  unsigned long long full[AMK_RING_MAX_SLOTS]; // ring mode: one mbarrier per slot
  int issued, consumed; // ring mode: chunks, counted from the start of the queue
  int begin, end;       // the block's queue
  int cur_k;            // the queue position running
  int desc_hi;          // positions below it are described (slot p % AMK_DESC_MAX)
  int load_k, load_chunk; // the loader's next queue position and chunk of it
  long long ahead_bytes;  // L2 mode: bytes prefetched for instructions not yet run
  int hold_k;             // L2 mode: the last position prefetched past AMK_L2_HOLD_BYTES
  int norm_k;             // the last position whose norm weight was staged (or not)
  int head_k;             // the position whose mlp head is in (or on its way to) the buffer
  int ahead_k;            // mode 3: the last position whose prefetch left the budget
  AmkStreamDesc desc[AMK_DESC_MAX];
};
static_assert(sizeof(AmkStream) <= AMK_STREAM_HEADER_BYTES, "the stream header outgrew its room");
static_assert(AMK_LOOKAHEAD < AMK_DESC_MAX / 2, "the lookahead must stay inside the table");

__device__ __forceinline__ AmkStream *amk_stream(float *smem) {
  return (AmkStream *)((char *)smem + AMK_STREAM_OFFSET);
}
__device__ __forceinline__ char *amk_ring_slot(float *smem, int slot) {
  return (char *)smem + AMK_STREAM_OFFSET + AMK_STREAM_HEADER_BYTES +
         (long long)slot * AMK_RING_SLOT_BYTES;
}
__device__ __forceinline__ unsigned amk_smem_addr(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ bool amk_mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned ok;
  asm volatile("{\n\t.reg .pred p;\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok != 0;
}
// One thread: `bytes` from global src into shared dst, completing on the
// mbarrier at shared address bar (its expected bytes raised first).
__device__ __forceinline__ void amk_bulk_copy(void *dst, const void *src, unsigned bytes,
                                              unsigned bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], "
               "[%1], %2, [%3];" ::"r"(amk_smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// A one-buffer stage (the staged norm weight, the mlp head): one mbarrier,
// one copy in flight. The issuing thread: copy number *copies, once the
// one before it has landed (its task waited for it, unless it stopped
// before reading it).
__device__ __forceinline__ void amk_stage_copy(unsigned long long *bar, unsigned *copies,
                                               void *dst, const void *src, unsigned bytes) {
  unsigned b = amk_smem_addr(bar);
  if (*copies > 0)
    while (!amk_mbar_try_wait(b, (*copies - 1) & 1u)) {
    }
  amk_bulk_copy(dst, src, bytes, b);
  ++*copies;
}
// Any thread: the stage's last copy has landed.
__device__ __forceinline__ void amk_stage_landed(unsigned long long *bar, unsigned copies) {
  unsigned b = amk_smem_addr(bar);
  while (!amk_mbar_try_wait(b, (copies - 1) & 1u)) {
  }
}
__device__ __forceinline__ const AmkStreamDesc &amk_desc(const AmkStream *S, int k) {
  return S->desc[k % AMK_DESC_MAX];
}

// All threads: describe queue positions [from, to) into the table (slot
// p % AMK_DESC_MAX; to - from <= AMK_DESC_MAX). Callers synchronise before
// and after.
__device__ void amk_stream_describe(AmkP P, AmkStream *S, int from, int to, int pos) {
  const int *q = (const int *)P.queue;
  const amk_instruction_t *insts = (const amk_instruction_t *)P.instructions;
  const amk_inst_aux_t *aux = (const amk_inst_aux_t *)P.aux;
  for (int k = from + (int)threadIdx.x; k < to; k += AMK_NT) {
    AmkStreamDesc d = {};
    int idx = q[k];
    amk_stream_info_t info = amk_variant_stream(aux[idx].variant);
    const amk_instruction_t &J = insts[idx];
#if AMK_NORM_STAGE_BYTES > 0
    if (info.norm_bytes > 0 && J.n_inputs > 2 &&
        ((unsigned long long)aux[idx].io[2] & 15ull) == 0) {
      d.norm = (const void *)aux[idx].io[2];
      d.norm_bytes = info.norm_bytes;
    }
#endif
    if (info.row_bytes > 0 && J.params.N_tile.i > 0) {
      d.row_bytes = info.row_bytes;
      d.rows = J.params.N_tile.i;
      d.stack = info.stack;
      d.range_stride = (long long)info.nout * info.row_bytes;
      d.weights = (const char *)amk_buf(P, J.inputs[1]).ptr +
                  (long long)J.params.n_off.i * info.row_bytes;
      int rpc = AMK_RING_SLOT_BYTES / info.row_bytes;
      d.chunks_per_range = rpc > 0 ? (d.rows + rpc - 1) / rpc : 0;
      // Mode 3 rings a tile only when its body reads the ring and all of
      // its chunks fit at once (amk_gemv_resident holds them to its end).
      if (AMK_STREAM_MODE == 3 && (!info.ring || d.chunks_per_range * d.stack > AMK_RING_SLOTS ||
                                   d.rows * d.stack > AMK_NT))
        d.chunks_per_range = 0;
#if AMK_MLP_HEAD_BYTES > 0
      int head_rows = AMK_MLP_HEAD_BYTES / info.row_bytes;
      head_rows = head_rows < d.rows ? head_rows : d.rows;
      if (info.head && AMK_STREAM_MODE == 1 && ((unsigned long long)d.weights & 15ull) == 0)
        d.head_bytes = head_rows * info.row_bytes;
#endif
#if AMK_STREAM_SCALES
      // Range r's span is range 0's moved by the stride: 16-byte aligned
      // only when the stride is (one range: any).
      if (info.scale_row_bytes > 0 && J.n_inputs > 2 &&
          (d.stack == 1 || (info.nout * info.scale_row_bytes) % 16 == 0)) {
        unsigned long long lo = (unsigned long long)aux[idx].io[2] +
                                (unsigned long long)J.params.n_off.i * info.scale_row_bytes;
        unsigned long long hi = lo + (unsigned long long)d.rows * info.scale_row_bytes;
        d.scales = (const char *)(lo & ~15ull);
        d.scale_bytes = (int)(((hi + 15ull) & ~15ull) - (lo & ~15ull));
        d.scale_stride = info.nout * info.scale_row_bytes;
      }
#endif
    } else if (AMK_KV_PREFETCH == 2 && AMK_STREAM_HAS_L2) {
      const char *base;
      unsigned bytes;
      if (amk_variant_kv_span(J, aux[idx], pos, &base, &bytes)) {
        d.weights = base;
        d.kv_bytes = (int)bytes;
      }
    }
    S->desc[k % AMK_DESC_MAX] = d;
  }
}

// All threads, at the start of a queue.
__device__ __forceinline__ void amk_stream_begin(AmkP P, float *smem, int begin, int end,
                                                 int pos) {
  if (AMK_STREAM_MODE == 0)
    return;
  AmkStream *S = amk_stream(smem);
  int hi = end - begin < AMK_DESC_MAX ? end : begin + AMK_DESC_MAX;
  if (threadIdx.x == 0) {
    S->issued = S->consumed = 0;
    S->begin = S->load_k = S->cur_k = begin;
    S->end = end;
    S->desc_hi = hi;
    S->load_chunk = 0;
    S->ahead_bytes = 0;
    S->ahead_k = begin - 1;
    S->hold_k = begin - 1;
    S->norm_k = begin - 1;
    S->head_k = begin - 1;
    if (AMK_STREAM_HAS_RING) {
      for (int s = 0; s < AMK_RING_SLOTS; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(amk_smem_addr(&S->full[s]))
                     : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
  }
  amk_stream_describe(P, S, begin, hi, pos);
  __syncthreads();
}
// All threads, at the end of a queue (after a barrier).
__device__ __forceinline__ void amk_stream_end(float *smem) {
  if (!AMK_STREAM_HAS_RING)
    return;
  AmkStream *S = amk_stream(smem);
  if (threadIdx.x == 0)
    for (int s = 0; s < AMK_RING_SLOTS; s++)
      asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(amk_smem_addr(&S->full[s]))
                   : "memory");
}
// All threads, before instruction k: once the loader could reach past the
// described positions, describe [desc_hi, k + AMK_DESC_MAX). That reuses
// the slots of positions below k, which have run (AMK_LOOKAHEAD is far
// below AMK_DESC_MAX).
__device__ __forceinline__ void amk_stream_window(AmkP P, float *smem, int k, int pos) {
  if (AMK_STREAM_MODE == 0)
    return;
  AmkStream *S = amk_stream(smem);
  int hi = S->desc_hi;
  if (hi >= S->end || k + AMK_LOOKAHEAD < hi)
    return;
  int to = S->end - k < AMK_DESC_MAX ? S->end : k + AMK_DESC_MAX;
  __syncthreads();
  amk_stream_describe(P, S, hi, to, pos);
  __syncthreads();
  if (threadIdx.x == 0)
    S->desc_hi = to;
  __syncthreads();
}

// ---- a norm weight staged during the waits ------------------------------------

#if AMK_NORM_STAGE_BYTES > 0
__shared__ __align__(16) unsigned char amk_norm_buf[AMK_NORM_STAGE_BYTES];
__shared__ unsigned long long amk_norm_bar;
__shared__ const void *amk_norm_src;     // the weight staged for the running task, or null
__shared__ unsigned int amk_norm_copies; // copies issued (the mbarrier's phases)
#endif
#if AMK_MLP_HEAD_BYTES > 0
__shared__ unsigned long long amk_head_bar; // the mlp head's copy (AMK_MLP_HEAD_BYTES)
__shared__ unsigned int amk_head_copies;
#endif

template <int PAT, int XDT, int ADT, int K, int M, int GEMM>
__device__ constexpr unsigned amk_norm_stage_bytes() {
  constexpr unsigned long long bytes =
      (unsigned long long)K * (ADT == AMK_ABI_DTYPE_F32 ? 4 : 2);
  return PAT == AMK_ABI_PATTERN_NORM && M == 1 && !GEMM && XDT != ADT &&
                 (ADT == AMK_ABI_DTYPE_F32 || ADT == AMK_ABI_DTYPE_BF16 ||
                  ADT == AMK_ABI_DTYPE_F16) &&
                 bytes % 16 == 0 && bytes <= AMK_NORM_STAGE_BYTES
             ? (unsigned)bytes
             : 0u;
}

// Thread 0, once at the kernel's start.
__device__ __forceinline__ void amk_norm_stage_init() {
#if AMK_NORM_STAGE_BYTES > 0
  amk_norm_src = nullptr;
  amk_norm_copies = 0;
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(amk_smem_addr(&amk_norm_bar))
               : "memory");
#endif
#if AMK_MLP_HEAD_BYTES > 0
  amk_head_copies = 0;
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(amk_smem_addr(&amk_head_bar))
               : "memory");
#endif
#if AMK_NORM_STAGE_BYTES > 0 || AMK_MLP_HEAD_BYTES > 0
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// The pump thread, before instruction k's waits: its norm weight into
// amk_norm_buf.
__device__ __forceinline__ void amk_norm_stage_issue(AmkStream *S, int k) {
#if AMK_NORM_STAGE_BYTES > 0
  const AmkStreamDesc &d = amk_desc(S, k);
  if (d.norm)
    amk_stage_copy(&amk_norm_bar, &amk_norm_copies, amk_norm_buf, d.norm, d.norm_bytes);
  amk_norm_src = d.norm;
#else
  (void)S;
  (void)k;
#endif
}

// All threads, in a norm prologue: whether the pump staged the running
// task's norm weight g (then amk_norm_landed gives the copy).
__device__ __forceinline__ bool amk_norm_is_staged(const void *g) {
#if AMK_NORM_STAGE_BYTES > 0
  return g != nullptr && g == amk_norm_src;
#else
  (void)g;
  return false;
#endif
}
// The staged norm weight, once it has landed.
__device__ __forceinline__ const void *amk_norm_landed() {
#if AMK_NORM_STAGE_BYTES > 0
  amk_stage_landed(&amk_norm_bar, amk_norm_copies);
  return amk_norm_buf;
#else
  return nullptr;
#endif
}

// ---- an mlp tile's head in shared memory (AMK_MLP_HEAD_BYTES) -------------------

__device__ __forceinline__ char *amk_mlp_head(float *smem) {
  return (char *)smem + AMK_STREAM_OFFSET + AMK_STREAM_HEADER_BYTES;
}

// The pump, reaching position p while k runs: p's head into the buffer
// when the buffer's last tile has run (else p reads all its rows from
// global memory).
__device__ __forceinline__ void amk_mlp_head_issue(AmkStream *S, float *smem, AmkStreamDesc &d,
                                                   int p, int k) {
#if AMK_MLP_HEAD_BYTES > 0
  if (d.head_bytes <= 0 || S->head_k >= k)
    return;
  amk_stage_copy(&amk_head_bar, &amk_head_copies, amk_mlp_head(smem), d.weights, d.head_bytes);
  S->head_k = p;
#else
  (void)S;
  (void)smem;
  (void)d;
  (void)p;
  (void)k;
#endif
}

// All threads, in an mlp tile: its head's rows in the buffer (0: none),
// once they have landed.
__device__ __forceinline__ int amk_mlp_head_rows(float *smem, int row_bytes) {
#if AMK_MLP_HEAD_BYTES > 0
  AmkStream *S = amk_stream(smem);
  if (S->head_k != S->cur_k)
    return 0;
  amk_stage_landed(&amk_head_bar, amk_head_copies);
  return amk_desc(S, S->cur_k).head_bytes / row_bytes;
#else
  (void)smem;
  (void)row_bytes;
  return 0;
#endif
}

// The thread that moves weights ahead: lane 0 of warp 1 by default
// (AMK_CUDA_PUMP_WARP picks the warp). Thread 0 polls the next task's
// counters: on another warp the pump's chain of shared-memory reads and
// bulk prefetches overlaps that poll instead of coming before it (H100,
// nineteenth session: SmolLM2 -3%, the 1B at 1024 -0.5%, docs/Performance.md).
#ifndef AMK_PUMP_THREAD
#define AMK_PUMP_THREAD 32
#endif
static_assert(AMK_PUMP_THREAD >= 0 && AMK_PUMP_THREAD < AMK_NT && AMK_PUMP_THREAD % 32 == 0,
              "the pump is lane 0 of one of the block's warps");

// One L2-mode position's weights (a prefix of each range within the budget)
// or an attention tile's cache span, prefetched; k is the running position.
__device__ __forceinline__ void amk_stream_l2(AmkStream *S, AmkStreamDesc &d, int k) {
  if (d.row_bytes > 0) {
    // A prefix of each range, so that what is ahead stays within the
    // budget (a tile larger than L2 would only evict itself).
    long long range_bytes = (long long)d.rows * d.row_bytes;
    long long room = (AMK_L2_AHEAD_BYTES - S->ahead_bytes) / d.stack;
    long long bytes = range_bytes < room ? range_bytes : room & ~15ll;
    if (bytes > 0)
      for (int r = 0; r < d.stack; r++)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(
                         d.weights + r * d.range_stride),
                     "r"((unsigned)bytes)
                     : "memory");
#if AMK_STREAM_SCALES
    // Its scales whole, with any prefix of its rows (they are 1/64 of an
    // int8 row at groups of 128).
    if (bytes > 0 && d.scale_bytes > 0) {
      for (int r = 0; r < d.stack; r++)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(
                         d.scales + (long long)r * d.scale_stride),
                     "r"((unsigned)d.scale_bytes)
                     : "memory");
      bytes += d.scale_bytes;
    }
#endif
    d.prefetched = S->load_k > k ? (int)(bytes * d.stack) : 0;
    S->ahead_bytes += d.prefetched;
  } else if (d.kv_bytes > 0) {
    // Outside the budget: a tile's cache span is small beside the weights,
    // and the tile reads all of it.
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(d.weights),
                 "r"((unsigned)d.kv_bytes)
                 : "memory");
  }
}
// The next ring chunk of the loader's position (a free slot is the
// caller's to check); advances the loader past the position after its last.
__device__ __forceinline__ void amk_stream_chunk(AmkStream *S, float *smem,
                                                 const AmkStreamDesc &d) {
  int n = d.chunks_per_range * d.stack;
  int rpc = AMK_RING_SLOT_BYTES / d.row_bytes;
  int c = S->load_chunk;
  int range = c / d.chunks_per_range;
  int r0 = (c - range * d.chunks_per_range) * rpc;
  int rows = d.rows - r0 < rpc ? d.rows - r0 : rpc;
  const char *src = d.weights + range * d.range_stride + (long long)r0 * d.row_bytes;
  unsigned bytes = (unsigned)(rows * d.row_bytes);
  int slot = S->issued % AMK_RING_MOD;
  amk_bulk_copy(amk_ring_slot(smem, slot), src, bytes, amk_smem_addr(&S->full[slot]));
  S->issued++;
  if (++S->load_chunk == n) {
    S->load_k++;
    S->load_chunk = 0;
  }
}

// AMK_PUMP_THREAD, before waiting on instruction k's counters (and, in ring
// mode, after each chunk it consumes): move weights ahead.
__device__ void amk_stream_pump(float *smem, int k) {
  AmkStream *S = amk_stream(smem);
  if (AMK_NORM_STAGE_BYTES > 0 && S->norm_k != k) {
    S->norm_k = k;
    amk_norm_stage_issue(S, k);
  }
  if (AMK_STREAM_MODE == 1) {
    // Instruction k's prefetched bytes no longer count as ahead once it runs.
    if (k < S->load_k)
      S->ahead_bytes -= amk_desc(S, k).prefetched;
    while (S->load_k < S->end && S->load_k <= k + AMK_LOOKAHEAD &&
           S->ahead_bytes < AMK_L2_AHEAD_BYTES) {
      // Nothing past a large tile until it has run (AMK_L2_HOLD_BYTES).
      if (AMK_L2_HOLD_BYTES > 0 && S->hold_k >= k)
        break;
      AmkStreamDesc &d = S->desc[S->load_k % AMK_DESC_MAX];
      amk_mlp_head_issue(S, smem, d, S->load_k, k);
      amk_stream_l2(S, d, k);
      if (AMK_L2_HOLD_BYTES > 0 &&
          (long long)d.rows * d.row_bytes * d.stack > (long long)AMK_L2_HOLD_BYTES)
        S->hold_k = S->load_k;
      S->load_k++;
    }
  } else if (AMK_STREAM_MODE == 2) {
    while (S->issued - S->consumed < AMK_RING_SLOTS && S->load_k < S->end &&
           S->load_k <= k + AMK_LOOKAHEAD) {
      const AmkStreamDesc &d = amk_desc(S, S->load_k);
      if (d.row_bytes == 0 || d.chunks_per_range * d.stack == 0) {
        S->load_k++;
        S->load_chunk = 0;
        continue;
      }
      amk_stream_chunk(S, smem, d);
    }
  } else if (AMK_STREAM_MODE == 3) {
    // Instruction k's prefetched bytes leave the budget once it runs (once:
    // the ring's readers may pump again on the same position).
    if (k > S->ahead_k && k < S->load_k) {
      S->ahead_bytes -= amk_desc(S, k).prefetched;
      S->ahead_k = k;
    }
    // In queue order: a ringed tile waits for free slots, an L2 one for
    // room in the budget.
    while (S->load_k < S->end && S->load_k <= k + AMK_LOOKAHEAD) {
      AmkStreamDesc &d = S->desc[S->load_k % AMK_DESC_MAX];
      if (d.row_bytes > 0 && d.chunks_per_range > 0) {
        if (S->issued - S->consumed >= AMK_RING_SLOTS)
          break;
        amk_stream_chunk(S, smem, d);
      } else {
        if (d.row_bytes > 0 && S->ahead_bytes >= AMK_L2_AHEAD_BYTES)
          break;
        amk_stream_l2(S, d, k);
        S->load_k++;
      }
    }
  }
}

// ---- block reductions ----------------------------------------------------------

__device__ __forceinline__ float amk_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float amk_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block; every thread gets it. red: AMK_NWARPS floats.
__device__ __forceinline__ float amk_block_sum(float v, float *red) {
  v = amk_warp_sum(v);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  float s = 0.0f;
#pragma unroll
  for (int w = 0; w < AMK_NWARPS; w++)
    s += red[w];
  return s;
}
__device__ __forceinline__ float amk_block_max(float v, float *red) {
  v = amk_warp_max(v);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  float s = red[0];
#pragma unroll
  for (int w = 1; w < AMK_NWARPS; w++)
    s = fmaxf(s, red[w]);
  return s;
}

// The step's params (positions follow the decode step, docs/Runtime.md).
struct AmkWindow {
  int kv_start, kv_len, pos;
};
__device__ __forceinline__ AmkWindow amk_window(AmkI I, AmkA A, int pos) {
  AmkWindow w;
  w.kv_start = I.params.kv_start.i;
  w.kv_len = I.params.kv_len.i;
  w.pos = I.params.pos.i;
  if (A.follow == AMK_FOLLOW_KV_ROW) {
    w.pos = pos;
  } else if (A.follow == AMK_FOLLOW_WINDOW) {
    w.kv_start = 0;
    w.kv_len = pos + AMK_STEP_ROWS;
    w.pos = pos;
  } else if (A.follow == AMK_FOLLOW_PARTITION) {
    // Partition p of P covers [p*c, min(W, (p+1)*c)), W = pos+rows,
    // c = ceil(W/P); a partial no combine reads keeps kv_start and its
    // compiled span (runtime/plan.c, amk_plan_params_at).
    long long window = (long long)pos + AMK_STEP_ROWS, start, end;
    if (A.part_count > 0) {
      long long chunk = (window + A.part_count - 1) / A.part_count;
      start = (long long)A.part_index * chunk;
      if (start > window)
        start = window;
      end = start + chunk < window ? start + chunk : window;
    } else {
      start = w.kv_start;
      end = start + A.span < window ? start + A.span : window;
    }
    w.kv_start = (int)start;
    w.kv_len = (int)(end > start ? end - start : 0);
    w.pos = pos;
  }
  return w;
}

// Element i of a staged (shared-memory) float buffer of dtype DT.
template <int DT> __device__ __forceinline__ float amk_ld_shared(const void *p, long long i) {
  if constexpr (DT == AMK_ABI_DTYPE_F32)
    return ((const float *)p)[i];
  else if constexpr (DT == AMK_ABI_DTYPE_F16)
    return amk_h2f(((const unsigned short *)p)[i]);
  else
    return amk_bf2f(((const unsigned short *)p)[i]);
}

// ---- GEMV tiles (plain and the fused patterns 1-4) -----------------------------

// The 16 bytes of a row as 16/ESZ floats.
template <int DT> __device__ __forceinline__ void amk_unpack16(uint4 q, float *f) {
  unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if constexpr (DT == AMK_ABI_DTYPE_F32) {
      f[k] = __uint_as_float(w[k]);
    } else if constexpr (DT == AMK_ABI_DTYPE_BF16) {
      f[2 * k] = __uint_as_float(w[k] << 16);
      f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    } else {
      f[2 * k] = amk_h2f((unsigned short)(w[k] & 0xffffu));
      f[2 * k + 1] = amk_h2f((unsigned short)(w[k] >> 16));
    }
  }
}

template <int DT> struct AmkVec {
  static constexpr int ESZ = (DT == AMK_ABI_DTYPE_F32) ? 4 : 2;
  static constexpr int VE = 16 / ESZ;
  static constexpr bool OK =
      DT == AMK_ABI_DTYPE_F32 || DT == AMK_ABI_DTYPE_BF16 || DT == AMK_ABI_DTYPE_F16;
};


// 16-byte weight loads that do not allocate in L1 (streamed once).
__device__ __forceinline__ uint4 amk_ldw16(const void *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
template <int WDT> __device__ __forceinline__ float amk_dot16(uint4 q, const float *x) {
  if constexpr (WDT == AMK_ABI_DTYPE_F32) {
    return __uint_as_float(q.x) * x[0] + __uint_as_float(q.y) * x[1] +
           __uint_as_float(q.z) * x[2] + __uint_as_float(q.w) * x[3];
  } else {
    unsigned int w[4] = {q.x, q.y, q.z, q.w};
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      float lo, hi;
      if constexpr (WDT == AMK_ABI_DTYPE_BF16) {
        lo = __uint_as_float(w[k] << 16);
        hi = __uint_as_float(w[k] & 0xffff0000u);
      } else {
        lo = amk_h2f((unsigned short)(w[k] & 0xffffu));
        hi = amk_h2f((unsigned short)(w[k] >> 16));
      }
      s += lo * x[2 * k] + hi * x[2 * k + 1];
    }
    return s;
  }
}

// 16 bytes of weights (in shared memory) times the matching fp32 inputs,
// read as float4 (xs is 16-byte aligned).
template <int WDT> __device__ __forceinline__ float amk_dot16_smem(uint4 q, const float *x) {
  float4 a = *(const float4 *)x;
  if constexpr (WDT == AMK_ABI_DTYPE_F32) {
    return __uint_as_float(q.x) * a.x + __uint_as_float(q.y) * a.y +
           __uint_as_float(q.z) * a.z + __uint_as_float(q.w) * a.w;
  } else {
    float4 b = *(const float4 *)(x + 4);
    float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    return amk_dot16<WDT>(q, xv);
  }
}

// 16 bytes of weights times the matching fp32 inputs of xs (shared memory):
// with AMK_GEMV_XS_VEC (default) the inputs are read as float4 (xs is
// 16-byte aligned), else one float at a time (H100: SmolLM2 2-3% slower,
// the 1B and 8B shapes the same within noise).
#ifndef AMK_GEMV_XS_VEC
#define AMK_GEMV_XS_VEC 1
#endif
// GEMV inputs staged with a 16-byte gap after each 16-byte weight piece's
// inputs (amk_xpad; AMK_CUDA_GEMV_XS_PAD=0 turns it off). H100, one call:
// 1B 1.2599 -> 1.2581 ms, 8B 6.2589 -> 6.2344, SmolLM2 0.8614 -> 0.8540.
#ifndef AMK_GEMV_XS_PAD
#define AMK_GEMV_XS_PAD 1
#endif
template <int WDT> __device__ __forceinline__ float amk_dotx(uint4 q, const float *x) {
  if constexpr (AMK_GEMV_XS_VEC != 0)
    return amk_dot16_smem<WDT>(q, x);
  else
    return amk_dot16<WDT>(q, x);
}

// The 16-byte weight loads a lane keeps in flight in a row dot, of the PER
// it makes (16 measured no faster on an H100, for rows of 4 to 28 KiB).
__device__ constexpr int amk_gemv_unroll(int per) {
  return per >= 8 ? 8 : per >= 4 ? 4 : per >= 2 ? 2 : 1;
}
// A row of whole warps' pieces (NV a multiple of 32) leaves every lane the
// same PER % U pieces after its batches of U: those go in one more batch,
// not one round trip a piece (a SmolLM2 down row, 6 pieces a lane, took
// three). Other rows keep the piece-at-a-time loop (guarded last batches
// made ptxas spill in Qwen2.5's o_proj tiles).
__device__ constexpr int amk_gemv_tail(int nv, int u) {
  return u > 1 && nv % 32 == 0 ? (nv / 32) % u : 0;
}

// N pieces of each of G rows from piece v of every row, all loads issued
// before the first sum.
template <int WDT, int XS, int G, int N, bool SHARED = false>
__device__ __forceinline__ void amk_rows_batch(const char *const *base, int v, const float *xs,
                                               float *acc) {
  uint4 q[G][N];
#pragma unroll
  for (int g = 0; g < G; g++)
#pragma unroll
    for (int u = 0; u < N; u++)
      q[g][u] = SHARED ? *(const uint4 *)(base[g] + (long long)(v + 32 * u) * 16)
                       : amk_ldw16(base[g] + (long long)(v + 32 * u) * 16);
#pragma unroll
  for (int g = 0; g < G; g++)
#pragma unroll
    for (int u = 0; u < N; u++)
      acc[g] += amk_dotx<WDT>(q[g][u], xs + (v + 32 * u) * XS);
}

// One warp's dots of G weight rows with xs, all G rows' loads in flight at
// once (U 16-byte loads per lane a row): a tile that streams much from one
// SM needs more bytes in flight than one row (amk_row_dot: 4 KiB a warp for
// U = 8) keeps. Dtypes and K as amk_row_dot2_ok asks, without its limit on
// the row length.
template <int WDT, int K> __device__ constexpr bool amk_rows_dot_ok() {
  constexpr int ESZ = (WDT == AMK_ABI_DTYPE_F32) ? 4 : 2;
  return K % (16 / ESZ) == 0 &&
         (WDT == AMK_ABI_DTYPE_F32 || WDT == AMK_ABI_DTYPE_BF16 || WDT == AMK_ABI_DTYPE_F16);
}
// (SHARED: W is in shared memory.)
template <int WDT, int K, int XC, int G, bool SHARED = false>
__device__ __forceinline__ void amk_rows_dot(const void *W, const long long *rows,
                                             const float *xs, float *out) {
  int lane = threadIdx.x & 31;
  constexpr int ESZ = (WDT == AMK_ABI_DTYPE_F32) ? 4 : 2;
  constexpr int VEC = 16 / ESZ;
  constexpr int NV = K / VEC;
  constexpr int U = amk_gemv_unroll((NV + 31) / 32);
  constexpr int XS = VEC + (XC ? 4 : 0);
  const char *base[G];
  float acc[G];
#pragma unroll
  for (int g = 0; g < G; g++) {
    base[g] = (const char *)W + rows[g] * (long long)K * ESZ;
    acc[g] = 0.0f;
  }
  int v = lane;
  for (; v + 32 * (U - 1) < NV; v += 32 * U)
    amk_rows_batch<WDT, XS, G, U, SHARED>(base, v, xs, acc);
  constexpr int UT = amk_gemv_tail(NV, U);
  if constexpr (UT > 0) {
    amk_rows_batch<WDT, XS, G, UT, SHARED>(base, v, xs, acc);
  } else {
    for (; v < NV; v += 32)
#pragma unroll
      for (int g = 0; g < G; g++)
        acc[g] += amk_dotx<WDT>(SHARED ? *(const uint4 *)(base[g] + (long long)v * 16)
                                       : amk_ldw16(base[g] + (long long)v * 16),
                                xs + v * XS);
  }
#pragma unroll
  for (int g = 0; g < G; g++)
    out[g] = amk_warp_sum(acc[g]);
}

// One warp's dot of weight row `row` (K elements) with xs (fp32 in smem).
template <int WDT, int K, int XC = 0>
__device__ __forceinline__ float amk_row_dot(const void *W, long long row, const float *xs) {
  if constexpr (amk_rows_dot_ok<WDT, K>()) {
    float sum;
    amk_rows_dot<WDT, K, XC, 1>(W, &row, xs, &sum);
    return sum;
  } else {
    float acc = 0.0f;
    for (int k = threadIdx.x & 31; k < K; k += 32)
      acc += amk_ld<WDT>(W, row * (long long)K + k) * xs[k];
    return amk_warp_sum(acc);
  }
}

// What one output element of a GEMV tile adds to its dot product: its bias
// and the residual of the fused pattern. Loaded before the dot (by the lane
// that stores), so that their round trip overlaps the weights'.
struct AmkGemvExtra {
  float bias, residual;
};
template <int PAT, int ADT, int NOUT, int STACK, int BIAS>
__device__ __forceinline__ AmkGemvExtra amk_gemv_extra(const void *aux, int m, long long wrow,
                                                       long long col) {
  AmkGemvExtra e = {0.0f, 0.0f};
  if constexpr (BIAS)
    e.bias = amk_ld<ADT>(aux, wrow);
  if constexpr (PAT == AMK_ABI_PATTERN_RESIDUAL || PAT == AMK_ABI_PATTERN_SILU_RESIDUAL)
    e.residual = amk_ld<ADT>(aux, (STACK > 1) ? wrow : (long long)m * NOUT + col);
  return e;
}
// One output element of a GEMV tile: bias, the residual of the fused
// pattern, the store. wrow: the weight row; col: the output column.
template <int PAT, int ODT, int NOUT, int STACK, int BIAS, int TW = 0>
__device__ __forceinline__ void amk_gemv_store(void *out, AmkGemvExtra e, float acc, int m,
                                               long long wrow, long long col) {
  long long o = (STACK > 1) ? wrow : (long long)m * NOUT + col;
  if constexpr (BIAS)
    acc += e.bias;
  if constexpr (PAT == AMK_ABI_PATTERN_RESIDUAL || PAT == AMK_ABI_PATTERN_SILU_RESIDUAL)
    acc = amk_round<ODT>(acc) + e.residual;
  amk_st<ODT>(out, o, acc);
  if constexpr (TW != 0)
    amk_tag_put(o, amk_round<ODT>(acc));
}

// As amk_gemv_store, with the tile's residual or bias value pre[i] staged in
// shared memory (M == 1).
template <int PAT, int ODT, int NOUT, int STACK, int BIAS, int TW = 0>
__device__ __forceinline__ void amk_gemv_store_pre(void *out, const float *pre, float acc, int i,
                                                   long long wrow, long long col) {
  long long o = (STACK > 1) ? wrow : col;
  if constexpr (BIAS)
    acc += pre[i];
  if constexpr (PAT == AMK_ABI_PATTERN_RESIDUAL || PAT == AMK_ABI_PATTERN_SILU_RESIDUAL)
    acc = amk_round<ODT>(acc) + pre[i];
  amk_st<ODT>(out, o, acc);
  if constexpr (TW != 0)
    amk_tag_put(o, amk_round<ODT>(acc));
}

// ---- small decode GEMV tiles on the tensor cores ----------------------------------
//
// A tile of a few dozen rows is not bound by its bytes but by its dots: on
// the CUDA cores a 1B q/k/v tile (24 rows of 2048) took about 2 us of
// multiply-adds with its weights already in shared memory (8 warps an SM
// hide little latency; H100, twenty-first session). Here each warp takes a
// share of K and every row of the tile through mma.sync m16n8k16: rows g
// and g + 8 of an m-tile of 16 (g = lane / 4) are A's rows, and lane
// g * 4 + t loads 16 bytes of each, the columns [32 s + 8 t, 32 s + 8 t + 8)
// of segment s; as k is only a label, A's k = 2t, 2t + 1, 2t + 8, 2t + 9 of
// one mma are the first four of them and of the next mma the last four,
// and B holds the same columns of x in every one of its 8 columns (the
// input staged exact in WDT: rounded to it by the prologue, or loaded from
// it). D's column 0 is then each row's dot over the warp's segments; the
// warps' sums meet in shared memory and thread i stores row i. The products
// are exact in fp32 and summed in fp32, in another order than the CUDA-core
// path (a difference of fp32 rounding). AMK_GEMV_MMA 0 turns it off.
#ifndef AMK_GEMV_MMA
#define AMK_GEMV_MMA 0
#endif
#ifndef AMK_GEMV_MMA_MAX_ROWS
#define AMK_GEMV_MMA_MAX_ROWS 64
#endif
template <int WDT, int K> __device__ constexpr bool amk_gemv_mma_ok() {
  return AMK_GEMV_MMA != 0 && (WDT == AMK_ABI_DTYPE_BF16 || WDT == AMK_ABI_DTYPE_F16) &&
         K % 32 == 0 && AMK_GEMV_MMA_MAX_ROWS <= AMK_NT;
}
template <int WDT> __device__ __forceinline__ unsigned amk_pack16x2(float lo, float hi) {
  unsigned r;
  if constexpr (WDT == AMK_ABI_DTYPE_BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// c += a * b for one 16 x 8 x 16 product (DT: the inputs' dtype).
template <int DT>
__device__ __forceinline__ void amk_mma16816(float *c, const unsigned *a, const unsigned *b) {
  if constexpr (DT == AMK_ABI_DTYPE_BF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Rows [0, STACK * n_tile) of a tile (at most AMK_GEMV_MMA_MAX_ROWS), x in
// xs as amk_gemv stages it (XC: amk_xpad's gaps), the warps' sums in part
// (rows x AMK_NWARPS floats); after the barrier that ends the staging.
template <int PAT, int WDT, int ODT, int ADT, int K, int NOUT, int STACK, int BIAS, int XC, int TW>
__device__ __forceinline__ void amk_gemv_rows_mma(const void *W, const void *aux, void *out,
                                                  const float *xs, float *part, int n_off,
                                                  int n_tile) {
  constexpr int NSEG = K / 32, XS = 8 + (XC ? 4 : 0), SB = 8; // SB segments' loads in flight
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int rows = STACK * n_tile;
  auto wrow_of = [&](int i) {
    int s = i / n_tile;
    return (long long)s * NOUT + n_off + (i - s * n_tile);
  };
  // Row threadIdx.x's bias or residual, loaded before the weights.
  AmkGemvExtra mine = {0.0f, 0.0f};
  int me = threadIdx.x;
  if (me < rows) {
    int s = me / n_tile;
    mine = amk_gemv_extra<PAT, ADT, NOUT, STACK, BIAS>(aux, 0, wrow_of(me), n_off + (me - s * n_tile));
  }
  for (int m0 = 0; m0 < rows; m0 += 16) {
    int ra = m0 + g, rb = ra + 8;
    const char *pa = ra < rows ? (const char *)W + wrow_of(ra) * (K * 2) + t * 16 : nullptr;
    const char *pb = rb < rows ? (const char *)W + wrow_of(rb) * (K * 2) + t * 16 : nullptr;
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = warp; s0 < NSEG; s0 += AMK_NWARPS * SB) {
      uint4 qa[SB], qb[SB];
#pragma unroll
      for (int u = 0; u < SB; u++) {
        int sg = s0 + u * AMK_NWARPS;
        qa[u] = pa && sg < NSEG ? amk_ldw16(pa + sg * 64) : make_uint4(0u, 0u, 0u, 0u);
        qb[u] = pb && sg < NSEG ? amk_ldw16(pb + sg * 64) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int u = 0; u < SB; u++) {
        int sg = s0 + u * AMK_NWARPS;
        if (sg < NSEG) { // warp-uniform
          const float *xp = xs + (sg * 4 + t) * XS;
          float4 x0 = *(const float4 *)xp, x1 = *(const float4 *)(xp + 4);
          unsigned a1[4] = {qa[u].x, qb[u].x, qa[u].y, qb[u].y};
          unsigned b1[2] = {amk_pack16x2<WDT>(x0.x, x0.y), amk_pack16x2<WDT>(x0.z, x0.w)};
          amk_mma16816<WDT>(d, a1, b1);
          unsigned a2[4] = {qa[u].z, qb[u].z, qa[u].w, qb[u].w};
          unsigned b2[2] = {amk_pack16x2<WDT>(x1.x, x1.y), amk_pack16x2<WDT>(x1.z, x1.w)};
          amk_mma16816<WDT>(d, a2, b2);
        }
      }
    }
    if (t == 0) {
      if (ra < rows)
        part[ra * AMK_NWARPS + warp] = d[0];
      if (rb < rows)
        part[rb * AMK_NWARPS + warp] = d[2];
    }
  }
  __syncthreads();
  if (me < rows) {
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < AMK_NWARPS; w++)
      acc += part[me * AMK_NWARPS + w];
    int s = me / n_tile;
    amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS, TW>(out, mine, acc, 0, wrow_of(me),
                                                    n_off + (me - s * n_tile));
  }
}

// All threads: the residual (or bias) value of each of a tile's STACK x
// n_tile rows into pre (one row of input, M == 1), for amk_gemv_store_pre.
// Callers synchronise before reading them.
template <int PAT, int ADT, int NOUT, int STACK, int BIAS>
__device__ __forceinline__ void amk_gemv_stage_pre(const void *aux, float *pre, int n_off,
                                                   int n_tile) {
  constexpr bool RES = PAT == AMK_ABI_PATTERN_RESIDUAL || PAT == AMK_ABI_PATTERN_SILU_RESIDUAL;
  if constexpr (RES || BIAS) {
    for (int i = threadIdx.x; i < STACK * n_tile; i += AMK_NT) {
      int s = i / n_tile, j = i - s * n_tile;
      long long wrow = (long long)s * NOUT + n_off + j;
      long long o = (STACK > 1) ? wrow : (long long)n_off + j;
      float v = 0.0f;
      if constexpr (BIAS)
        v += amk_ld<ADT>(aux, wrow);
      if constexpr (RES)
        v = amk_ld<ADT>(aux, o); // BIAS and RES never come together
      pre[i] = v;
    }
  }
}

// Whether a GEMV variant takes its weights from the ring: one input row
// (decode), rows of whole 16-byte vectors that fit a slot.
template <int WDT, int K, int M, int GEMM> __device__ constexpr bool amk_gemv_streams() {
  constexpr long long esz = (WDT == AMK_ABI_DTYPE_F32) ? 4 : 2;
  return AMK_STREAM_MODE != 0 && !GEMM && M == 1 &&
         (WDT == AMK_ABI_DTYPE_F32 || WDT == AMK_ABI_DTYPE_BF16 || WDT == AMK_ABI_DTYPE_F16) &&
         (K * esz) % 16 == 0 && (AMK_STREAM_HAS_L2 || K * esz <= AMK_RING_SLOT_BYTES);
}
// Mode 3: whether a GEMV variant reads ringed tiles (amk_gemv_resident):
// 16-bit rows of whole 16-byte pieces that fit a slot, split over the
// warps as AmkResident says.
template <int WDT, int K> struct AmkResident {
  static constexpr int ROWB = K * 2, VEC = 8, NV = ROWB / 16;
  // Warps a row (WPR) and pieces a lane (P): at most 4 pieces, 32 inputs,
  // in registers; RS rows at once.
  static constexpr int WPR = NV <= 128 ? 1 : NV <= 256 ? 2 : NV <= 512 ? 4 : 8;
  static constexpr int P = (NV + 32 * WPR - 1) / (32 * WPR);
  static constexpr int RS = AMK_NWARPS / WPR;
};
template <int WDT, int K, int M, int GEMM> __device__ constexpr bool amk_gemv_resident_ok() {
  return AMK_STREAM_MODE == 3 && amk_gemv_streams<WDT, K, M, GEMM>() &&
         (WDT == AMK_ABI_DTYPE_BF16 || WDT == AMK_ABI_DTYPE_F16) && K * 2 <= AMK_RING_SLOT_BYTES &&
         AmkResident<WDT, K>::WPR <= AMK_NWARPS && AMK_NWARPS % AmkResident<WDT, K>::WPR == 0;
}
// The loader's view of a GEMV variant (amk_variant_stream in the generated
// part returns this for each GEMV variant).
template <int PAT, int XDT, int WDT, int ODT, int ADT, int K, int NOUT, int STACK, int M,
          int BIAS, int GEMM, int TAGGED = 0>
__device__ amk_stream_info_t amk_gemv_stream() {
  amk_stream_info_t info = {0, 0, 0, 0};
  if constexpr (amk_gemv_streams<WDT, K, M, GEMM>()) {
    info.row_bytes = K * ((WDT == AMK_ABI_DTYPE_F32) ? 4 : 2);
    info.stack = STACK;
    info.nout = NOUT;
    info.ring = amk_gemv_resident_ok<WDT, K, M, GEMM>() ? 1 : 0;
  }
  info.norm_bytes = (int)amk_norm_stage_bytes<PAT, XDT, ADT, K, M, GEMM>();
  return info;
}

// Mode 3: a ringed tile's weights, in the ring since before its waits (the
// pump copied every chunk ahead: amk_stream_describe rings only tiles whose
// chunks all fit and whose rows are at most one a thread), read with no
// round trip to L2. Each lane keeps the inputs of its P pieces of a row in
// registers, so a row costs only its weight pieces from shared memory; WPR
// warps share a row, a warp takes RB of its rows at once (independent sums,
// their shuffles interleaved), the warps' sums meet in shared memory after
// `red`, and thread i stores row i (amk_gemv_store) with its residual or
// bias value, loaded before the rows. One barrier; the tile's chunks are
// released after it (the next task's pump refills them). Each lane sums its
// pieces in order, so the result is the direct path's up to fp32 rounding.
template <int PAT, int WDT, int ODT, int ADT, int K, int NOUT, int STACK, int BIAS, int XC, int TW>
__device__ __forceinline__ void amk_gemv_resident(const void *aux, void *out, int n_off,
                                                  int n_tile, const float *xs, float *red,
                                                  float *smem) {
  using R = AmkResident<WDT, K>;
  constexpr int XS = R::VEC + (XC ? 4 : 0);
  constexpr int RPC = AMK_RING_SLOT_BYTES / R::ROWB;
  constexpr int RB = 4;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int sub = warp % R::WPR, stream = warp / R::WPR;
  AmkStream *S = amk_stream(smem);
  int base = S->consumed; // moved only after this tile's barrier
  int cpr = (n_tile + RPC - 1) / RPC, rows = STACK * n_tile, nch = cpr * STACK;
  // Row threadIdx.x's residual or bias value, loaded before the rows.
  AmkGemvExtra mine = {0.0f, 0.0f};
  if (threadIdx.x < rows) {
    int s = threadIdx.x / n_tile, j = threadIdx.x - s * n_tile;
    mine = amk_gemv_extra<PAT, ADT, NOUT, STACK, BIAS>(aux, 0, (long long)s * NOUT + n_off + j,
                                                       n_off + j);
  }
  float *part = red + AMK_NWARPS; // rows x WPR
  float x[R::P][R::VEC];
#pragma unroll
  for (int u = 0; u < R::P; u++) {
    int v = sub * 32 + lane + u * 32 * R::WPR;
#pragma unroll
    for (int e = 0; e < R::VEC; e += 4) {
      float4 a = v < R::NV ? *(const float4 *)(xs + v * XS + e) : make_float4(0.f, 0.f, 0.f, 0.f);
      x[u][e] = a.x;
      x[u][e + 1] = a.y;
      x[u][e + 2] = a.z;
      x[u][e + 3] = a.w;
    }
  }
  // Every chunk has landed (issued before the waits), seen by every thread
  // (one lane a warp asking, then __syncwarp, was 0.3-0.5 us slower a tile).
  for (int c = 0; c < nch; c++) {
    int seq = base + c;
    while (!amk_mbar_try_wait(amk_smem_addr(&S->full[seq % AMK_RING_MOD]),
                              (unsigned)(seq / AMK_RING_MOD) & 1u)) {
    }
  }
  for (int r0 = stream; r0 < rows; r0 += R::RS * RB) {
    float sum[RB];
#pragma unroll
    for (int b = 0; b < RB; b++) {
      int r = r0 + b * R::RS;
      float a[R::P];
#pragma unroll
      for (int u = 0; u < R::P; u++)
        a[u] = 0.0f;
      if (r < rows) { // warp-uniform
        int s = r / n_tile, j = r - s * n_tile;
        int slot = (base + s * cpr + j / RPC) % AMK_RING_MOD;
        const uint4 *wr = (const uint4 *)(amk_ring_slot(smem, slot) + (j % RPC) * R::ROWB);
#pragma unroll
        for (int u = 0; u < R::P; u++) {
          int v = sub * 32 + lane + u * 32 * R::WPR;
          if (v < R::NV)
            a[u] = amk_dot16<WDT>(wr[v], x[u]);
        }
      }
      sum[b] = a[0];
#pragma unroll
      for (int u = 1; u < R::P; u++)
        sum[b] += a[u];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int b = 0; b < RB; b++)
        sum[b] += __shfl_xor_sync(0xffffffffu, sum[b], o);
    if (lane == 0) {
#pragma unroll
      for (int b = 0; b < RB; b++)
        if (r0 + b * R::RS < rows)
          part[(r0 + b * R::RS) * R::WPR + sub] = sum[b];
    }
  }
  __syncthreads(); // every warp is done with the tile's chunks; the sums are in
  int i = threadIdx.x;
  if (i < rows) {
    float acc = 0.0f;
#pragma unroll
    for (int g = 0; g < R::WPR; g++)
      acc += part[i * R::WPR + g];
    int s = i / n_tile, j = i - s * n_tile;
    amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS, TW>(out, mine, acc, 0,
                                                    (long long)s * NOUT + n_off + j, n_off + j);
  }
  if (threadIdx.x == AMK_PUMP_THREAD)
    S->consumed = base + nch;
}
// Mode 3: whether the running tile was ringed (its descriptor says so).
__device__ __forceinline__ bool amk_tile_ringed(float *smem) {
  if constexpr (AMK_STREAM_MODE == 3) {
    const AmkStream *S = amk_stream(smem);
    const AmkStreamDesc &d = amk_desc(S, S->cur_k);
    return d.row_bytes > 0 && d.chunks_per_range > 0;
  } else {
    return false;
  }
}

// The GEMV body on streamed weights: chunk by chunk in ring order, rows of a
// chunk split over the warps (a row over G warps when a chunk has fewer rows
// than warps), each slot released and refilled once read.
template <int PAT, int WDT, int ODT, int ADT, int K, int NOUT, int STACK, int BIAS, int TW>
__device__ __forceinline__ void amk_gemv_streamed(AmkP P, const void *aux, void *out, int n_off,
                                                  int n_tile, const float *xs, float *red,
                                                  float *smem) {
  constexpr int ESZ = (WDT == AMK_ABI_DTYPE_F32) ? 4 : 2;
  constexpr int ROWB = K * ESZ, VEC = 16 / ESZ, NV = ROWB / 16;
  constexpr int RPC = AMK_RING_SLOT_BYTES / ROWB;
  constexpr int G = RPC >= AMK_NWARPS ? 1 : AMK_NWARPS / RPC; // warps per row
  constexpr int NVG = (NV + G - 1) / G;                       // vectors per warp of a row
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int part = warp % G;
  AmkStream *R = amk_stream(smem);
  int base = R->consumed; // the pump changes it only after the first chunk's barrier
  int cpr = (n_tile + RPC - 1) / RPC, nchunks = cpr * STACK;
  // The residual (or bias) values of the tile, loaded once before the first
  // chunk: a global load in each chunk's epilogue would stall the block at
  // the chunk's barrier.
  constexpr bool RES = PAT == AMK_ABI_PATTERN_RESIDUAL || PAT == AMK_ABI_PATTERN_SILU_RESIDUAL;
  float *pre = red + AMK_NWARPS;
  if constexpr (RES || BIAS) {
    amk_gemv_stage_pre<PAT, ADT, NOUT, STACK, BIAS>(aux, pre, n_off, n_tile);
    __syncthreads();
  }
  for (int c = 0; c < nchunks; c++) {
    int seq = base + c, slot = seq % AMK_RING_MOD;
    int s = c / cpr, r0 = (c - s * cpr) * RPC;
    int rows = n_tile - r0 < RPC ? n_tile - r0 : RPC;
    const char *chunk = amk_ring_slot(smem, slot);
    unsigned bar = amk_smem_addr(&R->full[slot]);
    unsigned parity = (unsigned)(seq / AMK_RING_MOD) & 1u;
    while (!amk_mbar_try_wait(bar, parity)) {
    }
    for (int r = warp / G; r < rows; r += AMK_NWARPS / G) {
      const uint4 *wr = (const uint4 *)(chunk + (long long)r * ROWB);
      int v0 = part * NVG, v1 = v0 + NVG < NV ? v0 + NVG : NV;
      float acc = 0.0f;
#pragma unroll 4
      for (int v = v0 + lane; v < v1; v += 32)
        acc += amk_dot16_smem<WDT>(wr[v], xs + v * VEC);
      acc = amk_warp_sum(acc);
      long long wrow = (long long)s * NOUT + n_off + r0 + r;
      if constexpr (G == 1) {
        if (lane == 0)
          amk_gemv_store_pre<PAT, ODT, NOUT, STACK, BIAS, TW>(out, pre, acc, s * n_tile + r0 + r,
                                                          wrow, n_off + r0 + r);
      } else if (lane == 0) {
        red[warp] = acc;
      }
    }
    if constexpr (G > 1) {
      __syncthreads();
      int r = warp / G;
      if (part == 0 && lane == 0 && r < rows) {
        float acc = 0.0f;
        for (int g = 0; g < G; g++)
          acc += red[warp + g];
        long long wrow = (long long)s * NOUT + n_off + r0 + r;
        amk_gemv_store_pre<PAT, ODT, NOUT, STACK, BIAS, TW>(out, pre, acc, s * n_tile + r0 + r, wrow,
                                                        n_off + r0 + r);
      }
    }
    __syncthreads(); // every warp is done with the slot (and with red)
    if (threadIdx.x == AMK_PUMP_THREAD) {
      R->consumed = seq + 1;
      amk_stream_pump(smem, R->cur_k);
    }
  }
}

// Two rows at once: twice the loads in flight per lane, each row's sums in
// the same order as amk_row_dot (the same results). AMK_GEMV_ROW_PAIRS: 0
// never, 1 always, 2 (default) for rows of at most AMK_GEMV_PAIR_MAX_BYTES
// (2 KiB), where a row alone keeps too few loads in flight. Measured on an
// H100 (sixth session, pairs off against the old 8 KiB limit, twice each):
// the 1B shape's 4 KiB rows 1.263-1.270 -> 1.228-1.231 ms, the 8B shape's
// 8 KiB rows 6.22-6.25 -> 6.15-6.18; SmolLM2's 1.1 KiB rows 0.84-0.85 ->
// 0.91 and Qwen2.5-0.5B's 1.8 KiB rows 1.42-1.43 -> 1.89 keep them.
// Longer rows go in pairs only in tiles of AMK_GEMV_PAIR_MIN_ROWS rows
// (amk_gemv_rows; H200, eleventh session: the 8B lm_head 260 -> 245 us).
#ifndef AMK_GEMV_ROW_PAIRS
#define AMK_GEMV_ROW_PAIRS 2
#endif
#ifndef AMK_GEMV_PAIR_MAX_BYTES
#define AMK_GEMV_PAIR_MAX_BYTES 2048
#endif
#ifndef AMK_GEMV_PAIR_MIN_ROWS
#define AMK_GEMV_PAIR_MIN_ROWS 128
#endif
template <int WDT, int K> __device__ constexpr bool amk_row_dot2_ok() {
  constexpr int ESZ = (WDT == AMK_ABI_DTYPE_F32) ? 4 : 2;
  return (AMK_GEMV_ROW_PAIRS == 1 ||
          (AMK_GEMV_ROW_PAIRS == 2 && K * ESZ <= AMK_GEMV_PAIR_MAX_BYTES)) &&
         K % (16 / ESZ) == 0 &&
         (WDT == AMK_ABI_DTYPE_F32 || WDT == AMK_ABI_DTYPE_BF16 || WDT == AMK_ABI_DTYPE_F16);
}
template <int WDT, int K, int XC = 0>
__device__ __forceinline__ void amk_row_dot2(const void *W, long long ra, long long rb,
                                             const float *xs, float &sa, float &sb) {
  long long rows[2] = {ra, rb};
  float sum[2];
  amk_rows_dot<WDT, K, XC, 2>(W, rows, xs, sum);
  sa = sum[0];
  sb = sum[1];
}


// The input vector(s) of a GEMV tile staged in fp32 in xs, with the fused
// prologue (NORM: RMSNorm with aux as its weight; SILU: silu(gate) * up of
// the two halves of x), one element at a time.
// With XCOLS, element i of the staged input lies at i + (i / XCOLS) * 4: a
// 16-byte gap after every XCOLS floats (amk_gemv_quant: lanes reading
// consecutive pieces of XCOLS floats then hit distinct banks).
template <int XCOLS> __device__ __forceinline__ int amk_xpad(int i) {
  return XCOLS ? i + (i / (XCOLS ? XCOLS : 1)) * 4 : i;
}

// SiLU(g) * u, as the SiLU prologues stage a down projection's input. Each
// tile of a down projection split by output rows computes it for the whole
// intermediate (the 8B's 14336 pairs: 56 a thread, an exp and an IEEE
// division each), so AMK_SILU_FAST takes the hardware's exp2 and reciprocal
// instead: a few ulp of fp32 apart, before the product is rounded to the
// staged dtype (the 8B int8 step 4.54 -> 4.31 ms on an H200; 0 where
// AmkCodegenOptions.silu_precise asks for expf and the division).
#ifndef AMK_SILU_FAST
#define AMK_SILU_FAST 1
#endif
__device__ __forceinline__ float amk_silu_mul(float g, float u) {
  if constexpr (AMK_SILU_FAST != 0)
    return __fdividef(g, 1.0f + __expf(-g)) * u;
  else
    return g / (1.0f + expf(-g)) * u;
}

template <int PAT, int XDT, int ODT, int ADT, int K, int M, int XCOLS = 0>
__device__ __forceinline__ void amk_gemv_prologue(const void *x, const void *aux, float eps,
                                                  float *xs, float *red) {
  static_assert(XCOLS == 0 || M == 1, "a padded input is one row");
  if constexpr (PAT == AMK_ABI_PATTERN_NORM) {
    for (int m = 0; m < M; m++) {
      float ss = 0.0f;
      for (int k = threadIdx.x; k < K; k += AMK_NT) {
        float v = amk_ld<XDT>(x, (long long)m * K + k);
        xs[m * K + amk_xpad<XCOLS>(k)] = v;
        ss += v * v;
      }
      ss = amk_block_sum(ss, red);
      float inv = 1.0f / sqrtf(ss / (float)K + eps);
      if (M == 1 && amk_norm_is_staged(aux)) {
        const void *staged = amk_norm_landed();
        for (int k = threadIdx.x; k < K; k += AMK_NT)
          xs[amk_xpad<XCOLS>(k)] =
              amk_round<ODT>(xs[amk_xpad<XCOLS>(k)] * inv * amk_ld_shared<ADT>(staged, k));
      } else {
        for (int k = threadIdx.x; k < K; k += AMK_NT)
          xs[m * K + amk_xpad<XCOLS>(k)] =
              amk_round<ODT>(xs[m * K + amk_xpad<XCOLS>(k)] * inv * amk_ld<ADT>(aux, k));
      }
    }
  } else if constexpr (PAT == AMK_ABI_PATTERN_SILU || PAT == AMK_ABI_PATTERN_SILU_RESIDUAL) {
    for (int k = threadIdx.x; k < K; k += AMK_NT) {
      float g = amk_ld<XDT>(x, k), u = amk_ld<XDT>(x, (long long)K + k);
      xs[amk_xpad<XCOLS>(k)] = amk_round<ODT>(amk_silu_mul(g, u));
    }
  } else {
    for (int k = threadIdx.x; k < M * K; k += AMK_NT)
      xs[amk_xpad<XCOLS>(k)] = amk_ld<XDT>(x, k);
  }
}

// As amk_gemv_prologue for one input row, with each thread's 16-byte loads
// all in flight at once. The element loop waits one L2 round trip per
// element a thread stages: --trace on an H100 showed a 1B down_proj tile
// (8192 gate and up pairs, 32 per thread) taking 19 us for 11 us of
// weights. False (nothing done) where the layout does not allow it.
// a and b rounded as amk_round<DT> rounds them, two at a time for 16-bit
// types: one packed cvt and two unpacks where amk_f2bf's bit arithmetic
// takes about six instructions a value (the SiLU prologue of an 8B down
// tile rounds 56 values a thread). NaNs come back as NaNs, payload aside.
template <int DT> __device__ __forceinline__ void amk_round2(float &a, float &b) {
  if constexpr (DT == AMK_ABI_DTYPE_BF16) {
    unsigned w = amk_pack16x2<DT>(a, b);
    a = __uint_as_float(w << 16);
    b = __uint_as_float(w & 0xFFFF0000u);
  } else if constexpr (DT == AMK_ABI_DTYPE_F16) {
    unsigned w = amk_pack16x2<DT>(a, b);
    a = amk_h2f((unsigned short)w);
    b = amk_h2f((unsigned short)(w >> 16));
  } else {
    a = amk_round<DT>(a);
    b = amk_round<DT>(b);
  }
}

template <int PAT, int XDT, int ODT, int ADT, int K, int M, int XCOLS = 0>
__device__ __forceinline__ bool amk_gemv_prologue16(const void *x, const void *aux, float eps,
                                                    float *xs, float *red) {
  static_assert(XCOLS % 4 == 0, "padding keeps float4 groups whole");
  constexpr bool NORM = PAT == AMK_ABI_PATTERN_NORM;
  constexpr bool SILU = PAT == AMK_ABI_PATTERN_SILU || PAT == AMK_ABI_PATTERN_SILU_RESIDUAL;
  constexpr int VE = AmkVec<XDT>::VE, NC = K / VE, PER = (NC + AMK_NT - 1) / AMK_NT;
  // Registers for PER (NORM, SILU: 2 * PER) vectors per thread.
  if constexpr (M != 1 || !AmkVec<XDT>::OK || K % VE != 0 ||
                (NORM && XDT != ADT) || PER * ((NORM || SILU) ? 2 : 1) > 16) {
    return false;
  } else {
    if ((((unsigned long long)x | (NORM ? (unsigned long long)aux : 0ull)) & 15ull) != 0)
      return false;
    const uint4 *xv = (const uint4 *)x;
    const uint4 *av = NORM ? (const uint4 *)aux : xv + NC; // NORM: weight; SILU: up
    int t = threadIdx.x;
    uint4 ra[PER], rb[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
      int c = t + i * AMK_NT;
      if (c < NC) {
        ra[i] = __ldcg(xv + c);
        if constexpr (NORM || SILU)
          rb[i] = __ldcg(av + c);
      }
    }
    float inv = 1.0f;
    if constexpr (NORM) {
      float ss = 0.0f;
#pragma unroll
      for (int i = 0; i < PER; i++) {
        if (t + i * AMK_NT < NC) {
          float f[VE];
          amk_unpack16<XDT>(ra[i], f);
#pragma unroll
          for (int e = 0; e < VE; e++)
            ss += f[e] * f[e];
        }
      }
      ss = amk_block_sum(ss, red);
      inv = 1.0f / sqrtf(ss / (float)K + eps);
    }
#pragma unroll
    for (int i = 0; i < PER; i++) {
      int c = t + i * AMK_NT;
      if (c < NC) {
        float f[VE];
        amk_unpack16<XDT>(ra[i], f);
        if constexpr (NORM || SILU) {
          float g[VE];
          amk_unpack16<XDT>(rb[i], g);
#pragma unroll
          for (int e = 0; e < VE; e++)
            f[e] = NORM ? f[e] * inv * g[e] : amk_silu_mul(f[e], g[e]);
#pragma unroll
          for (int e = 0; e < VE; e += 2)
            amk_round2<ODT>(f[e], f[e + 1]);
        }
#pragma unroll
        for (int e = 0; e < VE; e += 4)
          *(float4 *)(xs + amk_xpad<XCOLS>(c * VE + e)) =
              make_float4(f[e], f[e + 1], f[e + 2], f[e + 3]);
      }
    }
    return true;
  }
}

template <int PAT, int WDT, int ODT, int ADT, int K, int NOUT, int STACK, int BIAS, int XC = 0,
          int TW = 0>
__device__ __forceinline__ void amk_gemv_rows(const void *W, const void *aux, void *out,
                                              const float *xs, int n_off, int n_tile,
                                              int m_begin, int m_count);

// Weights before the input (AMK_GEMV_EARLY, AMK_CUDA_GEMV_EARLY=1; off until
// measured): a small one-row tile, at most 4 rows a warp of at most 8
// 16-byte pieces a lane, AMK_GEMV_EARLY_PIECES (16) pieces in all, loads its
// weight rows into registers before it stages its input, so that their
// round trip (to L2, where the stream sent them) overlaps the input's
// loads and the norm's reductions instead of following them. A tile of
// SmolLM2 reads 18-36 KiB: 2-5 pieces a lane a row. Each lane sums its
// pieces in the order amk_rows_dot does, so the results are the same.
#ifndef AMK_GEMV_EARLY
#define AMK_GEMV_EARLY 0
#endif
#ifndef AMK_GEMV_EARLY_PIECES
#define AMK_GEMV_EARLY_PIECES 16
#endif
template <int WDT, int K> __device__ constexpr int amk_early_per() {
  return (K * (WDT == AMK_ABI_DTYPE_F32 ? 4 : 2) / 16 + 31) / 32;
}
template <int WDT, int K> __device__ constexpr int amk_early_rows() {
  constexpr int R = AMK_GEMV_EARLY_PIECES / amk_early_per<WDT, K>();
  return R > 4 ? 4 : R;
}
template <int WDT, int K, int M, int GEMM> __device__ constexpr bool amk_gemv_early_ok() {
  // Rows of more than 8 pieces a lane (the 8B's 8 KiB) spill (ptxas, sm_90).
  return AMK_GEMV_EARLY != 0 && M == 1 && !GEMM && amk_rows_dot_ok<WDT, K>() &&
         amk_early_per<WDT, K>() <= 8 && amk_early_rows<WDT, K>() >= 1;
}
template <int PAT, int XDT, int WDT, int ODT, int ADT, int K, int NOUT, int STACK, int BIAS,
          int XC, int TW>
__device__ __forceinline__ void amk_gemv_early(const void *x, const void *W, const void *aux,
                                               void *out, float eps, int n_off, int n_tile,
                                               float *xs, float *red) {
  constexpr int ESZ = (WDT == AMK_ABI_DTYPE_F32) ? 4 : 2;
  constexpr int VEC = 16 / ESZ, NV = K / VEC, XS = VEC + (XC ? 4 : 0);
  constexpr int PER = amk_early_per<WDT, K>(), R = amk_early_rows<WDT, K>();
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int rows = STACK * n_tile;
  long long wrow[R];
  uint4 q[R][PER];
#pragma unroll
  for (int i = 0; i < R; i++) {
    int r = warp + i * AMK_NWARPS;
    int s = r / n_tile, j = r - s * n_tile;
    wrow[i] = (long long)s * NOUT + n_off + j;
    const char *base = (const char *)W + wrow[i] * (long long)K * ESZ;
#pragma unroll
    for (int u = 0; u < PER; u++) {
      int v = lane + 32 * u;
      q[i][u] = r < rows && v < NV ? amk_ldw16(base + (long long)v * 16) : make_uint4(0, 0, 0, 0);
    }
  }
  if (!amk_gemv_prologue16<PAT, XDT, ODT, ADT, K, 1, XC>(x, aux, eps, xs, red))
    amk_gemv_prologue<PAT, XDT, ODT, ADT, K, 1, XC>(x, aux, eps, xs, red);
  __syncthreads();
  amk_mark_staged();
  constexpr AmkGemvExtra none = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < R; i++) {
    int r = warp + i * AMK_NWARPS;
    if (r >= rows) // warp-uniform
      break;
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < PER; u++)
      if (lane + 32 * u < NV)
        acc += amk_dotx<WDT>(q[i][u], xs + (lane + 32 * u) * XS);
    acc = amk_warp_sum(acc);
    if (lane == 0) {
      int j = r - (r / n_tile) * n_tile;
      AmkGemvExtra e = none;
      e = amk_gemv_extra<PAT, ADT, NOUT, STACK, BIAS>(aux, 0, wrow[i], n_off + j);
      amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS, TW>(out, e, acc, 0, wrow[i], n_off + j);
    }
  }
}

// PAT: AMK_PATTERN_PLAIN, NORM, RESIDUAL, SILU, SILU_RESIDUAL.
// Inputs: x (XDT), W (WDT), aux (ADT: norm weight, residual or bias).
// M rows of x (STACK == 1) or one row and STACK stacked output rows of NOUT.
// GEMM: rows [m_off, m_off + M_tile) only.
// TAGGED: 2 where the output has a shadow (launch-tagged transfers): each
// stored element is also written there with this launch's tag.
template <int PAT, int XDT, int WDT, int ODT, int ADT, int K, int NOUT, int STACK, int M,
          int BIAS, int GEMM, int TAGGED>
__device__ void amk_gemv(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  constexpr int TW = TAGGED & 2;
  const void *x = amk_in(A, 0);
  const void *W = amk_in(A, 1);
  const void *aux = I.n_inputs > 2 ? amk_in(A, 2) : nullptr;
  void *out = amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  int m_begin = 0, m_count = M;
  constexpr bool X_EXACT =
      (PAT == AMK_ABI_PATTERN_NORM || PAT == AMK_ABI_PATTERN_SILU ||
       PAT == AMK_ABI_PATTERN_SILU_RESIDUAL)
          ? ODT == WDT
          : XDT == WDT;
  constexpr bool MMA_OK = M == 1 && !GEMM && X_EXACT && amk_gemv_mma_ok<WDT, K>();
  if constexpr (GEMM) {
    m_begin = I.params.m_off.i;
    m_count = I.params.M_tile.i;
  }
  if (n_off < 0 || n_tile < 0 || n_off + n_tile > NOUT || m_begin < 0 || m_count < 0 ||
      m_begin + m_count > M) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_SHAPE, idx, n_off, n_tile);
    return;
  }
  // With AMK_GEMV_XS_PAD, one input row is staged with a 16-byte gap after
  // each 16-byte piece's inputs (amk_xpad), so the lanes of a quarter-warp
  // read distinct banks.
  // (16-bit weights: 32-byte pieces; f32's 16-byte pieces do not conflict.)
  constexpr int XC = AMK_GEMV_XS_PAD && M == 1 && AmkVec<WDT>::OK && AmkVec<WDT>::ESZ == 2 &&
                             K % AmkVec<WDT>::VE == 0
                         ? AmkVec<WDT>::VE : 0;
  float *xs = smem;                // M * K (SILU: K), padded with XC
  float *red = smem + M * K + (XC ? K / XC * 4 : 0); // AMK_NWARPS
  if constexpr (amk_gemv_early_ok<WDT, K, M, GEMM>() &&
                !(AMK_STREAM_MODE == 2 && !XC && amk_gemv_streams<WDT, K, M, GEMM>())) {
    if (STACK * n_tile <= amk_early_rows<WDT, K>() * AMK_NWARPS && !amk_tile_ringed(smem)) {
      amk_gemv_early<PAT, XDT, WDT, ODT, ADT, K, NOUT, STACK, BIAS, XC, TW>(
          x, W, aux, out, I.params.eps.f, n_off, n_tile, xs, red);
      return;
    }
  }
  // Stage the input vector(s) in fp32, applying the fused prologue: with
  // every 16-byte load in flight at once where the layout allows, else one
  // element at a time.
  if (!amk_gemv_prologue16<PAT, XDT, ODT, ADT, K, M, XC>(x, aux, I.params.eps.f, xs, red))
    amk_gemv_prologue<PAT, XDT, ODT, ADT, K, M, XC>(x, aux, I.params.eps.f, xs, red);
  __syncthreads();
  amk_mark_staged();
  if constexpr (amk_gemv_resident_ok<WDT, K, M, GEMM>()) {
    if (amk_tile_ringed(smem)) {
      amk_gemv_resident<PAT, WDT, ODT, ADT, K, NOUT, STACK, BIAS, XC, TW>(aux, out, n_off, n_tile,
                                                                         xs, red, smem);
      return;
    }
  }
  if constexpr (AMK_STREAM_MODE == 2 && !XC && amk_gemv_streams<WDT, K, M, GEMM>()) {
    amk_gemv_streamed<PAT, WDT, ODT, ADT, K, NOUT, STACK, BIAS, TW>(P, aux, out, n_off, n_tile, xs,
                                                                red, smem);
    return;
  }
  // (MMA_OK: the input is exact in WDT when the prologue rounded it to ODT
  // (norm, SiLU) or it was loaded from XDT.)
  if constexpr (MMA_OK) {
    if (STACK * n_tile <= AMK_GEMV_MMA_MAX_ROWS) {
      amk_gemv_rows_mma<PAT, WDT, ODT, ADT, K, NOUT, STACK, BIAS, XC, TW>(W, aux, out, xs,
                                                                          red + AMK_NWARPS, n_off,
                                                                          n_tile);
      return;
    }
  }
  amk_gemv_rows<PAT, WDT, ODT, ADT, K, NOUT, STACK, BIAS, XC, TW>(W, aux, out, xs, n_off, n_tile,
                                                              m_begin, m_count);
}

// The rows of a GEMV tile against the staged input rows xs [m_begin,
// m_begin + m_count): each warp takes rows (two at once where
// amk_row_dot2_ok), its lane 0 adds the bias or residual and stores.
template <int PAT, int WDT, int ODT, int ADT, int K, int NOUT, int STACK, int BIAS, int XC, int TW>
__device__ __forceinline__ void amk_gemv_rows(const void *W, const void *aux, void *out,
                                              const float *xs, int n_off, int n_tile,
                                              int m_begin, int m_count) {
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int rows = STACK * n_tile;
  constexpr AmkGemvExtra none = {0.0f, 0.0f};
  // Row pairs for short rows (amk_row_dot2_ok), and for longer ones in
  // tiles of at least AMK_GEMV_PAIR_MIN_ROWS rows (the lm_head's): there
  // twice the bytes in flight pay, where a small tile's warps would only
  // share fewer, longer dots.
  constexpr bool LONG_PAIRS = AMK_GEMV_ROW_PAIRS == 2 && amk_rows_dot_ok<WDT, K>();
  if constexpr (amk_row_dot2_ok<WDT, K>() || LONG_PAIRS) {
    if (amk_row_dot2_ok<WDT, K>() || rows >= AMK_GEMV_PAIR_MIN_ROWS) {
    for (int m = m_begin; m < m_begin + m_count; m++) {
      for (int r = warp; r < rows; r += 2 * AMK_NWARPS) {
        int r2 = r + AMK_NWARPS;
        int s = r / n_tile, j = r - s * n_tile;
        long long wrow = (long long)s * NOUT + n_off + j;
        AmkGemvExtra e = none, e2 = none;
        if (lane == 0)
          e = amk_gemv_extra<PAT, ADT, NOUT, STACK, BIAS>(aux, m, wrow, n_off + j);
        if (r2 < rows) {
          int s2 = r2 / n_tile, j2 = r2 - s2 * n_tile;
          long long wrow2 = (long long)s2 * NOUT + n_off + j2;
          if (lane == 0)
            e2 = amk_gemv_extra<PAT, ADT, NOUT, STACK, BIAS>(aux, m, wrow2, n_off + j2);
          float acc, acc2;
          amk_row_dot2<WDT, K, XC>(W, wrow, wrow2, xs + m * K, acc, acc2);
          if (lane == 0) {
            amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS, TW>(out, e, acc, m, wrow, n_off + j);
            amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS, TW>(out, e2, acc2, m, wrow2, n_off + j2);
          }
        } else {
          float acc = amk_row_dot<WDT, K, XC>(W, wrow, xs + m * K);
          if (lane == 0)
            amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS, TW>(out, e, acc, m, wrow, n_off + j);
        }
      }
    }
    return;
    }
  }
  for (int m = m_begin; m < m_begin + m_count; m++) {
    for (int r = warp; r < rows; r += AMK_NWARPS) {
      int s = r / n_tile, j = r - s * n_tile;
      long long wrow = (long long)s * NOUT + n_off + j;
      AmkGemvExtra e = none;
      if (lane == 0)
        e = amk_gemv_extra<PAT, ADT, NOUT, STACK, BIAS>(aux, m, wrow, n_off + j);
      float acc = amk_row_dot<WDT, K, XC>(W, wrow, xs + m * K);
      if (lane == 0)
        amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS, TW>(out, e, acc, m, wrow, n_off + j);
    }
  }
}

// A tile's output rows [n_off, n_off + n_tile) lie in [0, nout); else the
// launch fails with a shape error (thread 0 reports it).
__device__ __forceinline__ bool amk_tile_rows_ok(AmkP P, int idx, int n_off, int n_tile,
                                                 int nout) {
  if (n_off >= 0 && n_tile >= 0 && n_off + n_tile <= nout)
    return true;
  if (threadIdx.x == 0)
    amk_fail(P, AMK_STATUS_SHAPE, idx, n_off, n_tile);
  return false;
}

// ---- mlp tiles: the MLP with a split-K down projection ------------------------------
//
// Pattern mlp (docs/Fusion.md): for intermediate columns [n_off, n_off +
// n_tile), the gate and up rows of rmsnorm(x, g) rounded to x's dtype (as
// the unfused gu), act = silu(gate) * up rounded likewise, then the tile's
// share of the down projection, sum over its columns c of act[c] *
// Wdt[c, n], for all K outputs, added into the f32 accumulator (the tile at
// n_off 0 adds x too). Wdt is the down weight transposed ([I, K]), so the
// tile's down weights are n_tile contiguous rows: each thread owns 16-byte
// columns of them (consecutive threads, consecutive columns: a warp reads
// 512 contiguous bytes a row) and walks the rows, AMK_MLP_DOWN_UNROLL loads
// in flight; threads left over when K is narrow take every CP-th row of the
// same columns (CP phases), summed in shared memory. The sums then go into
// the accumulator with float4 atomics (sm_90) from an offset that differs
// between tiles, so that the tiles do not all queue on the same L2 lines.
#ifndef AMK_MLP_DOWN_UNROLL
#define AMK_MLP_DOWN_UNROLL 16
#endif
// Gate|up rows a warp streams at once (amk_rows_dot); 0: two for rows of
// 8 KiB or more (one keeps only 4 KiB a warp in flight) and for the short
// rows the GEMV takes in pairs, else one (two were no faster on rows of
// 4 KiB: docs/Performance.md).
#ifndef AMK_MLP_GU_ROWS
#define AMK_MLP_GU_ROWS 0
#endif
// The first AMK_MLP_PREFETCH_BYTES of a tile's down weights go to L2 (one
// bulk prefetch) as the tile starts, so that they stream while the gate|up
// rows are computed.
#ifndef AMK_MLP_PREFETCH_BYTES
#define AMK_MLP_PREFETCH_BYTES 0
#endif

// acc[e] += a * w[e] for the 16 bytes of weights q (VE elements).
template <int WDT>
__device__ __forceinline__ void amk_axpy16(uint4 q, float a, float *acc) {
  if constexpr (WDT == AMK_ABI_DTYPE_F32) {
    acc[0] += a * __uint_as_float(q.x);
    acc[1] += a * __uint_as_float(q.y);
    acc[2] += a * __uint_as_float(q.z);
    acc[3] += a * __uint_as_float(q.w);
  } else {
    unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      float lo, hi;
      if constexpr (WDT == AMK_ABI_DTYPE_BF16) {
        lo = __uint_as_float(w[k] << 16);
        hi = __uint_as_float(w[k] & 0xffff0000u);
      } else {
        lo = amk_h2f((unsigned short)(w[k] & 0xffffu));
        hi = amk_h2f((unsigned short)(w[k] >> 16));
      }
      acc[2 * k] += a * lo;
      acc[2 * k + 1] += a * hi;
    }
  }
}

// The norm prologue of an mlp tile over its input's shadow (launch-tagged
// transfers): amk_gemv_prologue16's NORM with the same vectors per thread
// and the same order of operations, each vector's words (VE values, f32 in
// the shadow) loaded in 16-byte pairs and polled until they carry this
// launch's tag.
template <int XDT, int ADT, int K, int XCOLS>
__device__ __forceinline__ void amk_norm_prologue_tagged(AmkP P, int idx,
                                                         const unsigned long long *sh,
                                                         const void *g, float eps, float *xs,
                                                         float *red) {
  constexpr int VE = AmkVec<XDT>::VE, NC = K / VE, PER = (NC + AMK_NT - 1) / AMK_NT;
  static_assert(K % VE == 0 && VE % 4 == 0, "whole vectors of 16-byte word pairs");
  constexpr int NP2 = VE / 2; // pairs of words a vector
  int t = threadIdx.x;
  const unsigned long long *wp[PER * NP2];
  unsigned long long w[PER * VE];
#pragma unroll
  for (int i = 0; i < PER; i++) {
    int c = t + i * AMK_NT;
#pragma unroll
    for (int j = 0; j < NP2; j++) {
      wp[i * NP2 + j] = c < NC ? sh + (long long)c * VE + 2 * j : nullptr;
      ulonglong2 v = wp[i * NP2 + j] ? amk_tag_ld2(wp[i * NP2 + j]) : make_ulonglong2(0ull, 0ull);
      w[i * VE + 2 * j] = v.x;
      w[i * VE + 2 * j + 1] = v.y;
    }
  }
  amk_tag_settle<PER * NP2, true>(P, idx, wp, w);
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < PER; i++) {
    if (t + i * AMK_NT < NC) {
#pragma unroll
      for (int e = 0; e < VE; e++) {
        float f = amk_tag_value(w[i * VE + e]);
        ss += f * f;
      }
    }
  }
  ss = amk_block_sum(ss, red);
  float inv = 1.0f / sqrtf(ss / (float)K + eps);
#pragma unroll
  for (int i = 0; i < PER; i++) {
    int c = t + i * AMK_NT;
    if (c < NC) {
      float f[VE];
#pragma unroll
      for (int e = 0; e < VE; e++)
        f[e] = amk_round<XDT>(amk_tag_value(w[i * VE + e]) * inv * amk_ld<ADT>(g, (long long)c * VE + e));
#pragma unroll
      for (int e = 0; e < VE; e += 4)
        *(float4 *)(xs + amk_xpad<XCOLS>(c * VE + e)) =
            make_float4(f[e], f[e + 1], f[e + 2], f[e + 3]);
    }
  }
}

// A split-K tile's share (mlp's down projection, attention_o's o
// projection): part[n] = the fp32 sum over c < n_tile, in increasing c, of
// act[c] * Wt[c, n] for n in [0, K), `rows` the tile's n_tile rows of Wt
// (K elements each). part must be zero (atomic adds when a row's 16-byte
// columns are fewer than the threads); callers synchronise after.
template <int DDT, int K>
__device__ __forceinline__ void amk_share_rows(const char *rows, const float *act, int n_tile,
                                               float *part) {
  constexpr int DE = AmkVec<DDT>::ESZ, DV = AmkVec<DDT>::VE;
  constexpr bool VEC = AmkVec<DDT>::OK && (K * DE) % 16 == 0;
  if (VEC && ((unsigned long long)rows & 15ull) == 0) {
    constexpr int NB = K / DV;                                  // 16-byte columns of a row
    constexpr int CP = NB < AMK_NT ? AMK_NT / NB : 1;           // row phases
    constexpr int U = AMK_MLP_DOWN_UNROLL;
    int phase = threadIdx.x / NB;
    if (phase < CP) {
      for (int col = threadIdx.x % NB; col < NB; col += (CP == 1 ? AMK_NT : NB)) {
        float acc[DV];
#pragma unroll
        for (int e = 0; e < DV; e++)
          acc[e] = 0.0f;
        const char *base = rows + (long long)col * 16;
        for (int c0 = phase; c0 < n_tile; c0 += CP * U) {
          uint4 q[U];
#pragma unroll
          for (int u = 0; u < U; u++) {
            int c = c0 + u * CP;
            q[u] = c < n_tile ? amk_ldw16(base + (long long)c * K * DE) : make_uint4(0u, 0u, 0u, 0u);
          }
#pragma unroll
          for (int u = 0; u < U; u++) {
            int c = c0 + u * CP;
            amk_axpy16<DDT>(q[u], c < n_tile ? act[c] : 0.0f, acc);
          }
        }
        if constexpr (CP == 1) {
#pragma unroll
          for (int e = 0; e < DV; e++)
            part[col * DV + e] = acc[e];
        } else {
#pragma unroll
          for (int e = 0; e < DV; e++)
            atomicAdd(&part[col * DV + e], acc[e]);
        }
      }
    }
  } else {
    for (int n = threadIdx.x; n < K; n += AMK_NT) {
      float acc = 0.0f;
      for (int c = 0; c < n_tile; c++)
        acc += act[c] * amk_ld<DDT>(rows, (long long)c * K + n);
      part[n] = acc;
    }
  }
}

// out[n] += part[n] for n in [0, K), plus the residual (res4(v): elements
// 4v .. 4v + 3, res1(n): element n) where `first`: float4 atomics from a
// rotated start (tiles spread over the accumulator's lines), else one float
// at a time.
template <int K, class Res4, class Res1>
__device__ __forceinline__ void amk_share_add(float *out, const float *part, bool first,
                                              int n_off, int n_tile, Res4 &res4, Res1 &res1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (K % 4 == 0) {
    if (((unsigned long long)out & 15ull) == 0) {
      constexpr int NV4 = K / 4;
      int rot = (int)(((unsigned)(n_off / (n_tile > 0 ? n_tile : 1)) * 64u) % (unsigned)NV4);
      for (int i = threadIdx.x; i < NV4; i += AMK_NT) {
        int v = i + rot < NV4 ? i + rot : i + rot - NV4;
        float4 s = *(const float4 *)(part + 4 * v);
        if (first) {
          float4 r = res4(v);
          s.x += r.x;
          s.y += r.y;
          s.z += r.z;
          s.w += r.w;
        }
        atomicAdd((float4 *)out + v, s);
      }
      return;
    }
  }
#endif
  for (int n = threadIdx.x; n < K; n += AMK_NT)
    atomicAdd(out + n, first ? part[n] + res1(n) : part[n]);
}

// TAGGED bit 0: x (h_attn) comes from its shadow (launch-tagged transfers).
template <int XDT, int WDT, int GDT, int DDT, int K, int INTER, int TAGGED>
__device__ void amk_gemv_mlp(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *x = amk_in(A, 0);
  const void *Wgu = amk_in(A, 1);
  const void *g = amk_in(A, 2);
  const void *Wdt = amk_in(A, 3);
  float *out = (float *)amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  if (!amk_tile_rows_ok(P, idx, n_off, n_tile, INTER))
    return;
  constexpr int DE = AmkVec<DDT>::ESZ;
  const char *down = (const char *)Wdt + (long long)n_off * K * DE; // the tile's rows
  if constexpr (AMK_MLP_PREFETCH_BYTES > 0) {
    long long bytes = (long long)n_tile * K * DE;
    bytes = bytes < AMK_MLP_PREFETCH_BYTES ? bytes : AMK_MLP_PREFETCH_BYTES;
    bytes &= ~15ll;
    if (threadIdx.x == 0 && bytes > 0 && ((unsigned long long)down & 15ull) == 0)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(down), "r"((unsigned)bytes)
                   : "memory");
  }
  constexpr int XC = AMK_GEMV_XS_PAD && AmkVec<WDT>::OK && AmkVec<WDT>::ESZ == 2 &&
                             K % AmkVec<WDT>::VE == 0
                         ? AmkVec<WDT>::VE : 0;
  float *xs = smem;                                   // K, padded with XC
  float *red = smem + K + (XC ? K / XC * 4 : 0);      // AMK_NWARPS
  float *act = red + ((AMK_NWARPS + 3) & ~3);         // 2 * n_tile: gate, up; then act
  float *part = xs;                                   // K sums, once xs is done with
  constexpr bool TR = (TAGGED & 1) != 0;
  const unsigned long long *xsh = TR ? (const unsigned long long *)A.shadow[0] : nullptr;
  if constexpr (TR)
    amk_norm_prologue_tagged<XDT, GDT, K, XC>(P, idx, xsh, g, I.params.eps.f, xs, red);
  else if (!amk_gemv_prologue16<AMK_ABI_PATTERN_NORM, XDT, XDT, GDT, K, 1, XC>(
               x, g, I.params.eps.f, xs, red))
    amk_gemv_prologue<AMK_ABI_PATTERN_NORM, XDT, XDT, GDT, K, 1, XC>(x, g, I.params.eps.f, xs,
                                                                     red);
  __syncthreads();
  amk_mark_staged();
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int rows = 2 * n_tile; // row r: gate (r < n_tile) or up of column n_off + r % n_tile
  if constexpr (amk_rows_dot_ok<WDT, K>()) {
    // A warp takes G rows at once (rows r, r + NWARPS, ...); past the last
    // row it reads row r again and stores nothing.
    constexpr int RB = K * AmkVec<WDT>::ESZ;
    constexpr int G = AMK_MLP_GU_ROWS > 0                                   ? AMK_MLP_GU_ROWS
                      : RB >= 8192 || (AMK_GEMV_ROW_PAIRS != 0 && RB <= AMK_GEMV_PAIR_MAX_BYTES) ? 2
                                                                            : 1;
    // The first head_rows gate rows are in the head buffer (AMK_MLP_HEAD_BYTES).
    int head_rows = AMK_MLP_HEAD_BYTES > 0 && AMK_STREAM_MODE == 1 ? amk_mlp_head_rows(smem, RB)
                                                                   : 0;
    for (int r = warp; r < rows; r += G * AMK_NWARPS) {
      long long wrow[G];
      float sum[G];
      if (AMK_MLP_HEAD_BYTES > 0 && r + (G - 1) * AMK_NWARPS < head_rows) {
#pragma unroll
        for (int g = 0; g < G; g++)
          wrow[g] = r + g * AMK_NWARPS;
        amk_rows_dot<WDT, K, XC, G, true>(amk_mlp_head(smem), wrow, xs, sum);
      } else {
#pragma unroll
        for (int g = 0; g < G; g++) {
          int rg = r + g * AMK_NWARPS < rows ? r + g * AMK_NWARPS : r;
          wrow[g] = (long long)(rg / n_tile) * INTER + n_off + rg % n_tile;
        }
        amk_rows_dot<WDT, K, XC, G>(Wgu, wrow, xs, sum);
      }
      if (lane == 0) {
#pragma unroll
        for (int g = 0; g < G; g++)
          if (r + g * AMK_NWARPS < rows)
            act[r + g * AMK_NWARPS] = amk_round<XDT>(sum[g]);
      }
    }
  } else {
    for (int r = warp; r < rows; r += AMK_NWARPS) {
      long long wrow = (long long)(r / n_tile) * INTER + n_off + r % n_tile;
      float a = amk_row_dot<WDT, K, XC>(Wgu, wrow, xs);
      if (lane == 0)
        act[r] = amk_round<XDT>(a);
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n_tile; j += AMK_NT) {
    float gt = act[j], up = act[n_tile + j];
    act[j] = amk_round<XDT>(gt / (1.0f + expf(-gt)) * up);
  }
  // part aliases xs, which the gate|up rows read until the barrier above.
  for (int n = threadIdx.x; n < K; n += AMK_NT)
    part[n] = 0.0f;
  __syncthreads();
  amk_mark_loop();
  amk_share_rows<DDT, K>(down, act, n_tile, part);
  __syncthreads();
  amk_mark_looped();
  // The tile at column 0 adds the residual x too, unless the program is a
  // tensor-parallel rank's other than 0 (its all-reduce takes x once).
  bool first = n_off == 0 && !(I.params.flags.i & AMK_FLAG_MLP_NO_RESIDUAL);
  auto res4 = [&](int v) {
    if constexpr (TR) {
      const unsigned long long *wp[2] = {xsh + 4 * v, xsh + 4 * v + 2};
      unsigned long long w[4];
      ulonglong2 a = amk_tag_ld2(wp[0]), b = amk_tag_ld2(wp[1]);
      w[0] = a.x, w[1] = a.y, w[2] = b.x, w[3] = b.y;
      amk_tag_settle<2, true>(P, idx, wp, w);
      return make_float4(amk_tag_value(w[0]), amk_tag_value(w[1]), amk_tag_value(w[2]),
                         amk_tag_value(w[3]));
    } else {
      return make_float4(amk_ld<XDT>(x, 4 * v), amk_ld<XDT>(x, 4 * v + 1),
                         amk_ld<XDT>(x, 4 * v + 2), amk_ld<XDT>(x, 4 * v + 3));
    }
  };
  auto res1 = [&](int n) {
    if constexpr (TR) {
      const unsigned long long *wp[1] = {xsh + n};
      unsigned long long w[1] = {amk_tag_ld(wp[0])};
      amk_tag_settle<1, false>(P, idx, wp, w);
      return amk_tag_value(w[0]);
    } else {
      return amk_ld<XDT>(x, n);
    }
  };
  amk_share_add<K>(out, part, first, n_off, n_tile, res4, res1);
}

// The weight stream's view of an mlp variant: in L2 mode its gate and up
// rows (the down rows, a third range elsewhere, are the tile's own
// AMK_MLP_PREFETCH_BYTES); never the ring, as its rows are read from global
// memory.
template <int XDT, int WDT, int GDT, int DDT, int K, int INTER, int TAGGED>
__device__ amk_stream_info_t amk_gemv_mlp_stream() {
  // (The tagged prologue reads its norm weight from global memory.)
  constexpr int NORM_BYTES =
      (TAGGED & 1) ? 0 : (int)amk_norm_stage_bytes<AMK_ABI_PATTERN_NORM, XDT, GDT, K, 1, 0>();
  if constexpr (AMK_STREAM_HAS_L2 && amk_gemv_streams<WDT, K, 1, 0>())
    return amk_stream_info_t{K * AmkVec<WDT>::ESZ, 2, INTER, 0, NORM_BYTES,
                             amk_rows_dot_ok<WDT, K>() ? 1 : 0};
  else
    return amk_stream_info_t{0, 0, 0, 0, NORM_BYTES};
}

// ---- GEMM tiles on the tensor cores (prefill) --------------------------------------
//
// out[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]) for rows [m_off, m_off +
// M_tile) and columns [n_off, n_off + N_tile), x and W both bf16 or both f16,
// fp32 accumulation, the output rounded to its dtype once (as the reference
// VM stores it). The task's rectangle is cut into AMK_MMA_BM x BN (64, 128
// or 256) sub-tiles that the block takes one after another; each walks K in
// steps of AMK_MMA_BK through AMK_MMA_STAGES shared-memory stages filled by
// cp.async (L2 only: activations are written by other blocks during the
// launch), while the 8 warps (2 x 4, 64 x BN / 4 outputs each) multiply
// with mma.sync m16n8k16, their fragments read by ldmatrix. Rows, columns and
// the K tail outside the task are zero-filled in shared memory and never
// stored, so M, N and K need not be multiples of the tile (K a multiple of
// 8: whole 16-byte pieces, which codegen checks).
#define AMK_MMA_BM 128
#define AMK_MMA_BK 32
#define AMK_MMA_STAGES 4
// Shared-memory row stride in elements: a 16-byte gap after each row puts
// the 8 rows an ldmatrix reads in distinct banks.
#define AMK_MMA_LD (AMK_MMA_BK + 8)
// One stage: BM rows of x, then BN rows of W.
__device__ constexpr int amk_mma_stage_bytes(int bn) {
  return (AMK_MMA_BM + bn) * AMK_MMA_LD * 2;
}

__device__ __forceinline__ void amk_cp_async16(unsigned dst, const void *src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(full ? 16 : 0)
               : "memory");
}
// A 4-byte copy (a quantized piece's scale word), through L1.
__device__ __forceinline__ void amk_cp_async4(unsigned dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
template <int PENDING> __device__ __forceinline__ void amk_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}
__device__ __forceinline__ void amk_ldmatrix_x4(unsigned *r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// Rows [row0, row0 + ROWS) x columns [k0, k0 + BK) of a [*, K] matrix
// into one stage's part; rows at or past `rows` and columns at or past K
// read as zeros.
template <int K, int ROWS>
__device__ __forceinline__ void amk_mma_load(unsigned dst, const unsigned short *g, long long row0,
                                             int rows, int k0) {
  constexpr int PIECES = AMK_MMA_BK / 8; // 16-byte pieces per row
  // (A condition on K too, so that it binds only where the template is used.)
  static_assert(ROWS * PIECES % AMK_NT == 0 || K < 0, "every thread copies as many pieces");
#pragma unroll
  for (int u = 0; u < ROWS * PIECES / AMK_NT; u++) {
    int c = threadIdx.x + u * AMK_NT;
    int r = c / PIECES, kc = (c % PIECES) * 8;
    bool in = r < rows && k0 + kc < K;
    const unsigned short *src = in ? g + (row0 + r) * K + k0 + kc : g;
    amk_cp_async16(dst + (unsigned)(r * AMK_MMA_LD + kc) * 2, src, in);
  }
}

// Stores two adjacent columns (col, col + 1) of one output row; the second
// only where it lies inside the tile.
template <int ODT, int ADT, int NOUT, int BIAS>
__device__ __forceinline__ void amk_mma_store2(void *out, const void *bias, long long row, int col,
                                               bool second, float v0, float v1) {
  if constexpr (BIAS) {
    v0 += amk_ld<ADT>(bias, col);
    if (second)
      v1 += amk_ld<ADT>(bias, col + 1);
  }
  long long i = row * NOUT + col;
  if constexpr ((ODT == AMK_ABI_DTYPE_BF16 || ODT == AMK_ABI_DTYPE_F16) && NOUT % 2 == 0) {
    // An even column starts an aligned 32-bit word (a task at an odd n_off
    // has odd columns: two stores).
    if (second && (col & 1) == 0) {
      unsigned lo = ODT == AMK_ABI_DTYPE_BF16 ? amk_f2bf(v0) : amk_f2h(v0);
      unsigned hi = ODT == AMK_ABI_DTYPE_BF16 ? amk_f2bf(v1) : amk_f2h(v1);
      __stcg((unsigned *)((unsigned short *)out + i), lo | (hi << 16));
      return;
    }
  }
  amk_st<ODT>(out, i, v0);
  if (second)
    amk_st<ODT>(out, i + 1, v1);
}

// XDT == WDT (bf16 or f16); M: the input's rows; BIAS: input 2 is a bias
// (ADT) of one value per weight row; BN: the sub-tile's columns, 64, 128 or 256.
template <int XDT, int WDT, int ODT, int ADT, int K, int NOUT, int M, int BIAS, int BN>
__device__ void amk_gemm_mma(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  static_assert(XDT == WDT && (XDT == AMK_ABI_DTYPE_BF16 || XDT == AMK_ABI_DTYPE_F16),
                "the tensor-core GEMM multiplies bf16 by bf16 or f16 by f16");
  static_assert(K % 8 == 0, "rows must be whole 16-byte pieces");
  static_assert(AMK_NT == 256 || K < 0, "the warp layout is 2 x 4 warps");
  static_assert(BN == 64 || BN == 128 || BN == 256, "sub-tiles are 128 x 64, 128 or 256");
  constexpr int WN = BN / 4;      // a warp's columns
  constexpr int NT8 = WN / 8;     // its 8-column mma tiles
  constexpr int STAGE = amk_mma_stage_bytes(BN);
  const unsigned short *x = (const unsigned short *)amk_in(A, 0);
  const unsigned short *W = (const unsigned short *)amk_in(A, 1);
  const void *bias = BIAS ? amk_in(A, 2) : nullptr;
  void *out = amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  int m_begin = I.params.m_off.i, m_count = I.params.M_tile.i;
  if (n_off < 0 || n_tile < 0 || n_off + n_tile > NOUT || m_begin < 0 || m_count < 0 ||
      m_begin + m_count > M || (((unsigned long long)x | (unsigned long long)W) & 15)) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_SHAPE, idx, n_off, n_tile);
    return;
  }
  constexpr int KT = (K + AMK_MMA_BK - 1) / AMK_MMA_BK;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp >> 2, wn = warp & 3; // the warp's 64 x WN outputs
  const unsigned sbase = amk_smem_addr(smem);
  const int tiles_n = (n_tile + BN - 1) / BN;
  const int tiles = (m_count + AMK_MMA_BM - 1) / AMK_MMA_BM * tiles_n;
  // ldmatrix addresses within a stage, per lane: A rows lane % 16 at k
  // (lane / 16) * 8; B rows (lane % 8) + (lane / 16) * 8 at k ((lane / 8) % 2) * 8.
  const unsigned a_lane =
      (unsigned)(((wm * 64 + (lane & 15)) * AMK_MMA_LD + (lane >> 4) * 8) * 2);
  const unsigned b_lane =
      (unsigned)((AMK_MMA_BM * AMK_MMA_LD +
                  (wn * WN + (lane & 7) + ((lane >> 4) << 3)) * AMK_MMA_LD + ((lane >> 3) & 1) * 8) *
                 2);
  for (int t = 0; t < tiles; t++) {
    // Columns vary fastest: consecutive sub-tiles share their x rows in L2.
    const int m0 = m_begin + t / tiles_n * AMK_MMA_BM, n0 = n_off + t % tiles_n * BN;
    const int mv = min(AMK_MMA_BM, m_begin + m_count - m0);
    const int nv = min(BN, n_off + n_tile - n0);
    float acc[4][NT8][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < NT8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          acc[i][j][e] = 0.0f;
#pragma unroll
    for (int s = 0; s < AMK_MMA_STAGES - 1; s++) {
      if (s < KT) {
        unsigned st = sbase + s * STAGE;
        amk_mma_load<K, AMK_MMA_BM>(st, x, m0, mv, s * AMK_MMA_BK);
        amk_mma_load<K, BN>(st + AMK_MMA_BM * AMK_MMA_LD * 2, W, n0, nv, s * AMK_MMA_BK);
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int kt = 0; kt < KT; kt++) {
      amk_cp_async_wait<AMK_MMA_STAGES - 2>();
      __syncthreads(); // stage kt landed for all; stage kt - 1 is free again
      const int next = kt + AMK_MMA_STAGES - 1;
      if (next < KT) {
        unsigned st = sbase + (next % AMK_MMA_STAGES) * STAGE;
        amk_mma_load<K, AMK_MMA_BM>(st, x, m0, mv, next * AMK_MMA_BK);
        amk_mma_load<K, BN>(st + AMK_MMA_BM * AMK_MMA_LD * 2, W, n0, nv, next * AMK_MMA_BK);
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
      const unsigned st = sbase + (kt % AMK_MMA_STAGES) * STAGE;
#pragma unroll
      for (int kk = 0; kk < AMK_MMA_BK / 16; kk++) {
        unsigned af[4][4], bf[NT8][2];
#pragma unroll
        for (int i = 0; i < 4; i++)
          amk_ldmatrix_x4(af[i], st + a_lane + (unsigned)((i * 16 * AMK_MMA_LD + kk * 16) * 2));
#pragma unroll
        for (int j = 0; j < NT8 / 2; j++) {
          unsigned r[4];
          amk_ldmatrix_x4(r, st + b_lane + (unsigned)((j * 16 * AMK_MMA_LD + kk * 16) * 2));
          bf[2 * j][0] = r[0];
          bf[2 * j][1] = r[1];
          bf[2 * j + 1][0] = r[2];
          bf[2 * j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < NT8; j++)
            amk_mma16816<XDT>(acc[i][j], af[i], bf[j]);
      }
    }
    amk_cp_async_wait<0>();
    __syncthreads(); // every warp is done with the stages before the next sub-tile fills them
    // Accumulator e of tile (i, j): row (lane / 4) + 8 * (e / 2), column
    // 2 * (lane % 4) + e % 2.
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < NT8; j++) {
        int c = wn * WN + j * 8 + (lane & 3) * 2;
        if (c >= nv)
          continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
          int r = wm * 64 + i * 16 + (lane >> 2) + h * 8;
          if (r < mv)
            amk_mma_store2<ODT, ADT, NOUT, BIAS>(out, bias, (long long)(m0 + r), n0 + c,
                                                 c + 1 < nv, acc[i][j][2 * h],
                                                 acc[i][j][2 * h + 1]);
        }
      }
  }
}

// ---- weight-only quantized GEMV (W8A16, W4A16) ------------------------------------
//
// Inputs x, qW [N, K] and scales [N, ceil(K / GROUP)] (the quantize pass's
// format, docs/Quantization.md): i8 is one signed byte per column; i4 is
// q + 8 nibbles, column 2b in the low nibble of byte b. A 16-byte piece of
// a row holds 16 (i8) or 32 (i4) columns; when GROUP is a multiple of that
// the piece lies in one group, so its dot with x is taken on the integers
// and scaled once (the reference VM dequantizes every weight first: the sums
// differ by rounding only). Integers become floats through the magic number
// 2^23: 0x4B0000uu is 2^23 + uu exactly, so no conversion instruction is
// needed (an H100 converts a quarter as fast as it adds).
// 16-byte loads in flight per lane of a quantized GEMV (0: up to 8 of one
// row for i8, 4 for i4; set, several rows a warp up to that many loads).
#ifndef AMK_QGEMV_LOADS
#define AMK_QGEMV_LOADS 0
#endif
template <int QDT> struct AmkQuant {
  static constexpr int COLS = QDT == AMK_ABI_DTYPE_I8 ? 16 : 32; // columns per 16 bytes
  static constexpr long long row_bytes(long long k) {
    return QDT == AMK_ABI_DTYPE_I8 ? k : (k + 1) / 2;
  }
};

// The 16 (i8) or 32 (i4) integers of q times the matching inputs, with x
// as amk_qx_finish stages it: each piece's COLS inputs times 2^48, then at
// x[COLS] its offset term. A byte or nibble as the low bits of a float is
// that integer times 2^-149 (a subnormal, exact; the H100 multiplies them
// at full rate), so one permute makes each weight; the storage offset (+128
// for i8, +8 for i4) comes off once per piece, through the staged sum of its
// inputs. The result is the dot times 2^-101 (AMK_QDOT_UNSCALE undoes it).
// Before (2^23 + u, then a subtraction) every weight took one add more: the
// H100's GEMV tiles were bound by these instructions.
constexpr float AMK_QX_SCALE = 281474976710656.0f;             // 2^48
constexpr float AMK_QDOT_UNSCALE = 2535301200456458802993406410752.0f; // 2^101
// The same on inputs already in registers: x the piece's COLS inputs, off
// its offset term.
template <int QDT>
__device__ __forceinline__ float amk_qdot16r(uint4 q, const float (&x)[AmkQuant<QDT>::COLS],
                                             float off) {
  unsigned int w[4] = {q.x, q.y, q.z, q.w};
  float a0 = -off, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
  if constexpr (QDT == AMK_ABI_DTYPE_I8) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
      unsigned int u = w[k] ^ 0x80808080u; // each byte + 128, unsigned
      a0 = fmaf(__int_as_float(__byte_perm(u, 0u, 0x4440)), x[4 * k], a0);
      a1 = fmaf(__int_as_float(__byte_perm(u, 0u, 0x4441)), x[4 * k + 1], a1);
      a2 = fmaf(__int_as_float(__byte_perm(u, 0u, 0x4442)), x[4 * k + 2], a2);
      a3 = fmaf(__int_as_float(__byte_perm(u, 0u, 0x4443)), x[4 * k + 3], a3);
    }
  } else {
    // The even columns' nibbles as bytes, then the odd ones'.
#pragma unroll
    for (int k = 0; k < 4; k++) {
      unsigned int lo = w[k] & 0x0F0F0F0Fu, hi = (w[k] >> 4) & 0x0F0F0F0Fu;
      const float *xk = x + 8 * k;
      a0 = fmaf(__int_as_float(__byte_perm(lo, 0u, 0x4440)), xk[0], a0);
      a1 = fmaf(__int_as_float(__byte_perm(hi, 0u, 0x4440)), xk[1], a1);
      a2 = fmaf(__int_as_float(__byte_perm(lo, 0u, 0x4441)), xk[2], a2);
      a3 = fmaf(__int_as_float(__byte_perm(hi, 0u, 0x4441)), xk[3], a3);
      a0 = fmaf(__int_as_float(__byte_perm(lo, 0u, 0x4442)), xk[4], a0);
      a1 = fmaf(__int_as_float(__byte_perm(hi, 0u, 0x4442)), xk[5], a1);
      a2 = fmaf(__int_as_float(__byte_perm(lo, 0u, 0x4443)), xk[6], a2);
      a3 = fmaf(__int_as_float(__byte_perm(hi, 0u, 0x4443)), xk[7], a3);
    }
  }
  return (a0 + a1) + (a2 + a3);
}
// A piece's staged inputs (COLS floats, 16-byte aligned) into registers.
template <int QDT>
__device__ __forceinline__ void amk_qx_load(const float *xp, float (&x)[AmkQuant<QDT>::COLS]) {
#pragma unroll
  for (int c = 0; c < AmkQuant<QDT>::COLS; c += 4) {
    float4 v = *(const float4 *)(xp + c);
    x[c] = v.x;
    x[c + 1] = v.y;
    x[c + 2] = v.z;
    x[c + 3] = v.w;
  }
}
template <int QDT> __device__ __forceinline__ float amk_qdot16(uint4 q, const float *xp) {
  float x[AmkQuant<QDT>::COLS];
  amk_qx_load<QDT>(xp, x);
  return amk_qdot16r<QDT>(q, x, xp[AmkQuant<QDT>::COLS]);
}
// All threads, after `rows` input rows are staged (amk_xpad<COLS> layout,
// `stride` floats apart) and a barrier: each piece's inputs times 2^48 and,
// in the gap after them, the offset term amk_qdot16 starts from. Callers
// synchronise after.
template <int QDT, int K>
__device__ __forceinline__ void amk_qx_finish(float *xs, int rows = 1, int stride = 0) {
  constexpr int COLS = AmkQuant<QDT>::COLS, NP = K / COLS;
  // The offset times 2^48 (the inputs' scale) times 2^-149 (the weights').
  constexpr float OFFSET = (QDT == AMK_ABI_DTYPE_I8 ? 128.0f : 8.0f) / AMK_QDOT_UNSCALE;
  for (int i = threadIdx.x; i < rows * NP; i += AMK_NT) {
    int m = i / NP, p = i - m * NP;
    float *x = xs + m * stride + p * (COLS + 4), sum = 0.0f;
#pragma unroll
    for (int c = 0; c < COLS; c += 4) {
      float4 v = *(float4 *)(x + c);
      sum += (v.x + v.y) + (v.z + v.w);
      *(float4 *)(x + c) = make_float4(v.x * AMK_QX_SCALE, v.y * AMK_QX_SCALE,
                                       v.z * AMK_QX_SCALE, v.w * AMK_QX_SCALE);
    }
    x[COLS] = sum * OFFSET;
  }
}

// Column k of quantized row `row` as a float (the general path).
template <int QDT>
__device__ __forceinline__ float amk_qelem(const unsigned char *row, long long k) {
  if constexpr (QDT == AMK_ABI_DTYPE_I8) {
    return (float)(signed char)row[k];
  } else {
    unsigned int b = row[k >> 1];
    return (float)((int)((k & 1) ? (b >> 4) : (b & 0xFu)) - 8);
  }
}

// Whether the 16-byte path applies: whole pieces per row, aligned rows, one
// group per piece.
template <int QDT, int K, int GROUP> __device__ constexpr bool amk_qvec_ok() {
  return K % AmkQuant<QDT>::COLS == 0 && GROUP % AmkQuant<QDT>::COLS == 0 &&
         AmkQuant<QDT>::row_bytes(K) % 16 == 0;
}

// R rows of a warp at once (rows r0 + i * AMK_NWARPS, those below `rows`),
// U 16-byte loads of each in flight, their scales loaded beside them. xs is
// staged with a 16-byte gap after each piece's COLS floats (amk_xpad): with
// pieces 64 or 128 bytes apart the lanes of a quarter-warp all read one
// group of banks (8-way conflicts for i4: an 8B int4 step took 13.4 ms).
template <int QDT, int SDT, int K, int GROUP, int R, int U>
__device__ __forceinline__ void amk_qrows_load(const void *Q, const void *S, const long long *wrow,
                                               int valid, int v, uint4 (&q)[R][U],
                                               float (&sc)[R][U]) {
  constexpr int COLS = AmkQuant<QDT>::COLS, NG = (K + GROUP - 1) / GROUP;
  constexpr long long RB = AmkQuant<QDT>::row_bytes(K);
#pragma unroll
  for (int i = 0; i < R; i++) {
    if (i < valid) {
      const char *base = (const char *)Q + wrow[i] * RB;
#pragma unroll
      for (int u = 0; u < U; u++) {
        q[i][u] = amk_ldw16(base + (long long)(v + 32 * u) * 16);
        sc[i][u] = amk_ld<SDT>(S, wrow[i] * NG + (long long)(v + 32 * u) * COLS / GROUP);
      }
    }
  }
}
template <int QDT, int R, int U>
__device__ __forceinline__ void amk_qrows_sum(const uint4 (&q)[R][U], const float (&sc)[R][U],
                                              int valid, int v, const float *xs, float *acc) {
  constexpr int COLS = AmkQuant<QDT>::COLS;
#pragma unroll
  for (int i = 0; i < R; i++) {
    if (i < valid) {
#pragma unroll
      for (int u = 0; u < U; u++)
        acc[i] += amk_qdot16<QDT>(q[i][u], xs + (v + 32 * u) * (COLS + 4)) * sc[i][u];
    }
  }
}
template <int QDT, int SDT, int K, int GROUP, int R, int U>
__device__ __forceinline__ void amk_qrows_dot(const void *Q, const void *S, const long long *wrow,
                                              int valid, const float *xs, float *out) {
  int lane = threadIdx.x & 31;
  constexpr int COLS = AmkQuant<QDT>::COLS, NV = K / COLS, NG = (K + GROUP - 1) / GROUP;
  constexpr long long RB = AmkQuant<QDT>::row_bytes(K);
  float acc[R];
#pragma unroll
  for (int i = 0; i < R; i++)
    acc[i] = 0.0f;
  int v = lane;
  for (; v + 32 * (U - 1) < NV; v += 32 * U) {
    uint4 q[R][U];
    float sc[R][U];
    amk_qrows_load<QDT, SDT, K, GROUP, R, U>(Q, S, wrow, valid, v, q, sc);
    amk_qrows_sum<QDT, R, U>(q, sc, valid, v, xs, acc);
  }
  // The last pieces in one batch (amk_gemv_tail: an 8B down row of int8
  // leaves 4 of 28 pieces a lane after 3 batches of 8).
  constexpr int UT = amk_gemv_tail(NV, U);
  if constexpr (UT > 0) {
    uint4 q[R][UT];
    float sc[R][UT];
    amk_qrows_load<QDT, SDT, K, GROUP, R, UT>(Q, S, wrow, valid, v, q, sc);
    amk_qrows_sum<QDT, R, UT>(q, sc, valid, v, xs, acc);
  } else {
    for (; v < NV; v += 32) {
#pragma unroll
      for (int i = 0; i < R; i++) {
        if (i < valid) {
          uint4 q = amk_ldw16((const char *)Q + wrow[i] * RB + (long long)v * 16);
          float sc = amk_ld<SDT>(S, wrow[i] * NG + (long long)v * COLS / GROUP);
          acc[i] += amk_qdot16<QDT>(q, xs + v * (COLS + 4)) * sc;
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < R; i++)
    out[i] = amk_warp_sum(acc[i]) * AMK_QDOT_UNSCALE;
}

// ---- the quantized GEMV through per-warp stages in shared memory ----------------
//
// With the weights in registers, ptxas issued only three or four of a
// row's 16-byte loads before summing the first (Nsight Compute on the 8B
// int8 step, H100: the GEMVs spent half their samples waiting on those
// loads), so a quantized tile streamed 11-16 GB/s per SM where a bf16 one
// streams 24. Here each lane copies its pieces (cp.async: no register holds
// a load in flight) into its own slots of a ring of AMK_QGEMV_STAGES stages
// per warp, each stage P pieces of every lane and the 4-byte words that hold
// their scales; a lane reads back only what it copied, so
// cp.async.wait_group is the only synchronisation. A warp walks its rows
// (warp, warp + AMK_NWARPS, ...) stage by stage, and the first stages are
// issued before the input is staged (weights never wait). Pointers advance
// by constant strides: a piece's scale is SSTEP scales after the previous
// one's, and with 16-bit scales of even rows and steps the half a lane wants
// is the same in every word it reads.
#ifndef AMK_QGEMV_STAGES
#define AMK_QGEMV_STAGES 4
#endif
// Stages issued before the input is staged (the rest after it): copies
// issued first delay the prologue's own reads of the input. int4 tiles
// issue none: the prologue and the split loop's input preparation are a
// third of an 8B int4 gate|up tile; with none, and those inputs read in
// 16-byte loads (AmkQSplit::run_mma), its gate|up and down tiles were 1.1-1.5
// us shorter and the step 2.5-4.3% faster (either change alone: 1-2%
// slower). int8's one was as fast as none. AMK_CUDA_QGEMV_EARLY=N sets both.
#ifndef AMK_QGEMV_EARLY
#define AMK_QGEMV_EARLY 1
#endif
#ifndef AMK_QGEMV_EARLY_I4
#define AMK_QGEMV_EARLY_I4 0
#endif

// Rows a warp streams together through one stage (1 or 2): each piece's
// inputs are read from shared memory once for all of them. Two were no
// faster on an H100 (8B int8 5.38 ms against 5.36, int4 4.41 against 4.23,
// 1B int4 0.91 against 0.82: more spills) though Nsight Compute had the
// one-row loop waiting on shared memory for half its samples.
#ifndef AMK_QGEMV_STAGE_ROWS
#define AMK_QGEMV_STAGE_ROWS 1
#endif
// Both staged paths: a thread's 16-byte piece and the 4-byte word holding
// its scale, read back from its own slots; the scale from its word (the
// half at `shift` for 16-bit scales).
__device__ __forceinline__ uint4 amk_lds16(unsigned addr) {
  uint4 q;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
               : "r"(addr));
  return q;
}
__device__ __forceinline__ unsigned amk_lds32(unsigned addr) {
  unsigned word;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(word) : "r"(addr));
  return word;
}
// A store to shared memory under a predicate, not a branch: a branch
// around a warp's few stores cost the split loop a convergence region a
// stage (BSSY/BSYNC, waiting on branch resolution).
__device__ __forceinline__ void amk_sts32_if(unsigned addr, float v, bool p) {
  asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\t@q st.shared.f32 [%0], %1;\n\t}" ::"r"(addr),
               "f"(v), "r"((unsigned)p)
               : "memory");
}
// cp.async with both addresses as a register and a constant offset, so that
// a stage's copies share one register each: with an address register per
// copy, ptxas reused one that an earlier copy still held, and that write
// waited for the copy (Nsight Compute: a twelfth of the 8B int8 gate|up
// loop's samples).
template <unsigned DST_OFF, long long SRC_OFF>
__device__ __forceinline__ void amk_cp_async16_at(unsigned dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0+%2], [%1+%3], 16;" ::"r"(dst), "l"(src), "n"(DST_OFF),
               "n"(SRC_OFF)
               : "memory");
}
template <unsigned DST_OFF, long long SRC_OFF>
__device__ __forceinline__ void amk_cp_async4_at(unsigned dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0+%2], [%1+%3], 4;" ::"r"(dst), "l"(src), "n"(DST_OFF),
               "n"(SRC_OFF)
               : "memory");
}
// f(AmkIndex<i>{}) for i in [0, N), each i a constant (for the offsets above).
template <int I> struct AmkIndex {
  static constexpr int value = I;
};
template <int N, int I = 0, class F> __device__ __forceinline__ void amk_unroll(F &&f) {
  if constexpr (I < N) {
    f(AmkIndex<I>{});
    amk_unroll<N, I + 1>(f);
  }
}
template <int SDT> __device__ __forceinline__ float amk_scale_of_word(unsigned word, int shift) {
  if constexpr (SDT == AMK_ABI_DTYPE_F32)
    return __uint_as_float(word);
  else if constexpr (SDT == AMK_ABI_DTYPE_F16)
    return amk_h2f((unsigned short)(word >> shift));
  else
    return amk_bf2f((unsigned short)(word >> shift));
}
// Both staged paths: the first AMK_QGEMV_EARLY of a ring's D stages are
// issued before the input is staged, the rest after (fill).
template <int D, int QDT, class Ring> __device__ __forceinline__ void amk_stages_early(Ring &ring) {
  constexpr int EARLY = QDT == AMK_ABI_DTYPE_I4 ? AMK_QGEMV_EARLY_I4 : AMK_QGEMV_EARLY;
#pragma unroll 1
  for (int t = 0; t < (EARLY < D ? EARLY : D); t++)
    ring.issue();
}
template <int D, class Ring> __device__ __forceinline__ void amk_stages_fill(Ring &ring) {
#pragma unroll 1
  while (ring.issued < D)
    ring.issue();
}

template <int QDT, int SDT, int K, int GROUP> struct AmkQStageShape {
  static constexpr int COLS = AmkQuant<QDT>::COLS, NV = K / COLS, PER = NV / 32;
  static constexpr int P = PER % 4 == 0 ? 4 : PER % 2 == 0 ? 2 : 1; // pieces a lane a stage
                                                                     // (codegen.c's qstage_pieces)
  static constexpr int RW = AMK_QGEMV_STAGE_ROWS;
  static constexpr int NG = (K + GROUP - 1) / GROUP;
  static constexpr int SSTEP = GROUP > 0 && (32 * COLS) % GROUP == 0 ? 32 * COLS / GROUP : 0;
  static constexpr int SBYTES = SDT == AMK_ABI_DTYPE_F32 ? 4 : 2;
  static constexpr int STAGE_BYTES = RW * P * 32 * (16 + 4); // codegen.c's stage_bytes
  static constexpr bool OK = AMK_QGEMV_STAGES > 0 && amk_qvec_ok<QDT, K, GROUP>() &&
                             NV % 32 == 0 && SSTEP > 0 && (RW == 1 || RW == 2) &&
                             (SDT == AMK_ABI_DTYPE_F32 ||
                              ((SDT == AMK_ABI_DTYPE_F16 || SDT == AMK_ABI_DTYPE_BF16) &&
                               NG % 2 == 0 && SSTEP % 2 == 0));
};
// Whether the staged path applies: whole pieces, every lane the same number
// of them a row, a scale step of whole scales (even ones for 16-bit scales).
template <int QDT, int SDT, int K, int GROUP> __device__ constexpr bool amk_qstaged_ok() {
  return AmkQStageShape<QDT, SDT, K, GROUP>::OK;
}

// A warp's row: stack index s, column c; the next is AMK_NWARPS rows on.
struct AmkQRow {
  int s, c;
  __device__ __forceinline__ void next(int n_tile) {
    c += AMK_NWARPS;
    while (c >= n_tile) {
      c -= n_tile;
      s++;
    }
  }
};

// A stage holds, for each of its RW rows i and pieces p, the lanes' 16-byte
// pieces at (i * P + p) * 512 and their scale words at RW * P * 512 +
// (i * P + p) * 128.
template <int QDT, int SDT, int K, int NOUT, int STACK, int GROUP> struct AmkQStaged {
  using Shape = AmkQStageShape<QDT, SDT, K, GROUP>;
  static constexpr int COLS = Shape::COLS, PER = Shape::PER, P = Shape::P, NG = Shape::NG;
  static constexpr int RW = Shape::RW, D = AMK_QGEMV_STAGES, SB = Shape::SBYTES;
  static constexpr int STAGE = Shape::STAGE_BYTES, SCALES = RW * P * 512;
  static constexpr long long RB = AmkQuant<QDT>::row_bytes(K);
  static_assert((D & (D - 1)) == 0, "AMK_QGEMV_STAGES must be a power of two");
  const char *Q, *S;
  const char *wp[RW], *sp[RW]; // each row's next piece for the lane, and its scale's word
  unsigned ring;               // this warp's stages (shared memory address)
  int n_off, n_tile, my_rows, groups, issued, stages, in_row, group;
  AmkQRow load; // the loader's group's first row

  __device__ __forceinline__ void row_pointers() {
    int lane = threadIdx.x & 31;
    long long first = (long long)lane * COLS / GROUP; // the lane's first scale in a row
    AmkQRow r = load;
#pragma unroll
    for (int i = 0; i < RW; i++) {
      long long wrow = (long long)r.s * NOUT + n_off + r.c;
      wp[i] = Q + wrow * RB + lane * 16;
      sp[i] = S + (wrow * NG + (SB == 2 ? first & ~1ll : first)) * SB;
      r.next(n_tile);
    }
  }
  // The warp's ring at `ring_base` (AMK_NWARPS x D stages); issues the first
  // AMK_QGEMV_EARLY stages (fill() the rest of the first D).
  __device__ __forceinline__ void begin(const void *Q_, const void *S_, char *ring_base,
                                        int n_off_, int n_tile_) {
    Q = (const char *)Q_;
    S = (const char *)S_;
    n_off = n_off_;
    n_tile = n_tile_;
    int warp = threadIdx.x >> 5, rows = STACK * n_tile;
    ring = amk_smem_addr(ring_base) + (unsigned)(warp * D * STAGE);
    my_rows = warp < rows ? (rows - warp + AMK_NWARPS - 1) / AMK_NWARPS : 0;
    groups = (my_rows + RW - 1) / RW;
    stages = groups * (PER / P);
    issued = 0;
    in_row = 0;
    group = 0;
    load.s = n_tile > 0 ? warp / n_tile : 0;
    load.c = warp - load.s * n_tile;
    if (my_rows > 0)
      row_pointers();
    amk_stages_early<D, QDT>(*this);
  }
  __device__ __forceinline__ void fill() { amk_stages_fill<D>(*this); }
  // Copies the next stage (if any) into its slot; one commit group a call.
  // A group's rows past the warp's last are not copied (nor stored).
  __device__ __forceinline__ void issue() {
    if (issued < stages) {
      int lane = threadIdx.x & 31;
      unsigned slot = ring + (unsigned)((issued & (D - 1)) * STAGE);
      int valid = my_rows - group * RW;
#pragma unroll
      for (int i = 0; i < RW; i++) {
        if (i < valid) {
#pragma unroll
          for (int p = 0; p < P; p++) {
            amk_cp_async16(slot + (unsigned)((i * P + p) * 512 + lane * 16), wp[i] + p * 512,
                           true);
            amk_cp_async4(slot + (unsigned)(SCALES + (i * P + p) * 128 + lane * 4),
                          sp[i] + p * Shape::SSTEP * SB);
          }
        }
        wp[i] += P * 512;
        sp[i] += P * Shape::SSTEP * SB;
      }
      in_row += P;
      if (in_row == PER) {
        in_row = 0;
        group++;
#pragma unroll
        for (int i = 0; i < RW; i++)
          load.next(n_tile);
        if (group < groups)
          row_pointers();
      }
    }
    issued++;
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  // Sums every piece in order; store(i, wrow, col, sum) once a row's sum is
  // in every lane (i: the row's index in the tile, s * n_tile + c).
  template <typename Store> __device__ __forceinline__ void run(const float *xs, Store store) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    AmkQRow at;
    at.s = n_tile > 0 ? warp / n_tile : 0;
    at.c = warp - at.s * n_tile;
    // 16-bit scales: the lane's half of each word it reads.
    int shift = SB == 2 ? (int)(((long long)lane * COLS / GROUP) & 1) * 16 : 0;
    int t = 0;
    amk_mark_loop();
#pragma unroll 1
    for (int g = 0; g < groups; g++) {
      float acc[RW];
#pragma unroll
      for (int i = 0; i < RW; i++)
        acc[i] = 0.0f;
      const float *xp = xs + lane * (COLS + 4);
#pragma unroll 1
      for (int j = 0; j < PER / P; j++, t++) {
        amk_cp_async_wait<D - 1>();
        unsigned slot = ring + (unsigned)((t & (D - 1)) * STAGE);
#pragma unroll
        for (int p = 0; p < P; p++) {
          float x[COLS];
          amk_qx_load<QDT>(xp, x);
          float off = xp[COLS];
#pragma unroll
          for (int i = 0; i < RW; i++) {
            uint4 q = amk_lds16(slot + (unsigned)((i * P + p) * 512 + lane * 16));
            unsigned word = amk_lds32(slot + (unsigned)(SCALES + (i * P + p) * 128 + lane * 4));
            acc[i] += amk_qdot16r<QDT>(q, x, off) * amk_scale_of_word<SDT>(word, shift);
          }
          xp += 32 * (COLS + 4);
        }
        // Into the stage just read: its loads above are done (their values
        // are used), and the copy lands no sooner than its round trip.
        asm volatile("" ::: "memory");
        issue();
      }
      int valid = my_rows - g * RW;
#pragma unroll
      for (int i = 0; i < RW; i++) {
        float sum = amk_warp_sum(acc[i]) * AMK_QDOT_UNSCALE;
        if (i < valid)
          store(at.s * n_tile + at.c, (long long)at.s * NOUT + n_off + at.c,
                (long long)n_off + at.c, sum);
        at.next(n_tile);
      }
    }
    amk_mark_looped(); // thread 0's warp's rows (no barrier here)
  }
};

// ---- the quantized GEMV with K split over the block (STAGED == 2) ---------------
//
// The staged path above gives each warp whole rows, so every lane reads its
// pieces' inputs from shared memory again for every row: 4 bytes of input
// per int8 weight beside the weight's own copy in and out, which is about
// what an SM's shared memory moves while HBM delivers its share (Nsight
// Compute had that loop waiting on shared memory for half its samples).
// Here each thread owns the same pieces of every row instead: thread tl of
// a group of W warps takes pieces tl, tl + 32 W, ... (PT of them) of each
// row the group takes, holds those pieces' inputs in registers for the
// whole tile and applies them to each stage's R rows, whose pieces it
// copied itself (cp.async into its own slots, so cp.async.wait_group is the
// only synchronisation, as above).
// A warp sums its R rows' partial dots in one transposed exchange (R - 1 +
// log2(32 / R) shuffles rather than 5 a row), and the W warps' sums meet in
// shared memory; after one barrier thread i stores row i. A group is as
// many warps (a power of two) as a row's pieces need, so short rows leave
// several groups, each taking every RG-th stage of rows.
#ifndef AMK_QSPLIT_STAGES
#define AMK_QSPLIT_STAGES 4
#endif
// A thread's pieces a stage (rows x its pieces of a row), before rounding
// the rows down to a power of two.
#ifndef AMK_QSPLIT_PIECES
#define AMK_QSPLIT_PIECES 4
#endif
// Its int4 dots on the tensor cores (run_mma, below; codegen: AMK_CUDA_QSPLIT_MMA).
#ifndef AMK_QSPLIT_MMA
#define AMK_QSPLIT_MMA 0
#endif
// Its int8 dots too (codegen: on with AMK_QSPLIT_MMA unless
// AMK_CUDA_QSPLIT_MMA_I8=0).
#ifndef AMK_QSPLIT_MMA_I8
#define AMK_QSPLIT_MMA_I8 0
#endif
__device__ constexpr int amk_pow2_floor(int n) { return n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1; }
__device__ constexpr int amk_pow2_ceil(int n, int cap) {
  int p = 1;
  while (p < n && p < cap)
    p *= 2;
  return p;
}
template <int QDT, int SDT, int K, int GROUP> struct AmkQSplitShape {
  static constexpr int COLS = AmkQuant<QDT>::COLS, NV = K / COLS;
  static constexpr int W = amk_pow2_ceil((NV + 31) / 32, AMK_NWARPS); // warps a group
  static constexpr int RG = AMK_NWARPS / W;                           // groups
  static constexpr int NTG = 32 * W;                                  // threads a group
  static constexpr int PT = (NV + NTG - 1) / NTG;                     // pieces a thread a row
  static constexpr int R = amk_pow2_floor(AMK_QSPLIT_PIECES / PT);    // rows a stage
  static constexpr int SLOTS = R * PT;                                // a thread's pieces a stage
  static constexpr int NG = (K + GROUP - 1) / GROUP;
  static constexpr int SB = SDT == AMK_ABI_DTYPE_F32 ? 4 : 2;
  static constexpr int STAGE = AMK_NT * SLOTS * (16 + 4); // gen_gemv_quant's stage_bytes
  // A thread's pieces' inputs stay in registers: at most 34 floats (int8 K
  // up to 8192 with 256 threads; int4 up to 8192). With more, read again
  // every stage, the 8B's int8 down projection (K 14336, 4 pieces a
  // thread) was slower than the per-warp staged path (32.3 us a tile
  // against 29.1). 16-bit scales: rows of an even number of groups keep a
  // piece's scale in the same half of its word in every row.
  static constexpr bool SCALES_OK =
      SDT == AMK_ABI_DTYPE_F32 ||
      ((SDT == AMK_ABI_DTYPE_F16 || SDT == AMK_ABI_DTYPE_BF16) && NG % 2 == 0);
  static constexpr bool OK = AMK_QSPLIT_STAGES > 0 && amk_qvec_ok<QDT, K, GROUP>() &&
                             AMK_NWARPS % W == 0 && PT * (COLS + 1) <= 34 && SCALES_OK;
  // The tensor-core form (run_mma) holds a piece's inputs as 16-bit pairs
  // (16 registers an int4 piece, 8 an int8 one), so rows up to twice as
  // long stay in registers (the 8B's down projection, K 14336: 2 int4
  // pieces a thread; its int8 rows, 4 pieces a thread, come one a stage,
  // not in pairs, so they keep the per-warp stages); codegen's mma_fits.
  static constexpr bool OK_MMA = AMK_QSPLIT_MMA != 0 && AMK_QSPLIT_STAGES > 0 &&
                                 (QDT == AMK_ABI_DTYPE_I4 ||
                                  (QDT == AMK_ABI_DTYPE_I8 && AMK_QSPLIT_MMA_I8 != 0)) &&
                                 amk_qvec_ok<QDT, K, GROUP>() &&
                                 AMK_NWARPS % W == 0 && PT * COLS / 2 <= 32 && R % 2 == 0 &&
                                 GROUP % (4 * COLS) == 0 && NV % 4 == 0 && SCALES_OK;
};
// The split loop's dots on the tensor cores (AMK_QSPLIT_MMA: int4 weights,
// 16-bit inputs; int8 below). The integers on the CUDA cores cost a permute
// and an FMA a weight besides the nibbles' masks, about 2.4 instructions a weight, and
// the split loop is bound by its instructions (docs/Quantization.md); here
// one 3-input LOP makes a pair of weights f16 1024 + q + 8 (the odd nibbles
// 1024 + 16 (q + 8), amk_q4mma_piece) and mma.sync m16n8k16 multiplies a
// word of each of two rows (A) by the lane's own inputs (B), as
// amk_qmma_rows does: lane 4m + m/2 holds the two rows' dots over lanes
// 4m..4m+3, about 0.6 instructions a weight. The inputs go to f16 as
// int8's do (below); the offsets times the inputs' sums come off once per
// piece and row. Four consecutive pieces share their group's scale (a
// group a multiple of 128 columns), and a stage's rows go in pairs.
template <int QDT> struct AmkQmma;
__device__ __forceinline__ void amk_q4mma_piece(uint4 qa, uint4 qb, const uint4 (&x)[4],
                                                float *d0, float *d1);
// int8 (AMK_QSPLIT_MMA_I8): bf16's 8 significant bits cannot hold MAGIC + a
// byte, so the weights go to f16 as 1024 + q + 128 (one XOR and two byte
// permutes a word, no masks), and so do the inputs, each group of four
// lanes' scaled by a power of two that puts its largest at 2^13 (exact for
// a bf16 input within 2^27 of it, and no f16 overflow whatever the
// activations' range), the group's sums scaled back with its scale.
__device__ __forceinline__ void amk_q8mma_piece(uint4 qa, uint4 qb, const uint4 (&x)[2],
                                                float *d0, float *d1);
template <int QDT, int SDT, int K, int GROUP> __device__ constexpr bool amk_qsplit_ok() {
  return AmkQSplitShape<QDT, SDT, K, GROUP>::OK;
}
// Whether the split GEMV takes the tensor cores for this input type.
template <int QDT, int MDT, int SDT, int K, int GROUP>
__device__ constexpr bool amk_qsplit_mma_ok() {
  return AmkQSplitShape<QDT, SDT, K, GROUP>::OK_MMA &&
         (MDT == AMK_ABI_DTYPE_BF16 || MDT == AMK_ABI_DTYPE_F16);
}

// v[0..R) per lane: afterwards every lane holds the warp's sum of row
// amk_qsplit_row<R>(lane) in v[0]. Each round a lane keeps half of its rows
// and adds its partner's copy of them.
template <int R> __device__ __forceinline__ void amk_qsplit_reduce(float (&v)[R]) {
  int lane = threadIdx.x & 31;
  int n = R, off = 16;
#pragma unroll
  for (int round = 0; round < 3; round++) {
    if (n > 1) {
      int half = n / 2;
      bool upper = (lane & off) != 0;
#pragma unroll
      for (int k = 0; k < R / 2; k++) {
        if (k < half) {
          float send = upper ? v[k] : v[k + half];
          float keep = upper ? v[k + half] : v[k];
          v[k] = keep + __shfl_xor_sync(0xffffffffu, send, off);
        }
      }
      n = half;
      off >>= 1;
    }
  }
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1)
    if (o <= off)
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
}
template <int R> __device__ __forceinline__ int amk_qsplit_row(int lane) {
  int row = 0, n = R, off = 16;
#pragma unroll
  for (int round = 0; round < 3; round++) {
    if (n > 1) {
      n /= 2;
      if (lane & off)
        row += n;
      off >>= 1;
    }
  }
  return row;
}
// The lanes that store a row's sum: one of each set that holds the same row.
template <int R> __device__ __forceinline__ bool amk_qsplit_writer(int lane) {
  constexpr int LOW = 32 / R; // lanes that end with the same row
  return (lane & (LOW - 1)) == 0;
}

// A stage holds, for each of its SLOTS pieces e (row r, piece j: e = r * PT
// + j) and each thread t, the piece at (e * AMK_NT + t) * 16 and the word
// holding its scale at SLOTS * AMK_NT * 16 + (e * AMK_NT + t) * 4.
// (Copying a warp's 512 contiguous bytes of a row with one cp.async.bulk
// from its lane 0, completing on a per-warp mbarrier, was slower: the 8B
// int8 step 4.72 ms against 4.27, docs/Quantization.md.)
template <int QDT, int SDT, int K, int NOUT, int STACK, int GROUP> struct AmkQSplit {
  using Shape = AmkQSplitShape<QDT, SDT, K, GROUP>;
  static constexpr int COLS = Shape::COLS, NV = Shape::NV, W = Shape::W, RG = Shape::RG;
  static constexpr int NTG = Shape::NTG, PT = Shape::PT, R = Shape::R, SLOTS = Shape::SLOTS;
  static constexpr int NG = Shape::NG, SB = Shape::SB, D = AMK_QSPLIT_STAGES;
  static constexpr long long RB = AmkQuant<QDT>::row_bytes(K);
  static_assert((D & (D - 1)) == 0, "AMK_QSPLIT_STAGES must be a power of two");
  // run_mma's row sums, two buffers of [R][8] floats a warp, in the staged inputs' space
  // (xs), which holds at least this many floats (amk_gemv_quant; codegen's
  // split base): short rows' xs is smaller than the block's sums.
  static constexpr int SUMS_FLOATS = AMK_NWARPS * 16 * R;
  // The thread's first piece of the tile's first row, and the word of its
  // scale (pieces j > 0 of a row are NTG * 16 bytes on; their scale words
  // at soff[j]).
  const char *wbase, *sbase;
  int soff[PT];
  unsigned ring; // the block's stages (shared memory address)
  // The thread's first piece slot and scale word in stage 0 (kept: ptxas
  // read the thread's index again every stage).
  unsigned mine, mine_s;
  int n_off, n_tile, rows, stages, issued, group, tl, wig;
  // Row offsets from the tile's first fit 32 bits when a whole stack of
  // the matrix does (every shape here: the 8B head is 525 MB of int8).
  static constexpr bool OFF32 = (long long)STACK * NOUT * RB < (1ll << 31) &&
                                (long long)STACK * NOUT * NG * SB < (1ll << 31);

  // The group's rows: stages g, g + RG, ... of R rows each.
  __device__ __forceinline__ void begin(const void *Q_, const void *S_, char *ring_base,
                                        int n_off_, int n_tile_) {
    n_off = n_off_;
    n_tile = n_tile_;
    ring = amk_smem_addr(ring_base);
    mine = ring + threadIdx.x * 16u;
    mine_s = ring + (unsigned)(SLOTS * AMK_NT * 16) + threadIdx.x * 4u;
    rows = STACK * n_tile;
    int warp = threadIdx.x >> 5;
    group = warp / W;
    wig = warp - group * W;
    tl = threadIdx.x - group * NTG;
    wbase = (const char *)Q_ + (long long)n_off * RB + (long long)tl * 16;
    sbase = (const char *)S_ + (long long)n_off * NG * SB;
#pragma unroll
    for (int j = 0; j < PT; j++) {
      int sidx = (tl + NTG * j) * COLS / GROUP;
      soff[j] = (SB == 2 ? sidx & ~1 : sidx) * SB;
    }
    int all = (rows + R - 1) / R;
    stages = all > group ? (all - group + RG - 1) / RG : 0;
    issued = 0;
    amk_stages_early<D, QDT>(*this);
  }
  __device__ __forceinline__ void fill() { amk_stages_fill<D>(*this); }
  // The thread's first piece of matrix row m (counted from the tile's first
  // row), and that row's scales.
  __device__ __forceinline__ const char *row_piece(int m) const {
    if constexpr (OFF32)
      return wbase + (unsigned)m * (unsigned)RB;
    else
      return wbase + (long long)m * RB;
  }
  __device__ __forceinline__ const char *row_scales(int m) const {
    if constexpr (OFF32)
      return sbase + (unsigned)m * (unsigned)(NG * SB);
    else
      return sbase + (long long)m * NG * SB;
  }
  // Copies the group's next stage (if any) into its slot; one commit group a
  // call. Rows past the tile's last are not copied (nor stored). Tile row r
  // is row r of the matrix after the tile's first, plus NOUT - n_tile for
  // each stacked matrix before its own (a compare for two; the loop, with
  // 64-bit pointer steps, cost the 8B int8 gate|up tiles about a third of
  // their instructions).
  __device__ __forceinline__ void issue() {
    if (issued < stages) {
      const unsigned at = (unsigned)((issued & (D - 1)) * Shape::STAGE);
      const unsigned dst = mine + at, dst_s = mine_s + at;
      int row0 = (group + issued * RG) * R;
      // A stage of R whole rows inside one stacked matrix (all but a tile's
      // last stage and the one across the gate|up seam) reads R consecutive
      // rows: one row offset, the rest constants in the copies' addresses
      // (the general loop below spent about 20 instructions a row on its
      // offsets, a quarter of the 8B int4 gate|up loop's samples).
      bool one_matrix = true;
      if constexpr (STACK == 2)
        one_matrix = row0 + R <= n_tile || row0 >= n_tile;
      else if constexpr (STACK > 2)
        one_matrix = row0 / n_tile == (row0 + R - 1) / n_tile;
      if (row0 + R <= rows && one_matrix) {
        int m = row0;
        if constexpr (STACK == 2) {
          m = row0 >= n_tile ? row0 + (NOUT - n_tile) : row0;
        } else if constexpr (STACK > 2) {
          m = row0 + row0 / n_tile * (NOUT - n_tile);
        }
        const char *wp = row_piece(m), *sp = row_scales(m);
        amk_unroll<PT>([&](auto J) {
          constexpr int j = decltype(J)::value;
          if (tl + NTG * j < NV) {
            const char *sj = sp + soff[j];
            amk_unroll<R>([&](auto I) {
              constexpr int i = decltype(I)::value, e = i * PT + j;
              amk_cp_async16_at<(unsigned)(e * AMK_NT * 16), i * RB + NTG * 16ll * j>(dst, wp);
              amk_cp_async4_at<(unsigned)(e * AMK_NT * 4), (long long)i * NG * SB>(dst_s, sj);
            });
          }
        });
        issued++;
        asm volatile("cp.async.commit_group;" ::: "memory");
        return;
      }
      // The rest, a row at a time (rolled: it runs at most twice a tile).
#pragma unroll 1
      for (int i = 0; i < R; i++) {
        int r = row0 + i;
        if (r < rows) {
          int m = r;
          if constexpr (STACK == 2) {
            m = r >= n_tile ? r + (NOUT - n_tile) : r;
          } else if constexpr (STACK > 2) {
            for (int c = r; c >= n_tile; c -= n_tile)
              m += NOUT - n_tile;
          }
          const char *wp = row_piece(m), *sp = row_scales(m);
#pragma unroll
          for (int j = 0; j < PT; j++) {
            if (tl + NTG * j < NV) {
              int e = i * PT + j;
              amk_cp_async16(dst + (unsigned)(e * AMK_NT * 16), wp + NTG * 16 * j, true);
              amk_cp_async4(dst_s + (unsigned)(e * AMK_NT * 4), sp + soff[j]);
            }
          }
        }
      }
    }
    issued++;
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  // Every stage of the group, its warps' sums into part[row * W + warp in
  // group]; then (all threads, after a barrier) store(i, wrow, col, sum)
  // for each row i of the tile. MDT: the staged input's type (the tensor
  // cores take it where amk_qsplit_mma_ok holds).
  template <int MDT, typename Store>
  __device__ __forceinline__ void run(float *xs, float *part, Store store) {
    if constexpr (amk_qsplit_mma_ok<QDT, MDT, SDT, K, GROUP>())
      run_mma<MDT>(xs, part, store);
    else
      run_cores(xs, part, store);
  }
  template <typename Store>
  __device__ __forceinline__ void run_cores(const float *xs, float *part, Store store) {
    int lane = threadIdx.x & 31;
    float x[PT][COLS], off[PT];
#pragma unroll
    for (int j = 0; j < PT; j++) {
      int p = tl + NTG * j;
      if (p < NV) {
        amk_qx_load<QDT>(xs + p * (COLS + 4), x[j]);
        off[j] = xs[p * (COLS + 4) + COLS];
      }
    }
    amk_mark_loop();
#pragma unroll 1
    for (int t = 0; t < stages; t++) {
      unsigned at = stage_slot(t);
      float acc[R] = {};
#pragma unroll
      for (int j = 0; j < PT; j++) {
        int p = tl + NTG * j;
        if (p < NV) {
          int shift = scale_shift(p);
#pragma unroll
          for (int i = 0; i < R; i++) {
            int e = i * PT + j;
            acc[i] += amk_qdot16r<QDT>(piece(at, e), x[j], off[j]) *
                      amk_scale_of_word<SDT>(scale_word(at, e), shift);
          }
        }
      }
      // Into the stage just read: its loads above are done (their values
      // are used), and the copy lands no sooner than its round trip.
      asm volatile("" ::: "memory");
      issue();
      amk_qsplit_reduce<R>(acc);
      int row = (group + t * RG) * R + amk_qsplit_row<R>(lane);
      if (amk_qsplit_writer<R>(lane) && row < rows)
        part[row * W + wig] = acc[0];
    }
    finish(part, store, AMK_QDOT_UNSCALE);
  }
  // run's loop with the dots on the tensor cores (amk_q4mma_piece): the
  // thread's inputs in registers as 16-bit pairs in the order the pieces'
  // words give them (cvt packs two a instruction: the staged values are
  // already of that type, rounded by the prologue or read as such), and for
  // each of its pieces the offset term of its group of four lanes (the
  // weights enter as MAGIC + q + 8), summed from the packed values so that
  // it cancels exactly what the products hold. A stage's row sums: the 8
  // diagonal lanes' values through 32 floats of the warp's in xs (free once
  // the inputs are in registers), each row's 8 summed by one lane: one
  // store and two loads of latency where the shuffle tree had five rounds.
  template <int MDT, typename Store>
  __device__ __forceinline__ void run_mma(float *xs, float *part, Store store) {
    static_assert(R <= 8, "a row's eight partial sums a lane");
    constexpr bool I8 = QDT == AMK_ABI_DTYPE_I8;
    // The pairs are f16 whatever the inputs' type (amk_q8mma_piece,
    // amk_q4mma_piece): the offset each weight's form carries, for int4's
    // even nibbles (1024 + u) and, times its input / 16, its odd ones
    // (1024 + 16 u), and for int8 (1024 + q + 128).
    constexpr int PDT = AMK_ABI_DTYPE_F16;
    constexpr float BIAS = I8 ? 1024.0f + 128.0f : 1024.0f + 8.0f;
    constexpr float BIAS_ODD = I8 ? BIAS : 1024.0f + 16.0f * 8.0f;
    constexpr int XW = COLS / 8;                     // uint4 of packed inputs a piece
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    bool diag = (lane & 3) == (lane >> 3);
    int odd = (lane >> 2) & 1, m = lane >> 2;
    uint4 xb[PT][XW];
    float corr[PT], rescale[PT];
#pragma unroll
    for (int j = 0; j < PT; j++) {
      int p = tl + NTG * j;
      float sum = 0.0f, sum_odd = 0.0f;
      // The group's inputs times 2^-e, its largest at 2^13 or just above
      // (e clamped so that both 2^e and 2^-e are normal floats).
      float up = 1.0f; // 2^-e
      rescale[j] = 1.0f;
      // The piece's inputs, read once, 16 bytes a load (with int4's early
      // stages left out, AMK_QGEMV_EARLY_I4: the 8B int4 step 2.5-4.3%
      // faster; either change alone was slower).
      float4 in[COLS / 4];
#pragma unroll
      for (int k = 0; k < COLS / 4; k++)
        in[k] = p < NV ? *(const float4 *)(xs + p * (COLS + 4) + 4 * k)
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      {
        float big = 0.0f;
#pragma unroll
        for (int k = 0; k < COLS / 4; k++)
          big = fmaxf(fmaxf(big, fmaxf(fabsf(in[k].x), fabsf(in[k].y))),
                      fmaxf(fabsf(in[k].z), fabsf(in[k].w)));
        big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, 1));
        big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, 2));
        int e = big > 0.0f ? ((__float_as_int(big) >> 23) & 0xFF) - 127 - 13 : 0;
        e = e < -100 ? -100 : e > 100 ? 100 : e;
        up = __int_as_float((127 - e) << 23);
        rescale[j] = __int_as_float((127 + e) << 23);
      }
      // int4's odd nibbles enter times 16 (amk_q4mma_piece), their inputs / 16.
      const float f = up, f_odd = I8 ? up : up * 0.0625f;
#pragma unroll
      for (int k = 0; k < XW; k++) {
        const float4 a = in[2 * k], b = in[2 * k + 1];
        // int4: columns (c, c + 4) of a word a pair, the first in the low
        // half; int8: columns (c, c + 2) of each of its two words.
        unsigned w[4];
        if constexpr (I8) {
          w[0] = amk_pack16x2<PDT>(a.x * f, a.z * f);
          w[1] = amk_pack16x2<PDT>(a.y * f, a.w * f);
          w[2] = amk_pack16x2<PDT>(b.x * f, b.z * f);
          w[3] = amk_pack16x2<PDT>(b.y * f, b.w * f);
        } else {
          w[0] = amk_pack16x2<PDT>(a.x * f, b.x * f);
          w[1] = amk_pack16x2<PDT>(a.y * f_odd, b.y * f_odd);
          w[2] = amk_pack16x2<PDT>(a.z * f, b.z * f);
          w[3] = amk_pack16x2<PDT>(a.w * f_odd, b.w * f_odd);
        }
#pragma unroll
        for (int c = 0; c < 4; c++) {
          float pair = amk_h2f((unsigned short)w[c]) + amk_h2f((unsigned short)(w[c] >> 16));
          if (c % 2 == 1)
            sum_odd += pair;
          else
            sum += pair;
        }
        xb[j][k] = make_uint4(w[0], w[1], w[2], w[3]);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum_odd += __shfl_xor_sync(0xffffffffu, sum_odd, 1);
      sum_odd += __shfl_xor_sync(0xffffffffu, sum_odd, 2);
      corr[j] = BIAS * sum + BIAS_ODD * sum_odd;
    }
    // Every warp's inputs are in registers before xs holds row sums.
    __syncthreads();
    amk_mark_loop();
    // Two buffers of a stage's [R][8] diagonal sums a warp: stage t's go
    // into buffer t & 1, and lane i < R loads row i's eight of stage t - 1
    // as stage t begins and adds them after its dots, so that the loads'
    // round trip (and the stores' before them) hides behind the stage's
    // work instead of ending it (a sixth of the 8B int4 gate|up loop's
    // samples waited on those loads). Every lane loads (lane i reads row
    // i % R's), and the stores go under predicates, so that no branch
    // splits the warp in the loop.
    float *sums = xs + warp * (16 * R);
    const unsigned sums_at = amk_smem_addr(sums), part_at = amk_smem_addr(part);
    // int8: a stage's pieces and scale words are read into registers as
    // soon as the stage before has issued its copy (software pipelining:
    // read as the stage began, their round trip hid nothing, a tenth of the
    // 8B int8 gate|up loop's samples; that step 1% faster, its lm_head 7%).
    // Not int4: its inputs hold twice the registers, and the 8B int4 kernel
    // spilled (112 bytes) and was 2.7% slower.
    constexpr bool PIPE = I8;
    uint4 q[SLOTS];
    unsigned sw[SLOTS];
    auto load = [&](int t) {
      unsigned at = stage_slot(t);
#pragma unroll
      for (int e = 0; e < SLOTS; e++) {
        q[e] = piece(at, e);
        sw[e] = scale_word(at, e);
      }
    };
    if (PIPE && stages > 0)
      load(0);
#pragma unroll 1
    for (int t = 0; t < stages; t++) {
      if (!PIPE)
        load(t);
      const float *prev = sums + ((t - 1) & 1) * (8 * R) + (lane & (R - 1)) * 8;
      float4 pu = *(const float4 *)prev, pv = *(const float4 *)(prev + 4);
      float acc[R] = {};
#pragma unroll
      for (int j = 0; j < PT; j++) {
        int p = tl + NTG * j;
        int shift = scale_shift(p);
#pragma unroll
        for (int i = 0; i < R; i += 2) {
          int ea = i * PT + j, eb = ea + PT;
          uint4 qa = q[ea], qb = q[eb];
          unsigned swa = sw[ea], swb = sw[eb];
          float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          if constexpr (I8)
            amk_q8mma_piece(qa, qb, xb[j], d0, d1);
          else
            amk_q4mma_piece(qa, qb, xb[j], d0, d1);
          // Lanes past the row's pieces (a warp's lanes all issue the mma)
          // hold no scale: their group's sums are left out.
          if (p < NV) {
            float da = odd ? d0[1] + d1[1] : d0[0] + d1[0];
            float db = odd ? d0[3] + d1[3] : d0[2] + d1[2];
            float sa = amk_scale_of_word<SDT>(swa, shift), sb = amk_scale_of_word<SDT>(swb, shift);
            sa *= rescale[j];
            sb *= rescale[j];
            acc[i] += (da - corr[j]) * sa;
            acc[i + 1] += (db - corr[j]) * sb;
          }
        }
      }
      asm volatile("" ::: "memory");
      issue();
      if (PIPE && t + 1 < stages)
        load(t + 1);
      int prow = (group + (t - 1) * RG) * R + lane;
      amk_sts32_if(part_at + (unsigned)(prow * W + wig) * 4u,
                   ((pu.x + pu.y) + (pu.z + pu.w)) + ((pv.x + pv.y) + (pv.z + pv.w)),
                   t > 0 && lane < R && prow < rows);
      const unsigned cur = sums_at + (unsigned)((t & 1) * (8 * R) + m) * 4u;
#pragma unroll
      for (int i = 0; i < R; i++)
        amk_sts32_if(cur + (unsigned)(i * 8 * 4), acc[i], diag);
      __syncwarp();
    }
    int row = (group + (stages - 1) * RG) * R + lane;
    if (stages > 0 && lane < R && row < rows) {
      const float *last = sums + ((stages - 1) & 1) * (8 * R) + lane * 8;
      float4 u = *(const float4 *)last, v = *(const float4 *)(last + 4);
      part[row * W + wig] = ((u.x + u.y) + (u.z + u.w)) + ((v.x + v.y) + (v.z + v.w));
    }
    finish(part, store, 1.0f);
  }
  // Which half of its scale word piece p's 16-bit scale is in.
  __device__ __forceinline__ static int scale_shift(int p) {
    return SB == 2 ? (int)(((long long)p * COLS / GROUP) & 1) * 16 : 0;
  }
  // The thread's piece e of the stage at byte `at` of the ring, and the
  // word of its scale.
  __device__ __forceinline__ uint4 piece(unsigned at, int e) const {
    return amk_lds16(mine + at + (unsigned)(e * AMK_NT * 16));
  }
  __device__ __forceinline__ unsigned scale_word(unsigned at, int e) const {
    return amk_lds32(mine_s + at + (unsigned)(e * AMK_NT * 4));
  }
  // Stage t's place in the ring once its copies have landed.
  __device__ __forceinline__ unsigned stage_slot(int t) {
    amk_cp_async_wait<D - 1>();
    return (unsigned)((t & (D - 1)) * Shape::STAGE);
  }
  // After a barrier, each row's warp sums times `scale` stored (all threads).
  template <typename Store>
  __device__ __forceinline__ void finish(const float *part, Store store, float scale) {
    __syncthreads();
    amk_mark_looped();
    for (int i = threadIdx.x; i < rows; i += AMK_NT) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < W; w++)
        sum += part[i * W + w];
      int s = i / n_tile, c = i - s * n_tile;
      store(i, (long long)s * NOUT + n_off + c, (long long)n_off + c, sum * scale);
    }
  }
};

// The general path: one column at a time, each dequantized with its scale.
template <int QDT, int SDT, int K, int GROUP>
__device__ __forceinline__ float amk_qrow_dot_any(const void *Q, const void *S, long long wrow,
                                                  const float *xs) {
  constexpr int NG = (K + GROUP - 1) / GROUP;
  const unsigned char *row =
      (const unsigned char *)Q + wrow * AmkQuant<QDT>::row_bytes(K);
  float acc = 0.0f;
  for (int k = threadIdx.x & 31; k < K; k += 32)
    acc += amk_qelem<QDT>(row, k) * amk_ld<SDT>(S, wrow * NG + k / GROUP) * xs[k];
  return amk_warp_sum(acc);
}

// ---- the quantized GEMV on the tensor cores (bf16 or f16 activations) ------------
//
// Opt-in (AMK_CUDA_QGEMV_MMA=1): faster than amk_qrows_dot alone, slower in
// the megakernel so far (docs/Quantization.md has the numbers).
// The CUDA-core dot above spends about 7 instructions an i4 weight turning
// integers into floats and reads 4 bytes of input from shared memory per
// weight. Here mma.sync m16n8k16 takes the weights of two rows as A (row m
// from lanes 4m..4m+3, the other row as row m + 8), made exact 16-bit
// values by a shift, one 3-input LOP and one packed FMA per pair, and the
// inputs as B (the lanes' own columns, staged once as 16-bit values: exact
// when the program's activations are that type, since x, the norm output
// and SiLU's product are rounded to it), with fp32 accumulation (a 16-bit
// product is exact in fp32). B's column n comes from lanes 4n..4n+3, at the
// same k as their A values, so C[n][n] and C[n + 8][n] are the two rows'
// dots over those lanes' pieces (four consecutive 16-byte pieces: one group
// of scales when a group is a multiple of 4 pieces); lane 4n + n/2 holds
// them. The other C entries mix columns and are dropped.
//
// Layout of the staged input (xb): piece p (COLS columns) at p * XBS bytes
// (a 16-byte gap after each piece keeps the 8 lanes of a quarter-warp on
// distinct banks); inside, each word of weights (WC = COLS / 4 columns)
// has its WC inputs in the order its pairs are formed: i4 words give the
// nibble pairs (0,4) (1,5) (2,6) (3,7), i8 words the byte pairs (0,2) (1,3).
#ifndef AMK_QGEMV_MMA
#define AMK_QGEMV_MMA 0
#endif
template <int QDT> struct AmkQmma {
  static constexpr int COLS = AmkQuant<QDT>::COLS;
  static constexpr int WC = COLS / 4;        // columns per 32-bit word
  static constexpr int XBS = COLS * 2 + 16;  // staged bytes per piece
  // Where column j (0 <= j < WC) of a word goes among the word's inputs.
  static __device__ __forceinline__ int perm(int j) {
    return 2 * (j % (WC / 2)) + j / (WC / 2);
  }
};

template <int QDT, int MDT, int K, int GROUP> __device__ constexpr bool amk_qmma_ok() {
  return AMK_QGEMV_MMA != 0 && AMK_NT % 32 == 0 &&
         (MDT == AMK_ABI_DTYPE_BF16 || MDT == AMK_ABI_DTYPE_F16) &&
         amk_qvec_ok<QDT, K, GROUP>() && GROUP % (4 * AmkQuant<QDT>::COLS) == 0;
}
// Floats of shared memory the staged 16-bit input takes.
template <int QDT, int K> __device__ constexpr int amk_qmma_xb_floats() {
  return K / AmkQuant<QDT>::COLS * AmkQmma<QDT>::XBS / 4;
}

// xs (fp32, amk_xpad<COLS> layout) to xb, WC columns a thread at a time.
template <int QDT, int MDT, int K>
__device__ __forceinline__ void amk_qmma_stage(const float *xs, unsigned short *xb) {
  constexpr int COLS = AmkQuant<QDT>::COLS, WC = AmkQmma<QDT>::WC;
  for (int w = threadIdx.x; w < K / WC; w += AMK_NT) {
    int c0 = w * WC, p = c0 / COLS;
    const float *src = xs + amk_xpad<COLS>(c0);
    unsigned short h[WC];
#pragma unroll
    for (int j = 0; j < WC; j++) {
      float v = src[j];
      h[AmkQmma<QDT>::perm(j)] = MDT == AMK_ABI_DTYPE_BF16 ? amk_f2bf(v) : amk_f2h(v);
    }
    unsigned short *dst = (unsigned short *)((char *)xb + p * AmkQmma<QDT>::XBS) + (c0 - p * COLS);
    if constexpr (WC == 8)
      *(uint4 *)dst = make_uint4(h[0] | (unsigned)h[1] << 16, h[2] | (unsigned)h[3] << 16,
                                 h[4] | (unsigned)h[5] << 16, h[6] | (unsigned)h[7] << 16);
    else
      *(uint2 *)dst = make_uint2(h[0] | (unsigned)h[1] << 16, h[2] | (unsigned)h[3] << 16);
  }
}

// d += A * B (m16n8k16, fp32 accumulation).
template <int MDT>
__device__ __forceinline__ void amk_qmma(float *d, unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
  const unsigned a[4] = {a0, a1, a2, a3}, b[2] = {b0, b1};
  amk_mma16816<MDT>(d, a, b);
}
// a * m + c on 16-bit pairs (exact here: small integers).
template <int MDT> __device__ __forceinline__ unsigned amk_fma2(unsigned a, unsigned m, unsigned c) {
  unsigned d;
  if constexpr (MDT == AMK_ABI_DTYPE_BF16)
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(m), "r"(c));
  else
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(m), "r"(c));
  return d;
}
// (a & mask) | magic in one instruction (the compiler makes two of it: one
// immediate per LOP3).
__device__ __forceinline__ unsigned amk_andor(unsigned a, unsigned mask, unsigned magic) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));
  return d;
}

// A word of weights as two or four 16-bit pairs, exact: i4 gives the
// nibble pairs (0,4) (1,5) (2,6) (3,7) as q = n - 8; i8 the byte pairs (0,2)
// (1,3) twice, as 16 (H - 8) and L where byte + 128 = 16 H + L. MAGIC (128
// in bf16, 1024 in f16) takes a 4-bit field into its low mantissa bits.
template <int QDT, int MDT> struct AmkQconv {
  static constexpr bool BF = MDT == AMK_ABI_DTYPE_BF16;
  static constexpr unsigned MAGIC = BF ? 0x43004300u : 0x64006400u;
  static constexpr unsigned ONE = BF ? 0x3F803F80u : 0x3C003C00u;
  static constexpr unsigned SIXTEEN = BF ? 0x41804180u : 0x4C004C00u;
  static constexpr unsigned I4BIAS = BF ? 0xC308C308u : 0xE408E408u; // -(MAGIC + 8)
  static constexpr unsigned HBIAS = BF ? 0xC508C508u : 0xF408F408u;  // -(16 MAGIC + 128)
  static constexpr unsigned LBIAS = BF ? 0xC300C300u : 0xE400E400u;  // -MAGIC
  __device__ __forceinline__ static void run(unsigned w, unsigned mask, unsigned magic,
                                             unsigned *p) {
    if constexpr (QDT == AMK_ABI_DTYPE_I4) {
      p[0] = amk_fma2<MDT>(amk_andor(w, mask, magic), ONE, I4BIAS);
      p[1] = amk_fma2<MDT>(amk_andor(w >> 4, mask, magic), ONE, I4BIAS);
      p[2] = amk_fma2<MDT>(amk_andor(w >> 8, mask, magic), ONE, I4BIAS);
      p[3] = amk_fma2<MDT>(amk_andor(w >> 12, mask, magic), ONE, I4BIAS);
    } else {
      unsigned u = w ^ 0x80808080u;
      p[0] = amk_fma2<MDT>(amk_andor(u >> 4, mask, magic), SIXTEEN, HBIAS);  // H (0,2)
      p[1] = amk_fma2<MDT>(amk_andor(u >> 12, mask, magic), SIXTEEN, HBIAS); // H (1,3)
      p[2] = amk_fma2<MDT>(amk_andor(u, mask, magic), ONE, LBIAS);           // L (0,2)
      p[3] = amk_fma2<MDT>(amk_andor(u >> 8, mask, magic), ONE, LBIAS);      // L (1,3)
    }
  }
};

// One 16-byte piece of each of two rows (qa: A's rows m, qb: rows m + 8) at
// the same columns, times their staged inputs x (COLS 16-bit values in pair
// order), into d0 (words 0, 1) and d1 (words 2, 3): two accumulation chains.
// A lane with no piece (ok false) gives zeros for B: zero bytes are not 0
// for i4.
template <int QDT, int MDT>
__device__ __forceinline__ void amk_qmma_piece(uint4 qa, uint4 qb, const unsigned short *x,
                                               bool ok, float *d0, float *d1) {
  unsigned wa[4] = {qa.x, qa.y, qa.z, qa.w}, wb[4] = {qb.x, qb.y, qb.z, qb.w};
  unsigned mask = 0x000F000Fu, magic = AmkQconv<QDT, MDT>::MAGIC;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    float *d = k < 2 ? d0 : d1;
    unsigned pa[4], pb[4];
    AmkQconv<QDT, MDT>::run(wa[k], mask, magic, pa);
    AmkQconv<QDT, MDT>::run(wb[k], mask, magic, pb);
    if constexpr (QDT == AMK_ABI_DTYPE_I4) {
      uint4 b = ok ? ((const uint4 *)x)[k] : make_uint4(0u, 0u, 0u, 0u);
      amk_qmma<MDT>(d, pa[0], pb[0], pa[1], pb[1], b.x, b.y);
      amk_qmma<MDT>(d, pa[2], pb[2], pa[3], pb[3], b.z, b.w);
    } else {
      uint2 b = ok ? ((const uint2 *)x)[k] : make_uint2(0u, 0u);
      amk_qmma<MDT>(d, pa[0], pb[0], pa[1], pb[1], b.x, b.y);
      amk_qmma<MDT>(d, pa[2], pb[2], pa[3], pb[3], b.x, b.y);
    }
  }
}

// One 16-byte int4 piece of each of two rows (qa: A's rows m, qb: rows
// m + 8) at the same columns times the lane's f16 inputs x (amk_qmma_piece's
// pair order, the odd nibbles' inputs / 16): each even nibble u as the f16
// 1024 + u, each odd one in place, under the same exponent, as 1024 + 16 u
// (exact: f16 has 10 fraction bits, bf16 7), so a word takes one shift and
// four masks where shifting each nibble down took three shifts. Into d0
// (words 0, 1) and d1 (words 2, 3). AmkQSplit::run_mma takes the offsets off.
__device__ __forceinline__ void amk_q4mma_piece(uint4 qa, uint4 qb, const uint4 (&x)[4],
                                                float *d0, float *d1) {
  const unsigned wa[4] = {qa.x, qa.y, qa.z, qa.w}, wb[4] = {qb.x, qb.y, qb.z, qb.w};
  const unsigned even = 0x000F000Fu, odd = 0x00F000F0u, magic = 0x64006400u;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    float *d = k < 2 ? d0 : d1;
    unsigned ha = wa[k] >> 8, hb = wb[k] >> 8;
    unsigned a0 = amk_andor(wa[k], even, magic), b0 = amk_andor(wb[k], even, magic);
    unsigned a1 = amk_andor(wa[k], odd, magic), b1 = amk_andor(wb[k], odd, magic);
    unsigned a2 = amk_andor(ha, even, magic), b2 = amk_andor(hb, even, magic);
    unsigned a3 = amk_andor(ha, odd, magic), b3 = amk_andor(hb, odd, magic);
    amk_qmma<AMK_ABI_DTYPE_F16>(d, a0, b0, a1, b1, x[k].x, x[k].y);
    amk_qmma<AMK_ABI_DTYPE_F16>(d, a2, b2, a3, b3, x[k].z, x[k].w);
  }
}

// Bytes of {b, a} picked by the nibbles of sel (PTX prmt).
__device__ __forceinline__ unsigned amk_prmt(unsigned a, unsigned b, unsigned sel) {
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
// One 16-byte int8 piece of each of two rows (qa: A's rows m, qb: rows
// m + 8) times the lane's inputs x (f16 pairs of columns (c, c + 2) of each
// word), each weight as the f16 1024 + q + 128: its byte, biased by an
// XOR, under the exponent byte 0x64 by a permute. Into d0 (words 0, 1) and
// d1 (words 2, 3). AmkQSplit::run_mma takes the offset off.
__device__ __forceinline__ void amk_q8mma_piece(uint4 qa, uint4 qb, const uint4 (&x)[2],
                                                float *d0, float *d1) {
  const unsigned wa[4] = {qa.x, qa.y, qa.z, qa.w}, wb[4] = {qb.x, qb.y, qb.z, qb.w};
  const unsigned hi = 0x64646464u;
  const unsigned xw[8] = {x[0].x, x[0].y, x[0].z, x[0].w, x[1].x, x[1].y, x[1].z, x[1].w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    float *d = k < 2 ? d0 : d1;
    unsigned ua = wa[k] ^ 0x80808080u, ub = wb[k] ^ 0x80808080u;
    // Bytes (0, 2) and (1, 3), each under 0x64.
    unsigned a02 = amk_prmt(ua, hi, 0x4240u), a13 = amk_prmt(ua, hi, 0x4341u);
    unsigned b02 = amk_prmt(ub, hi, 0x4240u), b13 = amk_prmt(ub, hi, 0x4341u);
    amk_qmma<AMK_ABI_DTYPE_F16>(d, a02, b02, a13, b13, xw[2 * k], xw[2 * k + 1]);
  }
}

// Pieces per lane and row in one unit: the largest divisor of a row's PER
// up to AMK_QGEMV_LOADS (default 8; a unit loads twice that, two rows).
__device__ constexpr int amk_qmma_unit(int per) {
  int cap = AMK_QGEMV_LOADS > 0 ? AMK_QGEMV_LOADS : 8;
  for (int u = cap < per ? cap : per; u > 1; u--)
    if (per % u == 0)
      return u;
  return 1;
}
// Units in flight (AMK_QGEMV_DEPTH, default: at least 12 pieces a lane,
// 2 to 4 units).
#ifndef AMK_QGEMV_DEPTH
#define AMK_QGEMV_DEPTH 0
#endif
__device__ constexpr int amk_qmma_depth(int unit) {
  return AMK_QGEMV_DEPTH > 0 ? AMK_QGEMV_DEPTH : unit >= 3 ? 2 : unit >= 2 ? 3 : 4;
}

// The rows [0, rows) of a tile, row r of the tile being weight row
// wrow(r). Warp w takes rows in pairs (w + 2 p NWARPS, w + (2 p + 1)
// NWARPS): the pair shares its inputs in B, one row in A's rows m and the
// other in rows m + 8, so C[n][n] and C[n + 8][n] are its two dots (lane
// 4n + n/2: c0 and c2 for even n, c1 and c3 for odd). A pair's pieces go in
// units of U per lane and row through DEPTH register buffers: a unit's
// loads are issued DEPTH - 1 units before it is computed.
template <int PAT, int QDT, int MDT, int ODT, int ADT, int SDT, int K, int NOUT, int STACK,
          int GROUP, int BIAS>
__device__ __forceinline__ void amk_qmma_rows(const void *Q, const void *S, const void *aux,
                                              void *out, const unsigned short *xb, int n_off,
                                              int n_tile) {
  constexpr int COLS = AmkQuant<QDT>::COLS, NV = K / COLS, PER = (NV + 31) / 32;
  constexpr int U = amk_qmma_unit(PER), NU = PER / U, NG = (K + GROUP - 1) / GROUP;
  constexpr int D = amk_qmma_depth(U);
  constexpr long long RB = AmkQuant<QDT>::row_bytes(K);
  constexpr AmkGemvExtra none = {0.0f, 0.0f};
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int rows = STACK * n_tile;
  int mine = warp < rows ? (rows - warp + AMK_NWARPS - 1) / AMK_NWARPS : 0;
  int total = (mine + 1) / 2 * NU;
  bool diag = (lane & 3) == ((lane >> 2) >> 1);
  int odd = (lane >> 2) & 1;
  uint4 qa[D][U], qb[D][U];
  float sa[D][U], sb[D][U];
  AmkGemvExtra ea[D], eb[D];
  // Weight row and output column of the warp's row j.
  auto row_of = [&](int j, long long &wrow, int &col) {
    int r = warp + j * AMK_NWARPS, s = r / n_tile;
    col = n_off + (r - s * n_tile);
    wrow = (long long)s * NOUT + col;
  };
  // One row's part of unit t into a buffer.
  auto issue_row = [&](int j, int c, uint4(&qq)[U], float(&ss)[U], AmkGemvExtra &ee) {
    long long wrow;
    int col;
    row_of(j, wrow, col);
    const char *base = (const char *)Q + wrow * RB;
#pragma unroll
    for (int u = 0; u < U; u++) {
      int v = lane + 32 * (c * U + u);
      // The scale of the group of lanes 4n..4n+3 (their four pieces), which
      // lane 4n + n/2 applies even when its own piece is past the row's end.
      qq[u] = v < NV ? amk_ldw16(base + (long long)v * 16) : make_uint4(0u, 0u, 0u, 0u);
      ss[u] = (v & ~3) < NV ? amk_ld<SDT>(S, wrow * NG + (long long)(v & ~3) * COLS / GROUP)
                            : 0.0f;
    }
    if (c == 0 && lane == 0)
      ee = amk_gemv_extra<PAT, ADT, NOUT, STACK, BIAS>(aux, 0, wrow, col);
  };
  // Unit t: pair t / NU, pieces from (t % NU) * U. A pair's second row past
  // the warp's rows loads nothing: it only fills C's rows m + 8, not read.
  auto issue = [&](int t, int d) {
    int i = t / NU, c = t - i * NU;
    issue_row(2 * i, c, qa[d], sa[d], ea[d]);
    if (2 * i + 1 < mine)
      issue_row(2 * i + 1, c, qb[d], sb[d], eb[d]);
  };
#pragma unroll
  for (int d = 0; d < D - 1; d++)
    if (d < total)
      issue(d, d);
  float acca = 0.0f, accb = 0.0f;
  AmkGemvExtra e0 = none, e1 = none;
  for (int t0 = 0; t0 < total; t0 += D) {
#pragma unroll
    for (int d = 0; d < D; d++) {
      int t = t0 + d;
      if (t + D - 1 < total)
        issue(t + D - 1, (d + D - 1) % D);
      if (t < total) {
        int i = t / NU, c = t - i * NU;
        if (c == 0) {
          e0 = ea[d];
          e1 = eb[d];
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
          int v = lane + 32 * (c * U + u);
          float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          bool ok = NV % 32 == 0 || v < NV;
          const unsigned short *x =
              (const unsigned short *)((const char *)xb + (ok ? v : 0) * AmkQmma<QDT>::XBS);
          amk_qmma_piece<QDT, MDT>(qa[d][u], qb[d][u], x, ok, d0, d1);
          acca = fmaf(odd ? d0[1] + d1[1] : d0[0] + d1[0], sa[d][u], acca);
          accb = fmaf(odd ? d0[3] + d1[3] : d0[2] + d1[2], sb[d][u], accb);
        }
        if (c == NU - 1) {
          float suma = amk_warp_sum(diag ? acca : 0.0f);
          float sumb = amk_warp_sum(diag ? accb : 0.0f);
          if (lane == 0) {
            long long wrow;
            int col;
            row_of(2 * i, wrow, col);
            amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS>(out, e0, suma, 0, wrow, col);
            if (2 * i + 1 < mine) {
              row_of(2 * i + 1, wrow, col);
              amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS>(out, e1, sumb, 0, wrow, col);
            }
          }
          acca = 0.0f;
          accb = 0.0f;
        }
      }
    }
  }
}

// A quantized tile's rows on the CUDA cores, from xs as amk_gemv_quant
// stages it (amk_qx_finish's form where the 16-byte path applies), each
// stored through amk_gemv_store (all threads; after the barrier that ends
// the staging).
template <int PAT, int QDT, int ODT, int ADT, int SDT, int K, int NOUT, int STACK, int GROUP,
          int BIAS>
__device__ __forceinline__ void amk_gemv_quant_rows(const void *Q, const void *S,
                                                    const void *aux, void *out, const float *xs,
                                                    int n_off, int n_tile) {
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int rows = STACK * n_tile;
  constexpr AmkGemvExtra none = {0.0f, 0.0f};
  if constexpr (amk_qvec_ok<QDT, K, GROUP>()) {
    // One row a warp, up to LOADS 16-byte loads of it in flight per lane.
    // Several rows a warp (AMK_QGEMV_LOADS above a row's share of loads)
    // was slower: the larger function made ptxas spill in the kernel's loop
    // and in other variants, and every task paid (docs/Quantization.md).
    constexpr int LOADS = AMK_QGEMV_LOADS > 0 ? AMK_QGEMV_LOADS : QDT == AMK_ABI_DTYPE_I8 ? 8 : 4;
    constexpr int NV = K / AmkQuant<QDT>::COLS, PER = (NV + 31) / 32;
    constexpr int U = amk_gemv_unroll(PER < LOADS ? PER : LOADS);
    constexpr int R = AMK_QGEMV_LOADS <= 0 ? 1 : LOADS / U > 4 ? 4 : LOADS / U < 1 ? 1 : LOADS / U;
    for (int r0 = warp; r0 < rows; r0 += AMK_NWARPS * R) {
      long long wrow[R];
      int valid = 0;
      AmkGemvExtra e[R];
#pragma unroll
      for (int i = 0; i < R; i++) {
        int r = r0 + i * AMK_NWARPS;
        if (r < rows)
          valid = i + 1;
        int rr = r < rows ? r : r0;
        int s = rr / n_tile;
        wrow[i] = (long long)s * NOUT + n_off + (rr - s * n_tile);
        e[i] = none;
        if (lane == 0 && r < rows)
          e[i] = amk_gemv_extra<PAT, ADT, NOUT, STACK, BIAS>(aux, 0, wrow[i],
                                                            n_off + (rr - s * n_tile));
      }
      float sum[R];
      amk_qrows_dot<QDT, SDT, K, GROUP, R, U>(Q, S, wrow, valid, xs, sum);
      if (lane == 0) {
#pragma unroll
        for (int i = 0; i < R; i++) {
          if (i < valid) {
            int r = r0 + i * AMK_NWARPS, s = r / n_tile;
            amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS>(out, e[i], sum[i], 0, wrow[i],
                                                        n_off + (r - s * n_tile));
          }
        }
      }
    }
  } else {
    for (int r = warp; r < rows; r += AMK_NWARPS) {
      int s = r / n_tile;
      long long wrow = (long long)s * NOUT + n_off + (r - s * n_tile);
      AmkGemvExtra e = none;
      if (lane == 0)
        e = amk_gemv_extra<PAT, ADT, NOUT, STACK, BIAS>(aux, 0, wrow, n_off + (r - s * n_tile));
      float sum = amk_qrow_dot_any<QDT, SDT, K, GROUP>(Q, S, wrow, xs);
      if (lane == 0)
        amk_gemv_store<PAT, ODT, NOUT, STACK, BIAS>(out, e, sum, 0, wrow, n_off + (r - s * n_tile));
    }
  }
}

// A quantized GEMV tile (decode: one input row): inputs x (XDT), qW (QDT),
// scales (SDT) and, for the fused patterns, input 3 (ADT): the norm weight
// (NORM), the residual (RESIDUAL, SILU_RESIDUAL) or a bias (PLAIN, BIAS);
// rows [n_off, n_off + N_tile) of each of STACK stacked matrices. The
// prologue and the store are the bf16 GEMV's.
// STAGED 1: the tile streams its weights through per-warp stages (codegen
// picks it for large tiles: backend/codegen.c, qgemv_staged); 2: through
// the block's stages with K split over the warps (AmkQSplit, qgemv_split).
template <int PAT, int XDT, int QDT, int ODT, int ADT, int SDT, int K, int NOUT, int STACK,
          int GROUP, int BIAS, int STAGED>
__device__ void amk_gemv_quant(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *x = amk_in(A, 0), *Q = amk_in(A, 1), *S = amk_in(A, 2);
  const void *aux = I.n_inputs > 3 ? amk_in(A, 3) : nullptr;
  void *out = amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  if (!amk_tile_rows_ok(P, idx, n_off, n_tile, NOUT))
    return;
  constexpr int XCOLS = amk_qvec_ok<QDT, K, GROUP>() ? AmkQuant<QDT>::COLS : 0;
  // The staged input's type: the norm and SiLU prologues round to ODT.
  constexpr int MDT = (PAT == AMK_ABI_PATTERN_NORM || PAT == AMK_ABI_PATTERN_SILU ||
                       PAT == AMK_ABI_PATTERN_SILU_RESIDUAL)
                          ? ODT
                          : XDT;
  // xs: the staged input (K floats, a 4-float gap after each piece), then,
  // on the split path's tensor cores, the warps' row sums where it held them.
  constexpr int XS_INPUT = K + (XCOLS ? K / XCOLS * 4 : 0);
  constexpr int XS_SUMS = STAGED == 2 && amk_qsplit_mma_ok<QDT, MDT, SDT, K, GROUP>()
                              ? AmkQSplit<QDT, SDT, K, NOUT, STACK, GROUP>::SUMS_FLOATS
                              : 0;
  float *xs = smem, *red = smem + (XS_INPUT > XS_SUMS ? XS_INPUT : XS_SUMS);
  static_assert(STAGED != 1 || (!amk_qmma_ok<QDT, MDT, K, GROUP>() &&
                                 amk_qstaged_ok<QDT, SDT, K, GROUP>()),
                "a staged quantized GEMV needs the staged path's shapes");
  static_assert(STAGED != 2 || (!amk_qmma_ok<QDT, MDT, K, GROUP>() &&
                                 (amk_qsplit_ok<QDT, SDT, K, GROUP>() ||
                                  amk_qsplit_mma_ok<QDT, MDT, SDT, K, GROUP>())),
                "a split-K quantized GEMV needs the split path's shapes");
  // The staged paths' residual (or bias) values after red, (the split
  // path's warp sums,) then their rings; the first stages' copies start
  // before the input is staged.
  float *pre = red + AMK_NWARPS;
  AmkQStaged<QDT, SDT, K, NOUT, STACK, GROUP> st;
  AmkQSplit<QDT, SDT, K, NOUT, STACK, GROUP> sp;
  float *part = pre + STACK * n_tile;
  if constexpr (STAGED == 1) {
    char *ring = (char *)(((unsigned long long)part + 15ull) & ~15ull);
    st.begin(Q, S, ring, n_off, n_tile);
  } else if constexpr (STAGED == 2) {
    char *ring = (char *)(((unsigned long long)(part + STACK * n_tile * sp.W) + 15ull) & ~15ull);
    sp.begin(Q, S, ring, n_off, n_tile);
  }
  if constexpr (STAGED != 0)
    amk_gemv_stage_pre<PAT, ADT, NOUT, STACK, BIAS>(aux, pre, n_off, n_tile);
  if (!amk_gemv_prologue16<PAT, XDT, ODT, ADT, K, 1, XCOLS>(x, aux, I.params.eps.f, xs, red))
    amk_gemv_prologue<PAT, XDT, ODT, ADT, K, 1, XCOLS>(x, aux, I.params.eps.f, xs, red);
  __syncthreads();
  amk_mark_staged();
  // The CUDA cores' dots read the inputs times 2^48 with their offset
  // terms; the tensor cores' (amk_qmma_rows, the split path's run_mma) read
  // them as staged.
  if constexpr (!amk_qmma_ok<QDT, MDT, K, GROUP>() && amk_qvec_ok<QDT, K, GROUP>() &&
                XS_SUMS == 0) {
    amk_qx_finish<QDT, K>(xs);
    __syncthreads();
  }
  int lane = threadIdx.x & 31;
  if constexpr (STAGED == 1) {
    st.fill();
    st.run(xs, [&](int i, long long wrow, long long col, float sum) {
      if (lane == 0)
        amk_gemv_store_pre<PAT, ODT, NOUT, STACK, BIAS>(out, pre, sum, i, wrow, col);
    });
  } else if constexpr (STAGED == 2) {
    sp.fill();
    sp.template run<MDT>(xs, part, [&](int i, long long wrow, long long col, float sum) {
      amk_gemv_store_pre<PAT, ODT, NOUT, STACK, BIAS>(out, pre, sum, i, wrow, col);
    });
  } else if constexpr (amk_qmma_ok<QDT, MDT, K, GROUP>()) {
    unsigned short *xb = (unsigned short *)(red + 32);
    amk_qmma_stage<QDT, MDT, K>(xs, xb);
    __syncthreads();
    amk_qmma_rows<PAT, QDT, MDT, ODT, ADT, SDT, K, NOUT, STACK, GROUP, BIAS>(Q, S, aux, out, xb,
                                                                             n_off, n_tile);
  } else {
    amk_gemv_quant_rows<PAT, QDT, ODT, ADT, SDT, K, NOUT, STACK, GROUP, BIAS>(Q, S, aux, out, xs,
                                                                          n_off, n_tile);
  }
}

// The weight stream's view of a quantized GEMV variant (and of the
// quantized combine's, amk_gemv_quant_combine_stream): in the L2 and hybrid
// modes its rows of qW, whole 16-byte pieces, and its scales; never the
// ring (the body reads global memory).
template <int QDT, int SDT, int K, int NOUT, int STACK, int GROUP>
__device__ constexpr amk_stream_info_t amk_gemv_quant_info() {
  constexpr long long RB = AmkQuant<QDT>::row_bytes(K);
  constexpr int NG = (K + GROUP - 1) / GROUP, SB = SDT == AMK_ABI_DTYPE_F32 ? 4 : 2;
  if constexpr (AMK_STREAM_HAS_L2 && AMK_STREAM_SCALES && RB % 16 == 0)
    return amk_stream_info_t{(int)RB, STACK, NOUT, 0, 0, 0, NG * SB};
  else
    return amk_stream_info_t{0, 0, 0, 0, 0, 0, 0};
}
template <int PAT, int XDT, int QDT, int ODT, int ADT, int SDT, int K, int NOUT, int STACK,
          int GROUP, int BIAS, int STAGED>
__device__ amk_stream_info_t amk_gemv_quant_stream() {
  return amk_gemv_quant_info<QDT, SDT, K, NOUT, STACK, GROUP>();
}

// ---- the quantized mlp tile (split_down over a quantized MLP) ----------------------
//
// Opt-in (AMK_FUSE_SPLIT_DOWN_QUANT=1; docs/Fusion.md): inputs x (XDT), qWgu
// [2 * INTER, K] and its scales (SDT), the norm weight g (GDT), the down
// weight as it is, qWd [K, INTER], and its scales; the tile's intermediate
// columns [n_off, n_off + n_tile). The norm and the gate|up rows are the
// quantized GEMV's (amk_qx_finish's staged input, amk_qrows_dot a row a
// warp), gate, up and their SiLU product rounded to XDT as the VM does; then
// the tile's columns of every row of qWd: 8 lanes a row, each lane one
// 16-byte piece of the columns' pieces (the tile's own act at its columns,
// zero beside them, so a piece shared with the next tile adds nothing
// twice), the piece's sum scaled by its group's scale (GROUP a multiple of a
// piece's columns), the 8 lanes' sums meeting by shuffles, into part[]
// (aliasing xs); then part (and x at the first tile) added into the f32
// accumulator as the fp mlp does. Correct under --check and slower than
// the two tiles it replaces (docs/Fusion.md), so off by default.
template <int QDT, int INTER, int GROUP> __device__ constexpr bool amk_mlp_quant_ok() {
  return INTER % AmkQuant<QDT>::COLS == 0 && GROUP % AmkQuant<QDT>::COLS == 0 &&
         AmkQuant<QDT>::row_bytes(INTER) % 16 == 0;
}
// Floats of shared memory the down part's staged act takes: the pieces
// that cover n_tile columns from any start (COLS + 4 floats each).
template <int QDT> __device__ constexpr int amk_mlp_quant_act_floats(int n_tile) {
  return (n_tile / AmkQuant<QDT>::COLS + 2) * (AmkQuant<QDT>::COLS + 4);
}
template <int XDT, int QDT, int GDT, int SDT, int K, int INTER, int GROUP>
__device__ void amk_mlp_quant(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  static_assert(amk_qvec_ok<QDT, K, GROUP>() && amk_mlp_quant_ok<QDT, INTER, GROUP>(),
                "a quantized mlp tile needs whole 16-byte pieces (codegen checks)");
  const void *x = amk_in(A, 0), *Qgu = amk_in(A, 1), *Sgu = amk_in(A, 2);
  const void *g = amk_in(A, 3), *Qd = amk_in(A, 4), *Sd = amk_in(A, 5);
  float *out = (float *)amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  if (!amk_tile_rows_ok(P, idx, n_off, n_tile, INTER))
    return;
  constexpr int COLS = AmkQuant<QDT>::COLS;
  float *xs = smem;                                  // K, a gap after each piece
  float *red = smem + K + K / COLS * 4;              // AMK_NWARPS
  float *gu = red + ((AMK_NWARPS + 3) & ~3);         // 2 * n_tile: gate, up; then act
  float *actx = gu + ((2 * n_tile + 3) & ~3);        // the down part's pieces of act
  float *part = xs;                                  // K sums, once xs is done with
  if (!amk_gemv_prologue16<AMK_ABI_PATTERN_NORM, XDT, XDT, GDT, K, 1, COLS>(
          x, g, I.params.eps.f, xs, red))
    amk_gemv_prologue<AMK_ABI_PATTERN_NORM, XDT, XDT, GDT, K, 1, COLS>(x, g, I.params.eps.f,
                                                                      xs, red);
  __syncthreads();
  amk_mark_staged();
  amk_qx_finish<QDT, K>(xs);
  __syncthreads();
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  {
    constexpr int NV = K / COLS, PER = (NV + 31) / 32;
    constexpr int LOADS = QDT == AMK_ABI_DTYPE_I8 ? 8 : 4;
    constexpr int U = amk_gemv_unroll(PER < LOADS ? PER : LOADS);
    for (int r = warp; r < 2 * n_tile; r += AMK_NWARPS) {
      long long wrow[1] = {(long long)(r / n_tile) * INTER + n_off + r % n_tile};
      float sum[1];
      amk_qrows_dot<QDT, SDT, K, GROUP, 1, U>(Qgu, Sgu, wrow, 1, xs, sum);
      if (lane == 0)
        gu[r] = amk_round<XDT>(sum[0]);
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n_tile; j += AMK_NT) {
    float gt = gu[j], up = gu[n_tile + j];
    gu[j] = amk_round<XDT>(gt / (1.0f + expf(-gt)) * up);
  }
  __syncthreads();
  // The pieces of qWd's rows that hold the tile's columns, and act staged
  // over them as amk_qx_finish stages x (zero outside the tile).
  int p0 = n_off / COLS, np = (n_off + n_tile + COLS - 1) / COLS - p0;
  constexpr float OFFSET = (QDT == AMK_ABI_DTYPE_I8 ? 128.0f : 8.0f) / AMK_QDOT_UNSCALE;
  for (int p = threadIdx.x; p < np; p += AMK_NT) {
    float *a = actx + p * (COLS + 4), sum = 0.0f;
    for (int e = 0; e < COLS; e++) {
      int c = (p0 + p) * COLS + e - n_off;
      float v = c >= 0 && c < n_tile ? gu[c] : 0.0f;
      sum += v;
      a[e] = v * AMK_QX_SCALE;
    }
    a[COLS] = sum * OFFSET;
  }
  __syncthreads();
  constexpr long long RBD = AmkQuant<QDT>::row_bytes(INTER);
  constexpr int NGD = (INTER + GROUP - 1) / GROUP;
  // L lanes a row, ROWS rows a pass of the block, DU passes a lane's loads
  // in flight (DU pieces of 16 bytes a lane: 32 KiB a block).
  constexpr int L = 8, ROWS = AMK_NT / L, DU = 8;
  int sub = threadIdx.x & (L - 1), row0 = threadIdx.x / L;
  const char *qbase = (const char *)Qd + (long long)p0 * 16;
  for (int n0 = 0; n0 < K; n0 += DU * ROWS) {
    float acc[DU];
    uint4 q[DU];
    float sc[DU];
#pragma unroll
    for (int u = 0; u < DU; u++) {
      int n = n0 + u * ROWS + row0;
      bool have = n < K && sub < np;
      q[u] = have ? amk_ldw16(qbase + (long long)n * RBD + (long long)sub * 16)
                  : make_uint4(0u, 0u, 0u, 0u);
      sc[u] = have ? amk_ld<SDT>(Sd, (long long)n * NGD + (long long)(p0 + sub) * COLS / GROUP)
                   : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < DU; u++)
      acc[u] = sub < np ? amk_qdot16<QDT>(q[u], actx + sub * (COLS + 4)) * sc[u] : 0.0f;
    // Pieces past the first L of a row (tiles of more than L pieces).
    for (int j = sub + L; j < np; j += L) {
#pragma unroll
      for (int u = 0; u < DU; u++) {
        int n = n0 + u * ROWS + row0;
        if (n < K) {
          uint4 qq = amk_ldw16(qbase + (long long)n * RBD + (long long)j * 16);
          float s = amk_ld<SDT>(Sd, (long long)n * NGD + (long long)(p0 + j) * COLS / GROUP);
          acc[u] += amk_qdot16<QDT>(qq, actx + j * (COLS + 4)) * s;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < DU; u++) {
#pragma unroll
      for (int o = L / 2; o > 0; o >>= 1)
        acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], o);
      int n = n0 + u * ROWS + row0;
      if (sub == 0 && n < K)
        part[n] = acc[u] * AMK_QDOT_UNSCALE;
    }
  }
  __syncthreads();
  // The tile at column 0 adds the residual x too, unless the program is a
  // tensor-parallel rank's other than 0 (its all-reduce takes x once).
  bool first = n_off == 0 && !(I.params.flags.i & AMK_FLAG_MLP_NO_RESIDUAL);
  auto res4 = [&](int v) {
    return make_float4(amk_ld<XDT>(x, 4 * v), amk_ld<XDT>(x, 4 * v + 1), amk_ld<XDT>(x, 4 * v + 2),
                       amk_ld<XDT>(x, 4 * v + 3));
  };
  auto res1 = [&](int n) { return amk_ld<XDT>(x, n); };
  amk_share_add<K>(out, part, first, n_off, n_tile, res4, res1);
}
// Its weight stream: the gate|up rows and their scales, as the quantized
// GEMV's (the down rows are read a few pieces a row).
template <int XDT, int QDT, int GDT, int SDT, int K, int INTER, int GROUP>
__device__ amk_stream_info_t amk_mlp_quant_stream() {
  return amk_gemv_quant_info<QDT, SDT, K, INTER, 2, GROUP>();
}

// ---- weight-only quantized GEMM tiles (prefill, W8A16 / W4A16) --------------------
//
// out[m, n] = sum_k x[m, k] * (q[n, k] * scale[n, k / GROUP]) over the
// rows [m_off, m_off + M_tile) and columns [n_off, n_off + N_tile) of a
// GEMM_TILE task whose weights are the quantize pass's [x, qW, scales].
//
// On the tensor cores (amk_gemm_mma_quant, x bf16 or f16): amk_gemm_mma's
// sub-tiles, stages and warp layout, with the raw quantized bytes of each
// K step copied into the stages by cp.async beside x's rows; each K step
// then converts them once into a 16-bit W tile in amk_gemm_mma's
// shared-memory layout. The converted values are the integers q themselves
// (exact in bf16 and f16: at most 8 significant bits), not q * scale, which
// needs up to 18 bits and would be rounded: the tensor cores form each
// group's integer dot products exactly (16-bit products are exact in fp32)
// and sum them in fp32, and the sum is scaled by the group's fp32 scale
// once per K step (once per 16 columns for a group of 16 (mod 32) columns,
// once at the end for a single group). The reference VM forms
// x * (q * scale) per element and sums in ascending k: the two differ by
// fp32 rounding only, as amk_gemm_mma differs from the VM.
//
// Raw bytes per row and K step: 32 (i8, 32 columns) or 16 (i4).
template <int QDT> __device__ constexpr int amk_mmaq_raw_bytes() {
  return QDT == AMK_ABI_DTYPE_I8 ? AMK_MMA_BK : AMK_MMA_BK / 2;
}
// One stage: BM rows of x (16-bit, AMK_MMA_LD apart), then BN raw rows.
template <int QDT> __device__ constexpr int amk_mmaq_stage_bytes(int bn) {
  return AMK_MMA_BM * AMK_MMA_LD * 2 + bn * amk_mmaq_raw_bytes<QDT>();
}
// The largest cp.async piece (16, 8 or 4 bytes) that a quantized row of K
// columns is made of, so that every piece lies inside or outside the row.
template <int QDT, int K> __device__ constexpr int amk_mmaq_piece() {
  return AmkQuant<QDT>::row_bytes(K) % 16 == 0 ? 16 : AmkQuant<QDT>::row_bytes(K) % 8 == 0 ? 8 : 4;
}
template <int BYTES>
__device__ __forceinline__ void amk_cp_async_n(unsigned dst, const void *src, bool full) {
  if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(full ? 16 : 0)
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(BYTES),
                 "r"(full ? BYTES : 0)
                 : "memory");
}
// Rows [row0, row0 + BN) of the quantized weight, the K step at k0, into a
// stage's raw part; rows at or past `rows` and bytes past the row read as
// zeros (their x columns are zeros too).
template <int QDT, int K, int BN>
__device__ __forceinline__ void amk_mmaq_load(unsigned dst, const unsigned char *Q, long long row0,
                                              int rows, int k0) {
  constexpr int RAW = amk_mmaq_raw_bytes<QDT>(), PIECE = amk_mmaq_piece<QDT, K>();
  constexpr int PER_ROW = RAW / PIECE, TOTAL = BN * PER_ROW;
  constexpr long long RB = AmkQuant<QDT>::row_bytes(K);
  const long long b0 = QDT == AMK_ABI_DTYPE_I8 ? k0 : k0 / 2;
#pragma unroll
  for (int u = 0; u < (TOTAL + AMK_NT - 1) / AMK_NT; u++) {
    int c = threadIdx.x + u * AMK_NT;
    if (TOTAL % AMK_NT == 0 || c < TOTAL) {
      int r = c / PER_ROW, off = (c % PER_ROW) * PIECE;
      bool in = r < rows && b0 + off < RB;
      const unsigned char *src = in ? Q + (row0 + r) * RB + b0 + off : Q;
      amk_cp_async_n<PIECE>(dst + (unsigned)(r * RAW + off), src, in);
    }
  }
}
// Two integers (exact floats) as one 32-bit word of 16-bit values, the
// first in the low half.
template <int DT> __device__ __forceinline__ unsigned amk_pack_ints(float lo, float hi) {
  if constexpr (DT == AMK_ABI_DTYPE_BF16) {
    // bf16 is the top half of an f32; an integer of at most 8 significant
    // bits has a zero low half, so taking it is exact.
    return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
  } else {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
}
// 16 columns of one raw row (16 bytes of i8 or 8 of i4) as 16 values of DT
// (8 words).
template <int QDT, int DT>
__device__ __forceinline__ void amk_mmaq_convert16(const unsigned char *raw, unsigned *w) {
  if constexpr (QDT == AMK_ABI_DTYPE_I8) {
    uint4 v = *(const uint4 *)raw;
    unsigned q[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      unsigned u = q[i] ^ 0x80808080u; // each byte + 128, unsigned
      float f0 = __int_as_float(__byte_perm(u, 0x4B000000u, 0x7440)) - 8388736.0f;
      float f1 = __int_as_float(__byte_perm(u, 0x4B000000u, 0x7441)) - 8388736.0f;
      float f2 = __int_as_float(__byte_perm(u, 0x4B000000u, 0x7442)) - 8388736.0f;
      float f3 = __int_as_float(__byte_perm(u, 0x4B000000u, 0x7443)) - 8388736.0f;
      w[2 * i] = amk_pack_ints<DT>(f0, f1);
      w[2 * i + 1] = amk_pack_ints<DT>(f2, f3);
    }
  } else {
    uint2 v = *(const uint2 *)raw;
    unsigned q[2] = {v.x, v.y};
#pragma unroll
    for (int i = 0; i < 2; i++) {
      // Column 2b is the low nibble of byte b, 2b + 1 the high one (q + 8).
      unsigned lo = q[i] & 0x0F0F0F0Fu, hi = (q[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int b = 0; b < 4; b++) {
        float e = __int_as_float(__byte_perm(lo, 0x4B000000u, 0x7440 + b)) - 8388616.0f;
        float o = __int_as_float(__byte_perm(hi, 0x4B000000u, 0x7440 + b)) - 8388616.0f;
        w[4 * i + b] = amk_pack_ints<DT>(e, o);
      }
    }
  }
}

// XDT: bf16 or f16 (the W tile takes x's dtype); QDT: i8 or i4; SDT: the
// scales' dtype; GROUP: columns per scale; BN: 64 or 128 columns per
// sub-tile (codegen checks that each 16-column step lies in one group).
template <int XDT, int QDT, int ODT, int SDT, int K, int NOUT, int M, int GROUP, int BN>
__device__ void amk_gemm_mma_quant(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  static_assert(XDT == AMK_ABI_DTYPE_BF16 || XDT == AMK_ABI_DTYPE_F16,
                "the tensor cores take bf16 or f16 activations");
  static_assert(QDT == AMK_ABI_DTYPE_I8 || QDT == AMK_ABI_DTYPE_I4, "int8 or int4 weights");
  static_assert(K % 8 == 0, "x rows must be whole 16-byte pieces");
  static_assert(AMK_NT == 256 || K < 0, "the warp layout is 2 x 4 warps");
  static_assert(BN == 64 || BN == 128, "sub-tiles are 128 x 64 or 128 x 128");
  static_assert(GROUP % 16 == 0 || GROUP >= K, "a 16-column step lies in one group");
  constexpr int NG = (K + GROUP - 1) / GROUP;
  // 16-column steps summed before each scaling: 0 for one group (scaled
  // once at the end), 2 when a group is whole K steps, else 1.
  constexpr int FOLD = NG == 1 ? 0 : GROUP % AMK_MMA_BK == 0 ? 2 : 1;
  constexpr int WN = BN / 4, NT8 = WN / 8;
  constexpr int STAGE = amk_mmaq_stage_bytes<QDT>(BN), RAW = amk_mmaq_raw_bytes<QDT>();
  constexpr int XBYTES = AMK_MMA_BM * AMK_MMA_LD * 2;
  const unsigned short *x = (const unsigned short *)amk_in(A, 0);
  const unsigned char *Q = (const unsigned char *)amk_in(A, 1);
  const void *S = amk_in(A, 2);
  void *out = amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  int m_begin = I.params.m_off.i, m_count = I.params.M_tile.i;
  if (n_off < 0 || n_tile < 0 || n_off + n_tile > NOUT || m_begin < 0 || m_count < 0 ||
      m_begin + m_count > M ||
      (((unsigned long long)x & 15) | ((unsigned long long)Q & (amk_mmaq_piece<QDT, K>() - 1)))) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_SHAPE, idx, n_off, n_tile);
    return;
  }
  constexpr int KT = (K + AMK_MMA_BK - 1) / AMK_MMA_BK;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp >> 2, wn = warp & 3;
  const unsigned sbase = amk_smem_addr(smem);
  // The converted W tile, after the stages (BN rows, AMK_MMA_LD apart).
  const unsigned wtile = sbase + AMK_MMA_STAGES * STAGE;
  unsigned char *wtile_p = (unsigned char *)smem + AMK_MMA_STAGES * STAGE;
  const int tiles_n = (n_tile + BN - 1) / BN;
  const int tiles = (m_count + AMK_MMA_BM - 1) / AMK_MMA_BM * tiles_n;
  const unsigned a_lane =
      (unsigned)(((wm * 64 + (lane & 15)) * AMK_MMA_LD + (lane >> 4) * 8) * 2);
  const unsigned b_lane =
      (unsigned)(((wn * WN + (lane & 7) + ((lane >> 4) << 3)) * AMK_MMA_LD + ((lane >> 3) & 1) * 8) *
                 2);
  for (int t = 0; t < tiles; t++) {
    const int m0 = m_begin + t / tiles_n * AMK_MMA_BM, n0 = n_off + t % tiles_n * BN;
    const int mv = min(AMK_MMA_BM, m_begin + m_count - m0);
    const int nv = min(BN, n_off + n_tile - n0);
    // The scales of this thread's accumulator columns (2 per 8-column tile)
    // for the group `g`; columns outside the tile read none.
    float sc[NT8][2];
    int g_loaded = -1;
    auto load_scales = [&](int g) {
      if (g == g_loaded)
        return;
      g_loaded = g;
#pragma unroll
      for (int j = 0; j < NT8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          int c = wn * WN + j * 8 + (lane & 3) * 2 + e;
          sc[j][e] = c < nv ? amk_ld<SDT>(S, (long long)(n0 + c) * NG + g) : 0.0f;
        }
    };
    float acc[4][NT8][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < NT8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          acc[i][j][e] = 0.0f;
#pragma unroll
    for (int s = 0; s < AMK_MMA_STAGES - 1; s++) {
      if (s < KT) {
        unsigned st = sbase + s * STAGE;
        amk_mma_load<K, AMK_MMA_BM>(st, x, m0, mv, s * AMK_MMA_BK);
        amk_mmaq_load<QDT, K, BN>(st + XBYTES, Q, n0, nv, s * AMK_MMA_BK);
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int kt = 0; kt < KT; kt++) {
      if constexpr (FOLD == 2)
        load_scales(kt * AMK_MMA_BK / GROUP); // before the waits, so its latency overlaps them
      amk_cp_async_wait<AMK_MMA_STAGES - 2>();
      __syncthreads(); // stage kt landed; every warp is done with the W tile of kt - 1
      const int next = kt + AMK_MMA_STAGES - 1;
      if (next < KT) {
        unsigned st = sbase + (next % AMK_MMA_STAGES) * STAGE;
        amk_mma_load<K, AMK_MMA_BM>(st, x, m0, mv, next * AMK_MMA_BK);
        amk_mmaq_load<QDT, K, BN>(st + XBYTES, Q, n0, nv, next * AMK_MMA_BK);
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
      const unsigned st = sbase + (kt % AMK_MMA_STAGES) * STAGE;
      // Raw stage -> W tile: 16 columns of one row per unit.
      const unsigned char *raw = (const unsigned char *)smem + (kt % AMK_MMA_STAGES) * STAGE + XBYTES;
#pragma unroll
      for (int u = 0; u < (BN * 2 + AMK_NT - 1) / AMK_NT; u++) {
        int c = threadIdx.x + u * AMK_NT;
        if ((BN * 2) % AMK_NT == 0 || c < BN * 2) {
          int r = c >> 1, h = c & 1;
          unsigned w[8];
          amk_mmaq_convert16<QDT, XDT>(raw + r * RAW + h * (RAW / 2), w);
          uint4 *dst = (uint4 *)(wtile_p + (r * AMK_MMA_LD + h * 16) * 2);
          dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
          dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
        }
      }
      __syncthreads(); // the W tile is whole
#pragma unroll
      for (int kf = 0; kf < (FOLD == 1 ? 2 : 1); kf++) {
        constexpr int KK = FOLD == 1 ? 1 : 2; // 16-column steps in this fold
        if constexpr (FOLD == 1)
          load_scales((kt * AMK_MMA_BK + kf * 16) / GROUP);
        unsigned af[KK][4][4], bf[KK][NT8][2];
#pragma unroll
        for (int q = 0; q < KK; q++) {
          const int kk = kf * KK + q;
#pragma unroll
          for (int i = 0; i < 4; i++)
            amk_ldmatrix_x4(af[q][i], st + a_lane + (unsigned)((i * 16 * AMK_MMA_LD + kk * 16) * 2));
#pragma unroll
          for (int j = 0; j < NT8 / 2; j++) {
            unsigned r[4];
            amk_ldmatrix_x4(r, wtile + b_lane + (unsigned)((j * 16 * AMK_MMA_LD + kk * 16) * 2));
            bf[q][2 * j][0] = r[0];
            bf[q][2 * j][1] = r[1];
            bf[q][2 * j + 1][0] = r[2];
            bf[q][2 * j + 1][1] = r[3];
          }
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < NT8; j++) {
            if constexpr (FOLD == 0) {
#pragma unroll
              for (int q = 0; q < KK; q++)
                amk_mma16816<XDT>(acc[i][j], af[q][i], bf[q][j]);
            } else {
              float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
              for (int q = 0; q < KK; q++)
                amk_mma16816<XDT>(part, af[q][i], bf[q][j]);
#pragma unroll
              for (int e = 0; e < 4; e++)
                acc[i][j][e] = fmaf(part[e], sc[j][e & 1], acc[i][j][e]);
            }
          }
      }
    }
    amk_cp_async_wait<0>();
    __syncthreads(); // every warp is done with the stages and the W tile
    if constexpr (FOLD == 0)
      load_scales(0);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < NT8; j++) {
        int c = wn * WN + j * 8 + (lane & 3) * 2;
        if (c >= nv)
          continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
          int r = wm * 64 + i * 16 + (lane >> 2) + h * 8;
          float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
          if constexpr (FOLD == 0) {
            v0 *= sc[j][0];
            v1 *= sc[j][1];
          }
          if (r < mv)
            amk_mma_store2<ODT, 0, NOUT, 0>(out, nullptr, (long long)(m0 + r), n0 + c, c + 1 < nv,
                                            v0, v1);
        }
      }
  }
}

// On the CUDA cores (amk_gemm_quant: f32 activations, or where the tensor
// cores are not taken): the quantized GEMV's row dot for each of at most 64
// staged input rows; a 16-byte piece lying in one group is dotted on the
// integers and scaled once, other groups take the column-at-a-time path
// (q * scale per element, as the VM).
template <int XDT, int QDT, int ODT, int SDT, int K, int NOUT, int M, int GROUP>
__device__ void amk_gemm_quant(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  static_assert(M <= 64, "the CUDA-core GEMM stages at most 64 rows");
  const void *x = amk_in(A, 0), *Q = amk_in(A, 1), *S = amk_in(A, 2);
  void *out = amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  int m_begin = I.params.m_off.i, m_count = I.params.M_tile.i;
  if (n_off < 0 || n_tile < 0 || n_off + n_tile > NOUT || m_begin < 0 || m_count < 0 ||
      m_begin + m_count > M) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_SHAPE, idx, n_off, n_tile);
    return;
  }
  constexpr int XCOLS = amk_qvec_ok<QDT, K, GROUP>() ? AmkQuant<QDT>::COLS : 0;
  constexpr int XROW = K + (XCOLS ? K / XCOLS * 4 : 0); // a staged row, padded (amk_xpad)
  float *xs = smem;
  for (int i = threadIdx.x; i < m_count * K; i += AMK_NT) {
    int m = i / K, k = i - m * K;
    xs[m * XROW + amk_xpad<XCOLS>(k)] = amk_ld<XDT>(x, (long long)(m_begin + m) * K + k);
  }
  __syncthreads();
  if constexpr (XCOLS != 0) {
    amk_qx_finish<QDT, K>(xs, m_count, XROW);
    __syncthreads();
  }
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int m = 0; m < m_count; m++) {
    for (int r = warp; r < n_tile; r += AMK_NWARPS) {
      long long wrow = n_off + r;
      float sum;
      if constexpr (XCOLS)
        amk_qrows_dot<QDT, SDT, K, GROUP, 1, amk_gemv_unroll((K / AmkQuant<QDT>::COLS + 31) / 32)>(
            Q, S, &wrow, 1, xs + m * XROW, &sum);
      else
        sum = amk_qrow_dot_any<QDT, SDT, K, GROUP>(Q, S, wrow, xs + m * XROW);
      if (lane == 0)
        amk_st<ODT>(out, (long long)(m_begin + m) * NOUT + wrow, sum);
    }
  }
}
// ---- attention ---------------------------------------------------------------

// s[q] = dot(qs[q * HD ..], cache[off .. off + HD]) for GQ query heads.
template <int KDT, int HD, int GQ>
__device__ __forceinline__ void amk_kdot_n(const void *cache, long long off, const float *qs,
                                           float *s) {
#pragma unroll
  for (int q = 0; q < GQ; q++)
    s[q] = 0.0f;
  constexpr int VE = AmkVec<KDT>::VE;
  if constexpr (AmkVec<KDT>::OK && HD % VE == 0) {
    const uint4 *p = (const uint4 *)((const char *)cache + off * AmkVec<KDT>::ESZ);
    uint4 raw[HD / VE];
#pragma unroll
    for (int v = 0; v < HD / VE; v++)
      raw[v] = __ldcg(p + v);
#pragma unroll
    for (int v = 0; v < HD / VE; v++) {
      float k[VE];
      amk_unpack16<KDT>(raw[v], k);
#pragma unroll
      for (int q = 0; q < GQ; q++)
#pragma unroll
        for (int e = 0; e < VE; e++)
          s[q] += k[e] * qs[q * HD + v * VE + e];
    }
  } else {
    for (int d = 0; d < HD; d++) {
      float k = amk_ld<KDT>(cache, off + d);
#pragma unroll
      for (int q = 0; q < GQ; q++)
        s[q] += k * qs[q * HD + d];
    }
  }
}

// Block-wide max / sum of GQ values at once; red: AMK_NWARPS * GQ floats.
template <int GQ, bool MAX> __device__ __forceinline__ void amk_block_reduce_n(float *v, float *red) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int q = 0; q < GQ; q++)
    v[q] = MAX ? amk_warp_max(v[q]) : amk_warp_sum(v[q]);
  __syncthreads();
  if (lane == 0) {
#pragma unroll
    for (int q = 0; q < GQ; q++)
      red[warp * GQ + q] = v[q];
  }
  __syncthreads();
#pragma unroll
  for (int q = 0; q < GQ; q++) {
    float r = red[q];
    for (int w = 1; w < AMK_NWARPS; w++)
      r = MAX ? fmaxf(r, red[w * GQ + q]) : r + red[w * GQ + q];
    v[q] = r;
  }
}

#define AMK_ATTN_CHUNK 1024
#define AMK_ATTN_GQ_MAX 4
// Value rows a thread of the V pass loads at once (a power of two).
#ifndef AMK_ATTN_V_LOADS
#define AMK_ATTN_V_LOADS 8
#endif
// The key pass with CH lanes a key (AMK_CUDA_ATTN_KEY_SPLIT=1). Off: on an
// H100 it took the 1B at position 1024 from 1.207 to 1.195 ms but SmolLM2 at
// position 0, which runs none of it, from 0.725 to 0.741 (docs/Performance.md,
// seventeenth session).
#ifndef AMK_ATTN_KEY_SPLIT
#define AMK_ATTN_KEY_SPLIT 0
#endif
// The key pass with the chunk's key rows copied into shared memory first
// (the default; AMK_CUDA_ATTN_K_STAGE=0: each thread loads its key's row
// into registers): every thread's 16-byte pieces go out as asynchronous
// copies at once, one round trip for up to as many rows as the V pass's
// partial-sum scratch holds, where ptxas had issued a thread's own row in
// three or four batches, each a round trip (Nsight Compute, 1B at 1024:
// the tiles' key pass took about 4 us for 171 keys; staged, the 1B's step
// at 1024 is 3% shorter, nineteenth session, docs/Performance.md).
#ifndef AMK_ATTN_K_STAGE
#define AMK_ATTN_K_STAGE 1
#endif
// An attention_o tile (ONE) attends for one query head over the whole
// window (no KV partitions): by default 64 KiB of scratch for staged key
// rows, two buffers of 256 of the 1B's rows (a 1024-row window is four
// sub-stages, each copying while the one before is scored) where the V
// pass's 8 KiB held 64 (AMK_CUDA_ATTN_O_STAGE_KB sets it;
// gen_attention_o sizes the shared memory to match). Measured in one run
// on an H200 (1B at 1024, medians of two rounds, docs/Performance.md):
// 32 KiB 0.982 ms, 64 KiB 0.968, 96 KiB 0.966.
#ifndef AMK_ATTN_ONE_STAGE_FLOATS
#define AMK_ATTN_ONE_STAGE_FLOATS 16384
#endif
static_assert(AMK_ATTN_ONE_STAGE_FLOATS >= AMK_NT * 8, "the stage holds the V pass's sums");
static_assert(AMK_ATTN_V_LOADS >= 1 && AMK_ATTN_V_LOADS <= 16 &&
                  (AMK_ATTN_V_LOADS & (AMK_ATTN_V_LOADS - 1)) == 0,
              "1 to 16 value rows in flight, a power of two");

// MODE 0: ATTENTION_TILE (q, k cache, v cache; every head).
// MODE 1: pattern attention (q, k cache, v cache; heads [n_off, n_off+N_tile)).
// MODE 2: pattern attention_rope (qkv, inv_freq, combined cache; heads as 1).
// MODE 3: as 2 over the per-head cache [ROWS, 2, HD] of the tile's one KV head.
// MODE 4, 5: as 2, 3 with flags bit 2 (AMK_FLAG_KV_FROM_QKV): the window's
//   row pos, its last, is the key and value rope_kv stores this step, built
//   here from qkv with its rounding; the cache is read only below pos.
// PARTIAL: write [n_heads, HD + 2] rows acc | m | l.
// The query heads of one KV head (up to AMK_ATTN_GQ_MAX at a time) share one
// pass over the keys and values: scores one key per thread (16-byte loads),
// chunked online softmax, then the V pass with each thread owning 16 bytes
// of a value row for a strided subset of the keys.
// ONE (an attention_o tile, MODE 4 or 5): the one query head holding
// attention columns n_off.. (inputs qkv, Wot, inv_freq, kv_cache, x), its
// output rounded to ODT into sout[0, HD) instead of global memory.
template <int MODE, int QDT, int KDT, int ODT, int FDT, int HD, int NH, int NKV, int ROWS,
          int PARTIAL, int TAGGED, bool ONE>
__device__ __forceinline__ void amk_attention_run(AmkP P, AmkI I, AmkA A, int idx, int pos,
                                                  float *smem, float *sout) {
  const void *qsrc = amk_in(A, 0);
  constexpr bool ROPE = MODE >= 2, PH = MODE == 3 || MODE == 5, FRESH = MODE >= 4;
  static_assert((TAGGED & 1) == 0 || ROPE,
                "only the rotating attention reads its query through a shadow");
  static_assert(!ONE || (FRESH && !PARTIAL && TAGGED == 0), "attention_o: row pos from qkv");
  const void *kc = ONE ? amk_in(A, 3) : ROPE ? amk_in(A, 2) : amk_in(A, 1);
  const void *vc = ROPE ? kc : amk_in(A, 2);
  const void *freq = ONE ? amk_in(A, 2) : ROPE ? amk_in(A, 1) : nullptr;
  void *out = ONE ? nullptr : amk_out(A, 0);
  AmkWindow win = amk_window(I, A, pos);
  int h_first = 0, h_count = NH;
  if constexpr (ONE) {
    h_first = I.params.n_off.i / HD;
    h_count = 1;
  } else if constexpr (MODE != 0) {
    h_first = I.params.n_off.i;
    h_count = I.params.N_tile.i;
  }
  constexpr int GROUP = NH / NKV;
  if (h_first < 0 || h_count < 0 || h_first + h_count > NH ||
      (PH && h_count > 0 && h_first / GROUP != (h_first + h_count - 1) / GROUP)) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_SHAPE, idx, h_first, h_count);
    return;
  }
  if (win.kv_start < 0 || win.kv_len < 0 || win.kv_start > ROWS - win.kv_len) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_INDEX, idx, win.kv_start, win.kv_len);
    return;
  }
  // FRESH: a window reaching row pos ends there (the validator's rule for
  // fixed windows; a window that follows the step always does).
  bool fresh = FRESH && win.kv_len > 0 && win.kv_start + win.kv_len > pos;
  if (fresh && win.kv_start + win.kv_len != pos + 1) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_INDEX, idx, win.kv_start + win.kv_len, pos);
    return;
  }
  // An empty partition whose combine skips it (amk_live_parts) writes
  // nothing.
  if (PARTIAL && win.kv_len == 0 && A.follow == AMK_FOLLOW_PARTITION && A.combine_follows)
    return;
  constexpr int KVW = PH ? HD : NKV * HD;             // one plane of a cache row
  constexpr long long RSTRIDE = ROPE ? 2 * KVW : KVW;
  constexpr long long VOFF = ROPE ? KVW : 0;
  constexpr int GQ = ONE ? 1 : GROUP < AMK_ATTN_GQ_MAX ? GROUP : AMK_ATTN_GQ_MAX;
  constexpr int ESZ = AmkVec<KDT>::ESZ;
  constexpr bool VECV = AmkVec<KDT>::OK && HD % AmkVec<KDT>::VE == 0;
  constexpr int VE = VECV ? AmkVec<KDT>::VE : 1;
  constexpr int CH = HD / VE;                          // 16-byte chunks per row
  constexpr int G = AMK_NT / CH > 0 ? AMK_NT / CH : 1; // key groups of the V pass
  // The V pass's partial sums: shuffles within a warp where a row's
  // 16-byte pieces divide it, else one partial row per key group.
  constexpr bool SHFL = VECV && CH <= 32 && 32 % CH == 0;
  constexpr int ACCR = ONE ? AMK_ATTN_ONE_STAGE_FLOATS : GQ * AMK_NT * 8;
  // Keys a softmax chunk: an attention_o tile's one head takes twice as
  // many, so that a window of up to 2048 rows is one pass (one max, one
  // sum, one V pass), where the 1B at position 1024 (1025 rows) paid a
  // second pass for its last row.
  constexpr int CHUNK = ONE ? 2 * AMK_ATTN_CHUNK : AMK_ATTN_CHUNK;
  float scale = I.params.scale.f;
  float *qs = smem;                        // GQ * HD
  float *sc = qs + GQ * HD;                // GQ * CHUNK
  float *red = sc + GQ * CHUNK;   // AMK_NWARPS * GQ
  float *accr = red + AMK_NWARPS * GQ;     // ACCR: GQ * G * HD, or staged key rows
  float *fk = accr + ACCR, *fv = fk + HD;  // FRESH: row pos's key and value
  int tid = threadIdx.x;
  // The value columns [d_lo, d_hi) the V pass covers, ch 16-byte pieces a
  // row, gn key groups: all of them, except that an attention_o tile needs
  // only its own columns of the head (the scores still need whole keys), so
  // its threads spread over more keys and a long window takes fewer round
  // trips.
  // (Not with KSPLIT, whose key pass maps lanes by c and g too.)
  constexpr bool KSPLIT = AMK_ATTN_KEY_SPLIT != 0 && VECV && CH <= 32 && 32 % CH == 0;
  int ch = CH, c = tid % CH, g = tid / CH, gn = G, d_lo = 0, d_hi = HD;
  if constexpr (ONE && SHFL && !KSPLIT) {
    int d0 = I.params.n_off.i % HD, n_cols = I.params.N_tile.i, pieces = n_cols / VE;
    if (d0 % VE == 0 && n_cols % VE == 0 && pieces > 0 && 32 % pieces == 0) {
      ch = pieces;
      c = d0 / VE + tid % pieces;
      g = tid / pieces;
      gn = AMK_NT / pieces;
      d_lo = d0;
      d_hi = d0 + n_cols;
    }
  }
  bool vthread = ch <= AMK_NT && g < gn;
  // The key pass: CH lanes a key (KSPLIT), or key rows staged in shared
  // memory (KSTAGE, KROWS at a time), or each thread its key's row.
  constexpr bool KSTAGE = !KSPLIT && AMK_ATTN_K_STAGE != 0 && VECV && (CH & (CH - 1)) == 0 &&
                          (ACCR * 4) / (HD * ESZ) >= 1;
  constexpr int KROWS = KSTAGE ? (ACCR * 4) / (HD * ESZ) : 1;
  // Two buffers of HR rows (one where a row is all the stage holds): the
  // next rows copy while these are scored.
  constexpr int NBUF = KROWS >= 2 ? 2 : 1, HR = KROWS / NBUF;
  char *kst = (char *)accr;
  // KSTAGE: rows [j0, j0 + nk) of the chunk at c0 (KV head columns kcol)
  // into buffer b of accr (free until the V pass's sums), piece v of row j
  // at slot v ^ (j % CH): a quarter-warp's 16-byte reads of one piece of
  // eight consecutive rows then fall in distinct banks. One commit group.
  auto stage_keys = [&](int c0, int j0, int nk, long long kcol, int b) {
    const char *kbase = (const char *)kc + ((long long)(win.kv_start + c0) * RSTRIDE + kcol) * ESZ;
    char *dst = kst + (long long)b * HR * CH * 16;
    for (int i = tid; i < nk * CH; i += AMK_NT) {
      int j = i / CH, v = i - j * CH;
      const char *src = kbase + ((long long)(j0 + j) * RSTRIDE + (long long)v * VE) * ESZ;
      amk_cp_async16(amk_smem_addr(dst + ((long long)j * CH + (v ^ (j & (CH - 1)))) * 16), src,
                     true);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  int h_end = h_first + h_count;
  for (int h0 = h_first; h0 < h_end;) {
    int kvh = h0 / GROUP;
    long long kcol = PH ? 0 : (long long)kvh * HD; // KV head kvh's columns of a plane
    int lim = (kvh + 1) * GROUP < h_end ? (kvh + 1) * GROUP : h_end;
    int nb = lim - h0 < GQ ? lim - h0 : GQ; // heads in this pass, all of KV head kvh
    __syncthreads();
    // The first staged key rows go out before the query is loaded and
    // rotated: rows below pos do not depend on this step, so their round
    // trip overlaps the query's.
    int early_subs = 0; // the first chunk's sub-stages (HR rows) issued
    if constexpr (KSTAGE) {
      int n0 = win.kv_len < CHUNK ? win.kv_len : CHUNK;
      int cached0 = fresh && n0 == win.kv_len ? n0 - 1 : n0;
      for (; early_subs < NBUF && early_subs * HR < cached0; early_subs++) {
        int j0 = early_subs * HR;
        stage_keys(0, j0, cached0 - j0 < HR ? cached0 - j0 : HR, kcol, early_subs);
      }
    }
    if constexpr (ROPE) {
      // The pass's query heads, rotated, and (FRESH) row pos of KV head kvh
      // as amk_rope_kv stores it (qkv's rounding, then the cache's): one
      // item per thread, so every load is in flight at once.
      constexpr int HALF = HD / 2;
      int items = GQ * HALF + (fresh ? HALF : 0);
      for (int i = tid; i < items; i += AMK_NT) {
        bool qi = i < GQ * HALF;
        int q = qi ? i / HALF : 0, k = qi ? i - q * HALF : i - GQ * HALF;
        long long b = qi ? (long long)(h0 + q) * HD : (long long)(NH + kvh) * HD;
        long long vb = (long long)(NH + NKV + kvh) * HD;
        bool live = !qi || q < nb;
        float x1, x2, v1 = 0.0f, v2 = 0.0f;
        if constexpr ((TAGGED & 1) != 0) {
          // The words of qkv this item needs, all loads in flight, then
          // polled again until each carries this launch's tag.
          const unsigned long long *sh = (const unsigned long long *)A.shadow[0];
          const unsigned long long *wp[4] = {live ? sh + b + k : nullptr,
                                             live ? sh + b + HALF + k : nullptr,
                                             qi ? nullptr : sh + vb + k,
                                             qi ? nullptr : sh + vb + HALF + k};
          unsigned long long w[4];
#pragma unroll
          for (int j = 0; j < 4; j++)
            w[j] = wp[j] ? amk_tag_ld(wp[j]) : 0ull;
          amk_tag_settle<4, false>(P, idx, wp, w);
          x1 = live ? amk_tag_value(w[0]) : 0.0f;
          x2 = live ? amk_tag_value(w[1]) : 0.0f;
          if (!qi) {
            v1 = amk_tag_value(w[2]);
            v2 = amk_tag_value(w[3]);
          }
        } else {
          x1 = live ? amk_ld<QDT>(qsrc, b + k) : 0.0f;
          x2 = live ? amk_ld<QDT>(qsrc, b + HALF + k) : 0.0f;
          if (!qi) {
            v1 = amk_ld<QDT>(qsrc, vb + k);
            v2 = amk_ld<QDT>(qsrc, vb + HALF + k);
          }
        }
        float ang = (float)pos * amk_ld<FDT>(freq, k);
        float cs = cosf(ang), sn = sinf(ang);
        float r1 = amk_round<QDT>(x1 * cs - x2 * sn);
        float r2 = amk_round<QDT>(x2 * cs + x1 * sn);
        if (qi) {
          qs[q * HD + k] = r1;
          qs[q * HD + HALF + k] = r2;
        } else {
          fk[k] = amk_round<KDT>(r1);
          fk[HALF + k] = amk_round<KDT>(r2);
          fv[k] = amk_round<KDT>(v1);
          fv[HALF + k] = amk_round<KDT>(v2);
        }
      }
    } else {
      for (int i = tid; i < GQ * HD; i += AMK_NT) {
        int q = i / HD;
        qs[i] = q < nb ? amk_ld<QDT>(qsrc, (long long)h0 * HD + i) : 0.0f;
      }
    }
    __syncthreads();
    if (h0 == h_first)
      amk_mark_staged();
    float run_m[GQ], run_l[GQ], acc[GQ][VE];
#pragma unroll
    for (int q = 0; q < GQ; q++) {
      run_m[q] = -INFINITY;
      run_l[q] = 0.0f;
#pragma unroll
      for (int e = 0; e < VE; e++)
        acc[q][e] = 0.0f;
    }
    for (int c0 = 0; c0 < win.kv_len; c0 += CHUNK) {
      int n = win.kv_len - c0 < CHUNK ? win.kv_len - c0 : CHUNK;
      float cm[GQ];
#pragma unroll
      for (int q = 0; q < GQ; q++)
        cm[q] = -INFINITY;
      // FRESH: the chunk holding row pos (the window's last row) scores it
      // from fk, warp q for query head q; the other rows come from the cache.
      bool fresh_here = fresh && c0 + n == win.kv_len;
      int ncache = fresh_here ? n - 1 : n;
      // KSPLIT: CH lanes a key, one 16-byte piece each, AMK_ATTN_V_LOADS
      // keys a thread in flight: one round trip for that many x G keys,
      // where a thread's whole row (ptxas issues its pieces in three or four
      // batches, each summed before the next) took four for AMK_NT keys.
      if constexpr (KSPLIT) {
        constexpr int U = AMK_ATTN_V_LOADS;
        const char *kbase = (const char *)kc +
                            ((long long)(win.kv_start + c0) * RSTRIDE + kcol + (long long)c * VE) *
                                ESZ;
        for (int j0 = 0; j0 < ncache; j0 += U * G) {
          uint4 raw[U];
#pragma unroll
          for (int u = 0; u < U; u++) {
            int j = j0 + g + u * G;
            raw[u] = j < ncache ? __ldcg((const uint4 *)(kbase + (long long)j * RSTRIDE * ESZ))
                                : make_uint4(0u, 0u, 0u, 0u);
          }
#pragma unroll
          for (int u = 0; u < U; u++) {
            if (j0 + u * G >= ncache) // uniform across the block
              break;
            float kv[VE], d[GQ];
            amk_unpack16<KDT>(raw[u], kv);
#pragma unroll
            for (int q = 0; q < GQ; q++) {
              d[q] = 0.0f;
#pragma unroll
              for (int e = 0; e < VE; e++)
                d[q] += kv[e] * qs[q * HD + c * VE + e];
            }
#pragma unroll
            for (int off = 1; off < CH; off <<= 1)
#pragma unroll
              for (int q = 0; q < GQ; q++)
                d[q] += __shfl_xor_sync(0xffffffffu, d[q], off);
            int j = j0 + g + u * G;
            if (j < ncache) {
#pragma unroll
              for (int q = 0; q < GQ; q++) {
                float sq = d[q] * scale;
                if (c == 0)
                  sc[q * CHUNK + j] = sq;
                cm[q] = fmaxf(cm[q], sq);
              }
            }
          }
        }
      } else if constexpr (KSTAGE) {
        // Sub-stage s (rows [s HR, s HR + HR)) goes to buffer s % NBUF; the
        // one after the next is issued once s is scored, so at most NBUF
        // are in flight and the chunk's last ends with nothing pending (the
        // V pass's sums reuse the buffers).
        int nsub = (ncache + HR - 1) / HR;
        int issued = c0 == 0 ? early_subs : 0;
        auto issue_sub = [&](int t) {
          int j0 = t * HR;
          stage_keys(c0, j0, ncache - j0 < HR ? ncache - j0 : HR, kcol, t % NBUF);
        };
        for (; issued < nsub && issued < NBUF; issued++)
          issue_sub(issued);
        for (int sub = 0; sub < nsub; sub++) {
          int j0 = sub * HR, nk = ncache - j0 < HR ? ncache - j0 : HR;
          if (issued > sub + 1)
            amk_cp_async_wait<1>();
          else
            amk_cp_async_wait<0>();
          __syncthreads();
          const char *kbuf = kst + (long long)(sub % NBUF) * HR * CH * 16;
          for (int j = tid; j < nk; j += AMK_NT) {
            float sv[GQ];
#pragma unroll
            for (int q = 0; q < GQ; q++)
              sv[q] = 0.0f;
            const uint4 *row = (const uint4 *)(kbuf + (long long)j * CH * 16);
#pragma unroll
            for (int v = 0; v < CH; v++) {
              float k[VE];
              amk_unpack16<KDT>(row[v ^ (j & (CH - 1))], k);
#pragma unroll
              for (int q = 0; q < GQ; q++)
#pragma unroll
                for (int e = 0; e < VE; e++)
                  sv[q] += k[e] * qs[q * HD + v * VE + e];
            }
#pragma unroll
            for (int q = 0; q < GQ; q++) {
              float sq = sv[q] * scale;
              sc[q * CHUNK + j0 + j] = sq;
              cm[q] = fmaxf(cm[q], sq);
            }
          }
          if (issued < nsub) {
            __syncthreads(); // this buffer's rows are scored
            issue_sub(issued++);
          }
        }
      } else {
        for (int jj = tid; jj < ncache; jj += AMK_NT) {
          long long row = (long long)(win.kv_start + c0 + jj) * RSTRIDE + kcol;
          float sv[GQ];
          amk_kdot_n<KDT, HD, GQ>(kc, row, qs, sv);
#pragma unroll
          for (int q = 0; q < GQ; q++) {
            float s = sv[q] * scale;
            sc[q * CHUNK + jj] = s;
            cm[q] = fmaxf(cm[q], s);
          }
        }
      }
      if (fresh_here && (tid >> 5) < GQ) {
        int wq = tid >> 5, lane = tid & 31;
        float d = 0.0f;
        for (int e = lane; e < HD; e += 32)
          d += fk[e] * qs[wq * HD + e];
        float s = amk_warp_sum(d) * scale;
        if (lane == 0)
          sc[wq * CHUNK + n - 1] = s;
#pragma unroll
        for (int q = 0; q < GQ; q++)
          if (q == wq)
            cm[q] = fmaxf(cm[q], s);
      }
      amk_block_reduce_n<GQ, true>(cm, red);
      float ls[GQ];
#pragma unroll
      for (int q = 0; q < GQ; q++) {
        cm[q] = fmaxf(run_m[q], cm[q]); // the new running max
        ls[q] = 0.0f;
      }
      for (int jj = tid; jj < n; jj += AMK_NT) {
#pragma unroll
        for (int q = 0; q < GQ; q++) {
          float e = expf(sc[q * CHUNK + jj] - cm[q]);
          sc[q * CHUNK + jj] = e;
          ls[q] += e;
        }
      }
      amk_block_reduce_n<GQ, false>(ls, red); // its barriers also publish sc
#pragma unroll
      for (int q = 0; q < GQ; q++) {
        float corr = run_m[q] == -INFINITY ? 0.0f : expf(run_m[q] - cm[q]);
        run_l[q] = run_l[q] * corr + ls[q];
        run_m[q] = cm[q];
#pragma unroll
        for (int e = 0; e < VE; e++)
          acc[q][e] *= corr;
      }
      // The cache's rows of this chunk: all but row pos (FRESH, the last).
      int nv = fresh && c0 + n == win.kv_len ? n - 1 : n;
      if (vthread) {
        if (nv < n && g == nv % gn) {
#pragma unroll
          for (int q = 0; q < GQ; q++)
#pragma unroll
            for (int e = 0; e < VE; e++)
              acc[q][e] += sc[q * CHUNK + nv] * fv[c * VE + e];
        }
        if constexpr (VECV) {
          const char *vbase = (const char *)vc +
                              ((long long)(win.kv_start + c0) * RSTRIDE + VOFF +
                               kcol + (long long)c * VE) * ESZ;
          // AMK_ATTN_V_LOADS rows a thread in flight at once, the last
          // batch predicated: one round trip for up to that many x G keys.
          constexpr int U = AMK_ATTN_V_LOADS;
          for (int jj = g; jj < nv; jj += U * gn) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; u++)
              raw[u] = jj + u * gn < nv ? __ldcg((const uint4 *)(vbase + (long long)(jj + u * gn) *
                                                                              RSTRIDE * ESZ))
                                        : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
            for (int u = 0; u < U; u++) {
              if (jj + u * gn >= nv)
                break;
              float vv[VE];
              amk_unpack16<KDT>(raw[u], vv);
#pragma unroll
              for (int q = 0; q < GQ; q++) {
                float pj = sc[q * CHUNK + jj + u * gn];
#pragma unroll
                for (int e = 0; e < VE; e++)
                  acc[q][e] += pj * vv[e];
              }
            }
          }
        } else {
          long long row0 = (long long)(win.kv_start + c0) * RSTRIDE + VOFF + kcol + c;
          for (int jj = g; jj < nv; jj += G) {
            float v = amk_ld<KDT>(vc, row0 + (long long)jj * RSTRIDE);
#pragma unroll
            for (int q = 0; q < GQ; q++)
              acc[q][0] += sc[q * CHUNK + jj] * v;
          }
        }
      }
      __syncthreads();
    }
    // The key groups' partial sums, all heads at once: lanes of one warp
    // that own the same 16 bytes of a value row add theirs by shuffles,
    // then one partial row per warp goes to shared memory (else one per
    // group), one barrier, and thread (q, d) adds the rows.
    constexpr int PROWS = SHFL ? AMK_NWARPS : G;
    if constexpr (SHFL) {
      for (int off = ch; off < 32; off <<= 1)
#pragma unroll
        for (int q = 0; q < GQ; q++)
#pragma unroll
          for (int e = 0; e < VE; e++)
            acc[q][e] += __shfl_xor_sync(0xffffffffu, acc[q][e], off);
    }
    int prow = SHFL ? tid >> 5 : g;
    if (vthread && (!SHFL || (tid & 31) < ch)) {
#pragma unroll
      for (int q = 0; q < GQ; q++)
#pragma unroll
        for (int e = 0; e < VE; e++)
          accr[(q * PROWS + prow) * HD + c * VE + e] = acc[q][e];
    }
    __syncthreads();
    for (int i = tid; i < nb * HD; i += AMK_NT) {
      int q = i / HD, d = i - q * HD;
      if (d < d_lo || d >= d_hi) // a column the V pass left out
        continue;
      float a = 0.0f;
      for (int r = 0; r < PROWS; r++)
        a += accr[(q * PROWS + r) * HD + d];
      int h = h0 + q;
#pragma unroll
      for (int qq = 0; qq < GQ; qq++) {
        if (qq != q)
          continue;
        if constexpr (PARTIAL) {
          long long o = (long long)h * (HD + 2);
          amk_st<ODT>(out, o + d, a);
          if constexpr ((TAGGED & 2) != 0)
            amk_tag_put(o + d, amk_round<ODT>(a));
          if (d == 0) {
            amk_st<ODT>(out, o + HD, run_m[qq]);
            amk_st<ODT>(out, o + HD + 1, run_l[qq]);
            if constexpr ((TAGGED & 2) != 0) {
              amk_tag_put(o + HD, amk_round<ODT>(run_m[qq]));
              amk_tag_put(o + HD + 1, amk_round<ODT>(run_l[qq]));
            }
          }
        } else if constexpr (ONE) {
          sout[d] = amk_round<ODT>(run_l[qq] > 0.0f ? a / run_l[qq] : 0.0f);
        } else {
          float v = run_l[qq] > 0.0f ? a / run_l[qq] : 0.0f;
          amk_st<ODT>(out, (long long)h * HD + d, v);
          if constexpr ((TAGGED & 2) != 0)
            amk_tag_put((long long)h * HD + d, amk_round<ODT>(v));
        }
      }
    }
    h0 += nb;
  }
}
template <int MODE, int QDT, int KDT, int ODT, int FDT, int HD, int NH, int NKV, int ROWS,
          int PARTIAL, int TAGGED>
__device__ void amk_attention(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  amk_attention_run<MODE, QDT, KDT, ODT, FDT, HD, NH, NKV, ROWS, PARTIAL, TAGGED, false>(
      P, I, A, idx, pos, smem, nullptr);
}

// Pattern attention_o (docs/Fusion.md): the attention of the one query
// head holding columns [n_off, n_off + n_tile) of the attention output
// (attention_rope with row pos from qkv, rounded to qkv's dtype), then the
// tile's share of the o projection, Wot's rows n_off.. (the weight
// transposed, [NH * HD, HIDDEN]), added into the f32 accumulator; the tile
// at column 0 adds the residual x too. One task and one hop a layer fewer
// than attention tiles and o_proj tiles.
template <int QDT, int KDT, int FDT, int WDT, int XDT, int HD, int NH, int NKV, int ROWS, int PH,
          int HIDDEN>
__device__ void amk_attention_o(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *Wot = amk_in(A, 1);
  const void *x = amk_in(A, 4);
  float *out = (float *)amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  if (!amk_tile_rows_ok(P, idx, n_off, n_tile, NH * HD))
    return;
  int d0 = n_off % HD;
  if (n_tile <= 0 || d0 + n_tile > HD) { // the columns of one head
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_SHAPE, idx, n_off, n_tile);
    return;
  }
  // Without the L2 stream (which carries them), the rows to L2 while the
  // attention runs.
  if constexpr (AMK_MLP_PREFETCH_BYTES > 0 && !AMK_STREAM_HAS_L2) {
    long long bytes = (long long)n_tile * HIDDEN * AmkVec<WDT>::ESZ;
    bytes = bytes < AMK_MLP_PREFETCH_BYTES ? bytes : AMK_MLP_PREFETCH_BYTES;
    bytes &= ~15ll;
    const char *rows = (const char *)Wot + (long long)n_off * HIDDEN * AmkVec<WDT>::ESZ;
    if (threadIdx.x == 0 && bytes > 0 && ((unsigned long long)rows & 15ull) == 0)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(rows), "r"((unsigned)bytes)
                   : "memory");
  }
  float *head = smem;      // HD: the head's attention output
  float *work = smem + HD; // the attention's scratch, then the share's HIDDEN sums
  amk_attention_run<PH ? 5 : 4, QDT, KDT, QDT, FDT, HD, NH, NKV, ROWS, 0, 0, true>(
      P, I, A, idx, pos, work, head);
  __syncthreads();
  for (int n = threadIdx.x; n < HIDDEN; n += AMK_NT)
    work[n] = 0.0f;
  __syncthreads();
  amk_mark_loop();
  const char *rows = (const char *)Wot + (long long)n_off * HIDDEN * AmkVec<WDT>::ESZ;
  amk_share_rows<WDT, HIDDEN>(rows, head + d0, n_tile, work);
  __syncthreads();
  amk_mark_looped();
  auto res4 = [&](int v) {
    return make_float4(amk_ld<XDT>(x, 4 * v), amk_ld<XDT>(x, 4 * v + 1),
                       amk_ld<XDT>(x, 4 * v + 2), amk_ld<XDT>(x, 4 * v + 3));
  };
  auto res1 = [&](int n) { return amk_ld<XDT>(x, n); };
  amk_share_add<HIDDEN>(out, work, n_off == 0, n_off, n_tile, res4, res1);
}
// The weight stream's view of an attention_o variant: in L2 mode its rows
// of Wot; never the ring.
template <int QDT, int KDT, int FDT, int WDT, int XDT, int HD, int NH, int NKV, int ROWS, int PH,
          int HIDDEN>
__device__ amk_stream_info_t amk_attention_o_stream() {
  if constexpr (AMK_STREAM_HAS_L2 && amk_gemv_streams<WDT, HIDDEN, 1, 0>())
    return amk_stream_info_t{HIDDEN * AmkVec<WDT>::ESZ, 1, NH * HD, 0, 0, 0};
  else
    return amk_stream_info_t{0, 0, 0, 0, 0};
}

// The cache rows an attention tile reads that earlier steps wrote (below
// pos), for one bulk L2 prefetch, so that its key and value loads after the
// wait find them there rather than in DRAM: false where there are none.
// Per-head caches (MODE 3, 5) only, where one KV head's rows are contiguous.
template <int MODE, int QDT, int KDT, int ODT, int FDT, int HD, int NH, int NKV, int ROWS,
          int PARTIAL, int TAGGED>
__device__ __forceinline__ bool amk_attention_kv_span(AmkI I, AmkA A, int pos, const char **base,
                                                      unsigned *bytes) {
  if constexpr ((MODE == 3 || MODE == 5) && AmkVec<KDT>::OK) {
    AmkWindow win = amk_window(I, A, pos);
    long long first = win.kv_start, end = (long long)win.kv_start + win.kv_len;
    if (end > pos)
      end = pos;
    if (first < 0 || end > ROWS || end <= first)
      return false;
    constexpr long long ROW_BYTES = 2LL * HD * AmkVec<KDT>::ESZ; // [ROWS, 2, HD]
    const char *b = (const char *)amk_in(A, 2) + first * ROW_BYTES;
    long long n = (end - first) * ROW_BYTES;
    if (((unsigned long long)b & 15ull) != 0 || n % 16 != 0 || n >= (1ll << 31))
      return false;
    *base = b;
    *bytes = (unsigned)n;
    return true;
  }
  return false;
}

// Thread 0, before an attention tile's waits (AMK_KV_PREFETCH 1, or 2
// without the L2 stream): its cache span to L2.
template <int MODE, int QDT, int KDT, int ODT, int FDT, int HD, int NH, int NKV, int ROWS,
          int PARTIAL, int TAGGED>
__device__ __forceinline__ void amk_attention_prewait(AmkI I, AmkA A, int pos) {
  if constexpr (AMK_KV_PREFETCH == 1 || (AMK_KV_PREFETCH == 2 && !AMK_STREAM_HAS_L2)) {
    const char *base;
    unsigned bytes;
    if (amk_attention_kv_span<MODE, QDT, KDT, ODT, FDT, HD, NH, NKV, ROWS, PARTIAL, TAGGED>(I, A, pos,
                                                                                 &base, &bytes))
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base), "r"(bytes)
                   : "memory");
  }
}

// ATTENTION_TILE over M > 1 query rows (a prefill chunk): q and out
// [M, NH * HD], caches [ROWS, NKV, HD]. With flags bit 0 (causal) query row r
// reads [kv_start, kv_start + kv_len - (M - 1 - r)), else the whole window
// (docs/Instructions.md; the VM's amk_kernel_ATTENTION_TILE). The decode
// template above is left alone: this one is only instantiated for M > 1.
// Per KV head, the query vectors (row r, head h of that KV head) go in
// passes of AMK_NT / 16; 16 consecutive lanes own one query vector for the
// whole pass (its scores, its online-softmax state, HD / 16 of its output
// elements), so the softmax needs only shuffles among those 16 lanes. K and
// V come in tiles of AMK_ATTR_BK rows staged in shared memory as fp32.
// SUB bit 0: only query heads [n_off, n_off + N_tile) (whole GQA groups),
// bit 1: only query rows [m_off, m_off + M_tile) (params, checked by the
// validator); a row keeps its causal window (r is its index in the chunk).
#define AMK_ATTR_BK 32
template <int QDT, int KDT, int ODT, int HD, int NH, int NKV, int ROWS, int M, int SUB>
__device__ void amk_attention_rows(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  static_assert(M > 1, "one query row takes amk_attention");
  constexpr int NQ = AMK_NT / 16;       // query vectors per pass
  constexpr int DPT = (HD + 15) / 16;   // output elements per lane
  constexpr int KPT = AMK_ATTR_BK / 16; // scores per lane per tile
  constexpr int KS = HD + 1;            // padded K row: 16 rows in distinct banks
  constexpr int GROUP = NH / NKV;
  constexpr int WIDTH = NH * HD;
  const void *q = amk_in(A, 0), *kc = amk_in(A, 1), *vc = amk_in(A, 2);
  void *out = amk_out(A, 0);
  AmkWindow win = amk_window(I, A, pos);
  if (win.kv_start < 0 || win.kv_len < 0 || win.kv_start > ROWS - win.kv_len) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_INDEX, idx, win.kv_start, win.kv_len);
    return;
  }
  const bool causal = (I.params.flags.i & 1) != 0;
  const float scale = I.params.scale.f;
  float *qs = smem;                    // NQ * HD
  float *ks = qs + NQ * HD;            // AMK_ATTR_BK * KS
  float *vs = ks + AMK_ATTR_BK * KS;   // AMK_ATTR_BK * HD
  float *ps = vs + AMK_ATTR_BK * HD;   // NQ * AMK_ATTR_BK
  const int tid = threadIdx.x, qv = tid >> 4, l16 = tid & 15;
  const int kvh_lo = (SUB & 1) ? I.params.n_off.i / GROUP : 0;
  const int kvh_hi = (SUB & 1) ? (I.params.n_off.i + I.params.N_tile.i) / GROUP : NKV;
  const int row_lo = (SUB & 2) ? I.params.m_off.i : 0;
  const int NV = ((SUB & 2) ? I.params.M_tile.i : M) * GROUP; // query vectors of one KV head
  for (int kvh = kvh_lo; kvh < kvh_hi; kvh++) {
    for (int v0 = 0; v0 < NV; v0 += NQ) {
      // This lane's query vector: row r, head h; its window end (exclusive).
      int v = v0 + qv;
      bool live = v < NV;
      int r = row_lo + (live ? v / GROUP : 0), h = kvh * GROUP + (live ? v % GROUP : 0);
      int end = win.kv_start + win.kv_len - (causal ? (M - 1 - r) : 0);
      if (end < win.kv_start)
        end = win.kv_start;
      // The pass reads up to its last query row's end.
      int last_v = v0 + NQ - 1 < NV - 1 ? v0 + NQ - 1 : NV - 1;
      int pass_end =
          win.kv_start + win.kv_len - (causal ? (M - 1 - (row_lo + last_v / GROUP)) : 0);
      __syncthreads(); // the previous pass is done with qs
      for (int i = tid; i < NQ * HD; i += AMK_NT) {
        int vq = v0 + i / HD, d = i % HD;
        qs[i] = vq < NV ? amk_ld<QDT>(q, (long long)(row_lo + vq / GROUP) * WIDTH +
                                             (long long)(kvh * GROUP + vq % GROUP) * HD + d)
                        : 0.0f;
      }
      float run_m = -INFINITY, run_l = 0.0f, acc[DPT];
#pragma unroll
      for (int i = 0; i < DPT; i++)
        acc[i] = 0.0f;
      for (int k0 = win.kv_start; k0 < pass_end; k0 += AMK_ATTR_BK) {
        int n = pass_end - k0 < AMK_ATTR_BK ? pass_end - k0 : AMK_ATTR_BK;
        __syncthreads(); // qs written; the previous tile's ks, vs, ps read
        for (int i = tid; i < AMK_ATTR_BK * HD; i += AMK_NT) {
          int j = i / HD, d = i % HD;
          long long off = (long long)(k0 + j) * (NKV * HD) + (long long)kvh * HD + d;
          ks[j * KS + d] = j < n ? amk_ld<KDT>(kc, off) : 0.0f;
          vs[j * HD + d] = j < n ? amk_ld<KDT>(vc, off) : 0.0f;
        }
        __syncthreads();
        // Scores of keys l16 + 16 * t of the tile; -inf past this row's end.
        float s[KPT], tmax = -INFINITY;
#pragma unroll
        for (int t = 0; t < KPT; t++) {
          int j = l16 + 16 * t;
          float dot = 0.0f;
#pragma unroll 8
          for (int d = 0; d < HD; d++)
            dot += qs[qv * HD + d] * ks[j * KS + d];
          s[t] = k0 + j < end ? dot * scale : -INFINITY;
          tmax = fmaxf(tmax, s[t]);
        }
#pragma unroll
        for (int o = 8; o > 0; o >>= 1)
          tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
        float m_new = fmaxf(run_m, tmax), lsum = 0.0f;
#pragma unroll
        for (int t = 0; t < KPT; t++) {
          float p = s[t] == -INFINITY ? 0.0f : expf(s[t] - m_new);
          ps[qv * AMK_ATTR_BK + l16 + 16 * t] = p;
          lsum += p;
        }
#pragma unroll
        for (int o = 8; o > 0; o >>= 1)
          lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
        float corr = run_m == -INFINITY ? 0.0f : expf(run_m - m_new);
        run_l = run_l * corr + lsum;
        run_m = m_new;
        __syncwarp(); // ps of this query vector: written and read by its 16 lanes
#pragma unroll
        for (int i = 0; i < DPT; i++) {
          int d = l16 + 16 * i;
          float a = acc[i] * corr;
          if (HD % 16 == 0 || d < HD)
            for (int j = 0; j < n; j++)
              a += ps[qv * AMK_ATTR_BK + j] * vs[j * HD + d];
          acc[i] = a;
        }
      }
      if (live) {
        long long o = (long long)r * WIDTH + (long long)h * HD;
#pragma unroll
        for (int i = 0; i < DPT; i++) {
          int d = l16 + 16 * i;
          if (HD % 16 == 0 || d < HD)
            amk_st<ODT>(out, o + d, run_l > 0.0f ? acc[i] / run_l : 0.0f);
        }
      }
    }
  }
}

// The tensor-core form of amk_attention_rows (FlashAttention-2 style) for
// q and caches of one 16-bit dtype DT (bf16 or f16) and HD a multiple of
// 32: each warp owns 16 query vectors (vector v of the task: row
// row_lo + v / GROUP, head kvh * GROUP + v % GROUP), keeps their Q
// fragments in registers and walks the keys in tiles of AMK_ATTRM_BK rows,
// which the block stages in shared memory as DT with cp.async (double
// buffered, L2 only: the caches are written during the launch; rows past
// the pass zero-filled). S = Q K^T and O += P V are mma.sync m16n8k16 with
// fp32 accumulation (P rounded to DT, as FlashAttention does); the online
// softmax runs on the accumulator fragments (a row's 4 lanes reduce with
// shuffles). A warp skips tiles past its last row's causal end. SUB as
// amk_attention_rows.
#define AMK_ATTRM_BK 64
__device__ constexpr int amk_attrm_ld(int hd) { return hd + 8; } // 16-byte row gap: no bank conflicts
__device__ __forceinline__ void amk_ldmatrix_x4_trans(unsigned *r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
template <int DT> __device__ __forceinline__ unsigned amk_pack2(float lo, float hi) {
  if constexpr (DT == AMK_ABI_DTYPE_BF16)
    return (unsigned)amk_f2bf(lo) | ((unsigned)amk_f2bf(hi) << 16);
  else
    return (unsigned)amk_f2h(lo) | ((unsigned)amk_f2h(hi) << 16);
}
template <int DT, int ODT, int HD, int NH, int NKV, int ROWS, int M, int SUB>
__device__ void amk_attention_rows_mma(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  static_assert(M > 1 && HD % 32 == 0 && (DT == AMK_ABI_DTYPE_BF16 || DT == AMK_ABI_DTYPE_F16),
                "16-bit q and caches, HD a multiple of 32");
  constexpr int BK = AMK_ATTRM_BK, LD = amk_attrm_ld(HD), GROUP = NH / NKV;
  constexpr int WIDTH = NH * HD, KW = NKV * HD, KT = HD / 16, NT8 = HD / 8;
  constexpr int PIECES = BK * HD / 8; // 16-byte pieces of one K (or V) tile
  const unsigned short *q = (const unsigned short *)amk_in(A, 0);
  const unsigned short *kc = (const unsigned short *)amk_in(A, 1);
  const unsigned short *vc = (const unsigned short *)amk_in(A, 2);
  void *out = amk_out(A, 0);
  AmkWindow win = amk_window(I, A, pos);
  if (win.kv_start < 0 || win.kv_len < 0 || win.kv_start > ROWS - win.kv_len) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_INDEX, idx, win.kv_start, win.kv_len);
    return;
  }
  const bool causal = (I.params.flags.i & 1) != 0;
  const float scale = I.params.scale.f;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int kvh_lo = (SUB & 1) ? I.params.n_off.i / GROUP : 0;
  const int kvh_hi = (SUB & 1) ? (I.params.n_off.i + I.params.N_tile.i) / GROUP : NKV;
  const int row_lo = (SUB & 2) ? I.params.m_off.i : 0;
  const int NV = ((SUB & 2) ? I.params.M_tile.i : M) * GROUP;
  const int wend = win.kv_start + win.kv_len;
  // The window end (exclusive) of query vector v (none past NV).
  auto end_of = [&](int v) {
    if (v >= NV)
      return win.kv_start;
    int e = wend - (causal ? (M - 1 - (row_lo + v / GROUP)) : 0);
    return e < win.kv_start ? win.kv_start : e;
  };
  const unsigned sbase = amk_smem_addr(smem);
  for (int kvh = kvh_lo; kvh < kvh_hi; kvh++) {
    for (int v0 = 0; v0 < NV; v0 += AMK_NWARPS * 16) {
      const int vw = v0 + warp * 16, va = vw + g, vb = va + 8;
      const int end_a = end_of(va), end_b = end_of(vb);
      const int warp_end = end_of(vw + 15 < NV ? vw + 15 : NV - 1);
      const int last = v0 + AMK_NWARPS * 16 - 1 < NV - 1 ? v0 + AMK_NWARPS * 16 - 1 : NV - 1;
      const int pass_end = end_of(last);
      // Q fragments (rows g and g + 8 of the warp's 16 vectors).
      unsigned qa[KT][4];
      {
        long long oa = (long long)(row_lo + va / GROUP) * WIDTH + (long long)(kvh * GROUP + va % GROUP) * HD;
        long long ob = (long long)(row_lo + vb / GROUP) * WIDTH + (long long)(kvh * GROUP + vb % GROUP) * HD;
#pragma unroll
        for (int kk = 0; kk < KT; kk++) {
          int c = kk * 16 + t4 * 2;
          qa[kk][0] = va < NV ? __ldcg((const unsigned *)(q + oa + c)) : 0u;
          qa[kk][1] = vb < NV ? __ldcg((const unsigned *)(q + ob + c)) : 0u;
          qa[kk][2] = va < NV ? __ldcg((const unsigned *)(q + oa + c + 8)) : 0u;
          qa[kk][3] = vb < NV ? __ldcg((const unsigned *)(q + ob + c + 8)) : 0u;
        }
      }
      float o[NT8][4];
#pragma unroll
      for (int n = 0; n < NT8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
      float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
      // Stage s: K tile at s * 2 * BK * LD elements, its V tile after it.
      auto load_tile = [&](int k0, int s) {
        unsigned dk = sbase + (unsigned)(s * 2 * BK * LD) * 2, dv = dk + (unsigned)(BK * LD) * 2;
        for (int i = tid; i < PIECES; i += AMK_NT) {
          int j = i / (HD / 8), c = (i % (HD / 8)) * 8;
          bool in = k0 + j < pass_end;
          long long off = (long long)(k0 + j) * KW + (long long)kvh * HD + c;
          amk_cp_async16(dk + (unsigned)(j * LD + c) * 2, in ? kc + off : kc, in);
          amk_cp_async16(dv + (unsigned)(j * LD + c) * 2, in ? vc + off : vc, in);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
      };
      __syncthreads(); // the previous pass is done with both stages
      if (win.kv_start < pass_end)
        load_tile(win.kv_start, 0);
      int s = 0;
      for (int k0 = win.kv_start; k0 < pass_end; k0 += BK, s ^= 1) {
        if (k0 + BK < pass_end) {
          load_tile(k0 + BK, s ^ 1);
          amk_cp_async_wait<1>();
        } else {
          amk_cp_async_wait<0>();
        }
        __syncthreads(); // tile k0 is in stage s for every warp
        if (k0 < warp_end) {
          const unsigned sk = sbase + (unsigned)(s * 2 * BK * LD) * 2, sv = sk + (unsigned)(BK * LD) * 2;
          float sc[BK / 8][4];
#pragma unroll
          for (int nb = 0; nb < BK / 8; nb++) {
            sc[nb][0] = sc[nb][1] = sc[nb][2] = sc[nb][3] = 0.0f;
#pragma unroll
            for (int k2 = 0; k2 < KT / 2; k2++) {
              unsigned b[4];
              amk_ldmatrix_x4(b, sk + (unsigned)((nb * 8 + (lane & 7)) * LD + k2 * 32 + (lane >> 3) * 8) * 2);
              amk_mma16816<DT>(sc[nb], qa[2 * k2], b);
              amk_mma16816<DT>(sc[nb], qa[2 * k2 + 1], b + 2);
            }
          }
          float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
          for (int nb = 0; nb < BK / 8; nb++) {
            int kj = k0 + nb * 8 + t4 * 2;
            sc[nb][0] = kj < end_a ? sc[nb][0] * scale : -INFINITY;
            sc[nb][1] = kj + 1 < end_a ? sc[nb][1] * scale : -INFINITY;
            sc[nb][2] = kj < end_b ? sc[nb][2] * scale : -INFINITY;
            sc[nb][3] = kj + 1 < end_b ? sc[nb][3] * scale : -INFINITY;
            mx_a = fmaxf(mx_a, fmaxf(sc[nb][0], sc[nb][1]));
            mx_b = fmaxf(mx_b, fmaxf(sc[nb][2], sc[nb][3]));
          }
#pragma unroll
          for (int x = 1; x <= 2; x <<= 1) {
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, x));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, x));
          }
          float na = fmaxf(m_a, mx_a), nb_ = fmaxf(m_b, mx_b);
          float ua = na == -INFINITY ? 0.0f : na, ub = nb_ == -INFINITY ? 0.0f : nb_;
          float ca = expf(m_a - ua), cb = expf(m_b - ub); // 0 while nothing was seen
          m_a = na;
          m_b = nb_;
          l_a *= ca;
          l_b *= cb;
#pragma unroll
          for (int n = 0; n < NT8; n++) {
            o[n][0] *= ca;
            o[n][1] *= ca;
            o[n][2] *= cb;
            o[n][3] *= cb;
          }
#pragma unroll
          for (int nb = 0; nb < BK / 8; nb++) {
            sc[nb][0] = expf(sc[nb][0] - ua);
            sc[nb][1] = expf(sc[nb][1] - ua);
            sc[nb][2] = expf(sc[nb][2] - ub);
            sc[nb][3] = expf(sc[nb][3] - ub);
            l_a += sc[nb][0] + sc[nb][1];
            l_b += sc[nb][2] + sc[nb][3];
          }
#pragma unroll
          for (int kk = 0; kk < BK / 16; kk++) {
            unsigned pa[4] = {amk_pack2<DT>(sc[2 * kk][0], sc[2 * kk][1]),
                              amk_pack2<DT>(sc[2 * kk][2], sc[2 * kk][3]),
                              amk_pack2<DT>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                              amk_pack2<DT>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
              unsigned b[4];
              amk_ldmatrix_x4_trans(
                  b, sv + (unsigned)((kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 +
                                     (lane >> 4) * 8) * 2);
              amk_mma16816<DT>(o[2 * dp], pa, b);
              amk_mma16816<DT>(o[2 * dp + 1], pa, b + 2);
            }
          }
        }
        __syncthreads(); // every warp is done with stage s before it is refilled
      }
#pragma unroll
      for (int x = 1; x <= 2; x <<= 1) {
        l_a += __shfl_xor_sync(0xffffffffu, l_a, x);
        l_b += __shfl_xor_sync(0xffffffffu, l_b, x);
      }
      float ia = l_a > 0.0f ? 1.0f / l_a : 0.0f, ib = l_b > 0.0f ? 1.0f / l_b : 0.0f;
      long long oa = (long long)(row_lo + va / GROUP) * WIDTH + (long long)(kvh * GROUP + va % GROUP) * HD;
      long long ob = (long long)(row_lo + vb / GROUP) * WIDTH + (long long)(kvh * GROUP + vb % GROUP) * HD;
#pragma unroll
      for (int n = 0; n < NT8; n++) {
        int d = n * 8 + t4 * 2;
        if (va < NV) {
          amk_st<ODT>(out, oa + d, o[n][0] * ia);
          amk_st<ODT>(out, oa + d + 1, o[n][1] * ia);
        }
        if (vb < NV) {
          amk_st<ODT>(out, ob + d, o[n][2] * ib);
          amk_st<ODT>(out, ob + d + 1, o[n][3] * ib);
        }
      }
    }
  }
}

// How many leading partials of a combine can hold keys: with partials that
// follow the position (A.combine_follows), partition p of np covers rows
// from p * c, c = ceil(W / np), W = pos + 1, so those from ceil(W / c) on
// are empty (m = -inf, l = 0: weight 0) and are not read; else all np.
__device__ __forceinline__ int amk_live_parts(AmkA A, int pos, int np) {
  if (!A.combine_follows)
    return np;
  long long w = (long long)pos + AMK_STEP_ROWS, c = (w + np - 1) / np;
  long long live = (w + c - 1) / c;
  return live < np ? (int)live : np;
}

// ATTENTION_COMBINE: NP partials [NH, HD + 2] -> [NH * HD]. The per-head
// weights exp(m_p - m) come first (one thread per head, every partition's
// m and l loaded at once), then every element sums its partials with all
// loads in flight: the same operations in the same order as one pass per
// element, without its chains of dependent loads.
// Two consecutive elements i, i + 1 of a partial (i even; 8-byte aligned
// for f32, 4-byte for 16-bit types).
template <int DT> __device__ __forceinline__ float2 amk_ld_pair(const void *p, long long i) {
  if constexpr (DT == AMK_ABI_DTYPE_F32) {
    return __ldcg((const float2 *)p + i / 2);
  } else {
    unsigned int w = __ldcg((const unsigned int *)p + i / 2);
    if constexpr (DT == AMK_ABI_DTYPE_BF16)
      return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    else
      return make_float2(amk_h2f((unsigned short)(w & 0xffffu)), amk_h2f((unsigned short)(w >> 16)));
  }
}

// One head's combine weights exp(m_p - m) from its partials' m and l (an
// empty partial, l = 0, weighs nothing) into weight[0 .. NP), and their
// l-weighted sum, floored, into *denom.
template <int NP>
__device__ __forceinline__ void amk_combine_weights(const float (&mp)[NP], const float (&lp)[NP],
                                                    float *weight, float *denom) {
  float m = -INFINITY;
#pragma unroll
  for (int p = 0; p < NP; p++)
    m = fmaxf(m, mp[p]);
  float d = 0.0f;
#pragma unroll
  for (int p = 0; p < NP; p++) {
    float w = lp[p] > 0.0f ? expf(mp[p] - m) : 0.0f;
    d += lp[p] * w;
    weight[p] = w;
  }
  *denom = d < 1e-20f ? 1e-20f : d;
}

// Values e, e + 1 of a head from its partials' pairs v[p] and weights.
template <int NP, class Store>
__device__ __forceinline__ void amk_combine_pair(const float2 (&v)[NP], const float *weight,
                                                 float denom, int e, Store &store) {
  float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
  for (int p = 0; p < NP; p++) {
    a0 += v[p].x * weight[p];
    a1 += v[p].y * weight[p];
  }
  store(e, a0 / denom);
  store(e + 1, a1 / denom);
}

// The combine of NP split-KV partials [NH, HD + 2] (acc | m | l per head):
// value i of [NH * HD] goes to store(i, v), with the operations and order
// of instructions/attention.c. The per-head weights come first (one thread
// per head, every partial's m and l loaded at once); with pairs of values
// (even HD, aligned partials) each thread's first loads are issued before
// them, so a tile waits about one round trip for the whole combine (the
// element loop waited one per few elements: an 8B o_proj tile took 5 us
// longer with it).
template <int PDT, int HD, int NH, int NP, class Store>
__device__ __forceinline__ void amk_combine_into(const void *const *parts, int live,
                                                 float *scratch, Store store) {
  float *weight = scratch;           // [NH][NP]
  float *denom = scratch + NH * NP;  // [NH]
  constexpr int ESZ = PDT == AMK_ABI_DTYPE_F32 ? 4 : 2;
  constexpr bool PAIRS = HD % 2 == 0 && (PDT == AMK_ABI_DTYPE_F32 || PDT == AMK_ABI_DTYPE_BF16 ||
                                         PDT == AMK_ABI_DTYPE_F16);
  constexpr int NPAIR = NH * HD / 2, R = 4; // pairs per thread per round
  constexpr int ROUNDS = (NPAIR + AMK_NT * R - 1) / (AMK_NT * R);
  bool pairs = PAIRS;
#pragma unroll
  for (int p = 0; p < NP; p++)
    pairs = pairs && ((unsigned long long)parts[p] & (2 * ESZ - 1)) == 0;
  float2 v[R][NP];
  // A round's loads: pair q = tid + (round * R + j) * AMK_NT, elements 2q, 2q + 1.
  auto load_round = [&](int round) {
#pragma unroll
    for (int j = 0; j < R; j++) {
      int q = threadIdx.x + (round * R + j) * AMK_NT;
      if (q < NPAIR) {
        int e = 2 * q, h = e / HD, d = e - h * HD;
#pragma unroll
        for (int p = 0; p < NP; p++)
          v[j][p] = p < live ? amk_ld_pair<PDT>(parts[p], (long long)h * (HD + 2) + d)
                             : make_float2(0.0f, 0.0f);
      }
    }
  };
  if (pairs)
    load_round(0);
  for (int h = threadIdx.x; h < NH; h += AMK_NT) {
    long long base = (long long)h * (HD + 2);
    float mp[NP], lp[NP];
#pragma unroll
    for (int p = 0; p < NP; p++) {
      mp[p] = p < live ? amk_ld<PDT>(parts[p], base + HD) : -INFINITY;
      lp[p] = p < live ? amk_ld<PDT>(parts[p], base + HD + 1) : 0.0f;
    }
    amk_combine_weights<NP>(mp, lp, weight + h * NP, denom + h);
  }
  __syncthreads();
  if (pairs) {
    for (int round = 0; round < ROUNDS; round++) {
      if (round > 0)
        load_round(round);
#pragma unroll
      for (int j = 0; j < R; j++) {
        int q = threadIdx.x + (round * R + j) * AMK_NT;
        if (q < NPAIR) {
          int e = 2 * q, h = e / HD;
          amk_combine_pair<NP>(v[j], weight + h * NP, denom[h], e, store);
        }
      }
    }
    return;
  }
#pragma unroll 4
  for (int i = threadIdx.x; i < NH * HD; i += AMK_NT) {
    int h = i / HD, d = i - h * HD;
    long long base = (long long)h * (HD + 2);
    float acc = 0.0f;
#pragma unroll
    for (int p = 0; p < NP; p++)
      if (p < live)
        acc += amk_ld<PDT>(parts[p], base + d) * weight[h * NP + p];
    store(i, acc / denom[h]);
  }
}

template <int PDT, int ODT, int HD, int NH, int NP>
__device__ void amk_combine(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *parts[NP];
#pragma unroll
  for (int p = 0; p < NP; p++)
    parts[p] = amk_in(A, p);
  void *out = amk_out(A, 0);
  amk_combine_into<PDT, HD, NH, NP>(parts, amk_live_parts(A, pos, NP), smem,
                                    [&](int i, float v) { amk_st<ODT>(out, i, v); });
}

// GEMV pattern combine_residual: the o_proj tile with the split-KV combine
// folded in. Inputs p_0, W, r, p_1 .. p_{NP-1}: every tile combines all NP
// partials into its input vector (rounded to the output dtype, as the
// unfused attn buffer held it), then out[cols] = r[cols] + x @ W[cols]^T.
// One task and one dependency hop fewer per layer than a combine task.
// amk_combine_into over the partials' shadows (launch-tagged transfers):
// the same operations in the same order on the same values (a shadow holds
// each partial value as f32), each pair of words polled until it carries
// this launch's tag. HD is even (transfers.c), so every head's values and
// its m | l come in 16-byte pairs.
template <int HD, int NH, int NP, class Store>
__device__ __forceinline__ void amk_combine_into_tagged(AmkP P, int idx,
                                                        const unsigned long long *const *parts,
                                                        int live, float *scratch, Store store) {
  static_assert(HD % 2 == 0, "tagged partials are read in pairs");
  float *weight = scratch;          // [NH][NP]
  float *denom = scratch + NH * NP; // [NH]
  constexpr int NPAIR = NH * HD / 2, R = 2; // two pairs a round: twice the registers of a float pair
  constexpr int ROUNDS = (NPAIR + AMK_NT * R - 1) / (AMK_NT * R);
  const unsigned long long *wp[R * NP];
  unsigned long long w[2 * R * NP];
  auto load_round = [&](int round) {
#pragma unroll
    for (int j = 0; j < R; j++) {
      int q = threadIdx.x + (round * R + j) * AMK_NT;
      int e = 2 * q, h = e / HD, d = e - h * HD;
#pragma unroll
      for (int p = 0; p < NP; p++) {
        wp[j * NP + p] = q < NPAIR && p < live ? parts[p] + (long long)h * (HD + 2) + d : nullptr;
        ulonglong2 v = wp[j * NP + p] ? amk_tag_ld2(wp[j * NP + p]) : make_ulonglong2(0ull, 0ull);
        w[2 * (j * NP + p)] = v.x;
        w[2 * (j * NP + p) + 1] = v.y;
      }
    }
  };
  load_round(0);
  for (int h = threadIdx.x; h < NH; h += AMK_NT) {
    long long base = (long long)h * (HD + 2);
    const unsigned long long *mp_at[NP];
    unsigned long long ml[2 * NP];
#pragma unroll
    for (int p = 0; p < NP; p++) {
      mp_at[p] = p < live ? parts[p] + base + HD : nullptr;
      ulonglong2 v = mp_at[p] ? amk_tag_ld2(mp_at[p]) : make_ulonglong2(0ull, 0ull);
      ml[2 * p] = v.x;
      ml[2 * p + 1] = v.y;
    }
    amk_tag_settle<NP, true>(P, idx, mp_at, ml);
    float mp[NP], lp[NP];
#pragma unroll
    for (int p = 0; p < NP; p++) {
      mp[p] = p < live ? amk_tag_value(ml[2 * p]) : -INFINITY;
      lp[p] = p < live ? amk_tag_value(ml[2 * p + 1]) : 0.0f;
    }
    amk_combine_weights<NP>(mp, lp, weight + h * NP, denom + h);
  }
  __syncthreads();
  for (int round = 0; round < ROUNDS; round++) {
    if (round > 0)
      load_round(round);
    amk_tag_settle<R * NP, true>(P, idx, wp, w);
#pragma unroll
    for (int j = 0; j < R; j++) {
      int q = threadIdx.x + (round * R + j) * AMK_NT;
      if (q < NPAIR) {
        int e = 2 * q, h = e / HD;
        float2 v[NP];
#pragma unroll
        for (int p = 0; p < NP; p++)
          v[p] = p < live ? make_float2(amk_tag_value(w[2 * (j * NP + p)]),
                                        amk_tag_value(w[2 * (j * NP + p) + 1]))
                          : make_float2(0.0f, 0.0f);
        amk_combine_pair<NP>(v, weight + h * NP, denom[h], e, store);
      }
    }
  }
}

// GEMV pattern combine_residual: the o_proj tile with the split-KV combine
// folded in. Inputs p_0, W, r, p_1 .. p_{NP-1}: every tile combines all NP
// partials into its input vector (rounded to the output dtype, as the
// unfused attn buffer held it), then out[cols] = r[cols] + x @ W[cols]^T.
// One task and one dependency hop fewer per layer than a combine task.
// TAGGED bit 0: the partials come from their shadows, bit 1: the output has
// a shadow too (launch-tagged transfers).
template <int PDT, int WDT, int ODT, int ADT, int HD, int NH, int NP, int NOUT, int TAGGED>
__device__ void amk_gemv_combine(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  constexpr int K = NH * HD;
  const void *W = amk_in(A, 1);
  const void *res = amk_in(A, 2);
  void *out = amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  if (!amk_tile_rows_ok(P, idx, n_off, n_tile, NOUT))
    return;
  float *xs = smem; // K, then the combine's scratch
  auto into_xs = [&](int i, float v) { xs[i] = amk_round<ODT>(v); };
  if constexpr ((TAGGED & 1) != 0) {
    const unsigned long long *parts[NP];
    parts[0] = (const unsigned long long *)A.shadow[0];
#pragma unroll
    for (int p = 1; p < NP; p++)
      parts[p] = (const unsigned long long *)A.shadow[p + 2];
    amk_combine_into_tagged<HD, NH, NP>(P, idx, parts, amk_live_parts(A, pos, NP), smem + K,
                                        into_xs);
  } else {
    const void *parts[NP];
    parts[0] = amk_in(A, 0);
#pragma unroll
    for (int p = 1; p < NP; p++)
      parts[p] = amk_in(A, p + 2);
    amk_combine_into<PDT, HD, NH, NP>(parts, amk_live_parts(A, pos, NP), smem + K, into_xs);
  }
  __syncthreads();
  amk_mark_staged();
  if constexpr (amk_gemv_resident_ok<WDT, K, 1, 0>()) {
    if (amk_tile_ringed(smem)) { // the scratch after xs is free again
      amk_gemv_resident<AMK_ABI_PATTERN_RESIDUAL, WDT, ODT, ADT, K, NOUT, 1, 0, 0, TAGGED & 2>(
          res, out, n_off, n_tile, xs, smem + K, smem);
      return;
    }
  }
  if constexpr (ODT == WDT && amk_gemv_mma_ok<WDT, K>()) { // xs is rounded to ODT
    if (n_tile <= AMK_GEMV_MMA_MAX_ROWS) { // the combine's scratch after xs is free again
      amk_gemv_rows_mma<AMK_ABI_PATTERN_RESIDUAL, WDT, ODT, ADT, K, NOUT, 1, 0, 0, TAGGED & 2>(
          W, res, out, xs, smem + K, n_off, n_tile);
      return;
    }
  }
  amk_gemv_rows<AMK_ABI_PATTERN_RESIDUAL, WDT, ODT, ADT, K, NOUT, 1, 0, 0, TAGGED & 2>(
      W, res, out, xs, n_off, n_tile, 0, 1);
}
// The weight stream's view of a combine_residual variant.
template <int PDT, int WDT, int ODT, int ADT, int HD, int NH, int NP, int NOUT, int TAGGED>
__device__ amk_stream_info_t amk_gemv_combine_stream() {
  if constexpr (AMK_STREAM_MODE == 2) // its rows are read from global memory, never the ring
    return amk_stream_info_t{0, 0, 0, 0};
  else
    return amk_gemv_stream<AMK_ABI_PATTERN_RESIDUAL, PDT, WDT, ODT, ADT, NH * HD, NOUT, 1, 1, 0,
                           0>();
}

// GEMV pattern combine_residual with weight-only quantized weights: inputs
// p_0, qW, scales, r, p_1 .. p_{NP-1}. As amk_gemv_combine, every tile
// recombines the NP split-KV partials [NH, HD + 2] into its input, rounded
// to ODT (the unfused attention output's dtype), here in amk_gemv_quant's
// staged layout; then r + the quantized rows on the CUDA cores (never the
// staged or tensor-core paths: an o_proj tile is small). One task and one
// hop a layer fewer than a combine task before the o_proj.
template <int PDT, int QDT, int ODT, int ADT, int SDT, int HD, int NH, int NP, int NOUT,
          int GROUP>
__device__ void amk_gemv_quant_combine(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  constexpr int K = NH * HD;
  const void *Q = amk_in(A, 1), *S = amk_in(A, 2), *res = amk_in(A, 3);
  void *out = amk_out(A, 0);
  int n_off = I.params.n_off.i, n_tile = I.params.N_tile.i;
  if (!amk_tile_rows_ok(P, idx, n_off, n_tile, NOUT))
    return;
  constexpr int XCOLS = amk_qvec_ok<QDT, K, GROUP>() ? AmkQuant<QDT>::COLS : 0;
  float *xs = smem, *scratch = smem + K + (XCOLS ? K / XCOLS * 4 : 0);
  const void *parts[NP];
  parts[0] = amk_in(A, 0);
#pragma unroll
  for (int p = 1; p < NP; p++)
    parts[p] = amk_in(A, p + 3);
  amk_combine_into<PDT, HD, NH, NP>(
      parts, amk_live_parts(A, pos, NP), scratch,
      [&](int i, float v) { xs[amk_xpad<XCOLS>(i)] = amk_round<ODT>(v); });
  __syncthreads();
  amk_mark_staged();
  if constexpr (XCOLS != 0) {
    amk_qx_finish<QDT, K>(xs);
    __syncthreads();
  }
  amk_gemv_quant_rows<AMK_ABI_PATTERN_RESIDUAL, QDT, ODT, ADT, SDT, K, NOUT, 1, GROUP, 0>(
      Q, S, res, out, xs, n_off, n_tile);
}

template <int PDT, int QDT, int ODT, int ADT, int SDT, int HD, int NH, int NP, int NOUT,
          int GROUP>
__device__ amk_stream_info_t amk_gemv_quant_combine_stream() {
  return amk_gemv_quant_info<QDT, SDT, NH * HD, NOUT, 1, GROUP>();
}

// rope_kv: KV heads [n_off, n_off + N_tile): k rotated at the step position
// (rounded to the qkv dtype) and v into row pos of [ROWS, 2, NKV * HD], or
// with PH of KV head n_off's per-head cache [ROWS, 2, HD] (N_tile <= 1).
template <int QDT, int FDT, int CDT, int HD, int NH, int NKV, int ROWS, int PH>
__device__ void amk_rope_kv(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *qkv = amk_in(A, 0);
  const void *freq = amk_in(A, 1);
  void *cache = amk_out(A, 0);
  AmkWindow win = amk_window(I, A, pos);
  int first = I.params.n_off.i, count = I.params.N_tile.i;
  if (first < 0 || count < 0 || first + count > NKV || (PH && count > 1)) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_SHAPE, idx, first, count);
    return;
  }
  if (win.pos < 0 || win.pos >= ROWS) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_INDEX, idx, win.pos, ROWS);
    return;
  }
  constexpr int KVW = PH ? HD : NKV * HD, HALF = HD / 2;
  long long row = (long long)win.pos * 2 * KVW;
  int hc = PH ? first : 0; // the cache's first KV head
  for (int i = threadIdx.x; i < count * HD; i += AMK_NT) {
    int h = first + i / HD, dd = i % HD;
    long long kb = (long long)NH * HD + (long long)h * HD;
    int fi = dd < HALF ? dd : dd - HALF;
    float ang = (float)win.pos * amk_ld<FDT>(freq, fi);
    float c = cosf(ang), s = sinf(ang);
    float x1 = amk_ld<QDT>(qkv, kb + fi), x2 = amk_ld<QDT>(qkv, kb + HALF + fi);
    float k = dd < HALF ? x1 * c - x2 * s : x2 * c + x1 * s;
    amk_st<CDT>(cache, row + (long long)(h - hc) * HD + dd, amk_round<QDT>(k));
    amk_st<CDT>(cache, row + KVW + (long long)(h - hc) * HD + dd,
                amk_ld<QDT>(qkv, (long long)(NH + NKV) * HD + (long long)h * HD + dd));
  }
}

// ---- single-block ops ------------------------------------------------------------

template <int IDT, int TDT, int ODT, long long ROWLEN, long long V, long long NIDS>
__device__ void amk_embed(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *ids = amk_in(A, 0), *table = amk_in(A, 1);
  void *out = amk_out(A, 0);
  __shared__ int s_bad;
  if (threadIdx.x == 0) {
    s_bad = 0;
    for (long long t = 0; t < NIDS; t++) {
      long long id = amk_ldi<IDT>(ids, t);
      if (id < 0 || id >= V) {
        s_bad = 1;
        amk_fail(P, AMK_STATUS_INDEX, idx, (int)id, (int)V);
        break;
      }
    }
  }
  __syncthreads();
  if (s_bad)
    return;
  for (long long t = 0; t < NIDS; t++) {
    long long id = amk_ldi<IDT>(ids, t);
    // A row of the output's dtype is copied in 16-byte pieces, every load
    // of a thread in flight before its stores: the element loop waited one
    // round trip per element (a store may alias the next load), 6.2 us for
    // the 1B's row of 2048 (H100, twenty-first session).
    if constexpr (TDT == ODT && AmkVec<TDT>::OK &&
                  ROWLEN * AmkVec<TDT>::ESZ % 16 == 0 &&
                  ROWLEN * AmkVec<TDT>::ESZ / 16 <= 8 * AMK_NT) {
      constexpr int NV = (int)(ROWLEN * AmkVec<TDT>::ESZ / 16), PER = (NV + AMK_NT - 1) / AMK_NT;
      const uint4 *src = (const uint4 *)table + id * (NV);
      uint4 *dst = (uint4 *)out + t * NV;
      if ((((unsigned long long)table | (unsigned long long)out) & 15ull) == 0) {
        uint4 v[PER];
#pragma unroll
        for (int i = 0; i < PER; i++) {
          int c = threadIdx.x + i * AMK_NT;
          if (c < NV)
            v[i] = __ldcg(src + c);
        }
#pragma unroll
        for (int i = 0; i < PER; i++) {
          int c = threadIdx.x + i * AMK_NT;
          if (c < NV)
            dst[c] = v[i];
        }
        continue;
      }
    }
    for (long long j = threadIdx.x; j < ROWLEN; j += AMK_NT)
      amk_st<ODT>(out, t * ROWLEN + j, amk_ld<TDT>(table, id * ROWLEN + j));
  }
}

// LAYER: 0 RMSNorm, 1 LayerNorm, 2 RMSNorm by (1 + w). ROWS rows of HIDDEN
// (Qwen3's per-head q/k norms: one row per head).
template <int XDT, int WDT, int ODT, int BDT, int HIDDEN, long long ROWS, int LAYER, int BIAS>
__device__ void amk_norm(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *x = amk_in(A, 0), *w = amk_in(A, 1);
  const void *b = BIAS ? amk_in(A, 2) : nullptr;
  void *out = amk_out(A, 0);
  float eps = I.params.eps.f;
  float *red = smem;
  for (long long r = 0; r < ROWS; r++) {
    long long base = r * HIDDEN;
    float mean = 0.0f;
    if constexpr (LAYER == 1) {
      float s = 0.0f;
      for (int j = threadIdx.x; j < HIDDEN; j += AMK_NT)
        s += amk_ld<XDT>(x, base + j);
      mean = amk_block_sum(s, red) / (float)HIDDEN;
    }
    float ss = 0.0f;
    for (int j = threadIdx.x; j < HIDDEN; j += AMK_NT) {
      float v = amk_ld<XDT>(x, base + j) - mean;
      ss += v * v;
    }
    ss = amk_block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)HIDDEN + eps);
    for (int j = threadIdx.x; j < HIDDEN; j += AMK_NT) {
      // LAYER 2: Gemma's RMSNorm, scaled by (1 + w) in fp32 (flags bit 2).
      float g = (LAYER == 2) ? 1.0f + amk_ld<WDT>(w, j) : amk_ld<WDT>(w, j);
      float y = (amk_ld<XDT>(x, base + j) - mean) * inv * g;
      if constexpr (BIAS)
        y += amk_ld<BDT>(b, j);
      amk_st<ODT>(out, base + j, y);
    }
  }
}

// ROPE: NPOS rows of ROWLEN (whole heads of HD), row p at position ids[p].
template <int XDT, int PDT, int ODT, int FDT, int HD, long long NPOS, long long ROWLEN,
          int FREQ_INPUT>
__device__ void amk_rope(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *x = amk_in(A, 0), *ids = amk_in(A, 1);
  const void *freq = FREQ_INPUT ? amk_in(A, 2) : (const void *)A.inv_freq;
  void *out = amk_out(A, 0);
  constexpr int HALF = HD / 2;
  constexpr long long PAIRS = NPOS * ROWLEN / 2;
  for (long long i = threadIdx.x; i < PAIRS; i += AMK_NT) {
    long long e = (i / HALF) * HD + (i % HALF); // first-half element
    long long p = e / ROWLEN;
    int k = (int)(i % HALF);
    float ps = (float)amk_ldi<PDT>(ids, p);
    float f = FREQ_INPUT ? amk_ld<FDT>(freq, k) : ((const float *)freq)[k];
    float ang = ps * f;
    float c = cosf(ang), s = sinf(ang);
    float x1 = amk_ld<XDT>(x, e), x2 = amk_ld<XDT>(x, e + HALF);
    amk_st<ODT>(out, e, x1 * c - x2 * s);
    amk_st<ODT>(out, e + HALF, x2 * c + x1 * s);
  }
}

// Elements an elementwise thread loads before it computes (all in flight).
#ifndef AMK_ELT_UNROLL
#define AMK_ELT_UNROLL 8
#endif
// The narrowest index type that holds a tensor's element offsets.
template <bool FITS_32> struct amk_index_t { typedef unsigned int type; };
template <> struct amk_index_t<false> { typedef unsigned long long type; };
// ---- row windows of a prefill program's per-row ops ---------------------------
//
// tile splits a prefill program's embed, norms, ropes and KV appends into
// row blocks (params m_off, M_tile: the op's rows [m_off, m_off + M_tile)).
// These forms take the window at run time; codegen calls them only for
// tasks with M_tile, so a decode program keeps the whole-op forms above.

__device__ __forceinline__ bool amk_row_window(AmkP P, AmkI I, int idx, long long rows,
                                               long long *first, long long *count) {
  *first = I.params.m_off.i;
  *count = I.params.M_tile.i;
  if (*first < 0 || *count < 1 || *first + *count > rows) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_SHAPE, idx, (int)*first, (int)*count);
    return false;
  }
  return true;
}

// amk_norm over the window's rows, one warp per row (no block barriers);
// x is read 16 bytes at a time when a row is whole 16-byte vectors.
template <int XDT, int WDT, int ODT, int BDT, int HIDDEN, long long ROWS, int LAYER, int BIAS>
__device__ void amk_norm_rows(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *x = amk_in(A, 0), *w = amk_in(A, 1);
  const void *b = BIAS ? amk_in(A, 2) : nullptr;
  void *out = amk_out(A, 0);
  long long first, count;
  if (!amk_row_window(P, I, idx, ROWS, &first, &count))
    return;
  float eps = I.params.eps.f;
  int lane = threadIdx.x & 31;
  constexpr int VE = AmkVec<XDT>::VE;
  constexpr bool VEC = AmkVec<XDT>::OK && HIDDEN % VE == 0;
  for (long long r = first + (threadIdx.x >> 5); r < first + count; r += AMK_NWARPS) {
    long long base = r * HIDDEN;
    const uint4 *xv = (const uint4 *)((const char *)x + base * AmkVec<XDT>::ESZ);
    float mean = 0.0f;
    if constexpr (LAYER == 1) {
      float s = 0.0f;
      if constexpr (VEC) {
        for (int v = lane; v < HIDDEN / VE; v += 32) {
          float f[VE];
          amk_unpack16<XDT>(__ldcg(xv + v), f);
#pragma unroll
          for (int k = 0; k < VE; k++)
            s += f[k];
        }
      } else {
        for (int j = lane; j < HIDDEN; j += 32)
          s += amk_ld<XDT>(x, base + j);
      }
      mean = amk_warp_sum(s) / (float)HIDDEN;
    }
    float ss = 0.0f;
    if constexpr (VEC) {
      for (int v = lane; v < HIDDEN / VE; v += 32) {
        float f[VE];
        amk_unpack16<XDT>(__ldcg(xv + v), f);
#pragma unroll
        for (int k = 0; k < VE; k++)
          ss += (f[k] - mean) * (f[k] - mean);
      }
    } else {
      for (int j = lane; j < HIDDEN; j += 32) {
        float v = amk_ld<XDT>(x, base + j) - mean;
        ss += v * v;
      }
    }
    float inv = 1.0f / sqrtf(amk_warp_sum(ss) / (float)HIDDEN + eps);
    for (int j = lane; j < HIDDEN; j += 32) {
      float g = (LAYER == 2) ? 1.0f + amk_ld<WDT>(w, j) : amk_ld<WDT>(w, j);
      float y = (amk_ld<XDT>(x, base + j) - mean) * inv * g;
      if constexpr (BIAS)
        y += amk_ld<BDT>(b, j);
      amk_st<ODT>(out, base + j, y);
    }
  }
}

// amk_rope over the window's position rows.
template <int XDT, int PDT, int ODT, int FDT, int HD, long long NPOS, long long ROWLEN,
          int FREQ_INPUT>
__device__ void amk_rope_rows(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *x = amk_in(A, 0), *ids = amk_in(A, 1);
  const void *freq = FREQ_INPUT ? amk_in(A, 2) : (const void *)A.inv_freq;
  void *out = amk_out(A, 0);
  long long first, count;
  if (!amk_row_window(P, I, idx, NPOS, &first, &count))
    return;
  constexpr int HALF = HD / 2;
  long long pairs = count * ROWLEN / 2, e0 = first * ROWLEN;
  for (long long i = threadIdx.x; i < pairs; i += AMK_NT) {
    long long e = e0 + (i / HALF) * HD + (i % HALF); // first-half element
    long long p = e / ROWLEN;
    int k = (int)(i % HALF);
    float ps = (float)amk_ldi<PDT>(ids, p);
    float f = FREQ_INPUT ? amk_ld<FDT>(freq, k) : ((const float *)freq)[k];
    float ang = ps * f;
    float c = cosf(ang), s = sinf(ang);
    float x1 = amk_ld<XDT>(x, e), x2 = amk_ld<XDT>(x, e + HALF);
    amk_st<ODT>(out, e, x1 * c - x2 * s);
    amk_st<ODT>(out, e + HALF, x2 * c + x1 * s);
  }
}

// amk_embed of the window's ids (only they are checked).
template <int IDT, int TDT, int ODT, long long ROWLEN, long long V, long long NIDS>
__device__ void amk_embed_rows(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *ids = amk_in(A, 0), *table = amk_in(A, 1);
  void *out = amk_out(A, 0);
  long long first, count;
  if (!amk_row_window(P, I, idx, NIDS, &first, &count))
    return;
  __shared__ int s_bad;
  if (threadIdx.x == 0) {
    s_bad = 0;
    for (long long t = first; t < first + count; t++) {
      long long id = amk_ldi<IDT>(ids, t);
      if (id < 0 || id >= V) {
        s_bad = 1;
        amk_fail(P, AMK_STATUS_INDEX, idx, (int)id, (int)V);
        break;
      }
    }
  }
  __syncthreads();
  if (s_bad)
    return;
  for (long long i = threadIdx.x; i < count * ROWLEN; i += AMK_NT) {
    long long t = first + i / ROWLEN, j = i % ROWLEN;
    long long id = amk_ldi<IDT>(ids, t);
    amk_st<ODT>(out, t * ROWLEN + j, amk_ld<TDT>(table, id * ROWLEN + j));
  }
}

// Elementwise: OPK 0 silu_mul, 1 add, 2 mul, 3 mul by scale, 4 gelu, 5 copy,
// 6 gelu's tanh approximation (gelu_pytorch_tanh).
// TILED: only columns [n_off, n_off + N_tile) of each row of WIDTH.
template <int OPK, int ADT, int BDT, int ODT, long long NUMEL, long long WIDTH, int TILED>
__device__ void amk_eltwise(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *a = amk_in(A, 0);
  const void *b = (OPK <= 2) ? amk_in(A, 1) : nullptr;
  void *out = amk_out(A, 0);
  long long c0 = 0, cn = WIDTH;
  if constexpr (TILED) {
    c0 = I.params.n_off.i;
    cn = I.params.N_tile.i;
    if (c0 < 0 || cn < 0 || c0 + cn > WIDTH) {
      if (threadIdx.x == 0)
        amk_fail(P, AMK_STATUS_SHAPE, idx, (int)c0, (int)cn);
      return;
    }
  }
  float scale = (OPK == 3) ? I.params.scale.f : 1.0f;
  constexpr long long ROWS = NUMEL / WIDTH;
  // 32-bit index arithmetic where the tensor allows it (a 64-bit division
  // by the run-time window width costs ~10x its 32-bit form). Each thread
  // issues the loads of AMK_ELT_UNROLL elements before it uses any: the
  // loop's stores may alias its loads, so without that every element
  // waited one memory round trip (a prefill program's column windows of
  // 512 rows ran at ~3 ns an element).
  using Index = typename amk_index_t<(NUMEL < 0x7fffffffLL)>::type;
  const Index n = (Index)(ROWS * cn), w = (Index)cn;
  constexpr int U = AMK_ELT_UNROLL;
  for (Index t0 = threadIdx.x; t0 < n; t0 += (Index)AMK_NT * U) {
    long long at[U];
    float va[U], vb[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      Index t = t0 + (Index)(u * AMK_NT);
      Index row = t / w;
      at[u] = t < n ? (long long)row * WIDTH + c0 + (t - row * w) : -1;
      va[u] = at[u] >= 0 ? amk_ld<ADT>(a, at[u]) : 0.0f;
      if constexpr (OPK <= 2)
        vb[u] = at[u] >= 0 ? amk_ld<BDT>(b, at[u]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (at[u] < 0)
        continue;
      float v = va[u], r;
      if constexpr (OPK == 0) {
        r = v / (1.0f + expf(-v)) * vb[u];
      } else if constexpr (OPK == 1) {
        r = v + vb[u];
      } else if constexpr (OPK == 2) {
        r = v * vb[u];
      } else if constexpr (OPK == 3) {
        r = v * scale;
      } else if constexpr (OPK == 4) {
        r = v * 0.5f * (1.0f + erff(v * 0.70710678118654752f));
      } else if constexpr (OPK == 6) {
        r = 0.5f * v * (1.0f + tanhf(0.79788456080286535588f * (v + 0.044715f * v * v * v)));
      } else {
        r = v;
      }
      amk_st<ODT>(out, at[u], r);
    }
  }
}

// COPY of identical dtypes: bytes.
template <long long NBYTES>
__device__ void amk_copy_bytes(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const unsigned char *s = (const unsigned char *)amk_in(A, 0);
  unsigned char *o = (unsigned char *)amk_out(A, 0);
  for (long long i = threadIdx.x; i < NBYTES; i += AMK_NT)
    o[i] = __ldcg(s + i);
}

// SOFTMAX along a dim of N with OUTER x INNER lines, one thread per line.
template <int XDT, int ODT, long long OUTER, long long N, long long INNER>
__device__ void amk_softmax(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *x = amk_in(A, 0);
  void *out = amk_out(A, 0);
  for (long long line = threadIdx.x; line < OUTER * INNER; line += AMK_NT) {
    long long base = (line / INNER) * N * INNER + line % INNER;
    float m = -INFINITY;
    for (long long j = 0; j < N; j++)
      m = fmaxf(m, amk_ld<XDT>(x, base + j * INNER));
    float s = 0.0f;
    for (long long j = 0; j < N; j++)
      s += expf(amk_ld<XDT>(x, base + j * INNER) - m);
    for (long long j = 0; j < N; j++)
      amk_st<ODT>(out, base + j * INNER, expf(amk_ld<XDT>(x, base + j * INNER) - m) / s);
  }
}

template <int DT, int ODT, long long NUMEL, int NIN>
__device__ void amk_allreduce(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  for (long long i = threadIdx.x; i < NUMEL; i += AMK_NT) {
    float s = 0.0f;
    for (int k = 0; k < NIN; k++)
      s += amk_ld<DT>(amk_in(A, k), i);
    amk_st<ODT>(amk_out(A, 0), i, s);
  }
}

// ---- cross-rank all-reduce (tensor parallelism, docs/TensorParallel.md) ----------
//
// A rank program's ALLREDUCE_SHARD {group = N >= 2}: the output on every
// rank is the sum over ranks 0..N-1, in that order, in fp32 from zero, of
// each rank's part placed at n_off (the reference VM's
// amk_inst_allreduce_ranks). The ranks' megakernels run at once, one per
// GPU; each rank has a mailbox of symmetric memory (ncclMemAlloc, one per
// GPU of the group, load/store accessible from every other: amk_tp holds
// all N addresses, written by the host after the module loads). Offsets
// into a mailbox are the codegen's, the same on every rank (the collective's
// place in the order its waits force, which amk_validate_tp proves common):
//   SEQ   this collective's launch count on this rank (one uint32, local);
//   FLAGS uint32 [2][N]: parity p, sender s: the count of s's latest send;
//   DATA  f32 [2][N][NUMEL]: parity p, sender s: s's part at n_off, zeros
//         elsewhere (a gather's other parts are never written there).
// Launch e (counted per collective from 1) writes the part into slot
// [e & 1][rank] of every mailbox, then, after a system-scope fence, flag
// [e & 1][rank] = e in every mailbox; it waits for its own N flags to reach
// e and sums its N slots. A sender reuses a slot two launches later, which
// it reaches only after every rank has sent in the launch between, so
// after every rank has summed the slot's last contents. A rank that never
// sends leaves the others polling: the device abort flag and the host's
// watchdog stop them as they stop any wait.
#define AMK_TP_MAX_RANKS 64
struct AmkTp {
  unsigned long long mailbox[AMK_TP_MAX_RANKS];
  int rank, size;
};
__device__ AmkTp amk_tp;

__device__ __forceinline__ unsigned int amk_ld_acquire_sys(const unsigned int *p) {
  unsigned int v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void amk_st_release_sys(unsigned int *p, unsigned int v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// A flag store after the block's system-scope fence: with that fence before
// it, a relaxed store is a release (a release pattern of the PTX memory
// model: a fence.sc followed by a strong write), so the N flags need no
// fence each. Each st.release waits for the stores before it, the previous
// flag's included: a rank's second flag then waits a round trip for its
// first when that went to a peer. AMK_TP_RELAXED_FLAGS=1, the default,
// stores them relaxed: on two H200s the 8B's --tp 2 step went from 3.252 /
// 3.271 to 3.185 / 3.144 ms (docs/TensorParallel.md); 0 (codegen:
// AMK_CUDA_TP_RELAXED_FLAGS=0) stores each with release.
#ifndef AMK_TP_RELAXED_FLAGS
#define AMK_TP_RELAXED_FLAGS 1
#endif
// Vectors (16 bytes) a thread copies into shared memory at once in a large
// collective, one whose thread has more vectors than these to move
// (codegen.c's TP_STAGE_VECS reserves them: AMK_NT * 16 bytes each).
// Loaded into registers one at a time, after the previous vector's stores,
// each waits an L2 round trip: the 8B's lm_head gather at --tp 2 (64,128
// floats, 188 round trips a thread) took 86 us on two H200s, 49 staged.
// The 4096-float all-reduces were slower staged (6.2-6.9 -> 6.9-7.7 us:
// 4 vectors a thread), so they keep the loop. More vectors held in
// registers made ptxas spill in every variant of the kernel.
#ifndef AMK_TP_STAGE_VECS
#define AMK_TP_STAGE_VECS 8
#endif
static_assert(AMK_TP_STAGE_VECS >= 1, "a thread stages at least one vector");
__device__ __forceinline__ void amk_st_relaxed_sys(unsigned int *p, unsigned int v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Thread 0: polls *flag until it reaches `want` (wrapping counts), under the
// device abort flag, the host's and the spin limit as amk_wait; false:
// stop.
__device__ __noinline__ bool amk_tp_wait_flag(AmkP P, int idx, const unsigned int *flag,
                                              unsigned int want, int sender) {
  volatile unsigned int *st = (volatile unsigned int *)P.status;
  volatile unsigned int *host_abort = (volatile unsigned int *)P.abort_flag;
  unsigned long long t0 = amk_globaltimer(), next_check = t0 + AMK_HOST_POLL_NS;
  for (unsigned int iter = 1;; iter++) {
    if ((int)(amk_ld_acquire_sys(flag) - want) >= 0)
      return true;
    __nanosleep(AMK_WAIT_GAP_NS);
    if ((iter & 15u) != 0u)
      continue;
    if (st[4] != 0u)
      return false;
    if (amk_globaltimer() >= next_check) {
      next_check += AMK_HOST_POLL_NS;
      if (*host_abort != 0u) {
        amk_fail(P, AMK_STATUS_ABORTED, idx, -1 - sender, (int)want);
        return false;
      }
      if (P.spin_limit_ns > 0 && (long long)(amk_globaltimer() - t0) > P.spin_limit_ns) {
        amk_fail(P, AMK_STATUS_SPIN, idx, -1 - sender, (int)want);
        return false;
      }
    }
  }
}

template <int DT, int ODT, long long NUMEL, long long PART, long long N_OFF, long long SEQ,
          long long FLAGS, long long DATA, int N>
__device__ void amk_allreduce_tp(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  static_assert(N >= 2 && N <= AMK_TP_MAX_RANKS, "a group of 2 to 64 ranks");
  static_assert(N_OFF >= 0 && PART >= 1 && N_OFF + PART <= NUMEL, "the part lies in the output");
  __shared__ unsigned int s_launch;
  __shared__ int s_ok;
  const void *part = amk_in(A, 0);
  void *out = amk_out(A, 0);
  const int me = amk_tp.rank;
  if (threadIdx.x == 0) {
    volatile unsigned int *seq = (volatile unsigned int *)(amk_tp.mailbox[me] + SEQ);
    unsigned int e = *seq + 1u;
    *seq = e;
    s_launch = e;
  }
  __syncthreads();
  const unsigned int e = s_launch;
  const long long parity = e & 1u;
  // The part into slot [parity][me] of every rank's mailbox, this rank's
  // own included: 16-byte stores where the part is whole fp32 vectors; in a
  // large collective each thread's vectors pass through its own
  // shared-memory slots AMK_TP_STAGE_VECS at a time (a thread reads back
  // only what it copied: the wait is its only synchronisation).
  constexpr bool VEC = DT == AMK_ABI_DTYPE_F32 && NUMEL % 4 == 0 && PART % 4 == 0 && N_OFF % 4 == 0;
  const long long mine = (parity * N + me) * NUMEL + N_OFF;
  const float4 *stage = (const float4 *)smem; // [AMK_TP_STAGE_VECS][AMK_NT]
  const unsigned stage_at = amk_smem_addr(smem) + (unsigned)threadIdx.x * 16u;
  if constexpr (VEC && PART / 4 > (long long)AMK_NT * AMK_TP_STAGE_VECS) {
    const float4 *src = (const float4 *)part;
    constexpr long long NV = PART / 4;
    for (long long i0 = threadIdx.x; i0 < NV; i0 += (long long)AMK_NT * AMK_TP_STAGE_VECS) {
#pragma unroll
      for (int b = 0; b < AMK_TP_STAGE_VECS; b++) {
        long long i = i0 + (long long)b * AMK_NT;
        amk_cp_async16(stage_at + (unsigned)(b * AMK_NT * 16), src + (i < NV ? i : 0), i < NV);
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
      amk_cp_async_wait<0>();
#pragma unroll
      for (int b = 0; b < AMK_TP_STAGE_VECS; b++) {
        long long i = i0 + (long long)b * AMK_NT;
        if (i < NV) {
          float4 v = stage[b * AMK_NT + threadIdx.x];
#pragma unroll 4
          for (int s = 0; s < N; s++)
            ((float4 *)((float *)(amk_tp.mailbox[s] + DATA) + mine))[i] = v;
        }
      }
    }
  } else if constexpr (VEC) {
    const float4 *src = (const float4 *)part;
    for (long long i = threadIdx.x; i < PART / 4; i += AMK_NT) {
      float4 v = src[i];
#pragma unroll 4
      for (int s = 0; s < N; s++)
        ((float4 *)((float *)(amk_tp.mailbox[s] + DATA) + mine))[i] = v;
    }
  } else {
    for (long long i = threadIdx.x; i < PART; i += AMK_NT) {
      float v = amk_ld<DT>(part, i);
      for (int s = 0; s < N; s++)
        ((float *)(amk_tp.mailbox[s] + DATA))[mine + i] = v;
    }
  }
  // The block's stores, then thread 0's system-scope fence and flags (the
  // barrier orders every thread's stores before the fence).
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int s = 0; s < N; s++) {
      unsigned int *flag = (unsigned int *)(amk_tp.mailbox[s] + FLAGS) + parity * N + me;
      if constexpr (AMK_TP_RELAXED_FLAGS != 0)
        amk_st_relaxed_sys(flag, e);
      else
        amk_st_release_sys(flag, e);
    }
    bool ok = true;
    const unsigned int *flags = (const unsigned int *)(amk_tp.mailbox[me] + FLAGS) + parity * N;
    for (int s = 0; s < N && ok; s++)
      ok = amk_tp_wait_flag(P, idx, flags + s, e, s);
    s_ok = ok;
  }
  __syncthreads();
  if (!s_ok)
    return;
  const float *slots = (const float *)(amk_tp.mailbox[me] + DATA) + parity * N * NUMEL;
  if constexpr (NUMEL % 4 == 0) {
    // In a large collective, B vectors of every slot through the thread's
    // shared-memory slots at once (B * N <= AMK_TP_STAGE_VECS), then their
    // sums in rank order; else (or a group of more ranks) each loaded as
    // it is summed.
    constexpr long long NV = NUMEL / 4;
    constexpr bool STAGED = N <= AMK_TP_STAGE_VECS && NV > (long long)AMK_NT * AMK_TP_STAGE_VECS;
    constexpr int B = STAGED ? AMK_TP_STAGE_VECS / N : 1;
    for (long long i0 = threadIdx.x; i0 < NV; i0 += (long long)AMK_NT * B) {
      if constexpr (STAGED) {
#pragma unroll
        for (int b = 0; b < B; b++) {
          long long i = i0 + (long long)b * AMK_NT;
#pragma unroll
          for (int s = 0; s < N; s++)
            amk_cp_async16(stage_at + (unsigned)((b * N + s) * AMK_NT * 16),
                           (const float4 *)(slots + s * NUMEL) + (i < NV ? i : 0), i < NV);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        amk_cp_async_wait<0>();
      }
#pragma unroll
      for (int b = 0; b < B; b++) {
        long long i = i0 + (long long)b * AMK_NT;
        if (i >= NV)
          continue;
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int s = 0; s < N; s++) {
          float4 x;
          if constexpr (STAGED)
            x = stage[(b * N + s) * AMK_NT + threadIdx.x];
          else
            x = __ldcg((const float4 *)(slots + s * NUMEL) + i);
          sum.x += x.x;
          sum.y += x.y;
          sum.z += x.z;
          sum.w += x.w;
        }
        amk_st<ODT>(out, 4 * i, sum.x);
        amk_st<ODT>(out, 4 * i + 1, sum.y);
        amk_st<ODT>(out, 4 * i + 2, sum.z);
        amk_st<ODT>(out, 4 * i + 3, sum.w);
      }
    }
  } else {
    for (long long i = threadIdx.x; i < NUMEL; i += AMK_NT) {
      float sum = 0.0f;
      for (int s = 0; s < N; s++)
        sum += __ldcg(slots + s * NUMEL + i);
      amk_st<ODT>(out, i, sum);
    }
  }
}

// KV_APPEND: NFRESH elements (whole rows of ROWLEN) into row pos of the cache.
template <int FDT, int CDT, long long NFRESH, long long ROWLEN, long long ROWS>
__device__ void amk_kv_append(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *fresh = amk_in(A, 0);
  const void *cin = amk_in(A, 1);
  void *cache = amk_out(A, 0);
  AmkWindow win = amk_window(I, A, pos);
  constexpr long long NROWS = NFRESH / ROWLEN;
  if (win.pos < 0 || win.pos > ROWS - NROWS) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_INDEX, idx, win.pos, (int)ROWS);
    return;
  }
  if (cin != (const void *)cache) {
    constexpr long long ESZ = (CDT == AMK_ABI_DTYPE_F32 || CDT == AMK_ABI_DTYPE_I32) ? 4
                              : (CDT == AMK_ABI_DTYPE_F16 || CDT == AMK_ABI_DTYPE_BF16) ? 2
                                                                                        : 1;
    for (long long i = threadIdx.x; i < ROWS * ROWLEN * ESZ; i += AMK_NT)
      ((unsigned char *)cache)[i] = __ldcg((const unsigned char *)cin + i);
    __syncthreads();
  }
  for (long long i = threadIdx.x; i < NFRESH; i += AMK_NT)
    amk_st<CDT>(cache, (long long)win.pos * ROWLEN + i, amk_ld<FDT>(fresh, i));
}

// amk_kv_append of the window's new rows, to cache rows pos + m_off ...; the
// cache must be updated in place (a copy of the input cache per window would
// overwrite the rows its siblings wrote).
template <int FDT, int CDT, long long NFRESH, long long ROWLEN, long long ROWS>
__device__ void amk_kv_append_rows(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *fresh = amk_in(A, 0);
  void *cache = amk_out(A, 0);
  AmkWindow win = amk_window(I, A, pos);
  constexpr long long NROWS = NFRESH / ROWLEN;
  long long first, count;
  if (!amk_row_window(P, I, idx, NROWS, &first, &count))
    return;
  if (amk_in(A, 1) != (const void *)cache) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_SHAPE, idx, (int)first, (int)count);
    return;
  }
  if (win.pos < 0 || win.pos > ROWS - NROWS) {
    if (threadIdx.x == 0)
      amk_fail(P, AMK_STATUS_INDEX, idx, win.pos, (int)ROWS);
    return;
  }
  long long dst = ((long long)win.pos + first) * ROWLEN, src = first * ROWLEN;
  for (long long i = threadIdx.x; i < count * ROWLEN; i += AMK_NT)
    amk_st<CDT>(cache, dst + i, amk_ld<FDT>(fresh, src + i));
}

// SAMPLE_ARGMAX: per row of V, the index of the maximum (lowest on ties,
// NaN counts as the maximum).
template <int XDT, int ODT, long long ROWS, long long V>
__device__ void amk_argmax(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  const void *x = amk_in(A, 0);
  void *out = amk_out(A, 0);
  float *bv = smem;
  long long *bi = (long long *)(smem + 2 * AMK_NT);
  for (long long r = 0; r < ROWS; r++) {
    float best = 0.0f;
    long long besti = -1;
    for (long long j = threadIdx.x; j < V; j += AMK_NT) {
      float v = amk_ld<XDT>(x, r * V + j);
      bool better = besti < 0 || (v != v && best == best) || v > best;
      if (better) {
        best = v;
        besti = j;
      }
    }
    __syncthreads();
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = besti;
    __syncthreads();
    if (threadIdx.x == 0) {
      float b = 0.0f;
      long long k = -1;
      for (int t = 0; t < AMK_NT; t++) {
        long long ti = bi[t];
        if (ti < 0)
          continue;
        float v = bv[t];
        bool better = k < 0 || (v != v && b == b) || v > b ||
                      (((v == b) || (v != v && b != b)) && ti < k);
        if (better) {
          b = v;
          k = ti;
        }
      }
      if constexpr (ODT == AMK_ABI_DTYPE_I32)
        ((int *)out)[r] = (int)k;
      else
        amk_st<ODT>(out, r, (float)k);
    }
  }
}

__device__ void amk_nop(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {}

// ---- decoding on the device ------------------------------------------------------

// The greedy token of a launch, as the host's amk_argmax takes it: the
// largest logit, NaN skipped, the lowest index on ties, 0 when all are NaN;
// -2 when any logit is NaN or Inf (the host reports the step, as amk-run
// does for logits it reads).
template <int DT> __device__ int amk_block_argmax(const void *logits, long long n, float *red) {
  float best = -INFINITY;
  long long at = -1;
  int nonfinite = 0;
  for (long long i = threadIdx.x; i < n; i += AMK_NT) {
    float v = amk_ld<DT>(logits, i);
    nonfinite |= !isfinite(v);
    if (v == v && (at < 0 || v > best)) {
      best = v;
      at = i;
    }
  }
  if (__syncthreads_or(nonfinite))
    return -2;
  // Reduce (best, at) pairs: a pair wins with a larger value, or an equal
  // value at a lower index; at < 0 never wins.
  for (int o = 16; o > 0; o >>= 1) {
    float ob = __shfl_xor_sync(0xffffffffu, best, o);
    long long oa = __shfl_xor_sync(0xffffffffu, at, o);
    if (oa >= 0 && (at < 0 || ob > best || (ob == best && oa < at))) {
      best = ob;
      at = oa;
    }
  }
  long long *ra = (long long *)(red + 2 * AMK_NWARPS);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    red[warp] = best;
    ra[warp] = at;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < AMK_NWARPS; w++)
      if (ra[w] >= 0 && (at < 0 || red[w] > best || (red[w] == best && ra[w] < at))) {
        best = red[w];
        at = ra[w];
      }
    ra[0] = at;
  }
  __syncthreads();
  long long r = ra[0];
  __syncthreads();
  return r < 0 ? 0 : (int)r;
}

template <int DT> __device__ __forceinline__ void amk_store_id(void *p, int v) {
  if constexpr (DT == AMK_ABI_DTYPE_I32)
    *(int *)p = v;
  else
    amk_st<DT>(p, 0, (float)v);
}

// The last block of a launch (every other block has signalled all it runs).
__device__ void amk_decode_finish(AmkP P, const amk_decode_t &D, int pos, float *smem) {
  __threadfence(); // acquire what the other blocks released
  volatile unsigned int *state = (volatile unsigned int *)D.state;
  const amk_buffer_t &lb = amk_buf(P, D.logits_buffer);
  long long vocab = lb.numel; // the host checked that it is one row
  const void *logits = (const void *)lb.ptr;
  int token;
  if (lb.dtype == AMK_ABI_DTYPE_BF16)
    token = amk_block_argmax<AMK_ABI_DTYPE_BF16>(logits, vocab, smem);
  else if (lb.dtype == AMK_ABI_DTYPE_F16)
    token = amk_block_argmax<AMK_ABI_DTYPE_F16>(logits, vocab, smem);
  else
    token = amk_block_argmax<AMK_ABI_DTYPE_F32>(logits, vocab, smem);
  int step = (int)state[1];
  unsigned int *C = (unsigned int *)P.counters;
  for (int c = threadIdx.x; c < P.n_counters; c += AMK_NT)
    C[c] = 0u;
  if (threadIdx.x == 0) {
    int next = step + 1 < D.n_feed ? ((const int *)D.feed)[step + 1] : token < 0 ? 0 : token;
    if (step < D.n_steps)
      ((volatile int *)D.produced)[step] = token;
    const amk_buffer_t &tb = amk_buf(P, D.token_buffer);
    if (tb.dtype == AMK_ABI_DTYPE_I32)
      amk_store_id<AMK_ABI_DTYPE_I32>((void *)tb.ptr, next);
    else
      amk_store_id<AMK_ABI_DTYPE_F32>((void *)tb.ptr, next);
    if (D.pos_buffer >= 0) {
      const amk_buffer_t &pb = amk_buf(P, D.pos_buffer);
      if (pb.dtype == AMK_ABI_DTYPE_I32)
        amk_store_id<AMK_ABI_DTYPE_I32>((void *)pb.ptr, pos + 1);
      else
        amk_store_id<AMK_ABI_DTYPE_F32>((void *)pb.ptr, pos + 1);
    }
    state[2] = (unsigned int)(pos + 1);
    state[1] = (unsigned int)(step + 1);
    state[0] = 0u;
    __threadfence_system();
  }
}

// ---- staging instruction records ---------------------------------------------------

// The records of the running instruction and of the next one, in shared
// memory: warp 0 copies the next instruction's ABI record and aux record
// (with its resolved input and output addresses) with asynchronous 16-byte
// copies while the current one runs, so a task starts without a chain of
// dependent loads through the tables.
__shared__ __align__(16) amk_instruction_t amk_staged_inst[2];
__shared__ __align__(16) amk_inst_aux_t amk_staged_aux[2];

// Warp 0: start copying instruction idx's records into slot.
__device__ __forceinline__ void amk_stage_issue(AmkP P, int idx, int slot) {
  constexpr int NI = (int)sizeof(amk_instruction_t) / 16, NA = (int)sizeof(amk_inst_aux_t) / 16;
  static_assert(sizeof(amk_instruction_t) % 16 == 0 && sizeof(amk_inst_aux_t) % 16 == 0,
                "records are copied in 16-byte pieces");
  const char *gi = (const char *)P.instructions + (long long)idx * sizeof(amk_instruction_t);
  const char *ga = (const char *)P.aux + (long long)idx * sizeof(amk_inst_aux_t);
  for (int c = threadIdx.x & 31; c < NI + NA; c += 32) {
    const char *src = c < NI ? gi + c * 16 : ga + (c - NI) * 16;
    char *dst = c < NI ? (char *)&amk_staged_inst[slot] + c * 16
                       : (char *)&amk_staged_aux[slot] + (c - NI) * 16;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(amk_smem_addr(dst)), "l"(src)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Warp 0: every copy but the newest `pending` groups has landed, and the
// warp sees all of them.
template <int PENDING> __device__ __forceinline__ void amk_stage_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
  __syncwarp();
}

// ---- the persistent megakernel ---------------------------------------------------

__device__ void amk_dispatch(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem);
// Thread 0, before an instruction's waits: what its variant reads that no
// wait guards (the generated part: amk_attention_prewait for attention),
// called only for the variants AMK_PREWAIT_MASK has (bit v: variant v), so
// other tasks pay no call.
__device__ void amk_variant_prewait(AmkI I, AmkA A, int pos);
#ifndef AMK_PREWAIT_MASK
#define AMK_PREWAIT_MASK 0ull
#endif

// One block per queue (the host sizes the grid to the queues, all
// co-resident: a cooperative launch). Each block walks its queue: prefetch
// the weights of this and the next instruction into L2, wait on the
// counters, run, signal. No grid-wide barrier. With a trace table, thread 0
// stamps each instruction's arrival, start and end (%globaltimer).
extern "C" __global__ void __launch_bounds__(AMK_NT, 1)
    amk_megakernel(const amk_program_t P_param, int pos, const amk_decode_t D) {
  extern __shared__ float4 amk_smem4[];
  float *smem = (float *)amk_smem4;
  // The program's record in shared memory: the variants take it by
  // reference, and a reference to the parameter made the kernel copy it to
  // local memory, whose lines live in L1 and were evicted as shared memory
  // took more of it (every P.field read then a round trip to L2).
  __shared__ amk_program_t amk_program_shared;
  if (threadIdx.x == 0)
    amk_program_shared = P_param;
  __syncthreads();
  const amk_program_t &P = amk_program_shared;
  if (D.state)
    pos = (int)((volatile unsigned int *)D.state)[2];
  if (threadIdx.x == 0) {
    amk_seen_reset();
    amk_tag_now = P.launch_tag;
    amk_norm_stage_init();
  }
  const int *qo = (const int *)P.queue_offsets;
  const int *q = (const int *)P.queue;
  const amk_inst_aux_t *aux = (const amk_inst_aux_t *)P.aux;
  for (int b = blockIdx.x; b < P.n_queues; b += gridDim.x) {
    int begin = qo[b], end = qo[b + 1];
    amk_stream_begin(P, smem, begin, end, pos);
    bool warp0 = threadIdx.x < 32;
    if (warp0 && begin < end) {
      int first = q[begin];
      if (first >= 0 && first < P.n_instructions)
        amk_stage_issue(P, first, begin & 1);
      amk_stage_wait<0>();
    }
    for (int k = begin; k < end; k++) {
      int idx = q[k];
      if (idx < 0 || idx >= P.n_instructions) {
        if (threadIdx.x == 0)
          amk_fail(P, AMK_STATUS_SHAPE, idx, b, k);
        return;
      }
      // Thread 0 reads the staged records before the wait's barrier (its
      // warp has waited for them); every other thread after it. A bad
      // next index stages nothing (an empty group): it fails on its turn.
      if (warp0) {
        if (k + 1 < end) {
          int next = q[k + 1];
          if (next >= 0 && next < P.n_instructions)
            amk_stage_issue(P, next, (k + 1) & 1);
          else
            asm volatile("cp.async.commit_group;" ::: "memory");
          amk_stage_wait<1>();
        } else {
          amk_stage_wait<0>();
        }
      }
      const amk_instruction_t &I = amk_staged_inst[k & 1];
      const amk_inst_aux_t &A = amk_staged_aux[k & 1];
      amk_stream_window(P, smem, k, pos);
      if (AMK_STREAM_MODE != 0 && threadIdx.x == AMK_PUMP_THREAD) {
        amk_stream(smem)->cur_k = k;
        amk_stream_pump(smem, k);
      }
      // Weights the stream does not carry go to L2 ahead of the waits, by
      // warp 0 (which sees the staged record); without a stream, the next
      // instruction's too.
      if (warp0 && (AMK_STREAM_MODE == 0 || amk_desc(amk_stream(smem), k).row_bytes == 0))
        amk_prefetch(A);
      if (AMK_STREAM_MODE == 0 && warp0 && k + 1 < end)
        amk_prefetch(aux[q[k + 1]]);
      if (AMK_PREWAIT_MASK != 0ull && threadIdx.x == 0 && A.variant >= 0 && A.variant < 64 &&
          ((AMK_PREWAIT_MASK >> A.variant) & 1ull))
        amk_variant_prewait(I, A, pos);
      amk_trace_t *tr = P.trace ? (amk_trace_t *)P.trace + idx : nullptr;
      if (tr && threadIdx.x == 0)
        tr->arrive = amk_globaltimer();
      // Before the wait's barrier, so every thread sees it in the body; the
      // previous task's signal barrier kept it until all were done with it.
      if (AMK_TAGGED != 0 && threadIdx.x == 0)
        amk_tag_out = (unsigned long long *)A.shadow[AMK_MAX_INPUTS];
      if (!amk_wait(P, I, idx))
        return;
      if (tr && threadIdx.x == 0)
        tr->start = amk_globaltimer();
      if (AMK_TRACE_PHASES != 0 && threadIdx.x == 0)
        amk_phase_record = tr;
      amk_dispatch(P, I, A, idx, pos, smem);
      if (AMK_TRACE_PHASES != 0 && tr && threadIdx.x == 0)
        tr->body = amk_globaltimer();
      amk_signal(P, I, A, idx);
      if (tr && threadIdx.x == 0)
        tr->end = amk_globaltimer();
    }
    __syncthreads();
    amk_stream_end(smem);
  }
  if (D.state) {
    // The last block to get here runs the decode step's epilogue. A block
    // that stopped on an error never gets here, so no token is produced.
    __shared__ int s_last;
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      unsigned int done = atomicAdd((unsigned int *)D.state, 1u);
      s_last = done == gridDim.x - 1 && ((volatile unsigned int *)P.status)[4] == 0u;
    }
    __syncthreads();
    if (s_last)
      amk_decode_finish(P, D, pos, smem);
  }
}

// Random weights made on the device: element i is what the host's
// amk_random_fill (runtime/weights.c) gives, bit for bit: the (i+1)-th
// splitmix64 output from `state` (a counter, so every element stands
// alone), u its top 53 bits, center + scale * (2u - 1) in double with
// every operation rounded on its own (no fused multiply-add), then fp32 and
// the buffer's dtype, rounding to nearest even.
extern "C" __global__ void __launch_bounds__(256)
    amk_fill_random(unsigned long long dst, long long n, int dtype, unsigned long long state,
                    double center, double scale) {
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n;
       i += (long long)gridDim.x * 256) {
    unsigned long long z = state + (unsigned long long)(i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = __dmul_rn(__ull2double_rn(z >> 11), 1.0 / 9007199254740992.0);
    double t = __dsub_rn(__dmul_rn(2.0, u), 1.0);
    float v = __double2float_rn(__dadd_rn(center, __dmul_rn(scale, t)));
    if (dtype == AMK_ABI_DTYPE_F32)
      ((float *)dst)[i] = v;
    else if (dtype == AMK_ABI_DTYPE_BF16)
      ((unsigned short *)dst)[i] = amk_f2bf(v);
    else
      ((unsigned short *)dst)[i] = amk_f2h(v);
  }
}

// A weight read transposed (a KEY^T source): dst [cols, rows] from src
// [rows, cols], elements of ELEM bytes (2 or 4), through 32 x 32 tiles in
// shared memory so that both sides move whole rows. Blocks of 32 x 8
// threads, a grid of ceil(cols / 32) x ceil(rows / 32).
template <typename T>
__device__ __forceinline__ void amk_transpose_tile(T *dst, const T *src, long long rows,
                                                   long long cols) {
  __shared__ T tile[32][33];
  long long c0 = (long long)blockIdx.x * 32, r0 = (long long)blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {
    long long r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols)
      tile[i][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    long long c = c0 + i, r = r0 + threadIdx.x;
    if (c < cols && r < rows)
      dst[c * rows + r] = tile[threadIdx.x][i];
  }
}
extern "C" __global__ void __launch_bounds__(256)
    amk_transpose(unsigned long long dst, unsigned long long src, long long rows,
                  long long cols, int elem) {
  if (elem == 2)
    amk_transpose_tile((unsigned short *)dst, (const unsigned short *)src, rows, cols);
  else
    amk_transpose_tile((unsigned int *)dst, (const unsigned int *)src, rows, cols);
}

// Read bandwidth probe: every byte of src read once with 16-byte loads.
extern "C" __global__ void __launch_bounds__(AMK_NT)
    amk_read_bw(const uint4 *src, unsigned long long n16, unsigned int *sink) {
  unsigned int acc = 0;
  unsigned long long stride = (unsigned long long)gridDim.x * AMK_NT;
  unsigned long long i = (unsigned long long)blockIdx.x * AMK_NT + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 a = amk_ldw16(src + i), b = amk_ldw16(src + i + stride);
    uint4 c = amk_ldw16(src + i + 2 * stride), d = amk_ldw16(src + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
           d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    uint4 a = amk_ldw16(src + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u)
    sink[0] = acc;
}

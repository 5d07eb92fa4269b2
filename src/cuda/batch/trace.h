// A timeline of one batch-attention run, for performance work (docs/perf/mixed_batch.md, "Twelfth
// session": it found the per-tile bound of the decode CTAs beside the prefill). Compiled in only
// with -DTESSERA_BATCH_TRACE=ON; then TESSERA_CUDA_BATCH_TRACE=N stamps run() number N of the
// process (counted from 0): every sm90 prefill CTA's round starts (one unit per round) and end,
// and every decode-only CTA's claim loop (SM split and sm90-coresident paths), with %globaltimer
// (ns) and %smid (primitives/sm80/special_registers.cuh); launch.cu prints them to stderr after
// that run (which it synchronises), as
//   TRACE P cta smid end round0 round1 ...      TRACE D cta smid start end items
// scripts/trace_split.py summarises the lines. A run inside a graph capture is not traced (the
// host side allocates, copies and synchronises). The slim prefill (sm90-coresident) is not
// stamped: its launch checks an exact register count. Off (the default), no kernel has any of
// this and run() makes one empty call.
#pragma once

#include <cstdint>

namespace tessera::cuda::batch {

// Layout of the trace buffer (64-bit words).
inline constexpr int kTracePrefillCtas = 256;  // prefill CTA b: [b * kTracePrefillStride ..]
inline constexpr int kTraceRounds = 32;        //   round starts, then end, then smid
inline constexpr int kTracePrefillStride = kTraceRounds + 2;
inline constexpr int kTraceDecodeOffset = kTracePrefillCtas * kTracePrefillStride;
inline constexpr int kTraceDecodeCtas = 1024;  // decode CTA d: [offset + 4 d ..] start, end, items, smid
inline constexpr int kTraceWords = kTraceDecodeOffset + 4 * kTraceDecodeCtas;

struct BatchArgs;
// Host side (trace.cpp; no-ops unless built with TESSERA_BATCH_TRACE): trace_begin sets
// args.trace when this run is the one TESSERA_CUDA_BATCH_TRACE names (and is not being captured),
// clearing the buffer on the run's stream, and returns whether it is; trace_end synchronises the
// stream and prints the stamps.
bool trace_begin(BatchArgs& args, void* stream);
void trace_end(const BatchArgs& args, void* stream);

}  // namespace tessera::cuda::batch

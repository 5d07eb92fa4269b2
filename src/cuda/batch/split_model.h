// TESSERA_CUDA_BATCH=sm90-split: how many SMs the decode-only kernel gets while the sm90
// batch-prefill kernel runs on the others (docs/perf/mixed_batch.md, "SM split"). Host-only.
//
// The prefill is tensor-bound and runs its U units in rounds over its n - k persistent CTAs (a
// static walk of equal-cost units: it ends after ceil(U / (n - k)) of them, each F / (U f)
// seconds); the decode reads at a measured per-SM rate r until the chip's HBM ceiling. With k
// decode SMs the prefill ends at Tp(k) = ceil(U / (n - k)) F / (U f) (F / ((n - k) f) when U is
// not given); the decode has read min(k r, BW) Tp(k) by then and reads the rest at BW on the
// whole chip (its claims spread as prefill CTAs exit). The answer minimises Tp(k) + rest / BW
// over k in [0, n - 1]; k = 0 is the sequential order. Rounds matter: the mixed bench's 1024
// units take 13 rounds on 81 SMs (k = 51, the eleventh session's answer at r = 50 GB/s) but 12
// on 86 (k = 46), measured 0.90 against 0.81 ms at the boost clock (docs/perf/mixed_batch.md, "Twelfth session";
// sustained under the H200's power cap k = 46 is still the fastest: "Thirteenth session");
// a prefill of 200 units gets 2 rounds on 100 CTAs (k = 32) where the continuous formula's k = 46
// leaves 3. U counts every row block of an item as a unit (empty blocks too: rounds are then
// overestimated where row_blocks > 1).
#pragma once

#include <algorithm>

namespace tessera::cuda::batch {

struct SplitRates {
  double prefill_flops_per_sm = 3.8e12;  // fat sm90 prefill, d128 (H200: ~0.5 ms for 258 GFLOP)
  double decode_bytes_per_sm = 60e9;     // two decode-only CTAs per SM beside the prefill (page indices fetched ahead)
  double decode_bytes_chip = 4.3e12;     // HBM read ceiling (decode on every SM)
};

// The prefill's time on num_sms - k CTAs: whole rounds of its units when their count is given.
inline double split_prefill_time(double prefill_flops, int num_sms, int k, const SplitRates& r, long long prefill_units) {
  const int ctas = num_sms - k;
  return prefill_units > 0 ? static_cast<double>((prefill_units + ctas - 1) / ctas) * prefill_flops /
                                 (static_cast<double>(prefill_units) * r.prefill_flops_per_sm)
                           : prefill_flops / (ctas * r.prefill_flops_per_sm);
}

inline double split_time(double prefill_flops, double decode_bytes, int num_sms, int k, const SplitRates& r,
                         long long prefill_units = 0) {
  const double tp = split_prefill_time(prefill_flops, num_sms, k, r, prefill_units);
  const double during = std::min(k * r.decode_bytes_per_sm, r.decode_bytes_chip) * tp;
  return tp + std::max(0.0, decode_bytes - during) / r.decode_bytes_chip;
}

inline int split_decode_sms(double prefill_flops, double decode_bytes, int num_sms, long long prefill_units = 0,
                            const SplitRates& r = {}) {
  if (prefill_flops <= 0 || decode_bytes <= 0 || num_sms < 2) return 0;
  int best = 0;
  double best_t = split_time(prefill_flops, decode_bytes, num_sms, 0, r, prefill_units);
  // With whole rounds, among equal times the larger k whose prefill has no more rounds: the
  // decode then has margin if it runs slower than r (the bench's planner figures tie k = 45 and
  // 46, where the decode ends inside the prefill's 12 rounds). Without a unit count, the first
  // minimum (strict), as before.
  constexpr double kTie = 1e-9;
  for (int k = 1; k < num_sms; ++k) {
    const double t = split_time(prefill_flops, decode_bytes, num_sms, k, r, prefill_units);
    const bool tie = prefill_units > 0 && t <= best_t * (1 + kTie) &&
                     split_prefill_time(prefill_flops, num_sms, k, r, prefill_units) <=
                         split_prefill_time(prefill_flops, num_sms, best, r, prefill_units) * (1 + kTie);
    const bool better = prefill_units > 0 ? t < best_t * (1 - kTie) : t < best_t;
    if (better || tie) best = k, best_t = std::min(best_t, t);
  }
  return best;
}

}  // namespace tessera::cuda::batch

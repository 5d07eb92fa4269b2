// Shared test machinery: host tensors inside NaN-filled margins, fresh random inputs,
// poisoning, and the tolerance rule of DEVELOPERS.md:
//   max |kernel - oracle| <= 2 * max |naive same-precision - oracle| + rounding floor.
#pragma once

#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "params/attention_params.h"
#include "tessera/attention.h"
#include "tessera/options.h"
#include "tessera/tensor.h"

namespace tessera::testing {

// Owns storage for a strided host tensor plus `margin` poisoned elements on each side.
// Strides are row-major; `row_pad` > 0 inserts unused (poisoned) elements after every row, so the
// tensor is non-contiguous and reads past a row land on NaN.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<std::int64_t> shape, std::int64_t row_pad = 0, std::int64_t margin = 64);

  Tensor view() const;
  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  const std::vector<std::int64_t>& strides() const { return strides_; }
  std::int64_t numel() const;

  // Element access by logical multi-index (row-major enumeration index also available).
  std::int64_t offset_of_linear(std::int64_t linear) const;  // storage offset (elements) of the i-th element
  float get(std::int64_t linear) const;
  void set(std::int64_t linear, float v);

  void fill_normal(std::mt19937_64& rng, float stddev = 1.0f, float mean = 0.0f);
  void fill_uniform(std::mt19937_64& rng, float lo, float hi);
  void fill(float v);
  void set_int(std::int64_t linear, std::int32_t v);  // exact, for int32 tensors
  void poison();  // every element NaN (or a sentinel for int32)

  // Number of logical elements still NaN (never written).
  std::int64_t count_nan() const;
  // True if every margin and row-padding element still holds its poison.
  bool margins_intact() const;
  // Byte-wise snapshot for "nothing was written" checks.
  std::vector<unsigned char> bytes() const { return storage_; }

  void* base() const { return const_cast<unsigned char*>(storage_.data()) + margin_ * elem_; }

 private:
  DType dtype_ = DType::f32;
  std::vector<std::int64_t> shape_, strides_;
  std::int64_t margin_ = 0;
  std::int64_t elem_ = 4;
  std::int64_t span_ = 0;  // elements between first and last (inclusive) of the view
  std::vector<unsigned char> storage_;
  std::vector<bool> used_;  // storage elements that belong to the view
};

// int32 host tensor from values.
HostTensor int_tensor(const std::vector<std::int32_t>& values);

// A poison value for the element type: NaN for floats, INT32_MIN for int32.
float poison_value(DType dtype);

// How a naive baseline computes. kSequential is the rule's baseline: dot products (S = q . k,
// dP = dO . v) summed first to last, P = exp(s - max) / sum, and in the backward
// D = sum_j P dP (a framework's softmax backward). The others are equally naive: dots summed
// last to first or in two interleaved lanes (even and odd elements) added at the end;
// P = exp2(s log2 e - max log2 e) / sum (base 2 with the factor folded in, as tiled kernels
// compute it: at |s| ~ 1e4 rounding s log2 e moves P by ~1e-3 relative, which the exp form
// does not); D = dO . O from the forward's output (as FlashAttention-style backwards compute
// it). Where a case is ill-conditioned (saturated softmax at huge logits: outputs and
// gradients are cancellations of terms ~1e3 times their size) one variant's max error is a
// noisy draw (a kernel's error ranged past 5x of it over seeds, ~2 % of seeds past 2x); such a
// test takes the largest error over the variants that compute what the kernel computes.
// The backward takes kSequential and kRowDotFromO only (see naive_same_precision_backward),
// the forward the others (kSequential only for e4m3); any other pairing throws.
enum class NaiveVariant { kSequential, kReverseDots, kTwoLaneDots, kExp2, kRowDotFromO };

// Same-precision naive attention (S, P and O rounded to the storage dtype as a framework
// running the three-pass algorithm in that dtype would), packed as the oracle's arrays.
// `lse` (optional) receives the row LSE in natural log, packed [h * total_q + row].
// For e4m3 inputs it is naive_fp8_forward.
std::vector<double> naive_same_precision_forward(const AttentionParams& p, std::vector<double>* lse = nullptr,
                                                 NaiveVariant variant = NaiveVariant::kSequential);

// The naive same-precision baseline of the FP8 forward (p.dtype e4m3), i.e. what an FP8
// kernel does, without tiling: S = scale * (q * dq) . (k * dk) in fp32 from the dequantised
// inputs (then softcap and masks), m = row max, l = sum exp(S - m) in fp32,
// P8 = e4m3(256 * exp(S - m)) (P scaled into fp8 range), O = (sum P8 * v8 in fp32) * dv / (256 l)
// with v8 the stored fp8 values, rounded to bf16. lse = m + ln l (fp32).
std::vector<double> naive_fp8_forward(const AttentionParams& p, std::vector<double>* lse = nullptr);

// Fast exact e4m3 (OCP "fn": max 448, saturating, round to nearest even) for test data and
// baselines; agrees bit for bit with math::float_to_fp8(x, 4) / round_to(DType::e4m3, x).
float round_e4m3(float x);
std::uint8_t encode_e4m3(float x);
struct NaiveGrads { std::vector<double> dq, dk, dv; };
// The naive backward in the storage precision. When p.lse is set (a backward from the saved
// LSE, as every kernel here is), P is recomputed as exp(s - lse) from that fp32 LSE, so the
// baseline carries the same irreducible LSE rounding as the kernel under test.
NaiveGrads naive_same_precision_backward(const BackwardParams& p, NaiveVariant variant = NaiveVariant::kSequential);

// max |a - ref| over all entries (both finite); +inf if `a` has a NaN where ref is finite,
// or a mismatch of infinities.
double max_abs_error(const std::vector<double>& a, const std::vector<double>& ref);

// Max error (as max_abs_error) and root-mean-square error over the entries where ref is
// finite (+inf for both on any NaN or infinity mismatch).
struct ErrorStats {
  double max_abs = 0.0;
  double rmse = 0.0;
};
ErrorStats error_stats(const std::vector<double>& a, const std::vector<double>& ref);

// Rounding floor of the tolerance rule for outputs of magnitude `scale` in `dtype`:
// n * epsilon(dtype) * max(1, scale), n = 16 for fp32 and 2 otherwise (docs/TESTING.md).
double rounding_floor(DType dtype, double scale);
double max_abs(const std::vector<double>& v);
// The whole rule's bound: 2 * max|naive - oracle| + rounding_floor(dtype, max|oracle|).
// Throws std::logic_error when the naive error is not finite (the bound would be +inf).
double tolerance(const std::vector<double>& naive, const std::vector<double>& oracle, DType dtype);

// Reads a (b, r, h, d)-addressed output into the oracle's packed order.
std::vector<double> gather_rows(const HostTensor& t, const StridedPtr& ptr, DType dtype, int batch,
                                const std::vector<std::int64_t>& row_starts, const std::vector<int>& row_lens,
                                int heads, int head_dim, bool ragged);

// Reads an LSE tensor (LsePtr addressing) into the oracle's packed [h * total_q + row] order.
std::vector<double> gather_lse(const HostTensor& t, const LsePtr& ptr, int batch,
                               const std::vector<std::int64_t>& row_starts, const std::vector<int>& row_lens,
                               int heads, bool ragged);

// Row starts and lengths of q (or k) rows of the params' batch, for gather_rows / gather_lse.
void q_rows(const AttentionParams& p, std::vector<std::int64_t>* starts, std::vector<int>* lens);
void k_rows(const AttentionParams& p, std::vector<std::int64_t>* starts, std::vector<int>* lens);

// Seeded from the clock (or from the environment variable TESSERA_SEED when set); the seed
// is printed so a failure can be replayed.
std::mt19937_64 fresh_rng();  // seeded from the clock; the seed is printed for replay
// One dense or ragged attention problem on the host: inputs filled at random, outputs and
// gradients poisoned, run through the public API, read back in the oracle's packed order.
struct CaseSpec {
  DType dtype = DType::f32;
  int batch = 1;                    // dense only; ragged batch = q_lens.size()
  int seq_q = 1, seq_k = 1;         // dense only
  std::vector<int> q_lens, k_lens;  // non-empty: ragged, one entry per sequence
  int heads_q = 1, heads_kv = 1, head_dim = 64;
  AttentionOptions options;  // return_lse is forced on
  std::int64_t row_pad = 0;  // > 0: non-contiguous q/k/v/out/grads (and descales)
  float input_std = 1.0f;
  // FP8 (dtype e4m3, run through attention_forward_fp8): which descales are present (absent
  // means 1). A present descale per (sequence, kv head) is amax / 448 for a random amax in
  // [4, 8] x the values' std, and the stored fp8 values are e4m3(x / descale) with x normal
  // (std input_std for q/k, 1 for v): the dequantised inputs have the magnitudes of the other
  // dtypes' cases, quantised as a framework would. Without a descale, e4m3(x) is stored.
  bool descale_q = true, descale_k = true, descale_v = true;
  bool fp8() const { return dtype == DType::e4m3; }
  bool ragged() const { return !q_lens.empty(); }
  int num_sequences() const { return ragged() ? static_cast<int>(q_lens.size()) : batch; }
  std::string name() const;  // short description for failure messages
};

// gtest prints a spec by its name instead of its bytes.
inline void PrintTo(const CaseSpec& s, std::ostream* os) { *os << s.name(); }

// Short builders for test grids.
AttentionOptions opts(bool causal, int left = -1, int right = -1, float softcap = 0.0f);
CaseSpec dense(DType dt, int batch, int sq, int sk, int hq, int hkv, int d, AttentionOptions o, std::int64_t pad = 0);
CaseSpec ragged(DType dt, std::vector<int> ql, std::vector<int> kl, int hq, int hkv, int d, AttentionOptions o,
                std::int64_t pad = 0);
// FP8 cases: dtype e4m3 with the three descales present (clear spec.descale_* for absent ones).
CaseSpec dense_fp8(int batch, int sq, int sk, int hq, int hkv, int d, AttentionOptions o, std::int64_t pad = 0);
CaseSpec ragged_fp8(std::vector<int> ql, std::vector<int> kl, int hq, int hkv, int d, AttentionOptions o,
                    std::int64_t pad = 0);
// The same FP8 case with the named descales absent (1.0).
CaseSpec without_descales(CaseSpec s, bool q, bool k, bool v);

struct AttentionCase {
  AttentionCase(const CaseSpec& spec, std::mt19937_64& rng);

  CaseSpec spec;
  // out is bf16 for fp8 cases; descale_* (fp32 (sequences, heads_kv)) only for fp8 cases
  // whose spec asks for them. Gradients keep the input dtype (there is no fp8 backward).
  HostTensor q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k, descale_q, descale_k, descale_v;

  AttentionOptions options() const;
  // The descales as the API takes them (absent tensors where the spec has none).
  Fp8Descale descales() const;
  // Poison out/lse, then tessera::attention_forward(_ragged), or attention_forward_fp8(_ragged)
  // for fp8 cases.
  void forward(const ExecutionContext& ctx = {});
  // Poison dq/dk/dv, then tessera::attention_backward(_ragged) from the current out and lse.
  void backward(const ExecutionContext& ctx = {});
  // The params the API builds for these tensors (for the oracle and the naive baseline).
  AttentionParams forward_params() const;
  BackwardParams backward_params() const;
  // Current contents in the oracle's packed order.
  std::vector<double> out_packed() const;
  std::vector<double> lse_packed() const;
  std::vector<double> dq_packed() const;
  std::vector<double> dk_packed() const;
  std::vector<double> dv_packed() const;

  // Dense cases: scores that ramp along the keys. Component 0 of every query becomes q0 and of
  // key j of kv head h k0_max * j / (seq_k - 1) for even h (rising), k0_max * (seq_k - 1 - j) /
  // (seq_k - 1) for odd h (falling); the other components keep their random values. Values are
  // the true ones (fp8 stores them divided by the descale, which must keep them within 448).
  // Refresh any device copies afterwards.
  void set_score_ramps(float q0, float k0_max);

 private:
  void fill_fp8(std::mt19937_64& rng);  // descales, then q/k/v quantised with them
};

}  // namespace tessera::testing

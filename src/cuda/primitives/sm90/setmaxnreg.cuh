// setmaxnreg.{inc,dec}.sync.aligned.u32 (sm_90a only): a warpgroup gives registers back to the
// SM's pool (dec) or takes more from it (inc), so that in a warp-specialised kernel the
// producer warpgroup (TMA issue, few live values) runs on ~24-40 registers per thread while the
// consumer warpgroups (wgmma accumulators, softmax state) run on ~232-240.
//
// Rules (ptxas warns C7508 and ignores the instruction when they are broken; read the build
// log):
// - The kernel must have a register cap at entry: __launch_bounds__(threads, 1) (with the 1)
//   or -maxrregcount. Every warp starts with that cap.
// - All 4 warps of a warpgroup execute the same setmaxnreg (it is .sync.aligned per warp and
//   the count is per warpgroup); each role is one branch of a single if/else on the warpgroup
//   index, with setmaxnreg at the top of the branch.
// - kRegs is a multiple of 8 in 24..256. dec needs kRegs <= the current count, inc >= it;
//   inc blocks until the pool has enough free registers, so the sum over warpgroups of
//   (threads x registers) after the changes must fit the 64K-register file of the SM (e.g. 384
//   threads, entry cap 168: producer dec to 40, two consumers inc to 232: 128*40 + 256*232 =
//   64512 <= 65536).
#pragma once

namespace tessera::cuda::sm90 {

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in 24..256");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in 24..256");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace tessera::cuda::sm90

"""scripts/gpu-ab's default ncu kernel filter: the forward's main launch, not the head_dim 64
tail-row launch of the same name (the twenty-eighth session's d64 profile caught the 32-CTA tail
launch). The names are as ncu's CSV prints them (--kernel-name-base demangled)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_pattern():
    # gpu-ab spells one template argument once, as the shell variable n, and uses it in the filter.
    text = open(os.path.join(ROOT, "scripts", "gpu-ab")).read()
    n = re.search(r"\bn='([^']+)'", text)
    m = re.search(r'--kernel-name-base demangled -k "regex:([^"]+)"', text)
    assert n and m, "gpu-ab: the default demangled kernel filter was not found"
    return re.compile(m.group(1).replace("$n", n.group(1)))


def test_main_launches_match_and_the_tail_row_launch_does_not():
    pick = default_pattern()
    main = ["void forward_kernel<__nv_bfloat16, 64, 128, 0, 0, 0, 0>(FwdArgs)",
            "void forward_kernel<__half, 128, 176, 1, 0, 0, 0>(FwdArgs)",
            "void forward_kernel<__nv_fp8_e4m3, 256, 128, 1, 2, 1, 0>(FwdArgs)",
            # with an 8th argument (wip/tensor-row-sum's kTensorRowSum), the main launch either way
            "void forward_kernel<__nv_bfloat16, 64, 128, 0, 0, 0, 0, 1>(FwdArgs)",
            "void forward_kernel<__half, 128, 176, 1, 0, 0, 0, 0>(FwdArgs)",
            "void tessera::cuda::sm80::forward_kernel<__nv_bfloat16, 64>(FwdArgs)",
            "void tessera::cuda::sm80::forward_kernel<__half, 256>(FwdArgs)",
            # as ncu 2025 prints them: each argument led by its type
            "void tessera::cuda::sm90::forward_kernel<__nv_bfloat16, (int)64, (int)128, (bool)1, (int)2, (bool)0, "
            "(bool)0>(tessera::cuda::sm90::FwdArgs)",
            "void tessera::cuda::sm80::forward_kernel<__nv_bfloat16, (int)64>(FwdArgs)"]
    for name in main:
        assert pick.search(name), name
    for name in ["void forward_kernel<__nv_bfloat16, 64, 128, 0, 0, 0, 1>(FwdArgs)",
                 "void forward_kernel<__nv_bfloat16, 64, 128, 0, 0, 0, 1, 0>(FwdArgs)",
                 "void tessera::cuda::sm90::forward_kernel<__half, (int)64, (int)128, (bool)0, (int)0, (bool)0, "
                 "(bool)1>(tessera::cuda::sm90::FwdArgs)",
                 "void backward_kernel<__nv_bfloat16, 128>(BwdArgs)",
                 "void split_merge_kernel<__nv_bfloat16>(MergeArgs)"]:
        assert not pick.search(name), name

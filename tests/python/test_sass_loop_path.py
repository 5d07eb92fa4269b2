"""scripts/sass_loop_path.py on hand-written SASS: the K/V loop is the shortest loop with an
HGMMA and enough MUFU.EX2; its steady path takes forward branches inside the loop (an optional
block skipped), not a barrier wait's backward retry nor a branch out of the loop; a loop the walk
cannot finish is reported, and the argument errors."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import sass_loop_path  # noqa: E402


def listing(name, body):
    lines = [f"        Function : {name}"]
    for i, text in enumerate(body):
        lines.append(f"        /*{16 * i:04x}*/                   {text} ;")
    return "\n".join(lines) + "\n"


# 0x00 outer head; 0x10-0xc0 the K/V loop: a wait with its retry (backward, not taken), a
# branch to an error block after the loop (not taken), an optional block skipped by a forward
# branch (taken), two MUFU on the path and one in the skipped block.
KERNEL = [
    "MOV R1, R2",                                 # 0x00 outer loop head
    "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3",  # 0x10 K/V loop head
    "@!P0 BRA 0x10",                              # 0x20 retry: backward, not taken
    "@P1 BRA 0xf0",                               # 0x30 to the error block: out of the loop
    "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT",  # 0x40
    "@!P2 BRA 0x80",                              # 0x50 skip the optional block: taken
    "MUFU.EX2 R5, R5",                            # 0x60 optional (skipped)
    "FMUL R6, R6, R7",                            # 0x70 optional (skipped)
    "MUFU.EX2 R8, R8",                            # 0x80
    "MUFU.EX2 R9, R9",                            # 0x90
    "UIADD3 UR4, UR4, 0x1, URZ",                  # 0xa0
    "FADD R10, R8, R9",                           # 0xb0
    "@P3 BRA 0x10",                               # 0xc0 K/V loop back branch
    "@P4 BRA 0x0",                                # 0xd0 outer back branch
    "EXIT",                                       # 0xe0
    "BRA 0xf0",                                   # 0xf0 error block
]


def test_steady_path_of_the_kv_loop():
    lines = sass_loop_path.report([listing("_Z1kv", KERNEL)], ["A"], min_mufu=2)
    assert lines[0] == "_Z1kv"
    # path: 0x10 0x20 0x30 0x40 0x50 -> 0x80 0x90 0xa0 0xb0 0xc0 = 10 instructions
    assert "path 10 (MUFU.EX2 2, GMMA 1, U* 1, BRA 4); loop body 12" in lines[1], lines


def test_two_builds_and_a_kernel_without_the_loop():
    slower = KERNEL[:10] + ["FADD R11, R8, R8", "FADD R12, R9, R9"] + KERNEL[10:]
    # the inserted instructions move every later address by 0x20: rebuild the branch targets
    shifted = [t.replace("0xf0", "0x110") for t in slower]
    lines = sass_loop_path.report([listing("_Z1kv", KERNEL) + listing("_Z4nonev", ["EXIT"]),
                                   listing("_Z1kv", shifted)], ["A", "B"], min_mufu=2)
    assert lines[0] == "_Z1kv"
    assert "A: path 10 " in lines[1] and "B: path 12 " in lines[2], lines
    assert not any("_Z4nonev" in line for line in lines)
    # fp8's QGMMA counts as the warpgroup MMA
    fp8 = [t.replace("HGMMA.64x128x16.F32.BF16", "QGMMA.64x128x32.F32.E4M3.E4M3") for t in KERNEL]
    assert "path 10 (MUFU.EX2 2, GMMA 1," in sass_loop_path.report([listing("_Z2f8", fp8)], ["A"], min_mufu=2)[1]
    # too few MUFU for the loop to count as the K/V loop
    assert sass_loop_path.report([listing("_Z1kv", KERNEL)], ["A"], min_mufu=5) == []


def test_a_walk_that_cannot_reach_the_back_branch():
    # an unconditional jump out of the loop on the path (to the EXIT after it)
    broken = list(KERNEL)
    broken[10] = "BRA 0xe0"
    lines = sass_loop_path.report([listing("_Z1kv", broken)], ["A"], min_mufu=2)
    assert lines == ["_Z1kv", "  A: the walk did not reach the back branch"], lines


def run(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sass_loop_path.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_command_line(tmp_path):
    f = tmp_path / "a.sass"
    f.write_text(listing("_Z1kv", KERNEL))
    r = run(str(f), "--min-mufu", "2")
    assert r.returncode == 0 and "path 10" in r.stdout, r.stdout + r.stderr
    r = run(str(f), "--kernel", "(")
    assert r.returncode == 2 and "--kernel: a regular expression expected, got '('" in r.stderr
    r = run(str(f), "--min-mufu", "-1")
    assert r.returncode == 2 and "--min-mufu: a count >= 0 expected, got -1" in r.stderr

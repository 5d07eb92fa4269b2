"""scripts/sass_overlap.py on hand-written SASS: what lies between each overlapped schedule's
0x1 and 0x0 waits is counted per function, functions filtered by regex, serial kernels report
nothing."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import sass_overlap  # noqa: E402

SASS = """
        Function : _Z7overlapv
        /*0000*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], RZ, !UPT ;
        /*0010*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0020*/                   FMNMX R1, R2, R3, !PT ;
        /*0030*/                   MUFU.EX2 R4, R4 ;
        /*0040*/                   MUFU.EX2 R5, R5 ;
        /*0050*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0060*/                   MUFU.EX2 R6, R6 ;
        Function : _Z6hoistv
        /*0000*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0010*/                   FMNMX R1, R2, R3, !PT ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0030*/                   MUFU.EX2 R4, R4 ;
        Function : _Z6serialv
        /*0000*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0010*/                   MUFU.EX2 R4, R4 ;
        Function : _Z7softcapv
        /*0000*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0010*/                   MUFU.EX2 R4, R4 ;
        /*0020*/                   MUFU.EX2 R5, R5 ;
        /*0030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0040*/                   FMNMX R1, R2, R3, !PT ;
        /*0050*/              @P0  FMNMX R6, R2, R3, !PT ;
        /*0060*/                   MUFU.EX2 R6, R6 ;
"""


def test_counts_between_the_waits():
    # _Z7softcapv: exp2 between the waits but the row max after them (a soft-cap path's exp2
    # only): its FMNMX count, 0, is what tells.
    assert sass_overlap.overlap_report(SASS) == [("_Z7overlapv", 3, 2, 1), ("_Z6hoistv", 1, 0, 1),
                                                 ("_Z7softcapv", 2, 2, 0)]


def test_kernel_filter_and_serial():
    assert sass_overlap.overlap_report(SASS, "hoist") == [("_Z6hoistv", 1, 0, 1)]
    assert sass_overlap.overlap_report(SASS, "serial") == []


def test_cli_from_stdin():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sass_overlap.py"), "--kernel", "overlap"],
                       input=SASS, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "_Z7overlapv: 3 instructions, 2 MUFU.EX2, 1 FMNMX between the 0x1 and the 0x0 wait"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sass_overlap.py"), "obj.o"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--cuobjdump" in r.stderr
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sass_overlap.py"), "--cuobjdump",
                        "/nonexistent/cuobjdump", "obj.o"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--cuobjdump: a runnable cuobjdump expected, got '/nonexistent/cuobjdump'" in r.stderr
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sass_overlap.py"), "--cuobjdump", "false",
                        "obj.o"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "OBJ: an object file cuobjdump can read expected, got 'obj.o'" in r.stderr

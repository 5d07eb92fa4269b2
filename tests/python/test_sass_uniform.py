"""scripts/sass_uniform.py on hand-written SASS: a kernel that gave up its uniform registers
(highest UR down, more R2UR, a new BRA.DIV) is flagged and sets the exit status; one that kept
them is not; the kernel filter and the argument errors."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import sass_uniform  # noqa: E402

BASE = """
        Function : _Z4lostv
        /*0000*/                   R2UR UR4, R2 ;
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR40], RZ, !UPT ;
        /*0020*/                   SHFL.IDX PT, R3, R4, RZ, 0x1f ;
        /*0030*/                   UIADD3 UR41, UR41, 0x1, URZ ;
        Function : _Z4keptv
        /*0000*/                   R2UR UR4, R2 ;
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT ;
        /*0020*/                   WARPSYNC.ALL ;
"""
NEW = """
        Function : _Z4lostv
        /*0000*/                   R2UR UR4, R2 ;
        /*0010*/                   R2UR UR5, R6 ;
        /*0020*/                   R2UR UR6, R7 ;
        /*0030*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0040*/              @!P0 BRA.DIV UR8, 0x400 ;
        /*0050*/                   SHFL.IDX PT, R3, R4, RZ, 0x1f ;
        Function : _Z4keptv
        /*0000*/                   R2UR UR4, R2 ;
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT ;
        /*0020*/                   FFMA R1, R2, R3, R4 ;
        /*0030*/                   WARPSYNC.ALL ;
        Function : _Z3newv
        /*0000*/                   EXIT ;
"""


def test_metrics():
    m = sass_uniform.kernel_metrics(NEW)
    assert m["_Z4lostv"] == {"n": 6, "max_ur": 8, "r2ur": 3, "bra_div": 1, "warpsync": 0}
    assert m["_Z4keptv"] == {"n": 4, "max_ur": 20, "r2ur": 1, "bra_div": 0, "warpsync": 1}


def test_lost_uniform_registers_are_flagged():
    lines, flagged = sass_uniform.compare(BASE, NEW)
    assert flagged
    text = "\n".join(lines)
    assert "FLAG: highest UR 41 -> 8; R2UR 1 -> 3; BRA.DIV 0 -> 1" in text
    kept = [entry for entry in lines if entry.startswith("_Z4keptv")]
    assert len(kept) == 1 and "FLAG" not in kept[0]
    assert "in one build only (1): _Z3newv" in text
    lines, flagged = sass_uniform.compare(BASE, NEW, "kept")
    assert not flagged and len(lines) == 2  # the kept kernel and the one-build-only line


def test_cli(tmp_path):
    base, new = tmp_path / "base.sass", tmp_path / "new.sass"
    base.write_text(BASE)
    new.write_text(NEW)
    script = os.path.join(ROOT, "scripts", "sass_uniform.py")
    r = subprocess.run([sys.executable, script, str(base), str(new)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "FLAG" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, script, str(base), str(new), "--kernel", "kept"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, script, str(base), str(new), "--kernel", "("], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "--kernel: a regular expression expected, got '('" in r.stderr

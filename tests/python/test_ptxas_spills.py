"""scripts/ptxas_spills.py: spilling kernels from a build log, and the hot-kernel gate."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import ptxas_spills  # noqa: E402

LOG = """\
ptxas info    : Compiling entry function '_ZN7tessera4cuda5batch22batch_attention_kernelI6__halfLi64ELi2EEEvNS1_9BatchArgsE' for 'sm_80'
ptxas warning : Registers are spilled to local memory in function '_ZN7tessera4cuda5batch22batch_attention_kernelI6__halfLi64ELi2EEEvNS1_9BatchArgsE', 8 bytes spill stores, 16 bytes spill loads
    8 bytes stack frame, 8 bytes spill stores, 16 bytes spill loads
ptxas warning : Registers are spilled to local memory in function '_ZN7tessera4cuda5batch22batch_attention_kernelI6__halfLi64ELi2EEEvNS1_9BatchArgsE', 4 bytes spill stores, 24 bytes spill loads
ptxas info    : Compiling entry function '_ZN7tessera4cuda4sm9014forward_kernelI6__halfLi128ELi176ELb1ELi0ELb0ELb0EEEvNS1_7FwdArgsE' for 'sm_90a'
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
HOT = "_ZN7tessera4cuda4sm9014forward_kernelI6__halfLi128ELi176ELb1ELi0ELb0ELb0EEEvNS1_7FwdArgsE"


def test_each_kernel_once_with_its_largest_spill():
    found = ptxas_spills.spilling_kernels(LOG)
    assert found == {"_ZN7tessera4cuda5batch22batch_attention_kernelI6__halfLi64ELi2EEEvNS1_9BatchArgsE": (8, 24)}


def test_gate_passes_without_hot_spills(tmp_path, capsys):
    log = tmp_path / "build.log"
    log.write_text(LOG)
    assert ptxas_spills.main([str(log), "--hot", "^_ZN7tessera4cuda4sm90"]) == 0
    assert "batch_attention_kernel" in capsys.readouterr().out


def test_gate_fails_on_a_hot_spill(tmp_path, capsys):
    log = tmp_path / "build.log"
    log.write_text(LOG + f"ptxas warning : Registers are spilled to local memory in function '{HOT}', "
                         "16 bytes spill stores, 16 bytes spill loads\n")
    assert ptxas_spills.main([str(log), "--hot", "^_ZN7tessera4cuda4sm90"]) == 1
    out = capsys.readouterr().out
    assert "HOT " in out and "forward_kernel" in out


def test_clean_log(tmp_path, capsys):
    log = tmp_path / "build.log"
    log.write_text("ptxas info    : 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    assert ptxas_spills.main([str(log), "--hot", "sm90"]) == 0
    assert capsys.readouterr().out == ""

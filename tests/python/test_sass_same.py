"""scripts/sass_same.py on hand-written SASS behind a stand-in cuobjdump: identical kernels, a
renaming alone (registers, a shifted branch target), a real change, kernels per architecture,
kernels in one build only, anonymous namespaces from two checkouts, and the argument errors."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "sass_same.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import sass_same  # noqa: E402


def listing(arch_kernels):
    """cuobjdump -sass text: {arch: {name: [instruction text]}}."""
    lines = []
    for arch, kernels in arch_kernels.items():
        lines.append(f"\tcode for {arch}\n\t\tarch = {arch}")
        for name, body in kernels.items():
            lines.append(f"\t\tFunction : {name}")
            for i, text in enumerate(body):
                lines.append(f"        /*{16 * i:04x}*/                   {text} ;          /* 0x000000000000000 */")
    return "\n".join(lines) + "\n"


KERNEL = ["MOV R1, c[0x0][0x28]", "FFMA R2, R3, R4, R5", "@P0 BRA 0x40", "MUFU.EX2 R6, R6", "EXIT"]
RENAMED = ["MOV R1, c[0x0][0x28]", "FFMA R7, R3, R4, R5", "@P1 BRA 0x50", "MUFU.EX2 R6, R6", "EXIT"]
# FFMA -> FMUL + FADD (2 differ), the branch target shifted (1; 0 with immediates ignored).
CHANGED = ["MOV R1, c[0x0][0x28]", "FMUL R2, R3, R4", "FADD R2, R2, R5", "@P0 BRA 0x50", "MUFU.EX2 R6, R6", "EXIT"]


def test_compare_counts_what_differs():
    same = listing({"sm_90a": {"_Z1k": KERNEL}})
    assert sass_same.compare(same, same) == []
    lines = sass_same.compare(same, listing({"sm_90a": {"_Z1k": RENAMED}}))
    assert lines == ["  sm_90a _Z1k: A 5, B 5 instructions; 2 differ, 0 with registers and immediates ignored"], lines
    lines = sass_same.compare(same, listing({"sm_90a": {"_Z1k": CHANGED}}))
    assert lines == ["  sm_90a _Z1k: A 5, B 6 instructions; 3 differ, 2 with registers and immediates ignored"], lines


def test_kernels_per_architecture_and_in_one_build_only():
    a = listing({"sm_80": {"_Z1k": KERNEL}, "sm_90": {"_Z1k": KERNEL, "_Z3old": KERNEL}})
    b = listing({"sm_80": {"_Z1k": KERNEL}, "sm_90": {"_Z1k": CHANGED, "_Z3new": KERNEL}})
    lines = sass_same.compare(a, b)
    assert lines == ["  sm_90 _Z1k: A 5, B 6 instructions; 3 differ, 2 with registers and immediates ignored",
                     "  sm_90 _Z3new: only in B (5 instructions)",
                     "  sm_90 _Z3old: only in A (5 instructions)"], lines


def test_anonymous_namespaces_of_two_builds_are_one_kernel():
    # nvcc's names: hashes of the file's path and of the compiling process, the length prefix
    # right after the digits of the identifier before it (sm90, testing).
    names = ["_ZN7tessera4cuda4sm9051_GLOBAL__N__5fc3e3da_18_fp8_v_transpose_cu_7cd4317722fp8_v_transpose_kernelILi128EEEvv",
             "_ZN7tessera4cuda4sm9051_GLOBAL__N__f674b245_18_fp8_v_transpose_cu_7cd4317722fp8_v_transpose_kernelILi128EEEvv",
             "_ZN7tessera7testing63_GLOBAL__N__12eef25e_24_test_softmax_fragment_cu_955cb6d8_2740418capped_tile_kernelEv",
             "_ZN7tessera7testing63_GLOBAL__N__84ee4df1_24_test_softmax_fragment_cu_955cb6d8_2169318capped_tile_kernelEv"]
    plain = [sass_same.anonymous_namespaces(n) for n in names]
    assert plain[0] == plain[1] == "_ZN7tessera4cuda4sm9012_GLOBAL__N__22fp8_v_transpose_kernelILi128EEEvv", plain
    assert plain[2] == plain[3] == "_ZN7tessera7testing12_GLOBAL__N__18capped_tile_kernelEv", plain
    assert sass_same.anonymous_namespaces("_Z1kv") == "_Z1kv"
    assert sass_same.compare(listing({"sm_90a": {names[2]: KERNEL}}), listing({"sm_90a": {names[3]: KERNEL}})) == []


def test_listing_as_cuobjdump_writes_it():
    # The encoding on the instruction's line and on a line of its own after it; a header.
    text = """
Fatbin elf code:
================
arch = sm_90a
code version = [1,8]
host = linux
compile_size = 64bit

        code for sm_90a
                Function : _Z1kv
        .headerflags    @"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   MOV R1, c[0x0][0x28] ;                   /* 0x00000a00ff017b82 */
                                                                            /* 0x000fe20000000f00 */
        /*0010*/                   EXIT ;                                   /* 0x000000000000794d */
                                                                            /* 0x000fea0003800000 */
"""
    assert sass_same.kernels(text) == {("sm_90a", "_Z1kv"): ["MOV R1, c[0x0][0x28]", "EXIT"]}


def make_builds(tmp_path, a_objects, b_objects):
    """Two build folders whose *.cu.o files hold SASS text, and a cuobjdump that prints them."""
    for build, objs in (("A", a_objects), ("B", b_objects)):
        for rel, text in objs.items():
            path = tmp_path / build / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    fake = tmp_path / "cuobjdump"
    fake.write_text(f"#!{sys.executable}\nimport sys\nassert sys.argv[1] == '-sass'\n"
                    "sys.stdout.write(open(sys.argv[2]).read())\n")
    fake.chmod(0o755)
    return str(tmp_path / "A"), str(tmp_path / "B"), str(fake)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_command_line(tmp_path):
    same = listing({"sm_90a": {"_Z1k": KERNEL}})
    a, b, fake = make_builds(tmp_path, {"x/one.cu.o": same, "x/two.cu.o": same, "x/only_a.cu.o": same},
                             {"x/one.cu.o": same, "x/two.cu.o": listing({"sm_90a": {"_Z1k": CHANGED}})})
    r = run("--cuobjdump", fake, a, b)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[0] == "differs x/two.cu.o", r.stdout
    assert "x/one.cu.o" not in r.stdout and r.stdout.splitlines()[-1] == "only in A x/only_a.cu.o", r.stdout
    r = run("--cuobjdump", fake, "--all", "--objects", "one", a, b)
    assert r.returncode == 0 and r.stdout.strip() == "same    x/one.cu.o", (r.stdout, r.stderr)
    # an object only one build holds is a difference too
    r = run("--cuobjdump", fake, "--objects", "one|only", a, b)
    assert r.returncode == 1 and r.stdout.strip() == "only in A x/only_a.cu.o", (r.stdout, r.stderr)


def test_argument_errors(tmp_path):
    same = listing({"sm_90a": {"_Z1k": KERNEL}})
    a, b, fake = make_builds(tmp_path, {"one.cu.o": same}, {"one.cu.o": same})
    r = run("--cuobjdump", fake, "--objects", "(", a, b)
    assert r.returncode == 2 and "--objects: a regular expression expected, got '('" in r.stderr, r.stderr
    r = run("--cuobjdump", fake, a, str(tmp_path / "missing"))
    assert r.returncode == 2 and "a build folder expected" in r.stderr, r.stderr
    r = run("--cuobjdump", fake, "--objects", "nothing", a, b)
    assert r.returncode == 2 and "no *.cu.o object in both" in r.stderr, r.stderr
    r = run("--cuobjdump", str(tmp_path / "no-such-cuobjdump"), a, b)
    assert r.returncode == 2 and "--cuobjdump: an executable cuobjdump expected" in r.stderr, r.stderr
    failing = tmp_path / "failing"
    failing.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('not an object')\n")
    failing.chmod(0o755)
    r = run("--cuobjdump", str(failing), a, b)
    assert r.returncode == 2 and "disassembling one.cu.o failed" in r.stderr, r.stderr

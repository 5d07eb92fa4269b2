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


def test_anonymous_namespaces_of_two_checkouts_are_one_kernel():
    a = listing({"sm_90a": {"_ZN7tessera51_GLOBAL__N__5fc3e3da_18_x_cu_7cd4317721kEv": KERNEL}})
    b = listing({"sm_90a": {"_ZN7tessera51_GLOBAL__N__f674b245_18_x_cu_7cd4317721kEv": KERNEL}})
    assert sass_same.compare(a, b) == []


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
    assert "x/one.cu.o" not in r.stdout and "not compared: x/only_a.cu.o" in r.stdout, r.stdout
    r = run("--cuobjdump", fake, "--all", "--objects", "one", a, b)
    assert r.returncode == 0 and r.stdout.strip() == "same    x/one.cu.o", (r.stdout, r.stderr)


def test_argument_errors(tmp_path):
    same = listing({"sm_90a": {"_Z1k": KERNEL}})
    a, b, fake = make_builds(tmp_path, {"one.cu.o": same}, {"one.cu.o": same})
    r = run("--cuobjdump", fake, "--objects", "(", a, b)
    assert r.returncode == 2 and "--objects: a regular expression expected, got '('" in r.stderr, r.stderr
    r = run("--cuobjdump", fake, a, str(tmp_path / "missing"))
    assert r.returncode == 2 and "a build folder expected" in r.stderr, r.stderr
    r = run("--cuobjdump", fake, "--objects", "nothing", a, b)
    assert r.returncode == 2 and "no *.cu.o object in both" in r.stderr, r.stderr

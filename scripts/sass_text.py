"""cuobjdump -sass listings as Python data, for the scripts/sass_*.py tools."""
import re
import subprocess

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
PREDICATE = re.compile(r"^@!?U?P[T\d]+\s+")


def functions(sass_text):
    """{mangled function name: [(address, instruction text)]} of a cuobjdump -sass listing."""
    out, func = {}, None
    for line in sass_text.splitlines():
        m = FUNCTION.search(line)
        if m:
            func = m.group(1)
            out[func] = []
            continue
        m = INSTRUCTION.match(line)
        if m and func is not None:
            out[func].append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(text):
    """The opcode with its modifiers (HGMMA.64x128x16.F32.BF16), the guard predicate dropped."""
    return PREDICATE.sub("", text).split()[0]


def read_sass(path, cuobjdump=None):
    """A file's SASS text: the file itself, or with cuobjdump, the disassembly of an object."""
    if cuobjdump is None:
        with open(path) as f:
            return f.read()
    r = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{cuobjdump} -sass {path} failed: {r.stderr.strip()}")
    return r.stdout


def check_kernel_regex(parser, value):
    """--kernel's value, checked: a parser error naming the option unless it compiles."""
    if value:
        try:
            re.compile(value)
        except re.error as e:
            parser.error(f"--kernel: a regular expression expected, got '{value}' ({e})")
    return value

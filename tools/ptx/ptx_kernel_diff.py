#!/usr/bin/env python3
"""Whether two PTX files hold the same kernel code, after renaming what compilers number.

    ptx_kernel_diff.py OLD.ptx OLD_PATTERN NEW.ptx NEW_PATTERN

Takes the first `.entry` whose name matches each regular expression and compares their
bodies once these are normalized: the entry's own name, every mangled symbol (`_Z...`),
comments and `.reg` declarations removed or replaced by placeholders, the local stack
frame's `__local_depot` number dropped, and virtual registers
(%r, %rd, %rs, %f, %fd, %p) and branch labels renumbered in order of first use. Two kernels
that print "same" give ptxas the same instructions in the same order, so they compile to the
same machine code: a refactoring that keeps a measured kernel's PTX keeps its measurements.
Prints the unified diff otherwise; exit status 0 for same, 1 for different, 2 for no match.

Make the PTX with the build's nvcc flags and `--ptx` (see docs/optimization-log.md for the
commands used).
"""
import difflib
import re
import sys

REGISTER = re.compile(r"(%rd|%rs|%r|%fd|%f|%p|\$L__BB)[0-9_]+")


def kernel_body(ptx: str, pattern: str) -> str | None:
    """The normalized text of the first entry whose name matches `pattern`, else None."""
    entries = list(re.finditer(r"^(?:\.visible\s+)?\.entry (\S+)\(", ptx, re.M))
    # A body ends where the next top-level function (entry or device function) begins.
    starts = [m.start() for m in re.finditer(r"^(?:\.visible\s+|\.weak\s+)?\.(?:entry|func) ",
                                             ptx, re.M)] + [len(ptx)]
    for entry in entries:
        if not re.search(pattern, entry.group(1)):
            continue
        end = min(start for start in starts if start > entry.start())
        body = ptx[entry.start():end].replace(entry.group(1), "KERNEL")
        body = re.sub(r"_Z\w+", "SYMBOL", body)
        body = re.sub(r"__local_depot\d+", "__local_depot", body)  # numbered per file
        body = re.sub(r"^\s*//.*$", "", body, flags=re.M)
        body = re.sub(r"^\s*\.reg .*$", "", body, flags=re.M)
        body = re.sub(r"\n\s*\n", "\n", body)
        names: dict[str, dict[str, str]] = {}

        def rename(match: re.Match) -> str:
            kind = names.setdefault(match.group(1), {})
            return kind.setdefault(match.group(0), f"{match.group(1)}{len(kind)}")

        return REGISTER.sub(rename, body)
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    bodies = []
    for path, pattern in ((argv[1], argv[2]), (argv[3], argv[4])):
        with open(path, encoding="utf-8") as f:
            body = kernel_body(f.read(), pattern)
        if body is None:
            print(f"ptx_kernel_diff: no .entry matching '{pattern}' in {path}", file=sys.stderr)
            return 2
        bodies.append(body)
    if bodies[0] == bodies[1]:
        print(f"same ({bodies[0].count(chr(10))} lines)")
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(bodies[0].splitlines(True), bodies[1].splitlines(True), argv[1],
                             argv[3]))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

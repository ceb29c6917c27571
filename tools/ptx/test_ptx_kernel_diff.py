"""ptx_kernel_diff.py on hand-written PTX: renumbered registers, labels and local stack
frames, other symbol names and comments compare equal; a changed instruction or parameter size does not; a
missing kernel is an error."""
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).with_name("ptx_kernel_diff.py")

OLD = """
.visible .entry _Z6helperv(
)
{
\tret;
}
.entry _ZN3abc7kernel1IfEEvPf(
\t.param .align 8 .b8 _ZN3abc7kernel1IfEEvPf_param_0[16]
)
{
\t.local .align 4 .b8 \t__local_depot3[28];
\t.reg .pred \t%p<3>;
\t.reg .b32 \t%r<9>;
\t// a comment
\tmov.u64 \t%SPL, __local_depot3;
\tld.param.u32 \t%r4, [_ZN3abc7kernel1IfEEvPf_param_0+8];
\tsetp.lt.s32 \t%p2, %r4, 7;
\t@%p2 bra \t$L__BB1_3;
\tadd.s32 \t%r5, %r4, 1;
$L__BB1_3:
\tst.shared.u32 \t[_ZZN3abc7kernel1IfEEvPfE5table], %r4;
\tret;
}
"""

# The same code as OLD's kernel1 under other numbers, names and comments.
RENAMED = """
.entry _ZN3xyz7kernel2IfLb1EEEvPf(
\t.param .align 8 .b8 _ZN3xyz7kernel2IfLb1EEEvPf_param_0[16]
)
{
\t.local .align 4 .b8 \t__local_depot11[28];
\t.reg .pred \t%p<9>;
\t.reg .b32 \t%r<40>;
\tmov.u64 \t%SPL, __local_depot11;
\tld.param.u32 \t%r31, [_ZN3xyz7kernel2IfLb1EEEvPf_param_0+8];
\t// another comment

\tsetp.lt.s32 \t%p7, %r31, 7;
\t@%p7 bra \t$L__BB4_12;
\tadd.s32 \t%r32, %r31, 1;
$L__BB4_12:
\tst.shared.u32 \t[_ZZN3xyz7kernel2IfLb1EEEvPfE5table], %r31;
\tret;
}
"""


def run(tmp_path: Path, new_text: str, old_pattern: str, new_pattern: str):
    old, new = tmp_path / "old.ptx", tmp_path / "new.ptx"
    old.write_text(OLD, encoding="utf-8")
    new.write_text(new_text, encoding="utf-8")
    return subprocess.run([sys.executable, str(TOOL), str(old), old_pattern, str(new), new_pattern],
                          capture_output=True, text=True)


def test_renumbered_registers_labels_and_names_are_the_same_code(tmp_path: Path) -> None:
    result = run(tmp_path, RENAMED, "kernel1", "kernel2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("same (")


def test_a_changed_instruction_is_different(tmp_path: Path) -> None:
    result = run(tmp_path, RENAMED.replace("%r31, 1;", "%r31, 2;"), "kernel1", "kernel2")
    assert result.returncode == 1
    assert "-\tadd.s32 \t%r1, %r0, 1;" in result.stdout
    assert "+\tadd.s32 \t%r1, %r0, 2;" in result.stdout


def test_a_larger_parameter_is_different(tmp_path: Path) -> None:
    result = run(tmp_path, RENAMED.replace("param_0[16]", "param_0[24]"), "kernel1", "kernel2")
    assert result.returncode == 1
    assert "param_0[24]" in result.stdout


def test_the_first_match_is_compared_and_a_missing_kernel_is_an_error(tmp_path: Path) -> None:
    # "kernel" matches kernel1 in OLD (the helper before it does not match).
    assert run(tmp_path, RENAMED, "kernel", "kernel2").returncode == 0
    result = run(tmp_path, RENAMED, "kernel9", "kernel2")
    assert result.returncode == 2
    assert "no .entry matching 'kernel9'" in result.stderr


def test_visible_entries_are_found_and_end_at_the_next_function(tmp_path: Path) -> None:
    # _Z6helperv is `.visible .entry`; its body stops where kernel1 begins.
    result = run(tmp_path, OLD, "helper", "helper")
    assert result.returncode == 0 and result.stdout == "same (5 lines)\n", result.stdout

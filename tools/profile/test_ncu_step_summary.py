"""ncu_step_summary.py: the decode step and the whole training step it sums, and the kernel
families it sums them by."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ncu_step_summary  # noqa: E402


def kernel(name: str, us: float = 1.0) -> tuple[str, float, str]:
    return (name, us, "(1, 1, 1)")


def test_train_step_runs_from_a_gather_after_the_optimizer_to_the_next():
    step = [kernel("gather_rows_kernel<uint4, long>"), kernel("gemm"), kernel("gather_rows_kernel<x>"),
            kernel("adamw_kernel<bf16>"), kernel("adamw_kernel<bf16>")]
    ks = [kernel("setup")] + step * 3
    got = ncu_step_summary.train_step(ks)
    assert got == step  # the second-to-last whole step; a gather inside a step starts nothing


def test_train_step_needs_three_steps():
    ks = [kernel("gather_rows_kernel"), kernel("adamw_kernel")] * 2
    with pytest.raises(SystemExit):
        ncu_step_summary.train_step(ks)


def test_decode_step_is_from_the_second_to_last_gather():
    ks = [kernel("gather_rows_kernel"), kernel("a"), kernel("gather_rows_kernel"), kernel("b"),
          kernel("gather_rows_kernel"), kernel("c")]
    assert ncu_step_summary.last_step(ks) == ks[2:]


def test_families_sum_each_kernel_once():
    step = [kernel("nvjet_sm90_tst_128x256_NNN", 10.0), kernel("void cublasLt::splitKreduce_kernel<32>", 1.0),
            kernel("gemv_kernel<bf16, 1, 0, true>", 2.0), kernel("flash_dkdv_kernel<bf16, 64>", 5.0),
            kernel("cross_entropy_rows_kernel<bf16, long>", 3.0), kernel("adamw_kernel<bf16>", 4.0),
            kernel("ops::<unnamed>::sum_partials_kernel", 1.0),
            kernel("void cuda::<unnamed>::copy_words_kernel<uint4, unsigned int>", 2.0),
            kernel("rms_norm_forward_kernel<bf16>", 2.0)]
    assert ncu_step_summary.category_totals(step) == {"GEMM and GEMV": 13.0, "attention": 5.0, "loss": 3.0, "optimizer": 5.0,
                   "copies and conversions": 2.0,
                   "other (elementwise, norms, RoPE, embedding, reductions)": 2.0}

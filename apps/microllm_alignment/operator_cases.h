// Operator cases: one microllm operator run on inputs read from .npy files, as described
// by a case.json. Shared by the PyTorch oracle (tests/oracle/op_runner.cpp, driven by
// tests/ops/<op>/test_<op>_oracle.py) and the operator alignment tool (`microllm_alignment
// operator`, driven by tools/alignment/operators/run_operators.py).
//
// case.json:
//   {"op": "matmul", "dtype": "f32",            // dtype: floating inputs are cast to it
//    "args": {"trans_a": true},                 // scalar arguments of the operator
//    "inputs": [{"name": "a", "requires_grad": true,
//                "dtype": "i32",                // optional per-input cast (ids, bf16, ...)
//                "view": [{"kind": "transpose_last2"}]}, ...]}
// Each input is loaded from CASE_DIR/<name>.npy, cast, moved to the device, marked as a
// leaf, then passed through its view transforms so the operator receives a non-contiguous
// view:
//   {"kind": "transpose_last2"} | {"kind": "permute", "dims": [...]} |
//   {"kind": "narrow", "dim": d, "start": s, "length": n}
// Outputs (written to OUT_DIR as dense CPU arrays): out.npy for every operator, plus
// <name>.npy for the extra outputs of multi-output operators (add_rms_norm: sum.npy).
// Backward runs when some input requires a gradient and CASE_DIR holds grad_output.npy
// (for out) or grad_output_<name>.npy (for extras); for each input that requires a
// gradient, grad_<input>.npy holds the gradient of the view the operator saw (the leaf's
// gradient put through the same view transforms).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "microllm/core/device.h"

namespace microllm::alignment {

struct CaseRun {
  std::string op;                    // the operator case.json names
  std::vector<std::string> written;  // file names written into the output folder, in order
  bool backward = false;             // whether a backward pass ran
};

// Runs the case described by case_dir/case.json on `device` and writes its outputs into
// out_dir (which must exist; it may be case_dir). Throws microllm::Error naming the file,
// the operator or the input that is wrong.
CaseRun run_operator_case(const std::filesystem::path& case_dir,
                          const std::filesystem::path& out_dir, Device device = Device::cpu());

// Every operator name a case.json may use, sorted.
std::vector<std::string> operator_names();

}  // namespace microllm::alignment

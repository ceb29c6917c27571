// microllm_op_runner: runs one operator case for the PyTorch oracle
// (tests/ops/<op>/test_<op>_oracle.py).
//
//   microllm_op_runner CASE_DIR     run the case described by CASE_DIR/case.json
//   microllm_op_runner --list-ops   print every operator name the runner knows
//
// The case.json protocol and the operator table live in
// apps/microllm_alignment/operator_cases.h (shared with `microllm_alignment operator`).
// Outputs and gradients are written into CASE_DIR, on the CPU.
// Errors: a message on stderr and exit code 1.
#include <exception>
#include <iostream>
#include <string>

#include "operator_cases.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: microllm_op_runner CASE_DIR | --list-ops\n";
    return 1;
  }
  try {
    if (std::string(argv[1]) == "--list-ops") {
      for (const std::string& name : microllm::alignment::operator_names())
        std::cout << name << "\n";
      return 0;
    }
    microllm::alignment::run_operator_case(argv[1], argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "microllm_op_runner: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// The MICROLLM_* environment switches that choose kernels, as the benchmark drivers record
// them, so that documents of one binary run under two settings say which each ran under.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace microllm::bench {

// (name, value) of each switch that is set, in a fixed order.
inline std::vector<std::pair<std::string, std::string>> kernel_switches() {
  std::vector<std::pair<std::string, std::string>> set;
  for (const char* name :
       {"MICROLLM_ADAMW_RUNS", "MICROLLM_ADD_INTO_BUFFER", "MICROLLM_DECODE_FUSION",
        "MICROLLM_FLASH_WGMMA", "MICROLLM_FUSED_LOSS", "MICROLLM_FUSED_NORM_BACKWARD",
        "MICROLLM_FUSED_QKV_HEADS", "MICROLLM_GEMM_MEASURE", "MICROLLM_GEMV_CLUSTER_SPLIT",
        "MICROLLM_GEMV_EARLY_INPUTS", "MICROLLM_GEMV_ENGINE", "MICROLLM_GEMV_FINE_SPLIT",
        "MICROLLM_GEMV_STAGE_W", "MICROLLM_GRAD_INTO_BUFFER", "MICROLLM_JOIN_GATE_UP",
        "MICROLLM_PAGED_SHORT_ROWS", "MICROLLM_PROGRAMMATIC_LAUNCH", "MICROLLM_ROPE_RUNS",
        "MICROLLM_SAMPLE_SPLIT"})
    if (const char* value = std::getenv(name)) set.emplace_back(name, value);
  return set;
}

// "; switches: NAME=value, ..." for a note, or "" when none is set.
inline std::string kernel_switches_note() {
  std::string note;
  for (const auto& [name, value] : kernel_switches())
    note += (note.empty() ? "; switches: " : ", ") + name + "=" + value;
  return note;
}

}  // namespace microllm::bench

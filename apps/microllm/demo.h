// `microllm demo`: fits a one-block attention model to a copy task and prints the loss.
#pragma once

#include <cstdint>
#include <string>

namespace microllm::app {

struct DemoOptions {
  int64_t steps = 300;  // optimizer steps
  int64_t batch = 16;   // sequences per step
  int64_t vocab = 12;   // token ids 0..vocab-1
  int64_t half = 8;     // each sequence is `half` random tokens, then the same tokens again
  int64_t width = 32;   // model width C
  int64_t heads = 4;    // query heads H (2 KV heads: grouped-query attention)
  double lr = 0.01;     // Adam learning rate
  uint64_t seed = 0;
  int64_t log_every = 25;
};

// Returns the process exit code.
int run_demo(const DemoOptions& options);

}  // namespace microllm::app

// libFuzzer target for the OpenAI request parser of `microllm serve`
// (serve::parse_completion_request).
//
// Build and run (clang only; see docs/serving.md):
//   cmake -S . -B build/fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
//         -DMICROLLM_BUILD_FUZZERS=ON
//   cmake --build build/fuzz --target fuzz_openai_request
//   build/fuzz/tests/fuzz_openai_request -max_total_time=120 NEW_DIR tests/fuzz/corpus/openai
//
// The first input byte picks the call: bit 0 the endpoint (0 chat, 1 completions), bits 1–2
// one of four ProtocolLimits, bit 3 the sampling defaults (OpenAI's, or a set such as a
// generation_config.json gives); the rest is the body. Any exception other than
// serve::ApiException, any sanitizer report, any error that is not a 4xx with a message and
// a well-formed error body, and any accepted request that breaks what the parser promises
// (docs/serving.md, "Requests") is a crash.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "microllm/serve/openai_protocol.h"

using namespace microllm;
using serve::ApiError;
using serve::CompletionRequest;
using serve::Endpoint;
using serve::ProtocolLimits;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

const ProtocolLimits& limits_for(int variant) {
  static const ProtocolLimits limits[4] = {
      {{"m", "tiny-model"}, /*max_n=*/16, /*max_stop=*/4, /*max_top_logprobs=*/20},
      {{"m", "tiny-model"}, 1, 0, 0},
      {{"m", "tiny-model"}, 128, 16, 5},
      {{"m", "tiny-model"}, 2, 1, 20},
  };
  return limits[variant];
}

const infer::SamplingParams& defaults_for(int variant) {
  static const infer::SamplingParams openai{};
  static const infer::SamplingParams model = [] {
    infer::SamplingParams p;
    p.temperature = 0.7f;
    p.top_p = 0.8f;
    p.top_k = 20;
    p.repetition_penalty = 1.05f;
    p.seed = 42;
    p.stop_token_ids = {2, 7};
    return p;
  }();
  return variant ? model : openai;
}

bool in(float v, float lo, float hi) { return std::isfinite(v) && v >= lo && v <= hi; }

// What an accepted request promises (openai_protocol.h, docs/serving.md).
void check_request(const CompletionRequest& r, Endpoint endpoint, const ProtocolLimits& limits,
                   const infer::SamplingParams& defaults) {
  check(r.endpoint == endpoint);
  bool served = false;
  for (const std::string& name : limits.model_names) served = served || name == r.model;
  check(served);
  if (endpoint == Endpoint::chat_completions) {
    check(!r.messages.empty());
    for (const serve::ChatMessage& m : r.messages)
      check(m.role == "system" || m.role == "developer" || m.role == "user" ||
            m.role == "assistant");
    check(r.prompt.empty() && r.prompt_ids.empty() && !r.prompt_is_ids);
  } else {
    check(r.messages.empty());
    check(r.prompt_is_ids == !r.prompt_ids.empty());
    if (r.prompt_is_ids) check(r.prompt.empty());
    for (int32_t id : r.prompt_ids) check(id >= 0);
  }
  if (r.max_tokens)
    check(*r.max_tokens >= 1 && *r.max_tokens <= std::numeric_limits<int32_t>::max());

  // The sampling fields as the engine takes them (infer::validate's ranges, and the
  // documented ones); what the handler sets later is still the defaults'.
  const infer::SamplingParams& s = r.sampling;
  check(in(s.temperature, 0.0f, 2.0f));
  check(in(s.top_p, 0.0f, 1.0f) && s.top_p > 0.0f);
  check(s.top_k >= 0);
  check(in(s.min_p, 0.0f, 1.0f));
  check(in(s.presence_penalty, -2.0f, 2.0f));
  check(in(s.frequency_penalty, -2.0f, 2.0f));
  check(in(s.repetition_penalty, 0.0f, 2.0f) && s.repetition_penalty > 0.0f);
  check(s.max_new_tokens == defaults.max_new_tokens && s.logprobs == defaults.logprobs);
  check(s.stop_token_ids == defaults.stop_token_ids);
  if (!r.seeded) check(s.seed == defaults.seed);

  check(static_cast<int64_t>(r.stop.size()) <= limits.max_stop);
  for (const std::string& stop : r.stop) check(!stop.empty());
  check(r.n >= 1 && r.n <= limits.max_n);
  check(!r.include_usage || r.stream);
  check(r.logprobs >= -1 && r.logprobs <= limits.max_top_logprobs);
}

// What a rejection promises: a 4xx (404 only for the model) with a message, and an error
// body that is OpenAI's JSON object even when the message quotes bytes of the request.
void check_error(const ApiError& e) {
  check(e.status >= 400 && e.status < 500);
  check(!e.message.empty() && !e.type.empty());
  if (e.status == 404) check(e.code == "model_not_found" && e.param == "model");
  try {
    const nlohmann::json body = nlohmann::json::parse(e.body());
    check(body.is_object() && body.size() == 1 && body.contains("error"));
    const nlohmann::json& error = body["error"];
    check(error.is_object() && error.size() == 4 && error["message"].is_string());
  } catch (const nlohmann::json::exception&) {
    check(false);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Endpoint endpoint = (data[0] & 1) ? Endpoint::completions : Endpoint::chat_completions;
  const ProtocolLimits& limits = limits_for((data[0] >> 1) & 3);
  const infer::SamplingParams& defaults = defaults_for((data[0] >> 3) & 1);
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const CompletionRequest r = serve::parse_completion_request(endpoint, body, limits, defaults);
    check_request(r, endpoint, limits, defaults);
  } catch (const serve::ApiException& e) {
    // Rejected with an error response: the expected outcome for most inputs.
    check_error(e.error());
  }
  return 0;
}

// SamplingParams validation (one Error per bad value, naming field, range and value) and
// GenerationConfig read as transformers reads generation_config.json: defaults for absent
// fields, null = off, do_sample false = greedy, the EOS union. The checkpoint files below
// are the published generation_config.json of Qwen2.5-0.5B-Instruct and
// Llama-3.1-8B-Instruct; the expected values follow from transformers' rules (header of
// generation_config.h), not from running microllm.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/expect_error.h"
#include "microllm/infer/generation_config.h"
#include "microllm/infer/sampling_params.h"

namespace microllm::testing {
namespace {

using infer::GenerationConfig;
using infer::SamplingParams;
using nlohmann::json;

TEST(SamplingParams, DefaultsAreValidAndTurnEveryFilterOff) {
  const SamplingParams p;
  EXPECT_NO_THROW(infer::validate(p));
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.min_p, 0.0f);
  EXPECT_FALSE(p.uses_history());
  EXPECT_EQ(p.logprobs, -1);
  SamplingParams q;
  q.presence_penalty = 0.5f;
  EXPECT_TRUE(q.uses_history());
}

TEST(SamplingParams, EachBadValueIsOneErrorNamingFieldRangeAndValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    void (*set)(SamplingParams&);
    std::vector<std::string_view> fragments;
  };
  const std::vector<Case> cases = {
      {[](SamplingParams& p) { p.temperature = -0.5f; }, {"temperature", ">= 0", "-0.5"}},
      {[](SamplingParams& p) { p.temperature = std::numeric_limits<float>::infinity(); },
       {"temperature", "inf"}},
      {[](SamplingParams& p) { p.top_k = -1; }, {"top_k", ">= 0", "got -1"}},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, {"top_p", "(0, 1]", "got 0"}},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, {"top_p", "(0, 1]", "1.5"}},
      {[](SamplingParams& p) { p.min_p = -0.25f; }, {"min_p", "[0, 1]", "-0.25"}},
      {[](SamplingParams& p) { p.min_p = 2.0f; }, {"min_p", "[0, 1]", "got 2"}},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; },
       {"repetition_penalty", "> 0", "got 0"}},
      {[](SamplingParams& p) { p.frequency_penalty = 2.5f; },
       {"frequency_penalty", "[-2, 2]", "2.5"}},
      {[](SamplingParams& p) { p.presence_penalty = -3.0f; },
       {"presence_penalty", "[-2, 2]", "-3"}},
      {[](SamplingParams& p) { p.max_new_tokens = 0; }, {"max_new_tokens", ">= 1", "got 0"}},
      {[](SamplingParams& p) { p.logprobs = 21; }, {"logprobs", "[0, 20]", "got 21"}},
      {[](SamplingParams& p) { p.logprobs = -2; }, {"logprobs", "-1", "got -2"}},
      {[](SamplingParams& p) {
         p.stop_token_ids = {3, -4};
       },
       {"stop_token_ids[1]", ">= 0", "got -4"}},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    // throws_error takes an initializer_list; check the fragments one by one.
    for (std::string_view f : c.fragments)
      EXPECT_TRUE(throws_error([&] { infer::validate(p); }, "sampling params", {f}));
  }
  SamplingParams p;
  p.top_p = nan;
  EXPECT_TRUE(throws_error([&] { infer::validate(p); }, "sampling params", {"top_p", "nan"}));
  p = {};
  p.temperature = nan;
  EXPECT_TRUE(throws_error([&] { infer::validate(p); }, "sampling params", {"temperature"}));
  p = {};
  p.stop_token_ids = {7, 100};
  EXPECT_NO_THROW(infer::validate(p));
  EXPECT_NO_THROW(infer::validate(p, 101));
  EXPECT_TRUE(throws_error([&] { infer::validate(p, 100); }, "sampling params",
                           {"stop_token_ids[1]", "vocabulary size 100", "got 100"}));
  p = {};
  p.temperature = 0.0f;  // greedy
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.logprobs = 20;
  p.frequency_penalty = -2.0f;
  EXPECT_NO_THROW(infer::validate(p));  // the ends of every range are allowed
}

GenerationConfig parse(const std::string& text) {
  return GenerationConfig::from_json(json::parse(text), "model/generation_config.json");
}

TEST(GenerationConfig, QwenInstructFileGivesItsSamplingValues) {
  const GenerationConfig c = parse(R"({"bos_token_id": 151643, "pad_token_id": 151643,
      "do_sample": true, "eos_token_id": [151645, 151643], "repetition_penalty": 1.1,
      "temperature": 0.7, "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"})");
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.pad_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  SamplingParams base;
  base.seed = 42;
  base.stop_token_ids = {9};
  const SamplingParams p = infer::defaults_from(c, base);
  EXPECT_FLOAT_EQ(p.temperature, 0.7f);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_FLOAT_EQ(p.top_p, 0.8f);
  EXPECT_EQ(p.min_p, 0.0f);  // absent: transformers' None
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_EQ(p.seed, 42u);  // not a generation_config field: kept from base
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(p.max_new_tokens, base.max_new_tokens);
  // config.json of the same checkpoint says eos_token_id 151645: already in the list.
  const std::vector<int64_t> model_eos = {151645};
  EXPECT_EQ(infer::merge_eos_token_ids(c.eos_token_ids, model_eos),
            (std::vector<int32_t>{151645, 151643}));
}

TEST(GenerationConfig, AbsentTopKTakesTransformersDefaultOfFifty) {
  // Llama 3.1 Instruct writes temperature and top_p only; transformers adds top_k = 50.
  const GenerationConfig c = parse(R"({"bos_token_id": 128000, "do_sample": true,
      "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9})");
  const SamplingParams p = infer::defaults_from(c);
  EXPECT_FLOAT_EQ(p.temperature, 0.6f);
  EXPECT_EQ(p.top_k, 50);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.repetition_penalty, 1.0f);
  EXPECT_FALSE(c.pad_token_id.has_value());
}

TEST(GenerationConfig, DoSampleFalseOrAbsentIsGreedyButKeepsTheRepetitionPenalty) {
  for (const char* text : {R"({"temperature": 0.7, "top_k": 20, "top_p": 0.8, "min_p": 0.1,
            "repetition_penalty": 1.2})",
                           R"({"do_sample": false, "temperature": 0.7, "repetition_penalty": 1.2})",
                           R"({"do_sample": null, "repetition_penalty": 1.2})"}) {
    const SamplingParams p = infer::defaults_from(parse(text));
    EXPECT_EQ(p.temperature, 0.0f) << text;
    EXPECT_EQ(p.top_k, 0) << text;
    EXPECT_EQ(p.top_p, 1.0f) << text;
    EXPECT_EQ(p.min_p, 0.0f) << text;
    EXPECT_FLOAT_EQ(p.repetition_penalty, 1.2f) << text;
  }
  const SamplingParams empty = infer::defaults_from(parse("{}"));
  EXPECT_EQ(empty.temperature, 0.0f);  // transformers' default do_sample is false
  EXPECT_EQ(empty.repetition_penalty, 1.0f);
}

TEST(GenerationConfig, NullTurnsAWarperOffAndTopPZeroIsGreedy) {
  const SamplingParams p = infer::defaults_from(parse(
      R"({"do_sample": true, "temperature": null, "top_k": null, "top_p": null,
          "min_p": 0.05, "repetition_penalty": null, "max_new_tokens": 77})"));
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.repetition_penalty, 1.0f);
  EXPECT_EQ(p.max_new_tokens, 77);
  // top_p 0 keeps the single most likely token (min_tokens_to_keep 1): greedy.
  const SamplingParams g = infer::defaults_from(parse(R"({"do_sample": true, "top_p": 0})"));
  EXPECT_EQ(g.temperature, 0.0f);
  // A temperature written as an integer is a number.
  EXPECT_EQ(infer::defaults_from(parse(R"({"do_sample": true, "temperature": 2})")).temperature,
            2.0f);
}

TEST(GenerationConfig, ValuesTransformersRejectsAreErrors) {
  const auto bad = [](const char* text, std::initializer_list<std::string_view> fragments) {
    return throws_error([&] { infer::defaults_from(parse(text)); }, "generation config", fragments);
  };
  EXPECT_TRUE(bad(R"({"do_sample": true, "temperature": 0})",
                  {"model/generation_config.json", "temperature must be > 0", "do_sample"}));
  EXPECT_TRUE(bad(R"({"do_sample": true, "top_k": -3})", {"top_k", "-3"}));
  EXPECT_TRUE(bad(R"({"do_sample": true, "top_p": 1.5})", {"top_p", "[0, 1]", "1.5"}));
  EXPECT_TRUE(bad(R"({"do_sample": true, "min_p": -0.1})", {"min_p", "-0.1"}));
  EXPECT_TRUE(bad(R"({"repetition_penalty": 0})", {"repetition_penalty", "> 0"}));
  EXPECT_TRUE(bad(R"({"max_new_tokens": 0})", {"max_new_tokens", ">= 1"}));
  // do_sample false: the sampling-only values are not used, so not rejected.
  EXPECT_NO_THROW(infer::defaults_from(parse(R"({"temperature": 0, "top_k": -3})")));
}

TEST(GenerationConfig, WrongTypesNameTheFieldAndTheFile) {
  const auto bad = [](const char* text, std::initializer_list<std::string_view> fragments) {
    return throws_error([&] { parse(text); }, "generation config", fragments);
  };
  EXPECT_TRUE(bad(R"({"temperature": "hot"})",
                  {"model/generation_config.json", "'temperature'", "number", "\"hot\""}));
  EXPECT_TRUE(bad(R"({"top_k": 2.5})", {"'top_k'", "integer", "2.5"}));
  EXPECT_TRUE(bad(R"({"do_sample": 1})", {"'do_sample'", "true or false"}));
  EXPECT_TRUE(bad(R"({"eos_token_id": "2"})", {"'eos_token_id'", "list of integers"}));
  EXPECT_TRUE(bad(R"({"eos_token_id": [1, "x"]})", {"'eos_token_id'", "\"x\""}));
  EXPECT_TRUE(bad(R"([1, 2])", {"expected a JSON object", "array"}));
  // Unknown keys are ignored, as transformers keeps them unused.
  EXPECT_NO_THROW(parse(R"({"transformers_version": "4.45.0", "chat_format": "chatml"})"));
  EXPECT_EQ(parse(R"({"eos_token_id": 2})").eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_TRUE(parse(R"({"eos_token_id": null})").eos_token_ids.empty());
  EXPECT_EQ(parse(R"({"top_k": 40.0})").top_k, 40);  // an integral float is an integer
}

TEST(GenerationConfig, EosUnionKeepsGenerationConfigOrderThenAddsConfigJsonIds) {
  const std::vector<int64_t> gen = {128009, 128001}, model = {128001, 128008, 128009};
  EXPECT_EQ(infer::merge_eos_token_ids(gen, model), (std::vector<int32_t>{128009, 128001, 128008}));
  EXPECT_EQ(infer::merge_eos_token_ids({}, model), (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_TRUE(infer::merge_eos_token_ids({}, {}).empty());
  const std::vector<int64_t> negative = {-1};
  EXPECT_TRUE(throws_error([&] { infer::merge_eos_token_ids(negative, {}); }, "generation config",
                           {"eos_token_id", "-1"}));
  const std::vector<int64_t> huge = {int64_t{1} << 31};
  EXPECT_TRUE(throws_error([&] { infer::merge_eos_token_ids({}, huge); }, "generation config",
                           {"2147483648"}));
}

}  // namespace
}  // namespace microllm::testing

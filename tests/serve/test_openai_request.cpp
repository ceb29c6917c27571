// parse_completion_request: valid bodies of both endpoints become the typed request with
// OpenAI's defaults and meanings (API reference of /v1/chat/completions and
// /v1/completions); every bad body becomes one ApiError with the status, type, param and
// code OpenAI uses, naming what was expected and found.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "microllm/serve/openai_protocol.h"

using namespace microllm::serve;

namespace {

const ProtocolLimits kLimits{{"tiny"}, /*max_n=*/8, /*max_stop=*/4, /*max_top_logprobs=*/20};

CompletionRequest chat(const std::string& body) {
  return parse_completion_request(Endpoint::chat_completions, body, kLimits);
}
CompletionRequest completion(const std::string& body) {
  return parse_completion_request(Endpoint::completions, body, kLimits);
}

// The ApiError `body` gets at `endpoint` (fails the test when it parses).
ApiError error_of(Endpoint endpoint, const std::string& body) {
  try {
    parse_completion_request(endpoint, body, kLimits);
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

const std::string kHello = R"("model": "tiny", "messages": [{"role": "user", "content": "hi"}])";

}  // namespace

TEST(OpenAiRequest, ChatDefaultsAreOpenAis) {
  const CompletionRequest r = chat("{" + kHello + "}");
  EXPECT_EQ(r.endpoint, Endpoint::chat_completions);
  EXPECT_EQ(r.model, "tiny");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FALSE(r.sampling.uses_history());
  EXPECT_FALSE(r.seeded);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.sampling.ignore_eos);
}

TEST(OpenAiRequest, ChatFieldsAreRead) {
  const CompletionRequest r = chat(R"({"model": "tiny", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
       "name": "ann"},
      {"role": "assistant", "content": "ok"}],
    "max_tokens": 9, "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 40,
    "min_p": 0.1, "presence_penalty": -1.5, "frequency_penalty": 2, "repetition_penalty": 1.1,
    "seed": -3, "stop": ["\n\n", "END"], "n": 3, "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 5,
    "user": "someone"})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "ab");  // text parts joined in order
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens wins over the older max_tokens
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.presence_penalty, -1.5f);
  EXPECT_EQ(r.sampling.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.logprobs, 5);
  // logprobs alone: the sampled token's log-probability, no alternatives; null = unset.
  EXPECT_EQ(chat("{" + kHello + R"(, "logprobs": true})").logprobs, 0);
  EXPECT_EQ(chat("{" + kHello + R"(, "logprobs": null, "top_p": null, "stop": null})").logprobs,
            -1);
  // top_k −1 is "off" as in vLLM; a single stop string; integral floats are integers.
  EXPECT_EQ(chat("{" + kHello + R"(, "top_k": -1})").sampling.top_k, 0);
  EXPECT_EQ(chat("{" + kHello + R"(, "stop": "x"})").stop, std::vector<std::string>{"x"});
  EXPECT_EQ(chat("{" + kHello + R"(, "max_tokens": 16.0})").max_tokens, 16);
  // vLLM's `ignore_eos` extension: run to max_tokens through EOS.
  EXPECT_TRUE(chat("{" + kHello + R"(, "ignore_eos": true})").sampling.ignore_eos);
}

TEST(OpenAiRequest, CompletionPromptsAsTextOrIds) {
  CompletionRequest r = completion(R"({"model": "tiny", "prompt": "Once upon", "logprobs": 2,
                                       "max_tokens": 5})");
  EXPECT_EQ(r.endpoint, Endpoint::completions);
  EXPECT_EQ(r.prompt, "Once upon");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.max_tokens, 5);
  r = completion(R"({"model": "tiny", "prompt": [1, 2, 3]})");
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  r = completion(R"({"model": "tiny", "prompt": ["one"]})");
  EXPECT_EQ(r.prompt, "one");
  r = completion(R"({"model": "tiny", "prompt": [[7, 8]]})");
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(completion(R"({"model": "tiny", "prompt": "x", "logprobs": 0})").logprobs, 0);
}

TEST(OpenAiRequest, MalformedBodiesAre400WithoutParam) {
  for (const std::string body : {"", "{", "{\"model\": }", "[1, 2]", "\"text\"", "{} extra",
                                 "{\"model\": \"tiny\", \"messages\": [\xff]}"}) {
    const ApiError e = error_of(Endpoint::chat_completions, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.type, "invalid_request_error") << body;
    EXPECT_TRUE(e.param.empty()) << body;
    EXPECT_FALSE(e.message.empty()) << body;
  }
}

TEST(OpenAiRequest, UnknownModelIs404ModelNotFound) {
  const ApiError e = error_of(Endpoint::completions, R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.param, "model");
  EXPECT_NE(e.message.find("gpt-4"), std::string::npos);
  EXPECT_NE(e.message.find("tiny"), std::string::npos);
}

TEST(OpenAiRequest, EveryBadFieldIsA400NamingIt) {
  struct Case {
    Endpoint endpoint;
    std::string body;
    std::string param;    // the field the error names
    std::string mention;  // a part of the message
  };
  const Endpoint C = Endpoint::chat_completions, P = Endpoint::completions;
  const std::string h = kHello + ", ";
  const std::vector<Case> cases = {
      {C, R"({"messages": [{"role": "user", "content": "x"}]})", "model", "required"},
      {C, R"({"model": 3, "messages": []})", "model", "string"},
      {C, R"({"model": "tiny"})", "messages", "required"},
      {C, R"({"model": "tiny", "messages": []})", "messages", "empty"},
      {C, R"({"model": "tiny", "messages": "hi"})", "messages", "a string"},
      {C, R"({"model": "tiny", "messages": [3]})", "messages[0]", "object"},
      {C, R"({"model": "tiny", "messages": [{"content": "x"}]})", "messages[0].role", "required"},
      {C, R"({"model": "tiny", "messages": [{"role": "robot", "content": "x"}]})",
       "messages[0].role", "robot"},
      {C, R"({"model": "tiny", "messages": [{"role": "tool", "content": "x"}]})",
       "messages[0].role", "tool"},
      {C, R"({"model": "tiny", "messages": [{"role": "user"}]})", "messages[0].content",
       "required"},
      {C, R"({"model": "tiny", "messages": [{"role": "user", "content": 5}]})",
       "messages[0].content", "an integer"},
      {C,
       R"({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type", "image_url"},
      {C, R"({"model": "tiny", "messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
       "messages[0].tool_calls", "not supported"},
      {C, "{" + h + R"("max_tokens": 0})", "max_tokens", "[1, "},
      {C, "{" + h + R"("max_tokens": 2.5})", "max_tokens", "integer"},
      {C, "{" + h + R"("max_completion_tokens": "9"})", "max_completion_tokens", "a string"},
      {C, "{" + h + R"("temperature": -0.1})", "temperature", "[0, 2]"},
      {C, "{" + h + R"("temperature": 2.5})", "temperature", "[0, 2]"},
      {C, "{" + h + R"("temperature": "hot"})", "temperature", "number"},
      {C, "{" + h + R"("top_p": 0})", "top_p", "(0, 1]"},
      {C, "{" + h + R"("top_p": 1.5})", "top_p", "(0, 1]"},
      {C, "{" + h + R"("top_k": -2})", "top_k", "[-1, "},
      {C, "{" + h + R"("min_p": 1.5})", "min_p", "[0, 1]"},
      {C, "{" + h + R"("presence_penalty": 3})", "presence_penalty", "[-2, 2]"},
      {C, "{" + h + R"("frequency_penalty": -2.5})", "frequency_penalty", "[-2, 2]"},
      {C, "{" + h + R"("repetition_penalty": 0})", "repetition_penalty", "(0, 2]"},
      {C, "{" + h + R"("seed": 1.5})", "seed", "integer"},
      {C, "{" + h + R"("seed": 18446744073709551615})", "seed", "must be in"},
      {C, "{" + h + R"("stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4"},
      {C, "{" + h + R"("stop": [""]})", "stop", "empty"},
      {C, "{" + h + R"("stop": [1]})", "stop", "an integer"},
      {C, "{" + h + R"("stop": {"a": 1}})", "stop", "an object"},
      {C, "{" + h + R"("n": 0})", "n", "[1, 8]"},
      {C, "{" + h + R"("n": 9})", "n", "[1, 8]"},
      {C, "{" + h + R"("stream": "yes"})", "stream", "boolean"},
      {P, R"({"model": "tiny", "prompt": "x", "ignore_eos": 1})", "ignore_eos", "boolean"},
      {C, "{" + h + R"("stream_options": {"include_usage": true}})", "stream_options",
       "only allowed"},
      {C, "{" + h + R"("stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage", "boolean"},
      {C, "{" + h + R"("stream": true, "stream_options": {"x": true}})", "stream_options.x",
       "Unrecognized"},
      {C, "{" + h + R"("logprobs": 3})", "logprobs", "boolean"},
      {C, "{" + h + R"("top_logprobs": 3})", "top_logprobs", "requires 'logprobs'"},
      {C, "{" + h + R"("logprobs": true, "top_logprobs": 21})", "top_logprobs", "[0, 20]"},
      {C, "{" + h + R"("tools": []})", "tools", "not supported"},
      {C, "{" + h + R"("logit_bias": {"1": 5}})", "logit_bias", "not supported"},
      {C, "{" + h + R"("temprature": 1})", "temprature", "Unrecognized request argument"},
      {C, "{" + h + R"("prompt": "x"})", "prompt", "Unrecognized"},  // completions only
      {P, R"({"model": "tiny"})", "prompt", "required"},
      {P, R"({"model": "tiny", "prompt": 5})", "prompt", "an integer"},
      {P, R"({"model": "tiny", "prompt": []})", "prompt", "empty"},
      {P, R"({"model": "tiny", "prompt": ["a", "b"]})", "prompt", "one prompt"},
      {P, R"({"model": "tiny", "prompt": [1, -2]})", "prompt", "index 1"},
      {P, R"({"model": "tiny", "prompt": [1, "a"]})", "prompt", "token ids"},
      {P, R"({"model": "tiny", "prompt": "x", "logprobs": true})", "logprobs", "integer"},
      {P, R"({"model": "tiny", "prompt": "x", "logprobs": 21})", "logprobs", "[0, 20]"},
      {P, R"({"model": "tiny", "prompt": "x", "echo": true})", "echo", "not supported"},
      {P, R"({"model": "tiny", "prompt": "x", "messages": []})", "messages", "Unrecognized"},
      {P, R"({"model": "tiny", "prompt": "x", "max_completion_tokens": 3})",
       "max_completion_tokens", "Unrecognized"},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(c.endpoint, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_NE(e.message.find(c.mention), std::string::npos)
        << c.body << ": '" << e.message << "' lacks '" << c.mention << "'";
  }
}

TEST(OpenAiRequest, ErrorBodyIsOpenAisShape) {
  ApiError e;
  e.status = 400;
  e.message = "'n' must be in [1, 8], found 0";
  e.param = "n";
  const nlohmann::json body = nlohmann::json::parse(e.body());
  ASSERT_TRUE(body.contains("error"));
  const nlohmann::json& err = body["error"];
  EXPECT_EQ(err["message"], e.message);
  EXPECT_EQ(err["type"], "invalid_request_error");
  EXPECT_EQ(err["param"], "n");
  EXPECT_TRUE(err["code"].is_null());  // empty → null, as OpenAI sends it
  EXPECT_EQ(err.size(), 4u);
  // Invalid UTF-8 quoted from a request never makes the body itself invalid.
  e.message = "bad \xff byte";
  EXPECT_NO_THROW(nlohmann::json::parse(ApiError(e).body()));
}

TEST(OpenAiRequest, OmittedSamplingFieldsKeepTheModelDefaults) {
  microllm::infer::SamplingParams defaults;  // as a generation_config.json may set them
  defaults.temperature = 0.7f;
  defaults.top_p = 0.8f;
  defaults.top_k = 20;
  defaults.repetition_penalty = 1.05f;
  const CompletionRequest kept =
      parse_completion_request(Endpoint::chat_completions, "{" + kHello + "}", kLimits, defaults);
  EXPECT_EQ(kept.sampling.temperature, 0.7f);
  EXPECT_EQ(kept.sampling.top_p, 0.8f);
  EXPECT_EQ(kept.sampling.top_k, 20);
  EXPECT_EQ(kept.sampling.repetition_penalty, 1.05f);
  const CompletionRequest given = parse_completion_request(
      Endpoint::chat_completions,
      "{" + kHello + R"(, "temperature": 0, "top_k": null, "top_p": 1, "repetition_penalty": 1})",
      kLimits, defaults);
  EXPECT_EQ(given.sampling.temperature, 0.0f);
  EXPECT_EQ(given.sampling.top_k, 20);  // null = not given
  EXPECT_EQ(given.sampling.top_p, 1.0f);
  EXPECT_EQ(given.sampling.repetition_penalty, 1.0f);
}

// Bodies the request fuzzer (tests/fuzz/fuzz_openai_request.cpp) and its seeds exposed.
TEST(OpenAiRequest, FuzzedBodiesAre400s) {
  const Endpoint C = Endpoint::chat_completions, P = Endpoint::completions;
  // A number beyond a double's range is nlohmann's out_of_range, not a parse_error: still
  // the malformed-JSON 400, not another exception.
  ApiError e = error_of(P, R"({"model": "tiny", "prompt": "x", "max_tokens": 1e400})");
  EXPECT_EQ(e.status, 400);
  EXPECT_TRUE(e.param.empty());
  EXPECT_NE(e.message.find("could not parse"), std::string::npos) << e.message;
  // Above an open lower bound as a double but 0 as the float the engine takes: out of range.
  EXPECT_EQ(error_of(C, "{" + kHello + R"(, "top_p": 1e-300})").param, "top_p");
  EXPECT_EQ(error_of(C, "{" + kHello + R"(, "repetition_penalty": 4.9e-324})").param,
            "repetition_penalty");
  EXPECT_GT(chat("{" + kHello + R"(, "top_p": 1e-30})").sampling.top_p, 0.0f);
  // A deeply nested value where a scalar belongs: a 400 that does not quote it (dumping it
  // recursed once per level and overflowed the stack).
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  e = error_of(C, "{" + kHello + R"(, "temperature": )" + deep + "}");
  EXPECT_EQ(e.param, "temperature");
  EXPECT_NE(e.message.find("an array [...]"), std::string::npos) << e.message;
  EXPECT_EQ(error_of(P, R"({"model": "tiny", "prompt": [1, )" + deep + "]}").param, "prompt");
}

// Response bodies and SSE events against the shapes of OpenAI's API reference: object
// names, the choice fields, null where OpenAI sends null, usage totals, chat logprobs with
// bytes, completion logprobs with character offsets, the stream's usage and [DONE] events.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "microllm/serve/openai_protocol.h"

using namespace microllm::serve;
using nlohmann::json;

namespace {

const ResponseHeader kHeader{"chatcmpl-7", 1700000000, "tiny"};

// The JSON of one SSE event "data: {…}\n\n".
json event_json(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n") << event;
  return json::parse(event.substr(6, event.size() - 8));
}

ChoiceOutput choice(int64_t index, std::string text, std::optional<std::string> finish) {
  ChoiceOutput c;
  c.index = index;
  c.text = std::move(text);
  c.finish_reason = std::move(finish);
  return c;
}

}  // namespace

TEST(OpenAiResponse, ChatCompletionBody) {
  const json r = json::parse(
      response_json(Endpoint::chat_completions, kHeader,
                    {choice(0, "Hello", "stop"), choice(1, "Hi there", "length")}, Usage{12, 7}));
  EXPECT_EQ(r["id"], "chatcmpl-7");
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["created"], 1700000000);
  EXPECT_EQ(r["model"], "tiny");
  ASSERT_EQ(r["choices"].size(), 2u);
  const json& c1 = r["choices"][1];
  EXPECT_EQ(c1["index"], 1);
  EXPECT_EQ(c1["message"], (json{{"role", "assistant"}, {"content", "Hi there"}}));
  EXPECT_TRUE(c1["logprobs"].is_null());
  EXPECT_EQ(c1["finish_reason"], "length");
  EXPECT_EQ(r["usage"], (json{{"prompt_tokens", 12},
                              {"completion_tokens", 7},
                              {"total_tokens", 19},
                              {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

TEST(OpenAiResponse, ChatLogprobsCarryBytesAndAlternatives) {
  ChoiceOutput c = choice(0, "é!", "stop");
  c.with_logprobs = true;
  c.logprobs = {{"\xc3\xa9", -0.25, {{"\xc3\xa9", -0.25}, {"e", -1.5}}}, {"!", -0.5, {}}};
  const json r = json::parse(response_json(Endpoint::chat_completions, kHeader, {c}, Usage{1, 2}));
  const json& lp = r["choices"][0]["logprobs"];
  EXPECT_TRUE(lp["refusal"].is_null());
  ASSERT_EQ(lp["content"].size(), 2u);
  const json& first = lp["content"][0];
  EXPECT_EQ(first["token"], "é");
  EXPECT_EQ(first["logprob"], -0.25);
  EXPECT_EQ(first["bytes"], (json{195, 169}));
  ASSERT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["top_logprobs"][1],
            (json{{"token", "e"}, {"logprob", -1.5}, {"bytes", json{101}}}));
  EXPECT_EQ(lp["content"][1]["top_logprobs"], json::array());
  // A token that is half a character: the bytes are exact, the text gets U+FFFD.
  c.logprobs = {{"\xc3", -0.1, {}}};
  const json half =
      json::parse(response_json(Endpoint::chat_completions, kHeader, {c}, Usage{1, 1}));
  EXPECT_EQ(half["choices"][0]["logprobs"]["content"][0]["bytes"], (json{195}));
  EXPECT_EQ(half["choices"][0]["logprobs"]["content"][0]["token"], "\xef\xbf\xbd");
}

TEST(OpenAiResponse, CompletionBodyAndLogprobs) {
  ChoiceOutput c = choice(0, " a bé", "length");
  c.with_logprobs = true;
  c.text_offset = 3;  // a later chunk of a streamed choice
  c.logprobs = {{" a", -0.5, {{" a", -0.5}, {" the", -1.0}}}, {" bé", -2.0, {}}};
  const json r =
      json::parse(response_json(Endpoint::completions, {"cmpl-1", 5, "tiny"}, {c}, Usage{4, 2}));
  EXPECT_EQ(r["object"], "text_completion");
  const json& ch = r["choices"][0];
  EXPECT_EQ(ch["text"], " a bé");
  EXPECT_EQ(ch["finish_reason"], "length");
  const json& lp = ch["logprobs"];
  EXPECT_EQ(lp["tokens"], (json{" a", " bé"}));
  EXPECT_EQ(lp["token_logprobs"], (json{-0.5, -2.0}));
  EXPECT_EQ(lp["top_logprobs"][0], (json{{" a", -0.5}, {" the", -1.0}}));
  EXPECT_EQ(lp["top_logprobs"][1], json::object());
  EXPECT_EQ(lp["text_offset"], (json{3, 5}));  // characters, not bytes
  EXPECT_EQ(r["usage"]["total_tokens"], 6);
}

TEST(OpenAiResponse, ChatStreamChunks) {
  // First chunk: the role (and maybe text); middle chunks: content; last: finish_reason.
  json first = event_json(
      chunk_event(Endpoint::chat_completions, kHeader, choice(2, "", std::nullopt), true, false));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["id"], "chatcmpl-7");
  EXPECT_EQ(first["created"], 1700000000);
  EXPECT_FALSE(first.contains("usage"));
  ASSERT_EQ(first["choices"].size(), 1u);
  EXPECT_EQ(first["choices"][0]["index"], 2);
  EXPECT_EQ(first["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(first["choices"][0]["logprobs"].is_null());
  const json middle = event_json(
      chunk_event(Endpoint::chat_completions, kHeader, choice(2, "lo", std::nullopt), false, true));
  EXPECT_EQ(middle["choices"][0]["delta"], (json{{"content", "lo"}}));
  EXPECT_TRUE(middle.contains("usage"));
  EXPECT_TRUE(middle["usage"].is_null());  // include_usage: null on every chunk but the last
  const json last = event_json(
      chunk_event(Endpoint::chat_completions, kHeader, choice(2, "", "stop"), false, false));
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiResponse, CompletionStreamChunkUsageErrorAndDone) {
  const json chunk = event_json(chunk_event(Endpoint::completions, {"cmpl-1", 5, "tiny"},
                                            choice(0, "ab", std::nullopt), true, false));
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["choices"][0]["text"], "ab");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  const json usage = event_json(usage_event(Endpoint::chat_completions, kHeader, Usage{3, 4, 2}));
  EXPECT_EQ(usage["object"], "chat.completion.chunk");
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  ApiError e;
  e.status = 500;
  e.type = "server_error";
  e.message = "the engine stopped";
  const json err = event_json(error_event(e));
  EXPECT_EQ(err["error"]["type"], "server_error");
  EXPECT_EQ(err["error"]["message"], "the engine stopped");
  EXPECT_EQ(done_event(), "data: [DONE]\n\n");
}

// Response bodies and SSE events in OpenAI's shapes (see openai_protocol.h). Field names
// and nesting follow OpenAI's API reference: chat.completion / chat.completion.chunk with
// message / delta and logprobs.content[{token, logprob, bytes, top_logprobs}];
// text_completion with text and logprobs {tokens, token_logprobs, top_logprobs,
// text_offset}.
#include <nlohmann/json.hpp>

#include "microllm/serve/openai_protocol.h"

namespace microllm::serve {
namespace {

using nlohmann::json;

// Text that may hold incomplete UTF-8 (a token's bytes) is dumped with U+FFFD in its place.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json null_or(const std::optional<std::string>& s) { return s ? json(*s) : json(); }

json bytes_of(const std::string& s) {
  json out = json::array();
  for (const unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

json chat_logprobs(const ChoiceOutput& c) {
  if (!c.with_logprobs) return json();
  json content = json::array();
  for (const TokenLogprob& t : c.logprobs) {
    json top = json::array();
    for (const auto& [token, logprob] : t.top)
      top.push_back({{"token", token}, {"logprob", logprob}, {"bytes", bytes_of(token)}});
    content.push_back({{"token", t.token},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(t.token)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", json()}};
}

json completion_logprobs(const ChoiceOutput& c) {
  if (!c.with_logprobs) return json();
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  int64_t offset = c.text_offset;
  for (const TokenLogprob& t : c.logprobs) {
    tokens.push_back(t.token);
    token_logprobs.push_back(t.logprob);
    json alternatives = json::object();
    for (const auto& [token, logprob] : t.top) alternatives[token] = logprob;
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += utf8_characters(t.token);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json envelope(Endpoint endpoint, const ResponseHeader& h, bool chunk) {
  const bool chat = endpoint == Endpoint::chat_completions;
  return {
      {"id", h.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", h.created},
      {"model", h.model}};
}

std::string event(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace

int64_t utf8_characters(std::string_view text) {
  int64_t n = 0;
  for (const unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::string response_json(Endpoint endpoint, const ResponseHeader& header,
                          const std::vector<ChoiceOutput>& choices, const Usage& usage) {
  json body = envelope(endpoint, header, false);
  json list = json::array();
  for (const ChoiceOutput& c : choices) {
    if (endpoint == Endpoint::chat_completions)
      list.push_back({{"index", c.index},
                      {"message", {{"role", "assistant"}, {"content", c.text}}},
                      {"logprobs", chat_logprobs(c)},
                      {"finish_reason", null_or(c.finish_reason)}});
    else
      list.push_back({{"index", c.index},
                      {"text", c.text},
                      {"logprobs", completion_logprobs(c)},
                      {"finish_reason", null_or(c.finish_reason)}});
  }
  body["choices"] = list;
  body["usage"] = usage_json(usage);
  return dump(body);
}

std::string chunk_event(Endpoint endpoint, const ResponseHeader& header, const ChoiceOutput& c,
                        bool first, bool include_usage) {
  json body = envelope(endpoint, header, true);
  json choice;
  if (endpoint == Endpoint::chat_completions) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!c.text.empty() || !c.finish_reason) delta["content"] = c.text;
    choice = {{"index", c.index},
              {"delta", delta},
              {"logprobs", chat_logprobs(c)},
              {"finish_reason", null_or(c.finish_reason)}};
  } else {
    choice = {{"index", c.index},
              {"text", c.text},
              {"logprobs", completion_logprobs(c)},
              {"finish_reason", null_or(c.finish_reason)}};
  }
  body["choices"] = json::array({choice});
  if (include_usage) body["usage"] = json();
  return event(body);
}

std::string usage_event(Endpoint endpoint, const ResponseHeader& header, const Usage& usage) {
  json body = envelope(endpoint, header, true);
  body["choices"] = json::array();
  body["usage"] = usage_json(usage);
  return event(body);
}

std::string error_event(const ApiError& error) { return "data: " + error.body() + "\n\n"; }

std::string done_event() { return "data: [DONE]\n\n"; }

}  // namespace microllm::serve

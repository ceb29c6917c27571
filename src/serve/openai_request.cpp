// parse_completion_request (see openai_protocol.h): the body is read field by field through
// a Body that remembers which keys were read, so a key that no reader took is reported.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "microllm/serve/openai_protocol.h"

namespace microllm::serve {
namespace {

using nlohmann::json;

// "a string", "an integer", … as a message names what it found.
std::string kind_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

// The value as a message quotes it, at most 40 bytes. Arrays and objects are not dumped:
// dump() recurses once per level, and a body of nested brackets would overflow the stack.
std::string shown(const json& v) {
  if (v.is_array()) return v.empty() ? "[]" : "[...]";
  if (v.is_object()) return v.empty() ? "{}" : "{...}";
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

bool is_integral(const json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15;
}

int64_t as_integer(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? std::numeric_limits<int64_t>::max()
               : static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return static_cast<int64_t>(v.get<double>());
}

// Fields OpenAI defines that microllm does not implement: a clear 400, not silence.
const std::set<std::string>& unsupported_fields() {
  static const std::set<std::string> names = {"tools",
                                              "tool_choice",
                                              "functions",
                                              "function_call",
                                              "logit_bias",
                                              "response_format",
                                              "parallel_tool_calls",
                                              "audio",
                                              "modalities",
                                              "prediction",
                                              "service_tier",
                                              "store",
                                              "metadata",
                                              "reasoning_effort",
                                              "web_search_options",
                                              "echo",
                                              "best_of",
                                              "suffix"};
  return names;
}

// The request object, read key by key; absent and null keys read as nullptr.
class Body {
 public:
  explicit Body(const json& object) : object_(object) {}

  const json* get(const std::string& key) {
    read_.insert(key);
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<double> number(const std::string& key, double lo, double hi, bool lo_open) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number())
      reject(key, "'" + key + "' must be a number, found " + kind_of(*v) + " " + shown(*v));
    const double d = v->get<double>();
    // The engine takes a float: above an open bound but rounding to it (1e-300) is out too.
    if (!std::isfinite(d) || d > hi || (lo_open ? static_cast<float>(d) <= lo : d < lo))
      reject(key, "'" + key + "' must be in " + (lo_open ? "(" : "[") + fmt(lo) + ", " + fmt(hi) +
                      "], found " + shown(*v));
    return d;
  }

  std::optional<int64_t> integer(const std::string& key, int64_t lo, int64_t hi) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!is_integral(*v))
      reject(key, "'" + key + "' must be an integer, found " + kind_of(*v) + " " + shown(*v));
    const int64_t i = as_integer(*v);
    if (i < lo || i > hi || (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(hi)))
      reject(key, "'" + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "], found " + shown(*v));
    return i;
  }

  std::optional<bool> boolean(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean())
      reject(key, "'" + key + "' must be a boolean, found " + kind_of(*v) + " " + shown(*v));
    return v->get<bool>();
  }

  // Every key no reader took: an unsupported OpenAI field, or an unknown one.
  void reject_unread(const std::set<std::string>& ignored) const {
    for (const auto& [key, value] : object_.items()) {
      if (read_.count(key) || ignored.count(key)) continue;
      if (unsupported_fields().count(key))
        reject(key, "'" + key + "' is not supported by this server");
      reject(key, "Unrecognized request argument supplied: " + key);
    }
  }

 private:
  static std::string fmt(double d) {
    std::string s = std::to_string(d);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }

  const json& object_;
  std::set<std::string> read_;
};

// A message's content: a string, or an array of {"type": "text", "text": …} parts joined.
std::string message_content(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    reject(param,
           "'" + param + "' must be a string or an array of text parts, found " + kind_of(content));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string where = param + "[" + std::to_string(i) + "]";
    if (!part.is_object())
      reject(where, "'" + where + "' must be an object, found " + kind_of(part));
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      reject(where + ".type", "'" + where + ".type' must be a string");
    if (type->get<std::string>() != "text")
      reject(where + ".type", "content parts of type '" + type->get<std::string>() +
                                  "' are not supported by this server (only 'text')");
    const auto t = part.find("text");
    if (t == part.end() || !t->is_string())
      reject(where + ".text", "'" + where + ".text' must be a string");
    text += t->get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(Body& body) {
  const json* v = body.get("messages");
  if (v == nullptr) reject("messages", "'messages' is required");
  if (!v->is_array() || v->empty())
    reject("messages", "'messages' must be a non-empty array, found " +
                           (v->is_array() ? std::string("an empty array") : kind_of(*v)));
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) reject(where, "'" + where + "' must be an object, found " + kind_of(m));
    ChatMessage message;
    for (const auto& [key, value] : m.items()) {
      if (key == "role") {
        if (!value.is_string()) reject(where + ".role", "'" + where + ".role' must be a string");
        message.role = value.get<std::string>();
      } else if (key == "content") {
        if (!value.is_null()) message.content = message_content(value, where + ".content");
      } else if (key != "name") {
        reject(where + "." + key, "'" + where + "." + key + "' is not supported by this server");
      }
    }
    static const std::set<std::string> roles = {"system", "developer", "user", "assistant"};
    if (message.role.empty()) reject(where + ".role", "'" + where + ".role' is required");
    if (!roles.count(message.role))
      reject(where + ".role", "'" + where +
                                  ".role' must be system, developer, user or assistant, " +
                                  "found '" + message.role + "'");
    if (!m.contains("content") || m["content"].is_null())
      reject(where + ".content", "'" + where + ".content' is required");
    messages.push_back(std::move(message));
  }
  return messages;
}

std::vector<int32_t> token_ids(const json& array, const std::string& param) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < array.size(); ++i) {
    const json& id = array[i];
    if (!is_integral(id) || as_integer(id) < 0 || as_integer(id) > INT32_MAX)
      reject(param, "'" + param + "' token ids must be integers in [0, 2147483647], found " +
                        shown(id) + " at index " + std::to_string(i));
    ids.push_back(static_cast<int32_t>(as_integer(id)));
  }
  return ids;
}

// prompt: a string, token ids, or a one-element array of either.
void parse_prompt(Body& body, CompletionRequest& r) {
  const json* v = body.get("prompt");
  if (v == nullptr) reject("prompt", "'prompt' is required");
  const json* p = v;
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array()))
    p = &(*v)[0];
  else if (v->is_array() && !v->empty() && ((*v)[0].is_string() || (*v)[0].is_array()))
    reject("prompt", "one prompt per request is supported, found an array of " +
                         std::to_string(v->size()) + " prompts");
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    return;
  }
  if (!p->is_array())
    reject("prompt", "'prompt' must be a string or an array of token ids, found " + kind_of(*p));
  if (p->empty()) reject("prompt", "'prompt' must not be an empty array");
  r.prompt_ids = token_ids(*p, "prompt");
  r.prompt_is_ids = true;
}

std::vector<std::string> parse_stop(Body& body, int64_t max_stop) {
  const json* v = body.get("stop");
  if (v == nullptr) return {};
  std::vector<std::string> stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) reject("stop", "'stop' must hold strings, found " + kind_of(s));
      stop.push_back(s.get<std::string>());
    }
  } else {
    reject("stop", "'stop' must be a string or an array of strings, found " + kind_of(*v));
  }
  if (static_cast<int64_t>(stop.size()) > max_stop)
    reject("stop", "'stop' holds at most " + std::to_string(max_stop) + " strings, found " +
                       std::to_string(stop.size()));
  for (const std::string& s : stop)
    if (s.empty()) reject("stop", "'stop' strings must not be empty");
  return stop;
}

void parse_stream(Body& body, CompletionRequest& r) {
  r.stream = body.boolean("stream").value_or(false);
  const json* options = body.get("stream_options");
  if (options == nullptr) return;
  if (!r.stream) reject("stream_options", "'stream_options' is only allowed when 'stream' is true");
  if (!options->is_object())
    reject("stream_options", "'stream_options' must be an object, found " + kind_of(*options));
  for (const auto& [key, value] : options->items()) {
    if (key != "include_usage")
      reject("stream_options." + key,
             "Unrecognized request argument supplied: stream_options." + key);
    if (!value.is_null() && !value.is_boolean())
      reject("stream_options.include_usage",
             "'stream_options.include_usage' must be a boolean, found " + kind_of(value));
    r.include_usage = value.is_boolean() && value.get<bool>();
  }
}

void parse_logprobs(Body& body, CompletionRequest& r, const ProtocolLimits& limits) {
  const int64_t top = limits.max_top_logprobs;
  if (r.endpoint == Endpoint::completions) {
    if (const auto n = body.integer("logprobs", 0, top)) r.logprobs = static_cast<int32_t>(*n);
    return;
  }
  const bool wanted = body.boolean("logprobs").value_or(false);
  const std::optional<int64_t> n = body.integer("top_logprobs", 0, top);
  if (n && !wanted) reject("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  if (wanted) r.logprobs = static_cast<int32_t>(n.value_or(0));
}

}  // namespace

CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view text,
                                           const ProtocolLimits& limits,
                                           const infer::SamplingParams& defaults) {
  json document;
  try {
    document = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // parse_error; out_of_range for a number like 1e400
    reject("", std::string("We could not parse the JSON body of your request: ") + e.what());
  }
  if (!document.is_object())
    reject("", "the request body must be a JSON object, found " + kind_of(document));
  Body body(document);
  CompletionRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::chat_completions;

  const json* model = body.get("model");
  if (model == nullptr) reject("model", "'model' is required");
  if (!model->is_string()) reject("model", "'model' must be a string, found " + kind_of(*model));
  r.model = model->get<std::string>();
  const auto& names = limits.model_names;
  if (std::find(names.begin(), names.end(), r.model) == names.end()) {
    ApiError e;
    e.status = 404;
    e.param = "model";
    e.code = "model_not_found";
    e.message = "The model '" + r.model + "' does not exist; this server serves " +
                (names.empty() ? std::string("no model") : "'" + names.front() + "'");
    throw ApiException(std::move(e));
  }

  if (chat)
    r.messages = parse_messages(body);
  else
    parse_prompt(body, r);

  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  const std::optional<int64_t> max_tokens = body.integer("max_tokens", 1, kMaxInt);
  const std::optional<int64_t> max_completion =
      chat ? body.integer("max_completion_tokens", 1, kMaxInt) : std::nullopt;
  r.max_tokens = max_completion ? max_completion : max_tokens;  // the newer name wins

  infer::SamplingParams& s = r.sampling;
  s = defaults;
  const auto real = [&](const char* key, double lo, double hi, bool lo_open, float fallback) {
    const std::optional<double> v = body.number(key, lo, hi, lo_open);
    return v ? static_cast<float>(*v) : fallback;
  };
  s.temperature = real("temperature", 0.0, 2.0, false, s.temperature);
  s.top_p = real("top_p", 0.0, 1.0, true, s.top_p);
  if (const auto k = body.integer("top_k", -1, kMaxInt))
    s.top_k = static_cast<int32_t>(std::max<int64_t>(0, *k));
  s.min_p = real("min_p", 0.0, 1.0, false, s.min_p);
  s.presence_penalty = real("presence_penalty", -2.0, 2.0, false, s.presence_penalty);
  s.frequency_penalty = real("frequency_penalty", -2.0, 2.0, false, s.frequency_penalty);
  s.repetition_penalty = real("repetition_penalty", 0.0, 2.0, true, s.repetition_penalty);
  if (const auto seed = body.integer("seed", std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
    r.seeded = true;
  }
  s.ignore_eos = body.boolean("ignore_eos").value_or(false);  // vLLM's extension
  r.stop = parse_stop(body, limits.max_stop);
  r.n = body.integer("n", 1, limits.max_n).value_or(1);
  parse_stream(body, r);
  parse_logprobs(body, r, limits);
  body.reject_unread({"user"});
  return r;
}

}  // namespace microllm::serve

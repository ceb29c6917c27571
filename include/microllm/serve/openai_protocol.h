// The OpenAI-compatible request side of `microllm serve`: a JSON body → a typed request, or
// one ApiError (HTTP status + OpenAI's {"error": {"message", "type", "param", "code"}}
// body) naming the first bad field, raised before anything is streamed.
//
// What is checked here is what the body alone decides: JSON syntax, the body is an object,
// every known field has its type and range, the model is one this server serves. What needs
// the tokenizer or the engine (the prompt's length against the context, the chat template)
// is checked by the handler, with the same ApiError. Fields OpenAI defines that microllm
// does not implement (tools, logit_bias, response_format, echo, best_of, suffix, …) are a
// 400 naming the field, never silently ignored; `user` is accepted and ignored; other
// unknown fields are a 400 too ("Unrecognized request argument supplied", as OpenAI says).
// References: OpenAI's API reference for /v1/chat/completions and /v1/completions (field
// names, types, ranges, defaults) and its error object.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "microllm/infer/sampling_params.h"

namespace microllm::serve {

// An error as OpenAI returns it. `param` and `code` are null in the body when empty.
struct ApiError {
  int status = 400;                            // HTTP status: 400, 404, 408, 413, 431, 500, 503
  std::string message;                         // what was expected, what was found, where
  std::string type = "invalid_request_error";  // or "not_found_error", "server_error"
  std::string param;                           // the offending field ("messages[1].content")
  std::string code;                            // e.g. "model_not_found", "context_length_exceeded"

  // {"error": {"message": …, "type": …, "param": … | null, "code": … | null}}
  std::string body() const;

  // A 400 invalid_request_error naming `param` (empty: the whole body).
  static ApiError invalid(std::string param, std::string message, std::string code = "");
  // An error of the server, not the request: 500 (the engine failed), 503 (loading or
  // stopped), 408 (the request ran past the server's timeout, type "timeout_error").
  static ApiError server(int status, std::string message);
};

// Thrown by the parser (and the handlers) for a request that gets an error response.
class ApiException : public std::runtime_error {
 public:
  explicit ApiException(ApiError error)
      : std::runtime_error(error.message), error_(std::move(error)) {}
  const ApiError& error() const { return error_; }

 private:
  ApiError error_;
};

// Throws ApiException(ApiError::invalid(param, message, code)).
[[noreturn]] void reject(std::string param, std::string message, std::string code = "");

enum class Endpoint { chat_completions, completions };

// One chat message; `content` is the text (an array of text parts is joined in order).
struct ChatMessage {
  std::string role;  // system, developer, user or assistant
  std::string content;
};

// What the server serves and accepts.
struct ProtocolLimits {
  std::vector<std::string> model_names;  // `model` must be one of these
  int64_t max_n = 16;                    // n ∈ [1, max_n]
  int64_t max_stop = 4;                  // stop strings, OpenAI's limit
  int32_t max_top_logprobs = infer::kMaxLogprobs;
};

// A parsed, range-checked request of either endpoint.
struct CompletionRequest {
  Endpoint endpoint = Endpoint::chat_completions;
  std::string model;
  std::vector<ChatMessage> messages;  // chat: at least one
  std::string prompt;                 // completions: the text, when given as a string
  std::vector<int32_t> prompt_ids;    // completions: the ids, when given as token ids
  bool prompt_is_ids = false;
  // Generated tokens at most; unset = up to the context (the handler decides).
  std::optional<int64_t> max_tokens;
  // Sampling as the engine takes it; its max_new_tokens and logprobs are set by the handler
  // from max_tokens and the context, and from `logprobs` below; unset fields keep the
  // defaults given to the parser.
  infer::SamplingParams sampling;
  bool seeded = false;            // `seed` was given (else the handler draws one)
  std::vector<std::string> stop;  // ≤ max_stop non-empty strings
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Chat: `logprobs` true → the sampled token's log-probability, plus `top_logprobs` (0…20)
  // alternatives. Completions: `logprobs` N (0…20) → sampled + top N. −1 = none.
  int32_t logprobs = -1;
};

// Parses and validates `body` for `endpoint`. Sampling fields the body leaves out (or
// null) keep their value in `defaults` (the model folder's generation_config.json; the
// default SamplingParams are OpenAI's defaults). Throws ApiException with the first problem.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body,
                                           const ProtocolLimits& limits,
                                           const infer::SamplingParams& defaults = {});

// ---- responses (src/serve/openai_response.cpp) --------------------------------------------
// JSON text in OpenAI's shapes: a whole response, or the SSE events of a stream. Every chunk
// of one response carries the same id, created and model; finish_reason is null until a
// choice's last chunk; with include_usage every chunk has "usage": null and a final chunk
// with "choices": [] carries the usage.

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache served (prompt_tokens_details)
};

// One generated token's log-probability and, when asked, its alternatives.
struct TokenLogprob {
  std::string token;  // the token's text (its bytes may be an incomplete UTF-8 character)
  double logprob = 0.0;
  std::vector<std::pair<std::string, double>> top;  // most likely first
};

// One choice of a response, or the part of it one chunk carries.
struct ChoiceOutput {
  int64_t index = 0;
  std::string text;                          // the whole text, or this chunk's delta
  std::optional<std::string> finish_reason;  // "stop", "length"; unset = null
  bool with_logprobs = false;                // the request asked for logprobs
  std::vector<TokenLogprob> logprobs;        // the tokens of `text`
  int64_t text_offset = 0;  // characters of the choice's text before `text` (completions)
};

// Who a response belongs to: "chatcmpl-…" or "cmpl-…" ids, Unix seconds, the model name.
struct ResponseHeader {
  std::string id;
  int64_t created = 0;
  std::string model;
};

// Unicode characters of UTF-8 text (bytes that do not continue a character): the unit of
// completions' text_offset.
int64_t utf8_characters(std::string_view text);

// The non-streaming response body.
std::string response_json(Endpoint endpoint, const ResponseHeader& header,
                          const std::vector<ChoiceOutput>& choices, const Usage& usage);
// One SSE event ("data: {…}\n\n") holding one choice's delta. Chat: `first` adds the
// assistant role to the delta. `include_usage` adds "usage": null.
std::string chunk_event(Endpoint endpoint, const ResponseHeader& header, const ChoiceOutput& choice,
                        bool first, bool include_usage);
// The final usage event ("choices": []), sent before done_event() when include_usage.
std::string usage_event(Endpoint endpoint, const ResponseHeader& header, const Usage& usage);
// An error inside a stream that has started: "data: {"error": …}\n\n".
std::string error_event(const ApiError& error);
// "data: [DONE]\n\n".
std::string done_event();

}  // namespace microllm::serve

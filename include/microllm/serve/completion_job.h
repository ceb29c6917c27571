// CompletionJob: one request of either endpoint between an HTTP handler thread and the engine
// loop. It builds the prompt ids (the chat template over the messages, or the prompt text or
// ids), checks them against the vocabulary and the context, submits the n choices (choice i
// seeded seed + i), and turns their tokens into text pieces (stop strings held back and
// cut), log-probabilities and finish reasons. Every problem the request itself causes is an
// ApiException (4xx) thrown by the constructor, before anything is sent to the client.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "microllm/io/chat_template.h"
#include "microllm/io/tokenizer.h"
#include "microllm/serve/engine_loop.h"
#include "microllm/serve/openai_protocol.h"
#include "microllm/serve/text_stream.h"

namespace microllm::serve {

// The served model as the handlers see it.
struct ModelContext {
  std::string name;                               // the served model name
  const io::Tokenizer* tokenizer = nullptr;       // required
  std::optional<io::ChatTemplate> chat_template;  // /v1/chat/completions needs one
  infer::SamplingParams defaults;                 // generation_config.json
  int64_t max_model_len = 0;                      // the engine's context
};

class CompletionJob {
 public:
  CompletionJob(const CompletionRequest& request, const ModelContext& model, EngineLoop& loop);
  ~CompletionJob();  // aborts the choices still running
  CompletionJob(const CompletionJob&) = delete;
  CompletionJob& operator=(const CompletionJob&) = delete;

  // Waits at most `timeout` for tokens of any choice; returns what became ready since the
  // last call: per choice that advanced, its text delta, the delta's tokens' log-probabilities
  // and, on its last piece, the finish reason. Throws ApiException (500, "server_error")
  // when the engine failed.
  std::vector<ChoiceOutput> poll(std::chrono::milliseconds timeout);
  bool done() const;
  // Ends every running choice now (the client left, or the request timed out).
  void abort();
  // Prompt tokens once (and choice 0's served by the prefix cache), completion tokens over
  // all choices (a stopping EOS counts).
  Usage usage() const;
  // Each choice's whole text, log-probabilities and finish reason so far.
  const std::vector<ChoiceOutput>& totals() const { return totals_; }
  int64_t prompt_tokens() const { return static_cast<int64_t>(prompt_ids_.size()); }
  // Seconds this request's threads spent building the prompt ids, and turning tokens into
  // text (detokenizer, stop strings, logprobs) so far.
  double tokenize_seconds() const { return tokenize_seconds_; }
  double detokenize_seconds() const { return detokenize_seconds_; }

 private:
  struct Choice {
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<TextStream> text;
    int64_t tokens = 0;
    int64_t cached_prompt_tokens = 0;  // the prefix cache's share of its prompt
    int64_t characters = 0;            // of the choice's text so far (the next piece's text_offset)
    bool done = false;
  };

  // Folds one event of choice i into `piece` (and the totals).
  void take(size_t i, StreamEvent event, ChoiceOutput& piece);
  TokenLogprob logprob_of(const infer::TokenOutput& t) const;

  const ModelContext& model_;
  EngineLoop& loop_;
  bool with_logprobs_ = false;
  std::vector<int32_t> prompt_ids_;
  double tokenize_seconds_ = 0.0, detokenize_seconds_ = 0.0;
  std::vector<Choice> choices_;
  std::vector<ChoiceOutput> totals_;
};

}  // namespace microllm::serve

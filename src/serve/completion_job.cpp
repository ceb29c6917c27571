// CompletionJob (see completion_job.h).
#include "microllm/serve/completion_job.h"

#include <chrono>
#include <random>

#include "microllm/core/error.h"

namespace microllm::serve {
namespace {

// The prompt ids of a request: the rendered chat, the encoded text, or the ids as given.
std::vector<int32_t> prompt_ids_of(const CompletionRequest& r, const ModelContext& m) {
  const io::Tokenizer& tok = *m.tokenizer;
  if (r.endpoint == Endpoint::chat_completions) {
    if (!m.chat_template)
      reject("messages", "the model '" + m.name +
                             "' has no chat template; use /v1/completions, or start the server "
                             "with a chat template family");
    std::vector<io::ChatMessage> messages;
    for (const ChatMessage& msg : r.messages)  // OpenAI's developer role is a system message
      messages.push_back({msg.role == "developer" ? "system" : msg.role, msg.content, {}});
    io::ChatOptions options;
    options.add_generation_prompt = true;
    std::string text;
    try {
      text = m.chat_template->render(messages, options);
    } catch (const Error& e) {
      reject("messages",
             std::string("the chat template cannot render these messages: ") + e.what());
    }
    return tok.encode(text, /*add_special_tokens=*/false);
  }
  if (!r.prompt_is_ids) return tok.encode(r.prompt, /*add_special_tokens=*/true);
  const int64_t vocab = tok.vocab_size();
  for (size_t i = 0; i < r.prompt_ids.size(); ++i)
    if (r.prompt_ids[i] >= vocab)
      reject("prompt", "token id " + std::to_string(r.prompt_ids[i]) + " at index " +
                           std::to_string(i) + " is outside the vocabulary of " +
                           std::to_string(vocab) + " tokens");
  return r.prompt_ids;
}

}  // namespace

CompletionJob::CompletionJob(const CompletionRequest& r, const ModelContext& model,
                             EngineLoop& loop)
    : model_(model), loop_(loop), with_logprobs_(r.logprobs >= 0) {
  MICROLLM_CHECK(model.tokenizer != nullptr, "serve", "the served model has no tokenizer");
  const auto began = std::chrono::steady_clock::now();
  prompt_ids_ = prompt_ids_of(r, model);
  tokenize_seconds_ = seconds_since(began);
  const auto P = static_cast<int64_t>(prompt_ids_.size());
  const int64_t context = model.max_model_len;
  const std::string prompt_param = r.endpoint == Endpoint::chat_completions ? "messages" : "prompt";
  if (P == 0) reject(prompt_param, "the prompt is empty after tokenization");
  if (P >= context)
    reject(prompt_param,
           "This model's maximum context length is " + std::to_string(context) +
               " tokens. However, your prompt has " + std::to_string(P) + " tokens.",
           "context_length_exceeded");
  if (r.max_tokens && P + *r.max_tokens > context)
    reject("max_tokens",
           "This model's maximum context length is " + std::to_string(context) +
               " tokens. However, you requested " + std::to_string(P + *r.max_tokens) +
               " tokens (" + std::to_string(P) + " in the prompt, " +
               std::to_string(*r.max_tokens) + " in the completion).",
           "context_length_exceeded");
  infer::SamplingParams params = r.sampling;
  params.max_new_tokens = r.max_tokens.value_or(context - P);
  params.logprobs = r.logprobs;
  if (!r.seeded) params.seed = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  std::vector<infer::SamplingParams> per_choice;
  for (int64_t i = 0; i < r.n; ++i) {
    per_choice.push_back(params);
    per_choice.back().seed = params.seed + static_cast<uint64_t>(i);
  }
  try {
    std::vector<std::shared_ptr<RequestStream>> streams =
        loop.submit_choices(prompt_ids_, std::move(per_choice));
    for (int64_t i = 0; i < r.n; ++i) {
      Choice c;
      c.text = std::make_unique<TextStream>(*model.tokenizer, r.stop);
      c.stream = std::move(streams[static_cast<size_t>(i)]);
      choices_.push_back(std::move(c));
      ChoiceOutput total;
      total.index = i;
      total.with_logprobs = with_logprobs_;
      totals_.push_back(std::move(total));
    }
  } catch (const Error& e) {
    abort();
    if (!loop.running()) throw ApiException(ApiError::server(503, e.what()));
    reject("", e.what());
  }
}

CompletionJob::~CompletionJob() { abort(); }

void CompletionJob::abort() {
  for (Choice& c : choices_)
    if (!c.done) {
      loop_.abort(c.stream->id());
      c.done = true;
    }
}

bool CompletionJob::done() const {
  for (const Choice& c : choices_)
    if (!c.done) return false;
  return true;
}

Usage CompletionJob::usage() const {
  Usage u;
  u.prompt_tokens = prompt_tokens();
  for (const Choice& c : choices_) u.completion_tokens += c.tokens;
  if (!choices_.empty()) u.cached_tokens = choices_.front().cached_prompt_tokens;
  return u;
}

TokenLogprob CompletionJob::logprob_of(const infer::TokenOutput& t) const {
  const io::Tokenizer& tok = *model_.tokenizer;
  auto text_of = [&](int32_t id) {  // "" for an id outside the tokenizer (see TextStream)
    return tok.has_token(id) ? tok.decode(std::vector<int32_t>{id}, /*skip_special_tokens=*/false)
                             : std::string();
  };
  TokenLogprob lp;
  lp.token = text_of(t.token);
  lp.logprob = t.logprob;
  for (const auto& [id, value] : t.top_logprobs) lp.top.emplace_back(text_of(id), value);
  return lp;
}

void CompletionJob::take(size_t i, StreamEvent event, ChoiceOutput& piece) {
  Choice& c = choices_[i];
  ChoiceOutput& total = totals_[i];
  if (event.is_error) {
    abort();
    throw ApiException(ApiError::server(500, event.error));
  }
  const auto began = std::chrono::steady_clock::now();
  const infer::TokenOutput& t = event.token;
  ++c.tokens;
  c.cached_prompt_tokens = t.cached_prompt_tokens;
  if (with_logprobs_) {
    piece.logprobs.push_back(logprob_of(t));
    total.logprobs.push_back(piece.logprobs.back());
  }
  std::string text = c.text->push(t.token);
  std::optional<std::string> finish;
  if (c.text->stopped()) {
    loop_.abort(c.stream->id());  // the stop string ends the request; blocks freed next step
    finish = "stop";
  } else if (t.finished) {
    text += c.text->finish();
    finish = t.finish_reason;
  }
  piece.text += text;
  total.text += text;
  c.characters += utf8_characters(text);
  if (finish) {
    c.done = true;
    piece.finish_reason = total.finish_reason = finish;
  }
  detokenize_seconds_ += seconds_since(began);
}

std::vector<ChoiceOutput> CompletionJob::poll(std::chrono::milliseconds timeout) {
  // Unless some choice has an event ready, wait for the first running choice's next one.
  bool ready = false;
  for (const Choice& c : choices_) ready = ready || (!c.done && c.stream->ready());
  size_t first = choices_.size();
  std::optional<StreamEvent> first_event;
  for (size_t i = 0; i < choices_.size() && !ready; ++i) {
    if (choices_[i].done) continue;
    first_event = choices_[i].stream->next(timeout);
    first = i;
    break;
  }
  std::vector<ChoiceOutput> pieces;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    ChoiceOutput piece;
    piece.index = static_cast<int64_t>(i);
    piece.with_logprobs = with_logprobs_;
    piece.text_offset = c.characters;
    bool advanced = false;
    if (i == first && first_event) {
      take(i, std::move(*first_event), piece);
      advanced = true;
    }
    while (!c.done) {
      std::optional<StreamEvent> e = c.stream->next(std::chrono::milliseconds(0));
      if (!e) break;
      take(i, std::move(*e), piece);
      advanced = true;
    }
    if (advanced) pieces.push_back(std::move(piece));
  }
  return pieces;
}

}  // namespace microllm::serve

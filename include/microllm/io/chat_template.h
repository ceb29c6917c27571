// Chat templates: OpenAI-style messages rendered into the prompt text that Hugging Face
// `tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`
// produces, byte for byte, for a fixed set of template families.
//
// There is no Jinja engine here: each family is readable C++ that reproduces what its real
// template does with system / user / assistant messages whose content is a string (one file
// per family under src/io/chat_template/). The family is recognised from the
// tokenizer_config.json `chat_template` by distinctive substrings; a template that is not
// recognised is an error, never a guess, and the caller may name the family instead.
// Tools, tool calls and tool results are rejected ("not supported").
//
// Reference: transformers `PreTrainedTokenizerBase.apply_chat_template` and
// `utils/chat_template_utils.py` (Jinja2 with trim_blocks and lstrip_blocks; the variables
// it passes: messages, tools=None, add_generation_prompt, the special tokens, extra kwargs
// such as enable_thinking or date_string; the functions raise_exception and strftime_now).
// What is supported, the quirks reproduced and the oracle tests: docs/tokenizer.md.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "microllm/io/tokenizer.h"

namespace microllm::io {

// The template families microllm renders. The CLI names are those of chat_family_name().
enum class ChatFamily {
  kChatml,      // "chatml": plain ChatML, <|im_start|>role\ncontent<|im_end|>\n per message
  kQwen2_5,     // "qwen2_5": ChatML with Qwen2.5's default system prompt
  kQwen3,       // "qwen3": ChatML with <think> handling and enable_thinking
  kLlama3,      // "llama3": Llama 3 / 3.0 Instruct (header per message, content trimmed)
  kLlama3_1,    // "llama3_1": Llama 3.1 / 3.3 (system header with dates; date "26 Jul 2024")
  kLlama3_2,    // "llama3_2": Llama 3.2 (as 3.1, but the date is today's, from strftime_now)
  kDeepseekR1,  // "deepseek_r1": DeepSeek-R1(-Distill): <｜User｜>/<｜Assistant｜>, </think> cut
  kDeepseekV3,  // "deepseek_v3": DeepSeek-V3: system prompts joined, assistant text verbatim
};

// "chatml", "qwen2_5", ... (the CLI's --template-family values).
std::string_view chat_family_name(ChatFamily family);
// The family of a CLI name; throws microllm::Error (op "chat_template") listing the names.
ChatFamily chat_family_from_name(std::string_view name);
// Every family name joined by '|', for help texts and error messages.
std::string chat_family_names();

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;  // the text; must be valid UTF-8
  // Qwen3 only (its template reads message.reasoning_content; the other templates ignore it).
  std::optional<std::string> reasoning_content;
};

// What apply_chat_template receives besides the messages.
struct ChatOptions {
  bool add_generation_prompt = false;  // HF's default
  // Qwen3: unset means the variable is not passed (the template then thinks); false
  // appends an empty "<think>\n\n</think>\n\n" after the generation prompt.
  std::optional<bool> enable_thinking;
  // Llama 3.1 / 3.2: the "Today Date: ..." line. Unset: what the template does when HF
  // renders it — llama3_1 writes "26 Jul 2024"; llama3_2 calls strftime_now("%d %b %Y"),
  // which transformers defines as datetime.now().strftime, so today's local date (C locale).
  std::optional<std::string> date_string;
};

// One recognised chat template with the special tokens it uses.
struct ChatTemplate {
  ChatFamily family = ChatFamily::kChatml;
  std::optional<std::string> bos_token;  // from tokenizer_config.json
  std::optional<std::string> eos_token;
  // Variants inside a family, as the recognised template text dictates (from_config with an
  // explicit family uses the defaults of the model named in the enum's comment):
  bool generation_prompt_always = false;  // llama3: Meta's first template appends the
                                          // assistant header even without add_generation_prompt
  bool deepseek_think_prefix = false;     // the generation prompt is "<｜Assistant｜><think>\n"
                                          // (R1 templates since the Feb 2025 update)
  bool deepseek_join_systems = false;     // every system message, joined by "\n\n" (V3, R1);
                                          // the R1-Distill template keeps only the last one

  // The family recognised in config.chat_template, or `family` when given (then the
  // template text is not read). Throws microllm::Error (op "chat_template") naming `source`
  // when there is no template or it is not recognised, saying how to name a family.
  static ChatTemplate from_config(const TokenizerConfig& config, const std::string& source,
                                  std::optional<ChatFamily> family = std::nullopt);

  // The prompt text. Throws microllm::Error on an empty message list, a role other than
  // system / user / assistant, or a template that needs a bos_token the config lacks.
  std::string render(std::span<const ChatMessage> messages, const ChatOptions& options) const;
};

// The family whose distinctive substrings the Jinja source holds, with its variant flags
// (bos/eos left empty); nullopt when none matches.
std::optional<ChatTemplate> recognize_chat_template(std::string_view jinja_source);

// Messages from the OpenAI-style JSON list [{"role": ..., "content": "..."}, ...]. Throws
// microllm::Error (op "chat_template") naming `where` and the message index for: not a list,
// an empty list, a message that is not an object, a missing or unknown role, content that is
// missing or not a string (null, a list of parts), and tool_calls / tool_call_id /
// function_call ("not supported"). Other keys are ignored, as the templates ignore them.
std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& messages,
                                                 const std::string& where);

// The tokenizer_config.json fields without loading tokenizer.json: `path` is a directory
// (its tokenizer_config.json), a tokenizer.json (its sibling tokenizer_config.json) or the
// config file itself (any other file name, e.g. a test fixture). Tokens written as
// AddedToken objects are reduced to their content, as Tokenizer::config() does.
TokenizerConfig read_tokenizer_config(const std::string& path);

}  // namespace microllm::io

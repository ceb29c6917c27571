// Chat templates: recognising the family of a tokenizer_config.json chat_template, checking
// the messages, and dispatching to the family's renderer (chatml.cpp, qwen3.cpp, llama3.cpp,
// deepseek.cpp). Also reads messages from JSON and tokenizer_config.json from disk.
//
// Recognition: the Jinja source, with each "\n" escape written as a newline (the real files
// use both spellings), must hold every distinctive substring of one family's real template —
// the statements that produce what the renderer writes. Anything else is an error that says
// how to name a family; a template is never guessed from a partial match.
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat_template_internal.h"
#include "microllm/core/error.h"

namespace microllm::io {
namespace {

using json = nlohmann::json;

constexpr std::array<std::pair<ChatFamily, std::string_view>, 8> kFamilyNames = {{
    {ChatFamily::kChatml, "chatml"},
    {ChatFamily::kQwen2_5, "qwen2_5"},
    {ChatFamily::kQwen3, "qwen3"},
    {ChatFamily::kLlama3, "llama3"},
    {ChatFamily::kLlama3_1, "llama3_1"},
    {ChatFamily::kLlama3_2, "llama3_2"},
    {ChatFamily::kDeepseekR1, "deepseek_r1"},
    {ChatFamily::kDeepseekV3, "deepseek_v3"},
}};

// The Jinja source with every two-character escape "\n" replaced by a newline.
std::string unescape_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\\' && i + 1 < source.size() && source[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += source[i];
    }
  }
  return out;
}

bool has_all(std::string_view text, std::initializer_list<std::string_view> needles) {
  return std::all_of(needles.begin(), needles.end(),
                     [&](std::string_view n) { return text.find(n) != std::string_view::npos; });
}

std::string without_whitespace(std::string_view text) {
  std::string out;
  for (char c : text)
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') out += c;
  return out;
}

// The ChatML template of the Hugging Face chat templating docs (with and without the
// add_generation_prompt default some copies carry), compared without whitespace.
bool is_plain_chatml(std::string_view t) {
  const std::string body =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\n' }}{% endif %}";
  const std::string guard =
      "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
      "{% endif %}";
  const std::string text = without_whitespace(t);
  return text == without_whitespace(body) || text == without_whitespace(guard + body);
}

std::optional<ChatTemplate> recognize_qwen(std::string_view t) {
  ChatTemplate out;
  const bool chatml_turn = has_all(
      t, {"{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}",
          "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\n' }}"});
  if (!chatml_turn) return std::nullopt;
  if (has_all(t, {"{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}",
                  "{%- if (message.role == \"user\") or (message.role == \"system\" and not "
                  "loop.first) %}",
                  "not(message.content.startswith('<tool_response>') and "
                  "message.content.endswith('</tool_response>'))",
                  "{%- set content = message.content.split('</think>')[-1].lstrip('\n') %}",
                  "{%- set reasoning_content = message.content.split('</think>')[0]"
                  ".rstrip('\n').split('<think>')[-1].lstrip('\n') %}",
                  "{%- if loop.index0 > ns.last_query_index %}",
                  "{%- if loop.last or (not loop.last and reasoning_content) %}",
                  "{{- '<|im_start|>' + message.role + '\n<think>\n' + "
                  "reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}",
                  "{%- if enable_thinking is defined and enable_thinking is false %}",
                  "{{- '<think>\n\n</think>\n\n' }}"})) {
    out.family = ChatFamily::kQwen3;
    return out;
  }
  if (!has_all(t, {"<think>"}) &&
      has_all(t, {"{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}",
                  "{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                  "helpful assistant.<|im_end|>\n' }}",
                  "{%- if (message.role == \"user\") or (message.role == \"system\" and not "
                  "loop.first) or (message.role == \"assistant\" and not message.tool_calls) "
                  "%}"})) {
    out.family = ChatFamily::kQwen2_5;
    return out;
  }
  return std::nullopt;
}

std::optional<ChatTemplate> recognize_llama(std::string_view t) {
  ChatTemplate out;
  constexpr std::string_view kPrompt = "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}";
  if (t.starts_with("{% set loop_messages = messages %}{% for message in loop_messages %}") &&
      has_all(t, {"{% set content = '<|start_header_id|>' + message['role'] + "
                  "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}",
                  "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                  "{{ content }}{% endfor %}"})) {
    out.family = ChatFamily::kLlama3;
    const std::string always = "{% endfor %}" + std::string(kPrompt);
    const std::string asked =
        "{% endfor %}{% if add_generation_prompt %}" + std::string(kPrompt) + "{% endif %}";
    if (t.ends_with(asked)) return out;
    if (t.ends_with(always)) {
      out.generation_prompt_always = true;
      return out;
    }
    return std::nullopt;
  }
  if (t.starts_with("{{- bos_token }}") &&
      has_all(t, {"{%- set system_message = messages[0]['content']|trim %}",
                  "{{- \"<|start_header_id|>system<|end_header_id|>\n\n\" }}",
                  "{{- \"Cutting Knowledge Date: December 2023\n\" }}",
                  "{{- \"Today Date: \" + date_string + \"\n\n\" }}",
                  "{{- system_message }}\n{{- \"<|eot_id|>\" }}",
                  "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ "
                  "message['content'] | trim + '<|eot_id|>' }}",
                  "{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant"
                  "<|end_header_id|>\n\n' }}"})) {
    if (has_all(t, {"{%- set date_string = strftime_now(\"%d %b %Y\") %}"})) {
      out.family = ChatFamily::kLlama3_2;
      return out;
    }
    if (has_all(t, {"{%- set date_string = \"26 Jul 2024\" %}"})) {
      out.family = ChatFamily::kLlama3_1;
      return out;
    }
  }
  return std::nullopt;
}

std::optional<ChatTemplate> recognize_deepseek(std::string_view t) {
  if (!has_all(t, {"{{bos_token}}{{ns.system_prompt}}", "{{'<｜User｜>' + message['content']}}"}))
    return std::nullopt;
  ChatTemplate out;
  // The system prompt: joined (V3, R1) or the last one (R1-Distill).
  if (has_all(t, {"{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + "
                  "message['content'] %}",
                  "{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}"}))
    out.deepseek_join_systems = true;
  else if (!has_all(t, {"{%- if message['role'] == 'system' %}{% set ns.system_prompt = "
                        "message['content'] %}{%- endif %}"}))
    return std::nullopt;
  // The assistant text: after the last </think> (R1) or verbatim (V3).
  if (has_all(t, {"{% set content = message['content'] %}{% if '</think>' in content %}"
                  "{% set content = content.split('</think>')[-1] %}{% endif %}"
                  "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}"}))
    out.family = ChatFamily::kDeepseekR1;
  else if (!has_all(t, {"</think>"}) &&
           has_all(t, {"{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"}))
    out.family = ChatFamily::kDeepseekV3;
  else
    return std::nullopt;
  // The generation prompt, with or without <think>\n.
  constexpr std::string_view kAsk = "{% if add_generation_prompt and not ns.is_tool %}";
  if (t.ends_with(std::string(kAsk) + "{{'<｜Assistant｜><think>\n'}}{% endif %}"))
    out.deepseek_think_prefix = true;
  else if (!t.ends_with(std::string(kAsk) + "{{'<｜Assistant｜>'}}{% endif %}"))
    return std::nullopt;
  return out;
}

// The defaults of a family named explicitly (no template text to read the variant from).
ChatTemplate family_defaults(ChatFamily family) {
  ChatTemplate out;
  out.family = family;
  out.deepseek_think_prefix = family == ChatFamily::kDeepseekR1;  // R1-Distill today
  out.deepseek_join_systems = family == ChatFamily::kDeepseekV3;
  return out;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MICROLLM_CHECK(in.good(), "chat_template", "cannot read ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string_view chat_family_name(ChatFamily family) {
  for (const auto& [f, name] : kFamilyNames)
    if (f == family) return name;
  return "unknown";
}

std::string chat_family_names() {
  std::string out;
  for (const auto& [f, name] : kFamilyNames) {
    if (!out.empty()) out += '|';
    out += name;
  }
  return out;
}

ChatFamily chat_family_from_name(std::string_view name) {
  for (const auto& [f, n] : kFamilyNames)
    if (n == name) return f;
  MICROLLM_FAIL("chat_template", "unknown template family '", name, "' (expected one of ",
                chat_family_names(), ")");
}

std::optional<ChatTemplate> recognize_chat_template(std::string_view jinja_source) {
  const std::string t = unescape_newlines(jinja_source);
  if (is_plain_chatml(t)) return family_defaults(ChatFamily::kChatml);
  if (auto qwen = recognize_qwen(t)) return qwen;
  if (auto llama = recognize_llama(t)) return llama;
  return recognize_deepseek(t);
}

ChatTemplate ChatTemplate::from_config(const TokenizerConfig& config, const std::string& source,
                                       std::optional<ChatFamily> family) {
  ChatTemplate out;
  if (family) {
    out = family_defaults(*family);
  } else {
    const std::string how = "name the family instead (CLI: --template-family " +
                            chat_family_names() +
                            "; C++: ChatTemplate::from_config(config, "
                            "source, family)); microllm has no general Jinja engine";
    MICROLLM_CHECK(config.chat_template.has_value(), "chat_template", source,
                   ": tokenizer_config.json has no chat_template (or not a single string); ", how);
    std::optional<ChatTemplate> found = recognize_chat_template(*config.chat_template);
    if (!found) {
      std::string head = config.chat_template->substr(0, 60);
      for (char& c : head)
        if (c == '\n') c = ' ';
      MICROLLM_FAIL("chat_template", source,
                    ": the chat_template is not one microllm recognises (it begins \"", head,
                    "...\"); ", how);
    }
    out = *found;
  }
  out.bos_token = config.bos_token;
  out.eos_token = config.eos_token;
  return out;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 const ChatOptions& options) const {
  MICROLLM_CHECK(!messages.empty(), "chat_template", "messages is empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    MICROLLM_CHECK(role == "system" || role == "user" || role == "assistant", "chat_template",
                   "messages[", i, "]: role '", role,
                   "' is not supported (expected system, user or assistant; tools are not "
                   "supported)");
  }
  switch (family) {
    case ChatFamily::kChatml:
    case ChatFamily::kQwen2_5:
      return chat::render_chatml(*this, messages, options);
    case ChatFamily::kQwen3:
      return chat::render_qwen3(*this, messages, options);
    case ChatFamily::kLlama3:
    case ChatFamily::kLlama3_1:
    case ChatFamily::kLlama3_2:
      return chat::render_llama3(*this, messages, options);
    case ChatFamily::kDeepseekR1:
    case ChatFamily::kDeepseekV3:
      return chat::render_deepseek(*this, messages, options);
  }
  MICROLLM_FAIL("chat_template", "unknown family");
}

std::vector<ChatMessage> chat_messages_from_json(const json& messages, const std::string& where) {
  MICROLLM_CHECK(messages.is_array(), "chat_template", where,
                 ": messages must be a JSON list of {\"role\", \"content\"} objects, found ",
                 messages.type_name());
  MICROLLM_CHECK(!messages.empty(), "chat_template", where, ": messages is empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    MICROLLM_CHECK(m.is_object(), "chat_template", where, ": messages[", i,
                   "] must be an object, found ", m.type_name());
    for (const char* key : {"tool_calls", "tool_call_id", "function_call"})
      MICROLLM_CHECK(!m.contains(key) || m[key].is_null(), "chat_template", where, ": messages[", i,
                     "]: \"", key, "\" is not supported (no tool use)");
    MICROLLM_CHECK(m.contains("role") && m["role"].is_string(), "chat_template", where,
                   ": messages[", i, "] needs a string \"role\"");
    ChatMessage message;
    message.role = m["role"].get<std::string>();
    MICROLLM_CHECK(
        message.role == "system" || message.role == "user" || message.role == "assistant",
        "chat_template", where, ": messages[", i, "]: role '", message.role,
        "' is not supported (expected system, user or assistant)");
    MICROLLM_CHECK(m.contains("content") && m["content"].is_string(), "chat_template", where,
                   ": messages[", i, "]: \"content\" must be a string, found ",
                   m.contains("content") ? m["content"].type_name() : "nothing");
    message.content = m["content"].get<std::string>();
    if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
      MICROLLM_CHECK(m["reasoning_content"].is_string(), "chat_template", where, ": messages[", i,
                     "]: \"reasoning_content\" must be a string");
      message.reasoning_content = m["reasoning_content"].get<std::string>();
    }
    out.push_back(std::move(message));
  }
  return out;
}

TokenizerConfig read_tokenizer_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MICROLLM_CHECK(fs::exists(path, ec), "chat_template", path,
                 " does not exist (expected a tokenizer directory, a tokenizer.json or a "
                 "tokenizer_config.json)");
  fs::path file = path;
  if (fs::is_directory(file, ec))
    file /= "tokenizer_config.json";
  else if (file.filename() == "tokenizer.json")
    file = file.parent_path() / "tokenizer_config.json";
  MICROLLM_CHECK(fs::is_regular_file(file, ec), "chat_template", file.string(),
                 " does not exist (the chat template is read from tokenizer_config.json)");
  return parse_tokenizer_config(read_file(file), file.string());
}

}  // namespace microllm::io

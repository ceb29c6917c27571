// Chat templates: recognition of the real templates (the committed fixtures, and the fetched
// tokenizer configs when present), the quirks of each family on small conversations, and every
// error path. The byte-for-byte comparison with an oracle over many conversations is
// tests/tokenizer/run_chat_parity.sh (CTest chat_template_parity).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include <unistd.h>

#include "microllm/core/error.h"
#include "microllm/io/chat_template.h"

namespace microllm::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kFixtures = fs::path(MICROLLM_SOURCE_DIR) / "tests/fixtures/chat_templates";
// scripts/fetch_tokenizers.sh's cache: $MICROLLM_TOKENIZER_CACHE or build/.cache/tokenizers.
fs::path tokenizer_cache() {
  const char* env = std::getenv("MICROLLM_TOKENIZER_CACHE");
  return env && *env ? fs::path(env) : fs::path(MICROLLM_SOURCE_DIR) / "build/.cache/tokenizers";
}

std::vector<ChatMessage> msgs(std::initializer_list<std::pair<const char*, const char*>> list) {
  std::vector<ChatMessage> out;
  for (const auto& [role, content] : list) out.push_back({role, content, std::nullopt});
  return out;
}

ChatTemplate family(ChatFamily f, std::optional<std::string> bos = std::nullopt) {
  TokenizerConfig config;
  config.bos_token = std::move(bos);
  return ChatTemplate::from_config(config, "test", f);
}

std::string render(const ChatTemplate& t, const std::vector<ChatMessage>& m, bool prompt = false,
                   std::optional<bool> thinking = std::nullopt) {
  ChatOptions options;
  options.add_generation_prompt = prompt;
  options.enable_thinking = thinking;
  return t.render(m, options);
}

template <class F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    FAIL() << "expected an error containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// ---- recognition ----

TEST(ChatTemplate, RecognisesTheCommittedFixtures) {
  const ChatTemplate r1 = ChatTemplate::from_config(
      read_tokenizer_config((kFixtures / "deepseek-r1-distill-qwen.json").string()), "r1");
  EXPECT_EQ(r1.family, ChatFamily::kDeepseekR1);
  EXPECT_TRUE(r1.deepseek_think_prefix);
  EXPECT_FALSE(r1.deepseek_join_systems);
  EXPECT_EQ(r1.bos_token, "<｜begin▁of▁sentence｜>");
  const ChatTemplate llama = ChatTemplate::from_config(
      read_tokenizer_config((kFixtures / "llama-3.2-instruct.json").string()), "llama");
  EXPECT_EQ(llama.family, ChatFamily::kLlama3_2);
  EXPECT_EQ(llama.eos_token, "<|eot_id|>");
}

TEST(ChatTemplate, RecognisesTheFetchedConfigs) {
  const std::vector<std::pair<const char*, ChatFamily>> expected = {
      {"qwen2_5", ChatFamily::kQwen2_5},
      {"qwen3", ChatFamily::kQwen3},
      {"llama3", ChatFamily::kLlama3},
      {"llama3_1", ChatFamily::kLlama3},
      {"deepseek_v3", ChatFamily::kDeepseekV3}};
  for (const auto& [name, f] : expected) {
    const fs::path dir = tokenizer_cache() / name;
    if (!fs::exists(dir / "tokenizer_config.json"))
      GTEST_SKIP() << dir << " not fetched (bash scripts/fetch_tokenizers.sh)";
    const ChatTemplate t = ChatTemplate::from_config(read_tokenizer_config(dir.string()), name);
    EXPECT_EQ(t.family, f) << name;
    // Meta's first Llama 3 template (npm llama3) always appends the assistant header.
    EXPECT_EQ(t.generation_prompt_always, std::string(name) == "llama3") << name;
    EXPECT_EQ(t.deepseek_join_systems, f == ChatFamily::kDeepseekV3) << name;
  }
}

TEST(ChatTemplate, RecognisesPlainChatmlInBothSpellings) {
  const std::string escaped =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\\n' }}{% endif %}";
  std::string literal = escaped;
  for (size_t p; (p = literal.find("\\n")) != std::string::npos;) literal.replace(p, 2, "\n");
  for (const std::string& t : {escaped, literal}) {
    const auto found = recognize_chat_template(t);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->family, ChatFamily::kChatml);
  }
}

TEST(ChatTemplate, APartialMatchIsNotRecognised) {
  const std::string r1 =
      *read_tokenizer_config((kFixtures / "deepseek-r1-distill-qwen.json").string()).chat_template;
  ASSERT_TRUE(recognize_chat_template(r1).has_value());
  // The same template with the </think> removal taken out, or another generation prompt.
  std::string changed = r1;
  changed.replace(changed.find("[-1]"), 4, "[0]");
  EXPECT_FALSE(recognize_chat_template(changed).has_value());
  changed = r1;
  changed.replace(changed.find("<think>\\n'}}"), 10, "<think>'}}");
  EXPECT_FALSE(recognize_chat_template(changed).has_value());
  EXPECT_FALSE(recognize_chat_template("").has_value());
  EXPECT_FALSE(recognize_chat_template("{{ messages[0]['content'] }}").has_value());
  EXPECT_FALSE(recognize_chat_template("<|im_start|><think>enable_thinking").has_value());
}

TEST(ChatTemplate, UnknownOrMissingTemplateIsAnErrorThatNamesTheWayOut) {
  TokenizerConfig config;
  expect_error([&] { ChatTemplate::from_config(config, "m/tokenizer_config.json"); },
               "m/tokenizer_config.json: tokenizer_config.json has no chat_template");
  config.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
  expect_error([&] { ChatTemplate::from_config(config, "m"); }, "not one microllm recognises");
  expect_error([&] { ChatTemplate::from_config(config, "m"); },
               "--template-family chatml|qwen2_5|qwen3|llama3|llama3_1|llama3_2|deepseek_r1|"
               "deepseek_v3");
  // Naming the family skips recognition.
  EXPECT_EQ(ChatTemplate::from_config(config, "m", ChatFamily::kQwen3).family, ChatFamily::kQwen3);
}

TEST(ChatTemplate, FamilyNames) {
  for (const char* name : {"chatml", "qwen2_5", "qwen3", "llama3", "llama3_1", "llama3_2",
                           "deepseek_r1", "deepseek_v3"})
    EXPECT_EQ(chat_family_name(chat_family_from_name(name)), name);
  expect_error([] { chat_family_from_name("mistral"); }, "unknown template family 'mistral'");
}

// ---- the families' quirks ----

TEST(ChatTemplate, Qwen2_5WritesItsDefaultSystemPrompt) {
  const ChatTemplate t = family(ChatFamily::kQwen2_5);
  EXPECT_EQ(render(t, msgs({{"user", "Hi"}}), true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(t, msgs({{"system", ""}, {"user", "Hi"}})),
            "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(render(family(ChatFamily::kChatml), msgs({{"user", "Hi"}})),
            "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3DropsReasoningBeforeTheLastQuery) {
  const ChatTemplate t = family(ChatFamily::kQwen3);
  const auto m = msgs({{"user", "Q1"},
                       {"assistant", "<think>\nr1\n</think>\n\nA1"},
                       {"user", "Q2"},
                       {"assistant", "<think>\nr2\n</think>\n\nA2"}});
  EXPECT_EQ(render(t, m),
            "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
  // A user message wrapped in <tool_response> is not a query: A1 keeps its reasoning.
  const auto tool = msgs({{"user", "Q1"},
                          {"assistant", "<think>r1</think>A1"},
                          {"user", "<tool_response>x</tool_response>"}});
  EXPECT_EQ(render(t, tool),
            "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nr1\n</think>\n\n"
            "A1<|im_end|>\n<|im_start|>user\n<tool_response>x</tool_response><|im_end|>\n");
  // The last message gets an empty <think> block; earlier ones only with reasoning.
  EXPECT_EQ(render(t, msgs({{"user", "Q"}, {"assistant", "plain"}, {"assistant", "last"}})),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nplain<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nlast<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3EnableThinking) {
  const ChatTemplate t = family(ChatFamily::kQwen3);
  const auto m = msgs({{"user", "Hi"}});
  const std::string base = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(render(t, m, true), base);
  EXPECT_EQ(render(t, m, true, true), base);
  EXPECT_EQ(render(t, m, true, false), base + "<think>\n\n</think>\n\n");
  EXPECT_EQ(render(t, m, false, false), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3ReasoningContentAndNewlineStripping) {
  const ChatTemplate t = family(ChatFamily::kQwen3);
  std::vector<ChatMessage> m = msgs({{"user", "Q"}, {"assistant", "\n\n A"}});
  m[1].reasoning_content = "\n r \n";
  // strip('\n') removes newlines only, not the spaces.
  EXPECT_EQ(render(t, m),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n r \n"
            "</think>\n\n A<|im_end|>\n");
  // The reasoning is what follows the last <think> before the first </think>.
  EXPECT_EQ(
      render(t, msgs({{"user", "Q"}, {"assistant", "a<think>b<think>\nc\n</think>d</think>\ne"}})),
      "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nc\n</think>\n\ne"
      "<|im_end|>\n");
}

TEST(ChatTemplate, Llama3TrimsWithPythonWhitespace) {
  const ChatTemplate t = family(ChatFamily::kLlama3, "<|begin_of_text|>");
  // U+3000 and U+0085 are Python whitespace, U+FEFF is not.
  EXPECT_EQ(
      render(t, msgs({{"user", "\u3000\u0085 Hi\t\n"}, {"assistant", "\uFEFFx\uFEFF"}}), true),
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n\uFEFFx\uFEFF<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n");
  ChatTemplate always = t;
  always.generation_prompt_always = true;
  EXPECT_TRUE(render(always, msgs({{"user", "Hi"}})).ends_with("assistant<|end_header_id|>\n\n"));
  expect_error([] { render(family(ChatFamily::kLlama3), msgs({{"user", "Hi"}})); }, "bos_token");
}

TEST(ChatTemplate, Llama3_1And3_2Dates) {
  const auto m = msgs({{"system", "  S  "}, {"user", "U"}});
  const std::string head =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "Cutting Knowledge Date: December 2023\nToday Date: ";
  const std::string tail = "\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>";
  EXPECT_EQ(render(family(ChatFamily::kLlama3_1, "<|begin_of_text|>"), m),
            head + "26 Jul 2024" + tail);
  const std::string today = render(family(ChatFamily::kLlama3_2, "<|begin_of_text|>"), m);
  EXPECT_TRUE(std::regex_match(today.substr(head.size(), 11),
                               std::regex("[0-3][0-9] (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|"
                                          "Nov|Dec) [0-9]{4}")))
      << today;
  ChatOptions options;
  options.date_string = "01 Jan 2025";
  EXPECT_EQ(family(ChatFamily::kLlama3_2, "<|begin_of_text|>").render(m, options),
            head + "01 Jan 2025" + tail);
}

TEST(ChatTemplate, DeepseekSystemPromptsAndReasoning) {
  const auto m =
      msgs({{"system", "S1"}, {"user", "U"}, {"assistant", "<think>r</think>A"}, {"system", "S2"}});
  EXPECT_EQ(render(family(ChatFamily::kDeepseekR1, "<s>"), m, true),
            "<s>S2<｜User｜>U<｜Assistant｜>A<｜end▁of▁sentence｜><｜Assistant｜><think>\n");
  EXPECT_EQ(render(family(ChatFamily::kDeepseekV3, "<s>"), m, true),
            "<s>S1\n\nS2<｜User｜>U<｜Assistant｜><think>r</think>A<｜end▁of▁sentence｜>"
            "<｜Assistant｜>");
}

// ---- messages and their errors ----

TEST(ChatTemplate, MessagesFromJson) {
  const auto m =
      chat_messages_from_json(json::parse(R"([{"role": "user", "content": "Hi", "name": "x"},
                      {"role": "assistant", "content": "A", "reasoning_content": "R"}])"),
                              "m.json");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].content, "Hi");
  EXPECT_EQ(m[1].reasoning_content, "R");
  const std::vector<std::pair<const char*, const char*>> bad = {
      {R"({"role": "user"})", "m.json: messages must be a JSON list"},
      {"[]", "messages is empty"},
      {"[1]", "messages[0] must be an object, found number"},
      {R"([{"content": "x"}])", "messages[0] needs a string \"role\""},
      {R"([{"role": "tool", "content": "x"}])", "role 'tool' is not supported"},
      {R"([{"role": "user", "content": null}])", "\"content\" must be a string, found null"},
      {R"([{"role": "user", "content": [{"type": "text"}]}])", "found array"},
      {R"([{"role": "assistant", "content": "", "tool_calls": []}])",
       "\"tool_calls\" is not supported"},
      {R"([{"role": "assistant", "content": "", "reasoning_content": 1}])",
       "\"reasoning_content\" must be a string"},
  };
  for (const auto& [text, fragment] : bad)
    expect_error([&] { chat_messages_from_json(json::parse(text), "m.json"); }, fragment);
}

TEST(ChatTemplate, RenderChecksItsInput) {
  const ChatTemplate t = family(ChatFamily::kChatml);
  expect_error([&] { render(t, {}); }, "messages is empty");
  expect_error([&] { render(t, msgs({{"tool", "x"}})); }, "messages[0]: role 'tool'");
}

TEST(ChatTemplate, ReadTokenizerConfigPaths) {
  const fs::path dir =
      fs::temp_directory_path() / ("microllm_test_chat_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << "{}";  // not read: only its sibling config is
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": "x", "bos_token": {"__type": "AddedToken", "content": "<s>"}})";
  for (const fs::path& p : {dir, dir / "tokenizer.json", dir / "tokenizer_config.json"}) {
    const TokenizerConfig c = read_tokenizer_config(p.string());
    EXPECT_EQ(c.chat_template, "x");
    EXPECT_EQ(c.bos_token, "<s>");
  }
  std::ofstream(dir / "tokenizer_config.json") << "[";
  expect_error([&] { read_tokenizer_config(dir.string()); }, "not valid JSON");
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": 3})";
  expect_error([&] { read_tokenizer_config(dir.string()); },
               "\"bos_token\" must be a string or an AddedToken object");
  expect_error([&] { read_tokenizer_config((dir / "missing").string()); }, "does not exist");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace microllm::io

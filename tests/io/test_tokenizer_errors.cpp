// Bad tokenizer files: each is one microllm::Error naming the file and what is wrong or
// unsupported (SPEC §7), never a crash or a silently different tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/expect_error.h"
#include "io/tokenizer_test_util.h"

namespace microllm::testing {
namespace {

// Loads a modified tiny tokenizer.json and expects an Error mentioning every fragment.
::testing::AssertionResult rejects(const nlohmann::json& j,
                                   std::initializer_list<std::string_view> fragments) {
  return throws_error([&] { io::Tokenizer::from_json(j.dump(), "", "bad-tokenizer.json"); },
                      "tokenizer", fragments);
}

TEST(TokenizerErrors, MissingOrUnreadableFiles) {
  EXPECT_TRUE(throws_error([] { io::Tokenizer::from_file("/nonexistent/tok"); }, "tokenizer",
                           {"/nonexistent/tok", "does not exist"}));
  const auto dir = std::filesystem::temp_directory_path() / "microllm_tokenizer_errors_empty";
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(throws_error([&] { io::Tokenizer::from_file(dir.string()); }, "tokenizer",
                           {"tokenizer.json"}));
}

TEST(TokenizerErrors, MalformedJson) {
  EXPECT_TRUE(throws_error([] { io::Tokenizer::from_json("{\"model\": ", "", "cut.json"); },
                           "tokenizer", {"cut.json", "not valid JSON"}));
  EXPECT_TRUE(throws_error([] { io::Tokenizer::from_json("[]", "", "list.json"); }, "tokenizer",
                           {"list.json", "object"}));
  EXPECT_TRUE(throws_error([] { io::Tokenizer::from_json("{}", "", "empty.json"); }, "tokenizer",
                           {"missing \"model\""}));
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  const nlohmann::json good = tiny_tokenizer_json({});
  nlohmann::json j = good;
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_TRUE(rejects(j, {"bad-tokenizer.json", "unsupported normalizer \"Lowercase\""}));
  j = good;
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}};
  EXPECT_TRUE(rejects(j, {"unsupported normalizer \"Strip\""}));
  j = good;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_TRUE(rejects(j, {"must end with ByteLevel", "\"Whitespace\""}));
  j = good;
  j["pre_tokenizer"] = nullptr;
  EXPECT_TRUE(rejects(j, {"must end with ByteLevel"}));
  j = good;
  j["pre_tokenizer"] = sequence_pre_tokenizer({{{"type", "Digits"}, {"individual_digits", true}}});
  EXPECT_TRUE(rejects(j, {"unsupported pre_tokenizer \"Digits\""}));
  j = good;
  j["model"]["type"] = "WordPiece";
  EXPECT_TRUE(rejects(j, {"unsupported model type \"WordPiece\""}));
  j = good;
  j["model"]["byte_fallback"] = true;
  EXPECT_TRUE(rejects(j, {"byte_fallback"}));
  j = good;
  j["model"]["dropout"] = 0.1;
  EXPECT_TRUE(rejects(j, {"dropout"}));
  j = good;
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_TRUE(rejects(j, {"continuing_subword_prefix"}));
  j = good;
  j["decoder"] = {{"type", "Metaspace"}};
  EXPECT_TRUE(rejects(j, {"unsupported decoder \"Metaspace\""}));
  j = good;
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  EXPECT_TRUE(rejects(j, {"unsupported post_processor \"RobertaProcessing\""}));
  j = good;
  j["truncation"] = {{"max_length", 512}};
  EXPECT_TRUE(rejects(j, {"\"truncation\""}));
  j = good;
  j["version"] = "2.0";
  EXPECT_TRUE(rejects(j, {"version"}));
}

TEST(TokenizerErrors, BadModelFields) {
  const nlohmann::json good = tiny_tokenizer_json({});
  nlohmann::json j = good;
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "zz"})});
  EXPECT_TRUE(rejects(j, {"model.merges[0]", "\"zz\"", "not in model.vocab"}));
  j = good;
  j["model"]["merges"] = nlohmann::json::array({"a b c"});
  EXPECT_TRUE(rejects(j, {"model.merges[0]", "left right"}));
  j = good;
  j["model"]["vocab"]["x"] = "seven";
  EXPECT_TRUE(rejects(j, {"vocab[\"x\"]", "integer"}));
  j = good;
  j["model"]["vocab"]["x"] = -3;
  EXPECT_TRUE(rejects(j, {"out of range"}));
  j = good;
  j["model"].erase("vocab");
  EXPECT_TRUE(rejects(j, {"missing \"vocab\""}));
  j = good;
  j["model"]["unk_token"] = "<nope>";
  EXPECT_TRUE(rejects(j, {"unk_token \"<nope>\""}));
  j = good;
  j["added_tokens"] = {{{"id", 300}}};
  EXPECT_TRUE(rejects(j, {"added_tokens[0]", "missing \"content\""}));
  j = good;
  j["added_tokens"] = {{{"id", "x"}, {"content", "<x>"}}};
  EXPECT_TRUE(rejects(j, {"malformed"}));
}

TEST(TokenizerErrors, BadSplitPatterns) {
  const nlohmann::json good = tiny_tokenizer_json({});
  nlohmann::json j = good;
  j["pre_tokenizer"] = sequence_pre_tokenizer({split_step("(unclosed")});
  EXPECT_TRUE(rejects(j, {"Split #0", "does not compile", "(unclosed"}));
  j["pre_tokenizer"] = sequence_pre_tokenizer({split_step(R"(\w+)")});
  EXPECT_TRUE(rejects(j, {"Split #0", "\\w"}));
  j["pre_tokenizer"] = sequence_pre_tokenizer({split_step(" ", "Sideways")});
  EXPECT_TRUE(rejects(j, {"unknown Split behavior \"Sideways\""}));
  j["pre_tokenizer"] = sequence_pre_tokenizer(
      {{{"type", "Split"}, {"pattern", {{"Glob", "*"}}}, {"behavior", "Isolated"}}});
  EXPECT_TRUE(rejects(j, {"pattern must be"}));
}

TEST(TokenizerErrors, BadTemplate) {
  nlohmann::json j = tiny_tokenizer_json({});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<bos>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
      {"special_tokens", nlohmann::json::object()}};
  EXPECT_TRUE(rejects(j, {"TemplateProcessing", "\"<bos>\" is not in \"special_tokens\""}));
}

TEST(TokenizerErrors, BadConfigFile) {
  const std::string json = tiny_tokenizer_json({}).dump();
  EXPECT_TRUE(throws_error([&] { io::Tokenizer::from_json(json, "{oops", "t.json"); }, "tokenizer",
                           {"t.json (config)", "not valid JSON"}));
  EXPECT_TRUE(throws_error([&] { io::Tokenizer::from_json(json, R"({"bos_token": 3})", "t.json"); },
                           "tokenizer", {"bos_token"}));
  const io::Tokenizer t = io::Tokenizer::from_json(
      json,
      R"({"tokenizer_class": "X", "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
               "add_bos_token": true, "chat_template": "{{ x }}"})",
      "t.json");
  EXPECT_EQ(t.config().tokenizer_class, "X");
  EXPECT_EQ(t.config().bos_token, "<s>");
  EXPECT_EQ(t.config().eos_token, "</s>");
  EXPECT_EQ(t.config().add_bos_token, true);
  EXPECT_EQ(t.config().chat_template, "{{ x }}");
}

TEST(TokenizerErrors, FromFileReadsTheConfigBesideTheJson) {
  const auto dir = std::filesystem::temp_directory_path() / "microllm_tokenizer_from_file";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_tokenizer_json({}).dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<e>"})";
  EXPECT_EQ(io::Tokenizer::from_file(dir.string()).config().eos_token, "<e>");
  EXPECT_EQ(io::Tokenizer::from_file((dir / "tokenizer.json").string()).encode("hi", false),
            (std::vector<int32_t>{'h', 'i'}));
  std::ofstream(dir / "tokenizer_config.json") << "not json";
  EXPECT_TRUE(throws_error([&] { io::Tokenizer::from_file(dir.string()); }, "tokenizer",
                           {"tokenizer_config.json"}));
}

}  // namespace
}  // namespace microllm::testing

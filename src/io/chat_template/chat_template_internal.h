// Shared by the chat template families (src/io/chat_template/): one render function per
// family and the Python string operations the real templates call, with Python's meaning
// (Jinja2 runs on Python `str`: `trim` is str.strip(), `split` is str.split(sep)).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "microllm/io/chat_template.h"

namespace microllm::io::chat {

// ---- families (chatml.cpp, qwen3.cpp, llama3.cpp, deepseek.cpp) ----
// `messages` is non-empty and every role is system, user or assistant (checked by render()).
std::string render_chatml(const ChatTemplate& t, std::span<const ChatMessage> messages,
                          const ChatOptions& options);
std::string render_qwen3(const ChatTemplate& t, std::span<const ChatMessage> messages,
                         const ChatOptions& options);
std::string render_llama3(const ChatTemplate& t, std::span<const ChatMessage> messages,
                          const ChatOptions& options);
std::string render_deepseek(const ChatTemplate& t, std::span<const ChatMessage> messages,
                            const ChatOptions& options);

// Qwen2.5's system prompt when the conversation has none.
inline constexpr std::string_view kQwen2_5DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// ---- Python str operations (python_str.cpp) ----
// str.strip() / lstrip() / rstrip() without arguments: removes the code points for which
// Python's str.isspace() is true (\t \n \v \f \r, U+001C..U+001F, space, U+0085, U+00A0,
// U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000). Input is valid UTF-8.
std::string_view py_strip(std::string_view s);
std::string_view py_lstrip(std::string_view s);
std::string_view py_rstrip(std::string_view s);
// str.strip(c) / lstrip(c) / rstrip(c) with a one-character argument.
std::string_view py_strip(std::string_view s, char c);
std::string_view py_lstrip(std::string_view s, char c);
std::string_view py_rstrip(std::string_view s, char c);
// s.split(sep)[0] and s.split(sep)[-1]: the text before the first / after the last `sep`
// (all of `s` when `sep` does not occur).
std::string_view py_split_first(std::string_view s, std::string_view sep);
std::string_view py_split_last(std::string_view s, std::string_view sep);
bool py_contains(std::string_view s, std::string_view needle);

// Today's local date as Python's datetime.now().strftime("%d %b %Y") writes it in the C
// locale, e.g. "05 Mar 2025" (Llama 3.2's strftime_now call).
std::string today_date_string();

}  // namespace microllm::io::chat

// ApiError::body (see openai_protocol.h): OpenAI's error object.
#include <nlohmann/json.hpp>

#include "microllm/serve/openai_protocol.h"

namespace microllm::serve {

std::string ApiError::body() const {
  const auto or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json() : nlohmann::json(s);
  };
  const nlohmann::json error = {
      {"message", message}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}};
  // Messages may quote request bytes: replace what is not UTF-8 rather than fail.
  return nlohmann::json{{"error", error}}.dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
}

}  // namespace microllm::serve

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

ApiError ApiError::invalid(std::string param, std::string message, std::string code) {
  ApiError e;
  e.status = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

ApiError ApiError::server(int status, std::string message) {
  ApiError e;
  e.status = status;
  e.type = status == 408 ? "timeout_error" : "server_error";
  e.message = std::move(message);
  return e;
}

void reject(std::string param, std::string message, std::string code) {
  throw ApiException(ApiError::invalid(std::move(param), std::move(message), std::move(code)));
}

}  // namespace microllm::serve

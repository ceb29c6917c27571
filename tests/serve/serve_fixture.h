// The committed qwen2-trained fixture (CPU, F32) served by microllm's HttpServer on a free
// loopback port, for the end-to-end serve tests; and a reader of SSE bodies.
#pragma once
#if MICROLLM_WITH_SERVER
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "microllm/model/weights.h"
#include "microllm/serve/http_server.h"

namespace microllm::testing {

using nlohmann::json;

inline const std::string kServeFixture =
    std::string(MICROLLM_SOURCE_DIR) + "/tests/fixtures/models/qwen2-trained";

inline json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// The fixture served on a free loopback port; the model attaches when attach() is called.
// With `stop_on_eos` false the engine never stops on EOS (requests run to max_tokens).
struct Served {
  explicit Served(bool stop_on_eos = true, int64_t max_num_seqs = 8, int threads = 16)
      : stop_on_eos_(stop_on_eos), max_num_seqs_(max_num_seqs), threads_(threads) {}
  bool stop_on_eos_;
  int64_t max_num_seqs_;
  int threads_;
  std::shared_ptr<const model::ModelWeights> weights = std::make_shared<const model::ModelWeights>(
      model::ModelWeights::load(kServeFixture, Device::cpu(), DType::F32));
  io::Tokenizer tokenizer = io::Tokenizer::from_file(kServeFixture);
  infer::Engine engine{weights, [this] {
                         infer::EngineOptions o;
                         o.kv_memory_bytes = 8 << 20;
                         o.max_num_seqs = max_num_seqs_;
                         if (stop_on_eos_) o.eos_token_ids = {1023};  // generation_config.json
                         return o;
                       }()};
  serve::EngineLoop loop{engine};
  serve::HttpServer server{[this] {
    serve::ServerOptions o;
    o.port = 0;
    o.threads = threads_;
    o.log_requests = false;
    return o;
  }()};
  int port = server.bind();
  std::thread thread{[this] { server.serve(); }};
  httplib::Client client{"127.0.0.1", port};

  void attach() {
    serve::ModelContext m;
    m.name = "tiny";
    m.tokenizer = &tokenizer;
    m.chat_template =
        io::ChatTemplate::from_config(tokenizer.config(), kServeFixture, io::ChatFamily::kChatml);
    m.max_model_len = engine.max_model_len();
    server.attach(loop, std::move(m));
  }
  ~Served() {
    server.stop();
    thread.join();
  }
  httplib::Result post(const std::string& path, const json& body) {
    return client.Post(path, body.dump(), "application/json");
  }
};

// The JSON objects of an SSE body, and whether it ended with [DONE].
inline std::vector<json> sse_events(const std::string& body, bool* done) {
  std::vector<json> events;
  *done = false;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line";
    if (end == std::string::npos) break;
    const std::string line = body.substr(at, end - at);
    EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
    const std::string data = line.substr(6);
    if (data == "[DONE]")
      *done = true;
    else
      events.push_back(json::parse(data));
    at = end + 2;
  }
  return events;
}

}  // namespace microllm::testing
#endif  // MICROLLM_WITH_SERVER

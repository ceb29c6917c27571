// HttpServer: `microllm serve`'s OpenAI-compatible HTTP/1.1 endpoints over cpp-httplib.
//   POST /v1/chat/completions, POST /v1/completions   (JSON, or SSE with "stream": true)
//   GET  /v1/models, GET /health, GET /metrics          (Prometheus text)
// The server listens before the model is loaded: until attach() (and once the engine loop
// stops) /health answers 503 and the completion endpoints 503 with an OpenAI error body.
// Requests are validated and tokenized on the handler thread (CompletionJob), then run by
// the one engine loop; a streaming client that disconnects has its choices aborted and their
// KV blocks freed at the loop's next turn.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "microllm/serve/completion_job.h"
#include "microllm/serve/engine_loop.h"

namespace microllm::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                   // 0: a free port the system picks
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  // The request's headers (names + values) larger than this get 431; one header line over
  // 8 KiB is a 400 already (cpp-httplib's compiled line limit).
  size_t max_header_bytes = 64u << 10;
  int threads = 512;                     // connections served at once
  int listen_backlog = 1024;             // connections waiting to be accepted
  double request_timeout_seconds = 0.0;  // > 0: a request running longer is ended
  int64_t max_n = 16;                    // `n` at most
  bool log_requests = true;              // one line per request on stderr
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the address; returns the port. Throws microllm::Error when it cannot.
  int bind();
  // Serves on the calling thread until stop().
  void serve();
  void stop();
  // Makes the model servable; `loop` and the tokenizer in `model` must outlive the server.
  void attach(EngineLoop& loop, ModelContext model);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace microllm::serve

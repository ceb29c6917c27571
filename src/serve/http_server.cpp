// HttpServer (see http_server.h): routes over cpp-httplib, JSON and SSE responses.
#include "microllm/serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "microllm/core/error.h"
#include "microllm/serve/metrics.h"

namespace microllm::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(50);

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body(), "application/json");
}

// The error of a request that ran past the server's timeout.
ApiError timed_out_error(double timeout_seconds) {
  return ApiError::server(408, "the request ran longer than the server's timeout of " +
                                   std::to_string(timeout_seconds) + " s");
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rng()));
  return std::string(prefix) + hex;
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions options;
  httplib::Server http;
  std::mutex mutex;  // guards loop and model while attach() runs
  EngineLoop* loop = nullptr;
  ModelContext model;
  std::atomic<bool> attached{false};
  Metrics metrics;
  int64_t started = static_cast<int64_t>(std::time(nullptr));
  int listen_socket = -1;  // the socket bind() listens on

  // The loop when the model is servable; else the 503 to send.
  EngineLoop* servable(httplib::Response& res) {
    if (!attached) {
      send_error(res, ApiError::server(503, "the model is loading"));
      return nullptr;
    }
    if (!loop->running()) {
      const std::string failure = loop->failure();
      send_error(res, ApiError::server(503, failure.empty() ? "the engine has stopped" : failure));
      return nullptr;
    }
    return loop;
  }

  void log(const ResponseHeader& h, const Usage& u, double ttft, double total,
           const std::string& finish) const {
    if (!options.log_requests) return;
    std::fprintf(stderr, "serve: %s prompt %lld completion %lld ttft %.3f s total %.3f s %s\n",
                 h.id.c_str(), static_cast<long long>(u.prompt_tokens),
                 static_cast<long long>(u.completion_tokens), ttft, total, finish.c_str());
  }

  void completion(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
};

// One completion request: validated and submitted here, then answered whole or streamed.
void HttpServer::Impl::completion(Endpoint endpoint, const httplib::Request& req,
                                  httplib::Response& res) {
  const Clock::time_point arrived = Clock::now();
  EngineLoop* engine_loop = servable(res);
  if (engine_loop == nullptr) return;
  std::shared_ptr<CompletionJob> job;
  bool stream = false, include_usage = false;
  try {
    ProtocolLimits limits;
    limits.model_names = {model.name};
    limits.max_n = options.max_n;
    const CompletionRequest r =
        parse_completion_request(endpoint, req.body, limits, model.defaults);
    stream = r.stream;
    include_usage = r.include_usage;
    job = std::make_shared<CompletionJob>(r, model, *engine_loop);
  } catch (const ApiException& e) {
    send_error(res, e.error());
    return;
  }
  const double queued = seconds_since(arrived);
  const bool chat = endpoint == Endpoint::chat_completions;
  const ResponseHeader header{random_id(chat ? "chatcmpl-" : "cmpl-"),
                              static_cast<int64_t>(std::time(nullptr)), model.name};
  const double timeout = options.request_timeout_seconds;
  auto timed_out = [arrived, timeout] { return timeout > 0.0 && seconds_since(arrived) > timeout; };
  auto finish_of = [](const CompletionJob& j) {
    std::string reason;
    for (const ChoiceOutput& c : j.totals()) reason = c.finish_reason.value_or("abort");
    return reason;
  };
  // The metrics of the request as it ends now.
  auto finished = [arrived, queued](const CompletionJob& j, const std::string& reason,
                                    double ttft) {
    FinishedRequest f;
    f.finish_reason = reason;
    f.prompt_tokens = j.prompt_tokens();
    f.generation_tokens = j.usage().completion_tokens;
    f.queue_seconds = queued;
    f.first_token_seconds = ttft;
    f.e2e_seconds = seconds_since(arrived);
    f.tokenize_seconds = j.tokenize_seconds();
    f.detokenize_seconds = j.detokenize_seconds();
    return f;
  };

  if (!stream) {
    double ttft = -1.0;
    try {
      while (!job->done()) {
        if (!job->poll(kPoll).empty() && ttft < 0.0) ttft = seconds_since(arrived);
        if (timed_out()) {
          job->abort();
          send_error(res, timed_out_error(timeout));
          metrics.request_done(finished(*job, "abort", ttft));
          return;
        }
      }
    } catch (const ApiException& e) {
      send_error(res, e.error());
      metrics.request_done(finished(*job, "error", ttft));
      return;
    } catch (const std::exception& e) {
      job->abort();
      send_error(res, ApiError::server(500, e.what()));
      metrics.request_done(finished(*job, "error", ttft));
      return;
    }
    res.set_content(response_json(endpoint, header, job->totals(), job->usage()),
                    "application/json");
    const std::string finish = finish_of(*job);
    metrics.request_done(finished(*job, finish, ttft));
    log(header, job->usage(), ttft, seconds_since(arrived), finish);
    return;
  }

  // Streaming: the provider runs on this connection's thread until the job is done or the
  // client is gone; each call sends what one poll brought.
  struct StreamState {
    std::vector<bool> started;  // a choice's first chunk went out
    double ttft = -1.0;
    Clock::time_point last = Clock::now();
    bool finished = false;
  };
  auto state = std::make_shared<StreamState>();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [this, job, state, header, endpoint, include_usage, arrived, timeout,
                            timed_out, finish_of, finished](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& event) {
          return sink.write(event.data(), event.size());
        };
        auto end = [&](const std::string& finish) {
          state->finished = true;
          metrics.request_done(finished(*job, finish, state->ttft));
          log(header, job->usage(), state->ttft, seconds_since(arrived), finish);
        };
        if (state->finished) return false;
        if (!sink.is_writable()) {  // the client left
          job->abort();
          end("abort");
          return false;
        }
        try {
          std::vector<ChoiceOutput> pieces = job->poll(kPoll);
          if (state->started.empty()) state->started.assign(job->totals().size(), false);
          for (ChoiceOutput& piece : pieces) {
            const auto i = static_cast<size_t>(piece.index);
            const bool first = !state->started[i];
            const bool empty = piece.text.empty() && !piece.finish_reason && piece.logprobs.empty();
            if (empty && !first) continue;  // held back by a possible stop string
            if (!write(chunk_event(endpoint, header, piece, first, include_usage))) {
              job->abort();
              end("abort");
              return false;
            }
            state->started[i] = true;
            if (state->ttft < 0.0) state->ttft = seconds_since(arrived);
            metrics.inter_token(std::chrono::duration<double>(Clock::now() - state->last).count());
            state->last = Clock::now();
          }
          if (timed_out() && !job->done()) {
            job->abort();
            write(error_event(timed_out_error(timeout)));
            sink.done();
            end("abort");
            return true;
          }
          if (job->done()) {
            if (include_usage) write(usage_event(endpoint, header, job->usage()));
            write(done_event());
            sink.done();
            end(finish_of(*job));
          }
          return true;
        } catch (const ApiException& e) {  // the engine failed mid-stream
          write(error_event(e.error()));
          sink.done();
          end("error");
          return true;
        } catch (const std::exception& e) {  // nothing may escape a content provider
          job->abort();
          write(error_event(ApiError::server(500, e.what())));
          sink.done();
          end("error");
          return true;
        }
      });
}

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  const int threads = s.options.threads;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_payload_max_length(s.options.max_body_bytes);
  s.http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    size_t bytes = 0;
    for (const auto& [name, value] : req.headers) bytes += name.size() + value.size();
    if (bytes <= s.options.max_header_bytes) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = 431;
    e.message = "the request's headers hold " + std::to_string(bytes) +
                " bytes; this server accepts at most " + std::to_string(s.options.max_header_bytes);
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  });
  s.http.set_keep_alive_max_count(1000);
  // Errors httplib produces itself (404 route, 413 body) get OpenAI's error body too.
  s.http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.status = res.status;
    e.type = res.status == 404 ? "not_found_error" : "invalid_request_error";
    e.message = res.status == 404 ? "no route " + req.method + " " + req.path
                : res.status == 413
                    ? "the request body is larger than the server accepts"
                    : "the request was not understood (HTTP " + std::to_string(res.status) + ")";
    res.set_content(e.body(), "application/json");
  });
  s.http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        ApiError e = ApiError::server(500, "");
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          e.message = ex.what();
        } catch (...) {
          e.message = "unknown error";
        }
        send_error(res, e);
      });
  s.http.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    s.completion(Endpoint::chat_completions, req, res);
  });
  s.http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    s.completion(Endpoint::completions, req, res);
  });
  s.http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    nlohmann::json data = nlohmann::json::array();
    if (s.attached)
      data.push_back({{"id", s.model.name},
                      {"object", "model"},
                      {"created", s.started},
                      {"owned_by", "microllm"},
                      {"max_model_len", s.model.max_model_len}});
    res.set_content(nlohmann::json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
  s.http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    if (!s.attached) {
      res.status = 503;
      res.set_content(R"({"status": "loading"})", "application/json");
    } else if (!s.loop->running()) {
      res.status = 503;
      res.set_content(R"({"status": "stopped"})", "application/json");
    } else {
      res.set_content(R"({"status": "ok"})", "application/json");
    }
  });
  s.http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    const LoopSnapshot snapshot = s.attached ? s.loop->snapshot() : LoopSnapshot{};
    res.set_content(s.metrics.render(snapshot), "text/plain; version=0.0.4");
  });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& s = *impl_;
  // cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when the
  // library was built): a burst of connections would overflow it. Keep its socket options
  // (SO_REUSEADDR), remember the socket, and listen again with the larger backlog (Linux
  // and the BSDs take a second listen() as a new backlog).
  s.http.set_socket_options([&s](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    s.listen_socket = sock;
  });
  const int port =
      s.options.port == 0
          ? s.http.bind_to_any_port(s.options.host)
          : (s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1);
  MICROLLM_CHECK(port > 0, "serve", "cannot listen on ", s.options.host, ":", s.options.port,
                 " (the address is in use or not available)");
  MICROLLM_CHECK(::listen(s.listen_socket, s.options.listen_backlog) == 0, "serve",
                 "cannot set the listen backlog to ", s.options.listen_backlog);
  return port;
}

void HttpServer::serve() { impl_->http.listen_after_bind(); }

void HttpServer::stop() { impl_->http.stop(); }

void HttpServer::attach(EngineLoop& loop, ModelContext model) {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.mutex);
    s.loop = &loop;
    s.model = std::move(model);
  }
  s.attached = true;
}

}  // namespace microllm::serve

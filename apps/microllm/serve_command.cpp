// `microllm serve --model DIR [--host 127.0.0.1] [--port 8000] [--served-model-name NAME]`:
// the OpenAI-compatible HTTP server (serve/http_server.h, docs/serving.md). It listens
// first (/health answers 503 while the model loads), then loads the folder, starts the one
// engine loop and serves until SIGINT or SIGTERM. Sampling is per request; the folder's
// generation_config.json gives the defaults of fields a request leaves out.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "commands.h"
#include "generation.h"
#include "microllm/core/error.h"
#include "microllm/io/chat_template.h"
#include "microllm/serve/http_server.h"

namespace microllm::app {
namespace {

struct ServeCli {
  GenerationFlags flags;
  serve::ServerOptions server;
  std::string served_model_name, family;
  int64_t max_num_seqs = 64, max_num_batched_tokens = 0, max_model_len = 0;
};

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int run_serve(ServeCli& cli) {
  resolve_model_folder(cli.flags, "serve");
  MICROLLM_CHECK(cli.server.port >= 0 && cli.server.port <= 65535, "serve",
                 "--port must be in [0, 65535], found ", cli.server.port);
  MICROLLM_CHECK(cli.max_num_seqs >= 1, "serve", "--max-num-seqs must be ≥ 1, found ",
                 cli.max_num_seqs);
  serve::HttpServer server(cli.server);
  const int port = server.bind();
  std::thread http([&] { server.serve(); });
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::fprintf(stderr, "serve: listening on http://%s:%d, loading %s\n", cli.server.host.c_str(),
               port, cli.flags.model.c_str());
  int code = 0;
  try {
    const GenerationModel m = load_generation_model(cli.flags);
    MICROLLM_CHECK(m.tokenizer.has_value(), "serve", "the model folder '", cli.flags.model,
                   "' has no tokenizer.json; the server needs a tokenizer");
    infer::EngineOptions options = engine_options(cli.flags, m, cli.max_num_seqs);
    if (cli.max_num_batched_tokens > 0) options.max_num_batched_tokens = cli.max_num_batched_tokens;
    options.max_model_len = cli.max_model_len;
    infer::Engine engine(m.weights, options);
    serve::EngineLoop loop(engine);
    serve::ModelContext model;
    std::filesystem::path folder = std::filesystem::path(cli.flags.model).lexically_normal();
    if (!folder.has_filename()) folder = folder.parent_path();  // "a/b/" is named b
    model.name = cli.served_model_name.empty() ? folder.filename().string() : cli.served_model_name;
    model.tokenizer = &*m.tokenizer;
    if (!cli.family.empty())
      model.chat_template = io::ChatTemplate::from_config(m.tokenizer->config(), cli.flags.model,
                                                          io::chat_family_from_name(cli.family));
    else if (m.tokenizer->config().chat_template)
      model.chat_template = io::ChatTemplate::from_config(m.tokenizer->config(), cli.flags.model);
    model.defaults = m.defaults;
    model.max_model_len = engine.max_model_len();
    std::fprintf(stderr, "serve: model '%s' ready (context %lld tokens, %lld KV blocks%s)\n",
                 model.name.c_str(), static_cast<long long>(model.max_model_len),
                 static_cast<long long>(engine.num_kv_blocks()),
                 model.chat_template ? "" : ", no chat template: /v1/completions only");
    server.attach(loop, std::move(model));
    while (!g_stop && loop.running()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!loop.running() && !loop.failure().empty()) {
      std::fprintf(stderr, "serve: %s\n", loop.failure().c_str());
      code = 1;
    }
    // The loop first: open requests end at once with an error (a stream gets an error
    // event), so the HTTP workers are free when the server joins them.
    loop.stop();
    server.stop();
    http.join();
  } catch (...) {
    server.stop();
    http.join();
    throw;
  }
  std::fprintf(stderr, "serve: stopped\n");
  return code;
}

}  // namespace

Command add_serve_command(CLI::App& parent) {
  auto c = std::make_shared<ServeCli>();
  CLI::App* cmd = parent.add_subcommand("serve", "OpenAI-compatible HTTP server");
  add_model_options(*cmd, c->flags);
  cmd->add_option("--host", c->server.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", c->server.port, "port to listen on (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--served-model-name", c->served_model_name,
                  "the name requests use as `model` (default: the folder's name)");
  cmd->add_option("--max-num-seqs", c->max_num_seqs, "sequences in one engine step")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", c->max_num_batched_tokens,
                  "new tokens in one engine step (default: --prefill-chunk)");
  cmd->add_option("--max-model-len", c->max_model_len,
                  "context length (default: the model's max_position_embeddings)");
  cmd->add_option("--template-family", c->family,
                  "chat template family when the folder's is missing or not recognised: " +
                      io::chat_family_names());
  cmd->add_option("--request-timeout", c->server.request_timeout_seconds,
                  "seconds a request may run; 0 = no limit")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", c->server.max_body_bytes, "largest request body accepted")
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", c->server.max_header_bytes,
                  "largest request headers accepted (names + values)")
      ->capture_default_str();
  return {cmd, [c] { return run_serve(*c); }};
}

}  // namespace microllm::app

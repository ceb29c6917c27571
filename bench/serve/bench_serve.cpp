// microllm_bench_serve: a load generator for an OpenAI-compatible server (`microllm serve`),
// for bench/serve/run_serve_bench.py. `--concurrency` client threads each send streaming
// /v1/completions requests one after another until `--requests` have been sent; every
// request has a random prompt length and a random output length (uniform, inclusive ranges),
// greedy, `ignore_eos` so that it runs to its max_tokens. Prompts are random token ids, or
// (`--prompts text`) the decoded text of random ids, which the server tokenizes again.
//
// Per request: TTFT (send → first chunk with text), end to end (send → [DONE]), TPOT
// ((end − TTFT) / (completion tokens − 1)), the gaps between its text chunks, and the usage
// the server reported. A scraper thread reads /metrics every 100 ms (KV use, running and
// waiting requests); /metrics before and after give the counters' deltas (preemptions,
// engine steps and their time, tokenization and detokenization time). Writes one JSON
// document (--out); exit 1 when a request failed or came back short.
#include <httplib.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "microllm/io/tokenizer.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1", model, out, prompts = "ids", tokenizer, prompt_len = "100:1000",
              output_len = "100:1000";
  int port = 8000, concurrency = 1;
  int64_t requests = 0, vocab = 0, seed = 0;
  double timeout_s = 600.0;
};

struct Range {
  int64_t lo = 0, hi = 0;
};

Range parse_range(const std::string& text, const char* flag) {
  const auto colon = text.find(':');
  Range r;
  try {
    r.lo = std::stoll(text.substr(0, colon));
    r.hi = colon == std::string::npos ? r.lo : std::stoll(text.substr(colon + 1));
  } catch (const std::exception&) {
    throw std::runtime_error(std::string(flag) + " takes LO:HI, found '" + text + "'");
  }
  if (r.lo < 1 || r.hi < r.lo)
    throw std::runtime_error(std::string(flag) + " needs 1 ≤ LO ≤ HI, found '" + text + "'");
  return r;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Request {
  json body;
  int64_t prompt_len = 0, max_tokens = 0;
};

struct Result {
  int64_t prompt_tokens = 0, completion_tokens = 0, chunks = 0;
  double ttft_s = -1.0, e2e_s = 0.0, start_s = 0.0;  // start: since the run began
  std::vector<double> gaps_s;                        // between text chunks
  std::string error;
};

// One streaming request; SSE events are split on blank lines and parsed as they arrive.
Result run_one(const Options& o, const Request& r, Clock::time_point run_start) {
  Result res;
  httplib::Client client(o.host, o.port);
  client.set_read_timeout(static_cast<time_t>(o.timeout_s), 0);
  client.set_connection_timeout(30, 0);
  const Clock::time_point sent = Clock::now();
  res.start_s = std::chrono::duration<double>(sent - run_start).count();
  std::string buffer;
  bool done = false;
  Clock::time_point last = sent;
  auto on_event = [&](const std::string& event) {
    if (event.rfind("data: ", 0) != 0) return;
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      done = true;
      return;
    }
    const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      res.error = "unparsable event: " + data.substr(0, 200);
      return;
    }
    if (j.contains("error")) {
      res.error = "error event: " + j["error"].dump();
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      res.prompt_tokens = j["usage"].value("prompt_tokens", 0);
      res.completion_tokens = j["usage"].value("completion_tokens", 0);
    }
    if (!j.contains("choices") || j["choices"].empty()) return;
    if (j["choices"][0].value("text", std::string()).empty()) return;
    const Clock::time_point now = Clock::now();
    if (res.ttft_s < 0.0)
      res.ttft_s = std::chrono::duration<double>(now - sent).count();
    else
      res.gaps_s.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
    ++res.chunks;
  };
  // httplib 0.11 has no POST with a content receiver: the request is built by hand.
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = r.body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    buffer.append(data, size);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      on_event(buffer.substr(0, end));
      buffer.erase(0, end + 2);
    }
    return true;
  };
  const httplib::Result response = client.send(req);
  res.e2e_s = seconds_since(sent);
  if (!response) {
    res.error = "HTTP error: " + httplib::to_string(response.error());
  } else if (response->status != 200) {
    res.error = "HTTP " + std::to_string(response->status) + ": " + buffer.substr(0, 300);
  } else if (res.error.empty() && !done) {
    res.error = "the stream ended without [DONE]";
  } else if (res.error.empty() && res.completion_tokens != r.max_tokens) {
    res.error = "completion_tokens " + std::to_string(res.completion_tokens) + ", asked for " +
                std::to_string(r.max_tokens);
  }
  return res;
}

// "name value" lines of the Prometheus text (histogram buckets and labels left out).
json scrape(const Options& o) {
  httplib::Client client(o.host, o.port);
  client.set_read_timeout(10, 0);
  json values = json::object();
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return values;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.find('{') != std::string::npos) continue;
    const auto space = line.rfind(' ');
    if (space == std::string::npos) continue;
    try {
      values[line.substr(0, space)] = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
    }
  }
  return values;
}

json summary(std::vector<double> v) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {  // linear interpolation between closest ranks (type 7)
    const double h = (static_cast<double>(v.size()) - 1.0) * p;
    const auto lo = static_cast<size_t>(h);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (h - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  double sum = 0.0;
  for (double x : v) sum += x;
  return {{"count", v.size()}, {"mean", sum / static_cast<double>(v.size())},
          {"min", v.front()},  {"p50", q(0.5)},
          {"p90", q(0.9)},     {"p99", q(0.99)},
          {"max", v.back()}};
}

std::vector<Request> make_requests(const Options& o) {
  const Range prompt = parse_range(o.prompt_len, "--prompt-len");
  const Range output = parse_range(o.output_len, "--output-len");
  std::optional<microllm::io::Tokenizer> tokenizer;
  if (o.prompts == "text") {
    if (o.tokenizer.empty()) throw std::runtime_error("--prompts text needs --tokenizer DIR");
    tokenizer = microllm::io::Tokenizer::from_file(o.tokenizer);
  } else if (o.prompts != "ids") {
    throw std::runtime_error("--prompts takes ids or text, found '" + o.prompts + "'");
  }
  if (o.vocab < 1) throw std::runtime_error("--vocab must be ≥ 1");
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<Request> requests;
  for (int64_t i = 0; i < o.requests; ++i) {
    Request r;
    r.prompt_len = uniform(prompt.lo, prompt.hi);
    r.max_tokens = uniform(output.lo, output.hi);
    std::vector<int32_t> ids(static_cast<size_t>(r.prompt_len));
    for (int32_t& id : ids) id = static_cast<int32_t>(uniform(0, o.vocab - 1));
    r.body = {{"model", o.model}, {"max_tokens", r.max_tokens},
              {"temperature", 0}, {"ignore_eos", true},
              {"stream", true},   {"stream_options", {{"include_usage", true}}}};
    if (tokenizer)
      r.body["prompt"] = tokenizer->decode(ids, /*skip_special_tokens=*/true);
    else
      r.body["prompt"] = ids;
    requests.push_back(std::move(r));
  }
  return requests;
}

int run(const Options& o) {
  if (o.concurrency < 1) throw std::runtime_error("--concurrency must be ≥ 1");
  const std::vector<Request> requests = make_requests(o);
  std::vector<Result> results(requests.size());
  const json before = scrape(o);
  if (before.empty())
    throw std::runtime_error("no /metrics at " + o.host + ":" + std::to_string(o.port));

  // The scraper: KV use and queue lengths every 100 ms while the clients run.
  std::atomic<bool> finished{false};
  std::vector<double> kv_usage, running, waiting;
  std::thread scraper([&] {
    while (!finished.load()) {
      const json m = scrape(o);
      kv_usage.push_back(m.value("microllm:kv_cache_usage_perc", 0.0));
      running.push_back(m.value("microllm:num_requests_running", 0.0));
      waiting.push_back(m.value("microllm:num_requests_waiting", 0.0));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < o.concurrency; ++c)
    clients.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < requests.size();)
        results[i] = run_one(o, requests[i], start);
    });
  for (std::thread& t : clients) t.join();
  const double wall = seconds_since(start);
  finished = true;
  scraper.join();
  const json after = scrape(o);

  json per_request = json::array();
  std::vector<double> ttft, tpot, e2e, gaps;
  int64_t prompt_tokens = 0, completion_tokens = 0, failed = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    per_request.push_back({{"prompt_len", requests[i].prompt_len},
                           {"max_tokens", requests[i].max_tokens},
                           {"prompt_tokens", r.prompt_tokens},
                           {"completion_tokens", r.completion_tokens},
                           {"chunks", r.chunks},
                           {"start_s", r.start_s},
                           {"ttft_s", r.ttft_s},
                           {"e2e_s", r.e2e_s},
                           {"error", r.error.empty() ? json(nullptr) : json(r.error)}});
    if (!r.error.empty()) {
      ++failed;
      continue;
    }
    prompt_tokens += r.prompt_tokens;
    completion_tokens += r.completion_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    if (r.completion_tokens > 1)
      tpot.push_back((r.e2e_s - r.ttft_s) / static_cast<double>(r.completion_tokens - 1));
    gaps.insert(gaps.end(), r.gaps_s.begin(), r.gaps_s.end());
  }
  json counters = json::object();
  for (const char* name : {"microllm:num_preemptions_total", "microllm:engine_steps_total",
                           "microllm:engine_step_seconds_total", "microllm:tokenize_seconds_total",
                           "microllm:detokenize_seconds_total", "microllm:prompt_tokens_total",
                           "microllm:generation_tokens_total", "microllm:prefix_cache_hits_total",
                           "microllm:prefix_cache_queries_total"})
    counters[name] = after.value(name, 0.0) - before.value(name, 0.0);
  const json doc = {
      {"config",
       {{"host", o.host},
        {"port", o.port},
        {"model", o.model},
        {"concurrency", o.concurrency},
        {"requests", o.requests},
        {"prompt_len", o.prompt_len},
        {"output_len", o.output_len},
        {"prompts", o.prompts},
        {"vocab", o.vocab},
        {"seed", o.seed}}},
      {"wall_s", wall},
      {"failed_requests", failed},
      {"prompt_tokens", prompt_tokens},
      {"completion_tokens", completion_tokens},
      {"output_tokens_per_s", static_cast<double>(completion_tokens) / wall},
      {"total_tokens_per_s", static_cast<double>(prompt_tokens + completion_tokens) / wall},
      {"requests_per_s", static_cast<double>(results.size() - static_cast<size_t>(failed)) / wall},
      {"ttft_s", summary(ttft)},
      {"tpot_s", summary(tpot)},
      {"itl_s", summary(gaps)},
      {"e2e_s", summary(e2e)},
      {"kv_cache_usage", summary(kv_usage)},
      {"running", summary(running)},
      {"waiting", summary(waiting)},
      {"counters", counters},
      {"per_request", per_request}};
  std::ofstream(o.out) << doc.dump(1) << "\n";
  std::printf(
      "concurrency %d: %zu requests in %.2f s, %.0f output tokens/s, TTFT p50 %.1f ms, "
      "ITL p50 %.2f ms, %lld failed\n",
      o.concurrency, results.size(), wall, doc["output_tokens_per_s"].get<double>(),
      ttft.empty() ? 0.0 : 1e3 * doc["ttft_s"]["p50"].get<double>(),
      gaps.empty() ? 0.0 : 1e3 * doc["itl_s"]["p50"].get<double>(), static_cast<long long>(failed));
  for (const Result& r : results)
    if (!r.error.empty()) {
      std::fprintf(stderr, "bench_serve: first failure: %s\n", r.error.c_str());
      break;
    }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"load generator for an OpenAI-compatible server (streaming /v1/completions)"};
  app.add_option("--host", o.host)->capture_default_str();
  app.add_option("--port", o.port)->capture_default_str();
  app.add_option("--model", o.model, "the served model name")->required();
  app.add_option("--concurrency", o.concurrency, "client threads")->capture_default_str();
  app.add_option("--requests", o.requests, "requests in all (default 4 × concurrency, ≥ 8)");
  app.add_option("--prompt-len", o.prompt_len, "prompt tokens LO:HI")->capture_default_str();
  app.add_option("--output-len", o.output_len, "max_tokens LO:HI")->capture_default_str();
  app.add_option("--prompts", o.prompts, "ids or text")->capture_default_str();
  app.add_option("--tokenizer", o.tokenizer, "folder with tokenizer.json (--prompts text)");
  app.add_option("--vocab", o.vocab, "prompt ids are drawn from [0, vocab)")->required();
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "seconds one request may take")->capture_default_str();
  app.add_option("--out", o.out, "JSON document")->required();
  CLI11_PARSE(app, argc, argv);
  if (o.requests == 0) o.requests = std::max<int64_t>(8, int64_t{4} * o.concurrency);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_serve: %s\n", e.what());
    return 2;
  }
}

// microllm serve under load on loopback (CPU, the qwen2-trained fixture): 200 streaming
// clients at once, and 200 more that leave after a few chunks (or before any), over 16
// request bodies (8 prompts, greedy and seeded sampling, some sharing a long prefix so
// that the prefix cache is hit while others are evicted). Every stream that completes is
// the text and finish reason that the same request gives alone; afterwards /metrics shows
// no request running or waiting and no KV block held, and the server still answers.
// The deadline below only keeps a hang from blocking the suite; it is not a timing check.
#if MICROLLM_WITH_SERVER
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <random>

#include "serve/serve_fixture.h"

using namespace microllm;
using namespace microllm::testing;
using namespace std::chrono_literals;

namespace {

// The 16 request bodies: completions of 8 prompts, greedy and seeded.
std::vector<json> request_bodies() {
  const std::string shared = "Once upon a time there was a little robot who lived in a garden ";
  const std::vector<std::string> prompts = {
      shared + "and", shared + "with a cat.", shared + "near the sea",  "The",
      "Hello there,", "A list: one, two,",    shared + shared + "then", "Why"};
  std::vector<json> bodies;
  for (const std::string& p : prompts)
    for (const bool seeded : {false, true}) {
      json b = {{"model", "tiny"}, {"prompt", p}, {"max_tokens", 12 + p.size() % 7}};
      if (seeded) {
        b["temperature"] = 0.9;
        b["top_p"] = 0.95;
        b["seed"] = static_cast<int64_t>(p.size());
      } else {
        b["temperature"] = 0;
      }
      bodies.push_back(b);
    }
  return bodies;
}

struct Outcome {
  std::string text, finish_reason;
  bool complete = false;  // [DONE] seen
  std::string failure;    // what the client saw when it did not complete
};

// One streaming request; with leave_after ≥ 0 the client closes after that many chunks.
Outcome stream(int port, json body, int leave_after) {
  body["stream"] = true;
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(300, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  std::string received;
  int chunks = 0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    received.append(data, n);
    return leave_after < 0 || ++chunks <= leave_after;
  };
  httplib::Response res;
  httplib::Error error;
  client.send(req, res, error);
  Outcome out;
  if (leave_after >= 0) return out;
  bool done = false;
  for (const json& e : sse_events(received, &done)) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const json& c = e["choices"][0];
    out.text += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) out.finish_reason = c["finish_reason"];
  }
  out.complete = done;
  if (!done)
    out.failure = "HTTP " + std::to_string(res.status) + ", " + httplib::to_string(error) + ", " +
                  std::to_string(received.size()) + " bytes: " + received.substr(0, 300);
  return out;
}

}  // namespace

TEST(ServeLoad, TwoHundredStreamsAndTwoHundredDisconnectsLeakNothing) {
  Served s(/*stop_on_eos=*/true, /*max_num_seqs=*/64, /*threads=*/512);
  s.attach();
  const std::vector<json> bodies = request_bodies();
  std::vector<Outcome> alone;
  for (const json& b : bodies) {  // each request alone, not streamed
    const auto r = s.post("/v1/completions", b);
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    const json c = json::parse(r->body)["choices"][0];
    alone.push_back({c["text"], c["finish_reason"], true});
  }

  constexpr int kStreams = 200, kLeavers = 200;
  std::mt19937 rng(7);
  std::vector<std::future<Outcome>> futures;
  std::vector<size_t> which;
  for (int i = 0; i < kStreams + kLeavers; ++i) {
    const size_t b = rng() % bodies.size();
    const int leave_after = i % 2 == 1 ? static_cast<int>(rng() % 4) : -1;  // interleaved
    which.push_back(b);
    futures.push_back(std::async(std::launch::async, stream, s.port, bodies[b], leave_after));
  }
  const auto deadline = std::chrono::steady_clock::now() + 600s;  // a hang guard only
  int completed = 0;
  for (size_t i = 0; i < futures.size(); ++i) {
    ASSERT_EQ(futures[i].wait_until(deadline), std::future_status::ready) << "client " << i;
    const Outcome o = futures[i].get();
    if (i % 2 == 1) continue;  // a leaver
    ASSERT_TRUE(o.complete) << "client " << i << ": " << o.failure;
    EXPECT_EQ(o.text, alone[which[i]].text) << "client " << i << " body " << which[i];
    EXPECT_EQ(o.finish_reason, alone[which[i]].finish_reason) << "client " << i;
    ++completed;
  }
  EXPECT_EQ(completed, kStreams);

  // Every leaver's request is aborted and its blocks freed within a few steps.
  std::string m;
  bool idle = false;
  for (int i = 0; i < 500 && !idle; ++i) {
    m = s.client.Get("/metrics")->body;
    idle = m.find("microllm:num_requests_running 0\n") != std::string::npos &&
           m.find("microllm:num_requests_waiting 0\n") != std::string::npos &&
           m.find("microllm:kv_cache_usage_perc 0\n") != std::string::npos;
    if (!idle) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(idle) << m;
  EXPECT_EQ(s.engine.num_free_kv_blocks(), s.engine.num_kv_blocks());
  EXPECT_NE(m.find("finished_reason=\"abort\"}"), std::string::npos) << m;
  EXPECT_EQ(m.find("microllm:prefix_cache_hits_total 0\n"), std::string::npos) << m;
  // The host work off the engine thread and the engine's own time are counted.
  for (const char* counter :
       {"microllm:tokenize_seconds_total 0\n", "microllm:detokenize_seconds_total 0\n",
        "microllm:engine_steps_total 0\n", "microllm:engine_step_seconds_total 0\n"})
    EXPECT_EQ(m.find(counter), std::string::npos) << counter << " in\n" << m;
  EXPECT_NE(m.find("microllm:engine_step_seconds_total "), std::string::npos) << m;
  EXPECT_EQ(s.client.Get("/health")->status, 200);
  const auto again = s.post("/v1/completions", bodies[0]);
  ASSERT_TRUE(again && again->status == 200);
  EXPECT_EQ(json::parse(again->body)["choices"][0]["text"], alone[0].text);
}
#endif  // MICROLLM_WITH_SERVER

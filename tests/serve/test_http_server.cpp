// HttpServer end to end on loopback with the committed qwen2-trained fixture (CPU, F32):
// /health and the completion endpoints answer 503 until the model is attached; greedy
// completions over HF's prompt ids give the text of transformers' greedy ids (expected.json,
// made by transformers' generate); a streamed chat is the non-streamed chat cut into OpenAI chunks
// (one id, role first, finish_reason last, usage, [DONE]); seeded n = 3 is reproducible; bad
// requests get OpenAI error bodies before any stream; a client that leaves mid-stream has
// its request aborted and its KV blocks freed (/metrics).
#if MICROLLM_WITH_SERVER
#include <gtest/gtest.h>

#include "serve/serve_fixture.h"

using namespace microllm;
using namespace microllm::testing;
using namespace std::chrono_literals;

TEST(HttpServer, UnavailableUntilAttachedThenHealthy) {
  Served s;
  auto health = s.client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  auto early = s.post("/v1/completions", {{"model", "tiny"}, {"prompt", "a"}});
  ASSERT_TRUE(early);
  EXPECT_EQ(early->status, 503);
  EXPECT_EQ(json::parse(early->body)["error"]["type"], "server_error");
  s.attach();
  health = s.client.Get("/health");
  EXPECT_EQ(health->status, 200);
  const json models = json::parse(s.client.Get("/v1/models")->body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["object"], "model");
  const auto missing = s.client.Get("/v1/nothing");
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(json::parse(missing->body).contains("error"));
}

TEST(HttpServer, GreedyCompletionsAreTransformersGreedyText) {
  Served s;
  s.attach();
  const json expected = read_json(kServeFixture + "/expected.json");
  int checked = 0;
  for (const json& p : expected["prompts"]) {
    const auto n = static_cast<int64_t>(p["hf_ids"].size());
    const auto r = s.post(
        "/v1/completions",
        {{"model", "tiny"}, {"prompt", p["prompt_ids"]}, {"max_tokens", n}, {"temperature", 0}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json body = json::parse(r->body);
    EXPECT_EQ(body["object"], "text_completion");
    // HF's ids, decoded without special tokens as OpenAI's text is (the HF-exact decoder).
    const std::vector<int32_t> hf_ids = p["hf_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(body["choices"][0]["text"], s.tokenizer.decode(hf_ids, true)) << p["source"];
    EXPECT_EQ(body["choices"][0]["finish_reason"], p["hf_finish"]) << p["source"];
    EXPECT_EQ(body["usage"]["prompt_tokens"], p["prompt_ids"].size());
    EXPECT_EQ(body["usage"]["completion_tokens"], n);
    if (++checked == 3) break;
  }
  EXPECT_EQ(checked, 3);
}

TEST(HttpServer, StreamedChatIsTheWholeChatInChunks) {
  Served s;
  s.attach();
  const json request = {{"model", "tiny"},
                        {"messages", {{{"role", "user"}, {"content", "The model"}}}},
                        {"max_tokens", 12},
                        {"temperature", 0}};
  const auto whole = s.post("/v1/chat/completions", request);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const json w = json::parse(whole->body);
  EXPECT_EQ(w["object"], "chat.completion");
  EXPECT_EQ(w["choices"][0]["message"]["role"], "assistant");
  json streamed = request;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const auto r = s.post("/v1/chat/completions", streamed);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  bool done = false;
  const std::vector<json> events = sse_events(r->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json& e = events[i];
    EXPECT_EQ(e["id"], events[0]["id"]);
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_TRUE(e["usage"].is_null());
    const json& c = e["choices"][0];
    if (i == 0) EXPECT_EQ(c["delta"]["role"], "assistant");
    const bool last = i + 2 == events.size();
    EXPECT_EQ(c["finish_reason"].is_null(), !last) << e.dump();
    if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, w["choices"][0]["message"]["content"]);
  const json& usage = events.back();
  EXPECT_EQ(usage["choices"], json::array());
  // The same prompt again: the prefix cache served (33 − 2) / 16 = 1 block of its 33 ids.
  json expected = w["usage"];
  EXPECT_EQ(expected["prompt_tokens_details"]["cached_tokens"], 0);
  expected["prompt_tokens_details"]["cached_tokens"] = 16;
  EXPECT_EQ(usage["usage"], expected);
}

TEST(HttpServer, SeededChoicesAreReproducible) {
  Served s;
  s.attach();
  const json request = {{"model", "tiny"}, {"prompt", "The"},    {"max_tokens", 10}, {"n", 3},
                        {"seed", 1234},    {"temperature", 1.0}, {"logprobs", 2}};
  const json a = json::parse(s.post("/v1/completions", request)->body);
  const json b = json::parse(s.post("/v1/completions", request)->body);
  ASSERT_EQ(a["choices"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["text"], b["choices"][i]["text"]);
    const json& lp = a["choices"][i]["logprobs"];
    EXPECT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
    for (const json& v : lp["token_logprobs"]) EXPECT_LE(v.get<double>(), 0.0);
    for (const json& top : lp["top_logprobs"]) EXPECT_EQ(top.size(), 2u);
  }
  EXPECT_EQ(a["usage"]["completion_tokens"], 30);
}

TEST(HttpServer, BadRequestsGetErrorsBeforeAnyStream) {
  Served s;
  s.attach();
  const auto malformed = s.client.Post("/v1/chat/completions", "{nope", "application/json");
  EXPECT_EQ(malformed->status, 400);
  EXPECT_EQ(json::parse(malformed->body)["error"]["type"], "invalid_request_error");
  const auto unknown =
      s.post("/v1/completions", {{"model", "gpt-4"}, {"prompt", "x"}, {"stream", true}});
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(json::parse(unknown->body)["error"]["code"], "model_not_found");
  const auto too_long =
      s.post("/v1/completions",
             {{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 1000000}, {"stream", true}});
  EXPECT_EQ(too_long->status, 400);
  EXPECT_EQ(json::parse(too_long->body)["error"]["code"], "context_length_exceeded");
  const auto bad_id = s.post("/v1/completions", {{"model", "tiny"}, {"prompt", {5, 99999}}});
  EXPECT_EQ(bad_id->status, 400);
  EXPECT_EQ(json::parse(bad_id->body)["error"]["param"], "prompt");
}

// Header limits: one line over cpp-httplib's 8 KiB is a 400, headers over max_header_bytes
// (64 KiB) in all a 431, both with OpenAI's error body; the server answers on afterwards.
TEST(HttpServer, OversizedHeadersAreRefused) {
  Served s;
  s.attach();
  const std::string body = R"({"model": "tiny", "prompt": "x", "max_tokens": 1})";
  httplib::Headers one_long{{"X-Long", std::string(10000, 'a')}};
  const auto long_line = s.client.Post("/v1/completions", one_long, body, "application/json");
  ASSERT_TRUE(long_line);
  EXPECT_EQ(long_line->status, 400);
  EXPECT_EQ(json::parse(long_line->body)["error"]["type"], "invalid_request_error");
  httplib::Headers many;
  for (int i = 0; i < 20; ++i) many.emplace("X-Part-" + std::to_string(i), std::string(4000, 'b'));
  const auto too_many = s.client.Post("/v1/completions", many, body, "application/json");
  ASSERT_TRUE(too_many);
  EXPECT_EQ(too_many->status, 431);
  EXPECT_NE(json::parse(too_many->body)["error"]["message"].get<std::string>().find("65536"),
            std::string::npos);
  const auto fine = s.client.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200);
}

TEST(HttpServer, AClientThatLeavesMidStreamFreesItsRequest) {
  Served s(/*stop_on_eos=*/false);
  s.attach();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = json{
      {"model", "tiny"},
      {"prompt", "The"},
      {"max_tokens", 200},
      {"stream", true},
      {"temperature",
       0}}.dump();
  int chunks = 0;
  std::string received;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    received.append(data, n);
    return ++chunks < 2;
  };
  httplib::Client leaving("127.0.0.1", s.port);
  httplib::Response res;
  httplib::Error error;
  leaving.send(req, res, error);  // stops reading after the second piece and closes
  EXPECT_GE(chunks, 2) << res.status << " " << received;
  bool freed = false;
  for (int i = 0; i < 300 && !freed; ++i) {
    const std::string m = s.client.Get("/metrics")->body;
    freed = m.find("microllm:num_requests_running 0\n") != std::string::npos &&
            m.find("microllm:kv_cache_usage_perc 0\n") != std::string::npos &&
            m.find("finished_reason=\"abort\"} 1") != std::string::npos;
    if (!freed) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(freed) << s.client.Get("/metrics")->body;
  EXPECT_EQ(s.client.Get("/health")->status, 200);
}
#endif  // MICROLLM_WITH_SERVER

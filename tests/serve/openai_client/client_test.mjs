// The official OpenAI client (npm `openai`) against a running `microllm serve`: every call
// goes through the client's own request building, response parsing and SSE reader, so a
// shape it does not accept fails here. Usage: node client_test.mjs BASE_URL MODEL
// (run_client_test.sh starts the server on the committed qwen2-trained fixture).
import assert from "node:assert/strict";
import OpenAI from "openai";

const [base, model] = process.argv.slice(2);
if (!base || !model) {
  console.error("usage: node client_test.mjs BASE_URL MODEL");
  process.exit(2);
}
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
const chat = (extra) => ({ model, messages: [{ role: "user", content: "The model" }], ...extra });

const tests = [];
const test = (name, fn) => tests.push([name, fn]);

// The client raises `errorClass` with HTTP `status` for `call`, and the error names `param`.
async function rejects(call, errorClass, status, param) {
  let caught = null;
  try {
    const result = await call();
    if (result && typeof result[Symbol.asyncIterator] === "function") for await (const _ of result);
  } catch (e) {
    caught = e;
  }
  assert.ok(caught, "the call did not fail");
  assert.ok(caught instanceof errorClass, `expected ${errorClass.name}, got ${caught?.constructor?.name}: ${caught?.message}`);
  assert.equal(caught.status, status);
  if (param !== undefined) assert.equal(caught.param, param);
}

test("models.list names the served model", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
});

test("chat: a whole response with usage", async () => {
  const r = await client.chat.completions.create(chat({ max_tokens: 8, temperature: 0 }));
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
});

test("chat: the stream is the whole response, usage last", async () => {
  const whole = await client.chat.completions.create(chat({ max_tokens: 12, temperature: 0 }));
  const stream = await client.chat.completions.create(
    chat({ max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } }));
  let text = "", finish = null, usage = null, ids = new Set(), chunks = 0;
  for await (const chunk of stream) {
    ids.add(chunk.id);
    chunks += 1;
    if (chunk.choices.length === 0) {
      usage = chunk.usage;
      continue;
    }
    assert.equal(chunk.usage, null);
    assert.equal(finish, null, "a chunk after the finish_reason");
    text += chunk.choices[0].delta.content ?? "";
    finish = chunk.choices[0].finish_reason;
  }
  assert.equal(ids.size, 1);
  assert.ok(chunks >= 2);
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage, whole.usage);
});

test("completions: whole and streamed agree", async () => {
  const req = { model, prompt: "The", max_tokens: 10, temperature: 0 };
  const whole = await client.completions.create(req);
  assert.equal(whole.object, "text_completion");
  let text = "";
  for await (const chunk of await client.completions.create({ ...req, stream: true }))
    text += chunk.choices[0]?.text ?? "";
  assert.equal(text, whole.choices[0].text);
});

test("stop strings are cut and end the choice", async () => {
  const free = await client.completions.create({ model, prompt: "The", max_tokens: 30, temperature: 0 });
  const text = free.choices[0].text;
  // A stop string taken from the free-running text: the answer is the text before it.
  const cut = text.slice(3).search(/\S/);
  assert.ok(text.length >= 6 && cut >= 0, `the greedy text is too short to stop in: ${JSON.stringify(text)}`);
  const stop = text.slice(3 + cut, 3 + cut + 2);
  const at = text.indexOf(stop);
  const r = await client.completions.create({ model, prompt: "The", max_tokens: 30, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].text, text.slice(0, at));
  assert.equal(r.choices[0].finish_reason, "stop");
});

test("n = 3 with a seed: three choices, reproducible", async () => {
  const req = { model, prompt: "The", max_tokens: 8, n: 3, seed: 7, temperature: 1 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
});

test("chat logprobs: one entry per token, top alternatives", async () => {
  const r = await client.chat.completions.create(chat({ max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3 }));
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(Array.isArray(t.bytes));
    // Greedy: the sampled token is the most likely one.
    assert.ok(t.logprob >= t.top_logprobs[0].logprob - 1e-6);
  }
});

test("bad requests raise the client's error classes", async () => {
  await rejects(() => client.chat.completions.create({ ...chat(), model: "gpt-4" }), OpenAI.NotFoundError, 404, "model");
  await rejects(() => client.chat.completions.create(chat({ n: 0 })), OpenAI.BadRequestError, 400, "n");
  await rejects(() => client.chat.completions.create(chat({ temperature: -1 })), OpenAI.BadRequestError, 400, "temperature");
  await rejects(() => client.chat.completions.create(chat({ stop: ["a", "b", "c", "d", "e"] })), OpenAI.BadRequestError, 400, "stop");
  await rejects(() => client.completions.create({ model, prompt: "x", max_tokens: 100000 }), OpenAI.BadRequestError, 400, "max_tokens");
  // Before any stream starts: the error is the response, not an event.
  await rejects(() => client.chat.completions.create(chat({ stream: true, top_p: 2 })), OpenAI.BadRequestError, 400, "top_p");
  await rejects(() => client.chat.completions.create({ model, messages: [], stream: true }), OpenAI.BadRequestError, 400, "messages");
});

let failed = 0;
for (const [name, fn] of tests) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}
console.log(`${tests.length - failed} of ${tests.length} passed`);
process.exit(failed === 0 ? 0 : 1);

// The node oracle of the chat template test: renders every case of a JSONL file (written by
// make_chat_cases.py) with a real chat_template through @huggingface/jinja (the Jinja of
// transformers.js), passing what transformers' apply_chat_template passes, and writes one
// JSON string (the prompt) per line.
//
//   node chat_oracle.mjs --modules DIR --config tokenizer_config.json --cases cases.jsonl \
//       --out expected.jsonl
//
// DIR holds node_modules/@huggingface/jinja (installed by run_chat_parity.sh with `npm ci`
// from this folder's package.json + package-lock.json). The variables, as transformers
// (utils/chat_template_utils.py, render_jinja_template) sets them: messages, tools = None,
// documents = None, add_generation_prompt, the special tokens the config defines (bos_token,
// eos_token, pad_token, unk_token), the extra kwargs the case carries (enable_thinking,
// date_string). The functions transformers adds, raise_exception (throws) and strftime_now
// (datetime.now().strftime), @huggingface/jinja defines itself with the same meaning (it
// refuses to have them redefined): its strftime_now formats the local time, month names from
// Intl in the default locale ("Jan" ... "Dec" in English, as Python's C locale writes them).
// The Jinja2 options transformers sets, trim_blocks and lstrip_blocks, are its defaults.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

function args() {
  const out = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, "")] = argv[i + 1];
  for (const key of ["modules", "config", "cases", "out"])
    if (!out[key]) throw new Error(`chat_oracle.mjs: missing --${key}`);
  return out;
}

// tokenizer_config.json tokens are strings or {"__type": "AddedToken", "content": ...}.
function token(value) {
  if (value === undefined || value === null) return undefined;
  return typeof value === "string" ? value : value.content;
}

const a = args();
const require = createRequire(path.join(path.resolve(a.modules), "package.json"));
const { Template } = require("@huggingface/jinja");
const config = JSON.parse(fs.readFileSync(a.config, "utf8"));
if (typeof config.chat_template !== "string") throw new Error(`${a.config}: no chat_template string`);
const template = new Template(config.chat_template);
const specials = {};
for (const key of ["bos_token", "eos_token", "pad_token", "unk_token"]) {
  const value = token(config[key]);
  if (value !== undefined) specials[key] = value;
}

const lines = fs.readFileSync(a.cases, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
for (const line of lines) {
  const c = JSON.parse(line);
  const variables = {
    messages: c.messages, tools: null, documents: null,
    add_generation_prompt: c.add_generation_prompt,
    ...specials,
  };
  if (c.enable_thinking !== undefined) variables.enable_thinking = c.enable_thinking;
  if (c.date_string !== undefined) variables.date_string = c.date_string;
  out.push(JSON.stringify(template.render(variables)));
}
fs.writeFileSync(a.out, out.join("\n") + (out.length ? "\n" : ""));
console.error(`chat_oracle.mjs: ${a.config}: ${out.length} cases`);

// The node oracle of the tokenizer parity test: encodes every string of a JSONL corpus with
// @lenml/tokenizers (a JavaScript port of Hugging Face tokenizers, the transformers.js
// tokenizer code) and writes the expected ids, one JSON object per line:
//   {"plain": [ids without special tokens], "special": [ids with add_special_tokens]}
//
//   node oracle.mjs --modules DIR --tokenizer TOKDIR --corpus corpus.jsonl --out expected.jsonl
//
// DIR holds node_modules/@lenml/tokenizers (installed by run_parity.sh with `npm ci` from
// this folder's package.json + package-lock.json); TOKDIR holds tokenizer.json and
// tokenizer_config.json. Each corpus line is an object whose "text" is encoded.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";

function args() {
  const out = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, "")] = argv[i + 1];
  for (const key of ["modules", "tokenizer", "corpus", "out"])
    if (!out[key]) throw new Error(`oracle.mjs: missing --${key}`);
  return out;
}

const a = args();
const require = createRequire(path.join(path.resolve(a.modules), "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const readJson = (file) => JSON.parse(fs.readFileSync(path.join(a.tokenizer, file), "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: readJson("tokenizer.json"),
  tokenizerConfig: readJson("tokenizer_config.json"),
});

const out = fs.createWriteStream(a.out);
const lines = readline.createInterface({ input: fs.createReadStream(a.corpus, "utf8"), crlfDelay: Infinity });
let count = 0;
for await (const line of lines) {
  if (line.length === 0) continue;
  const { text } = JSON.parse(line);
  const plain = tokenizer.encode(text, { add_special_tokens: false });
  const special = tokenizer.encode(text, { add_special_tokens: true });
  if (!out.write(JSON.stringify({ plain, special }) + "\n")) await new Promise((r) => out.once("drain", r));
  ++count;
}
await new Promise((resolve) => out.end(resolve));
console.error(`oracle.mjs: ${a.tokenizer}: ${count} strings`);

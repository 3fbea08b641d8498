// Ordinary calls a vLLM user makes with the official OpenAI SDK for Node,
// run against `rllm serve` by TestOpenAINodeSDK. Each case prints one JSON
// line {name, ok, error}. Environment: OPENAI_SDK (path of the installed
// openai package), BASE_URL (the server's /v1), MODEL.
import { pathToFileURL } from 'node:url';
import path from 'node:path';
import assert from 'node:assert/strict';

const { default: OpenAI } = await import(pathToFileURL(path.join(process.env.OPENAI_SDK, 'index.mjs')).href);
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const model = process.env.MODEL;
const user = (content) => [{ role: 'user', content }];

const cases = [];
const test = (name, fn) => cases.push({ name, fn });

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

async function expectError(promise, status, param) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status);
    if (param !== undefined) assert.equal(e.param, param);
    assert.ok(typeof e.message === 'string' && e.message.length > 0);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

// ---- /v1/completions ----
test('completions: string prompt', async () => {
  const r = await client.completions.create({ model, prompt: '3+4=', max_tokens: 5, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, model);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.prompt_tokens, 4);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});
test('completions: token-id prompt with return_token_ids', async () => {
  const r = await client.completions.create({ model, prompt: [259, 51, 43, 52, 61], max_tokens: 4, return_token_ids: true });
  assert.deepEqual(r.choices[0].prompt_token_ids, [259, 51, 43, 52, 61]);
  assert.ok(r.choices[0].token_ids.length >= 1);
});
test('completions: list of prompts', async () => {
  const r = await client.completions.create({ model, prompt: ['a', 'b'], max_tokens: 2 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
});
test('completions: n=2', async () => {
  const r = await client.completions.create({ model, prompt: 'x', max_tokens: 3, n: 2, seed: 1 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
});
test('completions: logprobs 3', async () => {
  const r = await client.completions.create({ model, prompt: 'ab', max_tokens: 4, logprobs: 3, seed: 2 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.tokens.length, lp.text_offset.length);
  for (const top of lp.top_logprobs) assert.ok(Object.keys(top).length >= 3, JSON.stringify(top));
});
test('completions: logprobs 0', async () => {
  const r = await client.completions.create({ model, prompt: 'ab', max_tokens: 2, logprobs: 0 });
  for (const top of r.choices[0].logprobs.top_logprobs) assert.equal(Object.keys(top).length, 1);
});
test('completions: stop string', async () => {
  const r = await client.completions.create({ model, prompt: 'q', max_tokens: 8, temperature: 0, logit_bias: { 97: 100 }, stop: 'aa' });
  assert.equal(r.choices[0].text, '');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].stop_reason, 'aa');
});
test('completions: stop list', async () => {
  const r = await client.completions.create({ model, prompt: 'q', max_tokens: 8, temperature: 0, logit_bias: { 98: 100 }, stop: ['zz', 'bbb'] });
  assert.equal(r.choices[0].stop_reason, 'bbb');
});
test('completions: seed is deterministic', async () => {
  const p = { model, prompt: 'hello', max_tokens: 8, seed: 42, temperature: 1 };
  const [a, b] = [await client.completions.create(p), await client.completions.create(p)];
  assert.equal(a.choices[0].text, b.choices[0].text);
});
test('completions: echo', async () => {
  const r = await client.completions.create({ model, prompt: 'abc', max_tokens: 2, echo: true });
  assert.ok(r.choices[0].text.startsWith('abc'));
});
test('completions: streaming iterator', async () => {
  const p = { model, prompt: 'stream me', max_tokens: 10, seed: 7 };
  const whole = await client.completions.create(p);
  const chunks = await collect(await client.completions.create({ ...p, stream: true }));
  assert.equal(chunks.map((c) => c.choices[0]?.text ?? '').join(''), whole.choices[0].text);
  assert.equal(chunks.at(-1).choices[0].finish_reason, whole.choices[0].finish_reason);
});
test('completions: stream include_usage', async () => {
  const chunks = await collect(await client.completions.create({ model, prompt: 'u', max_tokens: 3, ignore_eos: true, stream: true, stream_options: { include_usage: true } }));
  const last = chunks.at(-1);
  assert.equal(last.choices.length, 0);
  assert.equal(last.usage.completion_tokens, 3);
});
test('completions: stream n=2 with logprobs', async () => {
  const chunks = await collect(await client.completions.create({ model, prompt: 'n', max_tokens: 4, n: 2, logprobs: 2, stream: true, seed: 3 }));
  const tokens = { 0: 0, 1: 0 };
  for (const c of chunks) for (const ch of c.choices) tokens[ch.index] += ch.logprobs.tokens.length;
  assert.ok(tokens[0] > 0 && tokens[1] > 0, JSON.stringify(tokens));
});
test('completions: logit_bias', async () => {
  const r = await client.completions.create({ model, prompt: 'q', max_tokens: 3, temperature: 0, logit_bias: { 120: 100 }, ignore_eos: true });
  assert.equal(r.choices[0].text, 'xxx');
});
test('completions: vLLM sampling extras', async () => {
  const r = await client.completions.create({ model, prompt: 'q', max_tokens: 5, top_k: 5, min_p: 0.05, min_tokens: 5, seed: 1 });
  assert.equal(r.usage.completion_tokens, 5);
});
test('completions: stop_token_ids', async () => {
  const r = await client.completions.create({ model, prompt: 'q', max_tokens: 5, temperature: 0, logit_bias: { 121: 100 }, stop_token_ids: [121] });
  assert.equal(r.choices[0].stop_reason, 121);
  assert.equal(r.choices[0].text, '');
});
test('completions: prompt_logprobs', async () => {
  const r = await client.completions.create({ model, prompt: 'abc', max_tokens: 1, prompt_logprobs: 2 });
  const pl = r.choices[0].prompt_logprobs;
  assert.equal(pl.length, 3);
  assert.equal(pl[0], null);
  assert.ok('98' in pl[1]);
});
test('completions: max_tokens over the context is a 400', async () => {
  await expectError(client.completions.create({ model, prompt: 'q', max_tokens: 100000 }), 400, 'max_tokens');
});
test('completions: unknown model is a 404', async () => {
  const e = await expectError(client.completions.create({ model: 'gpt-4', prompt: 'q' }), 404, 'model');
  assert.ok(e instanceof OpenAI.NotFoundError);
});

// ---- /v1/chat/completions ----
test('chat: basic', async () => {
  const r = await client.chat.completions.create({ model, messages: user('3+4='), max_tokens: 5 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.usage.prompt_tokens > 0);
});
test('chat: system and user', async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'system', content: 'be brief' }, ...user('hi')], max_tokens: 3 });
  assert.equal(r.choices.length, 1);
});
test('chat: content as text parts', async () => {
  const parts = await client.chat.completions.create({ model, messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }], max_tokens: 1, return_token_ids: true });
  const joined = await client.chat.completions.create({ model, messages: user('a\nb'), max_tokens: 1, return_token_ids: true });
  assert.deepEqual(parts.prompt_token_ids, joined.prompt_token_ids);
});
test('chat: n=2', async () => {
  const r = await client.chat.completions.create({ model, messages: user('x'), max_tokens: 3, n: 2 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
});
test('chat: logprobs with top_logprobs 3', async () => {
  const r = await client.chat.completions.create({ model, messages: user('x'), max_tokens: 4, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.ok(content.length > 0);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(Array.isArray(e.bytes));
  }
});
test('chat: logit_bias', async () => {
  const r = await client.chat.completions.create({ model, messages: user('x'), max_tokens: 3, temperature: 0, logit_bias: { 113: 100 }, ignore_eos: true });
  assert.equal(r.choices[0].message.content, 'qqq');
});
test('chat: max_completion_tokens', async () => {
  const r = await client.chat.completions.create({ model, messages: user('x'), max_completion_tokens: 2, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 2);
  assert.equal(r.choices[0].finish_reason, 'length');
});
test('chat: stop', async () => {
  const r = await client.chat.completions.create({ model, messages: user('x'), max_tokens: 6, temperature: 0, logit_bias: { 97: 100 }, stop: ['aa'] });
  assert.equal(r.choices[0].message.content, '');
  assert.equal(r.choices[0].finish_reason, 'stop');
});
test('chat: seed is deterministic', async () => {
  const p = { model, messages: user('seed'), max_tokens: 8, seed: 9 };
  const [a, b] = [await client.chat.completions.create(p), await client.chat.completions.create(p)];
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});
test('chat: streaming iterator', async () => {
  const p = { model, messages: user('stream'), max_tokens: 10, seed: 4 };
  const whole = await client.chat.completions.create(p);
  const chunks = await collect(await client.chat.completions.create({ ...p, stream: true }));
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), whole.choices[0].message.content);
  assert.equal(chunks.at(-1).choices[0].finish_reason, whole.choices[0].finish_reason);
});
test('chat: stream include_usage', async () => {
  const chunks = await collect(await client.chat.completions.create({ model, messages: user('u'), max_tokens: 3, ignore_eos: true, stream: true, stream_options: { include_usage: true } }));
  assert.equal(chunks.at(-1).choices.length, 0);
  assert.equal(chunks.at(-1).usage.completion_tokens, 3);
});
test('chat: stream n=2 with logprobs', async () => {
  const chunks = await collect(await client.chat.completions.create({ model, messages: user('n'), max_tokens: 4, n: 2, logprobs: true, top_logprobs: 2, stream: true }));
  const entries = { 0: 0, 1: 0 };
  for (const c of chunks) for (const ch of c.choices) entries[ch.index] += ch.logprobs?.content?.length ?? 0;
  assert.ok(entries[0] > 0 && entries[1] > 0, JSON.stringify(entries));
});
test('chat: stream with continuous usage stats', async () => {
  const chunks = await collect(await client.chat.completions.create({ model, messages: user('c'), max_tokens: 3, ignore_eos: true, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } }));
  for (const c of chunks) assert.ok(c.usage && c.usage.prompt_tokens > 0, JSON.stringify(c));
  assert.equal(chunks.at(-1).usage.completion_tokens, 3);
});
test('chat: stream() helper', async () => {
  const p = { model, messages: user('helper'), max_tokens: 8, seed: 5 };
  const whole = await client.chat.completions.create(p);
  const stream = client.chat.completions.stream(p);
  let deltas = '';
  stream.on('content', (delta) => { deltas += delta; });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
  assert.equal(deltas, whole.choices[0].message.content);
});
test('chat: stream() helper with n=2 and logprobs', async () => {
  const final = await client.chat.completions.stream({ model, messages: user('h2'), max_tokens: 4, n: 2, logprobs: true, top_logprobs: 3 }).finalChatCompletion();
  assert.equal(final.choices.length, 2);
  for (const c of final.choices) {
    assert.ok(c.logprobs.content.length > 0);
    assert.equal(c.logprobs.content[0].top_logprobs.length, 3);
  }
});
test('chat: withResponse headers', async () => {
  const { data, response } = await client.chat.completions.create({ model, messages: user('h'), max_tokens: 1 }).withResponse();
  assert.equal(response.status, 200);
  assert.equal(response.headers.get('x-weight-version'), data.metadata.weight_version);
});
test('chat: return_token_ids', async () => {
  const r = await client.chat.completions.create({ model, messages: user('ids'), max_tokens: 3, return_token_ids: true });
  assert.ok(r.prompt_token_ids.length > 0);
  assert.equal(r.choices[0].token_ids.length, r.usage.completion_tokens);
});
test('chat: continue_final_message', async () => {
  const r = await client.chat.completions.create({ model, messages: [...user('x'), { role: 'assistant', content: 'The answer is' }], max_tokens: 2, add_generation_prompt: false, continue_final_message: true, return_token_ids: true });
  assert.notEqual(r.prompt_token_ids.at(-1), 260);
});
test('chat: a forced tool_choice is refused with a 400', async () => {
  await expectError(client.chat.completions.create({ model, messages: user('x'), tools: [{ type: 'function', function: { name: 'f', parameters: {} } }], tool_choice: 'required' }), 400, 'tool_choice');
});
test('chat: frequency_penalty is refused with a 400', async () => {
  await expectError(client.chat.completions.create({ model, messages: user('x'), frequency_penalty: 0.5 }), 400, 'frequency_penalty');
});
test('chat: image parts are refused with a 400', async () => {
  await expectError(client.chat.completions.create({ model, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] }), 400, 'messages[0].content[0].type');
});

// ---- other routes and client behaviour ----
test('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
});
test('abort a stream', async () => {
  // A long reply, so the stream is still open when the client aborts: on a
  // busy machine a short one could end as the abort lands, a race inside
  // the SDK's reader that left this case's promise unsettled.
  const stream = await client.chat.completions.create({ model, messages: user('abort'), max_tokens: 100, ignore_eos: true, stream: true });
  let n = 0;
  try {
    for await (const _ of stream) {
      if (++n === 2) stream.controller.abort();
    }
  } catch (e) {
    if (!(e instanceof OpenAI.APIUserAbortError)) throw e;
  }
  assert.ok(n >= 2);
  // The server serves the next request after the aborted one.
  const r = await client.chat.completions.create({ model, messages: user('after abort'), max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});

let failed = 0;
for (const { name, fn } of cases) {
  try {
    await fn();
    console.log(JSON.stringify({ name, ok: true }));
  } catch (e) {
    failed++;
    console.log(JSON.stringify({ name, ok: false, error: String(e?.stack ?? e) }));
  }
}
process.exitCode = failed ? 1 : 0;

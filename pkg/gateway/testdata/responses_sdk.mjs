// Responses API calls made with the official OpenAI SDK for Node
// (openai 6.x, installed by scripts/fetch-openai-node.sh), run against a
// gateway session by TestResponsesNodeSDK. Each case prints one JSON line
// {name, ok, error}. Environment: OPENAI_SDK (path of the installed
// openai package), BASE_URL (the session's /v1), API_KEY (its token).
import { pathToFileURL } from 'node:url';
import path from 'node:path';
import assert from 'node:assert/strict';

const { default: OpenAI } = await import(pathToFileURL(path.join(process.env.OPENAI_SDK, 'index.mjs')).href);
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0, timeout: 60_000 });

const calc = {
  type: 'function',
  name: 'calc',
  description: 'Evaluate an arithmetic expression.',
  parameters: { type: 'object', properties: { expr: { type: 'string' } }, required: ['expr'], additionalProperties: false },
  strict: true,
};
const base = { model: 'gpt-5', instructions: 'Answer with the number.', tools: [calc] };

const cases = [];
const test = (name, fn) => cases.push({ name, fn });

// The tool round trip a client makes: the model calls calc, the client
// runs it and sends back every output item plus the call's output.
function toolOutputs(response) {
  const calls = response.output.filter((i) => i.type === 'function_call');
  assert.equal(calls.length, 1, JSON.stringify(response.output));
  assert.equal(calls[0].name, 'calc');
  const { expr } = JSON.parse(calls[0].arguments);
  assert.equal(expr, '2+3');
  return [...response.output, { type: 'function_call_output', call_id: calls[0].call_id, output: '5' }];
}

test('create: function tool round trip', async () => {
  const input = [{ role: 'user', content: 'What is 2+3?' }];
  const r1 = await client.responses.create({ ...base, input });
  assert.equal(r1.object, 'response');
  assert.equal(r1.status, 'completed');
  assert.ok(r1.usage.input_tokens > 0 && r1.usage.output_tokens > 0);
  const r2 = await client.responses.create({ ...base, input: [...input, ...toolOutputs(r1)] });
  assert.equal(r2.output_text, 'The answer is 5');
});

test('stream helper: function tool round trip', async () => {
  const input = [{ role: 'user', content: [{ type: 'input_text', text: 'What is 2+3?' }] }];
  const s1 = client.responses.stream({ ...base, input });
  let args = '';
  s1.on('response.function_call_arguments.delta', (e) => { args += e.delta; });
  const r1 = await s1.finalResponse();
  assert.equal(args, '{"expr":"2+3"}');
  const s2 = client.responses.stream({ ...base, input: [...input, ...toolOutputs(r1)], store: false, include: ['reasoning.encrypted_content'] });
  let text = '';
  s2.on('response.output_text.delta', (e) => { text += e.delta; });
  const r2 = await s2.finalResponse();
  assert.equal(text, 'The answer is 5');
  assert.equal(r2.output_text, 'The answer is 5');
});

test('create stream: events end with response.completed', async () => {
  const stream = await client.responses.create({ ...base, input: 'What is 2+3?', stream: true });
  const types = [];
  let completed;
  for await (const e of stream) {
    types.push(e.type);
    if (e.type === 'response.completed') completed = e.response;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  assert.ok(types.includes('response.output_item.added') && types.includes('response.output_item.done'));
  assert.ok(completed && completed.id && completed.usage.total_tokens > 0);
});

test('previous_response_id: continue a response of this session', async () => {
  const r1 = await client.responses.create({ ...base, input: 'What is 2+3?' });
  const call = r1.output.find((i) => i.type === 'function_call');
  const r2 = await client.responses.create({ ...base, previous_response_id: r1.id, input: [{ type: 'function_call_output', call_id: call.call_id, output: '5' }] });
  assert.equal(r2.output_text, 'The answer is 5');
});

test('refused: a hosted tool', async () => {
  try {
    await client.responses.create({ ...base, input: 'hi', tools: [{ type: 'web_search' }] });
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, 400);
    assert.match(e.message, /web_search/);
    return;
  }
  assert.fail('a web_search tool was accepted');
});

test('prompt too long: response.failed with context_length_exceeded', async () => {
  const stream = await client.responses.create({ ...base, input: 'TOO LONG', stream: true });
  let failed;
  for await (const e of stream) {
    if (e.type === 'response.failed') failed = e.response;
  }
  assert.equal(failed?.error?.code, 'context_length_exceeded');
  try {
    await client.responses.create({ ...base, input: 'TOO LONG' });
  } catch (e) {
    assert.equal(e.status, 400);
    assert.equal(e.code, 'context_length_exceeded');
    return;
  }
  assert.fail('an over-long prompt was answered');
});

for (const { name, fn } of cases) {
  try {
    await fn();
    console.log(JSON.stringify({ name, ok: true }));
  } catch (e) {
    console.log(JSON.stringify({ name, ok: false, error: String(e?.stack ?? e) }));
  }
}

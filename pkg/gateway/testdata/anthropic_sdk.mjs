// Anthropic Messages calls as Claude Code makes them, with the official
// Anthropic SDK for Node (@anthropic-ai/sdk 1.x, installed by
// scripts/fetch-anthropic-node.sh), run against a gateway session by
// TestAnthropicNodeSDK. Each case prints one JSON line {name, ok, error}.
// Environment: ANTHROPIC_SDK (path of the installed package), BASE_URL
// (the session's URL, without /v1), API_KEY (its token).
import { pathToFileURL } from 'node:url';
import path from 'node:path';
import assert from 'node:assert/strict';

const { default: Anthropic } = await import(pathToFileURL(path.join(process.env.ANTHROPIC_SDK, 'index.mjs')).href);
const common = { baseURL: process.env.BASE_URL, maxRetries: 0, timeout: 60_000 };
// ANTHROPIC_API_KEY is sent as x-api-key, ANTHROPIC_AUTH_TOKEN as a bearer token.
const byKey = new Anthropic({ ...common, apiKey: process.env.API_KEY, authToken: null });
const byToken = new Anthropic({ ...common, apiKey: null, authToken: process.env.API_KEY });

const bash = {
  name: 'Bash',
  description: 'Run a shell command.',
  input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
};
const request = (messages) => ({
  model: 'claude-sonnet-4-5',
  max_tokens: 1024,
  system: [{ type: 'text', text: 'You are Claude Code.', cache_control: { type: 'ephemeral' } }],
  tools: [bash],
  thinking: { type: 'enabled', budget_tokens: 512 },
  messages,
});
const first = [
  { role: 'user', content: [{ type: 'text', text: 'list the files' }] },
];

const cases = [];
const test = (name, fn) => cases.push({ name, fn });

for (const [how, client] of [['x-api-key', byKey], ['bearer', byToken]]) {
  test(`count_tokens with ${how}`, async () => {
    const { model, max_tokens, ...params } = request(first);
    const r = await client.messages.countTokens({ model, ...params });
    assert.equal(r.input_tokens, Number(process.env.WANT_TOKENS));
  });
}

test('beta count_tokens with betas', async () => {
  const { max_tokens, ...params } = request(first);
  const r = await byKey.beta.messages.countTokens({ ...params, betas: ['token-counting-2024-11-01'] });
  assert.equal(r.input_tokens, Number(process.env.WANT_TOKENS));
});

test('thinking and tool_use replayed, streamed', async () => {
  const m1 = await byToken.beta.messages.create(request(first), { headers: { 'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14' } });
  assert.deepEqual(m1.content.map((b) => b.type), ['thinking', 'tool_use']);
  const use = m1.content[1];
  assert.equal(use.name, 'Bash');
  assert.deepEqual(use.input, { command: 'ls' });
  const stream = byKey.messages.stream(request([
    ...first,
    { role: 'assistant', content: m1.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: 'a.txt b.txt' }] }] },
  ]));
  const m2 = await stream.finalMessage();
  assert.equal(m2.content.find((b) => b.type === 'text').text, 'Files: a.txt b.txt');
});

for (const { name, fn } of cases) {
  try {
    await fn();
    console.log(JSON.stringify({ name, ok: true }));
  } catch (e) {
    console.log(JSON.stringify({ name, ok: false, error: String(e?.stack ?? e) }));
  }
}

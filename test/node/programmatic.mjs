// Anthropic's programmatic tool calling through the official client,
// @anthropic-ai/sdk, unchanged, against a running Shellgate: node
// programmatic.mjs, with SHELLGATE_BASE and SHELLGATE_KEY set, and models
// "responses/m", "messages/m" and "chat/m" configured on a scripted model
// whose first turn runs Python (code_execution) that calls the client's
// get_weather once, then twice together (asyncio.gather), and a tool code
// may not call once, and whose second
// turn answers with the code's output. The client plays get_weather:
// each tool_use its code makes (caller: the code execution version and the
// server_tool_use id) is answered with a tool_result in the next request,
// naming the container, which resumes the code in the same kernel. Each
// case prints one JSON line {case, ok, detail}; the exit code is the
// number of failed cases. Run by test/e2e (TestNodeProgrammaticToolCalls).
import Anthropic from '@anthropic-ai/sdk';
import { check, assert, failed } from './check.mjs';

const base = process.env.SHELLGATE_BASE;
const key = process.env.SHELLGATE_KEY;
const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
const version = 'code_execution_20260120';
const tools = [
  { type: version, name: 'code_execution' },
  { name: 'get_weather', description: 'The weather in a city.', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, allowed_callers: [version] },
  { name: 'send_email', description: 'Sends an email.', input_schema: { type: 'object', properties: { to: { type: 'string' } } } },
];
const weather = { Paris: 'sunny', Oslo: 'rainy', Rome: 'hot' };
const question = 'What is the weather in Paris and Oslo?';

// create sends one request, streamed or not, and returns the message.
async function create(stream, params) {
  if (!stream) return anthropic.messages.create(params);
  const s = anthropic.messages.stream(params);
  return s.finalMessage();
}

// converse plays the client: it answers every tool_use made by code until
// the model ends its turn, checking each response on the way.
async function converse(model, stream) {
  const messages = [{ role: 'user', content: question }];
  let m = await create(stream, { model, max_tokens: 1000, tools, messages });
  const use = m.content.find((b) => b.type === 'server_tool_use');
  assert(use && use.name === 'code_execution' && use.input.code.includes('await get_weather('), 'server_tool_use: ' + JSON.stringify(m.content));
  assert(m.container && m.container.id.startsWith('cntr_'), 'container: ' + JSON.stringify(m.container));
  const container = m.container.id;
  const asked = [];
  for (let round = 0; m.stop_reason === 'tool_use'; round++) {
    assert(round < 3, 'too many rounds');
    const calls = m.content.filter((b) => b.type === 'tool_use');
    for (const call of calls) {
      assert(call.name === 'get_weather' && call.caller && call.caller.type === version && call.caller.tool_id === use.id, 'tool_use: ' + JSON.stringify(call));
    }
    assert(m.content.every((b) => b.type !== 'code_execution_tool_result'), 'a result before the code ended: ' + JSON.stringify(m.content));
    asked.push(calls.map((c) => c.input.city).join('+'));
    messages.push({ role: 'assistant', content: m.content });
    messages.push({ role: 'user', content: calls.map((call) => ({ type: 'tool_result', tool_use_id: call.id, content: `${call.input.city}: ${weather[call.input.city]}` })) });
    m = await create(stream, { model, max_tokens: 1000, tools, messages, container });
  }
  // Paris alone, then Oslo and Rome together (asyncio.gather): one
  // response with a tool_use each.
  assert(asked.join(',') === 'Paris,Oslo+Rome', 'cities asked, by round: ' + asked);
  const types = m.content.map((b) => b.type).join(',');
  assert(types === 'code_execution_tool_result,text', 'blocks after the last resume: ' + types + ' ' + JSON.stringify(m.content));
  const res = m.content[0];
  assert(res.tool_use_id === use.id && res.content.type === 'code_execution_result' && res.content.return_code === 0, 'result: ' + JSON.stringify(res));
  const out = res.content.stdout;
  assert(out.includes('refused: the tool send_email cannot be called from code: its allowed_callers do not include ' + version), 'the refused call: ' + JSON.stringify(out));
  assert(out.includes('Paris: sunny; Oslo: rainy; Rome: hot'), 'stdout: ' + JSON.stringify(out));
  assert(m.stop_reason === 'end_turn' && m.content[1].text.includes('Paris: sunny; Oslo: rainy; Rome: hot'), 'answer: ' + JSON.stringify(m.content[1]) + ' ' + m.stop_reason);
  assert(m.container && m.container.id === container, 'container after resume: ' + JSON.stringify(m.container));
  return { container, stdout: out };
}

for (const upstream of ['messages', 'chat', 'responses']) {
  const model = `${upstream}/m`;
  await check(`anthropic messages.create, code calls get_weather, on ${upstream}`, () => converse(model, false));
  await check(`anthropic messages.stream, code calls get_weather, on ${upstream}`, () => converse(model, true));
}

// Bad input: a resume without the container is a 400 naming container;
// a tool_result for a call no execution waits for reaches the model as
// the code execution's error.
await check('resume without container: 400', async () => {
  const m = await anthropic.messages.create({ model: 'messages/m', max_tokens: 1000, tools, messages: [{ role: 'user', content: question }] });
  const call = m.content.find((b) => b.type === 'tool_use');
  try {
    await anthropic.messages.create({ model: 'messages/m', max_tokens: 1000, tools, messages: [
      { role: 'user', content: question }, { role: 'assistant', content: m.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'Paris: sunny' }] }] });
  } catch (err) {
    assert(err.status === 400 && err.error.error.type === 'invalid_request_error' && err.error.error.message.startsWith('container_id is required when there are pending tool uses generated by code execution with tools'), 'error: ' + JSON.stringify(err.error));
    return err.error.error.message;
  }
  throw new Error('no error');
});

await check('tool_result for a call no execution waits for', async () => {
  const m = await anthropic.messages.create({ model: 'messages/m', max_tokens: 1000, tools, messages: [{ role: 'user', content: question }] });
  const call = m.content.find((b) => b.type === 'tool_use');
  const stale = { ...call, id: 'toolu_' + '0'.repeat(24) };
  const content = m.content.map((b) => (b === call ? stale : b));
  const r = await anthropic.messages.create({ model: 'messages/m', max_tokens: 1000, tools, container: m.container.id, messages: [
    { role: 'user', content: question }, { role: 'assistant', content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: stale.id, content: 'Paris: sunny' }] }] });
  const res = r.content[0];
  assert(res.type === 'code_execution_tool_result' && res.content.type === 'code_execution_tool_result_error' && res.content.error_message.includes('no execution'), 'result: ' + JSON.stringify(res));
  return res.content;
});

process.exit(failed());

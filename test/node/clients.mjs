// The official JavaScript clients, unchanged, against a running Shellgate:
// node clients.mjs, with SHELLGATE_BASE (http://host:port) and SHELLGATE_KEY
// set, and models "responses/m", "messages/m" and "chat/m" configured on a
// scripted model that runs python in the sandbox and answers with its
// output. Each case prints one JSON line {case, ok, detail}; the exit code
// is the number of failed cases. Run by test/e2e (TestNodeClients).
import OpenAI from 'openai';
import OpenAI6 from 'openai6';
import Anthropic from '@anthropic-ai/sdk';
import { generateText, streamText } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { check, assert, failed } from './check.mjs';

const base = process.env.SHELLGATE_BASE;
const key = process.env.SHELLGATE_KEY;
const question = 'What is 1+2+...+100? Use the sandbox.';
const shellTool = { type: 'shell', environment: { type: 'container_auto' } };
const codeExec = { type: 'code_execution_20250825', name: 'code_execution' };


const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });

for (const upstream of ['responses', 'messages', 'chat']) {
  const model = `${upstream}/m`;

  await check(`openai responses.create on ${upstream}`, async () => {
    const r = await openai.responses.create({ model, input: question, tools: [shellTool] });
    const call = r.output.find((it) => it.type === 'shell_call');
    const out = r.output.find((it) => it.type === 'shell_call_output');
    assert(call && call.environment && call.environment.type === 'container_reference' && call.environment.container_id.startsWith('cntr_'), 'shell_call without its container: ' + JSON.stringify(call));
    assert(out && out.call_id === call.call_id && out.output[0].stdout === '5050\n', 'shell_call_output: ' + JSON.stringify(out));
    assert(r.output_text.includes('5050'), 'answer: ' + r.output_text);
    return { container: call.environment.container_id, cost: r.usage.cost_details };
  });

  await check(`openai responses.stream on ${upstream}`, async () => {
    const stream = openai.responses.stream({ model, input: question, tools: [shellTool] });
    const types = new Set();
    for await (const ev of stream) types.add(ev.type);
    const r = await stream.finalResponse();
    assert(types.has('response.shell_call_command.added') && types.has('response.shell_call_output_content.done'), 'shell events: ' + [...types]);
    assert(r.output_text.includes('5050'), 'answer: ' + r.output_text);
    return [...types].length;
  });

  await check(`anthropic messages.create on ${upstream}`, async () => {
    const m = await anthropic.messages.create({ model, max_tokens: 1000, tools: [codeExec], messages: [{ role: 'user', content: question }] });
    const use = m.content.find((b) => b.type === 'server_tool_use');
    const res = m.content.find((b) => b.type === 'bash_code_execution_tool_result');
    assert(use && use.name === 'bash_code_execution', 'server_tool_use: ' + JSON.stringify(use));
    assert(res && res.tool_use_id === use.id && res.content.stdout === '5050\n' && res.content.return_code === 0, 'result: ' + JSON.stringify(res));
    assert(m.container && m.container.id.startsWith('cntr_'), 'container: ' + JSON.stringify(m.container));
    const text = m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
    assert(text.includes('5050'), 'answer: ' + text);
    return { stop: m.stop_reason, container: m.container.id };
  });

  await check(`anthropic messages.stream on ${upstream}`, async () => {
    const stream = anthropic.messages.stream({ model, max_tokens: 1000, tools: [codeExec], messages: [{ role: 'user', content: question }] });
    const m = await stream.finalMessage();
    const types = m.content.map((b) => b.type).join(',');
    assert(types === 'text,server_tool_use,bash_code_execution_tool_result,text', 'blocks: ' + types);
    assert(m.content[2].content.stdout === '5050\n', 'result: ' + JSON.stringify(m.content[2]));
    return types;
  });
}

// openai 6.x (6.49.0, installed as openai6): responses.stream()'s
// accumulator throws on the documented response.shell_call_command.*
// events it does not know (7.x accumulates them: the checks above). The
// pin fails once a 6.x learns them, so docs/responses-api.md's note and
// its workaround, responses.create({stream: true}), get updated.
const openai6 = new OpenAI6({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });

await check('openai 6.x responses.stream rejects shell_call_command events (pinned SDK behaviour)', async () => {
  const stream = openai6.responses.stream({ model: 'responses/m', input: question, tools: [shellTool] });
  try {
    await stream.finalResponse();
  } catch (err) {
    assert(/Unhandled response stream event: .*"type":"response\.shell_call_command\./.test(err.message), 'error: ' + err);
    return err.message.slice(0, 90);
  }
  throw new Error('openai 6.x responses.stream() now takes shell_call_command events: update docs/responses-api.md and this pin');
});

await check('openai 6.x responses.create({stream: true}), the workaround', async () => {
  const stream = await openai6.responses.create({ model: 'responses/m', input: question, tools: [shellTool], stream: true });
  const types = new Set();
  let done;
  for await (const ev of stream) {
    types.add(ev.type);
    if (ev.type === 'response.completed') done = ev.response;
  }
  assert(types.has('response.shell_call_command.added') && types.has('response.shell_call_output_content.done') && done, 'events: ' + [...types]);
  const out = done.output.find((it) => it.type === 'shell_call_output');
  const text = done.output.filter((it) => it.type === 'message').flatMap((m) => m.content).map((c) => c.text).join('');
  assert(out && out.output[0].stdout === '5050\n' && text.includes('5050'), 'response: ' + JSON.stringify(done.output));
  return [...types].length;
});

// The Vercel AI SDK, with the providers' own hosted-tool definitions.
const aiOpenAI = createOpenAI({ baseURL: `${base}/v1`, apiKey: key });
const aiAnthropic = createAnthropic({ baseURL: `${base}/v1`, apiKey: key });

await check('ai generateText, @ai-sdk/openai hosted shell', async () => {
  const r = await generateText({
    model: aiOpenAI.responses('chat/m'),
    prompt: question,
    tools: { shell: aiOpenAI.tools.shell({ environment: { type: 'containerAuto' } }) },
  });
  const result = r.content.find((p) => p.type === 'tool-result');
  assert(result && result.providerExecuted, 'no provider-executed tool result: ' + JSON.stringify(r.content));
  assert(r.text.includes('5050'), 'answer: ' + r.text);
  return r.content.map((p) => p.type);
});

await check('ai streamText, @ai-sdk/anthropic code execution', async () => {
  const r = streamText({
    model: aiAnthropic('messages/m'),
    prompt: question,
    tools: { code_execution: aiAnthropic.tools.codeExecution_20250825() },
  });
  const text = await r.text;
  const content = await r.content;
  assert(content.some((p) => p.type === 'tool-result' && p.providerExecuted), 'no provider-executed tool result: ' + JSON.stringify(content));
  assert(text.includes('5050'), 'answer: ' + text);
  return content.map((p) => p.type);
});

process.exit(failed());

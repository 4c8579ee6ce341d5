// OpenAI's code_interpreter tool through the official JavaScript clients,
// unchanged, against a running Shellgate: node code_interpreter.mjs, with
// SHELLGATE_BASE and SHELLGATE_KEY set, and models "responses/m",
// "messages/m" and "chat/m" configured on a scripted model that calls
// code_interpreter twice (x = 41; then print(x + 1), a plot and a file)
// and answers with the output and a sandbox: link to the file. Each case
// prints one JSON line {case, ok, detail}; the exit code is the number of
// failed cases. Run by test/e2e (TestNodeCodeInterpreter).
import OpenAI from 'openai';
import { generateText } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { Agent, run, codeInterpreterTool, setDefaultOpenAIClient, setTracingDisabled } from '@openai/agents';
import { check, assert, failed } from './check.mjs';

const base = process.env.SHELLGATE_BASE;
const key = process.env.SHELLGATE_KEY;
const question = 'What is 41+1? Plot it and save it.';
const tools = [{ type: 'code_interpreter', container: { type: 'auto' } }];
const include = ['code_interpreter_call.outputs'];


// checkResponse asserts the items of the scripted run: two calls on one
// container, the second's logs and plot, the answer citing the file.
async function checkResponse(r) {
  const calls = r.output.filter((it) => it.type === 'code_interpreter_call');
  assert(calls.length === 2, 'calls: ' + JSON.stringify(r.output));
  const [first, second] = calls;
  assert(first.id.startsWith('ci_') && first.status === 'completed' && first.code === 'x = 41' && first.container_id.startsWith('cntr_'), 'first call: ' + JSON.stringify(first));
  assert(second.container_id === first.container_id && second.status === 'completed', 'second call: ' + JSON.stringify(second));
  const logs = second.outputs.filter((o) => o.type === 'logs').map((o) => o.logs).join('');
  const images = second.outputs.filter((o) => o.type === 'image');
  assert(logs === '42\n', 'logs: ' + JSON.stringify(logs));
  assert(images.length === 1 && images[0].url.startsWith('data:image/png;base64,'), 'images: ' + images.length);
  const msg = r.output[r.output.length - 1];
  assert(msg.type === 'message' && r.output_text.includes('The answer is 42'), 'answer: ' + r.output_text);
  const cite = msg.content[0].annotations.find((a) => a.type === 'container_file_citation');
  assert(cite && cite.filename === 'answer.txt' && cite.container_id === first.container_id && cite.file_id.startsWith('cfile_'), 'annotations: ' + JSON.stringify(msg.content[0].annotations));
  assert(r.output_text.slice(cite.start_index, cite.end_index) === 'sandbox:/mnt/data/answer.txt', 'cited span: ' + r.output_text.slice(cite.start_index, cite.end_index));
  const file = await openai.containers.files.content.retrieve(cite.file_id, { container_id: cite.container_id });
  const text = await file.text();
  assert(text === '42', 'downloaded: ' + JSON.stringify(text));
  return { container: first.container_id, file: cite.file_id };
}

const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });

for (const upstream of ['responses', 'messages', 'chat']) {
  const model = `${upstream}/m`;

  await check(`openai responses.create with code_interpreter on ${upstream}`, async () => {
    const r = await openai.responses.create({ model, input: question, tools, include });
    return checkResponse(r);
  });

  await check(`openai responses.stream with code_interpreter on ${upstream}`, async () => {
    const stream = openai.responses.stream({ model, input: question, tools, include });
    const types = [];
    let code = '';
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'response.code_interpreter_call_code.delta') code += ev.delta;
      if (ev.type === 'response.code_interpreter_call_code.done') assert(ev.code === code, 'code.done ' + ev.code + ' after deltas ' + code);
      if (ev.type === 'response.code_interpreter_call_code.done') code = '';
    }
    for (const t of ['response.code_interpreter_call.in_progress', 'response.code_interpreter_call_code.delta', 'response.code_interpreter_call_code.done',
      'response.code_interpreter_call.interpreting', 'response.code_interpreter_call.completed', 'response.output_text.annotation.added']) {
      assert(types.filter((x) => x === t).length === (t === 'response.output_text.annotation.added' ? 1 : 2), t + ' in ' + types.join(','));
    }
    const order = types.filter((x) => x.startsWith('response.code_interpreter_call')).slice(0, 5).join(',');
    assert(order === 'response.code_interpreter_call.in_progress,response.code_interpreter_call_code.delta,response.code_interpreter_call_code.done,response.code_interpreter_call.interpreting,response.code_interpreter_call.completed', 'order: ' + order);
    return checkResponse(await stream.finalResponse());
  });
}

// The Vercel AI SDK, with @ai-sdk/openai's own codeInterpreter definition.
const aiOpenAI = createOpenAI({ baseURL: `${base}/v1`, apiKey: key });

await check('ai generateText, @ai-sdk/openai codeInterpreter', async () => {
  const r = await generateText({
    model: aiOpenAI.responses('chat/m'),
    prompt: question,
    tools: { code_interpreter: aiOpenAI.tools.codeInterpreter({ container: { memoryLimit: '1g' } }) },
  });
  const results = r.content.filter((p) => p.type === 'tool-result' && p.providerExecuted);
  assert(results.length === 2, 'provider-executed tool results: ' + JSON.stringify(r.content));
  const logs = (results[1].output.outputs || []).filter((o) => o.type === 'logs').map((o) => o.logs).join('');
  assert(logs.startsWith('42\n'), 'logs: ' + JSON.stringify(logs));
  assert(r.text.includes('The answer is 42'), 'answer: ' + r.text);
  return r.content.map((p) => p.type);
});

// The OpenAI Agents SDK's hosted codeInterpreterTool, run by its own
// runner on the Responses API.
setDefaultOpenAIClient(openai);
setTracingDisabled(true);

await check('@openai/agents run with codeInterpreterTool', async () => {
  const agent = new Agent({ name: 'analyst', model: 'messages/m', tools: [codeInterpreterTool()] });
  const r = await run(agent, question);
  // The SDK keeps a hosted call as a hosted_tool_call with the item as
  // the API sent it in providerData.
  const calls = r.newItems.filter((it) => it.type === 'tool_call_item' && it.rawItem.type === 'hosted_tool_call').map((it) => ({ ...it.rawItem.providerData, status: it.rawItem.status }));
  assert(calls.length === 2 && calls.every((c) => c.type === 'code_interpreter_call' && c.status === 'completed'), 'calls: ' + JSON.stringify(calls));
  assert(calls[0].code === 'x = 41' && calls[1].container_id === calls[0].container_id, 'one container: ' + JSON.stringify(calls.map((c) => c.container_id)));
  assert(String(r.finalOutput).includes('The answer is 42'), 'final output: ' + r.finalOutput);
  return r.newItems.map((it) => it.type);
});

process.exit(failed());

// OpenAI Responses programmatic tool calling through the official client,
// openai, unchanged, against a running Shellgate: node
// responses_programmatic.mjs, with SHELLGATE_BASE and SHELLGATE_KEY set,
// and models "responses/m", "messages/m" and "chat/m" configured on a
// scripted model whose first turn calls the program tool with JavaScript
// that calls the client's get_weather once, then twice together
// (Promise.all), and a tool programs may not call once, and whose second
// turn answers with the program's result. The client plays get_weather:
// each function_call the program makes (caller {type: "program",
// caller_id}) is answered with a function_call_output in the next request,
// which replays the response's items, the program item and its
// fingerprint included: Shellgate resumes the program from it. Each case
// prints one JSON line {case, ok, detail}; the exit code is the number of
// failed cases. Run by test/e2e (TestNodeResponsesProgrammatic).
import OpenAI from 'openai';
import { check, assert, failed } from './check.mjs';

const base = process.env.SHELLGATE_BASE;
const key = process.env.SHELLGATE_KEY;
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
const tools = [
  { type: 'programmatic_tool_calling' },
  { type: 'function', name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, allowed_callers: ['programmatic'] },
  { type: 'function', name: 'send_email', description: 'Sends an email.', parameters: { type: 'object', properties: { to: { type: 'string' } } } },
];
const weather = { Paris: 'sunny', Oslo: 'rainy', Rome: 'hot' };
const question = 'What is the weather in Paris, Oslo and Rome?';

// create sends one request, streamed or not, and returns the response.
async function create(stream, params) {
  if (!stream) return openai.responses.create(params);
  const s = openai.responses.stream(params);
  const types = new Set();
  for await (const ev of s) types.add(ev.type);
  const r = await s.finalResponse();
  assert(types.has('response.output_item.added') && types.has('response.output_item.done') && types.has('response.completed'), 'events: ' + [...types]);
  return r;
}

// answer is the function_call_output for a call of get_weather.
function answer(call) {
  const { city } = JSON.parse(call.arguments);
  return { type: 'function_call_output', call_id: call.call_id, output: `${city}: ${weather[city]}` };
}

// converse plays the client: it answers every function call a program
// makes until the model answers, checking each response on the way.
async function converse(model, stream) {
  const input = [{ role: 'user', content: question }];
  let r = await create(stream, { model, input, tools });
  const first = r.output.find((it) => it.type === 'program');
  assert(first && first.id.startsWith('prog_') && first.call_id && first.code.includes('await tools.get_weather(') && first.fingerprint, 'program: ' + JSON.stringify(r.output));
  const asked = [];
  const fingerprints = [];
  for (let round = 0; r.output.some((it) => it.type === 'function_call'); round++) {
    assert(round < 3, 'too many rounds');
    assert(r.status === 'completed', 'status: ' + r.status);
    const prog = r.output.find((it) => it.type === 'program');
    assert(prog && prog.call_id === first.call_id && prog.code === first.code, 'program item of the pause: ' + JSON.stringify(r.output));
    assert(!fingerprints.includes(prog.fingerprint), 'fingerprint reused');
    fingerprints.push(prog.fingerprint);
    assert(r.output.every((it) => it.type !== 'program_output'), 'an output before the program ended: ' + JSON.stringify(r.output));
    const calls = r.output.filter((it) => it.type === 'function_call');
    for (const call of calls) {
      assert(call.name === 'get_weather' && call.caller && call.caller.type === 'program' && call.caller.caller_id === first.call_id, 'function_call: ' + JSON.stringify(call));
    }
    asked.push(calls.map((c) => JSON.parse(c.arguments).city).join('+'));
    input.push(...r.output, ...calls.map(answer));
    r = await create(stream, { model, input, tools });
  }
  // Paris alone, then Oslo and Rome together (Promise.all): one response
  // with a function_call each.
  assert(asked.join(',') === 'Paris,Oslo+Rome', 'cities asked, by round: ' + asked);
  const types = r.output.map((it) => it.type).join(',');
  assert(types === 'program_output,message', 'items after the last resume: ' + types + ' ' + JSON.stringify(r.output));
  const out = r.output[0];
  assert(out.call_id === first.call_id && out.status === 'completed' && out.result.startsWith('Paris: sunny; Oslo: rainy; Rome: hot'), 'program_output: ' + JSON.stringify(out));
  assert(out.result.includes('refused: the tool send_email cannot be called from a program'), 'the refused call: ' + JSON.stringify(out.result));
  assert(r.output_text.includes('The weather: Paris: sunny; Oslo: rainy; Rome: hot'), 'answer: ' + r.output_text);
  return { rounds: asked, result: out.result };
}

for (const upstream of ['responses', 'messages', 'chat']) {
  const model = `${upstream}/m`;
  await check(`openai responses.create, program calls get_weather, on ${upstream}`, () => converse(model, false));
  await check(`openai responses.stream, program calls get_weather, on ${upstream}`, () => converse(model, true));
}

// expect400 runs fn and checks it fails with a 400 on param whose message
// includes says.
async function expect400(fn, param, says) {
  try {
    await fn();
  } catch (err) {
    const e = err.error || {};
    assert(err.status === 400 && e.type === 'invalid_request_error' && e.param === param && e.message.includes(says), 'error: ' + err.status + ' ' + JSON.stringify(e));
    return e.message;
  }
  throw new Error('no error');
}

// Bad input: a changed fingerprint, a missing output, a tool allowing
// programmatic callers without the programmatic_tool_calling tool.
await check('changed fingerprint: 400', async () => {
  const input = [{ role: 'user', content: question }];
  const r = await openai.responses.create({ model: 'responses/m', input, tools });
  const prog = r.output.find((it) => it.type === 'program');
  const calls = r.output.filter((it) => it.type === 'function_call');
  const changed = r.output.map((it) => (it === prog ? { ...prog, fingerprint: prog.fingerprint.slice(0, -4) + 'AAAA' } : it));
  return expect400(() => openai.responses.create({ model: 'responses/m', input: [...input, ...changed, ...calls.map(answer)], tools }), 'input', 'fingerprint');
});

await check('missing function_call_output: 400', async () => {
  const input = [{ role: 'user', content: question }];
  const r = await openai.responses.create({ model: 'responses/m', input, tools });
  return expect400(() => openai.responses.create({ model: 'responses/m', input: [...input, ...r.output], tools }), 'input', 'No tool output found for function call');
});

await check('allowed_callers programmatic without programmatic_tool_calling: 400', () =>
  expect400(() => openai.responses.create({ model: 'responses/m', input: question, tools: tools.slice(1) }), 'tools[0].allowed_callers', 'programmatic_tool_calling'));

process.exit(failed());

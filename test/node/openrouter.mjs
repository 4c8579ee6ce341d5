// OpenRouter's official client, @openrouter/sdk, unchanged, against a
// running Shellgate's OpenRouter surface (/api/v1): node openrouter.mjs,
// with SHELLGATE_BASE (http://host:port) and SHELLGATE_KEY set, and models
// "responses/m", "messages/m" and "chat/m" configured on a scripted model
// that runs a command in the sandbox and answers with its output. Each
// case prints one JSON line {case, ok, detail}; the exit code is the number
// of failed cases. Run by test/e2e (TestNodeOpenRouter).
import { OpenRouter } from '@openrouter/sdk';
import * as errors from '@openrouter/sdk/models/errors';
import { check, assert, failed } from './check.mjs';

const base = process.env.SHELLGATE_BASE;
const key = process.env.SHELLGATE_KEY;
const question = 'What is 1+2+...+100? Use the sandbox.';
const shellTool = { type: 'openrouter:shell' };
const client = new OpenRouter({ serverURL: `${base}/api/v1`, apiKey: key, retryConfig: { strategy: 'none' } });

// shellRan is the answer's proof that the command ran in the sandbox: its
// output (5050) reached the final text.
function answer(r) {
  assert(r.status === 'completed', 'status: ' + r.status);
  const text = r.output.filter((it) => it.type === 'message').flatMap((m) => m.content).map((c) => c.text || '').join('');
  assert(text.includes('5050'), 'answer: ' + JSON.stringify(r.output));
  assert(r.frequencyPenalty === null && r.presencePenalty === null, 'penalties: ' + r.frequencyPenalty + ' ' + r.presencePenalty);
  return text;
}

for (const upstream of ['responses', 'messages', 'chat']) {
  const model = `${upstream}/m`;

  await check(`openrouter responses.send on ${upstream}`, async () => {
    const r = await client.responses.send({ responsesRequest: { model, input: question, tools: [shellTool] } });
    const text = answer(r);
    const cost = r.usage && r.usage.costDetails;
    assert(cost && cost.upstreamInferenceInputCost === 0 && cost.upstreamInferenceOutputCost === 0, 'cost_details: ' + JSON.stringify(r.usage));
    return { text, cost };
  });

  await check(`openrouter responses.send streamed on ${upstream}`, async () => {
    const stream = await client.responses.send({ responsesRequest: { model, input: question, tools: [shellTool], stream: true } });
    const types = [];
    let created, completed;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'response.created') created = ev.response;
      if (ev.type === 'response.completed') completed = ev.response;
    }
    assert(created && created.status === 'in_progress', 'response.created: ' + JSON.stringify(types));
    assert(completed, 'no response.completed: ' + JSON.stringify(types));
    return { text: answer(completed), events: types.length };
  });
}

await check('openrouter error: bad key', async () => {
  const bad = new OpenRouter({ serverURL: `${base}/api/v1`, apiKey: 'sk-wrong', retryConfig: { strategy: 'none' } });
  try {
    await bad.responses.send({ responsesRequest: { model: 'responses/m', input: 'hi' } });
  } catch (err) {
    assert(err instanceof errors.UnauthorizedResponseError, 'error class: ' + (err && err.constructor.name) + ' ' + err);
    assert(err.error.code === 401 && typeof err.error.message === 'string' && err.error.message !== '', 'error: ' + JSON.stringify(err.error));
    return { code: err.error.code, message: err.error.message };
  }
  throw new Error('a bad key was accepted');
});

await check('openrouter error: bad request', async () => {
  try {
    await client.responses.send({ responsesRequest: { model: 'responses/m', input: 'hi', temperature: 7 } });
  } catch (err) {
    assert(err instanceof errors.BadRequestResponseError, 'error class: ' + (err && err.constructor.name) + ' ' + err);
    assert(err.error.code === 400 && err.error.message.includes('temperature'), 'error: ' + JSON.stringify(err.error));
    return { code: err.error.code, message: err.error.message };
  }
  throw new Error('a bad request was accepted');
});

process.exit(failed());

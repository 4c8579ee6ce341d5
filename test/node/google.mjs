// The Vercel AI SDK's Google provider, @ai-sdk/google, unchanged, against a
// running Shellgate's Gemini API (/v1beta): node google.mjs, with
// SHELLGATE_BASE (http://host:port) and SHELLGATE_KEY set, the providers
// named in SHELLGATE_UPSTREAMS (responses, messages, chat, gemini) each with
// the alias gemini-2.5-flash-FLAVOUR for FLAVOUR/m, on a scripted model
// that runs Python with the code tool and answers with its output (and the
// model "plain", which only answers). Checked per flavour: codeExecution
// through an alias (the SDK sends codeExecution only for an id that looks
// like gemini-…), through a model id with '/' (which the SDK sends as
// /v1beta/FLAVOUR/gemini-2.5-flash:…, without models/), streamed and not,
// and a plain id with '/'; then its errors (Google's envelope with the
// status). Each case prints one JSON line {case, ok, detail}; the exit
// code is the number of failed cases. Run by test/e2e (TestNodeGoogle).
import { generateText, streamText, APICallError } from 'ai';
import { createGoogleGenerativeAI } from '@ai-sdk/google';
import { check, assert, failed } from './check.mjs';

const base = process.env.SHELLGATE_BASE;
const key = process.env.SHELLGATE_KEY;
const upstreams = (process.env.SHELLGATE_UPSTREAMS || 'responses,messages,chat,gemini').split(',');
const question = 'What is 1+2+...+100? Use code execution.';
// One named session: every run shares one sandbox.
const google = createGoogleGenerativeAI({ baseURL: `${base}/v1beta`, apiKey: key, headers: { 'x-session-id': 'ai-sdk-google' } });
const tools = { code_execution: google.tools.codeExecution({}) };

// ran checks the SDK's own shapes of a code execution: the provider-run
// tool call and its result (outcome and output), then the answer.
function ran(content, text) {
  const call = content.find((p) => p.type === 'tool-call');
  const result = content.find((p) => p.type === 'tool-result');
  assert(call && call.providerExecuted && call.toolName === 'code_execution' && call.input.language === 'PYTHON' && call.input.code.includes('sum('),
    'tool call: ' + JSON.stringify(content));
  assert(result && result.providerExecuted && result.toolCallId === call.toolCallId && result.output.outcome === 'OUTCOME_OK' && result.output.output === '5050\n',
    'tool result: ' + JSON.stringify(result));
  assert(text.includes('5050'), 'answer: ' + text);
  return content.map((p) => p.type).join(',');
}

for (const upstream of upstreams) {
  const alias = `gemini-2.5-flash-${upstream}`;

  await check(`@ai-sdk/google generateText, codeExecution, alias ${alias}`, async () => {
    const r = await generateText({ model: google(alias), prompt: question, tools });
    return ran(r.content, r.text);
  });

  await check(`@ai-sdk/google streamText, codeExecution, model id ${upstream}/gemini-2.5-flash`, async () => {
    const r = streamText({ model: google(`${upstream}/gemini-2.5-flash`), prompt: question, tools });
    const text = await r.text;
    return ran(await r.content, text);
  });

  await check(`@ai-sdk/google generateText, model id ${upstream}/plain`, async () => {
    const r = await generateText({ model: google(`${upstream}/plain`), prompt: 'Say hello.' });
    assert(r.text === 'Hello from plain.' && r.finishReason === 'stop', 'answer: ' + JSON.stringify(r.text) + ' ' + r.finishReason);
    return r.text;
  });
}

// googleError is the APICallError a failing call rejects with: its status
// and Google's envelope in the body.
async function googleError(model, client = google) {
  try {
    await generateText({ model: client(model), prompt: 'hi', maxRetries: 0 });
  } catch (err) {
    const e = APICallError.isInstance(err) ? err : err.lastError;
    assert(APICallError.isInstance(e), 'not an APICallError: ' + err);
    const body = JSON.parse(e.responseBody);
    assert(body.error.code === e.statusCode && typeof body.error.status === 'string' && body.error.message === e.message, 'envelope: ' + e.responseBody);
    return { status: e.statusCode, rpc: body.error.status, message: e.message };
  }
  throw new Error(`${model} answered`);
}

await check('@ai-sdk/google error: unknown provider', async () => {
  const e = await googleError('nope/m');
  assert(e.status === 404 && e.rpc === 'NOT_FOUND' && e.message.includes('no provider "nope"'), JSON.stringify(e));
  return e;
});

await check('@ai-sdk/google error: unknown alias', async () => {
  const e = await googleError('gemini-9-ultra');
  assert(e.status === 400 && e.rpc === 'INVALID_ARGUMENT' && e.message.includes('or an alias: gemini-2.5-flash-'), JSON.stringify(e));
  return e;
});

await check('@ai-sdk/google error: bad key', async () => {
  const bad = createGoogleGenerativeAI({ baseURL: `${base}/v1beta`, apiKey: 'sk-wrong' });
  const e = await googleError(`${upstreams[0]}/plain`, bad);
  assert(e.status === 401 && e.rpc === 'UNAUTHENTICATED', JSON.stringify(e));
  return e;
});

process.exit(failed());

// OpenRouter's official client, @openrouter/sdk, unchanged, against a
// running Shellgate's OpenRouter surface (/api/v1): node openrouter.mjs,
// with SHELLGATE_BASE (http://host:port) and SHELLGATE_KEY set, and models
// "responses/m", "messages/m" and "chat/m" configured on a scripted model
// that runs a command in the sandbox (writing sum.txt into /mnt/data too)
// and answers with its output: responses.send plain and streamed with the
// openrouter:shell tool, workspace files (upload, list, retrieve,
// download, delete), the sandbox's container files (list, get, download,
// promote) and the error classes with their numeric codes; chat.send
// plain and streamed, and the errors of chat.send and models.list. Each
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

let container;
for (const upstream of ['responses', 'messages', 'chat']) {
  const model = `${upstream}/m`;

  await check(`openrouter responses.send on ${upstream}`, async () => {
    const r = await client.responses.send({ responsesRequest: { model, input: question, tools: [shellTool] } });
    const text = answer(r);
    const call = r.output.find((it) => it.type === 'openrouter:shell');
    container = call && call.containerId;
    assert(container && container.startsWith('cntr_') && call.status === 'completed' && call.output[0].stdout === '5050\n', 'openrouter:shell item: ' + JSON.stringify(r.output));
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

// text reads a ReadableStream of bytes whole.
async function text(stream) {
  return new Response(stream).text();
}

await check('openrouter files: upload, list, retrieve, download, delete', async () => {
  const up = await client.files.upload({ requestBody: { file: { fileName: 'notes.txt', content: new TextEncoder().encode('hello files\n') } } });
  assert(up.shape === 'openrouter' && up.id && up.filename === 'notes.txt' && up.sizeBytes === 12, 'upload: ' + JSON.stringify(up));
  const pages = [];
  for await (const page of await client.files.list({})) pages.push(page.result);
  const list = pages[0];
  assert(pages.length === 1 && list.shape === 'openrouter' && list.cursor === null && list.hasMore === false, 'list: ' + JSON.stringify(pages));
  assert(list.data.some((f) => f.id === up.id && f.filename === 'notes.txt'), 'list lacks the upload: ' + JSON.stringify(list.data));
  const got = await client.files.retrieve({ fileId: up.id });
  assert(got.shape === 'openrouter' && got.id === up.id && got.sizeBytes === 12, 'retrieve: ' + JSON.stringify(got));
  const body = await text(await client.files.download({ fileId: up.id }));
  assert(body === 'hello files\n', 'download: ' + JSON.stringify(body));
  const del = await client.files.delete({ fileId: up.id });
  assert(del.shape === 'openrouter' && del.id === up.id && del.type === 'file_deleted', 'delete: ' + JSON.stringify(del));
  try {
    await client.files.retrieve({ fileId: up.id });
  } catch (err) {
    assert(err instanceof errors.NotFoundResponseError && err.error.code === 404, 'after delete: ' + err);
    return { id: up.id, files: list.data.length };
  }
  throw new Error('a deleted file was retrieved');
});

await check('openrouter container files: list, get, download, promote', async () => {
  assert(container, 'no container from responses.send');
  const list = await client.containers.listContainerFiles({ containerId: container });
  const f = list.data.find((it) => it.path === 'sum.txt');
  assert(list.object === 'list' && f && f.source === 'assistant' && f.bytes === 5 && f.containerId === container, 'list: ' + JSON.stringify(list));
  const got = await client.containers.getContainerFile({ containerId: container, fileId: f.id });
  assert(got.id === f.id && got.path === f.path, 'get: ' + JSON.stringify(got));
  const body = await text(await client.containers.downloadContainerFileContent({ containerId: container, fileId: f.id }));
  assert(body === '5050\n', 'download: ' + JSON.stringify(body));
  const promoted = await client.containers.promoteContainerFile({ containerId: container, fileId: f.id });
  assert(promoted.shape === 'openrouter' && promoted.filename === 'sum.txt' && promoted.sizeBytes === 5, 'promote: ' + JSON.stringify(promoted));
  await client.files.delete({ fileId: promoted.id });
  return { container, file: f.path };
});

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

// Chat Completions and the model list on /api/v1: answers, and errors
// with their numeric codes (error.code is the HTTP status there).
for (const upstream of ['responses', 'messages', 'chat']) {
  await check(`openrouter chat.send on ${upstream}`, async () => {
    const r = await client.chat.send({ chatRequest: { model: `${upstream}/plain`, messages: [{ role: 'user', content: 'Say hello.' }] } });
    assert(r.choices[0].message.content === 'Hello from plain.' && r.choices[0].finishReason === 'stop', 'answer: ' + JSON.stringify(r));
    return r.choices[0].message.content;
  });

  await check(`openrouter chat.send streamed on ${upstream}`, async () => {
    const stream = await client.chat.send({ chatRequest: { model: `${upstream}/plain`, messages: [{ role: 'user', content: 'Say hello.' }], stream: true } });
    let text = '', finish;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content || '';
      finish = chunk.choices[0]?.finishReason || finish;
    }
    assert(text === 'Hello from plain.' && finish === 'stop', 'answer: ' + JSON.stringify(text) + ' ' + finish);
    return text;
  });
}

// orError is what a failing call throws, checked to be errClass with the
// status as its numeric code.
async function orError(call, errClass, status) {
  try {
    await call();
  } catch (err) {
    assert(err instanceof errClass, 'error class: ' + (err && err.constructor.name) + ' ' + err);
    assert(err.error.code === status && typeof err.error.message === 'string' && err.error.message !== '', 'error: ' + JSON.stringify(err.error));
    return { code: err.error.code, message: err.error.message };
  }
  throw new Error('the call succeeded');
}

const hi = [{ role: 'user', content: 'hi' }];
await check('openrouter chat.send error: unknown provider', () =>
  orError(() => client.chat.send({ chatRequest: { model: 'nope/m', messages: hi } }), errors.NotFoundResponseError, 404));
await check('openrouter chat.send error: server tool', () =>
  orError(() => client.chat.send({ chatRequest: { model: 'chat/plain', messages: hi, tools: [{ type: 'openrouter:shell' }] } }), errors.BadRequestResponseError, 400));
await check('openrouter chat.send error: bad key', () => {
  const bad = new OpenRouter({ serverURL: `${base}/api/v1`, apiKey: 'sk-wrong', retryConfig: { strategy: 'none' } });
  return orError(() => bad.chat.send({ chatRequest: { model: 'chat/plain', messages: hi } }), errors.UnauthorizedResponseError, 401);
});

// models.list parses only OpenRouter's full model objects (pricing,
// architecture, context length...), which Shellgate does not know: its
// errors are checked, as the SDK hands them over (a 401 is no class of
// its own there, so the body is read).
await check('openrouter models.list error: bad key', async () => {
  const bad = new OpenRouter({ serverURL: `${base}/api/v1`, apiKey: 'sk-wrong', retryConfig: { strategy: 'none' } });
  try {
    for await (const page of await bad.models.list()) page;
  } catch (err) {
    assert(err instanceof errors.OpenRouterError && err.statusCode === 401, 'error: ' + (err && err.constructor.name) + ' ' + err);
    const body = JSON.parse(err.body);
    assert(body.error.code === 401 && body.error.message !== '', 'body: ' + err.body);
    return body.error;
  }
  throw new Error('a bad key was accepted');
});

process.exit(failed());

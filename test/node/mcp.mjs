// The official MCP TypeScript SDK (@modelcontextprotocol/sdk), unchanged,
// as a client of Shellgate's MCP server: node mcp.mjs, with SHELLGATE_BASE,
// SHELLGATE_KEY and SHELLGATE_KEY_B (another workspace's key) set, and
// SHELLGATE_BIN (the shellgate binary, for `shellgate mcp` over stdio).
// Streamable HTTP at /mcp: initialize, tools and their schemas (the client
// validates every structured result against its tool's output schema),
// exec with progress, a failing command, cancel, python, files, resources
// with list_changed, two workspaces apart; then the same tools through the
// stdio bridge. Each case prints one JSON line {case, ok, detail}; the exit
// code is the number of failed cases. Run by test/e2e (TestNodeMCP).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ResourceListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { check, assert, failed } from './check.mjs';

const base = process.env.SHELLGATE_BASE;
const key = process.env.SHELLGATE_KEY;
const keyB = process.env.SHELLGATE_KEY_B;

async function connect(k) {
  const client = new Client({ name: 'shellgate-node-test', version: '1.0.0' });
  const changed = [];
  client.setNotificationHandler(ResourceListChangedNotificationSchema, () => { changed.push(Date.now()); });
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${k}` } } });
  await client.connect(transport);
  return { client, changed, transport };
}

// waitFor polls cond on the event loop (notifications arrive there).
async function waitFor(cond, what) {
  for (let i = 0; i < 500; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('never: ' + what);
}

const a = await connect(key);
let own;

await check('mcp initialize and tools/list', async () => {
  const info = a.client.getServerVersion();
  assert(info && info.name === 'shellgate', 'server info: ' + JSON.stringify(info));
  const { tools } = await a.client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert(names.join(',') === 'create_container,delete_container,eval,exec,list_containers,list_files,python,read_file,write_file', 'tools: ' + names);
  assert(tools.every((t) => t.inputSchema && t.outputSchema), 'a tool without schemas');
  return { protocol: a.transport.protocolVersion, tools: names.length };
});

await check('mcp exec streams progress', async () => {
  const progress = [];
  const r = await a.client.callTool({ name: 'exec', arguments: { commands: ['echo hello; echo oops >&2', 'echo saved > saved.txt'] } },
    undefined, { onprogress: (p) => progress.push(p) });
  const out = r.structuredContent;
  assert(!r.isError && out.output[0].stdout === 'hello\n' && out.output[0].stderr === 'oops\n', 'result: ' + JSON.stringify(r));
  assert(progress.some((p) => p.message === 'hello\n'), 'progress: ' + JSON.stringify(progress));
  own = out.container_id;
  return { container: own, progress: progress.length };
});

await check('mcp a failing command is isError', async () => {
  const r = await a.client.callTool({ name: 'exec', arguments: { commands: ['exit 7'] } });
  assert(r.isError && r.structuredContent.output[0].outcome.exit_code === 7, 'result: ' + JSON.stringify(r));
  const bad = await a.client.callTool({ name: 'read_file', arguments: { path: '../../etc/shadow' } });
  assert(bad.isError && bad.content[0].text.length > 0, 'bad path: ' + JSON.stringify(bad));
  return bad.content[0].text;
});

await check('mcp cancel stops the command', async () => {
  const ac = new AbortController();
  let started = false;
  const call = a.client.callTool({ name: 'exec', arguments: { commands: ['echo started; sleep 60; echo late > late.txt'] } },
    undefined, { signal: ac.signal, onprogress: (p) => { if (p.message === 'started\n') started = true; } });
  await waitFor(() => started, 'the command started');
  ac.abort('enough');
  let threw = false;
  try { await call; } catch { threw = true; }
  assert(threw, 'an aborted call answered');
  const r = await a.client.callTool({ name: 'exec', arguments: { commands: ['n=0; for c in /proc/[0-9]*/comm; do [ "$(cat $c 2>/dev/null)" = sleep ] && n=$((n+1)); done; echo $n; test -e late.txt && echo late || echo early'] } });
  assert(r.structuredContent.output[0].stdout === '0\nearly\n', 'after the cancel: ' + JSON.stringify(r.structuredContent));
  return 'stopped';
});

await check('mcp python keeps state', async () => {
  await a.client.callTool({ name: 'python', arguments: { code: 'import pandas as pd\ndf = pd.DataFrame({"x": [1, 2, 3]})' } });
  const r = await a.client.callTool({ name: 'python', arguments: { code: 'print(int(df.x.sum()))' } });
  assert(!r.isError && r.structuredContent.stdout === '6\n', 'result: ' + JSON.stringify(r));
  return r.structuredContent.stdout;
});

await check('mcp files and resources', async () => {
  const before = a.changed.length;
  await a.client.callTool({ name: 'exec', arguments: { commands: ['printf "x,y\\n1,2\\n" > table.csv'] } });
  await waitFor(() => a.changed.length > before, 'resources/list_changed');
  const { resources } = await a.client.listResources();
  const uri = `shellgate://containers/${own}/files/table.csv`;
  assert(resources.some((r) => r.uri === uri), 'resources: ' + resources.map((r) => r.uri));
  const read = await a.client.readResource({ uri });
  assert(read.contents[0].text === 'x,y\n1,2\n', 'read: ' + JSON.stringify(read));
  await a.client.callTool({ name: 'write_file', arguments: { path: 'b.bin', content: 'AP8=', encoding: 'base64' } });
  const blob = await a.client.readResource({ uri: `shellgate://containers/${own}/files/b.bin` });
  assert(blob.contents[0].blob === 'AP8=', 'blob: ' + JSON.stringify(blob));
  const { resourceTemplates } = await a.client.listResourceTemplates();
  assert(resourceTemplates[0].uriTemplate === 'shellgate://containers/{id}/files/{+path}', 'templates: ' + JSON.stringify(resourceTemplates));
  return { resources: resources.length };
});

await check('mcp eval, files and containers', async () => {
  const call = async (name, args) => {
    const r = await a.client.callTool({ name, arguments: args });
    assert(!r.isError, `${name}: ` + JSON.stringify(r));
    return r.structuredContent;
  };
  const run = await call('eval', { source: 'const n = await ui.pick(2); return n * 21', client_functions: { ui: ['pick'] } });
  assert(run.status === 'interrupted' && run.interruptions[0].host_function_name === 'ui.pick', 'eval: ' + JSON.stringify(run));
  const done = await call('eval', { continuation: run.continuation, resolutions: [{ interruption_id: run.interruptions[0].id, value: 2 }] });
  assert(done.status === 'completed' && done.value === 42, 'resumed: ' + JSON.stringify(done));
  const made = await call('create_container', { name: 'node-made' });
  await call('write_file', { path: 'notes/a.txt', content: 'héllo', container: 'node-made' });
  const read = await call('read_file', { path: 'notes/a.txt', container: made.id });
  assert(read.text === 'héllo' && read.bytes === 6, 'read_file: ' + JSON.stringify(read));
  const files = await call('list_files', { container: 'node-made' });
  assert(files.files.some((f) => f.path === 'notes/a.txt'), 'list_files: ' + JSON.stringify(files));
  const listed = await call('list_containers', {});
  assert(listed.containers.some((c) => c.id === made.id), 'list_containers: ' + JSON.stringify(listed));
  const gone = await call('delete_container', { container: made.id });
  assert(gone.deleted && gone.id === made.id, 'delete_container: ' + JSON.stringify(gone));
  const after = await a.client.callTool({ name: 'read_file', arguments: { path: 'notes/a.txt', container: made.id } });
  assert(after.isError, 'read from a deleted container: ' + JSON.stringify(after));
  return { container: made.id };
});

await check('mcp two workspaces are apart', async () => {
  const b = await connect(keyB);
  try {
    const r = await b.client.callTool({ name: 'exec', arguments: { commands: ['touch /workspace/home/intruder'], container: own } });
    assert(r.isError && /No container/.test(r.content[0].text), 'b in a\'s container: ' + JSON.stringify(r));
    const l = await b.client.callTool({ name: 'list_containers', arguments: {} });
    assert(!l.structuredContent.containers.some((c) => c.id === own), 'b lists a\'s container');
    let threw = false;
    try { await b.client.readResource({ uri: `shellgate://containers/${own}/files/saved.txt` }); } catch { threw = true; }
    assert(threw, 'b read a\'s file');
    const mine = await b.client.callTool({ name: 'exec', arguments: { commands: ['ls'] } });
    assert(mine.structuredContent.container_id !== own, 'b got a\'s container');
    const check = await a.client.callTool({ name: 'exec', arguments: { commands: ['test ! -e intruder'] } });
    assert(!check.isError, 'b wrote into a\'s container');
    return 'apart';
  } finally {
    await b.client.close();
  }
});

await a.client.close();

await check('mcp stdio bridge (shellgate mcp --url)', async () => {
  const transport = new StdioClientTransport({ command: process.env.SHELLGATE_BIN, args: ['mcp', '--url', base],
    env: { ...process.env, SHELLGATE_API_KEY: key }, stderr: 'inherit' });
  const client = new Client({ name: 'shellgate-node-stdio', version: '1.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    assert(tools.length === 9, 'tools: ' + tools.map((t) => t.name));
    const progress = [];
    const r = await client.callTool({ name: 'exec', arguments: { commands: ['echo via stdio'] } }, undefined, { onprogress: (p) => progress.push(p) });
    assert(!r.isError && r.structuredContent.output[0].stdout === 'via stdio\n', 'result: ' + JSON.stringify(r));
    assert(progress.length > 0, 'no progress over stdio');
    return { container: r.structuredContent.container_id };
  } finally {
    await client.close();
  }
});

process.exit(failed());

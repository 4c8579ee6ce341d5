// @google/genai, unchanged, against a running Shellgate: node
// gemini-charts.mjs, with SHELLGATE_BASE and SHELLGATE_KEY set and models
// "<upstream>/m" configured on a scripted model that plots with the code
// tool and then answers. A chart comes back as an inlineData part after
// its codeExecutionResult, as Gemini returns them. Each case prints one
// JSON line {case, ok, detail}; the exit code is the number of failed
// cases. Run by test/e2e (TestNodeGeminiCharts).
import { GoogleGenAI } from '@google/genai';
import { check, assert, failed } from './check.mjs';

const base = process.env.SHELLGATE_BASE;
const key = process.env.SHELLGATE_KEY;
const upstreams = (process.env.SHELLGATE_UPSTREAMS || 'gemini').split(',');

const kind = (p) => p.executableCode ? 'code' : p.codeExecutionResult ? 'result' : p.inlineData ? 'image' : p.text !== undefined ? 'text' : Object.keys(p).join('+');
const isPNG = (b64) => Buffer.from(b64, 'base64').subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));

// @google/genai 3 defaults to /v1; Shellgate serves Gemini under /v1beta.
const ai = new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: base, apiVersion: 'v1beta' } });
const config = { tools: [{ codeExecution: {} }] };

for (const upstream of upstreams) {
  const model = `${upstream}/m`;

  await check(`genai generateContent chart on ${upstream}`, async () => {
    const r = await ai.models.generateContent({ model, contents: 'Plot 1, 2, 3.', config });
    const parts = r.candidates[0].content.parts;
    const kinds = parts.map(kind).join(',');
    assert(kinds === 'code,result,image,text', 'parts: ' + kinds);
    assert(parts[1].codeExecutionResult.outcome === 'OUTCOME_OK', 'result: ' + JSON.stringify(parts[1]));
    const img = parts[2].inlineData;
    assert(img.mimeType === 'image/png' && isPNG(img.data), 'inlineData: ' + JSON.stringify(img).slice(0, 200));
    return { kinds, bytes: Buffer.from(img.data, 'base64').length };
  });

  await check(`genai generateContentStream chart on ${upstream}`, async () => {
    const parts = [];
    for await (const chunk of await ai.models.generateContentStream({ model, contents: 'Plot 1, 2, 3.', config })) {
      parts.push(...(chunk.candidates?.[0]?.content?.parts ?? []));
    }
    const kinds = parts.map(kind).join(',');
    assert(kinds === 'code,result,image,text', 'parts: ' + kinds);
    assert(isPNG(parts[2].inlineData.data), 'not a PNG');
    return kinds;
  });
}

process.exit(failed());

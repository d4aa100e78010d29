// Streams one chat completion with the official openai Node SDK and prints what the client saw as one
// JSON line: {text, deltas, usage, finish_reason, model}. The test runs it against the gateway and
// against the model server directly, with the same request, and compares the two.
//
// usage: node stream.mjs '<json: {"base_url": "...", "api_key": "...", "body": {...chat request...}}>'
import OpenAI from "openai";

const { base_url: baseURL, api_key: apiKey, body } = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

const out = { text: "", deltas: 0, usage: null, finish_reason: null, model: null };
const stream = await client.chat.completions.create({ ...body, stream: true });
for await (const chunk of stream) {
  out.model = chunk.model ?? out.model;
  if (chunk.usage) out.usage = chunk.usage;
  for (const choice of chunk.choices ?? []) {
    const content = choice.delta?.content;
    if (content) {
      out.text += content;
      out.deltas += 1;
    }
    if (choice.finish_reason) out.finish_reason = choice.finish_reason;
  }
}
process.stdout.write(JSON.stringify(out) + "\n");

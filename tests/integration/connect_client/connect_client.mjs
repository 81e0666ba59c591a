// A stock Connect client against attnscope-server's HTTP port: the service's code generated from
// proto/attnscope/v1/attnscope.proto by protoc-gen-es and protoc-gen-connect-es 1.x, and
// @connectrpc/connect-node's Connect transport with no options beyond the base URL and the format.
// Calls Tokenize on each text (unary), StreamAttention on the first (server streaming), and
// Tokenize on a model the server does not have (an error). Prints one JSON line of what came back;
// tests/integration/connect_client_test.cc compares it with the C++ gRPC client's answers.
//
// Usage: node connect_client.mjs --gen DIR --base_url URL --model NAME --format json|binary
//                                --texts JSON_ARRAY
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import path from "node:path";

import { createPromiseClient, ConnectError, Code } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

const { values: args } = parseArgs({
  options: {
    gen: { type: "string" },
    base_url: { type: "string" },
    model: { type: "string" },
    format: { type: "string" },
    texts: { type: "string" },
  },
});
const generated = (name) => pathToFileURL(path.join(args.gen, "attnscope", "v1", name)).href;
const { AttentionService } = await import(generated("attnscope_connect.js"));

const transport = createConnectTransport({
  baseUrl: args.base_url,
  httpVersion: "1.1",
  useBinaryFormat: args.format === "binary",
});
const client = createPromiseClient(AttentionService, transport);
const texts = JSON.parse(args.texts);

const tokensOf = (tokens) => ({
  tokens: tokens.tokens,
  input_ids: tokens.inputIds.map(String),
  original_texts: tokens.originalTexts,
});

const result = { tokenize: [], stream: null, unknown_model: null };
for (const text of texts) {
  const answer = await client.tokenize({ model: args.model, text });
  result.tokenize.push(tokensOf(answer.tokens));
}

const stream = { messages: 0, header: null, layers: [], values: [] };
for await (const message of client.streamAttention({ model: args.model, text: texts[0] })) {
  stream.messages += 1;
  if (message.message.case === "header") {
    const header = message.message.value;
    stream.header = {
      tokens: tokensOf(header.tokens),
      layers: header.layers,
      attentions_shape: header.attentionsShape.map(String),
    };
  } else if (message.message.case === "layer") {
    const piece = message.message.value;
    if (!stream.layers.includes(piece.layer)) stream.layers.push(piece.layer);
    const data = piece.attentions.data;
    const floats = new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
    stream.values.push(floats.length);
  }
}
result.stream = stream;

try {
  await client.tokenize({ model: "no-such-model", text: texts[0] });
  result.unknown_model = { code: "OK" };
} catch (error) {
  const connect = ConnectError.from(error);
  result.unknown_model = { code: Code[connect.code], message: connect.rawMessage };
}
console.log(JSON.stringify(result));

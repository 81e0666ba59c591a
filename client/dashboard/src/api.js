// The HTTP/JSON API of attnscope.v1.AttentionService (server/http_server.h): every method is a POST
// of protobuf's canonical JSON to /attnscope.v1.AttentionService/<Method>; StreamAttention answers
// newline-delimited JSON, one StreamAttentionResponse per line, and a failure after the stream
// started arrives as a last {"error": {"code", "message"}} line.

const PATH = '/attnscope.v1.AttentionService/';

// What the server said went wrong: its Connect code ("invalid_argument", ...) and its message.
export class ApiError extends Error {
  constructor(method, code, message) {
    super(message);
    this.method = method;
    this.code = code;
  }
}

const KEY_STORAGE = 'attnscope.apiKey';
let apiKey = globalThis.sessionStorage?.getItem(KEY_STORAGE) ?? '';

// The key sent as `Authorization: Bearer <key>` to a server started with --api_keys_file; kept in
// sessionStorage, so it lasts as long as the tab and no longer.
export function setApiKey(key) {
  apiKey = key.trim();
  globalThis.sessionStorage?.setItem(KEY_STORAGE, apiKey);
}

async function post(method, body, signal) {
  const headers = { 'Content-Type': 'application/json' };
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  const response = await fetch(PATH + method, {
    method: 'POST',
    headers,
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok) {
    const text = await response.text();
    let error;
    try {
      error = JSON.parse(text);
    } catch {
      // Not the API's JSON error (e.g. a proxy's page): show what arrived.
      throw new ApiError(method, `HTTP ${response.status}`, text.slice(0, 300));
    }
    throw new ApiError(method, error.code, error.message);
  }
  return response;
}

export async function call(method, body, { signal } = {}) {
  return (await post(method, body, signal)).json();
}

// Calls `onMessage` with each message of the stream as it arrives. Lines are cut from the chunks
// without rescanning what was already read: one layer of a long input is a line of several MB
// arriving in many chunks.
export async function stream(method, body, onMessage, { signal } = {}) {
  const response = await post(method, body, signal);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = [];
  // `onMessage` may return a promise (e.g. to let the browser paint): the next message waits.
  const emit = async (line) => {
    if (!line.trim()) return;
    const message = JSON.parse(line);
    if (message.error) throw new ApiError(method, message.error.code, message.error.message);
    await onMessage(message);
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    let start = 0;
    let newline;
    while ((newline = value.indexOf('\n', start)) >= 0) {
      pending.push(value.slice(start, newline));
      await emit(pending.join(''));
      pending = [];
      start = newline + 1;
    }
    if (start < value.length) pending.push(value.slice(start));
  }
  await emit(pending.join(''));
}

// Portcullis code.run bridge (trusted prelude). It gives the user's code
// `tools.call(name, input)`, which sends one JSON line per request into the
// per-run request FIFO (Deno.args[0]) and reads answers from the answer FIFO
// (Deno.args[1]); the gateway runs each
// request through its full pipeline (policy, enforcement, receipt with
// parent_receipt_id) and answers with the ToolOutput and the receipt id.
// Nothing here is a security boundary: the gateway decides every call.
const REQUESTS = Deno.args[0];
const ANSWERS = Deno.args[1];
const enc = new TextEncoder();
const dec = new TextDecoder();
const pending = new Map();
let connP = null;
let nextId = 1;
let reading = false;
let writing = Promise.resolve();
let buffered = "";

function conn() {
  connP ??= (async () => {
    const w = await Deno.open(REQUESTS, { write: true });
    const r = await Deno.open(ANSWERS, { read: true });
    return { w, r, close() { w.close(); r.close(); } };
  })();
  return connP;
}

function send(c, msg) {
  const bytes = enc.encode(JSON.stringify(msg) + "\n");
  writing = writing.then(async () => {
    let off = 0;
    while (off < bytes.length) off += await c.w.write(bytes.subarray(off));
  });
  return writing;
}

async function readLoop(c) {
  reading = true;
  const chunk = new Uint8Array(1 << 16);
  try {
    while (pending.size > 0) {
      const n = await c.r.read(chunk);
      if (n === null) throw new Error("the Portcullis bridge closed");
      buffered += dec.decode(chunk.subarray(0, n), { stream: true });
      let i;
      while ((i = buffered.indexOf("\n")) >= 0) {
        const msg = JSON.parse(buffered.slice(0, i));
        buffered = buffered.slice(i + 1);
        const p = pending.get(msg.id);
        if (p) {
          pending.delete(msg.id);
          p.resolve(msg.answer);
        }
      }
    }
  } catch (e) {
    for (const p of pending.values()) p.reject(e);
    pending.clear();
  } finally {
    reading = false;
  }
}

/** Calls a Portcullis tool; resolves to its ToolOutput plus receipt_id and status. */
async function call(tool, input = {}) {
  if (typeof tool !== "string" || tool === "") {
    throw new TypeError("tools.call(tool, input): tool must be a tool name such as \"fs.read\"");
  }
  const c = await conn();
  const id = nextId++;
  const answer = new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
  await send(c, { id, tool, input });
  if (!reading) readLoop(c);
  return answer;
}

function encodable(v) {
  if (v === undefined) return null;
  try {
    JSON.stringify(v);
    return v;
  } catch {
    return String(v);
  }
}

/** Reports the module's `result` (or default export) and closes the bridge. */
export async function finish(mod) {
  const value = "result" in mod ? mod.result : mod.default;
  const c = await conn();
  await send(c, { id: 0, op: "result", value: encodable(await value) });
  while (pending.size > 0) await new Promise((r) => setTimeout(r, 5));
  c.close();
}

/**
 * Builds the typed stubs: for each granted tool name ("fs.read") a function
 * tools.fs.read(input) that is tools.call("fs.read", input). The gateway
 * chose the names (the caller's granted tools, with safe segments only);
 * the objects have no prototype and are frozen.
 */
export function install(names) {
  const root = Object.create(null);
  root.call = call;
  for (const name of names) {
    const path = name.split(".");
    let node = root;
    for (const seg of path.slice(0, -1)) {
      node[seg] ??= Object.create(null);
      node = node[seg];
    }
    node[path[path.length - 1]] = (input = {}) => call(name, input);
  }
  const freeze = (o) => {
    for (const v of Object.values(o)) if (typeof v === "object") freeze(v);
    return Object.freeze(o);
  };
  globalThis.tools = freeze(root);
}

globalThis.tools = Object.freeze({ call });

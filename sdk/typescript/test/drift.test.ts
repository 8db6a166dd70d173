// The TypeScript interfaces must name exactly the fields of the OpenAPI
// schemas of the same name, so the SDK cannot drift from the gateway.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { REPO } from "./gateway.js";

/** Interface name -> field names, parsed from src/types.ts. */
function interfaces(src: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const re = /export interface (\w+)(?:<[^>]*>)? \{([\s\S]*?)\n\}/g;
  for (const m of src.matchAll(re)) {
    const fields = [...m[2]!.matchAll(/^ {2}(\w+)\??:/gm)].map((f) => f[1]!);
    out.set(m[1]!, fields.sort());
  }
  return out;
}

// Tool-specific shapes live in backends' JSON Schemas, not in components.
const TOOL_TYPES = new Set(["ExecInput", "ExecData", "FSReadData", "FSWriteData"]);

test("types.ts interfaces match openapi.json schemas", () => {
  const doc = JSON.parse(readFileSync(join(REPO, "gateway", "openapi.json"), "utf8")) as {
    components: { schemas: Record<string, { properties?: Record<string, unknown> }> };
  };
  const ifaces = interfaces(readFileSync(join(REPO, "sdk", "typescript", "src", "types.ts"), "utf8"));
  assert.ok(ifaces.size >= 20, `parsed only ${ifaces.size} interfaces`);
  for (const [name, fields] of ifaces) {
    if (TOOL_TYPES.has(name)) continue;
    const schema = doc.components.schemas[name];
    assert.ok(schema, `interface ${name} has no schema in openapi.json`);
    assert.deepEqual(fields, Object.keys(schema.properties ?? {}).sort(), `fields of ${name}`);
  }
});

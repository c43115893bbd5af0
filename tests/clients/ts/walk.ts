// A TypeScript program using the client @hey-api/openapi-ts generated from smsgw's schema (its fetch
// client): it sends a message now, schedules one at a local time and cancels it, waits for the first to be
// delivered, lists the messages and reads the first one's timeline, each call by its operationId. It prints
// what it saw as one JSON object for tests/integration/test_generated_clients.py, which generates the
// client into ./client beside a copy of this file and compiles both with tsc (tsconfig.json here).
//
// node walk.js <base URL> <API key> <to, now> <to, later> <local send_at> <timezone> <deadline seconds>

import { createClient, createConfig } from './client/client';
import { cancelMessage, getMessage, listMessageEvents, listMessages, sendMessage } from './client/sdk.gen';

// Node's globals, declared here so the program needs no @types/node.
declare const process: { argv: string[]; exitCode?: number };

async function main(): Promise<object> {
  const [base, key, nowTo, laterTo, sendAt, timezone, deadlineSeconds] = process.argv.slice(2);
  const client = createClient(createConfig({ baseUrl: base, auth: key }));
  const call = { client, throwOnError: true as const };

  const sent = (await sendMessage({ ...call, body: { to: nowTo, body: 'ts: your code is 1234' } })).data;
  const scheduled = (
    await sendMessage({
      ...call,
      body: { to: laterTo, body: 'ts: see you later', send_at: sendAt, timezone },
      headers: { 'Idempotency-Key': `ts-later-${sendAt}` },
    })
  ).data;
  const canceled = (await cancelMessage({ ...call, path: { public_id: scheduled.id } })).data;
  const fetched = (await getMessage({ ...call, path: { public_id: scheduled.id } })).data;

  // Until the sandbox's receipt says delivered, with a deadline.
  const deadline = Date.now() + Number(deadlineSeconds) * 1000;
  let final = (await getMessage({ ...call, path: { public_id: sent.id } })).data;
  while (final.status !== 'delivered' && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    final = (await getMessage({ ...call, path: { public_id: sent.id } })).data;
  }

  const listed = (await listMessages({ ...call, query: { page_size: 50 } })).data;
  const timeline = (await listMessageEvents({ ...call, path: { public_id: sent.id } })).data;
  return {
    sent: { id: sent.id, status: sent.status, to: sent.to },
    scheduled: { id: scheduled.id, status: scheduled.status, due_at: scheduled.due_at },
    canceled: { id: canceled.id, status: canceled.status },
    fetched: { id: fetched.id, status: fetched.status },
    final: { id: final.id, status: final.status, provider_message_id: final.provider_message_id },
    listed: listed.results.map((m) => ({ id: m.id, status: m.status })),
    timeline: { message: timeline.message, kinds: timeline.events.map((e) => e.kind) },
  };
}

main().then(
  (seen) => console.log(JSON.stringify(seen)),
  (error: unknown) => {
    console.error(error instanceof Error ? error.stack : JSON.stringify(error));
    process.exitCode = 1;
  },
);

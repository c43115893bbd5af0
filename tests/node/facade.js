// The official Twilio Node SDK (npm `twilio`, pinned in package.json) against smsgw's Twilio-compatible
// Messages API, written as a Twilio program would be: only the credentials and the base URL change
// (docs/coming-from-twilio.md). Run by tests/integration/test_twilio_node_sdk.py; by hand:
//
//   node tests/node/facade.js <base URL> <account SID> <API key> <to> <from> [<messaging service SID>]
//
// or with SMSGW_BASE_URL, SMSGW_ACCOUNT_SID, SMSGW_API_KEY, SMSGW_TO, SMSGW_FROM, SMSGW_SERVICE_SID.
// Prints one JSON document: what each call answered. Exits 1 (reason on stderr) when an answer is not
// what Twilio's API would give.
"use strict";

const twilio = require("twilio");

function settings(argv, env) {
  const [base, accountSid, apiKey, to, from, serviceSid] = argv;
  const got = {
    base: base || env.SMSGW_BASE_URL,
    accountSid: accountSid || env.SMSGW_ACCOUNT_SID,
    apiKey: apiKey || env.SMSGW_API_KEY,
    to: to || env.SMSGW_TO,
    from: from || env.SMSGW_FROM,
    serviceSid: serviceSid || env.SMSGW_SERVICE_SID || undefined,
  };
  const missing = ["base", "accountSid", "apiKey", "to", "from"].filter((name) => !got[name]);
  if (missing.length) {
    throw new Error(`missing ${missing.join(", ")} (argv or SMSGW_* environment variables)`);
  }
  // With TWILIO_EDGE or TWILIO_REGION set the SDK rewrites each request's hostname as
  // "<product>.<edge>.<region>.twilio.com" (lib/base/BaseTwilio.js, getHostname), which would turn
  // smsgw's host into a different one. They must be unset.
  for (const name of ["TWILIO_EDGE", "TWILIO_REGION"]) {
    if (env[name]) throw new Error(`${name} is set: unset it, or the SDK rewrites smsgw's hostname`);
  }
  return got;
}

function expect(what, got, want) {
  if (got !== want) throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

function shown(message) {
  const { sid, accountSid, status, to, from, body, messagingServiceSid, errorCode, numSegments } = message;
  return { sid, accountSid, status, to, from, body, messagingServiceSid, errorCode, numSegments };
}

async function main() {
  const s = settings(process.argv.slice(2), process.env);
  const client = twilio(s.accountSid, s.apiKey);
  // Every request URL is built from the domain's baseUrl (lib/base/Domain.js, absoluteUrl).
  client.api.baseUrl = s.base.replace(/\/+$/, "");

  // Send now.
  const sent = await client.messages.create({ to: s.to, from: s.from, body: "node: your code is 1234" });
  expect("sent.status", sent.status, "queued");

  // Twilio's scheduling: SendAt with ScheduleType=fixed (through a messaging service on Twilio).
  const sendAt = new Date(Date.now() + 2 * 60 * 60 * 1000);
  const sender = s.serviceSid ? { messagingServiceSid: s.serviceSid } : { from: s.from };
  const scheduled = await client.messages.create({
    to: s.to,
    ...sender,
    body: "node: later",
    sendAt,
    scheduleType: "fixed",
  });
  expect("scheduled.status", scheduled.status, "scheduled");

  const fetched = await client.messages(scheduled.sid).fetch();
  expect("fetched.sid", fetched.sid, scheduled.sid);
  expect("fetched.status", fetched.status, "scheduled");

  const canceled = await client.messages(scheduled.sid).update({ status: "canceled" });
  expect("canceled.status", canceled.status, "canceled");

  // A refusal: an invalid To is a RestException with Twilio's code 21211 and HTTP 400.
  let error = null;
  try {
    await client.messages.create({ to: "+1555", from: s.from, body: "node: never sent" });
  } catch (err) {
    if (!(err instanceof twilio.RestException)) throw err;
    error = { code: err.code, status: err.status, message: err.message, moreInfo: err.moreInfo };
  }
  if (error === null) throw new Error("a create with To=+1555 was accepted");

  const result = {
    sdkVersion: require("twilio/package.json").version,
    sendAt: sendAt.toISOString(),
    sent: shown(sent),
    scheduled: shown(scheduled),
    fetched: shown(fetched),
    canceled: shown(canceled),
    error,
  };
  process.stdout.write(JSON.stringify(result) + "\n");
}

main().catch((err) => {
  const detail = err instanceof twilio.RestException ? ` (HTTP ${err.status}, code ${err.code})` : "";
  process.stderr.write(`facade.js: ${err.message}${detail}\n`);
  process.exit(1);
});

// Checks the messages drive.py kept with the official `standardwebhooks` npm library: each
// must verify under the secrets that sign it and fail under every other.
//
//     node verify.mjs CASES_FILE
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
let failed = 0;
for (const item of cases) {
  let verified;
  try {
    new Webhook(item.secret).verify(item.body, item.headers);
    verified = true;
  } catch {
    verified = false;
  }
  if (verified !== item.valid) {
    failed += 1;
    console.error(`webhook-interop: ${item.stage}: the Node library says ${verified}, expected ${item.valid}`);
  }
}
if (failed > 0 || cases.length === 0) {
  process.exit(1);
}
console.log(`webhook-interop: the Node library checked ${cases.length} cases`);

// ioredis (from the npm registry, installed by deploy/install-deps.sh)
// against a running shelf-resp: binary values, a pipeline, MGET, DEL and
// error replies. Prints "ok" and exits 0 when every check holds; otherwise
// names the failed check and exits 1.
//
//   node tests/resp/node/ioredis_check.js HOST PORT KEY_PREFIX
"use strict";

const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const Redis = require("ioredis");

async function main() {
  const [host, port, prefix] = process.argv.slice(2);
  const r = new Redis({host, port: Number(port), maxRetriesPerRequest: 0, lazyConnect: true});
  await r.connect();  // ioredis' ready check runs INFO first
  const k = (name) => `${prefix}${name}`;

  // Binary values: every byte value, and 1 MiB of random bytes.
  const all = Buffer.from([...Array(256).keys()]);
  const big = crypto.randomBytes(1 << 20);
  assert.equal(await r.set(k("all"), all), "OK");
  assert.equal(await r.set(k("big"), big), "OK");
  assert.ok(all.equals(await r.getBuffer(k("all"))), "GET of 256 byte values");
  assert.ok(big.equals(await r.getBuffer(k("big"))), "GET of 1 MiB");
  assert.equal(await r.get(k("absent")), null);

  // A pipeline of 100 commands, replies in order.
  const p = r.pipeline();
  for (let i = 0; i < 50; i++) p.set(k(`p${i}`), `value-${i}`);
  for (let i = 0; i < 50; i++) p.get(k(`p${i}`));
  const out = await p.exec();
  assert.equal(out.length, 100);
  for (let i = 0; i < 50; i++) {
    assert.deepEqual(out[i], [null, "OK"]);
    assert.deepEqual(out[50 + i], [null, `value-${i}`]);
  }

  const got = await r.mgetBuffer(k("all"), k("absent"), k("p7"));
  assert.ok(all.equals(got[0]));
  assert.equal(got[1], null);
  assert.equal(got[2].toString(), "value-7");

  assert.equal(await r.del(k("all"), k("big"), k("absent")), 2);
  assert.equal(await r.exists(k("all"), k("big")), 0);

  // Error replies reject with ReplyError and leave the connection usable.
  await assert.rejects(r.set(k("ex"), "v", "EX", 10),
                       (e) => e.name === "ReplyError" && /expiry not supported/.test(e.message));
  await assert.rejects(r.call("NOSUCHCOMMAND"),
                       (e) => e.name === "ReplyError" && /unknown command/.test(e.message));
  assert.equal(await r.ping(), "PONG");
  await r.quit();
  console.log("ok");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

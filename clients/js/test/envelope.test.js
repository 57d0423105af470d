// The envelope and its JSON-lines form: the fields, order and encodings ldpflow reads.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";

import * as client from "../index.js";
import {
  PrefixExtendingMethod, SecureRandom, SplitMix64TestingRandom, envelope, makeOracle,
  optimalHashRange, toJsonLine, toJsonLines,
} from "../index.js";
import { PACKAGE_DIR, REPO_DIR } from "../testing/helpers.js";

const META = { userId: "user-1", reportId: "r-1", eventTime: 1767225600000 };

test("a grr report is one JSON line in the schema's field order", () => {
  const grr = makeOracle("grr", { epsilon: 1, domainSize: 10 });
  assert.equal(toJsonLine(grr, { value: 6 }, META),
    '{"report_id":"r-1","user_id":"user-1","event_time":1767225600000,"oracle":"grr",' +
    '"epsilon":1,"domain_size":10,"value":6}\n');
});

test("bits travel as hex and seeds as signed 64-bit integers", () => {
  const oue = makeOracle("oue", { epsilon: 0.5, domainSize: 20 });
  const line = toJsonLine(oue, { bits: new Uint8Array([0x18, 0x03, 0x09]) }, META);
  assert.match(line, /"bits":"180309"}\n$/);
  const olh = makeOracle("olh", { epsilon: 1, domainSize: 1024 });
  const record = JSON.parse(toJsonLine(olh, { seed: 2n ** 64n - 2n, bucket: 3 }, META));
  assert.equal(record.hash_range, 4);
  assert.equal(record.seed, -2);
  const big = toJsonLine(olh, { seed: 10451216379200822465n, bucket: 0 }, META);
  assert.match(big, /"seed":-7995527694508729151,"bucket":0}/);  // exact, not a float
});

test("onebit carries its column; blh its hash range", () => {
  const onebit = makeOracle("onebit", { epsilon: 1, domainSize: 100 });
  const report = onebit.perturb(19, new SplitMix64TestingRandom(1), { column: 1 });
  assert.match(toJsonLine(onebit, report, META), /"domain_size":100,"column":1,"bit":0}/);
  assert.throws(() => onebit.perturb(19), /column must be an integer/);
  const blh = makeOracle("blh", { epsilon: 1, domainSize: 100 });
  assert.match(toJsonLine(blh, { seed: 5n, bucket: 1 }, META), /"hash_range":2,"seed":5,"bucket":1}/);
});

test("a pgr report is its hyperplane's index as value, with no field of its own", () => {
  const pgr = makeOracle("pgr", { epsilon: 2, domainSize: 100 });
  assert.equal(toJsonLine(pgr, pgr.perturb(5, new SplitMix64TestingRandom(1)), META),
    '{"report_id":"r-1","user_id":"user-1","event_time":1767225600000,"oracle":"pgr",' +
    '"epsilon":2,"domain_size":100,"value":107}\n');
  assert.throws(() => toJsonLine(pgr, { bits: new Uint8Array(13) }, META), /a pgr report has the fields value/);
  assert.throws(() => makeOracle("pgr", { epsilon: 1, domainSize: 10, hashRange: 4 }),
    /hashRange applies to olh, blh, cms and hcms only/);
  assert.throws(() => pgr.perturb(100), /value must be in \[0, 100\)/);
  assert.throws(() => pgr.supports({ value: 133 }, 0), /report value must be in \[0, 133\)/);
  assert.equal(pgr.reportBits, 8);
});

test("cms and hcms carry hash_range = m and num_hashes = k; cms bits are m bits as hex", () => {
  const cms = makeOracle("cms", { epsilon: 2, domainSize: 100, hashRange: 16, numHashes: 8 });
  const report = cms.perturb(5, new SplitMix64TestingRandom(1));  // sketch_reports.json
  assert.equal(toJsonLine(cms, report, META),
    '{"report_id":"r-1","user_id":"user-1","event_time":1767225600000,"oracle":"cms",' +
    '"epsilon":2,"domain_size":100,"hash_range":16,"num_hashes":8,"bits":"8042","column":4}\n');
  assert.throws(() => toJsonLine(cms, { column: 4, bits: new Uint8Array(13) }, META),
    /ceil\(hashRange \/ 8\) = 2 bytes, got 13/);
  const hcms = makeOracle("hcms", { epsilon: 1, domainSize: 100, hashRange: 16, numHashes: 8 });
  assert.equal(toJsonLine(hcms, hcms.perturb(5, new SplitMix64TestingRandom(1)), META),
    '{"report_id":"r-1","user_id":"user-1","event_time":1767225600000,"oracle":"hcms",' +
    '"epsilon":1,"domain_size":100,"hash_range":16,"num_hashes":8,"value":11,"column":4,"bit":0}\n');
  const defaults = JSON.parse(toJsonLine(makeOracle("hcms", { epsilon: 1, domainSize: 10 }),
    { column: 0, value: 0, bit: 1 }, META));
  assert.deepEqual([defaults.hash_range, defaults.num_hashes], [1024, 256]);
  assert.throws(() => toJsonLine(hcms, { column: 4, bit: 1 }, META),
    /a hcms report has the fields column, value, bit/);
});

test("a pem report nests its group, prefix length and configuration", () => {
  const pem = new PrefixExtendingMethod({ topK: 8, valueBits: 32, epsilon: 2 });
  assert.deepEqual([pem.startBits, pem.stepBits, pem.numGroups, pem.hashRange],
    [3, 17, 2, optimalHashRange(2)]);
  const report = pem.perturb(2735729615, "user-0", new SplitMix64TestingRandom(3));
  const record = JSON.parse(toJsonLine(pem, report, { ...META, userId: "user-0" }));
  assert.deepEqual(Object.keys(record), ["report_id", "user_id", "event_time", "oracle", "epsilon",
    "domain_size", "hash_range", "seed", "bucket", "pem"]);
  assert.equal(record.domain_size, 2);  // pem: the number of groups
  assert.deepEqual(record.pem, { group: pem.groupOf("user-0"), prefix_bits: pem.prefixBits[record.pem.group],
    value_bits: 32, top_k: 8, query_limit: 1048576, start_bits: 3, step_bits: 17, codec: "int",
    group_hash: 2 });
  assert.equal(record.pem.group, client.assignGroup("user-0", 2, 2));
  // The group must be that of the user id in the envelope.
  const other = ["a", "b", "c", "d"].find((id) => pem.groupOf(id) !== report.group);
  assert.throws(() => toJsonLine(pem, report, { ...META, userId: other }), /is not the group of userId/);
});

test("pem: 64-bit values, the string codec and ldpflow's configuration errors", () => {
  const wide = new PrefixExtendingMethod({ topK: 4, valueBits: 64, epsilon: 1 });
  const report = wide.perturb(2n ** 64n - 1n, "u", new SplitMix64TestingRandom(1));
  assert.ok(report.bucket >= 0 && report.bucket < wide.hashRange);
  assert.throws(() => wide.perturb(2n ** 64n, "u"), /value must be in \[0, 2\*\*64\)/);
  const strings = new PrefixExtendingMethod({ topK: 4, valueBits: 32, epsilon: 1, codec: "string" });
  assert.equal(client.encodeValue("string", "ab", 32), 0x61620000n);
  assert.throws(() => strings.perturb("hello", "u"), /at most 4 UTF-8 bytes/);
  assert.equal(client.encodeValue("string", "hello", 32, { truncate: true }), 0x68656c6cn);
  assert.equal(client.encodeValue("string", "aé€", 32, { truncate: true }), 0x61c3a900n);
  assert.throws(() => new PrefixExtendingMethod({ topK: 8, valueBits: 32, epsilon: 1, stepBits: 17, numGroups: 5 }),
    /numGroups must equal ceil\(\(valueBits - startBits\) \/ stepBits\) = ceil\(29 \/ 17\) = 2, got 5/);
  assert.throws(() => new PrefixExtendingMethod({ topK: 8, valueBits: 65, epsilon: 1 }), /valueBits/);
});

test("parameters and values are checked with the parameter, constraint and value", () => {
  assert.throws(() => makeOracle("grr", { epsilon: 0, domainSize: 10 }), /epsilon must be in \(0, inf\), got 0/);
  assert.throws(() => makeOracle("grr", { epsilon: "1", domainSize: 10 }), TypeError);
  assert.throws(() => makeOracle("oue", { epsilon: 1, domainSize: 1 }), /domainSize must be >= 2, got 1/);
  assert.throws(() => makeOracle("olh", { epsilon: 1, domainSize: 10, hashRange: 3 }), /power of two/);
  assert.throws(() => makeOracle("grr", { epsilon: 1, domainSize: 10, hashRange: 4 }),
    /hashRange applies to olh, blh, cms and hcms only/);
  assert.throws(() => makeOracle("olh", { epsilon: 1, domainSize: 10, numHashes: 4 }),
    /numHashes applies to cms and hcms only/);
  assert.throws(() => makeOracle("cms", { epsilon: 1, domainSize: 10, hashRange: 100 }), /power of two/);
  assert.throws(() => makeOracle("hcms", { epsilon: 1, domainSize: 10, numHashes: 0 }),
    /numHashes must be >= 1/);
  assert.throws(() => makeOracle("hcms", { epsilon: 1, domainSize: 10, numHashes: 2 ** 16 + 1 }),
    /numHashes must be an integer in \[1, 65536\]/);
  assert.throws(() => makeOracle("rappor", { epsilon: 1, domainSize: 10 }), /oracle must be one of/);
  const grr = makeOracle("grr", { epsilon: 1, domainSize: 10 });
  assert.throws(() => grr.perturb(10), /value must be in \[0, 10\), got 10/);
  assert.throws(() => grr.perturb(1.5), TypeError);
  assert.throws(() => grr.perturb(1, Math.random), /rng must be undefined \(secure\) or a RandomSource/);
  assert.throws(() => toJsonLine(grr, { value: 1 }, { userId: "" }), /userId must be a non-empty string/);
  assert.throws(() => toJsonLine(grr, { bits: new Uint8Array(2) }, META),
    /a grr report has the fields value; got bits/);
  const oue = makeOracle("oue", { epsilon: 1, domainSize: 20 });
  assert.throws(() => toJsonLine(oue, { bits: new Uint8Array(2) }, META), /3 bytes, got 2/);
});

test("the default source is the platform CSPRNG; the seeded one says it is not secure", () => {
  assert.equal(new SecureRandom().secure, true);
  assert.equal(new SplitMix64TestingRandom(1).secure, false);
  let calls = 0;
  const fake = { getRandomValues: (array) => { calls++; array.fill(7); return array; } };
  const source = new SecureRandom(fake);
  assert.equal(source.nextWord(), (7n << 32n) | 7n);
  assert.equal(calls, 1);
  const grr = makeOracle("grr", { epsilon: 1, domainSize: 1000 });
  const values = new Set(Array.from({ length: 50 }, () => grr.perturb(3).value));
  assert.ok(values.size > 1);  // unseeded reports differ
  const record = envelope(grr, { value: 3 }, { userId: "u" });
  assert.match(record.report_id, /^[0-9a-f]{32}$/);
  assert.ok(Math.abs(record.event_time - Date.now()) < 60000);
  assert.equal(toJsonLines([record, record]).split("\n").length, 3);
});

test("the package: version of the Python package, no dependencies, ES module", () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(PACKAGE_DIR, "package.json"), "utf8"));
  const setup = fs.readFileSync(path.join(REPO_DIR, "setup.py"), "utf8");
  assert.equal(pkg.version, /version="([^"]+)"/.exec(setup)[1]);
  assert.equal(client.VERSION, pkg.version);
  assert.equal(pkg.name, "ldpflow-client");
  assert.equal(pkg.type, "module");
  assert.equal(pkg.scripts.test, "node --test");
  assert.equal(pkg.dependencies, undefined);
  for (const name of ["makeOracle", "PrefixExtendingMethod", "toJsonLine", "SecureRandom"]) {
    assert.equal(typeof client[name], "function", name);
  }
});

// The nested record of each heavy-hitter protocol in ldpflow/schemas/report.avsc.
function schemaRecord(name) {
  const schema = JSON.parse(fs.readFileSync(path.join(REPO_DIR, "ldpflow", "schemas", "report.avsc"), "utf8"));
  const field = schema.fields.find((f) => f.name === name);
  return field.type.find((t) => t !== "null").fields.map((f) => f.name);
}

test("spm, mcm, treehist and sfp reports nest their record in the schema's field order", () => {
  const options = { topK: 4, valueBits: 32, epsilon: 2 };
  const protocols = ["pem", "spm", "mcm", "treehist", "sfp"].map((n) => client.makeHeavyHitters(n, options));
  const schema = JSON.parse(fs.readFileSync(path.join(REPO_DIR, "ldpflow", "schemas", "report.avsc"), "utf8"));
  const top = schema.fields.map((f) => f.name);
  for (const protocol of protocols) {
    const userId = `user-${protocol.name}`;
    const report = protocol.perturb(123456789, userId, new SplitMix64TestingRandom(1));
    const line = toJsonLine(protocol, report, { ...META, userId });
    const record = JSON.parse(line);
    const keys = Object.keys(record);
    assert.deepEqual(keys, top.filter((k) => keys.includes(k)), protocol.name);  // schema order
    assert.equal(keys.at(-1), protocol.name);
    assert.deepEqual(Object.keys(record[protocol.name]), schemaRecord(protocol.name), protocol.name);
    assert.equal(record.oracle, protocol.name);
    assert.equal(record.domain_size, protocol.numGroups);
    assert.equal(record.hash_range, protocol.hashRange);
    assert.equal(record[protocol.name].group, protocol.groupOf(userId));
    // Every 64-bit seed travels as a signed long (two's complement of the unsigned seed).
    for (const [name, value] of Object.entries(report)) {
      if (!name.startsWith("seed")) continue;
      const written = new RegExp(`"${name}":(-?\\d+)`).exec(line)[1];
      assert.equal(BigInt(written), BigInt.asIntN(64, value), `${protocol.name} ${name}`);
    }
    const other = ["a", "b", "c", "d", "e", "f"].find((id) => protocol.groupOf(id) !== report.group);
    if (protocol.numGroups > 1) {
      assert.throws(() => toJsonLine(protocol, report, { ...META, userId: other }), /is not the group of userId/);
    }
    assert.throws(() => toJsonLine(protocol, { ...report, value: 3 }, META), /report has the fields/);
  }
  const mcm = protocols[2];
  const report = mcm.perturb(5, "u", new SplitMix64TestingRandom(1));
  assert.equal(report.bits.length, Math.ceil((2 * mcm.numChannels) / 8));
  assert.throws(() => toJsonLine(mcm, { ...report, bits: new Uint8Array(3) }, { ...META, userId: "u" }),
    /bits must be ceil\(2 \* numChannels \/ 8\) = 4 bytes, got 3/);
  // 64-bit keys of the configuration: signed longs too.
  const keyed = client.makeHeavyHitters("sfp", { ...options, hashSeed: "18446744073709551615" });
  const line = toJsonLine(keyed, keyed.perturb(1, "u", new SplitMix64TestingRandom(1)), { ...META, userId: "u" });
  assert.match(line, /"hash_seed":-1,/);
});

test("every heavy-hitter client takes groupHash, writes it and draws its groups by it", () => {
  const ids = Array.from({ length: 40 }, (_, i) => `user-${i}`);
  for (const name of Object.keys(client.HEAVY_HITTERS)) {
    const options = { topK: 4, valueBits: 32, epsilon: 2 };
    const fresh = client.makeHeavyHitters(name, options);
    const old = client.makeHeavyHitters(name, { ...options, groupHash: 1 });
    assert.equal(fresh.groupHash, 2, name);
    assert.equal(old.groupHash, 1, name);
    assert.equal(fresh.nestedParameters().group_hash, 2, name);
    assert.equal(old.nestedParameters().group_hash, 1, name);
    for (const id of ids) {
      assert.equal(fresh.groupOf(id), client.assignGroup(id, fresh.numGroups, 2), name);
      assert.equal(old.groupOf(id), client.assignGroup(id, old.numGroups, 1), name);
    }
    if (fresh.numGroups > 1) {  // the versions split users differently
      assert.ok(ids.some((id) => fresh.groupOf(id) !== old.groupOf(id)), name);
    }
    const report = old.perturb(7, "u", new SplitMix64TestingRandom(1));
    assert.equal(JSON.parse(toJsonLine(old, report, { ...META, userId: "u" }))[name].group_hash, 1);
    assert.throws(() => client.makeHeavyHitters(name, { ...options, groupHash: 3 }),
      /groupHash must be one of 1, 2, got 3/);
  }
});

test("makeHeavyHitters: the five protocols, their checks, and no option they lack", () => {
  assert.deepEqual(Object.keys(client.HEAVY_HITTERS), ["pem", "spm", "mcm", "treehist", "sfp"]);
  const base = { topK: 8, valueBits: 32, epsilon: 4 };
  assert.throws(() => client.makeHeavyHitters("olh", base), /protocol must be one of pem spm mcm treehist sfp, got olh \(olh is a frequency oracle: use makeOracle\)/);
  assert.throws(() => makeOracle("spm", { epsilon: 1, domainSize: 4 }), /use makeHeavyHitters/);
  assert.throws(() => client.makeHeavyHitters("spm", { ...base, stepBits: 4 }), /spm has no option stepBits/);
  assert.throws(() => client.makeHeavyHitters("mcm", { ...base, hashRange: 4 }), /mcm has no option hashRange/);
  assert.throws(() => client.makeHeavyHitters("spm", { ...base, valueBits: 1 }), /valueBits must be >= 2 for segment pairs, got 1/);
  assert.throws(() => client.makeHeavyHitters("spm", { ...base, segmentTop: 2000 }), /segmentTop must be <= 1024/);
  assert.throws(() => client.makeHeavyHitters("mcm", { ...base, numChannels: 2 ** 21 }), /numChannels must be <= queryLimit=1048576/);
  assert.throws(() => client.makeHeavyHitters("mcm", { ...base, channelSeed: -1 }), /channelSeed must be in \[0, 2\*\*64\), got -1/);
  assert.throws(() => client.makeHeavyHitters("treehist", { ...base, stepBits: 21 }), /stepBits must be <= min\(valueBits, 20\) = 20, got 21/);
  assert.throws(() => client.makeHeavyHitters("treehist", { ...base, hashRange: 3 }), /hashRange must be a power of two/);
  assert.throws(() => client.makeHeavyHitters("sfp", { ...base, fragmentBits: 12 }), /fragmentBits must divide valueBits=32, got 12/);
  assert.throws(() => client.makeHeavyHitters("sfp", { ...base, hashBits: 7 }), /hashBits \+ fragmentBits must be <= 22, got 7 \+ 16/);
  assert.throws(() => client.makeHeavyHitters("sfp", { ...base, codec: "string", valueBits: 20, fragmentBits: 4 }), /multiple of 8/);
  // ldpflow's derived configurations (heavy_hitters/{spm,mcm,treehist,sfp}.py, printed by
  // ldpflow; cost_aware_hash_range of config.py).
  const spm = client.makeHeavyHitters("spm", { ...base, valueBits: 64 });
  assert.deepEqual([spm.numSegments, spm.numGroups, spm.hashRange, spm.segmentTop], [4, 6, 4, 8]);
  assert.deepEqual(spm.segmentBounds, [[48, 16], [32, 16], [16, 16], [0, 16]]);
  const mcm = client.makeHeavyHitters("mcm", base);
  assert.deepEqual([mcm.numChannels, mcm.numGroups, mcm.hashRange], [32, 32, 8]);
  const treehist = client.makeHeavyHitters("treehist", base);
  assert.deepEqual([treehist.numGroups, treehist.groupBits, treehist.hashRange], [5, [8, 16, 24, 32, 32], 32]);
  const sfp = client.makeHeavyHitters("sfp", base);
  assert.deepEqual([sfp.numGroups, sfp.pieceBits, sfp.hashRange], [2, 22, 8]);
  assert.deepEqual([1, 2, 4, 8, 12].map((e) => client.costAwareHashRange(e)), [4, 8, 32, 64, 64]);
});

test("heavy-hitter clients draw from crypto.getRandomValues unless given a source", () => {
  const original = globalThis.crypto.getRandomValues;
  let calls = 0;
  globalThis.crypto.getRandomValues = function spy(array) {
    calls++;
    return original.call(this, array);
  };
  try {
    for (const name of ["spm", "mcm", "treehist", "sfp"]) {
      const protocol = client.makeHeavyHitters(name, { topK: 4, valueBits: 32, epsilon: 2 });
      const before = calls;
      const seeds = new Set();
      for (let i = 0; i < 600; i++) seeds.add(protocol.perturb(7, `u${i}`).seed);
      assert.ok(calls > before, `${name} drew no secure words`);
      assert.equal(seeds.size, 600, name);
    }
  } finally {
    globalThis.crypto.getRandomValues = original;
  }
});

// The published test vectors (docs/testvectors) hold exactly in JavaScript: client_reports.json
// for the eight oracles of that file, sketch_reports.json for cms, hcms and pgr,
// heavy_hitter_reports.json for pem, spm, mcm, treehist and sfp, group_hash.json for both group
// hash versions.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  HEAVY_HITTERS, ORACLES, SplitMix64TestingRandom, assignGroup, encodeValue, chooseGeometry, hashValue, makeOracle, sketchSeeds,
  splitmix64Mix, splitmix64Stream, userKey, DEFAULT_GROUP_HASH, GROUP_HASHES, GROUP_HASH_KEY,
  keyedStringHash,
} from "../index.js";
import { blake2b } from "../src/blake2b.js";
import { mixHalves } from "../src/hashing.js";
import { fillRate } from "../src/subset.js";
import * as client from "../index.js";
import {
  clientParameters, readVectors, replayHeavyHitterVector, wireForm,
} from "../testing/helpers.js";

test("hash family matches hash_family.json bit for bit", () => {
  const cases = readVectors("hash_family.json");
  assert.ok(cases.length >= 30);
  for (const c of cases) {
    const bucket = hashValue(BigInt(c.seed), BigInt(c.value), c.value_bits, c.hash_range);
    assert.equal(bucket, c.bucket, JSON.stringify(c));
  }
});

// The oracles whose vectors are in sketch_reports.json.
const SKETCHES = ["cms", "hcms", "pgr"];

function replay(c) {
  const oracle = makeOracle(c.oracle, clientParameters(c.parameters));
  const rng = new SplitMix64TestingRandom(c.client_seed);
  const extra = c.column === undefined ? undefined : { column: c.column };
  assert.deepEqual(wireForm(oracle.perturb(c.value, rng, extra)), c.report, JSON.stringify(c));
}

test("client reports match client_reports.json for every oracle", () => {
  const cases = readVectors("client_reports.json");
  assert.deepEqual(new Set(cases.map((c) => c.oracle)),
    new Set(Object.keys(ORACLES).filter((name) => !SKETCHES.includes(name))));
  cases.forEach(replay);
});

test("cms, hcms and pgr reports match sketch_reports.json exactly", () => {
  // The file may hold oracles this client does not implement (skipped); these it must.
  const cases = readVectors("sketch_reports.json").filter((c) => Object.hasOwn(ORACLES, c.oracle));
  for (const name of SKETCHES) {
    assert.ok(cases.filter((c) => c.oracle === name).length >= 3, `${name} cases`);
  }
  cases.forEach(replay);
});

test("heavy-hitter reports match heavy_hitter_reports.json exactly", () => {
  const cases = readVectors("heavy_hitter_reports.json");
  for (const name of Object.keys(HEAVY_HITTERS)) {
    for (const codec of ["int", "string"]) {
      assert.ok(cases.filter((c) => c.protocol === name && c.codec === codec).length >= 3,
        `${name} ${codec} cases`);
    }
  }
  for (const c of cases) {
    const { protocol, value, report, wire } = replayHeavyHitterVector(client, c);
    assert.equal(encodeValue(c.codec, value, protocol.valueBits).toString(), c.code);
    assert.equal(protocol.groupHash, c.parameters.group_hash ?? 1);
    assert.equal(report.group, protocol.groupOf(c.user_id));
    assert.deepEqual(wire, c.report, JSON.stringify(c));
    // The same fields in the same order as ldpflow's report columns.
    assert.deepEqual(Object.keys(report), Object.keys(c.report), c.protocol);
  }
});

test("pgr's geometry (q, t, K) of the vectors' parameters and its canonical order", () => {
  // ldpflow.core.oracles.pgr.choose_geometry; K = (q^t - 1)/(q - 1).
  const expected = [[2, 100, 11, 3, 133], [1, 1000, 3, 7, 1093], [4, 1024, 53, 3, 2863],
    [1, 6, 5, 2, 6], [2, 64, 11, 3, 133]];
  for (const [epsilon, d, q, t, K] of expected) {
    const pgr = makeOracle("pgr", { epsilon, domainSize: d });
    assert.deepEqual([...pgr.geometry, pgr.order], [q, t, K], `epsilon ${epsilon}, d ${d}`);
    assert.deepEqual(chooseGeometry(epsilon, d), [q, t]);
  }
  // Block j holds the q^j vectors with leading 1 at position t-1-j, by increasing code.
  const pgr = makeOracle("pgr", { epsilon: 1, domainSize: 10 });
  assert.deepEqual(pgr.geometry, [3, 3]);
  const vectors = Array.from({ length: pgr.order }, (_, i) => pgr.vector(i).join(""));
  assert.deepEqual(vectors, ["001", "010", "011", "012", "100", "101", "102", "110", "111",
    "112", "120", "121", "122"]);
  // Each hyperplane holds h = (q^(t-1) - 1)/(q - 1) = 4 of the K points; supports() agrees.
  const dot = (a, b) => a.split("").reduce((sum, c, i) => sum + Number(c) * Number(b[i]), 0) % 3;
  vectors.forEach((u, y) => {
    assert.equal(vectors.filter((x) => dot(u, x) === 0).length, 4);
    vectors.slice(0, pgr.domainSize).forEach((x, v) => assert.equal(pgr.supports({ value: y }, v), dot(u, x) === 0));
  });
});

test("the sketches' public seeds are mix(GOLDEN_GAMMA * (j + 1)) and h_j the hash family", () => {
  const seeds = sketchSeeds(300);
  // ldpflow.core.oracles.sketch.sketch_seeds(3)
  assert.deepEqual(seeds.slice(0, 3), [16294208416658607535n, 7960286522194355700n,
    487617019471545679n]);
  seeds.forEach((s, j) => assert.equal(s, splitmix64Mix((0x9e3779b97f4a7c15n * BigInt(j + 1)) % 2n ** 64n)));
  const cms = makeOracle("cms", { epsilon: 1, domainSize: 1000, hashRange: 64, numHashes: 300 });
  assert.equal(cms.valueBits, 10);
  for (const [j, v] of [[0, 0], [1, 999], [299, 512], [17, 3]]) {
    assert.equal(cms.bucket(j, v), hashValue(seeds[j], BigInt(v), 10, 64));
  }
  assert.deepEqual([cms.hashRange, cms.numHashes], [64, 300]);
  const defaults = makeOracle("hcms", { epsilon: 1, domainSize: 2 });
  assert.deepEqual([defaults.hashRange, defaults.numHashes, defaults.valueBits], [1024, 256, 1]);
});

test("the 32-bit splitmix64 equals the BigInt one", () => {
  const rng = new SplitMix64TestingRandom(12345);
  for (let i = 0; i < 2000; i++) {
    const z = rng.nextWord();
    const [high, low] = mixHalves(Number(z >> 32n), Number(z & 0xffffffffn));
    assert.equal((BigInt(high) << 32n) | BigInt(low), splitmix64Mix(z));
  }
  // ldpflow's SplitMix64Source(1): output i is the finaliser of 1 + (i + 1) * gamma.
  const words = [new SplitMix64TestingRandom(1).nextWord()];
  assert.deepEqual(words, splitmix64Stream(1n, 1));
  assert.equal(words[0], 10451216379200822465n);
});

test("seeded primitives replay ldpflow's SplitMix64Source", () => {
  // Values printed by ldpflow (SplitMix64Source(1)): words(1), then uniform(1), below(10, 1).
  const rng = new SplitMix64TestingRandom(1);
  assert.equal(rng.nextWord(), 10451216379200822465n);
  assert.equal(rng.uniform(), 0.7457817572627011);
  assert.equal(rng.below(10), 9);
});

test("BLAKE2b matches RFC 7693 and the user keys of ldpflow", () => {
  const abc = Buffer.from(blake2b(new TextEncoder().encode("abc"), 64)).toString("hex");
  assert.equal(abc, "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1"
    + "7d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923");
  // ldpflow.core.heavy_hitters.user_keys / assign_groups of the same ids.
  const ids = ["", "user-0", "js-user-12345", "é漢字🙂", "x".repeat(200)];
  assert.deepEqual(ids.map((id) => userKey(id, 1).toString()), [
    "13020603013274838756", "8188522848524297003", "6034145075336118184",
    "12564752017436547020", "10205568089174323286"]);
  assert.deepEqual(ids.map((id) => assignGroup(id, 7, 1)), [4, 4, 6, 2, 5]);
  assert.deepEqual(ids.map((id) => assignGroup(id, 2, 1)), [0, 0, 1, 1, 1]);
});

test("the group hash matches group_hash.json exactly, in both versions", () => {
  const vectors = readVectors("group_hash.json");
  assert.equal(BigInt(vectors.key), GROUP_HASH_KEY);
  assert.deepEqual([...GROUP_HASHES], [1, 2]);
  assert.equal(DEFAULT_GROUP_HASH, 2);
  for (const c of vectors.ids) {
    assert.equal(Buffer.from(new TextEncoder().encode(c.user_id)).toString("hex"), c.utf8);
    assert.equal(keyedStringHash(new TextEncoder().encode(c.user_id), GROUP_HASH_KEY).toString(),
      c.keyed_hash, JSON.stringify(c.user_id));
    for (const version of GROUP_HASHES) {
      assert.equal(userKey(c.user_id, version).toString(), c.keys[String(version)]);
      for (const [g, group] of Object.entries(c.groups[String(version)])) {
        assert.equal(assignGroup(c.user_id, Number(g), version), group, `${c.user_id} v${version} g=${g}`);
      }
    }
    assert.equal(userKey(c.user_id).toString(), c.keys["2"]);  // the default: version 2
  }
  assert.ok(vectors.keyed_hashes.length >= 20);
  for (const c of vectors.keyed_hashes) {
    assert.equal(keyedStringHash(Uint8Array.from(Buffer.from(c.bytes, "hex")), BigInt(c.key)).toString(),
      c.hash, JSON.stringify(c));
  }
  assert.throws(() => assignGroup("a", 2, 3), /groupHash must be one of 1, 2, got 3/);
});

test("the SS fill rate is ldpflow's", () => {
  // ldpflow.core.oracles.subset._fill_rate(d, omega); it fixes the order of the draws.
  const expected = [[2, 1, 0.59765625], [3, 1, 0.4296875], [20, 5, 0.19921875],
    [32, 8, 0.20703125], [64, 8, 0.08203125], [100, 27, 0.24609375], [1000, 269, 0.26171875],
    [1000, 12, 0.00390625], [4097, 1101, 0.265625], [50000, 13447, 0.265625]];
  for (const [d, w, rate] of expected) assert.equal(fillRate(d, w), rate, `d=${d} omega=${w}`);
});

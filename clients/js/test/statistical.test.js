// The law of each oracle's reports, from a seeded generator: support rates within k-sigma of
// p* and q* (binomial sigma, k from a Bonferroni bound over every band checked here).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  PrefixExtendingMethod, SplitMix64TestingRandom, hashValue, makeHeavyHitters, makeOracle,
} from "../index.js";
import { popcount } from "../src/oracle.js";
import { upperQuantile } from "../testing/helpers.js";

const N = 20000;
const BANDS = 80;  // at most this many bands are checked in this file
const K = upperQuantile(1e-4 / (2 * BANDS));  // two-sided, family-wise error 1e-4 (~4.9)

function assertRate(count, n, probability, label) {
  const sigma = Math.sqrt(n * probability * (1 - probability));
  const z = (count - n * probability) / sigma;
  assert.ok(Math.abs(z) <= K,
    `${label}: ${count} of ${n}, expected ${(n * probability).toFixed(1)} (z = ${z.toFixed(2)}, k = ${K.toFixed(2)})`);
}

const CASES = [
  ["grr", { epsilon: 1.0, domainSize: 10 }],
  ["oue", { epsilon: 1.5, domainSize: 21 }],
  ["sue", { epsilon: 2.0, domainSize: 21 }],
  ["olh", { epsilon: 2.0, domainSize: 1000 }],
  ["blh", { epsilon: 0.5, domainSize: 1000 }],
  ["hr", { epsilon: 1.0, domainSize: 100 }],
  ["ss", { epsilon: 1.0, domainSize: 32 }],
  ["pgr", { epsilon: 2.0, domainSize: 100 }],  // q = 11, t = 3
];

for (const [name, parameters] of CASES) {
  test(`${name}: a report supports its value with p* and another with q*`, () => {
    const oracle = makeOracle(name, parameters);
    const rng = new SplitMix64TestingRandom(20240611 + name.length);
    const value = 7;
    const others = [0, 9];
    let own = 0;
    const other = others.map(() => 0);
    for (let i = 0; i < N; i++) {
      const report = oracle.perturb(value, rng);
      own += oracle.supports(report, value);
      others.forEach((u, j) => { other[j] += oracle.supports(report, u); });
      if (report.bits) {  // bitmaps: padding bits zero; ss: exactly omega members
        const d = oracle.domainSize;
        if (d % 8) assert.equal(report.bits[report.bits.length - 1] >> (d % 8), 0);
        if (name === "ss") assert.equal(popcount(report.bits), oracle.subsetSize);
      }
    }
    assertRate(own, N, oracle.p, `${name} p*`);
    others.forEach((u, j) => assertRate(other[j], N, oracle.q, `${name} q* (value ${u})`));
  });
}

test("pgr: the hyperplane contains the true point with p* and another with q* (t = 7; t = 2 with redraws)", () => {
  // q = 3, t = 7 (K = 1093); q = 2, t = 2 (K = 3), where a member's round is drawn again
  // with chance 1/2.
  for (const [parameters, geometry, value, other] of [[{ epsilon: 1.0, domainSize: 1000 }, [3, 7], 999, 5],
    [{ epsilon: 0.5, domainSize: 3 }, [2, 2], 1, 2]]) {
    const oracle = makeOracle("pgr", parameters);
    assert.deepEqual(oracle.geometry, geometry);
    const rng = new SplitMix64TestingRandom(4711 + value);
    let own = 0;
    let others = 0;
    for (let i = 0; i < N; i++) {
      const report = oracle.perturb(value, rng);
      assert.ok(Number.isInteger(report.value) && report.value >= 0 && report.value < oracle.order);
      own += oracle.supports(report, value);
      others += oracle.supports(report, other);
    }
    assertRate(own, N, oracle.p, `pgr ${geometry} p*`);
    assertRate(others, N, oracle.q, `pgr ${geometry} q* (value ${other})`);
  }
});

test("the secure source gives the same law (oue through crypto.getRandomValues)", () => {
  // Not seeded (it cannot be): a band of k ~ 4.9 sigma fails with probability ~1e-6.
  const oracle = makeOracle("oue", { epsilon: 1.0, domainSize: 30 });
  let own = 0;
  let other = 0;
  for (let i = 0; i < N; i++) {
    const report = oracle.perturb(4);
    own += oracle.supports(report, 4);
    other += oracle.supports(report, 29);
  }
  assertRate(own, N, oracle.p, "oue p* (secure)");
  assertRate(other, N, oracle.q, "oue q* (secure)");
});

test("grr: the other values are uniform", () => {
  const oracle = makeOracle("grr", { epsilon: 2.0, domainSize: 6 });
  const rng = new SplitMix64TestingRandom(99);
  const counts = new Array(6).fill(0);
  for (let i = 0; i < N; i++) counts[oracle.perturb(2, rng).value]++;
  counts.forEach((c, u) => assertRate(c, N, u === 2 ? oracle.p : oracle.q, `grr value ${u}`));
});

test("epsilon-LDP: the likelihood ratio is e**epsilon (grr, oue, olh, hr, pgr)", () => {
  const close = (ratio, label) => assert.ok(Math.abs(ratio / Math.exp(0.7) - 1) < 1e-12, `${label}: ${ratio}`);
  const grr = makeOracle("grr", { epsilon: 0.7, domainSize: 50 });
  close(grr.p / grr.q, "grr");
  const oue = makeOracle("oue", { epsilon: 0.7, domainSize: 50 });
  close((oue.p * (1 - oue.q)) / ((1 - oue.p) * oue.q), "oue");
  const olh = makeOracle("olh", { epsilon: 0.7, domainSize: 50 });
  close(olh.p / ((1 - olh.p) / (olh.hashRange - 1)), "olh");  // given the seed: g-ary RR
  const hr = makeOracle("hr", { epsilon: 0.7, domainSize: 50 });
  close(hr.p / (1 - hr.p), "hr");  // member vs non-member, K/2 of each
  for (const d of [3, 50, 1000]) {  // a member hyperplane's chance p*/h against a non-member's
    const pgr = makeOracle("pgr", { epsilon: 0.7, domainSize: d });
    const [q, t] = pgr.geometry;
    const h = (q ** (t - 1) - 1) / (q - 1);
    close((pgr.p / h) / ((1 - pgr.p) / (pgr.order - h)), `pgr d=${d}`);
  }
});

test("onebit: P[bit = 1] is e/(e+1) inside B_column and 1/(e+1) outside", () => {
  const oracle = makeOracle("onebit", { epsilon: 1.0, domainSize: 100 });
  const e = Math.exp(1.0);
  const rng = new SplitMix64TestingRandom(5);
  for (const [value, column, probability] of [[3, 4, e / (e + 1)], [3, 1, 1 / (e + 1)]]) {
    let ones = 0;
    for (let i = 0; i < N; i++) ones += oracle.perturb(value, rng, { column }).bit;
    assertRate(ones, N, probability, `onebit value ${value} column ${column}`);
  }
});

test("bit-sliced Bernoulli bits have rate p, deep expansions included", () => {
  const rng = new SplitMix64TestingRandom(31337);
  for (const p of [0.5, 1 / 3, 0.1, 1 / (Math.E + 1), 1 - 2 ** -40, 2 ** -12 + 2 ** -45]) {
    let ones = 0;
    const rows = 400;
    for (let i = 0; i < rows; i++) ones += popcount(rng.bernoulliBits(p, 250));
    assertRate(ones, rows * 250, p, `bernoulliBits(${p})`);
  }
  assert.deepEqual([...rng.bernoulliBits(1, 12)], [255, 15]);
  assert.deepEqual([...rng.bernoulliBits(0, 12)], [0, 0]);
});

test("below() is uniform and uniform() lies in [0, 1)", () => {
  const rng = new SplitMix64TestingRandom(8);
  const counts = new Array(7).fill(0);
  for (let i = 0; i < N; i++) counts[rng.below(7)]++;
  counts.forEach((c, v) => assertRate(c, N, 1 / 7, `below(7) = ${v}`));
  for (let i = 0; i < 1000; i++) {
    const u = rng.uniform();
    assert.ok(u >= 0 && u < 1);
  }
});

test("pem: the group's prefix is reported through OLH with p* and q*", () => {
  const pem = new PrefixExtendingMethod({ topK: 8, valueBits: 32, epsilon: 3.0 });
  const rng = new SplitMix64TestingRandom(77);
  const value = 0xdeadbeefn;
  const own = new Array(pem.numGroups).fill(0);
  const other = new Array(pem.numGroups).fill(0);
  const seen = new Array(pem.numGroups).fill(0);
  for (let i = 0; i < N; i++) {
    const userId = `stat-user-${i}`;
    const report = pem.perturb(value, userId, rng);
    const bits = pem.prefixBits[report.group];
    assert.equal(report.group, pem.groupOf(userId));
    assert.equal(report.prefix_bits, bits);
    const prefix = value >> BigInt(32 - bits);
    seen[report.group]++;
    own[report.group] += hashValue(report.seed, prefix, bits, pem.hashRange) === report.bucket;
    other[report.group] += hashValue(report.seed, prefix ^ 1n, bits, pem.hashRange) === report.bucket;
  }
  for (let g = 0; g < pem.numGroups; g++) {
    assertRate(seen[g], N, 1 / pem.numGroups, `pem group ${g} size`);
    assertRate(own[g], seen[g], pem.p, `pem group ${g} p*`);
    assertRate(other[g], seen[g], pem.q, `pem group ${g} q*`);
  }
});

test("spm, treehist, sfp and mcm: each OLH component keeps its value with p*; mcm's bits flip at their rate", () => {
  const value = 0xdeadbeefn;
  const options = { topK: 4, valueBits: 32, epsilon: 2 };
  const rng = new SplitMix64TestingRandom(777001);
  const hits = (protocol, make) => {
    const counts = [];
    for (let i = 0; i < N; i++) {
      make(protocol.perturb(value, `stat-user-${i}`, rng)).forEach((hit, j) => {
        counts[j] = (counts[j] ?? 0) + hit;
      });
    }
    return counts;
  };
  const spm = makeHeavyHitters("spm", options);
  const keeps = (seed, v, bits, bucket, p) => Number(hashValue(seed, v, bits, p.hashRange) === bucket);
  const seg = (r, side) => spm.pairs[r.group][side === "a" ? 0 : 1];
  hits(spm, (r) => [
    keeps(r.seed_a, spm.segment(value, seg(r, "a")), spm.segmentBounds[seg(r, "a")][1], r.bucket_a, spm),
    keeps(r.seed_b, spm.segment(value, seg(r, "b")), spm.segmentBounds[seg(r, "b")][1], r.bucket_b, spm),
    keeps(r.seed, value, 32, r.bucket, spm),
  ]).forEach((count, j) => assertRate(count, N, spm.p, `spm component ${"abf"[j]}`));
  const treehist = makeHeavyHitters("treehist", options);
  hits(treehist, (r) => [keeps(r.seed, value >> BigInt(32 - r.prefix_bits), r.prefix_bits, r.bucket, treehist)])
    .forEach((count) => assertRate(count, N, treehist.p, "treehist prefix"));
  const sfp = makeHeavyHitters("sfp", options);
  const piece = (group) => (sfp.valueHash(value) << BigInt(sfp.fragmentBits)) | sfp.fragment(value, group);
  hits(sfp, (r) => [keeps(r.seed_piece, piece(r.group), sfp.pieceBits, r.bucket_piece, sfp),
    keeps(r.seed, value, 32, r.bucket, sfp)])
    .forEach((count, j) => assertRate(count, N, sfp.p, `sfp ${["piece", "value"][j]}`));
  const mcm = makeHeavyHitters("mcm", options);
  const width = 2 * mcm.numChannels;
  const item = (group) => 2 * mcm.channelOf(value) + Number((value >> BigInt(group)) & 1n);
  const [own, others, full] = hits(mcm, (r) => {
    const bit = (r.bits[item(r.group) >> 3] >> (item(r.group) & 7)) & 1;
    return [bit, popcount(r.bits) - bit, keeps(r.seed, value, 32, r.bucket, mcm)];
  });
  assertRate(own, N, 1 - mcm.flipProbability, "mcm item bit");
  assertRate(others, N * (width - 1), mcm.flipProbability, "mcm other bits");
  assertRate(full, N, mcm.p, "mcm value");
});

// The sketches: a report picks hash function j uniformly, so whether it supports a value u
// is Bernoulli with the mean over j of its chance given j: for CMS P = 1 - flip where
// h_j(u) = h_j(v) and flip elsewhere; for HCMS e/(e+1) where the buckets collide and 1/2
// elsewhere (two distinct rows of H_m agree on half the coordinates).
const SKETCH_CASES = [
  ["cms", { epsilon: 2.0, domainSize: 1000, hashRange: 16, numHashes: 8 }],
  ["hcms", { epsilon: 1.0, domainSize: 1000, hashRange: 16, numHashes: 8 }],
];

for (const [name, parameters] of SKETCH_CASES) {
  test(`${name}: support rates from the public hash functions; column and coordinate uniform`, () => {
    const oracle = makeOracle(name, parameters);
    const { numHashes: k, hashRange: m } = oracle;
    const rng = new SplitMix64TestingRandom(20240611 + name.length);
    const value = 7;
    const buckets = (u) => Array.from({ length: k }, (_, j) => oracle.bucket(j, u));
    const own = buckets(value);
    const collisions = (u) => buckets(u).filter((b, j) => b === own[j]).length;
    // A value colliding with 7 under some of the functions and one colliding under none.
    const colliding = Array.from({ length: 1000 }, (_, u) => u).find((u) => u !== value && collisions(u) > 0);
    const apart = Array.from({ length: 1000 }, (_, u) => u).find((u) => u !== value && collisions(u) === 0);
    const [hit, miss] = name === "cms" ? [1 - oracle.flip, oracle.flip] : [oracle.e / (oracle.e + 1), 0.5];
    const rate = (u) => (collisions(u) * hit + (k - collisions(u)) * miss) / k;
    const others = [colliding, apart];
    let supported = 0;
    const other = others.map(() => 0);
    const columns = new Array(k).fill(0);
    let lowHalf = 0;
    for (let i = 0; i < N; i++) {
      const report = oracle.perturb(value, rng);
      assert.ok(Number.isInteger(report.column) && report.column >= 0 && report.column < k);
      columns[report.column]++;
      supported += oracle.supports(report, value);
      others.forEach((u, j) => { other[j] += oracle.supports(report, u); });
      if (name === "cms") assert.equal(report.bits.length, m / 8);
      else {
        assert.ok(report.value >= 0 && report.value < m && (report.bit === 0 || report.bit === 1));
        lowHalf += report.value < m / 2;
      }
    }
    assertRate(supported, N, hit, `${name} own value`);
    others.forEach((u, j) => assertRate(other[j], N, rate(u),
      `${name} value ${u} (${collisions(u)} of ${k} collide)`));
    assertRate(columns[0], N, 1 / k, `${name} column 0`);
    assertRate(columns[k - 1], N, 1 / k, `${name} column ${k - 1}`);
    if (name === "hcms") assertRate(lowHalf, N, 0.5, "hcms coordinate l < m/2");
  });
}

test("cms: the other m-1 bits are set at the flip rate; narrow sketches pad with zeros", () => {
  const cms = makeOracle("cms", { epsilon: 1.5, domainSize: 50, hashRange: 64, numHashes: 4 });
  const rng = new SplitMix64TestingRandom(606);
  const rows = 2000;
  let others = 0;
  for (let i = 0; i < rows; i++) {
    const report = cms.perturb(11, rng);
    others += popcount(report.bits) - cms.supports(report, 11);
  }
  assertRate(others, rows * 63, cms.flip, "cms other bits");
  const narrow = makeOracle("cms", { epsilon: 1.0, domainSize: 10, hashRange: 4, numHashes: 3 });
  for (let i = 0; i < 500; i++) {
    const { bits } = narrow.perturb(i % 10, rng);
    assert.equal(bits.length, 1);
    assert.equal(bits[0] >> 4, 0);
  }
});

test("epsilon-LDP of the sketches: the likelihood ratio is e**epsilon", () => {
  for (const epsilon of [0.3, 1, 4]) {
    const cms = makeOracle("cms", { epsilon, domainSize: 100 });
    // Two values' vectors differ in at most two bits, each a ratio (1 - flip) / flip.
    const ratio = ((1 - cms.flip) / cms.flip) ** 2;
    assert.ok(Math.abs(ratio / Math.exp(epsilon) - 1) < 1e-12, `cms ${epsilon}: ${ratio}`);
    const hcms = makeOracle("hcms", { epsilon, domainSize: 100 });
    const keep = hcms.e / (hcms.e + 1);
    assert.ok(Math.abs(keep / (1 - keep) / Math.exp(epsilon) - 1) < 1e-12, `hcms ${epsilon}`);
  }
});

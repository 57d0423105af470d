#!/usr/bin/env node
/**
 * Simulate a population's reports with the JavaScript client: JSON lines that `ldpflow
 * estimate` (oracles) or `ldpflow heavy-hitters --protocol P` (pem, spm, mcm, treehist, sfp)
 * read, and `truth.json`.
 *
 *   node tools/simulate.js --oracle olh --epsilon 4 --domain_size 64 --users 100000 \
 *       --distribution zipf:1.1 --seed 7 --output /tmp/js-olh
 *   node tools/simulate.js --oracle cms --epsilon 2 --domain_size 64 --hash_range 64 \
 *       --num_hashes 16 --users 100000 --seed 7 --output /tmp/js-cms
 *   node tools/simulate.js --oracle pem --epsilon 4 --bits 32 --k 8 --query_limit 4096 \
 *       --distinct 1000 --users 100000 --seed 7 --output /tmp/js-pem
 *   node tools/simulate.js --oracle sfp --epsilon 4 --bits 32 --k 8 --fragment_bits 8 \
 *       --users 100000 --seed 7 --output /tmp/js-sfp
 *
 * The population is exact: value `r` (rank r; pem: the r-th of `--distinct` random values)
 * is held by `round(n * pi_r)` users (largest remainders), in a shuffled order. A
 * heavy-hitter protocol takes its flags (`--query_limit`, `--num_segments`, `--channel_seed`,
 * ...: those of `ldpflow heavy-hitters`). With `--seed`
 * the population and the reports come from the seeded `SplitMix64TestingRandom` (for tests
 * and evaluation: reproducible, not private); without it, from the secure source.
 * onebit: user `j` is in column `j mod K`.
 */

import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

import {
  HEAVY_HITTERS, SecureRandom, SplitMix64TestingRandom, envelope, makeHeavyHitters, makeOracle,
  recordToJsonLine,
} from "../index.js";

const START_TIME_MS = 1767225600000;  // 2026-01-01T00:00:00Z, as ldpflow simulate
// The heavy-hitter protocols' flags (as ldpflow heavy-hitters') and their option names.
const PROTOCOL_FLAGS = {
  hash_range: "hashRange", query_limit: "queryLimit", start_bits: "startBits",
  step_bits: "stepBits", num_groups: "numGroups", num_segments: "numSegments",
  segment_top: "segmentTop", num_channels: "numChannels", channel_seed: "channelSeed",
  fragment_bits: "fragmentBits", hash_bits: "hashBits", hash_seed: "hashSeed",
};

/**
 * Population shares of the ranks `0 .. size-1` for `zipf:S`, `uniform`, `geometric:P` or
 * `point:V` (every user holds rank V: the input of `ldpflow audit`).
 */
export function distribution(spec, size) {
  const [kind, arg] = spec.split(":");
  let weights;
  if (kind === "zipf") weights = Array.from({ length: size }, (_, r) => (r + 1) ** -Number(arg ?? 1.1));
  else if (kind === "uniform") weights = new Array(size).fill(1);
  else if (kind === "geometric") weights = Array.from({ length: size }, (_, r) => (1 - Number(arg)) ** r);
  else if (kind === "point" && Number(arg) >= 0 && Number(arg) < size) {
    weights = Array.from({ length: size }, (_, r) => (r === Number(arg) ? 1 : 0));
  } else {
    throw new RangeError(`distribution must be zipf:S, uniform, geometric:P or point:V, got ${spec}`);
  }
  const total = weights.reduce((a, b) => a + b, 0);
  return weights.map((w) => w / total);
}

/** `round(n * pi)` with the remainder given to the largest fractional parts: sums to n. */
export function exactCounts(shares, n) {
  const raw = shares.map((s) => s * n);
  const counts = raw.map(Math.floor);
  let left = n - counts.reduce((a, b) => a + b, 0);
  const order = raw.map((x, i) => [x - Math.floor(x), i]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  for (let i = 0; left > 0; i++, left--) counts[order[i % order.length][1]]++;
  return counts;
}

function shuffled(counts, source) {
  const values = [];
  counts.forEach((c, v) => {
    for (let i = 0; i < c; i++) values.push(v);
  });
  for (let i = values.length - 1; i > 0; i--) {  // Fisher-Yates
    const j = source.below(i + 1);
    [values[i], values[j]] = [values[j], values[i]];
  }
  return values;
}

/** Writes JSON lines into `shards` files of consecutive reports, a block of lines at a time. */
class ShardWriter {
  constructor(output, shards, total) {
    fs.mkdirSync(output, { recursive: true });
    this.output = output;
    this.shards = shards;
    this.per = Math.max(1, Math.ceil(total / shards));
    this.count = 0;
    this.fd = null;
    this.block = [];
  }

  write(line) {
    if (this.count % this.per === 0) this.open(this.count / this.per);
    this.block.push(line);
    if (this.block.length >= 4096) this.flush();
    this.count++;
  }

  open(shard) {
    this.close();
    const width = (i) => String(i).padStart(5, "0");
    const name = `reports-${width(shard)}-of-${width(this.shards)}.jsonl`;
    this.fd = fs.openSync(path.join(this.output, name), "w");
  }

  flush() {
    if (this.fd !== null && this.block.length) fs.writeSync(this.fd, this.block.join(""));
    this.block = [];
  }

  close() {
    this.flush();
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
  }
}

/**
 * Write the reports of a population and its `truth.json`; returns the truth document.
 *
 * @param {object} options the command's flags as strings (`oracle`, `epsilon`, `users`,
 *   `output`; `domain_size`, or a heavy-hitter protocol's `bits` and `k`; optional `seed`, `shards`,
 *   `distribution`, `hash_range` (olh, blh, cms, hcms, pem, treehist), `num_hashes` (cms, hcms),
 *   `query_limit`, `distinct`)
 */
export function simulate(options) {
  options = { shards: "1", distribution: "zipf:1.1", distinct: "1000", ...options };
  const users = Number(options.users);
  const source = options.seed !== undefined
    ? new SplitMix64TestingRandom(BigInt(options.seed)) : new SecureRandom();
  const epsilon = Number(options.epsilon);
  const writer = new ShardWriter(options.output, Number(options.shards), users);
  let truth;
  const meta = (j) => ({ userId: `js-user-${j}`, reportId: `js-${options.oracle}-${j}`,
    eventTime: START_TIME_MS + j });
  if (Object.hasOwn(HEAVY_HITTERS, options.oracle)) {
    const configuration = { topK: Number(options.k), valueBits: Number(options.bits), epsilon };
    for (const [flag, name] of Object.entries(PROTOCOL_FLAGS)) {
      if (options[flag] === undefined) continue;
      configuration[name] = name.endsWith("Seed") ? options[flag] : Number(options[flag]);
    }
    const protocol = makeHeavyHitters(options.oracle, configuration);
    const distinct = Number(options.distinct);
    const pool = new Set();
    const mask = (1n << BigInt(protocol.valueBits)) - 1n;
    while (pool.size < distinct) pool.add(source.nextWord() & mask);
    const values = [...pool];
    const counts = exactCounts(distribution(options.distribution, distinct), users);
    const order = shuffled(counts, source);
    order.forEach((rank, j) => {
      const m = meta(j);
      writer.write(recordToJsonLine(envelope(protocol, protocol.perturb(values[rank], m.userId, source), m)));
    });
    truth = {
      oracle: protocol.name, users, distinct, distribution: options.distribution,
      parameters: { ...protocol.envelopeParameters, ...protocol.nestedParameters() },
      top: counts.map((count, rank) => ({ value: values[rank].toString(), count })),
    };
  } else {
    const domainSize = Number(options.domain_size);
    const oracle = makeOracle(options.oracle, {
      epsilon, domainSize, ...(options.hash_range ? { hashRange: Number(options.hash_range) } : {}),
      ...(options.num_hashes ? { numHashes: Number(options.num_hashes) } : {}),
    });
    const counts = exactCounts(distribution(options.distribution, domainSize), users);
    const order = shuffled(counts, source);
    const extra = oracle.name === "onebit" ? (j) => ({ column: j % oracle.order }) : () => undefined;
    order.forEach((value, j) => {
      writer.write(recordToJsonLine(envelope(oracle, oracle.perturb(value, source, extra(j)), meta(j))));
    });
    truth = { oracle: oracle.name, users, distribution: options.distribution,
      parameters: oracle.envelopeParameters, counts };
  }
  writer.close();
  fs.writeFileSync(path.join(options.output, "truth.json"),
    JSON.stringify(truth, (_, v) => (typeof v === "bigint" ? v.toString() : v)));
  return truth;
}

function main() {
  const { values } = parseArgs({
    options: {
      oracle: { type: "string" }, epsilon: { type: "string" }, domain_size: { type: "string" },
      hash_range: { type: "string" }, num_hashes: { type: "string" }, users: { type: "string" },
      distribution: { type: "string", default: "zipf:1.1" }, seed: { type: "string" },
      output: { type: "string" }, shards: { type: "string", default: "1" },
      bits: { type: "string" }, k: { type: "string" }, distinct: { type: "string", default: "1000" },
      ...Object.fromEntries(Object.keys(PROTOCOL_FLAGS).map((flag) => [flag, { type: "string" }])),
    },
  });
  const needed = ["oracle", "epsilon", "users", "output",
    ...(Object.hasOwn(HEAVY_HITTERS, values.oracle) ? ["bits", "k"] : ["domain_size"])];
  const missing = needed.filter((name) => values[name] === undefined);
  if (missing.length) {
    process.stderr.write(`simulate.js: missing --${missing.join(", --")}\n`);
    process.exit(2);
  }
  const started = Date.now();
  const truth = simulate(values);
  process.stderr.write(`simulated ${truth.users} ${truth.oracle} reports in ` +
    `${((Date.now() - started) / 1000).toFixed(1)} s -> ${values.output}\n`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1])).href) main();

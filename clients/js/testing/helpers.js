// Shared by the tests (outside test/, so that node --test does not run it as a test file).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const REPO_DIR = path.resolve(PACKAGE_DIR, "..", "..");
export const VECTORS_DIR = path.join(REPO_DIR, "docs", "testvectors");

export function readVectors(name) {
  return JSON.parse(fs.readFileSync(path.join(VECTORS_DIR, name), "utf8"));
}

/** A report in the vectors' form: bytes as hex, integers >= 2**53 as decimal strings. */
export function wireForm(report) {
  const out = {};
  for (const [name, value] of Object.entries(report)) {
    if (value instanceof Uint8Array) out[name] = Buffer.from(value).toString("hex");
    else if (typeof value === "bigint") out[name] = value >= 2n ** 53n ? value.toString() : Number(value);
    else out[name] = value;
  }
  return out;
}

/** The oracle parameters of a vector (snake_case) in the client's names. */
export function clientParameters(parameters) {
  const out = { epsilon: parameters.epsilon, domainSize: parameters.domain_size };
  if (parameters.hash_range !== undefined) out.hashRange = parameters.hash_range;
  if (parameters.num_hashes !== undefined) out.numHashes = parameters.num_hashes;
  return out;
}

/**
 * `Phi^-1(1 - tail)` for a small upper tail probability, by bisection on the complementary
 * error function (Numerical Recipes' erfc, relative error < 1.2e-7: enough for a k-sigma band).
 */
export function upperQuantile(tail) {
  const erfc = (x) => {
    const z = Math.abs(x);
    const t = 1 / (1 + z / 2);
    const r = t * Math.exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
      + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
      + t * (-0.82215223 + t * 0.17087277)))))))));
    return x >= 0 ? r : 2 - r;
  };
  const upper = (k) => erfc(k / Math.SQRT2) / 2;  // P[Z > k]
  let lo = 0;
  let hi = 40;
  for (let i = 0; i < 100; i++) {
    const mid = (lo + hi) / 2;
    if (upper(mid) > tail) lo = mid;
    else hi = mid;
  }
  return hi;
}

/** A heavy-hitter configuration (snake_case, as ldpflow's) in the client's names. */
export function camelParameters(parameters) {
  return Object.fromEntries(Object.entries(parameters).map(([name, value]) =>
    [name.replace(/_([a-z])/g, (_, c) => c.toUpperCase()), value]));
}

/**
 * The report of a heavy_hitter_reports.json case made by `lib` (the ES modules or the
 * CommonJS build), in the vectors' form, and the protocol that made it.
 */
export function replayHeavyHitterVector(lib, c) {
  // A case that names no group hash version is of version 1 (as a report that names none).
  const protocol = lib.makeHeavyHitters(c.protocol,
    { groupHash: 1, ...camelParameters(c.parameters), codec: c.codec });
  const value = c.codec === "string" ? c.value : BigInt(c.value);
  const report = protocol.perturb(value, c.user_id, new lib.SplitMix64TestingRandom(c.client_seed));
  return { protocol, value, report, wire: wireForm(report) };
}

/**
 * The client of the prefix extending method (PEM) of Wang, Li and Jha for top-k heavy hitters
 * over `m`-bit values (ldpflow's `ldpflow/core/heavy_hitters`, `docs/spec/heavy_hitters.md`).
 *
 * A user belongs to exactly one group, fixed by its stable id: `group = splitmix64(key) mod
 * g`, `key` the little-endian BLAKE2b-64 digest of the id's UTF-8 bytes. Group `i` reports
 * the prefix of length `l_i = min(gamma + (i + 1) eta, m)` of its value through OLH with the
 * full epsilon; the group, the prefix length and the configuration travel in the clear.
 *
 * @module pem
 */

import { blake2b } from "./blake2b.js";
import { encodeValue, CODECS } from "./codecs.js";
import { advanceHalves, mixHalves, optimalHashRange } from "./hashing.js";
import { perturbHashed } from "./localHashing.js";
import { asSource } from "./random.js";
import { checkEpsilon, checkInteger, checkPowerOfTwo } from "./validation.js";

/** The PEM paper's query limit `Q` (Sec. VI-A). */
export const DEFAULT_QUERY_LIMIT = 2 ** 20;
export const MAX_QUERY_LIMIT = 2 ** 28;
const encoder = new TextEncoder();
/** The user id a report's group was drawn from (a symbol key: never a wire field). */
export const USER_ID = Symbol("ldpflow.userId");

const floorLog2 = (x) => (x >= 1 ? Math.floor(x).toString(2).length - 1 : -1);
const bitLength = (x) => (x === 0 ? 0 : x.toString(2).length);

/** The 64-bit key of a string user id: its BLAKE2b-64 digest, little-endian (a BigInt). */
export function userKey(userId) {
  if (typeof userId !== "string") {
    throw new TypeError(`userId must be a string, got ${typeof userId}`);
  }
  const digest = blake2b(encoder.encode(userId), 8);
  let key = 0n;
  for (let i = 7; i >= 0; i--) key = (key << 8n) | BigInt(digest[i]);
  return key;
}

/** The group in `[0, numGroups)` of a user: `splitmix64(userKey(id)) mod numGroups`. */
export function assignGroup(userId, numGroups) {
  checkInteger(numGroups, "numGroups");
  if (typeof userId !== "string") {
    throw new TypeError(`userId must be a string, got ${typeof userId}`);
  }
  const d = blake2b(encoder.encode(userId), 8);
  const low = (d[0] | (d[1] << 8) | (d[2] << 16) | (d[3] << 24)) >>> 0;
  const high = (d[4] | (d[5] << 8) | (d[6] << 16) | (d[7] << 24)) >>> 0;
  const state = advanceHalves(high, low);  // the first splitmix64 output from the key
  const mixed = mixHalves(state[0], state[1]);
  return Number(((BigInt(mixed[0]) << 32n) | BigInt(mixed[1])) % BigInt(numGroups));
}

/**
 * The configuration every PEM client and the server must agree on, derived as ldpflow
 * derives it (the defaults are the paper's Sec. IV-C configuration).
 */
export class PrefixExtendingMethod {
  /**
   * @param {object} options
   * @param {number} options.topK `k`
   * @param {number} options.valueBits `m`, in [1, 64]
   * @param {number} options.epsilon
   * @param {number} [options.queryLimit=2**20] `Q`, at most 2**28
   * @param {number} [options.startBits] `gamma`, default `ceil(log2 k)` (at most `m - 1`)
   * @param {number} [options.stepBits] `eta`, default the largest within `Q`
   * @param {number} [options.numGroups] must agree with the others when given
   * @param {number} [options.hashRange] OLH's `g`, default the optimum for epsilon
   * @param {string} [options.codec="int"] `int` or `string`
   */
  constructor({ topK, valueBits, epsilon, queryLimit = DEFAULT_QUERY_LIMIT, startBits, stepBits,
    numGroups, hashRange, codec = "int" } = {}) {
    const k = checkInteger(topK, "topK");
    const m = checkInteger(valueBits, "valueBits");
    if (m > 64) throw new RangeError(`valueBits must be in [1, 64], got ${m}`);
    checkEpsilon(epsilon);
    const limit = checkInteger(queryLimit, "queryLimit", 2);
    if (limit > MAX_QUERY_LIMIT) throw new RangeError(`queryLimit must be <= 2**28, got ${limit}`);
    const g = checkPowerOfTwo(hashRange ?? optimalHashRange(epsilon), "hashRange");
    if (!CODECS.includes(codec)) throw new RangeError(`codec must be int or string, got ${codec}`);
    if (codec === "string" && m % 8) {
      throw new RangeError(`valueBits of the string codec must be a multiple of 8, got ${m}`);
    }
    let gamma;
    if (startBits === undefined || startBits === null) {
      gamma = Math.min(bitLength(k - 1), m - 1);
    } else {
      gamma = checkInteger(startBits, "startBits", 0);
      if (gamma >= m) throw new RangeError(`startBits must be < valueBits=${m}, got ${gamma}`);
    }
    const rest = m - gamma;
    const groups = numGroups === undefined || numGroups === null
      ? null : checkInteger(numGroups, "numGroups");
    let eta;
    if (stepBits !== undefined && stepBits !== null) {
      eta = checkInteger(stepBits, "stepBits");
    } else if (groups !== null) {
      eta = Math.ceil(rest / groups);
    } else {
      eta = Math.min(floorLog2(limit / k), floorLog2(limit) - gamma, rest);
      if (eta < 1) {
        throw new RangeError(
          "queryLimit must allow a step of at least one bit: queryLimit >= " +
          `max(2 * topK, 2**(startBits + 1)) = ${Math.max(2 * k, 2 ** (gamma + 1))}, got ${limit}`);
      }
    }
    const derived = Math.ceil(rest / eta);
    if (groups !== null && groups !== derived) {
      throw new RangeError(
        `numGroups must equal ceil((valueBits - startBits) / stepBits) = ceil(${rest} / ${eta}) ` +
        `= ${derived}, got ${groups}`);
    }
    const first = Math.min(gamma + eta, m);
    if (2 ** first > limit) {
      throw new RangeError(
        `stage 0 estimates all 2**${first} prefixes of ${first} bits; queryLimit must be >= ` +
        `2**${first}, got ${limit}`);
    }
    if (derived > 1 && k * 2 ** eta > limit) {
      throw new RangeError(
        `later stages estimate topK * 2**stepBits = ${k} * 2**${eta} candidates; queryLimit ` +
        `must be >= ${k * 2 ** eta}, got ${limit}`);
    }
    Object.assign(this, {
      topK: k, valueBits: m, epsilon, queryLimit: limit, startBits: gamma, stepBits: eta,
      numGroups: derived, hashRange: g, codec,
    });
    Object.freeze(this);
  }

  get name() {
    return "pem";
  }

  /** The fields of a report (`seed` and `bucket` at the top level, the rest under `pem`). */
  get reportFields() {
    return ["seed", "bucket", "group", "prefix_bits"];
  }

  /** `l_i = min(gamma + (i + 1) eta, m)`: the prefix length of each group. */
  get prefixBits() {
    const out = [];
    for (let i = 0; i < this.numGroups; i++) {
      out.push(Math.min(this.startBits + (i + 1) * this.stepBits, this.valueBits));
    }
    return out;
  }

  /** OLH's `p* = e / (e + g - 1)`. */
  get p() {
    const e = Math.exp(this.epsilon);
    return e / (e + this.hashRange - 1);
  }

  /** OLH's `q* = 1 / g`. */
  get q() {
    return 1 / this.hashRange;
  }

  /** The exact variance of one estimated frequency from a group of `n` reports. */
  variance(n, frequency = 0) {
    const { p, q } = this;
    return (q * (1 - q)) / (n * (p - q) ** 2) + (frequency * (1 - p - q)) / (n * (p - q));
  }

  /** The envelope's parameter fields: `domain_size` is the number of groups. */
  get envelopeParameters() {
    return {
      oracle: "pem", epsilon: this.epsilon, domain_size: this.numGroups,
      hash_range: this.hashRange,
    };
  }

  /** The configuration in the envelope's nested `pem` record (with the report's fields). */
  nestedParameters() {
    return {
      value_bits: this.valueBits, top_k: this.topK, query_limit: this.queryLimit,
      start_bits: this.startBits, step_bits: this.stepBits, codec: this.codec,
    };
  }

  /** The group of a user (see `assignGroup`). */
  groupOf(userId) {
    return assignGroup(userId, this.numGroups);
  }

  /**
   * One user's report: its group's prefix of its value through OLH (epsilon-LDP).
   *
   * @param {number|bigint|string} value the true value (a string for the string codec)
   * @param {string} userId the stable user id, which must travel in the envelope
   * @param {RandomSource} [rng] the secure source unless given (tests only)
   * @param {object} [options]
   * @param {boolean} [options.truncate=false] string codec: keep a longer string's leading bytes
   * @returns {{seed: bigint, bucket: number, group: number, prefix_bits: number}}
   */
  perturb(value, userId, rng, { truncate = false } = {}) {
    const code = encodeValue(this.codec, value, this.valueBits, { truncate });
    const group = this.groupOf(userId);
    const bits = this.prefixBits[group];
    const prefix = code >> BigInt(this.valueBits - bits);
    const report = perturbHashed(asSource(rng), prefix, bits, this.hashRange, this.p);
    return { ...report, group, prefix_bits: bits, [USER_ID]: userId };
  }
}

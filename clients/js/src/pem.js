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

import { optimalHashRange } from "./hashing.js";
import {
  DEFAULT_QUERY_LIMIT, HeavyHitterClient, MAX_QUERY_LIMIT, checkCodec, checkCommon, checkOptions,
  olhKeep,
} from "./heavyHitters.js";
import { perturbHashed } from "./localHashing.js";
import { checkInteger, checkPowerOfTwo } from "./validation.js";

export {
  DEFAULT_QUERY_LIMIT, MAX_QUERY_LIMIT, USER_ID, assignGroup, userKey,
} from "./heavyHitters.js";

const OPTIONS = ["topK", "valueBits", "epsilon", "queryLimit", "startBits", "stepBits",
  "numGroups", "hashRange", "codec"];
const floorLog2 = (x) => (x >= 1 ? Math.floor(x).toString(2).length - 1 : -1);
const bitLength = (x) => (x === 0 ? 0 : x.toString(2).length);

/**
 * The configuration every PEM client and the server must agree on, derived as ldpflow
 * derives it (the defaults are the paper's Sec. IV-C configuration).
 */
export class PrefixExtendingMethod extends HeavyHitterClient {
  static protocolName = "pem";
  static topFields = ["seed", "bucket"];
  static nestedFields = ["group", "prefix_bits"];

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
  constructor(options = {}) {
    checkOptions(options, OPTIONS, "pem");
    const { startBits, stepBits, numGroups, hashRange, codec = "int" } = options;
    super(options);
    const { topK: k, valueBits: m, epsilon, queryLimit: limit } = checkCommon(options);
    const g = checkPowerOfTwo(hashRange ?? optimalHashRange(epsilon), "hashRange");
    checkCodec(codec, m);
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
    return olhKeep(this.epsilon, this.hashRange);
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

  /** The configuration in the envelope's nested `pem` record (with the report's fields). */
  nestedParameters() {
    return {
      value_bits: this.valueBits, top_k: this.topK, query_limit: this.queryLimit,
      start_bits: this.startBits, step_bits: this.stepBits, codec: this.codec,
      group_hash: this.groupHash,
    };
  }

  /** OLH (full epsilon) of the group's prefix of the code. */
  perturbCode(code, group, source) {
    const bits = this.prefixBits[group];
    const prefix = code >> BigInt(this.valueBits - bits);
    const report = perturbHashed(source, prefix, bits, this.hashRange, this.p);
    return { ...report, group, prefix_bits: bits };
  }
}

/**
 * The client of TreeHist (Bassily, Nissim, Stemmer, Thakurta, "Practical Locally Private Heavy
 * Hitters"; ldpflow's `ldpflow/core/heavy_hitters/treehist.py`).
 *
 * The `m` bits are cut into `L = ceil(m / stepBits)` levels. Group `i < L` reports its prefix
 * of `min((i + 1) stepBits, m)` bits, group `L` its full value, through one OLH report with the
 * full epsilon (`seed`, `bucket`; `treehist.prefix_bits` the length). The hash range is a
 * parameter, by default ldpflow's cost-aware range for epsilon (`costAwareHashRange`).
 *
 * @module treehist
 */

import {
  HeavyHitterClient, checkCodec, checkOptions, costAwareHashRange, olhKeep,
} from "./heavyHitters.js";
import { perturbHashed } from "./localHashing.js";
import { checkEpsilon, checkInteger, checkPowerOfTwo } from "./validation.js";

const OPTIONS = ["topK", "valueBits", "epsilon", "stepBits", "hashRange", "codec"];
// The widest level whose children of one node the server counts at once.
const MAX_STEP_BITS = 20;

export class TreeHist extends HeavyHitterClient {
  static protocolName = "treehist";
  static topFields = ["seed", "bucket"];
  static nestedFields = ["group", "prefix_bits"];

  /**
   * @param {object} options
   * @param {number} options.topK `k`
   * @param {number} options.valueBits `m`, in [1, 64]
   * @param {number} options.epsilon
   * @param {number} [options.stepBits=8] bits per level, in [1, min(m, 20)]
   * @param {number} [options.hashRange] OLH's buckets (default `costAwareHashRange(epsilon)`)
   * @param {string} [options.codec="int"] `int` or `string`
   */
  constructor(options = {}) {
    checkOptions(options, OPTIONS, "treehist");
    super(options);
    const k = checkInteger(options.topK, "topK");
    const m = checkInteger(options.valueBits, "valueBits");
    if (m > 64) throw new RangeError(`valueBits must be in [1, 64], got ${m}`);
    const epsilon = checkEpsilon(options.epsilon);
    const step = checkInteger(options.stepBits ?? 8, "stepBits");
    if (step > Math.min(m, MAX_STEP_BITS)) {
      throw new RangeError(`stepBits must be <= min(valueBits, ${MAX_STEP_BITS}) = ` +
        `${Math.min(m, MAX_STEP_BITS)}, got ${step}`);
    }
    const hashRange = checkPowerOfTwo(options.hashRange ?? costAwareHashRange(epsilon), "hashRange");
    const codec = checkCodec(options.codec ?? "int", m);
    const levels = Math.ceil(m / step);
    const groupBits = [];
    for (let i = 0; i < levels; i++) groupBits.push(Math.min((i + 1) * step, m));
    groupBits.push(m);
    Object.assign(this, {
      topK: k, valueBits: m, epsilon, stepBits: step, hashRange, codec,
      numGroups: levels + 1, groupBits: Object.freeze(groupBits),
    });
    Object.freeze(this);
  }

  /** OLH's `p*` (full epsilon). */
  get p() {
    return olhKeep(this.epsilon, this.hashRange);
  }

  nestedParameters() {
    return { value_bits: this.valueBits, top_k: this.topK, step_bits: this.stepBits,
      codec: this.codec, group_hash: this.groupHash };
  }

  perturbCode(code, group, source) {
    const bits = this.groupBits[group];
    const prefix = code >> BigInt(this.valueBits - bits);
    const report = perturbHashed(source, prefix, bits, this.hashRange, this.p);
    return { ...report, group, prefix_bits: bits };
  }
}

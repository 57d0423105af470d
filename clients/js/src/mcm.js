/**
 * The client of MCM, the multiple channel method of Bassily and Smith as the PEM paper compares
 * against it (ldpflow's `ldpflow/core/heavy_hitters/mcm.py`).
 *
 * A public hash maps a value to one of `T` channels, `c = splitmix64Mix(v XOR channelSeed) mod
 * T`. Group `j` is bit position `j` (0: the least significant); its user sends the one-hot
 * vector of item `2c + bit_j(v)` over `2T` items through symmetric unary encoding with
 * `epsilon / 2` (each bit flipped with `1 / (1 + e**(epsilon / 4))`; the top-level `bits`),
 * then OLH of the full value with `epsilon / 2` (`seed`, `bucket`; OLH's optimal range for
 * `epsilon / 2`). Draws: the flips (`bernoulliBits`), then the OLH report.
 *
 * @module mcm
 */

import { optimalHashRange, splitmix64Mix } from "./hashing.js";
import {
  HeavyHitterClient, checkCodec, checkCommon, checkKey, checkOptions, olhKeep, toLong,
} from "./heavyHitters.js";
import { perturbHashed } from "./localHashing.js";
import { checkInteger } from "./validation.js";

const OPTIONS = ["topK", "valueBits", "epsilon", "numChannels", "queryLimit", "channelSeed", "codec"];

export class MultipleChannelMethod extends HeavyHitterClient {
  static protocolName = "mcm";
  static topFields = ["bits", "seed", "bucket"];
  static nestedFields = ["group"];

  /**
   * @param {object} options
   * @param {number} options.topK `k`
   * @param {number} options.valueBits `m`, in [1, 64]: one group per bit position
   * @param {number} options.epsilon `epsilon / 2` per report
   * @param {number} [options.numChannels] `T`, at most `queryLimit` (default `4 k`)
   * @param {number} [options.queryLimit=2**20] `Q`
   * @param {number|bigint|string} [options.channelSeed=0] the public channel hash's 64-bit key
   * @param {string} [options.codec="int"] `int` or `string`
   */
  constructor(options = {}) {
    checkOptions(options, OPTIONS, "mcm");
    super(options);
    const { topK: k, valueBits: m, epsilon, queryLimit: limit } = checkCommon(options);
    const channels = options.numChannels === undefined || options.numChannels === null
      ? 4 * k : checkInteger(options.numChannels, "numChannels");
    if (channels > limit) {
      throw new RangeError(`final testing estimates up to numChannels candidates; numChannels ` +
        `must be <= queryLimit=${limit}, got ${channels}`);
    }
    const channelSeed = checkKey(options.channelSeed ?? 0, "channelSeed");
    const codec = checkCodec(options.codec ?? "int", m);
    Object.assign(this, {
      topK: k, valueBits: m, epsilon, numChannels: channels, queryLimit: limit, channelSeed,
      codec, numGroups: m, hashRange: optimalHashRange(epsilon / 2),
    });
    Object.freeze(this);
  }

  /** The width of the `bits` field: `2 T` items. */
  get bitWidth() {
    return 2 * this.numChannels;
  }

  get bitWidthName() {
    return "2 * numChannels";
  }

  /** Each unary bit is flipped with `1 / (1 + e**(epsilon / 4))`. */
  get flipProbability() {
    return 1 / (1 + Math.exp(this.epsilon / 2 / 2));
  }

  /** OLH's `p*` of the final-testing report (`epsilon / 2`). */
  get p() {
    return olhKeep(this.epsilon / 2, this.hashRange);
  }

  /** The public channel in `[0, T)` of a code. */
  channelOf(code) {
    return Number(splitmix64Mix(BigInt(code) ^ this.channelSeed) % BigInt(this.numChannels));
  }

  nestedParameters() {
    return { value_bits: this.valueBits, top_k: this.topK, num_channels: this.numChannels,
      query_limit: this.queryLimit, channel_seed: toLong(this.channelSeed), codec: this.codec,
      group_hash: this.groupHash };
  }

  perturbCode(code, group, source) {
    const item = 2 * this.channelOf(code) + Number((code >> BigInt(group)) & 1n);
    const bits = source.bernoulliBits(this.flipProbability, this.bitWidth);  // the flips
    bits[item >> 3] ^= 1 << (item & 7);
    const full = perturbHashed(source, code, this.valueBits, this.hashRange, this.p);
    return { group, bits, seed: full.seed, bucket: full.bucket };
  }
}

/**
 * The client of SPM, the segment pairs method of Fanti, Pihur and Erlingsson as the PEM paper
 * compares against it (ldpflow's `ldpflow/core/heavy_hitters/spm.py`).
 *
 * An `m`-bit value is cut into `t` segments of `s = ceil(m / t)` bits, most significant first
 * (the last takes the remainder). Group `g` is the `g`-th segment pair `(i, j)`, `i < j`, in
 * lexicographic order; its user sends three OLH reports of `epsilon / 3` each, in this order of
 * draws: segment `i` (`spm.seed_a`, `spm.bucket_a`), segment `j` (`spm.seed_b`,
 * `spm.bucket_b`) and the full value (`seed`, `bucket`). The hash range is OLH's optimum for
 * `epsilon / 3`.
 *
 * @module spm
 */

import { optimalHashRange } from "./hashing.js";
import { HeavyHitterClient, checkCodec, checkCommon, checkOptions, olhKeep } from "./heavyHitters.js";
import { perturbHashed } from "./localHashing.js";
import { checkInteger } from "./validation.js";

const OPTIONS = ["topK", "valueBits", "epsilon", "numSegments", "segmentTop", "queryLimit", "codec"];
// The widest segment whose full domain the server counts in one scatter.
const MAX_SEGMENT_BITS = 24;
const bitLength = (x) => x.toString(2).length;

export class SegmentPairsMethod extends HeavyHitterClient {
  static protocolName = "spm";
  static topFields = ["seed", "bucket"];
  static nestedFields = ["group", "seed_a", "bucket_a", "seed_b", "bucket_b"];

  /**
   * @param {object} options
   * @param {number} options.topK `k`
   * @param {number} options.valueBits `m`, in [2, 64]
   * @param {number} options.epsilon each of the three reports uses `epsilon / 3`
   * @param {number} [options.numSegments] `t >= 2`; default the smallest with
   *   `ceil(m / t) <= min(log2 Q, 16)`
   * @param {number} [options.segmentTop] values kept per segment and pairs per pair (default `k`)
   * @param {number} [options.queryLimit=2**20] `Q`
   * @param {string} [options.codec="int"] `int` or `string`
   */
  constructor(options = {}) {
    checkOptions(options, OPTIONS, "spm");
    super(options);
    const { topK: k, valueBits: m, epsilon, queryLimit: limit } = checkCommon(options);
    if (m < 2) throw new RangeError(`valueBits must be >= 2 for segment pairs, got ${m}`);
    const widest = Math.min(bitLength(limit) - 1, 16);
    let t;
    if (options.numSegments === undefined || options.numSegments === null) {
      t = Math.max(2, Math.ceil(m / widest));
    } else {
      t = checkInteger(options.numSegments, "numSegments", 2);
      if (t > m) throw new RangeError(`numSegments must be <= valueBits=${m}, got ${t}`);
    }
    const s = Math.ceil(m / t);
    if (2 ** s > limit || s > MAX_SEGMENT_BITS) {
      throw new RangeError(`each segment's 2**${s} values are estimated in one step; numSegments ` +
        `must make ceil(valueBits / numSegments) <= ${Math.min(bitLength(limit) - 1, 24)}, got ${t}`);
    }
    if (t * s - m >= s) {
      throw new RangeError(`numSegments=${t} leaves an empty segment for valueBits=${m}; use at ` +
        `most ${Math.ceil(m / s)}`);
    }
    const top = options.segmentTop === undefined || options.segmentTop === null
      ? k : checkInteger(options.segmentTop, "segmentTop");
    if (top * top > limit) {
      throw new RangeError(`each pair estimates segmentTop**2 joint candidates; segmentTop must ` +
        `be <= ${Math.floor(Math.sqrt(limit))} for queryLimit=${limit}, got ${top}`);
    }
    const codec = checkCodec(options.codec ?? "int", m);
    const pairs = [];
    for (let i = 0; i < t; i++) for (let j = i + 1; j < t; j++) pairs.push([i, j]);
    const bounds = [];
    for (let i = 0; i < t; i++) {
      const high = m - i * s;
      const bits = Math.min(s, high);
      bounds.push([high - bits, bits]);
    }
    const hashRange = optimalHashRange(epsilon / 3);
    Object.assign(this, {
      topK: k, valueBits: m, epsilon, numSegments: t, segmentTop: top, queryLimit: limit, codec,
      hashRange, numGroups: pairs.length, pairs: Object.freeze(pairs.map(Object.freeze)),
      segmentBounds: Object.freeze(bounds.map(Object.freeze)),
    });
    Object.freeze(this);
  }

  /** The budget of each of the three reports: `epsilon / 3`. */
  get componentEpsilon() {
    return this.epsilon / 3;
  }

  /** OLH's `p*` of each component. */
  get p() {
    return olhKeep(this.componentEpsilon, this.hashRange);
  }

  /** Segment `index` of a code: `(code >> shift) & (2**bits - 1)`. */
  segment(code, index) {
    const [shift, bits] = this.segmentBounds[index];
    return (BigInt(code) >> BigInt(shift)) & ((1n << BigInt(bits)) - 1n);
  }

  nestedParameters() {
    return { value_bits: this.valueBits, top_k: this.topK, num_segments: this.numSegments,
      segment_top: this.segmentTop, query_limit: this.queryLimit, codec: this.codec,
      group_hash: this.groupHash };
  }

  perturbCode(code, group, source) {
    const [i, j] = this.pairs[group];
    const { hashRange, p } = this;
    const a = perturbHashed(source, this.segment(code, i), this.segmentBounds[i][1], hashRange, p);
    const b = perturbHashed(source, this.segment(code, j), this.segmentBounds[j][1], hashRange, p);
    const full = perturbHashed(source, code, this.valueBits, hashRange, p);
    return { group, seed_a: a.seed, bucket_a: a.bucket, seed_b: b.seed, bucket_b: b.bucket,
      seed: full.seed, bucket: full.bucket };
  }
}

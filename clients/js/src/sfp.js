/**
 * The client of Apple's sequence fragment puzzle (SFP; ldpflow's
 * `ldpflow/core/heavy_hitters/sfp.py`), on OLH.
 *
 * A value is cut into `P = m / fragmentBits` fragments, most significant first; fragment `p` is
 * `(v >> (m - (p + 1) f)) & (2**f - 1)`. The public hash of a value is
 * `splitmix64Mix(v XOR hashSeed) >> (64 - hashBits)`. The user of group `p` sends two OLH
 * reports of `epsilon / 2` each, in this order of draws: its puzzle piece
 * `(hash(v) << f) | fragment_p(v)`, a `(hashBits + f)`-bit value (`sfp.seed_piece`,
 * `sfp.bucket_piece`), then the full value (`seed`, `bucket`). The hash range is ldpflow's
 * cost-aware range for `epsilon / 2`.
 *
 * @module sfp
 */

import { splitmix64Mix } from "./hashing.js";
import {
  HeavyHitterClient, checkCodec, checkCommon, checkKey, checkOptions, costAwareHashRange, olhKeep,
  toLong,
} from "./heavyHitters.js";
import { perturbHashed } from "./localHashing.js";
import { checkInteger } from "./validation.js";

const OPTIONS = ["topK", "valueBits", "epsilon", "fragmentBits", "hashBits", "queryLimit",
  "hashSeed", "codec"];
// The widest puzzle-piece domain the server counts over its full domain.
const MAX_PIECE_BITS = 22;

export class SequenceFragmentPuzzle extends HeavyHitterClient {
  static protocolName = "sfp";
  static topFields = ["seed", "bucket"];
  static nestedFields = ["group", "seed_piece", "bucket_piece"];

  /**
   * @param {object} options
   * @param {number} options.topK `k`
   * @param {number} options.valueBits `m`, a multiple of `fragmentBits`
   * @param {number} options.epsilon `epsilon / 2` per report
   * @param {number} [options.fragmentBits=16] `f`, divides `m`
   * @param {number} [options.hashBits=6] `r`, `r + f <= 22`
   * @param {number} [options.queryLimit=2**20] `Q`
   * @param {number|bigint|string} [options.hashSeed=0] the public value hash's 64-bit key
   * @param {string} [options.codec="int"] `int` or `string`
   */
  constructor(options = {}) {
    checkOptions(options, OPTIONS, "sfp");
    super(options);
    const { topK: k, valueBits: m, epsilon, queryLimit: limit } = checkCommon(options);
    const f = checkInteger(options.fragmentBits ?? 16, "fragmentBits");
    if (f > m || m % f) throw new RangeError(`fragmentBits must divide valueBits=${m}, got ${f}`);
    const r = checkInteger(options.hashBits ?? 6, "hashBits");
    if (r + f > MAX_PIECE_BITS) {
      throw new RangeError(`hashBits + fragmentBits must be <= ${MAX_PIECE_BITS}, got ${r} + ${f}`);
    }
    const hashSeed = checkKey(options.hashSeed ?? 0, "hashSeed");
    const codec = checkCodec(options.codec ?? "int", m);
    Object.assign(this, {
      topK: k, valueBits: m, epsilon, fragmentBits: f, hashBits: r, queryLimit: limit, hashSeed,
      codec, numGroups: m / f, hashRange: costAwareHashRange(epsilon / 2),
    });
    Object.freeze(this);
  }

  /** `P = m / fragmentBits`. */
  get positions() {
    return this.numGroups;
  }

  /** The width of a puzzle piece: `hashBits + fragmentBits`. */
  get pieceBits() {
    return this.hashBits + this.fragmentBits;
  }

  /** OLH's `p*` of each report (`epsilon / 2`). */
  get p() {
    return olhKeep(this.epsilon / 2, this.hashRange);
  }

  /** The public `hashBits`-bit hash of a code (a BigInt). */
  valueHash(code) {
    return splitmix64Mix(BigInt(code) ^ this.hashSeed) >> BigInt(64 - this.hashBits);
  }

  /** Fragment `position` (0: the most significant) of a code (a BigInt). */
  fragment(code, position) {
    const shift = this.valueBits - (position + 1) * this.fragmentBits;
    return (BigInt(code) >> BigInt(shift)) & ((1n << BigInt(this.fragmentBits)) - 1n);
  }

  nestedParameters() {
    return { value_bits: this.valueBits, top_k: this.topK, fragment_bits: this.fragmentBits,
      hash_bits: this.hashBits, query_limit: this.queryLimit, hash_seed: toLong(this.hashSeed),
      codec: this.codec, group_hash: this.groupHash };
  }

  perturbCode(code, group, source) {
    const piece = (this.valueHash(code) << BigInt(this.fragmentBits)) | this.fragment(code, group);
    const a = perturbHashed(source, piece, this.pieceBits, this.hashRange, this.p);
    const full = perturbHashed(source, code, this.valueBits, this.hashRange, this.p);
    return { group, seed_piece: a.seed, bucket_piece: a.bucket, seed: full.seed,
      bucket: full.bucket };
  }
}

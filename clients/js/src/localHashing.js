/**
 * Local hashing: optimized (OLH) and binary (BLH), with the portable hash family.
 *
 * A report is `{seed, bucket}`: a uniform 64-bit seed `s` (a BigInt; the wire carries it as
 * a two's-complement long) and `y` in `[0, g)`, equal to `H_s(v)` with probability
 * `e/(e+g-1)` and uniform over the other `g-1` buckets otherwise. Draws: the seed word, then
 * `uniform < p` (keep), then `below(g-1)` (the other bucket is `(h + 1 + other) mod g`).
 *
 * @module localHashing
 */

import { hashHalves, hashValue, optimalHashRange } from "./hashing.js";
import { FrequencyOracle } from "./oracle.js";
import { asSource } from "./random.js";
import { checkPowerOfTwo, checkValue } from "./validation.js";

/** `L = ceil(log2 d)` (at least 1): the width of the values fed to the hash. */
export function valueBitsOf(domainSize) {
  return Math.max(1, (BigInt(domainSize) - 1n).toString(2).replace(/^0$/, "").length);
}

/**
 * One local-hashing report of an unsigned value (a BigInt below `2**valueBits`): the draws
 * of ldpflow's OLH client, in its order. Shared by OLH, BLH and PEM.
 */
export function perturbHashed(source, value, valueBits, hashRange, p) {
  const word = source.nextHalves();
  const seedHigh = word[0];
  const seedLow = word[1];
  const hashed = hashHalves(seedHigh, seedLow, Number(value >> 32n), Number(value & 0xffffffffn),
    valueBits, 31 - Math.clz32(hashRange));
  const seed = (BigInt(seedHigh) << 32n) | BigInt(seedLow);
  const keep = source.bernoulli(p);
  const other = source.below(hashRange - 1);
  return { seed, bucket: keep ? hashed : (hashed + 1 + other) % hashRange };
}

export class LocalHashing extends FrequencyOracle {
  static reportFields = ["seed", "bucket"];

  constructor({ epsilon, domainSize, hashRange } = {}) {
    super({ epsilon, domainSize });
    this.hashRange = checkPowerOfTwo(hashRange, "hashRange");
  }

  /** `L = ceil(log2 d)`. */
  get valueBits() {
    return valueBitsOf(this.domainSize);
  }

  get p() {
    return this.e / (this.e + this.hashRange - 1);
  }

  get q() {
    return 1 / this.hashRange;
  }

  get envelopeParameters() {
    return { ...super.envelopeParameters, hash_range: this.hashRange };
  }

  perturb(value, rng) {
    checkValue(value, this.domainSize);
    return perturbHashed(asSource(rng), BigInt(value), this.valueBits, this.hashRange, this.p);
  }

  supports(report, value) {
    return hashValue(report.seed, value, this.valueBits, this.hashRange) === report.bucket;
  }
}

/**
 * Optimized local hashing (OLH): `g` is the better power of two around `e + 1` unless given
 * (`optimalHashRange`); `p = e/(e+g-1)`, `q = 1/g` (Wang et al., USENIX Security 2017,
 * Sec. 4.4, with the spec's `p`).
 */
export class OptimizedLocalHashing extends LocalHashing {
  static oracleName = "olh";

  constructor({ epsilon, domainSize, hashRange } = {}) {
    super({ epsilon, domainSize, hashRange: hashRange ?? optimalHashRange(epsilon) });
  }
}

/** Binary local hashing (BLH): local hashing with `g = 2`. */
export class BinaryLocalHashing extends LocalHashing {
  static oracleName = "blh";

  constructor({ epsilon, domainSize, hashRange = 2 } = {}) {
    if (hashRange !== 2) throw new RangeError(`hashRange of blh must be 2, got ${hashRange}`);
    super({ epsilon, domainSize, hashRange });
  }
}

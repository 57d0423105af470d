/**
 * Apple's sketch oracles: Count Mean Sketch (CMS) and Hadamard Count Mean Sketch (HCMS)
 * (Apple Differential Privacy Team, "Learning with Privacy at Scale", 2017), as ldpflow's
 * `ldpflow/core/oracles/sketch.py` and `docs/spec/oracles.md` ("CMS and HCMS").
 *
 * Both hash the domain into `m` buckets (`hashRange`, a power of two, default 1024) with `k`
 * public hash functions (`numHashes`, default 256): `h_j = H_{s_j}` of the portable family
 * (`hashing.js`) on `L = max(1, bitlength(d-1))`-bit values, with the public seeds
 * `s_j = mix(0x9E3779B97F4A7C15 * (j + 1) mod 2**64)` (`sketchSeeds`). A device draws `j`
 * uniformly and reports about `h_j(v)` only, so a report is small whatever the domain.
 *
 * - **CMS** (`cms`): report `{column: j, bits}`, `bits` the one-hot `m`-bit vector of
 *   `h_j(v)` (`ceil(m/8)` bytes, little-endian bit order, padding zero) with every bit
 *   flipped with probability `1/(e^(eps/2)+1)`. Draws: `below(k)`, then the bit-sliced
 *   Bernoulli(flip) bits of the row (the zero bits' flips), then `uniform < flip` (the true
 *   bucket's bit is 1 unless that flips it).
 * - **HCMS** (`hcms`): report `{column: j, value: l, bit}`, `l` uniform in `[0, m)` and `bit`
 *   the sign `H_m[h_j(v), l] = (-1)^popcount(h_j(v) & l)` (1 for +1), kept with probability
 *   `e/(e+1)`, else flipped. Draws: `below(k)`, `below(m)`, then `uniform < e/(e+1)`.
 *
 * Not pure protocols: `p` and `q` are null, and `variance` is the sketch's (the reports'
 * noise, plus the fixed hash functions' collision term when given the whole distribution).
 *
 * @module sketch
 */

import { GOLDEN_GAMMA, MASK64, hashHalves, splitmix64Mix } from "./hashing.js";
import { valueBitsOf } from "./localHashing.js";
import { FrequencyOracle, getBit, setBit } from "./oracle.js";
import { asSource } from "./random.js";
import { checkInteger, checkPowerOfTwo, checkValue } from "./validation.js";

/** The most hash functions a sketch may use (ldpflow's `MAX_NUM_HASHES`). */
export const MAX_NUM_HASHES = 1 << 16;
export const DEFAULT_HASH_RANGE = 1024;
export const DEFAULT_NUM_HASHES = 256;

/**
 * The public seeds of the hash functions `0 .. k-1`: `mix(GOLDEN_GAMMA * (j + 1) mod 2**64)`
 * (ldpflow's `sketch_seeds`).
 *
 * @param {number} numHashes `k`
 * @returns {bigint[]}
 */
export function sketchSeeds(numHashes) {
  checkNumHashes(numHashes);
  const seeds = new Array(numHashes);
  for (let j = 0; j < numHashes; j++) {
    seeds[j] = splitmix64Mix((GOLDEN_GAMMA * BigInt(j + 1)) & MASK64);
  }
  return seeds;
}

function checkNumHashes(numHashes, name = "numHashes") {
  checkInteger(numHashes, name, 1);
  if (numHashes > MAX_NUM_HASHES) {
    throw new RangeError(`${name} must be an integer in [1, ${MAX_NUM_HASHES}], got ${numHashes}`);
  }
  return numHashes;
}

// The seeds of k functions as 32-bit halves, shared by every sketch of that k.
const seedHalvesCache = new Map();

function seedHalves(numHashes) {
  let halves = seedHalvesCache.get(numHashes);
  if (!halves) {
    const seeds = sketchSeeds(numHashes);
    halves = new Uint32Array(2 * numHashes);
    seeds.forEach((s, j) => {
      halves[2 * j] = Number(s >> 32n);
      halves[2 * j + 1] = Number(s & 0xffffffffn);
    });
    if (seedHalvesCache.size > 16) seedHalvesCache.clear();
    seedHalvesCache.set(numHashes, halves);
  }
  return halves;
}

/** The parity of `popcount(x)` for a 32-bit `x`. */
function parity(x) {
  x ^= x >>> 16;
  x ^= x >>> 8;
  x ^= x >>> 4;
  return (0x6996 >>> (x & 15)) & 1;
}

/** The parameters, hashing and variance that CMS and HCMS share. */
export class Sketch extends FrequencyOracle {
  /**
   * @param {object} options
   * @param {number} options.epsilon the privacy parameter, > 0
   * @param {number} options.domainSize `d`, >= 2
   * @param {number} [options.hashRange=1024] `m`, the sketch width: a power of two
   * @param {number} [options.numHashes=256] `k`, the number of hash functions, in [1, 2**16]
   */
  constructor({ epsilon, domainSize, hashRange, numHashes } = {}) {
    super({ epsilon, domainSize });
    this.hashRange = checkPowerOfTwo(hashRange ?? DEFAULT_HASH_RANGE, "hashRange");
    this.numHashes = checkNumHashes(numHashes ?? DEFAULT_NUM_HASHES);
    this._seeds = seedHalves(this.numHashes);
    this._valueBits = valueBitsOf(this.domainSize);
    this._hashBits = 31 - Math.clz32(this.hashRange);
  }

  /** `L = max(1, bitlength(d - 1))`: the width of the values fed to the hash functions. */
  get valueBits() {
    return this._valueBits;
  }

  /** The public seeds `s_0 .. s_{k-1}` (BigInts). */
  get seeds() {
    return sketchSeeds(this.numHashes);
  }

  get p() {
    return null;
  }

  get q() {
    return null;
  }

  get envelopeParameters() {
    return { ...super.envelopeParameters, hash_range: this.hashRange, num_hashes: this.numHashes };
  }

  /** `h_j(value)`: the bucket in `[0, m)` of `value` under hash function `j`. */
  bucket(j, value) {
    checkValue(j, this.numHashes, "j");
    checkValue(value, this.domainSize);
    return this._bucket(j, value);
  }

  _bucket(j, value) {
    return hashHalves(this._seeds[2 * j], this._seeds[2 * j + 1], Math.floor(value / 4294967296),
      value >>> 0, this._valueBits, this._hashBits);
  }

  /** `(m/(m-1))**2 / n`, the scale of the estimate's variance. */
  _dominant(n) {
    const m = this.hashRange;
    return (m / (m - 1)) ** 2 / n;
  }

  /**
   * The variance the `k` fixed hash functions add, as if drawn at random:
   * `(m/(m-1))**2 (1 - 1/m) / (m k)` times `sumOfSquares` (`sum f_u**2` over the other values).
   */
  collisionVariance(sumOfSquares) {
    const m = this.hashRange;
    const k = this.numHashes;
    return ((m / (m - 1)) ** 2 * (1 - 1 / m)) / (m * k) * sumOfSquares;
  }

  /**
   * The variance of the server's estimate of a value of true frequency `frequency` from `n`
   * reports: the reports' noise `const + slope * f`. With `frequency` the whole distribution
   * (an array of `d` frequencies) it returns one variance per value, adding the hash
   * collisions' term with `sum_(u != v) f_u**2`.
   */
  variance(n, frequency = 0) {
    checkInteger(n, "n", 1);
    const [constant, slope] = this._varianceTerms(n);
    if (typeof frequency === "number") return constant + slope * frequency;
    const f = Array.from(frequency, Number);
    if (f.length !== this.domainSize) {
      throw new RangeError(`frequency must be a number or ${this.domainSize} frequencies, ` +
        `got ${f.length}`);
    }
    const total = this.collisionVariance(f.reduce((s, x) => s + x * x, 0));
    const one = this.collisionVariance(1);
    return f.map((x) => constant + slope * x + total - one * x * x);
  }
}

/**
 * Apple's Count Mean Sketch (`cms`). Report `{column, bits}`; each bit of the one-hot vector
 * of `h_j(v)` flipped with probability `1/(e^(eps/2)+1)`: two values differ in at most two
 * bits, a ratio of `e**epsilon`, exactly.
 */
export class CountMeanSketch extends Sketch {
  static oracleName = "cms";
  static reportFields = ["column", "bits"];

  /** The debiasing constant `(e^(eps/2)+1)/(e^(eps/2)-1)`. */
  get c() {
    const half = Math.exp(this.epsilon / 2);
    return (half + 1) / (half - 1);
  }

  /** Each bit's flip probability, `1/(e^(eps/2)+1)`. */
  get flip() {
    return 1 / (Math.exp(this.epsilon / 2) + 1);
  }

  /** The width of the `bits` field: `m` bits. */
  get bitWidth() {
    return this.hashRange;
  }

  /**
   * @param {number} value the true value in `[0, d)`
   * @param {RandomSource} [rng] default: the secure source
   * @returns {{column: number, bits: Uint8Array}}
   */
  perturb(value, rng) {
    checkValue(value, this.domainSize);
    const source = asSource(rng);
    const flip = this.flip;
    const column = source.below(this.numHashes);
    const bits = source.bernoulliBits(flip, this.hashRange);  // the flips of the zero bits
    const own = !source.bernoulli(flip);  // the true bucket's bit: 1 unless flipped
    setBit(bits, this._bucket(column, value), own);
    return { column, bits };
  }

  /** Whether the report's bit at `h_column(value)` is set. */
  supports(report, value) {
    return getBit(report.bits, this.bucket(report.column, value)) === 1;
  }

  _varianceTerms(n) {
    const flip = this.flip;
    const big = 1 - flip;
    const pi = flip + (big - flip) / this.hashRange;
    const scale = this._dominant(n) * this.c ** 2;
    return [scale * pi * (1 - pi), scale * (big * (1 - big) - pi * (1 - pi))];
  }
}

/**
 * Apple's Hadamard Count Mean Sketch (`hcms`): one bit per report. Report `{column, value,
 * bit}`: the sign of `H_m[h_j(v), l]` at a uniform `l`, kept with probability `e/(e+1)`.
 */
export class HadamardCountMeanSketch extends Sketch {
  static oracleName = "hcms";
  static reportFields = ["column", "value", "bit"];

  /** The debiasing constant `(e+1)/(e-1)`. */
  get c() {
    return (this.e + 1) / (this.e - 1);
  }

  /**
   * @param {number} value the true value in `[0, d)`
   * @param {RandomSource} [rng] default: the secure source
   * @returns {{column: number, value: number, bit: number}}
   */
  perturb(value, rng) {
    checkValue(value, this.domainSize);
    const source = asSource(rng);
    const e = this.e;
    const column = source.below(this.numHashes);
    const index = source.below(this.hashRange);
    const signBit = parity(this._bucket(column, value) & index);  // 1: H = -1
    const keep = source.bernoulli(e / (e + 1));
    return { column, value: index, bit: keep ? 1 - signBit : signBit };
  }

  /** Whether the report's bit is the sign of `H_m[h_column(value), l]` (a noisy vote). */
  supports(report, value) {
    return report.bit === 1 - parity(this.bucket(report.column, value) & report.value);
  }

  _varianceTerms(n) {
    const c2 = this.c ** 2;
    const m = this.hashRange;
    const scale = this._dominant(n);
    return [scale * (c2 - 1 / m ** 2), scale * ((c2 - 1) - (c2 - 1 / m ** 2))];
  }
}

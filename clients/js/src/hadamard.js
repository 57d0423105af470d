/**
 * Hadamard response (HR) and the one-bit private-coin Hadamard scheme (Acharya, Sun, Zhang,
 * AISTATS 2019; Acharya and Sun, ICML 2019).
 *
 * @module hadamard
 */

import { FrequencyOracle } from "./oracle.js";
import { asSource } from "./random.js";
import { checkValue } from "./validation.js";

/** `K = 2**ceil(log2(d+1))`: the smallest power of two larger than `d`. */
export function hadamardOrder(domainSize) {
  return 2 ** domainSize.toString(2).length;
}

/** Whether `H_K[a, b] = +1` (Sylvester order): `popcount(a & b)` is even. */
function plusOne(a, b) {
  let x = (a & b) >>> 0;
  let parity = 0;
  for (; x; x &= x - 1) parity ^= 1;
  return parity === 0;
}

/**
 * Hadamard response: value `v` uses row `v + 1` of `H_K`; its support `C_v` has `K/2`
 * members. The client outputs a uniform member with probability `e/(e+1)`, else a uniform
 * non-member. Report: `{value}` in `[0, K)`; `p* = e/(e+1)`, `q* = 1/2`. Draws: `below(K)`,
 * then `uniform < e/(e+1)`; the lowest set bit of `v+1` is flipped if membership differs.
 */
export class HadamardResponse extends FrequencyOracle {
  static oracleName = "hr";
  static reportFields = ["value"];

  constructor(options) {
    super(options);
    if (this.domainSize >= 2 ** 30) {
      throw new RangeError(`domainSize of hr must be < 2**30, got ${this.domainSize}`);
    }
  }

  /** `K`, the order of the Hadamard matrix. */
  get order() {
    return hadamardOrder(this.domainSize);
  }

  get p() {
    return this.e / (this.e + 1);
  }

  get q() {
    return 0.5;
  }

  perturb(value, rng) {
    checkValue(value, this.domainSize);
    const source = asSource(rng);
    const row = value + 1;
    let y = source.below(this.order);
    const wantMember = source.bernoulli(this.p);
    if (wantMember !== plusOne(row, y)) y ^= row & -row;  // a bijection of C_v and its complement
    return { value: y };
  }

  supports(report, value) {
    return plusOne(value + 1, report.value);
  }
}

/**
 * The one-bit scheme: the collector assigns each user a column `i` in `[0, K)` (ldpflow's
 * simulation: user `j` -> `j mod K`, balanced); the user sends one bit, 1 with probability
 * `e/(e+1)` if `H_K[v, i] = +1` and `1/(e+1)` otherwise. Report: `{column, bit}`. Not a pure
 * protocol: the server's variance is `4e/((e-1)**2 n)` plus column sampling
 * (`docs/oracles.md`). Draws: `uniform < P[1]`.
 */
export class OneBitHadamard extends FrequencyOracle {
  static oracleName = "onebit";
  static reportFields = ["column", "bit"];

  constructor(options) {
    super(options);
    if (this.domainSize >= 2 ** 30) {
      throw new RangeError(`domainSize of onebit must be < 2**30, got ${this.domainSize}`);
    }
  }

  /** `K`: the number of columns and the order of the Hadamard matrix. */
  get order() {
    return hadamardOrder(this.domainSize);
  }

  get p() {
    return null;
  }

  get q() {
    return null;
  }

  /** The randomisation term of the variance, `4e / (n (e-1)**2)` (equal columns). */
  variance(n) {
    return (4 * this.e) / (n * (this.e - 1) ** 2);
  }

  /**
   * @param {number} value the true value
   * @param {RandomSource} [rng]
   * @param {object} options
   * @param {number} options.column the user's column in `[0, K)`, assigned by the collector
   */
  perturb(value, rng, { column } = {}) {
    checkValue(value, this.domainSize);
    checkValue(column, this.order, "column");
    const source = asSource(rng);
    const pOne = plusOne(value, column) ? this.e / (this.e + 1) : 1 / (this.e + 1);
    return { column, bit: source.uniform() < pOne ? 1 : 0 };
  }

  /** Whether the report's bit says "in `B_column`" for `value` (a noisy vote). */
  supports(report, value) {
    return (report.bit === 1) === plusOne(value, report.column);
  }
}

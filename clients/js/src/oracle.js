/**
 * What every frequency oracle's client shares: its parameters, `p*` / `q*` and the variance
 * of the server's estimate (the contract of ldpflow's `ldpflow/core/oracles/base.py`).
 *
 * A client perturbs one true value into one report: a plain object whose fields are the
 * payload fields of ldpflow's report envelope (`ldpflow/schemas/report.avsc`): `value`,
 * `bits` (a `Uint8Array`), `seed` (a BigInt) and `bucket`, `column` and `bit`, or the
 * sketches' `column` with `bits` (cms) or with `value` and `bit` (hcms).
 *
 * @module oracle
 */

import { checkDomainSize, checkEpsilon } from "./validation.js";

export class FrequencyOracle {
  /**
   * @param {object} options
   * @param {number} options.epsilon the privacy parameter, > 0
   * @param {number} options.domainSize `d`, the number of values `0 .. d-1`, >= 2
   */
  constructor({ epsilon, domainSize } = {}) {
    this.epsilon = checkEpsilon(epsilon);
    this.domainSize = checkDomainSize(domainSize);
  }

  /** The registry key (`grr`, `oue`, ...): the envelope's `oracle` field. */
  get name() {
    return this.constructor.oracleName;
  }

  /** The payload fields of this oracle's reports (`value`, `bits`, ...). */
  get reportFields() {
    return this.constructor.reportFields;
  }

  /** The width in bits of a `bits` report field (unary encoding, SS: `d`; CMS: `m`). */
  get bitWidth() {
    return this.domainSize;
  }

  /** `e**epsilon`. */
  get e() {
    return Math.exp(this.epsilon);
  }

  /** The envelope's parameter fields, in the wire's names. */
  get envelopeParameters() {
    return { oracle: this.name, epsilon: this.epsilon, domain_size: this.domainSize };
  }

  /**
   * The variance of the server's estimate of the frequency of a value of true frequency
   * `frequency`, from `n` reports (exact for pure protocols, `docs/oracles.md`):
   * `q*(1-q*) / (n (p*-q*)**2) + f (1-p*-q*) / (n (p*-q*))`.
   */
  variance(n, frequency = 0) {
    const { p, q } = this;
    return (q * (1 - q)) / (n * (p - q) ** 2) + (frequency * (1 - p - q)) / (n * (p - q));
  }

  /** Perturb one true value into one report (epsilon-LDP). */
  perturb(value, rng) {
    throw new Error(`${this.constructor.name} must implement perturb()`);
  }

  /** Whether `report` supports `value` (what the server counts for a pure protocol). */
  supports(report, value) {
    throw new Error(`${this.constructor.name} must implement supports()`);
  }
}

/** Bit `j` of a packed little-endian bit vector. */
export function getBit(bits, j) {
  return (bits[j >> 3] >> (j & 7)) & 1;
}

/** Set bit `j` of a packed little-endian bit vector to `on` (in place). */
export function setBit(bits, j, on) {
  const mask = 1 << (j & 7);
  bits[j >> 3] = on ? bits[j >> 3] | mask : bits[j >> 3] & ~mask;
}

/** The number of set bits of a packed bit vector. */
export function popcount(bits) {
  let count = 0;
  for (let byte of bits) {
    for (; byte; byte &= byte - 1) count++;
  }
  return count;
}

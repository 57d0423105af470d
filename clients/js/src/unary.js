/**
 * Unary encoding: optimized (OUE) and symmetric (SUE, "basic RAPPOR").
 *
 * A report is `{bits}`: the `d`-bit vector as `ceil(d/8)` bytes, little-endian bit order,
 * padding bits zero. Bit `v` (the true value) is 1 with probability `p`, every other bit with
 * probability `q`, independently. Draws: the bit-sliced Bernoulli(q) bits of the row, then
 * `uniform < p` for bit v.
 *
 * @module unary
 */

import { FrequencyOracle, getBit, setBit } from "./oracle.js";
import { asSource } from "./random.js";
import { checkValue } from "./validation.js";

export class UnaryEncoding extends FrequencyOracle {
  static reportFields = ["bits"];

  perturb(value, rng) {
    checkValue(value, this.domainSize);
    const source = asSource(rng);
    const bits = source.bernoulliBits(this.q, this.domainSize);
    setBit(bits, value, source.bernoulli(this.p));
    return { bits };
  }

  supports(report, value) {
    return getBit(report.bits, value) === 1;
  }
}

/**
 * Optimized unary encoding (OUE): `p = 1/2`, `q = 1/(e+1)`; epsilon-LDP per report, ratio
 * `p(1-q) / ((1-p)q) = e**epsilon` (Wang et al., USENIX Security 2017, Sec. 4.3).
 */
export class OptimizedUnaryEncoding extends UnaryEncoding {
  static oracleName = "oue";

  get p() {
    return 0.5;
  }

  get q() {
    return 1 / (this.e + 1);
  }
}

/**
 * Symmetric unary encoding (SUE, basic RAPPOR): `p = e^(eps/2)/(e^(eps/2)+1)`, `q = 1-p`
 * (Wang et al., USENIX Security 2017, Sec. 4.2).
 */
export class SymmetricUnaryEncoding extends UnaryEncoding {
  static oracleName = "sue";

  get p() {
    const half = Math.exp(this.epsilon / 2);
    return half / (half + 1);
  }

  get q() {
    return 1 / (Math.exp(this.epsilon / 2) + 1);
  }
}

/**
 * Generalized randomized response (GRR, "direct encoding", k-RR).
 *
 * @module grr
 */

import { FrequencyOracle } from "./oracle.js";
import { asSource } from "./random.js";
import { checkValue } from "./validation.js";

/**
 * Report the true value with probability `p = e/(e+d-1)`, else a uniform other one.
 *
 * epsilon-LDP per report: every other output has probability `q = 1/(e+d-1)`, a ratio of
 * exactly `e**epsilon`. Report: `{value}` in `[0, d)` (Wang et al., USENIX Security 2017,
 * Sec. 4.1). Draws: `uniform < p` (keep), then `below(d-1)` (the other value, shifted past v).
 */
export class DirectEncoding extends FrequencyOracle {
  static oracleName = "grr";
  static reportFields = ["value"];

  get p() {
    return this.e / (this.e + this.domainSize - 1);
  }

  get q() {
    return 1 / (this.e + this.domainSize - 1);
  }

  perturb(value, rng) {
    checkValue(value, this.domainSize);
    const source = asSource(rng);
    const keep = source.bernoulli(this.p);
    let other = source.below(this.domainSize - 1);
    other += other >= value ? 1 : 0;  // uniform over the d - 1 other values
    return { value: keep ? value : other };
  }

  supports(report, value) {
    return report.value === value;
  }
}

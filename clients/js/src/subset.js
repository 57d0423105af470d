/**
 * Subset selection (SS; Ye and Barg; Wang et al. 2016).
 *
 * @module subset
 */

import { FrequencyOracle, getBit, popcount, setBit } from "./oracle.js";
import { asSource } from "./random.js";
import { checkValue } from "./validation.js";

// The first draw's fill rate has this many binary digits (ldpflow's _RATE_DIGITS).
const RATE_DIGITS = 8;
const fillRates = new Map();

function logFactorials(n) {
  const out = new Float64Array(n + 1);
  for (let i = 2; i <= n; i++) out[i] = out[i - 1] + Math.log(i);
  return out;
}

/**
 * The first draw's rate (8 binary digits) of least expected number of fix-up draws
 * (ldpflow's `_fill_rate`): a surplus `s` costs about `s / (share of members)` draws, a
 * shortfall `s / (share of non-members)`. The rate changes only the cost, never the law of
 * the report; it fixes the order of the draws, so it must match for the test vectors.
 */
export function fillRate(domainSize, subsetSize) {
  const key = `${domainSize}/${subsetSize}`;
  if (fillRates.has(key)) return fillRates.get(key);
  const others = domainSize - 1;
  const centre = subsetSize / domainSize;
  const grid = [];
  for (let i = 1; i < 2 ** RATE_DIGITS; i++) grid.push(i / 2 ** RATE_DIGITS);
  let candidates = grid.filter((r) => Math.abs(r - centre) <= 0.1);
  if (!candidates.length) {
    let best = grid[0];
    for (const r of grid) if (Math.abs(r - centre) < Math.abs(best - centre)) best = r;
    candidates = [best];
  }
  const cost = new Float64Array(others + 1);
  for (let c = 0; c <= others; c++) {
    const surplus = c - subsetSize;
    const midpoint = Math.min(Math.max(c - surplus / 2, 0.5), others - 0.5) / others;
    cost[c] = surplus > 0 ? surplus / midpoint : -surplus / (1 - midpoint);
  }
  const lf = logFactorials(others);
  let chosen = candidates[0];
  let least = Infinity;
  for (const r of candidates) {
    const logR = Math.log(r);
    const log1R = Math.log1p(-r);
    let expected = 0;
    for (let c = 0; c <= others; c++) {
      expected += Math.exp(lf[others] - lf[c] - lf[others - c] + c * logR + (others - c) * log1R)
        * cost[c];
    }
    if (expected < least) {
      least = expected;
      chosen = r;
    }
  }
  fillRates.set(key, chosen);
  return chosen;
}

/**
 * Report a subset of `omega = max(1, round(d/(e+1)))` values (halves round up) that holds
 * `v` with probability `p* = omega e / (omega e + d - omega)`, otherwise `omega` uniform
 * others; `q* = p*(omega-1)/(d-1) + (1-p*) omega/(d-1)`. epsilon-LDP per report. Report:
 * `{bits}`, the membership bitmap with exactly `omega` ones (as unary encoding). Draws:
 * Bernoulli bits at the fill rate, `uniform < p*` for bit v, then one `below(d-1)` per
 * fix-up step until the row holds `omega` members.
 */
export class SubsetSelection extends FrequencyOracle {
  static oracleName = "ss";
  static reportFields = ["bits"];

  /** `omega`, the size of every reported subset. */
  get subsetSize() {
    return Math.max(1, Math.floor(this.domainSize / (this.e + 1) + 0.5));
  }

  get p() {
    const w = this.subsetSize;
    return (w * this.e) / (w * this.e + this.domainSize - w);
  }

  get q() {
    const w = this.subsetSize;
    const d = this.domainSize;
    const p = this.p;
    return (p * (w - 1)) / (d - 1) + ((1 - p) * w) / (d - 1);
  }

  perturb(value, rng) {
    checkValue(value, this.domainSize);
    const source = asSource(rng);
    const d = this.domainSize;
    const bits = source.bernoulliBits(fillRate(d, this.subsetSize), d);
    setBit(bits, value, source.bernoulli(this.p));
    // Bring the row to exactly omega members: each step draws a uniform position of D \ {v}
    // and sets it (short of members) or clears it (a surplus), so the law stays uniform.
    let surplus = popcount(bits) - this.subsetSize;
    while (surplus !== 0) {
      let position = source.below(d - 1);
      position += position >= value ? 1 : 0;
      const member = getBit(bits, position) === 1;
      if (member === surplus > 0) {
        setBit(bits, position, !member);
        surplus -= Math.sign(surplus);
      }
    }
    return { bits };
  }

  supports(report, value) {
    return getBit(report.bits, value) === 1;
  }
}

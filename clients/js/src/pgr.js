/**
 * Projective geometry response (PGR) (Feldman, Nelson, Nguyen, Talwar, "Private Frequency
 * Estimation via Projective Geometry", ICML 2022), as ldpflow's `ldpflow/core/oracles/pgr.py`
 * and `docs/spec/oracles.md` ("PGR").
 *
 * Values are points of the projective space `P^{t-1}(F_q)` and a report is one of its
 * hyperplanes: one integer in `[0, K)`, `K = (q^t - 1)/(q - 1)`. Points and hyperplanes are
 * both the normalised vectors of `F_q^t` (first nonzero coordinate 1), numbered by increasing
 * code `sum_i x_i q^(t-1-i)` (coordinates most significant first): index `i` lies in block
 * `j` with `(q^j - 1)/(q - 1) <= i < (q^(j+1) - 1)/(q - 1)` (leading 1 at position
 * `t-1-j`) and has code `q^j + i - (q^j - 1)/(q - 1)`. Hyperplane `u` is `{x : <u, x> = 0}`.
 *
 * `(q, t)` follow from epsilon and `d` alone (`chooseGeometry`, ldpflow's rule), so the wire
 * form needs no field of its own. Report: `{value}`, the hyperplane's index.
 *
 * @module pgr
 */

import { FrequencyOracle } from "./oracle.js";
import { asSource } from "./random.js";
import { checkDomainSize, checkEpsilon, checkValue } from "./validation.js";

/** The floor of the decoding transform size cap (`q^t` entries): `max(2**24, 4 d)`. */
export const MAX_TRANSFORM = 1 << 24;
/** The largest field size ldpflow accepts (codes of `t = 2` reach `q^2`: int64). */
export const MAX_FIELD_SIZE = 2 ** 31;

function isPrime(m) {
  if (m < 2) return false;
  if (m % 2 === 0) return m === 2;
  let root = Math.floor(Math.sqrt(m));
  while (root * root > m) root--;
  while ((root + 1) * (root + 1) <= m) root++;
  for (let f = 3; f <= root; f += 2) {
    if (m % f === 0) return false;
  }
  return true;
}

function primeAtMost(x) {
  let m = Math.floor(x);
  while (m >= 2 && !isPrime(m)) m--;
  return m >= 2 ? m : null;
}

function primeAtLeast(x) {
  let m = Math.max(2, Math.ceil(x));
  while (!isPrime(m)) {
    m++;
    if (!Number.isSafeInteger(m)) throw new RangeError(`no prime >= ${x} below 2**53`);
  }
  return m;
}

/** The smallest `t >= 2` with `K = (q^t - 1)/(q - 1) >= d` (BigInt arithmetic). */
function dimensionOf(q, domainSize) {
  const Q = BigInt(q);
  const d = BigInt(domainSize);
  let t = 2;
  while ((Q ** BigInt(t) - 1n) / (Q - 1n) < d) t++;
  return t;
}

/**
 * `{K, h, h2, p, q}` of PGR over `P^{t-1}(F_q)` (ldpflow's `geometry_constants`): `K`
 * points and hyperplanes, `h = (q^(t-1) - 1)/(q - 1)` points per hyperplane, `h2 =
 * (q^(t-2) - 1)/(q - 1)` hyperplanes through two points (`K`, `h`, `h2` BigInts); with
 * `Z = h e + K - h`: `p* = h e / Z` and `q* = (h2 e + h - h2) / Z`.
 */
export function geometryConstants(q, t, epsilon) {
  const e = Math.exp(epsilon);
  const Q = BigInt(q);
  const block = (j) => (j <= 0 ? 0n : (Q ** BigInt(j) - 1n) / (Q - 1n));
  const K = block(t);
  const h = block(t - 1);
  const h2 = block(t - 2);
  const z = Number(h) * e + Number(K - h);
  return { K, h, h2, p: (Number(h) * e) / z, q: (Number(h2) * e + Number(h - h2)) / z };
}

function varianceConstant(q, t, epsilon) {
  const { p, q: qs } = geometryConstants(q, t, epsilon);
  return (qs * (1 - qs)) / ((p - qs) * (p - qs));
}

/** `max(2**24, 4 d)`: the largest decoding transform (`q^t` entries) the rule allows. */
export function maxTransformSize(domainSize) {
  return BigInt(Math.max(MAX_TRANSFORM, 4 * domainSize));
}

const geometryCache = new Map();

/**
 * `[q, t]`: the field size and dimension PGR uses for `epsilon` and `d` (ldpflow's
 * `choose_geometry`). The candidates are the largest prime `<= e^eps + 1`, the smallest prime
 * `>= e^eps + 1`, the primes below 64, and `r`, the smallest prime `>= d - 1`; a candidate
 * above `r` is replaced by `r`. Each takes the smallest `t >= 2` with `K >= d`; one with
 * `t >= 3` and `q^t > max(2**24, 4 d)` is dropped. The smallest `q*(1-q*)/(p*-q*)^2` wins,
 * the smaller `q` on a tie.
 */
export function chooseGeometry(epsilon, domainSize) {
  checkEpsilon(epsilon);
  checkDomainSize(domainSize);
  const key = `${epsilon}/${domainSize}`;
  const cached = geometryCache.get(key);
  if (cached) return [...cached];
  const target = Math.exp(epsilon) + 1;
  if (!Number.isFinite(target)) {
    throw new RangeError(`epsilon must be at most ln(Number.MAX_VALUE) for pgr, got ${epsilon}`);
  }
  const cap = primeAtLeast(domainSize - 1);
  const near = new Set();
  // A target at or above r puts both primes next to it at or above r (r is prime): both
  // become r, so they need not be searched for.
  if (Math.floor(target) < cap) {
    const below = primeAtMost(target);
    if (below !== null) near.add(below);
    near.add(primeAtLeast(target));
  }
  for (let c = 2; c < 64; c++) if (isPrime(c)) near.add(c);
  const candidates = new Set([cap]);
  for (const c of near) candidates.add(Math.min(c, cap));
  const limit = maxTransformSize(domainSize);
  let best = null;
  for (const q of candidates) {
    const t = dimensionOf(q, domainSize);
    if (t !== 2 && BigInt(q) ** BigInt(t) > limit) continue;
    const score = varianceConstant(q, t, epsilon);
    if (best === null || score < best[0] || (score === best[0] && (q < best[1]
      || (q === best[1] && t < best[2])))) {
      best = [score, q, t];
    }
  }
  const geometry = [best[1], best[2]];
  if (geometryCache.size > 256) geometryCache.clear();
  geometryCache.set(key, geometry);
  return [...geometry];
}

/** `a * b mod q` for `a, b` in `[0, q)`, `q <= 2**31`: exact (no product past 2**53). */
function mulMod(a, b, q) {
  if (q <= 67108864) return (a * b) % q;  // < 2**52
  return ((((a * (b >>> 16)) % q) * 65536) + a * (b & 0xffff)) % q;
}

/** `a^-1 mod q` for a prime `q` and `a` in `[1, q)` (extended Euclid). */
function inverseMod(a, q) {
  let [r0, r1] = [q, a];
  let [s0, s1] = [0, 1];
  while (r1 !== 0) {
    const k = Math.floor(r0 / r1);
    [r0, r1] = [r1, r0 - k * r1];
    [s0, s1] = [s1, s0 - k * s1];
  }
  return ((s0 % q) + q) % q;
}

/**
 * Projective geometry response: value `v` is point `v` of `P^{t-1}(F_q)`; the client reports
 * a hyperplane `y` with `P(y | v) = e/Z` if `v` lies on `y` and `1/Z` otherwise,
 * `Z = h e + K - h`. `p* = h e / Z`, `q* = (h2 e + h - h2) / Z`.
 *
 * Draws: `uniform < p*` (membership); then rounds of `below(q - 1)` (`s = 1 + below` for a
 * non-member, `s = 0` for a member, drawn either way) and `t` draws `below(q)` in one batch
 * (`belowArray`: the coordinates `w_0 .. w_{t-1}`); the coordinate `k` of `v`'s leading 1 is
 * replaced by `w_k = s - sum_{j != k} w_j x_j mod q`; a round with `w = 0` is drawn again.
 * The report is the index of `w` normalised (scaled so its first nonzero is 1).
 */
export class ProjectiveGeometryResponse extends FrequencyOracle {
  static oracleName = "pgr";
  static reportFields = ["value"];

  constructor(options) {
    super(options);
    const [q, t] = chooseGeometry(this.epsilon, this.domainSize);
    if (q > MAX_FIELD_SIZE) {
      throw new RangeError(`PGR needs a field size q <= 2**31; epsilon=${this.epsilon} and ` +
        `domainSize=${this.domainSize} give q = ${q}`);
    }
    const constants = geometryConstants(q, t, this.epsilon);
    if (constants.K > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new RangeError(`PGR's K = ${constants.K} exceeds 2**53 - 1 (domainSize ${this.domainSize})`);
    }
    this._q = q;
    this._t = t;
    this._order = Number(constants.K);
    this._p = constants.p;
    this._qStar = constants.q;
    // (q^j - 1)/(q - 1) for j = 0 .. t: where each block of the canonical order starts.
    this._offsets = Array.from({ length: t + 1 }, (_, j) => Number((BigInt(q) ** BigInt(j) - 1n) / BigInt(q - 1)));
  }

  /** `[q, t]`: the field size and the dimension of `F_q^t`. */
  get geometry() {
    return [this._q, this._t];
  }

  /** `q`, a prime. */
  get fieldSize() {
    return this._q;
  }

  /** `t`. */
  get dimension() {
    return this._t;
  }

  /** `K = (q^t - 1)/(q - 1)`: the number of points and of hyperplanes. */
  get order() {
    return this._order;
  }

  get p() {
    return this._p;
  }

  get q() {
    return this._qStar;
  }

  /** `ceil(log2 K)`: the bits of a report. */
  get reportBits() {
    return (this._order - 1).toString(2).length;
  }

  /** The normalised vector of index `i` in `[0, K)`: its `t` coordinates, most significant first. */
  vector(index) {
    checkValue(index, this._order, "index");
    return this._vector(index);
  }

  _vector(index) {
    const t = this._t;
    const q = this._q;
    const offsets = this._offsets;
    let j = 0;
    while (offsets[j + 1] <= index) j++;
    const x = new Array(t).fill(0);
    x[t - 1 - j] = 1;
    let rest = index - offsets[j];  // < q^j: the digits after the leading 1
    for (let i = t - 1; rest > 0; i--) {
      x[i] = rest % q;
      rest = Math.floor(rest / q);
    }
    return x;
  }

  /** The index of a normalised vector (first nonzero coordinate 1). */
  _index(w) {
    const t = this._t;
    let k = 0;
    while (w[k] === 0) k++;
    let rest = 0;
    for (let i = k + 1; i < t; i++) rest = rest * this._q + w[i];
    return this._offsets[t - 1 - k] + rest;
  }

  _dot(u, x) {
    const q = this._q;
    let sum = 0;
    for (let i = 0; i < this._t; i++) sum = (sum + mulMod(u[i], x[i], q)) % q;
    return sum;
  }

  perturb(value, rng) {
    checkValue(value, this.domainSize);
    const source = asSource(rng);
    const q = this._q;
    const t = this._t;
    const x = this._vector(value);
    const lead = x.indexOf(1);
    const member = source.bernoulli(this._p);
    let w;
    for (;;) {
      const draw = source.below(q - 1);
      const s = member ? 0 : 1 + draw;
      w = source.belowArray(q, t);
      w[lead] = 0;
      const dot = this._dot(w, x);
      w[lead] = (((s - dot) % q) + q) % q;
      if (w.some((c) => c !== 0)) break;  // w = 0: only for a member, chance q^-(t-1)
    }
    let k = 0;
    while (w[k] === 0) k++;
    const inverse = inverseMod(w[k], q);
    for (let i = k; i < t; i++) w[i] = mulMod(w[i], inverse, q);
    return { value: this._index(w) };
  }

  /** Whether hyperplane `report.value` contains point `value`. */
  supports(report, value) {
    checkValue(report.value, this._order, "report value");
    checkValue(value, this.domainSize);
    return this._dot(this._vector(report.value), this._vector(value)) === 0;
  }
}

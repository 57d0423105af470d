/**
 * The single place that decides how randomness is made (as `ldpflow/core/randomness.py`).
 *
 * A client's perturbation must be unpredictable to the collector, so the default source is
 * the platform's cryptographically secure generator, `crypto.getRandomValues` (browsers,
 * Node >= 20, Deno, Bun). `SplitMix64TestingRandom` is a seeded, reproducible stream for
 * tests and simulation only: its words are the splitmix64 outputs that ldpflow's published
 * test vectors (`docs/testvectors/client_reports.json`) are made with.
 *
 * Every oracle draws through a `RandomSource`, whose primitives are those of ldpflow, word
 * for word, so a seeded stream gives the same report in JavaScript as in Python:
 *
 * - `nextWord()`: a uniform 64-bit word (a BigInt);
 * - `uniform()`: `(word >> 11) / 2**53`;
 * - `bernoulli(p)`: `uniform() < p`;
 * - `below(bound)`: uniform in `[0, bound)`, Lemire's multiply-shift with rejection (exact);
 * - `belowArray(bound, size)`: `size` of them drawn as one batch (ldpflow's `below(bound, size)`);
 * - `bernoulliBits(p, nbits)`: a packed little-endian bit vector of independent Bernoulli(p)
 *   bits, bit-sliced: one random word decides one binary digit of 64 uniform variates.
 *
 * @module random
 */

import { MASK64, advanceHalves, mixHalves } from "./hashing.js";

const TWO53 = 2 ** 53;
const TWO32 = 4294967296n;
// Binary digits of p compared on every word (in blocks of words) before the few bits still
// undecided (a 2**-10 share) are gathered and decided by recursion on the remaining digits;
// the same constants as ldpflow's, which fix the order of the draws.
const DENSE_LEVELS = 10;
const BLOCK_WORDS = 1 << 15;

/** Uniform random words and the exact distributions derived from them. */
export class RandomSource {
  /** Whether this source is fit for client-side (production) perturbation. */
  get secure() {
    return false;
  }

  /** A uniform 64-bit word, as a BigInt in `[0, 2**64)`. */
  nextWord() {
    throw new Error(`${this.constructor.name} must implement nextWord()`);
  }

  /**
   * The next word as its two 32-bit halves `[high, low]`, in a buffer that the next call
   * overwrites (read it at once: no allocation per word).
   *
   * @returns {Uint32Array}
   */
  nextHalves() {
    const word = this.nextWord();
    this._halves ??= new Uint32Array(2);
    this._halves[0] = Number(word >> 32n);
    this._halves[1] = Number(word & 0xffffffffn);
    return this._halves;
  }

  /** A uniform float on the 2**-53 grid of [0, 1). */
  uniform() {
    const word = this.nextHalves();
    return (word[0] * 2097152 + (word[1] >>> 11)) / TWO53;  // (word >> 11) / 2**53
  }

  /** True with probability `p`. */
  bernoulli(p) {
    return this.uniform() < p;
  }

  /** A uniform integer in `[0, bound)`, `bound` in `[1, 2**32]`: exact (no modulo bias). */
  below(bound) {
    if (!Number.isSafeInteger(bound) || bound < 1 || bound > 2 ** 32) {
      throw new RangeError(`bound must be an integer in [1, 2**32], got ${bound}`);
    }
    const b = BigInt(bound);
    const threshold = (TWO32 - b) % b;
    for (;;) {
      const m = BigInt(this.nextHalves()[0]) * b;  // (word >> 32) * bound < 2**64: exact
      if ((m & 0xffffffffn) >= threshold) return Number(m >> 32n);
    }
  }

  /**
   * `size` uniform integers in `[0, bound)`, drawn as ldpflow's `below(bound, size)`: one
   * word per entry in order, then one more word for each rejected entry (in order), round
   * after round. Not `size` calls of `below`, whose words differ after a rejection.
   *
   * @returns {number[]}
   */
  belowArray(bound, size) {
    if (!Number.isSafeInteger(bound) || bound < 1 || bound > 2 ** 32) {
      throw new RangeError(`bound must be an integer in [1, 2**32], got ${bound}`);
    }
    const b = BigInt(bound);
    const threshold = (TWO32 - b) % b;
    const out = new Array(size);
    let todo = Array.from({ length: size }, (_, i) => i);
    while (todo.length) {
      const rejected = [];
      for (const i of todo) {
        const m = BigInt(this.nextHalves()[0]) * b;
        if ((m & 0xffffffffn) >= threshold) out[i] = Number(m >> 32n);
        else rejected.push(i);
      }
      todo = rejected;
    }
    return out;
  }

  /**
   * `nbits` independent Bernoulli(`p`) bits, packed: bit `j` is bit `j % 8` of byte
   * `j >> 3`; padding bits past `nbits` are zero. Each bit equals `[U < p]` for a uniform
   * `U` whose binary digits are drawn lazily, 64 variates per word: exact for the double p.
   *
   * @returns {Uint8Array} `ceil(nbits / 8)` bytes.
   */
  bernoulliBits(p, nbits) {
    if (typeof p !== "number" || !(p >= 0 && p <= 1)) {
      throw new RangeError(`p must be in [0, 1], got ${p}`);
    }
    const words = Math.ceil(nbits / 64);
    const low = new Uint32Array(words);
    const high = new Uint32Array(words);
    if (p === 1) {
      low.fill(0xffffffff);
      high.fill(0xffffffff);
    } else if (p > 0 && words) {
      lessThanDigits(this, cachedDigits(p), low, high);
    }
    const out = new Uint8Array(Math.ceil(nbits / 8));
    for (let i = 0; i < out.length; i++) {
      const shift = 8 * (i & 3);
      out[i] = ((i & 4 ? high[i >> 3] : low[i >> 3]) >>> shift) & 255;
    }
    if (nbits % 8) out[out.length - 1] &= (1 << (nbits % 8)) - 1;
    return out;
  }
}

/** The finite binary expansion 0.b1 b2 b3 ... of a double `p` in (0, 1). */
export function binaryDigits(p) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, p);
  const bits = view.getBigUint64(0);
  const exponent = Number((bits >> 52n) & 0x7ffn);
  const fraction = bits & ((1n << 52n) - 1n);
  // p = numerator / 2**shift exactly (normal and subnormal doubles).
  const numerator = exponent ? fraction | (1n << 52n) : fraction;
  const shift = exponent ? 1075 - exponent : 1074;
  const digits = [];
  for (let i = 1; i <= shift; i++) digits.push(Number((numerator >> BigInt(shift - i)) & 1n));
  while (digits.length && !digits[digits.length - 1]) digits.pop();
  return digits;
}

const digitCache = new Map();

function cachedDigits(p) {
  let digits = digitCache.get(p);
  if (!digits) {
    if (digitCache.size > 256) digitCache.clear();
    digits = binaryDigits(p);
    digitCache.set(p, digits);
  }
  return digits;
}

/** Set the bits of the words (`low`, `high`) to `[U < 0.d1 d2 ...]` for independent `U`. */
function lessThanDigits(source, digits, low, high) {
  const dense = digits.slice(0, DENSE_LEVELS);
  const rest = digits.slice(DENSE_LEVELS);
  const total = low.length;
  const openLow = rest.length ? new Uint32Array(total) : null;
  const openHigh = rest.length ? new Uint32Array(total) : null;
  for (let start = 0; start < total; start += BLOCK_WORDS) {
    const size = Math.min(BLOCK_WORDS, total - start);
    const undecidedLow = new Uint32Array(size).fill(0xffffffff);
    const undecidedHigh = new Uint32Array(size).fill(0xffffffff);
    for (const digit of dense) {
      for (let j = 0; j < size; j++) {
        const word = source.nextHalves();
        const wordHigh = word[0];
        const wordLow = word[1];
        // U's digit is 1: U stays equal to p if p's digit is 1, else U > p (decided, 0).
        const stillLow = undecidedLow[j] & wordLow;
        const stillHigh = undecidedHigh[j] & wordHigh;
        if (digit) {  // U's digit 0 < p's 1: decided, U < p
          low[start + j] |= undecidedLow[j] ^ stillLow;
          high[start + j] |= undecidedHigh[j] ^ stillHigh;
          undecidedLow[j] = stillLow;
          undecidedHigh[j] = stillHigh;
        } else {
          undecidedLow[j] ^= stillLow;
          undecidedHigh[j] ^= stillHigh;
        }
      }
    }
    if (openLow) {
      openLow.set(undecidedLow, start);
      openHigh.set(undecidedHigh, start);
    }
  }
  if (!openLow) return;  // the bits still undecided equal p on all digits: U >= p, stay 0
  const owners = [];  // (word, bit) of each undecided bit, word by word, bits ascending
  for (let w = 0; w < total; w++) {
    if (!openLow[w] && !openHigh[w]) continue;
    for (let bit = 0; bit < 64; bit++) {
      const set = bit < 32 ? (openLow[w] >>> bit) & 1 : (openHigh[w] >>> (bit - 32)) & 1;
      if (set) owners.push(w, bit);
    }
  }
  const count = owners.length / 2;
  if (!count) return;
  const subLow = new Uint32Array(Math.ceil(count / 64));
  const subHigh = new Uint32Array(subLow.length);
  lessThanDigits(source, rest, subLow, subHigh);
  for (let i = 0; i < count; i++) {
    const k = i & 63;
    const hit = k < 32 ? (subLow[i >> 6] >>> k) & 1 : (subHigh[i >> 6] >>> (k - 32)) & 1;
    if (!hit) continue;
    const w = owners[2 * i];
    const bit = owners[2 * i + 1];
    if (bit < 32) low[w] |= 1 << bit;
    else high[w] |= 1 << (bit - 32);
  }
}

const BUFFER_WORDS = 1024;  // 8 KiB per refill: getRandomValues takes at most 64 KiB

/** The platform's CSPRNG (`crypto.getRandomValues`): the default for client perturbation. */
export class SecureRandom extends RandomSource {
  constructor(cryptoImpl = globalThis.crypto) {
    super();
    if (!cryptoImpl || typeof cryptoImpl.getRandomValues !== "function") {
      throw new TypeError(
        "SecureRandom needs crypto.getRandomValues (Web Crypto); none is available here");
    }
    this._crypto = cryptoImpl;
    this._buffer = new Uint32Array(2 * BUFFER_WORDS);
    this._halves = new Uint32Array(2);
    this._next = this._buffer.length;
  }

  get secure() {
    return true;
  }

  nextHalves() {
    if (this._next >= this._buffer.length) {
      this._crypto.getRandomValues(this._buffer);
      this._next = 0;
    }
    this._halves[0] = this._buffer[this._next + 1];
    this._halves[1] = this._buffer[this._next];
    this._buffer[this._next] = 0;  // a drawn word is not kept around
    this._buffer[this._next + 1] = 0;
    this._next += 2;
    return this._halves;
  }

  nextWord() {
    const word = this.nextHalves();
    return (BigInt(word[0]) << 32n) | BigInt(word[1]);
  }
}

/**
 * The splitmix64 stream from a 64-bit state: portable and reproducible, NOT SECURE. For tests
 * and simulation only, never on a device: anyone who knows the seed knows every true value.
 *
 * Output i is splitmix64's finaliser of `seed + (i + 1) * 0x9E3779B97F4A7C15` (mod 2**64),
 * ldpflow's `SplitMix64Source`, so the published test vectors replay exactly.
 */
export class SplitMix64TestingRandom extends RandomSource {
  /** @param {number|bigint|string} seed an integer in `[0, 2**64)` */
  constructor(seed) {
    super();
    let state;
    if (typeof seed === "bigint") state = seed;
    else if (typeof seed === "number" && Number.isSafeInteger(seed)) state = BigInt(seed);
    else if (typeof seed === "string" && /^[0-9]+$/.test(seed)) state = BigInt(seed);
    else throw new TypeError(`seed must be an integer (number, BigInt or decimal string), got ${seed}`);
    if (state < 0n || state > MASK64) {
      throw new RangeError(`seed must be in [0, 2**64), got ${state}`);
    }
    this._halves = new Uint32Array(2);
    this._high = Number(state >> 32n);  // the state in 32-bit halves (fast path)
    this._low = Number(state & 0xffffffffn);
  }

  /** The current state (a BigInt). */
  get state() {
    return (BigInt(this._high) << 32n) | BigInt(this._low);
  }

  nextHalves() {
    const next = advanceHalves(this._high, this._low);
    this._high = next[0];
    this._low = next[1];
    const out = mixHalves(this._high, this._low);
    this._halves[0] = out[0];
    this._halves[1] = out[1];
    return this._halves;
  }

  nextWord() {
    const word = this.nextHalves();
    return (BigInt(word[0]) << 32n) | BigInt(word[1]);
  }
}

let defaultSource = null;

/**
 * The source of an oracle call's `rng` argument: `undefined`/`null` means the secure source
 * (as a client must); anything else must be a `RandomSource`.
 */
export function asSource(rng) {
  if (rng === undefined || rng === null) {
    defaultSource ??= new SecureRandom();
    return defaultSource;
  }
  if (!(rng instanceof RandomSource)) {
    throw new TypeError(
      `rng must be undefined (secure) or a RandomSource, got ${rng?.constructor?.name ?? typeof rng}`);
  }
  return rng;
}

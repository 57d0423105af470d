/**
 * The portable affine hash family of local hashing (ldpflow's `ldpflow/core/hashing.py`,
 * normative in `docs/spec/oracles.md`), bit for bit.
 *
 * `L`-bit unsigned values, `g = 2**b` buckets, arithmetic on unsigned 64-bit integers modulo
 * 2**64 (BigInt). From the splitmix64 stream started at the seed `s` draw `r_0 .. r_{b-1}`
 * (each output `& (2**L - 1)`) and then `a` (output `& (g - 1)`);
 * `H_s(v) = a XOR sum_j parity(r_j & v) * 2**j`.
 *
 * @module hashing
 */

export const MASK64 = (1n << 64n) - 1n;
export const GOLDEN_GAMMA = 0x9e3779b97f4a7c15n;
const MIX1 = 0xbf58476d1ce4e5b9n;
const MIX2 = 0x94d049bb133111ebn;

/** splitmix64's output function of an (already advanced) state `z` (a BigInt). */
export function splitmix64Mix(z) {
  let t = ((z ^ (z >> 30n)) * MIX1) & MASK64;
  t = ((t ^ (t >> 27n)) * MIX2) & MASK64;
  return t ^ (t >> 31n);
}

// The same in 32-bit halves (no BigInt: several times faster): `mixHalves(high, low)` leaves
// the output in MIXED[0] (high) and MIXED[1] (low).
const MIXED = new Uint32Array(2);
const MIX1_HIGH = 0xbf58476d;
const MIX1_LOW = 0x1ce4e5b9;
const MIX2_HIGH = 0x94d049bb;
const MIX2_LOW = 0x133111eb;
const GAMMA_HIGH = 0x9e3779b9;
const GAMMA_LOW = 0x7f4a7c15;

/** The high 32 bits of the 64-bit product of two unsigned 32-bit numbers. */
function mulHigh32(a, b) {
  const a0 = a & 0xffff;
  const a1 = a >>> 16;
  const b0 = b & 0xffff;
  const b1 = b >>> 16;
  const p01 = a0 * b1;
  const p10 = a1 * b0;
  const mid = ((a0 * b0) >>> 16) + (p01 & 0xffff) + (p10 & 0xffff);
  return (a1 * b1 + (p01 >>> 16) + (p10 >>> 16) + (mid >>> 16)) >>> 0;
}

/** `(high, low) * (mHigh, mLow)` mod 2**64, into MIXED. */
function mul64(high, low, mHigh, mLow) {
  MIXED[0] = mulHigh32(low, mLow) + Math.imul(high, mLow) + Math.imul(low, mHigh);
  MIXED[1] = Math.imul(low, mLow);
}

/** splitmix64's output function of the state (high, low): the output in MIXED. */
export function mixHalves(high, low) {
  // t = (z ^ (z >> 30)) * MIX1
  mul64(high ^ (high >>> 30), low ^ ((low >>> 30) | (high << 2)), MIX1_HIGH, MIX1_LOW);
  high = MIXED[0];
  low = MIXED[1];
  // t = (t ^ (t >> 27)) * MIX2
  mul64(high ^ (high >>> 27), low ^ ((low >>> 27) | (high << 5)), MIX2_HIGH, MIX2_LOW);
  high = MIXED[0];
  low = MIXED[1];
  // t ^ (t >> 31)
  MIXED[0] = high ^ (high >>> 31);
  MIXED[1] = low ^ ((low >>> 31) | (high << 1));
  return MIXED;
}

/** Advance a state (high, low) by the golden gamma: the next state in MIXED. */
export function advanceHalves(high, low) {
  const sum = low + GAMMA_LOW;
  MIXED[0] = high + GAMMA_HIGH + (sum >= 0x100000000 ? 1 : 0);
  MIXED[1] = sum;
  return MIXED;
}

/** The first `count` splitmix64 outputs from the state `seed`. */
export function splitmix64Stream(seed, count) {
  const out = [];
  let z = BigInt(seed) & MASK64;
  for (let i = 0; i < count; i++) {
    z = (z + GOLDEN_GAMMA) & MASK64;
    out.push(splitmix64Mix(z));
  }
  return out;
}

function parity32(x) {
  x ^= x >>> 16;
  x ^= x >>> 8;
  x ^= x >>> 4;
  return (0x6996 >>> (x & 15)) & 1;
}

/**
 * `H_s(v)`: the bucket in `[0, hashRange)` of `value` under the seed `seed`.
 *
 * @param {bigint|number|string} seed unsigned 64-bit seed
 * @param {bigint|number} value an unsigned integer below `2**valueBits`
 * @param {number} valueBits `L`
 * @param {number} hashRange `g`, a power of two
 */
export function hashValue(seed, value, valueBits, hashRange) {
  const hashBits = 31 - Math.clz32(hashRange);
  const s = BigInt(seed) & MASK64;
  const v = BigInt(value);
  return hashHalves(Number(s >> 32n), Number(s & 0xffffffffn), Number(v >> 32n),
    Number(v & 0xffffffffn), valueBits, hashBits);
}

/** `hashValue` on 32-bit halves of the seed and the value (no BigInt on the way). */
export function hashHalves(seedHigh, seedLow, valueHigh, valueLow, valueBits, hashBits) {
  // (r & (2**L - 1)) & v == r & (v & (2**L - 1)): mask the value once instead of each row.
  if (valueBits < 32) {
    valueLow &= (1 << valueBits) - 1;
    valueHigh = 0;
  } else if (valueBits < 64) {
    valueHigh &= valueBits === 32 ? 0 : (1 << (valueBits - 32)) - 1;
  }
  let high = seedHigh;
  let low = seedLow;
  let out = 0;
  for (let j = 0; j <= hashBits; j++) {
    advanceHalves(high, low);
    high = MIXED[0];
    low = MIXED[1];
    mixHalves(high, low);
    if (j === hashBits) {
      out ^= MIXED[1] & ((1 << hashBits) - 1);  // the offset a
    } else {
      out ^= parity32((MIXED[0] & valueHigh) ^ (MIXED[1] & valueLow)) << j;
    }
  }
  return out >>> 0;
}

/**
 * OLH's `g`: the power of two `2**b`, `b` in `{floor, ceil}(log2(e+1))` (>= 1), of smaller
 * variance `(e+g-1)**2 / ((e-1)**2 (g-1))` (ldpflow's `optimal_hash_range`).
 */
export function optimalHashRange(epsilon) {
  const e = Math.exp(epsilon);
  const exact = Math.log2(e + 1);
  const candidates = [...new Set([Math.max(1, Math.floor(exact)), Math.max(1, Math.ceil(exact))])]
    .sort((a, b) => a - b);
  const variance = (b) => {
    const g = 2 ** b;
    return (e + g - 1) ** 2 / ((e - 1) ** 2 * (g - 1));
  };
  let best = candidates[0];
  for (const b of candidates.slice(1)) if (variance(b) < variance(best)) best = b;
  return 2 ** best;
}

/**
 * BLAKE2b (RFC 7693) with a short digest, unkeyed: what ldpflow hashes a string user id with
 * to pick its PEM group (`hashlib.blake2b(data, digest_size=8)`). 64-bit words are kept as
 * pairs of 32-bit halves (low, high) in a `Uint32Array`, which is much faster than BigInt.
 *
 * @module blake2b
 */

// The IV as (low, high) halves of the eight 64-bit words.
const IV = new Uint32Array([
  0xf3bcc908, 0x6a09e667, 0x84caa73b, 0xbb67ae85, 0xfe94f82b, 0x3c6ef372, 0x5f1d36f1, 0xa54ff53a,
  0xade682d1, 0x510e527f, 0x2b3e6c1f, 0x9b05688c, 0xfb41bd6b, 0x1f83d9ab, 0x137e2179, 0x5be0cd19,
]);

const SIGMA = [
  [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
  [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
  [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
  [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
  [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
  [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
  [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
  [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
  [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
  [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
].map((row) => row.map((i) => 2 * i));

const v = new Uint32Array(32);
const m = new Uint32Array(32);
const state = new Uint32Array(16);  // reused: typed-array allocation dominates short inputs
const tail = new Uint8Array(128);

function add(a, b) {  // v[a] += v[b] (mod 2**64)
  const low = v[a] + v[b];
  v[a + 1] = v[a + 1] + v[b + 1] + (low >= 0x100000000 ? 1 : 0);
  v[a] = low;
}

function addWord(a, low, high) {  // v[a] += (low, high)
  const sum = v[a] + low;
  v[a + 1] = v[a + 1] + high + (sum >= 0x100000000 ? 1 : 0);
  v[a] = sum;
}

function mix(a, b, c, d, x, y) {
  add(a, b);
  addWord(a, m[x], m[x + 1]);
  let low = v[d] ^ v[a];
  let high = v[d + 1] ^ v[a + 1];
  v[d] = high;  // rotate right by 32
  v[d + 1] = low;
  add(c, d);
  low = v[b] ^ v[c];
  high = v[b + 1] ^ v[c + 1];
  v[b] = (low >>> 24) ^ (high << 8);  // by 24
  v[b + 1] = (high >>> 24) ^ (low << 8);
  add(a, b);
  addWord(a, m[y], m[y + 1]);
  low = v[d] ^ v[a];
  high = v[d + 1] ^ v[a + 1];
  v[d] = (low >>> 16) ^ (high << 16);  // by 16
  v[d + 1] = (high >>> 16) ^ (low << 16);
  add(c, d);
  low = v[b] ^ v[c];
  high = v[b + 1] ^ v[c + 1];
  v[b] = (high >>> 31) ^ (low << 1);  // by 63
  v[b + 1] = (low >>> 31) ^ (high << 1);
}

function compress(h, block, offset, counted, last) {
  for (let i = 0; i < 16; i++) {
    v[i] = h[i];
    v[i + 16] = IV[i];
  }
  v[24] ^= counted >>> 0;  // the byte counter (below 2**53 here)
  v[25] ^= Math.floor(counted / 0x100000000);
  if (last) {
    v[28] = ~v[28];
    v[29] = ~v[29];
  }
  for (let i = 0; i < 32; i++) {
    const j = offset + 4 * i;
    m[i] = block[j] | (block[j + 1] << 8) | (block[j + 2] << 16) | (block[j + 3] << 24);
  }
  for (let round = 0; round < 12; round++) {
    const s = SIGMA[round % 10];
    mix(0, 8, 16, 24, s[0], s[1]);
    mix(2, 10, 18, 26, s[2], s[3]);
    mix(4, 12, 20, 28, s[4], s[5]);
    mix(6, 14, 22, 30, s[6], s[7]);
    mix(0, 10, 20, 30, s[8], s[9]);
    mix(2, 12, 22, 24, s[10], s[11]);
    mix(4, 14, 16, 26, s[12], s[13]);
    mix(6, 8, 18, 28, s[14], s[15]);
  }
  for (let i = 0; i < 16; i++) h[i] ^= v[i] ^ v[i + 16];
}

/**
 * The unkeyed BLAKE2b digest of `data` with `digestSize` bytes (1..64).
 *
 * @param {Uint8Array} data
 * @param {number} digestSize
 * @returns {Uint8Array}
 */
export function blake2b(data, digestSize = 64) {
  if (!(data instanceof Uint8Array)) throw new TypeError("data must be a Uint8Array");
  if (!Number.isInteger(digestSize) || digestSize < 1 || digestSize > 64) {
    throw new RangeError(`digestSize must be an integer in [1, 64], got ${digestSize}`);
  }
  const h = state;
  h.set(IV);
  h[0] ^= 0x01010000 ^ digestSize;  // fanout 1, depth 1, no key
  let offset = 0;
  while (data.length - offset > 128) {
    compress(h, data, offset, offset + 128, false);
    offset += 128;
  }
  tail.fill(0);
  tail.set(data.subarray(offset));
  compress(h, tail, 0, data.length, true);
  const out = new Uint8Array(digestSize);
  for (let i = 0; i < digestSize; i++) out[i] = (h[i >> 2] >>> (8 * (i & 3))) & 255;
  return out;
}

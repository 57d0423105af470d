/**
 * Value codecs of the heavy-hitter protocols (ldpflow's `ldpflow/core/codecs.py`): how a
 * value becomes an `m`-bit unsigned integer (a BigInt).
 *
 * - `int`: integers in `[0, 2**m)` are themselves;
 * - `string`: the first `m / 8` UTF-8 bytes, zero-padded on the right, read big-endian (so
 *   the integer's prefixes are the string's byte prefixes). A longer string is refused
 *   unless `truncate` is set (then the longest run of whole characters that fits is kept);
 *   a string ending in a NUL character is refused (it would not decode back).
 *
 * @module codecs
 */

import { checkUnsigned } from "./validation.js";

export const CODECS = Object.freeze(["int", "string"]);
const encoder = new TextEncoder();

/** The longest prefix of `raw` of at most `limit` bytes not ending inside a character. */
function cutUtf8(raw, limit) {
  if (raw.length <= limit) return raw;
  let cut = limit;
  while (cut > 0 && (raw[cut] & 0xc0) === 0x80) cut--;
  return raw.subarray(0, cut);
}

/**
 * The `bits`-bit code of `value` under codec `codec`.
 *
 * @param {string} codec `int` or `string`
 * @param {number|bigint|string} value
 * @param {number} bits `m`
 * @param {object} [options]
 * @param {boolean} [options.truncate=false] string codec: keep the leading bytes of a longer string
 * @returns {bigint}
 */
export function encodeValue(codec, value, bits, { truncate = false } = {}) {
  if (codec === "int") return checkUnsigned(value, bits);
  if (codec !== "string") throw new RangeError(`codec must be int or string, got ${codec}`);
  if (bits % 8) throw new RangeError(`bits of a string codec must be a multiple of 8, got ${bits}`);
  if (typeof value !== "string") throw new TypeError(`value must be a string, got ${typeof value}`);
  const size = bits / 8;
  let raw = encoder.encode(value);
  if (raw.length > size) {
    if (!truncate) {
      throw new RangeError(
        `value must hold at most ${size} UTF-8 bytes (bits=${bits}), got ${raw.length} bytes; ` +
        "pass truncate: true to keep its leading bytes");
    }
    raw = cutUtf8(raw, size);
  }
  if (raw.length && raw[raw.length - 1] === 0) {
    throw new RangeError("value must not end in a NUL character (it would not decode back)");
  }
  let code = 0n;
  for (let i = 0; i < size; i++) code = (code << 8n) | BigInt(i < raw.length ? raw[i] : 0);
  return code;
}

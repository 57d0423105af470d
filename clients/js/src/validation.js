/**
 * Parameter checks with one message format: the parameter, the constraint and the value
 * received (as ldpflow's `ldpflow/core/validation.py`). A wrong type is a `TypeError`, a bad
 * value a `RangeError`.
 *
 * @module validation
 */

/** Return `epsilon` if it is a finite number > 0. */
export function checkEpsilon(epsilon, name = "epsilon") {
  if (typeof epsilon !== "number") {
    throw new TypeError(`${name} must be a number, got ${typeName(epsilon)}`);
  }
  if (!(epsilon > 0 && epsilon < Infinity)) {  // also rejects NaN
    throw new RangeError(`${name} must be in (0, inf), got ${epsilon}`);
  }
  return epsilon;
}

/** Return `value` if it is a safe integer >= `minimum`. */
export function checkInteger(value, name, minimum = 1) {
  if (typeof value !== "number" || !Number.isSafeInteger(value)) {
    throw new TypeError(`${name} must be an integer, got ${typeName(value)} (${String(value)})`);
  }
  if (value < minimum) {
    throw new RangeError(`${name} must be >= ${minimum}, got ${value}`);
  }
  return value;
}

/** A domain holds the values `0 .. domainSize - 1`; at least two of them. */
export function checkDomainSize(domainSize, name = "domainSize") {
  return checkInteger(domainSize, name, 2);
}

/** Return `value` if it is an integer power of two >= `minimum`. */
export function checkPowerOfTwo(value, name, minimum = 2) {
  checkInteger(value, name, minimum);
  if (value > 2 ** 30 || (value & (value - 1)) !== 0) {
    throw new RangeError(`${name} must be a power of two (at most 2**30), got ${value}`);
  }
  return value;
}

/** Return `value` if it is an integer in `[0, bound)` (a safe integer). */
export function checkValue(value, bound, name = "value") {
  if (typeof value !== "number" || !Number.isSafeInteger(value)) {
    throw new TypeError(`${name} must be an integer, got ${typeName(value)} (${String(value)})`);
  }
  if (value < 0 || value >= bound) {
    throw new RangeError(`${name} must be in [0, ${bound}), got ${value}`);
  }
  return value;
}

/** Return `value` as a BigInt in `[0, 2**bits)`; accepts safe integers and BigInts. */
export function checkUnsigned(value, bits, name = "value") {
  let big;
  if (typeof value === "bigint") {
    big = value;
  } else if (typeof value === "number" && Number.isSafeInteger(value)) {
    big = BigInt(value);
  } else {
    throw new TypeError(
      `${name} must be an integer (a safe integer or a BigInt), got ${typeName(value)}`);
  }
  if (big < 0n || big >= 1n << BigInt(bits)) {
    throw new RangeError(`${name} must be in [0, 2**${bits}), got ${big}`);
  }
  return big;
}

export function typeName(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value === "object" ? (value.constructor?.name ?? "object") : typeof value;
}

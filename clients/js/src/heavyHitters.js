/**
 * What the clients of ldpflow's heavy-hitter protocols (`pem spm mcm treehist sfp`,
 * `ldpflow/core/heavy_hitters`, `docs/spec/heavy_hitters.md`) share: the user's public group
 * from its stable id, the value codec, the parameter checks and the envelope's fields.
 *
 * A user belongs to exactly one group, fixed by its stable id: `group = splitmix64(key) mod
 * g`, `key` the 64-bit key of the id's UTF-8 bytes by the configuration's group hash version
 * (`groupHash`): 2 (the default), the keyed string hash `ldpflow-grouphash-2`; 1, the
 * little-endian BLAKE2b-64 digest (the version of every report that names none). A report travels in
 * the envelope with `oracle` the protocol's key, `domain_size` the number of groups,
 * `hash_range` its OLH components' buckets, the top-level payload (`seed`, `bucket`; MCM's
 * `bits`) and the nested record named after the protocol: the group and the protocol's
 * other payload fields, then its configuration (the spec's "Wire forms").
 *
 * @module heavyHitters
 */

import { blake2b } from "./blake2b.js";
import { CODECS, encodeValue } from "./codecs.js";
import { MASK64, advanceHalves, mixHalves, optimalHashRange, splitmix64Mix } from "./hashing.js";
import { asSource } from "./random.js";
import { checkEpsilon, checkInteger, typeName } from "./validation.js";

/** The PEM paper's query limit `Q` (Sec. VI-A): the default of every protocol that has one. */
export const DEFAULT_QUERY_LIMIT = 2 ** 20;
export const MAX_QUERY_LIMIT = 2 ** 28;
/** The user id a report's group was drawn from (a symbol key: never a wire field). */
export const USER_ID = Symbol("ldpflow.userId");
const encoder = new TextEncoder();

/** Group hash version 1: a user id's key is its BLAKE2b-64 digest. */
export const GROUP_HASH_BLAKE2B = 1;
/** Group hash version 2: a user id's key is the keyed string hash with `GROUP_HASH_KEY`. */
export const GROUP_HASH_KEYED = 2;
/** The group hash versions, oldest first. */
export const GROUP_HASHES = Object.freeze([GROUP_HASH_BLAKE2B, GROUP_HASH_KEYED]);
/** What this client writes unless told otherwise. */
export const DEFAULT_GROUP_HASH = GROUP_HASH_KEYED;
/** `K` of version 2: the ASCII bytes `ldpgrp02` as a little-endian integer (public). */
export const GROUP_HASH_KEY = 0x323070726770646cn;
const KEYED_MULTIPLIER = 0xff51afd7ed558ccdn;

/** A group hash version (1 or 2). */
export function checkGroupHash(groupHash) {
  if (!GROUP_HASHES.includes(groupHash)) {
    throw new RangeError(`groupHash must be one of ${GROUP_HASHES.join(", ")}, got ${groupHash}`);
  }
  return groupHash;
}

/**
 * The keyed 64-bit hash `S_K` of bytes (ldpflow's `keyed_string_hashes`, normative in
 * `docs/spec/heavy_hitters.md`, "Group hash"): with `mix` splitmix64's output function and
 * 8-byte little-endian words `w` (the last zero-padded), `h = mix(K ^ len)`, then
 * `h = mix(h ^ mix(w + K)) * 0xFF51AFD7ED558CCD` for each word, and `S_K = mix(h)`.
 *
 * @param {Uint8Array} bytes
 * @param {bigint} key `K`, in [0, 2**64)
 * @returns {bigint}
 */
export function keyedStringHash(bytes, key) {
  if (!(bytes instanceof Uint8Array)) throw new TypeError(`bytes must be a Uint8Array, got ${typeName(bytes)}`);
  if (typeof key !== "bigint" || key < 0n || key > MASK64) {
    throw new RangeError(`key must be a BigInt in [0, 2**64), got ${key}`);
  }
  let h = splitmix64Mix(key ^ BigInt(bytes.length));
  for (let start = 0; start < bytes.length; start += 8) {
    let word = 0n;
    for (let i = Math.min(start + 8, bytes.length) - 1; i >= start; i--) {
      word = (word << 8n) | BigInt(bytes[i]);
    }
    h = (splitmix64Mix(h ^ splitmix64Mix((word + key) & MASK64)) * KEYED_MULTIPLIER) & MASK64;
  }
  return splitmix64Mix(h);
}

/**
 * The 64-bit key of a string user id (a BigInt), by group hash version: 2 (the default), the
 * keyed string hash of its UTF-8 bytes with `GROUP_HASH_KEY`; 1, their BLAKE2b-64 digest,
 * little-endian.
 */
export function userKey(userId, groupHash = DEFAULT_GROUP_HASH) {
  if (typeof userId !== "string") {
    throw new TypeError(`userId must be a string, got ${typeof userId}`);
  }
  checkGroupHash(groupHash);
  const bytes = encoder.encode(userId);
  if (groupHash === GROUP_HASH_KEYED) return keyedStringHash(bytes, GROUP_HASH_KEY);
  const digest = blake2b(bytes, 8);
  let key = 0n;
  for (let i = 7; i >= 0; i--) key = (key << 8n) | BigInt(digest[i]);
  return key;
}

/**
 * The group in `[0, numGroups)` of a user: `splitmix64(userKey(id, groupHash)) mod
 * numGroups`.
 */
export function assignGroup(userId, numGroups, groupHash = DEFAULT_GROUP_HASH) {
  checkInteger(numGroups, "numGroups");
  const key = userKey(userId, groupHash);
  const low = Number(key & 0xffffffffn) >>> 0;
  const high = Number(key >> 32n) >>> 0;
  const state = advanceHalves(high, low);  // the first splitmix64 output from the key
  const mixed = mixHalves(state[0], state[1]);
  return Number(((BigInt(mixed[0]) << 32n) | BigInt(mixed[1])) % BigInt(numGroups));
}

/** `(e + g - 1)**2 / ((e - 1)**2 (g - 1))`: `n` times OLH's variance at frequency 0. */
export function olhVarianceFactor(epsilon, hashRange) {
  const e = Math.exp(epsilon);
  return (e + hashRange - 1) ** 2 / ((e - 1) ** 2 * (hashRange - 1));
}

/**
 * The smallest power of two whose OLH variance is within `tolerance` (10 %) of the optimal
 * range's, at most `maxHashRange` (64): ldpflow's `cost_aware_hash_range`, the default hash
 * range of TreeHist (for epsilon) and SFP (for epsilon / 2).
 */
export function costAwareHashRange(epsilon, { tolerance = 0.1, maxHashRange = 64 } = {}) {
  checkEpsilon(epsilon);
  const best = optimalHashRange(epsilon);
  const floor = olhVarianceFactor(epsilon, best);
  let g = 2;
  while (g < best && olhVarianceFactor(epsilon, g) > (1 + tolerance) * floor) g *= 2;
  return Math.min(g, maxHashRange);
}

/** OLH's `p* = e / (e + g - 1)` for budget `epsilon`. */
export function olhKeep(epsilon, hashRange) {
  const e = Math.exp(epsilon);
  return e / (e + hashRange - 1);
}

/** Refuse option names a protocol does not have (as a keyword-only dataclass does). */
export function checkOptions(options, allowed, protocol) {
  if (options === null || typeof options !== "object") {
    throw new TypeError(`the options of ${protocol} must be an object, got ${typeName(options)}`);
  }
  const every = [...allowed, "groupHash"];  // every heavy-hitter client's
  const unknown = Object.keys(options).filter((name) => !every.includes(name));
  if (unknown.length) {
    throw new TypeError(`${protocol} has no option ${unknown.join(", ")}; its options are ` +
      `${every.join(", ")}`);
  }
}

/** `topK >= 1`, `valueBits` in `[1, 64]`, `epsilon`, `queryLimit` in `[2, 2**28]`. */
export function checkCommon({ topK, valueBits, epsilon, queryLimit = DEFAULT_QUERY_LIMIT }) {
  const k = checkInteger(topK, "topK");
  const m = checkInteger(valueBits, "valueBits");
  if (m > 64) throw new RangeError(`valueBits must be in [1, 64], got ${m}`);
  checkEpsilon(epsilon);
  const limit = checkInteger(queryLimit, "queryLimit", 2);
  if (limit > MAX_QUERY_LIMIT) throw new RangeError(`queryLimit must be <= 2**28, got ${limit}`);
  return { topK: k, valueBits: m, epsilon, queryLimit: limit };
}

/** A public 64-bit hash key (`channelSeed`, `hashSeed`): a safe integer, BigInt or decimal string. */
export function checkKey(value, name) {
  let key;
  if (typeof value === "bigint") key = value;
  else if (typeof value === "number" && Number.isSafeInteger(value)) key = BigInt(value);
  else if (typeof value === "string" && /^[0-9]+$/.test(value)) key = BigInt(value);
  else throw new TypeError(`${name} must be an integer (number, BigInt or decimal string), got ${typeName(value)}`);
  if (key < 0n || key > MASK64) throw new RangeError(`${name} must be in [0, 2**64), got ${key}`);
  return key;
}

/** The codec of the values (`int` or `string`; the string codec needs whole bytes). */
export function checkCodec(codec, valueBits) {
  if (!CODECS.includes(codec)) throw new RangeError(`codec must be int or string, got ${codec}`);
  if (codec === "string" && valueBits % 8) {
    throw new RangeError(`valueBits of the string codec must be a multiple of 8, got ${valueBits}`);
  }
  return codec;
}

/** An unsigned 64-bit integer as the signed long the wire carries (two's complement). */
export const toLong = (value) => BigInt.asIntN(64, BigInt(value));

/**
 * The base of the heavy-hitter clients. A subclass sets `static protocolName`,
 * `static topFields` (its top-level payload fields), `static nestedFields` (its payload
 * fields in the nested record, `group` first), and implements `numGroups`, `hashRange`,
 * `nestedParameters()` (with `group_hash`) and `perturbCode(code, group, source)`; its
 * constructor calls `super(options)`, which takes `groupHash` (default `DEFAULT_GROUP_HASH`).
 */
export class HeavyHitterClient {
  /** @param {object} [options] @param {number} [options.groupHash=2] the group hash version */
  constructor({ groupHash = DEFAULT_GROUP_HASH } = {}) {
    this.groupHash = checkGroupHash(groupHash);
  }

  /** The registry key (`pem`, `spm`, ...): the envelope's `oracle` and nested record's name. */
  get name() {
    return this.constructor.protocolName;
  }

  /** Every payload field of a report: the top-level ones, then the nested record's. */
  get reportFields() {
    return [...this.constructor.topFields, ...this.constructor.nestedFields];
  }

  /** The payload fields of the nested record (`group`, ...). */
  get nestedFields() {
    return this.constructor.nestedFields;
  }

  /** The envelope's parameter fields: `domain_size` is the number of groups. */
  get envelopeParameters() {
    return { oracle: this.name, epsilon: this.epsilon, domain_size: this.numGroups,
      hash_range: this.hashRange };
  }

  /** The group of a user (see `assignGroup`), by this configuration's `groupHash`. */
  groupOf(userId) {
    return assignGroup(userId, this.numGroups, this.groupHash);
  }

  /**
   * One user's report (epsilon-LDP): the value's code through the protocol's components,
   * in ldpflow's order of draws.
   *
   * @param {number|bigint|string} value the true value (a string for the string codec)
   * @param {string} userId the stable user id, which must travel in the envelope
   * @param {RandomSource} [rng] the secure source unless given (tests only)
   * @param {object} [options]
   * @param {boolean} [options.truncate=false] string codec: keep a longer string's leading bytes
   */
  perturb(value, userId, rng, { truncate = false } = {}) {
    const code = encodeValue(this.codec, value, this.valueBits, { truncate });
    const group = this.groupOf(userId);
    const report = this.perturbCode(code, group, asSource(rng));
    return { ...report, [USER_ID]: userId };
  }
}

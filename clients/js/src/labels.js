/**
 * Value labels: the dictionary a client and the server share (value <-> label), versioned.
 *
 * A categorical string (a category name, a URL) is sent as the integer value its label has
 * in the dictionary: `labels.encode("red")` gives the value to perturb, and the server, run
 * with the same label file (`ldpflow estimate --value_labels FILE`), names the estimates by
 * the same labels. The dictionary's `version` is a content hash computed exactly as
 * ldpflow's (`ldpflow/wire/labels.py`): `blake2b-128:` and the hex BLAKE2b-128 digest of the
 * UTF-8 bytes of the compact JSON `[[value, label], ...]` in value order; the server records
 * it in the output's run block (`run.value_labels.version`) and refuses a run whose
 * `--expect_value_labels` (the version the clients were built with) differs.
 * `docs/testvectors/value_labels.json` holds cases both sides check.
 *
 * @module labels
 */

import { blake2b } from "./blake2b.js";

export const VALUE_LABELS_VERSION_PREFIX = "blake2b-128:";
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));
const LONE_SURROGATE = /\p{Cs}/u;
// Unicode's White_Space: a label of these alone is empty (ldpflow's rule; trim() differs).
const BLANK = /^\p{White_Space}*$/u;
const SHOWN = 40;

function quote(text) {
  const shown = [...text].length <= SHOWN ? text : [...text].slice(0, SHOWN - 1).join("") + "…";
  return JSON.stringify(shown);
}

function toValue(key) {
  if (typeof key === "number") {
    if (!Number.isSafeInteger(key)) throw new TypeError(`values must be integers, got ${key}`);
    return key;
  }
  if (typeof key === "string" && /^\s*[+-]?[0-9]+\s*$/.test(key)) {
    const value = Number(key.trim());
    if (Number.isSafeInteger(value)) return value;
  }
  throw new TypeError(`the value ${JSON.stringify(key)} is not an integer`);
}

/** The bytes the version hashes: compact JSON `[[value, label], ...]` in value order. */
export function canonicalLabelBytes(pairs) {
  const sorted = [...pairs].sort((a, b) => a[0] - b[0]);
  return new TextEncoder().encode(JSON.stringify(sorted));
}

/** The version of a dictionary's `[value, label]` pairs: `blake2b-128:` + 32 hex digits. */
export function labelsVersion(pairs) {
  let hex = "";
  for (const byte of blake2b(canonicalLabelBytes(pairs), 16)) hex += HEX[byte];
  return VALUE_LABELS_VERSION_PREFIX + hex;
}

/**
 * A checked label dictionary. Build it from `[value, label]` pairs, an object
 * `{"3": "red"}` (a label file's JSON) or an array of labels (the position is the value,
 * `null` leaves a value unlabelled). Refused (a `TypeError` or `RangeError` naming the
 * problem): a value that is not an integer in [0, 2^53), a value labelled twice, an empty
 * label, a label with a lone surrogate, two labels equal after NFC normalisation.
 */
export class ValueLabels {
  #labels;
  #byLabel;
  #version;

  constructor(source) {
    let pairs;
    if (Array.isArray(source) && source.every((p) => Array.isArray(p))) pairs = source;
    else if (Array.isArray(source)) {
      pairs = source.flatMap((label, value) => (label === null ? [] : [[value, label]]));
    } else if (source instanceof Map) pairs = [...source.entries()];
    else if (source !== null && typeof source === "object") pairs = Object.entries(source);
    else throw new TypeError("labels must be [value, label] pairs, an object or an array");
    this.#labels = new Map();
    this.#byLabel = new Map();
    for (const [key, label] of pairs) {
      const value = toValue(key);
      if (value < 0) throw new RangeError(`value ${value} is negative (values are in [0, d))`);
      if (this.#labels.has(value)) {
        throw new RangeError(`value ${value} is labelled twice (${quote(this.#labels.get(value))} ` +
          `and ${quote(String(label))})`);
      }
      if (typeof label !== "string") {
        throw new TypeError(`the label of value ${value} must be a string, got ${typeof label}`);
      }
      if (BLANK.test(label)) throw new RangeError(`the label of value ${value} is empty`);
      if (LONE_SURROGATE.test(label)) {
        throw new RangeError(`the label of value ${value} is not valid Unicode (a lone surrogate)`);
      }
      const form = label.normalize("NFC");
      if (this.#byLabel.has(form)) {
        const other = this.#byLabel.get(form);
        const same = this.#labels.get(other) === label ? "the same label"
          : "labels equal after NFC normalisation (they look alike)";
        throw new RangeError(`values ${other} and ${value} have ${same} ${quote(label)}: ` +
          "a label names one value");
      }
      this.#labels.set(value, label);
      this.#byLabel.set(form, value);
    }
    this.#labels = new Map([...this.#labels.entries()].sort((a, b) => a[0] - b[0]));
    this.#version = labelsVersion([...this.#labels.entries()]);
  }

  /** The content hash that names this dictionary (equal to ldpflow's for equal labels). */
  get version() { return this.#version; }

  /** How many values have a label. */
  get size() { return this.#labels.size; }

  /** The smallest domain size that holds every labelled value (the largest value + 1). */
  get minDomainSize() {
    let largest = -1;
    for (const value of this.#labels.keys()) largest = Math.max(largest, value);
    return largest + 1;
  }

  /**
   * The value that `label` encodes, to perturb and send. The label is looked up in its NFC
   * form (an NFD "café" finds "café").
   *
   * @throws {RangeError} if no value has the label
   */
  encode(label) {
    if (typeof label !== "string") throw new TypeError(`a label is a string, got ${typeof label}`);
    const value = this.#byLabel.get(label.normalize("NFC"));
    if (value === undefined) {
      throw new RangeError(`no value has the label ${quote(label)} in the dictionary ${this.#version}`);
    }
    return value;
  }

  /** The label of `value`, or its integer as text if it has none (as ldpflow shows it). */
  decode(value) {
    const label = this.#labels.get(toValue(value));
    return label ?? String(value);
  }

  /** The label of `value`, or undefined. */
  labelOf(value) { return this.#labels.get(toValue(value)); }

  /**
   * Refuse a domain that does not hold every labelled value.
   *
   * @throws {RangeError}
   */
  checkDomain(domainSize) {
    if (this.size > domainSize) {
      throw new RangeError(`${this.size} labels for a domain of ${domainSize} values`);
    }
    if (this.minDomainSize > domainSize) {
      throw new RangeError(`value ${this.minDomainSize - 1} is outside [0, ${domainSize})`);
    }
    return this;
  }

  /** The `[value, label]` pairs in value order. */
  entries() { return [...this.#labels.entries()]; }

  /** A label file's JSON object: `{"VALUE": label}` in value order. */
  toJSON() { return Object.fromEntries(this.entries().map(([v, l]) => [String(v), l])); }
}

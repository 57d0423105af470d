/**
 * The report envelope and its JSON-lines form, as ldpflow reads them
 * (`ldpflow/schemas/report.avsc`, `ldpflow/wire/formats.py`).
 *
 * One report is one JSON object on one line, fields in the schema's order, null fields left
 * out: `report_id`, `user_id`, `event_time` (milliseconds since the epoch), `oracle`,
 * `epsilon`, `domain_size` (heavy hitters: the number of groups), `hash_range` (olh/blh and
 * the heavy hitters' OLH components; cms/hcms: the sketch width `m`),
 * `num_hashes` (cms/hcms: `k`), then the payload: `value` (grr, hr, pgr; hcms: the coordinate
 * `l`), `bits` (oue/sue/ss/cms/mcm: hex of the packed bytes), `seed` (olh/blh/heavy hitters: the 64-bit
 * seed as a signed two's-complement integer) and `bucket`, `column` and `bit` (onebit;
 * cms/hcms: the hash function `j`, hcms's sign bit), then a heavy-hitter report's nested record
 * named after its protocol (`pem`, `spm`, `mcm`, `treehist`, `sfp`: the group, the protocol's
 * other payload fields, 64-bit seeds as signed longs, then its configuration).
 *
 * @module envelope
 */

import { HeavyHitterClient, USER_ID, toLong } from "./heavyHitters.js";

const PAYLOAD_ORDER = ["value", "bits", "seed", "bucket", "column", "bit"];
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

/** Lowercase hex of bytes. */
export function toHex(bytes) {
  let out = "";
  for (const byte of bytes) out += HEX[byte];
  return out;
}

/** A fresh random report id (128 bits from the platform CSPRNG, as hex). */
export function newReportId(cryptoImpl = globalThis.crypto) {
  const bytes = new Uint8Array(16);
  cryptoImpl.getRandomValues(bytes);
  return toHex(bytes);
}

function checkString(value, name) {
  if (typeof value !== "string" || value.length === 0) {
    throw new TypeError(`${name} must be a non-empty string, got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * The envelope of one report as an object of JSON-ready values in the wire's field order
 * (`seed` stays a BigInt, signed; `bits` becomes hex).
 *
 * @param {object} protocol the oracle (or `PrefixExtendingMethod`) that made the report
 * @param {object} report what its `perturb` returned
 * @param {object} meta
 * @param {string} meta.userId the pseudonymous, stable user id (heavy hitters: the one its group came from)
 * @param {string} [meta.reportId] unique per report; a redelivery carries the same id
 *   (default: a fresh random id)
 * @param {number} [meta.eventTime] milliseconds since the epoch (default: now)
 */
export function envelope(protocol, report, { userId, reportId, eventTime } = {}) {
  const record = {
    report_id: checkString(reportId ?? newReportId(), "reportId"),
    user_id: checkString(userId, "userId"),
    event_time: eventTime ?? Date.now(),
  };
  if (!Number.isSafeInteger(record.event_time)) {
    throw new TypeError(`eventTime must be an integer (milliseconds), got ${record.event_time}`);
  }
  Object.assign(record, protocol.envelopeParameters);
  const nested = protocol instanceof HeavyHitterClient;
  const expected = protocol.reportFields;
  const missing = expected.filter((name) => report?.[name] === undefined || report[name] === null);
  const foreign = PAYLOAD_ORDER.filter((name) => !expected.includes(name) && report?.[name] != null);
  if (missing.length || foreign.length) {
    throw new TypeError(`a ${protocol.name} report has the fields ${expected.join(", ")}; ` +
      `got ${Object.keys(report ?? {}).join(", ") || "none"}`);
  }
  const width = protocol.bitWidth ?? protocol.domainSize;
  if (report.bits !== undefined && report.bits.length !== Math.ceil(width / 8)) {
    const of = protocol.bitWidthName ?? (width === protocol.domainSize ? "domainSize" : "hashRange");
    throw new RangeError(`a ${protocol.name} report's bits must be ceil(${of} / 8) = ` +
      `${Math.ceil(width / 8)} bytes, got ${report.bits.length}`);
  }
  for (const name of PAYLOAD_ORDER) {
    if (report[name] === undefined || report[name] === null) continue;
    const value = report[name];
    if (name === "bits") record.bits = toHex(value);
    else if (name === "seed") record.seed = toLong(value);  // an Avro long
    else record[name] = value;
  }
  if (nested) {
    // A report of this user's own perturb() carries the id; another is hashed again.
    if (report[USER_ID] !== userId && protocol.groupOf(userId) !== report.group) {
      throw new RangeError(
        `the report's group ${report.group} is not the group of userId ${JSON.stringify(userId)}` +
        ` (${protocol.groupOf(userId)}): perturb with the user id that the envelope carries`);
    }
    // The nested record: its payload fields (64-bit seeds as longs), then the configuration.
    const inner = {};
    for (const name of protocol.nestedFields) {
      inner[name] = name.startsWith("seed") ? toLong(report[name]) : report[name];
    }
    record[protocol.name] = { ...inner, ...protocol.nestedParameters() };
  }
  return record;
}

const SAFE_STRING = /^[^"\\\u0000-\u001f\u007f-\uffff]*$/;

function jsonValue(value) {
  switch (typeof value) {
    case "bigint":
      return value.toString();
    case "number":
      if (!Number.isFinite(value)) throw new RangeError(`a report field must be finite, got ${value}`);
      return String(value);  // the shortest round trip, as JSON.stringify
    case "string":
      return SAFE_STRING.test(value) ? `"${value}"` : JSON.stringify(value);
    case "object":
      if (value !== null) {
        let out = "";
        for (const key in value) out += `${out ? "," : ""}"${key}":${jsonValue(value[key])}`;
        return `{${out}}`;
      }
    // falls through: null
    default:
      return JSON.stringify(value);
  }
}

/** One JSON line (with its newline) of an envelope from `envelope()`. */
export function recordToJsonLine(record) {
  return `${jsonValue(record)}\n`;
}

/** The JSON line of one report: `envelope()` then `recordToJsonLine()`. */
export function toJsonLine(protocol, report, meta) {
  return recordToJsonLine(envelope(protocol, report, meta));
}

/** Several JSON lines joined: the body of one POST or one Pub/Sub message. */
export function toJsonLines(records) {
  return records.map(recordToJsonLine).join("");
}

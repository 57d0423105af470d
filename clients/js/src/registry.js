/**
 * The registry keys of ldpflow and their client classes: the frequency oracles (`grr oue sue
 * olh blh hr ss onebit cms hcms pgr`, `makeOracle`) and the heavy-hitter protocols (`pem spm
 * mcm treehist sfp`, `makeHeavyHitters`).
 *
 * @module registry
 */

import { DirectEncoding } from "./grr.js";
import { HadamardResponse, OneBitHadamard } from "./hadamard.js";
import { MultipleChannelMethod } from "./mcm.js";
import { PrefixExtendingMethod } from "./pem.js";
import { SequenceFragmentPuzzle } from "./sfp.js";
import { SegmentPairsMethod } from "./spm.js";
import { TreeHist } from "./treehist.js";
import { BinaryLocalHashing, OptimizedLocalHashing } from "./localHashing.js";
import { ProjectiveGeometryResponse } from "./pgr.js";
import { CountMeanSketch, HadamardCountMeanSketch } from "./sketch.js";
import { SubsetSelection } from "./subset.js";
import { OptimizedUnaryEncoding, SymmetricUnaryEncoding } from "./unary.js";

export const ORACLES = Object.freeze({
  grr: DirectEncoding,
  oue: OptimizedUnaryEncoding,
  sue: SymmetricUnaryEncoding,
  olh: OptimizedLocalHashing,
  blh: BinaryLocalHashing,
  hr: HadamardResponse,
  ss: SubsetSelection,
  onebit: OneBitHadamard,
  cms: CountMeanSketch,
  hcms: HadamardCountMeanSketch,
  pgr: ProjectiveGeometryResponse,
});

/** The heavy-hitter protocols (`ldpflow heavy-hitters --protocol P`). */
export const HEAVY_HITTERS = Object.freeze({
  pem: PrefixExtendingMethod,
  spm: SegmentPairsMethod,
  mcm: MultipleChannelMethod,
  treehist: TreeHist,
  sfp: SequenceFragmentPuzzle,
});

const HASH_RANGE_ORACLES = ["olh", "blh", "cms", "hcms"];
const NUM_HASHES_ORACLES = ["cms", "hcms"];

const given = (value) => value !== undefined && value !== null;

/**
 * The client of oracle `name` with its parameters: `makeOracle("olh", {epsilon: 1,
 * domainSize: 1024})`. `hashRange` applies to olh, blh, cms and hcms only (the sketches:
 * the width `m`, default 1024); `numHashes` (`k`, default 256) to cms and hcms only.
 */
export function makeOracle(name, parameters) {
  const Oracle = Object.hasOwn(ORACLES, name) ? ORACLES[name] : undefined;
  if (!Oracle) {
    const hint = Object.hasOwn(HEAVY_HITTERS, name) ? ` (${name} is a heavy-hitter protocol: ` +
      "use makeHeavyHitters)" : "";
    throw new RangeError(`oracle must be one of ${Object.keys(ORACLES).join(" ")}, got ${name}${hint}`);
  }
  const { hashRange, numHashes, ...rest } = parameters ?? {};
  if (given(hashRange) && !HASH_RANGE_ORACLES.includes(name)) {
    throw new RangeError(`hashRange applies to olh, blh, cms and hcms only, got it for ${name}`);
  }
  if (given(numHashes) && !NUM_HASHES_ORACLES.includes(name)) {
    throw new RangeError(`numHashes applies to cms and hcms only, got it for ${name}`);
  }
  return new Oracle({ ...rest, ...(given(hashRange) ? { hashRange } : {}),
    ...(given(numHashes) ? { numHashes } : {}) });
}

/**
 * The client of heavy-hitter protocol `name` with its configuration, in the client's names
 * (`makeHeavyHitters("spm", {topK: 8, valueBits: 32, epsilon: 4})`): the flags of `ldpflow
 * heavy-hitters --protocol NAME`, which every client and the server must agree on. Each
 * protocol validates its options as ldpflow does and refuses an option it does not have.
 */
export function makeHeavyHitters(name, parameters) {
  const Protocol = Object.hasOwn(HEAVY_HITTERS, name) ? HEAVY_HITTERS[name] : undefined;
  if (!Protocol) {
    const hint = Object.hasOwn(ORACLES, name) ? ` (${name} is a frequency oracle: use makeOracle)` : "";
    throw new RangeError(
      `protocol must be one of ${Object.keys(HEAVY_HITTERS).join(" ")}, got ${name}${hint}`);
  }
  return new Protocol(parameters ?? {});
}

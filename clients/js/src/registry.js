/**
 * The registry keys of ldpflow (`grr oue sue olh blh hr ss onebit cms hcms pgr`) and their
 * client classes.
 *
 * @module registry
 */

import { DirectEncoding } from "./grr.js";
import { HadamardResponse, OneBitHadamard } from "./hadamard.js";
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
    throw new RangeError(`oracle must be one of ${Object.keys(ORACLES).join(" ")}, got ${name}`);
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

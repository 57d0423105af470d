/**
 * The registry keys of ldpflow (`grr oue sue olh blh hr ss onebit`) and their client classes.
 *
 * @module registry
 */

import { DirectEncoding } from "./grr.js";
import { HadamardResponse, OneBitHadamard } from "./hadamard.js";
import { BinaryLocalHashing, OptimizedLocalHashing } from "./localHashing.js";
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
});

/**
 * The client of oracle `name` with its parameters: `makeOracle("olh", {epsilon: 1,
 * domainSize: 1024})`. `hashRange` applies to olh and blh only.
 */
export function makeOracle(name, parameters) {
  const Oracle = Object.hasOwn(ORACLES, name) ? ORACLES[name] : undefined;
  if (!Oracle) {
    throw new RangeError(`oracle must be one of ${Object.keys(ORACLES).join(" ")}, got ${name}`);
  }
  const { hashRange, ...rest } = parameters ?? {};
  if (hashRange !== undefined && hashRange !== null && name !== "olh" && name !== "blh") {
    throw new RangeError(`hashRange applies to olh and blh only, got it for ${name}`);
  }
  return new Oracle(hashRange === undefined || hashRange === null ? rest : parameters);
}

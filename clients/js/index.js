/**
 * ldpflow-client: the client side of ldpflow's local differential privacy protocols.
 *
 * Perturb a true value on the device with one of the frequency oracles (`grr oue sue olh blh
 * hr ss onebit cms hcms pgr`) or with a heavy-hitter protocol (`pem spm mcm treehist sfp`),
 * wrap the report in ldpflow's envelope and send it as one JSON line. A categorical string is
 * encoded to its value through a `ValueLabels` dictionary shared with the server. Randomness comes from `crypto.getRandomValues`
 * unless a test passes a seeded `SplitMix64TestingRandom`.
 *
 * @module ldpflow-client
 */

export { VERSION } from "./src/version.js";
export { HEAVY_HITTERS, makeHeavyHitters, makeOracle, ORACLES } from "./src/registry.js";
export { FrequencyOracle } from "./src/oracle.js";
export { DirectEncoding } from "./src/grr.js";
export { OptimizedUnaryEncoding, SymmetricUnaryEncoding, UnaryEncoding } from "./src/unary.js";
export {
  BinaryLocalHashing, LocalHashing, OptimizedLocalHashing,
} from "./src/localHashing.js";
export { HadamardResponse, OneBitHadamard, hadamardOrder } from "./src/hadamard.js";
export { SubsetSelection } from "./src/subset.js";
export {
  ProjectiveGeometryResponse, chooseGeometry, geometryConstants,
} from "./src/pgr.js";
export {
  CountMeanSketch, HadamardCountMeanSketch, Sketch, sketchSeeds,
} from "./src/sketch.js";
export {
  DEFAULT_GROUP_HASH, DEFAULT_QUERY_LIMIT, GROUP_HASHES, GROUP_HASH_KEY, HeavyHitterClient,
  assignGroup, costAwareHashRange, keyedStringHash, userKey,
} from "./src/heavyHitters.js";
export { PrefixExtendingMethod } from "./src/pem.js";
export { SegmentPairsMethod } from "./src/spm.js";
export { MultipleChannelMethod } from "./src/mcm.js";
export { TreeHist } from "./src/treehist.js";
export { SequenceFragmentPuzzle } from "./src/sfp.js";
export { encodeValue, CODECS } from "./src/codecs.js";
export {
  VALUE_LABELS_VERSION_PREFIX, ValueLabels, canonicalLabelBytes, labelsVersion,
} from "./src/labels.js";
export {
  hashValue, optimalHashRange, splitmix64Mix, splitmix64Stream,
} from "./src/hashing.js";
export {
  RandomSource, SecureRandom, SplitMix64TestingRandom,
} from "./src/random.js";
export {
  envelope, newReportId, recordToJsonLine, toJsonLine, toJsonLines,
} from "./src/envelope.js";

// Type declarations of ldpflow-client's public API (index.js). The same file serves `import`
// (index.d.ts) and `require` (dist/index.d.cts); test/package.test.js checks that it declares
// exactly the names the package exports and, with TypeScript, that a consumer type-checks.

/** The Python package's version this client speaks to. */
export declare const VERSION: string;

// ---------------------------------------------------------------- randomness

/** Uniform random words and the exact distributions ldpflow derives from them. */
export declare class RandomSource {
  /** Whether this source is fit for client-side (production) perturbation. */
  get secure(): boolean;
  /** A uniform 64-bit word in `[0, 2**64)`. */
  nextWord(): bigint;
  /** The next word as `[high, low]` 32-bit halves, in a buffer the next call overwrites. */
  nextHalves(): Uint32Array;
  /** A uniform float on the 2**-53 grid of [0, 1). */
  uniform(): number;
  bernoulli(p: number): boolean;
  /** A uniform integer in `[0, bound)`, `bound` in `[1, 2**32]`. */
  below(bound: number): number;
  /** `size` uniform integers in `[0, bound)`, drawn as ldpflow's `below(bound, size)`. */
  belowArray(bound: number, size: number): number[];
  /** `nbits` independent Bernoulli(p) bits, packed little-endian. */
  bernoulliBits(p: number, nbits: number): Uint8Array;
}

/** `crypto.getRandomValues` (the platform CSPRNG): the default of every `perturb`. */
export declare class SecureRandom extends RandomSource {
  constructor(cryptoImpl?: { getRandomValues<T extends ArrayBufferView>(array: T): T });
}

/** The splitmix64 stream from a seed: reproducible, NOT SECURE (tests and simulation only). */
export declare class SplitMix64TestingRandom extends RandomSource {
  constructor(seed: number | bigint | string);
  get state(): bigint;
}

// ---------------------------------------------------------------- hashing and codecs

export declare function hashValue(seed: bigint | number | string, value: bigint | number,
  valueBits: number, hashRange: number): number;
export declare function optimalHashRange(epsilon: number): number;
export declare function splitmix64Mix(z: bigint): bigint;
export declare function splitmix64Stream(seed: bigint, count: number): bigint[];

export type Codec = "int" | "string";
export declare const CODECS: readonly Codec[];
/** The `bits`-bit code (a BigInt) of a value under a codec. */
export declare function encodeValue(codec: Codec, value: number | bigint | string, bits: number,
  options?: { truncate?: boolean }): bigint;

// ---------------------------------------------------------------- value labels

/** `"blake2b-128:"`, the prefix of a dictionary's version. */
export declare const VALUE_LABELS_VERSION_PREFIX: string;
/** The bytes a dictionary's version hashes: compact JSON `[[value, label], ...]` by value. */
export declare function canonicalLabelBytes(pairs: Iterable<[number, string]>): Uint8Array;
/** The version of a dictionary: `blake2b-128:` and 32 hex digits (ldpflow's, for equal labels). */
export declare function labelsVersion(pairs: Iterable<[number, string]>): string;
/**
 * A label dictionary shared with the server (`ldpflow estimate --value_labels FILE`): a
 * categorical string is sent as the value its label has.
 */
export declare class ValueLabels {
  /** From `[value, label]` pairs, an object `{"3": "red"}`, a Map, or an array of labels. */
  constructor(source: Array<[number | string, string]> | Record<string, string>
    | Map<number, string> | Array<string | null>);
  /** The content hash naming the dictionary, as ldpflow records it in the run block. */
  readonly version: string;
  /** How many values have a label. */
  readonly size: number;
  /** The largest labelled value + 1. */
  readonly minDomainSize: number;
  /** The value of a label (looked up in NFC form); a RangeError if none has it. */
  encode(label: string): number;
  /** The label of a value, or its integer as text. */
  decode(value: number): string;
  /** The label of a value, or undefined. */
  labelOf(value: number): string | undefined;
  /** Throws a RangeError if a labelled value is outside [0, domainSize). */
  checkDomain(domainSize: number): this;
  /** The `[value, label]` pairs in value order. */
  entries(): Array<[number, string]>;
  /** `{"VALUE": label}`: a label file's JSON. */
  toJSON(): Record<string, string>;
}

// ---------------------------------------------------------------- frequency oracles

/** The payload of one frequency-oracle report (the fields its oracle sends). */
export interface OracleReport {
  value?: number;
  bits?: Uint8Array;
  seed?: bigint;
  bucket?: number;
  column?: number;
  bit?: number;
}

export interface OracleOptions {
  epsilon: number;
  domainSize: number;
}

/** The envelope's parameter fields of a protocol, in the wire's names. */
export interface EnvelopeParameters {
  oracle: string;
  epsilon: number;
  domain_size: number;
  hash_range?: number;
  num_hashes?: number;
}

export declare abstract class FrequencyOracle {
  constructor(options: OracleOptions);
  readonly epsilon: number;
  readonly domainSize: number;
  get name(): OracleName;
  get reportFields(): string[];
  get bitWidth(): number;
  get e(): number;
  get envelopeParameters(): EnvelopeParameters;
  get p(): number | null;
  get q(): number | null;
  variance(n: number, frequency?: number): number;
  perturb(value: number, rng?: RandomSource, options?: { column?: number }): OracleReport;
  supports(report: OracleReport, value: number): boolean;
}

export declare class DirectEncoding extends FrequencyOracle {
  perturb(value: number, rng?: RandomSource): { value: number };
}
export declare class UnaryEncoding extends FrequencyOracle {
  perturb(value: number, rng?: RandomSource): { bits: Uint8Array };
}
export declare class OptimizedUnaryEncoding extends UnaryEncoding {}
export declare class SymmetricUnaryEncoding extends UnaryEncoding {}

export interface LocalHashingOptions extends OracleOptions {
  hashRange?: number;
}
export declare class LocalHashing extends FrequencyOracle {
  constructor(options: LocalHashingOptions);
  readonly hashRange: number;
  get valueBits(): number;
  perturb(value: number, rng?: RandomSource): { seed: bigint; bucket: number };
}
export declare class OptimizedLocalHashing extends LocalHashing {}
export declare class BinaryLocalHashing extends LocalHashing {}

export declare function hadamardOrder(domainSize: number): number;
export declare class HadamardResponse extends FrequencyOracle {
  get order(): number;
  perturb(value: number, rng?: RandomSource): { value: number };
}
export declare class OneBitHadamard extends FrequencyOracle {
  get order(): number;
  /** The user's column, in `[0, order)`, is assigned by the collector. */
  perturb(value: number, rng: RandomSource | undefined, options: { column: number }):
    { column: number; bit: number };
}
export declare class SubsetSelection extends FrequencyOracle {
  get subsetSize(): number;
  perturb(value: number, rng?: RandomSource): { bits: Uint8Array };
}

export declare function chooseGeometry(epsilon: number, domainSize: number): [number, number];
export declare function geometryConstants(q: number, t: number, epsilon: number):
  { K: number; h: number; h2: number; p: number; q: number };
export declare class ProjectiveGeometryResponse extends FrequencyOracle {
  get geometry(): [number, number];
  get fieldSize(): number;
  get dimension(): number;
  get order(): number;
  get reportBits(): number;
  vector(index: number): number[];
  perturb(value: number, rng?: RandomSource): { value: number };
}

export interface SketchOptions extends OracleOptions {
  /** `m`, a power of two (default 1024). */
  hashRange?: number;
  /** `k` (default 256). */
  numHashes?: number;
}
export declare function sketchSeeds(numHashes: number): bigint[];
export declare class Sketch extends FrequencyOracle {
  constructor(options: SketchOptions);
  readonly hashRange: number;
  readonly numHashes: number;
  get valueBits(): number;
  get seeds(): bigint[];
  /** `h_j(value)`. */
  bucket(j: number, value: number): number;
  collisionVariance(sumOfSquares: number): number;
}
export declare class CountMeanSketch extends Sketch {
  perturb(value: number, rng?: RandomSource): { column: number; bits: Uint8Array };
}
export declare class HadamardCountMeanSketch extends Sketch {
  perturb(value: number, rng?: RandomSource): { column: number; value: number; bit: number };
}

export type OracleName = "grr" | "oue" | "sue" | "olh" | "blh" | "hr" | "ss" | "onebit" | "cms"
  | "hcms" | "pgr";
export declare const ORACLES: Readonly<Record<OracleName, new (options: SketchOptions) => FrequencyOracle>>;
/** The client of oracle `name`: `makeOracle("olh", {epsilon: 1, domainSize: 1024})`. */
export declare function makeOracle(name: OracleName, parameters: SketchOptions): FrequencyOracle;

// ---------------------------------------------------------------- heavy hitters

export declare const DEFAULT_QUERY_LIMIT: number;
/** The group hash versions: 1, BLAKE2b-64; 2, the keyed string hash (`ldpflow-grouphash-2`). */
export type GroupHash = 1 | 2;
export declare const GROUP_HASHES: readonly GroupHash[];
/** The version this client writes unless told otherwise: 2. */
export declare const DEFAULT_GROUP_HASH: GroupHash;
/** `K` of version 2 (public): the ASCII bytes `ldpgrp02`, little-endian. */
export declare const GROUP_HASH_KEY: bigint;
/** The keyed 64-bit string hash `S_K` of bytes (docs/spec/heavy_hitters.md, "Group hash"). */
export declare function keyedStringHash(bytes: Uint8Array, key: bigint): bigint;
/** The 64-bit key of a user id by group hash version (default 2). */
export declare function userKey(userId: string, groupHash?: GroupHash): bigint;
/** The group in `[0, numGroups)` of a user, by group hash version (default 2). */
export declare function assignGroup(userId: string, numGroups: number, groupHash?: GroupHash): number;
/** ldpflow's cost-aware OLH hash range (TreeHist's and SFP's default). */
export declare function costAwareHashRange(epsilon: number,
  options?: { tolerance?: number; maxHashRange?: number }): number;

/** One heavy-hitter report: its group, its OLH components (seeds unsigned) and MCM's bits. */
export interface HeavyHitterReport {
  group: number;
  seed: bigint;
  bucket: number;
  prefix_bits?: number;
  seed_a?: bigint;
  bucket_a?: number;
  seed_b?: bigint;
  bucket_b?: number;
  seed_piece?: bigint;
  bucket_piece?: number;
  bits?: Uint8Array;
}

export interface HeavyHitterOptions {
  topK: number;
  valueBits: number;
  epsilon: number;
  codec?: Codec;
  /** The group hash version its reports carry (default 2). */
  groupHash?: GroupHash;
}

export declare abstract class HeavyHitterClient {
  readonly topK: number;
  readonly valueBits: number;
  readonly epsilon: number;
  readonly codec: Codec;
  readonly groupHash: GroupHash;
  readonly numGroups: number;
  readonly hashRange: number;
  get name(): HeavyHitterName;
  get reportFields(): string[];
  get nestedFields(): string[];
  get envelopeParameters(): EnvelopeParameters;
  get p(): number;
  nestedParameters(): Record<string, number | bigint | string>;
  groupOf(userId: string): number;
  /** One user's report; `userId` fixes its group and must travel in the envelope. */
  perturb(value: number | bigint | string, userId: string, rng?: RandomSource,
    options?: { truncate?: boolean }): HeavyHitterReport;
}

export interface PemOptions extends HeavyHitterOptions {
  queryLimit?: number;
  startBits?: number;
  stepBits?: number;
  numGroups?: number;
  hashRange?: number;
}
export declare class PrefixExtendingMethod extends HeavyHitterClient {
  constructor(options: PemOptions);
  readonly queryLimit: number;
  readonly startBits: number;
  readonly stepBits: number;
  get prefixBits(): number[];
  get q(): number;
  variance(n: number, frequency?: number): number;
}

export interface SpmOptions extends HeavyHitterOptions {
  numSegments?: number;
  segmentTop?: number;
  queryLimit?: number;
}
export declare class SegmentPairsMethod extends HeavyHitterClient {
  constructor(options: SpmOptions);
  readonly numSegments: number;
  readonly segmentTop: number;
  readonly queryLimit: number;
  /** The segment pairs `[i, j]`, `i < j`: group `g` reports `pairs[g]`. */
  readonly pairs: ReadonlyArray<readonly [number, number]>;
  /** `[shift, bits]` of each segment. */
  readonly segmentBounds: ReadonlyArray<readonly [number, number]>;
  get componentEpsilon(): number;
  segment(code: bigint, index: number): bigint;
}

export interface McmOptions extends HeavyHitterOptions {
  numChannels?: number;
  queryLimit?: number;
  channelSeed?: number | bigint | string;
}
export declare class MultipleChannelMethod extends HeavyHitterClient {
  constructor(options: McmOptions);
  readonly numChannels: number;
  readonly queryLimit: number;
  readonly channelSeed: bigint;
  get bitWidth(): number;
  get flipProbability(): number;
  channelOf(code: bigint): number;
}

export interface TreeHistOptions extends HeavyHitterOptions {
  stepBits?: number;
  hashRange?: number;
}
export declare class TreeHist extends HeavyHitterClient {
  constructor(options: TreeHistOptions);
  readonly stepBits: number;
  /** The prefix length each group reports (the last group: the full value). */
  readonly groupBits: readonly number[];
}

export interface SfpOptions extends HeavyHitterOptions {
  fragmentBits?: number;
  hashBits?: number;
  queryLimit?: number;
  hashSeed?: number | bigint | string;
}
export declare class SequenceFragmentPuzzle extends HeavyHitterClient {
  constructor(options: SfpOptions);
  readonly fragmentBits: number;
  readonly hashBits: number;
  readonly queryLimit: number;
  readonly hashSeed: bigint;
  get positions(): number;
  get pieceBits(): number;
  valueHash(code: bigint): bigint;
  fragment(code: bigint, position: number): bigint;
}

export type HeavyHitterName = "pem" | "spm" | "mcm" | "treehist" | "sfp";
export interface HeavyHitterOptionsOf {
  pem: PemOptions;
  spm: SpmOptions;
  mcm: McmOptions;
  treehist: TreeHistOptions;
  sfp: SfpOptions;
}
export interface HeavyHitterClassOf {
  pem: PrefixExtendingMethod;
  spm: SegmentPairsMethod;
  mcm: MultipleChannelMethod;
  treehist: TreeHist;
  sfp: SequenceFragmentPuzzle;
}
export declare const HEAVY_HITTERS: Readonly<{
  [P in HeavyHitterName]: new (options: HeavyHitterOptionsOf[P]) => HeavyHitterClassOf[P];
}>;
/** The client of protocol `name`: the flags of `ldpflow heavy-hitters --protocol NAME`. */
export declare function makeHeavyHitters<P extends HeavyHitterName>(name: P,
  parameters: HeavyHitterOptionsOf[P]): HeavyHitterClassOf[P];

// ---------------------------------------------------------------- the envelope

export interface EnvelopeMeta {
  /** The pseudonymous, stable user id (heavy hitters: the one the report's group came from). */
  userId: string;
  /** Unique per report; a redelivery carries the same id (default: a fresh random id). */
  reportId?: string;
  /** Milliseconds since the epoch (default: now). */
  eventTime?: number;
}
export type Protocol = FrequencyOracle | HeavyHitterClient;
/** One report's envelope: JSON-ready fields in the wire's order (`seed` a signed BigInt). */
export type EnvelopeRecord = Record<string, unknown>;
export declare function envelope(protocol: Protocol, report: OracleReport | HeavyHitterReport,
  meta: EnvelopeMeta): EnvelopeRecord;
export declare function recordToJsonLine(record: EnvelopeRecord): string;
export declare function toJsonLine(protocol: Protocol, report: OracleReport | HeavyHitterReport,
  meta: EnvelopeMeta): string;
export declare function toJsonLines(records: EnvelopeRecord[]): string;
/** A fresh random report id: 128 bits of the platform CSPRNG, as hex. */
export declare function newReportId(cryptoImpl?: { getRandomValues<T extends ArrayBufferView>(array: T): T }): string;

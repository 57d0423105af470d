// Value labels: the dictionary the client shares with ldpflow, its version against the shared
// vectors (docs/testvectors/value_labels.json), and end to end: strings encoded through the
// dictionary, estimated by `ldpflow estimate --value_labels`, named by the same labels.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, test } from "node:test";
import { promisify } from "node:util";

import {
  SplitMix64TestingRandom, ValueLabels, canonicalLabelBytes, labelsVersion, makeOracle,
  toJsonLine,
} from "../index.js";
import { REPO_DIR, readVectors } from "../testing/helpers.js";

test("the version of every shared case is ldpflow's, whatever the order of the pairs", () => {
  const { cases } = readVectors("value_labels.json");
  assert.ok(cases.length >= 6);
  for (const c of cases) {
    const labels = new ValueLabels(c.pairs);
    assert.equal(new TextDecoder().decode(canonicalLabelBytes(labels.entries())), c.canonical, c.case);
    assert.equal(labels.version, c.version, c.case);
    assert.equal(labelsVersion([...c.pairs].reverse()), c.version, c.case);
    for (const [label, value] of c.encode) assert.equal(labels.encode(label), value, c.case);
    // the label file's JSON reads back as the same dictionary
    assert.equal(new ValueLabels(JSON.parse(JSON.stringify(labels))).version, c.version);
  }
});

test("encode and decode, NFC lookup, unlabelled values as integers", () => {
  const labels = new ValueLabels({ 0: "caf\u00e9", 2: "red, bright" });
  assert.equal(labels.encode("cafe\u0301"), 0);  // NFD finds the NFC label
  assert.equal(labels.decode(2), "red, bright");
  assert.equal(labels.decode(1), "1");
  assert.equal(labels.labelOf(1), undefined);
  assert.equal(labels.minDomainSize, 3);
  assert.throws(() => labels.encode("blue"), /no value has the label "blue"/);
  assert.throws(() => labels.checkDomain(2), /value 2 is outside \[0, 2\)/);
  assert.equal(new ValueLabels(["a", null, "c"]).decode(2), "c");
  // white space is Unicode's, as ldpflow's: U+001C is a label, U+FEFF too
  assert.equal(new ValueLabels([[0, "\x1c"], [1, "\ufeff"]]).size, 2);
});

test("a bad dictionary is refused with the reason", () => {
  const cases = [
    [[[0, "a"], [0, "b"]], /value 0 is labelled twice/],
    [[[-1, "a"]], /value -1 is negative/],
    [[[1.5, "a"]], /values must be integers/],
    [{ x: "a" }, /the value "x" is not an integer/],
    [[[0, "  "]], /the label of value 0 is empty/],
    [[[0, "\u3000\u2028\x85"]], /the label of value 0 is empty/],
    [[[0, "same"], [1, "same"]], /values 0 and 1 have the same label/],
    [[[0, "caf\u00e9"], [1, "cafe\u0301"]], /equal after NFC normalisation/],
    [[[0, "bad\ud800"]], /lone surrogate/],
    [[[0, 7]], /must be a string/],
  ];
  for (const [source, message] of cases) assert.throws(() => new ValueLabels(source), message);
});

const VENV_BIN = process.env.LDPFLOW_VENV_BIN ?? path.join(REPO_DIR, ".venv", "bin");
const LDPFLOW = path.join(VENV_BIN, "ldpflow");
const SKIP = fs.existsSync(LDPFLOW) ? false
  : `the Python venv is absent (no ${LDPFLOW}): run ./dev setup for the end-to-end tests`;

describe("categorical strings through the dictionary, end to end", { skip: SKIP }, () => {
  const CATEGORIES = ["caf\u00e9", "\u6771\u4eac", "\u{1F600} smile", "a, b", "q\"uote",
    "https://example.org/x?y=1", "plain", "last"];
  const SHARES = [0.4, 0.2, 0.12, 0.1, 0.08, 0.05, 0.03, 0.02];
  const USERS = 4000;

  test("ldpflow names the estimates by the client's labels and checks the version", async () => {
    const work = fs.mkdtempSync(path.join(os.tmpdir(), "ldpflow-js-labels-"));
    const labels = new ValueLabels(CATEGORIES.map((label, value) => [value, label]));
    fs.writeFileSync(path.join(work, "labels.json"), JSON.stringify(labels));
    const oracle = makeOracle("grr", { epsilon: 4, domainSize: labels.checkDomain(8).minDomainSize });
    const rng = new SplitMix64TestingRandom(7);
    let lines = "";
    let user = 0;
    SHARES.forEach((share, i) => {
      for (let k = 0; k < share * USERS; k++, user++) {
        // what the device holds is the string (here in NFD where it has one)
        const value = labels.encode(CATEGORIES[i].normalize("NFD"));
        lines += toJsonLine(oracle, oracle.perturb(value, rng),
          { userId: `u${user}`, reportId: `r${user}`, eventTime: 0 });
      }
    });
    fs.writeFileSync(path.join(work, "reports.jsonl"), lines);
    const run = promisify(execFile);
    const base = ["estimate", "--input", path.join(work, "reports.jsonl"), "--methods", "base",
      "--value_labels", path.join(work, "labels.json")];
    await run(LDPFLOW, [...base, "--output", path.join(work, "est"), "--format", "csv",
      "--expect_value_labels", labels.version], { timeout: 240000 });
    const document = JSON.parse(fs.readFileSync(path.join(work, "est", "estimates.json"), "utf8"));
    assert.equal(document.run.value_labels.version, labels.version);
    const [result] = document.results;
    assert.equal(result.n, user);
    assert.deepEqual(result.top.slice(0, 2).map((e) => e.label), [CATEGORIES[0], CATEGORIES[1]]);
    const csv = fs.readFileSync(path.join(work, "est", "estimates.csv"), "utf8");
    assert.ok(csv.includes(',"a, b",base,') && csv.includes(',"q""uote",base,'), csv.slice(0, 400));
    // a dictionary other than the clients': a one-line usage error, exit 2, nothing written
    await assert.rejects(run(LDPFLOW, [...base, "--output", path.join(work, "other"),
      "--expect_value_labels", labelsVersion([[0, "other"]])], { timeout: 240000 }),
    (error) => error.code === 2 && /but the clients encoded with/.test(error.stderr));
    assert.ok(!fs.existsSync(path.join(work, "other", "estimates.json")));
    fs.rmSync(work, { recursive: true, force: true });
  });
});

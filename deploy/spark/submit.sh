#!/usr/bin/env bash
# ldpflow estimate on a Spark cluster (the job plan, --engine spark: docs/engines.md):
#   deploy/spark/submit.sh MASTER_URL --input ... --output ... [estimate flags]
# e.g. deploy/spark/submit.sh spark://HOST:7077 --input '/shared/reports/*.parquet' \
#        --output /shared/est
# The executors need ldpflow's dependencies (pip install 'ldpflow[spark]' there, or numpy,
# scipy, pyarrow, fastavro, polars, cramjam); ldpflow itself reaches them as a zip
# (--py-files here; the job also adds it with SparkContext.addPyFile). The submitting
# machine needs ldpflow[beam,spark] (the CLI parses its flags with Beam's options) and Java.
# PYTHON: the interpreter that has them (default python3).
set -euo pipefail
master=${1:?usage: submit.sh MASTER_URL ESTIMATE_FLAGS...}
shift
export PYSPARK_DRIVER_PYTHON=${PYSPARK_DRIVER_PYTHON:-${PYTHON:-python3}}
zip=$("${PYTHON:-python3}" -c 'from ldpflow.engines.package import package_zip; print(package_zip())')
cli=$("${PYTHON:-python3}" -c 'import ldpflow.pipelines.cli as c; print(c.__file__)')
exec spark-submit --master "$master" --py-files "$zip" "$cli" estimate --engine spark "$@"

#!/usr/bin/env bash
# Run an ldpflow job with the runner flags of a flag file:
#   deploy/launch.sh FLAGS_FILE JOB [JOB FLAGS...]
#   deploy/launch.sh deploy/dataflow/batch.flags estimate --input='gs://B/r/*.avro' --output=gs://B/e
# A flag file holds one flag per line; blank lines and lines starting with # are skipped;
# ${NAME} is replaced by the environment variable NAME (unset: an error, nothing runs).
# LDPFLOW_SETUP_FILE defaults to this checkout's setup.py; LDPFLOW (default: ldpflow) is the
# command run, e.g. LDPFLOW=echo to print the command line instead.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 2 ]; then
  sed -n '2,8p' "$0" >&2
  exit 2
fi
file=$1
job=$2
shift 2
export LDPFLOW_SETUP_FILE=${LDPFLOW_SETUP_FILE:-$(dirname "$here")/setup.py}
pattern='^([^$]*)\$\{([A-Za-z_][A-Za-z0-9_]*)\}(.*)$'
flags=()
while IFS= read -r line || [ -n "$line" ]; do
  line=${line#"${line%%[![:space:]]*}"}   # strip leading blanks
  line=${line%"${line##*[![:space:]]}"}   # strip trailing blanks
  if [ -z "$line" ] || [ "${line:0:1}" = "#" ]; then
    continue
  fi
  expanded=""
  while [[ $line =~ $pattern ]]; do
    name=${BASH_REMATCH[2]}
    if [ -z "${!name+set}" ]; then
      echo "deploy/launch.sh: $file needs the environment variable $name" >&2
      exit 2
    fi
    expanded+="${BASH_REMATCH[1]}${!name}"
    line=${BASH_REMATCH[3]}
  done
  flags+=("$expanded$line")
done < "$file"
exec ${LDPFLOW:-ldpflow} "$job" "${flags[@]}" "$@"

#!/usr/bin/env bash
# Daily heavy-hitter discovery on Dataflow: deploy the Workflow that launches the
# heavy-hitters Flex Template over yesterday's report files, and a Cloud Scheduler job that
# starts it every day at 02:30 UTC (late files of the day have 2.5 hours to arrive).
# Needs: PROJECT, REGION, BUCKET, VERSION (of the template, see dataflow/flex/build.sh),
# HH_K, HH_BITS, HH_EPSILON, HH_CODEC (the clients' PEM configuration), SERVICE_ACCOUNT
# (an e-mail: roles/workflows.invoker for the scheduler, roles/dataflow.developer and
# roles/iam.serviceAccountUser for the workflow). Optional: SCHEDULE (cron, default
# "30 2 * * *"), TIME_ZONE (of the schedule, default Etc/UTC).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${PROJECT:?}" "${REGION:?}" "${BUCKET:?}" "${VERSION:?}" "${SERVICE_ACCOUNT:?}"
: "${HH_K:?}" "${HH_BITS:?}" "${HH_EPSILON:?}" "${HH_CODEC:?}"
name=ldpflow-heavy-hitters-daily

gcloud workflows deploy "$name" --project="$PROJECT" --location="$REGION" \
    --source="$here/heavy-hitters-workflow.yaml" --service-account="$SERVICE_ACCOUNT"

# The executions API takes the workflow's argument as a JSON string inside the body.
body=$(envsubst < "$here/heavy-hitters-args.json" \
       | python3 -c 'import json, sys; print(json.dumps({"argument": json.dumps(json.load(sys.stdin))}))')
gcloud scheduler jobs create http "$name" --project="$PROJECT" --location="$REGION" \
    --schedule="${SCHEDULE:-30 2 * * *}" --time-zone="${TIME_ZONE:-Etc/UTC}" \
    --uri="https://workflowexecutions.googleapis.com/v1/projects/$PROJECT/locations/$REGION/workflows/$name/executions" \
    --http-method=POST --headers=Content-Type=application/json \
    --message-body="$body" \
    --oauth-service-account-email="$SERVICE_ACCOUNT" \
    --oauth-token-scope=https://www.googleapis.com/auth/cloud-platform

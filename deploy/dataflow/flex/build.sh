#!/usr/bin/env bash
# Build and push the ldpflow worker image and the Flex Template launcher images of estimate,
# stream and heavy-hitters, then write each template's spec (image + metadata) to
#   gs://$BUCKET/templates/ldpflow-JOB-VERSION.json
# Needs: PROJECT, REGION, BUCKET, REPOSITORY (an Artifact Registry Docker repository in
# REGION), docker with BuildKit (for the per-Dockerfile .dockerignore files) and gcloud,
# authenticated (gcloud auth configure-docker "$REGION-docker.pkg.dev").
# SETUP_FILE= (empty) builds launchers that do not stage the package: launch those with
# sdk_container_image=the worker image.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
: "${PROJECT:?}" "${REGION:?}" "${BUCKET:?}" "${REPOSITORY:?}"
version=$(sed -n 's/^ *version="\([^"]*\)",$/\1/p' "$root/setup.py")
registry="$REGION-docker.pkg.dev/$PROJECT/$REPOSITORY"
export DOCKER_BUILDKIT=1

docker build -f "$root/deploy/docker/Dockerfile" -t "$registry/worker:$version" "$root"
docker push "$registry/worker:$version"

for job in estimate stream heavy-hitters; do
  image="$registry/launcher-$job:$version"
  docker build -f "$root/deploy/dataflow/flex/Dockerfile" --build-arg "JOB=$job" \
      --build-arg "SETUP_FILE=${SETUP_FILE-/template/setup.py}" -t "$image" "$root"
  docker push "$image"
  extra=()
  if [ "$job" = stream ]; then
    extra=(--enable-streaming-engine)
  fi
  gcloud dataflow flex-template build "gs://$BUCKET/templates/ldpflow-$job-$version.json" \
      --project="$PROJECT" --image="$image" --sdk-language=PYTHON \
      --metadata-file="$root/deploy/dataflow/flex/$job-metadata.json" \
      --temp-location="gs://$BUCKET/tmp" --staging-location="gs://$BUCKET/staging" \
      "${extra[@]}"
done
echo "worker image: $registry/worker:$version"
echo "templates:    gs://$BUCKET/templates/ldpflow-{estimate,stream,heavy-hitters}-$version.json"

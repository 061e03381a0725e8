#!/bin/sh
# Builds the image deploy/kubernetes/gpuslack.yaml names: ghcr.io/gpuslack/gpuslack:VERSION,
# VERSION being the gpuslack package's in Cargo.toml. From anywhere in the repository:
#
#   deploy/container/build.sh                 # docker build -f deploy/container/Dockerfile -t IMAGE .
#   deploy/container/build.sh --print         # the image name only
#   deploy/container/build.sh --push          # build, then docker push
#
# GPUSLACK_IMAGE (default ghcr.io/gpuslack/gpuslack) and GPUSLACK_TAG (default VERSION) name
# another registry or tag; change the DaemonSet's `image:` to match. DOCKER=podman works too.
# Further arguments go to `docker build` (e.g. --platform linux/amd64). .dockerignore keeps
# target/ and .git out of the build context.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
version=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
if [ -z "$version" ]; then
    echo "build.sh: no [package] version in $root/Cargo.toml" >&2
    exit 1
fi
image="${GPUSLACK_IMAGE:-ghcr.io/gpuslack/gpuslack}:${GPUSLACK_TAG:-$version}"
push=no
case "${1:-}" in
    --print) echo "$image"; exit 0 ;;
    --push) push=yes; shift ;;
esac
docker=${DOCKER:-docker}
"$docker" build -f deploy/container/Dockerfile -t "$image" "$@" .
if [ "$push" = yes ]; then
    "$docker" push "$image"
fi
echo "built $image"

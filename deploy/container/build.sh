#!/bin/sh
# Builds the image deploy/kubernetes names, ghcr.io/gpuslack/gpuslack:VERSION (VERSION being the
# gpuslack package's in Cargo.toml), for linux/amd64 and linux/arm64 at once, from the binaries
# scripts/dist/build.sh links against glibc 2.28 (the same files the wheel and the .deb hold).
# From anywhere in the repository:
#
#   deploy/container/build.sh            # scripts/dist/build.sh, then docker buildx build (both platforms)
#   deploy/container/build.sh --print    # the image name only
#   deploy/container/build.sh --push     # build and push the multi-platform image
#
# GPUSLACK_IMAGE (default ghcr.io/gpuslack/gpuslack) and GPUSLACK_TAG (default VERSION) name
# another registry or tag; change the DaemonSet's `image:` to match (deploy/kubernetes/
# kustomization.yaml's `images:`). GPUSLACK_PLATFORMS (default linux/amd64,linux/arm64) picks
# fewer. Without --push, buildx keeps a multi-platform image in its cache only; `--load` among
# the further arguments (which go to `docker buildx build`) loads one platform's into Docker.
# The context is the dist folder's image/ (two binaries), not the repository.
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
dist=$(scripts/dist/build.sh --print-dir)
scripts/dist/build.sh
docker=${DOCKER:-docker}
if [ "$push" = yes ]; then
    set -- --push "$@"
fi
"$docker" buildx build --platform "${GPUSLACK_PLATFORMS:-linux/amd64,linux/arm64}" \
    -f deploy/container/Dockerfile -t "$image" "$@" "$dist/image"
echo "built $image"

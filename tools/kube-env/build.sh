#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) once into a
# cache folder; the kube tests and benchmarks find the binaries there. A rerun with the binaries present is a no-op.
#   TRIMTAB_KUBE_CACHE   cache root (default $HOME/.cache/trimtab-kube/<release>); binaries land in $TRIMTAB_KUBE_CACHE/bin
#   TRIMTAB_KUBE_JOBS    parallel Go compile jobs (default 2; 1 keeps memory and CPU low on a shared machine)
# Prints the cache's bin folder on its last line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
release="v1.37.2"        # k8s.io/kubernetes in go.mod; keep the two in step
kwok_version="v0.8.0"    # built from its own module: its go.mod has no replace directives
cache="${TRIMTAB_KUBE_CACHE:-$HOME/.cache/trimtab-kube/$release}"
bin="$cache/bin"
go_cmd="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
[ -x "$go_cmd" ] || { echo "build.sh: no Go toolchain (set GO=/path/to/go)" >&2; exit 2; }
export GOMODCACHE="$cache/gomod" GOCACHE="$cache/gocache" GOFLAGS="-modcacherw -p=${TRIMTAB_KUBE_JOBS:-2}"
mkdir -p "$bin"

minor="$(echo "$release" | cut -d. -f2)"
version_flags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_flags+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

build() {  # build <output name> <package>, from this folder's module
  [ -x "$bin/$1" ] && return 0
  echo "building $1 ($2)" >&2
  (cd "$here" && nice -n 19 "$go_cmd" build -mod=readonly -trimpath -ldflags "$version_flags" -o "$bin/$1.tmp" "$2")
  mv "$bin/$1.tmp" "$bin/$1"
}

build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
if [ ! -x "$bin/kwok" ]; then
  echo "building kwok (sigs.k8s.io/kwok/cmd/kwok@$kwok_version)" >&2
  GOBIN="$bin" nice -n 19 "$go_cmd" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
fi
echo "$release $kwok_version" > "$cache/VERSION"
echo "$bin"

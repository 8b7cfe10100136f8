#!/usr/bin/env bash
# Builds kube-apiserver and kubelet v1.20.2 from Debian bookworm's source package `kubernetes`
# with Debian's Go 1.19, once per machine, into "$1/bin" (a cache outside any clone).
# Nothing comes from an image registry or the Go module proxy: the source package vendors every
# module (GOPROXY=off). The why of each step is in ../shared/notes/k8s-control-plane.md; in short:
#  - Debian ships no kube-apiserver or kubelet binary, only this source;
#  - vendored reflect2 v1.0.1 crashes the apiserver under Go >= 1.18 on the first custom-object
#    create, so Debian's reflect2 v1.0.2 replaces it;
#  - the tree's `make` (not `go build`) generates the openapi code the tarball lacks.
# Idempotent: a cache with both binaries is left as it is. Needs root (apt-get).
set -euo pipefail

cache="${1:?usage: build-kubernetes.sh CACHE_DIR}"
version=v1.20.2
bin="$cache/bin"
if [[ -x "$bin/kube-apiserver" && -x "$bin/kubelet" ]]; then
    echo "kubernetes $version: cached in $bin"
    exit 0
fi

work="$cache/build"
rm -rf "$work"
mkdir -p "$work" "$bin"
cd "$work"

# A private apt configuration with a deb-src line, so the machine's own sources stay as they are.
apt_dir="$work/apt"
mkdir -p "$apt_dir/lists/partial"
cat >"$apt_dir/sources.list" <<SOURCES
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
SOURCES
apt_src=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
         -o "Dir::State::Lists=$apt_dir/lists")
echo "kubernetes $version: fetching Debian's source package"
apt-get "${apt_src[@]}" -qq update
apt-get "${apt_src[@]}" -qq source --download-only kubernetes

echo "kubernetes $version: fetching Debian's Go 1.19 and reflect2 v1.0.2 (extracted, not installed)"
command -v rsync >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync
apt-get -qq download golang-1.19-go golang-1.19-src golang-github-modern-go-reflect2-dev
mkdir -p root
for deb in ./*.deb; do dpkg -x "$deb" root; done
export GOROOT="$work/root/usr/lib/go-1.19"
export PATH="$GOROOT/bin:$PATH"
go version

orig=$(ls kubernetes_*.orig.tar.* | head -n1)
mkdir -p src
tar -xf "$orig" -C src --strip-components=1
cd src
reflect2=vendor/github.com/modern-go/reflect2
rm -rf "$reflect2"
mkdir -p "$reflect2"
cp -r "$work"/root/usr/share/gocode/src/github.com/modern-go/reflect2/. "$reflect2/"
rm -f "$reflect2/go.mod" "$reflect2/go.sum"

cat >"$work/version" <<VERSION
KUBE_GIT_VERSION='$version'
KUBE_GIT_MAJOR='1'
KUBE_GIT_MINOR='20'
KUBE_GIT_TREE_STATE='clean'
VERSION
echo "kubernetes $version: building kube-apiserver and kubelet (about 10 minutes on 2 cores)"
GOPROXY=off GOSUMDB=off GOFLAGS=-mod=vendor KUBE_GIT_VERSION_FILE="$work/version" \
    make WHAT="cmd/kube-apiserver cmd/kubelet"
for name in kube-apiserver kubelet; do
    install -m 0755 "_output/bin/$name" "$bin/$name.tmp"
    mv "$bin/$name.tmp" "$bin/$name"
done
cd /
rm -rf "$work"
echo "kubernetes $version: built into $bin"

#!/usr/bin/env bash
# Builds the control-plane binaries the Kubernetes driver's tests start (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok,
# kwokctl) and the real node's kubelet from the Go module proxy only, into
# $TOOLS_DIR/<tool>/<version>/. Each tool is skipped when its versioned binary
# already exists, so a warm cache costs nothing. Cold: ~7 min (+ kubelet) and
# ~2.9 GB of module cache on 2 cores.
#
# usage: kube-tools.sh [TOOL...]   (no argument: every tool)
# Each run works in its own scratch folder, so two runs building different
# tools do not disturb each other.
set -euo pipefail
TOOLS_DIR=${TOOLS_DIR:-$HOME/.cache/svc-tools}
K8S=${K8S_VERSION:-v1.37.2}
ETCD=${ETCD_VERSION:-v3.6.16}
KWOK=${KWOK_VERSION:-v0.8.0}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p "$TOOLS_DIR"
WORK=$(mktemp -d "$TOOLS_DIR/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
want=("$@")

# have TOOL VERSION: the tool is built, or was not asked for.
have() {
  [ -x "$TOOLS_DIR/$1/$2/$1" ] && return 0
  [ ${#want[@]} -eq 0 ] && return 1
  local w; for w in "${want[@]}"; do [ "$w" = "$1" ] && return 1; done
  return 0
}

# etcd: go.etcd.io/etcd/server/v3 carries replace directives, so `go install
# pkg@version` refuses it; build it through a one-file wrapper module.
if ! have etcd "$ETCD"; then
  echo "building etcd $ETCD"
  d=$WORK/etcd-$ETCD; mkdir -p "$d"; cd "$d"
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >main.go
  go mod init etcdbuild >/dev/null 2>&1
  go get go.etcd.io/etcd/server/v3@$ETCD go.etcd.io/etcd/api/v3@$ETCD go.etcd.io/etcd/client/pkg/v3@$ETCD \
    go.etcd.io/etcd/client/v3@$ETCD go.etcd.io/etcd/pkg/v3@$ETCD
  go mod tidy
  mkdir -p "$TOOLS_DIR/etcd/$ETCD"
  go build -trimpath -ldflags "-s -w" -o "$TOOLS_DIR/etcd/$ETCD/etcd.tmp" .
  mv "$TOOLS_DIR/etcd/$ETCD/etcd.tmp" "$TOOLS_DIR/etcd/$ETCD/etcd"
fi

# Kubernetes: k8s.io/kubernetes replaces its staging modules with ./staging/...;
# a wrapper module points each of them at its published v0.<minor>.<patch>.
KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
missing=()
for c in "${KUBE_CMDS[@]}"; do have "$c" "$K8S" || missing+=("$c"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "building ${missing[*]} $K8S"
  d=$WORK/kube-$K8S; mkdir -p "$d"; cd "$d"
  go mod download k8s.io/kubernetes@$K8S
  mod=$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S/go.mod
  gover=$(awk '/^go /{print $2; exit}' "$mod")
  staging=v0.${K8S#v1.}
  {
    echo "module kubebuild"; echo; echo "go $gover"; echo
    grep '^godebug' "$mod" && echo
    echo "require k8s.io/kubernetes $K8S"; echo; echo "replace ("
    sed -n '/^replace/,/^)/p' "$mod" | awk '/=>/{print $1}' | grep -v -e sample-cli-plugin -e sample-controller |
      while read -r m; do echo "	$m => $m $staging"; done
    echo ")"
  } >go.mod
  pkgs=(); for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  go get -tool "${pkgs[@]}"
  minor=${K8S#v1.}; minor=${minor%%.*}
  ldf="-s -w -X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  # One go build for every command: their packages compile once and their
  # links run side by side rather than one after another.
  mkdir -p "$d/bin"
  go build -trimpath -ldflags "$ldf" -o "$d/bin/" "${pkgs[@]}"
  for c in "${missing[@]}"; do
    mkdir -p "$TOOLS_DIR/$c/$K8S"
    mv "$d/bin/$c" "$TOOLS_DIR/$c/$K8S/$c" # a rename: $WORK is under $TOOLS_DIR
  done
fi

# kwok and kwokctl have no replace directives: plain go install.
for c in kwok kwokctl; do
  if ! have "$c" "$KWOK"; then
    echo "building $c $KWOK"
    mkdir -p "$TOOLS_DIR/$c/$KWOK"
    (cd /tmp && GOBIN="$TOOLS_DIR/$c/$KWOK" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/$c@$KWOK")
  fi
done

// Command svc-image builds the product's container images as OCI archives
// (internal/ociimage; `make images`), with no docker and no registry:
//
//	svc-image -out DIR -repo ghcr.io/svc-dev -tag 0.1.0 apiserver=bin/release/apiserver podagent=bin/release/podagent
//
// writes DIR/svc-<name>.oci.tar, named <repo>/svc-<name>:<tag>, for each
// name=binary and prints one line per image: reference, digest, sizes.
// The same binaries and host packages give the same digests.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/svc-dev/svc/podagent/internal/ociimage"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("svc-image", flag.ContinueOnError)
	out := fs.String("out", "dist/images", "directory of the archives")
	repo := fs.String("repo", "ghcr.io/svc-dev", "image repository prefix")
	tag := fs.String("tag", "dev", "image tag")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: svc-image [-out DIR] [-repo R] [-tag T] NAME=BINARY...")
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, a := range fs.Args() {
		name, bin, ok := strings.Cut(a, "=")
		if !ok || name == "" || bin == "" {
			fmt.Fprintf(os.Stderr, "svc-image: %q is not NAME=BINARY\n", a)
			return 2
		}
		if err := build(*out, *repo, *tag, name, bin); err != nil {
			fmt.Fprintf(os.Stderr, "svc-image: %s: %v\n", name, err)
			return 1
		}
	}
	return 0
}

func build(out, repo, tag, name, bin string) error {
	img, err := ociimage.Build(ociimage.Spec{Binary: bin, Name: name, Cmd: []string{"serve"}})
	if err != nil {
		return err
	}
	ref := fmt.Sprintf("%s/svc-%s:%s", repo, name, tag)
	dst := filepath.Join(out, "svc-"+name+".oci.tar")
	if err := ociimage.Write(dst, ref, img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	sz, err := ociimage.Sizes(img)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s uncompressed=%.1fMB compressed=%.1fMB\n", ref, d, dst, float64(sz.Uncompressed)/1e6, float64(sz.Compressed)/1e6)
	return nil
}

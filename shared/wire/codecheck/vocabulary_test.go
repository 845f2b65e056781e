package codecheck_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/wire/codecheck"
)

// TestErrorVocabulary holds the shared module to the one error vocabulary
// (docs/errors.md). One exception: the local object store's presigned-URL
// server (objstore/fs) answers as a store in S3's place, read by git-lfs
// and the store client rather than by API callers; importing wire there
// would also close a folder cycle (wire imports objstore).
func TestErrorVocabulary(t *testing.T) {
	t.Parallel()
	got, err := codecheck.Check("../..", "objstore/fs")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		t.Error(v)
	}
}

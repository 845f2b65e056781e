package wire

import (
	"strings"
	"testing"
)

func TestLFSBatchRequestCheck(t *testing.T) {
	t.Parallel()
	oid := strings.Repeat("a", 64)
	one := []LFSPointer{{OID: oid, Size: 1}}
	many := make([]LFSPointer, LFSMaxObjects+1)
	tests := []struct {
		name   string
		req    LFSBatchRequest
		status int // 0: accepted
		code   string
	}{
		{"upload", LFSBatchRequest{Operation: LFSUpload, Objects: one}, 0, ""},
		{"download basic sha256", LFSBatchRequest{Operation: LFSDownload, Transfers: []string{"tus", "basic"}, HashAlgo: "sha256", Objects: one}, 0, ""},
		{"unknown operation", LFSBatchRequest{Operation: "delete", Objects: one}, 422, "invalid_operation"},
		{"other hash", LFSBatchRequest{Operation: LFSUpload, HashAlgo: "sha512", Objects: one}, 409, "unsupported_hash_algo"},
		{"no basic transfer", LFSBatchRequest{Operation: LFSUpload, Transfers: []string{"tus"}, Objects: one}, 422, "unsupported_transfer"},
		{"no objects", LFSBatchRequest{Operation: LFSUpload}, 422, "no_objects"},
		{"too many objects", LFSBatchRequest{Operation: LFSUpload, Objects: many}, 413, "too_many_objects"},
	}
	for _, tt := range tests {
		err := tt.req.Check()
		switch {
		case tt.status == 0 && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.status != 0 && (err == nil || err.Status != tt.status || err.Code != tt.code || err.Type != TypeInvalidRequest):
			t.Errorf("%s: %+v, want %d %s", tt.name, err, tt.status, tt.code)
		}
	}
}

func TestLFSPointerCheck(t *testing.T) {
	t.Parallel()
	oid := strings.Repeat("0", 64)
	for _, tt := range []struct {
		p  LFSPointer
		ok bool
	}{
		{LFSPointer{OID: oid, Size: 0}, true},
		{LFSPointer{OID: oid, Size: LFSMaxObjectBytes}, true},
		{LFSPointer{OID: oid, Size: LFSMaxObjectBytes + 1}, false},
		{LFSPointer{OID: oid, Size: -1}, false},
		{LFSPointer{OID: strings.ToUpper(strings.Repeat("a", 64)), Size: 1}, false},
		{LFSPointer{OID: "../x", Size: 1}, false},
		{LFSPointer{OID: oid[:63], Size: 1}, false},
	} {
		if e := tt.p.Check(); (e == nil) != tt.ok || (e != nil && e.Code != 422) {
			t.Errorf("%+v: %+v, want ok=%v", tt.p, e, tt.ok)
		}
	}
}
